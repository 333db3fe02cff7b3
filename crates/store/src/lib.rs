//! SQLite and PostgreSQL implementations of Floe's metadata store.
//!
//! One implementation serves both databases through sqlx's `Any` driver: the SQL is written
//! in the dialect both understand (`$n` parameters, `ON CONFLICT`, `RETURNING`), and each
//! database has its own append-only migrations. SQLite runs in WAL mode with writes
//! serialized in-process, so a write transaction never fails on lock upgrade; PostgreSQL
//! relies on its own row locks and constraints.

mod catalog;
mod cluster;
mod error;
mod events;
mod governance;
mod jobs;
mod migrations;
mod pipelines;
mod policies;
mod registry;
mod soft_delete;
mod tenants;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use floe_catalog::clock::now_ms;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Executor};
use tokio::sync::{Mutex, MutexGuard};

pub use error::StoreError;

/// Milliseconds since the epoch, now.
/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The metadata store over SQLite or PostgreSQL.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// SQLite allows one writer; serializing writes here avoids busy errors on lock upgrade.
    write_lock: Option<Arc<Mutex<()>>>,
}

/// A write transaction that carries the audit record of the change it makes and the change
/// events it emits.
pub(crate) struct WriteTx<'a> {
    store: &'a SqlStore,
    tx: sqlx::Transaction<'static, sqlx::Any>,
    _guard: Option<MutexGuard<'a, ()>>,
    events: Vec<floe_catalog::events::NewEvent>,
}

impl WriteTx<'_> {
    /// Emits `event` with the change: it is written to the outbox when (and only if) the
    /// transaction commits.
    pub(crate) fn emit(&mut self, event: Option<floe_catalog::events::NewEvent>) {
        self.events.extend(event);
    }

    /// Writes the change events emitted and the request's pending audit record (if any) and
    /// commits them with the change.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        events::insert(self.store.backend, &mut self.tx, &self.events).await?;
        let scope = floe_catalog::governance::audit::AuditScope::current();
        let pending = scope.as_ref().and_then(|scope| scope.pending());
        let written = match pending {
            Some(event) => {
                let seq = governance::append_chained(
                    self.store.backend,
                    &mut self.tx,
                    vec![event.clone()],
                )
                .await?;
                Some((seq, event))
            }
            None => None,
        };
        self.tx.commit().await?;
        if let (Some(scope), Some((seq, event))) = (scope, written) {
            scope.mark_committed(seq, event);
        }
        Ok(())
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = sqlx::AnyConnection;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

