"""Prometheus remote write into Iceberg, sent by a client built on Prometheus's own `prompb`
package (tests/remote_write, built by scripts/setup-remote-write.sh): every sample lands in
the tenant's otel.metrics, typed by the request's metadata, and SQL reads it back; bad
requests get the status Prometheus acts on."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import requests

CLIENT = os.environ.get("FLOE_RW_CLIENT")


def rows(floe, statement: str):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def test_a_prometheus_client_writes_series_sql_reads_back(floe):
    if not CLIENT:
        if os.environ.get("CI"):
            pytest.fail("FLOE_RW_CLIENT must be set in CI (scripts/setup-remote-write.sh)")
        pytest.skip("no remote-write client (FLOE_RW_CLIENT)")
    start = 1_700_000_000_000
    url = f"{floe.base}/prometheus/{floe.warehouse}/api/v1/write"
    sent = subprocess.run(
        [CLIENT, url, str(start)], env={**os.environ, "FLOE_TOKEN": floe.token()},
        capture_output=True, text=True, timeout=60,
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert sent.stdout.startswith("204"), sent.stdout

    statement = (
        "SELECT attributes['code'] AS code, count(*) AS n, sum(value) AS total, min(time) AS first "
        "FROM otel.metrics WHERE metric_name = 'http_requests_total' GROUP BY 1 ORDER BY 1"
    )
    deadline = time.time() + 30
    while not rows(floe, statement) and time.time() < deadline:
        time.sleep(0.3)
    assert rows(floe, statement) == [
        {"code": "200", "n": 5, "total": 15.0, "first": "2023-11-14T22:13:20Z"},
        {"code": "500", "n": 5, "total": 15.0, "first": "2023-11-14T22:13:20Z"},
    ]
    counter = rows(
        floe,
        "SELECT DISTINCT metric_type, is_monotonic, aggregation_temporality AS t, service_name, "
        "description, attributes['instance'] AS instance FROM otel.metrics WHERE metric_name = 'http_requests_total'",
    )
    assert counter == [{
        "metric_type": "sum", "is_monotonic": True, "t": "CUMULATIVE", "service_name": "api",
        "description": "requests served", "instance": "app:9090",
    }]
    gauge = rows(floe, "SELECT metric_type, value, unit FROM otel.metrics WHERE metric_name = 'temperature_celsius'")
    assert gauge == [{"metric_type": "gauge", "value": 21.5, "unit": "celsius"}]


def test_bad_remote_write_requests_get_the_status_prometheus_acts_on(floe):
    url = f"{floe.base}/prometheus/{floe.warehouse}/api/v1/write"
    headers = {"Authorization": f"Bearer {floe.token()}", "Content-Encoding": "snappy",
               "Content-Type": "application/x-protobuf"}
    # Not snappy: 400, which Prometheus drops rather than sending again.
    answer = requests.post(url, data=b"garbage", headers=headers, timeout=30)
    assert answer.status_code == 400 and "snappy" in answer.text, answer.text
    # Remote write 2.0: 415.
    v2 = {**headers, "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}
    assert requests.post(url, data=b"", headers=v2, timeout=30).status_code == 415
    # Unknown tenant: 404.
    other = f"{floe.base}/prometheus/nowhere/api/v1/write"
    answer = requests.post(other, data=b"\x00", headers=headers, timeout=30)
    assert answer.status_code == 404, answer.text
    # No credentials: 401.
    assert requests.post(url, data=b"", headers={"Content-Encoding": "snappy"}, timeout=30).status_code == 401
