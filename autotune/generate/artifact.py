"""The generate recommendation as an artifact: the model (``save_pretrained``), ``generate.json`` (the chosen
cache, compile, attention, precision, concurrency, bucket and cache length), ``load.py`` that returns a ready
``generate`` callable, and ``run.sh``.

``load.py`` is a fixed text (no value of the run becomes code: the settings are data in ``generate.json``, read
and checked at load time) that imports torch and transformers only. It rebuilds the configuration the way the
measured worker did (:mod:`autotune.worker.generation.build`): attention at load, the precision (torchao for
int8 / int4), the static cache sized once, transformers' compile of the decode step; ``python load.py`` runs one
batch of random prompts at the recommended concurrency and prints what it did.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.client import WorkerClient
from autotune.core.process_env import DEFAULT, ProcessEnvironment, run_script
from autotune.core.recipe import Recipe
from autotune.core.recipe.generate import bucket_length
from autotune.deployment import ARTIFACT_DIR, LOADER_NAME, RUN_SCRIPT_NAME, swap_in
from autotune.errors import AutotuneError
from autotune.generate.configs import GenerateConfig

SETTINGS_NAME = "generate.json"

LOAD_PY = '''"""The generate() configuration autotune recommended, ready to call.

    from load import load
    generate = load()                        # settings from generate.json beside this file
    out = generate(input_ids, attention_mask)  # greedy, the recommended cache / compile / attention / precision

