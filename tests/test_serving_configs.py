"""The serving recommendation for Triton, TorchServe and Ray Serve: the texts carry the recommendation's values,
Triton's parses as its ModelConfig (protobuf text format) where tritonclient's generated module is installed."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from autotune.serving.configs import (
    RAY_FILE,
    TORCHSERVE_FILE,
    ServingPlan,
    plan_from_document,
    server_configs,
    triton_config,
    triton_file,
)

IMAGE = {"form": "tensor", "inputs": [{"name": "images", "keyword": False, "dtype": "float32", "shape": [8, 3, 32, 32],
                                        "range": None, "dynamic_dims": [0]}],
         "outputs": [{"name": "logits", "path": "", "dtype": "float32", "shape": [8, 10]}],
         "batch_size": 8, "batch_rows": [8], "dynamic_sizes": {}, "shapes": []}
TEXT = {"form": "dict", "inputs": [
    {"name": "input_ids", "keyword": True, "dtype": "int64", "shape": [4, 17], "range": [0, 1000],
     "dynamic_dims": [0, 1]},
    {"name": "attention_mask", "keyword": True, "dtype": "int64", "shape": [4, 17], "range": [0, 2],
     "dynamic_dims": [0, 1]},
    {"name": "lengths", "keyword": True, "dtype": "int32", "shape": [4], "range": [1, 64], "dynamic_dims": [0]}],
    "outputs": [{"name": "hidden", "path": "[0]", "dtype": "float32", "shape": [4, 17, 64]},
                {"name": "pooled", "path": "[1]", "dtype": "float32", "shape": [4, 64]}],
    "batch_size": 4, "dynamic_sizes": {"input_ids[1]": [9, 17, 33], "attention_mask[1]": [9, 17, 33]}}


def _plan(**overrides: Any) -> ServingPlan:
    values: dict[str, Any] = {"model_name": "resnet", "kind": "onnx", "variant": "onnx", "instances": 2,
                              "threads": 3, "max_batch": 8, "max_delay_ms": 2.0, "interface": IMAGE}
    return ServingPlan(**{**values, **overrides})


def _model_config_module() -> Any:
    """tritonclient's generated ModelConfig module, loaded from its file (its package needs grpc); or a skip."""
    pytest.importorskip("google.protobuf")
    found = importlib.util.find_spec("tritonclient")
    if found is None or found.origin is None:
        pytest.skip("tritonclient is not installed")
    path = Path(found.origin).parent / "grpc" / "model_config_pb2.py"
    if not path.is_file():
        pytest.skip("tritonclient has no model_config_pb2")
    spec = importlib.util.spec_from_file_location("_autotune_test_model_config_pb2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse_triton(text: str) -> Any:
    from google.protobuf import text_format

    return text_format.Parse(text, _model_config_module().ModelConfig())


def test_the_three_files_for_an_onnx_artifact() -> None:
    result = server_configs(_plan())
    assert set(result.files) == {triton_file("resnet"), TORCHSERVE_FILE, RAY_FILE} == \
        {"triton/resnet/config.pbtxt", "torchserve/config.properties", "ray/serve_deployment.py"}
    assert result.skipped == {}
    triton = result.files["triton/resnet/config.pbtxt"]
    for expected in ('name: "resnet"', 'platform: "onnxruntime_onnx"', "max_batch_size: 8", "data_type: TYPE_FP32",
                     "dims: [ 3, 32, 32 ]", "dims: [ 10 ]", "count: 2", "kind: KIND_CPU",
                     "max_queue_delay_microseconds: 2000",
                     'parameters { key: "intra_op_thread_count" value: { string_value: "3" } }'):
        assert expected in triton
    assert any(n.startswith("triton: copy model.onnx") for n in result.notes)
    # structurally protobuf text without protobuf: balanced blocks, one "key: value" or block per line
    body = [line.strip() for line in triton.splitlines() if not line.startswith("#")]
    assert triton.count("{") == triton.count("}") and triton.count("[") == triton.count("]")
    assert all(re.fullmatch(r'(\w+ \[|\w+ \{|\w+: .+|\{|\},?|\]|parameters \{ .+ \})', line) for line in body), body


def test_triton_parses_as_its_model_config() -> None:
    config = _parse_triton(server_configs(_plan()).files["triton/resnet/config.pbtxt"])
    assert (config.name, config.platform, config.max_batch_size) == ("resnet", "onnxruntime_onnx", 8)
    assert [(i.name, list(i.dims)) for i in config.input] == [("images", [3, 32, 32])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("logits", [10])]
    assert config.input[0].data_type == _model_config_module().TYPE_FP32
    assert (config.instance_group[0].count, config.instance_group[0].kind) == (2, _model_config_module().
                                                                              ModelInstanceGroup.KIND_CPU)
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert config.parameters["intra_op_thread_count"].string_value == "3"


def test_triton_marks_dynamic_dims_and_the_outputs_that_follow_them() -> None:
    text, reason, notes = triton_config(_plan(interface=TEXT, max_batch=4, max_delay_ms=0.5))
    assert text is not None and reason == ""
    config = _parse_triton(text)
    assert [(i.name, list(i.dims)) for i in config.input] == [("input_ids", [-1]), ("attention_mask", [-1]),
                                                              ("lengths", [1])]
    assert list(config.input[2].reshape.shape) == []  # one value per sample: [1] reshaped to []
    assert config.input[0].data_type == _model_config_module().TYPE_INT64
    assert [(o.name, list(o.dims)) for o in config.output] == [("hidden", [-1, 64]), ("pooled", [64])]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert any("-1" in n for n in notes)


def test_triton_marks_an_output_dim_the_server_saw_follow_the_length() -> None:
    """An audio encoder's frame count follows the input's length without equalling it (Wav2Vec2: 14,208 samples,
    44 frames): only the server's check at start saw it move, and Triton must then take any length there (it had
    declared 44: every other length would be refused)."""
    audio = {"form": "dict", "inputs": [
        {"name": "input_values", "keyword": True, "dtype": "float32", "shape": [4, 14208], "range": None,
         "dynamic_dims": [0, 1]}],
        "outputs": [{"name": "logits", "path": "", "dtype": "float32", "shape": [4, 44, 32]}],
        "batch_size": 4, "dynamic_sizes": {"input_values[1]": [8192, 14208]}}
    text, _, _ = triton_config(_plan(interface=audio, max_batch=4))
    assert text is not None and "dims: [ 44, 32 ]" in text
    text, _, _ = triton_config(_plan(interface=audio, max_batch=4, output_dynamic_dims={"logits": (1,)}))
    assert text is not None and "dims: [ -1, 32 ]" in text
    assert [(o.name, list(o.dims)) for o in _parse_triton(text).output] == [("logits", [-1, 32])]


def test_requests_that_cannot_share_a_call_are_never_batched_by_the_other_servers() -> None:
    """CLIP's logits_per_image is (rows, rows): at the interface's batch 4 it reads [4, 4]. Where the server found
    that merging requests changes an answer, Triton declares that dim -1 and has no dynamic batcher, and TorchServe
    and Ray Serve take one request per call."""
    clip = {"form": "dict", "inputs": [
        {"name": "pixel_values", "keyword": True, "dtype": "float32", "shape": [4, 3, 32, 32], "range": None,
         "dynamic_dims": [0]}],
        "outputs": [{"name": "logits_per_image", "path": "", "dtype": "float32", "shape": [4, 4]},
                    {"name": "image_embeds", "path": "", "dtype": "float32", "shape": [4, 32]}],
        "batch_size": 4, "dynamic_sizes": {}}
    plan = _plan(interface=clip, max_batch=4, merge_requests=False, output_batch_dims={"logits_per_image": (1,)})
    text, _, _ = triton_config(plan)
    assert text is not None
    config = _parse_triton(text)
    assert [(o.name, list(o.dims)) for o in config.output] == [("logits_per_image", [-1]), ("image_embeds", [32])]
    assert not config.HasField("dynamic_batching")
    files = server_configs(plan).files
    assert '"batchSize": 1' in files[TORCHSERVE_FILE] and "max_batch_size=1," in files[RAY_FILE]
    merged = _parse_triton(triton_config(_plan(interface=clip, max_batch=4))[0] or "")
    assert merged.HasField("dynamic_batching")


def test_triton_for_openvino_and_torchscript() -> None:
    ov = _parse_triton(triton_config(_plan(kind="openvino", runtime={"config": {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 4, "INFERENCE_PRECISION_HINT": "bf16"}}))[0] or "")
    assert (ov.backend, ov.platform) == ("openvino", "")
    assert ov.parameters["INFERENCE_NUM_THREADS"].string_value == "3"
    assert ov.parameters["PERFORMANCE_HINT"].string_value == "LATENCY"
    assert ov.parameters["HINT_BF16"].string_value == "YES"
    text, _, notes = triton_config(_plan(kind="torchscript", variant="frozen", precision="bf16",
                                         runtime={"optimize_for_inference": True}))
    ts = _parse_triton(text or "")
    assert ts.platform == "pytorch_libtorch"
    assert [i.name for i in ts.input] == ["INPUT__0"] and [o.name for o in ts.output] == ["OUTPUT__0"]
    assert ts.input[0].data_type == ts.output[0].data_type == _model_config_module().TYPE_BF16
    assert ts.parameters["INTRA_OP_THREAD_COUNT"].string_value == "3"
    assert any("INPUT__0" in n for n in notes) and any("optimize_for_inference" in n for n in notes)


@pytest.mark.parametrize(("kind", "words"), [("aoti", "AOTInductor"), ("code", "no file form")])
def test_no_triton_config_where_a_backend_cannot_load_the_artifact(kind: str, words: str) -> None:
    result = server_configs(_plan(kind=kind, variant="compile"))
    assert "triton/resnet/config.pbtxt" not in result.files
    assert words in result.skipped["triton"] and "Python backend" in result.skipped["triton"]
    assert any(n.startswith("triton: no config.pbtxt") for n in result.notes)
    assert {TORCHSERVE_FILE, RAY_FILE} <= set(result.files)  # both run load.py, whatever the kind


def test_no_triton_config_without_an_interface_or_with_a_non_tensor_output() -> None:
    assert triton_config(_plan(interface=None))[0] is None
    odd = dict(IMAGE, outputs=[{"name": "count", "path": "", "dtype": "int", "shape": None}])
    text, reason, _ = triton_config(_plan(interface=odd))
    assert text is None and "'count'" in reason


def test_torchserve_properties() -> None:
    result = server_configs(_plan(max_delay_ms=2.5))
    text = result.files[TORCHSERVE_FILE]
    assert "load_models=resnet.mar" in text and "default_workers_per_model=2" in text
    assert "OMP_NUM_THREADS=3" in text
    start = text.index("\nmodels=") + len("\nmodels=")
    models = json.loads(text[start:].replace("\\\n", "\n"))  # the property continues over lines ending in "\"
    assert models == {"resnet": {"1.0": {"defaultVersion": True, "marName": "resnet.mar", "minWorkers": 2,
                                         "maxWorkers": 2, "batchSize": 8, "maxBatchDelay": 3,
                                         "responseTimeout": 120}}}
    assert all(line.endswith("\\") for line in text[start:].splitlines()[:-2])
    assert any("2.5 ms is written as 3" in n for n in result.notes)
    assert any("OMP_NUM_THREADS=3" in n for n in result.notes)


def test_ray_deployment() -> None:
    text = server_configs(_plan(max_delay_ms=5.0, variant='onnx"""; import os')).files[RAY_FILE]
    tree = ast.parse(text)  # valid Python, and the variant name stayed inside the docstring
    assert not any(isinstance(node, ast.Import) and any(a.name == "os" for a in node.names) for node in tree.body)
    assert "@serve.deployment(num_replicas=2, ray_actor_options={\"num_cpus\": 3})" in text
    assert "@serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)" in text
    assert 'ARTIFACT / "load.py"' in text and "THREADS = 3" in text


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "apart"])
def test_ray_batching_pads_calls_and_cuts_back(tmp_path: Path, merge: bool) -> None:
    """The deployment's batch function for real, with a stand-in for ray and a load.py of dynamic length; where
    the server found that merging lengths changes an answer (a strided output), each length is called apart."""
    import asyncio
    import sys
    import types

    import numpy as np

    artifact = tmp_path / "artifact"
    (artifact / "ray").mkdir(parents=True)
    (artifact / "load.py").write_text(
        "INPUTS = ['ids']\nSAMPLE = [('int64', [2, 5], None)]\nOUTPUTS = ['doubled']\n"
        "def _form(xs):\n    return xs[0]\n"
        + ("def load():\n    return lambda ids: [ids * 2]\n" if merge else
           "def load():\n    return lambda ids: [ids[:, ::2] * 2]\n"))
    module_file = artifact / "ray" / "serve_deployment.py"
    module_file.write_text(server_configs(_plan(max_batch=4, merge_lengths=merge)).files[RAY_FILE])
    fake = types.ModuleType("ray")
    serve = types.SimpleNamespace(deployment=lambda **kw: (lambda cls: types.SimpleNamespace(cls=cls, bind=lambda: 0)),
                                  batch=lambda **kw: (lambda f: f))
    fake.serve = serve  # type: ignore[attr-defined]
    starlette = types.ModuleType("starlette.requests")
    starlette.Request = object  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in ("ray", "starlette", "starlette.requests")}
    sys.modules.update({"ray": fake, "starlette": types.ModuleType("starlette"), "starlette.requests": starlette})
    try:
        spec = importlib.util.spec_from_file_location("_autotune_test_ray_deployment", module_file)
        assert spec is not None and spec.loader is not None
        deployment = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(deployment)
        model = deployment.Model.cls()
        a, b = np.array([[1, 2, 3]]), np.array([[4, 5, 6, 7, 8], [9, 9, 9, 9, 9]])
        first, second = asyncio.run(model.infer([[a], [b]]))
        # a 2 x 3 and a 3 x 2 "image" pad to 3 x 3: each answer is cut back to its own height and width (both had
        # taken the height's length, session 47)
        tall, wide = asyncio.run(model.infer([[np.ones((1, 2, 3), np.int64)], [np.ones((1, 3, 2), np.int64)]]))
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    if merge:
        assert tall[0].shape == (1, 2, 3) and wide[0].shape == (1, 3, 2) and int(tall[0].sum()) == 12
        assert first[0].tolist() == [[2, 4, 6]]  # padded to 5 for the call, cut back to its own 3
        assert second[0].tolist() == [[8, 10, 12, 14, 16], [18, 18, 18, 18, 18]]
    else:  # merged, the short one would get 3 values, 2 of its own and one of padding
        assert first[0].tolist() == [[2, 6]]
        assert second[0].tolist() == [[8, 12, 16], [18, 18, 18]]


