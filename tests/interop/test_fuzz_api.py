"""Floe's HTTP APIs fuzzed from the OpenAPI document it serves (schemathesis): the management
API, the Iceberg REST catalog, HTTP ingestion and the schema registry, as root and as a
principal holding no grants. No answer may be a 5xx, and the server must be up and serving
SQL afterwards.

The fuzzer gets a warehouse of its own (`fuzz`) with a namespace, a table with rows, a view,
a role, a principal to change, a registry subject, a pipeline and a job; dictionaries make
about half of the generated names name those, so requests get past "no such thing" into the
handlers. Time per identity: FLOE_FUZZ_SECONDS (default 30). Every 5xx or dropped connection
is printed with the request that caused it (method, URL, body, and a curl line).

This file is also the hooks module schemathesis loads (SCHEMATHESIS_HOOKS): when it is, it
registers `before_call`, which keeps generated requests on this machine (see
`_keep_local`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENT = REPO / "crates" / "server" / "src" / "management" / "openapi.json"
FUZZ_SECONDS = int(os.environ.get("FLOE_FUZZ_SECONDS", "30"))
# Nothing listens there: Kafka clients and registry lookups of fuzzed pipelines fail at once.
CLOSED_PORT = "127.0.0.1:9"


# --- the hooks (run inside the schemathesis process) ----------------------------------------


def _keep_local(method: str, path: str, body) -> None:
    """Rewrites what a generated request would make Floe reach outside this machine or this
    test's directory, in place (so the printed reproduction is what was sent):

    - a warehouse's local directory goes below the test's directory (Floe runs as root in CI
      and writes a probe file into a new warehouse);
    - an S3 warehouse's endpoint becomes a stub on loopback that refuses every request, and
      it gets keys, so Floe never asks AWS or an instance metadata service for any;
    - a pipeline's brokers and registry become a closed loopback port.

    Values that Floe refuses before any IO (not a string, not absolute, no http://) stay."""
    if method != "POST" or not isinstance(body, dict):
        return
    if path == "/api/v1/warehouses":
        storage = body.get("storage")
        if not isinstance(storage, dict):
            return
        local = storage.get("path")
        if isinstance(local, str) and local.startswith("/"):
            leaf = local.strip("/").replace("..", "__") or "root"
            storage["path"] = f"{os.environ['FLOE_FUZZ_WAREHOUSE_ROOT']}/{leaf}"
        endpoint = storage.get("endpoint")
        if endpoint is None or (isinstance(endpoint, str) and endpoint.startswith(("http://", "https://"))):
            storage["endpoint"] = os.environ["FLOE_FUZZ_S3_STUB"]
        if "access-key-id" not in storage and "secret-access-key" not in storage:
            storage["access-key-id"] = "fuzz"
            storage["secret-access-key"] = "fuzz-secret"
    elif path == "/api/v1/pipelines":
        if isinstance(body.get("bootstrap-servers"), str):
            body["bootstrap-servers"] = CLOSED_PORT
        if isinstance(body.get("schema-registry-url"), str):
            body["schema-registry-url"] = f"http://{CLOSED_PORT}"
        properties = body.get("properties")
        if isinstance(properties, dict):
            for key in list(properties):
                if any(word in key.lower() for word in ("server", "broker", "url", "endpoint", "host")):
                    del properties[key]


def _sent(request) -> dict:
    """A request as it went out: method, URL, headers but the token, body."""
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode()
    text = body.decode("utf-8", errors="backslashreplace")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "user-agent")}
    return {"method": request.method, "url": request.url, "headers": headers,
            "body": text if len(text) <= 4000 else text[:4000] + f"... ({len(text)} characters)"}


def _log(entry: dict) -> None:
    with open(os.environ["FLOE_FUZZ_PROBLEMS"], "a") as log:
        log.write(json.dumps(entry) + "\n")


