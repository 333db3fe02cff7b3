"""Server-side scan planning (the REST spec's planTableScan, fetchPlanningResult,
cancelPlanning and fetchScanTasks): PyIceberg 0.12 and Spark with Iceberg 1.11's REST client
switched to `scan-planning-mode=server` read what they read when they plan themselves; small
tables are planned while the client waits, large ones in the background (plan id, polled),
answers paged as plan tasks; plans belong to their principal and table; bad filters are named;
nothing a client sends takes the server down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest
from attack_helpers import (
    assert_alive,
    assert_victim_untouched,
    create_table,
    make_sandboxer,
    make_victim,
    plant_victim_data_files,
)
from conftest import start_floe, stop_floe
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, Not
from test_governance import make_principal

ROWS = pa.table({
    "id": pa.array(range(40), pa.int64()),
    "city": pa.array(["oslo", "lima", "pune", "kyiv"] * 10),
    "amount": pa.array([i * 1.5 for i in range(40)], pa.float64()),
})


@pytest.fixture
def paged_floe(tmp_path):
    """Floe answering at most two file scan tasks per answer (the rest as plan tasks)."""
    server = start_floe(tmp_path, extra_args=("--scan-plan-page-files", "2"))
    yield server
    stop_floe(server)


@pytest.fixture
def background_floe(tmp_path):
    """Floe planning every scan in the background, two tasks per answer."""
    server = start_floe(tmp_path, extra_args=("--scan-plan-sync-files", "0", "--scan-plan-page-files", "2"))
    yield server
    stop_floe(server)


def server_planning(floe, client_id: str | None = None, secret: str | None = None):
    from pyiceberg.catalog import load_catalog

    props = floe.client_properties(*(a for a in (client_id, secret) if a))
    return load_catalog("floe-server-planned", type="rest", uri=floe.catalog_uri,
                        **props, **{"scan-planning-mode": "server"})


def city_table(floe, name: str = "shop.orders"):
    """A table partitioned by city, written in four appends of every city (sixteen data
    files, four per city)."""
    from pyiceberg.transforms import IdentityTransform

    catalog = floe.pyiceberg()
    namespace = name.split(".")[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    table = catalog.create_table(name, schema=ROWS.schema)
    with table.update_spec() as spec:
        spec.add_field("city", IdentityTransform(), "city")
    table = catalog.load_table(name)
    for start in range(0, 40, 10):
        table.append(ROWS.slice(start, 10))
    return catalog.load_table(name)


def plan_url(floe, table: str = "orders", namespace: str = "shop") -> str:
    return f"/catalog/v1/{floe.warehouse}/namespaces/{namespace}/tables/{table}/plan"


def tasks_url(floe, table: str = "orders", namespace: str = "shop") -> str:
    return f"/catalog/v1/{floe.warehouse}/namespaces/{namespace}/tables/{table}/tasks"


def plan_actions(floe) -> list[str]:
    records = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
    return [r["action"] for r in records if r["action"].endswith(("/plan", "/tasks", "/plan/{plan_id}"))]


def all_tasks(floe, answer: dict, token: str | None = None, table: str = "orders") -> list[dict]:
    """Every file scan task of a completed answer, following its plan tasks."""
    tasks = list(answer.get("file-scan-tasks", []))
    for plan_task in answer.get("plan-tasks", []):
        page = floe.api("POST", tasks_url(floe, table), token=token, json={"plan-task": plan_task})
        assert page.status_code == 200, page.text
        tasks += page.json()["file-scan-tasks"]
    return tasks


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_pyiceberg_reads_the_same_rows_whoever_plans(paged_floe):
    floe = paged_floe
    config = floe.api("GET", f"/catalog/v1/config?warehouse={floe.warehouse}").json()
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" in config["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks" in config["endpoints"]
    client_planned = city_table(floe)
    server_planned = server_planning(floe).load_table("shop.orders")
    filters = [
        None,
        EqualTo("city", "oslo"),
        And(GreaterThanOrEqual("id", 12), In("city", {"lima", "kyiv"})),
        Not(EqualTo("city", "pune")),
    ]
    before = len(plan_actions(floe))
    for row_filter in filters:
        scan = (lambda t: t.scan(row_filter=row_filter)) if row_filter is not None else (lambda t: t.scan())
        ours = sorted_rows(scan(server_planned).to_arrow())
        theirs = sorted_rows(scan(client_planned).to_arrow())
        assert ours == theirs, row_filter
        assert len(ours) > 0
        assert len(scan(server_planned).plan_files()) == len(scan(client_planned).plan_files()), row_filter
    # PyIceberg asked Floe, and followed the plan tasks of the paged answers.
    actions = plan_actions(floe)[before:]
    assert any(a.endswith("/plan") for a in actions), actions
    assert any(a.endswith("/tasks") for a in actions), actions

    # Floe prunes by partition and column bounds: one city's files only.
    everything = floe.api("POST", plan_url(floe), json={})
    assert everything.status_code == 200 and everything.json()["status"] == "completed", everything.text
    assert len(all_tasks(floe, everything.json())) == 16
    oslo = floe.api("POST", plan_url(floe), json={"filter": {"type": "eq", "term": "city", "value": "oslo"}})
    oslo_tasks = all_tasks(floe, oslo.json())
    assert len(oslo_tasks) == 4, oslo.text
    assert all(t["data-file"]["partition"] == ["oslo"] for t in oslo_tasks)
    assert all(t["residual-filter"] == {"type": "eq", "term": "city", "value": "oslo"} for t in oslo_tasks)
    # Time travel: the first append's snapshot holds its four files only.
    first = client_planned.metadata.snapshots[0].snapshot_id
    old = floe.api("POST", plan_url(floe), json={"snapshot-id": first})
    assert old.status_code == 200, old.text
    assert len(all_tasks(floe, old.json())) == 4


def test_large_tables_are_planned_in_the_background_and_paged(background_floe):
    floe = background_floe
    table = city_table(floe)
    submitted = floe.api("POST", plan_url(floe), json={"select": ["id", "city"]})
    assert submitted.status_code == 200, submitted.text
    assert submitted.json()["status"] == "submitted"
    plan_id = submitted.json()["plan-id"]
    for _ in range(200):
        fetched = floe.api("GET", f"{plan_url(floe)}/{plan_id}")
        assert fetched.status_code == 200, fetched.text
        if fetched.json()["status"] != "submitted":
            break
        time.sleep(0.05)
    answer = fetched.json()
    assert answer["status"] == "completed", answer
    assert len(answer["file-scan-tasks"]) == 2 and len(answer["plan-tasks"]) == 7
    paths = sorted(t["data-file"]["file-path"] for t in all_tasks(floe, answer))
    expected = sorted(f.file.file_path for f in table.scan().plan_files())
    assert paths == expected
    # Cancelled, the plan and its tasks are gone.
    assert floe.api("DELETE", f"{plan_url(floe)}/{plan_id}").status_code == 204
    assert floe.api("GET", f"{plan_url(floe)}/{plan_id}").status_code == 404
    gone = floe.api("POST", tasks_url(floe), json={"plan-task": answer["plan-tasks"][0]})
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "NoSuchPlanTaskException"
    # A plan of a bad filter fails in the background and says why.
    bad = floe.api("POST", plan_url(floe), json={"filter": {"type": "eq", "term": "nope", "value": 1}})
    assert bad.status_code == 400 and 'no column "nope"' in bad.json()["error"]["message"], bad.text


def test_plans_belong_to_their_principal_and_table(background_floe):
    floe = background_floe
    victim = make_victim(floe)
    city_table(floe)
    on_orders = {"type": "table", "warehouse": floe.warehouse, "namespace": ["shop"], "name": "orders"}
    reader_id, reader_secret = make_principal(floe, "reader", [("read-data", on_orders)])
    reader = floe.token(reader_id, reader_secret)
    peeker_id, peeker_secret = make_principal(floe, "peeker", [("read-metadata", on_orders)])
    peeker = floe.token(peeker_id, peeker_secret)
    nobody_id, nobody_secret = make_principal(floe, "nobody", [])
    nobody = floe.token(nobody_id, nobody_secret)

    # Root's plan of the victim.
    root_plan = floe.api("POST", plan_url(floe, "ledger", "finance"), json={})
    assert root_plan.status_code == 200, root_plan.text
    victim_plan = root_plan.json()["plan-id"]
    for _ in range(200):
        if floe.api("GET", f"{plan_url(floe, 'ledger', 'finance')}/{victim_plan}").json()["status"] != "submitted":
            break
        time.sleep(0.05)

    # Planning needs read-data: metadata alone is a 403, nothing at all a 404.
    assert floe.api("POST", plan_url(floe), token=peeker, json={}).status_code == 403
    assert floe.api("POST", plan_url(floe), token=nobody, json={}).status_code in (403, 404)
    assert floe.api("POST", plan_url(floe, "ledger", "finance"), token=reader, json={}).status_code == 404

    # The reader's plan of its own table is its own.
    own = floe.api("POST", plan_url(floe), token=reader, json={})
    assert own.status_code == 200, own.text
    own_id = own.json()["plan-id"]
    # Root's plan of the victim, through the victim's path or the reader's own table's: no such plan.
    for path in (plan_url(floe, "ledger", "finance"), plan_url(floe)):
        stolen = floe.api("GET", f"{path}/{victim_plan}", token=reader)
        assert stolen.status_code == 404, stolen.text
        assert floe.api("DELETE", f"{path}/{victim_plan}", token=reader).status_code == 404
    # Plan tasks of the victim's plan, real and forged, through the reader's own table.
    for token in (f"{victim_plan}.1", f"{victim_plan}.0", f"{own_id}.999", f"{own_id}.-1", f"{own_id}",
                  "../../finance/ledger.1", "x" * 10_000, f"{own_id}.1.1"):
        forged = floe.api("POST", tasks_url(floe), token=reader, json={"plan-task": token})
        assert forged.status_code == 404, (token, forged.text)
        assert "ledger" not in forged.text
    # The reader's own plan, fetched through the victim's path: no such plan either.
    assert floe.api("GET", f"{plan_url(floe, 'ledger', 'finance')}/{own_id}", token=reader).status_code == 404
    # Root's plan still stands.
    assert floe.api("GET", f"{plan_url(floe, 'ledger', 'finance')}/{victim_plan}").status_code == 200

    # Revoking the grant takes the plan away at once.
    revoke = floe.api("POST", "/api/v1/grants/revoke",
                      json={"role": "reader-role", "privilege": "read-data", "on": on_orders})
    assert revoke.status_code == 204, revoke.text
    assert floe.api("GET", f"{plan_url(floe)}/{own_id}", token=reader).status_code in (403, 404)

    # Hostile filters are named, bounded, and cost nothing.
    deep: object = {"type": "eq", "term": "id", "value": 1}
    for _ in range(200):
        deep = {"type": "not", "child": deep}
    hostile = {
        "deep": deep,
        "wide": {"type": "in", "term": "id", "values": list(range(50_000))},
        "wrong type": {"type": "eq", "term": "id", "value": "one"},
        "not an expression": "id = 1",
        "unknown column": {"type": "lt", "term": "secret_column", "value": 3},
        "no such snapshot": None,
    }
    for what, filter_ in hostile.items():
        body = {"snapshot-id": 12345} if what == "no such snapshot" else {"filter": filter_}
        answer = floe.api("POST", plan_url(floe), json=body)
        assert answer.status_code == 400, (what, answer.status_code, answer.text)
    incremental = floe.api("POST", plan_url(floe), json={"start-snapshot-id": 1, "end-snapshot-id": 2})
    assert incremental.status_code == 400 and "incremental" in incremental.text

    # Plans kept are bounded per principal: beyond eight, the oldest finished one goes.
    kept = []
    for _ in range(10):
        answer = floe.api("POST", plan_url(floe), json={})
        assert answer.status_code == 200, answer.text
        kept.append(answer.json()["plan-id"])
        for _ in range(200):
            if floe.api("GET", f"{plan_url(floe)}/{kept[-1]}").json()["status"] != "submitted":
                break
            time.sleep(0.05)
    assert floe.api("GET", f"{plan_url(floe)}/{kept[0]}").status_code == 404
    assert floe.api("GET", f"{plan_url(floe)}/{kept[-1]}").status_code == 200
    too_big = floe.api("POST", plan_url(floe), json={"filter": {"type": "eq", "term": "city", "value": "x" * 100_000}})
    assert too_big.status_code == 400 and "bytes of JSON" in too_big.text, too_big.text

    # A table whose manifest names the victim's data files plans nothing of them.
    attacker = make_sandboxer(floe)
    assert create_table(floe, attacker.token, "sandbox", "att").status_code == 200
    plant_victim_data_files(floe, attacker, "att")
    planted = floe.api("POST", plan_url(floe, "att", "sandbox"), token=attacker.token, json={})
    if planted.status_code == 200:
        plan_id = planted.json()["plan-id"]
        for _ in range(200):
            planted = floe.api("GET", f"{plan_url(floe, 'att', 'sandbox')}/{plan_id}", token=attacker.token)
            if planted.json()["status"] != "submitted":
                break
            time.sleep(0.05)
        assert planted.json()["status"] == "failed", planted.text
        assert "outside the table" in planted.json()["error"]["message"], planted.text
    else:
        assert planted.status_code == 400 and "outside the table" in planted.text, planted.text
    assert "file-scan-tasks" not in planted.text
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


SPARK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    uri, token_uri, credential, warehouse, jar = sys.argv[1:6]
    spark = (SparkSession.builder.master("local[2]").appName("floe-planning")
             .config("spark.jars", jar).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.floe", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.floe.type", "rest")
             .config("spark.sql.catalog.floe.uri", uri)
             .config("spark.sql.catalog.floe.warehouse", warehouse)
             .config("spark.sql.catalog.floe.credential", credential)
             .config("spark.sql.catalog.floe.oauth2-server-uri", token_uri)
             .config("spark.sql.catalog.floe.scan-planning-mode", "server")
             .getOrCreate())
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe.planned")
    spark.sql(\"\"\"CREATE TABLE floe.planned.events (id BIGINT, part STRING, amount DOUBLE)
                 USING iceberg PARTITIONED BY (part)
                 TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read',
                                'write.update.mode'='merge-on-read')\"\"\")
    spark.sql(\"\"\"INSERT INTO floe.planned.events SELECT id, CASE WHEN id % 2 = 0 THEN 'even'
                 ELSE 'odd' END, id * 1.5 FROM range(0, 1000)\"\"\")
    spark.sql("INSERT INTO floe.planned.events SELECT id, 'odd', id FROM range(1000, 1100)")
    spark.sql("DELETE FROM floe.planned.events WHERE id % 10 = 3")
    out = {
        "all": [list(r) for r in spark.sql("SELECT count(*), sum(id), sum(amount) FROM floe.planned.events").collect()],
        "even": [list(r) for r in spark.sql("SELECT count(*), sum(id) FROM floe.planned.events WHERE part = 'even'").collect()],
        "range": [list(r) for r in spark.sql("SELECT count(*) FROM floe.planned.events WHERE id BETWEEN 995 AND 1005").collect()],
        "delete_files": spark.sql("SELECT count(*) FROM floe.planned.events.delete_files").collect()[0][0],
    }
    print("RESULT " + json.dumps(out))
    spark.stop()
""")


