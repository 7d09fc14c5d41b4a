-- a2e functions version: 6
--
-- Every function and trigger function of the PostgreSQL schema, as it stands (package data
-- beside schema.py). `host.store.postgres.schema.migrate` applies this file at every start,
-- after the numbered migrations, under the migration advisory lock, in one transaction; every
-- statement is CREATE OR REPLACE, so applying it again changes nothing.
--
-- Rules (docs/postgres.md, "The schema"):
-- - A change to a function is an edit here, with the version above raised by one. The
--   migrations keep tables, indexes, triggers and data; the old ones that define functions
--   are history and stay as they are.
-- - A host applies this file only when its version is not below the one the database
--   records (`a2e_functions`): a host of an older version, started beside newer ones during a
--   rolling upgrade, keeps the newer functions. So a function that older hosts call keeps
--   its arguments and results (CREATE OR REPLACE cannot change them anyway); a new signature
--   is a new function, and the old one stays here while a supported older host may call it.
-- - A new trigger's function is created here; the migration that creates the trigger
--   declares the function first (a stub body), and this file, applied in the same start,
--   gives it its body.
-- - Bodies are not checked at creation (check_function_bodies off, as pg_dump does), so the
--   order below is by concern, not by dependency.
-- - a2e_key_hash is in the address index: its result must never change.

-- ================================================================================================
-- Addresses, locks, quotas, term counts
-- ================================================================================================

