//! Streams written by arrow's `StreamWriter`, then forged: length prefixes, body and
//! metadata lengths, row counts, buffers and nodes edited, truncated and mutated.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, ListArray, NullArray, RecordBatch,
    RecordBatchOptions, StringArray, StructArray, UnionArray,
};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, UnionFields};
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::{self, CompressionType, MessageHeader, MetadataVersion};

use super::*;

const BUDGET: usize = 256 << 20;

fn sample() -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
    let names: ArrayRef = Arc::new(StringArray::from_iter(
        (0..1000).map(|i| (i % 3 != 0).then(|| format!("name {}", i % 10))),
    ));
    let inner: ArrayRef = Arc::new(Int32Array::from_iter(
        (0..1000).map(|i| (i % 5 != 0).then_some(i)),
    ));
    let nulls = datafusion::arrow::buffer::NullBuffer::from_iter((0..1000).map(|i| i % 7 != 0));
    let point: ArrayRef = Arc::new(StructArray::new(
        vec![Field::new("x", DataType::Int32, true)].into(),
        vec![inner],
        Some(nulls),
    ));
    let tags: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
        (0..1000).map(|i| Some(vec![Some(i), None])),
    ));
    let kinds: ArrayRef = Arc::new(
        (0..1000)
            .map(|i| ["a", "b", "c"][i % 3])
            .collect::<DictionaryArray<Int32Type>>(),
    );
    RecordBatch::try_from_iter([
        ("id", ids),
        ("name", names),
        ("point", point),
        ("tags", tags),
        ("kind", kinds),
    ])
    .unwrap()
}

fn write(batches: &[RecordBatch], compression: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(compression)
        .unwrap();
    let mut out = Vec::new();
    let mut writer =
        StreamWriter::try_new_with_options(&mut out, &batches[0].schema(), options).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
    drop(writer);
    out
}

fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    decode_stream(&Bytes::copy_from_slice(bytes), BUDGET)
}

/// A stream's messages: metadata and body each.
fn messages(stream: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        assert_eq!(&stream[at..at + 4], &[0xff; 4]);
        let length = i32::from_le_bytes(stream[at + 4..at + 8].try_into().unwrap()) as usize;
        if length == 0 {
            return out;
        }
        let metadata = &stream[at + 8..at + 8 + length];
        let body_length = ipc::root_as_message(metadata).unwrap().bodyLength() as usize;
        let body = &stream[at + 8 + length..at + 8 + length + body_length];
        out.push((metadata.to_vec(), body.to_vec()));
        at += 8 + length + body_length;
    }
}

/// Messages framed as a stream again, with the end-of-stream marker.
fn frame(messages: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (metadata, body) in messages {
        let padded = metadata.len().next_multiple_of(8);
        out.extend_from_slice(&[0xff; 4]);
        out.extend_from_slice(&(padded as i32).to_le_bytes());
        out.extend_from_slice(metadata);
        out.resize(out.len() + padded - metadata.len(), 0);
        out.extend_from_slice(body);
    }
    out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    out
}

/// A record batch message's fields, to edit and build again.
#[derive(Debug, Clone)]
struct Parts {
    header: MessageHeader,
    dictionary_id: i64,
    with_data: bool,
    length: i64,
    nodes: Vec<(i64, i64)>,
    buffers: Vec<(i64, i64)>,
    compression: Option<CompressionType>,
    body_length: i64,
}

impl Parts {
    fn of(metadata: &[u8]) -> Self {
        let message = ipc::root_as_message(metadata).unwrap();
        let (batch, dictionary_id) = match message.header_type() {
            MessageHeader::RecordBatch => (message.header_as_record_batch().unwrap(), 0),
            MessageHeader::DictionaryBatch => {
                let d = message.header_as_dictionary_batch().unwrap();
                (d.data().unwrap(), d.id())
            }
            other => panic!("not a batch: {other:?}"),
        };
        Parts {
            header: message.header_type(),
            dictionary_id,
            with_data: true,
            length: batch.length(),
            nodes: batch
                .nodes()
                .unwrap()
                .iter()
                .map(|n| (n.length(), n.null_count()))
                .collect(),
            buffers: batch
                .buffers()
                .unwrap()
                .iter()
                .map(|b| (b.offset(), b.length()))
                .collect(),
            compression: batch.compression().map(|c| c.codec()),
            body_length: message.bodyLength(),
        }
    }

