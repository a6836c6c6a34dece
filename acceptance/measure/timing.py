"""The timing loop: warm-up calls, then timed calls until a minimum time and count, on CPU or CUDA.

One call ``fn(*args, **params)`` is timed as follows:

- on a CUDA device, with CUDA events recorded on the current stream just before
  and just after the call, read after ``end.synchronize()``
  (``start.elapsed_time(end)``, milliseconds, resolution about 0.5 us): the GPU
  time between the two points of the stream, host overhead included only where
  it stalls the stream;
- on the CPU, with :func:`time.perf_counter` (monotonic) around the call, the
  device synchronised before and after (:func:`acceptance.device.synchronize`).

The loop (:func:`time_calls`): warm-up calls until at least ``warmup`` calls
*and* ``warmup_time`` seconds have gone (compilation, caches, clock ramp; their
times are kept apart, never mixed into the statistics), then timed calls until
at least ``min_runs`` calls *and* ``min_time`` seconds of timed calls, or
``max_runs`` calls, whichever comes first.

:class:`Timed` wraps a callable so that one call runs the whole loop where the
callable runs (in the worker process, so transport never enters a time) and
returns the last call's outputs followed by two float64 tensors: the warm-up
call times and the timed call times, in seconds. :func:`copy_probe` is the
device copy whose time gives the measured copy bandwidth.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Final, Literal, TypeVar

import torch

from acceptance.device import synchronize
from acceptance.formats.roleref import Resolver, RoleRef

#: The timer names a record carries (:attr:`acceptance.records.PerfRecord.timer`).
Timer = Literal["cuda_events", "perf_counter"]
CUDA_EVENTS: Final = "cuda_events"
PERF_COUNTER: Final = "perf_counter"

#: What the timed callable returns.
T = TypeVar("T")


@dataclass(frozen=True)
class TimerOptions:
    """How long to warm up and to time (see the module docstring); seconds and call counts."""

    warmup: int = 1
    warmup_time: float = 0.1
    min_time: float = 1.0
    min_runs: int = 5
    max_runs: int = 100_000

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.warmup_time < 0 or self.min_time < 0:
            raise ValueError("warmup, warmup_time and min_time must be >= 0")
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {self.min_runs} and {self.max_runs}")

    def key(self) -> tuple:
        """The options as a hashable tuple (a worker reference holds them)."""
        return tuple(sorted(asdict(self).items()))


def timer_of(device: torch.device) -> Timer:
    """``cuda_events`` on a CUDA device, else ``perf_counter``."""
    return CUDA_EVENTS if device.type == "cuda" else PERF_COUNTER


def _device_of(args: tuple) -> torch.device:
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def timed_call(fn: Callable[..., T], args: tuple, params: dict, device: torch.device) -> tuple[T, float]:
    """(value, seconds) of one call, timed with CUDA events on a CUDA device, else perf_counter with
    synchronisation (see the module docstring)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        value = fn(*args, **params)
        end.record()
        end.synchronize()
        return value, start.elapsed_time(end) / 1e3
    synchronize(device)
    started = time.perf_counter()
    value = fn(*args, **params)
    synchronize(device)
    return value, time.perf_counter() - started


def time_calls(
    fn: Callable[..., T], args: tuple, params: dict, device: torch.device, options: TimerOptions
) -> tuple[T | None, list[float], list[float]]:
    """(last value, warm-up call seconds, timed call seconds): the loop of the module docstring (``None`` for the
    value only if no call ran, which valid options never allow: ``min_runs >= 1``)."""
    warm: list[float] = []
    value: T | None = None
    while len(warm) < options.warmup or sum(warm) < options.warmup_time:
        value, seconds = timed_call(fn, args, params, device)
        warm.append(seconds)
    runs: list[float] = []
    while len(runs) < options.max_runs and (len(runs) < options.min_runs or sum(runs) < options.min_time):
        value, seconds = timed_call(fn, args, params, device)
        runs.append(seconds)
    return value, warm, runs


class Timed:
    """``fn`` wrapped in the timing loop: a call returns ``(*outputs, warm-up seconds, timed seconds)``, the
    last two float64 tensors on the CPU. The device is that of the first tensor argument."""

    def __init__(self, fn: Callable, options: TimerOptions):
        self.fn = fn
        self.options = options

    def __call__(self, *args: object, **params: object) -> tuple[object, ...]:
        """The last call's outputs (checked by the worker as any callable's), then the warm-up and timed call
        seconds."""
        value, warm, runs = time_calls(self.fn, args, params, _device_of(args), self.options)
        outs: tuple[object, ...] = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        return (*outs, torch.tensor(warm, dtype=torch.float64), torch.tensor(runs, dtype=torch.float64))


@dataclass(frozen=True)
class TimedRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to :class:`Timed` around ``inner``'s callable,
    with the :class:`TimerOptions` whose :meth:`TimerOptions.key` is ``options``: the callable is timed where it
    runs."""

    inner: RoleRef
    options: tuple

    def resolve(self, cached: Resolver) -> Callable:
        return Timed(self.inner.resolve(cached), TimerOptions(**dict(self.options)))


_COPY_BUFFERS: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def copy_probe(size: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` of ``int(size)`` bytes on ``size``'s device (buffers kept between calls, so only
    the copy is timed); returns ``dst[:1]``. Its bandwidth counts 2 x size bytes per call (read and write)."""
    n = int(size.reshape(-1)[0])
    key = (str(size.device), n)
    if key not in _COPY_BUFFERS:
        _COPY_BUFFERS.clear()
        _COPY_BUFFERS[key] = (
            torch.ones(n, dtype=torch.uint8, device=size.device),
            torch.empty(n, dtype=torch.uint8, device=size.device),
        )
    src, dst = _COPY_BUFFERS[key]
    dst.copy_(src)
    return dst[:1].clone()
