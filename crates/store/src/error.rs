use floe_catalog::CatalogError;

/// Failures opening or querying the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Config(String),
    #[error("cannot connect to catalog database {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("catalog database migration failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("catalog database query failed: {0}")]
    Query(#[source] sqlx::Error),
    #[error("catalog database holds a malformed {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
}

impl From<StoreError> for CatalogError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::Query(sqlx::Error::PoolTimedOut) => {
                CatalogError::Unavailable("the catalog database is overloaded; retry later".into())
            }
            _ => CatalogError::internal("metadata store", e),
        }
    }
}

pub(crate) fn query_error(e: sqlx::Error) -> CatalogError {
    StoreError::Query(e).into()
}

pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

pub(crate) fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_foreign_key_violation())
}
