"""Command line: the only place that prints for people and picks exit codes.

Exit codes: 0 success, 1 the tuning ran but found no feasible configuration, 2 bad input
(a message that names the problem, no traceback), 3 ``compare`` found a regression beyond its
threshold, 130 interrupted (what was measured is kept).

Why one module (~420 lines): parsing, printing and exit codes are the CLI's one job; everything else is
a call into :mod:`autotune.api`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, InputError
from autotune.version import __version__

EXIT_OK = 0
EXIT_INFEASIBLE = 1
EXIT_INPUT = 2
EXIT_REGRESSION = 3
EXIT_INTERRUPTED = 130


def _size(text: str) -> int:
    from autotune.core.sizes import parse_size

    try:
        return parse_size(text, field="--memory-budget")
    except AutotuneError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The largest count a flag takes (a batch size, rounds): torch's sizes are 64-bit, and no batch is near this.
MAX_COUNT = 2**31 - 1


def _positive(kind: type[int] | type[float], noun: str) -> Callable[[str], int | float]:
    """An argparse ``type`` that accepts only positive values of ``kind``."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {noun}, got {text!r}") from None
        # nan compares false with everything and inf never runs out: a budget of either measured nothing
        # (run) or polled the study forever (worker)
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {noun}, got {text!r}")
        if kind is int and value > MAX_COUNT:  # a batch of 10**23 overflowed inside torch (a TypeError)
            raise argparse.ArgumentTypeError(f"expected a positive {noun} up to {MAX_COUNT:,}, got {text!r}")
        return value

    return convert


def _check_rounds(text: str) -> int:
    """``--artifact-check-rounds``: an integer from 0 (no check) to :data:`autotune.artifact_check.MAX_ROUNDS`."""
    from autotune.artifact_check import MAX_ROUNDS

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 (no check) to {MAX_ROUNDS}, got {text!r}")
    return value


def _seed(text: str) -> int:
    """``--seed``: an integer in [0, 2**32), the range the samplers and torch.manual_seed take (checked here, not
    when the stored study is opened)."""
    from autotune.core.recipe import SEED_RANGE_TEXT, valid_seed

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer {SEED_RANGE_TEXT}, got {text!r}") from None
    if not valid_seed(value):
        raise argparse.ArgumentTypeError(f"expected an integer {SEED_RANGE_TEXT}, got {value}")
    return value


def _threshold(text: str) -> float:
    from autotune.compare import parse_threshold

    try:
        return parse_threshold(text)
    except AutotuneError as exc:  # argparse names the flag itself
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--threshold: ")) from None


