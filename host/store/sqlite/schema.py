"""The SQLite schema, as numbered migrations applied at open.

`PRAGMA user_version` records the last migration applied. A migration is only ever appended;
existing ones never change (schema evolution is written down, as for the wire).

Tables: `entries` (one row an entry; `owner` is the agent for episodic rows, "" for semantic;
`agent` the writer, for quotas), `entry_tags` (the tag postings of each (namespace, tier, owner),
so a tag filter reads only what the reader may see),
`entries_fts` (FTS5: a per-namespace `scope` token and the searchable `body`), `usage`
(entries and bytes per (namespace, agent), agent "" holding the namespace total, in the
database so every writer process sees the same counts). Deleting an entry row removes its tags
and its usage through a trigger, whoever deletes it (forget, TTL collection, another tool).
Since migration 4 inserts and overwrites are counted by `sqlite.writes.put_entries`, the only
writer of entries, once a commit group, and the trigger queues the deleted entry's FTS row in
`fts_gone`: every write function of `sqlite.writes` deletes the queued rows before its transaction
commits (`host/store/sqlite/deferred.py`). A row deleted by another tool stays in the keyword
index until the store's next write; searches join `entries`, so it is never returned.

Migration 6: `keyword_stats`, the rows and tokens of each namespace's keyword rows (BM25 with
the namespace's own statistics, `host/store/sqlite/bm25.py`).

Migration 7: `size` (what byte quotas count) is the key's, content's and tags' bytes
(`host.store.records.stored_bytes`), recounted for existing entries.

Migration 2 (similarity search, `host/store/sqlite/vectors.py`): `vectors` (one float32 BLOB an
entry, of the model named in `search_meta`), `embed_queue` (entries whose vector is missing or
stale: filled by triggers on insert and on a change of content or tags), `vectors_gone` (ids
whose vector a delete removed, for the in-memory index to drop), and the keyword index rebuilt
with Porter stemming. Deleting an entry deletes its vector.

Migration 10: `vectors.seq`, the number of each vector's write (the `vector_seq` counter of
`search_meta`), so the processes on one file see each other's vectors (`sqlite.vectors`).

Migration 8 (the store extensions' client vectors, `host/store/sqlite/extensions.py`):
`client_spaces` (the dimension of each namespace's named vector space) and `client_vectors`
(one BLOB of unit float32 rows an entry, deleted with it).

Migration 5 (change streams, `host/store/sqlite/changes.py`): `changes`, one row a committed
request that changed entries (what `memory/watch` replays), and `change_floor`. Migration 9:
a namespace's changes numbered on their own (`seq`), and `change_keys`, so that the content of
a deleted entry leaves the log with it.

What is checked before a file is opened is in `host.store.sqlite.files`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from host.store.sqlite import history, read_times, scan_index
from host.store.sqlite.bm25 import row_length

__all__ = ["MIGRATIONS", "connect", "migrate", "write_transaction"]

MIGRATIONS: tuple[str, ...] = (
    # 1: entries, tags, keyword index, usage counters
    """
    CREATE TABLE entries (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        tier TEXT NOT NULL,
        owner TEXT NOT NULL,
        key TEXT NOT NULL,
        agent TEXT NOT NULL,
        content TEXT NOT NULL,
        tags TEXT NOT NULL,
        source TEXT NOT NULL,
        score REAL NOT NULL,
        ttl INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        expires_at REAL,
        size INTEGER NOT NULL,
        UNIQUE (namespace, tier, owner, key)
    );
    CREATE INDEX entries_rank ON entries (namespace, tier, owner, score DESC, updated_at DESC);
    CREATE INDEX entries_expiry ON entries (expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE entry_tags (
        tag TEXT NOT NULL,
        entry_id INTEGER NOT NULL,
        PRIMARY KEY (tag, entry_id)
    ) WITHOUT ROWID;
    CREATE INDEX entry_tags_entry ON entry_tags (entry_id);
    CREATE VIRTUAL TABLE entries_fts USING fts5(scope, body, tokenize='unicode61 remove_diacritics 2');
    CREATE TABLE usage (
        namespace TEXT NOT NULL,
        agent TEXT NOT NULL,
        entries INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (namespace, agent)
    ) WITHOUT ROWID;
    CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
        INSERT INTO usage (namespace, agent, entries, bytes)
        VALUES (new.namespace, new.agent, 1, new.size), (new.namespace, '', 1, new.size)
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = entries + 1, bytes = bytes + excluded.bytes;
    END;
    CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
        UPDATE usage SET entries = entries - 1, bytes = bytes - old.size
        WHERE namespace = old.namespace AND agent IN (old.agent, '');
        DELETE FROM entry_tags WHERE entry_id = old.id;
        DELETE FROM entries_fts WHERE rowid = old.id;
    END;
    CREATE TRIGGER entries_au AFTER UPDATE OF size, agent ON entries BEGIN
        UPDATE usage SET entries = entries - 1, bytes = bytes - old.size
        WHERE namespace = old.namespace AND agent IN (old.agent, '');
        INSERT INTO usage (namespace, agent, entries, bytes)
        VALUES (new.namespace, new.agent, 1, new.size), (new.namespace, '', 1, new.size)
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = entries + 1, bytes = bytes + excluded.bytes;
    END;
    """,
    # 2: similarity search (host/search): vectors, the embedding queue, stemmed keyword index
    """
    CREATE TABLE vectors (
        entry_id INTEGER PRIMARY KEY,
        digest BLOB NOT NULL,
        vec BLOB NOT NULL
    );
    CREATE TABLE embed_queue (entry_id INTEGER PRIMARY KEY);
    CREATE TABLE vectors_gone (entry_id INTEGER PRIMARY KEY);
    CREATE TABLE search_meta (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO embed_queue (entry_id) SELECT id FROM entries;
    CREATE TRIGGER entries_vec_ai AFTER INSERT ON entries BEGIN
        INSERT OR IGNORE INTO embed_queue (entry_id) VALUES (new.id);
    END;
    CREATE TRIGGER entries_vec_au AFTER UPDATE OF content, tags ON entries BEGIN
        INSERT OR IGNORE INTO embed_queue (entry_id) VALUES (new.id);
    END;
    CREATE TRIGGER entries_vec_ad AFTER DELETE ON entries BEGIN
        INSERT OR IGNORE INTO vectors_gone (entry_id)
        SELECT old.id WHERE EXISTS (SELECT 1 FROM vectors WHERE entry_id = old.id);
        DELETE FROM vectors WHERE entry_id = old.id;
        DELETE FROM embed_queue WHERE entry_id = old.id;
    END;
    CREATE TEMP TABLE fts_copy AS SELECT rowid AS id, scope, body FROM entries_fts;
    DROP TABLE entries_fts;
    CREATE VIRTUAL TABLE entries_fts USING fts5(scope, body, tokenize='porter unicode61 remove_diacritics 2');
    INSERT INTO entries_fts (rowid, scope, body) SELECT id, scope, body FROM fts_copy;
    DROP TABLE fts_copy;
    """,
    # 3: indexes that match the reads. Tag postings keyed by the visibility range first (a tag
    # filter no longer reads the tag's rows of every namespace); the rank index also holds
    # expires_at, so counting the live entries of a range reads the index alone.
    """
    CREATE TABLE entry_tags_v2 (
        namespace TEXT NOT NULL,
        tier TEXT NOT NULL,
        owner TEXT NOT NULL,
        tag TEXT NOT NULL,
        entry_id INTEGER NOT NULL,
        PRIMARY KEY (namespace, tier, owner, tag, entry_id)
    ) WITHOUT ROWID;
    INSERT INTO entry_tags_v2 (namespace, tier, owner, tag, entry_id)
        SELECT e.namespace, e.tier, e.owner, t.tag, t.entry_id
        FROM entry_tags t JOIN entries e ON e.id = t.entry_id;
    DROP TRIGGER entries_ad;
    DROP TABLE entry_tags;
    ALTER TABLE entry_tags_v2 RENAME TO entry_tags;
    CREATE INDEX entry_tags_entry ON entry_tags (entry_id);
    CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
        UPDATE usage SET entries = entries - 1, bytes = bytes - old.size
        WHERE namespace = old.namespace AND agent IN (old.agent, '');
        DELETE FROM entry_tags WHERE entry_id = old.id;
        DELETE FROM entries_fts WHERE rowid = old.id;
    END;
    DROP INDEX entries_rank;
    CREATE INDEX entries_rank
        ON entries (namespace, tier, owner, score DESC, updated_at DESC, expires_at);
    """,
    # 4: the write path's held writes (host/store/sqlite/deferred.py). Inserts and overwrites
    # no longer count themselves in `usage` row by row (two upserts an entry): `put_entries`
    # sums them over a commit group and writes one upsert a (namespace, agent) before COMMIT;
    # deletes still count through entries_ad, whoever deletes. A deleted entry's keyword row is
    # no longer deleted by the trigger (FTS5 wrote each delete out as a segment of its own) but
    # queued in `fts_gone`, and deleted with the rest of the transaction's keyword writes.
    """
    DROP TRIGGER entries_ai;
    DROP TRIGGER entries_au;
    CREATE TABLE fts_gone (entry_id INTEGER PRIMARY KEY);
    DROP TRIGGER entries_ad;
    CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
        UPDATE usage SET entries = entries - 1, bytes = bytes - old.size
        WHERE namespace = old.namespace AND agent IN (old.agent, '');
        DELETE FROM entry_tags WHERE entry_id = old.id;
        INSERT OR IGNORE INTO fts_gone (entry_id) VALUES (old.id);
    END;
    """,
    # 5: the change log of `memory/watch` (host/store/sqlite/changes.py): one row a committed
    # request, written in the write's transaction; the floor is the highest seq pruned
    """
    CREATE TABLE changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        at REAL NOT NULL,
        op TEXT NOT NULL,
        entries BLOB NOT NULL
    );
    CREATE INDEX changes_namespace ON changes (namespace, seq);
    CREATE TABLE change_floor (
        namespace TEXT PRIMARY KEY,
        seq INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 6: keyword statistics per namespace (host/store/sqlite/bm25.py): the rows and tokens of
    # each scope token's keyword rows, for BM25 that no other namespace moves. Kept by
    # host/store/sqlite/deferred.py; filled here from FTS5's content and docsize tables
    # (`a2e_row_length`, registered by `migrate`, reads a docsize record).
    """
    CREATE TABLE keyword_stats (
        scope TEXT PRIMARY KEY,
        rows INTEGER NOT NULL,
        tokens INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO keyword_stats (scope, rows, tokens)
        SELECT c.c0, count(*), sum(a2e_row_length(d.sz))
        FROM entries_fts_content c JOIN entries_fts_docsize d ON d.id = c.id GROUP BY c.c0;
    """,
    # 7: byte quotas count keys and tags too (host.store.records.stored_bytes): every entry's
    # size recounted, and the usage rows' bytes summed again from them
    """
    UPDATE entries SET size = length(CAST(key AS BLOB)) + length(CAST(content AS BLOB))
        + coalesce((SELECT sum(length(CAST(j.value AS BLOB))) FROM json_each(entries.tags) j), 0);
    UPDATE usage SET bytes = coalesce((SELECT sum(e.size) FROM entries e
        WHERE e.namespace = usage.namespace AND (usage.agent = '' OR e.agent = usage.agent)), 0);
    """,
    # 8: client-supplied vectors (the store extension, host/store/sqlite/extensions.py): the
    # dimension of each (namespace, space), fixed by its first vector, and one BLOB an entry
    # (its unit float32 rows); deleting an entry deletes them
    """
    CREATE TABLE client_spaces (
        namespace TEXT NOT NULL,
        space TEXT NOT NULL,
        dims INTEGER NOT NULL,
        PRIMARY KEY (namespace, space)
    ) WITHOUT ROWID;
    CREATE TABLE client_vectors (
        entry_id INTEGER PRIMARY KEY,
        space TEXT NOT NULL,
        vecs BLOB NOT NULL
    );
    CREATE TRIGGER entries_cvec_ad AFTER DELETE ON entries BEGIN
        DELETE FROM client_vectors WHERE entry_id = old.id;
    END;
    """,
    # 9: the change log numbers each namespace's changes on their own (`seq`; the rows from
    # before keep theirs, so old cursors resume), `id` orders them for pruning; `change_keys`
    # ties an entry row to the changes carrying its content, which leaves them when the row is
    # deleted (`change_gone`, host/store/sqlite/changes.py). Content of entries already gone
    # leaves now.
    """
    CREATE TABLE changes_v9 (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        op TEXT NOT NULL,
        entries BLOB NOT NULL
    );
    INSERT INTO changes_v9 (id, namespace, seq, at, op, entries)
        SELECT seq, namespace, seq, at, op, entries FROM changes;
    DROP TABLE changes;
    ALTER TABLE changes_v9 RENAME TO changes;
    CREATE UNIQUE INDEX changes_namespace ON changes (namespace, seq);
    CREATE TABLE change_keys (
        entry_id INTEGER NOT NULL,
        change_id INTEGER NOT NULL,
        PRIMARY KEY (entry_id, change_id)
    ) WITHOUT ROWID;
    CREATE INDEX change_keys_change ON change_keys (change_id);
    CREATE TRIGGER changes_ad AFTER DELETE ON changes BEGIN
        DELETE FROM change_keys WHERE change_id = old.id;
    END;
    CREATE TABLE change_gone (
        entry_id INTEGER NOT NULL,
        tier TEXT NOT NULL,
        owner TEXT NOT NULL,
        key TEXT NOT NULL,
        upto INTEGER NOT NULL
    );
    CREATE TRIGGER entries_changes_ad AFTER DELETE ON entries
    WHEN EXISTS (SELECT 1 FROM change_keys WHERE entry_id = old.id) BEGIN
        INSERT INTO change_gone (entry_id, tier, owner, key, upto)
            VALUES (old.id, old.tier, old.owner, old.key,
                    coalesce((SELECT max(id) FROM changes), 0));
    END;
    UPDATE changes SET entries = (
        SELECT CAST(json_group_array(json(j.value)) AS BLOB) FROM json_each(changes.entries) j
        WHERE EXISTS (SELECT 1 FROM entries e WHERE e.namespace = changes.namespace
            AND e.tier = j.value ->> 0 AND e.owner = j.value ->> 1 AND e.key = j.value -> 2))
    WHERE op = 'stored';
    INSERT OR IGNORE INTO change_keys (entry_id, change_id)
        SELECT e.id, c.id FROM changes c, json_each(c.entries) j JOIN entries e
            ON e.namespace = c.namespace AND e.tier = j.value ->> 0
            AND e.owner = j.value ->> 1 AND e.key = j.value -> 2
        WHERE c.op = 'stored';
    """,
    # 10: every vector written takes the next number of the `vector_seq` counter (`seq`), so a
    # process reads the vectors other processes on the file wrote since it last looked
    # (host/store/sqlite/vectors.py `vectors_since`); the vectors from before are all number 0
    """
    ALTER TABLE vectors ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX vectors_seq ON vectors (seq);
    INSERT OR IGNORE INTO search_meta (name, value) VALUES ('vector_seq', '0');
    """,
    # 11: a `stored` change supersedes the earlier copies of the entries it carries
    # (host/store/sqlite/changes.py), so an entry row keeps one `change_keys` link, to the
    # change that last stored it; the older copies and links logged before leave now
    """
    UPDATE changes SET entries = (
        SELECT CAST(json_group_array(json(j.value)) AS BLOB) FROM json_each(changes.entries) j
        WHERE EXISTS (SELECT 1 FROM entries e WHERE e.namespace = changes.namespace
            AND e.tier = j.value ->> 0 AND e.owner = j.value ->> 1 AND e.key = j.value -> 2
            AND (SELECT max(change_id) FROM change_keys k WHERE k.entry_id = e.id)
                = changes.id))
    WHERE op = 'stored' AND id IN (SELECT k.change_id FROM change_keys k
        WHERE k.change_id < (SELECT max(change_id) FROM change_keys n
                             WHERE n.entry_id = k.entry_id));
    DELETE FROM change_keys WHERE change_id < (SELECT max(change_id) FROM change_keys n
        WHERE n.entry_id = change_keys.entry_id);
    """,
    # 12: the entries of one (namespace, tier, owner) in the order they were written, for a
    # search's neighbours of a candidate (host/store/sqlite/vectors.py `neighbour_entries`):
    # another tenant's rows between two of them are never read
    """
    CREATE INDEX entries_order ON entries (namespace, tier, owner, id);
    """,
    # 13: a key prefix on the member `ns` (LangGraph's namespace) reads a range of this index,
    # not the whole namespace (host/store/sqlite/scan_index.py)
    scan_index.MIGRATION,
    # 14: `read_at`, each entry's last read over the wire, and `entries_value`, the index of
    # eviction's order (host/store/sqlite/read_times.py)
    read_times.MIGRATION,
    # 15: `entry_history`, the earlier versions of entries and the entries consolidation on
    # write retired, written by triggers on `entries` (host/store/sqlite/history.py)
    history.MIGRATION,
    # 16: when an entry's fact holds (the time extension, docs/protocol.md "Time of a fact"):
    # [valid_from, valid_until) in epoch seconds, NULL open on that side; a read with `as_of`
    # keeps the entries valid then (host/store/sqlite/reads.py `read_where`). No index: the
    # filter rides on the read's own index range
    """
    ALTER TABLE entries ADD COLUMN valid_from REAL;
    ALTER TABLE entries ADD COLUMN valid_until REAL;
    """,
    # 17: a history version keeps its entry's bounds (host/store/sqlite/history.py)
    history.MIGRATION_VALIDITY,
)


def connect(path: str) -> sqlite3.Connection:
    """Open `path` in WAL mode with full durability; autocommit (explicit BEGIN by callers)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0,
                           cached_statements=256)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """`BEGIN IMMEDIATE` (the write lock, waiting up to the busy timeout) around the body:
    COMMIT when it ends, ROLLBACK and re-raise when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations not yet applied, each in its own transaction; the version reached."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.create_function("a2e_row_length", 1, row_length, deterministic=True)
    for number, script in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-check under the write lock: another process may have migrated meanwhile
            if conn.execute("PRAGMA user_version").fetchone()[0] >= number:
                conn.execute("ROLLBACK")
                continue
            for statement in _split(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _split(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        if not line.strip():
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            buf = []
    if buf and "\n".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements
