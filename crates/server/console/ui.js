// Building the page: elements from data (always as text, never as markup), tables, charts.

/** An element; children are nodes or values shown as text. `on…` attributes add listeners. */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

const SVG = "http://www.w3.org/2000/svg";

/** An SVG element, as `h` makes HTML ones. */
export function svg(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.setAttribute("class", value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function errorBox(error) {
  const message = error && error.message ? error.message : String(error);
  return h("div", { class: "error", role: "alert" }, message);
}

export function time(ms) {
  if (ms === undefined || ms === null) return "";
  const d = new Date(Number(ms));
  return isNaN(d) ? String(ms) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

export function text(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/**
 * A table of rows (objects). `columns` lists names, or objects {name, label, render} whose
 * render(row) answers a node or a value. `rowAttrs(row)`, if given, answers each row's
 * attributes (as `h` takes them).
 */
export function dataTable(columns, rows, attrs = {}, rowAttrs = null) {
  const cols = columns.map((c) => (typeof c === "string" ? { name: c } : c));
  return h(
    "div",
    { class: "scroll" },
    h(
      "table",
      { class: "data", ...attrs },
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c.label || c.name)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h(
            "tr",
            rowAttrs ? rowAttrs(row) : {},
            cols.map((c) => {
              const value = c.render ? c.render(row) : row[c.name];
              const numeric = typeof value === "number";
              return h("td", { class: numeric ? "num" : null }, value instanceof Node ? value : text(value));
            }),
          ),
        ),
      ),
    ),
  );
}

/** `<dl>` of label, value pairs. */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(([, v]) => v !== undefined && v !== null).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : text(v))]),
  );
}

/** Tabs as links: `[name, label]` pairs, the active one marked; href(name) makes each link. */
export function tabs(items, active, href) {
  return h(
    "div",
    { class: "tabs", role: "tablist" },
    items.map(([name, label]) =>
      h("a", { href: href(name), class: name === active ? "active" : null, role: "tab", "data-tab": name }, label),
    ),
  );
}

const NUMERIC = /^(U?Int|Float|Decimal)/;

/**
 * A bar chart of a result: the first numeric column against the first other column (or the
 * row number), at most 40 bars. None when the result has no numeric column.
 */
export function barChart(columns, rows) {
  const value = columns.find((c) => NUMERIC.test(c.type));
  if (!value || rows.length === 0) return null;
  const label = columns.find((c) => c !== value);
  const shown = rows.slice(0, 40);
  const numbers = shown.map((r) => Number(r[value.name]) || 0);
  const max = Math.max(...numbers.map(Math.abs), 1);
  const barHeight = 18;
  const width = 640;
  const left = 160;
  const height = shown.length * (barHeight + 4) + 24;
  return svg(
    "svg",
    { class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${value.name} by ${label ? label.name : "row"}` },
    svg("text", { x: left, y: 12 }, `${value.name}${label ? ` by ${label.name}` : ""}`),
    shown.map((row, i) => {
      const y = 20 + i * (barHeight + 4);
      const w = Math.max(1, (Math.abs(numbers[i]) / max) * (width - left - 80));
      const name = label ? text(row[label.name]) : String(i + 1);
      return svg(
        "g",
        {},
        svg("text", { x: left - 6, y: y + 13, "text-anchor": "end" }, name.length > 24 ? `${name.slice(0, 23)}…` : name),
        svg("rect", { class: "bar", x: left, y, width: w, height: barHeight }, svg("title", {}, `${name}: ${numbers[i]}`)),
        svg("text", { x: left + w + 4, y: y + 13 }, String(numbers[i])),
      );
    }),
  );
}

/** Snapshots on a time line: one dot per snapshot, colored by operation. */
export function timeline(snapshots) {
  if (!snapshots.length) return h("p", { class: "muted" }, "No snapshots yet.");
  const width = 760;
  const height = 70;
  const times = snapshots.map((s) => Number(s["timestamp-ms"]));
  const lo = Math.min(...times);
  const hi = Math.max(...times);
  const x = (t) => 20 + (hi === lo ? (width - 40) / 2 : ((t - lo) / (hi - lo)) * (width - 40));
  return svg(
    "svg",
    { class: "timeline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "snapshot timeline" },
    svg("line", { class: "axis", x1: 20, x2: width - 20, y1: 30, y2: 30, stroke: "#d9dee5" }),
    snapshots.map((s) => {
      const op = (s.summary && s.summary.operation) || "append";
      return svg(
        "circle",
        { class: `snapshot op-${op}`, cx: x(Number(s["timestamp-ms"])), cy: 30, r: 6, "data-snapshot": String(s["snapshot-id"]) },
        svg("title", {}, `${op} ${s["snapshot-id"]} at ${time(s["timestamp-ms"])}`),
      );
    }),
    svg("text", { x: 20, y: 60 }, time(lo)),
    svg("text", { x: width - 20, y: 60, "text-anchor": "end" }, time(hi)),
  );
}
