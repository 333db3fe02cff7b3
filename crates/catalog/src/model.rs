//! Records the store keeps.

use std::collections::HashMap;

use floe_storage::StorageProfile;
use iceberg::NamespaceIdent;
use uuid::Uuid;

/// A warehouse: a named storage root that holds namespaces, tables and views.
#[derive(Debug, Clone)]
pub struct Warehouse {
    pub id: Uuid,
    pub name: String,
    pub storage: StorageProfile,
    pub properties: HashMap<String, String>,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone)]
pub struct NamespaceRecord {
    pub id: Uuid,
    pub warehouse_id: Uuid,
    pub ident: NamespaceIdent,
    pub properties: HashMap<String, String>,
}

/// Tables and views share one name space per namespace, so they share one record type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TabularKind {
    Table,
    View,
}

impl TabularKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TabularKind::Table => "table",
            TabularKind::View => "view",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "table" => Some(TabularKind::Table),
            "view" => Some(TabularKind::View),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TabularRecord {
    pub id: Uuid,
    pub warehouse_id: Uuid,
    pub namespace_id: Uuid,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub kind: TabularKind,
    pub metadata_location: String,
    pub location: String,
}

impl TabularRecord {
    /// The authorization scope of this table or view.
    pub fn scope(&self) -> crate::governance::authz::Scope {
        crate::governance::authz::Scope::tabular(self.warehouse_id, &self.namespace, self.id)
    }
}

/// A new table or view to insert.
#[derive(Debug, Clone)]
pub struct NewTabular {
    pub id: Uuid,
    pub warehouse_id: Uuid,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub kind: TabularKind,
    pub metadata_location: String,
    pub location: String,
}

/// One change of a catalog commit, applied all-or-nothing with its siblings.
#[derive(Debug, Clone)]
pub enum MetadataSwap {
    /// Compare-and-swap the metadata location of an existing table or view.
    Update {
        id: Uuid,
        expected_location: String,
        new_location: String,
        /// The table's new location (canonical), when the commit moves it.
        moved_to: Option<String>,
    },
    /// Only require that a table's metadata location is still `expected_location` (a table of
    /// a transaction whose updates changed nothing).
    Assert { id: Uuid, expected_location: String },
    /// Insert a table created by a transaction (`assert-create`).
    Create(NewTabular),
}

/// Why a commit did not apply.
#[derive(Debug)]
pub enum SwapFailure {
    /// The current location was no longer the expected one (index into the swaps).
    Conflict(usize),
    /// A created table's name is taken (index into the swaps).
    AlreadyExists(usize),
    /// The namespace of a created table is gone (index into the swaps).
    NamespaceMissing(usize),
    /// A created or moved table's location overlaps the location of `other` (index into the
    /// swaps; `other` as `namespace.name`).
    LocationTaken {
        index: usize,
        other: String,
    },
    Store(crate::CatalogError),
}

/// A page request: `token` is the last key of the previous page.
#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    pub token: Option<String>,
    pub size: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_token: Option<String>,
}

/// A stored final response of a request made with an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdempotentResponse {
    pub key: String,
    pub fingerprint: String,
    pub status: u16,
    pub body: String,
    pub created_at_ms: i64,
}

/// Restricts a listing to what a principal can see: children whose scope
/// (`prefix` + child key) is granted to one of its roles, or has grants below it.
#[derive(Debug, Clone)]
pub struct Visibility {
    pub principal: Uuid,
    pub prefix: String,
}
