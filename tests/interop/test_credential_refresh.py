"""Iceberg 1.11's REST endpoints for delegated access, against a live server, MinIO and real
clients: reads that outlive one vended credential and go on with fresh ones from
`loadCredentials` (PyIceberg 0.12, which exposes the call, and Spark with Iceberg 1.11.0's
runtime, whose S3 file IO makes it by itself); the signer at the spec's `/sign` path, advertised
under 1.11's property names and the later `remote-signing-config`; the same authorization on both
as on a table load; and `/v1/config` naming them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest
from test_governance import make_principal

# Shorter than STS's 15-minute minimum: Floe ends the credential with a deadline in its session
# policy, which MinIO enforces on every request.
TTL = 20
ROWS_PER_FILE = 25
FILES = 4


@pytest.fixture
def floe_s3(tmp_path):
    from conftest import start_floe, stop_floe

    server = start_floe(tmp_path, "sqlite", "s3", extra_args=("--vended-credentials-ttl-secs", str(TTL)))
    yield server
    stop_floe(server)


def table_url(floe, table: str = "events", suffix: str = "") -> str:
    return f"/catalog/v1/{floe.warehouse}/namespaces/lake/tables/{table}{suffix}"


def on(floe, table: str) -> dict:
    return {"type": "table", "warehouse": floe.warehouse, "namespace": ["lake"], "name": table}


def four_file_table(floe, name: str = "lake.events"):
    """`name` written in FILES appends of ROWS_PER_FILE rows each (one data file per append)."""
    root = floe.pyiceberg()
    if ("lake",) not in root.list_namespaces():
        root.create_namespace("lake")
    table = root.create_table(name, schema=pa.schema([("id", pa.int64())]))
    for f in range(FILES):
        start = f * ROWS_PER_FILE
        table.append(pa.table({"id": pa.array(range(start, start + ROWS_PER_FILE), pa.int64())}))
    return root.load_table(name)


def vending_catalog(floe, client_id: str, client_secret: str):
    """A PyIceberg catalog holding no S3 keys: every table's files are read with vended ones."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(
        f"vended-{client_id}",
        type="rest",
        uri=floe.catalog_uri,
        warehouse=floe.warehouse,
        credential=f"{client_id}:{client_secret}",
        **{"oauth2-server-uri": floe.token_uri, "header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def audited(floe, suffix: str, after_seq: int = 0) -> list[dict]:
    """Audit records of requests whose action ends with `suffix`, newer than `after_seq`."""
    records = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
    return [r for r in records if r["action"].endswith(suffix) and r["seq"] > after_seq]


def last_seq(floe) -> int:
    records = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
    return max((r["seq"] for r in records), default=0)


def test_config_names_every_delegated_access_endpoint(floe_s3):
    config = floe_s3.api("GET", f"/catalog/v1/config?warehouse={floe_s3.warehouse}")
    assert config.status_code == 200, config.text
    endpoints = config.json()["endpoints"]
    for endpoint in (
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
    ):
        assert endpoint in endpoints
    assert len(endpoints) == len(set(endpoints))


def test_pyiceberg_reads_through_a_credential_refresh(floe_s3):
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan

    four_file_table(floe_s3)
    reader_id, reader_secret = make_principal(floe_s3, "reader", [("read-data", on(floe_s3, "events"))])
    catalog = vending_catalog(floe_s3, reader_id, reader_secret)
    table = catalog.load_table("lake.events")
    assert "s3.access-key-id" in table.io.properties, "the read uses vended credentials"
    # The load names the refresh endpoint and when to use it.
    expires_at = int(table.io.properties["s3.session-token-expires-at-ms"]) / 1000
    assert 0 < expires_at - time.time() <= TTL + 1
    assert table.io.properties["client.refresh-credentials-endpoint"] == (
        f"v1/{floe_s3.warehouse}/namespaces/lake/tables/events/credentials"
    )

    tasks = sorted(table.scan().plan_files(), key=lambda t: t.file.file_path)
    assert len(tasks) == FILES

    def read(io, chunk) -> pa.Table:
        return ArrowScan(table.metadata, io, table.schema(), AlwaysTrue()).to_table(chunk)

    first_half = read(table.io, tasks[:2])
    assert first_half.num_rows == 2 * ROWS_PER_FILE

    # The read outlives its credential: past the expiry the store refuses it.
    time.sleep(max(0.0, expires_at - time.time()) + 2)
    stale = load_file_io(dict(table.io.properties), table.metadata.location)
    with pytest.raises(OSError):
        read(stale, tasks[2:3])

    # The client fetches fresh credentials from loadCredentials and reads on.
    before = last_seq(floe_s3)
    fresh = catalog.load_credentials("lake.events", table.metadata.location)
    assert fresh["s3.session-token"] != table.io.properties["s3.session-token"]
    assert int(fresh["s3.session-token-expires-at-ms"]) / 1000 > time.time()
    refreshed = load_file_io({**table.io.properties, **fresh}, table.metadata.location)
    second_half = read(refreshed, tasks[2:])
    ids = sorted(pa.concat_tables([first_half, second_half])["id"].to_pylist())
    assert ids == list(range(FILES * ROWS_PER_FILE)), "every row, each once"
    calls = audited(floe_s3, "/credentials", before)
    assert calls and all(r["status"] == 200 for r in calls), calls


def test_load_credentials_and_sign_refuse_a_principal_without_read(floe_s3):
    events = four_file_table(floe_s3)
    meta = floe_s3.token(*make_principal(floe_s3, "meta", [("read-metadata", on(floe_s3, "events"))]))
    nobody = floe_s3.token(*make_principal(floe_s3, "nobody", []))
    endpoint = floe_s3.client_properties()["s3.endpoint"]
    location = events.location().removeprefix("s3://")
    sign_body = {
        "region": "us-east-1",
        "uri": f"{endpoint}/{location}/data/x.parquet",
        "method": "GET",
        "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]},
    }
    for token, statuses in ((meta, {403}), (nobody, {403, 404})):
        credentials = floe_s3.api("GET", table_url(floe_s3, suffix="/credentials"), token=token)
        assert credentials.status_code in statuses, credentials.text
        assert "storage-credentials" not in credentials.text
        signed = floe_s3.api("POST", table_url(floe_s3, suffix="/sign"), token=token, json=sign_body)
        assert signed.status_code in statuses, signed.text
        assert "authorization" not in signed.text.lower()
        # A load asking for vended credentials hands out none either. (One asking for remote
        # signing names the signer, which holds no secret: the signer itself refuses, above.)
        for mode in ("vended-credentials", "remote-signing"):
            load = floe_s3.api("GET", table_url(floe_s3), token=token, headers={"X-Iceberg-Access-Delegation": mode})
            for secret in ("s3.session-token", "s3.access-key-id", "s3.secret-access-key"):
                assert secret not in load.text, (mode, load.text)
    # Without a token there is no answer at all.
    import requests

    anonymous = requests.get(floe_s3.base + table_url(floe_s3, suffix="/credentials"), timeout=30)
    assert anonymous.status_code == 401


def test_the_spec_signer_is_advertised_and_stays_inside_the_table(floe_s3):
    import requests

    events = four_file_table(floe_s3)
    other = floe_s3.pyiceberg().create_table("lake.other", schema=pa.schema([("id", pa.int64())]))
    token = floe_s3.token(*make_principal(floe_s3, "signed-reader", [("read-data", on(floe_s3, "events"))]))
    loaded = floe_s3.api(
        "GET", table_url(floe_s3), token=token, headers={"X-Iceberg-Access-Delegation": "remote-signing"}
    )
    assert loaded.status_code == 200, loaded.text
    body = loaded.json()
    config = body["config"]
    spec_path = f"v1/{floe_s3.warehouse}/namespaces/lake/tables/events/sign"
    # Iceberg 1.11's names, the deprecated s3.-prefixed ones older clients and PyIceberg read,
    # and the spec's remote-signing-config (no static properties or headers needed).
    assert config["signer.endpoint"] == config["s3.signer.endpoint"] == spec_path
    assert config["signer.uri"] == config["s3.signer.uri"] == floe_s3.catalog_uri
    assert config["s3.remote-signing-enabled"] == "true"
    assert body["remote-signing-config"] == {"properties": {}, "headers": {}}
    assert "s3.access-key-id" not in config and "s3.session-token" not in config

    endpoint = floe_s3.client_properties()["s3.endpoint"]
    signer = f"{config['signer.uri']}/{config['signer.endpoint']}"

    def sign(uri: str):
        return requests.post(
            signer,
            headers={"Authorization": f"Bearer {token}"},
            json={"region": "us-east-1", "uri": uri, "method": "GET",
                  "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}, "provider": "s3",
                  "properties": {}},
            timeout=30,
        )

    inside = f"{endpoint}/{events.metadata_location.removeprefix('s3://')}"
    signed = sign(inside)
    assert signed.status_code == 200, signed.text
    fetched = requests.get(inside, headers={k: v[0] for k, v in signed.json()["headers"].items()}, timeout=30)
    assert fetched.status_code == 200, "MinIO accepts the signature"
    outside = f"{endpoint}/{other.metadata_location.removeprefix('s3://')}"
    refused = sign(outside)
    assert refused.status_code == 403, refused.text
    assert "authorization" not in refused.text.lower()

    # A create asking for either delegation is answered as a load is: a client writes its first
    # files with what the create returned.
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}
    for name, mode in (("signed_new", "remote-signing"), ("vended_new", "vended-credentials")):
        created = floe_s3.api(
            "POST", f"/catalog/v1/{floe_s3.warehouse}/namespaces/lake/tables",
            headers={"X-Iceberg-Access-Delegation": mode}, json={"name": name, "schema": schema},
        )
        assert created.status_code == 200, created.text
        config = created.json()["config"]
        if mode == "remote-signing":
            assert config["signer.endpoint"] == f"v1/{floe_s3.warehouse}/namespaces/lake/tables/{name}/sign"
            assert "remote-signing-config" in created.json()
        else:
            assert config["s3.session-token"]
            assert config["client.refresh-credentials-endpoint"].endswith(f"/tables/{name}/credentials")


