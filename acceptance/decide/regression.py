"""Accuracy regression: a run compared with a base run (the last main-branch run, the previous release).

Pure functions over two loaded :class:`~acceptance.records.Results`; the
command line and ``acceptance.compare()`` load them.

**Verdict changes.** Per case id: ``regressed`` (pass or skip in BASE, fail or
error in NEW), ``fixed`` (the reverse), ``changed`` (any other move), ``new``,
``removed``. A regressed case, and a new case that fails or errors, is a
regression.

**Error growth, without false alarms between seeds.** A raw ratio of worst
errors moves by more than 2x between two seeds of the same code on small
cases, so a case is flagged only when, for one compared metric m (global
diff1, diff2 and element-wise max_hyb, mean_hyb; each worst over trials) and
output, all three hold:

* ``ratio = max(e_new, f) / max(e_base, f) > max_ratio``, where e is the
  impl's error against the oracle rounded to the dtype and f the dtype's
  rounding floor of m (:func:`acceptance.decide.proposal.rounding_floor`: u for relative
  metrics), so two runs at or below rounding never differ;
* ``normalized = (e_new / max(b_new, f)) / (e_base / max(b_base, f)) > max_ratio``,
  where b is the baseline's error against the same oracle on the same inputs
  in the same run: the input draw cancels, so a different seed does not move
  it, while a real regression of the impl does;
* ``e_new > f``.

Without an oracle, e is impl vs baseline and only the first and last apply.
Both runs must have decided the case (an ``error`` has no metrics). Waived
cases that pass in NEW are listed: the waiver can go. The total time of a case
(inputs, references, metrics) is shown NEW/BASE, advisory, never a regression.

**Performance regression** (:func:`perf_ratio`). When both runs timed a case
(``acceptance bench``: ``CaseResult.perf``) on the same kind of device and
timer, ``ratio = median_new / median_base`` (seconds per impl call). The case
slowed down when both hold:

* ``ratio > max_slowdown`` (default 1.25: a kernel a quarter slower);
* ``p10_new > p90_base``: the new run's fastest tenth of calls is slower than
  the base run's slowest tenth, so the two timing distributions do not
  overlap. Two runs of the same code draw from one distribution and overlap;
  a loaded machine that slows a few calls widens p90 instead of moving p10.

A slowdown is a regression (the gate fails); a speed-up is only reported.
"""

from __future__ import annotations

import math
from typing import Literal

from acceptance.decide.limits import MAX_RATIO, MAX_SLOWDOWN
from acceptance.decide.proposal import rounding_floor
from acceptance.records import (
    CaseComparison,
    CaseResult,
    Comparison,
    MetricRatio,
    PerfRatio,
    PerfRecord,
    Results,
)
from acceptance.wording import fmt, seconds

#: Metrics compared: two global ones and the hybrid error's worst element and mean (bounded near zero).
METRICS: tuple[str, ...] = ("diff1", "diff2", "max_hyb", "mean_hyb")

_BAD = ("fail", "error")

#: How a case moved between two runs.
Change = Literal["same", "regressed", "fixed", "changed", "new", "removed"]


def _num(d: dict | None, metric: str) -> float | None:
    v = d.get(metric) if d else None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return math.inf if math.isnan(v) else float(v)
    return None


def metric_ratios(
    base: CaseResult, new: CaseResult, *, max_ratio: float = MAX_RATIO, metrics: tuple[str, ...] = METRICS
) -> list[MetricRatio]:
    """Every compared metric of every output of one case in both runs (see the module docstring)."""
    out = []
    for k, (was, now) in enumerate(zip(base.outputs, new.outputs, strict=False)):
        oracle = was.impl_oracle is not None and now.impl_oracle is not None
        for m in metrics:
            f = rounding_floor(m, new.dtype)
            if oracle:
                e_b, e_n = _num(was.impl_oracle, m), _num(now.impl_oracle, m)
                b_b, b_n = _num(was.baseline_oracle, m), _num(now.baseline_oracle, m)
            else:
                e_b, e_n = _num(was.metrics, m), _num(now.metrics, m)
                b_b = b_n = None
            if e_b is None or e_n is None:
                continue
            ratio = _ratio(max(e_n, f), max(e_b, f))
            normalized = None
            if b_b is not None and b_n is not None:
                normalized = _ratio(_ratio(e_n, max(b_n, f)), _ratio(e_b, max(b_b, f)))
            grew = e_n > f and ratio > max_ratio and (normalized is None or normalized > max_ratio)
            out.append(
                MetricRatio(metric=m, output=k, base=e_b, new=e_n, ratio=ratio, normalized=normalized, grew=grew)
            )
    return out


def _ratio(a: float, b: float) -> float:
    """a / b with 0/0 = 1 and a/0 = inf."""
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def _change(base: str | None, new: str | None) -> Change:
    if base is None:
        return "new"
    if new is None:
        return "removed"
    if base == new:
        return "same"
    if new in _BAD and base not in _BAD:
        return "regressed"
    if base in _BAD and new not in _BAD:
        return "fixed"
    return "changed"


