"""What the parts of the PostgreSQL store share: the SQL of a read's WHERE, row decoding, the
keyword index's lexemes, and `StoreState`, the state every part reads (the pool, the settings).

`PostgresEntryStore` (`host.store.postgres.store`) is made of parts, one a concern: writes and
their group commit (`writes`), reads and keyword search (`reads`), the hosts' vectors
(`vectors`), the change log (`changes`); each is a class over `StoreState`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import msgspec

from host.store.postgres import filters as pg_filters
from host.store.postgres.batch import WriteBatcher
from host.store.records import (
    NewEntry,
    Query,
    Quotas,
    Scope,
    StoredEntry,
    owner_for,
    scope_token,
    stored_bytes,
)
from host.text.keyword import tokens

__all__ = [
    "AFTER", "COLUMNS", "DISK_FULL", "GC_BATCH", "VECTOR_LOCK_TIMEOUT_MS", "Params", "StoreState",
    "addresses", "entry_of", "indexable", "is_postgres_url", "json_decode", "json_encode",
    "keep_session", "lexeme_counts", "lexemes_and_length", "lexemes_of", "read_where",
    "scope_lexeme", "stored_size", "text_array", "visibility",
]

log = logging.getLogger("a2e_host.store")
DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full

json_decode = msgspec.json.decode
json_encode = msgspec.json.Encoder().encode

COLUMNS = ("e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,"
            " e.created_at, e.updated_at, e.valid_from, e.valid_until")
AFTER = 12  # the columns after `COLUMNS` start here (a read's `e.id`, ...)
_MAX_LEXEME_BYTES = 2046  # PostgreSQL's limit for one tsvector lexeme is 2047 bytes
_MAX_LEXEMES_BYTES = 900_000  # and 1 MiB for all of them; a store entry is far below
GC_BATCH = 1000
VECTOR_LOCK_TIMEOUT_MS = 100  # longest a background vector write waits on a row lock


def is_postgres_url(db: str) -> bool:
    """True when `db` names a PostgreSQL database rather than a SQLite file."""
    return db.startswith(("postgresql://", "postgres://"))


def scope_lexeme(namespace: str) -> str:
    """The lexeme every entry of `namespace` carries; no query token can equal it ("_")."""
    return "_" + scope_token(namespace)


def lexemes_of(namespace: str, text: str) -> str:
    """The tsvector literal stored for an entry: the scope lexeme, then each distinct token of
    `text` (`host.text.keyword.tokens`) with one position per occurrence (1..tf, at most
    256), so that BM25 can read term counts; tokens past PostgreSQL's lexeme limits are left
    out. Tokens are letters and digits only, so quoting them is safe."""
    return lexemes_and_length(namespace, text)[0]


def lexemes_and_length(namespace: str, text: str) -> tuple[str, int]:
    """`lexemes_of` and the entry's token count as BM25 reads it (`doc_len`: the positions
    stored plus one for the scope lexeme, as `a2e_doc_len` counts them)."""
    out = [f"'{scope_lexeme(namespace)}'"]
    total = len(out[0])
    doc_len = 1
    for t, k in lexeme_counts(text).items():
        total += len(t.encode()) + 2 * k + 4
        if total > _MAX_LEXEMES_BYTES:
            break
        out.append(f"'{t}':" + ",".join(map(str, range(1, k + 1))))
        doc_len += k
    return " ".join(out), doc_len


def text_array(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of `values` (each quoted: any text but NUL is safe)."""
    return "{" + ",".join(
        '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def stored_size(e: NewEntry) -> int:
    """The bytes an entry counts against the byte quotas (`host.store.records.stored_bytes`, as
    on SQLite)."""
    return stored_bytes(e.key, e.content, e.tags) + len(e.vectors)


def lexeme_counts(text: str) -> dict[str, int]:
    """Each distinct token of `text` that fits in a lexeme, with its count capped at 256 (the
    positions `lexemes_of` stores), in order of first occurrence."""
    return {t: min(n, 256) for t, n in Counter(tokens(text)).items()
            if len(t.encode()) <= _MAX_LEXEME_BYTES}


# `entry_of` passes StoredEntry's fields by position (twice as fast as by name, ~0.4 against ~0.8
# us a row: a keyword query builds ~140): the order it relies on, checked at import
_ROW_FIELDS = ("tier", "owner", "key", "content", "tags", "source", "score", "ttl",
               "created_at", "updated_at", "relevance", "id", "keyword", "similarity", "fused",
               "valid_from", "valid_until")
if tuple(f.name for f in fields(StoredEntry))[:len(_ROW_FIELDS)] != _ROW_FIELDS:
    raise ImportError("StoredEntry's fields moved: update host.store.postgres.sql.entry_of")


def entry_of(r: Any, id: int | None = None, keyword: float | None = None, valid: int = 10
             ) -> StoredEntry:
    """The entry of a row of `COLUMNS`, with the row id `id` and BM25 `keyword` when given;
    its validity in columns `valid` and `valid` + 1 (a keyword query's rows: further on)."""
    return StoredEntry(r[0], r[1], r[2].encode(), r[3].encode(), list(r[4]), r[5], r[6], r[7],
                       r[8], r[9], None, id, keyword, None, None, r[valid], r[valid + 1])


class Params:
    """Collects query arguments; calling it with a value returns its `$n` placeholder."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def read_where(scope: Scope, q: Query, now: float, p: Params) -> str:
    """The WHERE clause of a read: namespace, visibility, liveness, keys, tags, the validity
    at `as_of`, the extensions' filters."""
    vis = [f"(e.tier = {p(t)} AND e.owner = {p(owner_for(t, scope.agent))})" for t in q.tiers]
    sql = (f"e.namespace = {p(scope.namespace)} AND ({' OR '.join(vis) or 'false'})"
           f" AND (e.expires_at IS NULL OR e.expires_at > {p(now)})")
    if q.as_of is not None:  # the time extension: the entries valid then
        at = p(q.as_of)
        sql += (f" AND (e.valid_from IS NULL OR e.valid_from <= {at}::float8)"
                f" AND (e.valid_until IS NULL OR e.valid_until > {at}::float8)")
    if q.keys:
        keys = p([k.decode() for k in q.keys])
        sql += (f" AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT"
                f" a2e_key_hash(k) FROM unnest({keys}::text[]) k))"
                f" AND e.key = ANY({keys}::text[])")
    if q.tags:
        sql += f" AND e.tags @> {p(list(dict.fromkeys(q.tags)))}::text[]"
    if q.where or q.key_prefix:  # the store extensions' filters (postgres/filters.py)
        sql += pg_filters.where_sql(q.where, q.key_prefix, p)
    return sql


def addresses(scope: Scope, tiers: Sequence[str], keys: Sequence[bytes]) -> dict[str, Any]:
    """The entries `scope` addresses under `keys` in `tiers`, as the JSON fields
    `a2e_forget_batch` and `a2e_touch_batch` read (namespace, tiers, owners, keys)."""
    return {"namespace": scope.namespace, "tiers": list(tiers),
            "owners": [owner_for(t, scope.agent) for t in tiers],
            "keys": [k.decode() for k in keys]}


def visibility(scope: Scope, q: Query) -> tuple[list[str], list[str], list[str], list[str]]:
    """What `q` lets `scope` read, as the SQL functions take it: tiers, their owners, keys
    (text), distinct tags."""
    return (list(q.tiers), [owner_for(t, scope.agent) for t in q.tiers],
            [k.decode() for k in q.keys], list(dict.fromkeys(q.tags)))


def indexable(terms: Sequence[str]) -> list[str]:
    return [t for t in terms if len(t.encode()) <= _MAX_LEXEME_BYTES]


async def keep_session(conn: Any) -> None:
    """A pooled connection's reset on release: nothing to send. asyncpg's default sends
    `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` every release, a round trip
    after every statement; this store leaves none of those behind (session advisory locks are
    released in `finally`, settings are SET LOCAL), and asyncpg still rolls back an open
    transaction before calling this."""



class StoreState:
    """The state the store's parts share; `PostgresEntryStore.__init__` sets it."""

    url: str
    quotas: Quotas
    gc_batch: int
    batch_max: int
    max_term_docs: int
    max_matches: int
    vectors_available: bool
    _pool: Any
    _listener: Any
    _indexed_dims: set[int]
    _puts: WriteBatcher | None
    _forgets: WriteBatcher | None
    _touches: WriteBatcher | None

    @property
    def pool(self) -> Any:
        """The asyncpg pool (for `host.store.postgres.admin`). Raises `RuntimeError` if the
        store is not open."""
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool
