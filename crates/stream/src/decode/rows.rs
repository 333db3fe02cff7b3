//! A request's body as rows of the table: NDJSON, a JSON array of objects or an Arrow IPC
//! stream, decoded within the request's budget (`DecodeLimits::budget` of its size).
//!
//! - Arrow IPC goes through [`super::ipc`].
//! - JSON is decoded by Arrow's JSON decoder straight from the bytes; no parse tree of the
//!   body is ever built. A JSON array is first split into its elements (16 bytes each,
//!   counted against the budget). Only a body the decoder refuses is looked at row by row,
//!   to name the row at fault, and only a schema inferred (for `?create=true`, or columns
//!   the table lacks) parses rows into values, one row at a time, each within the budget.
//! - Rows × the table's columns × 8 bytes must fit the budget: every row becomes a value
//!   (perhaps a null) in every column.

use std::cell::Cell;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::ReaderBuilder;
use floe_catalog::CatalogError;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::ipc as bounded_ipc;
use crate::Refusal;
use crate::core::{Match, conform, leaf_count};

/// One JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";
/// A JSON array of objects.
pub const JSON: &str = "application/json";
/// An Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

type Result<T, E = CatalogError> = std::result::Result<T, E>;

fn bad_request(message: impl Into<String>) -> CatalogError {
    CatalogError::BadRequest {
        message: message.into(),
    }
}

/// Rows checked row by row at once when a body is refused, to name the one at fault.
const CHUNK: usize = 8192;

/// What a parse tree costs per JSON value, for the budget of inferring a schema.
const VALUE_BYTES: usize = 80;

fn too_large(message: String) -> CatalogError {
    CatalogError::PayloadTooLarge(message)
}

/// The rows of a body, as the table's schema; unknown fields and values that do not fit are
/// refused naming them.
pub fn parse(
    media: &str,
    body: &Bytes,
    schema: &SchemaRef,
    budget: usize,
) -> Result<Vec<RecordBatch>> {
    if media == ARROW_STREAM {
        let decoded = bounded_ipc::decode_stream(body, budget).map_err(CatalogError::from)?;
        for field in decoded.schema.fields() {
            if schema.field_with_name(field.name()).is_err() {
                return Err(bad_request(format!(
                    "column {} is not in the table",
                    field.name()
                )));
            }
        }
        let rows = decoded.batches.iter().map(|b| b.num_rows()).sum();
        fits(rows, schema, budget)?;
        return decoded
            .batches
            .iter()
            .map(|b| conform(b, schema, Match::Name).map_err(CatalogError::from))
            .collect();
    }
    let rows = JsonRows::of(media, body, budget)?;
    fits(rows.count_at_most(), schema, budget)?;
    match decode_json(schema, rows.pieces()) {
        Ok(batches) => Ok(batches),
        Err(refused) => Err(misfit(&rows, schema, refused)),
    }
}

/// Refuses `rows` rows when a value in each of the table's columns would not fit the budget.
fn fits(rows: usize, schema: &SchemaRef, budget: usize) -> Result<()> {
    let columns = leaf_count(schema.fields());
    let cost = rows.saturating_mul(columns.max(1)).saturating_mul(8);
    if cost > budget {
        return Err(too_large(format!(
            "{rows} rows of the table's {columns} columns take {cost} bytes (at 8 a value), \
             more than the {budget} this request may decode (--decode-memory-mb)"
        )));
    }
    Ok(())
}

/// Where a JSON row is, to name it.
#[derive(Debug, Clone, Copy)]
enum Place {
    Line(usize),
    Element(usize),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Line(n) => write!(f, "line {n}"),
            Place::Element(n) => write!(f, "element {n}"),
        }
    }
}

