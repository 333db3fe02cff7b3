//! The index file of one data file: a Puffin file beside it, one blob per indexed column.
//!
//! Written with iceberg's [`PuffinWriter`]. Read back by [`parse`], within bounds, since the
//! bytes are hostile: iceberg 0.10's reader subtracts the footer's lengths from the file's
//! unchecked and inflates compressed footers and blobs without limit. [`parse`] checks the
//! Puffin framing itself (magic at both ends, an uncompressed footer inside the file) and
//! hands only the footer's JSON to iceberg's [`FileMetadata`]; every blob must lie inside
//! the file, be uncompressed and name the data file and the row count it was built for.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::puffin::{Blob, CompressionCodec, FileMetadata, PuffinWriter};

use super::bloom::TokenBloom;

/// The Puffin blob type of a column's token filter.
pub const BLOB_TYPE: &str = "floe-token-bloom-v1";
/// What a data file's location is followed by to name its index file.
pub const SUFFIX: &str = ".tokens.puffin";
/// The largest index file read.
pub(crate) const MAX_FILE_BYTES: u64 = 64 << 20;
/// The largest footer read (its JSON lists the blobs: a few hundred bytes each).
const MAX_FOOTER_BYTES: usize = 1 << 20;
/// Most blobs (indexed columns) one index file may list.
const MAX_BLOBS: usize = 64;

const PUFFIN_MAGIC: [u8; 4] = *b"PFA1";
/// The footer's fixed tail: payload length, flags, magic.
const FOOTER_TAIL: usize = 12;

/// The location of the index file of the data file at `data_file`.
pub fn index_location(data_file: &str) -> String {
    format!("{data_file}{SUFFIX}")
}

/// The data file whose index file `location` names, if it names one.
pub fn data_file_of(location: &str) -> Option<&str> {
    location.strip_suffix(SUFFIX).filter(|d| !d.is_empty())
}

/// One data file's index: its columns' filters by field id.
#[derive(Debug, Default)]
pub(crate) struct FileIndex {
    pub columns: HashMap<i32, TokenBloom>,
}

impl FileIndex {
    /// Bytes it takes in memory.
    pub fn size(&self) -> usize {
        64 + self.columns.values().map(|b| b.size() + 16).sum::<usize>()
    }
}

/// Writes the index of the data file at `data_file` (`records` rows): one blob per column,
/// `(field id, name, filter)`.
pub(crate) async fn write(
    file_io: &FileIO,
    data_file: &str,
    records: u64,
    columns: Vec<(i32, String, TokenBloom)>,
) -> iceberg::Result<()> {
    let output = file_io.new_output(index_location(data_file))?;
    let properties = HashMap::from([(
        iceberg::puffin::CREATED_BY_PROPERTY.to_string(),
        format!("Floe {}", env!("CARGO_PKG_VERSION")),
    )]);
    let mut writer = PuffinWriter::new(&output, properties, false).await?;
    for (field_id, name, bloom) in columns {
        let blob = Blob::builder()
            .r#type(BLOB_TYPE.to_string())
            .fields(vec![field_id])
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(bloom.encode(&binding(field_id, data_file, records)))
            .properties(HashMap::from([
                ("data-file".to_string(), data_file.to_string()),
                ("record-count".to_string(), records.to_string()),
                ("column".to_string(), name),
            ]))
            .build();
        writer.add(blob, CompressionCodec::None).await?;
    }
    writer.close().await
}

/// What a filter's checksum covers besides its bytes: the column, data file and row count it
/// was built for, so that a footer edited to name another column or file (its JSON carries no
/// checksum) leaves the filter unusable rather than answering for what it never saw.
fn binding(field_id: i32, data_file: &str, records: u64) -> Vec<u8> {
    format!("{field_id}\u{0}{records}\u{0}{data_file}").into_bytes()
}

