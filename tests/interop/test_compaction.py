"""Maintenance as background jobs: compaction (bin-packing, sorting, deletes applied,
manifests merged) next to live PyIceberg writers, policies and their inheritance, commit
triggers, data retention, a crash in the middle of a compaction, and fairness between
warehouses."""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType
from test_governance import make_principal

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "kind", StringType(), required=False),
)
BY_KIND = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="kind"))


def rows(ids, kind="a"):
    return pa.table({"id": pa.array(list(ids), pa.int64()), "kind": pa.array([kind] * len(ids), pa.string())})


def queue_job(floe, namespace, table, kind, token=None, **options):
    body = {"warehouse": floe.warehouse, "namespace": [namespace], "table": table, "kind": kind, "options": options}
    return floe.api("POST", "/api/v1/jobs", token=token, json=body)


def wait_job(floe, job_id, timeout=300):
    deadline = time.time() + timeout
    while True:
        job = floe.api("GET", f"/api/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            return job
        assert time.time() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.2)


def run_job(floe, namespace, table, kind, **options):
    answer = queue_job(floe, namespace, table, kind, **options)
    assert answer.status_code == 200, answer.text
    job = wait_job(floe, answer.json()["job"]["id"])
    assert job["status"] == "succeeded", job
    return job["result"]


def floe_ids(floe, table):
    answer = floe.api("POST", "/api/v1/sql", json={"sql": f"SELECT id FROM {table} ORDER BY id", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return [r["id"] for r in answer.json()["rows"]]


def duckdb_ids(floe, table):
    from test_duckdb import attach

    con = attach(floe)
    return [r[0] for r in con.execute(f"SELECT id FROM floe.{table} ORDER BY id").fetchall()]


def test_compaction_bin_packs_per_partition_and_every_reader_agrees(floe):
    # Only requested jobs here: no compaction queued by the appends below.
    quiet = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"small-file-trigger": 1000}}
    assert floe.api("PUT", "/api/v1/maintenance/policies", json=quiet).status_code == 200
    catalog = floe.pyiceberg()
    catalog.create_namespace("cmp")
    table = catalog.create_table("cmp.events", schema=SCHEMA, partition_spec=BY_KIND)
    expected = set()
    for i in range(12):
        batch = pa.concat_tables([rows(range(i * 100, i * 100 + 50), "a"), rows(range(i * 100 + 50, i * 100 + 100), "b")])
        table.append(batch)
        expected |= set(range(i * 100, i * 100 + 100))
    table.delete(In("id", list(range(0, 1200, 7))))
    expected -= set(range(0, 1200, 7))
    table = catalog.load_table("cmp.events")
    before = {t.file.file_path for t in table.scan().plan_files()}
    assert len(before) >= 24

    # Someone who may read the table may not queue its maintenance.
    on_table = {"type": "table", "warehouse": floe.warehouse, "namespace": ["cmp"], "name": "events"}
    reader = make_principal(floe, "cmp-reader", [("read-data", on_table)])
    refused = queue_job(floe, "cmp", "events", "compact", token=floe.token(*reader))
    assert refused.status_code == 403, refused.text
    assert queue_job(floe, "cmp", "events", "shrink").status_code == 400
    assert queue_job(floe, "cmp", "events", "compact", fast=True).status_code == 400

    dry = run_job(floe, "cmp", "events", "compact", **{"dry-run": True})
    assert dry["groups-planned"] == 2 and dry["rewritten-files"] == 0
    result = run_job(floe, "cmp", "events", "compact")
    assert result["groups-committed"] == 2, result
    assert result["rewritten-files"] == len(before)
    assert result["added-files"] == 2
    assert result["rows-written"] == len(expected)
    assert result["merged-manifests"] > 0

    table = catalog.load_table("cmp.events")
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary["total-data-files"] == "2"
    assert snapshot.summary["total-records"] == str(len(expected))
    after = {t.file.file_path for t in table.scan().plan_files()}
    assert len(after) == 2 and not after & before
    assert len(table.inspect.manifests()) <= 2
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(expected)
    assert floe_ids(floe, "cmp.events") == sorted(expected)
    assert duckdb_ids(floe, "cmp.events") == sorted(expected)
    # Time travel to before the compaction still reads the old files.
    first = table.metadata.snapshots[0].snapshot_id
    assert len(table.scan(snapshot_id=first).to_arrow()) == 100

    # Nothing left to do: the next run plans nothing.
    again = run_job(floe, "cmp", "events", "compact")
    assert again["groups-planned"] == 0 and again["snapshot-id"] is None

    listed = floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}&namespace=cmp&table=events&kind=compact").json()
    assert [j["status"] for j in listed["jobs"]] == ["succeeded"] * 3
    assert all(j["trigger"] == "request" and j["table"] == "events" for j in listed["jobs"])
    metrics = floe.api("GET", "/metrics").text
    assert 'floe_maintenance_jobs_total{kind="compact",outcome="succeeded"} 3' in metrics


