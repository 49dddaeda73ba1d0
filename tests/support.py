"""Helpers the tests share that are not fixtures: paths, the tiny recipe, running the CLI, fake search rows,
the package's import graph.

They live here, not in ``conftest.py``, so a test module (or a child process a test starts, where there are no
fixtures) imports them from a plain module; ``conftest.py`` holds the fixtures and the ``cuda`` skip hook.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.warmup import WarmupAnalysis
from autotune.core.warmup.offline import WANDER_BLOCKS, WANDER_MAX

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(__file__).resolve().parent / "models"
#: The labelled synthetic warmup traces, kept in the repository (tests/data/warmup-traces/README.md).
SHARED_TRACES = Path(__file__).resolve().parent / "data" / "warmup-traces"


def tiny_recipe(*, name: str = "tiny", kwargs: str = "", variants: str = '["eager", "frozen"]',
                batch_sizes: str = "[1, 4]", time_budget_s: float = 120, max_seconds: float = 0.4,
                ci_target: float = 0.05, rounds: int = 2, round_seconds: float = 0.1, processes: int = 1,
                strategy: str | None = None) -> str:
    """TOML of a recipe for the tiny conv model in tests/models/broken.py (list fields as TOML text)."""
    return f"""
name = "{name}"
device = "cpu"
[model]
factory = "@MODELS@/broken.py:tiny"
{kwargs}
[[inputs]]
name = "x"
shape = [3, 8, 8]
[search]
variants = {variants}
batch_sizes = {batch_sizes}
time_budget_s = {time_budget_s}
{f'strategy = "{strategy}"' if strategy else ""}
[measure]
max_seconds = {max_seconds}
ci_target = {ci_target}
rounds = {rounds}
round_seconds = {round_seconds}
processes = {processes}
"""


@dataclass(frozen=True)
class RealRun:
    """What one real ``autotune run`` left: its exit code, console output, recipe and --out directory."""

    code: int
    stdout: str
    stderr: str
    recipe: Path
    out: Path


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run the CLI in a subprocess (real process, real exit code)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    return proc.returncode, proc.stdout, proc.stderr


#: test_cli's tiny recipe with ``{kwargs}`` and ``{variants}`` left to fill (also used by test_worker_join).
TINY = tiny_recipe(kwargs="{kwargs}", variants="{variants}")


def tiny(write_recipe, *, kwargs: str = "", variants: str = '["eager", "frozen"]', extra: str = "") -> Path:
    return write_recipe(TINY.format(kwargs=kwargs, variants=variants) + extra)


#: Throughput (items/s at batch 0) of each variant in the search's fake rows.
SEARCH_SPEED = {"eager": 100.0, "frozen": 180.0, "compile": 150.0, "broken": 1.0}


def search_row(trial: int, variant: str, batch: int, *, latency_ms: float | None = None) -> dict[str, Any]:
    status = "failed" if variant == "broken" else "ok"
    tput = SEARCH_SPEED[variant] * (1 + batch / 64)
    lat = latency_ms if latency_ms is not None else batch / tput * 1e3
    return {
        "trial": trial, "variant": variant, "batch_size": batch, "status": status,
        "reason": "boom" if status == "failed" else None, "feasible": status == "ok", "violations": [],
        "throughput": tput if status == "ok" else None,
        "latency_ms": {"mean": lat, "p50": lat, "p90": lat, "p99": lat} if status == "ok" else None,
        "peak_memory_bytes": batch * 1000, "classification": "flat",
    }


FakeRow = Callable[..., dict[str, Any]]


def largest_measurement_record(seed: int = 0) -> dict[str, Any]:
    """The largest measurement record the timing loop makes (MAX_SAMPLES blocks, MAX_PER_CALL per-call latencies):
    about 100 kB of JSON, a real ``Measurement.to_dict()`` of synthetic timings with their real analysis."""
    import numpy as np

    from autotune.core.measurement import Measurement
    from autotune.core.warmup import analyze

    rng = np.random.default_rng(seed)
    blocks = 1e-3 * (1 + 0.02 * rng.standard_normal(20_000))
    per_call = 1e-3 * rng.lognormal(0.0, 0.1, 5_000)
    m = Measurement(batch_size=8, mode="throughput", samples=tuple(blocks.tolist()), iterations_per_sample=4,
                    first_call_seconds=0.1, analysis=analyze(blocks), stopped_by="max_values",
                    latency_samples=tuple(per_call.tolist()))
    return dict(m.to_dict())


# ------------------------------------------------------------------------------- the import graph

PACKAGE_DIR = ROOT / "autotune"


def package_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module and package of autotune."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _module_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time (see :func:`import_graph` for the rule)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                out += _module_level_imports(node.body)
            out += _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _module_level_imports(block)
        elif isinstance(node, ast.With):
            out += _module_level_imports(node.body)
    return out


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    """Absolute module name of a (possibly relative) ``from`` import."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(*, import_time_only: bool = False) -> dict[str, set[str]]:
    """Module -> modules of autotune it imports: all imports, or only those that run when it is imported.

    Built statically with :mod:`ast`. An edge ``a -> b`` is *any* import of ``b`` in ``a``: at module level,
    inside a function (a lazy import is still a dependency, only a later one) or under ``if TYPE_CHECKING:``
    (mypy and a reader need both modules); ``import_time_only`` keeps those that run at import.
    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. The implicit
    import of a module's parent package is not an edge (a package that re-exports its submodules would
    otherwise always be a "cycle"). tests/test_import_cycles.py and tests/test_layout.py read it.
    """
    modules = package_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _module_level_imports(tree.body) if import_time_only else _all_imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


class PausableDouble:
    """``pause`` / ``resume`` as :class:`autotune.runner.Runner` has them, for the showdown's worker doubles: a
    call continues a paused one (as a real request does), and ``everyone`` (shared by the doubles of one
    showdown) lets a double check, while it is timed, that every other one is stopped."""

    everyone: list[PausableDouble]

    def __init__(self, everyone: list[PausableDouble] | None = None) -> None:
        self.paused = False
        self.everyone = everyone if everyone is not None else []
        self.everyone.append(self)
        self.ran_beside: list[int] = []  # per slice: how many others were not stopped

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def slice_started(self) -> None:
        self.paused = False
        self.ran_beside.append(sum(not d.paused for d in self.everyone if d is not self))


def is_reported_wander(a: WarmupAnalysis, values: np.ndarray) -> bool:
    """A regime trace whose tail only alternates among levels within the wander bound of one another is what
    issue 31 calls a wander (levels at 0.94, 1.0 and 1.05 of the steady level, visited again and again): steady,
    with the wander measured and in its CI. Any other verdict of steady on a regime trace is wrong."""
    if a.steady_start is None or a.wander is None or a.wander > WANDER_MAX:
        return False
    tail = np.asarray(values)[a.steady_start:]
    meds = np.array([np.median(b) for b in np.array_split(tail, 2 * WANDER_BLOCKS)])
    return bool(np.all(np.abs(meds / np.median(tail) - 1) <= 1.5 * WANDER_MAX))
