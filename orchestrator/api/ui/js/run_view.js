/* The run view (#/runs/<run id>): the graph view with each node's live state from the
   run's event stream (inner nodes included: run_state.js), a node list, the selected
   node's attempts, errors, parameters, inputs and outputs, a timeline, and the grouped
   event log. The stream replays from the first event, so a reload rebuilds everything. */
import { call, follow } from "./api.js";
import { badge, enc, fmtMs, fmtTime, h, jsonView, toast } from "./dom.js";
import { catalogue } from "./catalogue.js";
import { createGraphView } from "./graph_view.js";
import { addNavigator } from "./navigator.js";
import { nodeList } from "./node_list.js";
import { RunState } from "./run_state.js";
import { EventLog } from "./event_log.js";
import { approvalCard } from "./approval.js";
import { waitCard } from "./wait_form.js";
import { nodeUsagePart, runUsageLine } from "./run_usage.js";

const RUN_TYPES = [
  "run_started",
  "run_completed",
  "run_failed",
  "run_cancelled",
  "run_timed_out",
  "run_waiting",
  "run_resumed",
];
const NODE_TYPES = [
  "started",
  "progress",
  "completed",
  "error",
  "retry",
  "skipped",
  "not_run",
  "cancelled",
  "agent_event",
];
const ACTIVE = new Set(["queued", "running", "waiting"]);
const ENDED = {
  run_completed: "succeeded",
  run_failed: "failed",
  run_cancelled: "cancelled",
  run_timed_out: "timed_out",
};
const plain = (outputs) =>
  outputs && Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, v && v.value !== undefined ? v.value : v]));

function timelineRows(graph, rs, runStart) {
  const spans = graph.nodes.map((n) => [n, rs.nodes[n.id]]).filter(([, s]) => s.started);
  if (!spans.length) return [h("p", { class: "empty" }, "No node has started yet.")];
  const end = Math.max(...spans.map(([, s]) => s.ended || Date.now() / 1000), runStart + 0.001);
  const total = end - runStart;
  return spans.map(([n, s]) => {
    const left = ((s.started - runStart) / total) * 100;
    const width = Math.max(0.8, (((s.ended || end) - s.started) / total) * 100);
    const bar = h(
      "span",
      { class: "tl-track" },
      h("span", { class: `tl-bar s-${s.state}`, style: `left:${left}%;width:${width}%` }),
    );
    return h(
      "div",
      { class: "tl-row", role: "listitem" },
      h("span", { class: "tl-name" }, n.name || n.id),
      bar,
      h("span", { class: "tl-ms" }, s.ended ? fmtMs((s.ended - s.started) * 1000) : "…"),
    );
  });
}

function inputsOf(graph, rs, nodeId) {
  const out = {};
  for (const e of graph.edges || []) {
    if (e.target !== nodeId || (e.data && e.data.channel === "link")) continue;
    const value = (plain(rs.nodes[e.source].outputs) || {})[e.sourceHandle];
    if (value !== undefined) out[e.targetHandle] = value;
  }
  return out;
}

function parametersPart(s, n) {
  const last = [...s.events].reverse().find((e) => e.data && e.data.parameters);
  return last
    ? [h("h3", {}, "Parameters (resolved)"), jsonView(last.data.parameters)]
    : [h("h3", {}, "Parameters (as configured)"), jsonView(n.data || {})];
}

/* The nodes of a container's nested runs (a Loop's body per item) and their states. */
function nestedPart(s) {
  const runs = Object.entries(s.inner || {});
  if (!runs.length) return null;
  const item = ([name, state]) => h("li", { dataset: { state } }, `${name}: `, badge(state));
  return [
    h("h3", {}, `Nested runs (${runs.length})`),
    h(
      "ul",
      { class: "nested", id: "nested-runs" },
      runs.map(([label, nodes]) =>
        h(
          "li",
          { dataset: { run: label } },
          h("span", { class: "mono" }, label),
          h("ul", {}, Object.entries(nodes).map(item)),
        ),
      ),
    ),
  ];
}

