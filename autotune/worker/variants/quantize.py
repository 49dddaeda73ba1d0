"""int8 variants: quantizing the model inside the build, calibrated on the traffic where the method needs it.

Which quantizer serves which variant, and why:

* **torch ``eager`` / ``compile`` + ``int8``: torchao** (``quantize_(model, Int8DynamicActivationInt8WeightConfig())``):
  every ``nn.Linear`` gets int8 weights (per channel) and quantizes its activations per call (per token);
  the current PyTorch int8 path, built for ``torch.compile``, which fuses the quantize/int8-matmul/rescale
  into its generated code. Convolutions stay fp32 (torchao's int8 configs target ``Linear``), so a CNN
  gains little; the notes count the layers.
* **torch ``script`` / ``trace`` / ``frozen`` + ``int8``: ``torch.ao.quantization.quantize_dynamic``** (Linear
  layers, ``qint8`` weights, fbgemm/x86 kernels): torchao's int8 weights are tensor subclasses, which
  TorchScript cannot hold; the older eager-mode modules script, trace and freeze (and save), though
  ``torch.ao.quantization`` is deprecated (the notes say so).
* **``export`` + ``int8``** is not offered: an AOTInductor package of torchao's subclasses is not a supported
  deployment path here; ``compile+int8`` runs the same kernels.
* **``onnx`` + ``int8``: ``onnxruntime.quantization.quantize_dynamic``** (int8 weights, activations' scales per
  call: ``DynamicQuantizeLinear`` + ``MatMulInteger``/``ConvInteger``); no calibration, the usual choice for
  transformers. **``onnx`` + ``int8-static``: ``quantize_static``** in the QDQ format (uint8 activations, int8
  per-channel weights: ORT's recommended U8S8 on x86), the activations' ranges calibrated (MinMax) on the
  traffic's batches; both run on ``quant_pre_process``'s output (shape inference and graph optimisation
  first, as ORT recommends; the raw export when that fails, with a note).
* **``openvino`` + ``int8``: NNCF's ``nncf.quantize``** (post-training, FakeQuantize nodes; the CPU plugin runs
  them as int8 kernels), calibrated on the traffic's batches. OpenVINO has no per-call (dynamic)
  activation quantization for such models, so its ``int8`` is the calibrated one and ``int8-static`` is not
  a separate variant.

**Calibration data** (:class:`Calibration`): the ``[data]`` factory's batches (the user's data; at most
:data:`CALIBRATION_BATCHES`), else random batches from ``[[inputs]]``, and then the notes warn that the
quantization ranges (and the gate) did not see real data. Quantization and calibration run inside
:func:`autotune.worker.variants.build_variant`, so they count as build time.

Pseudo-code of the runtimes' part::

    onnx:     export fp32 -> model.onnx;  pre = quant_pre_process(model.onnx) or model.onnx
              seven = int8_saturation() is not None     # x86 without VNNI / AMX-INT8 (isa.int8_saturation)
              int8:        quantize_dynamic(pre, q/model.onnx, weight_type=QInt8, reduce_range=seven)
              int8-static: quantize_static(pre, q/model.onnx, reader(calibration feeds), QDQ, U8 acts, S8 weights,
                                           per_channel, reduce_range=seven)
              the session (and the artifact) is q/model.onnx, alone in its directory
    openvino: converted = convert_model(m); names set; int8: converted = nncf.quantize(converted,
              Dataset(calibration arrays), subset_size=len(calibration),
              overflow_fix = ENABLE if seven else FIRST_LAYER (NNCF's default)); then reshaped and compiled as fp32 is

**CPUs without an int8 dot product** (x86 without AVX512-VNNI, AVX-VNNI or AMX-INT8: AVX2-only EPYCs, older
Xeons): their u8s8 kernels saturate (:func:`autotune.worker.variants.isa.int8_saturation`), so the ONNX Runtime
builds quantize weights to 7 bits (``reduce_range``, ORT's advice for such CPUs) and NNCF applies its overflow fix
to every layer; the build's notes say so. torch's int8 needs no change: torchao's dynamic int8 runs s8s8
matmuls and ``torch.ao``'s fbgemm dynamic Linear already quantizes activations with ``reduce_range``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import VariantError
from autotune.worker.variants.build_stage import silenced_build
from autotune.worker.variants.isa import int8_saturation

#: The extra that installs the quantizers (torchao, nncf); ONNX Runtime's is part of onnxruntime.
QUANT_INSTALL = "pip install 'autotune[quant]'"
#: At most this many traffic batches calibrate a static quantization (NNCF's default subset is 300 samples:
#: 16 batches of 16-32 rows is of that order, and calibration stays a few seconds of the build).
CALIBRATION_BATCHES = 16
#: torch compilers and the int8 method each uses.
TORCH_INT8_METHOD: dict[str, str] = {
    "eager": "torchao", "compile": "torchao", "script": "torch.ao", "trace": "torch.ao", "frozen": "torch.ao"}


@dataclass(frozen=True)
class Calibration:
    """The batches a static quantization calibrates on: positional model inputs (fp32, in the traffic layout's
    order, on the device), and where they came from (``factory``: the user's data; ``inputs``: random)."""

    batches: tuple[tuple[Any, ...], ...]
    source: str = "factory"

    def note(self) -> str:
        rows = sum(int(b[0].shape[0]) if b and getattr(b[0], "dim", lambda: 0)() else 1 for b in self.batches)
        if self.source == "factory":
            return f"calibrated on {len(self.batches)} batches ({rows} samples) of the [data] factory's traffic"
        return (f"calibrated on {len(self.batches)} random batches ({rows} samples) from [[inputs]]: no [data] "
                "factory, so the quantization ranges and the accuracy check did not see real data")


#: Seeds of the random calibration batches (no ``[data]`` factory): apart from the build's and the gate's.
CALIBRATION_SEED = 7_000
#: How many random batches calibrate when there is no ``[data]`` factory.
RANDOM_CALIBRATION_BATCHES = 4


def calibration_for(spec: Any, recipe: Any, traffic: Any, *, batch_size: int, device: Any) -> Calibration | None:
    """The calibration of ``spec`` (None unless it is an int8 variant): the first :data:`CALIBRATION_BATCHES`
    of the traffic (a :class:`autotune.worker.traffic.Traffic`) when it is the ``[data]`` factory's, else
    :data:`RANDOM_CALIBRATION_BATCHES` random batches of ``batch_size`` from the recipe's ``[[inputs]]``."""
    if not spec.is_quantized:
        return None
    if traffic.source == "factory":
        return Calibration(tuple(traffic.batches[:CALIBRATION_BATCHES]), "factory")
    from autotune.worker.traffic import random_batch

    batches = tuple(tuple(t.to(device) for t in random_batch(recipe.inputs, batch_size=batch_size,
                                                               seed=CALIBRATION_SEED + i))
                    for i in range(RANDOM_CALIBRATION_BATCHES))
    return Calibration(batches, "inputs")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def torch_int8_unavailable_reason(compiler: str, precision: str) -> str | None:
    """Why a torch compiler cannot run ``precision`` (``int8`` / ``int8-static``), or None."""
    if precision == "int8-static":
        return ("int8-static (calibrated activations) is offered for onnx (ORT QDQ) and openvino (NNCF, as "
                "openvino+int8); torch's int8 is dynamic (use +int8)")
    method = TORCH_INT8_METHOD.get(compiler)
    if method is None:
        return (f"{compiler}+int8 is not offered: torchao's int8 tensors are not a supported AOTInductor package "
                "here; compile+int8 runs the same kernels")
    if method == "torchao" and not _found("torchao"):
        return f"torchao not installed; install with: {QUANT_INSTALL}"
    if method == "torch.ao":
        import torch

        if "x86" not in torch.backends.quantized.supported_engines and \
                "fbgemm" not in torch.backends.quantized.supported_engines:
            return "this torch build has no x86/fbgemm quantized engine for torch.ao's dynamic int8 Linear"
    return None


def runtime_int8_unavailable_reason(compiler: str, precision: str) -> str | None:
    """Why ``onnx`` / ``openvino`` cannot run ``precision``, or None (the runtime's own packages are checked
    by the caller)."""
    if compiler == "onnx":
        if not _found("onnxruntime.quantization"):
            return "this onnxruntime has no onnxruntime.quantization; install with: pip install 'autotune[onnx]'"
        return None
    if precision == "int8-static":
        return "openvino+int8 is already NNCF's calibrated (static) quantization; int8-static adds nothing"
    if not _found("nncf"):
        return f"nncf not installed; install with: {QUANT_INSTALL}"
    return None


# ---- torch --------------------------------------------------------------------------------------------


def quantize_torch(compiler: str, model: Any, notes: list[str]) -> Any:
    """Quantize ``model`` (an fp32 eval copy; changed in place where the method does) for ``compiler``."""
    import torch

    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    convs = sum(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules())
    if linears == 0:
        raise VariantError(f"{compiler}+int8: the model has no nn.Linear layer, which is what torch's int8 "
                           "quantizes (convolutions stay fp32); try onnx+int8-static or openvino+int8")
    left = f"; {convs} convolutions stay fp32" if convs else ""
    if TORCH_INT8_METHOD[compiler] == "torchao":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        silenced_build("torchao quantize_", notes,
                       lambda: quantize_(model, Int8DynamicActivationInt8WeightConfig()))
        notes.append(f"int8: torchao Int8DynamicActivationInt8WeightConfig on {linears} Linear layers (int8 "
                     f"weights per channel, activations quantized per call){left}")
        return model
    from torch.ao.quantization import quantize_dynamic

    quantized = silenced_build("torch.ao.quantization.quantize_dynamic", notes,
                               lambda: quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8))
    notes.append(f"int8: torch.ao.quantization.quantize_dynamic on {linears} Linear layers (qint8 weights, "
                 f"{torch.backends.quantized.engine} engine; deprecated API, used because TorchScript cannot hold "
                 f"torchao's int8 tensors){left}")
    return quantized


