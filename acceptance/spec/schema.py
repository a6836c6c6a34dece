"""The spec schema: pydantic models of a spec file and the validators of its fields.

Validation is strict (no coercion: ``"20"`` is not an integer) and every
mapping forbids unknown keys; a validator's message is the sentence the user
reads (:mod:`acceptance.spec.messages` turns the rest into sentences).
Callables are resolved while validating, so a spec that validates can run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    model_validator,
)

from acceptance.formats.dtypes import INPUT_DTYPES, QUANT_DTYPES, TEST_DTYPES
from acceptance.formats.layouts import LAYOUTS
from acceptance.formats.presets import PRESETS
from acceptance.numerics.metrics import registry
from acceptance.spec.emulation import EmulateModel
from acceptance.spec.expr import Bound, Dim, parse_expr, parse_real
from acceptance.spec.kinds import (
    KINDS,
    JSONValue,
    Ref,
    RoleValue,
    WaiverModel,
    check_callable,
    declaration,
    plain_params,
)
from acceptance.spec.messages import describe, fail, is_number, one_of
from acceptance.spec.model import CATEGORIES, Choice, Dist, Normal, Preset, RandInt, Sparse, Specials, Uniform

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _member_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A validator accepting only the names in ``choices`` (the message lists them, or the closest)."""

    def check(v: str) -> str:
        if v not in choices:
            raise fail(one_of(v, choices))
        return v

    return check


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise fail(f"{v!r}: an operator name may contain only letters, digits, '_', '.', '-'")
    return v


_check_category = _member_of(CATEGORIES)
_check_preset = _member_of(PRESETS)
_check_layout = _member_of(LAYOUTS)


def _check_presets(v: str | list[str]) -> str | list[str]:
    for name in [v] if isinstance(v, str) else v:
        _check_preset(name)
    return v


_check_dtype = _member_of(TEST_DTYPES)


def _check_input_dtype(v: str) -> str:
    if v not in INPUT_DTYPES:
        raise fail(one_of(v, INPUT_DTYPES) + "; leave dtype out for a float input (it takes the test dtype)")
    return v


def _real_bound(v: object) -> Bound:
    if is_number(v):
        return float(v)
    if isinstance(v, str):
        try:
            return parse_expr(v)
        except ValueError as exc:
            raise fail(str(exc)) from None
    raise fail(f"expected a number or an expression of case symbols, got {describe(v)}")


def _int_bound(v: object) -> Dim:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return parse_expr(v)
        except ValueError as exc:
            raise fail(str(exc)) from None
    raise fail(f"expected an integer or an expression of case symbols, got {describe(v)}")


def _dim(v: object) -> Dim:
    d = _int_bound(v)
    if isinstance(d, int) and d < 0:
        raise fail(f"a dimension must be >= 0, got {d}")
    return d


_SPECIAL_STRINGS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _special_value(v: object) -> float:
    if is_number(v):
        return v if isinstance(v, int) else float(v)
    if isinstance(v, str) and v.lower() in _SPECIAL_STRINGS:
        return _SPECIAL_STRINGS[v.lower()]
    raise fail(f"expected a number (.inf, -.inf, .nan allowed), got {describe(v)}")


def _non_negative(v: float) -> float:
    if math.isnan(v) or v < 0:
        raise fail(f"a threshold must be a number >= 0, got {v!r}")
    return v


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise fail(f"a threshold must be a finite number, got {v!r}")
    return v


def _threshold_value(v: object) -> float | str:
    """A threshold: a number >= 0, or an expression of case symbols (kept as its text, checked per case)."""
    if isinstance(v, str):
        try:
            parsed = parse_real(v)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if isinstance(parsed, float):  # no coercion: a number is written as a number
            raise fail(f"expected a number, got {describe(v)} (a string is an expression of case symbols)")
        return v.strip()
    if not is_number(v):
        raise fail(f"expected a number >= 0 or an expression of case symbols, got {describe(v)}")
    return _non_negative(float(v))


def _pair(item: object) -> object:
    """The schema of a YAML pair ``[a, b]`` of ``item``."""
    return Annotated[list[item], Field(min_length=2, max_length=2)]  # type: ignore[valid-type]  # built at run time


if TYPE_CHECKING:  # the values the validators give (pydantic sees the validators: the definitions below)
    RealBound = Bound
    IntBound = Dim
    DimValue = Dim
    SpecialValue = float
    Params = dict[str, JSONValue]
    RealPair = list[Bound]
    IntPair = list[Dim]
    NonNegPair = list[float]
