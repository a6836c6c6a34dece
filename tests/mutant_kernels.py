"""More kernels for the mutation suite: real techniques that round differently from the baseline (the gate must
pass them) and bugs that sit just beyond what the rules allow (the gate must fail them).

Every function follows the callable contract ``fn(*tensors, **params)``, so a spec under ``mutation_specs/``
names it as ``../mutant_kernels.py:<name>``. The baselines the specs share with ``mutants.py`` (torch's
matmul, index_add, row sum, softmax, GELU, layer norm) are named from there; the others live here. The
oracle of every spec is its baseline run on float64 inputs (the default).

Fused multiply-add. Torch has no elementwise FMA on CPU, so :func:`fma` computes ``a*b + c`` rounded once
to the dtype of ``a`` exactly: the product of two float32 (or 16-bit) values is exact in float64 (at most
48 significant bits), TwoSum gives the float64 sum ``s`` and its exact error ``err``, and rounding to odd
(keep ``s`` when ``err == 0`` or ``s`` is odd, else step one ulp towards ``err``) at a precision of at least
p + 2 bits followed by one round-to-nearest-even to p bits is the correctly rounded result (Boldo and
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE TC
2008). float32 results round to odd at 53 bits (float64); 16-bit results at 24 bits (float32).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------- fused multiply-add


def _step_to_odd(t: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to odd given the exact value ``t + residual``: kept when ``residual == 0`` or the last
    significand bit of ``t`` is 1, else moved one ulp of ``t``'s dtype towards ``residual``."""
    width = {torch.float64: torch.int64, torch.float32: torch.int32}[t.dtype]
    even = (t.view(width) & 1) == 0
    inf = torch.full_like(t, math.inf)
    toward = torch.where(residual > 0, inf, -inf)
    return torch.where((residual != 0) & even, torch.nextafter(t, toward), t)


def fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a*b + c rounded once (round to nearest even) to the dtype of ``a`` (float32, float16 or bfloat16);
    see the module docstring for the method. Tensors broadcast."""
    p = a.double() * b.double()  # exact
    c64 = c.double()
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)  # TwoSum: s + err == p + c exactly
    if a.dtype == torch.float32:
        return _step_to_odd(s, err).to(torch.float32)
    t = s.float()
    residual = (s - t.double()) + err  # s - t is exact; only the sign of the sum is used
    return _step_to_odd(t, residual).to(a.dtype)


def muladd(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Baseline: a*b + c as two operations in the dtype (the product rounded, then the sum)."""
    return a * b + c


