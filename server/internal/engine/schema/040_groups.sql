-- Consumer groups: a claim floor per (group, queue) so a pop looks only at
-- partitions written since the floor instead of every partition of the queue.
--
-- partition_writes.last_write_xid is the id of the transaction that last
-- advanced the partition's last_offset; every statement that moves last_offset
-- sets it, and copies last_offset and last_write_at there, in the same
-- statement. A pop stores in consumer_groups.claim_floor the smallest xid among
-- this group's partitions that still hold work, never above its snapshot's
-- xmin: every partition below the floor was fully consumed by the group when
-- the floor was taken, and a later write gets a larger xid. Anything that moves
-- a cursor backwards (seek, group delete) resets the floor and bumps
-- claim_epoch so a floor computed before the move is never stored.
--
-- The xid lives in its own narrow table because it is indexed: kept on
-- lanes.partitions, every push would rewrite the partition row with a new
-- entry in each of its four indexes instead of updating it in place (HOT).
-- The copies of last_offset and last_write_at let a claim judge a candidate
-- from this row and its cursor alone (lanes.partitions stays the authority).

CREATE TABLE IF NOT EXISTS lanes.partition_writes (
    partition_id   uuid PRIMARY KEY REFERENCES lanes.partitions (id) ON DELETE CASCADE,
    queue_id       uuid NOT NULL,
    last_write_xid xid8 NOT NULL,
    last_offset    bigint NOT NULL,
    last_write_at  timestamptz
);
CREATE INDEX IF NOT EXISTS partition_writes_queue_xid_idx ON lanes.partition_writes (queue_id, last_write_xid);

-- Every partition gets its row when it is created, whichever statement creates it.
CREATE OR REPLACE FUNCTION lanes.track_partition_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lanes.partition_writes (partition_id, queue_id, last_write_xid, last_offset, last_write_at)
    VALUES (NEW.id, NEW.queue_id, pg_current_xact_id(), NEW.last_offset, NEW.last_write_at);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER partitions_track_insert
    AFTER INSERT ON lanes.partitions
    FOR EACH ROW EXECUTE FUNCTION lanes.track_partition_insert();

-- Databases created before partition_writes kept the xid on lanes.partitions.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'lanes' AND table_name = 'partitions' AND column_name = 'last_write_xid') THEN
        INSERT INTO lanes.partition_writes (partition_id, queue_id, last_write_xid, last_offset, last_write_at)
        SELECT id, queue_id, last_write_xid, last_offset, last_write_at FROM lanes.partitions
        ON CONFLICT (partition_id) DO NOTHING;
        DROP TRIGGER IF EXISTS partitions_stamp_write ON lanes.partitions;
        DROP TRIGGER IF EXISTS partitions_stamp_insert ON lanes.partitions;
        DROP FUNCTION IF EXISTS lanes.stamp_partition_write();
        ALTER TABLE lanes.partitions DROP COLUMN last_write_xid;
    END IF;
END
$$;

-- Checked in the catalog first: pops read consumer_groups, and an ALTER waits
-- for every open reader of it and holds pops back while it waits.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.consumer_groups'::regclass AND attname = 'claim_floor' AND NOT attisdropped) THEN
        ALTER TABLE lanes.consumer_groups ADD COLUMN claim_floor xid8 NOT NULL DEFAULT '0';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.consumer_groups'::regclass AND attname = 'claim_epoch' AND NOT attisdropped) THEN
        ALTER TABLE lanes.consumer_groups ADD COLUMN claim_epoch bigint NOT NULL DEFAULT 0;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS consumer_groups_queue_idx ON lanes.consumer_groups (queue_id);
