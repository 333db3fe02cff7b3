//! Appends never conflict with maintenance: an append whose base `main` has since moved only
//! by `replace` snapshots (compactions, which change files but not rows) is rebased by the
//! catalog instead of failing with 409. Its new manifests are listed on top of the current
//! head's manifests in a new manifest list, with the next sequence number (and row ids), and
//! its summary's totals are recomputed. Nothing the client wrote is changed but the list.

use iceberg::spec::{
    FormatVersion, ManifestList, ManifestListWriter, Operation, Snapshot, Summary, TableMetadata,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::{TableRequirement, TableUpdate};

use super::WarehouseHandle;
use super::tables::TableCommitRequest;
use crate::{CatalogError, Result};

/// `request` rebased on `base`, when it is an append whose base moved only by `replace`
/// snapshots; `None` when it is anything else (the client gets its 409).
pub(crate) async fn rebase_append(
    wh: &WarehouseHandle,
    base: &TableMetadata,
    request: &TableCommitRequest,
) -> Result<Option<TableCommitRequest>> {
    let [
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name,
            reference,
        },
    ] = request.updates.as_slice()
    else {
        return Ok(None);
    };
    if ref_name != "main"
        || reference.snapshot_id != snapshot.snapshot_id()
        || snapshot.summary().operation != Operation::Append
        || base.format_version() == FormatVersion::V1
    {
        return Ok(None);
    }
    let Some(expected) = request.requirements.iter().find_map(|r| match r {
        TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id } if r#ref == "main" => {
            Some(*snapshot_id)
        }
        _ => None,
    }) else {
        return Ok(None);
    };
    let (Some(expected), Some(head)) = (expected, base.current_snapshot()) else {
        return Ok(None);
    };
    if snapshot.parent_snapshot_id() != Some(expected) {
        return Ok(None);
    }
    // Everything between the append's base and the head must be a replace.
    let mut at = head.clone();
    while at.snapshot_id() != expected {
        if at.summary().operation != Operation::Replace {
            return Ok(None);
        }
        match at.parent_snapshot_id().and_then(|p| base.snapshot_by_id(p)) {
            Some(parent) => at = parent.clone(),
            None => return Ok(None),
        }
    }
    // The client's manifest list and the head's are read only inside the table.
    let file_io = wh.storage.for_table(base.location())?.file_io();
    let read_list = |snapshot: &Snapshot| {
        let file_io = file_io.clone();
        let path = snapshot.manifest_list().to_string();
        let version = base.format_version();
        async move {
            let bytes = file_io
                .new_input(&path)
                .map_err(|e| CatalogError::internal("read a manifest list", e))?
                .read()
                .await
                .map_err(|e| CatalogError::internal(format!("read {path}"), e))?;
            ManifestList::parse_with_version(&bytes, version)
                .map_err(|e| CatalogError::internal(format!("parse {path}"), e))
        }
    };
    let appended: Vec<_> = read_list(snapshot)
        .await?
        .consume_entries()
        .into_iter()
        .filter(|m| m.added_snapshot_id == snapshot.snapshot_id())
        .map(|mut m| {
            m.sequence_number = UNASSIGNED_SEQUENCE_NUMBER;
            m.min_sequence_number = UNASSIGNED_SEQUENCE_NUMBER;
            m.first_row_id = None;
            m
        })
        .collect();
    let current: Vec<_> = read_list(head.as_ref())
        .await?
        .consume_entries()
        .into_iter()
        .collect();

    let sequence_number = base.next_sequence_number();
    let first_row_id = base.next_row_id();
    let list_path = format!(
        "{}/metadata/snap-{}-rebased-{}.avro",
        base.location().trim_end_matches('/'),
        snapshot.snapshot_id(),
        uuid::Uuid::now_v7()
    );
    let output = file_io
        .new_output(&list_path)
        .map_err(|e| CatalogError::internal("write a manifest list", e))?
        .writer()
        .await
        .map_err(|e| CatalogError::internal("write a manifest list", e))?;
    let mut writer = match base.format_version() {
        FormatVersion::V3 => ManifestListWriter::v3(
            output,
            snapshot.snapshot_id(),
            Some(head.snapshot_id()),
            sequence_number,
            Some(first_row_id),
        ),
        _ => ManifestListWriter::v2(
            output,
            snapshot.snapshot_id(),
            Some(head.snapshot_id()),
            sequence_number,
        ),
    };
    writer
        .add_manifests(current.into_iter().chain(appended))
        .map_err(|e| CatalogError::internal("write a manifest list", e))?;
    let next_row_id = writer.next_row_id();
    writer
        .close()
        .await
        .map_err(|e| CatalogError::internal("write a manifest list", e))?;

    let summary = Summary {
        operation: Operation::Append,
        additional_properties: crate::commit::summary_with_totals(
            snapshot.summary().additional_properties.clone(),
            Some(head.summary()),
        ),
    };
    let builder = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot.snapshot_id())
        .with_parent_snapshot_id(Some(head.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_summary(summary)
        .with_schema_id(snapshot.schema_id().unwrap_or(base.current_schema_id()))
        .with_timestamp_ms(snapshot.timestamp_ms().max(crate::clock::now_ms()));
    let rebased = match next_row_id {
        Some(next) => builder
            .with_row_range(first_row_id, next - first_row_id)
            .build(),
        None => builder.build(),
    };
    let requirements = request
        .requirements
        .iter()
        .map(|r| match r {
            TableRequirement::RefSnapshotIdMatch { r#ref, .. } if r#ref == "main" => {
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: r#ref.clone(),
                    snapshot_id: Some(head.snapshot_id()),
                }
            }
            other => other.clone(),
        })
        .collect();
    tracing::debug!(
        snapshot = snapshot.snapshot_id(),
        onto = head.snapshot_id(),
        "rebase an append over maintenance"
    );
    Ok(Some(TableCommitRequest {
        ident: request.ident.clone(),
        requirements,
        updates: vec![
            TableUpdate::AddSnapshot { snapshot: rebased },
            TableUpdate::SetSnapshotRef {
                ref_name: ref_name.clone(),
                reference: reference.clone(),
            },
        ],
    }))
}
