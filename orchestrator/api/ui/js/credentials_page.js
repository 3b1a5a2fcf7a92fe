/* Credentials (#/credentials): create, rotate (store new values under the same name),
   change where each may be sent, delete (asked first), and see which stored graphs name
   each. Values are write-only: the API never sends one back, and the form's fields are
   password fields emptied after each save. */
import { call } from "./api.js";
import { enc, errorBox, fmtTime, h, icon, iconButton, toast } from "./dom.js";
import { confirmDialog } from "./dialogs.js";

const splitOrigins = (text) =>
  text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

function valueFields(type, holder) {
  if (!type) return [];
  const field = (name, required) => {
    const secret = type.secret.includes(name);
    const input = h("input", {
      id: `cred-value-${name}`,
      type: secret ? "password" : "text",
      autocomplete: "off",
      required,
      dataset: { value: name },
    });
    return [
      h(
        "label",
        { for: input.id },
        name,
        required ? " *" : " (optional)",
        secret ? h("span", { class: "muted small" }, " secret") : null,
      ),
      input,
    ];
  };
  holder.replaceChildren(
    ...[...type.required.map((n) => field(n, true)), ...type.optional.map((n) => field(n, false))].flat(),
  );
  return holder;
}

/* The create / rotate form; ``existing``: the credential being rotated (name and type fixed). */
async function submitCredential(fields, existing, done) {
  const { name, type, values, origins, err } = fields;
  const vals = Object.fromEntries(
    [...values.querySelectorAll("input")].filter((i) => i.value).map((i) => [i.dataset.value, i.value]),
  );
  try {
    await call("POST", "/credentials", {
      name: name.value.trim(),
      type: type.value,
      values: vals,
      origins: splitOrigins(origins.value),
    });
    for (const i of values.querySelectorAll("input")) i.value = "";
    toast(existing ? `Rotated ${existing.name}` : `Saved ${name.value}`);
    done();
  } catch (ex) {
    err.replaceChildren(errorBox(ex));
  }
}

/* The create / rotate form; ``existing``: the credential being rotated (name and type fixed). */
function credentialForm(types, existing, done) {
  const byType = Object.fromEntries(types.map((t) => [t.type, t]));
  const fields = {
    name: h("input", {
      id: "cred-name",
      value: existing ? existing.name : "",
      required: true,
      readonly: !!existing,
      autocomplete: "off",
    }),
    type: h(
      "select",
      { id: "cred-type", disabled: !!existing },
      types.map((t) => h("option", { value: t.type, selected: existing && existing.type === t.type }, t.type)),
    ),
    values: h("div", { class: "cred-values" }),
    origins: h(
      "textarea",
      { id: "cred-origins", rows: 2, placeholder: "https://api.example.com, https://*.example.com" },
      existing ? existing.origins.join("\n") : "",
    ),
    err: h("div", { "aria-live": "assertive" }),
  };
  fields.type.addEventListener("change", () => valueFields(byType[fields.type.value], fields.values));
  valueFields(byType[existing ? existing.type : types[0].type], fields.values);
  const submit = (e) => (e.preventDefault(), submitCredential(fields, existing, done));
  const title = existing ? `Rotate ${existing.name}` : "New credential";
  const button = h(
    "button",
    { type: "submit", class: "primary", id: "cred-save" },
    existing ? "Store the new values" : "Save credential",
  );
  const labelled = [
    h("label", { for: "cred-name" }, "Name"),
    fields.name,
    h("label", { for: "cred-type" }, "Type"),
    fields.type,
    fields.values,
  ];
  return h(
    "form",
    { class: "card cred-form", id: existing ? "rotate-form" : "credential-form", onsubmit: submit },
    h("h2", {}, title),
    labelled,
    h("label", { for: "cred-origins" }, "May be sent to (origins)"),
    fields.origins,
    fields.err,
    button,
  );
}

function usedBy(uses) {
  if (!uses || !uses.length) return h("span", { class: "muted" }, "not used by a stored graph");
  return h(
    "ul",
    { class: "uses" },
    uses.map((u) =>
      h("li", {}, h("a", { href: `#/graphs/${enc(u.graph_id)}` }, u.graph_name || u.graph_id), ` · ${u.node_name}`),
    ),
  );
}

function credentialRow(c, uses, actions) {
  const cells = [
    h("td", {}, icon("key-round"), " ", c.name),
    h("td", {}, c.type),
    h("td", { class: "mono small" }, c.fields.join(", ")),
    h("td", { class: "small" }, c.origins.join(", ") || h("span", { class: "muted" }, "—")),
    h("td", { class: "used-by" }, usedBy(uses)),
    h("td", {}, fmtTime(c.created_at)),
    h(
      "td",
      { class: "row-actions" },
      iconButton("key-round", "Rotate", { class: "rotate", onclick: () => actions.rotate(c) }),
      iconButton("trash-2", "Delete", { class: "icon-only delete", onclick: () => actions.remove(c) }, false),
    ),
  ];
  return h("tr", { dataset: { credential: c.name } }, cells);
}

export async function credentialsPage(page) {
  const [list, usage, types] = await Promise.all([
    call("GET", "/credentials"),
    call("GET", "/credential-usage"),
    call("GET", "/credential-types"),
  ]);
  const side = h(
    "div",
    { class: "cred-side" },
    credentialForm(types.types, null, () => page.reload()),
  );
  const actions = {
    async remove(c) {
      const uses = usage.usage[c.name] || [];
      const warn = uses.length
        ? ` It is named by ${uses.length} node(s) of stored graphs, which will fail until it exists again.`
        : "";
      if (!(await confirmDialog(`Delete ${c.name}?`, `The credential's values are deleted.${warn}`, "Delete"))) return;
      await call("DELETE", `/credentials/${enc(c.name)}`).catch((err) => toast(err.message, "error"));
      page.reload();
    },
    rotate: (c) => side.replaceChildren(credentialForm(types.types, c, () => page.reload())),
  };
  const head = h(
    "thead",
    {},
    h(
      "tr",
      {},
      ["Name", "Type", "Values", "Origins", "Used by", "Created", ""].map((t) => h("th", { scope: "col" }, t)),
    ),
  );
  const rows = list.credentials.map((c) => credentialRow(c, usage.usage[c.name], actions));
  const empty = h(
    "p",
    { class: "empty" },
    "No credentials yet. Nodes such as HTTP Request and Database Query name one in their Credential parameter.",
  );
  const intro =
    "Secrets nodes use by name. Values are never shown again after they are saved; rotate a credential by storing new values under its name.";
  return [
    h("h1", {}, "Credentials"),
    h("p", { class: "muted" }, intro),
    h(
      "div",
      { class: "cred-layout" },
      h("div", {}, rows.length ? h("table", { class: "list" }, head, h("tbody", {}, rows)) : empty),
      side,
    ),
  ];
}
