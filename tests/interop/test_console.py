"""The web console at /console, driven in headless Chromium (Debian's chromium and
chromium-driver, through Selenium): sign-in with client credentials and through an OpenID
Connect issuer, browsing, a query with its chart, grant and revoke, and what a read-only
principal is refused. Screenshots go to FLOE_CONSOLE_SCREENSHOTS when it names a folder
(docs/console.md shows them)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from conftest import IN_CI, start_floe, stop_floe
from test_governance import make_principal

SCREENSHOTS = os.environ.get("FLOE_CONSOLE_SCREENSHOTS")


def chromium_paths() -> tuple[str, str]:
    browser = os.environ.get("FLOE_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("FLOE_CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        if IN_CI:
            pytest.fail("chromium and chromedriver must be installed in CI (scripts/setup-chromium.sh)")
        pytest.skip("no chromium/chromedriver (scripts/setup-chromium.sh installs them)")
    return browser, driver


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                 "--disable-gpu", "--no-first-run"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, what: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: condition(d), message=what)


def by_css(driver, selector: str, timeout: float = 20):
    from selenium.webdriver.common.by import By

    return wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector), f"an element {selector}", timeout)


def all_css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def page_ready(driver, page: str):
    """Waits until the routed page `page` has finished loading."""
    from selenium.common.exceptions import TimeoutException

    try:
        wait(driver, lambda d: d.execute_script(
            "const m = document.getElementById('page'); return m && m.dataset.page === arguments[0] && m.dataset.ready === 'true';",
            page), f"page {page} loaded")
    except TimeoutException:
        pytest.fail(f"page {page} did not load; the browser shows: {driver.find_element('tag name', 'body').text[:800]}")


def go(driver, floe, route: str, page: str):
    driver.get(f"{floe.base}/console/#/{route}")
    page_ready(driver, page)


def shot(driver, name: str):
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / f"{name}.png"))


def sign_in(driver, floe, client_id: str, client_secret: str):
    driver.get(f"{floe.base}/console/")
    by_css(driver, "#client-id").send_keys(client_id)
    by_css(driver, "#client-secret").send_keys(client_secret)
    by_css(driver, "#signin").click()


def seed(floe):
    """shop.orders (partitioned by region, two appends), shop.big_orders (a view), and
    secret.payroll, which the analyst may not see."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    catalog = floe.pyiceberg()
    catalog.create_namespace("shop", {"owner": "sales-eng"})
    schema = Schema(
        NestedField(1, "id", LongType(), required=False, doc="order id"),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    orders = catalog.create_table("shop.orders", schema=schema, partition_spec=spec,
                                  properties={"comment": "orders by region"})
    arrow = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])
    orders.append(pa.table({"id": [1, 2, 3], "region": ["eu", "eu", "us"], "amount": [10.0, 20.0, 5.0]}, schema=arrow))
    orders.append(pa.table({"id": [4, 5], "region": ["apac", "eu"], "amount": [7.5, 1.0]}, schema=arrow))
    view = floe.api("POST", f"/catalog/v1/{floe.warehouse}/namespaces/shop/views", json={
        "name": "big_orders",
        "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False}]},
        "view-version": {"version-id": 1, "schema-id": 0, "timestamp-ms": int(time.time() * 1000),
                         "summary": {"engine-name": "floe-test"}, "default-namespace": ["shop"],
                         "representations": [{"type": "sql", "sql": "SELECT id FROM shop.orders WHERE amount > 8",
                                              "dialect": "spark"}]},
        "properties": {},
    })
    assert view.status_code == 200, view.text
    catalog.create_namespace("secret")
    catalog.create_table("secret.payroll", schema=pa.schema([("salary", pa.int64())]))
    return catalog.load_table("shop.orders")


