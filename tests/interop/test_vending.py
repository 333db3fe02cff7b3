"""Credential vending against a real S3-compatible server with STS (MinIO): the credentials a
table load returns reach exactly that table's files, read-only unless the caller may write."""

from __future__ import annotations

import time

import boto3
import pyarrow as pa
import pytest
from botocore.client import Config
from botocore.exceptions import ClientError
from test_governance import make_principal


VENDED_TTL = 900


@pytest.fixture
def floe_s3(tmp_path):
    from conftest import start_floe, stop_floe

    server = start_floe(tmp_path, "sqlite", "s3", extra_args=("--vended-credentials-ttl-secs", str(VENDED_TTL)))
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
    # They last --vended-credentials-ttl-secs (STS rounds nothing; allow for clock and request time).
    lifetime = int(config["s3.session-token-expires-at-ms"]) / 1000 - time.time()
    assert VENDED_TTL - 60 < lifetime <= VENDED_TTL + 5, lifetime
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


def remote_sign(floe, token: str, table: str, method: str, uri: str, headers: dict, body: str | None = None):
    payload = {"region": "us-east-1", "uri": uri, "method": method, "headers": {k: [v] for k, v in headers.items()}}
    if body is not None:
        payload["body"] = body
    return floe.api(
        "POST", f"/catalog/v1/{floe.warehouse}/namespaces/lake/tables/{table}/sign", token=token, json=payload
    )


def send_signed(method: str, uri: str, signed: dict, data: bytes | None = None):
    import requests

    headers = {k: v[0] for k, v in signed["headers"].items()}
    return requests.request(method, uri, headers=headers, data=data, timeout=30)


