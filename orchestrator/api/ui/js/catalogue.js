/* What the API says about node types, loaded once per page load: the definitions of
   GET /nodes, the socket catalogue, and the wiring rule of GET /nodes/sockets (the
   kernel's own table: the console holds no copy of it). */
import { call } from "./api.js";
import { loadSprite } from "./dom.js";

let loaded = null;

export const CATEGORY_COLOURS = {
  trigger: "#10b981",
  core: "#10b981",
  agents: "#7c3aed",
  ai: "#3b82f6",
  flow: "#f59e0b",
  data: "#f97316",
  tools: "#eab308",
  utility: "#64748b",
  rag: "#06b6d4",
  integration: "#ec4899",
};

/* {defs: {type: definition}, sockets: {id: socket}, raw, rules: {generic, pairs}} */
export function catalogue() {
  if (!loaded) {
    loaded = Promise.all([call("GET", "/nodes"), call("GET", "/nodes/sockets"), loadSprite()]).then(
      ([data, rules]) => ({
        defs: Object.fromEntries(data.nodes.map((n) => [n.id, n])),
        sockets: Object.fromEntries(data.sockets.map((s) => [s.id, s])),
        raw: data,
        rules: { generic: new Set(rules.generic), pairs: new Set(rules.coercions.map(([a, b]) => `${a}>${b}`)) },
      }),
    );
    loaded.catch(() => {
      loaded = null;
    });
  }
  return loaded;
}

/* Whether a ``source`` socket may feed a ``target`` socket: equal types, a generic type on
   either end, or a coercion pair of the API's table. */
export function compatible(rules, source, target) {
  const a = String(source || "data");
  const b = String(target || "data");
  return a === b || rules.generic.has(a) || rules.generic.has(b) || rules.pairs.has(`${a}>${b}`);
}

export const colourOf = (def) => (def && (def.color || CATEGORY_COLOURS[def.category])) || "#475569";

/* The parameters drawn on a node (at most two): required ones first, then any that has a
   value; never an empty one. */
export function keyParameters(def, data) {
  const params = (def.parameters || []).filter((p) => p.mode !== "socket" && p.type !== "secret");
  const valued = params.filter((p) => !isEmpty(data[p.id] !== undefined ? data[p.id] : p.default));
  const ranked = [...valued.filter((p) => p.required), ...valued.filter((p) => !p.required && p.id in data)];
  return [...new Set(ranked)].slice(0, 2);
}

export const isEmpty = (v) =>
  v == null || v === "" || (Array.isArray(v) && !v.length) || (typeof v === "object" && !Object.keys(v).length);

/* A short text for a value on a node: strings as they are, a nested graph by its size,
   others as JSON. */
export function shortText(v) {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && Array.isArray(v.nodes)) return `graph of ${v.nodes.length} nodes`;
  return JSON.stringify(v);
}
