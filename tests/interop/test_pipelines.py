"""Kafka topics into Iceberg tables: a pipeline defined over the management API reads a topic
of librdkafka's mock broker (`floe kafka-mock`, the Kafka protocol over TCP) fed by
confluent-kafka's producer. Every record lands exactly once, across kill -9 of Floe at random
points; the snapshot summary's offsets equal the broker's; PyIceberg and DuckDB read it."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import FLOE_BIN, start_floe, stop_floe
from test_governance import make_principal

PARTITIONS = 3


@pytest.fixture
def broker():
    process = subprocess.Popen(
        [FLOE_BIN, "kafka-mock", "--topic", f"events:{PARTITIONS}"], stdout=subprocess.PIPE, text=True
    )
    bootstrap = process.stdout.readline().strip()
    assert bootstrap, "the mock broker printed no bootstrap servers"
    yield bootstrap
    process.kill()
    process.wait()


def spec(floe, bootstrap, **more):
    return {
        "name": "clicks",
        "warehouse": floe.warehouse,
        "namespace": ["stream"],
        "table": "clicks",
        "bootstrap-servers": bootstrap,
        "topics": ["events"],
        "commit-interval-ms": 300,
        **more,
    }


def produce(bootstrap, ids, pause=0.0):
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, i in enumerate(ids):
        producer.produce("events", key=str(i), value=json.dumps({"id": i, "user": f"u{i % 7}", "amount": i * 1.5}), partition=i % PARTITIONS)
        if pause and n % 50 == 49:
            producer.flush()
            time.sleep(pause)
    producer.flush()


def table_ids(floe):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id FROM stream.clicks ORDER BY id", "warehouse": floe.warehouse})
    if answer.status_code != 200:
        return []
    return [r["id"] for r in answer.json()["rows"]]


def wait_for_rows(floe, count, timeout=120):
    deadline = time.time() + timeout
    while True:
        ids = table_ids(floe)
        if len(ids) >= count:
            return ids
        assert time.time() < deadline, f"{len(ids)} of {count} rows after {timeout} s"
        time.sleep(0.3)


def high_watermarks(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    marks = {p: consumer.get_watermark_offsets(TopicPartition("events", p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.close()
    return marks


def test_a_topic_lands_exactly_once_and_pipelines_are_governed(tmp_path, broker):
    floe = start_floe(tmp_path, extra_args=("--pipeline-lease-secs", "3"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("stream")
        bad = floe.api("POST", "/api/v1/pipelines", json={**spec(floe, broker), "topics": []})
        assert bad.status_code == 400 and "topics" in bad.text
        unknown = floe.api("POST", "/api/v1/pipelines", json={**spec(floe, broker), "batch": 1})
        assert unknown.status_code == 400 and "batch" in unknown.text
        on_ns = {"type": "namespace", "warehouse": floe.warehouse, "namespace": ["stream"]}
        reader = make_principal(floe, "pipe-reader", [("read-data", on_ns)])
        token = floe.token(*reader)
        assert floe.api("POST", "/api/v1/pipelines", token=token, json=spec(floe, broker)).status_code == 403

        created = floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker))
        assert created.status_code == 201, created.text
        assert floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker)).status_code == 409
        assert [p["name"] for p in floe.api("GET", "/api/v1/pipelines").json()["pipelines"]] == ["clicks"]
        assert floe.api("GET", "/api/v1/pipelines", token=token).json()["pipelines"] == []
        assert floe.api("GET", "/api/v1/pipelines/clicks", token=token).status_code == 404

        produce(broker, range(0, 600))
        assert wait_for_rows(floe, 600) == list(range(600))
        status = floe.api("GET", "/api/v1/pipelines/clicks/status").json()
        assert status["running-here"] is True
        assert all(p["owner"] == status["node"] for p in status["partitions"]), status
        marks = high_watermarks(broker)
        deadline = time.time() + 30
        while True:
            status = floe.api("GET", "/api/v1/pipelines/clicks/status").json()
            if status["partitions"] and all(p["lag"] == 0 for p in status["partitions"]):
                break
            assert time.time() < deadline, status
            time.sleep(0.3)
        assert {p["partition"]: p["next-offset"] for p in status["partitions"]} == marks
        # The offsets are mirrored to the pipeline's Kafka consumer group for Kafka's tools.
        group = Consumer({"bootstrap.servers": broker, "group.id": "floe-clicks"})
        deadline = time.time() + 30
        while True:
            mirrored = {tp.partition: tp.offset for tp in group.committed([TopicPartition("events", p) for p in range(PARTITIONS)], timeout=10)}
            if mirrored == marks:
                break
            assert time.time() < deadline, (mirrored, marks)
            time.sleep(0.3)
        group.close()
        assert {p["partition"]: p["high-watermark"] for p in status["partitions"]} == marks
        assert status["stats"]["records-committed"] == 600 and status["stats"]["commits"] >= 1
        metrics = floe.api("GET", "/metrics").text
        assert 'floe_pipeline_records_total{pipeline="clicks"} 600' in metrics
        # Lag per partition at /metrics once librdkafka's statistics report the watermarks.
        deadline = time.time() + 30
        wanted = [f'floe_pipeline_partition_lag{{pipeline="clicks",topic="events",partition="{p}"}} 0' for p in range(PARTITIONS)]
        while not all(line in metrics for line in wanted):
            assert time.time() < deadline, metrics
            time.sleep(0.5)
            metrics = floe.api("GET", "/metrics").text
        assert 'floe_pipeline_files_total{pipeline="clicks"}' in metrics
        table = catalog.load_table("stream.clicks")
        summary = table.current_snapshot().summary.additional_properties
        assert {p: int(summary[f"floe.source.clicks.events.{p}"]) for p in range(PARTITIONS)} == marks
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(600))
        from test_duckdb import attach

        con = attach(floe)
        assert con.execute("SELECT count(*), count(DISTINCT id) FROM floe.stream.clicks").fetchone() == (600, 600)
    finally:
        stop_floe(floe)


def test_kill_9_at_random_points_loses_and_duplicates_nothing(tmp_path, broker):
    """Floe is killed with SIGKILL eight times at random points while a producer writes
    3,000 records; afterwards the table holds every record exactly once."""
    args = ("--pipeline-lease-secs", "3")
    floe = start_floe(tmp_path, extra_args=args)
    floe.pyiceberg().create_namespace("stream")
    assert floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker)).status_code == 201
    total = 3000
    producer = threading.Thread(target=produce, args=(broker, range(total), 0.05))
    producer.start()
    rng = random.Random(5)
    try:
        for _ in range(8):
            time.sleep(rng.uniform(0.3, 1.5))
            floe.process.kill()
            floe.process.wait()
            floe = start_floe(tmp_path, extra_args=args)
        producer.join()
        # The dead node's lease runs out, and the new one takes the pipeline over.
        ids = wait_for_rows(floe, total, timeout=180)
        time.sleep(1.5)
        ids = table_ids(floe)
        assert len(ids) == total, f"{len(ids) - len(set(ids))} duplicates, {total - len(set(ids))} missing"
        assert ids == list(range(total))
        summary = floe.pyiceberg().load_table("stream.clicks").current_snapshot().summary.additional_properties
        assert {p: int(summary[f"floe.source.clicks.events.{p}"]) for p in range(PARTITIONS)} == high_watermarks(broker)
    finally:
        producer.join()
        stop_floe(floe)


def held_here(node):
    status = node.api("GET", "/api/v1/pipelines/clicks/status").json()
    return {p["partition"] for p in status.get("partitions-here") or []} if status["running-here"] else set()


def test_two_nodes_split_a_pipelines_partitions_and_a_dead_ones_are_taken_over(tmp_path, broker):
    """Two Floe nodes on one PostgreSQL store: they split the pipeline's three partitions
    (each partition leased to one node); killing one hands its partitions to the other with
    nothing lost or doubled."""
    args = ("--pipeline-lease-secs", "3")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = start_floe(tmp_path / "a", "postgres", extra_args=args)
    second = start_floe(tmp_path / "b", "postgres", extra_args=args, database=first.database)
    try:
        first.pyiceberg().create_namespace("stream")
        assert first.api("POST", "/api/v1/pipelines", json=spec(first, broker)).status_code == 201
        deadline = time.time() + 60
        while True:
            split = (held_here(first), held_here(second))
            if split[0] and split[1] and split[0] | split[1] == set(range(PARTITIONS)):
                break
            assert time.time() < deadline, split
            time.sleep(0.3)
        assert not split[0] & split[1], split
        produce(broker, range(0, 500))
        assert wait_for_rows(second, 500) == list(range(500))
        # Both nodes committed their own partitions' records.
        snapshots = first.pyiceberg().load_table("stream.clicks").snapshots()
        assert len(snapshots) >= 2
        first.process.kill()
        first.process.wait()
        produce(broker, range(500, 1000))
        assert wait_for_rows(second, 1000, timeout=120) == list(range(1000))
        deadline = time.time() + 30
        while held_here(second) != set(range(PARTITIONS)):
            assert time.time() < deadline, held_here(second)
            time.sleep(0.3)
        time.sleep(1)
        assert table_ids(second) == list(range(1000))
        summary = second.pyiceberg().load_table("stream.clicks").current_snapshot().summary.additional_properties
        assert {p: int(summary[f"floe.source.clicks.events.{p}"]) for p in range(PARTITIONS)} == high_watermarks(broker)
    finally:
        stop_floe(first)
        stop_floe(second)
