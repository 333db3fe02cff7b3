"""The Python client library (clients/python) against a live server: installed with pip from
the checkout, held to the server's own OpenAPI document, driving the management API,
PyIceberg and Flight SQL; its README's examples and examples/ scripts run as written."""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import ROOT_ID, ROOT_SECRET, start_floe, stop_floe

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "python"

# The resource groups the client must cover (issue 41 item 6), as path prefixes of the
# management API: `policies` are row and column policies, maintenance policies and deletion
# protection.
GROUPS = {
    "principals": ["/api/v1/principals", "/api/v1/whoami", "/api/v1/signing-keys"],
    "roles": ["/api/v1/roles"],
    "grants": ["/api/v1/grants"],
    "policies": ["/api/v1/policies", "/api/v1/maintenance/policies", "/api/v1/protection"],
    "warehouses": ["/api/v1/warehouses"],
    "pipelines": ["/api/v1/pipelines"],
    "tenants": ["/api/v1/tenants"],
    "migrations": ["/api/v1/migrations", "/api/v1/tables/convert"],
    "jobs": ["/api/v1/jobs"],
    "audit": ["/api/v1/audit"],
    "access review": ["/api/v1/access-review"],
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """floe-client installed by pip from the checkout into a directory of its own (offline,
    no build dependencies), imported from there."""
    target = tmp_path_factory.mktemp("floe-client-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(target), str(CLIENT_DIR)],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    sys.path.insert(0, str(target))
    for name in [m for m in sys.modules if m == "floe_client" or m.startswith("floe_client.")]:
        del sys.modules[name]
    module = importlib.import_module("floe_client")
    assert Path(module.__file__).is_relative_to(target)
    yield target
    sys.path.remove(str(target))


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def make_client(floe, **kwargs):
    from floe_client import Client

    args = dict(client_id=ROOT_ID, client_secret=ROOT_SECRET, flight=f"grpc://127.0.0.1:{floe.flight_port}")
    args.update(kwargs)
    return Client(floe.base, **args)


def client_env(floe, site) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update(
        FLOE_SERVER=floe.base,
        FLOE_CLIENT_ID=ROOT_ID,
        FLOE_CLIENT_SECRET=ROOT_SECRET,
        FLOE_FLIGHT=f"grpc://127.0.0.1:{floe.flight_port}",
        PYTHONPATH=str(site),
    )
    return env


def test_client_matches_the_live_openapi_document(floe, installed):
    from floe_client import OPERATIONS

    doc = json.loads(floe.api("GET", "/api/v1/openapi.json").text)
    served = {}
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method in ("get", "post", "put", "delete", "patch"):
                served[operation["operationId"]] = (method.upper(), path)
    # Every operation the client calls is served, at the method and path the client uses.
    for operation_id, route in OPERATIONS.items():
        assert served.get(operation_id) == route, f"{operation_id}: client {route}, server {served.get(operation_id)}"
    # Every management operation has a client method.
    management = {op for op, (_, path) in served.items() if path.startswith("/api/v1/") and op != "openapi"}
    assert management - set(OPERATIONS) == set(), "add client methods for these operations"
    # ... and every entry of OPERATIONS is called by one.
    sources = "\n".join(
        p.read_text() for p in (CLIENT_DIR / "src" / "floe_client").glob("*.py") if p.name != "transport.py"
    )
    uncalled = [op for op in OPERATIONS if f'"{op}"' not in sources]
    assert uncalled == []
    # Each group the issue names is served and covered whole.
    for group, prefixes in GROUPS.items():
        in_group = {op for op, (_, path) in served.items() if any(path.startswith(p) for p in prefixes)}
        assert in_group, f"the server has no {group} operations"
        assert in_group <= set(OPERATIONS), f"{group}: {in_group - set(OPERATIONS)}"
    # The typed models are what the live document generates.
    sys.path.insert(0, str(CLIENT_DIR / "tools"))
    try:
        import generate_models
    finally:
        sys.path.remove(str(CLIENT_DIR / "tools"))
    checked_in = (CLIENT_DIR / "src" / "floe_client" / "models.py").read_text()
    assert generate_models.generate(doc) == checked_in, "run clients/python/tools/generate_models.py"


def test_governance_round_trip(floe, installed):
    from floe_client import Conflict, Forbidden, securables as on

    client = make_client(floe)
    assert client.whoami()["name"] == "root"
    catalog = client.catalog()
    catalog.create_namespace("gov")
    created = client.principals.create("py-analyst", kind="user")
    assert created["principal"]["name"] == "py-analyst"
    credentials = created["credentials"]
    with pytest.raises(Conflict):
        client.principals.create("py-analyst")
    client.roles.create("py-readers")
    client.roles.add_member("py-readers", "py-analyst")
    client.grants.grant("py-readers", "list-tables", on.namespace(floe.warehouse, "gov"))
    client.grants.grant("py-readers", "manage-warehouses", on.server())
    grants = client.roles.grants("py-readers")
    assert {(g["privilege"], g["securable-kind"]) for g in grants} == {
        ("list-tables", "namespace"),
        ("manage-warehouses", "server"),
    }
    assert any(g.get("on") == on.namespace(floe.warehouse, "gov") for g in grants)
    assert "py-analyst" in {p["name"] for p in client.principals.list()}

    analyst = make_client(floe, client_id=credentials["client-id"], client_secret=credentials["client-secret"])
    assert analyst.whoami()["name"] == "py-analyst"
    with pytest.raises(Forbidden) as refused:
        analyst.audit.access_review()
    assert "read-audit" in refused.value.message
    # What the analyst was granted lets it create a warehouse.
    created_wh = analyst.warehouses.create(
        "py-wh", {"type": "local", "path": str(floe.data_dir / "py-wh")}, {"owner": "analytics"}
    )
    assert created_wh["name"] == "py-wh" and created_wh["properties"] == {"owner": "analytics"}
    assert client.warehouses.get("py-wh")["storage"]["type"] == "local"

    review = client.audit.access_review()
    entry = next(p for p in review["principals"] if p["principal"] == "py-analyst")
    assert entry["roles"] == ["py-readers"]
    assert {g["privilege"] for g in entry["privileges"]} == {"list-tables", "manage-warehouses"}

    client.grants.revoke("py-readers", "manage-warehouses", on.server())
    assert [g["privilege"] for g in client.roles.grants("py-readers")] == ["list-tables"]
    client.roles.remove_member("py-readers", "py-analyst")
    client.principals.disable("py-analyst")
    assert client.principals.get("py-analyst")["disabled"] is True
    client.principals.enable("py-analyst")
    rotated = client.principals.rotate_credentials("py-analyst")
    assert rotated["client-secret"] != credentials["client-secret"]
    assert client.principals.rotate_signing_key()

    # The audit trail holds each change, the grants made by root among them, page by page.
    for _ in range(50):
        grants_made = list(client.audit.records(action="POST /api/v1/grants", limit=1))
        if len(grants_made) >= 2:
            break
        time.sleep(0.1)
    assert [r["principal"] for r in grants_made] == ["root", "root"]
    assert all(r["decision"] == "allow" and r["status"] == 204 for r in grants_made)
    denied = client.audit.list(principal="py-analyst", decision="deny")["records"]
    assert any(r["action"] == "GET /api/v1/access-review" and r["status"] == 403 for r in denied)


def test_policies_tenants_jobs_pipelines_migrations(floe, installed):
    from floe_client import BadRequest, Conflict, securables as on

    client = make_client(floe)
    wh = floe.warehouse
    catalog = client.catalog()
    catalog.create_namespace("ops")
    table = catalog.create_table("ops.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))

    client.policies.set(on.table(wh, "ops", "events"), {"min-snapshots-to-keep": 3})
    policy = client.policies.get(wh, "ops", "events")
    assert policy["policy"]["min-snapshots-to-keep"] == 3
    assert policy["effective"]["min-snapshots-to-keep"] == 3
    with pytest.raises(BadRequest):
        client.policies.set(on.table(wh, "ops", "events"), {"orphan-min-age-ms": 1})
    client.policies.set(on.table(wh, "ops", "events"), None)
    assert client.policies.get(wh, "ops", "events")["policy"] is None

    # Row and column policies.
    client.roles.create("py-masked")
    client.data_policies.set("py-masked", on.table(wh, "ops", "events"), row_filter="id > 1",
                             masks=[{"column": "id", "mask": "expression", "expression": "id * 10"}])
    [kept] = client.data_policies.list("py-masked")
    assert kept["row-filter"] == "id > 1" and kept["table"]["name"] == "events"
    with pytest.raises(BadRequest):
        client.data_policies.set("py-masked", on.table(wh, "ops", "events"), masks=[{"column": "nope", "mask": "null"}])
    client.data_policies.remove("py-masked", on.table(wh, "ops", "events"))
    assert client.data_policies.list("py-masked") == []

    assert client.protection.set(on.table(wh, "ops", "events"))["protected"] is True
    with pytest.raises(Conflict) as refused:
        catalog_drop = client.request("DELETE", f"/catalog/v1/{wh}/namespaces/ops/tables/events")
        assert catalog_drop is None
    assert "deletion-protection" in refused.value.message
    assert client.protection.get(wh, "ops", "events")["drops-refused"] is True
    client.protection.set(on.table(wh, "ops", "events"), protected=False)

    setting = client.warehouses.set_soft_delete(wh, 3600)
    assert setting["retention-seconds"] == 3600 and client.warehouses.soft_delete(wh)["enabled"] is True
    catalog.drop_table("ops.events")
    dropped = list(client.warehouses.all_dropped(wh, "ops"))
    assert [d["name"] for d in dropped] == ["events"]
    assert client.warehouses.undrop(wh, dropped[0]["id"])["name"] == "events"
    assert catalog.load_table("ops.events").scan().to_arrow().num_rows == 3

    limits = client.tenants.set_limits(wh, {"max-concurrent-queries": 4, "max-request-bytes": 1 << 20})
    assert limits["limits"] == {"max-concurrent-queries": 4, "max-request-bytes": 1 << 20}
    assert "usage" in client.tenants.limits(wh)
    client.tenants.delete_limits(wh)
    assert client.tenants.limits(wh)["limits"] == {}

    queued = client.jobs.queue(wh, "ops", "events", "expire-snapshots", options={"dry-run": True}, wait=True, wait_seconds=60)
    job = client.jobs.get(queued["job"]["id"])
    assert job["kind"] == "expire-snapshots" and job["table"] == "events"
    assert job["id"] in {j["id"] for j in client.jobs.list(wh, "ops", "events")}
    assert client.maintenance.expire_snapshots(wh, "ops", "events", dry_run=True) is not None
    assert client.maintenance.check_table(wh, "ops", "events")["healthy"] is True

    assert client.pipelines.list() == []
    assert client.ingest.status() == []
    assert client.workers() == []
    client.migrations.put_table("py-migration", "hive.db.t", 1, {"step": "copied"})
    assert "py-migration" in json.dumps(client.migrations.list())
    assert "hive.db.t" in json.dumps(client.migrations.get("py-migration"))
    client.migrations.forget("py-migration")
    metadata = client.migrations.read_metadata(wh, catalog.load_table("ops.events").metadata_location)
    assert metadata


def test_catalog_and_sql(floe, installed):
    client = make_client(floe)
    catalog = client.catalog(floe.warehouse)
    # The catalog's properties do not hold the secret: it takes the client's tokens.
    assert ROOT_SECRET not in repr(catalog.properties)
    catalog.create_namespace("shop")
    orders = catalog.create_table("shop.orders", schema=pa.schema([("id", pa.int64()), ("city", pa.string())]))
    orders.append(pa.table({"id": [1, 2, 3, 4], "city": ["oslo", "lima", "oslo", "pune"]}))
    assert catalog.load_table("shop.orders").scan().to_arrow().num_rows == 4

    result = client.sql("SELECT city, count(*) AS n FROM shop.orders GROUP BY city ORDER BY city", warehouse=floe.warehouse)
    assert isinstance(result, pa.Table)
    assert result.to_pylist() == [{"city": "lima", "n": 1}, {"city": "oslo", "n": 2}, {"city": "pune", "n": 1}]
    assert client.sql("SELECT max(id) AS top FROM orders", namespace="shop").to_pylist() == [{"top": 4}]
    answer = client.sql_json(f"SELECT sum(id) AS total FROM {floe.warehouse}.shop.orders")
    assert answer["rows"] == [{"total": 10}]
    # Writes through Flight SQL land once.
    client.sql(f"INSERT INTO {floe.warehouse}.shop.orders VALUES (5, 'rome')")
    assert catalog.load_table("shop.orders").scan().to_arrow().num_rows == 5


def test_errors_carry_floe_ids(floe, installed):
    from floe_client import BadRequest, FloeError, Forbidden, NotFound, ServerError, Unauthenticated

    client = make_client(floe)
    with pytest.raises(NotFound) as missing:
        client.principals.get("nobody")
    error = missing.value
    assert (error.status, error.error_type) == (404, "NoSuchPrincipalException")
    assert error.request_id and error.error_id is None
    assert error.request_id in str(error)
    # The request id is the audit record's.
    for _ in range(50):
        records = client.audit.list(action="GET /api/v1/principals/{name}")["records"]
        if any(r["request-id"] == error.request_id for r in records):
            break
        time.sleep(0.1)
    assert any(r["request-id"] == error.request_id and r["status"] == 404 for r in records)

    # A server-side failure: the namespace's directory is a file, so the table's metadata
    # cannot be written. The answer carries only an error id; the server logged the cause under it.
    client.catalog().create_namespace("jammed")
    (Path(client.warehouses.get(floe.warehouse)["storage"]["path"]) / "jammed").write_text("")
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    with pytest.raises(ServerError) as failed:
        client.request("POST", f"/catalog/v1/{floe.warehouse}/namespaces/jammed/tables", json={"name": "t", "schema": schema})
    assert failed.value.status == 500 and re.fullmatch(r"[0-9a-f-]{36}", failed.value.error_id)
    for _ in range(50):
        if failed.value.error_id in (floe.data_dir.parent / "floe.log").read_text():
            break
        time.sleep(0.1)
    assert failed.value.error_id in (floe.data_dir.parent / "floe.log").read_text()

    with pytest.raises(BadRequest):
        client.sql_json("SELEC nonsense")
    with pytest.raises(BadRequest) as planning:
        client.sql("SELECT * FROM no_such_table")
    assert "no_such_table" in planning.value.message
    outsider = client.principals.create("py-outsider")["credentials"]
    stranger = make_client(floe, client_id=outsider["client-id"], client_secret=outsider["client-secret"])
    with pytest.raises(Forbidden):
        stranger.warehouses.create("nope", {"type": "local", "path": "/tmp/nope"})
    with pytest.raises(FloeError) as sql_refused:
        stranger.sql(f"SELECT * FROM {floe.warehouse}.jammed.t")
    assert sql_refused.value.status in (400, 403, 404)
    with pytest.raises(Unauthenticated) as wrong:
        make_client(floe, client_secret="not-the-secret").whoami()
    assert wrong.value.error_type == "invalid_client"


def test_tokens_refresh(tmp_path, installed):
    """Tokens live two seconds here: the client, its catalog and its SQL keep working across
    several lifetimes, fetching a new token before each old one runs out; a refused token is
    replaced once."""
    from floe_client import Unauthenticated

    floe = start_floe(tmp_path, extra_args=("--token-ttl-secs", "2"))
    try:
        client = make_client(floe)
        catalog = client.catalog()
        catalog.create_namespace("ttl")
        table = catalog.create_table("ttl.t", schema=pa.schema([("id", pa.int64())]))
        assert client.tokens.fetches == 1
        logs = _Records()
        logging.getLogger("floe_client").addHandler(logs)
        logging.getLogger("floe_client").setLevel(logging.DEBUG)
        for round_ in range(3):
            time.sleep(2.2)
            table.append(pa.table({"id": [round_]}))
            assert client.sql(f"SELECT count(*) AS n FROM {floe.warehouse}.ttl.t").to_pylist() == [{"n": round_ + 1}]
            assert client.whoami()["name"] == "root"
        assert client.tokens.fetches == 4
        # Refreshed ahead of expiry: no request was refused on the way.
        logging.getLogger("floe_client").removeHandler(logs)
        assert any("-> 200" in m for m in logs.messages)
        assert not any("-> 401" in m for m in logs.messages)
        assert catalog.load_table("ttl.t").scan().to_arrow().num_rows == 3

        # A token the server refuses (here: not one it signed) is replaced once, for HTTP and SQL.
        before = client.tokens.fetches
        client.tokens._token = "not-a-token"
        assert client.whoami()["name"] == "root"
        client.tokens._token = "not-a-token"
        assert client.sql("SELECT 1 AS one").to_pylist() == [{"one": 1}]
        assert client.tokens.fetches == before + 2
        # A bare token cannot be refreshed: its refusal is the caller's.
        with pytest.raises(Unauthenticated):
            make_client(floe, client_id=None, client_secret=None, token="not-a-token").whoami()
        token = floe.token()
        assert make_client(floe, client_id=None, client_secret=None, token=token).whoami()["name"] == "root"
    finally:
        stop_floe(floe)


def test_credentials_from_environment_and_profile(floe, installed, tmp_path, monkeypatch):
    from floe_client import Client, ConfigurationError, profile_path

    for name in [k for k in os.environ if k.startswith("FLOE_")]:
        monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(ConfigurationError):
        Client()
    # The environment, under the CLI's names.
    monkeypatch.setenv("FLOE_SERVER", floe.base)
    monkeypatch.setenv("FLOE_CLIENT_ID", ROOT_ID)
    monkeypatch.setenv("FLOE_CLIENT_SECRET", ROOT_SECRET)
    from_env = Client()
    assert from_env.settings.source == "environment"
    assert from_env.whoami()["name"] == "root"
    assert from_env.settings.flight == f"grpc://127.0.0.1:50051"
    # Explicit arguments win over the environment; half a pair is refused.
    with pytest.raises(ConfigurationError):
        Client(client_id="someone")
    assert Client(client_id=ROOT_ID, client_secret=ROOT_SECRET).settings.source == "arguments"

    # A profile: the credentials file format `floe serve` writes, plus server and flight.
    other = Client(floe.base, client_id=ROOT_ID, client_secret=ROOT_SECRET).principals.create("py-profiled")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(work / "config"))
    path = profile_path("team")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "server": floe.base,
        "flight": f"grpc://127.0.0.1:{floe.flight_port}",
        "client_id": other["credentials"]["client-id"],
        "client_secret": other["credentials"]["client-secret"],
    }))
    path.chmod(0o600)
    for name in ("FLOE_SERVER", "FLOE_CLIENT_ID", "FLOE_CLIENT_SECRET"):
        monkeypatch.delenv(name)
    profiled = Client(profile="team")
    assert profiled.settings.source == str(path)
    assert profiled.whoami()["name"] == "py-profiled"
    assert profiled.sql("SELECT 2 AS two").to_pylist() == [{"two": 2}]
    monkeypatch.setenv("FLOE_PROFILE", "team")
    assert Client().whoami()["name"] == "py-profiled"
    # The environment wins over the profile.
    monkeypatch.setenv("FLOE_CLIENT_ID", ROOT_ID)
    monkeypatch.setenv("FLOE_CLIENT_SECRET", ROOT_SECRET)
    assert Client().whoami()["name"] == "root"
    with pytest.raises(ConfigurationError):
        Client(profile="missing")
    # The CLI's default file in the working directory.
    for name in ("FLOE_PROFILE", "FLOE_CLIENT_ID", "FLOE_CLIENT_SECRET"):
        monkeypatch.delenv(name)
    (work / "floe-data").mkdir()
    (work / "floe-data" / "root-credentials.json").write_text(
        json.dumps({"client_id": ROOT_ID, "client_secret": ROOT_SECRET})
    )
    monkeypatch.setenv("FLOE_SERVER", floe.base)
    assert Client().whoami()["name"] == "root"


