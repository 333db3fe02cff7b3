//! Metadata files: naming, encoding, and an immutable-file cache.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use floe_storage::WarehouseStorage;
use iceberg::spec::{FormatVersion, SnapshotReference, TableMetadata, ViewMetadata};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::{CatalogError, Result};

const GZIP_PROPERTY: &str = "write.metadata.compression-codec";
/// Where metadata files go instead of `<location>/metadata`.
pub const METADATA_PATH_PROPERTY: &str = "write.metadata.path";

/// The location of the next metadata file of a table or view at `location`, one version past
/// `current` (version 0 for a new one). Gzip when the table asks for it.
pub fn next_metadata_location(
    location: &str,
    current: Option<&str>,
    properties: &HashMap<String, String>,
) -> String {
    let version = current.and_then(metadata_version).map_or(0, |v| v + 1);
    let gzip = properties
        .get(GZIP_PROPERTY)
        .is_some_and(|c| c.eq_ignore_ascii_case("gzip"));
    let suffix = if gzip {
        ".gz.metadata.json"
    } else {
        ".metadata.json"
    };
    let directory = match properties.get(METADATA_PATH_PROPERTY) {
        Some(path) if !path.is_empty() => path.trim_end_matches('/').to_string(),
        _ => format!("{}/metadata", location.trim_end_matches('/')),
    };
    format!("{directory}/{version:05}-{}{suffix}", Uuid::new_v4())
}

/// Serializes table or view metadata with its lists in a stable order (schemas, specs,
/// sort orders, snapshots, view versions by id), as Iceberg's own writers produce them.
pub fn to_sorted_json<T: Serialize>(value: &T) -> Result<serde_json::Value> {
    use serde_json::Value;
    let mut json =
        serde_json::to_value(value).map_err(|e| CatalogError::internal("encode metadata", e))?;
    let sort_by = |json: &mut Value, list: &str, keys: &[&str]| {
        if let Some(Value::Array(items)) = json.get_mut(list) {
            items.sort_by_key(|item| {
                keys.iter()
                    .map(|k| item.get(*k).and_then(Value::as_i64).unwrap_or(i64::MIN))
                    .collect::<Vec<_>>()
            });
        }
    };
    sort_by(&mut json, "schemas", &["schema-id"]);
    sort_by(&mut json, "partition-specs", &["spec-id"]);
    sort_by(&mut json, "sort-orders", &["order-id"]);
    sort_by(&mut json, "snapshots", &["sequence-number", "timestamp-ms"]);
    sort_by(&mut json, "versions", &["version-id"]);
    sort_by(&mut json, "statistics", &["snapshot-id"]);
    sort_by(&mut json, "partition-statistics", &["snapshot-id"]);
    Ok(json)
}

/// A table's branches and tags by name, `main` included.
///
/// iceberg 0.10 keeps the map private and its format-version 1 form has no `refs` at all (it
/// writes none and reads none), though the spec allows them in v1 and Iceberg's Java writers
/// keep them there. The v2 form of the same metadata carries them.
pub fn table_refs(metadata: &TableMetadata) -> Result<BTreeMap<String, SnapshotReference>> {
    let json = if metadata.format_version() == FormatVersion::V1 {
        let as_v2 = metadata
            .clone()
            .into_builder(None)
            .upgrade_format_version(FormatVersion::V2)
            .and_then(|builder| builder.build())
            .map_err(|e| CatalogError::internal("read the refs of v1 metadata", e))?
            .metadata;
        serde_json::to_value(&as_v2)
    } else {
        serde_json::to_value(metadata)
    }
    .map_err(|e| CatalogError::internal("encode metadata", e))?;
    let refs = json.get("refs").cloned().unwrap_or(serde_json::Value::Null);
    if refs.is_null() {
        return Ok(BTreeMap::new());
    }
    serde_json::from_value(refs).map_err(|e| CatalogError::internal("decode refs", e))
}

/// Table metadata as Floe writes and serves it: [`to_sorted_json`], with `refs` kept in
/// format-version 1 too ([`table_refs`]).
pub fn table_json(metadata: &TableMetadata) -> Result<serde_json::Value> {
    let mut json = to_sorted_json(metadata)?;
    if metadata.format_version() == FormatVersion::V1
        && let Some(object) = json.as_object_mut()
    {
        let refs = serde_json::to_value(table_refs(metadata)?)
            .map_err(|e| CatalogError::internal("encode refs", e))?;
        object.insert("refs".into(), refs);
    }
    Ok(json)
}

