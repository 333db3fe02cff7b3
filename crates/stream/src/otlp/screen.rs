//! A tenant's per-record limits over a request's rows: records with more attributes than
//! `max-attributes`, or an attribute key or value longer than `max-attribute-bytes`, and
//! metric points of a new series past `max-active-series`, are refused one by one (into the
//! table's dead letters, `otel.<table>__dead_letters`, counted by OTLP's `partial_success`);
//! the rest of the request is taken. Rows are screened as the layouts hold them, so every door (OTLP over HTTP and
//! gRPC, remote write) is screened alike.

use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::LazyLock;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, MapArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::util::display::array_value_to_string;
use floe_catalog::tenants::{Limit, Tenant};

use super::{Converted, Rejected};

/// The map columns whose entries are attributes, and whether they count toward
/// `max-attributes` (a record's own do, an exemplar's too; its resource's and scope's only
/// have their lengths checked).
const MAPS: [(&str, bool); 4] = [
    ("attributes", true),
    ("exemplar_attributes", true),
    ("resource_attributes", false),
    ("scope_attributes", false),
];

/// Series hashes are keyed per process, so a client cannot craft attribute sets that collide
/// into one series to slip past `max-active-series`.
static SERIES_KEYS: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// `converted` with the records `tenant`'s limits refuse moved to its refused records;
/// `now` in microseconds. Its exemplars are held to the attribute limits too, and one that
/// breaks them is dropped (an exemplar is no record of its own: it is neither counted as
/// refused nor a dead letter); they take no place among the active series, which their
/// points' rows count.
pub fn screen(mut converted: Converted, tenant: &Tenant, now: i64) -> Converted {
    if let Some(exemplars) = converted.exemplars.take() {
        let screened = screen_rows(
            Converted {
                batch: exemplars,
                rejected: Vec::new(),
                exemplars: None,
            },
            tenant,
            now,
            false,
        );
        converted.exemplars = (screened.batch.num_rows() > 0).then_some(screened.batch);
    }
    screen_rows(converted, tenant, now, true)
}

/// `converted`'s rows screened; `series`: whether their series count against
/// `max-active-series`.
fn screen_rows(mut converted: Converted, tenant: &Tenant, now: i64, series: bool) -> Converted {
    let limits = tenant.limits();
    let batch = &converted.batch;
    if batch.num_rows() == 0 {
        return converted;
    }
    let mut refusals: Vec<Option<(Limit, String)>> = vec![None; batch.num_rows()];
    if limits.max_attributes.is_some() || limits.max_attribute_bytes.is_some() {
        for (column, counted) in MAPS {
            let Some(map) = batch.column_by_name(column).and_then(|c| c.as_map_opt()) else {
                continue;
            };
            for (row, refusal) in refusals.iter_mut().enumerate() {
                if refusal.is_none() {
                    *refusal = attribute_refusal(map, row, column, counted, &limits);
                }
            }
        }
    }
    if limits.max_active_series.is_some()
        && series
        && let Some(series) = series_of(batch)
    {
        let minute = (now / 60_000_000).clamp(0, u32::MAX as i64) as u32;
        // Points already refused take no place among the series.
        let candidates: Vec<usize> = (0..batch.num_rows())
            .filter(|row| refusals[*row].is_none())
            .collect();
        let hashes: Vec<u64> = candidates.iter().map(|row| series[*row]).collect();
        if let Some((admitted, limit)) = tenant.admit_series(&hashes, minute) {
            for (row, admitted) in candidates.into_iter().zip(admitted) {
                if !admitted {
                    refusals[row] = Some((
                        Limit::MaxActiveSeries,
                        format!(
                            "tenant {:?} is over its max-active-series limit of {limit}: a \
                             new series is refused until older ones go quiet",
                            tenant.name
                        ),
                    ));
                }
            }
        }
    }
    if refusals.iter().all(Option::is_none) {
        return converted;
    }
    let keep = BooleanArray::from(refusals.iter().map(Option::is_none).collect::<Vec<_>>());
    let service = batch.column_by_name("service_name");
    for (row, refusal) in refusals.iter().enumerate() {
        let Some((limit, reason)) = refusal else {
            continue;
        };
        tenant.count_refusal(*limit);
        converted.rejected.push(Rejected {
            service: service
                .and_then(|c| array_value_to_string(c, row).ok())
                .unwrap_or_default(),
            error: reason.clone(),
            record: Some(row_json(batch, row)),
        });
    }
    converted.batch = filter_record_batch(batch, &keep).expect("a mask of the batch's length");
    converted
}

/// Why row `row` of attribute map `column` breaks a limit, if it does.
fn attribute_refusal(
    map: &MapArray,
    row: usize,
    column: &str,
    counted: bool,
    limits: &floe_catalog::tenants::Limits,
) -> Option<(Limit, String)> {
    if map.is_null(row) {
        return None;
    }
    let offsets = map.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    if counted
        && let Some(max) = limits.max_attributes
        && (end - start) as u64 > max
    {
        return Some((
            Limit::MaxAttributes,
            format!(
                "the record has {} attributes, more than its tenant's max-attributes limit of {max}",
                end - start
            ),
        ));
    }
    let max = limits.max_attribute_bytes?;
    let keys = map.keys().as_string::<i32>();
    let values = map.values().as_string::<i32>();
    for entry in start..end {
        let key = keys.value(entry);
        let long = key.len() as u64 > max
            || (values.is_valid(entry) && values.value(entry).len() as u64 > max);
        if long {
            return Some((
                Limit::MaxAttributeBytes,
                format!(
                    "{column} {key:.64?} is longer than its tenant's max-attribute-bytes limit \
                     of {max}"
                ),
            ));
        }
    }
    None
}

