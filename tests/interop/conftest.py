"""Fixtures that start a real Floe server (SQLite or PostgreSQL catalog; local or S3
warehouse) for interop tests driven by real clients."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

FLOE_BIN = os.environ.get("FLOE_BIN")
PG_URL = os.environ.get("FLOE_TEST_POSTGRES_URL")
S3_ENDPOINT = os.environ.get("FLOE_TEST_S3_ENDPOINT")
S3_BUCKET = os.environ.get("FLOE_TEST_S3_BUCKET", "floe-test")
S3_ACCESS_KEY = os.environ.get("FLOE_TEST_S3_ACCESS_KEY")
S3_SECRET_KEY = os.environ.get("FLOE_TEST_S3_SECRET_KEY")
IN_CI = bool(os.environ.get("CI"))
# Root credentials every test server is started with.
ROOT_ID = "floe-test-root"
ROOT_SECRET = "floe-test-root-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fresh_postgres_database() -> str:
    import psycopg

    name = f"floe_py_{uuid.uuid4().hex}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = PG_URL.rpartition("/")
    return f"{base}/{name}"


@dataclass
class Floe:
    process: subprocess.Popen
    base: str
    data_dir: Path
    warehouse: str
    storage: str
    backend: str
    pg_port: int = 0
    flight_port: int = 0
    database: str | None = None
    otlp_grpc_port: int = 0

    @property
    def catalog_uri(self) -> str:
        return f"{self.base}/catalog"

    @property
    def token_uri(self) -> str:
        return f"{self.catalog_uri}/v1/oauth/tokens"

    def token(self, client_id: str = ROOT_ID, client_secret: str = ROOT_SECRET) -> str:
        response = requests.post(
            self.token_uri,
            data={
                "grant_type": "client_credentials",
                "client_id": client_id,
                "client_secret": client_secret,
                "scope": "catalog",
            },
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.json()["access_token"]

    def api(self, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
        """A management or catalog request as root (or with `token`)."""
        headers = {"Authorization": f"Bearer {token or self.token()}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kwargs)

    def client_properties(self, client_id: str = ROOT_ID, client_secret: str = ROOT_SECRET) -> dict[str, str]:
        """What a client needs besides the URI: credentials, and S3 access for S3 warehouses."""
        props = {
            "warehouse": self.warehouse,
            "credential": f"{client_id}:{client_secret}",
            "oauth2-server-uri": self.token_uri,
        }
        if self.storage == "s3":
            props.update(
                {
                    "s3.endpoint": S3_ENDPOINT,
                    "s3.access-key-id": S3_ACCESS_KEY,
                    "s3.secret-access-key": S3_SECRET_KEY,
                    "s3.region": "us-east-1",
                }
            )
        return props

    def pyiceberg(self, client_id: str = ROOT_ID, client_secret: str = ROOT_SECRET):
        from pyiceberg.catalog import load_catalog

        return load_catalog(
            "floe", type="rest", uri=self.catalog_uri, **self.client_properties(client_id, client_secret)
        )


def _launch(tmp_path: Path, env, data_dir: Path, port: int, pg_port: int, flight_port: int, otlp_port: int, extra_args):
    """Starts `floe serve` and waits for /health; returns (None, None) if the process exited."""
    log = open(tmp_path / "floe.log", "wb")
    process = subprocess.Popen(
        [FLOE_BIN, "serve", "--listen", f"127.0.0.1:{port}", "--pg-listen", f"127.0.0.1:{pg_port}",
         "--flight-listen", f"127.0.0.1:{flight_port}", "--otlp-grpc-listen", f"127.0.0.1:{otlp_port}",
         *extra_args, "--data-dir", str(data_dir)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if requests.get(f"{base}/health", timeout=1).status_code == 200:
                return process, base
        except requests.RequestException:
            pass
        if process.poll() is not None:
            return None, None
        if time.time() > deadline:
            process.kill()
            raise RuntimeError(f"floe did not start: {(tmp_path / 'floe.log').read_text()}")
        time.sleep(0.05)


def _env(database: str | None):
    """The environment Floe runs in: the test's root credentials, and its catalog database
    (the data directory's SQLite one without `database`)."""
    env = dict(
        os.environ,
        FLOE_LOG=os.environ.get("FLOE_LOG", "warn"),
        FLOE_ROOT_CLIENT_ID=ROOT_ID,
        FLOE_ROOT_CLIENT_SECRET=ROOT_SECRET,
    )
    env.pop("FLOE_CATALOG_DB", None)
    if database:
        env["FLOE_CATALOG_DB"] = database
    return env


def start_floe(
    tmp_path: Path,
    backend: str = "sqlite",
    storage: str = "local",
    extra_args: tuple[str, ...] = (),
    database: str | None = None,
) -> Floe:
    """Starts Floe on a fresh catalog database, or on `database` (a PostgreSQL URL another
    node already uses: the nodes then share one store)."""
    if not FLOE_BIN:
        pytest.fail("FLOE_BIN must name the floe binary (the test script sets it)")
    if backend == "postgres" and not PG_URL:
        if IN_CI:
            pytest.fail("FLOE_TEST_POSTGRES_URL must be set in CI")
        pytest.skip("no PostgreSQL server (FLOE_TEST_POSTGRES_URL)")
    if storage == "s3" and not S3_ENDPOINT:
        if IN_CI:
            pytest.fail("FLOE_TEST_S3_ENDPOINT must be set in CI")
        pytest.skip("no S3-compatible server (FLOE_TEST_S3_ENDPOINT)")
    data_dir = tmp_path / "floe-data"
    if backend == "postgres":
        database = database or _fresh_postgres_database()
    env = _env(database if backend == "postgres" else None)
    # Free ports are picked here and bound by Floe a moment later; another process can take one
    # in between. Floe then exits saying so, and the start is retried with fresh ports.
    for attempt in range(5):
        port, pg_port, flight_port, otlp_port = _free_port(), _free_port(), _free_port(), _free_port()
        process, base = _launch(tmp_path, env, data_dir, port, pg_port, flight_port, otlp_port, extra_args)
        if process is not None:
            break
        log_text = (tmp_path / "floe.log").read_text()
        if "Address already in use" not in log_text or attempt == 4:
            raise RuntimeError(f"floe did not start: {log_text}")
    floe = Floe(process, base, data_dir, "default", storage, backend, pg_port, flight_port, database, otlp_port)
    if storage == "s3":
        floe.warehouse = "s3wh"
        response = floe.api(
            "POST",
            "/api/v1/warehouses",
            json={
                "name": floe.warehouse,
                "storage": {
                    "type": "s3",
                    "bucket": S3_BUCKET,
                    "key-prefix": f"tests/{uuid.uuid4().hex}",
                    "endpoint": S3_ENDPOINT,
                    "path-style-access": True,
                    "region": "us-east-1",
                    "access-key-id": S3_ACCESS_KEY,
                    "secret-access-key": S3_SECRET_KEY,
                },
            },
        )
        assert response.status_code == 201, response.text
    return floe


def stop_process(process: subprocess.Popen, timeout: float = 20) -> None:
    """`process` asked to stop (SIGTERM), killed if it has not within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()


def stop_floe(floe: Floe) -> None:
    stop_process(floe.process)


def restart_floe(floe: Floe, tmp_path: Path, pause: float = 2.0) -> None:
    """`floe` stopped (SIGTERM), and after `pause` seconds started again on the same data
    directory, catalog database and ports, as an operator restarts a server its clients know."""
    stop_floe(floe)
    time.sleep(pause)
    port = int(floe.base.rsplit(":", 1)[1])
    process, _ = _launch(tmp_path, _env(floe.database), floe.data_dir, port, floe.pg_port,
                         floe.flight_port, floe.otlp_grpc_port, ())
    if process is None:
        raise RuntimeError(f"floe did not start again: {(tmp_path / 'floe.log').read_text()}")
    floe.process = process


@pytest.fixture
def floe(tmp_path):
    """Floe on SQLite with its local default warehouse."""
    server = start_floe(tmp_path)
    yield server
    stop_floe(server)


@pytest.fixture(
    params=["sqlite-local", "postgres-local", "sqlite-s3", "postgres-s3"],
)
def floe_matrix(request, tmp_path):
    """Floe on every catalog database and every kind of warehouse."""
    backend, storage = request.param.split("-")
    server = start_floe(tmp_path, backend, storage)
    yield server
    stop_floe(server)
