-- 12: a forget forgets (host/store/changes.py). `a2e_change_keys` ties each entry row to the
-- 'stored' changes that carry its content; when rows are deleted (a forget, a TTL collection,
-- an expired entry a put replaces, any other delete) the delete trigger takes their records out
-- of those changes in the same statement, so a replay never shows the content of what was
-- forgotten or expired. A 'stored' change left with no record stays, empty ('[]'), so the
-- numbers do not move. The content of entries already gone leaves the log here.
CREATE TABLE a2e_change_keys (
    entry_id bigint NOT NULL,
    namespace text NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (entry_id, namespace, seq)
);
CREATE INDEX a2e_change_keys_change ON a2e_change_keys (namespace, seq);

UPDATE a2e_changes c SET entries = coalesce((
    SELECT json_agg(x.r ORDER BY x.i)
      FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
     WHERE EXISTS (SELECT 1 FROM a2e_entries e WHERE e.namespace = c.namespace
                   AND e.tier = x.r ->> 0 AND e.owner = x.r ->> 1
                   AND a2e_key_hash(e.key) = a2e_key_hash((x.r -> 2)::text)
                   AND e.key = (x.r -> 2)::text)), '[]')::text
 WHERE c.op = 'stored';
INSERT INTO a2e_change_keys (entry_id, namespace, seq)
SELECT DISTINCT e.id, c.namespace, c.seq
  FROM a2e_changes c CROSS JOIN LATERAL json_array_elements(c.entries::json) AS x(r)
  JOIN a2e_entries e ON e.namespace = c.namespace AND e.tier = x.r ->> 0
       AND e.owner = x.r ->> 1 AND a2e_key_hash(e.key) = a2e_key_hash((x.r -> 2)::text)
       AND e.key = (x.r -> 2)::text
 WHERE c.op = 'stored';

-- Deleted rows: first their content leaves the changes that carry it (every delete), then,
-- under a named `a2e.change_op`, they are logged as that op (as in migration 10).
CREATE OR REPLACE FUNCTION a2e_entries_deleted_log() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_op text := current_setting('a2e.change_op', true);
    r record;
BEGIN
    WITH k AS (
        DELETE FROM a2e_change_keys k USING old_rows o WHERE k.entry_id = o.id
        RETURNING k.namespace, k.seq)
    UPDATE a2e_changes c SET entries = coalesce((
        SELECT json_agg(x.r ORDER BY x.i)
          FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
         WHERE (c.namespace, x.r ->> 0, x.r ->> 1, (x.r -> 2)::text) NOT IN (
               SELECT o.namespace, o.tier, o.owner, o.key FROM old_rows o)
        ), '[]')::text
      FROM (SELECT DISTINCT namespace, seq FROM k) d
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

-- As in migration 10, and each 'stored' change's entry rows go to `a2e_change_keys`.
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
             WHERE x.outcome IS NULL
             ORDER BY x.put, x.tier, x.owner, x.key, x.i DESC)
        SELECT s.put, min(s.ns) AS ns, min(s.now) AS now,
               json_agg(a2e_stored_record(e) ORDER BY s.i) AS entries, array_agg(e.id) AS ids
          FROM s JOIN a2e_entries e ON e.namespace = s.ns AND e.tier = s.tier
               AND e.owner = s.owner AND a2e_key_hash(e.key) = a2e_key_hash(s.key)
               AND e.key = s.key
         GROUP BY s.put ORDER BY s.put
    LOOP
        v := a2e_log_change(r.ns, 'stored', r.now, r.entries::text);
        INSERT INTO a2e_change_keys (entry_id, namespace, seq)
        SELECT DISTINCT i, r.ns, v FROM unnest(r.ids) AS i;
    END LOOP;
    RETURN outcomes;
END $$;

-- As in migration 10; the pruned changes' `a2e_change_keys` rows go with them.
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
