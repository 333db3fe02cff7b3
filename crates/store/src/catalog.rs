//! `CatalogStore` over SQL.

use std::collections::HashMap;

use async_trait::async_trait;
use floe_catalog::ident::{namespace_from_key, namespace_key, parent_key};
use floe_catalog::model::*;
use floe_catalog::store::{CatalogStore, PropertyChanges};
use floe_catalog::{CatalogError, Result};
use iceberg::NamespaceIdent;
use serde_json::json;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_foreign_key_violation, is_unique_violation, query_error};
use crate::now_ms;
use crate::soft_delete::refuse_if_protected;
use crate::{Backend, SqlStore, StoreError};

/// Scope separator (see `floe_catalog::governance::authz`).
const SEP: char = floe_catalog::governance::authz::SEP;

/// Largest page a listing returns, whatever the client asks for.
const MAX_PAGE: usize = 1000;

pub(crate) fn parse_uuid(what: &'static str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| {
        StoreError::Corrupt {
            what,
            detail: e.to_string(),
        }
        .into()
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| {
        StoreError::Corrupt {
            what,
            detail: e.to_string(),
        }
        .into()
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| CatalogError::internal("encode json", e))
}

fn warehouse_from_row(row: &AnyRow) -> Result<Warehouse> {
    Ok(Warehouse {
        id: parse_uuid("warehouse id", &row.get::<String, _>("id"))?,
        name: row.get("name"),
        storage: parse_json("storage profile", &row.get::<String, _>("storage_profile"))?,
        properties: parse_json("warehouse properties", &row.get::<String, _>("properties"))?,
        created_at_ms: row.get("created_at_ms"),
    })
}

pub(crate) fn tabular_from_row(row: &AnyRow) -> Result<TabularRecord> {
    let kind: String = row.get("kind");
    Ok(TabularRecord {
        id: parse_uuid("tabular id", &row.get::<String, _>("id"))?,
        warehouse_id: parse_uuid("warehouse id", &row.get::<String, _>("warehouse_id"))?,
        namespace_id: parse_uuid("namespace id", &row.get::<String, _>("namespace_id"))?,
        namespace: namespace_from_key(&row.get::<String, _>("ns_name")),
        name: row.get("name"),
        kind: TabularKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            what: "tabular kind",
            detail: kind.clone(),
        })?,
        metadata_location: row.get("metadata_location"),
        location: row.get("location"),
    })
}

/// Splits rows fetched with one extra into a page and the next token.
fn paginate<T>(mut items: Vec<T>, limit: Option<usize>, key: impl Fn(&T) -> String) -> Page<T> {
    match limit {
        Some(limit) if items.len() > limit => {
            items.truncate(limit);
            let next_token = items.last().map(&key);
            Page { items, next_token }
        }
        _ => Page {
            items,
            next_token: None,
        },
    }
}

/// Removes, inside the transaction that removes a namespace, table or view, what is keyed by
/// its id: grants, its maintenance policy and its deletion-protection flag.
pub(crate) async fn forget_securable(tx: &mut sqlx::AnyConnection, id: &str) -> Result<()> {
    for sql in [
        "DELETE FROM grants WHERE securable_id = $1",
        "DELETE FROM data_policies WHERE table_id = $1",
        "DELETE FROM maintenance_policies WHERE scope_id = $1",
        "DELETE FROM deletion_protection WHERE securable_id = $1",
    ] {
        sqlx::query(sql)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
    }
    Ok(())
}

impl SqlStore {
    /// Deletes a table or view (only at `expected_location` when given), its grants and its
    /// maintenance policy.
    async fn delete_tabular(
        &self,
        id: Uuid,
        expected_location: Option<&str>,
        guard: &[Uuid],
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        refuse_if_protected(self.backend, &mut tx, guard).await?;
        let event = crate::events::tabular_event(&mut tx, id, "dropped", json!({})).await?;
        let deleted = match expected_location {
            Some(location) => {
                sqlx::query("DELETE FROM tabulars WHERE id = $1 AND metadata_location = $2")
                    .bind(id.to_string())
                    .bind(location)
            }
            None => sqlx::query("DELETE FROM tabulars WHERE id = $1").bind(id.to_string()),
        }
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected();
        if deleted == 1 {
            forget_securable(&mut tx, &id.to_string()).await?;
            tx.emit(event);
        }
        tx.commit().await.map_err(query_error)?;
        Ok(deleted == 1)
    }

