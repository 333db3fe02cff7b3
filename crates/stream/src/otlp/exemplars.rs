//! Exemplars as rows of `otel.exemplars`: the series they were seen on (name, service,
//! attributes), their value and time, and the trace and span they point to, with their other
//! attributes apart — from OTLP's data points (their `exemplars`) and from Prometheus remote
//! write (whose `trace_id` and `span_id` exemplar labels name them, by convention).
//!
//! Prometheus sends an exemplar in a series entry of its own (the same labels as the
//! samples', no samples), so exemplars are rows of their own table rather than values on a
//! sample's row; OTLP's follow the same form.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, Float64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{Exemplar, exemplar};

use super::layout;
use super::values::{TextMap, hex_in, micros, push_attributes, text_map};

/// The most exemplars kept of one OTLP data point (the SDKs keep one per histogram bucket,
/// 16 by default, and one for a sum or gauge); the rest are dropped. Each copies its point's
/// attributes, so a point of many tiny exemplars must not multiply its attributes without
/// bound.
pub const MOST_PER_POINT: usize = 16;

/// One exemplar, as either source carries it.
pub struct Seen<'a> {
    /// Microseconds since the epoch.
    pub time: i64,
    pub value: Option<f64>,
    pub trace_id: Option<&'a str>,
    pub span_id: Option<&'a str>,
    /// Its attributes beyond the series' (OTLP's `filtered_attributes`).
    pub attributes: &'a [KeyValue],
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
    /// `seen`, an exemplar of the series `name` of `service` with `attributes`.
    pub fn push(&mut self, service: &str, name: &str, attributes: &[KeyValue], seen: Seen) {
        self.time.append_value(seen.time);
        self.service.append_value(service);
        self.name.append_value(name);
        push_attributes(&mut self.attributes, attributes);
        self.value.append_option(seen.value);
        self.trace_id.append_option(seen.trace_id);
        self.span_id.append_option(seen.span_id);
        push_attributes(&mut self.exemplar_attributes, seen.attributes);
    }

    /// OTLP's `exemplars` of a data point of metric `name` of `service` with `attributes`,
    /// the first [`MOST_PER_POINT`] of them; one without a time takes `now` (microseconds).
    pub fn push_otlp(
        &mut self,
        service: &str,
        name: &str,
        attributes: &[KeyValue],
        exemplars: &[Exemplar],
        now: i64,
    ) {
        for e in exemplars.iter().take(MOST_PER_POINT) {
            let (mut trace, mut span) = ([0u8; 64], [0u8; 64]);
            let value = match e.value {
                Some(exemplar::Value::AsDouble(d)) => Some(d),
                Some(exemplar::Value::AsInt(i)) => Some(i as f64),
                None => None,
            };
            let seen = Seen {
                time: micros(e.time_unix_nano).unwrap_or(now),
                value,
                trace_id: (e.trace_id.len() == 16)
                    .then(|| hex_in(&e.trace_id, &mut trace))
                    .flatten(),
                span_id: (e.span_id.len() == 8)
                    .then(|| hex_in(&e.span_id, &mut span))
                    .flatten(),
                attributes: &e.filtered_attributes,
            };
            self.push(service, name, attributes, seen);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.time.len() == 0
    }

    /// The rows, or none when there are none.
    pub fn finish(mut self) -> Option<RecordBatch> {
        if self.is_empty() {
            return None;
        }
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
        Some(
            RecordBatch::try_new(layout::exemplars_schema(), columns)
                .expect("the builders follow the exemplars layout"),
        )
    }
}
