"""Kernels for the role-isolation tests: state-changing impls and baselines, kernels that are right only in a
process nobody changed, and kernels that are 1% wrong (their diff1 against the true function is 0.01)."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

#: What a fresh worker has (read at import, in the worker that imports this module).
_START_CWD = os.getcwd()
_START_PATH = list(sys.path)
_TRUE_GELU = F.gelu
_START_ERR = np.geterr()


def pristine() -> bool:
    """Whether nothing a state-changing kernel below does is visible in this process."""
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    return (
        torch.get_default_dtype() == torch.float32
        and torch.get_num_threads() == 1
        and bool((tiny * 1.0).item() != 0.0)
        and os.getcwd() == _START_CWD
        and "ACCEPTANCE_TEST_LEAK" not in os.environ
        and sys.path == _START_PATH
        and F.gelu is _TRUE_GELU
        and torch.backends.mkldnn.enabled
        and np.geterr() == _START_ERR
    )


def sensitive(x: torch.Tensor) -> torch.Tensor:
    """``x * 1`` in a pristine process, ``x * 1.5`` otherwise (a kernel whose result follows leaked state)."""
    return x * (1.0 if pristine() else 1.5)


def times_one(x: torch.Tensor) -> torch.Tensor:
    return x * 1.0


def _then(change):
    def impl(x: torch.Tensor) -> torch.Tensor:
        change()
        return (x.to(torch.float32) * 1.0).to(x.dtype)

    return impl


def _wrong_gelu(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return _TRUE_GELU(x) * 1.01


sets_flush_denormal = _then(lambda: torch.set_flush_denormal(True))
sets_default_dtype = _then(lambda: torch.set_default_dtype(torch.float64))
sets_num_threads = _then(lambda: torch.set_num_threads(2))
changes_cwd = _then(lambda: os.chdir("/"))
sets_env_var = _then(lambda: os.environ.__setitem__("ACCEPTANCE_TEST_LEAK", "1"))
extends_sys_path = _then(lambda: sys.path.insert(0, "/leaked"))
patches_gelu = _then(lambda: setattr(F, "gelu", _wrong_gelu))
disables_mkldnn = _then(lambda: setattr(torch.backends.mkldnn, "enabled", False))
numpy_raises = _then(lambda: np.seterr(all="raise"))


def wrong_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU 1% too large everywhere: diff1 against the true GELU is 0.01."""
    return _wrong_gelu(x)


def doubles_subnormals(x: torch.Tensor) -> torch.Tensor:
    """``x`` where it is normal, ``2 x`` where it is subnormal: wrong on subnormal inputs only."""
    sub = x.abs() < torch.finfo(torch.float32).tiny
    return torch.where(sub, x * 2.0, x * 1.0)


def np_exp(x: torch.Tensor) -> torch.Tensor:
    """exp through NumPy (a baseline that a patch of ``numpy.exp`` reaches)."""
    return torch.from_numpy(np.exp(x.numpy()))
