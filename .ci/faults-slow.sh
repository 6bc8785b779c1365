#!/usr/bin/env bash
# A slow follower always catches up (SPEC R5): three `muster serve` nodes on loopback; one
# follower is throttled to a small CPU share by a SIGSTOP/SIGCONT duty cycle (stopped
# STOP_MS, running RUN_MS, over and over) while ENDPOINTS registrations are written through
# the leader, and stays throttled until it has applied the leader's revision. Before the
# append pacer (muster-consensus `append_pacer`) a follower too slow to answer a full batch
# of entries within openraft's 100 ms was sent the same batch again forever.
#
# Usage: faults-slow.sh path/to/muster [ENDPOINTS] [STOP_MS] [RUN_MS] [CATCH_UP_S]
#   CI:    faults-slow.sh target/release/muster 20000 180 20 240
#   full:  faults-slow.sh target/release/muster 100000 180 20 900
#   debug: faults-slow.sh target/debug/muster 10000 0 0 600     (no throttle: the debug build
#          is the slow follower)
set -euo pipefail
muster=$(realpath "$1")
endpoints="${2:-20000}"
stop_ms="${3:-180}"
run_ms="${4:-20}"
catch_up_s="${5:-240}"
source "$(dirname "$0")/faults-lib.sh"
work=$(mktemp -d)
secret="faults-slow-secret-0123456789ab"
declare -A pid
throttler=""

cleanup() {
  set +e
  [ -n "$throttler" ] && kill "$throttler" 2>/dev/null
  for i in "${!pid[@]}"; do
    kill -CONT "${pid[$i]}" 2>/dev/null
    kill -9 "${pid[$i]}" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

http_port() { echo $((17170 + $1)); }
peers="1=127.0.0.1:17471,2=127.0.0.1:17472,3=127.0.0.1:17473"
for i in 1 2 3; do
  "$muster" serve --data-dir "$work/data-$i" --http "127.0.0.1:$(http_port "$i")" \
    --dns "127.0.0.1:$((17270 + i))" --consul 127.0.0.1:0 --node-id "$i" \
    --cluster-addr "127.0.0.1:$((17470 + i))" --peers "$peers" --cluster-secret "$secret" \
    >>"$work/node-$i.out" 2>>"$work/node-$i.log" &
  pid[$i]=$!
done

status_of() {
  api_base="http://127.0.0.1:$(http_port "$1")"
  call "" GET /v1/status
}
leader_of() { status_of "$1"; field .leader; }
revision_of() { status_of "$1"; field .revision; }
agree() {
  local first="" named
  for i in 1 2 3; do
    named=$(leader_of "$i")
    [ -n "$named" ] || return 1
    [ -z "$first" ] && first="$named"
    [ "$named" = "$first" ] || return 1
  done
  leader="$first"
}
within 60 agree || fail "the three nodes never agreed on a leader"
slow=$(for i in 1 2 3; do [ "$i" = "$leader" ] || echo "$i"; done | head -n 1)
ok "node $leader leads; node $slow will be the slow follower"

if [ "$stop_ms" -gt 0 ]; then
  # The duty cycle: bounded by the script's own end (cleanup kills it).
  (
    stop_s=$(awk "BEGIN { print $stop_ms / 1000 }")
    run_s=$(awk "BEGIN { print $run_ms / 1000 }")
    while kill -STOP "${pid[$slow]}" 2>/dev/null; do
      sleep "$stop_s"
      kill -CONT "${pid[$slow]}" 2>/dev/null || break
      sleep "$run_s"
    done
  ) &
  throttler=$!
  ok "node $slow throttled: stopped ${stop_ms} ms, running ${run_ms} ms, in turn"
fi

started=$SECONDS
"$muster" bench --server "http://127.0.0.1:$(http_port "$leader")" --workloads register \
  --max-requests "$endpoints" --duration 600s --connections 32 --json >"$work/fill.json" \
  || fail "the fill through node $leader failed"
target=$(revision_of "$leader")
[ -n "$target" ] && [ "$target" -ge "$endpoints" ] \
  || fail "the leader is at revision ${target:-?} after $endpoints registrations"
ok "$endpoints registrations through node $leader in $((SECONDS - started)) s (leader at revision $target)"

caught_up() {
  local rev
  rev=$(revision_of "$slow")
  [ -n "$rev" ] && [ "$rev" -ge "$target" ]
}
call_timeout=2
started=$SECONDS
within "$catch_up_s" caught_up || fail "node $slow is at revision $(revision_of "$slow") of $target after ${catch_up_s} s"
ok "the throttled node $slow reached revision $target $((SECONDS - started)) s after the fill ended"

if [ -n "$throttler" ]; then
  kill "$throttler" 2>/dev/null || true
  wait "$throttler" 2>/dev/null || true
  throttler=""
  kill -CONT "${pid[$slow]}" 2>/dev/null || true
fi
same() {
  local a b c
  a=$(revision_of 1) b=$(revision_of 2) c=$(revision_of 3)
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ]
}
within 60 same || fail "the nodes never converged after the throttle ended"
ok "all three nodes at one revision ($(revision_of 1)); the throttled one never stopped (pid ${pid[$slow]})"

for i in 1 2 3; do kill -TERM "${pid[$i]}"; done
for i in 1 2 3; do
  wait "${pid[$i]}" || fail "node $i exited with $? after SIGTERM"
  unset "pid[$i]"
done
echo "faults-slow: ok"
