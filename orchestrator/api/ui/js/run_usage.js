/* Model usage and cost in the run view: the run's totals and trace id under its title,
   and a node's tokens and cost in its detail. Live from the events' ``data.usage`` (token
   counts), priced once ``GET /runs/{id}`` has the node (``usage.cost_usd``). */
import { h, jsonView } from "./dom.js";

const OWN = new Set(["completed", "error", "retry"]);

const tokensText = (input, output, total) => `${total ?? input + output} tokens (${input} in, ${output} out)`;

function costText(usage) {
  if (!usage) return "";
  if (usage.cost_usd == null) return " · cost unknown";
  return ` · $${usage.cost_usd.toFixed(6)}`;
}

/* Token counts the node's own completed / error / retry events carry, summed. */
export function eventTokens(events) {
  const sum = { input: 0, output: 0, byModel: null };
  for (const e of events) {
    if (!OWN.has(e.event_type) || !e.data || !e.data.usage) continue;
    for (const numbers of Object.values(e.data.usage)) {
      sum.input += numbers.input_tokens || 0;
      sum.output += numbers.output_tokens || 0;
    }
    sum.byModel = e.data.usage;
  }
  return sum;
}

/* The "Usage" part of a node's detail (null when it reported none). */
export function nodeUsagePart(state, stored) {
  const priced = stored && stored.usage;
  const live = eventTokens(state.events);
  if (!priced && !live.input && !live.output) return null;
  const line = priced
    ? tokensText(priced.input_tokens, priced.output_tokens, priced.total_tokens) + costText(priced)
    : tokensText(live.input, live.output);
  return [h("h3", {}, "Usage"), h("p", { id: "node-usage" }, line), jsonView(priced ? priced.by_model : live.byModel)];
}

function traceLink(run) {
  if (!run.trace_id) return null;
  const id = h("span", { class: "mono" }, run.trace_id);
  const link = run.trace_url ? h("a", { href: run.trace_url, target: "_blank", rel: "noopener" }, id) : id;
  return h("span", { id: "run-trace" }, " · trace ", link);
}

/* The run's tokens, cost and trace id (an element that stays empty without them). */
export function runUsageLine(run) {
  const usage = run.usage;
  const tokens =
    usage && usage.total_tokens
      ? tokensText(usage.input_tokens, usage.output_tokens, usage.total_tokens) + costText(usage)
      : "";
  return h("p", { class: "muted sub", id: "run-usage" }, tokens, traceLink(run));
}