def test_console_signs_in_browses_queries_and_grants(browser, tmp_path):
    floe = start_floe(tmp_path)
    try:
        orders = seed(floe)
        make_principal(floe, "analyst", [])
        sign_in(browser, floe, "floe-test-root", "floe-test-root-secret")
        page_ready(browser, "catalog")
        assert by_css(browser, "#whoami").text == "root"

        # Browse: the warehouse's namespaces, then a namespace's tables and views.
        namespaces = [a.text for a in all_css(browser, "#tree a.namespace")]
        assert namespaces == ["secret", "shop"], namespaces
        go(browser, floe, "catalog/default/shop", "catalog")
        assert [a.text for a in all_css(browser, "#list-tables a.table")] == ["orders"]
        assert [a.text for a in all_css(browser, "#list-views a.view")] == ["big_orders"]
        assert "sales-eng" in by_css(browser, "#page").text
        shot(browser, "namespace")

        # A table: schema, partitioning, snapshots (ids exact past 2^53), files, properties.
        all_css(browser, "#list-tables a.table")[0].click()
        page_ready(browser, "table")
        fields = [[td.text for td in tr.find_elements("css selector", "td")] for tr in all_css(browser, "#schema-fields tbody tr")]
        assert fields == [["1", "id", "long", "no", "order id"], ["2", "region", "string", "no", ""],
                          ["3", "amount", "double", "no", ""]], fields
        shot(browser, "table-schema")
        go(browser, floe, "table/default/shop/orders/partitioning", "table")
        assert [td.text for td in all_css(browser, "#partition-fields tbody td")][:3] == ["region", "region", "identity"]
        go(browser, floe, "table/default/shop/orders/snapshots", "table")
        expected_ids = sorted(str(s.snapshot_id) for s in orders.metadata.snapshots)
        shown_ids = sorted(td.text for td in all_css(browser, "#snapshots tbody tr td:first-child"))
        assert shown_ids == expected_ids, (shown_ids, expected_ids)
        dots = sorted(c.get_attribute("data-snapshot") for c in all_css(browser, "svg.timeline circle.snapshot"))
        assert dots == expected_ids
        shot(browser, "table-snapshots")
        go(browser, floe, "table/default/shop/orders/files", "table")
        files = all_css(browser, "#files tbody tr")
        live = orders.inspect.files().to_pylist()
        assert len(files) == len(live) == 4, (len(files), len(live))
        assert sorted(int(tr.find_elements("css selector", "td")[4].text) for tr in files) == sorted(
            f["record_count"] for f in live)
        go(browser, floe, "table/default/shop/orders/properties", "table")
        assert "orders by region" in by_css(browser, "#page").text
        go(browser, floe, "view/default/shop/big_orders", "view")
        assert "SELECT id FROM shop.orders WHERE amount > 8" in by_css(browser, "#view-detail").text

        # A query: rows as a table, then as a chart with a bar per row.
        go(browser, floe, "sql", "sql")
        editor = by_css(browser, "#sql-text")
        editor.clear()
        editor.send_keys("SELECT region, count(*) AS orders, sum(amount) AS total FROM shop.orders "
                         "GROUP BY region ORDER BY region")
        by_css(browser, "#sql-run").click()
        by_css(browser, "#sql-rows")
        rows = [[td.text for td in tr.find_elements("css selector", "td")] for tr in all_css(browser, "#sql-rows tbody tr")]
        assert rows == [["apac", "1", "7.5"], ["eu", "3", "31"], ["us", "1", "5"]], rows
        assert by_css(browser, "#sql-summary").text.startswith("3 rows")
        shot(browser, "sql-table")
        by_css(browser, "#show-chart").click()
        bars = all_css(browser, "#sql-view svg.chart rect.bar")
        assert len(bars) == 3
        widths = [float(b.get_attribute("width")) for b in bars]
        assert widths[1] == max(widths), widths  # eu has the most orders
        shot(browser, "sql-chart")

        # Grant, see it listed, revoke it from its row.
        assert floe.api("POST", "/api/v1/roles", json={"name": "readers"}).status_code == 201
        go(browser, floe, "access", "access")
        from selenium.webdriver.support.ui import Select

        Select(by_css(browser, "#grant-role")).select_by_value("readers")
        Select(by_css(browser, "#grant-privilege")).select_by_value("read-data")
        Select(by_css(browser, "#grant-type")).select_by_value("table")
        by_css(browser, "#grant-namespace").send_keys("shop")
        by_css(browser, "#grant-name").send_keys("orders")
        by_css(browser, "#grant").click()
        wait(browser, lambda d: "Granted read-data" in d.find_element("css selector", "#access-message").text, "grant notice")
        held = floe.api("GET", "/api/v1/roles/readers/grants").json()["grants"]
        assert [(g["privilege"], g["on"]) for g in held] == [
            ("read-data", {"type": "table", "warehouse": "default", "namespace": ["shop"], "name": "orders"})], held
        wait(browser, lambda d: len(d.find_elements("css selector", "#grants button.revoke")) == 1, "the grant listed")
        # A revoke naming an id the name no longer means is refused, and the grant stays.
        stale = floe.api("POST", "/api/v1/grants/revoke", json={
            "role": "readers", "privilege": "read-data", "on": held[0]["on"],
            "securable-id": "01a00000-0000-7000-8000-000000000000"})
        assert stale.status_code == 409, stale.text
        assert len(floe.api("GET", "/api/v1/roles/readers/grants").json()["grants"]) == 1
        shot(browser, "access")
        all_css(browser, "#grants button.revoke")[0].click()
        wait(browser, lambda d: "Revoked read-data" in d.find_element("css selector", "#access-message").text, "revoke notice")
        assert floe.api("GET", "/api/v1/roles/readers/grants").json()["grants"] == []

        # What runs: jobs (one compaction asked for here), ingestion, pipelines, the audit trail.
        job = floe.api("POST", "/api/v1/jobs", json={"warehouse": "default", "namespace": ["shop"], "table": "orders",
                                                    "kind": "compact", "wait": True})
        assert job.status_code == 200, job.text
        go(browser, floe, "jobs", "jobs")
        assert "compact" in by_css(browser, "#jobs").text and "shop.orders" in by_css(browser, "#jobs").text
        shot(browser, "jobs")
        go(browser, floe, "ingest", "ingest")
        go(browser, floe, "pipelines", "pipelines")
        assert "No pipelines." in by_css(browser, "#page").text
        go(browser, floe, "audit", "audit")
        audit = by_css(browser, "#audit").text
        assert "POST /api/v1/grants/revoke" in audit and "POST /api/v1/grants" in audit
        shot(browser, "audit")
    finally:
        stop_floe(floe)


