//! Floe's storage layer: where a warehouse keeps its data and metadata files.
//!
//! A warehouse has a [`StorageProfile`]: a local directory or an S3-compatible bucket and
//! prefix. [`WarehouseStorage`] turns a profile into one `object_store` instance and answers
//! the questions the catalog asks of storage: is a location inside the warehouse, read, write
//! and delete a file, list under a prefix.
//!
//! The same object store backs iceberg's `FileIO` through [`ObjectStoreStorage`], so iceberg's
//! metadata and manifest readers and writers go through exactly one IO stack.

pub mod bucket;
pub mod cache;
mod file_io;
mod location;
mod profile;
mod s3_client;
pub mod sigv4;
mod staged;
pub mod sts;
pub mod validate;

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

pub use file_io::{ObjectStoreStorage, ObjectStoreStorageFactory};

/// The directory below a warehouse's root that Floe keeps for its own files (query results
/// waiting for slow clients); no table or view may lie in it.
pub const FLOE_DIR: &str = ".floe";
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

/// One warehouse's storage: its profile, root location and object store, and the part of it
/// this handle may reach — the whole warehouse, or one table ([`WarehouseStorage::for_table`]).
///
/// The object store is rooted at the warehouse root (a local store at its directory, an S3
/// store at its key prefix), so no path given to it can leave the warehouse; every location
/// is also checked against the handle's [`Reach`] before it becomes a path.
#[derive(Debug, Clone)]
pub struct WarehouseStorage {
    profile: StorageProfile,
    reach: Reach,
    store: Arc<dyn ObjectStore>,
}

/// Where a storage handle may read, write, list and delete: below `scope`, which lies inside
/// the warehouse `root` its object store is rooted at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reach {
    root: Location,
    scope: Location,
    /// Whether `scope` is a table's location (for the wording of refusals).
    table: bool,
}

impl Reach {
    fn warehouse(root: Location) -> Self {
        Self {
            scope: root.clone(),
            root,
            table: false,
        }
    }

    /// Parses `location` and checks that it lies inside the scope.
    pub fn check(&self, location: &str) -> Result<Location> {
        let parsed = Location::parse(location)?;
        if parsed.is_within(&self.scope) {
            return Ok(parsed);
        }
        let reason = if self.table {
            format!("it is outside the table's location {}", self.scope)
        } else {
            format!("it is outside the warehouse root {}", self.scope)
        };
        Err(StorageError::InvalidLocation {
            location: location.to_string(),
            reason,
        })
    }

    /// The object-store path of a location inside the scope.
    pub fn object_path(&self, location: &str) -> Result<ObjectPath> {
        self.relative_path(location).map(ObjectPath::from)
    }

    /// The path, relative to the warehouse root (where the object store is rooted), of a
    /// location inside the scope, unencoded (`object_store::path::Path::from` takes it).
    pub fn relative_path(&self, location: &str) -> Result<String> {
        let parsed = self.check(location)?;
        Ok(parsed
            .relative_to(&self.root)
            .expect("the scope lies inside the root")
            .to_string())
    }

    /// The location of an object-store path.
    fn location_of(&self, path: &ObjectPath) -> Location {
        self.root.join(path.as_ref())
    }
}

impl WarehouseStorage {
    /// Builds the object store a profile describes. Local directories are created if missing.
    pub fn new(profile: StorageProfile) -> Result<Self> {
        Self::with_retry(profile, None)
    }

    /// [`WarehouseStorage::new`] with `retry` in place of object_store's default retries.
    fn with_retry(
        profile: StorageProfile,
        retry: Option<object_store::RetryConfig>,
    ) -> Result<Self> {
        let root = profile.root_location()?;
        let store = profile.build_object_store_with(retry)?;
        Ok(Self {
            profile,
            reach: Reach::warehouse(root),
            store,
        })
    }

    pub fn profile(&self) -> &StorageProfile {
        &self.profile
    }

    /// The warehouse root, e.g. `file:///data/warehouse` or `s3://bucket/prefix`.
    pub fn root(&self) -> &Location {
        &self.reach.root
    }

