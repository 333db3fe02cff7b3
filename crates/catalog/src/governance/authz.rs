//! Authorization: roles hold privileges on securables (the server, a warehouse, a namespace,
//! a table, a view); a privilege on a securable covers everything below it.
//!
//! Securables are identified by paths (see [`Scope`]); a principal's grants are loaded once
//! and indexed so that a check costs a handful of hash lookups whatever the number of grants.
//!
//! Existence does not leak: a caller who holds nothing on or below an object, nor on any of
//! its ancestors, is told it does not exist (404). A caller who can see an object but lacks
//! the privilege for an operation gets 403.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::NamespaceIdent;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Principal;
use super::policies::DataPolicy;
use crate::{CatalogError, Result};

/// Separator of scope path segments: the unit separator, which also joins namespace levels
/// in the store, so a namespace's scope is `<warehouse id>` + SEP + its stored key.
pub const SEP: char = '\u{1f}';

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Privilege {
    ManageWarehouses,
    ManageGrants,
    ReadAudit,
    CreateNamespace,
    ListNamespaces,
    UpdateNamespace,
    DropNamespace,
    CreateTable,
    ListTables,
    DropTable,
    CreateView,
    ListViews,
    DropView,
    ReadMetadata,
    ReadData,
    WriteData,
    ManagePipelines,
    ReadSchemas,
    ManageMaintenance,
}

impl Privilege {
    pub const ALL: [Privilege; 19] = [
        Privilege::ManageWarehouses,
        Privilege::ManageGrants,
        Privilege::ReadAudit,
        Privilege::CreateNamespace,
        Privilege::ListNamespaces,
        Privilege::UpdateNamespace,
        Privilege::DropNamespace,
        Privilege::CreateTable,
        Privilege::ListTables,
        Privilege::DropTable,
        Privilege::CreateView,
        Privilege::ListViews,
        Privilege::DropView,
        Privilege::ReadMetadata,
        Privilege::ReadData,
        Privilege::WriteData,
        Privilege::ManagePipelines,
        Privilege::ReadSchemas,
        Privilege::ManageMaintenance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::ManageWarehouses => "manage-warehouses",
            Privilege::ManageGrants => "manage-grants",
            Privilege::ReadAudit => "read-audit",
            Privilege::CreateNamespace => "create-namespace",
            Privilege::ListNamespaces => "list-namespaces",
            Privilege::UpdateNamespace => "update-namespace",
            Privilege::DropNamespace => "drop-namespace",
            Privilege::CreateTable => "create-table",
            Privilege::ListTables => "list-tables",
            Privilege::DropTable => "drop-table",
            Privilege::CreateView => "create-view",
            Privilege::ListViews => "list-views",
            Privilege::DropView => "drop-view",
            Privilege::ReadMetadata => "read-metadata",
            Privilege::ReadData => "read-data",
            Privilege::WriteData => "write-data",
            Privilege::ManagePipelines => "manage-pipelines",
            Privilege::ReadSchemas => "read-schemas",
            Privilege::ManageMaintenance => "manage-maintenance",
        }
    }

    pub fn parse(s: &str) -> Option<Privilege> {
        Privilege::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Privileges a grant of `self` also gives: writing data implies reading it, reading
    /// data implies reading metadata, and managing pipelines implies reading the schema
    /// registry they decode with.
    pub fn implied(self) -> &'static [Privilege] {
        match self {
            Privilege::ManagePipelines => &[Privilege::ReadSchemas],
            Privilege::WriteData => &[Privilege::ReadData, Privilege::ReadMetadata],
            Privilege::ReadData => &[Privilege::ReadMetadata],
            _ => &[],
        }
    }
}

/// The path of a securable: `""` (server), `<warehouse id>`, then namespace levels, then
/// `t:<id>` for a table or view, joined by [`SEP`] (0x1F).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope(pub String);

impl Scope {
    pub fn server() -> Scope {
        Scope(String::new())
    }

    pub fn warehouse(id: Uuid) -> Scope {
        Scope(id.to_string())
    }

    pub fn namespace(warehouse: Uuid, ns: &NamespaceIdent) -> Scope {
        let mut path = warehouse.to_string();
        for level in ns.iter() {
            path.push(SEP);
            path.push_str(level);
        }
        Scope(path)
    }

