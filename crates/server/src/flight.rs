//! The Arrow Flight SQL front door (`floe serve --flight-listen`, default 127.0.0.1:50051), for
//! ADBC and JDBC Flight SQL clients.
//!
//! Clients authenticate with a handshake carrying HTTP Basic credentials (client id and
//! secret), answered with a bearer token they send on every later call; a Floe access token
//! may also be sent directly as `authorization: Bearer …`. The warehouse and namespace of
//! unqualified names come from the optional `x-floe-warehouse` and `x-floe-namespace` call
//! headers. Statements (direct, or prepared with `$1`, `$2`, … bound one row at a time through
//! `DoPut`; the values travel in the returned handle) run through the same engine,
//! authorization and audit as `POST /api/v1/sql`; results stream as Arrow record batches.
//! Catalog listings (catalogs = warehouses, schemas = namespaces, tables, table types) come
//! from `information_schema` queried as the caller, so they show what the caller may see.
//!
//! What a client sends is decoded within bounds: a `DoPut` stream within
//! [`DecodeLimits::max_bytes`] and [`MAX_PUT_MESSAGES`] messages, its batches and a handle's
//! bound parameters by [`crate::bounded_ipc`] (malformed: `InvalidArgument`, too large:
//! `ResourceExhausted`); a statement runs for at most [`MAX_PARAMETER_ROWS`] parameter rows.

use std::pin::Pin;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use base64::Engine;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::common::ScalarValue;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlError, SqlErrorKind};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::AppState;
use crate::bounded_ipc::{self, DecodeError, DecodeLimits};

/// Messages one `DoPut` may carry.
pub(crate) const MAX_PUT_MESSAGES: usize = 10_000;

/// Parameter rows one `DoPut` may bind (the statement runs once per row).
pub(crate) const MAX_PARAMETER_ROWS: usize = 1_000;

/// Serves Flight SQL until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    tls: Option<crate::tls::TlsFiles>,
) -> Result<(), tonic::transport::Error> {
    let units = state.sql.unit_service();
    let filters = state.sql.filter_service();
    let service = FloeFlightSql {
        state,
        info: sql_info(),
    };
    // Dead peers are found by keep-alive pings (`listen::grpc_server`); a peer that never
    // starts is dropped by `listen::incoming`.
    crate::listen::grpc_server(tls)?
        .max_concurrent_streams(Some(64))
        .add_service(FlightServiceServer::new(service))
        // A coordinator's work units and runtime filters for its workers, behind the
        // cluster's secret.
        .add_optional_service(units)
        .add_optional_service(filters)
        .serve_with_incoming_shutdown(
            crate::listen::incoming(listener, "Flight SQL", shutdown.clone()),
            shutdown.cancelled_owned(),
        )
        .await
}

fn sql_info() -> SqlInfoData {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "Floe");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    builder.append(SqlInfo::FlightSqlServerReadOnly, true);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    builder.build().expect("static SQL info")
}

struct FloeFlightSql {
    state: AppState,
    info: SqlInfoData,
}

/// What a ticket or prepared-statement handle carries: the statement and where its
/// unqualified names resolve.
#[derive(Debug, Serialize, Deserialize)]
struct Handle {
    sql: String,
    warehouse: Option<String>,
    namespace: Option<String>,
    /// Bound parameter values: one row as a base64 Arrow IPC stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    params: Option<String>,
}

