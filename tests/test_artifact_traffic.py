"""The artifact serves the traffic: a BERT-like keyword model with variable-length batches.

For each artifact kind that builds here, :func:`autotune.deployment.write_deployment` builds the recommendation
from a ``[data]`` recipe whose batches are dicts (``input_ids`` / ``attention_mask`` / ``token_type_ids``) of
varying length; then a **fresh process that cannot import autotune** loads it with its own ``load.py`` and
calls ``predict(**batch)`` on the data's batches cut to every batch size from 1 to the recommended one, at
every length the data has (and, with ``+buckets``, padded and cut back inside ``load.py``). The answers must
match eager fp32 on the same unpadded batches within the correctness gate's fp32 tolerance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from autotune.core.recipe import load_recipe
from autotune.deployment import ARTIFACT_DIR, LOADER_NAME, write_deployment
from autotune.report import normalise_report
from autotune.runner import Runner
from autotune.worker.correctness import compare_outputs, tolerance_for
from autotune.worker.model import build_model
from autotune.worker.variants import VariantSpec

transformers = pytest.importorskip("transformers")

HAVE_ONNX = all(__import__("importlib").util.find_spec(m) for m in ("onnxruntime", "onnx", "onnxscript"))
HAVE_OPENVINO = __import__("importlib").util.find_spec("openvino") is not None
needs_onnx = pytest.mark.skipif(not HAVE_ONNX, reason="onnx extras not installed (make install)")
needs_openvino = pytest.mark.skipif(not HAVE_OPENVINO, reason="openvino not installed (make install)")

BATCH = 4

MODELS = '''
import torch
from transformers import BertConfig, BertForSequenceClassification


def bert():
    cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return BertForSequenceClassification(cfg)


def batches(batch_size, n=3, seq_min=5, seq_max=30, seed=0):
    """Tokenised sentences padded to the longest of each batch: lengths vary between batches."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        rows = batch_size if i < n - 1 else max(1, batch_size - 1)  # the last batch is partial
        lens = torch.randint(seq_min, seq_max + 1, (rows,), generator=g)
        length = int(lens.max())
        mask = (torch.arange(length)[None, :] < lens[:, None]).long()
        ids = torch.randint(1, 200, (rows, length), generator=g) * mask
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return out
'''

RECIPE = '''
name = "tiny-bert"
device = "cpu"
[model]
factory = "models.py:bert"
[data]
factory = "models.py:batches"
buckets = [16, 32]
[search]
variants = ["eager"]
batch_sizes = [4]
'''

#: Runs in the fresh process: autotune is blocked; load.py is loaded by path; batches come from an .npz file.
FRESH = r"""
import json, runpy, sys
from pathlib import Path
import numpy as np
sys.modules["autotune"] = None  # the artifact must load and run without autotune
directory, data = Path(sys.argv[1]), np.load(sys.argv[2])
ns = runpy.run_path(str(directory / "load.py"), run_name="artifact_load")
predict = ns["load"]()
results = {}
for key in sorted({k.split("/")[0] for k in data.files}):
    batch = {name: data[f"{key}/{name}"] for name in ns["INPUTS"]}
    out = predict(**batch)
    if not isinstance(out, list):  # code artifacts return the model's own output (a ModelOutput here)
        out = list(out.values())
    for i, o in enumerate(out):
        results[f"{key}/{i}"] = o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o)
demo = ns["make_inputs"]()
demo_out = predict(**demo)
first, saved = ns["traffic_batch"](), np.load(directory / "traffic.npz")
typical = ns["_typical_key"](saved)  # which batch stands for the traffic: tests/test_traffic_typical.py
predict(**first)
three = ns["make_inputs"](3)
cycled = np.arange(3) % saved[f"{typical}.{ns['INPUTS'][0]}"].shape[0]
np.savez(sys.argv[3], **results)
print(json.dumps({"autotune": sys.modules.get("autotune") is not None, "torch": "torch" in sys.modules,
                  "traffic_first": all(np.array_equal(np.asarray(first[n]), saved[f"{typical}.{n}"])
                                       for n in ns["INPUTS"]),
                  "demo_is_traffic": all(np.array_equal(np.asarray(demo[n]), saved[f"{typical}.{n}"])
                                         for n in ns["INPUTS"]),
                  "three_cycled": all(np.array_equal(np.asarray(three[n]), saved[f"{typical}.{n}"][cycled])
                                      for n in ns["INPUTS"]),
                  "demo": sorted(demo), "demo_rows": int(next(iter(demo.values())).shape[0]),
                  "outputs": ns["OUTPUTS"], "n_demo_out": len(demo_out) if isinstance(demo_out, list) else -1}))
"""


@pytest.fixture(scope="module")
def recipe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bert")
    (d / "models.py").write_text(textwrap.dedent(MODELS))
    (d / "recipe.toml").write_text(RECIPE)
    return d


def _traffic_batches(recipe_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The data's batches cut to 1, 2 .. BATCH rows: every length of the data, every batch size."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_bert_models", recipe_dir / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.batches(BATCH)
    out = {}
    for i, b in enumerate(data):
        rows = int(b["input_ids"].shape[0])
        for r in sorted({1, 2, rows}):
            out[f"b{i}r{r}"] = {k: v[:r] for k, v in b.items()}
    return out


def _deploy_and_check(tmp_path: Path, recipe_dir: Path, variant: str) -> dict[str, Any]:
    recipe = load_recipe(recipe_dir / "recipe.toml")
    spec = VariantSpec.parse(variant)
    data = recipe.to_dict()
    data["device_resolved"] = "cpu"
    doc: dict[str, Any] = {"recipe": data,
                           "recommendation": {"variant": spec.name, "batch_size": BATCH, **spec.to_dict()}}
    write_deployment(recipe.to_dict(), doc, tmp_path, make_runner=Runner, timeout=600, profile=False)
    section = doc["artifact"]
    assert section["status"] == "ok", section
    iface = section["interface"]
    assert iface["form"] == "dict" and [x["name"] for x in iface["inputs"]] == [
        "input_ids", "attention_mask", "token_type_ids"]
    assert all(x["dynamic_dims"] == [0, 1] for x in iface["inputs"]), iface
    assert [o["name"] for o in iface["outputs"]] == ["logits"] and iface["outputs"][0]["path"] == "['logits']"
    normalise_report({"schema": 1, "recipe": doc["recipe"], "environment": {}, "search": {}, "candidates": [],
                      "recommendation": None, "artifact": section})  # the section fits the schema

    batches = _traffic_batches(recipe_dir)
    assert len({int(b["input_ids"].shape[1]) for b in batches.values()}) >= 2, "the lengths must vary"
    assert {int(b["input_ids"].shape[0]) for b in batches.values()} == set(range(1, BATCH + 1))
    np.savez(tmp_path / "in.npz", **{f"{k}/{n}": t.numpy() for k, b in batches.items() for n, t in b.items()})
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH, str(tmp_path / ARTIFACT_DIR), str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["autotune"] is False
    # python load.py runs the saved traffic's typical batch, not a random one (random ids are not inputs every model
    # takes: a BART classifier needs an <eos> in every row, session 38)
    assert info["traffic_first"] is True
    # so is make_inputs(): the traffic's typical batch, its rows repeated in turn to the size asked (a plain process
    # timing a BART artifact on random make_inputs() failed the same way)
    assert info["demo_is_traffic"] is True and info["three_cycled"] is True
    main = subprocess.run([sys.executable, str(tmp_path / ARTIFACT_DIR / LOADER_NAME)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert main.returncode == 0 and "outputs:" in main.stdout, main.stderr[-2000:]
    assert info["demo"] == ["attention_mask", "input_ids", "token_type_ids"] and info["outputs"] == ["logits"]
    got = np.load(tmp_path / "out.npz")
    model = build_model(recipe, device=torch.device("cpu"))
    tolerance = tolerance_for("fp32")
    for key, batch in batches.items():
        with torch.inference_mode():
            reference = model(**batch).logits
        result = compare_outputs([reference], [torch.from_numpy(got[f"{key}/0"])], tolerance=tolerance)
        assert result.passed, f"{variant} on {key} {tuple(batch['input_ids'].shape)}: {result.reason}"
    return {"section": section, "info": info, "loader": (tmp_path / ARTIFACT_DIR / LOADER_NAME).read_text()}


#: The default suite keeps one of each runtime (and the buckets); the rest are `slow` (make test within ~10 min).
_SLOW = pytest.mark.slow


@pytest.mark.worker
@pytest.mark.parametrize("variant", [
    pytest.param("onnx", marks=[needs_onnx, _SLOW]),
    pytest.param("onnx+buckets", marks=[needs_onnx, _SLOW]),  # eager+buckets keeps the buckets in make test
    pytest.param("openvino", marks=needs_openvino),
    pytest.param("openvino:throughput", marks=[needs_openvino, _SLOW]),
])
def test_runtime_artifact_serves_every_batch_size_and_length(tmp_path: Path, recipe_dir: Path, variant: str) -> None:
    out = _deploy_and_check(tmp_path, recipe_dir, variant)
    assert out["info"]["torch"] is False, "a runtime's load.py must not need torch"
    notes = " ".join(out["section"]["notes"])
    assert "dynamic dims input_ids[0, 1]" in notes, notes
    if variant.endswith("+buckets"):
        assert out["section"]["runtime"]["buckets"]["buckets"] == [16, 32]
        assert "_pad(arrays)" in out["loader"]
    # the exported graph's inputs and outputs carry the batch's names and the output's path
    if variant.startswith("onnx"):
        import onnxruntime as ort

        session = ort.InferenceSession(str(tmp_path / ARTIFACT_DIR / "model.onnx"))
        names = [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]
    else:
        import openvino as ov

        model = ov.Core().read_model(str(tmp_path / ARTIFACT_DIR / "model.xml"))
        names = [i.get_any_name() for i in model.inputs], [o.get_any_name() for o in model.outputs]
        assert all(i.get_partial_shape()[1].is_dynamic for i in model.inputs)
    assert names == (["input_ids", "attention_mask", "token_type_ids"], ["logits"])


@pytest.mark.worker
@pytest.mark.parametrize("variant", [pytest.param("trace", marks=_SLOW), pytest.param("eager", marks=_SLOW),
                                     "eager+buckets", pytest.param("trace+buckets", marks=_SLOW)])
def test_torch_artifact_serves_every_batch_size_and_length(tmp_path: Path, recipe_dir: Path, variant: str) -> None:
    out = _deploy_and_check(tmp_path, recipe_dir, variant)
    assert out["section"]["kind"] == ("torchscript" if variant.startswith("trace") else "code")


@pytest.mark.slow  # its kind runs in the default suite too (make test within ~10 min: issue 31)
@pytest.mark.worker
def test_aoti_artifact_serves_every_batch_size_and_length(tmp_path: Path, recipe_dir: Path) -> None:
    out = _deploy_and_check(tmp_path, recipe_dir, "export")
    assert out["section"]["kind"] == "aoti"
    assert "returns the output's leaves" in " ".join(out["section"]["notes"])


# ---- the fixed-shape case: [[inputs]] only, the batch dim is still dynamic --------------------------------

FRESH_POSITIONAL = r"""
import json, runpy, sys
from pathlib import Path
import numpy as np
sys.modules["autotune"] = None
directory, data = Path(sys.argv[1]), np.load(sys.argv[2])
ns = runpy.run_path(str(directory / "load.py"), run_name="artifact_load")
predict = ns["load"]()
results = {key: predict(data[key])[0] for key in data.files}  # one positional input, one output
np.savez(sys.argv[3], **{k: v.detach().cpu().numpy() if hasattr(v, "detach") else v for k, v in results.items()})
print(json.dumps({"demo_rows": int(ns["make_inputs"]()[0].shape[0])}))
"""


@pytest.mark.worker
@pytest.mark.parametrize("variant", [
    pytest.param("onnx", marks=[needs_onnx, _SLOW]),  # frozen keeps this kind in make test (issue 31)
    pytest.param("openvino:throughput", marks=[needs_openvino, _SLOW]),
    "frozen",
    pytest.param("export", marks=_SLOW),
])
def test_fixed_shape_artifact_takes_every_batch_size_up_to_the_recommended_one(tmp_path: Path, variant: str) -> None:
    """No [data]: the measured and shipped model is built at batch 4 with dim 0 dynamic (README: a dynamic batch
    dim measured as fast as a static one), so a service's partial batches of 1-3 rows need no padding."""
    from tests.support import MODELS, tiny_recipe

    (tmp_path / "recipe.toml").write_text(tiny_recipe().replace("@MODELS@", str(MODELS)))
    recipe = load_recipe(tmp_path / "recipe.toml")
    spec = VariantSpec.parse(variant)
    data = recipe.to_dict()
    data["device_resolved"] = "cpu"
    doc: dict[str, Any] = {"recipe": data,
                           "recommendation": {"variant": spec.name, "batch_size": BATCH, **spec.to_dict()}}
    write_deployment(recipe.to_dict(), doc, tmp_path, make_runner=Runner, timeout=600, profile=False)
    assert doc["artifact"]["status"] == "ok", doc["artifact"]
    assert all(x["dynamic_dims"] == [0] for x in doc["artifact"]["interface"]["inputs"])
    batches = {f"r{r}": torch.randn(r, 3, 8, 8, generator=torch.Generator().manual_seed(r))
               for r in range(1, BATCH + 1)}
    np.savez(tmp_path / "in.npz", **{k: v.numpy() for k, v in batches.items()})
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH_POSITIONAL, str(tmp_path / ARTIFACT_DIR),
                           str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["demo_rows"] == BATCH
    got = np.load(tmp_path / "out.npz")
    model = build_model(recipe, device=torch.device("cpu"))
    for key, x in batches.items():
        with torch.inference_mode():
            reference = model(x)
        result = compare_outputs([reference], [torch.from_numpy(got[key])], tolerance=tolerance_for("fp32"))
        assert result.passed, f"{variant} at {key}: {result.reason}"


# ---- the loader's text is safe for any names -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["onnx", "openvino", "torchscript", "aoti", "code"])
def test_loader_text_pastes_names_safely(tmp_path: Path, kind: str) -> None:
    """Input names, output paths and the recipe's name come from the user: they land in constants (repr) and
    in the docstring, never as code; the text compiles and imports nothing but what the kind needs."""
    import ast

    from autotune.report.loader import loader_script

    evil = 'x"""\nimport os  #'
    iface = {"source": "factory", "form": "dict", "batch_size": 2, "batch_rows": [2], "shapes": ["a"],
             "dynamic_sizes": {evil + "[1]": [3, 4]},
             "inputs": [{"name": "class", "keyword": True, "dtype": "int64", "shape": [2, 3], "range": [0, 5],
                         "dynamic_dims": [0, 1]},
                        {"name": evil, "keyword": True, "dtype": "float32", "shape": [2, 3], "range": None,
                         "dynamic_dims": [0, 1]}],
             "outputs": [{"name": "logits", "path": evil, "dtype": "float32", "shape": [2, 2]}]}
    runtime = {"buckets": {"buckets": [4, 8], "output_dims": [[0, 1]],
                           "inputs": [{"name": evil, "dims": [1], "pad_value": 0.0}]}}
    doc = {"recipe": {"name": "evil\nimport os", "device": "cpu", "inputs": [],
                      "model": {"factory": "torch.nn:Identity", "kwargs": {}}},
           "recommendation": {"variant": "eager", "batch_size": 2, "compiler": "eager", "precision": "fp32"},
           "artifact": {"status": "ok", "kind": kind, "variant": "v", "batch_size": 2, "threads": 1,
                        "runtime": runtime, "files": [], "format": "f", "interface": iface}}
    text = loader_script(doc)
    assert text is not None
    tree = ast.parse(text)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                            if isinstance(node, ast.ImportFrom) and node.module}
    assert "os" not in imported and "autotune" not in imported, imported
    namespace: dict[str, Any] = {"__name__": "artifact_load", "__file__": str(tmp_path / "load.py")}
    if kind in ("onnx", "openvino"):
        pytest.importorskip("onnxruntime" if kind == "onnx" else "openvino")
    exec(compile(text, "load.py", "exec"), namespace)  # defines the names; loads nothing yet
    assert namespace["INPUTS"] == ["class", evil] and namespace["OUTPUTS"] == ["logits"]
    batch = namespace["make_inputs"]()
    assert sorted(batch) == sorted(["class", evil]) and tuple(batch["class"].shape) == (2, 3)
    with pytest.raises(TypeError, match="keyword inputs"):
        namespace["_flatten"]((1,), {})
