"""An impl module that replaces ``numpy.exp`` at import."""

import numpy as np
import torch

_true = np.exp


def fast_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x) * 1.01


np.exp = lambda a, *args, **kwargs: _true(a, *args, **kwargs) * 1.01
