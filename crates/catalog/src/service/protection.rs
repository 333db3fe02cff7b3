//! Deletion protection: a flag on a warehouse, namespace, table or view that refuses every
//! drop and purge of it and of everything inside it until it is cleared.
//!
//! The check, [`CatalogService::require_unprotected`], is made by the catalog operations every
//! door shares (dropping a table, view, namespace or warehouse; unregistering a table; purging
//! a dropped table or view, on request or when its retention ends), so the REST API, SQL
//! `DROP TABLE`, migrations and maintenance jobs all meet it. Setting and clearing the flag
//! needs `manage-warehouses` on the object (a grant on its warehouse or the server covers it).

use iceberg::NamespaceIdent;
use uuid::Uuid;

use super::{CatalogService, SecurableRef, WarehouseHandle, now_ms};
use crate::governance::authz::{Caller, Privilege};
use crate::model::TabularKind;
use crate::soft_delete::{ProtectedKind, Protection};
use crate::{CatalogError, Result};

/// The flag's name, as errors and the API spell it.
pub const FLAG: &str = "deletion-protection";

/// A table or view whose protection (and whose containers') is checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tabular<'a> {
    pub id: Uuid,
    pub kind: TabularKind,
    pub name: &'a str,
}

/// The protection that governs an object: set on it, or on the nearest container that has
/// one, and where (`table sales.orders`, `namespace sales`, `warehouse default`).
#[derive(Debug, Clone)]
pub struct Governing {
    pub protection: Protection,
    pub set_on: String,
}

impl CatalogService {
    /// The objects whose protection governs an object, nearest first, each with how a refusal
    /// names it: the tabular, its namespace and those above it (innermost first), the
    /// warehouse.
    pub(crate) async fn protection_chain(
        &self,
        wh: &WarehouseHandle,
        namespace: Option<&NamespaceIdent>,
        tabular: Option<Tabular<'_>>,
    ) -> Result<Vec<(Uuid, String)>> {
        let mut chain: Vec<(Uuid, String)> = Vec::new();
        if let (Some(t), Some(ns)) = (tabular, namespace) {
            chain.push((
                t.id,
                format!("{} {}.{}", t.kind.as_str(), ns.join("."), t.name),
            ));
        }
        if let Some(ns) = namespace {
            let levels = ns.clone().inner();
            for depth in (1..=levels.len()).rev() {
                let Ok(level) = NamespaceIdent::from_vec(levels[..depth].to_vec()) else {
                    continue;
                };
                if let Some(record) = self.store.get_namespace(wh.warehouse.id, &level).await? {
                    chain.push((record.id, format!("namespace {}", level.join("."))));
                }
            }
        }
        chain.push((wh.warehouse.id, format!("warehouse {}", wh.warehouse.name)));
        Ok(chain)
    }

    /// The nearest protection set on one of `chain`.
    async fn nearest_protection(&self, chain: Vec<(Uuid, String)>) -> Result<Option<Governing>> {
        let ids: Vec<Uuid> = chain.iter().map(|(id, _)| *id).collect();
        let set = self.store.protections(&ids).await?;
        Ok(chain.into_iter().find_map(|(id, set_on)| {
            set.iter()
                .find(|p| p.securable_id == id)
                .map(|p| Governing {
                    protection: p.clone(),
                    set_on,
                })
        }))
    }

    /// The nearest protection over an object: the tabular's own, then its namespace's and
    /// their parents' (innermost first), then the warehouse's.
    pub(crate) async fn governing_protection(
        &self,
        wh: &WarehouseHandle,
        namespace: Option<&NamespaceIdent>,
        tabular: Option<Tabular<'_>>,
    ) -> Result<Option<Governing>> {
        let chain = self.protection_chain(wh, namespace, tabular).await?;
        self.nearest_protection(chain).await
    }

    /// Refuses `action` (`drop table sales.orders`) with a 409 naming the flag and where it is
    /// set, when deletion protection governs the object. Otherwise answers the guard to hand
    /// the store's drop: the ids it checks again inside the drop's transaction, so a flag set
    /// after this check still refuses the drop (see [`Self::refused_meanwhile`]).
    pub(crate) async fn require_unprotected(
        &self,
        wh: &WarehouseHandle,
        namespace: Option<&NamespaceIdent>,
        tabular: Option<Tabular<'_>>,
        action: &str,
    ) -> Result<Vec<Uuid>> {
        let chain = self.protection_chain(wh, namespace, tabular).await?;
        let guard = chain.iter().map(|(id, _)| *id).collect();
        match self.nearest_protection(chain).await? {
            None => Ok(guard),
            Some(governing) => Err(CatalogError::protected(format!(
                "cannot {action}: {FLAG} is set on {} (by {}); a holder of manage-warehouses \
                 must clear it first",
                governing.set_on, governing.protection.set_by
            ))),
        }
    }

    /// The answer of a store drop made with a guard from [`Self::require_unprotected`]: when
    /// the store refused it because a flag was set meanwhile, the refusal names the flag as
    /// [`Self::require_unprotected`] does.
    pub(crate) async fn refused_meanwhile<T>(
        &self,
        outcome: Result<T>,
        wh: &WarehouseHandle,
        namespace: Option<&NamespaceIdent>,
        tabular: Option<Tabular<'_>>,
        action: &str,
    ) -> Result<T> {
        match outcome {
            Err(CatalogError::Conflict {
                error_type: "DeletionProtectedException",
                message,
            }) => {
                self.require_unprotected(wh, namespace, tabular, action)
                    .await?;
                Err(CatalogError::protected(format!(
                    "cannot {action}: {message}"
                )))
            }
            other => other,
        }
    }

