"""Call adapters for built-in specs whose torch operator does not take ``(*tensors, **params)``.

Each function takes the spec's input tensors in order plus the spec's params
and returns a new tensor; none changes its inputs.
"""

import torch
import torch.nn.functional as F


def conv2d(x, weight, bias, stride=1, padding=0, dilation=1):
    """2-D cross-correlation ``F.conv2d``; ``groups = C_in / weight.shape[1]``.

    x: (N, C_in, H, W); weight: (C_out, C_in / groups, R, S); bias: (C_out,).
    Deriving ``groups`` from the shapes lets a depthwise case be written as a
    weight shape ``[C, 1, R, S]`` without repeating the group count.
    """
    groups = x.shape[1] // weight.shape[1]
    return F.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def cat(a, b, dim=0):
    """``torch.cat([a, b], dim)``."""
    return torch.cat([a, b], dim=dim)


def transpose_copy(x):
    """``x.transpose(0, 1).contiguous()``: a real copy in the transposed layout."""
    return x.transpose(0, 1).contiguous()


def index_select(x, index, dim=0):
    """``torch.index_select(x, dim, index)``: rows (``dim=0``) of ``x`` picked by ``index``."""
    return torch.index_select(x, dim, index)


def layer_norm(x, weight, bias, eps=1e-5):
    """``F.layer_norm`` over the last dimension:
    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps=eps)


def index_add(x, index, source, dim=0):
    """``x.index_add(dim, index, source)``: ``out[index[k]] += source[k]`` along ``dim``
    (out of place; repeated indices accumulate, atomically on a GPU)."""
    return x.index_add(dim, index, source)


def scatter_add(x, index, src, dim=0):
    """``x.scatter_add(dim, index, src)``: for ``dim=0``, ``out[index[i][j]][j] += src[i][j]``
    (out of place; repeated indices accumulate, atomically on a GPU)."""
    return x.scatter_add(dim, index, src)


def matmul_nt(w, a):
    """``w @ a.T``: out[m, n] = sum_k w[m, k] * a[n, k] (weights M x K, activations N x K), the straightforward
    reference of a quantized matmul given the dequantized values."""
    return w @ a.T


def matmul_q4_0_q8_1_dequantize(w, a):
    """The naive device kernel a quantized matmul is timed against: dequantize the q4_0 weight blocks and the
    q8_1 activation blocks to float32 with torch ops, then ``w @ a.T`` (a float32 GEMM)."""
    from acceptance.formats.quant_kernels import unpack_q4_0, unpack_q8_1

    wf, af = unpack_q4_0(w), unpack_q8_1(a)
    wd = ((wf.codes.float() - 8.0) * wf.d[..., None]).reshape(w.shape[0], -1)
    ad = (af.q.float() * af.d[..., None]).reshape(a.shape[0], -1)
    return wd @ ad.T


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last dimension written with torch ops (the composite every fused kernel replaces):
    ``y = x / sqrt(mean(x^2) + eps) * weight``."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def cross_entropy(logits, target):
    """``F.cross_entropy(logits, target)``: the mean over rows of ``logsumexp(logits[n]) - logits[n, target[n]]``."""
    return F.cross_entropy(logits, target)
