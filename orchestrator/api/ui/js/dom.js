/* DOM helpers shared by every page: an element builder, icons from the vendored Lucide
   sprite, toasts, error boxes and a JSON viewer. */
import { BASE } from "./api.js";

/* h("div", {class: "x", onclick: fn}, "text", child, [children]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) setAttr(el, k, v);
  for (const c of children.flat(4)) if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

function setAttr(el, key, value) {
  if (value == null || value === false) return;
  if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
  else if (key === "dataset") Object.assign(el.dataset, value);
  else if (key === "value" && "value" in el) el.value = value;
  else el.setAttribute(key, value === true ? "" : value);
}

export const enc = encodeURIComponent;
export const fmtTime = (s) => (s ? new Date(s * 1000).toLocaleString() : "");
export const fmtMs = (ms) => {
  if (ms == null) return "";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
};
export const badge = (status) =>
  h("span", { class: `badge s-${status}`, dataset: { status } }, String(status).replace("_", " "));

const SVG = "http://www.w3.org/2000/svg";
const sprite = { ids: new Set(), bodies: new Map() };
export const kebab = (name) =>
  String(name || "")
    .replace(/([a-z0-9])([A-Z])/g, "$1-$2")
    .replace(/([a-zA-Z])(\d)/g, "$1-$2")
    .toLowerCase();

/* Read the vendored sprite once: which icons exist, and their SVG bodies (for canvases). */
export async function loadSprite() {
  if (sprite.ids.size) return;
  const text = await fetch("vendor/icons.svg")
    .then((r) => (r.ok ? r.text() : ""))
    .catch(() => "");
  for (const m of text.matchAll(/<symbol id="([^"]+)"[^>]*>([\s\S]*?)<\/symbol>/g)) {
    sprite.ids.add(m[1]);
    sprite.bodies.set(m[1], m[2]);
  }
}

export const iconId = (name) => (sprite.ids.has(kebab(name)) ? kebab(name) : "box");

/* An inline <svg> of icon ``name`` (a node definition's "Bot" or a sprite id "zoom-in"). */
export function icon(name, cls = "icon-svg") {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", cls);
  svg.setAttribute("aria-hidden", "true");
  const use = document.createElementNS(SVG, "use");
  use.setAttribute("href", `vendor/icons.svg#${iconId(name)}`);
  svg.append(use);
  return svg;
}

const images = new Map();
/* The icon as an <img> source for drawing on a canvas, in ``colour``. */
export function iconImage(name, colour) {
  const key = `${iconId(name)}|${colour}`;
  if (!images.has(key)) {
    const body = sprite.bodies.get(iconId(name)) || "";
    const svg = `<svg xmlns="${SVG}" viewBox="0 0 24 24" width="24" height="24" fill="none" stroke="${colour}" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">${body}</svg>`;
    const img = new Image();
    img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
    images.set(key, img);
  }
  return images.get(key);
}

/* A button with an icon and a text label (the label may be visually hidden). */
export function iconButton(name, label, attrs = {}, showLabel = true) {
  const text = showLabel ? h("span", {}, label) : h("span", { class: "sr-only" }, label);
  return h("button", { type: "button", title: label, ...attrs }, icon(name), text);
}

export function toast(message, kind = "info") {
  const t = document.getElementById("toast");
  t.textContent = message;
  t.className = `show ${kind}`;
  clearTimeout(t._timer);
  t._timer = setTimeout(() => {
    t.className = "";
  }, 4000);
}

const WHERE = ["graph_id", "node_id", "edge_id", "handle", "parameter"];

export function errorBox(err) {
  const where = err.where || {};
  const parts = WHERE.filter((k) => where[k]).map((k) => `${k}: ${where[k]}`);
  return h(
    "div",
    { class: "error", role: "alert" },
    h("strong", {}, err.status ? `Error ${err.status}: ` : "Error: "),
    err.message,
    parts.length ? h("div", { class: "where" }, parts.join(" · ")) : null,
  );
}

const LINK = /^(https?:\/\/|\/(?![/\\])[^\s\\]*$)/i; // already a link: http(s) URL or a path of this site

function fileLink(ref) {
  // A file in the API's file store downloads from GET /files/{ref} with the session
  // cookie; a ref that is already an http(s) URL or a path of this site links to it.
  // "//host/…", "/\host/…" or "/<tab>/host/…" would be links to another site (browsers
  // read "\" as "/" and drop tabs and newlines): such a ref goes to /files/ like any other.
  if (LINK.test(ref || "")) return ref;
  return ref ? `${BASE}/files/${encodeURIComponent(ref)}` : null;
}

const isFile = (v) => v && typeof v === "object" && v.$binary;

export function jsonView(value) {
  if (value && typeof value === "object" && !Array.isArray(value) && !isFile(value)) {
    if (Object.values(value).some(isFile)) {
      return h(
        "div",
        {},
        Object.entries(value).map(([k, v]) => h("div", {}, h("span", { class: "mono" }, `${k}: `), jsonView(v))),
      );
    }
  }
  if (isFile(value)) {
    const b = value.$binary;
    const href = fileLink(b.ref);
    const link = href ? h("a", { href, download: "" }, "download") : h("span", { class: "muted" }, "(no reference)");
    return h("div", { class: "binary" }, `binary ${b.mime} · ${b.size} bytes · ${b.ref} `, link);
  }
  const text = value === undefined ? "—" : JSON.stringify(value, null, 2);
  return h("pre", { class: "json", tabindex: "0" }, text);
}

/* Offer ``text`` as a file download named ``name``. */
export function download(name, text, mime = "application/json") {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  // the browser reads the blob when its download starts, which a busy machine may only do
  // seconds later: revoked any sooner, the download never happens
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