    pub fn tabular(warehouse: Uuid, ns: &NamespaceIdent, id: Uuid) -> Scope {
        let mut scope = Scope::namespace(warehouse, ns);
        scope.0.push(SEP);
        scope.0.push_str("t:");
        scope.0.push_str(&id.to_string());
        scope
    }

    /// This scope and its ancestors, from the server down.
    fn ancestors_and_self(&self) -> Vec<&str> {
        let mut out = vec![""];
        if self.0.is_empty() {
            return out;
        }
        for (i, c) in self.0.char_indices() {
            if c == SEP {
                out.push(&self.0[..i]);
            }
        }
        out.push(&self.0);
        out
    }
}

/// A principal's grants, indexed for checks.
#[derive(Debug, Default)]
pub struct GrantSet {
    all: bool,
    by_scope: HashMap<String, HashSet<Privilege>>,
    scopes: BTreeSet<String>,
    /// The row and column policies of the principal's roles, by table id.
    policies: HashMap<String, Vec<Arc<DataPolicy>>>,
}

impl GrantSet {
    /// Everything (the root principal).
    pub fn everything() -> GrantSet {
        GrantSet {
            all: true,
            ..GrantSet::default()
        }
    }

    pub fn from_grants(grants: impl IntoIterator<Item = (String, Privilege)>) -> GrantSet {
        let mut set = GrantSet::default();
        for (scope, privilege) in grants {
            let entry = set.by_scope.entry(scope.clone()).or_default();
            entry.insert(privilege);
            entry.extend(privilege.implied().iter().copied());
            set.scopes.insert(scope);
        }
        set
    }

    /// The set with the row and column policies of the principal's roles.
    pub fn with_policies(mut self, policies: impl IntoIterator<Item = DataPolicy>) -> GrantSet {
        for policy in policies {
            self.policies
                .entry(policy.table_id.clone())
                .or_default()
                .push(Arc::new(policy));
        }
        self
    }

    /// The policies of the principal's roles on the table with id `table_id`.
    pub fn policies_on(&self, table_id: &str) -> &[Arc<DataPolicy>] {
        self.policies.get(table_id).map_or(&[], Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.scopes.len()
    }

    pub fn is_empty(&self) -> bool {
        !self.all && self.scopes.is_empty()
    }

    /// True when `privilege` is granted on `scope` or one of its ancestors.
    pub fn allows(&self, privilege: Privilege, scope: &Scope) -> bool {
        self.all
            || scope
                .ancestors_and_self()
                .into_iter()
                .any(|s| self.by_scope.get(s).is_some_and(|p| p.contains(&privilege)))
    }

    /// True when anything is granted on `scope`, on an ancestor, or below it.
    pub fn sees(&self, scope: &Scope) -> bool {
        if self.all
            || scope
                .ancestors_and_self()
                .into_iter()
                .any(|s| self.by_scope.contains_key(s))
        {
            return true;
        }
        let below = format!("{}{SEP}", scope.0);
        self.scopes
            .range(below.clone()..)
            .next()
            .is_some_and(|s| s.starts_with(&below))
    }
}

/// Storage of roles and grants. Implemented by `floe-store`.
#[async_trait]
pub trait GrantStore: Send + Sync + std::fmt::Debug {
    /// Every `(scope, privilege)` the principal's roles hold.
    async fn principal_grants(&self, principal: Uuid) -> Result<Vec<(String, Privilege)>>;
    async fn create_role(&self, name: &str) -> Result<Uuid>;
    async fn delete_role(&self, name: &str) -> Result<bool>;
    async fn list_roles(&self) -> Result<Vec<String>>;
    async fn assign_role(&self, role: &str, principal: Uuid) -> Result<()>;
    async fn unassign_role(&self, role: &str, principal: Uuid) -> Result<bool>;
    async fn roles_of(&self, principal: Uuid) -> Result<Vec<String>>;
    async fn grant(&self, role: &str, privilege: Privilege, securable: &Securable) -> Result<()>;
    async fn revoke(&self, role: &str, privilege: Privilege, securable: &Securable)
    -> Result<bool>;
    /// Grants held by a role: `(kind, securable id, scope, privilege)`.
    async fn role_grants(&self, role: &str) -> Result<Vec<GrantRecord>>;
    /// The row and column policies of the principal's roles.
    async fn principal_policies(&self, principal: Uuid) -> Result<Vec<DataPolicy>>;
    /// Sets (or replaces) `policy.role`'s policy on `policy.table_id`.
    async fn set_policy(&self, policy: &DataPolicy) -> Result<()>;
    /// Removes a role's policy on a table; false when there was none.
    async fn delete_policy(&self, role: &str, table_id: &str) -> Result<bool>;
    /// Every policy (of `role` only, when given), by role then table.
    async fn list_policies(&self, role: Option<&str>) -> Result<Vec<DataPolicy>>;
}

/// A resolved securable: its kind, id and scope.
#[derive(Debug, Clone)]
pub struct Securable {
    pub kind: &'static str,
    pub id: String,
    pub scope: Scope,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GrantRecord {
    pub role: String,
    pub privilege: Privilege,
    pub securable_kind: String,
    pub securable_id: String,
    #[serde(skip)]
    pub scope: String,
}

/// Decides what a principal may do, with a short-lived cache of each principal's grants.
///
/// Loads are single-flight: when a principal's grants expire, one request reloads them while
/// the others keep using the previous set, so a principal with many grants under heavy
/// concurrency costs one store query per lifetime, not one per request.
#[derive(Debug)]
pub struct Authorizer {
    store: Arc<dyn GrantStore>,
    ttl: Duration,
    cache: RwLock<HashMap<Uuid, (Arc<GrantSet>, Instant)>>,
    refreshing: std::sync::Mutex<HashSet<Uuid>>,
    cold_loads: std::sync::Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
}

impl Authorizer {
    /// `ttl` bounds how long a grant change takes to reach requests.
    pub fn new(store: Arc<dyn GrantStore>, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: RwLock::new(HashMap::new()),
            refreshing: std::sync::Mutex::new(HashSet::new()),
            cold_loads: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, id: Uuid) -> Option<(Arc<GrantSet>, bool)> {
        self.cache
            .read()
            .expect("grant cache")
            .get(&id)
            .map(|(set, at)| (set.clone(), at.elapsed() < self.ttl))
    }

