#!/usr/bin/env bash
# `muster proxy` beside HAProxy (SPEC D3): the same three backends, the same load, three
# paths. The figures are printed as a markdown table; they are not judged (CI machines
# vary), but every run must finish with no failed request.
#
#   .ci/proxy-bench.sh [MUSTER_BINARY] [--full]     (default target/release/muster)
#
# Backends: one HAProxy process with three frontends that answer every request themselves
# (`http-request return status 200`), HTTP/1.1 keep-alive: fast enough that the proxy in
# front is what is measured.
# Paths, each measured by wrk (--latency) with the same settings:
#   direct        wrk -> backend 1
#   haproxy http  wrk -> HAProxy (mode http, roundrobin over the three, keep-alive) -> backends
#   muster http   wrk -> muster proxy (--protocol http, round_robin; the backends registered
#                 in a real `muster serve`) -> backends          (--full: also the p2c default)
#   haproxy tcp / muster tcp   the same with both proxies in TCP mode: each wrk connection is
#                 one forwarded TCP stream
#   ... churn     wrk with `Connection: close`: every request is a new TCP connection, through
#                 both proxies in TCP mode (and direct)
# Memory: K idle TCP connections held through each proxy's TCP listener; (RSS after - RSS
# before) / K from /proc/PID/status.
#
# Short (CI): wrk -t2 -c32 -d3s, K=200, under 2 minutes. --full: -d10s, K=1000.
set -euo pipefail
cd "$(dirname "$0")/.."

muster=target/release/muster
full=false
for arg in "$@"; do
  case "$arg" in
    --full) full=true ;;
    *) muster=$arg ;;
  esac
done
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "proxy-bench.sh: no muster binary at $muster (cargo build --release -p muster)" >&2; exit 2; }
for tool in haproxy wrk curl jq python3; do
  command -v "$tool" >/dev/null || { echo "proxy-bench.sh: $tool is not installed (apt-get install haproxy wrk)" >&2; exit 2; }
done
if $full; then
  DURATION=10s K=1000
else
  DURATION=3s K=200
fi
THREADS=2 CONNECTIONS=32
# Descriptors: K client sockets here, 2K in each proxy.
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "proxy-bench.sh: $*" >&2
  for log in serve.log proxy.log backends.log lb.log; do
    [ -s "$work/$log" ] && { echo "--- $log" >&2; tail -n 30 "$work/$log" | cut -c1-600 >&2; }
  done
  exit 1
}

