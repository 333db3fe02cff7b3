"""Credential vending against a real S3-compatible server with STS (MinIO): the credentials a
table load returns reach exactly that table's files, read-only unless the caller may write."""

from __future__ import annotations

import boto3
import pyarrow as pa
import pytest
from botocore.client import Config
from botocore.exceptions import ClientError
from test_governance import make_principal


@pytest.fixture
def floe_s3(tmp_path):
    from conftest import start_floe, stop_floe

    server = start_floe(tmp_path, "sqlite", "s3")
    yield server
    stop_floe(server)


def s3_client(config: dict):
    return boto3.client(
        "s3",
        endpoint_url=config["s3.endpoint"],
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def vended(floe, token: str, table: str) -> dict:
    response = floe.api(
        "GET",
        f"/catalog/v1/{floe.warehouse}/namespaces/lake/tables/{table}",
        token=token,
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["storage-credentials"][0]["prefix"] == body["metadata"]["location"]
    return body


def split(location: str) -> tuple[str, str]:
    bucket, _, key = location.removeprefix("s3://").partition("/")
    return bucket, key


def test_vended_credentials_are_scoped_to_the_table(floe_s3):
    root = floe_s3.pyiceberg()
    root.create_namespace("lake")
    orders = root.create_table("lake.orders", schema=pa.schema([("id", pa.int64())]))
    orders.append(pa.table({"id": [1, 2, 3]}))
    other = root.create_table("lake.other", schema=pa.schema([("id", pa.int64())]))
    other.append(pa.table({"id": [9]}))
    on_orders = {"type": "table", "warehouse": floe_s3.warehouse, "namespace": ["lake"], "name": "orders"}

    reader_id, reader_secret = make_principal(floe_s3, "reader", [("read-data", on_orders)])
    reader_token = floe_s3.token(reader_id, reader_secret)
    body = vended(floe_s3, reader_token, "orders")
    config = body["config"]
    assert config["s3.session-token"] and config["s3.access-key-id"] != floe_s3.client_properties()["s3.access-key-id"]
    bucket, prefix = split(body["metadata"]["location"])
    s3 = s3_client(config)
    metadata_key = split(body["metadata-location"])[1]
    assert s3.get_object(Bucket=bucket, Key=metadata_key)["Body"].read()
    with pytest.raises(ClientError):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/data/evil.parquet", Body=b"x")
    other_key = split(other.metadata_location)[1]
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key=other_key)

    # A PyIceberg client holding no S3 keys of its own reads through vended credentials.
    from pyiceberg.catalog import load_catalog

    bare = load_catalog(
        "bare",
        type="rest",
        uri=floe_s3.catalog_uri,
        warehouse=floe_s3.warehouse,
        credential=f"{reader_id}:{reader_secret}",
        **{"oauth2-server-uri": floe_s3.token_uri, "header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    assert sorted(bare.load_table("lake.orders").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]

    writer_id, writer_secret = make_principal(floe_s3, "writer", [("write-data", on_orders)])
    writer_config = vended(floe_s3, floe_s3.token(writer_id, writer_secret), "orders")["config"]
    writer_s3 = s3_client(writer_config)
    writer_s3.put_object(Bucket=bucket, Key=f"{prefix}/data/ok.bin", Body=b"x")
    with pytest.raises(ClientError):
        writer_s3.put_object(Bucket=bucket, Key=f"{split(other.location())[1]}/data/evil.bin", Body=b"x")

    # The refresh endpoint vends the same scope; a principal without read-data gets nothing.
    refreshed = floe_s3.api(
        "GET", f"/catalog/v1/{floe_s3.warehouse}/namespaces/lake/tables/orders/credentials", token=reader_token
    ).json()
    assert refreshed["storage-credentials"][0]["prefix"] == body["metadata"]["location"]
    meta_id, meta_secret = make_principal(floe_s3, "meta", [("read-metadata", on_orders)])
    denied = floe_s3.api(
        "GET",
        f"/catalog/v1/{floe_s3.warehouse}/namespaces/lake/tables/orders/credentials",
        token=floe_s3.token(meta_id, meta_secret),
    )
    assert denied.status_code == 403


def test_local_warehouses_vend_nothing(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("lake")
    catalog.create_table("lake.t", schema=pa.schema([("id", pa.int64())]))
    answer = floe.api("GET", "/catalog/v1/default/namespaces/lake/tables/t/credentials")
    assert answer.status_code == 200
    assert answer.json() == {"storage-credentials": []}


def test_duckdb_reads_with_vended_credentials_only(floe_s3):
    from conftest import ROOT_ID, ROOT_SECRET
    from duckdb_ext import connect

    root = floe_s3.pyiceberg()
    root.create_namespace("lake")
    root.create_table("lake.events", schema=pa.schema([("id", pa.int64())])).append(pa.table({"id": [5, 6]}))
    con = connect()
    # No S3 secret at all: the storage credentials come from the catalog.
    con.execute(
        f"""CREATE SECRET floe_auth (TYPE iceberg, CLIENT_ID '{ROOT_ID}', CLIENT_SECRET '{ROOT_SECRET}',
            OAUTH2_SERVER_URI '{floe_s3.token_uri}')"""
    )
    con.execute(
        f"ATTACH '{floe_s3.warehouse}' AS floe (TYPE iceberg, ENDPOINT '{floe_s3.catalog_uri}', SECRET floe_auth, "
        "ACCESS_DELEGATION_MODE 'vended_credentials')"
    )
    assert con.execute("SELECT sum(id) FROM floe.lake.events").fetchone()[0] == 11
