#!/usr/bin/env bash
# Single-node snapshot reads of one service, Muster against r-nacos (SPEC R3; the issue's
# "reads ≥ 2× r-nacos"): r-nacos's Nacos v1 open API instance list
# (`GET /nacos/v1/ns/instance/list?serviceName=...&healthyOnly=false`) against Muster's registry
# read (`GET /v1/registry/default/<ns>/<svc>`), each service holding the same ENDPOINTS
# instances, measured by wrk (closed loop, 64 connections on 2 threads, 10 s a run), RUNS runs
# of each, interleaved (r-nacos, Muster, r-nacos, ...). Prints every run's requests/s and
# latency with the load average, then the medians and their ratio. Loopback only; data dirs in
# a temporary directory. Not run by CI (r-nacos is not in the toolchain).
# Usage: .ci/nacos-bench.sh RNACOS_BIN [MUSTER_BIN] [RUNS] [ENDPOINTS]
#   e.g. .ci/nacos-bench.sh /work/rnacos/bin/rnacos target/release/muster 3 5
#   r-nacos: `cargo install rnacos --root DIR` (its binary is DIR/bin/rnacos); wrk:
#   `apt-get install -y wrk`.
# The r-nacos instances are persistent (`ephemeral=false`): ephemeral ones would need a
# heartbeat every 5 s; `healthyOnly=false` lists them whatever its probe says, so both systems
# answer with every instance.
set -euo pipefail
RNACOS=$(realpath "${1:?usage: .ci/nacos-bench.sh RNACOS_BIN [MUSTER_BIN] [RUNS] [ENDPOINTS]}")
BIN=$(realpath "${2:-target/release/muster}")
RUNS=${3:-3}
ENDPOINTS=${4:-5}
CONNECTIONS=64
DURATION=10s
command -v wrk >/dev/null || { echo "wrk not found (apt-get install -y wrk)" >&2; exit 1; }
DIR=$(mktemp -d)
trap 'kill $(cat "$DIR"/pid* 2>/dev/null) 2>/dev/null || true; rm -rf "$DIR"' EXIT
NACOS_PORT=18848
MUSTER=127.0.0.1:17480
# r-nacos: HTTP API, gRPC (+1000) and console (+2000) on loopback; its raft on the gRPC port.
RNACOS_HTTP_PORT=$NACOS_PORT RNACOS_SDK_HOST=127.0.0.1 RNACOS_CONSOLE_HOST=127.0.0.1 \
  RNACOS_DATA_DIR="$DIR/nacos" RUST_LOG=warn "$RNACOS" >"$DIR/nacos.log" 2>&1 &
echo $! >"$DIR/pid-nacos"
"$BIN" serve --data-dir "$DIR/muster" --http "$MUSTER" --dns 127.0.0.1:0 --consul 127.0.0.1:0 \
  >"$DIR/muster.log" 2>&1 &
echo $! >"$DIR/pid-muster"
NACOS=http://127.0.0.1:$NACOS_PORT
LIST="$NACOS/nacos/v1/ns/instance/list?serviceName=bench-read&healthyOnly=false"
READ="http://$MUSTER/v1/registry/default/bench/read"
# Both answer within 30 s (bounded), then get ENDPOINTS instances each.
for _ in $(seq 150); do
  curl -sf "$NACOS/nacos/v1/ns/service/list?pageNo=1&pageSize=10" >/dev/null && \
    curl -sf "http://$MUSTER/v1/status" | jq -e .ready >/dev/null && break
  sleep 0.2
done
for i in $(seq "$ENDPOINTS"); do
  curl -sf -X POST "$NACOS/nacos/v1/ns/instance?serviceName=bench-read&ip=10.0.0.$i&port=8080&ephemeral=false" >/dev/null
  curl -sf -X PUT "$READ/i-$i" -H 'content-type: application/json' \
    -d "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"10.0.0.$i\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}]}}" >/dev/null
done
# The same set on both, or the comparison is void.
for _ in $(seq 50); do
  [ "$(curl -sf "$LIST" | jq '.hosts | length')" = "$ENDPOINTS" ] && break
  sleep 0.2
done
got_nacos=$(curl -sf "$LIST" | jq '.hosts | length')
got_muster=$(curl -sf "$READ" | jq '.endpoints | length')
echo "instances: r-nacos $got_nacos, muster $got_muster (wanted $ENDPOINTS); reply bytes: r-nacos $(curl -sf "$LIST" | wc -c), muster $(curl -sf "$READ" | wc -c)"
[ "$got_nacos" = "$ENDPOINTS" ] && [ "$got_muster" = "$ENDPOINTS" ] || { echo "setup failed" >&2; tail "$DIR"/*.log >&2; exit 1; }
run() { # name url -> prints one line, appends the rate to $DIR/rates-name
  local out rate
  out=$(wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "$2")
  rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  echo "$1: $rate req/s; latency $(awk '/^ +Latency +[0-9]/ {print "avg " $2}' <<<"$out"), p50 $(awk '/^ +50%/ {print $2}' <<<"$out"), p99 $(awk '/^ +99%/ {print $2}' <<<"$out"); $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ' | paste -sd';' || true) load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "$rate" >>"$DIR/rates-$1"
}
for r in $(seq "$RUNS"); do
  echo "run $r"
  run r-nacos "$LIST"
  run muster "$READ"
done
median() { sort -n "$DIR/rates-$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
N=$(median r-nacos)
M=$(median muster)
echo "median: muster $M req/s, r-nacos $N req/s, ratio $(awk -v m="$M" -v n="$N" 'BEGIN {printf "%.2f", m / n}')×"
