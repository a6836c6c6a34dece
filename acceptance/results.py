"""The results model: the one canonical record of a run (``results.json``).

Every reporter (console, JUnit XML, HTML, GitHub job summary, sign-off)
renders from :class:`Results` alone, so ``acceptance report results.json`` can
re-render any of them later and shards can be merged by merging results.

Floats that are not finite (``inf``, ``nan``) are written as the JSON strings
``"inf"``, ``"-inf"`` and ``"nan"`` so the file stays strict JSON; they load
back as floats.

``schema_version`` is bumped on any incompatible change; readers refuse a file
whose major version they do not know.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, BeforeValidator

SCHEMA_VERSION = 1

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


class Criterion(_Model):
    """One metric compared with one threshold.

    ``passed`` is ``None`` when the criterion was not evaluated (``note`` says
    why, e.g. diff4 with fewer than 100 unequal points). ``value`` is the worst
    value over trials. ``source`` says where the threshold came from:
    ``"float16 convolution default"``, ``"spec override"``, ...
    """

    metric: str
    output: int = 0
    value: MetricValue = None
    threshold: Optional[JFloat] = None
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
    passed: bool
    reasons: list[str] = []


class Timing(_Model):
    """Wall-clock seconds spent per role, summed over trials."""

    total: JFloat = 0.0
    impl: JFloat = 0.0
    baseline: JFloat = 0.0
    oracle: JFloat = 0.0


class CaseResult(_Model):
    """One (operator, dtype, case) and everything decided about it."""

    id: str = Field(description="stable unique id, e.g. 'matmul[float16-M=128-N=128-K=128]'")
    operator: str
    category: str
    spec_file: str
    dtype: str
    params: dict[str, Any] = Field(description="the case symbols, e.g. {'M': 128, 'K': 4097}")
    trials: int
    seed: int
    verdict: Verdict
    reasons: list[str] = Field(description="why, in words; non-empty unless pass")
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
    schema_version: int = SCHEMA_VERSION
    environment: Environment
    summary: Summary
    cases: list[CaseResult]


def summarize(cases: list[CaseResult]) -> Summary:
    """Counts per verdict; the run fails (exit 1) on any fail or error."""
    counts = {v: 0 for v in VERDICT_ORDER}
    for case in cases:
        counts[case.verdict] += 1
    bad = counts["fail"] + counts["error"]
    return Summary(
        total=len(cases),
        passed=counts["pass"],
        failed=counts["fail"],
        errors=counts["error"],
        skipped=counts["skip"],
        verdict="fail" if bad else "pass",
        exit_code=1 if bad else 0,
    )


def sorted_failures_first(cases: list[CaseResult]) -> list[CaseResult]:
    """Fail, then error, then skip, then pass; stable within each verdict."""
    return sorted(cases, key=lambda c: VERDICT_ORDER[c.verdict])


def dumps(results: Results) -> str:
    return json.dumps(results.model_dump(mode="json"), indent=1, allow_nan=False) + "\n"


def write(results: Results, path: Path) -> Path:
    """Write ``results.json`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # a normal file's mode, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps(results))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class ResultsError(ValueError):
    """A results.json that cannot be read; the message names the file."""


def load(path: Path) -> Results:
    """Read and validate a ``results.json``; raise :class:`ResultsError` naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read results: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
    try:
        return Results.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError
        raise ResultsError(f"{path}: invalid results: {exc}") from None


def merge(parts: list[Results]) -> Results:
    """Merge shards: cases concatenated (by id, later shards win), earliest start, latest end."""
    if not parts:
        raise ValueError("merge needs at least one results file")
    by_id: dict[str, CaseResult] = {}
    for part in parts:
        for case in part.cases:
            by_id[case.id] = case
    env = parts[0].environment.model_copy(
        update={
            "start_time": min(p.environment.start_time for p in parts),
            "end_time": max(p.environment.end_time for p in parts),
        }
    )
    cases = list(by_id.values())
    return Results(environment=env, summary=summarize(cases), cases=cases)
