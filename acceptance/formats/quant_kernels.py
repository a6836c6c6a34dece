"""Reference q4_0 x q8_1 quantized matmul, as llama.cpp's GPU kernels compute it (the test suite holds its
planted-bug variants).

Inputs are packed GGML blocks (see :mod:`acceptance.formats.quant` for the byte layouts):

- ``w``: uint8 tensor (M, K/32 * 18), q4_0 weights, one row per output row;
- ``a``: uint8 tensor (N, K/32 * 36), q8_1 activations, one row per output column;

and the output is float32 (M, N), ``out[m, n] = sum over blocks b of``::

    d4 * (sumi * d8 - 8 * s8)

with, for weight row m and activation row n in block b: ``d4`` the weight's fp16
scale, ``d8`` and ``s8`` the activation's fp16 ``d`` and ``s`` (widened to
float32), and ``sumi = sum_j c[j] * q[j]`` over the 32 elements, where c in 0..15
are the *unsigned* nibble codes (low nibble of qs[j] is element j, high nibble
element j+16) and q the int8 activation codes. This is llama.cpp's
``vec_dot_q4_0_q8_1_impl`` (ggml-cuda/vecdotq.cuh; also SYCL): the q4_0 zero
point 8 is not subtracted from each code but folded into ``s8 = d8 * sum(q)``
(stored by the q8_1 quantizer), since

    d4 * sum_j (c[j] - 8) * d8 * q[j]  =  d4 * (d8 * sumi - 8 * d8 * sum(q)).

The identity is exact only with ``s8 = D8 * sum(q)``; the stored s8 is
``fp16(d8_float32 * sum(q))``, so the kernel differs from dequantize-then-matmul
by up to ``8 * |d4| * |s8 - D8 * sum(q)|`` per block (bound below).

Evaluation: ``sumi`` is an integer (|sumi| <= 32 * 15 * 128 = 61440 < 2**24), formed
here with a float32 matmul, which is exact for such integers in any summation
order, TF32 included (codes need at most 8 significant bits). The block term is
evaluated in float32 as written above, then summed over blocks in float32. The
CUDA mmvq kernel splits each block over QI4_0/vdr = 2 threads, each subtracting
``(8*vdr/QI4_0) * s8 = 4 * s8``; that is the same formula up to float32
reassociation. (llama.cpp's CPU backend multiplies q4_0 by q8_0, not q8_1.)

Error bound against dequantize-then-matmul in exact arithmetic (u = 2**-24,
gamma_k = k*u / (1 - k*u), D4, D8, S8 the stored fp16 fields widened to float32,
sq = sum(q) over the block, nb = K/32, s8 written by the CPU-reference quantizer
of :func:`acceptance.formats.quant.quantize`)::

    |out - sum_j deq(w)_j * deq(a)_j|
        <=  sum_b |D4| * ( 8 * E_s  +  gamma_{nb+2} * (|sumi * D8| + 8 * |S8|) )
    E_s  =  (2**-11 + 2**-23) * |S8|  +  2**-11 * |D8 * sq|  +  2**-24 * (1 + |sq|)

E_s bounds |S8 - D8 * sq|: with t = fl32(d8 * sq), S8 = fp16(t), D8 = fp16(d8),
|S8 - t| <= 2**-11 |S8| + 2**-25 (round to nearest fp16, 2**-25 for subnormals),
|t - d8 * sq| <= 2**-24 |t|, and |sq| * |d8 - D8| <= |sq| * (2**-11 |D8| + 2**-25).
The gamma term is the float32 evaluation: 3 roundings per block term and nb - 1
additions in any order. On zero-mean Gaussian data with K = 256 the reference
uses at most about a third of this bound.

The test suite plants the classic mistakes of such a kernel in copies of it (``tests/quant_mutants.py``):

- ``nibble_swap``: the high nibble is read as element j and the low one as j+16;
- ``zero_point_forgotten``: the correction subtracts ``s8`` instead of ``8 * s8``
  (the zero point 8 forgotten, as in a kernel adapted from a zero-point-1 format);
- ``s_term_dropped``: the correction term is dropped: ``d4 * sumi * d8``, i.e. the
  codes are used as unsigned 0..15;
- ``neighbour_scale``: block 0 of every weight row is scaled with the d4 of block 1
  (an off-by-one block index when loading the scale).

Every function takes and returns torch tensors on any device (CPU or CUDA) and
follows the ``fn(*tensors, **params)`` contract of the runner.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .quant import FORMATS, QK

__all__ = [
    "Q4_0Fields",
    "Q8_1Fields",
    "unpack_q4_0",
    "unpack_q8_1",
    "matmul_q4_0_q8_1",
]

_Q4_0 = FORMATS["q4_0"].block_bytes  # 18
_Q8_1 = FORMATS["q8_1"].block_bytes  # 36


class Q4_0Fields(NamedTuple):
    """q4_0 blocks decoded: ``d`` float32 (M, nb); ``codes`` uint8 (M, nb, 32) in 0..15, element order."""

    d: torch.Tensor
    codes: torch.Tensor


class Q8_1Fields(NamedTuple):
    """q8_1 blocks decoded: ``d``, ``s`` float32 (N, nb); ``q`` int8 (N, nb, 32)."""

    d: torch.Tensor
    s: torch.Tensor
    q: torch.Tensor


def _blocks(t: torch.Tensor, block_bytes: int, name: str, fmt: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor of packed {fmt} blocks, got {type(t).__name__}")
    if t.dtype != torch.uint8:
        raise ValueError(f"{name}: packed {fmt} blocks must be uint8, got {t.dtype}")
    if t.dim() != 2 or t.shape[1] % block_bytes:
        raise ValueError(
            f"{name}: packed {fmt} blocks must be 2-D (rows, K/32 * {block_bytes}), got shape {tuple(t.shape)}"
        )
    return t.contiguous().reshape(t.shape[0], t.shape[1] // block_bytes, block_bytes)


def _f16(b: torch.Tensor, start: int) -> torch.Tensor:
    """The fp16 field at byte ``start`` of each block, widened to float32 (little-endian host)."""
    return b[..., start : start + 2].contiguous().view(torch.float16)[..., 0].float()


def unpack_q4_0(w: torch.Tensor) -> Q4_0Fields:
    """Decode q4_0 blocks (uint8 (M, nb*18)): d and the unsigned codes, low nibbles first."""
    b = _blocks(w, _Q4_0, "w", "q4_0")
    qs = b[..., 2:]
    return Q4_0Fields(_f16(b, 0), torch.cat([qs & 0x0F, qs >> 4], dim=-1))


def unpack_q8_1(a: torch.Tensor) -> Q8_1Fields:
    """Decode q8_1 blocks (uint8 (N, nb*36)): d, s and the int8 codes."""
    b = _blocks(a, _Q8_1, "a", "q8_1")
    return Q8_1Fields(_f16(b, 0), _f16(b, 2), b[..., 4:].contiguous().view(torch.int8))


def _matmul(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    wf = unpack_q4_0(w)
    af = unpack_q8_1(a)
    if wf.codes.shape[1] != af.q.shape[1]:
        raise ValueError(
            f"w has K = {wf.codes.shape[1] * QK} (q4_0) but a has K = {af.q.shape[1] * QK} (q8_1); they must match"
        )
    if w.device != a.device:
        raise ValueError(f"w is on {w.device} but a is on {a.device}")
    codes, d4, zero_point = wf.codes, wf.d, 8.0
    m, nb = d4.shape
    n = af.d.shape[0]
    cw = codes.float()  # (M, nb, 32), exact
    qa = af.q.float()  # (N, nb, 32), exact
    out = torch.zeros(m, n, dtype=torch.float32, device=w.device)
    chunk = max(1, (1 << 22) // max(1, m * n))  # bounds the (chunk, M, N) temporaries
    for b0 in range(0, nb, chunk):
        sl = slice(b0, min(nb, b0 + chunk))
        sumi = torch.einsum("mbk,nbk->bmn", cw[:, sl], qa[:, sl])  # integers, exact in float32
        term = d4[:, sl].T[:, :, None] * (sumi * af.d[:, sl].T[:, None, :] - zero_point * af.s[:, sl].T[:, None, :])
        out += term.sum(dim=0)
    return out


def matmul_q4_0_q8_1(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Reference: out[m, n] = sum_b d4 * (sumi * d8 - 8 * s8), float32 (M, N); see the module docstring."""
    return _matmul(w, a)
