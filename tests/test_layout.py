"""The layout by process: the tree says which module runs where, and the imports keep to it.

autotune runs in two kinds of process (ARCHITECTURE.md, "Processes"). The parent (CLI, API, tuner, search,
showdown, report) must never import torch: it would cost every command torch's start-up, and a CUDA context
in the parent would hold GPU memory through the whole run (skewing every memory probe) and make ``fork``
unsafe. Workers build and time models with torch. The tree names the process:

* ``autotune.worker.*`` runs in a worker (torch);
* ``autotune.core.*`` is shared by both (no torch);
* every other module of ``autotune`` is the parent's, apart from the package infrastructure
  (``autotune.errors``, ``autotune.version``), which every process imports.

The rules, on the import graph of :func:`tests.support.import_graph` (lazy and ``TYPE_CHECKING`` imports
count: a lazy import still runs, only later): the parent never imports the worker (it talks to workers through
``autotune.client`` over ``autotune.core.protocol``, and spawns ``python -m autotune.worker``); the worker
imports no parent module; the core imports neither; the infrastructure imports nothing of the package. No
module outside the worker imports torch or a runtime, lazily or not. And, for real: a subprocess that takes
``autotune run``'s import path, and then imports every module outside the worker, has no torch in
``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT, import_graph, package_modules

INFRASTRUCTURE = {"autotune.errors", "autotune.version"}
#: Third-party packages only a worker may import (torch itself, and what is imported with or for it).
TORCH_FAMILY = {"torch", "torchvision", "onnxruntime", "onnx", "onnxscript", "openvino", "transformers", "timm",
                "triton"}


def process_of(module: str) -> str:
    """``worker``, ``core``, ``infrastructure`` or ``parent``: where ``module`` runs, read off its name."""
    for package in ("worker", "core"):
        if module == f"autotune.{package}" or module.startswith(f"autotune.{package}."):
            return package
    return "infrastructure" if module in INFRASTRUCTURE else "parent"


#: process -> the processes whose modules it may import.
ALLOWED: dict[str, set[str]] = {
    "parent": {"parent", "core", "infrastructure"},
    "worker": {"worker", "core", "infrastructure"},
    "core": {"core", "infrastructure"},
    "infrastructure": {"infrastructure"},
}


def layout_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that crosses the layout, as ``a (process) -> b (process)``."""
    return [f"{a} ({process_of(a)}) -> {b} ({process_of(b)})"
            for a in sorted(graph) for b in sorted(graph[a]) if process_of(b) not in ALLOWED[process_of(a)]]


def test_process_of_reads_the_tree() -> None:
    assert process_of("autotune.worker") == process_of("autotune.worker.variants.runtimes") == "worker"
    assert process_of("autotune.core.recipe.spec") == process_of("autotune.core") == "core"
    assert process_of("autotune.errors") == "infrastructure"
    assert process_of("autotune.workerish") == process_of("autotune.tuner") == process_of("autotune") == "parent"


def test_the_rules_catch_each_crossing() -> None:
    graph = {"autotune.tuner": {"autotune.worker.ops", "autotune.core.vocab"},
             "autotune.core.stats": {"autotune.study", "autotune.errors"},
             "autotune.worker.ops": {"autotune.report", "autotune.core.protocol"},
             "autotune.errors": {"autotune.core.vocab"}}
    assert layout_violations(graph) == [
        "autotune.core.stats (core) -> autotune.study (parent)",
        "autotune.errors (infrastructure) -> autotune.core.vocab (core)",
        "autotune.tuner (parent) -> autotune.worker.ops (worker)",
        "autotune.worker.ops (worker) -> autotune.report (parent)",
    ]


def test_every_import_keeps_to_the_layout() -> None:
    graph = import_graph()
    assert any(process_of(m) == "worker" for m in graph) and any(process_of(m) == "core" for m in graph)
    assert "autotune.worker.ops" in graph["autotune.worker.serve"], "the graph builder missed an import"
    assert layout_violations(graph) == []


def test_no_module_outside_the_worker_imports_torch() -> None:
    found = []
    for name, path in package_modules().items():
        if process_of(name) == "worker":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            found += [f"{name}:{node.lineno} imports {top}" for top in tops if top in TORCH_FAMILY]
    assert found == []


@pytest.mark.worker
def test_the_run_path_and_every_parent_module_leave_torch_out(tmp_path) -> None:
    """``autotune run`` for real up to its first exit (a recipe with a bad field: exit 2), then everything the
    run imports lazily (the tuner, the API, the deployment, the report's assembly), then every module outside
    the worker: torch is never imported."""
    recipe = tmp_path / "bad.toml"
    recipe.write_text('[model]\nfactory = "torchvision.models:resnet18"\n[[inputs]]\nname = "x"\nshape = [3, 8, 8]\n'
                      '[search]\nvariants = ["eager"]\nbatch_sizes = [1]\nbogus = 1\n')
    parent_modules = sorted(m for m in package_modules()
                            if process_of(m) != "worker" and not m.endswith("__main__"))
    code = textwrap.dedent(f"""
        import importlib, sys
        from autotune.cli import main
        try:
            code = main(["run", {str(recipe)!r}, "--out", {str(tmp_path / "out")!r}])
        except SystemExit as exc:
            code = exc.code
        assert code == 2, code
        run_path = "torch" in sys.modules
        import autotune.api, autotune.tuner, autotune.deployment, autotune.report.assemble
        for name in {parent_modules!r}:
            importlib.import_module(name)
        print(run_path, "torch" in sys.modules, sorted(m for m in sys.modules if m.startswith("autotune.worker")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "bogus" in out.stderr  # the recipe error was printed: the run path really ran
    assert out.stdout.split() == ["False", "False", "[]"]