_positive_int = _positive(int, "integer")
_positive_float = _positive(float, "finite number")


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on bad flags already; keep its message short and clear."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_INPUT)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autotune", description="Find the fastest way to run a PyTorch model on this machine.")
    p.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run the whole tuning and write the reports")
    run.add_argument("recipe", type=Path)
    run.add_argument("--out", type=_out_dir, default=None,
                     help="output directory (default: out/<recipe name>, the name made a safe directory name)")
    run.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N | xpu | xpu:N (overrides the recipe)")
    run.add_argument("--time-budget", type=_positive_float, default=None, metavar="SECONDS")
    run.add_argument("--storage", default=None, help="Optuna storage URL (default: sqlite:///OUT/study.db)")
    run.add_argument("--study", default=None, metavar="NAME", help="study name (default: the recipe name)")
    run.add_argument("--seed", type=_seed, default=None, help="0 to 2**32 - 1 (overrides the recipe)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--artifact-check-rounds", type=_check_rounds, default=None, metavar="N",
                     help="time the saved artifact as shipped in N fresh plain processes at the end (default 5, or "
                          "$AUTOTUNE_ARTIFACT_CHECK_ROUNDS; 0: no check)")

    warm = sub.add_parser("warmup", help="analyse per-iteration timings for warmup / steady state")
    warm.add_argument("files", nargs="+", type=Path)
    warm.add_argument("--json", action="store_true", help="one JSON object per line per file")
    warm.add_argument("--online", action="store_true", help="feed values one at a time to the online detector")

    batch = sub.add_parser("batch", help="find the largest batch that fits")
    batch.add_argument("recipe", type=Path)
    batch.add_argument("--variant", default=None, help="variant name (default: every variant of the recipe)")
    batch.add_argument("--memory-budget", type=_size, default=None, metavar="SIZE", help="e.g. 4GiB, 512MiB, bytes")
    batch.add_argument("--device", default=None)
    batch.add_argument("--json", action="store_true")

    meas = sub.add_parser("measure", help="measure one configuration")
    meas.add_argument("recipe", type=Path)
    meas.add_argument("--variant", required=True)
    meas.add_argument("--batch-size", type=_positive_int, required=True)
    meas.add_argument("--device", default=None)
    meas.add_argument("--json", action="store_true")

    rep = sub.add_parser("report", help="render the reports again from a stored run")
    rep.add_argument("dir", type=Path)
    rep.add_argument("--storage", default=None, metavar="URL",
                     help="the study's storage, if report.json's (password masked) no longer reaches it")

    cmp = sub.add_parser(
        "compare", help="compare two reports: B/A ratios with CIs; exit 3 on a regression",
        description="Compare the configurations (variant + batch size) measured in both reports: B/A "
                    "throughput ratios with 95% CIs and the latency percentile's ratio. Exit 3 when a "
                    "configuration is slower in B beyond the threshold (its ratio CI lies below "
                    "1 - threshold) or no longer runs in B, 0 otherwise, 2 for bad input or when no "
                    "configuration was measured in both (a gate must not pass on nothing).")
    cmp.add_argument("a", type=Path, metavar="A", help="the baseline: a run directory holding report.json, or the file")
    cmp.add_argument("b", type=Path, metavar="B", help="the report compared with it")
    cmp.add_argument("--threshold", type=_threshold, default=None, metavar="FRACTION",
                     help="regressions smaller than this are ignored: 0.05 or 5%% (default 5%%)")
    cmp.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    cmp.add_argument("--rerun", type=_positive_int, default=None, metavar="ROUNDS",
                     help="also time A's and B's saved artifacts now, side by side in fresh plain processes, "
                          "ROUNDS interleaved rounds (at least 2); their paired ratio then decides the exit code "
                          "(the report rows were measured at different times and are shown, not judged)")
    cmp.add_argument("--rerun-seconds", type=_positive_float, default=3.0, metavar="SECONDS",
                     help="--rerun: timed seconds per process (default 3)")

    wk = sub.add_parser("worker", help="join a study from another machine, with the local recipe")
    wk.add_argument("recipe", type=Path, help="the local recipe; its fingerprint must match the study's")
    wk.add_argument("--storage", required=True, metavar="URL")
    wk.add_argument("--study", default=None, metavar="NAME", help="study name (default: the recipe name)")
    wk.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N (overrides the recipe)")
    wk.add_argument("--time-budget", type=_positive_float, default=None, metavar="SECONDS")
    wk.add_argument("--no-progress", action="store_true")

    lt = sub.add_parser(
        "loadtest", help="open-loop load against a running KServe v2 server: latency percentiles, errors",
        description="Send inference requests to URL (e.g. http://127.0.0.1:8000) at times drawn before the run "
                    "(open loop: a slow answer never delays the next request; latency counts from the intended "
                    "send time). Exit 0 when every request was answered (and p99 <= --slo-ms when given), 1 "
                    "otherwise, 2 for bad input (unreachable URL, bad flag or file).")
    lt.add_argument("url", metavar="URL", help="the server's base URL, http://HOST:PORT")
    lt.add_argument("--rate", type=_positive_float, default=None, metavar="R",
                    help="requests per second (poisson: required; a replayed file: played at this rate)")
    lt.add_argument("--seconds", type=_positive_float, default=None, metavar="S",
                    help="length of the run (default 10; a replayed file: the whole file once)")
    lt.add_argument("--arrivals", default="poisson", metavar="poisson|closed|FILE",
                    help="poisson (default), closed (--concurrency clients, each sending when answered) or a "
                         "file of arrival timestamps in seconds, one per line or a JSON list, replayed")
    lt.add_argument("--concurrency", type=_positive_int, default=None, metavar="N",
                    help="--arrivals closed: clients (default 1)")
    lt.add_argument("--model", default="model", metavar="NAME", help="the model's name on the server (default model)")
    lt.add_argument("--inputs", type=Path, default=None, metavar="FILE.npz",
                    help="request inputs: one array per input name, first axis = rows (default: random arrays "
                         "shaped by the model's metadata)")
    lt.add_argument("--samples", type=_positive_int, default=1, metavar="N", help="rows per request (default 1)")
    lt.add_argument("--timeout-s", type=_positive_float, default=30.0, metavar="T",
                    help="a request unanswered T seconds after its intended send time is timed out (default 30)")
    lt.add_argument("--seed", type=_seed, default=0, help="seed of the arrivals and the random inputs (default 0)")
    lt.add_argument("--slo-ms", type=_positive_float, default=None, metavar="X",
                    help="latency SLO: exit 1 when p99 is above it; prints the goodput within it")
    lt.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


