//! OTLP metrics (gauges, sums, histograms, exponential histograms, summaries) and Prometheus
//! samples as rows of `otel.metrics`: one row per data point, its kind in `metric_type`, the
//! columns of other kinds null.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder, RecordBatch,
    StringBuilder, StructBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::DataType;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::exemplars::ExemplarRows;
use super::layout;
use super::values::{TextMap, count, micros, push_attributes, service_name, text_map};
use super::{Converted, Rejected};
use crate::Refusal;

/// The rows of `otel.metrics`, column by column.
pub struct MetricRows {
    time: TimestampMicrosecondBuilder,
    service: StringBuilder,
    start_time: TimestampMicrosecondBuilder,
    name: StringBuilder,
    kind: StringBuilder,
    description: StringBuilder,
    unit: StringBuilder,
    attributes: TextMap,
    value: Float64Builder,
    is_monotonic: BooleanBuilder,
    temporality: StringBuilder,
    count: Int64Builder,
    sum: Float64Builder,
    min: Float64Builder,
    max: Float64Builder,
    bucket_counts: ListBuilder<Int64Builder>,
    explicit_bounds: ListBuilder<Float64Builder>,
    scale: Int32Builder,
    zero_count: Int64Builder,
    positive_offset: Int32Builder,
    positive_counts: ListBuilder<Int64Builder>,
    negative_offset: Int32Builder,
    negative_counts: ListBuilder<Int64Builder>,
    quantiles: ListBuilder<StructBuilder>,
    flags: Int64Builder,
    resource_attributes: TextMap,
    scope_name: StringBuilder,
    scope_version: StringBuilder,
    scope_attributes: TextMap,
}

/// What every data point of one metric shares.
pub struct Point<'a> {
    pub service: &'a str,
    pub name: &'a str,
    pub kind: &'static str,
    pub description: &'a str,
    pub unit: &'a str,
    pub resource: &'a [KeyValue],
    pub scope: Option<&'a InstrumentationScope>,
}

/// The values a data point has beyond its metric's.
#[derive(Default)]
pub struct Values<'a> {
    pub time: i64,
    pub start_time: Option<i64>,
    pub attributes: &'a [KeyValue],
    pub value: Option<f64>,
    pub is_monotonic: Option<bool>,
    pub temporality: Option<&'static str>,
    pub count: Option<i64>,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub bucket_counts: Option<Vec<i64>>,
    pub explicit_bounds: Option<Vec<f64>>,
    pub scale: Option<i32>,
    pub zero_count: Option<i64>,
    pub positive: Option<(i32, Vec<i64>)>,
    pub negative: Option<(i32, Vec<i64>)>,
    pub quantiles: Option<Vec<(f64, f64)>>,
    pub flags: i64,
}

fn timestamps() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("+00:00")
}

