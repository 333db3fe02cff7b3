//! An Iceberg table as a DataFusion table.
//!
//! Planning uses iceberg's own scan planning over the table's manifests: the query's filters,
//! converted to an Iceberg predicate ([`crate::scan::predicate`]), prune whole manifests by their
//! partition summaries and files by partition values and column metrics. The files left are
//! handed to DataFusion's native Parquet scan, which splits them into byte ranges across
//! partitions, prunes row groups and pages with the same filters, and reads columns by
//! Iceberg field id ([`crate::scan::field_ids`]). Position deletes and deletion vectors become row
//! selections in that scan ([`crate::scan::position_deletes`]); equality deletes filter its rows
//! ([`crate::scan::equality_deletes`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::Session;
use datafusion::catalog::TableProvider;
use datafusion::common::stats::Precision;
use datafusion::common::{DataFusionError, Result, ScalarValue, Statistics, project_schema};
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{CatalogService, LoadedTable};
use floe_storage::WarehouseStorage;
use futures::TryStreamExt;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{
    DataContentType, Literal, NullOrder, PartitionSpec, PrimitiveLiteral, SortDirection, SortOrder,
    Struct, Transform,
};
use iceberg::table::Table;
use object_store::ObjectStore;

use crate::scan::field_ids::{FieldIdAdapterFactory, FieldIds};
use crate::scan::{equality_deletes, manifests, planning, position_deletes, predicate};

/// Who reads a table, from which warehouse, through which object store.
#[derive(Debug, Clone)]
pub struct TableAccess {
    pub service: Arc<CatalogService>,
    pub caller: Caller,
    pub warehouse: String,
    /// The warehouse's storage; a table's files are reached only through a handle narrowed
    /// to the table ([`TableAccess::files_of`]).
    pub storage: WarehouseStorage,
    /// Where the warehouse's object store is registered in the session's runtime.
    pub store_url: ObjectStoreUrl,
    /// The warehouse's id, which names its object store.
    pub warehouse_id: uuid::Uuid,
    /// Rows this node acknowledged but has not committed yet, which reads see too.
    pub pending: Option<Arc<dyn super::pending::PendingRows>>,
}

impl TableAccess {
    /// The storage handle of the table at `location`: every manifest, data, delete and
    /// statistics file read or written for it must lie below that location.
    pub fn files_of(&self, location: &str) -> Result<WarehouseStorage> {
        self.storage
            .for_table(location)
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }
}

/// A table's files as a scan reads them: the session's object store of the warehouse, and
/// the table's reach, which every path is checked against before it is read.
#[derive(Debug, Clone)]
pub(crate) struct TableFiles {
    pub store: Arc<dyn ObjectStore>,
    pub reach: floe_storage::Reach,
}

impl TableFiles {
    /// The object-store path of one of the table's files; a file outside the table is an
    /// error naming it.
    pub fn path(&self, location: &str) -> Result<String> {
        self.reach
            .relative_path(location)
            .map_err(|e| DataFusionError::Execution(format!("table file {location}: {e}")))
    }
}

/// One Iceberg table (at its current snapshot, or a chosen one).
#[derive(Debug)]
pub struct IcebergTableProvider {
    access: TableAccess,
    /// What this table's reads may reach: its location.
    files: WarehouseStorage,
    loaded: LoadedTable,
    snapshot_id: Option<i64>,
    /// The schema DataFusion plans with: no field metadata ([`FieldIds`]).
    schema: SchemaRef,
    /// `schema`'s field ids, which the scan maps each file's columns by.
    ids: FieldIds,
    /// When set, only these data files are read, in this order (a compaction's input group).
    only_files: Option<Arc<std::collections::HashMap<String, usize>>>,
    /// Row count and column bounds of the snapshot read, for the join order
    /// ([`crate::optimizer::reorder_joins`]); set by [`IcebergTableProvider::with_statistics`].
    statistics: Option<Arc<Statistics>>,
}

impl IcebergTableProvider {
    pub fn try_new(access: TableAccess, loaded: LoadedTable) -> Result<Self> {
        let schema = arrow_schema(loaded.metadata.current_schema())?;
        let ids = FieldIds::of(loaded.metadata.current_schema());
        let files = access.files_of(loaded.metadata.location())?;
        Ok(Self {
            access,
            files,
            loaded,
            snapshot_id: None,
            schema,
            ids,
            only_files: None,
            statistics: None,
        })
    }

