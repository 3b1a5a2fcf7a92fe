/* What the editor knows about values: pinned data (``settings.pinData``: node id ->
   {port: value}, stored with the graph, used by test steps and previews only), the last
   run's outputs, and from them the scope an expression preview is evaluated in and the
   completions offered inside {{ }}. */

export const mainOf = (outputs) =>
  outputs ? (outputs.output !== undefined ? outputs.output : Object.values(outputs)[0]) : undefined;

/* Pinned data of the graph (created on first use). */
export function pins(ed) {
  ed.meta.settings.pinData = ed.meta.settings.pinData || {};
  return ed.meta.settings.pinData;
}

/* A node's outputs as tests and previews see them: pinned first, else the last run's. */
export function outputsOf(ed, id) {
  return (ed.meta.settings.pinData || {})[id] || ed.outputs[id];
}

/* The wires into ``nodeId`` and every node upstream of it. */
export function upstream(ed, nodeId) {
  const parents = {};
  for (const e of ed.gv.toJSON().edges) (parents[e.target] = parents[e.target] || []).push(e);
  const seen = new Set();
  const stack = (parents[nodeId] || []).map((e) => e.source);
  while (stack.length) {
    const id = stack.pop();
    if (seen.has(id)) continue;
    seen.add(id);
    stack.push(...(parents[id] || []).map((e) => e.source));
  }
  return { parents: parents[nodeId] || [], nodes: [...seen].map((id) => ed.gv.node(id)).filter(Boolean) };
}

/* What ``input`` and ``$('Name')`` read when previewing an expression of ``nodeId``. */
export function scopeFor(ed, nodeId) {
  const { parents, nodes } = upstream(ed, nodeId);
  const flow = parents.find((e) => e.data.channel === "flow" && outputsOf(ed, e.source));
  const named = nodes.filter((n) => outputsOf(ed, n._g.id)).map((n) => [n._g.name, mainOf(outputsOf(ed, n._g.id))]);
  const input = flow ? outputsOf(ed, flow.source)[flow.sourceHandle] : null;
  return { input: input === undefined ? null : input, nodes: Object.fromEntries(named), run_input: null };
}

export function suggestions(ed, nodeId) {
  const out = ["input", "input.message", "$run.input"];
  for (const n of upstream(ed, nodeId).nodes) {
    const ref = `$('${n._g.name}').item.json`;
    out.push(ref);
    const value = mainOf(outputsOf(ed, n._g.id));
    const first = Array.isArray(value) ? value[0] : value;
    if (first && typeof first === "object")
      out.push(
        ...Object.keys(first)
          .slice(0, 20)
          .map((k) => `${ref}.${k}`),
      );
  }
  return out;
}

export function outputView(ed, id) {
  const pinned = (ed.meta.settings.pinData || {})[id];
  if (pinned) return { value: pinned, pinned: true };
  return { value: ed.outputs[id], pinned: false, source: "From the last run or test step." };
}
