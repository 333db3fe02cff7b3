//! Arrow IPC streams from clients, decoded within a memory budget.
//!
//! arrow-ipc believes what a stream declares. Its `StreamReader` sizes its read buffers from a
//! message's metadata length and `bodyLength`; its LZ4 and ZSTD codecs allocate each buffer's
//! declared uncompressed length (the 8-byte prefix of a compressed buffer) before looking at
//! the data, and LZ4 reads a frame to its end whatever it declared; a record batch may claim
//! 2^40 rows that a later step fills with nulls; and malformed flatbuffers reach `unwrap`s and
//! asserts (a buffer past the end of the body, a union whose type ids are short, a schema
//! field without its type table, a dictionary batch without data). Each of those aborts or
//! panics the process, and a forged stream is a few hundred bytes.
//!
//! So every Arrow IPC stream Floe takes from a client — an `/ingest/v1` body, the batches of
//! a Flight SQL `DoPut`, the parameters a prepared-statement handle carries — is decoded by
//! [`decode_stream`] or [`decode_messages`], which first walk it without allocating:
//!
//! 1. the framing: every metadata length and `bodyLength` is non-negative and within the
//!    bytes actually present, every message is a flatbuffer that verifies;
//! 2. the schema: every field has the type table its type needs, with widths and units Arrow
//!    knows; unions, run-end-encoded and list-view columns are refused;
//! 3. every record and dictionary batch: its buffers lie inside its body, it has the field
//!    nodes and buffers its schema's columns take, a column with nulls has a validity buffer
//!    long enough for its rows;
//! 4. what decoding will allocate, against the request's budget
//!    ([`DecodeLimits::budget`]): the declared uncompressed lengths of compressed buffers,
//!    summed over the stream (an LZ4 frame is also decompressed into a counter, to check that
//!    it holds what it declares), and 8 bytes per row per column (per field node, when nested
//!    columns count more).
//!
//! Only then is the stream decoded, by arrow's `StreamDecoder` over the bytes (which reads
//! bodies in place), under `catch_unwind`: a panic the walk did not foresee becomes a
//! refusal, not a dead server. Errors are typed: [`DecodeError::Malformed`] (400,
//! `InvalidArgument`) names what is wrong, [`DecodeError::OverBudget`] (413,
//! `ResourceExhausted`) what would not fit.

mod layout;
mod schema;
#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::ipc::reader::StreamDecoder;
use datafusion::arrow::ipc::{
    self, BodyCompressionMethod, CompressionType, MessageHeader, MetadataVersion,
};
use floe_catalog::CatalogError;

/// How much memory decoding one request's rows may take. Read once at startup
/// (`--decode-memory-mb`) and shared by every front door that decodes Arrow IPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The most one request may decode to, whatever its size.
    pub max_bytes: usize,
    /// How many times its own size a request may decode to (compressed streams grow).
    pub body_multiple: usize,
}

/// A request of any size may decode to this much (within `max_bytes`). Rows repeat their
/// series' labels, so a small body can decode to many times its size: Prometheus sends up to
/// 2,000 samples a request (`max_samples_per_send`), and after an outage those may all be of
/// one series — about 20 KB of snappy that becomes 2,000 rows of its labels, over 1.5 MB for
/// a few labels. Below this floor such a catch-up batch was refused with a 413 that
/// Prometheus does not retry, and its samples were lost.
const BUDGET_FLOOR: usize = 8 << 20;

/// A compressed body of any size may inflate to this much (within `max_bytes`). The largest
/// batch a sender makes by default — an OpenTelemetry Collector's 8,192 records of a few KiB —
/// compresses far more than `body_multiple` times when its records repeat their attributes
/// (a real Collector's 4,000 log records of ten attributes, gzipped to 29 KB, inflate to
/// 2 MB: 70 times), and a refusal of it is a 413 the Collector does not retry.
const INFLATE_FLOOR: usize = 32 << 20;

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
            body_multiple: 64,
        }
    }
}