def _time_ratio(base: CaseResult, new: CaseResult) -> float | None:
    tb, tn = base.timing.total, new.timing.total
    return tn / tb if tb > 0 and tn > 0 else None


def perf_ratio(base: PerfRecord, new: PerfRecord, *, max_slowdown: float = MAX_SLOWDOWN) -> PerfRatio:
    """The impl's median seconds per call NEW/BASE and whether it slowed down (see the module docstring): slower
    when ``median_new / median_base > max_slowdown`` and ``p10_new > p90_base``. Timings from different devices
    or timers are shown but never flagged (``note`` says why)."""
    ratio = _ratio(new.median_s, base.median_s)
    separated = new.p10_s > base.p90_s
    note = None
    if (base.device, base.timer) != (new.device, new.timer):
        note = f"timed on {new.device} ({new.timer}), base on {base.device} ({base.timer}): not compared"
    return PerfRatio(
        base_median_s=base.median_s,
        new_median_s=new.median_s,
        ratio=ratio,
        base_p90_s=base.p90_s,
        new_p10_s=new.p10_s,
        separated=separated,
        slower=note is None and ratio > max_slowdown and separated,
        note=note,
    )


def compare_results(
    base: Results,
    new: Results,
    *,
    max_ratio: float = MAX_RATIO,
    base_label: str = "base",
    metrics: tuple[str, ...] = METRICS,
    max_slowdown: float = MAX_SLOWDOWN,
) -> Comparison:
    """NEW compared with BASE: every case id of either, regressions in words (verdicts, error growth, slowdowns),
    waivers that can go."""
    if not max_ratio > 1:
        raise ValueError(f"max_ratio must be > 1, got {max_ratio!r}")
    if not max_slowdown >= 1:
        raise ValueError(f"max_slowdown must be >= 1, got {max_slowdown!r}")
    old = {c.id: c for c in base.cases}
    now = {c.id: c for c in new.cases}
    cases: list[CaseComparison] = []
    regressions: list[str] = []
    for cid in list(now) + [i for i in old if i not in now]:
        b, n = old.get(cid), now.get(cid)
        one = n if n is not None else old[cid]
        change = _change(b.verdict if b else None, n.verdict if n else None)
        ratios = metric_ratios(b, n, max_ratio=max_ratio, metrics=metrics) if b and n else []
        decided = b is not None and n is not None and b.verdict != "error" and n.verdict != "error"
        ratios = ratios if decided else []
        grew = [r for r in ratios if r.grew]
        worst = max((r.ratio for r in ratios), default=None)
        timed = perf_ratio(b.perf, n.perf, max_slowdown=max_slowdown) if b and n and b.perf and n.perf else None
        cases.append(
            CaseComparison(
                id=cid,
                operator=one.operator,
                dtype=one.dtype,
                base_verdict=b.verdict if b else None,
                new_verdict=n.verdict if n else None,
                change=change,
                ratios=ratios,
                worst_ratio=worst,
                grew=bool(grew),
                time_ratio=_time_ratio(b, n) if b and n else None,
                perf=timed,
                slower=bool(timed and timed.slower),
            )
        )
        if change == "regressed" and b is not None and n is not None:  # both exist when the verdict changed
            regressions.append(f"{cid}: {b.verdict} -> {n.verdict}")
        elif change == "new" and n is not None and n.verdict in _BAD:
            regressions.append(f"{cid}: new case, {n.verdict}")
        if grew:
            r = max(grew, key=lambda r: r.ratio)
            where = f"[{r.output}]" if r.output else ""
            norm = f", {fmt(r.normalized)}x relative to the baseline" if r.normalized is not None else ""
            regressions.append(
                f"{cid}: {r.metric}{where} grew {fmt(r.ratio)}x ({fmt(r.base)} -> {fmt(r.new)}"
                f"{norm}; allowed {fmt(max_ratio)}x)"
            )
        if timed and timed.slower:
            regressions.append(
                f"{cid}: {fmt(timed.ratio)}x slower (median {seconds(timed.base_median_s)} -> "
                f"{seconds(timed.new_median_s)} per call, p10 {seconds(timed.new_p10_s)} > base p90 "
                f"{seconds(timed.base_p90_s)}; allowed {fmt(max_slowdown)}x)"
            )
    waivers = [c.id for c in new.cases if c.waiver and c.verdict == "pass"]
    return Comparison(
        base=base_label,
        max_ratio=max_ratio,
        metrics=list(metrics),
        cases=cases,
        regressions=regressions,
        waivers_passing=waivers,
        passed=not regressions,
        max_slowdown=max_slowdown,
    )


def regressions_by_case(cmp: Comparison) -> list[tuple[CaseComparison, list[str]]]:
    """The cases that regressed, in case order, each with its sentences of ``cmp.regressions``."""
    out = []
    for c in cmp.cases:
        lines = [r for r in cmp.regressions if r.startswith(f"{c.id}: ")]
        if lines:
            out.append((c, lines))
    return out