/// A JSON body's rows: NDJSON's lines, or a JSON array's elements.
enum JsonRows<'a> {
    Lines(&'a [u8]),
    Elements(Vec<&'a RawValue>),
}

impl<'a> JsonRows<'a> {
    fn of(media: &str, body: &'a [u8], budget: usize) -> Result<Self> {
        if media == NDJSON {
            return Ok(JsonRows::Lines(body));
        }
        let over = Cell::new(false);
        let limit = budget / std::mem::size_of::<&RawValue>();
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let elements = Elements { limit, over: &over }
            .deserialize(&mut deserializer)
            .and_then(|elements| deserializer.end().map(|_| elements));
        match elements {
            Ok(elements) => Ok(JsonRows::Elements(elements)),
            Err(_) if over.get() => Err(too_large(format!(
                "the array holds more than {limit} elements, more than this request may \
                 decode (--decode-memory-mb)"
            ))),
            Err(e) => Err(bad_request(format!("not a JSON array of objects: {e}"))),
        }
    }

    /// How many rows there are, or a little more (NDJSON's blank lines count).
    fn count_at_most(&self) -> usize {
        match self {
            JsonRows::Lines(body) => body.iter().filter(|b| **b == b'\n').count() + 1,
            JsonRows::Elements(elements) => elements.len(),
        }
    }

    /// Each row's bytes with its place; NDJSON's blank lines are skipped.
    fn iter(&self) -> Box<dyn Iterator<Item = (Place, &'a [u8])> + '_> {
        match self {
            JsonRows::Lines(body) => Box::new(
                body.split(|b| *b == b'\n')
                    .enumerate()
                    .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
                    .map(|(i, line)| (Place::Line(i + 1), line)),
            ),
            JsonRows::Elements(elements) => Box::new(
                elements
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (Place::Element(i), e.get().as_bytes())),
            ),
        }
    }

    /// The bytes Arrow's decoder reads: the NDJSON body as it is, the array's elements one
    /// per line.
    fn pieces(&self) -> Box<dyn Iterator<Item = &'a [u8]> + '_> {
        match self {
            JsonRows::Lines(body) => Box::new(std::iter::once(*body)),
            JsonRows::Elements(elements) => Box::new(
                elements
                    .iter()
                    .flat_map(|e| [e.get().as_bytes(), b"\n".as_slice()]),
            ),
        }
    }
}

/// A JSON array's elements, unparsed; more than `limit` sets `over` and fails.
struct Elements<'c> {
    limit: usize,
    over: &'c Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = Vec<&'de RawValue>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element::<&RawValue>()? {
            if elements.len() == self.limit {
                self.over.set(true);
                return Err(serde::de::Error::custom("too many elements"));
            }
            elements.push(element);
        }
        Ok(elements)
    }
}

/// JSON rows as batches of the table's schema, by Arrow's JSON decoder (fields the table
/// lacks are refused).
fn decode_json<'a>(
    schema: &SchemaRef,
    pieces: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let mut decoder = ReaderBuilder::new(schema.clone())
        .with_strict_mode(true)
        .with_batch_size(16 * 1024)
        .build_decoder()?;
    let mut batches = Vec::new();
    for piece in pieces {
        let mut rest = piece;
        while !rest.is_empty() {
            let read = decoder.decode(rest)?;
            rest = &rest[read..];
            if read == 0 {
                // A full batch: flushed, it makes room.
                match decoder.flush()? {
                    Some(batch) => batches.push(batch),
                    None => {
                        return Err(ArrowError::JsonError(
                            "the decoder stopped before the end of the body".into(),
                        ));
                    }
                }
            }
        }
    }
    batches.extend(decoder.flush()?);
    Ok(batches)
}

/// Why a JSON body the decoder refused does not fit, naming the first row at fault.
fn misfit(rows: &JsonRows, schema: &SchemaRef, refused: ArrowError) -> CatalogError {
    let all: Vec<(Place, &[u8])> = rows.iter().collect();
    for chunk in all.chunks(CHUNK) {
        for (place, row) in chunk {
            if let Err(e) = known_fields(row, schema) {
                return e.context(place).into();
            }
        }
        if decode_json(schema, chunk.iter().flat_map(|(_, r)| [*r, b"\n"])).is_ok() {
            continue;
        }
        for (place, row) in chunk {
            if let Err(e) = decode_json(schema, std::iter::once(*row)) {
                return bad_request(format!("{place}: {e}"));
            }
        }
    }
    bad_request(format!("rows do not fit the table's schema: {refused}"))
}

