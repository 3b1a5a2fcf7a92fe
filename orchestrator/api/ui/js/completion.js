/* Completion inside {{ }}: typing "{{" in an expression field offers ``input``,
   ``$('Name').item.json`` for each upstream node, and the fields of its last or pinned
   output. */
import { h } from "./dom.js";

function apply(field, open, text, list) {
  const after = field.value.slice(field.selectionStart);
  const head = field.value.slice(0, open + 2) + " " + text + " ";
  field.value = head + (after.trimStart().startsWith("}}") ? after.trimStart() : "}}" + after);
  field.selectionStart = field.selectionEnd = head.length;
  field.dispatchEvent(new Event("input"));
  field.dispatchEvent(new Event("change"));
  list.hidden = true;
}

/* A suggestion list for ``field``; ``suggestions()`` gives the candidate texts. */
export function completer(field, suggestions) {
  const list = h("ul", { class: "suggest", role: "listbox", hidden: true });
  const update = () => {
    const before = field.value.slice(0, field.selectionStart);
    const open = before.lastIndexOf("{{");
    if (open < 0 || before.lastIndexOf("}}") > open) return void (list.hidden = true);
    const typed = before
      .slice(open + 2)
      .trim()
      .toLowerCase();
    const items = suggestions().filter((s) => !typed || s.toLowerCase().startsWith(typed));
    const pick = (s) => (e) => {
      e.preventDefault();
      apply(field, open, s, list);
    };
    list.replaceChildren(
      ...items.map((s) => h("li", {}, h("button", { type: "button", class: "suggestion", onmousedown: pick(s) }, s))),
    );
    list.hidden = !items.length;
  };
  field.addEventListener("input", update);
  field.addEventListener("click", update);
  field.addEventListener("blur", () => setTimeout(() => (list.hidden = true), 150));
  return list;
}
