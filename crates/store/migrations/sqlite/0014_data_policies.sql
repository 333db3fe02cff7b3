-- Row and column policies: one per role and table. `masks` is a JSON array of column masks
-- by Iceberg field id; `row_filter` a SQL predicate over the table's columns. Removed with
-- their role (cascade) and with their table (`forget_securable`).
CREATE TABLE data_policies (
    role_id TEXT NOT NULL REFERENCES roles (id) ON DELETE CASCADE,
    table_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    row_filter TEXT,
    masks TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (role_id, table_id)
);
CREATE INDEX data_policies_by_table ON data_policies (table_id);
