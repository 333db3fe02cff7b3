"""Floe's HTTP APIs fuzzed from the OpenAPI document it serves (schemathesis): the management
API, the Iceberg REST catalog, HTTP ingestion and the schema registry, as root and as a
principal holding no grants. No answer may be a 5xx, and the server must be up and serving
SQL afterwards.

The fuzzer gets a warehouse of its own (`fuzz`) with a namespace, a table with rows, a view,
a role, a principal to change, a registry subject, a pipeline and a job (put back every
second when the fuzzer removes them); dictionaries make three generated names in five name
those, so requests get past "no such thing" into the handlers.

FLOE_FUZZ_SECONDS (default 60) is the fuzzing time: a third as the principal without grants,
the rest as root. FLOE_FUZZ_SEED repeats a run (each run prints its seed). Every 5xx, every
dropped connection and every request unanswered after 30 s is printed with the request that
caused it (method, URL, headers, body, and a curl line).

This file is also the hooks module schemathesis loads (SCHEMATHESIS_HOOKS). Loaded so, it
registers `before_call`, which keeps generated requests on this machine (`_keep_local`) and
makes their Iceberg schemas and idempotency keys mostly usable, and `after_call` /
`after_network_error`, which log every 5xx and every request left unanswered.

Nothing is excluded: the fuzzer may drop, rename and delete whatever it finds, since it works
in its own warehouse and the checks afterwards make one of their own. It may even rotate root's
secret (schemathesis reuses names it read in earlier answers): the checks afterwards use a
token taken before, which stays valid."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENT = REPO / "crates" / "server" / "src" / "management" / "openapi.json"
FUZZ_SECONDS = int(os.environ.get("FLOE_FUZZ_SECONDS", "60"))
# Seconds a request may take before it counts as unanswered.
REQUEST_TIMEOUT = 30
# Nothing listens there: Kafka clients and registry lookups of fuzzed pipelines fail at once.
CLOSED_PORT = "127.0.0.1:9"


# --- the hooks (run inside the schemathesis process) ----------------------------------------


def _keep_local(method: str, path: str, body) -> None:
    """Rewrites what a generated request would make Floe reach outside this machine or this
    test's directory, in place (so the printed reproduction is what was sent):

    - a warehouse's local directory goes below the test's directory (Floe runs as root in CI
      and writes probe files into a new warehouse, or storage it is asked to validate);
    - an S3 warehouse's endpoint becomes a stub on loopback that refuses every request, and
      it gets keys, so Floe never asks AWS or an instance metadata service for any;
    - a pipeline's brokers and registry become a closed loopback port;
    - a job's wait is at most 10 s (see below).

    Values that Floe refuses before any IO (not a string, not absolute, no http://) stay."""
    if method != "POST" or not isinstance(body, dict):
        return
    if path in ("/api/v1/warehouses", "/api/v1/storage/validate"):
        storage = body.get("storage")
        if not isinstance(storage, dict):
            return
        if storage.get("type") == "local" and isinstance(storage.get("path"), str) and storage["path"].startswith("/"):
            leaf = storage["path"].strip("/").replace("..", "__") or "root"
            storage["path"] = f"{os.environ['FLOE_FUZZ_WAREHOUSE_ROOT']}/{leaf}"
        elif storage.get("type") == "s3":
            endpoint = storage.get("endpoint")
            if endpoint is None or (isinstance(endpoint, str) and endpoint.startswith(("http://", "https://"))):
                storage["endpoint"] = os.environ["FLOE_FUZZ_S3_STUB"]
            if "access-key-id" not in storage and "secret-access-key" not in storage:
                storage["access-key-id"] = "fuzz"
                storage["secret-access-key"] = "fuzz-secret"
    elif path == "/api/v1/jobs" and body.get("wait") is True:
        # A job's wait may honestly last up to wait-seconds (600 by default); shortened, a
        # request still unanswered at the 30 s timeout is a hang. Absurd waits (over a day)
        # stay, for the server's arithmetic.
        wait = body.get("wait-seconds")
        if wait is None or (isinstance(wait, int) and not isinstance(wait, bool) and 10 < wait <= 86_400):
            body["wait-seconds"] = 10
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


def _number_fields(value, counter) -> None:
    """Gives every field of the Iceberg schemas in `value` its own id (as clients do), walking
    structs, lists and maps; generated ids mostly collide, which stops a request at parsing."""
    if isinstance(value, list):
        for item in value:
            _number_fields(item, counter)
        return
    if not isinstance(value, dict):
        return
    if value.get("type") == "struct" and isinstance(value.get("fields"), list):
        for field in value["fields"]:
            if isinstance(field, dict):
                field["id"] = next(counter)
                _number_fields(field.get("type"), counter)
        return
    if value.get("type") == "list" and "element-id" in value:
        value["element-id"] = next(counter)
        _number_fields(value.get("element"), counter)
        return
    if value.get("type") == "map" and "key-id" in value:
        value["key-id"], value["value-id"] = next(counter), next(counter)
        _number_fields(value.get("value"), counter)
        return
    for key, item in value.items():
        if key == "schema" and isinstance(item, dict):
            _number_fields(item, itertools.count(1))
        else:
            _number_fields(item, counter)


def _sent(request) -> dict:
    """A request as it went out: method, URL, headers but the token, body."""
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode()
    text = body.decode("utf-8", errors="backslashreplace")
    dull = ("authorization", "user-agent", "accept", "accept-encoding", "connection", "content-length",
            "x-schemathesis-testcaseid")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in dull}
    parts = ["curl", "-X", request.method, *(f"-H {shlex.quote(f'{k}: {v}')}" for k, v in headers.items())]
    if body:
        parts.append(f"--data-binary {shlex.quote(text)}")
    parts.append(shlex.quote(request.url))
    return {"method": request.method, "url": request.url, "headers": headers,
            "body": text if len(text) <= 4000 else text[:4000] + f"... ({len(text)} characters)",
            "curl": " ".join(parts) + " -H 'Authorization: Bearer …'"}


