//! `/schema-registry/…`: a Confluent-compatible Schema Registry, so producers using
//! Confluent's serializers (Avro, JSON Schema, Protobuf) register and look schemas up at
//! Floe, and pipelines read their records with them. Paths, bodies and error codes are the
//! ones Confluent clients expect (`{"error_code": 40401, "message": …}`).
//!
//! Reading needs `read-schemas` on the server; registering, deleting and setting
//! compatibility need `manage-pipelines` on the server (which implies `read-schemas`).
//! Clients authenticate with a bearer token or with HTTP basic authentication carrying a Floe
//! client id and secret (`basic.auth.user.info`).

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::registry::{SchemaType, StoredSchema, SubjectVersion};
use floe_stream::registry::{Compatibility, Registry, RegistryError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;

/// A registry answer: a JSON body, or a Confluent error.
struct Answer(Result<Response, RegistryError>);

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(response) => response,
            Err(RegistryError::Store(inner)) => crate::error::ApiError(inner).into_response(),
            Err(e) => {
                let (status, code) = e.codes();
                let mut response = (
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    Json(json!({"error_code": code, "message": e.to_string()})),
                )
                    .into_response();
                response.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/vnd.schemaregistry.v1+json"),
                );
                response
            }
        }
    }
}

/// A JSON answer or a registry error, as a response.
fn reply(answer: Result<Value, RegistryError>) -> Response {
    Answer(answer.map(|body| ok(body).into_response())).into_response()
}

fn ok(body: Value) -> Answer {
    let mut response = Json(body).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/vnd.schemaregistry.v1+json"),
    );
    Answer(Ok(response))
}

fn registry(state: &AppState) -> Result<&Registry, crate::error::ApiError> {
    state.registry.as_ref().ok_or_else(|| {
        crate::error::ApiError(floe_catalog::CatalogError::Unavailable(
            "the schema registry is not enabled on this server".into(),
        ))
    })
}

/// Every registry request needs `read-schemas` on the server (which `manage-pipelines`
/// implies); registering, deleting and configuring also need `manage-pipelines`.
async fn require_reader(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let allowed = match request.extensions().get::<Caller>() {
        Some(caller) => crate::auth::require_server(caller, Privilege::ReadSchemas),
        None => Err(crate::error::ApiError(
            floe_catalog::CatalogError::Unauthenticated("no credentials".into()),
        )),
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(denied) => refused(denied),
    }
}

/// A refusal in Confluent's error form: `error_code` is the status followed by `01` (40101,
/// 40301), as Confluent's own authorizer answers.
fn refused(denied: crate::error::ApiError) -> Response {
    let message = denied.0.to_string();
    let status = denied.into_response().status();
    let code = i64::from(status.as_u16()) * 100 + 1;
    (
        status,
        Json(json!({"error_code": code, "message": message})),
    )
        .into_response()
}

fn require_write(caller: &Caller) -> Result<(), crate::error::ApiError> {
    crate::auth::require_server(caller, Privilege::ManagePipelines)
}

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/", get(root))
        .route("/mode", get(mode))
        .route("/schemas/types", get(types))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_of_id))
        .route("/schemas/ids/{id}/versions", get(versions_of_id))
        .route("/subjects", get(subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route("/subjects/{subject}/versions", get(versions).post(register))
        .route(
            "/subjects/{subject}/versions/{version}",
            get(version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(raw_version),
        )
        .route("/config", get(global_config).put(set_global_config))
        .route(
            "/config/{subject}",
            get(subject_config)
                .put(set_subject_config)
                .delete(delete_subject_config),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(compatible_with_version),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(compatible_with_all),
        )
        // The last layer runs first: the principal is known before its privilege is checked.
        .route_layer(axum::middleware::from_fn(require_reader))
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            crate::auth::require_principal,
        ))
}

macro_rules! registry_or_return {
    ($state:expr) => {
        match registry(&$state) {
            Ok(registry) => registry,
            Err(e) => return e.into_response(),
        }
    };
}

async fn root() -> Response {
    ok(json!({})).into_response()
}

async fn mode() -> Response {
    ok(json!({"mode": "READWRITE"})).into_response()
}

async fn types() -> Response {
    ok(json!(["AVRO", "JSON", "PROTOBUF"])).into_response()
}

/// A schema as `GET /schemas/ids/{id}` shows it (AVRO's type is left out, as Confluent does).
fn schema_body(schema: &StoredSchema) -> Value {
    let mut body = json!({"schema": schema.schema});
    if schema.schema_type != SchemaType::Avro {
        body["schemaType"] = json!(schema.schema_type.as_str());
    }
    let references: Value = serde_json::from_str(&schema.references).unwrap_or(json!([]));
    if references.as_array().is_some_and(|r| !r.is_empty()) {
        body["references"] = references;
    }
    body
}