@pytest.mark.spark
def test_spark_with_iceberg_1_11_plans_on_floe(floe, tmp_path):
    jars = os.environ.get("FLOE_SPARK_JARS")
    if not jars:
        if os.environ.get("CI"):
            pytest.fail("FLOE_SPARK_JARS must be set in CI (scripts/setup-spark.sh prints it)")
        pytest.skip("FLOE_SPARK_JARS is not set")
    jar = Path(jars.split(",")[0]).parent / "iceberg-spark-runtime-3.5_2.12-1.11.0.jar"
    assert jar.exists(), f"{jar} (scripts/setup-spark.sh downloads it)"
    script = tmp_path / "spark_planning.py"
    script.write_text(SPARK_SCRIPT)
    before = len(plan_actions(floe))
    run = subprocess.run(
        [sys.executable, str(script), floe.catalog_uri, floe.token_uri,
         floe.client_properties()["credential"], floe.warehouse, str(jar)],
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    line = next(l for l in run.stdout.splitlines() if l.startswith("RESULT "))
    spark = json.loads(line[len("RESULT "):])
    assert spark["delete_files"] > 0, "merge-on-read must have written delete files"
    # Spark planned through Floe: its scans went to /plan.
    assert any(a.endswith("/plan") for a in plan_actions(floe)[before:])

    def floe_sql(statement: str) -> list:
        answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
        assert answer.status_code == 200, answer.text
        return [list(r.values()) for r in answer.json()["rows"]]

    expected_all = floe_sql("SELECT count(*), sum(id), sum(amount) FROM planned.events")
    assert spark["all"] == expected_all
    assert spark["all"][0][0] == 990
    assert spark["even"] == floe_sql("SELECT count(*), sum(id) FROM planned.events WHERE part = 'even'")
    assert spark["range"] == floe_sql("SELECT count(*) FROM planned.events WHERE id BETWEEN 995 AND 1005")
    # PyIceberg, planning on the server, applies the same delete files.
    planned = server_planning(floe).load_table("planned.events").scan().to_arrow()
    assert planned.num_rows == 990
