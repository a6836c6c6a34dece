"""The record types every stage fills: criteria, statistics, measurements, case results, the run.

:class:`Results` is the one canonical record of a run (``results.json``,
written and read by :mod:`acceptance.session.results`); every reporter renders from
it alone. The pieces are filled along the data flow: the runner measures
(:class:`MeasuredCase` with one :class:`OutputMeasurement` per output,
:class:`WorstElement`, :class:`Timing`), :mod:`acceptance.numerics.stats`
describes (:class:`Describe`, :class:`StatTest`, :class:`DualDeltaRecord`),
:mod:`acceptance.decide.verdict` decides (:class:`Criterion`, the verdict and
reasons) and returns the decided :class:`CaseResult`.

Floats that are not finite (``inf``, ``nan``) are written as the JSON strings
``"inf"``, ``"-inf"`` and ``"nan"`` so the file stays strict JSON; they load
back as floats.

The pieces live in submodules (the shared base; bench timing; waiver
records; run comparison) and are all importable from here.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import ConfigDict

from acceptance.records.base import JSON, SCHEMA_VERSION, VERDICT_ORDER, JFloat, MetricValue, Verdict, json_float
from acceptance.records.base import Model as _Model
from acceptance.records.comparison import CaseComparison, Comparison, MetricRatio, PerfRatio
from acceptance.records.perf import PerfRecord
from acceptance.records.waivers import WaiverRecord

__all__ = [
    "SCHEMA_VERSION",
    "VERDICT_ORDER",
    "JFloat",
    "MetricValue",
    "Verdict",
    "json_float",
    "CaseComparison",
    "Comparison",
    "MetricRatio",
    "PerfRatio",
    "PerfRecord",
    "WaiverRecord",
    "Environment",
    "CriterionKind",
    "Criterion",
    "WorstElement",
    "Describe",
    "StatTest",
    "DualDeltaRecord",
    "Determinism",
    "Timing",
    "UlpStats",
    "CriterionWorst",
    "Bias",
    "Advisory",
    "Diff4Counts",
    "OutputMeasurement",
    "MeasuredCase",
    "CaseResult",
    "Summary",
    "Plan",
    "Results",
    "sorted_failures_first",
    "REL_ERROR_BUCKETS",
]

_T = TypeVar("_T")

#: Relative-error buckets of :attr:`CaseResult.rel_error_buckets`, as rocMLIR prints them: label -> upper
#: bound (exclusive); below them "=0", above them ">1".
REL_ERROR_BUCKETS: tuple[tuple[str, float], ...] = (
    ("<1e-6", 1e-6),
    ("1e-6..1e-5", 1e-5),
    ("1e-5..1e-4", 1e-4),
    ("1e-4..1e-3", 1e-3),
    ("1e-3..1e-2", 1e-2),
    ("1e-2..1e-1", 1e-1),
    ("1e-1..1", 1.0),
)


class Environment(_Model):
    """Where and when the run happened (provenance for sign-off)."""

    acceptance: str
    """Version of acceptance."""
    python: str
    """Python version."""
    torch: str
    """torch version."""
    numpy: str
    """numpy version."""
    platform: str
    """Operating system and machine."""
    host: str
    """Host name."""
    device: str
    """Device string the impl ran on, e.g. 'cpu', 'cuda:0'."""
    device_name: str
    """Human name, e.g. 'NVIDIA H100 80GB HBM3' or the CPU model."""
    cuda_version: str | None = None
    """CUDA version when the impl ran on a CUDA device."""
    git_commit: str | None = None
    """Commit of the working directory, when it is a git checkout."""
    command_line: str = ""
    """The command as typed, rebuilt from its parsed options."""
    start_time: str
    """Start, ISO 8601, UTC."""
    end_time: str
    """End, ISO 8601, UTC."""


CriterionKind = Literal[
    "threshold", "placement", "bits", "ulp", "diff4", "dual_delta", "perf", "vacuity", "determinism", "invariant"
]


class CriterionWorst(_Model):
    """The element that decided a criterion: the largest of its per-element error over all trials."""

    output: int = 0
    """Output index."""
    trial: int
    """Trial it occurred in."""
    index: list[int]
    """Its index in the output."""
    impl: JFloat
    """The impl's value."""
    baseline: JFloat
    """The baseline's value."""
    oracle: JFloat | None = None
    """The oracle's value (float64), when the oracle ran."""
    error: JFloat
    """Its error in the criterion's element measure (``measure``)."""
    measure: Literal["abs", "rel", "abs_oracle", "rel_oracle", "ulp", "ulp_over", "hyb"]
    """'abs': |e - b|; 'rel': |e - b| / |b|; 'abs_oracle', 'rel_oracle': the same against the oracle rounded to
    the dtype; 'ulp': ULP error against the oracle (flush forgiven); 'ulp_over': the same, largest among the
    elements the ULP rule's ``ulp_lost_elements`` counts; 'hyb': |e - o| /
    (1 + |o|). NaN/Inf mismatches count as inf."""


