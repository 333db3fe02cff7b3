//! `floe admin …`: principals and signing keys of a running server.

use clap::Subcommand;
use serde_json::json;

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Manage principals (users and service principals).
    #[command(subcommand)]
    Principal(PrincipalCommand),
    /// Start signing tokens with a new key (tokens signed before stay valid until they expire).
    RotateSigningKey {
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum PrincipalCommand {
    /// Create a principal; prints its client id and secret (shown only this once).
    Create {
        name: String,
        /// `user` or `service`.
        #[arg(long, default_value = "service")]
        kind: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Issue a new client secret; the old one stops working.
    RotateCredentials {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    Disable {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    Enable {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: AdminCommand) -> anyhow::Result<()> {
    use reqwest::Method;
    let answer = match command {
        AdminCommand::Principal(PrincipalCommand::Create { name, kind, server }) => {
            let body = json!({ "name": name, "kind": kind });
            server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/principals", Some(body))
                .await?
        }
        AdminCommand::Principal(PrincipalCommand::List { server }) => {
            server
                .connect()
                .await?
                .call(Method::GET, "/api/v1/principals", None)
                .await?
        }
        AdminCommand::Principal(PrincipalCommand::RotateCredentials { name, server }) => {
            let path = format!("/api/v1/principals/{name}/rotate-credentials");
            server
                .connect()
                .await?
                .call(Method::POST, &path, None)
                .await?
        }
        AdminCommand::Principal(PrincipalCommand::Disable { name, server }) => {
            let path = format!("/api/v1/principals/{name}/disable");
            server
                .connect()
                .await?
                .call(Method::POST, &path, None)
                .await?
        }
        AdminCommand::Principal(PrincipalCommand::Enable { name, server }) => {
            let path = format!("/api/v1/principals/{name}/enable");
            server
                .connect()
                .await?
                .call(Method::POST, &path, None)
                .await?
        }
        AdminCommand::RotateSigningKey { server } => {
            server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/signing-keys/rotate", None)
                .await?
        }
    };
    print(&answer)
}
