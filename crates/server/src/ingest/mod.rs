//! HTTP ingestion: `POST /ingest/v1/{warehouse}/{namespace}/{table}` appends NDJSON, a JSON
//! array or an Arrow IPC stream to an Iceberg table — an adapter over the ingestion core
//! ([`floe_stream::core`]).
//!
//! A request is checked (authentication, media type, size, then `write-data` on the table —
//! or `create-table` on its namespace for `?create=true` — before a byte of the body is
//! decoded, then every row against the table's schema, within the request's decoding budget:
//! [`floe_stream::decode::rows`]), and written to the core's durable log; only then does it
//! get its 2xx. The log's committer gathers what it holds every commit interval into one
//! append snapshot whose summary carries `floe.ingest.<log id>.sequence`, the last log entry
//! it covers, in the same commit — so after a crash the log is replayed from the entry after
//! the last committed one: nothing acknowledged is lost and nothing is written twice.
//! `?wait=commit` answers once the batch is in a committed snapshot.
//!
//! Entries keep the table's field ids, and are matched to its columns by id when they are
//! committed, so a column renamed after the acknowledgement keeps its values. An entry the
//! table can no longer take (a required column added since) is moved to the table's
//! dead-letter directory and the log goes on.

use axum::Extension;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::{CatalogError, ErrorCode};
use floe_stream::core::Layout;
use floe_stream::core::dead_letter::Door;
use floe_stream::core::{IngestError, Ingestor, Target};
use floe_stream::decode::rows::{self as body, ARROW_STREAM, JSON, NDJSON};
use iceberg::{NamespaceIdent, TableIdent};
use serde::Deserialize;
use serde_json::{Value, json};

pub use floe_stream::core::{Ingest, IngestConfig};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct IngestParams {
    /// `commit`: answer once the rows are in a committed snapshot.
    pub wait: Option<String>,
    /// `true`: create the table, with a schema inferred from this request, if it is missing.
    pub create: Option<bool>,
    /// `false`: refuse fields the table lacks instead of adding them as columns.
    pub evolve: Option<bool>,
    /// The key of an upsert table, columns separated by commas: a table created by this
    /// request is an upsert table with this key; an existing table must have it.
    pub key: Option<String>,
    /// `delete`: the rows are keys of an upsert table whose rows are deleted (`upsert`, the
    /// default: the rows are written, replacing the rows of their keys in an upsert table).
    pub op: Option<String>,
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(CatalogError::BadRequest {
        message: message.into(),
    })
}

/// `GET /api/v1/ingest/status`: the tables this node ingests into, with their logs' positions
/// and counters. Needs `manage-pipelines` on the server.
pub(crate) async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<axum::Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManagePipelines)?;
    let tables = match &state.ingest {
        Some(ingest) => ingest.status().await,
        None => Vec::new(),
    };
    Ok(axum::Json(json!({ "tables": tables })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct ReplayRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    pub from_sequence: u64,
    pub to_sequence: u64,
    /// Only say what would be taken again (default true).
    pub dry_run: Option<bool>,
}

/// `POST /api/v1/ingest/replay`: takes entries `from-sequence..=to-sequence` of a table's log
/// on this node again — committed entries still retained that the table no longer holds
/// (rolled back), and dead letters — each once (the ingestion core's replay). Needs
/// `manage-pipelines` on the server and `write-data` on the table; a dry run by default.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    crate::extract::JsonBody(request): crate::extract::JsonBody<ReplayRequest>,
) -> ApiResult<axum::Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManagePipelines)?;
    let Some(ingest) = state.ingest.clone() else {
        return Err(ApiError(CatalogError::Unavailable(
            "HTTP ingestion is not enabled on this server".into(),
        )));
    };
    if request.from_sequence > request.to_sequence {
        return Err(bad_request(
            "from-sequence must not be greater than to-sequence",
        ));
    }
    let namespace = NamespaceIdent::from_vec(request.namespace.clone())
        .map_err(|e| bad_request(format!("namespace: {e}")))?;
    let ident = TableIdent::new(namespace, request.table.clone());
    state
        .catalog
        .authorize_table(&caller, &request.warehouse, &ident, Privilege::WriteData)
        .await?;
    let dry_run = request.dry_run.unwrap_or(true);
    let entries = ingest
        .replay(
            &request.warehouse,
            &ident,
            request.from_sequence,
            request.to_sequence,
            dry_run,
        )
        .await
        .map_err(|e| ApiError(e.into()))?;
    Ok(axum::Json(json!({"dry-run": dry_run, "entries": entries})))
}

