//! Table endpoints.

use std::collections::HashMap;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{CreateTable, LoadedTable, TableCommitRequest, TableCredentials};
use iceberg::TableIdent;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::types::{
    CommitTableRequest, CreateTableRequest, DropQuery, ListQuery, LoadQuery, RegisterRequest,
    RenameRequest,
};
use super::{list_identifiers, page_request};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams, QueryParams, parse_namespace};

type TablePath = PathParams<(String, String, String)>;

pub(super) fn ident(namespace: &str, table: &str) -> ApiResult<TableIdent> {
    Ok(TableIdent::new(
        parse_namespace(namespace)?,
        table.to_string(),
    ))
}

/// Which snapshots a load returns.
#[derive(Clone, Copy, PartialEq)]
enum SnapshotMode {
    All,
    Refs,
}

fn snapshot_mode(query: &LoadQuery) -> ApiResult<SnapshotMode> {
    match query.snapshots.as_deref() {
        None | Some("all") => Ok(SnapshotMode::All),
        Some("refs") => Ok(SnapshotMode::Refs),
        Some(other) => Err(ApiError::bad_request(format!(
            "snapshots must be 'all' or 'refs', got {other:?}"
        ))),
    }
}

fn etag(metadata_location: &str, mode: SnapshotMode) -> String {
    let mut hasher = Sha256::new();
    hasher.update(metadata_location.as_bytes());
    hasher.update(if mode == SnapshotMode::Refs {
        b"refs" as &[u8]
    } else {
        b"all"
    });
    format!("\"{}\"", hex::encode(&hasher.finalize()[..16]))
}

fn if_none_match(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|candidate| {
            let c = candidate.trim();
            c == "*" || c.trim_start_matches("W/") == tag
        })
}

