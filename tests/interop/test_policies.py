"""Row and column policies (docs/governance.md#row-and-column-policies): a principal whose role
has a policy on a table reads only the rows its filter keeps and the columns as masked, through
every front door (HTTP, the PostgreSQL wire, Flight SQL, `floe sql`), whatever the query tries;
and it is refused the table's raw files (vended credentials, remote signing, scan planning) and
its metadata tables."""

from __future__ import annotations

import copy
import hashlib
import subprocess
import time

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import pytest
import requests
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET
from pyiceberg.types import StringType
from test_governance import make_principal

PEOPLE = {
    "id": [1, 2, 3, 4, 5, 6],
    "name": ["ada", "bo", "cy", "di", "ed", "flo"],
    "region": ["EU", "US", "EU", "US", "EU", "APAC"],
    "ssn": ["111", "222", "333", "444", "555", "666"],
    "salary": [51234, 0, 73999, 0, 64000, 58000],
    "notes": ["a", "b", "c", "d", "e", "f"],
}
EU = [i for i, r in zip(PEOPLE["id"], PEOPLE["region"]) if r == "EU"]
TABLE = {"type": "table", "warehouse": "default", "namespace": ["hr"], "name": "people"}
POLICY = {
    "role": "analyst-role",
    "table": TABLE,
    "row-filter": "region = 'EU'",
    "masks": [
        {"column": "ssn", "mask": "null"},
        {"column": "name", "mask": "hash"},
        {"column": "salary", "mask": "expression", "expression": "salary / 1000 * 1000"},
        {"column": "notes", "mask": "hide"},
    ],
}
QUERY = "SELECT id, name, region, ssn, salary FROM hr.people ORDER BY id"


