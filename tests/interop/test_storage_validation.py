"""Bucket provisioning and storage validation against a real S3-compatible server (MinIO):
`floe warehouse create --create-bucket` creates the bucket and sets its lifecycle rules,
validation writes, reads, lists and deletes a probe and checks that STS issues a credential
that reaches one table's prefix and no other's; storage whose credential cannot be scoped (a
MinIO access key, for which MinIO's STS issues nothing) is refused naming the step."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid

import boto3
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.client import Config
from botocore.credentials import Credentials
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET, S3_ACCESS_KEY, S3_ENDPOINT, S3_SECRET_KEY
from test_governance import make_principal

STEPS = ["write", "read", "list", "sts", "scoped-access", "scoped-isolation", "delete"]


@pytest.fixture
def floe(tmp_path):
    from conftest import start_floe, stop_floe

    if not S3_ENDPOINT:
        if os.environ.get("CI"):
            pytest.fail("FLOE_TEST_S3_ENDPOINT must be set in CI")
        pytest.skip("no S3-compatible server (FLOE_TEST_S3_ENDPOINT)")
    server = start_floe(tmp_path)
    yield server
    stop_floe(server)


def minio(access_key: str = S3_ACCESS_KEY, secret_key: str = S3_SECRET_KEY):
    return boto3.client(
        "s3",
        endpoint_url=S3_ENDPOINT,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def s3_storage(bucket: str, access_key: str = S3_ACCESS_KEY, secret_key: str = S3_SECRET_KEY, **extra) -> dict:
    return {
        "type": "s3", "bucket": bucket, "key-prefix": "wh", "endpoint": S3_ENDPOINT,
        "path-style-access": True, "region": "us-east-1",
        "access-key-id": access_key, "secret-access-key": secret_key, **extra,
    }


def cli(floe, *args: str, secret: str = S3_SECRET_KEY) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOE_S3_SECRET_ACCESS_KEY=secret, RUST_BACKTRACE="0")
    return subprocess.run(
        [FLOE_BIN, "warehouse", *args, "--server", floe.base, "--client-id", ROOT_ID, "--client-secret", ROOT_SECRET],
        env=env, capture_output=True, text=True, timeout=120,
    )


def s3_flags(bucket: str, access_key: str = S3_ACCESS_KEY) -> list[str]:
    return ["--s3-bucket", bucket, "--s3-prefix", "wh", "--s3-endpoint", S3_ENDPOINT, "--s3-path-style",
            "--s3-access-key-id", access_key]


def catalog_on(floe, warehouse: str):
    """A PyIceberg catalog on an S3 warehouse of a server started with a local one."""
    from pyiceberg.catalog import load_catalog

    props = {**floe.client_properties(), "warehouse": warehouse, "s3.endpoint": S3_ENDPOINT,
             "s3.access-key-id": S3_ACCESS_KEY, "s3.secret-access-key": S3_SECRET_KEY, "s3.region": "us-east-1"}
    return load_catalog(warehouse, type="rest", uri=floe.catalog_uri, **props)


def by_step(report: dict) -> dict[str, dict]:
    return {s["step"]: s for s in report["steps"]}


def test_a_bucket_created_and_validated(floe):
    bucket = f"floe-prov-{uuid.uuid4().hex[:12]}"
    created = cli(floe, "create", "lake", *s3_flags(bucket), "--create-bucket")
    assert created.returncode == 0, created.stderr
    assert S3_SECRET_KEY not in created.stdout
    report = json.loads(created.stdout)["validation"]
    assert report["ok"] is True, report
    assert [s["step"] for s in report["steps"]] == ["create-bucket", "bucket-lifecycle", *STEPS]
    assert all(s["status"] == "ok" for s in report["steps"]), report
    steps = by_step(report)
    assert steps["create-bucket"]["detail"] == f"created bucket {bucket}"
    # MinIO refuses a rule that aborts incomplete uploads (it expires them itself): said, not hidden.
    assert "MINIO_API_STALE_UPLOADS_EXPIRY" in steps["bucket-lifecycle"]["detail"]
    assert "refused reading, listing and writing" in steps["scoped-isolation"]["detail"]
    s3 = minio()
    s3.head_bucket(Bucket=bucket)
    # The probe left nothing behind.
    assert s3.list_objects_v2(Bucket=bucket, Prefix="wh/").get("KeyCount") == 0

    validated = cli(floe, "validate", "lake")
    assert validated.returncode == 0, validated.stderr
    again = json.loads(validated.stdout)
    assert again["ok"] is True and [s["step"] for s in again["steps"]] == STEPS
    assert again["location"] == f"s3://{bucket}/wh"

    # The warehouse works: a table is written and read through it.
    import pyarrow as pa

    catalog = catalog_on(floe, "lake")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_lifecycle_rules_on_a_versioned_bucket_are_set_and_others_kept(floe):
    bucket = f"floe-prov-{uuid.uuid4().hex[:12]}"
    s3 = minio()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    theirs = {"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}}
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [theirs]})

    answer = floe.api("POST", "/api/v1/warehouses",
                      json={"name": "versioned", "storage": s3_storage(bucket), "create-bucket": True})
    assert answer.status_code == 201, answer.text
    steps = by_step(answer.json()["validation"])
    assert "exists and is owned" in steps["create-bucket"]["detail"]
    assert "noncurrent versions expire after 7 days" in steps["bucket-lifecycle"]["detail"]

    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert any(r["ID"] == "theirs" and r["Expiration"]["Days"] == 30 for r in rules), rules
    ours = [r for r in rules if r.get("NoncurrentVersionExpiration")]
    assert len(ours) == 1, rules
    assert ours[0]["NoncurrentVersionExpiration"]["NoncurrentDays"] == 7
    assert ours[0]["Filter"]["Prefix"] == "wh/"
    assert ours[0]["Status"] == "Enabled"

    # Provisioning a second warehouse in the bucket, on another prefix, adds its own rule
    # and keeps the first warehouse's and the foreign one.
    second = floe.api("POST", "/api/v1/warehouses", json={
        "name": "versioned2", "storage": {**s3_storage(bucket), "key-prefix": "wh2"}, "create-bucket": True})
    assert second.status_code == 201, second.text
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert sorted(r["Filter"].get("Prefix") for r in rules) == ["logs/", "wh/", "wh2/"], rules


def _madmin_encrypt(password: str, data: bytes) -> bytes:
    """The body encoding of MinIO's admin API (madmin-go EncryptData, PBKDF2 + AES-GCM form):
    salt | 0x02 | nonce | one sealed DARE 2.0 fragment (the stream's first nonce seals the
    associated data, the final fragment is marked 0x80)."""
    salt, nonce = os.urandom(32), os.urandom(8)
    aead = AESGCM(hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 8192, 32))
    header_tag = aead.encrypt(nonce + (0).to_bytes(4, "little"), b"", None)
    sealed = aead.encrypt(nonce + (1).to_bytes(4, "little"), data, b"\x80" + header_tag)
    return salt + b"\x02" + nonce + sealed


def minio_access_key() -> tuple[str, str]:
    """A MinIO access key (service account) of the root user, made with the admin API as
    `mc admin user svcacct add` does: it reads and writes what root may, but MinIO's STS
    refuses it, so no credential scoped to one table can be had with it."""
    access_key, secret_key = f"svc{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    body = _madmin_encrypt(S3_SECRET_KEY, json.dumps({"accessKey": access_key, "secretKey": secret_key}).encode())
    url = f"{S3_ENDPOINT}/minio/admin/v3/add-service-account"
    request = AWSRequest(method="PUT", url=url, data=body)
    S3SigV4Auth(Credentials(S3_ACCESS_KEY, S3_SECRET_KEY), "s3", "us-east-1").add_auth(request)
    answer = requests.put(url, data=body, headers=dict(request.headers), timeout=30)
    assert answer.status_code == 200, answer.text
    return access_key, secret_key


def test_validation_fails_on_a_credential_that_cannot_scope(floe):
    access_key, secret_key = minio_access_key()
    bucket = f"floe-prov-{uuid.uuid4().hex[:12]}"
    minio().create_bucket(Bucket=bucket)
    # The access key itself works on the bucket ...
    minio(access_key, secret_key).put_object(Bucket=bucket, Key="wh/hello", Body=b"hi")
    minio().delete_object(Bucket=bucket, Key="wh/hello")

    # ... so a dry validation passes the object steps and fails at STS.
    storage = s3_storage(bucket, access_key, secret_key)
    dry = floe.api("POST", "/api/v1/storage/validate", json={"storage": storage})
    assert dry.status_code == 200, dry.text
    assert secret_key not in dry.text
    report = dry.json()
    assert report["ok"] is False
    statuses = {s["step"]: s["status"] for s in report["steps"]}
    assert statuses == {"write": "ok", "read": "ok", "list": "ok", "sts": "failed", "scoped-access": "skipped",
                        "scoped-isolation": "skipped", "delete": "ok"}, report
    assert "STS" in by_step(report)["sts"]["detail"]

    # Creation is refused naming the step, through the API and the CLI; nothing is created.
    refused = floe.api("POST", "/api/v1/warehouses", json={"name": "unscoped", "storage": storage})
    assert refused.status_code == 400, refused.text
    assert "failed validation at step sts" in refused.json()["error"]["message"]
    assert secret_key not in refused.text
    by_cli = cli(floe, "create", "unscoped", *s3_flags(bucket, access_key), secret=secret_key)
    assert by_cli.returncode != 0
    assert "failed validation at step sts" in by_cli.stderr
    assert secret_key not in by_cli.stderr + by_cli.stdout
    assert floe.api("GET", "/api/v1/warehouses/unscoped").status_code == 404
    dry_cli = cli(floe, "validate", *s3_flags(bucket, access_key), secret=secret_key)
    assert dry_cli.returncode != 0 and "storage validation failed at step sts" in dry_cli.stderr

    # A warehouse that says it vends nothing skips the STS steps and is created; its tables
    # are vended no credentials.
    no_sts = floe.api("POST", "/api/v1/warehouses",
                      json={"name": "plain", "storage": {**storage, "sts-enabled": False}})
    assert no_sts.status_code == 201, no_sts.text
    statuses = {s["step"]: s["status"] for s in no_sts.json()["validation"]["steps"]}
    assert statuses["sts"] == "skipped" and statuses["write"] == "ok"
    import pyarrow as pa

    catalog = catalog_on(floe, "plain")
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    vended = floe.api("GET", "/catalog/v1/plain/namespaces/ns/tables/t/credentials")
    assert vended.status_code == 200 and vended.json() == {"storage-credentials": []}, vended.text


def test_only_warehouse_admins_validate(floe):
    client_id, client_secret = make_principal(floe, "viewer", [])
    token = floe.token(client_id, client_secret)
    dry = floe.api("POST", "/api/v1/storage/validate", token=token,
                   json={"storage": s3_storage("floe-test")})
    assert dry.status_code == 403, dry.text
    existing = floe.api("POST", "/api/v1/warehouses/default/validate", token=token)
    assert existing.status_code in (403, 404), existing.text
    mine = floe.api("POST", "/api/v1/warehouses/default/validate")
    assert mine.status_code == 200 and mine.json()["ok"] is True, mine.text
    assert {s["step"]: s["status"] for s in mine.json()["steps"]}["sts"] == "skipped"
