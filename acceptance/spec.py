"""Operator specs: load and validate the YAML files, resolve callables, expand cases.

A spec is one YAML file describing one operator (the schema reference is
the README, "Operator specs"). :func:`load_specs` validates every file with pydantic
models, then checks what a schema cannot see (case symbols, per-case values,
callables, duplicate operator names), and reports every problem of every file
as one :class:`SpecProblem` line naming the file and the field path::

    operator_specs/matmul.yaml: inputs[1].shape[0]: unknown symbol 'Q' (case symbols: K, M, N)

:func:`expand` turns validated specs into :class:`Case` objects, one per
(operator, dtype, case), each with a stable id such as
``matmul[float16-M=128-N=128-K=128]``.

YAML is read with YAML 1.2 core scalars: ``1e-5`` is a float (PyYAML's YAML
1.1 default would make it a string), ``yes``/``no``/``on``/``off`` stay strings,
``010`` is the integer 10, and a key repeated in one mapping is an error.
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import operator
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, NoneType
from typing import Annotated, Any, Callable, ClassVar, Mapping, Optional, Union, get_args, get_origin

import torch
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    TypeAdapter,
    ValidationInfo,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from acceptance.metrics import METRICS

CATEGORIES: tuple[str, ...] = (
    "convolution",
    "reduction",
    "activation",
    "arithmetic",
    "pure_io",
    "composite",
    "atomic_add",
)

#: Test dtypes: name -> torch dtype. float8 formats are present when torch has them.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
    if hasattr(torch, name)
}

#: Fixed dtypes an input may declare (indices, masks); float inputs follow the test dtype.
INPUT_DTYPES: dict[str, torch.dtype] = {
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

#: Metric names a ``thresholds`` entry may set: every metric of
#: :data:`acceptance.metrics.METRICS` (the one list). ``diff3`` takes
#: ``[m1, m2]``, ``diff4`` takes ``true``/``false`` (``false`` disables it);
#: the rest take a non-negative number.
THRESHOLD_METRICS: tuple[str, ...] = METRICS
_PAIR_METRICS = ("diff3",)
_FLAG_METRICS = ("diff4",)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class SpecError(ValueError):
    """A spec, callable reference or filter that cannot be used; the message says why."""


@dataclass(frozen=True)
class SpecProblem:
    """One problem in one spec file. ``field`` is a path such as ``inputs[1].shape[0]``
    (a line/column for YAML syntax errors; empty for whole-file problems)."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


# --------------------------------------------------------------------------- expressions


