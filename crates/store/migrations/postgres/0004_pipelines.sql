-- Stream pipelines: a definition (JSON) and the lease of the node running it.
CREATE TABLE pipelines (
    name TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    owner TEXT,
    lease_until_ms BIGINT
);
