"""Trials measured while the next trial's callables run: the runner's CPU work overlaps with the worker's.

:func:`consume_overlapped` takes trials from the trial engine in the calling
thread (which mostly waits for the worker process) and hands each one to
``consume`` in one background thread, in trial order, one at a time: while
the metrics, diagnostics and records of trial t are computed, the impl,
baseline and oracle of trial t+1 already run. At most two trials' tensors are
alive at once (the one being consumed and the one being produced), as with a
sequential loop plus one.

The outcome is the sequential loop's: ``consume`` sees the same trials in the
same order in a single thread, so every float sum is added in the same order;
and when both sides fail, the failure the sequential loop would have met
first is raised. ``consume`` failing on trial j comes before anything the
engine raises later (in the sequential loop the engine never reaches trial
j+1), so a failure of ``consume`` always wins; a failure of the engine at
trial k is raised only after every earlier trial was consumed without one.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Optional, TypeVar

T = TypeVar("T")


def consume_overlapped(items: Iterable[T], consume: Callable[[T], None]) -> None:
    """``for item in items: consume(item)``, with ``consume(item)`` running in one background thread while the
    next item is produced (see the module docstring for the order of failures)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="acceptance-overlap")
    pending: Optional[Future] = None
    try:
        try:
            for item in items:
                if pending is not None:
                    pending.result()
                pending = pool.submit(consume, item)
        except BaseException:
            if pending is not None:
                pending.result()  # an earlier trial's failure to consume wins over the engine's
            raise
        if pending is not None:
            pending.result()
    finally:
        pool.shutdown(wait=True)
