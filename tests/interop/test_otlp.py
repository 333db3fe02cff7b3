"""OpenTelemetry into Iceberg through OpenTelemetry's own Python SDK and exporters from PyPI:
OTLP over HTTP with protobuf, over HTTP with JSON, and over gRPC each send logs, spans and
metrics; Floe's SQL answers exactly what was sent, and PyIceberg and DuckDB read the same
tables. Bad input gets a clear 4xx in OTLP's own error form."""

from __future__ import annotations

import gzip
import json
import time

import pytest
import requests
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

LOGS, SPANS = 5, 3


def exporters(floe, kind: str, token: str):
    """The (log, span, metric) exporters of one OTLP transport, pointed at `floe`."""
    headers = {"authorization": f"Bearer {token}"}
    base = f"{floe.base}/otlp/{floe.warehouse}/v1"
    if kind == "http-protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return (
            OTLPLogExporter(endpoint=f"{base}/logs", headers=headers),
            OTLPSpanExporter(endpoint=f"{base}/traces", headers=headers),
            OTLPMetricExporter(endpoint=f"{base}/metrics", headers=headers),
        )
    if kind == "http-json":
        from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter

        return (
            OTLPLogExporter(endpoint=f"{base}/logs", headers=headers),
            OTLPSpanExporter(endpoint=f"{base}/traces", headers=headers),
            OTLPMetricExporter(endpoint=f"{base}/metrics", headers=headers),
        )
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from grpc import Compression

    grpc_headers = (("authorization", f"Bearer {token}"), ("x-scope-orgid", floe.warehouse))
    endpoint = f"127.0.0.1:{floe.otlp_grpc_port}"
    # Gzip, as the OpenTelemetry Collector's exporters compress by default.
    options = {"endpoint": endpoint, "insecure": True, "headers": grpc_headers, "compression": Compression.Gzip}
    return (
        OTLPLogExporter(**options),
        OTLPSpanExporter(**options),
        OTLPMetricExporter(**options),
    )


def send(floe, kind: str, service: str, token: str) -> None:
    """Logs, spans and metrics of `service` through one transport's exporters."""
    log_exporter, span_exporter, metric_exporter = exporters(floe, kind, token)
    resource = Resource.create({"service.name": service, "deployment.environment": "test"})

    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    logger = logs.get_logger("shop", "1.2.3")
    for i in range(LOGS):
        logger.emit(
            body=f"order {i} paid",
            severity_text="INFO" if i % 2 else "WARN",
            severity_number=SeverityNumber.INFO if i % 2 else SeverityNumber.WARN,
            attributes={"order": i, "amount": i * 1.5, "ok": i % 2 == 0},
        )
    logs.shutdown()

    traces = TracerProvider(resource=resource)
    traces.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = traces.get_tracer("shop")
    with tracer.start_as_current_span("checkout", kind=SpanKind.SERVER) as parent:
        parent.set_attribute("cart.items", 3)
        for i in range(SPANS - 1):
            with tracer.start_as_current_span(f"step-{i}") as child:
                child.add_event("charged", {"attempt": i})
    traces.shutdown()

    reader = InMemoryMetricReader()
    meters = MeterProvider(resource=resource, metric_readers=[reader])
    meter = meters.get_meter("shop")
    counter = meter.create_counter("orders", unit="1", description="orders paid")
    histogram = meter.create_histogram("latency", unit="ms")
    for i in range(4):
        counter.add(2, {"region": "eu"})
        histogram.record(10.0 * (i + 1), {"region": "eu"})
    data = reader.get_metrics_data()
    assert isinstance(metric_exporter, MetricExporter)
    result = metric_exporter.export(data)
    assert result.name == "SUCCESS", result
    meters.shutdown()


def rows(floe, statement: str):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def eventually(floe, statement: str, expected, timeout: float = 30.0):
    deadline = time.time() + timeout
    while True:
        got = rows(floe, statement)
        if got == expected or time.time() > deadline:
            assert got == expected, statement
            return got
        time.sleep(0.3)


