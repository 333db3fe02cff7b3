-- Catalog state: warehouses, namespaces, tables and views, idempotency records.
CREATE TABLE warehouses (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    storage_profile TEXT NOT NULL,
    properties TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE namespaces (
    id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL REFERENCES warehouses (id),
    -- levels joined by the 0x1F unit separator
    name TEXT NOT NULL,
    parent TEXT NOT NULL,
    properties TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (warehouse_id, name)
);
CREATE INDEX namespaces_by_parent ON namespaces (warehouse_id, parent, name);

-- Tables and views share one name space per namespace.
CREATE TABLE tabulars (
    id TEXT PRIMARY KEY,
    warehouse_id TEXT NOT NULL REFERENCES warehouses (id),
    namespace_id TEXT NOT NULL REFERENCES namespaces (id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    metadata_location TEXT NOT NULL,
    location TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    UNIQUE (namespace_id, name)
);
CREATE INDEX tabulars_by_kind ON tabulars (namespace_id, kind, name);

CREATE TABLE idempotency_keys (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    status BIGINT NOT NULL,
    body TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at_ms);
