-- 15: a store does not rewrite a large earlier batch for a few of its entries. As in
-- migration 14, a 'stored' change takes the earlier copies of its entries out of the earlier
-- changes, except from a change over 64 KiB that still carries other entries: that one keeps
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
