-- Which queues a group's discovery scope held at its first contact, by
-- transaction visibility rather than time: a push stamps its segment before it
-- commits, so a queue created by a push that began before the first discovery
-- pop and committed after it holds messages stamped before the scope's instant
-- that the group never saw as backlog.
--
-- lanes.queues.created_xid is the transaction that inserted the queue row
-- (NULL for rows from before this file); the default stamps the inserts of
-- every broker version alike. lanes.discovery_subscriptions.first_contact_snapshot
-- is the database snapshot of the pop that stored the scope subscription, taken
-- before its queue lookup (the default covers older brokers' inserts, taken a
-- statement later). A queue whose creator is not visible in it was not there at
-- first contact (newToScopeSQL in pop.go). Adding the columns and then setting the
-- defaults leaves existing rows NULL without rewriting the tables, and the
-- catalog is checked first so a database that has them takes no lock.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.queues'::regclass AND attname = 'created_xid' AND NOT attisdropped) THEN
        ALTER TABLE lanes.queues ADD COLUMN created_xid xid8;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'lanes.queues'::regclass AND a.attname = 'created_xid'
          AND pg_get_expr(d.adbin, d.adrelid) = 'pg_current_xact_id()'
    ) THEN
        ALTER TABLE lanes.queues ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.discovery_subscriptions'::regclass
                     AND attname = 'first_contact_snapshot' AND NOT attisdropped) THEN
        ALTER TABLE lanes.discovery_subscriptions ADD COLUMN first_contact_snapshot pg_snapshot;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'lanes.discovery_subscriptions'::regclass AND a.attname = 'first_contact_snapshot'
          AND pg_get_expr(d.adbin, d.adrelid) = 'pg_current_snapshot()'
    ) THEN
        ALTER TABLE lanes.discovery_subscriptions ALTER COLUMN first_contact_snapshot SET DEFAULT pg_current_snapshot();
    END IF;
END
$$;
