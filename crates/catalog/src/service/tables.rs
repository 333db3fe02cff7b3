//! Tables: create (and stage), load, commit, drop, rename, register, unregister.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableCreation, TableIdent, TableRequirement, TableUpdate};
use uuid::Uuid;

use super::{CatalogService, WarehouseHandle};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::ident::{validate_name, validate_namespace};
use crate::metadata::next_metadata_location;
use crate::model::{
    NamespaceRecord, NewTabular, Page, PageRequest, TabularKind, TabularRecord, Visibility,
};
use crate::{CatalogError, Result};

/// What a client asks for when it creates a table.
#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub write_order: Option<SortOrder>,
    pub stage_create: bool,
    pub properties: HashMap<String, String>,
}

/// A table's current metadata. `metadata_location` is `None` for a staged create.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub metadata_location: Option<String>,
    pub metadata: Arc<TableMetadata>,
}

/// One table's part of a commit.
#[derive(Debug, Clone)]
pub struct TableCommitRequest {
    pub ident: TableIdent,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}

/// A location in the one spelling the store keeps and compares.
pub(crate) fn canonical_location(location: &str) -> Result<String> {
    Ok(floe_storage::Location::parse(location)?.to_string())
}

pub(crate) fn sanitize_segment(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub(crate) fn validate_ident(ident: &TableIdent, what: &str) -> Result<()> {
    validate_namespace(&ident.namespace)?;
    validate_name(what, &ident.name)
}

/// Takes `format-version` out of requested properties: it is a table setting, not a property.
fn take_format_version(properties: &mut HashMap<String, String>) -> Result<FormatVersion> {
    match properties.remove("format-version").as_deref() {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(other) => Err(CatalogError::bad_request(format!(
            "property format-version must be 1, 2 or 3, not {other:?}"
        ))),
    }
}

impl CatalogService {
    /// The namespace, or `NoSuchNamespace`.
    pub(crate) async fn require_namespace(
        &self,
        wh: &WarehouseHandle,
        ns: &NamespaceIdent,
    ) -> Result<NamespaceRecord> {
        self.store
            .get_namespace(wh.warehouse.id, ns)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(ns.join(".")))
    }

    /// The location of a new table or view: the one the client asked for, as it spelled it,
    /// when it lies inside the warehouse; otherwise below the namespace's `location` property
    /// if set, else below the warehouse root, ending in `<name>-<id>` so a re-created name
    /// never shares files with its predecessor. Either way the location is claimed
    /// ([`CatalogService::claim_location`]).
    pub(crate) async fn new_location(
        &self,
        wh: &WarehouseHandle,
        ns: &NamespaceIdent,
        name: &str,
        id: Uuid,
        requested: Option<&str>,
    ) -> Result<String> {
        let namespace = self.require_namespace(wh, ns).await?;
        if let Some(requested) = requested {
            self.claim_location(wh, requested, None).await?;
            return Ok(requested.trim_end_matches('/').to_string());
        }
        let leaf = format!("{}-{}", sanitize_segment(name), id.simple());
        let base = match namespace.properties.get("location") {
            Some(location) => wh.storage.require_inside(location)?,
            None => {
                let path: Vec<String> = ns.iter().map(|p| sanitize_segment(p)).collect();
                wh.storage.root().join(&path.join("/"))
            }
        };
        let location = base.join(&leaf).to_string();
        // A location of its own making (its leaf ends in the new id): checked, and its overlap
        // left to the store, which checks it inside the transaction that claims it.
        self.check_location(wh, &location)?;
        Ok(location)
    }

    /// Checks a location a table or view is to take (created, registered or moved to), and
    /// returns it in canonical spelling, which is how the store keeps and compares it: inside
    /// the warehouse but not its root nor Floe's own directory there, free of characters storage policies read as patterns
    /// and of `%` (an escape to some clients, not to others), and overlapping no other
    /// table's or view's location (`except` is the tabular moving). The store checks the
    /// overlap again inside the transaction that claims it.
    pub(crate) async fn claim_location(
        &self,
        wh: &WarehouseHandle,
        location: &str,
        except: Option<Uuid>,
    ) -> Result<String> {
        let canonical = self.check_location(wh, location)?;
        self.require_free_location(wh, &canonical, except).await?;
        Ok(canonical)
    }

    /// Everything [`CatalogService::claim_location`] checks but the overlap with others.
    fn check_location(&self, wh: &WarehouseHandle, location: &str) -> Result<String> {
        let parsed = wh.storage.require_inside(location)?;
        if parsed == *wh.storage.root() {
            return Err(CatalogError::bad_request(format!(
                "location {location} is the warehouse root; a table or view needs a location of \
                 its own below it"
            )));
        }
        let reserved = wh.storage.root().join(floe_storage::FLOE_DIR);
        if parsed.is_within(&reserved) {
            return Err(CatalogError::bad_request(format!(
                "location {location} lies in {reserved}, which Floe keeps for its own files; \
                 choose a location outside it"
            )));
        }
        if let Some(c) = parsed.pattern_character() {
            return Err(CatalogError::bad_request(format!(
                "location {location} contains '{c}', which storage access policies read as a \
                 pattern; choose a location without '*', '?' and '$'"
            )));
        }
        if parsed.path().contains('%') {
            // PyArrow's file systems decode `%2D` to `-`; object_store and Hadoop keep it: two
            // clients would read two sets of files (one of them, perhaps, another table's).
            return Err(CatalogError::bad_request(format!(
                "location {location} contains '%', which some clients decode as an escape and \
                 others keep; choose a location without '%'"
            )));
        }
        Ok(parsed.to_string())
    }

    pub(crate) async fn find_tabular(
        &self,
        wh: &WarehouseHandle,
        ident: &TableIdent,
    ) -> Result<Option<TabularRecord>> {
        self.store
            .get_tabular(wh.warehouse.id, &ident.namespace, &ident.name)
            .await
    }

    /// The table, if the caller holds `privilege` on it (403), or can see it at all (404).
    pub(crate) async fn table_record(
        &self,
        caller: &Caller,
        wh: &WarehouseHandle,
        ident: &TableIdent,
        privilege: Privilege,
    ) -> Result<TabularRecord> {
        match self.find_tabular(wh, ident).await? {
            Some(record) if record.kind == TabularKind::Table => {
                caller.require(privilege, &record.scope(), || {
                    CatalogError::no_such_table(ident)
                })?;
                Ok(record)
            }
            _ => Err(CatalogError::no_such_table(ident)),
        }
    }

    pub(crate) fn exists_error(kind: TabularKind, ident: &TableIdent) -> CatalogError {
        match kind {
            TabularKind::Table => {
                CatalogError::already_exists(format!("Table already exists: {ident}"))
            }
            TabularKind::View => {
                CatalogError::already_exists(format!("View with same name already exists: {ident}"))
            }
        }
    }

    pub async fn create_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        mut request: CreateTable,
    ) -> Result<LoadedTable> {
        let ident = TableIdent::new(ns.clone(), request.name.clone());
        validate_ident(&ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::CreateTable,
            &Scope::namespace(wh.warehouse.id, ns),
            || CatalogError::no_such_namespace(ns.join(".")),
        )?;
        let id = Uuid::now_v7();
        let location = self
            .new_location(&wh, ns, &request.name, id, request.location.as_deref())
            .await?;
        if let Some(existing) = self.find_tabular(&wh, &ident).await? {
            return Err(Self::exists_error(existing.kind, &ident));
        }
        let format_version = take_format_version(&mut request.properties)?;
        let creation = TableCreation::builder()
            .name(request.name.clone())
            .location(location.clone())
            .schema(request.schema)
            .partition_spec_opt(request.partition_spec)
            .sort_order_opt(request.write_order)
            .properties(request.properties)
            .format_version(format_version)
            .build();
        let metadata = TableMetadataBuilder::from_table_creation(creation)
            .and_then(|b| b.build())
            .map_err(crate::commit::from_iceberg)?
            .metadata;
        crate::paths::check_table_paths(&metadata, None)?;
        let metadata = Arc::new(metadata);
        if request.stage_create {
            return Ok(LoadedTable {
                ident,
                metadata_location: None,
                metadata,
            });
        }
        let metadata_location = next_metadata_location(&location, None, metadata.properties());
        self.metadata
            .write_table(&wh.storage, &metadata_location, metadata.clone())
            .await?;
        let inserted = self
            .store
            .create_tabular(&NewTabular {
                id,
                warehouse_id: wh.warehouse.id,
                namespace: ns.clone(),
                name: request.name,
                kind: TabularKind::Table,
                metadata_location: metadata_location.clone(),
                location: canonical_location(&location)?,
            })
            .await;
        self.settle_create(&wh, inserted, &metadata_location)
            .await?;
        Ok(LoadedTable {
            ident,
            metadata_location: Some(metadata_location),
            metadata,
        })
    }

    /// Turns the store's answer to a create into the caller's: a create that definitely did
    /// not happen leaves no file behind; one whose outcome is unknown keeps the file the store
    /// may point at.
    pub(crate) async fn settle_create(
        &self,
        wh: &WarehouseHandle,
        inserted: Result<()>,
        metadata_location: &str,
    ) -> Result<()> {
        match inserted {
            Ok(()) => Ok(()),
            // Refused (a taken name or location, a missing namespace): nothing was applied.
            Err(
                e @ (CatalogError::AlreadyExists { .. }
                | CatalogError::NotFound { .. }
                | CatalogError::BadRequest { .. }),
            ) => {
                self.discard_file(wh, metadata_location).await;
                Err(e)
            }
            Err(e) => {
                tracing::error!(error = %e, "store failed while creating; outcome unknown");
                Err(CatalogError::CommitStateUnknown(
                    "the metadata store failed while creating; the create may or may not have been applied"
                        .to_string(),
                ))
            }
        }
    }

    /// Deletes a metadata file that never became current; failures are only logged.
    pub(crate) async fn discard_file(&self, wh: &WarehouseHandle, location: &str) {
        if let Err(e) = wh.storage.delete(location).await {
            tracing::warn!(location, error = %e, "delete metadata file of failed commit");
        }
    }

    pub async fn load_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<LoadedTable> {
        Ok(self.load_table_record(caller, warehouse, ident).await?.0)
    }

    /// The table as [`Self::load_table`] reads it, with its record.
    pub(crate) async fn load_table_record(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<(LoadedTable, TabularRecord)> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = self
            .table_record(caller, &wh, ident, Privilege::ReadMetadata)
            .await?;
        let metadata = self
            .metadata
            .read_table(&wh.storage, &record.metadata_location)
            .await?;
        let loaded = LoadedTable {
            ident: ident.clone(),
            metadata_location: Some(record.metadata_location.clone()),
            metadata,
        };
        Ok((loaded, record))
    }

    /// The current metadata location of a table, without reading the file (for ETags).
    pub async fn table_metadata_location(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<String> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        Ok(self
            .table_record(caller, &wh, ident, Privilege::ReadMetadata)
            .await?
            .metadata_location)
    }

    /// Checks that the table exists and the caller holds `privilege` on it.
    pub async fn authorize_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        privilege: Privilege,
    ) -> Result<()> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        self.table_record(caller, &wh, ident, privilege)
            .await
            .map(|_| ())
    }

    pub async fn table_exists(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<bool> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        Ok(matches!(
            self.find_tabular(&wh, ident).await?,
            Some(r) if r.kind == TabularKind::Table && caller.grants.sees(&r.scope())
        ))
    }

    /// Every table of a warehouse, walking its namespaces (as the system: for background work).
    pub async fn all_tables(&self, warehouse: &str) -> Result<Vec<TableIdent>> {
        let system = Caller::system();
        let catalog = self;
        let mut tables = Vec::new();
        let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
        while let Some(parent) = pending.pop() {
            let mut token = None;
            loop {
                let page = catalog
                    .list_namespaces(
                        &system,
                        warehouse,
                        parent.as_ref(),
                        &PageRequest {
                            token: token.clone(),
                            size: Some(1000),
                        },
                    )
                    .await?;
                for namespace in page.items {
                    pending.push(Some(namespace));
                }
                token = page.next_token;
                if token.is_none() {
                    break;
                }
            }
            let Some(namespace) = parent else { continue };
            let mut token = None;
            loop {
                let page = catalog
                    .list_tables(
                        &system,
                        warehouse,
                        &namespace,
                        &PageRequest {
                            token: token.clone(),
                            size: Some(1000),
                        },
                    )
                    .await?;
                for name in page.items {
                    tables.push(TableIdent::new(namespace.clone(), name));
                }
                token = page.next_token;
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(tables)
    }

    pub async fn list_tables(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        page: &PageRequest,
    ) -> Result<Page<String>> {
        self.list_tabulars(caller, warehouse, ns, TabularKind::Table, page)
            .await
    }

    pub(crate) async fn list_tabulars(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
    ) -> Result<Page<String>> {
        validate_namespace(ns)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let scope = Scope::namespace(wh.warehouse.id, ns);
        caller.require_visible(&scope, || CatalogError::no_such_namespace(ns.join(".")))?;
        self.require_namespace(&wh, ns).await?;
        let list = match kind {
            TabularKind::Table => Privilege::ListTables,
            TabularKind::View => Privilege::ListViews,
        };
        let visibility = (!caller.grants.allows(list, &scope)).then(|| Visibility {
            principal: caller.principal.id,
            prefix: super::namespaces::tabular_prefix(wh.warehouse.id, ns),
        });
        self.store
            .list_tabulars(wh.warehouse.id, ns, kind, page, visibility.as_ref())
            .await
    }

    /// Commits one table; see [`CatalogService::commit_tables`].
    pub async fn commit_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        request: TableCommitRequest,
    ) -> Result<LoadedTable> {
        let mut committed = self.commit_tables(caller, warehouse, vec![request]).await?;
        Ok(committed.remove(0))
    }

    pub async fn drop_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        purge: bool,
    ) -> Result<()> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = self
            .table_record(caller, &wh, ident, Privilege::DropTable)
            .await?;
        if purge {
            let metadata = self
                .metadata
                .read_table(&wh.storage, &record.metadata_location)
                .await?;
            if metadata
                .properties()
                .get("gc.enabled")
                .is_some_and(|v| v.eq_ignore_ascii_case("false"))
            {
                return Err(CatalogError::bad_request(format!(
                    "Cannot purge table {ident}: gc.enabled is false (its files may belong to \
                     other tables); drop it without purging"
                )));
            }
        }
        match self
            .remove_tabular(
                caller,
                &wh,
                &record,
                super::dropped::Removal::Drop { purge },
            )
            .await?
        {
            super::dropped::Removed::Missed => Err(CatalogError::no_such_table(ident)),
            _ => Ok(()),
        }
    }

    /// Takes back a table the caller has just created whose first rows could not be written
    /// (a `CREATE TABLE AS SELECT` that failed or was abandoned): dropped and purged only
    /// while its metadata is still the file the create wrote, so a writer that reached the
    /// table in between keeps it. No privilege beyond the create's is needed: nothing but the
    /// create is undone.
    pub async fn undo_create_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        created: &LoadedTable,
    ) -> Result<()> {
        let Some(location) = created.metadata_location.as_deref() else {
            return Ok(());
        };
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let Some(record) = self.find_tabular(&wh, &created.ident).await? else {
            return Ok(());
        };
        if record.kind != TabularKind::Table || record.metadata_location != location {
            return Ok(());
        }
        // Neither protection nor soft delete applies: nothing but the create is undone.
        if self.store.drop_tabular_at(record.id, location, &[]).await? {
            self.purge_files(&wh, &created.ident, &record.location)
                .await;
        }
        Ok(())
    }

    /// Refuses a (canonical) location that equals, contains or lies inside another table's
    /// or view's.
    async fn require_free_location(
        &self,
        wh: &WarehouseHandle,
        location: &str,
        except: Option<Uuid>,
    ) -> Result<()> {
        match self
            .store
            .location_in_use(wh.warehouse.id, location, except)
            .await?
        {
            Some(other) => Err(CatalogError::bad_request(format!(
                "location {location} overlaps the location of {other}"
            ))),
            None => Ok(()),
        }
    }

    pub async fn rename_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        from: &TableIdent,
        to: &TableIdent,
    ) -> Result<()> {
        self.rename_tabular(caller, warehouse, from, to, TabularKind::Table)
            .await
    }

    pub(crate) async fn rename_tabular(
        &self,
        caller: &Caller,
        warehouse: &str,
        from: &TableIdent,
        to: &TableIdent,
        kind: TabularKind,
    ) -> Result<()> {
        let what = kind.as_str();
        validate_ident(from, what)?;
        validate_ident(to, what)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let missing = || match kind {
            TabularKind::Table => CatalogError::no_such_table(from),
            TabularKind::View => CatalogError::no_such_view(from),
        };
        let (drop, create) = match kind {
            TabularKind::Table => (Privilege::DropTable, Privilege::CreateTable),
            TabularKind::View => (Privilege::DropView, Privilege::CreateView),
        };
        let record = match self.find_tabular(&wh, from).await? {
            Some(r) if r.kind == kind => r,
            _ => return Err(missing()),
        };
        caller.require(drop, &record.scope(), missing)?;
        caller.require(
            create,
            &Scope::namespace(wh.warehouse.id, &to.namespace),
            || CatalogError::no_such_namespace(to.namespace.join(".")),
        )?;
        self.require_namespace(&wh, &to.namespace).await?;
        if from == to {
            return Ok(());
        }
        if from.namespace != to.namespace {
            self.require_kept_inside(
                &wh,
                &from.namespace,
                &to.namespace,
                &format!("move {what} {from} to {to}"),
            )
            .await?;
        }
        let taken = |kind: TabularKind| {
            let what = if kind == TabularKind::Table {
                "Table"
            } else {
                "View"
            };
            CatalogError::already_exists(format!(
                "Cannot rename {from} to {to}. {what} already exists"
            ))
        };
        if let Some(existing) = self.find_tabular(&wh, to).await? {
            return Err(taken(existing.kind));
        }
        self.store
            .rename_tabular(record.id, &to.namespace, &to.name)
            .await
            .map_err(|e| match e {
                CatalogError::AlreadyExists { .. } => taken(kind),
                other => other,
            })
    }

    /// Registers existing metadata as a table.
    pub async fn register_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        metadata_location: &str,
        overwrite: bool,
    ) -> Result<LoadedTable> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::CreateTable,
            &Scope::namespace(wh.warehouse.id, &ident.namespace),
            || CatalogError::no_such_namespace(ident.namespace.join(".")),
        )?;
        wh.storage.require_inside(metadata_location)?;
        self.require_namespace(&wh, &ident.namespace).await?;
        let metadata = self.read_offered_metadata(&wh, metadata_location).await?;
        // The metadata must be the table's own: below its location, as everything it names.
        let table_location = floe_storage::Location::parse(metadata.location())?;
        if !floe_storage::Location::parse(metadata_location)?.is_within(&table_location) {
            return Err(CatalogError::bad_request(format!(
                "metadata file {metadata_location} does not lie under its table's location {}",
                metadata.location()
            )));
        }
        crate::paths::check_table_paths(&metadata, None)?;
        let replaced = match self.find_tabular(&wh, ident).await? {
            Some(existing) if overwrite && existing.kind == TabularKind::Table => Some(existing.id),
            Some(existing) => return Err(Self::exists_error(existing.kind, ident)),
            None => None,
        };
        let location = self
            .claim_location(&wh, metadata.location(), replaced)
            .await?;
        let tabular = NewTabular {
            id: Uuid::now_v7(),
            warehouse_id: wh.warehouse.id,
            namespace: ident.namespace.clone(),
            name: ident.name.clone(),
            kind: TabularKind::Table,
            metadata_location: metadata_location.to_string(),
            location,
        };
        match self.find_tabular(&wh, ident).await? {
            Some(existing) if overwrite && existing.kind == TabularKind::Table => {
                caller.require(Privilege::DropTable, &existing.scope(), || {
                    CatalogError::no_such_table(ident)
                })?;
                // The table it replaces is lost to the catalog (its files no longer claimed):
                // a drop, as far as deletion protection is concerned.
                let replaced = super::protection::Tabular {
                    id: existing.id,
                    kind: existing.kind,
                    name: &existing.name,
                };
                self.require_unprotected(
                    &wh,
                    Some(&ident.namespace),
                    Some(replaced),
                    &format!("replace table {ident} by registering {metadata_location}"),
                )
                .await?;
                self.store
                    .replace_tabular(&NewTabular {
                        id: existing.id,
                        ..tabular
                    })
                    .await?
            }
            Some(existing) => return Err(Self::exists_error(existing.kind, ident)),
            None => self.store.create_tabular(&tabular).await?,
        }
        Ok(LoadedTable {
            ident: ident.clone(),
            metadata_location: Some(metadata_location.to_string()),
            metadata,
        })
    }

    /// Reads a metadata file inside a warehouse (a migration compares what a source holds
    /// with what Floe holds): `manage-warehouses` on the server, and the file is no other
    /// table's to show. Named with `table`, the file must lie inside that table's location and
    /// the caller hold `read-metadata` on it; unnamed, a file inside any table's location needs
    /// `read-metadata` on the whole warehouse.
    pub async fn read_table_metadata(
        &self,
        caller: &Caller,
        warehouse: &str,
        metadata_location: &str,
        table: Option<&TableIdent>,
    ) -> Result<Arc<TableMetadata>> {
        caller.require(
            Privilege::ManageWarehouses,
            &crate::governance::authz::Scope::server(),
            || {
                CatalogError::PermissionDenied(format!(
                    "principal {} lacks the manage-warehouses privilege on the server",
                    caller.principal.name
                ))
            },
        )?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let file = wh.storage.require_inside(metadata_location)?;
        if let Some(ident) = table {
            validate_ident(ident, "table")?;
            let record = self
                .table_record(caller, &wh, ident, Privilege::ReadMetadata)
                .await?;
            let own = floe_storage::Location::parse(&record.location)?;
            if !file.is_within(&own) {
                return Err(CatalogError::bad_request(format!(
                    "{metadata_location} lies outside table {ident}'s location {}",
                    record.location
                )));
            }
        } else if !caller
            .grants
            .allows(Privilege::ReadMetadata, &Scope::warehouse(wh.warehouse.id))
            && self
                .store
                .location_in_use(wh.warehouse.id, &file.to_string(), None)
                .await?
                .is_some()
        {
            // Which table holds the file is not said: the caller may not see it.
            return Err(CatalogError::PermissionDenied(format!(
                "{metadata_location} lies in a table's location: name the table (read-metadata \
                 on it) or hold read-metadata on warehouse {warehouse}"
            )));
        }
        self.read_offered_metadata(&wh, metadata_location).await
    }

    /// Reads a metadata file a client named (registering it, or comparing it): a file that
    /// does not read is the client's mistake, named in a 400.
    async fn read_offered_metadata(
        &self,
        wh: &WarehouseHandle,
        metadata_location: &str,
    ) -> Result<Arc<TableMetadata>> {
        self.metadata
            .read_table(&wh.storage, metadata_location)
            .await
            .map_err(|e| match e {
                CatalogError::Internal { .. } => CatalogError::bad_request(format!(
                    "cannot read metadata file {metadata_location}"
                )),
                other => other,
            })
    }

    /// Removes a table from the catalog for good (soft delete does not keep it), leaving its
    /// files, and returns its last metadata. Refused under deletion protection.
    pub async fn unregister_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<LoadedTable> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        for _ in 0..=self.config.commit_retries {
            let record = self
                .table_record(caller, &wh, ident, Privilege::DropTable)
                .await?;
            let metadata = self
                .metadata
                .read_table(&wh.storage, &record.metadata_location)
                .await?;
            let removed = self
                .remove_tabular(caller, &wh, &record, super::dropped::Removal::Unregister)
                .await?;
            if removed == super::dropped::Removed::Gone {
                return Ok(LoadedTable {
                    ident: ident.clone(),
                    metadata_location: Some(record.metadata_location),
                    metadata,
                });
            }
        }
        Err(CatalogError::CommitFailed(format!(
            "table {ident} kept changing while it was being unregistered"
        )))
    }
}
