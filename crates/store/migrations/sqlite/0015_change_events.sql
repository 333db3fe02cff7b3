-- Change events (the outbox): one row per committed change, written by the change's own
-- transaction; `seq` is assigned in commit order under the writer's lock. Rows go once every
-- configured sink has delivered them.
CREATE TABLE change_events (
    seq BIGINT PRIMARY KEY,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    time_ms BIGINT NOT NULL,
    data TEXT NOT NULL
);

-- How far each sink has delivered, and which node publishes to it (a lease).
CREATE TABLE change_event_sinks (
    sink TEXT PRIMARY KEY,
    delivered_seq BIGINT NOT NULL,
    holder TEXT,
    lease_expires_at_ms BIGINT NOT NULL
);
