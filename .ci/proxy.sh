#!/usr/bin/env bash
# Real clients through `muster proxy` (SPEC D3), against real backends registered with the
# muster CLI in a real `muster serve`:
#   - curl over HTTP/1.1 and over h2c (--http2-prior-knowledge) into an `auto` listener that
#     balances two python HTTP/1.1 backends (registered `--protocol http`, so the proxy speaks
#     HTTP/1.1 upstream whatever the caller spoke): both answer; after `muster drain` of one
#     (the proxy's view shows it draining), it gets no further request and no curl fails
#   - grpcio over h2c into an `http` listener over two grpcio servers registered
#     `--protocol grpc` (h2c upstream): every call succeeds, both servers answer
#   - a python socket client into a `tcp` listener over a TCP echo server: bytes round-trip
#   - the admin listener: /metrics counts requests_ok for each listener, /debug/endpoints
#     lists the endpoints (jq)
#   - SIGTERM: the proxy drains and exits 0
#
#   .ci/proxy.sh [MUSTER_BINARY]      (default target/release/muster)
#
# grpcio comes from the venv .ci/xds.sh uses (same pins, same cache under ~/.cache/muster).
# Every wait is bounded; on a failure the logs of the server, the proxy and the backends are
# printed.
set -euo pipefail
cd "$(dirname "$0")/.."

GRPCIO_VERSION=1.85.1
GRPCIO_CSDS_VERSION=1.85.0
XDS_PROTOS_VERSION=1.85.0
PROTOBUF_VERSION=7.36.2
# Requests per counted window: p2c over two backends gives each several in 40.
N=40

muster=${1:-target/release/muster}
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "proxy.sh: no muster binary at $muster (cargo build --release -p muster)" >&2; exit 2; }

pins=("grpcio==$GRPCIO_VERSION" "grpcio-csds==$GRPCIO_CSDS_VERSION" "xds-protos==$XDS_PROTOS_VERSION" "protobuf==$PROTOBUF_VERSION")
venv=${MUSTER_GRPCIO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/muster/grpcio-xds-$GRPCIO_VERSION-csds-$GRPCIO_CSDS_VERSION}
if ! "$venv/bin/python" - "${pins[@]}" 2>/dev/null <<'PY'; then
import importlib.metadata as m, sys
sys.exit(any(m.version(name) != version for name, version in (pin.split("==") for pin in sys.argv[1:])))
PY
  echo "proxy.sh: installing ${pins[*]} into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
py="$venv/bin/python"

