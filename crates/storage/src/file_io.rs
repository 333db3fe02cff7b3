//! The bridge from `object_store` into iceberg's `FileIO`.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::{Reach, StorageProfile};

/// Builds [`ObjectStoreStorage`] for iceberg's `FileIO`. Serializes as its profile and reach;
/// a deserialized factory rebuilds its object store on first use.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreStorageFactory {
    profile: StorageProfile,
    reach: Reach,
    #[serde(skip)]
    store: OnceLock<Arc<dyn ObjectStore>>,
}

impl ObjectStoreStorageFactory {
    /// `store` is the profile's object store (rooted at the warehouse root); every path is
    /// checked against `reach`.
    pub fn new(profile: StorageProfile, reach: Reach, store: Arc<dyn ObjectStore>) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(store);
        Self {
            profile,
            reach,
            store: cell,
        }
    }
}

#[typetag::serde]
impl StorageFactory for ObjectStoreStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        let store = match self.store.get() {
            Some(store) => store.clone(),
            None => self
                .profile
                .build_object_store()
                .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?,
        };
        Ok(Arc::new(ObjectStoreStorage {
            profile: self.profile.clone(),
            reach: self.reach.clone(),
            store: OnceLock::from(store),
        }))
    }
}

/// iceberg `Storage` over one `object_store` instance, refusing every path outside its reach
/// (a table's location, for tables' `FileIO`s).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreStorage {
    profile: StorageProfile,
    reach: Reach,
    #[serde(skip)]
    store: OnceLock<Arc<dyn ObjectStore>>,
}

impl ObjectStoreStorage {
    fn store(&self) -> iceberg::Result<&Arc<dyn ObjectStore>> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        let built = self
            .profile
            .build_object_store()
            .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
        Ok(self.store.get_or_init(|| built))
    }

    fn path(&self, location: &str) -> iceberg::Result<ObjectPath> {
        self.reach
            .object_path(location)
            .map_err(|e| Error::new(ErrorKind::DataInvalid, e.to_string()))
    }
}

fn io_error(location: &str, e: object_store::Error) -> Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("object store failed on '{location}'")).with_source(e)
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStoreStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        match self.store()?.head(&self.path(path)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_error(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let meta = self
            .store()?
            .head(&self.path(path)?)
            .await
            .map_err(|e| io_error(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        let result = self
            .store()?
            .get(&self.path(path)?)
            .await
            .map_err(|e| io_error(path, e))?;
        result.bytes().await.map_err(|e| io_error(path, e))
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        Ok(Box::new(ObjectRead {
            store: self.store()?.clone(),
            path: self.path(path)?,
            location: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.store()?
            .put(&self.path(path)?, bs.into())
            .await
            .map_err(|e| io_error(path, e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        Ok(Box::new(ObjectWrite {
            writer: BufWriter::new(self.store()?.clone(), self.path(path)?),
            location: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        match self.store()?.delete(&self.path(path)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io_error(path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let store = self.store()?.clone();
        let prefix = self.path(path)?;
        let paths = store.list(Some(&prefix)).map_ok(|m| m.location).boxed();
        store
            .delete_stream(paths)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| io_error(path, e))?;
        Ok(())
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        let locations: Vec<String> = paths.collect().await;
        for location in locations {
            self.delete(&location).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    location: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.store
            .get_range(&self.path, range)
            .await
            .map_err(|e| io_error(&self.location, e))
    }
}

struct ObjectWrite {
    writer: BufWriter,
    location: String,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        self.writer
            .put(bs)
            .await
            .map_err(|e| io_error(&self.location, e))
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        self.writer.shutdown().await.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("failed to finish writing '{}'", self.location),
            )
            .with_source(e)
        })
    }
}