function summaryPart(id, n, s) {
  const took = s.started && s.ended ? ` · took ${fmtMs((s.ended - s.started) * 1000)}` : "";
  const label = s.label ? h("span", { class: "muted state-label" }, ` ${s.label}`) : null;
  return [
    h("h2", {}, n.name || id),
    h("p", {}, h("span", { class: "mono" }, `${id} · ${n.type || ""} `), badge(s.state), label),
    h("p", {}, `Attempts: ${s.attempts.size || 0}`, took),
  ];
}

/* The run snapshot's nodes when the stored version is gone (no edges: drawn in a grid). */
function planGraph(run) {
  return {
    id: run.graph_id,
    nodes: Object.entries(run.nodes).map(([id, n]) => ({ id, name: n.name, type: n.type })),
    edges: [],
  };
}

function bottomTabs(timeline, log) {
  const panes = {
    log: h("div", { class: "pane", id: "pane-log" }, log),
    timeline: h("div", { class: "pane", id: "pane-timeline", hidden: true }, timeline),
  };
  const show = (k) => {
    for (const [name, pane] of Object.entries(panes)) pane.hidden = name !== k;
    for (const b of buttons) b.setAttribute("aria-selected", String(b.id === `tab-${k}`));
  };
  const buttons = Object.keys(panes).map((k) =>
    h(
      "button",
      { type: "button", role: "tab", id: `tab-${k}`, "aria-selected": String(k === "log"), onclick: () => show(k) },
      k === "log" ? "Event log" : "Timeline",
    ),
  );
  return h(
    "section",
    { class: "card bottom-tabs" },
    h("div", { role: "tablist", class: "tabs" }, buttons),
    Object.values(panes),
  );
}

class RunView {
  constructor(page, run, cat, graph) {
    Object.assign(this, {
      page,
      run,
      cat,
      graph,
      runId: run.run_id,
      status: run.status,
      start: run.created_at,
      selected: null,
      waiting: null,
      gv: null,
    });
    this.rs = new RunState(graph);
    this.list = nodeList(graph, cat, (id) => this.select(id));
    this.detail = h(
      "aside",
      { class: "detail", "aria-label": "Node details" },
      h("p", { class: "muted" }, "Select a node to see its inputs, outputs, errors and attempts."),
    );
    this.statusEl = h(
      "span",
      { id: "run-status" },
      badge(run.status),
      run.queue_position ? h("span", { class: "muted" }, ` #${run.queue_position} in its concurrency queue`) : "",
    );
    this.live = h("span", { id: "stream-state", class: "muted" }, "");
    this.actions = h("span", { class: "actions" });
    this.banner = h("div", { id: "approval", "aria-live": "polite" });
    this.timeline = h("div", { class: "timeline", id: "timeline", role: "list", "aria-label": "Node durations" });
    this.log = new EventLog();
    this.log.setNodes(graph.nodes);
    this.area = h("div", { class: "canvas", id: "canvas" });
    for (const [id, n] of Object.entries(run.nodes)) {
      if (!this.rs.nodes[id]) continue;
      if (Object.keys(n.outputs || {}).length) this.rs.nodes[id].outputs = n.outputs;
      this.rs.set(id, n.status === "pending" ? (ACTIVE.has(run.status) ? "queued" : "not_run") : n.status, null, false);
    }
  }

  paint() {
    for (const id of this.rs.drain()) {
      const s = this.rs.nodes[id];
      if (this.gv) this.gv.setState(id, s.state === "pending" ? null : s.state, s.label);
      this.list.set(id, s.state, s.label);
    }
  }

