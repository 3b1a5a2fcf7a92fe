/* How a node is drawn on the canvas (one LiteGraph node type for the run view and the
   editor): its icon in the title, its typed sockets, at most two key parameters as
   "label value" lines whose value is cut to the room left by the label (never drawn over
   it, at any zoom), its run state as a coloured frame with the state's name, and small
   validation badges. Flow edges are drawn solid, link edges dashed. */
import { iconImage } from "./dom.js";
import { keyParameters, shortText } from "./catalogue.js";

export const STATE_COLOURS = {
  queued: "#94a3b8",
  running: "#38bdf8",
  succeeded: "#22c55e",
  failed: "#ef4444",
  continued: "#f59e0b",
  skipped: "#a1a1aa",
  not_run: "#52525b",
  retrying: "#f59e0b",
  waiting: "#d946ef",
  cancelled: "#b45309",
};
export const NODE_W = 220;
export const SLOT_H = 20;
export const LINE_H = 18;
const LOW_ZOOM = 0.6; // LiteGraph draws no text below this scale: the title is drawn here instead
let registered = false;

/* Text cut with "…" to fit ``room`` pixels in the context's current font. */
export function fit(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (ctx.measureText(text.slice(0, mid) + "…").width <= room) lo = mid;
    else hi = mid - 1;
  }
  return lo ? text.slice(0, lo) + "…" : "";
}

function drawKeyParams(node, ctx) {
  const data = node._g.data || {};
  const top = node._rows * SLOT_H + 8;
  ctx.font = "12px system-ui, sans-serif";
  keyParameters(node._def, data).forEach((p, i) => {
    const y = top + i * LINE_H + 12;
    const label = `${p.label || p.id}`;
    const value = data[p.id] !== undefined ? data[p.id] : p.default;
    const room = node.size[0] - 20;
    const shownLabel = fit(ctx, label, room * 0.45);
    const labelWidth = ctx.measureText(shownLabel).width + 8;
    ctx.fillStyle = "#8b95a7";
    ctx.textAlign = "left";
    ctx.fillText(shownLabel, 10, y);
    const text = shortText(value);
    ctx.fillStyle = /\{\{/.test(text) ? "#c4b5fd" : "#e5e7eb";
    ctx.fillText(fit(ctx, text, room - labelWidth), 10 + labelWidth, y);
  });
}

function drawState(node, ctx) {
  const colour = STATE_COLOURS[node._state];
  if (!colour) return;
  const pulse = node._state === "running" ? 0.45 + 0.55 * Math.abs(Math.sin(Date.now() / 300)) : 1;
  const th = LiteGraph.NODE_TITLE_HEIGHT;
  ctx.save();
  ctx.globalAlpha = pulse;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 4;
  ctx.strokeRect(-3, -th - 3, node.size[0] + 6, node.size[1] + th + 6);
  ctx.globalAlpha = 1;
  ctx.fillStyle = colour;
  ctx.font = "bold 12px system-ui, sans-serif";
  ctx.textAlign = "left";
  ctx.fillText(node._stateLabel || node._state.replace("_", " "), 2, node.size[1] + 17);
  ctx.restore();
}

function drawBadges(node, ctx) {
  const badges = node._badges || [];
  if (!badges.length) return;
  const th = LiteGraph.NODE_TITLE_HEIGHT;
  const x = node.size[0] - 12;
  ctx.save();
  ctx.fillStyle = "#ef4444";
  ctx.beginPath();
  ctx.arc(x, -th / 2, 8, 0, Math.PI * 2);
  ctx.fill();
  ctx.fillStyle = "#fff";
  ctx.font = "bold 12px system-ui, sans-serif";
  ctx.textAlign = "center";
  ctx.fillText("!", x, -th / 2 + 4);
  ctx.textAlign = "left";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#fca5a5";
  const below = node.size[1] + (node._state && STATE_COLOURS[node._state] ? 32 : 15);
  ctx.fillText(fit(ctx, badges[0], node.size[0]), 0, below);
  ctx.restore();
}

function drawLowZoomTitle(node, ctx, scale) {
  const px = Math.min(40, 12 / scale);
  ctx.save();
  ctx.font = `bold ${px}px system-ui, sans-serif`;
  ctx.fillStyle = "#fff";
  ctx.textAlign = "left";
  ctx.fillText(fit(ctx, node.title, node.size[0] - 8), 4, Math.min(node.size[1], px + 4));
  ctx.restore();
}

function onDrawForeground(ctx, canvas) {
  const scale = canvas && canvas.ds ? canvas.ds.scale : 1;
  if (scale >= LOW_ZOOM) drawKeyParams(this, ctx);
  else drawLowZoomTitle(this, ctx, scale);
  drawState(this, ctx);
  drawBadges(this, ctx);
  if (this._ring) this._ring(ctx, canvas);
}

function onDrawTitleBox(ctx, titleHeight) {
  const img = iconImage(this._def.icon, "#ffffff");
  if (img.complete) ctx.drawImage(img, 6, -titleHeight + (titleHeight - 16) / 2, 16, 16);
}

function patchLinks() {
  const render = LGraphCanvas.prototype.renderLink;
  LGraphCanvas.prototype.renderLink = function (ctx, a, b, link, ...rest) {
    const dashed = link && link._channel === "link";
    if (dashed) ctx.setLineDash([8, 6]);
    try {
      return render.call(this, ctx, a, b, link, ...rest);
    } finally {
      if (dashed) ctx.setLineDash([]);
    }
  };
}

/* Register the node type and the drawing patches once per page. */
export function register() {
  if (registered) return;
  registered = true;
  LiteGraph.debug = false;
  LiteGraph.NODE_TITLE_COLOR = "#ffffff";
  LiteGraph.NODE_SELECTED_TITLE_COLOR = "#ffffff";
  LiteGraph.NODE_TEXT_COLOR = "#d1d5db";
  LiteGraph.release_link_on_empty_shows_menu = false;
  patchLinks();
  function OrchestratorNode() {
    this.properties = {};
  }
  OrchestratorNode.title = "Node";
  OrchestratorNode.collapsable = false; // no grey dot that folds a node away
  OrchestratorNode.prototype.onDrawForeground = onDrawForeground;
  OrchestratorNode.prototype.onDrawTitleBox = onDrawTitleBox;
  LiteGraph.registerNodeType("orchestrator/node", OrchestratorNode);
}
