"""`floe ingest replay` after a bad deploy: entries a table could not take (a required column
added by mistake) are dead letters, and rows a bad commit dropped (the table rolled back) are
still retained beside the log; once the table is fixed, a replay takes each again exactly
once — a dry run first, a second replay takes nothing, rows the table still holds are never
taken twice. A Kafka pipeline's table rolled back over bad commits rewinds the pipeline, which
reads those records again once."""

from __future__ import annotations

import json
import os
import subprocess
import time

import requests
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET, start_floe, stop_floe
from test_pipelines import broker  # noqa: F401 (the mock Kafka broker fixture)
from pyiceberg.types import StringType


def post(floe, rows: list[dict], wait: bool = True) -> dict:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    answer = requests.post(
        f"{floe.base}/ingest/v1/{floe.warehouse}/fix/events?create=true" + ("&wait=commit" if wait else ""),
        data=body, timeout=90,
        headers={"content-type": "application/x-ndjson", "authorization": f"Bearer {floe.token()}"},
    )
    assert answer.status_code in (200, 202), answer.text
    return answer.json()


def ids(floe) -> list[int]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id FROM fix.events ORDER BY id", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return [r["id"] for r in answer.json()["rows"]]


def replay(floe, first: int, last: int, apply: bool) -> dict:
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    args = [FLOE_BIN, "ingest", "replay", floe.warehouse, "fix.events", "--from", str(first), "--to", str(last),
            "--server", floe.base] + (["--apply"] if apply else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def eventually_ids(floe, expected: list[int], timeout: float = 30) -> list[int]:
    deadline = time.time() + timeout
    while (got := ids(floe)) != expected and time.time() < deadline:
        time.sleep(0.2)
    return got


def test_dead_letters_of_a_bad_deploy_are_replayed_once_the_table_is_fixed(tmp_path):
    # Commits every three seconds: rows are acknowledged well before the bad deploy lands.
    floe = start_floe(tmp_path, extra_args=("--ingest-commit-interval-ms", "3000"))
    try:
        dead_letters_replayed(floe)
    finally:
        stop_floe(floe)


def dead_letters_replayed(floe):
    floe.api("POST", f"/catalog/v1/{floe.warehouse}/namespaces", json={"namespace": ["fix"]})
    first = post(floe, [{"id": 1, "name": "a"}])
    assert first["committed"], first
    lost = [post(floe, [{"id": 2, "name": "b"}], wait=False), post(floe, [{"id": 3, "name": "c"}], wait=False)]
    # The bad deploy, between their acknowledgement and their commit: a required column no
    # writer sends. The committer cannot write them and sets them aside as dead letters.
    table = floe.pyiceberg().load_table("fix.events")
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.add_column("tenant", StringType(), required=True)
    time.sleep(7)
    assert ids(floe) == [1]

    # Fixed: the column is optional again. The dry run lists the dead letters.
    table = floe.pyiceberg().load_table("fix.events")
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.make_column_optional("tenant")
    sequences = [x["sequence"] for x in lost]
    dry = replay(floe, min(sequences), max(sequences), apply=False)
    assert [(e["sequence"], e["kept-as"], e["outcome"]) for e in dry["entries"]] == [
        (s, "dead-letter", "would-replay") for s in sequences], dry
    assert ids(floe) == [1], "a dry run takes nothing"

    applied = replay(floe, 0, max(sequences), apply=True)
    outcomes = {e["sequence"]: e["outcome"] for e in applied["entries"]}
    assert all(outcomes[s] == "replayed" for s in sequences), applied
    assert outcomes.get(first["sequence"], "in-table") == "in-table", applied
    assert eventually_ids(floe, [1, 2, 3]) == [1, 2, 3]
    # Taken again, they are no longer dead letters.
    left = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM fix.events__dead_letters",
                                                 "warehouse": floe.warehouse})
    assert left.status_code == 200 and left.json()["rows"] == [{"n": 0}], left.text
    again = replay(floe, 0, max(sequences) + 10, apply=True)
    assert all(e["outcome"] != "replayed" for e in again["entries"]), again
    time.sleep(1.5)
    assert ids(floe) == [1, 2, 3], "nothing taken twice"


