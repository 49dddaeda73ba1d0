"""The ``generate`` op's three actions on one configuration at one concurrency, in a fresh worker.

``measure``: the first call alone (compile, if any, happens there: its seconds are the compile cost), then
``calls`` timed calls, then calls until every prompt was in a batch; the raw series go back (TTFT per call,
each call's decode steps, wall seconds, useful and generated tokens) with each prompt's first greedy tokens,
the peak memory of the timed calls and the recompiles they paid. ``probe``: one call at the worst case (every
sequence at the longest bucket, the most new tokens), then ``calls`` of the workload's batches as a serving
process runs them, the peak of all against the budget. ``artifact``: the model's
config and weights saved (``save_pretrained``: the artifact rebuilds the configuration at load time, as a
deployment would) with the configuration beside them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from autotune.core.contention import CpuWindow
from autotune.core.protocol import GenerateOutcome, GenerateRequest
from autotune.core.recipe import Recipe
from autotune.core.recipe.generate import bucket_length
from autotune.worker import devices
from autotune.worker.generation.build import (
    Config,
    check_generative,
    generate_kwargs,
    pad_token_id,
    prepare_model,
    vocab_size,
)
from autotune.worker.generation.clock import timed_generate
from autotune.worker.generation.prompts import batches as make_batches
from autotune.worker.generation.prompts import calls_covering, make_prompts
from autotune.worker.model import build_model
from autotune.worker.state import _trim_heap
from autotune.worker.variants.dynamo_state import recompile_count, reset_compiler_state


def run_generate(req: GenerateRequest, *, device: torch.device, backend: devices.DeviceBackend,
                 tool_bytes: int = 0) -> GenerateOutcome:
    """One action (module docstring). ``tool_bytes``: resident memory of the tool's own modules beyond torch,
    taken off a host-memory peak (a deployment process does not hold them)."""
    recipe = Recipe.from_dict(req["recipe"])
    spec = recipe.generate
    if spec is None:
        raise ValueError("op generate needs a recipe with [generate]")
    config = Config.from_dict(req["config"])
    concurrency = int(req["concurrency"])
    model = build_model(recipe, device=torch.device("cpu"))
    check_generative(model, where=recipe.path)
    vocab = vocab_size(model)
    prompts = make_prompts(recipe, vocab)
    facts = _model_facts(model, vocab)
    facts.update(prompt_lengths=sorted({len(p.ids) for p in prompts}), pad_token_id=pad_token_id(model),
                 prompts=len(prompts), device=str(device))
    if req["action"] == "artifact":
        return _save(model, req, config, facts, prompts)
    if config.threads:
        torch.set_num_threads(config.threads)
    if config.compile != "none":
        # a cold compile, as a fresh machine or container pays it: inductor's on-disk cache otherwise keeps
        # what earlier processes compiled (measured on the Llama recipe: 9-10 s cold, 3 s warm)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="autotune-inductor-")
    model.to(device)
    notes = prepare_model(model, config, backend=backend)
    pad = pad_token_id(model)
    longest = bucket_length(max(len(p.ids) for p in prompts), spec.bucket)
    kwargs = generate_kwargs(config, pad_id=pad, max_cache_len=longest + spec.max_new_tokens, backend=backend)
    reset_compiler_state()

    def batches(start: int, count: int, longest: bool = False) -> list[Any]:
        return make_batches(prompts, concurrency, count, bucket=spec.bucket, pad_id=pad, device=device,
                            start=start, longest=longest)

    backend.release_memory()
    _trim_heap()
    backend.reset_peak_memory()
    baseline = backend.current_memory_bytes()
    out: GenerateOutcome = {"status": "ok", "reason": "", "model": facts, "notes": notes,
                            "baseline_bytes": baseline, "threads": torch.get_num_threads()}
    if req["action"] == "probe":
        budget = req.get("memory_budget_bytes")
        capped = backend.device_memory and backend.limit_memory(budget)
        try:
            (b,) = batches(0, 1, longest=True)
            t = timed_generate(model, b.input_ids, b.attention_mask, b.new_tokens, kwargs, backend.synchronize)
            # then the workload's own batches, as a serving process runs them: its peak after several calls of
            # mixed shapes is above one call's (freed blocks the allocator keeps; measured on the GPT-2 recipe at
            # 22 sequences: one worst-case call 1,020-1,120 MiB, five workload calls after it 1,210 MiB)
            for b in batches(1, int(req["calls"])):
                timed_generate(model, b.input_ids, b.attention_mask, b.new_tokens, kwargs, backend.synchronize)
        finally:
            if capped:
                backend.limit_memory(None)
        peak = backend.peak_memory_bytes() - (0 if backend.device_memory else tool_bytes)
        fits = backend.device_memory or budget is None or peak <= budget
        out["fits"], out["peak_memory_bytes"], out["step_seconds"] = fits, peak, t.seconds
        if not fits:
            out["reason"] = f"over budget: {peak / 2**20:.0f} MiB > {int(budget or 0) / 2**20:.0f} MiB"
        return out
    tokens: dict[int, list[int]] = {}

    def keep_tokens(b: Any, output: torch.Tensor) -> None:
        rows = output[:, : min(spec.check_tokens, b.new_tokens)].tolist()
        for i, row in zip(b.indices, rows, strict=True):
            tokens.setdefault(i, row)

    (first,) = batches(0, 1)
    t = timed_generate(model, first.input_ids, first.attention_mask, first.new_tokens, kwargs, backend.synchronize)
    keep_tokens(first, t.output)
    out["first_call_seconds"] = t.seconds
    compiled = recompile_count()
    ttft, itl, seconds, useful, generated = [], [], [], [], []
    calls = max(1, int(req["calls"]))
    window = CpuWindow.start()  # other processes' CPU while the calls were timed: a busy machine's figure says so
    for b in batches(1, calls):
        t = timed_generate(model, b.input_ids, b.attention_mask, b.new_tokens, kwargs, backend.synchronize)
        keep_tokens(b, t.output)
        ttft.append(t.ttft)
        itl.append(list(t.itl))
        seconds.append(t.seconds)
        useful.append(b.useful_tokens)
        generated.append(b.new_tokens * concurrency)
    out["load"] = window.stop().to_dict()
    out["recompiles"] = recompile_count() - compiled
    out["peak_memory_bytes"] = backend.peak_memory_bytes() - (0 if backend.device_memory else tool_bytes)
    covering = calls_covering(prompts, concurrency)
    if covering > calls + 1:  # the check's prompts the timed calls did not reach
        for b in batches(calls + 1, covering - calls - 1):
            t = timed_generate(model, b.input_ids, b.attention_mask, b.new_tokens, kwargs, backend.synchronize)
            keep_tokens(b, t.output)
    out["ttft"], out["itl"], out["call_seconds"] = ttft, itl, seconds
    out["useful_tokens"], out["generated_tokens"] = useful, generated
    out["tokens"] = [tokens[i] for i in range(len(prompts))]
    return out


def _model_facts(model: torch.nn.Module, vocab: int) -> dict[str, Any]:
    cfg: Any = model.config
    return {"class": type(model).__name__, "model_type": str(getattr(cfg, "model_type", "")),
            "layers": getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", None),
            "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": vocab}


def _save(model: torch.nn.Module, req: GenerateRequest, config: Config, facts: dict[str, Any],
          prompts: list[Any]) -> GenerateOutcome:
    directory = Path(req.get("directory") or "")
    if not req.get("directory"):
        raise ValueError("op generate, action artifact: no directory")
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory / "model")  # type: ignore[operator]
    # the prompts the run measured, so the artifact can check its own greedy tokens (load.py --check)
    (directory / "prompts.json").write_text(json.dumps({"prompts": [list(p.ids) for p in prompts],
                                                        "new_tokens": [p.new_tokens for p in prompts]}))
    files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    return {"status": "ok", "reason": "", "model": facts, "files": files}
