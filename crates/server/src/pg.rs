//! The PostgreSQL wire protocol front door (`floe serve --pg-listen`, default 127.0.0.1:5433),
//! so `psql` and PostgreSQL drivers run SQL over the lakehouse.
//!
//! A connection authenticates as a Floe principal with the password flow: the user name is the
//! client id and the password its secret (or a Floe access token). The database name selects
//! the warehouse; bare table names resolve in the `default` namespace unless the connection's
//! `search_path` option names another. Statements run through the same engine, authorization
//! and audit as `POST /api/v1/sql`; both the simple and the extended query protocol are served
//! (statements without parameters). Transaction statements are accepted and do nothing: every
//! statement stands alone.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, AsArray, RecordBatch, types::Date32Type, types::Decimal128Type, types::Float32Type,
    types::Float64Type, types::Int8Type, types::Int16Type, types::Int32Type, types::Int64Type,
    types::UInt8Type, types::UInt16Type, types::UInt32Type,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions as ArrowFormat};
use datafusion::common::ScalarValue;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::governance::Principal;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlError, SqlErrorKind};
use futures::{Sink, StreamExt, stream};
use pgwire::api::auth::cleartext::CleartextPasswordAuth;
use pgwire::api::auth::driver::AuthOutcome;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::{
    AuthDriver, AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
    protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DataRowEncoder, DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{NoopQueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::types::format::FormatOptions;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// A connection that has not signed in this long after it was accepted is closed.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(10);

/// Results of the statements before the last one of a simple query are held until that
/// statement has finished (statements run one after the other); at most this much of them.
const HELD_RESULTS_BYTES: usize = 64 << 20;

/// Accepts PostgreSQL connections until `shutdown` fires. A failed `accept` (the process out
/// of file descriptors, say) is logged and retried after a pause, never the end of the door.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    tls: Option<crate::tls::TlsFiles>,
) -> std::io::Result<()> {
    let handlers = Handlers::new(state);
    // With TLS, clients that ask for it (`sslmode=require`) get it; others stay plain.
    let acceptor = tls.map(|files| files.acceptor());
    let mut pause = crate::listen::AcceptPause::default();
    while let Some((socket, _)) =
        crate::listen::accept(&listener, &mut pause, "PostgreSQL", &shutdown).await
    {
        let signed_in = Arc::new(tokio::sync::Notify::new());
        let handlers = Arc::new(handlers.for_connection(signed_in.clone()));
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let connection = pgwire::tokio::process_socket(socket, acceptor, handlers);
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = &mut connection => Some(ended),
                late = tokio::time::timeout(SIGN_IN_TIMEOUT, signed_in.notified()) => {
                    if late.is_err() {
                        tracing::debug!("closed a PostgreSQL connection that did not sign in in time");
                        return;
                    }
                    None
                }
            };
            let ended = match ended {
                Some(ended) => ended,
                None => connection.await,
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "PostgreSQL connection ended with an error");
            }
        });
    }
    Ok(())
}

#[derive(Clone)]
struct Handlers {
    startup: Arc<Startup>,
    queries: Arc<Queries>,
}

impl Handlers {
    fn new(state: AppState) -> Self {
        let source = Arc::new(Credentials {
            state: state.clone(),
        });
        Self {
            startup: Arc::new(Startup {
                driver: AuthDriver::new(DefaultServerParameterProvider::default()),
                passwords: Arc::new(CleartextPasswordAuth::new(source)),
                signed_in: Arc::new(tokio::sync::Notify::new()),
            }),
            queries: Arc::new(Queries {
                state,
                parser: Arc::new(NoopQueryParser::new()),
            }),
        }
    }

    /// The handlers of one connection: `signed_in` is notified once it has signed in.
    fn for_connection(&self, signed_in: Arc<tokio::sync::Notify>) -> Self {
        Self {
            startup: Arc::new(Startup {
                driver: AuthDriver::new(DefaultServerParameterProvider::default()),
                passwords: self.startup.passwords.clone(),
                signed_in,
            }),
            queries: self.queries.clone(),
        }
    }
}

