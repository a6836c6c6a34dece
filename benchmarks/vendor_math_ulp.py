"""ULP error of shipping math libraries against an MPFR-grade oracle, and of known bugs.

Part 1 (libraries). For float32, float16 and bfloat16 inputs, each function is
evaluated by numpy, scipy.special (through the wrappers of the spec library,
``operator_specs/vendor_math/_vendor.py``) and torch on the CPU, and by the
oracle ``acceptance.numerics.oracle.mpmath_oracle(name, dps=30)`` (mpmath at 30
decimal digits, rounded once to float64). The errors are
``acceptance.numerics.metrics.compute(e, o, dtype=..., names=[max_ulp, mean_ulp,
max_hyb, mean_hyb])``:

* ulp_i = |e_i - o_i| / spacing(min(|e_i|, |o_i|)) in the test dtype
  (spacing(x) = 2^(max(floor(log2 x), emin) - (p - 1)));
* hyb_i = |e_i - o_i| / (1 + |o_i|);

max and mean over the elements. The row ``CR`` is the oracle itself rounded
once to the dtype (ties to even): the error of a correctly rounded result,
the gate's "free" allowance (<= 0.5 ulp). ``worst x`` is the input of the
largest ulp error (first one if tied).

Inputs: float32, ``--n`` values drawn uniformly in float64 on the range and
rounded to float32 (seed 0); float16 and bfloat16, *every* value of the dtype
in the range (exhaustive, so the max is exact for that range; bfloat16 uses
the float16 ranges, torch only, as numpy has no bfloat16). Each function has
a typical range and a hard one (range reduction, cancellation near a zero,
subnormal results).

How each library computes float16 (checked at run time, printed): numpy's
``e->e`` loops cast to float32, call the float32 loop and round back (the
printout compares ``np.f(x16)`` with ``np.f(x16.astype(float32)).astype(float16)``);
scipy.special has no float16 loop, so NumPy's type resolution picks ``d->d``:
the value is computed in float64 and rounded once to float16 by the wrapper
(numpy's float64 -> float16 cast rounds once); torch computes float16 and
bfloat16 through float32 and rounds.

Part 2 (bugs). Float32 implementations with known defects, measured the same
way against the oracle of the function they claim to compute, next to legit
variants, to show how far above a floor of a few ulp the defects land; and
three float16 exp variants on every float16 input in [-10, 10] (correct
rounding of a float32 result, truncation of it, a float16 intermediate).

Run: ``python benchmarks/vendor_math_ulp.py [--n 50000] [--only exp,tanh] [--no-bugs]``.
On the 2-core development machine the default run takes about 1 minute,
nearly all of it in the oracle (the script prints the cost per element).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mpmath
import numpy as np
import scipy.special
import torch
import torch.nn.functional as F

from acceptance.numerics import metrics
from acceptance.numerics.oracle import mpmath_oracle, rounded

NAMES = ["max_ulp", "mean_ulp", "max_hyb", "mean_hyb"]
DPS = 30
PRECISION = {"float32": (24, -126), "float16": (11, -14), "bfloat16": (8, -126)}
DTYPES = ("float32", "float16", "bfloat16")


# ----------------------------------------------------------------------------- libraries


def _load_vendor():
    """The numpy/scipy wrappers of the vendor_math spec library (``fn(tensor) -> tensor``)."""
    path = Path(__file__).resolve().parent.parent / "operator_specs" / "vendor_math" / "_vendor.py"
    spec = importlib.util.spec_from_file_location("vendor_math_wrappers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V = _load_vendor()


@dataclass(frozen=True)
class Function:
    """One mathematical function: its oracle name, the library implementations, two ranges per dtype."""

    name: str
    oracle: str
    libs: dict[str, Callable[[torch.Tensor], torch.Tensor]]
    ranges: dict[str, tuple[tuple[float, float], tuple[float, float]]]


FUNCTIONS = [
    Function(
        "exp",
        "exp",
        {"numpy": V.np_exp, "torch": torch.exp},
        {"float32": ((-80, 80), (80, 88.7)), "float16": ((-10, 10), (-16, -10))},
    ),
    Function(
        "log",
        "log",
        {"numpy": V.np_log, "torch": torch.log},
        {"float32": ((0, 1e4), (0.5, 2)), "float16": ((0, 1e4), (0.5, 2))},
    ),
    Function(
        "tanh",
        "tanh",
        {"numpy": V.np_tanh, "torch": torch.tanh},
        {"float32": ((-10, 10), (-1, 1)), "float16": ((-10, 10), (-1, 1))},
    ),
    Function(
        "sin",
        "sin",
        {"numpy": V.np_sin, "torch": torch.sin},
        {"float32": ((-10, 10), (-1e4, 1e4)), "float16": ((-10, 10), (-1e4, 1e4))},
    ),
    Function(
        "cos",
        "cos",
        {"numpy": V.np_cos, "torch": torch.cos},
        {"float32": ((-10, 10), (-1e4, 1e4)), "float16": ((-10, 10), (-1e4, 1e4))},
    ),
    Function(
        "expm1",
        "expm1",
        {"numpy": V.np_expm1, "torch": torch.expm1},
        {"float32": ((-10, 10), (-1e-3, 1e-3)), "float16": ((-10, 10), (-1e-2, 1e-2))},
    ),
    Function(
        "log1p",
        "log1p",
        {"numpy": V.np_log1p, "torch": torch.log1p},
        {"float32": ((-0.999, 1e4), (-1e-3, 1e-3)), "float16": ((-0.999, 1e4), (-1e-2, 1e-2))},
    ),
    Function(
        "sqrt",
        "sqrt",
        {"numpy": V.np_sqrt, "torch": torch.sqrt},
        {"float32": ((0, 1e4), (0, 1e-30)), "float16": ((0, 1e4), (0, 1e-3))},
    ),
    Function(
        "atan",
        "atan",
        {"numpy": V.np_arctan, "torch": torch.atan},
        {"float32": ((-10, 10), (-1e4, 1e4)), "float16": ((-10, 10), (-1e4, 1e4))},
    ),
    Function(
        "erf",
        "erf",
        {"scipy": V.scipy_erf, "torch": torch.erf},
        {"float32": ((-10, 10), (-1, 1)), "float16": ((-10, 10), (-1, 1))},
    ),
    Function(
        "sigmoid",
        "sigmoid",
        {"scipy": V.scipy_expit, "torch": torch.sigmoid},
        {"float32": ((-10, 10), (-80, -10)), "float16": ((-10, 10), (-17, -10))},
    ),
]


# ----------------------------------------------------------------------------- inputs and errors


def float32_inputs(lo: float, hi: float, n: int, seed: int = 0) -> np.ndarray:
    """n values uniform on [lo, hi] drawn in float64, rounded to float32; lo = 0 excluded for log."""
    x = np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)
    return x[x != 0] if lo == 0 else x


def every_value(dtype: str, lo: float, hi: float) -> np.ndarray:
    """Every finite value of a 16-bit ``dtype`` (float16 or bfloat16) in [lo, hi], as exact float32, ascending;
    0 excluded when lo = 0."""
    bits = torch.from_numpy(np.arange(2**16, dtype=np.int32).astype(np.int16))
    every = bits.view(getattr(torch, dtype)).float().numpy()
    every = every[np.isfinite(every)]
    x = np.unique(every[(every >= lo) & (every <= hi)])
    return x[x != 0] if lo == 0 else x


def float16_inputs(lo: float, hi: float) -> np.ndarray:
    """Every finite float16 value in [lo, hi] (0 excluded when lo = 0), ascending."""
    return every_value("float16", lo, hi).astype(np.float16)


def ulp_errors(e: np.ndarray, o: np.ndarray, dtype: str) -> np.ndarray:
    """Per-element |e - o| / spacing(min(|e|, |o|)) with the formula of acceptance.numerics.metrics (to locate the
    worst x); e holds the dtype's values exactly (float16 or float32 arrays)."""
    p, emin = PRECISION[dtype]
    m = np.minimum(np.abs(e.astype(np.float64)), np.abs(o))
    with np.errstate(divide="ignore"):
        exponent = np.where(m > 0, np.floor(np.log2(np.where(m > 0, m, 1.0))), emin)
    spacing = np.exp2(np.maximum(exponent, emin) - (p - 1))
    return np.abs(e.astype(np.float64) - o) / spacing


