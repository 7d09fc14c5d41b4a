-- Eviction: room made under a quota by deleting the writer's least worth entries
-- (limits.on_full "evict", host.store.postgres.evict, docs/growth.md).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

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