    async fn load(&self, id: Uuid) -> Result<Arc<GrantSet>> {
        let set = Arc::new(
            GrantSet::from_grants(self.store.principal_grants(id).await?)
                .with_policies(self.store.principal_policies(id).await?),
        );
        self.cache
            .write()
            .expect("grant cache")
            .insert(id, (set.clone(), Instant::now()));
        Ok(set)
    }

    pub fn store(&self) -> &Arc<dyn GrantStore> {
        &self.store
    }

    pub async fn grants(&self, principal: &Principal) -> Result<Arc<GrantSet>> {
        if principal.is_root {
            return Ok(Arc::new(GrantSet::everything()));
        }
        let id = principal.id;
        match self.cached(id) {
            Some((set, true)) => Ok(set),
            Some((stale, false)) => {
                if !self.refreshing.lock().expect("refresh set").insert(id) {
                    return Ok(stale);
                }
                // Cleared even when this request is dropped mid-load.
                let _refreshing = RefreshGuard {
                    set: &self.refreshing,
                    id,
                };
                self.load(id).await
            }
            None => {
                let lock = self
                    .cold_loads
                    .lock()
                    .expect("cold load locks")
                    .entry(id)
                    .or_default()
                    .clone();
                let _guard = lock.lock().await;
                if let Some((set, _)) = self.cached(id) {
                    return Ok(set);
                }
                self.load(id).await
            }
        }
    }

    /// Forgets cached grants after a change made through this node.
    pub fn invalidate(&self) {
        self.cache.write().expect("grant cache").clear();
    }
}

struct RefreshGuard<'a> {
    set: &'a std::sync::Mutex<HashSet<Uuid>>,
    id: Uuid,
}

impl Drop for RefreshGuard<'_> {
    fn drop(&mut self) {
        self.set.lock().expect("refresh set").remove(&self.id);
    }
}

/// A request's caller and grants, handed to catalog operations.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub grants: Arc<GrantSet>,
}