def torch_model_bytes(model: Any) -> int | None:
    """The size of ``model``'s ``state_dict`` as ``torch.save`` writes it (what its weights take on disk); None
    when it cannot be serialised. Outside inference mode: detaching torchao's tensors inside it fails."""
    import torch

    buffer = io.BytesIO()
    try:
        with torch.inference_mode(False):
            torch.save(model.state_dict(), buffer)
    except Exception:
        return None
    return buffer.tell()


# ---- ONNX Runtime ---------------------------------------------------------------------------------------


class _Reader:
    """An ``onnxruntime.quantization.CalibrationDataReader``: one feed dict per calibration batch."""

    def __init__(self, names: Sequence[str], calibration: Calibration) -> None:
        self._feeds = iter([{n: x.detach().cpu().contiguous().numpy() for n, x in zip(names, batch, strict=True)}
                            for batch in calibration.batches])

    def get_next(self) -> dict[str, Any] | None:
        return next(self._feeds, None)

    def rewind(self) -> None:  # pragma: no cover - used only by methods that read twice
        raise NotImplementedError


def quantize_onnx(precision: str, source: str, target: str, input_names: Sequence[str],
                  calibration: Calibration | None, notes: list[str]) -> None:
    """Write the int8 model of the fp32 ``source`` file to ``target`` (``int8``: dynamic; ``int8-static``: QDQ
    calibrated on ``calibration``).

    Run from ``source``'s directory: onnxruntime's symbolic shape inference and the quantizers write temporary
    files (``sym_shape_infer_temp.onnx``, ``<uuid>.data`` external data) into the current directory, which is the
    user's (a run left them beside the recipe)."""
    with contextlib.chdir(os.path.dirname(os.path.abspath(source))):
        _quantize_onnx(precision, os.path.abspath(source), os.path.abspath(target), input_names, calibration,
                       notes)


