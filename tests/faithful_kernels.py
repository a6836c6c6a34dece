"""Kernels for the device-faithful tests: a kernel that assumes contiguous inputs, a racy one, a varying
baseline, and plain references."""

from __future__ import annotations

import itertools

import torch


def _row_major(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def add_assumes_contiguous(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: reads both inputs as row-major from their data pointer, ignoring their strides (what a kernel
    indexing ``ptr[i * N + j]`` does); right only for contiguous inputs."""
    flat_a = torch.as_strided(a, a.shape, _row_major(a.shape), a.storage_offset())
    flat_b = torch.as_strided(b, b.shape, _row_major(b.shape), b.storage_offset())
    return flat_a + flat_b


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def racy_sum(x: torch.Tensor) -> torch.Tensor:
    """A reduction whose partial sums land in a fresh random order on every call (a race on the order of
    atomic adds): the result's last bits vary run to run."""
    perm = torch.randperm(x.shape[-1])
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for block in x[..., perm].split(64, dim=-1):  # partial sums added in float32, in the permuted order
        acc = acc + block.sum(-1)
    return acc


def row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


_CALLS = itertools.count(1)


def noisy_baseline(x: torch.Tensor) -> torch.Tensor:
    """A baseline that is not reproducible: the k-th call moves the sum k ulps up. (A random relative 1e-6 was
    often no change at all after rounding to float16, or the same change twice.)"""
    out = x.sum(-1)
    up = torch.full_like(out, float("inf"))
    for _ in range(next(_CALLS)):
        out = torch.nextafter(out, up)
    return out


def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * b
