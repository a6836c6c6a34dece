"""Gradient kernels for the mutation suite: backward bugs the gate must fail and legitimate variants it must pass.

Forward callables follow ``fn(*tensors, **params)``; hand-written backwards follow a spec's ``impl_backward``
contract ``fn(dy, *inputs, **params) -> one gradient per backward.wrt entry``. Each bug is a slip a real
kernel makes (a dropped term, a narrow accumulator, a missing mask, a dropped tail); each variant computes the
same mathematics in another legitimate way (recomputation, float32 accumulation, another exact order, atomics).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------- forwards (trusted)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``F.layer_norm`` over the last dimension with an affine ``weight``, ``bias``."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps=eps)


def layer_norm_fp32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm computed in float32 and rounded once to the input dtype; its autograd gradients are float32
    reductions rounded once (torch's own bfloat16 CPU backward rounds dgamma's partial sums to bfloat16)."""
    return F.layer_norm(x.float(), x.shape[-1:], weight.float(), bias.float(), eps=eps).to(x.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x W^T + b`` (``F.linear``)."""
    return F.linear(x, weight, bias)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int = 1, padding: int = 0):
    """``F.conv2d`` (groups 1)."""
    return F.conv2d(x, weight, bias, stride=stride, padding=padding)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with scale 1/sqrt(E)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


# ----------------------------------------------------------------------------- layer norm backward


def _ln_parts(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float):
    """Float32 (xhat, rstd, g = dy * weight), mean and rstd recomputed from x (no saved activations)."""
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + eps)
    return (xf - mu) * rstd, rstd, dy.float() * weight.float()


def _ln_dx(xhat: torch.Tensor, rstd: torch.Tensor, g: torch.Tensor, *, mean_term: bool = True) -> torch.Tensor:
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), the mean(g) term optional (the bug drops it)."""
    centred = g - g.mean(-1, keepdim=True) if mean_term else g
    return rstd * (centred - xhat * (g * xhat).mean(-1, keepdim=True))


def ln_backward_recompute(dy, x, weight, bias, eps=1e-5):
    """Legitimate: mean and rstd recomputed from x in float32 instead of saved by the forward; float32
    reductions, each gradient rounded once."""
    xhat, rstd, g = _ln_parts(dy, x, weight, eps)
    dyf = dy.float()
    return _ln_dx(xhat, rstd, g).to(x.dtype), (dyf * xhat).sum(0).to(x.dtype), dyf.sum(0).to(x.dtype)


def ln_backward_no_mean(dy, x, weight, bias, eps=1e-5):
    """Bug: dx lacks the -mean(g) term (the gradient through the mean subtraction)."""
    xhat, rstd, g = _ln_parts(dy, x, weight, eps)
    dyf = dy.float()
    dx = _ln_dx(xhat, rstd, g, mean_term=False)
    return dx.to(x.dtype), (dyf * xhat).sum(0).to(x.dtype), dyf.sum(0).to(x.dtype)


def ln_backward_dgamma_bf16(dy, x, weight, bias, eps=1e-5, chunk=8):
    """Bug: dgamma = sum over rows of dy * xhat kept in a bfloat16 accumulator, rounded after every ``chunk``
    rows: over M rows the error grows ~ sqrt(M / chunk) bf16 roundings of the running sum."""
    xhat, rstd, g = _ln_parts(dy, x, weight, eps)
    prod = dy.float() * xhat
    acc = torch.zeros(x.shape[-1], dtype=torch.bfloat16)
    for s in range(0, x.shape[0], chunk):
        acc = (acc.float() + prod[s : s + chunk].sum(0)).to(torch.bfloat16)
    return _ln_dx(xhat, rstd, g).to(x.dtype), acc.to(x.dtype), dy.float().sum(0).to(x.dtype)


def ln_backward_atomic_dgamma(dy, x, weight, bias, eps=1e-5):
    """Legitimate (not deterministic): dgamma and dbeta as float32 atomics, the rows landing in a fresh random
    order on every call (a permutation of the rows, then a float32 sum)."""
    xhat, rstd, g = _ln_parts(dy, x, weight, eps)
    order = torch.randperm(x.shape[0])
    dyf = dy.float()[order]
    return _ln_dx(xhat, rstd, g).to(x.dtype), (dyf * xhat[order]).sum(0).to(x.dtype), dyf.sum(0).to(x.dtype)


# ----------------------------------------------------------------------------- softmax backward


class _SoftmaxNoDot(torch.autograd.Function):
    """Softmax over the last dimension whose backward forgets the -sum(dy * y) term: dx = y * dy."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return y * dy


def softmax_backward_no_dot(x: torch.Tensor) -> torch.Tensor:
    """Bug: correct forward, backward without the sum(dy * y) term (differentiated by autograd)."""
    return _SoftmaxNoDot.apply(x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Trusted softmax over the last dimension."""
    return torch.softmax(x, dim=-1)


# ----------------------------------------------------------------------------- attention backward


def _attention_backward(dy, q, k, v, is_causal, *, scale_twice=False, mask_in_ds=True):
    """Flash-style backward in float32 from recomputed probabilities: P = exp(S - lse), S = q k^T / sqrt(E)
    (causal positions masked), dv = P^T dy, dP = dy v^T, dS = P (dP - rowsum(dP P)), dq = dS k / sqrt(E),
    dk = dS^T q / sqrt(E). ``scale_twice``: 1/E instead of 1/sqrt(E) in dq and dk; ``mask_in_ds=False``:
    P is recomputed without the causal mask (the masked scores leak into dS)."""
    qf, kf, vf, dyf = q.float(), k.float(), v.float(), dy.float()
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = qf @ kf.transpose(-1, -2) * scale
    masked = s
    if is_causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
        masked = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(masked, dim=-1, keepdim=True)
    p = torch.exp((masked if mask_in_ds else s) - lse)
    dv = p.transpose(-1, -2) @ dyf
    dp = dyf @ vf.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    c = scale * scale if scale_twice else scale
    return (ds @ kf * c).to(q.dtype), (ds.transpose(-1, -2) @ qf * c).to(k.dtype), dv.to(v.dtype)


def attention_backward_recompute(dy, q, k, v, is_causal=False):
    """Legitimate: probabilities recomputed from q, k and the log-sum-exp in float32 (FlashAttention's way)."""
    return _attention_backward(dy, q, k, v, is_causal)


def attention_backward_scale_twice(dy, q, k, v, is_causal=False):
    """Bug: the softmax scale applied twice in dq and dk."""
    return _attention_backward(dy, q, k, v, is_causal, scale_twice=True)


def attention_backward_no_causal_mask(dy, q, k, v, is_causal=False):
    """Bug: the causal mask forgotten when P is recomputed for dS."""
    return _attention_backward(dy, q, k, v, is_causal, mask_in_ds=False)


# ----------------------------------------------------------------------------- linear and conv backward


def _linear_backward(dy, x, weight, *, all_batches: bool):
    """(dx, dW, db) of y = x W^T + b for x of shape (B, T, K), in float32, each rounded once; db sums dy over
    (B, T), or over T of the first batch only (``all_batches=False``, the bug)."""
    dyf, xf = dy.float(), x.float()
    dx = dyf @ weight.float()
    dw = dyf.reshape(-1, dy.shape[-1]).T @ xf.reshape(-1, x.shape[-1])
    db = dyf.sum((0, 1)) if all_batches else dyf[0].sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype), db.to(weight.dtype)