/// `POST /ingest/v1/{warehouse}/{namespace}/{table}`.
pub(crate) async fn ingest(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    UrlPath((warehouse, namespace, table)): UrlPath<(String, String, String)>,
    Query(params): Query<IngestParams>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let Some(ingest) = state.ingest.clone() else {
        return Err(ApiError(CatalogError::Unavailable(
            "HTTP ingestion is not enabled on this server".into(),
        )));
    };
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_ascii_lowercase())
        .unwrap_or_default();
    if ![NDJSON, JSON, ARROW_STREAM].contains(&media.as_str()) {
        return Ok(crate::error::error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "Content-Type {media:?} is not accepted: send {NDJSON} (one JSON object per line), \
                 {JSON} (an array of objects) or {ARROW_STREAM}"
            ),
        ));
    }
    let deletes = match params.op.as_deref() {
        None | Some("upsert") => false,
        Some("delete") => true,
        Some(other) => {
            return Err(bad_request(format!(
                "op {other:?} is not an operation: use upsert (the default) or delete"
            )));
        }
    };
    let key: Vec<String> = params
        .key
        .as_deref()
        .map(|k| {
            k.split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if params.key.is_some() && key.is_empty() {
        return Err(bad_request("key names no column"));
    }
    if deletes && params.create == Some(true) && key.is_empty() {
        return Err(bad_request(
            "op=delete with create=true needs key=: a table made by this request deletes by \
             its key",
        ));
    }
    let body = crate::extract::body_within(body, &headers, ingest.config.max_body_bytes)
        .await
        .map_err(|m| ApiError(CatalogError::PayloadTooLarge(m)))?;
    let namespace =
        NamespaceIdent::from_vec(namespace.split('\u{1f}').map(str::to_string).collect())
            .map_err(|e| bad_request(format!("namespace: {e}")))?;
    let ident = TableIdent::new(namespace, table);
    let budget = state.decode.budget(body.len());
    // Checked and admitted before a byte of the body is decoded: `write-data` on the table,
    // or, to create it, `create-table` on the namespace — only then is the body read for
    // the schema it makes.
    let mut infer = || -> Result<Layout, IngestError> {
        let inferred = body::infer_schema(&media, &body, budget)?;
        if inferred.fields().is_empty() {
            return Err(IngestError::Invalid(
                "the rows hold no fields: a new table needs at least one column".into(),
            ));
        }
        Ok(Layout {
            schema: std::sync::Arc::new(inferred),
            partition: Vec::new(),
            order: Vec::new(),
            properties: Default::default(),
            key: key.clone(),
        })
    };
    let target = Target::Named {
        ident,
        create: match params.create {
            Some(true) => Some(&mut infer),
            _ => None,
        },
    };
    let mut opened = Ingestor::new(&ingest, &state.catalog, Door::Http)
        .open(&caller, &warehouse, target, body.len() as u64)
        .await
        .map_err(refused)?;
    if !key.is_empty()
        && !opened
            .key()
            .is_some_and(|table| floe_stream::core::upsert::same_key(table, &key))
    {
        return Err(bad_request(match opened.key() {
            Some(actual) => format!(
                "table {} has the key {}, not {}",
                opened.ident(),
                actual.join(", "),
                key.join(", ")
            ),
            None => format!(
                "table {} is not an upsert table (it has no key; write.upsert.enabled and \
                 identifier fields make one)",
                opened.ident()
            ),
        }));
    }
    if deletes {
        let Some(keys) = opened.key_schema() else {
            return Err(bad_request(format!(
                "table {} is not an upsert table: op=delete needs a key to delete by",
                opened.ident()
            )));
        };
        // Keys, or whole rows whose key columns say which rows go: the other columns are
        // read as optional and left out.
        let fields: Vec<_> = opened
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let in_key = keys.field_with_name(f.name()).is_ok();
                f.as_ref().clone().with_nullable(!in_key)
            })
            .collect();
        let rows_schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let batches = body::parse(&media, &body, &rows_schema, budget)?;
        return take(&ingest, &opened, &batches, params.wait.as_deref(), true).await;
    }
    let batches = match body::parse(&media, &body, opened.schema(), budget) {
        Ok(batches) => batches,
        // A body too large to decode stays refused.
        Err(refusal) if refusal.code() == ErrorCode::PayloadTooLarge => {
            return Err(ApiError(refusal));
        }
        // Fields the table lacks become new optional columns (unless `?evolve=false`).
        Err(refusal) if params.evolve != Some(false) => {
            let (additions, known) = body::new_fields(&media, &body, opened.schema(), budget)?;
            if additions.is_empty() && known.is_empty() {
                return Err(ApiError(refusal));
            }
            let seen: Vec<_> = additions.into_iter().chain(known).collect();
            opened.evolve(&seen).await.map_err(refused)?;
            body::parse(&media, &body, opened.schema(), budget)?
        }
        Err(refusal) => return Err(ApiError(refusal)),
    };
    take(&ingest, &opened, &batches, params.wait.as_deref(), false).await
}

