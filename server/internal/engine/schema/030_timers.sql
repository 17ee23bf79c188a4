-- Durable timers: a row pushes its frame to (queue, partition) when deliver_at
-- passes. Firing deletes the row and writes the push in one transaction, so a
-- timer fires exactly once however many brokers run the firing loop.
CREATE TABLE IF NOT EXISTS lanes.timers (
    queue          text NOT NULL,
    timer_key      text COLLATE "C" NOT NULL,
    partition      text NOT NULL DEFAULT 'Default',
    deliver_at     timestamptz NOT NULL,
    transaction_id text NOT NULL,
    -- promised at schedule time and used by the fired message
    message_id     uuid NOT NULL,
    -- the JSON payload bytes exactly as given (base64 on the wire)
    payload        bytea NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, timer_key)
);
CREATE INDEX IF NOT EXISTS timers_due_idx ON lanes.timers (deliver_at);
