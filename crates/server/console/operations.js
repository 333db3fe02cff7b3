// What runs: stream pipelines with their lag, maintenance jobs, HTTP ingestion, and the
// audit trail. Each list is what the signed-in principal may see; a refusal is shown as such.

import { api } from "./api.js";
import { bytes, dataTable, errorBox, facts, h, text, time } from "./ui.js";

async function section(title, load) {
  try {
    return h("div", {}, h("h1", {}, title), await load());
  } catch (e) {
    return h("div", {}, h("h1", {}, title), errorBox(e));
  }
}

function tableName(o) {
  return [...(o.namespace || []), o.table].filter(Boolean).join(".");
}

export function pipelinesPage() {
  return section("Pipelines", async () => {
    const { pipelines } = await api("GET", "/api/v1/pipelines");
    if (!pipelines.length) return h("p", { class: "muted" }, "No pipelines.");
    const rows = await Promise.all(
      pipelines.map(async (p) => {
        try {
          const status = await api("GET", `/api/v1/pipelines/${encodeURIComponent(p.name)}/status`);
          const partitions = status.partitions || [];
          const known = partitions.filter((x) => typeof x.lag === "number");
          return { ...p, status, lag: known.length ? known.reduce((sum, x) => sum + x.lag, 0) : null };
        } catch (e) {
          return { ...p, status: { "last-error": e.message }, lag: null };
        }
      }),
    );
    return dataTable(
      [
        { name: "name" },
        { name: "topics", render: (p) => (p.spec.topics || []).join(", ") },
        { name: "table", render: (p) => `${p.spec.warehouse}.${tableName(p.spec)}` },
        { name: "format", render: (p) => p.spec.format || "json" },
        { name: "node", render: (p) => p.status.node || "" },
        { name: "lag", label: "lag (records)", render: (p) => (p.lag === null ? "unknown" : p.lag) },
        { name: "rate", label: "records/s", render: (p) => (p.status.rates ? Math.round(p.status.rates["records-per-second"] || 0) : "") },
        { name: "error", render: (p) => p.status["last-error"] || p.status["broker-error"] || "" },
      ],
      rows,
      { id: "pipelines" },
    );
  });
}

export function jobsPage(ctx) {
  return section("Maintenance jobs", async () => {
    const { jobs } = await api("GET", `/api/v1/jobs?warehouse=${encodeURIComponent(ctx.warehouse)}&limit=200`);
    if (!jobs.length) return h("p", { class: "muted" }, `No jobs in ${ctx.warehouse}.`);
    return dataTable(
      [
        { name: "kind" },
        { name: "table", render: tableName },
        { name: "status", render: (j) => h("span", { class: `badge ${j.status === "failed" ? "bad" : j.status === "succeeded" ? "good" : ""}` }, j.status) },
        { name: "trigger" },
        { name: "attempts" },
        { name: "created", render: (j) => time(j["created-at-ms"]) },
        { name: "finished", render: (j) => time(j["finished-at-ms"]) },
        { name: "result", render: (j) => j.error || text(j.result) },
      ],
      jobs,
      { id: "jobs" },
    );
  });
}

export function ingestPage() {
  return section("HTTP and OpenTelemetry ingestion", async () => {
    const { tables } = await api("GET", "/api/v1/ingest/status");
    if (!tables.length) return h("p", { class: "muted" }, "Nothing ingested on this node since it started.");
    return dataTable(
      [
        { name: "table", render: (t) => `${t.warehouse}.${tableName(t)}` },
        { name: "pending-entries", label: "pending" },
        { name: "accepted-rows", label: "accepted rows" },
        { name: "accepted-bytes", label: "accepted", render: (t) => bytes(t["accepted-bytes"]) },
        { name: "committed-rows", label: "committed rows" },
        { name: "commits" },
        { name: "committed-sequence", label: "committed seq" },
        { name: "next-sequence", label: "next seq" },
      ],
      tables,
      { id: "ingest" },
    );
  });
}

const AUDIT_PAGE = 100;

/** What the outcome filter's choices ask the API for. */
const OUTCOMES = [
  ["", "any outcome", {}],
  ["allow", "allowed", { decision: "allow" }],
  ["deny", "denied", { decision: "deny" }],
  ["2xx", "succeeded (2xx)", { "status-class": "2xx" }],
  ["4xx", "client error (4xx)", { "status-class": "4xx" }],
  ["5xx", "server error (5xx)", { "status-class": "5xx" }],
];

/**
 * A `datetime-local` value as milliseconds since the epoch, read in the browser's time zone,
 * or null when empty. With `end`, the last millisecond the value names (a minute when it has
 * no seconds), so that "to 10:30" includes 10:30:45.
 */
