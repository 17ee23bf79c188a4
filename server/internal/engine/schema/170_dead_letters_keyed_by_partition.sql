-- Dead letters are keyed by (partition_id, id), partition id first like the
-- other hot tables, so a distributed PostgreSQL could distribute lanes.dlq by
-- partition_id: it needs that column in the primary key and in every unique
-- index, and 001_core.sql keyed the table by id alone.
--
-- A replay by id alone (POST /api/v1/dlq/{id}/replay, on brokers of every
-- version) keeps an index on id. It is not unique: a unique index without
-- partition_id could not be distributed either. Ids are random
-- (gen_random_uuid()), and the key still holds each (partition, id) once.
--
-- The catalog is checked first, so a database that has both takes no lock on
-- lanes.dlq (every ack that files a dead letter writes it). An older database
-- gets its lock before any work, so a lock wait that times out (see
-- ApplySchema) wastes no index build; the two builds then read the table once
-- each, and the key swap is a catalog change: id is NOT NULL already, so
-- nothing is rewritten or scanned again. Meanwhile every statement on
-- lanes.dlq waits (docs/operations.md, "Upgrading").
DO $$
DECLARE
    keyed_by_partition boolean;
    old_key name;
BEGIN
    SELECT EXISTS (
        SELECT 1 FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE i.indrelid = 'lanes.dlq'::regclass AND i.indisprimary AND a.attname = 'partition_id'
    ) INTO keyed_by_partition;
    IF keyed_by_partition AND to_regclass('lanes.dlq_id_idx') IS NOT NULL THEN
        RETURN;
    END IF;
    LOCK TABLE lanes.dlq IN ACCESS EXCLUSIVE MODE;
    IF to_regclass('lanes.dlq_id_idx') IS NULL THEN
        CREATE INDEX dlq_id_idx ON lanes.dlq (id);
    END IF;
    IF NOT keyed_by_partition THEN
        CREATE UNIQUE INDEX dlq_partition_id_id_key ON lanes.dlq (partition_id, id);
        SELECT conname INTO old_key FROM pg_constraint WHERE conrelid = 'lanes.dlq'::regclass AND contype = 'p';
        IF old_key IS NOT NULL THEN
            EXECUTE format('ALTER TABLE lanes.dlq DROP CONSTRAINT %I', old_key);
        END IF;
        ALTER TABLE lanes.dlq ALTER COLUMN id SET NOT NULL,
            ADD CONSTRAINT dlq_pkey PRIMARY KEY USING INDEX dlq_partition_id_id_key;
    END IF;
END
$$;
