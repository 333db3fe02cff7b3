// Running SQL through `/api/v1/sql` (the same engine, limits and grants as every other door):
// results as a table, and as a bar chart when a column is numeric.

import { sql } from "./api.js";
import { barChart, dataTable, errorBox, h } from "./ui.js";

const LAST = "floe.console.sql";

export function sqlPage(ctx) {
  const editor = h(
    "textarea",
    { id: "sql-text", spellcheck: "false", "aria-label": "SQL statement", placeholder: "SELECT … FROM namespace.table LIMIT 100" },
    sessionStorage.getItem(LAST) || "",
  );
  const result = h("div", { id: "sql-result" });
  const button = h("button", { class: "primary", id: "sql-run", type: "submit" }, "Run");
  const run = async (event) => {
    if (event) event.preventDefault();
    const statement = editor.value.trim();
    if (!statement) return;
    sessionStorage.setItem(LAST, statement);
    button.disabled = true;
    result.replaceChildren(h("p", { class: "muted" }, "Running…"));
    const started = performance.now();
    try {
      const answer = await sql(ctx.warehouse, statement);
      result.replaceChildren(resultView(answer, performance.now() - started));
    } catch (e) {
      result.replaceChildren(errorBox(e));
    } finally {
      button.disabled = false;
    }
  };
  editor.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) run(e);
  });
  return h(
    "div",
    {},
    h("h1", {}, "SQL"),
    h("p", { class: "muted" }, `In warehouse ${ctx.warehouse || "(none)"}; tables are namespace.table. Ctrl+Enter runs.`),
    h("form", { onsubmit: run, id: "sql-form" }, editor, h("div", { class: "row" }, button)),
    result,
  );
}

function resultView(answer, elapsedMs) {
  const columns = answer.columns || [];
  const rows = answer.rows || [];
  const chart = barChart(columns, rows);
  const table = dataTable(columns.map((c) => ({ name: c.name, label: `${c.name} (${c.type})` })), rows, { id: "sql-rows" });
  const view = h("div", { id: "sql-view" }, table);
  const show = (which) => () => {
    view.replaceChildren(which === "chart" ? chart : table);
    tableButton.disabled = which === "table";
    chartButton.disabled = which === "chart";
  };
  const tableButton = h("button", { type: "button", id: "show-table", onclick: show("table"), disabled: true }, "Table");
  const chartButton = chart ? h("button", { type: "button", id: "show-chart", onclick: show("chart") }, "Chart") : null;
  const count = answer["row-count"] ?? rows.length;
  return h(
    "div",
    {},
    h(
      "div",
      { class: "row" },
      h("span", { class: "muted", id: "sql-summary" }, `${count} row${count === 1 ? "" : "s"} in ${Math.round(elapsedMs)} ms`),
      tableButton,
      chartButton,
    ),
    view,
  );
}
