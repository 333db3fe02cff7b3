//! The metadata store the catalog runs on. Implementations live in `floe-store`.

use std::collections::HashMap;

use async_trait::async_trait;
use iceberg::NamespaceIdent;
use uuid::Uuid;

use crate::Result;
use crate::model::*;
use crate::soft_delete::SoftDeleteStore;

/// Outcome of a namespace property update.
#[derive(Debug, Clone, Default)]
pub struct PropertyChanges {
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    pub missing: Vec<String>,
}

/// Transactional storage of catalog state. Every method is one store transaction. Dropped
/// tables and views and deletion protection are part of it ([`SoftDeleteStore`]).
#[async_trait]
pub trait CatalogStore: SoftDeleteStore + Send + Sync + std::fmt::Debug {
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    async fn create_warehouse(&self, warehouse: &Warehouse) -> Result<()>;
    async fn get_warehouse(&self, name: &str) -> Result<Option<Warehouse>>;
    async fn get_warehouse_by_id(&self, id: Uuid) -> Result<Option<Warehouse>>;
    async fn list_warehouses(&self) -> Result<Vec<Warehouse>>;
    /// Replaces a warehouse's properties; false when it does not exist.
    async fn set_warehouse_properties(
        &self,
        id: Uuid,
        properties: &HashMap<String, String>,
    ) -> Result<bool>;
    /// Deletes an empty warehouse; fails with `NamespaceNotEmpty` when it holds namespaces or
    /// dropped tables or views awaiting their purge. `guard`: see [`SoftDeleteStore`].
    async fn delete_warehouse(&self, id: Uuid, guard: &[Uuid]) -> Result<bool>;

    async fn create_namespace(&self, record: &NamespaceRecord) -> Result<()>;
    async fn get_namespace(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
    ) -> Result<Option<NamespaceRecord>>;
    /// Direct children of `parent` (top level when `None`), ordered by name.
    async fn list_namespaces(
        &self,
        warehouse: Uuid,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visibility: Option<&Visibility>,
    ) -> Result<Page<NamespaceIdent>>;
    /// Drops an empty namespace. `NotFound` when missing, `NamespaceNotEmpty` when it holds
    /// namespaces, tables or views. `guard`: see [`SoftDeleteStore`].
    async fn drop_namespace(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        guard: &[Uuid],
    ) -> Result<()>;
    async fn update_namespace_properties(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        updates: &HashMap<String, String>,
        removals: &[String],
    ) -> Result<PropertyChanges>;

    /// Inserts a table or view. `AlreadyExists` when the name is taken by either kind,
    /// `NotFound` when the namespace is missing.
    async fn create_tabular(&self, tabular: &NewTabular) -> Result<()>;
    /// The table or view of that name, whichever kind it is.
    async fn get_tabular(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        name: &str,
    ) -> Result<Option<TabularRecord>>;
    /// The table or view with that id, wherever it is.
    async fn get_tabular_by_id(&self, id: Uuid) -> Result<Option<TabularRecord>>;
    async fn list_tabulars(
        &self,
        warehouse: Uuid,
        ns: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
        visibility: Option<&Visibility>,
    ) -> Result<Page<String>>;
    /// Removes a table or view record, and the grants on it; true when it existed. `guard`:
    /// see [`SoftDeleteStore`].
    async fn drop_tabular(&self, id: Uuid, guard: &[Uuid]) -> Result<bool>;
    /// Removes a table or view record only if its metadata is still `expected_location`.
    async fn drop_tabular_at(
        &self,
        id: Uuid,
        expected_location: &str,
        guard: &[Uuid],
    ) -> Result<bool>;
    /// Moves a table or view to a new namespace and name; its grants follow.
    async fn rename_tabular(&self, id: Uuid, to_ns: &NamespaceIdent, to_name: &str) -> Result<()>;
    /// A table or view (other than `except`), live or dropped and awaiting its purge, whose
    /// location equals, contains or lies inside `location` (canonical, see
    /// `floe_storage::Location`), as `namespace.name`. Creating
    /// and moving tabulars checks the same inside their transactions.
    async fn location_in_use(
        &self,
        warehouse: Uuid,
        location: &str,
        except: Option<Uuid>,
    ) -> Result<Option<String>>;
    /// Replaces a table record in place (register with overwrite).
    async fn replace_tabular(&self, tabular: &NewTabular) -> Result<()>;
    /// Rewrites every stored tabular location that `canonical` spells differently (records
    /// written before locations were stored canonically); returns how many changed.
    async fn canonicalize_locations(
        &self,
        canonical: for<'a> fn(&'a str) -> Option<String>,
    ) -> Result<u64>;

    /// Applies every swap or none, in one transaction.
    async fn commit(&self, swaps: &[MetadataSwap]) -> std::result::Result<(), SwapFailure>;

    async fn get_idempotent(&self, key: &str) -> Result<Option<IdempotentResponse>>;
    /// Stores a final response; an existing record for the key is kept.
    async fn put_idempotent(&self, response: &IdempotentResponse) -> Result<()>;
    /// Forgets records older than `before_ms`; returns how many.
    async fn expire_idempotent(&self, before_ms: i64) -> Result<u64>;
}
