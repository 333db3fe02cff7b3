"""Spark jobs for test_migrate_hive.py, each in its own process (its own JVM: the Hive client
fix must be on the driver's class path from the start, which a shared session cannot give).

    python hms_spark.py write   HMS_URI DB_LOCATION            -> writes the legacy tables
    python hms_spark.py append  HMS_URI DB_LOCATION            -> more rows on the source side
    python hms_spark.py read    HMS_URI DB_LOCATION            -> rows of every table, via HMS
    python hms_spark.py floe    CATALOG_URI CREDENTIAL TOKEN_URI -> the same tables, via Floe
    python hms_spark.py params  HMS_URI DB_LOCATION            -> table parameters, via HMS

Prints one JSON document on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "legacy.events": "SELECT id, name, amount, day FROM {t} ORDER BY id",
    "legacy.plain": "SELECT id, name FROM {t} ORDER BY id",
    "legacy.ice_events": "SELECT id, name, amount, day FROM {t} ORDER BY id",
}


def session(extra: dict[str, str]) -> SparkSession:
    import pyspark

    jars = os.environ.get("FLOE_SPARK_JARS") or subprocess.check_output(
        [str(ROOT / "scripts/setup-spark.sh")], text=True).strip()
    compat = subprocess.check_output(
        [str(ROOT / "scripts/setup-hms.sh"), "--spark-compat",
         os.path.join(os.path.dirname(pyspark.__file__), "jars")], text=True).strip()
    builder = (
        SparkSession.builder.master("local[2]").appName("floe-hms")
        .config("spark.jars", jars)
        .config("spark.driver.extraClassPath", compat)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    )
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def hive_session(uri: str, location: str) -> SparkSession:
    return session({
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": uri,
        "spark.sql.warehouse.dir": location,
        "spark.sql.catalog.ice": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.ice.type": "hive",
        "spark.sql.catalog.ice.uri": uri,
        "spark.sql.catalog.ice.warehouse": location,
        "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
    })


def rows(spark: SparkSession, catalog: str) -> dict:
    out = {}
    for name, query in TABLES.items():
        if catalog == "floe":
            # The plan maps the metastore's database `legacy` to Floe's namespace `old`.
            table = "floe.old." + name.split(".", 1)[1]
        elif name.endswith("ice_events"):
            table = f"ice.{name}"
        else:
            table = name
        out[name] = [list(r) for r in spark.sql(query.format(t=table)).collect()]
    return out


def main() -> None:
    command = sys.argv[1]
    if command == "floe":
        uri, credential, token_uri = sys.argv[2:5]
        spark = session({
            "spark.sql.catalog.floe": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.floe.type": "rest",
            "spark.sql.catalog.floe.uri": uri,
            "spark.sql.catalog.floe.warehouse": "default",
            "spark.sql.catalog.floe.credential": credential,
            "spark.sql.catalog.floe.oauth2-server-uri": token_uri,
        })
        result = rows(spark, "floe")
    else:
        uri, location = sys.argv[2:4]
        spark = hive_session(uri, location)
        if command == "write":
            spark.sql(f"CREATE DATABASE IF NOT EXISTS legacy LOCATION '{location}/legacy.db'")
            spark.sql("CREATE TABLE legacy.events (id BIGINT, name STRING, amount DOUBLE) "
                      "PARTITIONED BY (day STRING) STORED AS PARQUET")
            spark.sql("INSERT INTO legacy.events PARTITION (day) VALUES "
                      "(1, 'a', 1.5, '2024-01-01'), (2, 'b', 2.5, '2024-01-02'), "
                      "(3, 'c', 3.5, '2024-01-02'), (4, NULL, NULL, '2024-01-03')")
            spark.sql("CREATE TABLE legacy.plain (id BIGINT, name STRING) USING parquet")
            spark.sql("INSERT INTO legacy.plain VALUES (1, 'x'), (2, 'y')")
            spark.sql("CREATE TABLE ice.legacy.ice_events (id BIGINT, name STRING, amount DOUBLE, "
                      "day STRING) USING iceberg PARTITIONED BY (day)")
            spark.sql("INSERT INTO ice.legacy.ice_events VALUES (1, 'a', 1.5, '2024-01-01'), "
                      "(2, 'b', 2.5, '2024-01-02')")
            result = rows(spark, "spark_catalog")
        elif command == "append":
            spark.sql("INSERT INTO legacy.events PARTITION (day) VALUES (5, 'e', 5.5, '2024-01-04')")
            spark.sql("INSERT INTO ice.legacy.ice_events VALUES (3, 'c', 3.5, '2024-01-03')")
            result = rows(spark, "spark_catalog")
        elif command == "read":
            result = rows(spark, "spark_catalog")
        elif command == "params":
            result = {}
            # Through the session catalog: the metastore's own parameters, Iceberg's table too.
            for name in TABLES:
                props = spark.sql(f"SHOW TBLPROPERTIES spark_catalog.{name}").collect()
                result[name] = {r[0]: r[1] for r in props}
        else:
            raise SystemExit(f"unknown command {command}")
    spark.stop()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
