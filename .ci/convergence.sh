#!/usr/bin/env bash
# The deploy gate (SPEC O3) with real processes: `muster watch` subscribers of a real
# `muster serve` report what they applied; `muster wait-converged` passes once they did, and
# times out (exit 1) listing the one that was stopped (SIGSTOP) before a drain.
#   - four `muster watch prod/api` processes, --client-id w0..w3, --cohort zone=a|b
#   - a registration, then wait-converged at its revision: exit 0
#   - SIGSTOP w3, drain: `--fraction 1.0 --timeout 2s` exits 1 naming w3 (and no other);
#     `--fraction 0.75` (3 of 4) and `--cohort zone=a` exit 0
#   - `muster convergence prod/api --json`: 4 live, 1 straggler, the DNS listener shown as
#     path `dns` only; /v1/metrics aggregates
#
#   .ci/convergence.sh [MUSTER_BINARY]      (default target/release/muster)
set -euo pipefail
cd "$(dirname "$0")/.."

muster=${1:-target/release/muster}
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "convergence.sh: no muster binary at $muster" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill -CONT "$pid" 2>/dev/null || true
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "convergence.sh: $*" >&2
  echo "--- muster serve log" >&2
  tail -n 30 "$work/serve.log" | cut -c1-600 >&2 || true
  exit 1
}

"$muster" serve --json --data-dir "$work/data" --http 127.0.0.1:0 --dns 127.0.0.1:0 --consul off \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
pids+=("$server")
for _ in $(seq 1 150); do
  [ -s "$work/serve.out" ] && break
  kill -0 "$server" 2>/dev/null || fail "muster serve exited"
  sleep 0.1
done
http=$(head -1 "$work/serve.out" | jq -r .http)
export MUSTER_SERVER="http://$http"
unset MUSTER_TOKEN MUSTER_TENANT

"$muster" register prod/api api-0 --addr 127.0.0.1:8080 --incarnation 1 --ttl 1h >/dev/null
for i in 0 1 2 3; do
  cohort=zone=$([ $((i % 2)) -eq 0 ] && echo a || echo b)
  "$muster" watch prod/api --client-id "w$i" --cohort "$cohort" >"$work/w$i.out" 2>&1 &
  pids+=("$!")
done
w3=${pids[4]}

gate() { "$muster" wait-converged prod/api "$@"; }
revision=$("$muster" register prod/api api-1 --addr 127.0.0.1:8081 --incarnation 1 --ttl 1h --json | jq -r .revision)
gate --revision "$revision" --min-subscribers 4 --timeout 20s >"$work/gate1.out" \
  || fail "the four watchers did not converge on revision $revision: $(cat "$work/gate1.out")"
echo "convergence.sh: four watchers applied revision $revision"

kill -STOP "$w3"
revision=$("$muster" drain prod/api api-0 --incarnation 1 --reason deploy --json | jq -r .revision)
gate --revision "$revision" --fraction 0.75 --timeout 20s >/dev/null || fail "3 of the 4 watchers did not converge"
gate --revision "$revision" --cohort zone=a --timeout 20s >/dev/null || fail "zone=a did not converge"
set +e
gate --revision "$revision" --fraction 1.0 --timeout 2s >"$work/gate2.out" 2>"$work/gate2.err"
code=$?
set -e
[ "$code" -eq 1 ] || fail "wait-converged --fraction 1.0 exited $code, not 1: $(cat "$work/gate2.err")"
grep -q 'not_converged' "$work/gate2.err" || fail "no not_converged error: $(cat "$work/gate2.err")"
grep -q '^w3 ' "$work/gate2.out" || fail "the stopped watcher is not listed: $(cat "$work/gate2.out")"
! grep -qE '^w[012] ' "$work/gate2.out" || fail "a converged watcher is listed: $(cat "$work/gate2.out")"
echo "convergence.sh: the gate timed out listing only the stopped watcher"

"$muster" convergence prod/api --json \
  | jq -e '.live == 4 and .applied == 3 and .stragglers_total == 1 and .stragglers[0].client_id == "w3" and (.paths | map(.path) | index("dns") != null)' >/dev/null \
  || fail "convergence --json: $("$muster" convergence prod/api --json)"
# Saved to a file first: `curl | grep -q` fails under pipefail when grep
# stops reading early (curl: (23) Failed writing body).
curl -fsS "$MUSTER_SERVER/v1/metrics" > "$work/metrics.txt"
grep -q '^muster_convergence_behind 1$' "$work/metrics.txt" || fail "metrics lack muster_convergence_behind 1: $(grep convergence "$work/metrics.txt")"
! grep -q 'w3' "$work/metrics.txt" || fail "a client id in the metrics"
kill -CONT "$w3"
gate --revision "$revision" --timeout 20s >/dev/null || fail "the resumed watcher did not catch up"
echo "convergence.sh: ok (the resumed watcher caught up)"
