// Browsing a warehouse: namespaces, tables (schema, partitioning, snapshots, files,
// properties) and views, all read through the Iceberg REST catalog with the session's token.

import { api, catalogPath, quoteIdent, sql } from "./api.js";
import { bytes, dataTable, errorBox, facts, h, tabs, text, time, timeline } from "./ui.js";

const MAX_LISTED = 2000;

/** Every page of a REST listing (up to 2,000 entries), and whether it stopped short. */
async function listAll(path, key) {
  const out = [];
  let token = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const url = token ? `${path}${sep}pageToken=${encodeURIComponent(token)}` : path;
    const page = await api("GET", url);
    out.push(...(page[key] || []));
    token = page["next-page-token"] || null;
  } while (token && out.length < MAX_LISTED);
  return { items: out, truncated: Boolean(token) };
}

function breadcrumb(ctx, warehouse, levels, last) {
  const parts = [h("a", { href: ctx.link("catalog", warehouse) }, warehouse)];
  levels.forEach((level, i) => {
    parts.push(" / ", h("a", { href: ctx.link("catalog", warehouse, ctx.nsParam(levels.slice(0, i + 1))) }, level));
  });
  if (last) parts.push(" / ", h("strong", {}, last));
  return h("div", { class: "breadcrumb muted" }, parts);
}

async function namespaceList(ctx, warehouse, parent) {
  const path = await catalogPath(warehouse, null, parent.length ? `?parent=${encodeURIComponent(parent.join("\u001f"))}` : "");
  const { items, truncated } = await listAll(path, "namespaces");
  return {
    truncated,
    links: items.map((levels) => h("li", {}, h("a", { href: ctx.link("catalog", warehouse, ctx.nsParam(levels)), class: "namespace" }, levels[levels.length - 1]))),
  };
}

export async function catalogPage(ctx, warehouse, levels) {
  if (!warehouse) return h("p", {}, "Choose a warehouse above.");
  let tree;
  try {
    const top = await namespaceList(ctx, warehouse, []);
    tree = h("div", { class: "tree", id: "tree" }, h("h2", {}, "Namespaces"), h("ul", {}, top.links), top.truncated ? h("p", { class: "muted" }, "First 2,000 shown.") : null);
  } catch (e) {
    tree = h("div", { class: "tree" }, errorBox(e));
  }
  const detail = levels.length ? await namespaceDetail(ctx, warehouse, levels) : h("div", {}, h("h1", {}, `Warehouse ${warehouse}`), h("p", { class: "muted" }, "Pick a namespace."));
  return h("div", { class: "layout" }, tree, h("section", {}, detail));
}

async function namespaceDetail(ctx, warehouse, levels) {
  const out = [breadcrumb(ctx, warehouse, levels.slice(0, -1), levels[levels.length - 1]), h("h1", {}, `Namespace ${levels.join(".")}`)];
  try {
    const ns = await api("GET", await catalogPath(warehouse, levels));
    const props = Object.entries(ns.properties || {}).map(([key, value]) => ({ key, value }));
    out.push(h("h2", {}, "Properties"), dataTable(["key", "value"], props));
  } catch (e) {
    out.push(errorBox(e));
    return h("div", {}, out);
  }
  const sections = [
    ["Namespaces", async () => (await namespaceList(ctx, warehouse, levels)).links],
    ["Tables", () => tabularLinks(ctx, warehouse, levels, "tables", "table")],
    ["Views", () => tabularLinks(ctx, warehouse, levels, "views", "view")],
  ];
  for (const [title, load] of sections) {
    out.push(h("h2", {}, title));
    try {
      const items = await load();
      out.push(items.length ? h("ul", { id: `list-${title.toLowerCase()}` }, items) : h("p", { class: "muted" }, "None."));
    } catch (e) {
      out.push(errorBox(e));
    }
  }
  return h("div", {}, out);
}

async function tabularLinks(ctx, warehouse, levels, collection, page) {
  const { items } = await listAll(await catalogPath(warehouse, levels, `/${collection}`), "identifiers");
  return items.map((id) => h("li", {}, h("a", { href: ctx.link(page, warehouse, ctx.nsParam(levels), id.name), class: page }, id.name)));
}

/** An Iceberg type as one line: `struct<a: int, b: list<string>>`. */
function typeText(type) {
  if (typeof type === "string") return type;
  if (!type || typeof type !== "object") return text(type);
  switch (type.type) {
    case "struct":
      return `struct<${(type.fields || []).map((f) => `${f.name}: ${typeText(f.type)}`).join(", ")}>`;
    case "list":
      return `list<${typeText(type.element)}>`;
    case "map":
      return `map<${typeText(type.key)}, ${typeText(type.value)}>`;
    default:
      return text(type);
  }
}