impl Caller {
    /// A caller holding every privilege (background work, tests of the catalog alone).
    pub fn system() -> Caller {
        Caller {
            principal: Principal {
                id: Uuid::nil(),
                name: "system".into(),
                kind: super::PrincipalKind::Service,
                client_id: String::new(),
                is_root: true,
                disabled: false,
                created_at_ms: 0,
            },
            grants: Arc::new(GrantSet::everything()),
        }
    }

    /// Requires `privilege` on `scope`; `not_found` is returned when the caller cannot even
    /// see the object.
    pub fn require(
        &self,
        privilege: Privilege,
        scope: &Scope,
        not_found: impl FnOnce() -> CatalogError,
    ) -> Result<()> {
        if self.grants.allows(privilege, scope) {
            return Ok(());
        }
        if !self.grants.sees(scope) {
            return Err(CatalogError::Hidden(Box::new(not_found())));
        }
        Err(CatalogError::PermissionDenied(format!(
            "principal {} lacks the {} privilege",
            self.principal.name,
            privilege.as_str()
        )))
    }

    /// Requires that the caller can see `scope` at all.
    pub fn require_visible(
        &self,
        scope: &Scope,
        not_found: impl FnOnce() -> CatalogError,
    ) -> Result<()> {
        if self.grants.sees(scope) {
            Ok(())
        } else {
            Err(CatalogError::Hidden(Box::new(not_found())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(parts: &[&str]) -> NamespaceIdent {
        NamespaceIdent::from_strs(parts.iter().copied()).unwrap()
    }

    #[test]
    fn grants_inherit_downward_and_visibility_goes_up() {
        let wh = Uuid::new_v4();
        let other = Uuid::new_v4();
        let table = Uuid::new_v4();
        let set = GrantSet::from_grants([
            (Scope::namespace(wh, &ns(&["a"])).0, Privilege::ReadData),
            (
                Scope::tabular(wh, &ns(&["b", "c"]), table).0,
                Privilege::WriteData,
            ),
        ]);
        let deep = Scope::tabular(wh, &ns(&["a", "x"]), Uuid::new_v4());
        assert!(set.allows(Privilege::ReadData, &deep));
        assert!(set.allows(Privilege::ReadMetadata, &deep), "implied");
        assert!(!set.allows(Privilege::WriteData, &deep));
        let own = Scope::tabular(wh, &ns(&["b", "c"]), table);
        assert!(set.allows(Privilege::WriteData, &own));
        assert!(set.allows(Privilege::ReadData, &own));
        // Containers of a granted table are visible, but grant nothing.
        assert!(set.sees(&Scope::namespace(wh, &ns(&["b"]))));
        assert!(set.sees(&Scope::warehouse(wh)));
        assert!(!set.allows(Privilege::ListTables, &Scope::namespace(wh, &ns(&["b"]))));
        // Siblings and other warehouses stay invisible.
        assert!(!set.sees(&Scope::namespace(wh, &ns(&["bb"]))));
        assert!(!set.sees(&Scope::tabular(wh, &ns(&["b", "c"]), Uuid::new_v4())));
        assert!(!set.sees(&Scope::warehouse(other)));
        assert!(GrantSet::everything().allows(Privilege::ManageGrants, &Scope::server()));
    }

    #[test]
    fn caller_distinguishes_invisible_from_forbidden() {
        let wh = Uuid::new_v4();
        let caller = Caller {
            principal: Caller::system().principal,
            grants: Arc::new(GrantSet::from_grants([(
                Scope::namespace(wh, &ns(&["a"])).0,
                Privilege::ReadMetadata,
            )])),
        };
        let table = Scope::tabular(wh, &ns(&["a"]), Uuid::new_v4());
        let hidden = Scope::tabular(wh, &ns(&["z"]), Uuid::new_v4());
        let nf = || CatalogError::no_such_table("t");
        assert!(caller.require(Privilege::ReadMetadata, &table, nf).is_ok());
        assert!(matches!(
            caller.require(Privilege::WriteData, &table, nf),
            Err(CatalogError::PermissionDenied(_))
        ));
        assert!(matches!(
            caller.require(Privilege::ReadMetadata, &hidden, nf),
            Err(CatalogError::Hidden(_))
        ));
        for p in Privilege::ALL {
            assert_eq!(Privilege::parse(p.as_str()), Some(p));
        }
    }
}