if __name__ == "_schemathesis_hooks":
    import random
    import uuid

    import schemathesis

    @schemathesis.hook
    def before_call(context, case, kwargs):
        _keep_local(case.method.upper(), case.operation.path, case.body)
        # Generated UUIDs repeat; a repeated key replays the first answer (or is a 422 for
        # another body), so most requests get a fresh one and a few keep the generated one.
        headers = case.headers or {}
        for key in list(headers):
            if key.lower() == "idempotency-key" and random.random() < 0.8:
                headers[key] = str(uuid.uuid4())

    @schemathesis.hook
    def after_call(context, case, response):
        if response.status_code >= 500:
            _log({"kind": f"HTTP {response.status_code}", "operation": f"{case.method.upper()} {case.operation.path}",
                  "request": _sent(response.request),
                  "response": response.content[:2000].decode("utf-8", errors="backslashreplace"),
                  "curl": case.as_curl_command()})

    @schemathesis.hook
    def after_network_error(context, case, request):
        _log({"kind": "no answer (connection failed or timed out)",
              "operation": f"{case.method.upper()} {case.operation.path}",
              "request": _sent(request), "curl": case.as_curl_command()})


# --- the test (run by pytest) ---------------------------------------------------------------


class _RefusingS3(BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request 403, which S3 clients do not retry."""

    def _refuse(self):
        body = b"<Error><Code>AccessDenied</Code><Message>fuzz stub</Message></Error>"
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _refuse

    def log_message(self, *args):
        pass


def _ok(response, *codes):
    assert response.status_code in (codes or (200, 201, 204)), f"{response.status_code}: {response.text}"
    return response


def _seed(floe, tmp_path: Path) -> dict[str, list]:
    """What the fuzzer's names should often hit; returns the dictionaries' values."""
    from conftest import ROOT_ID, ROOT_SECRET

    (tmp_path / "fuzz-warehouses").mkdir()
    _ok(floe.api("POST", "/api/v1/warehouses",
                 json={"name": "fuzz", "storage": {"type": "local", "path": str(tmp_path / "fuzz-warehouse")}}))
    for namespace in (["ns"], ["ns", "inner"]):
        _ok(floe.api("POST", "/catalog/v1/fuzz/namespaces", json={"namespace": namespace}))
    for statement in ("CREATE TABLE t (id BIGINT, city VARCHAR, at TIMESTAMP)",
                      "INSERT INTO t VALUES (1, 'oslo', TIMESTAMP '2024-01-01 00:00:00')",
                      "INSERT INTO t VALUES (2, 'lima', TIMESTAMP '2024-02-01 00:00:00')"):
        _ok(floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": "fuzz", "namespace": "ns"}))
    table = _ok(floe.api("GET", "/catalog/v1/fuzz/namespaces/ns/tables/t")).json()
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}
    view = _ok(floe.api("POST", "/catalog/v1/fuzz/namespaces/ns/views", json={
        "name": "v", "schema": schema,
        "view-version": {"version-id": 1, "timestamp-ms": int(time.time() * 1000), "schema-id": 0, "summary": {},
                         "representations": [{"type": "sql", "sql": "SELECT id FROM t", "dialect": "spark"}],
                         "default-namespace": ["ns"]}})).json()
    victim = _ok(floe.api("POST", "/api/v1/principals", json={"name": "victim"})).json()["credentials"]
    _ok(floe.api("POST", "/api/v1/roles", json={"name": "fuzz-role"}))
    _ok(floe.api("POST", "/api/v1/roles/fuzz-role/members", json={"principal": "victim"}))
    _ok(floe.api("POST", "/api/v1/grants", json={
        "role": "fuzz-role", "privilege": "read-data",
        "on": {"type": "table", "warehouse": "fuzz", "namespace": ["ns"], "name": "t"}}))
    _ok(floe.api("POST", "/schema-registry/subjects/fuzz-value/versions",
                 json={"schema": json.dumps({"type": "record", "name": "e", "fields": [{"name": "id", "type": "long"}]})}))
    _ok(floe.api("POST", "/api/v1/pipelines", json={
        "name": "fuzzpipe", "warehouse": "fuzz", "namespace": ["ns"], "table": "events",
        "bootstrap-servers": CLOSED_PORT, "topics": ["events"]}))
    job = _ok(floe.api("POST", "/api/v1/jobs", json={
        "warehouse": "fuzz", "namespace": ["ns"], "table": "t", "kind": "expire-snapshots",
        "options": {"dry-run": True}})).json()["job"]
    table_location = table["metadata"]["location"]
    return {
        "warehouses": ["fuzz"],
        "namespaces": ["ns", "ns\u001finner"],
        "namespace_levels": ["ns", "inner"],
        "dotted_namespaces": ["ns", "ns.inner"],
        "tables": ["t", "events"],
        "views": ["v"],
        "names": ["fuzz", "victim", "fuzz-role", "fuzzpipe", "t", "v"],
        "principals": ["victim"],
        "roles": ["fuzz-role"],
        "ids": [job["id"], 1],
        "subjects": ["fuzz-value"],
        "versions": ["1", "latest"],
        "privileges": ["read-data", "write-data", "manage-maintenance", "manage-grants"],
        "locations": [table["metadata-location"], view["metadata-location"], table_location,
                      f"{table_location}/data/x.parquet", f"{table_location}/metadata/x.json"],
        "objects": ["t", "v", "events"],
        "client_ids": [victim["client-id"], ROOT_ID],
        "client_secrets": [victim["client-secret"], ROOT_SECRET],
        "http_methods": ["GET", "HEAD", "PUT", "POST", "DELETE"],
        "statements": [
            "SELECT * FROM fuzz.ns.t", "SELECT city, count(*) FROM fuzz.ns.t GROUP BY city",
            "SELECT * FROM fuzz.ns.t WHERE id > 1 ORDER BY at", 'SELECT * FROM fuzz.ns."t$snapshots"',
            "SELECT * FROM fuzz.ns.v", "INSERT INTO fuzz.ns.t VALUES (3, 'pune', NULL)", "SELECT 1/0",
            "SELECT * FROM fuzz.ns.t a JOIN fuzz.ns.t b ON a.id = b.id",
            "CREATE TABLE fuzz.ns.c AS SELECT * FROM fuzz.ns.t", "DROP TABLE fuzz.ns.c",
            "SELECT CAST(city AS BIGINT) FROM fuzz.ns.t", "SHOW TABLES", "SELECT * FROM t",
        ],
    }


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


# Which generated value draws from which dictionary (about half of the time).
BINDINGS = {
    "path.prefix": "warehouses", "path.warehouse": "warehouses", "path.namespace": "namespaces",
    "path.table": "tables", "path.view": "views", "path.name": "names", "path.principal": "principals",
    "path.id": "ids", "path.subject": "subjects", "path.version": "versions",
    "query.warehouse": "warehouses", "query.namespace": "dotted_namespaces", "query.table": "tables",
    "query.parent": "namespaces",
    "body.warehouse": "warehouses", "body.namespace[*]": "namespace_levels", "body.table": "tables",
    "body.role": "roles", "body.principal": "principals", "body.privilege": "privileges",
    "body.on.warehouse": "warehouses", "body.on.namespace[*]": "namespace_levels", "body.on.name": "objects",
    "body.identifier.namespace[*]": "namespace_levels", "body.identifier.name": "tables",
    "body.source.namespace[*]": "namespace_levels", "body.source.name": "tables",
    "body.destination.namespace[*]": "namespace_levels",
    "body.table-changes[*].identifier.namespace[*]": "namespace_levels",
    "body.table-changes[*].identifier.name": "tables",
    "body.metadata-location": "locations", "body.location": "locations", "body.uri": "locations",
    "body.sql": "statements", "body.method": "http_methods",
    "body.client_id": "client_ids", "body.client_secret": "client_secrets",
}


def _config(path: Path, dictionaries: dict[str, list], token: str, base: str) -> None:
    lines = [f"base-url = {_toml(base)}", "", "[headers]", f"Authorization = {_toml('Bearer ' + token)}", ""]
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {_toml(values)}", ""]
    lines.append("[parameters]")
    for key, dictionary in BINDINGS.items():
        lines.append(f"{json.dumps(key)} = {_toml({'dictionary': dictionary, 'probability': 0.5})}")
    path.write_text("\n".join(lines) + "\n")


def _fuzz(floe, tmp_path: Path, who: str, token: str, dictionaries) -> tuple[list[dict], str, int]:
    """Runs schemathesis for FUZZ_SECONDS as the holder of `token`; returns the 5xx answers and
    unanswered requests its hooks logged, its output and its exit code."""
    config = tmp_path / f"schemathesis-{who}.toml"
    _config(config, dictionaries, token, floe.base)
    problems = tmp_path / f"problems-{who}.ndjson"
    problems.touch()
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "--no-color",
        "run", str(DOCUMENT),
        "--checks", "not_a_server_error",
        "--max-time", str(FUZZ_SECONDS),
        "--workers", "2",
        "--request-timeout", "30",
        "--continue-on-failure",
        "--generation-database", "none",
        "--output-truncate", "false",
    ]
    env = dict(os.environ,
               SCHEMATHESIS_HOOKS=str(Path(__file__).resolve()),
               FLOE_FUZZ_PROBLEMS=str(problems),
               FLOE_FUZZ_WAREHOUSE_ROOT=str(tmp_path / "fuzz-warehouses"))
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=FUZZ_SECONDS + 300)
    found = [json.loads(line) for line in problems.read_text().splitlines() if line.strip()]
    return found, run.stdout + run.stderr, run.returncode


def _describe(who: str, problems: list[dict]) -> list[str]:
    """One paragraph per kind of problem and operation, with up to three requests."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for problem in problems:
        groups.setdefault((problem["kind"], problem["operation"]), []).append(problem)
    out = []
    for (kind, operation), items in groups.items():
        lines = [f"[as {who}] {kind} from {operation} ({len(items)}x)"]
        for item in items[:3]:
            request = item["request"]
            lines += [f"  request:  {request['method']} {request['url']}",
                      f"  headers:  {json.dumps(request['headers'])}",
                      f"  body:     {request['body']}"]
            if "response" in item:
                lines.append(f"  response: {item['response']}")
            lines.append(f"  curl:     {item['curl']}")
        out.append("\n".join(lines))
    return out


def test_fuzz_http_apis(floe, tmp_path):
    import requests

    stub = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingS3)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    os.environ["FLOE_FUZZ_S3_STUB"] = f"http://127.0.0.1:{stub.server_address[1]}"
    report: list[str] = []
    try:
        dictionaries = _seed(floe, tmp_path)
        created = _ok(floe.api("POST", "/api/v1/principals", json={"name": "nobody"})).json()["credentials"]
        # The principal without grants goes first: root's run may change principals.
        for who, token in (("nobody", floe.token(created["client-id"], created["client-secret"])),
                           ("root", floe.token())):
            problems, output, code = _fuzz(floe, tmp_path, who, token, dictionaries)
            print(f"--- schemathesis as {who} (exit {code}) ---\n{output}")
            report += _describe(who, problems)
            if code != 0 and not problems:
                report.append(f"[as {who}] schemathesis exited {code} without a logged 5xx:\n{output[-3000:]}")
    finally:
        stub.shutdown()
        os.environ.pop("FLOE_FUZZ_S3_STUB", None)

    assert floe.process.poll() is None, f"floe exited with {floe.process.returncode}:\n" + "\n\n".join(report)
    health = requests.get(f"{floe.base}/health", timeout=30)
    assert (health.status_code, health.text) == (200, "ok")
    # Still working end to end: a namespace, a table, rows and a query over them.
    for statement in ("CREATE SCHEMA after_fuzz", "CREATE TABLE after_fuzz.t (id BIGINT)",
                      "INSERT INTO after_fuzz.t VALUES (1), (2)"):
        _ok(floe.api("POST", "/api/v1/sql", json={"sql": statement}))
    answer = _ok(floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM after_fuzz.t"}))
    assert answer.json()["rows"] == [{"n": 2}]
    assert not report, "server errors found:\n\n" + "\n\n".join(report)
