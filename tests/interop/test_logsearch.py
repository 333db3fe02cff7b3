"""Indexed log search: `otel.logs` files carry token indexes (Puffin files beside them), and
Floe SQL reads only the files that can hold what a search looks for. Every answer is held to a
full scan's, filtered here by the documented token rule; a damaged or missing index costs
pruning, never rows; DuckDB and PyIceberg read the table unchanged; compaction indexes its
output, expiry removes the indexes of the files it deletes and orphan cleanup keeps live ones."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

from test_otlp import committed, rows

BATCHES = 8
RECORDS = 150
WORDS = ["checkout", "payment", "gateway", "cache", "miss", "retry", "user", "order", "slow", "GET", "POST"]


def tokens(text: str) -> set[str]:
    """The token rule of docs/observability.md: lowercased alphanumeric runs."""
    return {t.lower() for t in re.findall(r"[^\W_]+", text)}


def matches(text: str, query: str) -> bool:
    return tokens(query) <= tokens(text)


# Fixed ids, so that the files' filters — and whether a word nowhere passes one by chance,
# which a Bloom filter allows — are the same on every run.
NEEDLE = "req-5e1f0c4a9b27d3e8"


def log_records(batch: int, needle: str, at: int) -> list[dict]:
    ids = random.Random(batch)
    records = []
    for i in range(RECORDS):
        words = " ".join(WORDS[(batch * 7 + i * j) % len(WORDS)] for j in range(1, 6))
        body = f"{words} request {ids.getrandbits(48):012x} took {i % 97} ms"
        if batch == 3 and i == 42:
            body = f"payment failed: request {needle} Timed-Out after 3 retries"
        if batch in (2, 5) and i == 7:
            body = f"disk KABOOM on worker-{batch} while flushing"
        records.append({
            "timeUnixNano": str(at),
            "severityText": "INFO",
            "severityNumber": 9,
            "body": {"stringValue": body},
            "attributes": [{"key": "batch", "value": {"intValue": str(batch)}}],
        })
    return records


def send(floe, token: str, records: list[dict]) -> None:
    body = {
        "resourceLogs": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]},
            "scopeLogs": [{"scope": {"name": "shop"}, "logRecords": records}],
        }]
    }
    answer = floe.api("POST", f"/otlp/{floe.warehouse}/v1/logs", token=token, json=body)
    assert answer.status_code == 200, answer.text


def metric(floe, series: str) -> float:
    """The value of one series (name and labels, as /metrics spells them)."""
    for line in floe.api("GET", "/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics")


PRUNED = 'floe_sql_files_pruned_total{by="token-index"}'
UNUSABLE = 'floe_sql_token_index_reads_total{outcome="unusable"}'


def data_files(floe) -> list[str]:
    table = floe.pyiceberg().load_table("otel.logs")
    return sorted(t.file.file_path.removeprefix("file://") for t in table.scan().plan_files())


def quiet(floe) -> None:
    """No compaction but the ones a test asks for."""
    policy = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"small-file-trigger": 100000}}
    assert floe.api("PUT", "/api/v1/maintenance/policies", json=policy).status_code == 200


def ingest(floe) -> tuple[str, list[str], dict[int, str]]:
    """Batches committed one by one (a file each); the needle, every file, and each batch's file."""
    quiet(floe)
    token = floe.token()
    needle = NEEDLE
    # One instant for every record: one day partition, one file per commit.
    at = time.time_ns()
    by_batch: dict[int, str] = {}
    for batch in range(BATCHES):
        before = set(data_files(floe)) if batch else set()
        send(floe, token, log_records(batch, needle, at))
        committed(floe)
        (new,) = set(data_files(floe)) - before
        by_batch[batch] = new
    return needle, data_files(floe), by_batch


def searched(floe, where: str) -> list[str]:
    return sorted(r["body"] for r in rows(floe, f"SELECT body FROM otel.logs WHERE {where}"))