def test_compaction_sorts_by_the_sort_order(floe):
    from pyiceberg.table.sorting import SortField, SortOrder

    catalog = floe.pyiceberg()
    catalog.create_namespace("srt")
    table = catalog.create_table(
        "srt.t", schema=SCHEMA, sort_order=SortOrder(SortField(source_id=1, transform=IdentityTransform()))
    )
    ids = list(range(2000))
    random.Random(7).shuffle(ids)
    for chunk in range(0, 2000, 250):
        table.append(rows(ids[chunk : chunk + 250]))
    run_job(floe, "srt", "t", "compact")
    table = catalog.load_table("srt.t")
    files = list(table.scan().plan_files())
    assert len(files) == 1
    import pyarrow.parquet as pq

    path = files[0].file.file_path
    assert pq.read_table(urlparse(path).path)["id"].to_pylist() == list(range(2000))


def test_policies_inherit_downward_and_table_properties_override(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("pol")
    catalog.create_namespace(("pol", "inner"))
    catalog.create_table(("pol", "inner", "t"), schema=SCHEMA, properties={"history.expire.max-snapshot-age-ms": "1234"})

    def put(on, policy):
        return floe.api("PUT", "/api/v1/maintenance/policies", json={"on": on, "policy": policy})

    warehouse = {"type": "warehouse", "warehouse": floe.warehouse}
    outer = {"type": "namespace", "warehouse": floe.warehouse, "namespace": ["pol"]}
    table = {"type": "table", "warehouse": floe.warehouse, "namespace": ["pol", "inner"], "name": "t"}
    assert put(warehouse, {"target-file-size-bytes": 1 << 20, "orphan-min-age-ms": 7_200_000}).status_code == 200
    assert put(outer, {"target-file-size-bytes": 2 << 20, "max-snapshot-age-ms": 999}).status_code == 200
    assert put(table, {"small-file-trigger": 3}).status_code == 200

    got = floe.api("GET", f"/api/v1/maintenance/policies?warehouse={floe.warehouse}&namespace=pol.inner&table=t").json()
    assert got["policy"] == {"small-file-trigger": 3}
    effective = got["effective"]
    assert effective["target-file-size-bytes"] == 2 << 20  # the nearer namespace wins
    assert effective["orphan-min-age-ms"] == 7_200_000  # from the warehouse
    assert effective["max-snapshot-age-ms"] == 1234  # the table property overrides
    assert effective["small-file-trigger"] == 3 and effective["enabled"] is True
    assert effective["min-snapshots-to-keep"] == 1

    bad = put(table, {"orphan-min-age-ms": 5})
    assert bad.status_code == 400 and "orphan-min-age-ms" in bad.text
    unknown = put(table, {"target-size": 5})
    assert unknown.status_code == 400 and "target-size" in unknown.text
    other = make_principal(floe, "pol-reader", [("read-data", table)])
    assert floe.api("PUT", "/api/v1/maintenance/policies", token=floe.token(*other), json={"on": table, "policy": {}}).status_code == 403

    # Setting policies is audited, denials included.
    records = floe.api("GET", "/api/v1/audit?action=PUT%20/api/v1/maintenance/policies&limit=1000").json()["records"]
    assert sum(r["decision"] == "allow" and r["status"] == 200 for r in records) >= 3
    assert any(r["principal"] == "pol-reader" and r["status"] == 403 for r in records), records[-3:]

    # Removing the table's policy makes it inherit again.
    assert put(table, None).status_code == 200
    got = floe.api("GET", f"/api/v1/maintenance/policies?warehouse={floe.warehouse}&namespace=pol.inner&table=t").json()
    assert got["policy"] is None and got["effective"]["small-file-trigger"] == 16


def test_commits_that_leave_small_files_trigger_a_compaction(tmp_path):
    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, extra_args=("--maintenance-trigger-delay-secs", "0"))
    try:
        check_commit_trigger(floe)
    finally:
        stop_floe(floe)


