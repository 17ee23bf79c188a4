-- The oldest broker schema version that may run against this database (see
-- MinPeerSchemaVersion in schema.go): a broker whose own version is lower
-- refuses to start, and one already running stops when it reads it. Brokers
-- only ever raise it, never lower it. It has its own table, so deleting the
-- lanes.schema_applied row to have the files applied again keeps it.
-- raised_by is the schema version of the broker that last raised it.
-- Brokers older than this file never read it: the guard holds from 140 on.
CREATE TABLE IF NOT EXISTS lanes.min_broker_version (
    id         integer PRIMARY KEY CHECK (id = 1),
    version    integer NOT NULL,
    raised_by  integer NOT NULL,
    raised_at  timestamptz NOT NULL
);
