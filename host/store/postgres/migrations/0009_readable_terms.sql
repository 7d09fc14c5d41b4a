-- 9: a common term is common among the entries the reader may read.
--
-- Another agent's private entries must not make a term of yours common and drop it from your
-- query: a term held by more than p_cap entries of the namespace is recounted among the
-- readable ones (up to p_cap + 1) and kept when those are few, as SQLite's selective_terms
-- does. Its BM25 statistic stays the namespace's count, up to p_cap + 1 when capping (SQLite's).

-- The entries of one namespace that the groups (p_tiers[g], p_owners[g]) may read, live at $1,
-- matching the tsquery text p_match, holding every key of $3 and every tag of $4 when given
-- (p_keys, p_tags say whether): `SELECT p_select` of each group, newest first, at most $2 each,
-- as one UNION ALL (empty string without a group). Literals for what the planner estimates by.
CREATE FUNCTION a2e_readable(
    p_select text, p_ns text, p_tiers text[], p_owners text[], p_match text, p_keys text[],
    p_tags text[]
) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    extra text := '';
    parts text[] := '{}';
BEGIN
    IF cardinality(p_keys) > 0 THEN
        extra := extra || ' AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k)'
                       || ' FROM unnest($3::text[]) k)) AND e.key = ANY($3::text[])';
    END IF;
    IF cardinality(p_tags) > 0 THEN
        extra := extra || ' AND e.tags @> $4::text[]';
    END IF;
    FOR g IN 1 .. coalesce(cardinality(p_tiers), 0) LOOP
        parts := parts || format(
            '(SELECT %s FROM a2e_entries e WHERE e.namespace = %L AND e.tier = %L'
            ' AND e.owner = %L AND e.lexemes @@ %L::tsquery'
            ' AND (e.expires_at IS NULL OR e.expires_at > $1)%s ORDER BY -e.id LIMIT $2)',
            p_select, p_ns, p_tiers[g], p_owners[g], p_match, extra);
    END LOOP;
    RETURN array_to_string(parts, ' UNION ALL ');
END $$;

DROP FUNCTION a2e_search_terms(text, text[], integer);

-- The terms of p_terms to search in the namespace p_ns (scope lexeme p_scope) for a reader of
-- the groups (p_tiers, p_owners) at p_now with the filters p_keys, p_tags; in order, each with
-- its BM25 statistic (the namespace's entries holding it; at most p_cap + 1 with p_cap > 0).
-- With p_cap > 0 and two terms or more, a term held by more than p_cap entries the reader may
-- read is left out, the rarest (for the reader; the first of them) kept if every term is.
-- Without groups (NULL), the namespace's counts decide.
CREATE FUNCTION a2e_search_terms(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_tiers text[], p_owners text[],
    p_now double precision, p_keys text[], p_tags text[]
) RETURNS TABLE (term text, hits bigint) LANGUAGE plpgsql STABLE
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
    docs bigint[];
    seen bigint[] := '{}';
    n bigint;
    rarest integer := 1;
    capping boolean := p_cap > 0 AND cardinality(p_terms) >= 2;
BEGIN
    docs := ARRAY(SELECT coalesce(x.docs, 0) FROM unnest(p_terms) WITH ORDINALITY AS q(t, i)
                    LEFT JOIN a2e_terms x ON x.namespace = p_ns AND x.term = q.t ORDER BY q.i);
    FOR i IN 1 .. coalesce(cardinality(p_terms), 0) LOOP
        n := docs[i];
        IF capping AND n > p_cap AND p_tiers IS NOT NULL THEN
            EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM (' || coalesce(nullif(a2e_readable(
                    '1', p_ns, p_tiers, p_owners,
                    quote_literal(p_scope) || ' & ' || quote_literal(p_terms[i]),
                    p_keys, p_tags), ''), 'SELECT 1 WHERE false') || ') r LIMIT $2) c'
               INTO n USING p_now, p_cap + 1, p_keys, p_tags;
        END IF;
        seen := seen || n;
        IF n < seen[rarest] THEN
            rarest := i;
        END IF;
    END LOOP;
    IF capping AND NOT (p_cap >= ANY(seen)) THEN
        term := p_terms[rarest];
        hits := least(docs[rarest], p_cap + 1);
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT u.t, CASE WHEN p_cap > 0 THEN least(u.d, p_cap + 1) ELSE u.d END
          FROM unnest(p_terms, docs, seen) WITH ORDINALITY AS u(t, d, s, i)
         WHERE NOT capping OR u.s <= p_cap ORDER BY u.i;
