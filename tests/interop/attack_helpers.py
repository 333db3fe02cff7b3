"""What the attacker suites share: the victim table (finance.ledger, written by root through
PyIceberg), the two attacking principals, a record of every byte of the victim that later
checks compare against, and the check that the server still serves."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import requests
from test_governance import make_principal

VICTIM_ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "account": ["acme", "globex", "initech", "umbrella"],
        "cents": pa.array([125_00, 990_00, 7_50, 1_000_000_00], pa.int64()),
    }
)
SANDBOX_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
ONE_HOUR_MS = 3_600_000


def sql(floe, statement: str, token: str | None = None) -> requests.Response:
    """POST /api/v1/sql in the floe's warehouse, as root or with `token`."""
    return floe.api("POST", "/api/v1/sql", token=token, json={"sql": statement, "warehouse": floe.warehouse})


def assert_alive(floe) -> None:
    """The server answers /health and runs a query."""
    health = requests.get(f"{floe.base}/health", timeout=10)
    assert health.status_code == 200, health.text
    answer = sql(floe, "SELECT 41 + 1 AS n")
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"n": 42}]


def tables_url(floe, namespace: str, table: str | None = None) -> str:
    path = f"/catalog/v1/{floe.warehouse}/namespaces/{namespace}/tables"
    return f"{path}/{table}" if table else path


def sandbox_grants(floe) -> list[tuple[str, dict]]:
    on_sandbox = {"type": "namespace", "warehouse": floe.warehouse, "namespace": ["sandbox"]}
    return [("create-table", on_sandbox), ("write-data", on_sandbox), ("manage-maintenance", on_sandbox)]


def local_path(location: str) -> Path:
    return Path(urlparse(location).path)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Victim:
    """finance.ledger as root left it: its load-table answer, and the digest of every file its
    metadata names (and, on a local warehouse, of every file below its location)."""

    location: str
    metadata_location: str
    metadata: dict
    manifest_list: str
    data_files: list[str]
    files: dict[str, str] = field(default_factory=dict)
    tree: dict[str, str] = field(default_factory=dict)


def _load(floe, namespace: str, table: str, token: str | None = None) -> dict:
    answer = floe.api("GET", tables_url(floe, namespace, table), token=token)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _tree(location: str) -> dict[str, str]:
    root = local_path(location)
    return {
        str(p.relative_to(root)): _digest(p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def make_victim(floe) -> Victim:
    """Root creates finance.ledger through PyIceberg and fills it with two appends."""
    catalog = floe.pyiceberg()
    catalog.create_namespace("finance")
    table = catalog.create_table("finance.ledger", schema=VICTIM_ROWS.schema)
    table.append(VICTIM_ROWS.slice(0, 2))
    table.append(VICTIM_ROWS.slice(2))
    table = catalog.load_table("finance.ledger")
    loaded = _load(floe, "finance", "ledger")
    metadata = loaded["metadata"]
    named = {loaded["metadata-location"], *(e["metadata-file"] for e in metadata.get("metadata-log", []))}
    data_files = []
    for snapshot in table.metadata.snapshots:
        named.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            named.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io):
                data_files.append(entry.data_file.file_path)
    named.update(data_files)
    files = {path: _digest(table.io.new_input(path).open().read()) for path in sorted(named)}
    victim = Victim(
        location=metadata["location"],
        metadata_location=loaded["metadata-location"],
        metadata=metadata,
        manifest_list=table.current_snapshot().manifest_list,
        data_files=sorted(set(data_files)),
        files=files,
    )
    if floe.storage == "local":
        victim.tree = _tree(victim.location)
        assert set(victim.tree) >= {str(local_path(p).relative_to(local_path(victim.location))) for p in files}
    return victim


def age_victim_files(floe, victim: Victim, seconds: int = 10 * 24 * 3600) -> None:
    """Makes the victim's files look old (local warehouses), as a real table's are, so that an
    orphan cleanup that wrongly reached them would not spare them for being young."""
    if floe.storage != "local":
        return
    for path in local_path(victim.location).rglob("*"):
        if path.is_file():
            then = path.stat().st_mtime - seconds
            os.utime(path, (then, then))


def assert_victim_untouched(floe, victim: Victim) -> None:
    """The victim's rows, metadata and files are exactly as root left them."""
    catalog = floe.pyiceberg()
    rows = catalog.load_table("finance.ledger").scan().to_arrow().sort_by("id")
    assert rows.to_pylist() == VICTIM_ROWS.to_pylist()
    loaded = _load(floe, "finance", "ledger")
    assert loaded["metadata-location"] == victim.metadata_location
    assert loaded["metadata"] == victim.metadata
    io = catalog.load_table("finance.ledger").io
    for path, digest in victim.files.items():
        assert io.new_input(path).exists(), f"victim file {path} is gone"
        assert _digest(io.new_input(path).open().read()) == digest, f"victim file {path} changed"
    if floe.storage == "local":
        assert _tree(victim.location) == victim.tree, "files below the victim's location changed"
    answer = sql(floe, "SELECT sum(cents) AS total, count(*) AS n FROM finance.ledger")
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"total": sum(VICTIM_ROWS["cents"].to_pylist()), "n": 4}]


