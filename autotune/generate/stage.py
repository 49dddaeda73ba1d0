"""``autotune run`` on a recipe with ``[generate]``: the generate search, its report and its artifact.

The run's report.json is rewritten (atomically) after every point, so Ctrl-C, SIGTERM or a kill leaves a
valid report of what was measured (``complete: false``, ``interrupted`` on Ctrl-C / SIGTERM); report.md and
``generate.png`` follow at the end and on an interruption. The artifact is written last, only for a
recommendation, and swapped in whole (:func:`autotune.deployment.swap_in`).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from autotune.client import WorkerClient
from autotune.core.device_names import is_accelerator
from autotune.core.events import OnEvent, emit
from autotune.core.recipe import Recipe
from autotune.core.stats import log_t_interval
from autotune.environment import host_memory_available, machine_facts
from autotune.generate.boundary import DEFAULT_BUDGET_FRACTION
from autotune.generate.configs import from_label
from autotune.generate.search import GenerateSearch, Progress
from autotune.outdir import hold_out_dir
from autotune.report.generate import GENERATE_PLOT, console_lines, markdown, plot
from autotune.report.write import _atomic_write
from autotune.runner import Runner
from autotune.version import __version__

REPORT_KIND = "generate"
SCHEMA_VERSION = 1


def run_generate(recipe: Recipe, out_dir: Path, *, on_event: OnEvent | None = None,
                 artifact: bool = True) -> dict[str, Any]:
    """The generate pipeline (see :mod:`autotune.generate.search`); returns the report document."""
    spec = recipe.generate
    assert spec is not None
    t0 = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    say = lambda text: emit(on_event, "generate", text)  # noqa: E731
    doc: dict[str, Any] = {"kind": REPORT_KIND, "schema_version": SCHEMA_VERSION, "tool": {"version": __version__},
                           "complete": False, "interrupted": False, "phase": "generate",
                           "recipe": recipe.to_dict(), "environment": machine_facts(None), "generate": {}}
    with contextlib.ExitStack() as held:
        held.enter_context(hold_out_dir(out_dir))
        device = recipe.device if recipe.device != "auto" else "cpu"
        limit, source = _limit(recipe)
        runner = held.enter_context(Runner(fresh_measure=True))
        client = WorkerClient(runner)
        search = GenerateSearch(client, recipe, on_point=lambda prog: _write(doc, prog, out_dir, t0, recipe),
                                say=say, limit=limit, limit_source=source)
        try:
            progress = search.run()
        except KeyboardInterrupt:
            doc["interrupted"] = True
            _write(doc, search.progress, out_dir, t0, recipe, full=True)
            raise
        _write(doc, progress, out_dir, t0, recipe)
        rec = doc["generate"].get("recommendation")
        if artifact and rec is not None:
            doc["phase"] = "artifact"
            say(f"artifact of {rec['config']} at {rec['concurrency']} sequences")
            from autotune.generate.artifact import write_artifact

            doc["artifact"] = write_artifact(client, recipe, from_label(rec["config"]), rec, progress.model,
                                             out_dir, device=device,
                                             reference_tokens=search.reference_tokens(rec["concurrency"]))
        doc["complete"] = True
        doc["phase"] = "done"
        _write(doc, progress, out_dir, t0, recipe, full=True)
    for line in console_lines(doc["generate"]):
        say(line)
    return doc


def generate_report(directory: Path) -> dict[str, Any] | None:
    """``DIR/report.json`` when a ``[generate]`` run wrote it (``"kind": "generate"``), else None; an unreadable or
    malformed one is an :class:`InputError` naming the file."""
    from autotune.core.limits import MAX_REPORT_BYTES, read_text_limited
    from autotune.errors import InputError

    path = directory / "report.json"
    try:
        doc = json.loads(read_text_limited(path, MAX_REPORT_BYTES, what="report.json"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != REPORT_KIND:
        return None
    if not isinstance(doc.get("generate"), dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{path}: field 'generate': not a generate report of schema version {SCHEMA_VERSION}")
    return doc


def rerender(directory: Path) -> dict[str, Any]:
    """``autotune report DIR`` for a generate run: report.md and the plot again, from report.json (the run's
    own record: a generate run keeps no study)."""
    from autotune.errors import InputError

    doc = generate_report(directory)
    if doc is None:
        raise InputError(f"{directory / 'report.json'}: not a generate run's report")
    with hold_out_dir(directory):
        try:
            text, png = markdown(doc), plot(doc["generate"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InputError(f"{directory / 'report.json'}: field 'generate': malformed ({type(exc).__name__}: "
                             f"{exc})") from None
        _atomic_write(directory / "report.md", text.encode())
        if png is not None:
            _atomic_write(directory / GENERATE_PLOT, png)
    return doc


def _limit(recipe: Recipe) -> tuple[int | None, str]:
    if recipe.batch.memory_budget_bytes is not None:
        return recipe.batch.memory_budget_bytes, "budget"
    if is_accelerator(recipe.device):
        return None, "device (the allocator's own out-of-memory error)"
    available = host_memory_available()
    if available is None:
        return None, "unknown"
    return int(available * DEFAULT_BUDGET_FRACTION), f"{DEFAULT_BUDGET_FRACTION:.0%} of the memory available"


def section(progress: Progress, recipe: Recipe, seconds: float) -> dict[str, Any]:
    spec = recipe.generate
    assert spec is not None
    pick = progress.pick
    rec = None
    if pick is not None and pick.point is not None:
        rec = pick.point.to_dict()
        rec["config_settings"] = pick.config.to_dict()
        rec["tokens_check"] = pick.check.to_dict() if pick.check else {"passed": True, "reference": True}
        headline = rounds_headline(progress.rounds, rec)
        if headline is not None:
            rec["headline"] = headline
    lengths = progress.model.get("prompt_lengths") or list(spec.prompt_lengths)
    workload = {"prompts": progress.model.get("prompts", spec.prompt_count), "prompt_lengths": lengths,
                "bucket": spec.bucket, "new_tokens": list(spec.new_tokens), "check_tokens": spec.check_tokens,
                "text": (f"{progress.model.get('prompts', spec.prompt_count)} prompts of {min(lengths)}-{max(lengths)} "
                         f"tokens (left-padded to multiples of {spec.bucket}), {'/'.join(map(str, spec.new_tokens))} "
                         f"new tokens each, greedy; the first {spec.check_tokens} tokens of every prompt checked "
                         f"against the reference, {progress.reference or 'dynamic-cache eager fp32'}.")}
    return {"model": progress.model, "workload": workload, "boundary": progress.boundary,
            "points": [p.to_dict() for p in progress.points], "recommendation": rec, "rounds": progress.rounds,
            "notes": list(progress.notes), "stopped_by": progress.stopped_by, "seconds": round(seconds, 3),
            "reason": None if rec else "no configuration passed its checks within the limits"}


def rounds_headline(rounds: Any, rec: dict[str, Any]) -> dict[str, Any] | None:
    """The recommendation's tokens/s from the side-by-side rounds, when it ran in them at its own concurrency (two
    rounds or more): their median and 95% interval over fresh processes; None otherwise (the screen stands).

    Why: the screen is one fresh process's ten calls, the rounds several fresh processes interleaved with the
    contenders, as the batch pipeline's showdown is its headline. A BLOOM's dynamic-cache screen read 104 tokens/s
    (95% CI 57-322: three of its ten calls took 5-8 s while another process held the CPU) and the report said
    104, while its three rounds read 928-1,065 and a plain process 1,024 (session 44)."""
    if not isinstance(rounds, dict) or rounds.get("concurrency") != rec.get("concurrency"):
        return None
    values = [float(v) for v in (rounds.get("rounds") or {}).get(rec.get("config"), [])
              if isinstance(v, int | float) and v > 0]
    ci = log_t_interval(values)
    if ci is None:
        return None
    return {"source": "rounds", "rounds": len(values), "tokens_per_s": statistics.median(values),
            "tokens_per_s_ci": ci}


def _write(doc: dict[str, Any], progress: Progress, out_dir: Path, t0: float, recipe: Recipe, *,
           full: bool = False) -> None:
    doc["generate"] = section(progress, recipe, time.monotonic() - t0)
    _atomic_write(out_dir / "report.json", (json.dumps(doc, indent=2, default=str) + "\n").encode())
    if full:
        _atomic_write(out_dir / "report.md", markdown(doc).encode())
        png = plot(doc["generate"])
        if png is not None:
            _atomic_write(out_dir / GENERATE_PLOT, png)
