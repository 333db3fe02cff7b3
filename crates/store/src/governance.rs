//! `GovernanceStore` over SQL.

use async_trait::async_trait;
use floe_catalog::governance::{
    GovernanceStore, Principal, PrincipalCredentials, PrincipalKind, SigningKey,
};
use floe_catalog::{CatalogError, Result};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_unique_violation, query_error};
use crate::now_ms;
use crate::{SqlStore, StoreError};

const PRINCIPAL_COLUMNS: &str =
    "id, name, kind, client_id, is_root, disabled, created_at_ms, secret_salt, secret_hash";

fn principal_from_row(row: &AnyRow) -> Result<Principal> {
    let id: String = row.get("id");
    let kind: String = row.get("kind");
    Ok(Principal {
        id: Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt {
            what: "principal id",
            detail: e.to_string(),
        })?,
        name: row.get("name"),
        kind: PrincipalKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            what: "principal kind",
            detail: kind.clone(),
        })?,
        client_id: row.get("client_id"),
        is_root: row.get::<i64, _>("is_root") != 0,
        disabled: row.get::<i64, _>("disabled") != 0,
        created_at_ms: row.get("created_at_ms"),
    })
}

fn credentials_from_row(row: &AnyRow) -> Result<PrincipalCredentials> {
    Ok(PrincipalCredentials {
        principal: principal_from_row(row)?,
        secret_salt: row.get("secret_salt"),
        secret_hash: row.get("secret_hash"),
    })
}

impl SqlStore {
    async fn one_principal(&self, filter: &str, value: String) -> Result<Option<AnyRow>> {
        sqlx::query(&format!(
            "SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE {filter}"
        ))
        .bind(value)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error)
    }
}

