/* The one graph view, shared by the run view and the editor: a graph JSON drawn on
   LiteGraph's canvas (node_draw.js, node_build.js), laid out when it has no positions
   (layout.js), fitted to the window at any size, zoomable, with per-node run states and
   badges. Several wires into one input declared ``multiple`` are all kept and drawn (the
   canvas library holds one per input: the others are drawn here). ``editable`` rings the
   inputs a dragged wire may go into; the editor adds its own keys, panel and history. */
import { buildNode, ensureSlot, resize } from "./node_build.js";
import { register } from "./node_draw.js";
import { layered } from "./layout.js";
import { patchWiring, ringCompatible, useRules } from "./wiring.js";

const MIN_SCALE = 0.1;
const MAX_SCALE = 1.5;
const FIT_MARGIN_BOTTOM = 60; // screen pixels kept clear for the canvas tools

function makeCanvas(element, editable, label) {
  const canvasEl = document.createElement("canvas");
  canvasEl.tabIndex = 0;
  canvasEl.setAttribute("role", editable ? "application" : "img");
  canvasEl.setAttribute("aria-label", label);
  element.replaceChildren(canvasEl);
  return canvasEl;
}

function configure(view, editable) {
  Object.assign(view, {
    allow_searchbox: false,
    render_canvas_border: false,
    show_info: false,
    allow_dragcanvas: true,
    allow_reconnect_links: editable,
  });
  view.getMenuOptions = () => [];
  view.getNodeMenuOptions = () => [];
  view.getCanvasMenuOptions = () => [];
  view.canvas.tabIndex = 0; // LiteGraph sets tabindex=1: a positive one would jump the tab order
  // Keys are the editor's (editor_keys.js); LiteGraph's own would delete or paste nodes.
  view.canvas.removeEventListener("keydown", view._key_callback, true);
  document.removeEventListener("keyup", view._key_callback, true);
}

function bezier(ctx, a, b, colour) {
  const dist = Math.max(40, Math.abs(b[0] - a[0]) * 0.5);
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.beginPath();
  ctx.moveTo(a[0], a[1]);
  ctx.bezierCurveTo(a[0] + dist, a[1], b[0] - dist, b[1], b[0], b[1]);
  ctx.stroke();
}

/* One edge of the graph JSON from a wire between slots. */
function edgeJSON(wire) {
  const { a, out, b, inp, id, channel } = wire;
  const input = b.inputs[inp];
  const data = { channel: channel || input._channel || "flow" };
  return {
    id,
    source: a._g.id,
    sourceHandle: a.outputs[out]._handle,
    target: b._g.id,
    targetHandle: input._handle,
    data,
  };
}

export class GraphView {
  constructor(element, { cat, editable = false, label = "Graph canvas" }) {
    register();
    patchWiring();
    useRules(cat.rules);
    Object.assign(this, { element, cat, editable, extras: [], edgeSeq: 0, handlers: {} });
    this.canvas = makeCanvas(element, editable, label);
    element.graphView = this; // for browser tests and automation: where things are drawn
    this.lg = new LGraph();
    this.view = new LGraphCanvas(this.canvas, this.lg, { skip_events: false });
    configure(this.view, editable);
    this.view.onDrawBackground = (ctx) => this.drawExtras(ctx);
    this.view.onNodeSelected = (n) => this.emit("select", n._g.id);
    this.view.onShowNodePanel = (n) => this.emit("select", n._g.id); // our panel, not LiteGraph's
    this.view.onNodeDeselected = () => {};
    this.view._onRefuse = (r) => this.emit("refuse", r);
    this.size();
    this.fitted = false; // true while the view shows what fit() chose: a resize then refits
    this.canvas.addEventListener("wheel", () => (this.fitted = false), { passive: true });
    this.observer = new ResizeObserver(() => this.size() && this.fitted && this.fit());
    this.observer.observe(element);
    this.ticker = setInterval(() => {
      if (this.lg._nodes.some((n) => n._state === "running" || n._state === "waiting")) this.view.setDirty(true, false);
    }, 80);
  }

