"""Change events (docs/events.md): every committed catalog change published once, in order per
table, as a CloudEvent to a Kafka topic (librdkafka's mock broker, `floe kafka-mock`, read by
confluent-kafka) and to a webhook (a receiver in this process) — across kill -9 of Floe between
commits and their delivery."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from conftest import FLOE_BIN, _env, _launch, start_floe, stop_floe
from test_governance import make_principal

TOPIC = "floe.changes"
PARTITIONS = 3
TOKEN = "hook-token-not-a-secret-of-any-real-system"


class Receiver:
    """A webhook receiver: keeps every CloudEvent it acknowledged; answers 503 while `down`."""

    def __init__(self):
        self.events: list[dict] = []
        self.refused = 0
        self.down = False
        self.authorizations: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.authorizations.add(self.headers.get("authorization", ""))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(503)
                    self.end_headers()
                    return
                assert self.headers.get("content-type") == "application/cloudevents+json"
                receiver.events.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"


@pytest.fixture
def broker():
    process = subprocess.Popen([FLOE_BIN, "kafka-mock", "--topic", f"{TOPIC}:{PARTITIONS}"], stdout=subprocess.PIPE, text=True)
    bootstrap = process.stdout.readline().strip()
    assert bootstrap
    yield bootstrap
    process.kill()
    process.wait()


def kafka_events(bootstrap) -> list[dict]:
    """Every record of the topic, all partitions, as CloudEvents."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "enable.auto.commit": False})
    events = []
    for partition in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
        if high <= low:
            continue
        consumer.assign([TopicPartition(TOPIC, partition, low)])
        taken = low
        deadline = time.time() + 20
        while taken < high and time.time() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            events.append({"partition": partition, **json.loads(message.value())})
            taken += 1
    consumer.close()
    return events


def wait_until(check, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.2)


def outbox_seq(floe) -> int:
    """The highest event the webhook sink has delivered, from /metrics."""
    for line in floe.api("GET", "/metrics").text.splitlines():
        if line.startswith('floe_change_events_delivered_seq{sink="webhook"}'):
            return int(line.split()[-1])
    return 0


def kill9_and_start(floe, tmp_path, args):
    floe.process.kill()
    floe.process.wait()
    port = int(floe.base.rsplit(":", 1)[1])
    process, _ = _launch(tmp_path, _env(floe.database), floe.data_dir, port, floe.pg_port, floe.flight_port, floe.otlp_grpc_port, args)
    assert process is not None, (tmp_path / "floe.log").read_text()
    floe.process = process


