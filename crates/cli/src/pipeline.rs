//! `floe pipeline …`: stream pipelines of a running server, and `floe kafka-mock`, a
//! Kafka-protocol broker for trying pipelines out and for tests (librdkafka's mock cluster).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum PipelineCommand {
    /// Define a pipeline from a JSON file (see docs/pipelines.md for its fields).
    Create {
        /// The definition; `-` reads standard input.
        file: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The pipelines you may manage.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// One pipeline's definition.
    Show {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Who runs a pipeline, its committed offsets, counters and last error.
    Status {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Remove a pipeline (its table and what it committed stay).
    Delete {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Send a pipeline's dead letters back to the partitions of its topics they came from,
    /// once their cause is fixed (it reads them again; what still fails is a dead letter
    /// again), and remove them from its dead-letter table. Without `--apply`, a dry run that
    /// counts them.
    Redrive {
        name: String,
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: PipelineCommand) -> anyhow::Result<()> {
    match command {
        PipelineCommand::Create { file, server } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file)?
            };
            let spec: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", file.display()))?;
            let client = server.connect().await?;
            let answer = client
                .call(reqwest::Method::POST, "/api/v1/pipelines", Some(spec))
                .await?;
            print(&answer)
        }
        PipelineCommand::List { server } => {
            let client = server.connect().await?;
            print(
                &client
                    .call(reqwest::Method::GET, "/api/v1/pipelines", None)
                    .await?,
            )
        }
        PipelineCommand::Show { name, server } => {
            let client = server.connect().await?;
            let path = format!("/api/v1/pipelines/{name}");
            print(&client.call(reqwest::Method::GET, &path, None).await?)
        }
        PipelineCommand::Status { name, server } => {
            let client = server.connect().await?;
            let path = format!("/api/v1/pipelines/{name}/status");
            print(&client.call(reqwest::Method::GET, &path, None).await?)
        }
        PipelineCommand::Delete { name, server } => {
            let client = server.connect().await?;
            let path = format!("/api/v1/pipelines/{name}");
            client.call(reqwest::Method::DELETE, &path, None).await?;
            Ok(())
        }
        PipelineCommand::Redrive {
            name,
            apply,
            server,
        } => {
            let client = server.connect().await?;
            let path = format!("/api/v1/pipelines/{name}/dead-letters/redrive");
            let body = serde_json::json!({ "dry-run": !apply });
            print(
                &client
                    .call(reqwest::Method::POST, &path, Some(body))
                    .await?,
            )
        }
    }
}

#[derive(Args, Debug)]
pub struct KafkaMockArgs {
    /// Topics to create, as `name:partitions` (e.g. `events:4`).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// Brokers in the cluster.
    #[arg(long, default_value_t = 1)]
    brokers: i32,
}

/// Starts a mock Kafka cluster, prints its bootstrap servers on one line, and serves until
/// killed.
pub async fn kafka_mock(args: KafkaMockArgs) -> anyhow::Result<()> {
    let cluster = rdkafka::mocking::MockCluster::new(args.brokers)?;
    for topic in &args.topics {
        let (name, partitions) = topic.split_once(':').unwrap_or((topic.as_str(), "1"));
        let partitions: i32 = partitions
            .parse()
            .map_err(|_| anyhow::anyhow!("--topic takes name:partitions, got {topic}"))?;
        cluster.create_topic(name, partitions, 1)?;
    }
    println!("{}", cluster.bootstrap_servers());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