/// Who a connection signed in as, and how: statements re-check it one by one.
#[derive(Debug, Clone)]
struct Identity {
    principal: Principal,
    /// The access token presented as the password (its expiry and key apply), if any.
    token: Option<String>,
    signed_in: Instant,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }
}

/// Checks a connection's user and password as Floe client credentials (or a token).
struct Credentials {
    state: AppState,
}

impl Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials")
    }
}

#[async_trait]
impl AuthSource<Identity> for Credentials {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Secrets are stored only as salted hashes; `verify_password` checks them instead.
        Err(PgWireError::InvalidPassword(
            login.user().unwrap_or_default().to_owned(),
        ))
    }

    async fn verify_password(
        &self,
        login: &LoginInfo,
        presented: &[u8],
    ) -> PgWireResult<Option<Identity>> {
        let user = login.user().unwrap_or_default().to_owned();
        let auth = &self.state.auth;
        let identity = match std::str::from_utf8(presented) {
            Ok(password) => {
                let (token, presented_token) = match auth.token_for_client(&user, password).await {
                    Ok(issued) => (issued.access_token, None),
                    // Not a client secret: perhaps an access token.
                    Err(_) => (password.to_string(), Some(password.to_string())),
                };
                auth.authenticate(&token)
                    .await
                    .ok()
                    .map(|principal| Identity {
                        principal,
                        token: presented_token,
                        signed_in: Instant::now(),
                    })
            }
            Err(_) => None,
        };
        let principal = identity.as_ref().map(|i| &i.principal);
        // Sign-ins are audited, refused ones as denials under the user name presented.
        let (name, status) = match &principal {
            Some(principal) => (principal.name.clone(), 200),
            None => (format!("client:{user}"), 401),
        };
        self.state
            .audit
            .send(crate::audit::login_event(
                &name,
                "LOGIN (PostgreSQL wire)",
                format!("pg://{}", login.database().unwrap_or_default()),
                login.host().to_string(),
                status,
            ))
            .await;
        match identity {
            Some(identity) => Ok(Some(identity)),
            None => Err(PgWireError::InvalidPassword(user)),
        }
    }
}

struct Startup {
    driver: AuthDriver<DefaultServerParameterProvider, Identity>,
    passwords: Arc<CleartextPasswordAuth<Credentials>>,
    signed_in: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let outcome = match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if client.metadata().get("user").is_none() {
                    return Err(PgWireError::UserNameRequired);
                }
                self.driver
                    .begin_authentication(client, self.passwords.create())
                    .await?
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                self.driver.advance_authentication(client, message).await?
            }
            _ => return Ok(()),
        };
        if let AuthOutcome::Authenticated {
            final_message,
            identity,
        } = outcome
        {
            if let Some(identity) = identity {
                client.session_extensions().insert(identity);
            }
            self.driver
                .complete_authentication(client, final_message)
                .await?;
            self.signed_in.notify_one();
        }
        Ok(())
    }
}

struct Queries {
    state: AppState,
    parser: Arc<NoopQueryParser>,
}

/// What a statement needs from its connection.
struct Session {
    caller: Caller,
    options: QueryOptions,
    client: String,
}

