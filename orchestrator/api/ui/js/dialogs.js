/* Modal dialogs on the native <dialog> element (focus trapped, Escape closes). */
import { h } from "./dom.js";

/* Ask ``question``; resolves true when ``confirmLabel`` is chosen. */
export function confirmDialog(title, question, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "dialog", id: "confirm-dialog", "aria-labelledby": "confirm-title" });
    const close = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h("h2", { id: "confirm-title" }, title),
      h("p", {}, question),
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "button", id: "confirm-cancel", onclick: () => close(false) }, "Cancel"),
        h("button", { type: "button", class: "danger", id: "confirm-ok", onclick: () => close(true) }, confirmLabel),
      ),
    );
    dialog.addEventListener("cancel", () => close(false));
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("#confirm-cancel").focus();
  });
}

/* A dialog holding ``content``; returns {dialog, close}. */
export function openDialog(title, content, id) {
  const dialog = h("dialog", { class: "dialog wide", id, "aria-labelledby": `${id}-title` });
  const close = () => {
    dialog.close();
    dialog.remove();
  };
  dialog.append(
    h(
      "div",
      { class: "dialog-head" },
      h("h2", { id: `${id}-title` }, title),
      h("button", { type: "button", class: "icon-only", "aria-label": "Close", onclick: close }, "×"),
    ),
    content,
  );
  dialog.addEventListener("cancel", close);
  document.body.append(dialog);
  dialog.showModal();
  return { dialog, close };
}
