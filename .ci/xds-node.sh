#!/usr/bin/env bash
# A second, independent xDS client in CI (SPEC D5): gRPC's Node client (@grpc/grpc-js-xds,
# pinned in .ci/xds-node/package-lock.json) against `muster serve --xds`, spreading over
# three backends and following a drain: .ci/xds-node/test.js.
#
#   .ci/xds-node.sh [MUSTER_BINARY]      (default target/release/muster)
#
# Node and npm: from the image, or from .ci/ui.sh's install (run before this in .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_TIMEOUT=120

muster=$(realpath "${1:-target/release/muster}")
[ -x "$muster" ] || { echo "xds-node.sh: no muster binary at $muster" >&2; exit 2; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "xds-node.sh: needs node and npm" >&2; exit 2; }
(cd .ci/xds-node && npm ci --no-audit --no-fund --loglevel=error)

work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then
    kill -9 "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "xds-node.sh: $*" >&2
  echo "--- muster serve log" >&2
  tail -n 40 "$work/serve.log" | cut -c1-600 >&2 || true
  exit 1
}

"$muster" serve --json --data-dir "$work/data" --http 127.0.0.1:0 --dns off --consul off \
  --xds 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
server=$!
for _ in $(seq 1 100); do
  [ -s "$work/serve.out" ] && break
  kill -0 "$server" 2>/dev/null || fail "muster serve exited before its ready line"
  sleep 0.1
done
[ -s "$work/serve.out" ] || fail "muster serve printed no ready line within 10 s"
http=$(head -1 "$work/serve.out" | jq -r .http)
xds=$(head -1 "$work/serve.out" | jq -r .xds)
export MUSTER_BIN="$muster" MUSTER_SERVER="http://$http" MUSTER_XDS_ADDR="$xds"
unset MUSTER_TOKEN MUSTER_TENANT
echo "xds-node.sh: $(node --version), @grpc/grpc-js-xds $(jq -r '.packages["node_modules/@grpc/grpc-js-xds"].version' .ci/xds-node/package-lock.json) against muster (http $http, xds $xds)"
timeout "$RUN_TIMEOUT" node .ci/xds-node/test.js || fail "the Node xDS client test failed (its output above)"
kill -0 "$server" 2>/dev/null || fail "muster serve died during the run"