impl DecodeLimits {
    /// What a request of `input_len` bytes may decode to: `body_multiple` times its size
    /// (at least 8 MiB), at most `max_bytes`.
    pub fn budget(&self, input_len: usize) -> usize {
        input_len
            .saturating_mul(self.body_multiple)
            .max(BUDGET_FLOOR)
            .min(self.max_bytes)
    }
}

impl DecodeLimits {
    /// What a compressed body of `compressed_len` bytes may inflate to: `body_multiple`
    /// times its size (at least 32 MiB), at most `max_bytes`. What it inflates to is then
    /// decoded within [`DecodeLimits::budget`] of its inflated size.
    pub fn inflation(&self, compressed_len: usize) -> usize {
        compressed_len
            .saturating_mul(self.body_multiple)
            .max(INFLATE_FLOOR)
            .min(self.max_bytes)
    }
}

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The stream breaks the IPC format, or holds what Floe does not take.
    #[error("Arrow IPC stream: {0}")]
    Malformed(String),
    /// Decoding it would take more memory than the request may.
    #[error("Arrow IPC stream: {what}, more than the {budget} bytes this request may decode")]
    OverBudget { what: String, budget: usize },
}

impl From<DecodeError> for CatalogError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Malformed(_) => CatalogError::bad_request(e),
            DecodeError::OverBudget { .. } => CatalogError::PayloadTooLarge(e.to_string()),
        }
    }
}

/// A malformed stream; also a [`crate::Refusal`] of its schema ([`schema::read`]) or of a
/// batch's layout ([`layout::check`]) whatever its kind: they check the stream's form, never
/// a budget.
fn malformed(message: impl Into<String>) -> DecodeError {
    DecodeError::Malformed(message.into())
}

/// A decoded stream: its schema and record batches.
#[derive(Debug)]
pub struct Decoded {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// Decodes an Arrow IPC stream (continuation markers or the pre-1.0 framing, with or
/// without the end-of-stream marker) once it has been checked, within `budget` bytes.
pub fn decode_stream(bytes: &Bytes, budget: usize) -> Result<Decoded, DecodeError> {
    let mut walk = Walk::new(budget);
    let end = walk.stream(bytes)?;
    decode(bytes.slice(..end), walk.ended)
}

/// Checks an Arrow IPC stream as [`decode_stream`] does and decodes only its schema.
pub(crate) fn stream_schema(bytes: &[u8], budget: usize) -> Result<SchemaRef, DecodeError> {
    let mut walk = Walk::new(budget);
    walk.stream(bytes)?;
    walk.schema
        .ok_or_else(|| malformed("the stream holds no schema"))
}

/// Decodes a stream given as its messages (flatbuffer metadata and body each, as Flight's
/// `FlightData` carries them), checked as [`decode_stream`] checks a stream.
pub fn decode_messages<'a>(
    messages: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    budget: usize,
) -> Result<Decoded, DecodeError> {
    let mut walk = Walk::new(budget);
    let mut stream = Vec::new();
    for (index, (metadata, body)) in messages.into_iter().enumerate() {
        let body_length = walk.message(index, metadata, body)?;
        // Re-framed as a stream: continuation marker, padded metadata length, metadata, body.
        let padded = metadata.len().next_multiple_of(8);
        let length = i32::try_from(padded)
            .map_err(|_| malformed(format!("message {index} has too much metadata")))?;
        stream.extend_from_slice(&[0xff; 4]);
        stream.extend_from_slice(&length.to_le_bytes());
        stream.extend_from_slice(metadata);
        stream.resize(stream.len() + padded - metadata.len(), 0);
        stream.extend_from_slice(&body[..body_length]);
    }
    if walk.schema.is_none() {
        return Err(malformed("the stream holds no schema"));
    }
    decode(Bytes::from(stream), false)
}

