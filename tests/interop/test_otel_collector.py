"""A real OpenTelemetry Collector (built from its Go modules with its own builder,
scripts/setup-otelcol.sh) in front of Floe, its exporters at their default settings — the
batch processor, the sending queue, retries — as a user writes a first configuration: the
endpoint and the credentials. Logs and metrics go over OTLP/HTTP (`otlphttp`), traces over
OTLP/gRPC (`otlp`). Floe is stopped and started again while records flow: every record the
Collector accepted lands in Floe exactly once."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import _free_port, restart_floe, stop_process
from test_otlp import rows

COLLECTOR = os.environ.get("FLOE_OTELCOL") or str(Path.home() / ".cache/floe-bin/otelcol-floe")
SERVICE = "collector-test"
ROUNDS, PER_ROUND = 40, 50
BURST = 20_000


def resource():
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    return Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value=SERVICE))])


def id_attribute(i: int):
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    return KeyValue(key="id", value=AnyValue(int_value=i))


def logs(ids: list[int], wide: bool = False) -> bytes:
    """Log records of `ids`; `wide` ones as a service writes them: a long body and ten
    attributes."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    now = time.time_ns()
    extra = [KeyValue(key=f"http.attribute.{k}", value=AnyValue(string_value=f"value-{k}-" + "x" * 20))
             for k in range(9)] if wide else []
    records = [
        LogRecord(time_unix_nano=now, severity_number=9,
                  body=AnyValue(string_value=f"event {i} " + ("request handled in time " * 8 if wide else "")),
                  attributes=[id_attribute(i), *extra])
        for i in ids
    ]
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource(), scope_logs=[ScopeLogs(log_records=records)])]
    ).SerializeToString()


def spans(ids: list[int]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    now = time.time_ns()
    records = [
        Span(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name=f"op {i}",
             kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=now, end_time_unix_nano=now + 1000,
             attributes=[id_attribute(i)])
        for i in ids
    ]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource(), scope_spans=[ScopeSpans(spans=records)])]
    ).SerializeToString()


def gauges(ids: list[int]) -> bytes:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics

    now = time.time_ns()
    points = [NumberDataPoint(time_unix_nano=now, as_double=float(i), attributes=[id_attribute(i)]) for i in ids]
    metric = Metric(name="probe", unit="1", gauge=Gauge(data_points=points))
    return ExportMetricsServiceRequest(
        resource_metrics=[ResourceMetrics(resource=resource(), scope_metrics=[ScopeMetrics(metrics=[metric])])]
    ).SerializeToString()


@pytest.fixture
def collector(floe, tmp_path: Path):
    if not os.path.exists(COLLECTOR):
        if os.environ.get("CI"):
            pytest.fail("CI runs scripts/setup-otelcol.sh, which builds the Collector")
        pytest.skip("no OpenTelemetry Collector (scripts/setup-otelcol.sh)")
    port = _free_port()
    token = floe.token()
    config = tmp_path / "collector.yaml"
    # What a user writes first: where to send and the credentials; batching, the sending queue
    # and retries at their defaults.
    config.write_text(f"""
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
processors:
  batch:
exporters:
  otlphttp:
    endpoint: {floe.base}/otlp/{floe.warehouse}
    headers:
      authorization: "Bearer {token}"
  otlp:
    endpoint: 127.0.0.1:{floe.otlp_grpc_port}
    tls:
      insecure: true
    headers:
      authorization: "Bearer {token}"
      x-scope-orgid: "{floe.warehouse}"
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlphttp]
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlphttp]
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp]
""")
    log = open(tmp_path / "collector.log", "w")
    process = subprocess.Popen([COLLECTOR, f"--config={config}"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            requests.post(f"{base}/v1/logs", data=logs([]), headers={"Content-Type": "application/x-protobuf"}, timeout=2)
            break
        except requests.ConnectionError:
            if process.poll() is not None or time.time() > deadline:
                pytest.fail(f"the collector did not start: {(tmp_path / 'collector.log').read_text()}")
            time.sleep(0.2)
    try:
        yield base
    finally:
        stop_process(process, timeout=30)
        log.close()


def test_a_collector_at_its_defaults_delivers_every_record_once_through_a_restart(floe, collector, tmp_path):
    sent = {"logs": 0, "traces": 0, "metrics": 0}

    def send(signal: str, body: bytes) -> None:
        answer = requests.post(f"{collector}/v1/{signal}", data=body,
                               headers={"Content-Type": "application/x-protobuf"}, timeout=30)
        assert answer.status_code == 200, (signal, answer.status_code, answer.text)

    def produce():
        for round_ in range(ROUNDS):
            ids = list(range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND))
            send("logs", logs(ids))
            send("traces", spans(ids))
            send("metrics", gauges(ids))
            for signal in sent:
                sent[signal] += len(ids)
            time.sleep(0.1)

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(1.5)
    # Mid-stream, Floe goes away for a while and comes back: the Collector queues and retries.
    restart_floe(floe, tmp_path)
    producer.join()
    total = ROUNDS * PER_ROUND
    assert sent == {"logs": total, "traces": total, "metrics": total}
    # Then a burst: the batch processor sends full batches of 8,192 wide records (its
    # default), which Floe must take whole.
    for first in range(total, total + BURST, BURST // 5):
        send("logs", logs(list(range(first, first + BURST // 5)), wide=True))

    queries = {
        "logs": f"SELECT count(*) AS n, count(DISTINCT attributes['id']) AS ids FROM otel.logs WHERE service_name = '{SERVICE}'",
        "traces": f"SELECT count(*) AS n, count(DISTINCT span_id) AS ids FROM otel.spans WHERE service_name = '{SERVICE}'",
        "metrics": "SELECT count(*) AS n, count(DISTINCT attributes['id']) AS ids FROM otel.metrics "
                   f"WHERE service_name = '{SERVICE}' AND metric_name = 'probe'",
    }
    # The Collector's first retry waits 5 s (and up to 30 s between later ones).
    expected = {"logs": total + BURST, "traces": total, "metrics": total}
    deadline = time.time() + 120
    while True:
        got = {signal: rows(floe, statement)[0] for signal, statement in queries.items()}
        if all(got[s]["ids"] >= expected[s] for s in got) or time.time() > deadline:
            break
        time.sleep(1)
    log = (tmp_path / "collector.log").read_text()
    for signal, g in got.items():
        assert g == {"n": expected[signal], "ids": expected[signal]}, (signal, g, log[-3000:])
    # The restart was felt (the Collector retried), and it dropped nothing.
    assert "Will retry the request" in log, log[-3000:]
    assert "Dropping data" not in log and "dropped_items" not in log, log[-3000:]