  select(id) {
    this.selected = id;
    if (this.gv) this.gv.select(id);
    const n = this.graph.nodes.find((x) => x.id === id) || { id };
    const s = this.rs.nodes[id];
    const rerun =
      !ACTIVE.has(this.status) && s.own && s.state !== "running"
        ? h("button", { type: "button", id: "rerun", onclick: () => this.rerun(id) }, "Re-run from this node")
        : null;
    const errors = s.errors.length
      ? [h("h3", {}, "Errors"), s.errors.map((e) => h("div", { class: "error" }, jsonView(e)))]
      : null;
    const io = [
      h("h3", {}, "Inputs"),
      jsonView(inputsOf(this.graph, this.rs, id)),
      h("h3", { id: "node-outputs" }, "Outputs"),
      jsonView(plain(s.outputs) || undefined),
    ];
    const usage = nodeUsagePart(s, this.run.nodes[id]);
    const parts = [summaryPart(id, n, s), rerun, errors, usage, nestedPart(s), parametersPart(s, n), io];
    this.detail.replaceChildren(...parts.flat(3).filter(Boolean));
  }

  async rerun(id) {
    try {
      const r = await call("POST", `/runs/${enc(this.runId)}/rerun`, { from_node: id });
      location.hash = `#/runs/${enc(r.run_id)}`;
    } catch (err) {
      toast(err.message, "error");
    }
  }

  drawActions() {
    const cancel = () => call("POST", `/runs/${enc(this.runId)}/cancel`).catch((err) => toast(err.message, "error"));
    const open = this.graph.edges.length
      ? h("a", { class: "button", href: `#/graphs/${enc(this.graph.id)}` }, "Open graph")
      : "";
    this.actions.replaceChildren(
      ACTIVE.has(this.status) ? h("button", { type: "button", id: "cancel-run", onclick: cancel }, "Cancel run") : "",
      open,
    );
    this.statusEl.replaceChildren(badge(this.status));
  }

  drawBanner() {
    if (!this.waiting) return this.banner.replaceChildren();
    const done = () => ((this.waiting = null), this.drawBanner());
    const w = this.waiting;
    this.banner.replaceChildren(
      w.wait ? waitCard(this.runId, w.node_id, w.wait, done) : approvalCard(this.runId, w.node_id, w.tool_calls, done),
    );
  }

  /* A Wait node's run_waiting (its payload says what it waits for). */
  waitEvent(e) {
    this.status = "waiting";
    const data = e.data || {};
    const wait = data.payload && data.payload.wait;
    if (!wait) return;
    this.waiting = { node_id: data.node_id, wait };
    this.rs.set(data.node_id, "waiting");
  }

  runEvent(type, e) {
    if (type === "run_started") this.start = Math.min(this.start, e.timestamp);
    else if (type === "run_waiting") this.waitEvent(e);
    else if (type === "run_resumed") Object.assign(this, { status: "running", waiting: null });
    else if (ENDED[type]) this.ended(type);
    this.drawBanner();
    this.drawActions();
  }

  async ended(type) {
    Object.assign(this, { status: ENDED[type], waiting: null });
    this.rs.finish(new Set(Object.keys(this.run.nodes)));
    await this.storedOutputs();
  }

  /* The outputs the run stored (whole), where an event carried only a cut preview. */
  async storedOutputs() {
    const now = await call("GET", `/runs/${enc(this.runId)}`).catch(() => null);
    for (const [nid, n] of Object.entries((now && now.nodes) || {}))
      if (this.rs.nodes[nid] && Object.keys(n.outputs || {}).length) this.rs.nodes[nid].outputs = n.outputs;
    if (now) this.usageEl.replaceChildren(...runUsageLine((this.run = now)).childNodes);
    if (this.selected) this.select(this.selected);
  }

