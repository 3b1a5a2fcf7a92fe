/* Saving from the editor, and validation while building. A graph the kernel accepts is
   saved as a new version (PUT with ?base_version=: 409 when someone saved in between,
   shown, nothing overwritten); one it refuses is saved as a draft (PUT
   /graphs/<id>/draft), which never runs. After each change the graph is validated
   (POST /graphs/validate) and the problem is shown where it points: a badge on the node, a
   red edge, a message under the parameter, and a small chip in the toolbar; never a page
   banner. */
import { ApiError, call } from "./api.js";
import { enc, h, toast } from "./dom.js";

const DATASET = { type: "type", node_id: "node", edge_id: "edge", parameter: "parameter" };

function chip(problem, onClick) {
  const el = h(
    "button",
    { type: "button", class: "chip bad", id: "editor-error", title: problem.message, onclick: onClick },
    `1 problem: ${problem.message}`,
  );
  for (const [k, name] of Object.entries(DATASET)) if (problem[k]) el.dataset[name] = problem[k];
  return el;
}

export class Store {
  constructor(ed, ui) {
    Object.assign(this, { ed, ui, timer: null, seq: 0 });
  }

  /* Show ``problem`` (an API error dict, or null) on the canvas, the panel and the toolbar. */
  show(problem) {
    const { ed, ui } = this;
    ed.problem = problem;
    const p = problem || {};
    const node = p.node_id ? ed.gv.node(p.node_id) : null;
    for (const n of ed.gv.nodes()) n._badges = n === node ? [(p.parameter ? `${p.parameter}: ` : "") + p.message] : [];
    for (const l of Object.values(ed.gv.lg.links || {}))
      if (l) l.color = p.edge_id && l._edgeId === p.edge_id ? "#ef4444" : null;
    ui.problems.replaceChildren(...(problem ? [chip(problem, () => node && ed.select(p.node_id))] : []));
    ed.gv.view.setDirty(true, true);
    this.showInPanel(problem);
  }

  /* The message under the parameter's field, when its node is open in the panel. */
  showInPanel(problem) {
    for (const el of document.querySelectorAll("#node-panel .param .field-error[data-pinned]")) el.textContent = "";
    if (!problem || !problem.parameter || this.ed.selected !== problem.node_id) return;
    const field = document.getElementById(`param-${problem.parameter}-error`);
    if (field) Object.assign(field, { textContent: problem.message }).dataset.pinned = problem.parameter;
  }

  async validate() {
    const mine = ++this.seq;
    const g = this.ed.toJSON();
    if (!g.nodes.length) return (this.show(null), null);
    const answer = await call("POST", "/graphs/validate", { ...g, id: g.id || "draft" }).catch(() => null);
    if (!answer || mine !== this.seq) return null;
    this.show(answer.valid ? null : answer.error);
    return answer.valid ? null : answer.error;
  }

  validateSoon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.validate(), 250);
  }

  conflict(g, err) {
    const over = async () => {
      const latest = await call("GET", `/graphs/${enc(g.id)}`);
      this.ed.baseVersion = latest.version;
      this.ui.conflict.replaceChildren();
      this.save();
    };
    const latest = h("a", { href: `#/graphs/${enc(g.id)}`, target: "_blank" }, "See the latest version");
    const box = h(
      "div",
      { class: "error conflict", role: "alert", id: "save-conflict" },
      h("strong", {}, "Not saved: "),
      err.message,
      " Your edits are kept here. ",
      latest,
      " ",
    );
    box.append(h("button", { type: "button", id: "save-over", onclick: over }, "Save mine on top of it anyway"));
    this.ui.conflict.replaceChildren(box);
    this.ui.status.textContent = "Conflict: not saved";
  }

  async saveDraft(g, problem) {
    const saved = await call("PUT", `/graphs/${enc(g.id)}/draft`, g);
    Object.assign(this.ed, { isDraft: true, dirty: false });
    this.ui.status.textContent = "Saved as a draft: it runs once the marked problem is fixed";
    toast("Saved as a draft (not runnable yet)");
    this.show(saved.problem || problem);
    return { draft: true };
  }

  async saveVersion(g) {
    const { ed, ui } = this;
    const isNew = ed.baseVersion == null;
    const saved = isNew
      ? await call("POST", "/graphs", g)
      : await call("PUT", `/graphs/${enc(g.id)}?base_version=${ed.baseVersion}`, g);
    Object.assign(ed, { baseVersion: saved.version, dirty: false, isDraft: false });
    ed.meta.id = saved.id;
    ui.idField.disabled = true;
    ui.status.textContent = `Saved as version ${saved.version}`;
    toast(`Saved as version ${saved.version}`);
    call("DELETE", `/graphs/${enc(saved.id)}/draft`).catch(() => {});
    if (isNew) history.replaceState(null, "", `#/graphs/${enc(saved.id)}`);
    return saved;
  }

  /* Save: a version when the graph is valid, else a draft. Null when nothing was saved. */
  async save() {
    const g = this.ed.toJSON();
    this.ui.conflict.replaceChildren();
    if (!g.id) {
      toast("Give the graph an id first", "error");
      this.ui.idField.focus();
      return null;
    }
    try {
      const problem = await this.validate();
      return problem ? await this.saveDraft(g, problem) : await this.saveVersion(g);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409 && this.ed.baseVersion != null) this.conflict(g, err);
      else toast(err.message, "error");
      return null;
    }
  }
}
