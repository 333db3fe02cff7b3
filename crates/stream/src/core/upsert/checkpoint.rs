//! A key index's checkpoint: the index as it described one snapshot, kept in Floe's own
//! directory of the warehouse (`.floe/key-index/<sha-256 of the table's location>.bin`, where
//! no table lies and no credentials vended for a table reach) so that a node that starts (or
//! takes over the table) catches the index up from that snapshot instead of reading every key
//! of the table again.
//!
//! The node committing a table's upserts writes the checkpoint after a commit, at most once a
//! [`EVERY`] per table, in the background; a checkpoint is only ever a starting point. It is
//! taken only when it names the table (uuid), its key, the key's types and their encoding (a
//! probe: fixed values as this build encodes them, so an Arrow release that encodes rows
//! otherwise never reads an older checkpoint), and a snapshot on the line of `main`, with no
//! more files and places than that snapshot has data files and rows; anything else — a
//! missing, foreign, truncated, corrupt or oversized file, a snapshot expired or rolled back —
//! and the index is built from the table as before ([`super::ready`]). Its files are checked
//! against the table's live files, and its positions against their row counts, when it is
//! caught up.
//!
//! Form (little-endian): the magic `FLOEKIX1`; a header (u32 length, then JSON: table, key
//! field ids, key types, probe, snapshot id, data files); u64 count of places, each a u16 key length,
//! the key (its comparable encoding), a u32 data file (an index into the header's files) and a
//! u64 position; a CRC-32 of everything before it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_sql::scan::TableAccess;
use iceberg::spec::TableMetadata;
use serde::{Deserialize, Serialize};

use super::MAX_KEY_BYTES;
use super::index::{Described, KeyIndex, Slot};
use crate::Refusal;

/// The least time between two checkpoints of a table written by one node.
pub const EVERY: Duration = Duration::from_secs(60);

/// The largest checkpoint read (an index of some 40 M keys).
const MAX_BYTES: u64 = 1 << 30;

const MAGIC: &[u8; 8] = b"FLOEKIX1";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Header {
    table: uuid::Uuid,
    key_ids: Vec<i32>,
    types: Vec<String>,
    probe: String,
    snapshot_id: Option<i64>,
    files: Vec<String>,
}

fn type_names(described: &Described) -> Vec<String> {
    described.types.iter().map(|t| format!("{t:?}")).collect()
}

/// `index` in the checkpoint's form; none when its key types have no probe or it holds a key
/// longer than a checkpoint takes (another writer's rows).
pub fn encode(index: &KeyIndex) -> Option<Vec<u8>> {
    let probe = hex::encode(index.probe()?);
    if index.entries().any(|(key, _)| key.len() > MAX_KEY_BYTES) {
        return None;
    }
    // Files still indexed, numbered afresh.
    let mut renumbered = vec![u32::MAX; index.slots.len()];
    let mut files = Vec::new();
    for (id, slot) in index.slots.iter().enumerate() {
        if !slot.path.is_empty() && index.slot_of.contains_key(&slot.path) {
            renumbered[id] = files.len() as u32;
            files.push(slot.path.clone());
        }
    }
    let header = Header {
        table: index.described.table,
        key_ids: index.described.key_ids.clone(),
        types: type_names(&index.described),
        probe,
        snapshot_id: index.described.snapshot_id,
        files,
    };
    let header = serde_json::to_vec(&header).expect("a header encodes");
    let mut out = Vec::with_capacity(32 + header.len() + index.places.len() * 24);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    let count_at = out.len();
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut count = 0u64;
    for (key, (slot, position)) in index.entries() {
        let Some(&file) = renumbered.get(slot as usize).filter(|&&f| f != u32::MAX) else {
            continue;
        };
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&file.to_le_bytes());
        out.extend_from_slice(&position.to_le_bytes());
        count += 1;
    }
    out[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    Some(out)
}

/// Reads a checkpoint's bytes, each step bounded by what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        if n > self.bytes.len() {
            return Err(Refusal::malformed("it ends early"));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Refusal> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
}