def linear_backward_fp32_dw(dy, x, weight, bias):
    """Legitimate: dW = dy^T x accumulated in float32 over the whole batch, rounded once."""
    return _linear_backward(dy, x, weight, all_batches=True)


def linear_backward_bias_one_batch(dy, x, weight, bias):
    """Bug: the bias gradient summed over the sequence but not over the batch."""
    return _linear_backward(dy, x, weight, all_batches=False)


def _conv_backward(dy, x, weight, stride, padding, tile, *, drop_tail: bool):
    """(dx, dW, db) of a 2-D convolution in float32: dW = sum over n and output positions l of
    dy[n, o, l] * cols[n, c, l] (``cols`` the unfolded x), taken over l in tiles of ``tile``; ``drop_tail``
    leaves out the last partial tile (the bug)."""
    dyf = dy.float()
    dx = torch.nn.grad.conv2d_input(x.shape, weight.float(), dyf, stride=stride, padding=padding)
    cols = F.unfold(x.float(), weight.shape[-2:], padding=padding, stride=stride)
    d = dyf.flatten(2)
    n_pos = d.shape[-1]
    stop = n_pos - n_pos % tile if drop_tail else n_pos
    dw = torch.zeros(weight.shape[0], cols.shape[1])
    for s in range(0, stop, tile):
        dw += torch.einsum("nol,ncl->oc", d[..., s : min(s + tile, stop)], cols[..., s : min(s + tile, stop)])
    return dx.to(x.dtype), dw.reshape(weight.shape).to(weight.dtype), d.sum((0, 2)).to(weight.dtype)


def conv_backward_tiled(dy, x, weight, bias, stride=1, padding=0):
    """Legitimate: dW summed tile by tile (16 output positions per tile) in float32, another exact order."""
    return _conv_backward(dy, x, weight, stride, padding, 16, drop_tail=False)


def conv_backward_dropped_tile(dy, x, weight, bias, stride=1, padding=0):
    """Bug: dW leaves out the last partial tile of output positions (H_out * W_out not a multiple of 16)."""
    return _conv_backward(dy, x, weight, stride, padding, 16, drop_tail=True)
