"""A sqllogictest runner for `.slt` files against a running Floe server's SQL endpoint.

The Rust suite (`crates/sql/tests/slt.rs`) runs `tests/slt/*.slt` on an embedded engine over
tables Floe writes itself. The files under `tests/slt/engines/` need tables other engines wrote
(PyIceberg, Spark), so the interop tests create those and run the files here, over HTTP.

Supported records: `statement ok`, `statement error <text>`, `query <types> [rowsort]` with
its `----` block, `#` comments. Values print as the JSON answer gives them: NULL for null,
`(empty)` for an empty string, true/false, numbers as Python prints them, nested values as
compact JSON. `${name}` in a file is replaced by a value the test supplies (snapshot ids,
timestamps).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Record:
    kind: str  # "statement" or "query"
    sql: str
    line: int
    error: str | None = None  # expected error text for `statement error`
    sort: bool = False
    expected: list[str] | None = None


def parse(text: str) -> list[Record]:
    records: list[Record] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        words = line.split()
        if words[0] not in ("statement", "query"):
            raise ValueError(f"line {start}: unknown record {line!r}")
        i += 1
        sql_lines = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            sql_lines.append(lines[i])
            i += 1
        record = Record(words[0], "\n".join(sql_lines), start)
        if words[0] == "statement":
            if words[1] == "error":
                record.error = line.split("error", 1)[1].strip()
            elif words[1] != "ok":
                raise ValueError(f"line {start}: expected `statement ok` or `statement error`")
        else:
            record.sort = "rowsort" in words[2:]
            if i >= len(lines) or lines[i].strip() != "----":
                raise ValueError(f"line {start}: query without a ---- result block")
            i += 1
            expected = []
            while i < len(lines) and lines[i].strip():
                expected.append(lines[i].strip())
                i += 1
            record.expected = expected
        records.append(record)
    return records


def show(value) -> str:
    if value is None:
        return "NULL"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value == "":
        return "(empty)"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def run_file(floe, path: Path, variables: dict[str, object] | None = None) -> int:
    """Runs every record of `path`; raises AssertionError naming every record that failed.
    Returns how many records ran."""
    text = path.read_text()
    for name, value in (variables or {}).items():
        text = text.replace("${" + name + "}", str(value))
    if "${" in text:
        raise AssertionError(f"{path.name}: unreplaced variable in {re.findall(r'[$][{][^}]*[}]', text)}")
    records = parse(text)
    failures: list[str] = []
    for record in records:
        answer = floe.api("POST", "/api/v1/sql", json={"sql": record.sql, "warehouse": floe.warehouse})
        where = f"{path.name}:{record.line}: {record.sql}"
        if record.error is not None:
            if answer.status_code < 400 or record.error not in answer.text:
                failures.append(f"{where}\nexpected an error containing {record.error!r}, got {answer.text[:500]}")
            continue
        if answer.status_code != 200:
            failures.append(f"{where}\n{answer.status_code} {answer.text}")
            continue
        if record.kind == "statement":
            continue
        body = answer.json()
        columns = [c["name"] for c in body["columns"]]
        rows = [" ".join(show(row[c]) for c in columns) for row in body["rows"]]
        if record.sort:
            rows.sort()
        if rows != record.expected:
            failures.append(
                f"{where}\nexpected:\n" + "\n".join(record.expected or []) + "\ngot:\n" + "\n".join(rows)
            )
    assert not failures, f"{len(failures)} of {len(records)} records failed:\n\n" + "\n\n".join(failures)
    return len(records)
