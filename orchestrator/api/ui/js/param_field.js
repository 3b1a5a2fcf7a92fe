/* One parameter in the node panel: a Fixed / Expression switch (every type, booleans,
   numbers and dropdowns included), the fixed control for the parameter's type or an
   expression field with {{ }} completion, a live preview of the resolved value (the
   API's kernel evaluator against the last run's or pinned data), and errors under it. */
import { call } from "./api.js";
import { h } from "./dom.js";
import { parseInput } from "./json_text.js";
import { completer } from "./completion.js";

const TEXTUAL = new Set(["string", "text", "code", "model", "secret", "expression", "graph"]);
const JSONISH = new Set(["json", "array", "object", "any"]);
const isExpression = (v) => typeof v === "string" && v.includes("{{");
const str = (v) => (v == null ? "" : typeof v === "string" ? v : JSON.stringify(v, null, 1));

function numberControl(p, value, attrs, commit) {
  const field = h("input", {
    ...attrs,
    type: "number",
    min: p.min,
    max: p.max,
    step: p.type === "int" ? 1 : "any",
    value: value ?? "",
  });
  field.addEventListener("change", () => commit(field.value === "" ? undefined : Number(field.value)));
  return field;
}

function jsonControl(p, value, attrs, commit, showError) {
  const field = h("textarea", { ...attrs, rows: 3, spellcheck: "false", class: "json-edit" }, str(value));
  field.addEventListener("change", () => {
    if (isExpression(field.value)) return commit(field.value); // typed an expression: it is one
    const parsed = parseInput(field.value);
    if (parsed.error) {
      field.setAttribute("aria-invalid", "true");
      return showError(parsed.error);
    }
    field.removeAttribute("aria-invalid");
    showError("");
    commit(parsed.value ?? undefined);
  });
  return field;
}

function textControl(p, value, attrs, commit) {
  const multi = ["text", "code"].includes(p.type);
  const tag = multi ? "textarea" : "input";
  const extra = multi
    ? { rows: p.type === "code" ? 6 : 3, spellcheck: "false" }
    : { type: "text", list: p.type === "model" ? "model-list" : null };
  const field = h(tag, { ...attrs, ...extra }, multi ? str(value) : null);
  if (!multi) field.value = str(value);
  field.addEventListener("change", () => commit(field.value));
  return field;
}

/* The control for a fixed value of ``p``. */
function fixedControl(p, value, attrs, commit, showError) {
  if (p.type === "boolean") {
    const field = h("input", { ...attrs, type: "checkbox", checked: value === true });
    field.addEventListener("change", () => commit(field.checked));
    return h("label", { class: "check" }, field, " ", p.label || p.id);
  }
  if (p.type === "enum" && Array.isArray(p.values)) {
    const field = h(
      "select",
      attrs,
      h("option", { value: "" }, "—"),
      p.values.map((v) => h("option", { value: v, selected: v === value }, v)),
    );
    field.addEventListener("change", () => commit(field.value || undefined));
    return field;
  }
  if (p.type === "int" || p.type === "float") return numberControl(p, value, attrs, commit);
  if (JSONISH.has(p.type)) return jsonControl(p, value, attrs, commit, showError);
  return textControl(p, value, attrs, commit);
}

/* What switching to Expression turns a fixed value into, and back. */
export function toExpression(p, value) {
  if (isExpression(value)) return value;
  if (TEXTUAL.has(p.type) && typeof value === "string") return value ? `${value}` : "{{ input }}";
  return `{{ ${value === undefined ? "input" : JSON.stringify(value)} }}`;
}

export function toFixed(p, preview) {
  if (preview === undefined) return undefined;
  if (p.type === "boolean") return preview === true;
  if (p.type === "int" || p.type === "float") return typeof preview === "number" ? preview : undefined;
  if (p.type === "enum") return (p.values || []).includes(preview) ? preview : undefined;
  return TEXTUAL.has(p.type) && typeof preview !== "string" ? JSON.stringify(preview) : preview;
}

