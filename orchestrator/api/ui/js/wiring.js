/* Wiring on the canvas: LiteGraph asks ``isValidConnection`` while a wire is dragged and
   when it is dropped; the answer is the API's socket table (catalogue.compatible). A drop
   refused by it is reported to the view it happened in, with the two socket types. */
import { compatible } from "./catalogue.js";

let rules = null;
let inMouseUp = false;
let inDraw = false;
let refusal = null;

export function useRules(next) {
  rules = next;
}

export const canWire = (source, target) => !rules || compatible(rules, source, target);

/* Patch LiteGraph once: its wire checks use the socket table, refusals are reported. */
export function patchWiring() {
  if (LiteGraph._orchestratorWiring) return;
  LiteGraph._orchestratorWiring = true;
  LiteGraph.isValidConnection = function (a, b) {
    // LiteGraph's drawNode asks (input, dragged output) while dimming inputs: reorder.
    const [source, target] = inDraw && LiteGraph._reverse ? [b, a] : [a, b];
    const ok = canWire(source, target);
    if (!ok && inMouseUp) refusal = { source: String(source), target: String(target) };
    return ok;
  };
  const drawNode = LGraphCanvas.prototype.drawNode;
  LGraphCanvas.prototype.drawNode = function (...args) {
    inDraw = true;
    LiteGraph._reverse = !!this.connecting_output;
    try {
      return drawNode.apply(this, args);
    } finally {
      inDraw = false;
    }
  };
  const up = LGraphCanvas.prototype.processMouseUp;
  LGraphCanvas.prototype.processMouseUp = function (e) {
    inMouseUp = true;
    refusal = null;
    try {
      return up.call(this, e);
    } finally {
      inMouseUp = false;
      if (refusal && this._onRefuse) this._onRefuse(refusal);
      refusal = null;
    }
  };
}

/* While a wire is dragged: ring the inputs of ``node`` it may go into. */
export function ringCompatible(node, ctx, canvas) {
  if (!canvas || !canvas.connecting_output || canvas.connecting_node === node) return;
  ctx.save();
  ctx.strokeStyle = "#4ade80";
  ctx.lineWidth = 2;
  (node.inputs || []).forEach((input, i) => {
    if (!canWire(canvas.connecting_output.type, input.type)) return;
    const p = node.getConnectionPos(true, i);
    ctx.beginPath();
    ctx.arc(p[0] - node.pos[0], p[1] - node.pos[1], 7, 0, Math.PI * 2);
    ctx.stroke();
  });
  ctx.restore();
}

export function refusalMessage(r) {
  const a = (word) => (/^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`);
  return `Wire refused: ${a(r.source)} output cannot feed ${a(r.target)} socket (the socket table has no ${r.source} → ${r.target} coercion)`;
}