def check_commit_trigger(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("trg")
    table = catalog.create_table("trg.t", schema=SCHEMA)
    on = {"type": "table", "warehouse": floe.warehouse, "namespace": ["trg"], "name": "t"}
    assert floe.api("PUT", "/api/v1/maintenance/policies", json={"on": on, "policy": {"small-file-trigger": 4}}).status_code == 200
    for i in range(4):
        table.append(rows(range(i * 10, i * 10 + 10)))
    deadline = time.time() + 120
    while True:
        jobs = floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}&namespace=trg&table=t").json()["jobs"]
        done = [j for j in jobs if j["kind"] == "compact" and j["status"] == "succeeded"]
        if done:
            break
        assert time.time() < deadline, jobs
        time.sleep(0.5)
    assert done[0]["trigger"] == "commit"
    table = catalog.load_table("trg.t")
    assert len(list(table.scan().plan_files())) == 1
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(40))


def test_retention_drops_old_rows_and_keeps_the_rest(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("ret")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestampType(), required=False))
    table = catalog.create_table("ret.t", schema=schema)
    now = dt.datetime.now()

    def batch(ids, days_ago):
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "ts": pa.array([now - dt.timedelta(days=d) for d in days_ago], pa.timestamp("us")),
            }
        )

    table.append(batch([1, 2, 3], [40, 45, 50]))  # entirely old: dropped unread
    table.append(batch([4, 5, 6], [1, 2, 3]))  # entirely new: untouched
    table.append(batch([7, 8, 9, 10], [60, 5, 1, 0]))  # straddles: rewritten
    table.append(pa.table({"id": pa.array([11], pa.int64()), "ts": pa.array([None], pa.timestamp("us"))}))
    result = run_job(floe, "ret", "t", "retention", **{"retention-column": "ts", "retention-days": 30})
    assert result["rewritten-files"] == 2 and result["added-files"] == 1, result
    table = catalog.load_table("ret.t")
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [4, 5, 6, 8, 9, 10, 11]
    assert floe_ids(floe, "ret.t") == [4, 5, 6, 8, 9, 10, 11]
    # A rule on a column that is not a time fails the job, saying why.
    bad = queue_job(floe, "ret", "t", "retention", **{"retention-column": "id", "retention-days": 1})
    assert bad.status_code == 200, bad.text
    deadline = time.time() + 60
    while "date or timestamp" not in (floe.api("GET", f"/api/v1/jobs/{bad.json()['job']['id']}").json().get("error") or ""):
        assert time.time() < deadline
        time.sleep(0.2)


