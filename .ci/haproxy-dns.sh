#!/usr/bin/env bash
# HAProxy discovers a service from Muster's SRV records (SPEC D2): Debian's HAProxy, its
# `resolvers` section and `server-template`, against a service of 30 instances, as
# docs/dns.md's recipe has it. Checks: 30 servers up, steady for 10 s (no server goes DOWN
# or changes address: a UDP answer that cut the RRset with TC clear used to hand HAProxy a
# different 28 of the 30 each time), then a drain takes exactly that one out.
# Usage: haproxy-dns.sh path/to/muster
set -euo pipefail
muster=$(realpath "$1")
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
base="http://127.0.0.1:$port"
"$muster" serve --json --data-dir "$work/data" --http "127.0.0.1:$port" --dns 127.0.0.1:0 --consul off --xds off \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
haproxy_pid=""
cleanup() {
  [ -n "$haproxy_pid" ] && kill "$haproxy_pid" 2>/dev/null
  kill -9 "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "haproxy-dns: $*" >&2
  tail -20 "$work/haproxy.log" >&2 || true
  exit 1
}
for _ in $(seq 1 100); do
  [ -s "$work/serve.out" ] && curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
dns=$(head -1 "$work/serve.out" | jq -r .dns)

for i in $(seq 1 30); do
  curl -fsS -X PUT "$base/v1/registry/default/prod/web/web-$i" -H 'content-type: application/json' \
    -d "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"127.0.1.$i\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}]}}" >/dev/null
done
# Over UDP at the size HAProxy advertises by default the set does not fit: TC is set.
dig @127.0.0.1 -p "${dns##*:}" +bufsize=1232 +ignore _http._tcp.web.prod.muster SRV >"$work/udp"
grep -q '^;; flags:[^;]* tc[ ;]' "$work/udp" || fail "30 SRV records cut over UDP without TC"

# The recipe of docs/dns.md, with the socket and ports of this run.
cat >"$work/haproxy.cfg" <<CFG
global
    stats socket $work/haproxy.sock mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
resolvers muster
    nameserver muster tcp@$dns
    accepted_payload_size 8192
    resolve_retries 3
    timeout resolve 1s
    timeout retry 1s
    hold valid 10s
    hold obsolete 5s
backend web
    server-template web 40 _http._tcp.web.prod.muster resolvers muster init-addr none
frontend front
    bind 127.0.0.1:$((port + 1))
    default_backend web
CFG
haproxy -c -f "$work/haproxy.cfg" >"$work/check.log" 2>&1 || { cat "$work/check.log" >&2; fail "haproxy refused the recipe"; }
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!

# The servers that are up, as "name address" lines (op state 2, not in maintenance).
up() {
  python3 - "$work/haproxy.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show servers state web\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
for line in out.decode().splitlines()[2:]:
    f = line.split()
    if len(f) > 6 and f[5] == "2" and not int(f[6]) & 0x23:
        print(f[3], f[4])
PY
}
for _ in $(seq 1 60); do
  [ -S "$work/haproxy.sock" ] && [ "$(up | wc -l)" = 30 ] && break
  sleep 0.5
done
up | sort >"$work/first"
[ "$(wc -l <"$work/first")" = 30 ] || fail "$(wc -l <"$work/first") of 30 servers up after 30 s"
for _ in $(seq 1 20); do
  sleep 0.5
  up | sort >"$work/now"
  cmp -s "$work/first" "$work/now" || fail "the servers changed while nothing did: $(diff "$work/first" "$work/now" | tr '\n' ' ')"
done
if grep -q 'is DOWN' "$work/haproxy.log"; then fail "a server went DOWN"; fi
echo "haproxy-dns: 30 servers up, steady for 10 s"

curl -fsS -X POST "$base/v1/registry/default/prod/web/web-7/drain" -H 'content-type: application/json' \
  -d '{"incarnation":1,"reason":"ci"}' >/dev/null
for _ in $(seq 1 60); do
  [ "$(up | wc -l)" = 29 ] && break
  sleep 0.5
done
up >"$work/after"
[ "$(wc -l <"$work/after")" = 29 ] || fail "$(wc -l <"$work/after") servers up 30 s after a drain, not 29"
if grep -q ' 127.0.1.7$' "$work/after"; then fail "the drained 127.0.1.7 is still up"; fi
echo "haproxy-dns: the drained instance left, 29 up; ok"