def test_environment_and_batch_notes() -> None:
    notes = server_configs(_plan(environment="jemalloc", batch_size=4)).notes
    assert any("jemalloc" in n for n in notes)
    assert any("max batch 8 exceeds the 4 rows" in n for n in notes)
    assert not any("process environment" in n for n in server_configs(_plan(environment="glibc")).notes)


@pytest.mark.parametrize("bad", [{"instances": 0}, {"threads": True}, {"max_batch": 1.5}, {"max_delay_ms": -1},
                                 {"max_delay_ms": float("nan")}, {"model_name": "../etc"}, {"model_name": ""}])
def test_a_plan_refuses_values_that_are_no_configuration(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _plan(**bad)


def test_plan_from_document() -> None:
    doc: dict[str, Any] = {
        "candidates": [{"variant": "frozen", "precision": "bf16", "batch_size": 8}],
        "artifact": {"status": "ok", "variant": "frozen", "kind": "torchscript", "batch_size": 8,
                     "interface": IMAGE, "runtime": {"optimize_for_inference": True},
                     "files": [{"name": "model.pt", "bytes": 10}, {"name": "load.py", "bytes": 5}]},
        "serving": {"model_name": "quick", "recommendation": {
            "variant": "frozen", "environment": "jemalloc", "instances": 2, "threads": 1, "max_batch": 8,
            "max_delay_ms": 2.0, "max_rate": 400.0}},
    }
    plan = plan_from_document(doc)
    assert plan is not None
    assert (plan.model_name, plan.kind, plan.precision, plan.instances, plan.threads, plan.files) == (
        "quick", "torchscript", "bf16", 2, 1, ("model.pt", "load.py"))
    assert plan.merge_lengths and plan.output_dynamic_dims is None  # an older report: merged, nothing seen
    apart = plan_from_document({**doc, "serving": {**doc["serving"], "merge_lengths": False,
                                                    "output_dynamic_dims": {"logits": [1], "bad": "x"}}})
    assert apart is not None and not apart.merge_lengths and apart.output_dynamic_dims == {"logits": (1,)}
    assert "MERGE_LENGTHS = False" in server_configs(apart).files[RAY_FILE]
    assert plan.merge_requests and plan.output_batch_dims is None
    alone = plan_from_document({**doc, "serving": {**doc["serving"], "merge_requests": False,
                                                    "output_batch_dims": {"logits_per_image": [1]}}})
    assert alone is not None and not alone.merge_requests and alone.output_batch_dims == {"logits_per_image": (1,)}
    files = server_configs(plan).files
    assert re.search(r'name: "quick"', files["triton/quick/config.pbtxt"])
    assert plan_from_document({**doc, "artifact": {"status": "failed", "reason": "x"}}) is None
    assert plan_from_document({**doc, "serving": {"status": "failed", "reason": "x"}}) is None
    other = {**doc, "serving": {**doc["serving"], "recommendation": {**doc["serving"]["recommendation"],
                                                                     "variant": "onnx"}}}
    assert plan_from_document(other) is None
    broken = {**doc, "serving": {**doc["serving"], "recommendation": {**doc["serving"]["recommendation"],
                                                                      "instances": -1}}}
    assert plan_from_document(broken) is None


def test_a_gpu_artifacts_instances_are_placed_on_its_gpu() -> None:
    """A run on cuda:1 ships configurations that put the instances on that GPU, as autotune measured them (the
    first GPU serving run, session 47, wrote Triton's KIND_CPU for a CUDA TorchScript artifact)."""
    plan = _plan(kind="torchscript", variant="frozen", device="cuda:1")
    assert plan.gpu_index == 1 and _plan(device="cuda").gpu_index == 0 and _plan().gpu_index is None
    result = server_configs(plan)
    triton = result.files["triton/resnet/config.pbtxt"]
    assert "kind: KIND_GPU" in triton and "gpus: [ 1 ]" in triton and "KIND_CPU" not in triton
    assert "number_of_gpu=1" in result.files[TORCHSERVE_FILE]
    assert any("CUDA_VISIBLE_DEVICES=1" in n for n in result.notes)
    ray = result.files[RAY_FILE]
    ast.parse(ray)
    assert 'ray_actor_options={"num_cpus": 3, "num_gpus": 0.5}' in ray
    assert any("1/2 of a GPU" in n and "cuda:0 there" in n for n in result.notes)
    cpu = server_configs(_plan())
    assert "number_of_gpu" not in cpu.files[TORCHSERVE_FILE] and "num_gpus" not in cpu.files[RAY_FILE]
    # another accelerator: no Triton file, and the reason says why
    text, reason, _ = triton_config(_plan(device="xpu"))
    assert text is None and "xpu" in reason


def test_the_gpu_placement_parses_as_tritons_model_config() -> None:
    config = _parse_triton(server_configs(_plan(device="cuda")).files["triton/resnet/config.pbtxt"])
    group = config.instance_group[0]
    assert (group.count, group.kind, list(group.gpus)) == (2, _model_config_module().ModelInstanceGroup.KIND_GPU,
                                                           [0])


def test_plan_from_document_reads_the_runs_device() -> None:
    doc: dict[str, Any] = {
        "recipe": {"device": "auto", "device_resolved": "cuda"},
        "artifact": {"status": "ok", "variant": "frozen", "kind": "torchscript", "batch_size": 8, "interface": IMAGE},
        "serving": {"model_name": "quick", "recommendation": {
            "variant": "frozen", "instances": 2, "threads": 1, "max_batch": 4, "max_delay_ms": 0.0}},
    }
    plan = plan_from_document(doc)
    assert plan is not None and plan.device == "cuda"
    older = plan_from_document({**doc, "recipe": {"device": "auto"}})
    assert older is not None and older.device == "cpu"
