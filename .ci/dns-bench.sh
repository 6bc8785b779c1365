#!/usr/bin/env bash
# DNS benchmark (SPEC D2): one record set, 100 services x 5 endpoints, served by Muster and by
# nsd, measured by dnsperf on this machine in one run, A and SRV queries alternating.
#
#   .ci/dns-bench.sh [MUSTER_BINARY] [SECONDS_PER_RUN] [RUNS]
#
# Prints each run's queries per second and average latency, the medians, the ratio
# Muster/nsd, then p99 latency of both at half of Muster's median rate (dnsperf -Q, per-query
# latencies from -v), median of RUNS runs. Needs nsd, dnsperf and curl (Debian:
# apt-get install -y nsd dnsperf curl). On a machine shared with other work, the p99 mostly
# measures the scheduler: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
muster="${1:-target/release/muster}"
seconds="${2:-10}"
runs="${3:-3}"
services=100
per_service=5
for tool in nsd dnsperf curl jq; do
  command -v "$tool" >/dev/null || { echo "dns-bench: $tool is not installed" >&2; exit 2; }
done

work=$(mktemp -d)
# Below the kernel's ephemeral range (32768 and up), so no outgoing connection holds one.
base_port=$((20000 + RANDOM % 10000))
http_port=$base_port
muster_dns=$((base_port + 1))
nsd_port=$((base_port + 2))
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- Muster: serve, then register the record set through the HTTP API -------------------
"$muster" serve --data-dir "$work/data" --http "127.0.0.1:$http_port" --dns "127.0.0.1:$muster_dns" --consul 127.0.0.1:0 \
  >"$work/muster.out" 2>"$work/muster.log" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$http_port/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$http_port/v1/status" >/dev/null 2>&1 || {
  echo "dns-bench: muster serve did not answer on port $http_port; its log:" >&2
  cat "$work/muster.log" "$work/muster.out" >&2
  exit 1
}
for i in $(seq 0 $((services - 1))); do
  for j in $(seq 1 $per_service); do
    [ "$i$j" = 01 ] || echo "next"
    echo "url = \"http://127.0.0.1:$http_port/v1/registry/default/prod/svc-$i/svc-$i-$j\""
    echo "data = \"{\\\"incarnation\\\":1,\\\"endpoint\\\":{\\\"addresses\\\":[{\\\"ip\\\":\\\"10.0.$i.$j\\\"}],\\\"ports\\\":[{\\\"name\\\":\\\"http\\\",\\\"port\\\":8080,\\\"protocol\\\":\\\"http\\\"}]}}\""
    echo "request = \"PUT\""
    echo "header = \"content-type: application/json\""
    echo "output = \"/dev/null\""
  done
done >"$work/register.curl"
curl -fsS --config "$work/register.curl"
count=$(curl -fsS "http://127.0.0.1:$http_port/v1/status" | jq .revision)
[ "$count" = $((services * per_service)) ] || { echo "dns-bench: registered $count of $((services * per_service))" >&2; exit 1; }

# --- nsd: the same records in a zone file ------------------------------------------------
{
  echo "\$ORIGIN muster."
  echo "\$TTL 5"
  echo "@ IN SOA muster. hostmaster.muster. 1 3600 600 86400 5"
  echo "@ IN NS ns.muster."
  echo "ns IN A 127.0.0.1"
  for i in $(seq 0 $((services - 1))); do
    for j in $(seq 1 $per_service); do
      echo "svc-$i.prod IN A 10.0.$i.$j"
      echo "svc-$i-$j.svc-$i.prod IN A 10.0.$i.$j"
      echo "_http._tcp.svc-$i.prod IN SRV 0 100 8080 svc-$i-$j.svc-$i.prod.muster."
    done
  done
} >"$work/muster.zone"
cat >"$work/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1@$nsd_port
  port: $nsd_port
  username: ""
  chroot: ""
  zonesdir: "$work"
  database: ""
  zonelistfile: "$work/zone.list"
  xfrdfile: "$work/xfrd.state"
  xfrdir: "$work"
  pidfile: "$work/nsd.pid"
  logfile: "$work/nsd.log"
  # As many server processes as Muster has UDP threads (one per core), each with its own
  # socket, as Muster's have.
  server-count: $(nproc)
  reuseport: yes
  # Response rate limiting off: its default (200 answers/s per client netblock, then drop or
  # truncate) would measure the limiter, not the server.
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: muster.
  zonefile: "$work/muster.zone"
