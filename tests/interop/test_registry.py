"""Floe's Confluent-compatible schema registry driven by confluent-kafka's own
SchemaRegistryClient and serializers: producers register Avro, JSON Schema and Protobuf schemas at
Floe (basic authentication with a Floe client id and secret), pipelines read their records
into typed Iceberg tables, schemas evolve mid-stream, and incompatible schemas are refused
with Confluent's error codes."""

from __future__ import annotations

import json
from decimal import Decimal
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET, start_floe, stop_floe
from test_governance import make_principal

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "country", "type": ["null", "string"], "default": None}]}
READING = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Reading",
    "type": "object",
    "properties": {
        "sensor": {"type": "string"},
        "value": {"type": "number"},
        "count": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
        "ok": {"type": "boolean"},
    },
    "required": ["sensor", "value"],
}


def reading_message_class():
    """A Protobuf message class built at run time (no protoc here): meter.Reading."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="meter.proto", package="meter", syntax="proto3")
    message = proto.message_type.add(name="Reading")
    kinds = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate(
        [("meter", kinds.TYPE_STRING), ("watts", kinds.TYPE_DOUBLE), ("seq", kinds.TYPE_INT64), ("live", kinds.TYPE_BOOL)], start=1
    ):
        message.field.add(name=name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("meter.Reading"))


@pytest.fixture
def broker():
    process = subprocess.Popen(
        [FLOE_BIN, "kafka-mock", "--topic", "orders:1", "--topic", "readings:2", "--topic", "meters:1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    bootstrap = process.stdout.readline().strip()
    assert bootstrap, "the mock broker printed no bootstrap servers"
    yield bootstrap
    process.kill()
    process.wait()


def registry(floe, client_id=ROOT_ID, secret=ROOT_SECRET):
    conf = {"url": f"{floe.base}/schema-registry"}
    if client_id:
        conf["basic.auth.user.info"] = f"{client_id}:{secret}"
    return SchemaRegistryClient(conf)


def pipeline(floe, bootstrap, name, topic, fmt, **more):
    answer = floe.api(
        "POST",
        "/api/v1/pipelines",
        json={
            "name": name,
            "warehouse": floe.warehouse,
            "namespace": ["stream"],
            "table": name,
            "bootstrap-servers": bootstrap,
            "topics": [topic],
            "format": fmt,
            "commit-interval-ms": 300,
            "metadata-columns": ["partition", "offset"],
            **more,
        },
    )
    assert answer.status_code == 201, answer.text


def rows(floe, sql):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": floe.warehouse})
    return answer.json()["rows"] if answer.status_code == 200 else []


def wait_for(floe, table, count, timeout=120):
    deadline = time.time() + timeout
    while True:
        found = rows(floe, f"SELECT count(*) AS n FROM stream.{table}")
        if found and found[0]["n"] >= count:
            return
        assert time.time() < deadline, f"{found} of {count} rows in {table} after {timeout} s"
        time.sleep(0.3)


def test_confluent_serializers_work_against_floe_and_pipelines_read_their_records(tmp_path, broker):
    floe = start_floe(tmp_path, extra_args=("--pipeline-lease-secs", "3"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("stream")
        client = registry(floe)
        producer = Producer({"bootstrap.servers": broker})

        # Avro, registered by the serializer itself (auto.register.schemas).
        v1 = AvroSerializer(client, json.dumps(ORDER_V1))
        context = SerializationContext("orders", MessageField.VALUE)
        for i in range(50):
            value = {"id": i, "item": f"item-{i}", "price": Decimal(f"{i}.25"), "at": 1_764_000_000_000 + i, "tags": ["a", "b"]}
            producer.produce("orders", value=v1(value, context), partition=0)
        producer.flush()
        assert client.get_subjects() == ["orders-value"]
        latest = client.get_latest_version("orders-value")
        assert latest.version == 1 and latest.schema.schema_type == "AVRO"
        # The registry serves the schema back by id: Confluent's deserializer reads records.
        first = AvroDeserializer(client)(v1({"id": 7, "item": "x", "price": Decimal("1.50"), "at": 0, "tags": []}, context), context)
        assert first["id"] == 7 and first["item"] == "x"

        pipeline(floe, broker, "orders", "orders", "avro")
        wait_for(floe, "orders", 50)

        # A compatible change mid-stream: the table gains the column.
        v2 = AvroSerializer(client, json.dumps(ORDER_V2))
        for i in range(50, 80):
            value = {"id": i, "item": f"item-{i}", "price": Decimal(f"{i}.25"), "at": 1_764_000_000_000 + i, "tags": [], "country": "nl"}
            producer.produce("orders", value=v2(value, context), partition=0)
        producer.flush()
        wait_for(floe, "orders", 80)
        assert client.get_versions("orders-value") == [1, 2]
        found = rows(floe, "SELECT id, item, CAST(price AS VARCHAR) AS price, country, _kafka_offset AS o FROM stream.orders WHERE id IN (3, 60) ORDER BY id")
        assert found == [
            {"id": 3, "item": "item-3", "price": "3.25", "country": None, "o": 3},
            {"id": 60, "item": "item-60", "price": "60.25", "country": "nl", "o": 60},
        ]
        table = catalog.load_table("stream.orders")
        types = {f.name: str(f.field_type) for f in table.schema().fields}
        assert types["id"] == "long" and types["price"] == "decimal(10, 2)" and types["at"] == "timestamptz"
        assert types["country"] == "string" and types["tags"].startswith("list<string")
        assert table.scan().to_arrow().num_rows == 80

        # An incompatible change is refused with Confluent's 409.
        retyped = {**ORDER_V2, "fields": [{"name": "id", "type": "string"}] + ORDER_V2["fields"][1:]}
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema("orders-value", Schema(json.dumps(retyped), "AVRO"))
        assert refused.value.http_status_code == 409 and refused.value.error_code == 409
        with pytest.raises(SchemaRegistryError) as missing:
            client.get_latest_version("no-such-subject")
        assert missing.value.http_status_code == 404 and missing.value.error_code == 40401
        with pytest.raises(SchemaRegistryError) as invalid:
            client.register_schema("broken-value", Schema("{not avro", "AVRO"))
        assert invalid.value.http_status_code == 422 and invalid.value.error_code == 42201
        # With NONE compatibility the same change is taken.
        client.set_compatibility("orders-value", "NONE")
        assert client.get_compatibility("orders-value") == "NONE"
        assert client.register_schema("orders-value", Schema(json.dumps(retyped), "AVRO")) > 0

        # JSON Schema through Confluent's JSON serializer.
        serialize = JSONSerializer(json.dumps(READING), client)
        readings = SerializationContext("readings", MessageField.VALUE)
        for i in range(40):
            value = {"sensor": f"s{i % 4}", "value": i / 4, "count": i, "at": f"2026-11-30T10:00:{i:02d}Z", "ok": i % 2 == 0}
            producer.produce("readings", value=serialize(value, readings), partition=i % 2)
        producer.flush()
        # This pipeline reads its schemas over HTTP, as from an external registry (Floe's
        # own here, with basic authentication in the URL).
        host = floe.base.split("://", 1)[1]
        external = f"http://{ROOT_ID}:{ROOT_SECRET}@{host}/schema-registry"
        pipeline(floe, broker, "readings", "readings", "json-schema", **{"schema-registry-url": external})
        shown = floe.api("GET", "/api/v1/pipelines/readings").json()["spec"]["schema-registry-url"]
        assert ROOT_SECRET not in shown and "***" in shown, "the API masks the registry password"
        wait_for(floe, "readings", 40)
        table = catalog.load_table("stream.readings")
        types = {f.name: str(f.field_type) for f in table.schema().fields}
        assert types["value"] == "double" and types["count"] == "long" and types["at"] == "timestamptz"
        assert types["ok"] == "boolean" and types["sensor"] == "string"
        assert rows(floe, "SELECT sum(count) AS s, count(DISTINCT _kafka_partition) AS p FROM stream.readings") == [{"s": 780, "p": 2}]
        # Protobuf through Confluent's Protobuf serializer (it registers the schema as a
        # base64 file descriptor).
        reading = reading_message_class()
        serialize = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
        meters = SerializationContext("meters", MessageField.VALUE)
        for i in range(30):
            value = reading(meter=f"m{i % 3}", watts=i * 1.5, seq=i, live=i % 3 == 0)
            producer.produce("meters", value=serialize(value, meters), partition=0)
        producer.flush()
        assert client.get_latest_version("meters-value").schema.schema_type == "PROTOBUF"
        pipeline(floe, broker, "meters", "meters", "protobuf")
        wait_for(floe, "meters", 30)
        types = {f.name: str(f.field_type) for f in catalog.load_table("stream.meters").schema().fields}
        assert (types["meter"], types["watts"], types["seq"], types["live"]) == ("string", "double", "long", "boolean")
        assert rows(floe, "SELECT sum(seq) AS s, count(*) FILTER (WHERE live) AS l, max(watts) AS w FROM stream.meters") == [
            {"s": 435, "l": 10, "w": 43.5}
        ]

        from test_duckdb import attach

        con = attach(floe)
        assert con.execute("SELECT count(*) FROM floe.stream.readings WHERE ok").fetchone() == (20,)
        assert con.execute("SELECT count(*), min(id), max(id) FROM floe.stream.orders").fetchone() == (80, 0, 79)
    finally:
        stop_floe(floe)


def test_the_registry_is_governed(tmp_path):
    floe = start_floe(tmp_path)
    try:
        with pytest.raises(SchemaRegistryError) as anonymous:
            registry(floe, client_id=None).get_subjects()
        assert anonymous.value.http_status_code == 401
        with pytest.raises(SchemaRegistryError) as wrong:
            registry(floe, ROOT_ID, "not-the-secret").get_subjects()
        assert wrong.value.http_status_code == 401
        nobody = registry(floe, *make_principal(floe, "schema-nobody", []))
        with pytest.raises(SchemaRegistryError) as unprivileged:
            nobody.get_subjects()
        assert unprivileged.value.http_status_code == 403
        assert unprivileged.value.error_code == 40301, "refusals in Confluent's error form"
        reader = registry(floe, *make_principal(floe, "schema-reader", [("read-schemas", {"type": "server"})]))
        assert reader.get_subjects() == []
        with pytest.raises(SchemaRegistryError) as denied:
            reader.register_schema("x-value", Schema(json.dumps(ORDER_V1), "AVRO"))
        assert denied.value.http_status_code == 403
        schema_id = registry(floe).register_schema("x-value", Schema(json.dumps(ORDER_V1), "AVRO"))
        assert reader.get_schema(schema_id).schema_type == "AVRO"
        # Bearer tokens work too (the registry speaks plain HTTP to any client).
        answer = floe.api("GET", f"/schema-registry/schemas/ids/{schema_id}")
        assert answer.status_code == 200 and json.loads(answer.json()["schema"])["name"] == "Order"
        assert floe.api("GET", "/schema-registry/schemas/ids/999").json() == {"error_code": 40403, "message": "Schema 999 not found."}
        assert floe.api("DELETE", "/schema-registry/subjects/x-value").json() == [1]
        assert floe.api("GET", "/schema-registry/subjects").json() == []
        assert floe.api("GET", "/schema-registry/subjects?deleted=true").json() == ["x-value"]
    finally:
        stop_floe(floe)


MONEY = {"type": "record", "name": "Money", "namespace": "shop", "fields": [
    {"name": "cents", "type": "long"}, {"name": "currency", "type": "string"}]}
PRICED = {"type": "record", "name": "Priced", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "price", "type": "shop.Money"}]}
MONEY_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
METER_PROTO = (
    'syntax = "proto3";\npackage meter;\nimport "shop/money.proto";\n'
    "message Bill { string meter = 1; shop.Money amount = 2; }\n"
)


def bill_message_class():
    """meter.Bill, which imports shop/money.proto, built at run time."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    kinds = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, type=kinds.TYPE_INT64, label=kinds.LABEL_OPTIONAL)
    m.field.add(name="currency", number=2, type=kinds.TYPE_STRING, label=kinds.LABEL_OPTIONAL)
    bill = descriptor_pb2.FileDescriptorProto(name="meter/bill.proto", package="meter", syntax="proto3", dependency=["shop/money.proto"])
    b = bill.message_type.add(name="Bill")
    b.field.add(name="meter", number=1, type=kinds.TYPE_STRING, label=kinds.LABEL_OPTIONAL)
    b.field.add(name="amount", number=2, type=kinds.TYPE_MESSAGE, type_name=".shop.Money", label=kinds.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(bill)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("meter.Bill"))