const TABLE_TABS = [
  ["schema", "Schema"],
  ["partitioning", "Partitioning"],
  ["snapshots", "Snapshots"],
  ["files", "Files"],
  ["properties", "Properties"],
];

export async function tablePage(ctx, warehouse, levels, name, tab) {
  const loaded = await api("GET", await catalogPath(warehouse, levels, `/tables/${encodeURIComponent(name)}`));
  const m = loaded.metadata;
  const snapshots = m.snapshots || [];
  const current = snapshots.find((s) => String(s["snapshot-id"]) === String(m["current-snapshot-id"]));
  const head = [
    breadcrumb(ctx, warehouse, levels, name),
    h("h1", {}, `Table ${levels.join(".")}.${name}`),
    facts([
      ["Format version", m["format-version"]],
      ["Table uuid", m["table-uuid"]],
      ["Location", m.location],
      ["Current snapshot", current ? `${current["snapshot-id"]} (${time(current["timestamp-ms"])})` : "none"],
      ["Records", current && current.summary ? current.summary["total-records"] : undefined],
      ["Last updated", time(m["last-updated-ms"])],
    ]),
    tabs(TABLE_TABS, tab, (t) => ctx.link("table", warehouse, ctx.nsParam(levels), name, t)),
  ];
  let body;
  switch (tab) {
    case "partitioning":
      body = partitioning(m);
      break;
    case "snapshots":
      body = snapshotsTab(m);
      break;
    case "files":
      body = await filesTab(warehouse, levels, name, m.location);
      break;
    case "properties":
      body = h(
        "div",
        {},
        facts([["Metadata file", loaded["metadata-location"]]]),
        dataTable(["key", "value"], Object.entries(m.properties || {}).map(([key, value]) => ({ key, value }))),
      );
      break;
    default:
      body = schemaTable(m.schemas || [], m["current-schema-id"]);
  }
  return h("div", { id: "table-detail", "data-tab": tab }, head, body);
}

function schemaTable(schemas, id) {
  const schema = schemas.find((s) => s["schema-id"] === id) || schemas[schemas.length - 1];
  if (!schema) return h("p", { class: "muted" }, "No schema.");
  return h(
    "div",
    {},
    h("p", { class: "muted" }, `Schema ${schema["schema-id"]}${schema["identifier-field-ids"] && schema["identifier-field-ids"].length ? `, identifier fields ${schema["identifier-field-ids"].join(", ")}` : ""}`),
    dataTable(
      [
        { name: "id" },
        { name: "name" },
        { name: "type", render: (f) => typeText(f.type) },
        { name: "required", render: (f) => (f.required ? "yes" : "no") },
        { name: "doc" },
      ],
      schema.fields || [],
      { id: "schema-fields" },
    ),
  );
}

function fieldName(m, sourceId) {
  for (const schema of m.schemas || []) {
    const f = (schema.fields || []).find((x) => x.id === sourceId);
    if (f) return f.name;
  }
  return `field ${sourceId}`;
}

function partitioning(m) {
  const spec = (m["partition-specs"] || []).find((s) => s["spec-id"] === m["default-spec-id"]);
  const order = (m["sort-orders"] || []).find((s) => s["order-id"] === m["default-sort-order-id"]);
  const specFields = (spec && spec.fields) || [];
  const orderFields = (order && order.fields) || [];
  return h(
    "div",
    {},
    h("h2", {}, `Partition spec ${spec ? spec["spec-id"] : ""}`),
    specFields.length
      ? dataTable(["name", { name: "source", render: (f) => fieldName(m, f["source-id"]) }, "transform", "field-id"], specFields, { id: "partition-fields" })
      : h("p", { class: "muted" }, "Unpartitioned."),
    h("h2", {}, "Sort order"),
    orderFields.length
      ? dataTable([{ name: "source", render: (f) => fieldName(m, f["source-id"]) }, "transform", "direction", "null-order"], orderFields)
      : h("p", { class: "muted" }, "Unsorted."),
  );
}

function snapshotsTab(m) {
  const snapshots = [...(m.snapshots || [])].sort((a, b) => Number(a["timestamp-ms"]) - Number(b["timestamp-ms"]));
  const refs = Object.entries(m.refs || {}).map(([name, r]) => ({ name, ...r }));
  const summary = (key) => (s) => (s.summary ? s.summary[key] : "");
  return h(
    "div",
    {},
    timeline(snapshots),
    dataTable(
      [
        { name: "snapshot-id" },
        { name: "time", render: (s) => time(s["timestamp-ms"]) },
        { name: "operation", render: summary("operation") },
        { name: "parent", render: (s) => s["parent-snapshot-id"] },
        { name: "added files", render: summary("added-data-files") },
        { name: "added records", render: summary("added-records") },
        { name: "total records", render: summary("total-records") },
      ],
      [...snapshots].reverse(),
      { id: "snapshots" },
    ),
    h("h2", {}, "Branches and tags"),
    dataTable(["name", "type", "snapshot-id"], refs),
  );
}

