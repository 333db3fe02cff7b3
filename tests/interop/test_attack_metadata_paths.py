"""Attacks through the paths a table's own metadata names, on every catalog database and kind
of warehouse: a commit by the sandboxer on its own table that names a statistics file, a
manifest list or a write directory outside the table, or moves the table into the victim, is
refused (400 naming the path). A manifest the attacker wrote itself, listing the victim's data
files, gets past the commit (the catalog does not read manifests) but not past Floe's reads
and deletes: SQL on the table fails naming the file, expiry and orphan cleanup delete none of
them. Orphan cleanup keeps its one-hour floor and the files of a transaction in flight."""

from __future__ import annotations

import os
import uuid

import psycopg
import pyarrow as pa
import pytest
from attack_helpers import (
    ONE_HOUR_MS,
    age_victim_files,
    assert_alive,
    assert_victim_untouched,
    commit,
    create_table,
    error_message,
    make_sandboxer,
    make_victim,
    plant_victim_data_files,
    sql,
    supersede_with_empty_snapshot,
)

TEN_DAYS_S = 10 * 24 * 3600


def own_table(floe, attacker, name: str = "att"):
    """The sandboxer's own table sandbox.`name`, with two snapshots of its own rows."""
    made = create_table(floe, attacker.token, "sandbox", name)
    assert made.status_code == 200, made.text
    table = floe.pyiceberg(attacker.client_id, attacker.secret).load_table(f"sandbox.{name}")
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    table.append(pa.table({"id": pa.array([3], pa.int64())}))
    return floe.pyiceberg(attacker.client_id, attacker.secret).load_table(f"sandbox.{name}")


def maintain(floe, attacker, table: str, what: str, **options):
    body = {"warehouse": floe.warehouse, "namespace": ["sandbox"], "table": table, **options}
    return floe.api("POST", f"/api/v1/maintenance/{what}", token=attacker.token, json=body)


def expire_and_clean(floe, attacker, table: str) -> tuple[dict, dict]:
    """Snapshot expiry keeping only the current snapshot, then orphan cleanup at the floor,
    both run for real by the attacker on its own table."""
    expired = maintain(floe, attacker, table, "expire-snapshots", **{"max-snapshot-age-ms": 0})
    assert expired.status_code in (200, 400), expired.text
    cleaned = maintain(floe, attacker, table, "remove-orphan-files", **{"dry-run": False, "older-than-ms": ONE_HOUR_MS})
    assert cleaned.status_code == 200, cleaned.text
    return expired.json(), cleaned.json()


