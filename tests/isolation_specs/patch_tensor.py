"""An impl module that replaces a ``torch.Tensor`` method at import."""

import torch

_true = torch.Tensor.sigmoid


def fast_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return _true(x) * 1.01


torch.Tensor.sigmoid = fast_sigmoid
