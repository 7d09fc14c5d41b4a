-- 14: a forget's cost does not grow with history. Each 'stored' change an entry row is written
-- by supersedes its earlier copies: they leave the earlier changes, so an entry row has its
-- `a2e_change_keys` links in the one change that last stored it, and deleting it rewrites at
-- most that change (a key stored 300 times: one change, not 300). A change left with no link
-- is written '[]' without being read. A replay shows each entry's newest value; an
-- overwritten value is not forgotten, so it may go, and a forgotten or expired one must.

-- Links kept from before: only each entry row's newest; the older changes lose its copy.
WITH old AS (
    DELETE FROM a2e_change_keys k
     USING (SELECT entry_id, max(seq) AS seq FROM a2e_change_keys GROUP BY entry_id) n
     WHERE k.entry_id = n.entry_id AND k.seq < n.seq
    RETURNING k.namespace, k.seq, k.entry_id),
d AS (SELECT namespace, seq, array_agg(entry_id) AS ids, count(*) AS n FROM old
       GROUP BY namespace, seq)
UPDATE a2e_changes c SET entries = CASE
    WHEN (SELECT count(*) FROM a2e_change_keys k WHERE k.namespace = c.namespace
           AND k.seq = c.seq) = d.n THEN '[]'
    ELSE coalesce((
        SELECT json_agg(x.r ORDER BY x.i)
          FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
         WHERE (x.r ->> 0, x.r ->> 1, (x.r -> 2)::text) NOT IN (
               SELECT e.tier, e.owner, e.key FROM a2e_entries e WHERE e.id = ANY(d.ids))
        ), '[]')::text END
  FROM d
 WHERE c.namespace = d.namespace AND c.seq = d.seq;

-- As in migration 12; a change that loses every link is written '[]' without being read.
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

-- As in migration 12, and the entry rows a 'stored' change carries leave the earlier changes
-- (their links with them) before they are linked to it.
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
        WITH old AS (
            DELETE FROM a2e_change_keys k WHERE k.entry_id = ANY(r.ids)
            RETURNING k.namespace, k.seq),
        d AS (SELECT namespace, seq, count(*) AS n FROM old GROUP BY namespace, seq)
        UPDATE a2e_changes c SET entries = CASE
            WHEN (SELECT count(*) FROM a2e_change_keys k WHERE k.namespace = c.namespace
                   AND k.seq = c.seq) = d.n THEN '[]'
            ELSE coalesce((
                SELECT json_agg(x.r ORDER BY x.i)
                  FROM json_array_elements(c.entries::json) WITH ORDINALITY AS x(r, i)
                 WHERE (x.r ->> 0, x.r ->> 1, (x.r -> 2)::text) NOT IN (
                       SELECT e.tier, e.owner, e.key FROM a2e_entries e
                        WHERE e.id = ANY(r.ids))
                ), '[]')::text END
          FROM d
         WHERE c.namespace = d.namespace AND c.seq = d.seq;
        v := a2e_log_change(r.ns, 'stored', r.now, r.entries::text);
        INSERT INTO a2e_change_keys (entry_id, namespace, seq)
        SELECT DISTINCT i, r.ns, v FROM unnest(r.ids) AS i;
    END LOOP;
    RETURN outcomes;
END $$;
