#!/usr/bin/env bash
# The DNS view as dig sees it (SPEC D2): A, SRV with its additional addresses, DNS-SD PTR and
# TXT, NXDOMAIN vs NODATA with the SOA, an answer over the UDP buffer with TC set (RFC 2181
# section 9: the records that fit, the same each time) and the full answer over TCP, also
# through dig's own retry, a 5,000-endpoint service answered over UDP (TC set) and TCP,
# REFUSED outside the zone, a drain visible at the next query, and the server still
# answering after garbage. (The rotating window, `large_rrsets = "rotate"`, is tested by
# cargo test.)
set -euo pipefail
muster="$1"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
base="http://127.0.0.1:$port"
"$muster" serve --json --data-dir "$work/data" --http "127.0.0.1:$port" --dns 127.0.0.1:0 --consul 127.0.0.1:0 \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
trap 'kill -9 $server 2>/dev/null || true; rm -rf "$work"' EXIT
trap 'echo "interop-dns: failed at line $LINENO" >&2' ERR
for _ in $(seq 1 100); do
  [ -s "$work/serve.out" ] && curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
dns=$(head -1 "$work/serve.out" | jq -r .dns)
dns_port=${dns##*:}
d() { dig @127.0.0.1 -p "$dns_port" +time=2 +tries=1 "$@"; }
# dig's header line, from a saved reply: the answer count, and whether TC is set.
answers() { sed -n 's/^;; flags:.*ANSWER: \([0-9]*\),.*/\1/p' "$1"; }
truncated() { grep -q '^;; flags:[^;]* tc[ ;]' "$1"; }
# (`! cmd` does not stop a `set -e` script; these checks fail explicitly.)
fail() { echo "interop-dns: $*" >&2; exit 1; }

register() { # instance ip [labels-json]
  curl -fsS -X PUT "$base/v1/registry/default/prod/api/$1" -H 'content-type: application/json' \
    -d "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"$2\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}],\"labels\":${3:-{\}}}}" >/dev/null
}
register api-0 10.0.0.1 '{"team":"core"}'
register api-1 10.0.0.2

[ "$(d +short api.prod.muster A | sort | tr '\n' ' ')" = "10.0.0.1 10.0.0.2 " ]
d +noall +answer +additional _http._tcp.api.prod.muster SRV >"$work/srv"
grep -q 'SRV.*0 100 8080 api-0.api.prod.muster.' "$work/srv"
grep -q '^api-1.api.prod.muster.*A.*10.0.0.2' "$work/srv"
[ "$(d +short _services._dns-sd._udp.prod.muster PTR)" = "_api._tcp.prod.muster." ]
[ "$(d +short api-0._api._tcp.prod.muster TXT)" = '"team=core"' ]
d nope.prod.muster A >"$work/nx"
grep -q 'status: NXDOMAIN' "$work/nx"
grep -q 'AUTHORITY: 1' "$work/nx"
d api.prod.muster TXT >"$work/nodata"
grep -q 'status: NOERROR' "$work/nodata"
grep -q 'ANSWER: 0, AUTHORITY: 1' "$work/nodata"
d example.com A | grep -q 'status: REFUSED'
# Case is echoed as asked.
d +noall +question ApI.PrOd.MuStEr A | grep -q 'ApI.PrOd.MuStEr'

# 40 more endpoints: over 512 bytes without EDNS, so UDP answers the first 29 with TC set
# (+ignore: dig would otherwise retry a TC answer over TCP), and TCP has them all, as has
# dig's own retry over TCP on TC.
for i in $(seq 2 41); do register "api-$i" "10.0.1.$i"; done
d +noedns +ignore api.prod.muster A >"$work/window"
truncated "$work/window" || fail "an RRset cut over UDP without TC"
[ "$(answers "$work/window")" = 29 ]
d +tcp +short api.prod.muster A >"$work/all"
[ "$(wc -l <"$work/all")" = 42 ]
[ "$(d +noedns +short api.prod.muster A | wc -l)" = 42 ] || fail "dig's retry over TCP on TC did not get all 42"

# A 5,000-endpoint service (one curl, its PUTs in parallel): over UDP, with and without EDNS,
# TC set with the records that fit, for A and SRV; over TCP more, within 64 KiB, TC clear;
# two UDP queries in a row get the same records.
for i in $(seq 0 4999); do
  [ "$i" = 0 ] || echo "next"
  echo "url = \"$base/v1/registry/default/prod/big/big-$i\""
  echo "data = \"{\\\"incarnation\\\":1,\\\"endpoint\\\":{\\\"addresses\\\":[{\\\"ip\\\":\\\"10.2.$((i / 256)).$((i % 256))\\\"}],\\\"ports\\\":[{\\\"name\\\":\\\"http\\\",\\\"port\\\":8080,\\\"protocol\\\":\\\"http\\\"}]}}\""
  echo "request = \"PUT\""
  echo "header = \"content-type: application/json\""
  echo "output = \"/dev/null\""
  echo "fail"
done >"$work/big.curl"
curl -sS --no-progress-meter --parallel --parallel-max 16 --config "$work/big.curl"
curl -fsS "$base/v1/registry/default/prod/big?limit=1" >"$work/big.json"
[ "$(jq .total "$work/big.json")" = 5000 ] || fail "registered $(jq .total "$work/big.json") of 5000"
for name in big.prod.muster:A _http._tcp.big.prod.muster:SRV; do
  d +ignore "${name%:*}" "${name#*:}" >"$work/big-udp"
  d +noedns +ignore "${name%:*}" "${name#*:}" >"$work/big-plain"
  d +tcp "${name%:*}" "${name#*:}" >"$work/big-tcp"
  for reply in big-udp big-plain big-tcp; do
    grep -q 'status: NOERROR' "$work/$reply"
    [ "$(answers "$work/$reply")" -gt 0 ]
  done
  truncated "$work/big-udp" || fail "$name: TC clear over UDP"
  truncated "$work/big-plain" || fail "$name: TC clear over UDP without EDNS"
  if truncated "$work/big-tcp"; then fail "$name: TC set over TCP"; fi
  [ "$(answers "$work/big-tcp")" -gt "$(answers "$work/big-udp")" ]
  [ "$(answers "$work/big-udp")" -gt "$(answers "$work/big-plain")" ]
  tcp_size=$(sed -n 's/^;; MSG SIZE  rcvd: \([0-9]*\).*/\1/p' "$work/big-tcp")
  [ "$tcp_size" -le 65535 ]
done
d +ignore +short big.prod.muster A >"$work/first"
d +ignore +short big.prod.muster A >"$work/second"
cmp -s "$work/first" "$work/second" || fail "two truncated UDP answers carried different records"

# A drain is gone at the next query.
curl -fsS -X POST "$base/v1/registry/default/prod/api/api-0/drain" -H 'content-type: application/json' \
  -d '{"incarnation":1,"reason":"ci"}' >/dev/null
if d +tcp +short api.prod.muster A | grep -qx '10.0.0.1'; then
  echo "interop-dns: the drained 10.0.0.1 is still answered" >&2
  exit 1
fi

# Garbage over UDP does not stop it.
printf '\x00\x01garbage' >/dev/udp/127.0.0.1/"$dns_port" || true
d +short api.prod.muster A | grep -qx '10.0.0.2'

kill -TERM $server
wait $server
echo "interop-dns: ok"
