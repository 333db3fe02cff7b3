//! How Floe's plan nodes travel: the codec registered on coordinators and
//! workers alike.
//!
//! | Node or expression | Written as |
//! |---|---|
//! | [`FloeScanExec`] | DataFusion's encoding of the Parquet scan, plus each file's access plan; the field-id adapter and the bounded-footer reader are put back on arrival |
//! | `IcebergEqualityDeleteExec` | the deleted keys (Arrow row format) and their columns |
//! | `FewGroupsExec` | the `AggregateExec` it replaces |
//!
//! Floe's expressions (`Conjunction`, `PartsLike`, `Decimal64Arithmetic`) do not travel:
//! DataFusion 54's composed codec, which DataFusion-distributed encodes plans with, hands
//! expressions to none of its codecs. Their rules run on the worker instead, over each task
//! plan it is sent ([`super::worker`]), and make the same expressions there.
//!
//! Runtime filters (the collected build keys and the filters reading them) and shared
//! aggregations join two places of one plan through memory; a distributed session does not
//! make them (see [`super`]), and the codec refuses them rather than dropping them.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion_proto::physical_plan::{
    AsExecutionPlan, DefaultPhysicalExtensionCodec, PhysicalExtensionCodec,
};
use datafusion_proto::protobuf::PhysicalPlanNode;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use prost::Message;

use super::scan::FloeScanExec;
use crate::optimizer::few_groups::FewGroupsExec;
use crate::scan::equality_deletes::{EqualityDeleteExec, KeySet};
use crate::scan::field_ids::{FIELD_IDS_OPTION, FieldIdAdapterFactory, FieldIds};

const SCAN: u32 = 1;
const EQUALITY_DELETES: u32 = 2;
const FEW_GROUPS: u32 = 3;
/// A row and column policy's top ([`crate::policy::PolicyExec`]): its description as UTF-8.
const POLICY: u32 = 4;

/// The most row selectors one travelled scan may hold, and the most deleted keys one
/// equality set may: each becomes an allocation on the worker larger than its bytes on the
/// wire, so a message within the size limit still cannot ask for unbounded memory.
const MOST_SELECTORS: usize = 1 << 24;
const MOST_KEYS: usize = 1 << 24;

/// What every encoded node or expression starts with: which kind it is.
#[derive(Clone, PartialEq, Message)]
struct Envelope {
    #[prost(uint32, tag = "1")]
    kind: u32,
    #[prost(bytes = "vec", tag = "2")]
    body: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct ScanNode {
    /// DataFusion's `PhysicalPlanNode` of the Parquet scan.
    #[prost(bytes = "vec", tag = "1")]
    scan: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    access: Vec<FileAccess>,
    /// Set on a task that takes its files as work units.
    #[prost(message, optional, tag = "3")]
    units: Option<UnitsNode>,
    /// The table's field ids the scan maps files' columns by ([`FieldIds::encode`]): the
    /// adapter does not travel, and DataFusion 54's codec drops the Parquet options'
    /// key-value metadata that carries them in the process.
    #[prost(string, optional, tag = "4")]
    field_ids: Option<String>,
}

/// The field ids a Floe scan carries in its Parquet options ([`FIELD_IDS_OPTION`]).
fn scan_field_ids(scan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    crate::optimizer::utils::file_scan(scan)?
        .file_source()
        .downcast_ref::<datafusion::datasource::physical_plan::ParquetSource>()?
        .table_parquet_options()
        .key_value_metadata
        .get(FIELD_IDS_OPTION)
        .cloned()
        .flatten()
}

/// Where a stealing scan task takes its units ([`super::units`]).
#[derive(Clone, PartialEq, Message)]
struct UnitsNode {
    #[prost(string, tag = "1")]
    coordinator: String,
    #[prost(bytes = "vec", tag = "2")]
    feed: Vec<u8>,
    #[prost(uint32, tag = "3")]
    task: u32,
    #[prost(uint32, tag = "4")]
    partitions: u32,
}

/// The access plan of the `file`-th file of the `group`-th group.
#[derive(Clone, PartialEq, Message)]
struct FileAccess {
    #[prost(uint32, tag = "1")]
    group: u32,
    #[prost(uint32, tag = "2")]
    file: u32,
    #[prost(message, repeated, tag = "3")]
    row_groups: Vec<RowGroup>,
}

/// One row group: scanned whole, skipped, or read by selectors (rows, skipped or read).
#[derive(Clone, PartialEq, Message)]
struct RowGroup {
    /// 0 scan, 1 skip, 2 selection.
    #[prost(uint32, tag = "1")]
    how: u32,
    #[prost(uint64, repeated, tag = "2")]
    rows: Vec<u64>,
    #[prost(bool, repeated, tag = "3")]
    skip: Vec<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct EqualityNode {
    #[prost(message, repeated, tag = "1")]
    sets: Vec<KeySetNode>,
}

#[derive(Clone, PartialEq, Message)]
struct KeySetNode {
    #[prost(uint32, repeated, tag = "1")]
    columns: Vec<u32>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    keys: Vec<Vec<u8>>,
}

fn invalid(what: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("a Floe plan node could not be decoded: {what}"))
}

fn decode_message<M: Message + Default>(bytes: &[u8]) -> Result<M> {
    M::decode(bytes).map_err(invalid)
}

/// The codec of Floe's plan nodes.
#[derive(Debug, Default)]
pub struct FloeCodec;

impl FloeCodec {
    /// A plan held inside a Floe node (the Parquet scan, an aggregate over a placeholder)
    /// is written with DataFusion's own codec: it holds no Floe node, and decoding it with
    /// a codec that knows none means a crafted message cannot nest Floe nodes inside each
    /// other without end (each level would be a fresh decode, past prost's depth limit).
    fn encode_plan(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
        Ok(
            PhysicalPlanNode::try_from_physical_plan(plan, &DefaultPhysicalExtensionCodec {})?
                .encode_to_vec(),
        )
    }

