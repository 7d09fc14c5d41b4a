-- Usage counters and quotas: the namespace lock every write takes, the quota test, the
-- usage triggers of a2e_entries (host.store.postgres.writes, host.store.growth).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

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
