"""CPU emulations of GPU atomic accumulation: every element's updates land in a fresh random order on each call,
in a float32 accumulator rounded to the output dtype after every ``chunk`` updates to that element.

``chunk = 1`` is a float16 ``atomicAdd`` (every update rounded to the output dtype, as a GPU's float16 atomics
do); a ``chunk`` at least the updates per element rounds once at the end, like a CPU baseline that accumulates
in float32; in between, a kernel that sums ``chunk`` updates per element in float32 and adds the partial sum
atomically in the output dtype. The order comes from the operating system's entropy, so no runner seed fixes
it: two calls on the same inputs differ the way two runs of a GPU kernel do.
"""

from __future__ import annotations

import os

import torch


def _fresh_order(n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    return torch.randperm(n, generator=gen)


def _accumulate(x: torch.Tensor, target: torch.Tensor, value: torch.Tensor, chunk: int) -> torch.Tensor:
    """``x`` flattened plus ``value[u]`` at ``target[u]`` for every update u, each element's updates in a fresh
    random order, in float32 rounded to ``x``'s dtype after every ``chunk`` updates of that element and at the
    end. Vectorised by rank: the p-th update of every element is added in step p."""
    perm = _fresh_order(target.numel())
    target, value = target[perm], value[perm].float()
    order = torch.sort(target, stable=True).indices
    target, value = target[order], value[order]
    first = torch.searchsorted(target, target, right=False)
    rank = torch.arange(target.numel()) - first
    acc = x.reshape(-1).float()
    steps = int(rank.max()) + 1 if rank.numel() else 0
    for p in range(steps):
        at = rank == p
        acc[target[at]] += value[at]
        if (p + 1) % chunk == 0:
            acc = acc.to(x.dtype).float()
    return acc.to(x.dtype).reshape(x.shape)


def scatter_add_atomic(
    x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, dim: int = 0, chunk: int = 1
) -> torch.Tensor:
    """``x.scatter_add(0, index, src)`` (``out[index[i, j], j] += src[i, j]``) as :func:`_accumulate` does it."""
    assert dim == 0 and x.dim() == 2
    target = index * x.shape[1] + torch.arange(x.shape[1])
    return _accumulate(x, target.reshape(-1), src[: index.shape[0]].reshape(-1), chunk)


def index_add_atomic(
    x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, dim: int = 0, chunk: int = 1
) -> torch.Tensor:
    """``x.index_add(0, index, source)`` (``out[index[k], :] += source[k, :]``) as :func:`_accumulate` does it."""
    assert dim == 0 and x.dim() == 2
    target = index[:, None] * x.shape[1] + torch.arange(x.shape[1])
    return _accumulate(x, target.reshape(-1), source.reshape(-1), chunk)


def index_add_wrong_index(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Bug: the last update lands on the next row (an off-by-one in the tail's index); the updates otherwise
    land in a fresh order per call, as a GPU's atomics do."""
    wrong = index.clone()
    wrong[-1] = (wrong[-1] + 1) % x.shape[0]
    perm = _fresh_order(index.numel())
    return x.index_add(dim, wrong[perm], source[perm])