fn non_empty(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

impl Default for MetricRows {
    fn default() -> Self {
        let DataType::Struct(quantile_fields) = layout::quantile_type() else {
            unreachable!("quantiles are structs")
        };
        Self {
            time: timestamps(),
            service: StringBuilder::new(),
            start_time: timestamps(),
            name: StringBuilder::new(),
            kind: StringBuilder::new(),
            description: StringBuilder::new(),
            unit: StringBuilder::new(),
            attributes: text_map(),
            value: Float64Builder::new(),
            is_monotonic: BooleanBuilder::new(),
            temporality: StringBuilder::new(),
            count: Int64Builder::new(),
            sum: Float64Builder::new(),
            min: Float64Builder::new(),
            max: Float64Builder::new(),
            bucket_counts: ListBuilder::new(Int64Builder::new()),
            explicit_bounds: ListBuilder::new(Float64Builder::new()),
            scale: Int32Builder::new(),
            zero_count: Int64Builder::new(),
            positive_offset: Int32Builder::new(),
            positive_counts: ListBuilder::new(Int64Builder::new()),
            negative_offset: Int32Builder::new(),
            negative_counts: ListBuilder::new(Int64Builder::new()),
            quantiles: ListBuilder::new(StructBuilder::new(
                quantile_fields,
                vec![
                    Box::new(Float64Builder::new()),
                    Box::new(Float64Builder::new()),
                ],
            )),
            flags: Int64Builder::new(),
            resource_attributes: text_map(),
            scope_name: StringBuilder::new(),
            scope_version: StringBuilder::new(),
            scope_attributes: text_map(),
        }
    }
}

impl MetricRows {
    /// Appends one data point of the metric `point` describes.
    pub fn push(&mut self, point: &Point, values: Values) {
        self.time.append_value(values.time);
        self.service.append_value(point.service);
        self.start_time.append_option(values.start_time);
        self.name.append_value(point.name);
        self.kind.append_value(point.kind);
        self.description.append_option(non_empty(point.description));
        self.unit.append_option(non_empty(point.unit));
        push_attributes(&mut self.attributes, values.attributes);
        self.value.append_option(values.value);
        self.is_monotonic.append_option(values.is_monotonic);
        self.temporality.append_option(values.temporality);
        self.count.append_option(values.count);
        self.sum.append_option(values.sum);
        self.min.append_option(values.min);
        self.max.append_option(values.max);
        self.bucket_counts
            .append_option(values.bucket_counts.map(|c| c.into_iter().map(Some)));
        self.explicit_bounds
            .append_option(values.explicit_bounds.map(|b| b.into_iter().map(Some)));
        self.scale.append_option(values.scale);
        self.zero_count.append_option(values.zero_count);
        let (offset, counts) = values.positive.unzip();
        self.positive_offset.append_option(offset);
        self.positive_counts
            .append_option(counts.map(|c| c.into_iter().map(Some)));
        let (offset, counts) = values.negative.unzip();
        self.negative_offset.append_option(offset);
        self.negative_counts
            .append_option(counts.map(|c| c.into_iter().map(Some)));
        match values.quantiles {
            Some(quantiles) => {
                for (quantile, value) in quantiles {
                    let item = self.quantiles.values();
                    item.field_builder::<Float64Builder>(0)
                        .expect("quantile")
                        .append_value(quantile);
                    item.field_builder::<Float64Builder>(1)
                        .expect("value")
                        .append_value(value);
                    item.append(true);
                }
                self.quantiles.append(true);
            }
            None => self.quantiles.append(false),
        }
        self.flags.append_value(values.flags);
        push_attributes(&mut self.resource_attributes, point.resource);
        self.scope_name
            .append_option(point.scope.map(|s| s.name.as_str()).and_then(non_empty));
        self.scope_version
            .append_option(point.scope.map(|s| s.version.as_str()).and_then(non_empty));
        push_attributes(
            &mut self.scope_attributes,
            point.scope.map_or(&[][..], |s| &s.attributes),
        );
    }

    pub fn finish(mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.time.finish()),
            Arc::new(self.service.finish()),
            Arc::new(self.start_time.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.description.finish()),
            Arc::new(self.unit.finish()),
            Arc::new(self.attributes.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.is_monotonic.finish()),
            Arc::new(self.temporality.finish()),
            Arc::new(self.count.finish()),
            Arc::new(self.sum.finish()),
            Arc::new(self.min.finish()),
            Arc::new(self.max.finish()),
            Arc::new(self.bucket_counts.finish()),
            Arc::new(self.explicit_bounds.finish()),
            Arc::new(self.scale.finish()),
            Arc::new(self.zero_count.finish()),
            Arc::new(self.positive_offset.finish()),
            Arc::new(self.positive_counts.finish()),
            Arc::new(self.negative_offset.finish()),
            Arc::new(self.negative_counts.finish()),
            Arc::new(self.quantiles.finish()),
            Arc::new(self.flags.finish()),
            Arc::new(self.resource_attributes.finish()),
            Arc::new(self.scope_name.finish()),
            Arc::new(self.scope_version.finish()),
            Arc::new(self.scope_attributes.finish()),
        ];
        RecordBatch::try_new(layout::metrics_schema(), columns)
            .expect("the builders follow the metrics layout")
    }
}

fn temporality(value: i32) -> Option<&'static str> {
    match AggregationTemporality::try_from(value).ok()? {
        AggregationTemporality::Delta => Some("DELTA"),
        AggregationTemporality::Cumulative => Some("CUMULATIVE"),
        AggregationTemporality::Unspecified => None,
    }
}

fn counts(counts: &[u64]) -> Vec<i64> {
    counts.iter().map(|c| count(*c)).collect()
}

/// The request's data points as rows; a metric without data is refused.
pub fn convert(request: &ExportMetricsServiceRequest, now: i64) -> Converted {
    let mut rows = MetricRows::default();
    let mut exemplars = ExemplarRows::default();
    let mut rejected = Vec::new();
    for resource_metrics in &request.resource_metrics {
        let resource: Option<&Resource> = resource_metrics.resource.as_ref();
        let service = service_name(resource);
        for scope_metrics in &resource_metrics.scope_metrics {
            for metric in &scope_metrics.metrics {
                let point = |kind| Point {
                    service: &service,
                    name: &metric.name,
                    kind,
                    description: &metric.description,
                    unit: &metric.unit,
                    resource: resource.map_or(&[][..], |r| &r.attributes),
                    scope: scope_metrics.scope.as_ref(),
                };
                if metric.name.is_empty() {
                    rejected.push(Rejected::of(
                        &service,
                        "a metric needs a name".into(),
                        metric,
                    ));
                    continue;
                }
                let mut refuse = |e, p: &NumberDataPoint| {
                    rejected.push(Rejected::of(&service, e, p));
                };
                let pushed =
                    push_metric(&mut rows, &mut exemplars, metric, &point, now, &mut refuse);
                if let Err(error) = pushed {
                    rejected.push(Rejected::of(&service, error.to_string(), metric));
                }
            }
        }
    }
    Converted {
        batch: rows.finish(),
        rejected,
        exemplars: exemplars.finish(),
    }
}

/// OTLP's `DataPointFlags.FLAG_NO_RECORDED_VALUE`: a point that says it has no value (a
/// staleness marker), kept with a NULL value.
const NO_RECORDED_VALUE: u32 = 1;

