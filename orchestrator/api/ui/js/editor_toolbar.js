/* The editor's toolbar (name, id, version, problems, undo / redo, export, save, run input,
   run, chat), and the hooks browser tests use to find things on the canvas. */
import { download, enc, h, iconButton } from "./dom.js";

export function toolbar(ed, graph, versions) {
  const ui = ed.ui;
  const onVersion = (e) => (location.hash = `#/graphs/${enc(ed.meta.id)}?version=${e.target.value}`);
  const select = versions.length
    ? h(
        "select",
        { id: "version", "aria-label": "Version", onchange: onVersion },
        versions.map((n) => h("option", { value: n, selected: n === (graph && graph.version) }, `v${n}`)),
      )
    : null;
  const exportJSON = () => download(`${ed.meta.id || "graph"}.json`, JSON.stringify(ed.toJSON(), null, 2) + "\n");
  return h(
    "div",
    { class: "editor-bar", role: "toolbar", "aria-label": "Graph" },
    h("h1", { class: "sr-only" }, graph ? `Edit ${graph.name || graph.id}` : "New graph"),
    [ui.nameField, ui.idField, select, ui.status, ui.problems, h("span", { class: "spacer" })],
    iconButton(
      "undo-2",
      "Undo",
      { id: "undo", class: "icon-only", title: "Undo (Ctrl+Z)", onclick: () => ed.undo() },
      false,
    ),
    iconButton(
      "redo-2",
      "Redo",
      { id: "redo", class: "icon-only", title: "Redo (Ctrl+Shift+Z)", onclick: () => ed.redo() },
      false,
    ),
    iconButton("download", "Export", { id: "export-graph", onclick: exportJSON }),
    iconButton("save", "Save", { id: "save-graph", onclick: () => ed.save() }),
    ui.runInput,
    iconButton("play", "Run", { id: "editor-run-button", class: "primary", onclick: () => ed.run() }),
    ui.runLink,
    iconButton("message-square", "Chat", { id: "toggle-chat", onclick: () => ed.toggleChat() }),
  );
}

export function testHooks(ed) {
  // Test and automation hooks: where things are on screen, and the JSON being edited.
  const gv = ed.gv;
  const slot = (nodeId, dir, handle) => {
    const n = gv.node(nodeId);
    const list = dir === "in" ? n.inputs : n.outputs;
    return gv.screenPoint(
      n.getConnectionPos(
        dir === "in",
        list.findIndex((s) => s._handle === handle),
      ),
    );
  };
  const title = (nodeId) =>
    gv.screenPoint([gv.node(nodeId).pos[0] + 60, gv.node(nodeId).pos[1] - LiteGraph.NODE_TITLE_HEIGHT / 2]);
  const box = (nodeId) => ({ ...gv.screenPoint(gv.node(nodeId).pos), h: gv.node(nodeId).size[1] });
  return {
    graph: () => ed.toJSON(),
    nodes: () => gv.nodes().map((n) => n._g.id),
    slot,
    title,
    box,
    at: (x, y) => gv.screenPoint([x, y]),
    scale: () => gv.view.ds.scale,
    badges: (id) => gv.node(id)._badges || [],
  };
}
