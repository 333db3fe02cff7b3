//! Pure commit planning: check requirements against a base and apply updates to it.
//!
//! Nothing here does IO, so the whole protocol can be tested on in-memory metadata. The
//! service reads the base, calls these functions, writes the result and swaps it in.

use std::collections::HashMap;

use iceberg::spec::{
    FormatVersion, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
    ViewMetadata, ViewMetadataBuilder,
};
use iceberg::{ErrorKind, TableRequirement, TableUpdate, ViewUpdate};

use crate::{CatalogError, Result};

/// Requirements of a view commit (the spec defines one).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type")]
pub enum ViewRequirement {
    #[serde(rename = "assert-view-uuid")]
    AssertViewUuid { uuid: uuid::Uuid },
}

/// The result of applying a commit: new metadata, or nothing when the updates changed nothing.
#[derive(Debug)]
pub enum Applied<T> {
    Unchanged,
    Changed(T),
}

/// A snapshot summary's `added-*`/`deleted-*` counts with the table's running `total-*`
/// recounted from the parent snapshot's summary (totals the parent lacks are left out); a
/// table's first snapshot (no parent) counts them from zero.
pub fn summary_with_totals(
    mut properties: std::collections::HashMap<String, String>,
    parent: Option<&iceberg::spec::Summary>,
) -> std::collections::HashMap<String, String> {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    let number = |map: &std::collections::HashMap<String, String>, key: &str| {
        map.get(key).and_then(|v| v.parse::<i64>().ok())
    };
    for (total, added, removed) in TOTALS {
        let before = match parent {
            Some(parent) => number(&parent.additional_properties, total),
            None => Some(0),
        };
        match before {
            Some(before) => {
                let after = before + number(&properties, added).unwrap_or(0)
                    - number(&properties, removed).unwrap_or(0);
                properties.insert(total.to_string(), after.max(0).to_string());
            }
            None => {
                properties.remove(total);
            }
        }
    }
    properties
}

/// Table property: delete metadata files that drop out of the metadata log after a commit.
pub const DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";

/// New table metadata and the metadata files that fell out of its log.
#[derive(Debug)]
pub struct NewTableMetadata {
    pub metadata: TableMetadata,
    pub expired_metadata_files: Vec<String>,
}

/// Maps an iceberg error raised while checking or applying updates to a catalog error.
pub(crate) fn from_iceberg(e: iceberg::Error) -> CatalogError {
    match e.kind() {
        ErrorKind::CatalogCommitConflicts => CatalogError::CommitFailed(e.message().to_string()),
        ErrorKind::TableNotFound => CatalogError::no_such_table(e.message()),
        ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported | ErrorKind::PreconditionFailed => {
            CatalogError::InvalidArgument(e.message().to_string())
        }
        _ => CatalogError::InvalidArgument(e.to_string()),
    }
}

/// Checks `requirements` against `base` (`None` when the table does not exist yet). The
/// messages follow the wording Iceberg's own clients and tests expect.
pub fn check_table_requirements(
    base: Option<&TableMetadata>,
    requirements: &[TableRequirement],
) -> Result<()> {
    for requirement in requirements {
        if let Some(message) = requirement_failure(base, requirement) {
            return Err(CatalogError::CommitFailed(format!(
                "Requirement failed: {message}"
            )));
        }
    }
    Ok(())
}

