"""Inside a worker process: the serve loop, and one call's answer with the checks around it (inputs written in
place, child processes left running, files written to the run's output folder).

The messages are :mod:`acceptance.isolation.protocol`; the runner's side is :mod:`acceptance.isolation.worker`.
This module is what the child process runs (:func:`serve`): each :class:`~acceptance.isolation.protocol.Call`'s
reference is resolved once per worker (:func:`_cached`), and both sides share what a batch's inputs are
(:func:`call_inputs`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import resource
import select
import signal
import struct
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import xxhash

from acceptance.formats import dtypes
from acceptance.isolation import RUN_FILES, pristine, reaper
from acceptance.isolation.protocol import (
    SAME,
    Answer,
    Answered,
    Broke,
    Call,
    Generate,
    InputsFailed,
    ObjectRef,
    Request,
    RoleRef,
    Same,
    Which,
    Wrote,
)
from acceptance.isolation.transport import dumps, recv_request, send

if TYPE_CHECKING:
    from acceptance.spec.inputs import Recipe, RoleInputs

Tensors = tuple[torch.Tensor, ...]


def call_inputs(sets: tuple[Tensors, ...], which: Which) -> Tensors:
    """The inputs a call takes from a batch's ``sets`` ((impl's,) or (impl's, reference)): :attr:`Which.IMPL` the
    impl's, :attr:`Which.REFERENCE` the reference's, :attr:`Which.FLOAT64` float64 copies of the reference's
    (:func:`acceptance.numerics.oracle.float64_inputs`)."""
    if which == Which.FLOAT64:
        from acceptance.numerics.oracle import float64_inputs

        return float64_inputs(sets[-1])
    return sets[min(which, len(sets) - 1)]


def _digest(t: torch.Tensor) -> int:
    """A checksum of a tensor's bytes (XXH3-64 on the host, ~17 GB/s on one core where CRC-32 ran at ~3.9: the
    worker checks every call's inputs with it; an integer weighted sum on a device)."""
    if t.numel() == 0:
        return 0
    bits = dtypes.bits_view(t.detach().contiguous())
    if t.device.type == "cpu":
        return xxhash.xxh3_64_intdigest(bits.numpy().view("u1").data)
    flat = bits.reshape(-1).to(torch.int64)
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.int64)
    return hash((int(flat.sum()), int((flat * weights).sum())))


def _changed(now: torch.Tensor, before: torch.Tensor) -> int:
    """Elements whose bits differ (every element when the shape changed)."""
    if now.shape != before.shape or now.dtype != before.dtype:
        return max(now.numel(), before.numel())
    if now.is_floating_point():
        return int((dtypes.bits_view(now.contiguous()) != dtypes.bits_view(before.contiguous())).sum())
    return int((now != before).sum())