class Criterion(_Model):
    """One metric compared with one threshold, as the verdict evaluated it."""

    kind: CriterionKind = "threshold"
    """'threshold': a fixed threshold on a worst-over-trials metric; 'placement': NaN/Inf positions must match;
    'bits': bit-exact categories, elements matching neither the baseline's nor the rounded oracle's bits;
    'ulp': ULP error against the oracle, scaled by the baseline's; 'diff4': the material-bias rule;
    'dual_delta': the non-inferiority gate of one dual-delta record; 'perf': the speed-up over the perf baseline
    (``acceptance bench``); 'vacuity': a case that showed nothing (metric 'vacuous', value and threshold null,
    note = why; present only for such a case, passed null unless the run is --strict, then false);
    'determinism': run-to-run determinism of the impl (metric 'run_to_run_differing', value = elements whose
    bits differ between runs on the same inputs, threshold 0, comparison '=='; present when determinism was
    measured; passed = the impl is bitwise or differs only in NaN payloads, null when the category or the
    spec allows variation)."""
    metric: str
    """The metric (for 'dual_delta', the metric of the record)."""
    output: int = 0
    """Output index of the operator."""
    output_name: str | None = None
    """The output's name where the spec names it (a gradient: ``grad[x]``); null: reported as ``output k``."""
    value: MetricValue = None
    """The worst value over trials (diff3: [m1, m2]; diff4: [p1, p2, n]; dual_delta: the median paired ratio
    delta_1/delta_2)."""
    threshold: JFloat | list[JFloat] | None = None
    """The threshold ([m1, m2] for diff3; the factor for dual_delta)."""
    comparison: Literal["<=", "==", ">=", "two-sided", "non-inferior"] = "<="
    """How value is held against threshold."""
    passed: bool | None = None
    """null when not evaluated (note says why, e.g. diff4 with fewer than 100 unequal points)."""
    source: str = ""
    """Where the threshold came from: 'float16 convolution default', 'spec override', ..."""
    note: str | None = None
    """More words: why not evaluated, what the other side measured, or a dual-delta conclusion."""
    worst: CriterionWorst | None = None
    """The element that decided it (the largest of its per-element error; null where no one element does: bits,
    diff4, perf, vacuity, determinism, or results written before it was recorded)."""
    against: Literal["baseline", "oracle"] = "baseline"
    """What the value was measured against: the baseline, or the oracle (rounded once to the dtype for fixed
    thresholds) when the impl is at least as close to it as the baseline."""


class WorstElement(_Model):
    """The element furthest from the oracle over all trials (hybrid error |e - o| / (1 + |o|)); the largest
    |e - b| when no oracle ran."""

    output: int = 0
    """Output index."""
    output_name: str | None = None
    """The output's name where the spec names it (a gradient: ``grad[x]``)."""
    trial: int
    """Trial it occurred in."""
    index: list[int]
    """Its index in the output."""
    evaluated: JFloat
    """The impl's value."""
    baseline: JFloat
    """The baseline's value."""
    oracle: JFloat | None = None
    """The oracle's value (float64), when the oracle ran."""
    abs_error: JFloat
    """|evaluated - baseline|."""
    rel_error: JFloat
    """|evaluated - baseline| / |baseline|."""
    oracle_error: JFloat | None = None
    """|evaluated - oracle|."""
    ulp: JFloat | None = None
    """|evaluated - oracle| in units in the last place of the dtype at the oracle's value."""


