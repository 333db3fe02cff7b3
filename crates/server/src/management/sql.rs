//! `POST /api/v1/sql`: one SQL statement, answered as JSON rows or, when the client sends
//! `Accept: application/vnd.apache.arrow.stream`, as an Arrow IPC stream.

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
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
pub struct SqlRequest {
    /// One statement.
    pub sql: String,
    /// The catalog of `schema.table` names (default: `default`).
    pub warehouse: Option<String>,
    /// The schema of bare table names (default: `default`).
    pub namespace: Option<String>,
}

pub async fn run(
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
    let wants_arrow = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(ARROW_STREAM));
    if wants_arrow {
        let schema = result.schema.clone();
        let mut writer = StreamWriter::try_new(Vec::new(), &schema)
            .map_err(|e| ApiError(CatalogError::internal("arrow stream", e)))?;
        let header_bytes = Bytes::from(std::mem::take(writer.get_mut()));
        // The writer lives in the stream: each batch is encoded and sent as it is produced;
        // a client that goes away drops the stream and with it the running query.
        let body = futures::stream::once(async move { Ok::<_, std::io::Error>(header_bytes) })
            .chain(
                result
                    .stream
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
    let schema = result.schema.clone();
    let batches: Vec<RecordBatch> = result
        .stream
        .try_collect()
        .await
        .map_err(|e| api_error(SqlError::from(e)))?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(Vec::new());
    for batch in &batches {
        writer
            .write(batch)
            .map_err(|e| ApiError(CatalogError::internal("JSON rows", e)))?;
    }
    writer
        .finish()
        .map_err(|e| ApiError(CatalogError::internal("JSON rows", e)))?;
    let mut encoded = writer.into_inner();
    if encoded.is_empty() {
        encoded = b"[]".to_vec();
    }
    let columns: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "type": f.data_type().to_string()}))
        .collect();
    let mut body = format!(
        "{{\"columns\":{},\"row-count\":{rows},\"rows\":",
        serde_json::Value::from(columns)
    )
    .into_bytes();
    body.extend_from_slice(&encoded);
    body.push(b'}');
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

fn api_error(e: SqlError) -> ApiError {
    ApiError(match e.kind {
        SqlErrorKind::PermissionDenied => CatalogError::PermissionDenied(e.message),
        SqlErrorKind::Unsupported => CatalogError::Unsupported(e.message),
        SqlErrorKind::Invalid | SqlErrorKind::InvalidParameter | SqlErrorKind::Execution => {
            CatalogError::BadRequest { message: e.message }
        }
    })
}
