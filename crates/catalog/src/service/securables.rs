//! Naming securables for grants: from what an administrator writes to ids and scopes.

use iceberg::{NamespaceIdent, TableIdent};
use serde::Deserialize;

use super::CatalogService;
use crate::governance::authz::{Scope, Securable};
use crate::model::TabularKind;
use crate::{CatalogError, Result};

/// A securable as the management API names it.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SecurableRef {
    Server,
    Warehouse {
        warehouse: String,
    },
    Namespace {
        warehouse: String,
        namespace: Vec<String>,
    },
    Table {
        warehouse: String,
        namespace: Vec<String>,
        name: String,
    },
    View {
        warehouse: String,
        namespace: Vec<String>,
        name: String,
    },
}

impl CatalogService {
    /// Resolves a securable to its id and scope; `NotFound` when it does not exist.
    pub async fn resolve_securable(&self, target: &SecurableRef) -> Result<Securable> {
        let namespace = |levels: &Vec<String>| {
            NamespaceIdent::from_vec(levels.clone())
                .map_err(|_| CatalogError::bad_request("namespace must have at least one level"))
        };
        Ok(match target {
            SecurableRef::Server => Securable {
                kind: "server",
                id: String::new(),
                scope: Scope::server(),
            },
            SecurableRef::Warehouse { warehouse } => {
                let wh = self.warehouse(warehouse).await?;
                Securable {
                    kind: "warehouse",
                    id: wh.warehouse.id.to_string(),
                    scope: Scope::warehouse(wh.warehouse.id),
                }
            }
            SecurableRef::Namespace {
                warehouse,
                namespace: levels,
            } => {
                let wh = self.warehouse(warehouse).await?;
                let ns = namespace(levels)?;
                let record = self.require_namespace(&wh, &ns).await?;
                Securable {
                    kind: "namespace",
                    id: record.id.to_string(),
                    scope: Scope::namespace(wh.warehouse.id, &ns),
                }
            }
            SecurableRef::Table {
                warehouse,
                namespace: levels,
                name,
            }
            | SecurableRef::View {
                warehouse,
                namespace: levels,
                name,
            } => {
                let kind = if matches!(target, SecurableRef::Table { .. }) {
                    TabularKind::Table
                } else {
                    TabularKind::View
                };
                let wh = self.warehouse(warehouse).await?;
                let ident = TableIdent::new(namespace(levels)?, name.clone());
                let record = self
                    .find_tabular(&wh, &ident)
                    .await?
                    .filter(|r| r.kind == kind)
                    .ok_or_else(|| match kind {
                        TabularKind::Table => CatalogError::no_such_table(&ident),
                        TabularKind::View => CatalogError::no_such_view(&ident),
                    })?;
                Securable {
                    kind: kind.as_str(),
                    id: record.id.to_string(),
                    scope: record.scope(),
                }
            }
        })
    }
}
