"""Oracles: the mathematically faithful result every error is measured against.

* :func:`float64_oracle` — the default: a callable run on float64 copies of
  the inputs (integer and bool tensors unchanged), outputs as float64. Its own
  error is float64 rounding, ~1.1e-16 relative per operation, far below the
  rounding of any test dtype.
* :func:`mpmath_oracle` — MPFR-grade, for small cases of element-wise math:
  each element is evaluated by mpmath at ``dps`` decimal digits and then
  rounded to the nearest float64 (round half to even). For example, a spec
  selects it with ``oracle: {mpmath: exp, dps: 50}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, TypeAlias

import mpmath

from acceptance.formats.roleref import Resolver, RoleRef

if TYPE_CHECKING:
    import torch

# torch is imported where a tensor is handled, not here: validating and listing a spec that names an mpmath oracle
# checks the function's name against this module without loading torch (~1.7 s)

#: A callable of any arguments (a role's, whose outputs the runner checks).
Fn = Callable[..., object]
#: An mpmath formula: ``(ctx, *values, **params)`` to an mpmath real (or complex, off the function's domain).
Formula: TypeAlias = "Callable[..., mpmath.mpf | mpmath.mpc]"

#: Decimal digits of the mpmath oracle when a spec gives none, and the fewest it accepts.
DEFAULT_DPS = 50
MIN_DPS = 20


def float64_inputs(args: tuple) -> tuple:
    """CPU float64 copies of the floating tensors in ``args`` (complex to complex128);
    integer and bool tensors moved to the CPU unchanged; non-tensors passed through."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu()
            if a.is_floating_point():
                a = a.to(torch.float64)
            elif a.is_complex():
                a = a.to(torch.complex128)
        out.append(a)
    return tuple(out)


def _float64_outputs(result: object) -> object:
    """Floating tensor outputs as CPU float64; a tuple keeps its shape."""
    import torch

    if isinstance(result, (tuple, list)):
        return tuple(_float64_outputs(r) for r in result)
    if isinstance(result, torch.Tensor) and result.is_floating_point():
        return result.detach().cpu().to(torch.float64)
    return result


def float64_oracle(fn: Fn) -> Fn:
    """``fn`` run on float64 copies of its inputs, floating outputs returned as float64.

    This is the default oracle: the baseline callable in float64.
    """

    def oracle(*args: object, **params: object) -> object:
        return _float64_outputs(fn(*float64_inputs(args), **params))

    oracle.__name__ = f"float64({getattr(fn, '__name__', repr(fn))})"
    oracle.__qualname__ = oracle.__name__
    return oracle


