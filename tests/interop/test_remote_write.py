"""Prometheus remote write into Iceberg, sent by a client built on Prometheus's own `prompb`
packages (tests/remote_write, built by scripts/setup-remote-write.sh): every sample lands in
the tenant's otel.metrics, typed by the request's metadata, and SQL reads it back — in 1.0
and in 2.0 (symbols, metadata on each series, native histograms, exemplars, the written
counts in the answer's headers); bad requests get the status Prometheus acts on."""

from __future__ import annotations

import os
import struct
import subprocess
import time

import pytest
import requests

CLIENT = os.environ.get("FLOE_RW_CLIENT")


def rows(floe, statement: str):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def send(floe, start: int, *version: str) -> str:
    """What the client printed, having sent its request of `version` (1.0 by default)."""
    if not CLIENT:
        if os.environ.get("CI"):
            pytest.fail("FLOE_RW_CLIENT must be set in CI (scripts/setup-remote-write.sh)")
        pytest.skip("no remote-write client (FLOE_RW_CLIENT)")
    url = f"{floe.base}/prometheus/{floe.warehouse}/api/v1/write"
    sent = subprocess.run(
        [CLIENT, url, str(start), *version], env={**os.environ, "FLOE_TOKEN": floe.token()},
        capture_output=True, text=True, timeout=60,
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert sent.stdout.startswith("204"), sent.stdout
    return sent.stdout


def test_a_prometheus_client_writes_series_sql_reads_back(floe):
    start = 1_700_000_000_000
    answer = send(floe, start)
    assert "written" not in answer  # 1.0 answers carry no counts

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


def test_remote_write_2_0_with_native_histograms_and_exemplars(floe):
    start = 1_700_000_000_000
    answer = send(floe, start, "v2")
    # Ten counter samples and a gauge's; two native histograms; two exemplars.
    assert "Samples-written 11" in answer and "Histograms-written 2" in answer, answer
    assert "Exemplars-written 2" in answer, answer

    statement = (
        "SELECT attributes['code'] AS code, count(*) AS n, sum(value) AS total, "
        "min(start_time) AS started, min(metric_type) AS kind, min(description) AS help "
        "FROM otel.metrics WHERE metric_name = 'http_requests_total' GROUP BY 1 ORDER BY 1"
    )
    deadline = time.time() + 30
    while not rows(floe, statement) and time.time() < deadline:
        time.sleep(0.3)
    counter = {"n": 5, "total": 15.0, "started": "2023-11-14T22:12:20Z", "kind": "sum",
               "help": "requests served"}
    assert rows(floe, statement) == [{"code": "200", **counter}, {"code": "500", **counter}]
    gauge = rows(floe, "SELECT metric_type, value, unit FROM otel.metrics WHERE metric_name = 'temperature'")
    assert gauge == [{"metric_type": "gauge", "value": 21.5, "unit": "celsius"}]

    exponential = rows(floe, (
        "SELECT metric_type, unit, count, sum, scale, zero_count, positive_offset, "
        "positive_bucket_counts, negative_offset, negative_bucket_counts, aggregation_temporality AS t "
        "FROM otel.metrics WHERE metric_name = 'latency_seconds'"))
    # Prometheus's buckets 1 and 2, (1,2] and (2,4], are OTLP's 0 and 1.
    assert exponential == [{
        "metric_type": "exponential_histogram", "unit": "seconds", "count": 7, "sum": 10.5,
        "scale": 0, "zero_count": 1, "positive_offset": 0, "positive_bucket_counts": [2, 3],
        "negative_offset": -1, "negative_bucket_counts": [1], "t": "CUMULATIVE",
    }]
    custom = rows(floe, (
        "SELECT metric_type, count, explicit_bounds, bucket_counts "
        "FROM otel.metrics WHERE metric_name = 'duration_seconds'"))
    assert custom == [{"metric_type": "histogram", "count": 4, "explicit_bounds": [0.1, 1.0],
                       "bucket_counts": [1, 2, 1]}]

    exemplars = rows(floe, (
        "SELECT metric_name, attributes['code'] AS code, value, trace_id, "
        "exemplar_attributes['user'] AS user_label, time FROM otel.exemplars ORDER BY code"))
    assert exemplars == [
        {"metric_name": "http_requests_total", "code": code, "value": 0.25,
         "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "user_label": code,
         "time": "2023-11-14T22:13:20Z"}
        for code in ("200", "500")
    ]


def test_bad_remote_write_requests_get_the_status_prometheus_acts_on(floe):
    url = f"{floe.base}/prometheus/{floe.warehouse}/api/v1/write"
    headers = {"Authorization": f"Bearer {floe.token()}", "Content-Encoding": "snappy",
               "Content-Type": "application/x-protobuf"}
    # Not snappy: 400, which Prometheus drops rather than sending again.
    answer = requests.post(url, data=b"garbage", headers=headers, timeout=30)
    assert answer.status_code == 400 and "snappy" in answer.text, answer.text
    # A message neither version names: 415, which tells a 2.0 sender to fall back to 1.0.
    v3 = {**headers, "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v3.Request"}
    answer = requests.post(url, data=b"", headers=v3, timeout=30)
    assert answer.status_code == 415 and "io.prometheus.write.v2.Request" in answer.text, answer.text
    # 2.0 with a label reference past its symbols: that series alone refused (a dead letter),
    # the answer a 400 counting what was written, as 2.0 answers a partial write.
    # Request{symbols: [""], timeseries: [{labels_refs: [1, 2]}]}
    v2 = {**headers, "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}
    bad = snappy_block(bytes([0x22, 0x00, 0x2A, 0x04, 0x0A, 0x02, 0x01, 0x02]))
    answer = requests.post(url, data=bad, headers=v2, timeout=30)
    assert answer.status_code == 400 and "symbol reference 1" in answer.text, answer.text
    assert answer.headers["X-Prometheus-Remote-Write-Samples-Written"] == "0"
    # A Content-Encoding other than snappy: 415.
    answer = requests.post(url, data=bad, headers={**v2, "Content-Encoding": "gzip"}, timeout=30)
    assert answer.status_code == 415, answer.text
    # Unknown tenant: 404.
    other = f"{floe.base}/prometheus/nowhere/api/v1/write"
    answer = requests.post(other, data=b"\x00", headers=headers, timeout=30)
    assert answer.status_code == 404, answer.text
    # No credentials: 401.
    assert requests.post(url, data=b"", headers={"Content-Encoding": "snappy"}, timeout=30).status_code == 401


def test_forged_remote_write_2_0_requests_are_refused_and_the_server_stays_up(floe):
    """What 2.0's indirections let a small body ask for: a 100 KB symbol named 4,000 times as a
    label (400 MB of attributes from 108 KB), and a native histogram whose spans cover 2^31
    buckets in a few bytes. The first is refused whole (413), the second alone (a dead letter,
    and a 400 saying so);
    the server answers after both and what was written before is untouched."""
    url = f"{floe.base}/prometheus/{floe.warehouse}/api/v1/write"
    headers = {"Authorization": f"Bearer {floe.token()}", "Content-Encoding": "snappy",
               "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request",
               "X-Prometheus-Remote-Write-Version": "2.0.0"}
    symbols = ["", "__name__", "up", "x" * 100_000, "job", "victim"]

    def request(series: bytes) -> bytes:
        return b"".join(field(4, s.encode()) for s in symbols) + field(5, series)

    # Sample{value: 1.0, timestamp}.
    sample = field(2, b"\x09" + struct.pack("<d", 1.0) + b"\x10" + varint(1_700_000_000_000))
    good = request(field(1, packed([1, 2, 4, 5])) + sample)
    answer = requests.post(url, data=snappy_block(good), headers=headers, timeout=30)
    assert answer.status_code == 204, answer.text
    assert answer.headers["X-Prometheus-Remote-Write-Samples-Written"] == "1"

    named_often = request(field(1, packed([1, 2] + [3, 3] * 4_000)) + sample)
    answer = requests.post(url, data=snappy_block(named_often), headers=headers, timeout=30)
    assert answer.status_code == 413 and "budget" in answer.text, answer.text

    # A histogram: schema 0, a first span at offset 0 of one bucket, a second after a gap of
    # 2^31 - 2 (zigzag), one bucket; two deltas.
    spans = field(11, b"\x10\x01") + field(11, b"\x08" + varint(2**32 - 4) + b"\x10\x01")
    deltas = field(12, packed([4, 0]))  # 2, 0 zigzagged
    wide = field(3, b"\x08\x02" + spans + deltas + b"\x78" + varint(1_700_000_000_000))
    answer = requests.post(url, data=snappy_block(request(field(1, packed([1, 2, 4, 5])) + wide)),
                           headers=headers, timeout=30)
    assert answer.status_code == 400 and "buckets" in answer.text, answer.text
    assert answer.headers["X-Prometheus-Remote-Write-Histograms-Written"] == "0"

    assert requests.get(f"{floe.base}/health", timeout=10).status_code == 200
    deadline = time.time() + 30
    statement = "SELECT count(*) AS n FROM otel.metrics WHERE metric_name = 'up'"
    while rows(floe, statement) != [{"n": 1}] and time.time() < deadline:
        time.sleep(0.3)
    assert rows(floe, statement) == [{"n": 1}]
    letters = rows(floe, "SELECT door, reason FROM otel.metrics__dead_letters")
    assert len(letters) == 1 and "buckets" in letters[0]["reason"] and letters[0]["door"] == "remote-write", letters


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def packed(numbers: list[int]) -> bytes:
    return b"".join(varint(n) for n in numbers)


def snappy_block(raw: bytes) -> bytes:
    """`raw` in snappy's block format, uncompressed: its length, then literals of up to 64 KiB."""
    out = bytearray(varint(len(raw)))
    for at in range(0, len(raw), 65_536):
        chunk = raw[at:at + 65_536]
        if len(chunk) <= 60:
            out.append((len(chunk) - 1) << 2)
        else:
            out.append(61 << 2)
            out += (len(chunk) - 1).to_bytes(2, "little")
        out += chunk
    return bytes(out)
