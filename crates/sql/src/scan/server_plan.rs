//! Scan planning for REST clients (the Iceberg REST catalog's `planTableScan`): the files a
//! client's scan reads, planned by the same planner as Floe's own scans — the manifests kept
//! per file ([`super::manifests`]), pruned by the filter ([`super::file_pruning`]), each data
//! file with the delete files that apply to it ([`super::planning`]) — and written as the
//! spec's `FileScanTask`s, a page at a time.
//!
//! The client's filter arrives as the spec's expression JSON. It is parsed with bounds (depth,
//! nodes), its columns resolved against the scanned schema (an unknown column is the client's
//! mistake, a 400) and its literals read in the columns' types. What converts exactly prunes
//! files; what does not (transforms, functions, types without an exact reading) is left out
//! where leaving it out only keeps more files — never under a `not`. Every task carries the
//! client's whole filter as its residual, so rows are filtered as the client asked whatever
//! pruning did.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use iceberg::expr::{Bind, Predicate, Reference};
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, Datum, ManifestContentType, PrimitiveType, Schema,
    SchemaRef, TableMetadata, Type,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::manifests::{self, DataFileEntry, ManifestIndex};
use super::planning::{deletes_applying, matching};
use super::provider::IcebergTableProvider;

/// Deepest a filter may nest.
const MAX_DEPTH: usize = 64;
/// Most nodes and literals a filter may hold.
const MAX_NODES: usize = 10_000;
/// Largest filter, as JSON: every task carries it back as its residual.
pub const MAX_FILTER_BYTES: usize = 64 << 10;
/// About the most bytes of residual filters one page carries: a page shrinks below the
/// configured size for a large filter.
const PAGE_RESIDUAL_BYTES: usize = 8 << 20;

/// A `PlanTableScanRequest`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PlanRequest {
    pub snapshot_id: Option<i64>,
    #[serde(default)]
    pub select: Option<Vec<String>>,
    #[serde(default)]
    pub filter: Option<Value>,
    #[serde(default)]
    pub min_rows_requested: Option<i64>,
    #[serde(default = "case_sensitive")]
    pub case_sensitive: bool,
    #[serde(default)]
    pub use_snapshot_schema: bool,
    pub start_snapshot_id: Option<i64>,
    pub end_snapshot_id: Option<i64>,
    #[serde(default)]
    pub stats_fields: Option<Vec<String>>,
}

fn case_sensitive() -> bool {
    true
}

/// Why a scan was not planned.
#[derive(Debug)]
pub enum PlanError {
    /// The request is wrong (a 400 naming what).
    Invalid(String),
    /// The table's files could not be read.
    Read(DataFusionError),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Invalid(message) => f.write_str(message),
            PlanError::Read(e) => write!(f, "{e}"),
        }
    }
}

fn invalid(message: impl Into<String>) -> PlanError {
    PlanError::Invalid(message.into())
}

/// A planned scan: the data files to read, in path order, served a page at a time.
#[derive(Debug)]
pub struct ScanPlan {
    index: Arc<ManifestIndex>,
    metadata: Arc<TableMetadata>,
    paths: Vec<String>,
    /// Every task's residual: the client's filter as it sent it (`true` without one).
    residual: Value,
    residual_bytes: usize,
    /// Columns whose statistics the client asked for.
    stats: Vec<i32>,
}

impl ScanPlan {
    /// How many data files the scan reads.
    pub fn files(&self) -> usize {
        self.paths.len()
    }

    /// The file scan tasks one page carries: `wanted`, fewer for a large filter.
    pub fn page_size(&self, wanted: usize) -> usize {
        wanted
            .min(PAGE_RESIDUAL_BYTES / self.residual_bytes.max(1))
            .max(1)
    }

    /// `file-scan-tasks` and the `delete-files` they refer to, for the data files `range`.
    pub fn page(&self, range: Range<usize>) -> Result<Value> {
        let range = range.start.min(self.paths.len())..range.end.min(self.paths.len());
        let paths: Vec<&str> = self.paths[range].iter().map(String::as_str).collect();
        let applying = deletes_applying(&self.index, &paths);
        let mut delete_files = Vec::new();
        let mut numbered: HashMap<usize, usize> = HashMap::new();
        let mut tasks = Vec::with_capacity(paths.len());
        for (path, deletes) in paths.iter().zip(applying) {
            let Some(entry) = self.index.data.get(*path) else {
                continue;
            };
            let mut references = Vec::with_capacity(deletes.len());
            for position in deletes {
                let next = numbered.len();
                let number = *numbered.entry(position).or_insert(next);
                if number == next {
                    delete_files.push(guarded(|| {
                        content_file(&self.index.deletes[position], &self.metadata, &[])
                    })?);
                }
                references.push(number);
            }
            tasks.push(json!({
                "data-file": guarded(|| content_file(entry, &self.metadata, &self.stats))?,
                "delete-file-references": references,
                "residual-filter": self.residual,
            }));
        }
        Ok(json!({ "file-scan-tasks": tasks, "delete-files": delete_files }))
    }
}

