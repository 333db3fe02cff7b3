//! Whether a plan travels intact: encoded as a coordinator encodes a task's plan and decoded
//! as a worker decodes it, with the worker's rewrites on both, it must come back the same —
//! its text, and what the text does not show of each scan (the access plans of its files,
//! its field-id adapter, its bounded reader).

use std::fmt::Write;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::physical_plan::ParquetSource;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{DistributedCodec, DistributedExt};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;

use super::codec::FloeCodec;
use super::scan::FloeScanExec;
use crate::SqlEngine;

/// `Ok` when `plan` (as [`SqlEngine::distributable_plan`] makes it) comes back from its trip
/// to a worker of `engine`'s the same; the error shows both versions.
pub async fn round_trip(engine: &SqlEngine, plan: Arc<dyn ExecutionPlan>) -> Result<()> {
    engine
        .register_warehouses()
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let mut config = SessionConfig::new();
    engine.apply_session_options(&mut config);
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(
            engine
                .worker_runtime()
                .map_err(|e| DataFusionError::External(Box::new(e)))?,
        )
        .with_distributed_user_codec(FloeCodec)
        .build();
    let mut state = state;
    crate::register_functions(&mut state)?;
    let codec = DistributedCodec::new_combined_with_user(state.config());
    let bytes = PhysicalPlanNode::try_from_physical_plan(plan.clone(), &codec)?.encode_to_vec();
    let decoded = PhysicalPlanNode::decode(bytes.as_slice())
        .map_err(|e| DataFusionError::Internal(e.to_string()))?
        .try_into_physical_plan(&state.task_ctx(), &codec)?;
    let rules = crate::optimizer::Rules::on_workers(&engine.config().rewrites);
    let options = state.config_options();
    let (mut sent, mut arrived) = (plan, decoded);
    for rule in &rules {
        sent = rule.optimize(sent, options)?;
        arrived = rule.optimize(arrived, options)?;
    }
    let (sent, arrived) = (described(&sent)?, described(&arrived)?);
    if sent != arrived {
        return Err(DataFusionError::Execution(format!(
            "the plan changed on its way to a worker; sent:\n{sent}\narrived:\n{arrived}"
        )));
    }
    Ok(())
}

/// `plan`'s text, then each scan's files with their ranges and access plans, its expression
/// adapter and its reader.
pub(super) fn described(plan: &Arc<dyn ExecutionPlan>) -> Result<String> {
    let mut text = displayable(plan.as_ref()).indent(true).to_string();
    plan.apply(|node| {
        let Some(scan) = node.downcast_ref::<FloeScanExec>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let config = scan.config();
        let reader = config
            .file_source()
            .downcast_ref::<ParquetSource>()
            .and_then(|s| s.parquet_file_reader_factory().map(|f| format!("{f:?}")))
            .unwrap_or_default();
        let reader: String = reader.chars().take_while(|c| c.is_alphanumeric()).collect();
        let _ = writeln!(
            text,
            "scan: adapter {:?}, reader {reader}",
            config.expr_adapter_factory
        );
        for (g, group) in config.file_groups.iter().enumerate() {
            for file in group.files() {
                let _ = writeln!(
                    text,
                    "  group {g}: {} {:?} {:?}",
                    file.object_meta.location,
                    file.range,
                    file.extension::<ParquetAccessPlan>()
                );
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(text)
}