impl SqlStore {
    /// Opens (creating if needed) the store at `url` — `sqlite:PATH` or `postgres://…` — and
    /// applies pending migrations.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::Config(format!(
                "catalog database URL must start with sqlite: or postgres://, got {}",
                redact_url(url)
            )));
        };
        let url = match backend {
            Backend::Sqlite => sqlite_url(url)?,
            Backend::Postgres => url.to_string(),
        };
        let pool_options = AnyPoolOptions::new()
            .max_connections(match backend {
                Backend::Sqlite => options.max_connections.min(8),
                Backend::Postgres => options.max_connections,
            })
            .acquire_timeout(options.acquire_timeout)
            .after_release(move |conn, _| Box::pin(release_outside_transaction(backend, conn)));
        let pool = match backend {
            Backend::Sqlite => {
                pool_options
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute(
                                "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                                 PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON;",
                            )
                            .await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await
            }
            Backend::Postgres => pool_options.connect(&url).await,
        }
        .map_err(|e| StoreError::Connect {
            url: redact_url(&url),
            source: e,
        })?;
        let store = Self {
            pool,
            backend,
            write_lock: (backend == Backend::Sqlite).then(|| Arc::new(Mutex::new(()))),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let migrator = match self.backend {
            Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
        };
        migrator.run(&self.pool).await.map_err(StoreError::Migrate)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Held for the duration of a write transaction on SQLite; a no-op on PostgreSQL.
    pub(crate) async fn write_guard(&self) -> Option<MutexGuard<'_, ()>> {
        match &self.write_lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        }
    }

    /// Opens a write transaction. Its [`WriteTx::commit`] also commits the audit record of
    /// the request being served, when one is pending (see
    /// [`floe_catalog::governance::audit::AuditScope`]).
    pub(crate) async fn write(&self) -> Result<WriteTx<'_>, sqlx::Error> {
        let guard = self.write_guard().await;
        let tx = self.begin_write().await?;
        Ok(WriteTx {
            store: self,
            tx,
            _guard: guard,
            events: Vec::new(),
        })
    }

    /// Begins a transaction that will write. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), waiting out another connection's write under the busy timeout,
    /// where a plain `BEGIN` would read first and could then fail to upgrade its lock with
    /// "database is locked" when another connection wrote in between.
    ///
    /// The begin runs on a task of its own, so it always finishes: sqlx acknowledges `BEGIN`
    /// before it builds the [`sqlx::Transaction`] whose drop rolls back, and a caller dropped
    /// in between (a client that hung up) would otherwise strand the connection inside a
    /// transaction. If the caller is gone, the task's transaction is dropped and rolled back.
    pub(crate) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        let pool = self.pool.clone();
        let backend = self.backend;
        tokio::spawn(async move {
            match backend {
                Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
                Backend::Postgres => pool.begin().await,
            }
        })
        .await
        .map_err(|e| sqlx::Error::Io(std::io::Error::other(format!("begin a transaction: {e}"))))?
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(StoreError::Query)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Whether a connection coming back to the pool may be handed out again: only outside a
/// transaction.
///
/// A caller that vanishes at the wrong moment must never hand back a connection still inside a
/// transaction: it would hold SQLite's write lock (or PostgreSQL's row locks) with no owner,
/// fail every later `BEGIN IMMEDIATE` on it and swallow later writes into a transaction nobody
/// commits. [`SqlStore::begin_write`] closes the one window sqlx leaves open; this is the net
/// under every other path. On SQLite the ping first runs the rollback a dropped
/// [`sqlx::Transaction`] queued (its worker counts the depth when it runs it); PostgreSQL counts
/// the depth as it queues. A connection still in a transaction is closed, which rolls the
/// transaction back in the database.
async fn release_outside_transaction(
    backend: Backend,
    conn: &mut sqlx::AnyConnection,
) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if backend == Backend::Sqlite && conn.is_in_transaction() {
        conn.ping().await?;
    }
    if conn.is_in_transaction() {
        tracing::warn!("discard a pooled connection left inside a transaction");
        return Ok(false);
    }
    Ok(true)
}

/// Turns `sqlite:PATH` into a URL that creates the file, creating its directory too.
fn sqlite_url(url: &str) -> Result<String, StoreError> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path.is_empty() || path == ":memory:" {
        return Err(StoreError::Config(
            "an in-memory SQLite catalog would lose everything on restart; give a file path".into(),
        ));
    }
    if let Some(parent) = Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            StoreError::Config(format!("cannot create directory {}: {e}", parent.display()))
        })?;
    }
    let query = if query.is_empty() {
        "mode=rwc".to_string()
    } else {
        query.to_string()
    };
    Ok(format!("sqlite://{path}?{query}"))
}

/// Hides the password of a database URL.
pub fn redact_url(url: &str) -> String {
    match url::Url::from_str(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("<redacted>"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted_and_checked() {
        assert_eq!(
            redact_url("postgres://floe:secret@localhost/db"),
            "postgres://floe:%3Credacted%3E@localhost/db"
        );
        assert!(sqlite_url("sqlite::memory:").is_err());
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(&format!("sqlite:{}/sub/catalog.db", dir.path().display())).unwrap();
        assert!(url.ends_with("/sub/catalog.db?mode=rwc"), "{url}");
        assert!(dir.path().join("sub").is_dir());
    }
}
