//! Reading manifests as Iceberg Java and PyIceberg do: the table metadata, not the manifest,
//! says which schema and partition spec a manifest's entries were written with.
//!
//! A manifest's Avro header carries `schema`, `schema-id`, `partition-spec`,
//! `partition-spec-id` and `content` keys that repeat what the table metadata and the manifest
//! list already hold. Iceberg Java reads a manifest with the table's spec for the manifest
//! list's `partition_spec_id`, and PyIceberg never looks at the `schema` key; iceberg-rust
//! (`ManifestFile::load_manifest`) instead requires both keys to parse and decodes partition
//! tuples and column bounds with them. Writers get them wrong: DuckDB 1.4 puts the schema of
//! the manifest entry itself in `schema` (a `status`/`data_file` struct whose bound maps are
//! Avro `record`s, which no Iceberg schema parser accepts) and labels delete manifests
//! `content: data`.
//!
//! So every reader in Floe goes through [`load_manifest`]: it reads the header, and when a key
//! disagrees with the table metadata (or does not parse), it rewrites the header with the
//! table's schema (by the manifest's `schema-id`), the table's spec (by the manifest list's
//! spec id) and the manifest list's content before handing the file to iceberg. Nothing else
//! in the file changes: the header is the magic, a map of keys and a sync marker, and the
//! data blocks after it are kept byte for byte. A manifest that agrees with the table is
//! parsed as it is. One that cannot be read even so is an error naming the file, the
//! snapshot that added it and the engine that wrote that snapshot, when it says.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    ManifestEntry, ManifestFile, ManifestStatus, PartitionField, Schema, SchemaRef, TableMetadata,
};
use iceberg::{Error, ErrorKind, Result};

pub use iceberg::spec::Manifest;

/// The sequence number of every file of a format-version 1 table.
const INITIAL_SEQUENCE_NUMBER: i64 = 0;
/// An Avro object container file's first bytes.
const MAGIC: &[u8; 4] = b"Obj\x01";
const SYNC_LENGTH: usize = 16;

/// Reads `manifest_file`, a manifest of the table `metadata` describes, with the schema and
/// partition spec the table metadata holds for it; its entries inherit their snapshot id and
/// sequence numbers from the manifest list, as `ManifestFile::load_manifest` has them.
pub async fn load_manifest(
    file_io: &FileIO,
    metadata: &TableMetadata,
    manifest_file: &ManifestFile,
) -> Result<Manifest> {
    if manifest_file.key_metadata.is_some() {
        // Encrypted: only iceberg can decrypt it, and Floe's writers never encrypt.
        return manifest_file
            .load_manifest(file_io)
            .await
            .map_err(|e| unreadable(metadata, manifest_file, e));
    }
    let bytes = file_io
        .new_input(&manifest_file.manifest_path)?
        .read()
        .await?;
    parse_manifest(&bytes, metadata, manifest_file)
}

/// [`load_manifest`] for a manifest's bytes.
pub fn parse_manifest(
    bytes: &[u8],
    metadata: &TableMetadata,
    manifest_file: &ManifestFile,
) -> Result<Manifest> {
    let parsed = match conform(bytes, metadata, manifest_file) {
        Ok(Some(conformed)) => Manifest::parse_avro(&conformed),
        Ok(None) => Manifest::parse_avro(bytes),
        Err(e) => Err(e),
    };
    let (entries, manifest_metadata) = parsed
        .map_err(|e| unreadable(metadata, manifest_file, e))?
        .into_parts();
    let entries = entries
        .into_iter()
        .map(|entry| {
            let mut entry = std::sync::Arc::unwrap_or_clone(entry);
            inherit(&mut entry, manifest_file);
            entry
        })
        .collect();
    Ok(Manifest::new(manifest_metadata, entries))
}

/// What the spec has an entry take from its manifest list entry when it leaves it out (what
/// iceberg's `ManifestEntry::inherit_data` does for `ManifestFile::load_manifest`).
fn inherit(entry: &mut ManifestEntry, manifest_file: &ManifestFile) {
    if entry.snapshot_id.is_none() {
        entry.snapshot_id = Some(manifest_file.added_snapshot_id);
    }
    let inherits_sequence = entry.status == ManifestStatus::Added
        || manifest_file.sequence_number == INITIAL_SEQUENCE_NUMBER;
    if inherits_sequence {
        entry
            .sequence_number
            .get_or_insert(manifest_file.sequence_number);
        entry
            .file_sequence_number
            .get_or_insert(manifest_file.sequence_number);
    }
}

