/* The approve / reject / edit-arguments card of a node waiting for approval (run view and
   chat). */
import { call } from "./api.js";
import { enc, errorBox, h } from "./dom.js";
import { parseInput } from "./json_text.js";

export function approvalCard(runId, nodeId, toolCalls, done) {
  const calls = (toolCalls || []).map((t) =>
    h(
      "li",
      {},
      h("strong", {}, t.tool_name || t.name || "tool"),
      " ",
      h("code", {}, JSON.stringify(t.tool_args || t.args || {})),
    ),
  );
  const first = (toolCalls || [])[0] || {};
  const args = h(
    "textarea",
    { class: "args", rows: 3, "aria-label": "Tool arguments (JSON)", hidden: true, spellcheck: "false" },
    JSON.stringify(first.tool_args || first.args || {}, null, 1),
  );
  const err = h("div", { class: "field-error", "aria-live": "assertive" });
  const card = h("div", { class: "approval card", role: "group", "aria-label": "Approval request" });
  const send = async (decision) => {
    const body = { decision, node_id: nodeId };
    if (decision === "approve" && !args.hidden) {
      const parsed = parseInput(args.value);
      if (parsed.error) return void (err.textContent = parsed.error);
      body.arguments = parsed.value;
    }
    try {
      await call("POST", `/runs/${enc(runId)}/approvals`, body);
      card.dataset.answered = decision;
      card.replaceChildren(h("p", {}, `${decision === "approve" ? "Approved" : "Rejected"}.`));
      if (done) done(decision);
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  };
  const toggle = () => {
    args.hidden = !args.hidden;
    if (!args.hidden) args.focus();
  };
  card.append(
    h("p", {}, h("strong", {}, "Approval needed: "), "the agent wants to call:"),
    h("ul", {}, calls),
    args,
    err,
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "button", class: "approve", onclick: () => send("approve") }, "Approve"),
      h("button", { type: "button", class: "reject", onclick: () => send("reject") }, "Reject"),
      h("button", { type: "button", class: "edit", onclick: toggle }, "Edit arguments"),
    ),
  );
  return card;
}
