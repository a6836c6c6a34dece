"""An nn.Module under test: the gate builds it (same weights for every role) and casts it per role."""

import torch


class TinyMLP(torch.nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = torch.nn.Linear(features, hidden)
        self.down = torch.nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))
