"""The validated spec as plain frozen dataclasses: distributions, inputs, cases, waivers, the spec, a case to run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from acceptance.spec.expr import Bound, Dim, value_of

if TYPE_CHECKING:
    from acceptance.numerics.emulate.roles import Emulation
    from acceptance.spec.kinds import JSONValue

    #: A threshold as a spec writes it: a number, a pair, a flag (diff4) or an expression of case symbols.
    ThresholdSpec = float | list[float] | bool | str

#: Operator categories; each has its default criteria (:mod:`acceptance.spec.defaults`).
CATEGORIES: tuple[str, ...] = (
    "convolution",
    "reduction",
    "activation",
    "arithmetic",
    "pure_io",
    "composite",
    "atomic_add",
    "quantized",
)


@dataclass(frozen=True)
class SpecProblem:
    """One problem in one spec file. ``field`` is a path such as ``inputs[1].shape[0]``
    (a line/column for YAML syntax errors; empty for whole-file problems)."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


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
    of: Dist


@dataclass(frozen=True)
class Specials:
    """``specials: {fraction: f, values: [...], of: <dist>}``: each element replaced,
    with probability ``f``, by one of ``values`` (equally likely); else drawn from ``of``."""

    fraction: float
    values: tuple[float, ...]
    of: Dist


@dataclass(frozen=True)
class Preset:
    """``preset: r4``: a named input range (:mod:`acceptance.formats.presets`), resolved per test dtype when
    inputs are drawn; a case's ``preset`` replaces the name."""

    name: str