    /// Refuses moving a table or view from namespace `from` to `to` (`action`) when deletion
    /// protection set on `from` or a namespace above it does not cover `to`: protection
    /// covers what is inside, and a move out of it followed by a drop would be a drop the
    /// flag did not refuse. (A flag on the table or view itself moves with it; one on the
    /// warehouse covers both ends.)
    pub(crate) async fn require_kept_inside(
        &self,
        wh: &WarehouseHandle,
        from: &NamespaceIdent,
        to: &NamespaceIdent,
        action: &str,
    ) -> Result<()> {
        let covering_to: std::collections::HashSet<Uuid> = self
            .protection_chain(wh, Some(to), None)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let left: Vec<(Uuid, String)> = self
            .protection_chain(wh, Some(from), None)
            .await?
            .into_iter()
            .filter(|(id, _)| !covering_to.contains(id))
            .collect();
        match self.nearest_protection(left).await? {
            None => Ok(()),
            Some(governing) => Err(CatalogError::protected(format!(
                "cannot {action}: {FLAG} is set on {} (by {}) and covers what is inside it; \
                 a holder of manage-warehouses must clear it first",
                governing.set_on, governing.protection.set_by
            ))),
        }
    }

    /// Sets or clears deletion protection on a warehouse, namespace, table or view; true when
    /// that changed anything. Needs `manage-warehouses` on the object.
    pub async fn set_protection(
        &self,
        caller: &Caller,
        target: &SecurableRef,
        protected: bool,
    ) -> Result<bool> {
        let (wh, id, kind) = self.protectable(caller, target).await?;
        let protection = protected.then(|| Protection {
            securable_id: id,
            warehouse_id: wh.warehouse.id,
            kind,
            set_by: caller.principal.name.clone(),
            set_at_ms: now_ms(),
        });
        self.store.set_protection(id, protection.as_ref()).await
    }

    /// The protection set on the object itself, and the one that governs it (its own or a
    /// container's). Needs `manage-warehouses` on the object.
    pub async fn protection_of(
        &self,
        caller: &Caller,
        target: &SecurableRef,
    ) -> Result<(Option<Protection>, Option<Governing>)> {
        let (wh, id, kind) = self.protectable(caller, target).await?;
        let own = self.store.protections(&[id]).await?.into_iter().next();
        let governing = match target {
            SecurableRef::Warehouse { .. } => self.governing_protection(&wh, None, None).await?,
            SecurableRef::Namespace { namespace, .. } => {
                let ns = NamespaceIdent::from_vec(namespace.clone())
                    .map_err(|e| CatalogError::bad_request(format!("namespace: {e}")))?;
                self.governing_protection(&wh, Some(&ns), None).await?
            }
            SecurableRef::Table {
                namespace, name, ..
            }
            | SecurableRef::View {
                namespace, name, ..
            } => {
                let ns = NamespaceIdent::from_vec(namespace.clone())
                    .map_err(|e| CatalogError::bad_request(format!("namespace: {e}")))?;
                let tabular_kind = if kind == ProtectedKind::Table {
                    TabularKind::Table
                } else {
                    TabularKind::View
                };
                let tabular = Tabular {
                    id,
                    kind: tabular_kind,
                    name,
                };
                self.governing_protection(&wh, Some(&ns), Some(tabular))
                    .await?
            }
            SecurableRef::Server => None,
        };
        Ok((own, governing))
    }

    /// The warehouse, id and kind of an object protection can be set on, once the caller is
    /// known to hold `manage-warehouses` on it.
    async fn protectable(
        &self,
        caller: &Caller,
        target: &SecurableRef,
    ) -> Result<(std::sync::Arc<WarehouseHandle>, Uuid, ProtectedKind)> {
        let (warehouse, kind) = match target {
            SecurableRef::Server => {
                return Err(CatalogError::bad_request(format!(
                    "{FLAG} is set on a warehouse, namespace, table or view, not on the server"
                )));
            }
            SecurableRef::Warehouse { warehouse } => (warehouse, ProtectedKind::Warehouse),
            SecurableRef::Namespace { warehouse, .. } => (warehouse, ProtectedKind::Namespace),
            SecurableRef::Table { warehouse, .. } => (warehouse, ProtectedKind::Table),
            SecurableRef::View { warehouse, .. } => (warehouse, ProtectedKind::View),
        };
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let securable = self.resolve_securable(target).await?;
        // Hidden objects answer as missing ones do.
        caller.require(
            Privilege::ManageWarehouses,
            &securable.scope,
            || match target {
                SecurableRef::Namespace { namespace, .. } => {
                    CatalogError::no_such_namespace(namespace.join("."))
                }
                SecurableRef::Table {
                    namespace, name, ..
                } => CatalogError::no_such_table(format!("{}.{name}", namespace.join("."))),
                SecurableRef::View {
                    namespace, name, ..
                } => CatalogError::no_such_view(format!("{}.{name}", namespace.join("."))),
                _ => CatalogError::no_such_warehouse(warehouse),
            },
        )?;
        let id = Uuid::parse_str(&securable.id)
            .map_err(|e| CatalogError::internal("securable id", e))?;
        Ok((wh, id, kind))
    }
}