impl Queries {
    /// The connection's session for one statement: its principal checked again as HTTP
    /// checks a bearer token (disabled or deleted principals, within 2 s; an access token
    /// used as the password once it expires; a session past `--max-session-secs`). A
    /// refusal is FATAL: the connection ends.
    async fn session<C: ClientInfo>(&self, client: &C) -> PgWireResult<Session> {
        let identity = client
            .session_extensions()
            .get::<Identity>()
            .ok_or_else(|| PgWireError::InvalidPassword(String::new()))?;
        let auth = &self.state.auth;
        let checked = match &identity.token {
            Some(token) => auth.authenticate(token).await,
            None if identity.signed_in.elapsed() > auth.max_session() => {
                Err(floe_catalog::CatalogError::Unauthenticated(
                    "the session has lasted longer than a session may; sign in again".into(),
                ))
            }
            None => auth.recheck(identity.principal.id).await,
        };
        let principal = match checked {
            Ok(principal) => Arc::new(principal),
            Err(e) => {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".to_owned(),
                    "28000".to_owned(), // invalid_authorization_specification
                    e.to_string(),
                ))));
            }
        };
        let grants = self
            .state
            .authz
            .grants(&principal)
            .await
            .map_err(|e| user_error("XX000", &e.to_string()))?;
        let metadata = client.metadata();
        let namespace = metadata
            .get("options")
            .and_then(|o| search_path(o))
            .or_else(|| metadata.get("search_path").cloned());
        Ok(Session {
            caller: Caller {
                principal: principal.as_ref().clone(),
                grants,
            },
            options: QueryOptions {
                warehouse: metadata.get("database").cloned(),
                namespace,
                ..Default::default()
            },
            client: client.socket_addr().ip().to_string(),
        })
    }

    /// Runs one statement; `formats` picks text or binary per column. With `hold`, its rows
    /// are read to the end before this returns (so the statement has finished and given
    /// its place back), up to [`HELD_RESULTS_BYTES`].
    async fn run(
        &self,
        session: &Session,
        sql: &str,
        formats: impl Fn(usize) -> FieldFormat,
        hold: bool,
    ) -> PgWireResult<Response> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        if trimmed.is_empty() {
            return Ok(Response::EmptyQuery);
        }
        if let Some(tag) = no_op_tag(trimmed) {
            return Ok(tag);
        }
        let outcome = self
            .state
            .sql
            .query(&session.caller, trimmed, &session.options)
            .await;
        self.audit(session, trimmed, crate::audit::outcome_of(&outcome))
            .await;
        let mut result = outcome.map_err(sql_error)?;
        if hold {
            let mut held = Vec::new();
            let mut bytes = 0usize;
            while let Some(batch) = result.stream.next().await {
                let batch = batch.map_err(|e| sql_error(SqlError::from(e)))?;
                bytes += batch.get_array_memory_size();
                if bytes > HELD_RESULTS_BYTES {
                    return Err(user_error(
                        "54000", // program_limit_exceeded
                        &format!(
                            "a statement followed by others in one query string may answer at \
                             most {} MiB; send it on its own to stream its rows",
                            HELD_RESULTS_BYTES >> 20
                        ),
                    ));
                }
                held.push(Ok(batch));
            }
            result.stream = Box::pin(RecordBatchStreamAdapter::new(
                result.schema.clone(),
                stream::iter(held),
            ));
        }
        let fields = Arc::new(field_infos(&result.schema, formats));
        let rows = encode_rows(fields.clone(), result.stream);
        Ok(Response::Query(QueryResponse::new(fields, rows)))
    }

    async fn audit(&self, session: &Session, sql: &str, outcome: crate::audit::Outcome<'_>) {
        let warehouse = session.options.warehouse.as_deref().unwrap_or("default");
        self.state
            .audit
            .send(crate::audit::statement_event(
                &session.caller.principal.name,
                "SQL (PostgreSQL wire)",
                format!("pg://{warehouse}"),
                session.client.clone(),
                sql,
                outcome,
            ))
            .await;
    }

    /// A portal's parameter values: text ones parsed as the type the client declared (kept as
    /// text when it declared none), binary ones decoded by their declared type. The engine
    /// casts each to the type its placeholder is used as.
    fn parameters(portal: &Portal<String>) -> PgWireResult<Vec<ScalarValue>> {
        (0..portal.parameter_len())
            .map(|i| {
                let declared = portal.statement.parameter_types.get(i).cloned().flatten();
                parameter(portal, i, declared)
                    .map_err(|why| user_error("22P02", &format!("parameter ${}: {why}", i + 1)))
            })
            .collect()
    }

    /// The columns a statement will return, for `Describe`: planned, not run.
    async fn describe(
        &self,
        session: &Session,
        sql: &str,
        format: &Format,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        if trimmed.is_empty() || no_op_tag(trimmed).is_some() {
            return Ok(Vec::new());
        }
        let schema = self
            .state
            .sql
            .describe(&session.caller, trimmed, &session.options)
            .await
            .map_err(sql_error)?;
        Ok(field_infos(&schema, |i| format.format_for(i)))
    }
}