    fn build(&self) -> Vec<u8> {
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let nodes: Vec<ipc::FieldNode> = self
            .nodes
            .iter()
            .map(|(l, n)| ipc::FieldNode::new(*l, *n))
            .collect();
        let buffers: Vec<ipc::Buffer> = self
            .buffers
            .iter()
            .map(|(o, l)| ipc::Buffer::new(*o, *l))
            .collect();
        let nodes = fbb.create_vector(&nodes);
        let buffers = fbb.create_vector(&buffers);
        let compression = self.compression.map(|codec| {
            let mut c = ipc::BodyCompressionBuilder::new(&mut fbb);
            c.add_codec(codec);
            c.finish()
        });
        let mut batch = ipc::RecordBatchBuilder::new(&mut fbb);
        batch.add_length(self.length);
        batch.add_nodes(nodes);
        batch.add_buffers(buffers);
        if let Some(c) = compression {
            batch.add_compression(c);
        }
        let batch = batch.finish();
        let header = if self.header == MessageHeader::DictionaryBatch {
            let mut d = ipc::DictionaryBatchBuilder::new(&mut fbb);
            d.add_id(self.dictionary_id);
            if self.with_data {
                d.add_data(batch);
            }
            d.finish().as_union_value()
        } else {
            batch.as_union_value()
        };
        let mut message = ipc::MessageBuilder::new(&mut fbb);
        message.add_version(MetadataVersion::V5);
        message.add_header_type(self.header);
        message.add_header(header);
        message.add_bodyLength(self.body_length);
        let message = message.finish();
        fbb.finish(message, None);
        fbb.finished_data().to_vec()
    }
}

/// The sample stream with its first record batch edited.
fn edited(compression: Option<CompressionType>, edit: impl FnOnce(&mut Parts)) -> Vec<u8> {
    let mut messages = messages(&write(&[sample()], compression));
    let at = messages
        .iter()
        .position(|(m, _)| {
            ipc::root_as_message(m).unwrap().header_type() == MessageHeader::RecordBatch
        })
        .unwrap();
    let mut parts = Parts::of(&messages[at].0);
    edit(&mut parts);
    messages[at].0 = parts.build();
    frame(&messages)
}

fn malformed_text(result: Result<Decoded, DecodeError>) -> String {
    match result {
        Err(DecodeError::Malformed(text)) => text,
        other => panic!("expected a malformed stream, got {other:?}"),
    }
}

fn over_budget_text(result: Result<Decoded, DecodeError>) -> String {
    match result {
        Err(e @ DecodeError::OverBudget { .. }) => e.to_string(),
        other => panic!("expected a stream over budget, got {other:?}"),
    }
}

#[test]
fn plain_and_compressed_streams_decode_as_written() {
    let batches = [sample(), sample().slice(10, 20)];
    for compression in [
        None,
        Some(CompressionType::LZ4_FRAME),
        Some(CompressionType::ZSTD),
    ] {
        let stream = write(&batches, compression);
        let decoded = decode(&stream).unwrap();
        assert_eq!(decoded.schema, batches[0].schema(), "{compression:?}");
        assert_eq!(decoded.batches, batches, "{compression:?}");
        // Flight's framing: the same messages, one by one.
        let split = messages(&stream);
        let decoded = decode_messages(
            split.iter().map(|(m, b)| (m.as_slice(), b.as_slice())),
            BUDGET,
        )
        .unwrap();
        assert_eq!(decoded.batches, batches, "{compression:?}");
    }
    // A stream without the end-of-stream marker is whole too.
    let stream = write(&[sample()], None);
    assert_eq!(
        decode(&stream[..stream.len() - 8]).unwrap().batches,
        [sample()]
    );
    assert_eq!(stream_schema(&stream, BUDGET).unwrap(), sample().schema());
    // A schema alone, without the marker: its message has no body, the last thing in the
    // stream (arrow's decoder waits for more bytes after such a message).
    let schema_only = write(&[sample().slice(0, 0)], None);
    let split = messages(&schema_only);
    let decoded = decode(&frame(&split[..1])[..]).unwrap();
    assert!(decoded.batches.is_empty());
    let without_marker = &frame(&split[..1]);
    let decoded = decode(&without_marker[..without_marker.len() - 8]).unwrap();
    assert_eq!(decoded.schema, sample().schema());
    let decoded = decode_messages([(split[0].0.as_slice(), &[][..])], BUDGET).unwrap();
    assert_eq!(decoded.schema, sample().schema());
}

