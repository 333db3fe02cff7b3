//! OTLP spans as rows of `otel.spans`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, Int64Builder, ListBuilder, RecordBatch, StringBuilder, StructBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Fields};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};

use super::layout;
use super::values::{TextMap, count, hex_id, micros, push_attributes, service_name, text_map};
use super::{Converted, Rejected};
use crate::Refusal;

fn timestamps() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("+00:00")
}

fn kind(kind: i32) -> &'static str {
    match SpanKind::try_from(kind).unwrap_or(SpanKind::Unspecified) {
        SpanKind::Unspecified => "UNSPECIFIED",
        SpanKind::Internal => "INTERNAL",
        SpanKind::Server => "SERVER",
        SpanKind::Client => "CLIENT",
        SpanKind::Producer => "PRODUCER",
        SpanKind::Consumer => "CONSUMER",
    }
}

fn status(code: i32) -> &'static str {
    match StatusCode::try_from(code).unwrap_or(StatusCode::Unset) {
        StatusCode::Unset => "UNSET",
        StatusCode::Ok => "OK",
        StatusCode::Error => "ERROR",
    }
}

/// Why a span cannot be a row, if it cannot: a span needs its trace and span ids.
fn refusal(span: &Span) -> Option<Refusal> {
    let ids = hex_id(&span.trace_id, 16, "trace_id").and_then(|trace| {
        let span_id = hex_id(&span.span_id, 8, "span_id")?;
        hex_id(&span.parent_span_id, 8, "parent_span_id")?;
        Ok((trace, span_id))
    });
    match ids {
        Err(error) => Some(error),
        Ok((None, _)) => Some(Refusal::malformed("a span needs a trace_id")),
        Ok((_, None)) => Some(Refusal::malformed("a span needs a span_id")),
        Ok(_) => None,
    }
}

/// A list of structs of `fields`, each built by the struct builder.
fn struct_list(fields: Fields, builders: Vec<Box<dyn ArrayBuilder>>) -> ListBuilder<StructBuilder> {
    ListBuilder::new(StructBuilder::new(fields, builders))
}

fn events_builder() -> ListBuilder<StructBuilder> {
    let DataType::Struct(fields) = layout::event_type() else {
        unreachable!("events are structs")
    };
    struct_list(
        fields,
        vec![
            Box::new(timestamps()),
            Box::new(StringBuilder::new()),
            Box::new(text_map()),
        ],
    )
}

fn links_builder() -> ListBuilder<StructBuilder> {
    let DataType::Struct(fields) = layout::link_type() else {
        unreachable!("links are structs")
    };
    struct_list(
        fields,
        vec![
            Box::new(StringBuilder::new()),
            Box::new(StringBuilder::new()),
            Box::new(StringBuilder::new()),
            Box::new(text_map()),
        ],
    )
}

