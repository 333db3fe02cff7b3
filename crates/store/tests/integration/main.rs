//! The store conformance suite, run on SQLite always and on PostgreSQL when
//! `FLOE_TEST_POSTGRES_URL` names a server (the project's test script starts one).

mod suite;

use std::sync::Arc;

use floe_store::{SqlStore, StoreOptions};
use sqlx::Executor;

#[tokio::test]
async fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}/catalog.db", dir.path().display());
    let store = SqlStore::connect(&url, StoreOptions::default())
        .await
        .unwrap();
    suite::run_all(Arc::new(store.clone())).await;
    suite::audit_commits_with_changes(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::audit_queries(Arc::new(store.clone())).await;
    suite::jobs(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::pipelines(Arc::new(store.clone())).await;
    suite::registry(Arc::new(store.clone())).await;
    suite::tenants(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::soft_delete(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::migrations(Arc::new(store.clone())).await;
    suite::cancelled_writes(Arc::new(store.clone())).await;
    suite::events(Arc::new(store.clone()), Arc::new(store.clone())).await;
    // Another process takes the write lock at once: no pooled connection was left holding it.
    let other = SqlStore::connect(&url, StoreOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(3),
        other.pool().execute("CREATE TABLE probe_lock (x INTEGER)"),
    )
    .await
    .expect("the write lock is free")
    .unwrap();
    other.close().await;
    // Reopening runs no migration twice and keeps the data.
    store.close().await;
    let reopened = SqlStore::connect(&url, StoreOptions::default())
        .await
        .unwrap();
    suite::data_survives_reopen(Arc::new(reopened)).await;
}

#[tokio::test]
async fn postgres_store_conforms() {
    let Ok(url) = std::env::var("FLOE_TEST_POSTGRES_URL") else {
        if std::env::var("CI").is_ok() {
            panic!(
                "FLOE_TEST_POSTGRES_URL must be set in CI: the PostgreSQL store is part of the suite"
            );
        }
        eprintln!("FLOE_TEST_POSTGRES_URL is not set; skipping the PostgreSQL store suite");
        return;
    };
    let url = fresh_database(&url).await;
    let store = SqlStore::connect(&url, StoreOptions::default())
        .await
        .unwrap();
    suite::run_all(Arc::new(store.clone())).await;
    suite::audit_commits_with_changes(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::audit_queries(Arc::new(store.clone())).await;
    suite::jobs(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::pipelines(Arc::new(store.clone())).await;
    suite::registry(Arc::new(store.clone())).await;
    suite::tenants(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::soft_delete(Arc::new(store.clone()), Arc::new(store.clone())).await;
    suite::migrations(Arc::new(store.clone())).await;
    suite::cancelled_writes(Arc::new(store.clone())).await;
    suite::events(Arc::new(store.clone()), Arc::new(store.clone())).await;
    // No session of this database is left idle inside a transaction.
    let stuck: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(stuck, 0, "sessions left idle in a transaction");
    store.close().await;
    let reopened = SqlStore::connect(&url, StoreOptions::default())
        .await
        .unwrap();
    suite::data_survives_reopen(Arc::new(reopened)).await;
}

/// Creates an empty database on the server of `url` and returns its URL.
pub async fn fresh_database(url: &str) -> String {
    sqlx::any::install_default_drivers();
    let name = format!("floe_test_{}", uuid::Uuid::new_v4().simple());
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    pool.execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    pool.close().await;
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_path(&format!("/{name}"));
    parsed.to_string()
}
