-- History (host.store.postgres.history): the triggers that keep an entry's earlier versions.
-- (A change raises FUNCTIONS_VERSION: the rules are host/store/postgres/schema.py's.)

-- A store that changes an entry's content keeps the version it replaces ('updated', replaced
-- at the new version's updated_at, with its bounds: migration 23, functions version 14), then
-- the key's newest `keep` versions, and drops the namespace's versions older than the retention.
CREATE OR REPLACE FUNCTION a2e_history_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r a2e_history_retention;
BEGIN
    SELECT * INTO r FROM a2e_history_retention;
    INSERT INTO a2e_entry_history (namespace, tier, owner, key, agent, content, tags, source,
        score, created_at, updated_at, replaced_at, reason, valid_from, valid_until)
    VALUES (OLD.namespace, OLD.tier, OLD.owner, OLD.key, OLD.agent, OLD.content, OLD.tags,
        OLD.source, OLD.score, OLD.created_at, OLD.updated_at, NEW.updated_at, 'updated',
        OLD.valid_from, OLD.valid_until);
    PERFORM a2e_history_prune_key(OLD.namespace, OLD.tier, OLD.owner, OLD.key, r.keep);
    DELETE FROM a2e_entry_history WHERE namespace = OLD.namespace
       AND replaced_at < NEW.updated_at - r.seconds;
    RETURN NULL;
END $$;

-- The key's newest `p_keep` versions stay, the older go.
CREATE OR REPLACE FUNCTION a2e_history_prune_key(p_namespace text, p_tier text, p_owner text,
                                                 p_key text, p_keep integer)
RETURNS void LANGUAGE sql AS $$
    DELETE FROM a2e_entry_history WHERE namespace = p_namespace AND tier = p_tier
       AND owner = p_owner AND a2e_key_hash(key) = a2e_key_hash(p_key) AND id <= (
           SELECT h.id FROM a2e_entry_history h WHERE h.namespace = p_namespace
              AND h.tier = p_tier AND h.owner = p_owner
              AND a2e_key_hash(h.key) = a2e_key_hash(p_key)
            ORDER BY h.id DESC OFFSET p_keep LIMIT 1)
$$;

-- Deleted rows (a forget, an expiry, an eviction, another tool) take their key's history with
-- them, but those consolidation is retiring (held in a2e_history_hold).
CREATE OR REPLACE FUNCTION a2e_history_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM a2e_entry_history h USING old_rows o
     WHERE h.namespace = o.namespace AND h.tier = o.tier AND h.owner = o.owner
       AND a2e_key_hash(h.key) = a2e_key_hash(o.key)
       AND NOT EXISTS (SELECT 1 FROM a2e_history_hold k WHERE k.entry_id = o.id);
    RETURN NULL;
END $$;