def expected_rows() -> list[list]:
    rows = []
    for i, name, region, salary in zip(PEOPLE["id"], PEOPLE["name"], PEOPLE["region"], PEOPLE["salary"]):
        if region == "EU":
            rows.append([i, hashlib.sha256(name.encode()).hexdigest(), region, None, salary // 1000 * 1000])
    return rows


@pytest.fixture
def governed(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("hr")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("region", pa.string()), ("ssn", pa.string()),
                        ("salary", pa.int64()), ("notes", pa.string())])
    catalog.create_table("hr.people", schema=schema).append(pa.table(PEOPLE, schema=schema))
    catalog.create_table("hr.known", schema=pa.schema([("ssn", pa.string())])).append(
        pa.table({"ssn": PEOPLE["ssn"]}, schema=pa.schema([("ssn", pa.string())])))
    on_hr = {"type": "namespace", "warehouse": "default", "namespace": ["hr"]}
    analyst = make_principal(floe, "analyst", [("read-data", on_hr), ("write-data", on_hr)])
    answer = floe.api("PUT", "/api/v1/policies", json=POLICY)
    assert answer.status_code == 204, answer.text
    return floe, analyst


def http_sql(floe, token, statement):
    return floe.api("POST", "/api/v1/sql", token=token, json={"sql": statement, "warehouse": "default"})


def http_rows(floe, token, statement) -> list[list]:
    answer = http_sql(floe, token, statement)
    assert answer.status_code == 200, answer.text
    return [list(r.values()) for r in answer.json()["rows"]]


def test_every_front_door_reads_filtered_rows_and_masked_columns(governed, tmp_path):
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    expected = expected_rows()
    assert http_rows(floe, token, QUERY) == expected
    # Root holds no role: unrestricted.
    assert len(http_rows(floe, None, QUERY)) == len(PEOPLE["id"])

    with psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=client_id, password=secret,
                         dbname="default", connect_timeout=10) as conn:
        assert [list(r) for r in conn.execute(QUERY).fetchall()] == expected

    db_kwargs = {"username": client_id, "password": secret}
    with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
        with conn.cursor() as cursor:
            cursor.execute(QUERY)
            table = cursor.fetch_arrow_table()
    assert [list(r.values()) for r in table.to_pylist()] == expected

    cli = subprocess.run([FLOE_BIN, "sql", "--server", floe.base, "--client-id", client_id, "--client-secret", secret,
                          "--format", "csv", "-e", QUERY], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[1:] == [",".join("" if v is None else str(v) for v in row) for row in expected]

    # The hidden column is not there to name; * does not show it.
    missing = http_sql(floe, token, "SELECT notes FROM hr.people")
    assert missing.status_code == 400 and "notes" in missing.text
    star = http_rows(floe, token, "SELECT * FROM hr.people ORDER BY id")
    assert star == expected

    # The statement's audit record names the policy it read under.
    for _ in range(50):
        records = floe.api("GET", "/api/v1/audit?principal=analyst&limit=1000").json()["records"]
        if any("policies" in (r.get("details") or "") for r in records):
            break
        time.sleep(0.1)
    assert any("hr.people (roles analyst-role)" in (r.get("details") or "") for r in records), records


ATTACKS = [
    # What a query may try: every answer is the filtered, masked table's.
    ("SELECT count(*) FROM hr.people", [[len(EU)]]),
    ("SELECT count(*) FROM hr.people WHERE region = 'US'", [[0]]),
    ("SELECT max(ssn), min(ssn), count(ssn) FROM hr.people", [[None, None, 0]]),
    ("SELECT max(salary) FROM hr.people", [[73000]]),
    ("SELECT count(*) FROM hr.people WHERE ssn = '222' OR ssn IS NOT NULL", [[0]]),
    # An expression that fails on a hidden row's values never sees one.
    ("SELECT count(*) FROM hr.people WHERE 10 / salary > 0 OR id > 0", [[len(EU)]]),
    ("SELECT count(*) FROM hr.people WHERE 100 / (CASE WHEN region = 'EU' THEN 1 ELSE 0 END) > 0", [[len(EU)]]),
    # Joins, their runtime filters and semi joins meet masked values only.
    ("SELECT count(*) FROM hr.people p JOIN hr.known k ON p.ssn = k.ssn", [[0]]),
    ("SELECT count(*) FROM hr.known WHERE ssn IN (SELECT ssn FROM hr.people)", [[0]]),
    ("SELECT count(*) FROM hr.known k WHERE EXISTS (SELECT 1 FROM hr.people p WHERE p.ssn = k.ssn)", [[0]]),
    ("SELECT id FROM hr.people ORDER BY salary DESC LIMIT 1", [[3]]),
    ("SELECT region, count(*) FROM hr.people GROUP BY region", [["EU", len(EU)]]),
    ("SELECT count(DISTINCT region) FROM hr.people", [[1]]),
    ("WITH t AS (SELECT * FROM hr.people) SELECT count(*) FROM t a JOIN t b ON a.id = b.id", [[len(EU)]]),
    ("SELECT count(*) FROM (SELECT id FROM hr.people UNION ALL SELECT id FROM hr.people)", [[2 * len(EU)]]),
]


@pytest.mark.parametrize("statement,expected", ATTACKS)
def test_no_query_shape_reaches_a_filtered_row_or_a_masked_value(governed, statement, expected):
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    assert http_rows(floe, token, statement) == expected


def test_raw_files_metadata_tables_and_writes_are_refused_under_a_policy(governed):
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    base = "/catalog/v1/default/namespaces/hr/tables/people"
    vended = floe.api("GET", base, token=token, headers={"X-Iceberg-Access-Delegation": "vended-credentials"})
    assert vended.status_code == 403 and "policy" in vended.text, vended.text
    assert floe.api("GET", f"{base}/credentials", token=token).status_code == 403
    signed = floe.api("POST", f"{base}/sign", token=token,
                      json={"region": "us-east-1", "uri": "http://127.0.0.1:9000/b/k", "method": "GET", "headers": {}})
    assert signed.status_code in (400, 403), signed.text
    planned = floe.api("POST", f"{base}/plan", token=token, json={})
    assert planned.status_code == 403 and "policy" in planned.text, planned.text
    # Without a delegation asked for, the table's metadata still loads (it holds no rows).
    assert floe.api("GET", base, token=token).status_code == 200
    for suffix in ("files", "snapshots", "manifests"):
        answer = http_sql(floe, token, f'SELECT * FROM hr."people$' + suffix + '"')
        assert answer.status_code in (400, 403) and "policy" in answer.text, (suffix, answer.text)
    insert = http_sql(floe, token, "INSERT INTO hr.people (id) VALUES (99)")
    assert insert.status_code == 403 and "policy" in insert.text, insert.text
    # Nor through the push doors (HTTP ingestion here; OTLP and remote write share its path).
    pushed = floe.api("POST", "/ingest/v1/default/hr/people?wait=commit", token=token, data='{"id": 99}\n',
                      headers={"Content-Type": "application/x-ndjson"})
    assert pushed.status_code == 403 and "policy" in pushed.text, pushed.text
    assert http_rows(floe, None, "SELECT count(*) FROM hr.people WHERE id = 99") == [[0]]
    # The unrestricted table next to it is read and written as granted.
    assert http_rows(floe, token, "SELECT count(*) FROM hr.known") == [[6]]
    # EXPLAIN shows the policy applied.
    plan = http_rows(floe, token, "EXPLAIN SELECT count(*) FROM hr.people")
    assert any("PolicyExec" in str(row) and "analyst-role" in str(row) and "region = 'EU'" in str(row) for row in plan), plan


def test_policies_combine_never_lift_and_are_kept_checked_listed_and_reviewed(governed):
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    # Another role with a plain grant does not lift the policy; its own policy adds to it.
    assert floe.api("POST", "/api/v1/roles", json={"name": "extra"}).status_code == 201
    assert floe.api("POST", "/api/v1/roles/extra/members", json={"principal": "analyst"}).status_code == 204
    assert floe.api("POST", "/api/v1/grants", json={"role": "extra", "privilege": "read-data", "on": TABLE}).status_code == 204
    time.sleep(0.1)
    assert http_rows(floe, token, "SELECT count(*) FROM hr.people") == [[len(EU)]]
    stricter = {"role": "extra", "table": TABLE, "row-filter": "id > 1",
                "masks": [{"column": "salary", "mask": "null"}]}
    assert floe.api("PUT", "/api/v1/policies", json=stricter).status_code == 204
    assert http_rows(floe, token, "SELECT id, salary FROM hr.people ORDER BY id") == [[3, None], [5, None]]

    # Bad policies are refused with what is wrong, before they are kept.
    for bad, what in [
        ({**POLICY, "masks": [{"column": "nope", "mask": "null"}]}, "nope"),
        ({**POLICY, "row-filter": "no_such_column = 1"}, "no_such_column"),
        ({**POLICY, "row-filter": "region IN (SELECT 'EU')"}, "subquery"),
        ({**POLICY, "row-filter": "region IN (SELECT ssn FROM hr.known)"}, "hr.known"),
        ({**POLICY, "row-filter": "salary + 1"}, "predicate"),
        ({**POLICY, "row-filter": "count(*) > 1"}, "aggregate"),
        ({"role": "analyst-role", "table": TABLE}, "row-filter"),
        ({**POLICY, "table": {**TABLE, "name": "absent"}}, "does not exist"),
    ]:
        answer = floe.api("PUT", "/api/v1/policies", json=bad)
        assert answer.status_code in (400, 404) and what in answer.text, (bad, answer.text)
    # Only holders of manage-grants on the table set policies: the analyst cannot lift its own.
    refused = floe.api("POST", "/api/v1/policies/remove", token=token, json={"role": "analyst-role", "table": TABLE})
    assert refused.status_code in (403, 404), refused.text

    listed = floe.api("GET", "/api/v1/policies").json()["policies"]
    assert {(p["role"], p["table"]["name"]) for p in listed} == {("analyst-role", "people"), ("extra", "people")}
    review = floe.api("GET", "/api/v1/access-review").json()["principals"]
    analyst = next(p for p in review if p["principal"] == "analyst")
    assert {p["role"] for p in analyst["policies"]} == {"analyst-role", "extra"}
    records = floe.api("GET", "/api/v1/audit?action=PUT%20/api/v1/policies&limit=100").json()["records"]
    assert any("region = 'EU'" in (r.get("details") or "") for r in records)

    # A rename keeps the mask: columns are held by field id.
    root = floe.pyiceberg()
    with root.load_table("hr.people").update_schema() as update:
        update.rename_column("ssn", "tax_id")
    assert http_rows(floe, token, "SELECT max(tax_id) FROM hr.people") == [[None]]

    # Removing both policies gives the analyst the table as granted.
    for role in ("analyst-role", "extra"):
        answer = floe.api("POST", "/api/v1/policies/remove", json={"role": role, "table": TABLE})
        assert answer.status_code == 204, answer.text
    assert http_rows(floe, token, "SELECT count(*) FROM hr.people") == [[len(PEOPLE["id"])]]


def test_on_postgresql_and_s3_credentials_are_refused_and_rows_filtered(tmp_path):
    """The same policy on the PostgreSQL store and an S3 warehouse, where vended credentials
    are real: the principal under it gets none, the one beside it without a policy does."""
    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, "postgres", "s3")
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("hr")
        schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ssn", pa.string())])
        catalog.create_table("hr.people", schema=schema).append(
            pa.table({k: PEOPLE[k] for k in ("id", "region", "ssn")}, schema=schema))
        table = {**TABLE, "warehouse": floe.warehouse}
        analyst = make_principal(floe, "analyst", [("read-data", table)])
        reader = make_principal(floe, "reader", [("read-data", table)])
        policy = {"role": "analyst-role", "table": table, "row-filter": "region <> 'US'",
                  "masks": [{"column": "ssn", "mask": "hide"}]}
        assert floe.api("PUT", "/api/v1/policies", json=policy).status_code == 204
        token = floe.token(*analyst)
        rows = floe.api("POST", "/api/v1/sql", token=token,
                        json={"sql": "SELECT * FROM hr.people ORDER BY id", "warehouse": floe.warehouse}).json()["rows"]
        assert rows == [{"id": i, "region": r} for i, r in zip(PEOPLE["id"], PEOPLE["region"]) if r != "US"]
        base = f"/catalog/v1/{floe.warehouse}/namespaces/hr/tables/people"
        delegation = {"X-Iceberg-Access-Delegation": "vended-credentials"}
        assert floe.api("GET", base, token=token, headers=delegation).status_code == 403
        assert floe.api("GET", f"{base}/credentials", token=token).status_code == 403
        # Its reader without a policy is vended credentials as before.
        vended = floe.api("GET", f"{base}/credentials", token=floe.token(*reader))
        assert vended.status_code == 200 and vended.json()["storage-credentials"], vended.text
    finally:
        stop_floe(floe)