    fn decode_plan(&self, bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
        decode_message::<PhysicalPlanNode>(bytes)?
            .try_into_physical_plan(ctx, &DefaultPhysicalExtensionCodec {})
    }

    fn encode_scan(&self, scan: &FloeScanExec) -> Result<Vec<u8>> {
        let mut access = Vec::new();
        for (g, group) in scan.config().file_groups.iter().enumerate() {
            for (f, file) in group.files().iter().enumerate() {
                // Floe attaches nothing else to a file; anything else would not travel.
                if file.extensions.len()
                    > usize::from(file.extension::<ParquetAccessPlan>().is_some())
                {
                    return Err(DataFusionError::Internal(
                        "a Floe scan file carries an extension the codec does not know".into(),
                    ));
                }
                let Some(plan) = file.extension::<ParquetAccessPlan>() else {
                    continue;
                };
                access.push(FileAccess {
                    group: g as u32,
                    file: f as u32,
                    row_groups: plan.inner().iter().map(row_group_of).collect(),
                });
            }
        }
        let units = scan.unit_source().map(|(source, partitions)| UnitsNode {
            coordinator: source.coordinator.to_string(),
            feed: source.feed.as_bytes().to_vec(),
            task: source.task,
            partitions: partitions as u32,
        });
        Ok(ScanNode {
            scan: self.encode_plan(scan.scan().clone())?,
            access,
            units,
            field_ids: scan_field_ids(scan.scan()),
        }
        .encode_to_vec())
    }

