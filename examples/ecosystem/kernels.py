"""Kernels of a small kernel library: what a kernel repository adopting the gate already has."""

import math

import torch


def tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def reference_gelu(x: torch.Tensor) -> torch.Tensor:
    """The reference the compiled kernel is held against (eager PyTorch)."""
    return torch.nn.functional.gelu(x, approximate="tanh")


def choose_gelu(x: torch.Tensor, **params):
    """Setup, once per case: pick the kernel for the case's shape (here always the tanh form)."""
    return tanh_gelu


def blocked_softmax(x: torch.Tensor, *, block: int) -> torch.Tensor:
    """Softmax over the last dim, its maximum taken block by block (``block`` is an impl-only parameter)."""
    peak = torch.stack([c.amax(dim=-1) for c in x.split(block, dim=-1)], dim=-1).amax(dim=-1, keepdim=True)
    e = torch.exp(x - peak)
    return e / e.sum(dim=-1, keepdim=True)
