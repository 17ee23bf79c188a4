-- Where a consumer group starts on the queues of a discovery scope (the
-- namespace and task a pop without a queue name selects on; '' = any),
-- decided on the group's first discovery pop of that scope and stored. A queue
-- the group meets in the scope later is registered with this mode and instant,
-- not the later pop's, so a queue created after the group subscribed delivers
-- everything pushed to it since. Idempotent.
CREATE TABLE IF NOT EXISTS lanes.discovery_subscriptions (
    consumer_group          text NOT NULL,
    namespace               text NOT NULL,
    task                    text NOT NULL,
    subscription_mode       text NOT NULL,
    subscription_timestamp  timestamptz NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, namespace, task)
);
