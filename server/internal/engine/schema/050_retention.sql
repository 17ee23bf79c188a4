-- Retention: how the sweeper finds the partitions with something to delete, and the
-- transaction-index entries waiting for their dedup window to pass. Idempotent.

-- A lower bound on the created_at of the partition's oldest segment. A new partition
-- takes now() (its first segment is written later in the same transaction); retention
-- moves it to the first surviving segment. Rows that predate this column start at
-- -infinity so the first sweep looks at them once. Pushes never write it, so their
-- partition updates stay HOT. Both ALTERs check the catalog first: an ALTER of this hot
-- table waits for every open reader of it, and holds pushes back while it waits.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.partitions'::regclass AND attname = 'oldest_segment_at' AND NOT attisdropped) THEN
        ALTER TABLE lanes.partitions ADD COLUMN oldest_segment_at timestamptz NOT NULL DEFAULT '-infinity';
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'lanes.partitions'::regclass AND a.attname = 'oldest_segment_at'
          AND pg_get_expr(d.adbin, d.adrelid) = 'now()'
    ) THEN
        ALTER TABLE lanes.partitions ALTER COLUMN oldest_segment_at SET DEFAULT now();
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS partitions_retention_idx ON lanes.partitions (queue_id, oldest_segment_at);

-- Transaction ids of deleted segments, kept until the dedup window has passed and then
-- purged from lanes.txns by primary key (no offset or time index on the hot txns table).
CREATE TABLE IF NOT EXISTS lanes.txns_expiry (
    id              bigserial PRIMARY KEY,
    partition_id    uuid NOT NULL,
    below_offset    bigint NOT NULL,
    purge_after     timestamptz NOT NULL,
    transaction_ids text[] NOT NULL
);
CREATE INDEX IF NOT EXISTS txns_expiry_due_idx ON lanes.txns_expiry (purge_after);

-- Status derivation and message deletion look dead letters up by address.
CREATE INDEX IF NOT EXISTS dlq_partition_offset_idx ON lanes.dlq (partition_id, message_offset);
CREATE INDEX IF NOT EXISTS dlq_partition_txn_idx ON lanes.dlq (partition_id, transaction_id);
