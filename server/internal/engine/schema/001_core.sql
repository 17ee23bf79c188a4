-- Lanes storage: a segment log on PostgreSQL.
-- Applied at every boot under an advisory lock; every statement is idempotent.
-- Hot tables (segments, txns, consumers, dlq) are keyed by partition_id first so
-- they could be distributed by that column on a distributed PostgreSQL.

CREATE SCHEMA IF NOT EXISTS lanes;

CREATE TABLE IF NOT EXISTS lanes.queues (
    id                              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                            text NOT NULL UNIQUE,
    namespace                       text NOT NULL DEFAULT '',
    task                            text NOT NULL DEFAULT '',
    lease_time                      integer NOT NULL DEFAULT 60,
    retry_limit                     integer NOT NULL DEFAULT 3,
    dead_letter_queue               boolean NOT NULL DEFAULT true,
    dlq_after_max_retries           boolean NOT NULL DEFAULT true,
    delayed_processing              integer NOT NULL DEFAULT 0,
    window_buffer                   integer NOT NULL DEFAULT 0,
    retention_enabled               boolean NOT NULL DEFAULT false,
    retention_seconds               integer NOT NULL DEFAULT 0,
    completed_retention_seconds     integer NOT NULL DEFAULT 0,
    max_wait_time_seconds           integer NOT NULL DEFAULT 0,
    min_pop_wait_time               integer NOT NULL DEFAULT 0,
    encryption_enabled              boolean NOT NULL DEFAULT false,
    dedup_window_seconds            integer NOT NULL DEFAULT 3600,
    retention_sink_hold             text NOT NULL DEFAULT '',
    retention_sink_hold_max_seconds integer NOT NULL DEFAULT 604800,
    priority                        integer NOT NULL DEFAULT 0,
    ttl                             integer NOT NULL DEFAULT 3600,
    max_size                        integer NOT NULL DEFAULT 0,
    retry_delay                     integer NOT NULL DEFAULT 1000,
    -- bumped whenever a partition is added, so pops know when to seed cursors
    partition_version               bigint NOT NULL DEFAULT 0,
    created_at                      timestamptz NOT NULL DEFAULT now(),
    updated_at                      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS queues_namespace_task_idx ON lanes.queues (namespace, task);

-- One row per partition: the offset allocator (last_offset) and the retention floor (log_start).
CREATE TABLE IF NOT EXISTS lanes.partitions (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id      uuid NOT NULL REFERENCES lanes.queues (id) ON DELETE CASCADE,
    name          text NOT NULL,
    last_offset   bigint NOT NULL DEFAULT -1,
    log_start     bigint NOT NULL DEFAULT 0,
    last_write_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
) WITH (fillfactor = 70);

-- One row per push group per partition; frames holds the encoded messages
-- for offsets base_offset..end_offset (see frames.go). No foreign key: every
-- writer holds the partition row locked, and a per-row key check cost a push
-- of one-message requests about 12 µs a segment; DeleteQueue removes segments.
CREATE TABLE IF NOT EXISTS lanes.segments (
    partition_id uuid NOT NULL,
    base_offset  bigint NOT NULL,
    end_offset   bigint NOT NULL,
    created_at   timestamptz NOT NULL,
    frames       bytea NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
-- Both blocks check first, so a boot takes no exclusive lock on the table every
-- pop reads. The first drops the foreign key of databases created with it; the
-- second compresses frames with lz4 (a 100-message segment is ~11 KB, stored
-- compressed inline, and lz4 costs a fraction of pglz's CPU on each push and
-- pop; a server built without lz4 keeps pglz).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'segments_partition_id_fkey'
               AND conrelid = 'lanes.segments'::regclass) THEN
        ALTER TABLE lanes.segments DROP CONSTRAINT segments_partition_id_fkey;
    END IF;
END
$$;
DO $$
BEGIN
    IF (SELECT attcompression FROM pg_attribute
        WHERE attrelid = 'lanes.segments'::regclass AND attname = 'frames') <> 'l' THEN
        ALTER TABLE lanes.segments ALTER COLUMN frames SET COMPRESSION lz4;
    END IF;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;

-- Transaction-id index: dedup probe and ack resolution (transactionId -> offset).
-- Ids compare byte by byte (COLLATE "C", see 070_byte_order_ids.sql): only
-- equality matters, and a locale's collation cost 1-2.5 us per insert.
CREATE TABLE IF NOT EXISTS lanes.txns (
    partition_id   uuid NOT NULL,
    transaction_id text COLLATE "C" NOT NULL,
    message_offset bigint NOT NULL,
    message_id     uuid NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (partition_id, transaction_id)
);

-- The one-statement fast paths (push.go pushOneTripSQL, pop.go claimQuery on a
-- cached plan, transaction.go inOneTrip) check with this, inside the
-- statement, what the broker assumed: the error (SQLSTATE code) rolls the
-- transaction back before COMMIT, and the broker runs the work the general way.
CREATE OR REPLACE FUNCTION lanes.expect(holds boolean, code text, message text) RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    IF NOT holds THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    END IF;
    RETURN true;
END $$;

-- One row per (partition, consumer group): the cursor, the leased span and the retry budget.
CREATE TABLE IF NOT EXISTS lanes.consumers (
    partition_id     uuid NOT NULL REFERENCES lanes.partitions (id) ON DELETE CASCADE,
    consumer_group   text NOT NULL,
    committed        bigint NOT NULL DEFAULT -1,
    batch_end        bigint NOT NULL DEFAULT -1,
    lease_id         uuid,
    lease_expires_at timestamptz,
    retry_count      integer NOT NULL DEFAULT 0,
    total_consumed   bigint NOT NULL DEFAULT 0,
    last_consumed_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS consumers_lease_idx ON lanes.consumers (lease_id) WHERE lease_id IS NOT NULL;
-- Filters by group use consumers_group_queue_idx (180_consumers_queue_id.sql),
-- which replaced consumers_group_idx (consumer_group).

-- Where a consumer group starts on a queue, decided on first contact and stored.
CREATE TABLE IF NOT EXISTS lanes.consumer_groups (
    consumer_group          text NOT NULL,
    queue_id                uuid NOT NULL REFERENCES lanes.queues (id) ON DELETE CASCADE,
    subscription_mode       text NOT NULL,
    subscription_timestamp  timestamptz NOT NULL,
    seeded_version          bigint NOT NULL DEFAULT -1,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, queue_id)
);

CREATE TABLE IF NOT EXISTS lanes.dlq (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id    uuid NOT NULL,
    consumer_group  text NOT NULL,
    message_offset  bigint NOT NULL,
    message_id      uuid NOT NULL,
    transaction_id  text COLLATE "C" NOT NULL,
    trace_id        text,
    payload         jsonb,
    error           text,
    retry_count     integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    failed_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS dlq_partition_failed_idx ON lanes.dlq (partition_id, failed_at DESC);
CREATE INDEX IF NOT EXISTS dlq_failed_idx ON lanes.dlq (failed_at DESC);

-- Broker-wide switches (maintenance modes) shared by every broker on the database.
CREATE TABLE IF NOT EXISTS lanes.system_state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Cluster singletons (retention sweeper): one holder at a time.
CREATE TABLE IF NOT EXISTS lanes.leader_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
