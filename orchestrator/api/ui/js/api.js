/* The console's API client: same-origin fetch with the session cookie, the CSRF header on
   state-changing calls, JSON errors turned into ApiError objects that keep the API's error
   body (message, graph/node/parameter), and run event streams that resume. */

let csrf = "";
let unauthorized = () => {};
// The console lives at <base>/ui/, so it also works behind a proxy that serves the API
// under a path prefix.
export const BASE = location.pathname.replace(/\/ui(\/.*)?$/, "");

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || (body && body.detail && JSON.stringify(body.detail)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.where = err;
  }
}

/* Called with no argument when the API answers 401 (the sign-in form is shown). */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

export async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const response = await fetch(BASE + path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401) unauthorized();
    throw new ApiError(response.status, data);
  }
  return data;
}

export async function session() {
  const info = await call("GET", "/auth/session");
  csrf = info.csrf_token || "";
  return info;
}

export async function signIn(apiKey) {
  const info = await call("POST", "/auth/session", { api_key: apiKey });
  csrf = info.csrf_token || "";
  return info;
}

export async function signOut() {
  await call("DELETE", "/auth/session");
  csrf = "";
}

const TERMINAL = new Set(["run_completed", "run_failed", "run_cancelled", "run_timed_out"]);
const OVER = ["succeeded", "failed", "cancelled", "timed_out"];

function isTerminal(format, type, data) {
  if (format !== "chat") return TERMINAL.has(type);
  return ["run_completed", "run_cancelled"].includes(type) || (type === "run_error" && data && data.status);
}

/* Follow a run's event stream. ``onEvent(type, data, id)`` gets each event once: the
   browser's EventSource resends Last-Event-ID when it reconnects, and events already seen
   are dropped. Closed after the run's terminal event, or when the run turns out to be
   over after a drop. Returns {close}. */
export function follow(runId, { format = "events", types = [], onEvent, onState = () => {} }) {
  const seen = new Set();
  const url = `/runs/${encodeURIComponent(runId)}/events` + (format === "chat" ? "?format=chat" : "");
  const source = new EventSource(BASE + url, { withCredentials: true });
  let closed = false;
  let quietErrors = 0; // stream errors since the last event
  const close = () => {
    closed = true;
    source.close();
    onState("closed");
  };
  // A node's "error" event and the EventSource's own connection "error" share one name:
  // data events are MessageEvents, connection errors plain Events.
  const handle = (type) => (message) => {
    if (!(message instanceof MessageEvent)) return;
    const key = `${message.lastEventId}|${type}|${message.data}`;
    if (seen.has(key)) return;
    seen.add(key);
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      data = message.data;
    }
    quietErrors = 0;
    onEvent(type, data, message.lastEventId);
    if (isTerminal(format, type, data)) close();
  };
  for (const type of types) source.addEventListener(type, handle(type));
  source.onopen = () => onState("live");
  source.onerror = async (event) => {
    if (closed || event instanceof MessageEvent) return;
    onState("reconnecting");
    quietErrors += 1;
    if (source.readyState === 2) return close(); // refused (e.g. 401/404): the browser gives up
    // The browser reconnects by itself with Last-Event-ID. A run that is over and whose
    // stream twice ended with nothing new has nothing left to send: stop asking.
    const run = await call("GET", `/runs/${encodeURIComponent(runId)}`).catch(() => null);
    if (run && OVER.includes(run.status) && quietErrors >= 2) close();
  };
  return { close };
}
