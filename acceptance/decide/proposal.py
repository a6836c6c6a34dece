"""Threshold tuning: proposed thresholds from the errors a legitimate implementation shows over many seeds.

Pure functions over decided :class:`~acceptance.records.CaseResult` records
(from runs over several seeds, or from results.json files); running the cases
is :mod:`acceptance.session.tune`'s job, writing spec files :mod:`acceptance.session.tunewrite`'s.

**Observed error.** For one fixed criterion (metric m on one output of one
case and seed) the observed error is the smallest threshold that passes it,
oracle-aware as the verdict decides: ``v = min(v_b, v_o)`` when the impl is at
least as close to the oracle (rounded once to the dtype) as the baseline
(``v_o <= b_o``), else ``v_b``; ``v_b`` = impl vs baseline, ``v_o`` = impl vs
the rounded oracle, ``b_o`` = baseline vs the rounded oracle.

**Proposal** for one operator x dtype x metric, from the per-case maxima
``m_i = max over seeds and outputs of v``::

    constant:   P = step_up(max(margin * max_i m_i, floor))
    scaled:     P(S) = max(floor, c * g(S)),  c = step_up(margin * max_i m_i / g(S_i)),  g(S) = sqrt(S) or S

``step_up`` rounds up to the next 1-2-5 step (1e-3, 2e-3, 5e-3, 1e-2, ...);
``margin`` defaults to 2; ``floor`` is what the dtype's rounding of the oracle
alone produces (:func:`rounding_floor`). A scaled form in a case symbol S
(an accumulation length K gives ~sqrt(K) u probabilistically, K u in the
worst case) is proposed only when the data say so: among the symbols taking
at least three values >= 1, the envelope ``c g(S_i)`` with the smallest mean
log-slack ``mean_i log(c g(S_i) / m_i)`` is taken when it is tighter than the
constant's by at least a factor 2 on average (log 2); otherwise the constant.

**Check** (``--check``): a criterion is *flaky* when a legitimate run's
observed error exceeds the threshold in force, and *loose* when the threshold
exceeds ``max(m_i, floor)`` by more than ``loose`` (default 100) for every
case: it could not catch an error that grew 100 times. Only thresholds a
spec sets are judged loose; a category default (MLU-OPS's table) is the
field's standard and never is.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from acceptance.formats import dtypes
from acceptance.numerics.metrics import registry
from acceptance.records import CaseResult
from acceptance.wording import counted, fmt

#: Default safety margin over the largest observed error.
MARGIN = 2.0
#: Default factor beyond which a threshold is too loose to catch a regression.
LOOSE = 100.0
#: A scaled proposal must be this much tighter than the constant one, on average over the cases.
SCALED_GAIN = 2.0
_STEPS = (1.0, 2.0, 5.0, 10.0)


def step_up(x: float) -> float:
    """The smallest value of the 1-2-5 series (d x 10^k, d in {1, 2, 5}) that is >= ``x``; 0 for ``x <= 0``."""
    if not x > 0 or not math.isfinite(x):
        return 0.0 if not x > 0 else x
    k = math.floor(math.log10(x))
    for d in _STEPS:
        value = float(f"{d:g}e{k}") if d < 10 else float(f"1e{k + 1}")
        if value >= x * (1 - 1e-12):
            return value
    return float(f"1e{k + 1}")


def number_text(x: float) -> str:
    """A threshold as spec text: ``1e-4``, ``2.5e-3`` (scientific below 0.01 and from 1e4, short otherwise)."""
    if x == 0 or 0.01 <= abs(x) < 1e4:
        return f"{x:g}"
    mantissa, exponent = f"{x:.6e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def rounding_floor(metric: str, dtype: str) -> float:
    """The error the dtype's rounding of the oracle alone can produce, by the metric's units: a relative metric
    (units 'ratio') u = 2^-p, nmse u^2, an ulp metric 0.5 ulp; metrics in data units have no floor (0): their
    scale is the data's."""
    u = dtypes.lookup(dtype).unit_roundoff
    units = registry.get(metric).units
    if metric == "nmse":
        return u * u
    return {"ratio": u, "ulp": 0.5}.get(units, 0.0)


@dataclass(frozen=True)
class Observation:
    """One fixed criterion of one decided case: the observed error (see the module docstring) and what was in
    force."""

    operator: str
    dtype: str
    metric: str
    case_id: str
    symbols: dict[str, int]
    seed: int
    output: int
    value: float
    impl_oracle: float | None
    baseline_oracle: float | None
    threshold: float
    source: str
    spec_file: str
    output_name: str | None = None
    """The output's name where the spec names it (a gradient ``grad[x]``); such an output gets its own proposal."""


