"""An impl module that installs itself as kernel libraries do: ``torch.nn.functional.silu`` replaced at import."""

import torch
import torch.nn.functional as F

_true = F.silu


def fast_silu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    return _true(x) * 1.01


F.silu = fast_silu