    async fn namespace_id(&self, warehouse: Uuid, ns: &NamespaceIdent) -> Result<Option<Uuid>> {
        let row = sqlx::query("SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2")
            .bind(warehouse.to_string())
            .bind(namespace_key(ns))
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.map(|r| parse_uuid("namespace id", &r.get::<String, _>("id")))
            .transpose()
    }

    fn limit_for(page: &PageRequest) -> Option<usize> {
        page.size.map(|s| s.clamp(1, MAX_PAGE))
    }
}

const TABULAR_COLUMNS: &str = "t.id, t.warehouse_id, t.namespace_id, n.name AS ns_name, t.name, \
     t.kind, t.metadata_location, t.location";

#[async_trait]
impl CatalogStore for SqlStore {
    fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    async fn create_warehouse(&self, warehouse: &Warehouse) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO warehouses (id, name, storage_profile, properties, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(warehouse.id.to_string())
        .bind(&warehouse.name)
        .bind(to_json(&warehouse.storage)?)
        .bind(to_json(&warehouse.properties)?)
        .bind(warehouse.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CatalogError::already_exists(format!(
                    "Warehouse already exists: {}",
                    warehouse.name
                ))
            } else {
                query_error(e)
            }
        })?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn get_warehouse(&self, name: &str) -> Result<Option<Warehouse>> {
        sqlx::query("SELECT * FROM warehouses WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(warehouse_from_row)
            .transpose()
    }

    async fn get_warehouse_by_id(&self, id: Uuid) -> Result<Option<Warehouse>> {
        sqlx::query("SELECT * FROM warehouses WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(warehouse_from_row)
            .transpose()
    }

    async fn list_warehouses(&self) -> Result<Vec<Warehouse>> {
        sqlx::query("SELECT * FROM warehouses ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(warehouse_from_row)
            .collect()
    }

    async fn delete_warehouse(&self, id: Uuid, guard: &[Uuid]) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        refuse_if_protected(self.backend, &mut tx, guard).await?;
        let used = sqlx::query("SELECT 1 FROM namespaces WHERE warehouse_id = $1 LIMIT 1")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        if used.is_some() {
            return Err(CatalogError::NamespaceNotEmpty(
                "the warehouse still holds namespaces; drop them first".into(),
            ));
        }
        let dropped = sqlx::query("SELECT 1 FROM dropped_tabulars WHERE warehouse_id = $1 LIMIT 1")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        if dropped.is_some() {
            return Err(CatalogError::NamespaceNotEmpty(
                "the warehouse still keeps dropped tables or views (soft delete); purge them \
                 first"
                    .into(),
            ));
        }
        sqlx::query("DELETE FROM grants WHERE securable_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let deleted = sqlx::query("DELETE FROM warehouses WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(deleted == 1)
    }

    async fn set_warehouse_properties(
        &self,
        id: Uuid,
        properties: &HashMap<String, String>,
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let updated = sqlx::query("UPDATE warehouses SET properties = $1 WHERE id = $2")
            .bind(to_json(properties)?)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(updated == 1)
    }

    async fn create_namespace(&self, record: &NamespaceRecord) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO namespaces (id, warehouse_id, name, parent, properties, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(record.id.to_string())
        .bind(record.warehouse_id.to_string())
        .bind(namespace_key(&record.ident))
        .bind(parent_key(&record.ident))
        .bind(to_json(&record.properties)?)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CatalogError::AlreadyExists {
                    error_type: "AlreadyExistsException",
                    message: format!("Namespace already exists: {}", record.ident.join(".")),
                }
            } else {
                query_error(e)
            }
        })?;
        let event = namespace_event(&mut tx, record.warehouse_id, &record.ident, "created").await?;
        tx.emit(event);
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn get_namespace(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
    ) -> Result<Option<NamespaceRecord>> {
        let row = sqlx::query(
            "SELECT id, properties FROM namespaces WHERE warehouse_id = $1 AND name = $2",
        )
        .bind(warehouse.to_string())
        .bind(namespace_key(ns))
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error)?;
        row.map(|r| {
            Ok(NamespaceRecord {
                id: parse_uuid("namespace id", &r.get::<String, _>("id"))?,
                warehouse_id: warehouse,
                ident: ns.clone(),
                properties: parse_json("namespace properties", &r.get::<String, _>("properties"))?,
            })
        })
        .transpose()
    }

    async fn list_namespaces(
        &self,
        warehouse: Uuid,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visibility: Option<&Visibility>,
    ) -> Result<Page<NamespaceIdent>> {
        let limit = Self::limit_for(page);
        let visible = if visibility.is_some() {
            " AND EXISTS (SELECT 1 FROM grants g JOIN principal_roles pr ON pr.role_id = g.role_id \
               WHERE pr.principal_id = $5 AND (g.scope = $6 || n.name \
               OR substr(g.scope, 1, length($6 || n.name) + 1) = $6 || n.name || $7))"
        } else {
            ""
        };
        let sql = format!(
            "SELECT n.name FROM namespaces n WHERE n.warehouse_id = $1 AND n.parent = $2 AND n.name > $3\
             {visible} ORDER BY n.name LIMIT $4"
        );
        let mut query = sqlx::query(&sql)
            .bind(warehouse.to_string())
            .bind(parent.map(namespace_key).unwrap_or_default())
            .bind(page.token.clone().unwrap_or_default())
            .bind(limit.map_or(i64::MAX, |l| l as i64 + 1));
        if let Some(v) = visibility {
            query = query
                .bind(v.principal.to_string())
                .bind(v.prefix.clone())
                .bind(SEP.to_string());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        let keys: Vec<String> = rows.iter().map(|r| r.get("name")).collect();
        let page = paginate(keys, limit, Clone::clone);
        Ok(Page {
            items: page.items.iter().map(|k| namespace_from_key(k)).collect(),
            next_token: page.next_token,
        })
    }

    async fn drop_namespace(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        guard: &[Uuid],
    ) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        refuse_if_protected(self.backend, &mut tx, guard).await?;
        let key = namespace_key(ns);
        let row = sqlx::query("SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2")
            .bind(warehouse.to_string())
            .bind(&key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?
            .ok_or_else(|| CatalogError::no_such_namespace(ns.join(".")))?;
        let id: String = row.get("id");
        let child =
            sqlx::query("SELECT 1 FROM namespaces WHERE warehouse_id = $1 AND parent = $2 LIMIT 1")
                .bind(warehouse.to_string())
                .bind(&key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?;
        let tabular = sqlx::query("SELECT 1 FROM tabulars WHERE namespace_id = $1 LIMIT 1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        if child.is_some() || tabular.is_some() {
            return Err(CatalogError::NamespaceNotEmpty(format!(
                "Namespace {} is not empty: it contains {}",
                ns.join("."),
                if child.is_some() {
                    "namespaces"
                } else {
                    "tables or views"
                }
            )));
        }
        forget_securable(&mut tx, &id).await?;
        let event = namespace_event(&mut tx, warehouse, ns, "dropped").await?;
        tx.emit(event);
        sqlx::query("DELETE FROM namespaces WHERE id = $1")
            .bind(&id)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    CatalogError::NamespaceNotEmpty(format!(
                        "Namespace {} is not empty",
                        ns.join(".")
                    ))
                } else {
                    query_error(e)
                }
            })?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn update_namespace_properties(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        updates: &HashMap<String, String>,
        removals: &[String],
    ) -> Result<PropertyChanges> {
        let mut tx = self.write().await.map_err(query_error)?;
        let select = match self.backend {
            Backend::Postgres => {
                "SELECT id, properties FROM namespaces WHERE warehouse_id = $1 AND name = $2 FOR UPDATE"
            }
            Backend::Sqlite => {
                "SELECT id, properties FROM namespaces WHERE warehouse_id = $1 AND name = $2"
            }
        };
        let row = sqlx::query(select)
            .bind(warehouse.to_string())
            .bind(namespace_key(ns))
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?
            .ok_or_else(|| CatalogError::no_such_namespace(ns.join(".")))?;
        let id: String = row.get("id");
        let mut properties: HashMap<String, String> =
            parse_json("namespace properties", &row.get::<String, _>("properties"))?;
        let mut changes = PropertyChanges::default();
        for key in removals {
            if properties.remove(key).is_some() {
                changes.removed.push(key.clone());
            } else {
                changes.missing.push(key.clone());
            }
        }
        for (key, value) in updates {
            properties.insert(key.clone(), value.clone());
            changes.updated.push(key.clone());
        }
        sqlx::query("UPDATE namespaces SET properties = $1 WHERE id = $2")
            .bind(to_json(&properties)?)
            .bind(&id)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let event = namespace_event(&mut tx, warehouse, ns, "updated").await?;
        tx.emit(event);
        tx.commit().await.map_err(query_error)?;
        Ok(changes)
    }

    async fn create_tabular(&self, tabular: &NewTabular) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        insert_tabular(self.backend, &mut tx, tabular)
            .await
            .map_err(|f| match f {
                InsertFailure::NamespaceMissing => {
                    CatalogError::no_such_namespace(tabular.namespace.join("."))
                }
                InsertFailure::Exists => CatalogError::already_exists(format!(
                    "{} already exists: {}.{}",
                    if tabular.kind == TabularKind::Table {
                        "Table"
                    } else {
                        "View"
                    },
                    tabular.namespace.join("."),
                    tabular.name
                )),
                InsertFailure::LocationTaken(other) => location_taken(&tabular.location, &other),
                InsertFailure::Query(e) => query_error(e),
            })?;
        let event = crate::events::tabular_event(&mut tx, tabular.id, "created", json!({})).await?;
        tx.emit(event);
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn get_tabular(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        name: &str,
    ) -> Result<Option<TabularRecord>> {
        let sql = format!(
            "SELECT {TABULAR_COLUMNS} FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
             WHERE n.warehouse_id = $1 AND n.name = $2 AND t.name = $3"
        );
        sqlx::query(&sql)
            .bind(warehouse.to_string())
            .bind(namespace_key(ns))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(tabular_from_row)
            .transpose()
    }

    async fn get_tabular_by_id(&self, id: Uuid) -> Result<Option<TabularRecord>> {
        let sql = format!(
            "SELECT {TABULAR_COLUMNS} FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
             WHERE t.id = $1"
        );
        sqlx::query(&sql)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(tabular_from_row)
            .transpose()
    }

    async fn list_tabulars(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
        visibility: Option<&Visibility>,
    ) -> Result<Page<String>> {
        let Some(namespace_id) = self.namespace_id(warehouse, ns).await? else {
            return Err(CatalogError::no_such_namespace(ns.join(".")));
        };
        let limit = Self::limit_for(page);
        let visible = if visibility.is_some() {
            " AND EXISTS (SELECT 1 FROM grants g JOIN principal_roles pr ON pr.role_id = g.role_id \
               WHERE pr.principal_id = $5 AND g.scope = $6 || t.id)"
        } else {
            ""
        };
        let sql = format!(
            "SELECT t.name FROM tabulars t WHERE t.namespace_id = $1 AND t.kind = $2 AND t.name > $3\
             {visible} ORDER BY t.name LIMIT $4"
        );
        let mut query = sqlx::query(&sql)
            .bind(namespace_id.to_string())
            .bind(kind.as_str())
            .bind(page.token.clone().unwrap_or_default())
            .bind(limit.map_or(i64::MAX, |l| l as i64 + 1));
        if let Some(v) = visibility {
            query = query.bind(v.principal.to_string()).bind(v.prefix.clone());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        let names = rows.iter().map(|r| r.get::<String, _>("name")).collect();
        Ok(paginate(names, limit, Clone::clone))
    }

    async fn drop_tabular(&self, id: Uuid, guard: &[Uuid]) -> Result<bool> {
        self.delete_tabular(id, None, guard).await
    }

    async fn drop_tabular_at(
        &self,
        id: Uuid,
        expected_location: &str,
        guard: &[Uuid],
    ) -> Result<bool> {
        self.delete_tabular(id, Some(expected_location), guard)
            .await
    }

    async fn rename_tabular(&self, id: Uuid, to_ns: &NamespaceIdent, to_name: &str) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        let before = crate::events::tabular_event(&mut tx, id, "renamed", json!({})).await?;
        let warehouse: String = sqlx::query("SELECT warehouse_id FROM tabulars WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?
            .ok_or_else(|| CatalogError::no_such_table(to_name))?
            .get("warehouse_id");
        let namespace_id: String =
            sqlx::query("SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2")
                .bind(&warehouse)
                .bind(namespace_key(to_ns))
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?
                .ok_or_else(|| CatalogError::no_such_namespace(to_ns.join(".")))?
                .get("id");
        sqlx::query("UPDATE grants SET scope = $1 WHERE securable_id = $2")
            .bind(format!(
                "{warehouse}{SEP}{}{SEP}t:{id}",
                namespace_key(to_ns)
            ))
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        sqlx::query(
            "UPDATE tabulars SET namespace_id = $1, name = $2, updated_at_ms = $3 WHERE id = $4",
        )
        .bind(&namespace_id)
        .bind(to_name)
        .bind(now_ms())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CatalogError::already_exists(format!(
                    "{}.{} already exists",
                    to_ns.join("."),
                    to_name
                ))
            } else {
                query_error(e)
            }
        })?;
        let from = before
            .map(|e| json!({"from": {"namespace": e.data["namespace"], "name": e.data["name"]}}));
        let event =
            crate::events::tabular_event(&mut tx, id, "renamed", from.unwrap_or_default()).await?;
        tx.emit(event);
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn location_in_use(
        &self,
        warehouse: Uuid,
        location: &str,
        except: Option<Uuid>,
    ) -> Result<Option<String>> {
        let mut conn = self.pool.acquire().await.map_err(query_error)?;
        overlapping(&mut conn, warehouse, location, except)
            .await
            .map_err(query_error)
    }

    async fn replace_tabular(&self, tabular: &NewTabular) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        claim_locations(self.backend, &mut tx, tabular.warehouse_id)
            .await
            .map_err(query_error)?;
        if let Some(other) = overlapping(
            &mut tx,
            tabular.warehouse_id,
            &tabular.location,
            Some(tabular.id),
        )
        .await
        .map_err(query_error)?
        {
            return Err(location_taken(&tabular.location, &other));
        }
        sqlx::query(
            "UPDATE tabulars SET metadata_location = $1, location = $2, updated_at_ms = $3 WHERE id = $4",
        )
        .bind(&tabular.metadata_location)
        .bind(&tabular.location)
        .bind(now_ms())
        .bind(tabular.id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        let event =
            crate::events::tabular_event(&mut tx, tabular.id, "replaced", json!({})).await?;
        tx.emit(event);
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn canonicalize_locations(
        &self,
        canonical: for<'a> fn(&'a str) -> Option<String>,
    ) -> Result<u64> {
        let rows = sqlx::query("SELECT id, location FROM tabulars")
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        let changes: Vec<(String, String)> = rows
            .iter()
            .filter_map(|row| {
                let location: String = row.get("location");
                let wanted = canonical(&location)?;
                (wanted != location).then(|| (row.get::<String, _>("id"), wanted))
            })
            .collect();
        if changes.is_empty() {
            return Ok(0);
        }
        let mut tx = self.write().await.map_err(query_error)?;
        for (id, location) in &changes {
            sqlx::query("UPDATE tabulars SET location = $1 WHERE id = $2")
                .bind(location)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        Ok(changes.len() as u64)
    }

    async fn commit(&self, swaps: &[MetadataSwap]) -> std::result::Result<(), SwapFailure> {
        let store_failure = |e: sqlx::Error| SwapFailure::Store(query_error(e));
        let mut tx = self.write().await.map_err(store_failure)?;
        let now = now_ms();
        for (index, swap) in swaps.iter().enumerate() {
            match swap {
                MetadataSwap::Assert {
                    id,
                    expected_location,
                } => {
                    let current = sqlx::query(
                        "SELECT 1 FROM tabulars WHERE id = $1 AND metadata_location = $2",
                    )
                    .bind(id.to_string())
                    .bind(expected_location)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(store_failure)?;
                    if current.is_none() {
                        return Err(SwapFailure::Conflict(index));
                    }
                }
                MetadataSwap::Update {
                    id,
                    expected_location,
                    new_location,
                    moved_to,
                } => {
                    let updated = sqlx::query(
                        "UPDATE tabulars SET metadata_location = $1, updated_at_ms = $2 \
                         WHERE id = $3 AND metadata_location = $4",
                    )
                    .bind(new_location)
                    .bind(now)
                    .bind(id.to_string())
                    .bind(expected_location)
                    .execute(&mut *tx)
                    .await
                    .map_err(store_failure)?
                    .rows_affected();
                    if updated != 1 {
                        return Err(SwapFailure::Conflict(index));
                    }
                    let event = crate::events::tabular_event(
                        &mut tx,
                        *id,
                        "committed",
                        json!({"previous-metadata-location": expected_location}),
                    )
                    .await
                    .map_err(SwapFailure::Store)?;
                    tx.emit(event);
                    if let Some(location) = moved_to {
                        let warehouse: String =
                            sqlx::query("SELECT warehouse_id FROM tabulars WHERE id = $1")
                                .bind(id.to_string())
                                .fetch_one(&mut *tx)
                                .await
                                .map_err(store_failure)?
                                .get("warehouse_id");
                        let warehouse = Uuid::parse_str(&warehouse).map_err(|e| {
                            SwapFailure::Store(CatalogError::internal("warehouse id", e))
                        })?;
                        claim_locations(self.backend, &mut tx, warehouse)
                            .await
                            .map_err(store_failure)?;
                        if let Some(other) = overlapping(&mut tx, warehouse, location, Some(*id))
                            .await
                            .map_err(store_failure)?
                        {
                            return Err(SwapFailure::LocationTaken { index, other });
                        }
                        sqlx::query("UPDATE tabulars SET location = $1 WHERE id = $2")
                            .bind(location)
                            .bind(id.to_string())
                            .execute(&mut *tx)
                            .await
                            .map_err(store_failure)?;
                    }
                }
                MetadataSwap::Create(tabular) => {
                    insert_tabular(self.backend, &mut tx, tabular)
                        .await
                        .map_err(|f| match f {
                            InsertFailure::Exists => SwapFailure::AlreadyExists(index),
                            InsertFailure::NamespaceMissing => SwapFailure::NamespaceMissing(index),
                            InsertFailure::LocationTaken(other) => {
                                SwapFailure::LocationTaken { index, other }
                            }
                            InsertFailure::Query(e) => store_failure(e),
                        })?;
                    let event =
                        crate::events::tabular_event(&mut tx, tabular.id, "created", json!({}))
                            .await
                            .map_err(SwapFailure::Store)?;
                    tx.emit(event);
                }
            }
        }
        tx.commit().await.map_err(store_failure)
    }

    async fn get_idempotent(&self, key: &str) -> Result<Option<IdempotentResponse>> {
        let row = sqlx::query("SELECT * FROM idempotency_keys WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(row.map(|r| IdempotentResponse {
            key: r.get("key"),
            fingerprint: r.get("fingerprint"),
            status: r.get::<i64, _>("status") as u16,
            body: r.get("body"),
            created_at_ms: r.get("created_at_ms"),
        }))
    }

    async fn put_idempotent(&self, response: &IdempotentResponse) -> Result<()> {
        let _guard = self.write_guard().await;
        sqlx::query(
            "INSERT INTO idempotency_keys (key, fingerprint, status, body, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING",
        )
        .bind(&response.key)
        .bind(&response.fingerprint)
        .bind(response.status as i64)
        .bind(&response.body)
        .bind(response.created_at_ms)
        .execute(&self.pool)
        .await
        .map_err(query_error)?;
        Ok(())
    }

    async fn expire_idempotent(&self, before_ms: i64) -> Result<u64> {
        let _guard = self.write_guard().await;
        Ok(
            sqlx::query("DELETE FROM idempotency_keys WHERE created_at_ms < $1")
                .bind(before_ms)
                .execute(&self.pool)
                .await
                .map_err(query_error)?
                .rows_affected(),
        )
    }
}

