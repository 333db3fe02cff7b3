"""Clients that give up never break the server (docs/cancellation.md).

Clients hang up all the time: HTTP timeouts in Spark and PyIceberg, load balancers, a Ctrl-C in
psql, an ADBC call past its deadline. This suite sends every kind of write Floe takes — the
management API, the Iceberg REST catalog (create, commit, multi-table transaction, register,
drop), HTTP and OTLP ingestion, SQL over HTTP, the PostgreSQL wire and Flight SQL, maintenance
(expiry, repair, jobs, policies), tenants' limits, grants, roles and members, principals,
warehouses, signing keys and migration records — from clients that hang up 1, 2, 5, 10, 20 or 50 ms after sending (or
at a random moment, or halfway through the body), from several threads at once, on SQLite and
on PostgreSQL. Afterwards every route still works at its normal latency, nothing is half
applied (every table listed loads; the audit chain verifies), no database connection is left
inside a transaction, and SIGTERM stops the server within its stated bound."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import struct
import subprocess
import threading
import time
import uuid

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET, start_floe, stop_floe

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
DELAYS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05]
# How long the clients hang up, per backend; CI's bound.
CHAOS_SECONDS = float(os.environ.get("FLOE_CHAOS_SECONDS", "40"))
SHUTDOWN_BOUND = 10


def hang_up(floe, token: str, method: str, path: str, body: bytes, content_type: str, delay: float) -> None:
    """Sends one request, waits `delay` (or, for a negative delay, sends only half the body),
    then drops the connection: a reset or a plain close, at random."""
    port = int(floe.base.rsplit(":", 1)[1])
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        if delay < 0:
            sock.sendall(head + body[: len(body) // 2])
        else:
            sock.sendall(head + body)
            time.sleep(delay)
        if random.random() < 0.5:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def catalog(floe, suffix: str) -> str:
    return f"/catalog/v1/{floe.warehouse}/{suffix}"


def prepare(floe) -> dict:
    """What the requests act on: namespace chaos with tables base and base2, and tables made and
    unregistered so that their metadata can be registered again."""
    assert floe.api("POST", catalog(floe, "namespaces"), json={"namespace": ["chaos"]}).status_code == 200
    for name in ["base", "base2"]:
        made = floe.api("POST", catalog(floe, "namespaces/chaos/tables"), json={"name": name, "schema": SCHEMA})
        assert made.status_code == 200, made.text
    registrable = {}
    for i in range(6):
        made = floe.api("POST", catalog(floe, "namespaces/chaos/tables"), json={"name": f"reg{i}", "schema": SCHEMA})
        assert made.status_code == 200, made.text
        registrable[f"reg{i}"] = made.json()["metadata-location"]
        assert floe.api("DELETE", catalog(floe, f"namespaces/chaos/tables/reg{i}")).status_code == 204
    return registrable


def http_writes(floe, registrable: dict):
    """Every kind of HTTP write, as (method, path, body, content type) made fresh each call."""
    wh = floe.warehouse
    n = lambda: uuid.uuid4().hex[:8]  # noqa: E731
    otlp_logs = lambda: json.dumps({"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "chaos"}}]}, "scopeLogs": [{"logRecords": [{"timeUnixNano": str(time.time_ns()), "body": {"stringValue": f"line {n()}"}}]}]}]}).encode()  # noqa: E731
    return [
        lambda: ("PUT", "/api/v1/migrations/probe/tables", json.dumps({"source": f"db.t{random.randint(0, 20)}", "wave": 1, "state": {"step": "x"}}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/principals", json.dumps({"name": f"p{n()}"}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/roles", json.dumps({"name": f"r{n()}"}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/grants", json.dumps({"role": "chaos-role", "privilege": "read-data", "on": {"type": "table", "warehouse": wh, "namespace": ["chaos"], "name": random.choice(["base", "base2"])}}).encode(), "application/json"),
        lambda: ("POST", catalog(floe, "namespaces"), json.dumps({"namespace": [f"ns{n()}"]}).encode(), "application/json"),
        lambda: ("POST", catalog(floe, "namespaces/chaos/tables"), json.dumps({"name": f"t{n()}", "schema": SCHEMA}).encode(), "application/json"),
        lambda: ("POST", catalog(floe, "namespaces/chaos/tables/base"), json.dumps({"requirements": [], "updates": [{"action": "set-properties", "updates": {f"k{random.randint(0, 9)}": n()}}]}).encode(), "application/json"),
        lambda: ("POST", catalog(floe, "transactions/commit"), json.dumps({"table-changes": [
            {"identifier": {"namespace": ["chaos"], "name": t}, "requirements": [], "updates": [{"action": "set-properties", "updates": {"tx": n()}}]}
            for t in ["base", "base2"]]}).encode(), "application/json"),
        lambda: ("POST", catalog(floe, "namespaces/chaos/register"), json.dumps({"name": (name := random.choice(list(registrable))), "metadata-location": registrable[name]}).encode(), "application/json"),
        lambda: ("DELETE", catalog(floe, f"namespaces/chaos/tables/reg{random.randint(0, 5)}"), b"", "application/json"),
        lambda: ("POST", f"/ingest/v1/{wh}/chaos/events?create=true", "\n".join(json.dumps({"id": random.randint(0, 10**6), "msg": n()}) for _ in range(50)).encode(), "application/x-ndjson"),
        lambda: ("POST", f"/otlp/{wh}/v1/logs", otlp_logs(), "application/json"),
        lambda: ("POST", "/api/v1/sql", json.dumps({"sql": f"INSERT INTO chaos.base VALUES ({random.randint(0, 10**6)})", "warehouse": wh}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/maintenance/expire-snapshots", json.dumps({"warehouse": wh, "namespace": ["chaos"], "table": "base", "max-snapshot-age-ms": 0, "min-snapshots-to-keep": 2}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/tables/repair", json.dumps({"warehouse": wh, "namespace": ["chaos"], "table": "base2", "dry-run": False}).encode(), "application/json"),
        lambda: ("PUT", f"/api/v1/tenants/{wh}/limits", json.dumps({"max-attributes": random.randint(50, 100)}).encode(), "application/json"),
        lambda: ("PUT", "/api/v1/maintenance/policies", json.dumps({"on": {"type": "warehouse", "warehouse": wh}, "policy": {"small-file-trigger": random.randint(500, 1000)}}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/jobs", json.dumps({"warehouse": wh, "namespace": ["chaos"], "table": "base", "kind": "compact"}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/roles/chaos-role/members", json.dumps({"principal": "chaos-member"}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/grants/revoke", json.dumps({"role": "chaos-role", "privilege": "read-data", "on": {"type": "table", "warehouse": wh, "namespace": ["chaos"], "name": "base"}}).encode(), "application/json"),
        lambda: ("POST", f"/api/v1/principals/chaos-member/{random.choice(['disable', 'enable'])}", b"", "application/json"),
        lambda: ("POST", "/api/v1/warehouses", json.dumps({"name": f"w{n()}", "storage": {"type": "local", "path": f"{floe.data_dir}/extra/{n()}"}}).encode(), "application/json"),
        lambda: ("POST", "/api/v1/signing-keys/rotate", b"", "application/json"),
    ]


def pg_insert_then_drop(floe, delay: float) -> None:
    """An INSERT over the PostgreSQL wire whose client vanishes mid-statement."""
    conn = psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=ROOT_ID, password=ROOT_SECRET,
                           dbname=floe.warehouse, connect_timeout=10, autocommit=True)
    sock = socket.socket(fileno=os.dup(conn.fileno()))

    def cut():
        time.sleep(delay)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        conn.execute(f"INSERT INTO chaos.base2 VALUES ({random.randint(0, 10**6)})")
    except psycopg.Error:
        pass
    cutter.join()
    sock.close()
    try:
        conn.close()
    except psycopg.Error:
        pass


def flight_insert_past_deadline(floe, delay: float) -> None:
    """An INSERT over Flight SQL whose call outlives the client's deadline."""
    seconds = f"{max(delay, 0.001):.3f}"
    try:
        with flight_sql.connect(
            f"grpc://127.0.0.1:{floe.flight_port}",
            db_kwargs={"username": ROOT_ID, "password": ROOT_SECRET,
                       "adbc.flight.sql.rpc.timeout_seconds.update": seconds,
                       "adbc.flight.sql.rpc.timeout_seconds.query": seconds},
            autocommit=True,
        ) as conn, conn.cursor() as cursor:
            cursor.execute(f"INSERT INTO chaos.base2 VALUES ({random.randint(0, 10**6)})")
    except Exception:  # noqa: BLE001 - a deadline is what this client is for
        pass


