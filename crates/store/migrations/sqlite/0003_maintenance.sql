-- Maintenance: leased jobs (compaction, snapshot expiry, ...) and per-scope policies.
-- Jobs keep no foreign key to tabulars: they stay as history after their table is dropped.
CREATE TABLE maintenance_jobs (
    id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL,
    table_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    -- queued, running, succeeded, failed
    status TEXT NOT NULL,
    priority BIGINT NOT NULL,
    trigger TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    max_attempts BIGINT NOT NULL,
    params TEXT NOT NULL,
    not_before_ms BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until_ms BIGINT,
    created_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT,
    finished_at_ms BIGINT,
    result TEXT,
    error TEXT
);
CREATE INDEX maintenance_jobs_due ON maintenance_jobs (status, not_before_ms);
CREATE INDEX maintenance_jobs_by_age ON maintenance_jobs (created_at_ms);
-- The last start per warehouse, for fair claiming.
CREATE INDEX maintenance_jobs_by_start ON maintenance_jobs (warehouse_id, started_at_ms);
-- At most one live job of a kind per table: enqueueing a duplicate fails atomically.
CREATE UNIQUE INDEX maintenance_jobs_live ON maintenance_jobs (table_id, kind)
    WHERE status IN ('queued', 'running');

-- The maintenance policy (JSON) set on a warehouse, namespace or table, by its id.
CREATE TABLE maintenance_policies (
    scope_id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL,
    policy TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
