"""One dead-letter form for every door: `<table>__dead_letters`, with the door, the reason, the
record and where it came from — and letters taken again once their cause is fixed. A Kafka
pipeline's letters go back to the partitions of its topics they came from (`floe pipeline
redrive`), read again through the pipeline's own decoding, and leave the dead-letter table; a
letter someone wrote naming another topic is never produced anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET
from pyiceberg.types import StringType
from test_pipelines import PARTITIONS, broker, spec, wait_for_rows  # noqa: F401 (broker: a fixture)


def rows(floe, sql: str) -> list[dict]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def eventually(floe, sql: str, check, timeout: float = 60) -> list[dict]:
    deadline = time.time() + timeout
    while True:
        answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": floe.warehouse})
        got = answer.json().get("rows") if answer.status_code == 200 else None
        if got is not None and check(got):
            return got
        assert time.time() < deadline, f"{sql}: {answer.text}"
        time.sleep(0.3)


def produce(bootstrap: str, records: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in records:
        producer.produce("events", key=str(record["id"]), value=json.dumps(record), partition=record["id"] % PARTITIONS)
    producer.flush()


def redrive(floe, apply: bool) -> dict:
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    args = [FLOE_BIN, "pipeline", "redrive", "clicks", "--server", floe.base] + (["--apply"] if apply else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def high_watermarks(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    metadata = consumer.list_topics(timeout=10)
    total = 0
    if topic in metadata.topics:
        for p in metadata.topics[topic].partitions:
            total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.close()
    return total


def test_a_pipelines_dead_letters_go_back_to_their_topic_once_the_table_is_fixed(floe, broker):  # noqa: F811
    floe.api("POST", f"/catalog/v1/{floe.warehouse}/namespaces", json={"namespace": ["stream"]})
    produce(broker, [{"id": i, "user": f"u{i}"} for i in range(6)])
    created = floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker))
    assert created.status_code in (200, 201), created.text
    wait_for_rows(floe, 6)

    # The bad deploy: a required column no record carries. The records that arrive meanwhile
    # cannot be rows; they become dead letters, the pipeline goes on.
    table = floe.pyiceberg().load_table("stream.clicks")
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.add_column("tenant", StringType(), required=True)
    produce(broker, [{"id": i, "user": f"u{i}"} for i in range(6, 10)])
    letters = eventually(
        floe,
        'SELECT door, pipeline, source, "partition", "offset", reason, CAST(record AS VARCHAR) AS record, '
        "CAST(\"key\" AS VARCHAR) AS k FROM stream.clicks__dead_letters ORDER BY k",
        lambda got: len(got) == 4)
    assert {(l["door"], l["pipeline"], l["source"]) for l in letters} == {("kafka", "clicks", "events")}, letters
    assert [json.loads(l["record"])["id"] for l in letters] == [6, 7, 8, 9], letters
    assert all(l["k"] == str(json.loads(l["record"])["id"]) and l["partition"] == int(l["k"]) % PARTITIONS
               for l in letters), letters
    assert all("tenant" in l["reason"] for l in letters), letters

    # A letter someone wrote into the dead-letter table, naming a topic of their choosing.
    forged = floe.api("POST", "/api/v1/sql", json={
        "sql": "INSERT INTO stream.clicks__dead_letters (door, pipeline, source, \"partition\", \"offset\", record) "
               "VALUES ('kafka', 'clicks', 'elsewhere', 0, 0, CAST('{\"id\": 99}' AS BYTEA))",
        "warehouse": floe.warehouse})
    assert forged.status_code == 200, forged.text

    # Fixed: the column is optional again. A dry run counts; nothing moves.
    table = floe.pyiceberg().load_table("stream.clicks")
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.make_column_optional("tenant")
    dry = redrive(floe, apply=False)
    assert dry["dry-run"] is True and dry["redriven"]["letters"] == 5 and dry["redriven"]["sent"] == 0, dry
    assert len(rows(floe, "SELECT 1 FROM stream.clicks__dead_letters")) == 5

    applied = redrive(floe, apply=True)["redriven"]
    assert applied["sent"] == 4, applied
    assert len(applied["kept"]) == 1 and "elsewhere" in applied["kept"][0], applied
    # Read again through the pipeline: every record once, the letters gone, the forged one kept
    # and never produced.
    ids = wait_for_rows(floe, 10)
    assert ids == list(range(10)), ids
    left = rows(floe, "SELECT source FROM stream.clicks__dead_letters")
    assert left == [{"source": "elsewhere"}], left
    assert high_watermarks(broker, "elsewhere") == 0
    time.sleep(1.5)
    assert rows(floe, "SELECT count(*) AS n FROM stream.clicks") == [{"n": 10}]
    again = redrive(floe, apply=True)["redriven"]
    assert again["sent"] == 0 and again["letters"] == 1, again


def test_a_dead_lettered_tombstone_goes_back_as_a_tombstone(floe, broker):  # noqa: F811
    """An append pipeline cannot take a tombstone (no value): its letter keeps the key and no
    record, and a redrive sends a tombstone again (which the pipeline dead-letters again, at
    its new offset) — never an empty value."""
    floe.api("POST", f"/catalog/v1/{floe.warehouse}/namespaces", json={"namespace": ["stream"]})
    produce(broker, [{"id": 0, "user": "u0"}])
    producer = Producer({"bootstrap.servers": broker})
    producer.produce("events", key="gone", value=None, partition=1)
    producer.flush()
    created = floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker))
    assert created.status_code in (200, 201), created.text
    sql = ('SELECT "offset", CAST("key" AS VARCHAR) AS k, record IS NULL AS tombstone '
           'FROM stream.clicks__dead_letters ORDER BY "offset"')
    [first] = eventually(floe, sql, lambda got: len(got) == 1)
    assert first["k"] == "gone" and first["tombstone"] is True, first
    applied = redrive(floe, apply=True)["redriven"]
    assert applied["sent"] == 1, applied
    [again] = eventually(floe, sql, lambda got: len(got) == 1 and got[0]["offset"] != first["offset"])
    assert again["k"] == "gone" and again["tombstone"] is True, again
    assert high_watermarks(broker, "events") == 3  # the row, the tombstone, the tombstone again