/// The request's spans as rows; spans without valid ids are refused (each with its reason).
pub fn convert(request: &ExportTraceServiceRequest, now: i64) -> Converted {
    let mut time = timestamps();
    let mut service = StringBuilder::new();
    let mut end_time = timestamps();
    let mut duration = Int64Builder::new();
    let mut trace_id = StringBuilder::new();
    let mut span_id = StringBuilder::new();
    let mut parent_span_id = StringBuilder::new();
    let mut trace_state = StringBuilder::new();
    let mut name = StringBuilder::new();
    let mut kinds = StringBuilder::new();
    let mut status_code = StringBuilder::new();
    let mut status_message = StringBuilder::new();
    let mut flags = Int64Builder::new();
    let mut attributes = text_map();
    let mut events = events_builder();
    let mut links = links_builder();
    let mut resource_attributes = text_map();
    let mut scope_name = StringBuilder::new();
    let mut scope_version = StringBuilder::new();
    let mut scope_attributes = text_map();
    let mut dropped_attributes = Int64Builder::new();
    let mut dropped_events = Int64Builder::new();
    let mut dropped_links = Int64Builder::new();
    let mut rejected = Vec::new();

    for resource_spans in &request.resource_spans {
        let resource = resource_spans.resource.as_ref();
        let service_name = service_name(resource);
        for scope_spans in &resource_spans.scope_spans {
            let scope = scope_spans.scope.as_ref();
            for span in &scope_spans.spans {
                if let Some(error) = refusal(span) {
                    rejected.push(Rejected::of(&service_name, error.to_string(), span));
                    continue;
                }
                let start = micros(span.start_time_unix_nano).unwrap_or(now);
                time.append_value(start);
                service.append_value(&service_name);
                end_time.append_option(micros(span.end_time_unix_nano));
                duration.append_option(
                    (span.end_time_unix_nano >= span.start_time_unix_nano
                        && span.start_time_unix_nano != 0
                        && span.end_time_unix_nano != 0)
                        .then(|| count(span.end_time_unix_nano - span.start_time_unix_nano)),
                );
                trace_id.append_value(hex::encode(&span.trace_id));
                span_id.append_value(hex::encode(&span.span_id));
                parent_span_id.append_option(
                    (!span.parent_span_id.is_empty()).then(|| hex::encode(&span.parent_span_id)),
                );
                trace_state
                    .append_option((!span.trace_state.is_empty()).then_some(&span.trace_state));
                name.append_value(&span.name);
                kinds.append_value(kind(span.kind));
                let status = span.status.as_ref();
                status_code.append_value(status.map_or("UNSET", |s| self::status(s.code)));
                status_message
                    .append_option(status.map(|s| s.message.as_str()).filter(|m| !m.is_empty()));
                flags.append_value(i64::from(span.flags));
                push_attributes(&mut attributes, &span.attributes);
                for event in &span.events {
                    let item = events.values();
                    item.field_builder::<TimestampMicrosecondBuilder>(0)
                        .expect("event time")
                        .append_option(micros(event.time_unix_nano));
                    item.field_builder::<StringBuilder>(1)
                        .expect("event name")
                        .append_value(&event.name);
                    push_attributes(
                        item.field_builder::<TextMap>(2).expect("event attributes"),
                        &event.attributes,
                    );
                    item.append(true);
                }
                events.append(true);
                for link in &span.links {
                    let item = links.values();
                    item.field_builder::<StringBuilder>(0)
                        .expect("link trace")
                        .append_option(hex_id(&link.trace_id, 16, "").ok().flatten());
                    item.field_builder::<StringBuilder>(1)
                        .expect("link span")
                        .append_option(hex_id(&link.span_id, 8, "").ok().flatten());
                    item.field_builder::<StringBuilder>(2)
                        .expect("link state")
                        .append_option((!link.trace_state.is_empty()).then_some(&link.trace_state));
                    push_attributes(
                        item.field_builder::<TextMap>(3).expect("link attributes"),
                        &link.attributes,
                    );
                    item.append(true);
                }
                links.append(true);
                push_attributes(
                    &mut resource_attributes,
                    resource.map_or(&[][..], |r| &r.attributes),
                );
                scope_name.append_option(scope.map(|s| s.name.as_str()).filter(|n| !n.is_empty()));
                scope_version
                    .append_option(scope.map(|s| s.version.as_str()).filter(|v| !v.is_empty()));
                push_attributes(
                    &mut scope_attributes,
                    scope.map_or(&[][..], |s| &s.attributes),
                );
                dropped_attributes.append_value(i64::from(span.dropped_attributes_count));
                dropped_events.append_value(i64::from(span.dropped_events_count));
                dropped_links.append_value(i64::from(span.dropped_links_count));
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(time.finish()),
        Arc::new(service.finish()),
        Arc::new(end_time.finish()),
        Arc::new(duration.finish()),
        Arc::new(trace_id.finish()),
        Arc::new(span_id.finish()),
        Arc::new(parent_span_id.finish()),
        Arc::new(trace_state.finish()),
        Arc::new(name.finish()),
        Arc::new(kinds.finish()),
        Arc::new(status_code.finish()),
        Arc::new(status_message.finish()),
        Arc::new(flags.finish()),
        Arc::new(attributes.finish()),
        Arc::new(events.finish()),
        Arc::new(links.finish()),
        Arc::new(resource_attributes.finish()),
        Arc::new(scope_name.finish()),
        Arc::new(scope_version.finish()),
        Arc::new(scope_attributes.finish()),
        Arc::new(dropped_attributes.finish()),
        Arc::new(dropped_events.finish()),
        Arc::new(dropped_links.finish()),
    ];
    let batch = RecordBatch::try_new(layout::spans_schema(), columns)
        .expect("the builders follow the spans layout");
    Converted {
        batch,
        rejected,
        exemplars: None,
    }
}