def committed(floe, timeout: float = 30.0) -> None:
    """Waits until the node's ingest log holds nothing uncommitted (Floe SQL sees acknowledged
    rows before that; other engines read snapshots only)."""
    deadline = time.time() + timeout
    while True:
        tables = floe.api("GET", "/api/v1/ingest/status").json()["tables"]
        if all(t["pending-entries"] == 0 for t in tables):
            return
        assert time.time() < deadline, tables
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["http-protobuf", "http-json", "grpc"])
def test_the_sdks_exporters_send_logs_spans_and_metrics(floe, kind):
    token = floe.token()
    service = f"shop-{kind}"
    send(floe, kind, service, token)
    where = f"WHERE service_name = '{service}'"

    eventually(floe, f"SELECT count(*) AS n FROM otel.logs {where}", [{"n": LOGS}])
    logged = rows(
        floe,
        f"SELECT body, severity_text, severity_number, attributes['order'] AS o, attributes['ok'] AS ok, "
        f"resource_attributes['deployment.environment'] AS env, scope_name, scope_version "
        f"FROM otel.logs {where} ORDER BY body",
    )
    assert [r["body"] for r in logged] == [f"order {i} paid" for i in range(LOGS)]
    assert logged[1] == {
        "body": "order 1 paid", "severity_text": "INFO", "severity_number": 9, "o": "1", "ok": "false",
        "env": "test", "scope_name": "shop", "scope_version": "1.2.3",
    }

    eventually(floe, f"SELECT count(*) AS n FROM otel.spans {where}", [{"n": SPANS}])
    spans = rows(
        floe,
        f"SELECT name, kind, parent_span_id IS NULL AS root, cardinality(events) AS events, "
        f"length(trace_id) AS t FROM otel.spans {where} ORDER BY name",
    )
    assert spans[0] == {"name": "checkout", "kind": "SERVER", "root": True, "events": 0, "t": 32}
    assert [s["events"] for s in spans[1:]] == [1, 1]
    traces = rows(floe, f"SELECT count(DISTINCT trace_id) AS n FROM otel.spans {where}")
    assert traces == [{"n": 1}]

    eventually(
        floe,
        f"SELECT metric_name, metric_type FROM otel.metrics {where} ORDER BY metric_name",
        [{"metric_name": "latency", "metric_type": "histogram"}, {"metric_name": "orders", "metric_type": "sum"}],
    )
    orders = rows(
        floe,
        f"SELECT value, is_monotonic, aggregation_temporality AS t, attributes['region'] AS region, unit "
        f"FROM otel.metrics {where} AND metric_name = 'orders'",
    )
    assert orders == [{"value": 8.0, "is_monotonic": True, "t": "CUMULATIVE", "region": "eu", "unit": "1"}]
    latency = rows(floe, f"SELECT count, sum, min, max FROM otel.metrics {where} AND metric_name = 'latency'")
    assert latency == [{"count": 4, "sum": 100.0, "min": 10.0, "max": 40.0}]

    # Other engines read the same tables, once the log has committed them.
    committed(floe)
    catalog = floe.pyiceberg()
    read = catalog.load_table("otel.logs").scan(row_filter=f"service_name == '{service}'").to_arrow()
    assert read.num_rows == LOGS
    # The span files carry bloom filters on their ids: one a file holds probes as maybe there,
    # one it does not as surely not.
    import duckdb

    spans_table = catalog.load_table("otel.spans")
    task = next(iter(spans_table.scan(row_filter=f"service_name == '{service}'").plan_files()))
    path = task.file.file_path.removeprefix("file://")
    held = rows(floe, f"SELECT trace_id FROM otel.spans {where} LIMIT 1")[0]["trace_id"]
    probe = "SELECT bool_and(bloom_filter_excludes) FROM parquet_bloom_probe(?, 'trace_id', ?)"
    assert duckdb.execute(probe, [path, held]).fetchone()[0] is False
    assert duckdb.execute(probe, [path, "0" * 32]).fetchone()[0] is True
    from test_duckdb import attach

    con = attach(floe)
    duck = con.execute(
        f"SELECT count(*) FROM floe.otel.spans WHERE service_name = '{service}'"
    ).fetchone()[0]
    assert duck == SPANS


def otlp(floe, path: str, body: bytes, content_type: str, token: str | None, **headers) -> requests.Response:
    sent = {"Content-Type": content_type, **headers}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return requests.post(f"{floe.base}{path}", data=body, headers=sent, timeout=30)


