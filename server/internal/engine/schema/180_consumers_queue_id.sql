-- Each cursor carries its queue (lanes.consumers.queue_id, the queue of its
-- partition, which never changes), indexed after its group, so the group
-- listings find a group's queues through lanes.consumers_group_queue_idx, a
-- probe per (group, queue), instead of a pass over every cursor joined to its
-- partition (0.2 s a page at 500,000 cursors). The index replaces
-- consumers_group_idx (consumer_group alone): it leads with the same column,
-- so it serves every filter on the group the old one did. Nothing updates
-- queue_id or consumer_group, so pops' and acks' cursor updates stay HOT.
--
-- Brokers from 180 on write queue_id in every insert. Older brokers (down to
-- MinPeerSchemaVersion, which stays where it is so a rolling upgrade keeps
-- them running) do not: a BEFORE INSERT trigger looks it up for their rows
-- only (WHEN queue_id IS NULL), never on the hot update path. It runs for
-- every row such an insert proposes, before ON CONFLICT drops the existing
-- ones (an older broker's seeding proposes each partition of the queue: 60 ms
-- against 17 ms at 10,000 partitions), and only while older brokers run. A
-- partition gone meanwhile fails as its foreign key did.
CREATE OR REPLACE FUNCTION lanes.consumers_fill_queue_id() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    SELECT p.queue_id INTO NEW.queue_id FROM lanes.partitions p WHERE p.id = NEW.partition_id;
    IF NEW.queue_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = format('partition %s of a new cursor does not exist', NEW.partition_id);
    END IF;
    RETURN NEW;
END $$;

-- The catalog is checked first, so a database that has it all takes no lock
-- on lanes.consumers (every pop and ack writes it). An older one is locked
-- before any work, so a lock wait that times out (see ApplySchema) wastes no
-- backfill; meanwhile every pop and ack waits: the backfill and the index
-- build read each cursor once (docs/operations.md, "Upgrading").
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'lanes.consumers'::regclass AND attname = 'queue_id' AND attnotnull AND NOT attisdropped)
       AND EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'lanes.consumers'::regclass AND tgname = 'consumers_fill_queue_id')
       AND to_regclass('lanes.consumers_group_queue_idx') IS NOT NULL
       AND to_regclass('lanes.consumers_group_idx') IS NULL THEN
        RETURN;
    END IF;
    LOCK TABLE lanes.consumers IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE lanes.consumers ADD COLUMN IF NOT EXISTS queue_id uuid;
    -- Before the index exists, so the backfill's updates can stay HOT.
    UPDATE lanes.consumers c SET queue_id = p.queue_id
        FROM lanes.partitions p WHERE p.id = c.partition_id AND c.queue_id IS NULL;
    ALTER TABLE lanes.consumers ALTER COLUMN queue_id SET NOT NULL;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'lanes.consumers'::regclass AND tgname = 'consumers_fill_queue_id') THEN
        CREATE TRIGGER consumers_fill_queue_id BEFORE INSERT ON lanes.consumers
            FOR EACH ROW WHEN (NEW.queue_id IS NULL) EXECUTE FUNCTION lanes.consumers_fill_queue_id();
    END IF;
    CREATE INDEX IF NOT EXISTS consumers_group_queue_idx ON lanes.consumers (consumer_group, queue_id);
    DROP INDEX IF EXISTS lanes.consumers_group_idx;
END
$$;