def test_needle_search_reads_only_the_files_that_can_hold_it(floe):
    needle, files, by_batch = ingest(floe)
    assert len(files) == BATCHES
    # Every data file has its index beside it, and nothing in the table's metadata names it.
    for path in files:
        assert Path(path + ".tokens.puffin").is_file(), path
    # A damaged index and a missing one, before any search reads them: those files are read.
    Path(by_batch[3] + ".tokens.puffin").write_bytes(b"PFA1" + b"\x00" * 64 + b"PFA1")
    Path(by_batch[6] + ".tokens.puffin").unlink()

    everything = [r["body"] for r in rows(floe, "SELECT body FROM otel.logs")]
    assert len(everything) == BATCHES * RECORDS

    # The needle: the one record holding it, found in the damaged file; every other file with
    # a usable index is skipped.
    pruned, unusable = metric(floe, PRUNED), metric(floe, UNUSABLE)
    for query in (needle, needle.upper(), needle.split("-")[1]):
        got = searched(floe, f"matches(body, '{query}')")
        assert got == sorted(b for b in everything if matches(b, query)), query
        assert len(got) == 1
    assert metric(floe, UNUSABLE) == unusable + 1, "the damaged index is read once, then remembered"
    assert metric(floe, PRUNED) == pruned + 3 * (BATCHES - 2)

    # A rare word in two files, by matches and by LIKE with the word whole in the pattern.
    pruned = metric(floe, PRUNED)
    kaboom = sorted(b for b in everything if matches(b, "kaboom"))
    assert len(kaboom) == 2
    assert searched(floe, "matches(body, 'Kaboom')") == kaboom
    like = sorted(b for b in everything if " KABOOM " in b)
    assert searched(floe, "body LIKE '% KABOOM %'") == like == kaboom
    assert metric(floe, PRUNED) == pruned + 2 * (BATCHES - 4)

    # What the index cannot decide reads every file, with the same answer as a full scan.
    pruned = metric(floe, PRUNED)
    assert searched(floe, "body LIKE '%KABOO%'") == kaboom
    assert searched(floe, "body ILIKE '% kaboom %'") == kaboom
    assert searched(floe, "NOT matches(body, 'request')") == sorted(
        b for b in everything if not matches(b, "request")
    )
    assert metric(floe, PRUNED) == pruned
    # Several tokens, in any order; an OR of two searches.
    both = sorted(b for b in everything if matches(b, "retry payment") or matches(b, needle))
    assert searched(floe, f"matches(body, 'payment RETRY') OR matches(body, '{needle}')") == both
    # A word nowhere: every file with a usable index is skipped, none returns a row.
    assert searched(floe, "matches(body, 'zyzzyva')") == []

    # Other engines read the table unchanged.
    table = floe.pyiceberg().load_table("otel.logs")
    assert table.scan().to_arrow().num_rows == BATCHES * RECORDS
    from test_duckdb import attach

    con = attach(floe)
    assert con.execute("SELECT count(*) FROM floe.otel.logs").fetchone()[0] == BATCHES * RECORDS
    duck = sorted(r[0] for r in con.execute("SELECT body FROM floe.otel.logs WHERE body LIKE '% KABOOM %'").fetchall())
    assert duck == kaboom


def test_indexes_live_and_die_with_their_data_files(floe):
    from test_compaction import run_job

    needle, files, _ = ingest(floe)
    body = {"warehouse": floe.warehouse, "namespace": ["otel"], "table": "logs"}
    # Orphan cleanup counts a live file's index as referenced.
    listed = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json={**body, "older-than-ms": 0})
    assert listed.status_code == 200, listed.text
    assert listed.json()["orphan-files"] == []

    # Compaction writes its files with their indexes, from the rows it rewrites.
    run_job(floe, "otel", "logs", "compact")
    compacted = data_files(floe)
    assert len(compacted) < len(files)
    for path in compacted:
        assert Path(path + ".tokens.puffin").is_file(), path
    pruned = metric(floe, PRUNED)
    assert len(searched(floe, f"matches(body, '{needle}')")) == 1
    assert metric(floe, PRUNED) == pruned + len(compacted) - 1

    # Expiry deletes the indexes of the data files it deletes.
    expired = floe.api("POST", "/api/v1/maintenance/expire-snapshots", json={**body, "max-snapshot-age-ms": 0})
    assert expired.status_code == 200, expired.text
    freed = expired.json()["freed-files"]
    for path in files:
        assert path + ".tokens.puffin" in [f.removeprefix("file://") for f in freed]
        assert not Path(path + ".tokens.puffin").exists() and not Path(path).exists()
    for path in compacted:
        assert Path(path + ".tokens.puffin").is_file()
    again = floe.api("POST", "/api/v1/maintenance/remove-orphan-files", json={**body, "older-than-ms": 0}).json()
    assert again["orphan-files"] == []
    assert len(searched(floe, f"matches(body, '{needle}')")) == 1
