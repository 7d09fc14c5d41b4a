"""The optional store capabilities (host/store/base.py): which backend has which, and that
they are declared in one place and never probed.

A part that uses a capability checks it once, with `isinstance`, when it is given the store;
a method a refactor loses makes that check False and silently turns a feature off (the
watches' LISTEN/NOTIFY, the metrics' entry counts, the in-memory vector index). The sets below
name what each backend offers, so such a loss fails here. A store is only constructed: the
checks read its attributes, not its database.
"""

from __future__ import annotations

import ast
from pathlib import Path

from host.store import base
from host.store.postgres.store import PostgresEntryStore
from host.store.sqlite.store import SQLiteEntryStore

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "host" / "store" / "base.py"

# every runtime-checkable protocol of base.py: the store interface and its capabilities
CAPABILITIES: dict[str, type] = {
    name: obj for name in base.__all__
    if isinstance(obj := getattr(base, name), type) and getattr(obj, "_is_runtime_protocol", False)
}
SHARED = {"EntryStore", "StoreExtensions", "ClientVectors", "KeywordStats", "TierCounts",
          "AdjustableQuotas", "VectorQueue", "ChangeLog", "Browse", "StoredVectors"}
SQLITE = SHARED | {"NotReadyReason", "VectorStore", "NamespaceVectors", "VectorCatchUp",
                   "ClientSpaceReads"}
POSTGRES = SHARED | {"VectorSearch", "ChangeNotices", "ClientSpaceReads", "NearSearch"}


def _capabilities(store: object) -> set[str]:
    return {name for name, proto in CAPABILITIES.items() if isinstance(store, proto)}


def test_every_capability_is_named_here() -> None:
    """Each capability base.py declares is in one of the backends' sets (a new one is added
    to them with the backend that has it)."""
    assert set(CAPABILITIES) == SQLITE | POSTGRES


def test_the_sqlite_store_has_its_capabilities(tmp_path: Path) -> None:
    assert _capabilities(SQLiteEntryStore(tmp_path / "a.db")) == SQLITE


def test_the_postgres_store_has_its_capabilities() -> None:
    """Constructing the store connects to nothing (that is `open()`)."""
    assert _capabilities(PostgresEntryStore("postgresql://nobody@127.0.0.1:9/none")) == POSTGRES


def _host_modules() -> list[Path]:
    return sorted((ROOT / "host").rglob("*.py"))


def test_no_part_probes_a_store_with_hasattr_or_getattr() -> None:
    """A capability is asked with `isinstance` against its protocol, never by an attribute's
    name (`hasattr(store, "x")`, `getattr(self.store, "x", None)`)."""
    probes = []
    for path in _host_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr") and node.args
                    and "store" in ast.unparse(node.args[0]).lower()):
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, "store probes:\n" + "\n".join(probes)


def test_store_capabilities_are_declared_in_base_only() -> None:
    """A protocol that calls itself a capability of an `EntryStore` lives in base.py."""
    elsewhere = []
    for path in _host_modules():
        if path == BASE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and "capability of an `EntryStore`" in " ".join(
                    (ast.get_docstring(node) or "").split()):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}")
    assert not elsewhere, "store capabilities outside host/store/base.py:\n" + "\n".join(elsewhere)
