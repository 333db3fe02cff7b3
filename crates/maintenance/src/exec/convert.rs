//! Converts a directory of Parquet files laid out as Hive partitions into an Iceberg table in
//! place: no data is copied or rewritten. Floe lists the files below each partition's
//! location, reads each footer (bounded) for its row count, and commits them as the table's
//! first snapshot, with identity partition values taken from the partition list. The table's
//! metadata goes to `<location>/_floe_metadata/`, a name Hive and Spark skip when they list the
//! old table's files, so the source keeps reading as it did.
//!
//! Files written by Hive or Spark carry no Iceberg field ids: the table gets a name mapping
//! (`schema.name-mapping.default`) so every Iceberg reader finds the columns by name.
//!
//! The table is created with `gc.enabled=false`: expiry, orphan cleanup and purge delete none
//! of its files, which the Hive table still reads.
//!
//! `sync` takes the files the source gained since (new partitions, appends) as one more
//! snapshot; a source that lost files the table holds (an overwrite, a dropped partition) is
//! refused by name, since adding alone would double rows.
//!
//! Everything is checked where it is used: the table's location inside the warehouse and
//! claimed by no other table (the catalog's create), every partition location inside the
//! table's, the caller's `create-table` / `write-data` (the catalog's create and commit).

use std::collections::{BTreeMap, HashMap};

use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::CreateTable;
use floe_storage::Location;
use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Literal, NestedField,
    PrimitiveLiteral, PrimitiveType, Schema, Struct, Transform, Type, UnboundPartitionSpec,
};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::state::read_snapshot;
use super::{Maintainer, MaintenanceError, Result, io};

/// The table property naming what a converted table came from; `sync` acts only on tables
/// that carry the same value.
pub const SOURCE_PROPERTY: &str = "floe.migration.source";
/// Where a converted table's metadata goes, below its location.
pub const METADATA_DIR: &str = "_floe_metadata";
/// Hive's name for a partition whose value is null.
pub(super) const HIVE_NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";
/// Footers read at once.
const CONCURRENCY: usize = 16;
/// Most files one conversion takes (a larger table is converted partition range by range).
pub const MAX_FILES: usize = 200_000;
/// Most partitions, partition columns and bytes of a partition value one request names.
pub const MAX_PARTITIONS: usize = 100_000;
pub const MAX_PARTITION_COLUMNS: usize = 32;
pub const MAX_VALUE_BYTES: usize = 1024;

/// One Hive partition: its values (in partition-column order, as Hive spells them) and
/// where its files lie.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct HivePartition {
    pub values: Vec<String>,
    pub location: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvertMode {
    /// Create the table over the files (a table this source created before is taken as done).
    #[default]
    Create,
    /// Add the files the source gained since the table's last snapshot.
    Sync,
}

/// What to convert.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ConvertRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    /// Names the source (kept as [`SOURCE_PROPERTY`]).
    pub source: String,
    /// The table's directory: every file converted lies below it.
    pub location: String,
    /// Every column, the partition columns included (an Iceberg schema as JSON).
    pub schema: Value,
    /// Partition columns (identity partitions), in the layout's order.
    #[serde(default)]
    pub partition_columns: Vec<String>,
    /// The partitions; absent for an unpartitioned table.
    #[serde(default)]
    pub partitions: Vec<HivePartition>,
    #[serde(default)]
    pub properties: HashMap<String, String>,
    #[serde(default)]
    pub mode: ConvertMode,
}

/// What a conversion did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ConvertReport {
    /// False when the table existed already (converted by an earlier run of the same source).
    pub created: bool,
    pub added_files: usize,
    pub added_records: u64,
    pub added_bytes: u64,
    pub snapshot_id: Option<i64>,
    pub metadata_location: Option<String>,
}