impl Handle {
    fn new(sql: String, metadata: &MetadataMap) -> Self {
        let header = |name: &str| {
            metadata
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Handle {
            sql,
            warehouse: header("x-floe-warehouse"),
            namespace: header("x-floe-namespace"),
            params: None,
        }
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a handle serializes")
    }

    fn decode(bytes: &[u8]) -> Result<Self, Status> {
        serde_json::from_slice(bytes)
            .map_err(|_| Status::invalid_argument("not a statement handle issued by this server"))
    }

    /// The statement's options, with the bound parameters decoded within `limits` (the
    /// handle comes back from the client, which may have written it).
    fn options(&self, limits: &DecodeLimits) -> Result<QueryOptions, Status> {
        Ok(QueryOptions {
            warehouse: self.warehouse.clone(),
            namespace: self.namespace.clone(),
            params: match &self.params {
                Some(encoded) => decode_params(encoded, limits)?,
                None => Vec::new(),
            },
        })
    }

    /// Binds one row of parameter values.
    fn bind(&mut self, row: &RecordBatch) -> Result<(), Status> {
        let mut bytes = Vec::new();
        {
            let mut writer = StreamWriter::try_new(&mut bytes, &row.schema())
                .map_err(|e| Status::internal(e.to_string()))?;
            writer
                .write(row)
                .and_then(|_| writer.finish())
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        self.params = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        Ok(())
    }
}

/// The parameter batches a `DoPut` carries: at most `limits.max_bytes` of messages, and
/// [`MAX_PUT_MESSAGES`] of them, decoded within the budget of their size.
async fn parameter_batches(
    request: Request<PeekableFlightDataStream>,
    limits: &DecodeLimits,
) -> Result<Vec<RecordBatch>, Status> {
    let mut stream = request.into_inner();
    let mut messages = Vec::new();
    let mut bytes = 0usize;
    while let Some(data) = stream.next().await {
        let data = data?;
        bytes = bytes.saturating_add(
            data.data_header.len() + data.data_body.len() + data.app_metadata.len(),
        );
        if bytes > limits.max_bytes {
            return Err(Status::resource_exhausted(format!(
                "the DoPut stream carries more than the {} bytes a request may decode \
                 (--decode-memory-mb)",
                limits.max_bytes
            )));
        }
        // Messages of application metadata alone carry no IPC message.
        if data.data_header.is_empty() {
            continue;
        }
        messages.push(data);
        if messages.len() > MAX_PUT_MESSAGES {
            return Err(Status::resource_exhausted(format!(
                "the DoPut stream carries more than {MAX_PUT_MESSAGES} messages"
            )));
        }
    }
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let decoded = bounded_ipc::decode_messages(
        messages
            .iter()
            .map(|m| (m.data_header.as_ref(), m.data_body.as_ref())),
        limits.budget(bytes),
    )
    .map_err(|e| decode_status("parameter batch", e))?;
    Ok(decoded.batches)
}

/// A refused stream as gRPC answers it.
fn decode_status(what: &str, e: DecodeError) -> Status {
    match e {
        DecodeError::Malformed(_) => Status::invalid_argument(format!("{what}: {e}")),
        DecodeError::OverBudget { .. } => Status::resource_exhausted(format!("{what}: {e}")),
    }
}

/// The one row of parameter values a handle carries.
fn decode_params(encoded: &str, limits: &DecodeLimits) -> Result<Vec<ScalarValue>, Status> {
    let invalid = || Status::invalid_argument("not a statement handle issued by this server");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| invalid())?;
    let budget = limits.budget(bytes.len());
    let decoded = bounded_ipc::decode_stream(&bytes::Bytes::from(bytes), budget)
        .map_err(|e| decode_status("bound parameters", e))?;
    let mut rows = decoded.batches.iter().filter(|b| b.num_rows() > 0);
    let (Some(row), None) = (rows.next(), rows.next()) else {
        return Err(invalid());
    };
    if row.num_rows() != 1 {
        return Err(invalid());
    }
    row.columns()
        .iter()
        .map(|column| {
            ScalarValue::try_from_array(column, 0)
                .map_err(|e| Status::invalid_argument(e.to_string()))
        })
        .collect()
}

fn status(e: SqlError) -> Status {
    match e.kind {
        SqlErrorKind::PermissionDenied => Status::permission_denied(e.message),
        SqlErrorKind::Invalid | SqlErrorKind::InvalidParameter => {
            Status::invalid_argument(e.message)
        }
        SqlErrorKind::Unsupported => Status::unimplemented(e.message),
        SqlErrorKind::Execution | SqlErrorKind::Internal => Status::internal(e.message),
        SqlErrorKind::Unreadable => Status::data_loss(e.message),
        SqlErrorKind::Timeout => Status::deadline_exceeded(e.message),
        SqlErrorKind::TooManyStatements => Status::resource_exhausted(e.message),
    }
}

impl FloeFlightSql {
    /// The caller a request's bearer token stands for.
    /// The caller a request's bearer token names; a refusal is audited as a denial.
    async fn caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        let caller = self.bearer_caller(metadata).await;
        if let Err(refused) = &caller
            && refused.code() == tonic::Code::Unauthenticated
        {
            self.audit_login(metadata, "anonymous", "AUTHENTICATE (Flight SQL)", 401)
                .await;
        }
        caller
    }

