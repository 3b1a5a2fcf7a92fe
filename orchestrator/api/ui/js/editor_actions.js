/* Editing actions on the graph view: add (dropped, or next to the selected node and wired
   to it), delete, copy / paste, rename (rewriting the expressions that name the node),
   remove a wire, auto-layout. Each ends with ``ed.commit()`` (history, validation). */
import { buildNode } from "./node_build.js";
import { layered } from "./layout.js";
import { canWire } from "./wiring.js";
import { toast } from "./dom.js";

const slug = (text) =>
  String(text)
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .replace(/^_|_$/g, "") || "node";
const clone = (v) => JSON.parse(JSON.stringify(v));

function unique(taken, base, join) {
  let name = base;
  for (let i = 2; taken.has(name); i++) name = `${base}${join}${i}`;
  return name;
}

function rewrite(value, pattern, name) {
  if (typeof value === "string") return value.replace(pattern, (_m, q) => `$(${q}${name}${q})`);
  if (Array.isArray(value)) return value.map((v) => rewrite(v, pattern, name));
  if (value && typeof value === "object")
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, rewrite(v, pattern, name)]));
  return value;
}

export class Actions {
  constructor(ed) {
    this.ed = ed;
    this.clipboard = null;
  }

  get gv() {
    return this.ed.gv;
  }

  ids() {
    return new Set(this.gv.nodes().map((n) => n._g.id));
  }

  names() {
    return new Set(this.gv.nodes().map((n) => n._g.name));
  }

  /* A free spot: right of ``after`` (a node) or in the middle of the view, moved down
     until no node is there. */
  freeSpot(after) {
    const c = this.gv.view.ds.convertCanvasToOffset([this.gv.canvas.width / 2 - 110, this.gv.canvas.height / 2 - 40]);
    const x = after ? after.pos[0] + after.size[0] + 80 : Math.round(c[0]);
    let y = after ? after.pos[1] : Math.round(c[1]);
    const busy = (yy) => this.gv.nodes().some((n) => Math.abs(n.pos[0] - x) < 200 && Math.abs(n.pos[1] - yy) < 90);
    for (let i = 0; i < 50 && busy(y); i++) y += 110;
    return [x, y];
  }

  add(type, pos) {
    const def = this.ed.cat.defs[type];
    if (!def) return null;
    const node = buildNode(
      { id: unique(this.ids(), slug(type), "_"), type, name: unique(this.names(), def.name || type, " "), data: {} },
      this.ed.cat,
    );
    node.pos = pos;
    this.gv.add(node);
    return node;
  }

  /* Add ``type`` next to the selected node, wired from its first flow output when they fit. */
  addNear(type) {
    const from = this.ed.selected && this.gv.node(this.ed.selected);
    const node = this.add(type, this.freeSpot(from));
    if (!node) return;
    const out = from ? from.outputs.findIndex((o) => o._channel === "flow") : -1;
    const inp = node.inputs.findIndex((i) => i._channel === "flow" && !i._param);
    if (out >= 0 && inp >= 0 && canWire(from.outputs[out].type, node.inputs[inp].type)) {
      this.gv.connect(from, out, node, inp, { channel: "flow" });
      toast(`Added ${node._g.name} after ${from._g.name}, wired`);
    }
    this.ed.commit();
    this.ed.select(node._g.id);
    this.ed.reveal(node);
  }

  addAt(type, event) {
    const pos = this.gv.view.convertEventToCanvasOffset(event);
    const node = this.add(type, [Math.round(pos[0]), Math.round(pos[1])]);
    if (!node) return;
    this.ed.commit();
    this.ed.select(node._g.id);
  }

  deleteNodes(list) {
    if (!list.length) return;
    const gv = this.gv;
    for (const n of list.map((id) => gv.node(id)).filter(Boolean)) {
      gv.extras.splice(0, gv.extras.length, ...gv.extras.filter((x) => x.a !== n && x.b !== n));
      gv.lg.remove(n);
    }
    this.ed.select(null);
    this.ed.commit();
  }

  copy() {
    const picked = new Set(this.gv.selectedIds());
    if (!picked.size) return;
    const g = this.gv.toJSON();
    this.clipboard = {
      nodes: g.nodes.filter((n) => picked.has(n.id)),
      edges: g.edges.filter((e) => picked.has(e.source) && picked.has(e.target)),
    };
    toast(`Copied ${picked.size} node${picked.size > 1 ? "s" : ""}`);
  }

  paste() {
    if (!this.clipboard) return;
    const renamed = {};
    for (const n of this.clipboard.nodes) {
      const node = buildNode(
        { ...clone(n), id: unique(this.ids(), slug(n.type), "_"), name: unique(this.names(), n.name, " ") },
        this.ed.cat,
      );
      node.pos = [n.position.x + 40, n.position.y + 40];
      this.gv.add(node);
      renamed[n.id] = node;
    }
    for (const e of this.clipboard.edges) {
      const [a, b] = [renamed[e.source], renamed[e.target]];
      const out = a.outputs.findIndex((o) => o._handle === e.sourceHandle);
      const inp = b.inputs.findIndex((i) => i._handle === e.targetHandle);
      if (out >= 0 && inp >= 0) this.gv.connect(a, out, b, inp, { channel: e.data.channel });
    }
    this.ed.commit();
  }

  rename(node, name) {
    const old = node._g.name;
    if (!name || name === old) return;
    if (this.names().has(name)) return toast(`Another node is named ${name}`, "error");
    node.title = name;
    node._g.name = name;
    const pattern = new RegExp(`\\$\\((['"])${old.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\1\\)`, "g");
    const touched = [];
    for (const n of this.gv.nodes()) {
      const before = JSON.stringify(n._g.data);
      n._g.data = rewrite(n._g.data, pattern, name);
      if (JSON.stringify(n._g.data) !== before) touched.push(n._g.name);
    }
    toast(
      touched.length
        ? `Renamed; references updated in: ${touched.join(", ")}`
        : "Renamed; no expression referenced the old name",
    );
    this.ed.commit();
    this.ed.drawPanel();
  }

  removeWire(edgeId) {
    const extra = this.gv.extras.findIndex((x) => x.id === edgeId);
    if (extra >= 0) this.gv.extras.splice(extra, 1);
    const link = Object.values(this.gv.lg.links || {}).find((l) => l && l._edgeId === edgeId);
    if (link) this.gv.lg.removeLink(link.id);
    this.ed.commit();
    this.ed.drawPanel();
  }

  /* Layers left to right, unwired nodes in a grid below; then fit the view to the result. */
  autoLayout() {
    const sized = this.gv.nodes().map((n) => ({ id: n._g.id, w: n.size[0], h: n.size[1] + 30 }));
    const at = layered(sized, this.gv.toJSON().edges);
    for (const n of this.gv.nodes()) n.pos = [...at[n._g.id]];
    this.gv.fit();
    this.ed.commit();
  }
}
