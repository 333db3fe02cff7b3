"""Rollups and sketches: per-minute and per-hour rollups of otel.logs, otel.spans and
otel.metrics kept by jobs after each commit, answering within their documented error of the
exact answers over the raw rows — also after the server is killed with SIGKILL again and
again while rollups run (no row counted twice, none missed)."""

from __future__ import annotations

import random
import time

from conftest import start_floe, stop_floe
from test_otlp import logs_request, otlp, rows

ROLLUP_ARGS = ("--ingest-commit-interval-ms", "200", "--maintenance-trigger-delay-secs", "0",
               "--maintenance-lease-secs", "3", "--maintenance-retry-secs", "1")


def enable_rollups(floe) -> None:
    policy = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"rollups": True}}
    answer = floe.api("PUT", "/api/v1/maintenance/policies", json=policy)
    assert answer.status_code == 200, answer.text


def wait_for(floe, statement: str, expected, timeout: float = 90):
    deadline = time.time() + timeout
    while True:
        answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
        got = answer.json().get("rows") if answer.status_code == 200 else answer.text
        if got == expected or time.time() > deadline:
            return got
        time.sleep(0.5)


def spans_and_metrics(rng: random.Random, traces: int):
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    now = time.time_ns()
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="api"))])
    spans = []
    for t in range(traces):
        trace_id = rng.randbytes(16)
        for s in range(2):
            duration = rng.randint(1_000, 5_000_000)
            spans.append(Span(trace_id=trace_id, span_id=rng.randbytes(8), name="GET /items",
                              start_time_unix_nano=now, end_time_unix_nano=now + duration))
    traces_body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]).SerializeToString()
    points = [NumberDataPoint(time_unix_nano=now, as_double=rng.lognormvariate(3, 1)) for _ in range(5000)]
    metric = Metric(name="latency_ms", gauge=Gauge(data_points=points))
    metrics_body = ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics(
        resource=resource, scope_metrics=[ScopeMetrics(metrics=[metric])])]).SerializeToString()
    return traces_body, metrics_body


def test_rollups_answer_within_their_documented_error(tmp_path):
    floe = start_floe(tmp_path, extra_args=ROLLUP_ARGS)
    try:
        enable_rollups(floe)
        token = floe.token()
        rng = random.Random(7)
        traces_body, metrics_body = spans_and_metrics(rng, traces=3000)
        for body, signal in [(traces_body, "traces"), (metrics_body, "metrics")]:
            answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/{signal}", body, "application/x-protobuf", token)
            assert answer.status_code == 200, answer.text
        for start in range(0, 4000, 1000):
            answer = otlp(floe, f"/otlp/{floe.warehouse}/v1/logs", logs_request(list(range(start, start + 1000))),
                          "application/x-protobuf", token)
            assert answer.status_code == 200, answer.text

        # Counts are exact, in both rollups.
        for table in ["logs_1m", "logs_1h"]:
            got = wait_for(floe, f"SELECT sum(records) AS n FROM otel.{table}", [{"n": 4000}])
            assert got == [{"n": 4000}], (table, got)
        for table in ["spans_1m", "spans_1h"]:
            got = wait_for(floe, f"SELECT sum(spans) AS n FROM otel.{table}", [{"n": 6000}])
            assert got == [{"n": 6000}], (table, got)
        got = wait_for(floe, "SELECT sum(points) AS n FROM otel.metrics_1h", [{"n": 5000}])
        assert got == [{"n": 5000}], got

        # Distinct traces by HLL: within 3.3% (two standard errors of lg k 12).
        exact = rows(floe, "SELECT count(DISTINCT trace_id) AS n FROM otel.spans")[0]["n"]
        assert exact == 3000
        estimate = rows(floe, "SELECT hll_estimate(hll_merge(trace_ids)) AS n FROM otel.spans_1m")[0]["n"]
        assert abs(estimate - exact) <= exact * 0.033, (estimate, exact)
        # Min, max and sums are exact; quantiles by KLL within 1.65% by rank.
        summary = rows(floe, "SELECT min(duration_ns_min) AS lo, max(duration_ns_max) AS hi, "
                             "sum(duration_ns_sum) AS total FROM otel.spans_1h")[0]
        raw = rows(floe, "SELECT min(duration_ns) AS lo, max(duration_ns) AS hi, sum(duration_ns) AS total FROM otel.spans")[0]
        assert summary == raw, (summary, raw)
        values = sorted(r["value"] for r in rows(floe, "SELECT value FROM otel.metrics"))
        assert len(values) == 5000
        for q in [0.5, 0.9, 0.99]:
            estimate = rows(floe, f"SELECT kll_quantile(kll_merge(value_kll), {q}) AS v FROM otel.metrics_1m")[0]["v"]
            rank = sum(1 for v in values if v <= estimate) / len(values)
            assert abs(rank - q) <= 0.0165, (q, estimate, rank)
        # The rollup's snapshot records the source snapshot it covers.
        loaded = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/otel/tables/logs_1m").json()["metadata"]
        current = [s for s in loaded["snapshots"] if s["snapshot-id"] == loaded["current-snapshot-id"]][0]
        assert "floe.rollup.source-snapshot" in current["summary"], current["summary"]
        # A job asked for by hand when nothing is new adds nothing.
        run = floe.api("POST", "/api/v1/jobs", json={"warehouse": floe.warehouse, "namespace": ["otel"],
                                                     "table": "logs", "kind": "rollup", "wait": True})
        assert run.status_code == 200 and run.json()["job"]["status"] == "succeeded", run.text
        assert rows(floe, "SELECT sum(records) AS n FROM otel.logs_1m") == [{"n": 4000}]
    finally:
        stop_floe(floe)


def test_rollups_count_every_row_once_across_kill_9(tmp_path):
    """Rollups fed by a table written through a kill -9 storm count each raw row exactly once.
    A request can be committed and then killed before its answer, so the raw table may hold more
    than was acknowledged; it must hold every acknowledged record once, and the rollups must sum
    to exactly what it holds."""
    from test_otlp import kill_storm

    floe, acknowledged = kill_storm(tmp_path, ROLLUP_ARGS, 200, (0.6, 1.8), 5, before=enable_rollups)
    try:
        assert len(acknowledged) > 1000, len(acknowledged)
        count = ("SELECT count(*) AS n, count(DISTINCT attributes['id']) AS ids "
                 "FROM otel.logs WHERE service_name = 'storm'")
        deadline = time.time() + 90
        while True:
            raw = rows(floe, count)[0]
            if raw["ids"] >= len(acknowledged) or time.time() > deadline:
                break
            time.sleep(0.5)
        assert raw["n"] == raw["ids"], f"a record was written twice: {raw}"
        present = {int(r["id"]) for r in rows(floe, "SELECT attributes['id'] AS id FROM otel.logs WHERE service_name = 'storm'")}
        missing = [i for i in acknowledged if i not in present]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        for table in ["logs_1m", "logs_1h"]:
            deadline = time.time() + 120
            while True:
                expected = [{"n": rows(floe, count)[0]["n"]}]
                got = rows(floe, f"SELECT sum(records) AS n FROM otel.{table} WHERE service_name = 'storm'")
                if got == expected or time.time() > deadline:
                    break
                time.sleep(0.5)
            assert got == expected, f"{table} counts {got}, the raw table {expected}"
        jobs = floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}&kind=rollup&limit=1000").json()["jobs"]
        assert any(j["status"] == "succeeded" for j in jobs), jobs[:3]
    finally:
        stop_floe(floe)
