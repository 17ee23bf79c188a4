-- Transactional key/value state (POST /api/v1/kv and the transaction `kv` rider).
-- An expired row (expires_at <= now()) is invisible to every read and counts as
-- absent for every write; the KV sweeper deletes such rows in bounded steps.
CREATE TABLE IF NOT EXISTS lanes.kv (
    namespace  text NOT NULL,
    -- byte order, so a prefix is one index range and paging by `after` is stable
    key        text COLLATE "C" NOT NULL,
    value      jsonb NOT NULL,
    version    bigint NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS kv_expires_idx ON lanes.kv (expires_at) WHERE expires_at IS NOT NULL;
