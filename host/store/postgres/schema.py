"""The PostgreSQL schema, as numbered migrations applied at start under an advisory lock.

`a2e_migrations` records each migration applied. A migration is only ever appended; existing
ones never change (as for SQLite, `host.store.sqlite.schema`). Several hosts may start at once:
`migrate` holds a session advisory lock while it applies, so exactly one of them does the work
and the others find it done.

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
  created, `ensure_vector_index` adds an HNSW index per dimension in use.
- `a2e_embed_queue` (migration 5): entries waiting for a vector, filled by triggers, claimed
  by the hosts' embedding workers; `a2e_search_meta`: the embedder's name and dimension.

`a2e_put(...)` is the whole upsert of one store request, run server-side in one statement: it
takes the namespace's transaction advisory lock (`a2e_lock_namespace`), reads the usage row,
and upserts entry by entry with the SQLite store's semantics (`host.store.sqlite.ops`). Every
write of a namespace's rows (put, forget, TTL collection) takes that lock first, so quotas hold
across hosts and the usage rows never deadlock. `a2e_put_batch(...)` (migration 2) runs many
puts in one statement, one transaction: a host's group commit (`host.store.postgres.batch`);
`a2e_forget_batch` (migration 4) and `a2e_touch_batch` (migration 6: recorded reads, which move
`updated_at` and nothing else) do the same for forgets and touches.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = [
    "LOCK_CLASS",
    "LOCK_GC",
    "LOCK_MIGRATE",
    "MIGRATIONS",
    "advisory_lock",
    "enable_vectors",
    "ensure_vector_index",
    "migrate",
]

log = logging.getLogger("a2e_host.store")

# Session advisory locks use the two-int form (class, object): a key space apart from the
# one-bigint form that `a2e_lock_namespace` uses, so they never collide.
LOCK_CLASS = 0x4132  # "A2"
LOCK_MIGRATE = 1
LOCK_GC = 2

MIGRATIONS: tuple[str, ...] = (
    # 1: entries, usage counters and their triggers, vectors, the put function
    r"""
    CREATE TABLE a2e_entries (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        namespace text NOT NULL,
        tier text NOT NULL,
        owner text NOT NULL,
        key text NOT NULL,
        agent text NOT NULL,
        content text NOT NULL,
        tags text[] NOT NULL,
        source text NOT NULL,
        score double precision NOT NULL,
        ttl bigint NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        expires_at double precision,
        size integer NOT NULL,
        lexemes tsvector NOT NULL
    );
    -- the address of an entry; the key by its hash, as a btree row must stay under ~2.7 kB
    -- (immutable: a database's encoding never changes)
    CREATE FUNCTION a2e_key_hash(p_key text) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT sha256(convert_to(p_key, 'UTF8')) $$;
    CREATE UNIQUE INDEX a2e_entries_address ON a2e_entries
        (namespace, tier, owner, a2e_key_hash(key));
    CREATE INDEX a2e_entries_rank ON a2e_entries
        (namespace, tier, owner, score DESC, updated_at DESC);
    CREATE INDEX a2e_entries_expiry ON a2e_entries (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX a2e_entries_ns_expiry ON a2e_entries (namespace, expires_at)
        WHERE expires_at IS NOT NULL;
    CREATE INDEX a2e_entries_lexemes ON a2e_entries USING gin (lexemes);
    CREATE INDEX a2e_entries_tags ON a2e_entries USING gin (tags);

    CREATE TABLE a2e_usage (
        namespace text NOT NULL,
        agent text NOT NULL,
        entries bigint NOT NULL,
        bytes bigint NOT NULL,
        PRIMARY KEY (namespace, agent)
    );

    CREATE TABLE a2e_vectors (
        entry_id bigint PRIMARY KEY REFERENCES a2e_entries (id) ON DELETE CASCADE,
        model text NOT NULL,
        dim integer NOT NULL,
        embedding real[] NOT NULL
    );

    CREATE FUNCTION a2e_lock_namespace(p_namespace text) RETURNS void
    LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(hashtextextended(p_namespace, 0)) $$;

    CREATE FUNCTION a2e_usage_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO a2e_usage AS u (namespace, agent, entries, bytes)
        SELECT namespace, a, sum(n), sum(b) FROM (
            SELECT namespace, agent AS a, 1 AS n, size::bigint AS b FROM new_rows
            UNION ALL SELECT namespace, '', 1, size FROM new_rows) d
        GROUP BY namespace, a ORDER BY namespace, a
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes;
        RETURN NULL;
    END $$;

    CREATE FUNCTION a2e_usage_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE a2e_usage AS u SET entries = u.entries - d.n, bytes = u.bytes - d.b
        FROM (
            SELECT namespace, a, sum(n) AS n, sum(b) AS b FROM (
                SELECT namespace, agent AS a, 1 AS n, size::bigint AS b FROM old_rows
                UNION ALL SELECT namespace, '', 1, size FROM old_rows) x
            GROUP BY namespace, a) d
        WHERE u.namespace = d.namespace AND u.agent = d.a;
        RETURN NULL;
    END $$;

    CREATE FUNCTION a2e_usage_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO a2e_usage AS u (namespace, agent, entries, bytes)
        SELECT namespace, a, sum(n), sum(b) FROM (
            SELECT namespace, agent AS a, 1 AS n, size::bigint AS b FROM new_rows
            UNION ALL SELECT namespace, '', 1, size FROM new_rows
            UNION ALL SELECT namespace, agent, -1, -size FROM old_rows
            UNION ALL SELECT namespace, '', -1, -size FROM old_rows) d
        GROUP BY namespace, a HAVING sum(n) <> 0 OR sum(b) <> 0 ORDER BY namespace, a
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes;
        RETURN NULL;
    END $$;

    CREATE TRIGGER a2e_entries_ai AFTER INSERT ON a2e_entries
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_insert();
    CREATE TRIGGER a2e_entries_ad AFTER DELETE ON a2e_entries
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_delete();
    CREATE TRIGGER a2e_entries_au AFTER UPDATE ON a2e_entries
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_update();

    -- Would growing usage u by g pass a quota q? Arrays are [namespace entries, agent
    -- entries, namespace bytes, agent bytes]; shrinking never passes one.
    CREATE FUNCTION a2e_over(u bigint[], g bigint[], q bigint[]) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        FOR i IN 1 .. 4 LOOP
            IF g[i] > 0 AND u[i] + g[i] > q[i] THEN RETURN true; END IF;
        END LOOP;
        RETURN false;
    END $$;

    -- The usage of a namespace and of one agent in it, in a2e_over's order.
    CREATE FUNCTION a2e_usage_of(p_namespace text, p_agent text) RETURNS bigint[]
    LANGUAGE sql STABLE AS $$
        SELECT ARRAY[coalesce(max(entries) FILTER (WHERE agent = ''), 0),
                     coalesce(max(entries) FILTER (WHERE agent = p_agent), 0),
                     coalesce(max(bytes) FILTER (WHERE agent = ''), 0),
                     coalesce(max(bytes) FILTER (WHERE agent = p_agent), 0)]::bigint[]
        FROM a2e_usage WHERE namespace = p_namespace AND agent IN ('', p_agent)
    $$;

    -- One store request: upsert entries i = 1..n of one (namespace, agent) in this
    -- transaction, with the semantics of host.store.sqlite.ops.put_entries. Returns one
    -- outcome per entry: NULL when stored, 'memory_full' when the write would pass a quota
    -- (p_quotas in a2e_over's order; expired rows of the namespace are collected once, first)
    -- and the entry is left as it was. An existing live key keeps created_at; an expired one
    -- is replaced by a new entry. p_tags[i] is a JSON array of distinct tags, p_lexemes[i]
    -- space-separated lexemes.
    CREATE FUNCTION a2e_put(
        p_namespace text, p_agent text, p_now double precision, p_quotas bigint[],
        p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
        p_source text[], p_score double precision[], p_ttl bigint[],
        p_created double precision[], p_updated double precision[], p_lexemes text[]
    ) RETURNS text[] LANGUAGE plpgsql AS $$
    DECLARE
        u bigint[];
        g bigint[];
        collected boolean := false;
        outcomes text[] := '{}';
        r record;
        live boolean;
        upd double precision;
        exp double precision;
        tag_list text[];
        size_i bigint;
    BEGIN
        PERFORM a2e_lock_namespace(p_namespace);
        u := a2e_usage_of(p_namespace, p_agent);
        FOR i IN 1 .. coalesce(array_length(p_key, 1), 0) LOOP
            upd := coalesce(p_updated[i], p_now);
            exp := CASE WHEN p_ttl[i] > 0 THEN upd + p_ttl[i] END;
            tag_list := ARRAY(SELECT jsonb_array_elements_text(p_tags[i]::jsonb));
            size_i := octet_length(p_content[i]);
            SELECT id, expires_at, agent, size, content, tags INTO r FROM a2e_entries
             WHERE namespace = p_namespace AND tier = p_tier[i] AND owner = p_owner[i]
               AND a2e_key_hash(key) = a2e_key_hash(p_key[i])
               AND key = p_key[i];
            live := FOUND;
            IF live AND r.expires_at IS NOT NULL AND r.expires_at <= p_now THEN
                DELETE FROM a2e_entries WHERE id = r.id;
                u[1] := u[1] - 1;
                u[3] := u[3] - r.size;
                IF r.agent = p_agent THEN
                    u[2] := u[2] - 1;
                    u[4] := u[4] - r.size;
                END IF;
                live := false;
            END IF;
            IF NOT live THEN
                g := ARRAY[1, 1, size_i, size_i];
            ELSIF r.agent = p_agent THEN  -- an update grows by the size change
                g := ARRAY[0, 0, size_i - r.size, size_i - r.size];
            ELSE  -- a new writer takes the whole entry
                g := ARRAY[0, 1, size_i - r.size, size_i];
            END IF;
            IF a2e_over(u, g, p_quotas) AND NOT collected THEN
                collected := true;
                DELETE FROM a2e_entries WHERE namespace = p_namespace
                   AND expires_at IS NOT NULL AND expires_at <= p_now;
                u := a2e_usage_of(p_namespace, p_agent);
            END IF;
            IF a2e_over(u, g, p_quotas) THEN
                outcomes := outcomes || 'memory_full'::text;
                CONTINUE;
            END IF;
            u := ARRAY[u[1] + g[1], u[2] + g[2], u[3] + g[3], u[4] + g[4]];
            IF NOT live THEN
                INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags,
                    source, score, ttl, created_at, updated_at, expires_at, size, lexemes)
                VALUES (p_namespace, p_tier[i], p_owner[i], p_key[i], p_agent, p_content[i],
                    tag_list, p_source[i], p_score[i], p_ttl[i], coalesce(p_created[i], upd),
                    upd, exp, size_i, array_to_tsvector(string_to_array(p_lexemes[i], ' ')));
            ELSE
                IF r.content <> p_content[i] OR r.tags <> tag_list THEN
                    DELETE FROM a2e_vectors WHERE entry_id = r.id;
                END IF;
                UPDATE a2e_entries SET agent = p_agent, content = p_content[i],
                    tags = tag_list, source = p_source[i], score = p_score[i], ttl = p_ttl[i],
                    updated_at = upd, expires_at = exp, size = size_i,
                    lexemes = array_to_tsvector(string_to_array(p_lexemes[i], ' '))
                 WHERE id = r.id;
            END IF;
            outcomes := outcomes || NULL::text;
        END LOOP;
        RETURN outcomes;
    END $$;
    """,
    # 2: many puts in one statement and one transaction (group commit, host.store.postgres.batch)
    r"""
    -- Puts j = 1..m, each of one (namespace, agent) at its own time, entries
    -- p_first[j] .. p_first[j] + p_count[j] - 1 of the flat entry arrays (a2e_put's). Returns
    -- the outcomes of every entry in order. A put that raises is rolled back alone and each of
    -- its outcomes is 'error: <message>'. The caller sorts the puts by namespace, so the
    -- namespace locks are always taken in the same order.
    CREATE FUNCTION a2e_put_batch(
        p_namespace text[], p_agent text[], p_first integer[], p_count integer[],
        p_now double precision[], p_quotas bigint[],
        p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
        p_source text[], p_score double precision[], p_ttl bigint[],
        p_created double precision[], p_updated double precision[], p_lexemes text[]
    ) RETURNS text[] LANGUAGE plpgsql AS $$
    DECLARE
        outcomes text[] := '{}';
        lo integer;
        hi integer;
    BEGIN
        FOR j IN 1 .. coalesce(array_length(p_namespace, 1), 0) LOOP
            lo := p_first[j];
            hi := p_first[j] + p_count[j] - 1;
            BEGIN
                outcomes := outcomes || a2e_put(p_namespace[j], p_agent[j], p_now[j], p_quotas,
                    p_tier[lo:hi], p_owner[lo:hi], p_key[lo:hi], p_content[lo:hi],
                    p_tags[lo:hi], p_source[lo:hi], p_score[lo:hi], p_ttl[lo:hi],
                    p_created[lo:hi], p_updated[lo:hi], p_lexemes[lo:hi]);
            EXCEPTION WHEN OTHERS THEN
                outcomes := outcomes || array_fill(('error: ' || SQLERRM)::text,
                                                   ARRAY[p_count[j]]);
            END;
        END LOOP;
        RETURN outcomes;
    END $$;
    """,
    # 3: term counts for BM25 (host.search keyword scores like SQLite FTS5's bm25)
    r"""
    -- Lexemes now carry one position per occurrence (1..tf, at most 256: PostgreSQL's limit),
    -- so tf is the length of a lexeme's positions; doc_len is the entry's token count plus one
    -- (the scope lexeme), as FTS5 counts the scope column's token; a2e_usage.tokens sums it
    -- (the namespace's row gives avgdl). Rows written before keep tf = 1 and doc_len = 0.
    ALTER TABLE a2e_entries ADD COLUMN doc_len integer NOT NULL DEFAULT 0;
    ALTER TABLE a2e_usage ADD COLUMN tokens bigint NOT NULL DEFAULT 0;

    CREATE FUNCTION a2e_doc_len(p_lexemes tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT 1 + coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest(p_lexemes)
    $$;

    CREATE OR REPLACE FUNCTION a2e_usage_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO a2e_usage AS u (namespace, agent, entries, bytes, tokens)
        SELECT namespace, a, sum(n), sum(b), sum(t) FROM (
            SELECT namespace, agent AS a, 1 AS n, size::bigint AS b, doc_len::bigint AS t
              FROM new_rows
            UNION ALL SELECT namespace, '', 1, size, doc_len FROM new_rows) d
        GROUP BY namespace, a ORDER BY namespace, a
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes,
            tokens = u.tokens + excluded.tokens;
        RETURN NULL;
    END $$;

    CREATE OR REPLACE FUNCTION a2e_usage_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE a2e_usage AS u
           SET entries = u.entries - d.n, bytes = u.bytes - d.b, tokens = u.tokens - d.t
        FROM (
            SELECT namespace, a, sum(n) AS n, sum(b) AS b, sum(t) AS t FROM (
                SELECT namespace, agent AS a, 1 AS n, size::bigint AS b, doc_len::bigint AS t
                  FROM old_rows
                UNION ALL SELECT namespace, '', 1, size, doc_len FROM old_rows) x
            GROUP BY namespace, a) d
        WHERE u.namespace = d.namespace AND u.agent = d.a;
        RETURN NULL;
    END $$;

    CREATE OR REPLACE FUNCTION a2e_usage_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO a2e_usage AS u (namespace, agent, entries, bytes, tokens)
        SELECT namespace, a, sum(n), sum(b), sum(t) FROM (
            SELECT namespace, agent AS a, 1 AS n, size::bigint AS b, doc_len::bigint AS t
              FROM new_rows
            UNION ALL SELECT namespace, '', 1, size, doc_len FROM new_rows
            UNION ALL SELECT namespace, agent, -1, -size, -doc_len FROM old_rows
            UNION ALL SELECT namespace, '', -1, -size, -doc_len FROM old_rows) d
        GROUP BY namespace, a HAVING sum(n) <> 0 OR sum(b) <> 0 OR sum(t) <> 0
        ORDER BY namespace, a
        ON CONFLICT (namespace, agent) DO UPDATE
        SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes,
            tokens = u.tokens + excluded.tokens;
        RETURN NULL;
    END $$;

    -- a2e_put as in migration 1, but p_lexemes[i] is a tsvector literal with positions
    CREATE OR REPLACE FUNCTION a2e_put(
        p_namespace text, p_agent text, p_now double precision, p_quotas bigint[],
        p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
        p_source text[], p_score double precision[], p_ttl bigint[],
        p_created double precision[], p_updated double precision[], p_lexemes text[]
    ) RETURNS text[] LANGUAGE plpgsql AS $$
    DECLARE
        u bigint[];
        g bigint[];
        collected boolean := false;
        outcomes text[] := '{}';
        r record;
        live boolean;
        upd double precision;
        exp double precision;
        tag_list text[];
        size_i bigint;
        lex tsvector;
        len_i integer;
    BEGIN
        PERFORM a2e_lock_namespace(p_namespace);
        u := a2e_usage_of(p_namespace, p_agent);
        FOR i IN 1 .. coalesce(array_length(p_key, 1), 0) LOOP
            upd := coalesce(p_updated[i], p_now);
            exp := CASE WHEN p_ttl[i] > 0 THEN upd + p_ttl[i] END;
            tag_list := ARRAY(SELECT jsonb_array_elements_text(p_tags[i]::jsonb));
            size_i := octet_length(p_content[i]);
            lex := p_lexemes[i]::tsvector;
            len_i := a2e_doc_len(lex);
            SELECT id, expires_at, agent, size, content, tags INTO r FROM a2e_entries
             WHERE namespace = p_namespace AND tier = p_tier[i] AND owner = p_owner[i]
               AND a2e_key_hash(key) = a2e_key_hash(p_key[i])
               AND key = p_key[i];
            live := FOUND;
            IF live AND r.expires_at IS NOT NULL AND r.expires_at <= p_now THEN
                DELETE FROM a2e_entries WHERE id = r.id;
                u[1] := u[1] - 1;
                u[3] := u[3] - r.size;
                IF r.agent = p_agent THEN
                    u[2] := u[2] - 1;
                    u[4] := u[4] - r.size;
                END IF;
                live := false;
            END IF;
            IF NOT live THEN
                g := ARRAY[1, 1, size_i, size_i];
            ELSIF r.agent = p_agent THEN  -- an update grows by the size change
                g := ARRAY[0, 0, size_i - r.size, size_i - r.size];
            ELSE  -- a new writer takes the whole entry
                g := ARRAY[0, 1, size_i - r.size, size_i];
            END IF;
            IF a2e_over(u, g, p_quotas) AND NOT collected THEN
                collected := true;
                DELETE FROM a2e_entries WHERE namespace = p_namespace
                   AND expires_at IS NOT NULL AND expires_at <= p_now;
                u := a2e_usage_of(p_namespace, p_agent);
            END IF;
            IF a2e_over(u, g, p_quotas) THEN
                outcomes := outcomes || 'memory_full'::text;
                CONTINUE;
            END IF;
            u := ARRAY[u[1] + g[1], u[2] + g[2], u[3] + g[3], u[4] + g[4]];
            IF NOT live THEN
                INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags,
                    source, score, ttl, created_at, updated_at, expires_at, size, lexemes,
                    doc_len)
                VALUES (p_namespace, p_tier[i], p_owner[i], p_key[i], p_agent, p_content[i],
                    tag_list, p_source[i], p_score[i], p_ttl[i], coalesce(p_created[i], upd),
                    upd, exp, size_i, lex, len_i);
            ELSE
                IF r.content <> p_content[i] OR r.tags <> tag_list THEN
                    DELETE FROM a2e_vectors WHERE entry_id = r.id;
                END IF;
                UPDATE a2e_entries SET agent = p_agent, content = p_content[i],
                    tags = tag_list, source = p_source[i], score = p_score[i], ttl = p_ttl[i],
                    updated_at = upd, expires_at = exp, size = size_i, lexemes = lex,
                    doc_len = len_i
                 WHERE id = r.id;
            END IF;
            outcomes := outcomes || NULL::text;
        END LOOP;
        RETURN outcomes;
    END $$;
    """,
    # 4: forgets in one statement and one transaction (group commit, host.store.postgres.batch)
    r"""
    -- Delete the live entries of (namespace, tier/owner pairs) matching keys AND tags (an empty
    -- array: no filter); the number deleted. Takes the namespace's lock, as every write does.
    CREATE FUNCTION a2e_forget(
        p_namespace text, p_tiers text[], p_owners text[], p_keys text[], p_tags text[],
        p_now double precision
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE
        n bigint;
    BEGIN
        PERFORM a2e_lock_namespace(p_namespace);
        IF cardinality(p_keys) > 0 THEN
            DELETE FROM a2e_entries e
             WHERE e.namespace = p_namespace
               AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
               AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k) FROM unnest(p_keys) k))
               AND e.key = ANY(p_keys)
               AND (e.expires_at IS NULL OR e.expires_at > p_now)
               AND e.tags @> p_tags;
        ELSE
            DELETE FROM a2e_entries e
             WHERE e.namespace = p_namespace
               AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
               AND (e.expires_at IS NULL OR e.expires_at > p_now)
               AND e.tags @> p_tags;
        END IF;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END $$;

    -- Forgets j = 1..m (a JSON array of {namespace, tiers, owners, keys, tags, now}); one
    -- result each: the number deleted as text, or 'error: <message>' for a forget that raised
    -- (rolled back alone). The caller sorts them by namespace.
    CREATE FUNCTION a2e_forget_batch(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
    DECLARE
        results text[] := '{}';
        f jsonb;
    BEGIN
        FOR f IN SELECT value FROM jsonb_array_elements(p_forgets) LOOP
            BEGIN
                results := results || a2e_forget(
                    f->>'namespace',
                    ARRAY(SELECT jsonb_array_elements_text(f->'tiers')),
                    ARRAY(SELECT jsonb_array_elements_text(f->'owners')),
                    ARRAY(SELECT jsonb_array_elements_text(f->'keys')),
                    ARRAY(SELECT jsonb_array_elements_text(f->'tags')),
                    (f->>'now')::double precision)::text;
            EXCEPTION WHEN OTHERS THEN
                results := results || ('error: ' || SQLERRM);
            END;
        END LOOP;
        RETURN results;
    END $$;
    """,
    # 5: the embedding queue and the model's identity (hybrid search shared by every host)
    r"""
    -- Entries whose vector is missing or stale, as SQLite's embed_queue: a row is added (or its
    -- seq bumped and its claim released) when an entry is inserted or its content or tags
    -- change. A host's embedding worker claims rows (claimed_until, FOR UPDATE SKIP LOCKED,
    -- so two hosts never claim the same row and a crashed host's claims lapse), embeds them
    -- outside any transaction and writes the vector only if seq did not move meanwhile.
    CREATE TABLE a2e_embed_queue (
        entry_id bigint PRIMARY KEY REFERENCES a2e_entries (id) ON DELETE CASCADE,
        seq bigint NOT NULL DEFAULT 1,
        claimed_until double precision NOT NULL DEFAULT 0
    );
    CREATE INDEX a2e_embed_queue_claim ON a2e_embed_queue (claimed_until, entry_id);
    INSERT INTO a2e_embed_queue (entry_id)
        SELECT id FROM a2e_entries e
         WHERE NOT EXISTS (SELECT 1 FROM a2e_vectors v WHERE v.entry_id = e.id);

    CREATE FUNCTION a2e_embed_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO a2e_embed_queue AS q (entry_id) VALUES (new.id)
        ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
        RETURN NULL;
    END $$;
    CREATE TRIGGER a2e_entries_embed_ai AFTER INSERT ON a2e_entries
        FOR EACH ROW EXECUTE FUNCTION a2e_embed_enqueue();
    CREATE TRIGGER a2e_entries_embed_au AFTER UPDATE OF content, tags ON a2e_entries
        FOR EACH ROW WHEN (old.content IS DISTINCT FROM new.content
                           OR old.tags IS DISTINCT FROM new.tags)
        EXECUTE FUNCTION a2e_embed_enqueue();

    -- name -> value: 'model' and 'dim' of the embedder the stored vectors belong to
    CREATE TABLE a2e_search_meta (name text PRIMARY KEY, value text NOT NULL);
    """,
    # 6: touches (recorded reads) in one statement and one transaction, as forgets
    r"""
    -- Record a read of the live entries of (namespace, tier/owner pairs) under p_keys: move
    -- updated_at forward to p_when where it is earlier; the number moved. Nothing else changes
    -- (not expires_at: a touch never extends a TTL, and an entry expired at p_when is not
    -- matched), as host.store.sqlite.ops.touch_entries. Takes the namespace's lock first, as
    -- every write of a namespace's rows does, so it never deadlocks with a put, forget or GC.
    CREATE FUNCTION a2e_touch(
        p_namespace text, p_tiers text[], p_owners text[], p_keys text[],
        p_when double precision
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE
        n bigint;
    BEGIN
        PERFORM a2e_lock_namespace(p_namespace);
        UPDATE a2e_entries e SET updated_at = p_when
         WHERE e.namespace = p_namespace
           AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
           AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k) FROM unnest(p_keys) k))
           AND e.key = ANY(p_keys)
           AND (e.expires_at IS NULL OR e.expires_at > p_when)
           AND e.updated_at < p_when;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END $$;

    -- Touches j = 1..m (a JSON array of {namespace, tiers, owners, keys, when}), in order, in
    -- this transaction; the number each moved. The caller sorts them by namespace (lock order).
    CREATE FUNCTION a2e_touch_batch(p_touches jsonb) RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        results bigint[] := '{}';
        t jsonb;
    BEGIN
        FOR t IN SELECT value FROM jsonb_array_elements(p_touches) LOOP
            results := results || a2e_touch(
                t->>'namespace',
                ARRAY(SELECT jsonb_array_elements_text(t->'tiers')),
                ARRAY(SELECT jsonb_array_elements_text(t->'owners')),
                ARRAY(SELECT jsonb_array_elements_text(t->'keys')),
                (t->>'when')::double precision);
        END LOOP;
        RETURN results;
    END $$;
    """,
)


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
    """Apply the migrations not yet applied (each in its own transaction) under a session
    advisory lock; the version reached. `conn` is an asyncpg connection outside a transaction.
    """
    async with advisory_lock(conn, LOCK_MIGRATE):
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS a2e_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = await conn.fetchval("SELECT coalesce(max(version), 0) FROM a2e_migrations")
        for number, script in enumerate(MIGRATIONS, start=1):
            if number <= version:
                continue
            async with conn.transaction():
                await conn.execute(script)
                await conn.execute("INSERT INTO a2e_migrations (version) VALUES ($1)", number)
            log.info("postgres schema migrated to version %d", number)
            version = number
        return int(version)


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


async def ensure_vector_index(conn: Any, dim: int) -> None:
    """Create the HNSW (cosine) index for vectors of `dim` dimensions if it is missing.

    One partial expression index per dimension in use (`embedding::vector(dim)` where
    `dim = dim`); `PostgresEntryStore.vector_search` queries with the same expression.
    """
    if not 0 < dim <= 2000:  # pgvector's HNSW limit for `vector`
        raise ValueError(f"vector dimension {dim} out of range")
    async with advisory_lock(conn, LOCK_MIGRATE):
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS a2e_vectors_hnsw_{dim} ON a2e_vectors USING hnsw"
            f" ((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
        )