/// The table's metadata as JSON, keeping only referenced snapshots in `refs` mode.
fn metadata_json(loaded: &LoadedTable, mode: SnapshotMode) -> ApiResult<Value> {
    let mut value = floe_catalog::metadata::table_json(&loaded.metadata)?;
    if mode == SnapshotMode::Refs {
        let referenced: std::collections::HashSet<i64> = value
            .get("refs")
            .and_then(Value::as_object)
            .map(|refs| {
                refs.values()
                    .filter_map(|r| r.get("snapshot-id").and_then(Value::as_i64))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(Value::Array(snapshots)) = value.get_mut("snapshots") {
            snapshots.retain(|s| {
                s.get("snapshot-id")
                    .and_then(Value::as_i64)
                    .is_some_and(|id| referenced.contains(&id))
            });
        }
    }
    Ok(value)
}

/// What a load hands the client for reaching the table's files, beyond its metadata.
struct Delegation {
    /// The table's `config`.
    config: HashMap<String, String>,
    /// The one entry of `storage-credentials`.
    credential: TableCredentials,
    /// Whether the answer carries a `remote-signing-config`.
    remote_signing: bool,
}

impl Delegation {
    fn vended(
        prefix: &str,
        ident: &TableIdent,
        credentials: Option<TableCredentials>,
    ) -> Option<Self> {
        with_refresh_endpoint(prefix, ident, credentials).map(|(config, credential)| Self {
            config,
            credential,
            remote_signing: false,
        })
    }

    fn signing(config: Option<TableCredentials>) -> Option<Self> {
        config.map(|credential| Self {
            config: credential.config.clone(),
            credential,
            remote_signing: true,
        })
    }
}

/// A `LoadTableResult`. Its `config` carries storage settings only with delegated access:
/// DuckDB turns S3 settings found there into a secret of their own, which without credentials
/// would shadow the client's.
fn load_result(
    loaded: &LoadedTable,
    mode: SnapshotMode,
    delegation: Option<&Delegation>,
) -> ApiResult<Response> {
    Ok(load_response(
        loaded,
        mode,
        load_body(loaded, mode, delegation)?,
    ))
}

/// True when the client asked for this access delegation mode.
fn wants_delegation(headers: &HeaderMap, mode: &str) -> bool {
    headers
        .get_all("x-iceberg-access-delegation")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case(mode))
}

pub(super) fn wants_vended_credentials(headers: &HeaderMap) -> bool {
    wants_delegation(headers, "vended-credentials")
}

/// Characters a path segment keeps as they are (RFC 3986 unreserved); the rest are escaped.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `v1/{prefix}/namespaces/{namespace}/tables/{table}/{operation}`, escaped as a client sends it
/// (namespace levels joined by the spec's default separator, `%1F`), relative to the catalog's
/// base URI.
pub(super) fn table_endpoint(prefix: &str, ident: &TableIdent, operation: &str) -> String {
    let escape = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    let namespace = ident
        .namespace
        .iter()
        .map(|level| escape(level))
        .collect::<Vec<_>>()
        .join("%1F");
    format!(
        "v1/{}/namespaces/{namespace}/tables/{}/{operation}",
        escape(prefix),
        escape(&ident.name)
    )
}

/// This server's catalog base URI as the client reached it.
fn catalog_uri(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:8181");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("http");
    format!("{scheme}://{host}/catalog")
}

/// The configuration that points a client's S3 file IO at this table's `/sign` endpoint, for
/// S3 warehouses (`None` elsewhere). Iceberg 1.11 reads `signer.uri` and `signer.endpoint`;
/// older Java clients and PyIceberg read the `s3.`-prefixed names, which 1.11 deprecates.
async fn remote_signing_config(
    state: &AppState,
    prefix: &str,
    loaded: &LoadedTable,
    headers: &HeaderMap,
) -> ApiResult<Option<TableCredentials>> {
    let handle = state.catalog.warehouse(prefix).await?;
    let floe_storage::StorageProfile::S3(s3) = &handle.warehouse.storage else {
        return Ok(None);
    };
    let base = catalog_uri(headers);
    let endpoint = table_endpoint(prefix, &loaded.ident, "sign");
    let mut config = s3.client_properties();
    config.extend([
        ("s3.remote-signing-enabled".to_string(), "true".to_string()),
        // PyIceberg names its signer rather than switching one on.
        ("s3.signer".to_string(), "S3V4RestSigner".to_string()),
        ("signer.uri".to_string(), base.clone()),
        ("signer.endpoint".to_string(), endpoint.clone()),
        ("s3.signer.uri".to_string(), base),
        ("s3.signer.endpoint".to_string(), endpoint),
    ]);
    Ok(Some(TableCredentials {
        prefix: loaded.metadata.location().to_string(),
        config,
    }))
}

/// Vended credentials as a load answers them: the table's `config` also names the
/// `loadCredentials` endpoint, from which Iceberg Java (1.9 and later) fetches fresh ones before
/// `s3.session-token-expires-at-ms`. The storage credential itself carries only what it covers.
fn with_refresh_endpoint(
    prefix: &str,
    ident: &TableIdent,
    credentials: Option<TableCredentials>,
) -> Option<(HashMap<String, String>, TableCredentials)> {
    let credentials = credentials?;
    let mut config = credentials.config.clone();
    config.extend([
        (
            "client.refresh-credentials-endpoint".to_string(),
            table_endpoint(prefix, ident, "credentials"),
        ),
        (
            "client.refresh-credentials-enabled".to_string(),
            "true".to_string(),
        ),
    ]);
    Some((config, credentials))
}

pub(super) fn storage_credentials(credentials: Option<&TableCredentials>) -> Value {
    match credentials {
        Some(c) => json!([{ "prefix": c.prefix, "config": c.config }]),
        None => json!([]),
    }
}

fn load_body(
    loaded: &LoadedTable,
    mode: SnapshotMode,
    delegation: Option<&Delegation>,
) -> ApiResult<Bytes> {
    let mut body = json!({
        "metadata-location": loaded.metadata_location,
        "metadata": metadata_json(loaded, mode)?,
        "config": delegation.map(|d| json!(d.config)).unwrap_or_else(|| json!({})),
    });
    if let Some(delegation) = delegation {
        body["storage-credentials"] = storage_credentials(Some(&delegation.credential));
        if delegation.remote_signing {
            // The spec's `RemoteSigningConfig` (after 1.11.0): Floe's signer needs no static
            // properties or headers, and its endpoint is the spec's default, the table's `/sign`.
            body["remote-signing-config"] = json!({ "properties": {}, "headers": {} });
        }
    }
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
        ApiError(floe_catalog::CatalogError::internal(
            "encode load result",
            e,
        ))
    })
}

