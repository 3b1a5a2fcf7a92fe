/* Runs across graphs (#/runs[?status=]). */
import { call } from "./api.js";
import { badge, enc, fmtMs, fmtTime, h } from "./dom.js";

export function runsTable(items) {
  if (!items.length) return h("p", { class: "empty" }, "No runs yet.");
  const head = ["Run", "Graph", "Status", "Trigger", "Started", "Took"].map((t) => h("th", { scope: "col" }, t));
  const row = (r) =>
    h(
      "tr",
      { dataset: { run: r.run_id } },
      h("td", {}, h("a", { href: `#/runs/${enc(r.run_id)}`, class: "mono" }, r.run_id.slice(0, 12))),
      h("td", {}, h("a", { href: `#/graphs/${enc(r.graph_id)}` }, r.graph_id)),
      h("td", {}, badge(r.status)),
      h("td", { class: "muted" }, (r.meta && r.meta.trigger) || ""),
      h("td", {}, fmtTime(r.created_at)),
      h("td", {}, r.finished_at ? fmtMs((r.finished_at - r.created_at) * 1000) : ""),
    );
  return h("table", { class: "list runs" }, h("thead", {}, h("tr", {}, head)), h("tbody", {}, items.map(row)));
}

export async function runsPage(page, params) {
  const status = params.get("status") || "";
  const data = await call("GET", "/runs" + (status ? `?status=${enc(status)}` : ""));
  const statuses = ["", "queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"];
  const filter = h(
    "select",
    { id: "status-filter", "aria-label": "Filter by status" },
    statuses.map((s) => h("option", { value: s, selected: s === status }, s || "all statuses")),
  );
  filter.addEventListener("change", () => (location.hash = filter.value ? `#/runs?status=${filter.value}` : "#/runs"));
  return [h("div", { class: "title-row" }, h("h1", {}, "Runs"), filter), runsTable(data.items)];
}
