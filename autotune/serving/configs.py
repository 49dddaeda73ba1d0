"""The serving recommendation for other servers: Triton's ``config.pbtxt``, TorchServe's ``config.properties`` and
a Ray Serve deployment, as text (pure: nothing here reads or writes a file).

The serving search measured one configuration on autotune's own server: ``instances`` processes of ``threads``
intra-op threads each behind one dynamic batcher that dispatches at ``max_batch`` samples or when the oldest
request has waited ``max_delay_ms``. Every major server has the same knobs under other names, so the numbers carry
over (the latency will not be identical: each server has its own front end and copies), and a team that runs one
of them need not translate by hand:

* Triton (https://github.com/triton-inference-server): ``instance_group [{ count: N kind: KIND_CPU }]``,
  ``max_batch_size``, ``dynamic_batching { max_queue_delay_microseconds }`` and the backend's thread count
  (ONNX Runtime's ``intra_op_thread_count``, OpenVINO's ``INFERENCE_NUM_THREADS``, PyTorch's
  ``INTRA_OP_THREAD_COUNT``). Only for an artifact a Triton backend loads by itself: ONNX (``onnxruntime_onnx``),
  OpenVINO IR (``backend: "openvino"``) or TorchScript (``pytorch_libtorch``, whose tensors are named
  ``<name>__<index>`` by position). An AOTInductor package or the code of an eager/compile variant needs
  Triton's Python backend around ``load.py``, which is not written: the reason is returned instead.
* TorchServe: the ``models`` property's ``minWorkers``/``maxWorkers`` (instances), ``batchSize`` and
  ``maxBatchDelay`` (whole milliseconds); torch's threads per worker are not a TorchServe setting
  (``OMP_NUM_THREADS`` in its environment, or ``torch.set_num_threads`` in the handler).
* Ray Serve: ``@serve.deployment(num_replicas=N, ray_actor_options={"num_cpus": T})`` around
  ``@serve.batch(max_batch_size=B, batch_wait_timeout_s=D / 1000)``, calling the artifact's ``load.py``.

:func:`server_configs` takes a :class:`ServingPlan` (:func:`plan_from_document` reads one from report.json's
``serving.recommendation`` and ``artifact``) and returns the files by relative path, the notes on what each leaves
to the user, and the servers skipped with the reason. Longer than most modules (~500 lines): a fifth of it is the
Ray Serve deployment's text.

Values from a report are untrusted: names are written as quoted strings (JSON escapes, which protobuf text and
Python both read), numbers are checked to be numbers, and no value becomes code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.core.device_names import cuda_index, is_accelerator
from autotune.core.recipe.spec import MODEL_NAME_PATTERN

#: The artifact kinds a Triton backend loads without Python code: kind -> the config's backend line.
TRITON_BACKENDS = {
    "onnx": 'platform: "onnxruntime_onnx"',
    "openvino": 'backend: "openvino"',
    "torchscript": 'platform: "pytorch_libtorch"',
}
#: The model file each Triton backend looks for in ``<model>/1/`` by default, per artifact kind.
TRITON_MODEL_FILES = {"onnx": "model.onnx", "openvino": "model.xml", "torchscript": "model.pt"}
#: torch / numpy dtype names (the artifact interface's) -> Triton's data types.
TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
    "int64": "TYPE_INT64", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
}
_REDUCED = {"bf16": "bfloat16", "fp16": "float16"}
#: The files :func:`server_configs` returns, by server (Triton's under the model's name).
TORCHSERVE_FILE = "torchserve/config.properties"
RAY_FILE = "ray/serve_deployment.py"


def triton_file(model_name: str) -> str:
    return f"triton/{model_name}/config.pbtxt"


@dataclass(frozen=True)
class ServingPlan:
    """What the configuration files say: the served model and the serving recommendation's knobs.

    ``interface`` is the artifact's (report.json ``artifact.interface``: ``inputs`` with ``name``, ``dtype``,
    ``shape`` (the first batch's, batch dim included) and ``dynamic_dims`` (dims of the full tensor, 0 the
    batch); ``outputs`` with ``name``, ``dtype`` and ``shape``; ``dynamic_sizes``). ``runtime`` is the
    artifact's ``runtime`` (OpenVINO's ``config``), ``precision`` the variant's, ``environment`` its process
    environment's name, ``batch_size`` the largest batch the artifact takes.
    """

    model_name: str
    kind: str  # the artifact's kind: onnx | openvino | torchscript | aoti | code
    variant: str
    instances: int
    threads: int
    max_batch: int
    max_delay_ms: float
    interface: Mapping[str, Any] | None = None
    precision: str = "fp32"
    runtime: Mapping[str, Any] | None = None
    environment: str | None = None
    batch_size: int | None = None
    #: the artifact's files (for the copy commands in the notes)
    files: tuple[str, ...] = ()
    #: whether requests of different lengths may share one padded call (the server's check at start, report.json
    #: ``serving.merge_lengths``), and per output the dims that follow the input's length (``output_dynamic_dims``:
    #: an audio encoder's frame count, which equals no input dim)
    merge_lengths: bool = True
    output_dynamic_dims: Mapping[str, Sequence[int]] | None = None
    #: whether two requests may share a call at all (``serving.merge_requests``: False where an output couples the
    #: call's rows, CLIP's ``(rows, rows)`` logits), and per output the non-batch dims that follow the call's rows
    merge_requests: bool = True
    output_batch_dims: Mapping[str, Sequence[int]] | None = None
    #: where the artifact runs (the run's resolved device: ``cpu``, ``cuda``, ``cuda:1``): a GPU artifact's instances
    #: are placed on its GPU (Triton's ``KIND_GPU``, TorchServe's ``number_of_gpu``, Ray's ``num_gpus``)
    device: str = "cpu"

    @property
    def gpu_index(self) -> int | None:
        """The CUDA device's index for a ``cuda``/``cuda:N`` artifact, else None."""
        return cuda_index(self.device)

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or MODEL_NAME_PATTERN.fullmatch(self.model_name) is None:
            raise ValueError(f"model_name must be letters, digits, '_', '.' and '-' (a directory and URL path "
                             f"segment), got {self.model_name!r}")
        for name in ("instances", "threads", "max_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.max_delay_ms, int | float) or not math.isfinite(self.max_delay_ms) \
                or self.max_delay_ms < 0:
            raise ValueError(f"max_delay_ms must be a finite number >= 0, got {self.max_delay_ms!r}")


@dataclass(frozen=True)
class ServerConfigs:
    """The files (relative path -> text), what to know when using them, and the servers left out, with why."""

    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)


