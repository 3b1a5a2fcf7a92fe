/* Runs from the editor: Save and run (a valid saved version only: a draft does not run),
   Test step (POST /graphs/<id>/test-step: the selected node alone, on the workers, fed
   the pinned or last-run outputs of the nodes before it), and the states and outputs of
   either drawn on the same canvas. */
import { call, follow } from "./api.js";
import { enc, h, toast } from "./dom.js";
import { parseInput } from "./json_text.js";
import { RunState } from "./run_state.js";

const TYPES = [
  "started",
  "completed",
  "error",
  "retry",
  "skipped",
  "not_run",
  "cancelled",
  "agent_event",
  "run_completed",
  "run_failed",
  "run_cancelled",
  "run_timed_out",
];
const ENDED = {
  run_completed: "succeeded",
  run_failed: "failed",
  run_cancelled: "cancelled",
  run_timed_out: "timed out",
};
export const plain = (outputs) =>
  Object.fromEntries(
    Object.entries(outputs || {}).map(([k, v]) => [
      k,
      v && typeof v === "object" && "type" in v && "value" in v ? v.value : v,
    ]),
  );

export class Runner {
  constructor(ed, ui) {
    Object.assign(this, { ed, ui, stream: null, testing: {} });
  }

  watch(runId, onEnd) {
    const ed = this.ed;
    if (this.stream) this.stream.close();
    const rs = new RunState(ed.toJSON());
    const onEvent = (type, e) => {
      if (ENDED[type]) return onEnd(ENDED[type]);
      if (!e.node_id) return;
      rs.apply(type, e);
      for (const id of rs.drain()) ed.gv.setState(id, rs.nodes[id].state, rs.nodes[id].label);
      if (type === "completed" && e.data && e.data.outputs) ed.outputs[e.node_id] = plain(e.data.outputs);
      if (type === "completed" && e.data && e.data.outputs_truncated) this.refreshOutputs(runId);
      if (type === "completed" && e.node_id === ed.selected) ed.drawPanel();
    };
    this.stream = follow(runId, { types: TYPES, onEvent });
    ed.page.cleanup(() => this.stream && this.stream.close());
  }

  async refreshOutputs(runId) {
    const detail = await call("GET", `/runs/${enc(runId)}`).catch(() => null);
    for (const [nid, n] of Object.entries((detail && detail.nodes) || {}))
      if (Object.keys(n.outputs || {}).length) this.ed.outputs[nid] = plain(n.outputs);
    if (this.ed.selected) this.ed.drawPanel();
  }

  async ensureSaved() {
    const ed = this.ed;
    if (!ed.dirty && ed.baseVersion != null && !ed.isDraft) return true;
    const saved = await ed.save();
    if (saved && !saved.draft) return true;
    this.ui.runError.textContent = "Not run: this graph is a draft until the marked problem is fixed.";
    return false;
  }

  async run() {
    const { ed, ui } = this;
    ui.runError.textContent = "";
    const parsed = parseInput(ui.runInput.value);
    if (parsed.error) return void (ui.runError.textContent = parsed.error);
    if (!(await this.ensureSaved())) return;
    for (const n of ed.gv.nodes()) ed.gv.setState(n._g.id, "queued");
    try {
      const r = await call("POST", `/graphs/${enc(ed.meta.id)}/runs`, { input: parsed.value, version: ed.baseVersion });
      const status = h("span", { id: "editor-run-status", dataset: { status: "running" } }, "running");
      ui.runLink.replaceChildren(
        h(
          "a",
          { href: `#/runs/${enc(r.run_id)}`, class: "mono", id: "editor-run-link" },
          `run ${r.run_id.slice(0, 8)}`,
        ),
        " ",
        status,
      );
      this.watch(r.run_id, (ended) => {
        for (const n of ed.gv.nodes()) if (n._state === "queued") ed.gv.setState(n._g.id, "not_run");
        Object.assign(status, { textContent: ended }).dataset.status = ended.replace(" ", "_");
        this.refreshOutputs(r.run_id);
      });
    } catch (err) {
      ui.runError.textContent = err.message;
    }
  }

  /* The upstream outputs a test step is fed: pinned data first, else the last run's; a
     direct parent with neither gives the run input (as a trigger before it would). */
  upstreamOutputs(nodeId, runInput) {
    const out = {};
    for (const n of this.ed.gv.nodes()) {
      const value = this.ed.pins()[n._g.id] || this.ed.outputs[n._g.id];
      if (n._g.id !== nodeId && value) out[n._g.id] = value;
    }
    for (const e of this.ed.gv.toJSON().edges) {
      if (e.target !== nodeId || e.data.channel !== "flow" || out[e.source]) continue;
      out[e.source] = { [e.sourceHandle]: runInput };
    }
    return out;
  }

  async testStep(nodeId) {
    const { ed, ui } = this;
    const id = ed.meta.id || ui.idField.value.trim();
    if (!id) return (toast("Give the graph an id first", "error"), ui.idField.focus());
    const parsed = parseInput(ui.runInput.value);
    const input = parsed.error ? null : parsed.value;
    const body = { node_id: nodeId, graph: ed.toJSON(), input, outputs: this.upstreamOutputs(nodeId, input) };
    this.setStatus(nodeId, "running on the workers…");
    try {
      const r = await call("POST", `/graphs/${enc(id)}/test-step`, body);
      ed.gv.setState(nodeId, "queued");
      this.watch(r.run_id, async (ended) => {
        await this.refreshOutputs(r.run_id);
        this.setStatus(nodeId, `test ${ended}`, r.run_id);
      });
    } catch (err) {
      this.setStatus(nodeId, `not run: ${err.message}`);
    }
  }

  setStatus(nodeId, text, runId) {
    this.testing[nodeId] = { text, runId };
    if (this.ed.selected === nodeId) this.ed.drawPanel();
  }

  async loadLastRun() {
    const ed = this.ed;
    if (!ed.meta.id || ed.baseVersion == null) return;
    const runs = await call("GET", `/graphs/${enc(ed.meta.id)}/runs?limit=1`).catch(() => null);
    const last = runs && runs.items[0];
    if (last) await this.refreshOutputs(last.run_id);
  }

  statusOf(nodeId) {
    const t = this.testing[nodeId];
    if (!t) return "";
    return t.runId
      ? [t.text, " · ", h("a", { href: `#/runs/${enc(t.runId)}`, id: "test-run-link" }, "open the run")]
      : t.text;
  }
}
