"""Planted-bug variants of the reference q4_0 x q8_1 matmul (:mod:`acceptance.formats.quant_kernels`): the
classic bugs of such kernels, for the mutation suite (every one must fail). The arithmetic is the reference's, with
one thing wrong in each (see that module's docstring for the four)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from acceptance.formats.quant import QK
from acceptance.formats.quant_kernels import unpack_q4_0, unpack_q8_1


def _variant(
    w: torch.Tensor,
    a: torch.Tensor,
    *,
    nibble_swap: bool = False,
    zero_point: float = 8.0,
    neighbour_scale: bool = False,
) -> torch.Tensor:
    wf = unpack_q4_0(w)
    af = unpack_q8_1(a)
    if wf.codes.shape[1] != af.q.shape[1]:
        raise ValueError(
            f"w has K = {wf.codes.shape[1] * QK} (q4_0) but a has K = {af.q.shape[1] * QK} (q8_1); they must match"
        )
    if w.device != a.device:
        raise ValueError(f"w is on {w.device} but a is on {a.device}")
    codes = wf.codes
    if nibble_swap:
        codes = torch.cat([codes[..., 16:], codes[..., :16]], dim=-1)
    d4 = wf.d
    if neighbour_scale:
        if d4.shape[1] < 2:
            raise ValueError("neighbour_scale needs at least 2 blocks (K >= 64)")
        d4 = d4.clone()
        d4[:, 0] = d4[:, 1]
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


def matmul_q4_0_q8_1_nibble_swap(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Bug: nibble order swapped (high nibble of qs[j] taken as element j, low as j+16)."""
    return _variant(w, a, nibble_swap=True)


def matmul_q4_0_q8_1_zero_point_forgotten(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Bug: the zero point 8 forgotten in the folded correction: d4 * (sumi * d8 - s8)."""
    return _variant(w, a, zero_point=1.0)


def matmul_q4_0_q8_1_s_term_dropped(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Bug: the s8 correction dropped: d4 * sumi * d8 (codes used as unsigned 0..15)."""
    return _variant(w, a, zero_point=0.0)


def matmul_q4_0_q8_1_neighbour_scale(w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Bug: block 0 of every weight row scaled with the d4 of block 1 (needs K >= 64)."""
    return _variant(w, a, neighbour_scale=True)


#: The planted-bug variants by name, each ``fn(w, a) -> float32 (M, N)``.
BUGS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "nibble_swap": matmul_q4_0_q8_1_nibble_swap,
    "zero_point_forgotten": matmul_q4_0_q8_1_zero_point_forgotten,
    "s_term_dropped": matmul_q4_0_q8_1_s_term_dropped,
    "neighbour_scale": matmul_q4_0_q8_1_neighbour_scale,
}