def test_remote_signing_signs_only_the_tables_requests(floe_s3):
    import hashlib

    root = floe_s3.pyiceberg()
    root.create_namespace("lake")
    orders = root.create_table("lake.orders", schema=pa.schema([("id", pa.int64())]))
    other = root.create_table("lake.other", schema=pa.schema([("id", pa.int64())]))
    on_orders = {"type": "table", "warehouse": floe_s3.warehouse, "namespace": ["lake"], "name": "orders"}
    writer = floe_s3.token(*make_principal(floe_s3, "signer-writer", [("write-data", on_orders)]))
    reader = floe_s3.token(*make_principal(floe_s3, "signer-reader", [("read-data", on_orders)]))
    endpoint = floe_s3.client_properties()["s3.endpoint"]
    bucket, key = split(orders.location())
    uri = f"{endpoint}/{bucket}/{key}/data/signed.bin"
    data = b"signed by floe"
    put_headers = {"x-amz-content-sha256": hashlib.sha256(data).hexdigest(), "content-type": "application/octet-stream"}

    signed_put = remote_sign(floe_s3, writer, "orders", "PUT", uri, put_headers)
    assert signed_put.status_code == 200, signed_put.text
    assert signed_put.json()["uri"] == uri
    assert send_signed("PUT", uri, signed_put.json(), data).status_code == 200, "MinIO accepts Floe's signature"
    signed_get = remote_sign(floe_s3, reader, "orders", "GET", uri, {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    assert signed_get.status_code == 200, signed_get.text
    fetched = send_signed("GET", uri, signed_get.json())
    assert fetched.status_code == 200 and fetched.content == data

    # A reader may not have writes signed; nobody gets requests outside the table signed.
    assert remote_sign(floe_s3, reader, "orders", "PUT", uri, put_headers).status_code == 403
    _, other_key = split(other.location())
    outside = f"{endpoint}/{bucket}/{other_key}/data/x.bin"
    assert remote_sign(floe_s3, writer, "orders", "PUT", outside, put_headers).status_code == 403
    escape = f"{endpoint}/{bucket}/{key}-evil/data/x.bin"
    assert remote_sign(floe_s3, writer, "orders", "GET", escape, {}).status_code == 403
    listing = f"{endpoint}/{bucket}?list-type=2&prefix={key}/data/"
    assert remote_sign(floe_s3, reader, "orders", "GET", listing, {}).status_code == 200
    assert remote_sign(floe_s3, reader, "orders", "GET", f"{endpoint}/{bucket}?list-type=2&prefix=", {}).status_code == 403
    copy = {**put_headers, "x-amz-copy-source": f"/{bucket}/{other_key}/metadata/x.json"}
    assert remote_sign(floe_s3, writer, "orders", "PUT", uri, copy).status_code == 403, "copies are not signed"
    assert remote_sign(floe_s3, writer, "orders", "PUT", f"http://evil.example/{bucket}/{key}/data/x", put_headers).status_code == 403
    dotted = f"{endpoint}/{bucket}/{key}/data/%2E%2E/%2E%2E/{other_key.rsplit('/', 1)[-1]}/x"
    assert remote_sign(floe_s3, writer, "orders", "PUT", dotted, put_headers).status_code == 403
    assert remote_sign(floe_s3, writer, "orders", "PUT", f"{endpoint}/{bucket}?policy&prefix={key}/", {}).status_code == 403
    assert remote_sign(floe_s3, writer, "orders", "PUT", f"{uri}?acl", put_headers).status_code == 403
    sibling_listing = f"{endpoint}/{bucket}?list-type=2&prefix={key}"
    assert remote_sign(floe_s3, reader, "orders", "GET", sibling_listing, {}).status_code == 403
    delete_body = f"<Delete><Object><Key>{key}/data/a</Key></Object><Object><Key>{other_key}/b</Key></Object></Delete>"
    assert remote_sign(floe_s3, writer, "orders", "POST", f"{endpoint}/{bucket}?delete", {}, delete_body).status_code == 403
    own_delete = f"<Delete><Object><Key>{key}/data/signed.bin</Key></Object></Delete>"
    signed_delete = remote_sign(
        floe_s3, writer, "orders", "POST", f"{endpoint}/{bucket}?delete",
        {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}, own_delete,
    )
    assert signed_delete.status_code == 200
    import hashlib as _h

    assert signed_delete.json()["headers"]["x-amz-content-sha256"] == [_h.sha256(own_delete.encode()).hexdigest()], (
        "the checked body is what gets signed"
    )


def test_loads_advertise_the_tables_signer_when_asked(floe_s3):
    import requests

    root = floe_s3.pyiceberg()
    root.create_namespace("lake")
    orders = root.create_table("lake.orders", schema=pa.schema([("id", pa.int64())]))
    token = floe_s3.token()
    loaded = floe_s3.api(
        "GET",
        f"/catalog/v1/{floe_s3.warehouse}/namespaces/lake/tables/orders",
        headers={"X-Iceberg-Access-Delegation": "remote-signing"},
        token=token,
    ).json()
    config = loaded["config"]
    assert config["s3.remote-signing-enabled"] == "true"
    assert "s3.access-key-id" not in config, "signing hands out no keys"
    signer = f"{config['s3.signer.uri']}/{config['s3.signer.endpoint']}"
    endpoint = floe_s3.client_properties()["s3.endpoint"]
    bucket, key = split(orders.metadata_location)
    uri = f"{endpoint}/{bucket}/{key}"
    signed = requests.post(
        signer,
        headers={"Authorization": f"Bearer {token}"},
        json={"region": "us-east-1", "uri": uri, "method": "GET", "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}},
        timeout=30,
    )
    assert signed.status_code == 200, signed.text
    assert send_signed("GET", uri, signed.json()).status_code == 200


def signing_catalog(floe, client_id: str, client_secret: str):
    """A PyIceberg catalog holding no S3 keys: its fsspec file IO asks Floe to sign each request."""
    import fsspec.config
    from pyiceberg.catalog import load_catalog

    # PyIceberg (0.12) gives each thread its own S3 file system but fsspec hands them all one
    # cached instance, whose signer hook every new thread unregisters and registers again: a
    # request in flight on another thread in that instant goes out unsigned (MinIO: 403). One
    # instance per thread keeps each hook to itself.
    fsspec.config.conf.setdefault("s3", {})["skip_instance_cache"] = True
    return load_catalog(
        f"signed-{client_id}",
        type="rest",
        uri=floe.catalog_uri,
        warehouse=floe.warehouse,
        credential=f"{client_id}:{client_secret}",
        **{
            "oauth2-server-uri": floe.token_uri,
            "header.X-Iceberg-Access-Delegation": "remote-signing",
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
        },
    )


def test_pyiceberg_signer_reads_and_writes_through_floe(floe_s3):
    root = floe_s3.pyiceberg()
    root.create_namespace("lake")
    schema = pa.schema([("id", pa.int64())])
    root.create_table("lake.orders", schema=schema).append(pa.table({"id": [1, 2, 3]}))
    root.create_table("lake.other", schema=schema).append(pa.table({"id": [9]}))

    def on(name):
        return {"type": "table", "warehouse": floe_s3.warehouse, "namespace": ["lake"], "name": name}

    writer = signing_catalog(
        floe_s3, *make_principal(floe_s3, "signed-writer", [("read-data", on("orders")), ("write-data", on("orders"))])
    )
    orders = writer.load_table("lake.orders")
    assert orders.io.properties.get("s3.signer") == "S3V4RestSigner"
    assert "s3.access-key-id" not in orders.io.properties, "the client holds no keys"
    assert sorted(orders.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    orders.append(pa.table({"id": [4]}))
    # The files the signed client wrote are ordinary files: root (with keys) reads them too.
    assert sorted(root.load_table("lake.orders").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]

    reader = signing_catalog(floe_s3, *make_principal(floe_s3, "signed-reader", [("read-data", on("orders"))]))
    readable = reader.load_table("lake.orders")
    assert sorted(readable.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    # A reader's writes die at the signer (PUT needs write-data), before any commit.
    with pytest.raises(Exception) as refused:
        readable.append(pa.table({"id": [5]}))
    assert "403" in str(refused.value) or "Forbidden" in str(refused.value) or "sign" in str(refused.value).lower()
    assert sorted(root.load_table("lake.orders").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    # Another table is invisible to both.
    from pyiceberg.exceptions import NoSuchTableError

    with pytest.raises(NoSuchTableError):
        reader.load_table("lake.other")