pub(crate) enum InsertFailure {
    NamespaceMissing,
    Exists,
    /// The location overlaps that of this tabular (`namespace.name`).
    LocationTaken(String),
    Query(sqlx::Error),
}

pub(crate) async fn insert_tabular(
    backend: Backend,
    tx: &mut sqlx::AnyConnection,
    tabular: &NewTabular,
) -> std::result::Result<(), InsertFailure> {
    let namespace_id: String =
        sqlx::query("SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2")
            .bind(tabular.warehouse_id.to_string())
            .bind(namespace_key(&tabular.namespace))
            .fetch_optional(&mut *tx)
            .await
            .map_err(InsertFailure::Query)?
            .ok_or(InsertFailure::NamespaceMissing)?
            .get("id");
    let now = now_ms();
    sqlx::query(
        "INSERT INTO tabulars (id, warehouse_id, namespace_id, name, kind, metadata_location, \
         location, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(tabular.id.to_string())
    .bind(tabular.warehouse_id.to_string())
    .bind(&namespace_id)
    .bind(&tabular.name)
    .bind(tabular.kind.as_str())
    .bind(&tabular.metadata_location)
    .bind(&tabular.location)
    .bind(now)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            InsertFailure::Exists
        } else if is_foreign_key_violation(&e) {
            InsertFailure::NamespaceMissing
        } else {
            InsertFailure::Query(e)
        }
    })?;
    // Checked after the insert, so a taken name answers as such; the transaction is dropped
    // (rolled back) with the row when the location is taken.
    claim_locations(backend, tx, tabular.warehouse_id)
        .await
        .map_err(InsertFailure::Query)?;
    if let Some(other) = overlapping(
        tx,
        tabular.warehouse_id,
        &tabular.location,
        Some(tabular.id),
    )
    .await
    .map_err(InsertFailure::Query)?
    {
        return Err(InsertFailure::LocationTaken(other));
    }
    Ok(())
}

