#!/usr/bin/env bash
# File-descriptor exhaustion (SPEC S6, R6): a node started with a low descriptor limit
# (prlimit --nofile) is flooded with idle connections. It never runs out of descriptors: past
# its bound, the oldest connection that never sent a request makes room for a newcomer (a
# budget full of connections that have spoken refuses with 503 too_many_connections, tested
# in crates/server/tests/it/limits.rs), keeps serving the
# connections it has (writes through one are acknowledged, and snapshots, which need new
# descriptors, still get written), never crashes, and serves new connections again once the
# flood closes; every acknowledged write is there after a restart.
# Usage: faults-fd.sh path/to/muster
set -euo pipefail
muster=$(realpath "$1")
source "$(dirname "$0")/faults-lib.sh"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
api_base="http://127.0.0.1:$port"
nofile=256
flood=400
server=""

cleanup() {
  set +e
  [ -n "$server" ] && kill -9 "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A snapshot every 20 entries, so the writes below make the node open new files while its
# descriptors are under pressure.
cat >"$work/muster.toml" <<EOF
data_dir = "$work/data"
http = "127.0.0.1:$port"
dns_enabled = false
snapshot_every = 20
shutdown_grace_ms = 2000
EOF

start() {
  prlimit --nofile=$nofile:$nofile "$muster" serve --config "$work/muster.toml" --consul off >>"$work/serve.out" 2>>"$work/serve.log" &
  server=$!
  up() { call "" GET /v1/status && [ "$code" = 200 ] && [ "$(field .ready)" = true ]; }
  within 20 up || fail "the server did not become ready"
}

echo "== fd: a node limited to $nofile descriptors"
start
acked=()
for i in $(seq 1 10); do
  register "" api "api-$i"
  [ "$code" = 200 ] || fail "write $i: $code $reply"
  acked+=("api-$i")
done
ok "10 writes acknowledged"

# One keep-alive connection opened before the flood, spoken to in raw HTTP/1.1.
exec {kept}<>"/dev/tcp/127.0.0.1/$port"
raw_register() {
  local body="{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"10.1.0.1\"}]}}"
  printf 'PUT /v1/registry/default/prod/api/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "$1" "${#body}" "$body" >&"$kept"
  local line length=0
  IFS= read -r -t 10 line <&"$kept" || return 1
  raw_status=$(cut -d' ' -f2 <<<"$line")
  while IFS= read -r -t 10 line <&"$kept"; do
    line=${line%$'\r'}
    [ -z "$line" ] && break
    [[ "${line,,}" == content-length:* ]] && length=${line#*: }
  done
  [ "$length" -gt 0 ] && { IFS= read -r -t 10 -N "$length" raw_body <&"$kept" || return 1; }
  return 0
}
raw_register kept-0 && [ "$raw_status" = 200 ] || fail "a write over the kept connection before the flood: $raw_status"
acked+=("kept-0")

echo "== fd: $flood idle connections"
conns=()
for _ in $(seq 1 $flood); do
  exec {c}<>"/dev/tcp/127.0.0.1/$port" || break
  conns+=("$c")
done
ok "${#conns[@]} connections opened"
kill -0 "$server" 2>/dev/null || fail "the node died under the flood"
# The flood's connections never sent a request: each one past the budget, and then a new
# client, takes the place of the oldest of them (silent connections make room, SPEC S6), so
# the client is served while the node's descriptors stay within its bound.
served() {
  call_timeout=5 call "" GET /v1/status
  [ "$code" = 200 ]
}
within 10 served || fail "a new connection during the flood got $code $reply (want 200: a silent connection makes room)"
ok "a new connection during the flood is served: the oldest silent connection made room"
for i in $(seq 1 30); do
  raw_register "kept-$i" && [ "$raw_status" = 200 ] || fail "write kept-$i over the kept connection during the flood: ${raw_status:-no reply}"
  acked+=("kept-$i")
done
ok "30 writes over the kept connection acknowledged during the flood (snapshots every 20 entries)"
kill -0 "$server" 2>/dev/null || fail "the node died under the flood"

for c in "${conns[@]}"; do exec {c}>&-; done
exec {kept}>&-
ok "the flood closed"
recovered() { call "" GET /v1/status && [ "$code" = 200 ] && [ "$(field .ready)" = true ]; }
within 20 recovered || fail "the node never served new connections after the flood: $code $reply"
ok "new connections are served again"
register "" api after-flood
[ "$code" = 200 ] || fail "a write after the flood: $code $reply"
acked+=("after-flood")
call "" GET /v1/status
[ -z "$(field .fatal)" ] || fail "the node reports a failure: $reply"

kill -TERM "$server"
wait "$server" || fail "the node exited with $? on SIGTERM"
server=""
start
expected=$(printf '%s\n' "${acked[@]}" | sort)
got=$(instances "" api)
[ "$got" = "$expected" ] || fail "after a restart the node serves $(echo $got | wc -w) of ${#acked[@]} acknowledged writes"
ok "all ${#acked[@]} acknowledged writes are there after a restart"
kill -TERM "$server"
wait "$server" || fail "the node exited with $? on SIGTERM"
server=""
echo "faults-fd: ok"
