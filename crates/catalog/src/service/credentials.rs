//! Credential vending: temporary storage credentials scoped to one table.

use std::collections::HashMap;

use floe_storage::StorageProfile;
use floe_storage::sts::{assume_role, session_policy};
use iceberg::TableIdent;

use super::CatalogService;
use super::tables::validate_ident;
use crate::governance::authz::{Caller, Privilege};
use crate::model::TabularKind;
use crate::{CatalogError, Result};

/// The storage configuration an engine needs for one table: where the store is, and (on S3
/// warehouses) temporary credentials limited to the table's location — read-only unless the
/// caller may write data.
#[derive(Debug, Clone, Default)]
pub struct TableCredentials {
    /// The location the credentials cover.
    pub prefix: String,
    pub config: HashMap<String, String>,
}

impl CatalogService {
    /// Vends credentials for `ident`; `None` for local-directory warehouses, which have none.
    pub async fn vend_credentials(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<Option<TableCredentials>> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = match self.find_tabular(&wh, ident).await? {
            Some(r) if r.kind == TabularKind::Table => r,
            _ => return Err(CatalogError::no_such_table(ident)),
        };
        let scope = record.scope();
        caller.require(Privilege::ReadData, &scope, || {
            CatalogError::no_such_table(ident)
        })?;
        let StorageProfile::S3(s3) = &wh.warehouse.storage else {
            return Ok(None);
        };
        let write = caller.grants.allows(Privilege::WriteData, &scope);
        let location = wh.storage.require_inside(&record.location)?;
        let policy = session_policy(&location, write);
        let vended = assume_role(
            s3,
            None,
            &policy,
            self.config.vended_credentials_ttl.as_secs(),
        )
        .await
        .map_err(|e| CatalogError::Unavailable(format!("cannot vend credentials: {e}")))?;
        let mut config = HashMap::from([
            ("s3.access-key-id".to_string(), vended.access_key_id),
            ("s3.secret-access-key".to_string(), vended.secret_access_key),
            ("s3.session-token".to_string(), vended.session_token),
            (
                "s3.session-token-expires-at-ms".to_string(),
                vended.expires_at_ms.to_string(),
            ),
            (
                "s3.path-style-access".to_string(),
                s3.path_style_access.to_string(),
            ),
            ("client.region".to_string(), s3.region.clone()),
            ("s3.region".to_string(), s3.region.clone()),
        ]);
        if let Some(endpoint) = &s3.endpoint {
            config.insert("s3.endpoint".to_string(), endpoint.clone());
        }
        Ok(Some(TableCredentials {
            prefix: location.to_string(),
            config,
        }))
    }
}