const CONTENT = { 0: "data", 1: "position deletes", 2: "equality deletes" };

/**
 * `path` relative to the table's `location` when it lies below it, else null. A path that
 * only looks as if it does (a `.`, `..` or empty segment after the location, however
 * percent-encoded) does not: it is shown in full.
 */
export function relativePath(location, path) {
  const base = String(location || "").replace(/\/+$/, "");
  if (!base || typeof path !== "string" || !path.startsWith(`${base}/`)) return null;
  const rest = path.slice(base.length + 1);
  const segments = rest.split("/");
  const decoded = (segment) => {
    try {
      return decodeURIComponent(segment);
    } catch {
      return segment;
    }
  };
  if (segments.some((segment) => ["", ".", ".."].includes(decoded(segment)))) return null;
  return rest;
}

/** A file's path as the files tab shows it: relative to the table, or in full and marked. */
function pathCell(location, path) {
  const relative = relativePath(location, path);
  if (relative !== null) return h("span", { class: "mono path", title: path, "data-path": path }, relative);
  return h(
    "span",
    { class: "path outside", title: `${path} is not under the table's location ${location}`, "data-path": path },
    h("span", { class: "mono" }, path),
    h("span", { class: "badge outside" }, "outside the table's location"),
  );
}

async function filesTab(warehouse, levels, name, location) {
  // SQL names a nested namespace by joining its levels with dots, so a level holding a dot
  // would name another namespace: list nothing rather than another table's files.
  if (levels.some((level) => level.includes("."))) {
    return h("p", { class: "muted" }, "Files are listed through SQL, which cannot name a namespace level containing a dot.");
  }
  const statement =
    `SELECT content, file_path, file_format, "partition", record_count, file_size_in_bytes ` +
    `FROM ${quoteIdent(levels.join("."))}.${quoteIdent(`${name}$files`)} LIMIT 1000`;
  try {
    const answer = await sql(warehouse, statement);
    return h(
      "div",
      {},
      h(
        "p",
        { class: "muted", id: "files-summary" },
        `${answer.rows.length} live files${answer.rows.length === 1000 ? " (first 1,000)" : ""} in the current snapshot. Paths are relative to the table's location, `,
        h("span", { class: "mono", id: "files-location" }, location),
        "; hover one for its full path.",
      ),
      dataTable(
        [
          { name: "content", render: (r) => CONTENT[r.content] || r.content },
          { name: "file_path", label: "path", render: (r) => pathCell(location, r.file_path) },
          { name: "file_format", label: "format" },
          { name: "partition" },
          { name: "record_count", label: "records" },
          { name: "file_size_in_bytes", label: "size", render: (r) => bytes(r.file_size_in_bytes) },
        ],
        answer.rows,
        { id: "files" },
      ),
    );
  } catch (e) {
    return errorBox(e);
  }
}

export async function viewPage(ctx, warehouse, levels, name) {
  const loaded = await api("GET", await catalogPath(warehouse, levels, `/views/${encodeURIComponent(name)}`));
  const m = loaded.metadata;
  const versions = [...(m.versions || [])].sort((a, b) => b["version-id"] - a["version-id"]);
  const current = versions.find((v) => v["version-id"] === m["current-version-id"]) || versions[0];
  return h(
    "div",
    { id: "view-detail" },
    breadcrumb(ctx, warehouse, levels, name),
    h("h1", {}, `View ${levels.join(".")}.${name}`),
    facts([
      ["View uuid", m["view-uuid"]],
      ["Location", m.location],
      ["Current version", current ? `${current["version-id"]} (${time(current["timestamp-ms"])})` : "none"],
    ]),
    h("h2", {}, "Definition"),
    ((current && current.representations) || []).map((r) => h("div", {}, h("p", { class: "muted" }, `${r.type} (${r.dialect})`), h("pre", { class: "mono" }, r.sql))),
    h("h2", {}, "Schema"),
    schemaTable(m.schemas || [], current ? current["schema-id"] : undefined),
    h("h2", {}, "Versions"),
    dataTable(["version-id", { name: "time", render: (v) => time(v["timestamp-ms"]) }, "schema-id", { name: "summary", render: (v) => text(v.summary) }], versions),
    h("h2", {}, "Properties"),
    dataTable(["key", "value"], Object.entries(m.properties || {}).map(([key, value]) => ({ key, value }))),
  );
}