/// Runs `f` (writing a file's JSON), turning a panic of the writer — iceberg's value
/// serialization panics on some out-of-range dates and timestamps — into an error.
fn guarded(f: impl FnOnce() -> Result<Value>) -> Result<Value> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(DataFusionError::Execution(
            "a file's statistics or partition values are out of range".into(),
        ))
    })
}

/// A scan request checked against its table, ready to be planned: everything wrong with the
/// request is found here, before any file is read.
pub struct PreparedScan {
    table: iceberg::table::Table,
    /// What the table's reads may reach: every file the plan names must lie there.
    files: floe_storage::WarehouseStorage,
    metadata: Arc<TableMetadata>,
    snapshot_id: Option<i64>,
    filter: Option<iceberg::expr::BoundPredicate>,
    residual: Value,
    residual_bytes: usize,
    stats: Vec<i32>,
}

/// Checks `request` against the table `provider` reads (whose reach the plan keeps: a
/// manifest outside the table is refused as it is for every scan).
pub fn prepare_scan(
    provider: &IcebergTableProvider,
    request: &PlanRequest,
) -> std::result::Result<PreparedScan, PlanError> {
    if request.start_snapshot_id.is_some() || request.end_snapshot_id.is_some() {
        return Err(invalid(
            "incremental scans (start-snapshot-id, end-snapshot-id) are not planned by this \
             server: plan the end snapshot, or plan on the client",
        ));
    }
    let metadata = provider.metadata();
    let snapshot = match request.snapshot_id {
        Some(id) => Some(
            metadata
                .snapshot_by_id(id)
                .ok_or_else(|| invalid(format!("the table has no snapshot {id}")))?,
        ),
        None => metadata.current_snapshot(),
    };
    let schema: SchemaRef = match (snapshot, request.use_snapshot_schema) {
        (Some(snapshot), true) => snapshot
            .schema(metadata)
            .map_err(|e| invalid(format!("the snapshot's schema: {e}")))?,
        _ => metadata.current_schema().clone(),
    };
    let field = |name: &str| {
        let found = if request.case_sensitive {
            schema.field_by_name(name)
        } else {
            schema.field_by_name_case_insensitive(name)
        };
        found.ok_or_else(|| invalid(format!("no column {name:?} in the table")))
    };
    // `select` does not change which files are read; it may name Iceberg's metadata columns
    // (`_file`, `_pos`, …) besides the table's, so it is only bounded.
    if request.select.as_ref().is_some_and(|s| s.len() > MAX_NODES) {
        return Err(invalid(format!(
            "select names more than {MAX_NODES} columns"
        )));
    }
    let stats: std::collections::BTreeSet<i32> = request
        .stats_fields
        .iter()
        .flatten()
        .map(|name| field(name).map(|f| f.id))
        .collect::<std::result::Result<_, _>>()?;
    let stats: Vec<i32> = stats.into_iter().collect();
    let residual_bytes = match &request.filter {
        None => 4,
        Some(filter) => serde_json::to_vec(filter)
            .map(|v| v.len())
            .unwrap_or(usize::MAX),
    };
    if residual_bytes > MAX_FILTER_BYTES {
        return Err(invalid(format!(
            "the filter is {residual_bytes} bytes of JSON; at most {MAX_FILTER_BYTES} are taken"
        )));
    }
    let filter = match &request.filter {
        None => None,
        Some(value) => {
            let mut parser = FilterParser {
                schema: &schema,
                case_sensitive: request.case_sensitive,
                nodes: 0,
            };
            parser
                .predicate(value, 0, true)?
                .map(|p| {
                    // `not` pushed down to the leaves, where pruning reads it.
                    p.rewrite_not()
                        .bind(schema.clone(), request.case_sensitive)
                        .map_err(|e| invalid(format!("filter: {e}")))
                })
                .transpose()?
        }
    };
    Ok(PreparedScan {
        table: provider.table().map_err(PlanError::Read)?,
        files: provider.files().clone(),
        residual_bytes,
        metadata: Arc::new(metadata.clone()),
        snapshot_id: snapshot.map(|s| s.snapshot_id()),
        filter,
        residual: request.filter.clone().unwrap_or(Value::Bool(true)),
        stats,
    })
}