  on(event, fn) {
    this.handlers[event] = fn;
  }

  emit(event, value) {
    if (this.handlers[event]) this.handlers[event](value);
  }

  node(id) {
    return this.lg._nodes.find((n) => n._g.id === id);
  }

  nodes() {
    return this.lg._nodes;
  }

  drawExtras(ctx) {
    for (const x of this.extras) {
      const colour = x.a.outputs[x.out].color_on || "#9ca3af";
      bezier(ctx, x.a.getConnectionPos(false, x.out), x.b.getConnectionPos(true, x.inp), colour);
    }
  }

  /* Put a built node on the canvas (dragged wires ring its compatible inputs). */
  add(node) {
    node._ring = this.editable ? (ctx, canvas) => ringCompatible(node, ctx, canvas) : null;
    this.lg.add(node);
  }

  /* Wire ``a``'s output ``out`` into ``b``'s input ``inp``; a second wire into a
     ``multiple`` input is kept beside the first. */
  connect(a, out, b, inp, { channel, id } = {}) {
    const input = b.inputs[inp];
    const edgeId = id || `e${++this.edgeSeq}`;
    if (input._multiple && input.link != null) {
      this.extras.push({ a, out, b, inp, channel, id: edgeId });
      this.view.setDirty(true, true);
      return null;
    }
    const link = a.connect(out, b, inp);
    if (link) Object.assign(link, { _edgeId: edgeId, _channel: channel || input._channel || "flow" });
    return link;
  }

  wireEdge(e, nodes) {
    const a = nodes[e.source];
    const b = nodes[e.target];
    if (!a || !b) return;
    this.connect(
      a,
      ensureSlot(a, "out", e.sourceHandle),
      b,
      ensureSlot(b, "in", e.targetHandle),
      (e.data && e.data.channel) || "flow",
      e.id,
    );
  }

  /* Nodes without a position: laid out, below the nodes that have one. */
  place(graph, built) {
    const unplaced = graph.nodes.filter((n) => !(n.position && typeof n.position.x === "number"));
    if (!unplaced.length) return;
    const placed = graph.nodes.filter((n) => !unplaced.includes(n));
    const top = placed.length ? Math.max(...placed.map((n) => built[n.id].pos[1] + built[n.id].size[1])) + 120 : 0;
    const at = layered(
      unplaced.map((n) => ({ id: n.id, w: built[n.id].size[0], h: built[n.id].size[1] + 30 })),
      graph.edges || [],
    );
    for (const n of unplaced) built[n.id].pos = [at[n.id][0], at[n.id][1] + top];
  }

  /* Draw ``graph`` (replacing what was drawn). */
  load(graph) {
    this.view.deselectAllNodes();
    Object.assign(this.view, { selected_nodes: {}, current_node: null, node_dragged: null });
    this.lg.clear();
    this.extras.length = 0;
    const built = {};
    for (const n of graph.nodes || []) {
      const node = buildNode(n, this.cat);
      if (n.position && typeof n.position.x === "number") node.pos = [n.position.x, n.position.y];
      built[n.id] = node;
      this.add(node);
    }
    this.place(graph, built);
    this.edgeSeq = Math.max(0, ...(graph.edges || []).map((e) => Number(/^e(\d+)$/.exec(e.id || "")?.[1] || 0)));
    for (const e of graph.edges || []) this.wireEdge(e, built);
    this.view.setDirty(true, true);
  }