class Describe(_Model):
    """Descriptive statistics of one error distribution (one value per trial), over the finite values."""

    n: int
    """Finite values (below the trials when some errors were NaN or inf)."""
    mean: JFloat
    """Mean."""
    median: JFloat
    """Median."""
    std: JFloat
    """Sample standard deviation (ddof 1)."""
    p50: JFloat
    """50th percentile (linear interpolation)."""
    p90: JFloat
    """90th percentile."""
    p99: JFloat
    """99th percentile."""
    max: JFloat
    """Largest."""
    min: JFloat
    """Smallest."""


class StatTest(_Model):
    """One hypothesis test, as scipy reports it."""

    name: str
    """ks | wilcoxon | sign | t | shapiro | brown_forsythe | non_inferiority."""
    statistic: JFloat | None = None
    """The test statistic (null when not run)."""
    p_value: JFloat | None = None
    """Its p-value (null when not run)."""
    alternative: str = "two-sided"
    """two-sided | greater | less."""
    note: str | None = None
    """Why it was not run, or what was left out."""


class DualDeltaRecord(_Model):
    """Dual-delta analysis of one error metric for one output, paired by trial."""

    metric: str
    """The error metric (a scalar error of the metric registry)."""
    output: int = 0
    """Output index."""
    output_name: str | None = None
    """The output's name where the spec names it (a gradient: ``grad[x]``)."""
    trials: int
    """Trials analysed."""
    delta_impl: list[JFloat]
    """delta_1 = err(impl, oracle), one per trial."""
    delta_baseline: list[JFloat]
    """delta_2 = err(baseline, oracle), one per trial."""
    impl: Describe
    """Statistics of delta_1."""
    baseline: Describe
    """Statistics of delta_2."""
    ratio: Describe | None = None
    """Statistics of the paired delta_1/delta_2 where delta_2 > 0."""
    tests: list[StatTest] = []
    """KS, Wilcoxon (both ways), sign, Shapiro-Wilk, paired t, Brown-Forsythe, and the non-inferiority sign test."""
    conclusion: str
    """How the two distributions relate, in words."""
    factor: JFloat
    """Non-inferiority factor in force."""
    alpha: JFloat
    """Level of the tests and of the gate."""
    free: JFloat = 0.0
    """Error always allowed: the output dtype's own rounding of the oracle."""
    p_value: JFloat | None = None
    """p-value of the non-inferiority sign test."""
    p_adjusted: JFloat | None = None
    """The same after Holm correction over the run."""
    p_worst: JFloat | None = None
    """p-value of the worst-trial test (the impl's worst trial against n draws of factor x the baseline's error)."""
    p_worst_adjusted: JFloat | None = None
    """The same after Holm correction over the run."""
    passed: bool | None = None
    """The gate's decision (null until decided)."""
    reasons: list[str] = []
    """Why the gate failed (empty on a pass)."""
    floor: JFloat | None = None
    """Accuracy floor, ulp against the oracle: a trial whose impl error is within it counts as within allowance."""
    impl_ulp: list[JFloat] = []
    """Per trial: the impl's ULP error against the oracle the floor is compared with (max or mean, as the metric)."""


class Determinism(_Model):
    """Run-to-run determinism of impl and baseline on the same inputs (:mod:`acceptance.measure.determinism`)."""

    impl: Literal["bitwise", "nan_payloads", "varying"]
    """The impl's class over all trials and outputs."""
    impl_spread: JFloat = 0.0
    """max |run_i - run_1| of the impl over differing elements (inf: NaN/Inf against a number)."""
    impl_differing: int = 0
    """Elements whose bits differ between runs (NaN against NaN excluded), summed over trials."""
    runs: int = 1
    """Impl runs per trial."""
    baseline: Literal["bitwise", "nan_payloads", "varying"] = "bitwise"
    """The baseline's class."""
    baseline_runs: int = 1
    """Baseline runs per trial."""
    required: bool = True
    """Whether the case fails when the impl varies (every category but atomic_add, unless the spec says)."""
    impl_spread_ulp: JFloat | None = None
    """Where variation is allowed: max over elements of (max − min over the runs) in ulp of the output's dtype
    at the oracle (``None``: the impl must be deterministic)."""
    impl_varying: int | None = None
    """Where variation is allowed: elements whose value differs between any two runs, summed over trials."""
    chosen_from: int = 1
    """The criteria see one run per trial chosen from this many: the median, or the worst where it is gross
    (:func:`acceptance.measure.determinism.pick`; 1: the first run); the most runs of any trial."""
    extended_trials: int | None = None
    """Where variation is allowed: trials whose first runs straddled a dual-delta allowance and so took more
    runs (:data:`acceptance.measure.determinism.RERUN_CAP` × R in all), summed over the case."""