function localMs(value, end) {
  if (!value) return null;
  const ms = new Date(value).getTime();
  if (isNaN(ms)) throw new Error(`${value} is not a date and time`);
  if (!end) return ms;
  const precision = value.length <= 16 ? 60_000 : value.includes(".") ? 1 : 1_000;
  return ms + precision - 1;
}

/** The browser's offset from UTC, e.g. `UTC+01:00`, for the time inputs' labels. */
function zoneName() {
  const offset = -new Date().getTimezoneOffset();
  const sign = offset < 0 ? "-" : "+";
  const abs = Math.abs(offset);
  return `UTC${sign}${String(Math.floor(abs / 60)).padStart(2, "0")}:${String(abs % 60).padStart(2, "0")}`;
}

/** A record's details: the JSON object it carries, or null when it carries none or not JSON. */
function parsedDetails(record) {
  try {
    const value = JSON.parse(record.details || "");
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** Every field of a record, its details as JSON, and a SQL record's statement as written. */
function auditDetail(record, close) {
  const details = parsedDetails(record);
  const statement = details && typeof details.statement === "string" ? details.statement : null;
  const rest = details ? Object.fromEntries(Object.entries(details).filter(([k]) => k !== "statement" || statement === null)) : null;
  const heading = h("h2", { tabindex: "-1", id: "audit-detail-title" }, `Record ${record.seq}`);
  const panel = h(
    "section",
    { id: "audit-detail", class: "detail", "aria-labelledby": "audit-detail-title", "data-seq": String(record.seq) },
    h("div", { class: "row" }, heading, h("button", { type: "button", id: "audit-detail-close", onclick: close }, "Close")),
    facts([
      ["seq", record.seq],
      ["at", `${time(record["at-ms"])} (${record["at-ms"]} ms)`],
      ["principal", record.principal],
      ["action", record.action],
      ["resource", record.resource],
      ["decision", record.decision],
      ["status", record.status],
      ["client", record.client],
      ["request id", record["request-id"]],
      ["previous hash", h("span", { class: "mono" }, record["prev-hash"])],
      ["hash", h("span", { class: "mono" }, record.hash)],
    ]),
    statement !== null ? [h("h3", {}, "Statement"), h("pre", { id: "audit-statement", class: "mono" }, statement)] : null,
    h("h3", {}, statement !== null ? "Other details" : "Details"),
    details === null
      ? record.details
        ? h("pre", { id: "audit-details", class: "mono" }, record.details)
        : h("p", { class: "muted", id: "audit-details" }, "None.")
      : Object.keys(rest).length
        ? h("pre", { id: "audit-details", class: "mono" }, JSON.stringify(rest, null, 2))
        : h("p", { class: "muted", id: "audit-details" }, "None."),
  );
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape") close();
  });
  return { panel, focus: () => heading.focus() };
}