/// The end-of-stream marker: a continuation marker and a zero length.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// Decodes checked bytes (`ended`: they end with the end-of-stream marker). A panic in
/// arrow (a case the walk did not foresee) is a refusal.
fn decode(bytes: Bytes, ended: bool) -> Result<Decoded, DecodeError> {
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let mut decoder = StreamDecoder::new();
        let mut batches = Vec::new();
        // `StreamDecoder` reads a last message of no body only once more bytes follow it.
        let end = (!ended).then(|| Buffer::from(END_OF_STREAM.to_vec()));
        for mut buffer in std::iter::once(Buffer::from(bytes)).chain(end) {
            while !buffer.is_empty() {
                if let Some(batch) = decoder.decode(&mut buffer)? {
                    batches.push(batch);
                }
            }
        }
        decoder.finish()?;
        Ok::<_, datafusion::arrow::error::ArrowError>((decoder.schema(), batches))
    }));
    match decoded {
        Ok(Ok((Some(schema), batches))) => Ok(Decoded { schema, batches }),
        Ok(Ok((None, _))) => Err(malformed("the stream holds no schema")),
        Ok(Err(e)) => Err(malformed(e.to_string())),
        Err(_) => {
            tracing::warn!("arrow ipc decoding panicked on a stream that passed the checks");
            Err(malformed("the stream could not be decoded"))
        }
    }
}

/// The codecs a compressed record batch may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Lz4Frame,
    Zstd,
}

/// What the walk has seen so far, and what decoding will allocate.
struct Walk {
    budget: usize,
    schema: Option<SchemaRef>,
    record_batches: usize,
    dictionary_batches: usize,
    /// Declared uncompressed bytes of compressed buffers, so far.
    uncompressed: usize,
    /// 8 bytes per row per column (or field node), so far.
    cells: usize,
    /// Whether the stream ended with the end-of-stream marker.
    ended: bool,
}

impl Walk {
    fn new(budget: usize) -> Self {
        Self {
            budget,
            schema: None,
            record_batches: 0,
            dictionary_batches: 0,
            uncompressed: 0,
            cells: 0,
            ended: false,
        }
    }

    fn over(&self, what: String) -> DecodeError {
        DecodeError::OverBudget {
            what,
            budget: self.budget,
        }
    }