def test_exemplars_of_metric_points_land_in_otel_exemplars(floe):
    """OTLP data points carry exemplars (a trace the value was seen in): they are rows of
    otel.exemplars, with the point's series, as remote write's are."""
    body = {"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeMetrics": [{"metrics": [{"name": "requests", "sum": {
            "aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [{
                "timeUnixNano": "1700000000000000000", "asInt": "7",
                "attributes": [{"key": "route", "value": {"stringValue": "/pay"}}],
                "exemplars": [{"timeUnixNano": "1700000000000000000", "asInt": "1",
                               "traceId": "5b8efff798038103d269b633813fc60c",
                               "spanId": "eee19b7ec3c1b174",
                               "filteredAttributes": [{"key": "user", "value": {"stringValue": "u1"}}]}],
            }]}}]}],
    }]}
    answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/metrics", json.dumps(body).encode(),
                  "application/json", floe.token())
    assert answer.status_code == 200, answer.text
    eventually(
        floe,
        "SELECT service_name, metric_name, attributes['route'] AS route, value, trace_id, span_id, "
        "exemplar_attributes['user'] AS user_label FROM otel.exemplars",
        [{"service_name": "api", "metric_name": "requests", "route": "/pay", "value": 1.0,
          "trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174",
          "user_label": "u1"}],
    )

    # A principal that may write otel.metrics alone: its points are taken, its exemplars left
    # out (they are an addition, never a reason to lose the points).
    from test_governance import make_principal

    on_metrics = {"type": "table", "warehouse": floe.warehouse, "namespace": ["otel"], "name": "metrics"}
    client_id, secret = make_principal(floe, "metrics-only", [("write-data", on_metrics)])
    body["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["name"] = "requests_by_grant"
    answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/metrics", json.dumps(body).encode(),
                  "application/json", floe.token(client_id, secret))
    assert answer.status_code == 200, answer.text
    eventually(floe, "SELECT count(*) AS n FROM otel.metrics WHERE metric_name = 'requests_by_grant'",
               [{"n": 1}])
    assert rows(floe, "SELECT count(*) AS n FROM otel.exemplars WHERE metric_name = 'requests_by_grant'") == [{"n": 0}]


def test_bad_input_is_a_clear_4xx_in_otlps_form(floe):
    token = floe.token()
    logs = f"/otlp/{floe.warehouse}/v1/logs"
    # Malformed protobuf: 400 with a google.rpc.Status in protobuf.
    answer = otlp(floe, logs, b"\xff\xff\xff\xff", "application/x-protobuf", token)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/x-protobuf"
    assert b"not a protobuf logs request" in answer.content
    # Malformed JSON: 400 with a google.rpc.Status in JSON.
    answer = otlp(floe, logs, b'{"resourceLogs": 7}', "application/json", token)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == 3 and "OTLP/JSON" in answer.json()["message"]
    # Wrong content type: 415.
    answer = otlp(floe, logs, b"hello", "text/plain", token)
    assert answer.status_code == 415, answer.text
    assert "application/x-protobuf" in answer.json()["message"]
    # Oversize: 413, from the body's size and from what a small gzip body inflates to.
    big = b"{" + b" " * (70 << 20) + b"}"
    answer = otlp(floe, logs, big, "application/json", token)
    assert answer.status_code == 413, answer.text[:200]
    bomb = gzip.compress(b'{"resourceLogs":[' + b"{}," * (40 << 20) + b"{}]}")
    answer = otlp(floe, logs, bomb, "application/json", token, **{"Content-Encoding": "gzip"})
    assert answer.status_code == 413, answer.text
    # Unknown tenant: 404 naming it.
    answer = otlp(floe, "/otlp/nowhere/v1/logs", b"{}", "application/json", token)
    assert answer.status_code == 404, answer.text
    assert "nowhere" in answer.json()["message"]
    answer = otlp(floe, "/otlp/v1/logs", b"{}", "application/json", token, **{"X-Scope-OrgID": "nowhere"})
    assert answer.status_code == 404, answer.text
    # No credentials: 401, a google.rpc.Status in the request's own encoding (what exporters
    # log), with the challenge.
    answer = otlp(floe, logs, b"{}", "application/json", None)
    assert answer.status_code == 401, answer.text
    assert answer.json()["code"] == 16 and answer.json()["message"], answer.text
    assert answer.headers["www-authenticate"].startswith("Bearer")
    answer = otlp(floe, logs, b"", "application/x-protobuf", "not-a-token")
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"] == "application/x-protobuf"
    from google.rpc.status_pb2 import Status

    assert Status.FromString(answer.content).code == 16
    # An empty request is a success.
    answer = otlp(floe, logs, b"{}", "application/json", token)
    assert answer.status_code == 200 and answer.json() == {}, answer.text
    # A record with a bad id is refused alone: partial success, and a dead letter.
    body = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "partial"}}]},
            "scopeLogs": [{"logRecords": [{"body": {"stringValue": "fine"}}, {"body": {"stringValue": "bad"}, "traceId": "abcd"}]}]}]}
    answer = otlp(floe, logs, json.dumps(body).encode(), "application/json", token)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] in (1, "1") and "trace_id" in partial["errorMessage"]
    eventually(floe, "SELECT body FROM otel.logs WHERE service_name = 'partial'", [{"body": "fine"}])
    eventually(floe, "SELECT door, reason LIKE '%trace_id%' AS why, CAST(record AS VARCHAR) LIKE '%abcd%' AS kept "
               "FROM otel.logs__dead_letters WHERE source = 'partial'", [{"door": "otlp", "why": True, "kept": True}])
    # The server is alive after all of it.
    assert requests.get(f"{floe.base}/health", timeout=10).status_code == 200


