"""ONNX Runtime and OpenVINO variants: grammar, real builds through the correctness gate, measurement in
the real worker, and "unavailable" (with the install command) when a runtime's package is missing.

Everything here runs the real runtimes on the CPU (``make install`` installs them); nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from autotune.client import WorkerClient
from autotune.core.measure_settings import MeasureSettings
from autotune.core.measurement import Measurement
from autotune.core.recipe import load_recipe
from autotune.errors import InputError, VariantError
from autotune.runner import Runner
from autotune.showdown import simplicity
from autotune.worker.correctness import check_variant
from autotune.worker.variants import VariantSpec, available, build_variant, expand_variants
from tests.support import tiny_recipe

ROOT = Path(__file__).resolve().parents[1]
HAVE_ONNX = all(__import__("importlib").util.find_spec(m) for m in ("onnxruntime", "onnx", "onnxscript"))
HAVE_OPENVINO = __import__("importlib").util.find_spec("openvino") is not None
needs_onnx = pytest.mark.skipif(not HAVE_ONNX, reason="onnx extras not installed (make install)")
needs_openvino = pytest.mark.skipif(not HAVE_OPENVINO, reason="openvino not installed (make install)")


# ---- grammar --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "name", "mode"), [
    ("onnx", "onnx", "default"),
    ("onnx:default", "onnx", "default"),
    ("ONNX:parallel + threads=1", "onnx:parallel+threads=1", "parallel"),
    ("onnx+threads=1", "onnx+threads=1", "default"),
    ("openvino", "openvino", "latency"),
    ("openvino:latency", "openvino", "latency"),
    ("openvino:throughput", "openvino:throughput", "throughput"),
])
def test_runtime_names_parse_and_round_trip(text: str, name: str, mode: str) -> None:
    spec = VariantSpec.parse(text)
    assert spec.name == name and spec.compile_mode == mode and spec.is_runtime
    assert VariantSpec.parse(spec.name) == spec


@pytest.mark.parametrize(("text", "fragment"), [
    ("onnx:fast", "did you mean 'onnx:default'|allowed: default, parallel"),
    ("openvino:throughput2", "did you mean 'throughput'"),
    ("frozen:latency", "only compile, onnx, openvino take a mode"),
    ("onnx+openvino", "two compilers"),
])
def test_bad_runtime_names_say_what_is_allowed(text: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        VariantSpec.parse(text)


def test_runtimes_come_after_compile_and_export_in_the_tie_break() -> None:
    order = [simplicity({"compiler": c}) for c in ("eager", "frozen", "compile", "onnx")]
    assert order == sorted(order) and simplicity({"compiler": "onnx"}) > simplicity({"compiler": "export"})
    assert simplicity({"compiler": "openvino"}) == simplicity({"compiler": "onnx"})


def test_torch_only_modifiers_are_unavailable_for_runtimes() -> None:
    for text, fragment in (("onnx+channels_last", "memory layouts"), ("openvino+autocast-bf16", "autocast"),
                           ("onnx+bf16", "fp32 graph"), ("onnx+cudagraphs", "cudagraphs")):
        got = available(VariantSpec.parse(text), device="cpu", input_ndims=(4,))
        if HAVE_ONNX and HAVE_OPENVINO:
            assert not got.ok and fragment in (got.reason or ""), (text, got)


# ---- real builds through the gate ------------------------------------------------------------------


class SmallConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class TupleMLP(nn.Module):
    """Two outputs, so the runtime's flat outputs must be put back into eager's structure."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 32), nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.fc1(x))
        return self.fc2(hidden), hidden


def _conv_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 3, 12, 12, generator=torch.Generator().manual_seed(seed)),)


def _mlp_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(6, 12, generator=torch.Generator().manual_seed(seed)),)


