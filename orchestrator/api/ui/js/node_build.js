/* A graph JSON node turned into a LiteGraph node: sockets from its definition (declared
   inputs, a typed side socket per hybrid/socket parameter, outputs, and the error port
   when its error mode routes there), its size from its sockets and key parameters. */
import { colourOf, keyParameters } from "./catalogue.js";
import { NODE_W, SLOT_H, LINE_H } from "./node_draw.js";

const clone = (v) => JSON.parse(JSON.stringify(v ?? {}));
const EMPTY_DEF = { inputs: [], outputs: [], parameters: [], category: "" };

function styleSlot(slot, socketId, sockets) {
  const socket = sockets[socketId];
  if (!socket) return;
  slot.color_on = socket.color;
  slot.color_off = socket.color;
  slot.shape = { circle: 3, square: 1, diamond: 5 }[socket.shape] || 3;
}

function addInputs(node, def, sockets) {
  const add = (label, socket, extra) => {
    node.addInput(label, socket);
    const slot = node.inputs.at(-1);
    styleSlot(slot, socket, sockets);
    Object.assign(slot, { _socket: socket, ...extra });
  };
  for (const p of def.inputs || []) {
    add(p.label || p.id, p.socket || "data", { _handle: p.id, _channel: p.channel || "flow", _multiple: !!p.multiple });
  }
  for (const p of def.parameters || []) {
    if (!p.socket || !["hybrid", "socket"].includes(p.mode)) continue;
    add(`${p.label || p.id} ◂`, p.socket.type, { _handle: p.id, _channel: p.socket.channel || "flow", _param: p.id });
  }
}

function addOutputs(node, def, settings, sockets) {
  const outs = [...(def.outputs || [])];
  if (settings.on_error === "error_port") outs.push({ id: "error", label: "error", socket: "data", channel: "flow" });
  for (const p of outs) {
    node.addOutput(p.label || p.id, p.socket || "data");
    const slot = node.outputs.at(-1);
    styleSlot(slot, p.socket || "data", sockets);
    Object.assign(slot, { _handle: p.id, _channel: p.channel || "flow", _socket: p.socket || "data" });
  }
}

/* Recompute a node's size after its sockets or parameters changed. */
export function resize(node) {
  node._rows = Math.max(1, (node.inputs || []).length, (node.outputs || []).length);
  const keys = keyParameters(node._def, node._g.data || {}).length;
  node.size = [NODE_W, node._rows * SLOT_H + (keys ? keys * LINE_H + 10 : 4)];
}

/* The LiteGraph node for graph JSON node ``n`` (``cat`` from catalogue()). */
export function buildNode(n, cat) {
  const def = cat.defs[n.type] || { ...EMPTY_DEF, name: n.type };
  const node = LiteGraph.createNode("orchestrator/node");
  node._g = { id: n.id, type: n.type, name: n.name || n.id, data: clone(n.data), settings: clone(n.settings) };
  node._def = def;
  node._state = null;
  node.title = node._g.name;
  node.color = colourOf(def);
  node.bgcolor = "#1f2430";
  addInputs(node, def, cat.sockets);
  addOutputs(node, def, node._g.settings, cat.sockets);
  node.inputs = node.inputs || []; // LiteGraph leaves them undefined when there are none
  node.outputs = node.outputs || [];
  resize(node);
  return node;
}

/* Ports declared by wires that the definition does not have (an unknown type's): added so
   the wire still shows. */
export function ensureSlot(node, dir, handle) {
  const list = dir === "in" ? node.inputs || [] : node.outputs || [];
  const index = list.findIndex((s) => s._handle === handle);
  if (index >= 0) return index;
  if (dir === "in") node.addInput(handle, "data");
  else node.addOutput(handle, "data");
  const slots = dir === "in" ? node.inputs : node.outputs;
  Object.assign(slots.at(-1), { _handle: handle, _channel: "flow", _socket: "data" });
  resize(node);
  return slots.length - 1;
}
