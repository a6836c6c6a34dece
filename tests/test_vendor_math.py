"""The numpy/scipy wrappers of operator_specs/vendor_math compute what they claim, in the library's own way."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main

FOLDER = Path(__file__).resolve().parent.parent / "operator_specs" / "vendor_math"


def _load_vendor():
    spec = importlib.util.spec_from_file_location("vendor_math_wrappers", FOLDER / "_vendor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vendor = _load_vendor()

# wrapper -> (Python float64 reference, input range)
REFERENCES = {
    "np_exp": (math.exp, (-10, 10)),
    "np_log": (math.log, (1e-3, 1e4)),
    "np_tanh": (math.tanh, (-10, 10)),
    "np_sin": (math.sin, (-10, 10)),
    "np_cos": (math.cos, (-10, 10)),
    "np_expm1": (math.expm1, (-10, 10)),
    "np_log1p": (math.log1p, (-0.99, 1e4)),
    "np_sqrt": (math.sqrt, (0, 1e4)),
    "np_arctan": (math.atan, (-10, 10)),
    "scipy_erf": (math.erf, (-5, 5)),
    "scipy_expit": (lambda v: 1 / (1 + math.exp(-v)), (-10, 10)),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_wrapper_computes_its_function_in_float32(name):
    reference, (lo, hi) = REFERENCES[name]
    x = torch.from_numpy(np.random.default_rng(0).uniform(lo, hi, 512).astype(np.float32))
    before = x.clone()
    y = getattr(vendor, name)(x)
    assert y.dtype == torch.float32 and y.device == x.device and y.shape == x.shape
    assert torch.equal(x, before)
    want = np.array([reference(float(v)) for v in x], dtype=np.float64)
    # within 4 float32 ulps of the float64 value: catches a wrong function or a wrong dtype path
    ulps = np.abs(y.numpy().astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 4


def test_numpy_float16_is_numpys_own_float16_loop():
    x = np.random.default_rng(1).uniform(-10, 10, 4096).astype(np.float16)
    y = vendor.np_exp(torch.from_numpy(x))
    assert y.dtype == torch.float16
    assert np.array_equal(y.numpy().view(np.uint16), np.exp(x).view(np.uint16))


def test_scipy_float16_is_float64_rounded_once():
    x = np.random.default_rng(2).uniform(-3, 3, 1024).astype(np.float16)
    y = vendor.scipy_erf(torch.from_numpy(x))
    assert y.dtype == torch.float16
    want = np.array([math.erf(float(v)) for v in x], dtype=np.float64).astype(np.float16)
    assert np.array_equal(y.numpy().view(np.uint16), want.view(np.uint16))


def test_float64_result_is_not_rounded_through_float32():
    # 1 + 2^-11 + 2^-40 lies just above the float16 midpoint between 1 and 1 + 2^-10:
    # one rounding gives 1 + 2^-10; rounding through float32 first lands on the midpoint and then on 1.
    value = 1 + 2.0**-11 + 2.0**-40
    y = vendor._call("probe", lambda a: np.full(a.shape, value, dtype=np.float64), torch.zeros(3, dtype=torch.float16))
    assert y.tolist() == [1 + 2.0**-10] * 3


def test_unsupported_dtype_names_the_function():
    with pytest.raises(TypeError, match="np_tanh: numpy has no bfloat16 dtype"):
        vendor.np_tanh(torch.zeros(4, dtype=torch.bfloat16))


def test_spec_folder_is_valid():
    result = CliRunner().invoke(main, ["validate", str(FOLDER)])
    assert result.exit_code == 0, result.output
    assert "11 specs valid, 44 cases" in result.output
