"""Attacks through table locations, on every catalog database and kind of warehouse: a table
placed at another spelling of the victim's location, inside it, around it or at the warehouse
root or in Floe's own `.floe` directory is refused (400), as are pattern characters, a namespace location inside the victim and
registering the victim's metadata. A table placed right beside the victim (its location
sharing the victim's as a string prefix) is allowed, and purging it, cleaning its orphans,
vending credentials for it and signing requests for it stay on its own files."""

from __future__ import annotations

import os

import pyarrow as pa
from attack_helpers import (
    ONE_HOUR_MS,
    age_victim_files,
    assert_alive,
    assert_victim_untouched,
    create_table,
    error_message,
    local_path,
    make_sandboxer,
    make_victim,
    plant_victim_data_files,
    sql,
    tables_url,
)

OVERLAP = "overlaps the location of finance.ledger"


def aliases(floe, location: str) -> list[str]:
    """Other spellings of `location`, and locations inside or around it."""
    root, _, leaf = location.rpartition("/finance/")
    spellings = [
        f"{root}//finance/{leaf}",
        f"{root}/finance/./{leaf}",
        f"{root}/./finance/{leaf}",
        f"{location}/",
        f"{location}//",
        f"{location}/data",
        f"{location}/metadata/deeper",
        f"{root}/finance",
        f"{root}/finance/",
    ]
    if floe.storage == "local":
        spellings.append(f"file:{local_path(location)}")
    else:
        spellings += [location.replace("s3://", "s3a://", 1), location.replace("s3://", "s3n://", 1)]
    return spellings


def warehouse_root(location: str) -> str:
    return location.rpartition("/finance/")[0]