def test_console_shows_a_read_only_principal_only_what_it_may_see(browser, tmp_path):
    floe = start_floe(tmp_path)
    try:
        seed(floe)
        on_shop = {"type": "namespace", "warehouse": "default", "namespace": ["shop"]}
        analyst_id, analyst_secret = make_principal(floe, "analyst", [
            ("list-namespaces", on_shop), ("list-tables", on_shop), ("read-metadata", on_shop),
            ("read-data", on_shop)])

        # A wrong secret is refused on the sign-in page and nothing is stored.
        sign_in(browser, floe, analyst_id, "not-the-secret")
        assert "invalid_client" in by_css(browser, ".signin .error").text
        assert browser.execute_script("return sessionStorage.getItem('floe.console.session')") is None

        sign_in(browser, floe, analyst_id, analyst_secret)
        page_ready(browser, "catalog")
        assert by_css(browser, "#whoami").text == "analyst"
        assert [a.text for a in all_css(browser, "#tree a.namespace")] == ["shop"], "secret stays hidden"

        # It reads what it holds...
        go(browser, floe, "sql", "sql")
        editor = by_css(browser, "#sql-text")
        editor.clear()
        editor.send_keys("SELECT count(*) AS n FROM shop.orders")
        by_css(browser, "#sql-run").click()
        by_css(browser, "#sql-rows tbody td")
        assert [td.text for td in all_css(browser, "#sql-rows tbody td")] == ["5"]
        # ...and is refused what it does not, by the same APIs every client uses.
        editor = by_css(browser, "#sql-text")
        editor.clear()
        editor.send_keys("SELECT * FROM secret.payroll")
        by_css(browser, "#sql-run").click()
        refusal = by_css(browser, "#sql-result .error").text
        assert "'default.secret.payroll' not found" in refusal, refusal  # hidden, not just refused
        shot(browser, "refused-query")
        go(browser, floe, "catalog/default/secret", "catalog")
        assert all_css(browser, "#page .error"), "the hidden namespace shows an error, not its tables"
        assert not all_css(browser, "#list-tables a.table")
        go(browser, floe, "access", "access")
        assert "ForbiddenException" in by_css(browser, "#page .error").text or "403" in by_css(browser, "#page .error").text
        shot(browser, "refused-access")
        go(browser, floe, "audit", "audit")
        by_css(browser, "#audit-results .error")

        # A grant forged from the browser's own session is refused by the server, too.
        forged = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const s = JSON.parse(sessionStorage.getItem('floe.console.session'));
            fetch('/api/v1/grants', {method: 'POST', headers: {'Authorization': 'Bearer ' + s.token,
              'Content-Type': 'application/json'}, body: JSON.stringify({role: 'analyst-role',
              privilege: 'read-data', on: {type: 'namespace', warehouse: 'default', namespace: ['secret']}})})
              .then(r => done(r.status));
        """)
        assert forged in (403, 404), forged
        assert floe.api("GET", "/api/v1/roles/analyst-role/grants").json()["grants"].__len__() == 4

        # Signing out forgets the token.
        by_css(browser, "#signout").click()
        by_css(browser, "#client-id")
        assert browser.execute_script("return sessionStorage.getItem('floe.console.session')") is None
    finally:
        stop_floe(floe)


def test_console_never_renders_catalog_text_as_markup(browser, tmp_path):
    """Names, docs and properties are shown as text: markup in them does not run."""
    floe = start_floe(tmp_path)
    try:
        catalog = floe.pyiceberg()
        hostile = '<img src=x onerror="window.pwned=1">'
        catalog.create_namespace("lab", {"note": hostile})
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField

        catalog.create_table("lab.t", schema=Schema(NestedField(1, "x", LongType(), required=False, doc=hostile)),
                             properties={"p": hostile})
        sign_in(browser, floe, "floe-test-root", "floe-test-root-secret")
        page_ready(browser, "catalog")
        for route, page in [("catalog/default/lab", "catalog"), ("table/default/lab/t/schema", "table"),
                            ("table/default/lab/t/properties", "table")]:
            go(browser, floe, route, page)
            assert hostile in by_css(browser, "#page").text
            assert not all_css(browser, "#page img")
            assert browser.execute_script("return window.pwned") is None
    finally:
        stop_floe(floe)


def audit_rows(driver) -> list[dict]:
    """The audit page's rows, in page order: each one's seq and element."""
    return [{"seq": int(tr.get_attribute("data-seq")), "tr": tr} for tr in all_css(driver, "#audit tbody tr")]


def audit_loads(driver) -> str | None:
    return by_css(driver, "#audit-results").get_attribute("data-loads")


def audit_click(driver, selector: str):
    """Clicks a button of the audit page and waits for the records it loads."""
    before = audit_loads(driver)
    by_css(driver, selector).click()
    wait(driver, lambda d: audit_loads(d) != before, f"the records {selector} loads")


def filter_audit(driver, **fields):
    """Sets the audit page's filters (ids audit-<name>; times as datetime-local values) and
    applies them."""
    for name, value in fields.items():
        driver.execute_script("document.getElementById(arguments[0]).value = arguments[1];", f"audit-{name}", value)
    audit_click(driver, "#audit-filter")


def local_input(driver, ms: int) -> str:
    """`ms` as a datetime-local value (to the second) in the browser's own time zone."""
    return driver.execute_script(
        "const d = new Date(arguments[0]); return new Date(d - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);",
        ms)


