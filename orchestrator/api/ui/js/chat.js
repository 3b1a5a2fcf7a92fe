/* Chat with a graph that has a Chat Start node: as its own page (#/chat/<graph>/<chat id>)
   and as the playground beside the editor's canvas. Each turn is POST /chats/<chat id>/
   messages, streamed with ?format=chat (content and reasoning deltas, tool calls, member
   runs, flow-step cards, approvals, Wait forms), and links to its run view. The conversation is kept
   per chat id in localStorage; the agent's own history is the server's, under that id. */
import { call, follow } from "./api.js";
import { enc, errorBox, h } from "./dom.js";
import { approvalCard } from "./approval.js";
import { waitCard } from "./wait_form.js";

const TYPES = [
  "content",
  "reasoning",
  "tool_call_started",
  "tool_call_completed",
  "member_run_started",
  "member_run_completed",
  "approval_requested",
  "form_requested",
  "wait_requested",
  "flow_step",
  "run_waiting",
  "run_completed",
  "run_error",
  "run_cancelled",
];
const storeKey = (chatId) => `orch.chat.${chatId}`;
const indexKey = (graphId) => `orch.chats.${graphId}`;
const newId = () =>
  "c" + Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");
const loadConvo = (chatId) => {
  try {
    return JSON.parse(localStorage.getItem(storeKey(chatId))) || { turns: [] };
  } catch {
    return { turns: [] };
  }
};

function stepPart(step) {
  const took = step.duration_ms != null ? ` · ${step.duration_ms} ms` : "";
  const summary = h("summary", {}, `${step.node_name || step.node_id}: ${step.status}`, took);
  const error = step.error ? h("pre", { class: "json" }, JSON.stringify(step.error, null, 2)) : null;
  return h("details", { class: `flow-step s-${step.status}`, dataset: { node: step.node_id } }, summary, error);
}

function toolPart(t) {
  const result = typeof t.result === "string" ? t.result : JSON.stringify(t.result);
  return h("div", { class: "tool" }, `tool ${t.name}(${JSON.stringify(t.args || {})})`, t.done ? ` → ${result}` : " …");
}

function memberPart(turn, m) {
  const said = m.status === "completed" && turn.memberText && turn.memberText[m.member];
  if (!said) return h("div", { class: "member" }, `member ${m.member}: ${m.status}`);
  return h(
    "details",
    { class: "member" },
    h("summary", {}, `member ${m.member}: ${m.status}`),
    h("div", { class: "member-text" }, said),
  );
}

function assistantParts(turn) {
  const reasoning = turn.reasoning
    ? h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), h("div", {}, turn.reasoning))
    : null;
  const error = turn.error
    ? h("div", { class: "error" }, typeof turn.error === "string" ? turn.error : JSON.stringify(turn.error))
    : null;
  const link = turn.run_id
    ? h("a", { class: "run-link small", href: `#/runs/${enc(turn.run_id)}` }, "open the run")
    : null;
  return [
    reasoning,
    (turn.steps || []).map(stepPart),
    (turn.tools || []).map(toolPart),
    (turn.members || []).map((m) => memberPart(turn, m)),
    h("div", { class: "text" }, turn.text || (turn.done ? "" : "…")),
    error,
    link,
  ].flat();
}

const HANDLERS = {
  content(turn, m) {
    if (!m.member) return void (turn.text = (turn.text || "") + (m.delta || ""));
    const own = (turn.memberText = turn.memberText || {}); // a member's own answer: under its line
    own[m.agent || "member"] = (own[m.agent || "member"] || "") + (m.delta || "");
  },
  reasoning: (turn, m) => (turn.reasoning = (turn.reasoning || "") + (m.delta || "")),
  tool_call_started: (turn, m) => (turn.tools = turn.tools || []).push({ name: m.name, args: m.args }),
  tool_call_completed(turn, m) {
    turn.tools = turn.tools || [];
    let t = turn.tools.find((x) => x.name === m.name && !x.done);
    if (!t) turn.tools.push((t = { name: m.name, args: m.args }));
    Object.assign(t, { done: true, result: m.result, error: m.error });
  },
  member_run_started: (turn, m) => (turn.members = turn.members || []).push({ member: m.member, status: "started" }),
  member_run_completed: (turn, m) =>
    (turn.members = turn.members || []).push({ member: m.member, status: "completed" }),
  approval_requested: (turn, m) => (turn.approval = { node_id: m.node_id, tool_calls: m.tool_calls }),
  form_requested: (turn, m) =>
    (turn.wait = { node_id: m.node_id, wait: { kind: "form", message: m.message, schema: m.schema } }),
  wait_requested: (turn, m) => (turn.wait = { node_id: m.node_id, wait: { kind: m.kind, message: m.message } }),
  run_error(turn, m) {
    if (m.status || !m.agent) Object.assign(turn, { error: m.error, done: true });
  },
  run_completed: (turn) => (turn.done = true),
  run_cancelled: (turn) => Object.assign(turn, { done: true, error: "cancelled" }),
};

function flowStep(turn, m, started) {
  if (m.status === "started") started[m.node_id] = Date.now();
  turn.steps = turn.steps || [];
  let step = turn.steps.find((s) => s.node_id === m.node_id);
  if (!step) turn.steps.push((step = { node_id: m.node_id, node_name: m.node_name }));
  step.status = m.status;
  if (m.error) step.error = m.error;
  if (started[m.node_id] && m.status !== "started") step.duration_ms = Date.now() - started[m.node_id];
}

