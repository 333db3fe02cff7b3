"""A real Prometheus (Debian's 2.42, scripts/setup-prometheus.sh) scraping itself and
node-exporter and sending to Floe with nothing in its remote_write section but the URL and
the credentials: every sample it sends is taken (none failed or dropped at its default batch
of 500 samples), counters and histogram parts are typed as sums — from their names at once,
and from the metadata Prometheus sends in requests of their own a minute later. And Prometheus
3 (built from its Go module, scripts/setup-prometheus3.sh) sending remote write 2.0, with the
native histograms it scrapes from itself: every sample and histogram taken, as its own
counters and the written-count headers it checks say, typed at once by the metadata 2.0
carries."""

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

from conftest import ROOT_ID, ROOT_SECRET, stop_process

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMETHEUS3 = os.environ.get("FLOE_PROMETHEUS3")
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


def run_prometheus(binary: str, floe, tmp_path: Path, scrape: str = "", remote_write: str = "",
                   flags: tuple[str, ...] = ()):
    """Prometheus `binary` scraping itself and node-exporter every 2 s, remote-writing to
    Floe with the URL, the credentials and `remote_write`'s lines; yields its port."""
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
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]{scrape}
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_port}"]}}]
remote_write:
  - url: {floe.base}/prometheus/{floe.warehouse}/api/v1/write
    basic_auth: {{username: "{ROOT_ID}", password: "{ROOT_SECRET}"}}{remote_write}
""")
    log = open(tmp_path / "prometheus.log", "w")
    server = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", *flags],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield port
    finally:
        for process in (server, node):
            stop_process(process)
        log.close()


def have_node_exporter(binary: str | None, setup: str):
    if not (binary and os.path.exists(binary) and os.path.exists(NODE_EXPORTER)):
        if os.environ.get("CI"):
            pytest.fail(f"CI runs {setup}, which provides Prometheus")
        pytest.skip(f"no Prometheus ({setup})")


@pytest.fixture
def prometheus(floe, tmp_path: Path):
    have_node_exporter(PROMETHEUS, "scripts/setup-prometheus.sh")
    yield from run_prometheus(PROMETHEUS, floe, tmp_path)


@pytest.fixture
def prometheus3(floe, tmp_path: Path):
    have_node_exporter(PROMETHEUS3, "scripts/setup-prometheus3.sh")
    # Remote write 2.0 chosen, with the metadata records its docs say 2.0's metadata needs;
    # native histograms scraped from Prometheus's own metrics and sent; the queue, batches and
    # retries at their defaults.
    yield from run_prometheus(
        PROMETHEUS3, floe, tmp_path,
        scrape="\n    scrape_native_histograms: true",
        remote_write="\n    protobuf_message: io.prometheus.write.v2.Request"
                     "\n    send_native_histograms: true",
        flags=("--enable-feature=metadata-wal-records",),
    )


def test_prometheus_3_sends_remote_write_2_0_and_loses_nothing(floe, prometheus3, tmp_path):
    sent = wait_until(
        "Prometheus 3 sends 3,000 samples and some native histograms",
        lambda: (m := own_metrics(prometheus3)).get("prometheus_remote_storage_samples_total", 0) >= 3000
        and m.get("prometheus_remote_storage_histograms_total", 0) > 0 and m,
        90,
    )
    # Prometheus counts as failed whatever the written-count headers say was not written.
    for kind in ("samples", "histograms", "exemplars"):
        for fate in ("failed", "dropped"):
            counter = f"prometheus_remote_storage_{kind}_{fate}_total"
            assert sent.get(counter, 0) == 0, (counter, sent.get(counter))
    at_least = sent["prometheus_remote_storage_samples_total"] + sent["prometheus_remote_storage_histograms_total"]
    wait_until(
        f"{at_least:.0f} rows in otel.metrics",
        lambda: rows(floe, "SELECT count(*) AS n FROM otel.metrics")[0]["n"] >= at_least,
        60,
    )
    # Typed and described at once, by the metadata on each series.
    typed = rows(
        floe,
        "SELECT metric_name, min(metric_type) AS lo, max(metric_type) AS hi, min(description) AS help "
        "FROM otel.metrics WHERE metric_name IN ('node_cpu_seconds_total', 'node_load1', "
        "'prometheus_http_request_duration_seconds') GROUP BY 1 ORDER BY 1",
    )
    assert [(r["metric_name"], r["lo"], r["hi"]) for r in typed] == [
        ("node_cpu_seconds_total", "sum", "sum"),
        ("node_load1", "gauge", "gauge"),
        ("prometheus_http_request_duration_seconds", "exponential_histogram", "exponential_histogram"),
    ]
    assert all(r["help"] for r in typed), typed
    # Native histograms read back whole: their buckets add up to their count.
    histograms = rows(
        floe,
        "SELECT count, zero_count, positive_bucket_counts AS p, negative_bucket_counts AS n "
        "FROM otel.metrics WHERE metric_type = 'exponential_histogram'",
    )
    assert histograms
    for h in histograms:
        assert h["zero_count"] + sum(h["p"] or []) + sum(h["n"] or []) == h["count"], h
    log = (tmp_path / "prometheus.log").read_text()
    assert "statistics indicate" not in log, log[-3000:]


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