@dataclass(frozen=True)
class Float64Ref:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to :func:`float64_oracle` of ``inner``'s
    callable (``inner`` resolved afresh: a float64 oracle never shares the object of the role it copies)."""

    inner: RoleRef

    def resolve(self, cached: Resolver) -> Callable:
        return float64_oracle(self.inner.resolve(cached))


# ----------------------------------------------------------------------------
# MPFR-grade element-wise oracle
# ----------------------------------------------------------------------------


def to_float64(x: mpmath.mpf | mpmath.mpc) -> float:
    """Round an mpmath real to the nearest float64 (ties to even), subnormals included.

    The mpf value is man * 2**exp exactly; ``Fraction`` division of Python
    ints is correctly rounded, so there is a single rounding (mpmath's own
    ``float()`` rounds to 53 bits first and can round twice in the subnormal
    range). A complex value (a domain error, e.g. log(-1)) is NaN, as in IEEE-754.
    """
    if not hasattr(x, "_mpf_"):  # mpc
        return math.nan
    sign, man, exp, bc = x._mpf_
    if not man:  # zero, inf, nan
        return float(x)
    if exp + bc > 1025:  # |x| >= 2**1024: beyond the largest float64
        return -math.inf if sign else math.inf
    if exp + bc < -1080:  # |x| < 2**-1080: below half the smallest subnormal
        return -0.0 if sign else 0.0
    value = Fraction(man << exp) if exp >= 0 else Fraction(man, 1 << -exp)
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    return -out if sign else out


def _gelu(ctx: mpmath.MPContext, x: mpmath.mpf, approximate: str = "none") -> mpmath.mpf:
    """x * Phi(x) = x/2 * erfc(-x/sqrt(2)); 'tanh': x/2 * (1 + tanh w) = x / (1 + exp(-2w)),
    w = sqrt(2/pi) * (x + 0.044715 x^3). Both forms avoid the cancellation of 1 + erf / 1 + tanh
    for x << 0, which a fixed working precision does not cure."""
    if approximate == "tanh":
        w = ctx.sqrt(2 / ctx.pi) * (x + ctx.mpf("0.044715") * x**3)
        return x / (1 + ctx.exp(-2 * w))
    return x / 2 * ctx.erfc(-x / ctx.sqrt(2))


#: name -> (high-precision formula (ctx, *args, **params), the float64 torch function for IEEE special points,
#: by its name under ``torch``). Names not listed map to ``mpmath.<name>`` directly.
_FUNCTIONS: dict[str, tuple[Formula, str | None]] = {
    "exp": (lambda c, x: c.exp(x), "exp"),
    "exp2": (lambda c, x: c.power(2, x), "exp2"),
    "expm1": (lambda c, x: c.expm1(x), "expm1"),
    "log": (lambda c, x: c.log(x), "log"),
    "log2": (lambda c, x: c.log(x, 2), "log2"),
    "log10": (lambda c, x: c.log10(x), "log10"),
    "log1p": (lambda c, x: c.log1p(x), "log1p"),
    "sqrt": (lambda c, x: c.sqrt(x), "sqrt"),
    "rsqrt": (lambda c, x: 1 / c.sqrt(x), "rsqrt"),
    "reciprocal": (lambda c, x: 1 / x, "reciprocal"),
    "sin": (lambda c, x: c.sin(x), "sin"),
    "cos": (lambda c, x: c.cos(x), "cos"),
    "tan": (lambda c, x: c.tan(x), "tan"),
    "asin": (lambda c, x: c.asin(x), "asin"),
    "acos": (lambda c, x: c.acos(x), "acos"),
    "atan": (lambda c, x: c.atan(x), "atan"),
    "sinh": (lambda c, x: c.sinh(x), "sinh"),
    "cosh": (lambda c, x: c.cosh(x), "cosh"),
    "tanh": (lambda c, x: c.tanh(x), "tanh"),
    "asinh": (lambda c, x: c.asinh(x), "asinh"),
    "acosh": (lambda c, x: c.acosh(x), "acosh"),
    "atanh": (lambda c, x: c.atanh(x), "atanh"),
    "erf": (lambda c, x: c.erf(x), "erf"),
    "erfc": (lambda c, x: c.erfc(x), "erfc"),
    "sigmoid": (lambda c, x: 1 / (1 + c.exp(-x)), "sigmoid"),
    "silu": (lambda c, x: x / (1 + c.exp(-x)), "nn.functional.silu"),
    "softplus": (lambda c, x: c.log1p(c.exp(x)), "nn.functional.softplus"),
    "mish": (lambda c, x: x * c.tanh(c.log1p(c.exp(x))), "nn.functional.mish"),
    "gelu": (_gelu, "nn.functional.gelu"),
    "atan2": (lambda c, y, x: c.atan2(y, x), "atan2"),
    "pow": (lambda c, x, y: c.power(x, y), "pow"),
    "hypot": (lambda c, x, y: c.hypot(x, y), "hypot"),
}


def _torch_function(path: str) -> Callable[..., torch.Tensor]:
    """The torch function at ``path`` under ``torch`` (``"exp"``, ``"nn.functional.silu"``)."""
    import torch

    fn: object = torch
    for part in path.split("."):
        fn = getattr(fn, part)
    assert callable(fn)  # every path in _FUNCTIONS names a torch function
    return fn


def mpmath_names() -> list[str]:
    """The names with a formula and IEEE special points (any other ``mpmath.<name>`` works too)."""
    return sorted(_FUNCTIONS)


def _check_params(name: str, n_inputs: int, params: dict) -> None:
    """Raise ``ValueError`` naming the function on missing inputs or unknown parameters."""
    if n_inputs == 0:
        raise ValueError(f"mpmath oracle {name!r}: no input tensor")
    allowed = {"approximate": ("none", "tanh")} if name == "gelu" else {}
    for key, value in params.items():
        if key not in allowed:
            raise ValueError(f"mpmath oracle {name!r}: unknown parameter {key!r}")
        if value not in allowed[key]:
            raise ValueError(f"mpmath oracle {name!r}: {key} must be one of {allowed[key]}, got {value!r}")


def _is_special(values: tuple[float, ...]) -> bool:
    return any(v == 0.0 or not math.isfinite(v) for v in values)


def mpmath_oracle(name: str, dps: int = DEFAULT_DPS) -> Callable[..., torch.Tensor]:
    """Element-wise oracle ``fn(*tensors, **params) -> float64 tensor`` through mpmath.

    Each element (inputs broadcast together, converted exactly from float64)
    is evaluated at ``dps`` decimal digits and rounded once to float64 by
    :func:`to_float64`: correctly rounded unless the exact value lies within
    ~10**-dps relative of a float64 rounding boundary. Elements where an input
    is ±0, ±inf or NaN take the value of the float64 torch function (the
    IEEE-754 special value, which mpmath, having no signed zero, cannot give).
    ``gelu`` accepts ``approximate='none'|'tanh'``; other functions take no
    parameters. Cost: tens of microseconds per element, so keep cases small.

    Raises ``ValueError`` for an unknown name or ``dps <`` :data:`MIN_DPS`.
    """
    if not isinstance(dps, int) or isinstance(dps, bool) or dps < MIN_DPS:
        raise ValueError(f"mpmath oracle {name!r}: dps must be an integer >= {MIN_DPS}, got {dps!r}")
    if name in _FUNCTIONS:
        formula, special = _FUNCTIONS[name]
    elif callable(getattr(mpmath, name, None)) and not name.startswith("_"):
        formula, special = (lambda c, *xs, _f=name: getattr(c, _f)(*xs)), None
    else:
        raise ValueError(
            f"mpmath oracle: unknown function {name!r}; known: {', '.join(mpmath_names())} or any mpmath function name"
        )
    ctx = mpmath.MPContext()
    ctx.dps = dps

    def oracle(*tensors: torch.Tensor, **params: object) -> torch.Tensor:
        import torch

        _check_params(name, len(tensors), params)
        try:
            xs = torch.broadcast_tensors(*float64_inputs(tensors))
        except RuntimeError as exc:
            raise ValueError(f"mpmath oracle {name!r}: inputs do not broadcast: {exc}") from None
        columns = [x.reshape(-1).tolist() for x in xs]
        out = []
        for values in zip(*columns, strict=False):
            try:
                out.append(to_float64(formula(ctx, *(ctx.mpf(v) for v in values), **params)))
            except (ValueError, ZeroDivisionError):
                out.append(math.nan)
        result = torch.tensor(out, dtype=torch.float64).reshape(xs[0].shape)
        if special is not None:
            mask = torch.tensor([_is_special(v) for v in zip(*columns, strict=False)], dtype=torch.bool).reshape(
                result.shape
            )
            if mask.any():
                result = torch.where(mask, _torch_function(special)(*xs, **params), result)
        return result

    oracle.__name__ = f"mpmath.{name}"
    oracle.__qualname__ = oracle.__name__
    return oracle


@dataclass(frozen=True)
class MpmathRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to :func:`mpmath_oracle` ``(name, dps)``."""

    name: str
    dps: int = DEFAULT_DPS

    def resolve(self, cached: Resolver) -> Callable:
        return mpmath_oracle(self.name, self.dps)


def oracle_from_spec(section: dict) -> Callable[..., torch.Tensor]:
    """The oracle a spec's ``oracle:`` mapping selects, e.g. ``{mpmath: exp, dps: 50}``.

    Keys: ``mpmath`` (a function name, see :func:`mpmath_oracle`) and
    optionally ``dps`` (decimal digits, default :data:`DEFAULT_DPS`, at least
    :data:`MIN_DPS`). Raises ``ValueError`` naming the offending field of ``oracle``.
    """
    if not isinstance(section, dict):
        raise ValueError(f"oracle: expected a mapping like {{mpmath: exp, dps: 50}}, got {section!r}")
    unknown = sorted(set(section) - {"mpmath", "dps"})
    if unknown:
        raise ValueError(f"oracle: unknown field(s) {', '.join(map(str, unknown))} (allowed: mpmath, dps)")
    name = section.get("mpmath")
    if not isinstance(name, str) or not name:
        raise ValueError(f"oracle.mpmath: expected a function name such as 'exp', got {name!r}")
    dps = section.get("dps", DEFAULT_DPS)
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < MIN_DPS:
        raise ValueError(f"oracle.dps: expected an integer >= {MIN_DPS} (decimal digits), got {dps!r}")
    return mpmath_oracle(name, dps)