/// Checks that a row is a JSON object whose fields are all columns of the table, without
/// building it.
fn known_fields(row: &[u8], schema: &SchemaRef) -> Result<(), Refusal> {
    let unknown = Cell::new(None);
    let checked = serde_json::from_slice::<serde::de::IgnoredAny>(row)
        .map_err(|e| Refusal::malformed(format!("not JSON: {e}")))
        .and_then(|_| {
            let mut deserializer = serde_json::Deserializer::from_slice(row);
            KnownFields {
                schema,
                unknown: &unknown,
            }
            .deserialize(&mut deserializer)
            .map_err(|_| Refusal::malformed("a row must be a JSON object"))
        });
    match (checked, unknown.take()) {
        (_, Some(name)) => Err(Refusal::unfit(format!(
            "field {name:?} is not a column of the table"
        ))),
        (result, None) => result,
    }
}

/// An object's keys checked against the table's columns; the first unknown one is kept.
struct KnownFields<'s> {
    schema: &'s SchemaRef,
    unknown: &'s Cell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for KnownFields<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KnownFields<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if self.schema.field_with_name(&name).is_err() {
                self.unknown.set(Some(name.into_owned()));
                return Err(serde::de::Error::custom("unknown field"));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// The request's top-level fields with the types their values suggest: those the table
/// lacks, and those it has (which may bring nested fields or wider types).
pub(crate) type Seen = Vec<Field>;

pub fn new_fields(
    media: &str,
    body: &Bytes,
    schema: &SchemaRef,
    budget: usize,
) -> Result<(Seen, Seen)> {
    let seen = infer_schema(media, body, budget)?;
    Ok(seen
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .partition(|f| schema.field_with_name(f.name()).is_err()))
}

/// A schema for a new table, from the request's rows (JSON, inferred as every door infers:
/// [`crate::core::infer`]) or its stream's schema (Arrow).
pub fn infer_schema(media: &str, body: &Bytes, budget: usize) -> Result<Schema> {
    if media == ARROW_STREAM {
        return bounded_ipc::stream_schema(body, budget)
            .map(|schema| schema.as_ref().clone())
            .map_err(CatalogError::from);
    }
    let rows = JsonRows::of(media, body, budget)?;
    // Rows are parsed one at a time; the first refusal is kept to answer with.
    let refused: Cell<Option<CatalogError>> = Cell::new(None);
    let mut any = false;
    let values = rows.iter().map(|(place, row)| {
        any = true;
        let cost = tree_cost(row);
        if cost > budget {
            refused.set(Some(too_large(format!(
                "{place} would take {cost} bytes to parse, more than the {budget} this \
                 request may decode (--decode-memory-mb)"
            ))));
            return Err(ArrowError::JsonError(String::new()));
        }
        serde_json::from_slice::<serde_json::Value>(row).map_err(|e| {
            refused.set(Some(bad_request(format!("{place}: not JSON: {e}"))));
            ArrowError::JsonError(String::new())
        })
    });
    let inferred = crate::core::infer::infer_fields(values);
    if let Some(refusal) = refused.take() {
        return Err(refusal);
    }
    if !any {
        return Err(bad_request("no rows to infer the new table's schema from"));
    }
    inferred
        .map(Schema::new)
        .map_err(|e| bad_request(format!("cannot infer a schema: {e}")))
}

/// About what parsing a JSON row into values takes: a value per `{`, `[`, `,` and `:` outside
/// strings, and the row's bytes.
fn tree_cost(row: &[u8]) -> usize {
    json_values(row)
        .saturating_mul(VALUE_BYTES)
        .saturating_add(row.len())
}

