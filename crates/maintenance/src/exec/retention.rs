//! Data retention: rows whose time column is older than the cutoff are deleted. Files
//! entirely older are dropped without being read; files straddling the cutoff are rewritten
//! with the rows to keep (rows with no time are kept); newer files are untouched. One
//! `delete` (or `overwrite`, when files were rewritten) snapshot, committed like compaction's.

use std::collections::BTreeMap;
use std::time::Instant;

use datafusion::common::ScalarValue;
use datafusion::prelude::{col, lit};
use iceberg::TableIdent;
use iceberg::spec::{Datum, Operation, PrimitiveType, Type};

use super::compact::{CompactOptions, CompactReport, Rewritten, commit_groups, rewrite_group};
use super::state::read_snapshot;
use super::{Maintainer, MaintenanceError, Result};
use crate::compaction::RewriteGroup;

/// Deletes rows of `ident` whose `column` is older than `days` days.
pub async fn enforce_retention(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    column: &str,
    days: u32,
    options: &CompactOptions,
) -> Result<CompactReport> {
    let started = Instant::now();
    let target = maintainer.load(warehouse, ident).await?;
    let metadata = target.table.metadata();
    let schema = metadata.current_schema();
    let unsupported = |why: String| MaintenanceError::Unsupported(why);
    let field = schema.field_by_name(column).ok_or_else(|| {
        unsupported(format!(
            "retention-column {column} is not a column of table {ident}"
        ))
    })?;
    let now_us = floe_catalog::clock::now_micros();
    let cutoff_us = now_us - i64::from(days) * 86_400_000_000;
    let (cutoff, scalar) = match field.field_type.as_ref() {
        Type::Primitive(PrimitiveType::Timestamp) => (
            Datum::timestamp_micros(cutoff_us),
            ScalarValue::TimestampMicrosecond(Some(cutoff_us), None),
        ),
        Type::Primitive(PrimitiveType::Timestamptz) => (
            Datum::timestamptz_micros(cutoff_us),
            ScalarValue::TimestampMicrosecond(Some(cutoff_us), Some("+00:00".into())),
        ),
        Type::Primitive(PrimitiveType::TimestampNs) => (
            Datum::timestamp_nanos(cutoff_us * 1000),
            ScalarValue::TimestampNanosecond(Some(cutoff_us * 1000), None),
        ),
        Type::Primitive(PrimitiveType::TimestamptzNs) => (
            Datum::timestamptz_nanos(cutoff_us * 1000),
            ScalarValue::TimestampNanosecond(Some(cutoff_us * 1000), Some("+00:00".into())),
        ),
        Type::Primitive(PrimitiveType::Date) => {
            let day = cutoff_us.div_euclid(86_400_000_000) as i32;
            (Datum::date(day), ScalarValue::Date32(Some(day)))
        }
        other => {
            return Err(unsupported(format!(
                "retention-column {column} is {other}; it must be a date or timestamp"
            )));
        }
    };
    let mut report = CompactReport {
        dry_run: options.dry_run,
        ..Default::default()
    };
    let Some(base) = metadata.current_snapshot() else {
        return Ok(report);
    };
    let base_state = read_snapshot(&target.table, base).await?;
    let mut dropped: Vec<Rewritten> = Vec::new();
    let mut straddling: BTreeMap<String, RewriteGroup> = BTreeMap::new();
    for file in base_state.live_data() {
        report.data_files_before += 1;
        let data = file.entry.data_file();
        let lower = data.lower_bounds().get(&field.id);
        let upper = data.upper_bounds().get(&field.id);
        let all_null =
            data.null_value_counts().get(&field.id).copied() == Some(data.record_count());
        if all_null || lower.is_some_and(|l| *l >= cutoff) {
            continue;
        }
        let single = |outputs| RewriteGroup {
            spec_id: file.spec_id,
            partition: file.partition_key(),
            files: vec![file.path().to_string()],
            input_bytes: data.file_size_in_bytes(),
            expected_outputs: outputs,
        };
        let no_nulls = data.null_value_counts().get(&field.id).copied() == Some(0);
        if no_nulls && upper.is_some_and(|u| *u < cutoff) {
            dropped.push(Rewritten {
                group: single(0),
                inputs: [file.path().to_string()].into(),
                outputs: Vec::new(),
                rows: 0,
            });
        } else {
            let group = straddling
                .entry(file.partition_key())
                .or_insert_with(|| single(1));
            if group.files.first().map(String::as_str) != Some(file.path()) {
                group.files.push(file.path().to_string());
                group.input_bytes += data.file_size_in_bytes();
            }
        }
    }
    report.groups_planned = dropped.len() + straddling.len();
    if options.dry_run || report.groups_planned == 0 {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }
    let keep = col(datafusion::common::Column::from_name(column))
        .gt_eq(lit(scalar))
        .or(col(datafusion::common::Column::from_name(column)).is_null());
    let mut groups = dropped;
    let wrote_files = !straddling.is_empty();
    for group in straddling.into_values() {
        groups.push(
            rewrite_group(
                maintainer,
                &target,
                base.snapshot_id(),
                &group,
                Some(keep.clone()),
                options,
            )
            .await?,
        );
    }
    let operation = if wrote_files {
        Operation::Overwrite
    } else {
        Operation::Delete
    };
    commit_groups(
        maintainer,
        warehouse,
        ident,
        &base_state,
        groups,
        operation,
        options.commit_retries,
        &mut report,
    )
    .await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