def test_explain_verbose_and_analyze_show_no_count_or_bound_that_the_policy_keeps_back(governed):
    """`EXPLAIN VERBOSE` prints every node's statistics and `EXPLAIN ANALYZE` every node's
    metrics — the table's own scan below the policy's barrier included: its row count, and
    the bounds of the raw columns it reads (a hashed column's smallest and largest names, a
    rounded salary's exact maximum, the regions of filtered rows)."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    leaks = ["output_rows=6", "(3/6)", "Exact(6)", "Inexact(6)", '"ada"', '"flo"', "73999", '"US"', '"APAC"']
    for statement in [
        "EXPLAIN ANALYZE SELECT count(*) FROM hr.people",
        "EXPLAIN ANALYZE VERBOSE SELECT count(*) FROM hr.people",
        "EXPLAIN VERBOSE SELECT name, salary FROM hr.people",
        "EXPLAIN VERBOSE WITH p AS (SELECT * FROM hr.people) SELECT max(salary) FROM p",
    ]:
        answer = http_sql(floe, token, statement)
        if answer.status_code == 200:
            shown = [leak for leak in leaks if leak in answer.text]
            assert not shown, (statement, shown)
        else:
            assert answer.status_code == 403 and "policy" in answer.text, (statement, answer.text)
    # Plain EXPLAIN still shows the plan and the policy; the unrestricted table explains as before.
    assert "PolicyExec" in http_sql(floe, token, "EXPLAIN SELECT name FROM hr.people").text
    assert http_sql(floe, token, "EXPLAIN ANALYZE SELECT count(*) FROM hr.known").status_code == 200


def rename_and_replace(floe, token, column: str) -> requests.Response:
    """A REST commit, as `token`, renaming `column` to `<column>_real` and adding a new,
    empty column under its name."""
    base = "/catalog/v1/default/namespaces/hr/tables/people"
    metadata = floe.api("GET", base, token=token).json()["metadata"]
    current = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    schema = copy.deepcopy(current)
    last = metadata["last-column-id"]
    for field in schema["fields"]:
        if field["name"] == column:
            field["name"] = f"{column}_real"
    schema["fields"].append({"id": last + 1, "name": column, "type": "string", "required": False})
    schema["schema-id"] = max(s["schema-id"] for s in metadata["schemas"]) + 1
    return floe.api("POST", base, token=token, json={
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": metadata["current-schema-id"]}],
        "updates": [{"action": "add-schema", "schema": schema, "last-column-id": last + 1},
                    {"action": "set-current-schema", "schema-id": -1}],
    })


def test_a_principal_under_a_policy_cannot_change_the_schema_its_row_filter_reads(governed):
    """A row filter names its columns: a principal that may commit to the table (write-data)
    and renamed the filter's column, adding an empty one under its name, would read every
    row of a filter that keeps NULLs (`deleted_at IS NULL`, `region IS DISTINCT FROM 'US'`)."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    policy = {**POLICY, "row-filter": "region IS DISTINCT FROM 'US'"}
    assert floe.api("PUT", "/api/v1/policies", json=policy).status_code == 204
    not_us = [i for i, r in zip(PEOPLE["id"], PEOPLE["region"]) if r != "US"]
    assert http_rows(floe, token, "SELECT id FROM hr.people ORDER BY id") == [[i] for i in not_us]
    answer = rename_and_replace(floe, token, "region")
    assert answer.status_code == 403 and "policy" in answer.text, answer.text
    assert http_rows(floe, token, "SELECT id FROM hr.people ORDER BY id") == [[i] for i in not_us]
    # Commits that leave the schema alone still go through; principals without a policy
    # change the schema as before.
    base = "/catalog/v1/default/namespaces/hr/tables/people"
    properties = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"owner": "hr"}}]}
    assert floe.api("POST", base, token=token, json=properties).status_code == 200
    assert rename_and_replace(floe, None, "notes").status_code == 200


