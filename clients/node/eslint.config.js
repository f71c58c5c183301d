// The Node package's linter: eslint's recommended rules, for CommonJS on Node.
"use strict";

const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  { ignores: ["node_modules/"] },
  js.configs.recommended,
  {
    languageOptions: { sourceType: "commonjs", ecmaVersion: 2023, globals: globals.node },
  },
];
