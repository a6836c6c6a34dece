"""Thresholds and defaults: what a case is judged by, spec overrides applied over the category defaults.

The default criteria are MLU-OPS's category table:

=============================  ============================  =====================
category                       float32                       float16
=============================  ============================  =====================
convolution                    diff1, diff2 <= 1e-5          diff1, diff2 <= 3e-3
reduction, activation,
composite, atomic_add          diff1, diff2 <= 3e-3          diff1, diff2 <= 3e-3
arithmetic, pure_io            diff3_2 == 0 (bit exact)      diff3_2 == 0
=============================  ============================  =====================

The ``quantized`` category (GGML block formats) is gated on NMSE against the
float oracle of the dequantized math instead, per format (:data:`QUANT_NMSE`):
<= 0.5 % for q8_x, 1 % for q5_x, 1.5 % for q4_x; it has no dual-delta analysis
by default (a kernel that folds the zero point through q8_1's fp16 ``s`` is
legitimately further from the oracle than a float32 baseline), nor the diff4
rule unless the spec says ``diff4: true`` (its bias floor is in ulp, and such
a kernel's legitimate error is thousands of float32 ulp).

A dtype the table does not name gets the threshold of the named dtype in its
``mlu_scale_from`` column (:mod:`acceptance.formats.dtypes`) scaled by the ratio of
unit roundoffs ``u = 2^-p``: bfloat16 (u = 2^-8) scales float16's (u = 2^-11)
by 8, giving 2.4e-2; float64 (u = 2^-53) scales float32's (u = 2^-24) by
2^-29 ≈ 1.86e-9, giving 1.9e-14 (convolution) and 5.6e-12.

Every category also requires NaN/Inf placement to match, and every category
with a rounding tolerance gates diff4 (MLU-OPS's evaluator rule) unless the
spec says ``diff4: false``. Dual-delta analysis runs for the rounding
categories unless the spec switches it off, with the per-metric factors of
:data:`DEFAULT_FACTORS`.

:func:`rules_for` gathers all of it for one case as a :class:`Rules`, which
the runner reads to know what to measure and the verdict reads to decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from acceptance.formats import dtypes
from acceptance.numerics.factors import DEFAULT_ALPHA, default_factor
from acceptance.numerics.invariants import Invariants
from acceptance.numerics.metrics import registry
from acceptance.spec.model import Case, OperatorSpec
from acceptance.spec.overrides import ThresholdOverride, case_overrides

#: Categories judged bit for bit (diff3_2 == 0); the rest have a rounding tolerance.
BIT_EXACT_CATEGORIES: tuple[str, ...] = ("arithmetic", "pure_io")

#: MLU-OPS's table: category -> dtype -> diff1/diff2 threshold (the dtypes it names).
MLU_OPS_TABLE: dict[str, dict[str, float]] = {
    "convolution": {"float32": 1e-5, "float16": 3e-3},
    "reduction": {"float32": 3e-3, "float16": 3e-3},
    "activation": {"float32": 3e-3, "float16": 3e-3},
    "composite": {"float32": 3e-3, "float16": 3e-3},
    "atomic_add": {"float32": 3e-3, "float16": 3e-3},
}

#: NMSE gate per GGML block format for the ``quantized`` category: impl against the float oracle of the
#: dequantized math (the baseline's float math on the values the blocks hold, in float64). Each is 2x or more
#: the format's own round-trip NMSE on N(0, 1) data (``benchmarks/quant_nmse.py``: q4_0 0.74 %, q4_1 0.61 %,
#: q5_0 0.18 %, q5_1 0.14 %, q8_x 0.003 %), so a kernel that quantizes an operand again itself still passes.
QUANT_NMSE: dict[str, float] = {"q4_0": 0.015, "q4_1": 0.015, "q5_0": 0.01, "q5_1": 0.01, "q8_0": 0.005, "q8_1": 0.005}

#: Categories gated on NMSE per quantized format instead of MLU-OPS's diff1/diff2.
QUANT_CATEGORIES: tuple[str, ...] = ("quantized",)


def quant_gate(formats: tuple[str, ...] = ()) -> tuple[float, str]:
    """The NMSE gate of a quantized case and its source: the laxest gate among the formats of its quantized
    inputs (the coarsest format bounds the error); with none (an impl that quantizes internally) q4_0's."""
    fmt = max(formats or ("q4_0",), key=lambda f: QUANT_NMSE[f])
    return QUANT_NMSE[fmt], f"{fmt} quantized default"