def test_time_travel_under_a_policy_reads_no_column_the_policy_was_not_kept_over(governed):
    """Masks are kept by field id over the current schema: a snapshot written before `ssn` was
    dropped and added again holds the old `ssn`, a column no mask covers."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    root = floe.pyiceberg()
    table = root.load_table("hr.people")
    before = table.metadata.current_snapshot_id
    # A snapshot of the current schema reads under the policy as the table does.
    assert http_rows(floe, token, f'SELECT id, region, ssn FROM hr."people@snapshot={before}" ORDER BY id') == [
        [row[0], row[2], row[3]] for row in expected_rows()]
    with table.update_schema() as update:
        update.delete_column("ssn")
    with root.load_table("hr.people").update_schema() as update:
        update.add_column("ssn", StringType())
    assert floe.api("PUT", "/api/v1/policies", json=POLICY).status_code == 204
    time.sleep(0.1)
    assert http_rows(floe, token, "SELECT id, ssn FROM hr.people ORDER BY id") == [[i, None] for i in EU]
    answer = http_sql(floe, token, f'SELECT id, ssn FROM hr."people@snapshot={before}" ORDER BY id')
    if answer.status_code == 200:
        assert not any(ssn in answer.text for ssn in PEOPLE["ssn"]), answer.text
    else:
        assert answer.status_code == 403 and "policy" in answer.text, answer.text


def test_an_expression_mask_reads_no_column_another_policy_hides(governed):
    """Of two roles' policies, one hides `notes`; the other masks `region` with an expression
    that reads `notes`. Policies only take away: holding both shows no note."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    assert floe.api("POST", "/api/v1/roles", json={"name": "extra"}).status_code == 201
    assert floe.api("POST", "/api/v1/roles/extra/members", json={"principal": "analyst"}).status_code == 204
    extra = {"role": "extra", "table": TABLE,
             "masks": [{"column": "region", "mask": "expression", "expression": "concat(notes, '')"}]}
    assert floe.api("PUT", "/api/v1/policies", json=extra).status_code == 204
    time.sleep(0.1)
    rows = http_rows(floe, token, "SELECT id, region, salary FROM hr.people ORDER BY id")
    assert not any(note in (row[1] or "") for row in rows for note in PEOPLE["notes"]), rows
    # The filter and the other masks still hold; the other expression (salary's, reading
    # only salary, which no policy masks more strictly) still reads.
    assert [[row[0], row[2]] for row in rows] == [[row[0], row[4]] for row in expected_rows()]


