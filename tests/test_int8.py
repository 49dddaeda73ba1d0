"""int8 variants: the grammar, availability without the quantizers, real quantized builds through the gate, a
deliberately broken calibration that the gate rejects, and the int8 artifact loaded in a fresh process.

Every build here runs the real quantizer (torchao, torch.ao, onnxruntime.quantization, NNCF) on a real model;
nothing is stubbed. The gate is today's (``tolerance_for("int8")``, the interim loose tolerance); the accuracy
budget that replaces it for lower precision keeps the same verdicts on these cases (a constant-calibrated model
disagrees with eager on about half of its top-1 answers).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from autotune.core.recipe import load_recipe
from autotune.core.variant_names import PRECISIONS, QUANTIZED_PRECISIONS, VariantSpec
from autotune.errors import InputError
from autotune.worker.correctness import check_variant, tolerance_for
from autotune.worker.variants import available, build_variant, expand_variants
from autotune.worker.variants.isa import parse_onednn_log
from autotune.worker.variants.quantize import QUANT_INSTALL, Calibration

ROOT = Path(__file__).resolve().parents[1]
HAVE = {m: importlib.util.find_spec(m) is not None for m in ("torchao", "nncf", "onnxruntime", "openvino")}
needs = {m: pytest.mark.skipif(not ok, reason=f"{m} not installed (make install)") for m, ok in HAVE.items()}


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()


def _batch(seed: int, rows: int = 16) -> tuple[torch.Tensor, ...]:
    return (torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed)),)


def _agreement(model: torch.nn.Module, built: Any, seeds: range) -> float:
    hits = total = 0
    with torch.inference_mode():
        for s in seeds:
            x = _batch(s)
            hits += int((built.fn(*built.prepare_inputs(x)).argmax(1) == model(*x).argmax(1)).sum())
            total += x[0].shape[0]
    return hits / total


# ---- names -------------------------------------------------------------------------------------------------


def test_int8_is_a_precision_modifier_in_the_grammar() -> None:
    assert {"int8", "int8-static"} <= set(PRECISIONS) and set(QUANTIZED_PRECISIONS) == {"int8", "int8-static"}
    spec = VariantSpec.parse("onnx:parallel+int8-static+threads=2")
    assert (spec.compiler, spec.precision, spec.threads, spec.is_quantized) == ("onnx", "int8-static", 2, True)
    assert VariantSpec.parse(spec.name) == spec
    assert not VariantSpec.parse("eager+bf16").is_quantized
    with pytest.raises(InputError, match="two precisions"):
        VariantSpec.parse("eager+int8+bf16")
    with pytest.raises(InputError, match="did you mean 'int8'"):
        VariantSpec.parse("eager+int9")


def test_recipe_precisions_cross_int8_with_the_variants() -> None:
    specs = expand_variants(["eager", "onnx"], device="cpu", precisions=["fp32", "int8"])
    assert [s.name for s in specs] == ["eager", "eager+int8", "onnx", "onnx+int8"]


# ---- availability -----------------------------------------------------------------------------------------


def test_unavailable_with_the_install_command_without_the_quantizers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocked import (``sys.modules[name] = None``) is how a missing package looks: unavailable, never a crash."""
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "nncf", None)
    for name, missing in (("eager+int8", "torchao"), ("compile+int8", "torchao"), ("openvino+int8", "nncf")):
        a = available(VariantSpec.parse(name), device="cpu")
        assert not a.ok and a.reason is not None
        if name.startswith("openvino") and not HAVE["openvino"]:
            continue  # the runtime itself is missing: its own install command
        assert missing in a.reason and QUANT_INSTALL in a.reason, (name, a.reason)


def test_which_int8_combinations_are_offered_and_why_not() -> None:
    assert not available(VariantSpec.parse("export+int8"), device="cpu").ok
    assert "onnx" in str(available(VariantSpec.parse("eager+int8-static"), device="cpu").reason)
    if HAVE["openvino"]:
        reason = available(VariantSpec.parse("openvino+int8-static"), device="cpu").reason
        assert reason is not None and "already" in reason
    assert available(VariantSpec.parse("frozen+int8"), device="cpu").ok  # torch.ao, always there


# ---- real builds through the gate -------------------------------------------------------------------------


CAL = Calibration(tuple(_batch(100 + i) for i in range(4)), "inputs")


@pytest.mark.parametrize("variant", [
    pytest.param("eager+int8", marks=needs["torchao"]),
    "frozen+int8",
    pytest.param("onnx+int8", marks=needs["onnxruntime"]),
    pytest.param("onnx+int8-static", marks=needs["onnxruntime"]),
    pytest.param("openvino+int8", marks=[needs["openvino"], needs["nncf"]]),
])
def test_int8_build_passes_the_gate_and_is_smaller(variant: str) -> None:
    model = _mlp()
    spec = VariantSpec.parse(variant)
    with torch.inference_mode():  # as the worker builds (build_variant leaves it for the build itself)
        built = build_variant(spec, model, _batch(0), device="cpu", calibration=CAL, dynamic_dims=[(0,)],
                              input_names=["x"])
    gate = check_variant(model, built, lambda s: _batch(10 + s), batches=3)
    assert gate.passed, gate.reason
    assert gate.min_cosine > 0.995
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert built.model_bytes is not None and built.model_bytes < 0.5 * fp32_bytes, (built.model_bytes, fp32_bytes)
    assert any("int8" in n for n in built.notes)
    if spec.compiler in ("onnx", "openvino") and spec.precision != "int8":
        assert any("calibrated on 4 random batches" in n and "did not see real data" in n for n in built.notes)