#: diff4 is evaluated only over at least this many unequal points (MLU-OPS's evaluator).
DIFF4_MIN_POINTS = 100

#: Metrics collected when a spec names none: the worst element (catches a bad
#: row, a dropped tail) and the mean (catches a small systematic shift), both
#: in hybrid error |e-o|/(1+|o|), absolute near zero and relative elsewhere.
DEFAULT_METRICS: tuple[str, ...] = ("max_hyb", "mean_hyb")

#: Categories whose cases get a dual-delta analysis when the spec does not
#: say: every category with a rounding tolerance.
DEFAULT_CATEGORIES: tuple[str, ...] = ("convolution", "reduction", "activation", "composite", "atomic_add")

#: Accuracy floors, ulp at the oracle: (max, mean) per category and dtype. An impl whose error in a trial
#: is within the floor never has that error counted against it (dual-delta, the diff4 bias test, the ULP
#: criterion); ``None`` means no floor beyond the dtype's own rounding. Sources (docs/floors-sources.md):
#: float32 elementwise math ships at up to ~5 ulp (Eigen's rational tanh: 4.35 measured through jax/XLA, 5.01
#: for an FMA replica over every float32 in [0.25, 10], mean up to 1.4 on [5, 10]; ONNX Runtime softplus 3.9,
#: log 3.2; numpy log 3.2; Intel VM LA and AOCL 4, SLEEF u35 3.5), so 6 ulp max, 1.5 ulp mean; CUDA double
#: and glibc give 1-2 ulp for float64; 16-bit and fp8 results computed in float32 and rounded once are within
#: 0.5 ulp, so 1 ulp (faithful) admits native approximations
#: of plain functions (see :data:`FAMILY_FLOORS` for composed ones). Categories that accumulate have no
#: floor: nobody documents one and their error grows with the accumulation length. A floor only widens what
#: passes within the rounding regime: an output outside the function's range fails on its invariants
#: (:data:`DEFAULT_INVARIANTS`) whatever the floor.
FLOORS: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "activation": {
        "float32": (6.0, 1.5),
        "float64": (2.0, 1.0),
        "float16": (1.0, None),
        "bfloat16": (1.0, None),
        "float8_e4m3fn": (1.0, None),
        "float8_e5m2": (1.0, None),
    },
}

#: Floors of function families whose shipping kernels differ from the category's, by function name (the
#: baseline's callable, else the impl's, else the spec name; :func:`function_name`), per dtype, (max, mean),
#: over the category's. GELU (both forms) in float16: the negative tail is x * (a value near 0 that cancels),
#: and production kernels reach 1.5-5.5 ulp there with the hybrid error of torch's (every float16 input in
#: [-10, 10]: ONNX Runtime tanh form 5.54, erf form 1.52; torch 1.27 and 2.04), so 6 ulp max, no mean floor.
FAMILY_FLOORS: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "gelu": {"float16": (6.0, None)},
}

