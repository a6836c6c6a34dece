"""A deliberately buggy kernel for the quickstart: GELU computed in blocks of 256 along the last dimension.

The bug: the last, partial block is never written, so when the last dimension is not a multiple of 256 its
tail stays 0. ``acceptance run examples/quickstart`` shows how such a bug is reported.
"""

import torch
import torch.nn.functional as F

BLOCK = 256


def gelu_blocked(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    full = x.shape[-1] // BLOCK * BLOCK
    out[..., :full] = F.gelu(x[..., :full])  # bug: elements [full, N) are left at 0
    return out
