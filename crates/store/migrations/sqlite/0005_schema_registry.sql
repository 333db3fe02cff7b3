-- The schema registry: schemas under global ids, subjects' versions of them, and
-- compatibility levels ('' is the global level).
CREATE TABLE registry_schemas (
    id BIGINT PRIMARY KEY,
    schema_type TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    canonical TEXT NOT NULL,
    schema_text TEXT NOT NULL,
    refs TEXT NOT NULL
);
CREATE INDEX registry_schemas_fingerprint ON registry_schemas (fingerprint);
CREATE TABLE registry_versions (
    subject TEXT NOT NULL,
    version BIGINT NOT NULL,
    schema_id BIGINT NOT NULL REFERENCES registry_schemas (id),
    deleted BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (subject, version)
);
CREATE INDEX registry_versions_schema ON registry_versions (schema_id);
CREATE TABLE registry_config (
    subject TEXT PRIMARY KEY,
    compatibility TEXT NOT NULL
);