/// The request's rows (or, for `deletes`, keys) taken durably, answered once they are — or
/// with `wait=commit`, once committed.
async fn take(
    ingest: &Ingest,
    opened: &floe_stream::core::Opened<'_>,
    batches: &[datafusion::arrow::array::RecordBatch],
    wait: Option<&str>,
    deletes: bool,
) -> ApiResult<Response> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows == 0 {
        return Ok((StatusCode::OK, axum::Json(json!({"rows": 0}))).into_response());
    }
    opened.count(rows as u64).map_err(refused)?;
    let receipt = if deletes {
        opened.take_deletes(batches).await
    } else {
        opened.take(batches).await
    }
    .map_err(refused)?;
    opened.taken(rows as u64);
    let sequence = receipt.sequence;
    if wait == Some("commit") {
        // An entry the table could no longer take is not committed, though later ones are.
        if receipt.committed(ingest.config.wait_timeout).await {
            return Ok((
                StatusCode::OK,
                axum::Json(json!({"rows": rows, "sequence": sequence, "committed": true})),
            )
                .into_response());
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"rows": rows, "sequence": sequence, "committed": false})),
    )
        .into_response())
}

/// A core error as the Iceberg REST error its kind maps to.
fn refused(e: IngestError) -> ApiError {
    ApiError(e.into())
}

#[cfg(test)]
mod tests {
    /// The lines of `code` that reach the catalog other than by handing it to the ingestion
    /// core (`Ingestor::new`): comments, imports and `floe_catalog::` type paths aside.
    fn catalog_calls(code: &str) -> Vec<String> {
        code.lines()
            .map(|line| line.split("//").next().unwrap_or_default().trim())
            .filter(|line| !line.starts_with("use "))
            .filter(|line| line.replace("floe_catalog::", "").contains("catalog"))
            .filter(|line| !line.contains("Ingestor::new("))
            .map(str::to_string)
            .collect()
    }

    /// The body of function `name` in `code`: from its signature to the first closing brace
    /// at the start of a line.
    fn function<'a>(code: &'a str, name: &str) -> &'a str {
        let start = code.find(name).expect("the function is there");
        let end = code[start..].find("\n}\n").expect("it ends");
        &code[start..start + end]
    }

    /// Every push door is an adapter: it decodes and answers in its protocol's form, and
    /// everything between — tenant, table, creation, admission, evolution, the log — is the
    /// ingestion core's one path, reached through `Ingestor`.
    #[test]
    fn the_push_doors_reach_the_catalog_only_through_the_ingestor() {
        let doors = [
            (
                "ingest/mod.rs",
                function(include_str!("mod.rs"), "pub(crate) async fn ingest("),
            ),
            ("otlp.rs", include_str!("../otlp.rs")),
            ("otlp_grpc.rs", include_str!("../otlp_grpc.rs")),
            ("remote_write.rs", include_str!("../remote_write.rs")),
        ];
        for (file, code) in doors {
            assert_eq!(catalog_calls(code), Vec::<String>::new(), "{file}");
        }
        // The check can fail.
        assert_eq!(
            catalog_calls("let t = state.catalog.load_table(c, w, i).await?;").len(),
            1
        );
    }
}
