/* The chat page: a conversation with a graph that has a Chat Start node. Each turn is
   POST /chats/<chat id>/messages, streamed with ?format=chat: content and reasoning
   deltas, tool calls, member runs, flow-step cards and approval requests (approve,
   reject, edit arguments). The conversation is kept per chat id in localStorage; the
   agent's own history lives server-side under the same id (the run's session). */
"use strict";

const ChatPage = (() => {
  const TYPES = ["content", "reasoning", "tool_call_started", "tool_call_completed", "member_run_started",
    "member_run_completed", "approval_requested", "flow_step", "run_waiting", "run_completed", "run_error", "run_cancelled"];
  const storeKey = (chatId) => `orch.chat.${chatId}`;
  const indexKey = (graphId) => `orch.chats.${graphId}`;
  const load = (chatId) => { try { return JSON.parse(localStorage.getItem(storeKey(chatId))) || { turns: [] }; } catch (_) { return { turns: [] }; } };
  const newId = () => "c" + Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");

  async function render({ h, Api, graphId, chatId, approvalCard, errorBox, cleanups }) {
    const graph = await Api.call("GET", `/graphs/${encodeURIComponent(graphId)}`);
    if (!graph.nodes.some((n) => n.type === "chat_start")) {
      return [h("h1", {}, `Chat: ${graph.name || graphId}`), h("p", { class: "empty" }, "This graph has no Chat Start node, so it cannot be chatted with. ", h("a", { href: `#/graphs/${encodeURIComponent(graphId)}` }, "Back to the graph"))];
    }
    if (!chatId) { location.replace(`#/chat/${encodeURIComponent(graphId)}/${newId()}`); return []; }
    const convo = load(chatId);
    convo.graph_id = graphId;
    const index = JSON.parse(localStorage.getItem(indexKey(graphId)) || "[]");
    const save = () => {
      localStorage.setItem(storeKey(chatId), JSON.stringify(convo));
      if (!index.includes(chatId)) { index.unshift(chatId); localStorage.setItem(indexKey(graphId), JSON.stringify(index.slice(0, 30))); }
    };
    const log = h("div", { class: "chat-log", id: "chat-log", role: "log", "aria-live": "polite", "aria-label": "Conversation" });
    const input = h("textarea", { id: "chat-input", rows: 2, "aria-label": "Message", placeholder: "Type a message; Enter sends, Shift+Enter adds a line" });
    const sendBtn = h("button", { type: "submit", id: "chat-send" }, "Send");
    const err = h("div", { "aria-live": "assertive" });
    const streams = [];
    cleanups.push(() => streams.forEach((s) => s.close()));

    function turnView(turn) {
      const box = h("div", { class: `msg ${turn.role}`, dataset: { role: turn.role, run: turn.run_id || "" } });
      if (turn.role === "user") { box.append(h("div", { class: "text" }, turn.text)); return box; }
      if (turn.reasoning) box.append(h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), h("div", {}, turn.reasoning)));
      for (const step of turn.steps || []) box.append(h("details", { class: `flow-step s-${step.status}`, dataset: { node: step.node_id } },
        h("summary", {}, `${step.node_name || step.node_id}: ${step.status}`, step.duration_ms != null ? ` · ${step.duration_ms} ms` : ""), step.error ? h("pre", { class: "json" }, JSON.stringify(step.error, null, 2)) : null));
      for (const t of turn.tools || []) box.append(h("div", { class: "tool" }, `tool ${t.name}(${JSON.stringify(t.args || {})})`, t.done ? ` → ${typeof t.result === "string" ? t.result : JSON.stringify(t.result)}` : " …"));
      for (const m of turn.members || []) {
        const said = m.status === "completed" && turn.memberText && turn.memberText[m.member];
        box.append(said
          ? h("details", { class: "member" }, h("summary", {}, `member ${m.member}: ${m.status}`), h("div", { class: "member-text" }, said))
          : h("div", { class: "member" }, `member ${m.member}: ${m.status}`));
      }
      box.append(h("div", { class: "text" }, turn.text || (turn.done ? "" : "…")));
      if (turn.error) box.append(h("div", { class: "error" }, String(typeof turn.error === "string" ? turn.error : JSON.stringify(turn.error))));
      if (turn.approval && !turn.approval.answered) {
        box.append(approvalCard(turn.run_id, turn.approval.node_id, turn.approval.tool_calls, (decision) => { turn.approval.answered = decision; save(); }));
      }
      return box;
    }
    const draw = () => { log.replaceChildren(...convo.turns.map(turnView)); log.scrollTop = log.scrollHeight; };

    function follow(turn) {
      const steps = new Map((turn.steps || []).map((s) => [s.node_id, s]));
      const started = {};
      const stream = Api.follow(turn.run_id, { format: "chat", types: TYPES, onEvent: (type, m) => {
        if (type === "content" && m.member) {
          // A team member's own answer: shown under its member line, not in the reply.
          const own = (turn.memberText = turn.memberText || {});
          own[m.agent || "member"] = (own[m.agent || "member"] || "") + (m.delta || "");
        } else if (type === "content") turn.text = (turn.text || "") + (m.delta || "");
        else if (type === "reasoning") turn.reasoning = (turn.reasoning || "") + (m.delta || "");
        else if (type === "tool_call_started") (turn.tools = turn.tools || []).push({ name: m.name, args: m.args });
        else if (type === "tool_call_completed") {
          const t = (turn.tools || []).find((x) => x.name === m.name && !x.done) || ((turn.tools = turn.tools || []).push({ name: m.name, args: m.args }), turn.tools.at(-1));
          Object.assign(t, { done: true, result: m.result, error: m.error });
        } else if (type.startsWith("member_run_")) (turn.members = turn.members || []).push({ member: m.member, status: type.slice(11) });
        else if (type === "approval_requested") turn.approval = { node_id: m.node_id, tool_calls: m.tool_calls };
        else if (type === "flow_step") {
          if (m.status === "started") started[m.node_id] = Date.now();
          const step = steps.get(m.node_id) || { node_id: m.node_id, node_name: m.node_name };
          step.status = m.status;
          if (m.error) step.error = m.error;
          if (started[m.node_id] && m.status !== "started") step.duration_ms = Date.now() - started[m.node_id];
          steps.set(m.node_id, step);
          turn.steps = [...steps.values()];
        } else if (type === "run_error") { if (m.status || !m.agent) { turn.error = m.error; turn.done = true; } }
        else if (type === "run_completed" || type === "run_cancelled") { turn.done = true; if (type === "run_cancelled") turn.error = "cancelled"; }
        save();
        draw();
        if (turn.done) { input.disabled = false; sendBtn.disabled = false; }
      } });
      streams.push(stream);
    }

    const form = h("form", { class: "chat-form", onsubmit: async (e) => {
      e.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      err.replaceChildren();
      input.disabled = true; sendBtn.disabled = true;
      try {
        const r = await Api.call("POST", `/chats/${encodeURIComponent(chatId)}/messages`, { graph_id: graphId, message: text });
        convo.turns.push({ role: "user", text });
        const turn = { role: "assistant", run_id: r.run_id, text: "" };
        convo.turns.push(turn);
        input.value = "";
        save(); draw(); follow(turn);
      } catch (ex) { err.replaceChildren(errorBox(ex)); input.disabled = false; sendBtn.disabled = false; }
    } }, input, sendBtn);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); } });
    draw();
    for (const turn of convo.turns) if (turn.role === "assistant" && !turn.done) { turn.text = ""; turn.reasoning = ""; turn.tools = []; turn.members = []; turn.steps = []; turn.memberText = {}; follow(turn); }
    setTimeout(() => input.focus(), 0);
    const others = index.filter((c) => c !== chatId);
    return [
      h("div", { class: "title-row" }, h("h1", {}, `Chat: ${graph.name || graphId}`),
        h("a", { class: "button", href: `#/chat/${encodeURIComponent(graphId)}/${newId()}` }, "New chat"),
        h("a", { class: "button", href: `#/graphs/${encodeURIComponent(graphId)}` }, "Graph")),
      h("p", { class: "muted" }, "Chat id ", h("span", { class: "mono", id: "chat-id" }, chatId)),
      h("div", { class: "chat" }, log, err, form),
      others.length ? h("details", {}, h("summary", {}, "Earlier chats"), h("ul", {}, others.map((c) => h("li", {}, h("a", { href: `#/chat/${encodeURIComponent(graphId)}/${c}` }, c))))) : null,
    ];
  }

  return { render };
})();
window.ChatPage = ChatPage;
