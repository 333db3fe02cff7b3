//! The tables OpenTelemetry data lands in (docs/observability.md): `otel.logs`, `otel.spans`,
//! `otel.metrics` and `otel.exemplars` of the tenant's warehouse, created on first write (each
//! table's refused records in its dead-letter table, `otel.<table>__dead_letters`:
//! [`crate::core::dead_letter`]).
//!
//! Resource, scope and record attributes are maps of text; the keys dashboards filter on are
//! columns of their own (`service_name`, `severity_number`, `trace_id`, `metric_name`, …).
//! Every table is partitioned by day and service, written in (service, time) order so a
//! service's rows of a time range sit together — `otel.metrics` in (service, metric name,
//! time) order, so that a metric's rows sit together and a query of one metric (every PromQL
//! selector, most dashboard panels) skips the row groups and pages of the others —
//! zstd-compressed, with Parquet bloom filters on the id columns (a trace id looked up skips
//! every row group that cannot hold it).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};
use iceberg::spec::Transform;

use crate::core::target::Layout;

/// The namespace every OpenTelemetry table lives in, in the tenant's warehouse.
pub const NAMESPACE: &str = "otel";
pub const LOGS: &str = "logs";
pub const SPANS: &str = "spans";
pub const METRICS: &str = "metrics";
pub const EXEMPLARS: &str = "exemplars";

pub fn time() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

/// A map of text to text, as [`super::values::text_map`] builds it.
pub fn text_map() -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ])),
            false,
        )),
        false,
    )
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

/// The columns every signal's table starts with.
fn common(time_name: &str) -> Vec<Field> {
    vec![
        Field::new(time_name, time(), false),
        Field::new("service_name", DataType::Utf8, false),
    ]
}

/// The columns describing where a record came from.
fn origin() -> Vec<Field> {
    vec![
        Field::new("resource_attributes", text_map(), true),
        text("scope_name"),
        text("scope_version"),
        Field::new("scope_attributes", text_map(), true),
    ]
}

pub fn logs_schema() -> Arc<Schema> {
    let mut fields = common("time");
    fields.extend([
        Field::new("observed_time", time(), true),
        Field::new("severity_number", DataType::Int32, true),
        text("severity_text"),
        text("body"),
        text("trace_id"),
        text("span_id"),
        Field::new("flags", DataType::Int64, true),
        text("event_name"),
        Field::new("attributes", text_map(), true),
    ]);
    fields.extend(origin());
    fields.push(Field::new(
        "dropped_attributes_count",
        DataType::Int64,
        true,
    ));
    Arc::new(Schema::new(fields))
}

pub fn event_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("time", time(), true),
        text("name"),
        Field::new("attributes", text_map(), true),
    ]))
}

pub fn link_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        text("trace_id"),
        text("span_id"),
        text("trace_state"),
        Field::new("attributes", text_map(), true),
    ]))
}

pub fn spans_schema() -> Arc<Schema> {
    let mut fields = common("time");
    fields.extend([
        Field::new("end_time", time(), true),
        Field::new("duration_ns", DataType::Int64, true),
        Field::new("trace_id", DataType::Utf8, false),
        Field::new("span_id", DataType::Utf8, false),
        text("parent_span_id"),
        text("trace_state"),
        text("name"),
        text("kind"),
        text("status_code"),
        text("status_message"),
        Field::new("flags", DataType::Int64, true),
        Field::new("attributes", text_map(), true),
        Field::new("events", list_of(event_type()), true),
        Field::new("links", list_of(link_type()), true),
    ]);
    fields.extend(origin());
    fields.extend([
        Field::new("dropped_attributes_count", DataType::Int64, true),
        Field::new("dropped_events_count", DataType::Int64, true),
        Field::new("dropped_links_count", DataType::Int64, true),
    ]);
    Arc::new(Schema::new(fields))
}

pub fn quantile_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("quantile", DataType::Float64, true),
        Field::new("value", DataType::Float64, true),
    ]))
}

