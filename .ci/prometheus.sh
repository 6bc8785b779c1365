#!/usr/bin/env bash
# Real Prometheus against a live Muster (SPEC E1, O1), with Debian's `prometheus` and
# `promtool`:
#  1. `promtool check service-discovery` on an `http_sd_configs` job pointed at
#     /v1/prometheus/sd: of a ready and a draining endpoint, only the ready one is a target,
#     with its __meta_muster_* labels;
#  2. a Prometheus server with that job scrapes the target (Muster's own /v1/metrics, which
#     the ready endpoint names) and reports it `up` in /api/v1/targets;
#  3. `promtool check metrics` on /v1/metrics finds nothing to complain about.
# Authentication is on: Prometheus sends a bearer token, both to discover and to scrape.
# Usage: bash .ci/prometheus.sh target/release/muster
set -euo pipefail
muster="$1"
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port)
dns=0  # DNS binds UDP too: port 0 lets the kernel pick one free for both
prom_port=$(free_port)
base="http://127.0.0.1:$http"
fail() { echo "prometheus: $*" >&2; echo "--- muster log" >&2; tail -20 "$work/serve.log" >&2 || true; exit 1; }
consul=()
if "$muster" serve --help | grep -q -- '--consul'; then consul=(--consul 127.0.0.1:0); fi
printf '[auth]\nenabled = true\n' >"$work/muster.toml"
"$muster" serve --config "$work/muster.toml" --data-dir "$work/data" --http "127.0.0.1:$http" --dns "127.0.0.1:$dns" "${consul[@]}" \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
prom=
trap 'kill -9 $server ${prom:-} 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/v1/status" >/dev/null || fail "muster did not start on $base"
token=$(curl -fsS -X POST "$base/v1/acl/bootstrap" | jq -r .secret)
[ "$(curl -sS -o /dev/null -w '%{http_code}' "$base/v1/prometheus/sd")" = 401 ] || fail "http_sd answered without a token"

# A ready endpoint whose `metrics` port is Muster's own HTTP listener (something real to
# scrape), and a draining one.
register() {
  curl -fsS -X PUT "$base/v1/registry/acme/prod/api/$1" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d "{
    \"incarnation\": 1,
    \"endpoint\": {\"addresses\": [{\"ip\": \"127.0.0.1\"}], \"serving\": \"$2\",
      \"ports\": [{\"name\": \"metrics\", \"port\": $3}], \"labels\": {\"team\": \"core\"}}}" >/dev/null \
    || fail "registering $1"
}
register ready ready "$http"
register leaving draining 9
curl -fsS -H "authorization: Bearer $token" "$base/v1/prometheus/sd?port=metrics" | jq -e 'length == 1' >/dev/null || fail "http_sd lists other than one target"

cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: muster
    metrics_path: /v1/metrics
    # "type: Bearer" spelled out: promtool 2.42's check service-discovery does not apply the
    # default and would send the bare credentials.
    authorization:
      type: Bearer
      credentials: $token
    http_sd_configs:
      - url: $base/v1/prometheus/sd?port=metrics
        refresh_interval: 1s
        authorization:
          type: Bearer
          credentials: $token
    relabel_configs:
      - source_labels: [__meta_muster_service]
        target_label: service
      - source_labels: [__meta_muster_instance]
        target_label: muster_instance
      - source_labels: [__meta_muster_label_team]
        target_label: team
YAML
promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool check config"

# 1. Service discovery as Prometheus sees it, after relabelling.
promtool check service-discovery --timeout=10s "$work/prometheus.yml" muster >"$work/sd.json" \
  || fail "promtool check service-discovery: $(cat "$work/sd.json")"
jq -e --arg target "127.0.0.1:$http" '
  length == 1
  and .[0].labels.__address__ == $target
  and .[0].labels.service == "api"
  and .[0].labels.muster_instance == "ready"
  and .[0].labels.team == "core"
  and .[0].discoveredLabels.__meta_muster_state == "ready"
  and .[0].discoveredLabels.__meta_muster_tenant == "acme"
  and .[0].discoveredLabels.__meta_muster_port == "metrics"' "$work/sd.json" >/dev/null \
  || fail "service discovery did not give exactly the ready endpoint: $(cat "$work/sd.json")"

# 2. A Prometheus server scrapes it.
prometheus --config.file="$work/prometheus.yml" --web.listen-address="127.0.0.1:$prom_port" \
  --storage.tsdb.path="$work/tsdb" >"$work/prometheus.log" 2>&1 &
prom=$!
up=
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$prom_port/api/v1/targets" >"$work/targets.json" 2>/dev/null \
    && jq -e --arg target "127.0.0.1:$http" '
      [.data.activeTargets[] | select(.labels.job == "muster")] as $t
      | ($t | length) == 1 and $t[0].health == "up" and $t[0].labels.instance == $target' \
      "$work/targets.json" >/dev/null; then
    up=1
    break
  fi
  sleep 0.1
done
[ -n "$up" ] || fail "the target never came up in /api/v1/targets: $(cat "$work/targets.json" 2>/dev/null; tail -5 "$work/prometheus.log")"

# 3. The exposition lints clean.
for path in /v1/metrics /metrics; do
  curl -fsS -H "authorization: Bearer $token" "$base$path" >"$work/metrics.txt" || fail "GET $path"
  if ! promtool check metrics <"$work/metrics.txt" >"$work/lint.txt" 2>&1 || [ -s "$work/lint.txt" ]; then
    fail "promtool check metrics on $path: $(cat "$work/lint.txt")"
  fi
done
grep -q '^muster_registrations_total{tenant="acme",outcome="ok"} 2$' "$work/metrics.txt" \
  || fail "the two registrations are not counted: $(grep registrations "$work/metrics.txt")"

kill -TERM "$prom"
wait "$prom" 2>/dev/null || true
prom=

kill -TERM $server
wait $server || fail "muster did not stop cleanly"
echo "prometheus: http_sd with a bearer token (promtool check service-discovery), a live scrape up, promtool check metrics: ok"