    /// What this handle may reach.
    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// The warehouse's object store, rooted at the warehouse root: its paths are relative to
    /// it ([`WarehouseStorage::object_path`]).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// The same handle over `store`, a wrapper of this one's object store (a
    /// [`cache::WriteThrough`] keeping a commit's files): same root, same reach.
    pub fn with_object_store(&self, store: Arc<dyn ObjectStore>) -> WarehouseStorage {
        Self {
            profile: self.profile.clone(),
            reach: self.reach.clone(),
            store,
        }
    }

    /// Where the upsert key index checkpoint of the table at `table_location` lies: in
    /// Floe's own directory of the warehouse ([`FLOE_DIR`]: no table lies there, and no
    /// credentials vended for a table reach it), named by the table's location. Floe's
    /// upsert core writes and reads it; a purge of the table removes it.
    pub fn key_index_checkpoint(&self, table_location: &str) -> String {
        use sha2::Digest;
        let location = Location::parse(table_location)
            .map(|l| l.to_string())
            .unwrap_or_else(|_| table_location.to_string());
        let name = hex::encode(sha2::Sha256::digest(location.as_bytes()));
        self.reach
            .root
            .join(&format!("{FLOE_DIR}/key-index/{name}.bin"))
            .to_string()
    }

    /// A handle that reaches only the files of the table at `location` (which must lie
    /// inside this handle's reach): every path Floe reads, writes or deletes on a table's
    /// behalf goes through one.
    pub fn for_table(&self, location: &str) -> Result<WarehouseStorage> {
        let scope = self.reach.check(location)?;
        Ok(Self {
            profile: self.profile.clone(),
            reach: Reach {
                root: self.reach.root.clone(),
                scope,
                table: true,
            },
            store: self.store.clone(),
        })
    }

    /// An iceberg `FileIO` over this warehouse's object store, reaching what this handle
    /// reaches.
    pub fn file_io(&self) -> iceberg::io::FileIO {
        iceberg::io::FileIOBuilder::new(Arc::new(ObjectStoreStorageFactory::new(
            self.profile.clone(),
            self.reach.clone(),
            self.store.clone(),
        )))
        .build()
    }

    /// Parses `location` and checks that it lies inside this handle's reach (the warehouse,
    /// or its table).
    pub fn require_inside(&self, location: &str) -> Result<Location> {
        self.reach.check(location)
    }