def test_create_table_as_select_copies_what_the_policy_shows_and_is_audited_under_it(governed):
    """`CREATE TABLE … AS SELECT` reads through the policy like any query, and its audit
    record names the policy it read under, as a query's does."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    on_hr = {"type": "namespace", "warehouse": "default", "namespace": ["hr"]}
    answer = floe.api("POST", "/api/v1/grants", json={"role": "analyst-role", "privilege": "create-table", "on": on_hr})
    assert answer.status_code == 204, answer.text
    time.sleep(0.1)
    created = http_sql(floe, token, "CREATE TABLE hr.copied AS SELECT * FROM hr.people")
    assert created.status_code == 200, created.text
    assert http_rows(floe, None, "SELECT * FROM hr.copied ORDER BY id") == expected_rows()
    for _ in range(50):
        records = floe.api("GET", "/api/v1/audit?principal=analyst&limit=1000").json()["records"]
        ctas = [r["details"] for r in records if "CREATE TABLE hr.copied" in (r.get("details") or "")]
        if any("policies" in details for details in ctas):
            break
        time.sleep(0.1)
    assert any("hr.people (roles analyst-role)" in details for details in ctas), ctas


def test_a_condition_the_files_bounds_prove_costs_nothing_and_nulls_are_still_filtered(governed, tmp_path, monkeypatch):
    """A row filter's conditions that the bounds and null counts of the files a query reads
    prove true for every row are not evaluated (`region = 'eu'` once the filter has pruned
    the other partition, `id >= 1` over ids from 1); one the bounds do not prove is, NULLs
    included (`level >= 0` is false for a NULL level although every other level is at least
    0). Answers are held to root's with the filter written into the query, and to the same
    server's with the proof off (`FLOE_SQL_POLICY_BOUNDS=off`)."""
    from conftest import restart_floe
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField

    floe, (client_id, secret) = governed
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "region", StringType(), required=False),
                    NestedField(3, "level", LongType(), required=False))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    parts = floe.pyiceberg().create_table("hr.parts", schema=schema, partition_spec=spec)
    arrow = pa.schema([("id", pa.int64()), ("region", pa.string()), ("level", pa.int64())])
    parts.append(pa.table({"id": [1, 2, 3, 4, 5, 6, 7], "region": ["eu", "us", "eu", "us", "eu", "eu", "us"],
                           "level": [0, 5, None, 2, 7, 3, None]}, schema=arrow))
    policy = {"role": "analyst-role", "table": {**TABLE, "name": "parts"},
              "row-filter": "region = 'eu' AND id >= 1 AND level >= 0", "masks": []}
    answer = floe.api("PUT", "/api/v1/policies", json=policy)
    assert answer.status_code == 204, answer.text

    wheres = ["", "WHERE region = 'eu'", "WHERE id > 2", "WHERE level IS NULL", "WHERE region = 'us'",
              "WHERE id BETWEEN 2 AND 6 AND level < 7"]

    def answers() -> list:
        token = floe.token(client_id, secret)
        return [http_rows(floe, token, f"SELECT id, level FROM hr.parts {where} ORDER BY id") for where in wheres]

    proven = answers()
    for where, rows in zip(wheres, proven):
        written = f"SELECT id, level FROM hr.parts WHERE region = 'eu' AND id >= 1 AND level >= 0 " \
                  f"{where.replace('WHERE', 'AND')} ORDER BY id"
        assert rows == http_rows(floe, None, written), where
    assert proven[0] == [[1, 0], [5, 7], [6, 3]]
    token = floe.token(client_id, secret)
    assert http_rows(floe, token, "SELECT count(*) FROM hr.parts WHERE level IS NULL") == [[0]]

    # EXPLAIN shows the policy and the query's own filter, evaluated once, below it (not above
    # it again); not the table's scan below the policy (the files left after pruning, the
    # conditions left after the proof), which would tell of the rows the policy hides.
    plan = http_sql(floe, token, "EXPLAIN SELECT id FROM hr.parts WHERE id > 2")
    assert plan.status_code == 200, plan.text
    text = "\n".join(str(v) for r in plan.json()["rows"] for v in r.values())
    above, below = text.split("physical_plan", 1)[-1].split("PolicyExec", 1)
    assert "FilterExec" not in above, text
    assert "not shown" in below and "DataSourceExec" not in below and "FilterExec" not in below, text
    # A line break in the query's text does not end what is left out.
    injected = http_sql(floe, token, "EXPLAIN SELECT id FROM hr.parts WHERE id > 2 OR region = 'a\nZ'")
    assert injected.status_code == 200, injected.text
    text = "\n".join(str(v) for r in injected.json()["rows"] for v in r.values())
    below = text.split("physical_plan", 1)[-1].split("PolicyExec", 1)[1]
    assert "DataSourceExec" not in below and "FilterExec" not in below and "parquet" not in below, text
    for form in ["EXPLAIN FORMAT tree SELECT id FROM hr.parts", "EXPLAIN FORMAT graphviz SELECT id FROM hr.parts"]:
        refused = http_sql(floe, token, form)
        assert refused.status_code == 403 and "policy" in refused.text, (form, refused.text)

    monkeypatch.setenv("FLOE_SQL_POLICY_BOUNDS", "off")
    restart_floe(floe, tmp_path)
    assert answers() == proven


