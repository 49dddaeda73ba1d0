"""How far lower precision moves a model's outputs: the basis of the accuracy budget's default thresholds.

For each model (random weights, seeded) and precision, the outputs on random inputs are compared with eager
fp32's as :mod:`autotune.worker.accuracy` compares them without a user metric:

* ``rel_error`` = ||cand - ref|| / ||ref|| (norm-wise, over all rows) and ``cosine`` (the closeness default);
* ``agreement`` = the fraction of rows whose argmax is eager fp32's (the classifier default; meaningful only for
  the models whose output is classes: ``resnet18``, ``transformer``);
* the default budget's verdict for the precision (``CLOSENESS`` / 99% agreement).

Precisions: ``bf16`` and ``fp16`` (the whole model cast, inputs cast, as ``+bf16``/``+fp16`` build it; fp16 is
emulated on a CPU without AVX512_FP16, slow but the same numbers), ``autocast-bf16``, and ``int8`` through
``torch.ao.quantization.quantize_dynamic`` on the Linear layers (what an int8 builder without calibration does;
a stand-in until the int8 builders exist, labelled so in the output).

Run: .venv/bin/python benchmarks/bench_precision_error.py [--rows 64] [--models resnet18,mlp,transformer]
     (about 30 s at the default size; the README's closeness thresholds quote its output)
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from autotune.worker.accuracy import CLOSENESS, DEFAULT_AGREEMENT_DROP  # noqa: E402


def _models(rows: int) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    import models as recipe_models  # recipes/models.py
    import torchvision

    torch.manual_seed(0)
    out: dict[str, tuple[nn.Module, torch.Tensor]] = {
        "resnet18": (torchvision.models.resnet18(num_classes=10).eval(), torch.randn(rows, 3, 64, 64)),
        "mlp": (nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 128)).eval(), torch.randn(rows * 4, 256)),
        "transformer": (recipe_models.transformer_encoder(vocab_size=30522, d_model=256, nhead=4, layers=4,
                                                          num_classes=2).eval(),
                        torch.randint(0, 30522, (rows, 128))),
    }
    return out


def _variant(model: nn.Module, x: torch.Tensor, precision: str) -> torch.Tensor:
    m = copy.deepcopy(model)
    with torch.inference_mode():
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            m = m.to(dtype)
            return m(x.to(dtype) if x.is_floating_point() else x).float()
        if precision == "autocast-bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return m(x).float()
        if precision == "int8":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
            return q(x).float()
    raise ValueError(precision)


def _compare(ref: torch.Tensor, cand: torch.Tensor) -> dict[str, float]:
    r, c = ref.double().flatten(), cand.double().flatten()
    rel = float((c - r).norm() / r.norm())
    cos = float((r @ c) / (r.norm() * c.norm()))
    agree = float((ref.argmax(-1) == cand.argmax(-1)).float().mean())
    return {"rel_error": rel, "cosine": cos, "agreement": agree}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--models", default="resnet18,mlp,transformer")
    ap.add_argument("--precisions", default="bf16,autocast-bf16,fp16,int8")
    args = ap.parse_args(argv)
    models = _models(args.rows)
    print(f"torch {torch.__version__}; {args.rows} rows of random inputs; random weights (seed 0)")
    print(f"{'model':12} {'precision':14} {'rel_error':>10} {'cosine':>10} {'agreement':>10}  default budget")
    for name in args.models.split(","):
        model, x = models[name]
        with torch.inference_mode():
            ref = model(x)
        classes = ref.dim() == 2 and name != "mlp"
        for precision in args.precisions.split(","):
            try:
                stats = _compare(ref, _variant(model, x, precision))
            except Exception as exc:  # a transformer's fast path refuses quantized Linear layers
                print(f"{name:12} {precision:14} {'n/a':>10} {'':>10} {'':>10}  {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:60]}")
                continue
            limits = CLOSENESS[precision]
            if classes:
                verdict = ("pass" if 1 - stats["agreement"] <= DEFAULT_AGREEMENT_DROP else "REJECT") + \
                    " (agreement >= 99%)"
            else:
                ok = stats["rel_error"] <= limits.max_rel_error and stats["cosine"] >= limits.min_cosine
                verdict = ("pass" if ok else "REJECT") + \
                    f" (rel <= {limits.max_rel_error:g}, cos >= {limits.min_cosine:g})"
            label = precision + (" (ao dyn)" if precision == "int8" else "")
            print(f"{name:12} {label:14} {stats['rel_error']:10.4f} {stats['cosine']:10.6f} "
                  f"{stats['agreement']:10.3f}  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