fn requirement_failure(
    base: Option<&TableMetadata>,
    requirement: &TableRequirement,
) -> Option<String> {
    let Some(base) = base else {
        return match requirement {
            TableRequirement::NotExist => None,
            _ => Some("table does not exist".to_string()),
        };
    };
    let changed = |what: &str, expected: i64, found: i64| {
        (expected != found).then(|| format!("{what} changed: expected id {expected} != {found}"))
    };
    match requirement {
        TableRequirement::NotExist => Some("table already exists".to_string()),
        TableRequirement::UuidMatch { uuid } => (*uuid != base.uuid())
            .then(|| format!("UUID does not match: expected {} != {uuid}", base.uuid())),
        TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id } => {
            let current = base.snapshot_for_ref(r#ref).map(|s| s.snapshot_id());
            match (snapshot_id, current) {
                (None, None) => None,
                (None, Some(_)) => Some(format!(
                    "{} {ref} was created concurrently",
                    ref_kind(base, r#ref)
                )),
                (Some(expected), None) => Some(format!(
                    "branch or tag {ref} is missing, expected {expected}"
                )),
                (Some(expected), Some(found)) => (*expected != found).then(|| {
                    format!(
                        "{} {ref} has changed: expected id {expected} != {found}",
                        ref_kind(base, r#ref)
                    )
                }),
            }
        }
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id,
        } => changed(
            "last assigned field id",
            *last_assigned_field_id as i64,
            base.last_column_id() as i64,
        ),
        TableRequirement::CurrentSchemaIdMatch { current_schema_id } => changed(
            "current schema",
            *current_schema_id as i64,
            base.current_schema_id() as i64,
        ),
        TableRequirement::LastAssignedPartitionIdMatch {
            last_assigned_partition_id,
        } => changed(
            "last assigned partition id",
            *last_assigned_partition_id as i64,
            base.last_partition_id() as i64,
        ),
        TableRequirement::DefaultSpecIdMatch { default_spec_id } => changed(
            "default partition spec",
            *default_spec_id as i64,
            base.default_partition_spec_id() as i64,
        ),
        TableRequirement::DefaultSortOrderIdMatch {
            default_sort_order_id,
        } => changed(
            "default sort order",
            *default_sort_order_id,
            base.default_sort_order_id(),
        ),
    }
}

/// `branch` or `tag` (only on the failure path).
fn ref_kind(base: &TableMetadata, name: &str) -> &'static str {
    let refs = crate::metadata::table_refs(base).unwrap_or_default();
    match refs.get(name).map(|r| &r.retention) {
        Some(iceberg::spec::SnapshotRetention::Tag { .. }) => "tag",
        _ => "branch",
    }
}

