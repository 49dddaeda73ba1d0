"""Sequence models as torch builds them by default (``batch_first=False``): tests/test_batch_rows.py."""

from __future__ import annotations

from torch import nn


def lstm(batch_first: bool = False) -> nn.Module:
    return nn.LSTM(8, 16, num_layers=2, batch_first=batch_first)
