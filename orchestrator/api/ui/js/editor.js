/* The editor (#/graphs/new, #/graphs/<id>): the palette, the graph view in edit mode, the
   node panel, and a toolbar (undo / redo, export, save, run, chat). It is also the
   graph's page: a saved graph opens here, with its latest run's outputs. The JSON it
   writes is the graph format the CLI and API take, pinned data included
   (``settings.pinData``, see editor_data.js). */
import { call } from "./api.js";
import { enc, h, iconButton, toast } from "./dom.js";
import { catalogue } from "./catalogue.js";
import { createGraphView } from "./graph_view.js";
import { addNavigator } from "./navigator.js";
import { createPalette } from "./palette.js";
import { createHistory } from "./history.js";
import { panelContent } from "./panel.js";
import { bindKeys } from "./editor_keys.js";
import { Store } from "./editor_store.js";
import { Runner } from "./editor_run.js";
import { Actions } from "./editor_actions.js";
import { outputView, pins, scopeFor, suggestions } from "./editor_data.js";
import { refusalMessage } from "./wiring.js";
import { chatPanel } from "./chat.js";
import { testHooks, toolbar } from "./editor_toolbar.js";

const CYCLES = ["CycleError", "LinkCycleError"];

/* The graph's saved version (``version``, else the latest) and its draft, if any. */
async function loadGraph(id, version) {
  if (!id) return { graph: null, draft: null };
  const draft = await call("GET", `/graphs/${enc(id)}/draft`);
  const graph =
    draft.stored || !draft.graph
      ? await call("GET", `/graphs/${enc(id)}` + (version ? `?version=${enc(version)}` : ""))
      : null;
  return { graph, draft: draft.graph && !version ? draft : null };
}

function makeUi(meta, saved) {
  return {
    status: h("span", { id: "editor-status", class: "editor-status", "aria-live": "polite" }),
    problems: h("span", { id: "editor-problems", "aria-live": "polite" }),
    conflict: h("div", { id: "editor-conflict" }),
    area: h("div", { class: "canvas editor-canvas", id: "canvas" }),
    panel: h("aside", { class: "detail", id: "node-panel", "aria-label": "Selected node" }),
    idField: h("input", {
      id: "graph-id",
      value: meta.id,
      placeholder: "graph id",
      "aria-label": "Graph id",
      disabled: saved,
      size: 14,
    }),
    nameField: h("input", {
      id: "graph-name",
      class: "graph-name",
      value: meta.name,
      placeholder: "Untitled graph",
      "aria-label": "Graph name",
    }),
    runInput: h(
      "textarea",
      {
        id: "editor-run-input",
        rows: 1,
        spellcheck: "false",
        "aria-label": "Run input (JSON)",
        title: "Run input (JSON)",
      },
      JSON.stringify(meta.settings.sample_input ?? {}),
    ),
    runError: h("div", { class: "field-error", id: "editor-run-error", "aria-live": "assertive" }),
    runLink: h("span", { id: "editor-run" }),
    chat: h("aside", { class: "chat-pane", id: "chat-pane", hidden: true, "aria-label": "Chat" }),
  };
}

class Editor {
  constructor(page, cat, start, graph) {
    const meta = {
      id: start.id || "",
      name: start.name || "",
      description: start.description || "",
      settings: JSON.parse(JSON.stringify(start.settings || {})),
    };
    Object.assign(this, {
      page,
      cat,
      meta,
      baseVersion: graph ? graph.version : null,
      dirty: false,
      selected: null,
      outputs: {},
      problem: null,
    });
    this.ui = makeUi(meta, !!graph);
    this.panelUi = { advanced: false, expression: new Set(), previews: {}, settingsOpen: false, node: null };
    this.store = new Store(this, this.ui);
    this.runner = new Runner(this, this.ui);
    this.actions = new Actions(this);
    this.hist = createHistory(
      () => JSON.stringify(this.toJSON()),
      (s) => this.restore(JSON.parse(s)),
    );
    this.ui.nameField.addEventListener("input", () => ((this.meta.name = this.ui.nameField.value), this.changed()));
    this.ui.idField.addEventListener("change", () => (this.meta.id = this.ui.idField.value.trim()));
    this.palette = createPalette(cat, this.ui.area, {
      onDrop: (type, e) => this.actions.addAt(type, e),
      onAdd: (type) => this.actions.addNear(type),
    });
  }