def _glue_negative_values(argv: list[str]) -> list[str]:
    """``--threshold -5%`` as ``--threshold=-5%``: argparse takes a value that starts with '-' (and is not a plain
    negative number) for a flag and says "expected one argument"; glued, the flag's own check says what is
    wrong with the value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in ("--threshold",) and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and argv[i + 1][1:2].isdigit():
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    for arg in argv or ():
        if "\x00" in arg:  # a process's arguments cannot hold one; a caller in Python can pass it
            print(f"autotune: error: argument {arg!r} contains a NUL character", file=sys.stderr)
            return EXIT_INPUT
    args = build_parser().parse_args(_glue_negative_values(list(sys.argv[1:] if argv is None else argv)))
    handler = {
        "run": cmd_run, "warmup": cmd_warmup, "batch": cmd_batch, "measure": cmd_measure,
        "report": cmd_report, "worker": cmd_worker, "compare": cmd_compare, "loadtest": cmd_loadtest,
    }[args.command]
    if args.command in ("run", "report", "worker"):
        import optuna

        # Optuna's INFO line per trial is noise beside the progress bar. The library leaves Optuna's logging to
        # its caller: a notebook that calls autotune.tune keeps whatever verbosity it set.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    # SIGTERM (`timeout`, a job scheduler, `kill`) ends a run as Ctrl-C does: the report of what was measured is
    # written, the workers are stopped (they also die with this process: autotune.worker.lifeline)
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread (an embedding caller): leave it as it is
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.command in ("compare", "report"):  # they print what a report.json holds: untrusted text
            with _printable_output():
                return handler(args)
        return handler(args)
    except KeyboardInterrupt:
        print("\nautotune: interrupted; what was measured is kept in the study", file=sys.stderr)
        return EXIT_INTERRUPTED
    except AutotuneError as exc:
        from autotune.report.format import printable

        print(f"autotune: error: {printable(str(exc))}", file=sys.stderr)  # it may quote a report.json's value
        return exc.exit_code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _PrintableStream(io.TextIOBase):
    """A text stream that writes :func:`autotune.report.format.printable` text to ``inner``."""

    def __init__(self, inner: Any) -> None:
        from autotune.report.format import printable

        self.inner, self.printable = inner, printable

    def write(self, text: str) -> int:
        self.inner.write(self.printable(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()


@contextlib.contextmanager
def _printable_output() -> Iterator[None]:
    with contextlib.redirect_stdout(_PrintableStream(sys.stdout)), \
            contextlib.redirect_stderr(_PrintableStream(sys.stderr)):
        yield


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# ----------------------------------------------------------------------------- run


def _load(recipe_path: Path, *, device: str | None = None, time_budget: float | None = None,
          seed: int | None = None) -> Any:
    from autotune.core.device_names import ALLOWED_TEXT, is_device_name
    from autotune.core.recipe import load_recipe
    from autotune.tuner import with_cli_overrides

    recipe = load_recipe(recipe_path)
    if device is not None and not is_device_name(device):
        raise InputError(f"--device: '{device}' is not allowed; allowed: {ALLOWED_TEXT}")
    return with_cli_overrides(recipe, device=device, time_budget=time_budget, seed=seed)


def _out_dir(text: str) -> Path:
    """``--out``: a non-empty path (``--out ''`` would be the current directory, by accident)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty; give the output directory (it is created if missing)")
    return Path(text)


