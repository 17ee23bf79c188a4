-- Transaction ids are compared for equality only, so their indexes use the C
-- collation (byte order). In a database created with a locale (en_US.UTF-8 on
-- most installs) the default collation made every txns insert and dedup probe
-- call strcoll: 1-2.5 us more per pushed message than memcmp. Equality is the
-- same under both (PostgreSQL's deterministic collations break ties by bytes),
-- so nothing a client sees changes. Databases created before this file get
-- their columns converted once; the indexes on them are rebuilt under an
-- ACCESS EXCLUSIVE lock, which takes as long as a REINDEX of txns.
DO $$
DECLARE
    target record;
BEGIN
    FOR target IN
        SELECT c.relname AS table_name, a.attname AS column_name
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'lanes'
          AND (c.relname, a.attname) IN (('txns', 'transaction_id'), ('dlq', 'transaction_id'))
          AND a.attcollation <> (SELECT oid FROM pg_collation WHERE collname = 'C' AND collnamespace = 'pg_catalog'::regnamespace)
    LOOP
        EXECUTE format('ALTER TABLE lanes.%I ALTER COLUMN %I TYPE text COLLATE "C"', target.table_name, target.column_name);
    END LOOP;
END
$$;