/// The manifest's bytes with a header that agrees with the table metadata, or `None` when it
/// agrees already.
fn conform(
    bytes: &[u8],
    metadata: &TableMetadata,
    manifest_file: &ManifestFile,
) -> Result<Option<Vec<u8>>> {
    let mut header = Header::read(bytes)?;
    let mut changed = Vec::new();

    let written = header
        .get("schema")
        .and_then(|json| serde_json::from_slice::<Schema>(json).ok());
    if let Some(schema) = table_schema(&header, written.as_ref(), metadata, manifest_file)
        && written.as_ref().map(Schema::as_struct) != Some(schema.as_struct())
    {
        header.set("schema", serialized(&*schema)?);
        header.set("schema-id", schema.schema_id().to_string().into_bytes());
        changed.push("schema");
    }

    if let Some(spec) = metadata.partition_spec_by_id(manifest_file.partition_spec_id) {
        let written = header
            .get("partition-spec")
            .and_then(|json| serde_json::from_slice::<Vec<PartitionField>>(json).ok());
        let written_id = header
            .get("partition-spec-id")
            .and_then(|id| std::str::from_utf8(id).ok()?.parse::<i32>().ok())
            .unwrap_or(0);
        if written.as_deref() != Some(spec.fields()) || written_id != spec.spec_id() {
            header.set("partition-spec", serialized(spec.fields())?);
            header.set("partition-spec-id", spec.spec_id().to_string().into_bytes());
            changed.push("partition-spec");
        }
    }

    let content = header.get("content").map(|c| String::from_utf8_lossy(c));
    let listed = manifest_file.content.to_string();
    if content.as_deref().unwrap_or("data") != listed {
        header.set("content", listed.into_bytes());
        changed.push("content");
    }

    if changed.is_empty() {
        return Ok(None);
    }
    tracing::debug!(
        manifest = %manifest_file.manifest_path,
        keys = ?changed,
        "read a manifest with its table's schema and spec",
    );
    Ok(Some(header.write(bytes)))
}

/// The table's schema the manifest's entries were written with: the one of its `schema-id`;
/// failing that, the schema the manifest carries if it parses; failing that, the schema of
/// the snapshot that added the manifest, or the current one. `None`: keep what it carries.
fn table_schema(
    header: &Header,
    written: Option<&Schema>,
    metadata: &TableMetadata,
    manifest_file: &ManifestFile,
) -> Option<SchemaRef> {
    let by_id = header
        .get("schema-id")
        .and_then(|id| std::str::from_utf8(id).ok()?.parse::<i32>().ok())
        .and_then(|id| metadata.schema_by_id(id));
    if let Some(schema) = by_id {
        return Some(schema.clone());
    }
    if written.is_some() {
        return None;
    }
    let added = metadata
        .snapshot_by_id(manifest_file.added_snapshot_id)
        .and_then(|snapshot| snapshot.schema_id())
        .and_then(|id| metadata.schema_by_id(id));
    Some(added.unwrap_or_else(|| metadata.current_schema()).clone())
}

fn serialized(value: &(impl serde::Serialize + ?Sized)) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| {
        Error::new(ErrorKind::Unexpected, "serialize a manifest header key").with_source(e)
    })
}

/// The error for a manifest Floe cannot read: the file, the snapshot that added it and who
/// wrote that snapshot, with the cause.
fn unreadable(metadata: &TableMetadata, manifest_file: &ManifestFile, cause: Error) -> Error {
    let snapshot = manifest_file.added_snapshot_id;
    let writer = metadata
        .snapshot_by_id(snapshot)
        .and_then(|s| writer_of(&s.summary().additional_properties))
        .unwrap_or_else(|| "a writer that does not name itself".to_string());
    Error::new(
        ErrorKind::DataInvalid,
        format!(
            "cannot read manifest {} (added by snapshot {snapshot}, written by {writer})",
            manifest_file.manifest_path
        ),
    )
    .with_source(UnreadableFile(cause))
}

/// The cause of an error [`unreadable`] made: marks it as a file's fault, not a request's.
#[derive(Debug)]
struct UnreadableFile(Error);

impl std::fmt::Display for UnreadableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for UnreadableFile {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether `e` says a table's manifest does not read (as [`load_manifest`] reports it), so
/// that front doors answer with a fault of the data rather than of the request.
pub fn is_unreadable(e: &Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<UnreadableFile>())
}