impl PreparedScan {
    /// How many data files the scanned snapshot holds: its summary's `total-data-files`, or,
    /// from writers that leave the summary's totals out (DuckDB 1.4), the data files its
    /// manifest list counts. `None` when neither says.
    pub async fn data_files(&self) -> Option<u64> {
        let Some(id) = self.snapshot_id else {
            return Some(0);
        };
        let snapshot = self.metadata.snapshot_by_id(id)?;
        let total = snapshot
            .summary()
            .additional_properties
            .get("total-data-files")
            .and_then(|n| n.parse().ok());
        if total.is_some() {
            return total;
        }
        let list = manifests::manifest_list(&self.table, snapshot).await.ok()?;
        list.entries()
            .iter()
            .filter(|m| m.content == ManifestContentType::Data)
            .map(|m| Some(u64::from(m.added_files_count?) + u64::from(m.existing_files_count?)))
            .sum()
    }

    /// Reads the snapshot's manifests (those kept already are not read again) and keeps the
    /// data files the filter might match.
    pub async fn plan(self) -> std::result::Result<ScanPlan, PlanError> {
        let index = match self.snapshot_id {
            None => Arc::default(),
            Some(id) => manifests::index(&self.table, Some(id))
                .await
                .map_err(PlanError::Read)?,
        };
        let paths: Vec<String> = matching(&index, self.filter.as_ref())
            .into_iter()
            .cloned()
            .collect();
        // Every file a plan names lies in the table, as every file a scan reads does: a
        // manifest naming another table's files gives no one that table's rows.
        let reach = self.files.reach();
        let referenced = index
            .deletes
            .iter()
            .flat_map(|d| {
                [
                    Some(d.file.file_path().to_string()),
                    d.file.referenced_data_file(),
                ]
            })
            .flatten();
        for path in paths.iter().cloned().chain(referenced) {
            reach
                .check(&path)
                .map_err(|e| invalid(format!("table file {path}: {e}")))?;
        }
        Ok(ScanPlan {
            index,
            metadata: self.metadata,
            paths,
            residual: self.residual,
            residual_bytes: self.residual_bytes,
            stats: self.stats,
        })
    }
}

/// Reads the spec's expression JSON into an Iceberg predicate.
struct FilterParser<'a> {
    schema: &'a Schema,
    case_sensitive: bool,
    nodes: usize,
}