def test_schema_references_resolve_for_avro_and_protobuf(tmp_path, broker):
    from confluent_kafka.schema_registry import SchemaReference

    floe = start_floe(tmp_path)
    try:
        floe.pyiceberg().create_namespace("stream")
        client = registry(floe)
        producer = Producer({"bootstrap.servers": broker})

        # Avro: a record whose field's type is another subject's named type.
        client.register_schema("shop-money", Schema(json.dumps(MONEY), "AVRO"))
        reference = SchemaReference("shop.Money", "shop-money", 1)
        priced = Schema(json.dumps(PRICED), "AVRO", references=[reference])
        with pytest.raises(SchemaRegistryError) as unresolved:
            client.register_schema("orders-value", Schema(json.dumps(PRICED), "AVRO"))
        assert unresolved.value.http_status_code == 422
        with pytest.raises(SchemaRegistryError) as missing:
            client.register_schema("orders-value", Schema(json.dumps(PRICED), "AVRO", references=[SchemaReference("shop.Money", "nope", 1)]))
        assert missing.value.http_status_code == 422 and "nope" in str(missing.value)
        schema_id = client.register_schema("orders-value", priced)
        assert client.get_schema(schema_id).references[0].subject == "shop-money"
        serialize = AvroSerializer(client, priced, conf={"auto.register.schemas": False, "use.latest.version": True})
        context = SerializationContext("orders", MessageField.VALUE)
        for i in range(20):
            producer.produce("orders", value=serialize({"id": i, "price": {"cents": 100 * i, "currency": "EUR"}}, context), partition=0)
        producer.flush()
        pipeline(floe, broker, "orders", "orders", "avro")
        wait_for(floe, "orders", 20)
        found = rows(floe, "SELECT id, price['cents'] AS cents, price['currency'] AS currency FROM stream.orders WHERE id = 7")
        assert found == [{"id": 7, "cents": 700, "currency": "EUR"}]

        # Protobuf: a message importing another subject's file.
        money_id = client.register_schema("shop-money-proto", Schema(MONEY_PROTO, "PROTOBUF"))
        assert money_id > 0
        bill_schema = Schema(METER_PROTO, "PROTOBUF", references=[SchemaReference("shop/money.proto", "shop-money-proto", 1)])
        bill_id = client.register_schema("meters-value", bill_schema)
        Bill = bill_message_class()
        for i in range(10):
            message = Bill(meter=f"m{i}")
            message.amount.cents = i
            message.amount.currency = "USD"
            payload = b"\x00" + bill_id.to_bytes(4, "big") + b"\x00" + message.SerializeToString()
            producer.produce("meters", value=payload, partition=0)
        producer.flush()
        pipeline(floe, broker, "meters", "meters", "protobuf")
        wait_for(floe, "meters", 10)
        found = rows(floe, "SELECT meter, amount['cents'] AS cents, amount['currency'] AS currency FROM stream.meters WHERE meter = 'm3'")
        assert found == [{"meter": "m3", "cents": 3, "currency": "USD"}]
    finally:
        stop_floe(floe)
