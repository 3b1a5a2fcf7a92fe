/* The editor without a mouse: keys on the canvas select, move, add, connect and delete
   nodes, zoom and undo (the list is in panel.js's KEYS_HELP). */

const STEP = 10;

function cycle(ed, backwards) {
  const nodes = [...ed.gv.nodes()].sort((a, b) => a.pos[0] - b.pos[0] || a.pos[1] - b.pos[1]);
  if (!nodes.length) return;
  const i = nodes.findIndex((n) => n._g.id === ed.selected);
  const next = nodes[(i + (backwards ? -1 : 1) + nodes.length) % nodes.length];
  ed.select(next._g.id);
  ed.reveal(next);
}

function move(ed, key, far) {
  const d = far ? STEP * 5 : STEP;
  const [dx, dy] = { ArrowLeft: [-d, 0], ArrowRight: [d, 0], ArrowUp: [0, -d], ArrowDown: [0, d] }[key];
  const ids = ed.gv.selectedIds();
  for (const id of ids) {
    const n = ed.gv.node(id);
    n.pos = [n.pos[0] + dx, n.pos[1] + dy];
  }
  ed.gv.view.setDirty(true, true);
  if (ids.length) ed.changed();
  return ids.length > 0;
}

function focusPanel(selector) {
  const el = document.querySelector(selector);
  if (!el) return;
  if (el.tagName === "DETAILS") el.open = true;
  (el.tagName === "DETAILS" ? el.querySelector("select, button") : el).focus();
}

const MOD = { c: (ed) => ed.copy(), v: (ed) => ed.paste(), y: (ed) => ed.redo() };

const KEYS = {
  Delete: (ed) => ed.deleteNodes(ed.gv.selectedIds()),
  Backspace: (ed) => ed.deleteNodes(ed.gv.selectedIds()),
  n: (ed) => cycle(ed, false),
  N: (ed) => cycle(ed, true),
  a: (ed) => ed.palette.search.focus(),
  Enter: () => focusPanel("#node-panel input, #node-panel textarea, #node-panel select"),
  c: () => focusPanel("#connections"),
  f: (ed) => ed.gv.fit(),
  "+": (ed) => ed.gv.zoom(1.25),
  "=": (ed) => ed.gv.zoom(1.25),
  "-": (ed) => ed.gv.zoom(0.8),
};

function plainKey(ed, e) {
  if (e.key.startsWith("Arrow")) return move(ed, e.key, e.shiftKey);
  if (!KEYS[e.key]) return false;
  KEYS[e.key](ed);
  return true;
}

export function bindKeys(ed, canvas) {
  canvas.addEventListener("keydown", (e) => {
    const mod = e.ctrlKey || e.metaKey;
    const key = e.key.toLowerCase();
    let done = false;
    if (mod && key === "z") done = (e.shiftKey ? ed.redo() : ed.undo(), true);
    else if (mod && MOD[key]) done = (MOD[key](ed), true);
    else if (!mod && !e.altKey) done = plainKey(ed, e);
    if (done) e.preventDefault();
  });
}