def _quantize_onnx(precision: str, source: str, target: str, input_names: Sequence[str],
                   calibration: Calibration | None, notes: list[str]) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = os.path.join(os.path.dirname(source), "preprocessed.onnx")
    try:
        silenced_build("onnxruntime quant_pre_process", notes, lambda: quant_pre_process(source, pre))
    except VariantError as exc:
        notes.append(f"onnx int8: quant_pre_process failed ({str(exc)[:160]}); quantized the raw export")
        pre = source
    saturation = int8_saturation()
    reduce_range = saturation is not None
    seven_bit = (f"; 7-bit weights (reduce_range): {saturation}, as ONNX Runtime's guide advises" if reduce_range
                 else "")
    if precision == "int8":
        silenced_build("onnxruntime quantize_dynamic", notes,
                       lambda: quantize_dynamic(pre, target, weight_type=QuantType.QInt8, reduce_range=reduce_range))
        notes.append("int8: onnxruntime.quantization.quantize_dynamic (int8 weights, activations quantized per "
                     "call); MLAS picks its VNNI/AMX int8 kernels by CPU (it does not report which)" + seven_bit)
        return
    if calibration is None or not calibration.batches:
        raise VariantError("onnx+int8-static needs calibration batches")
    reader = type("Reader", (_Reader, CalibrationDataReader), {})(input_names, calibration)
    silenced_build("onnxruntime quantize_static", notes,
                   lambda: quantize_static(pre, target, reader, quant_format=QuantFormat.QDQ,
                                           activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                           per_channel=True, reduce_range=reduce_range))
    notes.append("int8-static: onnxruntime.quantization.quantize_static, QDQ, uint8 activations, int8 per-channel "
                 f"weights, MinMax ranges; {calibration.note()}{seven_bit}")


