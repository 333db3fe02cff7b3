//! `POST /v1/{prefix}/transactions/commit`: all-or-nothing across tables.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::TableCommitRequest;

use super::types::CommitTransactionRequest;
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};

pub async fn commit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(prefix): PathParams<String>,
    JsonBody(request): JsonBody<CommitTransactionRequest>,
) -> ApiResult<StatusCode> {
    let mut requests = Vec::with_capacity(request.table_changes.len());
    for change in request.table_changes {
        let ident = change
            .identifier
            .ok_or_else(|| {
                ApiError::bad_request("every table change of a transaction needs an identifier")
            })?
            .to_ident()?;
        requests.push(TableCommitRequest {
            ident,
            requirements: change.requirements,
            updates: change.updates,
        });
    }
    state
        .catalog
        .commit_tables(&caller, &prefix, requests)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
