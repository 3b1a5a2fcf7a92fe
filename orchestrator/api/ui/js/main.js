/* The console's pages (hash routes), rendered into <main>: #/graphs, #/graphs/new,
   #/graphs/<id>[?version=n] (the editor), #/runs[?status=], #/runs/<run id>,
   #/chat/<graph id>[/<chat id>], #/credentials, #/nodes. Each page cleans up what it
   started (event streams, canvases) when left. */
import { onUnauthorized, session, signOut } from "./api.js";
import { errorBox, h, loadSprite } from "./dom.js";
import { signInForm } from "./signin.js";
import { graphsPage } from "./graphs_page.js";
import { editorPage } from "./editor.js";
import { runPage } from "./run_view.js";
import { runsPage } from "./runs_page.js";
import { chatPage } from "./chat.js";
import { credentialsPage } from "./credentials_page.js";
import { nodesPage } from "./nodes_page.js";

const main = document.getElementById("main");
const cleanups = [];
let afters = [];
const FULL = new Set(["editor", "run"]); // pages that use the whole window below the header

const page = {
  after: (fn) => afters.push(fn),
  cleanup: (...fns) => cleanups.push(...fns),
  reload: () => route(),
};

function cleanup() {
  for (const fn of cleanups.splice(0)) {
    try {
      fn();
    } catch {
      /* already gone */
    }
  }
}

// section -> [page kind, render(id, sub, params)]; with an id, "<section>/" is tried first.
const ROUTES = {
  "graphs/": ["editor", (id, _sub, params) => editorPage(page, id === "new" ? null : id, params)],
  graphs: ["graphs", () => graphsPage(page)],
  "runs/": ["run", (id) => runPage(page, id)],
  runs: ["runs", (_id, _sub, params) => runsPage(page, params)],
  "chat/": ["chat", (id, sub) => chatPage(page, id, sub)],
  credentials: ["credentials", () => credentialsPage(page)],
  nodes: ["nodes", () => nodesPage(page)],
};
const MISSING = [
  "missing",
  async () => [h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/graphs" }, "Go to graphs"))],
];

function pick(parts, params) {
  const [section, id, sub] = parts;
  const [kind, render] = (id && ROUTES[`${section}/`]) || ROUTES[section] || MISSING;
  return [kind, () => render(id, sub, params)];
}

async function route() {
  cleanup();
  afters = [];
  const raw = location.hash.replace(/^#\/?/, "") || "graphs";
  const [path, query] = raw.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("[data-nav]"))
    a.setAttribute("aria-current", a.dataset.nav === parts[0] ? "page" : "false");
  const [kind, render] = pick(parts, new URLSearchParams(query || ""));
  main.className = FULL.has(kind) ? "full" : "";
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  try {
    const content = await render();
    main.replaceChildren(...[content].flat(4).filter((c) => c != null));
    document.title = `${(main.querySelector("h1") || {}).textContent || "Console"} · Orchestrator`;
    for (const fn of afters.splice(0)) fn();
  } catch (err) {
    if (err.status === 401) return; // the sign-in form is shown
    main.replaceChildren(
      h("h1", {}, "Something went wrong"),
      errorBox(err),
      h("p", {}, h("a", { href: "#/graphs" }, "Back to graphs")),
    );
  }
}

const signOutButton = document.getElementById("sign-out");

function needSignIn() {
  signOutButton.hidden = true; // the sign-in page offers no "Sign out"
  if (document.getElementById("signin")) return;
  cleanup();
  main.className = "";
  main.replaceChildren(
    signInForm(() => {
      signOutButton.hidden = false;
      route();
    }),
  );
}

async function boot() {
  onUnauthorized(needSignIn);
  signOutButton.addEventListener("click", () =>
    signOut()
      .catch(() => {})
      .then(needSignIn),
  );
  window.addEventListener("hashchange", route);
  try {
    const [info] = await Promise.all([session(), loadSprite()]);
    if (info.auth && !info.signed_in) return needSignIn();
    signOutButton.hidden = !info.auth;
  } catch (err) {
    return main.replaceChildren(errorBox(err));
  }
  route();
}

boot();
