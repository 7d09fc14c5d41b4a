-- When each entry was last read over the wire (NULL: never), written in batches by
-- a2e_record_reads (host.store.postgres.read_times); and the index of eviction's order
-- (a2e_evict): an agent's entries by score, then by the later of their last write and last
-- read, then by row (docs/growth.md).
ALTER TABLE a2e_entries ADD COLUMN read_at double precision;
CREATE INDEX a2e_entries_value ON a2e_entries
    (namespace, agent, score, greatest(updated_at, coalesce(read_at, 0)), id);
