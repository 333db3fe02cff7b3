// What runs: stream pipelines with their lag, maintenance jobs, HTTP ingestion, and the
// audit trail. Each list is what the signed-in principal may see; a refusal is shown as such.

import { api } from "./api.js";
import { bytes, dataTable, errorBox, h, text, time } from "./ui.js";

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

export function auditPage() {
  const filters = {
    principal: h("input", { id: "audit-principal", placeholder: "principal" }),
    action: h("input", { id: "audit-action", placeholder: "action, e.g. POST /api/v1/grants" }),
    decision: h("select", { id: "audit-decision" }, h("option", { value: "" }, "any decision"), h("option", { value: "allow" }, "allow"), h("option", { value: "deny" }, "deny")),
  };
  const results = h("div", { id: "audit-results" });
  let after = 0;
  const load = async (fresh) => {
    if (fresh) after = 0;
    const query = new URLSearchParams({ limit: String(AUDIT_PAGE), "after-seq": String(after) });
    for (const [key, input] of Object.entries(filters)) {
      if (input.value.trim()) query.set(key, input.value.trim());
    }
    try {
      const answer = await api("GET", `/api/v1/audit?${query}`);
      const records = answer.records || [];
      after = answer["next-after-seq"] || after;
      const more = records.length === AUDIT_PAGE ? h("button", { type: "button", id: "audit-more", onclick: () => load(false) }, "Next page") : null;
      results.replaceChildren(
        dataTable(
          [
            "seq",
            { name: "at", render: (r) => time(r["at-ms"]) },
            "principal",
            "action",
            "resource",
            { name: "decision", render: (r) => h("span", { class: `badge ${r.decision === "deny" ? "bad" : ""}` }, r.decision) },
            "status",
            "client",
          ],
          records,
          { id: "audit" },
        ),
        more,
      );
    } catch (e) {
      results.replaceChildren(errorBox(e));
    }
  };
  load(true);
  return h(
    "div",
    {},
    h("h1", {}, "Audit trail"),
    h("p", { class: "muted" }, "Oldest first; every record is chained to the one before it (see docs/governance.md)."),
    h(
      "form",
      {
        class: "inline",
        onsubmit: (e) => {
          e.preventDefault();
          load(true);
        },
      },
      filters.principal,
      filters.action,
      filters.decision,
      h("button", { type: "submit" }, "Filter"),
    ),
    results,
  );
}