def _scalar(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def observed_error(vb: float | None, io: float | None, bo: float | None) -> float:
    """``min(vb, io)`` when the impl is at least as close to the rounded oracle as the baseline (io <= bo), else
    ``vb``; NaN (or missing) counts as +inf."""
    clean = [math.inf if x is None or math.isnan(x) else x for x in (vb, io, bo)]
    vb_, io_, bo_ = clean
    if io is not None and bo is not None and io_ <= bo_:
        return min(vb_, io_)
    return vb_


def observations(cases: Iterable[CaseResult]) -> list[Observation]:
    """Every ``threshold`` criterion with a scalar ``<=`` threshold of every decided case that ran (not error)."""
    out: list[Observation] = []
    for case in cases:
        if case.verdict == "error" or case.error is not None:
            continue
        symbols = {k: v for k, v in case.params.items() if isinstance(v, int) and not isinstance(v, bool)}
        outputs = case.outputs
        for c in case.criteria:
            threshold = _scalar(c.threshold)
            if c.kind != "threshold" or c.comparison != "<=" or threshold is None:
                continue
            if registry.get(c.metric).kind != "error":
                continue
            k = c.output
            o = outputs[k] if k < len(outputs) else None
            vb = _scalar(o.metrics.get(c.metric)) if o is not None else None
            io = _scalar(o.impl_oracle.get(c.metric)) if o is not None and o.impl_oracle is not None else None
            bo = _scalar(o.baseline_oracle.get(c.metric)) if o is not None and o.baseline_oracle is not None else None
            out.append(
                Observation(
                    case.operator,
                    case.dtype,
                    c.metric,
                    case.id,
                    symbols,
                    case.seed,
                    k,
                    observed_error(vb, io, bo),
                    io,
                    bo,
                    threshold,
                    c.source,
                    case.spec_file,
                    c.output_name,
                )
            )
    return out


@dataclass(frozen=True)
class Distribution:
    """Largest, 99th percentile (linear interpolation) and median of a set of errors; ``n`` values."""

    n: int
    max: float
    p99: float
    median: float

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Distribution | None:
        a = np.array([v for v in values if v is not None], dtype=np.float64)
        if a.size == 0:
            return None
        a = np.where(np.isnan(a), np.inf, a)
        return cls(int(a.size), float(a.max()), float(np.percentile(a, 99)), float(np.median(a)))


@dataclass(frozen=True)
class Fit:
    """How a threshold scales with a case symbol: ``model`` 'constant', 'sqrt' (c sqrt(S)) or 'linear' (c S);
    ``coefficient`` c before the margin and rounding; ``log_slack`` the mean log(envelope / m_i) over the cases."""

    model: str
    symbol: str | None
    coefficient: float
    log_slack: float

    def g(self, symbols: dict[str, int]) -> float:
        """The model's shape at a case: 1, sqrt(S) or S."""
        if self.model == "constant":
            return 1.0
        assert self.symbol is not None  # a scaled model names its symbol
        s = float(symbols[self.symbol])
        return math.sqrt(s) if self.model == "sqrt" else s


def _envelope(model: str, symbol: str | None, per_case: list[tuple[dict[str, int], float]]) -> Fit | None:
    fit = Fit(model, symbol, 0.0, 0.0)
    positive = [(s, m) for s, m in per_case if m > 0 and math.isfinite(m)]
    if not positive:
        return None
    c = max(m / fit.g(s) for s, m in positive)
    slack = float(np.mean([math.log(c * fit.g(s) / m) for s, m in positive]))
    return Fit(model, symbol, c, slack)


def fit_scaling(per_case: list[tuple[dict[str, int], float]]) -> Fit:
    """The envelope of the per-case maxima (symbols, m_i) with the smallest mean log-slack: constant, or c sqrt(S)
    or c S for a symbol S with at least three distinct values >= 1 among the cases with m_i > 0, taken only when
    it beats the constant by :data:`SCALED_GAIN` on average. All m_i zero: the constant 0."""
    constant = _envelope("constant", None, per_case)
    if constant is None:
        return Fit("constant", None, 0.0, 0.0)
    positive = [s for s, m in per_case if m > 0 and math.isfinite(m)]
    names = sorted({n for s in positive for n in s})
    best = constant
    for name in names:
        values = [s.get(name) for s in positive]
        if any(v is None or v < 1 for v in values) or len(set(values)) < 3:
            continue
        for model in ("sqrt", "linear"):
            fit = _envelope(model, name, per_case)
            if fit is not None and fit.log_slack < best.log_slack:
                best = fit
    if best is not constant and best.log_slack > constant.log_slack - math.log(SCALED_GAIN):
        return constant
    return best


@dataclass(frozen=True)
class Proposal:
    """The proposal for one operator x dtype x metric (see the module docstring).

    ``current``: the threshold in force (one value, or the smallest and largest over the cases when it varies
    per case); ``source``: where it came from; ``impl``: the observed errors; ``baseline``: the baseline's errors
    against the rounded oracle; ``proposed``: a number, or an expression of a case symbol (text) when ``fit``
    scales; ``slack``: current / observed, the tightest case; ``flaky``/``loose``: the check's findings in words;
    ``margin``: the safety margin it was made with.
    """

    operator: str
    dtype: str
    metric: str
    spec_file: str
    current: tuple[float, float]
    source: str
    impl: Distribution
    baseline: Distribution | None
    floor: float
    fit: Fit
    proposed: float | str
    slack: float
    cases: int
    seeds: tuple[int, ...]
    flaky: str | None = None
    loose: str | None = None
    margin: float = MARGIN
    output: str | None = None
    """The named output it is for (a gradient ``grad[x]``); ``None``: the operator's unnamed outputs together."""

    @property
    def criterion(self) -> str:
        """The criterion in words: ``diff1`` or, for a named output, ``diff1[grad[x]]``."""
        return f"{self.metric}[{self.output}]" if self.output else self.metric

    def proposed_at(self, symbols: dict[str, int]) -> float:
        """The proposed threshold for a case."""
        if isinstance(self.proposed, float):
            return self.proposed
        return max(step_up(self.floor), step_up(self.margin * self.fit.coefficient) * self.fit.g(symbols))

    @property
    def current_text(self) -> str:
        lo, hi = self.current
        return fmt(lo) if lo == hi else f"{fmt(lo)}..{fmt(hi)}"


def expression(fit: Fit, coefficient: float, floor: float, lowest: float) -> str:
    """The proposal of a scaled fit as a threshold expression, e.g. ``5e-05 * sqrt(K)``; wrapped in
    ``max(step_up(floor), ...)`` only when the floor is above the envelope at the smallest symbol value ``lowest``."""
    shape = f"sqrt({fit.symbol})" if fit.model == "sqrt" else fit.symbol
    text = f"{number_text(coefficient)} * {shape}"
    g_low = math.sqrt(lowest) if fit.model == "sqrt" else lowest
    return f"max({number_text(step_up(floor))}, {text})" if floor > coefficient * g_low else text


def too_loose(
    group: list[Observation], per_case: dict[str, tuple[dict[str, int], float, float]], floor: float, loose: float
) -> str | None:
    """The check's "loose" finding, or None: a threshold the spec sets (source "spec override") that exceeds
    ``loose`` x max(the impl's largest observed error m, the floor) in every case it applies to. A category
    default (MLU-OPS's table) is the field's standard, not a spec's choice: never loose."""
    own = {o.case_id for o in group if o.source.startswith("spec override")}
    cases = [(m, th) for cid, (_, m, th) in per_case.items() if cid in own]
    if not cases:
        return None
    slack = min(th / max(m, floor) if max(m, floor) > 0 else math.inf for m, th in cases)
    if not slack > loose:
        return None
    m = max(m for m, _ in cases)
    basis = f"the impl's largest observed error {fmt(m)}" if m >= floor else f"the floor {fmt(floor)} (the impl's "
    basis += "" if m >= floor else f"largest observed error is {fmt(m)})"
    return f"spec threshold {fmt(min(th for _, th in cases))} is {fmt(slack)}x {basis} (> {fmt(loose)}x)"


def propose(group: list[Observation], *, margin: float = MARGIN, loose: float = LOOSE) -> Proposal:
    """The proposal for the observations of one operator x dtype x metric."""
    first = group[0]
    # never below what the dtype's rounding alone gives, nor below the baseline's own error against the oracle
    # (x margin): an impl as close to the oracle as the baseline passes at b_o, whatever side of it it sits
    legit = max(
        (o.baseline_oracle for o in group if o.baseline_oracle is not None and math.isfinite(o.baseline_oracle)),
        default=0.0,
    )
    floor = max(rounding_floor(first.metric, first.dtype), margin * legit)
    per_case: dict[str, tuple[dict[str, int], float, float]] = {}
    for o in group:
        symbols, m, th = per_case.get(o.case_id, (o.symbols, 0.0, o.threshold))
        per_case[o.case_id] = (symbols, max(m, o.value), min(th, o.threshold))
    fit = fit_scaling([(s, m) for s, m, _ in per_case.values()])
    if fit.model == "constant":
        proposed: float | str = step_up(max(margin * fit.coefficient, floor))
    else:
        scaled_by = fit.symbol
        assert scaled_by is not None  # a scaled model names its symbol
        lowest = min(float(s[scaled_by]) for s, _, _ in per_case.values())
        proposed = expression(fit, step_up(margin * fit.coefficient), floor, lowest)
    slack = min(th / max(m, floor) if max(m, floor) > 0 else math.inf for _, m, th in per_case.values())
    over = [(cid, m, th) for cid, (_, m, th) in per_case.items() if not m <= th]
    flaky = (
        (
            f"{over[0][0]}: observed {fmt(over[0][1])} > threshold {fmt(over[0][2])}"
            + (f" (and {counted(len(over) - 1, 'more case')})" if len(over) > 1 else "")
        )
        if over
        else None
    )
    wide = too_loose(group, per_case, floor, loose)
    thresholds = [th for _, _, th in per_case.values()]
    sources = [o.source for o in group]
    impl = Distribution.of(o.value for o in group)
    assert impl is not None  # a group holds at least one observation
    p = Proposal(
        first.operator,
        first.dtype,
        first.metric,
        first.spec_file,
        (min(thresholds), max(thresholds)),
        max(set(sources), key=sources.count),
        impl,
        Distribution.of(o.baseline_oracle for o in group),
        floor,
        fit,
        proposed,
        slack,
        len(per_case),
        tuple(sorted({o.seed for o in group})),
        flaky,
        wide,
        margin,
        first.output_name,
    )
    return p


def proposals(obs: Iterable[Observation], *, margin: float = MARGIN, loose: float = LOOSE) -> list[Proposal]:
    """One :class:`Proposal` per operator x dtype x metric, and per named output (each gradient of a ``backward``
    spec on its own), in first-seen order."""
    groups: dict[tuple[str, str, str, str | None], list[Observation]] = defaultdict(list)
    for o in obs:
        groups[(o.operator, o.dtype, o.metric, o.output_name)].append(o)
    return [propose(g, margin=margin, loose=loose) for g in groups.values()]


@dataclass(frozen=True)
class TuneResult:
    """What :func:`acceptance.tune` found: one proposal per operator x dtype x metric, and the rule's settings.
    ``passed`` is the ``--check`` outcome: no proposal flaky or loose."""

    proposals: tuple[Proposal, ...]
    margin: float = MARGIN
    loose: float = LOOSE
    seeds: tuple[int, ...] = field(default=())

    @property
    def problems(self) -> list[str]:
        """The check's findings, one line each, naming operator, dtype, metric and both numbers."""
        out = []
        for p in self.proposals:
            for kind, text in (("flaky", p.flaky), ("loose", p.loose)):
                if text:
                    out.append(f"{p.operator} {p.dtype} {p.criterion}: {kind}: {text}")
        return out

    @property
    def passed(self) -> bool:
        return not self.problems

    def table(self) -> str:
        """The proposals as a plain-text table."""
        head = (
            "operator",
            "dtype",
            "criterion",
            "threshold",
            "source",
            "impl max",
            "p99",
            "median",
            "baseline max",
            "proposed",
            "fit",
            "slack",
        )
        rows = [head]
        for p in self.proposals:
            b = p.baseline
            fit = "constant" if p.fit.model == "constant" else f"{p.fit.model}({p.fit.symbol})"
            rows.append(
                (
                    p.operator,
                    p.dtype,
                    f"{p.criterion} <=",
                    p.current_text,
                    p.source,
                    fmt(p.impl.max),
                    fmt(p.impl.p99),
                    fmt(p.impl.median),
                    fmt(b.max) if b else "-",
                    p.proposed if isinstance(p.proposed, str) else fmt(p.proposed),
                    fit,
                    f"{fmt(p.slack)}x",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows)
