"""The record types every stage fills: criteria, statistics, measurements, case results, the run.

:class:`Results` is the one canonical record of a run (``results.json``,
written and read by :mod:`acceptance.results`); every reporter renders from
it alone. The pieces are filled along the data flow: the runner measures
(:class:`CaseResult` without a verdict, :class:`WorstElement`,
:class:`Timing`), :mod:`acceptance.stats` describes (:class:`Describe`,
:class:`StatTest`, :class:`DualDeltaRecord`), :mod:`acceptance.verdict`
decides (:class:`Criterion`, the verdict and reasons).

Floats that are not finite (``inf``, ``nan``) are written as the JSON strings
``"inf"``, ``"-inf"`` and ``"nan"`` so the file stays strict JSON; they load
back as floats.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

SCHEMA_VERSION = 2

Verdict = Literal["pass", "fail", "error", "skip"]
VERDICT_ORDER: dict[str, int] = {"fail": 0, "error": 1, "skip": 2, "pass": 3}


def json_float(x: float) -> Union[float, str]:
    """``inf``, ``-inf`` and ``nan`` as the strings strict JSON can hold; other values unchanged."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _float_in(x: Any) -> Any:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    return x


#: A float that survives JSON even when it is ``inf`` or ``nan``.
JFloat = Annotated[float, BeforeValidator(_float_in), PlainSerializer(json_float)]

#: One metric value: a float, or a tuple of floats for ``diff3`` (m1, m2) and
#: ``diff4`` (p1, p2, n).
MetricValue = Union[JFloat, list[JFloat], None]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Environment(_Model):
    """Where and when the run happened (provenance for sign-off)."""

    acceptance: str
    python: str
    torch: str
    numpy: str
    platform: str
    host: str
    device: str = Field(description="device string the impl ran on, e.g. 'cpu', 'cuda:0'")
    device_name: str = Field(description="human name, e.g. 'NVIDIA H100 80GB HBM3' or the CPU model")
    cuda_version: Optional[str] = None
    git_commit: Optional[str] = None
    command_line: str = ""
    start_time: str = Field(description="ISO 8601, UTC")
    end_time: str = Field(description="ISO 8601, UTC")


CriterionKind = Literal["threshold", "placement", "diff4", "dual_delta"]


class Criterion(_Model):
    """One metric compared with one threshold, as the verdict evaluated it.

    ``kind``: ``threshold`` (a fixed threshold on a worst-over-trials metric),
    ``placement`` (NaN/Inf positions must match), ``diff4`` (MLU-OPS's
    direction rule) or ``dual_delta`` (the non-inferiority gate of one
    dual-delta record; ``value`` is the median paired ratio delta_1/delta_2
    and ``threshold`` the factor). ``threshold`` is a pair ``[m1, m2]`` for
    diff3. ``passed`` is ``None`` when the criterion was not evaluated
    (``note`` says why, e.g. diff4 with fewer than 100 unequal points).
    ``source`` says where the threshold came from: ``"float16 convolution
    default"``, ``"spec override"``, ...
    """

    kind: CriterionKind = "threshold"
    metric: str
    output: int = 0
    value: MetricValue = None
    threshold: Union[JFloat, list[JFloat], None] = None
    comparison: Literal["<=", "==", ">=", "two-sided", "non-inferior"] = "<="
    passed: Optional[bool] = None
    source: str = ""
    note: Optional[str] = None


class WorstElement(_Model):
    """The element with the largest absolute error over all trials."""

    output: int = 0
    trial: int
    index: list[int]
    evaluated: JFloat
    baseline: JFloat
    abs_error: JFloat
    rel_error: JFloat


class Describe(_Model):
    """Descriptive statistics of one error distribution (one value per trial)."""

    n: int
    mean: JFloat
    median: JFloat
    std: JFloat
    p50: JFloat
    p90: JFloat
    p99: JFloat
    max: JFloat
    min: JFloat


class StatTest(_Model):
    """One hypothesis test, as scipy reports it."""

    name: str = Field(description="ks | wilcoxon | sign | t | shapiro | brown_forsythe | ...")
    statistic: Optional[JFloat] = None
    p_value: Optional[JFloat] = None
    alternative: str = "two-sided"
    note: Optional[str] = None


