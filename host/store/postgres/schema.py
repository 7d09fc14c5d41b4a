"""The PostgreSQL schema: numbered migrations, then one functions file, applied at start under
an advisory lock.

The migrations are SQL files beside this module, `migrations/NNNN_name.sql` (package data of
the wheel, read through `importlib.resources`). `a2e_migrations` records each migration
applied. A migration is only ever appended; existing ones never change (as for SQLite,
`host.store.sqlite.schema`). Several hosts may start at once: `migrate` holds a session
advisory lock while it applies, so exactly one of them does the work and the others find it
done.

Functions live in one file, `functions.sql` (package data too): every function and trigger
function of the schema as it stands, each `CREATE OR REPLACE`, so a change to a function is
one edit of that file (and of the version on its first line). `migrate` applies the pending
migrations and then that file in one transaction, at every start. The rule: migrations hold
tables, indexes, triggers and data changes; functions go to the file. Migrations 1-15 define
functions as they were then: they are history and stay as they are, the file restates the
functions' current text (a migration that creates a trigger on a new function declares a stub
of it, which the file, in the same transaction, replaces).

Hosts of different versions on one database (a rolling upgrade): `a2e_functions` (migration 16)
records the version of the file applied last, and a host applies its file only when its
version is not below that one. A host of an older version started beside newer ones keeps the
newer functions instead of putting its own back (its migrations are all applied already; it
finds nothing to do), so a function that older hosts still call keeps its arguments and
results: a new signature is a new function, the old one staying in the file while a supported
older host may call it, as `a2e_put` and `a2e_put_batch` stay for hosts of the first
versions. Hosts from before the file (schema 15) never touch functions once the migrations
they know are applied.

Tables (all prefixed `a2e_`, so the store can share a database with other applications):
- `a2e_entries`: one row an entry; `owner` is the agent for episodic rows, "" for semantic;
  `agent` the last writer (for quotas); `lexemes` the keyword index (a tsvector built by
  `array_to_tsvector` from `host.text.keyword.tokens`, so PostgreSQL's own parser never
  re-tokenises and both backends see the same terms) plus one scope lexeme `_n<hash>` that
  confines a search to one namespace (a token can never start with "_").
- `a2e_usage`: entries and bytes per (namespace, agent), agent "" holding the namespace total,
  kept by statement-level triggers, so every writer on every host sees the same counts.
- `a2e_vectors`: one embedding per entry (`real[]`, any dimension), deleted with its entry and
  when the entry's content or tags change. When the `vector` extension (pgvector) can be
  created, `ensure_vector_index` adds an HNSW index per dimension in use, on the vectors cast
  to `halfvec` (migration 18 rebuilt the earlier ones, on `vector`).
- `a2e_embed_queue` (migration 5): entries waiting for a vector, filled by triggers, claimed
  by the hosts' embedding workers; `a2e_search_meta`: the embedder's name and dimension.

`a2e_put_group(...)` is a host's group of store requests (its group commit,
`host.store.postgres.batch`) in one statement and one transaction, set-based: it takes the
namespaces' transaction advisory locks (`a2e_lock_namespace`, in namespace order), checks the
quotas once a namespace, and writes the rows with one INSERT and one UPDATE, so the
statement-level triggers (usage counters, embedding queue) run once a group. A namespace the
group could take past a quota goes request by request through `a2e_put_entries` (the SQLite
store's semantics, `host.store.sqlite.ops`, entry by entry). Every write of a namespace's rows
(put, forget, touch, TTL collection) takes that lock first, so quotas hold across hosts and the
usage rows never deadlock. `a2e_forget_batch` and `a2e_touch_batch` (recorded reads, which
move `updated_at` and nothing else) group forgets and touches. The `_logged` variants write
the change log (`a2e_changes`) in the same transaction.
"""

from __future__ import annotations

import hashlib
import logging
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "FUNCTIONS",
    "Functions",
    "LOCK_CLASS",
    "LOCK_GC",
    "LOCK_MIGRATE",
    "MIGRATIONS",
    "UnreachableDatabase",
    "advisory_lock",
    "apply_functions",
    "enable_vectors",
    "ensure_vector_index",
    "explain_open_error",
    "migrate",
    "vector_index",
]

