"""Callables with known timing for the ``acceptance bench`` tests (the ``fn(*tensors, **params)`` contract)."""

import time


def matmul(a, b):
    """a @ b."""
    return a @ b


def matmul_slow_first_call(a, b, first_sleep=0.5, sleep=0.001):
    """a @ b after a sleep of ``first_sleep`` seconds the first time it sees an input (per-shape set-up, such as
    autotuning) and ``sleep`` seconds on every later call with the same input."""
    time.sleep(sleep if getattr(a, "warmed_up", False) else first_sleep)
    a.warmed_up = True  # a mark on this tensor object, not on its data
    return a @ b


def matmul_slowed(a, b, sleep=0.03):
    """a @ b after sleeping ``sleep`` seconds: the impl made slower than its perf baseline."""
    time.sleep(sleep)
    return a @ b
