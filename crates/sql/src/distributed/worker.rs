//! The worker service: DataFusion-distributed's `Worker`, running the tasks it is sent in a
//! session with Floe's settings, codec and the warehouses' object stores, behind the check
//! of the cluster's secret. Each task plan gets Floe's expression rewrites here (they do not
//! travel; see [`super::codec`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext, WorkerSessionBuilder,
};

use super::auth::{ClusterSecret, RequireSecret, SecretChannels};
use super::codec::FloeCodec;
use crate::{SqlEngine, SqlError};

/// Largest message a worker decodes (a task's plan, a batch of work units).
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// The gRPC routes of a worker running `engine`'s tasks for the cluster of `secret`.
pub fn worker_routes(
    engine: Arc<SqlEngine>,
    secret: ClusterSecret,
) -> Result<tonic::service::Routes, SqlError> {
    let session = WorkerSession {
        engine: engine.clone(),
        channels: SecretChannels::new(secret.clone()),
        rules: Arc::new(crate::optimizer::Rules::on_workers(
            &engine.config().rewrites,
        )),
    };
    let worker = Worker::from_session_builder(session)
        .with_runtime_env(engine.worker_runtime()?)
        .with_version(env!("CARGO_PKG_VERSION"));
    let server = worker
        .into_worker_server()
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let checked =
        tonic::service::interceptor::InterceptedService::new(server, RequireSecret(secret));
    Ok(tonic::service::Routes::new(checked))
}

struct WorkerSession {
    engine: Arc<SqlEngine>,
    channels: SecretChannels,
    /// Floe's expression rewrites, run over each task plan ([`crate::optimizer::Rules::on_workers`]).
    rules: Arc<Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>>,
}

#[async_trait]
impl WorkerSessionBuilder for WorkerSession {
    async fn build_session_state(&self, ctx: WorkerQueryContext) -> Result<SessionState> {
        // A task may read any warehouse: their stores are registered before its plan is
        // decoded.
        self.engine
            .register_warehouses()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut builder = ctx.builder;
        if let Some(config) = builder.config() {
            self.engine.apply_session_options(config);
        }
        let rules = self.rules.clone();
        Ok(builder
            .with_distributed_user_codec(FloeCodec)
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_worker_plan_rewrite_handler(move |ev: WorkerPlanRewriteEvent| {
                let mut plan = ev.plan;
                for rule in rules.iter() {
                    plan = rule.optimize(plan, ev.session_config.options())?;
                }
                Ok(WorkerPlanRewriteEventResponse::new(plan))
            })
            .build())
    }
}
