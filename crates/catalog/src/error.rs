//! The catalog's error type and its transport-neutral codes.

use std::fmt;

/// What kind of failure an error is, independent of any transport. The HTTP layer maps each
/// code to exactly one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    AlreadyExists,
    Conflict,
    Unsupported,
    PayloadTooLarge,
    /// The caller asks for more at once than it may; retrying later helps.
    TooManyRequests,
    /// A quota is used up; waiting alone does not free it.
    QuotaExceeded,
    /// The work ran past its time limit and was stopped.
    Timeout,
    Unavailable,
    CommitStateUnknown,
    Internal,
}

/// Errors of catalog operations. Each carries the Iceberg exception type clients expect.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{message}")]
    BadRequest { message: String },
    /// Metadata that breaks a rule of the Iceberg spec (Java clients raise these as
    /// `IllegalArgumentException`).
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{message}")]
    NotFound {
        error_type: &'static str,
        message: String,
    },
    #[error("{message}")]
    AlreadyExists {
        error_type: &'static str,
        message: String,
    },
    /// A not-found answer given because the caller may not see the object (which may exist):
    /// clients see the inner error; the audit records a denial.
    #[error("{0}")]
    Hidden(Box<CatalogError>),
    /// Missing, malformed, expired or revoked credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but without the privilege.
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    NamespaceNotEmpty(String),
    /// The request conflicts with the state of the object it names (deletion protection set
    /// on it, the name an undrop would take held by another): 409 with `error_type`.
    #[error("{message}")]
    Conflict {
        error_type: &'static str,
        message: String,
    },
    #[error("{0}")]
    CommitFailed(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// More work at once than the caller may have (a limit named in the message).
    #[error("{0}")]
    TooManyRequests(String),
    /// A tenant's limit (or the server's overload guard) refused the work: which limit,
    /// its value, the tenant, and when trying again can succeed.
    #[error("{0}")]
    Limited(crate::tenants::Refused),
    /// Stopped at its time limit (named in the message).
    #[error("{0}")]
    Timeout(String),
    /// The commit may or may not have been applied.
    #[error("{0}")]
    CommitStateUnknown(String),
    #[error("{0}")]
    Unavailable(String),
    /// A table's file that does not read (written wrongly by another engine, damaged in
    /// storage): a fault of the data, not of the request, and said as it is — the message names
    /// the file and its writer.
    #[error("{0}")]
    Unreadable(String),
    /// An unexpected failure; the message is for logs only, never for clients.
    #[error("{context}: {source}")]
    Internal {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub type Result<T, E = CatalogError> = std::result::Result<T, E>;

impl CatalogError {
    /// The same error again (an internal error's cause kept as its message), for a caller
    /// that found it behind a reference — inside another error's chain, say.
    pub fn copied(&self) -> CatalogError {
        use CatalogError::*;
        match self {
            BadRequest { message } => BadRequest {
                message: message.clone(),
            },
            InvalidArgument(m) => InvalidArgument(m.clone()),
            NotFound {
                error_type,
                message,
            } => NotFound {
                error_type,
                message: message.clone(),
            },
            AlreadyExists {
                error_type,
                message,
            } => AlreadyExists {
                error_type,
                message: message.clone(),
            },
            Hidden(inner) => Hidden(Box::new(inner.copied())),
            Unauthenticated(m) => Unauthenticated(m.clone()),
            PermissionDenied(m) => PermissionDenied(m.clone()),
            NamespaceNotEmpty(m) => NamespaceNotEmpty(m.clone()),
            Conflict {
                error_type,
                message,
            } => Conflict {
                error_type,
                message: message.clone(),
            },
            CommitFailed(m) => CommitFailed(m.clone()),
            Unsupported(m) => Unsupported(m.clone()),
            PayloadTooLarge(m) => PayloadTooLarge(m.clone()),
            TooManyRequests(m) => TooManyRequests(m.clone()),
            Limited(r) => Limited(r.clone()),
            Timeout(m) => Timeout(m.clone()),
            CommitStateUnknown(m) => CommitStateUnknown(m.clone()),
            Unavailable(m) => Unavailable(m.clone()),
            Unreadable(m) => Unreadable(m.clone()),
            Internal { context, source } => Internal {
                context: context.clone(),
                source: source.to_string().into(),
            },
        }
    }

    pub fn bad_request(message: impl fmt::Display) -> Self {
        CatalogError::BadRequest {
            message: message.to_string(),
        }
    }

    pub fn internal(
        context: impl fmt::Display,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        CatalogError::Internal {
            context: context.to_string(),
            source: source.into(),
        }
    }

    pub fn no_such_warehouse(name: &str) -> Self {
        CatalogError::NotFound {
            error_type: "NoSuchWarehouseException",
            message: format!("Warehouse does not exist: {name}"),
        }
    }

    pub fn no_such_namespace(ns: impl fmt::Display) -> Self {
        CatalogError::NotFound {
            error_type: "NoSuchNamespaceException",
            message: format!("Namespace does not exist: {ns}"),
        }
    }

    pub fn no_such_table(ident: impl fmt::Display) -> Self {
        CatalogError::NotFound {
            error_type: "NoSuchTableException",
            message: format!("Table does not exist: {ident}"),
        }
    }

    pub fn no_such_view(ident: impl fmt::Display) -> Self {
        CatalogError::NotFound {
            error_type: "NoSuchViewException",
            message: format!("View does not exist: {ident}"),
        }
    }

    pub fn not_found_file(location: &str) -> Self {
        CatalogError::NotFound {
            error_type: "NotFoundException",
            message: format!("Failed to open input stream for file: {location}"),
        }
    }

    /// A drop or purge refused by deletion protection: the message names the flag and where
    /// it is set.
    pub fn protected(message: impl fmt::Display) -> Self {
        CatalogError::Conflict {
            error_type: "DeletionProtectedException",
            message: message.to_string(),
        }
    }

    pub fn already_exists(message: impl fmt::Display) -> Self {
        CatalogError::AlreadyExists {
            error_type: "AlreadyExistsException",
            message: message.to_string(),
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            CatalogError::Hidden(inner) => inner.code(),
            CatalogError::BadRequest { .. } | CatalogError::InvalidArgument(_) => {
                ErrorCode::InvalidArgument
            }
            CatalogError::NotFound { .. } => ErrorCode::NotFound,
            CatalogError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            CatalogError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            CatalogError::PermissionDenied(_) => ErrorCode::PermissionDenied,
            CatalogError::NamespaceNotEmpty(_)
            | CatalogError::CommitFailed(_)
            | CatalogError::Conflict { .. } => ErrorCode::Conflict,
            CatalogError::Unsupported(_) => ErrorCode::Unsupported,
            CatalogError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            CatalogError::TooManyRequests(_) => ErrorCode::TooManyRequests,
            CatalogError::Limited(r) => r.code(),
            CatalogError::Timeout(_) => ErrorCode::Timeout,
            CatalogError::CommitStateUnknown(_) => ErrorCode::CommitStateUnknown,
            CatalogError::Unavailable(_) => ErrorCode::Unavailable,
            CatalogError::Unreadable(_) | CatalogError::Internal { .. } => ErrorCode::Internal,
        }
    }

    /// The Iceberg exception name clients map the error to.
    pub fn error_type(&self) -> &'static str {
        match self {
            CatalogError::Hidden(inner) => inner.error_type(),
            CatalogError::BadRequest { .. } => "BadRequestException",
            CatalogError::InvalidArgument(_) => "IllegalArgumentException",
            CatalogError::NotFound { error_type, .. }
            | CatalogError::AlreadyExists { error_type, .. }
            | CatalogError::Conflict { error_type, .. } => error_type,
            CatalogError::Unauthenticated(_) => "NotAuthorizedException",
            CatalogError::PermissionDenied(_) => "ForbiddenException",
            CatalogError::NamespaceNotEmpty(_) => "NamespaceNotEmptyException",
            CatalogError::CommitFailed(_) => "CommitFailedException",
            CatalogError::Unsupported(_) => "UnsupportedOperationException",
            CatalogError::PayloadTooLarge(_) => "PayloadTooLargeException",
            CatalogError::TooManyRequests(_) => "TooManyRequestsException",
            CatalogError::Limited(_) => "LimitExceededException",
            CatalogError::Timeout(_) => "TimeoutException",
            CatalogError::CommitStateUnknown(_) => "CommitStateUnknownException",
            CatalogError::Unavailable(_) => "ServiceUnavailableException",
            CatalogError::Unreadable(_) => "ServiceFailureException",
            CatalogError::Internal { .. } => "InternalServerError",
        }
    }
}

impl From<floe_storage::StorageError> for CatalogError {
    fn from(e: floe_storage::StorageError) -> Self {
        match e {
            floe_storage::StorageError::InvalidLocation { .. }
            | floe_storage::StorageError::InvalidProfile(_) => CatalogError::bad_request(e),
            other => CatalogError::internal("storage failed", other),
        }
    }
}