  toJSON() {
    const g = { id: this.meta.id || this.ui.idField.value.trim(), name: this.meta.name, ...this.gv.toJSON() };
    if (this.meta.description) g.description = this.meta.description;
    if (Object.keys(this.meta.settings).length) g.settings = this.meta.settings;
    return g;
  }

  // history and validation
  commit() {
    if (!this.hist.commit()) return;
    this.dirty = true;
    this.ui.status.textContent = `Unsaved changes · ${this.baseVersion ? `base version ${this.baseVersion}` : "not saved yet"}`;
    this.store.validateSoon();
  }
  changed() {
    setTimeout(() => this.commit(), 0);
  }
  undo() {
    return this.hist.undo() && toast("Undone");
  }
  redo() {
    return this.hist.redo() && toast("Redone");
  }
  restore(json) {
    this.loading = true;
    this.gv.load(json);
    this.loading = false;
    this.meta.settings = json.settings || {};
    this.dirty = true;
    this.select(this.selected);
  }

  // selection and the panel
  select(id) {
    this.selected = id && this.gv.node(id) ? id : null;
    this.gv.select(this.selected);
    if (this.panelUi.node !== this.selected)
      Object.assign(this.panelUi, { expression: new Set(), previews: {}, node: this.selected });
    this.drawPanel();
  }
  drawPanel() {
    const node = this.selected && this.gv.node(this.selected);
    this.ui.panel.replaceChildren(...panelContent(this, node, this.panelUi).flat(4).filter(Boolean));
  }
  reveal(node) {
    const ds = this.gv.view.ds;
    const [x, y] = ds.convertOffsetToCanvas(node.pos);
    if (x >= 0 && y >= 0 && x <= this.gv.canvas.width - 100 && y <= this.gv.canvas.height - 60) return;
    ds.offset = [
      -node.pos[0] + this.gv.canvas.width / ds.scale / 3,
      -node.pos[1] + this.gv.canvas.height / ds.scale / 3,
    ];
    this.gv.view.setDirty(true, true);
  }

  // what the panel and the keys call
  save() {
    return this.store.save();
  }
  run() {
    return this.runner.run();
  }
  testStep(id) {
    return this.runner.testStep(id);
  }
  testStatus(id) {
    return this.runner.statusOf(id);
  }
  deleteNodes(ids) {
    this.actions.deleteNodes(ids);
  }
  rename(node, name) {
    this.actions.rename(node, name);
  }
  removeWire(id) {
    this.actions.removeWire(id);
  }
  copy() {
    this.actions.copy();
  }
  paste() {
    this.actions.paste();
  }
  pins() {
    return pins(this);
  }
  outputOf(id) {
    return outputView(this, id);
  }
  scopeFor(id) {
    return scopeFor(this, id);
  }
  suggestions(id) {
    return suggestions(this, id);
  }
  problemFor(nodeId, pid) {
    const p = this.problem;
    return p && p.node_id === nodeId && p.parameter === pid ? p.message : "";
  }
  // Panel handlers may fire for a node drawn before the last reload of the canvas (a
  // field's change event comes on blur, after a redraw): they act on the node by id.
  setParam(stale, pid, value) {
    const node = this.gv.node(stale._g.id);
    if (!node) return;
    if (value === "" || value === undefined) delete node._g.data[pid];
    else node._g.data[pid] = value;
    this.gv.refresh(node._g.id);
    this.commit();
  }
  updateSettings(stale, fn) {
    const node = this.gv.node(stale._g.id);
    if (!node) return;
    fn(node._g.settings);
    this.restore(this.toJSON()); // the error port comes and goes with the error mode
    this.commit();
  }
  pin(id) {
    pins(this)[id] = this.outputs[id];
    this.commit();
    this.drawPanel();
  }
  unpin(id) {
    delete pins(this)[id];
    if (!Object.keys(pins(this)).length) delete this.meta.settings.pinData;
    this.commit();
    this.drawPanel();
  }
  connectFromPanel(a, out, b, inp) {
    this.gv.connect(a, out, b, inp);
    this.afterWire();
  }

  /* After a wire was made: record it; a wire that closed a cycle is taken back. */
  afterWire() {
    for (const l of Object.values(this.gv.lg.links || {}))
      if (l && !l._channel) l._channel = this.gv.lg.getNodeById(l.target_id).inputs[l.target_slot]._channel || "flow";
    setTimeout(async () => {
      this.commit();
      if (this.selected) this.drawPanel();
      const problem = await this.store.validate();
      if (problem && CYCLES.includes(problem.type)) this.refuseCycle(problem);
    }, 0);
  }

