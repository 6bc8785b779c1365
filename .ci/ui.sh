#!/usr/bin/env bash
# The web dashboard (SPEC U2) in a real browser: Debian's chromium driven by playwright-core
# (ui-tests/, node:test) against a real `muster serve`. Installs what it needs if missing.
# Usage: .ci/ui.sh [path/to/muster]   (default: builds target/release/muster)
# Screenshots of every view are kept in $SCREENSHOTS (default ui-tests/screenshots).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what is missing: NodeSource's nodejs bundles npm and conflicts with Debian's npm.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
muster="${1:-}"
if [ -z "$muster" ]; then
  cargo build --release -q -p muster
  muster=target/release/muster
fi
export MUSTER_BIN
MUSTER_BIN="$(cd "$(dirname "$muster")" && pwd)/$(basename "$muster")"
export SCREENSHOTS="${SCREENSHOTS:-$PWD/ui-tests/screenshots}"
export CHROMIUM="${CHROMIUM:-$(command -v chromium)}"
cd ui-tests
npm ci --no-audit --no-fund --loglevel=error
node --test --test-concurrency=1
echo "screenshots in $SCREENSHOTS"