def muladd_fused(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Legitimate: a*b + c as one fused multiply-add, rounded once (what a GPU's FFMA/HFMA gives)."""
    return fma(a, b, c)


#: A degree-8 polynomial: exp's Taylor coefficients 1/k!, k = 8..0 (highest first), rounded once to float32,
#: so that every role evaluates the same polynomial and the oracle sees only the evaluation's rounding.
POLY = tuple(float(torch.tensor(1.0 / math.factorial(k), dtype=torch.float32)) for k in range(8, -1, -1))


def horner(x: torch.Tensor) -> torch.Tensor:
    """Baseline: p(x) by Horner's rule, acc = acc*x + c_k, every product and sum rounded (no contraction)."""
    acc = torch.full_like(x, POLY[0])
    for c in POLY[1:]:
        acc = acc * x + c
    return acc


def horner_fma(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: p(x) by Horner's rule with every step acc = fma(acc, x, c_k) (what -ffp-contract=fast
    compiles the baseline's loop to on a GPU)."""
    acc = torch.full_like(x, POLY[0])
    for c in POLY[1:]:
        acc = fma(acc, x, torch.full_like(x, c))
    return acc


def dot_sequential(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Baseline: a @ b with each dot product summed in order of k, acc = acc + a_ik*b_kj, product and sum each
    rounded to the dtype (a reference kernel compiled without contraction)."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for k in range(a.shape[1]):
        acc = acc + a[:, k, None] * b[None, k, :]
    return acc


def dot_sequential_fma(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Legitimate: the same loop contracted, acc = fma(a_ik, b_kj, acc) in order of k."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for k in range(a.shape[1]):
        acc = fma(a[:, k, None].expand_as(acc), b[None, k, :].expand_as(acc), acc)
    return acc


# ----------------------------------------------------------------------------- reductions


def index_add_fp32_accumulate(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64) -> torch.Tensor:
    """Legitimate: the scatter accumulated in a float32 buffer and rounded to the dtype once at the end."""
    return torch.zeros(bins, dtype=torch.float32).index_add_(0, index, src.float()).to(src.dtype)


def index_add_random_order(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64) -> torch.Tensor:
    """Legitimate: atomic adds landing in a random order, a fresh permutation of the updates on every call
    (drawn from torch's global generator), so two runs on the same inputs may differ in the last bits."""
    perm = torch.randperm(index.numel())
    return torch.zeros(bins, dtype=src.dtype).index_add_(0, index[perm], src[perm])


def mean(x: torch.Tensor) -> torch.Tensor:
    """Baseline: the mean over the last dimension (torch's: the sum divided by n)."""
    return x.mean(dim=-1)


def mean_reciprocal(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: the mean as sum * (1/n), in a float32 accumulator: the float32 sum times the float32
    reciprocal of n (itself rounded, e.g. 1/7 = 0.142857149..., +4.5e-8 relative), rounded to the dtype."""
    n = x.shape[-1]
    return (x.float().sum(dim=-1) * torch.tensor(1.0 / n, dtype=torch.float32)).to(x.dtype)


def total(x: torch.Tensor) -> torch.Tensor:
    """Baseline: the sum of every element (torch's), as a one-element tensor (a global reduction's result
    buffer)."""
    return x.sum().reshape(1)


def total_two_stage(x: torch.Tensor, *, block: int = 1024) -> torch.Tensor:
    """Legitimate: a two-stage global sum, as a GPU grid does it: per-block partial sums over ``block``
    consecutive elements (the last block zero-padded), then one sum of the partials, all in the dtype."""
    pad = (-x.numel()) % block
    blocks = torch.cat([x.reshape(-1), x.new_zeros(pad)]).view(-1, block)
    return blocks.sum(dim=1).sum().reshape(1)


def row_sum_tree(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: a balanced binary tree over the last dimension (a warp-shuffle reduction), pairs of
    neighbours added level by level in the dtype, an odd level padded with a zero."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], dim=-1)
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def matmul_split_k3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Legitimate: split-K with 3 slices of K (uneven when 3 does not divide K): three float32 partial
    products, added in a float32 workspace, rounded to the dtype once."""
    parts = [x.float() @ y.float() for x, y in zip(a.chunk(3, dim=1), b.chunk(3, dim=0), strict=False)]
    return (parts[0] + parts[1] + parts[2]).to(a.dtype)


def matmul_kahan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Legitimate: dot products summed in order of k with Kahan compensation, in the dtype."""
    s = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    c = torch.zeros_like(s)
    for k in range(a.shape[1]):
        y = a[:, k, None] * b[None, k, :] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


# ----------------------------------------------------------------------------- elementwise


def exp(x: torch.Tensor) -> torch.Tensor:
    """Baseline: torch's exp."""
    return torch.exp(x)


def exp_flush_subnormal(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: exp with flush-to-zero: results below the dtype's smallest normal (1.18e-38 in float32,
    exp(x) for x < -87.3) are returned as 0, as a GPU with FTZ does."""
    y = torch.exp(x)
    return torch.where(y.abs() < torch.finfo(y.dtype).tiny, torch.zeros_like(y), y)


def divide(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Baseline: x / y, correctly rounded."""
    return x / y


def divide_reciprocal(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Legitimate: x * (1/y), the reciprocal rounded, then the product rounded (fast-math division, within
    1.5 ulp; CUDA documents 2 ulp for its fast single-precision division)."""
    return x * torch.reciprocal(y)


def softmax_inductor(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: softmax as Inductor's generated kernel computes it for a 16-bit input: upcast to float32,
    subtract the row max, exp as exp2((x - max) * log2 e) (how Triton lowers exp), sum, divide, round to
    the dtype once."""
    xf = x.float()
    e = torch.exp2((xf - xf.amax(dim=-1, keepdim=True)) * math.log2(math.e))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def transpose(x: torch.Tensor) -> torch.Tensor:
    """Baseline: a transposed contiguous copy."""
    return x.t().contiguous()


# ----------------------------------------------------------------------------- bugs


def layer_norm_scale_bias(x: torch.Tensor) -> torch.Tensor:
    """Bug: the normalised output scaled by 1.0001 (a constant off by 1e-4 relative: ~840-1680 float32 ulp,
    far inside MLU-OPS's 3e-3 diff1/diff2 for composite ops)."""
    return F.layer_norm(x, x.shape[-1:], eps=1e-5) * 1.0001


def transpose_via_accumulate(x: torch.Tensor) -> torch.Tensor:
    """Bug: a transpose that writes by adding into a zero-initialised buffer: 0.0 + (-0.0) = +0.0, so every
    negative zero comes out positive (1/x then flips from -inf to +inf)."""
    return torch.zeros(x.shape[1], x.shape[0], dtype=x.dtype).add_(x.t())


def exp_zero_below(x: torch.Tensor, *, cutoff: float = 1e-30) -> torch.Tensor:
    """Bug: exp that returns 0 where the result is below ``cutoff`` (1e-30, exp(x) for x < -69.08), although
    those results are normal float32 numbers (down to 1.18e-38): an underflow check at the wrong bound."""
    y = torch.exp(x)
    return torch.where(y < cutoff, torch.zeros_like(y), y)


def gelu_zero_tail(x: torch.Tensor, *, cutoff: float = 1e-6) -> torch.Tensor:
    """Bug: GELU that returns 0 where |GELU(x)| < ``cutoff`` (x below about -5.1): its negative tail is lost.

    The baseline's own tail bounds what a baseline-relative rule can see: torch's float32 erf form computes
    x/2 (1 + erf(x/sqrt 2)), which cancels: 1 + erf is a multiple of 2^-24 there, so the result is 57% off
    at x = -5.5, 0 from x = -5.54 down, and never nonzero below |x| 2^-25 ~ 1.6e-7 in magnitude; a cutoff
    of 1e-7 gives the baseline's bits exactly."""
    y = F.gelu(x)
    return torch.where(y.abs() < cutoff, torch.zeros_like(y), y)


def matmul_one_wrong_element(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: element [3, 5] of the product is computed with column 6 of b (an index slip in one tile's
    epilogue); every other element is right."""
    out = a.float() @ b.float()
    out[3, 5] = a[3].float() @ b[:, 6].float()
    return out.to(a.dtype)


def exp_truncating(x: torch.Tensor) -> torch.Tensor:
    """Bug: exp computed in float32 and converted to float16 with round-toward-zero (__float2half_rz for
    __float2half_rn): faithful (every error below 1 ulp) but biased, 0.5 ulp towards zero on average.
    Clearing the 13 low significand bits of the float32 value truncates it to float16's 11 bits, exactly
    for results in float16's normal range."""
    y = torch.exp(x.float())
    return (y.view(torch.int32) & ~0x1FFF).view(torch.float32).to(x.dtype)


# ----------------------------------------------------------------------------- production approximations

#: Eigen's float32 tanh (``generic_fast_tanh_float``, used by XLA's CPU backend and ONNX Runtime): a
#: 13/6-degree rational function of x on [-c, c], c = 7.99881172180175781, x itself where |x| < 0.0004.
_EIGEN_ALPHA = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_EIGEN_BETA = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _fma(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """a * b + c for float32 a, b with one rounding to float32, as a fused multiply-add (the product is exact
    in float64; the float64 sum then rounds to float32 -- a double rounding only at float32 midpoints)."""
    return (a.double() * b.double() + c).float()


def _eigen_rational(x: torch.Tensor, clamp: float) -> torch.Tensor:
    """p(x)/q(x) of Eigen's tanh in float32 with fused multiply-adds (Horner in x^2, as Eigen's pmadd)."""
    x = x.float()
    xc = x.clamp(-clamp, clamp)
    x2 = xc * xc
    p = torch.full_like(xc, _EIGEN_ALPHA[0])
    for a in _EIGEN_ALPHA[1:]:
        p = _fma(p, x2, a)
    p = p * xc
    q = torch.full_like(xc, _EIGEN_BETA[0])
    for b in _EIGEN_BETA[1:]:
        q = _fma(q, x2, b)
    return torch.where(x.abs() < 0.0004, x, p / q)


def tanh_eigen(x: torch.Tensor) -> torch.Tensor:
    """Legitimate: Eigen's float32 rational tanh, clamped at |x| = 7.9988 (~4.2-4.7 ulp at the oracle, the
    accuracy XLA and ONNX Runtime ship), rounded to the dtype."""
    return _eigen_rational(x, 7.99881172180175781).to(x.dtype)


def tanh_rational_unclamped(x: torch.Tensor) -> torch.Tensor:
    """Bug: the same rational function clamped at |x| = 8.4 instead of 7.9988: past that point p/q
    crosses 1, so tanh(x) for |x| ~ 8-9 comes out beyond +-1 (a few ulp from the oracle, within the float32
    floor, but outside the function's range)."""
    return _eigen_rational(x, 8.4).to(x.dtype)


def sigmoid_flush_tail(x: torch.Tensor) -> torch.Tensor:
    """Bug: a sigmoid that returns exactly 0 below x = -16 (where the true value is ~1.1e-7), as a
    vectorized approximation with a too-early cut-off does."""
    y = torch.sigmoid(x.float())
    return torch.where(x < -16, torch.zeros_like(y), y).to(x.dtype)


def sdpa_exp2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Legitimate: attention with the softmax of a flash kernel, in float32: scores pre-multiplied by
    log2(e) (one rounded product), exp2 of the max-shifted scores through a fast approximation that truncates
    toward zero (every weight at most its correctly rounded value: magnitudes shrink by a fraction of an ulp
    per weight, as the hardware ex2.approx does), then the weighted sum divided by the sum of the weights."""
    scale = q.shape[-1] ** -0.5 * 1.4426950408889634  # 1/sqrt(E) * log2(e), folded as flash kernels fold it
    s = (q.float() @ k.float().transpose(-2, -1)) * torch.tensor(scale, dtype=torch.float32)
    t = s - s.amax(dim=-1, keepdim=True)
    p64 = torch.exp2(t.double())
    p = p64.float()
    p = torch.where(p.double() > p64, torch.nextafter(p, torch.zeros_like(p)), p)  # toward zero
    return ((p @ v.float()) / p.sum(dim=-1, keepdim=True)).to(q.dtype)


def _fresh_order(n: int) -> torch.Tensor:
    """A permutation of range(n) from a generator seeded by the operating system: a different order on every
    call and every run, whatever seeds the runner sets (the order of a GPU's atomic updates)."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    return torch.randperm(n, generator=gen)


def index_add_any_order(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Legitimate: ``x.index_add(dim, index, source)`` with the updates applied in a fresh random order."""
    perm = _fresh_order(index.numel())
    return x.index_add(dim, index[perm], source.index_select(dim, perm))


def scatter_add_any_order(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Legitimate: ``x.scatter_add(dim, index, src)`` (dim 0) with the rows of updates applied in a fresh
    random order."""
    perm = _fresh_order(index.shape[0])
    return x.scatter_add(dim, index[perm], src[perm])
