//! The worker service: DataFusion-distributed's `Worker`, running the tasks it is sent in a
//! session with Floe's settings, codec and the warehouses' object stores, behind the check
//! of the cluster's secret. Each task plan has its runtime filters linked
//! ([`super::filters`]), then gets Floe's runtime filters and expression rewrites here (they
//! do not travel; see [`super::codec`]).

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
use super::filters::{FilterClient, RemoteBoard};
use super::units::UnitClient;
use crate::{SqlEngine, SqlError};

/// Largest message a worker decodes (a task's plan, a batch of work units).
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// The header naming the warehouses (by id) whose object stores a task's statement reads.
const STORES_HEADER: &str = "x-floe-warehouse-stores";

/// Most warehouses named in [`STORES_HEADER`]; a statement over more sends none, and its
/// workers look every warehouse up, as for a coordinator that sends no header.
const MOST_NAMED_STORES: usize = 256;

/// The headers a coordinator sends with each task of a statement reading `stores`.
pub(crate) fn stores_header(stores: &[uuid::Uuid]) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    if stores.len() <= MOST_NAMED_STORES {
        let ids: Vec<String> = stores.iter().map(uuid::Uuid::to_string).collect();
        if let Ok(value) = http::HeaderValue::from_str(&ids.join(",")) {
            headers.insert(STORES_HEADER, value);
        }
    }
    headers
}

/// The warehouses `headers` name, or `None` when they name none or cannot be read.
fn named_stores(headers: &http::HeaderMap) -> Option<Vec<uuid::Uuid>> {
    let value = headers.get(STORES_HEADER)?.to_str().ok()?;
    if value.is_empty() {
        return Some(Vec::new());
    }
    value
        .split(',')
        .take(MOST_NAMED_STORES + 1)
        .map(|id| id.parse().ok())
        .collect::<Option<Vec<_>>>()
        .filter(|ids| ids.len() <= MOST_NAMED_STORES)
}

/// The gRPC routes of a worker running `engine`'s tasks for the cluster of `secret`.
pub fn worker_routes(
    engine: Arc<SqlEngine>,
    secret: ClusterSecret,
) -> Result<tonic::service::Routes, SqlError> {
    let session = WorkerSession {
        engine: engine.clone(),
        channels: SecretChannels::new(secret.clone()),
        filters: FilterClient::new(secret.clone()),
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
    /// Where tasks take runtime filters from other stages and publish their own.
    filters: FilterClient,
    /// Floe's expression rewrites, run over each task plan ([`crate::optimizer::Rules::on_workers`]).
    rules: Arc<Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>>,
}

#[async_trait]
impl WorkerSessionBuilder for WorkerSession {
    async fn build_session_state(&self, ctx: WorkerQueryContext) -> Result<SessionState> {
        // The stores of the warehouses a task reads are registered before its plan is
        // decoded: looked up in the catalog only when one is new to this worker (or the
        // coordinator did not say which).
        let known =
            named_stores(&ctx.headers).is_some_and(|stores| self.engine.has_registered(&stores));
        if !known {
            self.engine
                .register_warehouses()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        let mut builder = ctx.builder;
        let board = RemoteBoard::from_headers(&ctx.headers);
        if let Some(config) = builder.config() {
            self.engine.apply_session_options(config);
            config.set_extension(Arc::new(UnitClient(self.channels.clone())));
        }
        let rules = self.rules.clone();
        let client = self.filters.clone();
        let filters_on = self.engine.config().rewrites.runtime_filters;
        let mut state = builder
            .with_distributed_user_codec(FloeCodec)
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_worker_plan_rewrite_handler(move |ev: WorkerPlanRewriteEvent| {
                let planned = ev.plan;
                let mut plan = planned.clone();
                if filters_on {
                    let remote = board.clone().map(|board| (board, client.clone()));
                    plan = super::filters::link(plan, remote)?;
                }
                for rule in rules.iter() {
                    plan = rule.optimize(plan, ev.session_config.options())?;
                }
                if let (true, Some(board)) = (filters_on, &board) {
                    plan = super::filters::publish(plan, board.clone(), client.clone())?;
                }
                // The nodes added here run as overlays, so the task's metrics line up with
                // the coordinator's plan.
                let plan = super::overlay::keep_shape(plan, &planned);
                Ok(WorkerPlanRewriteEventResponse::new(plan))
            })
            .build();
        // Tasks may aggregate with sketches, or with Floe's `min`.
        crate::register_functions(&mut state)?;
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stores_header_names_warehouses_or_nothing() {
        let ids = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
        assert_eq!(named_stores(&stores_header(&ids)), Some(ids.to_vec()));
        assert_eq!(named_stores(&stores_header(&[])), Some(vec![]));
        let many: Vec<_> = (0..=MOST_NAMED_STORES)
            .map(|_| uuid::Uuid::new_v4())
            .collect();
        assert_eq!(named_stores(&stores_header(&many)), None);
        let mut forged = http::HeaderMap::new();
        forged.insert(STORES_HEADER, "not-a-uuid".parse().unwrap());
        assert_eq!(named_stores(&forged), None);
        assert_eq!(named_stores(&http::HeaderMap::new()), None);
    }
}
