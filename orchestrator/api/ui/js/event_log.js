/* A run's event log: one row per event, except that streamed tokens become one row per
   message (appended as they arrive) and a tool call is one row with its arguments and,
   once it returns, its result. Filters by node and by kind. Each row lists the stream ids
   it covers (data-ids), so nothing is lost or shown twice however it was grouped. */
import { h } from "./dom.js";
import { waitLabel } from "./run_state.js";

const KINDS = { lifecycle: "Node states", message: "Messages", tool: "Tool calls", error: "Errors", run: "Run" };
const MAX_ROWS = 2000;

function agentKind(e) {
  const ev = String((e.data && e.data.event) || "");
  if (/RunContent$/.test(ev)) return "message";
  if (/ToolCall/.test(ev)) return "tool";
  return /Error$/.test(ev) ? "error" : "lifecycle";
}

function kindOf(type, e) {
  if (!e.node_id) return "run";
  if (type === "error" || type === "retry") return "error";
  if (type === "progress") return e.data && e.data.token != null ? "message" : "lifecycle";
  return type === "agent_event" ? agentKind(e) : "lifecycle";
}

const DETAILS = {
  error: (d) => {
    const message = (d.error && (d.error.message || JSON.stringify(d.error))) || "";
    return d.mode === "continue" ? `${message} (error continued as data)` : message;
  },
  retry: (d) => `attempt ${d.attempt} failed; retrying in ${d.delay_s} s`,
  throttled: waitLabel,
  agent_event: (d) => `${d.agent ? `${d.agent}: ` : ""}${d.event || ""}`,
};

function detail(type, e) {
  const d = e.data || {};
  return DETAILS[type] ? DETAILS[type](d) : d.message || "";
}

const toolText = (tool) => `${tool.tool_name || "tool"}(${JSON.stringify(tool.tool_args || {})})`;
const speaker = (d) => (d.agent ? `${d.agent}: ` : "");

export class EventLog {
  constructor() {
    this.body = h("tbody", { id: "event-log" });
    this.nodeFilter = h(
      "select",
      { id: "log-node", "aria-label": "Show events of node" },
      h("option", { value: "" }, "all nodes"),
    );
    const kinds = Object.entries(KINDS).map(([k, label]) => h("option", { value: k }, label));
    this.kindFilter = h(
      "select",
      { id: "log-kind", "aria-label": "Show events of kind" },
      h("option", { value: "" }, "all kinds"),
      kinds,
    );
    this.open = new Map(); // node|agent -> the row a message or tool call is being appended to
    this.count = 0;
    for (const f of [this.nodeFilter, this.kindFilter]) f.addEventListener("change", () => this.filter());
    const head = h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["Time", "Node", "Event", "Detail"].map((t) => h("th", { scope: "col" }, t)),
      ),
    );
    const table = h("div", { class: "scroll" }, h("table", { class: "list log" }, head, this.body));
    this.element = h(
      "div",
      { class: "event-log" },
      h("div", { class: "log-filters" }, this.nodeFilter, this.kindFilter),
      table,
    );
  }

  hidden(row) {
    const node = this.nodeFilter.value;
    const kind = this.kindFilter.value;
    return !!((node && row.dataset.node !== node) || (kind && row.dataset.kind !== kind));
  }

  filter() {
    for (const row of this.body.children) row.hidden = this.hidden(row);
  }

  setNodes(nodes) {
    this.nodeFilter.replaceChildren(
      h("option", { value: "" }, "all nodes"),
      ...nodes.map((n) => h("option", { value: n.id }, n.name || n.id)),
    );
  }

  row(id, type, e, kind, text) {
    const d = e.data || {};
    const where = d.subgraph ? `${e.node_name} › ${d.subgraph}: ${d.inner_node_name || d.inner_node_id}` : e.node_name;
    const cells = [new Date(e.timestamp * 1000).toLocaleTimeString(), where || e.node_id || "run", type, text];
    const tr = h(
      "tr",
      { dataset: { ids: id || "", node: e.node_id || "", kind } },
      cells.map((c, i) => h("td", { class: i === 3 ? "clip" : "" }, c)),
    );
    tr.hidden = this.hidden(tr);
    this.body.append(tr);
    this.count += 1;
    return tr;
  }

  extend(tr, id, text) {
    tr.dataset.ids = [tr.dataset.ids, id].filter(Boolean).join(" ");
    tr.lastChild.textContent = text;
  }

  message(id, e, key) {
    const d = e.data || {};
    const delta = d.content != null ? String(d.content) : String(d.token ?? "");
    const current = this.open.get(key);
    if (current && current.kind === "message") {
      current.text += delta;
      return this.extend(current.tr, id, speaker(d) + current.text);
    }
    this.open.set(key, { kind: "message", tr: this.row(id, "message", e, "message", speaker(d) + delta), text: delta });
  }

  tool(id, e, key) {
    const d = e.data || {};
    const t = d.tool || {};
    const callKey = `${key}|tool|${t.tool_call_id || t.tool_name}`;
    const current = this.open.get(callKey);
    if (/Completed|Error/.test(d.event) && current) {
      const result = typeof t.result === "string" ? t.result : JSON.stringify(t.result ?? null);
      return this.extend(current.tr, id, `${toolText(t)} → ${result}`);
    }
    this.open.set(callKey, { kind: "tool", tr: this.row(id, "tool call", e, "tool", `${toolText(t)} …`) });
  }

  /* Add one event (``type``, data ``e``, stream ``id``). */
  add(type, e, id) {
    if (this.count >= MAX_ROWS) return;
    const kind = kindOf(type, e);
    const key = `${e.node_id}|${(e.data && e.data.agent) || ""}`;
    if (kind === "message") return this.message(id, e, key);
    if (kind === "tool") return this.tool(id, e, key);
    if (this.open.get(key) && this.open.get(key).kind === "message") this.open.delete(key);
    this.row(id, type, e, kind, detail(type, e));
  }
}

export const createEventLog = () => new EventLog();