def test_a_grpc_message_over_the_limit_is_resource_exhausted(floe):
    """Not OUT_OF_RANGE (tonic's own answer), which OTLP exporters retry for ever."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{floe.otlp_grpc_port}") as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        metadata = (("authorization", f"Bearer {floe.token()}"), ("x-scope-orgid", floe.warehouse))
        # A body of 65 MiB, past --ingest-max-body-mb (64): one bytes field of a log record.
        oversize = b"\x0a" + bytes([0x80, 0x80, 0x80, 0x21]) + b"\0" * (65 << 20)
        with pytest.raises(grpc.RpcError) as refused:
            export(oversize, metadata=metadata, timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
    assert requests.get(f"{floe.base}/health", timeout=10).status_code == 200


def test_a_principal_without_grants_writes_nothing(floe):
    from test_governance import make_principal

    client_id, secret = make_principal(floe, "otlp-nobody", [])
    token = floe.token(client_id, secret)
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "x"}}]}]}]}
    answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/logs", json.dumps(body).encode(), "application/json", token)
    assert answer.status_code in (403, 404), answer.text
    assert "code" in answer.json()
    tables = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/otel/tables")
    assert tables.status_code in (404, 200)
    if tables.status_code == 200:
        assert {"namespace": ["otel"], "name": "logs"} not in tables.json()["identifiers"]


def logs_request(ids: list[int]) -> bytes:
    """An OTLP logs request (OpenTelemetry's own protobuf classes) of one record per id."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource

    now = time.time_ns()
    records = [
        LogRecord(
            time_unix_nano=now,
            severity_number=9,
            body=AnyValue(string_value=f"event {i}"),
            attributes=[KeyValue(key="id", value=AnyValue(int_value=i))],
        )
        for i in ids
    ]
    resource = ProtoResource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="storm"))])
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource, scope_logs=[ScopeLogs(log_records=records)])]
    )
    return request.SerializeToString()


def kill_storm(tmp_path, args: tuple[str, ...], batch: int, pauses: tuple[float, float], seed: int,
               before=None):
    """Starts Floe, sends OTLP log records with unique ids (`batch` a request) while Floe is
    killed with SIGKILL and restarted five times (`pauses` seconds apart, drawn with `seed`);
    returns the last Floe and the ids acknowledged. `before(floe)` runs once Floe is up."""
    import random
    import threading

    from conftest import start_floe

    state = {"floe": start_floe(tmp_path, extra_args=args), "stop": False}
    if before:
        before(state["floe"])
    acknowledged: list[int] = []
    lock = threading.Lock()

    def produce():
        next_id = 0
        while not state["stop"]:
            ids = list(range(next_id, next_id + batch))
            next_id += batch
            with lock:
                current = state["floe"]
            try:
                answer = otlp(current, f"/otlp/{current.warehouse}/v1/logs", logs_request(ids),
                              "application/x-protobuf", current.token())
            except requests.RequestException:
                time.sleep(0.05)
                continue
            if answer.status_code == 200:
                acknowledged.extend(ids)
            else:
                time.sleep(0.05)

    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(seed)
    try:
        for _ in range(5):
            time.sleep(rng.uniform(*pauses))
            with lock:
                state["floe"].process.kill()
                state["floe"].process.wait()
                state["floe"] = start_floe(tmp_path, extra_args=args)
        time.sleep(0.5)
    finally:
        state["stop"] = True
        producer.join()
    return state["floe"], acknowledged