#[async_trait]
impl GovernanceStore for SqlStore {
    async fn create_principal(&self, record: &PrincipalCredentials) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        let p = &record.principal;
        sqlx::query(
            "INSERT INTO principals (id, name, kind, client_id, secret_salt, secret_hash, is_root, \
             disabled, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(p.id.to_string())
        .bind(&p.name)
        .bind(p.kind.as_str())
        .bind(&p.client_id)
        .bind(&record.secret_salt)
        .bind(&record.secret_hash)
        .bind(p.is_root as i64)
        .bind(p.disabled as i64)
        .bind(p.created_at_ms)
        .bind(p.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CatalogError::AlreadyExists {
                    error_type: "AlreadyExistsException",
                    message: format!("Principal already exists: {}", p.name),
                }
            } else {
                query_error(e)
            }
        })?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn get_principal(&self, id: Uuid) -> Result<Option<Principal>> {
        self.one_principal("id = $1", id.to_string())
            .await?
            .as_ref()
            .map(principal_from_row)
            .transpose()
    }

    async fn get_principal_by_name(&self, name: &str) -> Result<Option<Principal>> {
        self.one_principal("name = $1", name.to_string())
            .await?
            .as_ref()
            .map(principal_from_row)
            .transpose()
    }

    async fn get_credentials_by_client_id(
        &self,
        client_id: &str,
    ) -> Result<Option<PrincipalCredentials>> {
        self.one_principal("client_id = $1", client_id.to_string())
            .await?
            .as_ref()
            .map(credentials_from_row)
            .transpose()
    }

    async fn list_principals(&self) -> Result<Vec<Principal>> {
        sqlx::query(&format!(
            "SELECT {PRINCIPAL_COLUMNS} FROM principals ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(principal_from_row)
        .collect()
    }

    async fn root_principal(&self) -> Result<Option<Principal>> {
        sqlx::query(&format!(
            "SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE is_root = 1"
        ))
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error)?
        .as_ref()
        .map(principal_from_row)
        .transpose()
    }

    async fn set_credentials(
        &self,
        id: Uuid,
        client_id: &str,
        salt: &str,
        hash: &str,
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let updated = sqlx::query(
            "UPDATE principals SET client_id = $1, secret_salt = $2, secret_hash = $3, updated_at_ms = $4 \
             WHERE id = $5",
        )
        .bind(client_id)
        .bind(salt)
        .bind(hash)
        .bind(now_ms())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CatalogError::already_exists(format!("client id {client_id} is taken"))
            } else {
                query_error(e)
            }
        })?
        .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(updated == 1)
    }

    async fn set_disabled(&self, id: Uuid, disabled: bool) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let updated =
            sqlx::query("UPDATE principals SET disabled = $1, updated_at_ms = $2 WHERE id = $3")
                .bind(disabled as i64)
                .bind(now_ms())
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?
                .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(updated == 1)
    }

    async fn list_signing_keys(&self) -> Result<Vec<SigningKey>> {
        let rows =
            sqlx::query("SELECT kid, secret, created_at_ms, retired_at_ms FROM signing_keys")
                .fetch_all(&self.pool)
                .await
                .map_err(query_error)?;
        rows.iter()
            .map(|row| {
                let secret: String = row.get("secret");
                Ok(SigningKey {
                    kid: row.get("kid"),
                    secret: hex::decode(&secret).map_err(|e| StoreError::Corrupt {
                        what: "signing key",
                        detail: e.to_string(),
                    })?,
                    created_at_ms: row.get("created_at_ms"),
                    retired_at_ms: row.get("retired_at_ms"),
                })
            })
            .collect()
    }

    async fn insert_signing_key(&self, key: &SigningKey) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query("INSERT INTO signing_keys (kid, secret, created_at_ms, retired_at_ms) VALUES ($1, $2, $3, NULL)")
            .bind(&key.kid)
            .bind(hex::encode(&key.secret))
            .bind(key.created_at_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn retire_signing_keys_before(&self, kid: &str, at_ms: i64) -> Result<u64> {
        let mut tx = self.write().await.map_err(query_error)?;
        let result = sqlx::query(
            "UPDATE signing_keys SET retired_at_ms = $1 WHERE kid <> $2 AND retired_at_ms IS NULL \
             AND created_at_ms < $3",
        )
        .bind(now_ms())
        .bind(kid)
        .bind(at_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(result)
    }
}

mod grants {
    use async_trait::async_trait;
    use floe_catalog::governance::authz::{GrantRecord, GrantStore, Privilege, Securable};
    use floe_catalog::governance::policies::DataPolicy;
    use floe_catalog::{CatalogError, Result};
    use sqlx::Row;
    use uuid::Uuid;

    use crate::SqlStore;
    use crate::error::{is_foreign_key_violation, is_unique_violation, query_error};

    fn no_such_role(name: &str) -> CatalogError {
        CatalogError::NotFound {
            error_type: "NoSuchRoleException",
            message: format!("Role does not exist: {name}"),
        }
    }

    impl SqlStore {
        async fn role_id(&self, name: &str) -> Result<String> {
            let mut conn = self.pool.acquire().await.map_err(query_error)?;
            role_id_in(&mut conn, name).await
        }
    }

    /// The id of role `name`, read on `conn` (a write transaction's, where it matters).
    async fn role_id_in(conn: &mut sqlx::AnyConnection, name: &str) -> Result<String> {
        sqlx::query("SELECT id FROM roles WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(query_error)?
            .map(|r| r.get::<String, _>("id"))
            .ok_or_else(|| no_such_role(name))
    }

    /// The change event of a grant or revoke.
    fn grant_event(
        kind: &str,
        role: &str,
        privilege: Privilege,
        securable: &Securable,
    ) -> floe_catalog::events::NewEvent {
        floe_catalog::events::NewEvent {
            kind: format!("grant.{kind}"),
            subject: format!("role/{role}"),
            data: serde_json::json!({
                "role": role, "privilege": privilege.as_str(),
                "securable-kind": securable.kind, "securable-id": securable.id,
            }),
        }
    }

    /// A role's own change (`role.created`, `role.deleted`), or a principal's membership of it
    /// (`role.member-added`, `role.member-removed`, with the principal's id).
    fn role_event(
        kind: &str,
        role: &str,
        principal: Option<Uuid>,
    ) -> floe_catalog::events::NewEvent {
        let mut data = serde_json::json!({ "role": role });
        if let Some(principal) = principal {
            data["principal-id"] = principal.to_string().into();
        }
        floe_catalog::events::NewEvent {
            kind: format!("role.{kind}"),
            subject: format!("role/{role}"),
            data,
        }
    }

    #[async_trait]
    impl GrantStore for SqlStore {
        async fn principal_grants(&self, principal: Uuid) -> Result<Vec<(String, Privilege)>> {
            let rows = sqlx::query(
                "SELECT g.scope, g.privilege FROM grants g \
                 JOIN principal_roles pr ON pr.role_id = g.role_id WHERE pr.principal_id = $1",
            )
            .bind(principal.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
            Ok(rows
                .iter()
                .filter_map(|r| {
                    let privilege = Privilege::parse(&r.get::<String, _>("privilege"))?;
                    Some((r.get::<String, _>("scope"), privilege))
                })
                .collect())
        }

        async fn create_role(&self, name: &str) -> Result<Uuid> {
            let mut tx = self.write().await.map_err(query_error)?;
            let id = Uuid::now_v7();
            sqlx::query("INSERT INTO roles (id, name, created_at_ms) VALUES ($1, $2, $3)")
                .bind(id.to_string())
                .bind(name)
                .bind(floe_catalog::clock::now_ms())
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        CatalogError::already_exists(format!("Role already exists: {name}"))
                    } else {
                        query_error(e)
                    }
                })?;
            tx.emit(Some(role_event("created", name, None)));
            tx.commit().await.map_err(query_error)?;
            Ok(id)
        }

        async fn delete_role(&self, name: &str) -> Result<bool> {
            let mut tx = self.write().await.map_err(query_error)?;
            let Some(row) = sqlx::query("SELECT id FROM roles WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?
            else {
                return Ok(false);
            };
            let id: String = row.get("id");
            for sql in [
                "DELETE FROM grants WHERE role_id = $1",
                "DELETE FROM data_policies WHERE role_id = $1",
                "DELETE FROM principal_roles WHERE role_id = $1",
                "DELETE FROM roles WHERE id = $1",
            ] {
                sqlx::query(sql)
                    .bind(&id)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error)?;
            }
            // Its grants, policies and memberships go with it.
            tx.emit(Some(role_event("deleted", name, None)));
            tx.commit().await.map_err(query_error)?;
            Ok(true)
        }

        async fn list_roles(&self) -> Result<Vec<String>> {
            Ok(sqlx::query("SELECT name FROM roles ORDER BY name")
                .fetch_all(&self.pool)
                .await
                .map_err(query_error)?
                .iter()
                .map(|r| r.get("name"))
                .collect())
        }

        async fn assign_role(&self, role: &str, principal: Uuid) -> Result<()> {
            // Looked up in the transaction that inserts, so a concurrent delete of the role
            // is a 404, not a foreign-key failure.
            let mut tx = self.write().await.map_err(query_error)?;
            let role_id = role_id_in(&mut tx, role).await?;
            let added = sqlx::query(
                "INSERT INTO principal_roles (principal_id, role_id) VALUES ($1, $2) \
                 ON CONFLICT (principal_id, role_id) DO NOTHING",
            )
            .bind(principal.to_string())
            .bind(role_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    CatalogError::NotFound {
                        error_type: "NoSuchRoleException",
                        message: format!("role {role} or the principal no longer exists"),
                    }
                } else {
                    query_error(e)
                }
            })?
            .rows_affected()
                == 1;
            if added {
                tx.emit(Some(role_event("member-added", role, Some(principal))));
            }
            tx.commit().await.map_err(query_error)?;
            Ok(())
        }

        async fn unassign_role(&self, role: &str, principal: Uuid) -> Result<bool> {
            let role_id = self.role_id(role).await?;
            let mut tx = self.write().await.map_err(query_error)?;
            let result =
                sqlx::query("DELETE FROM principal_roles WHERE principal_id = $1 AND role_id = $2")
                    .bind(principal.to_string())
                    .bind(role_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error)?
                    .rows_affected()
                    == 1;
            if result {
                tx.emit(Some(role_event("member-removed", role, Some(principal))));
            }
            tx.commit().await.map_err(query_error)?;
            Ok(result)
        }

        async fn roles_of(&self, principal: Uuid) -> Result<Vec<String>> {
            Ok(sqlx::query(
                "SELECT r.name FROM roles r JOIN principal_roles pr ON pr.role_id = r.id \
                 WHERE pr.principal_id = $1 ORDER BY r.name",
            )
            .bind(principal.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(|r| r.get("name"))
            .collect())
        }

        async fn grant(
            &self,
            role: &str,
            privilege: Privilege,
            securable: &Securable,
        ) -> Result<()> {
            let mut tx = self.write().await.map_err(query_error)?;
            let role_id = role_id_in(&mut tx, role).await?;
            sqlx::query(
                "INSERT INTO grants (role_id, privilege, scope, securable_kind, securable_id, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (role_id, scope, privilege) DO NOTHING",
            )
            .bind(role_id)
            .bind(privilege.as_str())
            .bind(&securable.scope.0)
            .bind(securable.kind)
            .bind(&securable.id)
            .bind(floe_catalog::clock::now_ms())
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    no_such_role(role)
                } else {
                    query_error(e)
                }
            })?;
            tx.emit(Some(grant_event("granted", role, privilege, securable)));
            tx.commit().await.map_err(query_error)?;
            Ok(())
        }

        async fn revoke(
            &self,
            role: &str,
            privilege: Privilege,
            securable: &Securable,
        ) -> Result<bool> {
            let role_id = self.role_id(role).await?;
            let mut tx = self.write().await.map_err(query_error)?;
            let result = sqlx::query(
                "DELETE FROM grants WHERE role_id = $1 AND scope = $2 AND privilege = $3",
            )
            .bind(role_id)
            .bind(&securable.scope.0)
            .bind(privilege.as_str())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected()
                == 1;
            if result {
                tx.emit(Some(grant_event("revoked", role, privilege, securable)));
            }
            tx.commit().await.map_err(query_error)?;
            Ok(result)
        }

        async fn role_grants(&self, role: &str) -> Result<Vec<GrantRecord>> {
            let role_id = self.role_id(role).await?;
            let rows = sqlx::query(
                "SELECT privilege, securable_kind, securable_id, scope FROM grants WHERE role_id = $1 \
                 ORDER BY scope, privilege",
            )
            .bind(role_id)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
            Ok(rows
                .iter()
                .filter_map(|r| {
                    Some(GrantRecord {
                        role: role.to_string(),
                        privilege: Privilege::parse(&r.get::<String, _>("privilege"))?,
                        securable_kind: r.get("securable_kind"),
                        securable_id: r.get("securable_id"),
                        scope: r.get("scope"),
                    })
                })
                .collect())
        }

        async fn principal_policies(&self, principal: Uuid) -> Result<Vec<DataPolicy>> {
            crate::policies::principal_policies(self, principal).await
        }

        async fn set_policy(&self, policy: &DataPolicy) -> Result<()> {
            crate::policies::set_policy(self, policy).await
        }

        async fn delete_policy(&self, role: &str, table_id: &str) -> Result<bool> {
            crate::policies::delete_policy(self, role, table_id).await
        }

        async fn list_policies(&self, role: Option<&str>) -> Result<Vec<DataPolicy>> {
            crate::policies::list_policies(self, role).await
        }
    }
}