class Timing(_Model):
    """Wall-clock seconds spent per role, summed over trials."""

    total: JFloat = 0.0
    """The whole case, harness included."""
    impl: JFloat = 0.0
    """Inside the impl."""
    baseline: JFloat = 0.0
    """Inside the baseline."""
    oracle: JFloat = 0.0
    """Inside the oracle."""
    setup: JFloat = 0.0
    """Setting the declared roles up, once per case before the trials (build, compile, warm-up); not in impl."""


class UlpStats(_Model):
    """ULP error against the oracle for one output, worst over trials, in ulp of the dtype at the oracle rounded
    to it, with flush to zero forgiven: where the result is below the dtype's smallest normal and the oracle
    rounds to a subnormal or zero, the error counts as 0."""

    impl_max: JFloat = 0.0
    """Largest impl error, ulp."""
    impl_mean: JFloat = 0.0
    """Largest per-trial mean impl error, ulp."""
    baseline_max: JFloat = 0.0
    """Largest baseline error, ulp."""
    baseline_mean: JFloat = 0.0
    """Largest per-trial mean baseline error, ulp."""
    elements_over: int = 0
    """Impl elements, over all trials, with no correct bit (|e - o| >= |o|: a zero, a wrong sign) where the
    baseline keeps its leading one (|b - o| < |o| / 2), a flush forgiven: the element-wise side of the rule."""
    subnormal_unit: int = 0
    """Impl elements, over all trials, whose oracle rounds to a subnormal or zero (and the impl differs from it
    and is not a forgiven flush): their ulp is the smallest subnormal spacing, so their errors read large."""


class Bias(_Model):
    """Signed error against the oracle for one output over all trials, in ulp of the dtype at the oracle's
    value, each element clipped to +-BIAS_CLIP ulp; elements where impl and oracle are both below the smallest
    normal are left out (a flush, counted)."""

    n: int = 0
    """Elements averaged."""
    flushed: int = 0
    """Elements left out as a flush to zero."""
    impl_value: JFloat = 0.0
    """Mean of (e - o)/ulp: an additive shift."""
    impl_magnitude: JFloat = 0.0
    """Mean of sign(o)(e - o)/ulp: a shift of magnitude (a scale error)."""
    baseline_value: JFloat = 0.0
    """The same for the baseline."""
    baseline_magnitude: JFloat = 0.0
    """The same for the baseline."""
    baseline_abs: JFloat = 0.0
    """Mean of |b - o|/ulp: the baseline's own mean error, which scales the material-bias floor."""


class Advisory(_Model):
    """What a well-known gate would have said about the case, computed from the same trials; it never decides."""

    name: str
    """The gate, e.g. 'torch.testing.assert_close'."""
    passed: bool
    """Its verdict."""
    detail: str
    """Its numbers, in words."""


class Diff4Counts(_Model):
    """Counts behind MLU-OPS's diff4 rule for one output, summed over trials."""

    above: int = 0
    """Positions with impl > baseline."""
    below: int = 0
    """Positions with impl < baseline."""
    baseline_above: int = 0
    """Positions with baseline > oracle (0 when the oracle did not run)."""
    baseline_below: int = 0
    """Positions with baseline < oracle."""


