"""Checking a spec's ``module:attr`` references in a child process, never in the runner's.

Validating a spec imports the modules its callables name, and importing runs
the code under test's module-level code. Run in the runner, an import that
calls ``os._exit(0)`` ended the whole run with exit status 0 and no report (a
green CI gate), a crash at import took every result with it, and an import
that never returns hung the run. :class:`ImportCheck` imports each reference
in a child process started from the workers' fork server (torch already
loaded there) and answers as :func:`acceptance.spec.resolve_callable` would: a
:class:`SpecError` with its message, or nothing. A child that ends while
importing, or takes longer than :data:`IMPORT_SECONDS`, is a problem of that
reference (with the exit status or signal); the next reference gets a fresh
child, so every problem of every spec is still reported.

Pass an instance as ``imports`` to :func:`acceptance.spec.load_specs`, or call
:func:`load_checked`, which overlaps the imports with the validation.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, cast

from acceptance.errors import SpecError
from acceptance.isolation import decode, forkserver

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext

#: Seconds one reference's import may take in the checking process before it is stopped and reported.
IMPORT_SECONDS = 300.0


def _check(conn: multiprocessing.connection.Connection, owner: int) -> None:  # pragma: no cover - in the child
    """The child's loop: receive ``(ref, spec_path)``, answer ``None`` (it resolves) or the problem's message."""
    from acceptance.isolation.serve import die_with
    from acceptance.spec.callables import resolve_callable

    os.setsid()  # its own process group: closing the check ends what an import started too
    die_with(owner)
    while True:
        try:
            ref, spec_path = conn.recv()
        except EOFError:
            os._exit(0)
        try:
            resolve_callable(ref, Path(spec_path))
            answer: str | None = None
        except SpecError as exc:
            answer = str(exc)
        except BaseException as exc:  # e.g. KeyboardInterrupt raised by the module's own code
            answer = f"{ref!r}: importing it raised {type(exc).__name__}: {exc}"
        conn.send(answer)


def load_checked(files: list[Path], timeout: float = IMPORT_SECONDS) -> tuple[list, list]:
    """:func:`acceptance.spec.load_specs` with every reference imported in a child process: the specs are
    validated while the child imports (:meth:`ImportCheck.ahead`), and validated again, each reference then
    answered, only when some import failed, so that each problem names its spec and field."""
    from acceptance import spec

    with ImportCheck(timeout) as check:
        specs, problems = spec.load_specs(files, check.ahead)
        if check.settle():
            specs, problems = spec.load_specs(files, check)
    return specs, problems


def _ended(code: int | None) -> str:
    """How a child process ended, in words: ``exit status 0`` or ``killed by SIGSEGV``."""
    if code is None:
        return "an unknown status"
    return f"killed by {forkserver.signal_name(code)}" if code < 0 else f"exit status {code}"


class ImportCheck:
    """``check(ref, spec_path)``: resolve ``ref`` (``module:attr`` or ``file.py:attr`` next to the spec) in a
    child process; raise :class:`SpecError` as :func:`~acceptance.spec.resolve_callable` does, or when the import
    ends the child or outlasts ``timeout`` seconds. Answers are kept per reference (a module is imported once).

    ``check.ahead(ref, spec_path)`` asks without waiting, and :meth:`settle` reads every answer: validating
    every spec with ``ahead``, then again with ``check`` only when :meth:`settle` found a problem, overlaps the
    imports with the validation (:func:`load_checked`). Close it (or use it as a context manager) to end the
    child."""

    def __init__(self, timeout: float = IMPORT_SECONDS):
        self.timeout = timeout
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None  # set once the child runs
        self._answers: dict[tuple, str | None] = {}
        self._sent: deque[tuple] = deque()  # (key, ref, spec_path) asked of the child, in order, unanswered
        self._lock = threading.Lock()  # _sent and _conn, between the caller and the thread starting the child
        self._starting: threading.Thread | None = None
        self._failed: BaseException | None = None

    @staticmethod
    def _key(ref: str, spec_path: Path) -> tuple:
        module = ref.rpartition(":")[0]
        return ref, str(Path(spec_path).parent.resolve()) if module.endswith(".py") else None

    def __call__(self, ref: str, spec_path: Path) -> None:
        self.ahead(ref, spec_path)
        self.settle()
        answer = self._answers[self._key(ref, spec_path)]
        if answer is not None:
            raise SpecError(answer)

    def ahead(self, ref: str, spec_path: Path) -> None:
        """Ask the child about ``ref`` (once) and return at once; the answers already there are read. The first
        question starts the child in a thread (it waits for the fork server's preload), so the caller goes on."""
        key = self._key(ref, spec_path)
        if key in self._answers or any(item[0] == key for item in self._sent):
            return
        with self._lock:
            self._sent.append((key, ref, str(spec_path)))
            conn = self._conn
            running = conn is not None
            if conn is not None:
                self._post(conn, self._sent[-1])
        if not running and self._starting is None:
            self._starting = threading.Thread(target=self._start, name="acceptance-import-check", daemon=True)
            self._starting.start()
        while running and self._sent and self._running()[1].poll(0):
            self._read(0)

    def settle(self) -> bool:
        """Read every answer asked for; whether any is a problem."""
        self._started()
        while self._sent:
            self._read(self.timeout)
        return any(answer is not None for answer in self._answers.values())

    def _started(self) -> None:
        """Wait for the thread starting the child; raise what made it fail."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    def _running(self) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
        """The child process and this end of its connection: set while questions are unanswered (the child is
        started for the first question, and again by :meth:`_read` when questions remain after it ended)."""
        assert self._proc is not None and self._conn is not None, "the import-checking process is not started"
        return self._proc, self._conn

    @staticmethod
    def _post(conn: multiprocessing.connection.Connection, item: tuple) -> None:
        try:
            conn.send(item[1:])
        except OSError:  # the child ended: found when its answers are read
            pass

    def _read(self, timeout: float) -> None:
        """The answer to the oldest question; an import that ends the child or hangs is that question's problem,
        and the questions after it go to a fresh child."""
        key, ref, _ = self._sent[0]
        module = ref.rpartition(":")[0]
        proc, conn = self._running()
        try:
            if conn.poll(timeout):
                answer = decode.plain(conn.recv_bytes())  # str | None from a process that ran the module
                if answer is not None and not isinstance(answer, str):
                    raise decode.Refused(f"an answer of type {type(answer).__name__}")
                self._answers[key] = answer
                self._sent.popleft()
                return
            problem = f"{ref!r}: importing {module!r} did not finish within {self.timeout:g} s; it was stopped"
        except decode.Refused as exc:  # the module's import changed what the child sends back
            problem = f"{ref!r}: importing {module!r} made the checking process answer {exc}"
        except (EOFError, OSError):  # the child ended while importing
            proc.join(5)
            problem = (
                f"{ref!r}: importing {module!r} ended the process importing it ({_ended(proc.exitcode)}):"
                " the module exits or crashes at import"
            )
        self._answers[key] = problem
        self._sent.popleft()
        self.close()
        if self._sent:  # the questions not answered, to a fresh child
            self._start()
            self._started()

    def _start(self) -> None:
        """Start the child and send it every question asked so far (in the caller, or in a thread)."""
        try:
            # the fork server's context, or the fork context in a job process: both start processes
            ctx = cast("ForkServerContext | ForkContext", forkserver.context())
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_check, args=(child, os.getpid()), daemon=True, name="acceptance-import-check")
            forkserver.start_process(proc)
            child.close()
        except BaseException as exc:  # raised to the caller by settle
            self._failed = exc
            return
        with self._lock:
            self._proc, self._conn = proc, parent
            for item in self._sent:
                self._post(parent, item)

    def close(self) -> None:
        """End the child (a no-op when none runs); questions not answered stay asked."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        proc, conn = self._proc, self._conn  # set together, by _start
        if proc is not None:
            try:
                if proc.pid is not None:  # always, once started
                    os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # not yet its own group leader
                proc.kill()
            proc.join(5)
        if conn is not None:
            conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> ImportCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
