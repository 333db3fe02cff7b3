//! Coordinator ↔ worker calls carry the cluster's secret, and a worker answers nothing that
//! does not: a plan can read any file its worker can, so a worker takes plans only from the
//! nodes of its own cluster (which checked the caller's grants before planning).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::grpc::{
    BoxCloneSyncChannel, DefaultChannelResolver, create_worker_client,
};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use sha2::{Digest, Sha256};
use url::Url;

/// The header a cluster call carries its secret in.
pub const SECRET_HEADER: &str = "x-floe-cluster-secret";

/// The secret the nodes of one cluster share (kept in the catalog database). Never printed.
#[derive(Clone)]
pub struct ClusterSecret(Arc<str>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    pub fn new(secret: impl Into<Arc<str>>) -> Self {
        Self(secret.into())
    }

    fn digest(value: &[u8]) -> [u8; 32] {
        Sha256::digest(value).into()
    }

    /// Whether `offered` is this secret (compared as digests, so the time taken says nothing
    /// of how much of it matched).
    pub fn admits(&self, offered: &[u8]) -> bool {
        Self::digest(offered) == Self::digest(self.0.as_bytes())
    }

    fn header(&self) -> Result<http::HeaderValue> {
        let mut value = http::HeaderValue::from_str(&self.0).map_err(|_| {
            DataFusionError::Configuration("the cluster secret is not a header value".into())
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// Connects to workers as DataFusion-distributed's default resolver does, one channel per
/// worker kept for reuse, and sends the cluster's secret with every call.
#[derive(Clone)]
pub(crate) struct SecretChannels {
    channels: DefaultChannelResolver,
    secret: ClusterSecret,
}

impl SecretChannels {
    pub(crate) fn new(secret: ClusterSecret) -> Self {
        Self {
            channels: DefaultChannelResolver::default(),
            secret,
        }
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self.channels.get_channel(url).await?;
        let value = self.secret.header()?;
        let with_secret = tower::ServiceBuilder::new()
            .map_request(move |mut request: http::Request<tonic::body::Body>| {
                request.headers_mut().insert(SECRET_HEADER, value.clone());
                request
            })
            .service(channel);
        Ok(create_worker_client(BoxCloneSyncChannel::new(with_secret)))
    }
}

/// The worker side: refuses a call without the cluster's secret before anything of it is
/// decoded.
#[derive(Clone)]
pub(crate) struct RequireSecret(pub(crate) ClusterSecret);

impl tonic::service::Interceptor for RequireSecret {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match request.metadata().get(SECRET_HEADER) {
            Some(offered) if self.0.admits(offered.as_bytes()) => Ok(request),
            Some(_) => Err(tonic::Status::unauthenticated(
                "the cluster secret offered is not this cluster's",
            )),
            None => Err(tonic::Status::unauthenticated(
                "a worker takes plans only from nodes of its cluster (no cluster secret)",
            )),
        }
    }
}
