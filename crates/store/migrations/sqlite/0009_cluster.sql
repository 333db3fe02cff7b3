-- A cluster's shared settings (its secret) and the workers that run distributed queries'
-- tasks, each row refreshed by the worker's heartbeat.
CREATE TABLE cluster_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE cluster_workers (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    version TEXT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    load_average DOUBLE PRECISION NOT NULL DEFAULT 0
);