def test_console_audit_view_reads_newest_first_filters_and_shows_details(browser, tmp_path):
    """The audit page opens on the newest records; filters by time, principal and outcome;
    shows a SQL record's statement; keeps attacker-chosen text as text. The files tab shows
    paths relative to the table's location, and a path outside it in full, marked."""
    from selenium.webdriver.common.keys import Keys

    floe = start_floe(tmp_path)
    try:
        orders = seed(floe)
        hostile = '<img src=x onerror="window.pwned=1">'
        on_shop = {"type": "namespace", "warehouse": "default", "namespace": ["shop"]}
        mallory_id, mallory_secret = make_principal(floe, hostile, [("read-data", on_shop)])
        mallory = floe.token(mallory_id, mallory_secret)
        hostile_sql = f"SELECT count(*) AS n FROM shop.orders WHERE region <> '{hostile}'"
        answer = floe.api("POST", "/api/v1/sql", token=mallory, json={"sql": hostile_sql, "warehouse": "default"})
        assert answer.status_code == 200, answer.text
        assert floe.api("GET", "/api/v1/roles", token=mallory).status_code == 403
        for _ in range(60):  # more than a page of records in all
            assert floe.api("GET", "/api/v1/whoami", token=mallory).status_code == 200

        # A boundary in time between the records above and root's statement below.
        time.sleep(1.1)
        boundary = (int(time.time() * 1000) // 1000 + 1) * 1000
        time.sleep(max(0.0, boundary / 1000 - time.time()) + 0.2)
        marker_sql = "SELECT 42 AS answer\n  -- the marker statement"
        assert floe.api("POST", "/api/v1/sql", json={"sql": marker_sql, "warehouse": "default"}).status_code == 200

        def trail() -> dict[int, dict]:
            records = floe.api("GET", "/api/v1/audit?limit=10000").json()["records"]
            return {r["seq"]: r for r in records}

        # The API reads newest first when asked, paged with before-seq; ascending stays the default.
        time.sleep(0.5)  # the background writer appends the last records
        known = trail()
        newest = floe.api("GET", "/api/v1/audit?order=desc&limit=3").json()
        seqs = [r["seq"] for r in newest["records"]]
        assert seqs == sorted(seqs, reverse=True) and seqs[0] >= max(known), seqs
        older = floe.api("GET", f"/api/v1/audit?order=desc&limit=3&before-seq={newest['next-before-seq']}").json()
        assert [r["seq"] for r in older["records"]] == [seqs[-1] - 1, seqs[-1] - 2, seqs[-1] - 3]
        assert [r["seq"] for r in floe.api("GET", "/api/v1/audit?limit=3").json()["records"]] == [1, 2, 3]
        bad = floe.api("GET", "/api/v1/audit?order=sideways")
        assert bad.status_code == 400 and "order must be asc or desc" in bad.text, bad.text

        sign_in(browser, floe, "floe-test-root", "floe-test-root-secret")
        page_ready(browser, "catalog")
        go(browser, floe, "audit", "audit")
        by_css(browser, "#audit tbody tr")
        rows = audit_rows(browser)
        assert len(rows) == 100 and [r["seq"] for r in rows] == sorted((r["seq"] for r in rows), reverse=True)
        assert rows[0]["seq"] >= max(known), "the page opens on the newest records"
        # Older pages continue where the first ended, and Newer comes back.
        audit_click(browser, "#audit-older")
        assert audit_rows(browser)[0]["seq"] == rows[-1]["seq"] - 1, "the older page"
        audit_click(browser, "#audit-newer")
        assert audit_rows(browser)[0]["seq"] >= rows[0]["seq"], "the newest page again"
        assert not all_css(browser, "#audit-newer")

        # By time: from the boundary on, then up to just before it.
        filter_audit(browser, **{"from": local_input(browser, boundary)})
        known = trail()
        shown = [r["seq"] for r in audit_rows(browser)]
        assert shown and all(known[s]["at-ms"] >= boundary for s in shown if s in known), shown
        marker = next(s for s, r in known.items() if "the marker statement" in r["details"])
        assert marker in shown
        filter_audit(browser, **{"from": "", "to": local_input(browser, boundary - 1000)})
        shown = [r["seq"] for r in audit_rows(browser)]
        assert shown and marker not in shown and all(known[s]["at-ms"] < boundary for s in shown), shown

        # By principal (typed, as a person would) and outcome: its records only.
        filter_audit(browser, to="")
        by_css(browser, "#audit-principal").send_keys(hostile)
        filter_audit(browser)
        shown = audit_rows(browser)
        assert shown and all(known[r["seq"]]["principal"] == hostile for r in shown if r["seq"] in known)
        actions = {known[r["seq"]]["action"] for r in shown}
        assert {"POST /api/v1/sql", "GET /api/v1/roles"} <= actions, actions
        filter_audit(browser, outcome="deny")
        denied = [known[r["seq"]] for r in audit_rows(browser)]
        assert denied and all(r["decision"] == "deny" and r["principal"] == hostile for r in denied), denied
        assert "GET /api/v1/roles" in {r["action"] for r in denied}
        filter_audit(browser, outcome="4xx")
        assert all(400 <= known[r["seq"]]["status"] < 500 for r in audit_rows(browser))

        # A SQL record's details, opened from the keyboard: its statement as written, as text.
        filter_audit(browser, outcome="", action="POST /api/v1/sql")
        sql_row = audit_rows(browser)[0]
        assert known[sql_row["seq"]]["principal"] == hostile
        sql_row["tr"].send_keys(Keys.ENTER)
        detail = by_css(browser, "#audit-detail")
        assert detail.get_attribute("data-seq") == str(sql_row["seq"])
        assert by_css(browser, "#audit-statement").text == hostile_sql
        assert hostile in detail.text and known[sql_row["seq"]]["hash"] in detail.text
        assert browser.switch_to.active_element.get_attribute("id") == "audit-detail-title"
        assert not all_css(browser, "#page img")
        assert browser.execute_script("return window.pwned") is None
        shot(browser, "audit-detail")
        # Escape closes it and gives the row its focus back; a click opens root's statement.
        browser.switch_to.active_element.send_keys(Keys.ESCAPE)
        wait(browser, lambda d: not all_css(d, "#audit-detail"), "the details closed")
        assert browser.switch_to.active_element.get_attribute("data-seq") == str(sql_row["seq"])
        by_css(browser, "#audit-principal").clear()
        filter_audit(browser)
        next(r for r in audit_rows(browser) if r["seq"] == marker)["tr"].click()
        assert by_css(browser, "#audit-statement").text == marker_sql
        assert "SELECT 42 AS answer" in by_css(browser, "#audit tbody").text

        # Files: relative to the table's location (the full path in the tooltip); a file added
        # from outside the location is shown in full and marked.
        location = orders.metadata.location.rstrip("/")
        outside_dir = tmp_path / "outside"
        outside_dir.mkdir()
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": pa.array([9], pa.int64()), "region": ["xx"], "amount": [1.5]}),
                       outside_dir / "extra.parquet")
        outside_path = f"file://{outside_dir / 'extra.parquet'}"
        orders.add_files([outside_path])
        live = {f["file_path"] for f in orders.inspect.files().to_pylist()}
        go(browser, floe, "table/default/shop/orders/files", "table")
        cells = all_css(browser, "#files tbody td span.path")
        assert {c.get_attribute("data-path") for c in cells} == live
        assert [c.get_attribute("data-path") for c in cells if "outside" in c.get_attribute("class")] == [outside_path]
        for cell in cells:
            full = cell.get_attribute("data-path")
            if full.startswith(location + "/"):
                assert cell.text == full[len(location) + 1:] and cell.get_attribute("title") == full
                assert "outside" not in cell.get_attribute("class")
            else:
                assert full == outside_path, full
                assert cell.text.startswith(full) and "outside the table's location" in cell.text
                assert "outside" in cell.get_attribute("class")
        assert by_css(browser, "#files-location").text == orders.metadata.location
        shot(browser, "table-files")
    finally:
        stop_floe(floe)