/// The row description of a result schema; `formats` picks text or binary per column.
fn field_infos(schema: &SchemaRef, formats: impl Fn(usize) -> FieldFormat) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                pg_type(f.data_type()),
                formats(i),
            )
        })
        .collect()
}

/// `search_path` from a startup `options` string such as `-c search_path=sales`.
fn search_path(options: &str) -> Option<String> {
    options
        .split_whitespace()
        .filter_map(|o| o.strip_prefix("search_path="))
        .next()
        .or_else(|| options.split("search_path=").nth(1))
        .map(|v| v.split([',', ' ']).next().unwrap_or(v).to_string())
}

/// Session and transaction statements drivers send, accepted without effect.
fn no_op_tag(sql: &str) -> Option<Response> {
    let first = sql
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    match first.as_str() {
        "BEGIN" | "START" => Some(Response::TransactionStart(Tag::new("BEGIN"))),
        "COMMIT" | "END" => Some(Response::TransactionEnd(Tag::new("COMMIT"))),
        "ROLLBACK" | "ABORT" => Some(Response::TransactionEnd(Tag::new("ROLLBACK"))),
        "SET" | "RESET" | "DISCARD" | "DEALLOCATE" => Some(Response::Execution(Tag::new(&first))),
        _ => None,
    }
}

fn user_error(code: &str, message: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.to_owned(),
    )))
}

fn sql_error(e: SqlError) -> PgWireError {
    let code = match e.kind {
        SqlErrorKind::PermissionDenied => "42501", // insufficient_privilege
        SqlErrorKind::Invalid => "42000",          // syntax_error_or_access_rule_violation
        SqlErrorKind::InvalidParameter => "22P02", // invalid_text_representation
        SqlErrorKind::Unsupported => "0A000",      // feature_not_supported
        SqlErrorKind::Execution | SqlErrorKind::Internal => "XX000", // internal_error
        SqlErrorKind::Unreadable => "XX001",       // data_corrupted
        SqlErrorKind::Timeout => "57014",          // query_canceled
        SqlErrorKind::TooManyStatements => "53400", // configuration_limit_exceeded
    };
    user_error(code, &e.message)
}

fn pg_type(data_type: &DataType) -> Type {
    match data_type {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::VARCHAR,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Type::BYTEA,
        DataType::Date32 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Decimal128(..) => Type::NUMERIC,
        _ => Type::TEXT,
    }
}

/// The Arrow type of a PostgreSQL parameter type, to parse a text parameter the client typed.
fn arrow_type(pg: &Type) -> Option<DataType> {
    Some(match *pg {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::DATE => DataType::Date32,
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DataType::Utf8,
        _ => return None,
    })
}