/// One hash per row of a metrics batch naming its series: the metric, the service, its
/// attributes and its resource's (in any order); `None` for other signals.
fn series_of(batch: &RecordBatch) -> Option<Vec<u64>> {
    let name = batch
        .column_by_name("metric_name")?
        .as_string_opt::<i32>()?;
    let service = batch
        .column_by_name("service_name")?
        .as_string_opt::<i32>()?;
    let maps: Vec<&MapArray> = ["attributes", "resource_attributes"]
        .iter()
        .filter_map(|c| batch.column_by_name(c).and_then(|c| c.as_map_opt()))
        .collect();
    Some(
        (0..batch.num_rows())
            .map(|row| {
                let mut hasher = SERIES_KEYS.build_hasher();
                name.value(row).hash(&mut hasher);
                service.value(row).hash(&mut hasher);
                let mut pairs = 0u64;
                for (at, map) in maps.iter().enumerate() {
                    if map.is_null(row) {
                        continue;
                    }
                    let offsets = map.value_offsets();
                    let keys = map.keys().as_string::<i32>();
                    let values = map.values().as_string::<i32>();
                    for entry in offsets[row] as usize..offsets[row + 1] as usize {
                        let mut pair = SERIES_KEYS.build_hasher();
                        at.hash(&mut pair);
                        keys.value(entry).hash(&mut pair);
                        values
                            .is_valid(entry)
                            .then(|| values.value(entry))
                            .hash(&mut pair);
                        // Summed, so the order attributes come in does not matter.
                        pairs = pairs.wrapping_add(pair.finish());
                    }
                }
                pairs.hash(&mut hasher);
                hasher.finish()
            })
            .collect(),
    )
}

/// Row `row` as a JSON object of its columns' text, for its dead letter.
fn row_json(batch: &RecordBatch, row: usize) -> String {
    let object: serde_json::Map<String, serde_json::Value> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(_, column)| column.is_valid(row))
        .filter_map(|(field, column)| {
            let text = array_value_to_string(column, row).ok()?;
            Some((field.name().clone(), serde_json::Value::String(text)))
        })
        .collect();
    serde_json::Value::Object(object).to_string()
}

#[cfg(test)]
mod tests {
    use floe_catalog::tenants::{Limits, Tenants};

    use super::*;
    use crate::otlp::{Encoding, Signal, convert, decode};

    const METRICS: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},
      "scopeMetrics":[{"metrics":[{"name":"hits","gauge":{"dataPoints":[
        {"timeUnixNano":"1","asDouble":1,"attributes":[{"key":"path","value":{"stringValue":"/a"}},{"key":"code","value":{"stringValue":"200"}}]},
        {"timeUnixNano":"2","asDouble":2,"attributes":[{"key":"code","value":{"stringValue":"200"}},{"key":"path","value":{"stringValue":"/a"}}]},
        {"timeUnixNano":"3","asDouble":3,"attributes":[{"key":"path","value":{"stringValue":"/b"}}]},
        {"timeUnixNano":"4","asDouble":4,"attributes":[{"key":"path","value":{"stringValue":"/c"}},{"key":"x","value":{"stringValue":"a-very-long-value"}}]}
      ]}}]}]}]}"#;

    fn converted() -> Converted {
        let request = decode(Signal::Metrics, Encoding::Json, METRICS.as_bytes(), 1 << 20).unwrap();
        convert(&request, 0)
    }

    #[test]
    fn records_past_a_per_record_limit_are_refused_alone() {
        let all = converted();
        assert_eq!(all.batch.num_rows(), 4, "{:?}", all.rejected);
        let tenants = Tenants::default();
        tenants.apply(
            "t",
            Limits {
                max_active_series: Some(2),
                max_attribute_bytes: Some(12),
                ..Limits::default()
            },
            1,
        );
        let screened = screen(converted(), &tenants.get("t"), 0);
        // Points 1 and 2 are one series (attributes in another order); 3 is the second;
        // 4 has a value past twelve bytes (`service.name` has just twelve).
        assert_eq!(screened.batch.num_rows(), 3);
        assert_eq!(screened.rejected.len(), 1);
        assert!(screened.rejected[0].error.contains("max-attribute-bytes"));
        assert!(
            screened.rejected[0]
                .record
                .as_deref()
                .unwrap()
                .contains("/c")
        );

        let tenants = Tenants::default();
        tenants.apply(
            "t",
            Limits {
                max_active_series: Some(1),
                max_attributes: Some(1),
                ..Limits::default()
            },
            1,
        );
        let tenant = tenants.get("t");
        let screened = screen(converted(), &tenant, 0);
        // Points 1, 2 and 4 carry two attributes; 3 is the one series admitted.
        assert_eq!(screened.batch.num_rows(), 1);
        assert_eq!(screened.rejected.len(), 3);
        assert_eq!(tenant.counters.refused(Limit::MaxAttributes), 3);
        // Unlimited tenants keep everything.
        let screened = screen(converted(), &Tenants::default().get("u"), 0);
        assert_eq!(screened.batch.num_rows(), 4);
    }
}
