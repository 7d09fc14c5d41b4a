"""The export format round-trips: entries exported, imported into an empty store and exported
again come back identical (property test over keys, contents, tags, scores, timestamps)."""

from __future__ import annotations

import io
import json
import os
import tempfile
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from host.cli._progress import Progress
from host.cli.export import line_of
from host.cli.import_ import _entries
from host.store.records import Quotas
from host.store.sqlite.admin import export_rows, import_batch, open_store_file
from protocol.keys import canonical_key

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_entry = st.fixed_dictionaries({
    "namespace": st.sampled_from(["a", "b", "ns with space", "ünï"]),
    "tier": st.sampled_from(["episodic", "semantic"]),
    "agent": st.sampled_from(["x", "y"]),
    "key": st.dictionaries(_text, _json, min_size=1, max_size=3),
    "content": _json,
    "tags": st.lists(_text.filter(bool), max_size=3, unique=True),
    "score": st.floats(0, 1),
    "created_at": st.floats(1e9, 2e9),
    "age": st.floats(0, 1e6),
})


def _export(path: str) -> list[dict]:
    conn = open_store_file(path)
    try:
        _n, rows = export_rows(conn, time.time())
        return sorted((json.loads(line_of(r)) for r in rows), key=lambda d: json.dumps(d))
    finally:
        conn.close()


def _import(path: str, lines: list[bytes]) -> None:
    """Import `lines` as `a2e-host import` parses them, in one batch."""
    entries = list(_entries(io.BytesIO(b"\n".join(lines)), Progress("", None, io.StringIO())))
    conn = open_store_file(path, create=True)
    try:
        import_batch(conn, entries, time.time(), Quotas())
    finally:
        conn.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(_entry, min_size=1, max_size=8))
def test_export_import_export_is_identity(entries: list[dict]) -> None:
    """Whatever the keys, contents and tags, export -> import -> export gives the same lines."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "src.db"), os.path.join(tmp, "dst.db")
        _import(src, [json.dumps({
            "namespace": e["namespace"], "tier": e["tier"], "owner": e["agent"],
            "agent": e["agent"], "key": e["key"], "content": e["content"], "tags": e["tags"],
            "score": e["score"], "created_at": e["created_at"],
            "updated_at": e["created_at"] + e["age"],
        }).encode() for e in entries])
        first = _export(src)
        assert {(r["namespace"], r["tier"], canonical_key(r["key"])) for r in first} == {
            (e["namespace"], e["tier"], canonical_key(e["key"])) for e in entries}
        _import(dst, [json.dumps(r).encode() for r in first])
        assert _export(dst) == first
