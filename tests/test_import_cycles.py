"""No import cycles between autotune's modules, and every module imports on its own.

A cycle makes the import order matter (a module sees its partner half-initialised) and makes
two modules one unit that can only be understood, tested and moved together. The graph is built
statically with :mod:`ast` (:func:`tests.support.import_graph`, which tests/test_layout.py reads too), so
the test is fast and names the cycle it finds.

The rule chosen is the strict one: an edge ``a -> b`` is *any* import of ``b`` in ``a``, at
module level, inside a function (a lazy import is still a dependency, only a later one) or under
``if TYPE_CHECKING:`` (a type-only dependency is still one: mypy and a reader need both modules).
Both cycles this test was written for hid behind exactly those (the boundary search imported
``tuner``'s ``Workload`` under TYPE_CHECKING; ``stats`` imported ``warmup`` inside a function),
so the usual "module level only" rule would not have seen them. That import-time graph is also
checked on its own, with no exceptions: a cycle there breaks ``import``.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. The
implicit import of a module's parent package (``autotune.core.warmup.offline`` runs
``autotune/core/warmup/__init__.py`` first) is not an edge: a package that re-exports its submodules
would otherwise always be a "cycle".
"""

from __future__ import annotations

import importlib

import pytest

from tests.support import import_graph, package_modules

#: Edges of the full graph that close a cycle and cannot be removed here yet, with the reason.
#: Each must still exist (delete the entry when its import goes).
KNOWN_EDGES: dict[tuple[str, str], str] = {}


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


@pytest.mark.parametrize("module", sorted(m for m in package_modules() if not m.endswith("__main__")))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)
