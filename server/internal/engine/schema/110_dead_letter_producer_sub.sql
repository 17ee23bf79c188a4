-- The JWT subject of the message's producer (its frame's producerSub), kept
-- when the message is dead-lettered, so a replay pushes it under the same
-- producerSub and the dead-letter listing shows it; NULL when auth was off or
-- for dead letters filed before this column. Checked in the catalog first, so
-- a database that has it takes no lock on lanes.dlq (every ack that files a
-- dead letter writes it).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.dlq'::regclass AND attname = 'producer_sub' AND NOT attisdropped) THEN
        ALTER TABLE lanes.dlq ADD COLUMN producer_sub text;
    END IF;
END
$$;
