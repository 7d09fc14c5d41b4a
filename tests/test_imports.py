"""The import graph of host/ and protocol/, read from the source (ast): no cycles, between
modules or between packages, and protocol/ imports nothing of host/.

Every import counts: at module level, inside functions, and under `if TYPE_CHECKING:` (a cycle
that only type checking sees still ties two modules into one). An import by name at run time
(`importlib.import_module`, as the server picks its transport) is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("host", "protocol")


def _modules() -> dict[str, Path]:
    """Every module of the packages under test by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module that `name` (a module, or a name imported from one) lives in, if ours."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: relative import"
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = _owner(name)
                if target is not None and target != module:
                    edges[module].add(target)
    return edges


EDGES = _edges()


def _package(module: str) -> str:
    """The package a module belongs to; a module directly in host/ (app, config, client) is
    its own unit, since `host` itself is only the namespace of the others."""
    if module.startswith("protocol"):
        return "protocol"
    if MODULES[module].name == "__init__.py":
        return module
    parent = module.rpartition(".")[0]
    return module if parent == "host" else parent


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _explain(graph: dict[str, set[str]], cycle: list[str]) -> list[str]:
    return [f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle]


def test_the_graph_is_read():
    """The graph holds the modules and the imports it should (the test reads what it checks)."""
    assert {"host.app", "host.net.server", "host.core.router", "protocol.codec"} <= set(MODULES)
    assert "host.core.router" in EDGES["host.app"]
    assert "host.store.interface" in EDGES["host.store.sqlite.store"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_cycle_between_modules():
    """No module imports, directly or through others, a module that imports it."""
    cycles = _cycles(EDGES)
    assert cycles == [], [_explain(EDGES, c) for c in cycles]


def test_no_cycle_between_packages():
    """No package imports, through its modules, a package that imports it (a lower layer never
    imports a higher one): host.store and host.search, host.core and host.memory, ..."""
    graph: dict[str, set[str]] = {}
    for module, targets in EDGES.items():
        mine = graph.setdefault(_package(module), set())
        for target in targets:
            graph.setdefault(_package(target), set())
            if _package(target) != _package(module):
                mine.add(_package(target))
    assert {"host.store", "host.store.sqlite", "host.search", "host.core", "host.memory"} <= set(graph)
    cycles = _cycles(graph)
    assert cycles == [], [_explain(graph, c) for c in cycles]


def test_protocol_imports_nothing_of_host():
    """protocol/ is the pure wire layer: none of its modules imports host/."""
    offenders = {m: sorted(t for t in EDGES[m] if t.startswith("host"))
                 for m in MODULES if m.startswith("protocol")}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_text_is_a_leaf():
    """host.text (searchable text, tokens, BM25) imports nothing of host/, so a store may use it
    without importing the search."""
    leaf = {m: sorted(t for t in EDGES[m] if t.startswith("host") and not t.startswith("host.text"))
            for m in MODULES if m.startswith("host.text")}
    assert leaf and {m: t for m, t in leaf.items() if t} == {}


def test_no_asyncio_wait_for_in_the_host() -> None:
    """No `asyncio.wait_for` in host/ or protocol/: on Python 3.11 it runs its awaitable as a
    second task and loses a cancellation that races with it, which once left the embedding
    worker running after `Host.stop()` cancelled it (a suite stalled past CI's limit). Use
    `asyncio.timeout()` in a task, or a future with a `call_later` timer in a request handler
    (the request core steps handlers outside a task)."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for" and \
                    isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"{name}:{node.lineno}")
    assert found == []
