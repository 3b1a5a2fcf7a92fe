/* A node's settings in the panel: retries, error mode, timeout, disabled. ``update(fn)``
   applies ``fn`` to the node's settings and records the change. */
import { h } from "./dom.js";

const number = (v) => (v === "" ? undefined : Number(v));

function setRetry(s, key, value) {
  s.retry = { ...(s.retry || {}) };
  if (value === undefined || (key === "max_attempts" && value <= 1)) delete s.retry[key];
  else s.retry[key] = value;
  if (!Object.keys(s.retry).length) delete s.retry;
}

function retryFields(retry, update) {
  const attempts = h("input", { id: "set-attempts", type: "number", min: 1, max: 100, value: retry.max_attempts || 1 });
  attempts.addEventListener("change", () => update((s) => setRetry(s, "max_attempts", number(attempts.value))));
  const wait = h("input", {
    id: "set-interval",
    type: "number",
    min: 0,
    step: "any",
    value: retry.initial_interval_s ?? "",
  });
  wait.addEventListener("change", () => update((s) => setRetry(s, "initial_interval_s", number(wait.value))));
  return [
    h("label", { for: "set-attempts" }, "Retry: max attempts"),
    attempts,
    h("label", { for: "set-interval" }, "Retry: first wait (s)"),
    wait,
  ];
}

const ON_ERROR = {
  stop: "stop the run",
  continue: "continue (the error becomes data)",
  error_port: "route to an error port",
};

function errorFields(settings, update) {
  const mode = h(
    "select",
    { id: "set-on-error" },
    Object.entries(ON_ERROR).map(([m, label]) =>
      h("option", { value: m, selected: (settings.on_error || "stop") === m }, label),
    ),
  );
  mode.addEventListener("change", () =>
    update((s) => (mode.value === "stop" ? delete s.on_error : (s.on_error = mode.value))),
  );
  const timeout = h("input", {
    id: "set-timeout",
    type: "number",
    min: 0,
    step: "any",
    value: settings.timeout_s ?? "",
  });
  timeout.addEventListener("change", () =>
    update((s) => (number(timeout.value) > 0 ? (s.timeout_s = number(timeout.value)) : delete s.timeout_s)),
  );
  const disabled = h("input", { id: "set-disabled", type: "checkbox", checked: !!settings.disabled });
  disabled.addEventListener("change", () =>
    update((s) => (disabled.checked ? (s.disabled = true) : delete s.disabled)),
  );
  return [
    h("label", { for: "set-on-error" }, "On error"),
    mode,
    h("label", { for: "set-timeout" }, "Timeout (s)"),
    timeout,
    h("label", { class: "check" }, disabled, " Disabled (skipped at run time)"),
  ];
}

export function settingsFields(settings, update, open) {
  const summary = h("summary", {}, "Settings");
  return h(
    "details",
    { class: "settings", open: open || Object.keys(settings).length > 0 },
    summary,
    retryFields(settings.retry || {}, update),
    errorFields(settings, update),
  );
}
