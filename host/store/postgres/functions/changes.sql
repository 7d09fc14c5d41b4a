-- The change log of memory/watch: its delete trigger, a change, pruning
-- (host.store.postgres.changes).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

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

-- The record of an entry row as an event shows it: its bounds (the time extension) only when
-- it has them, appended as host.store.changes.stored_record appends them (functions version 14).
CREATE OR REPLACE FUNCTION a2e_stored_record(e a2e_entries) RETURNS json LANGUAGE sql STABLE AS $$
    SELECT json_build_array(e.tier, e.owner, e.key::json, to_json(e.tags), CASE
        WHEN e.valid_from IS NULL AND e.valid_until IS NULL THEN o
        ELSE (left(o::text, -1)
              || coalesce(', "valid_from" : ' || to_json(e.valid_from)::text, '')
              || coalesce(', "valid_until" : ' || to_json(e.valid_until)::text, '') || '}')::json
        END)
      FROM (SELECT json_build_object(
        'key', e.key::json, 'content', e.content::json, 'tier', e.tier, 'tags', to_json(e.tags),
        'source', e.source, 'score', e.score, 'ttl', e.ttl, 'created_at', e.created_at,
        'updated_at', e.updated_at) AS o) x
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