pub(crate) use audit::append_chained;

mod audit {
    use async_trait::async_trait;
    use floe_catalog::Result;
    use floe_catalog::governance::audit::{
        AuditEvent, AuditOrder, AuditQuery, AuditRecord, AuditStore, GENESIS, chain,
    };
    use sqlx::Row;
    use sqlx::any::AnyRow;

    use crate::error::query_error;
    use crate::{Backend, SqlStore};

    /// Key of the PostgreSQL advisory lock that serializes appends across nodes.
    const AUDIT_LOCK: i64 = 0x666c_6f65_6175_6474;

    fn record_from_row(row: &AnyRow) -> AuditRecord {
        AuditRecord {
            seq: row.get("seq"),
            event: AuditEvent {
                at_ms: row.get("at_ms"),
                request_id: row.get("request_id"),
                principal: row.get("principal"),
                action: row.get("action"),
                resource: row.get("resource"),
                decision: row.get("decision"),
                status: row.get::<i64, _>("status") as u16,
                client: row.get("client"),
                details: row.get("details"),
            },
            prev_hash: row.get("prev_hash"),
            hash: row.get("hash"),
        }
    }

    /// Sequences and chains `events` after the last record and inserts them in `tx`; returns
    /// the last sequence number. On PostgreSQL an advisory lock held until `tx` ends keeps
    /// concurrent appenders (other requests, other nodes) in line.
    pub(crate) async fn append_chained(
        backend: Backend,
        tx: &mut sqlx::AnyConnection,
        events: Vec<AuditEvent>,
    ) -> std::result::Result<i64, sqlx::Error> {
        if backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(AUDIT_LOCK)
                .execute(&mut *tx)
                .await?;
        }
        let last = sqlx::query("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&mut *tx)
            .await?;
        let (last_seq, last_hash) = match last {
            Some(row) => (row.get::<i64, _>("seq"), row.get::<String, _>("hash")),
            None => (0, GENESIS.to_string()),
        };
        let records = chain(last_seq, &last_hash, events);
        let final_seq = records.last().map_or(last_seq, |r| r.seq);
        // Many rows per statement: one round trip per 100 records, not per record.
        for chunk in records.chunks(100) {
            let mut sql = String::from(
                "INSERT INTO audit_log (seq, at_ms, request_id, principal, action, resource, \
                 decision, status, client, details, prev_hash, hash) VALUES ",
            );
            for i in 0..chunk.len() {
                let b = i * 12;
                if i > 0 {
                    sql.push(',');
                }
                sql.push('(');
                sql.push_str(
                    &(1..=12)
                        .map(|k| format!("${}", b + k))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                sql.push(')');
            }
            let mut query = sqlx::query(&sql);
            for record in chunk {
                let e = &record.event;
                query = query
                    .bind(record.seq)
                    .bind(e.at_ms)
                    .bind(e.request_id.clone())
                    .bind(e.principal.clone())
                    .bind(e.action.clone())
                    .bind(e.resource.clone())
                    .bind(e.decision.clone())
                    .bind(e.status as i64)
                    .bind(e.client.clone())
                    .bind(e.details.clone())
                    .bind(record.prev_hash.clone())
                    .bind(record.hash.clone());
            }
            query.execute(&mut *tx).await?;
        }
        Ok(final_seq)
    }

    #[async_trait]
    impl AuditStore for SqlStore {
        async fn append_audit(&self, events: Vec<AuditEvent>) -> Result<()> {
            if events.is_empty() {
                return Ok(());
            }
            let _guard = self.write_guard().await;
            let mut tx = self.begin_write().await.map_err(query_error)?;
            append_chained(self.backend, &mut tx, events)
                .await
                .map_err(query_error)?;
            tx.commit().await.map_err(query_error)
        }

        /// One statement over the primary key, in either direction: `seq > after AND seq <
        /// before ORDER BY seq [DESC] LIMIT n` walks the key's index from one end and stops
        /// after `n` matches, on both databases.
        async fn query_audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
            let mut sql = String::from("SELECT * FROM audit_log WHERE seq > $1 AND seq < $2");
            let mut binds: Vec<String> = Vec::new();
            let mut add = |clause: &str, value: String| {
                binds.push(value);
                sql.push_str(&format!(" AND {clause} ${}", binds.len() + 2));
            };
            if let Some(p) = &query.principal {
                add("principal =", p.clone());
            }
            if let Some(a) = &query.action {
                add("action =", a.clone());
            }
            if let Some(d) = &query.decision {
                add("decision =", d.clone());
            }
            if let Some(r) = &query.resource {
                binds.push(r.clone());
                let n = binds.len() + 2;
                sql.push_str(&format!(" AND substr(resource, 1, length(${n})) = ${n}"));
            }
            let limit = query.limit.unwrap_or(1000).clamp(1, 10_000) as i64;
            let (status_from, status_to) = query.status_class.map_or((0, i64::MAX), |class| {
                let (from, to) = class.range();
                (i64::from(from), i64::from(to))
            });
            let n = binds.len() + 2;
            let direction = match query.order {
                AuditOrder::Asc => "",
                AuditOrder::Desc => " DESC",
            };
            sql.push_str(&format!(
                " AND status >= ${} AND status < ${} AND at_ms >= ${} AND at_ms <= ${} \
                 ORDER BY seq{direction} LIMIT ${}",
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5
            ));
            let mut q = sqlx::query(&sql)
                .bind(query.after_seq.unwrap_or(0))
                .bind(query.before_seq.unwrap_or(i64::MAX));
            for b in binds {
                q = q.bind(b);
            }
            let rows = q
                .bind(status_from)
                .bind(status_to)
                .bind(query.since_ms.unwrap_or(i64::MIN))
                .bind(query.until_ms.unwrap_or(i64::MAX))
                .bind(limit)
                .fetch_all(&self.pool)
                .await
                .map_err(query_error)?;
            Ok(rows.iter().map(record_from_row).collect())
        }

        async fn audit_trail(&self) -> Result<Vec<AuditRecord>> {
            let rows = sqlx::query("SELECT * FROM audit_log ORDER BY seq")
                .fetch_all(&self.pool)
                .await
                .map_err(query_error)?;
            Ok(rows.iter().map(record_from_row).collect())
        }

        async fn audit_head(&self) -> Result<Option<(i64, String)>> {
            let row = sqlx::query("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?;
            Ok(row.map(|row| (row.get("seq"), row.get("hash"))))
        }
    }
}
