-- The JWT subject of the token that scheduled a timer, stamped on the message
-- the timer pushes when it fires (as a plain push stamps its token's subject);
-- NULL when auth is off or for timers scheduled before this column. Checked in
-- the catalog first, so a database that has it takes no lock on lanes.timers
-- (the firing loop and every schedule use it).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.timers'::regclass AND attname = 'producer_sub' AND NOT attisdropped) THEN
        ALTER TABLE lanes.timers ADD COLUMN producer_sub text;
    END IF;
END
$$;
