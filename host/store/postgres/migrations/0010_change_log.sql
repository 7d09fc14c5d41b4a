-- 10: the change log of `memory/watch` (host/store/changes.py), written in the transaction of
-- the write it records. `a2e_changes` holds one row a committed request (a store, a forget) or
-- collection of expired entries, a namespace's rows numbered 1, 2, 3, ... by
-- `a2e_change_heads.seq`, bumped under that row's lock: two transactions of one namespace never
-- hold the same head at once, so numbers follow commit order and a reader that has seen n has
-- seen every change before it. `floor` is the highest number pruned (watch.retention). Each
-- change notifies the channel `a2e_changes` with its namespace (the hosts LISTEN on it).
CREATE TABLE a2e_change_heads (
    namespace text PRIMARY KEY,
    seq bigint NOT NULL DEFAULT 0,
    floor bigint NOT NULL DEFAULT 0
);
CREATE TABLE a2e_changes (
    namespace text NOT NULL,
    seq bigint NOT NULL,
    at double precision NOT NULL,
    op text NOT NULL,
    entries text NOT NULL,
    PRIMARY KEY (namespace, seq)
);
CREATE INDEX a2e_changes_at ON a2e_changes (at);

-- One change: the namespace's next number, and the row. `p_entries` is the JSON array of
-- records [tier, owner, key, tags, entry] (host.store.changes).
CREATE FUNCTION a2e_log_change(p_namespace text, p_op text, p_at double precision,
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
CREATE FUNCTION a2e_stored_record(e a2e_entries) RETURNS json LANGUAGE sql STABLE AS $$
    SELECT json_build_array(e.tier, e.owner, e.key::json, to_json(e.tags), json_build_object(
        'key', e.key::json, 'content', e.content::json, 'tier', e.tier, 'tags', to_json(e.tags),
        'source', e.source, 'score', e.score, 'ttl', e.ttl, 'created_at', e.created_at,
        'updated_at', e.updated_at))
$$;

-- Deleted rows are logged by the statement that deletes them, as the op the transaction named
-- in the setting `a2e.change_op` ('forgotten' by a forget, 'expired' by a collection); other
-- deletes (an expired entry replaced by a store) are not changes of their own.
CREATE FUNCTION a2e_entries_deleted_log() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_op text := current_setting('a2e.change_op', true);
    r record;
BEGIN
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
CREATE TRIGGER a2e_entries_log_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_entries_deleted_log();

-- A group of store requests as `a2e_put_group`, then one 'stored' change a request with the
-- entries it stored (outcome NULL), read back as committed (a key written twice by one request
-- shows once, as it stands), requests in group order.
CREATE FUNCTION a2e_put_group_logged(
    p_quotas bigint[], p_put integer[], p_round integer[], p_ns text[], p_agent text[],
    p_now double precision[], p_tier text[], p_owner text[], p_key text[], p_content text[],
    p_tags text[], p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[],
    p_size bigint[], p_doc_len integer[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    outcomes text[];
    r record;
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
               json_agg(a2e_stored_record(e) ORDER BY s.i) AS entries
          FROM s JOIN a2e_entries e ON e.namespace = s.ns AND e.tier = s.tier
               AND e.owner = s.owner AND a2e_key_hash(e.key) = a2e_key_hash(s.key)
               AND e.key = s.key
         GROUP BY s.put ORDER BY s.put
    LOOP
        PERFORM a2e_log_change(r.ns, 'stored', r.now, r.entries::text);
    END LOOP;
    RETURN outcomes;
END $$;

-- Forgets as `a2e_forget_batch`, each logged as one 'forgotten' change by the delete trigger.
CREATE FUNCTION a2e_forget_batch_logged(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('a2e.change_op', 'forgotten', true);
    RETURN a2e_forget_batch(p_forgets);
END $$;

-- watch.retention: changes older than p_before, and those past the newest p_rows of their
-- namespace; the floors rise to the highest number deleted. The number of changes deleted.
CREATE FUNCTION a2e_prune_changes(p_before double precision, p_rows bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    WITH d AS (
        DELETE FROM a2e_changes c USING a2e_change_heads h
         WHERE h.namespace = c.namespace AND (c.at < p_before OR c.seq <= h.seq - p_rows)
        RETURNING c.namespace, c.seq),
    f AS (SELECT namespace, max(seq) AS seq, count(*) AS n FROM d GROUP BY namespace),
    u AS (UPDATE a2e_change_heads h SET floor = greatest(h.floor, f.seq) FROM f
           WHERE h.namespace = f.namespace)
    SELECT coalesce(sum(f.n), 0) INTO n FROM f;
    RETURN n;
END $$;
