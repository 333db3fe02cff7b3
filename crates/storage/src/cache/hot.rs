//! The hot tier: whole data files a node committed, kept on its local disk while they are
//! inside their tenant's window, so that queries over recent data read no object storage.
//! Object storage stays the system of record; a hot file is only ever a copy of it.
//!
//! A hot file is stored as the blocks the range cache reads ([`super::BLOCK_BYTES`]-aligned,
//! named by the hash of the file's scoped path and the block's number — never by the path,
//! which comes from metadata a client wrote), in `<cache-dir>/hot/`. The index of hot files
//! (`index.json`: each file's tenant, size, commit time and block checksums, and each
//! tenant's settings) is rewritten atomically on every change, so a restarted node serves
//! the same files. Blocks are pinned: the ordinary disk tier's eviction never sees them.
//! They leave by the rules of [`super::evict`] (age, the tenant's share, the node's
//! pressure) and are then handed to the ordinary disk tier, which keeps or drops them by its
//! own policy.
//!
//! Anything that does not check out — an index that does not parse, a block of the wrong
//! length or checksum, a missing block — drops the file from the tier and the read goes to
//! object storage: a miss, never a wrong answer.

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::BLOCK_BYTES;
use super::evict::{self, HotPolicy, Resident};

/// The index's file name inside the hot directory.
const INDEX: &str = "index.json";

/// How often reads look for files past their window (milliseconds).
const SWEEP_EVERY_MS: i64 = 30_000;

/// Longest tenant name the index takes (a warehouse name is far shorter).
const MAX_TENANT: usize = 512;

/// One hot file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct HotFile {
    tenant: String,
    size: u64,
    committed_ms: i64,
    /// CRC-32 of each block, in order.
    checksums: Vec<u32>,
}

/// The index, as kept in memory and on disk.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Hot files by id: the hex SHA-256 of their scoped path.
    files: BTreeMap<String, HotFile>,
    /// Each tenant's settings as its latest admission found them.
    policies: BTreeMap<String, HotPolicy>,
}

/// A file leaving the tier: its id and the sizes of its blocks, still in the hot directory.
#[derive(Debug)]
pub(crate) struct Leaving {
    pub id: String,
    pub blocks: Vec<u32>,
}

/// A tenant's hot files on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotUsage {
    pub files: u64,
    pub bytes: u64,
}

/// The block sizes of a file of `size` bytes.
fn block_sizes(size: u64) -> Vec<u32> {
    (0..size.div_ceil(BLOCK_BYTES))
        .map(|b| ((size - b * BLOCK_BYTES).min(BLOCK_BYTES)) as u32)
        .collect()
}

fn block_name(id: &str, block: u64) -> String {
    format!("{id}-{block}")
}

/// The hot tier of one cache directory.
#[derive(Debug)]
pub(crate) struct HotTier {
    dir: PathBuf,
    capacity: u64,
    /// For tenants the index has no settings of.
    default_policy: HotPolicy,
    state: Mutex<State>,
    next_sweep_ms: AtomicI64,
}

