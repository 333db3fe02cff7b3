//! A read cache over object storage for the query engine: byte ranges of data files (Parquet
//! footers, column chunks, pages) kept in memory and, when memory is full, on local disk.
//!
//! Only ranged reads are cached, keyed by object path and range: the files queries read —
//! Iceberg data, delete and manifest files — are written once and never changed, so a cached
//! range never goes stale. Writes, listings, whole-object reads and conditional reads pass
//! straight through. Both tiers evict least recently used ranges to stay within their sizes;
//! ranges evicted from memory move to disk.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use sha2::{Digest, Sha256};

/// How big the cache may grow, and where its disk tier lives.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub dir: PathBuf,
}

/// Hits and misses so far.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub misses: AtomicU64,
    pub bytes_read_from_store: AtomicU64,
}

type Key = (Path, u64, u64);

/// Least-recently-used sizes: which key to evict next.
#[derive(Default)]
struct Lru {
    order: VecDeque<Key>,
    sizes: HashMap<Key, u64>,
    total: u64,
}

impl Lru {
    fn touch(&mut self, key: &Key) {
        if let Some(i) = self.order.iter().position(|k| k == key) {
            let k = self.order.remove(i).expect("present");
            self.order.push_back(k);
        }
    }

    fn insert(&mut self, key: Key, size: u64) {
        if self.sizes.insert(key.clone(), size).is_none() {
            self.order.push_back(key);
            self.total += size;
        }
    }

    fn pop_oldest(&mut self) -> Option<(Key, u64)> {
        let key = self.order.pop_front()?;
        let size = self.sizes.remove(&key).unwrap_or_default();
        self.total -= size;
        Some((key, size))
    }
}

/// The two tiers, shared by every store wrapped with them.
pub struct RangeCache {
    config: CacheConfig,
    memory: Mutex<(Lru, HashMap<Key, Bytes>)>,
    disk: Mutex<Lru>,
    pub stats: CacheStats,
}

impl fmt::Debug for RangeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RangeCache({:?})", self.config)
    }
}

impl RangeCache {
    /// A cache; its disk directory is emptied (ranges of an earlier process are not trusted).
    pub fn new(config: CacheConfig) -> std::io::Result<Arc<Self>> {
        if config.dir.exists() {
            std::fs::remove_dir_all(&config.dir)?;
        }
        std::fs::create_dir_all(&config.dir)?;
        Ok(Arc::new(Self {
            config,
            memory: Mutex::new((Lru::default(), HashMap::new())),
            disk: Mutex::new(Lru::default()),
            stats: CacheStats::default(),
        }))
    }

    /// `store` reading through this cache; `scope` keeps stores' paths apart (a warehouse id).
    pub fn wrap(
        self: &Arc<Self>,
        store: Arc<dyn ObjectStore>,
        scope: &str,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(CachedStore {
            inner: store,
            cache: self.clone(),
            scope: scope.to_string(),
        })
    }

    fn file_of(&self, key: &Key) -> PathBuf {
        let mut hasher = Sha256::new();
        hasher.update(key.0.as_ref().as_bytes());
        hasher.update(key.1.to_be_bytes());
        hasher.update(key.2.to_be_bytes());
        self.config.dir.join(hex::encode(hasher.finalize()))
    }

    async fn get(&self, key: &Key) -> Option<Bytes> {
        {
            let mut memory = self.memory.lock().expect("cache lock");
            if let Some(bytes) = memory.1.get(key).cloned() {
                memory.0.touch(key);
                self.stats.memory_hits.fetch_add(1, Ordering::Relaxed);
                return Some(bytes);
            }
        }
        let on_disk = {
            let mut disk = self.disk.lock().expect("cache lock");
            let present = disk.sizes.contains_key(key);
            if present {
                disk.touch(key);
            }
            present
        };
        if on_disk && let Ok(bytes) = tokio::fs::read(self.file_of(key)).await {
            self.stats.disk_hits.fetch_add(1, Ordering::Relaxed);
            let bytes = Bytes::from(bytes);
            self.put_memory(key.clone(), bytes.clone()).await;
            return Some(bytes);
        }
        None
    }

    async fn put(&self, key: Key, bytes: Bytes) {
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_read_from_store
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.put_memory(key, bytes).await;
    }

    async fn put_memory(&self, key: Key, bytes: Bytes) {
        let size = bytes.len() as u64;
        if size > self.config.memory_bytes {
            self.put_disk(key, bytes).await;
            return;
        }
        let evicted: Vec<(Key, Bytes)> = {
            let mut memory = self.memory.lock().expect("cache lock");
            let (lru, map) = &mut *memory;
            if map.contains_key(&key) {
                return;
            }
            lru.insert(key.clone(), size);
            map.insert(key, bytes);
            let mut evicted = Vec::new();
            while lru.total > self.config.memory_bytes {
                let Some((old, _)) = lru.pop_oldest() else {
                    break;
                };
                if let Some(b) = map.remove(&old) {
                    evicted.push((old, b));
                }
            }
            evicted
        };
        for (key, bytes) in evicted {
            self.put_disk(key, bytes).await;
        }
    }