class DualDeltaRecord(_Model):
    """Dual-delta analysis of one error metric for one output.

    ``delta_impl`` is delta_1 = err(impl, oracle) and ``delta_baseline`` is
    delta_2 = err(baseline, oracle), one value per trial, paired by trial.
    """

    metric: str
    output: int = 0
    trials: int
    delta_impl: list[JFloat]
    delta_baseline: list[JFloat]
    impl: Describe
    baseline: Describe
    ratio: Optional[Describe] = Field(None, description="paired delta_1/delta_2 where delta_2 > 0")
    tests: list[StatTest] = []
    conclusion: str
    factor: JFloat = Field(description="non-inferiority factor in force")
    alpha: JFloat
    free: JFloat = Field(0.0, description="error always allowed: the output dtype's own rounding of the oracle")
    p_value: Optional[JFloat] = Field(None, description="p-value of the non-inferiority test")
    p_adjusted: Optional[JFloat] = Field(None, description="after Holm correction over the run")
    passed: Optional[bool] = Field(None, description="the gate's decision (acceptance.verdict); None until decided")
    reasons: list[str] = []


class Timing(_Model):
    """Wall-clock seconds spent per role, summed over trials."""

    total: JFloat = 0.0
    impl: JFloat = 0.0
    baseline: JFloat = 0.0
    oracle: JFloat = 0.0


class Diff4Counts(_Model):
    """Counts behind MLU-OPS's diff4 rule for one output, summed over trials.

    ``above``/``below``: positions with impl > baseline / impl < baseline;
    ``baseline_above``/``baseline_below``: baseline against the oracle, same
    sense (both 0 when the oracle did not run).
    """

    above: int = 0
    below: int = 0
    baseline_above: int = 0
    baseline_below: int = 0


class CaseResult(_Model):
    """One (operator, dtype, case): what was measured and what was decided about it.

    The runner fills the measurement; :func:`acceptance.verdict.decide` adds
    ``verdict``, ``reasons``, ``criteria`` and ``tolerance_to_pass`` once every
    statistic the decision needs is known (Holm over the run included).
    ``verdict`` is ``None`` only before that (a measured, undecided case);
    ``results.json`` holds decided cases only.
    """

    id: str = Field(description="stable unique id, e.g. 'matmul[float16-M=128-N=128-K=128]'")
    operator: str
    category: str
    spec_file: str
    dtype: str
    params: dict[str, Any] = Field(description="the case symbols, e.g. {'M': 128, 'K': 4097}")
    trials: int
    seed: int
    verdict: Optional[Verdict] = None
    reasons: list[str] = Field([], description="why, in words; non-empty unless pass")
    criteria: list[Criterion] = []
    metrics: list[dict[str, MetricValue]] = Field(
        [], description="per output: worst-over-trials metrics.compute(impl, baseline)"
    )
    worst: Optional[WorstElement] = None
    bad_fraction: Optional[JFloat] = Field(None, description="fraction of elements over tolerance, worst trial")
    bad_location: Optional[str] = Field(None, description="where the elements over tolerance sit, in words")
    tolerance_to_pass: dict[str, JFloat] = Field({}, description="per failing metric: the smallest threshold that would pass")
    rel_error_buckets: dict[str, int] = Field(
        {}, description="counts of |e-b|/|b| over all trials: '=0', '<1e-6', '1e-6..1e-5', ..., '>1'"
    )
    atomic_spread: Optional[JFloat] = Field(None, description="max |run_i - run_j| of impl on the same inputs")
    diff4_counts: list[Diff4Counts] = Field([], description="per output: the counts behind the diff4 rule")
    dual_delta: list[DualDeltaRecord] = []
    timing: Timing = Timing()
    waiver: Optional[str] = Field(
        None, description="the spec's waiver in force for this case; a waived failure has verdict 'skip'"
    )
    error: Optional[str] = Field(None, description="message when verdict is 'error'")


class Summary(_Model):
    total: int
    passed: int
    failed: int
    errors: int
    skipped: int
    verdict: Literal["pass", "fail"]
    exit_code: int


class Results(_Model):
    """A run: provenance, counts, and every decided case."""

    schema_version: int = SCHEMA_VERSION
    environment: Environment
    summary: Summary
    cases: list[CaseResult]

    @model_validator(mode="after")
    def _decided(self) -> "Results":
        undecided = [c.id for c in self.cases if c.verdict is None]
        if undecided:
            raise ValueError(f"{len(undecided)} case(s) have no verdict, e.g. {undecided[0]}")
        return self


def sorted_failures_first(cases: list[CaseResult]) -> list[CaseResult]:
    """Fail, then error, then skip, then pass; stable within each verdict."""
    return sorted(cases, key=lambda c: VERDICT_ORDER[c.verdict])