fn load_response(loaded: &LoadedTable, mode: SnapshotMode, body: Bytes) -> Response {
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(location) = &loaded.metadata_location
        && let Ok(value) = HeaderValue::from_str(&etag(location, mode))
    {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    let ns = parse_namespace(&namespace)?;
    let page = state
        .catalog
        .list_tables(&caller, &prefix, &ns, &page_request(&query)?)
        .await?;
    Ok(Json(list_identifiers(&ns, page)))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<CreateTableRequest>,
) -> ApiResult<Response> {
    let ns = parse_namespace(&namespace)?;
    let loaded = state
        .catalog
        .create_table(
            &caller,
            &prefix,
            &ns,
            CreateTable {
                name: request.name,
                location: request.location,
                schema: request.schema,
                partition_spec: request.partition_spec,
                write_order: request.write_order,
                stage_create: request.stage_create,
                properties: request.properties,
            },
        )
        .await?;
    // A staged create has nothing to read yet; a committed one is delegated as a load is.
    let committed = loaded.metadata_location.is_some();
    let delegation = if committed && wants_vended_credentials(&headers) {
        let credentials = state
            .catalog
            .vend_credentials(&caller, &prefix, &loaded.ident)
            .await?;
        Delegation::vended(&prefix, &loaded.ident, credentials)
    } else if committed && wants_delegation(&headers, "remote-signing") {
        Delegation::signing(remote_signing_config(&state, &prefix, &loaded, &headers).await?)
    } else {
        None
    };
    load_result(&loaded, SnapshotMode::All, delegation.as_ref())
}

pub async fn load(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    QueryParams(query): QueryParams<LoadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let ident = ident(&namespace, &table)?;
    let mode = snapshot_mode(&query)?;
    if headers.contains_key(header::IF_NONE_MATCH) {
        let location = state
            .catalog
            .table_metadata_location(&caller, &prefix, &ident)
            .await?;
        let tag = etag(&location, mode);
        if if_none_match(&headers, &tag) {
            let mut response = StatusCode::NOT_MODIFIED.into_response();
            if let Ok(value) = HeaderValue::from_str(&tag) {
                response.headers_mut().insert(header::ETAG, value);
            }
            return Ok(response);
        }
    }
    let loaded = state.catalog.load_table(&caller, &prefix, &ident).await?;
    if !wants_vended_credentials(&headers) && wants_delegation(&headers, "remote-signing") {
        let signing = remote_signing_config(&state, &prefix, &loaded, &headers).await?;
        return load_result(&loaded, mode, Delegation::signing(signing).as_ref());
    }
    if wants_vended_credentials(&headers) {
        let credentials = state
            .catalog
            .vend_credentials(&caller, &prefix, &ident)
            .await?;
        let delegation = Delegation::vended(&prefix, &ident, credentials);
        return load_result(&loaded, mode, delegation.as_ref());
    }
    let Some(location) = &loaded.metadata_location else {
        return load_result(&loaded, mode, None);
    };
    let key = format!(
        "{}{location}",
        if mode == SnapshotMode::Refs {
            "refs:"
        } else {
            "all:"
        }
    );
    if let Some(body) = state.load_bodies.get(&key) {
        return Ok(load_response(&loaded, mode, Bytes::clone(&body)));
    }
    let body = load_body(&loaded, mode, None)?;
    state
        .load_bodies
        .insert(&key, std::sync::Arc::new(body.clone()));
    Ok(load_response(&loaded, mode, body))
}

pub async fn exists(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
) -> ApiResult<Response> {
    let ident = ident(&namespace, &table)?;
    if state.catalog.table_exists(&caller, &prefix, &ident).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError(floe_catalog::CatalogError::no_such_table(&ident)))
    }
}