    /// Reads only `files` of snapshot `id`, in that order and in the table's current schema:
    /// the rows of a rewrite group, with their deletes applied.
    pub fn for_rewrite(mut self, id: i64, files: &[String]) -> Self {
        self.snapshot_id = Some(id);
        let order = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), i))
            .collect();
        self.only_files = Some(Arc::new(order));
        self
    }

    /// The same table as of snapshot `id`, with the schema that snapshot was written with.
    pub fn at_snapshot(mut self, id: i64) -> Result<Self> {
        let metadata = &self.loaded.metadata;
        let schema = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.schema_id())
            .and_then(|schema_id| metadata.schema_by_id(schema_id))
            .unwrap_or_else(|| metadata.current_schema());
        self.schema = arrow_schema(schema)?;
        self.ids = FieldIds::of(schema);
        self.snapshot_id = Some(id);
        Ok(self)
    }

    /// The same provider with the snapshot's row count and column bounds from its manifests
    /// (kept per snapshot). Statistics only guide planning: when the manifests cannot be read
    /// here, the provider goes without them and the scan reports the error.
    pub async fn with_statistics(mut self) -> Self {
        let Some(list) = self.snapshot().map(|s| s.manifest_list().to_string()) else {
            // No snapshot: an empty table.
            let mut empty = Statistics::new_unknown(&self.schema);
            empty.num_rows = Precision::Exact(0);
            self.statistics = Some(Arc::new(empty));
            return self;
        };
        if let Ok(table) = self.table()
            && let Ok(index) = manifests::index(&table, self.snapshot_id).await
        {
            let key = format!("{}\u{1f}{list}", self.loaded.metadata.location());
            self.statistics = Some(table_statistics::of(&key, &index, &self.schema, &self.ids));
        }
        self
    }

    /// The snapshot read: the chosen one, or the current one (none in an empty table).
    fn snapshot(&self) -> Option<&iceberg::spec::SnapshotRef> {
        manifests::snapshot_of(&self.loaded.metadata, self.snapshot_id)
    }

    pub fn metadata(&self) -> &iceberg::spec::TableMetadata {
        &self.loaded.metadata
    }

    /// The field ids of the schema read.
    pub fn field_ids(&self) -> &FieldIds {
        &self.ids
    }

    /// What this table's reads may reach: its location.
    pub(crate) fn files(&self) -> &WarehouseStorage {
        &self.files
    }

    /// The sort order all of `tasks`' data files say they were written in (their manifest
    /// entries' `sort_order_id`), as far as DataFusion can order rows by it ([`sort_columns`]).
    ///
    /// The written order (`FLOE_SQL_WRITTEN_ORDER`, on unless `off`): a scan declares this
    /// order to DataFusion, which may then stream aggregations and merges by it and drop the
    /// sorts it satisfies, so it must hold for every row read. It is declared only when every
    /// file carries the same order id, only for the order's leading identity fields over
    /// columns that are not floating point (Iceberg and DataFusion place NaN apart), and
    /// [`in_written_order`] keeps it only when the files' bounds on the first column are
    /// known, null-free and in sequence; each partition then reads one contiguous stretch of
    /// that sequence. Iceberg's bounds are true bounds (truncated strings are rounded outward,
    /// deletes only remove rows), and Iceberg orders strings and binaries by unsigned bytes as
    /// DataFusion does. Within a file the order is the writer's word: Floe's writer gives it
    /// only after comparing every row it wrote as DataFusion compares them ([`crate::write`]).
    /// A scan of a given list of files (a compaction's group) declares none. Open: a writer
    /// that stamps the id on files it sorted only batch by batch (as iceberg-go once did)
    /// makes the declaration false, and nothing here can tell.
    fn written_order(
        &self,
        tasks: &[FileScanTask],
        index: &manifests::ManifestIndex,
    ) -> Option<LexOrdering> {
        let mut order_id = None;
        for task in tasks {
            let written = index.data.get(&task.data_file_path)?.file.sort_order_id()?;
            if *order_id.get_or_insert(written) != written {
                return None;
            }
        }
        let order = self.metadata().sort_order_by_id(i64::from(order_id?))?;
        let (columns, _) = sort_columns(order, &self.schema, &self.ids);
        LexOrdering::new(columns.into_iter().map(|(index, options)| {
            let name = self.schema.field(index).name();
            PhysicalSortExpr::new(Arc::new(Column::new(name, index)), options)
        }))
    }

    /// The caller may read the table's rows (`read-data`): checked by every read of them.
    async fn authorize_read(&self) -> Result<()> {
        self.access
            .service
            .authorize_table(
                &self.access.caller,
                &self.access.warehouse,
                &self.loaded.ident,
                Privilege::ReadData,
            )
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }

    /// The live rows of the snapshot read as the values of columns `key_ids` (field ids) and
    /// their positions in their data files, file by file ([`super::live_keys`]): what an
    /// upsert table's key index is built from. Needs `read-data`, as a scan does.
    pub async fn live_keys(&self, key_ids: &[i32]) -> Result<Vec<super::live_keys::FileKeys>> {
        self.live_columns(key_ids, super::live_keys::Reading::default())
            .await
    }

    /// The live rows of the snapshot as columns `ids` and positions, read as `reading` says
    /// (missing columns as nulls, some files, some rows): what Floe reads of a dead-letter
    /// table to find letters to take again. Needs `read-data`.
    pub async fn live_columns(
        &self,
        key_ids: &[i32],
        reading: super::live_keys::Reading<'_>,
    ) -> Result<Vec<super::live_keys::FileKeys>> {
        let Some((tasks, files, index)) = self.live_plan().await? else {
            return Ok(Vec::new());
        };
        super::live_keys::read(
            &index,
            &files,
            tasks,
            &self.schema,
            &self.ids,
            key_ids,
            reading,
        )
        .await
    }

    /// The live data files of the snapshot, and the rows removed from them by delete files
    /// of a data sequence number above `sequence` ([`super::live_keys::LiveFiles`]): what an
    /// upsert table's key index reads to catch up from the snapshot it describes. Needs
    /// `read-data`, as a scan does.
    pub async fn live_files(&self, sequence: i64) -> Result<super::live_keys::LiveFiles> {
        let Some((tasks, files, index)) = self.live_plan().await? else {
            return Ok(Default::default());
        };
        super::live_keys::live_files(&index, &files, tasks, sequence).await
    }

    /// What a read of the snapshot's live rows starts from, once `read-data` is checked: its
    /// plan (none when it has no files), its files' storage and its manifests' index.
    async fn live_plan(
        &self,
    ) -> Result<Option<(Vec<FileScanTask>, TableFiles, Arc<manifests::ManifestIndex>)>> {
        self.authorize_read().await?;
        let tasks = self.plan(&[]).await?;
        if tasks.is_empty() {
            return Ok(None);
        }
        let files = TableFiles {
            store: self.files.object_store(),
            reach: self.files.reach().clone(),
        };
        let index = manifests::index(&self.table()?, self.snapshot_id).await?;
        Ok(Some((tasks, files, index)))
    }

    /// The table as iceberg's reader and inspectors take it.
    pub fn table(&self) -> Result<Table> {
        let mut builder = Table::builder()
            .metadata(self.loaded.metadata.clone())
            .identifier(self.loaded.ident.clone())
            .file_io(self.files.file_io())
            .readonly(true)
            .runtime(iceberg::Runtime::current());
        if let Some(location) = &self.loaded.metadata_location {
            builder = builder.metadata_location(location.clone());
        }
        builder.build().map_err(iceberg_error)
    }

    /// The files to read, by iceberg's scan planning. Plans are kept per snapshot (its
    /// manifest list never changes) and predicate, so a query repeated on an unchanged table
    /// (a dashboard's, say) does not read the manifests again.
    async fn plan(&self, filters: &[Expr]) -> Result<Vec<FileScanTask>> {
        let metadata = &self.loaded.metadata;
        let Some(snapshot) = self.snapshot() else {
            return Ok(Vec::new());
        };
        let predicate = predicate::to_iceberg(filters, &self.schema);
        // The live data files the filter might match, with the delete files that apply to
        // them: from the manifests kept per file, so a snapshot after a commit costs only the
        // manifests the commit added (iceberg's planning would read them all again). The
        // filter is bound to the snapshot's schema, as iceberg binds it; one that does not
        // bind is left to iceberg.
        let bound = match &predicate {
            None => Some(None),
            Some(p) => snapshot
                .schema(metadata)
                .ok()
                .and_then(|schema| iceberg::expr::Bind::bind(p, schema, true).ok())
                .map(Some),
        };
        if let Some(bound) = bound {
            let index = manifests::index(&self.table()?, self.snapshot_id).await?;
            return Ok(planning::tasks(&index, metadata, bound.as_ref()));
        }
        let key = format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{predicate:?}",
            metadata.location(),
            snapshot.manifest_list(),
            metadata.current_schema_id()
        );
        if let Some(tasks) = plans::get(&key) {
            return Ok(tasks.as_ref().clone());
        }
        let table = self.table()?;
        let mut builder = table
            .scan()
            .select_all()
            .snapshot_id(snapshot.snapshot_id());
        if let Some(predicate) = predicate {
            builder = builder.with_filter(predicate);
        }
        let scan = builder.build().map_err(iceberg_error)?;
        let tasks: Vec<FileScanTask> = scan
            .plan_files()
            .await
            .map_err(iceberg_error)?
            .try_collect()
            .await
            .map_err(iceberg_error)?;
        plans::put(key, &tasks);
        Ok(tasks)
    }
}