/// The index `bytes` hold for the data file at `data_file` of `records` rows; `None` when
/// they are not one (malformed, or built for another file). Blobs of other types are
/// skipped; a malformed blob of this type makes the whole file unusable.
pub(crate) fn parse(bytes: &[u8], data_file: &str, records: u64) -> Option<FileIndex> {
    let len = bytes.len();
    if len < 2 * PUFFIN_MAGIC.len() + FOOTER_TAIL || len as u64 > MAX_FILE_BYTES {
        return None;
    }
    let tail = &bytes[len - FOOTER_TAIL..];
    let payload_len = u32::from_le_bytes(tail[0..4].try_into().ok()?) as usize;
    // Any flag (a compressed footer) is refused: Floe writes none.
    if bytes[..4] != PUFFIN_MAGIC || tail[8..12] != PUFFIN_MAGIC || tail[4..8] != [0; 4] {
        return None;
    }
    if payload_len > MAX_FOOTER_BYTES {
        return None;
    }
    let footer_start = (len - FOOTER_TAIL)
        .checked_sub(payload_len)?
        .checked_sub(PUFFIN_MAGIC.len())?;
    if footer_start < PUFFIN_MAGIC.len() || bytes[footer_start..footer_start + 4] != PUFFIN_MAGIC {
        return None;
    }
    let payload = &bytes[footer_start + 4..len - FOOTER_TAIL];
    let metadata: FileMetadata = serde_json::from_slice(payload).ok()?;
    if metadata.blobs().len() > MAX_BLOBS {
        return None;
    }
    let mut index = FileIndex::default();
    let records_count = records;
    let records = records.to_string();
    for blob in metadata.blobs() {
        if blob.blob_type() != BLOB_TYPE {
            continue;
        }
        let end = blob.offset().checked_add(blob.length())?;
        let properties = blob.properties();
        let fits = blob.offset() >= PUFFIN_MAGIC.len() as u64
            && end <= footer_start as u64
            && blob.compression_codec() == CompressionCodec::None
            && blob.fields().len() == 1
            && properties.get("data-file").map(String::as_str) == Some(data_file)
            && properties.get("record-count") == Some(&records);
        if !fits {
            return None;
        }
        let binding = binding(blob.fields()[0], data_file, records_count);
        let bloom = TokenBloom::decode(&bytes[blob.offset() as usize..end as usize], &binding)?;
        index.columns.insert(blob.fields()[0], bloom);
    }
    Some(index)
}

#[cfg(test)]
mod tests {
    use super::super::bloom::TokenHashes;
    use super::*;

    fn bloom(tokens: &[&str]) -> TokenBloom {
        let mut hashes = TokenHashes::default();
        for t in tokens {
            hashes.add(t);
        }
        hashes.finish().unwrap()
    }

    /// The bytes of an index file written by [`write`] (iceberg's writer) for a data file of
    /// 10 rows in a local warehouse, and the data file's location.
    async fn written(filters: Vec<(i32, String, TokenBloom)>) -> (Vec<u8>, String) {
        let dir = tempfile::tempdir().unwrap();
        let storage = floe_storage::WarehouseStorage::new(floe_storage::StorageProfile::Local {
            path: dir.path().to_string_lossy().into_owned(),
        })
        .unwrap();
        let data = format!("{}/t/data/a.parquet", storage.root());
        write(&storage.file_io(), &data, 10, filters).await.unwrap();
        let bytes = storage.read(&index_location(&data)).await.unwrap().to_vec();
        (bytes, data)
    }

    #[tokio::test]
    async fn an_index_file_round_trips_and_answers_only_for_its_data_file() {
        let (bytes, data) = written(vec![(6, "body".into(), bloom(&["timeout"]))]).await;
        let index = parse(&bytes, &data, 10).unwrap();
        assert!(index.columns[&6].may_contain("timeout"));
        assert!(!index.columns[&6].may_contain("gateway"));
        assert!(parse(&bytes, &data, 11).is_none(), "another row count");
        assert!(parse(&bytes, "other.parquet", 10).is_none(), "another file");
    }

    /// Every truncation and every changed byte gives no index, or fewer columns of the same
    /// one — never a panic, never a filter answering for a column or a file it was not built
    /// for (the footer's JSON is not checksummed, but each filter's checksum covers the
    /// column, file and row count it was built for).
    #[tokio::test]
    async fn damaged_index_files_are_unusable_or_unchanged() {
        let filters = vec![
            (6, "body".to_string(), bloom(&["timeout", "gateway"])),
            (9, "event_name".to_string(), bloom(&["login"])),
        ];
        let (bytes, data) = written(filters.clone()).await;
        let whole = parse(&bytes, &data, 10).unwrap();
        assert_eq!(whole.columns.len(), 2);
        // What a damaged file may still give: some of the columns, each with its own filter.
        let safe = |index: &FileIndex| {
            index
                .columns
                .iter()
                .all(|(id, f)| filters.iter().any(|(i, _, g)| i == id && g == f))
        };
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut], &data, 10).is_none(), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x20, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                // A changed byte of the footer's JSON may still parse (a space for a tab, a
                // blob type no longer this one's): never into a filter for another column.
                if let Some(index) = parse(&damaged, &data, 10) {
                    assert!(safe(&index), "byte {at} ^ {flip:#x} changed the index");
                }
            }
        }
    }

    #[test]
    fn index_files_are_named_after_their_data_files() {
        let data = "s3://b/t/data/x=1/floe-1.parquet";
        assert_eq!(data_file_of(&index_location(data)), Some(data));
        assert_eq!(data_file_of(data), None);
        assert_eq!(data_file_of(SUFFIX), None);
    }
}
