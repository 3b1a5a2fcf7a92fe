/* Canvas navigation controls laid over a graph view: zoom in, zoom out, fit to view, and a
   minimap (every node as a box in its state's colour, the visible area framed; a click or
   drag on it moves the view there). */
import { h, iconButton } from "./dom.js";
import { STATE_COLOURS } from "./node_draw.js";

const MAP_W = 200;
const MAP_H = 130;
const MIN_HEIGHT_FOR_MAP = 640; // canvas height (px) from which the minimap is shown by default

function mapGeometry(gv) {
  const nodes = gv.nodes();
  const minX = Math.min(...nodes.map((n) => n.pos[0])) - 40;
  const minY = Math.min(...nodes.map((n) => n.pos[1])) - 60;
  const maxX = Math.max(...nodes.map((n) => n.pos[0] + n.size[0])) + 40;
  const maxY = Math.max(...nodes.map((n) => n.pos[1] + n.size[1])) + 40;
  const scale = Math.min(MAP_W / (maxX - minX), MAP_H / (maxY - minY));
  return { minX, minY, scale };
}

function drawMap(map, gv) {
  const ctx = map.getContext("2d");
  ctx.clearRect(0, 0, MAP_W, MAP_H);
  if (!gv.nodes().length) return null;
  const g = mapGeometry(gv);
  const tx = (x) => (x - g.minX) * g.scale;
  const ty = (y) => (y - g.minY) * g.scale;
  for (const n of gv.nodes()) {
    ctx.fillStyle = STATE_COLOURS[n._state] || n.color || "#64748b";
    ctx.fillRect(
      tx(n.pos[0]),
      ty(n.pos[1] - 20),
      Math.max(2, n.size[0] * g.scale),
      Math.max(2, (n.size[1] + 20) * g.scale),
    );
  }
  const ds = gv.view.ds;
  const [vx, vy] = [-ds.offset[0], -ds.offset[1]];
  ctx.strokeStyle = "#fbbf24";
  ctx.lineWidth = 1.5;
  ctx.strokeRect(tx(vx), ty(vy), (gv.canvas.width / ds.scale) * g.scale, (gv.canvas.height / ds.scale) * g.scale);
  return g;
}

function panTo(gv, geometry, event, map) {
  if (!geometry) return;
  const r = map.getBoundingClientRect();
  const x = (event.clientX - r.left) / geometry.scale + geometry.minX;
  const y = (event.clientY - r.top) / geometry.scale + geometry.minY;
  const ds = gv.view.ds;
  ds.offset = [-(x - gv.canvas.width / ds.scale / 2), -(y - gv.canvas.height / ds.scale / 2)];
  gv.view.setDirty(true, true);
}

/* Controls and minimap over ``gv`` (a graph view), inside ``area``; returns {destroy}. */
export function addNavigator(area, gv, extra = []) {
  const map = h("canvas", { class: "minimap", width: MAP_W, height: MAP_H, "aria-hidden": "true" });
  let geometry = null;
  let dragging = false;
  map.addEventListener("pointerdown", (e) => {
    dragging = true;
    map.setPointerCapture(e.pointerId);
    panTo(gv, geometry, e, map);
  });
  map.addEventListener("pointermove", (e) => dragging && panTo(gv, geometry, e, map));
  map.addEventListener("pointerup", () => {
    dragging = false;
  });
  map.hidden = area.clientHeight < MIN_HEIGHT_FOR_MAP; // on a short canvas it would cover nodes: off
  const pressed = String(!map.hidden);
  const toggle = iconButton(
    "map",
    "Minimap",
    { class: "icon-only", "aria-pressed": pressed, id: "toggle-minimap" },
    false,
  );
  toggle.addEventListener("click", () => {
    map.hidden = !map.hidden;
    toggle.setAttribute("aria-pressed", String(!map.hidden));
  });
  const bar = h(
    "div",
    { class: "canvas-tools", role: "toolbar", "aria-label": "Canvas" },
    iconButton("zoom-in", "Zoom in", { class: "icon-only", id: "zoom-in", onclick: () => gv.zoom(1.25) }, false),
    iconButton("zoom-out", "Zoom out", { class: "icon-only", id: "zoom-out", onclick: () => gv.zoom(0.8) }, false),
    iconButton("maximize", "Fit to view", { class: "icon-only", id: "fit-view", onclick: () => gv.fit() }, false),
    toggle,
    extra,
  );
  area.append(bar, map);
  const timer = setInterval(() => {
    if (!map.hidden) geometry = drawMap(map, gv);
  }, 250);
  geometry = drawMap(map, gv);
  return { destroy: () => clearInterval(timer) };
}