impl HotTier {
    /// The tier kept in `dir`: the files its index lists whose blocks are all there with
    /// their lengths (others are dropped), and nothing else (stray files are removed).
    pub fn open(dir: PathBuf, capacity: u64, default_policy: HotPolicy) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut state: State = match std::fs::read(dir.join(INDEX)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(dir = %dir.display(), error = %e, "hot tier index unreadable; start empty");
                State::default()
            }),
            Err(_) => State::default(),
        };
        let present = |id: &str, file: &HotFile| {
            let sizes = block_sizes(file.size);
            file.tenant.len() <= MAX_TENANT
                && file.size <= capacity
                && file.checksums.len() == sizes.len()
                && sizes.iter().enumerate().all(|(b, size)| {
                    std::fs::metadata(dir.join(block_name(id, b as u64)))
                        .is_ok_and(|m| m.is_file() && m.len() == u64::from(*size))
                })
        };
        state.files.retain(|id, file| {
            id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) && present(id, file)
        });
        state
            .policies
            .retain(|tenant, _| tenant.len() <= MAX_TENANT);
        // Every file of the directory that is neither the index nor a listed block goes.
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let listed = name == INDEX
                || name.split_once('-').is_some_and(|(id, block)| {
                    state.files.get(id).is_some_and(|file| {
                        block
                            .parse::<u64>()
                            .is_ok_and(|b| b < file.checksums.len() as u64)
                    })
                });
            if !listed && entry.file_type()?.is_file() {
                std::fs::remove_file(entry.path())?;
            }
        }
        let tier = Self {
            dir,
            capacity,
            default_policy,
            state: Mutex::new(state),
            next_sweep_ms: AtomicI64::new(0),
        };
        tier.persist(&tier.state.lock().expect("hot index"))?;
        Ok(tier)
    }

    pub fn dir(&self) -> &FsPath {
        &self.dir
    }

    /// The size of hot file `id`, if it is one.
    pub fn size(&self, id: &str) -> Option<u64> {
        self.state
            .lock()
            .expect("hot index")
            .files
            .get(id)
            .map(|f| f.size)
    }

    /// Block `block` of hot file `id`, checked against its length and checksum, with its
    /// tenant. A block that does not check out drops the whole file from the tier.
    pub async fn read(&self, id: &str, block: u64) -> Option<(Bytes, String)> {
        let (expected, tenant) = {
            let state = self.state.lock().expect("hot index");
            let file = state.files.get(id)?;
            let checksum = *file.checksums.get(block as usize)?;
            let size = block_sizes(file.size)[block as usize];
            ((size, checksum), file.tenant.clone())
        };
        let read = tokio::fs::read(self.dir.join(block_name(id, block))).await;
        match read {
            Ok(bytes)
                if bytes.len() == expected.0 as usize && crc32fast::hash(&bytes) == expected.1 =>
            {
                Some((Bytes::from(bytes), tenant))
            }
            _ => {
                tracing::warn!(
                    file = id,
                    block,
                    "hot tier block missing or corrupt; drop the file"
                );
                self.drop_file(id);
                None
            }
        }
    }

    /// Drops file `id` from the tier and deletes its blocks.
    pub fn drop_file(&self, id: &str) {
        let mut state = self.state.lock().expect("hot index");
        if let Some(file) = state.files.remove(id) {
            for block in 0..file.checksums.len() as u64 {
                let _ = std::fs::remove_file(self.dir.join(block_name(id, block)));
            }
            let _ = self.persist(&state);
        }
    }

    /// Each tenant's hot files.
    pub fn usage(&self) -> BTreeMap<String, HotUsage> {
        let state = self.state.lock().expect("hot index");
        let mut usage: BTreeMap<String, HotUsage> = state
            .policies
            .keys()
            .map(|t| (t.clone(), HotUsage::default()))
            .collect();
        for file in state.files.values() {
            let entry = usage.entry(file.tenant.clone()).or_default();
            entry.files += 1;
            entry.bytes += file.size;
        }
        usage
    }

    /// Admits `bytes`, the whole of file `id` that `tenant` committed at `committed_ms`, when
    /// its rules let it in, and takes out what they say must leave (returned, for the
    /// ordinary disk tier). Blocking IO: run it off the async workers.
    pub fn admit(
        &self,
        id: &str,
        tenant: &str,
        policy: HotPolicy,
        committed_ms: i64,
        bytes: &Bytes,
        now_ms: i64,
    ) -> std::io::Result<(bool, Vec<Leaving>)> {
        if tenant.len() > MAX_TENANT {
            return Ok((false, Vec::new()));
        }
        let mut state = self.state.lock().expect("hot index");
        state.policies.insert(tenant.to_string(), policy);
        if state.files.contains_key(id) {
            return Ok((true, Vec::new()));
        }
        let size = bytes.len() as u64;
        let plan = self.plan(&state, now_ms, Some((tenant, size)));
        let leaving = Self::take_out(&mut state, plan.expired.into_iter().chain(plan.pressed));
        let mut admitted = false;
        if plan.admit && committed_ms >= now_ms.saturating_sub(policy.window_ms) {
            match self.write_blocks(id, bytes) {
                Ok(checksums) => {
                    state.files.insert(
                        id.to_string(),
                        HotFile {
                            tenant: tenant.to_string(),
                            size,
                            committed_ms,
                            checksums,
                        },
                    );
                    admitted = true;
                }
                Err(e) => tracing::warn!(file = id, error = %e, "write a hot file"),
            }
        }
        self.persist(&state)?;
        Ok((admitted, leaving))
    }

    /// Takes out files past their window (and over shares changed since), at most every
    /// [`SWEEP_EVERY_MS`]; `force` sweeps now.
    pub fn sweep(&self, now_ms: i64, force: bool) -> Vec<Leaving> {
        let next = self.next_sweep_ms.load(Ordering::Relaxed);
        if !force
            && (now_ms < next
                || self
                    .next_sweep_ms
                    .compare_exchange(
                        next,
                        now_ms + SWEEP_EVERY_MS,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_err())
        {
            return Vec::new();
        }
        let mut state = self.state.lock().expect("hot index");
        let plan = self.plan(&state, now_ms, None);
        if plan.expired.is_empty() && plan.pressed.is_empty() {
            return Vec::new();
        }
        let leaving = Self::take_out(&mut state, plan.expired.into_iter().chain(plan.pressed));
        if let Err(e) = self.persist(&state) {
            tracing::warn!(error = %e, "write the hot tier index");
        }
        leaving
    }

    fn plan(&self, state: &State, now_ms: i64, incoming: Option<(&str, u64)>) -> evict::Plan {
        let files: Vec<Resident<'_>> = state
            .files
            .iter()
            .map(|(id, f)| Resident {
                id,
                tenant: &f.tenant,
                bytes: f.size,
                committed_ms: f.committed_ms,
            })
            .collect();
        let policy = |tenant: &str| {
            state
                .policies
                .get(tenant)
                .copied()
                .unwrap_or(self.default_policy)
        };
        evict::plan(&files, &policy, self.capacity, now_ms, incoming)
    }

    fn take_out(state: &mut State, ids: impl Iterator<Item = String>) -> Vec<Leaving> {
        ids.filter_map(|id| {
            let file = state.files.remove(&id)?;
            Some(Leaving {
                blocks: block_sizes(file.size),
                id,
            })
        })
        .collect()
    }

    /// Writes `bytes` as blocks of file `id` (each renamed into place), returning their
    /// checksums; on failure none is left behind.
    fn write_blocks(&self, id: &str, bytes: &Bytes) -> std::io::Result<Vec<u32>> {
        let mut checksums = Vec::new();
        for (b, chunk) in bytes.chunks(BLOCK_BYTES as usize).enumerate() {
            let name = block_name(id, b as u64);
            let temporary = self.dir.join(format!("{name}.{}.tmp", std::process::id()));
            let written = std::fs::write(&temporary, chunk)
                .and_then(|()| std::fs::rename(&temporary, self.dir.join(&name)));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&temporary);
                for earlier in 0..b as u64 {
                    let _ = std::fs::remove_file(self.dir.join(block_name(id, earlier)));
                }
                return Err(e);
            }
            checksums.push(crc32fast::hash(chunk));
        }
        Ok(checksums)
    }

    /// Writes the index atomically: a crash leaves the old one or the new one.
    fn persist(&self, state: &State) -> std::io::Result<()> {
        let temporary = self.dir.join(format!("{INDEX}.{}.tmp", std::process::id()));
        std::fs::write(&temporary, serde_json::to_vec(state)?)?;
        std::fs::rename(&temporary, self.dir.join(INDEX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn policy(share_bytes: u64) -> HotPolicy {
        HotPolicy {
            window_ms: 24 * HOUR,
            share_bytes,
        }
    }

    fn id(n: u8) -> String {
        format!("{n:064x}")
    }

    fn data(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i % 253) as u8).collect::<Vec<u8>>())
    }

    #[tokio::test]
    async fn a_tenant_over_its_share_evicts_its_own_oldest_files_and_the_index_survives() {
        let dir = tempfile::tempdir().unwrap();
        let hot_dir = dir.path().join("hot");
        let now = 1000 * HOUR;
        let share = 2 * BLOCK_BYTES;
        let tier = HotTier::open(hot_dir.clone(), 100 * BLOCK_BYTES, policy(share)).unwrap();
        let file = data(BLOCK_BYTES as usize + 10);
        let admit = |n: u8, tenant: &str, at: i64| {
            tier.admit(&id(n), tenant, policy(share), at, &file, now)
                .unwrap()
        };
        assert!(admit(1, "a", now - 3 * HOUR).0);
        assert!(admit(2, "b", now - 4 * HOUR).0);
        // a's second file puts it over its share: its first (not b's, older) leaves.
        let (admitted, leaving) = admit(3, "a", now - 2 * HOUR);
        assert!(admitted);
        assert_eq!(leaving.len(), 1);
        assert_eq!(leaving[0].id, id(1));
        assert_eq!(leaving[0].blocks, vec![BLOCK_BYTES as u32, 10]);
        assert_eq!(tier.usage()["a"].files, 1);
        assert_eq!(tier.usage()["b"].files, 1);
        drop(tier);

        // A restart keeps the tenants' files; the leaving file's blocks are strays now.
        let tier = HotTier::open(hot_dir.clone(), 100 * BLOCK_BYTES, policy(share)).unwrap();
        assert!(!hot_dir.join(block_name(&id(1), 0)).exists());
        assert_eq!(tier.size(&id(3)), Some(file.len() as u64));
        let (block, tenant) = tier.read(&id(3), 1).await.unwrap();
        assert_eq!((block.len(), tenant.as_str()), (10, "a"));

        // A corrupt block is a miss, and the file leaves the tier.
        std::fs::write(hot_dir.join(block_name(&id(2), 1)), b"0123456789").unwrap();
        assert!(tier.read(&id(2), 1).await.is_none());
        assert_eq!(tier.size(&id(2)), None);

        // Past the window, a sweep takes it out.
        let leaving = tier.sweep(now + 23 * HOUR, true);
        assert_eq!(leaving.len(), 1);
        assert_eq!(leaving[0].id, id(3));
    }

    #[test]
    fn an_unreadable_index_starts_an_empty_tier() {
        let dir = tempfile::tempdir().unwrap();
        let hot_dir = dir.path().join("hot");
        std::fs::create_dir_all(&hot_dir).unwrap();
        std::fs::write(hot_dir.join(INDEX), b"{not json").unwrap();
        std::fs::write(hot_dir.join(block_name(&id(1), 0)), b"x").unwrap();
        let tier = HotTier::open(hot_dir.clone(), BLOCK_BYTES, policy(BLOCK_BYTES)).unwrap();
        assert!(tier.usage().is_empty());
        assert!(!hot_dir.join(block_name(&id(1), 0)).exists());
    }
}