def server_configs(plan: ServingPlan) -> ServerConfigs:
    """Triton's ``config.pbtxt`` (where a Triton backend loads the artifact), TorchServe's ``config.properties`` and
    Ray Serve's ``serve_deployment.py`` for ``plan``, with notes on what each leaves to the user."""
    files: dict[str, str] = {}
    notes: list[str] = []
    skipped: dict[str, str] = {}
    triton, reason, triton_notes = triton_config(plan)
    if triton is None:
        skipped["triton"] = reason
        notes.append(f"triton: no config.pbtxt: {reason}")
    else:
        files[triton_file(plan.model_name)] = triton
        notes += [f"triton: {n}" for n in triton_notes]
    files[TORCHSERVE_FILE] = torchserve_properties(plan)
    notes += [f"torchserve: {n}" for n in torchserve_notes(plan)]
    files[RAY_FILE] = ray_deployment(plan)
    notes.append(f"ray: cd ray && serve run serve_deployment:app ({plan.instances} replica(s) of {plan.threads} "
                 "CPU(s); Ray sets OMP_NUM_THREADS to num_cpus in each replica)")
    if plan.gpu_index is not None:
        notes.append(f"ray: each replica asks for 1/{plan.instances} of a GPU, so the replicas share one as autotune "
                     "measured them; Ray makes the GPU it assigns the replica's only visible one"
                     + (f" (cuda:0 there: set load.py's device from cuda:{plan.gpu_index} to cuda)"
                        if plan.gpu_index else ""))
    if plan.environment and plan.environment != "glibc":
        notes.append(f"all: the configuration was measured in process environment {plan.environment} (run.sh sets "
                     "its variables, e.g. LD_PRELOAD of the allocator): set them in the other servers' "
                     "environment too")
    if plan.batch_size is not None and plan.max_batch > plan.batch_size:
        notes.append(f"all: max batch {plan.max_batch} exceeds the {plan.batch_size} rows the artifact was built "
                     "and measured at")
    return ServerConfigs(files=files, notes=tuple(notes), skipped=skipped)