def test_rows_a_rollback_dropped_are_replayed_from_the_retained_log(floe):
    floe.api("POST", f"/catalog/v1/{floe.warehouse}/namespaces", json={"namespace": ["fix"]})
    answers = [post(floe, [{"id": i, "name": f"n{i}"}]) for i in (1, 2, 3)]
    assert all(a["committed"] for a in answers), answers
    table = floe.pyiceberg().load_table("fix.events")
    history = [entry.snapshot_id for entry in table.history()]
    # The bad deploy: the table rolled back to its first commit (rows 2 and 3 gone).
    table.manage_snapshots().rollback_to_snapshot(history[0]).commit()
    assert eventually_ids(floe, [1]) == [1]
    # Writes go on after the rollback: their commit covers later sequences only.
    later = post(floe, [{"id": 4, "name": "n4"}])
    assert later["committed"], later
    assert eventually_ids(floe, [1, 4]) == [1, 4]

    sequences = [a["sequence"] for a in answers]
    dry = replay(floe, sequences[0], sequences[-1], apply=False)
    outcomes = {e["sequence"]: e["outcome"] for e in dry["entries"]}
    assert outcomes == {sequences[0]: "in-table", sequences[1]: "would-replay", sequences[2]: "would-replay"}, dry
    applied = replay(floe, sequences[0], sequences[-1], apply=True)
    assert sorted(e["outcome"] for e in applied["entries"]) == ["in-table", "replayed", "replayed"], applied
    assert eventually_ids(floe, [1, 2, 3, 4]) == [1, 2, 3, 4]
    again = replay(floe, sequences[0], later["sequence"], apply=True)
    assert [e["outcome"] for e in again["entries"]] == ["in-table", "in-table"], again
    time.sleep(1.5)
    assert ids(floe) == [1, 2, 3, 4]
    # Only an operator replays: a principal without manage-pipelines is refused.
    from test_governance import make_principal

    on = {"type": "table", "warehouse": floe.warehouse, "namespace": ["fix"], "name": "events"}
    writer = floe.token(*make_principal(floe, "replay-writer", [("write-data", on)]))
    refused = floe.api("POST", "/api/v1/ingest/replay", token=writer, json={
        "warehouse": floe.warehouse, "namespace": ["fix"], "table": "events",
        "from-sequence": 0, "to-sequence": 100, "dry-run": False})
    assert refused.status_code == 403, refused.text


def test_a_rolled_back_table_rewinds_its_kafka_pipeline_which_reads_again_once(tmp_path, broker):
    """Kafka pipelines keep their offsets in the table's snapshot summaries: rolling the table
    back over bad commits rewinds the pipeline to the offsets the kept snapshot records, and
    it reads those records again — each exactly once."""
    from test_pipelines import produce, spec, table_ids, wait_for_rows

    floe = start_floe(tmp_path, extra_args=("--pipeline-lease-secs", "3"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("stream")
        assert floe.api("POST", "/api/v1/pipelines", json=spec(floe, broker)).status_code == 201
        produce(broker, range(0, 300))
        assert wait_for_rows(floe, 300) == list(range(300))
        time.sleep(1.0)
        kept = catalog.load_table("stream.clicks").current_snapshot().snapshot_id
        produce(broker, range(300, 600))
        assert wait_for_rows(floe, 600) == list(range(600))
        # The bad deploy's commits are rolled back: the table holds 0..299 again.
        catalog.load_table("stream.clicks").manage_snapshots().rollback_to_snapshot(kept).commit()
        assert table_ids(floe) == list(range(300))
        # The pipeline's next commit finds the offsets changed and stops; started again from
        # the table, it reads 300.. once more.
        produce(broker, range(600, 700))
        deadline = time.time() + 120
        while (got := table_ids(floe)) != list(range(700)) and time.time() < deadline:
            assert len(got) == len(set(got)), "a record was taken twice"
            time.sleep(0.5)
        assert got == list(range(700)), (len(got), sorted(set(range(700)) - set(got))[:10])
    finally:
        stop_floe(floe)