def _log(entry: dict) -> None:
    with open(os.environ["FLOE_FUZZ_PROBLEMS"], "a") as log:
        log.write(json.dumps(entry) + "\n")


if __name__ == "_schemathesis_hooks":
    import hashlib
    import uuid

    import schemathesis

    started: dict[str, float] = {}

    @schemathesis.hook
    def before_call(context, case, kwargs):
        started[case.id] = time.monotonic()
        _keep_local(case.method.upper(), case.operation.path, case.body)
        # Generated UUIDs repeat; a repeated key replays the first answer (or is a 422 for
        # another body), so four requests in five get a fresh one and the rest keep theirs.
        headers = case.headers or {}
        keep = int(hashlib.sha256(repr(case.body).encode()).hexdigest(), 16) % 5 == 0
        for key in list(headers):
            if key.lower() == "idempotency-key" and not keep:
                headers[key] = str(uuid.uuid4())
        if not keep:
            _number_fields(case.body, itertools.count(1))

    @schemathesis.hook
    def after_call(context, case, response):
        started.pop(case.id, None)
        if response.status_code >= 500:
            _log({"kind": f"HTTP {response.status_code}", "operation": f"{case.method.upper()} {case.operation.path}",
                  "request": _sent(response.request),
                  "response": response.content[:2000].decode("utf-8", errors="backslashreplace")})

    @schemathesis.hook
    def after_network_error(context, case, request):
        waited = time.monotonic() - started.pop(case.id, time.monotonic())
        kind = (f"no answer within {REQUEST_TIMEOUT} s" if waited >= REQUEST_TIMEOUT - 1
                else "connection closed without an answer (a panic in the handler?)")
        _log({"kind": kind,
              "operation": f"{case.method.upper()} {case.operation.path}",
              "request": _sent(request)})


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


