// The console's lint rules (run by ./dev test through `npm run lint`): the recommended
// set, browser globals, ES modules, and limits that keep functions small and simple.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["vendor/**"] },
  {
    files: ["**/*.js"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: "module",
      globals: { ...globals.browser, LiteGraph: "readonly", LGraph: "readonly", LGraphCanvas: "readonly", LGraphNode: "readonly" },
    },
    rules: {
      ...js.configs.recommended.rules,
      complexity: ["error", 12],
      "max-lines-per-function": ["error", { max: 60, skipBlankLines: true, skipComments: true }],
      "max-lines": ["error", { max: 400, skipBlankLines: false, skipComments: false }],
      "max-depth": ["error", 4],
      "max-params": ["error", 5],
      "max-nested-callbacks": ["error", 4],
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", caughtErrors: "none" }],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
];