fn version_body(version: &SubjectVersion) -> Value {
    let mut body = schema_body(&version.schema);
    body["subject"] = json!(version.subject);
    body["version"] = json!(version.version);
    body["id"] = json!(version.schema.id);
    body
}

fn parse_id(id: &str) -> Result<i64, RegistryError> {
    id.parse()
        .map_err(|_| RegistryError::SchemaNotFound(id.to_string()))
}

async fn schema_by_id(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let schema = registry.schema(parse_id(&id)?).await?;
        Ok(schema_body(&schema))
    }
    .await;
    reply(answer)
}

async fn raw_schema_by_id(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let registry = registry_or_return!(state);
    let answer = async { Ok(registry.schema(parse_id(&id)?).await?.schema) }.await;
    Answer(answer.map(|text: String| text.into_response())).into_response()
}

async fn subjects_of_id(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let id = parse_id(&id)?;
        registry.schema(id).await?;
        let mut subjects: Vec<String> = registry
            .store()
            .usages(id)
            .await?
            .into_iter()
            .map(|(subject, _)| subject)
            .collect();
        subjects.dedup();
        Ok(json!(subjects))
    }
    .await;
    reply(answer)
}

async fn versions_of_id(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let id = parse_id(&id)?;
        registry.schema(id).await?;
        let usages: Vec<Value> = registry
            .store()
            .usages(id)
            .await?
            .into_iter()
            .map(|(subject, version)| json!({"subject": subject, "version": version}))
            .collect();
        Ok(json!(usages))
    }
    .await;
    reply(answer)
}

#[derive(Deserialize, Default)]
struct Flags {
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    permanent: bool,
    #[serde(default, rename = "defaultToGlobal")]
    default_to_global: bool,
    #[serde(default)]
    verbose: bool,
}

async fn subjects(State(state): State<AppState>, Query(flags): Query<Flags>) -> Response {
    let registry = registry_or_return!(state);
    let answer = async { Ok(json!(registry.store().subjects(flags.deleted).await?)) }.await;
    reply(answer)
}

async fn versions(
    State(state): State<AppState>,
    Path(subject): Path<String>,
    Query(flags): Query<Flags>,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let versions = registry.store().versions(&subject, flags.deleted).await?;
        if versions.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.clone()));
        }
        Ok(json!(
            versions.iter().map(|v| v.version).collect::<Vec<_>>()
        ))
    }
    .await;
    reply(answer)
}

async fn version(
    State(state): State<AppState>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = registry.version(&subject, &version).await;
    Answer(answer.map(|v| ok(version_body(&v)).into_response())).into_response()
}

async fn raw_version(
    State(state): State<AppState>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = registry.version(&subject, &version).await;
    Answer(answer.map(|v| v.schema.schema.into_response())).into_response()
}

/// A schema in a request body: its text, type (AVRO when absent) and references.
fn schema_of(body: &Value) -> Result<(SchemaType, String, String), RegistryError> {
    let text = body["schema"]
        .as_str()
        .ok_or_else(|| RegistryError::InvalidSchema("the body has no \"schema\" text".into()))?
        .to_string();
    let schema_type = match body["schemaType"].as_str() {
        None => SchemaType::Avro,
        Some(kind) => SchemaType::parse(kind).ok_or_else(|| {
            RegistryError::InvalidSchema(format!(
                "unknown schemaType {kind:?}: use AVRO, JSON or PROTOBUF"
            ))
        })?,
    };
    let references = match &body["references"] {
        Value::Null => "[]".to_string(),
        Value::Array(list) if list.is_empty() => "[]".to_string(),
        other => other.to_string(),
    };
    Ok((schema_type, text, references))
}

async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(subject): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let registry = registry_or_return!(state);
    if let Err(denied) = require_write(&caller) {
        return refused(denied);
    }
    let answer = async {
        let (schema_type, text, references) = schema_of(&body)?;
        let (id, version) = registry
            .register(&subject, schema_type, &text, &references)
            .await?;
        Ok(json!({"id": id, "subject": subject, "version": version}))
    }
    .await;
    reply(answer)
}

async fn lookup(
    State(state): State<AppState>,
    Path(subject): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let (schema_type, text, references) = schema_of(&body)?;
        Ok(version_body(
            &registry
                .lookup(&subject, schema_type, &text, &references)
                .await?,
        ))
    }
    .await;
    reply(answer)
}

async fn delete_subject(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(subject): Path<String>,
    Query(flags): Query<Flags>,
) -> Response {
    let registry = registry_or_return!(state);
    if let Err(denied) = require_write(&caller) {
        return refused(denied);
    }
    let answer = async {
        let deleted = registry
            .store()
            .delete_versions(&subject, None, flags.permanent)
            .await?;
        if deleted.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.clone()));
        }
        Ok(json!(deleted))
    }
    .await;
    reply(answer)
}