log = logging.getLogger("a2e_host.store")

# Session advisory locks use the two-int form (class, object): a key space apart from the
# one-bigint form that `a2e_lock_namespace` uses, so they never collide.
LOCK_CLASS = 0x4132  # "A2"
LOCK_MIGRATE = 1
LOCK_GC = 2

# SQLSTATEs of an open that fails for a reason the operator fixes, and the fix
_FIXES = {
    "3D000": "create it (createdb) or fix the database name at the end of the URL",
    "28000": "fix the user in the URL",
    "28P01": "fix the user and password in the URL",
    "42501": "grant the user CREATE on the database's public schema, or use another user",
    "53300": "raise max_connections, or lower store.pool_size",
    "57P03": "wait until the server has started",
}


class UnreachableDatabase(ValueError):
    """The PostgreSQL store cannot be opened for a reason the operator fixes: the message is one
    line naming the (masked) URL and the fix (the CLI prints it and exits 2)."""


def explain_open_error(where: str, exc: BaseException) -> UnreachableDatabase | None:
    """The operator's message for `exc`, raised while opening the store at `where` (the URL,
    its password masked): a server that cannot be reached, a login or database it refuses, a
    user without the rights to create the tables. None for any other error."""
    if isinstance(exc, socket.gaierror):
        return UnreachableDatabase(f"cannot reach PostgreSQL at {where}: its host name does not"
                                   f" resolve ({exc.strerror}): fix the host in the URL")
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
            isinstance(exc, OSError) and not getattr(exc, "sqlstate", None)):
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or "timed out"
        return UnreachableDatabase(f"cannot reach PostgreSQL at {where} ({why}): is the server"
                                   " running, and are the host and port of the URL right?")
    fix = _FIXES.get(str(getattr(exc, "sqlstate", "")))
    if fix is None:
        return None
    return UnreachableDatabase(f"PostgreSQL at {where} refused: {exc}: {fix}")


MIGRATIONS_DIR = "migrations"  # beside this module: NNNN_name.sql, package data in the wheel
FUNCTIONS_FILE = "functions.sql"  # beside this module, package data in the wheel


def _load_migrations() -> tuple[str, ...]:
    """The migrations' SQL in order: `migrations/NNNN_*.sql`, numbered 1, 2, ... with no gap."""
    files = sorted((f for f in resources.files(__package__).joinpath(MIGRATIONS_DIR).iterdir()
                    if f.name.endswith(".sql")), key=lambda f: f.name)
    numbers = [int(f.name.split("_", 1)[0]) for f in files]
    if numbers != list(range(1, len(files) + 1)):
        raise RuntimeError(f"PostgreSQL migrations are not numbered 1..n: {numbers}")
    return tuple(f.read_text(encoding="utf-8") for f in files)


MIGRATIONS: tuple[str, ...] = _load_migrations()


@dataclass(frozen=True, slots=True)
class Functions:
    """The functions file: its version (its first line), text and SHA-256."""

    version: int
    sql: str
    digest: str

    @classmethod
    def parse(cls, sql: str) -> Functions:
        """`sql` as a functions file; `RuntimeError` without a version line first."""
        m = re.match(r"-- a2e functions version: (\d+)\n", sql)
        if m is None:
            raise RuntimeError("the PostgreSQL functions file does not start with its version")
        return cls(int(m.group(1)), sql, hashlib.sha256(sql.encode()).hexdigest())


FUNCTIONS = Functions.parse(
    resources.files(__package__).joinpath(FUNCTIONS_FILE).read_text(encoding="utf-8"))


@asynccontextmanager
async def advisory_lock(conn: Any, lock: int) -> AsyncIterator[None]:
    """Hold the session advisory lock (`LOCK_CLASS`, `lock`) on the asyncpg `conn` for the
    body (waiting for it), releasing it whatever the body does."""
    await conn.execute("SELECT pg_advisory_lock($1, $2)", LOCK_CLASS, lock)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, lock)