/// The index `bytes` hold, when they are a whole checkpoint of the table and key `wanted`
/// describes (at any snapshot) that `accept` takes — given the snapshot it names and its
/// number of files, it answers the most places the checkpoint may hold, or why not; why not
/// otherwise. Its files have no spec or partition yet: catching it up says where each lies.
pub fn decode(
    bytes: &[u8],
    wanted: &Described,
    accept: impl FnOnce(Option<i64>, usize) -> Result<u64, Refusal>,
) -> Result<KeyIndex, Refusal> {
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
        return Err(Refusal::malformed("it ends early"));
    };
    let mut sum = flate2::Crc::new();
    sum.update(body);
    if sum.sum() != u32::from_le_bytes(*crc) {
        return Err(Refusal::malformed("its checksum does not match"));
    }
    let mut reader = Reader { bytes: body };
    if reader.take(MAGIC.len())? != MAGIC {
        return Err(Refusal::malformed("it is not a Floe key index"));
    }
    let length = u32::from_le_bytes(reader.array()?) as usize;
    let header: Header = serde_json::from_slice(reader.take(length)?)
        .map_err(|e| Refusal::malformed(format!("its header: {e}")))?;
    if header.table != wanted.table
        || header.key_ids != wanted.key_ids
        || header.types != type_names(wanted)
    {
        return Err(Refusal::unfit("it describes another table or key"));
    }
    let most = accept(header.snapshot_id, header.files.len())?;
    let mut index = KeyIndex::new(Described {
        snapshot_id: header.snapshot_id,
        ..wanted.clone()
    })
    .map_err(|e| Refusal::unfit(e.to_string()))?;
    if index.probe().map(hex::encode) != Some(header.probe) {
        return Err(Refusal::unfit(
            "its keys are encoded otherwise than this build encodes them",
        ));
    }
    let mut ids = Vec::with_capacity(header.files.len());
    for path in header.files {
        if path.is_empty() {
            return Err(Refusal::malformed("it names a data file without a path"));
        }
        let slot = Slot {
            path,
            spec_id: 0,
            partition: iceberg::spec::Struct::empty(),
        };
        ids.push(
            index
                .add_slot(slot)
                .map_err(|e| Refusal::unsupported(e.to_string()))?,
        );
    }
    let count = u64::from_le_bytes(reader.array()?);
    // Each place takes at least 15 bytes: a count beyond what is left is a lie.
    if count > (reader.bytes.len() / 15) as u64 {
        return Err(Refusal::malformed("it counts more places than it holds"));
    }
    if count > most {
        return Err(Refusal::unfit(format!(
            "it counts {count} places, more than the {most} rows its snapshot holds"
        )));
    }
    for _ in 0..count {
        let length = u16::from_le_bytes(reader.array()?) as usize;
        if length == 0 || length > MAX_KEY_BYTES {
            return Err(Refusal::malformed(format!(
                "it holds a key of {length} bytes"
            )));
        }
        let key: Box<[u8]> = reader.take(length)?.into();
        let file = u32::from_le_bytes(reader.array()?) as usize;
        let position = u64::from_le_bytes(reader.array()?);
        let &slot = ids.get(file).ok_or_else(|| {
            Refusal::malformed(format!("it names data file {file} of {}", ids.len()))
        })?;
        index.insert(key, (slot, position));
    }
    if !reader.bytes.is_empty() {
        return Err(Refusal::malformed("it holds more than it says"));
    }
    Ok(index)
}

/// Whether snapshot `ancestor` is `id` or one of its ancestors in `metadata`.
pub(super) fn on_line(metadata: &TableMetadata, id: i64, ancestor: i64) -> bool {
    let mut at = Some(id);
    while let Some(id) = at {
        if id == ancestor {
            return true;
        }
        at = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.parent_snapshot_id());
    }
    false
}