def snapshot(folder: Path | None) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of the files of the output folder ``folder``, but the run's own journal and lock
    (``{}`` for ``None``)."""
    if folder is None:
        return {}
    found = {}
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name not in RUN_FILES and e.is_file():
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    found[e.name] = (st.st_size, st.st_mtime_ns)
    except OSError:
        pass
    return found


def remove_written(folder: Path, before: dict[str, tuple[int, int]]) -> list[str]:
    """The files of ``folder`` that appeared or changed since its :func:`snapshot` ``before``, removed; sorted."""
    touched = sorted(name for name, stamp in snapshot(folder).items() if before.get(name) != stamp)
    for name in touched:
        (folder / name).unlink(missing_ok=True)
    return touched


class FolderWatch:
    """Files written to a folder during a call: :meth:`start` before it, :meth:`written` after it.

    On Linux an inotify watch on the folder (one non-blocking read per look, however many files it holds);
    elsewhere a :func:`snapshot` before and after. Files that appeared or changed and still exist count, but
    the run's own :data:`RUN_FILES`; :meth:`written` removes them. Subfolders are not watched.
    """

    #: IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
    _MASK = 0x2 | 0x4 | 0x8 | 0x80 | 0x100
    _OVERFLOW = 0x4000  # IN_Q_OVERFLOW: events were lost
    _EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows

    def __init__(self, folder: str):
        self.folder = folder
        self._fd = self._inotify(folder)
        self._before: dict[str, tuple[int, int]] = {}

    @classmethod
    def _inotify(cls, folder: str) -> int | None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(folder), cls._MASK) < 0:
                os.close(fd)
                return None
            return fd
        except (AttributeError, OSError):  # not Linux
            return None

    def _events(self) -> tuple[set[str], bool]:
        """Names in the events queued since the last read, and whether events were lost."""
        names: set[str] = set()
        lost, fd = False, self._fd
        assert fd is not None, "events read without an inotify watch"
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return names, lost
            at = 0
            while at + self._EVENT.size <= len(data):
                _, mask, _, length = self._EVENT.unpack_from(data, at)
                at += self._EVENT.size
                lost |= bool(mask & self._OVERFLOW)
                if length:
                    names.add(os.fsdecode(data[at : at + length].rstrip(b"\0")))
                at += length

    def start(self) -> None:
        if self._fd is None:
            self._before = snapshot(Path(self.folder))
        else:
            self._events()  # what happened before the call: the run's journal, files removed after a call

    def written(self) -> list[str]:
        """The files the call wrote (removed now), sorted."""
        if self._fd is None:
            return remove_written(Path(self.folder), self._before)
        names, lost = self._events()
        if lost:
            touched = list(snapshot(Path(self.folder)))
        else:
            touched = [name for name in names - RUN_FILES if os.path.isfile(os.path.join(self.folder, name))]
        for name in touched:
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass
        return sorted(touched)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def _cached(cache: dict[Hashable, Callable], ref: RoleRef) -> Callable:
    """The callable of ``ref``, resolved once per worker (a picklable object sent as it is: by its identity); what
    ``ref`` reaches through its resolver is cached the same way (a setup reference reaches the cached adapter)."""
    key: Hashable = id(ref.fn) if isinstance(ref, ObjectRef) else ref
    return cache.get(key) or cache.setdefault(key, ref.resolve(lambda inner: _cached(cache, inner)))


def die_with(pid: int) -> None:  # pragma: no cover - runs in a worker or a job process
    """End this process when process ``pid`` (the one that started it) ends, however it ends, ``kill -9``
    included.

    A worker's or a job's parent is the fork server, not the process it works for, and it holds the fork
    server's liveness pipe: left alone, a worker of a killed runner would wait for a call forever and keep the
    fork server alive with it. A thread waits on a pidfd of ``pid`` (Linux 5.3+; elsewhere it looks once a
    second) and ends this process's group (a worker leads its own)."""

    def wait() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    pass
        reaper.kill_descendants()  # the code under test's processes, daemons included
        if os.getpgid(0) == os.getpid():  # a worker: its children go too
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=wait, name="acceptance-watchdog", daemon=True).start()


def serve(
    conn: multiprocessing.connection.Connection,
    memory_limit: int | None,
    threads: int | None = None,
    guard: str | None = None,
    owner: int | None = None,
    foreign: tuple[multiprocessing.connection.Connection, ...] = (),
    reference: bool = False,
) -> None:  # pragma: no cover
    """The worker's loop (runs in the child): each message is one :class:`Batch` of calls, answered call by call.
    ``foreign``: connections of the process this one was forked from, closed first. ``reference``: a reference
    worker (baselines, oracles, fingerprints; never an impl): its global state is captured once it is set up and
    checked around its calls (:class:`Pristine`)."""
    for held in foreign:
        held.close()
    os.setsid()
    reaper.become_subreaper()  # a daemon the code under test starts (fork, setsid, fork) stays below this process
    if owner is not None:
        die_with(owner)
    if threads:
        torch.set_num_threads(threads)
    if hasattr(ctypes, "CDLL"):
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the fork server
        except (OSError, AttributeError):
            pass
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    if memory_limit:
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_limit, resource.RLIM_INFINITY))
    cache: dict[Hashable, Callable] = {}
    recipe: Recipe | None = None
    watch = FolderWatch(guard) if guard else None
    kept = Pristine() if reference else None
    while True:
        try:
            request: Request = recv_request(conn)
        except EOFError:  # the runner is done with this worker
            from acceptance.cache.store import settle_shared

            settle_shared()  # the cache's writes of the inputs made here
            os._exit(0)
        sets = request.sets
        if isinstance(sets, Generate):  # the inputs are made here, from the case's recipe
            recipe = sets.recipe if sets.recipe is not None else recipe
            try:
                assert recipe is not None, "a batch to make inputs for before any recipe"
                sets = _input_sets(recipe(sets.trial))
            except Exception as exc:  # a spec whose inputs cannot be made: the batch ends here
                send(conn, dumps(InputsFailed(f"{type(exc).__name__}: {exc}", time.monotonic())))
                continue
        _run_batch(conn, cache, sets, request.calls, memory_limit, watch, kept)
        del request, sets  # the batch's tensors are not held while waiting for the next
        if recipe is not None:
            try:
                recipe.flush()  # a case's inputs made here, once complete, queued for the cache's writer thread
            except Exception:  # the cache is best effort: it never costs the worker, or the call after, its life
                pass


