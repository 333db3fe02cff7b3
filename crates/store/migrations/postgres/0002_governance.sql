-- Governance: principals and their credentials, token signing keys, roles, grants, audit.
CREATE TABLE principals (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    client_id TEXT NOT NULL UNIQUE,
    -- salted SHA-256 of the client secret; the secret itself is never stored
    secret_salt TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    is_root BIGINT NOT NULL,
    disabled BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE signing_keys (
    kid TEXT PRIMARY KEY,
    secret TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    retired_at_ms BIGINT
);

CREATE TABLE roles (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE principal_roles (
    principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    role_id TEXT NOT NULL REFERENCES roles (id) ON DELETE CASCADE,
    PRIMARY KEY (principal_id, role_id)
);

-- A privilege of a role on a securable. `scope` is the securable's path: '' for the server,
-- then the warehouse id, namespace levels and 't:<id>' for a table or view, separated by
-- 0x1F; a grant covers its scope and everything below it. `securable_id` is the warehouse,
-- namespace or table/view id, so grants follow renames and vanish with drops.
CREATE TABLE grants (
    role_id TEXT NOT NULL REFERENCES roles (id) ON DELETE CASCADE,
    privilege TEXT NOT NULL,
    scope TEXT COLLATE "C" NOT NULL,
    securable_kind TEXT NOT NULL,
    securable_id TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (role_id, scope, privilege)
);
CREATE INDEX grants_by_securable ON grants (securable_id);
CREATE INDEX grants_by_scope ON grants (scope);

-- Hash-chained audit records: hash = SHA-256(prev_hash || canonical record).
CREATE TABLE audit_log (
    seq BIGINT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    request_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    action TEXT NOT NULL,
    resource TEXT NOT NULL,
    decision TEXT NOT NULL,
    status BIGINT NOT NULL,
    client TEXT NOT NULL,
    details TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX audit_log_by_time ON audit_log (at_ms);
