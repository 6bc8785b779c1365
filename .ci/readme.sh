#!/usr/bin/env bash
# Runs every shell block of README.md and docs/*.md against a fresh server, and fails when one
# no longer does what its page says (see .ci/readme.py). Usage: .ci/readme.sh [BINARY] [PAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:-target/release/muster}
shift || true
command -v dig >/dev/null || { apt-get update -qq && apt-get install -y -qq dnsutils >/dev/null; }
command -v jq >/dev/null || { apt-get update -qq && apt-get install -y -qq jq >/dev/null; }
exec python3 .ci/readme.py "$binary" "$@"
