//! `MigrationStore` conformance: records created, replaced (not doubled), listed by wave and
//! source, summarized per migration, and forgotten.

use std::sync::Arc;

use floe_catalog::migrations::{MigrationStore, MigrationTable};
use serde_json::json;

fn record(migration: &str, source: &str, wave: i64, step: &str) -> MigrationTable {
    MigrationTable {
        migration: migration.into(),
        source: source.into(),
        wave,
        state: json!({"step": step}),
        updated_at_ms: 0,
    }
}

pub async fn migrations(store: Arc<dyn MigrationStore>) {
    assert!(store.migrations().await.unwrap().is_empty());
    store
        .put_migration_table(&record("m1", "sales.orders", 2, "migrating"))
        .await
        .unwrap();
    store
        .put_migration_table(&record("m1", "sales.customers", 1, "migrated"))
        .await
        .unwrap();
    store
        .put_migration_table(&record("m2", "web.events", 1, "migrated"))
        .await
        .unwrap();
    // The same source again replaces its record.
    store
        .put_migration_table(&record("m1", "sales.orders", 2, "migrated"))
        .await
        .unwrap();

    let tables = store.migration_tables("m1").await.unwrap();
    let listed: Vec<(&str, i64, &serde_json::Value)> = tables
        .iter()
        .map(|t| (t.source.as_str(), t.wave, &t.state))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("sales.customers", 1, &json!({"step": "migrated"})),
            ("sales.orders", 2, &json!({"step": "migrated"})),
        ]
    );
    assert!(tables.iter().all(|t| t.updated_at_ms > 0));

    let summaries = store.migrations().await.unwrap();
    assert_eq!(summaries.len(), 2);
    assert_eq!(
        (summaries[0].migration.as_str(), summaries[0].tables),
        ("m1", 2)
    );
    assert_eq!(
        (summaries[1].migration.as_str(), summaries[1].tables),
        ("m2", 1)
    );

    assert_eq!(store.forget_migration("m1").await.unwrap(), 2);
    assert!(store.migration_tables("m1").await.unwrap().is_empty());
    assert_eq!(store.migrations().await.unwrap().len(), 1);
}
