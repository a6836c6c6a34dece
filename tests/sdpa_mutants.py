"""Attention kernels for the mutation suite's ``sdpa`` specs (``mutation_specs/*sdpa*``): a flash kernel's
legitimate online softmax, and the bugs an attention kernel ships with. Each follows the callable contract
``fn(q, k, v, is_causal=False)`` of ``torch.nn.functional.scaled_dot_product_attention`` on tensors
``[B, H, L, E]`` (q) and ``[B, H, S, E]`` (k, v), and computes in float32."""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634
#: Keys per block of the online softmax (FlashAttention-2 uses 64 or 128 on its GPUs).
BLOCK = 64


def _causal(scores: torch.Tensor, shift: int = 0) -> torch.Tensor:
    """``scores`` with key j masked for query i where j > i + shift (shift 0: the causal mask of
    ``is_causal=True``, top-left aligned as torch's)."""
    L, S = scores.shape[-2:]
    keep = torch.ones(L, S, dtype=torch.bool).tril(diagonal=shift)
    return scores.masked_fill(~keep, float("-inf"))


def _plain(q, k, v, is_causal: bool, scale: float, dim: int = -1, shift: int = 0) -> torch.Tensor:
    s = (q.float() @ k.float().transpose(-2, -1)) * scale
    if is_causal:
        s = _causal(s, shift)
    return (torch.softmax(s, dim=dim) @ v.float()).to(q.dtype)


def sdpa_online(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Legitimate: FlashAttention's forward in float32: keys in blocks of :data:`BLOCK`, scores scaled by
    1/sqrt(E)·log2(e) (one rounded product), a running row max m, exp2 of the shifted scores, the running sum l
    and the output accumulator rescaled by exp2(m_old − m_new) at every block, one division by l at the end."""
    scale = torch.tensor(q.shape[-1] ** -0.5 * LOG2E, dtype=torch.float32)
    qf, kf, vf = q.float(), k.float(), v.float()
    L, S = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    ell = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, S, BLOCK):
        s = (qf @ kf[..., start : start + BLOCK, :].transpose(-2, -1)) * scale
        if is_causal:
            cols = torch.arange(start, min(start + BLOCK, S))
            s = s.masked_fill(cols[None, :] > torch.arange(L)[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp2(s - safe)
        alpha = torch.exp2(torch.where(torch.isinf(m), torch.full_like(m, float("-inf")), m - safe))
        ell = ell * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ vf[..., start : start + BLOCK, :]
        m = m_new
    return (acc / ell).to(q.dtype)


def sdpa_scale_in_bfloat16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    """Bug: the softmax scale 1/sqrt(E) held in bfloat16 (relative error up to 2^-9; exact where E is a power of 4)."""
    scale = float(torch.tensor(1 / math.sqrt(q.shape[-1]), dtype=torch.bfloat16))
    return _plain(q, k, v, is_causal, scale)


def sdpa_scale_by_e(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    """Bug: scores scaled by 1/E instead of 1/sqrt(E)."""
    return _plain(q, k, v, is_causal, 1 / q.shape[-1])


def sdpa_softmax_over_queries(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    """Bug: the softmax normalised over the query axis (dim −2) instead of the keys."""
    return _plain(q, k, v, is_causal, q.shape[-1] ** -0.5, dim=-2)


def sdpa_ignores_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    """Bug: ``is_causal`` ignored: every query attends to every key."""
    return _plain(q, k, v, False, q.shape[-1] ** -0.5)


def sdpa_causal_off_by_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    """Bug: the causal mask lets query i see key i + 1 (the diagonal offset off by one)."""
    return _plain(q, k, v, is_causal, q.shape[-1] ** -0.5, shift=1)
