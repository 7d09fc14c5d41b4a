-- Keyword search: the term counts and their triggers, BM25's term frequency, the keyword
-- query with the neighbours of its best candidates (host.store.postgres.reads).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

CREATE OR REPLACE FUNCTION a2e_doc_len(p_lexemes tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 1 + coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest(p_lexemes)
$$;

-- The occurrences of a term in an entry, from ts_rank(lexemes, term, 0) (C, no row set to
-- build): an entry's lexemes hold one position a occurrence (1..tf, weight D = 0.1), for which
-- ts_rank is 0.1 * (1 + 1/4 + ... + 1/tf^2) / zeta(2); the tail zeta(2) - (1 + ... + 1/tf^2)
-- is 1 / (tf + 1/2) within 1 / (12 tf^3), so rounding gives tf exactly (0 when the term is
-- absent; tf <= 256, PostgreSQL's limit of positions, well within real's precision).
CREATE OR REPLACE FUNCTION a2e_tf(p_rank real) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT round(1.0 / (1.64493406685 * (1.0 - 10.0 * p_rank::float8)) - 0.5) $$;

CREATE OR REPLACE FUNCTION a2e_terms_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_terms AS t (namespace, term, docs)
    SELECT n.namespace, u.term, count(*) FROM new_rows n,
           unnest(tsvector_to_array(n.lexemes)) AS u(term)
     GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET docs = t.docs + excluded.docs;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION a2e_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE a2e_terms t SET docs = t.docs - d.n
      FROM (SELECT o.namespace, u.term, count(*) AS n FROM old_rows o,
                   unnest(tsvector_to_array(o.lexemes)) AS u(term) GROUP BY 1, 2) d
     WHERE t.namespace = d.namespace AND t.term = d.term;
    DELETE FROM a2e_terms t
     USING (SELECT DISTINCT o.namespace, u.term FROM old_rows o,
                   unnest(tsvector_to_array(o.lexemes)) AS u(term)) d
     WHERE t.namespace = d.namespace AND t.term = d.term AND t.docs <= 0;
    RETURN NULL;
END $$;

-- an update changes the counts only where it changed the lexemes (not a touch)
CREATE OR REPLACE FUNCTION a2e_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_terms AS t (namespace, term, docs)
    SELECT x.namespace, x.term, sum(x.d) FROM (
        SELECT n.namespace, u.term, 1 AS d FROM new_rows n JOIN old_rows o ON o.id = n.id,
               unnest(tsvector_to_array(n.lexemes)) AS u(term) WHERE n.lexemes <> o.lexemes
        UNION ALL
        SELECT o.namespace, u.term, -1 FROM new_rows n JOIN old_rows o ON o.id = n.id,
               unnest(tsvector_to_array(o.lexemes)) AS u(term) WHERE n.lexemes <> o.lexemes) x
     GROUP BY 1, 2 HAVING sum(x.d) <> 0 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET docs = t.docs + excluded.docs;
    IF FOUND THEN  -- a term no entry holds any more goes
        DELETE FROM a2e_terms t
         USING (SELECT DISTINCT o.namespace, u.term FROM new_rows n JOIN old_rows o ON o.id = n.id,
                       unnest(tsvector_to_array(o.lexemes)) AS u(term)
                 WHERE n.lexemes <> o.lexemes) d
         WHERE t.namespace = d.namespace AND t.term = d.term AND t.docs <= 0;
    END IF;
    RETURN NULL;
END $$;

-- The SQL of the readable entries of a namespace matching p_match (as one
-- UNION ALL of `SELECT p_select` a group, at most $2 each), newest first only when
-- p_newest_first: a count needs no order.
CREATE OR REPLACE FUNCTION a2e_readable(
    p_select text, p_ns text, p_tiers text[], p_owners text[], p_match text, p_keys text[],
    p_tags text[], p_newest_first boolean
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
            ' AND (e.expires_at IS NULL OR e.expires_at > $1)%s%s LIMIT $2)',
            p_select, p_ns, p_tiers[g], p_owners[g], p_match, extra,
            CASE WHEN p_newest_first THEN ' ORDER BY -e.id' ELSE '' END);
    END LOOP;
    RETURN array_to_string(parts, ' UNION ALL ');
END $$;

-- The terms of p_terms to search in the namespace p_ns (scope lexeme p_scope) for a reader of
-- the groups (p_tiers, p_owners) at p_now with the filters p_keys, p_tags; in order, each with
-- its BM25 statistic (the namespace's entries holding it; at most p_cap + 1 with p_cap > 0).
-- With p_cap > 0 and two terms or more, a term held by more than p_cap entries the reader may
-- read is left out, the rarest (for the reader; the first of them) kept if every term is.
-- Without groups (NULL), the namespace's counts decide.
CREATE OR REPLACE FUNCTION a2e_search_terms(
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
    bitmaps text := current_setting('enable_bitmapscan');
    seqs text := current_setting('enable_seqscan');
    idxs text := current_setting('enable_indexscan');
    entries bigint;
BEGIN
    SELECT u.entries INTO entries FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    -- one primary-key probe a term (a join let the generic plan read every term of the
    -- namespace into a hash: ~0.4 ms at 1,000 terms, growing with the namespace)
    docs := ARRAY(SELECT coalesce((SELECT x.docs FROM a2e_terms x
                                    WHERE x.namespace = p_ns AND x.term = q.t), 0)
                    FROM unnest(p_terms) WITH ORDINALITY AS q(t, i) ORDER BY q.i);
    FOR i IN 1 .. coalesce(cardinality(p_terms), 0) LOOP
        n := docs[i];
        IF capping AND n > p_cap AND p_tiers IS NOT NULL THEN
            -- a common term, counted for the reader up to p_cap + 1. Held by a quarter of the
            -- namespace or more: walk the reader's groups (their index), at most ~4 rows read a
            -- match (the planner, underestimating its matches, would read them all through the
            -- GIN index). Thinner (functions version 8): read the GIN index, the matches only,
            -- where the walk read every entry of the groups until the cap (16 rows a match for a
            -- term in 1 of 16 entries: 32,000 rows for 2,001 matches)
            IF 4 * n >= coalesce(entries, 0) THEN
                PERFORM set_config('enable_bitmapscan', 'off', true);
            ELSE
                PERFORM set_config('enable_indexscan', 'off', true);
            END IF;
            PERFORM set_config('enable_seqscan', 'off', true);
            EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM (' || coalesce(nullif(a2e_readable(
                    '1', p_ns, p_tiers, p_owners,
                    quote_literal(p_scope) || ' & ' || quote_literal(p_terms[i]),
                    p_keys, p_tags, false), ''), 'SELECT 1 WHERE false') || ') r LIMIT $2) c'
               INTO n USING p_now, p_cap + 1, p_keys, p_tags;
            PERFORM set_config('enable_bitmapscan', bitmaps, true),
                    set_config('enable_seqscan', seqs, true),
                    set_config('enable_indexscan', idxs, true);
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

-- A keyword query and the neighbours of its best candidates in one statement (one round
-- trip): the terms chosen for the reader (a2e_search_terms), the pool of matches the reader may
-- read (the newest p_max), FTS5's BM25 over the namespace's statistics, the best p_limit rows
-- with their BM25, the terms each holds and those searched (`hit` and `d` NULL; `searched` on
-- the first row only), best first, equal scores newest first (as SQLite's heap of (score,
-- rowid)); then, for each of the first p_near of them (best BM25 first), the up to p_span entries the
-- reader may read right before and after it in its own (namespace, tier, owner) by row id:
-- the entry's columns (key and content NULL for a row among the candidates: the caller has
-- it), `hit` the candidate's id and `d` the distance (bm25, terms, searched NULL), by
-- candidate, older side first, nearest first. The extensions' filters (`where`, key
-- prefixes) are not applied here. With p_as_of (functions version 12: the time extension),
-- only the entries valid then ([valid_from, valid_until)) are candidates and neighbours; every
-- row ends with the entry's valid_from and valid_until. With p_stats (functions version 15),
-- first a row of the query's BM25 statistics (every column NULL but `searched`, the terms
-- kept, `stat_hits`, their statistics, and `stat_rows` and `stat_tokens`, the namespace's
-- entries and tokens, each at least 1): what scores a text outside the index (the working
-- tier's entries) on its scale, in the same round trip; with no group (p_tiers empty), that
-- row alone.
-- The pool and BM25 are one statement of ids and scores (below); the rows, the terms each holds and the neighbours are one static statement (a generic plan,
-- cached for the session: index scans by id and from each candidate).
CREATE OR REPLACE FUNCTION a2e_keyword_query(
    p_ns text, p_scope text, p_terms text[], p_cap integer, p_max integer, p_limit integer,
    p_tiers text[], p_owners text[], p_now double precision, p_keys text[], p_tags text[],
    p_near integer, p_span integer, p_as_of double precision, p_stats boolean
) RETURNS TABLE (tier text, owner text, key text, content text, tags text[], source text,
                score double precision, ttl bigint, created_at double precision,
                updated_at double precision, id bigint, bm25 double precision, terms text[],
                searched text[], hit bigint, d bigint, valid_from double precision,
                valid_until double precision, stat_hits bigint[], stat_rows bigint,
                stat_tokens bigint)
LANGUAGE plpgsql VOLATILE  -- it PREPAREs (a session's statement); it writes nothing
SET max_parallel_workers_per_gather = 0
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    kept text[];
    hits bigint[];
    queries tsquery[];
    idfs double precision[];
    match text;
    n double precision;
    avgdl double precision;
    dense boolean;
    small boolean;
    matched bigint;
    ids bigint[];
    scores double precision[];
    tfs text[] := '{}';
    score text[] := '{}';
    parts text[] := '{}';
    extra text := '';
    pool text;
    stmt text;
    bitmaps text := current_setting('enable_bitmapscan');
    seqs text := current_setting('enable_seqscan');
    idxs text := current_setting('enable_indexscan');
    groups text[] := '{}';
    sparse boolean;
    with_stats boolean := coalesce(p_stats, false);
BEGIN
    IF cardinality(p_tiers) = 0 AND NOT with_stats THEN
        RETURN;
    END IF;
    SELECT array_agg(s.term ORDER BY s.ord), array_agg(s.hits ORDER BY s.ord) INTO kept, hits
      FROM a2e_search_terms(p_ns, p_scope, p_terms, p_cap, p_tiers, p_owners, p_now, p_keys,
                            p_tags) WITH ORDINALITY AS s(term, hits, ord);
    IF kept IS NULL AND NOT with_stats THEN
        RETURN;
    END IF;
    SELECT greatest(u.entries, 1)::float8, greatest(u.tokens, 1)::float8 / greatest(u.entries, 1),
           greatest(u.entries, 1), greatest(u.tokens, 1)
      INTO n, avgdl, stat_rows, stat_tokens
      FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    n := coalesce(n, 1);
    avgdl := coalesce(avgdl, 1);
    IF with_stats THEN  -- the statistics' row, first
        searched := kept;
        stat_hits := hits;
        stat_rows := coalesce(stat_rows, 1);
        stat_tokens := coalesce(stat_tokens, 1);
        RETURN NEXT;
    END IF;
    IF kept IS NULL OR cardinality(p_tiers) = 0 THEN
        RETURN;
    END IF;
    -- each term's idf (float8 throughout, as FTS5 computes it)
    idfs := ARRAY(SELECT greatest(ln((n - h + 0.5) / (h + 0.5)), 1e-6)
                    FROM unnest(hits) WITH ORDINALITY AS x(h, i) ORDER BY x.i);
    queries := ARRAY(SELECT quote_literal(t)::tsquery
                       FROM unnest(kept) WITH ORDINALITY AS x(t, i) ORDER BY x.i);
    match := quote_literal(p_scope) || ' & (' || (
        SELECT string_agg(quote_literal(t), ' | ') FROM unnest(kept) t) || ')';
    SELECT p_max IS NOT NULL AND coalesce(bool_or(x.docs > p_max), false), sum(x.docs)
      INTO dense, matched FROM a2e_terms x WHERE x.namespace = p_ns AND x.term = ANY(kept);
    -- The pool (the newest p_max matches the reader may read, one walk or index scan a group),
    -- each row's term counts computed once (OFFSET 0), BM25 in float8 (its values as
    -- parameters): the text depends on the number of terms and
    -- groups and on the filters only. Up to 8 terms without keys it is prepared once a session
    -- for each shape and executed on a generic plan (a query plans nothing: planning cost ~2 ms
    -- of ~4): (version 4) when no term is dense, one read of the GIN index (every match, the
    -- groups a filter, then sorted: made with index scans off, so the generic plan is that
    -- bitmap whatever the estimates), which reads the matches only where a walk reads every
    -- row of the groups until the cap (the remote benchmark's namespace: 7,000 rows walked
    -- for 1,750 matches, 3.2 -> 2.4 ms of backend CPU a call); when one is, the walk, in a
    -- namespace of at most 2,000 entries or 4x the terms' counts. A dense term in a larger
    -- namespace is planned for its values (EXECUTE ... USING: a generic plan of the walk,
    -- blind to the terms' counts, walked a 100,000-entry namespace for a rare term in 50 ms,
    -- and a dense walk of 4,000 rows cost 11 ms where the planned one costs 8.5).
    FOR k IN 1 .. cardinality(kept) LOOP
        tfs := tfs || format('a2e_tf(ts_rank(p.lexemes, $11[%s], 0)) AS f%s', k, k);
        score := score || format('$12[%s] * f%s * 2.2::float8 / (f%s + t.norm)', k, k, k);
    END LOOP;
    IF cardinality(p_keys) > 0 THEN
        extra := extra || ' AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k)'
                       || ' FROM unnest($3::text[]) k)) AND e.key = ANY($3::text[])';
    END IF;
    IF cardinality(p_tags) > 0 THEN
        extra := extra || ' AND e.tags @> $4::text[]';
    END IF;
    IF p_as_of IS NOT NULL THEN
        extra := extra || ' AND (e.valid_from IS NULL OR e.valid_from <= $13)'
                       || ' AND (e.valid_until IS NULL OR e.valid_until > $13)';
    END IF;
    FOR g IN 1 .. cardinality(p_tiers) LOOP
        parts := parts || format(
            '(SELECT -e.id AS newest, e.id, e.lexemes, e.doc_len FROM a2e_entries e'
            ' WHERE e.namespace = $7 AND e.tier = $8[%s] AND e.owner = $9[%s]'
            ' AND e.lexemes @@ $10 AND (e.expires_at IS NULL OR e.expires_at > $1)%s'
            ' ORDER BY -e.id LIMIT $2)', g, g, extra);
    END LOOP;
    -- no term held by more entries than the pool takes, or (functions version 8) the terms
    -- held by more but spread thin (matches^2 below pool x entries, the namespace's counts): a
    -- walk would read entries / matches rows a match until the pool is full, this read the
    -- matches only (6,250 of 100,000 entries holding the terms: 64,000 rows walked, 6,250
    -- read), so every match is read from the GIN index (one bitmap, the readable groups a
    -- filter) and the newest sorted out, on a prepared generic plan; at most sqrt(pool x
    -- entries) rows either way
    sparse := (NOT dense OR coalesce(matched, 0)::float8 ^ 2 < p_max::float8 * n)
              AND p_max IS NOT NULL AND cardinality(kept) <= 8 AND cardinality(p_keys) = 0;
    IF sparse THEN
        FOR g IN 1 .. cardinality(p_tiers) LOOP
            groups := groups || format('(e.tier = $8[%s] AND e.owner = $9[%s])', g, g);
        END LOOP;
        parts := ARRAY['(SELECT -e.id AS newest, e.id, e.lexemes, e.doc_len FROM a2e_entries e'
            ' WHERE e.lexemes @@ $10 AND e.namespace = $7 AND (' || array_to_string(groups, ' OR ')
            || ') AND (e.expires_at IS NULL OR e.expires_at > $1)' || extra || ')'];
    END IF;
    pool :=
        'SELECT array_agg(b.id ORDER BY b.bm25 DESC, b.id DESC),'
        ' array_agg(b.bm25 ORDER BY b.bm25 DESC, b.id DESC) FROM ('
        '   SELECT t.id, (' || array_to_string(score, ' + ') || ')::float8 AS bm25'
        '   FROM (SELECT p.id, 1.2::float8 * (0.25::float8 + 0.75::float8 * p.doc_len / $6)'
        '         AS norm, ' || array_to_string(tfs, ', ')
        || '     FROM (SELECT * FROM (' || array_to_string(parts, ' UNION ALL ')
        || ') x ORDER BY x.newest LIMIT $2) p OFFSET 0) t'
        '   ORDER BY 2 DESC, t.id DESC LIMIT $5) b';
    -- a small namespace, or one whose entries match the terms a quarter of the time or more:
    -- walked (at most ~4 rows read a match), on a prepared generic plan
    small := sparse OR (n <= 2000 OR n <= 4 * coalesce(matched, 0)) AND cardinality(kept) <= 8
             AND cardinality(p_keys) = 0;
    IF sparse THEN
        PERFORM set_config('enable_indexscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    ELSIF dense OR small THEN  -- dense and thick: the walk
        PERFORM set_config('enable_bitmapscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    IF small THEN
        -- (a2e_kw13_: 13 parameters since functions version 12, a name apart from the 12 of
        -- an earlier version's a2e_kw_ a session may hold, scripts/bench/bench_pg_keyword_query)
        stmt := 'a2e_kw13_' || left(md5(pool), 16);
        IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements s WHERE s.name = stmt) THEN
            EXECUTE format('PREPARE %I (float8, integer, text[], text[], integer, float8, text,'
                           ' text[], text[], tsquery, tsquery[], float8[], float8) AS %s', stmt,
                           pool);
        END IF;
        EXECUTE format('EXECUTE %I (%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L)', stmt,
                       p_now, p_max, p_keys, p_tags, p_limit, avgdl, p_ns, p_tiers, p_owners,
                       match, queries, idfs, p_as_of)
           INTO ids, scores;
    ELSE
        EXECUTE pool INTO ids, scores
          USING p_now, p_max, p_keys, p_tags, p_limit, avgdl, p_ns, p_tiers, p_owners,
                match::tsquery, queries, idfs, p_as_of;
    END IF;
    PERFORM set_config('enable_indexscan', idxs, true);
    IF ids IS NULL THEN
        PERFORM set_config('enable_bitmapscan', bitmaps, true),
                set_config('enable_seqscan', seqs, true);
        RETURN;
    END IF;
    -- (rows by id and walks from them: index scans only, whatever the estimates of the arrays)
    PERFORM set_config('enable_bitmapscan', 'off', true),
            set_config('enable_seqscan', 'off', true);
    -- the candidates' rows, best first, with the terms each holds; then the neighbours of the
    -- first p_near (each side a walk of a2e_entries_newest from the candidate)
    RETURN QUERY
        (SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                e.created_at, e.updated_at, e.id, c.bm25,
                ARRAY(SELECT x.t FROM unnest(kept, queries) WITH ORDINALITY AS x(t, q, i)
                       WHERE e.lexemes @@ x.q ORDER BY x.i),
                CASE WHEN c.i = 1 THEN kept END, NULL::bigint, NULL::bigint, e.valid_from,
                e.valid_until, NULL::bigint[], NULL::bigint, NULL::bigint
           FROM unnest(ids, scores) WITH ORDINALITY AS c(id, bm25, i)
           JOIN a2e_entries e ON e.id = c.id ORDER BY c.i)
        UNION ALL
        (SELECT r.tier, r.owner, CASE WHEN r.id = ANY(ids) THEN NULL ELSE r.key END,
                CASE WHEN r.id = ANY(ids) THEN NULL ELSE r.content END, r.tags, r.source,
                r.score, r.ttl, r.created_at, r.updated_at, r.id, NULL::float8, NULL::text[],
                NULL::text[], h.id, r.d, r.valid_from, r.valid_until, NULL::bigint[],
                NULL::bigint, NULL::bigint
           FROM (SELECT c.id, c.i, e.tier, e.owner FROM unnest(ids[1:greatest(p_near, 0)])
                        WITH ORDINALITY AS c(id, i) JOIN a2e_entries e ON e.id = c.id
                  WHERE p_span > 0) h
          CROSS JOIN LATERAL (
                SELECT o.*, 0 AS side, row_number() OVER (ORDER BY o.id DESC) AS d FROM (
                    SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                           e.created_at, e.updated_at, e.id, e.valid_from, e.valid_until
                      FROM a2e_entries e
                     WHERE e.namespace = p_ns AND e.tier = h.tier AND e.owner = h.owner
                       AND -e.id > -h.id AND (e.expires_at IS NULL OR e.expires_at > p_now)
                       AND (cardinality(p_keys) = 0 OR e.key = ANY(p_keys))
                       AND (cardinality(p_tags) = 0 OR e.tags @> p_tags)
                       AND (p_as_of IS NULL OR (e.valid_from IS NULL OR e.valid_from <= p_as_of)
                            AND (e.valid_until IS NULL OR e.valid_until > p_as_of))
                     ORDER BY -e.id LIMIT p_span) o
                UNION ALL
                SELECT y.*, 1, row_number() OVER (ORDER BY y.id) FROM (
                    SELECT e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,
                           e.created_at, e.updated_at, e.id, e.valid_from, e.valid_until
                      FROM a2e_entries e
                     WHERE e.namespace = p_ns AND e.tier = h.tier AND e.owner = h.owner
                       AND -e.id < -h.id AND (e.expires_at IS NULL OR e.expires_at > p_now)
                       AND (cardinality(p_keys) = 0 OR e.key = ANY(p_keys))
                       AND (cardinality(p_tags) = 0 OR e.tags @> p_tags)
                       AND (p_as_of IS NULL OR (e.valid_from IS NULL OR e.valid_from <= p_as_of)
                            AND (e.valid_until IS NULL OR e.valid_until > p_as_of))
                     ORDER BY -e.id DESC LIMIT p_span) y) r
          ORDER BY h.i, r.side, r.d);
    PERFORM set_config('enable_bitmapscan', bitmaps, true),
            set_config('enable_seqscan', seqs, true);
END $$;