def test_console_files_are_fixed_and_served_with_a_strict_policy(tmp_path):
    floe = start_floe(tmp_path)
    try:
        index = requests.get(f"{floe.base}/console/", timeout=10)
        assert index.status_code == 200 and "Floe console" in index.text
        policy = index.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
        assert index.headers["x-content-type-options"] == "nosniff"
        assert requests.get(f"{floe.base}/console/app.js", timeout=10).headers["content-type"].startswith("text/javascript")
        assert requests.get(f"{floe.base}/console", timeout=10, allow_redirects=False).status_code in (301, 308)
        # Only the embedded files: nothing of the data directory, however the name is spelled.
        (floe.data_dir / "planted.js").write_text("alert(1)")
        for name in ["planted.js", "a/b", "..%2Fcatalog.db", "%2e%2e%2fcatalog.db", "..%5Ccatalog.db", "app.js%00.png",
                     "root-credentials.json", "..%2F..%2Fetc%2Fpasswd"]:
            answer = requests.get(f"{floe.base}/console/{name}", timeout=10)
            assert answer.status_code == 404, (name, answer.status_code)
            assert "script-src 'self'" in answer.headers.get("content-security-policy", ""), name
            assert "floe-test-root-secret" not in answer.text
        config = requests.get(f"{floe.base}/console/config.json", timeout=10).json()
        assert config == {"oidc": None}
        # Loading the console writes nothing to the audit trail; the API calls it makes do.
        records = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
        assert not [r for r in records if r["resource"].startswith("/console")]
    finally:
        stop_floe(floe)


