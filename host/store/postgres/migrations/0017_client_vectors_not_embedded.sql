-- 17: entries stored with client vectors are not embedded by the host (as on SQLite): the ones
-- stored before leave the embedding queue and lose a vector the host computed for them, and
-- client vectors of a content their entry no longer holds (never read) go. From here on the
-- put functions and the host keep it so (functions.sql, host.store.postgres.extensions).
DELETE FROM a2e_client_vectors c WHERE NOT EXISTS (
    SELECT 1 FROM a2e_entries e
     WHERE e.namespace = c.namespace AND e.tier = c.tier AND e.owner = c.owner
       AND a2e_key_hash(e.key) = c.key_hash
       AND sha256(convert_to(e.content, 'UTF8')) = c.digest);
DELETE FROM a2e_embed_queue q USING a2e_entries e, a2e_client_vectors c
 WHERE q.entry_id = e.id AND c.namespace = e.namespace AND c.tier = e.tier
   AND c.owner = e.owner AND c.key_hash = a2e_key_hash(e.key);
DELETE FROM a2e_vectors v USING a2e_entries e, a2e_client_vectors c
 WHERE v.entry_id = e.id AND c.namespace = e.namespace AND c.tier = e.tier
   AND c.owner = e.owner AND c.key_hash = a2e_key_hash(e.key);
