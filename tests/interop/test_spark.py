"""Apache Spark with the Iceberg Spark runtime against Floe: create, insert, MERGE INTO with
merge-on-read deletes, schema evolution and time travel; PyIceberg and DuckDB read Spark's
results identically."""

from __future__ import annotations

import os
import re

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", params=["sqlite-local", "postgres-s3"])
def spark_floe(request, tmp_path_factory):
    from conftest import start_floe, stop_floe

    jars = os.environ.get("FLOE_SPARK_JARS")
    if not jars:
        if os.environ.get("CI"):
            pytest.fail("FLOE_SPARK_JARS must be set in CI (scripts/setup-spark.sh prints it)")
        pytest.skip("FLOE_SPARK_JARS is not set")
    backend, storage = request.param.split("-")
    floe = start_floe(tmp_path_factory.mktemp("spark"), backend, storage)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("floe-interop")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.floe", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.floe.type", "rest")
        .config("spark.sql.catalog.floe.uri", floe.catalog_uri)
        .config("spark.sql.catalog.floe.warehouse", floe.warehouse)
        .config("spark.sql.catalog.floe.credential", floe.client_properties()["credential"])
        .config("spark.sql.catalog.floe.oauth2-server-uri", floe.token_uri)
    )
    if storage == "s3":
        props = floe.client_properties()
        builder = (
            builder.config("spark.sql.catalog.floe.io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
            .config("spark.sql.catalog.floe.s3.endpoint", props["s3.endpoint"])
            .config("spark.sql.catalog.floe.s3.path-style-access", "true")
            .config("spark.sql.catalog.floe.s3.access-key-id", props["s3.access-key-id"])
            .config("spark.sql.catalog.floe.s3.secret-access-key", props["s3.secret-access-key"])
            .config("spark.sql.catalog.floe.client.region", "us-east-1")
        )
    spark = builder.getOrCreate()
    yield spark, floe
    spark.stop()
    stop_floe(floe)


def rows_of(df):
    return sorted(tuple(r) for r in df.collect())


def test_spark_writes_merges_evolves_and_others_read_identically(spark_floe):
    spark, floe = spark_floe
    spark.sql("CREATE NAMESPACE floe.sp")
    spark.sql(
        """CREATE TABLE floe.sp.accounts (id BIGINT, owner STRING, balance DOUBLE, opened DATE)
           USING iceberg PARTITIONED BY (days(opened))
           TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read',
                          'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"""
    )
    spark.sql(
        """INSERT INTO floe.sp.accounts VALUES
           (1, 'ana', 10.0, DATE'2026-01-01'), (2, 'bo', 20.0, DATE'2026-01-01'),
           (3, 'cy', 30.0, DATE'2026-01-02'), (4, 'di', 40.0, DATE'2026-01-03')"""
    )
    first = spark.sql("SELECT snapshot_id FROM floe.sp.accounts.snapshots ORDER BY committed_at").collect()[0][0]
    spark.sql(
        """MERGE INTO floe.sp.accounts t
           USING (SELECT * FROM VALUES (2, 'bo', 25.0, DATE'2026-01-01'), (5, 'ed', 50.0, DATE'2026-01-04')
                  AS s(id, owner, balance, opened)) s
           ON t.id = s.id
           WHEN MATCHED THEN UPDATE SET t.balance = s.balance
           WHEN NOT MATCHED THEN INSERT *"""
    )
    spark.sql("DELETE FROM floe.sp.accounts WHERE id = 3")
    spark.sql("ALTER TABLE floe.sp.accounts ADD COLUMN tier STRING")
    spark.sql("INSERT INTO floe.sp.accounts VALUES (6, 'fa', 60.0, DATE'2026-01-05', 'gold')")

    delete_files = spark.sql(
        "SELECT count(*) FROM floe.sp.accounts.delete_files"
    ).collect()[0][0]
    assert delete_files > 0, "merge-on-read must have written delete files"
    old = rows_of(spark.sql(f"SELECT id, balance FROM floe.sp.accounts VERSION AS OF {first}"))
    assert old == [(1, 10.0), (2, 20.0), (3, 30.0), (4, 40.0)]

    expected = rows_of(spark.sql("SELECT id, owner, balance, tier FROM floe.sp.accounts"))
    assert expected == [
        (1, "ana", 10.0, None),
        (2, "bo", 25.0, None),
        (4, "di", 40.0, None),
        (5, "ed", 50.0, None),
        (6, "fa", 60.0, "gold"),
    ]

    table = floe.pyiceberg().load_table("sp.accounts")
    arrow = table.scan(selected_fields=("id", "owner", "balance", "tier")).to_arrow()
    py_rows = sorted(zip(*(arrow[c].to_pylist() for c in ("id", "owner", "balance", "tier"))))
    assert py_rows == expected
    py_old = table.scan(snapshot_id=first, selected_fields=("id", "balance")).to_arrow()
    assert sorted(zip(py_old["id"].to_pylist(), py_old["balance"].to_pylist())) == old
    # Planned by Floe (`/plan`, Spark's delete files included), read by PyIceberg: the same rows.
    from test_scan_planning import server_planning

    planned = server_planning(floe).load_table("sp.accounts")
    arrow = planned.scan(selected_fields=("id", "owner", "balance", "tier")).to_arrow()
    assert sorted(zip(*(arrow[c].to_pylist() for c in ("id", "owner", "balance", "tier")))) == expected

    from test_duckdb import attach

    con = attach(floe)
    duck_rows = con.execute("SELECT id, owner, balance, tier FROM floe.sp.accounts ORDER BY id").fetchall()
    assert [tuple(r) for r in duck_rows] == expected

    # Floe's own SQL engine applies Spark's position deletes and reads the evolved schema.
    answer = floe.api(
        "POST",
        "/api/v1/sql",
        json={"sql": "SELECT id, owner, balance, tier FROM sp.accounts ORDER BY id", "warehouse": floe.warehouse},
    )
    assert answer.status_code == 200, answer.text
    floe_rows = [(r["id"], r["owner"], r["balance"], r["tier"]) for r in answer.json()["rows"]]
    assert floe_rows == expected

    # A table Floe's SQL writes (partitioned, two snapshots) reads the same in Spark.
    for statement in (
        "CREATE TABLE sp.floe_made (id BIGINT, day DATE, label VARCHAR) PARTITIONED BY (day)",
        "INSERT INTO sp.floe_made VALUES (1, DATE '2026-02-01', 'a'), (2, DATE '2026-02-02', NULL)",
        "INSERT INTO sp.floe_made SELECT id + 2, day, label FROM sp.floe_made",
    ):
        answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
        assert answer.status_code == 200, answer.text
    spark_rows = rows_of(spark.sql("SELECT id, CAST(day AS STRING), label FROM floe.sp.floe_made"))
    assert spark_rows == [(1, "2026-02-01", "a"), (2, "2026-02-02", None), (3, "2026-02-01", "a"), (4, "2026-02-02", None)]


def test_floe_reads_spark_deletes_v2_and_deletion_vectors_v3(spark_floe):
    """Spark's merge-on-read position deletes (format v2) and deletion vectors (format v3),
    checked by the sqllogictest file tests/slt/engines/spark_deletes.slt over Floe's SQL."""
    from pathlib import Path

    from slt import run_file

    spark, floe = spark_floe
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe.eng")
    firsts = {}
    for version in (2, 3):
        table = f"floe.eng.deletes_v{version}"
        spark.sql(
            f"""CREATE TABLE {table} (id BIGINT, part STRING, amount DOUBLE)
                USING iceberg PARTITIONED BY (part)
                TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read',
                               'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read',
                               'write.parquet.row-group-size-bytes'='4096')"""
        )
        spark.sql(
            f"""INSERT INTO {table}
                SELECT id, CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END, id * 1.5
                FROM range(0, 2000)"""
        )
        spark.sql(f"DELETE FROM {table} WHERE id % 10 = 3")
        first_delete = spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).collect()[0][0]
        # A second delete on the same files: v2 adds position delete files, v3 replaces each
        # file's deletion vector with the union.
        spark.sql(f"DELETE FROM {table} WHERE id < 100 OR id BETWEEN 1000 AND 1100")
        spark.sql(f"UPDATE {table} SET amount = -1 WHERE id = 1500")
        formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {table}.delete_files").collect()}
        assert formats == ({"PUFFIN"} if version == 3 else {"PARQUET"}), formats
        expected = spark.sql(f"SELECT count(*), sum(id), sum(amount) FROM {table}").collect()[0]
        assert tuple(expected) == (1619, 1699360, 2546789.0), tuple(expected)
        firsts[f"first_v{version}"] = first_delete
    run_file(floe, Path(__file__).parent.parent / "slt" / "engines" / "spark_deletes.slt", firsts)

    # The suite read the delete files; the same snapshots read again plan from kept plans.
    def delete_files_read():
        metrics = floe.api("GET", "/metrics").text
        return int(re.search(r"^floe_sql_delete_files_read_total (\d+)$", metrics, re.M).group(1))

    before = delete_files_read()
    assert before > 0
    for version in (2, 3):
        answer = floe.api(
            "POST",
            "/api/v1/sql",
            json={"sql": f"SELECT count(*) AS n FROM eng.deletes_v{version}", "warehouse": floe.warehouse},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["rows"] == [{"n": 1619}], answer.text
    assert delete_files_read() == before


def test_compaction_applies_spark_deletes_and_spark_reads_the_result(spark_floe):
    """Compaction rewrites files carrying Spark's merge-on-read deletes (position delete files
    in v2, deletion vectors in v3): the deleted rows stay deleted, the delete files go, and
    Spark, PyIceberg and Floe read the same rows."""
    from test_compaction import run_job

    spark, floe = spark_floe
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe.cmp")
    for version in (2, 3):
        name = f"mor_v{version}"
        table = f"floe.cmp.{name}"
        spark.sql(
            f"""CREATE TABLE {table} (id BIGINT, part STRING)
                USING iceberg PARTITIONED BY (part)
                TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read',
                               'write.update.mode'='merge-on-read')"""
        )
        for start in range(0, 1000, 250):
            spark.sql(
                f"""INSERT INTO {table} SELECT id, CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END
                    FROM range({start}, {start + 250})"""
            )
        spark.sql(f"DELETE FROM {table} WHERE id % 10 = 3")
        spark.sql(f"DELETE FROM {table} WHERE id < 100")
        expected = rows_of(spark.sql(f"SELECT id, part FROM {table}"))
        assert len(expected) == 810
        assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").collect()[0][0] > 0

        result = run_job(floe, "cmp", name, "compact")
        assert result["groups-committed"] == 2, result
        assert result["removed-delete-files"] > 0, result

        spark.sql(f"REFRESH TABLE {table}")
        assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").collect()[0][0] == 0
        assert spark.sql(f"SELECT count(*) FROM {table}.data_files").collect()[0][0] == 2
        assert rows_of(spark.sql(f"SELECT id, part FROM {table}")) == expected
        pyiceberg = floe.pyiceberg().load_table(f"cmp.{name}").scan().to_arrow()
        assert sorted(zip(pyiceberg["id"].to_pylist(), pyiceberg["part"].to_pylist())) == expected
        answer = floe.api(
            "POST", "/api/v1/sql", json={"sql": f"SELECT id, part FROM cmp.{name} ORDER BY id", "warehouse": floe.warehouse}
        )
        assert [(r["id"], r["part"]) for r in answer.json()["rows"]] == expected
        # Spark keeps writing to the compacted table.
        spark.sql(f"DELETE FROM {table} WHERE id = 500")
        assert spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == 809


@pytest.mark.parametrize("version", [2, 3])
def test_floe_reads_equality_deletes_written_by_icebergs_java_writers(spark_floe, version):
    """Equality deletes as Flink writes them: Iceberg's own Java equality-delete writer
    (GenericAppenderFactory, driven through Spark's JVM) writes a delete file keyed on `id`
    and commits it in a row delta; Floe's SQL and Spark then read the same rows, also once
    Spark adds position deletes (format v2) or a deletion vector (v3) to the same data file."""
    spark, floe = spark_floe
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe.eq")
    events = f"eq.events_v{version}"
    spark.sql(
        f"""CREATE TABLE floe.{events} (id BIGINT, kind STRING) USING iceberg
           TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"""
    )
    # Keys beyond 32 bits, so py4j hands the JVM longs (it passes small ints as Integer).
    base = 10_000_000_000
    spark.sql(f"INSERT INTO floe.{events} SELECT id + {base}, CASE WHEN id % 3 = 0 THEN 'a' ELSE 'b' END FROM range(0, 100)")
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"floe.{events}")
    schema = table.schema()
    gateway = spark.sparkContext._gateway
    ids = gateway.new_array(gateway.jvm.int, 1)
    ids[0] = schema.findField("id").fieldId()
    key_schema = schema.select(["id"])
    factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(schema, table.spec(), ids, key_schema, None)
    location = table.locationProvider().newDataLocation("eq-deletes-00001.parquet")
    output = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(table.io().newOutputFile(location))
    writer = factory.newEqDeleteWriter(output, jvm.org.apache.iceberg.FileFormat.PARQUET, None)
    for deleted in (3, 4, 50, 99):
        record = jvm.org.apache.iceberg.data.GenericRecord.create(key_schema)
        record.setField("id", base + deleted)
        writer.write(record)
    writer.close()
    table.newRowDelta().addDeletes(writer.toDeleteFile()).commit()

    kinds = {r[0] for r in spark.sql(f"SELECT content FROM floe.{events}.delete_files").collect()}
    assert kinds == {2}, kinds  # 2 = equality deletes
    expected = rows_of(spark.sql(f"SELECT id, kind FROM floe.{events}"))
    assert len(expected) == 96 and (base + 3, "a") not in expected and (base + 5, "b") in expected
    answer = floe.api(
        "POST", "/api/v1/sql", json={"sql": f"SELECT id, kind FROM {events} ORDER BY id", "warehouse": floe.warehouse}
    )
    assert answer.status_code == 200, answer.text
    assert [(r["id"], r["kind"]) for r in answer.json()["rows"]] == expected
    # A merge-on-read delete adds a position delete file on the same data file: Floe
    # applies both kinds together.
    spark.sql(f"DELETE FROM floe.{events} WHERE id IN ({base + 10}, {base + 11})")
    deletes = spark.sql(f"SELECT content, file_format FROM floe.{events}.delete_files").collect()
    kinds = sorted((r[0], r[1]) for r in deletes)
    positions = "PUFFIN" if version == 3 else "PARQUET"  # a deletion vector in v3
    assert kinds == [(1, positions), (2, "PARQUET")], kinds  # 1 = position deletes
    expected = rows_of(spark.sql(f"SELECT id, kind FROM floe.{events}"))
    assert len(expected) == 94
    answer = floe.api(
        "POST", "/api/v1/sql", json={"sql": f"SELECT id, kind FROM {events} ORDER BY id", "warehouse": floe.warehouse}
    )
    assert answer.status_code == 200, answer.text
    assert [(r["id"], r["kind"]) for r in answer.json()["rows"]] == expected
    # Filters and aggregates over the same scan agree too.
    answer = floe.api(
        "POST",
        "/api/v1/sql",
        json={"sql": f"SELECT count(*) AS n, sum(id) AS s FROM {events} WHERE kind = 'a'", "warehouse": floe.warehouse},
    )
    spark_answer = spark.sql(f"SELECT count(*), sum(id) FROM floe.{events} WHERE kind = 'a'").collect()[0]
    assert answer.json()["rows"] == [{"n": spark_answer[0], "s": spark_answer[1]}]
    # A scan that does not project the equality column still drops the deleted keys.
    answer = floe.api(
        "POST",
        "/api/v1/sql",
        json={"sql": f"SELECT kind, count(*) AS n FROM {events} GROUP BY kind ORDER BY kind", "warehouse": floe.warehouse},
    )
    spark_answer = spark.sql(f"SELECT kind, count(*) FROM floe.{events} GROUP BY kind ORDER BY kind").collect()
    assert [(r["kind"], r["n"]) for r in answer.json()["rows"]] == [tuple(r) for r in spark_answer]


