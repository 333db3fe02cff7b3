//! Coordinator ↔ worker calls (and a worker's calls for work units, [`super::units`]) carry the cluster's secret, and a worker answers nothing that
//! does not: a plan can read any file its worker can, so a worker takes plans only from the
//! nodes of its own cluster (which checked the caller's grants before planning). Workers at
//! `https://` URLs are reached over TLS, trusting the cluster's certificate authority.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use sha2::{Digest, Sha256};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use url::Url;

/// The header a cluster call carries its secret in.
pub const SECRET_HEADER: &str = "x-floe-cluster-secret";

/// The secret the nodes of one cluster share (kept in the catalog database), and the
/// certificate authority (PEM) that signed the certificates of its TLS workers, if any.
/// Never printed.
#[derive(Clone)]
pub struct ClusterSecret(Arc<str>, Option<Arc<[u8]>>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    pub fn new(secret: impl Into<Arc<str>>) -> Self {
        Self(secret.into(), None)
    }

    /// Workers at `https://` URLs are trusted when their certificate is signed by `ca_pem`.
    pub fn trusting(mut self, ca_pem: Vec<u8>) -> Self {
        self.1 = Some(ca_pem.into());
        self
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

/// How long connecting to a worker may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection with calls open pings its peer this often, and is closed (failing its calls)
/// when a ping goes unanswered for [`PING_TIMEOUT`]: a worker stopped or cut off mid-stream
/// then fails its readers (on other workers too) rather than holding them forever.
const PING_EVERY: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Connects to workers, one channel per worker kept for reuse (it connects again by itself
/// after a worker restarts), over TLS for `https://` workers, and sends the cluster's secret
/// with every call.
#[derive(Clone)]
pub(crate) struct SecretChannels {
    channels: Arc<Mutex<HashMap<Url, Channel>>>,
    secret: ClusterSecret,
}

impl SecretChannels {
    pub(crate) fn new(secret: ClusterSecret) -> Self {
        Self {
            channels: Arc::default(),
            secret,
        }
    }

    fn channel(&self, url: &Url) -> Result<Channel> {
        let mut channels = self.channels.lock().expect("worker channels");
        if let Some(channel) = channels.get(url) {
            return Ok(channel.clone());
        }
        let refused = |why: String| DataFusionError::Configuration(format!("worker {url}: {why}"));
        let mut endpoint = Channel::from_shared(url.to_string())
            .map_err(|e| refused(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_TIMEOUT)
            .tcp_nodelay(true);
        if url.scheme() == "https" {
            let Some(ca) = &self.secret.1 else {
                return Err(refused(
                    "an https worker is trusted only with the cluster's CA (--cluster-ca)".into(),
                ));
            };
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(host) = url.host_str() {
                tls = tls.domain_name(host);
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| refused(e.to_string()))?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(url.clone(), channel.clone());
        Ok(channel)
    }

    /// Channels of their own to the same workers (for calls that must not queue behind
    /// the data on these).
    pub(crate) fn apart(&self) -> Self {
        Self::new(self.secret.clone())
    }

    pub(crate) fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// A channel to the node at `url` whose every call carries the cluster's secret.
    pub(crate) fn with_secret(&self, url: &Url) -> Result<BoxCloneSyncChannel> {
        let channel = self.channel(url)?;
        let value = self.secret.header()?;
        let with_secret = tower::ServiceBuilder::new()
            .map_request(move |mut request: http::Request<tonic::body::Body>| {
                request.headers_mut().insert(SECRET_HEADER, value.clone());
                request
            })
            .service(channel);
        Ok(BoxCloneSyncChannel::new(with_secret))
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        Ok(create_worker_client(self.with_secret(url)?))
    }
}

/// The worker side: refuses a call without the cluster's secret before anything of it is
/// decoded.
#[derive(Clone)]
pub struct RequireSecret(pub(crate) ClusterSecret);

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
