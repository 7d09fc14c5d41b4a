-- 5: the embedding queue and the model's identity (hybrid search shared by every host)
-- Entries whose vector is missing or stale, as SQLite's embed_queue: a row is added (or its
-- seq bumped and its claim released) when an entry is inserted or its content or tags
-- change. A host's embedding worker claims rows (claimed_until, FOR UPDATE SKIP LOCKED,
-- so two hosts never claim the same row and a crashed host's claims lapse), embeds them
-- outside any transaction and writes the vector only if seq did not move meanwhile.
CREATE TABLE a2e_embed_queue (
    entry_id bigint PRIMARY KEY REFERENCES a2e_entries (id) ON DELETE CASCADE,
    seq bigint NOT NULL DEFAULT 1,
    claimed_until double precision NOT NULL DEFAULT 0
);
CREATE INDEX a2e_embed_queue_claim ON a2e_embed_queue (claimed_until, entry_id);
INSERT INTO a2e_embed_queue (entry_id)
    SELECT id FROM a2e_entries e
     WHERE NOT EXISTS (SELECT 1 FROM a2e_vectors v WHERE v.entry_id = e.id);

CREATE FUNCTION a2e_embed_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_embed_queue AS q (entry_id) VALUES (new.id)
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;
CREATE TRIGGER a2e_entries_embed_ai AFTER INSERT ON a2e_entries
    FOR EACH ROW EXECUTE FUNCTION a2e_embed_enqueue();
CREATE TRIGGER a2e_entries_embed_au AFTER UPDATE OF content, tags ON a2e_entries
    FOR EACH ROW WHEN (old.content IS DISTINCT FROM new.content
                       OR old.tags IS DISTINCT FROM new.tags)
    EXECUTE FUNCTION a2e_embed_enqueue();

-- name -> value: 'model' and 'dim' of the embedder the stored vectors belong to
CREATE TABLE a2e_search_meta (name text PRIMARY KEY, value text NOT NULL);
