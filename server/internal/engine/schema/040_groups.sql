-- Consumer groups: a claim floor per (group, queue) so a pop looks only at
-- partitions written since the floor instead of every partition of the queue.
--
-- partitions.last_write_xid is the id of the transaction that last advanced
-- last_offset (stamped by a trigger, so every write path keeps it). A pop
-- stores in consumer_groups.claim_floor the smallest xid among this group's
-- partitions that still hold work, never above its snapshot's xmin: every
-- partition below the floor was fully consumed by the group when the floor was
-- taken, and a later write gets a larger xid. Anything that moves a cursor
-- backwards (seek, group delete) resets the floor and bumps claim_epoch so a
-- floor computed before the move is never stored.

ALTER TABLE lanes.partitions ADD COLUMN IF NOT EXISTS last_write_xid xid8 NOT NULL DEFAULT '0';
CREATE INDEX IF NOT EXISTS partitions_queue_write_xid_idx ON lanes.partitions (queue_id, last_write_xid);

CREATE OR REPLACE FUNCTION lanes.stamp_partition_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_write_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER partitions_stamp_insert
    BEFORE INSERT ON lanes.partitions
    FOR EACH ROW EXECUTE FUNCTION lanes.stamp_partition_write();

CREATE OR REPLACE TRIGGER partitions_stamp_write
    BEFORE UPDATE OF last_offset ON lanes.partitions
    FOR EACH ROW WHEN (NEW.last_offset IS DISTINCT FROM OLD.last_offset)
    EXECUTE FUNCTION lanes.stamp_partition_write();

ALTER TABLE lanes.consumer_groups ADD COLUMN IF NOT EXISTS claim_floor xid8 NOT NULL DEFAULT '0';
ALTER TABLE lanes.consumer_groups ADD COLUMN IF NOT EXISTS claim_epoch bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS consumer_groups_queue_idx ON lanes.consumer_groups (queue_id);
