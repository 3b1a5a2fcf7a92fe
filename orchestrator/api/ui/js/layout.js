/* Automatic layout: layers left to right (a node one column right of its furthest
   upstream node), long layers wrapped into several columns so a wide fan-out stays
   readable, and nodes with no edge at all placed in a grid below. */

const GAP_X = 80;
const GAP_Y = 36;
const MAX_ROWS = 10; // nodes in one column before a layer wraps into the next

function depths(nodes, edges) {
  const ids = new Set(nodes.map((n) => n.id));
  const parents = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) if (ids.has(e.source) && ids.has(e.target)) parents.get(e.target).push(e.source);
  const depth = new Map();
  const visit = (id, trail) => {
    if (depth.has(id)) return depth.get(id);
    if (trail.has(id)) return 0;
    trail.add(id);
    const d = Math.max(-1, ...parents.get(id).map((p) => visit(p, trail))) + 1;
    trail.delete(id);
    depth.set(id, d);
    return d;
  };
  nodes.forEach((n) => visit(n.id, new Set()));
  return depth;
}

/* Positions {id: [x, y]} for ``nodes`` (each {id, w, h}) given ``edges``. */
export function layered(nodes, edges) {
  const wired = new Set(edges.flatMap((e) => [e.source, e.target]));
  const placed = nodes.filter((n) => wired.has(n.id) || nodes.length === 1);
  const loose = nodes.filter((n) => !placed.includes(n));
  const depth = depths(placed, edges);
  const layers = [];
  for (const n of placed) (layers[depth.get(n.id)] = layers[depth.get(n.id)] || []).push(n);
  const out = {};
  let x = 0;
  let bottom = 0;
  for (const layer of layers.filter(Boolean)) {
    const width = Math.max(...layer.map((n) => n.w));
    const pitch = Math.max(...layer.map((n) => n.h)) + GAP_Y;
    const columns = Math.ceil(layer.length / MAX_ROWS);
    const rows = Math.ceil(layer.length / columns);
    layer.forEach((n, i) => {
      out[n.id] = [x + Math.floor(i / rows) * (width + GAP_X / 2), (i % rows) * pitch];
    });
    bottom = Math.max(bottom, rows * pitch);
    x += columns * (width + GAP_X / 2) + GAP_X / 2;
  }
  return { ...out, ...grid(loose, placed.length ? bottom + GAP_Y * 2 : 0) };
}

/* Nodes with no edge: a grid of rows of five, starting at ``top``. */
export function grid(nodes, top) {
  const out = {};
  const pitchX = Math.max(240, ...nodes.map((n) => n.w + GAP_X / 2));
  const pitchY = Math.max(100, ...nodes.map((n) => n.h + GAP_Y));
  nodes.forEach((n, i) => {
    out[n.id] = [(i % 5) * pitchX, top + Math.floor(i / 5) * pitchY];
  });
  return out;
}