class OutputMeasurement(_Model):
    """What one output of a case measured over its trials, against the baseline and against the oracle."""

    model_config = ConfigDict(**_Model.model_config, frozen=True)

    metrics: dict[str, MetricValue] = {}
    """The worst-over-trials metrics of impl against baseline (diff4 from the counts summed over trials)."""
    impl_oracle: dict[str, MetricValue] | None = None
    """The worst-over-trials metrics of impl against the oracle rounded once to the dtype (null: no oracle)."""
    baseline_oracle: dict[str, MetricValue] | None = None
    """The same for the baseline (null: no oracle)."""
    ulp: UlpStats | None = None
    """ULP error against the oracle (flush forgiven), impl and baseline (null: not measured)."""
    bias: Bias | None = None
    """The signed error against the oracle (the diff4 rule's material-bias test; null: not measured)."""
    bit_mismatches: int | None = None
    """Bit-exact categories: elements whose bits match neither the baseline nor the rounded oracle (null: not
    measured)."""
    diff4: Diff4Counts = Diff4Counts()
    """The counts behind the diff4 rule, summed over trials."""
    worst: dict[str, CriterionWorst] = {}
    """Per element measure (:attr:`CriterionWorst.measure`): its worst element over the trials."""
    invariant: str | None = None
    """The first output invariant the impl broke, in words (trial, element, value, oracle); null: none broken
    or none declared."""


class MeasuredCase(_Model):
    """One (operator, dtype, case) as measured, before any decision: what the runner, the journal and the
    measurement memo hold. :func:`acceptance.decide.verdict.decide` makes the :class:`CaseResult` of it; the
    fields mean what the same fields of :class:`CaseResult` mean."""

    model_config = ConfigDict(**_Model.model_config, frozen=True)

    id: str
    """Stable unique id."""
    operator: str
    """Operator name."""
    category: str
    """Operator category."""
    spec_file: str
    """Path of the spec file."""
    dtype: str
    """Test dtype."""
    params: dict[str, JSON]
    """The case symbols, and the case's own params under 'params'."""
    trials: int
    """Trials run."""
    seed: int
    """Spec seed."""
    outputs: list[OutputMeasurement] = []
    """One record per output of the operator (empty when the run of the case broke)."""
    compared: int | None = None
    """Elements compared numerically over all outputs and trials."""
    vacuous: str | None = None
    """Why the case says nothing, when it does not."""
    advisory: list[Advisory] = []
    """What peers' gates would have said."""
    worst: WorstElement | None = None
    """The worst element."""
    bad_fraction: JFloat | None = None
    """Fraction of elements over tolerance, worst trial."""
    bad_location: str | None = None
    """Where the elements over tolerance sit, in words."""
    rel_error_buckets: dict[str, int] = {}
    """Counts of |e-b|/|b| over all trials."""
    atomic_spread: JFloat | None = None
    """max |run_i - run_j| of impl on the same inputs (atomic_add)."""
    determinism: Determinism | None = None
    """Run-to-run determinism of impl and baseline (null: not measured)."""
    emulation: str | None = None
    """The emulation the baseline used, in words."""
    oracle_range: str | None = None
    """Where the oracle leaves the test dtype's range, in words."""
    layouts: dict[str, str] = {}
    output_names: list[str] = []
    """Per output, its name where the spec names it (``grad[x]`` for a ``backward`` spec's gradients; ``""`` for
    a forward output); empty: no output is named."""
    """Inputs the impl got in a non-contiguous memory layout."""
    dual_delta: list[DualDeltaRecord] = []
    """Dual-delta analyses, one per (output, metric), not yet gated (Holm over the run comes later)."""
    timing: Timing = Timing()
    """Seconds per role."""
    waiver: str | None = None
    """The spec's waiver in force for this case."""
    error: str | None = None
    """Message when the run of the case broke."""
    perf: PerfRecord | None = None
    """Timing by ``acceptance bench``."""
    warnings: list[str] = []
    """What the code under test reported without breaking."""
    description: str = ""
    """The spec's description of the operator."""