CASES = [
    pytest.param("onnx+threads=1", SmallConv, _conv_inputs, marks=needs_onnx, id="onnx-conv"),
    pytest.param("onnx:parallel", TupleMLP, _mlp_inputs, marks=needs_onnx, id="onnx-mlp"),
    pytest.param("openvino", SmallConv, _conv_inputs, marks=needs_openvino, id="openvino-conv"),
    pytest.param("openvino:throughput", SmallConv, _conv_inputs, marks=needs_openvino, id="openvino-tput-conv"),
    pytest.param("openvino:throughput", TupleMLP, _mlp_inputs, marks=needs_openvino, id="openvino-tput-mlp"),
]


@pytest.mark.parametrize(("variant", "factory", "inputs"), CASES)
def test_runtime_builds_and_passes_the_gate(variant: str, factory, inputs) -> None:
    torch.manual_seed(0)
    model = factory().eval()
    spec = VariantSpec.parse(variant)
    before = torch.get_num_threads()
    try:
        built = build_variant(spec, model, inputs(0), device="cpu")
        gate = check_variant(model, built, lambda s: inputs(100 + s), batches=3)
    finally:
        torch.set_num_threads(before)
    assert gate.passed, gate.reason
    assert gate.max_abs_error < 1e-4 and built.shape_specialized and built.build_seconds > 0
    out = built.fn(*built.prepare_inputs(inputs(7)))
    ref = model(*inputs(7))
    assert type(out) is type(ref)  # the eager output structure, as torch tensors
    notes = " | ".join(built.notes)
    if spec.compiler == "onnx":
        assert "ORT_ENABLE_ALL" in notes and "dynamo exporter" in notes
        assert f"intra_op_num_threads={spec.threads or before}" in notes
    else:
        assert "INFERENCE_PRECISION_HINT=f32" in notes and f"PERFORMANCE_HINT={spec.compile_mode.upper()}" in notes
    if spec.compile_mode == "throughput":
        # a call is one batch through the queue (k requests) or, where the plugin wants one request, says so
        assert "AsyncInferQueue" in notes or "one request per call" in notes


@needs_openvino
def test_openvino_throughput_splits_the_batch_over_the_queue() -> None:
    """With threads=2 the CPU plugin asks for 2 requests; batch 4 then runs as 2 requests of 2."""
    if torch.get_num_threads() < 2 and len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPU cores for 2 streams")
    torch.manual_seed(0)
    model = SmallConv().eval()
    built = build_variant(VariantSpec.parse("openvino:throughput+threads=2"), model, _conv_inputs(0), device="cpu")
    notes = " | ".join(built.notes)
    assert "as 2 requests of 2 in an AsyncInferQueue of 2" in notes, notes
    assert check_variant(model, built, lambda s: _conv_inputs(100 + s), batches=2).passed


@needs_onnx
def test_a_failed_export_is_a_variant_error_not_a_crash() -> None:
    class ReturnsInt(nn.Module):
        def forward(self, x: torch.Tensor) -> int:
            return int(x.shape[0])

    with pytest.raises(VariantError, match=r"outputs that are not tensors, which an exported graph cannot reproduce: "
                                           r"the output \(int\)"):
        build_variant(VariantSpec.parse("onnx"), ReturnsInt(), (torch.randn(2, 3),), device="cpu")


# ---- dynamic dims ----------------------------------------------------------------------------------