function previewer(ctx, p, out) {
  let timer = null;
  let seq = 0;
  return (value) => {
    clearTimeout(timer);
    if (!isExpression(value)) return void out.replaceChildren();
    timer = setTimeout(async () => {
      const mine = ++seq;
      const body = { value, ...ctx.scope(), node_type: ctx.nodeType, parameter: p.id };
      const answer = await call("POST", "/expressions/preview", body).catch((err) => ({ ok: false, error: err }));
      if (mine !== seq) return;
      ctx.lastPreview[p.id] = answer.ok ? answer.value : undefined;
      out.dataset.ok = String(!!answer.ok);
      const empty = body.input == null && !Object.keys(body.nodes || {}).length;
      const hint = empty ? " · no run data yet: run the graph or pin data upstream" : "";
      out.textContent = answer.ok ? `= ${JSON.stringify(answer.value)}${hint}` : answer.error.message;
      out.className = answer.ok ? "preview" : "preview field-error";
    }, 250);
  };
}

function modeSwitch(id, expression, onSwitch) {
  const button = (mode, label) =>
    h(
      "button",
      {
        type: "button",
        class: "mode",
        dataset: { mode },
        "aria-pressed": String((mode === "expression") === expression),
        onclick: () => onSwitch(mode === "expression"),
      },
      label,
    );
  return h(
    "span",
    { class: "mode-switch", role: "group", id: `${id}-mode`, "aria-label": "Value mode" },
    button("fixed", "Fixed"),
    button("expression", "Expression"),
  );
}

/* The field of parameter ``p``; ``ctx``: {value, wired, error, setValue(v), scope(),
   suggestions(), nodeType, lastPreview, expressionMode(p.id)}. */
function expressionControl(ctx, value, attrs, showPreview) {
  const control = h("textarea", { ...attrs, rows: 2, spellcheck: "false", class: "expr-edit" }, str(value));
  control.addEventListener("input", () => showPreview(control.value));
  control.addEventListener("change", () => ctx.setValue(control.value));
  return control;
}

function messages(ctx, p, id) {
  const help = h(
    "div",
    { id: `${id}-help`, class: "muted small" },
    ctx.wired ? "Wired: the wire's value wins over this control." : p.description || "",
  );
  const problem = h("div", { class: "field-error", id: `${id}-error`, "aria-live": "polite" }, ctx.error || "");
  if (ctx.error) problem.dataset.pinned = p.id;
  return { help, problem, preview: h("div", { class: "preview", id: `${id}-preview`, "aria-live": "polite" }) };
}

/* The field of parameter ``p``; ``ctx``: {value, wired, error, setValue(v), switchMode(toExpr,
   v), scope(), suggestions(), nodeType, lastPreview, expressionMode}. */
export function paramField(ctx, p) {
  const id = `param-${p.id}`;
  const value = ctx.value;
  const expression = isExpression(value) || ctx.expressionMode;
  const { help, problem, preview } = messages(ctx, p, id);
  const showPreview = previewer(ctx, p, preview);
  const attrs = { id, dataset: { param: p.id }, disabled: ctx.wired, "aria-describedby": `${id}-help ${id}-error` };
  const commit = (v) => (ctx.setValue(v), showPreview(v));
  const control = expression
    ? expressionControl(ctx, value, attrs, showPreview)
    : fixedControl(p, value, attrs, commit, (t) => (problem.textContent = t));
  const onSwitch = (toExpr) =>
    ctx.switchMode(toExpr, toExpr ? toExpression(p, value) : toFixed(p, ctx.lastPreview[p.id]));
  const label = h(
    "label",
    { for: id },
    p.label || p.id,
    p.required ? h("span", { class: "req", title: "required" }, " *") : null,
  );
  const head = h(
    "div",
    { class: "param-head" },
    label,
    h("span", { class: "muted small" }, p.type),
    modeSwitch(id, expression, onSwitch),
  );
  const cls = `param${ctx.wired ? " wired" : ""}${expression ? " expr" : ""}`;
  const wrap = h(
    "div",
    { class: cls, dataset: { param: p.id } },
    head,
    control,
    expression || TEXTUAL.has(p.type) ? completer(control, ctx.suggestions) : null, // typing {{ in text starts one
    preview,
    problem,
    help,
  );
  if (expression) showPreview(value);
  return wrap;
}
