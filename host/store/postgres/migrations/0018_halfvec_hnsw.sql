-- 18: the host's HNSW indexes on halfvec (16-bit floats) instead of vector: each index
-- a2e_vectors_hnsw_<dim> on embedding::vector(<dim>) is rebuilt as a2e_vectors_hnsw_half_<dim>
-- on embedding::halfvec(<dim>) and dropped (docs/postgres.md, "Vectors"; the figures in
-- docs/benchmarks.md). The stored vectors stay real[]; only the index and the order of a
-- query (host.store.postgres.vectors.nearest_vectors) take the cast. Nothing to do without
-- pgvector or with one before 0.7 (no halfvec: the hosts keep the vector index).
DO $$
DECLARE
    r record;
    d integer;
BEGIN
    IF to_regtype('halfvec') IS NULL THEN
        RETURN;
    END IF;
    FOR r IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = 'a2e_vectors'::regclass
                AND c.relname ~ '^a2e_vectors_hnsw_[0-9]+$' ORDER BY c.relname LOOP
        d := substring(r.relname FROM '[0-9]+$')::integer;
        IF d <= 4000 THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS a2e_vectors_hnsw_half_%s ON a2e_vectors'
                           ' USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops)'
                           ' WHERE dim = %s', d, d, d);
            EXECUTE format('DROP INDEX %I', r.relname);
        END IF;
    END LOOP;
END $$;
