//! Credential vending: temporary storage credentials scoped to one table.

use std::collections::HashMap;

use floe_storage::StorageProfile;
use floe_storage::sts::{STS_MIN_DURATION_SECS, assume_role, expiring_at, session_policy};
use iceberg::TableIdent;

use super::CatalogService;
use super::tables::validate_ident;
use crate::governance::authz::{Caller, Privilege};
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
    /// Vends credentials for `ident`; `None` for local-directory warehouses, which have none,
    /// and for S3 warehouses created with `sts-enabled` false.
    pub async fn vend_credentials(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<Option<TableCredentials>> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = self
            .table_record(caller, &wh, ident, Privilege::ReadData)
            .await?;
        self.refuse_raw_reads(caller, &record)?;
        let scope = record.scope();
        let StorageProfile::S3(s3) = &wh.warehouse.storage else {
            return Ok(None);
        };
        if !s3.sts_enabled {
            // Created to vend nothing (a store without STS): engines use their own keys.
            return Ok(None);
        }
        let write = caller.grants.allows(Privilege::WriteData, &scope);
        let location = wh.storage.require_inside(&record.location)?;
        // Locations are claimed without pattern characters; one stored before that rule
        // would widen the session policy, so nothing is vended for it.
        if let Some(c) = location.pattern_character() {
            return Err(CatalogError::Unsupported(format!(
                "no credentials are vended for a table whose location contains '{c}'"
            )));
        }
        let mut policy = session_policy(&location, write);
        let ttl = self.config.vended_credentials_ttl.as_secs();
        // STS issues nothing shorter than 15 minutes: a shorter lifetime is a deadline in the
        // session policy, and the expiry clients see (and refresh before) is that deadline.
        let deadline = (ttl < STS_MIN_DURATION_SECS)
            .then(|| chrono::Utc::now() + chrono::Duration::seconds(ttl as i64));
        if let Some(until) = deadline {
            policy = expiring_at(policy, until);
        }
        let mut vended = assume_role(
            s3,
            s3.sts_role_arn.as_deref(),
            &policy,
            ttl.max(STS_MIN_DURATION_SECS),
        )
        .await
        .map_err(|e| CatalogError::Unavailable(format!("cannot vend credentials: {e}")))?;
        if let Some(until) = deadline {
            vended.expires_at_ms = vended.expires_at_ms.min(until.timestamp_millis());
        }
        let mut config = s3.client_properties();
        config.extend([
            ("s3.access-key-id".to_string(), vended.access_key_id),
            ("s3.secret-access-key".to_string(), vended.secret_access_key),
            ("s3.session-token".to_string(), vended.session_token),
            (
                "s3.session-token-expires-at-ms".to_string(),
                vended.expires_at_ms.to_string(),
            ),
        ]);
        Ok(Some(TableCredentials {
            prefix: location.to_string(),
            config,
        }))
    }
}
