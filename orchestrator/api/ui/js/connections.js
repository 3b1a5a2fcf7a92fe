/* Wires of the selected node, for the keyboard: its wires in and out (each removable),
   and a form that connects one of its outputs to a compatible input of another node. */
import { h } from "./dom.js";
import { canWire } from "./wiring.js";

function targets(ed, node) {
  const out = [];
  for (const other of ed.gv.nodes()) {
    if (other === node) continue;
    other.inputs.forEach((input, i) => out.push({ node: other, index: i, input }));
  }
  return out;
}

function wireRow(ed, edge, node) {
  const gv = ed.gv;
  const other = edge.source === node._g.id ? gv.node(edge.target) : gv.node(edge.source);
  const text =
    edge.source === node._g.id
      ? `${edge.sourceHandle} → ${other._g.name} · ${edge.targetHandle}`
      : `${other._g.name} · ${edge.sourceHandle} → ${edge.targetHandle}`;
  return h(
    "li",
    { dataset: { edge: edge.id } },
    text,
    " ",
    h("button", { type: "button", class: "link-button", onclick: () => ed.removeWire(edge.id) }, "Remove"),
  );
}

export function connectionsSection(ed, node) {
  const edges = ed.gv.toJSON().edges.filter((e) => e.source === node._g.id || e.target === node._g.id);
  const from = h(
    "select",
    { id: "connect-from", "aria-label": "Output" },
    node.outputs.map((o, i) => h("option", { value: i }, o._handle)),
  );
  const to = h("select", { id: "connect-to", "aria-label": "Into" });
  const fill = () => {
    const out = node.outputs[Number(from.value)];
    const options = targets(ed, node).filter((t) => out && canWire(out.type, t.input.type));
    to.replaceChildren(
      ...options.map((t) =>
        h("option", { value: `${t.node._g.id}|${t.index}` }, `${t.node._g.name} · ${t.input._handle}`),
      ),
    );
  };
  from.addEventListener("change", fill);
  fill();
  const connect = () => {
    if (!to.value) return;
    const [id, index] = to.value.split("|");
    ed.connectFromPanel(node, Number(from.value), ed.gv.node(id), Number(index));
  };
  return h(
    "details",
    { class: "connections", id: "connections", open: !edges.length },
    h("summary", {}, `Connections (${edges.length})`),
    h(
      "ul",
      { class: "wires" },
      edges.map((e) => wireRow(ed, e, node)),
    ),
    node.outputs.length
      ? h(
          "div",
          { class: "connect-form" },
          from,
          to,
          h("button", { type: "button", id: "connect-button", onclick: connect }, "Connect"),
        )
      : null,
  );
}
