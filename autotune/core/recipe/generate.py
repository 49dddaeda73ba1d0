"""The recipe's ``[generate]`` table: ``generate()`` of a causal LM tuned instead of one forward pass.

A module of its own, like ``[serving]``: its vocabulary (prompts, new tokens, concurrent sequences, the KV
cache, compile of the decode step, attention, precision) is its own, and a recipe with the table runs the
generate pipeline (:mod:`autotune.generate`) instead of the batch search. Every error names the file and the
dotted field and says what is allowed (:class:`~autotune.core.recipe.reader.TableReader`'s wording).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from autotune.core.recipe.reader import TableReader

#: ``generate.cache``: the KV cache ``generate`` grows per step, or one allocated once at its max length.
CACHES = ("dynamic", "static")
#: ``generate.compile``: ``none``, or a ``torch.compile`` mode for the decode step (needs the static cache:
#: a dynamic cache changes shape every step, and transformers compiles only a compileable cache's forward).
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``generate.attention``: the model's ``attn_implementation``.
ATTENTIONS = ("sdpa", "eager")
#: ``generate.precisions``: the weights and activations' dtype, or torchao weight-only int8 / int4 (int4: GPU).
GENERATE_PRECISIONS = ("fp32", "bf16", "fp16", "int8", "int4")
#: Largest prompt or new-token count a recipe may ask for (a typo of 10x is caught, not run for an hour).
MAX_TOKENS = 32_768


def bucket_length(n: int, bucket: int) -> int:
    """``n`` tokens left-padded up to a multiple of ``bucket`` (at least one bucket): the shapes a run sees. One
    definition for the worker's batches, the parent's boundary sentence and the artifact's cache length."""
    return max(bucket, -(-n // bucket) * bucket)


@dataclass(frozen=True)
class GenerateConfig:
    """One configuration of ``generate``: the parent searches them (:mod:`autotune.generate.configs`), the worker
    builds them (:mod:`autotune.worker.generation.build`); the request carries :meth:`to_dict`."""

    cache: str = "dynamic"
    compile: str = "none"
    attention: str = "sdpa"
    precision: str = "fp32"
    #: torch's intra-op threads in the process; 0: torch's default (the process's CPUs)
    threads: int = 0

    def label(self) -> str:
        """``static+compile:default/sdpa/fp32`` (``@2t`` added for 2 threads): what the report calls it."""
        compiled = "" if self.compile == "none" else f"+compile:{self.compile}"
        threads = f"@{self.threads}t" if self.threads else ""
        return f"{self.cache}{compiled}/{self.attention}/{self.precision}{threads}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> GenerateConfig:
        return cls(**{k: str(data[k]) for k in ("cache", "compile", "attention", "precision")},
                   threads=int(data.get("threads") or 0))

    @classmethod
    def from_label(cls, label: str) -> GenerateConfig:
        """Inverse of :meth:`label`."""
        head, attention, tail = label.split("/")
        precision, _, threads = tail.partition("@")
        cache, _, mode = head.partition("+compile:")
        return cls(cache, mode or "none", attention, precision, int(threads.rstrip("t") or 0))


@dataclass(frozen=True)
class GenerateSpec:
    """``[generate]``: greedy ``model.generate(...)`` measured per configuration and concurrency.

    A configuration is one cache x compile x attention x precision; a point is a configuration at a
    concurrency (the number of sequences one ``generate`` call decodes together, a static batch). Prompts are
    ``prompt_count`` random token sequences of ``prompt_lengths`` (seeded), or what the ``prompts`` factory
    returns; each is left-padded to a multiple of ``bucket`` with the batch it runs in, so prompt lengths fall
    into few shapes (a compiled decode step sees one cache length: the longest bucket plus the most new tokens).
    """

    prompt_lengths: tuple[int, ...] = (32,)
    #: ``module:function`` / ``file.py:function`` returning the prompts: sequences of token ids (lists, 1-D
    #: tensors, or dicts with ``input_ids`` and optionally ``attention_mask``); None: random prompts.
    prompts: str | None = None
    prompts_kwargs: tuple[tuple[str, Any], ...] = ()
    prompt_count: int = 8
    #: New tokens per prompt: one number, or several drawn per prompt (seeded). A static batch decodes to its
    #: longest; the tokens past a prompt's own count are waste, and the report counts only useful ones.
    new_tokens: tuple[int, ...] = (32,)
    concurrency: tuple[int, ...] | Literal["auto"] = "auto"
    #: ``"auto"``'s upper end: the boundary search stops here if memory does not stop it first.
    max_concurrency: int = 64
    cache: tuple[str, ...] = ("dynamic", "static")
    compile: tuple[str, ...] = ("none",)
    attention: tuple[str, ...] = ("sdpa",)
    precisions: tuple[str, ...] = ("fp32",)
    #: torch's intra-op threads per process to try; empty: torch's default only
    threads: tuple[int, ...] = ()
    #: Greedy tokens compared with eager fp32's, per prompt: fp32 configurations must agree exactly.
    check_tokens: int = 16
    #: Lower precisions: the share of compared token positions (up to the first difference of each prompt,
    #: counted as agreeing before it) that must agree, judged on the lower end of its 95% interval.
    token_agreement: float = 0.9
    bucket: int = 16
    #: Latency limits on the p99 of time-to-first-token and of the inter-token latency (ms; None: no limit):
    #: a configuration at a concurrency whose measured p99 is over a limit is not recommended (the search's `eligible`).
    max_ttft_ms: float | None = None
    max_itl_ms: float | None = None
    #: Timed generate calls per point after the warm-up calls (each call one batch of ``concurrency`` prompts).
    calls: int = 6
    #: Fresh-process rounds per configuration in the final side-by-side comparison (0: none).
    rounds: int = 3
    #: The generate stage's budget (seconds), compile and boundary included.
    time_budget_s: float = 600.0
    seed: int = 0
    base_dir: str = "."

    @property
    def max_new_tokens(self) -> int:
        return max(self.new_tokens)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["prompts_kwargs"] = dict(self.prompts_kwargs)
        for key in ("prompt_lengths", "new_tokens", "cache", "compile", "attention", "precisions", "threads"):
            data[key] = list(data[key])
        if not isinstance(self.concurrency, str):
            data["concurrency"] = list(self.concurrency)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerateSpec:
        d = dict(data)
        d["prompts_kwargs"] = tuple(sorted(dict(d.get("prompts_kwargs") or {}).items()))
        d.setdefault("threads", [])
        for key in ("prompt_lengths", "new_tokens", "cache", "compile", "attention", "precisions", "threads"):
            d[key] = tuple(d[key])
        if not isinstance(d["concurrency"], str):
            d["concurrency"] = tuple(d["concurrency"])
        return cls(**d)


def parse_generate(path: Path, table: dict[str, Any] | None) -> GenerateSpec | None:
    """``[generate]`` (see :class:`GenerateSpec`); None when the recipe has no such table."""
    if table is None:
        return None
    keys = tuple(k for k in GenerateSpec.__dataclass_fields__ if k != "base_dir")
    r = TableReader(path, table, "generate.", keys)
    prompts = r.get("prompts", str, None)
    if prompts is not None and (":" not in prompts or not all(prompts.split(":", 1))):
        raise r.error("prompts", f"'{prompts}' is not a factory reference; allowed: 'package.module:function' or "
                      "'path/to/file.py:function' (relative to the recipe), returning a list of token-id sequences")
    kwargs = r.get("prompts_kwargs", dict, {})
    if kwargs and prompts is None:
        raise r.error("prompts_kwargs", "applies only with generate.prompts (a factory to call with them)")
    lengths = _token_counts(r, "prompt_lengths", GenerateSpec.prompt_lengths)
    new_tokens = _token_counts(r, "new_tokens", GenerateSpec.new_tokens)
    compile_modes = r.choices("compile", COMPILE_MODES, GenerateSpec.compile)
    cache = r.choices("cache", CACHES, GenerateSpec.cache)
    if any(m != "none" for m in compile_modes) and "static" not in cache:
        raise r.error("compile", f"{list(compile_modes)} needs \"static\" in generate.cache: the decode step is "
                      "compiled for a cache of fixed shape (a dynamic cache grows every step and would recompile)")
    agreement = r.get("token_agreement", float, GenerateSpec.token_agreement)
    if not 0.0 < agreement <= 1.0:
        raise r.error("token_agreement", f"is a share of agreeing tokens in (0, 1], got {agreement!r}")
    concurrency = r.counts("concurrency", "auto")
    return GenerateSpec(
        prompt_lengths=lengths,
        prompts=prompts,
        prompts_kwargs=tuple(sorted(kwargs.items())),
        prompt_count=r.positive("prompt_count", int, GenerateSpec.prompt_count),
        new_tokens=new_tokens,
        concurrency=concurrency,  # type: ignore[arg-type]
        max_concurrency=r.positive("max_concurrency", int, GenerateSpec.max_concurrency),
        cache=cache,
        compile=compile_modes,
        attention=r.choices("attention", ATTENTIONS, GenerateSpec.attention),
        precisions=r.choices("precisions", GENERATE_PRECISIONS, GenerateSpec.precisions),
        threads=_threads(r),
        check_tokens=r.positive("check_tokens", int, GenerateSpec.check_tokens),
        token_agreement=agreement,
        bucket=r.positive("bucket", int, GenerateSpec.bucket),
        calls=r.positive("calls", int, GenerateSpec.calls),
        rounds=r.positive("rounds", int, GenerateSpec.rounds, allow_zero=True),
        max_ttft_ms=r.positive("max_ttft_ms", float, None),
        max_itl_ms=r.positive("max_itl_ms", float, None),
        time_budget_s=r.positive("time_budget_s", float, GenerateSpec.time_budget_s),
        seed=r.positive("seed", int, 0, allow_zero=True),
        base_dir=str(path.resolve().parent),
    )


def _threads(r: TableReader) -> tuple[int, ...]:
    if "threads" not in r.table:
        return ()
    counts = r.counts("threads", ())
    if isinstance(counts, str):
        raise r.error("threads", f"must be a positive integer or a list of them (torch's intra-op threads), got "
                      f"{counts!r}")
    return counts


def _token_counts(r: TableReader, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
    counts = r.counts(key, default)
    if isinstance(counts, str):
        raise r.error(key, f"must be a positive integer or a list of them, got {counts!r}")
    if counts[-1] > MAX_TOKENS:
        raise r.error(key, f"{counts[-1]} tokens is over the limit of {MAX_TOKENS}")
    return counts
