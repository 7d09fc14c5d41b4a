-- Puts: a host's group of store requests in one statement (host.store.postgres.batch and
-- writes), set-based, request by request near a quota.
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- The entries of one store request, one by one, with the semantics of the SQLite store's
-- puts (host.store.sqlite), the size and token count of each entry given, tags as array
-- literals, lexemes as tsvector literals with positions. For a namespace near a quota: every entry is
-- checked against the usage left by the ones before it; one over quota is 'memory_full' and
-- left as it was (expired rows of the namespace collected once first), the others are stored.
-- p_valid_from, p_valid_until: when each entry's fact holds (NULL: open on that side); a put
-- replaces both (functions version 12).
CREATE OR REPLACE FUNCTION a2e_put_entries(
    p_namespace text, p_agent text, p_now double precision, p_quotas bigint[],
    p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
    p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[],
    p_size bigint[], p_doc_len integer[], p_valid_from double precision[],
    p_valid_until double precision[]
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
                source, score, ttl, created_at, updated_at, expires_at, size, lexemes, doc_len,
                valid_from, valid_until)
            VALUES (p_namespace, p_tier[i], p_owner[i], p_key[i], p_agent, p_content[i],
                p_tags[i]::text[], p_source[i], p_score[i], p_ttl[i],
                coalesce(p_created[i], upd), upd, exp, size_i, p_lexemes[i]::tsvector,
                p_doc_len[i], p_valid_from[i], p_valid_until[i])
            RETURNING id INTO v_id;
            mine := mine || v_id;
        ELSE
            mine := mine || r.id;
            UPDATE a2e_entries SET agent = p_agent, content = p_content[i],
                tags = p_tags[i]::text[], source = p_source[i], score = p_score[i],
                ttl = p_ttl[i], updated_at = upd, expires_at = exp, size = size_i,
                lexemes = p_lexemes[i]::tsvector, doc_len = p_doc_len[i],
                valid_from = p_valid_from[i], valid_until = p_valid_until[i]
             WHERE id = r.id;
            -- its client vectors go (as in a2e_put_group)
            WITH d AS (
                DELETE FROM a2e_client_vectors v
                 WHERE v.namespace = p_namespace AND v.tier = p_tier[i]
                   AND v.owner = p_owner[i] AND v.key_hash = a2e_key_hash(p_key[i])
                RETURNING 1)
            INSERT INTO a2e_embed_queue AS q (entry_id, seq, namespace)
            SELECT r.id, a2e_queue_seq(), p_namespace WHERE EXISTS (SELECT 1 FROM d)
            ON CONFLICT (entry_id) DO UPDATE
            SET seq = greatest(q.seq + 1, excluded.seq), claimed_until = 0;
        END IF;
        outcomes := outcomes || CASE WHEN gone > 0 THEN 'evicted:' || gone END;
    END LOOP;
    RETURN outcomes;
END $$;

-- A group of store requests (a host's group commit, host.store.postgres.batch) in one
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
    p_size bigint[], p_doc_len integer[], p_valid_from double precision[],
    p_valid_until double precision[]
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
                        size = r.size, lexemes = r.lexemes::tsvector, doc_len = r.doc_len,
                        valid_from = r.valid_from, valid_until = r.valid_until
                      FROM unnest(m_i, m_id, m_expired) AS m(i, id, expired),
                           unnest(p_agent, p_now, p_content, p_tags, p_source, p_score, p_ttl,
                                  p_updated, p_size, p_lexemes, p_doc_len, p_valid_from,
                                  p_valid_until)
                           WITH ORDINALITY AS r(agent, now, content, tags, source, score, ttl,
                                                updated, size, lexemes, doc_len, valid_from,
                                                valid_until, i)
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
                        RETURNING e.id, e.namespace)
                    INSERT INTO a2e_embed_queue AS q (entry_id, seq, namespace)
                    SELECT DISTINCT id, a2e_queue_seq(), namespace FROM d ORDER BY id
                    ON CONFLICT (entry_id) DO UPDATE
                    SET seq = greatest(q.seq + 1, excluded.seq), claimed_until = 0;
                END IF;
                INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags,
                    source, score, ttl, created_at, updated_at, expires_at, size, lexemes,
                    doc_len, valid_from, valid_until)
                SELECT r.ns, r.tier, r.owner, r.key, r.agent, r.content, r.tags::text[],
                       r.source, r.score, r.ttl, coalesce(r.created, r.updated, r.now),
                       coalesce(r.updated, r.now),
                       CASE WHEN r.ttl > 0 THEN coalesce(r.updated, r.now) + r.ttl END,
                       r.size, r.lexemes::tsvector, r.doc_len, r.valid_from, r.valid_until
                  FROM unnest(p_round, fast, p_ns, p_tier, p_owner, p_key, p_agent, p_now,
                              p_content, p_tags, p_source, p_score, p_ttl, p_created,
                              p_updated, p_size, p_lexemes, p_doc_len, p_valid_from,
                              p_valid_until)
                       WITH ORDINALITY AS r(rnd, fast, ns, tier, owner, key, agent, now,
                                            content, tags, source, score, ttl, created,
                                            updated, size, lexemes, doc_len, valid_from,
                                            valid_until, i)
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
                    p_doc_len[lo:hi], p_valid_from[lo:hi], p_valid_until[lo:hi]);
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
    p_size bigint[], p_doc_len integer[], p_valid_from double precision[],
    p_valid_until double precision[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    outcomes text[];
    r record;
    v bigint;
BEGIN
    outcomes := a2e_put_group(p_quotas, p_put, p_round, p_ns, p_agent, p_now, p_tier, p_owner,
        p_key, p_content, p_tags, p_source, p_score, p_ttl, p_created, p_updated, p_lexemes,
        p_size, p_doc_len, p_valid_from, p_valid_until);
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
