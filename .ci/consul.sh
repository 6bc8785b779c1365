#!/usr/bin/env bash
# Real Consul clients drive Muster's Consul-compatible API unchanged (SPEC E1): py-consul
# (PyPI) and the npm `consul` package, each running the same list against a live
# `muster serve`:
#   - register with a TTL check, pass it, find it in health.service(name, passing)
#   - a blocking query with an index returns after its wait with the same index when
#     nothing changes (a write to another service included), and returns early with a
#     higher index when another client registers an instance
#   - TTL silence turns the instance critical; DeregisterCriticalServiceAfter removes it
#   - a Muster drain (`muster drain`) shows as maintenance (`_service_maintenance:<id>`),
#     and Consul's own maintenance toggle too
#   - a token without rights gets a 403 that the client reports as an ACL error
#     (a second server with `[auth] enabled = true`)
#
#   .ci/consul.sh [MUSTER_BINARY]      (default target/release/muster)
#
# Installs what it needs: py-consul in a venv (Debian's python3 is externally managed; see
# schemathesis.sh), the npm package into a temporary directory, and nodejs/npm from Debian
# when `node` or `npm` is missing. The tests are .ci/consul/test_py_consul.py (unittest) and
# .ci/consul/consul.test.mjs (`node --test`); both read where the servers are from MUSTER_*
# variables set here and can be run by hand the same way. Every wait in them is a bounded
# poll; on a failure this script prints the tail of each server's log.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_CONSUL_VERSION=1.8.0
NPM_CONSUL_VERSION=2.0.1
# The whole client run per language: the slowest test waits out TTLs and the deregister
# delay (a few seconds each); a hung server must not hold CI for its 90 minutes.
RUN_TIMEOUT=300

muster=${1:-target/release/muster}
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "consul.sh: no muster binary at $muster (cargo build --release -p muster)" >&2; exit 2; }

venv=${MUSTER_PY_CONSUL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/muster/py-consul-$PY_CONSUL_VERSION}
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('py-consul') != '$PY_CONSUL_VERSION')" 2>/dev/null; then
  echo "consul.sh: installing py-consul $PY_CONSUL_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "py-consul==$PY_CONSUL_VERSION"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "consul.sh: installing nodejs and npm (Debian)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

work=$(mktemp -d)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "consul.sh: installing npm consul@$NPM_CONSUL_VERSION"
mkdir -p "$work/npm"
(cd "$work/npm" && npm install --silent --no-audit --no-fund --no-save "consul@$NPM_CONSUL_VERSION" >/dev/null)

# A loopback port free right now for TCP and UDP (DNS listens on both).
free_port() {
  python3 - <<'PY'
import socket
for _ in range(50):
    tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        udp.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        udp.close(); tcp.close()
    print(port); break
PY
}

# start NAME [serve args...]: starts a server on free ports; sets NAME_http, NAME_consul, NAME_log.
start() {
  local name=$1
  shift
  local http dns consul
  http=$(free_port)
  dns=$(free_port)
  consul=$(free_port)
  "$muster" serve --data-dir "$work/$name-data" --http "127.0.0.1:$http" --dns "127.0.0.1:$dns" \
    --consul "127.0.0.1:$consul" "$@" >"$work/$name.out" 2>"$work/$name.log" &
  servers+=("$!")
  printf -v "${name}_http" '%s' "http://127.0.0.1:$http"
  printf -v "${name}_consul" '%s' "$consul"
  printf -v "${name}_log" '%s' "$work/$name.log"
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$http/v1/status" >/dev/null 2>&1 \
      && curl -sS -o /dev/null "http://127.0.0.1:$consul/v1/status/leader" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "consul.sh: server $name did not answer on http $http and consul $consul; its log:" >&2
  tail -n 40 "$work/$name.log" >&2
  exit 1
}

start plain
printf '[auth]\nenabled = true\n' >"$work/auth-on.toml"
start secured --config "$work/auth-on.toml"
operator=$(MUSTER_SERVER="$secured_http" "$muster" acl bootstrap --json | jq -r .secret)
# Rights on one unrelated service only: nothing the tests register.
denied=$(MUSTER_SERVER="$secured_http" MUSTER_TOKEN="$operator" "$muster" acl token create --tenant default \
  --allow 'default/unrelated=read' --json | jq -r .secret)

export MUSTER_BIN="$muster"
export MUSTER_HTTP="$plain_http" MUSTER_CONSUL_HOST=127.0.0.1 MUSTER_CONSUL_PORT="$plain_consul"
export MUSTER_AUTH_HTTP="$secured_http" MUSTER_AUTH_CONSUL_PORT="$secured_consul"
export MUSTER_OPERATOR_TOKEN="$operator" MUSTER_DENIED_TOKEN="$denied"
# The Consul view's tenant and namespace ([consul] defaults), for the native drain.
export MUSTER_CONSUL_TENANT=default MUSTER_CONSUL_NAMESPACE=default
# Neither client may pick up a developer's own Consul settings.
unset CONSUL_HTTP_ADDR CONSUL_HTTP_TOKEN CONSUL_HTTP_SSL CONSUL_HTTP_SSL_VERIFY

logs_on_failure() {
  echo "consul.sh: $1 failed; the servers' logs end:" >&2
  echo "--- plain server ($plain_log)" >&2
  tail -n 40 "$plain_log" | cut -c1-600 >&2
  echo "--- secured server ($secured_log)" >&2
  tail -n 40 "$secured_log" | cut -c1-600 >&2
  exit 1
}

# Both clients run even when the first fails, so one run shows every failure.
failed=()
echo "consul.sh: py-consul $PY_CONSUL_VERSION"
timeout "$RUN_TIMEOUT" "$venv/bin/python" .ci/consul/test_py_consul.py || failed+=(py-consul)

echo "consul.sh: npm consul $NPM_CONSUL_VERSION"
MUSTER_NPM_CONSUL="$work/npm/node_modules/consul" timeout "$RUN_TIMEOUT" node --test .ci/consul/consul.test.mjs \
  || failed+=("npm consul")

for pid in "${servers[@]}"; do
  kill -0 "$pid" 2>/dev/null || failed+=("a server (it died during the run)")
done
[ "${#failed[@]}" = 0 ] || logs_on_failure "$(IFS=,; echo "${failed[*]}")"
echo "consul: py-consul and npm consul against muster: ok"
