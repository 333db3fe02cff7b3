//! What checking and repairing a table needs from the catalog that loading it does not give:
//! the table's record and storage without reading its metadata (which may be what is
//! broken), its metadata read from storage rather than from memory, and pointing the table
//! back at an earlier metadata file of its own (a compare-and-swap, audited like a commit).

use std::sync::Arc;

use floe_storage::{Location, WarehouseStorage};
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;

use super::CatalogService;
use crate::governance::authz::{Caller, Privilege};
use crate::model::{MetadataSwap, SwapFailure, TabularRecord};
use crate::{CatalogError, Result};

/// A table as the catalog records it, and the storage of its files.
#[derive(Debug, Clone)]
pub struct TableFiles {
    pub record: TabularRecord,
    /// The table's storage: everything it reaches lies below the table's location.
    pub storage: WarehouseStorage,
}

impl CatalogService {
    /// The table's record and storage, for a caller holding `privilege` on it (403), or
    /// seeing it at all (404) — without reading its metadata.
    pub async fn table_files(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        privilege: Privilege,
    ) -> Result<TableFiles> {
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = self.table_record(caller, &wh, ident, privilege).await?;
        let storage = wh.storage.for_table(&record.location)?;
        Ok(TableFiles { record, storage })
    }

    /// The table metadata file at `location`, read and decoded from storage now.
    pub async fn verify_table_metadata(
        &self,
        files: &TableFiles,
        location: &str,
    ) -> Result<Arc<TableMetadata>> {
        self.metadata.verify_table(&files.storage, location).await
    }

    /// Points the table from its current metadata file `expected` back at `earlier`, one of
    /// its own earlier metadata files, if it is still at `expected` (409 otherwise): the
    /// repair of a current metadata file that no longer reads. `earlier` must lie in the
    /// table's metadata directory, be of an earlier version, read as valid metadata of this
    /// table's location, and name only paths inside it.
    pub async fn repoint_table(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        expected: &str,
        earlier: &str,
    ) -> Result<()> {
        let files = self
            .table_files(caller, warehouse, ident, Privilege::ManageMaintenance)
            .await?;
        let table_location = Location::parse(&files.record.location)?;
        let metadata_dir = table_location.join("metadata");
        if !Location::parse(earlier)?.is_within(&metadata_dir) {
            return Err(CatalogError::bad_request(format!(
                "{earlier} is not in the metadata directory of table {ident}"
            )));
        }
        let earlier_version = crate::metadata::metadata_version(earlier);
        let current_version = crate::metadata::metadata_version(expected);
        if earlier_version
            .zip(current_version)
            .is_none_or(|(earlier, current)| earlier >= current)
        {
            return Err(CatalogError::bad_request(format!(
                "{earlier} is not an earlier metadata version of table {ident} than {expected}"
            )));
        }
        let metadata = self.verify_table_metadata(&files, earlier).await?;
        if Location::parse(metadata.location())? != table_location {
            return Err(CatalogError::bad_request(format!(
                "{earlier} describes a table at {}, not {ident}",
                metadata.location()
            )));
        }
        crate::paths::check_table_paths(&metadata, None)?;
        let swap = MetadataSwap::Update {
            id: files.record.id,
            expected_location: expected.to_string(),
            new_location: earlier.to_string(),
            moved_to: None,
        };
        match self.store.commit(&[swap]).await {
            Ok(()) => Ok(()),
            Err(SwapFailure::Conflict(_)) => Err(CatalogError::CommitFailed(format!(
                "table {ident} changed meanwhile: its metadata is no longer {expected}"
            ))),
            Err(SwapFailure::Store(e)) => Err(e),
            Err(other) => Err(CatalogError::internal(
                "repoint a table",
                format!("{other:?}"),
            )),
        }
    }
}