/// Scan plans kept across queries.
mod plans {
    use std::sync::Arc;

    use iceberg::scan::FileScanTask;

    use crate::scan::cache::Recent;

    /// Plans with more files than this are not kept.
    const MAX_FILES: usize = 20_000;

    static PLANS: Recent<String, Vec<FileScanTask>> = Recent::new(128);

    pub fn get(key: &str) -> Option<Arc<Vec<FileScanTask>>> {
        PLANS.get(key)
    }

    pub fn put(key: String, tasks: &[FileScanTask]) {
        if tasks.len() <= MAX_FILES {
            PLANS.put(key, Arc::new(tasks.to_vec()));
        }
    }
}

/// A snapshot's statistics: live data files' record counts and null counts summed, their column
/// bounds merged.
/// Kept per manifest list and schema (bounds of large tables take a while to merge).
mod table_statistics {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::SchemaRef;
    use datafusion::common::Statistics;
    use datafusion::common::stats::Precision;

    use crate::scan::cache::Recent;
    use crate::scan::field_ids::FieldIds;
    use crate::scan::manifests::ManifestIndex;

    static KEPT: Recent<(String, SchemaRef, FieldIds), Statistics> = Recent::new(64);

    /// The statistics of the snapshot whose manifest list is `list`, from its `index`.
    pub fn of(
        list: &str,
        index: &ManifestIndex,
        schema: &SchemaRef,
        ids: &FieldIds,
    ) -> Arc<Statistics> {
        let key = (list.to_string(), schema.clone(), ids.clone());
        if let Some(found) = KEPT.get(&key) {
            return found;
        }
        let mut stats = Statistics::new_unknown(schema);
        let mut rows = 0usize;
        for (n, entry) in index.data.values().enumerate() {
            rows += entry.file.record_count() as usize;
            let mut file = Statistics::new_unknown(schema);
            super::column_bounds(schema, ids, entry, false, &mut file);
            for (merged, column) in stats
                .column_statistics
                .iter_mut()
                .zip(file.column_statistics)
            {
                // A file without bounds for a column leaves the column's bounds unknown.
                if n == 0 {
                    merged.min_value = column.min_value;
                    merged.max_value = column.max_value;
                    merged.null_count = column.null_count;
                } else {
                    merged.min_value = merged.min_value.min(&column.min_value);
                    merged.max_value = merged.max_value.max(&column.max_value);
                    merged.null_count = merged.null_count.add(&column.null_count);
                }
            }
        }
        stats.num_rows = Precision::Inexact(rows);
        let stats = Arc::new(stats);
        KEPT.put(key, stats.clone());
        stats
    }
}

