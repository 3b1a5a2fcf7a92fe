/* A graph drawn on LiteGraph's canvas: nodes in their category colours with typed
   sockets (the seeds' colours and shapes), flow edges solid and link edges dashed,
   inline parameter controls dimmed when a wire feeds the parameter, automatic layered
   layout when the graph JSON carries no positions, and per-node run states drawn as a
   coloured frame (a pulsing one while running). View only for now: the same objects
   are what the editor will wire. */
"use strict";

const GraphCanvas = (() => {
  const CATEGORY_COLOURS = {
    trigger: "#10b981", core: "#10b981", agents: "#7c3aed", ai: "#3b82f6", flow: "#f59e0b",
    data: "#f97316", tools: "#eab308", utility: "#64748b",
  };
  const STATE_COLOURS = {
    pending: null, queued: "#94a3b8", running: "#38bdf8", succeeded: "#22c55e", failed: "#ef4444",
    skipped: "#a1a1aa", not_run: "#52525b", retrying: "#f59e0b", waiting: "#d946ef", cancelled: "#b45309",
  };
  const SHAPES = { circle: 3, square: 1, diamond: 5 };  // LiteGraph CIRCLE, BOX, ARROW
  const NODE_W = 200, GAP_X = 60, GAP_Y = 40, MIN_SCALE = 0.7;  // below 0.6 LiteGraph hides text
  let patched = false;

  function patchLiteGraph() {
    if (patched) return;
    patched = true;
    LiteGraph.debug = false;
    LiteGraph.NODE_TITLE_COLOR = "#ffffff";
    LiteGraph.NODE_SELECTED_TITLE_COLOR = "#ffffff";
    LiteGraph.NODE_TEXT_COLOR = "#d1d5db";
    LiteGraph.release_link_on_empty_shows_menu = false;
    const render = LGraphCanvas.prototype.renderLink;
    LGraphCanvas.prototype.renderLink = function (ctx, a, b, link, ...rest) {
      const dashed = link && link._channel === "link";
      if (dashed) ctx.setLineDash([8, 6]);
      try { return render.call(this, ctx, a, b, link, ...rest); } finally { if (dashed) ctx.setLineDash([]); }
    };
    function ViewNode() { this.properties = {}; }
    ViewNode.title = "Node";
    ViewNode.prototype.onDrawForeground = function (ctx) {
      const colour = STATE_COLOURS[this._state];
      if (!colour) return;
      const pulse = this._state === "running" ? 0.45 + 0.55 * Math.abs(Math.sin(Date.now() / 300)) : 1;
      ctx.save();
      ctx.globalAlpha = pulse;
      ctx.strokeStyle = colour;
      ctx.lineWidth = 4;
      ctx.strokeRect(-3, -LiteGraph.NODE_TITLE_HEIGHT - 3, this.size[0] + 6, this.size[1] + LiteGraph.NODE_TITLE_HEIGHT + 6);
      ctx.globalAlpha = 1;
      ctx.fillStyle = colour;
      ctx.font = "bold 12px sans-serif";
      ctx.fillText(this._state.replace("_", " "), 4, this.size[1] + 16);
      ctx.restore();
    };
    LiteGraph.registerNodeType("orchestrator/view", ViewNode);
  }

  function layered(graph) {
    const ids = graph.nodes.map((n) => n.id);
    const parents = new Map(ids.map((id) => [id, []]));
    for (const e of graph.edges || []) if (parents.has(e.target) && parents.has(e.source)) parents.get(e.target).push(e.source);
    const layer = new Map();
    const depth = (id, trail) => {
      if (layer.has(id)) return layer.get(id);
      if (trail.has(id)) return 0;
      trail.add(id);
      const d = Math.max(-1, ...parents.get(id).map((p) => depth(p, trail))) + 1;
      trail.delete(id);
      layer.set(id, d);
      return d;
    };
    ids.forEach((id) => depth(id, new Set()));
    const rows = new Map();
    const positions = {};
    for (const id of ids) {
      const d = layer.get(id);
      const row = rows.get(d) || 0;
      rows.set(d, row + 1);
      positions[id] = [d * (NODE_W + GAP_X) + 20, row * 0];
      positions[id]._row = row;
    }
    return positions;
  }

  function widgetFor(node, param, value) {
    const options = {};
    let type = "text";
    if (param.type === "boolean") type = "toggle";
    else if (param.type === "int" || param.type === "float") {
      type = "number";
      if (param.min != null) options.min = param.min;
      if (param.max != null) options.max = param.max;
      options.precision = param.type === "int" ? 0 : 2;
    } else if (param.type === "enum" && Array.isArray(param.values)) {
      type = "combo";
      options.values = param.values;
    }
    if (type === "text" && typeof value !== "string") value = value == null ? "" : JSON.stringify(value);
    const full = value;
    if (type === "text" && value.length > 22) value = value.slice(0, 21) + "…";  // label and value share one line
    if (type === "number" && typeof value !== "number") value = Number(value) || 0;
    const w = node.addWidget(type, param.label || param.id, value, () => {}, options);
    w._param = param.id;
    w._full = full;  // the untruncated value (the detail panel shows it; the editor will edit it)
    return w;
  }

  function slotStyle(slot, socketId, catalogue) {
    const socket = catalogue[socketId];
    if (!socket) return;
    slot.color_on = socket.color;
    slot.color_off = socket.color;
    slot.shape = SHAPES[socket.shape] || 3;
  }

  /* Draw ``graph`` into ``element``; ``defs`` maps node type -> definition,
     ``sockets`` socket id -> {color, shape}. Returns the view's handle. */
  function create(element, graph, defs, sockets) {
    patchLiteGraph();
    for (const [id, s] of Object.entries(sockets)) LGraphCanvas.link_type_colors[id] = s.color;
    const canvasEl = document.createElement("canvas");
    canvasEl.tabIndex = 0;
    canvasEl.setAttribute("role", "img");
    canvasEl.setAttribute("aria-label", `Canvas of graph ${graph.name || graph.id}: ${graph.nodes.length} nodes. The node list beside it is the keyboard way in.`);
    element.replaceChildren(canvasEl);
    const lg = new LGraph();
    const view = new LGraphCanvas(canvasEl, lg, { skip_events: false });
    view.allow_reconnect_links = false;
    view.allow_dragcanvas = true;
    view.allow_searchbox = false;
    view.render_canvas_border = false;
    view.show_info = false;
    view.getMenuOptions = () => [];
    view.getNodeMenuOptions = () => [];
    const auto = layered(graph);
    const byId = {};
    const rowsTop = {};
    for (const n of graph.nodes) {
      const def = defs[n.type] || { inputs: [], outputs: [], parameters: [], category: "" };
      const node = LiteGraph.createNode("orchestrator/view");
      node.title = n.name || n.id;
      node._graphId = n.id;
      node._state = "pending";
      const colour = def.color || CATEGORY_COLOURS[def.category] || "#475569";
      node.color = colour;
      node.bgcolor = "#1f2430";
      const handles = new Set();
      for (const p of def.inputs || []) { node.addInput(p.label || p.id, p.socket || "data"); slotStyle(node.inputs.at(-1), p.socket, sockets); node.inputs.at(-1)._handle = p.id; handles.add(p.id); }
      for (const p of def.parameters || []) {
        if (p.socket && (p.mode === "hybrid" || p.mode === "socket")) {
          node.addInput(p.label || p.id, p.socket.type);
          slotStyle(node.inputs.at(-1), p.socket.type, sockets);
          node.inputs.at(-1)._handle = p.id;
          handles.add(p.id);
        }
      }
      for (const p of def.outputs || []) { node.addOutput(p.label || p.id, p.socket || "data"); slotStyle(node.outputs.at(-1), p.socket, sockets); node.outputs.at(-1)._handle = p.id; }
      for (const e of graph.edges || []) {
        if (e.target === n.id && !handles.has(e.targetHandle)) { node.addInput(e.targetHandle, "data"); node.inputs.at(-1)._handle = e.targetHandle; handles.add(e.targetHandle); }
        if (e.source === n.id && !(node.outputs || []).some((o) => o._handle === e.sourceHandle)) { node.addOutput(e.sourceHandle, "data"); node.outputs.at(-1)._handle = e.sourceHandle; }
      }
      const data = n.data || {};
      for (const p of def.parameters || []) {
        if (p.mode === "socket") continue;
        widgetFor(node, p, data[p.id] !== undefined ? data[p.id] : p.default);
      }
      node.size = node.computeSize();
      node.size[0] = Math.max(node.size[0], NODE_W);
      const pos = n.position;
      if (pos && typeof pos.x === "number") node.pos = [pos.x, pos.y];
      else {
        const [x] = auto[n.id];
        const top = rowsTop[x] || 40;
        node.pos = [x, top];
        rowsTop[x] = top + node.size[1] + LiteGraph.NODE_TITLE_HEIGHT + GAP_Y;
      }
      lg.add(node);
      byId[n.id] = node;
    }
    for (const e of graph.edges || []) {
      const a = byId[e.source], b = byId[e.target];
      if (!a || !b) continue;
      const out = a.outputs.findIndex((o) => o._handle === e.sourceHandle);
      const inp = b.inputs.findIndex((i) => i._handle === e.targetHandle);
      if (out < 0 || inp < 0) continue;
      a.outputs[out].type = b.inputs[inp].type = b.inputs[inp].type || a.outputs[out].type;
      const link = a.connect(out, b, inp);
      const channel = (e.data && e.data.channel) || "flow";
      if (link) link._channel = channel;
      for (const w of b.widgets || []) if (w._param === e.targetHandle) w.disabled = true;  // wired: the control dims
    }
    const size = () => {
      canvasEl.width = Math.max(320, element.clientWidth);
      canvasEl.height = Math.max(300, element.clientHeight || 420);
      view.resize(canvasEl.width, canvasEl.height);
    };
    const fit = () => {
      const nodes = Object.values(byId);
      if (!nodes.length) return;
      const minX = Math.min(...nodes.map((n) => n.pos[0])) - 30;
      const minY = Math.min(...nodes.map((n) => n.pos[1])) - 60;
      const maxX = Math.max(...nodes.map((n) => n.pos[0] + n.size[0])) + 30;
      const maxY = Math.max(...nodes.map((n) => n.pos[1] + n.size[1])) + 40;
      const scale = Math.max(MIN_SCALE, Math.min(1.1, canvasEl.width / (maxX - minX), canvasEl.height / (maxY - minY)));
      view.ds.scale = scale;
      view.ds.offset = [-minX + Math.max(0, (canvasEl.width / scale - (maxX - minX)) / 2), -minY];
      view.setDirty(true, true);
    };
    size();
    fit();
    const observer = new ResizeObserver(() => { size(); fit(); });
    observer.observe(element);
    let selectHandler = null;
    view.onNodeSelected = (node) => selectHandler && selectHandler(node._graphId);
    view.onShowNodePanel = (node) => selectHandler && selectHandler(node._graphId);  // our panel, not LiteGraph's editor
    // View only: no key handling (LiteGraph's would delete, copy or paste nodes).
    canvasEl.removeEventListener("keydown", view._key_callback, true);
    document.removeEventListener("keyup", view._key_callback, true);
    const ticker = setInterval(() => {
      if (Object.values(byId).some((n) => n._state === "running" || n._state === "waiting")) view.setDirty(true, false);
    }, 80);
    return {
      setState(nodeId, state) { const n = byId[nodeId]; if (n) { n._state = state; view.setDirty(true, false); } },
      select(nodeId) { const n = byId[nodeId]; if (n) view.selectNode(n); },
      onSelect(fn) { selectHandler = fn; },
      /* Where each node is drawn now (after the user dragged any): {node id: {x, y}}. */
      positions() { return Object.fromEntries(Object.entries(byId).map(([id, n]) => [id, { x: Math.round(n.pos[0]), y: Math.round(n.pos[1]) }])); },
      destroy() { clearInterval(ticker); observer.disconnect(); view.stopRendering(); view.unbindEvents(); lg.stop(); },
    };
  }

  // The editor (editor.js) builds on the same drawing: patched LiteGraph, layout, styles.
  return { create, STATE_COLOURS, CATEGORY_COLOURS, SHAPES, NODE_W, patchLiteGraph, layered, slotStyle };
})();
window.GraphCanvas = GraphCanvas;
