"""int8 on a CPU without an int8 dot product (AVX2 only, no VNNI): the full-range builds against the 7-bit ones.

Why: on an AVX2-only EPYC the int8 tests failed (onnx+int8, onnx+int8-static and openvino+int8 at a norm-wise error
of 0.30-0.34) while an AVX-512/VNNI machine passed them: without VNNI, u8s8 kernels add pairs of products into
int16 and saturate. autotune now builds 7-bit weights there (ORT ``reduce_range``, NNCF's overflow fix on every
layer: ``autotune.worker.variants.isa.int8_saturation``). This benchmark shows what that does, on the labelled
recipes' trained models, on a CPU that has no VNNI even when this machine has it: **qemu user-mode emulation**
(``qemu-x86_64 -cpu Haswell-v4``: AVX2, FMA, no AVX-512, no VNNI; the runtimes pick their kernels by CPUID, which
qemu answers) runs the inference, the host (any CPU) builds::

    host:   for task in (clusters: trained MLP, images: trained CNN, text: trained BERT-tiny):
                eager fp32 outputs on the held-out split (256 samples) and its labels
                for variant in (onnx+int8, onnx+int8-static, openvino+int8), for weights in (full range, 7-bit):
                    build_variant (calibration: the first 4 batches), save_artifact -> model file
    child:  under qemu (AVX2, no VNNI) and natively: each model file through onnxruntime / openvino on the same
            batches; outputs saved (the child imports the runtime and numpy only)
    host:   per (task, variant, weights, cpu): top-1 agreement with eager fp32 (and its 95% Wilson interval),
            task accuracy against the labels, norm-wise relative error of the logits

Run: .venv/bin/python benchmarks/bench_int8_no_vnni.py [--tasks clusters,images,text] [--cpu Haswell-v4]
     (needs qemu-user: apt-get install qemu-user; about 5-10 minutes, most of it emulated inference; trains and caches
     the recipes' models on first use)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from autotune.core.stats import wilson_interval  # noqa: E402
from autotune.core.variant_names import VariantSpec  # noqa: E402
from autotune.worker.artifact import save_artifact  # noqa: E402
from autotune.worker.variants import build_variant  # noqa: E402
from autotune.worker.variants import quantize as quantize_module  # noqa: E402
from autotune.worker.variants.quantize import Calibration  # noqa: E402

VARIANTS = ("onnx+int8", "onnx+int8-static", "openvino+int8")
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

CHILD = r"""
import json, sys
from pathlib import Path
import numpy as np
spec = json.loads(sys.argv[1])
inputs = np.load(spec["inputs"])
batches = sorted({k.split(".")[0] for k in inputs.files}, key=lambda k: int(k[1:]))
names = spec["names"]
out = {}
for model in spec["models"]:
    path = Path(model["path"])
    if model["runtime"] == "onnx":
        import onnxruntime as ort
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed_names = [i.name for i in sess.get_inputs()]
        run = lambda xs: sess.run(None, dict(zip(feed_names, xs)))[0]
    else:
        import openvino as ov
        compiled = ov.Core().compile_model(str(path), "CPU")
        run = lambda xs: compiled(list(xs))[0]
    for b in batches:
        out[model["key"] + "|" + b] = np.asarray(run([inputs[f"{b}.{n}"] for n in names]))
np.savez(spec["out"], **out)
print("ok", len(out))
"""


def _task(task: str) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]], list[torch.Tensor], list[str]]:
    """The recipe's trained model as positional inputs, its held-out batches and labels, the input names."""
    import labelled  # recipes/labelled.py

    data = labelled.labelled_set(task, samples=256, batch_size=32)
    if task == "clusters":
        return labelled.trained_mlp().eval(), [(x,) for x, _ in data], [y for _, y in data], ["x"]
    if task == "images":
        return labelled.trained_cnn().eval(), [(x,) for x, _ in data], [y for _, y in data], ["x"]
    bert = labelled.trained_bert().eval()

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.logits if hasattr(out, "logits") else out

    batches = [tuple(x[n] for n in TEXT_INPUTS) for x, _ in data]
    return Positional().eval(), batches, [y for _, y in data], list(TEXT_INPUTS)


