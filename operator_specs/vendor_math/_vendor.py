"""numpy and scipy.special element-wise functions behind the callable contract ``fn(x) -> Tensor``.

These are shipping implementations that the accuracy gate must accept: each
wrapper hands the library an array of the tensor's own dtype and lets the
library choose how to compute it, as a user calling it would:

* numpy float32 uses numpy's float32 loops (its own SIMD code on x86-64);
  numpy float16 (``e->e`` loops) converts to float32, runs the float32 loop
  and rounds the result back to float16 once;
* scipy.special has no float16 loop: NumPy's type resolution picks the
  ``d->d`` loop, so a float16 input is computed in float64; that float64
  result is rounded once (to nearest, ties to even, numpy's own cast) to
  float16 here. float32 inputs use scipy's ``f->f`` loop.

The result comes back as a tensor of the input's dtype on the input's device
(the data goes through host memory). Inputs are never modified. A dtype that
numpy cannot hold (bfloat16, the float8 formats) raises ``TypeError`` naming
the function and the dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.special
import torch

_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _call(name: str, fn: Callable[[np.ndarray], np.ndarray], x: torch.Tensor) -> torch.Tensor:
    """``fn`` on a host copy of ``x`` in x's dtype; the result rounded once to x's dtype, on x's device."""
    if x.dtype not in _NUMPY_DTYPES:
        raise TypeError(
            f"{name}: numpy has no {str(x.dtype).removeprefix('torch.')} dtype (supported: float16, float32, float64)"
        )
    host = x.detach().cpu().numpy().copy()
    out = np.asarray(fn(host))
    if out.dtype != host.dtype:
        out = out.astype(host.dtype)
    return torch.from_numpy(np.ascontiguousarray(out)).to(x.device)


def np_exp(x: torch.Tensor) -> torch.Tensor:
    """``numpy.exp``: e^x."""
    return _call("np_exp", np.exp, x)


def np_log(x: torch.Tensor) -> torch.Tensor:
    """``numpy.log``: natural logarithm."""
    return _call("np_log", np.log, x)


def np_tanh(x: torch.Tensor) -> torch.Tensor:
    """``numpy.tanh``: hyperbolic tangent."""
    return _call("np_tanh", np.tanh, x)


def np_sin(x: torch.Tensor) -> torch.Tensor:
    """``numpy.sin``: sine of x radians."""
    return _call("np_sin", np.sin, x)


def np_cos(x: torch.Tensor) -> torch.Tensor:
    """``numpy.cos``: cosine of x radians."""
    return _call("np_cos", np.cos, x)


def np_expm1(x: torch.Tensor) -> torch.Tensor:
    """``numpy.expm1``: e^x - 1 without cancellation near 0."""
    return _call("np_expm1", np.expm1, x)


def np_log1p(x: torch.Tensor) -> torch.Tensor:
    """``numpy.log1p``: ln(1 + x) without cancellation near 0."""
    return _call("np_log1p", np.log1p, x)


def np_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``numpy.sqrt``: square root (IEEE 754 correctly rounded)."""
    return _call("np_sqrt", np.sqrt, x)


def np_arctan(x: torch.Tensor) -> torch.Tensor:
    """``numpy.arctan``: arc tangent, in radians."""
    return _call("np_arctan", np.arctan, x)


def scipy_erf(x: torch.Tensor) -> torch.Tensor:
    """``scipy.special.erf``: erf(x) = 2/sqrt(pi) * integral_0^x e^(-t^2) dt."""
    return _call("scipy_erf", scipy.special.erf, x)


def scipy_expit(x: torch.Tensor) -> torch.Tensor:
    """``scipy.special.expit``: the logistic sigmoid 1 / (1 + e^-x)."""
    return _call("scipy_expit", scipy.special.expit, x)