/// Pushes `metric`'s points; an error refuses the whole metric, `refuse` one point of it (a
/// gauge's or sum's point with neither value nor the flag saying it has none).
fn push_metric<'a>(
    rows: &mut MetricRows,
    exemplars: &mut ExemplarRows,
    metric: &'a Metric,
    point: &dyn Fn(&'static str) -> Point<'a>,
    now: i64,
    refuse: &mut dyn FnMut(String, &NumberDataPoint),
) -> Result<(), Refusal> {
    let number = |value: &Option<number_data_point::Value>| match value {
        Some(number_data_point::Value::AsDouble(d)) => Some(*d),
        Some(number_data_point::Value::AsInt(i)) => Some(*i as f64),
        None => None,
    };
    let mut valued = |p: &NumberDataPoint| {
        let value = number(&p.value);
        if value.is_none() && p.flags & NO_RECORDED_VALUE == 0 {
            refuse(
                format!(
                    "a data point of metric {} has no value (asDouble or asInt)",
                    metric.name
                ),
                p,
            );
            return Err(());
        }
        Ok(value)
    };
    match metric.data.as_ref() {
        None => {
            return Err(Refusal::malformed(format!(
                "metric {} has no data",
                metric.name
            )));
        }
        Some(Data::Gauge(gauge)) => {
            let point = point("gauge");
            for p in &gauge.data_points {
                let Ok(value) = valued(p) else { continue };
                rows.push(
                    &point,
                    Values {
                        time: micros(p.time_unix_nano).unwrap_or(now),
                        start_time: micros(p.start_time_unix_nano),
                        attributes: &p.attributes,
                        value,
                        flags: i64::from(p.flags),
                        ..Values::default()
                    },
                );
                exemplars.push_otlp(point.service, point.name, &p.attributes, &p.exemplars, now);
            }
        }
        Some(Data::Sum(sum)) => {
            let point = point("sum");
            for p in &sum.data_points {
                let Ok(value) = valued(p) else { continue };
                rows.push(
                    &point,
                    Values {
                        time: micros(p.time_unix_nano).unwrap_or(now),
                        start_time: micros(p.start_time_unix_nano),
                        attributes: &p.attributes,
                        value,
                        is_monotonic: Some(sum.is_monotonic),
                        temporality: temporality(sum.aggregation_temporality),
                        flags: i64::from(p.flags),
                        ..Values::default()
                    },
                );
                exemplars.push_otlp(point.service, point.name, &p.attributes, &p.exemplars, now);
            }
        }
        Some(Data::Histogram(histogram)) => {
            let point = point("histogram");
            for p in &histogram.data_points {
                rows.push(
                    &point,
                    Values {
                        time: micros(p.time_unix_nano).unwrap_or(now),
                        start_time: micros(p.start_time_unix_nano),
                        attributes: &p.attributes,
                        temporality: temporality(histogram.aggregation_temporality),
                        count: Some(count(p.count)),
                        sum: p.sum,
                        min: p.min,
                        max: p.max,
                        bucket_counts: Some(counts(&p.bucket_counts)),
                        explicit_bounds: Some(p.explicit_bounds.clone()),
                        flags: i64::from(p.flags),
                        ..Values::default()
                    },
                );
                exemplars.push_otlp(point.service, point.name, &p.attributes, &p.exemplars, now);
            }
        }
        Some(Data::ExponentialHistogram(histogram)) => {
            let point = point("exponential_histogram");
            for p in &histogram.data_points {
                rows.push(
                    &point,
                    Values {
                        time: micros(p.time_unix_nano).unwrap_or(now),
                        start_time: micros(p.start_time_unix_nano),
                        attributes: &p.attributes,
                        temporality: temporality(histogram.aggregation_temporality),
                        count: Some(count(p.count)),
                        sum: p.sum,
                        min: p.min,
                        max: p.max,
                        scale: Some(p.scale),
                        zero_count: Some(count(p.zero_count)),
                        positive: p
                            .positive
                            .as_ref()
                            .map(|b| (b.offset, counts(&b.bucket_counts))),
                        negative: p
                            .negative
                            .as_ref()
                            .map(|b| (b.offset, counts(&b.bucket_counts))),
                        flags: i64::from(p.flags),
                        ..Values::default()
                    },
                );
                exemplars.push_otlp(point.service, point.name, &p.attributes, &p.exemplars, now);
            }
        }
        Some(Data::Summary(summary)) => {
            let point = point("summary");
            for p in &summary.data_points {
                rows.push(
                    &point,
                    Values {
                        time: micros(p.time_unix_nano).unwrap_or(now),
                        start_time: micros(p.start_time_unix_nano),
                        attributes: &p.attributes,
                        count: Some(count(p.count)),
                        sum: Some(p.sum),
                        quantiles: Some(
                            p.quantile_values
                                .iter()
                                .map(|q| (q.quantile, q.value))
                                .collect(),
                        ),
                        flags: i64::from(p.flags),
                        ..Values::default()
                    },
                );
            }
        }
    }
    Ok(())
}