def test_compaction_and_expiry_next_to_live_writers_lose_nothing(floe):
    """PyIceberg appends and deletes while compaction and expiry run again and again; the
    table ends equal to a model of the expected rows, for every reader."""
    catalog = floe.pyiceberg()
    catalog.create_namespace("live")
    catalog.create_table("live.t", schema=SCHEMA, partition_spec=BY_KIND)
    model: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def commit_with_retry(action):
        for _ in range(50):
            try:
                action(catalog.load_table("live.t"))
                return
            except (CommitFailedException, ValidationException, FileNotFoundError):
                # Lost a race with compaction, or expiry (at age 0 here) removed the snapshot
                # the operation started from — found at commit, or earlier, when PyIceberg
                # reads that snapshot's manifest list to build on it and the file is gone:
                # do it again on the table as it is now.
                time.sleep(0.05)
        raise AssertionError("a writer's commit kept failing")

    def writer():
        rng = random.Random(11)
        next_id = 0
        try:
            for step in range(60):
                if step % 5 == 4 and model:
                    with lock:
                        victims = rng.sample(sorted(model), min(5, len(model)))
                    commit_with_retry(lambda t: t.delete(In("id", victims)))
                    with lock:
                        model.difference_update(victims)
                else:
                    ids = list(range(next_id, next_id + 20))
                    next_id += 20
                    batch = pa.concat_tables([rows(ids[:10], "a"), rows(ids[10:], "b")])
                    commit_with_retry(lambda t: t.append(batch))
                    with lock:
                        model.update(ids)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    runs = {"compact": 0, "expire-snapshots": 0}
    aborted = 0
    while not stop.is_set():
        for kind, options in (("compact", {}), ("expire-snapshots", {"max-snapshot-age-ms": 0})):
            answer = queue_job(floe, "live", "t", kind, **options)
            assert answer.status_code == 200, answer.text
            job = wait_job(floe, answer.json()["job"]["id"])
            assert job["status"] == "succeeded", job
            runs[kind] += 1
            aborted += len(job["result"].get("aborted-groups", []))
    thread.join()
    assert not errors, errors
    assert runs["compact"] >= 2 and runs["expire-snapshots"] >= 2, runs
    # A final compaction and expiry on the quiet table.
    run_job(floe, "live", "t", "compact")
    run_job(floe, "live", "t", "expire-snapshots", **{"max-snapshot-age-ms": 0})
    expected = sorted(model)
    table = catalog.load_table("live.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == expected
    assert floe_ids(floe, "live.t") == expected
    assert duckdb_ids(floe, "live.t") == expected
    assert len(table.metadata.snapshots) == 1
    # Every file the table references exists; nothing else is left under data/.
    referenced = {urlparse(t.file.file_path).path for t in table.scan().plan_files()}
    assert all(os.path.exists(p) for p in referenced)


def test_a_compaction_killed_midway_leaves_the_table_intact_and_orphans_to_clean(tmp_path):
    from conftest import start_floe, stop_floe

    args = ("--maintenance-lease-secs", "3", "--maintenance-retry-secs", "1")
    floe = start_floe(tmp_path, extra_args=args)
    try:
        # Only the requested compaction runs (no commit-triggered one first).
        off = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"enabled": False}}
        assert floe.api("PUT", "/api/v1/maintenance/policies", json=off).status_code == 200
        catalog = floe.pyiceberg()
        catalog.create_namespace("kill")
        table = catalog.create_table("kill.t", schema=SCHEMA, properties={"write.parquet.row-group-limit": "5000"})
        for i in range(40):
            table.append(rows(range(i * 20_000, (i + 1) * 20_000), "x" * 20))
        expected_count = 40 * 20_000
        data_dir = Path(urlparse(catalog.load_table("kill.t").location()).path) / "data"
        before = set(os.listdir(data_dir))
        answer = queue_job(floe, "kill", "t", "compact", **{"target-file-size-bytes": 256 << 10})
        job_id = answer.json()["job"]["id"]
        # Kill as soon as the compaction has written a file of its own.
        deadline = time.time() + 120
        while not (set(os.listdir(data_dir)) - before):
            assert time.time() < deadline, "compaction wrote nothing"
            time.sleep(0.01)
        floe.process.kill()
        floe.process.wait()
        half_written = set(os.listdir(data_dir)) - before
        assert half_written
    finally:
        stop_floe(floe)

    # The half-written files are seconds old: cleaning them needs the age floor lowered.
    floe = start_floe(
        tmp_path, extra_args=args + ("--maintenance-workers", "0", "--orphan-min-age-floor-secs", "0")
    )
    try:
        catalog = floe.pyiceberg()
        table = catalog.load_table("kill.t")
        assert len(table.scan().to_arrow()) == expected_count
        assert {os.path.basename(t.file.file_path) for t in table.scan().plan_files()} == before
        cleanup = floe.api(
            "POST",
            "/api/v1/maintenance/remove-orphan-files",
            json={"warehouse": floe.warehouse, "namespace": ["kill"], "table": "t", "dry-run": False, "older-than-ms": 0},
        ).json()
        orphaned = {os.path.basename(f) for f in cleanup["orphan-files"]}
        assert half_written <= orphaned, (half_written, orphaned)
        assert set(os.listdir(data_dir)) == before
        assert len(catalog.load_table("kill.t").scan().to_arrow()) == expected_count
        # The interrupted job is still recorded as running under the dead node's lease.
        job = floe.api("GET", f"/api/v1/jobs/{job_id}").json()
        assert job["status"] == "running" and job["attempts"] == 1
    finally:
        stop_floe(floe)

    # A node that runs jobs takes the job over once the lease has run out, and finishes it.
    floe = start_floe(tmp_path, extra_args=args)
    try:
        job = wait_job(floe, job_id)
        assert job["status"] == "succeeded" and job["attempts"] == 2, job
        table = floe.pyiceberg().load_table("kill.t")
        assert len(table.scan().to_arrow()) == expected_count
        assert table.current_snapshot().summary.operation.value == "replace"
    finally:
        stop_floe(floe)


