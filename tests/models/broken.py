"""Deliberately broken models for the worker-isolation tests.

Each misbehaves only at batch >= 4 (or only under one variant), so validation (batch 2) passes
and the run itself meets the failure, as a real buggy or memory-hungry model would.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, crash: str | None = None) -> None:
        super().__init__()
        self.crash = crash
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            self._maybe_crash(x)
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc(y)

    @torch.jit.unused
    def _maybe_crash(self, x: torch.Tensor) -> None:
        if self.crash == "trace" and torch.jit.is_tracing():
            os._exit(7)  # only the trace variant dies
        if self.crash == "single" and x.shape[0] > 1:  # as a GPT-2 classifier without a pad token
            raise ValueError("Cannot handle batch sizes > 1 if no padding token is defined.")
        if self.crash is None or x.shape[0] < 4:
            return
        if self.crash == "raise":
            raise ValueError("deliberate failure at batch >= 4")
        if self.crash == "segfault":
            ctypes.string_at(0)
        if self.crash == "exit":
            os._exit(3)
        if self.crash == "kill":  # what the kernel's OOM killer does
            os.kill(os.getpid(), signal.SIGKILL)
        if self.crash == "hang":
            time.sleep(10_000)


def tiny(crash: str | None = None) -> nn.Module:
    return TinyNet(crash)


def factory_raises() -> nn.Module:
    raise RuntimeError("this factory always fails")


def not_a_module() -> int:
    return 42


class DataDependent(nn.Module):
    """The torch.jit.trace trap: the trace freezes the branch taken on the example."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum() > 0:
            return y * 2
        return -y


def data_dependent() -> nn.Module:
    return DataDependent()


class _AllNaN(nn.Module):
    """Outputs NaN everywhere (a broken model): nothing a variant's output could be checked against."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) * float("nan")


def all_nan() -> nn.Module:
    return _AllNaN()