/// The Arrow schema DataFusion sees: Iceberg's, without field metadata (the field ids are kept
/// apart, in [`FieldIds`]), with strings and binaries as view types (what DataFusion's Parquet
/// reader produces natively).
pub fn arrow_schema(schema: &iceberg::spec::Schema) -> Result<SchemaRef> {
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema).map_err(iceberg_error)?;
    let fields: Vec<Field> = arrow
        .fields()
        .iter()
        .map(|f| {
            let data_type = match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
                DataType::Binary | DataType::LargeBinary => DataType::BinaryView,
                other => other.clone(),
            };
            f.as_ref().clone().with_data_type(data_type)
        })
        .collect();
    Ok(crate::scan::field_ids::without_field_metadata(
        &Schema::new(fields),
    ))
}

pub fn iceberg_error(e: iceberg::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl TableProvider for IcebergTableProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn statistics(&self) -> Option<Statistics> {
        self.statistics.as_deref().cloned()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Filters prune partitions, files, row groups and pages; rows are still filtered.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} is not supported yet; INSERT INTO appends"
            )));
        }
        if self.snapshot_id.is_some() {
            return Err(DataFusionError::Plan(
                "a time-travel name cannot be written to".into(),
            ));
        }
        // Rows inserted as they are would stand beside the rows of their keys.
        if crate::write::upsert_enabled(&self.loaded.metadata) {
            return Err(DataFusionError::Plan(format!(
                "{} is an upsert table (write.upsert.enabled): INSERT INTO would add rows beside \
                 the rows of their keys; write it through /ingest/v1 or an upsert pipeline",
                self.loaded.ident
            )));
        }
        let sink =
            crate::write::IcebergSink::new(self.access.clone(), self.table()?, self.schema.clone());
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.authorize_read().await?;
        let projected = project_schema(&self.schema, projection)?;
        let mut tasks = self.plan(filters).await?;
        if let Some(only) = &self.only_files {
            tasks.retain(|t| only.contains_key(&t.data_file_path));
            tasks.sort_by_key(|t| (only[&t.data_file_path], t.start));
        } else if state
            .config()
            .get_extension::<crate::optimizer::Rewrites>()
            .is_none_or(|rewrites| rewrites.token_index)
        {
            let files = TableFiles {
                store: state.runtime_env().object_store(&self.access.store_url)?,
                reach: self.files.reach().clone(),
            };
            tasks = crate::token_index::prune(self.metadata(), &files, filters, tasks).await;
        }
        // Position deletes and deletion vectors become row selections in the native scan;
        // files with equality deletes go through the same scan, grouped by the equality delete
        // files that apply to them, with a filter dropping the deleted keys.
        let (native, with_equality): (Vec<_>, Vec<_>) = tasks
            .into_iter()
            .partition(position_deletes::positional_only);
        let mut plans: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        if !native.is_empty() {
            plans.push(self.parquet_scan(state, native, projection, limit).await?);
        }
        let mut read = equality_deletes::ReadKeys::default();
        for (equality, tasks) in by_equality_deletes(with_equality) {
            plans.push(
                self.equality_scan(state, tasks, &equality, projection, &mut read)
                    .await?,
            );
        }
        if let Some(pending) = self.pending_scan(state, projection).await? {
            plans.push(pending);
        }
        Ok(match plans.len() {
            0 => Arc::new(EmptyExec::new(projected)),
            1 => plans.pop().expect("one plan"),
            _ => UnionExec::try_new(plans)?,
        })
    }
}

impl IcebergTableProvider {
    /// The rows this node acknowledged but has not committed yet, when the read is of the
    /// current snapshot and this node runs it (not time travel, not a compaction's input, not
    /// a plan distributed to workers, which hold none).
    async fn pending_scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(pending) = &self.access.pending else {
            return Ok(None);
        };
        if self.snapshot_id.is_some()
            || self.only_files.is_some()
            || state
                .config()
                .get_extension::<crate::distributed::PlannedStages>()
                .is_some()
        {
            return Ok(None);
        }
        let rows = pending
            .rows_after(
                &self.access.warehouse,
                &self.loaded.ident,
                &self.loaded.metadata,
                &self.schema,
            )
            .await?;
        if rows.iter().all(|b| b.num_rows() == 0) {
            return Ok(None);
        }
        let scan = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
            &[rows],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(Some(scan))
    }
}