def plan_from_document(doc: Mapping[str, Any]) -> ServingPlan | None:
    """The plan of a report's serving recommendation, served from its artifact; None without a serving
    recommendation, without an artifact (status ok), or when the two are different variants (the files would
    describe a model the artifact does not hold)."""
    serving = doc.get("serving")
    rec = serving.get("recommendation") if isinstance(serving, Mapping) else None
    artifact = doc.get("artifact")
    if not isinstance(rec, Mapping) or not isinstance(artifact, Mapping) or artifact.get("status") != "ok":
        return None
    if artifact.get("variant") not in (None, rec.get("variant")):
        return None
    row = next((c for c in doc.get("candidates") or [] if isinstance(c, Mapping)
                and c.get("variant") == rec.get("variant")), None)
    try:
        return ServingPlan(
            model_name=str((serving or {}).get("model_name") or "model"), kind=str(artifact.get("kind")),
            variant=str(rec.get("variant")), instances=rec["instances"], threads=rec["threads"],
            max_batch=rec["max_batch"], max_delay_ms=rec["max_delay_ms"],
            interface=artifact.get("interface") if isinstance(artifact.get("interface"), Mapping) else None,
            precision=str((row or {}).get("precision") or "fp32"),
            runtime=artifact.get("runtime") if isinstance(artifact.get("runtime"), Mapping) else None,
            environment=rec.get("environment") if isinstance(rec.get("environment"), str) else None,
            batch_size=artifact.get("batch_size") if isinstance(artifact.get("batch_size"), int) else None,
            files=tuple(str(f.get("name")) for f in artifact.get("files") or [] if isinstance(f, Mapping)),
            merge_lengths=(serving or {}).get("merge_lengths") is not False,
            output_dynamic_dims=_output_dims((serving or {}).get("output_dynamic_dims")),
            merge_requests=(serving or {}).get("merge_requests") is not False,
            output_batch_dims=_output_dims((serving or {}).get("output_batch_dims")),
            device=device_of(doc))
    except (KeyError, ValueError):  # a document's numbers that are not a configuration
        return None


def device_of(doc: Mapping[str, Any]) -> str:
    """Where a run's artifact runs: report.json's resolved device (``cpu`` where the document does not say)."""
    recipe = doc.get("recipe")
    if not isinstance(recipe, Mapping):
        return "cpu"
    device = recipe.get("device_resolved") or recipe.get("device")
    return device if isinstance(device, str) and device and device != "auto" else "cpu"


def _output_dims(value: Any) -> dict[str, tuple[int, ...]] | None:
    """report.json's ``serving.output_dynamic_dims`` (or ``output_batch_dims``) as {output: dims}; None when absent
    or not that shape."""
    if not isinstance(value, Mapping):
        return None
    return {str(k): tuple(int(d) for d in v if isinstance(d, int) and not isinstance(d, bool) and d > 0)
            for k, v in value.items() if isinstance(v, list)}


# ---- Triton -------------------------------------------------------------------------------------------------


def _quoted(text: Any) -> str:
    """A string literal protobuf text format and Python both read (JSON's escapes, non-ASCII kept as is)."""
    return json.dumps(str(text), ensure_ascii=False)


def _dims(shape: Sequence[Any], dynamic: set[int]) -> list[int]:
    """A tensor's dims without the batch dim, -1 where it varies."""
    return [-1 if i in dynamic else int(d) for i, d in enumerate(shape) if i > 0]


def _tensor_block(name: str, data_type: str, dims: list[int]) -> list[str]:
    lines = ["  {", f"    name: {_quoted(name)}", f"    data_type: {data_type}"]
    if dims:
        lines.append(f"    dims: [ {', '.join(map(str, dims))} ]")
    else:  # one value per sample: Triton wants rank >= 1, so [1] reshaped to the model's []
        lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    return [*lines, "  }"]


def _section(name: str, blocks: list[list[str]]) -> list[str]:
    out = [f"{name} ["]
    for i, block in enumerate(blocks):
        out += [*block[:-1], block[-1] + ("," if i < len(blocks) - 1 else "")]
    return [*out, "]"]


def _parameter(key: str, value: Any) -> str:
    return f"parameters {{ key: {_quoted(key)} value: {{ string_value: {_quoted(value)} }} }}"


