//! A read cache over object storage for the query engine: data files (Parquet footers,
//! column chunks, pages) kept in memory and on local disk, in aligned blocks.
//!
//! Only ranged reads are cached. The files queries read — Iceberg data, delete and manifest
//! files — are written once and never changed, so a cached block never goes stale. Writes,
//! listings, whole-object reads and conditional reads pass straight through.
//!
//! A range is served from the [`BLOCK_BYTES`]-aligned blocks it overlaps, so another range of
//! the same file (another projection, another row group's pages) hits blocks read for an
//! earlier one. Missing blocks are fetched together in one `get_ranges` call. Memory holds
//! blocks in a sharded cache with a frequency-based admission policy (moka's TinyLFU), so a
//! scan passing once through more data than fits does not push out what is read again.
//! Every fetched block is also written to disk (atomically renamed into place), bounded the
//! same way; the disk tier is kept across restarts.
//!
//! The hot tier ([`hot`]) sits beside the disk tier in the same directory and the same
//! budget: whole files a node committed, written through at commit ([`RangeCache::admit_hot`]
//! with the bytes a [`WriteThrough`] kept), pinned while inside their tenant's window and
//! share. Reads do not change: a range is served from memory, the hot tier, the disk tier or
//! the store, block by block, so a scan over recent and older files is one plan that reads
//! only the older ones from object storage. Hits and misses are counted per tenant too.

mod evict;
mod hot;
mod write_through;

pub use evict::HotPolicy;
pub use hot::HotUsage;
pub use write_through::WriteThrough;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use sha2::{Digest, Sha256};

/// The size of a cached block, and the alignment of its start.
pub const BLOCK_BYTES: u64 = 1 << 20;

/// Objects whose sizes are remembered (each a path and a number).
const KNOWN_SIZES: u64 = 1 << 20;

/// How big the cache may grow, and where its disk tier lives.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub memory_bytes: u64,
    /// The disk tier and the hot tier together.
    pub disk_bytes: u64,
    /// The part of `disk_bytes` the hot tier may take (0: no hot tier).
    pub hot_bytes: u64,
    /// The window of a tenant whose limits set none (milliseconds).
    pub hot_window_ms: i64,
    pub dir: PathBuf,
}

/// The hot window of a tenant whose limits set none: a day.
pub const DEFAULT_HOT_WINDOW_MS: i64 = 24 * 3_600_000;

/// One tenant's reads through the cache, blocks by where they were found.
#[derive(Debug, Default)]
pub struct TenantCacheStats {
    pub memory_hits: AtomicU64,
    pub hot_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub misses: AtomicU64,
}

/// Blocks found and fetched so far.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub memory_hits: AtomicU64,
    pub hot_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub misses: AtomicU64,
    pub bytes_read_from_store: AtomicU64,
}

/// A block: the object's path within its store's scope, and the block's number.
type Key = (Arc<str>, u64);

/// A cache of object blocks in memory and on local disk, shared by the stores it wraps.
pub struct RangeCache {
    config: CacheConfig,
    memory: moka::sync::Cache<Key, Bytes>,
    /// The blocks on disk, by file name, weighed by size; a block leaving it is deleted.
    disk: moka::sync::Cache<String, u32>,
    /// Object sizes, read once per object: the last block of an object ends with it.
    sizes: moka::sync::Cache<Arc<str>, u64>,
    /// Pinned whole files of recent commits, when the configuration gives it room.
    hot: Option<hot::HotTier>,
    /// Reads by tenant (a warehouse's name; a handful per node).
    tenants: Mutex<BTreeMap<String, Arc<TenantCacheStats>>>,
    pub stats: CacheStats,
}

impl fmt::Debug for RangeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RangeCache({:?})", self.config)
    }
}

/// Whether `name` is a block file's name: 64 hex digits, `-`, the block number.
fn is_block_file(name: &str) -> bool {
    name.len() > 65
        && name.as_bytes()[64] == b'-'
        && name[..64].bytes().all(|b| b.is_ascii_hexdigit())
        && name[65..].bytes().all(|b| b.is_ascii_digit())
}