Run as a script: one batch of random prompts at the recommended concurrency, timed; with --check, the run's
prompts (prompts.json) and the first greedy tokens of each against the reference the run recorded.
Needs torch and transformers (and torchao for int8 / int4).
"""

import json
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
SETTINGS = json.loads((HERE / "generate.json").read_text())
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load(device=None):
    """A callable ``generate(input_ids, attention_mask=None, max_new_tokens=None, **kwargs)`` (greedy);
    ``.model`` and ``.kwargs`` are the model and the generate() arguments it uses."""
    from transformers import AutoModelForCausalLM

    config = SETTINGS["config"]
    device = torch.device(device or SETTINGS.get("device") or "cpu")
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    model = AutoModelForCausalLM.from_pretrained(HERE / "model", attn_implementation=config["attention"])
    model = model.eval().to(device)
    precision = config["precision"]
    if precision in ("bf16", "fp16"):
        model.to(_DTYPES[precision])
    elif precision in ("int8", "int4"):
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

        if precision == "int4":
            model.to(torch.bfloat16)
        quantize_(model, Int4WeightOnlyConfig() if precision == "int4" else Int8WeightOnlyConfig())
    kwargs = {"do_sample": False, "num_beams": 1, "pad_token_id": int(SETTINGS["pad_token_id"])}
    if config["cache"] == "static":
        kwargs["cache_implementation"] = "static"
        kwargs["max_cache_len"] = int(SETTINGS["max_cache_len"])
    if config["compile"] != "none":
        from transformers import CompileConfig

        compile_config = CompileConfig(mode=config["compile"], fullgraph=False)
        if device.type not in ("cuda", "xpu"):
            compile_config._compile_all_devices = True
        kwargs["compile_config"] = compile_config
    else:
        kwargs["disable_compile"] = True
    bucket = int(SETTINGS["bucket"])

    def generate(input_ids, attention_mask=None, max_new_tokens=None, **extra):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pad = (-input_ids.shape[1]) % bucket  # left-pad to the bucket the configuration was measured with
        if pad:
            fill = torch.full((input_ids.shape[0], pad), kwargs["pad_token_id"], dtype=input_ids.dtype)
            input_ids = torch.cat([fill.to(input_ids.device), input_ids], dim=1)
            attention_mask = torch.cat([torch.zeros_like(fill).to(attention_mask.device), attention_mask], dim=1)
        new = int(max_new_tokens or SETTINGS["new_tokens"])
        with torch.inference_mode():
            return model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                  max_new_tokens=new, **{**kwargs, **extra})

    generate.model, generate.kwargs = model, kwargs
    return generate


def check() -> int:
    """The run's prompts (prompts.json), batched as they were measured, greedy: the first tokens of each against
    the reference's (dynamic-cache eager fp32) as the run recorded them. Exit 1 on a difference (fp32)."""
    data = json.loads((HERE / "prompts.json").read_text())
    prompts, wanted, reference = data["prompts"], data["new_tokens"], data["reference_tokens"]
    c, bucket, pad = int(SETTINGS["concurrency"]), int(SETTINGS["bucket"]), int(SETTINGS["pad_token_id"])
    generate = load()
    got = {}
    for k in range(-(-len(prompts) // c)):
        idx = [(k * c + j) % len(prompts) for j in range(c)]
        length = max(len(prompts[i]) for i in idx)
        length = max(bucket, -(-length // bucket) * bucket)
        ids = torch.full((c, length), pad, dtype=torch.long)
        mask = torch.zeros((c, length), dtype=torch.long)
        for row, i in enumerate(idx):
            ids[row, length - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[row, length - len(prompts[i]):] = 1
        new = max(wanted[i] for i in idx)
        out = generate(ids, mask, max_new_tokens=new, min_new_tokens=new)[:, length:]
        for row, i in enumerate(idx):
            got.setdefault(i, out[row, : len(reference[i])].tolist())
    same = [i for i in range(len(prompts)) if got[i] == reference[i]]
    print(f"greedy tokens: {len(same)}/{len(prompts)} prompts identical to the reference's")
    for i in range(len(prompts)):
        if got[i] != reference[i]:
            at = next(j for j, (a, b) in enumerate(zip(got[i], reference[i])) if a != b)
            print(f"  prompt {i}: first difference at token {at}")
    exact = SETTINGS["config"]["precision"] == "fp32"
    return 0 if len(same) == len(prompts) or not exact else 1


def main() -> int:
    if "--check" in sys.argv[1:]:
        return check()
    generate = load()
    c, length = int(SETTINGS["concurrency"]), int(SETTINGS["prompt_tokens"])
    ids = torch.randint(3, int(SETTINGS["vocab_size"]), (c, length), generator=torch.Generator().manual_seed(0))
    for label in ("first call", "second call"):
        start = time.perf_counter()
        out = generate(ids, max_new_tokens=int(SETTINGS["new_tokens"]),
                       min_new_tokens=int(SETTINGS["new_tokens"]))
        seconds = time.perf_counter() - start
        new = out.shape[1] - ids.shape[1]
        print(f"{label}: {c} sequences x {new} new tokens in {seconds:.3f} s ({c * new / seconds:.1f} tokens/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def settings(pick: Mapping[str, Any], config: GenerateConfig, recipe: Recipe, model: Mapping[str, Any],
             *, device: str) -> dict[str, Any]:
    spec = recipe.generate
    assert spec is not None
    prompt_tokens = max(bucket_length(n, spec.bucket) for n in (model.get("prompt_lengths") or spec.prompt_lengths))
    return {"config": config.to_dict(), "concurrency": int(pick["concurrency"]), "bucket": spec.bucket,
            "max_cache_len": prompt_tokens + spec.max_new_tokens, "prompt_tokens": prompt_tokens,
            "new_tokens": spec.max_new_tokens, "pad_token_id": int(model.get("pad_token_id") or 0),
            "vocab_size": int(model.get("vocab_size") or 2), "device": str(model.get("device") or device)}


def write_artifact(client: WorkerClient, recipe: Recipe, config: GenerateConfig, pick: Mapping[str, Any],
                   model: Mapping[str, Any], out_dir: Path, *, device: str,
                   reference_tokens: list[list[int]] | None) -> dict[str, Any]:
    """Save the pick into ``out_dir/artifact`` (staged, swapped in whole); the report's ``artifact`` section."""
    final = out_dir / ARTIFACT_DIR
    staging = out_dir / f".{ARTIFACT_DIR}.{__import__('os').getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        res = client.generate(recipe.to_dict(), config.to_dict(), int(pick["concurrency"]), action="artifact",
                              directory=staging, timeout=recipe.measure.timeout_s)
    except AutotuneError as exc:
        res = {"status": "failed", "reason": str(exc)}
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if res.get("status") != "ok":
        shutil.rmtree(staging, ignore_errors=True)
        return {"status": "failed", "reason": str(res.get("reason") or "the artifact worker failed")}
    data = settings(pick, config, recipe, model, device=device)
    prompts = json.loads((staging / "prompts.json").read_text())
    prompts["reference_tokens"] = reference_tokens or []
    (staging / "prompts.json").write_text(json.dumps(prompts) + "\n", encoding="utf-8")
    (staging / SETTINGS_NAME).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (staging / LOADER_NAME).write_text(LOAD_PY, encoding="utf-8")
    run = staging / RUN_SCRIPT_NAME
    run.write_text(run_script(ProcessEnvironment.parse(DEFAULT, field="environment"),
                              default_command='${PYTHON:-python} "$(dirname "$0")/load.py"'), encoding="utf-8")
    run.chmod(0o755)
    swap_in(staging, final)
    files = sorted(str(p.relative_to(final)) for p in final.rglob("*") if p.is_file())
    return {"status": "ok", "reason": "", "dir": ARTIFACT_DIR, "loader": LOADER_NAME, "settings": data,
            "files": files, "size_bytes": sum((final / f).stat().st_size for f in files)}