class CaseResult(_Model):
    """One decided (operator, dtype, case): what was measured and what was decided about it.

    :func:`acceptance.decide.verdict.decide` makes it from a :class:`MeasuredCase` once every statistic the
    decision needs is known (Holm over the run included): the measurement, with its per-output records
    flattened into the parallel lists below (``metrics[k]``, ``impl_oracle[k]``, ... are output k's; a list
    is empty when that measurement was not made), and ``verdict``, ``reasons``, ``criteria`` and
    ``tolerance_to_pass``. :attr:`outputs` reads the lists back one record per output.
    """

    id: str
    """Stable unique id, e.g. 'matmul[float16-M=128-N=128-K=128]'."""
    operator: str
    """Operator name."""
    category: str
    """Operator category."""
    spec_file: str
    """Path of the spec file."""
    dtype: str
    """Test dtype."""
    params: dict[str, JSON]
    """The case symbols, e.g. {'M': 128, 'K': 4097}, and the case's own params under 'params'."""
    trials: int
    """Trials run."""
    seed: int
    """Spec seed (inputs depend on it, the case id and the trial)."""
    verdict: Verdict
    """pass | fail | error | skip."""
    reasons: list[str] = []
    """Why, in words; non-empty unless pass."""
    criteria: list[Criterion] = []
    """Every criterion evaluated."""
    metrics: list[dict[str, MetricValue]] = []
    """Per output: the worst-over-trials metrics of impl against baseline."""
    impl_oracle: list[dict[str, MetricValue]] = []
    """Per output: the worst-over-trials metrics of impl against the oracle rounded once to the dtype."""
    baseline_oracle: list[dict[str, MetricValue]] = []
    """Per output: the worst-over-trials metrics of the baseline against the oracle rounded once to the dtype."""
    ulp: list[UlpStats] = []
    """Per output: ULP error against the oracle (flush forgiven), impl and baseline."""
    bias: list[Bias] = []
    """Per output: the signed error against the oracle (the diff4 rule's material-bias test)."""
    bit_mismatches: list[int] = []
    """Per output, bit-exact categories: elements whose bits match neither the baseline nor the rounded oracle."""
    compared: int | None = None
    """Elements compared numerically over all outputs and trials (0: nothing was compared)."""
    vacuous: str | None = None
    """Why the case says nothing, when it does not (no finite element compared, or a constant answer where the
    oracle varies); --strict fails it."""
    advisory: list[Advisory] = []
    """What peers' gates would have said (never deciding)."""
    worst: WorstElement | None = None
    """The element with the largest |impl - baseline|."""
    bad_fraction: JFloat | None = None
    """Fraction of elements over tolerance, worst trial."""
    bad_location: str | None = None
    """Where the elements over tolerance sit, in words."""
    tolerance_to_pass: dict[str, JFloat] = {}
    """Per failing metric: the smallest threshold that would pass."""
    rel_error_buckets: dict[str, int] = {}
    """Counts of |e-b|/|b| over all trials: '=0', '<1e-6', '1e-6..1e-5', ..., '>1'."""
    atomic_spread: JFloat | None = None
    """max |run_i - run_j| of impl on the same inputs (atomic_add)."""
    determinism: Determinism | None = None
    """Run-to-run determinism of impl and baseline (null: not measured)."""
    emulation: str | None = None
    """The emulation the baseline used, in words (null: the baseline as written)."""
    oracle_range: str | None = None
    """Where the oracle leaves the test dtype's range (overflow, underflow, subnormal results), in words."""
    layouts: dict[str, str] = {}
    output_names: list[str] = []
    """Per output, its name where the spec names it (``grad[x]`` for a ``backward`` spec's gradients; ``""`` for
    a forward output); empty: no output is named."""
    """Inputs the impl got in a non-contiguous memory layout: input name -> layout."""
    diff4_counts: list[Diff4Counts] = []
    """Per output: the counts behind the diff4 rule."""
    dual_delta: list[DualDeltaRecord] = []
    """Dual-delta analyses, one per (output, metric)."""
    timing: Timing = Timing()
    """Seconds per role."""
    waiver: str | None = None
    """The spec's waiver in force for this case; a waived failure has verdict 'skip'."""
    waiver_covers: list[str] = []
    """The verdicts (``fail``, ``error``) the waiver in force turns into skip; empty when no waiver is in force
    (and in files written before it was recorded)."""
    expired_waiver: str | None = None
    """An expired waiver that matches this case, in words (it waives nothing and is named among the reasons of a
    failure); null when none."""
    error: str | None = None
    """Message when the run of the case broke (verdict 'error')."""
    perf: PerfRecord | None = None
    """Timing by ``acceptance bench`` (null from ``acceptance run``)."""
    warnings: list[str] = []
    """What the code under test reported without breaking: torch.compile graph breaks, recompilations, an
    allowed fallback to eager."""
    description: str = ""
    """The spec's description of the operator."""

    @property
    def outputs(self) -> list[OutputMeasurement]:
        """The per-output lists read back as one record per output (a list left empty gives null there)."""
        return [
            OutputMeasurement(
                metrics=m,
                impl_oracle=_at(self.impl_oracle, k),
                baseline_oracle=_at(self.baseline_oracle, k),
                ulp=_at(self.ulp, k),
                bias=_at(self.bias, k),
                bit_mismatches=_at(self.bit_mismatches, k),
                diff4=_at(self.diff4_counts, k) or Diff4Counts(),
            )
            for k, m in enumerate(self.metrics)
        ]