impl FilterParser<'_> {
    /// The predicate `value` says, or `None` when it does not convert exactly. `loose` says
    /// whether leaving a part out is safe here (it keeps more files): true at the top and below
    /// `and`/`or`, false anywhere under a `not`.
    fn predicate(
        &mut self,
        value: &Value,
        depth: usize,
        loose: bool,
    ) -> std::result::Result<Option<Predicate>, PlanError> {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return Err(invalid(format!(
                "the filter nests deeper than {MAX_DEPTH} or holds more than {MAX_NODES} nodes"
            )));
        }
        let object = match value {
            Value::Bool(true) => return Ok(Some(Predicate::AlwaysTrue)),
            Value::Bool(false) => return Ok(Some(Predicate::AlwaysFalse)),
            Value::Object(object) => object,
            other => return Err(invalid(format!("filter: not an expression: {other}"))),
        };
        let kind = object
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("filter: an expression without a \"type\""))?;
        let child = |key: &str| {
            object
                .get(key)
                .ok_or_else(|| invalid(format!("filter: a {kind:?} expression without {key:?}")))
        };
        Ok(match kind {
            "true" => Some(Predicate::AlwaysTrue),
            "false" => Some(Predicate::AlwaysFalse),
            "and" | "or" => {
                let left = self.predicate(child("left")?, depth + 1, loose)?;
                let right = self.predicate(child("right")?, depth + 1, loose)?;
                match (kind, left, right) {
                    ("and", Some(l), Some(r)) => Some(l.and(r)),
                    // Without one side, `and` keeps at least the files the other matches.
                    ("and", one, other) if loose => one.or(other),
                    ("or", Some(l), Some(r)) => Some(l.or(r)),
                    _ => None,
                }
            }
            "not" => self
                .predicate(child("child")?, depth + 1, false)?
                .map(|p| !p),
            "is-null" | "not-null" | "is-nan" | "not-nan" => {
                let operand = object.get("child").or_else(|| object.get("term"));
                let operand = operand.ok_or_else(|| {
                    invalid(format!("filter: a {kind:?} expression without \"child\""))
                })?;
                let Some((reference, _)) = self.reference(operand)? else {
                    return Ok(None);
                };
                Some(match kind {
                    "is-null" => reference.is_null(),
                    "not-null" => reference.is_not_null(),
                    "is-nan" => reference.is_nan(),
                    _ => reference.is_not_nan(),
                })
            }
            "lt" | "lt-eq" | "gt" | "gt-eq" | "eq" | "not-eq" | "starts-with"
            | "not-starts-with" => self.comparison(kind, object)?,
            "in" | "not-in" => {
                let operand = object.get("child").or_else(|| object.get("term"));
                let operand = operand.ok_or_else(|| {
                    invalid(format!("filter: a {kind:?} expression without \"child\""))
                })?;
                let Some((reference, ty)) = self.reference(operand)? else {
                    return Ok(None);
                };
                let values = match child("values")? {
                    Value::Array(values) => values,
                    Value::Object(typed) => typed
                        .get("values")
                        .and_then(Value::as_array)
                        .ok_or_else(|| invalid("filter: \"values\" without a list"))?,
                    other => return Err(invalid(format!("filter: values {other}"))),
                };
                self.nodes += values.len();
                if self.nodes > MAX_NODES {
                    return Err(invalid(format!(
                        "the filter holds more than {MAX_NODES} nodes"
                    )));
                }
                let mut data = Vec::with_capacity(values.len());
                for value in values {
                    match literal(value, &ty)? {
                        Some(datum) => data.push(datum),
                        None => return Ok(None),
                    }
                }
                Some(if kind == "in" {
                    reference.is_in(data)
                } else {
                    reference.is_not_in(data)
                })
            }
            // Function applications and whatever a newer spec adds: residual only (`None`
            // is safe anywhere: under a `not` it takes the whole `not` out of pruning).
            _ => None,
        })
    }

    fn comparison(
        &self,
        kind: &str,
        object: &Map<String, Value>,
    ) -> std::result::Result<Option<Predicate>, PlanError> {
        let (term, value, flipped) = match (object.get("term"), object.get("value")) {
            (Some(term), Some(value)) => (term, value, false),
            _ => match (object.get("left"), object.get("right")) {
                // In this form a bare value is a literal; a column is a reference object.
                (Some(left), Some(right)) if is_reference(right) && !is_reference(left) => {
                    (right, left, true)
                }
                (Some(left), Some(right)) if is_reference(left) => (left, right, false),
                (Some(_), Some(_)) => return Ok(None),
                _ => {
                    return Err(invalid(format!(
                        "filter: a {kind:?} expression without \"left\" and \"right\""
                    )));
                }
            },
        };
        let Some((reference, ty)) = self.reference(term)? else {
            return Ok(None);
        };
        let Some(datum) = literal(value, &ty)? else {
            return Ok(None);
        };
        // `5 < x` is `x > 5`.
        let kind = match (flipped, kind) {
            (true, "lt") => "gt",
            (true, "lt-eq") => "gt-eq",
            (true, "gt") => "lt",
            (true, "gt-eq") => "lt-eq",
            (true, "starts-with" | "not-starts-with") => return Ok(None),
            (_, kind) => kind,
        };
        Ok(Some(match kind {
            "lt" => reference.less_than(datum),
            "lt-eq" => reference.less_than_or_equal_to(datum),
            "gt" => reference.greater_than(datum),
            "gt-eq" => reference.greater_than_or_equal_to(datum),
            "eq" => reference.equal_to(datum),
            "not-eq" => reference.not_equal_to(datum),
            "starts-with" => reference.starts_with(datum),
            _ => reference.not_starts_with(datum),
        }))
    }

    /// The column a term names and its type; `None` for a term that is not a plain column
    /// (a transform). A column the table lacks is the client's mistake.
    fn reference(
        &self,
        term: &Value,
    ) -> std::result::Result<Option<(Reference, PrimitiveType)>, PlanError> {
        let field = match term {
            Value::String(name) => self.named(name)?,
            Value::Object(object) if object.get("type") == Some(&json!("reference")) => {
                match (
                    object.get("name").or_else(|| object.get("term")),
                    object.get("id"),
                ) {
                    (Some(Value::String(name)), _) => self.named(name)?,
                    (_, Some(id)) => {
                        let id = id
                            .as_i64()
                            .and_then(|id| i32::try_from(id).ok())
                            .ok_or_else(|| invalid(format!("filter: field id {id}")))?;
                        self.schema
                            .field_by_id(id)
                            .cloned()
                            .ok_or_else(|| invalid(format!("filter: no field with id {id}")))?
                    }
                    _ => return Err(invalid(format!("filter: reference {term}"))),
                }
            }
            Value::Object(_) => return Ok(None),
            other => return Err(invalid(format!("filter: not a term: {other}"))),
        };
        let Type::Primitive(ty) = field.field_type.as_ref() else {
            return Ok(None);
        };
        let name = self
            .schema
            .name_by_field_id(field.id)
            .unwrap_or(&field.name)
            .to_string();
        Ok(Some((Reference::new(name), ty.clone())))
    }

    fn named(&self, name: &str) -> std::result::Result<iceberg::spec::NestedFieldRef, PlanError> {
        let found = if self.case_sensitive {
            self.schema.field_by_name(name)
        } else {
            self.schema.field_by_name_case_insensitive(name)
        };
        found
            .cloned()
            .ok_or_else(|| invalid(format!("filter: no column {name:?} in the table")))
    }
}

