"""Mutant implementations for the mutation suite: known bugs that the gate must fail, and legitimate
variants (different rounding, same accuracy) it must pass.

Every implementation follows the callable contract ``fn(*tensors, **params)``, so a spec can name it as
``mutants.py:<name>`` (a path relative to the spec) and a library call can pass it to
:func:`acceptance.dual_delta`. :data:`CASES` pairs each mutant with its trusted baseline, its inputs and the
expected verdict for the library-level suite (``test_mutations.py``, dual-delta alone). The spec-level suite
(``mutation_specs/``, run by ``test_gate_end_to_end.py`` and over 20 seeds by ``test_mutation_seeds.py``)
uses these kernels and those of ``mutant_kernels.py`` (fused multiply-add, reductions in other orders, flush
to zero, and bugs at the edge of the rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------- baselines


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Trusted matmul (torch's; on CPU, float16 accumulates in float32 and rounds once)."""
    return torch.matmul(a, b)


def index_add(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64) -> torch.Tensor:
    """out[index[i]] += src[i] into ``bins`` zeros, in the order of i (torch's CPU index_add_, which for
    16-bit dtypes rounds the running sum to the dtype after every update)."""
    return torch.zeros(bins, dtype=src.dtype).index_add_(0, index, src)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """x * Phi(x), torch's erf form."""
    return F.gelu(x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension (torch's: max-subtracted, float32 internally)."""
    return torch.softmax(x, dim=-1)


def layer_norm(x: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-5) over the last dimension, no affine (torch's)."""
    return F.layer_norm(x, x.shape[-1:], eps=1e-5)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension (torch's)."""
    return x.sum(dim=-1)


# ----------------------------------------------------------------------------- bugs


def matmul_fp16_accumulate(a: torch.Tensor, b: torch.Tensor, *, chunk: int = 16) -> torch.Tensor:
    """Bug: 16-long dot products are exact-ish in float32, but the running sum over K
    lives in a float16 register (rounded after every chunk): error ~ sqrt(K/16)·u."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k in range(0, a.shape[1], chunk):
        acc = (acc.float() + a[:, k : k + chunk].float() @ b[k : k + chunk].float()).to(torch.float16)
    return acc


def matmul_dropped_tail(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: a kernel vectorised by 8 along K that forgets the last K % 8 elements."""
    k8 = a.shape[1] - a.shape[1] % 8
    return (a[:, :k8].float() @ b[:k8].float()).to(a.dtype)


def matmul_wrong_row(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: an off-by-one row index; the last output row is computed from row M-2 of a."""
    out = a.float() @ b.float()
    out[-1] = a[-2].float() @ b.float()
    return out.to(a.dtype)


def matmul_scale_bias(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: a systematic +0.1% scale (e.g. a wrong dequantisation scale), about 2 float16 ulps."""
    return (a.float() @ b.float() * 1.001).to(a.dtype)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation of GELU; differs from the erf form by up to 4.7e-4 near |x| = 2.
    A bug in float32 (thousands of ulps); inside the rounding in bfloat16 (see CASES)."""
    return F.gelu(x, approximate="tanh")


def gelu_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """Bug: the crude x·sigmoid(1.702x) GELU, off by up to ~0.02."""
    return (x.float() * torch.sigmoid(1.702 * x.float())).to(x.dtype)


def index_add_lost_updates(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64, wave: int = 32) -> torch.Tensor:
    """Bug: a read-modify-write race. Updates run in waves of ``wave`` concurrent threads;
    where two threads of a wave hit the same bin, only the last write survives."""
    out = torch.zeros(bins, dtype=src.dtype)
    for s in range(0, index.numel(), wave):
        i, v = index[s : s + wave], src[s : s + wave]
        out.index_put_((i,), out[i] + v, accumulate=False)
    return out


def index_add_racy_tail(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64, wave: int = 32) -> torch.Tensor:
    """Bug: the body (whole waves of ``wave`` updates) uses atomic adds, but the tail of ``U % wave`` updates
    does a plain read-modify-write: where two tail updates hit the same bin, only the last write survives.
    With a tail of 8 updates into 64 bins that happens in 1 - prod_{k<8}(1 - k/64) = 36 % of the trials;
    the other trials are exactly the baseline's scatter."""
    body = index.numel() - index.numel() % wave
    out = torch.zeros(bins, dtype=src.dtype).index_add_(0, index[:body], src[:body])
    i, v = index[body:], src[body:]
    return out.index_put_((i,), out[i] + v, accumulate=False)


def softmax_no_max(x: torch.Tensor) -> torch.Tensor:
    """Bug: no max subtraction, exp and sum in the input dtype; for float16 inputs in [5, 10]
    the row sum overflows to inf and every probability becomes 0."""
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def layer_norm_eps_outside(x: torch.Tensor) -> torch.Tensor:
    """Bug: (x - mean) / (sqrt(var) + eps) instead of / sqrt(var + eps)."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / (var.sqrt() + 1e-5)


def layer_norm_one_pass(x: torch.Tensor) -> torch.Tensor:
    """Bug: one-pass variance E[x²] - E[x]², which cancels catastrophically for inputs far from 0."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + 1e-5)


# ----------------------------------------------------------------------------- legitimate variants


def matmul_split_k(a: torch.Tensor, b: torch.Tensor, *, splits: int = 4) -> torch.Tensor:
    """Split-K: float32 partial products over K/splits slices, combined in float32, rounded once."""
    parts = [x.float() @ y.float() for x, y in zip(a.chunk(splits, dim=1), b.chunk(splits, dim=0), strict=False)]
    return torch.stack(parts).sum(dim=0).to(a.dtype)


def matmul_flush_subnormal_products(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Flush-to-zero: products below the output dtype's smallest normal are dropped
    before a float32 accumulation, as a float16 FMA pipeline with FTZ would."""
    tiny = torch.finfo(a.dtype).tiny
    products = a.float()[:, :, None] * b.float()[None, :, :]
    products = torch.where(products.abs() < tiny, torch.zeros_like(products), products)
    return products.sum(dim=1).to(a.dtype)


def count_subnormal_products(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many products |a_ik b_kj| fall below the dtype's smallest normal (what FTZ flushes)."""
    return int(((a.float()[:, :, None] * b.float()[None, :, :]).abs() < torch.finfo(a.dtype).tiny).sum())


def matmul_reversed_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same dot products summed in the reverse order of K."""
    return a.flip(1) @ b.flip(0)


def matmul_pairwise_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Dot products summed as a balanced binary tree over K, in the input dtype."""
    p = a[:, :, None] * b[None, :, :]  # (M, K, N)
    while p.shape[1] > 1:
        if p.shape[1] % 2:
            p = torch.cat([p, torch.zeros_like(p[:, :1])], dim=1)
        p = p[:, 0::2] + p[:, 1::2]
    return p[:, 0]


def index_add_shuffled(index: torch.Tensor, src: torch.Tensor, *, bins: int = 64) -> torch.Tensor:
    """Atomic adds landing in another order (a fixed shuffle of the updates)."""
    perm = torch.randperm(index.numel(), generator=torch.Generator().manual_seed(1234))
    return torch.zeros(bins, dtype=src.dtype).index_add_(0, index[perm], src[perm])


def softmax_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """exp(x - logsumexp(x)) in float32, rounded once to the input dtype."""
    xf = x.float()
    return torch.exp(xf - torch.logsumexp(xf, dim=-1, keepdim=True)).to(x.dtype)


def row_sum_kahan(x: torch.Tensor) -> torch.Tensor:
    """Kahan-compensated sum over the last dimension, in the input dtype (more accurate)."""
    s = torch.zeros(x.shape[:-1], dtype=x.dtype)
    c = torch.zeros_like(s)
    for k in range(x.shape[-1]):
        y = x[..., k] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


def row_sum_reversed(x: torch.Tensor) -> torch.Tensor:
    """The same sum over the reversed last dimension."""
    return x.flip(-1).sum(dim=-1)


# ----------------------------------------------------------------------------- inputs


def matmul_inputs(m: int, k: int, n: int) -> Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """Standard normal a (m, k) and b (k, n)."""
    return lambda g: (torch.randn(m, k, generator=g), torch.randn(k, n, generator=g))


def small_matmul_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b (32x128, 128x32) standard normal with 30% of the entries scaled by 1e-3, so that
    ~10% of the float16 products a_ik b_kj are subnormal (what flush-to-zero removes)."""
    a, b = torch.randn(32, 128, generator=g), torch.randn(128, 32, generator=g)
    a = torch.where(torch.rand(a.shape, generator=g) < 0.3, a * 1e-3, a)
    b = torch.where(torch.rand(b.shape, generator=g) < 0.3, b * 1e-3, b)
    return a, b


def index_add_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """2048 updates of standard normal values into 64 bins (many collisions per wave)."""
    return torch.randint(0, 64, (2048,), generator=g), torch.randn(2048, generator=g)


def sparse_tail_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """65544 updates of U(0, 1) values into 64 bins: 2048 whole waves of 32 and a tail of 8."""
    return torch.randint(0, 64, (65544,), generator=g), torch.rand(65544, generator=g)


def uniform_inputs(shape: tuple[int, ...], low: float, high: float) -> Callable[[torch.Generator], torch.Tensor]:
    """Uniform values in [low, high)."""
    return lambda g: low + (high - low) * torch.rand(shape, generator=g)


# ----------------------------------------------------------------------------- the suite


@dataclass(frozen=True)
class Case:
    """One mutant run: ``expected`` is "fail" for a bug, "pass" for a legitimate variant."""

    name: str
    kind: str  # "bug" | "legit"
    impl: Callable
    baseline: Callable
    inputs: Callable[[torch.Generator], object]
    dtype: torch.dtype
    trials: int
    what: str

    @property
    def expected(self) -> str:
        return "fail" if self.kind == "bug" else "pass"


CASES: tuple[Case, ...] = (
    # bugs: must fail
    Case(
        "fp16 accumulation, K=4096",
        "bug",
        matmul_fp16_accumulate,
        matmul,
        matmul_inputs(8, 4096, 8),
        torch.float16,
        50,
        "running sum over K kept in float16",
    ),
    Case(
        "dropped K tail, K=67",
        "bug",
        matmul_dropped_tail,
        matmul,
        matmul_inputs(16, 67, 16),
        torch.float16,
        50,
        "last K % 8 = 3 products ignored",
    ),
    Case(
        "one wrong row",
        "bug",
        matmul_wrong_row,
        matmul,
        matmul_inputs(64, 64, 64),
        torch.float16,
        50,
        "row M-1 reads row M-2 of a",
    ),
    Case(
        "0.1% scale bias",
        "bug",
        matmul_scale_bias,
        matmul,
        matmul_inputs(64, 64, 64),
        torch.float16,
        50,
        "result x 1.001 (~2 float16 ulps)",
    ),
    Case(
        "tanh GELU in float32",
        "bug",
        gelu_tanh,
        gelu,
        uniform_inputs((4096,), -5, 5),
        torch.float32,
        50,
        "approximation error 4.7e-4 >> float32 rounding",
    ),
    Case(
        "sigmoid GELU in float16",
        "bug",
        gelu_sigmoid,
        gelu,
        uniform_inputs((4096,), -5, 5),
        torch.float16,
        50,
        "crude x*sigmoid(1.702x), error ~2e-2",
    ),
    Case(
        "lost atomic updates",
        "bug",
        index_add_lost_updates,
        index_add,
        index_add_inputs,
        torch.float32,
        50,
        "colliding updates in a wave of 32 overwrite each other",
    ),
    Case(
        "rare lost atomic updates",
        "bug",
        index_add_racy_tail,
        index_add,
        sparse_tail_inputs,
        torch.float32,
        20,
        "an update of the 8-update tail lost in ~1/3 of the trials, the others exact",
    ),
    Case(
        "softmax without max-subtraction",
        "bug",
        softmax_no_max,
        softmax,
        uniform_inputs((16, 256), 5, 10),
        torch.float16,
        50,
        "float16 row sum of exp(x) overflows to inf",
    ),
    Case(
        "layer norm eps outside sqrt",
        "bug",
        layer_norm_eps_outside,
        layer_norm,
        uniform_inputs((32, 256), -2, 2),
        torch.float32,
        50,
        "/(sqrt(var)+eps) instead of /sqrt(var+eps)",
    ),
    Case(
        "layer norm one-pass variance",
        "bug",
        layer_norm_one_pass,
        layer_norm,
        uniform_inputs((32, 256), 100, 110),
        torch.float32,
        50,
        "E[x^2]-E[x]^2 cancels for inputs near 100",
    ),
    # legitimate variants: must pass
    Case(
        "split-K (4 float32 partials)",
        "legit",
        matmul_split_k,
        matmul,
        matmul_inputs(32, 1024, 32),
        torch.float16,
        50,
        "partial sums combined in float32",
    ),
    Case(
        "flush-to-zero of subnormal products",
        "legit",
        matmul_flush_subnormal_products,
        matmul,
        small_matmul_inputs,
        torch.float16,
        50,
        "~10% of products below 6.1e-5 dropped",
    ),
    Case(
        "reversed K order, float32",
        "legit",
        matmul_reversed_k,
        matmul,
        matmul_inputs(16, 1024, 16),
        torch.float32,
        50,
        "same sums, reverse order",
    ),
    Case(
        "pairwise K order, float32",
        "legit",
        matmul_pairwise_k,
        matmul,
        matmul_inputs(16, 1024, 16),
        torch.float32,
        50,
        "tree summation over K",
    ),
    Case(
        "shuffled atomic order",
        "legit",
        index_add_shuffled,
        index_add,
        index_add_inputs,
        torch.float32,
        50,
        "the same updates in another order",
    ),
    Case(
        "tanh GELU in bfloat16",
        "legit",
        gelu_tanh,
        gelu,
        uniform_inputs((4096,), -5, 5),
        torch.bfloat16,
        50,
        "approximation error below bfloat16 rounding",
    ),
    Case(
        "softmax via logsumexp",
        "legit",
        softmax_logsumexp,
        softmax,
        uniform_inputs((16, 256), 5, 10),
        torch.float16,
        50,
        "exp(x - logsumexp x) in float32",
    ),
    Case(
        "Kahan row sum, float32",
        "legit",
        row_sum_kahan,
        row_sum,
        uniform_inputs((32, 1024), -1, 1),
        torch.float32,
        50,
        "compensated summation (more accurate)",
    ),
    Case(
        "reversed row sum, float32",
        "legit",
        row_sum_reversed,
        row_sum,
        uniform_inputs((32, 1024), -1, 1),
        torch.float32,
        50,
        "same sum, reverse order",
    ),
)