def test_every_change_is_published_once_in_order_across_kill_9(broker, tmp_path):
    receiver = Receiver()
    args = ("--events-kafka-brokers", broker, "--events-kafka-topic", TOPIC,
            "--events-webhook-url", receiver.url, "--events-webhook-token", TOKEN,
            "--events-source", "urn:floe:test")
    floe = start_floe(tmp_path, extra_args=args)
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("ev")
        schema = pa.schema([("id", pa.int64())])
        table = catalog.create_table("ev.t", schema=schema)
        for i in range(3):
            table.append(pa.table({"id": [i]}, schema=schema))
        catalog.rename_table("ev.t", "ev.t2")
        make_principal(floe, "watcher", [("read-data", {"type": "table", "warehouse": "default", "namespace": ["ev"], "name": "t2"})])
        catalog.create_table("ev.gone", schema=schema)
        catalog.drop_table("ev.gone")
        assert floe.api("DELETE", "/api/v1/roles/watcher-role/members/watcher").status_code == 204
        assert floe.api("DELETE", "/api/v1/roles/watcher-role").status_code == 204
        wait_until(lambda: len(receiver.events) >= 13, what="the webhook's first events")

        kinds = [e["type"] for e in receiver.events]
        assert kinds[:13] == ["io.floe.namespace.created", "io.floe.table.created"] + ["io.floe.table.committed"] * 3 + [
            "io.floe.table.renamed", "io.floe.role.created", "io.floe.role.member-added", "io.floe.grant.granted",
            "io.floe.table.created", "io.floe.table.dropped", "io.floe.role.member-removed", "io.floe.role.deleted"]
        added = receiver.events[7]
        assert added["subject"] == "role/watcher-role" and added["data"]["role"] == "watcher-role"
        assert added["data"]["principal-id"]
        first = receiver.events[0]
        assert first["specversion"] == "1.0" and first["source"] == "urn:floe:test" and first["subject"] == "default/ev"
        renamed = receiver.events[5]
        assert renamed["subject"] == "default/ev.t2" and renamed["data"]["from"] == {"namespace": ["ev"], "name": "t"}
        committed = receiver.events[2:5]
        assert [e["data"]["metadata-location"] for e in committed[:-1]] == [e["data"]["previous-metadata-location"] for e in committed[1:]]
        assert receiver.authorizations == {f"Bearer {TOKEN}"}

        # Commits while the webhook is down: they wait in the outbox. Floe is killed before it
        # delivers them, and delivers them once when it is back and the receiver is too.
        receiver.down = True
        delivered_before = len(receiver.events)
        for i in range(5):
            table = catalog.load_table("ev.t2")
            table.append(pa.table({"id": [10 + i]}, schema=schema))
        wait_until(lambda: receiver.refused > 0, what="a refused delivery")
        # A stream of commits, Floe killed in the middle of it.
        stop = threading.Event()

        def keep_committing():
            writer = floe.pyiceberg()
            n = 100
            while not stop.is_set():
                try:
                    writer.load_table("ev.t2").append(pa.table({"id": [n]}, schema=schema))
                except Exception:
                    time.sleep(0.1)
                n += 1

        committer = threading.Thread(target=keep_committing, daemon=True)
        committer.start()
        time.sleep(1.5)
        kill9_and_start(floe, tmp_path, args)
        time.sleep(1.0)
        stop.set()
        committer.join(timeout=30)
        receiver.down = False
        catalog = floe.pyiceberg()
        snapshots = len(catalog.load_table("ev.t2").metadata.snapshots)
        assert snapshots >= 8

        def all_there():
            webhook_commits = [e for e in receiver.events if e["type"] == "io.floe.table.committed"]
            return len(webhook_commits) >= snapshots and len(
                [e for e in kafka_events(broker) if e["type"] == "io.floe.table.committed"]) >= snapshots

        wait_until(all_there, timeout=90, what="every commit's event at both sinks")
        assert len(receiver.events) > delivered_before
        for events in (receiver.events, kafka_events(broker)):
            ids = [e["id"] for e in events]
            assert len(ids) == len(set(ids)), "an event arrived twice"
            seqs = sorted(e["floeseq"] for e in events)
            assert seqs == list(range(1, len(seqs) + 1)), "an event is missing"
            commits = [e for e in events if e["type"] == "io.floe.table.committed"]
            # One event per snapshot the table has, each the commit that made it.
            assert len(commits) == snapshots
        # In Kafka a table's events are in one partition, in order.
        by_subject: dict[str, list[dict]] = {}
        for event in kafka_events(broker):
            by_subject.setdefault(event["subject"], []).append(event)
        for subject, events in by_subject.items():
            assert len({e["partition"] for e in events}) == 1, subject
            assert [e["floeseq"] for e in events] == sorted(e["floeseq"] for e in events), subject
        assert "floe_change_events_delivered_total" in floe.api("GET", "/metrics").text
    finally:
        stop_floe(floe)


def test_a_failed_change_publishes_nothing(tmp_path):
    """A change refused (a commit conflict, a drop of something missing) emits no event."""
    receiver = Receiver()
    floe = start_floe(tmp_path, extra_args=("--events-webhook-url", receiver.url))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("ev")
        with pytest.raises(Exception):
            catalog.create_namespace("ev")
        with pytest.raises(Exception):
            catalog.drop_table("ev.missing")
        wait_until(lambda: len(receiver.events) >= 1, what="the namespace's event")
        time.sleep(1.0)
        assert [e["type"] for e in receiver.events] == ["io.floe.namespace.created"]
    finally:
        stop_floe(floe)
