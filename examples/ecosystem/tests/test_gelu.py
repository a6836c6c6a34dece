"""Hand-written tests of a kernel repository, using acceptance.assert_accurate."""

import sys
from pathlib import Path

import pytest
import torch

import acceptance

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels import tanh_gelu  # noqa: E402


def test_tanh_gelu_is_accurate_in_float16():
    x = torch.linspace(-6, 6, 4097, dtype=torch.float16)
    expected = torch.nn.functional.gelu(x, approximate="tanh")
    oracle = torch.nn.functional.gelu(x.double(), approximate="tanh")
    acceptance.assert_accurate(tanh_gelu(x), expected, oracle=oracle, category="activation")


def test_a_dropped_tail_is_caught():
    x = torch.linspace(-6, 6, 4097, dtype=torch.float32)
    wrong = tanh_gelu(x)
    wrong[-1:] = 0.0
    with pytest.raises(AssertionError, match=r"Mismatched elements: 1 / 4097"):
        acceptance.assert_accurate(wrong, torch.nn.functional.gelu(x, approximate="tanh"), category="activation")
