// Writes ../ui/vendor/icons.svg: a sprite of the Lucide icons named by the repository's
// node definitions ("icon": "Bot" -> <symbol id="bot">) plus the few the console's own
// buttons use (CONSOLE below), so the console ships a few KB instead of the whole icon
// set. An icon a node pack names that is not in the sprite falls back to a generic box.
import { readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const root = join(here, "../../..");
const CONSOLE = [
  "box", "copy", "download", "flask-conical", "key-round", "layout-grid", "map", "maximize", "minus", "pin",
  "plus", "redo-2", "save", "trash-2", "undo-2", "upload", "zoom-in", "zoom-out", "message-square", "x",
];
const kebab = (name) =>
  name
    .replace(/([a-z0-9])([A-Z])/g, "$1-$2")
    .replace(/([a-zA-Z])(\d)/g, "$1-$2")
    .toLowerCase();
const names = new Set(CONSOLE);
(function walk(dir) {
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) walk(path);
    else if (entry === "definition.json") {
      const icon = JSON.parse(readFileSync(path, "utf8")).icon;
      if (icon) names.add(kebab(icon));
    }
  }
})(join(root, "nodes"));
const symbols = [...names].sort().map((id) => {
  const svg = readFileSync(join(here, "node_modules/lucide-static/icons", `${id}.svg`), "utf8");
  const body = svg
    .replace(/^[\s\S]*?<svg[^>]*>/, "")
    .replace(/<\/svg>\s*$/, "")
    .trim();
  return `<symbol id="${id}" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">${body}</symbol>`;
});
writeFileSync(
  join(here, "../ui/vendor/icons.svg"),
  `<svg xmlns="http://www.w3.org/2000/svg"><!-- Lucide icons (ISC), see LICENSE.lucide -->\n${symbols.join("\n")}\n</svg>\n`,
);
console.log(`icons.svg: ${symbols.length} icons`);
