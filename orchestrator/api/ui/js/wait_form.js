/* The card of a Wait node that waits (run view and chat): a form to submit (its data as JSON,
   checked by the API against the node's form schema), a button that issues the node's signed
   resume URL, or when its timer is due. */
import { call } from "./api.js";
import { enc, errorBox, h } from "./dom.js";
import { parseInput } from "./json_text.js";

const SAMPLE = { boolean: false, number: 0, integer: 0, string: "", array: [], object: {} };

/* A starting value for the form: each property of the schema with an empty value of its type. */
function skeleton(schema) {
  const props = (schema && schema.properties) || {};
  return Object.fromEntries(Object.entries(props).map(([k, p]) => [k, SAMPLE[(p && p.type) || "string"] ?? null]));
}

function formPart(runId, nodeId, wait, card, done) {
  const url = `/runs/${enc(runId)}/waits/${enc(nodeId)}/form`;
  const data = h(
    "textarea",
    { class: "form-data", rows: 4, "aria-label": "Form data (JSON)", spellcheck: "false" },
    JSON.stringify(skeleton(wait.schema), null, 1),
  );
  const err = h("div", { class: "field-error", "aria-live": "assertive" });
  const submit = async () => {
    const parsed = parseInput(data.value);
    if (parsed.error) return void (err.textContent = parsed.error);
    try {
      await call("POST", url, parsed.value);
      card.dataset.answered = "form";
      card.replaceChildren(h("p", {}, "Submitted."));
      if (done) done("form");
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  };
  const button = h("button", { type: "button", class: "submit-form primary", onclick: submit }, "Submit");
  return [data, err, h("div", { class: "buttons" }, button)];
}

function urlPart(runId, nodeId) {
  const out = h("div", { class: "resume-url", "aria-live": "polite" });
  const issue = async () => {
    try {
      const r = await call("POST", `/runs/${enc(runId)}/waits/${enc(nodeId)}/resume-url`);
      const when = new Date(r.expires_at * 1000).toLocaleString();
      out.replaceChildren(h("code", {}, location.origin + r.url), h("p", { class: "muted" }, `valid until ${when}`));
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  };
  const button = h("button", { type: "button", class: "issue-url", onclick: issue }, "Get the resume URL");
  return [h("div", { class: "buttons" }, button), out];
}

const TITLES = { form: "Waiting for a form", url: "Waiting for a callback", time: "Waiting until a time" };

export function waitCard(runId, nodeId, wait, done) {
  const card = h("div", { class: "wait card", role: "group", "aria-label": TITLES[wait.kind] || "Waiting" });
  const head = [h("p", {}, h("strong", {}, `${TITLES[wait.kind] || "Waiting"}: `), wait.message || nodeId)];
  let body = [];
  if (wait.kind === "form") body = formPart(runId, nodeId, wait, card, done);
  else if (wait.kind === "url") body = urlPart(runId, nodeId);
  else if (wait.until) body = [h("p", { class: "muted" }, `resumes at ${wait.until}`)];
  else if (wait.duration_s)
    body = [h("p", { class: "muted" }, `resumes ${wait.duration_s} s after it started waiting`)];
  if (wait.timeout_s) body.push(h("p", { class: "muted" }, `times out after ${wait.timeout_s} s`));
  if (wait.deadline) body.push(h("p", { class: "muted" }, `times out at ${wait.deadline}`));
  card.append(...head, ...body);
  return card;
}
