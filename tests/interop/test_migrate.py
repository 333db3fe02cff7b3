"""`floe migrate` from Iceberg JDBC catalogs (PyIceberg's SqlCatalog on SQLite and on
PostgreSQL), another Iceberg REST catalog (a second Floe) and a directory of metadata files:
dry run, waves, verification, a kill -9 in the middle of a wave, rollback. The Hive Metastore
source is tested in test_migrate_hive.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FLOE_BIN, PG_URL, ROOT_ID, ROOT_SECRET, IN_CI, start_floe, stop_floe
from duckdb_ext import connect
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "region", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="region"))


def batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids]),
            "region": pa.array(["eu" if i % 3 else "us" for i in ids]),
        }
    )


def sql_catalog(uri: str, warehouse: Path) -> SqlCatalog:
    return SqlCatalog("legacy", uri=uri, warehouse=f"file://{warehouse}")


def fill(catalog: SqlCatalog, tables: dict[str, int]) -> None:
    """Creates `namespace.table` with that many appends of 10 rows each."""
    for name, appends in tables.items():
        ns = name.rsplit(".", 1)[0]
        try:
            catalog.create_namespace(ns)
        except Exception:
            pass
        table = catalog.create_table(name, SCHEMA, partition_spec=SPEC)
        for a in range(appends):
            table.append(batch(a * 10, 10))


def write_plan(path: Path, source: dict, waves: list[dict], mapping: dict | None = None,
               on_conflict: str = "fail", name: str = "legacy-move") -> Path:
    lines = [f'name = "{name}"', "", "[source]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in source.items()]
    lines += ["", "[target]", 'warehouse = "default"', f'on-conflict = "{on_conflict}"', ""]
    if mapping:
        lines.append("[mapping]")
        lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in mapping.items()]
        lines.append("")
    for wave in waves:
        lines.append("[[waves]]")
        lines += [f"{k.replace('_', '-')} = {json.dumps(v)}" for k, v in wave.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def migrate(floe, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    done = subprocess.run([FLOE_BIN, "migrate", *args, "--server", floe.base], env=env,
                          capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def migrate_json(floe, *args: str):
    return json.loads(migrate(floe, *args, "--json").stdout)


def rows_of(table) -> list[tuple]:
    data = table.scan().to_arrow().sort_by("id")
    return list(zip(*(data.column(c).to_pylist() for c in ("id", "name", "region"))))


def floe_namespaces(floe) -> list[list[str]]:
    answer = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces").json()
    return answer["namespaces"]


def test_sqlite_jdbc_catalog_moves_in_waves_verified_and_rolled_back(floe, tmp_path):
    # The legacy catalog's files lie inside Floe's warehouse, where Floe may read them.
    legacy_files = floe.data_dir / "warehouse" / "legacy"
    legacy_files.mkdir(parents=True)
    db = tmp_path / "legacy.db"
    legacy = sql_catalog(f"sqlite:///{db}", legacy_files)
    fill(legacy, {"sales.orders": 3, "sales.customers": 1, "web.events": 2})
    plan = write_plan(
        tmp_path / "plan.toml",
        {"kind": "jdbc", "uri": f"sqlite:///{db}", "catalog": "legacy"},
        [{"tables": ["sales.*"]}, {"tables": ["web.*"]}],
        mapping={"sales": "finance.sales"},
    )

    # The dry run says what would happen, per table, and changes nothing.
    planned = migrate_json(floe, "plan", "--plan", str(plan))
    assert [(p["source"], p["wave"], p["step"]) for p in planned] == [
        ("sales.customers", 1, "register"),
        ("sales.orders", 1, "register"),
        ("web.events", 2, "register"),
    ]
    assert planned[1]["target"] == "default.finance.sales.orders"
    assert floe_namespaces(floe) == []

    outcomes = migrate_json(floe, "run", "--wave", "1", "--plan", str(plan))
    assert {o["source"]: o["step"] for o in outcomes} == {
        "sales.customers": "migrated", "sales.orders": "migrated"}
    catalog = floe.pyiceberg()
    moved = catalog.load_table("finance.sales.orders")
    assert rows_of(moved) == rows_of(legacy.load_table("sales.orders"))
    assert len(rows_of(moved)) == 30
    assert moved.metadata_location == legacy.load_table("sales.orders").metadata_location
    # Wave 2 has not moved.
    assert not catalog.table_exists("web.events")

    # DuckDB reads the moved table through Floe, row for row.
    con = connect()
    con.execute(
        f"""CREATE SECRET floe_auth (TYPE iceberg, CLIENT_ID '{ROOT_ID}', CLIENT_SECRET '{ROOT_SECRET}',
            OAUTH2_SERVER_URI '{floe.token_uri}')"""
    )
    con.execute(f"ATTACH '{floe.warehouse}' AS floe (TYPE iceberg, ENDPOINT '{floe.catalog_uri}', SECRET floe_auth)")
    duck = con.execute('SELECT id, name, region FROM floe."finance.sales".orders ORDER BY id').fetchall()
    assert duck == rows_of(moved)

    # Verification: every check passes, the deep read counts every row; text and JSON reports.
    report_path = tmp_path / "report"
    report = migrate_json(floe, "verify", "--deep", "--report", str(report_path), "--plan", str(plan))
    assert report["passed"], report
    orders = next(t for t in report["tables"] if t["source"] == "sales.orders")
    names = {c["name"]: c for c in orders["checks"]}
    assert {"snapshot", "schema", "partition-spec", "total-records", "rows-read", "rows-source",
            "column-checksums"} <= set(names)
    # Both sides read every row: Floe through its SQL, the source from its own metadata file.
    assert orders["read"]["floe"]["rows"] == orders["read"]["source"]["rows"] == 30
    assert [c["name"] for c in orders["read"]["floe"]["columns"]] == ["id", "name", "region"]
    assert orders["read"]["floe"]["columns"] == orders["read"]["source"]["columns"]
    assert orders["read"]["floe"]["columns"][0]["non-null"] == 30
    text = (tmp_path / "report.txt").read_text()
    assert "PASS sales.orders -> default.finance.sales.orders" in text
    assert json.loads((tmp_path / "report.json").read_text())["passed"]

    # A write through Floe after the migration, then a rollback of the wave: Floe is as before,
    # the source untouched, and the rollback names the write it leaves out.
    moved.append(batch(1000, 5))
    source_location = legacy.load_table("sales.orders").metadata_location
    outcomes = migrate_json(floe, "rollback", "--wave", "1", "--plan", str(plan))
    by_source = {o["source"]: o for o in outcomes}
    assert by_source["sales.orders"]["step"] == "rolled-back"
    assert "1 snapshot(s) written in Floe since the migration" in by_source["sales.orders"]["detail"]
    assert "no writes in Floe" in by_source["sales.customers"]["detail"]
    assert not catalog.table_exists("finance.sales.orders")
    assert floe_namespaces(floe) == []
    assert legacy.load_table("sales.orders").metadata_location == source_location
    assert len(rows_of(legacy.load_table("sales.orders"))) == 30

    status = migrate_json(floe, "status", "--plan", str(plan))
    assert {s["source"]: s["state"]["step"] for s in status} == {
        "sales.customers": "rolled-back", "sales.orders": "rolled-back"}

    # The wave runs again after its rollback.
    migrate(floe, "run", "--wave", "1", "--plan", str(plan))
    assert len(rows_of(catalog.load_table("finance.sales.orders"))) == 30


def test_a_killed_wave_completes_on_the_next_run_with_nothing_doubled(floe, tmp_path):
    legacy_files = floe.data_dir / "warehouse" / "legacy"
    legacy_files.mkdir(parents=True)
    db = tmp_path / "legacy.db"
    legacy = sql_catalog(f"sqlite:///{db}", legacy_files)
    names = [f"bulk.t{i:03d}" for i in range(60)]
    fill(legacy, {name: 1 for name in names})
    plan = write_plan(tmp_path / "plan.toml", {"kind": "jdbc", "uri": f"sqlite:///{db}", "catalog": "legacy"},
                      [{"tables": ["bulk.*"]}])
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    process = subprocess.Popen([FLOE_BIN, "migrate", "run", "--wave", "1", "--plan", str(plan),
                                "--server", floe.base], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    # Killed once some tables moved and before all did.
    deadline = time.time() + 120
    while time.time() < deadline:
        records = floe.api("GET", "/api/v1/migrations/legacy-move").json()["tables"]
        if sum(1 for r in records if r["state"]["step"] == "migrated") >= 5:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    records = floe.api("GET", "/api/v1/migrations/legacy-move").json()["tables"]
    moved_before = sum(1 for r in records if r["state"]["step"] == "migrated")
    assert 5 <= moved_before < 60, moved_before

    outcomes = migrate_json(floe, "run", "--wave", "1", "--plan", str(plan))
    steps = [o["step"] for o in outcomes]
    assert steps.count("failed") == 0, outcomes
    assert steps.count("unchanged") >= moved_before
    catalog = floe.pyiceberg()
    listed = sorted(".".join(t) for t in catalog.list_tables("bulk"))
    assert listed == names
    for name in names[:: 7]:
        assert len(rows_of(catalog.load_table(name))) == 10
    records = floe.api("GET", "/api/v1/migrations/legacy-move").json()["tables"]
    assert len(records) == 60 and all(r["state"]["step"] == "migrated" for r in records)
    report = migrate_json(floe, "verify", "--plan", str(plan))
    assert report["passed"] and len(report["tables"]) == 60

    # The rollback returns both sides to their state before the wave.
    source_locations = {n: legacy.load_table(n).metadata_location for n in names}
    rolled = migrate_json(floe, "rollback", "--wave", "1", "--plan", str(plan))
    assert len(rolled) == 60 and {o["step"] for o in rolled} == {"rolled-back"}
    assert ["bulk"] not in [list(n) for n in catalog.list_namespaces()]
    assert {n: legacy.load_table(n).metadata_location for n in names} == source_locations


def test_postgres_jdbc_catalog_is_a_source(floe, tmp_path):
    if not PG_URL:
        if IN_CI:
            pytest.fail("FLOE_TEST_POSTGRES_URL must be set in CI")
        pytest.skip("no PostgreSQL server (FLOE_TEST_POSTGRES_URL)")
    import psycopg

    database = f"legacy_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    with psycopg.connect(PG_URL, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{database}"')
    url = PG_URL.rsplit("/", 1)[0] + f"/{database}"
    legacy_files = floe.data_dir / "warehouse" / "pg-legacy"
    legacy_files.mkdir(parents=True)
    legacy = sql_catalog(url.replace("postgres://", "postgresql+psycopg://", 1), legacy_files)
    fill(legacy, {"crm.accounts": 2})
    plan = write_plan(tmp_path / "plan.yaml.toml", {"kind": "jdbc", "uri": url, "catalog": "legacy"},
                      [{"tables": ["crm.*"]}])
    # The same plan as YAML.
    yaml_plan = tmp_path / "plan.yaml"
    yaml_plan.write_text(
        "name: legacy-move\n"
        f"source: {{kind: jdbc, uri: '{url}', catalog: legacy}}\n"
        "target: {warehouse: default}\n"
        "waves:\n  - tables: ['crm.*']\n"
    )
    assert plan.exists()
    migrate(floe, "run", "--wave", "1", "--plan", str(yaml_plan))
    moved = floe.pyiceberg().load_table("crm.accounts")
    assert rows_of(moved) == rows_of(legacy.load_table("crm.accounts"))
    assert migrate_json(floe, "verify", "--deep", "--plan", str(yaml_plan))["passed"]


def test_a_rest_catalog_and_a_metadata_directory_are_sources(floe, tmp_path):
    # Another REST catalog: a second Floe whose warehouse lies inside this one's.
    source_root = floe.data_dir / "warehouse" / "other-floe"
    source_root.mkdir(parents=True)
    source = start_floe(source_root)
    try:
        other = source.pyiceberg()
        other.create_namespace("ops")
        table = other.create_table("ops.jobs", SCHEMA, partition_spec=SPEC)
        table.append(batch(0, 25))
        plan = write_plan(tmp_path / "rest.toml",
                          {"kind": "rest", "uri": source.catalog_uri, "catalog": "default",
                           "credential-env": "LEGACY_CREDENTIAL"},
                          [{"tables": ["ops.*"]}], name="rest-move")
        os.environ["LEGACY_CREDENTIAL"] = f"{ROOT_ID}:{ROOT_SECRET}"
        try:
            migrate(floe, "run", "--wave", "1", "--plan", str(plan))
            assert migrate_json(floe, "verify", "--plan", str(plan))["passed"]
        finally:
            del os.environ["LEGACY_CREDENTIAL"]
        assert rows_of(floe.pyiceberg().load_table("ops.jobs")) == rows_of(table)
    finally:
        stop_floe(source)

    # A directory of tables (here PyIceberg's layout, `<namespace>.db/<table>/metadata/`).
    directory = floe.data_dir / "warehouse" / "dir-source"
    directory.mkdir(parents=True)
    writer = sql_catalog(f"sqlite:///{tmp_path / 'scratch.db'}", directory)
    fill(writer, {"shop.items": 2, "shop.prices": 1})
    plan = write_plan(tmp_path / "dir.toml", {"kind": "directory", "uri": str(directory)},
                      [{"tables": ["shop.items"]}, {"tables": ["shop.*"]}], mapping={"shop": "store"}, name="dir-move")
    planned = migrate_json(floe, "plan", "--plan", str(plan))
    assert [(p["source"], p["wave"], p["target"]) for p in planned] == [
        ("shop.items", 1, "default.store.items"), ("shop.prices", 2, "default.store.prices")]
    migrate(floe, "run", "--wave", "1", "--plan", str(plan))
    migrate(floe, "run", "--wave", "2", "--plan", str(plan))
    catalog = floe.pyiceberg()
    assert rows_of(catalog.load_table("store.items")) == rows_of(writer.load_table("shop.items"))
    assert len(rows_of(catalog.load_table("store.prices"))) == 10
    assert migrate_json(floe, "verify", "--plan", str(plan))["passed"]