TABLE_STATEMENTS = (
    "CREATE TABLE t (id BIGINT, city VARCHAR, at TIMESTAMP)",
    "INSERT INTO t VALUES (1, 'oslo', TIMESTAMP '2024-01-01 00:00:00')",
    "INSERT INTO t VALUES (2, 'lima', TIMESTAMP '2024-02-01 00:00:00')",
)
SUBJECT_SCHEMA = {"schema": json.dumps({"type": "record", "name": "e", "fields": [{"name": "id", "type": "long"}]})}
PIPELINE = {"name": "fuzzpipe", "warehouse": "fuzz", "namespace": ["ns"], "table": "events",
            "bootstrap-servers": CLOSED_PORT, "topics": ["events"]}


def view_request() -> dict:
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}
    return {"name": "v", "schema": schema,
            "view-version": {"version-id": 1, "timestamp-ms": int(time.time() * 1000), "schema-id": 0, "summary": {},
                             "representations": [{"type": "sql", "sql": "SELECT id FROM t", "dialect": "spark"}],
                             "default-namespace": ["ns"]}}


def _seed(floe, tmp_path: Path) -> dict[str, list]:
    """What the fuzzer's names should often hit; returns the dictionaries' values."""
    from conftest import ROOT_ID, ROOT_SECRET

    (tmp_path / "fuzz-warehouses").mkdir()
    _ok(floe.api("POST", "/api/v1/warehouses",
                 json={"name": "fuzz", "storage": {"type": "local", "path": str(tmp_path / "fuzz-warehouse")}}))
    for namespace in (["ns"], ["ns", "inner"]):
        _ok(floe.api("POST", "/catalog/v1/fuzz/namespaces", json={"namespace": namespace}))
    for statement in TABLE_STATEMENTS:
        _ok(floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": "fuzz", "namespace": "ns"}))
    table = _ok(floe.api("GET", "/catalog/v1/fuzz/namespaces/ns/tables/t")).json()
    view = _ok(floe.api("POST", "/catalog/v1/fuzz/namespaces/ns/views", json=view_request())).json()
    victim = _ok(floe.api("POST", "/api/v1/principals", json={"name": "victim"})).json()["credentials"]
    _ok(floe.api("POST", "/api/v1/roles", json={"name": "fuzz-role"}))
    _ok(floe.api("POST", "/api/v1/roles/fuzz-role/members", json={"principal": "victim"}))
    _ok(floe.api("POST", "/api/v1/grants", json={
        "role": "fuzz-role", "privilege": "read-data",
        "on": {"type": "table", "warehouse": "fuzz", "namespace": ["ns"], "name": "t"}}))
    _ok(floe.api("POST", "/schema-registry/subjects/fuzz-value/versions", json=SUBJECT_SCHEMA))
    _ok(floe.api("POST", "/api/v1/pipelines", json=PIPELINE))
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


class _Restocker(threading.Thread):
    """Puts back, every second, the seeded objects the fuzzer dropped, renamed or disabled,
    so that the dictionaries keep naming things that exist. Its own 5xx answers count too."""

    def __init__(self, floe, token: str, tmp_path: Path):
        super().__init__(daemon=True)
        self.floe, self.token, self.tmp_path = floe, token, tmp_path
        self.stop = threading.Event()
        self.problems: list[dict] = []

    def call(self, method: str, path: str, **kwargs):
        response = self.floe.api(method, path, token=self.token, **kwargs)
        if response.status_code >= 500:
            self.problems.append({
                "kind": f"HTTP {response.status_code}", "operation": f"{method} {path} (restocking)",
                "request": {"method": method, "url": self.floe.base + path, "headers": {},
                            "body": json.dumps(kwargs.get("json"))},
                "response": response.text[:2000]})
        return response

    def restock(self) -> None:
        if self.call("GET", "/api/v1/warehouses/fuzz").status_code == 404:
            self.call("POST", "/api/v1/warehouses", json={
                "name": "fuzz", "storage": {"type": "local", "path": str(self.tmp_path / "fuzz-warehouse")}})
        for namespace in (["ns"], ["ns", "inner"]):
            self.call("POST", "/catalog/v1/fuzz/namespaces", json={"namespace": namespace})
        if self.call("GET", "/catalog/v1/fuzz/namespaces/ns/tables/t").status_code == 404:
            for statement in TABLE_STATEMENTS:
                self.call("POST", "/api/v1/sql", json={"sql": statement, "warehouse": "fuzz", "namespace": "ns"})
        if self.call("GET", "/catalog/v1/fuzz/namespaces/ns/views/v").status_code == 404:
            self.call("POST", "/catalog/v1/fuzz/namespaces/ns/views", json=view_request())
        self.call("POST", "/api/v1/principals", json={"name": "victim"})
        self.call("POST", "/api/v1/principals/victim/enable")
        self.call("POST", "/api/v1/roles", json={"name": "fuzz-role"})
        self.call("POST", "/api/v1/roles/fuzz-role/members", json={"principal": "victim"})
        self.call("POST", "/schema-registry/subjects/fuzz-value/versions", json=SUBJECT_SCHEMA)
        if self.call("GET", "/api/v1/pipelines/fuzzpipe").status_code == 404:
            self.call("POST", "/api/v1/pipelines", json=PIPELINE)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.restock()
            except Exception as e:  # a refused connection shows in the checks that follow
                self.problems.append({"kind": "restocking failed", "operation": repr(e),
                                      "request": {"method": "", "url": "", "headers": {}, "body": ""}})
                return


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


# Which generated value draws from which dictionary (three times in five).
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
    lines = [f"base-url = {_toml(base)}", "",
             "[headers]", f"Authorization = {_toml('Bearer ' + token)}", "",
             # Methods a path does not serve are axum's 405, not Floe's code: not worth the time.
             "[phases.coverage]", "unexpected-methods = []", "",
             # No state kept between runs (it would land in the working directory).
             "[cache]", "enabled = false", ""]
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {_toml(values)}", ""]
    lines.append("[parameters]")
    for key, dictionary in BINDINGS.items():
        lines.append(f"{json.dumps(key)} = {_toml({'dictionary': dictionary, 'probability': 0.6})}")
    path.write_text("\n".join(lines) + "\n")


def _fuzz(floe, tmp_path: Path, who: str, token: str, dictionaries, seconds: int,
          s3_stub: str) -> tuple[list[dict], str, int]:
    """Runs schemathesis for `seconds` as the holder of `token`; returns the 5xx answers and
    unanswered requests its hooks logged, its output and its exit code."""
    config = tmp_path / f"schemathesis-{who}.toml"
    _config(config, dictionaries, token, floe.base)
    problems = tmp_path / f"problems-{who}.ndjson"
    problems.touch()
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "--no-color",
        "run", str(DOCUMENT),
        "--checks", "not_a_server_error",
        "--max-time", str(seconds),
        # One worker: the server takes the other core, and Python 3.11's parser is not safe to
        # run from two generating threads at once (hypothesis parses lambdas' sources).
        "--workers", "1",
        "--request-timeout", str(REQUEST_TIMEOUT),
        "--continue-on-failure",
        "--generation-database", "none",
        "--output-truncate", "false",
    ]
    if os.environ.get("FLOE_FUZZ_SEED"):
        command += ["--seed", os.environ["FLOE_FUZZ_SEED"]]
    env = dict(os.environ,
               SCHEMATHESIS_HOOKS=str(Path(__file__).resolve()),
               FLOE_FUZZ_PROBLEMS=str(problems),
               FLOE_FUZZ_WAREHOUSE_ROOT=str(tmp_path / "fuzz-warehouses"),
               FLOE_FUZZ_S3_STUB=s3_stub)
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 300)
    found = [json.loads(line) for line in problems.read_text().splitlines() if line.strip()]
    return found, run.stdout + run.stderr, run.returncode