# --- OpenID Connect -----------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """A small OpenID Connect issuer: discovery, keys, the authorization code flow with PKCE
    (it signs in whoever asks as `user`, after checking the client and redirect URI), and a
    token endpoint that checks the code verifier and answers an RS256 access token."""

    def __init__(self, user: str, client_id: str, audience: str):
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.user, self.client_id, self.audience = user, client_id, audience
        self.redirect_uri = None
        self.codes: dict[str, dict] = {}
        self.exchanges: list[dict] = []
        issuer = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (BaseHTTPRequestHandler,), {
            "do_GET": lambda h: issuer.get(h), "do_POST": lambda h: issuer.post(h),
            "log_message": lambda *a: None}))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, h, status: int, body=None, headers=None):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        payload = json.dumps(body).encode() if body is not None else b""
        if body is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def get(self, h):
        url = urllib.parse.urlparse(h.path)
        if url.path == "/.well-known/openid-configuration":
            return self.answer(h, 200, {"issuer": self.url, "jwks_uri": f"{self.url}/jwks",
                                        "authorization_endpoint": f"{self.url}/authorize",
                                        "token_endpoint": f"{self.url}/token"})
        if url.path == "/jwks":
            numbers = self.key.public_key().public_numbers()
            return self.answer(h, 200, {"keys": [{
                "kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
                "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
                "e": b64url(numbers.e.to_bytes(3, "big"))}]})
        if url.path == "/authorize":
            q = dict(urllib.parse.parse_qsl(url.query))
            ok = (q.get("client_id") == self.client_id and q.get("redirect_uri") == self.redirect_uri
                  and q.get("response_type") == "code" and q.get("code_challenge_method") == "S256")
            if not ok:
                return self.answer(h, 400, {"error": "invalid_request", "got": q})
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"challenge": q["code_challenge"], "redirect_uri": q["redirect_uri"]}
            target = f"{q['redirect_uri']}?{urllib.parse.urlencode({'code': code, 'state': q['state']})}"
            return self.answer(h, 302, headers={"Location": target})
        return self.answer(h, 404, {"error": "not_found"})

    def post(self, h):
        form = dict(urllib.parse.parse_qsl(h.rfile.read(int(h.headers["Content-Length"])).decode()))
        cors = {"Access-Control-Allow-Origin": "*"}
        self.exchanges.append(form)
        grant = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "").encode()
        if (grant is None or form.get("redirect_uri") != grant["redirect_uri"]
                or b64url(hashlib.sha256(verifier).digest()) != grant["challenge"]):
            return self.answer(h, 400, {"error": "invalid_grant"}, cors)
        return self.answer(h, 200, {"access_token": self.token(), "token_type": "Bearer", "expires_in": 600}, cors)

    def token(self) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        head = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode())
        claims = b64url(json.dumps({"iss": self.url, "aud": self.audience, "sub": self.user,
                                    "iat": now, "nbf": now - 5, "exp": now + 600}).encode())
        signature = self.key.sign(f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{claims}.{b64url(signature)}"


def test_console_signs_in_through_an_openid_connect_issuer(browser, tmp_path):
    issuer = Issuer(user="alice", client_id="floe-console", audience="floe")
    floe = start_floe(tmp_path, extra_args=("--oidc-issuer", issuer.url, "--console-oidc-client-id", "floe-console"))
    try:
        issuer.redirect_uri = f"{floe.base}/console/"
        config = requests.get(f"{floe.base}/console/config.json", timeout=10).json()
        assert config["oidc"]["client-id"] == "floe-console"
        assert config["oidc"]["token-endpoint"] == f"{issuer.url}/token"
        policy = requests.get(f"{floe.base}/console/", timeout=10).headers["content-security-policy"]
        assert policy.endswith(f"connect-src 'self' {issuer.url}"), policy

        # A sign-in answer the tab never asked for is refused, nothing is exchanged, and
        # nothing it says is shown.
        browser.get(f"{floe.base}/console/?code=stolen&state=forged")
        assert "does not belong" in by_css(browser, ".signin .error").text
        browser.get(f"{floe.base}/console/?error=temporarily_unavailable&error_description=Sign+in+at+evil.example")
        refusal = by_css(browser, ".signin .error").text
        assert "does not belong" in refusal and "evil" not in refusal, refusal
        assert issuer.exchanges == []

        button = by_css(browser, "#signin-oidc")
        assert issuer.url in button.text
        shot(browser, "signin")
        button.click()
        page_ready(browser, "catalog")
        assert by_css(browser, "#whoami").text == "alice"
        assert browser.current_url.startswith(f"{floe.base}/console/"), "the code left the address bar"
        assert "code=" not in browser.current_url
        assert len(issuer.exchanges) == 1 and issuer.exchanges[0]["grant_type"] == "authorization_code"
        # alice holds no grants yet: the console shows her an empty warehouse list, not root's.
        assert not all_css(browser, "#tree a.namespace")
    finally:
        stop_floe(floe)
        issuer.server.shutdown()