@dataclass
class Attacker:
    client_id: str
    secret: str
    token: str


def make_sandboxer(floe) -> Attacker:
    """`sandboxer`: create-table, write-data and manage-maintenance on namespace sandbox only."""
    if floe.api("HEAD", f"/catalog/v1/{floe.warehouse}/namespaces/sandbox").status_code != 204:
        floe.pyiceberg().create_namespace("sandbox")
    client_id, secret = make_principal(floe, "sandboxer", sandbox_grants(floe))
    return Attacker(client_id, secret, floe.token(client_id, secret))


def make_nobody(floe) -> Attacker:
    """`nobody`: no grants at all."""
    client_id, secret = make_principal(floe, "nobody", [])
    return Attacker(client_id, secret, floe.token(client_id, secret))


def create_table(floe, token: str, namespace: str, name: str, location: str | None = None,
                 properties: dict | None = None) -> requests.Response:
    """REST createTable, optionally at `location`."""
    body: dict = {"name": name, "schema": SANDBOX_SCHEMA}
    if location is not None:
        body["location"] = location
    if properties:
        body["properties"] = properties
    return floe.api("POST", tables_url(floe, namespace), token=token, json=body)


def commit(floe, token: str, namespace: str, table: str, updates: list[dict],
           requirements: list[dict] | None = None) -> requests.Response:
    """REST updateTable with `updates`."""
    return floe.api(
        "POST", tables_url(floe, namespace, table), token=token,
        json={"requirements": requirements or [], "updates": updates},
    )


def error_message(answer: requests.Response) -> str:
    return answer.json()["error"]["message"]


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(condition, seconds: float, step: float = 0.1):
    """Polls `condition` until it returns something truthy or `seconds` pass; returns its last
    value. A bounded retry for effects that land asynchronously, not a timing assertion."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def plant_victim_data_files(floe, attacker: Attacker, table: str) -> int:
    """The attacker makes its own table sandbox.`table` list the victim's data files: it writes
    a manifest naming them (their entries copied from the victim's manifests) and a manifest
    list, both inside its own table's metadata directory, and commits a snapshot of them. Only
    the manifest's contents point outside the table, which the commit cannot see. Returns the
    planted snapshot's id."""
    from pyiceberg.manifest import write_manifest, write_manifest_list

    root_victim = floe.pyiceberg().load_table("finance.ledger")
    entries = [
        entry
        for manifest in root_victim.current_snapshot().manifests(root_victim.io)
        for entry in manifest.fetch_manifest_entry(root_victim.io)
    ]
    assert entries
    own = floe.pyiceberg(attacker.client_id, attacker.secret).load_table(f"sandbox.{table}")
    parent = own.current_snapshot().snapshot_id if own.current_snapshot() else None
    sequence = own.metadata.last_sequence_number + 1
    snapshot_id = now_ms()
    manifest_path = f"{own.location()}/metadata/planted-{snapshot_id}-m0.avro"
    with write_manifest(2, own.spec(), own.schema(), own.io.new_output(manifest_path), snapshot_id, "deflate") as writer:
        for entry in entries:
            writer.add(entry)
    list_path = f"{own.location()}/metadata/snap-{snapshot_id}-planted.avro"
    with write_manifest_list(2, own.io.new_output(list_path), snapshot_id, parent, sequence, "deflate") as lists:
        lists.add_manifests([writer.to_manifest_file()])
    snapshot = {
        "snapshot-id": snapshot_id, "sequence-number": sequence, "timestamp-ms": now_ms(),
        "manifest-list": list_path, "summary": {"operation": "append"}, "schema-id": own.schema().schema_id,
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    answer = commit(floe, attacker.token, "sandbox", table, [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": snapshot_id, "type": "branch"},
    ])
    assert answer.status_code == 200, answer.text
    return snapshot_id


def supersede_with_empty_snapshot(floe, attacker: Attacker, table: str) -> int:
    """Commits an empty snapshot (a manifest list with no manifests, in the table's own metadata
    directory) as sandbox.`table`'s current one, so that everything before it may expire."""
    from pyiceberg.manifest import write_manifest_list

    own = floe.pyiceberg(attacker.client_id, attacker.secret).load_table(f"sandbox.{table}")
    parent = own.current_snapshot().snapshot_id
    sequence = own.metadata.last_sequence_number + 1
    snapshot_id = max(now_ms(), parent + 1)
    list_path = f"{own.location()}/metadata/snap-{snapshot_id}-empty.avro"
    with write_manifest_list(2, own.io.new_output(list_path), snapshot_id, parent, sequence, "deflate") as lists:
        lists.add_manifests([])
    answer = commit(floe, attacker.token, "sandbox", table, [
        {"action": "add-snapshot", "snapshot": {
            "snapshot-id": snapshot_id, "parent-snapshot-id": parent, "sequence-number": sequence,
            "timestamp-ms": now_ms(), "manifest-list": list_path, "summary": {"operation": "delete"},
            "schema-id": own.schema().schema_id}},
        {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": snapshot_id, "type": "branch"},
    ])
    assert answer.status_code == 200, answer.text
    return snapshot_id
