//! `SchemaRegistryStore` conformance: global ids, subject versions, soft and permanent
//! deletes, compatibility levels.

use std::sync::Arc;

use floe_catalog::registry::{SchemaRegistryStore, SchemaType};

pub async fn registry(store: Arc<dyn SchemaRegistryStore>) {
    let a = store
        .schema_id(SchemaType::Avro, "A", "A text", "[]")
        .await
        .unwrap();
    let b = store
        .schema_id(SchemaType::Avro, "B", "B text", "[]")
        .await
        .unwrap();
    assert_ne!(a, b);
    // One id per type and canonical text (and references).
    assert_eq!(
        store
            .schema_id(SchemaType::Avro, "A", "A again", "[]")
            .await
            .unwrap(),
        a
    );
    let json_a = store
        .schema_id(SchemaType::Json, "A", "A text", "[]")
        .await
        .unwrap();
    assert_ne!(json_a, a);
    let stored = store.schema_by_id(a).await.unwrap().unwrap();
    assert_eq!(stored.schema, "A text");
    assert_eq!(stored.canonical, "A");
    assert_eq!(stored.schema_type, SchemaType::Avro);
    assert!(store.schema_by_id(9_999).await.unwrap().is_none());

    assert_eq!(store.add_version("s-value", a).await.unwrap(), 1);
    assert_eq!(store.add_version("s-value", b).await.unwrap(), 2);
    assert_eq!(store.add_version("t-value", a).await.unwrap(), 1);
    let versions = store.versions("s-value", false).await.unwrap();
    assert_eq!(
        versions
            .iter()
            .map(|v| (v.version, v.schema.id))
            .collect::<Vec<_>>(),
        [(1, a), (2, b)]
    );
    assert_eq!(store.subjects(false).await.unwrap(), ["s-value", "t-value"]);
    assert_eq!(
        store.usages(a).await.unwrap(),
        [("s-value".to_string(), 1), ("t-value".to_string(), 1)]
    );

    // Soft delete hides; permanent delete removes only soft-deleted versions.
    assert_eq!(
        store
            .delete_versions("s-value", Some(2), true)
            .await
            .unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        store
            .delete_versions("s-value", Some(2), false)
            .await
            .unwrap(),
        [2]
    );
    assert_eq!(store.versions("s-value", false).await.unwrap().len(), 1);
    assert_eq!(store.versions("s-value", true).await.unwrap().len(), 2);
    assert_eq!(
        store
            .delete_versions("s-value", Some(2), true)
            .await
            .unwrap(),
        [2]
    );
    assert_eq!(store.versions("s-value", true).await.unwrap().len(), 1);
    // A version number is not reused after a soft delete of the latest.
    assert_eq!(
        store.delete_versions("t-value", None, false).await.unwrap(),
        [1]
    );
    assert_eq!(store.add_version("t-value", b).await.unwrap(), 2);
    assert_eq!(store.subjects(false).await.unwrap(), ["s-value", "t-value"]);
    assert_eq!(store.subjects(true).await.unwrap(), ["s-value", "t-value"]);

    assert_eq!(store.compatibility(None).await.unwrap(), None);
    store.set_compatibility(None, Some("FULL")).await.unwrap();
    store
        .set_compatibility(Some("s-value"), Some("NONE"))
        .await
        .unwrap();
    assert_eq!(
        store.compatibility(None).await.unwrap().as_deref(),
        Some("FULL")
    );
    assert_eq!(
        store
            .compatibility(Some("s-value"))
            .await
            .unwrap()
            .as_deref(),
        Some("NONE")
    );
    store
        .set_compatibility(Some("s-value"), None)
        .await
        .unwrap();
    assert_eq!(store.compatibility(Some("s-value")).await.unwrap(), None);
}
