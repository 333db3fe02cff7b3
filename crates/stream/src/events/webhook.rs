//! The webhook sink: each event POSTed as a structured-mode CloudEvent
//! (`application/cloudevents+json`), one request at a time in order, acknowledged by any 2xx.

use std::time::Duration;

use async_trait::async_trait;
use floe_catalog::events::StoredEvent;

use super::Sink;

type Result<T> = std::result::Result<T, String>;

/// POSTs events to `url`, with `token` as a bearer token when given.
pub struct WebhookSink {
    name: String,
    url: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl WebhookSink {
    pub fn new(url: String, token: Option<String>) -> Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("webhook client: {e}"))?;
        Ok(Self {
            name: "webhook".into(),
            url,
            token,
            client,
        })
    }
}

#[async_trait]
impl Sink for WebhookSink {
    fn name(&self) -> &str {
        &self.name
    }

    async fn resume(&self, seq: i64) -> Result<i64> {
        Ok(seq)
    }

    async fn deliver(&self, events: &[StoredEvent], source: &str) -> Result<()> {
        for event in events {
            let mut request = self
                .client
                .post(&self.url)
                .header("content-type", "application/cloudevents+json")
                .body(event.cloud_event(source).to_string());
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            // The URL is the operator's; the answer's body is never read (or logged).
            let response = request
                .send()
                .await
                .map_err(|e| format!("webhook: event {}: {}", event.seq, e.without_url()))?;
            if !response.status().is_success() {
                return Err(format!(
                    "webhook: event {} answered {}",
                    event.seq,
                    response.status()
                ));
            }
        }
        Ok(())
    }
}
