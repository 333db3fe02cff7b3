//! Record formats, metadata columns, table layout, and records the broker deleted before
//! the pipeline read them.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, RecordBatch};
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine};
use floe_store::{SqlStore, StoreOptions};
use floe_stream::kafka::{Format, MetadataColumn, Pipeline, PipelineSpec};
use floe_stream::registry::{Registry, RegistryError, SchemaType};
use futures::TryStreamExt;
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use super::embedded;

fn spec(bootstrap: &str, topic: &str, table: &str) -> PipelineSpec {
    PipelineSpec {
        name: table.replace('_', "-"),
        warehouse: "wh".into(),
        namespace: vec!["raw".into()],
        table: table.into(),
        bootstrap_servers: bootstrap.into(),
        topics: vec![topic.into()],
        commit_interval_ms: 200,
        ..Default::default()
    }
}

async fn query(engine: &SqlEngine, sql: &str) -> Vec<RecordBatch> {
    let options = QueryOptions {
        warehouse: Some("wh".into()),
        ..Default::default()
    };
    match engine.query(&Caller::system(), sql, &options).await {
        Ok(result) => result.stream.try_collect().await.unwrap(),
        Err(_) => Vec::new(),
    }
}

/// The rows of `sql` as text, columns joined by `|` (none when it fails).
pub(super) async fn text_rows(engine: &SqlEngine, sql: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for batch in query(engine, sql).await {
        let columns: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| {
                datafusion::arrow::compute::cast(c, &datafusion::arrow::datatypes::DataType::Utf8)
                    .unwrap()
            })
            .collect();
        for i in 0..batch.num_rows() {
            let row: Vec<String> = columns
                .iter()
                .map(|c| {
                    let text = c
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::StringArray>()
                        .unwrap();
                    if text.is_null(i) {
                        "null".to_string()
                    } else {
                        text.value(i).to_string()
                    }
                })
                .collect();
            rows.push(row.join("|"));
        }
    }
    rows
}

async fn count(engine: &SqlEngine, table: &str) -> usize {
    let rows = text_rows(engine, &format!("SELECT count(*) FROM raw.{table}")).await;
    rows.first().map_or(0, |r| r.parse().unwrap())
}