/// What a checkpoint naming `snapshot` with `files` data files may hold in `metadata`'s
/// table: a snapshot on `main`'s line, no more files than it has data files and no more
/// places than it has rows (bounds on its memory that the table itself sets).
fn acceptable(
    metadata: &TableMetadata,
    snapshot: Option<i64>,
    files: usize,
) -> Result<u64, Refusal> {
    let named = snapshot
        .and_then(|id| metadata.snapshot_by_id(id))
        .ok_or_else(|| Refusal::unfit("it names no snapshot of the table"))?;
    let current = metadata.current_snapshot().map(|s| s.snapshot_id());
    if !current.is_some_and(|current| on_line(metadata, current, named.snapshot_id())) {
        return Err(Refusal::unfit("its snapshot is not on main's line"));
    }
    let total = |name: &str| -> Result<u64, Refusal> {
        named
            .summary()
            .additional_properties
            .get(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Refusal::unfit(format!("its snapshot's summary has no {name}")))
    };
    if files as u64 > total("total-data-files")? {
        return Err(Refusal::unfit(
            "it names more data files than its snapshot has",
        ));
    }
    total("total-records")
}

/// The checkpoint of `metadata`'s table (at `location`, in `access`'s warehouse) for the
/// table and key `wanted` describes, when there is a usable one; a reason not to use it is
/// logged, never an error.
pub async fn read(
    access: &TableAccess,
    metadata: Arc<TableMetadata>,
    wanted: &Described,
) -> Option<KeyIndex> {
    let path = access.storage.key_index_checkpoint(metadata.location());
    let refused = |why: &dyn std::fmt::Display| {
        tracing::warn!(file = %path, reason = %why, "an upsert key index checkpoint not used");
        None
    };
    match access.storage.size(&path).await {
        Ok(None) => return None,
        Ok(Some(size)) if size > MAX_BYTES => {
            return refused(&format!("it is {size} bytes, more than {MAX_BYTES}"));
        }
        Ok(Some(_)) => {}
        Err(e) => return refused(&e),
    }
    let bytes = match access.storage.read(&path).await {
        Ok(bytes) if bytes.len() as u64 > MAX_BYTES => {
            return refused(&format!("it is more than {MAX_BYTES} bytes"));
        }
        Ok(bytes) => bytes,
        Err(e) => return refused(&e),
    };
    let wanted = wanted.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        decode(&bytes, &wanted, |snapshot, files| {
            acceptable(&metadata, snapshot, files)
        })
    })
    .await;
    match decoded {
        Ok(Ok(index)) => Some(index),
        Ok(Err(why)) => refused(&why),
        Err(e) => refused(&e),
    }
}