  refuseCycle(problem) {
    this.hist.drop();
    const path = problem.path || [];
    for (const n of this.gv.nodes())
      n._badges = path.includes(n._g.name) || path.includes(n._g.id) ? ["in the refused cycle"] : [];
    message(`Wire refused: ${problem.message}` + (path.length ? ` (path: ${path.join(" → ")})` : ""), {
      type: problem.type,
    });
    this.gv.view.setDirty(true, true);
  }

  toggleChat() {
    const chat = this.ui.chat;
    if (!this.gv.nodes().some((n) => n._g.type === "chat_start"))
      return toast("Add a Chat Start node to chat with this graph");
    chat.hidden = !chat.hidden;
    document.querySelector(".editor").classList.toggle("with-chat", !chat.hidden);
    if (chat.hidden || chat.childElementCount) return;
    if (this.dirty || this.baseVersion == null)
      toast("Chat uses the last saved version; save to chat with your changes");
    chatPanel(this.page, this.meta.id, null).then((content) => chat.replaceChildren(...content.filter(Boolean)));
  }
}

function message(text, dataset) {
  toast(text, "error");
  const box = document.getElementById("canvas-messages");
  if (box) box.replaceChildren(h("div", { class: "canvas-message", role: "alert", id: "wire-refused", dataset }, text));
  setTimeout(() => box && box.replaceChildren(), 6000);
}

function mount(ed, start) {
  const ui = ed.ui;
  const gv = createGraphView(ui.area, {
    cat: ed.cat,
    editable: true,
    label: "Graph editor canvas: N selects nodes, arrows move them; the panel beside it edits the selected node.",
  });
  ed.gv = gv;
  gv.on("select", (nid) => ed.select(nid));
  gv.on("refuse", (r) => message(refusalMessage(r), { source: r.source, target: r.target }));
  gv.lg.onNodeConnectionChange = (kind) => kind === LiteGraph.INPUT && !ed.loading && ed.afterWire();
  gv.canvas.addEventListener("pointerup", () => setTimeout(() => ed.commit(), 0));
  bindKeys(ed, gv.canvas);
  ed.restore(start);
  ed.dirty = false;
  gv.view.ds.offset = [40, 80]; // an empty canvas: graph (0, 0) a little in from the corner
  gv.fit();
  const nav = addNavigator(ui.area, gv, [
    iconButton(
      "layout-grid",
      "Auto-layout",
      { id: "auto-layout", class: "icon-only", onclick: () => ed.actions.autoLayout() },
      false,
    ),
  ]);
  ed.hist.reset();
  ui.status.textContent = ed.isDraft
    ? "Draft (runs once the marked problem is fixed)"
    : ed.baseVersion
      ? `Version ${ed.baseVersion}`
      : "New graph (not saved)";
  if (gv.nodes().length) ed.store.validate();
  ed.runner.loadLastRun();
  window.EditorTest = testHooks(ed);
  const leaving = (e) => ed.dirty && e.preventDefault(); // unsaved edits: the browser asks first
  window.addEventListener("beforeunload", leaving);
  ed.page.cleanup(
    () => nav.destroy(),
    () => gv.destroy(),
    () => delete window.EditorTest,
    () => window.removeEventListener("beforeunload", leaving),
  );
  ui.area.dataset.ready = "true";
}

export async function editorPage(page, id, params) {
  const [{ graph, draft }, cat] = await Promise.all([loadGraph(id, params.get("version")), catalogue()]);
  const versions = graph ? (await call("GET", `/graphs/${enc(graph.id)}/versions`)).versions : [];
  const start = (draft && draft.graph) || graph || { id: id || "", name: "", nodes: [], edges: [], settings: {} };
  const ed = new Editor(page, cat, start, graph);
  ed.isDraft = !!draft;
  page.after(() => mount(ed, start));
  const messages = h("div", { id: "canvas-messages", "aria-live": "assertive" });
  const layout = h(
    "div",
    { class: "editor" },
    ed.palette.element,
    h("div", { class: "canvas-wrap" }, ed.ui.area, messages),
    ed.ui.panel,
    ed.ui.chat,
  );
  const note =
    draft && graph
      ? h("p", { class: "muted small", id: "draft-note" }, "Showing your unsaved draft of this graph.")
      : null;
  return [
    h(
      "div",
      { class: "editor-page" },
      toolbar(ed, graph, versions),
      ed.ui.conflict,
      note,
      h("div", { class: "run-error-row" }, ed.ui.runError),
      layout,
    ),
  ];
}
