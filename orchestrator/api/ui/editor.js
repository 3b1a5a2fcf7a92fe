/* The graph editor (#/graphs/new, #/graphs/<id>/edit): a palette generated from GET /nodes,
   LiteGraph's canvas in edit mode, wiring checked against the socket table served by
   GET /nodes/sockets (the kernel's own table), the whole graph checked by
   POST /graphs/validate (cycles with their path, upstream-only expressions, parameters)
   with each error pinned to the node, edge or parameter it names, undo/redo by graph
   JSON snapshots, save as a new version with ?base_version= (409 when someone saved in
   between), and runs watched on the same canvas. The JSON it writes is the graph format
   the CLI and API take. */
"use strict";

const Editor = (() => {
  const STATE = { started: "running", completed: "succeeded", error: "failed", retry: "retrying", skipped: "skipped", not_run: "not_run" };
  let rules = null;  // {generic: Set, pairs: Set("a>b")}
  let refusal = null;  // the last wire refused during a drop
  let inMouseUp = false, inDraw = false;

  function compatible(source, target) {
    if (!rules) return true;
    source = String(source || "data"); target = String(target || "data");
    return source === target || rules.generic.has(source) || rules.generic.has(target) || rules.pairs.has(`${source}>${target}`);
  }

  function patch() {
    if (Editor._patched) return;
    Editor._patched = true;
    GraphCanvas.patchLiteGraph();
    LiteGraph.isValidConnection = function (a, b) {
      // LiteGraph's drawNode asks (input, dragged output) while dimming inputs: reorder.
      const [source, target] = inDraw && this._reverse ? [b, a] : [a, b];
      const ok = compatible(source, target);
      if (!ok && inMouseUp) refusal = { source, target };
      return ok;
    };
    const drawNode = LGraphCanvas.prototype.drawNode;
    LGraphCanvas.prototype.drawNode = function (...args) {
      inDraw = true; LiteGraph._reverse = !!this.connecting_output;
      try { return drawNode.apply(this, args); } finally { inDraw = false; }
    };
    const up = LGraphCanvas.prototype.processMouseUp;
    LGraphCanvas.prototype.processMouseUp = function (e) {
      inMouseUp = true; refusal = null;
      try { return up.call(this, e); } finally {
        inMouseUp = false;
        if (refusal && this._onRefuse) this._onRefuse(refusal);
        refusal = null;
      }
    };
    function EditNode() { this.properties = {}; }
    EditNode.title = "Node";
    const base = LiteGraph.registered_node_types["orchestrator/view"].prototype.onDrawForeground;
    EditNode.prototype.onDrawForeground = function (ctx, canvas) {
      base.call(this, ctx);
      if (canvas && canvas.connecting_output && canvas.connecting_node !== this) {
        // While a wire is dragged: ring the inputs it may go into (the others are dimmed).
        ctx.save();
        ctx.strokeStyle = "#4ade80";
        ctx.lineWidth = 2;
        (this.inputs || []).forEach((input, i) => {
          if (!compatible(canvas.connecting_output.type, input.type)) return;
          const p = this.getConnectionPos(true, i);
          ctx.beginPath();
          ctx.arc(p[0] - this.pos[0], p[1] - this.pos[1], 7, 0, Math.PI * 2);
          ctx.stroke();
        });
        ctx.restore();
      }
      const marks = [];
      if (this._cycle) marks.push(["#ef4444", "in the refused cycle"]);
      if (this._error) marks.push(["#ef4444", this._error]);
      if (this._g && this._g.settings && this._g.settings.disabled) marks.push(["#a1a1aa", "disabled"]);
      if (!marks.length) return;
      ctx.save();
      ctx.font = "12px sans-serif";
      let y = this.size[1] + (this._state && this._state !== "pending" ? 32 : 16);
      for (const [colour, text] of marks) {
        ctx.fillStyle = colour;
        ctx.fillText(text.length > 70 ? text.slice(0, 69) + "…" : text, 0, y);
        y += 15;
      }
      if (this._error || this._cycle) { ctx.strokeStyle = "#ef4444"; ctx.lineWidth = 2; ctx.setLineDash([5, 4]); ctx.strokeRect(-6, -LiteGraph.NODE_TITLE_HEIGHT - 6, this.size[0] + 12, this.size[1] + LiteGraph.NODE_TITLE_HEIGHT + 12); }
      ctx.restore();
    };
    EditNode.prototype.onConnectionsChange = function (kind, slot, connected) {
      if (kind !== LiteGraph.INPUT) return;
      const input = this.inputs[slot];
      for (const w of this.widgets || []) if (w._param === input._handle) w.disabled = connected;  // the wire wins
      if (this._onWire) this._onWire(this, input, connected);
    };
    LiteGraph.registerNodeType("orchestrator/edit", EditNode);
  }

  async function loadRules() {
    if (!rules) {
      const data = await Api.call("GET", "/nodes/sockets");
      rules = { generic: new Set(data.generic), pairs: new Set(data.coercions.map(([a, b]) => `${a}>${b}`)) };
    }
    return rules;
  }

  const slug = (text) => String(text).toLowerCase().replace(/[^a-z0-9]+/g, "_").replace(/^_|_$/g, "") || "node";
  const clone = (v) => JSON.parse(JSON.stringify(v));
  /* A node's outputs as plain values per port ({port: {type, value}} -> {port: value}). */
  const plain = (outputs) => Object.fromEntries(Object.entries(outputs || {}).map(([k, v]) => [k, v && typeof v === "object" && "type" in v && "value" in v ? v.value : v]));

  /* The editor page. ``ctx``: {h, cat, graph (null for new), toast, errorBox, cleanups, after, icon, parseInput}. */
  function render(ctx) {
    const { h, cat, toast, icon } = ctx;
    patch();
    const original = ctx.graph ? clone(ctx.graph) : { id: "", name: "", description: "", nodes: [], edges: [], settings: {} };
    let baseVersion = ctx.graph ? ctx.graph.version : null;
    const meta = { id: original.id, name: original.name || "", description: original.description || "", settings: original.settings || {} };
    const lastOutputs = {};  // node id -> outputs of the last run seen here
    const pinned = new Map();
    let lg = null, view = null, selected = null, history = [], future = [], dirty = false, edgeSeq = 0, errorPin = null;

    // ------------------------------------------------------------ page skeleton
    const status = h("div", { id: "editor-status", class: "editor-status", "aria-live": "polite" });
    const problems = h("div", { id: "editor-problems", "aria-live": "assertive" });
    const conflict = h("div", { id: "editor-conflict" });
    const area = h("div", { class: "canvas editor-canvas", id: "canvas" });
    const panel = h("aside", { class: "detail", id: "node-panel", "aria-label": "Selected node" });
    const pins = h("div", { id: "pinned", class: "pinned" });
    const idField = h("input", { id: "graph-id", value: meta.id, placeholder: "graph id (letters, digits, - _)", "aria-label": "Graph id", disabled: !!ctx.graph });
    const nameField = h("input", { id: "graph-name", value: meta.name, placeholder: "Graph name", "aria-label": "Graph name", oninput: () => { meta.name = nameField.value; changed(); } });
    const runInput = h("textarea", { id: "editor-run-input", rows: 3, spellcheck: "false", "aria-label": "Run input (JSON)" }, "{}");
    const runError = h("div", { class: "field-error", id: "editor-run-error", "aria-live": "assertive" });
    const runLink = h("span", { id: "editor-run" });

    // ------------------------------------------------------------ palette
    const search = h("input", { type: "search", id: "palette-search", placeholder: "Search nodes", "aria-label": "Search nodes" });
    const paletteList = h("div", { class: "palette-list", id: "palette" });
    function drawPalette() {
      const q = search.value.toLowerCase();
      const groups = {};
      for (const d of cat.raw.nodes) {
        if (q && !`${d.name} ${d.id} ${d.description} ${d.category}`.toLowerCase().includes(q)) continue;
        (groups[d.category || "other"] = groups[d.category || "other"] || []).push(d);
      }
      paletteList.replaceChildren(...Object.entries(groups).sort().map(([category, list]) => h("section", {},
        h("h3", { class: "cat", style: `border-color:${GraphCanvas.CATEGORY_COLOURS[category] || "#475569"}` }, category),
        list.map((d) => {
          const item = h("button", { type: "button", class: "palette-item", dataset: { type: d.id }, title: d.description || d.name },
            icon(d.icon), h("span", { class: "pname" }, d.name), h("span", { class: "pdesc" }, d.description || ""));
          item.addEventListener("pointerdown", (e) => startDrag(e, d.id));
          item.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); addAtCentre(d.id); } });
          return item;
        }))));
      if (!paletteList.children.length) paletteList.append(h("p", { class: "empty" }, "No node matches."));
    }
    search.addEventListener("input", drawPalette);

    function startDrag(e, type) {
      e.preventDefault();
      const ghost = h("div", { class: "drag-ghost" }, (cat.defs[type] || {}).name || type);
      document.body.append(ghost);
      const sx = e.clientX, sy = e.clientY;
      const move = (m) => { ghost.style.left = `${m.clientX + 8}px`; ghost.style.top = `${m.clientY + 8}px`; };
      const drop = (u) => {
        document.removeEventListener("pointermove", move);
        document.removeEventListener("pointerup", drop);
        ghost.remove();
        const r = area.getBoundingClientRect();
        if (Math.abs(u.clientX - sx) + Math.abs(u.clientY - sy) < 4) { addAtCentre(type); return; }  // a click
        if (u.clientX < r.left || u.clientX > r.right || u.clientY < r.top || u.clientY > r.bottom) return;
        const [x, y] = view.convertEventToCanvasOffset(u);
        addNode(type, x, y);
      };
      move(e);
      document.addEventListener("pointermove", move);
      document.addEventListener("pointerup", drop);
    }
    function addAtCentre(type) {
      const [w, hgt] = [view.canvas.width, view.canvas.height];
      const [x, y] = view.ds.convertCanvasToOffset([w / 2 - 100, hgt / 2 - 40]);
      addNode(type, x + 20 * (lg._nodes.length % 5), y + 20 * (lg._nodes.length % 5));
    }

    // ------------------------------------------------------------ model <-> canvas
    function uniqueId(base) {
      const ids = new Set(lg._nodes.map((n) => n._g.id));
      let id = slug(base), i = 2;
      while (ids.has(id)) id = `${slug(base)}_${i++}`;
      return id;
    }
    function uniqueName(base) {
      const names = new Set(lg._nodes.map((n) => n._g.name));
      let name = base, i = 2;
      while (names.has(name)) name = `${base} ${i++}`;
      return name;
    }

    function widgetFor(node, p, value) {
      const opts = {};
      let type = "text";
      if (p.type === "boolean") type = "toggle";
      else if (p.type === "int" || p.type === "float") {
        type = p.min != null && p.max != null ? "slider" : "number";
        if (p.min != null) opts.min = p.min;
        if (p.max != null) opts.max = p.max;
        opts.precision = p.type === "int" ? 0 : 2;
        if (p.type === "int") opts.step = 10;  // LiteGraph's step is 10x the increment
      } else if (p.type === "enum" && Array.isArray(p.values)) { type = "combo"; opts.values = p.values; }
      let shown = value;
      if (type === "text") shown = value == null ? "" : typeof value === "string" ? value : JSON.stringify(value);
      if ((type === "number" || type === "slider") && typeof shown !== "number") shown = Number(shown) || (p.min || 0);
      if (type === "combo" && shown == null) shown = (p.values || [""])[0];
      if (type === "text") {
        // Text, JSON and model values are edited in the panel (full size, completion): the
        // canvas shows label and a shortened value, and a click opens the panel's field.
        const w = node.addCustomWidget({
          type: "param_text", name: p.label || p.id, value: shown, _param: p.id,
          draw(c, _node, width, y, height) {
            c.save();
            if (this.disabled) c.globalAlpha *= 0.45;
            c.fillStyle = "#222"; c.strokeStyle = "#666";
            c.beginPath(); c.roundRect(15, y, width - 30, height, [height / 2]); c.fill(); c.stroke();
            c.fillStyle = "#999"; c.textAlign = "left"; c.font = "12px sans-serif";
            const label = this.name;
            c.fillText(label, 30, y + height * 0.7);
            const room = Math.max(4, Math.floor((width - 70 - c.measureText(label).width) / 6.5));
            const text = String(this.value ?? "");
            c.fillStyle = /\{\{/.test(text) ? "#c4b5fd" : "#ddd"; c.textAlign = "right";
            c.fillText(text.length > room ? text.slice(0, room - 1) + "…" : text, width - 30, y + height * 0.7);
            c.restore();
          },
          mouse(event, _pos, n) {
            if (!/down$/.test(event.type)) return false;
            select(n._g.id);
            setTimeout(() => { const f = document.getElementById(`param-${p.id}`); if (f && !f.disabled) f.focus(); }, 0);
            return true;
          },
        });
        return w;
      }
      const w = node.addWidget(type, p.label || p.id, shown, (v) => {
        let next = v;
        if (type === "text" && (p.type === "json" || p.type === "array" || p.type === "object") && !/\{\{/.test(v)) {
          try { next = v.trim() ? JSON.parse(v) : null; } catch (err) { toast(`${p.label || p.id}: not valid JSON (${err.message})`, "error"); w.value = shown; return; }
        }
        if (type === "number" && p.type === "int") next = Math.round(v);
        setParam(node, p.id, next);
      }, opts);
      w._param = p.id;
      return w;
    }

    function buildNode(n) {
      const def = cat.defs[n.type] || { inputs: [], outputs: [], parameters: [], category: "" };
      const node = LiteGraph.createNode("orchestrator/edit");
      node._g = { id: n.id, type: n.type, name: n.name || n.id, data: clone(n.data || {}), settings: clone(n.settings || {}) };
      node._def = def;
      node._state = "pending";
      node.title = node._g.name;
      node.color = GraphCanvas.CATEGORY_COLOURS[def.category] || "#475569";
      node.bgcolor = "#1f2430";
      const addIn = (label, socket, handle, channel, param) => {
        node.addInput(label, socket);
        const s = node.inputs.at(-1);
        GraphCanvas.slotStyle(s, socket, cat.sockets);
        Object.assign(s, { _handle: handle, _channel: channel, _param: param, _socket: socket });
      };
      for (const p of def.inputs || []) addIn(p.label || p.id, p.socket || "data", p.id, p.channel || "flow", null);
      for (const p of def.parameters || []) if (p.socket && (p.mode === "hybrid" || p.mode === "socket")) addIn(`${p.label || p.id} ◂`, p.socket.type, p.id, p.socket.channel || "flow", p.id);
      const outs = [...(def.outputs || [])];
      if ((n.settings || {}).on_error === "error_port") outs.push({ id: "error", label: "error", socket: "data", channel: "flow" });
      for (const p of outs) {
        node.addOutput(p.label || p.id, p.socket || "data");
        const s = node.outputs.at(-1);
        GraphCanvas.slotStyle(s, p.socket || "data", cat.sockets);
        Object.assign(s, { _handle: p.id, _channel: p.channel || "flow", _socket: p.socket || "data" });
      }
      for (const p of def.parameters || []) {
        if (p.mode === "socket") continue;
        const v = node._g.data[p.id] !== undefined ? node._g.data[p.id] : p.default;
        widgetFor(node, p, v);
      }
      node.size = node.computeSize();
      node.size[0] = Math.max(node.size[0], GraphCanvas.NODE_W + 20);
      node._onWire = (_node, input, connected) => { if (!loading) { afterWire(input, connected); } };
      return node;
    }

    let loading = false;
    function load(graph) {
      loading = true;
      try {
        // LiteGraph's numeric node ids restart after clear(): drop its selection of the old nodes.
        view.deselectAllNodes();
        view.selected_nodes = {};
        view.current_node = null;
        view.node_dragged = null;
        lg.clear();
        const byId = {};
        const auto = GraphCanvas.layered(graph);
        const rowsTop = {};
        for (const n of graph.nodes) {
          const node = buildNode(n);
          if (n.position && typeof n.position.x === "number") node.pos = [n.position.x, n.position.y];
          else { const [x] = auto[n.id]; const top = rowsTop[x] || 40; node.pos = [x, top]; rowsTop[x] = top + node.size[1] + 70; }
          lg.add(node);
          byId[n.id] = node;
        }
        for (const e of graph.edges || []) {
          const a = byId[e.source], b = byId[e.target];
          if (!a || !b) continue;
          const out = a.outputs.findIndex((o) => o._handle === e.sourceHandle);
          const inp = b.inputs.findIndex((i) => i._handle === e.targetHandle);
          if (out < 0 || inp < 0) continue;
          const link = a.connect(out, b, inp);
          if (link) { link._edgeId = e.id; link._channel = (e.data && e.data.channel) || b.inputs[inp]._channel; }
        }
        edgeSeq = Math.max(0, ...(graph.edges || []).map((e) => Number(/^e(\d+)$/.exec(e.id || "")?.[1] || 0)));
      } finally { loading = false; }
      view.setDirty(true, true);
    }

    /* The graph JSON in the API's format (positions included). */
    function toJSON() {
      const nodes = lg._nodes.map((n) => {
        const out = { id: n._g.id, type: n._g.type, name: n._g.name, data: n._g.data, position: { x: Math.round(n.pos[0]), y: Math.round(n.pos[1]) } };
        if (Object.keys(n._g.settings || {}).length) out.settings = n._g.settings;
        return out;
      });
      const edges = [];
      for (const link of Object.values(lg.links || {})) {
        if (!link) continue;
        const a = lg.getNodeById(link.origin_id), b = lg.getNodeById(link.target_id);
        if (!a || !b) continue;
        if (!link._edgeId) link._edgeId = `e${++edgeSeq}`;
        const input = b.inputs[link.target_slot];
        edges.push({ id: link._edgeId, source: a._g.id, sourceHandle: a.outputs[link.origin_slot]._handle, target: b._g.id, targetHandle: input._handle, data: { channel: link._channel || input._channel || "flow" } });
      }
      edges.sort((x, y) => x.id.localeCompare(y.id, undefined, { numeric: true }));
      const g = { id: meta.id || idField.value.trim(), name: meta.name, nodes, edges };
      if (meta.description) g.description = meta.description;
      if (Object.keys(meta.settings || {}).length) g.settings = meta.settings;
      return g;
    }
    const byGraphId = (id) => lg._nodes.find((n) => n._g.id === id);

    // ------------------------------------------------------------ history
    function snapshot() { return JSON.stringify(toJSON()); }
    function commit() {
      const s = snapshot();
      if (history.at(-1) === s) return;
      history.push(s);
      if (history.length > 200) history.shift();
      future = [];
      dirty = history.length > 1 || dirty;
      status.textContent = `${dirty ? "Unsaved changes" : "Saved"} · base version ${baseVersion || "none"}`;
      validateSoon();
    }
    function changed() { setTimeout(commit, 0); }
    function undo() { if (history.length < 2) return; future.push(history.pop()); restore(history.at(-1)); toast("Undone"); }
    function redo() { if (!future.length) return; const s = future.pop(); history.push(s); restore(s); toast("Redone"); }
    function restore(s) { const sel = selected; load(JSON.parse(s)); dirty = true; select(sel && byGraphId(sel) ? sel : null); validateSoon(); }

    // ------------------------------------------------------------ editing
    function addNode(type, x, y) {
      const def = cat.defs[type];
      if (!def) return null;
      const n = { id: uniqueId(type), type, name: uniqueName(def.name || type), data: {} };
      const node = buildNode(n);
      node.pos = [x, y];
      lg.add(node);
      commit();
      select(n.id);
      return n.id;
    }
    function setParam(node, pid, value) {
      if (value === "" || value === undefined) delete node._g.data[pid]; else node._g.data[pid] = value;
      const w = (node.widgets || []).find((x) => x._param === pid);
      if (w && document.activeElement && document.activeElement.dataset && document.activeElement.dataset.param === pid) {
        w.value = typeof value === "object" && value !== null ? JSON.stringify(value) : value ?? "";
      }
      view.setDirty(true, false);
      commit();
    }
    function afterWire(input, connected) {
      if (connected) {
        const link = lg.links[input.link];
        if (link) link._channel = input._channel || "flow";  // flow or link, from the target's definition
      }
      changed();
      if (selected) drawPanel();
    }
    function deleteSelected() {
      const nodes = Object.values(view.selected_nodes || {});
      if (!nodes.length) return;
      for (const n of nodes) lg.remove(n);
      select(null);
      commit();
    }
    let clipboard = null;
    function copy() {
      const ids = new Set(Object.values(view.selected_nodes || {}).map((n) => n._g.id));
      if (!ids.size) return;
      const g = toJSON();
      clipboard = { nodes: g.nodes.filter((n) => ids.has(n.id)), edges: g.edges.filter((e) => ids.has(e.source) && ids.has(e.target)) };
      toast(`Copied ${ids.size} node${ids.size > 1 ? "s" : ""}`);
    }
    function paste() {
      if (!clipboard) return;
      const g = toJSON();
      const rename = {};
      for (const n of clipboard.nodes) {
        const id = uniqueId(n.type);
        rename[n.id] = id;
        const copyName = uniqueName(n.name);
        g.nodes.push({ ...clone(n), id, name: copyName, position: { x: n.position.x + 40, y: n.position.y + 40 } });
        lg.add(Object.assign(buildNode({ ...n, id, name: copyName }), { pos: [n.position.x + 40, n.position.y + 40] }));
      }
      for (const e of clipboard.edges) {
        const a = byGraphId(rename[e.source]), b = byGraphId(rename[e.target]);
        const out = a.outputs.findIndex((o) => o._handle === e.sourceHandle), inp = b.inputs.findIndex((i) => i._handle === e.targetHandle);
        if (out >= 0 && inp >= 0) a.connect(out, b, inp);
      }
      commit();
    }
    function autoLayout() {
      const g = toJSON();
      const auto = GraphCanvas.layered({ nodes: g.nodes, edges: g.edges });
      const tops = {};
      for (const n of lg._nodes) {
        const [x] = auto[n._g.id];
        const top = tops[x] || 40;
        n.pos = [x + 20, top];
        tops[x] = top + n.size[1] + 80;
      }
      view.setDirty(true, true);
      commit();
    }
    function rename(node, name) {
      const old = node._g.name;
      if (!name || name === old) return;
      node._g.name = name;
      node.title = name;
      const touched = [];
      const esc = old.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      const re = new RegExp(`\\$\\((['"])${esc}\\1\\)`, "g");
      const fix = (v) => (typeof v === "string" ? v.replace(re, (_m, q) => `$(${q}${name}${q})`) : Array.isArray(v) ? v.map(fix) : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fix(x)])) : v);
      for (const n of lg._nodes) {
        const before = JSON.stringify(n._g.data);
        n._g.data = fix(n._g.data);
        if (JSON.stringify(n._g.data) !== before) {
          touched.push(n._g.name);
          for (const w of n.widgets || []) if (w._param && n._g.data[w._param] !== undefined && typeof n._g.data[w._param] === "string") w.value = n._g.data[w._param];
        }
      }
      toast(touched.length ? `Renamed; references updated in: ${touched.join(", ")}` : "Renamed; no expression referenced the old name");
      commit();
    }

    // ------------------------------------------------------------ validation and pins
    let validateTimer = null, validateSeq = 0;
    function validateSoon() { clearTimeout(validateTimer); validateTimer = setTimeout(validate, 250); }
    async function validate() {
      const seq = ++validateSeq;
      const g = toJSON();
      if (!g.nodes.length) { pin(null); return null; }
      let answer;
      try { answer = await Api.call("POST", "/graphs/validate", { ...g, id: g.id || "draft" }); } catch (_) { return null; }
      const err = answer.valid ? null : new Api.ApiError(422, { error: answer.error });
      if (seq === validateSeq) pin(err);
      return err;
    }
    function pin(err) {
      errorPin = err;
      for (const n of lg._nodes) { n._error = null; }
      for (const l of Object.values(lg.links || {})) if (l) l.color = null;
      problems.replaceChildren();
      if (err) {
        const w = err.where || {};
        const node = w.node_id && byGraphId(w.node_id);
        if (node) node._error = (w.parameter ? `${w.parameter}: ` : "") + err.message;
        if (w.edge_id) for (const l of Object.values(lg.links || {})) if (l && l._edgeId === w.edge_id) l.color = "#ef4444";
        const box = ctx.errorBox(err);
        box.id = "editor-error";
        box.dataset.type = w.type || "";
        if (w.node_id) box.dataset.node = w.node_id;
        if (w.edge_id) box.dataset.edge = w.edge_id;
        if (w.parameter) box.dataset.parameter = w.parameter;
        problems.append(box);
      }
      view.setDirty(true, true);
      // Pin parameter errors in the open panel without redrawing it (keeps the focus).
      for (const el of panel.querySelectorAll("[data-pinned]")) el.remove();
      const w = (err && err.where) || {};
      if (w.parameter && w.node_id === selected) {
        const wrap = panel.querySelector(`.param[data-param="${CSS.escape(w.parameter)}"]`);
        if (wrap) wrap.append(h("div", { class: "field-error", dataset: { pinned: w.parameter } }, err.message));
      }
    }
    async function checkCycle(input) {
      // A new wire that closes a flow or link cycle is refused, with the cycle's path drawn.
      const err = await validate();
      const type = err && err.where && err.where.type;
      if (!err || !["CycleError", "LinkCycleError"].includes(type)) return;
      const path = err.where.path || [];
      commit();
      history.pop();  // the refused wire never happened: back to the graph before it
      restore(history.at(-1));
      for (const n of lg._nodes) n._cycle = path.includes(n._g.name) || path.includes(n._g.id);
      setTimeout(() => { for (const n of lg._nodes) n._cycle = false; view.setDirty(true, true); }, 4000);
      toast(`Refused: ${err.message}`, "error");
      problems.replaceChildren(h("div", { class: "error", role: "alert", id: "wire-refused", dataset: { type } }, `Wire refused: ${err.message}` + (path.length ? ` (path: ${path.join(" → ")})` : "")));
    }

    function onRefuse(r) {
      const a = (word) => (/^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`);
      const message = `Wire refused: ${a(r.source)} output cannot feed ${a(r.target)} socket (the socket table has no ${r.source} → ${r.target} coercion)`;
      toast(message, "error");
      problems.replaceChildren(h("div", { class: "error", role: "alert", id: "wire-refused", dataset: { source: r.source, target: r.target } }, message));
    }

    // ------------------------------------------------------------ node panel
    function upstreamNames(nodeId) {
      const parents = {};
      for (const l of Object.values(lg.links || {})) {
        if (!l) continue;
        const a = lg.getNodeById(l.origin_id), b = lg.getNodeById(l.target_id);
        (parents[b._g.id] = parents[b._g.id] || []).push(a._g.id);
      }
      const seen = new Set(), stack = [...(parents[nodeId] || [])];
      while (stack.length) { const id = stack.pop(); if (seen.has(id)) continue; seen.add(id); stack.push(...(parents[id] || [])); }
      return [...seen].map((id) => byGraphId(id)).filter(Boolean);
    }
    function suggestions(nodeId) {
      const out = ["input", "input.message"];
      for (const n of upstreamNames(nodeId)) {
        const ref = `$('${n._g.name}').item.json`;
        out.push(ref);
        const outputs = lastOutputs[n._g.id];
        const value = outputs && (outputs.output !== undefined ? outputs.output : Object.values(outputs)[0]);
        const first = Array.isArray(value) ? value[0] : value;
        if (first && typeof first === "object") for (const k of Object.keys(first).slice(0, 20)) out.push(`${ref}.${k}`);
      }
      return out;
    }
    function completer(field, nodeId) {
      const list = h("ul", { class: "suggest", role: "listbox", hidden: true });
      const update = () => {
        const before = field.value.slice(0, field.selectionStart);
        const open = before.lastIndexOf("{{");
        if (open < 0 || before.lastIndexOf("}}") > open) { list.hidden = true; return; }
        const typed = before.slice(open + 2).trim();
        const items = suggestions(nodeId).filter((s) => s.toLowerCase().startsWith(typed.toLowerCase()) || !typed);
        list.replaceChildren(...items.map((s) => h("li", {}, h("button", { type: "button", class: "suggestion", onmousedown: (e) => {
          e.preventDefault();
          const after = field.value.slice(field.selectionStart);
          const head = field.value.slice(0, open + 2) + " " + s + " ";
          field.value = head + (after.trimStart().startsWith("}}") ? after.trimStart() : "}}" + after);
          field.selectionStart = field.selectionEnd = head.length;
          field.dispatchEvent(new Event("change"));
          list.hidden = true;
        } }, s))));
        list.hidden = !items.length;
      };
      field.addEventListener("input", update);
      field.addEventListener("click", update);
      field.addEventListener("blur", () => setTimeout(() => { list.hidden = true; }, 100));
      return list;
    }

    function paramField(node, p) {
      const value = node._g.data[p.id] !== undefined ? node._g.data[p.id] : p.default;
      const wired = (node.inputs || []).some((i) => i._param === p.id && i.link != null);
      const id = `param-${p.id}`;
      const attrs = { id, dataset: { param: p.id }, disabled: wired, "aria-describedby": `${id}-help` };
      let field;
      const str = (v) => (v == null ? "" : typeof v === "string" ? v : JSON.stringify(v, null, 1));
      const commitValue = (v) => setParam(node, p.id, v);
      if (p.type === "boolean") {
        field = h("input", { ...attrs, type: "checkbox", checked: value === true, onchange: () => { commitValue(field.checked); syncWidget(node, p.id, field.checked); } });
      } else if (p.type === "enum" && Array.isArray(p.values)) {
        field = h("select", { ...attrs, onchange: () => { commitValue(field.value); syncWidget(node, p.id, field.value); } }, h("option", { value: "" }, "—"), p.values.map((v) => h("option", { value: v, selected: v === value }, v)));
      } else if ((p.type === "int" || p.type === "float") && typeof value !== "string") {
        const slider = p.min != null && p.max != null;
        field = h("input", { ...attrs, type: slider ? "range" : "number", min: p.min, max: p.max, step: p.type === "int" ? 1 : slider ? (p.max - p.min) / 100 : "any", value: value ?? "", onchange: () => { const v = field.value === "" ? undefined : Number(field.value); commitValue(v); syncWidget(node, p.id, v); } });
      } else if (p.type === "json" || p.type === "array" || p.type === "object" || p.type === "text" || p.type === "graph") {
        field = h("textarea", { ...attrs, rows: p.type === "text" ? 4 : 3, spellcheck: "false", class: p.type === "text" ? "" : "json-edit", onchange: () => {
          const raw = field.value;
          if (p.type !== "text" && !/\{\{/.test(raw)) {
            const parsed = ctx.parseInput(raw);
            if (parsed.error) { field.setAttribute("aria-invalid", "true"); help.textContent = parsed.error; return; }
            field.removeAttribute("aria-invalid");
            commitValue(parsed.value ?? undefined); syncWidget(node, p.id, parsed.value);
          } else { commitValue(raw); syncWidget(node, p.id, raw); }
        } }, str(value));
      } else {
        field = h("input", { ...attrs, type: "text", value: str(value), list: p.type === "model" ? "model-list" : null, onchange: () => { commitValue(field.value); syncWidget(node, p.id, field.value); } });
      }
      const help = h("div", { id: `${id}-help`, class: "muted small" }, wired ? "Wired: the wire's value wins over this control." : p.description || "");
      const err = errorPin && errorPin.where && errorPin.where.node_id === node._g.id && errorPin.where.parameter === p.id ? h("div", { class: "field-error", dataset: { pinned: p.id } }, errorPin.message) : null;
      const expr = typeof value === "string" && /\{\{/.test(value);
      const wrap = h("div", { class: `param${wired ? " wired" : ""}${expr ? " expr" : ""}`, dataset: { param: p.id } },
        h("label", { for: id }, p.label || p.id, p.required ? " *" : "", h("span", { class: "muted" }, ` ${p.type}`)), field, help, err);
      if (field.tagName !== "SELECT" && field.type !== "checkbox" && field.type !== "range" && field.type !== "number") wrap.append(completer(field, node._g.id));
      return wrap;
    }
    function syncWidget(node, pid, v) {
      const w = (node.widgets || []).find((x) => x._param === pid);
      if (!w) return;
      w.value = w.type === "text" ? (v == null ? "" : typeof v === "string" ? v : JSON.stringify(v)) : v;
      view.setDirty(true, false);
    }

    let settingsOpen = false;
    function settingsFields(node) {
      const s = node._g.settings;
      const retry = s.retry || {};
      const id = node._g.id;
      const set = (fn) => {
        const st = byGraphId(id)._g.settings;  // the node as it is now (a reload rebuilds nodes)
        fn(st);
        if (!Object.keys(st.retry || {}).length) delete st.retry;
        load(toJSON());
        selected = null;
        select(id);
        commit();
      };
      return h("details", { class: "settings", open: settingsOpen || Object.keys(s).length > 0, ontoggle: (e) => { settingsOpen = e.target.open; } },
        h("summary", {}, "Node settings"),
        h("label", { for: "set-attempts" }, "Retry: max attempts"),
        h("input", { id: "set-attempts", type: "number", min: 1, max: 100, value: retry.max_attempts || 1, onchange: (e) => set((s) => { const v = Number(e.target.value); s.retry = { ...(s.retry || {}), max_attempts: v }; if (v <= 1) delete s.retry.max_attempts; }) }),
        h("label", { for: "set-interval" }, "Retry: first wait (s)"),
        h("input", { id: "set-interval", type: "number", min: 0, step: "any", value: retry.initial_interval_s ?? "", onchange: (e) => set((s) => { s.retry = { ...(s.retry || {}) }; if (e.target.value === "") delete s.retry.initial_interval_s; else s.retry.initial_interval_s = Number(e.target.value); }) }),
        h("label", { for: "set-on-error" }, "On error"),
        h("select", { id: "set-on-error", onchange: (e) => set((s) => { if (e.target.value === "stop") delete s.on_error; else s.on_error = e.target.value; }) },
          ["stop", "continue", "error_port"].map((m) => h("option", { value: m, selected: (s.on_error || "stop") === m }, m === "error_port" ? "error port (route the error)" : m))),
        h("label", { for: "set-timeout" }, "Timeout (s)"),
        h("input", { id: "set-timeout", type: "number", min: 0, step: "any", value: s.timeout_s ?? "", onchange: (e) => set((s) => { if (e.target.value === "" || Number(e.target.value) <= 0) delete s.timeout_s; else s.timeout_s = Number(e.target.value); }) }),
        h("label", {}, h("input", { id: "set-disabled", type: "checkbox", checked: !!s.disabled, onchange: (e) => set((s) => { if (e.target.checked) s.disabled = true; else delete s.disabled; }) }), " Disabled (skipped at run time)"));
    }

    function drawPanel() {
      const node = selected && byGraphId(selected);
      if (!node) { panel.replaceChildren(h("p", { class: "muted" }, "Drag a node from the palette onto the canvas, or select one to edit it. Keys: Delete, Ctrl+C / Ctrl+V, Ctrl+Z / Ctrl+Shift+Z.")); return; }
      const def = node._def;
      const nameInput = h("input", { id: "node-name", value: node._g.name, "aria-label": "Node name", onchange: () => rename(node, nameInput.value.trim()) });
      const out = lastOutputs[node._g.id];
      panel.replaceChildren(h("div", {},
        h("h2", {}, icon(def.icon), " ", node._g.name), h("p", { class: "mono muted" }, `${node._g.id} · ${node._g.type}`),
        h("label", { for: "node-name" }, "Name"), nameInput,
        h("p", { class: "muted small" }, def.description || ""),
        h("h3", {}, "Parameters"),
        (def.parameters || []).filter((p) => p.mode !== "socket").map((p) => paramField(node, p)),
        settingsFields(node),
        h("h3", {}, "Last output"),
        out ? [h("button", { type: "button", id: "pin-output", onclick: () => { pinned.set(node._g.id, true); drawPins(); } }, "Pin this output"), h("pre", { class: "json" }, JSON.stringify(out, null, 2))] : h("p", { class: "muted" }, "Not run yet from here."),
        h("button", { type: "button", class: "danger", id: "delete-node", onclick: () => { view.selectNode(node); deleteSelected(); } }, "Delete node")));
    }
    function drawPins() {
      pins.replaceChildren(...[...pinned.keys()].map((id) => {
        const n = byGraphId(id);
        return h("div", { class: "card pin", dataset: { node: id } }, h("strong", {}, `📌 ${n ? n._g.name : id}`), " ",
          h("button", { type: "button", class: "unpin", onclick: () => { pinned.delete(id); drawPins(); } }, "Unpin"),
          h("pre", { class: "json" }, JSON.stringify(lastOutputs[id] ?? null, null, 2)));
      }));
    }
    function select(id) {
      selected = id;
      const node = id && byGraphId(id);
      if (node && !(view.selected_nodes || {})[node.id]) view.selectNode(node);
      drawPanel();
    }

    // ------------------------------------------------------------ save and run
    async function save() {
      const g = toJSON();
      conflict.replaceChildren();
      if (!g.id) { toast("Give the graph an id first", "error"); idField.focus(); return null; }
      try {
        const saved = baseVersion == null
          ? await Api.call("POST", "/graphs", g)
          : await Api.call("PUT", `/graphs/${encodeURIComponent(g.id)}?base_version=${baseVersion}`, g);
        const isNew = baseVersion == null;
        baseVersion = saved.version;
        meta.id = saved.id;
        dirty = false;
        status.textContent = `Saved as version ${saved.version}`;
        toast(`Saved as version ${saved.version}`);
        idField.disabled = true;
        pin(null);
        if (isNew) history_replace(saved.id);
        return saved;
      } catch (err) {
        if (err.status === 409 && baseVersion != null) {
          conflict.replaceChildren(h("div", { class: "error conflict", role: "alert", id: "save-conflict" },
            h("strong", {}, "Not saved: "), err.message, " Your edits are kept here. ",
            h("a", { href: `#/graphs/${encodeURIComponent(g.id)}`, target: "_blank" }, "See the latest version"), " ",
            h("button", { type: "button", id: "save-over", onclick: async () => {
              const latest = await Api.call("GET", `/graphs/${encodeURIComponent(g.id)}`);
              baseVersion = latest.version;
              conflict.replaceChildren();
              save();
            } }, `Save mine on top of it anyway`)));
          status.textContent = "Conflict: not saved";
        } else if (err.status === 422) { pin(err); toast(err.message, "error"); }
        else toast(err.message, "error");
        return null;
      }
    }
    function history_replace(id) { window.history.replaceState(null, "", `#/graphs/${encodeURIComponent(id)}/edit`); }

    let stream = null;
    async function run() {
      runError.textContent = "";
      const parsed = ctx.parseInput(runInput.value);
      if (parsed.error) { runError.textContent = parsed.error; return; }
      if (dirty || baseVersion == null) { const saved = await save(); if (!saved) { runError.textContent = "Save the graph first (see above)."; return; } }
      for (const n of lg._nodes) n._state = "queued";
      view.setDirty(true, false);
      try {
        const r = await Api.call("POST", `/graphs/${encodeURIComponent(meta.id)}/runs`, { input: parsed.value, version: baseVersion });
        runLink.replaceChildren("Run ", h("a", { href: `#/runs/${encodeURIComponent(r.run_id)}`, class: "mono", id: "editor-run-link" }, r.run_id.slice(0, 12)), " ", h("span", { id: "editor-run-status", dataset: { status: "running" } }, "running"));
        watch(r.run_id);
      } catch (err) { runError.replaceChildren(ctx.errorBox(err)); }
    }
    function watch(runId) {
      if (stream) stream.close();
      const terminal = { run_completed: "succeeded", run_failed: "failed", run_cancelled: "cancelled", run_timed_out: "timed_out" };
      stream = Api.follow(runId, {
        types: ["started", "completed", "error", "retry", "skipped", "not_run", ...Object.keys(terminal)],
        onEvent(type, e) {
          if (terminal[type]) {
            for (const n of lg._nodes) if (n._state === "queued") n._state = "not_run";
            const st = document.getElementById("editor-run-status");
            if (st) { st.textContent = terminal[type]; st.dataset.status = terminal[type]; }
            Api.call("GET", `/runs/${encodeURIComponent(runId)}`).then((detail) => {
              for (const [nid, n] of Object.entries(detail.nodes || {})) if (n.outputs && Object.keys(n.outputs).length) lastOutputs[nid] = plain(n.outputs);
              drawPins(); if (selected) drawPanel();
            }).catch(() => {});
          } else if (e && e.node_id) {
            const node = byGraphId(e.node_id);
            if (node && STATE[type]) node._state = STATE[type];
            if (type === "completed" && e.data && e.data.outputs) lastOutputs[e.node_id] = plain(e.data.outputs);
            if (type === "completed" && e.data && e.data.outputs_truncated) {  // a preview: read the stored outputs
              Api.call("GET", `/runs/${encodeURIComponent(runId)}`).then((detail) => {
                const n = (detail.nodes || {})[e.node_id];
                if (n && n.outputs) { lastOutputs[e.node_id] = plain(n.outputs); drawPins(); if (selected) drawPanel(); }
              }).catch(() => {});
            }
          }
          view.setDirty(true, false);
        },
      });
      ctx.cleanups.push(() => stream && stream.close());
    }

    // ------------------------------------------------------------ mount
    const models = [...new Set(cat.raw.nodes.flatMap((d) => (d.parameters || []).filter((p) => p.type === "model" && p.default).map((p) => p.default)).concat(["dryrun:demo"]))];
    ctx.after(async () => {
      lg = new LGraph();
      const canvasEl = document.createElement("canvas");
      canvasEl.tabIndex = 0;
      canvasEl.setAttribute("role", "application");
      canvasEl.setAttribute("aria-label", "Graph editor canvas. Drag nodes from the palette; the panel beside it edits the selected node.");
      area.replaceChildren(canvasEl);
      view = new LGraphCanvas(canvasEl, lg, { skip_events: false });
      Object.assign(view, { allow_searchbox: false, render_canvas_border: false, show_info: false, allow_reconnect_links: true, allow_dragcanvas: true });
      view.getMenuOptions = () => [];
      view.getNodeMenuOptions = () => [];
      view.getCanvasMenuOptions = () => [];
      view._onRefuse = onRefuse;
      view.onNodeSelected = (n) => { selected = n._g.id; drawPanel(); };
      view.onNodeDeselected = () => {};
      view.onShowNodePanel = (n) => select(n._g.id);
      canvasEl.removeEventListener("keydown", view._key_callback, true);
      document.removeEventListener("keyup", view._key_callback, true);
      const onKey = (e) => {
        const mod = e.ctrlKey || e.metaKey;
        if (e.key === "Delete" || e.key === "Backspace") { e.preventDefault(); deleteSelected(); }
        else if (mod && e.key.toLowerCase() === "c") { e.preventDefault(); copy(); }
        else if (mod && e.key.toLowerCase() === "v") { e.preventDefault(); paste(); }
        else if (mod && e.key.toLowerCase() === "z" && !e.shiftKey) { e.preventDefault(); undo(); }
        else if (mod && (e.key.toLowerCase() === "y" || (e.key.toLowerCase() === "z" && e.shiftKey))) { e.preventDefault(); redo(); }
      };
      canvasEl.addEventListener("keydown", onKey);
      canvasEl.addEventListener("pointerup", () => setTimeout(commit, 0));
      const size = () => { canvasEl.width = Math.max(320, area.clientWidth); canvasEl.height = Math.max(300, area.clientHeight || 520); view.resize(canvasEl.width, canvasEl.height); };
      size();
      const observer = new ResizeObserver(size);
      observer.observe(area);
      // Connections: a link into a node's input closes a cycle? ask the API.
      const onConnect = LGraphNode.prototype.onConnectionsChange;
      void onConnect;
      lg.onNodeConnectionChange = (kind, node, slot, _other, _otherSlot) => {
        if (loading || kind !== LiteGraph.INPUT) return;
        const input = node.inputs[slot];
        if (input && input.link != null) setTimeout(() => checkCycle(input), 0);
      };
      load(original);
      view.ds.scale = 1;
      view.ds.offset = [20, 60 + Math.max(0, -Math.min(0, ...lg._nodes.map((n) => n.pos[1])))];
      await loadRules();
      history = [snapshot()];
      status.textContent = ctx.graph ? `Editing version ${baseVersion}` : "New graph (not saved)";
      drawPanel();
      if (lg._nodes.length) validateSoon();
      window.EditorTest = {
        // Test and automation hooks: where things are on screen, and the JSON being edited.
        graph: toJSON,
        slot(nodeId, dir, handle) {
          const n = byGraphId(nodeId);
          const list = dir === "in" ? n.inputs : n.outputs;
          const i = list.findIndex((s) => s._handle === handle);
          const p = n.getConnectionPos(dir === "in", i);
          return screenPoint(p);
        },
        title(nodeId) { const n = byGraphId(nodeId); return screenPoint([n.pos[0] + 30, n.pos[1] - LiteGraph.NODE_TITLE_HEIGHT / 2]); },
        widget(nodeId, pid) { const n = byGraphId(nodeId); const w = n.widgets.find((x) => x._param === pid); return { disabled: !!w.disabled, value: w.value }; },
        free(dx) { const maxX = Math.max(0, ...lg._nodes.map((n) => n.pos[0] + n.size[0])); return screenPoint([maxX + (dx || 60), 80]); },
        at(x, y) { return screenPoint([x, y]); },
        nodes() { return lg._nodes.map((n) => n._g.id); },
      };
      area.dataset.ready = "true";
      function screenPoint(p) {
        const c = view.ds.convertOffsetToCanvas(p);
        const r = canvasEl.getBoundingClientRect();
        return { x: r.left + c[0], y: r.top + c[1] };
      }
      ctx.cleanups.push(() => { observer.disconnect(); view.stopRendering(); view.unbindEvents(); lg.stop(); delete window.EditorTest; });
      if (ctx.graph) {
        Api.call("GET", `/graphs/${encodeURIComponent(ctx.graph.id)}/runs?limit=1`).then(async (runs) => {
          const last = runs.items[0];
          if (!last) return;
          const detail = await Api.call("GET", `/runs/${encodeURIComponent(last.run_id)}`);
          for (const [nid, n] of Object.entries(detail.nodes || {})) if (n.outputs && Object.keys(n.outputs).length) lastOutputs[nid] = plain(n.outputs);
        }).catch(() => {});
      }
    });
    const leaving = (e) => { if (dirty) e.preventDefault(); };  // unsaved edits: the browser asks first
    window.addEventListener("beforeunload", leaving);
    ctx.cleanups.push(() => window.removeEventListener("beforeunload", leaving));

    drawPalette();
    return [
      h("div", { class: "title-row editor-bar" },
        h("h1", {}, ctx.graph ? `Edit ${ctx.graph.name || ctx.graph.id}` : "New graph"), idField, nameField,
        h("button", { type: "button", id: "undo", title: "Undo (Ctrl+Z)", onclick: undo }, "Undo"),
        h("button", { type: "button", id: "redo", title: "Redo (Ctrl+Shift+Z)", onclick: redo }, "Redo"),
        h("button", { type: "button", id: "auto-layout", onclick: autoLayout }, "Auto-layout"),
        h("button", { type: "button", id: "save-graph", class: "primary", onclick: save }, "Save"),
        ctx.graph ? h("a", { class: "button", href: `#/graphs/${encodeURIComponent(ctx.graph.id)}` }, "Close editor") : null),
      status, conflict, problems,
      h("datalist", { id: "model-list" }, models.map((m) => h("option", { value: m }))),
      h("div", { class: "editor" },
        h("div", { class: "palette-pane" }, h("h2", {}, "Nodes"), search, paletteList),
        area,
        h("div", { class: "side" }, panel)),
      pins,
      h("section", { class: "card", id: "editor-run-card" }, h("h2", {}, "Run from the editor"),
        h("label", { for: "editor-run-input" }, "Input (JSON)"), runInput, runError,
        h("button", { type: "button", id: "editor-run-button", onclick: run }, "Save and run"), " ", runLink),
    ];
  }

  return { render, compatible, loadRules };
})();
window.Editor = Editor;