impl IcebergTableProvider {
    /// The native scan of data files that share the equality delete files `equality` (their
    /// tasks carry only their position deletes), reading the equality columns too, with the
    /// deleted keys filtered out and the scan's projection restored.
    async fn equality_scan(
        &self,
        state: &dyn Session,
        tasks: Vec<FileScanTask>,
        equality: &[FileScanTaskDeleteFile],
        projection: Option<&Vec<usize>>,
        read_keys: &mut equality_deletes::ReadKeys,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let mut read = wanted.clone();
        for file in equality {
            for &id in equality_deletes::equality_ids(file)? {
                let column = equality_deletes::column_of(&self.schema, &self.ids, file, id)?;
                if !read.contains(&column) {
                    read.push(column);
                }
            }
        }
        let scan = self.parquet_scan(state, tasks, Some(&read), None).await?;
        let files = TableFiles {
            store: state.runtime_env().object_store(&self.access.store_url)?,
            reach: self.files.reach().clone(),
        };
        let sets =
            equality_deletes::load(&files, equality, &scan.schema(), &self.ids, read_keys).await?;
        let filtered: Arc<dyn ExecutionPlan> =
            Arc::new(equality_deletes::EqualityDeleteExec::new(scan, sets));
        if read.len() == wanted.len() {
            return Ok(filtered);
        }
        let schema = filtered.schema();
        let columns: Vec<(Arc<dyn PhysicalExpr>, String)> = (0..wanted.len())
            .map(|i| {
                let name = schema.field(i).name().clone();
                (
                    Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                    name,
                )
            })
            .collect();
        Ok(Arc::new(ProjectionExec::try_new(columns, filtered)?))
    }

    async fn parquet_scan(
        &self,
        state: &dyn Session,
        tasks: Vec<FileScanTask>,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let files = TableFiles {
            store: state.runtime_env().object_store(&self.access.store_url)?,
            reach: self.files.reach().clone(),
        };
        let with_deletes: Vec<FileScanTask> = tasks
            .iter()
            .filter(|t| !t.deletes.is_empty())
            .cloned()
            .collect();
        let index = manifests::index(&self.table()?, self.snapshot_id).await?;
        let mut deletes = position_deletes::plan_deletes(&index, &files, &with_deletes).await?;
        let mut file_stats: Vec<Arc<Statistics>> = Vec::with_capacity(tasks.len());
        let target = state.config().target_partitions().max(1);
        let mut rows = 0usize;
        let mut rows_known = true;
        // The order every file declares it was written in, when they all declare the same.
        let written_order = state
            .config()
            .get_extension::<crate::optimizer::Rewrites>()
            .is_none_or(|rewrites| rewrites.written_order);
        let ordering = if self.only_files.is_none() && written_order {
            self.written_order(&tasks, &index)
        } else {
            None
        };
        let mut pieces: Vec<Piece> = Vec::with_capacity(tasks.len());
        for task in tasks {
            let mut file =
                PartitionedFile::new(files.path(&task.data_file_path)?, task.file_size_in_bytes);
            let mut count = task.record_count;
            if let Some(found) = deletes.remove(&task.data_file_path) {
                count = Some(found.live_rows);
                file = file.with_extension(found.plan);
            }
            let mut stats = Statistics::new_unknown(&self.schema);
            match count {
                Some(count) => {
                    rows += count as usize;
                    stats.num_rows = Precision::Exact(count as usize);
                }
                None => rows_known = false,
            }
            if let Some(entry) = index.data.get(&task.data_file_path) {
                column_bounds(
                    &self.schema,
                    &self.ids,
                    entry,
                    !task.deletes.is_empty(),
                    &mut stats,
                );
                // A file whose rows are all deleted holds no row of its partition's value.
                if count.is_some_and(|c| c > 0)
                    && let Some(spec) = self.metadata().partition_spec_by_id(entry.spec_id)
                {
                    identity_constants(
                        &self.schema,
                        &self.ids,
                        spec,
                        entry.file.partition(),
                        &mut stats,
                    );
                }
            }
            let stats = Arc::new(stats);
            file_stats.push(stats.clone());
            pieces.push(Piece {
                file: file.with_statistics(stats),
                start: task.start,
                end: task.start + task.length,
            });
        }
        let ordering = ordering.and_then(|o| in_written_order(&mut pieces, o));
        let groups = match ordering {
            Some(_) => contiguous_groups(
                pieces,
                target,
                state.config().options().optimizer.repartition_file_min_size as u64,
            ),
            None => {
                // Largest first into the lightest group: balanced partitions. A rewrite keeps
                // the order it asked for (rows stay in the order they were written).
                if self.only_files.is_none() {
                    pieces.sort_by_key(|p| std::cmp::Reverse(p.end - p.start));
                }
                balanced_groups(pieces, target)
            }
        };
        // The table's statistics: the files' merged (bounds of bounds, summed null counts).
        let mut statistics =
            Statistics::try_merge_iter(file_stats.iter().map(|s| s.as_ref()), &self.schema)
                .unwrap_or_else(|_| Statistics::new_unknown(&self.schema));
        statistics.num_rows = if rows_known {
            Precision::Exact(rows)
        } else {
            Precision::Absent
        };
        statistics.total_byte_size = Precision::Absent;
        // The field ids travel with the scan's options, for a worker to map columns by them.
        let mut options = state.table_options().parquet.clone();
        options.key_value_metadata.insert(
            crate::scan::field_ids::FIELD_IDS_OPTION.to_string(),
            Some(self.ids.encode()),
        );
        let format = ParquetFormat::default().with_options(options);
        let source = format.file_source(self.schema.clone().into());
        let config = FileScanConfigBuilder::new(self.access.store_url.clone(), source)
            .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
            .with_output_ordering(ordering.into_iter().collect())
            .with_statistics(statistics)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .with_expr_adapter(Some(Arc::new(FieldIdAdapterFactory::new(self.ids.clone()))))
            .build();
        crate::scan::bounded_footer::bounded_scan(format.create_physical_plan(state, config).await?)
    }
}

