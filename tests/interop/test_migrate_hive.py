"""`floe migrate` off a real Apache Hive Metastore (4.0.1, started by scripts/start-hms.sh):
Spark writes an Iceberg table and Hive Parquet tables into it; Floe registers the Iceberg
table and converts the Hive tables in place; Spark, PyIceberg, DuckDB and Floe's SQL read them
through Floe row for row as Spark read them through the metastore. Then the source gains rows
and `sync` takes them, a cut-over points the metastore at Floe, and a rollback returns both
sides to their state before the wave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IN_CI, ROOT_ID, ROOT_SECRET, _free_port
from duckdb_ext import connect
from test_migrate import migrate, migrate_json, write_plan

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def spark_job(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(HERE / "hms_spark.py"), *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def hms(tmp_path):
    if not os.environ.get("FLOE_SPARK_JARS"):
        if IN_CI:
            pytest.fail("FLOE_SPARK_JARS must be set in CI (scripts/setup-spark.sh prints it)")
        pytest.skip("FLOE_SPARK_JARS is not set")
    directory = tmp_path / "hms"
    uri = subprocess.check_output([str(ROOT / "scripts/start-hms.sh"), str(directory), str(_free_port())],
                                  text=True, timeout=300).strip()
    yield uri
    pid = (directory / "hms.pid").read_text().strip()
    subprocess.run(["kill", pid], check=False)


def floe_sql(floe, sql: str) -> list[list]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": floe.warehouse}).json()
    assert "error" not in answer, answer
    return [list(r.values()) for r in answer["rows"]]


def test_hive_metastore_tables_move_sync_cut_over_and_roll_back(floe, hms, tmp_path):
    # The metastore's tables live inside Floe's warehouse, where Floe may read and write.
    location = f"file:{floe.data_dir / 'warehouse' / 'hms'}"
    before = spark_job("write", hms, location)
    assert len(before["legacy.events"]) == 4

    plan = write_plan(
        tmp_path / "plan.toml",
        {"kind": "hive", "uri": hms},
        [{"tables": ["legacy.plain"]},
         {"tables": ["legacy.*"], "sync": ["legacy.events", "legacy.ice_events"], "cut_over": True}],
        mapping={"legacy": "old"},
        name="hms-move",
    )
    planned = {p["source"]: p["step"] for p in migrate_json(floe, "plan", "--plan", str(plan))}
    assert planned == {"legacy.plain": "convert", "legacy.events": "convert", "legacy.ice_events": "register"}
    migrate(floe, "run", "--wave", "1", "--plan", str(plan))
    migrate(floe, "run", "--wave", "2", "--plan", str(plan))

    # Through Floe, every engine reads what Spark read through the metastore.
    through_floe = spark_job("floe", floe.catalog_uri, f"{ROOT_ID}:{ROOT_SECRET}", floe.token_uri)
    assert through_floe == before
    catalog = floe.pyiceberg()
    for name, columns in (("events", ["id", "name", "amount", "day"]), ("plain", ["id", "name"]),
                          ("ice_events", ["id", "name", "amount", "day"])):
        data = catalog.load_table(f"old.{name}").scan().to_arrow().sort_by("id")
        assert [list(r) for r in zip(*(data.column(c).to_pylist() for c in columns))] == before[f"legacy.{name}"]
        assert floe_sql(floe, f"SELECT {', '.join(columns)} FROM old.{name} ORDER BY id") == before[f"legacy.{name}"]
    con = connect()
    con.execute(f"""CREATE SECRET floe_auth (TYPE iceberg, CLIENT_ID '{ROOT_ID}', CLIENT_SECRET '{ROOT_SECRET}',
                    OAUTH2_SERVER_URI '{floe.token_uri}')""")
    con.execute(f"ATTACH '{floe.warehouse}' AS floe (TYPE iceberg, ENDPOINT '{floe.catalog_uri}', SECRET floe_auth)")
    duck = con.execute("SELECT id, name, amount, day FROM floe.old.events ORDER BY id").fetchall()
    assert [list(r) for r in duck] == before["legacy.events"]

    # The converted table's files are the Hive table's too: Floe deletes none of them.
    converted = catalog.load_table("old.events")
    assert converted.properties["gc.enabled"] == "false"
    assert converted.properties["floe.migration.source"] == "legacy.events"
    refused = floe.api("POST", "/api/v1/maintenance/remove-orphan-files",
                       json={"warehouse": floe.warehouse, "namespace": ["old"], "table": "events",
                             "older-than-ms": 10**12, "dry-run": False})
    assert refused.status_code == 400 and "gc.enabled=false" in refused.text, refused.text

    report = migrate_json(floe, "verify", "--deep", "--plan", str(plan))
    assert report["passed"], report
    events = next(t for t in report["tables"] if t["source"] == "legacy.events")
    # The Hive side read from its partitions' Parquet files, partition values from the
    # metastore: every column's non-null count and checksum as Floe's.
    assert events["read"]["floe"]["rows"] == events["read"]["source"]["rows"] == 4
    by_name = {c["name"]: c for c in events["read"]["source"]["columns"]}
    assert by_name["name"]["non-null"] == 3 and by_name["day"]["non-null"] == 4
    assert events["read"]["floe"]["columns"] == events["read"]["source"]["columns"]

    # The source keeps being written until cut-over: until sync takes the new rows, the deep
    # read of both sides names the difference (the metadata checks of the Hive table do not).
    after = spark_job("append", hms, location)
    stale = migrate(floe, "verify", "--deep", "--json", "--plan", str(plan), check=False)
    assert stale.returncode != 0
    stale_events = next(t for t in json.loads(stale.stdout)["tables"] if t["source"] == "legacy.events")
    failed = {c["name"]: c["detail"] for c in stale_events["checks"] if not c["passed"]}
    assert set(failed) == {"rows-source", "column-checksums"}, stale_events
    assert failed["rows-source"] == "5 rows read from the source, 4 through Floe"
    synced = {o["source"]: o for o in migrate_json(floe, "sync", "--plan", str(plan))}
    assert synced["legacy.events"]["step"] == "synced", synced
    assert synced["legacy.events"]["detail"].startswith("1 new files"), synced
    assert synced["legacy.ice_events"]["step"] == "synced", synced
    assert spark_job("floe", floe.catalog_uri, f"{ROOT_ID}:{ROOT_SECRET}", floe.token_uri) == after
    assert migrate_json(floe, "verify", "--deep", "--plan", str(plan))["passed"]

    # Cut-over: the metastore's tables point at Floe, what they held kept for a rollback.
    cut = migrate_json(floe, "cutover", "--wave", "2", "--plan", str(plan))
    assert {o["step"] for o in cut} == {"cut-over"}, cut
    params = spark_job("params", hms, location)
    assert params["legacy.events"]["floe.migrated-to"] == "default.old.events"
    ice_location = catalog.load_table("old.ice_events").metadata_location
    assert params["legacy.ice_events"]["metadata_location"] == ice_location

    # Rollback of wave 2: the metastore's parameters as before, Floe without the wave's tables
    # (wave 1's stays), and the source reads as it did.
    rolled = migrate_json(floe, "rollback", "--wave", "2", "--plan", str(plan))
    assert {o["step"] for o in rolled} == {"rolled-back"}, rolled
    params = spark_job("params", hms, location)
    assert "floe.migrated-to" not in params["legacy.events"]
    assert "floe.migrated-to" not in params["legacy.ice_events"]
    assert not catalog.table_exists("old.events") and not catalog.table_exists("old.ice_events")
    assert catalog.table_exists("old.plain")
    assert spark_job("read", hms, location) == after
