"""A run compared with a base run (``acceptance compare``, ``run --compare-to``)."""

from __future__ import annotations

from typing import Literal

from acceptance.records.base import JFloat, Verdict
from acceptance.records.base import Model as _Model


class MetricRatio(_Model):
    """One error metric of one case output in two runs: the impl's error against the rounded oracle (against the
    baseline when no oracle ran), and how it moved."""

    metric: str
    """The metric."""
    output: int = 0
    """Output index."""
    base: JFloat
    """Its value in the base run."""
    new: JFloat
    """Its value in the new run."""
    ratio: JFloat
    """max(new, floor) / max(base, floor), floor the dtype's rounding floor of the metric."""
    normalized: JFloat | None = None
    """The same ratio with each run's impl error divided by its own baseline's error against the oracle (the
    input draw cancels); null without an oracle."""
    grew: bool = False
    """Both ratios exceed the allowed factor and the new error is above the floor."""


class PerfRatio(_Model):
    """The impl's timing of one case in two runs (``acceptance bench``), and whether it slowed down."""

    base_median_s: JFloat
    """Median seconds per call in the base run."""
    new_median_s: JFloat
    """Median seconds per call in the new run."""
    ratio: JFloat
    """new_median_s / base_median_s (above 1: slower)."""
    base_p90_s: JFloat
    """The base run's 90th percentile, seconds."""
    new_p10_s: JFloat
    """The new run's 10th percentile, seconds."""
    separated: bool
    """new_p10_s > base_p90_s: the new run's fastest tenth of calls is slower than the base run's slowest tenth."""
    slower: bool = False
    """ratio > max_slowdown and separated: a performance regression."""
    note: str | None = None
    """Why the timings were not compared (different device or timer), when they were not."""


class CaseComparison(_Model):
    """One case id in two runs."""

    id: str
    """Case id."""
    operator: str
    """Operator."""
    dtype: str
    """Dtype."""
    base_verdict: Verdict | None = None
    """Verdict in the base run (null: not in it)."""
    new_verdict: Verdict | None = None
    """Verdict in the new run (null: not in it)."""
    change: Literal["same", "regressed", "fixed", "changed", "new", "removed"] = "same"
    """How the verdict moved: regressed (pass or skip to fail or error), fixed (the reverse), new, removed."""
    ratios: list[MetricRatio] = []
    """Per compared metric and output."""
    worst_ratio: JFloat | None = None
    """The largest ratio NEW/BASE over the metrics."""
    grew: bool = False
    """Some metric's error grew by more than the allowed factor."""
    time_ratio: JFloat | None = None
    """Total case time NEW/BASE, when both runs recorded it (advisory)."""
    perf: PerfRatio | None = None
    """The impl's timed calls NEW/BASE, when both runs timed the case (``acceptance bench``)."""
    slower: bool = False
    """The impl slowed down by more than the allowed factor (see :class:`PerfRatio`)."""


class Comparison(_Model):
    """A run compared with a base run: verdict changes, error ratios, waivers that can go."""

    base: str
    """What the base run was (a path, or a label)."""
    max_ratio: JFloat
    """An error may grow by this factor before the case is flagged."""
    metrics: list[str]
    """The metrics compared."""
    cases: list[CaseComparison]
    """Every case id of either run."""
    regressions: list[str] = []
    """One sentence per regression (a worse verdict, or an error grown past max_ratio)."""
    waivers_passing: list[str] = []
    """Waived case ids that pass in the new run: their waiver can go."""
    passed: bool = True
    """No regression."""
    max_slowdown: JFloat | None = None
    """A timed case may slow down by this factor (median NEW/BASE) before it is a regression; null in comparisons
    written before timings were compared."""