_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_OP_TEXT = {ast.Div: "/", ast.Pow: "**", ast.Mod: "%", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|"}


@dataclass(frozen=True)
class Expr:
    """An integer expression of case symbols: names, integer literals, ``+ - * //``,
    unary ``-`` and parentheses. Parsed with :mod:`ast`, never ``eval``."""

    text: str
    names: tuple[str, ...]
    tree: ast.expr = field(compare=False, repr=False)

    def evaluate(self, symbols: Mapping[str, int]) -> int:
        """Value for the given symbols; ``ZeroDivisionError`` on ``// 0``."""
        return _eval_node(self.tree, symbols)

    def __str__(self) -> str:
        return self.text


def _eval_node(node: ast.expr, symbols: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return symbols[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval_node(node.operand, symbols)
        return -value if isinstance(node.op, ast.USub) else value
    return _BINOPS[type(node.op)](_eval_node(node.left, symbols), _eval_node(node.right, symbols))


def _check_node(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ValueError(f"{text!r}: only integer constants are allowed, not {node.value!r}")
    elif isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check_node(node.operand, text)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check_node(node.left, text)
        _check_node(node.right, text)
    elif isinstance(node, ast.BinOp):
        op = _OP_TEXT.get(type(node.op), type(node.op).__name__)
        raise ValueError(f"{text!r}: operator {op!r} is not allowed (use + - * // and parentheses)")
    else:
        raise ValueError(f"{text!r}: only symbols, integers, + - * // and parentheses are allowed")


def parse_expr(text: str) -> Union[int, Expr]:
    """Parse a shape or bound expression; an expression without symbols is folded to its int.

    Raises ``ValueError`` with a message quoting the text.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not a valid expression") from None
    _check_node(tree, text)
    names = tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)))
    expr = Expr(text.strip(), names, tree)
    if names:
        return expr
    try:
        return expr.evaluate({})
    except ZeroDivisionError:
        raise ValueError(f"{text!r}: division by zero") from None


Bound = Union[int, float, Expr]
Dim = Union[int, Expr]


def value_of(bound: Bound, symbols: Mapping[str, int]) -> Union[int, float]:
    """A literal as is; an :class:`Expr` evaluated with the case symbols."""
    return bound.evaluate(symbols) if isinstance(bound, Expr) else bound


# --------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class Uniform:
    """``uniform: [lo, hi]``: real numbers, uniform on [lo, hi)."""

    lo: Bound
    hi: Bound


@dataclass(frozen=True)
class Normal:
    """``normal: [mean, std]``: Gaussian."""

    mean: Bound
    std: Bound


@dataclass(frozen=True)
class RandInt:
    """``randint: [lo, hi]``: integers, uniform on lo <= k < hi (``hi`` exclusive, as torch)."""

    lo: Dim
    hi: Dim


@dataclass(frozen=True)
class Choice:
    """``choice: [v, ...]``: each element one of the values, equally likely (inf/nan allowed)."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class Sparse:
    """``sparse: {density: d, of: <dist>}``: each element drawn from ``of`` with
    probability ``d``, else exactly 0."""

    density: float
    of: "Dist"


@dataclass(frozen=True)
class Specials:
    """``specials: {fraction: f, values: [...], of: <dist>}``: each element replaced,
    with probability ``f``, by one of ``values`` (equally likely); else drawn from ``of``."""

    fraction: float
    values: tuple[float, ...]
    of: "Dist"


Dist = Union[Uniform, Normal, RandInt, Choice, Sparse, Specials]


def dist_bounds(dist: Dist, path: str) -> list[tuple[str, Bound]]:
    """Every bound of ``dist`` with its field path, e.g. ``('inputs[0].dist.uniform[1]', 1.0)``."""
    if isinstance(dist, (Uniform, Normal, RandInt)):
        key = {Uniform: "uniform", Normal: "normal", RandInt: "randint"}[type(dist)]
        a, b = (dist.lo, dist.hi) if not isinstance(dist, Normal) else (dist.mean, dist.std)
        return [(f"{path}.{key}[0]", a), (f"{path}.{key}[1]", b)]
    if isinstance(dist, Sparse):
        return dist_bounds(dist.of, f"{path}.sparse.of")
    if isinstance(dist, Specials):
        return dist_bounds(dist.of, f"{path}.specials.of")
    return []


# --------------------------------------------------------------------------- validated spec


@dataclass(frozen=True)
class InputSpec:
    """One input tensor. ``dtype`` is ``None`` for a float input (it takes the test dtype)
    or a fixed integer/bool dtype name from :data:`INPUT_DTYPES`."""

    name: str
    shape: tuple[Dim, ...]
    dist: Dist
    dtype: Optional[str] = None


@dataclass(frozen=True)
class CaseSpec:
    """One entry of ``cases``: symbol values, per-case keyword arguments, position."""

    symbols: dict[str, int]
    params: dict[str, Any]
    index: int


@dataclass(frozen=True)
class Waiver:
    """A failure the spec accepts: case ids matching ``match`` get verdict skip, with ``reason``."""

    match: str
    reason: str


@dataclass(frozen=True)
class OperatorSpec:
    """A validated spec file. ``impl``/``baseline`` are ``module:attr`` references
    (resolve with :func:`resolve_callable`); ``oracle`` is a reference, a mapping
    ``{'mpmath': name, 'dps': digits}``, or ``None``. ``thresholds`` maps a dtype name
    to ``{metric: value}`` as written; ``dual_delta`` holds only the keys written."""

    path: Path
    name: str
    category: str
    description: str
    impl: str
    baseline: Optional[str]
    oracle: Union[str, dict, None]
    dtypes: list[str]
    inputs: list[InputSpec]
    params: dict[str, Any]
    cases: list[CaseSpec]
    trials: int
    seed: int
    thresholds: dict[str, dict[str, Union[float, list, bool]]]
    timeout: float
    atomic_runs: int
    dual_delta: Optional[dict]
    waivers: list[Waiver] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    """One (operator, dtype, case) to run. ``params`` = spec params with the case's
    params merged over them. ``waiver`` is the reason when the spec waives this case."""

    spec: OperatorSpec
    dtype: str
    symbols: dict[str, int]
    params: dict[str, Any]
    index: int
    id: str
    waiver: Optional[str] = None

    @property
    def case_params(self) -> dict[str, Any]:
        """The case's own ``params`` (without the spec's), as written in the case."""
        return self.spec.cases[self.index].params

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Shape of every input, in input order."""
        return [tuple(int(value_of(d, self.symbols)) for d in inp.shape) for inp in self.spec.inputs]


# --------------------------------------------------------------------------- callables

_FILE_MODULES: dict[Path, ModuleType] = {}


def _load_file_module(path: Path) -> ModuleType:
    """Import a ``.py`` file once, under a unique module name, without touching ``sys.path``."""
    if path in _FILE_MODULES:
        return _FILE_MODULES[path]
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"acceptance_specmod_{digest}_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise SpecError(f"cannot import {path.name}: {type(exc).__name__}: {exc}") from None
    _FILE_MODULES[path] = module
    return module


def resolve_callable(ref: str, spec_path: Path) -> Callable:
    """Resolve ``module:attr`` to a callable.

    ``module`` is an importable dotted name (``torch.nn.functional:gelu``) or a
    ``.py`` file path relative to the spec file's folder (``kernels.py:my_matmul``);
    ``attr`` may be dotted (``pkg.mod:Class.method``). Raises :class:`SpecError`.
    """
    module_part, sep, attr = ref.rpartition(":")
    if not sep or not module_part or not attr:
        raise SpecError(f"{ref!r} is not of the form module:attr (e.g. torch:matmul or kernels.py:my_op)")
    if module_part.endswith(".py"):
        path = (Path(spec_path).parent / module_part).resolve()
        if not path.is_file():
            raise SpecError(f"{ref!r}: no such file {module_part!r} next to the spec ({path})")
        obj: Any = _load_file_module(path)
    else:
        try:
            obj = importlib.import_module(module_part)
        except Exception as exc:
            raise SpecError(f"{ref!r}: cannot import module {module_part!r}: {type(exc).__name__}: {exc}") from None
    walked = module_part
    for part in attr.split("."):
        if not hasattr(obj, part):
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(f"{ref!r}: {walked!r} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
        walked = f"{walked}:{part}" if walked == module_part else f"{walked}.{part}"
    if not callable(obj):
        raise SpecError(f"{ref!r} is not callable (it is a {type(obj).__name__})")
    return obj


# --------------------------------------------------------------------------- pydantic models


def _fail(message: str) -> PydanticCustomError:
    return PydanticCustomError("spec", "{message}", {"message": message})


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _describe(v: Any) -> str:
    """How a YAML value reads in a message: ``string '20'``, ``a mapping``, ..."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int):
        return f"integer {v}"
    if isinstance(v, float):
        return f"number {v!r}"
    if isinstance(v, str):
        text = v if len(v) <= 40 else v[:37] + "..."
        return f"string {text!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return f"a {type(v).__name__}"


def _one_of(value: str, allowed: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(value, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{value!r} is not one of {', '.join(allowed)}{hint}"


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise _fail(f"{v!r}: an operator name may contain only letters, digits, '_', '.', '-'")
    return v


def _check_category(v: str) -> str:
    if v not in CATEGORIES:
        raise _fail(_one_of(v, CATEGORIES))
    return v


def _check_dtype(v: str) -> str:
    if v not in DTYPES:
        raise _fail(_one_of(v, list(DTYPES)))
    return v


def _check_input_dtype(v: str) -> str:
    if v not in INPUT_DTYPES:
        raise _fail(
            _one_of(v, list(INPUT_DTYPES)) + "; leave dtype out for a float input (it takes the test dtype)"
        )
    return v


def _check_callable(v: str, info: ValidationInfo) -> str:
    spec_path = (info.context or {}).get("spec_path")
    if spec_path is not None:
        try:
            resolve_callable(v, spec_path)
        except SpecError as exc:
            raise _fail(str(exc)) from None
    return v


def _real_bound(v: Any) -> Bound:
    if _is_number(v):
        return float(v)
    if isinstance(v, str):
        try:
            return parse_expr(v)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    raise _fail(f"expected a number or an expression of case symbols, got {_describe(v)}")


def _int_bound(v: Any) -> Dim:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return parse_expr(v)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    raise _fail(f"expected an integer or an expression of case symbols, got {_describe(v)}")


def _dim(v: Any) -> Dim:
    d = _int_bound(v)
    if isinstance(d, int) and d < 0:
        raise _fail(f"a dimension must be >= 0, got {d}")
    return d


_SPECIAL_STRINGS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _special_value(v: Any) -> float:
    if _is_number(v):
        return v if isinstance(v, int) else float(v)
    if isinstance(v, str) and v.lower() in _SPECIAL_STRINGS:
        return _SPECIAL_STRINGS[v.lower()]
    raise _fail(f"expected a number (.inf, -.inf, .nan allowed), got {_describe(v)}")


def _non_negative(v: float) -> float:
    if math.isnan(v) or v < 0:
        raise _fail(f"a threshold must be a number >= 0, got {v!r}")
    return v


def _json_like(v: Any, where: str = "") -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_json_like(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise _fail(f"{where or 'key'} {k!r}: keys must be strings")
        return {k: _json_like(x, f"{where}.{k}" if where else k) for k, x in v.items()}
    at = f"{where}: " if where else ""
    raise _fail(f"{at}{_describe(v)} is not a plain value (use numbers, strings, booleans, null, lists, mappings)")


def _params(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _fail(f"expected a mapping of keyword arguments, got {_describe(v)}")
    return _json_like(v)


RealBound = Annotated[Any, BeforeValidator(_real_bound)]
IntBound = Annotated[Any, BeforeValidator(_int_bound)]
DimValue = Annotated[Any, BeforeValidator(_dim)]
SpecialValue = Annotated[Any, BeforeValidator(_special_value)]
Params = Annotated[Any, BeforeValidator(_params)]
DtypeName = Annotated[str, AfterValidator(_check_dtype)]
CallableRef = Annotated[str, AfterValidator(_check_callable)]
Fraction = Annotated[float, Field(ge=0, le=1)]
NonNegFloat = Annotated[float, AfterValidator(_non_negative)]


def _pair(item: Any) -> Any:
    return Annotated[list[item], Field(min_length=2, max_length=2)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    #: what an unknown key of this mapping is called in messages
    noun: ClassVar[str] = "field"


class _DistModel(_Model):
    noun: ClassVar[str] = "distribution"
    uniform: Optional[_pair(RealBound)] = None
    normal: Optional[_pair(RealBound)] = None
    randint: Optional[_pair(IntBound)] = None
    choice: Optional[Annotated[list[SpecialValue], Field(min_length=1)]] = None
    sparse: Optional[_SparseModel] = None
    specials: Optional[_SpecialsModel] = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "_DistModel":
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            names = ", ".join(type(self).model_fields)
            got = f" (got {', '.join(given)})" if given else ""
            raise _fail(f"give exactly one distribution: {names}{got}")
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
        return Specials(self.specials.fraction, tuple(self.specials.values), self.specials.of.to_dist())


class _SparseModel(_Model):
    density: Fraction
    of: _DistModel


class _SpecialsModel(_Model):
    fraction: Fraction
    values: Annotated[list[SpecialValue], Field(min_length=1)]
    of: _DistModel


_DistModel.model_rebuild()


class _InputModel(_Model):
    name: Annotated[str, Field(min_length=1)]
    shape: list[DimValue]
    dist: _DistModel
    dtype: Optional[Annotated[str, AfterValidator(_check_input_dtype)]] = None


class _CaseModel(_Model):
    """Case symbols (any other key, an integer) plus optional per-case ``params``."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    __pydantic_extra__: dict[str, int]
    params: Params = {}


class _MetricModel(_Model):
    noun: ClassVar[str] = "metric"


def _threshold_type(metric: str) -> Any:
    if metric in _PAIR_METRICS:
        return Optional[_pair(NonNegFloat)]
    if metric in _FLAG_METRICS:
        return Optional[bool]
    return Optional[NonNegFloat]


_ThresholdSet = create_model(
    "_ThresholdSet", __base__=_MetricModel, **{m: (_threshold_type(m), None) for m in THRESHOLD_METRICS}
)


def _scalar_metric(v: str) -> str:
    if v in _PAIR_METRICS or v in _FLAG_METRICS:
        raise _fail(f"{v!r} is not a scalar metric; dual-delta compares one number per trial")
    if v not in THRESHOLD_METRICS:
        raise _fail(_one_of(v, THRESHOLD_METRICS))
    return v


def _factor(v: Any) -> Union[float, dict[str, float]]:
    def positive(x: Any, where: str) -> float:
        if not _is_number(x) or not x > 0:
            raise _fail(f"{where}expected a number > 0, got {_describe(x)}")
        return float(x)

    if isinstance(v, dict):
        return {_scalar_metric(str(k)): positive(x, f"{k}: ") for k, x in v.items()}
    return positive(v, "")


def _oracle(v: Any, info: ValidationInfo) -> Union[str, dict]:
    if isinstance(v, str):
        return _check_callable(v, info)
    if isinstance(v, dict):
        unknown = [k for k in v if k not in ("mpmath", "dps")]
        if unknown:
            raise _fail(f"unknown key {unknown[0]!r} in an mpmath oracle (keys: mpmath, dps)")
        name, dps = v.get("mpmath"), v.get("dps", 50)
        if not isinstance(name, str) or not name:
            raise _fail(f"mpmath: expected a function name, got {_describe(name)}")
        if not isinstance(dps, int) or isinstance(dps, bool) or dps < 1:
            raise _fail(f"dps: expected a positive integer (decimal digits), got {_describe(dps)}")
        return {"mpmath": name, "dps": dps}
    raise _fail(f"expected module:attr or a mapping {{mpmath: <function>, dps: <digits>}}, got {_describe(v)}")


class _DualDeltaModel(_Model):
    enabled: Optional[bool] = None
    metrics: Optional[Annotated[list[Annotated[str, AfterValidator(_scalar_metric)]], Field(min_length=1)]] = None
    factor: Optional[Annotated[Any, BeforeValidator(_factor)]] = None
    alpha: Optional[Annotated[float, Field(gt=0, lt=1)]] = None
    trials: Optional[Annotated[int, Field(ge=5)]] = None


class _WaiverModel(_Model):
    match: Annotated[str, Field(min_length=1)]
    reason: Annotated[str, Field(min_length=1)]


class _SpecModel(_Model):
    name: Annotated[str, AfterValidator(_check_name)]
    category: Annotated[str, AfterValidator(_check_category)]
    description: str = ""
    impl: CallableRef
    baseline: Optional[CallableRef] = None
    oracle: Optional[Annotated[Any, AfterValidator(_oracle)]] = None
    dtypes: Annotated[list[DtypeName], Field(min_length=1)]
    inputs: Annotated[list[_InputModel], Field(min_length=1)]
    params: Params = {}
    cases: Annotated[list[_CaseModel], Field(min_length=1)] = [_CaseModel()]
    trials: Annotated[int, Field(ge=1)] = 10
    seed: Annotated[int, Field(ge=0)] = 0
    thresholds: dict[DtypeName, _ThresholdSet] = {}
    timeout: Annotated[float, Field(gt=0)] = 60.0
    atomic_runs: Annotated[int, Field(ge=2)] = 2
    dual_delta: Optional[_DualDeltaModel] = None
    waivers: list[_WaiverModel] = []


# --------------------------------------------------------------------------- pydantic errors -> paths


def _path(loc: tuple) -> str:
    out = ""
    for item in loc:
        if item == "[key]":
            continue
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out


def _unwrap(ann: Any) -> Any:
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin is Union:
            args = [a for a in get_args(ann) if a is not NoneType]
            if len(args) != 1:
                return ann
            ann = args[0]
        else:
            return ann


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The model class validating the mapping at ``loc`` in a spec, if any."""
    ann: Any = _SpecModel
    for key in loc:
        ann = _unwrap(ann)
        if inspect.isclass(ann) and issubclass(ann, BaseModel):
            info = ann.model_fields.get(key)
            if info is None:
                return None
            ann = info.annotation
        elif get_origin(ann) in (list, dict):
            ann = get_args(ann)[-1]
        else:
            return None
    ann = _unwrap(ann)
    return ann if inspect.isclass(ann) and issubclass(ann, BaseModel) else None


_TYPE_WORDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}
_PAIR_FIELDS = {"uniform": "[lo, hi]", "normal": "[mean, std]", "randint": "[lo, hi]", "diff3": "[m1, m2]"}
_BOUND_WORDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def _message(err: dict) -> str:
    """Turn one pydantic error into a sentence."""
    kind, loc, ctx = err["type"], err["loc"], err.get("ctx") or {}
    if kind == "spec":
        return ctx["message"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        noun = model.noun if model else "field"
        key = str(loc[-1])
        allowed = list(model.model_fields) if model else []
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else (f" ({noun}s: {', '.join(allowed)})" if allowed else "")
        return f"unknown {noun} {key!r}{hint}"
    if kind in _TYPE_WORDS:
        text = f"expected {_TYPE_WORDS[kind]}, got {_describe(err['input'])}"
        if kind == "int_type" and len(loc) == 3 and loc[0] == "cases" and loc[2] != "params":
            text += "; case keys are integer symbols, put keyword arguments under params"
        return text
    if kind in ("too_short", "too_long"):
        got = ctx.get("actual_length")
        if loc[-1] in _PAIR_FIELDS:
            return f"expected 2 values {_PAIR_FIELDS[loc[-1]]}, got {got}"
        if kind == "too_short":
            return f"expected at least {ctx.get('min_length')} item(s), got {got}"
        return f"expected at most {ctx.get('max_length')} item(s), got {got}"
    if kind in _BOUND_WORDS:
        limit = next(iter(ctx.values()))
        return f"must be {_BOUND_WORDS[kind]} {limit:g}, got {_describe(err['input'])}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return err["msg"]


# --------------------------------------------------------------------------- YAML


class _YamlLoader(yaml.SafeLoader):
    """Safe loader with YAML 1.2 core scalars and duplicate keys rejected."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {key_node.value!r}", key_node.start_mark
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep)


_YamlLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("int", r"^[-+]?[0-9]+$", list("-+0123456789")),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
):
    _YamlLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_regexp), _first)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))


def _read_yaml(path: Path) -> tuple[Any, Optional[SpecProblem]]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, SpecProblem(file, "", f"cannot read the file: {reason}")
    try:
        data = yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what, context = getattr(exc, "problem", None) or str(exc), getattr(exc, "context", None)
        if context and not context.startswith("while"):
            what = f"{context}, {what}"
        return None, SpecProblem(file, where, f"YAML error: {what}")
    if not isinstance(data, dict):
        got = "an empty file" if data is None else _describe(data)
        expected = "expected a mapping (name, category, impl, ...) at the top level"
        return None, SpecProblem(file, "", f"{expected}, got {got}")
    return data, None


# --------------------------------------------------------------------------- checks beyond the schema


def _symbols_text(symbols: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in symbols.items())


def _dist_problems(dist: Dist, path: str, symbols: Mapping[str, int], dtype: Optional[str]) -> list[tuple[str, str]]:
    """Problems of one distribution for one case's symbol values (``dtype``: the input's fixed dtype)."""
    out: list[tuple[str, str]] = []
    integer = dtype is not None
    if isinstance(dist, (Uniform, Normal)) and integer:
        kind = "uniform" if isinstance(dist, Uniform) else "normal"
        out.append((path, f"{kind} draws real numbers; {dtype} input needs randint or choice"))
    elif isinstance(dist, Uniform):
        lo, hi = value_of(dist.lo, symbols), value_of(dist.hi, symbols)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            out.append((f"{path}.uniform", f"needs finite lo < hi, got [{lo}, {hi}]"))
    elif isinstance(dist, Normal):
        mean, std = value_of(dist.mean, symbols), value_of(dist.std, symbols)
        if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
            out.append((f"{path}.normal", f"needs a finite mean and std >= 0, got [{mean}, {std}]"))
    elif isinstance(dist, RandInt):
        lo, hi = value_of(dist.lo, symbols), value_of(dist.hi, symbols)
        low, high = _int_range(dtype)
        if not lo < hi:
            out.append((f"{path}.randint", f"needs lo < hi (hi is exclusive), got [{lo}, {hi}]"))
        elif lo < low or hi - 1 > high:
            out.append((f"{path}.randint", f"[{lo}, {hi}) does not fit {dtype or 'int64'} ({low} .. {high})"))
    elif isinstance(dist, (Choice, Specials)):
        key = "choice" if isinstance(dist, Choice) else "specials.values"
        if integer:
            low, high = _int_range(dtype)
            bad = [v for v in dist.values if not isinstance(v, int) or not low <= v <= high]
            if bad:
                out.append((f"{path}.{key}", f"{bad[0]!r} is not an integer in {dtype} range ({low} .. {high})"))
        if isinstance(dist, Specials):
            out += _dist_problems(dist.of, f"{path}.specials.of", symbols, dtype)
    elif isinstance(dist, Sparse):
        out += _dist_problems(dist.of, f"{path}.sparse.of", symbols, dtype)
    return out


def _int_range(dtype: Optional[str]) -> tuple[int, int]:
    if dtype is None or dtype == "int64":
        return _INT64_MIN, _INT64_MAX
    if dtype == "bool":
        return 0, 1
    info = torch.iinfo(INPUT_DTYPES[dtype])
    return info.min, info.max


def _input_case_problems(inputs: list[InputSpec], cases: list[CaseSpec]) -> list[tuple[str, str]]:
    """What the schema cannot check about inputs and cases: names, symbols, per-case values."""
    out: list[tuple[str, str]] = []
    seen_names: dict[str, int] = {}
    for i, inp in enumerate(inputs):
        if inp.name in seen_names:
            first = seen_names[inp.name]
            out.append((f"inputs[{i}].name", f"duplicate input name {inp.name!r} (also inputs[{first}])"))
        seen_names.setdefault(inp.name, i)

    exprs: list[tuple[str, Expr]] = []
    for i, inp in enumerate(inputs):
        exprs += [(f"inputs[{i}].shape[{j}]", d) for j, d in enumerate(inp.shape)]
        exprs += dist_bounds(inp.dist, f"inputs[{i}].dist")
    exprs = [(p, e) for p, e in exprs if isinstance(e, Expr)]
    used = {n: p for p, e in reversed(exprs) for n in e.names}
    defined = list(dict.fromkeys(k for c in cases for k in c.symbols))
    known = ", ".join(sorted(defined)) or "none"
    for p, e in exprs:
        for n in e.names:
            if n not in defined:
                out.append((p, f"unknown symbol {n!r} (case symbols: {known})"))

    for c in cases:
        for n in c.symbols:
            if n not in used:
                uses = ", ".join(sorted(used)) or "none"
                out.append((
                    f"cases[{c.index}].{n}",
                    f"symbol {n!r} is used by no input shape or bound (used: {uses}); "
                    "put keyword arguments under params",
                ))
        missing = [n for n in used if n in defined and n not in c.symbols]
        for n in missing:
            out.append((f"cases[{c.index}]", f"missing symbol {n!r} (used by {used[n]})"))
        where = f" for cases[{c.index}] ({_symbols_text(c.symbols)})"
        known_here = c.symbols.keys()
        for p, e in exprs:
            if not set(e.names) <= known_here:
                continue
            try:
                value = e.evaluate(c.symbols)
            except ZeroDivisionError:
                out.append((p, f"{e} divides by zero{where}"))
                continue
            if ".shape[" in p and value < 0:
                out.append((p, f"{e} = {value}{where}; a dimension must be >= 0"))
        for i, inp in enumerate(inputs):
            dist_exprs = [e for p, e in exprs if p.startswith(f"inputs[{i}].dist")]
            if not all(set(e.names) <= known_here for e in dist_exprs):
                continue
            try:
                problems = _dist_problems(inp.dist, f"inputs[{i}].dist", c.symbols, inp.dtype)
            except ZeroDivisionError:
                continue
            out += [(p, m + (where if dist_exprs else "")) for p, m in problems]

    return list(dict.fromkeys(out))


def _dtype_problems(dtypes: list[str], thresholds: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Duplicate test dtypes and thresholds for a dtype that is not tested."""
    out = [(f"dtypes[{k}]", f"duplicate dtype {dt!r}") for k, dt in enumerate(dtypes) if dt in dtypes[:k]]
    out += [
        (f"thresholds.{dt}", f"dtype {dt!r} is not tested (dtypes: {', '.join(dtypes)})")
        for dt in thresholds
        if dt not in dtypes
    ]
    return out


def _waiver_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    ids = [c.id for c in expand([spec])]
    return [
        (f"waivers[{k}].match", f"{w.match!r} matches no case id of this operator (e.g. {ids[0]})")
        for k, w in enumerate(spec.waivers)
        if not any(glob_match(i, w.match) for i in ids)
    ]


# --------------------------------------------------------------------------- loading


def discover(paths: list[Path]) -> list[Path]:
    """Spec files under ``paths``: a file is taken as is; a folder gives its ``*.yaml``/``*.yml``
    files, recursively, sorted, skipping files and folders whose name starts with ``_`` or ``.``."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(
                f
                for f in p.rglob("*")
                if f.suffix in (".yaml", ".yml")
                and f.is_file()
                and not any(part.startswith(("_", ".")) for part in f.relative_to(p).parts)
            )
        else:
            found.append(p)
    return list(dict.fromkeys(found))


def _build(path: Path, model: _SpecModel, inputs: list[InputSpec], cases: list[CaseSpec]) -> OperatorSpec:
    return OperatorSpec(
        path=path,
        name=model.name,
        category=model.category,
        description=model.description,
        impl=model.impl,
        baseline=model.baseline,
        oracle=model.oracle,
        dtypes=list(model.dtypes),
        inputs=inputs,
        params=dict(model.params),
        cases=cases,
        trials=model.trials,
        seed=model.seed,
        thresholds={dt: t.model_dump(exclude_none=True) for dt, t in model.thresholds.items()},
        timeout=model.timeout,
        atomic_runs=model.atomic_runs,
        dual_delta=model.dual_delta.model_dump(exclude_none=True) if model.dual_delta is not None else None,
        waivers=[Waiver(w.match, w.reason) for w in model.waivers],
    )


def _valid_part(data: dict, name: str, failed: set) -> Any:
    """One top-level field of a spec that failed validation elsewhere, validated on its own
    (``None`` when it is the field that failed)."""
    if name in failed:
        return None
    info = _SpecModel.model_fields[name]
    if name not in data:
        return info.get_default(call_default_factory=True)
    annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return TypeAdapter(annotation).validate_python(data[name], strict=True)


def load_spec(path: Path) -> tuple[Optional[OperatorSpec], list[SpecProblem]]:
    """Load and validate one spec file: the spec, or ``None`` and all its problems.

    The schema is checked first; inputs and cases, and dtypes and thresholds,
    are checked further whenever they are valid themselves, so one pass reports
    as much as can be known.
    """
    path = Path(path)
    data, problem = _read_yaml(path)
    if problem:
        return None, [problem]
    try:
        return _validate(path, data)
    except RecursionError:
        return None, [SpecProblem(str(path), "", "a YAML alias refers to itself; the spec must be a finite tree")]


def _validate(path: Path, data: dict) -> tuple[Optional[OperatorSpec], list[SpecProblem]]:
    model: Optional[_SpecModel] = None
    try:
        model = _SpecModel.model_validate(data, context={"spec_path": path})
        parts = [model.inputs, model.cases, model.dtypes, model.thresholds]
        found: list[tuple[str, str]] = []
    except ValidationError as exc:
        errors = exc.errors()
        found = [(_path(e["loc"]), _message(e)) for e in errors]
        failed = {e["loc"][0] for e in errors if e["loc"]}
        parts = [_valid_part(data, name, failed) for name in ("inputs", "cases", "dtypes", "thresholds")]
    inputs_model, cases_model, dtypes, thresholds = parts
    inputs = cases = None
    if inputs_model is not None and cases_model is not None:
        inputs = [InputSpec(i.name, tuple(i.shape), i.dist.to_dist(), i.dtype) for i in inputs_model]
        cases = [CaseSpec(dict(c.model_extra or {}), dict(c.params), k) for k, c in enumerate(cases_model)]
        found += _input_case_problems(inputs, cases)
    if dtypes is not None and thresholds is not None:
        found += _dtype_problems(dtypes, thresholds)
    if not found:
        spec = _build(path, model, inputs, cases)
        found = _waiver_problems(spec)
        if not found:
            return spec, []
    return None, [SpecProblem(str(path), f, m) for f, m in found]


def load_specs(paths: list[Path]) -> tuple[list[OperatorSpec], list[SpecProblem]]:
    """Load every spec file under ``paths`` (see :func:`discover`).

    Returns the valid specs and every problem found in every file (a file with
    a problem gives no spec); operator names must be unique across files.
    """
    problems: list[SpecProblem] = []
    for p in map(Path, paths):
        if p.is_dir() and not discover([p]):
            problems.append(SpecProblem(str(p), "", "no spec files (*.yaml, *.yml) in this folder"))
    specs: list[OperatorSpec] = []
    first: dict[str, Path] = {}
    for path in discover(paths):
        spec, found = load_spec(path)
        problems += found
        if spec is None:
            continue
        if spec.name in first:
            problems.append(
                SpecProblem(str(path), "name", f"operator {spec.name!r} is already defined in {first[spec.name]}")
            )
            continue
        first[spec.name] = path
        specs.append(spec)
    return specs, problems


# --------------------------------------------------------------------------- expansion


def glob_match(text: str, pattern: str) -> bool:
    """Glob match where ``*`` and ``?`` are wildcards and ``[`` ``]`` match themselves,
    so a case id such as ``matmul[float16-M=1-N=1-K=32]`` is its own pattern."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]"))


def _compact(value: Any) -> str:
    """A param value in a case id: strings bare, floats by ``repr`` (``inf``), the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


def case_labels(spec: OperatorSpec) -> list[str]:
    """Per case: ``M=128-N=128-K=128`` (symbols in case order, then the case's own params);
    a label equal to an earlier one gets ``#<index>``."""
    labels: list[str] = []
    for c in spec.cases:
        parts = [f"{k}={v}" for k, v in c.symbols.items()] + [f"{k}={_compact(v)}" for k, v in c.params.items()]
        label = "-".join(parts)
        labels.append(f"{label}#{c.index}" if label in labels else label)
    return labels


def expand(specs: list[OperatorSpec], *, dtypes: Optional[list[str]] = None, only: Optional[str] = None) -> list[Case]:
    """All cases to run, operator by operator, then dtype (spec order), then case.

    ``dtypes`` keeps only those test dtypes (unknown names raise :class:`SpecError`).
    ``only`` keeps the cases whose operator name or case id matches the glob
    (see :func:`glob_match`). A case's id, and so its seed, does not depend on the filters.
    """
    if dtypes is not None:
        unknown = [d for d in dtypes if d not in DTYPES]
        if unknown:
            raise SpecError(f"unknown dtype {_one_of(unknown[0], list(DTYPES))}")
    out: list[Case] = []
    for spec in specs:
        labels = case_labels(spec)
        for dtype in spec.dtypes:
            if dtypes is not None and dtype not in dtypes:
                continue
            for c, label in zip(spec.cases, labels):
                case_id = f"{spec.name}[{dtype}{'-' if label and not label.startswith('#') else ''}{label}]"
                if only is not None and not (glob_match(spec.name, only) or glob_match(case_id, only)):
                    continue
                waiver = next((w.reason for w in spec.waivers if glob_match(case_id, w.match)), None)
                out.append(Case(spec, dtype, dict(c.symbols), {**spec.params, **c.params}, c.index, case_id, waiver))
    return out