/* The chat for ``graphId`` (``chatId``: null starts a new one), as elements. */
class ChatView {
  constructor(page, graphId, chatId) {
    Object.assign(this, { page, graphId, id: chatId || newId() });
    this.convo = loadConvo(this.id);
    this.index = JSON.parse(localStorage.getItem(indexKey(graphId)) || "[]");
    this.log = h("div", {
      class: "chat-log",
      id: "chat-log",
      role: "log",
      "aria-live": "polite",
      "aria-label": "Conversation",
    });
    this.input = h("textarea", {
      id: "chat-input",
      rows: 2,
      "aria-label": "Message",
      placeholder: "Message; Enter sends, Shift+Enter adds a line",
    });
    this.sendBtn = h("button", { type: "submit", id: "chat-send", class: "primary" }, "Send");
    this.err = h("div", { "aria-live": "assertive" });
    this.form = h("form", { class: "chat-form" }, this.input, this.sendBtn);
    this.form.addEventListener("submit", (e) => this.send(e));
    this.input.addEventListener("keydown", (e) => {
      if (e.key !== "Enter" || e.shiftKey) return;
      e.preventDefault();
      this.form.requestSubmit();
    });
  }

  save() {
    localStorage.setItem(storeKey(this.id), JSON.stringify(this.convo));
    if (!this.index.includes(this.id))
      localStorage.setItem(indexKey(this.graphId), JSON.stringify([this.id, ...this.index].slice(0, 30)));
  }

  turnView(turn) {
    const box = h("div", { class: `msg ${turn.role}`, dataset: { role: turn.role, run: turn.run_id || "" } });
    if (turn.role === "user") box.append(h("div", { class: "text" }, turn.text));
    else box.append(...assistantParts(turn).filter(Boolean));
    if (turn.approval && !turn.approval.answered)
      box.append(
        approvalCard(
          turn.run_id,
          turn.approval.node_id,
          turn.approval.tool_calls,
          (d) => ((turn.approval.answered = d), this.save()),
        ),
      );
    if (turn.wait && !turn.wait.answered)
      box.append(
        waitCard(turn.run_id, turn.wait.node_id, turn.wait.wait, (d) => ((turn.wait.answered = d), this.save())),
      );
    return box;
  }

  draw() {
    this.log.replaceChildren(...this.convo.turns.map((t) => this.turnView(t)));
    this.log.scrollTop = this.log.scrollHeight;
  }

  busy(on) {
    this.input.disabled = on;
    this.sendBtn.disabled = on;
  }

  follow(turn) {
    const started = {};
    const onEvent = (type, m) => {
      if (type === "flow_step") flowStep(turn, m, started);
      else if (HANDLERS[type]) HANDLERS[type](turn, m);
      this.save();
      this.draw();
      if (turn.done) this.busy(false);
    };
    const stream = follow(turn.run_id, { format: "chat", types: TYPES, onEvent });
    this.page.cleanup(() => stream.close());
  }

  async send(e) {
    e.preventDefault();
    const text = this.input.value.trim();
    if (!text) return;
    this.err.replaceChildren();
    this.busy(true);
    try {
      const r = await call("POST", `/chats/${enc(this.id)}/messages`, { graph_id: this.graphId, message: text });
      const turn = { role: "assistant", run_id: r.run_id, text: "" };
      this.convo.turns.push({ role: "user", text }, turn);
      this.input.value = "";
      this.save();
      this.draw();
      this.follow(turn);
    } catch (ex) {
      this.err.replaceChildren(errorBox(ex));
      this.busy(false);
    }
  }

  elements() {
    this.draw();
    for (const turn of this.convo.turns.filter((t) => t.role === "assistant" && !t.done)) {
      Object.assign(turn, { text: "", reasoning: "", tools: [], members: [], steps: [], memberText: {} });
      this.follow(turn);
    }
    const others = this.index.filter((c) => c !== this.id);
    const earlier = h(
      "details",
      { class: "earlier" },
      h("summary", {}, "Earlier chats"),
      h(
        "ul",
        {},
        others.map((c) => h("li", {}, h("a", { href: `#/chat/${enc(this.graphId)}/${c}` }, c))),
      ),
    );
    return [
      h(
        "div",
        { class: "chat" },
        h("p", { class: "muted small" }, "Chat ", h("span", { class: "mono", id: "chat-id" }, this.id)),
        this.log,
        this.err,
        this.form,
      ),
      others.length ? earlier : null,
    ];
  }
}

/* The chat for ``graphId`` (``chatId``: null starts a new one), as elements. */
export async function chatPanel(page, graphId, chatId) {
  return new ChatView(page, graphId, chatId).elements();
}

export async function chatPage(page, graphId, chatId) {
  const graph = await call("GET", `/graphs/${enc(graphId)}`);
  const back = h("a", { class: "button", href: `#/graphs/${enc(graphId)}` }, "Open graph");
  if (!graph.nodes.some((n) => n.type === "chat_start")) {
    return [
      h("h1", {}, `Chat: ${graph.name || graphId}`),
      h("p", { class: "empty" }, "This graph has no Chat Start node, so it cannot be chatted with. ", back),
    ];
  }
  if (!chatId) return (location.replace(`#/chat/${enc(graphId)}/${newId()}`), []);
  const content = await chatPanel(page, graphId, chatId);
  setTimeout(() => document.getElementById("chat-input")?.focus(), 0);
  return [
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, `Chat: ${graph.name || graphId}`),
      h("a", { class: "button", href: `#/chat/${enc(graphId)}/${newId()}` }, "New chat"),
      back,
    ),
    h("div", { class: "chat-page" }, content),
  ];
}
