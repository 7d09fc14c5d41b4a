-- 3: term counts for BM25 (host.search keyword scores like SQLite FTS5's bm25)
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
