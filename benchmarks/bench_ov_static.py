"""OpenVINO on full batches: the same converted model compiled with the shapes the tool ships (dim 0 bounded
``1..b``, the sequence free) against static ``[b, L]``, interleaved rounds in one process (issue 30: "if a
static-shape model is that much faster for full batches, that is a choice to offer").

    .venv/bin/python benchmarks/bench_ov_static.py [--shapes 8x128,16x64,16x128] [--rounds 10] [--seconds 1]

The model is recipes/bert.toml's (models.py:bert_classifier: 2 layers, hidden 128), fed by position through a
wrapper; PERFORMANCE_HINT=LATENCY, 2 threads, f32, one infer request each, as the artifact's load.py runs it.
Prints one line per shape: the medians per call and the static / dynamic speed-up per round (median, range).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="8x128,16x64,16x128")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "recipes"))
    import openvino as ov
    import torch
    from models import bert_classifier  # type: ignore[import-not-found]

    torch.set_num_threads(2)
    model = bert_classifier(vocab_size=30522, hidden_size=128, layers=2, heads=2, intermediate_size=512,
                            num_labels=2).eval()

    class ByPosition(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, attention_mask=mask, token_type_ids=types).logits

    wrapped = ByPosition(model).eval()
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 2, "INFERENCE_PRECISION_HINT": "f32"}
    for shape in args.shapes.split(","):
        b, length = (int(v) for v in shape.split("x"))
        example = (torch.randint(1, 30000, (b, length)), torch.ones(b, length, dtype=torch.long),
                   torch.zeros(b, length, dtype=torch.long))
        feeds = [x.numpy() for x in example]
        requests = {}
        for name in ("dynamic", "static"):
            converted = ov.convert_model(wrapped, example_input=example)
            dims = ([ov.Dimension(1, b), ov.Dimension()] if name == "dynamic" else [b, length])
            converted.reshape({i: ov.PartialShape(dims) for i in range(3)})
            requests[name] = core.compile_model(converted, "CPU", config).create_infer_request()
            for _ in range(20):
                requests[name].infer(feeds)
        per_call: dict[str, list[float]] = {"dynamic": [], "static": []}
        for r in range(args.rounds):
            for name in (("dynamic", "static") if r % 2 == 0 else ("static", "dynamic")):
                req, n, t0 = requests[name], 0, time.perf_counter()
                while time.perf_counter() - t0 < args.seconds:
                    req.infer(feeds)
                    n += 1
                per_call[name].append((time.perf_counter() - t0) / n)
        ratios = [d / s for d, s in zip(per_call["dynamic"], per_call["static"], strict=True)]
        print(f"batch {b} x {length}: dynamic {1000 * statistics.median(per_call['dynamic']):.2f} ms, static "
              f"{1000 * statistics.median(per_call['static']):.2f} ms per call; static speed-up median "
              f"{statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