Dist = Uniform | Normal | RandInt | Choice | Sparse | Specials | Preset


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
    or a fixed integer/bool dtype name from :data:`INPUT_DTYPES`. ``quant`` names a GGML block format
    (``q4_0`` ...): the impl then gets the packed uint8 blocks, and the baseline and oracle get what
    ``reference`` says: ``dequantized`` values, the same ``blocks``, or the ``float`` values drawn before
    quantization."""

    name: str
    shape: tuple[Dim, ...]
    dist: Dist
    dtype: str | None = None
    layout: str | None = None
    """Memory layout the impl gets this input in (:data:`acceptance.formats.layouts.LAYOUTS`); ``None``: contiguous."""
    quant: str | None = None
    reference: str = "dequantized"


@dataclass(frozen=True)
class CaseSpec:
    """One entry of ``cases``: symbol values, per-case keyword arguments, position."""

    symbols: dict[str, int]
    params: dict[str, JSONValue]
    index: int
    preset: str | None = None
    """The input-range preset of every ``preset`` input in this case (``None``: each input's own)."""
    role_params: dict[str, dict[str, JSONValue]] = field(default_factory=dict)
    """``impl_params``/``baseline_params``/``oracle_params`` of the case, by role (roles without any left out)."""


@dataclass(frozen=True)
class Waiver:
    """A failure the spec accepts: case ids matching ``match`` whose verdict is one of ``covers`` (fail, error)
    get verdict skip, with ``reason``, up to and including the date ``expires`` (ISO, ``None``: never);
    ``link`` tracks the fix."""

    match: str
    reason: str
    covers: tuple[str, ...] = ("fail",)
    expires: str | None = None
    link: str | None = None

    def expired(self, today: date) -> bool:
        """Whether the waiver no longer applies on ``today`` (it applies through its ``expires`` day)."""
        return self.expires is not None and today > date.fromisoformat(self.expires)


@dataclass(frozen=True)
class Override:
    """Thresholds and dual-delta settings for the case ids matching ``match`` (a glob, as waivers and --only),
    applied over the per-dtype ones; later overrides win. ``thresholds`` maps a metric to a number or an
    expression of case symbols (text); ``dual_delta`` holds only the keys written; ``index`` is its position."""

    match: str
    thresholds: dict[str, ThresholdSpec]
    dual_delta: dict[str, JSONValue]
    index: int


class PerfSection(TypedDict, total=False):
    """The ``perf`` section of a spec as written (keys left out are absent)."""

    flops: Dim
    bytes: Dim
    baseline: str
    min_speedup: float


@dataclass(frozen=True)
class Backward:
    """The ``backward`` section: the gradients checked besides the forward outputs.

    ``wrt``: input names, or parameter names of an ``nn.Module`` impl, in the order the gradient outputs
    ``grad[name]`` follow the forward outputs; ``cotangent``: the distribution the output gradients are
    drawn from (rounded once to the test dtype, as inputs are); ``impl_backward``: ``module:attr`` of a
    hand-written backward ``fn(dy, *inputs, **params)`` returning one gradient per ``wrt`` entry (``None``:
    autograd through the impl)."""

    wrt: tuple[str, ...]
    cotangent: Dist
    impl_backward: str | None = None


@dataclass(frozen=True)
class OperatorSpec:
    """A validated spec file. ``impl``/``baseline`` are ``module:attr`` references
    (resolve with :func:`resolve_callable`); ``oracle`` is a reference, a mapping
    ``{'mpmath': name, 'dps': digits}``, or ``None``. ``floors`` maps a dtype name to
    ``{max_ulp, mean_ulp}`` accuracy-floor overrides. ``thresholds`` maps a dtype name
    to ``{metric: value}`` as written; ``dual_delta`` holds only the keys written. ``tier`` is ``default``
    or ``large`` (run only when asked for); ``perf`` holds the keys of the ``perf`` section as written
    (``flops``/``bytes`` as ints or :class:`Expr`), or ``None``."""

    path: Path
    name: str
    category: str
    description: str
    impl: str | dict[str, JSONValue]
    baseline: str | dict[str, JSONValue] | None
    oracle: str | dict[str, JSONValue] | None
    dtypes: list[str]
    inputs: list[InputSpec]
    params: dict[str, JSONValue]
    cases: list[CaseSpec]
    trials: int
    seed: int
    thresholds: dict[str, dict[str, ThresholdSpec]]
    floors: dict[str, dict[str, float]]
    timeout: float
    baseline_timeout: float
    oracle_timeout: float
    memory_limit_gib: float
    atomic_runs: int
    dual_delta: dict[str, JSONValue] | None
    waivers: list[Waiver] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    emulate: dict[str, Emulation] = field(default_factory=dict)
    """Per test dtype, the :class:`acceptance.numerics.emulate.roles.Emulation` of the baseline (absent: none)."""
    deterministic: bool | None = None
    """Whether the impl must give bitwise-identical results run to run (``None``: every category but
    atomic_add must)."""
    tier: str = "default"
    reruns: int | None = None
    """Impl runs per trial where run-to-run variation is allowed (``None``: the default,
    :func:`acceptance.measure.determinism.impl_runs`); the criteria see the median run of each trial (the worst
    where gross)."""
    perf: PerfSection | None = None
    invariants: dict[str, JSONValue] | None = None
    """The spec's ``invariants`` section as written (``None``: the built-in function's defaults)."""
    role_params: dict[str, dict[str, JSONValue]] = field(default_factory=dict)
    """``impl_params``/``baseline_params``/``oracle_params`` of the spec, by role (roles without any left out)."""
    backward: Backward | None = None
    """The gradients checked besides the forward outputs (:mod:`acceptance.spec.backward`); ``None``: forward only."""


@dataclass(frozen=True)
class Case:
    """One (operator, dtype, case) to run. ``params`` = spec params with the case's
    params merged over them. ``waiver`` is the reason when the spec waives this case."""

    spec: OperatorSpec
    dtype: str
    symbols: dict[str, int]
    params: dict[str, JSONValue]
    index: int
    id: str
    waiver: str | None = None
    preset: str | None = None
    role_params: dict[str, dict[str, JSONValue]] = field(default_factory=dict)
    """Per role: the spec's and the case's ``<role>_params`` merged (case over spec); merged over ``params``."""
    waiver_covers: tuple[str, ...] = ("fail",)
    """The verdicts the waiver in force turns into skip."""
    expired_waiver: str | None = None
    """An expired waiver that matches this case, in words (it no longer applies)."""

    def params_for(self, role: str) -> dict[str, JSONValue]:
        """Keyword arguments of ``role`` (impl, baseline, oracle): ``params`` with the role's merged over them."""
        return {**self.params, **self.role_params.get(role, {})}

    @property
    def case_params(self) -> dict[str, JSONValue]:
        """The case's own ``params`` (without the spec's), as written in the case."""
        return self.spec.cases[self.index].params

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Shape of every input, in input order."""
        return [tuple(int(value_of(d, self.symbols)) for d in inp.shape) for inp in self.spec.inputs]
