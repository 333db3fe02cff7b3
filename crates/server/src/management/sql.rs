//! `POST /api/v1/sql`: one SQL statement, answered as JSON rows or, when the client sends
//! `Accept: application/vnd.apache.arrow.stream`, as an Arrow IPC stream.

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::json::WriterBuilder;
use datafusion::arrow::json::writer::JsonArray;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlError, SqlErrorKind};
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct SqlRequest {
    /// One statement.
    pub sql: String,
    /// The catalog of `schema.table` names (default: `default`).
    pub warehouse: Option<String>,
    /// The schema of bare table names (default: `default`).
    pub namespace: Option<String>,
}

pub(crate) async fn run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<SqlRequest>,
) -> ApiResult<Response> {
    crate::audit::note_details(json!({ "statement": request.sql }));
    let options = QueryOptions {
        warehouse: request.warehouse,
        namespace: request.namespace,
        ..Default::default()
    };
    let result = state
        .sql
        .query(&caller, &request.sql, &options)
        .await
        .map_err(api_error)?;
    if result.stages.is_some() || !result.policies.is_empty() {
        crate::audit::note_details(crate::audit::statement_details(
            &request.sql,
            result.stages.as_ref(),
            &result.policies,
        ));
    }
    let wants_arrow = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(ARROW_STREAM));
    // A failure before the first batch is the response's status, in either form.
    let mut stream = result.stream;
    let first = stream
        .next()
        .await
        .transpose()
        .map_err(|e| api_error(SqlError::from(e)))?;
    let batches = futures::stream::iter(first.map(Ok)).chain(stream);
    if wants_arrow {
        let schema = result.schema.clone();
        let mut writer = StreamWriter::try_new(Vec::new(), &schema)
            .map_err(|e| ApiError(CatalogError::internal("arrow stream", e)))?;
        let header_bytes = Bytes::from(std::mem::take(writer.get_mut()));
        // The writer lives in the stream: each batch is encoded and sent as it is produced;
        // a client that goes away drops the stream and with it the running query. A failure
        // after the first batch ends the body early, without the end-of-stream marker (the
        // format has no error message).
        let body = futures::stream::once(async move { Ok::<_, std::io::Error>(header_bytes) })
            .chain(
                batches
                    .map_err(std::io::Error::other)
                    .map(move |batch| {
                        let batch = batch?;
                        writer.write(&batch).map_err(std::io::Error::other)?;
                        Ok(Bytes::from(std::mem::take(writer.get_mut())))
                    })
                    .chain(futures::stream::once(async {
                        // End-of-stream marker: continuation token and a zero length.
                        Ok(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]))
                    })),
            );
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, ARROW_STREAM)],
            Body::from_stream(body),
        )
            .into_response());
    }
    // JSON rows are encoded a batch at a time as the client reads them, never gathered:
    // what the server holds is bounded by a batch, whatever the result's size. A failure
    // after the first batch ends the body with an `error` member (the rows sent so far
    // precede it), keeping the document valid JSON.
    let columns: Vec<_> = result
        .schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "type": f.data_type().to_string()}))
        .collect();
    let head = format!(
        "{{\"columns\":{},\"rows\":[",
        serde_json::Value::from(columns)
    );
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(json_body(head, batches)),
    )
        .into_response())
}

/// The JSON document of a result: `head`, each batch's rows as it comes, then the row count
/// (and the error, when the stream failed: nothing follows it).
fn json_body(
    head: String,
    batches: impl futures::Stream<Item = datafusion::common::Result<RecordBatch>> + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let start = futures::stream::once(async move { Ok(Bytes::from(head)) });
    let rest = futures::stream::unfold(
        (Box::pin(batches), 0usize, false),
        |(mut batches, rows, ended)| async move {
            if ended {
                return None;
            }
            let (chunk, rows, ended) = match batches.next().await {
                Some(Ok(batch)) => match json_rows(&batch, rows > 0) {
                    Ok(chunk) => (chunk, rows + batch.num_rows(), false),
                    Err(e) => (
                        failed_end(rows, &CatalogError::internal("encode rows as JSON", e)),
                        rows,
                        true,
                    ),
                },
                Some(Err(e)) => (
                    failed_end(rows, &api_error(SqlError::from(e)).0),
                    rows,
                    true,
                ),
                None => (Bytes::from(format!("],\"row-count\":{rows}}}")), rows, true),
            };
            Some((Ok(chunk), (batches, rows, ended)))
        },
    );
    start.chain(rest)
}

/// One batch's rows as JSON objects, comma-separated (after a comma when rows came before).
fn json_rows(batch: &RecordBatch, after_rows: bool) -> Result<Bytes, ArrowError> {
    if batch.num_rows() == 0 {
        return Ok(Bytes::new());
    }
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    let encoded = writer.into_inner();
    // `[{…},{…}]` without its brackets.
    let inner = &encoded[1..encoded.len().saturating_sub(1)];
    let mut chunk = Vec::with_capacity(inner.len() + 1);
    if after_rows {
        chunk.push(b',');
    }
    chunk.extend_from_slice(inner);
    Ok(Bytes::from(chunk))
}

/// The end of a document whose result failed after its first rows were sent.
fn failed_end(rows: usize, error: &CatalogError) -> Bytes {
    let status = crate::error::status_for(error.code()).as_u16();
    let message = crate::error::client_message(error);
    let error = json!({"message": message, "type": error.error_type(), "code": status});
    Bytes::from(format!("],\"row-count\":{rows},\"error\":{error}}}"))
}

fn api_error(e: SqlError) -> ApiError {
    ApiError(match e.kind {
        SqlErrorKind::PermissionDenied => CatalogError::PermissionDenied(e.message),
        SqlErrorKind::Unsupported => CatalogError::Unsupported(e.message),
        SqlErrorKind::Timeout => CatalogError::Timeout(e.message),
        SqlErrorKind::TooManyStatements => CatalogError::TooManyRequests(e.message),
        SqlErrorKind::Invalid | SqlErrorKind::InvalidParameter | SqlErrorKind::Execution => {
            CatalogError::BadRequest { message: e.message }
        }
        // The message holds the engine's error id, which the log line of this one names.
        SqlErrorKind::Internal => CatalogError::internal("SQL statement", e.message),
        SqlErrorKind::Unreadable => CatalogError::Unreadable(e.message),
    })
}