END $$;

-- a2e_keyword_search of migration 8, the terms chosen for the reader (above) and the pool's
-- SQL from a2e_readable.
CREATE OR REPLACE FUNCTION a2e_keyword_search(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_max integer, p_limit integer,
    p_tiers text[], p_owners text[], p_now double precision, p_keys text[], p_tags text[]
) RETURNS TABLE (tier text, owner text, key text, content text, tags text[], source text,
                score double precision, ttl bigint, created_at double precision,
                updated_at double precision, id bigint, bm25 double precision, terms text[],
                searched text[])
LANGUAGE plpgsql STABLE
SET max_parallel_workers_per_gather = 0  -- a query of a few ms: workers cost more than they save
AS $$
DECLARE
    kept text[];
    hits bigint[];
    match text;
    tfs text[] := '{}';
    score text[] := '{}';
    held text[] := '{}';
    n double precision;
    avgdl double precision;
    dense boolean;
    bitmaps text;
    seqs text;
BEGIN
    IF cardinality(p_tiers) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(s.term ORDER BY s.ord), array_agg(s.hits ORDER BY s.ord) INTO kept, hits
      FROM a2e_search_terms(p_ns, p_scope, p_terms, p_cap, p_tiers, p_owners, p_now, p_keys,
                            p_tags) WITH ORDINALITY AS s(term, hits, ord);
    IF kept IS NULL THEN
        RETURN;
    END IF;
    SELECT greatest(u.entries, 1)::float8, greatest(u.tokens, 1)::float8 / greatest(u.entries, 1)
      INTO n, avgdl FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    n := coalesce(n, 1);
    avgdl := coalesce(avgdl, 1);
    match := quote_literal(p_scope) || ' & (' || (
        SELECT string_agg(quote_literal(t), ' | ') FROM unnest(kept) t) || ')';
    -- per searched term k: its occurrences f<k>, and its part of BM25 with its idf
    FOR k IN 1 .. cardinality(kept) LOOP
        tfs := tfs || format('a2e_tf(ts_rank(p.lexemes, %L::tsquery, 0)) AS f%s',
                             quote_literal(kept[k]), k);
        score := score || format(
            '%s * f%s * 2.2 / (f%s + 1.2 * (0.25 + 0.75 * t.doc_len / $6))',
            greatest(ln((n - hits[k] + 0.5) / (hits[k] + 0.5)), 1e-6), k, k);
        held := held || format('CASE WHEN f%s > 0 THEN %L END', k, kept[k]);
    END LOOP;
    -- A term held by more entries of the namespace than the pool takes: walk the newest index
    -- and stop at the pool's size. The planner cannot see that (it takes the namespace's lexeme
    -- and the term as independent and underestimates the matches ~20x), and would read every
    -- match (through the GIN index, or a seq scan) and sort them.
    dense := p_max IS NOT NULL AND p_max < ANY(hits);
    IF dense THEN
        bitmaps := current_setting('enable_bitmapscan');
        seqs := current_setting('enable_seqscan');
        PERFORM set_config('enable_bitmapscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    RETURN QUERY EXECUTE
        'WITH pool AS MATERIALIZED (SELECT * FROM ('
        || a2e_readable('-e.id AS newest, e.id, e.lexemes, e.doc_len', p_ns, p_tiers, p_owners,
                        match, p_keys, p_tags)
        || ') x ORDER BY x.newest LIMIT $2),'
        ' tf AS MATERIALIZED (SELECT p.id, p.doc_len, ' || array_to_string(tfs, ', ')
        || ' FROM pool p)'
        ' SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,'
        ' e.created_at, e.updated_at, b.id, b.bm25, b.terms, $7 FROM ('
        '   SELECT t.id, (' || array_to_string(score, ' + ') || ')::float8 AS bm25,'
        '   array_remove(ARRAY[' || array_to_string(held, ', ') || ']::text[], NULL) AS terms'
        '   FROM tf t ORDER BY 2 DESC, t.id LIMIT $5) b'
        ' JOIN a2e_entries e ON e.id = b.id ORDER BY b.bm25 DESC, b.id'
        USING p_now, p_max, p_keys, p_tags, p_limit, avgdl, kept;
    IF dense THEN
        PERFORM set_config('enable_bitmapscan', bitmaps, true),
                set_config('enable_seqscan', seqs, true);
    END IF;
END $$;