def _check_out(out: Path) -> None:
    """``--out`` must be a directory or not exist yet: said before the model is validated (minutes on a big one)."""
    try:
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: is a file, expected a directory (it is created if missing)")
        for parent in out.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise InputError(f"--out {out}: {parent} is a file, expected a directory")
                break
    except OSError as exc:  # no permission to look, a name too long
        raise InputError(f"--out {out}: cannot use it ({exc.strerror or exc})") from None
def print_step(event: Any) -> None:
    """Print a step of the run as a line on stderr: boundary probes one line each, with or without the bar
    (candidates are the bar's: :data:`STEP_KINDS` says which events are steps)."""
    if event.kind in ("boundary_probe", "boundary_found", "generate"):
        print(event.message, file=sys.stderr, flush=True)
    elif event.kind in STEP_KINDS:
        print(f"{event.message} ...", file=sys.stderr, flush=True)


STEP_KINDS = ("boundary", "boundary_probe", "boundary_found", "showdown", "artifact", "serving")


class ProgressBar:
    """The CLI's consumer of progress events (autotune.core.events): a tqdm bar of candidates, the current one
    and the best so far; boundary and showdown steps as lines on stderr."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.best = "-"

    def __call__(self, event: Any) -> None:
        data = event.data
        if event.kind in STEP_KINDS:
            print_step(event)
        elif event.kind == "candidate_start":
            self._bar(data["total"]).set_postfix_str(f"now: {event.message} | best: {self.best}", refresh=True)
        elif event.kind == "candidate_done":
            best = data.get("best")
            if best is not None:
                self.best = f"{best['variant']}@{best['batch_size']} {best['throughput']:.1f}/s"
            bar = self._bar(data["total"])
            bar.update(1)
            bar.set_postfix_str(f"last: {event.message} | best: {self.best}")
        elif event.kind == "done":
            self.close()

    def _bar(self, total: int) -> Any:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="cand", dynamic_ncols=True, leave=True)
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_run(args: argparse.Namespace) -> int:
    from autotune.api import tune
    from autotune.outdir import path_component
    from autotune.report import console_table

    if args.out is not None:
        _check_out(args.out)
    recipe = _load(args.recipe, device=args.device, time_budget=args.time_budget, seed=args.seed)
    out = args.out or Path("out") / path_component(recipe.name)
    _check_out(out)
    if recipe.generate is not None:
        return _run_generate(recipe, out)
    bar = None if args.no_progress else ProgressBar()
    try:
        result = tune(recipe, out=out, storage=args.storage, study=args.study,
                      on_event=bar if bar is not None else print_step,
                      artifact_check_rounds=args.artifact_check_rounds)
    finally:
        if bar is not None:
            bar.close()
    doc = result.report
    print(console_table(doc))
    print(f"\nreports: {out / 'report.md'}  {out / 'report.html'}  {out / 'report.json'}")
    artifact = doc.get("artifact")
    if isinstance(artifact, dict):
        if artifact.get("status") == "ok":
            print(f"artifact: {out / str(artifact['dir'])}/ ({artifact.get('kind')}, "
                  f"{int(artifact.get('size_bytes') or 0):,} bytes; load it with {artifact.get('loader')})")
        else:
            print(f"artifact: not written: {artifact.get('reason')}")
    if doc["search"]["stopped_by"] == "interrupted" or doc.get("interrupted"):
        print("autotune: interrupted; the report holds what was measured (run again to resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if doc["recommendation"] is not None else EXIT_INFEASIBLE


def _run_generate(recipe: Any, out: Path) -> int:
    """A ``[generate]`` recipe: the generate search (:mod:`autotune.generate`), its lines printed as they come."""
    from autotune.generate import run_generate

    doc = run_generate(recipe, out, on_event=print_step)
    print(f"\nreports: {out / 'report.md'}  {out / 'report.json'}")
    artifact = doc.get("artifact")
    if isinstance(artifact, dict):
        print(f"artifact: {out / 'artifact'}/ (load it with load.py)" if artifact.get("status") == "ok" else
              f"artifact: not written: {artifact.get('reason')}")
    return EXIT_OK if doc["generate"].get("recommendation") is not None else EXIT_INFEASIBLE


# ----------------------------------------------------------------------------- warmup


def cmd_warmup(args: argparse.Namespace) -> int:
    from autotune.core.warmup import analyze, replay
    from autotune.traces import load_trace, sketch, summary

    for path in args.files:
        values = load_trace(path)
        # The analysis is always of the whole file; --online adds how many values the online
        # detector would have consumed before it stopped measuring.
        analysis = analyze(values)
        consumed = replay(values).consumed if args.online else None
        if args.json:
            obj = {"file": str(path), **analysis.to_dict()}
            if consumed is not None:
                obj["consumed"] = consumed
            print(json.dumps(obj), flush=True)
        else:
            print(summary(path, analysis, consumed=consumed))
            print(sketch(values, analysis))
            print()
    return EXIT_OK


# ----------------------------------------------------------------------------- batch


def cmd_batch(args: argparse.Namespace) -> int:
    from autotune.api import find_batch_boundary
    from autotune.core.sizes import format_size

    recipe = _load(args.recipe, device=args.device)
    with _as_flags():
        found = find_batch_boundary(recipe, variant=args.variant, memory_budget=args.memory_budget,
                                    on_event=print_step)
    documents = {v: b.document for v, b in found.boundaries.items()}
    if args.json:
        print(json.dumps({"batch_boundary": documents,
                          "failures": {v: {"status": s, "reason": r} for v, (s, r) in found.failures.items()}},
                         indent=2))
        return EXIT_OK if documents else EXIT_INFEASIBLE
    from tabulate import tabulate

    for variant, doc in documents.items():
        limit = doc.get("memory_limit_bytes")
        print(f"\n{variant}: max batch size {doc['max_batch_size']}"
              f"{' (upper bound reached, no OOM)' if doc['hit_upper_bound'] else ''}; usable with "
              f"{doc['headroom']:.0%} headroom: {doc['usable_max_batch_size']}")
        if doc.get("stopped_by") in ("throughput", "probe_cap", "time_cap"):  # the recipe's caps ended it
            print(f"  {doc.get('summary')}")
        print(f"  memory limit: {format_size(limit) if limit else 'unknown'}; measured by {doc['memory_measured_by']}")
        if doc.get("confirmed_by"):
            print(f"  confirmed by {doc['confirmed_by']}")
        model = doc.get("model")
        if model:
            print(f"  fitted model: peak(b) ≈ {format_size(model['intercept_bytes'])} + "
                  f"{format_size(model['bytes_per_sample'])} × b")
        rows = [[p.get("phase", "search"), p["batch_size"], "yes" if p["fits"] else "no",
                 format_size(p["peak_memory_bytes"]) if p["peak_memory_bytes"] is not None else "-",
                 f"{p['seconds']:.2f}", p.get("error") or ""] for p in doc["probes"]]
        print(tabulate(rows, headers=["phase", "batch", "fits", "peak memory", "seconds", "note"], tablefmt="simple"))
    for variant, (status, reason) in found.failures.items():
        print(f"\n{variant}: {status}: {reason}")
    return EXIT_OK if documents else EXIT_INFEASIBLE


@contextlib.contextmanager
def _as_flags() -> Iterator[None]:
    """The API names its arguments (``variant: ...``); on the command line they are flags (``--variant: ...``)."""
    try:
        yield
    except InputError as exc:
        text = str(exc)
        if text.startswith(("variant:", "batch_size:")):
            raise InputError("--" + text.replace("batch_size:", "batch-size:", 1)) from None
        raise


# ----------------------------------------------------------------------------- measure


def cmd_measure(args: argparse.Namespace) -> int:
    from autotune.api import measure

    recipe = _load(args.recipe, device=args.device)
    with _as_flags():
        row = dict(measure(recipe, variant=args.variant, batch_size=args.batch_size).row)
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        print(_describe_row(row))
    return EXIT_OK if row["status"] == "ok" else EXIT_INFEASIBLE


def _describe_row(row: dict[str, Any]) -> str:
    lines = [f"{row['variant']} @ batch {row['batch_size']}: {row['status']}"
             + (f" — {row['reason']}" if row.get("reason") else "")]
    if row["status"] == "ok":
        lo, hi = row["throughput_ci"] or (float("nan"), float("nan"))
        lat = row["latency_ms"]
        lines += [
            f"  throughput  {row['throughput']:.2f} samples/s  (95% CI {lo:.2f} – {hi:.2f})",
            f"  latency ms  mean {lat['mean']:.3f}  p50 {lat['p50']:.3f}  p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}",
            f"  warmup      {row['warmup_iterations']} iterations, classification {row['classification']}, "
            f"{row['samples']} samples, stopped by {row['stopped_by']}",
            f"  compile     {row['compile_seconds']:.3f} s (build + first call), recompiles {row['recompiles']}",
        ]
        if row.get("peak_memory_bytes") is not None:
            from autotune.core.sizes import format_size

            lines.append(f"  peak memory {format_size(row['peak_memory_bytes'])}")
    def num(value: Any, spec: str) -> str:  # "inf"/"nan" are stored as text (JSON has neither)
        return format(value, spec) if isinstance(value, (int, float)) else str(value)

    if row.get("correctness"):
        c = row["correctness"]
        lines.append(f"  correctness max abs err {num(c['max_abs_error'], '.3g')}, max rel err "
                     f"{num(c['max_rel_error'], '.3g')}, min cosine {num(c['min_cosine'], '.6f')} over {c['batches']} "
                     "batches" + (f" ({c['by']})" if c.get("by") else ""))
    if row.get("accuracy"):
        from autotune.report.precision import drop_text, value_text

        acc = row["accuracy"]
        lines.append(f"  accuracy    {value_text(acc)}, drop {drop_text(acc)} (budget: {acc.get('budget')})"
                     + ("" if acc.get("gating", True) else "; fp32: the strict gate decides"))
    if row.get("model_bytes") is not None:
        from autotune.core.sizes import format_size

        lines.append(f"  model size  {format_size(row['model_bytes'])}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report / worker


def cmd_report(args: argparse.Namespace) -> int:
    from autotune.generate.stage import generate_report
    from autotune.report.assemble import rerender

    if generate_report(args.dir) is not None:
        from autotune.generate.stage import rerender as rerender_generate
        from autotune.report.generate import console_lines

        gen = rerender_generate(args.dir)
        print("\n".join(console_lines(gen["generate"])))
        print(f"\nreports: {args.dir / 'report.md'}  {args.dir / 'report.json'}")
        return EXIT_OK if gen["generate"].get("recommendation") is not None else EXIT_INFEASIBLE

    doc = rerender(args.dir, storage=args.storage)
    from autotune.report import console_table

    print(console_table(doc))
    print(f"\nreports: {args.dir / 'report.md'}  {args.dir / 'report.html'}  {args.dir / 'report.json'}")
    return EXIT_OK if doc["recommendation"] is not None else EXIT_INFEASIBLE


def cmd_worker(args: argparse.Namespace) -> int:
    from autotune.tuner import join_study

    recipe = _load(args.recipe, device=args.device)
    study = args.study or recipe.name
    bar = None if args.no_progress else ProgressBar()
    try:
        summary = join_study(recipe, args.storage, study, time_budget=args.time_budget, on_event=bar)
    finally:
        if bar is not None:
            bar.close()
    print(f"measured {summary.measured_this_run} candidates for study {study}; stopped by {summary.stopped_by}")
    return EXIT_INTERRUPTED if summary.stopped_by == "interrupted" else EXIT_OK


# ----------------------------------------------------------------------------- loadtest


def cmd_loadtest(args: argparse.Namespace) -> int:
    """The body is autotune.serving.loadtest_cli's (the model's metadata, the bodies, the run, the table)."""
    from autotune.serving.loadtest_cli import run as run_loadtest

    return run_loadtest(args)


# ----------------------------------------------------------------------------- compare


def cmd_compare(args: argparse.Namespace) -> int:
    from autotune.compare import DEFAULT_THRESHOLD, compare_files

    threshold = args.threshold or DEFAULT_THRESHOLD
    result = compare_files(args.a, args.b, threshold=threshold)
    again = _rerun(args, threshold) if args.rerun else None
    if args.json:
        print(json.dumps({**result.to_dict(), **({"rerun": again.to_dict()} if again else {})}, indent=2))
    else:
        print(_compare_text(result))
        if again is not None:
            print(_rerun_text(again))
    if again is not None:  # measured together: it decides, with what no longer runs in B
        broken = [u.label for u in result.only_a if u.broken]
        return EXIT_REGRESSION if again.verdict == "regression" or broken else EXIT_OK
    if result.regressions:
        return EXIT_REGRESSION
    if not result.rows:  # a CI gate must not pass on nothing
        print(f"autotune: error: compare: no configuration (variant + batch size) was measured in both "
              f"{args.a} and {args.b}: nothing was compared", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def _rerun(args: argparse.Namespace, threshold: float) -> Any:
    """Time A's and B's artifacts side by side (:mod:`autotune.artifact_timing`)."""
    from autotune.artifact_timing import artifact_target, rerun

    def run_dir(path: Path) -> Path:
        return path.parent if path.is_file() else path

    a, b = artifact_target(run_dir(args.a)), artifact_target(run_dir(args.b))
    print(f"re-running {a.label} (A) and {b.label} (B): {args.rerun} interleaved rounds of fresh plain processes, "
          f"{args.rerun_seconds:g} s each ...", file=sys.stderr, flush=True)
    return rerun(a, b, rounds=args.rerun, seconds=args.rerun_seconds, threshold=threshold)


def _rerun_text(again: Any) -> str:
    ci = again.ci
    rounds = ", ".join(f"{x:.4g}/{y:.4g}" for x, y in zip(again.a_throughput, again.b_throughput, strict=True))
    verdict = "REGRESSION" if again.verdict == "regression" else again.verdict
    return (f"\nRe-run now, side by side (each run's artifact in fresh plain processes, {len(again.a_throughput)} "
            f"interleaved rounds of {again.seconds:g} s; this decides the exit code):\n"
            f"  A {again.a} vs B {again.b}: B/A {again.ratio:.3f}"
            + (f" (95% CI {ci[0]:.3f} - {ci[1]:.3f})" if ci else " (no CI)")
            + f"  {verdict} at {again.threshold:.0%}\n  samples/s per round, A/B: {rounds}")


def _compare_text(result: Any) -> str:
    from tabulate import tabulate

    def rate(value: float) -> str:
        return f"{value:.4g}"

    pct = result.latency_percentile
    lines = [f"A: {result.a_path}", f"B: {result.b_path}", ""]
    if result.rows:
        table = []
        for r in result.rows:
            ci = r.throughput.ci
            lat = r.latency
            table.append([
                r.label, rate(r.a.throughput), rate(r.b.throughput), f"{r.throughput.value:.3g}",
                f"{ci[0]:.3g} – {ci[1]:.3g}" if ci else "-",
                (f"{lat.value:.3g}" + (f" ({lat.ci[0]:.3g} – {lat.ci[1]:.3g})" if lat.ci else "")) if lat else "-",
                {"bootstrap": "samples", "mover": "MOVER", "processes": "processes"}.get(
                    r.throughput.method or "", "-"),
                ("REGRESSION" if r.verdict == "regression" else r.verdict),
            ])
        lines.append(tabulate(table, headers=["configuration", "A samples/s", "B samples/s", "B/A",
                                              "95% CI", f"{pct} B/A (95% CI)", "CI from", "verdict"],
                              tablefmt="simple"))
        lines.append(f"(B/A < 1: B has less throughput; {pct} B/A > 1: B's latency is longer, shown, never the "
                     "verdict. CI from the showdowns' fresh processes where both timed the configuration, else from "
                     "the raw samples of both reports, or by MOVER from the stored CIs where a report has none: "
                     "schema 1)")
    else:
        lines.append("No configuration was measured in both reports.")
    for title, items in (("Measured in A only", result.only_a), ("Measured in B only", result.only_b)):
        if items:
            lines.append(f"\n{title}:")
            lines += [f"  {u.label} ({'B' if u.measured_in == 'A' else 'A'}: {u.other})"
                      + ("  REGRESSION (no longer runs)" if u.broken else "") for u in items]
    if result.differences:
        lines.append("\nDifferences:")
        lines += [f"  {d.field}: A {d.a}, B {d.b}" for d in result.differences]
    lines.append("")
    lines += result.summary()
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