/// Applies `updates` to an existing table's metadata.
pub fn apply_table_updates(
    base: &TableMetadata,
    base_location: &str,
    updates: Vec<TableUpdate>,
) -> Result<Applied<NewTableMetadata>> {
    if updates.is_empty() {
        return Ok(Applied::Unchanged);
    }
    let mut builder = base.clone().into_builder(Some(base_location.to_string()));
    for update in updates {
        builder = update.apply(builder).map_err(from_iceberg)?;
    }
    let result = builder.build().map_err(from_iceberg)?;
    if result.changes.is_empty() {
        return Ok(Applied::Unchanged);
    }
    let delete_expired = result
        .metadata
        .properties()
        .get(DELETE_AFTER_COMMIT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let expired_metadata_files = if delete_expired {
        result
            .expired_metadata_logs
            .into_iter()
            .map(|l| l.metadata_file)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Applied::Changed(NewTableMetadata {
        metadata: result.metadata,
        expired_metadata_files,
    }))
}

/// Builds the first metadata of a table created by a commit (`assert-create`), from the
/// create updates a client sends after a staged create.
pub fn create_table_from_updates(updates: Vec<TableUpdate>) -> Result<TableMetadata> {
    let mut schema = None;
    let mut spec: Option<UnboundPartitionSpec> = None;
    let mut sort_order: Option<SortOrder> = None;
    let mut location = None;
    let mut properties = HashMap::new();
    let mut format_version = FormatVersion::V2;
    let mut uuid = None;
    let mut rest = Vec::new();
    for update in updates {
        match update {
            TableUpdate::AddSchema { schema: s } if schema.is_none() => schema = Some(s),
            TableUpdate::AddSpec { spec: s } if spec.is_none() => spec = Some(s),
            TableUpdate::AddSortOrder { sort_order: s } if sort_order.is_none() => {
                sort_order = Some(s)
            }
            TableUpdate::SetCurrentSchema { .. }
            | TableUpdate::SetDefaultSpec { .. }
            | TableUpdate::SetDefaultSortOrder { .. }
                if rest.is_empty() => {}
            TableUpdate::SetLocation { location: l } => location = Some(l),
            TableUpdate::SetProperties { updates } => properties.extend(updates),
            TableUpdate::UpgradeFormatVersion { format_version: v } => format_version = v,
            TableUpdate::AssignUuid { uuid: u } => uuid = Some(u),
            other => rest.push(other),
        }
    }
    let schema = schema.ok_or_else(|| {
        CatalogError::bad_request("a create commit must contain an add-schema update")
    })?;
    let location = location.ok_or_else(|| {
        CatalogError::bad_request("a create commit must contain a set-location update")
    })?;
    let mut builder = TableMetadataBuilder::new(
        schema,
        spec.unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
        sort_order.unwrap_or_else(SortOrder::unsorted_order),
        location,
        format_version,
        properties,
    )
    .map_err(from_iceberg)?;
    if let Some(uuid) = uuid {
        builder = builder.assign_uuid(uuid);
    }
    for update in rest {
        builder = update.apply(builder).map_err(from_iceberg)?;
    }
    Ok(builder.build().map_err(from_iceberg)?.metadata)
}

pub fn check_view_requirements(
    base: &ViewMetadata,
    requirements: &[ViewRequirement],
) -> Result<()> {
    for requirement in requirements {
        match requirement {
            ViewRequirement::AssertViewUuid { uuid } if *uuid != base.uuid() => {
                return Err(CatalogError::CommitFailed(format!(
                    "Requirement failed: view UUID does not match: expected {} != {uuid}",
                    base.uuid()
                )));
            }
            ViewRequirement::AssertViewUuid { .. } => {}
        }
    }
    Ok(())
}

/// Applies view updates (replace view).
pub fn apply_view_updates(base: &ViewMetadata, updates: Vec<ViewUpdate>) -> Result<ViewMetadata> {
    let mut builder = base.clone().into_builder();
    for update in updates {
        builder = apply_view_update(builder, update)?;
    }
    Ok(builder.build().map_err(from_iceberg)?.metadata)
}

fn apply_view_update(
    builder: ViewMetadataBuilder,
    update: ViewUpdate,
) -> Result<ViewMetadataBuilder> {
    let builder = match update {
        ViewUpdate::AssignUuid { uuid } => builder.assign_uuid(uuid),
        ViewUpdate::UpgradeFormatVersion { format_version } => builder
            .upgrade_format_version(format_version)
            .map_err(from_iceberg)?,
        ViewUpdate::AddSchema { schema, .. } => builder.add_schema(schema),
        ViewUpdate::SetLocation { location } => builder.set_location(location),
        ViewUpdate::SetProperties { updates } => {
            builder.set_properties(updates).map_err(from_iceberg)?
        }
        ViewUpdate::RemoveProperties { removals } => builder.remove_properties(&removals),
        ViewUpdate::AddViewVersion { view_version } => {
            builder.add_version(view_version).map_err(from_iceberg)?
        }
        ViewUpdate::SetCurrentViewVersion { view_version_id } => builder
            .set_current_version_id(view_version_id)
            .map_err(from_iceberg)?,
    };
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap()
    }

    fn table() -> TableMetadata {
        TableMetadataBuilder::new(
            schema(),
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///wh/t".to_string(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    #[test]
    fn failed_requirement_is_a_commit_conflict() {
        let base = table();
        let err = check_table_requirements(
            Some(&base),
            &[TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: 7,
            }],
        )
        .unwrap_err();
        assert!(matches!(err, CatalogError::CommitFailed(_)), "{err:?}");
        let err =
            check_table_requirements(None, &[TableRequirement::UuidMatch { uuid: base.uuid() }])
                .unwrap_err();
        assert!(matches!(err, CatalogError::CommitFailed(_)), "{err:?}");
        check_table_requirements(None, &[TableRequirement::NotExist]).unwrap();
    }

    #[test]
    fn updates_apply_and_no_op_is_detected() {
        let base = table();
        let applied = apply_table_updates(
            &base,
            "file:///wh/t/metadata/00000-x.metadata.json",
            vec![TableUpdate::SetProperties {
                updates: HashMap::from([("k".into(), "v".into())]),
            }],
        )
        .unwrap();
        let Applied::Changed(NewTableMetadata { metadata: new, .. }) = applied else {
            panic!("expected a change")
        };
        assert_eq!(new.properties().get("k").map(String::as_str), Some("v"));
        assert_eq!(new.metadata_log().len(), 1);
        assert!(matches!(
            apply_table_updates(&new, "loc", vec![]).unwrap(),
            Applied::Unchanged
        ));
    }

    #[test]
    fn invalid_update_is_a_bad_request() {
        let base = table();
        let err = apply_table_updates(
            &base,
            "loc",
            vec![TableUpdate::SetCurrentSchema { schema_id: 42 }],
        )
        .unwrap_err();
        assert!(matches!(err, CatalogError::InvalidArgument(_)), "{err:?}");
    }

    #[test]
    fn create_from_updates_builds_a_table() {
        let uuid = uuid::Uuid::new_v4();
        let metadata = create_table_from_updates(vec![
            TableUpdate::AssignUuid { uuid },
            TableUpdate::UpgradeFormatVersion {
                format_version: FormatVersion::V2,
            },
            TableUpdate::AddSchema { schema: schema() },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
            TableUpdate::SetLocation {
                location: "file:///wh/x".into(),
            },
        ])
        .unwrap();
        assert_eq!(metadata.uuid(), uuid);
        assert_eq!(metadata.location(), "file:///wh/x");
        assert!(create_table_from_updates(vec![]).is_err());
    }
}