async def migrate(conn: Any) -> int:
    """Apply the migrations not yet applied, then the functions file (`apply_functions`), in
    one transaction under a session advisory lock; the version reached. `conn` is an asyncpg
    connection outside a transaction."""
    async with advisory_lock(conn, LOCK_MIGRATE):
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS a2e_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        async with conn.transaction():
            version = await conn.fetchval("SELECT coalesce(max(version), 0) FROM a2e_migrations")
            for number, script in enumerate(MIGRATIONS, start=1):
                if number <= version:
                    continue
                await conn.execute(script)
                await conn.execute("INSERT INTO a2e_migrations (version) VALUES ($1)", number)
                log.info("postgres schema migrated to version %d", number)
                version = number
            await apply_functions(conn)
        return int(version)


async def apply_functions(conn: Any, functions: Functions | None = None) -> bool:
    """Apply `functions` (the package's `FUNCTIONS` by default) inside the caller's transaction,
    unless the database records a newer version (a newer host's; this host then runs with
    those). True when applied. Needs the migration lock and migration 16."""
    f = functions or FUNCTIONS
    row = await conn.fetchrow("SELECT version, digest FROM a2e_functions FOR UPDATE")
    if row is not None and row[0] > f.version:
        log.info("postgres functions at version %d (a newer host's), this host's are %d:"
                 " keeping them", row[0], f.version)
        return False
    if row is not None and row[0] == f.version and row[1] != f.digest:
        log.warning("postgres functions version %d applied with other text (%s, this host's %s):"
                    " was the version raised with the change?", f.version, row[1][:12],
                    f.digest[:12])
    await conn.execute("SET LOCAL check_function_bodies = off")
    await conn.execute(f.sql)
    await conn.execute(
        "INSERT INTO a2e_functions (version, digest) VALUES ($1, $2) ON CONFLICT (one)"
        " DO UPDATE SET version = excluded.version, digest = excluded.digest,"
        " applied_at = now()", f.version, f.digest)
    return True


async def enable_vectors(conn: Any) -> bool:
    """Create the `vector` extension if it is available and allowed; True when present.

    Without it (not installed on the server, or no privilege to create it) vectors are still
    stored in `a2e_vectors`, but there is no HNSW index and no similarity search in SQL.
    """
    present = await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'vector'")
    if present:
        return True
    available = await conn.fetchval(
        "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
    if not available:
        return False
    import asyncpg

    async with advisory_lock(conn, LOCK_MIGRATE):
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except asyncpg.PostgresError as err:  # no privilege, or a broken installation
            log.warning("pgvector is available but could not be created (%s); no vector index",
                        err)
            return False
    return True


def vector_index(dim: int, kind: str) -> str:
    """The name of the HNSW index of vectors of `dim` dimensions on `kind` (`halfvec`, or
    `vector` where pgvector has no halfvec: before 0.7)."""
    return f"a2e_vectors_hnsw_half_{dim}" if kind == "halfvec" else f"a2e_vectors_hnsw_{dim}"


async def ensure_vector_index(conn: Any, dim: int, kind: str = "halfvec") -> None:
    """Create the HNSW (cosine) index for vectors of `dim` dimensions if it is missing.

    One partial expression index per dimension in use: on `embedding::halfvec(dim)` where
    `dim = dim` (migration 18; 16-bit floats: 43 % smaller than on `vector` at 100,000 vectors
    of 384 dimensions, docs/benchmarks.md), or on `embedding::vector(dim)` with `kind`
    "vector"; `Vectors.nearest_vectors` orders by the same expression.
    """
    if kind not in ("halfvec", "vector"):
        raise ValueError(f"vector index kind {kind!r}")
    if not 0 < dim <= (4000 if kind == "halfvec" else 2000):  # pgvector's HNSW limits
        raise ValueError(f"vector dimension {dim} out of range")
    async with advisory_lock(conn, LOCK_MIGRATE):
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {vector_index(dim, kind)} ON a2e_vectors USING hnsw"
            f" ((embedding::{kind}({dim})) {kind}_cosine_ops) WHERE dim = {dim}"
        )