-- the address of an entry; the key by its hash, as a btree row must stay under ~2.7 kB
-- (immutable: a database's encoding never changes)
CREATE OR REPLACE FUNCTION a2e_key_hash(p_key text) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT sha256(convert_to(p_key, 'UTF8')) $$;

CREATE OR REPLACE FUNCTION a2e_lock_namespace(p_namespace text) RETURNS void
LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(hashtextextended(p_namespace, 0)) $$;

-- Would growing usage u by g pass a quota q? Arrays are [namespace entries, agent
-- entries, namespace bytes, agent bytes]; shrinking never passes one.
CREATE OR REPLACE FUNCTION a2e_over(u bigint[], g bigint[], q bigint[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    FOR i IN 1 .. 4 LOOP
        IF g[i] > 0 AND u[i] + g[i] > q[i] THEN RETURN true; END IF;
    END LOOP;
    RETURN false;
END $$;

-- The usage of a namespace and of one agent in it, in a2e_over's order.
CREATE OR REPLACE FUNCTION a2e_usage_of(p_namespace text, p_agent text) RETURNS bigint[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY[coalesce(max(entries) FILTER (WHERE agent = ''), 0),
                 coalesce(max(entries) FILTER (WHERE agent = p_agent), 0),
                 coalesce(max(bytes) FILTER (WHERE agent = ''), 0),
                 coalesce(max(bytes) FILTER (WHERE agent = p_agent), 0)]::bigint[]
    FROM a2e_usage WHERE namespace = p_namespace AND agent IN ('', p_agent)
$$;

CREATE OR REPLACE FUNCTION a2e_doc_len(p_lexemes tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 1 + coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest(p_lexemes)
$$;

-- The occurrences of a term in an entry, from ts_rank(lexemes, term, 0) (C, no row set to
-- build): an entry's lexemes hold one position a occurrence (1..tf, weight D = 0.1), for which
-- ts_rank is 0.1 * (1 + 1/4 + ... + 1/tf^2) / zeta(2); the tail zeta(2) - (1 + ... + 1/tf^2)
-- is 1 / (tf + 1/2) within 1 / (12 tf^3), so rounding gives tf exactly (0 when the term is
-- absent; tf <= 256, PostgreSQL's limit of positions, well within real's precision).
CREATE OR REPLACE FUNCTION a2e_tf(p_rank real) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT round(1.0 / (1.64493406685 * (1.0 - 10.0 * p_rank::float8)) - 0.5) $$;

-- ================================================================================================
-- The triggers of a2e_entries (statement-level: once a write group)
-- ================================================================================================

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

-- New entries are queued for a vector, once an INSERT statement.
CREATE OR REPLACE FUNCTION a2e_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_embed_queue AS q (entry_id) SELECT id FROM new_rows ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

-- A changed entry (content or tags) loses its vector and is queued for a new one, for every
-- UPDATE statement at once (was: a row trigger an entry).
CREATE OR REPLACE FUNCTION a2e_entries_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH c AS MATERIALIZED (
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.content IS DISTINCT FROM n.content OR o.tags IS DISTINCT FROM n.tags),
    d AS (DELETE FROM a2e_vectors v USING c WHERE v.entry_id = c.id)
    INSERT INTO a2e_embed_queue AS q (entry_id) SELECT id FROM c ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION a2e_terms_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_terms AS t (namespace, term, docs)
    SELECT n.namespace, u.term, count(*) FROM new_rows n,
           unnest(tsvector_to_array(n.lexemes)) AS u(term)
     GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET docs = t.docs + excluded.docs;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION a2e_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE a2e_terms t SET docs = t.docs - d.n
      FROM (SELECT o.namespace, u.term, count(*) AS n FROM old_rows o,
                   unnest(tsvector_to_array(o.lexemes)) AS u(term) GROUP BY 1, 2) d
     WHERE t.namespace = d.namespace AND t.term = d.term;
    DELETE FROM a2e_terms t
     USING (SELECT DISTINCT o.namespace, u.term FROM old_rows o,
                   unnest(tsvector_to_array(o.lexemes)) AS u(term)) d
     WHERE t.namespace = d.namespace AND t.term = d.term AND t.docs <= 0;
    RETURN NULL;
END $$;

-- an update changes the counts only where it changed the lexemes (not a touch)
CREATE OR REPLACE FUNCTION a2e_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_terms AS t (namespace, term, docs)
    SELECT x.namespace, x.term, sum(x.d) FROM (
        SELECT n.namespace, u.term, 1 AS d FROM new_rows n JOIN old_rows o ON o.id = n.id,
               unnest(tsvector_to_array(n.lexemes)) AS u(term) WHERE n.lexemes <> o.lexemes
        UNION ALL
        SELECT o.namespace, u.term, -1 FROM new_rows n JOIN old_rows o ON o.id = n.id,
               unnest(tsvector_to_array(o.lexemes)) AS u(term) WHERE n.lexemes <> o.lexemes) x
     GROUP BY 1, 2 HAVING sum(x.d) <> 0 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET docs = t.docs + excluded.docs;
    IF FOUND THEN  -- a term no entry holds any more goes
        DELETE FROM a2e_terms t
         USING (SELECT DISTINCT o.namespace, u.term FROM new_rows n JOIN old_rows o ON o.id = n.id,
                       unnest(tsvector_to_array(o.lexemes)) AS u(term)
                 WHERE n.lexemes <> o.lexemes) d
         WHERE t.namespace = d.namespace AND t.term = d.term AND t.docs <= 0;
    END IF;
    RETURN NULL;
END $$;

-- Deleted rows: first their content leaves the changes that carry it (every delete: a forget,
-- a TTL collection, an expired entry a put replaces), through `a2e_change_keys`, so a replay
-- never shows the content of what was forgotten or expired; a change that loses every link is
-- written '[]' without being read (its number stays). Then, under a named `a2e.change_op`
-- ('forgotten' by a forget, 'expired' by a collection), they are logged as that op.
CREATE OR REPLACE FUNCTION a2e_entries_deleted_log() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_op text := current_setting('a2e.change_op', true);
    r record;
BEGIN
    WITH k AS (
        DELETE FROM a2e_change_keys k USING old_rows o WHERE k.entry_id = o.id
        RETURNING k.namespace, k.seq),
    d AS (SELECT namespace, seq, count(*) AS n FROM k GROUP BY namespace, seq)
    UPDATE a2e_changes c SET entries = CASE
        WHEN (SELECT count(*) FROM a2e_change_keys k2 WHERE k2.namespace = c.namespace
               AND k2.seq = c.seq) = d.n THEN '[]'
        ELSE coalesce((
            SELECT json_agg(x.r ORDER BY x.i)
              FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
             WHERE (c.namespace, x.r ->> 0, x.r ->> 1, (x.r -> 2)::text) NOT IN (
                   SELECT o.namespace, o.tier, o.owner, o.key FROM old_rows o)
            ), '[]')::text END
      FROM d
     WHERE c.namespace = d.namespace AND c.seq = d.seq;
    IF v_op IS NULL OR v_op = '' THEN
        RETURN NULL;
    END IF;
    FOR r IN SELECT o.namespace, json_agg(json_build_array(o.tier, o.owner, o.key::json,
                 to_json(o.tags), json_build_object('key', o.key::json, 'tier', o.tier,
                 'tags', to_json(o.tags))) ORDER BY o.id) AS entries
               FROM old_rows o GROUP BY o.namespace ORDER BY o.namespace LOOP
        PERFORM a2e_log_change(r.namespace, v_op, extract(epoch FROM clock_timestamp()),
                               r.entries::text);
    END LOOP;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION a2e_client_vectors_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM a2e_client_vectors v USING old_rows o
     WHERE v.namespace = o.namespace AND v.tier = o.tier AND v.owner = o.owner
       AND v.key_hash = a2e_key_hash(o.key);
    RETURN NULL;
END $$;

-- The sequence number of a queue row written again after its row was deleted while an
-- embedding worker may hold a claim on it (an entry stored with client vectors leaves the queue,
-- host.store.postgres.extensions.write_vectors): the database clock in microseconds, past any
-- number of the row before (those count changes from 1), so that worker's vector, of an older
-- text, is not written.
CREATE OR REPLACE FUNCTION a2e_queue_seq() RETURNS bigint LANGUAGE sql VOLATILE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;

CREATE OR REPLACE FUNCTION a2e_embed_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_embed_queue AS q (entry_id) VALUES (new.id)
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

-- ================================================================================================
-- Writes: a host's group of puts, forgets, touches (host.store.postgres.batch)
-- ================================================================================================

-- The entries of one store request, one by one, with the semantics of
-- host.store.sqlite_ops.put_entries (a2e_put's, with the size and token count of
-- each entry given, tags as array literals). For a namespace near a quota: every entry is
-- checked against the usage left by the ones before it; one over quota is 'memory_full' and
-- left as it was (expired rows of the namespace collected once first), the others are stored.
CREATE OR REPLACE FUNCTION a2e_put_entries(
    p_namespace text, p_agent text, p_now double precision, p_quotas bigint[],
    p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
    p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[],
    p_size bigint[], p_doc_len integer[]
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
    size_i bigint;
    gone integer;  -- entries evicted for entry i (limits.on_full "evict": p_quotas[5] = 1)
    mine bigint[] := '{}';  -- the rows this request stored: never evicted for it
    v_id bigint;
BEGIN
    PERFORM a2e_lock_namespace(p_namespace);
    u := a2e_usage_of(p_namespace, p_agent);
    FOR i IN 1 .. coalesce(array_length(p_key, 1), 0) LOOP
        upd := coalesce(p_updated[i], p_now);
        exp := CASE WHEN p_ttl[i] > 0 THEN upd + p_ttl[i] END;
        size_i := p_size[i];
        SELECT id, expires_at, agent, size INTO r FROM a2e_entries
         WHERE namespace = p_namespace AND tier = p_tier[i] AND owner = p_owner[i]
           AND a2e_key_hash(key) = a2e_key_hash(p_key[i]) AND key = p_key[i];
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
        gone := 0;
        IF a2e_over(u, g, p_quotas) AND p_quotas[5] = 1 THEN
            gone := a2e_evict(p_namespace, p_agent, u, g, p_quotas,
                CASE WHEN live THEN mine || r.id ELSE mine END,
                CASE WHEN live AND r.agent = p_agent THEN ARRAY[1, r.size]
                     ELSE ARRAY[0, 0] END::bigint[]);
            IF gone > 0 THEN
                u := a2e_usage_of(p_namespace, p_agent);
            END IF;
        END IF;
        IF a2e_over(u, g, p_quotas) THEN
            outcomes := outcomes || 'memory_full'::text;
            CONTINUE;
        END IF;
        u := ARRAY[u[1] + g[1], u[2] + g[2], u[3] + g[3], u[4] + g[4]];
        IF NOT live THEN
            INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags,
                source, score, ttl, created_at, updated_at, expires_at, size, lexemes, doc_len)
            VALUES (p_namespace, p_tier[i], p_owner[i], p_key[i], p_agent, p_content[i],
                p_tags[i]::text[], p_source[i], p_score[i], p_ttl[i],
                coalesce(p_created[i], upd), upd, exp, size_i, p_lexemes[i]::tsvector,
                p_doc_len[i])
            RETURNING id INTO v_id;
            mine := mine || v_id;
        ELSE
            mine := mine || r.id;
            UPDATE a2e_entries SET agent = p_agent, content = p_content[i],
                tags = p_tags[i]::text[], source = p_source[i], score = p_score[i],
                ttl = p_ttl[i], updated_at = upd, expires_at = exp, size = size_i,
                lexemes = p_lexemes[i]::tsvector, doc_len = p_doc_len[i]
             WHERE id = r.id;
            -- its client vectors go (as in a2e_put_group)
            WITH d AS (
                DELETE FROM a2e_client_vectors v
                 WHERE v.namespace = p_namespace AND v.tier = p_tier[i]
                   AND v.owner = p_owner[i] AND v.key_hash = a2e_key_hash(p_key[i])
                RETURNING 1)
            INSERT INTO a2e_embed_queue AS q (entry_id, seq)
            SELECT r.id, a2e_queue_seq() WHERE EXISTS (SELECT 1 FROM d)
            ON CONFLICT (entry_id) DO UPDATE
            SET seq = greatest(q.seq + 1, excluded.seq), claimed_until = 0;
        END IF;
        outcomes := outcomes || CASE WHEN gone > 0 THEN 'evicted:' || gone END;
    END LOOP;
    RETURN outcomes;
END $$;

-- Eviction (limits.on_full "evict", docs/growth.md), under the namespace's lock a put holds:
-- make room for growth g of usage u (a2e_over's arrays) by deleting the fewest of p_agent's
-- own live entries in the namespace (it wrote them last: its episodic ones and the semantic
-- ones it wrote), worth least first (lowest score, then the longest since written or read,
-- then the oldest row); never one of p_keep (the entry the put replaces, those the request
-- stored before). p_own is [entries, bytes] of p_agent's usage that cannot go (the entry the
-- put replaces, when the agent's). The namespace's expired entries are collected before (the
-- first step); superseded and duplicated entries will go second, before the rest, when the
-- judgement work marks them. Nothing is deleted when even all the candidates would not make
-- room. The rows go in one DELETE, logged by the delete trigger as one 'evicted' change.
-- The number deleted.
CREATE OR REPLACE FUNCTION a2e_evict(
    p_namespace text, p_agent text, u bigint[], g bigint[], p_quotas bigint[],
    p_keep bigint[], p_own bigint[]
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    n bigint := u[2] - p_own[1];
    b bigint := u[4] - p_own[2];
    got integer;
    v_limit integer := 16;
    c record;
    v_op text := current_setting('a2e.change_op', true);
BEGIN
    IF a2e_over(ARRAY[u[1] - n, u[2] - n, u[3] - b, u[4] - b], g, p_quotas) THEN
        RETURN 0;
    END IF;
    -- the first v_limit candidates (each arm: its rank index read backwards, LIMIT so the
    -- planner takes the index rather than sort every entry of the agent), more if they do not
    -- make room
    LOOP
        ids := '{}';
        n := 0;
        b := 0;
        got := 0;
        FOR c IN
            SELECT s.id, s.size FROM (
                (SELECT e.id, e.size, e.score, e.updated_at FROM a2e_entries e
                  WHERE e.namespace = p_namespace AND e.tier = 'episodic' AND e.owner = p_agent
                    AND e.agent = p_agent AND e.id <> ALL(p_keep)
                  ORDER BY e.score, e.updated_at LIMIT v_limit)
                UNION ALL
                (SELECT e.id, e.size, e.score, e.updated_at FROM a2e_entries e
                  WHERE e.namespace = p_namespace AND e.tier = 'semantic' AND e.owner = ''
                    AND e.agent = p_agent AND e.id <> ALL(p_keep)
                  ORDER BY e.score, e.updated_at LIMIT v_limit)) s
            ORDER BY s.score, s.updated_at, s.id LIMIT v_limit
        LOOP
            got := got + 1;
            ids := ids || c.id;
            n := n + 1;
            b := b + c.size;
            EXIT WHEN NOT a2e_over(ARRAY[u[1] - n, u[2] - n, u[3] - b, u[4] - b], g, p_quotas);
        END LOOP;
        EXIT WHEN NOT a2e_over(ARRAY[u[1] - n, u[2] - n, u[3] - b, u[4] - b], g, p_quotas);
        IF got < v_limit THEN  -- every candidate read, and still no room
            RETURN 0;
        END IF;
        v_limit := v_limit * 8;
    END LOOP;
    PERFORM set_config('a2e.change_op', 'evicted', true);
    DELETE FROM a2e_entries WHERE id = ANY(ids);
    PERFORM set_config('a2e.change_op', coalesce(v_op, ''), true);
    RETURN n;
END $$;

-- A group of store requests (a host's group commit, host.store.postgres_batch) in one
-- statement and one transaction. Entry i belongs to request p_put[i] (1..m, the requests sorted
-- by namespace), of namespace p_ns[i], written by p_agent[i] at p_now[i]; p_round[i] is k when
-- it is the k-th entry of the group with its address (namespace, tier, owner, key), so the
-- entries of one round have distinct addresses. Returns one outcome an entry, in order: NULL
-- stored, 'evicted:<n>' stored after evicting n entries (p_quotas[5] = 1, a2e_evict),
-- 'memory_full', or 'error: <message>' for every entry of a request that raised.
--
-- 1. Every namespace's lock, in namespace order (two hosts never wait on each other in a cycle).
-- 2. Quotas once a namespace: one the whole group could take past a quota (counting every entry
--    as new and whole: an upper bound) goes request by request (`a2e_put_entries`).
-- 3. The others, set-based, round by round: matching rows found at once; expired ones deleted
--    (they are replaced by new entries); live ones updated by one UPDATE (keeping created_at);
--    the rest inserted by one INSERT in entry order (ids follow the requests). One more
--    set-based statement per group fits here (a change log written in the same transaction).
-- 4. If the set-based part raises, it is rolled back and its requests go one by one, each in a
--    subtransaction of its own, so a failing request fails alone.
CREATE OR REPLACE FUNCTION a2e_put_group(
    p_quotas bigint[], p_put integer[], p_round integer[], p_ns text[], p_agent text[],
    p_now double precision[], p_tier text[], p_owner text[], p_key text[], p_content text[],
    p_tags text[], p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[],
    p_size bigint[], p_doc_len integer[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := coalesce(array_length(p_put, 1), 0);
    outcomes text[] := array_fill(NULL::text, ARRAY[v_n]);
    slow text[];
    fast boolean[];
    m_i integer[];
    m_id bigint[];
    m_expired boolean[];
    lo integer;
    hi integer;
BEGIN
    IF v_n = 0 THEN
        RETURN outcomes;
    END IF;
    PERFORM a2e_lock_namespace(l.ns) FROM (SELECT DISTINCT x AS ns FROM unnest(p_ns) x
                                            ORDER BY 1) l;
    WITH g AS (
        SELECT ns, agent, count(*) AS n, sum(size) AS b
          FROM unnest(p_ns, p_agent, p_size) AS r(ns, agent, size) GROUP BY ns, agent),
    gn AS (SELECT ns, sum(n) AS n, sum(b) AS b FROM g GROUP BY ns)
    SELECT coalesce(array_agg(DISTINCT s.ns), '{}') INTO slow FROM (
        SELECT g.ns FROM g LEFT JOIN a2e_usage u ON u.namespace = g.ns AND u.agent = g.agent
         WHERE coalesce(u.entries, 0) + g.n > p_quotas[2]
            OR coalesce(u.bytes, 0) + g.b > p_quotas[4]
        UNION ALL
        SELECT gn.ns FROM gn LEFT JOIN a2e_usage u ON u.namespace = gn.ns AND u.agent = ''
         WHERE coalesce(u.entries, 0) + gn.n > p_quotas[1]
            OR coalesce(u.bytes, 0) + gn.b > p_quotas[3]) s;
    fast := ARRAY(SELECT NOT (x = ANY(slow)) FROM unnest(p_ns) x);
    IF true = ANY(fast) THEN
        BEGIN
            FOR k IN 1 .. (SELECT max(x) FROM unnest(p_round) x) LOOP
                SELECT array_agg(r.i), array_agg(e.id),
                       array_agg(e.expires_at IS NOT NULL AND e.expires_at <= r.now)
                  INTO m_i, m_id, m_expired
                  FROM unnest(p_round, fast, p_ns, p_tier, p_owner, p_key, p_now)
                       WITH ORDINALITY AS r(rnd, fast, ns, tier, owner, key, now, i)
                  JOIN a2e_entries e ON e.namespace = r.ns AND e.tier = r.tier
                       AND e.owner = r.owner AND a2e_key_hash(e.key) = a2e_key_hash(r.key)
                       AND e.key = r.key
                 WHERE r.rnd = k AND r.fast;
                IF true = ANY(m_expired) THEN
                    DELETE FROM a2e_entries WHERE id IN (
                        SELECT m.id FROM unnest(m_id, m_expired) AS m(id, expired)
                         WHERE m.expired);
                END IF;
                IF false = ANY(m_expired) THEN
                    UPDATE a2e_entries e SET agent = r.agent, content = r.content,
                        tags = r.tags::text[], source = r.source, score = r.score, ttl = r.ttl,
                        updated_at = coalesce(r.updated, r.now),
                        expires_at = CASE WHEN r.ttl > 0 THEN coalesce(r.updated, r.now) + r.ttl
                                     END,
                        size = r.size, lexemes = r.lexemes::tsvector, doc_len = r.doc_len
                      FROM unnest(m_i, m_id, m_expired) AS m(i, id, expired),
                           unnest(p_agent, p_now, p_content, p_tags, p_source, p_score, p_ttl,
                                  p_updated, p_size, p_lexemes, p_doc_len)
                           WITH ORDINALITY AS r(agent, now, content, tags, source, score, ttl,
                                                updated, size, lexemes, doc_len, i)
                     WHERE r.i = m.i AND e.id = m.id AND NOT m.expired;
                    -- a put replaces its address's client vectors (the host writes the put's
                    -- own after the commit, host.store.postgres.extensions.write_vectors): an
                    -- entry that had some is queued for the host's embedder, its sequence
                    -- past any a worker may hold from before they were written
                    WITH d AS (
                        DELETE FROM a2e_client_vectors v
                         USING unnest(m_id, m_expired) AS m(id, expired), a2e_entries e
                         WHERE e.id = m.id AND NOT m.expired AND v.namespace = e.namespace
                           AND v.tier = e.tier AND v.owner = e.owner
                           AND v.key_hash = a2e_key_hash(e.key)
                        RETURNING e.id)
                    INSERT INTO a2e_embed_queue AS q (entry_id, seq)
                    SELECT DISTINCT id, a2e_queue_seq() FROM d ORDER BY id
                    ON CONFLICT (entry_id) DO UPDATE
                    SET seq = greatest(q.seq + 1, excluded.seq), claimed_until = 0;
                END IF;
                INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags,
                    source, score, ttl, created_at, updated_at, expires_at, size, lexemes,
                    doc_len)
                SELECT r.ns, r.tier, r.owner, r.key, r.agent, r.content, r.tags::text[],
                       r.source, r.score, r.ttl, coalesce(r.created, r.updated, r.now),
                       coalesce(r.updated, r.now),
                       CASE WHEN r.ttl > 0 THEN coalesce(r.updated, r.now) + r.ttl END,
                       r.size, r.lexemes::tsvector, r.doc_len
                  FROM unnest(p_round, fast, p_ns, p_tier, p_owner, p_key, p_agent, p_now,
                              p_content, p_tags, p_source, p_score, p_ttl, p_created,
                              p_updated, p_size, p_lexemes, p_doc_len)
                       WITH ORDINALITY AS r(rnd, fast, ns, tier, owner, key, agent, now,
                                            content, tags, source, score, ttl, created,
                                            updated, size, lexemes, doc_len, i)
                 WHERE r.rnd = k AND r.fast AND NOT EXISTS (
                       SELECT 1 FROM unnest(m_i, m_expired) AS m(i, expired)
                        WHERE m.i = r.i AND NOT m.expired)
                 ORDER BY r.i;
            END LOOP;
        EXCEPTION WHEN OTHERS THEN
            slow := ARRAY(SELECT DISTINCT x FROM unnest(p_ns) x);  -- every request, one by one
        END;
    END IF;
    -- the requests of the namespaces near a quota (or of a group that raised), in order
    lo := 1;
    WHILE lo <= v_n LOOP
        hi := lo;
        WHILE hi < v_n AND p_put[hi + 1] = p_put[lo] LOOP
            hi := hi + 1;
        END LOOP;
        IF p_ns[lo] = ANY(slow) THEN
            BEGIN
                outcomes[lo:hi] := a2e_put_entries(p_ns[lo], p_agent[lo], p_now[lo], p_quotas,
                    p_tier[lo:hi], p_owner[lo:hi], p_key[lo:hi], p_content[lo:hi],
                    p_tags[lo:hi], p_source[lo:hi], p_score[lo:hi], p_ttl[lo:hi],
                    p_created[lo:hi], p_updated[lo:hi], p_lexemes[lo:hi], p_size[lo:hi],
                    p_doc_len[lo:hi]);
            EXCEPTION WHEN OTHERS THEN
                outcomes[lo:hi] := array_fill(('error: ' || SQLERRM)::text,
                                              ARRAY[hi - lo + 1]);
            END;
        END IF;
        lo := hi + 1;
    END LOOP;
    RETURN outcomes;
END $$;

-- A group of store requests as `a2e_put_group`, then one 'stored' change a request with the
-- entries it stored (outcome NULL), read back as committed (a key written twice by one request
-- shows once, as it stands), requests in group order, each entry row linked to it
-- (`a2e_change_keys`). A 'stored' change supersedes the earlier copies of its entries: they
-- leave the earlier changes (a replay shows each entry's newest value), except from a change over 64 KiB that still carries other entries: that one keeps
-- the copies and their links (a forget or an expiry takes them out, the delete trigger), so
-- single stores over a large batch do not each rewrite it (its size is read without
-- reading it, whether it keeps other entries from one link that is not theirs).
CREATE OR REPLACE FUNCTION a2e_put_group_logged(
    p_quotas bigint[], p_put integer[], p_round integer[], p_ns text[], p_agent text[],
    p_now double precision[], p_tier text[], p_owner text[], p_key text[], p_content text[],
    p_tags text[], p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[],
    p_size bigint[], p_doc_len integer[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    outcomes text[];
    r record;
    v bigint;
BEGIN
    outcomes := a2e_put_group(p_quotas, p_put, p_round, p_ns, p_agent, p_now, p_tier, p_owner,
        p_key, p_content, p_tags, p_source, p_score, p_ttl, p_created, p_updated, p_lexemes,
        p_size, p_doc_len);
    FOR r IN
        WITH s AS (
            SELECT DISTINCT ON (x.put, x.tier, x.owner, x.key) x.put, x.ns, x.now, x.tier,
                   x.owner, x.key, x.i
              FROM unnest(p_put, p_ns, p_now, p_tier, p_owner, p_key, outcomes)
                   WITH ORDINALITY AS x(put, ns, now, tier, owner, key, outcome, i)
             WHERE x.outcome IS NULL OR x.outcome LIKE 'evicted:%'
             ORDER BY x.put, x.tier, x.owner, x.key, x.i DESC)
        SELECT s.put, min(s.ns) AS ns, min(s.now) AS now,
               json_agg(a2e_stored_record(e) ORDER BY s.i) AS entries, array_agg(e.id) AS ids
          FROM s JOIN a2e_entries e ON e.namespace = s.ns AND e.tier = s.tier
               AND e.owner = s.owner AND a2e_key_hash(e.key) = a2e_key_hash(s.key)
               AND e.key = s.key
         GROUP BY s.put ORDER BY s.put
    LOOP
        WITH old AS (
            SELECT k.namespace, k.seq, array_agg(k.entry_id) AS ids
              FROM a2e_change_keys k WHERE k.entry_id = ANY(r.ids)
             GROUP BY k.namespace, k.seq),
        pick AS (
            SELECT o.namespace, o.seq, o.ids, NOT EXISTS (SELECT 1 FROM a2e_change_keys k
                   WHERE k.namespace = o.namespace AND k.seq = o.seq
                   AND k.entry_id <> ALL(o.ids)) AS emptied,
                   octet_length(c.entries) AS size
              FROM old o JOIN a2e_changes c ON c.namespace = o.namespace AND c.seq = o.seq),
        go AS (SELECT * FROM pick WHERE emptied OR size <= 65536),
        del AS (
            DELETE FROM a2e_change_keys k USING go g
             WHERE k.namespace = g.namespace AND k.seq = g.seq AND k.entry_id = ANY(g.ids))
        UPDATE a2e_changes c SET entries = CASE
            WHEN g.emptied THEN '[]'
            ELSE coalesce((
                SELECT json_agg(x.r ORDER BY x.i)
                  FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
                 WHERE (x.r ->> 0, x.r ->> 1, (x.r -> 2)::text) NOT IN (
                       SELECT e.tier, e.owner, e.key FROM a2e_entries e
                        WHERE e.id = ANY(g.ids))
                ), '[]')::text END
          FROM go g
         WHERE c.namespace = g.namespace AND c.seq = g.seq;
        v := a2e_log_change(r.ns, 'stored', r.now, r.entries::text);
        INSERT INTO a2e_change_keys (entry_id, namespace, seq)
        SELECT DISTINCT i, r.ns, v FROM unnest(r.ids) AS i;
    END LOOP;
    RETURN outcomes;
END $$;

-- Forgets in one statement and one transaction (group commit, host.store.postgres.batch)
-- Delete the live entries of (namespace, tier/owner pairs) matching keys AND tags (an empty
-- array: no filter); the number deleted. Takes the namespace's lock, as every write does.
CREATE OR REPLACE FUNCTION a2e_forget(
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
CREATE OR REPLACE FUNCTION a2e_forget_batch(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
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

-- Forgets as `a2e_forget_batch`, each logged as one 'forgotten' change by the delete trigger.
CREATE OR REPLACE FUNCTION a2e_forget_batch_logged(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('a2e.change_op', 'forgotten', true);
    RETURN a2e_forget_batch(p_forgets);
END $$;

-- Touches (recorded reads) in one statement and one transaction, as forgets
-- Record a read of the live entries of (namespace, tier/owner pairs) under p_keys: move
-- updated_at forward to p_when where it is earlier; the number moved. Nothing else changes
-- (not expires_at: a touch never extends a TTL, and an entry expired at p_when is not
-- matched), as host.store.sqlite.ops.touch_entries. Takes the namespace's lock first, as
-- every write of a namespace's rows does, so it never deadlocks with a put, forget or GC.
CREATE OR REPLACE FUNCTION a2e_touch(
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
CREATE OR REPLACE FUNCTION a2e_touch_batch(p_touches jsonb) RETURNS bigint[] LANGUAGE plpgsql AS $$
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

-- ================================================================================================
-- Keyword search (host.store.postgres.reads)
-- ================================================================================================

-- The SQL of the readable entries of a namespace matching p_match (as one
-- UNION ALL of `SELECT p_select` a group, at most $2 each), newest first only when
-- p_newest_first: a count needs no order.
CREATE OR REPLACE FUNCTION a2e_readable(
    p_select text, p_ns text, p_tiers text[], p_owners text[], p_match text, p_keys text[],
    p_tags text[], p_newest_first boolean
) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    extra text := '';
    parts text[] := '{}';
BEGIN
    IF cardinality(p_keys) > 0 THEN
        extra := extra || ' AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k)'
                       || ' FROM unnest($3::text[]) k)) AND e.key = ANY($3::text[])';
    END IF;
    IF cardinality(p_tags) > 0 THEN
        extra := extra || ' AND e.tags @> $4::text[]';
    END IF;
    FOR g IN 1 .. coalesce(cardinality(p_tiers), 0) LOOP
        parts := parts || format(
            '(SELECT %s FROM a2e_entries e WHERE e.namespace = %L AND e.tier = %L'
            ' AND e.owner = %L AND e.lexemes @@ %L::tsquery'
            ' AND (e.expires_at IS NULL OR e.expires_at > $1)%s%s LIMIT $2)',
            p_select, p_ns, p_tiers[g], p_owners[g], p_match, extra,
            CASE WHEN p_newest_first THEN ' ORDER BY -e.id' ELSE '' END);
    END LOOP;
    RETURN array_to_string(parts, ' UNION ALL ');
END $$;

-- The terms of p_terms to search in the namespace p_ns (scope lexeme p_scope) for a reader of
-- the groups (p_tiers, p_owners) at p_now with the filters p_keys, p_tags; in order, each with
-- its BM25 statistic (the namespace's entries holding it; at most p_cap + 1 with p_cap > 0).
-- With p_cap > 0 and two terms or more, a term held by more than p_cap entries the reader may
-- read is left out, the rarest (for the reader; the first of them) kept if every term is.
-- Without groups (NULL), the namespace's counts decide.
CREATE OR REPLACE FUNCTION a2e_search_terms(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_tiers text[], p_owners text[],
    p_now double precision, p_keys text[], p_tags text[]
) RETURNS TABLE (term text, hits bigint) LANGUAGE plpgsql STABLE
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
    docs bigint[];
    seen bigint[] := '{}';
    n bigint;
    rarest integer := 1;
    capping boolean := p_cap > 0 AND cardinality(p_terms) >= 2;
    bitmaps text := current_setting('enable_bitmapscan');
    seqs text := current_setting('enable_seqscan');
BEGIN
    -- one primary-key probe a term (a join let the generic plan read every term of the
    -- namespace into a hash: ~0.4 ms at 1,000 terms, growing with the namespace)
    docs := ARRAY(SELECT coalesce((SELECT x.docs FROM a2e_terms x
                                    WHERE x.namespace = p_ns AND x.term = q.t), 0)
                    FROM unnest(p_terms) WITH ORDINALITY AS q(t, i) ORDER BY q.i);
    FOR i IN 1 .. coalesce(cardinality(p_terms), 0) LOOP
        n := docs[i];
        IF capping AND n > p_cap AND p_tiers IS NOT NULL THEN
            -- a common term: walk the reader's groups (their index) and stop at p_cap + 1; the
            -- planner, underestimating its matches, would read them all through the GIN index
            PERFORM set_config('enable_bitmapscan', 'off', true),
                    set_config('enable_seqscan', 'off', true);
            EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM (' || coalesce(nullif(a2e_readable(
                    '1', p_ns, p_tiers, p_owners,
                    quote_literal(p_scope) || ' & ' || quote_literal(p_terms[i]),
                    p_keys, p_tags, false), ''), 'SELECT 1 WHERE false') || ') r LIMIT $2) c'
               INTO n USING p_now, p_cap + 1, p_keys, p_tags;
            PERFORM set_config('enable_bitmapscan', bitmaps, true),
                    set_config('enable_seqscan', seqs, true);
        END IF;
        seen := seen || n;
        IF n < seen[rarest] THEN
            rarest := i;
        END IF;
    END LOOP;
    IF capping AND NOT (p_cap >= ANY(seen)) THEN
        term := p_terms[rarest];
        hits := least(docs[rarest], p_cap + 1);
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT u.t, CASE WHEN p_cap > 0 THEN least(u.d, p_cap + 1) ELSE u.d END
          FROM unnest(p_terms, docs, seen) WITH ORDINALITY AS u(t, d, s, i)
         WHERE NOT capping OR u.s <= p_cap ORDER BY u.i;
END $$;

-- A keyword query: the terms chosen for the reader (a2e_search_terms), the pool of matches the
-- reader may read (a2e_readable, the newest p_max), FTS5's BM25 over the namespace's
-- statistics, the best p_limit rows with their BM25, the terms each holds and those searched.
CREATE OR REPLACE FUNCTION a2e_keyword_search(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_max integer, p_limit integer,
    p_tiers text[], p_owners text[], p_now double precision, p_keys text[], p_tags text[]
) RETURNS TABLE (tier text, owner text, key text, content text, tags text[], source text,
                score double precision, ttl bigint, created_at double precision,
                updated_at double precision, id bigint, bm25 double precision, terms text[],
                searched text[])
LANGUAGE plpgsql STABLE
SET max_parallel_workers_per_gather = 0  -- a query of a few ms: workers cost more than they save
AS $$
DECLARE
    kept text[];
    hits bigint[];
    match text;
    tfs text[] := '{}';
    score text[] := '{}';
    held text[] := '{}';
    n double precision;
    avgdl double precision;
    dense boolean;
    bitmaps text;
    seqs text;
BEGIN
    IF cardinality(p_tiers) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(s.term ORDER BY s.ord), array_agg(s.hits ORDER BY s.ord) INTO kept, hits
      FROM a2e_search_terms(p_ns, p_scope, p_terms, p_cap, p_tiers, p_owners, p_now, p_keys,
                            p_tags) WITH ORDINALITY AS s(term, hits, ord);
    IF kept IS NULL THEN
        RETURN;
    END IF;
    SELECT greatest(u.entries, 1)::float8, greatest(u.tokens, 1)::float8 / greatest(u.entries, 1)
      INTO n, avgdl FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    n := coalesce(n, 1);
    avgdl := coalesce(avgdl, 1);
    match := quote_literal(p_scope) || ' & (' || (
        SELECT string_agg(quote_literal(t), ' | ') FROM unnest(kept) t) || ')';
    -- per searched term k: its occurrences f<k>, and its part of BM25 with its idf; `norm`,
    -- the length part of BM25's denominator, once a row (k1 1.2, b 0.75), in float8 (the
    -- values FTS5 computes; 0.75 * doc_len is exact either way)
    FOR k IN 1 .. cardinality(kept) LOOP
        tfs := tfs || format('a2e_tf(ts_rank(p.lexemes, %L::tsquery, 0)) AS f%s',
                             quote_literal(kept[k]), k);
        score := score || format(
            '%s::float8 * f%s * 2.2::float8 / (f%s + t.norm)',
            greatest(ln((n - hits[k] + 0.5) / (hits[k] + 0.5)), 1e-6), k, k);
        held := held || format('CASE WHEN f%s > 0 THEN %L END', k, kept[k]);
    END LOOP;
    -- A term held by more entries of the namespace than the pool takes (its count, not the
    -- statistic, capped at p_cap + 1): walk the newest index and stop at the pool's size. The
    -- planner cannot see that (it takes the namespace's lexeme and the term as independent and
    -- underestimates the matches ~20x), and would read every match (through the GIN index, or
    -- a seq scan) and sort them.
    SELECT p_max IS NOT NULL AND coalesce(bool_or(x.docs > p_max), false) INTO dense
      FROM a2e_terms x WHERE x.namespace = p_ns AND x.term = ANY(kept);
    IF dense THEN
        bitmaps := current_setting('enable_bitmapscan');
        seqs := current_setting('enable_seqscan');
        PERFORM set_config('enable_bitmapscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    -- The pool (the newest p_max matches, walked), each row's term counts computed once (the
    -- OFFSET 0 keeps the planner from copying the f<k> expressions into each use) and streamed
    -- into the top-p_limit sort: nothing is materialised (the lexemes were copied twice into
    -- CTEs before) and BM25 is float8 arithmetic throughout (numeric was ~1.5 ms of 4,000 rows).
    -- Equal scores go newest first, as on SQLite (its heap of (score, rowid)).
    RETURN QUERY EXECUTE
        'SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,'
        ' e.created_at, e.updated_at, b.id, b.bm25, b.terms, $7 FROM ('
        '   SELECT t.id, (' || array_to_string(score, ' + ') || ')::float8 AS bm25,'
        '   array_remove(ARRAY[' || array_to_string(held, ', ') || ']::text[], NULL) AS terms'
        '   FROM (SELECT p.id, 1.2::float8 * (0.25::float8 + 0.75::float8 * p.doc_len / $6)'
        '         AS norm, ' || array_to_string(tfs, ', ')
        || '     FROM (SELECT * FROM ('
        || a2e_readable('-e.id AS newest, e.id, e.lexemes, e.doc_len', p_ns, p_tiers, p_owners,
                        match, p_keys, p_tags, true)
        || ') x ORDER BY x.newest LIMIT $2) p OFFSET 0) t'
        '   ORDER BY 2 DESC, t.id DESC LIMIT $5) b'
        ' JOIN a2e_entries e ON e.id = b.id ORDER BY b.bm25 DESC, b.id DESC'
        USING p_now, p_max, p_keys, p_tags, p_limit, avgdl, kept;
    IF dense THEN
        PERFORM set_config('enable_bitmapscan', bitmaps, true),
                set_config('enable_seqscan', seqs, true);
    END IF;
END $$;

-- A keyword query and the neighbours of its best candidates in one statement (one round trip
-- where a2e_keyword_search and the store's `neighbours` took two): a2e_keyword_search's rows
-- (its arguments, results and order; `hit` and `d` NULL; `searched` on the first row only),
-- then, for each of the first p_near of them (best BM25 first), the up to p_span entries the
-- reader may read right before and after it in its own (namespace, tier, owner) by row id:
-- the entry's columns (key and content NULL for a row among the candidates: the caller has
-- it), `hit` the candidate's id and `d` the distance (bm25, terms, searched NULL), by
-- candidate, older side first, nearest first. The extensions' filters (`where`, key
-- prefixes) are not applied here.
-- The pool and BM25 are a2e_keyword_search's statement reduced to ids and scores (below);
-- the rows, the terms each holds and the neighbours are one static statement (a generic plan,
-- cached for the session: index scans by id and from each candidate).
CREATE OR REPLACE FUNCTION a2e_keyword_query(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_max integer, p_limit integer,
    p_tiers text[], p_owners text[], p_now double precision, p_keys text[], p_tags text[],
    p_near integer, p_span integer
) RETURNS TABLE (tier text, owner text, key text, content text, tags text[], source text,
                score double precision, ttl bigint, created_at double precision,
                updated_at double precision, id bigint, bm25 double precision, terms text[],
                searched text[], hit bigint, d bigint)
LANGUAGE plpgsql VOLATILE  -- it PREPAREs (a session's statement); it writes nothing
SET max_parallel_workers_per_gather = 0
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    kept text[];
    hits bigint[];
    queries tsquery[];
    idfs double precision[];
    match text;
    n double precision;
    avgdl double precision;
    dense boolean;
    small boolean;
    matched bigint;
    ids bigint[];
    scores double precision[];
    tfs text[] := '{}';
    score text[] := '{}';
    parts text[] := '{}';
    extra text := '';
    pool text;
    stmt text;
    bitmaps text := current_setting('enable_bitmapscan');
    seqs text := current_setting('enable_seqscan');
    idxs text := current_setting('enable_indexscan');
    groups text[] := '{}';
    sparse boolean;
BEGIN
    IF cardinality(p_tiers) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(s.term ORDER BY s.ord), array_agg(s.hits ORDER BY s.ord) INTO kept, hits
      FROM a2e_search_terms(p_ns, p_scope, p_terms, p_cap, p_tiers, p_owners, p_now, p_keys,
                            p_tags) WITH ORDINALITY AS s(term, hits, ord);
    IF kept IS NULL THEN
        RETURN;
    END IF;
    SELECT greatest(u.entries, 1)::float8, greatest(u.tokens, 1)::float8 / greatest(u.entries, 1)
      INTO n, avgdl FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    n := coalesce(n, 1);
    avgdl := coalesce(avgdl, 1);
    -- each term's idf, as a2e_keyword_search writes it into its statement (float8 throughout)
    idfs := ARRAY(SELECT greatest(ln((n - h + 0.5) / (h + 0.5)), 1e-6)
                    FROM unnest(hits) WITH ORDINALITY AS x(h, i) ORDER BY x.i);
    queries := ARRAY(SELECT quote_literal(t)::tsquery
                       FROM unnest(kept) WITH ORDINALITY AS x(t, i) ORDER BY x.i);
    match := quote_literal(p_scope) || ' & (' || (
        SELECT string_agg(quote_literal(t), ' | ') FROM unnest(kept) t) || ')';
    SELECT p_max IS NOT NULL AND coalesce(bool_or(x.docs > p_max), false), sum(x.docs)
      INTO dense, matched FROM a2e_terms x WHERE x.namespace = p_ns AND x.term = ANY(kept);
    -- The pool (the newest p_max matches the reader may read, one walk or index scan a group),
    -- each row's term counts computed once (OFFSET 0), BM25 in float8 (a2e_keyword_search's
    -- statement, its values as parameters): the text depends on the number of terms and
    -- groups and on the filters only. Up to 8 terms without keys it is prepared once a session
    -- for each shape and executed on a generic plan (a query plans nothing: planning cost ~2 ms
    -- of ~4): (version 4) when no term is dense, one read of the GIN index (every match, the
    -- groups a filter, then sorted: made with index scans off, so the generic plan is that
    -- bitmap whatever the estimates), which reads the matches only where a walk reads every
    -- row of the groups until the cap (the remote benchmark's namespace: 7,000 rows walked
    -- for 1,750 matches, 3.2 -> 2.4 ms of backend CPU a call); when one is, the walk, in a
    -- namespace of at most 2,000 entries or 4x the terms' counts. A dense term in a larger
    -- namespace is planned for its values (EXECUTE ... USING: a generic plan of the walk,
    -- blind to the terms' counts, walked a 100,000-entry namespace for a rare term in 50 ms,
    -- and a dense walk of 4,000 rows cost 11 ms where the planned one costs 8.5).
    FOR k IN 1 .. cardinality(kept) LOOP
        tfs := tfs || format('a2e_tf(ts_rank(p.lexemes, $11[%s], 0)) AS f%s', k, k);
        score := score || format('$12[%s] * f%s * 2.2::float8 / (f%s + t.norm)', k, k, k);
    END LOOP;
    IF cardinality(p_keys) > 0 THEN
        extra := extra || ' AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k)'
                       || ' FROM unnest($3::text[]) k)) AND e.key = ANY($3::text[])';
    END IF;
    IF cardinality(p_tags) > 0 THEN
        extra := extra || ' AND e.tags @> $4::text[]';
    END IF;
    FOR g IN 1 .. cardinality(p_tiers) LOOP
        parts := parts || format(
            '(SELECT -e.id AS newest, e.id, e.lexemes, e.doc_len FROM a2e_entries e'
            ' WHERE e.namespace = $7 AND e.tier = $8[%s] AND e.owner = $9[%s]'
            ' AND e.lexemes @@ $10 AND (e.expires_at IS NULL OR e.expires_at > $1)%s'
            ' ORDER BY -e.id LIMIT $2)', g, g, extra);
    END LOOP;
    -- no term held by more entries than the pool takes: every match is read from the GIN
    -- index (one bitmap, the readable groups a filter) and sorted, on a prepared generic plan
    sparse := NOT dense AND p_max IS NOT NULL AND cardinality(kept) <= 8
              AND cardinality(p_keys) = 0;
    IF sparse THEN
        FOR g IN 1 .. cardinality(p_tiers) LOOP
            groups := groups || format('(e.tier = $8[%s] AND e.owner = $9[%s])', g, g);
        END LOOP;
        parts := ARRAY['(SELECT -e.id AS newest, e.id, e.lexemes, e.doc_len FROM a2e_entries e'
            ' WHERE e.lexemes @@ $10 AND e.namespace = $7 AND (' || array_to_string(groups, ' OR ')
            || ') AND (e.expires_at IS NULL OR e.expires_at > $1)' || extra || ')'];
    END IF;
    pool :=
        'SELECT array_agg(b.id ORDER BY b.bm25 DESC, b.id DESC),'
        ' array_agg(b.bm25 ORDER BY b.bm25 DESC, b.id DESC) FROM ('
        '   SELECT t.id, (' || array_to_string(score, ' + ') || ')::float8 AS bm25'
        '   FROM (SELECT p.id, 1.2::float8 * (0.25::float8 + 0.75::float8 * p.doc_len / $6)'
        '         AS norm, ' || array_to_string(tfs, ', ')
        || '     FROM (SELECT * FROM (' || array_to_string(parts, ' UNION ALL ')
        || ') x ORDER BY x.newest LIMIT $2) p OFFSET 0) t'
        '   ORDER BY 2 DESC, t.id DESC LIMIT $5) b';
    -- a small namespace, or one whose entries match the terms a quarter of the time or more:
    -- walked (at most ~4 rows read a match), on a prepared generic plan
    small := sparse OR (n <= 2000 OR n <= 4 * coalesce(matched, 0)) AND cardinality(kept) <= 8
             AND cardinality(p_keys) = 0;
    IF sparse THEN
        PERFORM set_config('enable_indexscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    ELSIF dense OR small THEN
        PERFORM set_config('enable_bitmapscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    IF small THEN
        stmt := 'a2e_kw_' || left(md5(pool), 16);
        IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements s WHERE s.name = stmt) THEN
            EXECUTE format('PREPARE %I (float8, integer, text[], text[], integer, float8, text,'
                           ' text[], text[], tsquery, tsquery[], float8[]) AS %s', stmt, pool);
        END IF;
        EXECUTE format('EXECUTE %I (%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L)', stmt,
                       p_now, p_max, p_keys, p_tags, p_limit, avgdl, p_ns, p_tiers, p_owners,
                       match, queries, idfs)
           INTO ids, scores;
    ELSE
        EXECUTE pool INTO ids, scores
          USING p_now, p_max, p_keys, p_tags, p_limit, avgdl, p_ns, p_tiers, p_owners,
                match::tsquery, queries, idfs;
    END IF;
    PERFORM set_config('enable_indexscan', idxs, true);
    IF ids IS NULL THEN
        PERFORM set_config('enable_bitmapscan', bitmaps, true),
                set_config('enable_seqscan', seqs, true);
        RETURN;
    END IF;
    -- (rows by id and walks from them: index scans only, whatever the estimates of the arrays)
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    -- the candidates' rows, best first, with the terms each holds; then the neighbours of the
    -- first p_near (each side a walk of a2e_entries_newest from the candidate)
    RETURN QUERY
        (SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                e.created_at, e.updated_at, e.id, c.bm25,
                ARRAY(SELECT x.t FROM unnest(kept, queries) WITH ORDINALITY AS x(t, q, i)
                       WHERE e.lexemes @@ x.q ORDER BY x.i),
                CASE WHEN c.i = 1 THEN kept END, NULL::bigint, NULL::bigint
           FROM unnest(ids, scores) WITH ORDINALITY AS c(id, bm25, i)
           JOIN a2e_entries e ON e.id = c.id ORDER BY c.i)
        UNION ALL
        (SELECT r.tier, r.owner, CASE WHEN r.id = ANY(ids) THEN NULL ELSE r.key END,
                CASE WHEN r.id = ANY(ids) THEN NULL ELSE r.content END, r.tags, r.source,
                r.score, r.ttl, r.created_at, r.updated_at, r.id, NULL::float8, NULL::text[],
                NULL::text[], h.id, r.d
           FROM (SELECT c.id, c.i, e.tier, e.owner FROM unnest(ids[1:greatest(p_near, 0)])
                        WITH ORDINALITY AS c(id, i) JOIN a2e_entries e ON e.id = c.id
                  WHERE p_span > 0) h
          CROSS JOIN LATERAL (
                SELECT o.*, 0 AS side, row_number() OVER (ORDER BY o.id DESC) AS d FROM (
                    SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                           e.created_at, e.updated_at, e.id FROM a2e_entries e
                     WHERE e.namespace = p_ns AND e.tier = h.tier AND e.owner = h.owner
                       AND -e.id > -h.id AND (e.expires_at IS NULL OR e.expires_at > p_now)
                       AND (cardinality(p_keys) = 0 OR e.key = ANY(p_keys))
                       AND (cardinality(p_tags) = 0 OR e.tags @> p_tags)
                     ORDER BY -e.id LIMIT p_span) o
                UNION ALL
                SELECT y.*, 1, row_number() OVER (ORDER BY y.id) FROM (
                    SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                           e.created_at, e.updated_at, e.id FROM a2e_entries e
                     WHERE e.namespace = p_ns AND e.tier = h.tier AND e.owner = h.owner
                       AND -e.id < -h.id AND (e.expires_at IS NULL OR e.expires_at > p_now)
                       AND (cardinality(p_keys) = 0 OR e.key = ANY(p_keys))
                       AND (cardinality(p_tags) = 0 OR e.tags @> p_tags)
                     ORDER BY -e.id DESC LIMIT p_span) y) r
          ORDER BY h.i, r.side, r.d);
    PERFORM set_config('enable_bitmapscan', bitmaps, true),
            set_config('enable_seqscan', seqs, true);
END $$;

-- ================================================================================================
-- The change log (host.store.postgres.changes)
-- ================================================================================================

-- One change: the namespace's next number, and the row. `p_entries` is the JSON array of
-- records [tier, owner, key, tags, entry] (host.store.changes).
CREATE OR REPLACE FUNCTION a2e_log_change(p_namespace text, p_op text, p_at double precision,
                               p_entries text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    INSERT INTO a2e_change_heads AS h (namespace, seq) VALUES (p_namespace, 1)
    ON CONFLICT (namespace) DO UPDATE SET seq = h.seq + 1 RETURNING seq INTO v;
    INSERT INTO a2e_changes (namespace, seq, at, op, entries)
    VALUES (p_namespace, v, p_at, p_op, p_entries);
    -- every host listening is told at the commit (a payload fits 8000 bytes: '' = look at all)
    PERFORM pg_notify('a2e_changes',
                      CASE WHEN octet_length(p_namespace) < 4000 THEN p_namespace ELSE '' END);
    RETURN v;
END $$;

-- The record of an entry row as an event shows it.
CREATE OR REPLACE FUNCTION a2e_stored_record(e a2e_entries) RETURNS json LANGUAGE sql STABLE AS $$
    SELECT json_build_array(e.tier, e.owner, e.key::json, to_json(e.tags), json_build_object(
        'key', e.key::json, 'content', e.content::json, 'tier', e.tier, 'tags', to_json(e.tags),
        'source', e.source, 'score', e.score, 'ttl', e.ttl, 'created_at', e.created_at,
        'updated_at', e.updated_at))
$$;

-- Delete changes older than p_before or past p_rows a namespace (raising its floor); the
-- pruned changes' `a2e_change_keys` rows go with them.
CREATE OR REPLACE FUNCTION a2e_prune_changes(p_before double precision, p_rows bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    WITH d AS (
        DELETE FROM a2e_changes c USING a2e_change_heads h
         WHERE h.namespace = c.namespace AND (c.at < p_before OR c.seq <= h.seq - p_rows)
        RETURNING c.namespace, c.seq),
    k AS (DELETE FROM a2e_change_keys k USING d WHERE k.namespace = d.namespace
           AND k.seq = d.seq),
    f AS (SELECT namespace, max(seq) AS seq, count(*) AS n FROM d GROUP BY namespace),
    u AS (UPDATE a2e_change_heads h SET floor = greatest(h.floor, f.seq) FROM f
           WHERE h.namespace = f.namespace)
    SELECT coalesce(sum(f.n), 0) INTO n FROM f;
    RETURN n;
END $$;

-- ================================================================================================
-- Kept for hosts of older versions (a rolling upgrade): no host of this version calls them
-- ================================================================================================

-- One store request entry by entry (migrations 1-3; p_lexemes[i] a tsvector literal with
-- positions).
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

-- Many a2e_put in one statement and one transaction (migration 2).
-- Puts j = 1..m, each of one (namespace, agent) at its own time, entries
-- p_first[j] .. p_first[j] + p_count[j] - 1 of the flat entry arrays (a2e_put's). Returns
-- the outcomes of every entry in order. A put that raises is rolled back alone and each of
-- its outcomes is 'error: <message>'. The caller sorts the puts by namespace, so the
-- namespace locks are always taken in the same order.
CREATE OR REPLACE FUNCTION a2e_put_batch(
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
