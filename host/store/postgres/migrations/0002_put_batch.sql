-- 2: many puts in one statement and one transaction (group commit, host.store.postgres.batch)
-- Puts j = 1..m, each of one (namespace, agent) at its own time, entries
-- p_first[j] .. p_first[j] + p_count[j] - 1 of the flat entry arrays (a2e_put's). Returns
-- the outcomes of every entry in order. A put that raises is rolled back alone and each of
-- its outcomes is 'error: <message>'. The caller sorts the puts by namespace, so the
-- namespace locks are always taken in the same order.
CREATE FUNCTION a2e_put_batch(
    p_namespace text[], p_agent text[], p_first integer[], p_count integer[],
    p_now double precision[], p_quotas bigint[],
    p_tier text[], p_owner text[], p_key text[], p_content text[], p_tags text[],
    p_source text[], p_score double precision[], p_ttl bigint[],
    p_created double precision[], p_updated double precision[], p_lexemes text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    outcomes text[] := '{}';
    lo integer;
    hi integer;
BEGIN
    FOR j IN 1 .. coalesce(array_length(p_namespace, 1), 0) LOOP
        lo := p_first[j];
        hi := p_first[j] + p_count[j] - 1;
        BEGIN
            outcomes := outcomes || a2e_put(p_namespace[j], p_agent[j], p_now[j], p_quotas,
                p_tier[lo:hi], p_owner[lo:hi], p_key[lo:hi], p_content[lo:hi],
                p_tags[lo:hi], p_source[lo:hi], p_score[lo:hi], p_ttl[lo:hi],
                p_created[lo:hi], p_updated[lo:hi], p_lexemes[lo:hi]);
        EXCEPTION WHEN OTHERS THEN
            outcomes := outcomes || array_fill(('error: ' || SQLERRM)::text,
                                               ARRAY[p_count[j]]);
        END;
    END LOOP;
    RETURN outcomes;
END $$;
