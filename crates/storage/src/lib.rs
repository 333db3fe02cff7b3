//! Floe's storage layer: where a warehouse keeps its data and metadata files.
//!
//! A warehouse has a [`StorageProfile`]: a local directory or an S3-compatible bucket and
//! prefix. [`WarehouseStorage`] turns a profile into one `object_store` instance and answers
//! the questions the catalog asks of storage: is a location inside the warehouse, read, write
//! and delete a file, list under a prefix.
//!
//! The same object store backs iceberg's `FileIO` through [`ObjectStoreStorage`], so iceberg's
//! metadata and manifest readers and writers go through exactly one IO stack.

pub mod cache;
mod file_io;
mod location;
mod profile;
pub mod sigv4;
pub mod sts;

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

pub use file_io::{ObjectStoreStorage, ObjectStoreStorageFactory};
pub use location::Location;
pub use profile::{S3Profile, StorageProfile};

/// Errors raised by the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The profile is not usable (bad path, missing bucket, ...).
    #[error("invalid storage profile: {0}")]
    InvalidProfile(String),
    /// A location is malformed or lies outside the warehouse.
    #[error("invalid location '{location}': {reason}")]
    InvalidLocation { location: String, reason: String },
    /// The file does not exist.
    #[error("file not found: {0}")]
    NotFound(String),
    /// The object store failed.
    #[error("object store error on '{location}': {source}")]
    ObjectStore {
        location: String,
        #[source]
        source: object_store::Error,
    },
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// One warehouse's storage: its profile, root location and object store.
#[derive(Debug, Clone)]
pub struct WarehouseStorage {
    profile: StorageProfile,
    root: Location,
    store: Arc<dyn ObjectStore>,
}

impl WarehouseStorage {
    /// Builds the object store a profile describes. Local directories are created if missing.
    pub fn new(profile: StorageProfile) -> Result<Self> {
        let root = profile.root_location()?;
        let store = profile.build_object_store()?;
        Ok(Self {
            profile,
            root,
            store,
        })
    }

    pub fn profile(&self) -> &StorageProfile {
        &self.profile
    }

    /// The warehouse root, e.g. `file:///data/warehouse` or `s3://bucket/prefix`.
    pub fn root(&self) -> &Location {
        &self.root
    }

    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// An iceberg `FileIO` over this warehouse's object store.
    pub fn file_io(&self) -> iceberg::io::FileIO {
        iceberg::io::FileIOBuilder::new(Arc::new(ObjectStoreStorageFactory::new(
            self.profile.clone(),
            self.store.clone(),
        )))
        .build()
    }

    /// Parses `location` and checks that it lies inside this warehouse.
    pub fn require_inside(&self, location: &str) -> Result<Location> {
        let parsed = Location::parse(location)?;
        if !parsed.is_within(&self.root) {
            return Err(StorageError::InvalidLocation {
                location: location.to_string(),
                reason: format!("it is outside the warehouse root {}", self.root),
            });
        }
        Ok(parsed)
    }

    fn object_path(&self, location: &str) -> Result<ObjectPath> {
        let parsed = self.require_inside(location)?;
        Ok(self.profile.object_path(&parsed))
    }

    pub async fn read(&self, location: &str) -> Result<Bytes> {
        let path = self.object_path(location)?;
        let result = self
            .store
            .get(&path)
            .await
            .map_err(|e| map_store_error(location, e))?;
        result
            .bytes()
            .await
            .map_err(|e| map_store_error(location, e))
    }

    pub async fn write(&self, location: &str, bytes: Bytes) -> Result<()> {
        let path = self.object_path(location)?;
        self.store
            .put(&path, bytes.into())
            .await
            .map_err(|e| map_store_error(location, e))?;
        Ok(())
    }

    /// Deletes a file; a file that is already gone is not an error.
    pub async fn delete(&self, location: &str) -> Result<()> {
        let path = self.object_path(location)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_store_error(location, e)),
        }
    }

    pub async fn exists(&self, location: &str) -> Result<bool> {
        let path = self.object_path(location)?;
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(map_store_error(location, e)),
        }
    }

    /// Lists every file under `prefix` (a directory-like location), as full locations.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .list_with_times(prefix)
            .await?
            .into_iter()
            .map(|(location, _)| location)
            .collect())
    }

    /// Lists every file under `prefix` with its last-modified time (epoch milliseconds).
    pub async fn list_with_times(&self, prefix: &str) -> Result<Vec<(String, i64)>> {
        let parsed = self.require_inside(prefix)?;
        let path = self.profile.object_path(&parsed);
        let metas: Vec<_> = self
            .store
            .list(Some(&path))
            .map_err(|e| map_store_error(prefix, e))
            .try_collect()
            .await?;
        Ok(metas
            .into_iter()
            .map(|m| {
                (
                    self.profile.location_of(&m.location).to_string(),
                    m.last_modified.timestamp_millis(),
                )
            })
            .collect())
    }

    /// Deletes every file under `prefix`; used when a table is purged.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize> {
        let files = self.list(prefix).await?;
        let count = files.len();
        let paths = futures::stream::iter(
            files
                .iter()
                .map(|f| self.object_path(f))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .map(Ok),
        )
        .boxed();
        self.store
            .delete_stream(paths)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| map_store_error(prefix, e))?;
        Ok(count)
    }
}

pub(crate) fn map_store_error(location: &str, e: object_store::Error) -> StorageError {
    match e {
        object_store::Error::NotFound { .. } => StorageError::NotFound(location.to_string()),
        source => StorageError::ObjectStore {
            location: location.to_string(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_warehouse_round_trips_and_rejects_outside_locations() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("wh");
        let storage = WarehouseStorage::new(StorageProfile::Local {
            path: root.to_string_lossy().into_owned(),
        })
        .unwrap();
        let file = format!("{}/ns/t/metadata/00000.json", storage.root());
        storage
            .write(&file, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        assert_eq!(storage.read(&file).await.unwrap().as_ref(), b"{}");
        assert!(storage.exists(&file).await.unwrap());
        let listed = storage
            .list(&format!("{}/ns", storage.root()))
            .await
            .unwrap();
        assert_eq!(listed, vec![file.clone()]);

        let outside = format!("file://{}/elsewhere/x.json", dir.path().display());
        let err = storage.write(&outside, Bytes::new()).await.unwrap_err();
        assert!(matches!(err, StorageError::InvalidLocation { .. }), "{err}");

        assert_eq!(
            storage
                .delete_prefix(&format!("{}/ns", storage.root()))
                .await
                .unwrap(),
            1
        );
        assert!(!storage.exists(&file).await.unwrap());
        storage.delete(&file).await.unwrap();
    }

    #[tokio::test]
    async fn file_io_bridge_reads_what_storage_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let storage = WarehouseStorage::new(StorageProfile::Local {
            path: dir.path().to_string_lossy().into_owned(),
        })
        .unwrap();
        let file = format!("{}/a/b.bin", storage.root());
        let io = storage.file_io();
        io.new_output(&file)
            .unwrap()
            .write(Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert_eq!(storage.read(&file).await.unwrap().as_ref(), b"hello");
        let input = io.new_input(&file).unwrap();
        assert_eq!(input.metadata().await.unwrap().size, 5);
        let reader = input.reader().await.unwrap();
        assert_eq!(reader.read(1..4).await.unwrap().as_ref(), b"ell");
        assert!(io.exists(&file).await.unwrap());
        io.delete(&file).await.unwrap();
        assert!(!io.exists(&file).await.unwrap());
    }
}
