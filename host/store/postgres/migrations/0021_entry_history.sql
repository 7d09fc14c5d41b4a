-- History (host/store/postgres/history.py): the earlier versions of entries and the entries
-- consolidation on write retired. One row a version no longer current; its key's history is
-- read and bounded through the (namespace, tier, owner, key hash, id) index.
CREATE TABLE a2e_entry_history (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL,
    tier text NOT NULL,
    owner text NOT NULL,
    key text NOT NULL,
    agent text NOT NULL,
    content text NOT NULL,
    tags text[] NOT NULL,
    source text NOT NULL,
    score double precision NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    replaced_at double precision NOT NULL,
    reason text NOT NULL,
    by_key text,
    similarity double precision
);
CREATE INDEX a2e_entry_history_key ON a2e_entry_history
    (namespace, tier, owner, a2e_key_hash(key), id);
CREATE INDEX a2e_entry_history_age ON a2e_entry_history (namespace, replaced_at);
CREATE INDEX a2e_entry_history_retired ON a2e_entry_history (namespace, id)
    WHERE reason = 'superseded';
-- The retention the triggers apply (the host sets it from its `history` settings). One row.
CREATE TABLE a2e_history_retention (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    keep integer NOT NULL,
    seconds double precision NOT NULL,
    max_retired integer NOT NULL
);
INSERT INTO a2e_history_retention (keep, seconds, max_retired) VALUES (10, 2592000, 10000);
-- The entry rows consolidation is retiring: their delete keeps their key's history.
CREATE TABLE a2e_history_hold (entry_id bigint PRIMARY KEY);

-- Their functions' bodies: functions/history.sql.
CREATE FUNCTION a2e_history_updated() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION a2e_history_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
-- a row trigger, fired only by a change of content (a touch, a TTL refresh and a store of the
-- same content fire nothing); the delete trigger once a statement
CREATE TRIGGER a2e_entries_history_au AFTER UPDATE OF content ON a2e_entries
    FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content)
    EXECUTE FUNCTION a2e_history_updated();
CREATE TRIGGER a2e_entries_history_ad AFTER DELETE ON a2e_entries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION a2e_history_deleted();
