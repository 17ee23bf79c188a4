-- Partition ids are UUIDv7 (RFC 9562): their first 48 bits are the creation
-- time in milliseconds, so partitions created together are neighbours in
-- every index keyed by partition_id first (txns, segments, consumers,
-- partition_writes). With random ids, pushes to 100,000 new partitions wrote
-- to leaf pages spread over the whole of lanes.txns' primary key, old rows'
-- pages included, and after each checkpoint the first change to each of those
-- pages logs a full-page image. Existing partitions keep their ids: nothing
-- reads an id's version or order, only equality and a stable sort.
CREATE OR REPLACE FUNCTION lanes.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- A random (v4) id with its first 6 bytes replaced by the Unix time in
    -- milliseconds and its version nibble raised from 0100 to 0111 (bits 52
    -- and 53 of the bytea, counted from the low bit of byte 0); the variant
    -- bits stay those of v4.
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::int8) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- Only where the default differs: an ALTER of this hot table waits for every
-- push holding a partition row, and holds pushes back while it waits.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'lanes.partitions'::regclass AND a.attname = 'id'
          AND pg_get_expr(d.adbin, d.adrelid) = 'lanes.uuid_v7()'
    ) THEN
        ALTER TABLE lanes.partitions ALTER COLUMN id SET DEFAULT lanes.uuid_v7();
    END IF;
END
$$;
