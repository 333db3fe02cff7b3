//! `floe admin …`: principals and signing keys of a running server.

use clap::Subcommand;
use serde_json::json;

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Manage principals (users and service principals).
    #[command(subcommand)]
    Principal(PrincipalCommand),
    /// Manage roles and their members.
    #[command(subcommand)]
    Role(RoleCommand),
    /// Grant a privilege to a role on a securable.
    Grant(GrantArgs),
    /// Revoke a privilege from a role on a securable.
    Revoke(GrantArgs),
    /// Start signing tokens with a new key (tokens signed before stay valid until they expire).
    RotateSigningKey {
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum RoleCommand {
    Create {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    Delete {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Give a principal the role.
    AddMember {
        role: String,
        principal: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    RemoveMember {
        role: String,
        principal: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The privileges a role holds.
    Grants {
        role: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// A privilege on a securable: the server (no --warehouse), a warehouse, a namespace, a table
/// or a view.
#[derive(clap::Args, Debug)]
pub struct GrantArgs {
    #[arg(long)]
    role: String,
    /// e.g. read-data, write-data, create-table, list-tables, manage-grants.
    #[arg(long)]
    privilege: String,
    #[arg(long)]
    warehouse: Option<String>,
    /// Dotted namespace, e.g. `sales.emea`.
    #[arg(long, requires = "warehouse")]
    namespace: Option<String>,
    #[arg(long, requires = "namespace", conflicts_with = "view")]
    table: Option<String>,
    #[arg(long, requires = "namespace")]
    view: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

impl GrantArgs {
    fn body(&self) -> serde_json::Value {
        let levels = |ns: &String| ns.split('.').map(str::to_string).collect::<Vec<_>>();
        let on = match (&self.warehouse, &self.namespace, &self.table, &self.view) {
            (None, ..) => json!({"type": "server"}),
            (Some(w), None, ..) => json!({"type": "warehouse", "warehouse": w}),
            (Some(w), Some(ns), None, None) => {
                json!({"type": "namespace", "warehouse": w, "namespace": levels(ns)})
            }
            (Some(w), Some(ns), Some(t), _) => {
                json!({"type": "table", "warehouse": w, "namespace": levels(ns), "name": t})
            }
            (Some(w), Some(ns), None, Some(v)) => {
                json!({"type": "view", "warehouse": w, "namespace": levels(ns), "name": v})
            }
        };
        json!({"role": self.role, "privilege": self.privilege, "on": on})
    }
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
        AdminCommand::Role(RoleCommand::Create { name, server }) => {
            server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/roles", Some(json!({"name": name})))
                .await?
        }
        AdminCommand::Role(RoleCommand::Delete { name, server }) => {
            server
                .connect()
                .await?
                .call(Method::DELETE, &format!("/api/v1/roles/{name}"), None)
                .await?
        }
        AdminCommand::Role(RoleCommand::List { server }) => {
            server
                .connect()
                .await?
                .call(Method::GET, "/api/v1/roles", None)
                .await?
        }
        AdminCommand::Role(RoleCommand::AddMember {
            role,
            principal,
            server,
        }) => {
            let path = format!("/api/v1/roles/{role}/members");
            server
                .connect()
                .await?
                .call(Method::POST, &path, Some(json!({"principal": principal})))
                .await?
        }
        AdminCommand::Role(RoleCommand::RemoveMember {
            role,
            principal,
            server,
        }) => {
            let path = format!("/api/v1/roles/{role}/members/{principal}");
            server
                .connect()
                .await?
                .call(Method::DELETE, &path, None)
                .await?
        }
        AdminCommand::Role(RoleCommand::Grants { role, server }) => {
            let path = format!("/api/v1/roles/{role}/grants");
            server
                .connect()
                .await?
                .call(Method::GET, &path, None)
                .await?
        }
        AdminCommand::Grant(args) => {
            args.server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/grants", Some(args.body()))
                .await?
        }
        AdminCommand::Revoke(args) => {
            args.server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/grants/revoke", Some(args.body()))
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