def test_a_warehouse_with_a_backlog_does_not_starve_another(tmp_path):
    from conftest import start_floe, stop_floe

    # One worker, so the order of claims is the fairness policy's alone.
    floe = start_floe(tmp_path, extra_args=("--maintenance-workers", "1", "--maintenance-warehouse-cap", "1"))
    try:
        created = floe.api("POST", "/api/v1/warehouses", json={"name": "other", "storage": {"type": "local", "path": str(tmp_path / "other")}})
        assert created.status_code == 201, created.text
        busy = floe.pyiceberg()
        busy.create_namespace("b")
        from pyiceberg.catalog import load_catalog

        quiet = load_catalog("quiet", type="rest", uri=floe.catalog_uri, **{**floe.client_properties(), "warehouse": "other"})
        quiet.create_namespace("q")
        for i in range(6):
            t = busy.create_table(f"b.t{i}", schema=SCHEMA)
            for j in range(3):
                t.append(rows(range(j * 10, j * 10 + 10)))
        q = quiet.create_table("q.t", schema=SCHEMA)
        for j in range(3):
            q.append(rows(range(j * 10, j * 10 + 10)))
        ids = [queue_job(floe, "b", f"t{i}", "compact").json()["job"]["id"] for i in range(6)]
        body = {"warehouse": "other", "namespace": ["q"], "table": "t", "kind": "compact", "options": {}}
        quiet_id = floe.api("POST", "/api/v1/jobs", json=body).json()["job"]["id"]
        jobs = [wait_job(floe, i) for i in ids]
        quiet_job = wait_job(floe, quiet_id)
        assert all(j["status"] == "succeeded" for j in jobs + [quiet_job])
        # The quiet warehouse's job, queued last, ran before most of the backlog.
        later = [j for j in jobs if j["started-at-ms"] > quiet_job["started-at-ms"]]
        assert len(later) >= 4, ([j["started-at-ms"] for j in jobs], quiet_job["started-at-ms"])
    finally:
        stop_floe(floe)


def test_jobs_need_the_privilege_to_be_seen(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("vis")
    t = catalog.create_table("vis.t", schema=SCHEMA)
    t.append(rows(range(3)))
    job = queue_job(floe, "vis", "t", "expire-snapshots").json()["job"]
    on_table = {"type": "table", "warehouse": floe.warehouse, "namespace": ["vis"], "name": "t"}
    reader = make_principal(floe, "vis-reader", [("read-data", on_table)])
    token = floe.token(*reader)
    assert floe.api("GET", f"/api/v1/jobs/{job['id']}", token=token).status_code == 404
    assert floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}", token=token).status_code in (403, 404)
    maintainer = make_principal(floe, "vis-maint", [("manage-maintenance", on_table)])
    assert floe.api("GET", f"/api/v1/jobs/{job['id']}", token=floe.token(*maintainer)).status_code == 200


def test_the_command_line_queues_waits_lists_and_sets_policies(floe):
    import json
    import subprocess

    from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET

    def cli(*args):
        done = subprocess.run(
            [FLOE_BIN, "maintenance", *args, "--warehouse", floe.warehouse, "--server", floe.base,
             "--client-id", ROOT_ID, "--client-secret", ROOT_SECRET],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    catalog = floe.pyiceberg()
    catalog.create_namespace("cli")
    table = catalog.create_table("cli.t", schema=SCHEMA)
    for i in range(3):
        table.append(rows(range(i * 10, i * 10 + 10)))
    assert cli("policy", "cli", "--set", '{"small-file-trigger": 50}')["policy"] == {"small-file-trigger": 50}
    assert cli("policy", "cli.t", "--table")["effective"]["small-file-trigger"] == 50
    done = cli("run", "compact", "cli.t", "--wait")
    assert done["job"]["status"] == "succeeded" and done["job"]["result"]["rewritten-files"] == 3
    listed = cli("status", "cli.t", "--kind", "compact")
    assert [j["id"] for j in listed["jobs"]] == [done["job"]["id"]]
    assert len(list(catalog.load_table("cli.t").scan().plan_files())) == 1


def test_the_schedule_queues_expiry_and_cleanup_and_old_metadata_files_go(tmp_path):
    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, extra_args=("--maintenance-schedule-secs", "2"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("sch")
        table = catalog.create_table("sch.t", schema=SCHEMA, properties={"write.metadata.previous-versions-max": "2"})
        for i in range(6):
            table.append(rows(range(i, i + 1)))
        on = {"type": "table", "warehouse": floe.warehouse, "namespace": ["sch"], "name": "t"}
        policy = {"max-snapshot-age-ms": 0, "small-file-trigger": 1000}
        assert floe.api("PUT", "/api/v1/maintenance/policies", json={"on": on, "policy": policy}).status_code == 200
        metadata_dir = Path(urlparse(catalog.load_table("sch.t").location()).path) / "metadata"
        assert len([f for f in os.listdir(metadata_dir) if f.endswith(".metadata.json")]) >= 7
        deadline = time.time() + 120
        while True:
            jobs = floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}&namespace=sch&table=t").json()["jobs"]
            finished = {j["kind"] for j in jobs if j["status"] == "succeeded" and j["trigger"] == "schedule"}
            if {"expire-snapshots", "remove-orphan-files"} <= finished:
                break
            assert time.time() < deadline, jobs
            time.sleep(0.5)
        table = catalog.load_table("sch.t")
        assert len(table.metadata.snapshots) == 1
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(6))
        # Metadata files that fell out of the log (2 kept) are gone; the log's and the
        # current one remain.
        kept = {os.path.basename(urlparse(m.metadata_file).path) for m in table.metadata.metadata_log}
        kept.add(os.path.basename(urlparse(table.metadata_location).path))
        on_disk = {f for f in os.listdir(metadata_dir) if f.endswith(".metadata.json")}
        assert kept <= on_disk
        assert len(on_disk) <= len(kept) + 2, (on_disk, kept)
    finally:
        stop_floe(floe)