/// Converts (or syncs) as `request` says, as `caller`.
pub async fn convert_table(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &ConvertRequest,
) -> Result<ConvertReport> {
    let ident = TableIdent::from_strs(
        request
            .namespace
            .iter()
            .map(String::as_str)
            .chain([request.table.as_str()]),
    )
    .map_err(|e| MaintenanceError::Invalid(format!("table name: {e}")))?;
    let schema: Schema = serde_json::from_value(request.schema.clone())
        .map_err(|e| MaintenanceError::Invalid(format!("schema: {e}")))?;
    let types = partition_types(&schema, &request.partition_columns)?;
    let root = Location::parse(&request.location)
        .map_err(|e| MaintenanceError::Invalid(format!("location: {e}")))?;
    let dirs = partition_dirs(
        &root,
        &request.partition_columns,
        &request.partitions,
        &types,
    )?;

    // Authorized before anything is listed or read: creating needs `create-table` in the
    // namespace, syncing `write-data` on the table.
    match request.mode {
        ConvertMode::Create => {
            maintainer
                .catalog
                .authorize_namespace(
                    caller,
                    &request.warehouse,
                    ident.namespace(),
                    Privilege::CreateTable,
                )
                .await?
        }
        ConvertMode::Sync => {
            maintainer
                .catalog
                .authorize_table(caller, &request.warehouse, &ident, Privilege::WriteData)
                .await?
        }
    }
    let existing = match maintainer
        .catalog
        .load_table(caller, &request.warehouse, &ident)
        .await
    {
        Ok(loaded) => Some(loaded),
        Err(CatalogError::NotFound {
            error_type: "NoSuchTableException",
            ..
        }) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(loaded) = &existing {
        // Everything below is listed under the request's location: it must be the table's own.
        let own = Location::parse(loaded.metadata.location())
            .map_err(|e| MaintenanceError::Invalid(format!("the table's location: {e}")))?;
        if own != root {
            return Err(MaintenanceError::Invalid(format!(
                "location {} is not table {ident}'s location {}",
                request.location,
                loaded.metadata.location()
            )));
        }
        let marker = loaded.metadata.properties().get(SOURCE_PROPERTY);
        if marker != Some(&request.source) {
            return Err(CatalogError::already_exists(format!(
                "table {ident} exists and was not converted from {}",
                request.source
            ))
            .into());
        }
        if request.mode == ConvertMode::Create && loaded.metadata.current_snapshot().is_some() {
            return Ok(ConvertReport {
                created: false,
                snapshot_id: loaded.metadata.current_snapshot_id(),
                metadata_location: loaded.metadata_location.clone(),
                ..ConvertReport::default()
            });
        }
    } else if request.mode == ConvertMode::Sync {
        return Err(CatalogError::no_such_table(&ident).into());
    }

    let storage = maintainer
        .catalog
        .visible_warehouse(caller, &request.warehouse)
        .await?
        .storage
        .for_table(&root.to_string())
        .map_err(|e| MaintenanceError::Invalid(format!("location: {e}")))?;
    // The table is created (its location claimed, so no other table's directory is listed)
    // before any file is read; a conversion that fails takes the empty table away again.
    let created = existing.is_none();
    let loaded = match existing {
        Some(loaded) => loaded,
        None => create(maintainer, caller, request, &ident, schema.clone()).await?,
    };
    match fill(
        maintainer, caller, request, &ident, &root, &storage, &dirs, loaded, created,
    )
    .await
    {
        Ok(report) => Ok(report),
        Err(e) => {
            if created {
                // The empty table this call created goes again (as the system: the caller
                // may not hold drop-table), so a failed conversion leaves no claim behind.
                let _ = maintainer
                    .catalog
                    .unregister_table(&Caller::system(), &request.warehouse, &ident)
                    .await;
            }
            Err(e)
        }
    }
}

/// Lists and reads the files and commits them to the table.
#[allow(clippy::too_many_arguments)]
async fn fill(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &ConvertRequest,
    ident: &TableIdent,
    root: &Location,
    storage: &floe_storage::WarehouseStorage,
    dirs: &[(String, usize)],
    loaded: floe_catalog::service::LoadedTable,
    created: bool,
) -> Result<ConvertReport> {
    maintainer
        .catalog
        .authorize_table(caller, &request.warehouse, ident, Privilege::WriteData)
        .await?;
    let listed = list_files(storage, root, dirs).await?;
    let access = maintainer
        .sql
        .access(caller, &request.warehouse)
        .await
        .map_err(|e| io("storage access", e.message))?;
    let table = floe_sql::write::table_of(&access, loaded).map_err(|e| io("table", e))?;

    let mut held: BTreeMap<String, u64> = BTreeMap::new();
    if let Some(head) = table.metadata().current_snapshot() {
        // Sync follows the source only while convert and sync are the table's only writers:
        // a rewrite in Floe (compaction, a delete) would make files it replaced look new.
        if head.summary().additional_properties.get(SOURCE_PROPERTY) != Some(&request.source) {
            return Err(MaintenanceError::Unsupported(format!(
                "table {ident} was written by something else than its sync since it was                  converted; it no longer follows {} (cut over, or roll it back and migrate it                  again)",
                request.source
            )));
        }
        for file in read_snapshot(&table, head).await?.live_data() {
            held.insert(
                file.path().to_string(),
                file.entry.data_file().file_size_in_bytes(),
            );
        }
    }
    let lost: Vec<&String> = held
        .iter()
        .filter(|(p, size)| listed.get(*p).is_none_or(|f| f.size != **size))
        .map(|(p, _)| p)
        .collect();
    if !lost.is_empty() {
        return Err(MaintenanceError::Unsupported(format!(
            "the source no longer holds {} file(s) table {ident} has as they were (an overwrite              or a dropped partition), {} among them: sync only adds files; roll the table back              and migrate it again",
            lost.len(),
            lost[0]
        )));
    }
    let spec_id = table.metadata().default_partition_spec_id();
    let table_schema = table.metadata().current_schema().clone();
    let table_types = partition_types(&table_schema, &request.partition_columns)?;
    let new: Vec<(&String, &ListedFile)> = listed
        .iter()
        .filter(|(path, _)| !held.contains_key(*path))
        .collect();
    let files: Vec<DataFile> = new
        .iter()
        .map(|(path, file)| {
            let values = request
                .partitions
                .get(file.partition)
                .map(|p| p.values.as_slice())
                .unwrap_or(&[]);
            data_file(path, file, values, &table_types, spec_id)
        })
        .collect::<Result<_>>()?;

    let mut report = ConvertReport {
        created,
        added_files: files.len(),
        added_records: new
            .iter()
            .fold(0u64, |sum, (_, f)| sum.saturating_add(f.rows)),
        added_bytes: new
            .iter()
            .fold(0u64, |sum, (_, f)| sum.saturating_add(f.size)),
        ..ConvertReport::default()
    };
    let mut transaction = Transaction::new(&table);
    if created {
        transaction = transaction
            .update_table_properties()
            .set(
                "schema.name-mapping.default".into(),
                name_mapping(&table_schema).to_string(),
            )
            .apply(transaction)
            .map_err(|e| io("the table's name mapping", e))?;
    }
    if !files.is_empty() {
        transaction = transaction
            .fast_append()
            .with_check_duplicate(false)
            .set_snapshot_properties(HashMap::from([(
                SOURCE_PROPERTY.to_string(),
                request.source.clone(),
            )]))
            .add_data_files(files)
            .apply(transaction)
            .map_err(|e| io("the converted files' snapshot", e))?;
    }
    let committed = floe_sql::write::commit_transaction_on(&access, &table, transaction)
        .await
        .map_err(|e| io("commit the converted table", e))?;
    report.snapshot_id = committed.metadata().current_snapshot_id();
    report.metadata_location = committed.metadata_location().map(str::to_string);
    Ok(report)
}

/// The type of each partition column (identity partitions of primitive columns only).
pub(super) fn partition_types(
    schema: &Schema,
    columns: &[String],
) -> Result<Vec<(i32, PrimitiveType)>> {
    columns
        .iter()
        .map(|name| {
            let field = schema.field_by_name(name).ok_or_else(|| {
                MaintenanceError::Invalid(format!("partition column {name} is not in the schema"))
            })?;
            match field.field_type.as_ref() {
                Type::Primitive(
                    p @ (PrimitiveType::String
                    | PrimitiveType::Int
                    | PrimitiveType::Long
                    | PrimitiveType::Date
                    | PrimitiveType::Boolean),
                ) => Ok((field.id, p.clone())),
                other => Err(MaintenanceError::Unsupported(format!(
                    "partition column {name} is of type {other}; conversion takes string, int, \
                     bigint, date and boolean partition columns"
                ))),
            }
        })
        .collect()
}

/// The directories to list, each with the index of its partition in the request (0 for an
/// unpartitioned table), all inside `root`, none twice or inside another.
pub(super) fn partition_dirs(
    root: &Location,
    columns: &[String],
    partitions: &[HivePartition],
    types: &[(i32, PrimitiveType)],
) -> Result<Vec<(String, usize)>> {
    if columns.is_empty() {
        if !partitions.is_empty() {
            return Err(MaintenanceError::Invalid(
                "partitions given for a table without partition columns".into(),
            ));
        }
        return Ok(vec![(root.to_string(), 0)]);
    }
    if columns.len() > MAX_PARTITION_COLUMNS {
        return Err(MaintenanceError::Invalid(format!(
            "more than {MAX_PARTITION_COLUMNS} partition columns"
        )));
    }
    if partitions.len() > MAX_PARTITIONS {
        return Err(MaintenanceError::Invalid(format!(
            "more than {MAX_PARTITIONS} partitions; convert the table in several runs"
        )));
    }
    let mut dirs: Vec<(Location, usize)> = Vec::with_capacity(partitions.len());
    for (index, partition) in partitions.iter().enumerate() {
        if partition.values.len() != types.len() {
            return Err(MaintenanceError::Invalid(format!(
                "partition {} has {} values for {} partition columns",
                partition.location,
                partition.values.len(),
                types.len()
            )));
        }
        let location = Location::parse(&partition.location)
            .map_err(|e| MaintenanceError::Invalid(format!("partition location: {e}")))?;
        if !location.is_within(root) || location == *root {
            return Err(MaintenanceError::Invalid(format!(
                "partition location {} lies outside the table's location {}; Floe converts \
                 only files below the table's location",
                partition.location, root
            )));
        }
        for (value, (_, ty)) in partition.values.iter().zip(types) {
            if value.len() > MAX_VALUE_BYTES {
                return Err(MaintenanceError::Invalid(format!(
                    "a partition value is longer than {MAX_VALUE_BYTES} bytes"
                )));
            }
            partition_literal(value, ty)?;
        }
        dirs.push((location, index));
    }
    // Sorted, a partition inside another follows it directly.
    // (With a trailing slash, everything between a directory and one inside it is inside it.)
    dirs.sort_by_key(|(location, _)| format!("{}/", location.to_string().trim_end_matches('/')));
    for pair in dirs.windows(2) {
        if pair[1].0.is_within(&pair[0].0) {
            return Err(MaintenanceError::Invalid(format!(
                "partition location {} is listed twice or lies inside partition {}",
                pair[1].0, pair[0].0
            )));
        }
    }
    Ok(dirs.into_iter().map(|(l, i)| (l.to_string(), i)).collect())
}

/// A file found below a partition's location.
struct ListedFile {
    size: u64,
    rows: u64,
    /// Its partition's index in the request.
    partition: usize,
}

/// Lists every data file below `dirs` (names beginning with `_` or `.` skipped at any depth,
/// as Hive and Spark skip them), each with its partition's index: the files a Hive reader of
/// the table reads.
pub(super) async fn list_paths(
    storage: &floe_storage::WarehouseStorage,
    root: &Location,
    dirs: &[(String, usize)],
) -> Result<Vec<(String, usize)>> {
    // Floe's own files of the table: iceberg writes manifests to `<location>/metadata/` and
    // new data to `<location>/data/`, whatever `write.metadata.path` says.
    let own: Vec<Location> = ["metadata", "data"].iter().map(|d| root.join(d)).collect();
    let mut found: Vec<(String, usize)> = Vec::new();
    for (dir, partition) in dirs {
        // Listed locations come back in canonical spelling (`file:///…` for `file:/…`).
        let canonical = Location::parse(dir).map_err(|e| io(format!("location {dir}"), e))?;
        let prefix = format!("{}/", canonical.to_string().trim_end_matches('/'));
        let listed = storage
            .list(&prefix)
            .await
            .map_err(|e| io(format!("list {prefix}"), e))?;
        for path in listed {
            let relative = path.strip_prefix(&prefix).unwrap_or(&path);
            if relative
                .split('/')
                .any(|part| part.is_empty() || part.starts_with('_') || part.starts_with('.'))
            {
                continue;
            }
            if Location::parse(&path).is_ok_and(|p| own.iter().any(|o| p.is_within(o))) {
                continue;
            }
            found.push((path, *partition));
            if found.len() > MAX_FILES {
                return Err(MaintenanceError::Unsupported(format!(
                    "more than {MAX_FILES} files below the table's partitions; convert it in \
                     several runs of fewer partitions"
                )));
            }
        }
    }
    Ok(found)
}

/// [`list_paths`], each file's footer read for its row count.
async fn list_files(
    storage: &floe_storage::WarehouseStorage,
    root: &Location,
    dirs: &[(String, usize)],
) -> Result<BTreeMap<String, ListedFile>> {
    let found = list_paths(storage, root, dirs).await?;
    let object_store = storage.object_store();
    futures::stream::iter(found)
        .map(|(path, partition)| {
            let object_store = object_store.clone();
            let storage = storage.clone();
            async move {
                let size = storage
                    .size(&path)
                    .await
                    .map_err(|e| io(format!("reach {path}"), e))?
                    .ok_or_else(|| io(format!("reach {path}"), "it is gone"))?;
                let object = storage
                    .object_path(&path)
                    .map_err(|e| io(format!("reach {path}"), e))?;
                let rows = floe_sql::scan::parquet_rows(object_store, object, size)
                    .await
                    .map_err(|e| {
                        MaintenanceError::Unsupported(format!(
                            "{path} is not a readable Parquet file ({e}); conversion takes \
                             Parquet tables only"
                        ))
                    })?;
                Ok::<_, MaintenanceError>((
                    path,
                    ListedFile {
                        size,
                        rows: rows.max(0) as u64,
                        partition,
                    },
                ))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
}

/// Creates the table over `request.location`, its metadata in [`METADATA_DIR`].
async fn create(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &ConvertRequest,
    ident: &TableIdent,
    schema: Schema,
) -> Result<floe_catalog::service::LoadedTable> {
    let mut spec = UnboundPartitionSpec::builder();
    for name in &request.partition_columns {
        let field = schema
            .field_by_name(name)
            .ok_or_else(|| MaintenanceError::Invalid(format!("no column {name}")))?;
        spec = spec
            .add_partition_field(field.id, name.clone(), Transform::Identity)
            .map_err(|e| MaintenanceError::Invalid(format!("partition spec: {e}")))?;
    }
    let mut properties = request.properties.clone();
    properties.insert(SOURCE_PROPERTY.into(), request.source.clone());
    // Iceberg's mark of a table whose files belong to another system too: no expiry, orphan
    // cleanup or purge deletes any of them (the Hive table keeps reading them).
    properties.insert(super::GC_ENABLED.into(), "false".into());
    properties.insert(
        floe_catalog::metadata::METADATA_PATH_PROPERTY.into(),
        format!("{}/{METADATA_DIR}", request.location.trim_end_matches('/')),
    );
    Ok(maintainer
        .catalog
        .create_table(
            caller,
            &request.warehouse,
            ident.namespace(),
            CreateTable {
                name: request.table.clone(),
                location: Some(request.location.clone()),
                schema,
                partition_spec: Some(spec.build()),
                write_order: None,
                stage_create: false,
                properties,
            },
        )
        .await?)
}

fn data_file(
    path: &str,
    file: &ListedFile,
    values: &[String],
    types: &[(i32, PrimitiveType)],
    spec_id: i32,
) -> Result<DataFile> {
    let partition = Struct::from_iter(
        values
            .iter()
            .zip(types)
            .map(|(value, (_, ty))| partition_literal(value, ty))
            .collect::<Result<Vec<_>>>()?,
    );
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(path.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(file.rows)
        .file_size_in_bytes(file.size)
        .build()
        .map_err(|e| io(format!("describe {path}"), e))
}

/// A Hive partition value as the Iceberg literal of its column's type.
fn partition_literal(value: &str, ty: &PrimitiveType) -> Result<Option<Literal>> {
    if value == HIVE_NULL_PARTITION {
        return Ok(None);
    }
    let bad = |e: &dyn std::fmt::Display| {
        MaintenanceError::Invalid(format!("partition value {value:?} is not a {ty}: {e}"))
    };
    let literal = match ty {
        PrimitiveType::String => Literal::string(value),
        PrimitiveType::Int => Literal::int(value.parse::<i32>().map_err(|e| bad(&e))?),
        PrimitiveType::Long => Literal::long(value.parse::<i64>().map_err(|e| bad(&e))?),
        PrimitiveType::Boolean => Literal::bool(value.parse::<bool>().map_err(|e| bad(&e))?),
        PrimitiveType::Date => {
            let date = chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|e| bad(&e))?;
            let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch");
            Literal::Primitive(PrimitiveLiteral::Int((date - epoch).num_days() as i32))
        }
        other => return Err(bad(&format!("{other} partitions are not converted"))),
    };
    Ok(Some(literal))
}

/// Iceberg's name mapping of `schema`: every field (nested ones too) by its name.
pub fn name_mapping(schema: &Schema) -> Value {
    fn fields(fields: &[iceberg::spec::NestedFieldRef]) -> Vec<Value> {
        fields.iter().map(|f| field(f)).collect()
    }
    fn field(f: &NestedField) -> Value {
        let mut mapped = json!({"field-id": f.id, "names": [f.name]});
        let nested = nested(&f.field_type);
        if !nested.is_empty() {
            mapped["fields"] = Value::Array(nested);
        }
        mapped
    }
    fn nested(ty: &Type) -> Vec<Value> {
        match ty {
            Type::Struct(s) => fields(s.fields()),
            Type::List(l) => vec![field_named(&l.element_field, "element")],
            Type::Map(m) => vec![
                field_named(&m.key_field, "key"),
                field_named(&m.value_field, "value"),
            ],
            Type::Primitive(_) => Vec::new(),
        }
    }
    fn field_named(f: &NestedField, name: &str) -> Value {
        let mut mapped = json!({"field-id": f.id, "names": [name]});
        let inner = nested(&f.field_type);
        if !inner.is_empty() {
            mapped["fields"] = Value::Array(inner);
        }
        mapped
    }
    Value::Array(fields(schema.as_struct().fields()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_partition_values_become_typed_literals() {
        assert_eq!(
            partition_literal("2024-01-02", &PrimitiveType::Date).unwrap(),
            Some(Literal::Primitive(PrimitiveLiteral::Int(19724)))
        );
        assert_eq!(
            partition_literal("7", &PrimitiveType::Long).unwrap(),
            Some(Literal::long(7))
        );
        assert_eq!(
            partition_literal(HIVE_NULL_PARTITION, &PrimitiveType::Int).unwrap(),
            None
        );
        let err = partition_literal("x", &PrimitiveType::Int).unwrap_err();
        assert!(err.to_string().contains("\"x\" is not a int"), "{err}");
    }

    #[test]
    fn name_mapping_names_nested_fields() {
        let schema: Schema = serde_json::from_value(json!({
            "type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": false, "type": "long"},
                {"id": 2, "name": "tags", "required": false, "type": {
                    "type": "list", "element-id": 3, "element-required": false,
                    "element": "string"}}
            ]
        }))
        .unwrap();
        assert_eq!(
            name_mapping(&schema),
            json!([
                {"field-id": 1, "names": ["id"]},
                {"field-id": 2, "names": ["tags"], "fields": [
                    {"field-id": 3, "names": ["element"]}]}
            ])
        );
    }

    #[test]
    fn partitions_outside_the_table_are_refused() {
        let request: ConvertRequest = serde_json::from_value(json!({
            "warehouse": "w", "namespace": ["db"], "table": "t", "source": "hive:db.t",
            "location": "file:///data/db/t",
            "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "day", "required": false, "type": "string"}]},
            "partition-columns": ["day"],
            "partitions": [{"values": ["a"], "location": "file:///data/db/other/day=a"}]
        }))
        .unwrap();
        let schema: Schema = serde_json::from_value(request.schema.clone()).unwrap();
        let types = partition_types(&schema, &request.partition_columns).unwrap();
        let root = Location::parse(&request.location).unwrap();
        let err = partition_dirs(
            &root,
            &request.partition_columns,
            &request.partitions,
            &types,
        )
        .unwrap_err();
        assert!(err.to_string().contains("lies outside"), "{err}");
    }
}
