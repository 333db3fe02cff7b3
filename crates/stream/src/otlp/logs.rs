//! OTLP log records as rows of `otel.logs`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;

use super::layout;
use super::values::{
    hex_id, hex_in, micros, prepare, push_prepared, service_name, text_map, text_of,
};
use super::{Converted, Rejected};
use crate::Refusal;

fn timestamps() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("+00:00")
}

/// Why a record cannot be a row, if it cannot.
fn refusal(record: &LogRecord) -> Option<Refusal> {
    hex_id(&record.trace_id, 16, "trace_id")
        .and(hex_id(&record.span_id, 8, "span_id"))
        .err()
}

/// The request's log records as rows; records with ids of the wrong length are refused
/// (each with its reason). A record's time is its own, else when it was observed, else
/// `now` (microseconds).
pub fn convert(request: &ExportLogsServiceRequest, now: i64) -> Converted {
    let mut time = timestamps();
    let mut observed = timestamps();
    let mut service = StringBuilder::new();
    let mut severity_number = Int32Builder::new();
    let mut severity_text = StringBuilder::new();
    let mut body = StringBuilder::new();
    let mut trace_id = StringBuilder::new();
    let mut span_id = StringBuilder::new();
    let mut flags = Int64Builder::new();
    let mut event_name = StringBuilder::new();
    let mut attributes = text_map();
    let mut resource_attributes = text_map();
    let mut scope_name = StringBuilder::new();
    let mut scope_version = StringBuilder::new();
    let mut scope_attributes = text_map();
    let mut dropped = Int64Builder::new();
    let mut rejected = Vec::new();
    let mut hex = [0u8; 64];

    for resource_logs in &request.resource_logs {
        let resource = resource_logs.resource.as_ref();
        let service_name = service_name(resource);
        let resource_prepared = prepare(resource.map_or(&[][..], |r| &r.attributes));
        for scope_logs in &resource_logs.scope_logs {
            let scope = scope_logs.scope.as_ref();
            let scope_prepared = prepare(scope.map_or(&[][..], |s| &s.attributes));
            for record in &scope_logs.log_records {
                if let Some(error) = refusal(record) {
                    rejected.push(Rejected::of(&service_name, error.to_string(), record));
                    continue;
                }
                let at = micros(record.time_unix_nano)
                    .or(micros(record.observed_time_unix_nano))
                    .unwrap_or(now);
                time.append_value(at);
                observed.append_option(micros(record.observed_time_unix_nano));
                service.append_value(&service_name);
                severity_number.append_value(record.severity_number);
                severity_text.append_option(
                    (!record.severity_text.is_empty()).then_some(&record.severity_text),
                );
                body.append_option(record.body.as_ref().and_then(text_of));
                trace_id.append_option(hex_in(&record.trace_id, &mut hex));
                span_id.append_option(hex_in(&record.span_id, &mut hex));
                flags.append_value(i64::from(record.flags));
                event_name
                    .append_option((!record.event_name.is_empty()).then_some(&record.event_name));
                push_prepared(&mut attributes, &prepare(&record.attributes));
                push_prepared(&mut resource_attributes, &resource_prepared);
                scope_name.append_option(scope.map(|s| s.name.as_str()).filter(|n| !n.is_empty()));
                scope_version
                    .append_option(scope.map(|s| s.version.as_str()).filter(|v| !v.is_empty()));
                push_prepared(&mut scope_attributes, &scope_prepared);
                dropped.append_value(i64::from(record.dropped_attributes_count));
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(time.finish()),
        Arc::new(service.finish()),
        Arc::new(observed.finish()),
        Arc::new(severity_number.finish()),
        Arc::new(severity_text.finish()),
        Arc::new(body.finish()),
        Arc::new(trace_id.finish()),
        Arc::new(span_id.finish()),
        Arc::new(flags.finish()),
        Arc::new(event_name.finish()),
        Arc::new(attributes.finish()),
        Arc::new(resource_attributes.finish()),
        Arc::new(scope_name.finish()),
        Arc::new(scope_version.finish()),
        Arc::new(scope_attributes.finish()),
        Arc::new(dropped.finish()),
    ];
    let batch = RecordBatch::try_new(layout::logs_schema(), columns)
        .expect("the builders follow the logs layout");
    Converted {
        batch,
        rejected,
        exemplars: None,
    }
}
