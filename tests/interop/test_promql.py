"""Floe's Prometheus query API held to a real Prometheus: Debian's Prometheus 2.42
(scripts/setup-prometheus.sh) scrapes itself and node-exporter and remote-writes to Floe, then
the same PromQL — every function and operator Floe claims, over those real series, in the
manner of the PromQL compliance tester — is asked of both, instant and range, and the answers
compared within Prometheus's own tolerance (relative 1e-6, as its test scripts compare). The
calls Grafana's Prometheus data source makes (build info, query_range, labels, label values,
series, metadata) are answered in the same form. And the door is guarded like every other: a
principal holding nothing reads nothing, an unknown tenant is not found, and bad queries get
Prometheus's error form."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import ROOT_ID, ROOT_SECRET, stop_process
from test_prometheus import NODE_EXPORTER, PROMETHEUS, free_port, have_node_exporter, wait_until

# Each query is asked at a few instants and over a range; `T` is replaced by the instant of
# an `@` modifier. Every function and operator of the issue, over real series.
QUERIES = [
    "up",
    "node_load1",
    'node_cpu_seconds_total{mode="idle"}',
    'node_cpu_seconds_total{mode!="idle", cpu=~"0|1"}',
    'prometheus_http_requests_total{handler!~"/api.*"}',
    "node_load1 offset 20s",
    "node_load1 @ T",
    "rate(node_cpu_seconds_total[30s])",
    "irate(node_cpu_seconds_total[30s])",
    "increase(prometheus_http_requests_total[1m])",
    "delta(node_memory_MemFree_bytes[1m])",
    "idelta(node_memory_MemFree_bytes[1m])",
    "deriv(node_memory_MemFree_bytes[1m])",
    "predict_linear(node_memory_MemFree_bytes[1m], 60)",
    "resets(node_cpu_seconds_total[1m])",
    "changes(node_memory_MemFree_bytes[1m])",
    "avg_over_time(node_load1[1m])",
    "min_over_time(node_memory_MemFree_bytes[1m])",
    "max_over_time(node_memory_MemFree_bytes[1m])",
    "sum_over_time(up[1m])",
    "count_over_time(up[1m])",
    "last_over_time(node_load1[1m])",
    "quantile_over_time(0.9, node_memory_MemFree_bytes[1m])",
    "stddev_over_time(node_memory_MemFree_bytes[1m])",
    "stdvar_over_time(node_memory_MemFree_bytes[1m])",
    "present_over_time(up[1m])",
    "sum(rate(node_cpu_seconds_total[30s]))",
    "sum by (mode) (rate(node_cpu_seconds_total[30s]))",
    "avg without (cpu) (rate(node_cpu_seconds_total[30s]))",
    "max by (job) (up)",
    "min by (mode) (node_cpu_seconds_total)",
    "count by (job) (up)",
    "group by (job) (up)",
    "stddev by (mode) (rate(node_cpu_seconds_total[30s]))",
    "stdvar(node_load1)",
    "topk(3, rate(prometheus_http_requests_total[1m]))",
    "bottomk(2, node_cpu_seconds_total)",
    "quantile(0.5, rate(node_cpu_seconds_total[30s]))",
    "quantile by (mode) (0.9, rate(node_cpu_seconds_total[30s]))",
    'count_values("value", up)',
    "node_memory_MemFree_bytes / node_memory_MemTotal_bytes",
    "node_memory_MemFree_bytes / on(instance, job) node_memory_MemTotal_bytes",
    "rate(node_cpu_seconds_total[30s]) / ignoring(mode) group_left sum without (mode) (rate(node_cpu_seconds_total[30s]))",
    "sum without (mode) (rate(node_cpu_seconds_total[30s])) / ignoring(mode) group_right rate(node_cpu_seconds_total[30s])",
    "up == bool 1",
    "up > 0",
    "node_load1 >= 0",
    "node_memory_MemFree_bytes < node_memory_MemTotal_bytes",
    "up and on(job) node_load1",
    "up or node_load1",
    "up unless on(job) node_load1",
    "-node_load1",
    "node_load1 * 2 + 1",
    "2 ^ 3 % 5",
    "histogram_quantile(0.9, sum by (le) (rate(prometheus_http_request_duration_seconds_bucket[1m])))",
    "histogram_quantile(0.5, rate(prometheus_http_request_duration_seconds_bucket[1m]))",
    'label_replace(up, "host", "$1", "instance", "(.*):.*")',
    'label_join(up, "both", "-", "job", "instance")',
    "max_over_time(rate(node_cpu_seconds_total[30s])[1m:10s])",
    "avg_over_time(node_load1[1m:5s])",
    "rate(prometheus_http_requests_total[1m] offset 10s)",
    'absent(nonexistent_metric{job="x"})',
    "absent(up)",
    "absent_over_time(nonexistent_metric[1m])",
    "time()",
    "scalar(sum(up))",
    "vector(1)",
    "sort(node_cpu_seconds_total)",
    "sort_desc(rate(node_cpu_seconds_total[30s]))",
    "clamp(node_load1, 0, 0.5)",
    "clamp_min(node_load1, 0.1)",
    "clamp_max(node_load1, 0.1)",
    "abs(-node_load1)",
    "round(node_memory_MemFree_bytes / 1e6, 0.5)",
    "ceil(node_load1)",
    "floor(node_load1)",
    "sqrt(node_load1)",
    "exp(-node_load1)",
    "ln(node_memory_MemFree_bytes)",
    "log2(node_memory_MemFree_bytes)",
    "log10(node_memory_MemFree_bytes)",
    "sgn(node_load1 - 1)",
    "timestamp(up)",
    "hour(vector(1700000000))",
    "day_of_week()",
    "days_in_month(vector(1700000000))",
]


def run_reference(floe, tmp_path: Path):
    """Debian's Prometheus scraping itself and node-exporter every 2 s (no external labels,
    so that a series is the same on both), remote-writing everything to Floe."""
    node_port, port = free_port(), free_port()
    node = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 2s
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
        stdout=log, stderr=subprocess.STDOUT)
    return port, [server, node], log


@pytest.fixture
def reference(floe, tmp_path: Path):
    have_node_exporter(PROMETHEUS, "scripts/setup-prometheus.sh")
    port, processes, log = run_reference(floe, tmp_path)
    try:
        yield port
    finally:
        for p in processes:
            stop_process(p)
        log.close()


def ask(base: str, path: str, params: dict, headers=None, method="GET"):
    if method == "POST":
        r = requests.post(f"{base}{path}", data=params, headers=headers, timeout=60)
    else:
        r = requests.get(f"{base}{path}", params=params, headers=headers, timeout=60)
    return r


def result_of(base: str, path: str, params: dict, headers=None):
    """The `result` of a query, or None while the server is not up or has nothing."""
    try:
        answer = ask(base, path, params, headers).json()
    except (requests.ConnectionError, ValueError):
        return None
    return answer.get("data", {}).get("result") or None


def close(a: str, b: str) -> bool:
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if x == y:
        return True
    return abs(x - y) <= 1e-6 * max(abs(x), abs(y))


def same_result(want: dict, got: dict) -> str | None:
    """None when two `data` members agree (series matched by labels, values within 1e-6)."""
    if want["resultType"] != got["resultType"]:
        return f"resultType {got['resultType']} != {want['resultType']}"
    kind = want["resultType"]
    if kind in ("scalar", "string"):
        w, g = want["result"], got["result"]
        return None if w[0] == g[0] and close(w[1], g[1]) else f"{g} != {w}"
    key = lambda s: tuple(sorted(s["metric"].items()))
    wanted = {key(s): s for s in want["result"]}
    gotten = {key(s): s for s in got["result"]}
    if wanted.keys() != gotten.keys():
        return f"series differ: only Prometheus {sorted(wanted.keys() - gotten.keys())[:3]}, only Floe {sorted(gotten.keys() - wanted.keys())[:3]}"
    for k, w in wanted.items():
        g = gotten[k]
        wv = [w["value"]] if kind == "vector" else w["values"]
        gv = [g["value"]] if kind == "vector" else g["values"]
        if len(wv) != len(gv):
            return f"{k}: {len(gv)} points != {len(wv)}"
        for (wt, wx), (gt, gx) in zip(wv, gv):
            if wt != gt or not close(wx, gx):
                return f"{k}: ({gt}, {gx}) != ({wt}, {wx})"
    return None


def test_promql_answers_as_prometheus_does(floe, reference, tmp_path):
    prom = f"http://127.0.0.1:{reference}"
    auth = {"Authorization": f"Bearer {floe.token()}"}
    api = f"{floe.base}/prometheus/{floe.warehouse}"
    # Enough history that no one-minute window of the instants below holds a series' first
    # sample (where 2.42 extrapolates a counter's start differently from 3.x, which Floe
    # follows), and the remote-write queue (which sends at most every 5 s) well behind us.
    wait_until("Prometheus has 140 s of samples",
               lambda: result_of(prom, "/api/v1/query", {"query": "count_over_time(up[140s]) >= 68"}), 240)
    # Instants with an odd millisecond, so that no scrape falls exactly on a window's edge
    # (Prometheus 2.42 closes a range on the left, 3.x opens it; Floe follows 3.x).
    end = time.time() - 20
    instants = [round(end - d, 3) + 0.0137 for d in (0, 17.5, 41)]
    wait_until("Floe has what Prometheus had at the last instant",
               lambda: result_of(api, "/api/v1/query", {"query": "count(up)", "time": instants[0]}, auth), 60)
    failures = []
    for q in QUERIES:
        for t in instants:
            text = q.replace("@ T", f"@ {instants[-1]}")
            want = ask(prom, "/api/v1/query", {"query": text, "time": t}).json()
            got = ask(api, "/api/v1/query", {"query": text, "time": t}, auth).json()
            assert want["status"] == "success", (text, want)
            if got.get("status") != "success":
                failures.append((text, "instant", got))
                continue
            if (why := same_result(want["data"], got["data"])) is not None:
                failures.append((text, f"instant at {t}", why))
        text = q.replace("@ T", f"@ {instants[-1]}")
        params = {"query": text, "start": instants[-1], "end": instants[0], "step": "5"}
        want = ask(prom, "/api/v1/query_range", params).json()
        got = ask(api, "/api/v1/query_range", params, auth, method="POST").json()
        if got.get("status") != "success":
            failures.append((text, "range", got))
        elif (why := same_result(want["data"], got["data"])) is not None:
            failures.append((text, "range", why))
    assert not failures, "\n".join(f"{q} [{how}]: {why}" for q, how, why in failures)


def test_grafana_calls_answered_as_prometheus_does(floe, reference):
    prom = f"http://127.0.0.1:{reference}"
    auth = {"Authorization": f"Bearer {floe.token()}"}
    api = f"{floe.base}/prometheus/{floe.warehouse}"
    wait_until("Prometheus has 45 s of samples",
               lambda: result_of(prom, "/api/v1/query", {"query": "count_over_time(up[45s]) >= 22"}), 120)
    end = time.time() - 15
    start = end - 10
    wait_until("Floe has the samples",
               lambda: result_of(api, "/api/v1/query", {"query": "count(up)", "time": end}, auth), 60)
    info = ask(api, "/api/v1/status/buildinfo", {}, auth).json()
    assert info["status"] == "success" and info["data"]["version"].startswith("3."), info
    # query_range as Grafana posts it: a form body, seconds for times and step.
    body = {"query": 'sum by (mode) (rate(node_cpu_seconds_total{job="node"}[30s]))',
            "start": int(start), "end": int(end), "step": 2}
    want = ask(prom, "/api/v1/query_range", body, method="POST").json()
    got = ask(api, "/api/v1/query_range", body, auth, method="POST").json()
    assert same_result(want["data"], got["data"]) is None, (want, got)
    # Label names and values, and series, for the query editor's browser.
    for path, params in [
        ("/api/v1/labels", {"start": start, "end": end}),
        ("/api/v1/label/__name__/values", {"start": start, "end": end}),
        ("/api/v1/label/job/values", {"start": start, "end": end}),
        ("/api/v1/label/mode/values", {"match[]": "node_cpu_seconds_total", "start": start, "end": end}),
        ("/api/v1/series", {"match[]": 'up{job="node"}', "start": start, "end": end}),
    ]:
        w = ask(prom, path, params).json()
        g = ask(api, path, params, auth).json()
        assert g["status"] == "success", (path, g)
        if path == "/api/v1/label/__name__/values":
            # Prometheus lists its own series' names; Floe's are the same ones.
            assert set(w["data"]) <= set(g["data"]), (path, set(w["data"]) - set(g["data"]))
        else:
            assert g["data"] == w["data"], (path, g["data"], w["data"])
    # Where Prometheus's answer is deterministic, Floe's is the same bytes: member order,
    # timestamps, value strings, label maps.
    for path, params in [
        ("/api/v1/query", {"query": "up", "time": round(end, 3)}),
        ("/api/v1/query", {"query": "count(up)", "time": round(end, 3)}),
        ("/api/v1/query", {"query": "1.5", "time": round(end, 3)}),
        ("/api/v1/query_range", {"query": 'up{job="node"}', "start": round(start, 3), "end": round(end, 3), "step": 2}),
        ("/api/v1/label/job/values", {"start": start, "end": end}),
        ("/api/v1/series", {"match[]": "up", "start": start, "end": end}),
    ]:
        w = ask(prom, path, params)
        g = ask(api, path, params, auth)
        assert (g.status_code, g.text) == (w.status_code, w.text), (path, params)
    # A query that does not parse: the same form and words, without Prometheus's position.
    w = ask(prom, "/api/v1/query", {"query": "sum(", "time": end}).json()
    g = ask(api, "/api/v1/query", {"query": "sum(", "time": end}, auth).json()
    assert g["errorType"] == w["errorType"] == "bad_data", g
    assert g["error"].startswith('invalid parameter "query": ') and "parse error: " in g["error"], g
    # Metadata: every metric Prometheus describes is described, counters as counters.
    w = ask(prom, "/api/v1/metadata", {}).json()["data"]
    # Remote write 1.0 sends metadata once a minute, apart from the samples.
    g = wait_until("metadata sent",
                   lambda: (d := ask(api, "/api/v1/metadata", {}, auth).json()["data"]) and d.get("node_load1", [{}])[0].get("help") and d, 90)
    assert g["node_cpu_seconds_total"][0]["type"] == "counter", g["node_cpu_seconds_total"]
    assert g["node_load1"][0]["type"] == "gauge"
    assert g["node_load1"][0]["help"] == w["node_load1"][0]["help"]


def test_prometheus_errors_and_guards(floe):
    auth = {"Authorization": f"Bearer {floe.token()}"}
    api = f"{floe.base}/prometheus/{floe.warehouse}"
    r = ask(api, "/api/v1/query", {"query": "sum("}, auth)
    assert r.status_code == 400 and r.json()["errorType"] == "bad_data", r.text
    r = ask(api, "/api/v1/query_range", {"query": "up", "start": 10, "end": 0, "step": 1}, auth)
    assert r.status_code == 400 and "end timestamp" in r.json()["error"], r.text
    r = ask(api, "/api/v1/query_range", {"query": "up", "start": 0, "end": 100000, "step": 1}, auth)
    assert r.status_code == 400 and "11,000 points" in r.json()["error"], r.text
    r = ask(api, "/api/v1/query_range", {"query": "up[5m]", "start": 0, "end": 10, "step": 1}, auth)
    assert r.status_code == 400 and "range vector" in r.json()["error"], r.text
    r = ask(api, "/api/v1/query", {"query": "up", "time": "yesterday"}, auth)
    assert r.status_code == 400 and "timestamp" in r.json()["error"], r.text
    r = ask(api, "/api/v1/series", {}, auth)
    assert r.status_code == 400 and r.json()["error"] == "no match[] parameter provided", r.text
    # An execution error in Prometheus's form and status.
    r = ask(api, "/api/v1/query", {"query": 'label_replace(vector(1), "a-b", "x", "", "")'}, auth)
    assert r.status_code == 422 and r.json()["errorType"] == "execution", r.text
    # What a query can make the evaluator do is bounded: a subquery of a millisecond step
    # over ten years is refused before its steps are made (and one within the step limit is
    # stopped by the sample limit as its points are made), and the server answers the next.
    began = time.time()
    r = ask(api, "/api/v1/query", {"query": "max_over_time(vector(1)[3650d:1ms])"}, auth)
    assert r.status_code == 400 and "subquery of" in r.json()["error"], r.text
    assert time.time() - began < 30
    r = ask(api, "/api/v1/query", {"query": "sum(rate(nothing[5m:1ms]))"}, auth)
    assert r.status_code in (200, 422, 503), r.text
    # A query nested thousands deep (the evaluator and the parser's tree recurse per level)
    # is refused before parsing, and times and offsets past the span the evaluator's
    # arithmetic is safe in are refused or clamped — never a crash.
    deep = "(" * 5000 + "1" + ")" * 5000
    r = ask(api, "/api/v1/query", {"query": deep}, auth)
    assert r.status_code == 400 and "nested" in r.json()["error"], r.text
    for text in ["up offset 100000000y", "up @ 1e18", "rate(up[100000000y])", "up offset -100000000y",
                 "max_over_time(up[1000000y:1000000y])", "vector(1) @ -1e15"]:
        r = ask(api, "/api/v1/query", {"query": text}, auth)
        assert r.status_code in (200, 400, 422), (text, r.text)
    r = ask(api, "/api/v1/query", {"query": "1", "time": "1e300"}, auth)
    assert r.status_code == 400, r.text
    r = ask(api, "/api/v1/query_range", {"query": "1", "start": "-9e15", "end": "9e15", "step": "1e15"}, auth)
    assert r.status_code == 400, r.text
    assert ask(api, "/api/v1/query", {"query": "1"}, auth).status_code == 200
    # No data yet: an empty answer, not an error.
    r = ask(api, "/api/v1/query", {"query": "up"}, auth)
    assert r.json() == {"status": "success", "data": {"resultType": "vector", "result": []}}, r.text
    r = ask(api, "/api/v1/query", {"query": "1 + 1", "time": 100}, auth)
    assert r.json()["data"] == {"resultType": "scalar", "result": [100, "2"]}, r.text
    r = ask(api, "/api/v1/query", {"query": "vector(0) / 0", "time": "1.5"}, auth)
    assert r.json()["data"]["result"] == [{"metric": {}, "value": [1.5, "NaN"]}], r.text
    # Tenants by header, and unknown tenants.
    r = ask(f"{floe.base}/prometheus", "/api/v1/query", {"query": "1"}, {**auth, "X-Scope-OrgID": floe.warehouse})
    assert r.status_code == 200, r.text
    r = ask(f"{floe.base}/prometheus", "/api/v1/query", {"query": "1"}, {**auth, "X-Scope-OrgID": "nobody"})
    assert r.status_code == 404 and r.json()["errorType"] == "not_found", r.text
    # No credentials, bad credentials.
    r = ask(api, "/api/v1/query", {"query": "up"})
    assert r.status_code == 401 and r.json()["status"] == "error", r.text
    r = ask(api, "/api/v1/query", {"query": "up"}, {"Authorization": "Bearer nonsense"})
    assert r.status_code == 401, r.text


def test_otlp_metrics_are_series_too(floe):
    """What OpenTelemetry sends is queryable as Prometheus series: the service is `job`, a
    gauge and a sum are floats, an explicit-bounds histogram and an exponential one are native
    histograms (`histogram_quantile` reads both); a principal that may not read the table
    reads nothing of it."""
    import json

    from test_governance import make_principal

    t0 = 1_700_000_000
    points = lambda make: [make(t0 + 10 * i, i) for i in range(7)]
    attrs = [{"key": "route", "value": {"stringValue": "/pay"}}]
    body = {"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeMetrics": [{"metrics": [
            {"name": "queue_depth", "gauge": {"dataPoints": points(
                lambda t, i: {"timeUnixNano": f"{t}000000000", "asDouble": 1.5 * i, "attributes": attrs})}},
            {"name": "requests_total", "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": points(
                lambda t, i: {"timeUnixNano": f"{t}000000000", "asInt": str(30 * i), "attributes": attrs})}},
            {"name": "latency", "histogram": {"aggregationTemporality": 2, "dataPoints": points(
                lambda t, i: {"timeUnixNano": f"{t}000000000", "count": str(10 * i), "sum": 3.0 * i,
                              "bucketCounts": [str(2 * i), str(6 * i), str(2 * i)], "explicitBounds": [0.1, 0.5],
                              "attributes": attrs})}},
            {"name": "size", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": points(
                lambda t, i: {"timeUnixNano": f"{t}000000000", "count": str(4 * i), "sum": 10.0 * i, "scale": 0,
                              "zeroCount": "0", "positive": {"offset": 0, "bucketCounts": [str(i), str(2 * i), str(i)]},
                              "attributes": attrs})}},
        ]}],
    }]}
    answer = requests.post(f"{floe.base}/otlp/{floe.warehouse}/v1/metrics", data=json.dumps(body),
                           headers={"Content-Type": "application/json", "Authorization": f"Bearer {floe.token()}"},
                           timeout=30)
    assert answer.status_code == 200, answer.text
    auth = {"Authorization": f"Bearer {floe.token()}"}
    api = f"{floe.base}/prometheus/{floe.warehouse}"
    at = t0 + 60

    def one(query: str):
        r = ask(api, "/api/v1/query", {"query": query, "time": at}, auth).json()
        assert r["status"] == "success", (query, r)
        return r["data"]["result"]

    assert one("queue_depth") == [{"metric": {"__name__": "queue_depth", "job": "api", "route": "/pay"},
                                   "value": [at, "9"]}]
    # 30 a step of 10 s: 3 per second.
    assert one("rate(requests_total[1m])") == [{"metric": {"job": "api", "route": "/pay"}, "value": [at, "3"]}]
    # The explicit-bounds histogram: 20 % up to 0.1, 60 % in (0.1, 0.5]: the median is 0.3.
    assert float(one("histogram_quantile(0.5, latency)")[0]["value"][1]) == pytest.approx(0.3)
    assert float(one("histogram_count(rate(latency[1m]))")[0]["value"][1]) == pytest.approx(1.0)
    # The exponential one (scale 0, offset 0): OTLP's buckets (1, 2], (2, 4], (4, 8] of 1:2:1;
    # the median is halfway through (2, 4] by Prometheus's exponential interpolation: 2^1.5.
    assert float(one("histogram_quantile(0.5, size)")[0]["value"][1]) == pytest.approx(2 ** 1.5, rel=1e-6)
    histogram = one("size")[0]
    assert histogram["histogram"][1]["count"] == "24", histogram
    # The tenant's sample limit: a query loading more is refused in Prometheus's words,
    # naming the limit (counted as the rows arrive, before they are all held).
    limits = floe.api("PUT", f"/api/v1/tenants/{floe.warehouse}/limits", json={"max-query-samples": 5})
    assert limits.status_code in (200, 204), limits.text
    r = ask(api, "/api/v1/query", {"query": "count_over_time(queue_depth[5m])", "time": at}, auth)
    assert r.status_code == 422 and "max-query-samples: 5" in r.json()["error"], r.text
    assert r.json()["error"].startswith("query processing would load too many samples"), r.text
    assert floe.api("PUT", f"/api/v1/tenants/{floe.warehouse}/limits", json={}).status_code in (200, 204)
    assert one("count_over_time(queue_depth[5m])")[0]["value"][1] == "7"
    # A principal that sees the tenant (it may create namespaces in it) but may not read the
    # table: refused, in Prometheus's error form, by every endpoint that reads series.
    on_warehouse = {"type": "warehouse", "warehouse": floe.warehouse}
    client_id, secret = make_principal(floe, "namespace-maker", [("create-namespace", on_warehouse)])
    outsider = {"Authorization": f"Bearer {floe.token(client_id, secret)}"}
    r = ask(api, "/api/v1/query", {"query": "queue_depth", "time": at}, outsider)
    assert r.status_code == 403 and r.json()["errorType"] == "forbidden", r.text
    for path, params in [("/api/v1/series", {"match[]": "queue_depth"}), ("/api/v1/labels", {}),
                         ("/api/v1/label/route/values", {}), ("/api/v1/metadata", {})]:
        r = ask(api, path, params, outsider)
        assert r.status_code == 403, (path, r.text)
    # And a principal holding nothing cannot tell the tenant exists.
    nobody_id, nobody_secret = make_principal(floe, "nobody-at-all", [])
    nobody = {"Authorization": f"Bearer {floe.token(nobody_id, nobody_secret)}"}
    r = ask(api, "/api/v1/query", {"query": "queue_depth", "time": at}, nobody)
    assert r.status_code == 404 and r.json()["errorType"] == "not_found", r.text


def test_prometheus_test_scripts_through_the_http_api(floe, tmp_path):
    """Prometheus's own test scripts end to end: each group's series remote-written to a
    warehouse of its own, each statement asked of the HTTP API (`floe bench promql-tests`).
    Statements that can read a native histogram are left to the in-memory run
    (crates/promql/tests/promqltest.rs); every other one must pass."""
    testdata = os.environ.get("FLOE_PROMQL_TESTDATA")
    if not testdata:
        if os.environ.get("CI"):
            pytest.fail("CI runs scripts/setup-promql-tests.sh, which provides FLOE_PROMQL_TESTDATA")
        pytest.skip("FLOE_PROMQL_TESTDATA is not set (scripts/setup-promql-tests.sh)")
    warehouses = tmp_path / "warehouses"
    warehouses.mkdir()
    run = subprocess.run(
        [os.environ["FLOE_BIN"], "bench", "promql-tests", "--server", floe.base,
         "--client-id", ROOT_ID, "--client-secret", ROOT_SECRET,
         "--dir", testdata, "--warehouse-dir", str(warehouses), "--verbose"],
        capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    import json
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0, run.stdout
    assert summary["passed"] >= 700, run.stdout


def test_hostile_queries_and_rows_do_not_hurt_the_server(floe):
    """What a principal who may read (or write) a tenant's metrics can send: a chain of a
    thousand operators (a tree as deep, with no bracket to count), a subquery of a
    millisecond step over months, regular expressions too large to compile, and histogram
    rows whose scale or offset no histogram has. Each is refused or answered, quickly, in
    Prometheus's form, and the server answers the next query."""
    import json

    auth = {"Authorization": f"Bearer {floe.token()}"}
    api = f"{floe.base}/prometheus/{floe.warehouse}"
    t0 = 1_700_000_000
    attrs = [{"key": "case", "value": {"stringValue": "x"}}]
    body = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "temp", "gauge": {"dataPoints": [
            {"timeUnixNano": f"{t0 + 15 * i}000000000", "asDouble": float(i), "attributes": attrs} for i in range(40)]}},
        {"name": "poison", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": [
            {"timeUnixNano": f"{t0}000000000", "count": "2", "sum": 1.0, "scale": -100,
             "positive": {"offset": 0, "bucketCounts": ["2"]},
             "attributes": [{"key": "case", "value": {"stringValue": "scale"}}]},
            {"timeUnixNano": f"{t0}000000000", "count": "2", "sum": 1.0, "scale": 0,
             "positive": {"offset": 2147483647, "bucketCounts": ["1", "1"]},
             "attributes": [{"key": "case", "value": {"stringValue": "offset"}}]},
            {"timeUnixNano": f"{t0}000000000", "count": "4", "sum": 6.0, "scale": 20,
             "positive": {"offset": 1048576, "bucketCounts": ["4"]},
             "attributes": [{"key": "case", "value": {"stringValue": "fine"}}]},
        ]}},
    ]}]}]}
    answer = requests.post(f"{floe.base}/otlp/{floe.warehouse}/v1/metrics", data=json.dumps(body),
                           headers={"Content-Type": "application/json", "Authorization": f"Bearer {floe.token()}"},
                           timeout=30)
    assert answer.status_code == 200, answer.text
    at = t0 + 600
    began = time.time()
    chain = "+".join(["temp"] * 1000)
    r = ask(api, "/api/v1/query", {"query": chain, "time": at}, auth, method="POST")
    assert r.status_code == 400 and r.json()["errorType"] == "bad_data", r.text
    r = ask(api, "/api/v1/query", {"query": "-" * 5000 + "temp", "time": at}, auth, method="POST")
    assert r.status_code == 400, r.text
    r = ask(api, "/api/v1/query", {"query": "max_over_time(temp[150d:1ms])", "time": at}, auth)
    assert r.status_code == 400 and "subquery of" in r.json()["error"], r.text
    r = ask(api, "/api/v1/query", {"query": 'temp{case=~"\\\\p{L}{100000}"}', "time": at}, auth)
    assert r.status_code == 400, r.text
    assert time.time() - began < 60
    # Rows no Prometheus histogram has are no samples; a fine OTLP scale (SDKs default to
    # 20) is brought to 8: OTLP's bucket 2^20 at scale 20 starts at 2, Prometheus's bucket
    # 257 at schema 8 is (2, 2^(257/256)].
    just_after = t0 + 60
    for case in ("scale", "offset"):
        r = ask(api, "/api/v1/query", {"query": f'poison{{case="{case}"}}', "time": just_after}, auth)
        assert r.status_code == 200 and r.json()["data"]["result"] == [], r.text
    r = ask(api, "/api/v1/query", {"query": 'poison{case="fine"}', "time": just_after}, auth)
    fine = r.json()["data"]["result"][0]["histogram"][1]
    assert fine["count"] == "4" and fine["buckets"][0][1] == "2", fine
    r = ask(api, "/api/v1/query", {"query": 'sum(poison)', "time": just_after}, auth)
    assert r.status_code == 200, r.text
    r = ask(api, "/api/v1/query", {"query": "temp", "time": at}, auth)
    assert r.status_code == 200 and r.json()["data"]["result"], r.text