def _triton_dtype(dtype: Any, precision: str, kind: str) -> str | None:
    """Triton's type of a tensor; a TorchScript model saved at a reduced precision takes and gives it (load.py
    casts float inputs before the call, Triton does not)."""
    name = str(dtype)
    reduced = _REDUCED.get(precision) if kind == "torchscript" else None
    if reduced and name in ("float32", "float16", "bfloat16", "float64"):
        name = reduced
    return TRITON_TYPES.get(name)


def triton_config(plan: ServingPlan) -> tuple[str | None, str, list[str]]:
    """``(config.pbtxt text, "", notes)``, or ``(None, reason, [])`` where Triton cannot load the artifact by
    itself or the interface does not say what its tensors are."""
    backend = TRITON_BACKENDS.get(plan.kind)
    if is_accelerator(plan.device) and plan.gpu_index is None:
        return None, (f"the artifact runs on {plan.device}; Triton's instance groups place a model on CPUs or "
                      "NVIDIA GPUs"), []
    if backend is None:
        what = "an AOTInductor package (.pt2)" if plan.kind == "aoti" else \
            "the code that builds the model (no file form)" if plan.kind == "code" else f"a {plan.kind!r} artifact"
        return None, (f"Triton's backends load ONNX, OpenVINO IR and TorchScript; this artifact is {what}, which "
                      "would need Triton's Python backend around load.py"), []
    iface = plan.interface if isinstance(plan.interface, Mapping) else {}
    inputs = [t for t in iface.get("inputs") or [] if isinstance(t, Mapping)]
    outputs = [t for t in iface.get("outputs") or [] if isinstance(t, Mapping)]
    if not inputs or not outputs:
        return None, "the artifact's interface (its inputs and outputs) is not in the report", []
    torchscript = plan.kind == "torchscript"
    sizes = _dynamic_sizes(iface, inputs)
    blocks: dict[str, list[list[str]]] = {"input": [], "output": []}
    for section, tensors in (("input", inputs), ("output", outputs)):
        for index, tensor in enumerate(tensors):
            shape = tensor.get("shape")
            data_type = _triton_dtype(tensor.get("dtype"), plan.precision, plan.kind)
            if not isinstance(shape, list) or not shape or data_type is None or \
                    not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                return None, (f"{section} {tensor.get('name')!r} is not a tensor Triton can declare (dtype "
                              f"{tensor.get('dtype')!r}, shape {shape!r})"), []
            if section == "input":
                dynamic = {int(d) for d in tensor.get("dynamic_dims") or [] if isinstance(d, int)}
            else:  # an output dim as long as a dynamic input dim varies with it (the server slices it back so too),
                # and one the server saw change with the input's length without equalling it
                dynamic = {i for i, d in enumerate(shape) if i > 0 and d in sizes}
                dynamic |= {d for dims in (plan.output_dynamic_dims, plan.output_batch_dims)
                            for d in (dims or {}).get(str(tensor.get("name")), ()) if 0 < d < len(shape)}
            name = str(tensor.get("name"))
            if torchscript:  # the PyTorch backend binds tensors by position: <name>__<index>
                name = f"{'INPUT' if section == 'input' else 'OUTPUT'}__{index}"
            blocks[section].append(_tensor_block(name, data_type, _dims(shape, dynamic)))
    delay_us = round(plan.max_delay_ms * 1000)
    lines = [
        f"# Triton model configuration written by autotune: {plan.variant} served as autotune measured it,",
        f"# {plan.instances} instance(s) x {plan.threads} thread(s), max batch {plan.max_batch}, max delay "
        f"{plan.max_delay_ms:g} ms.",
        f"# Model repository: triton/{plan.model_name}/config.pbtxt and triton/{plan.model_name}/1/"
        f"{TRITON_MODEL_FILES[plan.kind]}",
        f"name: {_quoted(plan.model_name)}",
        backend,
        f"max_batch_size: {plan.max_batch}",
        *_section("input", blocks["input"]),
        *_section("output", blocks["output"]),
        "instance_group [",
        "  {",
        f"    count: {plan.instances}",
        *(["    kind: KIND_CPU"] if plan.gpu_index is None else
          ["    kind: KIND_GPU", f"    gpus: [ {plan.gpu_index} ]"]),
        "  }",
        "]",
        *(["dynamic_batching {", f"  max_queue_delay_microseconds: {delay_us}", "}"] if plan.merge_requests else
          ["# no dynamic_batching: an output couples the rows of a call, so requests must not share one"]),
        *_triton_parameters(plan),
    ]
    return "\n".join(lines) + "\n", "", _triton_notes(plan, sizes)