/// The leading fields of a sort order that DataFusion can order rows by as Iceberg does:
/// identity transforms of columns of `schema` (found by their field ids, `ids`) that are not
/// floating point (Iceberg and DataFusion place NaN differently). Each with its column's index
/// and direction; `true` when that is every field of the order.
pub(crate) fn sort_columns(
    order: &SortOrder,
    schema: &Schema,
    ids: &FieldIds,
) -> (Vec<(usize, SortOptions)>, bool) {
    let mut columns = Vec::new();
    for field in &order.fields {
        let index = ids
            .position_in(schema, field.source_id)
            .filter(|_| field.transform == Transform::Identity);
        let Some(index) = index.filter(|&i| {
            !matches!(
                schema.field(i).data_type(),
                DataType::Float16 | DataType::Float32 | DataType::Float64
            )
        }) else {
            return (columns, false);
        };
        columns.push((
            index,
            SortOptions {
                descending: field.direction == SortDirection::Descending,
                nulls_first: field.null_order == NullOrder::First,
            },
        ));
    }
    (columns, true)
}

/// A byte range of a data file, one partition's share of it.
struct Piece {
    file: PartitionedFile,
    start: u64,
    end: u64,
}

impl Piece {
    /// The range is the whole file.
    fn whole(&self) -> bool {
        self.start == 0 && self.end >= self.file.object_meta.size
    }

    fn into_file(self) -> PartitionedFile {
        if self.whole() {
            self.file
        } else {
            self.file.with_range(self.start as i64, self.end as i64)
        }
    }
}

/// Pieces dealt to `target` groups, each to the group with the fewest bytes so far.
fn balanced_groups(pieces: Vec<Piece>, target: usize) -> Vec<Vec<PartitionedFile>> {
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); target.min(pieces.len())];
    let mut sizes = vec![0u64; groups.len()];
    for piece in pieces {
        let lightest = (0..sizes.len()).min_by_key(|&i| sizes[i]).unwrap_or(0);
        sizes[lightest] += piece.end - piece.start;
        groups[lightest].push(piece.into_file());
    }
    groups
}

/// Pieces, already in the order their rows sort, cut into at most `target` runs of about equal
/// bytes: each group reads one stretch of the sorted sequence, so each stays sorted. A file may
/// be split between two neighbouring groups (DataFusion reads the row groups whose middle lies in
/// a range). Less than `min_bytes` in all (DataFusion's `repartition_file_min_size`) stays one
/// group.
fn contiguous_groups(
    pieces: Vec<Piece>,
    target: usize,
    min_bytes: u64,
) -> Vec<Vec<PartitionedFile>> {
    let total: u64 = pieces.iter().map(|p| p.end - p.start).sum();
    if total < min_bytes || target <= 1 {
        return vec![pieces.into_iter().map(Piece::into_file).collect()];
    }
    let quota = total.div_ceil(target as u64);
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new()];
    let mut filled = 0u64;
    for mut piece in pieces {
        while piece.start < piece.end {
            if filled >= quota && groups.len() < target {
                groups.push(Vec::new());
                filled = 0;
            }
            let room = if groups.len() < target {
                quota - filled
            } else {
                u64::MAX
            };
            let take = room.min(piece.end - piece.start);
            let part = Piece {
                file: piece.file.clone(),
                start: piece.start,
                end: piece.start + take,
            };
            groups.last_mut().expect("a group").push(part.into_file());
            filled += take;
            piece.start += take;
        }
    }
    groups
}