pub async fn commit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    JsonBody(request): JsonBody<CommitTableRequest>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    if let Some(body_ident) = &request.identifier {
        let body_ident = body_ident.to_ident()?;
        if body_ident != ident {
            return Err(ApiError::bad_request(format!(
                "identifier {body_ident} in the body does not match the path's {ident}"
            )));
        }
    }
    let loaded = state
        .catalog
        .commit_table(
            &caller,
            &prefix,
            TableCommitRequest {
                ident,
                requirements: request.requirements,
                updates: request.updates,
            },
        )
        .await?;
    Ok(Json(json!({
        "metadata-location": loaded.metadata_location,
        "metadata": metadata_json(&loaded, SnapshotMode::All)?,
    })))
}

pub async fn drop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    QueryParams(query): QueryParams<DropQuery>,
) -> ApiResult<StatusCode> {
    let ident = ident(&namespace, &table)?;
    state
        .catalog
        .drop_table(&caller, &prefix, &ident, query.purge()?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(prefix): PathParams<String>,
    JsonBody(request): JsonBody<RenameRequest>,
) -> ApiResult<StatusCode> {
    crate::audit::note_details(serde_json::json!(request));
    state
        .catalog
        .rename_table(
            &caller,
            &prefix,
            &request.source.to_ident()?,
            &request.destination.to_ident()?,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<RegisterRequest>,
) -> ApiResult<Response> {
    let ident = TableIdent::new(parse_namespace(&namespace)?, request.name);
    let loaded = state
        .catalog
        .register_table(
            &caller,
            &prefix,
            &ident,
            &request.metadata_location,
            request.overwrite,
        )
        .await?;
    load_result(&loaded, SnapshotMode::All, None)
}

pub async fn unregister(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    let loaded = state
        .catalog
        .unregister_table(&caller, &prefix, &ident)
        .await?;
    Ok(Json(json!({
        "metadata-location": loaded.metadata_location,
        "metadata": metadata_json(&loaded, SnapshotMode::All)?,
    })))
}

/// Fresh vended credentials for a table. Local-directory warehouses have none to vend: their
/// list is empty.
pub async fn credentials(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    let credentials = state
        .catalog
        .vend_credentials(&caller, &prefix, &ident)
        .await?;
    Ok(Json(
        json!({ "storage-credentials": storage_credentials(credentials.as_ref()) }),
    ))
}

pub async fn report_metrics(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    JsonBody(report): JsonBody<Value>,
) -> ApiResult<StatusCode> {
    let ident = ident(&namespace, &table)?;
    if !report.is_object() {
        return Err(ApiError::bad_request(
            "a metrics report must be a JSON object",
        ));
    }
    state
        .catalog
        .authorize_table(&caller, &prefix, &ident, Privilege::ReadMetadata)
        .await?;
    let kind = report
        .get("report-type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    tracing::info!(table = %ident, warehouse = %prefix, report_type = kind, "metrics report");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSignRequest {
    #[allow(dead_code)]
    region: String,
    uri: String,
    method: String,
    headers: std::collections::HashMap<String, Vec<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    properties: std::collections::HashMap<String, String>,
    body: Option<String>,
    provider: Option<String>,
}

/// Signs an S3 request that stays inside the table's location (`read-data` for GET and HEAD,
/// `write-data` for the rest).
pub async fn sign(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    JsonBody(request): JsonBody<RemoteSignRequest>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    if request.provider.as_deref().is_some_and(|p| p != "s3") {
        return Err(ApiError::bad_request("only s3 requests can be signed"));
    }
    let uri = request.uri.clone();
    let headers = state
        .catalog
        .sign_request(
            &caller,
            &prefix,
            &ident,
            floe_catalog::service::SignRequest {
                method: request.method,
                uri: request.uri,
                headers: request.headers,
                body: request.body,
            },
        )
        .await?;
    Ok(Json(json!({ "uri": uri, "headers": headers })))
}