#: Output invariants of built-in functions, by function name (:func:`function_name`); a spec's ``invariants``
#: section replaces them (``invariants: {}`` turns them off). ``dim`` None: the case's ``dim`` parameter.
DEFAULT_INVARIANTS: dict[str, Invariants] = {
    "tanh": Invariants(range=(-1.0, 1.0)),
    "erf": Invariants(range=(-1.0, 1.0)),
    "sigmoid": Invariants(range=(0.0, 1.0), positive=True),
    "expit": Invariants(range=(0.0, 1.0), positive=True),
    "softmax": Invariants(range=(0.0, 1.0), sum_to=1.0, dim=None),
    "log_softmax": Invariants(range=(-math.inf, 0.0)),
    "exp": Invariants(nonnegative=True, positive=True),
    "softplus": Invariants(nonnegative=True, positive=True),
    "relu": Invariants(nonnegative=True),
    "sqrt": Invariants(nonnegative=True),
    "vector_norm": Invariants(nonnegative=True),
    "norm": Invariants(nonnegative=True),
}

#: Categories whose floors the function families of :data:`FAMILY_FLOORS` replace.
FAMILY_FLOORS_CATEGORIES: tuple[str, ...] = ("activation",)

#: Categories judged also by ULP against the oracle (scaled by the baseline's own ULP error, above the floor):
#: elementwise math, where relative error near zero matters and the hybrid error is blind to it.
ULP_CATEGORIES: tuple[str, ...] = ("activation",)

#: The diff4 rule's material-bias floor, ulp: one extra correctly rounded step (multiplying by a rounded
#: reciprocal 1/n, say) shifts results by at most 1 ulp, by ~0.72 ulp on average over mantissas; a bias is
#: material beyond that (or beyond the category's mean floor, when that is larger).
BIAS_FLOOR_ULP = 1.0

#: The part of the material-bias floor that scales with the baseline's own error (see
#: :func:`acceptance.decide.verdict.bias_floor_of`): a long computation (a reduction, a softmax inside attention,
#: a matmul) done correctly by another valid method is shifted by up to about its own mean |error|, e.g. an
#: exp2-based softmax shrinks float32 attention outputs by 1.3-4.3 ulp on average where the baseline's mean
#: |error| is 5.5-10 ulp. Capped at BIAS_SCALED_CAP_ULP ulp, half the clip of the signed errors (16 ulp), so a
#: scale error that reaches the clip still exceeds the floor plus a baseline shift of up to 8 ulp.
BIAS_BASELINE_FACTOR = 1.0
BIAS_SCALED_CAP_ULP = 8.0


@dataclass(frozen=True)
class Threshold:
    """One threshold in force: ``metric comparison value``, and where it came from."""

    metric: str
    value: float | tuple[float, ...]
    comparison: str
    source: str


@dataclass(frozen=True)
class DualDeltaSettings:
    """The dual-delta analysis of a case: metrics, factor per metric (and whether it is the default), alpha, trials."""

    metrics: tuple[str, ...]
    factors: dict[str, float]
    default_factors: frozenset[str]
    alpha: float
    trials: int | None
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rules:
    """Everything a case is judged by.

    ``thresholds``: the fixed criteria per output; ``diff4``: whether the diff4
    rule applies; ``dual_delta``: the analysis, or ``None`` when off;
    ``element_tolerance``: the per-element hybrid error above which an element
    counts as "over tolerance" in diagnostics (0 for bit-exact categories);
    ``bit_exact``: the category is judged bit for bit; ``floor_max``/``floor_mean``: the accuracy floor in
    ulp against the oracle (``None``: none); ``ulp_check``: the ULP criterion applies; ``bias_floor``: the
    diff4 rule's material-bias floor in ulp; ``waiver``: the reason when the spec waives this case, for the
    verdicts in ``waiver_covers``; ``expired_waiver``: an expired waiver matching the case, in words.
    """

    category: str
    dtype: str
    thresholds: tuple[Threshold, ...]
    diff4: bool
    dual_delta: DualDeltaSettings | None
    element_tolerance: float
    bit_exact: bool
    floor_max: float | None = None
    floor_mean: float | None = None
    ulp_check: bool = False
    bias_floor: float = BIAS_FLOOR_ULP
    waiver: str | None = None
    waiver_covers: tuple[str, ...] = ("fail",)
    expired_waiver: str | None = None
    invariants: Invariants = Invariants()