/// Puts `pieces` in the order of `ordering`'s first column (by the files' bounds) and says the
/// ordering each group of consecutive pieces keeps: all of it when no two files' ranges of the
/// first column meet, only the first column when neighbours share a boundary value (rows of
/// both may then interleave on the later columns), none when ranges overlap, a bound is
/// missing, or the column may hold nulls (the pieces are then left as they were). Pieces of
/// one file must be consecutive ranges; they become one.
fn in_written_order(pieces: &mut Vec<Piece>, ordering: LexOrdering) -> Option<LexOrdering> {
    use std::cmp::Ordering;
    let first = ordering.first();
    let column = first.expr.downcast_ref::<Column>()?.index();
    let descending = first.options.descending;
    let bounds: Vec<(ScalarValue, ScalarValue)> = pieces
        .iter()
        .map(|p| {
            let c = p.file.statistics.as_ref()?.column_statistics.get(column)?;
            if c.null_count.get_value() != Some(&0) {
                return None;
            }
            Some((
                c.min_value.get_value()?.clone(),
                c.max_value.get_value()?.clone(),
            ))
        })
        .collect::<Option<_>>()?;
    let location = |i: usize| &pieces[i].file.object_meta.location;
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    let mut comparable = true;
    order.sort_by(|&a, &b| {
        let by_bound = if descending {
            bounds[b].1.partial_cmp(&bounds[a].1)
        } else {
            bounds[a].0.partial_cmp(&bounds[b].0)
        };
        by_bound
            .unwrap_or_else(|| {
                comparable = false;
                Ordering::Equal
            })
            .then_with(|| location(a).cmp(location(b)))
            .then_with(|| pieces[a].start.cmp(&pieces[b].start))
    });
    if !comparable {
        return None;
    }
    // Check the chain before touching `pieces`.
    let mut touching = false;
    for pair in order.windows(2) {
        let (previous, next) = (pair[0], pair[1]);
        if location(previous) == location(next) {
            if pieces[previous].end != pieces[next].start {
                return None;
            }
            continue;
        }
        // The previous file's last value against the next file's first.
        let (previous_end, next_start) = if descending {
            (&bounds[previous].0, &bounds[next].1)
        } else {
            (&bounds[previous].1, &bounds[next].0)
        };
        match (previous_end.partial_cmp(next_start)?, descending) {
            (Ordering::Equal, _) => touching = true,
            (Ordering::Less, false) | (Ordering::Greater, true) => {}
            _ => return None,
        }
    }
    let mut taken: Vec<Option<Piece>> = pieces.drain(..).map(Some).collect();
    for i in order {
        let piece = taken[i].take().expect("each piece once");
        match pieces.last_mut() {
            // A file's consecutive ranges become one.
            Some(last) if last.file.object_meta.location == piece.file.object_meta.location => {
                last.end = piece.end;
            }
            _ => pieces.push(piece),
        }
    }
    if touching {
        LexOrdering::new([first.clone()])
    } else {
        Some(ordering)
    }
}

/// Tells the scan that an identity-partitioned column holds one value in the whole file, as the
/// file's partition tuple says. DataFusion's Parquet scan then reads the column as that constant,
/// which also covers files that do not store the column at all (added or migrated files).
fn identity_constants(
    schema: &SchemaRef,
    ids: &FieldIds,
    spec: &PartitionSpec,
    partition: &Struct,
    stats: &mut Statistics,
) {
    for (spec_field, value) in spec.fields().iter().zip(partition.iter()) {
        if spec_field.transform != Transform::Identity {
            continue;
        }
        let Some(Literal::Primitive(value)) = value else {
            continue;
        };
        let Some(index) = ids.position_in(schema, spec_field.source_id) else {
            continue;
        };
        let Some(scalar) = scalar_of(value, schema.field(index).data_type()) else {
            continue;
        };
        let column = &mut stats.column_statistics[index];
        column.min_value = Precision::Exact(scalar.clone());
        column.max_value = Precision::Exact(scalar);
        column.null_count = Precision::Exact(0);
    }
}

/// A data file's column bounds and null counts from its manifest entry, for the columns whose
/// types have plain scalars. Bounds are inexact (Iceberg may truncate them, and deletes leave
/// them loose); null counts are exact unless the file has deletes.
fn column_bounds(
    schema: &SchemaRef,
    ids: &FieldIds,
    entry: &manifests::DataFileEntry,
    has_deletes: bool,
    stats: &mut Statistics,
) {
    let file = &entry.file;
    for (index, field) in schema.fields().iter().enumerate() {
        let Some(id) = ids.id_of(field.name()) else {
            continue;
        };
        let column = &mut stats.column_statistics[index];
        // Iceberg leaves NaN out of float bounds, while DataFusion orders NaN above every
        // number: bounds of a float column that may hold NaN would prune wrongly.
        let floating = matches!(field.data_type(), DataType::Float32 | DataType::Float64);
        let bounds_usable = !floating || file.nan_value_counts().get(&id) == Some(&0);
        if !bounds_usable {
            continue;
        }
        if let Some(lower) = file
            .lower_bounds()
            .get(&id)
            .and_then(|d| scalar_of(d.literal(), field.data_type()))
        {
            column.min_value = Precision::Inexact(lower);
        }
        if let Some(upper) = file
            .upper_bounds()
            .get(&id)
            .and_then(|d| scalar_of(d.literal(), field.data_type()))
        {
            column.max_value = Precision::Inexact(upper);
        }
        if let Some(&nulls) = file.null_value_counts().get(&id) {
            column.null_count = if has_deletes {
                Precision::Inexact(nulls as usize)
            } else {
                Precision::Exact(nulls as usize)
            };
        }
    }
}

/// A partition value as a scalar of the column's Arrow type, for the types identity partitions
/// commonly use.
fn scalar_of(value: &PrimitiveLiteral, data_type: &DataType) -> Option<ScalarValue> {
    use PrimitiveLiteral as L;
    Some(match (value, data_type) {
        (L::Boolean(v), DataType::Boolean) => ScalarValue::Boolean(Some(*v)),
        (L::Int(v), DataType::Int32) => ScalarValue::Int32(Some(*v)),
        (L::Int(v), DataType::Date32) => ScalarValue::Date32(Some(*v)),
        (L::Long(v), DataType::Int64) => ScalarValue::Int64(Some(*v)),
        (L::Long(v), DataType::Time64(TimeUnit::Microsecond)) => {
            ScalarValue::Time64Microsecond(Some(*v))
        }
        (L::Long(v), DataType::Timestamp(TimeUnit::Microsecond, tz)) => {
            ScalarValue::TimestampMicrosecond(Some(*v), tz.clone())
        }
        (L::Long(v), DataType::Timestamp(TimeUnit::Nanosecond, tz)) => {
            ScalarValue::TimestampNanosecond(Some(*v), tz.clone())
        }
        (L::Float(v), DataType::Float32) => ScalarValue::Float32(Some(v.0)),
        (L::Double(v), DataType::Float64) => ScalarValue::Float64(Some(v.0)),
        (L::String(v), DataType::Utf8View) => ScalarValue::Utf8View(Some(v.clone())),
        (L::Int128(v), DataType::Decimal128(p, s)) => ScalarValue::Decimal128(Some(*v), *p, *s),
        _ => return None,
    })
}