/// A reference object (or a transform of one) in the `left`/`right` form.
fn is_reference(value: &Value) -> bool {
    matches!(
        value.get("type").and_then(Value::as_str),
        Some("reference" | "transform")
    )
}

/// A literal in `ty`: `None` when the type has no exact reading here (pruning goes without
/// it); a value that does not read in the column's type is the client's mistake.
fn literal(value: &Value, ty: &PrimitiveType) -> std::result::Result<Option<Datum>, PlanError> {
    let value = match value {
        Value::Object(object) if object.get("type") == Some(&json!("literal")) => object
            .get("value")
            .ok_or_else(|| invalid("filter: a literal without \"value\""))?,
        other => other,
    };
    let wrong = || invalid(format!("filter: {value} is not a {ty} value"));
    let parsed = |r: iceberg::Result<Datum>| r.map(Some).map_err(|_| wrong());
    match (ty, value) {
        (PrimitiveType::Boolean, Value::Bool(b)) => Ok(Some(Datum::bool(*b))),
        (PrimitiveType::Int, Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(|n| Some(Datum::int(n)))
            .ok_or_else(wrong),
        (PrimitiveType::Long, Value::Number(n)) => {
            n.as_i64().map(|n| Some(Datum::long(n))).ok_or_else(wrong)
        }
        (PrimitiveType::Float, Value::Number(n)) => n
            .as_f64()
            .map(|n| Some(Datum::float(n as f32)))
            .ok_or_else(wrong),
        (PrimitiveType::Double, Value::Number(n)) => {
            n.as_f64().map(|n| Some(Datum::double(n))).ok_or_else(wrong)
        }
        (PrimitiveType::String, Value::String(s)) => Ok(Some(Datum::string(s))),
        (PrimitiveType::Date, Value::String(s)) => parsed(Datum::date_from_str(s)),
        (PrimitiveType::Date, Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(|n| Some(Datum::date(n)))
            .ok_or_else(wrong),
        (PrimitiveType::Timestamp, Value::String(s)) => parsed(Datum::timestamp_from_str(s)),
        (PrimitiveType::Timestamp, Value::Number(n)) => n
            .as_i64()
            .map(|n| Some(Datum::timestamp_micros(n)))
            .ok_or_else(wrong),
        (PrimitiveType::Timestamptz, Value::String(s)) => parsed(Datum::timestamptz_from_str(s)),
        (PrimitiveType::Timestamptz, Value::Number(n)) => n
            .as_i64()
            .map(|n| Some(Datum::timestamptz_micros(n)))
            .ok_or_else(wrong),
        (PrimitiveType::Uuid, Value::String(s)) => parsed(Datum::uuid_from_str(s)),
        (
            PrimitiveType::Boolean
            | PrimitiveType::Int
            | PrimitiveType::Long
            | PrimitiveType::Float
            | PrimitiveType::Double
            | PrimitiveType::String
            | PrimitiveType::Date
            | PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::Uuid,
            _,
        ) => Err(wrong()),
        // Decimals, times, binary, nanosecond timestamps: residual only.
        _ => Ok(None),
    }
}

/// A data or delete file as the spec's `ContentFile` JSON: partition values in the spec's
/// field order, metrics for the `stats` columns only, bounds as hexadecimal single values.
fn content_file(entry: &DataFileEntry, metadata: &TableMetadata, stats: &[i32]) -> Result<Value> {
    let file: &DataFile = &entry.file;
    let mut out = Map::new();
    out.insert(
        "content".into(),
        json!(match file.content_type() {
            DataContentType::Data => "data",
            DataContentType::PositionDeletes => "position-deletes",
            DataContentType::EqualityDeletes => "equality-deletes",
        }),
    );
    out.insert("file-path".into(), json!(file.file_path()));
    out.insert(
        "file-format".into(),
        json!(match file.file_format() {
            DataFileFormat::Avro => "avro",
            DataFileFormat::Orc => "orc",
            DataFileFormat::Parquet => "parquet",
            DataFileFormat::Puffin => "puffin",
        }),
    );
    out.insert("spec-id".into(), json!(entry.spec_id));
    out.insert("partition".into(), partition_values(entry, metadata)?);
    out.insert(
        "file-size-in-bytes".into(),
        json!(file.file_size_in_bytes()),
    );
    out.insert("record-count".into(), json!(file.record_count()));
    if let Some(key) = file.key_metadata() {
        out.insert("key-metadata".into(), json!(hex::encode_upper(key)));
    }
    if let Some(offsets) = file.split_offsets() {
        out.insert("split-offsets".into(), json!(offsets));
    }
    if let Some(order) = file.sort_order_id() {
        out.insert("sort-order-id".into(), json!(order));
    }
    if let Some(first) = file.first_row_id() {
        out.insert("first-row-id".into(), json!(first));
    }
    if let Some(ids) = file.equality_ids() {
        out.insert("equality-ids".into(), json!(ids));
    }
    if let Some(referenced) = file.referenced_data_file() {
        out.insert("referenced-data-file".into(), json!(referenced));
    }
    if let Some(offset) = file.content_offset() {
        out.insert("content-offset".into(), json!(offset));
    }
    if let Some(size) = file.content_size_in_bytes() {
        out.insert("content-size-in-bytes".into(), json!(size));
    }
    if !stats.is_empty() {
        let counts = |map: &HashMap<i32, u64>| {
            let keys: Vec<i32> = stats
                .iter()
                .copied()
                .filter(|id| map.contains_key(id))
                .collect();
            let values: Vec<u64> = keys.iter().map(|id| map[id]).collect();
            json!({ "keys": keys, "values": values })
        };
        out.insert("column-sizes".into(), counts(file.column_sizes()));
        out.insert("value-counts".into(), counts(file.value_counts()));
        out.insert("null-value-counts".into(), counts(file.null_value_counts()));
        out.insert("nan-value-counts".into(), counts(file.nan_value_counts()));
        for (key, bounds) in [
            ("lower-bounds", file.lower_bounds()),
            ("upper-bounds", file.upper_bounds()),
        ] {
            let mut keys = Vec::new();
            let mut values = Vec::new();
            for id in stats {
                if let Some(datum) = bounds.get(id)
                    && let Ok(bytes) = datum.to_bytes()
                {
                    keys.push(*id);
                    values.push(hex::encode_upper(bytes));
                }
            }
            out.insert(key.into(), json!({ "keys": keys, "values": values }));
        }
    }
    Ok(Value::Object(out))
}

/// A file's partition values as a JSON list in its spec's field order.
fn partition_values(entry: &DataFileEntry, metadata: &TableMetadata) -> Result<Value> {
    let partition = entry.file.partition();
    if partition.fields().is_empty() {
        return Ok(json!([]));
    }
    let spec = metadata
        .partition_spec_by_id(entry.spec_id)
        .ok_or_else(|| {
            DataFusionError::Execution(format!(
                "{} names partition spec {}, which the table lacks",
                entry.file.file_path(),
                entry.spec_id
            ))
        })?;
    // The spec's source columns may have been dropped or promoted since: the first schema
    // whose partition types take every value.
    let fields = partition.fields();
    for schema in std::iter::once(metadata.current_schema()).chain(metadata.schemas_iter()) {
        let Ok(partition_type) = spec.partition_type(schema) else {
            continue;
        };
        if partition_type.fields().len() != fields.len() {
            continue;
        }
        let values: Option<Vec<Value>> = fields
            .iter()
            .zip(partition_type.fields())
            .map(|(value, field)| match value {
                None => Some(Value::Null),
                Some(literal) => literal.clone().try_into_json(&field.field_type).ok(),
            })
            .collect();
        if let Some(values) = values {
            return Ok(Value::Array(values));
        }
    }
    Err(DataFusionError::Execution(format!(
        "{}: its partition values do not fit partition spec {}",
        entry.file.file_path(),
        entry.spec_id
    )))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, Schema};

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "city", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(3, "day", Type::Primitive(PrimitiveType::Date)).into(),
            ])
            .build()
            .unwrap()
    }

    fn parse(filter: Value) -> std::result::Result<Option<String>, String> {
        let schema = schema();
        let mut parser = FilterParser {
            schema: &schema,
            case_sensitive: true,
            nodes: 0,
        };
        parser
            .predicate(&filter, 0, true)
            .map(|p| p.map(|p| p.to_string()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_specs_expressions_old_and_new_forms_read_alike() {
        let old = parse(json!({"type": "and",
            "left": {"type": "gt-eq", "term": "id", "value": 5},
            "right": {"type": "in", "term": "city", "values": ["oslo", "lima"]}}));
        let new = parse(json!({"type": "and",
            "left": {"type": "gt-eq", "left": {"type": "reference", "name": "id"}, "right": 5},
            "right": {"type": "in", "child": "city", "values": {"type": "literals", "values": ["oslo", "lima"], "data-type": "string"}}}));
        assert_eq!(old, new);
        assert!(old.unwrap().unwrap().contains("id >= 5"));
        // `5 <= id` is `id >= 5`.
        let flipped = parse(
            json!({"type": "lt-eq", "left": 5, "right": {"type": "reference", "name": "id"}}),
        );
        assert_eq!(flipped.unwrap().unwrap(), "id >= 5");
        // In that form a bare string is a literal: "m" < city.
        let literal = parse(
            json!({"type": "lt", "left": "m", "right": {"type": "reference", "name": "city"}}),
        );
        assert_eq!(literal.unwrap().unwrap(), "city > \"m\"");
        assert_eq!(
            parse(json!({"type": "eq", "term": "day", "value": "2026-12-04"}))
                .unwrap()
                .unwrap(),
            "day = 2026-12-04"
        );
    }

    #[test]
    fn what_does_not_convert_is_left_out_only_where_that_keeps_more_files() {
        let transform = json!({"type": "eq", "term": {"type": "transform", "transform": "bucket[4]", "term": "id"}, "value": 1});
        let id = json!({"type": "eq", "term": "id", "value": 1});
        // Under `and`, the other side still prunes.
        let and = parse(json!({"type": "and", "left": transform, "right": id})).unwrap();
        assert_eq!(and.unwrap(), "id = 1");
        // Under `or`, nothing may prune.
        assert_eq!(
            parse(json!({"type": "or", "left": transform, "right": id})).unwrap(),
            None
        );
        // Under `not`, an `and` that lost a side would prune too much: nothing prunes.
        let not =
            parse(json!({"type": "not", "child": {"type": "and", "left": transform, "right": id}}));
        assert_eq!(not.unwrap(), None);
    }

    #[test]
    fn bad_filters_are_named() {
        let unknown = parse(json!({"type": "eq", "term": "nope", "value": 1})).unwrap_err();
        assert!(unknown.contains("no column \"nope\""), "{unknown}");
        let wrong = parse(json!({"type": "eq", "term": "id", "value": "five"})).unwrap_err();
        assert!(wrong.contains("is not a long value"), "{wrong}");
        let mut deep = json!(true);
        for _ in 0..100 {
            deep = json!({"type": "not", "child": deep});
        }
        assert!(parse(deep).unwrap_err().contains("nests deeper"));
        let many: Vec<i64> = (0..20_000).collect();
        let wide = parse(json!({"type": "in", "term": "id", "values": many})).unwrap_err();
        assert!(wide.contains("more than"), "{wide}");
        assert!(
            parse(json!("id = 1"))
                .unwrap_err()
                .contains("not an expression")
        );
    }
}
