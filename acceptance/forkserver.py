"""The fork server that worker and job processes start from: torch is imported once, in it.

:func:`start` launches it at once, so that its torch import runs in its own
process while the runner goes on importing and loading specs (on two or more
cores the two overlap; a run's first case no longer waits for it).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from multiprocessing.context import BaseContext

#: Modules the fork server imports before it forks anything.
PRELOAD = ["torch", "acceptance.workers"]


def context() -> BaseContext:
    """The ``forkserver`` multiprocessing context with :data:`PRELOAD` (one server per process)."""
    found = multiprocessing.get_context("forkserver")
    found.set_forkserver_preload(PRELOAD)
    return found


def start() -> None:
    """Launch the fork server now (a no-op when it runs); it preloads in the background."""
    context()
    multiprocessing.forkserver.ensure_running()