/// Runs `spec` until `table` holds `expected` rows (or 60 s pass), then stops it.
async fn run_until(
    engine: &Arc<SqlEngine>,
    spec: &PipelineSpec,
    registry: Option<Registry>,
    table: &str,
    expected: usize,
) -> floe_stream::kafka::PipelineStats {
    let mut pipeline =
        Pipeline::new(spec.clone(), engine.catalog().clone(), engine.clone()).unwrap();
    if let Some(registry) = registry {
        pipeline = pipeline.with_registry(Arc::new(registry));
    }
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move { pipeline.run(stop).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while count(engine, table).await < expected && std::time::Instant::now() < deadline {
        if running.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One more interval, so a second (wrong) commit would show.
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.cancel();
    running.await.unwrap().unwrap()
}

async fn table(engine: &SqlEngine, name: &str) -> floe_catalog::service::LoadedTable {
    engine
        .catalog()
        .load_table(
            &Caller::system(),
            "wh",
            &TableIdent::new(NamespaceIdent::new("raw".into()), name.into()),
        )
        .await
        .unwrap()
}

/// Floe's registry over the catalog's own store.
async fn registry_in(dir: &std::path::Path) -> Registry {
    let url = format!("sqlite:{}", dir.join("catalog.db").display());
    let store = Arc::new(
        SqlStore::connect(&url, StoreOptions::default())
            .await
            .unwrap(),
    );
    Registry::new(store)
}

fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap()
}

async fn send(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    key: Option<&str>,
    payload: &[u8],
    headers: Option<OwnedHeaders>,
) {
    let mut record = FutureRecord::<str, [u8]>::to(topic)
        .payload(payload)
        .partition(partition);
    if let Some(key) = key {
        record = record.key(key);
    }
    if let Some(headers) = headers {
        record = record.headers(headers);
    }
    producer.send(record, Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_are_a_dead_letter_not_a_silent_skip() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("short", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    for id in 0..10 {
        send(
            &producer,
            "short",
            0,
            None,
            format!(r#"{{"id": {id}}}"#).as_bytes(),
            None,
        )
        .await;
    }
    let spec = spec(&bootstrap, "short", "short");
    run_until(&engine, &spec, None, "short", 10).await;
    assert_eq!(count(&engine, "short").await, 10);

    // While the pipeline is away, the mock broker's retention (5 MiB per partition) deletes
    // the oldest records it has not read.
    let filler = "x".repeat(1000);
    for id in 10..7010 {
        let payload = format!(r#"{{"id": {id}, "pad": "{filler}"}}"#);
        send(&producer, "short", 0, None, payload.as_bytes(), None).await;
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let (low, high) = consumer
        .fetch_watermarks("short", 0, Duration::from_secs(5))
        .unwrap();
    assert!(low > 10, "the broker kept everything (low watermark {low})");
    let expected = 10 + (high - low) as usize;
    let stats = run_until(&engine, &spec, None, "short", expected).await;
    assert_eq!(count(&engine, "short").await, expected);
    assert_eq!(stats.records_lost, (low - 10) as u64);
    let dead = text_rows(
        &engine,
        "SELECT \"offset\", reason FROM raw.short__dead_letters",
    )
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].starts_with("10|offsets 10 to "), "{dead:?}");
    assert!(
        dead[0].contains("deleted by the broker's retention"),
        "{dead:?}"
    );
    // The table resumes at the log's start: ids 10.. up to the first kept one are missing,
    // everything the broker kept is there once.
    let first_kept = text_rows(&engine, "SELECT min(id) FROM raw.short WHERE id >= 10").await;
    assert_eq!(first_kept, vec![(low).to_string()]);
    let distinct = text_rows(&engine, "SELECT count(DISTINCT id) FROM raw.short").await;
    assert_eq!(distinct, vec![expected.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_columns_partition_spec_and_sort_order_shape_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("clicks", 2, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    for id in 0..60 {
        let day = 1 + id % 3;
        let payload =
            format!(r#"{{"id": {id}, "ts": "2026-11-0{day}T10:00:00Z", "day": "2026-11-0{day}"}}"#);
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "source",
                value: Some("web"),
            })
            .insert(Header {
                key: "empty",
                value: None::<&str>,
            });
        let key = format!("key-{id}");
        send(
            &producer,
            "clicks",
            id % 2,
            Some(&key),
            payload.as_bytes(),
            Some(headers),
        )
        .await;
    }
    let spec = PipelineSpec {
        metadata_columns: MetadataColumn::ALL.to_vec(),
        partition_by: vec!["day(ts)".into()],
        sort_by: vec!["id desc".into()],
        ..spec(&bootstrap, "clicks", "clicks")
    };
    let stats = run_until(&engine, &spec, None, "clicks", 60).await;
    assert_eq!(count(&engine, "clicks").await, 60);
    assert_eq!(
        stats.files_written,
        3 * stats.commits,
        "one file per day partition per commit: {stats:?}"
    );

    let loaded = table(&engine, "clicks").await;
    let schema = loaded.metadata.current_schema();
    let type_of = |name: &str| schema.field_by_name(name).unwrap().field_type.to_string();
    assert_eq!(type_of("ts"), "timestamptz");
    assert_eq!(type_of("day"), "date");
    assert_eq!(type_of("_kafka_key"), "binary");
    assert_eq!(type_of("_kafka_offset"), "long");
    let spec_fields = loaded.metadata.default_partition_spec().fields();
    assert_eq!(spec_fields.len(), 1);
    assert_eq!(spec_fields[0].transform, iceberg::spec::Transform::Day);
    let order = loaded.metadata.default_sort_order();
    assert_eq!(order.fields.len(), 1);
    assert_eq!(
        order.fields[0].direction,
        iceberg::spec::SortDirection::Descending
    );

    let rows = text_rows(
        &engine,
        "SELECT id, arrow_cast(_kafka_key, 'Utf8'), _kafka_topic, _kafka_partition, _kafka_offset, \
         _kafka_timestamp IS NOT NULL, array_length(_kafka_headers), \
         arrow_cast(_kafka_headers[1]['value'], 'Utf8'), _kafka_headers[2]['value'] IS NULL \
         FROM raw.clicks WHERE id IN (0, 7) ORDER BY id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            "0|key-0|clicks|0|0|true|2|web|true",
            "7|key-7|clicks|1|3|true|2|web|true"
        ]
    );
    let per_day = text_rows(
        &engine,
        "SELECT date_trunc('day', ts), count(*) FROM raw.clicks GROUP BY 1 ORDER BY 1",
    )
    .await;
    assert_eq!(per_day.len(), 3, "{per_day:?}");
}

/// The Confluent wire format: a zero byte, the schema id, the body.
fn framed(id: i64, body: &[u8]) -> Vec<u8> {
    let mut framed = vec![0];
    framed.extend_from_slice(&(id as u32).to_be_bytes());
    framed.extend_from_slice(body);
    framed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_records_land_typed_and_evolve_with_their_registry_schema() {
    use apache_avro::types::Value;
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let registry = registry_in(dir.path()).await;
    let v1 = r#"{"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}}
    ]}"#;
    let (id1, version1) = registry
        .register("orders-value", SchemaType::Avro, v1, "[]")
        .await
        .unwrap();
    assert_eq!(version1, 1);
    // Registering the same schema again (whitespace aside) gives the same id and version.
    let again = registry
        .register(
            "orders-value",
            SchemaType::Avro,
            &v1.replace('\n', " "),
            "[]",
        )
        .await
        .unwrap();
    assert_eq!(again, (id1, 1));
    // A type change cannot read old data: refused under the default BACKWARD level.
    let retyped = v1.replace(
        r#"{"name": "id", "type": "long"}"#,
        r#"{"name": "id", "type": "string"}"#,
    );
    let refused = registry
        .register("orders-value", SchemaType::Avro, &retyped, "[]")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistryError::Incompatible { .. }),
        "{refused}"
    );
    assert_eq!(refused.codes(), (409, 409));
    // An added optional field with a default is compatible.
    let v2 = v1.replace(
        r#"{"name": "id", "type": "long"},"#,
        r#"{"name": "id", "type": "long"}, {"name": "country", "type": ["null", "string"], "default": null},"#,
    );
    // …and so is widening an int to a long.
    let v2 = v2.replace(
        r#"{"name": "qty", "type": "int"}"#,
        r#"{"name": "qty", "type": "long"}"#,
    );
    let (id2, version2) = registry
        .register("orders-value", SchemaType::Avro, &v2, "[]")
        .await
        .unwrap();
    assert_eq!(version2, 2);
    assert_ne!(id1, id2);

    let schema1 = apache_avro::Schema::parse_str(v1).unwrap();
    let schema2 = apache_avro::Schema::parse_str(&v2).unwrap();
    let record = |id: i64, country: Option<&str>| {
        let qty = if country.is_some() {
            Value::Long(5_000_000_000 + id)
        } else {
            Value::Int(id as i32)
        };
        let mut fields = vec![
            ("id".to_string(), Value::Long(id)),
            ("qty".to_string(), qty),
        ];
        if let Some(country) = country {
            fields.push((
                "country".to_string(),
                Value::Union(1, Box::new(Value::String(country.into()))),
            ));
        }
        fields.extend([
            ("item".to_string(), Value::String(format!("item-{id}"))),
            (
                "price".to_string(),
                Value::Decimal(apache_avro::Decimal::from(
                    (id * 100 + 25).to_be_bytes().to_vec(),
                )),
            ),
            (
                "at".to_string(),
                Value::TimestampMillis(1_764_000_000_000 + id),
            ),
            (
                "tags".to_string(),
                Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
            ),
            ("status".to_string(), Value::Enum(1, "PAID".into())),
        ]);
        Value::Record(fields)
    };
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    for id in 0..20 {
        let body = apache_avro::to_avro_datum(&schema1, record(id, None)).unwrap();
        send(&producer, "orders", 0, None, &framed(id1, &body), None).await;
    }
    // A record outside the wire format and one naming an unknown schema: dead letters.
    send(&producer, "orders", 0, None, br#"{"id": 99}"#, None).await;
    send(&producer, "orders", 0, None, &framed(4242, b"\x02"), None).await;
    for id in 20..30 {
        let body = apache_avro::to_avro_datum(&schema2, record(id, Some("nl"))).unwrap();
        send(&producer, "orders", 0, None, &framed(id2, &body), None).await;
    }
    let spec = PipelineSpec {
        format: Format::Avro,
        ..spec(&bootstrap, "orders", "orders")
    };
    run_until(&engine, &spec, Some(registry.clone()), "orders", 30).await;
    assert_eq!(count(&engine, "orders").await, 30);
    let rows = text_rows(
        &engine,
        "SELECT id, qty, item, price, at, tags[2], status, country FROM raw.orders WHERE id IN (3, 25) ORDER BY id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            "3|3|item-3|3.25|2025-11-24T16:00:00.003Z|b|PAID|null",
            "25|5000000025|item-25|25.25|2025-11-24T16:00:00.025Z|b|PAID|nl"
        ]
    );
    let dead = text_rows(
        &engine,
        "SELECT \"offset\", reason FROM raw.orders__dead_letters ORDER BY \"offset\"",
    )
    .await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(
        dead[0].starts_with("20|not in the Confluent wire format"),
        "{dead:?}"
    );
    assert!(
        dead[1].starts_with("21|schema id 4242 is not in the schema registry"),
        "{dead:?}"
    );
    let loaded = table(&engine, "orders").await;
    let schema = loaded.metadata.current_schema();
    let type_of = |name: &str| schema.field_by_name(name).unwrap().field_type.to_string();
    assert_eq!(type_of("price"), "decimal(10, 2)");
    assert_eq!(type_of("qty"), "long", "widened from int");
    assert_eq!(type_of("at"), "timestamptz");
    assert_eq!(type_of("status"), "string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_values_land_as_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("bytes", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    send(&producer, "bytes", 0, None, b"\x00\xffhello", None).await;
    send(&producer, "bytes", 0, None, b"not json at all", None).await;
    let spec = PipelineSpec {
        format: Format::Raw,
        metadata_columns: vec![MetadataColumn::Offset],
        ..spec(&bootstrap, "bytes", "bytes")
    };
    run_until(&engine, &spec, None, "bytes", 2).await;
    let rows = text_rows(
        &engine,
        "SELECT _kafka_offset, encode(value, 'hex') FROM raw.bytes ORDER BY 1",
    )
    .await;
    assert_eq!(
        rows,
        vec!["0|00ff68656c6c6f", "1|6e6f74206a736f6e20617420616c6c"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_records_land_typed_through_the_registry() {
    use prost::Message;
    use prost_reflect::{DynamicMessage, Value};
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let registry = registry_in(dir.path()).await;
    let proto = r#"
        syntax = "proto3";
        package shop;
        import "google/protobuf/timestamp.proto";
        message Ping { string note = 1; }
        message Order {
          enum Status { NEW = 0; PAID = 1; }
          message Line { string sku = 1; int32 qty = 2; }
          int64 id = 1;
          string item = 2;
          double price = 3;
          Status status = 4;
          repeated Line lines = 5;
          map<string, int64> counts = 6;
          google.protobuf.Timestamp at = 7;
          optional string note = 8;
          bytes blob = 9;
          uint32 small = 10;
        }"#;
    let (id, _) = registry
        .register("orders-value", SchemaType::Protobuf, proto, "[]")
        .await
        .unwrap();
    let refused = registry
        .register("bad-value", SchemaType::Protobuf, "message {", "[]")
        .await
        .unwrap_err();
    assert_eq!(refused.codes(), (422, 42201), "{refused}");

    let file = floe_stream::registry::protobuf_descriptor(proto).unwrap();
    let order = file.messages().nth(1).unwrap();
    let line = order.child_messages().next().unwrap();
    let timestamp = file
        .parent_pool()
        .get_message_by_name("google.protobuf.Timestamp")
        .unwrap();
    let encode = |n: i64| {
        let mut message = DynamicMessage::new(order.clone());
        message.set_field_by_name("id", Value::I64(n));
        message.set_field_by_name("item", Value::String(format!("item-{n}")));
        message.set_field_by_name("price", Value::F64(n as f64 + 0.5));
        message.set_field_by_name("status", Value::EnumNumber(1));
        let mut first = DynamicMessage::new(line.clone());
        first.set_field_by_name("sku", Value::String("s1".into()));
        first.set_field_by_name("qty", Value::I32(2));
        message.set_field_by_name("lines", Value::List(vec![Value::Message(first)]));
        let mut at = DynamicMessage::new(timestamp.clone());
        at.set_field_by_name("seconds", Value::I64(1_764_000_000 + n));
        message.set_field_by_name("at", Value::Message(at));
        if n % 2 == 0 {
            message.set_field_by_name("note", Value::String("even".into()));
        }
        message.set_field_by_name("blob", Value::Bytes(vec![0xca, 0xfe].into()));
        message.set_field_by_name("small", Value::U32(7));
        // Message index [1] (the second top-level message): count 1, index 1, zigzag.
        let mut value = framed(id, &[2, 2]);
        value.extend(message.encode_to_vec());
        value
    };
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    for n in 0..10 {
        send(&producer, "orders", 0, None, &encode(n), None).await;
    }
    // An index naming no message: a dead letter, the rest flows.
    send(&producer, "orders", 0, None, &framed(id, &[2, 18, 1]), None).await;
    let spec = PipelineSpec {
        format: Format::Protobuf,
        ..spec(&bootstrap, "orders", "orders")
    };
    run_until(&engine, &spec, Some(registry), "orders", 10).await;
    let rows = text_rows(
        &engine,
        "SELECT id, item, price, status, lines[1]['sku'], lines[1]['qty'], at, note, \
         encode(blob, 'hex'), small FROM raw.orders WHERE id IN (1, 2) ORDER BY id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            "1|item-1|1.5|PAID|s1|2|2025-11-24T16:00:01Z|null|cafe|7",
            "2|item-2|2.5|PAID|s1|2|2025-11-24T16:00:02Z|even|cafe|7"
        ]
    );
    let dead = text_rows(&engine, "SELECT reason FROM raw.orders__dead_letters").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains("name no message"), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_fields_evolve_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("places", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let producer = producer(&bootstrap);
    send(
        &producer,
        "places",
        0,
        None,
        br#"{"id": 1, "geo": {"lat": 1.5}, "stops": [{"at": 1}]}"#,
        None,
    )
    .await;
    let spec = spec(&bootstrap, "places", "places");
    run_until(&engine, &spec, None, "places", 1).await;
    // Later records bring a nested field, a field inside list elements, and a new nested
    // column: the table evolves, older rows read them as null.
    send(
        &producer,
        "places",
        0,
        None,
        br#"{"id": 2, "geo": {"lat": 2.5, "lon": 3.5}, "stops": [{"at": 2, "name": "x"}], "meta": {"tags": ["a", "b"]}}"#,
        None,
    )
    .await;
    run_until(&engine, &spec, None, "places", 2).await;
    let rows = text_rows(
        &engine,
        "SELECT id, geo['lat'], geo['lon'], stops[1]['at'], stops[1]['name'], meta['tags'][2] \
         FROM raw.places ORDER BY id",
    )
    .await;
    assert_eq!(rows, vec!["1|1.5|null|1|null|null", "2|2.5|3.5|2|x|b"]);
    let dead = text_rows(&engine, "SELECT count(*) FROM raw.places__dead_letters").await;
    assert!(dead.is_empty() || dead == vec!["0"], "{dead:?}");
}
