-- 1: entries, usage counters and their triggers, vectors, the put function
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