def function_name(spec: OperatorSpec) -> str:
    """The function a spec tests, for the family tables: the attribute of its baseline callable
    (``torch:tanh`` -> ``tanh``), else of its impl callable, else the spec name."""
    for ref in (spec.baseline, spec.impl):
        if isinstance(ref, str) and ":" in ref:
            return ref.rsplit(":", 1)[1].rsplit(".", 1)[-1]
    return spec.name


def invariants_for(case: Case) -> Invariants:
    """The output invariants of a case: its spec's section, else the built-in function's defaults, with a
    ``dim`` left open taken from the case's ``dim`` parameter (default -1)."""
    section = case.spec.invariants
    if section is not None:
        rng = cast("list[float] | None", section.get("range"))
        mono = section.get("monotone")
        return Invariants(
            range=(float(rng[0]), float(rng[1])) if rng else None,
            nonnegative=bool(section.get("nonnegative", False)),
            positive=bool(section.get("positive", False)),
            sum_to=cast("float | None", section.get("sum_to")),
            dim=int(cast(int, section.get("dim", -1))),
            monotone=str(mono) if mono else None,
        )
    found = DEFAULT_INVARIANTS.get(function_name(case.spec), Invariants())
    if found.dim is None:
        dim = case.params.get("dim", -1)
        found = replace(found, dim=dim if isinstance(dim, int) else -1)
    return found


def category_default(category: str, dtype: str) -> tuple[float, str]:
    """MLU-OPS's diff1/diff2 threshold of a rounding category for ``dtype``, and its source in words."""
    row = MLU_OPS_TABLE[category]
    if dtype in row:
        return row[dtype], f"{dtype} {category} default"
    base = dtypes.lookup(dtype).mlu_scale_from or "float32"
    factor = dtypes.lookup(dtype).unit_roundoff / dtypes.lookup(base).unit_roundoff
    return row[base] * factor, f"{dtype} {category} default ({base} x u ratio {factor:.3g})"


def thresholds_for(
    category: str, dtype: str, overrides: Mapping[str, ThresholdOverride] | None = None, quant: tuple[str, ...] = ()
) -> list[Threshold]:
    """The thresholds in force for one (category, dtype), spec overrides applied.

    Overrides replace a default of the same metric or add a criterion; their
    source reads ``"spec override"``. ``diff4`` is handled by :func:`diff4_enabled`.
    ``quant``: the formats of the case's quantized inputs (the ``quantized`` category's NMSE gate).
    """
    overrides = dict(overrides or {})
    overrides.pop("diff4", None)
    found: dict[str, Threshold] = {}
    if category in QUANT_CATEGORIES:
        value, source = quant_gate(quant)
        found["nmse"] = Threshold("nmse", value, "<=", source)
    elif category not in BIT_EXACT_CATEGORIES:  # bit-exact categories are judged on bits (acceptance.decide.verdict)
        value, source = category_default(category, dtype)
        for metric in ("diff1", "diff2"):
            found[metric] = Threshold(metric, value, "<=", source)
    for metric, given in overrides.items():
        limit = tuple(given) if isinstance(given, list) else given
        comparison = registry.get(metric).comparison
        if limit == 0 and category in BIT_EXACT_CATEGORIES:
            comparison = "=="
        found[metric] = Threshold(metric, limit, comparison, "spec override")
    return list(found.values())


def diff4_enabled(category: str, overrides: Mapping[str, ThresholdOverride] | None = None) -> bool:
    """diff4 applies to the categories with a rounding tolerance unless the spec says ``diff4: false``; to the
    ``quantized`` category only when the spec says ``diff4: true``."""
    if overrides and overrides.get("diff4") is False:
        return False
    if category in QUANT_CATEGORIES:  # errors of thousands of ulp are legitimate there: the ulp bias rule cannot
        return bool(overrides and overrides.get("diff4") is True)  # tell; the spec may still ask for it
    return category not in BIT_EXACT_CATEGORIES