def test_int8_saturation_follows_the_cpus_own_features(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check reads CPUID as the kernels do: VNNI, AVX-VNNI or AMX-INT8 give an exact int32 dot product (no
    fix); an x86 part with none of them saturates u8s8 (the AVX2-only EPYCs); ARM accumulates in int32."""
    from autotune.worker.variants import isa

    base = {"avx2": True, "avx512_vnni": False, "avx_vnni": False, "amx_int8": False}
    monkeypatch.setattr(isa.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(isa, "_cpuid_features", lambda: base)
    assert "no int8 dot-product instruction" in str(isa.int8_saturation())
    for feature in isa.INT8_DOT_FEATURES:
        monkeypatch.setattr(isa, "_cpuid_features", lambda f=feature: {**base, f: True})
        assert isa.int8_saturation() is None, feature
    monkeypatch.setattr(isa.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(isa, "_cpuid_features", lambda: base)
    assert isa.int8_saturation() is None


@pytest.mark.parametrize("variant", [
    pytest.param("onnx+int8", marks=needs["onnxruntime"]),
    pytest.param("onnx+int8-static", marks=needs["onnxruntime"]),
    pytest.param("openvino+int8", marks=[needs["openvino"], needs["nncf"]]),
])
def test_int8_builds_for_a_cpu_without_vnni_use_seven_bit_weights(variant: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """The AVX2-only path (ORT ``reduce_range``, NNCF's overflow fix on every layer), built and gated on whatever
    CPU runs the suite: 7-bit weights are valid on every CPU and keep the gate; the notes say why they were used.
    On an AVX2-only CPU this is the path every int8 build takes (the full-range builds lost 0.3 of norm-wise
    accuracy there)."""
    import autotune.worker.variants.quantize as quantize

    monkeypatch.setattr(quantize, "int8_saturation", lambda: "no int8 dot-product instruction (this test)")
    model = _mlp()
    with torch.inference_mode():
        built = build_variant(VariantSpec.parse(variant), model, _batch(0), device="cpu", calibration=CAL,
                              dynamic_dims=[(0,)], input_names=["x"])
    gate = check_variant(model, built, lambda s: _batch(10 + s), batches=3)
    assert gate.passed, gate.reason
    assert any("7-bit weights" in n and "(this test)" in n for n in built.notes), built.notes


@pytest.mark.parametrize("variant", [
    pytest.param("onnx+int8-static", marks=needs["onnxruntime"]),
    pytest.param("openvino+int8", marks=[needs["openvino"], needs["nncf"]]),
])
def test_quantization_calibrated_on_constant_inputs_is_rejected(variant: str) -> None:
    """Calibrated on one constant batch, the activations' ranges collapse: outputs are far off, the gate
    rejects the variant, and top-1 answers disagree with eager's on a large share of inputs."""
    model = _mlp()
    broken = Calibration(((torch.full((16, 64), 0.5),),), "inputs")
    built = build_variant(VariantSpec.parse(variant), model, _batch(0), device="cpu", calibration=broken,
                          dynamic_dims=[(0,)], input_names=["x"])
    gate = check_variant(model, built, lambda s: _batch(10 + s), batches=3, tolerance=tolerance_for("int8"))
    assert not gate.passed
    assert gate.min_cosine < 0.9, gate.min_cosine
    assert _agreement(model, built, range(20, 28)) < 0.8
    good = build_variant(VariantSpec.parse(variant), model, _batch(0), device="cpu", calibration=CAL,
                         dynamic_dims=[(0,)], input_names=["x"])
    assert _agreement(model, good, range(20, 28)) > 0.9  # the same quantizer, calibrated sensibly


def test_bf16_build_names_the_onednn_kernels_it_ran() -> None:
    from autotune.worker.devices import cpu_native_precision

    if cpu_native_precision("bf16") is not True:
        pytest.skip("no native bf16 on this CPU")
    built = build_variant(VariantSpec.parse("eager+bf16"), _mlp(), _batch(0), device="cpu")
    note = next(n for n in built.notes if n.startswith("kernels"))
    assert "matmul" in note and ("avx512" in note or "amx" in note), note


def test_onednn_log_parsing() -> None:
    log = ("onednn_verbose,v1,info,cpu,isa:Intel AVX-512\n"
           "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_amx_bf16,undef,src:bf16,,,16x256,0.1\n"
           "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:bf16,,,64x3,0.1\n"
           "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_amx_bf16,undef,src:bf16,,,16x512,0.1\n")
    assert parse_onednn_log(log) == {"matmul brg_matmul:avx512_core_amx_bf16": 2}


# ---- the artifact in a fresh process ----------------------------------------------------------------------

FRESH = r"""
import runpy, sys
from pathlib import Path
import numpy as np
sys.modules["autotune"] = None  # the artifact must load and run without autotune
directory = Path(sys.argv[1])
ns = runpy.run_path(str(directory / "load.py"), run_name="artifact_load")
predict = ns["load"]()
x = np.load(directory.parent / "in.npy")
if "ort" in ns or "ov" in ns:
    out = predict(x)
else:
    import torch
    out = predict(torch.from_numpy(x))
out = out[0] if isinstance(out, (list, tuple)) else out
np.save(directory.parent / "out.npy", out.detach().float().numpy() if hasattr(out, "detach") else out)
"""

#: A trained classifier (recipes/labelled.py: an MLP on Gaussian clusters, trained in a second) and its held-out
#: data as the traffic: a random-weight model has no margin, so its top-1 answers flip under any rounding and
#: the default budget (99% top-1 agreement with eager) would say nothing about the quantizer.
RECIPE = """
name = "mlp-int8"
device = "cpu"
[model]
factory = "@ROOT@/recipes/labelled.py:trained_mlp"
kwargs = { in_features = 64, hidden = 256, classes = 10 }
[data]
factory = "@ROOT@/recipes/labelled.py:labelled_cluster_batches"
kwargs = { samples = 128 }
[search]
variants = ["eager"]
batch_sizes = [64]
"""


def _labelled() -> Any:
    spec = importlib.util.spec_from_file_location("recipes_labelled", ROOT / "recipes" / "labelled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deploy_and_load(tmp_path: Path, variant: str) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor]:
    from autotune.deployment import ARTIFACT_DIR, write_deployment
    from autotune.runner import Runner
    from autotune.worker.model import build_model

    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE.replace("@ROOT@", str(ROOT)))
    recipe = load_recipe(path)
    spec = VariantSpec.parse(variant)
    data = recipe.to_dict()
    data["device_resolved"] = "cpu"
    doc: dict[str, Any] = {"recipe": data, "recommendation": {"variant": spec.name, "batch_size": 64,
                                                              **spec.to_dict()}}
    write_deployment(recipe.to_dict(), doc, tmp_path, make_runner=Runner, timeout=600, profile=False)
    x = _labelled().labelled_set("clusters", samples=64, batch_size=64, seed=1)[0][0]  # unseen by calibration
    np.save(tmp_path / "in.npy", x.numpy())
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH, str(tmp_path / ARTIFACT_DIR)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert doc["artifact"]["status"] == "ok", doc["artifact"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    with torch.inference_mode():
        reference = build_model(recipe, device=torch.device("cpu"))(x)
    return doc["artifact"], reference, torch.from_numpy(np.load(tmp_path / "out.npy"))


def _check_int8_artifact(section: dict[str, Any], reference: torch.Tensor, got: torch.Tensor) -> None:
    from autotune.worker.correctness import compare_outputs

    assert section["status"] == "ok", section
    result = compare_outputs(reference, got, tolerance=tolerance_for("int8"))
    assert result.passed, result.reason
    agreement = float((reference.argmax(1) == got.argmax(1)).float().mean())
    assert agreement >= 0.99, agreement  # the default budget: top-1 agreement with eager fp32


@pytest.mark.worker
@needs["onnxruntime"]
def test_int8_static_onnx_artifact_is_the_quantized_model_and_loads_fresh(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the trained weights' cache
    section, reference, got = _deploy_and_load(tmp_path, "onnx+int8-static")
    assert "QDQ" in section["format"]
    assert any("calibrated on 2 batches" in n and "[data] factory" in n for n in section["notes"]), section["notes"]
    import onnx

    graph = onnx.load(str(tmp_path / "artifact" / "model.onnx")).graph
    assert any(n.op_type == "QuantizeLinear" for n in graph.node)  # the file is the quantized model
    names = [f["name"] for f in section["files"]]
    assert [n for n in names if n.startswith("model.")] == ["model.onnx"]  # the quantized model, no fp32 beside it
    assert {"load.py", "run.sh", "serve.py", "traffic.npz"} <= set(names)  # run.sh: its environment
    _check_int8_artifact(section, reference, got)


@pytest.mark.worker
@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    pytest.param("openvino+int8", marks=[needs["openvino"], needs["nncf"]]),
    pytest.param("eager+int8", marks=needs["torchao"]),
    "frozen+int8",
])
def test_int8_artifacts_of_every_kind_load_fresh(tmp_path: Path, variant: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    section, reference, got = _deploy_and_load(tmp_path, variant)
    if variant.startswith("openvino"):
        assert "FakeQuantize" in (tmp_path / "artifact" / "model.xml").read_text()
    if variant.startswith("eager"):
        assert "quantize_(model, Int8DynamicActivationInt8WeightConfig())" in section["loader_code"]
    _check_int8_artifact(section, reference, got)
