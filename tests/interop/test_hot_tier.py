"""The hot tier: data files a node's ingestion commits are kept on its local disk while they
are inside their tenant's window, so a dashboard over recent data reads no object storage —
even after a restart — while MinIO stays the system of record. A tenant over its hot share
evicts its own files, never its neighbours'.

MinIO's requests are counted by a small proxy in front of it that Floe's warehouse points at
(the proxy forwards every request unchanged, so MinIO checks the same signatures); the test
asserts no GET or HEAD of a data file passed through it."""

from __future__ import annotations

import http.client
import http.server
import json
import re
import threading
import time
import uuid

import pytest
import requests
from conftest import S3_ACCESS_KEY, S3_BUCKET, S3_ENDPOINT, S3_SECRET_KEY, restart_floe, start_floe, stop_floe


class CountingProxy:
    """HTTP/1.1 proxy to MinIO recording each request's method and path."""

    def __init__(self, upstream: str):
        host, port = upstream.removeprefix("http://").split(":")
        seen: list[tuple[str, str]] = []
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                with lock:
                    seen.append((self.command, self.path))
                upstream = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {k: v for k, v in self.headers.items()}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                if self.command == "HEAD":
                    self.send_header("content-length", answer.getheader("content-length") or "0")
                else:
                    self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.seen = seen
        self.lock = lock
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self) -> list[tuple[str, str]]:
        with self.lock:
            taken = list(self.seen)
            self.seen.clear()
        return taken

    def close(self):
        self.server.shutdown()


def otlp_logs(service: str, count: int) -> bytes:
    """`count` log records of `service`, stamped now."""
    now = time.time_ns()
    records = [
        {
            "timeUnixNano": str(now - i * 1_000_000),
            "severityText": "INFO",
            "body": {"stringValue": f"{service} request {i} served"},
        }
        for i in range(count)
    ]
    return json.dumps(
        {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                           "scopeLogs": [{"logRecords": records}]}]}
    ).encode()


def post_logs(floe, warehouse: str, body: bytes) -> None:
    answer = requests.post(
        f"{floe.base}/otlp/{warehouse}/v1/logs", data=body, timeout=30,
        headers={"content-type": "application/json", "authorization": f"Bearer {floe.token()}"},
    )
    assert answer.status_code == 200, answer.text


def metric(floe, name: str, **labels) -> float:
    """One series of /metrics as root (tenant-named series are for privileged scrapers)."""
    text = floe.api("GET", "/metrics").text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def eventually(check, timeout: float = 30.0):
    deadline = time.time() + timeout
    while True:
        got = check()
        if got or time.time() > deadline:
            return got
        time.sleep(0.2)


def sql(floe, warehouse: str, statement: str):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": warehouse})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


DATA_FILE = re.compile(r"/data/.*\.parquet")


def test_a_query_over_the_last_hour_after_a_restart_reads_no_data_file_from_object_storage(tmp_path):
    if not S3_ENDPOINT:
        pytest.skip("no S3-compatible server (FLOE_TEST_S3_ENDPOINT)")
    proxy = CountingProxy(S3_ENDPOINT)
    floe = start_floe(tmp_path)
    try:
        warehouse = "hot"
        answer = floe.api("POST", "/api/v1/warehouses", json={"name": warehouse, "storage": {
            "type": "s3", "bucket": S3_BUCKET, "key-prefix": f"tests/{uuid.uuid4().hex}",
            "endpoint": proxy.endpoint, "path-style-access": True, "region": "us-east-1",
            "access-key-id": S3_ACCESS_KEY, "secret-access-key": S3_SECRET_KEY}})
        assert answer.status_code == 201, answer.text
        for batch in range(3):
            post_logs(floe, warehouse, otlp_logs(f"checkout-{batch}", 200))
            # Each its own commit: wait for its file to be hot.
            assert eventually(lambda: metric(floe, "floe_cache_hot_files", tenant=warehouse) >= batch + 1), \
                "the committed file entered the hot tier"
        written = [p for m, p in proxy.take() if m == "PUT" and DATA_FILE.search(p)]
        assert len(written) >= 3, "the data files went to object storage, the system of record"

        restart_floe(floe, tmp_path)
        assert metric(floe, "floe_cache_hot_files", tenant=warehouse) >= 3, "the hot tier survived the restart"
        proxy.take()
        statement = ("SELECT count(*) AS n, count(DISTINCT service_name) AS services FROM otel.logs "
                     "WHERE time > now() - INTERVAL '1 hour'")
        assert sql(floe, warehouse, statement) == [{"n": 600, "services": 3}]
        asked = proxy.take()
        data_reads = [(m, p) for m, p in asked if m in ("GET", "HEAD") and DATA_FILE.search(p)]
        assert data_reads == [], f"data files read from object storage after the restart: {data_reads}"
        assert metric(floe, "floe_cache_tenant_hits_total", tenant=warehouse, tier="hot") > 0
        assert metric(floe, "floe_cache_tenant_misses_total", tenant=warehouse) == 0
    finally:
        stop_floe(floe)
        proxy.close()


def test_a_tenant_over_its_hot_share_evicts_its_own_files_first(floe):
    for name in ("noisy", "quiet"):
        path = floe.data_dir / f"wh-{name}"
        path.mkdir(parents=True, exist_ok=True)
        answer = floe.api("POST", "/api/v1/warehouses", json={"name": name, "storage": {"type": "local", "path": str(path)}})
        assert answer.status_code == 201, answer.text

    post_logs(floe, "quiet", otlp_logs("quiet", 100))
    assert eventually(lambda: metric(floe, "floe_cache_hot_files", tenant="quiet") == 1)
    quiet_bytes = metric(floe, "floe_cache_hot_bytes", tenant="quiet")

    post_logs(floe, "noisy", otlp_logs("noisy-0", 100))
    assert eventually(lambda: metric(floe, "floe_cache_hot_files", tenant="noisy") == 1)
    one_file = metric(floe, "floe_cache_hot_bytes", tenant="noisy")
    # Room for one such file and a half: each new one must push out the tenant's older one.
    share = int(one_file * 1.5)
    answer = floe.api("PUT", "/api/v1/tenants/noisy/limits", json={"hot-share-bytes": share})
    assert answer.status_code in (200, 204), answer.text
    assert floe.api("GET", "/api/v1/tenants/noisy/limits").json()["limits"]["hot-share-bytes"] == share
    time.sleep(1.5)  # the limits reach the node's tenants within half a second

    def snapshots() -> int:
        return sql(floe, "noisy", 'SELECT count(*) AS n FROM otel."logs$snapshots"')[0]["n"]

    before = snapshots()
    for batch in range(1, 4):
        post_logs(floe, "noisy", otlp_logs(f"noisy-{batch}", 100))
        # Committed (the admission follows the commit within the same call).
        assert eventually(lambda: snapshots() >= before + batch)
        time.sleep(0.5)
    assert metric(floe, "floe_cache_hot_bytes", tenant="noisy") <= share
    assert metric(floe, "floe_cache_hot_files", tenant="noisy") == 1
    # The neighbour's older file stayed.
    assert metric(floe, "floe_cache_hot_files", tenant="quiet") == 1
    assert metric(floe, "floe_cache_hot_bytes", tenant="quiet") == quiet_bytes
    # A bad value is refused naming the limit.
    refused = floe.api("PUT", "/api/v1/tenants/noisy/limits", json={"hot-window-seconds": 10**9})
    assert refused.status_code == 400 and "hot-window-seconds" in refused.text, refused.text
