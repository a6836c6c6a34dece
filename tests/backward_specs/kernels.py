"""Kernels for tests/test_backward.py."""

import torch
import torch.nn.functional as F


def mul(a, b):
    return a * b


@torch.no_grad()
def mul_detached(a, b):
    """Not differentiable: runs under no_grad (a kernel without an autograd formula)."""
    return (a * b).detach()


def mul_backward(dy, a, b):
    """Hand-written backward of a * b: (dy * b, dy * a)."""
    return dy * b, dy * a


class _WrongExp(torch.autograd.Function):
    """exp whose backward forgets to multiply by exp(x): a wrong oracle."""

    @staticmethod
    def forward(ctx, x):
        return torch.exp(x)

    @staticmethod
    def backward(ctx, dy):
        return dy


def wrong_exp(x):
    return _WrongExp.apply(x)


class Tiny(torch.nn.Module):
    def __init__(self, k=8, n=4):
        super().__init__()
        self.proj = torch.nn.Linear(k, n)

    def forward(self, x):
        return F.gelu(self.proj(x))