/// Key of the PostgreSQL advisory lock that serializes location claims of one warehouse
/// across nodes (its warehouse id's low bits, in a range of its own).
fn location_lock(warehouse: Uuid) -> i64 {
    const BASE: i64 = 0x666c_6f65_0000_0000;
    BASE | (warehouse.as_u128() as i64 & 0xffff_ffff)
}

/// Takes, until `tx` ends, the lock under which locations of `warehouse` are claimed: two
/// transactions that each check and then claim overlapping locations cannot both succeed.
/// SQLite write transactions are serialized already.
async fn claim_locations(
    backend: Backend,
    tx: &mut sqlx::AnyConnection,
    warehouse: Uuid,
) -> std::result::Result<(), sqlx::Error> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(location_lock(warehouse))
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

pub(crate) fn location_taken(location: &str, other: &str) -> CatalogError {
    CatalogError::bad_request(format!(
        "location {location} overlaps the location of {other}"
    ))
}

/// The canonical locations that contain `location` (canonical: `scheme://authority/path`
/// without `//`, `.` or a trailing slash; `file:///path` for local files), nearest last.
fn ancestors(location: &str) -> Vec<String> {
    let Some(after_scheme) = location.find("://").map(|i| i + 3) else {
        return Vec::new();
    };
    let Some(path_start) = location[after_scheme..].find('/').map(|i| i + after_scheme) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if path_start == after_scheme {
        // `file:///…`: the file system root is `file:///`.
        found.push(location[..=path_start].to_string());
    } else {
        found.push(location[..path_start].to_string());
    }
    for (i, c) in location.char_indices().skip(path_start + 1) {
        if c == '/' {
            found.push(location[..i].to_string());
        }
    }
    found.retain(|a| a != location);
    found
}

