"""Attacks through the migration routes (`POST /api/v1/tables/convert`,
`POST /api/v1/migrations/digest`, `POST /api/v1/migrations/read-metadata`, the migration
records): a principal holding nothing is refused everywhere; one allowed to create tables in its
own namespace converts its own files and nothing else (not the victim's directory, not one
around it, not partitions that lead out of its own, not a flood of partitions); a migration
operator (`manage-warehouses`, `read-data` on its own namespace only) reads no other table's
metadata, rows or digest, whatever location or forged source metadata it names. Afterwards the
victim is untouched and the server serves."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from attack_helpers import (
    assert_alive,
    assert_victim_untouched,
    error_message,
    local_path,
    make_nobody,
    make_sandboxer,
    make_victim,
    sql,
    tables_url,
)
from test_governance import make_principal

HIVE_SCHEMA = {
    "type": "struct", "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "day", "required": False, "type": "string"},
    ],
}


def hive_table(floe, name: str) -> str:
    """A Hive-layout Parquet table below sandbox/ in the warehouse, partitioned by day (two
    partitions, three rows); returns its location."""
    root = floe.data_dir / "warehouse" / "sandbox" / name
    for day, ids in (("d1", [1, 2]), ("d2", [3])):
        (root / f"day={day}").mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), root / f"day={day}" / "part-0.parquet")
    return f"file:{root}"


def partitions(location: str) -> list[dict]:
    return [{"values": [day], "location": f"{location}/day={day}"} for day in ("d1", "d2")]


def convert(floe, token: str | None, location: str, parts: list[dict] | None = None,
            table: str = "conv", namespace: str = "sandbox", mode: str = "create",
            columns: list[str] | None = None):
    return floe.api("POST", "/api/v1/tables/convert", token=token, json={
        "warehouse": floe.warehouse, "namespace": [namespace], "table": table,
        "source": f"legacy.{table}", "location": location, "schema": HIVE_SCHEMA,
        "partition-columns": columns if columns is not None else ["day"],
        "partitions": parts if parts is not None else partitions(location), "mode": mode,
    })


def digest(floe, token: str | None, source: dict, table: str = "conv", namespace: str = "sandbox"):
    return floe.api("POST", "/api/v1/migrations/digest", token=token, json={
        "warehouse": floe.warehouse, "namespace": [namespace], "table": table, "source": source,
    })


def read_metadata(floe, token: str | None, location: str, table: tuple[str, str] | None = None):
    body = {"warehouse": floe.warehouse, "metadata-location": location}
    if table:
        body["namespace"], body["table"] = [table[0]], table[1]
    return floe.api("POST", "/api/v1/migrations/read-metadata", token=token, json=body)


def sandbox_tables(floe) -> list[list[str]]:
    listed = floe.api("GET", tables_url(floe, "sandbox"))
    assert listed.status_code == 200, listed.text
    return sorted(i["name"] for i in listed.json()["identifiers"])


def test_a_principal_holding_nothing_is_refused_by_every_migration_route(floe):
    victim = make_victim(floe)
    nobody = make_nobody(floe)
    sandboxer = make_sandboxer(floe)
    location = hive_table(floe, "legit")
    hive = {"kind": "hive", "location": victim.location}
    for token in (nobody.token, sandboxer.token):
        answers = {
            "read-metadata": read_metadata(floe, token, victim.metadata_location),
            "read-metadata-named": read_metadata(floe, token, victim.metadata_location, ("finance", "ledger")),
            "digest": digest(floe, token, hive, table="ledger", namespace="finance"),
            "list": floe.api("GET", "/api/v1/migrations", token=token),
            "record": floe.api("PUT", "/api/v1/migrations/m1/tables", token=token,
                               json={"source": "legacy.x", "wave": 1, "state": {}}),
            "forget": floe.api("DELETE", "/api/v1/migrations/m1", token=token),
        }
        for route, answer in answers.items():
            assert answer.status_code == 403, (route, answer.status_code, answer.text)
    # Converting needs create-table in the namespace: nobody holds none, sandboxer not in finance.
    assert convert(floe, nobody.token, location).status_code in (403, 404)
    into_finance = convert(floe, sandboxer.token, location, namespace="finance")
    assert into_finance.status_code in (403, 404), into_finance.text
    # Syncing the victim needs write-data on it.
    sync = convert(floe, sandboxer.token, victim.location, parts=[], columns=[], table="ledger",
                   namespace="finance", mode="sync")
    assert sync.status_code in (403, 404), sync.text
    assert sandbox_tables(floe) == []
    assert floe.api("GET", "/api/v1/migrations").json() == {"migrations": []}
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_conversion_takes_its_own_files_and_no_one_elses(floe):
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    root = victim.location.rpartition("/finance/")[0]
    victim_data = f"{victim.location}/data"
    own = hive_table(floe, "conv")
    refused = {
        "the victim's location": convert(floe, attacker.token, victim.location, parts=[], columns=[]),
        "around the victim": convert(floe, attacker.token, f"{root}/finance", parts=[], columns=[]),
        "inside the victim": convert(floe, attacker.token, victim_data, parts=[], columns=[]),
        "the warehouse root": convert(floe, attacker.token, root, parts=[], columns=[]),
        "outside the warehouse": convert(floe, attacker.token, "file:///etc", parts=[], columns=[]),
        "a partition in the victim": convert(floe, attacker.token, own, parts=[
            {"values": ["d1"], "location": victim_data}]),
        "a partition climbing out": convert(floe, attacker.token, own, parts=[
            {"values": ["d1"], "location": f"{own}/../../finance/{victim.location.rpartition('/')[2]}/data"}]),
        "a partition elsewhere": convert(floe, attacker.token, own, parts=[
            {"values": ["d1"], "location": "file:///etc"}]),
        "too many partitions": convert(floe, attacker.token, own, parts=[
            {"values": [f"d{i}"], "location": f"{own}/day=d{i}"} for i in range(100_001)]),
        "a huge partition value": convert(floe, attacker.token, own, parts=[
            {"values": ["x" * 5000], "location": f"{own}/day=d1"}]),
        "too many partition columns": convert(floe, attacker.token, own, columns=[f"c{i}" for i in range(40)]),
        "values not matching the columns": convert(floe, attacker.token, own, parts=[
            {"values": ["d1", "extra"], "location": f"{own}/day=d1"}]),
    }
    for what, answer in refused.items():
        assert answer.status_code in (400, 413), (what, answer.status_code, answer.text)
        assert_alive(floe)
    assert "overlaps the location of finance.ledger" in error_message(refused["the victim's location"])
    assert "overlaps the location of finance.ledger" in error_message(refused["around the victim"])
    # A refused conversion leaves no table (and no claim on a location) behind.
    assert sandbox_tables(floe) == []

    # Its own directory converts, with exactly its own rows.
    made = convert(floe, attacker.token, own)
    assert made.status_code == 200, made.text
    assert made.json()["added-files"] == 2 and made.json()["added-records"] == 3
    rows = sql(floe, "SELECT id, day FROM sandbox.conv ORDER BY id", token=attacker.token)
    assert rows.status_code == 200, rows.text
    assert rows.json()["rows"] == [{"id": 1, "day": "d1"}, {"id": 2, "day": "d1"}, {"id": 3, "day": "d2"}]
    # Sync cannot be pointed at the victim's directory through the attacker's own table.
    moved = convert(floe, attacker.token, victim.location, parts=[], columns=[], mode="sync")
    assert moved.status_code == 400, moved.text
    assert "is not table sandbox.conv's location" in error_message(moved)
    # Nor can a planted file inside its own directory that is no Parquet take the server down.
    (local_path(own) / "day=d2" / "part-1.parquet").write_bytes(b"PAR1" + b"\xff" * 64 + b"PAR1")
    broken = convert(floe, attacker.token, own, mode="sync")
    assert broken.status_code == 400, broken.text
    assert sandbox_tables(floe) == ["conv"]
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_migration_operator_reads_no_other_tables_metadata_rows_or_digest(floe):
    victim = make_victim(floe)
    floe.pyiceberg().create_namespace("sandbox")
    own = hive_table(floe, "conv")
    assert convert(floe, None, own).status_code == 200
    on_sandbox = {"type": "namespace", "warehouse": floe.warehouse, "namespace": ["sandbox"]}
    operator_id, operator_secret = make_principal(
        floe, "operator", [("manage-warehouses", {"type": "server"}), ("read-data", on_sandbox)])
    token = floe.token(operator_id, operator_secret)

    # Its own table digests, both sides alike.
    hive_source = {"kind": "hive", "location": own, "partition-columns": ["day"], "partitions": partitions(own)}
    ok = digest(floe, token, hive_source)
    assert ok.status_code == 200, ok.text
    assert ok.json()["floe"]["rows"] == ok.json()["source"]["rows"] == 3
    assert ok.json()["floe"]["columns"] == ok.json()["source"]["columns"]

    victim_data = f"{victim.location}/data"
    refusals = {
        # The victim itself: the operator cannot see it at all.
        "digest of the victim": (digest(floe, token, {"kind": "hive", "location": victim.location},
                                        table="ledger", namespace="finance"), (403, 404)),
        # Its own table, the victim's directory as the Hive source.
        "the victim's directory as source": (digest(floe, token, {"kind": "hive", "location": victim.location}), (400,)),
        "a partition in the victim": (digest(floe, token, {
            "kind": "hive", "location": own, "partition-columns": ["day"],
            "partitions": [{"values": ["d1"], "location": victim_data}]}), (400,)),
        # Its own table, the victim's metadata as the Iceberg source.
        "the victim's metadata as source": (digest(floe, token, {
            "kind": "iceberg", "metadata-location": victim.metadata_location}), (400,)),
        # The victim's metadata read directly: unnamed, then named as its own table.
        "read the victim's metadata": (read_metadata(floe, token, victim.metadata_location), (403,)),
        "read it as its own table's": (read_metadata(floe, token, victim.metadata_location, ("sandbox", "conv")), (400,)),
        "read it as the victim's": (read_metadata(floe, token, victim.metadata_location, ("finance", "ledger")), (403, 404)),
    }
    for what, (answer, statuses) in refusals.items():
        assert answer.status_code in statuses, (what, answer.status_code, answer.text)
        assert "acme" not in answer.text and "cents" not in answer.text, (what, answer.text)
    assert "read-metadata on warehouse" in error_message(refusals["read the victim's metadata"][0])

    # A forged source metadata file inside its own table's location that claims the table's
    # location but lists the victim's snapshot: the victim's manifests lie outside the table.
    forged = dict(victim.metadata, location=own)
    forged_path = local_path(own) / "forged.metadata.json"
    forged_path.write_text(json.dumps(forged))
    answer = digest(floe, token, {"kind": "iceberg", "metadata-location": f"file:{forged_path}"})
    assert answer.status_code == 400, answer.text
    assert "outside" in error_message(answer), answer.text
    assert '"rows"' not in answer.text

    # A source file that is not Parquet is named, not a server failure.
    Path(local_path(own) / "day=d1" / "part-9.parquet").write_bytes(b"not parquet at all")
    broken = digest(floe, token, hive_source)
    assert broken.status_code == 400, broken.text
    assert "part-9.parquet" in error_message(broken)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)
