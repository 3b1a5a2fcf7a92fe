/* The sign-in page: an API key of this deployment, exchanged for a session cookie. */
import { signIn } from "./api.js";
import { errorBox, h } from "./dom.js";

export function signInForm(onDone) {
  const input = h("input", {
    id: "api-key",
    type: "password",
    autocomplete: "current-password",
    required: true,
    "aria-describedby": "signin-help",
  });
  const status = h("div", { "aria-live": "assertive" });
  const submit = async (e) => {
    e.preventDefault();
    try {
      await signIn(input.value.trim());
      onDone();
    } catch (err) {
      status.replaceChildren(errorBox(err));
    }
  };
  setTimeout(() => input.focus(), 0);
  return h(
    "form",
    { id: "signin", class: "card narrow", onsubmit: submit },
    h("h1", {}, "Sign in"),
    h(
      "p",
      { id: "signin-help" },
      "Enter an API key of this deployment. It is exchanged for a session cookie and not stored by the console.",
    ),
    h("label", { for: "api-key" }, "API key"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    status,
    h(
      "p",
      { class: "muted small", id: "key-source" },
      "Keys come from whoever runs this server: they are set in its ORCH_API_KEYS setting (or in the file ORCH_API_KEYS_FILE names, which gives each key a workspace and a role). Ask them for one; docs/security.md says more.",
    ),
  );
}