    async fn audit_login(
        &self,
        metadata: &MetadataMap,
        principal: &str,
        action: &str,
        status: u16,
    ) {
        self.state
            .audit
            .send(crate::audit::login_event(
                principal,
                action,
                "flightsql".into(),
                client_address(metadata),
                status,
            ))
            .await;
    }

    async fn bearer_caller(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        crate::auth::grpc_caller(&self.state, metadata).await
    }

    /// Plans the statement (for its schema, without running it) and answers with one
    /// endpoint to fetch it.
    async fn flight_info(
        &self,
        caller: &Caller,
        handle: &Handle,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = self
            .state
            .sql
            .describe(caller, &handle.sql, &handle.options(&self.state.decode)?)
            .await
            .map_err(status)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.encode().into(),
        };
        one_endpoint_info(ticket.as_any(), &schema, descriptor)
    }

    /// Runs a listing over `information_schema` as the caller (so it shows exactly what the
    /// caller may see) and returns its rows as strings. Audited like any statement.
    async fn listing(
        &self,
        caller: &Caller,
        metadata: &MetadataMap,
        sql: &str,
    ) -> Result<Vec<Vec<String>>, Status> {
        let outcome = self
            .state
            .sql
            .query(caller, sql, &QueryOptions::default())
            .await;
        let result = match outcome {
            Ok(result) => result,
            Err(e) => {
                self.audit(caller, metadata, sql, Err(&e)).await;
                return Err(status(e));
            }
        };
        let (stages, policies) = (result.stages, result.policies);
        let batches: Vec<datafusion::arrow::array::RecordBatch> = result
            .stream
            .try_collect()
            .await
            .map_err(|e| status(SqlError::from(e)))?;
        self.audit(caller, metadata, sql, Ok((stages.as_ref(), &policies)))
            .await;
        let mut rows = Vec::new();
        for batch in batches {
            let columns: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| {
                    datafusion::arrow::compute::cast(
                        c,
                        &datafusion::arrow::datatypes::DataType::Utf8,
                    )
                })
                .collect::<Result<_, _>>()
                .map_err(|e| Status::internal(e.to_string()))?;
            for row in 0..batch.num_rows() {
                rows.push(
                    columns
                        .iter()
                        .map(|c| {
                            use datafusion::arrow::array::AsArray;
                            c.as_string::<i32>().value(row).to_string()
                        })
                        .collect(),
                );
            }
        }
        Ok(rows)
    }

    /// Runs a statement once per parameter row (each audited); the rows it affected in all
    /// (a statement answering no count, DDL say, affects none).
    ///
    /// The rows run on a task of their own: a client that goes away mid-way does not stop
    /// the sequence between two of its statements.
    async fn update(
        &self,
        caller: &Caller,
        metadata: &MetadataMap,
        handle: Handle,
        rows: Vec<Vec<ScalarValue>>,
    ) -> Result<i64, Status> {
        let state = self.state.clone();
        let caller = caller.clone();
        let metadata = metadata.clone();
        tokio::spawn(async move { update_rows(&state, &caller, &metadata, &handle, rows).await })
            .await
            .map_err(|e| Status::internal(format!("the statement's task failed: {e}")))?
    }

    async fn audit(
        &self,
        caller: &Caller,
        metadata: &MetadataMap,
        sql: &str,
        outcome: crate::audit::Outcome<'_>,
    ) {
        audit_statement(&self.state, caller, metadata, sql, outcome).await;
    }
}