def chaos(floe, registrable: dict, seconds: float, stopping: bool = False) -> int:
    """Hangs up on every route in turn (a burst from 8 threads each), then on all of them
    mixed, for about `seconds` in all; answers how many requests were hung up."""
    token = floe.token()
    writes = http_writes(floe, registrable)
    routes = [
        *[(lambda delay, make=make: hang_up(floe, token, *make(), delay)) for make in writes],
        lambda delay: pg_insert_then_drop(floe, max(delay, 0.001)),
        lambda delay: flight_insert_past_deadline(floe, delay),
    ]
    sent = [0]
    failures: list[BaseException] = []

    def burst(pick, until: float, seed: int, delays):
        rng = random.Random(seed)
        try:
            while time.time() < until:
                pick(rng)(delays(rng))
                sent[0] += 1
        except (OSError, psycopg.OperationalError) as e:
            # A server that is stopping refuses connections: that is the point then.
            if not stopping:
                failures.append(e)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    def run(pick, until: float, delays=lambda rng: rng.choice([*DELAYS, rng.uniform(0, 0.1), -1])):
        threads = [threading.Thread(target=burst, args=(pick, until, random.random(), delays)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # First as the report that found the lock-up did: one quick store write, clients timing
    # out anywhere in its first 20 ms, where its transaction begins.
    run(lambda rng: routes[0], time.time() + seconds * 0.25, lambda rng: rng.uniform(0.001, 0.02))
    for route in routes:
        run(lambda rng, route=route: route, time.time() + seconds * 0.03)
    run(lambda rng: rng.choice(routes), time.time() + seconds * 0.2)
    assert not failures, failures
    return sent[0]


def timed(call):
    started = time.time()
    answer = call()
    return answer, time.time() - started


def detached_requests(floe) -> int:
    text = requests.get(f"{floe.base}/metrics", timeout=10).text
    line = next(line for line in text.splitlines() if line.startswith("floe_http_requests_detached "))
    return int(float(line.split()[1]))


def assert_everything_works(floe) -> None:
    # Requests whose clients left finish on their own tasks (the metrics request is one of
    # none: it only reads); the backlog thousands of hang-ups left drains first.
    deadline = time.time() + 120
    while detached_requests(floe) > 0:
        assert time.time() < deadline, f"{detached_requests(floe)} detached requests still running"
        time.sleep(0.2)
    made, took = timed(lambda: floe.api("POST", "/api/v1/principals", json={"name": f"later-{uuid.uuid4().hex[:6]}"}))
    assert made.status_code == 201, made.text
    assert took < 5, f"a principal took {took:.1f} s to create after the chaos"
    made, took = timed(lambda: floe.api("POST", catalog(floe, "namespaces/chaos/tables"), json={"name": "after", "schema": SCHEMA}))
    assert made.status_code == 200, made.text
    assert took < 5, took
    committed = floe.api("POST", catalog(floe, "namespaces/chaos/tables/after"),
                         json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]})
    assert committed.status_code == 200, committed.text
    # Nothing half-created: every table the catalog lists loads whole.
    listed = floe.api("GET", catalog(floe, "namespaces/chaos/tables?pageSize=1000"))
    assert listed.status_code == 200, listed.text
    names = [t["name"] for t in listed.json()["identifiers"]]
    assert "base" in names and "after" in names
    for name in names:
        loaded = floe.api("GET", catalog(floe, f"namespaces/chaos/tables/{name}"))
        assert loaded.status_code == 200, (name, loaded.text)
    # SQL, ingestion and the other doors still write and read.
    wh = floe.warehouse
    before = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM chaos.base", "warehouse": wh})
    assert before.status_code == 200, before.text
    inserted = floe.api("POST", "/api/v1/sql", json={"sql": "INSERT INTO chaos.base VALUES (-1)", "warehouse": wh})
    assert inserted.status_code == 200, inserted.text
    after = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM chaos.base", "warehouse": wh})
    assert after.json()["rows"][0]["n"] == before.json()["rows"][0]["n"] + 1
    ingested = requests.post(f"{floe.base}/ingest/v1/{wh}/chaos/late?create=true&wait=commit",
                             data=b'{"id": 1}\n{"id": 2}\n', timeout=60,
                             headers={"Authorization": f"Bearer {floe.token()}", "Content-Type": "application/x-ndjson"})
    assert ingested.status_code == 200, ingested.text
    with psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=ROOT_ID, password=ROOT_SECRET,
                         dbname=wh, connect_timeout=10, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM chaos.late").fetchone()[0] == 2


