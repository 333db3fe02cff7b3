//! Exemplars as rows of `otel.exemplars`: the series they were seen on (name, service,
//! labels), their value and time, and the trace and span they point to — Prometheus's
//! `trace_id` and `span_id` exemplar labels, by convention — with their other labels apart.
//!
//! Prometheus sends an exemplar in a series entry of its own (the same labels as the
//! samples', no samples), so exemplars are rows of their own table rather than values on a
//! sample's row.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;

use crate::otlp::layout;
use crate::otlp::values::{TextMap, push_attributes, text_map};

/// One exemplar as either version carries it, its labels resolved.
#[derive(Debug)]
pub struct Exemplar<'a> {
    pub labels: Vec<(&'a str, &'a str)>,
    pub value: f64,
    /// Milliseconds since the epoch; 0 when the sender gave none.
    pub timestamp: i64,
}

/// Rows of `otel.exemplars` being built.
pub struct ExemplarRows {
    time: TimestampMicrosecondBuilder,
    service: StringBuilder,
    name: StringBuilder,
    attributes: TextMap,
    value: Float64Builder,
    trace_id: StringBuilder,
    span_id: StringBuilder,
    exemplar_attributes: TextMap,
}

impl Default for ExemplarRows {
    fn default() -> Self {
        Self {
            time: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            service: StringBuilder::new(),
            name: StringBuilder::new(),
            attributes: text_map(),
            value: Float64Builder::new(),
            trace_id: StringBuilder::new(),
            span_id: StringBuilder::new(),
            exemplar_attributes: text_map(),
        }
    }
}

impl ExemplarRows {
    /// `exemplar`, seen on the series `name` of `service` with `attributes`; one without a
    /// time takes `now` (microseconds).
    pub fn push(
        &mut self,
        service: &str,
        name: &str,
        attributes: &[KeyValue],
        exemplar: &Exemplar,
        now: i64,
    ) {
        let time = if exemplar.timestamp == 0 {
            now
        } else {
            exemplar.timestamp.saturating_mul(1000)
        };
        let label = |wanted: &str| {
            exemplar
                .labels
                .iter()
                .find(|(n, _)| *n == wanted)
                .map(|(_, v)| *v)
                .filter(|v| !v.is_empty())
        };
        self.time.append_value(time);
        self.service.append_value(service);
        self.name.append_value(name);
        push_attributes(&mut self.attributes, attributes);
        self.value.append_value(exemplar.value);
        self.trace_id.append_option(label("trace_id"));
        self.span_id.append_option(label("span_id"));
        let others: Vec<KeyValue> = exemplar
            .labels
            .iter()
            .filter(|(n, _)| *n != "trace_id" && *n != "span_id")
            .map(|(n, v)| super::key_value(n, v))
            .collect();
        push_attributes(&mut self.exemplar_attributes, &others);
    }

    pub fn finish(mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.time.finish()),
            Arc::new(self.service.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.attributes.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.trace_id.finish()),
            Arc::new(self.span_id.finish()),
            Arc::new(self.exemplar_attributes.finish()),
        ];
        RecordBatch::try_new(layout::exemplars_schema(), columns)
            .expect("the builders follow the exemplars layout")
    }
}