def test_commits_naming_paths_outside_the_table_are_refused(floe_matrix, tmp_path):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    table = own_table(floe, attacker)
    snapshot_id = table.current_snapshot().snapshot_id
    bait = tmp_path / f"bait-{uuid.uuid4().hex}.puffin"
    bait.write_bytes(b"a file outside every warehouse")
    then = bait.stat().st_mtime - TEN_DAYS_S
    os.utime(bait, (then, then))
    bait_uri = f"file://{bait}"

    def statistics(path: str) -> dict:
        return {"snapshot-id": snapshot_id, "statistics-path": path, "file-size-in-bytes": 30,
                "file-footer-size-in-bytes": 10, "blob-metadata": []}

    def snapshot(manifest_list: str) -> dict:
        return {"snapshot-id": snapshot_id + 17, "parent-snapshot-id": snapshot_id,
                "sequence-number": table.metadata.last_sequence_number + 1, "timestamp-ms": table.metadata.last_updated_ms + 1,
                "manifest-list": manifest_list, "summary": {"operation": "append"}, "schema-id": 0}

    victim_file = victim.data_files[0]
    attacks = [
        ([{"action": "set-statistics", "snapshot-id": snapshot_id, "statistics": statistics(bait_uri)}], bait_uri),
        ([{"action": "set-statistics", "snapshot-id": snapshot_id, "statistics": statistics(victim_file)}], victim_file),
        ([{"action": "set-partition-statistics", "partition-statistics": {
            "snapshot-id": snapshot_id, "statistics-path": victim.manifest_list, "file-size-in-bytes": 30}}],
         victim.manifest_list),
        ([{"action": "add-snapshot", "snapshot": snapshot(victim.manifest_list)},
          {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": snapshot_id + 17, "type": "branch"}],
         victim.manifest_list),
        ([{"action": "add-snapshot", "snapshot": snapshot(victim.manifest_list)},
          {"action": "set-snapshot-ref", "ref-name": "side", "snapshot-id": snapshot_id + 17, "type": "branch"}],
         victim.manifest_list),
    ]
    for key in ("write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path"):
        for target in (f"{victim.location}/data", bait_uri):
            attacks.append(([{"action": "set-properties", "updates": {key: target}}], target))
    for target in (victim.location, f"{victim.location}/data/moved", f"{victim.location}/"):
        attacks.append(([{"action": "set-location", "location": target}], victim.location))

    for updates, named in attacks:
        answer = commit(floe, attacker.token, "sandbox", "att", updates)
        assert answer.status_code == 400, (updates, answer.status_code, answer.text)
        assert named in error_message(answer), (named, answer.text)
    # Nor may a table be created already writing into the victim.
    created = create_table(floe, attacker.token, "sandbox", "born_bad",
                           properties={"write.data.path": f"{victim.location}/data"})
    assert created.status_code == 400, created.text
    assert f"{victim.location}/data" in error_message(created)

    after = floe.pyiceberg(attacker.client_id, attacker.secret).load_table("sandbox.att")
    assert after.metadata_location == table.metadata_location, "no refused commit landed"
    expire_and_clean(floe, attacker, "att")
    assert bait.read_bytes() == b"a file outside every warehouse"
    assert_victim_untouched(floe, victim)
    assert sorted(floe.pyiceberg().load_table("sandbox.att").scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert_alive(floe)


def test_a_planted_manifest_neither_reads_nor_deletes_the_victims_files(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    own_table(floe, attacker)
    plant_victim_data_files(floe, attacker, "att")
    age_victim_files(floe, victim)

    for statement in ("SELECT * FROM sandbox.att", "SELECT sum(id) AS s FROM sandbox.att"):
        read = sql(floe, statement, attacker.token)
        assert read.status_code != 200, (statement, read.text)
        assert "outside the table" in read.text and any(f in read.text for f in victim.data_files), read.text
    with psycopg.connect(host="127.0.0.1", port=floe.pg_port, user=attacker.client_id, password=attacker.secret,
                         dbname=floe.warehouse, connect_timeout=10, autocommit=True) as conn:
        with pytest.raises(psycopg.Error, match="outside the table"):
            conn.execute("SELECT * FROM sandbox.att").fetchall()

    # The planted snapshot expires: the files only it reached include the victim's data files.
    supersede_with_empty_snapshot(floe, attacker, "att")
    expired, cleaned = expire_and_clean(floe, attacker, "att")
    if "failed-deletes" in expired:
        refused = {f["file"] for f in expired["failed-deletes"]}
        assert set(victim.data_files) <= refused, expired
        assert all("outside the table" in f["error"] for f in expired["failed-deletes"]), expired
    else:
        assert "outside the table" in expired["error"]["message"], expired
    assert not set(cleaned["orphan-files"]) & set(victim.files), cleaned
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_orphan_cleanup_keeps_its_floor_and_the_files_of_an_uncommitted_transaction(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    table = own_table(floe, attacker)

    for dry_run in (False, None):
        options = {"older-than-ms": 0} if dry_run is None else {"dry-run": dry_run, "older-than-ms": 0}
        refused = maintain(floe, attacker, "att", "remove-orphan-files", **options)
        if dry_run is None and refused.status_code == 200:
            # Without dry-run the request only lists; nothing may have been deleted.
            assert refused.json()["dry-run"] is True and refused.json()["deleted-files"] == 0, refused.text
            continue
        assert refused.status_code == 400, refused.text
        assert "older-than-ms must be at least 3600000" in error_message(refused), refused.text
    queued = floe.api("POST", "/api/v1/jobs", token=attacker.token, json={
        "warehouse": floe.warehouse, "namespace": ["sandbox"], "table": "att", "kind": "remove-orphan-files",
        "options": {"dry-run": False, "older-than-ms": 0}})
    assert queued.status_code in (400, 503), queued.text
    if queued.status_code == 400:
        assert "older-than-ms must be at least 3600000" in error_message(queued), queued.text

    # A transaction that has written its data and manifests but not committed yet.
    transaction = table.transaction()
    transaction.append(pa.table({"id": pa.array([40, 41], pa.int64())}))
    fresh = f"{table.location()}/data/being-written-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(fresh).create() as out:
        out.write(b"a writer's file, not yet in any snapshot")
    cleaned = maintain(floe, attacker, "att", "remove-orphan-files", **{"dry-run": False, "older-than-ms": ONE_HOUR_MS})
    assert cleaned.status_code == 200, cleaned.text
    assert cleaned.json()["deleted-files"] == 0, cleaned.text
    assert table.io.new_input(fresh).exists()
    transaction.commit_transaction()
    reloaded = floe.pyiceberg(attacker.client_id, attacker.secret).load_table("sandbox.att")
    assert sorted(reloaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 40, 41]
    answer = sql(floe, "SELECT count(*) AS n FROM sandbox.att", attacker.token)
    assert answer.status_code == 200 and answer.json()["rows"] == [{"n": 5}], answer.text
    assert_victim_untouched(floe, victim)
    assert_alive(floe)
