"""An impl module that replaces ``torch.nn.functional.gelu`` by a 1% wrong one at import."""

import torch
import torch.nn.functional as F

_true = F.gelu


def fast_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return _true(x) * 1.01


F.gelu = fast_gelu