def _at(values: list[_T], k: int) -> _T | None:
    """``values[k]``, or ``None`` past its end."""
    return values[k] if k < len(values) else None


class Summary(_Model):
    """Counts per verdict and the outcome of the run."""

    total: int
    """Cases."""
    passed: int
    """Cases that passed."""
    failed: int
    """Cases that failed."""
    errors: int
    """Cases whose run broke."""
    skipped: int
    """Cases skipped (waived failures included)."""
    verdict: Literal["pass", "fail", "interrupted"]
    """fail on any fail or error; interrupted when the run did not finish (never pass)."""
    exit_code: int
    """The exit code of the run."""


class Plan(_Model):
    """What a run set out to measure, so that merged shards can be checked complete: the ordered case ids of the
    whole run (every shard) and of this part, each as a sha256 of the ids joined by newlines."""

    shard: list[int] | None = None
    """[K, N] for shard K of N (``--shard K/N``: the cases of the whole run the cost-balanced assignment gives
    shard K, :attr:`positions`); null for a whole run."""
    cases: int
    """Cases of the whole run (every shard)."""
    digest: str
    """sha256 (hex) of the whole run's case ids in run order, joined by newlines: the same in every shard of one
    run."""
    part_digest: str
    """sha256 (hex) of this part's case ids (run and not run) in run order, joined by newlines."""
    missing_shards: list[int] = []
    """A merge of incomplete shards (``--allow-partial``): the shards K that were not there."""
    positions: list[int] | None = None
    """A shard: the positions (from 0) in the whole run's order of this part's cases, in this part's order
    (shards are balanced by estimated cost, :func:`acceptance.session.load.assign_shards`); null for a whole run
    and in shards written before it was recorded (those hold the cases K-1, K-1+N, ...)."""
    shard_cases: list[int] | None = None
    """A shard: the number of cases of each shard 1..N of the run (every shard computes the same assignment), so
    a merge can say how many cases a missing shard holds; null where ``positions`` is."""


class Results(_Model):
    """A run: provenance, counts, and every decided case."""

    schema_version: int = SCHEMA_VERSION
    """Bumped on any incompatible change."""
    digest: str | None = None
    """'sha256:' and the hex sha256 of the canonical JSON of every other field (the compact JSON pydantic-core writes);
    readers refuse a file whose content does not match it."""
    environment: Environment
    """Where and when."""
    summary: Summary
    """Counts."""
    cases: list[CaseResult]
    """Every case, in run order."""
    interrupted: bool = False
    """The run was stopped before every case ran (Ctrl-C, SIGTERM, -x at its first failure); not_run lists the rest."""
    not_run: list[str] = []
    """Ids of the cases an interrupted run did not run."""
    comparison: Comparison | None = None
    """The comparison with a base run (``acceptance run --compare-to``), when asked for."""
    waivers: list[WaiverRecord] = []
    """Every waiver of the specs run, with what it did in this run (applied, unmatched, expired)."""
    plan: Plan | None = None
    """The cases the run set out to measure (null in files before version 3 and for runs of cases given
    directly)."""


def sorted_failures_first(cases: list[CaseResult]) -> list[CaseResult]:
    """Fail, then error, then skip, then pass; stable within each verdict."""
    return sorted(cases, key=lambda c: VERDICT_ORDER[c.verdict])