def _run_batch(
    conn: multiprocessing.connection.Connection,
    cache: dict[Hashable, Callable],
    sets: tuple[Tensors, ...],
    calls: tuple[Call[RoleRef], ...],
    memory_limit: int | None,
    watch: FolderWatch | None,
    kept: Pristine | None = None,
) -> None:  # pragma: no cover - runs in a worker
    """Make a batch's calls in order, each answer sent as it is ready; the batch stops at the first answer that is
    not :class:`Answered`, or that reports an input changed. ``kept``: a reference worker's state, checked before
    the batch's last answer and after each call that is not a trial's (a fingerprint, a setup); a change is that
    answer's :class:`Broke` (with ``restart``), and this process ends once it is sent."""
    digests: dict[int, int] = {}  # of the batch's input tensors, as the previous call left them
    last: dict[str, Tensors] = {}  # role -> the outputs of the batch's previous call, of at most SAME_BYTES
    if kept is not None:
        pristine.reseed()
    for k, call in enumerate(calls):
        # float64 copies are the call's own: nothing else reads them, so they need no digest
        answer = _answer(
            cache,
            call.ref,
            call_inputs(sets, call.inputs),
            call.params,
            call.device,
            memory_limit,
            watch,
            digests,
            check=call.inputs != Which.FLOAT64,
        )
        if isinstance(answer, Answered) and not isinstance(answer.outputs, Same):
            outs = answer.outputs
            if call.role in last and same_outputs(outs, last[call.role]):
                answer = dataclasses.replace(answer, outputs=SAME)  # a repeat's bits: not sent again
            small = sum(o.numel() * o.element_size() for o in outs) <= SAME_BYTES
            last = {call.role: outs} if small else {}  # larger outputs are not held while the next call runs
            del outs
        try:
            data = dumps(dataclasses.replace(answer, sent_at=time.monotonic()))
        except Exception as exc:  # an output that cannot be pickled
            answer = Broke(f"returned outputs that cannot be sent back ({type(exc).__name__}: {exc})")
            data = dumps(dataclasses.replace(answer, sent_at=time.monotonic()))
        stop = not isinstance(answer, Answered) or bool(answer.changed)  # the runner stops reading this batch here
        ended = isinstance(answer, Broke) and answer.ended
        if kept is not None and (stop or k == len(calls) - 1 or call.role not in ("baseline", "oracle")):
            changed = kept.changes()
            if changed:
                answer = Broke(kept.cause(changed), restart=True)
                data, stop = dumps(dataclasses.replace(answer, sent_at=time.monotonic())), True
        del answer  # the outputs live on in the message only
        send(conn, data)
        del data
        if ended:  # threads of the code under test run on: they end with this process, now
            os._exit(0)
        if kept is not None and kept.broken:
            os._exit(0)  # nothing more is computed in a changed state: the runner replaces this worker
        if stop:
            break


class Pristine:
    """A reference worker's global state as it started (:mod:`acceptance.isolation.pristine`), compared after its
    calls; ``broken`` once a change was found."""

    def __init__(self) -> None:
        pristine.remember()
        self.start = pristine.capture()
        self.broken = False

    def changes(self) -> list[str]:
        found = pristine.changes(self.start)
        self.broken = self.broken or bool(found)
        return found

    @staticmethod
    def cause(changed: list[str]) -> str:
        """The :class:`Broke` cause of a change: it completes "<role> ... in trial t"."""
        return (
            f"ran in a reference worker whose global state a baseline or oracle call changed "
            f"({'; '.join(changed[:4])}); its answer was dropped and the worker replaced"
        )


#: Largest outputs (bytes) of a call that the worker keeps to compare with the next call of the same role:
#: larger ones travel in full, so that the worker never holds two calls' large outputs at once.
SAME_BYTES = 16 << 20


