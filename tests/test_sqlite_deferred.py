"""Keyword rows of deleted entries: queued by the delete trigger, deleted by the store's next
write, and never returned by a search meanwhile, whoever deleted the entry."""

from __future__ import annotations

from pathlib import Path

from host.store.records import NewEntry, Query, Quotas, Scope
from host.store.sqlite import keyword, writes
from host.store.sqlite import vectors as vec
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.schema import connect, migrate
from host.text.keyword import query_terms

A = Scope("ns", "a1")
Q = Query(tiers=("episodic",), limit=50)


def _entry(k: int, text: str) -> NewEntry:
    return NewEntry(tier="episodic", key=b'{"k":%d}' % k, content=b'"%s"' % text.encode())


def _search(conn, words: str) -> list[bytes]:  # type: ignore[no-untyped-def]
    return sorted(e.key for e in keyword.search_entries(conn, A, Q, query_terms(words), 10.0, 50))


def _counts(conn) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """(entries, keyword rows, queued keyword deletes)."""
    return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[return-value]
                 for t in ("entries", "entries_fts", "fts_gone"))


def _put(conn, entries: list[NewEntry], deferred: Deferred | None = None) -> None:  # type: ignore[no-untyped-def]
    conn.execute("BEGIN IMMEDIATE")
    assert writes.put_entries(conn, A, entries, 1.0, Quotas(), deferred) == [None] * len(entries)
    if deferred is not None:
        deferred.flush(conn)
    conn.execute("COMMIT")


def test_a_delete_by_another_tool_is_never_found_and_goes_at_the_next_write(
    tmp_path: Path,
) -> None:
    """Rows deleted with plain SQL keep their keyword rows until the next put, which deletes
    them; a new entry taking a deleted entry's row id is found by its own text only."""
    conn = connect(str(tmp_path / "s.db"))
    migrate(conn)
    _put(conn, [_entry(1, "amber falcon"), _entry(2, "cobalt otter")])
    conn.execute("DELETE FROM entries WHERE key = '{\"k\":2}'")  # the highest id: reused next
    assert _counts(conn) == (1, 2, 1)
    assert _search(conn, "cobalt otter") == []
    _put(conn, [_entry(3, "violet lynx")], Deferred())
    assert _counts(conn) == (2, 2, 0)
    assert _search(conn, "cobalt") == [] and _search(conn, "lynx") == [b'{"k":3}']
    conn.close()


def test_forget_and_gc_without_a_writer_leave_no_keyword_rows(tmp_path: Path) -> None:
    """`forget_entries` and `collect_expired` called on their own (library, CLI) delete the
    keyword rows in the same transaction."""
    conn = connect(str(tmp_path / "s.db"))
    migrate(conn)
    short = NewEntry(tier="episodic", key=b'{"k":3}', content=b'"brief walrus"', ttl=5)
    _put(conn, [_entry(1, "amber walrus"), _entry(2, "cobalt walrus"), short])
    assert writes.forget_entries(conn, A, ["episodic"], [b'{"k":1}'], [], 2.0) == 1
    assert writes.collect_expired(conn, 100.0) == 1
    assert _counts(conn) == (1, 1, 0)
    assert _search(conn, "walrus") == [b'{"k":2}']
    conn.close()


def test_a_vector_for_an_entry_forgotten_in_the_same_group_is_not_stored(tmp_path: Path) -> None:
    """`write_vectors` after a forget of the same entry in one transaction stores nothing: the
    keyword row still waiting for deletion does not count as the entry's text."""
    conn = connect(str(tmp_path / "s.db"))
    migrate(conn)
    _put(conn, [_entry(1, "amber walrus")])
    [(pending, _digest)] = vec.pending(conn, 10)
    held = Deferred()
    conn.execute("BEGIN IMMEDIATE")
    assert writes.forget_entries(conn, A, ["episodic"], [b'{"k":1}'], [], 2.0, held) == 1
    assert vec.write_vectors(conn, [(pending.id, pending.text, b"\0" * 8)]) == []
    held.flush(conn)
    conn.execute("COMMIT")
    assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
    assert _counts(conn) == (0, 0, 0)
    conn.close()