/// Tasks with equality deletes grouped by the equality delete files that apply to them (most
/// data files of a table share them); each task keeps only its position deletes.
fn by_equality_deletes(
    tasks: Vec<FileScanTask>,
) -> Vec<(Vec<FileScanTaskDeleteFile>, Vec<FileScanTask>)> {
    let mut groups: std::collections::BTreeMap<Vec<String>, (Vec<_>, Vec<_>)> = Default::default();
    for mut task in tasks {
        let (equality, positional): (Vec<_>, Vec<_>) = std::mem::take(&mut task.deletes)
            .into_iter()
            .partition(|d| d.file_type == DataContentType::EqualityDeletes);
        task.deletes = positional;
        let mut key: Vec<String> = equality.iter().map(|d| d.file_path.clone()).collect();
        key.sort_unstable();
        let group = groups.entry(key).or_insert_with(|| (equality, Vec::new()));
        group.1.push(task);
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece of file `name` (`size` bytes) whose column 0 lies in `low..=high`.
    fn piece(name: &str, size: u64, low: i64, high: i64) -> Piece {
        let mut stats = Statistics::new_unknown(&Arc::new(Schema::new(vec![Field::new(
            "k",
            DataType::Int64,
            false,
        )])));
        let column = &mut stats.column_statistics[0];
        column.min_value = Precision::Inexact(ScalarValue::Int64(Some(low)));
        column.max_value = Precision::Inexact(ScalarValue::Int64(Some(high)));
        column.null_count = Precision::Exact(0);
        Piece {
            file: PartitionedFile::new(name, size).with_statistics(Arc::new(stats)),
            start: 0,
            end: size,
        }
    }

    fn by_k_then_v() -> LexOrdering {
        let column =
            |name, index| PhysicalSortExpr::new_default(Arc::new(Column::new(name, index)));
        LexOrdering::new([column("k", 0), column("v", 1)]).unwrap()
    }

    fn ranges(groups: &[Vec<PartitionedFile>]) -> Vec<Vec<(String, u64, u64)>> {
        groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|f| {
                        let (start, end) = f.range();
                        (f.object_meta.location.to_string(), start, end)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn files_are_chained_by_their_bounds_and_cut_into_equal_runs() {
        let mut pieces = vec![
            piece("c", 30 << 20, 201, 300),
            piece("a", 30 << 20, 1, 100),
            piece("b", 30 << 20, 101, 200),
        ];
        // Apart, the files keep the whole order.
        let ordering = in_written_order(&mut pieces, by_k_then_v()).unwrap();
        assert_eq!(ordering.len(), 2);
        let groups = contiguous_groups(pieces, 2, 10 << 20);
        let mib = 1 << 20;
        assert_eq!(
            ranges(&groups),
            vec![
                vec![("a".into(), 0, 30 * mib), ("b".into(), 0, 15 * mib)],
                vec![("b".into(), 15 * mib, 30 * mib), ("c".into(), 0, 30 * mib)],
            ]
        );
        // A whole file is handed over without a range.
        assert!(groups[0][0].range.is_none() && groups[0][1].range.is_some());
    }

    #[test]
    fn files_sharing_a_boundary_key_keep_only_the_first_column_order() {
        let mut pieces = vec![piece("b", 1, 100, 200), piece("a", 1, 1, 100)];
        let ordering = in_written_order(&mut pieces, by_k_then_v()).unwrap();
        assert_eq!(ordering.len(), 1);
        let names: Vec<String> = pieces
            .iter()
            .map(|p| p.file.object_meta.location.to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn overlapping_or_unbounded_files_declare_no_order() {
        let mut overlapping = vec![piece("b", 1, 100, 200), piece("a", 1, 1, 150)];
        assert!(in_written_order(&mut overlapping, by_k_then_v()).is_none());
        // Left as they were, to be read without an order.
        assert_eq!(overlapping.len(), 2);
        assert_eq!(overlapping[0].file.object_meta.location.to_string(), "b");
        let mut with_nulls = vec![piece("a", 1, 1, 100)];
        let mut stats = (*with_nulls[0].file.statistics.clone().unwrap()).clone();
        stats.column_statistics[0].null_count = Precision::Exact(3);
        with_nulls[0].file.statistics = Some(Arc::new(stats));
        assert!(in_written_order(&mut with_nulls, by_k_then_v()).is_none());
    }

    #[test]
    fn little_data_stays_one_group() {
        let pieces = vec![piece("a", 1 << 20, 1, 10), piece("b", 1 << 20, 11, 20)];
        assert_eq!(contiguous_groups(pieces, 4, 10 << 20).len(), 1);
    }
}
