"""Tenants (warehouses) and their limits, through real clients: OpenTelemetry's SDK exporters
over gRPC and HTTP/JSON, plain HTTP, psql-compatible SQL and the `floe tenant` CLI.

A noisy tenant sent past its limit gets 429 + Retry-After (gRPC RESOURCE_EXHAUSTED with
RetryInfo), the SDK's retries honour it and everything lands once; a quiet tenant beside it is
never refused. Limits changed at run time take effect within a second, on the node that set
them and on another node sharing the catalog. Per-record limits refuse records one by one
(OTLP partial_success), a full write-ahead backlog sheds new work with 503 + Retry-After while
what was admitted still commits, a storage quota refuses with 507, and a tenant's statements
wait in a bounded line."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
import requests
from conftest import FLOE_BIN, PG_URL, ROOT_ID, ROOT_SECRET, start_floe, stop_floe
from test_governance import make_principal

TENANT_A, TENANT_B = "noisy", "quiet"


def make_warehouse(floe, name: str) -> None:
    path = floe.data_dir / f"wh-{name}"
    path.mkdir(parents=True, exist_ok=True)
    answer = floe.api("POST", "/api/v1/warehouses", json={"name": name, "storage": {"type": "local", "path": str(path)}})
    assert answer.status_code == 201, answer.text


def set_limits(floe, tenant: str, limits: dict, token: str | None = None) -> requests.Response:
    return floe.api("PUT", f"/api/v1/tenants/{tenant}/limits", token=token, json=limits)


def logs_json(service: str, count: int, start: int = 0, attributes: int = 1) -> bytes:
    records = [
        {
            "timeUnixNano": str(1_700_000_000_000_000_000 + (start + i) * 1000),
            "severityText": "INFO",
            "body": {"stringValue": f"{service} record {start + i}"},
            "attributes": [{"key": f"k{a}", "value": {"intValue": str(start + i)}} for a in range(attributes)],
        }
        for i in range(count)
    ]
    return json.dumps(
        {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                           "scopeLogs": [{"logRecords": records}]}]}
    ).encode()


def post_logs(floe, tenant: str, body: bytes, token: str) -> requests.Response:
    return requests.post(
        f"{floe.base}/otlp/{tenant}/v1/logs", data=body, timeout=30,
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
    )


def count_logs(floe, tenant: str, service: str) -> int:
    answer = floe.api("POST", "/api/v1/sql", json={
        "sql": f"SELECT count(*) AS n FROM otel.logs WHERE service_name = '{service}'", "warehouse": tenant})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"][0]["n"]


def eventually_count(floe, tenant: str, service: str, expected: int, timeout: float = 30) -> int:
    deadline = time.time() + timeout
    while True:
        got = count_logs(floe, tenant, service)
        if got == expected or time.time() > deadline:
            return got
        time.sleep(0.2)


def committed_records(floe, tenant: str, table: str, expected: int, timeout: float = 30) -> None:
    """Waits until the table's current snapshot holds `expected` records."""
    deadline = time.time() + timeout
    while True:
        loaded = floe.api("GET", f"/catalog/v1/{tenant}/namespaces/otel/tables/{table}")
        assert loaded.status_code == 200, loaded.text
        metadata = loaded.json()["metadata"]
        current = [s for s in metadata.get("snapshots", []) if s["snapshot-id"] == metadata.get("current-snapshot-id")]
        total = int(current[0]["summary"].get("total-records", -1)) if current else 0
        if total == expected:
            return
        assert time.time() < deadline, f"{table} holds {total} committed records, not {expected}"
        time.sleep(0.2)


def usage(floe, tenant: str) -> dict:
    answer = floe.api("GET", f"/api/v1/tenants/{tenant}/limits")
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]


@pytest.fixture
def two_tenants(tmp_path):
    floe = start_floe(tmp_path)
    make_warehouse(floe, TENANT_A)
    make_warehouse(floe, TENANT_B)
    yield floe
    stop_floe(floe)


