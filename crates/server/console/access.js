// Roles and grants: who holds which privilege on what, and granting and revoking — through
// /api/v1/roles and /api/v1/grants, so only a holder of manage-grants gets anywhere.

import { api } from "./api.js";
import { dataTable, errorBox, h } from "./ui.js";

const PRIVILEGES = [
  "read-data", "write-data", "read-metadata", "list-tables", "create-table", "drop-table",
  "list-views", "create-view", "drop-view", "list-namespaces", "create-namespace",
  "update-namespace", "drop-namespace", "manage-maintenance", "manage-pipelines",
  "read-schemas", "manage-grants", "manage-warehouses", "read-audit",
];

function securableText(on) {
  if (!on) return "";
  switch (on.type) {
    case "server":
      return "server";
    case "warehouse":
      return `warehouse ${on.warehouse}`;
    case "namespace":
      return `namespace ${on.warehouse}.${on.namespace.join(".")}`;
    default:
      return `${on.type} ${on.warehouse}.${on.namespace.join(".")}.${on.name}`;
  }
}

/** The securable the form names, as the API takes it. */
function securableFrom(type, warehouse, namespace, name) {
  if (type === "server") return { type };
  if (type === "warehouse") return { type, warehouse };
  const levels = namespace.split(".").map((s) => s.trim()).filter(Boolean);
  if (type === "namespace") return { type, warehouse, namespace: levels };
  return { type, warehouse, namespace: levels, name };
}

export async function accessPage(ctx) {
  let roles;
  try {
    roles = (await api("GET", "/api/v1/roles")).roles;
  } catch (e) {
    return h("div", {}, h("h1", {}, "Access"), errorBox(e));
  }
  const message = h("div", { id: "access-message" });
  const grantsView = h("div", { id: "role-grants" });
  const done = (text) => message.replaceChildren(h("p", { class: "notice" }, text));
  const failed = (e) => message.replaceChildren(errorBox(e));

  const showGrants = async (role) => {
    if (!role) return grantsView.replaceChildren();
    try {
      const { grants } = await api("GET", `/api/v1/roles/${encodeURIComponent(role)}/grants`);
      grantsView.replaceChildren(
        h("h2", {}, `Grants of ${role}`),
        grants.length
          ? dataTable(
              [
                "privilege",
                { name: "on", render: (g) => securableText(g.on) || `${g["securable-kind"]} ${g["securable-id"]}` },
                {
                  name: "",
                  render: (g) =>
                    g.on
                      ? h("button", { type: "button", class: "danger revoke", onclick: () => change("revoke", role, g.privilege, g.on, g["securable-id"]) }, "Revoke")
                      : "",
                },
              ],
              grants,
              { id: "grants" },
            )
          : h("p", { class: "muted" }, "No grants."),
      );
    } catch (e) {
      grantsView.replaceChildren(errorBox(e));
    }
  };

  // A revoke from a listed grant names the securable's id too, so a table renamed or replaced
  // since the list was read is refused (409) instead of revoking on another.
  const change = async (verb, role, privilege, on, securableId) => {
    try {
      const body = { role, privilege, on };
      if (securableId) body["securable-id"] = securableId;
      await api("POST", verb === "grant" ? "/api/v1/grants" : "/api/v1/grants/revoke", body);
      done(`${verb === "grant" ? "Granted" : "Revoked"} ${privilege} on ${securableText(on)} ${verb === "grant" ? "to" : "from"} ${role}.`);
      roleSelect.value = role;
      await showGrants(role);
    } catch (e) {
      failed(e);
    }
  };

  const roleSelect = h("select", { id: "grant-role", onchange: (e) => showGrants(e.target.value) }, roles.map((r) => h("option", { value: r }, r)));
  const privilege = h("select", { id: "grant-privilege" }, PRIVILEGES.map((p) => h("option", { value: p }, p)));
  const type = h("select", { id: "grant-type" }, ["namespace", "table", "view", "warehouse", "server"].map((t) => h("option", { value: t }, t)));
  const warehouse = h("input", { id: "grant-warehouse", value: ctx.warehouse });
  const namespace = h("input", { id: "grant-namespace", placeholder: "a.b" });
  const name = h("input", { id: "grant-name", placeholder: "table or view" });
  const submit = (verb) => (e) => {
    e.preventDefault();
    change(verb, roleSelect.value, privilege.value, securableFrom(type.value, warehouse.value.trim(), namespace.value, name.value.trim()));
  };

  const newRole = h("input", { id: "new-role", placeholder: "role name" });
  const member = h("input", { id: "new-member", placeholder: "principal name" });
  const field = (label, input) => h("div", {}, h("label", {}, label), input);

  if (roles.length) showGrants(roles[0]);
  return h(
    "div",
    {},
    h("h1", {}, "Access"),
    message,
    h(
      "form",
      { class: "inline", id: "grant-form", onsubmit: submit("grant") },
      field("Role", roleSelect),
      field("Privilege", privilege),
      field("On", type),
      field("Warehouse", warehouse),
      field("Namespace", namespace),
      field("Name", name),
      h("button", { type: "submit", class: "primary", id: "grant" }, "Grant"),
      h("button", { type: "button", id: "revoke", onclick: submit("revoke") }, "Revoke"),
    ),
    grantsView,
    h("h2", {}, "Roles"),
    h(
      "form",
      {
        class: "inline",
        onsubmit: async (e) => {
          e.preventDefault();
          try {
            await api("POST", "/api/v1/roles", { name: newRole.value.trim() });
            done(`Created role ${newRole.value.trim()}.`);
            ctx.render();
          } catch (err) {
            failed(err);
          }
        },
      },
      field("New role", newRole),
      h("button", { type: "submit", id: "create-role" }, "Create role"),
    ),
    h(
      "form",
      {
        class: "inline",
        onsubmit: async (e) => {
          e.preventDefault();
          try {
            await api("POST", `/api/v1/roles/${encodeURIComponent(roleSelect.value)}/members`, { principal: member.value.trim() });
            done(`Made ${member.value.trim()} a member of ${roleSelect.value}.`);
          } catch (err) {
            failed(err);
          }
        },
      },
      field("Add principal to the selected role", member),
      h("button", { type: "submit", id: "add-member" }, "Add member"),
    ),
  );
}
