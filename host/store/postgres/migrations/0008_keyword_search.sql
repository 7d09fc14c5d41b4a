-- 8: a keyword search in one statement, bounded in a big namespace.
--
-- `a2e_terms` counts the entries of each namespace holding each term (document frequencies);
-- `a2e_search_terms` reads them for a query's terms and keeps the selective ones;
-- `a2e_keyword_search` then reads the pool of candidates (the newest matches the reader may
-- read, visibility first, at most p_max), scores them with BM25 as SQLite FTS5 does and returns
-- the best p_limit, in one call.

-- The newest entries of one (namespace, tier, owner) first: a query of common words walks it
-- and stops at the pool's size instead of reading every match. On -id, not id: the primary key
-- offers the order of id too, and the planner would walk it through every namespace's rows.
CREATE INDEX a2e_entries_newest ON a2e_entries (namespace, tier, owner, (-id));

-- The occurrences of a term in an entry, from ts_rank(lexemes, term, 0) (C, no row set to
-- build): an entry's lexemes hold one position a occurrence (1..tf, weight D = 0.1), for which
-- ts_rank is 0.1 * (1 + 1/4 + ... + 1/tf^2) / zeta(2); the tail zeta(2) - (1 + ... + 1/tf^2)
-- is 1 / (tf + 1/2) within 1 / (12 tf^3), so rounding gives tf exactly (0 when the term is
-- absent; tf <= 256, PostgreSQL's limit of positions, well within real's precision).
CREATE FUNCTION a2e_tf(p_rank real) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT round(1.0 / (1.64493406685 * (1.0 - 10.0 * p_rank::float8)) - 0.5) $$;

-- Every GIN scan reads the index's whole pending list: keep it short (4 MB by default), so a
-- query's candidates cost what their postings cost.
ALTER INDEX a2e_entries_lexemes SET (gin_pending_list_limit = 512);

-- How many entries of each namespace hold each lexeme (expired ones included until collected,
-- as SQLite's FTS index counts them): BM25's document frequencies read from an index instead of
-- counted through the GIN index (which costs a query a scan of every matching posting). Kept by
-- statement-level triggers, so a group of writes updates each (namespace, term) once; every
-- writer of a namespace's rows holds its lock, so these rows are never raced.
CREATE TABLE a2e_terms (
    namespace text NOT NULL,
    term text NOT NULL,
    docs bigint NOT NULL,
    PRIMARY KEY (namespace, term)
);

CREATE FUNCTION a2e_terms_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_terms AS t (namespace, term, docs)
    SELECT n.namespace, u.term, count(*) FROM new_rows n,
           unnest(tsvector_to_array(n.lexemes)) AS u(term)
     GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET docs = t.docs + excluded.docs;
    RETURN NULL;
END $$;

CREATE FUNCTION a2e_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE FUNCTION a2e_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER a2e_entries_terms_ai AFTER INSERT ON a2e_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_added();
CREATE TRIGGER a2e_entries_terms_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_removed();
CREATE TRIGGER a2e_entries_terms_au AFTER UPDATE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION a2e_terms_changed();

INSERT INTO a2e_terms (namespace, term, docs)
SELECT e.namespace, u.term, count(*) FROM a2e_entries e,
       unnest(tsvector_to_array(e.lexemes)) AS u(term) GROUP BY 1, 2;

-- The terms of p_terms to search in the namespace p_ns, in order, with how many entries hold
-- each. With p_cap > 0, terms held by more than p_cap entries are left out, the rarest (the
-- first of them) kept if every term is (as host.store.sqlite.ops.selective_terms).
CREATE FUNCTION a2e_search_terms(p_ns text, p_terms text[], p_cap integer)
RETURNS TABLE (term text, hits bigint) LANGUAGE sql STABLE AS $$
    WITH c AS MATERIALIZED (
        SELECT q.t, q.i, coalesce(x.docs, 0) AS h
          FROM unnest(p_terms) WITH ORDINALITY AS q(t, i)
          LEFT JOIN a2e_terms x ON x.namespace = p_ns AND x.term = q.t),
    k AS (
        SELECT c.t, c.i, c.h FROM c WHERE p_cap <= 0 OR c.h <= p_cap
        UNION ALL
        (SELECT c.t, c.i, c.h FROM c
          WHERE p_cap > 0 AND NOT EXISTS (SELECT 1 FROM c WHERE c.h <= p_cap)
          ORDER BY c.h, c.i LIMIT 1))
    SELECT k.t, k.h FROM k ORDER BY k.i
$$;

-- Keyword candidates of the namespace p_ns (scope lexeme p_scope) for p_terms, read as the
-- groups (p_tiers[g], p_owners[g]) may (live at p_now, holding every key of p_keys and every tag
-- of p_tags when given): the p_limit best by BM25 (k1 1.2, b 0.75, idf floored at 1e-6 over the
-- namespace's statistics: SQLite FTS5's bm25()), best first, ties by id. Only the newest p_max
-- readable matches are scored (NULL: all): visibility comes before that cap, so entries the
-- reader cannot read never take a place in it. Each row: the entry's columns, its id, BM25,
-- the searched terms it holds, and the terms searched (`a2e_search_terms`). The pool query is
-- planned with the match and the groups as literals; it walks the newest index when a term is
-- common (held by more entries than the pool takes) and reads the GIN index when all are rare.
CREATE FUNCTION a2e_keyword_search(
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
    extra text := '';
    parts text[] := '{}';
    tfs text[] := '{}';
    score text[] := '{}';
    held text[] := '{}';
    n double precision;
    avgdl double precision;
    dense boolean;
    bitmaps text;
    seqs text;
BEGIN
    SELECT array_agg(s.term ORDER BY s.ord), array_agg(s.hits ORDER BY s.ord) INTO kept, hits
      FROM a2e_search_terms(p_ns, p_terms, p_cap) WITH ORDINALITY AS s(term, hits, ord);
    IF kept IS NULL OR cardinality(p_tiers) = 0 THEN
        RETURN;
    END IF;
    SELECT greatest(u.entries, 1)::float8, greatest(u.tokens, 1)::float8 / greatest(u.entries, 1)
      INTO n, avgdl FROM a2e_usage u WHERE u.namespace = p_ns AND u.agent = '';
    n := coalesce(n, 1);
    avgdl := coalesce(avgdl, 1);
    match := quote_literal(p_scope) || ' & (' || (
        SELECT string_agg(quote_literal(t), ' | ') FROM unnest(kept) t) || ')';
    IF cardinality(p_keys) > 0 THEN
        extra := extra || ' AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT a2e_key_hash(k)'
                       || ' FROM unnest($3::text[]) k)) AND e.key = ANY($3::text[])';
    END IF;
    IF cardinality(p_tags) > 0 THEN
        extra := extra || ' AND e.tags @> $4::text[]';
    END IF;
    FOR g IN 1 .. cardinality(p_tiers) LOOP
        parts := parts || format(
            '(SELECT -e.id AS newest, e.id, e.lexemes, e.doc_len FROM a2e_entries e'
            ' WHERE e.namespace = %L AND e.tier = %L AND e.owner = %L'
            ' AND e.lexemes @@ %L::tsquery AND (e.expires_at IS NULL OR e.expires_at > $1)%s'
            ' ORDER BY -e.id LIMIT $2)',
            p_ns, p_tiers[g], p_owners[g], match, extra);
    END LOOP;
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
        'WITH pool AS MATERIALIZED (SELECT * FROM (' || array_to_string(parts, ' UNION ALL ')
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