/// Where buffer `index` of the first record batch starts in the stream.
fn buffer_start(stream: &[u8], index: usize) -> usize {
    let mut at = 0;
    for (metadata, body) in messages(stream) {
        let padded = metadata.len();
        let message = ipc::root_as_message(&metadata).unwrap();
        if message.header_type() == MessageHeader::RecordBatch {
            let buffer = message
                .header_as_record_batch()
                .unwrap()
                .buffers()
                .unwrap()
                .get(index);
            return at + 8 + padded + buffer.offset() as usize;
        }
        at += 8 + padded + body.len();
    }
    panic!("no record batch")
}

fn with_prefix(compression: CompressionType, index: usize, declared: i64) -> Vec<u8> {
    let mut stream = write(&[sample()], Some(compression));
    let at = buffer_start(&stream, index);
    stream[at..at + 8].copy_from_slice(&declared.to_le_bytes());
    stream
}

#[test]
fn a_forged_uncompressed_length_is_refused_before_anything_is_allocated() {
    for compression in [CompressionType::LZ4_FRAME, CompressionType::ZSTD] {
        // Buffer 1 is the values of `id`.
        let text = over_budget_text(decode(&with_prefix(compression, 1, 1 << 40)));
        assert_eq!(
            text,
            "Arrow IPC stream: buffer 1 of record batch 1 declares 1099511627776 bytes \
             uncompressed, more than the 268435456 bytes this request may decode"
        );
        // Within the whole stream's budget, several buffers may not sum past it.
        let small = decode_stream(&Bytes::from(write(&[sample()], Some(compression))), 4096);
        assert!(
            matches!(small, Err(DecodeError::OverBudget { .. })),
            "{small:?}"
        );
    }
}

#[test]
fn a_length_prefix_that_lies_is_refused() {
    let real = 8000; // 1000 longs
    for declared in [real - 1, real + 1, 1 << 20] {
        let text = malformed_text(decode(&with_prefix(
            CompressionType::LZ4_FRAME,
            1,
            declared,
        )));
        assert!(
            text.contains("buffer 1 of record batch 1 declares"),
            "{text}"
        );
        let zstd = decode(&with_prefix(CompressionType::ZSTD, 1, declared));
        assert!(matches!(zstd, Err(DecodeError::Malformed(_))), "{zstd:?}");
    }
    let text = malformed_text(decode(&with_prefix(CompressionType::ZSTD, 1, -5)));
    assert!(text.contains("negative uncompressed length (-5)"), "{text}");
    // -1 says "stored uncompressed": the bytes after the prefix are the buffer, which here is
    // a compressed frame of the wrong length.
    assert!(decode(&with_prefix(CompressionType::LZ4_FRAME, 1, -1)).is_err());
}

