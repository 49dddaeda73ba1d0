"""A tiny conv model that can be made deliberately slower, for ``autotune compare``'s real test.

``slowable(slow=True)`` computes the same kind of answer but adds a chain of matmuls that depend on
the input (so no variant can fold them away as constants, and tracing, scripting and freezing keep
them), as a model change that costs throughput would.
"""

from __future__ import annotations

import torch
from torch import nn


class SlowableNet(nn.Module):
    def __init__(self, slow: bool = False, extra_matmuls: int = 8, width: int = 512) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)
        self.extra = extra_matmuls if slow else 0
        self.widen = nn.Linear(3 * 8 * 8, width)
        self.square = nn.Linear(width, width)
        self.narrow = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))
        if self.extra > 0:
            h = torch.tanh(self.widen(x.flatten(1)))
            for _ in range(self.extra):
                h = torch.tanh(self.square(h))
            y = y + 1e-3 * self.narrow(h)
        return y


def slowable(slow: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return SlowableNet(slow)
