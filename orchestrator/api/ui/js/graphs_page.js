/* The graph list (#/graphs): saved graphs and drafts, searchable, each with open,
   duplicate, export and delete (asked first); import (a file or pasted JSON); and the
   gallery of shipped examples, each added to the workspace with one click (its suggested
   run input comes with it). */
import { call } from "./api.js";
import { badge, download, enc, errorBox, fmtTime, h, icon, iconButton, toast } from "./dom.js";
import { confirmDialog, openDialog } from "./dialogs.js";
import { parseInput } from "./json_text.js";

async function duplicate(g) {
  const graph = await call("GET", `/graphs/${enc(g.id)}`);
  const copy = { ...graph, id: undefined, name: `${graph.name || graph.id} (copy)` };
  delete copy.version;
  const saved = await call("POST", "/graphs", copy);
  toast(`Duplicated as ${saved.id}`);
  location.hash = `#/graphs/${enc(saved.id)}`;
}

async function exportGraph(g) {
  const graph = await call("GET", `/graphs/${enc(g.id)}`);
  download(`${g.id}.json`, JSON.stringify(graph, null, 2) + "\n");
}

async function remove(g, reload) {
  const ok = await confirmDialog(
    `Delete ${g.name || g.id}?`,
    g.draft
      ? "The draft is deleted."
      : `All ${g.version} version(s) of graph ${g.id} are deleted. Runs already made are kept until they expire.`,
    "Delete",
  );
  if (!ok) return;
  await call("DELETE", g.draft ? `/graphs/${enc(g.id)}/draft` : `/graphs/${enc(g.id)}`);
  toast(`Deleted ${g.name || g.id}`);
  reload();
}

function row(g, reload) {
  const act = (fn) => () => fn(g, reload).catch((err) => toast(err.message, "error"));
  return h(
    "tr",
    { dataset: { graph: g.id } },
    h("td", {}, h("a", { href: `#/graphs/${enc(g.id)}` }, g.name || g.id), g.draft ? [" ", badge("draft")] : null),
    h("td", { class: "mono" }, g.id),
    h("td", {}, g.draft ? "draft" : `v${g.version}`),
    h("td", {}, fmtTime(g.updated_at)),
    h(
      "td",
      { class: "row-actions" },
      g.draft
        ? null
        : iconButton("copy", "Duplicate", { class: "icon-only duplicate", onclick: act(duplicate) }, false),
      g.draft
        ? null
        : iconButton("download", "Export JSON", { class: "icon-only export", onclick: act(exportGraph) }, false),
      iconButton("trash-2", "Delete", { class: "icon-only delete", onclick: act(remove) }, false),
    ),
  );
}

function importForm(close) {
  const file = h("input", { type: "file", id: "import-file", accept: ".json,application/json" });
  const text = h("textarea", {
    id: "import-text",
    rows: 10,
    spellcheck: "false",
    placeholder: '{"name": "...", "nodes": [...], "edges": [...]}',
  });
  const err = h("div", { id: "import-error", "aria-live": "assertive" });
  file.addEventListener("change", async () => {
    if (file.files[0]) text.value = await file.files[0].text();
  });
  const submit = async (e) => {
    e.preventDefault();
    const parsed = parseInput(text.value);
    if (parsed.error || !parsed.value)
      return err.replaceChildren(
        h("p", { class: "field-error" }, parsed.error || "Paste or choose a graph JSON first."),
      );
    const graph = parsed.value;
    delete graph.version;
    try {
      const saved = await call("POST", "/graphs", graph);
      close();
      location.hash = `#/graphs/${enc(saved.id)}`;
    } catch (ex) {
      err.replaceChildren(errorBox(ex));
    }
  };
  return h(
    "form",
    { class: "import-form", onsubmit: submit },
    h("label", { for: "import-file" }, "A graph JSON file"),
    file,
    h("label", { for: "import-text" }, "or paste its JSON"),
    text,
    err,
    h("button", { type: "submit", class: "primary", id: "import-submit" }, "Import"),
  );
}

function gallery(examples) {
  const add = (ex) => async (e) => {
    e.target.disabled = true;
    try {
      const saved = await call("POST", `/examples/${enc(ex.name)}/import`);
      location.hash = `#/graphs/${enc(saved.id)}`;
    } catch (err) {
      toast(err.message, "error");
      e.target.disabled = false;
    }
  };
  const card = (ex) =>
    h(
      "article",
      { class: "card example", dataset: { example: ex.name } },
      h("h3", {}, ex.title),
      h("p", { class: "muted" }, ex.description),
      h("p", { class: "small mono" }, `input ${JSON.stringify(ex.input)}`),
      ex.note ? h("p", { class: "small muted" }, ex.note) : null,
      h("button", { type: "button", class: "primary add-example", onclick: add(ex) }, icon("plus"), `Add to workspace`),
    );
  if (!examples.length) return null;
  return h(
    "section",
    { class: "gallery", "aria-label": "Examples" },
    h("h2", {}, "Start from an example"),
    h("div", { class: "cards" }, examples.map(card)),
  );
}

function listTable(items, reload) {
  const search = h("input", {
    type: "search",
    id: "graph-search",
    placeholder: "Search by name or id",
    "aria-label": "Search graphs",
  });
  const body = h("tbody");
  const draw = () => {
    const q = search.value.toLowerCase();
    const rows = items.filter((g) => !q || `${g.name} ${g.id}`.toLowerCase().includes(q));
    body.replaceChildren(...rows.map((g) => row(g, reload)));
    const empty = items.length
      ? "No graph matches the search."
      : "No graphs yet: add an example below, import a graph JSON, or start a new graph.";
    if (!rows.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, empty)));
  };
  search.addEventListener("input", draw);
  draw();
  const head = h(
    "thead",
    {},
    h(
      "tr",
      {},
      ["Name", "Id", "Version", "Updated", ""].map((t) => h("th", { scope: "col" }, t)),
    ),
  );
  return [search, h("table", { class: "list" }, head, body)];
}

function openImport() {
  const holder = {};
  holder.close = openDialog(
    "Import a graph",
    importForm(() => holder.close()),
    "import-dialog",
  ).close;
}

export async function graphsPage(page) {
  const [graphs, drafts, examples] = await Promise.all([
    call("GET", "/graphs?limit=500"),
    call("GET", "/drafts"),
    call("GET", "/examples"),
  ]);
  const saved = new Set(graphs.items.map((g) => g.id));
  const onlyDrafts = drafts.items
    .filter((d) => !saved.has(d.graph_id))
    .map((d) => ({ id: d.graph_id, name: d.name, draft: true, updated_at: d.saved_at }));
  const newGraph = h(
    "a",
    { class: "button primary", id: "new-graph", href: "#/graphs/new" },
    icon("plus"),
    "New graph",
  );
  const title = h(
    "div",
    { class: "title-row" },
    h("h1", {}, "Graphs"),
    h("span", { class: "spacer" }),
    iconButton("upload", "Import", { id: "import-graph", onclick: openImport }),
    newGraph,
  );
  return [title, listTable([...onlyDrafts, ...graphs.items], () => page.reload()), gallery(examples.items)];
}