def errors(e: torch.Tensor, o: np.ndarray, dtype: str, x: np.ndarray) -> dict:
    """The four metrics of e (a tensor of ``dtype``) against the oracle o, plus the input of the largest ulp error."""
    out = metrics.compute(e, o, dtype=dtype, names=NAMES)
    ulps = ulp_errors(e.float().numpy(), o, dtype)
    out["worst_x"] = float(x[int(np.nanargmax(ulps))]) if np.isfinite(ulps).any() else math.nan
    return out


def oracle_values(name: str, x: np.ndarray) -> tuple[np.ndarray, float]:
    """mpmath oracle on the float64 values of x, and the seconds it took."""
    t0 = time.perf_counter()
    o = mpmath_oracle(name, dps=DPS)(torch.from_numpy(x.astype(np.float64))).numpy()
    return o, time.perf_counter() - t0


def fmt(v: float) -> str:
    return "inf" if v == math.inf else ("nan" if v != v else (f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"))


def draw_inputs(dtype: str, lo: float, hi: float, n: int) -> np.ndarray:
    """float32: n random values; float16 and bfloat16: every value of the dtype in the range (as float32)."""
    return float32_inputs(lo, hi, n) if dtype == "float32" else every_value(dtype, lo, hi)


def library_table(n: int, only: set[str]) -> None:
    """Part 1: print one row per (function, range, dtype, library); numpy and scipy have no bfloat16."""
    header = (
        f"{'function':8} {'dtype':8} {'range':>18} {'lib':6} {'max_ulp':>9} {'mean_ulp':>9} "
        f"{'max_hyb':>9} {'mean_hyb':>9} {'worst x':>12}"
    )
    print(header)
    print("-" * len(header))
    spent, evaluated = 0.0, 0
    for fn in FUNCTIONS:
        if only and fn.name not in only:
            continue
        for dtype in DTYPES:
            for lo, hi in fn.ranges["float32" if dtype == "float32" else "float16"]:
                x = draw_inputs(dtype, lo, hi, n)
                o, seconds = oracle_values(fn.oracle, x)
                spent, evaluated = spent + seconds, evaluated + x.size
                xt = torch.from_numpy(x).to(getattr(torch, dtype))  # exact: x holds values of dtype
                rows = [("CR", rounded(torch.from_numpy(o), getattr(torch, dtype)))]
                rows += [(lib, call(xt)) for lib, call in fn.libs.items() if dtype != "bfloat16" or lib == "torch"]
                for lib, e in rows:
                    r = errors(e, o, dtype, x)
                    span = f"[{lo:g}, {hi:g}]"
                    print(
                        f"{fn.name:8} {dtype:8} {span:>18} {lib:6} {fmt(r['max_ulp']):>9} {fmt(r['mean_ulp']):>9} "
                        f"{fmt(r['max_hyb']):>9} {fmt(r['mean_hyb']):>9} {r['worst_x']:>12.6g}"
                    )
    if evaluated:
        print(
            f"\noracle: {evaluated} elements in {spent:.1f} s = {1e6 * spent / evaluated:.1f} us per element "
            f"(mpmath {mpmath.__version__}, backend {mpmath.libmp.BACKEND}, dps {DPS})"
        )


def float16_paths() -> None:
    """Print how numpy computes float16: share of float16 inputs where np.f(x16) equals the float32 loop rounded."""
    x = float16_inputs(-10, 10)
    for name, fn in [("exp", np.exp), ("tanh", np.tanh), ("sin", np.sin), ("log", np.log)]:
        xx = x[x > 0] if name == "log" else x
        same = np.mean(fn(xx).view(np.uint16) == fn(xx.astype(np.float32)).astype(np.float16).view(np.uint16))
        print(f"numpy float16 {name}: equal to float32 loop + one rounding on {100 * same:.2f} % of {xx.size} inputs")
    for name, fn in [("erf", scipy.special.erf), ("expit", scipy.special.expit)]:
        print(
            f"scipy.special.{name}: float16 input -> {fn(x[:1]).dtype} result; float32 input -> "
            f"{fn(x[:1].astype(np.float32)).dtype} result"
        )


# ----------------------------------------------------------------------------- part 2: bugs


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def exp_taylor(degree: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """float32 exp by range reduction and a Taylor polynomial of the given degree:
    x = k ln2 + r with k = rint(x / ln2) and |r| <= ln2 / 2 (Cody-Waite: ln2 split in a
    high part exact in float32 and a low part), e^x = 2^k * sum_{j <= degree} r^j / j!
    (Horner, float32). Truncation error ~ |r|^(degree+1) / (degree+1)! relative."""
    ln2_hi = torch.tensor(0.693145751953125, dtype=torch.float32)  # 12 significant bits: k * ln2_hi exact
    ln2_lo = torch.tensor(1.428606765330187e-06, dtype=torch.float32)
    coeffs = [torch.tensor(1 / math.factorial(j), dtype=torch.float32) for j in range(degree, -1, -1)]

    def f(x: torch.Tensor) -> torch.Tensor:
        k = torch.round(x / torch.tensor(math.log(2), dtype=torch.float32))
        r = (x - k * ln2_hi) - k * ln2_lo
        p = coeffs[0].expand_as(r)
        for c in coeffs[1:]:
            p = p * r + c
        return torch.ldexp(p, k.to(torch.int32))

    return f


def via(dtype: torch.dtype, fn: Callable) -> Callable[[torch.Tensor], torch.Tensor]:
    """Result of fn computed in float32, stored once in ``dtype`` (an intermediate of lower precision), read back."""
    return lambda x: _f32(fn(x).to(dtype))


BUGS: list[tuple[str, str, str, tuple[float, float], Callable[[torch.Tensor], torch.Tensor]]] = [
    # (label, kind, oracle, range, float32 implementation)
    ("torch exp (SLEEF u10)", "legit", "exp", (-10, 10), torch.exp),
    ("exp: degree-7 Taylor + range reduction", "legit", "exp", (-10, 10), exp_taylor(7)),
    ("exp: degree-6 Taylor + range reduction", "legit", "exp", (-10, 10), exp_taylor(6)),
    ("exp: degree-5 Taylor + range reduction", "bug", "exp", (-10, 10), exp_taylor(5)),
    ("exp: degree-4 Taylor + range reduction", "bug", "exp", (-10, 10), exp_taylor(4)),
    ("exp: degree-3 Taylor + range reduction", "bug", "exp", (-10, 10), exp_taylor(3)),
    ("exp: input rounded to bfloat16", "bug", "exp", (-10, 10), lambda x: torch.exp(_f32(x.to(torch.bfloat16)))),
    ("exp: result stored in float16", "bug", "exp", (-10, 10), via(torch.float16, torch.exp)),
    ("exp: result stored in bfloat16", "bug", "exp", (-10, 10), via(torch.bfloat16, torch.exp)),
    ("torch gelu (erf form)", "legit", "gelu", (-5, 5), F.gelu),
    (
        "gelu: x/2*erfc(-x/sqrt2) in float32",
        "legit",
        "gelu",
        (-5, 5),
        lambda x: x / 2 * torch.special.erfc(-x * torch.tensor(math.sqrt(0.5), dtype=torch.float32)),
    ),
    ("gelu: tanh form used for erf form", "bug", "gelu", (-5, 5), lambda x: F.gelu(x, approximate="tanh")),
    ("gelu: x*sigmoid(1.702x) for erf form", "bug", "gelu", (-5, 5), lambda x: x * torch.sigmoid(1.702 * x)),
    ("torch silu", "legit", "silu", (-10, 10), F.silu),
    ("silu: x / (1 + exp(-x)) in float32", "legit", "silu", (-10, 10), lambda x: x / (1 + torch.exp(-x))),
    (
        "silu: sigmoid stored in bfloat16",
        "bug",
        "silu",
        (-10, 10),
        lambda x: x * _f32(torch.sigmoid(x).to(torch.bfloat16)),
    ),
    (
        "silu: sigmoid stored in float16",
        "bug",
        "silu",
        (-10, 10),
        lambda x: x * _f32(torch.sigmoid(x).to(torch.float16)),
    ),
    ("torch tanh (SLEEF u10)", "legit", "tanh", (-10, 10), torch.tanh),
    ("tanh: 2*sigmoid(2x) - 1 (cancels near 0)", "bug", "tanh", (-10, 10), lambda x: 2 * torch.sigmoid(2 * x) - 1),
    ("torch sigmoid", "legit", "sigmoid", (-10, 10), torch.sigmoid),
    ("sigmoid: 1 / (1 + exp(-x)) in float32", "legit", "sigmoid", (-10, 10), lambda x: 1 / (1 + torch.exp(-x))),
    ("sigmoid: (1 + tanh(x/2)) / 2 (cancels x<<0)", "bug", "sigmoid", (-10, 10), lambda x: (1 + torch.tanh(x / 2)) / 2),
]


def bug_table(n: int) -> None:
    """Part 2: float32 implementations, legit and buggy, against the oracle of the function they claim."""
    header = (
        f"{'float32 implementation':44} {'kind':5} {'range':>9} {'max_ulp':>9} {'mean_ulp':>9} "
        f"{'max_hyb':>9} {'mean_hyb':>9}"
    )
    print(header)
    print("-" * len(header))
    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    for label, kind, oracle, (lo, hi), impl in BUGS:
        key = (oracle, lo, hi)
        if key not in cache:
            x = float32_inputs(lo, hi, n, seed=1)
            cache[key] = (x, oracle_values(oracle, x)[0])
        x, o = cache[key]
        e = impl(torch.from_numpy(x)).numpy()
        r = metrics.compute(e, o, dtype="float32", names=NAMES)
        span = f"[{lo:g},{hi:g}]"
        print(
            f"{label:44} {kind:5} {span:>9} {fmt(r['max_ulp']):>9} {fmt(r['mean_ulp']):>9} "
            f"{fmt(r['max_hyb']):>9} {fmt(r['mean_hyb']):>9}"
        )


def _truncate_to_float16(r: np.ndarray) -> np.ndarray:
    """float32 values rounded toward zero to float16 (a wrong rounding mode on the output conversion)."""
    h = r.astype(np.float16)
    over = np.abs(h.astype(np.float32)) > np.abs(r)
    h[over] = np.nextafter(h[over], np.float16(0))
    return h


FLOAT16_BUGS: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = [
    ("exp in float32, rounded to nearest (torch)", "legit", lambda x: torch.exp(torch.from_numpy(x)).numpy()),
    ("exp in float32, rounded toward zero", "bug", lambda x: _truncate_to_float16(np.exp(x.astype(np.float32)))),
    (
        "exp2(x * log2 e) with the product in float16",
        "bug",
        lambda x: np.exp2((x * np.float16(math.log2(math.e))).astype(np.float32)).astype(np.float16),
    ),
]


def float16_bug_table() -> None:
    """Part 2b: float16 exp on every float16 input in [-10, 10], legit and buggy."""
    x = float16_inputs(-10, 10)
    o = oracle_values("exp", x)[0]
    header = f"{'float16 implementation':44} {'kind':5} {'max_ulp':>9} {'mean_ulp':>9} {'max_hyb':>9} {'mean_hyb':>9}"
    print(header)
    print("-" * len(header))
    for label, kind, impl in FLOAT16_BUGS:
        r = metrics.compute(impl(x), o, dtype="float16", names=NAMES)
        print(
            f"{label:44} {kind:5} {fmt(r['max_ulp']):>9} {fmt(r['mean_ulp']):>9} "
            f"{fmt(r['max_hyb']):>9} {fmt(r['mean_hyb']):>9}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50000, help="float32 inputs per range (float16 is exhaustive)")
    parser.add_argument("--only", default="", help="comma-separated function names of part 1")
    parser.add_argument("--no-bugs", action="store_true", help="skip part 2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"numpy {np.__version__}, scipy {scipy.__version__}, torch {torch.__version__} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()})\n"
    )
    started = time.perf_counter()
    float16_paths()
    print()
    library_table(args.n, {s for s in args.only.split(",") if s})
    if not args.no_bugs:
        print()
        bug_table(args.n)
        print()
        float16_bug_table()
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