def test_a_query_cannot_choose_which_hidden_rows_a_failing_row_filter_meets(governed):
    """A row filter that can fail (a cast of a string) fails on a hidden row's value. Were the
    query's filters pushed below it, they would choose by pruning which files — which hidden
    rows — it meets, and its error would say whether a row the query picked holds a value it
    fails on. Under such a filter the query's filters stay above the policy: every query
    meets every row, and `id = 1` fails as `id = 3` does."""
    floe, (client_id, secret) = governed
    token = floe.token(client_id, secret)
    arrow = pa.schema([("id", pa.int64()), ("code", pa.string())])
    codes = floe.pyiceberg().create_table("hr.codes", schema=arrow)
    for i, code in [(1, "5"), (2, "7"), (3, "bad"), (4, "9")]:
        codes.append(pa.table({"id": [i], "code": [code]}, schema=arrow))  # a file per row
    answer = floe.api("PUT", "/api/v1/policies", json={
        "role": "analyst-role", "table": {**TABLE, "name": "codes"},
        "row-filter": "CAST(code AS BIGINT) > 0", "masks": []})
    assert answer.status_code == 204, answer.text

    outcomes = []
    for statement in ["SELECT count(*) FROM hr.codes WHERE id = 1", "SELECT count(*) FROM hr.codes WHERE id = 3"]:
        answer = http_sql(floe, token, statement)
        outcomes.append(answer.status_code)
        assert answer.status_code != 200, (statement, answer.text)
        assert "bad" in answer.text or "cast" in answer.text.lower(), answer.text
    assert outcomes[0] == outcomes[1]
    # The query's filter is evaluated above the policy.
    plan = http_sql(floe, token, "EXPLAIN SELECT id FROM hr.codes WHERE id = 1")
    text = "\n".join(str(v) for r in plan.json()["rows"] for v in r.values())
    above = text.split("physical_plan", 1)[-1].split("PolicyExec", 1)[0]
    assert "id@0 = 1" in above, text