pub fn metrics_schema() -> Arc<Schema> {
    let mut fields = common("time");
    fields.extend([
        Field::new("start_time", time(), true),
        Field::new("metric_name", DataType::Utf8, false),
        Field::new("metric_type", DataType::Utf8, false),
        text("description"),
        text("unit"),
        Field::new("attributes", text_map(), true),
        // Gauges and sums.
        Field::new("value", DataType::Float64, true),
        Field::new("is_monotonic", DataType::Boolean, true),
        text("aggregation_temporality"),
        // Histograms, exponential histograms and summaries.
        Field::new("count", DataType::Int64, true),
        Field::new("sum", DataType::Float64, true),
        Field::new("min", DataType::Float64, true),
        Field::new("max", DataType::Float64, true),
        Field::new("bucket_counts", list_of(DataType::Int64), true),
        Field::new("explicit_bounds", list_of(DataType::Float64), true),
        Field::new("scale", DataType::Int32, true),
        Field::new("zero_count", DataType::Int64, true),
        Field::new("positive_offset", DataType::Int32, true),
        Field::new("positive_bucket_counts", list_of(DataType::Int64), true),
        Field::new("negative_offset", DataType::Int32, true),
        Field::new("negative_bucket_counts", list_of(DataType::Int64), true),
        Field::new("quantiles", list_of(quantile_type()), true),
        Field::new("flags", DataType::Int64, true),
    ]);
    fields.extend(origin());
    Arc::new(Schema::new(fields))
}

/// Exemplars (from Prometheus remote write): a sample seen on a series, with the trace it
/// was seen in.
pub fn exemplars_schema() -> Arc<Schema> {
    let mut fields = common("time");
    fields.extend([
        Field::new("metric_name", DataType::Utf8, false),
        Field::new("attributes", text_map(), true),
        Field::new("value", DataType::Float64, true),
        text("trace_id"),
        text("span_id"),
        Field::new("exemplar_attributes", text_map(), true),
    ]);
    Arc::new(Schema::new(fields))
}

/// Zstd, and bloom filters on `ids`.
fn properties(ids: &[&str]) -> HashMap<String, String> {
    let mut properties = HashMap::from([(
        "write.parquet.compression-codec".to_string(),
        "zstd".to_string(),
    )]);
    for id in ids {
        properties.insert(
            format!("write.parquet.bloom-filter-enabled.column.{id}"),
            "true".to_string(),
        );
    }
    properties
}

fn by_day_and_service(schema: Arc<Schema>, time: &str, ids: &[&str]) -> Layout {
    Layout {
        schema,
        partition: vec![
            (time.to_string(), Transform::Day),
            ("service_name".to_string(), Transform::Identity),
        ],
        order: vec![
            "service_name asc nulls last".to_string(),
            format!("{time} asc nulls last"),
        ],
        properties: properties(ids),
        key: Vec::new(),
    }
}

/// The layout of the table `name` of [`NAMESPACE`].
pub fn layout(name: &str) -> Layout {
    match name {
        LOGS => {
            let mut layout = by_day_and_service(logs_schema(), "time", &["trace_id", "span_id"]);
            // Log search by word or id reads only the files whose token index may hold it.
            layout.properties.insert(
                floe_sql::token_index::COLUMNS_PROPERTY.to_string(),
                "body".to_string(),
            );
            layout
        }
        SPANS => by_day_and_service(spans_schema(), "time", &["trace_id", "span_id"]),
        METRICS => {
            let mut layout = by_day_and_service(metrics_schema(), "time", &["metric_name"]);
            layout
                .order
                .insert(1, "metric_name asc nulls last".to_string());
            // Pages of 8,192 rows: a metric's rows are skipped page by page, and a page
            // holding the end of one metric and the start of another is read for both.
            layout.properties.insert(
                "write.parquet.page-row-limit".to_string(),
                "8192".to_string(),
            );
            layout
        }
        // EXEMPLARS: the names are this module's constants.
        _ => by_day_and_service(exemplars_schema(), "time", &["trace_id"]),
    }
}
