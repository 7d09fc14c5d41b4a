-- 7: set-based writes. A group of store requests is one statement (`a2e_put_group`): the rows
-- of the whole group are inserted by one INSERT and updated by one UPDATE, so the statement-level
-- triggers (usage counters, embedding queue) run once a group, not once an entry. Quotas are
-- checked once a group and namespace; a namespace the group could take past a quota goes entry by
-- entry (`a2e_put_entries`, the sequential semantics), so an entry over quota never stops the
-- others. The entry's counted size and token count are computed by the host and passed in.

-- A changed entry (content or tags) loses its vector and is queued for a new one, for every
-- UPDATE statement at once (was: a row trigger an entry).
CREATE FUNCTION a2e_entries_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH c AS MATERIALIZED (
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.content IS DISTINCT FROM n.content OR o.tags IS DISTINCT FROM n.tags),
    d AS (DELETE FROM a2e_vectors v USING c WHERE v.entry_id = c.id)
    INSERT INTO a2e_embed_queue AS q (entry_id) SELECT id FROM c ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

-- New entries are queued for a vector, once an INSERT statement.
CREATE FUNCTION a2e_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_embed_queue AS q (entry_id) SELECT id FROM new_rows ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

DROP TRIGGER a2e_entries_embed_ai ON a2e_entries;
DROP TRIGGER a2e_entries_embed_au ON a2e_entries;
CREATE TRIGGER a2e_entries_embed_ai AFTER INSERT ON a2e_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_added();
CREATE TRIGGER a2e_entries_embed_au AFTER UPDATE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_changed();

-- The entries of one store request, one by one, with the semantics of
-- host.store.sqlite_ops.put_entries (a2e_put of migration 3, with the size and token count of
-- each entry given, tags as array literals). For a namespace near a quota: every entry is
-- checked against the usage left by the ones before it; one over quota is 'memory_full' and
-- left as it was (expired rows of the namespace collected once first), the others are stored.
CREATE FUNCTION a2e_put_entries(
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
                p_doc_len[i]);
        ELSE
            UPDATE a2e_entries SET agent = p_agent, content = p_content[i],
                tags = p_tags[i]::text[], source = p_source[i], score = p_score[i],
                ttl = p_ttl[i], updated_at = upd, expires_at = exp, size = size_i,
                lexemes = p_lexemes[i]::tsvector, doc_len = p_doc_len[i]
             WHERE id = r.id;
        END IF;
        outcomes := outcomes || NULL::text;
    END LOOP;
    RETURN outcomes;
END $$;

-- A group of store requests (a host's group commit, host.store.postgres_batch) in one
-- statement and one transaction. Entry i belongs to request p_put[i] (1..m, the requests sorted
-- by namespace), of namespace p_ns[i], written by p_agent[i] at p_now[i]; p_round[i] is k when
-- it is the k-th entry of the group with its address (namespace, tier, owner, key), so the
-- entries of one round have distinct addresses. Returns one outcome an entry, in order: NULL
-- stored, 'memory_full', or 'error: <message>' for every entry of a request that raised.
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
CREATE FUNCTION a2e_put_group(
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