def _build(task: str, workdir: Path) -> dict[str, Any]:
    model, batches, labels, names = _task(task)
    with torch.inference_mode():
        reference = [model(*b).float() for b in batches]
    dynamic = [(0, 1)] * len(names) if task == "text" else [(0,)]
    models = []
    for variant in VARIANTS:
        for seven in (False, True):
            quantize_module.int8_saturation = (  # type: ignore[assignment]
                (lambda: "emulated AVX2 (benchmark)") if seven else (lambda: None))
            with torch.inference_mode():
                built = build_variant(VariantSpec.parse(variant), model, batches[0], device="cpu",
                                      keep_artifact=True, dynamic_dims=dynamic, input_names=names,
                                      calibration=Calibration(tuple(batches[:4]), "factory"))
            target = workdir / task / f"{variant}-{'7bit' if seven else 'full'}"
            saved = save_artifact(built, target)
            runtime = "onnx" if variant.startswith("onnx") else "openvino"
            files = [f["name"] for f in saved.get("files", [])] or [p.name for p in target.iterdir()]
            main = next(n for n in files if n.endswith(".onnx" if runtime == "onnx" else ".xml"))
            models.append({"key": f"{task}|{variant}|{'7-bit' if seven else 'full'}", "runtime": runtime,
                           "path": str(target / main)})
    inputs = workdir / task / "inputs.npz"
    np.savez(inputs, **{f"b{i}.{n}": t.numpy() for i, b in enumerate(batches) for n, t in zip(names, b, strict=True)})
    return {"models": models, "inputs": str(inputs), "names": names, "reference": reference, "labels": labels}


def _child(spec: dict[str, Any], out: Path, qemu: list[str]) -> dict[str, np.ndarray]:
    payload = json.dumps({"models": spec["models"], "inputs": spec["inputs"], "names": spec["names"],
                          "out": str(out)})
    proc = subprocess.run([*qemu, sys.executable, "-c", CHILD, payload], capture_output=True, text=True, check=False,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"child {' '.join(qemu) or 'native'} failed: {proc.stderr.strip()[-800:]}")
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _score(spec: dict[str, Any], outputs: dict[str, np.ndarray], key: str) -> dict[str, Any]:
    same = total = right = 0
    d2 = r2 = 0.0
    for i, (ref, y) in enumerate(zip(spec["reference"], spec["labels"], strict=True)):
        got = torch.from_numpy(outputs[f"{key}|b{i}"]).float()
        same += int((got.argmax(-1) == ref.argmax(-1)).sum())
        right += int((got.argmax(-1) == y).sum())
        total += int(y.numel())
        d2 += float((got - ref).double().pow(2).sum())
        r2 += float(ref.double().pow(2).sum())
    lo, hi = wilson_interval(total - same, total)
    return {"agreement": same / total, "disagreement_ci": [lo, hi], "accuracy": right / total,
            "rel_error": (d2 / r2) ** 0.5, "samples": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="clusters,images,text")
    parser.add_argument("--cpu", default="Haswell-v4", help="qemu's CPU model: AVX2 without VNNI")
    parser.add_argument("--native-only", action="store_true",
                        help="no emulation: on a CPU without VNNI the native run is the case itself (minutes, not 10)")
    args = parser.parse_args()
    qemu = None if args.native_only else shutil.which("qemu-x86_64")
    if qemu is None and not args.native_only:
        sys.exit("qemu-x86_64 not found: apt-get install qemu-user (or --native-only on a CPU without VNNI)")
    from autotune.worker.variants.isa import cpu_capability

    emulated = "none (--native-only)" if qemu is None else f"qemu-x86_64 -cpu {args.cpu} (AVX2, no AVX-512, no VNNI)"
    print(f"host: {cpu_capability()}; emulated: {emulated}; torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for task in args.tasks.split(","):
            spec = _build(task, work)
            with torch.inference_mode():
                eager_acc = sum(int((r.argmax(-1) == y).sum()) for r, y in zip(spec["reference"], spec["labels"],
                                                                                 strict=True)) / 256
            runs = {"native": _child(spec, work / f"{task}-native.npz", [])}
            if qemu is not None:
                runs["AVX2 (qemu)"] = _child(spec, work / f"{task}-qemu.npz", [qemu, "-cpu", args.cpu])
            for model in spec["models"]:
                for cpu, outputs in runs.items():
                    s = _score(spec, outputs, model["key"])
                    _, variant, weights = model["key"].split("|")
                    rows.append((task, variant, weights, cpu, s, eager_acc))
    print("\n| task | variant | weights | CPU | top-1 agreement | disagreement 95% CI | accuracy (eager fp32) | "
          "rel. error |")
    print("|---|---|---|---|---|---|---|---|")
    for task, variant, weights, cpu, s, eager_acc in rows:
        lo, hi = s["disagreement_ci"]
        print(f"| {task} | {variant} | {weights} | {cpu} | {100 * s['agreement']:.1f}% | "
              f"{100 * lo:.1f}-{100 * hi:.1f}% | {100 * s['accuracy']:.1f}% ({100 * eager_acc:.1f}%) | "
              f"{s['rel_error']:.3f} |")


if __name__ == "__main__":
    main()