def test_limits_are_set_shown_and_guarded(two_tenants):
    floe = two_tenants
    # Unknown names and nonsense values are refused naming the field.
    unknown = set_limits(floe, TENANT_A, {"records-per-second": 5})
    assert unknown.status_code == 400 and "records-per-second" in unknown.text, unknown.text
    zero = set_limits(floe, TENANT_A, {"ingest-records-per-second": 0})
    assert zero.status_code == 400 and "ingest-records-per-second must be positive" in zero.text, zero.text
    orphan = set_limits(floe, TENANT_A, {"ingest-burst-records": 5})
    assert orphan.status_code == 400 and "needs ingest-records-per-second" in orphan.text, orphan.text
    assert set_limits(floe, "no-such-tenant", {"max-attributes": 5}).status_code == 404

    # A tenant's own writer sees its limits but cannot raise them, nor see another tenant's.
    on_a = {"type": "warehouse", "warehouse": TENANT_A}
    writer = floe.token(*make_principal(floe, "a-writer", [("write-data", on_a), ("create-namespace", on_a)]))
    ok = set_limits(floe, TENANT_A, {"ingest-records-per-second": 100, "max-attributes": 8})
    assert ok.status_code == 200, ok.text
    assert ok.json()["limits"] == {"ingest-records-per-second": 100, "max-attributes": 8}
    mine = floe.api("GET", f"/api/v1/tenants/{TENANT_A}/limits", token=writer)
    assert mine.status_code == 200 and mine.json()["limits"]["max-attributes"] == 8, mine.text
    raised = set_limits(floe, TENANT_A, {"ingest-records-per-second": 1_000_000}, token=writer)
    assert raised.status_code == 403, raised.text
    theirs = floe.api("GET", f"/api/v1/tenants/{TENANT_B}/limits", token=writer)
    assert theirs.status_code == 404, theirs.text

    # The CLI reads and changes them through the same API.
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    cli = [FLOE_BIN, "tenant", "limits", TENANT_A, "--server", floe.base]
    changed = subprocess.run([*cli, "--set", "ingest-records-per-second=250", "--unset", "max-attributes"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["limits"] == {"ingest-records-per-second": 250}
    bad = subprocess.run([*cli, "--set", "max-attributes=lots"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "not a whole number" in bad.stderr, bad.stderr
    cleared = subprocess.run([*cli, "--clear"], env=env, capture_output=True, text=True, timeout=60)
    assert cleared.returncode == 0, cleared.stderr
    assert floe.api("GET", f"/api/v1/tenants/{TENANT_A}/limits").json()["limits"] == {}
    # Changes are audited.
    audit = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
    assert any("/tenants/noisy/limits" in r["resource"] and r["status"] == 200 for r in audit), audit[-5:]


def test_a_noisy_tenant_is_refused_with_retry_after_and_a_quiet_one_never_is(two_tenants):
    floe = two_tenants
    token = floe.token()
    assert set_limits(floe, TENANT_A, {"ingest-records-per-second": 200, "ingest-burst-records": 200}).status_code == 200

    # Plain HTTP: the second request past the bucket is refused whole, naming the limit, its
    # value and the tenant, with a Retry-After the bucket computed.
    first = post_logs(floe, TENANT_A, logs_json("raw", 150), token)
    assert first.status_code == 200, first.text
    second = post_logs(floe, TENANT_A, logs_json("raw", 150, start=150), token)
    assert second.status_code == 429, second.text
    assert int(second.headers["Retry-After"]) >= 1
    message = second.json()["message"]
    assert "ingest-records-per-second limit of 200" in message and '"noisy"' in message, message
    # While the bucket is known empty, requests are refused before they are decoded; once
    # it refills, a request larger than the burst can never fit: 413, not worth retrying.
    time.sleep(int(second.headers["Retry-After"]))
    huge = post_logs(floe, TENANT_A, logs_json("raw", 201, start=1000), token)
    assert huge.status_code == 413 and "ingest-burst-records" in huge.text, huge.text
    assert "Retry-After" not in huge.headers

    # Tenant B sends throughout, tenant A at ten times its limit through the SDK's exporters;
    # B is never refused, and A's exporters retry as told until everything landed.
    quiet_answers: list[int] = []
    stop = threading.Event()

    def quiet():
        batch = 0
        while not stop.is_set():
            answer = post_logs(floe, TENANT_B, logs_json("steady", 20, start=batch * 20), token)
            quiet_answers.append(answer.status_code)
            batch += 1
            time.sleep(0.05)

    sender = threading.Thread(target=quiet)
    sender.start()
    try:
        sent_grpc = send_noisy_over_grpc(floe, token, batches=10, per_batch=200)
        sent_http = send_noisy_over_http_json(floe, token, batches=5, per_batch=200)
    finally:
        stop.set()
        sender.join()
    assert quiet_answers and set(quiet_answers) == {200}, sorted(set(quiet_answers))
    refused = usage(floe, TENANT_A)["refused"]
    assert refused.get("ingest-records-per-second", 0) >= 3, refused
    assert usage(floe, TENANT_B)["refused"] == {}
    assert eventually_count(floe, TENANT_A, "noisy-grpc", sent_grpc) == sent_grpc
    assert eventually_count(floe, TENANT_A, "noisy-http", sent_http) == sent_http
    quiet_sent = 20 * len(quiet_answers)
    assert eventually_count(floe, TENANT_B, "steady", quiet_sent) == quiet_sent

    # The refusals are in /metrics, per tenant.
    metrics = floe.api("GET", "/metrics").text
    assert 'floe_tenant_refused_total{tenant="noisy",limit="ingest-records-per-second"}' in metrics
    assert 'floe_tenant_accepted_records_total{tenant="quiet"}' in metrics


def log_batch(service: str, count: int, start: int):
    """`count` SDK log records of `service`, as an exporter's batch."""
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": service}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("noise")
    for i in range(count):
        logger.emit(body=f"{service} {start + i}", severity_number=SeverityNumber.INFO, attributes={"i": start + i})
    provider.shutdown()
    return memory.get_finished_logs()


def send_noisy_over_grpc(floe, token: str, batches: int, per_batch: int) -> int:
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs.export import LogRecordExportResult

    exporter = OTLPLogExporter(
        endpoint=f"127.0.0.1:{floe.otlp_grpc_port}", insecure=True, timeout=60,
        headers=(("authorization", f"Bearer {token}"), ("x-scope-orgid", TENANT_A)),
    )
    for b in range(batches):
        # Each batch alone fits the burst; back to back they are ten times the rate.
        result = exporter.export(log_batch("noisy-grpc", per_batch, b * per_batch))
        assert result == LogRecordExportResult.SUCCESS, f"batch {b}: {result}"
    exporter.shutdown()
    return batches * per_batch


def send_noisy_over_http_json(floe, token: str, batches: int, per_batch: int) -> int:
    from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs.export import LogRecordExportResult

    exporter = OTLPLogExporter(
        endpoint=f"{floe.base}/otlp/{TENANT_A}/v1/logs", headers={"authorization": f"Bearer {token}"}, timeout=60,
    )
    for b in range(batches):
        result = exporter.export(log_batch("noisy-http", per_batch, b * per_batch))
        assert result == LogRecordExportResult.SUCCESS, f"batch {b}: {result}"
    exporter.shutdown()
    return batches * per_batch


def refused_within(floe, tenant: str, token: str, expect: int, timeout: float) -> float:
    """Seconds until two back-to-back 10-record requests answer `expect` on the second."""
    started = time.time()
    start = 0
    while True:
        post_logs(floe, tenant, logs_json("probe", 10, start=start), token)
        answer = post_logs(floe, tenant, logs_json("probe", 10, start=start + 10), token)
        start += 20
        if answer.status_code == expect:
            return time.time() - started
        assert time.time() - started < timeout, f"still {answer.status_code} after {timeout} s: {answer.text}"
        time.sleep(0.05)


def test_limits_changed_at_run_time_take_effect_within_a_second(two_tenants):
    floe = two_tenants
    token = floe.token()
    assert post_logs(floe, TENANT_A, logs_json("probe", 10), token).status_code == 200
    assert set_limits(floe, TENANT_A, {"ingest-records-per-second": 10, "ingest-burst-records": 10}).status_code == 200
    assert refused_within(floe, TENANT_A, token, 429, timeout=1.0) < 1.0
    assert set_limits(floe, TENANT_A, {"ingest-records-per-second": 100000}).status_code == 200
    assert refused_within(floe, TENANT_A, token, 200, timeout=1.0) < 1.0


def test_a_limit_set_on_one_node_holds_on_another_within_a_second(tmp_path):
    if not PG_URL:
        pytest.skip("two nodes share a catalog on PostgreSQL (FLOE_TEST_POSTGRES_URL)")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = start_floe(tmp_path / "one", backend="postgres")
    two = start_floe(tmp_path / "two", backend="postgres", database=one.database)
    try:
        token = two.token()
        assert post_logs(two, "default", logs_json("probe", 10), token).status_code == 200
        assert set_limits(one, "default", {"ingest-records-per-second": 10, "ingest-burst-records": 10}).status_code == 200
        # Node two reads limits every half second.
        assert refused_within(two, "default", token, 429, timeout=1.5) < 1.5
        assert set_limits(one, "default", {"max-attributes": 50}).status_code == 200
        assert refused_within(two, "default", token, 200, timeout=1.5) < 1.5
    finally:
        stop_floe(two)
        stop_floe(one)


def test_per_record_limits_refuse_records_one_by_one(two_tenants):
    floe = two_tenants
    token = floe.token()
    limits = {"max-attributes": 3, "max-attribute-bytes": 32, "max-active-series": 2}
    assert set_limits(floe, TENANT_A, limits).status_code == 200
    mixed = json.loads(logs_json("wide", 2, attributes=2))
    too_many = json.loads(logs_json("wide", 1, start=2, attributes=5))["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    mixed["resourceLogs"][0]["scopeLogs"][0]["logRecords"].extend(too_many)
    answer = post_logs(floe, TENANT_A, json.dumps(mixed).encode(), token)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert int(partial["rejectedLogRecords"]) == 1 and "max-attributes limit of 3" in partial["errorMessage"], partial

    points = [
        {"timeUnixNano": "1700000000000000000", "asDouble": 1.0,
         "attributes": [{"key": "path", "value": {"stringValue": path}}]}
        for path in ["/a", "/b", "/a", "/c", "/d"]
    ]
    metrics = {"resourceMetrics": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
                                    "scopeMetrics": [{"metrics": [{"name": "hits", "gauge": {"dataPoints": points}}]}]}]}
    answer = requests.post(f"{floe.base}/otlp/{TENANT_A}/v1/metrics", data=json.dumps(metrics), timeout=30,
                           headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert int(partial["rejectedDataPoints"]) == 2 and "max-active-series" in partial["errorMessage"], partial
    # The refused records are dead letters with their reasons; the rest are rows.
    deadline = time.time() + 30
    while time.time() < deadline:
        letters = floe.api("POST", "/api/v1/sql", json={
            "sql": "SELECT door, reason FROM otel.logs__dead_letters UNION ALL "
                   "SELECT door, reason FROM otel.metrics__dead_letters ORDER BY reason", "warehouse": TENANT_A})
        if letters.status_code == 200 and len(letters.json()["rows"]) == 3:
            break
        time.sleep(0.2)
    assert {r["door"] for r in letters.json()["rows"]} == {"otlp"}, letters.text
    errors = [r["reason"] for r in letters.json()["rows"]]
    assert sum("max-active-series" in e for e in errors) == 2 and sum("max-attributes" in e for e in errors) == 1, errors
    got = floe.api("POST", "/api/v1/sql", json={
        "sql": "SELECT count(*) AS n FROM otel.metrics", "warehouse": TENANT_A}).json()["rows"]
    assert got == [{"n": 3}], got
    assert usage(floe, TENANT_A)["active-series"] == 2


def test_a_full_backlog_sheds_new_work_and_admitted_work_commits(tmp_path):
    # Any uncommitted byte is a full backlog; commits come every three seconds.
    floe = start_floe(tmp_path, extra_args=("--ingest-max-backlog-mb", "0", "--ingest-commit-interval-ms", "3000"))
    try:
        token = floe.token()
        admitted = post_logs(floe, "default", logs_json("shed", 10), token)
        assert admitted.status_code == 200, admitted.text
        shed = post_logs(floe, "default", logs_json("shed", 10, start=10), token)
        assert shed.status_code == 503, shed.text
        assert int(shed.headers["Retry-After"]) >= 1
        assert "overloaded" in shed.json()["message"], shed.text
        ingest = requests.post(f"{floe.base}/ingest/v1/default/otel/shed_rows?create=true", data=b'{"a": 1}\n',
                               headers={"content-type": "application/x-ndjson", "authorization": f"Bearer {token}"},
                               timeout=30)
        assert ingest.status_code == 503 and int(ingest.headers["Retry-After"]) >= 1, ingest.text
        # What was admitted commits; then the door opens again.
        assert eventually_count(floe, "default", "shed", 10) == 10
        deadline = time.time() + 30
        while (again := post_logs(floe, "default", logs_json("shed", 10, start=20), token)).status_code != 200:
            assert again.status_code == 503 and time.time() < deadline, again.text
            time.sleep(0.5)
        assert eventually_count(floe, "default", "shed", 20) == 20
    finally:
        stop_floe(floe)


def test_a_storage_quota_refuses_ingest_with_507(two_tenants):
    floe = two_tenants
    token = floe.token()
    assert post_logs(floe, TENANT_B, logs_json("stored", 50), token).status_code == 200
    assert eventually_count(floe, TENANT_B, "stored", 50) == 50
    # Rows are readable before their commit; the quota counts committed files, measured
    # when it is set.
    deadline = time.time() + 30
    while True:
        answer = set_limits(floe, TENANT_B, {"storage-quota-bytes": 1})
        assert answer.status_code == 200, answer.text
        if answer.json()["usage"]["storage-bytes"] > 1 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert answer.json()["usage"]["storage-bytes"] > 1, answer.text
    full = post_logs(floe, TENANT_B, logs_json("stored", 5, start=50), token)
    assert full.status_code == 507 and "storage-quota-bytes limit of 1" in full.text, full.text
    assert "Retry-After" not in full.headers
    assert set_limits(floe, TENANT_B, {"storage-quota-bytes": 1 << 40}).status_code == 200
    assert post_logs(floe, TENANT_B, logs_json("stored", 5, start=50), token).status_code == 200


LONG_SUM = "SELECT sum(value) AS s FROM generate_series(1, 20000000000)"


def test_a_tenants_statements_wait_in_a_bounded_line(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--sql-statement-timeout-secs", "3"))
    try:
        make_warehouse(floe, TENANT_A)
        make_warehouse(floe, TENANT_B)
        assert set_limits(floe, TENANT_A, {"max-concurrent-queries": 1, "max-queued-queries": 1}).status_code == 200
        token = floe.token()

        def sql(tenant: str, statement: str) -> requests.Response:
            return requests.post(f"{floe.base}/api/v1/sql", headers={"Authorization": f"Bearer {token}"},
                                 json={"sql": statement, "warehouse": tenant}, timeout=30)

        answers: list[requests.Response] = []
        runners = [threading.Thread(target=lambda: answers.append(sql(TENANT_A, LONG_SUM))) for _ in range(2)]
        for runner in runners:
            runner.start()
            time.sleep(0.3)
        # One runs, one waits: a third is refused at once, naming the line's limit.
        third = sql(TENANT_A, "SELECT 1 AS n")
        assert third.status_code == 429, third.text
        assert "max-queued-queries limit of 1" in third.text and int(third.headers["Retry-After"]) >= 1
        # Another tenant's statement runs meanwhile.
        other = sql(TENANT_B, "SELECT 2 AS n")
        assert other.status_code == 200 and other.json()["rows"] == [{"n": 2}], other.text
        assert usage(floe, TENANT_A)["queued-queries"] == 1
        for runner in runners:
            runner.join()
        assert sql(TENANT_A, "SELECT 1 AS n").status_code == 200
        metrics = floe.api("GET", "/metrics").text
        assert 'floe_tenant_query_queue_seconds_count{tenant="noisy"} 1' in metrics, metrics[-2000:]
    finally:
        stop_floe(floe)


def test_a_tenants_retention_deletes_its_old_observability_rows(two_tenants):
    floe = two_tenants
    token = floe.token()
    now_ns = time.time_ns()
    old_ns = now_ns - 10 * 86_400 * 1_000_000_000
    body = json.loads(logs_json("kept", 3))
    records = body["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    for i, record in enumerate(records):
        record["timeUnixNano"] = str(old_ns if i == 0 else now_ns)
    answer = post_logs(floe, TENANT_A, json.dumps(body).encode(), token)
    assert answer.status_code == 200, answer.text
    assert eventually_count(floe, TENANT_A, "kept", 3) == 3
    assert set_limits(floe, TENANT_A, {"retention-days": 7}).status_code == 200
    # The tenant's retention becomes the table's effective rule, by its day-partition column.
    effective = floe.api("GET", f"/api/v1/maintenance/policies?warehouse={TENANT_A}&namespace=otel&table=logs")
    assert effective.status_code == 200 and effective.json()["effective"]["retention"] == ["time", 7], effective.text
    committed_records(floe, TENANT_A, "logs", 3)
    run = floe.api("POST", "/api/v1/jobs", json={"warehouse": TENANT_A, "namespace": ["otel"], "table": "logs",
                                                 "kind": "retention", "wait": True, "wait-seconds": 120})
    assert run.status_code == 200 and run.json()["job"]["status"] == "succeeded", run.text
    committed_records(floe, TENANT_A, "logs", 2)
    assert eventually_count(floe, TENANT_A, "kept", 2) == 2
