"""The ``acceptance`` command and ``python -m acceptance``: :func:`acceptance.cli.main`, then a quick exit.

A process that imported torch spends 0.5 s to 1.4 s after its last line tearing the interpreter down (freeing
every module and object one by one, torch's thousand modules among them), and every ``acceptance run`` did.
:func:`entry` ends the process as soon as the command's output is flushed and its exit handlers have run:
the exit status, the output and the clean-up (the fork server's socket folder, logging) are those of a normal
exit. Calling :func:`acceptance.cli.main` from Python (a test, a script) exits normally.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from acceptance.cli import main


def _status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives: 0 for ``None``, the integer, else 1 after printing ``code``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def entry() -> None:
    """Run the command line, then leave as a normal exit would, up to the teardown: thread pools stopped and
    non-daemon threads joined (``threading._shutdown``, what the interpreter calls first), standard streams
    flushed, exit handlers run (:mod:`atexit`); then the process ends with the command's exit status. An
    unexpected exception is left to the normal exit, which prints its traceback."""
    try:
        main()  # click's standalone mode: every outcome, usage errors and Ctrl-C included, is a SystemExit
        code = 0
    except SystemExit as exc:
        code = _status(exc.code)
    # as at a normal exit: the thread pools told to stop, then non-daemon threads joined (CPython's own shutdown
    # step; no public function does both)
    threading._shutdown()  # type: ignore[attr-defined]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`acceptance report | head`) or a closed stream
            pass
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    entry()