def dual_delta_settings(category: str, section: dict | None) -> DualDeltaSettings | None:
    """The dual-delta settings of a spec's ``dual_delta`` section over the defaults, or ``None`` when off."""
    section = dict(section or {})
    if not section.get("enabled", category in DEFAULT_CATEGORIES):
        return None
    names = tuple(section.get("metrics") or DEFAULT_METRICS)
    factor = section.get("factor")
    given = {m: factor.get(m, factor.get("*")) if isinstance(factor, dict) else factor for m in names}
    return DualDeltaSettings(
        metrics=names,
        factors={m: given[m] or default_factor(m) for m in names},
        default_factors=frozenset(m for m in names if not given[m]),
        alpha=float(section.get("alpha", DEFAULT_ALPHA)),
        trials=section.get("trials"),
    )


def floors_for(
    category: str, dtype: str, overrides: dict[str, float] | None = None, function: str = ""
) -> tuple[float | None, float | None]:
    """The accuracy floor (max, mean), ulp against the oracle, of a (category, dtype) -- the function family's
    (:data:`FAMILY_FLOORS`) where it has one -- spec overrides applied."""
    floor_max, floor_mean = FLOORS.get(category, {}).get(dtype, (None, None))
    if category in FAMILY_FLOORS_CATEGORIES and dtype in FAMILY_FLOORS.get(function, {}):
        floor_max, floor_mean = FAMILY_FLOORS[function][dtype]
    overrides = overrides or {}
    return overrides.get("max_ulp", floor_max), overrides.get("mean_ulp", floor_mean)


def rules_for(case: Case) -> Rules:
    """The rules a case is judged by: its spec's thresholds for its dtype and the overrides matching its id
    (:mod:`acceptance.spec.overrides`) over the category defaults."""
    spec = case.spec
    resolved = case_overrides(case)
    overrides = resolved.thresholds
    thresholds = [
        replace(t, source=resolved.sources.get(t.metric, t.source))
        for t in thresholds_for(
            spec.category, case.dtype, overrides, tuple(i.quant for i in spec.inputs if i.quant is not None)
        )
    ]
    dual_delta = dual_delta_settings(spec.category, resolved.dual_delta)
    if dual_delta is not None and resolved.dual_delta_sources:
        dd = resolved.dual_delta_sources
        dual_delta = replace(
            dual_delta, sources={m: src for m in dual_delta.metrics if (src := dd.get(m, dd.get("*")))}
        )
    # a bit-exact category is judged on bits unless its spec gives thresholds for the dtype (a tolerance asked for)
    bit_exact = spec.category in BIT_EXACT_CATEGORIES and not {k for k in overrides if k != "diff4"}
    tolerance = (
        0.0
        if bit_exact
        else min(
            (float(cast(float, t.value)) for t in thresholds if t.metric in ("diff1", "diff2")),
            default=math.sqrt(next((float(cast(float, t.value)) for t in thresholds if t.metric == "nmse"), 0.0)),
        )
    )
    floor_max, floor_mean = floors_for(spec.category, case.dtype, spec.floors.get(case.dtype), function_name(spec))
    return Rules(
        category=spec.category,
        dtype=case.dtype,
        thresholds=tuple(thresholds),
        diff4=diff4_enabled(spec.category, overrides),
        dual_delta=dual_delta,
        element_tolerance=tolerance,
        bit_exact=bit_exact,
        floor_max=floor_max,
        floor_mean=floor_mean,
        ulp_check=spec.category in ULP_CATEGORIES,
        bias_floor=max(BIAS_FLOOR_ULP, floor_mean or 0.0),
        waiver=case.waiver,
        waiver_covers=case.waiver_covers,
        expired_waiver=case.expired_waiver,
        invariants=invariants_for(case),
    )