def assert_no_transaction_left(floe) -> None:
    if floe.backend == "sqlite":
        # Another process takes the write lock at once: no pooled connection holds it.
        db = sqlite3.connect(floe.data_dir / "catalog.db", timeout=5)
        started = time.time()
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        db.close()
        assert time.time() - started < 5
    else:
        with psycopg.connect(floe.database, autocommit=True) as conn:
            stuck = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%' "
                "AND now() - state_change > interval '2 seconds'"
            ).fetchone()[0]
        assert stuck == 0, f"{stuck} connection(s) left idle in a transaction"


def assert_audit_verifies(floe) -> None:
    args = [FLOE_BIN, "audit", "verify"]
    args += ["--catalog-db", floe.database] if floe.backend == "postgres" else ["--data-dir", str(floe.data_dir)]
    verified = subprocess.run(args, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "FLOE_LOG": "warn"})
    assert verified.returncode == 0, verified.stdout + verified.stderr


def assert_stops_within_bound(floe) -> None:
    started = time.time()
    floe.process.send_signal(signal.SIGTERM)
    try:
        floe.process.wait(timeout=SHUTDOWN_BOUND + 5)
    except subprocess.TimeoutExpired:
        floe.process.kill()
        pytest.fail(f"SIGTERM did not stop the server within {SHUTDOWN_BOUND} s")
    assert time.time() - started < SHUTDOWN_BOUND + 5


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_clients_that_hang_up_break_nothing(tmp_path, backend):
    floe = start_floe(tmp_path, backend=backend, extra_args=("--shutdown-timeout-secs", str(SHUTDOWN_BOUND)))
    try:
        registrable = prepare(floe)
        assert floe.api("POST", "/api/v1/roles", json={"name": "chaos-role"}).status_code == 201
        assert floe.api("POST", "/api/v1/principals", json={"name": "chaos-member"}).status_code == 201
        sent = chaos(floe, registrable, CHAOS_SECONDS)
        assert sent > 200, sent
        print(f"{sent} requests hung up")
        assert_everything_works(floe)
        assert_no_transaction_left(floe)
        # Hang-ups during a stop as well: the bound still holds.
        stopper = threading.Thread(target=chaos, args=(floe, registrable, 2.0, True))
        stopper.start()
        time.sleep(1)
        assert_stops_within_bound(floe)
        stopper.join()
        # No request failed inside the server on the way: a hang-up is never an internal error.
        errors = [line for line in (tmp_path / "floe.log").read_text().splitlines() if " ERROR " in line or "panicked" in line]
        assert not errors, "\n".join(errors[:10])
        assert_audit_verifies(floe)
    finally:
        stop_floe(floe)
