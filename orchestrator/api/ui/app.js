/* The console's pages (hash routes): #/graphs, #/graphs/<id>[?version=n], #/runs[?status=],
   #/runs/<run id>, #/chat/<graph id>[/<chat id>], #/nodes. Each page renders into <main>
   from the API and cleans up what it started (event streams, canvases) when left. */
"use strict";

const App = (() => {
  const main = document.getElementById("main");
  let cleanups = [];
  let catalogue = null;

  /* DOM builder: h("div", {class: "x", onclick: fn}, "text", child, [children]) */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat(3)) if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
    return el;
  }
  const fmtTime = (s) => (s ? new Date(s * 1000).toLocaleString() : "");
  const fmtMs = (ms) => (ms == null ? "" : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`);
  const badge = (status) => h("span", { class: `badge s-${status}`, dataset: { status } }, String(status).replace("_", " "));
  const enc = encodeURIComponent;

  function toast(message, kind = "info") {
    const t = document.getElementById("toast");
    t.textContent = message;
    t.className = `show ${kind}`;
    clearTimeout(t._timer);
    t._timer = setTimeout(() => { t.className = ""; }, 4000);
  }

  function errorBox(err) {
    const where = err.where || {};
    const parts = ["graph_id", "node_id", "edge_id", "handle", "parameter"].filter((k) => where[k]).map((k) => `${k}: ${where[k]}`);
    return h("div", { class: "error", role: "alert" }, h("strong", {}, err.status ? `Error ${err.status}: ` : "Error: "), err.message,
      parts.length ? h("div", { class: "where" }, parts.join(" · ")) : null);
  }

  function jsonView(value) {
    // A map of ports (or parameters) holding files: each entry on its own, files as links.
    if (value && typeof value === "object" && !Array.isArray(value) && !value.$binary
        && Object.values(value).some((v) => v && typeof v === "object" && v.$binary)) {
      return h("div", {}, Object.entries(value).map(([k, v]) => h("div", {}, h("span", { class: "mono" }, `${k}: `), jsonView(v))));
    }
    if (value && typeof value === "object" && value.$binary) {
      const b = value.$binary;
      // A file in the API's file store (redis:… / s3:…) downloads from GET /files/{ref}
      // with the session cookie; a ref that is already an http(s) URL or a path of this
      // site links to it. "//host/…" would be a link to another site, and so would
      // "/\host/…" or "/<tab>/host/…" (browsers read "\" as "/" and drop tabs and
      // newlines): such a ref goes to /files/ like any other.
      const href = /^(https?:\/\/|\/(?![\/\\])[^\s\\]*$)/i.test(b.ref || "") ? b.ref
        : (b.ref ? `${Api.base}/files/${encodeURIComponent(b.ref)}` : null);
      const link = href ? h("a", { href, download: "" }, "download") : h("span", { class: "muted" }, "(no reference)");
      return h("div", { class: "binary" }, `binary ${b.mime} · ${b.size} bytes · ${b.ref} `, link);
    }
    const text = value === undefined ? "—" : JSON.stringify(value, null, 2);
    return h("pre", { class: "json", tabindex: "0" }, text);
  }

  const SVG = "http://www.w3.org/2000/svg";
  let iconIds = new Set();
  const kebab = (name) => String(name || "").replace(/([a-z0-9])([A-Z])/g, "$1-$2").replace(/([a-zA-Z])(\d)/g, "$1-$2").toLowerCase();
  /* A node type's icon from the vendored Lucide sprite, or its initials. */
  function icon(name) {
    const id = kebab(name);
    if (!iconIds.has(id)) return h("span", { class: "icon", "aria-hidden": "true" }, (name || "?").slice(0, 2));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "icon-svg");
    svg.setAttribute("aria-hidden", "true");
    const use = document.createElementNS(SVG, "use");
    use.setAttribute("href", `vendor/icons.svg#${id}`);
    svg.append(use);
    return svg;
  }

  async function nodesCatalogue() {
    if (!catalogue) {
      const sprite = await fetch("vendor/icons.svg").then((r) => (r.ok ? r.text() : "")).catch(() => "");
      iconIds = new Set([...sprite.matchAll(/<symbol id="([^"]+)"/g)].map((m) => m[1]));
      const data = await Api.call("GET", "/nodes");
      catalogue = { defs: Object.fromEntries(data.nodes.map((n) => [n.id, n])), sockets: Object.fromEntries(data.sockets.map((s) => [s.id, s])), raw: data };
    }
    return catalogue;
  }

  // ---------------------------------------------------------------- sign in
  function needSignIn() {
    if (document.getElementById("signin")) return;
    cleanup();
    main.replaceChildren(signInForm());
  }

  function signInForm() {
    const input = h("input", { id: "api-key", type: "password", autocomplete: "current-password", required: true, "aria-describedby": "signin-help" });
    const status = h("div", { "aria-live": "assertive" });
    const form = h("form", { id: "signin", class: "card narrow", onsubmit: async (e) => {
      e.preventDefault();
      try {
        await Api.signIn(input.value.trim());
        document.getElementById("sign-out").hidden = false;
        route();
      } catch (err) { status.replaceChildren(errorBox(err)); }
    } },
    h("h1", {}, "Sign in"),
    h("p", { id: "signin-help" }, "Enter an API key of this deployment. It is exchanged for a session cookie and not stored by the console."),
    h("label", { for: "api-key" }, "API key"), input, h("button", { type: "submit" }, "Sign in"), status);
    setTimeout(() => input.focus(), 0);
    return form;
  }

  // ---------------------------------------------------------------- graphs
  async function graphsPage() {
    const data = await Api.call("GET", "/graphs?limit=500");
    const search = h("input", { type: "search", id: "graph-search", placeholder: "Search by name or id", "aria-label": "Search graphs" });
    const body = h("tbody");
    const draw = () => {
      const q = search.value.toLowerCase();
      const rows = data.items.filter((g) => !q || `${g.name} ${g.id}`.toLowerCase().includes(q));
      body.replaceChildren(...rows.map((g) => h("tr", {},
        h("td", {}, h("a", { href: `#/graphs/${enc(g.id)}` }, g.name || g.id)), h("td", { class: "mono" }, g.id),
        h("td", {}, `v${g.version}`), h("td", {}, fmtTime(g.updated_at)))));
      if (!rows.length) body.append(h("tr", {}, h("td", { colspan: 4, class: "empty" }, data.items.length ? "No graph matches the search." : "No graphs yet. Save one with `orchestrator graphs create FILE.json` or POST /graphs.")));
    };
    search.addEventListener("input", draw);
    draw();
    return [h("div", { class: "title-row" }, h("h1", {}, "Graphs"), h("a", { class: "button", id: "new-graph", href: "#/graphs/new" }, "New graph")), search, h("table", { class: "list" }, h("thead", {}, h("tr", {}, ["Name", "Id", "Version", "Updated"].map((t) => h("th", { scope: "col" }, t)))), body)];
  }

  function nodeList(graph, onPick) {
    const defs = (catalogue && catalogue.defs) || {};
    return h("ol", { class: "node-list", "aria-label": "Nodes" }, graph.nodes.map((n) => h("li", {},
      h("button", { type: "button", class: "node-item", dataset: { node: n.id, state: "pending" }, onclick: () => onPick(n.id) },
        h("span", { class: "dot" }), icon((defs[n.type] || {}).icon), h("span", { class: "name" }, n.name || n.id), h("span", { class: "state" }, "")))));
  }

  /* Offset of the first JSON syntax error in ``text`` (browsers' JSON.parse messages do
     not all say where): a small recursive-descent scan, used only to point at the error. */
  function jsonErrorOffset(text) {
    let i = 0;
    const ws = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
    const fail = () => { throw i; };
    const lit = (word) => { if (text.startsWith(word, i)) i += word.length; else fail(); };
    const str = () => { i++; while (i < text.length && text[i] !== '"') { if (text[i] === "\\") i++; i++; } if (i >= text.length) fail(); i++; };
    const num = () => { const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i)); if (!m || !m[0]) fail(); i += m[0].length; };
    const value = () => {
      ws();
      const c = text[i];
      if (c === "{") { i++; ws(); if (text[i] === "}") { i++; return; } for (;;) { ws(); if (text[i] !== '"') fail(); str(); ws(); if (text[i] !== ":") fail(); i++; value(); ws(); if (text[i] === ",") { i++; continue; } if (text[i] === "}") { i++; return; } fail(); } }
      if (c === "[") { i++; ws(); if (text[i] === "]") { i++; return; } for (;;) { value(); ws(); if (text[i] === ",") { i++; continue; } if (text[i] === "]") { i++; return; } fail(); } }
      if (c === '"') return str();
      if (c === "t") return lit("true");
      if (c === "f") return lit("false");
      if (c === "n") return lit("null");
      return num();
    };
    try { value(); ws(); return i < text.length ? i : null; } catch (at) { return typeof at === "number" ? at : null; }
  }

  function parseInput(text) {
    if (!text.trim()) return { value: null };
    try { return { value: JSON.parse(text) }; } catch (err) {
      const at = jsonErrorOffset(text);
      let where = "";
      if (at != null) { const before = text.slice(0, at); where = ` at line ${before.split("\n").length}, column ${at - before.lastIndexOf("\n")}`; }
      return { error: `Input is not valid JSON${where}: ${err.message}` };
    }
  }

  async function graphPage(id, params) {
    const version = params.get("version");
    const [graph, versions, runs, cat] = await Promise.all([
      Api.call("GET", `/graphs/${enc(id)}` + (version ? `?version=${enc(version)}` : "")),
      Api.call("GET", `/graphs/${enc(id)}/versions`),
      Api.call("GET", `/graphs/${enc(id)}/runs?limit=20`),
      nodesCatalogue(),
    ]);
    const select = h("select", { id: "version", "aria-label": "Version", onchange: () => { location.hash = `#/graphs/${enc(id)}?version=${select.value}`; } },
      (versions.versions || []).map((v) => { const n = typeof v === "object" ? v.version : v; return h("option", { value: n, selected: n === graph.version }, `v${n}`); }));
    const area = h("div", { class: "canvas", id: "canvas" });
    const detail = h("aside", { class: "detail", "aria-label": "Node" }, h("p", { class: "muted" }, "Select a node to see its parameters."));
    const triggers = graph.nodes.filter((n) => (cat.defs[n.type] || {}).trigger);
    const input = h("textarea", { id: "run-input", rows: 5, "aria-label": "Run input (JSON)", "aria-describedby": "run-input-error", spellcheck: "false" }, triggers.some((n) => n.type === "chat_start") ? '{"message": "hello"}' : "{}");
    const inputError = h("div", { id: "run-input-error", class: "field-error", "aria-live": "assertive" });
    const trigger = h("select", { id: "run-trigger", "aria-label": "Trigger" }, h("option", { value: "" }, "default trigger"), triggers.map((n) => h("option", { value: n.id }, n.name || n.id)));
    const start = h("form", { class: "card", id: "start-run", onsubmit: async (e) => {
      e.preventDefault();
      const parsed = parseInput(input.value);
      if (parsed.error) { inputError.textContent = parsed.error; input.setAttribute("aria-invalid", "true"); input.focus(); return; }
      input.removeAttribute("aria-invalid");
      inputError.textContent = "";
      try {
        const body = { input: parsed.value, version: graph.version };
        if (trigger.value) body.trigger = trigger.value;
        const r = await Api.call("POST", `/graphs/${enc(id)}/runs`, body);
        location.hash = `#/runs/${enc(r.run_id)}`;
      } catch (err) { inputError.replaceChildren(errorBox(err)); }
    } }, h("h2", {}, "Start a run"), h("label", { for: "run-input" }, "Input (JSON)"), input, inputError, trigger, h("button", { type: "submit" }, "Start run"));
    const hasChat = graph.nodes.some((n) => n.type === "chat_start");
    const page = [
      h("div", { class: "title-row" }, h("h1", {}, graph.name || graph.id), select,
        hasChat ? h("a", { class: "button", href: `#/chat/${enc(id)}` }, "Chat with this graph") : null,
        h("a", { class: "button", id: "edit-graph", href: `#/graphs/${enc(id)}/edit` }, "Edit"),
        h("button", { type: "button", id: "save-layout", title: "Save the nodes' positions on the canvas as a new version of the graph", onclick: async () => {
          const where = view.positions();
          const body = { ...graph, nodes: graph.nodes.map((n) => ({ ...n, position: where[n.id] })) };
          try { const saved = await Api.call("PUT", `/graphs/${enc(id)}`, body); toast(`Layout saved as version ${saved.version}`); location.hash = `#/graphs/${enc(id)}?version=${saved.version}`; }
          catch (err) { toast(err.message, "error"); }
        } }, "Save layout")),
      graph.description ? h("p", { class: "muted" }, graph.description) : null,
      h("div", { class: "workspace" }, area, h("div", { class: "side" }, nodeList(graph, (n) => show(n)), detail)),
      legend(cat),
      h("div", { class: "columns" }, start, h("section", { class: "card" }, h("h2", {}, "Recent runs"), runsTable(runs.items, false))),
    ];
    let view = null;
    const show = (nodeId) => {
      const n = graph.nodes.find((x) => x.id === nodeId);
      view && view.select(nodeId);
      detail.replaceChildren(h("h2", {}, n.name || n.id), h("p", { class: "mono" }, `${n.id} · ${n.type}`), h("h3", {}, "Parameters"), jsonView(n.data || {}));
    };
    after(() => {
      view = GraphCanvas.create(area, graph, cat.defs, cat.sockets);
      view.onSelect(show);
      cleanups.push(() => view.destroy());
    });
    return page;
  }

  async function editorPage(id) {
    const [graph, cat] = await Promise.all([id ? Api.call("GET", `/graphs/${enc(id)}`) : null, nodesCatalogue(), Editor.loadRules()]);
    return Editor.render({ h, cat, graph, toast, errorBox, cleanups, after, icon, parseInput });
  }

  function legend(cat) {
    const used = Object.values(cat.sockets);
    return h("details", { class: "legend" }, h("summary", {}, "Socket types and edges"),
      h("ul", {}, used.map((s) => h("li", {}, h("span", { class: `sock ${s.shape}`, style: `background:${s.color}` }), `${s.label}`)),
        h("li", {}, "solid edge: flow (data moves at run time)"), h("li", {}, "dashed edge: link (structural attachment, e.g. tools or a model)")));
  }

  // ---------------------------------------------------------------- runs
  function runsTable(items, withGraph) {
    if (!items.length) return h("p", { class: "empty" }, "No runs yet.");
    return h("table", { class: "list runs" }, h("thead", {}, h("tr", {}, ["Run", withGraph ? "Graph" : null, "Status", "Started", "Took"].filter(Boolean).map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, items.map((r) => h("tr", { dataset: { run: r.run_id } },
        h("td", {}, h("a", { href: `#/runs/${enc(r.run_id)}`, class: "mono" }, r.run_id.slice(0, 12))),
        withGraph ? h("td", {}, h("a", { href: `#/graphs/${enc(r.graph_id)}` }, r.graph_id)) : null,
        h("td", {}, badge(r.status)), h("td", {}, fmtTime(r.created_at)),
        h("td", {}, r.finished_at ? fmtMs((r.finished_at - r.created_at) * 1000) : "")))));
  }

  async function runsPage(params) {
    const status = params.get("status") || "";
    const data = await Api.call("GET", "/runs" + (status ? `?status=${enc(status)}` : ""));
    const filter = h("select", { id: "status-filter", "aria-label": "Filter by status", onchange: () => { location.hash = filter.value ? `#/runs?status=${filter.value}` : "#/runs"; } },
      ["", "queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"].map((s) => h("option", { value: s, selected: s === status }, s || "all statuses")));
    return [h("div", { class: "title-row" }, h("h1", {}, "Runs"), filter), runsTable(data.items, true)];
  }

  const NODE_STATE = { started: "running", completed: "succeeded", error: "failed", retry: "retrying", skipped: "skipped", not_run: "not_run" };
  const RUN_TYPES = ["run_started", "run_completed", "run_failed", "run_cancelled", "run_timed_out", "run_waiting", "run_resumed"];
  const NODE_TYPES = ["started", "progress", "completed", "error", "retry", "skipped", "not_run", "agent_event"];
  const ACTIVE = new Set(["queued", "running", "waiting"]);

  async function runPage(runId) {
    const [run, cat] = await Promise.all([Api.call("GET", `/runs/${enc(runId)}`), nodesCatalogue()]);
    const graph = await Api.call("GET", `/graphs/${enc(run.graph_id)}?version=${run.graph_version}`).catch(() => null);
    const g = graph || { id: run.graph_id, nodes: Object.entries(run.nodes).map(([id, n]) => ({ id, name: n.name, type: n.type })), edges: [] };
    const nodes = {};
    for (const n of g.nodes) nodes[n.id] = { state: "pending", events: [], attempts: new Set(), started: null, ended: null, outputs: null, errors: [] };
    const events = [];
    let runStatus = run.status, runStart = run.created_at, waiting = null;
    const area = h("div", { class: "canvas", id: "canvas" });
    const list = nodeList(g, (id) => select(id));
    const detail = h("aside", { class: "detail", "aria-label": "Node details" }, h("p", { class: "muted" }, "Select a node to see its inputs, outputs, errors and attempts."));
    const status = h("span", { id: "run-status" }, badge(runStatus));
    const live = h("span", { id: "stream-state", class: "muted" }, "");
    const actions = h("span", { class: "actions" });
    const banner = h("div", { id: "approval", "aria-live": "polite" });
    const timeline = h("div", { class: "timeline", id: "timeline", role: "list", "aria-label": "Node durations" });
    const log = h("tbody", { id: "event-log" });
    let selected = null;
    let view = null;

    function setState(id, state) {
      const n = nodes[id];
      if (!n) return;
      n.state = state;
      view && view.setState(id, state);
      const item = list.querySelector(`[data-node="${CSS.escape(id)}"]`);
      if (item) { item.dataset.state = state; item.querySelector(".state").textContent = state.replace("_", " "); }
    }
    function drawActions() {
      actions.replaceChildren(...[
        ACTIVE.has(runStatus) ? h("button", { type: "button", id: "cancel-run", onclick: async () => { try { await Api.call("POST", `/runs/${enc(runId)}/cancel`); } catch (err) { toast(err.message, "error"); } } }, "Cancel run") : null,
        h("a", { class: "button", href: `#/graphs/${enc(g.id)}` }, "Graph")].filter(Boolean));
      status.replaceChildren(badge(runStatus));
    }
    function drawBanner() {
      if (!waiting) { banner.replaceChildren(); return; }
      banner.replaceChildren(approvalCard(runId, waiting.node_id, waiting.tool_calls, () => { waiting = null; drawBanner(); }));
    }
    function drawTimeline() {
      const spans = g.nodes.map((n) => [n, nodes[n.id]]).filter(([, s]) => s.started);
      const end = Math.max(...spans.map(([, s]) => s.ended || Date.now() / 1000), runStart + 0.001);
      const total = end - runStart;
      timeline.replaceChildren(...spans.map(([n, s]) => {
        const left = ((s.started - runStart) / total) * 100, width = Math.max(0.8, (((s.ended || end) - s.started) / total) * 100);
        return h("div", { class: "tl-row", role: "listitem" }, h("span", { class: "tl-name" }, n.name || n.id),
          h("span", { class: "tl-track" }, h("span", { class: `tl-bar s-${s.state}`, style: `left:${left}%;width:${width}%` })),
          h("span", { class: "tl-ms" }, s.ended ? fmtMs((s.ended - s.started) * 1000) : "…"));
      }));
      if (!spans.length) timeline.append(h("p", { class: "empty" }, "No node has started yet."));
    }
    function inputsOf(nodeId) {
      const out = {};
      for (const e of g.edges || []) {
        if (e.target !== nodeId || (e.data && e.data.channel === "link")) continue;
        const src = nodes[e.source];
        const value = src && src.outputs ? src.outputs[e.sourceHandle] : undefined;
        if (value !== undefined) out[e.targetHandle] = value && value.value !== undefined ? value.value : value;
      }
      return out;
    }
    function select(id) {
      selected = id;
      view && view.select(id);
      const n = g.nodes.find((x) => x.id === id) || { id };
      const s = nodes[id];
      const outputs = s.outputs ? Object.fromEntries(Object.entries(s.outputs).map(([k, v]) => [k, v && v.value !== undefined ? v.value : v])) : undefined;
      const over = !ACTIVE.has(runStatus);
      detail.replaceChildren(...[
        h("h2", {}, n.name || id), h("p", {}, h("span", { class: "mono" }, `${id} · ${n.type || ""} `), badge(s.state)),
        h("p", {}, `Attempts: ${s.attempts.size || 0}`, s.started && s.ended ? ` · took ${fmtMs((s.ended - s.started) * 1000)}` : ""),
        over && ["failed", "succeeded", "skipped", "not_run"].includes(s.state) ? h("button", { type: "button", id: "rerun", onclick: async () => {
          try { const r = await Api.call("POST", `/runs/${enc(runId)}/rerun`, { from_node: id }); location.hash = `#/runs/${enc(r.run_id)}`; } catch (err) { toast(err.message, "error"); }
        } }, "Re-run from this node") : null,
        s.errors.length ? [h("h3", {}, "Errors"), s.errors.map((e) => h("div", { class: "error" }, jsonView(e)))] : null,
        ...(() => {
          // completed and error events carry the parameters as the node resolved them
          const last = [...s.events].reverse().find((e) => e.data && e.data.parameters);
          return last ? [h("h3", {}, "Parameters (resolved)"), jsonView(last.data.parameters)]
            : [h("h3", {}, "Parameters (as configured)"), jsonView(n.data || {})];
        })(),
        h("h3", {}, "Inputs"), jsonView(inputsOf(id)),
        h("h3", { id: "node-outputs" }, "Outputs"), jsonView(outputs),
        h("h3", {}, "Events"), h("ul", { class: "mini-log" }, s.events.slice(-30).map((e) => h("li", {}, `${new Date(e.timestamp * 1000).toLocaleTimeString()} ${e.event_type} (attempt ${e.attempt})${workerOf(e) ? ` on ${workerOf(e)}` : ""}`)))].flat(3).filter(Boolean));
    }
    function workerOf(e) { const d = e.data || {}; return d.worker_id || d.worker || e.worker_id || ""; }
    function summary(e) {
      const d = e.data || {};
      if (e.event_type === "error") return (d.error && (d.error.message || JSON.stringify(d.error))) || "";
      if (e.event_type === "agent_event") return d.event || "";
      if (e.event_type === "progress") return d.token || d.message || "";
      return "";
    }
    function onEvent(type, e, id) {
      events.push(e);
      if (log.children.length < 500) log.append(h("tr", {}, h("td", { class: "mono" }, id || ""), h("td", {}, new Date(e.timestamp * 1000).toLocaleTimeString()), h("td", {}, e.node_name || (e.node_id ? e.node_id : "run")), h("td", {}, type), h("td", { class: "clip" }, summary(e))));
      if (!e.node_id) {
        if (type === "run_started") runStart = Math.min(runStart, e.timestamp);
        else if (type === "run_waiting") runStatus = "waiting";
        else if (type === "run_resumed") { runStatus = "running"; waiting = null; drawBanner(); }
        else if (RUN_TYPES.includes(type)) {
          runStatus = { run_completed: "succeeded", run_failed: "failed", run_cancelled: "cancelled", run_timed_out: "timed_out" }[type];
          waiting = null; drawBanner();
          for (const [nid, s] of Object.entries(nodes)) if (nid in run.nodes && ["pending", "queued"].includes(s.state)) setState(nid, "not_run");
          Api.call("GET", `/runs/${enc(runId)}`).then((detailNow) => {
            for (const [nid, n] of Object.entries(detailNow.nodes)) if (nodes[nid] && Object.keys(n.outputs || {}).length) nodes[nid].outputs = n.outputs;
            if (selected) select(selected);
          }).catch(() => {});
        }
        drawActions();
        return;
      }
      const s = nodes[e.node_id];
      if (!s) return;
      s.events.push(e);
      if (["started", "completed", "error"].includes(type)) s.attempts.add(e.attempt);
      if (type === "started") { s.started = s.started || e.timestamp; s.ended = null; }
      if (type === "completed") {
        s.ended = e.timestamp;
        if (e.data && e.data.outputs) s.outputs = e.data.outputs;
        if (e.data && e.data.outputs_truncated) {  // the event carries a preview: the stored outputs are whole
          Api.call("GET", `/runs/${enc(runId)}`).then((detailNow) => {
            const n = detailNow.nodes[e.node_id];
            if (n && n.outputs) s.outputs = n.outputs;
            if (selected === e.node_id) select(selected);
          }).catch(() => {});
        }
      }
      if (type === "error") { s.ended = e.timestamp; s.errors.push((e.data && e.data.error) || e.data); }
      if (type === "agent_event" && e.data && e.data.event === "approval_requested") {
        setState(e.node_id, "waiting");
        waiting = { node_id: e.node_id, tool_calls: e.data.tool_calls || [] };
        drawBanner();
      } else if (NODE_STATE[type]) setState(e.node_id, NODE_STATE[type]);
      drawTimeline();
      if (selected === e.node_id) select(selected);
    }
    for (const [id, n] of Object.entries(run.nodes)) {
      if (!nodes[id]) continue;
      if (n.outputs && Object.keys(n.outputs).length) nodes[id].outputs = n.outputs;
      nodes[id].state = n.status === "pending" ? (ACTIVE.has(run.status) ? "queued" : "not_run") : n.status;
    }
    after(() => {
      view = GraphCanvas.create(area, g, cat.defs, cat.sockets);
      view.onSelect(select);
      for (const [id, s] of Object.entries(nodes)) setState(id, s.state);
      // The stream replays the run from its first event, so every state is rebuilt from it.
      const stream = Api.follow(runId, { types: [...NODE_TYPES, ...RUN_TYPES], onEvent, onState: (st) => { live.textContent = st === "live" ? "● live" : st === "reconnecting" ? "reconnecting…" : "stream closed"; live.dataset.state = st; } });
      cleanups.push(() => stream.close(), () => view.destroy());
      drawActions();
      drawTimeline();
    });
    return [
      h("div", { class: "title-row" }, h("h1", {}, `Run `, h("span", { class: "mono" }, runId.slice(0, 12))), status, live, actions),
      h("p", { class: "muted" }, "Graph ", h("a", { href: `#/graphs/${enc(g.id)}` }, g.name || g.id), ` v${run.graph_version || "?"} · started ${fmtTime(run.created_at)}`),
      banner,
      h("div", { class: "workspace" }, area, h("div", { class: "side" }, list, detail)),
      h("section", { class: "card" }, h("h2", {}, "Timeline"), timeline),
      h("section", { class: "card" }, h("h2", {}, "Event log"), h("div", { class: "scroll" }, h("table", { class: "list log" }, h("thead", {}, h("tr", {}, ["Id", "Time", "Node", "Event", "Detail"].map((t) => h("th", { scope: "col" }, t)))), log))),
    ];
  }

  /* The approve / reject / edit-arguments card of a node waiting for approval. */
  function approvalCard(runId, nodeId, toolCalls, done) {
    const calls = (toolCalls || []).map((t) => h("li", {}, h("strong", {}, t.tool_name || t.name || "tool"), " ", h("code", {}, JSON.stringify(t.tool_args || t.args || {}))));
    const first = (toolCalls || [])[0] || {};
    const args = h("textarea", { class: "args", rows: 3, "aria-label": "Tool arguments (JSON)", hidden: true, spellcheck: "false" }, JSON.stringify(first.tool_args || first.args || {}, null, 1));
    const err = h("div", { class: "field-error", "aria-live": "assertive" });
    const send = async (decision) => {
      const body = { decision, node_id: nodeId };
      if (decision === "approve" && !args.hidden) {
        const parsed = parseInput(args.value);
        if (parsed.error) { err.textContent = parsed.error; return; }
        body.arguments = parsed.value;
      }
      try { await Api.call("POST", `/runs/${enc(runId)}/approvals`, body); card.dataset.answered = decision; card.replaceChildren(h("p", {}, `${decision === "approve" ? "Approved" : "Rejected"}.`)); done && done(decision); }
      catch (e) { err.replaceChildren(errorBox(e)); }
    };
    const card = h("div", { class: "approval card", role: "group", "aria-label": "Approval request" },
      h("p", {}, h("strong", {}, "Approval needed: "), "the agent wants to call:"), h("ul", {}, calls), args, err,
      h("div", { class: "buttons" },
        h("button", { type: "button", class: "approve", onclick: () => send("approve") }, "Approve"),
        h("button", { type: "button", class: "reject", onclick: () => send("reject") }, "Reject"),
        h("button", { type: "button", class: "edit", onclick: () => { args.hidden = !args.hidden; if (!args.hidden) args.focus(); } }, "Edit arguments")));
    return card;
  }

  // ---------------------------------------------------------------- nodes
  async function nodesPage() {
    const cat = await nodesCatalogue();
    const groups = {};
    for (const n of cat.raw.nodes) (groups[n.category || "other"] = groups[n.category || "other"] || []).push(n);
    const sock = (id) => { const s = cat.sockets[id] || { color: "#888", shape: "circle" }; return h("span", { class: `sock ${s.shape}`, style: `background:${s.color}`, title: id }); };
    const card = (n) => h("article", { class: "card node-card", dataset: { type: n.id } },
      h("h3", {}, icon(n.icon), n.name, h("span", { class: "mono muted" }, ` ${n.id}`)),
      h("p", {}, n.description || ""),
      h("div", { class: "ports" },
        h("div", {}, h("strong", {}, "in: "), (n.inputs || []).map((p) => h("span", { class: "port" }, sock(p.socket), p.id, ` (${p.channel})`))),
        h("div", {}, h("strong", {}, "out: "), (n.outputs || []).map((p) => h("span", { class: "port" }, sock(p.socket), p.id, ` (${p.channel})`)))),
      (n.parameters || []).length
        ? h("details", {}, h("summary", {}, `${n.parameters.length} parameters`),
          h("ul", {}, n.parameters.map((p) => h("li", {}, h("code", {}, p.id), ` ${p.type} · ${p.mode}`, p.socket ? [" · socket ", sock(p.socket.type)] : null))))
        : null);
    const sections = Object.entries(groups).sort().map(([category, list]) => h("section", {},
      h("h2", { style: `border-color:${GraphCanvas.CATEGORY_COLOURS[category] || "#475569"}`, class: "cat" }, category),
      h("div", { class: "palette" }, list.map(card))));
    return [h("h1", {}, "Nodes"), legend(cat), sections];
  }

  // ---------------------------------------------------------------- routing
  function cleanup() { for (const fn of cleanups.splice(0)) { try { fn(); } catch (_) { /* already gone */ } } }
  let pendingAfter = [];
  function after(fn) { pendingAfter.push(fn); }

  async function route() {
    cleanup();
    pendingAfter = [];
    const raw = location.hash.replace(/^#\/?/, "") || "graphs";
    const [path, query] = raw.split("?");
    const parts = path.split("/").map(decodeURIComponent);
    const params = new URLSearchParams(query || "");
    for (const a of document.querySelectorAll("[data-nav]")) a.setAttribute("aria-current", a.dataset.nav === parts[0] ? "page" : "false");
    main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    try {
      let content;
      if (parts[0] === "graphs" && parts[1] === "new") content = await editorPage(null);
      else if (parts[0] === "graphs" && parts[1] && parts[2] === "edit") content = await editorPage(parts[1]);
      else if (parts[0] === "graphs" && parts[1]) content = await graphPage(parts[1], params);
      else if (parts[0] === "graphs") content = await graphsPage();
      else if (parts[0] === "runs" && parts[1]) content = await runPage(parts[1]);
      else if (parts[0] === "runs") content = await runsPage(params);
      else if (parts[0] === "chat" && parts[1]) content = await ChatPage.render({ h, Api, graphId: parts[1], chatId: parts[2], approvalCard, errorBox, cleanups });
      else if (parts[0] === "nodes") content = await nodesPage();
      else content = [h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/graphs" }, "Go to graphs"))];
      main.replaceChildren(...[content].flat(4).filter((c) => c != null));
      document.title = `${(main.querySelector("h1") || {}).textContent || "Console"} · Orchestrator`;
      for (const fn of pendingAfter.splice(0)) fn();
    } catch (err) {
      if (err.status === 401) return;  // the sign-in form is shown
      main.replaceChildren(h("h1", {}, "Something went wrong"), errorBox(err), h("p", {}, h("a", { href: "#/graphs" }, "Back to graphs")));
    }
  }

  async function boot() {
    document.getElementById("sign-out").addEventListener("click", async () => { await Api.signOut().catch(() => {}); needSignIn(); });
    window.addEventListener("hashchange", route);
    try {
      const info = await Api.session();
      document.getElementById("sign-out").hidden = !info.auth || !info.signed_in;
      if (info.auth && !info.signed_in) { needSignIn(); return; }
    } catch (err) { main.replaceChildren(errorBox(err)); return; }
    route();
  }

  return { boot, needSignIn, route, h };
})();
window.App = App;
App.boot();