# ---- OpenVINO ------------------------------------------------------------------------------------------


def quantize_openvino(converted: Any, calibration: Calibration | None, notes: list[str]) -> Any:
    """NNCF post-training quantization of the converted ``ov.Model``, calibrated on ``calibration``."""
    import nncf

    if calibration is None or not calibration.batches:
        raise VariantError("openvino+int8 needs calibration batches")
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    items = [[x.detach().cpu().contiguous().numpy() for x in batch] for batch in calibration.batches]
    saturation = int8_saturation()
    # NNCF's default fixes only the first convolution of each input; without VNNI every MatMul and Convolution
    # can saturate (an MLP's Linear layers lost 0.3 of norm-wise accuracy on an AVX2-only EPYC at the default)
    fix = OverflowFix.ENABLE if saturation else OverflowFix.FIRST_LAYER
    quantized = silenced_build("nncf.quantize", notes, lambda: nncf.quantize(
        converted, nncf.Dataset(items), subset_size=len(items),
        advanced_parameters=AdvancedQuantizationParameters(overflow_fix=fix)))
    notes.append(f"int8: NNCF post-training quantization (nncf.quantize, {nncf.__version__}); {calibration.note()}"
                 + (f"; overflow fix on every layer (7-bit weights): {saturation}" if saturation else ""))
    return quantized


def openvino_kernels(compiled: Any) -> str | None:
    """What the CPU plugin runs: the executed graph's primitive types (``brgemm_avx512_amx_I8``...) counted,
    and its runtime precisions; None when the runtime model cannot be read."""
    try:
        runtime = compiled.get_runtime_model()
        kinds: dict[str, int] = {}
        precisions: dict[str, int] = {}
        for op in runtime.get_ops():
            info = op.get_rt_info()
            layer = info["layerType"].astype(str)
            if layer in ("Convolution", "FullyConnected", "MatMul", "GroupConvolution"):
                kind = f"{layer} {info['primitiveType'].astype(str)}"
                kinds[kind] = kinds.get(kind, 0) + 1
                prec = info["runtimePrecision"].astype(str)
                precisions[prec] = precisions.get(prec, 0) + 1
    except Exception:
        return None
    if not kinds:
        return None
    top = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:4])
    prec = ", ".join(f"{k} x{n}" for k, n in sorted(precisions.items(), key=lambda kv: -kv[1]))
    amx = "AMX" if any("amx" in k for k in kinds) else "no AMX"
    return f"openvino kernels (conv/matmul, first inference): {top}; runtime precision {prec}; {amx}"


def directory_bytes(directory: str) -> int:
    """The bytes of the files in ``directory`` (a model file and its external data)."""
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
               if os.path.isfile(os.path.join(directory, n)))


__all__ = [
    "CALIBRATION_BATCHES",
    "QUANT_INSTALL",
    "TORCH_INT8_METHOD",
    "Calibration",
    "calibration_for",
    "directory_bytes",
    "openvino_kernels",
    "quantize_onnx",
    "quantize_openvino",
    "quantize_torch",
    "runtime_int8_unavailable_reason",
    "torch_int8_unavailable_reason",
    "torch_model_bytes",
]
