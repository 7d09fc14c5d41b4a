-- Forgets: a host's group of forgets in one statement (host.store.postgres.writes).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- Forgets in one statement and one transaction (group commit, host.store.postgres.batch)
-- Delete the live entries of (namespace, tier/owner pairs) matching keys AND tags (an empty
-- array: no filter); the number deleted. Takes the namespace's lock, as every write does.
CREATE OR REPLACE FUNCTION a2e_forget(
    p_namespace text, p_tiers text[], p_owners text[], p_keys text[], p_tags text[],
    p_now double precision
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM a2e_lock_namespace(p_namespace);
    IF cardinality(p_keys) > 0 THEN
        DELETE FROM a2e_entries e
         WHERE e.namespace = p_namespace
           AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
           AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k) FROM unnest(p_keys) k))
           AND e.key = ANY(p_keys)
           AND (e.expires_at IS NULL OR e.expires_at > p_now)
           AND e.tags @> p_tags;
    ELSE
        DELETE FROM a2e_entries e
         WHERE e.namespace = p_namespace
           AND (e.tier, e.owner) IN (SELECT * FROM unnest(p_tiers, p_owners))
           AND (e.expires_at IS NULL OR e.expires_at > p_now)
           AND e.tags @> p_tags;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- Forgets j = 1..m (a JSON array of {namespace, tiers, owners, keys, tags, now}); one
-- result each: the number deleted as text, or 'error: <message>' for a forget that raised
-- (rolled back alone). The caller sorts them by namespace.
CREATE OR REPLACE FUNCTION a2e_forget_batch(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    results text[] := '{}';
    f jsonb;
BEGIN
    FOR f IN SELECT value FROM jsonb_array_elements(p_forgets) LOOP
        BEGIN
            results := results || a2e_forget(
                f->>'namespace',
                ARRAY(SELECT jsonb_array_elements_text(f->'tiers')),
                ARRAY(SELECT jsonb_array_elements_text(f->'owners')),
                ARRAY(SELECT jsonb_array_elements_text(f->'keys')),
                ARRAY(SELECT jsonb_array_elements_text(f->'tags')),
                (f->>'now')::double precision)::text;
        EXCEPTION WHEN OTHERS THEN
            results := results || ('error: ' || SQLERRM);
        END;
    END LOOP;
    RETURN results;
END $$;

-- Forgets as `a2e_forget_batch`, each logged as one 'forgotten' change by the delete trigger.
CREATE OR REPLACE FUNCTION a2e_forget_batch_logged(p_forgets jsonb) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('a2e.change_op', 'forgotten', true);
    RETURN a2e_forget_batch(p_forgets);
END $$;