    /// The object-store path of a location inside this handle's reach.
    pub fn object_path(&self, location: &str) -> Result<ObjectPath> {
        self.reach.object_path(location)
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

    /// The warehouse directory of a local warehouse (where its staged uploads lie).
    fn local_directory(&self) -> Option<std::path::PathBuf> {
        match &self.profile {
            StorageProfile::Local { path } => Some(std::path::PathBuf::from(path)),
            StorageProfile::S3(_) => None,
        }
    }

    /// Deletes a file; a file that is already gone is not an error. On a local warehouse
    /// this includes an upload left staged by a writer that died ([`staged`]).
    pub async fn delete(&self, location: &str) -> Result<()> {
        if let Some(directory) = self.local_directory() {
            let relative = self.reach.relative_path(location)?;
            if staged::is_staged(&relative) {
                return staged::remove(directory, relative).await;
            }
        }
        let path = self.object_path(location)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_store_error(location, e)),
        }
    }

    /// The size of the file at `location`, `None` when there is none.
    pub async fn size(&self, location: &str) -> Result<Option<u64>> {
        let path = self.object_path(location)?;
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
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

    /// Lists every file under `prefix` with its last-modified time (epoch milliseconds). On
    /// a local warehouse this includes uploads left staged by writers that died
    /// ([`staged`]), which the object store hides.
    pub async fn list_with_times(&self, prefix: &str) -> Result<Vec<(String, i64)>> {
        let path = self.object_path(prefix)?;
        let metas: Vec<_> = self
            .store
            .list(Some(&path))
            .map_err(|e| map_store_error(prefix, e))
            .try_collect()
            .await?;
        let mut files: Vec<(String, i64)> = metas
            .into_iter()
            .map(|m| {
                (
                    self.reach.location_of(&m.location).to_string(),
                    m.last_modified.timestamp_millis(),
                )
            })
            .collect();
        if let Some(directory) = self.local_directory() {
            let relative = self.reach.relative_path(prefix)?;
            for (file, modified) in staged::list(directory, relative).await? {
                files.push((self.reach.root.join(&file).to_string(), modified));
            }
        }
        Ok(files)
    }

    /// Deletes every file under `prefix`; used when a table is purged.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize> {
        let local = self.local_directory().is_some();
        let (staged, files): (Vec<String>, Vec<String>) = self
            .list(prefix)
            .await?
            .into_iter()
            .partition(|f| local && staged::is_staged(f));
        for file in &staged {
            self.delete(file).await?;
        }
        let count = files.len() + staged.len();
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
    async fn an_upload_left_staged_is_listed_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("wh");
        let storage = WarehouseStorage::new(StorageProfile::Local {
            path: root.to_string_lossy().into_owned(),
        })
        .unwrap();
        // What object_store leaves when its writer dies before the rename.
        std::fs::create_dir_all(root.join("ns/t/data")).unwrap();
        std::fs::write(root.join("ns/t/data/f.parquet#1"), b"half").unwrap();
        let complete = format!("{}/ns/t/data/g.parquet", storage.root());
        storage.write(&complete, Bytes::new()).await.unwrap();
        let table = storage
            .for_table(&format!("{}/ns/t", storage.root()))
            .unwrap();
        let mut listed = table
            .list(&format!("{}/ns/t", storage.root()))
            .await
            .unwrap();
        listed.sort();
        let staged = format!("{}/ns/t/data/f.parquet#1", storage.root());
        assert_eq!(listed, vec![staged.clone(), complete.clone()]);
        table.delete(&staged).await.unwrap();
        assert!(!root.join("ns/t/data/f.parquet#1").exists());
        table.delete(&staged).await.unwrap();

        std::fs::write(root.join("ns/t/data/h.parquet#7"), b"half").unwrap();
        let purged = table
            .delete_prefix(&format!("{}/ns/t", storage.root()))
            .await
            .unwrap();
        assert_eq!(purged, 2);
        assert!(std::fs::read_dir(root.join("ns/t/data")).map_or(true, |mut d| d.next().is_none()));
        // Still only inside the reach.
        let outside = format!("{}/ns/other/x.parquet#1", storage.root());
        assert!(table.delete(&outside).await.is_err());
    }

    #[tokio::test]
    async fn a_table_handle_reaches_only_its_table() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, b"outside").unwrap();
        let storage = WarehouseStorage::new(StorageProfile::Local {
            path: dir.path().join("wh").to_string_lossy().into_owned(),
        })
        .unwrap();
        let table = storage
            .for_table(&format!("{}/ns/t", storage.root()))
            .unwrap();
        let own = format!("{}/ns/t/data/a.parquet", storage.root());
        table.write(&own, Bytes::from_static(b"a")).await.unwrap();
        let io = table.file_io();
        assert_eq!(
            io.new_input(&own).unwrap().read().await.unwrap().as_ref(),
            b"a"
        );
        // A sibling whose name extends the table's, another table, the warehouse's files
        // and anything outside the warehouse are all refused, by both IO paths.
        let sibling = format!("{}/ns/t2/data/a.parquet", storage.root());
        storage
            .write(&sibling, Bytes::from_static(b"b"))
            .await
            .unwrap();
        for foreign in [
            sibling.clone(),
            format!("{}/ns/other/x", storage.root()),
            format!("file://{}", secret.display()),
            format!("{}//ns//t/../t2/data/a.parquet", storage.root()),
            "s3://bucket/ns/t/data/a.parquet".to_string(),
        ] {
            let err = table.read(&foreign).await.unwrap_err();
            assert!(
                matches!(err, StorageError::InvalidLocation { .. }),
                "{foreign}: {err}"
            );
            let err = table.delete(&foreign).await.unwrap_err();
            assert!(
                err.to_string().contains("outside the table") || err.to_string().contains(".."),
                "{err}"
            );
            assert!(
                io.new_input(&foreign).unwrap().read().await.is_err(),
                "{foreign}"
            );
            assert!(io.delete(&foreign).await.is_err(), "{foreign}");
        }
        assert!(storage.exists(&sibling).await.unwrap());
        assert_eq!(std::fs::read(&secret).unwrap(), b"outside");
        // The warehouse handle reaches its own files only, never the directory around it.
        let outside = format!("file://{}", secret.display());
        assert!(storage.read(&outside).await.is_err());
        assert!(
            storage
                .file_io()
                .new_input(&outside)
                .unwrap()
                .read()
                .await
                .is_err()
        );
        assert!(storage.for_table(&outside).is_err());
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
