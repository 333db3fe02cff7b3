//! The change-event outbox: events commit with their change and only then, numbered in order;
//! a sink's progress never moves back; one holder leases a sink at a time; pruning keeps what
//! a sink has not delivered.

use std::sync::Arc;

use floe_catalog::events::EventStore;
use floe_catalog::model::*;
use floe_catalog::store::CatalogStore;

use super::{namespace, tabular, warehouse};

pub async fn events(catalog: Arc<dyn CatalogStore>, events: Arc<dyn EventStore>) {
    let start = events
        .events_after(0, 100_000)
        .await
        .unwrap()
        .last()
        .map_or(0, |e| e.seq);
    let wh = warehouse(&catalog, "events-wh").await;
    namespace(&catalog, wh.id, &["ev"]).await;
    let table = tabular(wh.id, &["ev"], "t", TabularKind::Table);
    catalog.create_tabular(&table).await.unwrap();
    // A refused change emits nothing.
    assert!(catalog.create_tabular(&table).await.is_err());
    let swap = |from: &str, to: &str| MetadataSwap::Update {
        id: table.id,
        expected_location: from.to_string(),
        new_location: to.to_string(),
        moved_to: None,
    };
    let first = table.metadata_location.clone();
    catalog
        .commit(&[swap(&first, "file:///m/2.json")])
        .await
        .unwrap();
    assert!(
        catalog
            .commit(&[swap(&first, "file:///m/3.json")])
            .await
            .is_err()
    );
    let written = events.events_after(start, 100).await.unwrap();
    let kinds: Vec<&str> = written.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["namespace.created", "table.created", "table.committed"]
    );
    let seqs: Vec<i64> = written.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [start + 1, start + 2, start + 3]);
    let committed = &written[2];
    assert_eq!(committed.subject, "events-wh/ev.t");
    assert_eq!(committed.data["metadata-location"], "file:///m/2.json");
    assert_eq!(committed.data["previous-metadata-location"], first.as_str());
    assert_eq!(committed.data["id"], table.id.to_string());

    // Progress never moves back; leases are exclusive until they expire.
    events
        .set_event_cursor("test-sink", start + 2)
        .await
        .unwrap();
    events
        .set_event_cursor("test-sink", start + 1)
        .await
        .unwrap();
    assert_eq!(events.event_cursor("test-sink").await.unwrap(), start + 2);
    assert!(
        events
            .lease_event_sink("test-sink", "a", 60_000)
            .await
            .unwrap()
    );
    assert!(
        !events
            .lease_event_sink("test-sink", "b", 60_000)
            .await
            .unwrap()
    );
    assert!(events.lease_event_sink("test-sink", "a", 1).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(
        events
            .lease_event_sink("test-sink", "b", 60_000)
            .await
            .unwrap()
    );

    // Pruning removes what the sink delivered and keeps the rest.
    events
        .prune_events(&["test-sink".to_string()], 0)
        .await
        .unwrap();
    let left = events.events_after(0, 100).await.unwrap();
    assert_eq!(left.first().map(|e| e.seq), Some(start + 3));
    // Numbers continue after pruning, from the sinks' progress at least.
    events
        .prune_events(&["test-sink".to_string()], i64::MAX)
        .await
        .unwrap();
    namespace(&catalog, wh.id, &["ev2"]).await;
    let next = events.events_after(0, 100).await.unwrap();
    assert_eq!(next.len(), 1);
    assert!(next[0].seq > start + 2, "{next:?}");
}