def test_secrets_stay_out_of_reprs_errors_and_logs(floe, installed, caplog):
    from floe_client import FloeError

    caplog.set_level(logging.DEBUG)
    client = make_client(floe)
    client.whoami()
    client.sql("SELECT 1 AS one")
    token = client.tokens.token()
    shown = [repr(client), str(client), repr(client.settings), repr(client.tokens), repr(client.settings.client_secret)]
    try:
        make_client(floe, client_secret=ROOT_SECRET + "-wrong").whoami()
    except FloeError as e:
        shown += [str(e), repr(e)]
    try:
        client.sql("SELECT * FROM nowhere")
    except FloeError as e:
        shown += [str(e), repr(e)]
    shown.append(caplog.text)
    assert "POST /api/v1/principals" not in caplog.text  # nothing made, nothing logged
    assert "GET /api/v1/whoami -> 200" in caplog.text  # the client does log its requests
    for text in shown:
        assert ROOT_SECRET not in text
        assert token not in text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(client.settings.client_secret)


def test_readme_and_examples_run(floe, installed, tmp_path):
    """Every ```python block of the README, in order in one session, then every script in
    examples/, run as a user would: configured only by the environment."""
    env = client_env(floe, installed)
    readme = (CLIENT_DIR / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 5
    script = tmp_path / "readme_session.py"
    script.write_text("\n".join(blocks))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "root" in done.stdout and "['read-data']" in done.stdout

    runs = {
        "tables_and_sql.py": [],
        "onboard_team.py": ["growth", floe.warehouse, "examples"],
        "access_review.py": [],
    }
    assert set(runs) == {p.name for p in (CLIENT_DIR / "examples").glob("*.py")}
    outputs = {}
    for name, args in runs.items():
        done = subprocess.run(
            [sys.executable, str(CLIENT_DIR / "examples" / name), *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"
        outputs[name] = done.stdout
    assert outputs["tables_and_sql.py"].split()[:3] == ["/", "2", "107.5"]
    assert "created " in outputs["onboard_team.py"] and "['list-tables', 'read-data']" in outputs["onboard_team.py"]
    assert "growth-jobs" in outputs["access_review.py"] and "readme-etl" in outputs["access_review.py"]
    assert ROOT_SECRET not in "".join(outputs.values())


def test_sql_over_tls_trusts_the_given_ca(tmp_path, installed):
    """With `--tls-cert` the Flight SQL door speaks only TLS; the client trusts the CA bundle
    given as `verify`."""
    from floe_client import FloeError
    from test_tls import write_certificates

    certs = write_certificates(tmp_path)
    floe = start_floe(tmp_path, extra_args=("--tls-cert", str(certs["cert"]), "--tls-key", str(certs["key"])))
    try:
        tls = f"grpc+tls://127.0.0.1:{floe.flight_port}"
        client = make_client(floe, flight=tls, verify=str(certs["ca"]))
        assert client.sql("SELECT 6 * 7 AS answer").to_pylist() == [{"answer": 42}]
        with pytest.raises(FloeError):
            make_client(floe, flight=tls).sql("SELECT 1")  # the system's CAs do not know this one
    finally:
        stop_floe(floe)


def test_token_refresh_margin_and_error_bodies(installed):
    """Without a server: when a token is refreshed for short and long lifetimes, and how error
    bodies of each form become exceptions."""
    from floe_client import ServerError, Unauthenticated
    from floe_client.config import resolve
    from floe_client.errors import from_body
    from floe_client.transport import TokenSource

    class Answer:
        status_code = 200

        def __init__(self, expires_in):
            self.expires_in = expires_in

        def json(self):
            return {"access_token": f"t{self.expires_in}", "token_type": "bearer", "expires_in": self.expires_in}

    class Session:
        def __init__(self, expires_in):
            self.expires_in = expires_in
            self.posts = 0

        def post(self, url, **kwargs):
            self.posts += 1
            return Answer(self.expires_in)

    now = [1000.0]
    settings = resolve(server="http://floe.invalid", client_id="id", client_secret="secret", env={})
    for lifetime, refreshed_after in ((3600, 3540.0), (10, 8.0)):
        session = Session(lifetime)
        tokens = TokenSource(settings, session, clock=lambda: now[0])
        now[0] = 1000.0
        tokens.token()
        now[0] += refreshed_after - 0.01
        tokens.token()
        assert session.posts == 1
        now[0] += 0.02
        tokens.token()
        assert session.posts == 2

    oauth = from_body(401, {"error": "invalid_client", "error_description": "unknown client"}, "")
    assert isinstance(oauth, Unauthenticated) and oauth.error_type == "invalid_client"
    internal = from_body(
        500,
        {"error": {"message": "internal server error; error id 01a25161-aea8-7518-86ad-8597ad4b4790", "type": "InternalServerError", "code": 500}},
        "",
        request_id="r1",
    )
    assert isinstance(internal, ServerError)
    assert internal.error_id == "01a25161-aea8-7518-86ad-8597ad4b4790" and internal.request_id == "r1"
    plain = from_body(502, None, "bad gateway from a proxy")
    assert plain.status == 502 and plain.message == "bad gateway from a proxy"