    /// Walks a stream's framing; returns where it ends (after the end-of-stream marker, or
    /// after its last message when it has none).
    fn stream(&mut self, bytes: &[u8]) -> Result<usize, DecodeError> {
        let mut at = 0;
        let mut index = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let (prefix, length) = match rest {
                [0xff, 0xff, 0xff, 0xff, a, b, c, d, ..] => {
                    (8, i32::from_le_bytes([*a, *b, *c, *d]))
                }
                [0xff, 0xff, 0xff, 0xff, ..] => {
                    return Err(malformed(format!(
                        "the stream ends inside the length of message {index}"
                    )));
                }
                // The framing before Arrow 0.15: the length without a continuation marker.
                [a, b, c, d, ..] => (4, i32::from_le_bytes([*a, *b, *c, *d])),
                _ => {
                    return Err(malformed(format!(
                        "the stream ends inside the length of message {index}"
                    )));
                }
            };
            if length == 0 {
                self.ended = true;
                return Ok(at + prefix);
            }
            let length = usize::try_from(length).map_err(|_| {
                malformed(format!(
                    "message {index} declares a negative metadata length ({length})"
                ))
            })?;
            let after = &rest[prefix..];
            if length > after.len() {
                return Err(malformed(format!(
                    "message {index} declares {length} bytes of metadata but only {} follow",
                    after.len()
                )));
            }
            let body_length = self.message(index, &after[..length], &after[length..])?;
            at += prefix + length + body_length;
            index += 1;
        }
        Ok(at)
    }

    /// Checks one message whose body is at the start of `body`; returns the body's length.
    fn message(
        &mut self,
        index: usize,
        metadata: &[u8],
        body: &[u8],
    ) -> Result<usize, DecodeError> {
        let message = ipc::root_as_message(metadata)
            .map_err(|e| malformed(format!("message {index} is not an IPC message: {e}")))?;
        if message.version() < MetadataVersion::V4 {
            return Err(malformed(format!(
                "message {index} is of IPC format version {}, older than the V4 Floe reads",
                message.version().0 + 1
            )));
        }
        let body_length = usize::try_from(message.bodyLength()).map_err(|_| {
            malformed(format!(
                "message {index} declares a negative body length ({})",
                message.bodyLength()
            ))
        })?;
        if body_length > body.len() {
            return Err(malformed(format!(
                "message {index} declares a body of {body_length} bytes but only {} follow",
                body.len()
            )));
        }
        let body = &body[..body_length];
        match message.header_type() {
            MessageHeader::Schema => {
                if self.schema.is_some() {
                    return Err(malformed(format!("message {index} is a second schema")));
                }
                let header = message
                    .header_as_schema()
                    .ok_or_else(|| malformed(format!("message {index} has no schema")))?;
                let schema = schema::read(header).map_err(|e| malformed(format!("schema: {e}")))?;
                self.schema = Some(Arc::new(schema));
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(|| {
                    malformed(format!(
                        "message {index} is a record batch before the schema"
                    ))
                })?;
                let batch = message
                    .header_as_record_batch()
                    .ok_or_else(|| malformed(format!("message {index} has no record batch")))?;
                self.record_batches += 1;
                let what = format!("record batch {}", self.record_batches);
                let columns: Vec<&DataType> =
                    schema.fields().iter().map(|f| f.data_type()).collect();
                self.batch(&what, batch, body, &columns)?;
            }
            MessageHeader::DictionaryBatch => {
                let schema = self.schema.clone().ok_or_else(|| {
                    malformed(format!(
                        "message {index} is a dictionary batch before the schema"
                    ))
                })?;
                let dictionary = message
                    .header_as_dictionary_batch()
                    .ok_or_else(|| malformed(format!("message {index} has no dictionary batch")))?;
                self.dictionary_batches += 1;
                let what = format!("dictionary batch {}", self.dictionary_batches);
                let data = dictionary
                    .data()
                    .ok_or_else(|| malformed(format!("{what} carries no data")))?;
                let values =
                    schema::dictionary_values(&schema, dictionary.id()).ok_or_else(|| {
                        malformed(format!(
                            "{what} has id {}, which no column of the schema uses",
                            dictionary.id()
                        ))
                    })?;
                self.batch(&what, data, body, &[&values])?;
            }
            other => {
                return Err(malformed(format!(
                    "message {index} is a {} message, which a stream of record batches does not carry",
                    other.variant_name().unwrap_or("unknown")
                )));
            }
        }
        Ok(body_length)
    }

    /// Checks a record batch (or a dictionary batch's data) whose columns are `columns`.
    fn batch(
        &mut self,
        what: &str,
        batch: ipc::RecordBatch,
        body: &[u8],
        columns: &[&DataType],
    ) -> Result<(), DecodeError> {
        let rows = u64::try_from(batch.length())
            .map_err(|_| malformed(format!("{what} declares a negative row count")))?;
        let codec = match batch.compression() {
            None => None,
            Some(compression) => {
                if compression.method() != BodyCompressionMethod::BUFFER {
                    return Err(malformed(format!(
                        "{what} is compressed by a method other than per buffer"
                    )));
                }
                Some(match compression.codec() {
                    CompressionType::LZ4_FRAME => Codec::Lz4Frame,
                    CompressionType::ZSTD => Codec::Zstd,
                    other => {
                        return Err(malformed(format!(
                            "{what} is compressed with an unknown codec ({})",
                            other.0
                        )));
                    }
                })
            }
        };

        // Rows first: 8 bytes per row per column, or per field-node entry when nested
        // columns hold more.
        let nodes: Vec<&ipc::FieldNode> = batch
            .nodes()
            .map(|n| n.iter().collect())
            .unwrap_or_default();
        let mut entries: u64 = 0;
        for (i, node) in nodes.iter().enumerate() {
            let (length, nulls) = (node.length(), node.null_count());
            if length < 0 || nulls < 0 || nulls > length {
                return Err(malformed(format!(
                    "field node {i} of {what} declares {length} rows with {nulls} nulls"
                )));
            }
            entries = entries.saturating_add(length as u64);
        }
        let columns_count = columns.len().max(1) as u64;
        let cost = rows
            .saturating_mul(columns_count)
            .max(entries)
            .saturating_mul(8);
        let cost = usize::try_from(cost).unwrap_or(usize::MAX);
        self.cells = self.cells.saturating_add(cost);
        if cost > self.budget {
            return Err(self.over(format!(
                "{what} declares {rows} rows of {} columns ({cost} bytes at 8 a value)",
                columns.len()
            )));
        }
        if self.cells > self.budget {
            return Err(self.over(format!(
                "{what} brings the stream to {} bytes of rows at 8 a value",
                self.cells
            )));
        }

        // Every buffer inside the body; how long each is once decoded.
        let buffers: Vec<&ipc::Buffer> = batch
            .buffers()
            .map(|b| b.iter().collect())
            .unwrap_or_default();
        let mut lengths = Vec::with_capacity(buffers.len());
        for (i, buffer) in buffers.iter().enumerate() {
            let (offset, length) = (buffer.offset(), buffer.length());
            let inside = offset >= 0
                && length >= 0
                && offset
                    .checked_add(length)
                    .is_some_and(|end| end as u64 <= body.len() as u64);
            if !inside {
                return Err(malformed(format!(
                    "buffer {i} of {what} (offset {offset}, length {length}) lies outside its \
                     {}-byte body",
                    body.len()
                )));
            }
            let bytes = &body[offset as usize..(offset + length) as usize];
            lengths.push(match codec {
                None => bytes.len(),
                Some(_) if bytes.is_empty() => 0,
                Some(codec) => self.compressed(what, i, codec, bytes)?,
            });
        }
        let variadic: Vec<i64> = batch
            .variadicBufferCounts()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        layout::check(what, columns, &nodes, &lengths, &variadic)
            .map_err(|e| malformed(e.to_string()))
    }

    /// A compressed buffer's decoded length, counted against the budget.
    fn compressed(
        &mut self,
        what: &str,
        index: usize,
        codec: Codec,
        bytes: &[u8],
    ) -> Result<usize, DecodeError> {
        let Some((prefix, data)) = bytes.split_first_chunk::<8>() else {
            return Err(malformed(format!(
                "buffer {index} of {what} is compressed but shorter than its 8-byte length prefix"
            )));
        };
        let declared = i64::from_le_bytes(*prefix);
        if declared == -1 {
            // Stored uncompressed.
            return Ok(data.len());
        }
        let declared = u64::try_from(declared).map_err(|_| {
            malformed(format!(
                "buffer {index} of {what} declares a negative uncompressed length ({declared})"
            ))
        })?;
        if declared > self.budget as u64 {
            return Err(self.over(format!(
                "buffer {index} of {what} declares {declared} bytes uncompressed"
            )));
        }
        let declared = declared as usize;
        self.uncompressed = self.uncompressed.saturating_add(declared);
        if self.uncompressed > self.budget {
            return Err(self.over(format!(
                "buffer {index} of {what} brings the stream to {} bytes uncompressed",
                self.uncompressed
            )));
        }
        if codec == Codec::Lz4Frame && declared > 0 {
            // Arrow's LZ4 reads the frame to its end, whatever the prefix said.
            let holds = lz4_frame_length(data, declared).map_err(|e| {
                malformed(format!("buffer {index} of {what}: not an LZ4 frame: {e}"))
            })?;
            if holds != declared as u64 {
                let more = if holds > declared as u64 {
                    "more than "
                } else {
                    ""
                };
                return Err(malformed(format!(
                    "buffer {index} of {what} declares {declared} bytes uncompressed but holds \
                     {more}{holds}"
                )));
            }
        }
        Ok(declared)
    }
}

/// How many bytes an LZ4 frame decompresses to, counting no further than `declared + 1`.
fn lz4_frame_length(frame: &[u8], declared: usize) -> std::io::Result<u64> {
    use std::io::Read;
    let mut decoder = lz4_flex::frame::FrameDecoder::new(frame).take(declared as u64 + 1);
    std::io::copy(&mut decoder, &mut std::io::sink())
}