impl RangeCache {
    /// A cache whose disk tier is the blocks already in its directory (unfinished writes of
    /// an earlier process are removed) and those it fetches.
    pub fn new(config: CacheConfig) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(&config.dir)?;
        let memory = moka::sync::Cache::builder()
            .weigher(|_: &Key, bytes: &Bytes| u32::try_from(bytes.len()).unwrap_or(u32::MAX))
            .max_capacity(config.memory_bytes)
            .build();
        let dir = config.dir.clone();
        let hot_bytes = hot_share(config.hot_bytes, config.disk_bytes);
        let disk = moka::sync::Cache::builder()
            .weigher(|_: &String, size: &u32| *size)
            .max_capacity(config.disk_bytes - hot_bytes)
            .eviction_listener(move |name: Arc<String>, _, cause| {
                if cause != moka::notification::RemovalCause::Replaced {
                    let _ = std::fs::remove_file(dir.join(name.as_str()));
                }
            })
            .build();
        for entry in std::fs::read_dir(&config.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata()?;
            match u32::try_from(meta.len()) {
                Ok(size) if meta.is_file() && is_block_file(&name) && size > 0 => {
                    disk.insert(name, size);
                    disk.run_pending_tasks();
                }
                _ if meta.is_file() => std::fs::remove_file(entry.path())?,
                _ => {}
            }
        }
        let hot = (hot_bytes > 0)
            .then(|| {
                let policy = HotPolicy {
                    window_ms: config.hot_window_ms,
                    share_bytes: hot_bytes,
                };
                hot::HotTier::open(config.dir.join("hot"), hot_bytes, policy)
            })
            .transpose()?;
        Ok(Arc::new(Self {
            config,
            memory,
            disk,
            sizes: moka::sync::Cache::new(KNOWN_SIZES),
            hot,
            tenants: Mutex::new(BTreeMap::new()),
            stats: CacheStats::default(),
        }))
    }

    /// `store` reading through this cache; `scope` keeps stores' paths apart (a warehouse
    /// id), `tenant` names whose reads they are (the warehouse's name).
    pub fn wrap(
        self: &Arc<Self>,
        store: Arc<dyn ObjectStore>,
        scope: &str,
        tenant: &str,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(CachedStore {
            inner: store,
            cache: self.clone(),
            scope: scope.to_string(),
            tenant: self.tenant_stats(tenant),
        })
    }

    fn tenant_stats(&self, tenant: &str) -> Arc<TenantCacheStats> {
        self.tenants
            .lock()
            .expect("tenant stats")
            .entry(tenant.to_string())
            .or_default()
            .clone()
    }

    /// Each tenant's reads through the cache so far.
    pub fn tenant_reads(&self) -> Vec<(String, Arc<TenantCacheStats>)> {
        let tenants = self.tenants.lock().expect("tenant stats");
        tenants
            .iter()
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect()
    }

    /// Each tenant's hot files on this node (empty without a hot tier).
    pub fn hot_usage(&self) -> BTreeMap<String, HotUsage> {
        self.hot
            .as_ref()
            .map(hot::HotTier::usage)
            .unwrap_or_default()
    }

    /// Bytes of blocks in the ordinary disk tier.
    pub fn disk_bytes(&self) -> u64 {
        self.disk.run_pending_tasks();
        self.disk.weighted_size()
    }

    /// The id of an object: the hash of its scoped path (what file names are made of).
    fn id_of(scoped: &str) -> String {
        hex::encode(Sha256::digest(scoped.as_bytes()))
    }

    fn file_of(key: &Key) -> String {
        format!("{}-{}", Self::id_of(&key.0), key.1)
    }

    async fn get(&self, key: &Key, tenant: &TenantCacheStats) -> Option<Bytes> {
        if let Some(bytes) = self.memory.get(key) {
            self.stats.memory_hits.fetch_add(1, Ordering::Relaxed);
            tenant.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Some(bytes);
        }
        let id = Self::id_of(&key.0);
        if let Some(hot) = &self.hot {
            self.demote(hot.sweep(chrono::Utc::now().timestamp_millis(), false));
            // The file's tenant is the reader's: a scope is one warehouse.
            if let Some((bytes, _)) = hot.read(&id, key.1).await {
                self.stats.hot_hits.fetch_add(1, Ordering::Relaxed);
                tenant.hot_hits.fetch_add(1, Ordering::Relaxed);
                self.keep_in_memory(key.clone(), bytes.clone());
                return Some(bytes);
            }
        }
        let name = format!("{id}-{}", key.1);
        self.disk.get(&name)?;
        let bytes = Bytes::from(tokio::fs::read(self.config.dir.join(&name)).await.ok()?);
        self.stats.disk_hits.fetch_add(1, Ordering::Relaxed);
        tenant.disk_hits.fetch_add(1, Ordering::Relaxed);
        self.keep_in_memory(key.clone(), bytes.clone());
        Some(bytes)
    }

    /// Forgets a block (one that disagrees with its object), and its file's hot copy.
    fn forget(&self, key: &Key) {
        self.memory.invalidate(key);
        self.disk.invalidate(&Self::file_of(key));
        if let Some(hot) = &self.hot {
            hot.drop_file(&Self::id_of(&key.0));
        }
    }

    /// A store writing through `store` that keeps what it writes (up to the hot tier's
    /// size), for [`Self::admit_hot`] once the commit that wrote it succeeds; `None` without
    /// a hot tier.
    pub fn write_through(&self, store: Arc<dyn ObjectStore>) -> Option<Arc<WriteThrough>> {
        let hot = hot_share(self.config.hot_bytes, self.config.disk_bytes);
        (hot > 0 && self.hot.is_some()).then(|| Arc::new(WriteThrough::new(store, hot)))
    }

    /// Makes the objects at `paths` that `written` kept hot for `tenant`, committed at
    /// `committed_ms`, as far as `policy` and the tier's room allow; what leaves the tier for
    /// them goes to the ordinary disk tier. Returns how many were admitted. Failures are
    /// logged, never returned: the files are committed and in object storage either way.
    pub async fn admit_hot(
        self: &Arc<Self>,
        written: &WriteThrough,
        scope: &str,
        tenant: &str,
        policy: HotPolicy,
        paths: &[Path],
        committed_ms: i64,
    ) -> usize {
        if self.hot.is_none() {
            return 0;
        }
        let files: Vec<(Arc<str>, Bytes)> = paths
            .iter()
            .filter_map(|path| {
                let bytes = written.take(path)?;
                Some((Arc::from(format!("{scope}/{path}")), bytes))
            })
            .collect();
        let cache = self.clone();
        let tenant = tenant.to_string();
        let admitted = tokio::task::spawn_blocking(move || {
            let hot = cache.hot.as_ref().expect("checked above");
            let mut admitted = 0;
            for (scoped, bytes) in files {
                let now = chrono::Utc::now().timestamp_millis();
                let id = Self::id_of(&scoped);
                match hot.admit(&id, &tenant, policy, committed_ms, &bytes, now) {
                    Ok((yes, leaving)) => {
                        if yes {
                            admitted += 1;
                            cache.sizes.insert(scoped, bytes.len() as u64);
                        }
                        cache.demote(leaving);
                    }
                    Err(e) => tracing::warn!(%tenant, error = %e, "admit a file to the hot tier"),
                }
            }
            admitted
        })
        .await;
        admitted.unwrap_or(0)
    }

    /// Moves files leaving the hot tier into the ordinary disk tier.
    fn demote(&self, leaving: Vec<hot::Leaving>) {
        let Some(hot) = &self.hot else { return };
        for file in leaving {
            for (block, size) in file.blocks.iter().enumerate() {
                let name = format!("{}-{block}", file.id);
                let from = hot.dir().join(&name);
                if std::fs::rename(&from, self.config.dir.join(&name)).is_ok() {
                    self.disk.insert(name, *size);
                    self.disk.run_pending_tasks();
                } else {
                    let _ = std::fs::remove_file(from);
                }
            }
        }
    }

    /// moka evicts lazily, a batch of writes at a time; with blocks of a mebibyte that could
    /// overshoot the bound by tens of them, so each insert settles the bound at once.
    fn keep_in_memory(&self, key: Key, bytes: Bytes) {
        self.memory.insert(key, bytes);
        self.memory.run_pending_tasks();
    }

    /// A block fetched from the store: kept in memory, and written to disk in the background.
    fn put(&self, key: Key, bytes: Bytes, tenant: &TenantCacheStats) {
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        tenant.misses.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_read_from_store
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.keep_in_memory(key.clone(), bytes.clone());
        let Ok(size) = u32::try_from(bytes.len()) else {
            return;
        };
        let name = Self::file_of(&key);
        if size == 0 || u64::from(size) > self.config.disk_bytes || self.disk.contains_key(&name) {
            return;
        }
        let (dir, disk) = (self.config.dir.clone(), self.disk.clone());
        tokio::spawn(async move {
            let temporary = dir.join(format!("{name}.{}.tmp", std::process::id()));
            let written = async {
                tokio::fs::write(&temporary, &bytes).await?;
                tokio::fs::rename(&temporary, dir.join(&name)).await
            }
            .await;
            match written {
                Ok(()) => {
                    disk.insert(name, size);
                    disk.run_pending_tasks();
                }
                Err(_) => {
                    let _ = tokio::fs::remove_file(&temporary).await;
                }
            }
        });
    }
}