def _describe(who: str, problems: list[dict]) -> list[str]:
    """One paragraph per kind of problem and operation, with its three shortest requests."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for problem in problems:
        groups.setdefault((problem["kind"], problem["operation"]), []).append(problem)
    out = []
    for (kind, operation), items in groups.items():
        lines = [f"[as {who}] {kind} from {operation} ({len(items)}x)"]
        for item in sorted(items, key=lambda i: len(i["request"]["url"]) + len(i["request"]["body"]))[:3]:
            request = item["request"]
            lines += [f"  request:  {request['method']} {request['url']}",
                      f"  headers:  {json.dumps(request['headers'])}",
                      f"  body:     {request['body']}"]
            if "response" in item:
                lines.append(f"  response: {item['response']}")
            lines.append(f"  curl:     {request.get('curl', '')}")
        out.append("\n".join(lines))
    return out


def test_document_is_valid_and_describes_every_catalog_endpoint(floe):
    from openapi_spec_validator import validate

    document = json.loads(DOCUMENT.read_text())
    validate(document)
    described = {(method.upper(), path) for path, item in document["paths"].items() for method in item
                 if method in ("get", "put", "post", "delete", "head", "patch")}
    advertised = _ok(floe.api("GET", "/catalog/v1/config")).json()["endpoints"]
    missing = [e for e in advertised if (e.split()[0], "/catalog" + e.split()[1]) not in described]
    assert not missing, f"endpoints /v1/config advertises but the document lacks: {missing}"


def test_fuzz_http_apis(floe, tmp_path):
    import requests

    stub = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingS3)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    s3_stub = f"http://127.0.0.1:{stub.server_address[1]}"
    report: list[str] = []
    root = floe.token()
    restocker = _Restocker(floe, root, tmp_path)
    try:
        dictionaries = _seed(floe, tmp_path)
        restocker.start()
        created = _ok(floe.api("POST", "/api/v1/principals", json={"name": "nobody"})).json()["credentials"]
        # The principal without grants goes first: root's run may change principals.
        nobody = floe.token(created["client-id"], created["client-secret"])
        for who, token, seconds in (("nobody", nobody, max(1, FUZZ_SECONDS // 3)),
                                    ("root", root, max(1, FUZZ_SECONDS - FUZZ_SECONDS // 3))):
            problems, output, code = _fuzz(floe, tmp_path, who, token, dictionaries, seconds, s3_stub)
            print(f"--- schemathesis as {who} (exit {code}) ---\n{output}")
            seed = next((line.split()[-1] for line in output.splitlines() if line.startswith("Seed:")), "?")
            report += [f"{p}\n  (schemathesis seed {seed}: FLOE_FUZZ_SEED={seed})" for p in _describe(who, problems)]
            if code != 0 and not problems:
                report.append(f"[as {who}] schemathesis exited {code} without a logged 5xx:\n{output[-3000:]}")
    finally:
        restocker.stop.set()
        restocker.join(timeout=60)
        report += _describe("root", restocker.problems)
        stub.shutdown()

    assert floe.process.poll() is None, f"floe exited with {floe.process.returncode}:\n" + "\n\n".join(report)
    health = requests.get(f"{floe.base}/health", timeout=30)
    assert (health.status_code, health.text) == (200, "ok")
    # Still working end to end (in a new warehouse: the fuzzer may have deleted `default`):
    # a warehouse, a namespace, a table, rows and a query over them.
    _ok(floe.api("POST", "/api/v1/warehouses", token=root, json={
        "name": "after-fuzz", "storage": {"type": "local", "path": str(tmp_path / "after-fuzz")}}))
    for statement in ("CREATE SCHEMA checks", "CREATE TABLE checks.t (id BIGINT)",
                      "INSERT INTO checks.t VALUES (1), (2)"):
        _ok(floe.api("POST", "/api/v1/sql", token=root, json={"sql": statement, "warehouse": "after-fuzz"}))
    answer = _ok(floe.api("POST", "/api/v1/sql", token=root,
                          json={"sql": "SELECT count(*) AS n FROM checks.t", "warehouse": "after-fuzz"}))
    assert answer.json()["rows"] == [{"n": 2}]
    assert not report, "server errors found:\n\n" + "\n\n".join(report)