/// [`FloeFlightSql::update`]'s statements, one per parameter row.
async fn update_rows(
    state: &AppState,
    caller: &Caller,
    metadata: &MetadataMap,
    handle: &Handle,
    rows: Vec<Vec<ScalarValue>>,
) -> Result<i64, Status> {
    let mut affected = 0i64;
    for params in rows {
        let options = QueryOptions {
            params,
            ..handle.options(&state.decode)?
        };
        let outcome = state.sql.query(caller, &handle.sql, &options).await;
        audit_statement(
            state,
            caller,
            metadata,
            &handle.sql,
            crate::audit::outcome_of(&outcome),
        )
        .await;
        let result = outcome.map_err(status)?;
        let batches: Vec<RecordBatch> = result
            .stream
            .try_collect()
            .await
            .map_err(|e| status(SqlError::from(e)))?;
        if let Some(count) = batches
            .iter()
            .find(|b| b.num_rows() > 0 && b.num_columns() == 1)
            .and_then(|b| {
                datafusion::arrow::compute::cast(
                    b.column(0),
                    &datafusion::arrow::datatypes::DataType::Int64,
                )
                .ok()
            })
            .and_then(|c| {
                c.as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .map(|c| c.value(0))
            })
        {
            affected += count;
        }
    }
    Ok(affected)
}

async fn audit_statement(
    state: &AppState,
    caller: &Caller,
    metadata: &MetadataMap,
    sql: &str,
    outcome: crate::audit::Outcome<'_>,
) {
    state
        .audit
        .send(crate::audit::statement_event(
            &caller.principal.name,
            "SQL (Flight SQL)",
            "flightsql".into(),
            client_address(metadata),
            sql,
            outcome,
        ))
        .await;
}

const HANDSHAKE: &str = "HANDSHAKE (Flight SQL)";

/// The client id and secret of a handshake's HTTP Basic credentials.
fn basic_credentials(metadata: &MetadataMap) -> Result<(String, String), Status> {
    let header = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            Status::unauthenticated("send client id and secret as HTTP Basic credentials")
        })?;
    let encoded = header
        .strip_prefix("Basic ")
        .ok_or_else(|| Status::unauthenticated("the handshake takes HTTP Basic credentials"))?;
    crate::auth::decode_basic(encoded)
        .ok_or_else(|| Status::unauthenticated("malformed Basic credentials"))
}

