-- Which partitions of a queue a group's discovery scope held at its first
-- contact, by transaction visibility as 150_first_contact_snapshots.sql does for
-- queues: a push stamps its segment before it commits, so a partition created by
-- a push that began before the first discovery pop and committed after it holds
-- messages stamped before the scope's instant that the group never saw as
-- backlog, in a queue that was there (relabelled into the scope since, or
-- registered again after a group delete on it).
--
-- lanes.partitions.created_xid is the transaction that inserted the partition
-- row (NULL for rows from before this file); the default stamps the inserts of
-- every broker version alike. A partition whose creator is not visible in the
-- scope's first_contact_snapshot was not there at first contact
-- (newToScopeSQL in pop.go). Adding the column and then setting the
-- default leaves existing rows NULL without rewriting the table; pushes never
-- write it, so their partition updates stay HOT. Both ALTERs check the catalog
-- first: an ALTER of this hot table waits for every open reader of it, and holds
-- pushes back while it waits.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.partitions'::regclass AND attname = 'created_xid' AND NOT attisdropped) THEN
        ALTER TABLE lanes.partitions ADD COLUMN created_xid xid8;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'lanes.partitions'::regclass AND a.attname = 'created_xid'
          AND pg_get_expr(d.adbin, d.adrelid) = 'pg_current_xact_id()'
    ) THEN
        ALTER TABLE lanes.partitions ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
    END IF;
END
$$;
