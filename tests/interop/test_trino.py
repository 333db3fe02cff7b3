"""Trino 476's Iceberg connector against Floe's REST catalog with OAuth2 client credentials:
create, insert, MERGE (merge-on-read deletes), DELETE and time travel on a local warehouse;
create and insert on an S3 warehouse with no keys of its own, through Floe's vended
credentials; what Floe's SQL and PyIceberg wrote read by Trino and what Trino wrote read by
them, row for row; a read-only principal's Trino reads and is refused writes.

Trino comes from scripts/setup-trino.sh (server core and Iceberg plugin from Maven Central,
run on Java 25); it is driven over its HTTP protocol."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from conftest import ROOT_ID, ROOT_SECRET, S3_ENDPOINT, _free_port, start_floe, stop_floe
from test_governance import make_principal

pytestmark = pytest.mark.trino

ROOT = Path(__file__).resolve().parents[2]


def trino_install() -> tuple[str, str]:
    out = subprocess.run([str(ROOT / "scripts" / "setup-trino.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"scripts/setup-trino.sh failed: {out.stderr}")
        pytest.skip(f"Trino is not available here: {out.stderr.strip()}")
    server, java = out.stdout.split()
    return server, java


def catalog_file(floe, warehouse: str, client_id: str, secret: str, s3: bool) -> str:
    lines = [
        "connector.name=iceberg",
        "iceberg.catalog.type=rest",
        f"iceberg.rest-catalog.uri={floe.catalog_uri}",
        f"iceberg.rest-catalog.warehouse={warehouse}",
        "iceberg.rest-catalog.security=OAUTH2",
        f"iceberg.rest-catalog.oauth2.credential={client_id}:{secret}",
        f"iceberg.rest-catalog.oauth2.server-uri={floe.token_uri}",
        "iceberg.rest-catalog.oauth2.scope=catalog",
    ]
    if s3:
        # No keys here: every table's credentials are the ones Floe vends for it.
        lines += [
            "iceberg.rest-catalog.vended-credentials-enabled=true",
            "fs.native-s3.enabled=true",
            f"s3.endpoint={S3_ENDPOINT}",
            "s3.region=us-east-1",
            "s3.path-style-access=true",
        ]
    else:
        lines += ["fs.native-local.enabled=true", "local.location=/"]
    return "\n".join(lines) + "\n"


class Trino:
    def __init__(self, base: str):
        self.base = base

    def query(self, sql: str, user: str = "floe-test", catalog: str = "floe") -> list[list]:
        """Runs `sql`, following nextUri; the rows, or AssertionError with Trino's error.

        A statement Trino fails with NO_NODES_AVAILABLE is submitted again (up to 20 s): a
        single-node Trino on a loaded machine may not yet list itself as a node for a
        catalog's writers (MERGE's) a few seconds after it reports started; such a
        statement fails while scheduling, before it reads or writes anything."""
        for _ in range(20):
            try:
                return self._query(sql, user, catalog)
            except AssertionError as e:
                if "NO_NODES_AVAILABLE" not in str(e):
                    raise
                time.sleep(1)
        return self._query(sql, user, catalog)

    def _query(self, sql: str, user: str, catalog: str) -> list[list]:
        answer = requests.post(f"{self.base}/v1/statement", data=sql.encode(),
                               headers={"X-Trino-User": user, "X-Trino-Catalog": catalog}, timeout=60).json()
        rows: list[list] = []
        while True:
            if "error" in answer:
                error = answer["error"]
                raise AssertionError(f"{sql}: {error.get('message')} ({error.get('errorName')})")
            rows += answer.get("data", [])
            if "nextUri" not in answer:
                return rows
            answer = requests.get(answer["nextUri"], timeout=60).json()

    def fails(self, sql: str, catalog: str = "floe") -> str:
        with pytest.raises(AssertionError) as refused:
            self.query(sql, catalog=catalog)
        return str(refused.value)


@pytest.fixture(scope="module")
def trino_floe(tmp_path_factory):
    server, java = trino_install()
    tmp = tmp_path_factory.mktemp("trino")
    floe = start_floe(tmp_path_factory.mktemp("trino-floe"), storage="s3" if S3_ENDPOINT else "local")
    s3_warehouse = floe.warehouse if S3_ENDPOINT else None
    floe.warehouse = "default"
    reader_id, reader_secret = make_principal(floe, "trino-reader", [
        ("read-data", {"type": "warehouse", "warehouse": "default"}),
    ])
    etc = tmp / "etc"
    (etc / "catalog").mkdir(parents=True)
    port = _free_port()
    (etc / "node.properties").write_text(
        f"node.environment=test\nnode.id=floe-test\nnode.data-dir={tmp / 'data'}\n")
    (etc / "jvm.config").write_text(
        "-server\n-Xmx1G\n-XX:+UseG1GC\n-XX:+ExitOnOutOfMemoryError\n-Djdk.attach.allowAttachSelf=true\n")
    (etc / "config.properties").write_text(
        f"coordinator=true\nnode-scheduler.include-coordinator=true\nhttp-server.http.port={port}\n"
        f"discovery.uri=http://127.0.0.1:{port}\nquery.max-memory=512MB\nquery.max-memory-per-node=512MB\n")
    (etc / "catalog" / "floe.properties").write_text(catalog_file(floe, "default", ROOT_ID, ROOT_SECRET, False))
    (etc / "catalog" / "reader.properties").write_text(
        catalog_file(floe, "default", reader_id, reader_secret, False))
    if s3_warehouse:
        (etc / "catalog" / "floes3.properties").write_text(
            catalog_file(floe, s3_warehouse, ROOT_ID, ROOT_SECRET, True))
    log = open(tmp / "trino.log", "wb")
    process = subprocess.Popen(
        [f"{server}/bin/launcher", "run", f"--etc-dir={etc}", f"--data-dir={tmp / 'data'}"],
        env=dict(os.environ, JAVA_HOME=java, PATH=f"{java}/bin:{os.environ['PATH']}"),
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            if requests.get(f"{base}/v1/info", timeout=2).json().get("starting") is False:
                break
        except (requests.RequestException, ValueError):
            pass
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            raise RuntimeError(f"Trino did not start: {(tmp / 'trino.log').read_text()[-4000:]}")
        time.sleep(0.5)
    yield Trino(base), floe, s3_warehouse
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    stop_floe(floe)


def floe_rows(floe, sql: str, warehouse: str = "default") -> list[list]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": warehouse})
    assert answer.status_code == 200, answer.text
    return [list(r.values()) for r in answer.json()["rows"]]


def test_trino_creates_inserts_merges_deletes_and_time_travels(trino_floe):
    trino, floe, _ = trino_floe
    # A schema created without a location: Floe's answer names the default one.
    trino.query("CREATE SCHEMA floe.tr")
    trino.query("""CREATE TABLE floe.tr.accounts (id BIGINT, owner VARCHAR, balance DOUBLE, city VARCHAR)
                   WITH (partitioning = ARRAY['city'], format_version = 2)""")
    trino.query("""INSERT INTO floe.tr.accounts VALUES (1, 'ana', 10.0, 'oslo'), (2, 'bo', 20.0, 'lima'),
                   (3, 'cy', 30.0, 'oslo'), (4, 'di', 40.0, 'pune')""")
    first = trino.query('SELECT snapshot_id FROM floe.tr."accounts$snapshots" ORDER BY committed_at DESC LIMIT 1')[0][0]
    trino.query("""MERGE INTO floe.tr.accounts t
                   USING (VALUES (2, 'bo', 25.0, 'lima'), (5, 'ed', 50.0, 'kyiv')) AS s(id, owner, balance, city)
                   ON t.id = s.id
                   WHEN MATCHED THEN UPDATE SET balance = s.balance
                   WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.owner, s.balance, s.city)""")
    trino.query("DELETE FROM floe.tr.accounts WHERE id = 3")
    expected = [[1, "ana", 10.0, "oslo"], [2, "bo", 25.0, "lima"], [4, "di", 40.0, "pune"], [5, "ed", 50.0, "kyiv"]]
    assert trino.query("SELECT * FROM floe.tr.accounts ORDER BY id") == expected
    # Merge-on-read: the update and the delete are delete files, which every reader applies.
    assert trino.query('SELECT count(*) FROM floe.tr."accounts$files" WHERE content <> 0')[0][0] > 0
    assert floe_rows(floe, "SELECT id, owner, balance, city FROM tr.accounts ORDER BY id") == expected
    pyiceberg = floe.pyiceberg().load_table("tr.accounts").scan().to_arrow().sort_by("id")
    assert [list(r.values()) for r in pyiceberg.to_pylist()] == expected
    # Planned by Floe (`/plan`, Trino's delete files included), read by PyIceberg: the same rows.
    from test_scan_planning import server_planning

    planned = server_planning(floe).load_table("tr.accounts").scan().to_arrow().sort_by("id")
    assert [list(r.values()) for r in planned.to_pylist()] == expected
    # Time travel to the first insert.
    old = trino.query(f"SELECT id, balance FROM floe.tr.accounts FOR VERSION AS OF {first} ORDER BY id")
    assert old == [[1, 10.0], [2, 20.0], [3, 30.0], [4, 40.0]]
    assert floe_rows(floe, f'SELECT id, balance FROM tr."accounts@snapshot={first}" ORDER BY id') == old


def test_trino_reads_what_floe_and_pyiceberg_wrote(trino_floe):
    trino, floe, _ = trino_floe
    catalog = floe.pyiceberg()
    catalog.create_namespace("written")
    table = catalog.create_table("written.by_pyiceberg", schema=pa.schema([("id", pa.int64()), ("tag", pa.string())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "tag": ["a", "b", None]}))
    table.delete("id = 2")
    assert trino.query("SELECT id, tag FROM floe.written.by_pyiceberg ORDER BY id") == [[1, "a"], [3, None]]
    answer = floe.api("POST", "/api/v1/sql", json={"warehouse": "default", "sql":
        "CREATE TABLE written.by_floe AS SELECT CAST(x AS BIGINT) AS id, x * 2.5 AS v FROM (VALUES (1), (2), (3)) AS t(x)"})
    assert answer.status_code == 200, answer.text
    assert trino.query("SELECT id, v FROM floe.written.by_floe ORDER BY id") == [[1, 2.5], [2, 5.0], [3, 7.5]]
    # And a CTAS of Trino's over both, read back by Floe.
    trino.query("""CREATE TABLE floe.written.by_trino AS
                   SELECT p.id, p.tag, f.v FROM floe.written.by_pyiceberg p JOIN floe.written.by_floe f ON p.id = f.id""")
    assert floe_rows(floe, "SELECT id, tag, v FROM written.by_trino ORDER BY id") == [[1, "a", 2.5], [3, None, 7.5]]


def test_trino_on_s3_uses_floes_vended_credentials(trino_floe):
    trino, floe, s3_warehouse = trino_floe
    if not s3_warehouse:
        if os.environ.get("CI"):
            pytest.fail("FLOE_TEST_S3_ENDPOINT must be set in CI")
        pytest.skip("no S3-compatible server")
    # Trino 476 lists a new table's location before creating it, with no table (and so no
    # vended credentials) yet: on S3 with no keys of its own it cannot create tables. Floe
    # creates it; Trino writes, deletes and reads with what Floe vends.
    for statement in ("CREATE SCHEMA lake", "CREATE TABLE lake.events (id BIGINT, kind VARCHAR)"):
        made = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": s3_warehouse})
        assert made.status_code == 200, made.text
    trino.query("INSERT INTO floes3.lake.events VALUES (1, 'click'), (2, 'view'), (3, 'click')", catalog="floes3")
    trino.query("DELETE FROM floes3.lake.events WHERE id = 2", catalog="floes3")
    assert trino.query("SELECT kind, count(*) FROM floes3.lake.events GROUP BY kind", catalog="floes3") == [["click", 2]]
    assert floe_rows(floe, "SELECT id, kind FROM lake.events ORDER BY id", s3_warehouse) == [[1, "click"], [3, "click"]]


def test_a_read_only_principals_trino_reads_and_cannot_write(trino_floe):
    trino, floe, _ = trino_floe
    trino.query("CREATE SCHEMA IF NOT EXISTS floe.guarded")
    trino.query("CREATE TABLE floe.guarded.ledger AS SELECT 1 AS id, 100 AS cents")
    assert trino.query("SELECT id, cents FROM reader.guarded.ledger", catalog="reader") == [[1, 100]]
    refused = trino.fails("INSERT INTO reader.guarded.ledger VALUES (2, 200)", catalog="reader")
    assert "Forbidden" in refused or "403" in refused or "lacks" in refused, refused
    trino.fails("DROP TABLE reader.guarded.ledger", catalog="reader")
    trino.fails("CREATE TABLE reader.guarded.planted (id BIGINT)", catalog="reader")
    # Nothing changed.
    assert floe_rows(floe, "SELECT id, cents FROM guarded.ledger") == [[1, 100]]
    listed = floe.api("GET", f"/catalog/v1/default/namespaces/guarded/tables")
    assert [i["name"] for i in listed.json()["identifiers"]] == ["ledger"]


def test_trino_reads_floes_upsert_tables_as_the_newest_row_per_key(trino_floe):
    """Floe's upserts (issue 39) are data files plus position deletes in the same snapshot
    (format v2): Trino applies them and reads the newest row per key. (Format v3's deletion
    vectors are Puffin files, which Trino 476 does not read: "Unexpected PUFFIN file format",
    for Spark's v3 deletes as for Floe's — docs/upsert.md.)"""
    from test_upsert import keyed_table, upsert

    trino, floe, _ = trino_floe
    catalog = floe.pyiceberg()
    catalog.create_namespace("ups")
    for version in ("2",):
        table = f"ups.v{version}"
        keyed_table(floe, table, format_version=version)
        upsert(floe, table, [{"id": i, "name": f"n{i}", "score": i} for i in range(8)])
        upsert(floe, table, [{"id": 1, "name": "one", "score": 10}, {"id": 9, "name": "n9", "score": 9}])
        upsert(floe, table, [{"id": 2, "name": "two", "score": 20}, {"id": 1, "name": "uno", "score": 11}])
        upsert(floe, table, [{"id": 3}, {"id": 9}], op="delete")
        expected = [[i, {1: "uno", 2: "two"}.get(i, f"n{i}"), {1: 11, 2: 20}.get(i, i)] for i in range(8) if i != 3]
        assert floe_rows(floe, f"SELECT id, name, score FROM {table} ORDER BY id") == expected
        assert trino.query(f"SELECT id, name, score FROM floe.{table} ORDER BY id") == expected, version
        # The deletes are delete files Trino sees as such, not rewritten data.
        assert trino.query(f'SELECT count(*) FROM floe.ups."v{version}$files" WHERE content = 1')[0][0] > 0