#[test]
fn negative_and_overlong_lengths_are_refused() {
    for compression in [None, Some(CompressionType::LZ4_FRAME)] {
        let text = malformed_text(decode(&edited(compression, |p| p.body_length = -8)));
        assert!(text.contains("negative body length (-8)"), "{text}");
        let text = malformed_text(decode(&edited(compression, |p| p.body_length = 1 << 40)));
        assert!(
            text.contains("declares a body of 1099511627776 bytes"),
            "{text}"
        );
    }
    let mut stream = write(&[sample()], None);
    stream[4..8].copy_from_slice(&(-16i32).to_le_bytes());
    let text = malformed_text(decode(&stream));
    assert!(text.contains("negative metadata length (-16)"), "{text}");
    stream[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
    let text = malformed_text(decode(&stream));
    assert!(text.contains("bytes of metadata but only"), "{text}");
}

#[test]
fn every_truncation_is_refused_or_a_shorter_stream() {
    let batches = [sample().slice(0, 100), sample().slice(100, 100)];
    for compression in [
        None,
        Some(CompressionType::LZ4_FRAME),
        Some(CompressionType::ZSTD),
    ] {
        let stream = write(&batches, compression);
        for cut in 0..stream.len() {
            match decode(&stream[..cut]) {
                // Without (all of) the end-of-stream marker, both batches are there.
                Ok(decoded) => assert!(
                    decoded.batches.len() < 2 || cut >= stream.len() - 8,
                    "cut at {cut}"
                ),
                Err(DecodeError::Malformed(text)) => {
                    assert_ne!(text, "the stream could not be decoded", "cut at {cut}")
                }
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
    }
}

#[test]
fn huge_row_counts_are_refused() {
    // A batch of no columns and 2^40 rows, and a null column of 2^40 rows: neither has a
    // buffer to betray it, and a table's other columns would be filled with 2^40 nulls.
    let empty = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1 << 40)),
    )
    .unwrap();
    let text = over_budget_text(decode(&write(&[empty], None)));
    assert!(
        text.contains("record batch 1 declares 1099511627776 rows of 0 columns"),
        "{text}"
    );
    let nulls =
        RecordBatch::try_from_iter([("n", Arc::new(NullArray::new(1 << 40)) as ArrayRef)]).unwrap();
    assert!(matches!(
        decode(&write(&[nulls], None)),
        Err(DecodeError::OverBudget { .. })
    ));
    // Forged in a real batch: the batch's length, or one field node's.
    let forged = decode(&edited(None, |p| p.length = 1 << 40));
    assert!(
        matches!(forged, Err(DecodeError::OverBudget { .. })),
        "{forged:?}"
    );
    let forged = decode(&edited(None, |p| p.nodes[3].0 = 1 << 40));
    assert!(
        matches!(forged, Err(DecodeError::OverBudget { .. })),
        "{forged:?}"
    );
    let text = malformed_text(decode(&edited(None, |p| p.nodes[0] = (-1, 0))));
    assert!(
        text.contains("field node 0 of record batch 1 declares -1 rows"),
        "{text}"
    );
}

#[test]
fn buffers_and_nodes_must_match_the_body_and_the_schema() {
    let text = malformed_text(decode(&edited(None, |p| p.buffers[1].0 = 1 << 30)));
    assert!(
        text.contains("buffer 1 of record batch 1 (offset 1073741824"),
        "{text}"
    );
    let text = malformed_text(decode(&edited(None, |p| p.buffers[2].1 = -1)));
    assert!(text.contains("lies outside"), "{text}");
    let text = malformed_text(decode(&edited(None, |p| {
        p.nodes.truncate(2);
    })));
    assert!(text.contains("too few for its columns"), "{text}");
    let text = malformed_text(decode(&edited(None, |p| {
        p.buffers.truncate(4);
    })));
    assert!(text.contains("buffers, too few"), "{text}");
    // The struct `point` (node 2, buffer 5 its validity) with nulls and no bitmap: arrow's
    // `BooleanBuffer::new` would panic.
    let text = malformed_text(decode(&edited(None, |p| p.buffers[5].1 = 0)));
    assert!(
        text.contains("buffer 5 of record batch 1 is a validity bitmap of 0 bytes"),
        "{text}"
    );
    // Compression with a codec arrow does not know.
    let text = malformed_text(decode(&edited(None, |p| {
        p.compression = Some(CompressionType(7));
    })));
    assert!(text.contains("unknown codec (7)"), "{text}");
}

