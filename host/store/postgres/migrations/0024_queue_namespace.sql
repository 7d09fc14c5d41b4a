-- The embedding queue keeps each queued entry's namespace (its entry's, which never changes),
-- indexed with the entry's id: a worker claims the entries of the namespace a query waits for
-- (host/store/postgres/vectors.py, claim_namespace_vectors) through that index, oldest first,
-- and counts what is left of them, instead of joining the queue to the entries (a scan of the
-- smaller of the two: the namespace's entries or the whole queue, another tenant's backlog
-- included). The queue's writers give it (functions/vectors.sql, puts.sql,
-- Vectors._requeue); a row written without it (by a host of an earlier version beside this
-- one) takes its entry's, a trigger that runs only for such a row.
ALTER TABLE a2e_embed_queue ADD COLUMN namespace text;
UPDATE a2e_embed_queue q SET namespace = e.namespace FROM a2e_entries e WHERE e.id = q.entry_id;
-- Its body is the folder's (functions/vectors.sql).
CREATE FUNCTION a2e_embed_queue_namespace() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER a2e_embed_queue_namespace_bi BEFORE INSERT ON a2e_embed_queue
    FOR EACH ROW WHEN (NEW.namespace IS NULL) EXECUTE FUNCTION a2e_embed_queue_namespace();
ALTER TABLE a2e_embed_queue ALTER COLUMN namespace SET NOT NULL;
CREATE INDEX a2e_embed_queue_namespace ON a2e_embed_queue (namespace, entry_id);
