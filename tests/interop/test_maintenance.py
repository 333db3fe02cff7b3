"""Snapshot expiry (POST /api/v1/maintenance/expire-snapshots) on a table PyIceberg wrote:
a dry run changes nothing; a real run removes the snapshots the policy lets go, keeps tagged
ones, deletes exactly the files only expired snapshots reached, and PyIceberg and Floe's SQL
still read the table."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from test_governance import make_principal


def local_path(location: str) -> str:
    return urlparse(location).path


def test_expiry_keeps_what_refs_need_and_deletes_only_unreachable_files(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("mnt")
    table = catalog.create_table(
        "mnt.events", schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "kind", StringType()))
    )
    batch = lambda start: pa.table({"id": pa.array(range(start, start + 10), pa.int64()), "kind": ["a"] * 10})  # noqa: E731
    table.append(batch(0))
    table.append(batch(10))
    tagged = table.current_snapshot().snapshot_id
    tagged_files = {t.file.file_path for t in table.scan().plan_files()}
    table.manage_snapshots().create_tag(tagged, "keep").commit()
    table.append(batch(20))
    # Replace everything: the old data files now live only in older snapshots.
    table.overwrite(batch(100))
    table.append(batch(200))
    table = catalog.load_table("mnt.events")
    assert len(table.metadata.snapshots) == 6  # the overwrite adds a delete and an append
    current_files = {t.file.file_path for t in table.scan().plan_files()}
    first_list = table.metadata.snapshots[0].manifest_list

    body = {"warehouse": floe.warehouse, "namespace": ["mnt"], "table": "events", "max-snapshot-age-ms": 0}
    dry = floe.api("POST", "/api/v1/maintenance/expire-snapshots", json={**body, "dry-run": True})
    assert dry.status_code == 200, dry.text
    planned = dry.json()
    assert planned["dry-run"] is True and planned["deleted-files"] == 0
    assert set(planned["retained-snapshots"]) == {tagged, table.current_snapshot().snapshot_id}
    assert len(planned["expired-snapshots"]) == 4
    freed = set(planned["freed-files"])
    assert first_list in freed
    assert not freed & current_files and not freed & tagged_files
    assert len(catalog.load_table("mnt.events").metadata.snapshots) == 6
    assert all(os.path.exists(local_path(f)) for f in freed)

    # Someone who may read but not maintain the table is refused.
    on_table = {"type": "table", "warehouse": floe.warehouse, "namespace": ["mnt"], "name": "events"}
    reader = make_principal(floe, "maint-reader", [("read-data", on_table)])
    refused = floe.api("POST", "/api/v1/maintenance/expire-snapshots", token=floe.token(*reader), json=body)
    assert refused.status_code == 403, refused.text

    # manage-maintenance alone is enough to maintain the table.
    maintainer = make_principal(floe, "maint-only", [("manage-maintenance", on_table)])
    done = floe.api("POST", "/api/v1/maintenance/expire-snapshots", token=floe.token(*maintainer), json=body)
    assert done.status_code == 200, done.text
    result = done.json()
    assert result["deleted-files"] == len(freed) and result["failed-deletes"] == []
    assert set(result["freed-files"]) == freed
    assert not any(os.path.exists(local_path(f)) for f in freed)
    assert all(os.path.exists(local_path(f)) for f in current_files | tagged_files)

    table = catalog.load_table("mnt.events")
    assert {s.snapshot_id for s in table.metadata.snapshots} == {tagged, table.current_snapshot().snapshot_id}
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(100, 110)) + list(range(200, 210))
    assert sorted(table.scan(snapshot_id=tagged).to_arrow()["id"].to_pylist()) == list(range(20))
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM mnt.events", "warehouse": floe.warehouse})
    assert answer.json()["rows"] == [{"n": 20}]

    # Nothing left to expire: a second run changes nothing.
    again = floe.api("POST", "/api/v1/maintenance/expire-snapshots", json=body).json()
    assert again["expired-snapshots"] == [] and again["deleted-files"] == 0

    # The same through the command line.
    import json
    import subprocess

    from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET

    printed = subprocess.run(
        [FLOE_BIN, "maintenance", "expire-snapshots", "mnt.events", "--warehouse", floe.warehouse, "--dry-run",
         "--max-snapshot-age-ms", "0", "--server", floe.base, "--client-id", ROOT_ID, "--client-secret", ROOT_SECRET],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert json.loads(printed)["retained-snapshots"] == sorted(again["retained-snapshots"])


def test_orphan_cleanup_lists_then_deletes_only_old_unreferenced_files(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("orph")
    table = catalog.create_table("orph.t", schema=Schema(NestedField(1, "id", LongType())))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    table.append(pa.table({"id": pa.array([4], pa.int64())}))
    data_dir = local_path(table.location()) + "/data"
    old_orphan = f"{data_dir}/left-by-a-crashed-writer.parquet"
    young_orphan = f"{data_dir}/being-written-now.parquet"
    for path in (old_orphan, young_orphan):
        with open(path, "wb") as f:
            f.write(b"not referenced")
    ten_days_ago = os.path.getmtime(young_orphan) - 10 * 24 * 3600
    os.utime(old_orphan, (ten_days_ago, ten_days_ago))
    # An old data file the table does use stays, whatever its age.
    used = next(iter(t.file.file_path for t in table.scan().plan_files()))
    os.utime(local_path(used), (ten_days_ago, ten_days_ago))

    body = {"warehouse": floe.warehouse, "namespace": ["orph"], "table": "t"}
    listed = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json=body)
    assert listed.status_code == 200, listed.text
    answer = listed.json()
    assert answer["dry-run"] is True
    assert [local_path(f) for f in answer["orphan-files"]] == [old_orphan]
    assert os.path.exists(old_orphan)

    # With a one-hour minimum age instead of three days, still only the old stray file.
    done = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json={**body, "dry-run": False, "older-than-ms": 3600_000})
    assert done.status_code == 200, done.text
    assert done.json()["deleted-files"] == 1
    assert not os.path.exists(old_orphan) and os.path.exists(young_orphan) and os.path.exists(local_path(used))
    assert sorted(catalog.load_table("orph.t").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]


def test_maintenance_on_an_s3_warehouse_keeps_every_referenced_object(tmp_path):
    """On S3 the listing and the metadata spell locations their own way; with no minimum age,
    orphan cleanup deletes the stray object and nothing the table needs, and expiry deletes
    what only expired snapshots reached."""
    from conftest import start_floe, stop_floe

    # S3 objects cannot be aged: the test lowers the orphan age floor instead.
    floe = start_floe(tmp_path, "sqlite", "s3", extra_args=("--orphan-min-age-floor-secs", "0"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("s3m")
        table = catalog.create_table("s3m.t", schema=Schema(NestedField(1, "id", LongType())))
        for start in (0, 10, 20):
            table.overwrite(pa.table({"id": pa.array(range(start, start + 5), pa.int64())}))
        table = catalog.load_table("s3m.t")
        stray = f"{table.location()}/data/stray.parquet"
        with table.io.new_output(stray).create() as out:
            out.write(b"nobody's")
        body = {"warehouse": floe.warehouse, "namespace": ["s3m"], "table": "t"}

        orphans = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json={**body, "dry-run": False, "older-than-ms": 0})
        assert orphans.status_code == 200, orphans.text
        assert orphans.json()["orphan-files"] == [stray] and orphans.json()["deleted-files"] == 1
        assert not table.io.new_input(stray).exists()
        assert sorted(catalog.load_table("s3m.t").scan().to_arrow()["id"].to_pylist()) == list(range(20, 25))

        expired = floe.api("POST", "/api/v1/maintenance/expire-snapshots", json={**body, "max-snapshot-age-ms": 0})
        assert expired.status_code == 200, expired.text
        freed = expired.json()["freed-files"]
        assert freed and expired.json()["deleted-files"] == len(freed)
        assert not any(table.io.new_input(f).exists() for f in freed)
        table = catalog.load_table("s3m.t")
        assert len(table.metadata.snapshots) == 1
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(20, 25))
        # And after expiry, a listing finds nothing unreferenced.
        again = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json={**body, "older-than-ms": 0}).json()
        assert again["orphan-files"] == []
    finally:
        stop_floe(floe)