/// An object store reading ranges through a [`RangeCache`].
struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<RangeCache>,
    scope: String,
    tenant: Arc<TenantCacheStats>,
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

/// The blocks `range` overlaps.
fn blocks_of(range: &Range<u64>) -> Range<u64> {
    if range.start >= range.end {
        return 0..0;
    }
    range.start / BLOCK_BYTES..(range.end - 1) / BLOCK_BYTES + 1
}

impl CachedStore {
    fn scoped(&self, location: &Path) -> Arc<str> {
        format!("{}/{}", self.scope, location).into()
    }

    async fn size_of(&self, location: &Path, scoped: &Arc<str>) -> Result<u64> {
        if let Some(size) = self.cache.sizes.get(scoped) {
            return Ok(size);
        }
        // A hot file's size is in the tier's index: a restarted node asks the store nothing.
        let hot = self.cache.hot.as_ref();
        if let Some(size) = hot.and_then(|hot| hot.size(&RangeCache::id_of(scoped))) {
            self.cache.sizes.insert(scoped.clone(), size);
            return Ok(size);
        }
        let size = self.inner.head(location).await?.size;
        self.cache.sizes.insert(scoped.clone(), size);
        Ok(size)
    }

    /// Each of `ranges` of the object at `location`, from cached blocks and the blocks
    /// missing, fetched in one call. An answer that disagrees with what was asked (a size or
    /// block remembered from an object that has changed since) is never returned: what the
    /// cache holds of the object is forgotten and the ranges are read from the store.
    async fn ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let scoped = self.scoped(location);
        let cached = self.cached_ranges(location, &scoped, ranges).await;
        let agrees = |answer: &Vec<Bytes>, size: u64| {
            answer.len() == ranges.len()
                && answer
                    .iter()
                    .zip(ranges)
                    .all(|(bytes, r)| bytes.len() as u64 == r.end.min(size).saturating_sub(r.start))
        };
        match cached {
            Ok((answer, size)) if agrees(&answer, size) => return Ok(answer),
            Err(e) if !matches!(&e, object_store::Error::Generic { store: "cache", .. }) => {
                return Err(e);
            }
            _ => {}
        }
        tracing::warn!(%location, "cached size or blocks disagree with the object; read it again");
        if let Some(size) = self.cache.sizes.get(&scoped) {
            for block in 0..=size / BLOCK_BYTES {
                self.cache.forget(&(scoped.clone(), block));
            }
        }
        self.cache.sizes.invalidate(&scoped);
        let (answer, size) = self.cached_ranges(location, &scoped, ranges).await?;
        if !agrees(&answer, size) {
            return Err(object_store::Error::Generic {
                store: "cache",
                source: format!("{location} changed while it was read").into(),
            });
        }
        Ok(answer)
    }

    /// [`Self::ranges`] from the cache, with the object's size as the cache knows it.
    async fn cached_ranges(
        &self,
        location: &Path,
        scoped: &Arc<str>,
        ranges: &[Range<u64>],
    ) -> Result<(Vec<Bytes>, u64)> {
        let scoped = scoped.clone();
        let size = self.size_of(location, &scoped).await?;
        if let Some(bad) = ranges.iter().find(|r| r.start > r.end || r.start > size) {
            return Err(object_store::Error::Generic {
                store: "cache",
                source: format!(
                    "range {}..{} of {location} is outside its {size} bytes",
                    bad.start, bad.end
                )
                .into(),
            });
        }
        // As HTTP stores answer: a range running past the end stops at it.
        let clipped: Vec<Range<u64>> = ranges.iter().map(|r| r.start..r.end.min(size)).collect();
        let ranges = clipped.as_slice();
        let mut wanted: Vec<u64> = ranges.iter().flat_map(blocks_of).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut blocks = std::collections::HashMap::with_capacity(wanted.len());
        let mut missing = Vec::new();
        for block in wanted {
            match self.cache.get(&(scoped.clone(), block), &self.tenant).await {
                Some(bytes) => {
                    blocks.insert(block, bytes);
                }
                None => missing.push(block),
            }
        }
        if !missing.is_empty() {
            let spans: Vec<Range<u64>> = missing
                .iter()
                .map(|b| b * BLOCK_BYTES..((b + 1) * BLOCK_BYTES).min(size))
                .collect();
            let fetched = self.inner.get_ranges(location, &spans).await?;
            for (block, bytes) in missing.into_iter().zip(fetched) {
                self.cache
                    .put((scoped.clone(), block), bytes.clone(), &self.tenant);
                blocks.insert(block, bytes);
            }
        }
        let answer: Result<Vec<Bytes>> = ranges
            .iter()
            .map(|range| {
                let piece = |block: u64| -> Result<Bytes> {
                    let bytes = &blocks[&block];
                    let start = block * BLOCK_BYTES;
                    let from = range.start.max(start) - start;
                    let to = range.end.min(start + bytes.len() as u64) - start;
                    if from > to || to > bytes.len() as u64 {
                        return Err(object_store::Error::Generic {
                            store: "cache",
                            source: format!("a cached block of {location} is short").into(),
                        });
                    }
                    Ok(bytes.slice(from as usize..to as usize))
                };
                let mut blocks = blocks_of(range);
                match blocks.end - blocks.start {
                    0 => Ok(Bytes::new()),
                    1 => piece(blocks.start),
                    _ => {
                        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
                        for block in blocks.by_ref() {
                            out.extend_from_slice(&piece(block)?);
                        }
                        Ok(out.freeze())
                    }
                }
            })
            .collect();
        Ok((answer?, size))
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
        let bytes = self
            .ranges(location, std::slice::from_ref(&range))
            .await?
            .pop()
            .unwrap_or_default();
        let end = range.start + bytes.len() as u64;
        let size = self.cache.sizes.get(&self.scoped(location)).unwrap_or(end);
        Ok(GetResult {
            meta: ObjectMeta {
                location: location.clone(),
                last_modified: chrono::DateTime::UNIX_EPOCH,
                size,
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
        self.ranges(location, ranges).await
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

/// The disk the hot tier takes: what it asks for, at most half of the disk, so that a small
/// `--cache-disk-mb` keeps a disk cache for what is read (the hot tier's 1 GiB default once
/// took a 256 MiB disk whole, and every read missed).
fn hot_share(hot: u64, disk: u64) -> u64 {
    hot.min(disk / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    const SIZE: usize = 3 * BLOCK_BYTES as usize + 5;

    fn content() -> Vec<u8> {
        (0..SIZE).map(|i| (i % 251) as u8).collect()
    }

    async fn store_with_object() -> Arc<dyn ObjectStore> {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        inner
            .put(&Path::from("a"), PutPayload::from(content()))
            .await
            .unwrap();
        inner
    }

    fn config(dir: &std::path::Path, memory_bytes: u64) -> CacheConfig {
        CacheConfig {
            memory_bytes,
            disk_bytes: 64 * BLOCK_BYTES,
            hot_bytes: 0,
            hot_window_ms: DEFAULT_HOT_WINDOW_MS,
            dir: dir.join("cache"),
        }
    }

    fn counts(cache: &RangeCache) -> [u64; 3] {
        [
            cache.stats.memory_hits.load(Ordering::Relaxed),
            cache.stats.disk_hits.load(Ordering::Relaxed),
            cache.stats.misses.load(Ordering::Relaxed),
        ]
    }

    #[tokio::test]
    async fn an_object_read_while_it_was_shorter_is_read_again_not_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let cache = RangeCache::new(config(dir.path(), 16 * BLOCK_BYTES)).unwrap();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = Path::from("a");
        let all = content();
        // Seen with its first 10 bytes only: that size and that short block are remembered.
        inner
            .put(&a, PutPayload::from(all[..10].to_vec()))
            .await
            .unwrap();
        let store = cache.wrap(inner.clone(), "w", "t");
        assert_eq!(store.get_range(&a, 0..10).await.unwrap(), &all[..10]);
        inner.put(&a, PutPayload::from(all.clone())).await.unwrap();
        // Ranges past what was remembered come whole, from the store.
        let tail = SIZE as u64 - 100..SIZE as u64;
        assert_eq!(
            store.get_range(&a, tail.clone()).await.unwrap(),
            &all[tail.start as usize..]
        );
        let ranges = store.get_ranges(&a, &[0..100, 5..50]).await.unwrap();
        assert_eq!(ranges[0], &all[..100]);
        assert_eq!(ranges[1], &all[5..50]);
    }

    #[tokio::test]
    async fn another_range_of_a_read_block_hits() {
        let dir = tempfile::tempdir().unwrap();
        let cache = RangeCache::new(config(dir.path(), 16 * BLOCK_BYTES)).unwrap();
        let store = cache.wrap(store_with_object().await, "w", "t");
        let all = content();
        let a = Path::from("a");
        assert_eq!(store.get_range(&a, 0..100).await.unwrap(), &all[..100]);
        assert_eq!(counts(&cache), [0, 0, 1]);
        // Another projection: other bytes of the same block.
        assert_eq!(store.get_range(&a, 200..300).await.unwrap(), &all[200..300]);
        assert_eq!(counts(&cache), [1, 0, 1]);
        // Across a block boundary, and the short last block; one fetch for both misses.
        let b = BLOCK_BYTES;
        let ranges = [b - 10..b + 10, 3 * b..SIZE as u64, 0..0];
        let got = store.get_ranges(&a, &ranges).await.unwrap();
        assert_eq!(got[0], &all[(b - 10) as usize..(b + 10) as usize]);
        assert_eq!(got[1], &all[3 * b as usize..]);
        assert!(got[2].is_empty());
        assert_eq!(counts(&cache), [2, 0, 3]);
        // Past the end stops at the end; a start past it is an error naming the object.
        assert_eq!(
            store
                .get_range(&a, SIZE as u64 - 2..SIZE as u64 + 50)
                .await
                .unwrap(),
            &all[SIZE - 2..]
        );
        let err = store.get_range(&a, SIZE as u64 + 1..SIZE as u64 + 2).await;
        assert!(err.unwrap_err().to_string().contains("outside"));
        // Whole-object reads pass through.
        let whole = store.get(&a).await.unwrap().bytes().await.unwrap();
        assert_eq!(whole.len(), SIZE);
    }

    #[tokio::test]
    async fn blocks_on_disk_outlive_the_process_that_read_them() {
        let dir = tempfile::tempdir().unwrap();
        let inner = store_with_object().await;
        let all = content();
        let a = Path::from("a");
        {
            let cache = RangeCache::new(config(dir.path(), 16 * BLOCK_BYTES)).unwrap();
            let store = cache.wrap(inner.clone(), "w", "t");
            assert_eq!(store.get_range(&a, 10..20).await.unwrap(), &all[10..20]);
            // The disk write runs in the background.
            for _ in 0..100 {
                if cache.disk.entry_count() == 1 || {
                    cache.disk.run_pending_tasks();
                    cache.disk.entry_count() == 1
                } {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert_eq!(cache.disk.entry_count(), 1);
        }
        // A write an earlier process left unfinished is removed.
        std::fs::write(dir.path().join("cache/stray.1.tmp"), b"x").unwrap();
        let cache = RangeCache::new(config(dir.path(), 16 * BLOCK_BYTES)).unwrap();
        assert!(!dir.path().join("cache/stray.1.tmp").exists());
        let store = cache.wrap(inner, "w", "t");
        assert_eq!(store.get_range(&a, 30..40).await.unwrap(), &all[30..40]);
        assert_eq!(counts(&cache), [0, 1, 0]);
        // Now in memory too.
        assert_eq!(store.get_range(&a, 50..60).await.unwrap(), &all[50..60]);
        assert_eq!(counts(&cache), [1, 1, 0]);
        // Another scope is another object.
        let other = cache.wrap(store_with_object().await, "v", "t");
        assert_eq!(other.get_range(&a, 30..40).await.unwrap(), &all[30..40]);
        assert_eq!(counts(&cache), [1, 1, 1]);
    }

    #[tokio::test]
    async fn committed_files_written_through_are_read_after_a_restart_without_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let hot = |memory| CacheConfig {
            hot_bytes: 16 * BLOCK_BYTES,
            ..config(dir.path(), memory)
        };
        let policy = HotPolicy {
            window_ms: DEFAULT_HOT_WINDOW_MS,
            share_bytes: 16 * BLOCK_BYTES,
        };
        let all = content();
        let a = Path::from("a");
        {
            let cache = RangeCache::new(hot(16 * BLOCK_BYTES)).unwrap();
            let written = cache.write_through(Arc::new(InMemory::new())).unwrap();
            written
                .put(&a, PutPayload::from(all.clone()))
                .await
                .unwrap();
            let now = chrono::Utc::now().timestamp_millis();
            let admitted = cache
                .admit_hot(&written, "w", "t", policy, std::slice::from_ref(&a), now)
                .await;
            assert_eq!(admitted, 1);
            assert_eq!(cache.hot_usage()["t"].bytes, SIZE as u64);
        }
        // Restarted, over a store that has nothing: sizes and blocks come from the hot tier.
        let cache = RangeCache::new(hot(16 * BLOCK_BYTES)).unwrap();
        let store = cache.wrap(Arc::new(InMemory::new()), "w", "t");
        let ranges = [
            0..10,
            2 * BLOCK_BYTES..2 * BLOCK_BYTES + 7,
            SIZE as u64 - 3..SIZE as u64,
        ];
        let got = store.get_ranges(&a, &ranges).await.unwrap();
        for (bytes, range) in got.iter().zip(&ranges) {
            assert_eq!(bytes, &all[range.start as usize..range.end as usize]);
        }
        let reads = &cache.tenant_reads()[0].1;
        assert_eq!(reads.hot_hits.load(Ordering::Relaxed), 3);
        assert_eq!(reads.misses.load(Ordering::Relaxed), 0);
        // Another scope's object of the same path is not the hot one.
        let other = cache.wrap(Arc::new(InMemory::new()), "v", "u");
        assert!(other.get_range(&a, 0..10).await.is_err());
    }

    #[tokio::test]
    async fn a_memory_tier_smaller_than_the_data_sends_reads_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = RangeCache::new(config(dir.path(), BLOCK_BYTES)).unwrap();
        let store = cache.wrap(store_with_object().await, "w", "t");
        let all = content();
        let a = Path::from("a");
        let every_block =
            |n: u64| (0..4).map(move |b| b * BLOCK_BYTES + n..b * BLOCK_BYTES + n + 4);
        for range in every_block(0) {
            let (start, end) = (range.start as usize, range.end as usize);
            assert_eq!(store.get_range(&a, range).await.unwrap(), &all[start..end]);
        }
        assert!(cache.memory.weighted_size() <= BLOCK_BYTES);
        for _ in 0..100 {
            cache.disk.run_pending_tasks();
            if cache.disk.entry_count() == 4 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(cache.disk.entry_count(), 4);
        for range in every_block(1) {
            let (start, end) = (range.start as usize, range.end as usize);
            assert_eq!(store.get_range(&a, range).await.unwrap(), &all[start..end]);
        }
        let [memory, disk, misses] = counts(&cache);
        assert_eq!(misses, 4, "nothing fetched twice");
        assert!(
            disk >= 3,
            "at most one block stays in memory: {memory} memory, {disk} disk"
        );
        assert!(cache.memory.weighted_size() <= BLOCK_BYTES);
    }
}