#[test]
fn dictionary_batches_are_checked_as_record_batches_are() {
    let stream = write(&[sample()], None);
    let mut split = messages(&stream);
    let at = split
        .iter()
        .position(|(m, _)| {
            ipc::root_as_message(m).unwrap().header_type() == MessageHeader::DictionaryBatch
        })
        .unwrap();
    let parts = Parts::of(&split[at].0);
    let forge = |edit: &dyn Fn(&mut Parts)| {
        let mut parts = parts.clone();
        edit(&mut parts);
        let mut split = split.clone();
        split[at].0 = parts.build();
        decode(&frame(&split))
    };
    let text = malformed_text(forge(&|p| p.with_data = false));
    assert_eq!(text, "dictionary batch 1 carries no data");
    let text = malformed_text(forge(&|p| p.dictionary_id = 99));
    assert!(
        text.contains("has id 99, which no column of the schema uses"),
        "{text}"
    );
    let forged = forge(&|p| p.nodes[0].0 = 1 << 40);
    assert!(
        matches!(forged, Err(DecodeError::OverBudget { .. })),
        "{forged:?}"
    );
    split[at].0 = parts.build();
    assert_eq!(decode(&frame(&split)).unwrap().batches, [sample()]);
}

#[test]
fn unions_are_refused() {
    let fields = UnionFields::try_new(
        vec![0, 1],
        vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ],
    )
    .unwrap();
    let union = UnionArray::try_new(
        fields,
        ScalarBuffer::from(vec![0i8, 1]),
        None,
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None])),
            Arc::new(StringArray::from(vec![None, Some("x")])),
        ],
    )
    .unwrap();
    let batch = RecordBatch::try_from_iter([("u", Arc::new(union) as ArrayRef)]).unwrap();
    let text = malformed_text(decode(&write(&[batch], None)));
    assert!(
        text.contains("column 0 (u): union columns are not taken"),
        "{text}"
    );
}

/// xorshift64*: deterministic, so a failure is reproducible.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn garbage_and_mutated_streams_are_refused_by_the_checks() {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    for compression in [
        None,
        Some(CompressionType::LZ4_FRAME),
        Some(CompressionType::ZSTD),
    ] {
        // Few rows, so that most mutations land in metadata rather than values.
        let stream = write(&[sample().slice(0, 9)], compression);
        for round in 0..20000 {
            let mut mutated = stream.clone();
            for _ in 0..1 + random.next() % 4 {
                let at = (random.next() as usize) % mutated.len();
                mutated[at] = random.next() as u8;
            }
            if let Err(DecodeError::Malformed(text)) = decode(&mutated) {
                assert_ne!(
                    text, "the stream could not be decoded",
                    "{compression:?} round {round}"
                );
            }
        }
    }
    for length in [0, 3, 8, 64, 4096] {
        let garbage: Vec<u8> = (0..length).map(|_| random.next() as u8).collect();
        assert!(decode(&garbage).is_err() || length == 0);
    }
    assert_eq!(malformed_text(decode(b"")), "the stream holds no schema");
}

#[test]
fn flight_messages_are_checked_one_by_one() {
    let stream = write(&[sample()], Some(CompressionType::LZ4_FRAME));
    let mut split = messages(&stream);
    // A body shorter than the message declares.
    split[1].1.truncate(8);
    let result = decode_messages(
        split.iter().map(|(m, b)| (m.as_slice(), b.as_slice())),
        BUDGET,
    );
    assert!(malformed_text(result).contains("but only 8 follow"));
}

#[test]
fn the_budget_is_a_multiple_of_the_input_within_the_cap() {
    let limits = DecodeLimits {
        max_bytes: 256 << 20,
        body_multiple: 64,
    };
    assert_eq!(limits.budget(0), 8 << 20);
    assert_eq!(limits.budget(64 << 10), 8 << 20);
    assert_eq!(limits.budget(1 << 20), 64 << 20);
    assert_eq!(limits.budget(64 << 20), 256 << 20);
    assert_eq!(limits.budget(usize::MAX), 256 << 20);
}