def same_outputs(a: Tensors, b: Tensors) -> bool:
    """Whether two calls' outputs are identical bit for bit: as many, and each of the same dtype, shape and
    bytes (NaN payloads and signed zeros included); ``False`` for a tensor whose bytes cannot be read as they
    are (:func:`acceptance.formats.dtypes.byte_view`)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=False):
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        bx, by = dtypes.byte_view(x), dtypes.byte_view(y)
        if bx is None or by is None or bx.device != by.device or not torch.equal(bx, by):
            return False
    return True


def _input_sets(made: list[torch.Tensor] | RoleInputs) -> tuple[Tensors, ...]:
    """:func:`acceptance.spec.inputs.input_sets` (imported when a worker first makes inputs)."""
    from acceptance.spec.inputs import input_sets

    return input_sets(made)


def _answer(
    cache: dict[Hashable, Callable],
    ref: RoleRef,
    args: tuple,
    params: dict,
    device: torch.device,
    memory_limit: int | None,
    watch: FolderWatch | None = None,
    digests: dict[int, int] | None = None,
    check: bool = True,
) -> Answer:  # pragma: no cover
    """One call in the worker: :class:`Answered` (outputs on the CPU, the inputs it changed as they are now),
    :class:`Broke` or :class:`Wrote` (the files it wrote to the folder ``watch`` looks at, which are removed;
    importing the callable's module counts as the call). ``digests``: the inputs' digests known from the batch's
    previous calls, by ``id`` of the tensor (updated here); ``check=False``: the inputs are not checked for
    writes (copies made for this call alone)."""
    if watch is not None:
        watch.start()
    threads = set(threading.enumerate())
    try:
        answer = _called(cache, ref, args, params, device, digests if digests is not None else {}, check)
    except SystemExit as exc:
        answer = Broke(f"called sys.exit({exc.code!r})")
    except BaseException as exc:  # the code under test may raise anything, KeyboardInterrupt included
        text = f"{type(exc).__name__}: {exc}{_where(exc)}"
        if memory_limit and (isinstance(exc, MemoryError) or "allocate memory" in str(exc)):
            answer = Broke(f"exceeded the worker's memory limit of {memory_limit / 2**30:.3g} GiB ({text})")
        else:
            answer = Broke(f"raised {text}")
    left = reaper.kill_descendants()  # daemons and grandchildren too: this worker is their subreaper
    if left and isinstance(answer, Answered):
        answer = Broke(
            f"left {len(left)} child process(es) running (pid {', '.join(map(str, left))}); they were killed"
        )
    written = watch.written() if watch is not None else []
    threads_left = _left_threads(threads)
    if threads_left:  # only the worker's end stops them: the answer says it ends
        if isinstance(answer, Broke):
            return dataclasses.replace(answer, ended=True)
        wrote = f"; it wrote to the output folder ({', '.join(written)}), the files were removed" if written else ""
        return Broke(threads_left + wrote, ended=True)
    return Wrote(", ".join(written)) if written else answer


#: Thread names of libraries' idle pools, which run only what is submitted to them and outlive a call by design
#: (``torch.compile`` leaves both): not counted as threads left running.
POOL_THREADS = ("ThreadPoolExecutor-", "tqdm_monitor")


def _pool_thread(thread: threading.Thread) -> bool:
    return thread.name.startswith(POOL_THREADS)


def _left_threads(before: set[threading.Thread]) -> str:
    """What a call left running of the threads it started, in words ("" when none): such a thread could go on
    writing (to the output folder, to files the run reads) after its case is recorded, so the worker ends (the
    runner kills it at once, and a fresh one takes the next call)."""
    left = [t for t in threading.enumerate() if t not in before and t.is_alive() and not _pool_thread(t)]
    if not left:
        return ""
    names = ", ".join(repr(t.name) for t in left[:5]) + (", ..." if len(left) > 5 else "")
    return f"left {len(left)} thread(s) running ({names}); the worker was ended"


def _called(
    cache: dict[Hashable, Callable],
    ref: RoleRef,
    args: tuple,
    params: dict,
    device: torch.device,
    digests: dict[int, int],
    check: bool,
) -> Answered | Broke:  # pragma: no cover
    """``ref``'s callable on ``args`` moved to ``device``: what it returned, with the inputs it changed (by digest,
    before and after, but for ``check=False``); raises what the callable raises."""
    from acceptance.isolation.adapters import take_notes

    fn = _cached(cache, ref)
    held = args  # the batch's own tensors, alive as long as its digests are kept
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    before = [digests[id(a)] if id(a) in digests else _digest(a) for a in args] if check else []
    started = time.perf_counter()
    value = fn(*args, **params)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    outs = value if isinstance(value, (tuple, list)) else (value,)
    if not outs:
        return Broke("returned no output")
    if not all(isinstance(o, torch.Tensor) for o in outs):
        k = next(i for i, o in enumerate(outs) if not isinstance(o, torch.Tensor))
        return Broke(f"returned {type(outs[k]).__name__} at output {k}")
    outs = tuple(o.detach().cpu() for o in outs)
    odd = next((k for k, o in enumerate(outs) if type(o) is not torch.Tensor), None)
    if odd is not None:
        kind = type(outs[odd])
        return Broke(
            f"returned a tensor subclass ({kind.__module__}.{kind.__qualname__}) at output {odd}: only plain "
            "torch.Tensor outputs are sent back"
        )
    after = [_digest(a) for a in args] if check else []
    changed = tuple(
        (i, a.detach().cpu()) for i, (a, d, e) in enumerate(zip(args, before, after, strict=False)) if e != d
    )
    # never a copy's id: it could name another tensor once the copy is freed
    digests.update((id(a), e) for a, h, e in zip(args, held, after, strict=False) if a is h)
    return Answered(outs, changed, seconds, tuple(take_notes(fn)))