SPARK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    uri, token_uri, credential, warehouse, jars, pause = sys.argv[1:7]
    spark = (SparkSession.builder.master("local[1]").appName("floe-credential-refresh")
             .config("spark.jars", jars).config("spark.ui.enabled", "false")
             .config("spark.sql.catalog.floe", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.floe.type", "rest")
             .config("spark.sql.catalog.floe.uri", uri)
             .config("spark.sql.catalog.floe.warehouse", warehouse)
             .config("spark.sql.catalog.floe.credential", credential)
             .config("spark.sql.catalog.floe.oauth2-server-uri", token_uri)
             .config("spark.sql.catalog.floe.header.X-Iceberg-Access-Delegation", "vended-credentials")
             .config("spark.sql.catalog.floe.io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
             .config("spark.sql.catalog.floe.client.region", "us-east-1")
             # The same principal with no credentials at all: Iceberg 1.11's S3 signer asks
             # Floe's /sign for every request.
             .config("spark.sql.catalog.signed", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.signed.type", "rest")
             .config("spark.sql.catalog.signed.uri", uri)
             .config("spark.sql.catalog.signed.warehouse", warehouse)
             .config("spark.sql.catalog.signed.credential", credential)
             .config("spark.sql.catalog.signed.oauth2-server-uri", token_uri)
             .config("spark.sql.catalog.signed.header.X-Iceberg-Access-Delegation", "remote-signing")
             .config("spark.sql.catalog.signed.io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
             .config("spark.sql.catalog.signed.client.region", "us-east-1")
             .getOrCreate())

    @udf("bigint")
    def slow(v):
        time.sleep(float(pause))
        return v

    started = time.time()
    # One split per data file, run one after another: each file is opened after the files
    # before it were read, so the last ones are opened after the first credential expired.
    df = spark.read.format("iceberg").option("split-size", "1").option("file-open-cost", "1").load("floe.lake.events")
    rows = df.select(slow(df.id).alias("id")).collect()
    seconds = time.time() - started
    signed = sorted(r.id for r in spark.sql("SELECT id FROM signed.lake.events").collect())
    print("RESULT " + json.dumps({"ids": sorted(r.id for r in rows), "seconds": seconds, "signed": signed}))
    spark.stop()
""")


@pytest.mark.spark
def test_spark_with_iceberg_1_11_refreshes_vended_credentials_and_signs(floe_s3, tmp_path):
    jars = os.environ.get("FLOE_SPARK_JARS")
    if not jars:
        if os.environ.get("CI"):
            pytest.fail("FLOE_SPARK_JARS must be set in CI (scripts/setup-spark.sh prints it)")
        pytest.skip("FLOE_SPARK_JARS is not set")
    folder = Path(jars.split(",")[0]).parent
    runtime = folder / "iceberg-spark-runtime-3.5_2.12-1.11.0.jar"
    assert runtime.exists(), f"{runtime} (scripts/setup-spark.sh downloads it)"
    # The AWS SDK bundle beside it (Maven Central has none for 1.11.0's SDK line; the SDK is
    # compatible): Iceberg's own S3 classes come from the 1.11.0 runtime.
    bundle = next(p for p in jars.split(",") if "aws-bundle" in p)
    four_file_table(floe_s3)
    reader_id, reader_secret = make_principal(floe_s3, "spark-reader", [("read-data", on(floe_s3, "events"))])
    before = last_seq(floe_s3)
    script = tmp_path / "spark_refresh.py"
    script.write_text(SPARK_SCRIPT)
    # Each row pauses long enough that the read outlives one credential lifetime.
    pause = (TTL + 10) / (FILES * ROWS_PER_FILE)
    run = subprocess.run(
        [sys.executable, str(script), floe_s3.catalog_uri, floe_s3.token_uri, f"{reader_id}:{reader_secret}",
         floe_s3.warehouse, f"{runtime},{bundle}", str(pause)],
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    line = next(l for l in run.stdout.splitlines() if l.startswith("RESULT "))
    import json

    result = json.loads(line[len("RESULT "):])
    assert result["ids"] == list(range(FILES * ROWS_PER_FILE)), "every row, each once"
    assert result["seconds"] > TTL, "the read outlived one credential"
    # Iceberg's VendedCredentialsProvider fetched them from loadCredentials, as the reader.
    calls = audited(floe_s3, "/credentials", before)
    assert calls, "Spark never called loadCredentials"
    assert all(r["status"] == 200 for r in calls), calls
    # Through remote signing the same reader reads the same rows, every request signed by Floe.
    assert result["signed"] == list(range(FILES * ROWS_PER_FILE))
    signatures = audited(floe_s3, "/sign", before)
    assert signatures and all(r["status"] == 200 for r in signatures), signatures
