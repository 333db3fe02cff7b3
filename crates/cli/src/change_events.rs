//! `floe serve`'s change-event publishing: the flags, and the publisher they start
//! (floe-stream's `events`; docs/events.md).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use floe_stream::events::{self, PublisherConfig, Sink};
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug, Clone)]
pub struct EventArgs {
    /// Kafka brokers to publish change events to (`host:port,…`); none to publish none there.
    #[arg(long, env = "FLOE_EVENTS_KAFKA_BROKERS")]
    pub events_kafka_brokers: Option<String>,
    /// The Kafka topic change events go to (it must exist).
    #[arg(long, env = "FLOE_EVENTS_KAFKA_TOPIC", default_value = "floe.changes")]
    pub events_kafka_topic: String,
    /// An extra librdkafka setting for the change-event producer (`key=value`, repeatable:
    /// TLS, SASL, …).
    #[arg(long = "events-kafka-property", value_parser = parse_property)]
    pub events_kafka_properties: Vec<(String, String)>,
    /// A URL that change events are POSTed to, one CloudEvent per request.
    #[arg(long, env = "FLOE_EVENTS_WEBHOOK_URL")]
    pub events_webhook_url: Option<String>,
    /// A bearer token the webhook requests carry.
    #[arg(long, env = "FLOE_EVENTS_WEBHOOK_TOKEN", hide_env_values = true)]
    pub events_webhook_token: Option<String>,
    /// The CloudEvents `source` of this catalog's events.
    #[arg(long, env = "FLOE_EVENTS_SOURCE", default_value = "urn:floe:catalog")]
    pub events_source: String,
    /// Hours an event stays in the outbox when a sink has not taken it (delivered events go
    /// within a minute).
    #[arg(long, default_value_t = 168)]
    pub events_retention_hours: u64,
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?} is not key=value"))
}

/// Starts publishing to the sinks the flags name (and pruning the outbox).
pub fn start(
    args: &EventArgs,
    store: Arc<dyn floe_catalog::events::EventStore>,
    holder: String,
    stop: CancellationToken,
) -> anyhow::Result<events::Stats> {
    let mut sinks: Vec<Arc<dyn Sink>> = Vec::new();
    if let Some(brokers) = &args.events_kafka_brokers {
        let sink = events::kafka::KafkaSink::new(
            brokers,
            &args.events_kafka_topic,
            &args.events_kafka_properties,
        )
        .map_err(anyhow::Error::msg)
        .context("--events-kafka-brokers")?;
        sinks.push(Arc::new(sink));
    }
    if let Some(url) = &args.events_webhook_url {
        let parsed = url::Url::parse(url).context("--events-webhook-url")?;
        if !matches!(parsed.scheme(), "http" | "https") {
            anyhow::bail!("--events-webhook-url must be an http(s) URL");
        }
        let sink =
            events::webhook::WebhookSink::new(url.clone(), args.events_webhook_token.clone())
                .map_err(anyhow::Error::msg)?;
        sinks.push(Arc::new(sink));
    }
    let config = PublisherConfig {
        source: args.events_source.clone(),
        holder,
        batch: 500,
        poll: Duration::from_millis(100),
        retention: Duration::from_secs(args.events_retention_hours.saturating_mul(3600)),
    };
    Ok(events::spawn(store, sinks, config, stop))
}