/// The engine a snapshot's summary names (Iceberg Java's `engine-name`, `engine-version` and
/// `iceberg-version`).
fn writer_of(summary: &HashMap<String, String>) -> Option<String> {
    let engine = match (summary.get("engine-name"), summary.get("engine-version")) {
        (Some(name), Some(version)) => Some(format!("{name} {version}")),
        (Some(name), None) => Some(name.clone()),
        _ => None,
    };
    match (engine, summary.get("iceberg-version")) {
        (Some(engine), Some(library)) => Some(format!("{engine} ({library})")),
        (engine, library) => engine.or_else(|| library.cloned()),
    }
}

/// The header of an Avro object container file: its metadata keys, in order, and where the
/// data blocks start (after the sync marker, kept with them).
struct Header {
    keys: Vec<(String, Vec<u8>)>,
    /// Where the sync marker that ends the header starts.
    sync_at: usize,
}

impl Header {
    fn read(bytes: &[u8]) -> Result<Self> {
        let not_avro = |what: &str| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("not an Avro object container file: {what}"),
            )
        };
        if !bytes.starts_with(MAGIC) {
            return Err(not_avro("no magic bytes"));
        }
        let mut at = MAGIC.len();
        let mut keys = Vec::new();
        loop {
            let count = read_long(bytes, &mut at).ok_or_else(|| not_avro("truncated header"))?;
            if count == 0 {
                break;
            }
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                read_long(bytes, &mut at).ok_or_else(|| not_avro("truncated header"))?;
            }
            for _ in 0..count.unsigned_abs() {
                let key = read_bytes(bytes, &mut at).ok_or_else(|| not_avro("truncated header"))?;
                let value =
                    read_bytes(bytes, &mut at).ok_or_else(|| not_avro("truncated header"))?;
                let key = String::from_utf8(key.to_vec())
                    .map_err(|_| not_avro("a metadata key is not UTF-8"))?;
                keys.push((key, value.to_vec()));
            }
        }
        if bytes.len() < at + SYNC_LENGTH {
            return Err(not_avro("no sync marker"));
        }
        Ok(Header { keys, sync_at: at })
    }

    fn get(&self, key: &str) -> Option<&[u8]> {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }

    fn set(&mut self, key: &str, value: Vec<u8>) {
        match self.keys.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.keys.push((key.to_string(), value)),
        }
    }

    /// `file` (the file this header was read from) with this header.
    fn write(&self, file: &[u8]) -> Vec<u8> {
        let rest = &file[self.sync_at..];
        let mut out = Vec::with_capacity(file.len() + 1024);
        out.extend_from_slice(MAGIC);
        if !self.keys.is_empty() {
            write_long(&mut out, self.keys.len() as i64);
            for (key, value) in &self.keys {
                write_long(&mut out, key.len() as i64);
                out.extend_from_slice(key.as_bytes());
                write_long(&mut out, value.len() as i64);
                out.extend_from_slice(value);
            }
        }
        write_long(&mut out, 0);
        out.extend_from_slice(rest);
        out
    }
}

/// An Avro `long`: a zig-zag varint.
fn read_long(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    None
}

fn read_bytes<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let length = usize::try_from(read_long(bytes, at)?).ok()?;
    let value = bytes.get(*at..at.checked_add(length)?)?;
    *at += length;
    Some(value)
}