/// The values parsing JSON `bytes` makes, about: one, and one more per `{`, `[`, `,` and `:`
/// outside strings (counted without parsing, so malformed JSON is counted too).
pub(crate) fn json_values(bytes: &[u8]) -> usize {
    let mut values = 1usize;
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => values += 1,
                _ => {}
            }
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::DataType;

    use super::*;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn message(e: CatalogError) -> (floe_catalog::ErrorCode, String) {
        (e.code(), e.to_string())
    }

    #[test]
    fn json_arrays_and_lines_decode_without_a_parse_tree() {
        let lines = Bytes::from_static(b"{\"id\": 1, \"name\": \"a\"}\n\n{\"id\": 2}\n");
        let batches = parse(NDJSON, &lines, &table(), 1 << 20).unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
        let array = Bytes::from_static(b"[{\"id\": 1}, {\"id\": 2, \"name\": \"b\"}, {}]");
        let batches = parse(JSON, &array, &table(), 1 << 20).unwrap();
        assert_eq!(batches[0].num_rows(), 3);
        assert_eq!(batches[0].column(1).null_count(), 2);
    }

    #[test]
    fn refused_rows_are_named() {
        let refused = |media, body: &'static [u8]| {
            message(parse(media, &Bytes::from_static(body), &table(), 1 << 20).unwrap_err()).1
        };
        assert_eq!(
            refused(NDJSON, b"{\"id\": 1}\n{\"id\": 2, \"colour\": \"red\"}\n"),
            "line 2: field \"colour\" is not a column of the table"
        );
        assert!(refused(NDJSON, b"{\"id\": 1}\n{\"id\": \n").starts_with("line 2: not JSON"));
        assert!(refused(JSON, b"[{\"id\": \"x\"}]").starts_with("element 0: "));
        assert_eq!(
            refused(JSON, b"[{\"id\": 1}, 7]"),
            "element 1: a row must be a JSON object"
        );
        assert!(refused(JSON, b"[{\"id\": 1}").starts_with("not a JSON array of objects"));
    }

    #[test]
    fn rows_beyond_the_budget_are_413() {
        // 100,000 empty objects: 300 kB of body, 1.6 MB of nulls in two columns.
        let many: Vec<u8> = b"{}\n".repeat(100_000);
        let (code, text) =
            message(parse(NDJSON, &Bytes::from(many), &table(), 1 << 20).unwrap_err());
        assert_eq!(code, floe_catalog::ErrorCode::PayloadTooLarge);
        assert!(
            text.contains("100001 rows of the table's 2 columns"),
            "{text}"
        );
        // An array of many tiny elements is refused while it is split, not after.
        let mut array = b"[".to_vec();
        array.extend(b"0,".repeat(100_000));
        array.extend(b"0]");
        let (code, text) =
            message(parse(JSON, &Bytes::from(array), &table(), 1 << 20).unwrap_err());
        assert_eq!(code, floe_catalog::ErrorCode::PayloadTooLarge);
        assert!(text.contains("more than 65536 elements"), "{text}");
        // Inferring a schema parses a row into values only within the budget.
        let mut deep = b"{\"a\": [".to_vec();
        deep.extend(b"0,".repeat(20_000));
        deep.extend(b"0]}");
        let (code, _) =
            message(infer_schema(NDJSON, &Bytes::from(deep.clone()), 1 << 20).unwrap_err());
        assert_eq!(code, floe_catalog::ErrorCode::PayloadTooLarge);
        let inferred = infer_schema(NDJSON, &Bytes::from(deep), 4 << 20).unwrap();
        assert_eq!(inferred.field(0).name(), "a");
    }

    #[test]
    fn parse_tree_costs_count_values_outside_strings() {
        assert_eq!(tree_cost(b"{}"), 2 * VALUE_BYTES + 2);
        assert_eq!(tree_cost(br#"{"a":[1,2]}"#), 5 * VALUE_BYTES + 11);
        assert_eq!(tree_cost(br#"{"a":"x,:[{\"}"}"#), 3 * VALUE_BYTES + 16);
    }
}
