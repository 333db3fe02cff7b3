-- `floe migrate`'s record of each source table of each migration (JSON state it owns).
CREATE TABLE migration_tables (
    migration TEXT NOT NULL,
    source TEXT NOT NULL,
    wave BIGINT NOT NULL,
    state TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (migration, source)
);