fn write_long(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::io::FileIO;
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, Datum, FormatVersion, Literal,
        ManifestContentType, ManifestFile, ManifestWriterBuilder, NestedField, Operation,
        PrimitiveType, Schema, Snapshot, SortOrder, Struct, Summary, TableMetadata,
        TableMetadataBuilder, Transform, Type, UnboundPartitionSpec,
    };

    use super::{Header, Manifest, conform, parse_manifest, read_long, write_long};

    /// The `schema` key of a manifest DuckDB 1.4.4 wrote for an unpartitioned table: the
    /// manifest entry's own schema, its bound maps as Avro records.
    const DUCKDB_SCHEMA: &str = r#"{"type":"struct","schema-id":0,"fields":[{"id":0,"name":"status","required":true,"type":"int"},{"id":1,"name":"snapshot_id","required":false,"type":"long"},{"id":3,"name":"sequence_number","required":false,"type":"long"},{"id":4,"name":"file_sequence_number","required":false,"type":"long"},{"id":2,"name":"data_file","required":true,"type":{"type":"struct","fields":[{"id":134,"name":"content","required":true,"type":"int"},{"id":100,"name":"file_path","required":true,"type":"string"},{"id":101,"name":"file_format","required":true,"type":"string"},{"id":102,"name":"partition","required":true,"type":{"type":"struct","fields":[]}},{"id":103,"name":"record_count","required":true,"type":"long"},{"id":104,"name":"file_size_in_bytes","required":true,"type":"long"},{"id":125,"name":"lower_bounds","required":false,"type":{"type":"array","items":{"type":"record","name":"k126_k127","fields":[{"name":"key","type":"int","id":126},{"name":"value","type":"binary","id":127}]}}},{"id":128,"name":"upper_bounds","required":false,"type":{"type":"array","items":{"type":"record","name":"k129_k130","fields":[{"name":"key","type":"int","id":129},{"name":"value","type":"binary","id":130}]}}}]}}]}"#;
    const SNAPSHOT: i64 = 77;

    /// A table of `id long, city string` partitioned by city, with one snapshot whose
    /// summary has `summary`.
    fn table(summary: &[(&str, &str)]) -> TableMetadata {
        let schema = Schema::builder()
            .with_fields([
                Arc::new(NestedField::optional(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "city",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(2, "city", Transform::Identity)
            .unwrap()
            .build();
        let metadata = TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let snapshot = Snapshot::builder()
            .with_snapshot_id(SNAPSHOT)
            .with_sequence_number(3)
            .with_timestamp_ms(metadata.last_updated_ms())
            .with_manifest_list("memory:///t/metadata/snap.avro")
            .with_schema_id(0)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: summary
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            })
            .build();
        metadata
            .into_builder(None)
            .add_snapshot(snapshot)
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    /// A manifest of `content` with two files of `metadata`'s table, written by iceberg, with
    /// the manifest list's entry for it; its entries leave their sequence numbers to inherit.
    async fn written(
        metadata: &TableMetadata,
        content: ManifestContentType,
    ) -> (FileIO, ManifestFile, Vec<u8>) {
        let io = FileIO::new_with_memory();
        let path = format!("memory:///t/metadata/{content}-m0.avro");
        let builder = ManifestWriterBuilder::new(
            io.new_output(&path).unwrap(),
            Some(SNAPSHOT),
            metadata.current_schema().clone(),
            metadata.default_partition_spec().as_ref().clone(),
        );
        let mut writer = match content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        };
        for (i, city) in ["oslo", "lima"].into_iter().enumerate() {
            let file = DataFileBuilder::default()
                .content(match content {
                    ManifestContentType::Data => DataContentType::Data,
                    ManifestContentType::Deletes => DataContentType::PositionDeletes,
                })
                .file_path(format!("memory:///t/data/{city}.parquet"))
                .file_format(DataFileFormat::Parquet)
                .partition(Struct::from_iter([Some(Literal::string(city))]))
                .partition_spec_id(0)
                .record_count(10 + i as u64)
                .file_size_in_bytes(1000)
                .lower_bounds(HashMap::from([
                    (1, Datum::long(i as i64)),
                    (2, Datum::string(city)),
                ]))
                .upper_bounds(HashMap::from([
                    (1, Datum::long(100 + i as i64)),
                    (2, Datum::string(city)),
                ]))
                .build()
                .unwrap();
            writer.add_file(file, -1).unwrap();
        }
        let mut listed = writer.write_manifest_file().await.unwrap();
        listed.sequence_number = 3;
        listed.min_sequence_number = 3;
        let bytes = io.new_input(&path).unwrap().read().await.unwrap().to_vec();
        (io, listed, bytes)
    }

    /// `bytes` with header key `key` set to `value`.
    fn with_key(bytes: &[u8], key: &str, value: &str) -> Vec<u8> {
        let mut header = Header::read(bytes).unwrap();
        header.set(key, value.as_bytes().to_vec());
        header.write(bytes)
    }

    #[tokio::test]
    async fn a_manifest_whose_schema_key_is_not_a_schema_reads_with_the_tables() {
        let metadata = table(&[]);
        let (io, listed, bytes) = written(&metadata, ManifestContentType::Data).await;
        let expected = listed.load_manifest(&io).await.unwrap();
        assert_eq!(expected.entries()[0].sequence_number(), Some(3));

        // DuckDB's schema key; the partition spec's source column is not in it either.
        let duckdb = with_key(&bytes, "schema", DUCKDB_SCHEMA);
        let refused = Manifest::parse_avro(&duckdb).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("Fail to parse schema in manifest metadata"),
            "{refused}"
        );
        let read = parse_manifest(&duckdb, &metadata, &listed).unwrap();
        assert_eq!(read, expected);
        assert_eq!(
            read.entries()[1].data_file().lower_bounds()[&1],
            Datum::long(1)
        );

        // A schema key that is no JSON at all, and a partition spec naming no column.
        let garbled = with_key(&bytes, "schema", "{not json");
        let garbled = with_key(
            &garbled,
            "partition-spec",
            r#"[{"source-id":42,"field-id":1000,"name":"x","transform":"identity"}]"#,
        );
        assert_eq!(
            parse_manifest(&garbled, &metadata, &listed).unwrap(),
            expected
        );
    }

    #[tokio::test]
    async fn a_delete_manifest_labelled_data_reads_as_deletes() {
        let metadata = table(&[]);
        let (io, listed, bytes) = written(&metadata, ManifestContentType::Deletes).await;
        let expected = listed.load_manifest(&io).await.unwrap();
        let mislabelled = with_key(&bytes, "content", "data");
        assert_eq!(
            *Manifest::parse_avro(&mislabelled)
                .unwrap()
                .metadata()
                .content(),
            ManifestContentType::Data
        );
        let read = parse_manifest(&mislabelled, &metadata, &listed).unwrap();
        assert_eq!(*read.metadata().content(), ManifestContentType::Deletes);
        assert_eq!(read, expected);
    }

    #[tokio::test]
    async fn a_manifest_that_agrees_with_its_table_is_read_as_written() {
        let metadata = table(&[]);
        let (io, listed, bytes) = written(&metadata, ManifestContentType::Data).await;
        assert_eq!(conform(&bytes, &metadata, &listed).unwrap(), None);
        assert_eq!(
            super::load_manifest(&io, &metadata, &listed).await.unwrap(),
            listed.load_manifest(&io).await.unwrap()
        );
        // The header, read and written again unchanged, is the same bytes.
        assert_eq!(Header::read(&bytes).unwrap().write(&bytes), bytes);
    }

    #[tokio::test]
    async fn a_manifest_that_does_not_read_is_named_with_its_writer() {
        let metadata = table(&[
            ("engine-name", "spark"),
            ("engine-version", "3.5.1"),
            ("iceberg-version", "Apache Iceberg 1.10.0"),
        ]);
        let (_, listed, bytes) = written(&metadata, ManifestContentType::Data).await;
        let cut = &bytes[..bytes.len() - 40];
        let failed = parse_manifest(cut, &metadata, &listed).unwrap_err();
        assert!(super::is_unreadable(&failed));
        assert!(!super::is_unreadable(&iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "a bad value"
        )));
        let message = failed.to_string();
        assert!(
            message.contains(&format!(
                "cannot read manifest {} (added by snapshot {SNAPSHOT}, written by spark 3.5.1 \
                 (Apache Iceberg 1.10.0))",
                listed.manifest_path
            )),
            "{message}"
        );
        let not_avro = parse_manifest(b"PAR1", &table(&[]), &listed).unwrap_err();
        assert!(
            not_avro
                .to_string()
                .contains("written by a writer that does not name itself"),
            "{not_avro}"
        );
    }

    #[test]
    fn longs_round_trip_as_zig_zag_varints() {
        for value in [0, 1, -1, 63, -64, 64, 300, -300, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_long(&mut out, value);
            let mut at = 0;
            assert_eq!(read_long(&out, &mut at), Some(value));
            assert_eq!(at, out.len());
        }
        // A map block with a negative count carries its size in bytes.
        let mut file = b"Obj\x01".to_vec();
        write_long(&mut file, -1);
        write_long(&mut file, 6);
        for text in ["k", "vv"] {
            write_long(&mut file, text.len() as i64);
            file.extend_from_slice(text.as_bytes());
        }
        write_long(&mut file, 0);
        file.extend_from_slice(&[7; 16]);
        file.extend_from_slice(b"blocks");
        let header = Header::read(&file).unwrap();
        assert_eq!(header.get("k"), Some(&b"vv"[..]));
        assert!(header.write(&file).ends_with(b"\x07blocks"));
        assert!(Header::read(&file[..file.len() - 20]).is_err());
    }
}
