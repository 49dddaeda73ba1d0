"""Time-to-first-token and each decode step of one ``generate`` call, read off its streamer.

``generate`` hands its streamer the prompt before the prefill, then each step's new tokens (moved to the host:
on a GPU that ``.cpu()`` waits for the step). A timestamp at each hand-over splits the call into the prefill
with the first token (TTFT) and the decode steps (inter-token latencies, ITL), for the whole batch at once.
The streamer costs one host copy of ``concurrency`` ids per step; the call's wall time is kept beside it, and
tokens/s is computed from that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class StepClock:
    """A transformers streamer (``put`` / ``end``) that only records when each token arrived."""

    stamps: list[float] = field(default_factory=list)
    start: float = 0.0

    def put(self, value: Any) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


@dataclass(frozen=True)
class CallTiming:
    ttft: float
    itl: tuple[float, ...]
    seconds: float
    output: torch.Tensor


def timed_generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int,
                   kwargs: dict[str, Any], sync: Any) -> CallTiming:
    """One greedy call decoding exactly ``new_tokens`` for every sequence (``min_new_tokens``: a random
    model's early end-of-sequence would otherwise make the step count a matter of luck)."""
    clock = StepClock()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, streamer=clock, **kwargs)
    sync()
    seconds = time.perf_counter() - start
    tokens = clock.stamps[1:]  # the first put is the prompt, before the prefill
    if not tokens:
        raise RuntimeError("generate returned without producing a token")
    itl = tuple(b - a for a, b in zip(tokens, tokens[1:], strict=False))
    return CallTiming(ttft=tokens[0] - start, itl=itl, seconds=seconds, output=out[:, input_ids.shape[1]:])