def test_a_table_cannot_take_the_victims_location_by_another_spelling(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    for i, location in enumerate(aliases(floe, victim.location)):
        answer = create_table(floe, attacker.token, "sandbox", f"alias{i}", location=location)
        assert answer.status_code == 400, (location, answer.status_code, answer.text)
        assert OVERLAP in error_message(answer), (location, answer.text)
    root = warehouse_root(victim.location)
    for i, location in enumerate([root, f"{root}/"]):
        answer = create_table(floe, attacker.token, "sandbox", f"root{i}", location=location)
        assert answer.status_code == 400, (location, answer.text)
        assert "is the warehouse root" in error_message(answer), answer.text
    # Floe's own directory, where answers wait for slow clients, is no table's.
    for i, location in enumerate([f"{root}/.floe", f"{root}/.floe/results", f"{root}/./.floe/results/x"]):
        answer = create_table(floe, attacker.token, "sandbox", f"own{i}", location=location)
        assert answer.status_code == 400, (location, answer.text)
        assert "keeps for its own files" in error_message(answer), answer.text
    for i, char in enumerate("*?$"):
        location = f"{root}/sandbox/pattern{char}x"
        answer = create_table(floe, attacker.token, "sandbox", f"pattern{i}", location=location)
        assert answer.status_code == 400, (location, answer.text)
        assert f"'{char}'" in error_message(answer), answer.text
    # A wildcard that would make a vended policy or a listing cover the victim.
    answer = create_table(floe, attacker.token, "sandbox", "wild", location=f"{root}/finance/ledger*")
    assert answer.status_code == 400, answer.text
    escape = create_table(floe, attacker.token, "sandbox", "escape", location=f"{root}/sandbox/../finance/{victim.location.rpartition('/')[2]}")
    assert escape.status_code == 400, escape.text
    # None of the refused tables exists.
    listed = floe.api("GET", tables_url(floe, "sandbox"), token=attacker.token)
    assert listed.status_code == 200 and listed.json()["identifiers"] == [], listed.text
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_namespace_location_inside_the_victim_gives_no_table_there(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    for name, location in (("inner", f"{victim.location}/data"), ("over", victim.location)):
        made = floe.api(
            "POST", f"/catalog/v1/{floe.warehouse}/namespaces",
            json={"namespace": ["sandbox", name], "properties": {"location": location}},
        )
        assert made.status_code == 200, made.text
        answer = create_table(floe, attacker.token, f"sandbox%1F{name}", "planted")
        assert answer.status_code == 400, (location, answer.status_code, answer.text)
        assert OVERLAP in error_message(answer), answer.text
        assert floe.api("GET", tables_url(floe, f"sandbox%1F{name}", "planted")).status_code == 404
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_registering_the_victims_metadata_under_sandbox_is_refused(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    answer = floe.api(
        "POST", f"/catalog/v1/{floe.warehouse}/namespaces/sandbox/register", token=attacker.token,
        json={"name": "ledger_copy", "metadata-location": victim.metadata_location},
    )
    assert answer.status_code in (400, 403), answer.text
    if answer.status_code == 400:
        assert OVERLAP in error_message(answer), answer.text
    # Even root cannot register the victim a second time under another name.
    again = floe.api(
        "POST", f"/catalog/v1/{floe.warehouse}/namespaces/sandbox/register",
        json={"name": "ledger_twin", "metadata-location": victim.metadata_location},
    )
    assert again.status_code == 400 and OVERLAP in error_message(again), again.text
    for name in ("ledger_copy", "ledger_twin"):
        assert floe.api("GET", tables_url(floe, "sandbox", name)).status_code == 404
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_table_beside_the_victim_keeps_purge_cleanup_vending_and_signing_to_itself(floe_matrix):
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    # The victim's location is a string prefix of this one: a check by string prefix, rather
    # than by path segment, would let the shadow's operations reach the victim.
    shadow_location = f"{victim.location}-shadow"
    made = create_table(floe, attacker.token, "sandbox", "shadow", location=shadow_location)
    assert made.status_code == 200, made.text
    assert made.json()["metadata"]["location"] == shadow_location
    shadow = floe.pyiceberg(attacker.client_id, attacker.secret).load_table("sandbox.shadow")
    shadow.append(pa.table({"id": pa.array([7, 8], pa.int64())}))
    # The shadow also lists the victim's data files (a manifest the attacker wrote).
    plant_victim_data_files(floe, attacker, "shadow")
    age_victim_files(floe, victim)

    # Orphan cleanup on the shadow: everything it lists is its own.
    stray = f"{shadow_location}/data/stray.parquet"
    with shadow.io.new_output(stray).create() as out:
        out.write(b"old and unreferenced")
    if floe.storage == "local":
        then = os.path.getmtime(local_path(stray)) - 10 * 24 * 3600
        os.utime(local_path(stray), (then, then))
    body = {"warehouse": floe.warehouse, "namespace": ["sandbox"], "table": "shadow"}
    cleaned = floe.api(
        "POST", "/api/v1/maintenance/remove-orphan-files", token=attacker.token,
        json={**body, "dry-run": False, "older-than-ms": ONE_HOUR_MS},
    )
    assert cleaned.status_code == 200, cleaned.text
    result = cleaned.json()
    assert all(f.startswith(f"{shadow_location}/") for f in result["orphan-files"]), result
    if floe.storage == "local":
        assert result["orphan-files"] == [stray] and result["deleted-files"] == 1, result
    assert_victim_untouched(floe, victim)

    # Credentials vended for the shadow cover the shadow only.
    vended = floe.api("GET", f"{tables_url(floe, 'sandbox', 'shadow')}/credentials", token=attacker.token)
    assert vended.status_code == 200, vended.text
    for credential in vended.json()["storage-credentials"]:
        assert credential["prefix"] == shadow_location, credential["prefix"]
    if floe.storage == "local":
        assert vended.json()["storage-credentials"] == []

    # Requests signed for the shadow: its own files only.
    sign_url = f"{tables_url(floe, 'sandbox', 'shadow')}/sign"

    def sign(method: str, uri: str, body: str | None = None):
        payload = {"region": "us-east-1", "uri": uri, "method": method,
                   "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
        if body is not None:
            payload["body"] = body
        return floe.api("POST", sign_url, token=attacker.token, json=payload)

    if floe.storage == "s3":
        from conftest import S3_ENDPOINT

        bucket, _, shadow_key = shadow_location.removeprefix("s3://").partition("/")
        victim_key = victim.location.removeprefix("s3://").partition("/")[2]
        victim_file = victim.data_files[0].removeprefix("s3://").partition("/")[2]
        own = sign("GET", f"{S3_ENDPOINT}/{bucket}/{shadow_key}/data/stray.parquet")
        assert own.status_code == 200, own.text
        for method, uri, payload in (
            ("GET", f"{S3_ENDPOINT}/{bucket}/{victim_file}", None),
            ("PUT", f"{S3_ENDPOINT}/{bucket}/{victim_key}/data/planted.parquet", None),
            ("DELETE", f"{S3_ENDPOINT}/{bucket}/{victim_file}", None),
            ("GET", f"{S3_ENDPOINT}/{bucket}?list-type=2&prefix={victim_key}", None),
            ("GET", f"{S3_ENDPOINT}/{bucket}?list-type=2&prefix={victim_key}/", None),
            ("POST", f"{S3_ENDPOINT}/{bucket}?delete",
             f"<Delete><Object><Key>{victim_file}</Key></Object></Delete>"),
        ):
            refused = sign(method, uri, payload)
            assert refused.status_code == 403, (method, uri, refused.status_code, refused.text)
    else:
        refused = sign("GET", victim.data_files[0])
        assert refused.status_code == 400 and "not on S3" in refused.text, refused.text

    # Floe's SQL on the shadow does not hand out the victim's rows.
    read = sql(floe, "SELECT * FROM sandbox.shadow", attacker.token)
    assert read.status_code != 200 and "umbrella" not in read.text, read.text

    # Purging the shadow deletes its own files and not the victim's it lists.
    purged = floe.api("DELETE", f"{tables_url(floe, 'sandbox', 'shadow')}?purgeRequested=true")
    assert purged.status_code == 204, purged.text
    assert floe.api("GET", tables_url(floe, "sandbox", "shadow")).status_code == 404
    if floe.storage == "local":
        left = [p for p in local_path(shadow_location).rglob("*") if p.is_file()]
        assert left == [], left
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_percent_escaped_location_is_refused_or_names_one_set_of_files(floe_matrix):
    """`%2D` spells `-` to a URL parser and `%2D` to a file system: a location holding an
    escape either is refused, or every reader and writer (PyIceberg, Floe's SQL, orphan
    cleanup, purge) uses the same files — and never the victim's, whose location the escaped
    one spells when decoded."""
    floe = floe_matrix
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)
    root, _, leaf = victim.location.rpartition("/finance/")
    candidates = {
        "escaped_victim": f"{root}/finance/{leaf.replace('-', '%2D', 1)}",
        "escaped_slash": f"{victim.location}%2Fdata",
        "with_space": f"{root}/sandbox/with space",
    }
    age_victim_files(floe, victim)
    for name, location in candidates.items():
        made = create_table(floe, attacker.token, "sandbox", name, location=location)
        if made.status_code == 400:
            continue
        assert made.status_code == 200, (location, made.text)
        table = floe.pyiceberg(attacker.client_id, attacker.secret).load_table(f"sandbox.{name}")
        table.append(pa.table({"id": pa.array([5, 6], pa.int64())}))
        read = sql(floe, f'SELECT sum(id) AS s FROM sandbox."{name}"', attacker.token)
        assert read.status_code == 200 and read.json()["rows"] == [{"s": 11}], (location, read.json()["error"]["message"][:600] if read.status_code != 200 else read.json())
        listed = floe.api(
            "POST", "/api/v1/maintenance/remove-orphan-files", token=attacker.token,
            json={"warehouse": floe.warehouse, "namespace": ["sandbox"], "table": name, "dry-run": True, "older-than-ms": 0},
        )
        assert listed.status_code == 200, (location, listed.text)
        assert listed.json()["orphan-files"] == [], (location, "its own files listed as orphans", listed.text)
        purged = floe.api("DELETE", f"{tables_url(floe, 'sandbox', name)}?purgeRequested=true")
        assert purged.status_code == 204, purged.text
        assert_victim_untouched(floe, victim)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)
