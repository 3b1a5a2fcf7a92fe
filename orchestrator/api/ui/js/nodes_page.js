/* The node catalogue (#/nodes): categories, icons, descriptions, ports with socket colours
   and shapes, parameters. */
import { h, icon } from "./dom.js";
import { CATEGORY_COLOURS, catalogue } from "./catalogue.js";

export function legend(cat) {
  return h(
    "details",
    { class: "legend" },
    h("summary", {}, "Socket types and edges"),
    h(
      "ul",
      {},
      Object.values(cat.sockets).map((s) =>
        h("li", {}, h("span", { class: `sock ${s.shape}`, style: `background:${s.color}` }), s.label),
      ),
      h("li", {}, "solid edge: flow (data moves at run time)"),
      h("li", {}, "dashed edge: link (structural attachment, e.g. tools or a model)"),
    ),
  );
}

export async function nodesPage() {
  const cat = await catalogue();
  const groups = {};
  for (const n of cat.raw.nodes) (groups[n.category || "other"] = groups[n.category || "other"] || []).push(n);
  const sock = (id) => {
    const s = cat.sockets[id] || { color: "#888", shape: "circle" };
    return h("span", { class: `sock ${s.shape}`, style: `background:${s.color}`, title: id });
  };
  const ports = (list) =>
    (list || []).map((p) => h("span", { class: "port" }, sock(p.socket), p.id, ` (${p.channel})`));
  const params = (n) =>
    (n.parameters || []).length
      ? h(
          "details",
          {},
          h("summary", {}, `${n.parameters.length} parameters`),
          h(
            "ul",
            {},
            n.parameters.map((p) =>
              h(
                "li",
                {},
                h("code", {}, p.id),
                ` ${p.type} · ${p.mode}`,
                p.socket ? [" · socket ", sock(p.socket.type)] : null,
              ),
            ),
          ),
        )
      : null;
  const card = (n) =>
    h(
      "article",
      { class: "card node-card", dataset: { type: n.id } },
      h("h3", {}, icon(n.icon), n.name, h("span", { class: "mono muted" }, ` ${n.id}`)),
      h("p", {}, n.description || ""),
      h(
        "div",
        { class: "ports" },
        h("div", {}, h("strong", {}, "in: "), ports(n.inputs)),
        h("div", {}, h("strong", {}, "out: "), ports(n.outputs)),
      ),
      params(n),
    );
  const sections = Object.entries(groups)
    .sort()
    .map(([c, list]) =>
      h(
        "section",
        {},
        h("h2", { style: `border-color:${CATEGORY_COLOURS[c] || "#475569"}`, class: "cat" }, c),
        h("div", { class: "palette" }, list.map(card)),
      ),
    );
  return [h("h1", {}, "Nodes"), legend(cat), sections];
}
