// The console's frame: sign-in, the header with its warehouse picker, and hash routes.
//
// Routes: #/catalog[/<warehouse>/<namespace>], #/table/<warehouse>/<namespace>/<table>[/<tab>],
// #/view/<warehouse>/<namespace>/<view>, #/sql, #/pipelines, #/jobs, #/ingest, #/audit,
// #/access. A namespace travels as its levels joined by U+001F, URI-encoded.

import { api, finishOidc, session, signInWithCredentials, signOut, startOidc } from "./api.js";
import { h, errorBox } from "./ui.js";
import { catalogPage, tablePage, viewPage } from "./catalog.js";
import { sqlPage } from "./sql.js";
import { auditPage, ingestPage, jobsPage, pipelinesPage } from "./operations.js";
import { accessPage } from "./access.js";

const PAGES = [
  ["catalog", "Catalog"],
  ["sql", "SQL"],
  ["pipelines", "Pipelines"],
  ["jobs", "Jobs"],
  ["ingest", "Ingest"],
  ["audit", "Audit"],
  ["access", "Access"],
];

const state = { config: { oidc: null }, me: null, warehouses: null, signInError: null };
let renders = 0;

/** `#/a/b/c` from parts, each encoded. */
export function link(...parts) {
  return `#/${parts.map((p) => encodeURIComponent(p)).join("/")}`;
}

export function nsParam(levels) {
  return levels.join("\u001f");
}

function currentWarehouse() {
  const chosen = sessionStorage.getItem("floe.console.warehouse");
  if (chosen && (!state.warehouses || state.warehouses.length === 0 || state.warehouses.includes(chosen))) return chosen;
  return state.warehouses && state.warehouses.length ? state.warehouses[0] : chosen || "";
}

function signInPage() {
  const id = h("input", { id: "client-id", name: "client-id", autocomplete: "username", required: true });
  const secret = h("input", { id: "client-secret", name: "client-secret", type: "password", autocomplete: "current-password", required: true });
  const problem = h("div", {}, state.signInError ? errorBox(state.signInError) : null);
  const submit = async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    try {
      await signInWithCredentials(id.value.trim(), secret.value);
      state.signInError = null;
      location.hash = location.hash || "#/catalog";
      await render();
    } catch (e) {
      problem.replaceChildren(errorBox(e));
    }
  };
  const oidc = state.config.oidc;
  return h(
    "div",
    { class: "signin" },
    h("h1", {}, "Sign in to Floe"),
    h(
      "form",
      { onsubmit: submit, id: "signin-form" },
      h("label", { for: "client-id" }, "Client id"),
      id,
      h("label", { for: "client-secret" }, "Client secret"),
      secret,
      h(
        "div",
        { class: "actions" },
        h("button", { class: "primary", type: "submit", id: "signin" }, "Sign in"),
        oidc
          ? h(
              "button",
              {
                type: "button",
                id: "signin-oidc",
                onclick: () => startOidc(oidc).catch((e) => problem.replaceChildren(errorBox(e))),
              },
              `Sign in with ${oidc.issuer}`,
            )
          : null,
      ),
    ),
    problem,
  );
}

function header(page, warehouse) {
  const picker =
    state.warehouses && state.warehouses.length
      ? h(
          "select",
          {
            id: "warehouse",
            "aria-label": "warehouse",
            onchange: (e) => {
              sessionStorage.setItem("floe.console.warehouse", e.target.value);
              location.hash = page === "sql" ? "#/sql" : "#/catalog";
              render();
            },
          },
          state.warehouses.map((w) => h("option", { value: w, selected: w === warehouse }, w)),
        )
      : h("input", {
          id: "warehouse",
          "aria-label": "warehouse",
          placeholder: "warehouse",
          value: warehouse,
          onchange: (e) => {
            sessionStorage.setItem("floe.console.warehouse", e.target.value.trim());
            render();
          },
        });
  return h(
    "header",
    { class: "top" },
    h("span", { class: "brand" }, "Floe"),
    h(
      "nav",
      {},
      PAGES.map(([name, label]) => h("a", { href: `#/${name}`, class: name === page ? "active" : null, id: `nav-${name}` }, label)),
    ),
    picker,
    h("span", { class: "who", id: "whoami" }, state.me ? state.me.name : ""),
    h(
      "button",
      {
        id: "signout",
        onclick: () => {
          signOut();
          state.me = null;
          state.warehouses = null;
          render();
        },
      },
      "Sign out",
    ),
  );
}

async function loadIdentity() {
  state.me = await api("GET", "/api/v1/whoami");
  const listed = await api("GET", "/api/v1/warehouses");
  state.warehouses = listed.warehouses.map((w) => w.name);
}

export async function render() {
  const run = ++renders;
  const root = document.getElementById("app");
  if (!session()) {
    root.replaceChildren(signInPage());
    return;
  }
  if (!state.me) {
    try {
      await loadIdentity();
    } catch (e) {
      if (!session()) return render();
      if (run === renders) root.replaceChildren(h("main", {}, errorBox(e)));
      return;
    }
  }
  // A later render (another hash change) owns the page now.
  if (run !== renders) return;
  const [first, ...args] = location.hash
    .replace(/^#\/?/, "")
    .split("/")
    .filter((p, i) => p !== "" || i === 0)
    .map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        return p;
      }
    });
  const page = first || "catalog";
  const warehouse = currentWarehouse();
  const body = h("main", { id: "page", "data-page": page }, h("p", { class: "muted" }, "Loading…"));
  root.replaceChildren(header(page === "table" || page === "view" ? "catalog" : page, warehouse), body);
  const ctx = { warehouse, me: state.me, link, nsParam, render };
  let content;
  try {
    content = await route(page, args, ctx);
  } catch (e) {
    content = errorBox(e);
  }
  if (run === renders) {
    body.replaceChildren(content);
    body.setAttribute("data-ready", "true");
  }
}

function route(page, args, ctx) {
  switch (page) {
    case "catalog":
      return catalogPage(ctx, args[0] || ctx.warehouse, args[1] ? args[1].split("\u001f") : []);
    case "table":
      return tablePage(ctx, args[0], args[1].split("\u001f"), args[2], args[3] || "schema");
    case "view":
      return viewPage(ctx, args[0], args[1].split("\u001f"), args[2]);
    case "sql":
      return sqlPage(ctx);
    case "pipelines":
      return pipelinesPage(ctx);
    case "jobs":
      return jobsPage(ctx);
    case "ingest":
      return ingestPage(ctx);
    case "audit":
      return auditPage(ctx);
    case "access":
      return accessPage(ctx);
    default:
      return h("p", {}, `No page named ${page}.`);
  }
}

async function main() {
  try {
    state.config = await (await fetch("/console/config.json", { cache: "no-store" })).json();
  } catch {
    state.config = { oidc: null };
  }
  const params = new URLSearchParams(location.search);
  if (params.has("code") || params.has("error")) {
    try {
      await finishOidc(state.config.oidc, params);
    } catch (e) {
      state.signInError = e;
    }
  }
  window.addEventListener("hashchange", render);
  window.addEventListener("floe-signed-out", () => {
    state.me = null;
    state.warehouses = null;
    state.signInError = new Error("The session ended; sign in again.");
    render();
  });
  await render();
}

main();