/// Decodes a table metadata file, keeping the branches and tags of a format-version 1 file
/// that iceberg's own v1 reader drops. A ref to a snapshot the file does not hold is left out,
/// as Iceberg's readers refuse it.
pub fn decode_table(bytes: &[u8], location: &str) -> Result<TableMetadata> {
    let metadata: TableMetadata = decode(bytes, location)?;
    if metadata.format_version() != FormatVersion::V1 {
        return Ok(metadata);
    }
    #[derive(serde::Deserialize)]
    struct Refs {
        #[serde(default)]
        refs: Option<BTreeMap<String, SnapshotReference>>,
    }
    let refs = decode::<Refs>(bytes, location)?.refs.unwrap_or_default();
    let others: Vec<_> = refs
        .into_iter()
        .filter(|(name, reference)| {
            name != "main" && metadata.snapshot_by_id(reference.snapshot_id).is_some()
        })
        .collect();
    if others.is_empty() {
        return Ok(metadata);
    }
    let mut builder = metadata.into_builder(None);
    for (name, reference) in others {
        builder = builder.set_ref(&name, reference).map_err(|e| {
            CatalogError::bad_request(format!(
                "metadata file {location} has a bad ref {name}: {e}"
            ))
        })?;
    }
    builder.build().map(|built| built.metadata).map_err(|e| {
        CatalogError::bad_request(format!(
            "metadata file {location} is not valid Iceberg metadata: {e}"
        ))
    })
}

/// The version number of a metadata file named `NNNNN-<uuid>.metadata.json` (or `vN...`).
pub fn metadata_version(metadata_location: &str) -> Option<u64> {
    let file = metadata_location.rsplit('/').next()?;
    let head = file.split(['-', '.']).next()?;
    head.trim_start_matches('v').parse().ok()
}

pub fn encode<T: Serialize>(value: &T, location: &str) -> Result<Bytes> {
    encode_json(&to_sorted_json(value)?, location)
}

/// Encodes table metadata as [`table_json`] has it.
pub fn encode_table(metadata: &TableMetadata, location: &str) -> Result<Bytes> {
    encode_json(&table_json(metadata)?, location)
}

fn encode_json(json: &serde_json::Value, location: &str) -> Result<Bytes> {
    let json =
        serde_json::to_vec(json).map_err(|e| CatalogError::internal("encode metadata", e))?;
    if location.ends_with(".gz.metadata.json") {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder
            .write_all(&json)
            .and_then(|_| encoder.finish())
            .map(Bytes::from)
            .map_err(|e| CatalogError::internal("compress metadata", e))
    } else {
        Ok(Bytes::from(json))
    }
}

/// Largest metadata file Floe inflates (a guard against compression bombs).
const MAX_METADATA_BYTES: u64 = 1 << 30;

pub fn decode<T: DeserializeOwned>(bytes: &[u8], location: &str) -> Result<T> {
    let mut inflated = Vec::new();
    let json: &[u8] = if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_METADATA_BYTES)
            .read_to_end(&mut inflated)
            .map_err(|e| {
                CatalogError::bad_request(format!(
                    "metadata file {location} is not valid gzip: {e}"
                ))
            })?;
        &inflated
    } else {
        bytes
    };
    serde_json::from_slice(json).map_err(|e| {
        CatalogError::bad_request(format!(
            "metadata file {location} is not valid Iceberg metadata: {e}"
        ))
    })
}

/// Metadata files never change once written, so a cache keyed by location is always valid.
#[derive(Debug)]
pub struct MetadataCache<T> {
    inner: Mutex<CacheInner<T>>,
    capacity: usize,
}

#[derive(Debug)]
struct CacheInner<T> {
    map: HashMap<String, Arc<T>>,
    order: VecDeque<String>,
}

impl<T> MetadataCache<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(CacheInner {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
            capacity,
        }
    }

    pub fn get(&self, location: &str) -> Option<Arc<T>> {
        self.inner
            .lock()
            .expect("cache lock")
            .map
            .get(location)
            .cloned()
    }

    /// Forgets `location` (a file found broken behind the catalog's back).
    pub fn remove(&self, location: &str) {
        let mut inner = self.inner.lock().expect("cache lock");
        if inner.map.remove(location).is_some() {
            inner.order.retain(|l| l != location);
        }
    }

    pub fn insert(&self, location: &str, value: Arc<T>) {
        let mut inner = self.inner.lock().expect("cache lock");
        if inner.map.insert(location.to_string(), value).is_none() {
            inner.order.push_back(location.to_string());
            while inner.order.len() > self.capacity {
                if let Some(old) = inner.order.pop_front() {
                    inner.map.remove(&old);
                }
            }
        }
    }
}

async fn read_file(storage: &WarehouseStorage, location: &str) -> Result<Bytes> {
    match storage.read(location).await {
        Err(floe_storage::StorageError::NotFound(_)) => Err(CatalogError::not_found_file(location)),
        other => Ok(other?),
    }
}