CONF
nsd -d -c "$work/nsd.conf" &
pids+=($!)

# --- queries: A and SRV of every service ---------------------------------------------------
for i in $(seq 0 $((services - 1))); do
  echo "svc-$i.prod.muster A"
  echo "_http._tcp.svc-$i.prod.muster SRV"
done >"$work/queries"

# Both servers must answer the same data before anything is measured.
for port in $muster_dns $nsd_port; do
  for _ in $(seq 1 50); do
    dnsperf -s 127.0.0.1 -p "$port" -d "$work/queries" -n 1 >"$work/check" 2>&1 || true
    grep -q "Queries completed: *$((2 * services)) " "$work/check" && grep -q "NOERROR $((2 * services))" "$work/check" && break
    sleep 0.2
  done
  grep -q "NOERROR $((2 * services))" "$work/check" || { echo "dns-bench: port $port does not answer" >&2; cat "$work/check" >&2; exit 1; }
done

# dnsperf: one thread, 4 sockets, up to 100 queries in flight (its default), -l seconds.
measure() { # port [extra dnsperf args] -> "qps avg_latency_ms"
  local port=$1
  shift
  dnsperf -s 127.0.0.1 -p "$port" -d "$work/queries" -l "$seconds" -c 4 -T 1 "$@" >"$work/run" 2>&1
  awk '/Queries per second:/ {qps=$4} /Average Latency \(s\):/ {lat=$4 * 1000} END {printf "%.0f %.3f\n", qps, lat}' "$work/run"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

: >"$work/muster.qps"
: >"$work/nsd.qps"
for run in $(seq 1 "$runs"); do
  read -r m_qps m_lat < <(measure "$muster_dns")
  read -r n_qps n_lat < <(measure "$nsd_port")
  echo "$m_qps" >>"$work/muster.qps"
  echo "$n_qps" >>"$work/nsd.qps"
  printf 'run %d: muster %8s q/s (avg %s ms)   nsd %8s q/s (avg %s ms)\n' "$run" "$m_qps" "$m_lat" "$n_qps" "$n_lat"
done
m_median=$(median <"$work/muster.qps")
n_median=$(median <"$work/nsd.qps")
ratio=$(awk -v m="$m_median" -v n="$n_median" 'BEGIN {printf "%.2f", m / n}')
echo "median: muster $m_median q/s, nsd $n_median q/s, ratio muster/nsd $ratio"

# p99 at half load: both servers at half of Muster's median rate; -v prints one line per
# query whose last field is its latency in seconds. Alternating runs again; the median p99.
half=$((m_median / 2))
p99() { # port -> p99 in ms
  dnsperf -s 127.0.0.1 -p "$1" -d "$work/queries" -l "$seconds" -c 4 -T 1 -Q "$half" -v >"$work/verbose" 2>&1
  awk '$1 == ">" {print $NF}' "$work/verbose" | sort -g |
    awk '{v[NR]=$1} END {if (NR == 0) {print "n/a"} else {i=int(NR * 0.99); if (i < 1) i=1; printf "%.3f\n", v[i] * 1000}}'
}
: >"$work/muster.p99"
: >"$work/nsd.p99"
for run in $(seq 1 "$runs"); do
  m_p99=$(p99 "$muster_dns")
  n_p99=$(p99 "$nsd_port")
  echo "$m_p99" >>"$work/muster.p99"
  echo "$n_p99" >>"$work/nsd.p99"
  printf 'p99 run %d at %d q/s: muster %s ms   nsd %s ms\n' "$run" "$half" "$m_p99" "$n_p99"
done
echo "median p99 at $half q/s: muster $(sort -g "$work/muster.p99" | median) ms, nsd $(sort -g "$work/nsd.p99" | median) ms"
