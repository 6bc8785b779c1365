#!/usr/bin/env bash
# A real proxyless gRPC client against Muster's xDS control plane (SPEC D5): Python grpcio's
# built-in xDS resolver (`xds:///api.prod`, GRPC_XDS_BOOTSTRAP naming `muster serve --xds`)
# and grpcio-csds. The test, .ci/xds/test_grpcio_xds.py, registers real grpcio backends with
# the muster CLI and checks spreading, drain within 2 s, a new backend, zone failover and back,
# and that the client's CSDS dump and GET /v1/xds/clients show the acked EDS version equal to
# the service's Muster revision.
#
#   .ci/xds.sh [MUSTER_BINARY]      (default target/release/muster)
#
# Installs pinned grpcio packages in a venv cached under ~/.cache/muster (Debian's python3
# is externally managed; see consul.sh). The client runs with the xDS traces on
# (GRPC_TRACE below) into a log that is printed only on a failure, with the server's.
set -euo pipefail
cd "$(dirname "$0")/.."

# grpcio-csds pulls xds-protos and protobuf; pinning all four keeps the run reproducible
# (grpcio-csds's own requirement on grpcio is a floor, not a pin).
GRPCIO_VERSION=1.85.1
GRPCIO_CSDS_VERSION=1.85.0
XDS_PROTOS_VERSION=1.85.0
PROTOBUF_VERSION=7.36.2
# The whole client run: every wait in it is bounded (20 s for the first call, 10 s per
# change); a hung server must not hold CI for its 90 minutes.
RUN_TIMEOUT=180

muster=${1:-target/release/muster}
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "xds.sh: no muster binary at $muster (cargo build --release -p muster)" >&2; exit 2; }

pins=("grpcio==$GRPCIO_VERSION" "grpcio-csds==$GRPCIO_CSDS_VERSION" "xds-protos==$XDS_PROTOS_VERSION" "protobuf==$PROTOBUF_VERSION")
venv=${MUSTER_GRPCIO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/muster/grpcio-xds-$GRPCIO_VERSION-csds-$GRPCIO_CSDS_VERSION}
if ! "$venv/bin/python" - "${pins[@]}" 2>/dev/null <<'PY'; then
import importlib.metadata as m, sys
sys.exit(any(m.version(name) != version for name, version in (pin.split("==") for pin in sys.argv[1:])))
PY
  echo "xds.sh: installing ${pins[*]} into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi

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
  echo "xds.sh: $*" >&2
  echo "--- muster serve log" >&2
  tail -n 40 "$work/serve.log" | cut -c1-600 >&2 || true
  if [ -s "$work/client.log" ]; then
    echo "--- grpc client log, its end (GRPC_TRACE=${GRPC_TRACE:-})" >&2
    tail -n 300 "$work/client.log" | cut -c1-400 >&2
  fi
  exit 1
}

# Port 0 everywhere: the ready line (`--json`) says what was bound. DNS binds UDP and TCP on
# its port; the Consul listener is not needed here.
"$muster" serve --json --data-dir "$work/data" --http 127.0.0.1:0 --dns 127.0.0.1:0 --consul off \
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
[ -n "$xds" ] && [ "$xds" != null ] || fail "the ready line names no xds listener: $(head -1 "$work/serve.out")"
curl -fsS "http://$http/v1/status" >/dev/null || fail "muster's HTTP API does not answer on $http"

export MUSTER_BIN="$muster" MUSTER_SERVER="http://$http" MUSTER_XDS_ADDR="$xds"
unset MUSTER_TOKEN MUSTER_TENANT
# The client's view of xDS, for the log printed on a failure.
export GRPC_VERBOSITY=${GRPC_VERBOSITY:-debug}
export GRPC_TRACE=${GRPC_TRACE:-xds_client,xds_resolver,cds_lb,priority_lb}
echo "xds.sh: grpcio $GRPCIO_VERSION, grpcio-csds $GRPCIO_CSDS_VERSION against muster (http $http, xds $xds)"
timeout "$RUN_TIMEOUT" "$venv/bin/python" -u .ci/xds/test_grpcio_xds.py 2>"$work/client.log" \
  || fail "the grpcio xDS client test failed (its output above)"
kill -0 "$server" 2>/dev/null || fail "muster serve died during the run"
echo "xds: grpcio's xDS client and grpcio-csds against muster: ok"