async fn delete_version(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((subject, version)): Path<(String, String)>,
    Query(flags): Query<Flags>,
) -> Response {
    let registry = registry_or_return!(state);
    if let Err(denied) = require_write(&caller) {
        return refused(denied);
    }
    let answer = async {
        let number = if flags.permanent {
            // A permanent delete names a soft-deleted version.
            let all = registry.store().versions(&subject, true).await?;
            if all.is_empty() {
                return Err(RegistryError::SubjectNotFound(subject.clone()));
            }
            match version.as_str() {
                "latest" | "-1" => all.last().map(|v| v.version),
                text => text.parse().ok(),
            }
            .ok_or_else(|| RegistryError::InvalidVersion(version.clone()))?
        } else {
            registry.version(&subject, &version).await?.version
        };
        let deleted = registry
            .store()
            .delete_versions(&subject, Some(number), flags.permanent)
            .await?;
        deleted
            .first()
            .copied()
            .map(|v| json!(v))
            .ok_or_else(|| RegistryError::VersionNotFound(version.clone()))
    }
    .await;
    reply(answer)
}

async fn global_config(State(state): State<AppState>) -> Response {
    let registry = registry_or_return!(state);
    let answer = registry.level(None).await;
    Answer(answer.map(|level| ok(json!({"compatibilityLevel": level.as_str()})).into_response()))
        .into_response()
}

/// The level in a `PUT /config` body.
fn level_of(body: &Value) -> Result<Compatibility, RegistryError> {
    let text = body["compatibility"]
        .as_str()
        .or_else(|| body["compatibilityLevel"].as_str())
        .unwrap_or_default();
    Compatibility::parse(text).ok_or_else(|| RegistryError::InvalidCompatibility(text.into()))
}

async fn set_global_config(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Response {
    set_config(&state, &caller, None, &body).await
}

/// `PUT /config` and `PUT /config/{subject}`.
async fn set_config(
    state: &AppState,
    caller: &Caller,
    subject: Option<&str>,
    body: &Value,
) -> Response {
    let registry = registry_or_return!(state);
    if let Err(denied) = require_write(caller) {
        return refused(denied);
    }
    let answer = async {
        let level = level_of(body)?;
        registry
            .store()
            .set_compatibility(subject, Some(level.as_str()))
            .await?;
        Ok(json!({"compatibility": level.as_str()}))
    }
    .await;
    reply(answer)
}

async fn subject_config(
    State(state): State<AppState>,
    Path(subject): Path<String>,
    Query(flags): Query<Flags>,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        match registry.store().compatibility(Some(&subject)).await? {
            Some(level) => Ok(json!({"compatibilityLevel": level})),
            None if flags.default_to_global => {
                Ok(json!({"compatibilityLevel": registry.level(None).await?.as_str()}))
            }
            None => Err(RegistryError::NoSubjectConfig(subject.clone())),
        }
    }
    .await;
    reply(answer)
}

async fn set_subject_config(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(subject): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    set_config(&state, &caller, Some(&subject), &body).await
}

async fn delete_subject_config(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(subject): Path<String>,
) -> Response {
    let registry = registry_or_return!(state);
    if let Err(denied) = require_write(&caller) {
        return refused(denied);
    }
    let answer = async {
        let before = registry
            .store()
            .compatibility(Some(&subject))
            .await?
            .ok_or_else(|| RegistryError::NoSubjectConfig(subject.clone()))?;
        registry
            .store()
            .set_compatibility(Some(&subject), None)
            .await?;
        Ok(json!({"compatibilityLevel": before}))
    }
    .await;
    reply(answer)
}

async fn compatible(
    state: &AppState,
    subject: &str,
    version: Option<&str>,
    body: &Value,
    verbose: bool,
) -> Response {
    let registry = registry_or_return!(state);
    let answer = async {
        let (schema_type, text, references) = schema_of(body)?;
        let reason = registry
            .compatible(subject, version, schema_type, &text, &references)
            .await?;
        let mut body = json!({"is_compatible": reason.is_none()});
        if verbose {
            body["messages"] = json!(reason.into_iter().collect::<Vec<_>>());
        }
        Ok(body)
    }
    .await;
    reply(answer)
}

async fn compatible_with_version(
    State(state): State<AppState>,
    Path((subject, version)): Path<(String, String)>,
    Query(flags): Query<Flags>,
    Json(body): Json<Value>,
) -> Response {
    compatible(&state, &subject, Some(&version), &body, flags.verbose).await
}

async fn compatible_with_all(
    State(state): State<AppState>,
    Path(subject): Path<String>,
    Query(flags): Query<Flags>,
    Json(body): Json<Value>,
) -> Response {
    compatible(&state, &subject, None, &body, flags.verbose).await
}
