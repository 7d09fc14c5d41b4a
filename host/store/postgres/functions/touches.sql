-- Touches (recorded reads): a host's group of touches in one statement
-- (host.store.postgres.writes).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- Touches (recorded reads) in one statement and one transaction, as forgets
-- Record a read of the live entries of (namespace, tier/owner pairs) under p_keys: move
-- updated_at forward to p_when where it is earlier; the number moved. Nothing else changes
-- (not expires_at: a touch never extends a TTL, and an entry expired at p_when is not
-- matched), as host.store.sqlite.writes.touch_entries. Takes the namespace's lock first, as
-- every write of a namespace's rows does, so it never deadlocks with a put, forget or GC.
CREATE OR REPLACE FUNCTION a2e_touch(
    p_namespace text, p_tiers text[], p_owners text[], p_keys text[],
    p_when double precision
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM a2e_lock_namespace(p_namespace);
    UPDATE a2e_entries e SET updated_at = p_when
     WHERE e.namespace = p_namespace
       AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
       AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k) FROM unnest(p_keys) k))
       AND e.key = ANY(p_keys)
       AND (e.expires_at IS NULL OR e.expires_at > p_when)
       AND e.updated_at < p_when;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- Touches j = 1..m (a JSON array of {namespace, tiers, owners, keys, when}), in order, in
-- this transaction; the number each moved. The caller sorts them by namespace (lock order).
CREATE OR REPLACE FUNCTION a2e_touch_batch(p_touches jsonb) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    results bigint[] := '{}';
    t jsonb;
BEGIN
    FOR t IN SELECT value FROM jsonb_array_elements(p_touches) LOOP
        results := results || a2e_touch(
            t->>'namespace',
            ARRAY(SELECT jsonb_array_elements_text(t->'tiers')),
            ARRAY(SELECT jsonb_array_elements_text(t->'owners')),
            ARRAY(SELECT jsonb_array_elements_text(t->'keys')),
            (t->>'when')::double precision);
    END LOOP;
    RETURN results;
END $$;
