"""Implementations under test for the runner's tests (``fn(*tensors, **params)``): one legitimate
variant and several with deliberate defects."""

import time

import torch


def scaled_matmul(a, b):
    """A 1% systematic scale bias: diff1 = diff2 = 1e-2."""
    return torch.matmul(a, b) * 1.01


def raises(a, b):
    raise RuntimeError("kernel launch failed: invalid configuration argument")


def hangs(a, b):
    time.sleep(30)
    return torch.matmul(a, b)


def nan_exp(x):
    """exp with a NaN written into the first element."""
    out = torch.exp(x)
    out.reshape(-1)[0] = float("nan")
    return out


def wrong_shape(a, b):
    return torch.matmul(a, b)[:-1]


def wrong_dtype(a, b):
    return torch.matmul(a.float(), b.float()).double()


def not_a_tensor(a, b):
    return "matmul"


def split_k_matmul(a, b):
    """Legitimate: two K halves accumulated separately, then added (other rounding, same math)."""
    k = a.shape[1] // 2
    return torch.matmul(a[:, :k], b[:k]) + torch.matmul(a[:, k:], b[k:])
