"""Timing of a case by ``acceptance bench``: statistics of the timed calls, rates and the speed-up."""

from __future__ import annotations

from typing import Literal

from acceptance.records.base import JFloat
from acceptance.records.base import Model as _Model


class PerfRecord(_Model):
    """Timing of a case by ``acceptance bench``: the impl on the test device, timed where it runs (in the worker),
    warm-up calls excluded; rates from the spec's ``perf.flops`` / ``perf.bytes`` and the median time."""

    timer: Literal["cuda_events", "perf_counter"]
    """How each call was timed: CUDA events on a CUDA device; perf_counter with synchronisation on the CPU."""
    device: str
    """Device the calls ran on."""
    runs: int
    """Timed calls."""
    warmup_runs: int
    """Warm-up calls before them (not in any statistic)."""
    first_call_s: JFloat | None = None
    """Seconds of the first warm-up call (compilation, caches)."""
    median_s: JFloat
    """Median seconds per call."""
    min_s: JFloat
    """Fastest call, seconds."""
    p10_s: JFloat
    """10th percentile (linear interpolation), seconds."""
    p90_s: JFloat
    """90th percentile, seconds."""
    mean_s: JFloat
    """Mean seconds per call."""
    flops: int | None = None
    """Floating-point operations per call (perf.flops for this case)."""
    bytes: int | None = None
    """Bytes moved per call (perf.bytes for this case)."""
    gflops: JFloat | None = None
    """flops / median_s / 1e9."""
    gbps: JFloat | None = None
    """bytes / median_s / 1e9."""
    copy_gbps: JFloat | None = None
    """The device's measured copy bandwidth, GB/s (2 x bytes copied / median copy time / 1e9)."""
    bandwidth_fraction: JFloat | None = None
    """gbps / copy_gbps: the fraction of the measured copy bandwidth (the roofline figure)."""
    baseline: str | None = None
    """The perf baseline callable (perf.baseline), timed the same way on the same device and inputs."""
    baseline_runs: int | None = None
    """Its timed calls."""
    baseline_median_s: JFloat | None = None
    """Its median seconds per call."""
    speedup: JFloat | None = None
    """baseline_median_s / median_s."""
    min_speedup: JFloat | None = None
    """The gate: speedup must be >= this (perf.min_speedup)."""
