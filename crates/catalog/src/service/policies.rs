//! The catalog's part of row and column policies ([`crate::governance::policies`]): which
//! apply to a caller reading a table, the refusal to hand a caller under one the table's
//! raw files, which every door that would hand them out (vended credentials, remote signing,
//! server-side scan planning) makes, and the refusal to let it change the table's schema.

use iceberg::TableIdent;
use iceberg::TableUpdate;

use super::tables::validate_ident;
use super::{CatalogService, LoadedTable};
use crate::governance::authz::{Caller, Privilege};
use crate::governance::policies::AppliedPolicy;
use crate::model::TabularRecord;
use crate::{CatalogError, Result};

impl CatalogService {
    /// Table `ident` as [`Self::load_table`] reads it, with the policies that apply to
    /// `caller` reading it (none for most callers), from one lookup of the table.
    pub async fn load_table_under_policy(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<(LoadedTable, Option<AppliedPolicy>)> {
        let (loaded, record) = self.load_table_record(caller, warehouse, ident).await?;
        let policy = AppliedPolicy::combine(caller.grants.policies_on(&record.id.to_string()));
        Ok((loaded, policy))
    }

    /// Requires that `caller` may read table `ident`'s files themselves: `read-data`, and no
    /// row or column policy applying to it there ([`Self::refuse_raw_reads`]).
    pub async fn authorize_raw_read(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<()> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let record = self
            .table_record(caller, &wh, ident, Privilege::ReadData)
            .await?;
        self.refuse_raw_reads(caller, &record)
    }

    /// Refuses a commit of `updates` by `caller` that changes the schema of `record` while a
    /// row or column policy applies to it there: a row filter names its columns by name, so
    /// a caller that renames the filter's column and adds another under its name (NULL in
    /// every row) would choose the rows it reads (`deleted_at IS NULL`, `region IS DISTINCT
    /// FROM 'US'`), and setting an older schema does the same.
    pub(crate) fn refuse_schema_changes(
        &self,
        caller: &Caller,
        record: &TabularRecord,
        updates: &[TableUpdate],
    ) -> Result<()> {
        let changes_schema = updates.iter().any(|u| {
            matches!(
                u,
                TableUpdate::AddSchema { .. } | TableUpdate::SetCurrentSchema { .. }
            )
        });
        if !changes_schema {
            return Ok(());
        }
        let policies = caller.grants.policies_on(&record.id.to_string());
        if policies.is_empty() {
            return Ok(());
        }
        Err(CatalogError::PermissionDenied(format!(
            "a row or column policy (role {}) applies to principal {} on table {}.{}: it may \
             not change the table's schema",
            policy_roles(policies),
            caller.principal.name,
            record.namespace.join("."),
            record.name
        )))
    }

    /// Refuses when a row or column policy applies to `caller` on `record`: its files hold
    /// every row and column, so a caller under a policy reads the table through Floe's SQL
    /// only.
    pub(crate) fn refuse_raw_reads(&self, caller: &Caller, record: &TabularRecord) -> Result<()> {
        let policies = caller.grants.policies_on(&record.id.to_string());
        if policies.is_empty() {
            return Ok(());
        }
        Err(CatalogError::PermissionDenied(format!(
            "a row or column policy (role {}) applies to principal {} on table {}.{}: its \
             files are not handed out (no vended credentials, remote signing or scan \
             planning); read it through Floe's SQL",
            policy_roles(policies),
            caller.principal.name,
            record.namespace.join("."),
            record.name
        )))
    }
}

/// The roles of `policies`, sorted, once each, joined for a refusal.
fn policy_roles(policies: &[std::sync::Arc<crate::governance::policies::DataPolicy>]) -> String {
    let mut roles: Vec<&str> = policies.iter().map(|p| p.role.as_str()).collect();
    roles.sort_unstable();
    roles.dedup();
    roles.join(", ")
}