free_ports() { # N: N ports free now (bound and released at once)
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
read -r b1 b2 b3 lb_http lb_tcp <<<"$(free_ports 5)"

await_port() { # PORT PID WHAT
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || fail "$3 exited before listening on $1"
    sleep 0.1
  done
  fail "$3 did not listen on $1 within 10 s"
}

# The backends.
cat >"$work/backends.cfg" <<CFG
global
  nbthread 1
  maxconn 5000
defaults
  mode http
  maxconn 5000
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout http-request 120s
  timeout http-keep-alive 120s
frontend b1
  bind 127.0.0.1:$b1
  http-request return status 200 content-type text/plain string "ok"
frontend b2
  bind 127.0.0.1:$b2
  http-request return status 200 content-type text/plain string "ok"
frontend b3
  bind 127.0.0.1:$b3
  http-request return status 200 content-type text/plain string "ok"
CFG
haproxy -db -f "$work/backends.cfg" >"$work/backends.log" 2>&1 &
pids+=($!)
await_port "$b3" "$!" "the backend HAProxy"

# HAProxy as the proxy: the same three backends, listed statically.
cat >"$work/lb.cfg" <<CFG
global
  maxconn 5000
defaults
  maxconn 5000
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout http-keep-alive 120s
frontend http
  mode http
  bind 127.0.0.1:$lb_http
  default_backend http
backend http
  mode http
  balance roundrobin
  server b1 127.0.0.1:$b1
  server b2 127.0.0.1:$b2
  server b3 127.0.0.1:$b3
frontend tcp
  mode tcp
  bind 127.0.0.1:$lb_tcp
  default_backend tcp
backend tcp
  mode tcp
  balance roundrobin
  server b1 127.0.0.1:$b1
  server b2 127.0.0.1:$b2
  server b3 127.0.0.1:$b3
CFG
haproxy -db -f "$work/lb.cfg" >"$work/lb.log" 2>&1 &
lb=$!
pids+=($lb)
await_port "$lb_tcp" "$lb" "HAProxy"

# muster: a real registry with the three backends, and the proxy with its listeners.
"$muster" serve --json --data-dir "$work/data" --http 127.0.0.1:0 --dns 127.0.0.1:0 --consul off \
  >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
[ -s "$work/serve.out" ] || fail "muster serve printed no ready line within 10 s"
export MUSTER_SERVER="http://$(head -1 "$work/serve.out" | jq -r .http)"
unset MUSTER_TOKEN MUSTER_TENANT
i=0
for port in "$b1" "$b2" "$b3"; do
  i=$((i + 1))
  "$muster" register prod/bench "b$i" --addr "127.0.0.1:$port" --incarnation 1 --port-name http \
    --protocol http --ttl 1h >/dev/null 2>"$work/register.err" || fail "muster register: $(cat "$work/register.err")"
done
cat >"$work/proxy.toml" <<TOML
[[listener]]
listen = "127.0.0.1:0"
service = "prod/bench"
protocol = "http"
balancer = "round_robin"

[[listener]]
listen = "127.0.0.1:0"
service = "prod/bench"
protocol = "http"
balancer = "p2c"

[[listener]]
listen = "127.0.0.1:0"
service = "prod/bench"
protocol = "tcp"
balancer = "round_robin"
TOML
"$muster" --json proxy --config "$work/proxy.toml" --admin 127.0.0.1:0 >"$work/proxy.out" 2>"$work/proxy.log" &
mp=$!
pids+=($mp)
for _ in $(seq 1 100); do [ -s "$work/proxy.out" ] && break; sleep 0.1; done
[ -s "$work/proxy.out" ] || fail "muster proxy printed no ready line within 10 s"
ready=$(head -1 "$work/proxy.out")
m_http=$(jq -r '.listeners[0].listen' <<<"$ready")
m_p2c=$(jq -r '.listeners[1].listen' <<<"$ready")
m_tcp=$(jq -r '.listeners[2].listen' <<<"$ready")
admin=$(jq -r .admin <<<"$ready")
for _ in $(seq 1 100); do
  curl -fsS "http://$admin/debug/endpoints" 2>/dev/null | jq -e '[.listeners[].eligible] == [3, 3, 3]' >/dev/null && break
  sleep 0.1
done
curl -fsS "http://$admin/debug/endpoints" | jq -e '[.listeners[].eligible] == [3, 3, 3]' >/dev/null \
  || fail "the proxy's listeners do not see the three backends: $(curl -sS "http://$admin/debug/endpoints")"
for url in "127.0.0.1:$b1" "127.0.0.1:$lb_http" "127.0.0.1:$lb_tcp" "$m_http" "$m_tcp"; do
  [ "$(curl -fsS --max-time 5 "http://$url/")" = ok ] || fail "GET http://$url/ does not answer ok"
done

echo "proxy-bench.sh: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency; $(nproc) cores; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
echo "proxy-bench.sh: backends :$b1 :$b2 :$b3, haproxy http :$lb_http tcp :$lb_tcp, muster http $m_http (p2c $m_p2c) tcp $m_tcp"

# wrk's latency figure in ms (it prints us, ms or s).
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'; }
results="$work/results"
: >"$results"
bench() { # LABEL HOSTPORT [wrk args...]
  local label=$1 addr=$2
  shift 2
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$@" "http://$addr/" >"$work/wrk.out" 2>&1 \
    || fail "wrk $label failed: $(cat "$work/wrk.out")"
  local rps p50 p99 errors non2xx
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$work/wrk.out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$work/wrk.out")")
  errors=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$work/wrk.out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$work/wrk.out")
  [ -n "$rps" ] || fail "wrk $label printed no Requests/sec: $(cat "$work/wrk.out")"
  echo "$label|$rps|$p50|$p99|$((${errors:-0} + ${non2xx:-0}))" >>"$results"
  echo "  $label: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors ${errors:-0}, non-2xx ${non2xx:-0}"
}
# Memory per idle connection first, before any load has grown the allocators' free lists: K
# connections held open through a TCP listener, nothing sent.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hold() { # HOSTPORT: opens K connections, says "open", holds them until stdin closes
  python3 -u -c '
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(int(sys.argv[2]))]
print("open", flush=True)
sys.stdin.read()
' "$1" "$K"
}
per_conn() { # LABEL HOSTPORT PID READY_CHECK: bytes of RSS per idle connection
  local before after
  sleep 1
  before=$(rss_kb "$3")
  coproc HOLD { hold "$2"; }
  read -r -t 30 line <&"${HOLD[0]}" || fail "$1: $K connections were not opened within 30 s"
  for _ in $(seq 1 100); do
    $4 && break
    sleep 0.1
  done
  $4 || fail "$1: the proxy does not hold $K upstream connections within 10 s: $(curl -sS "http://$admin/metrics" | grep in_flight; ss -Htnp state established | grep -c "pid=$3,")"
  sleep 1
  after=$(rss_kb "$3")
  local holder=$HOLD_PID
  eval "exec ${HOLD[1]}>&-"
  wait "$holder" 2>/dev/null || true
  echo "$1|$before|$after|$(( (after - before) * 1024 / K ))" >>"$work/memory"
  echo "  $1: RSS $before kB -> $after kB with $K idle connections: $(( (after - before) * 1024 / K )) B each"
}
: >"$work/memory"
muster_holds() {
  curl -fsS "http://$admin/metrics" | awk -v k="$K" -v l="listener=\"$m_tcp\"" \
    '$1 ~ /^muster_proxy_in_flight\{/ && index($1, l) { found = ($2 >= k) } END { exit !found }'
}
# HAProxy's own established connections to the backends (ss from iproute2).
haproxy_holds() {
  [ "$(ss -Htnp state established "( dport = :$b1 or dport = :$b2 or dport = :$b3 )" | grep -c "pid=$lb,")" -ge "$K" ]
}
per_conn "muster tcp" "$m_tcp" "$mp" muster_holds
per_conn "haproxy tcp" "127.0.0.1:$lb_tcp" "$lb" haproxy_holds

