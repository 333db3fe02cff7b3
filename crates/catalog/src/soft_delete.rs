//! Soft delete and deletion protection, as the store keeps them.
//!
//! A warehouse whose `soft-delete-retention-seconds` property is above zero keeps dropped
//! tables and views for that long: a drop moves the record out of the live catalog (its name
//! is free at once) into the dropped list, keeping its id — and so its grants and maintenance
//! policy, which are keyed by it — its metadata and its files. An undrop moves it back; the
//! `purge-dropped` job queued with the drop (due when the retention ends) removes it for good,
//! deleting its files when the drop asked for a purge.
//!
//! Deletion protection is a flag on a warehouse, namespace, table or view, kept by the
//! object's id. The catalog service refuses every drop and purge under a set flag (see
//! `CatalogService::require_unprotected`).

use async_trait::async_trait;
use iceberg::NamespaceIdent;
use serde::Serialize;
use uuid::Uuid;

use crate::Result;
use crate::jobs::NewJob;
use crate::model::TabularKind;

/// The warehouse property that turns soft delete on: seconds a dropped table or view is kept.
pub const RETENTION_PROPERTY: &str = "soft-delete-retention-seconds";

/// The job kind that ends a dropped table's or view's retention.
pub const PURGE_JOB: &str = "purge-dropped";

/// The longest retention accepted (ten years), so expiry times never overflow.
pub const MAX_RETENTION_SECONDS: u64 = 10 * 366 * 24 * 3600;

/// A warehouse's soft-delete retention as its property spells it: `None` when soft delete is
/// off (absent or 0), an error naming the rule when the value is not a whole number of
/// seconds in range.
pub fn parse_retention(value: Option<&str>) -> Result<Option<u64>> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(seconds) if seconds <= MAX_RETENTION_SECONDS => Ok(Some(seconds)),
        _ => Err(crate::CatalogError::bad_request(format!(
            "{RETENTION_PROPERTY} must be a whole number of seconds from 0 (soft delete off) \
             to {MAX_RETENTION_SECONDS}, not {value:?}"
        ))),
    }
}

/// A dropped table or view, kept until its retention ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTabular {
    pub id: Uuid,
    pub warehouse_id: Uuid,
    /// The namespace it was dropped from; an undrop needs this very namespace.
    pub namespace_id: Uuid,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub kind: TabularKind,
    pub metadata_location: String,
    pub location: String,
    pub created_at_ms: i64,
    pub dropped_at_ms: i64,
    /// The principal that dropped it.
    pub dropped_by: String,
    pub expires_at_ms: i64,
    /// Whether the drop asked for its files to be deleted (when it expires).
    pub purge_requested: bool,
}

impl DroppedTabular {
    /// Its authorization scope: the one it had when live, so its grants still apply.
    pub fn scope(&self) -> crate::governance::authz::Scope {
        crate::governance::authz::Scope::tabular(self.warehouse_id, &self.namespace, self.id)
    }
}

/// How a drop is recorded.
#[derive(Debug, Clone)]
pub struct SoftDrop {
    pub id: Uuid,
    /// Only while its metadata is still this file (`None`: whatever it is).
    pub expected_location: Option<String>,
    pub dropped_by: String,
    pub dropped_at_ms: i64,
    pub expires_at_ms: i64,
    pub purge_requested: bool,
    /// The job that ends its retention, queued in the same transaction.
    pub purge_job: NewJob,
    /// The objects whose deletion protection refuses the drop (see [`SoftDeleteStore`]).
    pub guard: Vec<Uuid>,
}

/// Why an undrop did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UndropRefusal {
    /// No dropped table or view has that id (undropped or purged meanwhile).
    NotDropped,
    /// A live table or view holds the name now.
    NameTaken,
    /// The namespace it was dropped from is gone.
    NamespaceGone,
    /// Its location overlaps a live table's or view's (`namespace.name`).
    LocationTaken(String),
}

/// The securables deletion protection can be set on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtectedKind {
    Warehouse,
    Namespace,
    Table,
    View,
}

impl ProtectedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProtectedKind::Warehouse => "warehouse",
            ProtectedKind::Namespace => "namespace",
            ProtectedKind::Table => "table",
            ProtectedKind::View => "view",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Warehouse, Self::Namespace, Self::Table, Self::View]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Deletion protection set on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub securable_id: Uuid,
    pub warehouse_id: Uuid,
    pub kind: ProtectedKind,
    pub set_by: String,
    pub set_at_ms: i64,
}

/// Storage of dropped tables and views and of deletion protection. Every method is one
/// store transaction. Implemented by `floe-store`.
///
/// Every drop and purge takes a `guard`: the ids of the object and of its containers (its
/// namespace and those above it, its warehouse). The store refuses the drop with
/// [`CatalogError::protected`](crate::CatalogError::protected) when deletion protection is set
/// on any of them, checked inside the drop's transaction and serialized with
/// [`SoftDeleteStore::set_protection`], so a flag set while a drop is under way is never
/// missed. An empty guard checks nothing (undoing a create).
#[async_trait]
pub trait SoftDeleteStore: Send + Sync {
    /// Moves a live table or view to the dropped list and queues its purge job, together.
    /// False when it is not live (or its metadata is no longer `expected_location`).
    async fn soft_drop_tabular(&self, drop: &SoftDrop) -> Result<bool>;
    /// The dropped tables and views of a warehouse (of one namespace and those below it when
    /// `namespace` is given), by id, those after `after`, at most `limit`.
    async fn list_dropped(
        &self,
        warehouse: Uuid,
        namespace: Option<&NamespaceIdent>,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<DroppedTabular>>;
    async fn get_dropped(&self, id: Uuid) -> Result<Option<DroppedTabular>>;
    /// Moves a dropped table or view back to the live catalog under its old name, in its old
    /// namespace, with its id.
    async fn undrop_tabular(&self, id: Uuid) -> Result<std::result::Result<(), UndropRefusal>>;
    /// Forgets a dropped table or view for good, with its grants and maintenance policy; true
    /// when it was there.
    async fn purge_dropped(&self, id: Uuid, guard: &[Uuid]) -> Result<bool>;

    /// Sets (`Some`) or clears (`None`) deletion protection on an object; true when it changed
    /// (false too when the object is gone by the time the flag would be set).
    async fn set_protection(
        &self,
        securable_id: Uuid,
        protection: Option<&Protection>,
    ) -> Result<bool>;
    /// The protections set on any of `ids`.
    async fn protections(&self, ids: &[Uuid]) -> Result<Vec<Protection>>;
    /// Every protection set in a warehouse (the warehouse's own included).
    async fn warehouse_protections(&self, warehouse: Uuid) -> Result<Vec<Protection>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_is_off_at_zero_and_refused_out_of_range() {
        assert_eq!(parse_retention(None).unwrap(), None);
        assert_eq!(parse_retention(Some("0")).unwrap(), None);
        assert_eq!(parse_retention(Some("3600")).unwrap(), Some(3600));
        for bad in ["-1", "1.5", "week", "999999999999"] {
            let e = parse_retention(Some(bad)).unwrap_err().to_string();
            assert!(e.contains(RETENTION_PROPERTY), "{e}");
        }
        for kind in ["warehouse", "namespace", "table", "view"] {
            assert_eq!(ProtectedKind::parse(kind).unwrap().as_str(), kind);
        }
    }
}