/// One parameter value as `target`.
fn parameter(
    portal: &Portal<String>,
    index: usize,
    declared: Option<Type>,
) -> Result<ScalarValue, String> {
    let target = declared
        .as_ref()
        .and_then(arrow_type)
        .unwrap_or(DataType::Utf8);
    let Some(raw) = &portal.parameters[index] else {
        return ScalarValue::try_from(&target).map_err(|e| e.to_string());
    };
    if !portal.parameter_format.is_binary(index) {
        let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8 text".to_string())?;
        return ScalarValue::try_from_string(text.to_string(), &target)
            .map_err(|_| format!("{text:?} is not a valid {target}"));
    }
    let declared = declared.ok_or("a binary parameter needs its type declared")?;
    let fail = |e: PgWireError| e.to_string();
    let value = match declared {
        Type::BOOL => {
            ScalarValue::Boolean(portal.parameter::<bool>(index, &declared).map_err(fail)?)
        }
        Type::INT2 => ScalarValue::Int16(portal.parameter::<i16>(index, &declared).map_err(fail)?),
        Type::INT4 => ScalarValue::Int32(portal.parameter::<i32>(index, &declared).map_err(fail)?),
        Type::INT8 => ScalarValue::Int64(portal.parameter::<i64>(index, &declared).map_err(fail)?),
        Type::FLOAT4 => {
            ScalarValue::Float32(portal.parameter::<f32>(index, &declared).map_err(fail)?)
        }
        Type::FLOAT8 => {
            ScalarValue::Float64(portal.parameter::<f64>(index, &declared).map_err(fail)?)
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            ScalarValue::Utf8(portal.parameter::<String>(index, &declared).map_err(fail)?)
        }
        Type::NUMERIC => ScalarValue::Utf8(
            portal
                .parameter::<rust_decimal::Decimal>(index, &declared)
                .map_err(fail)?
                .map(|d| d.to_string()),
        ),
        Type::DATE => ScalarValue::Utf8(
            portal
                .parameter::<chrono::NaiveDate>(index, &declared)
                .map_err(fail)?
                .map(|d| d.to_string()),
        ),
        Type::TIMESTAMP => ScalarValue::Utf8(
            portal
                .parameter::<chrono::NaiveDateTime>(index, &declared)
                .map_err(fail)?
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.f").to_string()),
        ),
        other => {
            return Err(format!(
                "binary parameters of type {other} are not supported"
            ));
        }
    };
    Ok(value)
}

/// Encodes each batch's rows as they arrive.
fn encode_rows(
    fields: Arc<Vec<FieldInfo>>,
    batches: datafusion::execution::SendableRecordBatchStream,
) -> impl futures::Stream<Item = PgWireResult<DataRow>> + Send + 'static {
    batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<DataRow>> = match batch {
            Ok(batch) => encode_batch(&fields, &batch),
            Err(e) => vec![Err(sql_error(SqlError::from(e)))],
        };
        stream::iter(rows)
    })
}

fn encode_batch(fields: &Arc<Vec<FieldInfo>>, batch: &RecordBatch) -> Vec<PgWireResult<DataRow>> {
    let mut encoder = DataRowEncoder::new(fields.clone());
    let text = ArrowFormat::default();
    let formatters: Vec<Option<ArrayFormatter>> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &text).ok())
        .collect();
    let options = FormatOptions::default();
    let mut rows = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let mut encoded = Ok(());
        for (i, column) in batch.columns().iter().enumerate() {
            let field = &fields[i];
            encoded = encode_value(
                &mut encoder,
                column.as_ref(),
                row,
                field,
                formatters[i].as_ref(),
                &options,
            );
            if encoded.is_err() {
                break;
            }
        }
        rows.push(encoded.map(|_| encoder.take_row()));
    }
    rows
}