close=(-H "Connection: close")
bench "direct" "127.0.0.1:$b1"
bench "haproxy http" "127.0.0.1:$lb_http"
bench "muster http" "$m_http"
$full && bench "muster http p2c" "$m_p2c"
bench "haproxy tcp" "127.0.0.1:$lb_tcp"
bench "muster tcp" "$m_tcp"
bench "direct churn" "127.0.0.1:$b1" "${close[@]}"
bench "haproxy tcp churn" "127.0.0.1:$lb_tcp" "${close[@]}"
bench "muster tcp churn" "$m_tcp" "${close[@]}"
loadavg_run=$(cut -d' ' -f1-3 /proc/loadavg)

# The table.
field() { awk -F'|' -v l="$1" -v f="$2" '$1 == l {print $f}' "$results"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
added() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
echo
echo "### muster proxy beside HAProxy: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $(nproc) cores, loadavg after the load runs $loadavg_run"
echo
echo "| path | req/s | p50 ms | p99 ms | p99 added vs direct, ms | errors |"
echo "|---|---:|---:|---:|---:|---:|"
while IFS='|' read -r label rps p50 p99 errors; do
  base=direct
  [[ "$label" == *churn ]] && base="direct churn"
  echo "| $label | $rps | $p50 | $p99 | $(added "$p99" "$(field "$base" 4)") | $errors |"
done <"$results"
echo
echo "| muster / haproxy | req/s | p99 added |"
echo "|---|---:|---:|"
pair() { # LABEL MUSTER HAPROXY BASE
  local m_added h_added
  m_added=$(added "$(field "$2" 4)" "$(field "$4" 4)")
  h_added=$(added "$(field "$3" 4)" "$(field "$4" 4)")
  echo "| $1 | $(ratio "$(field "$2" 2)" "$(field "$3" 2)") | $(ratio "$m_added" "$h_added") |"
}
pair "http (keep-alive)" "muster http" "haproxy http" direct
pair "tcp (keep-alive streams)" "muster tcp" "haproxy tcp" direct
pair "tcp churn (a connection per request)" "muster tcp churn" "haproxy tcp churn" "direct churn"
echo
echo "| idle TCP connections, K=$K | RSS before kB | RSS after kB | bytes per connection |"
echo "|---|---:|---:|---:|"
while IFS='|' read -r label before after per; do
  echo "| $label | $before | $after | $per |"
done <"$work/memory"
echo
total_errors=$(awk -F'|' '{s += $5} END {print s + 0}' "$results")
[ "$total_errors" -eq 0 ] || fail "$total_errors requests failed or were not 2xx (the table above)"
kill -0 "$mp" 2>/dev/null || fail "muster proxy died during the run"
echo "proxy-bench: muster proxy beside HAProxy: ok (loadavg now $(cut -d' ' -f1-3 /proc/loadavg))"
