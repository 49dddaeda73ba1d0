"""A plain deployment process for the generate checks: torch and transformers only, nothing of autotune.

    python plain_generate.py ARTIFACT --calls 5                 # model.generate with generate.json's settings
    python plain_generate.py ARTIFACT --calls 5 --via-load      # the artifact's own load.py instead
    python plain_generate.py ARTIFACT --probe 12 --calls 4      # peak memory: a worst-case call, then 4 calls

The model is the artifact's saved one (``ARTIFACT/model``), the prompts the run's (``prompts.json``), batched as
the run batched them (``concurrency`` at a time, cyclically, left-padded to the bucket of each batch's longest).
The generate() arguments are written here from the settings, independently of load.py (``--via-load`` uses
load.py's). Prints one JSON line: useful tokens/s over the timed calls, TTFT per call, the calls' seconds, the
greedy tokens of the first covering calls, and VmHWM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def vmhwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--via-load", action="store_true")
    ap.add_argument("--probe", type=int, default=0, help="one call at this concurrency, worst case: peak memory")
    ap.add_argument("--config", help="CACHE[+compile:MODE]/ATTENTION/PRECISION instead of generate.json's (the "
                    "boundary's configuration, e.g. dynamic/sdpa/fp32)")
    args = ap.parse_args()
    settings = json.loads((args.artifact / "generate.json").read_text())
    data = json.loads((args.artifact / "prompts.json").read_text())
    cfg = settings["config"]
    if args.config:
        head, attention, precision = args.config.split("/")
        cache, _, mode = head.partition("+compile:")
        precision, _, threads = precision.partition("@")
        cfg = {"cache": cache, "compile": mode or "none", "attention": attention, "precision": precision,
               "threads": int(threads.rstrip("t") or 0)}
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    if args.via_load and not args.config:
        sys.path.insert(0, str(args.artifact))
        from load import load  # the artifact's own

        gen = load()

        def generate(ids: torch.Tensor, mask: torch.Tensor, new: int, streamer: object = None) -> torch.Tensor:
            return gen(ids, mask, max_new_tokens=new, min_new_tokens=new, streamer=streamer)
    else:
        from transformers import AutoModelForCausalLM, CompileConfig

        model = AutoModelForCausalLM.from_pretrained(args.artifact / "model", attn_implementation=cfg["attention"])
        model.eval()
        if cfg["precision"] in ("bf16", "fp16"):
            model.to(torch.bfloat16 if cfg["precision"] == "bf16" else torch.float16)
        elif cfg["precision"] == "int8":
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            quantize_(model, Int8WeightOnlyConfig())
        kwargs: dict = {"do_sample": False, "pad_token_id": settings["pad_token_id"]}
        if cfg["cache"] == "static":
            kwargs.update(cache_implementation="static", max_cache_len=settings["max_cache_len"])
        if cfg["compile"] != "none":
            cc = CompileConfig(mode=cfg["compile"])
            cc._compile_all_devices = True
            kwargs["compile_config"] = cc

        def generate(ids: torch.Tensor, mask: torch.Tensor, new: int, streamer: object = None) -> torch.Tensor:
            with torch.inference_mode():
                return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                      streamer=streamer, **kwargs)

    prompts, wanted = data["prompts"], data["new_tokens"]
    bucket, pad = settings["bucket"], settings["pad_token_id"]

    def batch(k: int, c: int, worst: bool = False) -> tuple[torch.Tensor, torch.Tensor, int, int, list[int]]:
        idx = [(k * c + j) % len(prompts) for j in range(c)]
        longest = max(len(p) for p in prompts) if worst else max(len(prompts[i]) for i in idx)
        length = max(bucket, -(-longest // bucket) * bucket)
        ids = torch.full((c, length), pad, dtype=torch.long)
        mask = torch.zeros((c, length), dtype=torch.long)
        for row, i in enumerate(idx):
            ids[row, length - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[row, length - len(prompts[i]):] = 1
        new = max(wanted) if worst else max(wanted[i] for i in idx)
        useful = c * max(wanted) if worst else sum(wanted[i] for i in idx)
        return ids, mask, new, useful, idx

    if args.probe:  # the worst case, then --calls of the workload's batches (as autotune's probe)
        ids, mask, new, _, _ = batch(0, args.probe, worst=True)
        generate(ids, mask, new)
        for k in range(1, args.calls + 1):
            ids, mask, new, _, _ = batch(k, args.probe)
            generate(ids, mask, new)
        print(json.dumps({"concurrency": args.probe, "vmhwm_bytes": vmhwm()}))
        return 0

    class Clock:
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def put(self, value: object) -> None:
            self.stamps.append(time.perf_counter())

        def end(self) -> None:
            pass

    c = settings["concurrency"]
    tokens: dict[int, list[int]] = {}
    ids, mask, new, _, idx = batch(0, c)
    start = time.perf_counter()
    out = generate(ids, mask, new)
    first = time.perf_counter() - start
    ttft, seconds, useful = [], [], []
    for k in range(1, args.calls + 1):
        ids, mask, new, use, idx = batch(k, c)
        clock = Clock()
        start = time.perf_counter()
        out = generate(ids, mask, new, streamer=clock)
        seconds.append(time.perf_counter() - start)
        ttft.append(clock.stamps[1] - start)
        useful.append(use)
        for row, i in enumerate(idx):
            tokens.setdefault(i, out[row, ids.shape[1]:].tolist())
    print(json.dumps({"tokens_per_s": sum(useful) / sum(seconds), "call_seconds": seconds, "ttft": ttft,
                      "first_call_seconds": first, "vmhwm_bytes": vmhwm(),
                      "tokens": {str(i): t for i, t in tokens.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
