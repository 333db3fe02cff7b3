-- Per-tenant limits (JSON), by warehouse id. No foreign key: limits of a dropped warehouse
-- are no longer listed (the listing joins warehouses) and cost nothing.
CREATE TABLE tenant_limits (
    warehouse_id TEXT PRIMARY KEY,
    limits TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
