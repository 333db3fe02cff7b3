-- Soft delete: a table or view dropped in a warehouse that keeps dropped entities moves here,
-- out of `tabulars` (so its name is free at once), with everything needed to put it back:
-- its id (its grants and maintenance policy stay keyed by it), its namespace by id and by
-- name, its metadata and location. `purge_requested` says whether its files go when it
-- expires; its purge job is queued in the same transaction as the drop.
CREATE TABLE dropped_tabulars (
    id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL REFERENCES warehouses (id),
    namespace_id TEXT NOT NULL,
    -- levels joined by the 0x1F unit separator, as in `namespaces.name`
    namespace_name TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    metadata_location TEXT NOT NULL,
    location TEXT COLLATE "C" NOT NULL,
    created_at_ms BIGINT NOT NULL,
    dropped_at_ms BIGINT NOT NULL,
    dropped_by TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    purge_requested BIGINT NOT NULL
);
CREATE INDEX dropped_tabulars_by_namespace ON dropped_tabulars (warehouse_id, namespace_name, name);
-- Locations of dropped tabulars still hold their files: new locations must not overlap them.
CREATE INDEX dropped_tabulars_by_location ON dropped_tabulars (warehouse_id, location);

-- Deletion protection set on a warehouse, namespace, table or view, by its id.
CREATE TABLE deletion_protection (
    securable_id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL,
    securable_kind TEXT NOT NULL,
    set_by TEXT NOT NULL,
    set_at_ms BIGINT NOT NULL
);
CREATE INDEX deletion_protection_by_warehouse ON deletion_protection (warehouse_id);
