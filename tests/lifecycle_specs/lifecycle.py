"""Impls that leave work behind them (processes that hide from their worker, a thread that writes later) or that
count their calls, for the run's life-cycle tests. Each reads where to leave its traces from the environment:
``LIFECYCLE_DIR`` (pid files, the call counter), ``LIFECYCLE_OUT`` (the run's output folder), ``LIFECYCLE_SCALE``
(the counted impl's factor) and ``LIFECYCLE_SLEEP`` (seconds the counted impl sleeps per call)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Seconds a process or thread left behind waits before it writes: long after its case, while the run goes on or
#: after it ended.
LATER = 3.0


def _traces() -> Path:
    return Path(os.environ["LIFECYCLE_DIR"])


def _late_writer(name: str) -> None:
    """In a process left behind: record its pid, wait, then rewrite results.json and leave a file of its own."""
    (_traces() / f"{name}.pid").write_text(str(os.getpid()))
    time.sleep(LATER)
    out = Path(os.environ["LIFECYCLE_OUT"])
    (out / "results.json").write_text(json.dumps({"rewritten by": name}))
    (_traces() / f"{name}.wrote").write_text("late")


def _started(name: str) -> None:
    """Wait until the process left behind as ``name`` has recorded its pid (so that a test can look for it)."""
    deadline = time.monotonic() + 10
    while not (_traces() / f"{name}.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def good(x):
    return x * 2


#: The factor of :func:`counted`; a test rewrites this line to change the kernel's code.
SCALE = 2.0


def counted(x):
    """``x * SCALE``; appends the call's input size to ``LIFECYCLE_DIR/calls`` (one line per call)."""
    with open(_traces() / "calls", "a") as fh:
        fh.write(f"{x.numel()}\n")
    time.sleep(float(os.environ.get("LIFECYCLE_SLEEP", "0")))
    return x * SCALE


def reports_its_job(x):
    """Records the pid of the job process measuring it (its worker's parent) the first time, then waits long
    enough for a test to kill that job."""
    mark = _traces() / "job.pid"
    if not mark.exists():
        mark.write_text(str(os.getppid()))
        time.sleep(60)
    return x * 2


def double_fork_daemon(x):
    """The classic daemon: fork, setsid, fork again; the middle process exits at once."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                _late_writer("daemon")
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()
    _started("daemon")
    return x * 2


def background_child(x):
    """A plain child process left running."""
    code = "import lifecycle; lifecycle._late_writer('child')"
    subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(__file__))
    _started("child")
    return x * 2


def stubborn_grandchild(x):
    """A child that starts a grandchild ignoring SIGTERM, and exits: the grandchild is left to whoever adopts it."""
    if os.fork() == 0:
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                _late_writer("grandchild")
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()
    _started("grandchild")
    return x * 2


def late_thread(x):
    """A thread that writes into the output folder a moment after the call returned."""

    def write() -> None:
        time.sleep(1.0)
        (Path(os.environ["LIFECYCLE_OUT"]) / "late.txt").write_text("written after the case")
        (_traces() / "thread.wrote").write_text("late")

    threading.Thread(target=write, daemon=True).start()
    return x * 2


def daemon_then_crash(x):
    """A double-forked daemon, then the worker's own end: the daemon is handed up past the dead worker."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                _late_writer("orphan")
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()
    _started("orphan")
    os._exit(3)