def test_spark_tags_on_format_version_1_tables_survive_floe(spark_floe):
    """Tags and branches Spark makes on a v1 table are in the metadata Floe writes and serves."""
    spark, floe = spark_floe
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe.v1s")
    spark.sql("CREATE TABLE floe.v1s.events (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='1')")
    spark.sql("INSERT INTO floe.v1s.events VALUES (1), (2)")
    first = spark.sql("SELECT snapshot_id FROM floe.v1s.events.snapshots ORDER BY committed_at").collect()[0][0]
    spark.sql("INSERT INTO floe.v1s.events VALUES (3)")
    spark.sql(f"ALTER TABLE floe.v1s.events CREATE TAG `release` AS OF VERSION {first}")
    spark.sql(f"ALTER TABLE floe.v1s.events CREATE BRANCH `audit` AS OF VERSION {first}")
    # A fresh read through Floe: PyIceberg sees what Spark committed.
    loaded = floe.pyiceberg().load_table("v1s.events")
    assert loaded.metadata.format_version == 1
    assert loaded.metadata.refs["release"].snapshot_id == first
    assert loaded.metadata.refs["release"].snapshot_ref_type == "tag"
    assert loaded.metadata.refs["audit"].snapshot_ref_type == "branch"
    spark.sql("REFRESH TABLE floe.v1s.events")
    assert rows_of(spark.sql("SELECT id FROM floe.v1s.events VERSION AS OF 'release'")) == [(1,), (2,)]
    names = {r[0]: r[1] for r in spark.sql("SELECT name, type FROM floe.v1s.events.refs").collect()}
    assert names == {"main": "BRANCH", "release": "TAG", "audit": "BRANCH"}, names


