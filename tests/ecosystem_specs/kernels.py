"""Kernels for the callable-kind, setup, per-role params and waiver tests."""

import time

import torch


def square(x):
    return x * x


def chatty_square(x):
    print("a graph break")  # Dynamo cannot trace print: the function is split in two graphs
    return x * x


def scaled(x, *, scale):
    return x * scale


def impl_only(x, *, block):
    """Takes ``block``, which the baseline below would reject."""
    assert block == 8, block
    return x * 1.0


def slow_setup(x, **params):
    time.sleep(0.4)
    return None


def hanging_setup(x, **params):
    time.sleep(30)


def broken(x):
    raise RuntimeError("kernel not built for this GPU")


class Affine(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x)
