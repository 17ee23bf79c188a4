-- A payload is any JSON, and JSON may escape a NUL character ("\u0000"),
-- which jsonb refuses. A dead letter keeps such a payload's text here (its
-- jsonb payload stays NULL), so filing it cannot fail: a failing filing would
-- leave the poison message redelivered and refused for ever.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lanes.dlq'::regclass AND attname = 'payload_text' AND NOT attisdropped) THEN
        ALTER TABLE lanes.dlq ADD COLUMN payload_text text;
    END IF;
END
$$;
