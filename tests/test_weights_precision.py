"""A model whose weights are in a reduced precision this CPU only emulates is said (autotune/worker/model.py
weights_precision, the report's note and the console's warning): a resnet18 converted with .half() ran 15x slower
than in float32 on an AVX-512 EPYC without AVX512-FP16 (session 35), and nothing said so."""

from __future__ import annotations

import pytest
import torch

from autotune.report.assemble import weights_note
from autotune.report.console import console_table
from autotune.worker.devices import cpu_native_precision
from autotune.worker.model import weights_precision

pytestmark = pytest.mark.worker

CPU = torch.device("cpu")


def test_the_weights_dtype_and_whether_this_cpu_computes_it_natively() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8))
    assert weights_precision(model, CPU) == {"dtype": "float32", "native": None}  # fp32: nothing to say
    # fp16 on this CPU: native where it has AVX512-FP16 / AMX-FP16 (a Sapphire Rapids), emulated elsewhere (the EPYCs)
    assert weights_precision(model.half(), CPU) == {"dtype": "float16", "native": cpu_native_precision("fp16")}
    assert weights_precision(model.bfloat16(), CPU) == {"dtype": "bfloat16", "native": cpu_native_precision("bf16")}
    assert weights_precision(torch.nn.ReLU(), CPU) is None  # no floating parameters
    mixed = torch.nn.Sequential(torch.nn.Linear(64, 64).half(), torch.nn.Linear(2, 2))  # most elements decide
    assert weights_precision(mixed, CPU)["dtype"] == "float16"  # type: ignore[index]


def test_an_emulated_precision_is_a_note_and_a_console_warning() -> None:
    from tests.test_report import make_document

    emulated = {"weights": {"dtype": "float16", "native": False}}
    note = weights_note(emulated)
    assert note is not None and "float16, which this CPU has no instructions for (AVX512_FP16 or AMX_FP16)" in note
    assert "build the model in float32" in note
    assert weights_note({"weights": {"dtype": "float16", "native": True}}) is None
    assert weights_note({"weights": {"dtype": "float32", "native": None}}) is None and weights_note({}) is None
    doc = make_document()
    doc["workload"] = emulated
    assert "Warning: the model's weights are float16, which this CPU only emulates" in " ".join(
        console_table(doc).split())
    doc["workload"] = {"weights": {"dtype": "float16", "native": True}}
    assert "only emulates" not in console_table(doc)
