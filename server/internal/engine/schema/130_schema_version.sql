-- The schema's version (the highest file number) beside the digest (see
-- ApplySchema): files only add, so a broker whose files stop below the
-- recorded version finds its schema applied already and applies nothing. In a
-- mixed fleet each boot of the older version would otherwise apply its files
-- again, taking table locks that stall pushes behind any open reader.
-- version_digest is the digest of the files that recorded the version: a
-- broker older than this file rewrites digest alone, and a boot of the
-- recorded version after it still finds its files applied.
ALTER TABLE lanes.schema_applied ADD COLUMN IF NOT EXISTS version integer NOT NULL DEFAULT 0;
ALTER TABLE lanes.schema_applied ADD COLUMN IF NOT EXISTS version_digest text NOT NULL DEFAULT '';
