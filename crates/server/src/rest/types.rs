//! Request and response bodies of the Iceberg REST catalog.

use std::collections::HashMap;

use floe_catalog::commit::ViewRequirement;
use iceberg::spec::{Schema, SortOrder, UnboundPartitionSpec, ViewVersion};
use iceberg::{TableIdent, TableRequirement, TableUpdate, ViewUpdate};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateNamespaceRequest {
    pub namespace: Vec<String>,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UpdateNamespacePropertiesRequest {
    #[serde(default)]
    pub removals: Vec<String>,
    #[serde(default)]
    pub updates: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateTableRequest {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub write_order: Option<SortOrder>,
    #[serde(default)]
    pub stage_create: bool,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RegisterRequest {
    pub name: String,
    pub metadata_location: String,
    #[serde(default)]
    pub overwrite: bool,
}

/// A table identifier as the REST spec writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identifier {
    pub namespace: Vec<String>,
    pub name: String,
}

impl Identifier {
    pub fn to_ident(&self) -> Result<TableIdent, crate::error::ApiError> {
        let ns = iceberg::NamespaceIdent::from_vec(self.namespace.clone()).map_err(|_| {
            crate::error::ApiError::bad_request("identifier namespace must not be empty")
        })?;
        Ok(TableIdent::new(ns, self.name.clone()))
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    pub source: Identifier,
    pub destination: Identifier,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitTableRequest {
    pub identifier: Option<Identifier>,
    #[serde(default)]
    pub requirements: Vec<TableRequirement>,
    #[serde(default)]
    pub updates: Vec<TableUpdate>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CommitTransactionRequest {
    pub table_changes: Vec<CommitTableRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateViewRequest {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub view_version: ViewVersion,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitViewRequest {
    pub identifier: Option<Identifier>,
    #[serde(default)]
    pub requirements: Vec<ViewRequirement>,
    pub updates: Vec<ViewUpdate>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RegisterViewRequest {
    pub name: String,
    pub metadata_location: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ListQuery {
    pub page_token: Option<String>,
    pub page_size: Option<String>,
    pub parent: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropQuery {
    pub purge_requested: Option<String>,
}

impl DropQuery {
    /// `purgeRequested`, accepting any letter case (PyIceberg sends `True`).
    pub fn purge(&self) -> Result<bool, crate::error::ApiError> {
        match self
            .purge_requested
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("") | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(crate::error::ApiError::bad_request(format!(
                "purgeRequested must be true or false, got {other:?}"
            ))),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct LoadQuery {
    pub snapshots: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ConfigQuery {
    pub warehouse: Option<String>,
}