/// Reads table and view metadata through a cache.
#[derive(Debug)]
pub struct MetadataIo {
    tables: MetadataCache<TableMetadata>,
    views: MetadataCache<ViewMetadata>,
}

impl MetadataIo {
    pub fn new(capacity: usize) -> Self {
        Self {
            tables: MetadataCache::new(capacity),
            views: MetadataCache::new(capacity),
        }
    }

    pub async fn read_table(
        &self,
        storage: &WarehouseStorage,
        location: &str,
    ) -> Result<Arc<TableMetadata>> {
        read_cached(&self.tables, storage, location, decode_table).await
    }

    /// Reads and decodes the table metadata file at `location` from storage, never from
    /// memory (a check of what storage holds): a file that no longer reads is forgotten, so
    /// every later load sees it as it is.
    pub async fn verify_table(
        &self,
        storage: &WarehouseStorage,
        location: &str,
    ) -> Result<Arc<TableMetadata>> {
        let read = async {
            let bytes = read_file(storage, location).await?;
            decode_table(&bytes, location)
        }
        .await;
        match read {
            Ok(metadata) => Ok(Arc::new(metadata)),
            Err(e) => {
                self.tables.remove(location);
                Err(e)
            }
        }
    }

    pub async fn write_table(
        &self,
        storage: &WarehouseStorage,
        location: &str,
        metadata: Arc<TableMetadata>,
    ) -> Result<()> {
        write_cached(&self.tables, storage, location, metadata, encode_table).await
    }

    pub async fn read_view(
        &self,
        storage: &WarehouseStorage,
        location: &str,
    ) -> Result<Arc<ViewMetadata>> {
        read_cached(&self.views, storage, location, decode).await
    }

    pub async fn write_view(
        &self,
        storage: &WarehouseStorage,
        location: &str,
        metadata: Arc<ViewMetadata>,
    ) -> Result<()> {
        write_cached(&self.views, storage, location, metadata, encode).await
    }
}

async fn read_cached<T>(
    cache: &MetadataCache<T>,
    storage: &WarehouseStorage,
    location: &str,
    decode: fn(&[u8], &str) -> Result<T>,
) -> Result<Arc<T>> {
    if let Some(hit) = cache.get(location) {
        // The file can be removed behind the catalog's back; never serve it from memory then.
        if !storage.exists(location).await? {
            return Err(CatalogError::not_found_file(location));
        }
        return Ok(hit);
    }
    let bytes = read_file(storage, location).await?;
    let metadata: Arc<T> = Arc::new(decode(&bytes, location)?);
    cache.insert(location, metadata.clone());
    Ok(metadata)
}

async fn write_cached<T>(
    cache: &MetadataCache<T>,
    storage: &WarehouseStorage,
    location: &str,
    metadata: Arc<T>,
    encode: fn(&T, &str) -> Result<Bytes>,
) -> Result<()> {
    storage
        .write(location, encode(&*metadata, location)?)
        .await?;
    cache.insert(location, metadata);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_count_versions() {
        let props = HashMap::new();
        let first = next_metadata_location("s3://b/t/", None, &props);
        assert!(first.starts_with("s3://b/t/metadata/00000-"), "{first}");
        assert_eq!(metadata_version(&first), Some(0));
        let second = next_metadata_location("s3://b/t", Some(&first), &props);
        assert_eq!(metadata_version(&second), Some(1));
        assert_eq!(
            metadata_version("s3://b/t/metadata/v7.metadata.json"),
            Some(7)
        );
        let gz = HashMap::from([(GZIP_PROPERTY.to_string(), "GZIP".to_string())]);
        assert!(next_metadata_location("/t", Some(&second), &gz).ends_with(".gz.metadata.json"));
        let custom = HashMap::from([(METADATA_PATH_PROPERTY.to_string(), "s3://b/m/".to_string())]);
        assert!(next_metadata_location("s3://b/t", None, &custom).starts_with("s3://b/m/00000-"));
    }

    #[test]
    fn gzip_round_trips() {
        let value = serde_json::json!({"a": [1, 2, 3]});
        let bytes = encode(&value, "x/00001-u.gz.metadata.json").unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
        let back: serde_json::Value = decode(&bytes, "x").unwrap();
        assert_eq!(back, value);
        assert!(
            decode::<serde_json::Value>(b"nope", "loc")
                .unwrap_err()
                .to_string()
                .contains("loc")
        );
    }

    #[test]
    fn cache_evicts_oldest() {
        let cache = MetadataCache::new(2);
        cache.insert("a", Arc::new(1));
        cache.insert("b", Arc::new(2));
        cache.insert("c", Arc::new(3));
        assert!(cache.get("a").is_none());
        assert_eq!(cache.get("c").as_deref(), Some(&3));
    }
}