    async fn put_disk(&self, key: Key, bytes: Bytes) {
        let size = bytes.len() as u64;
        if size > self.config.disk_bytes
            || self
                .disk
                .lock()
                .expect("cache lock")
                .sizes
                .contains_key(&key)
        {
            return;
        }
        if tokio::fs::write(self.file_of(&key), &bytes).await.is_err() {
            return;
        }
        let removed: Vec<Key> = {
            let mut disk = self.disk.lock().expect("cache lock");
            disk.insert(key, size);
            let mut removed = Vec::new();
            while disk.total > self.config.disk_bytes {
                let Some((old, _)) = disk.pop_oldest() else {
                    break;
                };
                removed.push(old);
            }
            removed
        };
        for old in removed {
            let _ = tokio::fs::remove_file(self.file_of(&old)).await;
        }
    }
}

/// An object store reading ranges through a [`RangeCache`].
struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<RangeCache>,
    scope: String,
}

impl fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
    }
}

impl fmt::Display for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
    }
}

impl CachedStore {
    fn key(&self, location: &Path, range: &Range<u64>) -> Key {
        (
            Path::from(format!("{}/{}", self.scope, location)),
            range.start,
            range.end,
        )
    }

    async fn range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        let key = self.key(location, &range);
        if let Some(bytes) = self.cache.get(&key).await {
            return Ok(bytes);
        }
        let bytes = self
            .inner
            .get_opts(location, GetOptions::new().with_range(Some(range)))
            .await?
            .bytes()
            .await?;
        self.cache.put(key, bytes.clone()).await;
        Ok(bytes)
    }
}

#[async_trait]
impl ObjectStore for CachedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain = options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none()
            && options.version.is_none()
            && !options.head;
        let Some(GetRange::Bounded(range)) = options.range.clone().filter(|_| plain) else {
            return self.inner.get_opts(location, options).await;
        };
        let bytes = self.range(location, range.clone()).await?;
        let end = range.start + bytes.len() as u64;
        Ok(GetResult {
            meta: ObjectMeta {
                location: location.clone(),
                last_modified: chrono::DateTime::UNIX_EPOCH,
                size: end,
                e_tag: None,
                version: None,
            },
            range: range.start..end,
            attributes: Default::default(),
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(bytes) }).boxed(),
            ),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let mut out = vec![Bytes::new(); ranges.len()];
        let mut missing = Vec::new();
        for (i, range) in ranges.iter().enumerate() {
            match self.cache.get(&self.key(location, range)).await {
                Some(bytes) => out[i] = bytes,
                None => missing.push(i),
            }
        }
        if !missing.is_empty() {
            let wanted: Vec<Range<u64>> = missing.iter().map(|&i| ranges[i].clone()).collect();
            let fetched = self.inner.get_ranges(location, &wanted).await?;
            for (i, bytes) in missing.into_iter().zip(fetched) {
                self.cache
                    .put(self.key(location, &ranges[i]), bytes.clone())
                    .await;
                out[i] = bytes;
            }
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn ranges_come_from_memory_then_disk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = RangeCache::new(CacheConfig {
            memory_bytes: 10,
            disk_bytes: 1_000,
            dir: dir.path().join("cache"),
        })
        .unwrap();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        inner
            .put(
                &Path::from("a"),
                PutPayload::from_static(b"0123456789abcdefghij"),
            )
            .await
            .unwrap();
        let store = cache.wrap(inner.clone(), "w");
        assert_eq!(
            store.get_range(&Path::from("a"), 0..8).await.unwrap(),
            &b"01234567"[..]
        );
        assert_eq!(
            store.get_range(&Path::from("a"), 0..8).await.unwrap(),
            &b"01234567"[..]
        );
        assert_eq!(cache.stats.memory_hits.load(Ordering::Relaxed), 1);
        // A second range pushes the first out of the 10-byte memory tier onto disk, where the
        // next read finds it.
        let both = store
            .get_ranges(&Path::from("a"), &[8..16, 0..8])
            .await
            .unwrap();
        assert_eq!(
            both,
            vec![
                Bytes::from_static(b"89abcdef"),
                Bytes::from_static(b"01234567")
            ]
        );
        assert_eq!(
            store.get_range(&Path::from("a"), 0..8).await.unwrap(),
            &b"01234567"[..]
        );
        assert_eq!(cache.stats.disk_hits.load(Ordering::Relaxed), 1);
        assert_eq!(cache.stats.misses.load(Ordering::Relaxed), 2);
        // Whole-object reads pass through.
        assert_eq!(
            store
                .get(&Path::from("a"))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .len(),
            20
        );
    }
}