  onEvent(type, e, id) {
    this.log.add(type, e, id);
    if (!e.node_id) this.runEvent(type, e);
    else if (this.rs.apply(type, e)) {
      this.waiting = { node_id: e.node_id, tool_calls: e.data.tool_calls || [] };
      this.drawBanner();
    }
    if (type === "completed" && e.data && e.data.outputs_truncated) this.storedOutputs();
    this.paint();
    this.timeline.replaceChildren(...timelineRows(this.graph, this.rs, this.start));
    if (this.selected && this.selected === e.node_id) this.select(this.selected);
  }

  mount() {
    const graph = this.graph;
    this.gv = createGraphView(this.area, {
      cat: this.cat,
      label: `Run ${this.runId} of graph ${graph.name || graph.id}: ${graph.nodes.length} nodes. The node list beside it is the keyboard way in.`,
    });
    this.gv.load(graph);
    this.gv.fit();
    this.gv.on("select", (id) => this.select(id));
    const nav = addNavigator(this.area, this.gv);
    for (const [id, s] of Object.entries(this.rs.nodes)) this.rs.set(id, s.state, s.label, s.own);
    this.paint();
    const onState = (st) => {
      this.live.textContent = { live: "● live", reconnecting: "reconnecting…" }[st] || "stream closed";
      this.live.dataset.state = st;
    };
    const stream = follow(this.runId, {
      types: [...NODE_TYPES, ...RUN_TYPES],
      onEvent: (t, e, id) => this.onEvent(t, e, id),
      onState,
    });
    this.page.cleanup(
      () => stream.close(),
      () => this.gv.destroy(),
      () => nav.destroy(),
    );
    this.drawActions();
    this.area.dataset.ready = "true";
  }

  elements() {
    const run = this.run;
    const test = run.meta && run.meta.test_node ? ` · test step of node ${run.meta.test_node}` : "";
    const title = h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Run ", h("span", { class: "mono" }, this.runId.slice(0, 12))),
      this.statusEl,
      this.live,
      this.actions,
    );
    const sub = h(
      "p",
      { class: "muted sub" },
      "Graph ",
      h("a", { href: `#/graphs/${enc(this.graph.id)}` }, this.graph.name || this.graph.id),
      ` v${run.graph_version || "?"} · started ${fmtTime(run.created_at)}${test}`,
      relatedRuns(run),
    );
    const layout = h(
      "div",
      { class: "run-layout" },
      h("div", { class: "canvas-wrap" }, this.area),
      h("div", { class: "side" }, this.list.element, this.detail),
    );
    this.usageEl = runUsageLine(run);
    return [title, sub, this.usageEl, this.banner, layout, bottomTabs(this.timeline, this.log.element)];
  }
}

const SHOWN_CHILDREN = 20;

/* Parent and child runs (an Execute Workflow node's graph, a Loop's iterations), as links. */
function relatedRuns(run) {
  const link = (id) => h("a", { href: `#/runs/${enc(id)}`, class: "mono" }, id.slice(0, 12));
  const parts = [];
  if (run.parent_run) {
    const label = run.meta && run.meta.label ? ` (${run.meta.label})` : "";
    parts.push(" · child of run ", link(run.parent_run), label);
  }
  const children = run.children || [];
  if (children.length) {
    parts.push(` · ${children.length} child run${children.length > 1 ? "s" : ""}: `);
    children.slice(0, SHOWN_CHILDREN).forEach((id, i) => parts.push(i ? ", " : "", link(id)));
    if (children.length > SHOWN_CHILDREN) parts.push(` and ${children.length - SHOWN_CHILDREN} more`);
  }
  return h("span", { id: "related-runs" }, parts);
}

export async function runPage(page, runId) {
  const [run, cat] = await Promise.all([call("GET", `/runs/${enc(runId)}`), catalogue()]);
  const stored = run.graph_version
    ? await call("GET", `/graphs/${enc(run.graph_id)}?version=${run.graph_version}`).catch(() => null)
    : null;
  const view = new RunView(page, run, cat, stored || planGraph(run));
  page.after(() => view.mount());
  return view.elements();
}