def test_acknowledged_records_survive_kill_9_exactly_once(tmp_path):
    """A client sends OTLP log records with unique ids while Floe is killed with SIGKILL and
    restarted over and over; every acknowledged record ends up in otel.logs exactly once."""
    from conftest import stop_floe

    floe, acknowledged = kill_storm(tmp_path, ("--ingest-commit-interval-ms", "150"), 100, (0.4, 1.2), 11)
    try:
        assert len(acknowledged) > 500, len(acknowledged)
        count = "SELECT count(*) AS n, count(DISTINCT attributes['id']) AS ids FROM otel.logs WHERE service_name = 'storm'"
        deadline = time.time() + 60
        while True:
            got = rows(floe, count)[0]
            if got["ids"] >= len(set(acknowledged)) or time.time() > deadline:
                break
            time.sleep(0.5)
        assert got["n"] == got["ids"], f"a record was written twice: {got}"
        present = {int(r["id"]) for r in rows(floe, "SELECT attributes['id'] AS id FROM otel.logs WHERE service_name = 'storm'")}
        missing = [i for i in acknowledged if i not in present]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    finally:
        stop_floe(floe)


def test_acknowledged_rows_are_queryable_before_their_commit_and_never_counted_twice(tmp_path):
    """With commits three seconds apart, OTLP log records are answered by SQL on the node that
    took them as soon as they are acknowledged, before any snapshot holds them; SQL read over
    and over while the commit lands counts each exactly once; a reader without the table's
    grant sees none of them."""
    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, extra_args=("--ingest-commit-interval-ms", "3000"))
    try:
        count = "SELECT count(*) AS n, count(DISTINCT attributes['id']) AS ids FROM otel.logs"
        sent = 0
        for round_ in range(3):
            ids = list(range(sent, sent + 200))
            answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/logs", logs_request(ids),
                          "application/x-protobuf", floe.token())
            assert answer.status_code == 200, answer.text
            sent += len(ids)
            # At once, from the log: no snapshot has these rows yet.
            status = floe.api("GET", "/api/v1/ingest/status").json()["tables"]
            logs = [t for t in status if t["table"] == "logs"][0]
            if round_ == 0:
                assert logs["committed-rows"] == 0 and logs["pending-entries"] == 1, logs
            assert rows(floe, count) == [{"n": sent, "ids": sent}]
        # Read again and again while the commit lands: never fewer, never doubled.
        deadline = time.time() + 8
        seen_commit = False
        while time.time() < deadline:
            assert rows(floe, count) == [{"n": sent, "ids": sent}]
            status = floe.api("GET", "/api/v1/ingest/status").json()["tables"]
            logs = [t for t in status if t["table"] == "logs"][0]
            seen_commit = seen_commit or logs["pending-entries"] == 0
        assert seen_commit, logs
        assert rows(floe, count) == [{"n": sent, "ids": sent}]
        # Filters, projections and aggregates apply to the fresh rows as to the committed ones.
        ids = list(range(sent, sent + 10))
        answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/logs", logs_request(ids),
                      "application/x-protobuf", floe.token())
        assert answer.status_code == 200, answer.text
        got = rows(floe, f"SELECT body FROM otel.logs WHERE attributes['id'] >= {sent} ORDER BY body")
        assert got == [{"body": f"event {i}"} for i in sorted(ids, key=lambda i: f"event {i}")]
        # Time travel reads the snapshot only, without the fresh rows.
        latest = rows(floe, 'SELECT snapshot_id FROM otel."logs$snapshots" ORDER BY committed_at DESC LIMIT 1')
        at = latest[0]["snapshot_id"]
        travel = rows(floe, f'SELECT count(*) AS n FROM otel."logs@snapshot={at}"')[0]["n"]
        status = floe.api("GET", "/api/v1/ingest/status").json()["tables"]
        if [t for t in status if t["table"] == "logs"][0]["pending-entries"] == 1:
            assert travel == sent, travel
        assert travel in (sent, sent + len(ids)), travel

        # A principal that may see the table but not read its rows reads none, fresh or not.
        from test_governance import make_principal

        on_logs = {"type": "table", "warehouse": floe.warehouse, "namespace": ["otel"], "name": "logs"}
        looker = floe.token(*make_principal(floe, "fresh-looker", [("read-metadata", on_logs)]))
        refused = floe.api("POST", "/api/v1/sql", token=looker,
                           json={"sql": "SELECT count(*) FROM otel.logs", "warehouse": floe.warehouse})
        assert refused.status_code == 403 and "read-data" in refused.text, refused.text
    finally:
        stop_floe(floe)
