"""Whether dim 0 is a batch of independent rows (autotune/worker/batch_rows.py), on real torch modules, and what
the report says when it is not (issue 29's CLIP and the sequence-first modules torch builds by default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from autotune.core.merging import MERGE_TOLERANCE, answer_moved
from autotune.worker.batch_rows import check_rows, sequence_first_modules

pytestmark = pytest.mark.worker


def _rows(model: nn.Module, *shape: int) -> dict | None:
    torch.manual_seed(0)
    model = model.eval()
    return check_rows(lambda batch: model(*batch), (torch.randn(2, *shape),), model)


class _Scores(nn.Module):
    """CLIP's logits_per_image in small: every row scored against every row of the call, ``(rows, rows)``."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x @ x.T


class _BatchNorm(nn.Module):
    """Each row divided by a norm taken over the whole call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm()


class _WithBuffer(nn.Module):
    """A per-row output and one the call shares (a table of the model's, the same whatever the rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(6.0).reshape(2, 3))
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fc(x).relu(), self.table


def test_a_sequence_first_lstm_is_told_apart_and_named() -> None:
    rows = _rows(nn.LSTM(8, 16, num_layers=2), 5, 8)  # (seq 2, batch 5, features 8): "batch 2" is two time steps
    assert rows is not None and rows["independent"] is False
    assert "of row 1 moves by" in rows["why"] and "depends on the other rows" in rows["why"]
    assert "the model (nn.LSTM) reads dim 0 as the sequence (batch_first=False): set batch_first=True" in rows["why"]


def test_a_batch_first_lstm_is_a_batch_though_its_states_hold_the_rows_in_dim_1() -> None:
    # output (batch, seq, hidden), h_n and c_n (layers, batch, hidden): each row's part is cut where it lies
    assert _rows(nn.LSTM(8, 16, num_layers=2, batch_first=True), 5, 8) == {"independent": True, "why": None}


def test_sequence_first_attention_and_transformer_layers_are_named_where_they_sit() -> None:
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0), 1, enable_nested_tensor=False)
    rows = _rows(encoder, 6, 16)
    assert rows is not None and rows["independent"] is False
    assert "layers.0.self_attn (nn.MultiheadAttention)" in rows["why"]
    assert sequence_first_modules(nn.TransformerEncoderLayer(16, 2, batch_first=True)) == []
    assert _rows(nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1,
                                       enable_nested_tensor=False), 6, 16) == {"independent": True, "why": None}


def test_outputs_that_couple_the_rows_on_purpose_are_said_without_a_hint() -> None:
    rows = _rows(_Scores(), 8)
    assert rows is not None and rows["independent"] is False
    assert rows["why"].startswith("output [1] is (1, 1) for one row and (2, 2) for two: no dim of it holds one part")
    rows = _rows(_BatchNorm(), 8)
    assert rows is not None and rows["independent"] is False and "of row 0 moves by" in rows["why"]
    assert "batch_first" not in rows["why"]


def test_a_real_batch_and_an_output_the_call_shares_are_independent() -> None:
    assert _rows(_WithBuffer(), 8) == {"independent": True, "why": None}
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(5))
    conv(torch.randn(2, 3, 8, 8))
    assert _rows(conv, 3, 8, 8) == {"independent": True, "why": None}


def test_what_cannot_be_checked_is_no_verdict() -> None:
    model = nn.Linear(4, 2).eval()
    assert check_rows(lambda b: model(*b), (torch.randn(1, 4),), model) is None  # one row

    def squeezes(batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if batch[0].shape[0] == 1:
            raise RuntimeError("expected a batch")
        return batch[0]

    assert check_rows(squeezes, (torch.randn(2, 4),), model) is None
    per_image = [torch.zeros(3, 4), torch.zeros(1, 4)]  # a list with one entry per image: its leaves follow the rows
    assert check_rows(lambda b: per_image[: b[0].shape[0]], (torch.randn(2, 4),), model) is None


def test_answer_moved_reads_the_tolerance_and_compares_integers_exactly() -> None:
    a = np.array([1.0, -2.0])
    assert answer_moved(a, a + 2.0 * MERGE_TOLERANCE * 0.99) is None
    assert answer_moved(a, a + 2.0 * MERGE_TOLERANCE * 1.01) == "moves by 0.0404 (largest value 2)"
    assert answer_moved(np.array([1, 2]), np.array([1, 3])) == "changes"
    assert answer_moved(np.array([1, 2]), np.array([1, 2])) is None
    nan = np.array([np.nan, np.inf, 1.0])  # a model that answers NaN answers it alone and beside others alike
    assert answer_moved(nan, nan.copy()) is None
    assert answer_moved(nan, np.array([0.0, np.inf, 1.0])) == "changes"


def test_validation_records_the_verdict_and_the_report_says_it(write_recipe, tmp_path: Path) -> None:
    from autotune.core.recipe.parse import load_recipe
    from autotune.report.assemble import batch_rows_note
    from autotune.report.console import console_table
    from autotune.worker.model import build_model, check_forward
    from tests.support import ROOT
    from tests.test_report import make_document

    text = f"""
device = "cpu"
[model]
factory = "{ROOT / 'tests' / 'models' / 'sequence.py'}:lstm"
[[inputs]]
name = "x"
shape = [5, 8]
[search]
batch_sizes = [1, 4]
"""
    cpu = torch.device("cpu")
    recipe = load_recipe(write_recipe(text))
    info = check_forward(recipe, build_model(recipe, device=cpu), device=cpu)
    assert info.to_dict()["batch_rows"]["independent"] is False
    note = batch_rows_note(info.to_dict())
    assert note is not None and note.startswith("the rows of a batch are not independent samples: output [0]")
    one = load_recipe(write_recipe(text.replace("[1, 4]", "[1]"), "one.toml"))  # checked at batch 1: no verdict
    assert "batch_rows" not in check_forward(one, build_model(one, device=cpu), device=cpu).to_dict()
    fixed = load_recipe(write_recipe(text.replace(':lstm"', ':lstm"\nkwargs = { batch_first = true }'), "bf.toml"))
    assert check_forward(fixed, build_model(fixed, device=cpu), device=cpu).batch_rows == {"independent": True,
                                                                                           "why": None}

    doc = make_document()
    doc["workload"] = info.to_dict()
    doc["recommendation"]["batch_size"] = 4
    console = " ".join(console_table(doc).split())  # unwrapped
    assert "Warning: the rows of a batch are not independent samples, so at batch 4" in console
    assert "(nn.LSTM) reads dim 0 as the sequence" in console
    doc["recommendation"]["batch_size"] = 1
    assert "not independent" not in console_table(doc)
