-- 13: client-supplied vectors (the store extension, docs/protocol.md "Store extensions").
-- `a2e_client_spaces`: the dimension of each (namespace, space), fixed by its first vectors.
-- `a2e_client_vectors`: one row an entry address (namespace, tier, owner, key hash): its
-- space, its unit float32 rows (little-endian, as SQLite keeps them) and the digest of the
-- content they were sent with. They are written by the host right after the entry's put, in a
-- statement of their own; a read joins them only while the entry's content still has that
-- digest, so vectors of an older content are never used, and deleting an entry deletes them.
CREATE TABLE a2e_client_spaces (
    namespace text NOT NULL,
    space text NOT NULL,
    dims integer NOT NULL,
    PRIMARY KEY (namespace, space)
);
CREATE TABLE a2e_client_vectors (
    namespace text NOT NULL,
    tier text NOT NULL,
    owner text NOT NULL,
    key_hash bytea NOT NULL,
    digest bytea NOT NULL,
    space text NOT NULL,
    vecs bytea NOT NULL,
    PRIMARY KEY (namespace, tier, owner, key_hash)
);
CREATE FUNCTION a2e_client_vectors_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM a2e_client_vectors v USING old_rows o
     WHERE v.namespace = o.namespace AND v.tier = o.tier AND v.owner = o.owner
       AND v.key_hash = a2e_key_hash(o.key);
    RETURN NULL;
END $$;
CREATE TRIGGER a2e_entries_client_vectors_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION a2e_client_vectors_gone();