def test_spark_reads_an_upsert_table_and_its_writes_reach_the_key_index(spark_floe):
    """An upsert table written over HTTP (issue 39): Spark reads the newest row per key, and
    what Spark itself appends and deletes (merge-on-read position deletes) is what Floe's key
    index is built from on the next upsert."""
    import json

    import requests

    spark, floe = spark_floe
    floe.pyiceberg().create_namespace("ups")

    def upsert(rows, **params):
        answer = requests.post(
            f"{floe.base}/ingest/v1/{floe.warehouse}/ups/users",
            data="\n".join(json.dumps(r) for r in rows).encode(),
            headers={"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {floe.token()}"},
            params={"wait": "commit", **params},
            timeout=90,
        )
        assert answer.status_code == 200, answer.text

    upsert([{"id": i, "name": f"n{i}"} for i in range(1, 6)], create="true", key="id")
    upsert([{"id": 2, "name": "two"}, {"id": 4, "name": "four"}])
    upsert([{"id": 5}], op="delete")
    expected = [(1, "n1"), (2, "two"), (3, "n3"), (4, "four")]
    assert rows_of(spark.sql("SELECT id, name FROM floe.ups.users")) == expected

    spark.sql("ALTER TABLE floe.ups.users SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    spark.sql("INSERT INTO floe.ups.users VALUES (100, 'from spark')")
    spark.sql("DELETE FROM floe.ups.users WHERE id = 1")
    upsert([{"id": 100, "name": "hundred"}, {"id": 1, "name": "one again"}, {"id": 3, "name": "three"}])
    expected = [(1, "one again"), (2, "two"), (3, "three"), (4, "four"), (100, "hundred")]
    # Spark's catalog caches the table as its own writes left it.
    spark.sql("REFRESH TABLE floe.ups.users")
    assert rows_of(spark.sql("SELECT id, name FROM floe.ups.users")) == expected
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id, name FROM ups.users ORDER BY id", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert [tuple(r.values()) for r in answer.json()["rows"]] == expected


def test_spark_reads_deletion_vectors_floe_merged_with_its_own(spark_floe):
    """A format v3 upsert table: Spark deletes a row with a deletion vector, Floe's next upsert
    of another row of that data file replaces Spark's vector by one holding both, and Spark
    reads the newest row per key with one live vector per data file."""
    import json

    import requests
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    spark, floe = spark_floe
    floe.pyiceberg().create_namespace("ups3")
    keyed = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        identifier_field_ids=[1],
    )
    floe.pyiceberg().create_table(
        "ups3.users", schema=keyed, properties={"format-version": "3", "write.upsert.enabled": "true", "write.delete.mode": "merge-on-read"}
    )

    def upsert(rows, **params):
        answer = requests.post(
            f"{floe.base}/ingest/v1/{floe.warehouse}/ups3/users",
            data="\n".join(json.dumps(r) for r in rows).encode(),
            headers={"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {floe.token()}"},
            params={"wait": "commit", **params},
            timeout=90,
        )
        assert answer.status_code == 200, answer.text

    upsert([{"id": i, "name": f"n{i}"} for i in range(1, 9)])
    spark.sql("REFRESH TABLE floe.ups3.users")
    spark.sql("DELETE FROM floe.ups3.users WHERE id = 1")
    upsert([{"id": 2, "name": "two"}])
    upsert([{"id": 3}], op="delete")
    spark.sql("REFRESH TABLE floe.ups3.users")
    expected = [(2, "two")] + [(i, f"n{i}") for i in range(4, 9)]
    assert rows_of(spark.sql("SELECT id, name FROM floe.ups3.users")) == expected
    vectors = spark.sql("SELECT referenced_data_file, file_format, record_count FROM floe.ups3.users.delete_files").collect()
    assert len(vectors) == 1, vectors
    assert vectors[0]["file_format"] == "PUFFIN" and vectors[0]["record_count"] == 3, vectors
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id, name FROM ups3.users ORDER BY id", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert [tuple(r.values()) for r in answer.json()["rows"]] == expected