    fn decode_scan(&self, body: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
        let node: ScanNode = decode_message(body)?;
        let selectors: usize = node
            .access
            .iter()
            .flat_map(|a| &a.row_groups)
            .map(|g| g.rows.len())
            .sum();
        if selectors > MOST_SELECTORS {
            return Err(invalid(format!(
                "a scan's access plans hold {selectors} row selectors, more than {MOST_SELECTORS}"
            )));
        }
        let plan = self.decode_plan(&node.scan, ctx)?;
        let config = crate::optimizer::utils::file_scan(&plan)
            .ok_or_else(|| invalid("the scan is not a file scan"))?;
        let mut groups: Vec<Vec<_>> = config
            .file_groups
            .iter()
            .map(|g| g.files().to_vec())
            .collect();
        for access in node.access {
            let file = groups
                .get_mut(access.group as usize)
                .and_then(|g| g.get_mut(access.file as usize))
                .ok_or_else(|| invalid("an access plan names a file the scan lacks"))?;
            let row_groups = access
                .row_groups
                .into_iter()
                .map(row_group_access)
                .collect::<Result<Vec<_>>>()?;
            *file = file
                .clone()
                .with_extension(ParquetAccessPlan::new(row_groups));
        }
        // The adapter does not travel; its field ids do, and go back into the Parquet
        // options, where a scan keeps them.
        let ids = node
            .field_ids
            .as_deref()
            .map(|text| {
                FieldIds::decode(text).ok_or_else(|| invalid("a scan's field ids do not read"))
            })
            .transpose()?
            .unwrap_or_default();
        let mut options = config
            .file_source()
            .downcast_ref::<datafusion::datasource::physical_plan::ParquetSource>()
            .ok_or_else(|| invalid("the scan does not read Parquet"))?
            .table_parquet_options()
            .clone();
        if let Some(text) = node.field_ids {
            options
                .key_value_metadata
                .insert(FIELD_IDS_OPTION.to_string(), Some(text));
        }
        let source = config
            .file_source()
            .downcast_ref::<datafusion::datasource::physical_plan::ParquetSource>()
            .ok_or_else(|| invalid("the scan does not read Parquet"))?
            .clone()
            .with_table_parquet_options(options);
        let config = FileScanConfigBuilder::from(config.clone())
            .with_source(Arc::new(source))
            .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
            .with_expr_adapter(Some(Arc::new(FieldIdAdapterFactory::new(ids))))
            .build();
        let scan = crate::scan::bounded_footer::with_bounded_reader(
            DataSourceExec::from_data_source(config),
            ctx,
        )?;
        let Some(units) = node.units else {
            return Ok(Arc::new(FloeScanExec::new(scan)?));
        };
        let source = super::units::UnitSource {
            coordinator: url::Url::parse(&units.coordinator)
                .map_err(|e| invalid(format!("a coordinator's URL: {e}")))?,
            feed: uuid::Uuid::from_slice(&units.feed)
                .map_err(|_| invalid("a feed id is 16 bytes"))?,
            task: units.task,
        };
        let exec = FloeScanExec::stealing(scan, source, units.partitions as usize)
            .map_err(|e| invalid(e.message()))?;
        Ok(Arc::new(exec))
    }

    fn encode_equality(&self, exec: &EqualityDeleteExec) -> Vec<u8> {
        EqualityNode {
            sets: exec
                .sets()
                .iter()
                .map(|set| KeySetNode {
                    columns: set.columns().iter().map(|&c| c as u32).collect(),
                    keys: set.keys().map(|k| k.to_vec()).collect(),
                })
                .collect(),
        }
        .encode_to_vec()
    }

    fn decode_equality(
        &self,
        body: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return Err(invalid("an equality delete filter takes one input"));
        };
        let node: EqualityNode = decode_message(body)?;
        let schema = input.schema();
        let sets = node
            .sets
            .into_iter()
            .map(|set| {
                let columns: Vec<usize> = set.columns.iter().map(|&c| c as usize).collect();
                if columns.is_empty() || columns.iter().any(|&c| c >= schema.fields().len()) {
                    return Err(invalid("an equality column is outside the scan"));
                }
                if set.keys.len() > MOST_KEYS {
                    return Err(invalid(format!(
                        "an equality delete set holds {} keys, more than {MOST_KEYS}",
                        set.keys.len()
                    )));
                }
                KeySet::from_parts(columns, &schema, set.keys)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(EqualityDeleteExec::new(input.clone(), sets)))
    }

    /// The aggregate of a [`FewGroupsExec`] over a placeholder of its input's schema: its
    /// input travels as the node's child.
    fn encode_few_groups(&self, exec: &FewGroupsExec) -> Result<Vec<u8>> {
        let aggregate = exec.aggregate();
        let [input] = aggregate.children()[..] else {
            return Err(DataFusionError::Internal(
                "an aggregate has one input".into(),
            ));
        };
        let placeholder: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(input.schema()));
        self.encode_plan(aggregate.clone().with_new_children(vec![placeholder])?)
    }

    fn decode_few_groups(
        &self,
        body: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return Err(invalid("a few-groups aggregation takes one input"));
        };
        let aggregate = self
            .decode_plan(body, ctx)?
            .with_new_children(vec![input.clone()])?;
        Ok(Arc::new(FewGroupsExec::over(aggregate)?))
    }
}

