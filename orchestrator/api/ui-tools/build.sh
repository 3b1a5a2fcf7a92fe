#!/usr/bin/env bash
# Rebuild the console's vendored libraries from the lock file (needs Node.js + npm; a
# fresh clone runs the console without them: the output is committed in the package).
#   orchestrator/api/ui-tools/build.sh   npm ci (exact versions and integrity hashes of
#                          package-lock.json), copy LiteGraph's build into ../ui/vendor/,
#                          write a sprite of the Lucide icons the repo's node definitions
#                          and the console name, and SHA256SUMS of what it wrote
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../ui/vendor"
cd "$here"
npm ci --no-audit --no-fund --ignore-scripts
mkdir -p "$out"
cp node_modules/litegraph.js/build/litegraph.core.min.js "$out/litegraph.core.min.js"
cp node_modules/litegraph.js/css/litegraph.css "$out/litegraph.css"
cp node_modules/litegraph.js/LICENSE "$out/LICENSE.litegraph"
cp node_modules/lucide-static/LICENSE "$out/LICENSE.lucide"
node icons.mjs
(cd "$out" && sha256sum litegraph.core.min.js litegraph.css icons.svg > SHA256SUMS)
echo "console assets written to $out"
