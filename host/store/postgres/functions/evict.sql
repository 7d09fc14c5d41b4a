-- Eviction: room made under a quota by deleting the writer's least worth entries
-- (limits.on_full "evict", host.store.postgres.evict, docs/growth.md).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- Eviction (limits.on_full "evict", docs/growth.md), under the namespace's lock a put holds:
-- make room for growth g of usage u (a2e_over's arrays) by deleting the fewest of p_agent's
-- own live entries in the namespace (it wrote them last: its episodic ones and the semantic
-- ones it wrote), worth least first (lowest score, then the longest since written or read
-- over the wire (read_at), then the oldest row; with ranking.importance_half_life, p_quotas[6]
-- in milliseconds, the lowest score faded since then); never one of p_keep (the entry the put replaces, those the request
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
    cur refcursor;
    v_score_list double precision[];
    v_scores integer := 0;
    v_op text := current_setting('a2e.change_op', true);
    -- ranking.importance_half_life in seconds (0: off; an older host sends no 6th element)
    v_half_life double precision := coalesce(p_quotas[6], 0) / 1000.0;
BEGIN
    IF a2e_over(ARRAY[u[1] - n, u[2] - n, u[3] - b, u[4] - b], g, p_quotas) THEN
        RETURN 0;
    END IF;
    IF v_half_life > 0 THEN  -- the agent's distinct scores, one index seek each (65 at most)
        WITH RECURSIVE s(v) AS (
            SELECT min(e.score) FROM a2e_entries e
             WHERE e.namespace = p_namespace AND e.agent = p_agent
            UNION ALL
            SELECT (SELECT min(e.score) FROM a2e_entries e
                     WHERE e.namespace = p_namespace AND e.agent = p_agent AND e.score > s.v)
              FROM s WHERE s.v IS NOT NULL)
        SELECT array_agg(v) INTO v_score_list FROM (SELECT v FROM s WHERE v IS NOT NULL LIMIT 65) t;
        v_scores := coalesce(cardinality(v_score_list), 0);
    END IF;
    -- the first v_limit candidates (LIMIT, so the planner reads the index rather than sort
    -- every entry of the agent), more if they do not make room
    LOOP
        ids := '{}';
        n := 0;
        b := 0;
        got := 0;
        -- by value: the index a2e_entries_value in order; with a half-life (p_quotas[6],
        -- milliseconds) by the score faded since last used, score * 0.5 ^ (age / half-life),
        -- which orders as log2(score) + used / half-life whatever the time (then by last use,
        -- then row): merged from each distinct score's first rows, or past 64 distinct scores
        -- a scan of the agent's index range kept in a top-N sort
        IF v_half_life > 0 AND v_scores <= 64 THEN
            -- a few distinct scores: within one, the faded order is the index's (by last
            -- use), so the first v_limit rows of each score hold the first v_limit of all
            OPEN cur FOR SELECT x.id, x.size FROM unnest(v_score_list) AS s(v)
             CROSS JOIN LATERAL (
                SELECT e.id, e.size, greatest(e.updated_at, coalesce(e.read_at, 0)) AS used
                  FROM a2e_entries e
                 WHERE e.namespace = p_namespace AND e.agent = p_agent AND e.score = s.v
                   AND (e.tier = 'semantic' OR e.owner = p_agent) AND e.id <> ALL(p_keep)
                 ORDER BY greatest(e.updated_at, coalesce(e.read_at, 0)), e.id
                 LIMIT v_limit) x
             ORDER BY CASE WHEN s.v > 0 THEN ln(s.v) / ln(2.0::double precision)
                           ELSE '-Infinity'::double precision END + x.used / v_half_life,
                      x.used, x.id
             LIMIT v_limit;
        ELSIF v_half_life > 0 THEN
            OPEN cur FOR SELECT e.id, e.size FROM a2e_entries e
             WHERE e.namespace = p_namespace AND e.agent = p_agent
               AND (e.tier = 'semantic' OR e.owner = p_agent) AND e.id <> ALL(p_keep)
             ORDER BY CASE WHEN e.score > 0 THEN ln(e.score) / ln(2.0::double precision)
                           ELSE '-Infinity'::double precision END
                      + greatest(e.updated_at, coalesce(e.read_at, 0)) / v_half_life,
                      greatest(e.updated_at, coalesce(e.read_at, 0)), e.id
             LIMIT v_limit;
        ELSE
            OPEN cur FOR SELECT e.id, e.size FROM a2e_entries e
             WHERE e.namespace = p_namespace AND e.agent = p_agent
               AND (e.tier = 'semantic' OR e.owner = p_agent) AND e.id <> ALL(p_keep)
             ORDER BY e.score, greatest(e.updated_at, coalesce(e.read_at, 0)), e.id
             LIMIT v_limit;
        END IF;
        LOOP
            FETCH cur INTO c;
            EXIT WHEN NOT FOUND;
            got := got + 1;
            ids := ids || c.id;
            n := n + 1;
            b := b + c.size;
            EXIT WHEN NOT a2e_over(ARRAY[u[1] - n, u[2] - n, u[3] - b, u[4] - b], g, p_quotas);
        END LOOP;
        CLOSE cur;
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

-- Reads over the wire, coalesced by a host (host.store.growth.ReadLog) and written as a batch:
-- entry i is (p_ns[i], p_tiers[i], p_owners[i], p_keys[i]), read at p_when[i]. Its read_at
-- moves forward to the latest of its times, never back; an entry gone meanwhile is skipped.
-- Takes the namespaces' locks first, in order, as every write of a namespace's rows does.
-- The number of entries moved.
CREATE OR REPLACE FUNCTION a2e_record_reads(
    p_ns text[], p_tiers text[], p_owners text[], p_keys text[], p_when double precision[]
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    v_ns text;
BEGIN
    FOR v_ns IN SELECT DISTINCT x FROM unnest(p_ns) x ORDER BY 1 LOOP
        PERFORM a2e_lock_namespace(v_ns);
    END LOOP;
    UPDATE a2e_entries e SET read_at = r.at
      FROM (SELECT u.ns, u.tier, u.owner, u.key, max(u.at) AS at
              FROM unnest(p_ns, p_tiers, p_owners, p_keys, p_when) AS u(ns, tier, owner, key, at)
             GROUP BY 1, 2, 3, 4) r
     WHERE e.namespace = r.ns AND e.tier = r.tier AND e.owner = r.owner
       AND a2e_key_hash(e.key) = a2e_key_hash(r.key) AND e.key = r.key
       AND (e.read_at IS NULL OR e.read_at < r.at);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