def _dynamic_sizes(iface: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]) -> set[int]:
    """Every length a dynamic non-batch input dim took in the data (and in the first batch)."""
    sizes: set[int] = set()
    raw = iface.get("dynamic_sizes")
    for values in raw.values() if isinstance(raw, Mapping) else []:
        if isinstance(values, list):
            sizes.update(int(v) for v in values if isinstance(v, int) and not isinstance(v, bool))
    for tensor in inputs:
        shape = tensor.get("shape") or []
        for d in tensor.get("dynamic_dims") or []:
            if isinstance(d, int) and 0 < d < len(shape):
                sizes.add(int(shape[d]))
    return sizes


def _triton_parameters(plan: ServingPlan) -> list[str]:
    threads = str(plan.threads)
    if plan.kind == "onnx":
        return [_parameter("intra_op_thread_count", threads), _parameter("inter_op_thread_count", "1")]
    if plan.kind == "openvino":
        config = (plan.runtime or {}).get("config") or {}
        hint = config.get("PERFORMANCE_HINT") if isinstance(config, Mapping) else None
        out = [_parameter("INFERENCE_NUM_THREADS", threads)]
        if hint in ("LATENCY", "THROUGHPUT"):
            out.append(_parameter("PERFORMANCE_HINT", hint))
        if isinstance(config, Mapping) and str(config.get("INFERENCE_PRECISION_HINT")) in ("bf16", "bfloat16"):
            out.append(_parameter("HINT_BF16", "YES"))
        return out
    return [_parameter("INTRA_OP_THREAD_COUNT", threads), _parameter("INTER_OP_THREAD_COUNT", "1")]


def _triton_notes(plan: ServingPlan, sizes: set[int]) -> list[str]:
    model_file = TRITON_MODEL_FILES[plan.kind]
    default = [model_file, "model.bin"] if plan.kind == "openvino" else [model_file]
    copied = [f for f in plan.files if f.startswith("model.")] or default
    notes = [f"copy {', '.join(copied)} from the artifact into triton/{plan.model_name}/1/ (version 1), then "
             "tritonserver --model-repository=triton"]
    if plan.kind == "torchscript":
        notes.append("the PyTorch backend binds tensors by position: inputs INPUT__0, INPUT__1, ... and outputs "
                     "OUTPUT__0, ... in the artifact's order (load.py's INPUTS and OUTPUTS name them)")
        if plan.precision in _REDUCED:
            notes.append(f"the model is saved at {plan.precision}: float tensors are declared "
                         f"{TRITON_TYPES[_REDUCED[plan.precision]]} (load.py casts float inputs before the call; "
                         "Triton does not)")
        if (plan.runtime or {}).get("optimize_for_inference"):
            notes.append("load.py runs torch.jit.optimize_for_inference after loading the frozen module; Triton "
                         "does not, so the first calls may be slower than autotune measured")
    if sizes:
        notes.append("output dims as long as a dynamic input dim are declared -1")
    if (plan.runtime or {}).get("buckets"):
        notes.append("a +buckets artifact: load.py pads the dynamic dims up to a bucket before each call; Triton "
                     "serves the model unpadded")
    return notes


# ---- TorchServe ---------------------------------------------------------------------------------------------


def _delay_ms_whole(plan: ServingPlan) -> int:
    """TorchServe's ``maxBatchDelay`` is whole milliseconds: a fraction rounds up, so a wait is never dropped."""
    return math.ceil(plan.max_delay_ms - 1e-9) if plan.max_delay_ms > 0 else 0