work=$(mktemp -d)
server= backends= proxy=
stop() {
  [ -n "$1" ] || return 0
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  stop "$proxy"
  stop "$backends"
  stop "$server"
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "proxy.sh: $*" >&2
  echo "--- muster serve log" >&2
  tail -n 30 "$work/serve.log" | cut -c1-600 >&2 || true
  echo "--- muster proxy log" >&2
  tail -n 60 "$work/proxy.log" | cut -c1-600 >&2 || true
  echo "--- backends log" >&2
  tail -n 30 "$work/backends.log" | cut -c1-600 >&2 || true
  for log in "$work"/logs/*.log; do
    [ -e "$log" ] && echo "--- $(basename "$log"): $(wc -l <"$log") requests" >&2
  done
  exit 1
}

# Waits (bounded) for a file to be written by a process that must stay alive meanwhile.
await_file() { # FILE PID WHAT
  for _ in $(seq 1 150); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || fail "$3 exited before it was ready"
    sleep 0.1
  done
  fail "$3 was not ready within 15 s"
}

"$muster" serve --json --data-dir "$work/data" --http 127.0.0.1:0 --dns 127.0.0.1:0 --consul off \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
await_file "$work/serve.out" "$server" "muster serve"
http=$(head -1 "$work/serve.out" | jq -r .http)
export MUSTER_SERVER="http://$http"
unset MUSTER_TOKEN MUSTER_TENANT

mkdir -p "$work/logs"
"$py" -u .ci/proxy/backends.py "$work/logs" >"$work/backends.log" 2>&1 &
backends=$!
await_file "$work/logs/ports.json" "$backends" "the python backends"
port() { jq -r --arg n "$1" '.[$n]' "$work/logs/ports.json"; }

register() { # SERVICE NAME PORT_NAME PROTOCOL
  "$muster" register "prod/$1" "$2" --addr "127.0.0.1:$(port "$2")" --incarnation 1 \
    --port-name "$3" --protocol "$4" --ttl 1h >/dev/null 2>"$work/register.err" \
    || fail "muster register prod/$1 $2: $(cat "$work/register.err")"
}
register web web-a http http
register web web-b http http
register grpc grpc-a grpc grpc
register grpc grpc-b grpc grpc
register echo echo tcp tcp

# One proxy, three listeners (port 0: the ready line says what was bound), admin on port 0.
cat >"$work/proxy.toml" <<TOML
drain_grace_ms = 2000

[[listener]]
listen = "127.0.0.1:0"
service = "prod/web"
port = "http"
protocol = "auto"

[[listener]]
listen = "127.0.0.1:0"
service = "prod/grpc"
port = "grpc"
protocol = "http"

[[listener]]
listen = "127.0.0.1:0"
service = "prod/echo"
port = "tcp"
protocol = "tcp"
TOML
"$muster" --json proxy --config "$work/proxy.toml" --admin 127.0.0.1:0 \
  >"$work/proxy.out" 2>"$work/proxy.log" &
proxy=$!
await_file "$work/proxy.out" "$proxy" "muster proxy"
ready=$(head -1 "$work/proxy.out")
listen() { jq -r --arg s "$1" '.listeners[] | select(.service | endswith($s)) | .listen' <<<"$ready"; }
web=$(listen prod/web) grpc_addr=$(listen prod/grpc) echo_addr=$(listen prod/echo)
admin=$(jq -r .admin <<<"$ready")
for a in "$web" "$grpc_addr" "$echo_addr" "$admin"; do
  [[ "$a" =~ ^127\.0\.0\.1:[0-9]+$ ]] || fail "the ready line does not name every listener and the admin: $ready"
done
echo "proxy.sh: muster proxy web=$web (auto) grpc=$grpc_addr (http) echo=$echo_addr (tcp) admin=$admin, registry $http"

# Polls (bounded) until a jq filter holds on /debug/endpoints.
await_endpoints() { # FILTER WHAT
  for _ in $(seq 1 100); do
    curl -fsS "http://$admin/debug/endpoints" >"$work/endpoints.json" 2>/dev/null \
      && jq -e "$1" "$work/endpoints.json" >/dev/null && return 0
    sleep 0.1
  done
  fail "$2: not within 10 s; /debug/endpoints: $(cat "$work/endpoints.json" 2>/dev/null)"
}
listener_of() { printf '(.listeners[] | select(.service | endswith("%s")))' "$1"; }
await_endpoints "[$(listener_of prod/web), $(listener_of prod/grpc), $(listener_of prod/echo)] | map(.eligible) == [2, 2, 1]" \
  "the proxy's view holding web-a, web-b, grpc-a, grpc-b and echo, eligible"

# N curls in one HTTP version; each must answer 200 in that version with a backend's name.
# The answering backends, counted, end up in $work/answers.
curls() { # VERSION_FLAG EXPECTED_HTTP_VERSION
  : >"$work/answers"
  for i in $(seq 1 "$N"); do
    out=$(curl -sS --max-time 5 "$1" -o "$work/body" -w '%{http_code} %{http_version}' "http://$web/hello/$i") \
      || fail "curl $1 #$i through the proxy failed: $out"
    [ "$out" = "200 $2" ] || fail "curl $1 #$i: expected '200 $2', got '$out' ($(head -c 300 "$work/body"))"
    grep -E '^web-[ab]$' "$work/body" >>"$work/answers" || fail "curl $1 #$i: no backend named in '$(head -c 300 "$work/body")'"
  done
}
seen() { sort "$work/answers" | uniq -c | awk '{printf "%s=%s ", $2, $1}'; }
for mode in "--http1.1 1.1" "--http2-prior-knowledge 2"; do
  set -- $mode
  curls "$1" "$2"
  grep -qx web-a "$work/answers" && grep -qx web-b "$work/answers" \
    || fail "curl $1: $N requests did not reach both backends: $(seen)"
  echo "proxy.sh: curl $1 (HTTP/$2): $N of $N answered, $(seen)"
done
[ "$(cat "$work/logs/web-a.log" "$work/logs/web-b.log" | wc -l)" -eq $((2 * N)) ] \
  || fail "the backends logged $(cat "$work/logs"/web-?.log | wc -l) requests for $((2 * N)) curls"

# Drain web-a: once the proxy's view says so, web-a gets nothing more and no curl fails.
"$muster" drain prod/web web-a --incarnation 1 --reason "proxy ci" >/dev/null 2>"$work/drain.err" \
  || fail "muster drain: $(cat "$work/drain.err")"
await_endpoints "$(listener_of prod/web) | .eligible == 1 and ([.endpoints[] | select(.instance == \"web-a\" and .standing == \"eligible\")] | length == 0)" \
  "the proxy's view showing web-a draining"
before=$(wc -l <"$work/logs/web-a.log")
for mode in "--http1.1 1.1" "--http2-prior-knowledge 2"; do
  set -- $mode
  curls "$1" "$2"
  ! grep -qx web-a "$work/answers" || fail "curl $1 after web-a's drain: web-a still answered: $(seen)"
done
after=$(wc -l <"$work/logs/web-a.log")
[ "$after" -eq "$before" ] || fail "web-a logged $((after - before)) requests after the proxy saw its drain"
echo "proxy.sh: after muster drain web-a: $((2 * N)) of $((2 * N)) curls answered by web-b alone"

# gRPC over h2c: grpcio's own channel to the http listener.
out=$(timeout 60 "$py" .ci/proxy/client.py grpc "$grpc_addr" "$N" 2>"$work/grpc.err") \
  || fail "grpcio through the proxy: $out $(tail -5 "$work/grpc.err")"
jq -e --argjson n "$N" '.failed == 0 and (.by | length == 2) and ([.by[]] | add == $n)' <<<"$out" >/dev/null \
  || fail "grpcio through the proxy: not every call answered by grpc-a and grpc-b: $out"
[ "$(wc -l <"$work/logs/grpc-a.log")" -gt 0 ] && [ "$(wc -l <"$work/logs/grpc-b.log")" -gt 0 ] \
  || fail "the grpc servers' logs do not show both reached"
echo "proxy.sh: grpcio $GRPCIO_VERSION over h2c: $(jq -c .by <<<"$out")"

# Raw TCP.
out=$(timeout 30 "$py" .ci/proxy/client.py tcp "$echo_addr" 2>"$work/tcp.err") \
  || fail "TCP through the proxy: $out $(tail -5 "$work/tcp.err")"
echo "proxy.sh: raw TCP: $(jq .bytes <<<"$out") bytes echoed back byte for byte"

# Admin: counters for every listener; the endpoints with their standing.
curl -fsS "http://$admin/metrics" >"$work/metrics" || fail "GET /metrics failed"
ok() { awk -v l="listener=\"$1\"" '$1 ~ /^muster_proxy_requests_ok_total\{/ && index($1, l) {print $2}' "$work/metrics"; }
[ "$(ok "$web")" -ge $((4 * N)) ] 2>/dev/null || fail "/metrics: requests_ok for $web is '$(ok "$web")', expected >= $((4 * N)): $(grep requests_ok "$work/metrics")"
[ "$(ok "$grpc_addr")" -ge "$N" ] 2>/dev/null || fail "/metrics: requests_ok for $grpc_addr is '$(ok "$grpc_addr")', expected >= $N"
# A TCP stream counts when it ends; the client closed it above.
for _ in $(seq 1 50); do
  [ "$(ok "$echo_addr")" -ge 1 ] 2>/dev/null && break
  sleep 0.1
  curl -fsS "http://$admin/metrics" >"$work/metrics"
done
[ "$(ok "$echo_addr")" -ge 1 ] 2>/dev/null || fail "/metrics: requests_ok for $echo_addr is '$(ok "$echo_addr")', expected >= 1"
curl -fsS "http://$admin/debug/endpoints" >"$work/endpoints.json" || fail "GET /debug/endpoints failed"
jq -e '[.listeners[].endpoints[].instance] | sort == ["echo", "grpc-a", "grpc-b", "web-a", "web-b"]' "$work/endpoints.json" >/dev/null \
  || fail "/debug/endpoints does not list the five endpoints: $(cat "$work/endpoints.json")"
jq -e '[.listeners[].endpoints[] | select(.address == null)] | length == 0' "$work/endpoints.json" >/dev/null \
  || fail "/debug/endpoints: an endpoint without an address: $(cat "$work/endpoints.json")"
echo "proxy.sh: /metrics requests_ok web=$(ok "$web") grpc=$(ok "$grpc_addr") tcp=$(ok "$echo_addr"); /debug/endpoints lists 5 endpoints"

# SIGTERM: drains (grace 2 s) and exits 0.
kill -TERM "$proxy"
for _ in $(seq 1 100); do
  kill -0 "$proxy" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$proxy" 2>/dev/null && fail "the proxy did not stop within 10 s of SIGTERM"
rc=0
wait "$proxy" || rc=$?
proxy=
[ "$rc" -eq 0 ] || fail "the proxy exited $rc on SIGTERM, not 0"
echo "proxy: curl (HTTP/1.1, h2c), grpcio over h2c and raw TCP through muster proxy: ok"