class MaskedMean(nn.Module):
    """A sequence model (ids, mask) -> (pooled logits, per-token states): the second output follows the length."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(50, 8), nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states = self.emb(ids) * mask[..., None]
        return self.fc(states.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)), states


def _seq(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, length + 1, (rows,), generator=g)
    mask = (torch.arange(length)[None, :] < lens[:, None]).long()
    return torch.randint(0, 50, (rows, length), generator=g) * mask, mask


@pytest.mark.parametrize("variant", [
    pytest.param("onnx", marks=needs_onnx),
    pytest.param("openvino", marks=needs_openvino),
    pytest.param("openvino:throughput+threads=2", marks=needs_openvino),
])
def test_runtimes_take_every_batch_size_and_length_in_the_dynamic_dims(variant: str) -> None:
    """Built on a 4x10 example with dims 0 and 1 dynamic: batches of 1-4 rows and other lengths give eager's
    answer (openvino:throughput splits a partial batch over its requests), and the graph carries the names."""
    torch.manual_seed(0)
    model = MaskedMean().eval()
    spec = VariantSpec.parse(variant)
    before = torch.get_num_threads()
    try:
        built = build_variant(spec, model, _seq(4, 10, 0), device="cpu", dynamic_dims=((0, 1), (0, 1)),
                              input_names=("ids", "mask"))
        shapes = [(4, 10), (1, 7), (3, 13), (2, 10), (4, 3)]
        gate = check_variant(model, built, lambda s: _seq(*shapes[s], seed=s), batches=len(shapes))
    finally:
        torch.set_num_threads(before)
    assert gate.passed, gate.reason
    notes = " | ".join(built.notes)
    assert "dynamic dims ids[0, 1], mask[0, 1]" in notes, notes
    if spec.compiler == "onnx":
        assert "graph input shapes ids [" in notes and "fixed by the exporter" not in notes, notes
    if "AsyncInferQueue" in notes:  # two cores: the partial batches above went through the queue in chunks
        assert "a partial batch of r rows as min(k, r) near-equal requests" in notes, notes


@needs_onnx
def test_the_torchscript_exporter_fallback_keeps_the_dynamic_axes() -> None:
    """A data-dependent branch stops torch.export (the dynamo exporter); the TorchScript exporter then gets
    dynamic_axes and the session still takes other batch sizes and lengths."""

    class Branchy(MaskedMean):
        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if bool(mask.sum() >= 0):  # data-dependent: torch.export cannot trace it, a trace records it
                return super().forward(ids, mask)
            return super().forward(ids, 1 - mask)

    torch.manual_seed(0)
    model = Branchy().eval()
    built = build_variant(VariantSpec.parse("onnx"), model, _seq(4, 10, 0), device="cpu",
                          dynamic_dims=((0, 1), (0, 1)), input_names=("ids", "mask"))
    notes = " | ".join(built.notes)
    assert "TorchScript exporter" in notes and "(dynamic_axes)" in notes, notes
    shapes = [(1, 7), (3, 13)]
    gate = check_variant(model, built, lambda s: _seq(*shapes[s], seed=s), batches=len(shapes))
    assert gate.passed, gate.reason


@needs_onnx
def test_an_export_that_unrolls_the_batch_fails_at_build_not_in_deployment() -> None:
    """Control flow over the batch (a detector's per-image loop) is unrolled by the export at the example's
    size: declared dynamic in dim 0 but built at batch 3, the graph cannot take a batch of 1. The gate at the
    build batch would pass it and its artifact would claim batches 1 to 3 (torchvision's fasterrcnn, exported at
    batch 2, failed in a Split on the serving stage's first call of one image); the build fails with the reason.
    The same loop built at batch 1 claims nothing it cannot do, and a batched model at 3 is not affected."""

    class PerRow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bool(x.sum() > -1e9):  # data-dependent: torch.export gives up, the TorchScript exporter traces
                return torch.stack([self.fc(x[i]) for i in range(x.shape[0])])
            return self.fc(x)

    torch.manual_seed(0)
    with pytest.raises(VariantError, match=r"declared dynamic in the batch \(1 to 3\).*specialised the graph to "
                                           r"batch 3"):
        build_variant(VariantSpec.parse("onnx"), PerRow().eval(), (torch.randn(3, 4),), device="cpu",
                      dynamic_dims=((0,),))
    assert build_variant(VariantSpec.parse("onnx"), PerRow().eval(), (torch.randn(1, 4),), device="cpu",
                         dynamic_dims=((0,),)).fn is not None
    fine = build_variant(VariantSpec.parse("onnx"), nn.Linear(4, 2).eval(), (torch.randn(3, 4),), device="cpu",
                         dynamic_dims=((0,),))
    assert fine.fn(torch.randn(1, 4)).shape == (1, 2)


def test_a_partial_batch_is_split_into_near_equal_chunks() -> None:
    from autotune.worker.variants.runtimes import _chunks

    assert _chunks(4, 2) == [(0, 2), (2, 4)]
    assert _chunks(3, 2) == [(0, 2), (2, 3)]
    assert _chunks(1, 4) == [(0, 1)]
    assert _chunks(7, 3) == [(0, 3), (3, 5), (5, 7)]
    for rows in range(1, 12):
        for k in range(1, 5):
            parts = _chunks(rows, k)
            assert parts[0][0] == 0 and parts[-1][1] == rows and len(parts) == min(k, rows)
            sizes = [b - a for a, b in parts]
            assert max(sizes) - min(sizes) <= 1 and all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))


# ---- measured through the real worker ---------------------------------------------------------------


@pytest.mark.worker  # a real model through worker ops (the marker's definition): not test-fast
@pytest.mark.skipif(not (HAVE_ONNX and HAVE_OPENVINO), reason="runtime extras not installed (make install)")
def test_runtimes_are_measured_by_the_real_worker(write_recipe) -> None:
    recipe = load_recipe(write_recipe(tiny_recipe(name="rt", variants='["eager", "onnx", "openvino:throughput"]',
                                                  batch_sizes="[4]")))
    settings = MeasureSettings(mode="throughput", ci_target=0.05, max_seconds=0.3)
    with Runner() as runner:
        client = WorkerClient(runner)
        validated = client.validate(recipe, timeout=120)
        assert validated["variants"] == ["eager", "onnx", "openvino:throughput"], validated["unavailable"]
        for variant in ("onnx", "openvino:throughput"):
            res = client.measure(recipe, variant, 4, settings, timeout=180)
            assert res["status"] == "ok", res
            assert res["correctness"]["passed"] and res["build_seconds"] > 0
            assert Measurement.from_dict(res["measurement"]).throughput > 0
            assert any(variant.split(":")[0] + ":" in n for n in res["notes"])


# ---- missing packages --------------------------------------------------------------------------------

_HIDDEN = """
import json, sys
for name in ("onnxruntime", "openvino"):
    sys.modules[name] = None  # what an uninstalled package looks like to import
from autotune.worker.variants import VariantSpec, available, build_variant, expand_variants
from autotune.errors import VariantError
import torch
out = {}
for name in ("onnx", "openvino:throughput"):
    a = available(VariantSpec.parse(name), device="cpu")
    try:
        build_variant(VariantSpec.parse(name), torch.nn.Linear(3, 2).eval(), (torch.randn(2, 3),), device="cpu")
        built = "built"
    except VariantError as exc:
        built = str(exc)
    out[name] = {"ok": a.ok, "reason": a.reason, "build": built}
out["all"] = [s.name for s in expand_variants(["all"], device="cpu")]
print(json.dumps(out))
"""


def test_missing_runtime_is_unavailable_with_the_install_command() -> None:
    proc = subprocess.run([sys.executable, "-c", _HIDDEN], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["onnx"]["ok"] is False
    assert "onnxruntime" in out["onnx"]["reason"] and "pip install 'autotune[onnx]'" in out["onnx"]["reason"]
    assert out["openvino:throughput"]["ok"] is False
    assert "pip install 'autotune[openvino]'" in out["openvino:throughput"]["reason"]
    assert "install with" in out["onnx"]["build"] and "install with" in out["openvino:throughput"]["build"]
    assert not any(n.startswith(("onnx", "openvino")) for n in out["all"]) and "eager" in out["all"]


@pytest.mark.skipif(not (HAVE_ONNX and HAVE_OPENVINO), reason="runtime extras not installed (make install)")
def test_all_offers_the_installed_runtimes_on_cpu() -> None:
    names = [s.name for s in expand_variants(["all"], device="cpu")]
    assert {"onnx", "openvino", "openvino:throughput"} <= set(names)