def torchserve_properties(plan: ServingPlan) -> str:
    """``config.properties`` for ``torchserve --start --ts-config torchserve/config.properties``."""
    model = {plan.model_name: {"1.0": {
        "defaultVersion": True,
        "marName": f"{plan.model_name}.mar",
        "minWorkers": plan.instances,
        "maxWorkers": plan.instances,
        "batchSize": plan.max_batch if plan.merge_requests else 1,
        "maxBatchDelay": _delay_ms_whole(plan),
        "responseTimeout": 120,
    }}}
    body = json.dumps(model, indent=2, ensure_ascii=False).splitlines()
    models = "models=" + "\\\n".join(body)
    return "\n".join([
        f"# TorchServe configuration written by autotune: {plan.variant} served as autotune measured it,",
        f"# {plan.instances} worker(s) x {plan.threads} thread(s), batch {plan.max_batch}, max delay "
        f"{plan.max_delay_ms:g} ms.",
        f"# Each worker's torch threads: export OMP_NUM_THREADS={plan.threads} before torchserve --start.",
        "inference_address=http://127.0.0.1:8080",
        "management_address=http://127.0.0.1:8081",
        "metrics_address=http://127.0.0.1:8082",
        "model_store=model_store",
        f"load_models={plan.model_name}.mar",
        f"default_workers_per_model={plan.instances}",
        *([] if plan.gpu_index is None else ["number_of_gpu=1"]),
        models,
        "",
    ])


def torchserve_notes(plan: ServingPlan) -> list[str]:
    notes = [f"package the artifact as model_store/{plan.model_name}.mar (torch-model-archiver --model-name "
             f"{plan.model_name} --version 1.0 with the model files, load.py and a handler whose initialize calls "
             "load.load() and whose handle calls predict on the batch), then torchserve --start --ts-config "
             f"torchserve/config.properties",
             f"torch's threads per worker are not a TorchServe setting: export OMP_NUM_THREADS={plan.threads} "
             f"(or torch.set_num_threads({plan.threads}) in the handler's initialize)"]
    if plan.gpu_index is not None:
        notes.append(f"number_of_gpu=1: every worker on one GPU, as autotune measured them; TorchServe numbers the "
                     f"GPUs it sees from 0, so start it with CUDA_VISIBLE_DEVICES={plan.gpu_index} (the handler's "
                     "load.load() places the model where the artifact was built to run)")
    if _delay_ms_whole(plan) != plan.max_delay_ms:
        notes.append(f"maxBatchDelay is whole milliseconds: {plan.max_delay_ms:g} ms is written as "
                     f"{_delay_ms_whole(plan)}")
    return notes


# ---- Ray Serve ----------------------------------------------------------------------------------------------

