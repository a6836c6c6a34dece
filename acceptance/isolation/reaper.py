"""Nothing the code under test spawns outlives its case: child subreapers, and the descendants of a process found
and killed.

A process that exits leaves its children to its nearest ancestor marked as a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+), or to init when there is none. Every process that runs or forks
the code under test is marked (:func:`become_subreaper`): the worker itself, the fork server the runner starts
its workers from, and each job process of ``--jobs``. A daemon the code under test starts the classic way
(fork, ``setsid``, fork again, the middle process exits) therefore stays a child of its worker instead of
escaping to init, and the worker finds it with the rest of its descendants after each call
(:func:`kill_descendants`: everything below the process, read from ``/proc``, killed with ``SIGKILL`` round after
round until nothing is left, since a process killed in one round hands its own children up for the next). What a
worker leaves behind when it is itself killed or crashes is handed up to the fork server or job it was forked
from, where :func:`sweep` finds it: a child there that is neither a process this one started
(``multiprocessing.active_children``) nor still in that parent's process group (every worker leads its own) is
an orphan, and is killed with its descendants.

Limits: the subreaper is Linux only. On macOS and other systems without it (and without ``/proc``), a
double-forked daemon leaves the worker's process tree and is not found: only the worker's own process group is
killed with it (the children that did not call ``setsid``).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import select
import signal
import sys
import time

#: ``prctl`` option that makes the calling process a child subreaper (``<linux/prctl.h>``).
PR_SET_CHILD_SUBREAPER = 36

#: Seconds :func:`kill_descendants` keeps killing a tree that goes on forking before it gives up.
GIVE_UP_AFTER = 5.0


#: Whether this process forks its workers itself (a job process), rather than from the fork server.
_workers_here = False


def become_subreaper(*, workers_here: bool = False) -> bool:
    """Mark this process a child subreaper: orphaned descendants are re-parented to it, not to init. Whether the
    platform allowed it (Linux only). ``workers_here``: this process forks its workers itself (a job process:
    :func:`sweep_workers_parent` then looks at its own children)."""
    global _workers_here
    if not sys.platform.startswith("linux"):
        return False
    _workers_here = workers_here
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stat(pid: int | str) -> tuple[int, int, str] | None:
    """(parent pid, process group, state letter) of process ``pid`` from ``/proc/<pid>/stat``; ``None`` when it is
    gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), fields[0].decode()


def children(pid: int) -> list[int] | None:
    """The children of process ``pid``, zombies included (``/proc/<pid>/task/*/children``, ~0.1 ms); ``None``
    where the kernel does not offer that file (then :func:`descendants` scans all of ``/proc``)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None if not os.path.isdir("/proc/self") else []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        except FileNotFoundError:
            if task == str(pid):
                return None  # no CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return found


def descendants(root: int) -> list[int]:
    """The live processes below ``root`` (children, their children, ...; zombies left out), parents first, from one
    scan of ``/proc``; empty where there is no ``/proc``."""
    listed = children(root)
    if listed is not None and not listed:
        return []  # the usual case: nothing below it, known without scanning /proc
    below: dict[int, list[int]] = {}
    state: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if name.isdigit():
            stat = _stat(name)
            if stat is not None:
                below.setdefault(stat[0], []).append(int(name))
                state[int(name)] = stat[2]
    found, queue = [], list(below.get(root, []))
    while queue:
        pid = queue.pop(0)
        if state.get(pid) != "Z":
            found.append(pid)
        queue += below.get(pid, [])
    return found


def _reap() -> None:
    """Collect the exit status of this process's children that have ended (zombies left by a kill)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except (ChildProcessError, OSError):
            return
        if pid == 0:
            return


def _reap_all(deadline: float) -> None:
    """Reap this process's children until none is left (those just killed exit within moments), so that none is
    left a zombie for the code under test's next ``os.wait()`` to collect instead of its own child."""
    while time.monotonic() <= deadline:
        _reap()
        if not children(os.getpid()):
            return
        time.sleep(0.001)


def kill_descendants(root: int | None = None) -> list[int]:
    """``SIGKILL`` every process below ``root`` (default: this process, which then also reaps them), round after
    round until none is left (a killed process's children are handed up, to ``root`` when it is a subreaper); the
    pids killed, sorted. Gives up after :data:`GIVE_UP_AFTER` seconds of a tree that forks faster than it dies."""
    mine = root is None
    root = os.getpid() if root is None else root
    killed: set[int] = set()
    deadline = time.monotonic() + GIVE_UP_AFTER
    while True:
        if mine:
            _reap()
        found = descendants(root)
        if not found or time.monotonic() > deadline:
            if mine and killed:
                _reap_all(deadline)
            return sorted(killed)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.001)  # the killed ones exit and hand their children up


def sweep(parent: int) -> list[int]:
    """Kill the orphans among the children of ``parent`` (the fork server, or this job process): a live child that
    this process did not start (``multiprocessing.active_children``) and that left ``parent``'s process group
    (every worker leads its own; what a dead worker left behind is handed up here), with its descendants. The pids
    killed, sorted."""
    listed = children(parent)
    own = _stat(parent)
    if not listed or own is None:
        return []
    started = {p.pid for p in multiprocessing.active_children()}
    killed: list[int] = []
    for pid in listed:
        stat = _stat(pid)
        if pid in started or stat is None or stat[2] == "Z" or stat[1] == own[1]:
            continue
        killed += kill_descendants(pid)
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    if parent == os.getpid():
        _reap_these(killed)
    return sorted(killed)


def _reap_these(pids: list[int]) -> None:
    """Collect the exit status of the children ``pids`` once they have ended (never ``waitpid(-1)``: the
    processes this one started itself are reaped by whoever started them)."""
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass


def exit_fd(pid: int) -> int | None:
    """A pidfd of process ``pid`` (Linux 5.3+), readable once it has exited: unlike a pipe it inherited, which a
    process it forked keeps open after it ends; ``None`` where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_exit(fd: int | None, timeout: float) -> None:
    """Wait at most ``timeout`` seconds for the process of pidfd ``fd`` (:func:`exit_fd`) to exit (so that what
    it leaves has been handed up when :func:`sweep` looks); at once for ``None``."""
    if fd is not None:
        select.select([fd], [], [], timeout)


def workers_parent() -> int | None:
    """The process this one starts its workers from: itself in a job process
    (:func:`acceptance.isolation.forkserver.fork_here`), else the fork server, when it runs."""
    if _workers_here:
        return os.getpid()
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    return getattr(server, "_forkserver_pid", None)


def sweep_workers_parent() -> list[int]:
    """:func:`sweep` of :func:`workers_parent` (nothing when no fork server was started)."""
    parent = workers_parent()
    return sweep(parent) if parent is not None else []