fn row_group_of(access: &RowGroupAccess) -> RowGroup {
    match access {
        RowGroupAccess::Scan => RowGroup {
            how: 0,
            ..Default::default()
        },
        RowGroupAccess::Skip => RowGroup {
            how: 1,
            ..Default::default()
        },
        RowGroupAccess::Selection(selection) => {
            let (rows, skip) = selection
                .iter()
                .map(|s| (s.row_count as u64, s.skip))
                .unzip();
            RowGroup { how: 2, rows, skip }
        }
    }
}

fn row_group_access(group: RowGroup) -> Result<RowGroupAccess> {
    Ok(match group.how {
        0 => RowGroupAccess::Scan,
        1 => RowGroupAccess::Skip,
        2 if group.rows.len() == group.skip.len() => {
            let selectors: Vec<RowSelector> = group
                .rows
                .iter()
                .zip(&group.skip)
                .map(|(&rows, &skip)| {
                    let rows = usize::try_from(rows).map_err(invalid)?;
                    Ok(if skip {
                        RowSelector::skip(rows)
                    } else {
                        RowSelector::select(rows)
                    })
                })
                .collect::<Result<_>>()?;
            RowGroupAccess::Selection(RowSelection::from(selectors))
        }
        _ => return Err(invalid("a row group access of unknown shape")),
    })
}

fn envelope(kind: u32, body: Vec<u8>, buf: &mut Vec<u8>) {
    Envelope { kind, body }.encode(buf).expect("a Vec grows");
}