fn encode_value(
    encoder: &mut DataRowEncoder,
    column: &dyn Array,
    row: usize,
    field: &FieldInfo,
    formatter: Option<&ArrayFormatter>,
    options: &FormatOptions,
) -> PgWireResult<()> {
    let pg = field.datatype();
    let format = field.format();
    macro_rules! put {
        ($value:expr) => {
            encoder.encode_field_with_type_and_format(&$value, pg, format, options)
        };
    }
    if column.is_null(row) {
        return put!(None::<i32>);
    }
    match column.data_type() {
        DataType::Boolean => put!(column.as_boolean().value(row)),
        DataType::Int8 => put!(column.as_primitive::<Int8Type>().value(row) as i16),
        DataType::Int16 => put!(column.as_primitive::<Int16Type>().value(row)),
        DataType::UInt8 => put!(column.as_primitive::<UInt8Type>().value(row) as i16),
        DataType::Int32 => put!(column.as_primitive::<Int32Type>().value(row)),
        DataType::UInt16 => put!(column.as_primitive::<UInt16Type>().value(row) as i32),
        DataType::Int64 => put!(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt32 => put!(column.as_primitive::<UInt32Type>().value(row) as i64),
        DataType::Float32 => put!(column.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => put!(column.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => put!(column.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => put!(column.as_string::<i64>().value(row)),
        DataType::Utf8View => put!(column.as_string_view().value(row)),
        DataType::Binary => put!(column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => put!(column.as_binary::<i64>().value(row)),
        DataType::BinaryView => put!(column.as_binary_view().value(row)),
        DataType::Date32 => {
            let days = column.as_primitive::<Date32Type>().value(row);
            match chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163) {
                Some(date) => put!(date),
                None => put!(text_of(formatter, row)),
            }
        }
        DataType::Timestamp(unit, tz) => {
            let micros = timestamp_micros(column, unit, row);
            match (chrono::DateTime::from_timestamp_micros(micros), tz) {
                (Some(at), Some(_)) => put!(at),
                (Some(at), None) => put!(at.naive_utc()),
                (None, _) => put!(text_of(formatter, row)),
            }
        }
        DataType::Decimal128(_, scale) => {
            let raw = column.as_primitive::<Decimal128Type>().value(row);
            match rust_decimal::Decimal::try_from_i128_with_scale(raw, *scale as u32) {
                Ok(decimal) => put!(decimal),
                Err(_) => put!(text_of(formatter, row)),
            }
        }
        _ => put!(text_of(formatter, row)),
    }
}

fn timestamp_micros(column: &dyn Array, unit: &TimeUnit, row: usize) -> i64 {
    use datafusion::arrow::datatypes::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    match unit {
        TimeUnit::Second => column.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
        TimeUnit::Millisecond => {
            column.as_primitive::<TimestampMillisecondType>().value(row) * 1_000
        }
        TimeUnit::Microsecond => column.as_primitive::<TimestampMicrosecondType>().value(row),
        TimeUnit::Nanosecond => column.as_primitive::<TimestampNanosecondType>().value(row) / 1_000,
    }
}

fn text_of(formatter: Option<&ArrayFormatter>, row: usize) -> String {
    formatter
        .map(|f| f.value(row).to_string())
        .unwrap_or_default()
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // One statement after the other, each with its principal checked again, each
        // finished before the next starts (only the last one streams its rows).
        let statements = split(query);
        let last = statements.len() - 1;
        let mut responses = Vec::new();
        for (i, statement) in statements.iter().enumerate() {
            let session = self.session(client).await?;
            match self
                .run(&session, statement, |_| FieldFormat::Text, i < last)
                .await
            {
                Ok(response) => responses.push(response),
                Err(PgWireError::UserError(info)) => {
                    responses.push(Response::Error(info));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client).await?;
        let fields = self
            .describe(&session, &target.statement, &Format::UnifiedText)
            .await?;
        let trimmed = target.statement.trim().trim_end_matches(';').trim();
        let inferred = if trimmed.is_empty() || no_op_tag(trimmed).is_some() {
            Vec::new()
        } else {
            self.state
                .sql
                .parameter_types(&session.caller, trimmed, &session.options)
                .await
                .map_err(sql_error)?
        };
        // The client's own parameter types win; the rest are what planning inferred.
        let count = inferred.len().max(target.parameter_types.len());
        let types = (0..count)
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| inferred.get(i).cloned().flatten().map(|t| pg_type(&t)))
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        target: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client).await?;
        let fields = self
            .describe(
                &session,
                &target.statement.statement,
                &target.result_column_format,
            )
            .await?;
        Ok(DescribePortalResponse::new(fields))
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session(client).await?;
        if !portal.parameters.is_empty() {
            session.options.params = Self::parameters(portal)?;
        }
        let format = portal.result_column_format.clone();
        self.run(
            &session,
            &portal.statement.statement,
            move |i| format.format_for(i),
            false,
        )
        .await
    }
}

/// Statements of a simple query string, split at `;` outside quotes.
fn split(query: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in query.chars() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                current.push(c);
            }
            Some(_) => current.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                current.push(c);
            }
            None if c == ';' => {
                if !current.trim().is_empty() {
                    statements.push(std::mem::take(&mut current));
                }
                current.clear();
            }
            None => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        statements.push(current);
    }
    if statements.is_empty() {
        statements.push(String::new());
    }
    statements
}
