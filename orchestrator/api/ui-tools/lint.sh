#!/usr/bin/env bash
# The console's lint and format check (./dev test runs it): installs the dev tools from
# package-lock.json with `npm ci` into node_modules/ (git-ignored) when they are missing
# or older than the lock file, then runs eslint (complexity and function-length limits,
# eslint.config.js) and prettier --check over ../ui (not ../ui/vendor).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
if ! command -v npm >/dev/null 2>&1; then
  echo "console lint: npm is missing (install Node.js 20+: apt-get install nodejs npm)" >&2
  exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "console lint: installing the dev tools (npm ci) ..." >&2
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
fi
npm run --silent lint