_RAY_TEMPLATE = '''"""Ray Serve deployment of the autotune artifact in the directory above: @MODEL@ (@VARIANT@).

Written by autotune from the serving recommendation: @INSTANCES@ replica(s) x @THREADS@ thread(s), batches of up
to @MAX_BATCH@ samples, waiting at most @DELAY@ ms for them. From the artifact directory (this directory is not
importable as "ray.", which is Ray's own package):

    cd ray && serve run serve_deployment:app

POST http://127.0.0.1:8000/ with JSON {"INPUT_NAME": nested list, ...} (each input with its batch dim) answers
{"OUTPUT_NAME": nested list, ...}; requests are batched along dim 0, dynamic dims right-padded to the longest.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
from ray import serve
from starlette.requests import Request

ARTIFACT = Path(__file__).resolve().parent.parent
THREADS = @THREADS@
PAD_VALUE = 0  # what dynamic dims are padded with when requests of different lengths share a batch
# whether requests of different lengths may share one padded call: False where autotune's server found that merging
# changes an answer (an output whose length follows the input's without equalling it)
MERGE_LENGTHS = @MERGE@


def _load_module():
    spec = importlib.util.spec_from_file_location("autotune_artifact_load", ARTIFACT / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "THREADS"):
        module.THREADS = THREADS
    if hasattr(module, "CONFIG") and isinstance(module.CONFIG, dict) and "INFERENCE_NUM_THREADS" in module.CONFIG:
        module.CONFIG["INFERENCE_NUM_THREADS"] = THREADS
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(THREADS)
    return module


def _leaves(out):
    """The model's output as a list of numpy arrays, in pytree order."""
    if hasattr(out, "detach"):
        return [out.detach().cpu().numpy()]
    if isinstance(out, np.ndarray):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    return [leaf for item in out for leaf in _leaves(item)]


def _pad(arrays):
    """Right-pad every non-batch dim to the batch's longest."""
    shape = [max(a.shape[d] for a in arrays) for d in range(1, arrays[0].ndim)]
    out = []
    for a in arrays:
        widths = [(0, 0)] + [(0, n - a.shape[d + 1]) for d, n in enumerate(shape)]
        out.append(np.pad(a, widths, constant_values=PAD_VALUE) if any(w for _, w in widths) else a)
    return np.concatenate(out), shape


def _cut(output, axes, j):
    """Output dims of a padded length cut back to request j's own: the n-th dim of a length takes the n-th padded
    input axis of that length (an image's height before its width, when a square batch pads both to one length)."""
    taken = {}
    for d in range(1, output.ndim):
        lengths = axes.get(output.shape[d])
        if lengths:
            nth = taken.get(output.shape[d], 0)
            taken[output.shape[d]] = nth + 1
            output = output[(slice(None),) * d + (slice(0, lengths[min(nth, len(lengths) - 1)][j]),)]
    return output


@serve.deployment(num_replicas=@INSTANCES@, ray_actor_options={"num_cpus": @THREADS@@GPUS@})
class Model:
    def __init__(self):
        self.module = _load_module()
        self.predict = self.module.load()

    @serve.batch(max_batch_size=@MAX_BATCH@, batch_wait_timeout_s=@DELAY_S@)
    async def infer(self, requests):
        """A batch of requests (each a list of arrays in INPUTS order) -> each request's outputs."""
        if MERGE_LENGTHS:
            return self._merged(requests)
        groups = {}
        for i, r in enumerate(requests):  # one call per length, unpadded
            groups.setdefault(tuple(a.shape[1:] for a in r), []).append(i)
        answers = [None] * len(requests)
        for members in groups.values():
            for i, answer in zip(members, self._merged([requests[i] for i in members])):
                answers[i] = answer
        return answers

    def _merged(self, requests):
        """The requests in one call, dims that differ padded; each request's outputs cut back."""
        inputs, padded = [], []
        for i in range(len(requests[0])):
            batch, shape = _pad([r[i] for r in requests])
            inputs.append(batch)
            padded.append(shape)
        outputs = _leaves(self._call(inputs))
        # per padded length, the distinct input axes padded to it (each as every request's own length), in order
        axes = {}
        for i, shape in enumerate(padded):
            for d, n in enumerate(shape):
                lengths = tuple(r[i].shape[d + 1] for r in requests)
                if any(x < n for x in lengths) and lengths not in axes.setdefault(n, []):
                    axes[n].append(lengths)
        answers, start = [], 0
        for j, r in enumerate(requests):
            rows = len(r[0])
            answers.append([_cut(o[start:start + rows], axes, j) for o in outputs])
            start += rows
        return answers

    def _call(self, inputs):
        """predict on the batch in the form load.py's _form gives (a tensor, a tuple, a dict or both)."""
        form = self.module._form(inputs)
        if isinstance(form, tuple) and len(form) == 2 and isinstance(form[0], tuple) and isinstance(form[1], dict):
            return self.predict(*form[0], **form[1])
        if isinstance(form, dict):
            return self.predict(**form)
        if isinstance(form, tuple):
            return self.predict(*form)
        return self.predict(form)

    async def __call__(self, request: Request):
        body = await request.json()
        arrays = [np.asarray(body[name], dtype=sample[0]) for name, sample in zip(self.module.INPUTS,
                                                                               self.module.SAMPLE)]
        outputs = await self.infer(arrays)
        return {name: o.tolist() for name, o in zip(self.module.OUTPUTS, outputs)}


app = Model.bind()
'''


def ray_deployment(plan: ServingPlan) -> str:
    """``serve_deployment.py``: a Ray Serve deployment around the artifact's ``load.py``."""
    delay_s = plan.max_delay_ms / 1000.0
    values = {
        "@MODEL@": plan.model_name, "@VARIANT@": _comment_text(plan.variant), "@INSTANCES@": str(plan.instances),
        "@THREADS@": str(plan.threads), "@MAX_BATCH@": str(plan.max_batch if plan.merge_requests else 1),
        "@DELAY@": f"{plan.max_delay_ms:g}",
        "@DELAY_S@": repr(delay_s), "@MERGE@": repr(bool(plan.merge_lengths)),
        # the replicas share one GPU, as autotune measured them: a fraction each (Ray schedules by it)
        "@GPUS@": "" if plan.gpu_index is None else f', "num_gpus": {round(1.0 / plan.instances, 4)!r}',
    }
    text = _RAY_TEMPLATE
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _comment_text(text: str) -> str:
    """Text safe inside the docstring: one line, no quotes or backslashes that could end or escape it."""
    return " ".join(str(text).split()).replace("\\", "/").replace('"', "'")
