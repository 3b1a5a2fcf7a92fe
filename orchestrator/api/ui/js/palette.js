/* The palette: node types by category, searchable; drag one onto the canvas (pointer
   events: mouse, pen and touch), or click it / press Enter on it to add it next to the
   selected node (wired to it when their sockets fit) or in a free spot. */
import { h, icon } from "./dom.js";
import { CATEGORY_COLOURS } from "./catalogue.js";

function startDrag(e, def, area, onDrop, onClick) {
  e.preventDefault();
  const ghost = h("div", { class: "drag-ghost" }, def.name || def.id);
  document.body.append(ghost);
  const sx = e.clientX;
  const sy = e.clientY;
  const move = (m) => {
    ghost.style.left = `${m.clientX + 8}px`;
    ghost.style.top = `${m.clientY + 8}px`;
  };
  const drop = (u) => {
    document.removeEventListener("pointermove", move);
    document.removeEventListener("pointerup", drop);
    ghost.remove();
    if (Math.abs(u.clientX - sx) + Math.abs(u.clientY - sy) < 4) return onClick(def.id); // a click
    const r = area.getBoundingClientRect();
    if (u.clientX >= r.left && u.clientX <= r.right && u.clientY >= r.top && u.clientY <= r.bottom) onDrop(def.id, u);
  };
  move(e);
  document.addEventListener("pointermove", move);
  document.addEventListener("pointerup", drop);
}

export function createPalette(cat, area, { onDrop, onAdd }) {
  const search = h("input", {
    type: "search",
    id: "palette-search",
    placeholder: "Search nodes (A)",
    "aria-label": "Search nodes",
  });
  const list = h("div", { class: "palette-list", id: "palette" });
  const item = (d) => {
    const el = h(
      "button",
      { type: "button", class: "palette-item", dataset: { type: d.id }, title: d.description || d.name },
      icon(d.icon),
      h("span", { class: "pname" }, d.name),
      h("span", { class: "pdesc" }, d.description || ""),
    );
    el.addEventListener("pointerdown", (e) => startDrag(e, d, area, onDrop, onAdd));
    el.addEventListener("keydown", (e) => {
      if (e.key !== "Enter" && e.key !== " ") return;
      e.preventDefault();
      onAdd(d.id);
    });
    return el;
  };
  const draw = () => {
    const q = search.value.toLowerCase();
    const groups = {};
    for (const d of cat.raw.nodes) {
      if (q && !`${d.name} ${d.id} ${d.description} ${d.category}`.toLowerCase().includes(q)) continue;
      (groups[d.category || "other"] = groups[d.category || "other"] || []).push(d);
    }
    const sections = Object.entries(groups)
      .sort()
      .map(([c, defs]) =>
        h(
          "section",
          {},
          h("h3", { class: "cat", style: `border-color:${CATEGORY_COLOURS[c] || "#475569"}` }, c),
          defs.map(item),
        ),
      );
    list.replaceChildren(...(sections.length ? sections : [h("p", { class: "empty" }, "No node matches.")]));
  };
  search.addEventListener("input", draw);
  search.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    const first = list.querySelector(".palette-item");
    if (first) onAdd(first.dataset.type);
  });
  draw();
  return { element: h("div", { class: "palette-pane" }, h("h2", {}, "Nodes"), search, list), search };
}
