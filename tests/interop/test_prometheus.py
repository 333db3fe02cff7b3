"""A real Prometheus (Debian's 2.42, scripts/setup-prometheus.sh) scraping itself and
node-exporter and sending to Floe with nothing in its remote_write section but the URL and
the credentials: every sample it sends is taken (none failed or dropped at its default batch
of 500 samples), counters and histogram parts are typed as sums — from their names at once,
and from the metadata Prometheus sends in requests of their own a minute later."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import ROOT_ID, ROOT_SECRET

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(floe, statement: str):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def own_metrics(port: int) -> dict[str, float]:
    """Prometheus's own counters, summed over their labels, from its /metrics."""
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except requests.ConnectionError:  # not listening yet
        return {}
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_:]+)(\{[^}]*\})? ([0-9.e+-]+|NaN)$", line)
        if match and match.group(3) != "NaN":
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(3))
    return totals


def wait_until(what: str, check, seconds: float):
    deadline = time.time() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(1)


@pytest.fixture
def prometheus(floe, tmp_path: Path):
    if not (os.path.exists(PROMETHEUS) and os.path.exists(NODE_EXPORTER)):
        if os.environ.get("CI"):
            pytest.fail("CI runs scripts/setup-prometheus.sh, which installs Prometheus")
        pytest.skip("no Prometheus (scripts/setup-prometheus.sh)")
    node_port, port = free_port(), free_port()
    node = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    config = tmp_path / "prometheus.yml"
    # The scrape interval is short so that a test sees many requests, and the server names
    # its cluster as most do (one more label on every series); the remote_write section is
    # what a user writes first: the URL and credentials, every setting default.
    config.write_text(f"""
global:
  scrape_interval: 2s
  external_labels: {{cluster: floe-test}}
scrape_configs:
  - job_name: prometheus
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_port}"]}}]
remote_write:
  - url: {floe.base}/prometheus/{floe.warehouse}/api/v1/write
    basic_auth: {{username: "{ROOT_ID}", password: "{ROOT_SECRET}"}}
""")
    log = open(tmp_path / "prometheus.log", "w")
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield port
    finally:
        for process in (server, node):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


def test_prometheus_at_its_defaults_loses_nothing(floe, prometheus):
    sent = wait_until(
        "Prometheus sends 3,000 samples",
        lambda: (m := own_metrics(prometheus)).get("prometheus_remote_storage_samples_total", 0) >= 3000 and m,
        90,
    )
    # Every request was taken: nothing failed (a 4xx Prometheus drops), nothing dropped.
    for counter in ("prometheus_remote_storage_samples_failed_total",
                    "prometheus_remote_storage_samples_dropped_total"):
        assert sent.get(counter, 0) == 0, (counter, sent.get(counter))
    # And each sample it counted as sent is a row.
    at_least = sent["prometheus_remote_storage_samples_total"]
    wait_until(
        f"{at_least:.0f} rows in otel.metrics",
        lambda: rows(floe, "SELECT count(*) AS n FROM otel.metrics")[0]["n"] >= at_least,
        60,
    )
    services = rows(floe, "SELECT DISTINCT service_name FROM otel.metrics ORDER BY 1")
    assert [r["service_name"] for r in services] == ["node", "prometheus"]

    # Typed by name before any metadata came.
    typed = rows(
        floe,
        "SELECT metric_name, min(metric_type) AS lo, max(metric_type) AS hi, bool_and(is_monotonic) AS mono "
        "FROM otel.metrics WHERE metric_name IN ('node_cpu_seconds_total', 'prometheus_http_request_duration_seconds_bucket', "
        "'node_load1') GROUP BY 1 ORDER BY 1",
    )
    assert typed == [
        {"metric_name": "node_cpu_seconds_total", "lo": "sum", "hi": "sum", "mono": True},
        {"metric_name": "node_load1", "lo": "gauge", "hi": "gauge", "mono": None},
        {"metric_name": "prometheus_http_request_duration_seconds_bucket", "lo": "sum", "hi": "sum", "mono": True},
    ]

    # Metadata comes in requests of its own, once a minute: the samples after it carry the
    # help text, and a histogram's _count (no counter's name) is typed as a sum by it.
    described = wait_until(
        "samples typed by metadata",
        lambda: rows(
            floe,
            "SELECT DISTINCT metric_type, description FROM otel.metrics "
            "WHERE metric_name = 'prometheus_http_request_duration_seconds_count' AND description <> ''",
        ),
        100,
    )
    assert described == [{"metric_type": "sum", "description": "Histogram of latencies for HTTP requests."}]
    assert own_metrics(prometheus).get("prometheus_remote_storage_samples_failed_total", 0) == 0
