-- The embedding queue's triggers and the client vectors' (host.store.postgres.vectors,
-- extensions).
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- New entries are queued for a vector, once an INSERT statement.
CREATE OR REPLACE FUNCTION a2e_entries_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2e_embed_queue AS q (entry_id, namespace)
    SELECT id, namespace FROM new_rows ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

-- A changed entry (content or tags) loses its vector and is queued for a new one, for every
-- UPDATE statement at once (was: a row trigger an entry).
CREATE OR REPLACE FUNCTION a2e_entries_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH c AS MATERIALIZED (
        SELECT n.id, n.namespace FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.content IS DISTINCT FROM n.content OR o.tags IS DISTINCT FROM n.tags),
    d AS (DELETE FROM a2e_vectors v USING c WHERE v.entry_id = c.id)
    INSERT INTO a2e_embed_queue AS q (entry_id, namespace) SELECT id, namespace FROM c ORDER BY id
    ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0;
    RETURN NULL;
END $$;

-- A queue row written without its namespace (by a host of a version before the queue kept it,
-- beside this one: its re-queueing of every entry) takes its entry's (migration 24; the
-- trigger runs only for such a row).
CREATE OR REPLACE FUNCTION a2e_embed_queue_namespace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.namespace := (SELECT e.namespace FROM a2e_entries e WHERE e.id = NEW.entry_id);
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION a2e_client_vectors_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM a2e_client_vectors v USING old_rows o
     WHERE v.namespace = o.namespace AND v.tier = o.tier AND v.owner = o.owner
       AND v.key_hash = a2e_key_hash(o.key);
    RETURN NULL;
END $$;

-- The sequence number of a queue row written again after its row was deleted while an
-- embedding worker may hold a claim on it (an entry stored with client vectors leaves the queue,
-- host.store.postgres.extensions.write_vectors): the database clock in microseconds, past any
-- number of the row before (those count changes from 1), so that worker's vector, of an older
-- text, is not written.
CREATE OR REPLACE FUNCTION a2e_queue_seq() RETURNS bigint LANGUAGE sql VOLATILE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;
