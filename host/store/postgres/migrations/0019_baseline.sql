-- 19: the baseline. The schema as the development versions' migrations 1-19 left it, in one
-- file: numbered 19, so a database those versions brought to 19 is at the baseline already (the
-- functions of `functions/` replace its own at the next start); one they left below 19 is
-- refused (host/store/postgres/schema.py, docs/postgres.md "The schema"). Append-only from
-- here: a change to the tables, indexes or triggers is a new file, 0020 and on; a function's
-- body lives in `functions/` only.
--
-- A trigger's function is declared here without a body (a stub), as the trigger needs it to
-- exist; `functions/`, applied in the same transaction, gives it its body.

-- One row an entry. `owner` is the agent for episodic rows, '' for semantic ones; `agent` the
-- last writer (quotas); `lexemes` the keyword index (host.text.keyword's tokens, one position
-- an occurrence, 1..256, plus the scope lexeme `_n<hash>`); `doc_len` the entry's token count
-- plus one (the scope lexeme, as FTS5 counts its scope column), for BM25.
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
    lexemes tsvector NOT NULL,
    doc_len integer NOT NULL DEFAULT 0
);

-- The address of an entry: the key by its hash, as a btree row must stay under ~2.7 kB. It is
-- part of the address index, so its result never changes: defined here, not in `functions/`
-- (immutable: a database's encoding never changes).
CREATE FUNCTION a2e_key_hash(p_key text) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT sha256(convert_to(p_key, 'UTF8')) $$;

CREATE UNIQUE INDEX a2e_entries_address ON a2e_entries
    (namespace, tier, owner, a2e_key_hash(key));
CREATE INDEX a2e_entries_rank ON a2e_entries
    (namespace, tier, owner, score DESC, updated_at DESC);
CREATE INDEX a2e_entries_expiry ON a2e_entries (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX a2e_entries_ns_expiry ON a2e_entries (namespace, expires_at)
    WHERE expires_at IS NOT NULL;
-- Every GIN scan reads the index's whole pending list: keep it short (4 MB by default), so a
-- query's candidates cost what their postings cost.
CREATE INDEX a2e_entries_lexemes ON a2e_entries USING gin (lexemes)
    WITH (gin_pending_list_limit = 512);
CREATE INDEX a2e_entries_tags ON a2e_entries USING gin (tags);
-- The newest entries of one (namespace, tier, owner) first: a query of common words walks it
-- and stops at the pool's size instead of reading every match. On -id, not id: the primary key
-- offers the order of id too, and the planner would walk it through every namespace's rows.
CREATE INDEX a2e_entries_newest ON a2e_entries (namespace, tier, owner, (-id));
-- The JSON text of each key's `ns` member (the LangGraph adapter's namespace) beside the
-- visibility range, in code-point order: a key prefix on `ns` of plain elements reads a range
-- of it (host/store/postgres/scan_index.py), not every row of the namespace. The expression is
-- the one the reads write (postgres/filters.py `KEY`: a key holding U+0000 has no fields).
-- Partial: only a read that says the member is an array (a prefix on it) may use it.
CREATE INDEX a2e_entries_key_ns ON a2e_entries (namespace, tier, owner,
    (((CASE WHEN strpos(key, '\u0000') = 0 THEN key::jsonb END) -> 'ns')::text COLLATE "C"))
    WHERE jsonb_typeof((CASE WHEN strpos(key, '\u0000') = 0 THEN key::jsonb END) -> 'ns')
        = 'array';

-- Entries, bytes and tokens per (namespace, agent), agent '' holding the namespace's totals
-- (its tokens give BM25's average length); kept by the triggers below (functions/usage.sql).
CREATE TABLE a2e_usage (
    namespace text NOT NULL,
    agent text NOT NULL,
    entries bigint NOT NULL,
    bytes bigint NOT NULL,
    tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, agent)
);

-- How many entries of each namespace hold each lexeme (expired ones included until collected,
-- as SQLite's FTS index counts them): BM25's document frequencies read from an index instead of
-- counted through the GIN index. Kept by statement-level triggers (functions/keyword.sql), so a
-- group of writes updates each (namespace, term) once; every writer of a namespace's rows holds
-- its lock, so these rows are never raced.
CREATE TABLE a2e_terms (
    namespace text NOT NULL,
    term text NOT NULL,
    docs bigint NOT NULL,
    PRIMARY KEY (namespace, term)
);

-- One host embedding an entry (`real[]`, any dimension); deleted with its entry and when the
-- entry's content or tags change. The HNSW indexes on it are the host's (schema.py
-- `ensure_vector_index`), one a dimension in use, when pgvector is present.
CREATE TABLE a2e_vectors (
    entry_id bigint PRIMARY KEY REFERENCES a2e_entries (id) ON DELETE CASCADE,
    model text NOT NULL,
    dim integer NOT NULL,
    embedding real[] NOT NULL
);

-- Entries whose vector is missing or stale, as SQLite's embed_queue: a row is added (or its
-- seq bumped and its claim released) when an entry is inserted or its content or tags change.
-- A host's embedding worker claims rows (claimed_until, FOR UPDATE SKIP LOCKED, so two hosts
-- never claim the same row and a crashed host's claims lapse), embeds them outside any
-- transaction and writes the vector only if seq did not move meanwhile.
CREATE TABLE a2e_embed_queue (
    entry_id bigint PRIMARY KEY REFERENCES a2e_entries (id) ON DELETE CASCADE,
    seq bigint NOT NULL DEFAULT 1,
    claimed_until double precision NOT NULL DEFAULT 0
);
CREATE INDEX a2e_embed_queue_claim ON a2e_embed_queue (claimed_until, entry_id);

-- name -> value: 'model' and 'dim' of the embedder the stored vectors belong to
CREATE TABLE a2e_search_meta (name text PRIMARY KEY, value text NOT NULL);

-- Client-supplied vectors (the store extension, docs/protocol.md "Store extensions").
-- `a2e_client_spaces`: the dimension of each (namespace, space), fixed by its first vectors.
-- `a2e_client_vectors`: one row an entry address (namespace, tier, owner, key hash): its
-- space, its unit float32 rows (little-endian, as SQLite keeps them) and the digest of the
-- content they were sent with. They are written by the host right after the entry's put, in a
-- statement of their own; a read joins them only while the entry's content still has that
-- digest, so vectors of an older content are never used, and deleting an entry deletes them.
CREATE TABLE a2e_client_spaces (
    namespace text NOT NULL,
    space text NOT NULL,
    dims integer NOT NULL,
    PRIMARY KEY (namespace, space)
);
CREATE TABLE a2e_client_vectors (
    namespace text NOT NULL,
    tier text NOT NULL,
    owner text NOT NULL,
    key_hash bytea NOT NULL,
    digest bytea NOT NULL,
    space text NOT NULL,
    vecs bytea NOT NULL,
    PRIMARY KEY (namespace, tier, owner, key_hash)
);

-- The change log of `memory/watch` (host/store/changes.py), written in the transaction of the
-- write it records. `a2e_changes` holds one row a committed request (a store, a forget) or
-- collection of expired entries, a namespace's rows numbered 1, 2, 3, ... by
-- `a2e_change_heads.seq`, bumped under that row's lock: two transactions of one namespace never
-- hold the same head at once, so numbers follow commit order and a reader that has seen n has
-- seen every change before it. `floor` is the highest number pruned (watch.retention). Each
-- change notifies the channel `a2e_changes` with its namespace (the hosts LISTEN on it).
-- `a2e_change_keys` ties each entry row to the 'stored' changes that carry its content; when
-- rows are deleted the delete trigger takes their records out of those changes in the same
-- statement, so a replay never shows the content of what was forgotten or expired.
CREATE TABLE a2e_change_heads (
    namespace text PRIMARY KEY,
    seq bigint NOT NULL DEFAULT 0,
    floor bigint NOT NULL DEFAULT 0
);
CREATE TABLE a2e_changes (
    namespace text NOT NULL,
    seq bigint NOT NULL,
    at double precision NOT NULL,
    op text NOT NULL,
    entries text NOT NULL,
    PRIMARY KEY (namespace, seq)
);
CREATE INDEX a2e_changes_at ON a2e_changes (at);
CREATE TABLE a2e_change_keys (
    entry_id bigint NOT NULL,
    namespace text NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (entry_id, namespace, seq)
);
CREATE INDEX a2e_change_keys_change ON a2e_change_keys (namespace, seq);

-- The version of `functions/` the database holds (schema.py `apply_functions`): a host applies
-- its functions only when its version is not below this one. One row.
CREATE TABLE a2e_functions (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    version integer NOT NULL,
    digest text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The triggers of a2e_entries, statement-level (once a write group), fired in name order.
-- Their functions' bodies: functions/usage.sql, vectors.sql, keyword.sql, changes.sql.
CREATE FUNCTION a2e_usage_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_usage_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_usage_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_entries_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_client_vectors_gone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_terms_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_entries_deleted_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

-- usage counters
CREATE TRIGGER a2e_entries_ai AFTER INSERT ON a2e_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_insert();
CREATE TRIGGER a2e_entries_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_delete();
CREATE TRIGGER a2e_entries_au AFTER UPDATE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION a2e_usage_update();
-- the embedding queue, and client vectors leaving with their entry
CREATE TRIGGER a2e_entries_embed_ai AFTER INSERT ON a2e_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_added();
CREATE TRIGGER a2e_entries_embed_au AFTER UPDATE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_changed();
CREATE TRIGGER a2e_entries_client_vectors_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION a2e_client_vectors_gone();
-- the term counts
CREATE TRIGGER a2e_entries_terms_ai AFTER INSERT ON a2e_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_added();
CREATE TRIGGER a2e_entries_terms_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_removed();
CREATE TRIGGER a2e_entries_terms_au AFTER UPDATE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_changed();
-- the change log
CREATE TRIGGER a2e_entries_log_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_deleted_log();