/// Writes `index`'s checkpoint for the table at `location` (in `access`'s warehouse) in the
/// background when this node has written none of it for [`EVERY`] (the index remembers
/// when).
pub fn maybe_write(access: &TableAccess, location: &str, index: &mut KeyIndex) {
    if index.checkpointed.is_some_and(|at| at.elapsed() < EVERY) {
        return;
    }
    index.checkpointed = Some(Instant::now());
    let Some(bytes) = encode(index) else {
        return;
    };
    let path = access.storage.key_index_checkpoint(location);
    let storage = access.storage.clone();
    tokio::spawn(async move {
        if let Err(e) = storage.write(&path, bytes.into()).await {
            tracing::warn!(file = %path, error = %e, "write an upsert key index checkpoint");
        }
    });
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    use super::*;

    fn any(_: Option<i64>, _: usize) -> Result<u64, Refusal> {
        Ok(u64::MAX)
    }

    fn described() -> Described {
        Described {
            table: uuid::Uuid::from_u128(7),
            key_ids: vec![1],
            types: vec![DataType::Int64],
            snapshot_id: Some(42),
        }
    }

    fn index() -> KeyIndex {
        let mut index = KeyIndex::new(described()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        for (file, ids) in [
            ("s3://b/t/a.parquet", vec![1, 2, 3]),
            ("s3://b/t/b.parquet", vec![3, 4]),
        ] {
            let keys = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(ids.clone()))],
            )
            .unwrap();
            let positions: Vec<u64> = (0..ids.len() as u64).collect();
            let slot = Slot {
                path: file.into(),
                spec_id: 0,
                partition: iceberg::spec::Struct::empty(),
            };
            index.insert_file(slot, &keys, &positions).unwrap();
        }
        index
    }

    fn places(index: &KeyIndex) -> Vec<(Vec<u8>, String, u64)> {
        let mut all: Vec<_> = index
            .entries()
            .map(|(key, (slot, position))| {
                (
                    key.to_vec(),
                    index.slots[slot as usize].path.clone(),
                    position,
                )
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn a_checkpoint_reads_back_as_the_index_it_was() {
        let index = index();
        let back = decode(&encode(&index).unwrap(), &described(), any).unwrap();
        assert_eq!(back.described, index.described);
        assert_eq!(back.keys(), 4);
        assert_eq!(places(&back), places(&index));
        assert_eq!(places(&back).len(), 5, "key 3 is in both files");
    }

    #[test]
    fn forgotten_files_are_not_written() {
        let mut index = index();
        index.forget_files(&["s3://b/t/a.parquet".to_string()].into_iter().collect());
        let back = decode(&encode(&index).unwrap(), &described(), any).unwrap();
        assert_eq!(back.keys(), 2);
        assert_eq!(back.files().collect::<Vec<_>>(), ["s3://b/t/b.parquet"]);
    }

    #[test]
    fn a_checkpoint_of_another_table_or_key_or_type_is_refused() {
        let bytes = encode(&index()).unwrap();
        let other_table = Described {
            table: uuid::Uuid::from_u128(8),
            ..described()
        };
        let other_key = Described {
            key_ids: vec![2],
            ..described()
        };
        let other_type = Described {
            types: vec![DataType::Int32],
            ..described()
        };
        for wanted in [other_table, other_key, other_type] {
            let error = decode(&bytes, &wanted, any).err().unwrap().to_string();
            assert!(error.contains("another table or key"), "{error}");
        }
    }

    #[test]
    fn damaged_checkpoints_are_refused_without_panic() {
        let bytes = encode(&index()).unwrap();
        // Every truncation and every single flipped byte.
        for end in 0..bytes.len() {
            assert!(decode(&bytes[..end], &described(), any).is_err());
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x5a;
            assert!(decode(&damaged, &described(), any).is_err(), "byte {at}");
        }
        // A forged checkpoint with a valid checksum: a count of places it does not hold, and
        // a place naming a file the header does not list.
        let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut body = bytes[..bytes.len() - 4].to_vec();
            edit(&mut body);
            let mut crc = flate2::Crc::new();
            crc.update(&body);
            body.extend_from_slice(&crc.sum().to_le_bytes());
            decode(&body, &described(), any).err().unwrap().to_string()
        };
        let header = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let count_at = 12 + header;
        let error =
            forge(&|body| body[count_at..count_at + 8].copy_from_slice(&u64::MAX.to_le_bytes()));
        assert!(error.contains("counts more places"), "{error}");
        let error = forge(&|body| {
            // The first place's file (after its u16 length and 9-byte key).
            let file_at = count_at + 8 + 2 + 9;
            body[file_at..file_at + 4].copy_from_slice(&9u32.to_le_bytes());
        });
        assert!(error.contains("names data file 9"), "{error}");
        // Keys encoded otherwise (another Arrow release): the probe differs.
        let error = forge(&|body| {
            let header = std::str::from_utf8(&body[12..count_at]).unwrap();
            let at = 12 + header.find("\"probe\":\"").unwrap() + 9;
            body[at] = if body[at] == b'0' { b'1' } else { b'0' };
        });
        assert!(error.contains("encoded otherwise"), "{error}");
        // More places than the snapshot it names has rows.
        let error = decode(&bytes, &described(), |snapshot, files| {
            assert_eq!((snapshot, files), (Some(42), 2));
            Ok(4)
        })
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("more than the 4 rows"), "{error}");
        assert!(decode(&bytes, &described(), |_, _| Ok(5)).is_ok());
        // A snapshot the table refuses.
        let error = decode(&bytes, &described(), |_, _| {
            Err(Refusal::unfit("not on main"))
        });
        assert_eq!(error.err().unwrap().to_string(), "not on main");
    }
}
