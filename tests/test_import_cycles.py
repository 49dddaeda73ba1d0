"""No import cycles between autotune's modules, and every module imports on its own.

A cycle makes the import order matter (a module sees its partner half-initialised) and makes
two modules one unit that can only be understood, tested and moved together. The graph is built
statically with :mod:`ast`, so the test is fast and names the cycle it finds.

The rule chosen is the strict one: an edge ``a -> b`` is *any* import of ``b`` in ``a``, at
module level, inside a function (a lazy import is still a dependency, only a later one) or under
``if TYPE_CHECKING:`` (a type-only dependency is still one: mypy and a reader need both modules).
Both cycles this test was written for hid behind exactly those (``boundaries`` imported
``tuner``'s ``Workload`` under TYPE_CHECKING; ``stats`` imported ``warmup`` inside a function),
so the usual "module level only" rule would not have seen them. That import-time graph is also
checked on its own, with no exceptions: a cycle there breaks ``import``.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. The
implicit import of a module's parent package (``autotune.core.warmup.offline`` runs
``autotune/core/warmup/__init__.py`` first) is not an edge: a package that re-exports its submodules
would otherwise always be a "cycle".
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "autotune"


def _modules() -> dict[str, Path]:
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


#: Edges of the full graph that close a cycle and cannot be removed here yet, with the reason.
#: Each must still exist (delete the entry when its import goes).
KNOWN_EDGES: dict[tuple[str, str], str] = {}


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _module_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time (see the module docstring for the rule)."""
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
    """Module -> modules it imports: all imports, or only those that run when it is imported."""
    modules = _modules()
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


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None (iterative DFS, three colours)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for root in sorted(graph):
        if root in state:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child):], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert graph.get("autotune.tuner"), "the graph builder found no imports"
    stale = [edge for edge in KNOWN_EDGES if edge[1] not in graph[edge[0]]]
    assert not stale, f"KNOWN_EDGES lists imports that are gone, delete them: {stale}"
    for a, b in KNOWN_EDGES:
        graph[a].discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_time_cycles() -> None:
    cycle = find_cycle(import_graph(import_time_only=True))
    assert cycle is None, "import cycle at import time: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("module", sorted(m for m in _modules() if not m.endswith("__main__")))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)