  /* {nodes, edges} in the API's graph format, positions included. */
  toJSON() {
    const nodes = this.lg._nodes.map((n) => {
      const out = {
        id: n._g.id,
        type: n._g.type,
        name: n._g.name,
        data: n._g.data,
        position: { x: Math.round(n.pos[0]), y: Math.round(n.pos[1]) },
      };
      if (Object.keys(n._g.settings || {}).length) out.settings = n._g.settings;
      return out;
    });
    const edges = [];
    for (const link of Object.values(this.lg.links || {})) {
      const a = link && this.lg.getNodeById(link.origin_id);
      const b = link && this.lg.getNodeById(link.target_id);
      if (!a || !b) continue;
      if (!link._edgeId) link._edgeId = `e${++this.edgeSeq}`;
      edges.push(
        edgeJSON({ a, out: link.origin_slot, b, inp: link.target_slot, id: link._edgeId, channel: link._channel }),
      );
    }
    for (const x of this.extras) if (x.a.graph && x.b.graph) edges.push(edgeJSON(x));
    edges.sort((x, y) => x.id.localeCompare(y.id, undefined, { numeric: true }));
    return { nodes, edges };
  }

  bounds() {
    const th = LiteGraph.NODE_TITLE_HEIGHT;
    const nodes = this.lg._nodes;
    return {
      minX: Math.min(...nodes.map((n) => n.pos[0])) - 30,
      minY: Math.min(...nodes.map((n) => n.pos[1])) - th - 30,
      maxX: Math.max(...nodes.map((n) => n.pos[0] + n.size[0])) + 30,
      maxY: Math.max(...nodes.map((n) => n.pos[1] + n.size[1])) + 50,
    };
  }

  /* Show every node, at whatever scale that takes (no 0.7 clamp: down to 0.1). */
  fit() {
    if (!this.lg._nodes.length) return;
    const b = this.bounds();
    const w = this.canvas.width;
    const hgt = this.canvas.height - FIT_MARGIN_BOTTOM;
    const scale = Math.max(MIN_SCALE, Math.min(1.1, w / (b.maxX - b.minX), hgt / (b.maxY - b.minY)));
    this.view.ds.scale = scale;
    this.view.ds.offset = [
      -b.minX + (w / scale - (b.maxX - b.minX)) / 2,
      -b.minY + (hgt / scale - (b.maxY - b.minY)) / 2,
    ];
    this.view.setDirty(true, true);
    this.fitted = true;
  }

  zoom(factor) {
    const next = Math.max(MIN_SCALE, Math.min(MAX_SCALE, this.view.ds.scale * factor));
    this.view.ds.changeScale(next, [this.canvas.width / 2, this.canvas.height / 2]);
    this.view.setDirty(true, true);
    this.fitted = false;
  }

  /* Match the canvas to its element; true when its size changed. */
  size() {
    const w = Math.max(200, Math.floor(this.element.clientWidth));
    const hgt = Math.max(200, Math.floor(this.element.clientHeight));
    if (this.canvas.width === w && this.canvas.height === hgt) return false;
    this.canvas.width = w;
    this.canvas.height = hgt;
    this.view.resize(w, hgt);
    this.view.setDirty(true, true); // a resized canvas is blank until drawn again
    return true;
  }

  select(id) {
    const n = id && this.node(id);
    if (n && !(this.view.selected_nodes || {})[n.id]) this.view.selectNode(n);
    if (!n) this.view.deselectAllNodes();
  }

  selectedIds() {
    return Object.values(this.view.selected_nodes || {}).map((n) => n._g.id);
  }

  setState(id, state, label) {
    const n = this.node(id);
    if (!n) return;
    n._state = state;
    n._stateLabel = label || null;
    this.view.setDirty(true, false);
  }

  setBadges(id, list) {
    const n = this.node(id);
    if (n) n._badges = list;
    this.view.setDirty(true, false);
  }

  /* Resize a node after its parameters changed, and redraw. */
  refresh(id) {
    const n = this.node(id);
    if (n) resize(n);
    this.view.setDirty(true, true);
  }

  /* Where graph point ``p`` is on screen (page coordinates). */
  screenPoint(p) {
    const c = this.view.ds.convertOffsetToCanvas(p);
    const r = this.canvas.getBoundingClientRect();
    return { x: r.left + c[0], y: r.top + c[1] };
  }

  destroy() {
    clearInterval(this.ticker);
    this.observer.disconnect();
    this.view.stopRendering();
    this.view.unbindEvents();
    this.lg.stop();
  }
}

export const createGraphView = (element, options) => new GraphView(element, options);
