-- The digest of the schema files last applied (see ApplySchema): a boot that
-- finds its own files' digest here applies nothing, so it takes no locks.
CREATE TABLE IF NOT EXISTS lanes.schema_applied (
    id         integer PRIMARY KEY CHECK (id = 1),
    digest     text NOT NULL,
    applied_at timestamptz NOT NULL
);
