/* The node panel of the editor: name, description, the parameters (the key ones first,
   "Show advanced" for the rest, as Langflow has), settings, connections, Test step, and
   the node's output from the last run or test, which can be pinned. */
import { h, icon, iconButton, jsonView } from "./dom.js";
import { paramField } from "./param_field.js";
import { settingsFields } from "./node_settings.js";
import { connectionsSection } from "./connections.js";

const KEYS_HELP =
  "Keys on the canvas: N / Shift+N select the next / previous node, arrows move it (Shift: further), Delete removes it, " +
  "A adds a node (palette search), Enter edits it, C connects it, F fits the view, + / − zoom, Ctrl+Z / Ctrl+Shift+Z undo / redo, Ctrl+C / Ctrl+V copy / paste.";

/* Shown without "Show advanced": required, set, without a default (it needs a value to
   mean anything), or among the first three the definition lists. */
function isBasic(p, index, data) {
  return p.required || p.id in data || p.default == null || index < 3;
}

function parameters(ed, node, ui) {
  const params = (node._def.parameters || []).filter((p) => p.mode !== "socket");
  const data = node._g.data;
  const basic = params.filter((p, i) => isBasic(p, i, data));
  const advanced = params.filter((p) => !basic.includes(p));
  const field = (p) =>
    paramField(
      {
        value: data[p.id] !== undefined ? data[p.id] : p.default,
        wired: (node.inputs || []).some((i) => i._param === p.id && i.link != null),
        error: ed.problemFor(node._g.id, p.id),
        expressionMode: ui.expression.has(p.id),
        setValue: (v) => ed.setParam(node, p.id, v),
        switchMode: (toExpr, v) => {
          ui.expression[toExpr ? "add" : "delete"](p.id);
          ed.setParam(node, p.id, v);
          ed.drawPanel();
        },
        scope: () => ed.scopeFor(node._g.id),
        suggestions: () => ed.suggestions(node._g.id),
        nodeType: node._g.type,
        lastPreview: ui.previews,
      },
      p,
    );
  const toggle = h(
    "button",
    {
      type: "button",
      id: "show-advanced",
      class: "link-button",
      "aria-expanded": String(ui.advanced),
      onclick: () => ((ui.advanced = !ui.advanced), ed.drawPanel()),
    },
    ui.advanced ? "Hide advanced" : `Show advanced (${advanced.length})`,
  );
  return [basic.map(field), advanced.length ? toggle : null, ui.advanced ? advanced.map(field) : null];
}

function outputSection(ed, node) {
  const out = ed.outputOf(node._g.id);
  const id = node._g.id;
  const pinButton = out.pinned
    ? iconButton("pin", "Unpin", { id: "unpin-output", onclick: () => ed.unpin(id) })
    : iconButton("pin", "Pin this output", {
        id: "pin-output",
        disabled: out.value === undefined,
        onclick: () => ed.pin(id),
      });
  const state = out.pinned
    ? "Pinned: test steps and previews use it instead of running the nodes before."
    : out.value === undefined
      ? "Not run yet: Test step runs this node alone."
      : out.source;
  return h(
    "section",
    { class: "output", id: "node-output", dataset: { pinned: String(out.pinned) } },
    h("h3", {}, "Output", out.pinned ? h("span", { class: "pin-badge" }, " pinned") : null),
    h("p", { class: "muted small" }, state),
    out.value === undefined ? null : jsonView(out.value),
    pinButton,
  );
}

function header(ed, node) {
  const def = node._def;
  const name = h("input", { id: "node-name", value: node._g.name, "aria-label": "Node name" });
  name.addEventListener("change", () => ed.rename(node, name.value.trim()));
  const canTest = def.capabilities ? def.capabilities.execute !== false : true;
  return [
    h(
      "div",
      { class: "panel-title" },
      icon(def.icon, "icon-svg big"),
      h("div", {}, name, h("p", { class: "mono muted small" }, `${node._g.id} · ${node._g.type}`)),
    ),
    h("p", { class: "muted small" }, def.description || ""),
    h(
      "div",
      { class: "panel-actions" },
      iconButton("flask-conical", "Test step", {
        id: "test-step",
        class: "primary",
        disabled: !canTest,
        title: canTest
          ? "Run this node alone on the workers, with pinned or last-run input"
          : "This node is used by other nodes (materialized), not run on its own",
        onclick: () => ed.testStep(node._g.id),
      }),
      iconButton("trash-2", "Delete", {
        id: "delete-node",
        class: "danger",
        onclick: () => ed.deleteNodes([node._g.id]),
      }),
    ),
    h("div", { id: "test-status", class: "muted small", "aria-live": "polite" }, ed.testStatus(node._g.id)),
  ];
}

/* The panel's content for node ``node`` (null: the empty state). ``ui`` keeps what the
   panel shows across redraws: {advanced, expression: Set, previews, settingsOpen}. */
export function panelContent(ed, node, ui) {
  if (!node) {
    return [
      h("h2", {}, "No node selected"),
      h(
        "p",
        { class: "muted" },
        "Drag a node from the palette onto the canvas (or press Enter on it), then select it to edit it here.",
      ),
      h("p", { class: "muted small", id: "keys-help" }, KEYS_HELP),
    ];
  }
  return [
    header(ed, node),
    h("h3", {}, "Parameters"),
    parameters(ed, node, ui),
    settingsFields(node._g.settings, (fn) => ed.updateSettings(node, fn), ui.settingsOpen),
    connectionsSection(ed, node),
    outputSection(ed, node),
  ];
}