export function auditPage() {
  const zone = zoneName();
  const input = (id, attrs) => h("input", { id, ...attrs });
  const filters = {
    from: input("audit-from", { type: "datetime-local", step: "1" }),
    to: input("audit-to", { type: "datetime-local", step: "1" }),
    principal: input("audit-principal", { placeholder: "principal", list: "audit-principals" }),
    action: input("audit-action", { placeholder: "action, e.g. POST /api/v1/grants", list: "audit-actions", size: 34 }),
    outcome: h("select", { id: "audit-outcome" }, OUTCOMES.map(([value, label]) => h("option", { value }, label))),
  };
  const principals = h("datalist", { id: "audit-principals" });
  const actions = h("datalist", { id: "audit-actions" });
  const results = h("div", { id: "audit-results" });
  const detail = h("div", { id: "audit-detail-slot" });
  // Pages newest first: `before` is where the shown page starts (null: the newest), and
  // `newer` the starts of the pages before it, for going back.
  let before = null;
  let newer = [];
  let rows = [];
  let selected = null;
  // Counts finished loads (on the results' data-loads), so that a test knows new results are in.
  let loads = 0;
  // The latest load asked for: an earlier one answering late shows nothing.
  let asked = 0;

  const close = () => {
    const seq = selected;
    selected = null;
    detail.replaceChildren();
    for (const tr of rows) {
      tr.classList.remove("selected");
      tr.removeAttribute("aria-current");
    }
    const row = rows.find((tr) => tr.dataset.seq === String(seq));
    if (row) row.focus();
  };
  const open = (record, tr) => {
    selected = record.seq;
    for (const other of rows) {
      other.classList.toggle("selected", other === tr);
      if (other === tr) other.setAttribute("aria-current", "true");
      else other.removeAttribute("aria-current");
    }
    const { panel, focus } = auditDetail(record, close);
    detail.replaceChildren(panel);
    focus();
  };

  const query = () => {
    const q = new URLSearchParams({ order: "desc", limit: String(AUDIT_PAGE) });
    if (before !== null) q.set("before-seq", String(before));
    const since = localMs(filters.from.value, false);
    const until = localMs(filters.to.value, true);
    if (since !== null) q.set("since-ms", String(since));
    if (until !== null) q.set("until-ms", String(until));
    for (const key of ["principal", "action"]) {
      if (filters[key].value.trim()) q.set(key, filters[key].value.trim());
    }
    const outcome = OUTCOMES.find(([value]) => value === filters.outcome.value);
    for (const [key, value] of Object.entries(outcome ? outcome[2] : {})) q.set(key, value);
    return q;
  };

  const load = async () => {
    const mine = ++asked;
    detail.replaceChildren();
    selected = null;
    try {
      const answer = await api("GET", `/api/v1/audit?${query()}`);
      if (mine !== asked) return;
      const records = answer.records || [];
      const next = answer["next-before-seq"];
      principals.replaceChildren(...[...new Set(records.map((r) => r.principal))].sort().map((p) => h("option", { value: p })));
      actions.replaceChildren(...[...new Set(records.map((r) => r.action))].sort().map((a) => h("option", { value: a })));
      const table = dataTable(
        [
          "seq",
          { name: "at", render: (r) => h("span", { class: "nowrap" }, time(r["at-ms"])) },
          "principal",
          "action",
          "resource",
          { name: "decision", render: (r) => h("span", { class: `badge ${r.decision === "deny" ? "bad" : ""}` }, r.decision) },
          { name: "status", render: (r) => h("span", { class: `badge ${r.status >= 500 ? "bad" : ""}` }, String(r.status)) },
          { name: "statement", render: (r) => statementPreview(r) },
        ],
        records,
        { id: "audit", "aria-label": "audit records, newest first; Enter shows a record" },
        (r) => ({
          tabindex: "0",
          class: "pick",
          "data-seq": String(r.seq),
          onclick: (e) => open(r, e.currentTarget),
          onkeydown: (e) => {
            if (e.key === "Enter" || e.key === " ") {
              e.preventDefault();
              open(r, e.currentTarget);
            }
          },
        }),
      );
      rows = [...table.querySelectorAll("tbody tr")];
      const paging = h(
        "div",
        { class: "row" },
        newer.length
          ? h("button", { type: "button", id: "audit-newest", onclick: () => ((before = null), (newer = []), load()) }, "Newest")
          : null,
        newer.length ? h("button", { type: "button", id: "audit-newer", onclick: () => ((before = newer.pop()), load()) }, "Newer") : null,
        records.length === AUDIT_PAGE && next
          ? h("button", { type: "button", id: "audit-older", onclick: () => (newer.push(before), (before = next), load()) }, "Older")
          : null,
        h("span", { class: "muted", id: "audit-summary" }, records.length ? `records ${records[0].seq} to ${records[records.length - 1].seq}` : "No records match."),
      );
      results.replaceChildren(paging, records.length ? table : null);
    } catch (e) {
      if (mine !== asked) return;
      results.replaceChildren(errorBox(e));
    }
    results.dataset.loads = String(++loads);
  };
  load();
  return h(
    "div",
    {},
    h("h1", {}, "Audit trail"),
    h("p", { class: "muted" }, "Newest first; every record is chained to the one before it (see docs/governance.md). Times are UTC; pick a row for its details."),
    h(
      "form",
      {
        class: "inline",
        id: "audit-filters",
        onsubmit: (e) => {
          e.preventDefault();
          before = null;
          newer = [];
          load();
        },
      },
      h("div", {}, h("label", { for: "audit-from" }, `from (${zone})`), filters.from),
      h("div", {}, h("label", { for: "audit-to" }, `to (${zone})`), filters.to),
      h("div", {}, h("label", { for: "audit-principal" }, "principal"), filters.principal),
      h("div", {}, h("label", { for: "audit-action" }, "action"), filters.action),
      h("div", {}, h("label", { for: "audit-outcome" }, "outcome"), filters.outcome),
      h("button", { type: "submit", id: "audit-filter" }, "Filter"),
      principals,
      actions,
    ),
    results,
    detail,
  );
}

/** A SQL record's statement, cut to one short line for the table. */
function statementPreview(record) {
  const details = parsedDetails(record);
  if (!details || typeof details.statement !== "string") return "";
  const line = details.statement.replace(/\s+/g, " ").trim();
  return h("span", { class: "mono", title: details.statement }, line.length > 40 ? `${line.slice(0, 39)}…` : line);
}