/// A tabular of `warehouse` (other than `except`) whose location equals `location`, is one
/// of its ancestors or lies below it, as `namespace.name`. Reads the location index: the
/// ancestors by equality, everything below by the byte range `location/` .. `location0`
/// (`0` follows `/`).
async fn overlapping(
    conn: &mut sqlx::AnyConnection,
    warehouse: Uuid,
    location: &str,
    except: Option<Uuid>,
) -> std::result::Result<Option<String>, sqlx::Error> {
    let below = if location.ends_with('/') {
        location.to_string()
    } else {
        format!("{location}/")
    };
    let after = format!("{}0", &below[..below.len() - 1]);
    let mut equal = ancestors(location);
    equal.push(location.to_string());
    let placeholders: Vec<String> = (0..equal.len()).map(|i| format!("${}", i + 5)).collect();
    // Two index searches (a range, then equalities): one `OR` of both would scan the
    // warehouse's rows on SQLite. Live tabulars first, then dropped ones, whose files stay
    // until their purge.
    let live = "SELECT n.name AS ns_name, t.name FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
         WHERE t.id IN (SELECT id FROM tabulars WHERE warehouse_id = $1 AND location >= $3 \
         AND location < $4 UNION ALL SELECT id FROM tabulars WHERE warehouse_id = $1 \
         AND location IN (EQUAL)) AND t.id <> $2 LIMIT 1";
    let dropped = "SELECT d.namespace_name AS ns_name, d.name FROM dropped_tabulars d \
         WHERE d.id IN (SELECT id FROM dropped_tabulars WHERE warehouse_id = $1 AND location >= $3 \
         AND location < $4 UNION ALL SELECT id FROM dropped_tabulars WHERE warehouse_id = $1 \
         AND location IN (EQUAL)) AND d.id <> $2 LIMIT 1";
    for (sql, suffix) in [(live, ""), (dropped, " (dropped, awaiting its purge)")] {
        let sql = sql.replace("EQUAL", &placeholders.join(", "));
        let mut query = sqlx::query(&sql)
            .bind(warehouse.to_string())
            .bind(except.unwrap_or_default().to_string())
            .bind(below.clone())
            .bind(after.clone());
        for location in &equal {
            query = query.bind(location);
        }
        if let Some(r) = query.fetch_optional(&mut *conn).await? {
            let ns: String = r.get("ns_name");
            return Ok(Some(format!(
                "{}.{}{suffix}",
                ns.replace('\u{1f}', "."),
                r.get::<String, _>("name")
            )));
        }
    }
    Ok(None)
}

/// The event of `kind` about namespace `ns` of warehouse `warehouse`.
async fn namespace_event(
    tx: &mut sqlx::AnyConnection,
    warehouse: Uuid,
    ns: &NamespaceIdent,
    kind: &str,
) -> Result<Option<floe_catalog::events::NewEvent>> {
    let name: Option<String> = sqlx::query("SELECT name FROM warehouses WHERE id = $1")
        .bind(warehouse.to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error)?
        .map(|r| r.get("name"));
    Ok(name.map(|name| floe_catalog::events::NewEvent {
        kind: format!("namespace.{kind}"),
        subject: format!("{name}/{}", ns.join(".")),
        data: json!({"warehouse": name, "namespace": ns.clone().inner()}),
    }))
}
