/* A run's per-node state, rebuilt from its event stream: lifecycle events set a node's own
   state; nodes that run inside another (a model selector, a toolset, an MCP server or a
   sub-agent wired into an agent over link edges: they are materialized by the agent that
   uses them and have no events of their own) take their host's state; a team member
   follows its own member-run events; a node that failed but whose run went on says so.
   A container's nested runs (a Loop's body, once per item) come as events of the container
   with ``data.subgraph`` and ``data.inner_node_*``: they are kept per nested run
   (``inner``) and never taken for the container's own state. */

export const NODE_STATE = {
  started: "running",
  completed: "succeeded",
  error: "failed",
  retry: "retrying",
  throttled: "throttled", // rescheduled, its slot free, until a rate limit lets it run
  skipped: "skipped",
  not_run: "not_run",
  cancelled: "cancelled", // it was running when its run ended
};
const INHERITED = { running: "running", succeeded: "succeeded", failed: "failed", waiting: "running" };
const MEMBER = { RunStarted: "running", RunCompleted: "succeeded", RunError: "failed" };

/* node id -> ids of the nodes it is materialized into (nodes whose only out-edges are links). */
export function hostsOf(graph) {
  const out = {};
  const flowOut = new Set();
  for (const e of graph.edges || []) {
    if (((e.data && e.data.channel) || "flow") === "link") (out[e.source] = out[e.source] || []).push(e.target);
    else flowOut.add(e.source);
  }
  for (const id of flowOut) delete out[id];
  return out;
}

/* Why a throttled node waits: which limit, for how long, and who set it. */
export function waitLabel(d) {
  const why = {
    provider_429: "the provider answered 429",
    node: "node limit",
    provider_limit: "provider limit",
    workspace_ceiling: "the workspace's ceiling of nodes in flight",
  };
  return `waiting ${d.delay_s} s for ${d.limit}${why[d.source] ? ` (${why[d.source]})` : ""}`;
}

function errorState(e) {
  const mode = e.data && e.data.mode;
  if (mode === "continue") return ["continued", "error continued as data"];
  if (mode === "error_port") return ["continued", "error routed to the error port"];
  return ["failed", null];
}

export class RunState {
  constructor(graph) {
    this.nodes = {};
    for (const n of graph.nodes) {
      this.nodes[n.id] = {
        name: n.name || n.id,
        state: "pending",
        label: null,
        own: false,
        events: [],
        attempts: new Set(),
        started: null,
        ended: null,
        outputs: null,
        errors: [],
        inner: {},
      };
    }
    this.hosts = hostsOf(graph);
    this.byName = Object.fromEntries(graph.nodes.map((n) => [n.name || n.id, n.id]));
    this.changed = new Set();
  }

  /* Set a node's state; ``own``: from its own events (an inherited state never overrides one). */
  set(id, state, label = null, own = true) {
    const s = this.nodes[id];
    if (!s || (!own && s.own)) return;
    Object.assign(s, { state, label });
    if (own) s.own = true;
    this.changed.add(id);
    this.propagate(id);
  }

  propagate(hostId) {
    const inherited = INHERITED[this.nodes[hostId].state];
    if (!inherited) return;
    for (const [inner, targets] of Object.entries(this.hosts)) {
      if (targets.includes(hostId))
        this.set(inner, inherited, `${inherited} · inside ${this.nodes[hostId].name}`, false);
    }
  }

  member(e) {
    const d = e.data || {};
    const id = this.byName[d.agent];
    const state = MEMBER[String(d.event || "").replace(/^Team/, "")];
    if (d.parent_run_id && id && id !== e.node_id && state)
      this.set(id, state, `${state} · member of ${this.nodes[e.node_id].name}`);
  }

  lifecycle(type, e, s) {
    if (["started", "completed", "error"].includes(type)) s.attempts.add(e.attempt);
    if (type === "started") Object.assign(s, { started: s.started || e.timestamp, ended: null });
    if (type === "completed")
      Object.assign(s, { ended: e.timestamp, outputs: (e.data && e.data.outputs) || s.outputs });
    if (type === "cancelled") s.ended = e.timestamp;
    if (type === "error") {
      s.ended = e.timestamp;
      s.errors.push((e.data && e.data.error) || e.data);
      return this.set(e.node_id, ...errorState(e));
    }
    if (NODE_STATE[type]) this.set(e.node_id, NODE_STATE[type]);
  }

  /* An event of a node of a nested run (``data.subgraph``): its state, under that run. */
  nested(type, e, s) {
    const d = e.data;
    const run = (s.inner[d.subgraph] = s.inner[d.subgraph] || {});
    const state = type === "error" ? errorState(e)[0] : NODE_STATE[type];
    if (state) run[d.inner_node_name || d.inner_node_id] = state;
    if (s.state === "running") this.set(e.node_id, "running", `running · nested run ${Object.keys(s.inner).length}`);
  }

  /* Apply one node event; true when it asks for an approval. */
  apply(type, e) {
    const s = this.nodes[e.node_id];
    if (!s) return false;
    s.events.push(e);
    if (e.data && e.data.subgraph && e.data.inner_node_id) return (this.nested(type, e, s), false);
    if (type === "throttled") return (this.set(e.node_id, "throttled", waitLabel(e.data || {})), false);
    if (type !== "agent_event") return (this.lifecycle(type, e, s), false);
    this.member(e);
    if (!(e.data && e.data.event === "approval_requested")) return false;
    this.set(e.node_id, "waiting");
    return true;
  }

  /* The run ended: planned nodes that never started, and inner nodes left pending, did not run. */
  finish(planned) {
    for (const [id, s] of Object.entries(this.nodes)) {
      if (["pending", "queued"].includes(s.state) && (planned.has(id) || this.hosts[id]))
        this.set(id, "not_run", null, false);
    }
  }

  /* Ids whose state changed since the last call. */
  drain() {
    const ids = [...this.changed];
    this.changed.clear();
    return ids;
  }
}

export const createRunState = (graph) => new RunState(graph);