impl PhysicalExtensionCodec for FloeCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Envelope { kind, body } = decode_message(buf)?;
        match kind {
            SCAN => self.decode_scan(&body, ctx),
            EQUALITY_DELETES => self.decode_equality(&body, inputs),
            FEW_GROUPS => self.decode_few_groups(&body, inputs, ctx),
            POLICY => match inputs {
                [input] => Ok(Arc::new(crate::policy::PolicyExec::new(
                    input.clone(),
                    String::from_utf8(body).map_err(invalid)?,
                ))),
                _ => Err(invalid("a policy's top takes one input")),
            },
            other => Err(invalid(format!("unknown node kind {other}"))),
        }
    }

    fn try_encode(&self, node: Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Result<()> {
        if let Some(scan) = node.downcast_ref::<FloeScanExec>() {
            envelope(SCAN, self.encode_scan(scan)?, buf);
        } else if let Some(exec) = node.downcast_ref::<EqualityDeleteExec>() {
            envelope(EQUALITY_DELETES, self.encode_equality(exec), buf);
        } else if let Some(exec) = node.downcast_ref::<FewGroupsExec>() {
            envelope(FEW_GROUPS, self.encode_few_groups(exec)?, buf);
        } else if let Some(exec) = node.downcast_ref::<crate::policy::PolicyExec>() {
            envelope(POLICY, exec.description().as_bytes().to_vec(), buf);
        } else {
            return Err(DataFusionError::NotImplemented(format!(
                "{} cannot run on another node",
                node.name()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::listing::PartitionedFile;
    use datafusion::datasource::physical_plan::ParquetSource;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::prelude::SessionContext;
    use object_store::memory::InMemory;

    use super::*;
    use crate::distributed::round_trip::described;
    use crate::scan::field_ids::FIELD_ID_KEY;

    #[tokio::test]
    async fn a_scans_access_plans_adapter_and_reader_travel() {
        let context = SessionContext::new();
        let url = ObjectStoreUrl::parse("floe://wh-test").unwrap();
        context.register_object_store(url.as_ref(), Arc::new(InMemory::new()));
        let ctx = context.task_ctx();
        let field = Field::new("k", DataType::Int64, false)
            .with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), "1".to_string())]));
        let schema = Arc::new(Schema::new(vec![field]));
        let deleted = ParquetAccessPlan::new(vec![
            RowGroupAccess::Scan,
            RowGroupAccess::Skip,
            RowGroupAccess::Selection(RowSelection::from(vec![
                RowSelector::skip(3),
                RowSelector::select(5),
                RowSelector::skip(1),
            ])),
        ]);
        let files = vec![
            PartitionedFile::new("t/data/a.parquet", 1000).with_extension(deleted),
            PartitionedFile::new("t/data/b.parquet", 2000).with_range(0, 1000),
        ];
        let ids = crate::scan::field_ids::FieldIds::of_arrow(&schema);
        let mut options = datafusion::config::TableParquetOptions::default();
        options.key_value_metadata.insert(
            crate::scan::field_ids::FIELD_IDS_OPTION.to_string(),
            Some(ids.encode()),
        );
        let source = ParquetSource::new(schema).with_table_parquet_options(options);
        let config = FileScanConfigBuilder::new(url, Arc::new(source))
            .with_file_groups(vec![FileGroup::new(files), FileGroup::new(vec![])])
            .with_expr_adapter(Some(Arc::new(FieldIdAdapterFactory::new(ids.clone()))))
            .build();
        let scan = crate::scan::bounded_footer::with_bounded_reader(
            DataSourceExec::from_data_source(config),
            &ctx,
        )
        .unwrap();
        let travel = |sent: Arc<dyn ExecutionPlan>| {
            let bytes = PhysicalPlanNode::try_from_physical_plan(sent, &FloeCodec)
                .unwrap()
                .encode_to_vec();
            PhysicalPlanNode::decode(bytes.as_slice())
                .unwrap()
                .try_into_physical_plan(&ctx, &FloeCodec)
                .unwrap()
        };
        let sent: Arc<dyn ExecutionPlan> = Arc::new(FloeScanExec::new(scan.clone()).unwrap());
        let arrived = travel(sent.clone());
        // The field ids the worker maps columns by arrive with the scan.
        let arrived_scan = arrived
            .downcast_ref::<FloeScanExec>()
            .unwrap()
            .scan()
            .clone();
        let carried = crate::optimizer::utils::file_scan(&arrived_scan)
            .unwrap()
            .file_source()
            .downcast_ref::<ParquetSource>()
            .unwrap()
            .table_parquet_options()
            .key_value_metadata
            .get(crate::scan::field_ids::FIELD_IDS_OPTION)
            .cloned()
            .flatten();
        assert_eq!(carried.as_deref(), Some(ids.encode().as_str()));
        let (sent, arrived) = (described(&sent).unwrap(), described(&arrived).unwrap());
        assert_eq!(sent, arrived);
        assert!(sent.contains("Selection"), "{sent}");
        assert!(sent.contains("FieldIdAdapterFactory"), "{sent}");
        assert!(sent.contains("reader BoundedFactory"), "{sent}");

        // A task taking work units keeps where it takes them and its partition count.
        let source = crate::distributed::units::UnitSource {
            coordinator: url::Url::parse("https://coordinator:50051").unwrap(),
            feed: uuid::Uuid::new_v4(),
            task: 2,
        };
        let stealing = FloeScanExec::stealing(scan, source.clone(), 3).unwrap();
        let arrived = travel(Arc::new(stealing));
        let arrived = arrived.downcast_ref::<FloeScanExec>().unwrap();
        assert_eq!(arrived.unit_source(), Some((&source, 3)));
        assert_eq!(arrived.properties().partitioning.partition_count(), 3);
        assert!(
            described(&(Arc::new(FloeScanExec::new(arrived.scan().clone()).unwrap()) as _))
                .unwrap()
                .contains("Selection")
        );
    }

    /// A crafted message that nests scans in scans ten thousand deep is refused at the second
    /// level, not followed down until the worker's stack runs out.
    #[test]
    fn scans_nested_in_scans_are_refused_not_followed() {
        use datafusion_proto::protobuf::PhysicalExtensionNode;
        use datafusion_proto::protobuf::physical_plan_node::PhysicalPlanType;
        let mut node = Vec::new();
        for _ in 0..10_000 {
            let inner = PhysicalPlanNode {
                physical_plan_type: Some(PhysicalPlanType::Extension(PhysicalExtensionNode {
                    node,
                    inputs: vec![],
                })),
            };
            let scan = ScanNode {
                scan: inner.encode_to_vec(),
                access: vec![],
                units: None,
                field_ids: None,
            };
            node = Envelope {
                kind: SCAN,
                body: scan.encode_to_vec(),
            }
            .encode_to_vec();
        }
        let ctx = SessionContext::new().task_ctx();
        let err = FloeCodec.try_decode(&node, &[], &ctx).unwrap_err();
        assert!(err.to_string().contains("xtension"), "{err}");
    }

    #[test]
    fn a_row_group_access_of_unknown_shape_is_refused() {
        let odd = RowGroup {
            how: 7,
            ..Default::default()
        };
        assert!(row_group_access(odd).is_err());
        let uneven = RowGroup {
            how: 2,
            rows: vec![1, 2],
            skip: vec![true],
        };
        assert!(row_group_access(uneven).is_err());
    }
}
