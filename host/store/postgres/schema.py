"""The PostgreSQL schema: numbered migrations, then the functions, applied at start under an
advisory lock.

The migrations are SQL files beside this module, `migrations/NNNN_name.sql` (package data of
the wheel, read through `importlib.resources`); `a2e_migrations` records each one applied. The
first is the baseline, numbered `BASELINE` (19): the tables, indexes and triggers as the
development versions' migrations 1-19 left them, squashed before the first release. From it on
the list is append-only: a migration never changes once released, a change is a new file with
the next number (as LangGraph's PostgreSQL store keeps its `MIGRATIONS`). A database those
development versions brought to 19 is at the baseline already; one they left below it is refused
(`OlderSchema`, naming what to do). Several hosts may start at once: `migrate` holds a session
advisory lock while it applies, so exactly one of them does the work and the others find it done.

Functions live in `functions/`, one file a concern as the Python modules are (`FUNCTION_FILES`:
usage counters and quotas, puts, eviction, forgets, touches, keyword search, the embedding queue,
the change log), every statement `CREATE OR REPLACE`, each function defined once. `migrate`
applies the pending migrations and then the functions in one transaction, at every start, and
drops the `a2e_` functions neither defines (a function the folder no longer has goes, and so
does the earlier signature of one whose arguments changed: the folder's functions count by name
and arguments, `Functions.signatures`). The rule: migrations hold tables, indexes, triggers and
data changes; function bodies go to the folder (a migration that creates a trigger declares its
function as a stub, which the folder, applied in the same transaction, replaces; `a2e_key_hash`,
part of the address index, is the baseline's).

Hosts of different versions on one database (a rolling upgrade): `a2e_functions` records the
version of the functions applied last (`FUNCTIONS_VERSION`, raised with every change to the
folder), and a host applies its own only when its version is not below that one. A host of an
older version started beside newer ones keeps the newer functions instead of putting its own
back (its migrations are all applied already; it finds nothing to do), so a function that
released hosts call keeps its arguments and results: a new signature is a new function, and the
old one stays while a supported older host may call it.

Tables (all prefixed `a2e_`, so the store can share a database with other applications), in the
baseline with their comments:
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
  to `halfvec`.
- `a2e_embed_queue`: entries waiting for a vector, filled by triggers, claimed by the hosts'
  embedding workers (oldest first, or those of one namespace: each row keeps its entry's
  namespace, migration 24); `a2e_search_meta`: the embedder's name and dimension.

`a2e_put_group(...)` is a host's group of store requests (its group commit,
`host.store.postgres.batch`) in one statement and one transaction, set-based: it takes the
namespaces' transaction advisory locks (`a2e_lock_namespace`, in namespace order), checks the
quotas once a namespace, and writes the rows with one INSERT and one UPDATE, so the
statement-level triggers (usage counters, embedding queue) run once a group. A namespace the
group could take past a quota goes request by request through `a2e_put_entries` (the SQLite
store's semantics, entry by entry). Every write of a namespace's rows (put, forget, touch, TTL
collection) takes that lock first, so quotas hold across hosts and the usage rows never
deadlock. `a2e_forget_batch` and `a2e_touch_batch` (recorded reads, which move `updated_at` and
nothing else) group forgets and touches. The `_logged` variants write the change log
(`a2e_changes`) in the same transaction.
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
    "BASELINE",
    "FUNCTIONS",
    "FUNCTIONS_VERSION",
    "FUNCTION_FILES",
    "Functions",
    "LOCK_CLASS",
    "LOCK_GC",
    "LOCK_MIGRATE",
    "MIGRATIONS",
    "MIGRATION_FUNCTIONS",
    "OlderSchema",
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
FUNCTIONS_DIR = "functions"  # beside this module: <concern>.sql, package data in the wheel
# The baseline's number: the development versions' migrations 1-19, squashed. A database they
# left below it is refused; one at 19 is at the baseline.
BASELINE = 19
# The version of `functions/` (a2e_functions.version): raised by one with every change there.
FUNCTIONS_VERSION = 16
# The files of `functions/`, by concern, in the order they are applied (bodies are not checked
# at creation, so the order is for the reader).
FUNCTION_FILES = ("usage", "puts", "evict", "forgets", "touches", "keyword", "vectors", "changes",
                  "history")

_DEFINES = re.compile(r"^CREATE (?:OR REPLACE )?FUNCTION (\w+)\(", re.M)
# a definition's name and arguments (`p_name type, ...`), in the SQL with its spaces folded
_SIGNATURES = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(([^)]*)\)")


def _load_migrations() -> dict[int, str]:
    """The migrations' SQL by number: `migrations/NNNN_*.sql`, numbered `BASELINE`, `BASELINE`
    + 1, ... with no gap."""
    files = sorted((f for f in resources.files(__package__).joinpath(MIGRATIONS_DIR).iterdir()
                    if f.name.endswith(".sql")), key=lambda f: f.name)
    numbers = [int(f.name.split("_", 1)[0]) for f in files]
    if numbers != list(range(BASELINE, BASELINE + len(files))):
        raise RuntimeError(f"PostgreSQL migrations are not numbered {BASELINE}..n: {numbers}")
    return {n: f.read_text(encoding="utf-8") for n, f in zip(numbers, files, strict=True)}


MIGRATIONS: dict[int, str] = _load_migrations()


class OlderSchema(ValueError):
    """The database holds a schema this host cannot bring to its own: one left by a development
    version before the baseline. The message names what to do (the CLI prints it, exits 2)."""


@dataclass(frozen=True, slots=True)
class Functions:
    """The functions: their version, their SQL (the files of `functions/` in order) and its
    SHA-256."""

    version: int
    sql: str
    digest: str

    @classmethod
    def of(cls, version: int, sql: str) -> Functions:
        """Functions of `version` made of `sql`."""
        return cls(version, sql, hashlib.sha256(sql.encode()).hexdigest())

    @property
    def names(self) -> frozenset[str]:
        """The names of the functions the SQL defines."""
        return frozenset(_DEFINES.findall(self.sql))

    @property
    def signatures(self) -> tuple[str, ...]:
        """Each function the SQL defines as `name(type, ...)`, its identity in PostgreSQL
        (`to_regprocedure`): a function whose arguments change is another function."""
        return tuple(
            f"{name}({', '.join(a.split(None, 1)[1].strip() for a in args.split(',') if a.strip())})"
            for name, args in _SIGNATURES.findall(" ".join(self.sql.split())))


def _load_functions() -> Functions:
    folder = resources.files(__package__).joinpath(FUNCTIONS_DIR)
    return Functions.of(FUNCTIONS_VERSION, "\n".join(
        folder.joinpath(f"{name}.sql").read_text(encoding="utf-8") for name in FUNCTION_FILES))


FUNCTIONS = _load_functions()
# functions the migrations define (the baseline's `a2e_key_hash`, the trigger stubs): kept
MIGRATION_FUNCTIONS = frozenset(n for sql in MIGRATIONS.values() for n in _DEFINES.findall(sql))

_OURS = ("SELECT p.proname, p.oid::regprocedure::text, p.oid FROM pg_proc p"
         " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
         " AND p.proname LIKE 'a2e\\_%' ORDER BY 2")


@asynccontextmanager
async def advisory_lock(conn: Any, lock: int) -> AsyncIterator[None]:
    """Hold the session advisory lock (`LOCK_CLASS`, `lock`) on the asyncpg `conn` for the
    body (waiting for it), releasing it whatever the body does."""
    await conn.execute("SELECT pg_advisory_lock($1, $2)", LOCK_CLASS, lock)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, lock)


def _older(version: int) -> OlderSchema:
    return OlderSchema(
        f"the PostgreSQL database holds the schema of a development version of a2e-host"
        f" (migration {version}), older than this version's baseline ({BASELINE}), and is left"
        f" as it is: export its entries with the version that made it (a2e-host export --db"
        f" URL > entries.jsonl) and import them into an empty database with this one"
        f" (a2e-host import entries.jsonl --db NEW_URL)")


async def migrate(conn: Any) -> int:
    """Apply the migrations not yet applied, then the functions (`apply_functions`), in one
    transaction under a session advisory lock; the version reached. `conn` is an asyncpg
    connection outside a transaction. `OlderSchema`, changing nothing, for a database a
    development version left below the baseline."""
    async with advisory_lock(conn, LOCK_MIGRATE):
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS a2e_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        async with conn.transaction():
            version = await conn.fetchval("SELECT coalesce(max(version), 0) FROM a2e_migrations")
            if 0 < version < BASELINE:
                raise _older(version)
            for number, script in MIGRATIONS.items():
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
    those), and drop the `a2e_` functions neither they nor the migrations define (a folder's
    function by name and arguments, so an old signature of a changed function goes). True when
    applied. Needs the migration lock and the baseline."""
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
    # the folder's functions by their arguments (one whose arguments changed leaves the old
    # signature behind: it goes), the migrations' by name
    kept = {r[0] for r in await conn.fetch(
        "SELECT to_regprocedure(s)::oid FROM unnest($1::text[]) s", list(f.signatures))}
    for name, signature, oid in await conn.fetch(_OURS):
        if oid not in kept and name not in MIGRATION_FUNCTIONS:
            await conn.execute(f"DROP FUNCTION {signature}")
            log.info("postgres function %s dropped: no longer defined", signature)
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
    `dim = dim` (16-bit floats: 43 % smaller than on `vector` at 100,000 vectors
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