else:
    RealBound = Annotated[object, BeforeValidator(_real_bound)]
    IntBound = Annotated[object, BeforeValidator(_int_bound)]
    DimValue = Annotated[object, BeforeValidator(_dim)]
    SpecialValue = Annotated[object, BeforeValidator(_special_value)]
    Params = Annotated[object, BeforeValidator(plain_params)]
DtypeName = Annotated[str, AfterValidator(_check_dtype)]
CallableRef = Ref
Fraction = Annotated[float, Field(ge=0, le=1)]
NonNegFloat = Annotated[float, AfterValidator(_non_negative)]
FiniteFloat = Annotated[float, AfterValidator(_finite)]
if not TYPE_CHECKING:
    RealPair = _pair(RealBound)
    IntPair = _pair(IntBound)
    NonNegPair = _pair(NonNegFloat)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    #: what an unknown key of this mapping is called in messages
    noun: ClassVar[str] = "field"


class _DistModel(_Model):
    noun: ClassVar[str] = "distribution"
    uniform: RealPair | None = None
    normal: RealPair | None = None
    randint: IntPair | None = None
    choice: Annotated[list[SpecialValue], Field(min_length=1)] | None = None
    sparse: _SparseModel | None = None
    specials: _SpecialsModel | None = None
    preset: Annotated[str, AfterValidator(_check_preset)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> _DistModel:
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            names = ", ".join(type(self).model_fields)
            got = f" (got {', '.join(given)})" if given else ""
            raise fail(f"give exactly one distribution: {names}{got}")
        return self

    def to_dist(self) -> Dist:
        if self.uniform is not None:
            return Uniform(*self.uniform)
        if self.normal is not None:
            return Normal(*self.normal)
        if self.randint is not None:
            return RandInt(*self.randint)
        if self.choice is not None:
            return Choice(tuple(self.choice))
        if self.sparse is not None:
            return Sparse(self.sparse.density, self.sparse.of.to_dist())
        if self.preset is not None:
            return Preset(self.preset)
        assert self.specials is not None  # exactly one distribution is given
        return Specials(self.specials.fraction, tuple(self.specials.values), self.specials.of.to_dist())


class _SparseModel(_Model):
    density: Fraction
    of: _DistModel


class _SpecialsModel(_Model):
    fraction: Fraction
    values: Annotated[list[SpecialValue], Field(min_length=1)]
    of: _DistModel


_DistModel.model_rebuild()


_check_quant = _member_of(QUANT_DTYPES)


#: What the baseline and the oracle receive for a quantized input (the impl always gets the packed blocks).
QUANT_REFERENCES: tuple[str, ...] = ("dequantized", "blocks", "float")


_check_reference = _member_of(QUANT_REFERENCES)


class _InputModel(_Model):
    name: Annotated[str, Field(min_length=1)]
    shape: list[DimValue]
    dist: _DistModel
    dtype: Annotated[str, AfterValidator(_check_input_dtype)] | None = None
    layout: Annotated[str, AfterValidator(_check_layout)] | None = None
    quant: Annotated[str, AfterValidator(_check_quant)] | None = None
    reference: Annotated[str, AfterValidator(_check_reference)] | None = None

    @model_validator(mode="after")
    def _quant_is_a_float_input(self) -> _InputModel:
        if self.quant is not None and self.dtype is not None:
            raise fail(
                f"a quantized input is drawn as real numbers; give quant: {self.quant} or dtype: {self.dtype}, not both"
            )
        if self.reference is not None and self.quant is None:
            raise fail("reference applies to a quantized input only (add quant: q4_0, ...)")
        if self.quant is not None and not self.shape:
            raise fail("a quantized input needs at least one dimension (blocks of 32 run along the last)")
        return self


#: Spec tiers: ``default`` specs run unless filtered out; ``large`` ones (LLM-sized shapes) only when asked for.
TIERS: tuple[str, ...] = ("default", "large")


_check_tier = _member_of(TIERS)


def _perf_expr(v: object) -> Dim:
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 0:
            raise fail(f"expected a count >= 0, got {v}")
        return v
    if isinstance(v, str):
        try:
            return parse_expr(v)
        except ValueError as exc:
            raise fail(str(exc)) from None
    raise fail(f"expected an integer or an expression of case symbols (e.g. 2*M*N*K), got {describe(v)}")


if TYPE_CHECKING:
    PerfCount = Dim
else:
    PerfCount = Annotated[object, BeforeValidator(_perf_expr)]


class _PerfModel(_Model):
    """The ``perf`` section: work per call for GFLOP/s and GB/s, a device baseline and its speed-up gate."""

    flops: PerfCount | None = None
    bytes: PerfCount | None = None
    baseline: CallableRef | None = None
    min_speedup: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _speedup_needs_a_baseline(self) -> _PerfModel:
        if self.min_speedup is not None and self.baseline is None:
            raise fail("min_speedup needs perf.baseline, the callable the impl is timed against")
        return self


class _EdgesModel(_Model):
    """``edges: {max: N}``: the largest size the edge sweep may give a symbol."""

    max: Annotated[int, Field(ge=1)]


class _CaseModel(_Model):
    """Case symbols (any other key, an integer) plus optional per-case ``params``."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    __pydantic_extra__: dict[str, int]
    params: Params = {}
    preset: Annotated[str | Annotated[list[str], Field(min_length=1)], AfterValidator(_check_presets)] | None = None
    edges: bool | _EdgesModel | None = None
    impl_params: Params = {}
    baseline_params: Params = {}
    oracle_params: Params = {}


class _MetricModel(_Model):
    noun: ClassVar[str] = "metric"


def _threshold_type(metric: str) -> object:
    """The YAML value a threshold on ``metric`` takes, from the metric's kind: a pair [m1, m2], a flag
    (diff4: ``false`` switches its rule off), or one number >= 0 (a score such as SNR may be negative)."""
    kind = registry.get(metric).kind
    if kind == "pair":
        return NonNegPair | None
    if kind == "direction":
        return bool | None
    if kind == "score":
        return FiniteFloat | None
    return Annotated[object, BeforeValidator(_threshold_value)] | None


if TYPE_CHECKING:  # one optional field per metric of the registry, made below
    _ThresholdSet = _MetricModel
else:
    _ThresholdSet = create_model(
        "_ThresholdSet", __base__=_MetricModel, **{m: (_threshold_type(m), None) for m in registry.METRICS}
    )


def _scalar_metric(v: str) -> str:
    if v in registry.BY_NAME and v not in registry.SCALAR_ERRORS:
        raise fail(f"{v!r} is not a scalar metric; dual-delta compares one error per trial")
    if v not in registry.SCALAR_ERRORS:
        raise fail(one_of(v, registry.SCALAR_ERRORS))
    return v


def _factor(v: object) -> float | dict[str, float]:
    def positive(x: object, where: str) -> float:
        if not is_number(x) or not x > 0:
            raise fail(f"{where}expected a number > 0, got {describe(x)}")
        return float(x)

    if isinstance(v, dict):
        return {_scalar_metric(str(k)): positive(x, f"{k}: ") for k, x in v.items()}
    return positive(v, "")


def _oracle(v: object, info: ValidationInfo) -> str | dict[str, JSONValue]:
    if isinstance(v, str):
        return check_callable(v, info)
    if isinstance(v, dict) and any(k in v for k in KINDS):
        return declaration(v, info)
    if isinstance(v, dict):
        from acceptance.numerics import oracle  # torch and mpmath load only for a spec that names an mpmath oracle

        unknown = [k for k in v if k not in ("mpmath", "dps")]
        if unknown:
            raise fail(f"unknown key {unknown[0]!r} in an mpmath oracle (keys: mpmath, dps)")
        name, dps = v.get("mpmath"), v.get("dps", oracle.DEFAULT_DPS)
        if not isinstance(name, str) or not name:
            raise fail(f"mpmath: expected a function name, got {describe(name)}")
        if not isinstance(dps, int) or isinstance(dps, bool) or dps < oracle.MIN_DPS:
            raise fail(f"dps: expected an integer >= {oracle.MIN_DPS} (decimal digits), got {describe(dps)}")
        try:
            oracle.mpmath_oracle(name, dps)
        except ValueError as exc:
            raise fail(f"mpmath: {exc}") from None
        return {"mpmath": name, "dps": dps}
    raise fail(f"expected module:attr or a mapping {{mpmath: <function>, dps: <digits>}}, got {describe(v)}")


if TYPE_CHECKING:
    Factor = float | dict[str, float]
    OracleValue = str | dict[str, JSONValue]
else:
    Factor = Annotated[object, BeforeValidator(_factor)]
    OracleValue = Annotated[object, AfterValidator(_oracle)]


class _DualDeltaModel(_Model):
    enabled: bool | None = None
    metrics: Annotated[list[Annotated[str, AfterValidator(_scalar_metric)]], Field(min_length=1)] | None = None
    factor: Factor | None = None
    alpha: Annotated[float, Field(gt=0, lt=1)] | None = None
    trials: Annotated[int, Field(ge=5)] | None = None

    @model_validator(mode="after")
    def _factors_name_collected_metrics(self) -> _DualDeltaModel:
        if isinstance(self.factor, dict):
            from acceptance.spec.defaults import DEFAULT_METRICS

            collected = self.metrics or list(DEFAULT_METRICS)
            unused = [m for m in self.factor if m not in collected]
            if unused:
                raise fail(f"factor for {unused[0]!r}, a metric not collected (metrics: {', '.join(collected)})")
        return self


class _FloorModel(_Model):
    """An accuracy floor in ulp against the oracle: errors within it never count against the impl."""

    max_ulp: NonNegFloat | None = None
    mean_ulp: NonNegFloat | None = None


class _InvariantsModel(_Model):
    """Output invariants (:mod:`acceptance.numerics.invariants`): an output that breaks one fails the case."""

    range: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None
    nonnegative: bool = False
    positive: bool = False
    sum_to: float | None = None
    dim: int = -1
    monotone: Literal["increasing", "decreasing"] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> _InvariantsModel:
        if self.range is not None and not self.range[0] <= self.range[1]:
            raise fail(f"range [{self.range[0]}, {self.range[1]}]: the lower bound exceeds the upper")
        return self


class _OverrideModel(_Model):
    """Thresholds and dual-delta settings for the case ids matching a glob."""

    match: Annotated[str, Field(min_length=1)]
    thresholds: _ThresholdSet | None = None
    dual_delta: _DualDeltaModel | None = None

    @model_validator(mode="after")
    def _something(self) -> _OverrideModel:
        if self.thresholds is None and self.dual_delta is None:
            raise fail("an override needs thresholds, dual_delta or both")
        return self


# --------------------------------------------------------------------------- backward (gradient kernels)


class _BackwardModel(_Model):
    """``backward:``: the gradients checked (``wrt``: input names, or parameter names of a module impl) and how
    the output gradients are drawn (``cotangent``, a distribution; default ``normal: [0, 1]``). The meaning
    and the checks against the rest of the spec are :mod:`acceptance.spec.backward`'s."""

    wrt: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    cotangent: _DistModel | None = None


class SpecModel(_Model):
    """A whole spec file."""

    name: Annotated[str, AfterValidator(_check_name)]
    category: Annotated[str, AfterValidator(_check_category)]
    description: str = ""
    impl: RoleValue
    baseline: RoleValue | None = None
    oracle: OracleValue | None = None
    dtypes: Annotated[list[DtypeName], Field(min_length=1)]
    inputs: Annotated[list[_InputModel], Field(min_length=1)]
    params: Params = {}
    impl_params: Params = {}
    baseline_params: Params = {}
    oracle_params: Params = {}
    # the one default case takes no symbols: its extra fields are pydantic's, which mypy does not see
    cases: Annotated[list[_CaseModel], Field(min_length=1)] = [_CaseModel()]  # type: ignore[call-arg]
    trials: Annotated[int, Field(ge=1)] = 10
    seed: Annotated[int, Field(ge=0)] = 0
    thresholds: dict[DtypeName, _ThresholdSet] = {}
    floors: dict[DtypeName, _FloorModel] = {}
    invariants: _InvariantsModel | None = None
    timeout: Annotated[float, Field(gt=0)] = 60.0
    baseline_timeout: Annotated[float, Field(gt=0)] = 600.0
    oracle_timeout: Annotated[float, Field(gt=0)] = 600.0
    memory_limit_gib: Annotated[float, Field(gt=0)] | None = None
    atomic_runs: Annotated[int, Field(ge=2)] = 2
    reruns: Annotated[int, Field(ge=1, le=1000)] | None = None
    dual_delta: _DualDeltaModel | None = None
    waivers: list[WaiverModel] = []
    overrides: list[_OverrideModel] = []
    emulate: EmulateModel | None = None
    deterministic: bool | None = None
    tier: Annotated[str, AfterValidator(_check_tier)] = "default"
    perf: _PerfModel | None = None
    backward: _BackwardModel | None = None
    impl_backward: Ref | None = None
