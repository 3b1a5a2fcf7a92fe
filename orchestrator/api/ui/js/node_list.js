/* The keyboard way into a canvas: every node as a button with its icon, name and state. */
import { h, icon } from "./dom.js";

export function nodeList(graph, cat, onPick) {
  const items = graph.nodes.map((n) =>
    h(
      "li",
      {},
      h(
        "button",
        { type: "button", class: "node-item", dataset: { node: n.id, state: "pending" }, onclick: () => onPick(n.id) },
        h("span", { class: "dot" }),
        icon((cat.defs[n.type] || {}).icon),
        h("span", { class: "name" }, n.name || n.id),
        h("span", { class: "state" }, ""),
      ),
    ),
  );
  const list = h("ol", { class: "node-list", "aria-label": "Nodes" }, items);
  return {
    element: list,
    set(id, state, label) {
      const item = list.querySelector(`[data-node="${CSS.escape(id)}"]`);
      if (!item) return;
      item.dataset.state = state;
      item.querySelector(".state").textContent = label || state.replace("_", " ");
    },
  };
}