def test_appends_that_lost_only_to_a_compaction_are_rebased_not_refused(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("reb")
    # No client-side retries: a 409 would surface.
    table = catalog.create_table("reb.t", schema=SCHEMA, properties={"commit.retry.num-retries": "0"})
    for i in range(4):
        table.append(rows(range(i * 10, i * 10 + 10)))
    stale = catalog.load_table("reb.t")
    compacted = run_job(floe, "reb", "t", "compact")["snapshot-id"]
    stale.append(rows(range(100, 110)))
    table = catalog.load_table("reb.t")
    head = table.current_snapshot()
    assert head.parent_snapshot_id == compacted
    assert head.summary.operation.value == "append"
    assert head.summary["total-data-files"] == "2" and head.summary["total-records"] == "50"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(40)) + list(range(100, 110))
    assert floe_ids(floe, "reb.t") == list(range(40)) + list(range(100, 110))
    assert duckdb_ids(floe, "reb.t") == list(range(40)) + list(range(100, 110))

    # An append that lost to another append is still refused: only maintenance is rebased over.
    stale = catalog.load_table("reb.t")
    catalog.load_table("reb.t").append(rows(range(200, 201)))
    with pytest.raises(CommitFailedException):
        stale.append(rows(range(300, 301)))
    # So is a delete that lost to a compaction: it depends on the files it saw.
    stale = catalog.load_table("reb.t")
    run_job(floe, "reb", "t", "compact")
    with pytest.raises((CommitFailedException, ValidationException)):
        stale.delete(In("id", [1, 2]))
    assert sorted(catalog.load_table("reb.t").scan().to_arrow()["id"].to_pylist()) == list(range(40)) + list(range(100, 110)) + [200]


def test_writer_positions_survive_compaction_and_expiry(floe):
    """Ingestion's position in its log lives in snapshot summaries: compaction carries it to
    its `replace` snapshot, so expiring the snapshots that wrote it loses nothing."""
    from test_ingest import ndjson, post

    catalog = floe.pyiceberg()
    catalog.create_namespace("pos")
    catalog.create_table("pos.t", schema=SCHEMA)
    for i in range(3):
        answer = post(floe, "pos.t", ndjson([{"id": i * 10 + j, "kind": "a"} for j in range(10)]), "application/x-ndjson", wait="commit")
        assert answer.status_code == 200, answer.text

    def position(table):
        summary = table.current_snapshot().summary.additional_properties
        return {k: v for k, v in summary.items() if k.startswith("floe.ingest.")}

    before = position(catalog.load_table("pos.t"))
    assert before
    run_job(floe, "pos", "t", "compact")
    run_job(floe, "pos", "t", "expire-snapshots", **{"max-snapshot-age-ms": 0})
    table = catalog.load_table("pos.t")
    assert len(table.metadata.snapshots) == 1
    assert table.current_snapshot().summary.operation.value == "replace"
    assert position(table) == before
    answer = post(floe, "pos.t", ndjson([{"id": 100, "kind": "b"}]), "application/x-ndjson", wait="commit")
    assert answer.status_code == 200, answer.text
    assert sorted(catalog.load_table("pos.t").scan().to_arrow()["id"].to_pylist()) == list(range(30)) + [100]
