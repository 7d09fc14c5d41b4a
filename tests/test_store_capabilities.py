"""The store interface (host/store/interface.py): what every backend implements, which optional
capabilities each declares on its class line, and that a capability is never probed.

`EntryStore` and each optional capability are abstract base classes whose every method is
abstract, so a backend that loses a method cannot be constructed, and a capability is had only
by naming it on the class line (a check by `isinstance` is then a lookup in the class's bases,
never a guess from attribute names). The sets below name what each backend declares, so a
capability dropped from or added to a class line fails here. A store is only constructed: the
checks read its class, not its database.
"""

from __future__ import annotations

import ast
import inspect
from abc import abstractmethod
from pathlib import Path

import pytest

from host.store import interface
from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.sqlite.store import SQLiteEntryStore

ROOT = Path(__file__).resolve().parent.parent
INTERFACE = ROOT / "host" / "store" / "interface.py"

# every optional capability interface.py declares: an `EntryStore` with more methods
CAPABILITIES: dict[str, type] = {
    name: obj for name in interface.__all__
    if isinstance(obj := getattr(interface, name), type) and obj is not EntryStore
}
SQLITE = {"VectorStore", "NotReadyReason"}
POSTGRES = {"VectorSearch", "ChangeNotices", "NearSearch"}
BACKENDS: dict[type, set[str]] = {SQLiteEntryStore: SQLITE, PostgresEntryStore: POSTGRES}


def _declared(cls: type) -> set[str]:
    """The interface's classes named on `cls`'s class line, but `EntryStore`."""
    return {b.__name__ for b in cls.__bases__
            if b.__module__ == interface.__name__ and b is not EntryStore}


def test_every_capability_is_named_here() -> None:
    """Each optional capability interface.py declares is in one of the backends' sets (a new
    one is added to them with the backend that has it)."""
    assert set(CAPABILITIES) == SQLITE | POSTGRES
    assert all(issubclass(c, EntryStore) for c in CAPABILITIES.values())


@pytest.mark.parametrize("backend", list(BACKENDS), ids=lambda c: c.__name__)
def test_each_backend_declares_its_capabilities_on_its_class_line(backend: type) -> None:
    """A backend's class line names `EntryStore` and exactly its optional capabilities."""
    assert EntryStore in backend.__bases__
    assert _declared(backend) == BACKENDS[backend]


@pytest.mark.parametrize("backend", list(BACKENDS), ids=lambda c: c.__name__)
def test_each_backend_implements_every_method_it_declares(backend: type) -> None:
    """No abstract method is left on a backend: every method of `EntryStore` and of the
    capabilities on its class line is implemented, so the backend can be constructed."""
    assert backend.__abstractmethods__ == frozenset()


def test_every_method_of_the_interface_is_abstract() -> None:
    """Every method `EntryStore` and the capabilities declare is abstract: a backend cannot
    inherit one as a silent no-op, it must implement it."""
    concrete = [f"{cls.__name__}.{name}"
                for cls in (EntryStore, *CAPABILITIES.values())
                for name, fn in vars(cls).items()
                if inspect.isfunction(fn) and not name.startswith("__")
                and not getattr(fn, "__isabstractmethod__", False)]
    assert not concrete, f"methods with a body in host/store/interface.py: {concrete}"


@pytest.mark.parametrize("backend", list(BACKENDS), ids=lambda c: c.__name__)
def test_a_backend_that_loses_a_method_cannot_be_constructed(
        backend: type, tmp_path: Path) -> None:
    """A backend without one of the interface's methods (here `fetch` taken away) fails when
    constructed, not later when the feature that needs it is silently off."""
    lost = type("Lost", (backend,), {"fetch": abstractmethod(backend.fetch)})
    arg = str(tmp_path / "a.db") if backend is SQLiteEntryStore else "postgresql://n@127.0.0.1:9/n"
    with pytest.raises(TypeError, match="fetch"):
        lost(arg)
    assert isinstance(backend(arg), EntryStore)  # constructing connects to nothing


def _host_modules() -> list[Path]:
    return sorted((ROOT / "host").rglob("*.py"))


def test_no_part_probes_a_store_with_hasattr_or_getattr() -> None:
    """A capability is asked with `isinstance` against its class, never by an attribute's
    name (`hasattr(store, "x")`, `getattr(self.store, "x", None)`)."""
    probes = []
    for path in _host_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr") and node.args
                    and "store" in ast.unparse(node.args[0]).lower()):
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, "store probes:\n" + "\n".join(probes)


def test_store_capabilities_are_declared_in_the_interface_only() -> None:
    """A class that calls itself a capability of an `EntryStore` lives in interface.py."""
    elsewhere = []
    for path in _host_modules():
        if path == INTERFACE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and "capability of an `EntryStore`" in " ".join(
                    (ast.get_docstring(node) or "").split()):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}")
    assert not elsewhere, (
        "store capabilities outside host/store/interface.py:\n" + "\n".join(elsewhere))