/// The client's address as a proxy in front reports it (gRPC requests reach the handlers
/// without the peer address).
fn client_address(metadata: &MetadataMap) -> String {
    metadata
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// A flight of one endpoint, fetched with `ticket` (a statement handle, or a metadata command
/// itself).
fn one_endpoint_info(
    ticket: Any,
    schema: &datafusion::arrow::datatypes::Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// One record batch as a DoGet answer.
fn one_batch<E: std::fmt::Display>(
    batch: Result<datafusion::arrow::array::RecordBatch, E>,
) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let data = FlightDataEncoderBuilder::new()
        .with_schema(batch.schema())
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(|e| Status::internal(e.to_string()));
    Ok(Response::new(Box::pin(data)))
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

#[tonic::async_trait]
impl FlightSqlService for FloeFlightSql {
    type FlightService = FloeFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let (client_id, secret) = match basic_credentials(request.metadata()) {
            Ok(credentials) => credentials,
            Err(refused) => {
                self.audit_login(request.metadata(), "anonymous", HANDSHAKE, 401)
                    .await;
                return Err(refused);
            }
        };
        let issued = self.state.auth.token_for_client(&client_id, &secret).await;
        // Recorded under the principal's name, as the PostgreSQL wire's sign-ins are; a
        // refused one under the client id presented.
        let (principal, status) = match &issued {
            Ok(token) => match self.state.auth.authenticate(&token.access_token).await {
                Ok(principal) => (principal.name, 200),
                Err(_) => (format!("client:{client_id}"), 401),
            },
            Err(_) => (format!("client:{client_id}"), 401),
        };
        self.audit_login(request.metadata(), &principal, HANDSHAKE, status)
            .await;
        let issued = issued.map_err(|_| Status::unauthenticated("invalid client credentials"))?;
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: issued.access_token.clone().into(),
        };
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
        let bearer = format!("Bearer {}", issued.access_token)
            .parse()
            .map_err(|_| Status::internal("token is not a header value"))?;
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let handle = Handle::new(query.query, request.metadata());
        self.flight_info(&caller, &handle, request.into_inner())
            .await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let handle = Handle::decode(&query.prepared_statement_handle)?;
        self.flight_info(&caller, &handle, request.into_inner())
            .await
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let handle = Handle::decode(&ticket.statement_handle)?;
        let outcome = self
            .state
            .sql
            .query(&caller, &handle.sql, &handle.options(&self.state.decode)?)
            .await;
        self.audit(
            &caller,
            request.metadata(),
            &handle.sql,
            crate::audit::outcome_of(&outcome),
        )
        .await;
        let result = outcome.map_err(status)?;
        let batches = result
            .stream
            .map_err(|e| FlightError::Tonic(Box::new(status(SqlError::from(e)))));
        let data = FlightDataEncoderBuilder::new()
            .with_schema(result.schema)
            .build(batches)
            .map_err(|e| match e {
                FlightError::Tonic(status) => *status,
                other => Status::internal(other.to_string()),
            });
        Ok(Response::new(Box::pin(data)))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = self.caller(request.metadata()).await?;
        let handle = Handle::new(query.query, request.metadata());
        let options = handle.options(&self.state.decode)?;
        let schema = self
            .state
            .sql
            .describe(&caller, &handle.sql, &options)
            .await
            .map_err(status)?;
        let parameter_types = self
            .state
            .sql
            .parameter_types(&caller, &handle.sql, &options)
            .await
            .map_err(status)?;
        let parameters = datafusion::arrow::datatypes::Schema::new(
            parameter_types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    datafusion::arrow::datatypes::Field::new(
                        format!("${}", i + 1),
                        t.clone()
                            .unwrap_or(datafusion::arrow::datatypes::DataType::Null),
                        true,
                    )
                })
                .collect::<Vec<_>>(),
        );
        let ipc = |schema: &datafusion::arrow::datatypes::Schema| {
            let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
                .try_into()
                .map_err(|e: datafusion::arrow::error::ArrowError| {
                    Status::internal(e.to_string())
                })?;
            Ok::<_, Status>(bytes)
        };
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.encode().into(),
            dataset_schema: ipc(&schema)?,
            parameter_schema: if parameter_types.is_empty() {
                Default::default()
            } else {
                ipc(&parameters)?
            },
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        Ok(())
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = self.caller(request.metadata()).await?;
        let handle = Handle::new(command.query, request.metadata());
        self.update(&caller, request.metadata(), handle, vec![Vec::new()])
            .await
    }

    /// An update with bound parameters: the statement runs once per row of the parameter
    /// batches sent with it (ADBC's `executemany`), or once with the handle's bound row;
    /// answers the rows affected in all.
    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = self.caller(request.metadata()).await?;
        let metadata = request.metadata().clone();
        let handle = Handle::decode(&command.prepared_statement_handle)?;
        let batches = parameter_batches(request, &self.state.decode).await?;
        let count: usize = batches.iter().map(|b| b.num_rows()).sum();
        if count > MAX_PARAMETER_ROWS {
            return Err(Status::resource_exhausted(format!(
                "{count} rows of parameters were bound; a statement runs for at most \
                 {MAX_PARAMETER_ROWS} in one DoPut"
            )));
        }
        let mut rows = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                rows.push(
                    batch
                        .columns()
                        .iter()
                        .map(|column| ScalarValue::try_from_array(column, row))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| Status::invalid_argument(e.to_string()))?,
                );
            }
        }
        if rows.is_empty() {
            rows.push(handle.options(&self.state.decode)?.params);
        }
        self.update(&caller, &metadata, handle, rows).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<arrow_flight::sql::DoPutPreparedStatementResult, Status> {
        self.caller(request.metadata()).await?;
        let mut handle = Handle::decode(&query.prepared_statement_handle)?;
        let batches = parameter_batches(request, &self.state.decode).await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        match rows {
            0 => handle.params = None,
            1 => {
                let row = batches
                    .iter()
                    .find(|b| b.num_rows() == 1)
                    .expect("the batch holding the row");
                handle.bind(row)?;
            }
            n => {
                return Err(Status::invalid_argument(format!(
                    "{n} rows of parameters were bound; a statement runs with one row at a time"
                )));
            }
        }
        Ok(arrow_flight::sql::DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.encode().into()),
        })
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata()).await?;
        let schema = query.clone().into_builder(&self.info).schema();
        one_endpoint_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata()).await?;
        one_batch(query.into_builder(&self.info).build())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata()).await?;
        let schema = query.into_builder().schema();
        one_endpoint_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let rows = self
            .listing(
                &caller,
                request.metadata(),
                "SELECT DISTINCT catalog_name FROM information_schema.schemata ORDER BY 1",
            )
            .await?;
        let mut builder = query.into_builder();
        for row in rows {
            builder.append(&row[0]);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata()).await?;
        let schema = query.clone().into_builder().schema();
        one_endpoint_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let rows = self
            .listing(
                &caller,
                request.metadata(),
                "SELECT catalog_name, schema_name FROM information_schema.schemata ORDER BY 1, 2",
            )
            .await?;
        let mut builder = query.into_builder();
        for row in rows {
            builder.append(&row[0], &row[1]);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata()).await?;
        let schema = query.clone().into_builder().schema();
        one_endpoint_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = self.caller(request.metadata()).await?;
        let rows = self
            .listing(
                &caller,
                request.metadata(),
                "SELECT table_catalog, table_schema, table_name, table_type \
                 FROM information_schema.tables ORDER BY 1, 2, 3",
            )
            .await?;
        let include_schema = query.include_schema;
        let mut builder = query.into_builder();
        let empty = datafusion::arrow::datatypes::Schema::empty();
        for row in rows {
            let schema = if include_schema {
                let quoted = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
                let sql = format!(
                    "SELECT * FROM {}.{}.{}",
                    quoted(&row[0]),
                    quoted(&row[1]),
                    quoted(&row[2])
                );
                let options = QueryOptions::default();
                match self.state.sql.describe(&caller, &sql, &options).await {
                    Ok(schema) => schema.as_ref().clone(),
                    // Listed but unreadable (a view Floe's SQL cannot expand, say).
                    Err(_) => empty.clone(),
                }
            } else {
                empty.clone()
            };
            builder
                .append(&row[0], &row[1], &row[2], &row[3], &schema)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(request.metadata()).await?;
        let schema = query.into_builder().schema();
        one_endpoint_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.caller(request.metadata()).await?;
        let mut builder = query.into_builder();
        for kind in ["BASE TABLE", "VIEW"] {
            builder.append(kind);
        }
        one_batch(builder.build())
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "Floe's Flight SQL does not serve {} yet",
            message.type_url
        )))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
