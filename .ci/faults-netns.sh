#!/usr/bin/env bash
# Real partitions and real pauses between real processes (SPEC R2, R4, R5): three
# `muster serve` nodes, each in its own network namespace with its own address, joined by a
# bridge in a fourth namespace (nothing on this host's own network changes). Run as root.
#
#   node i: netns $tag-n$i, eth 10.99.0.i/24 ─┐
#                                             ├─ bridge in netns $tag-hub
#   HTTP API on 127.0.0.1 inside its netns    ┘  (cut a node off: its bridge port down)
#
# 1. Partition: the leader is cut off. The minority refuses writes with `no_quorum`, the
#    majority elects a leader and accepts writes; after healing, every acknowledged write is
#    on every node, the refused one on none, and the old leader has caught up.
# 2. Pause: the leader is SIGSTOPped for 3 lease TTLs while a lease is renewed through a
#    follower. The others elect a leader, keep the renewed lease and expire an unrenewed one;
#    the resumed node steps down, expires nothing on its own, and catches up.
# Usage: faults-netns.sh path/to/muster
set -euo pipefail
muster=$(realpath "$1")
source "$(dirname "$0")/faults-lib.sh"
work=$(mktemp -d)
tag="mf$$"
hub="$tag-hub"
secret="faults-netns-secret-0123456789"
api_base="http://127.0.0.1:7070"
ttl_ms=2000
declare -A pid

cleanup() {
  set +e
  for i in "${!pid[@]}"; do
    kill -CONT "${pid[$i]}" 2>/dev/null
    kill -9 "${pid[$i]}" 2>/dev/null
  done
  [ -n "${renewer:-}" ] && kill "$renewer" 2>/dev/null
  for i in 1 2 3; do ip netns del "$tag-n$i" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ns() { echo "$tag-n$1"; }

echo "== netns: three nodes in their own network namespaces"
ip netns add "$hub"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in 1 2 3; do
  ip netns add "$(ns $i)"
  ip link add "${tag}e$i" netns "$(ns $i)" type veth peer name "${tag}h$i" netns "$hub"
  ip -n "$hub" link set "${tag}h$i" master br0 up
  ip -n "$(ns $i)" link set lo up
  ip -n "$(ns $i)" addr add "10.99.0.$i/24" dev "${tag}e$i"
  ip -n "$(ns $i)" link set "${tag}e$i" up
done
peers="1=10.99.0.1:7400,2=10.99.0.2:7400,3=10.99.0.3:7400"

start() {
  local i="$1"
  ip netns exec "$(ns $i)" "$muster" serve --data-dir "$work/data-$i" --http 127.0.0.1:7070 \
    --dns 127.0.0.1:7053 --consul 127.0.0.1:0 --node-id "$i" --cluster-addr "10.99.0.$i:7400" --peers "$peers" \
    --cluster-secret "$secret" >>"$work/node-$i.out" 2>>"$work/node-$i.log" &
  pid[$i]=$!
}
for i in 1 2 3; do start "$i"; done

leader_of() {
  call "$(ns "$1")" GET /v1/status
  field .leader
}
revision_of() {
  call "$(ns "$1")" GET /v1/status
  field .revision
}

# agree "NODES": every node named agrees on one leader among them; sets $leader.
agree() {
  local first="" named
  for i in $1; do
    named=$(leader_of "$i")
    [ -n "$named" ] || return 1
    [ -z "$first" ] && first="$named"
    [ "$named" = "$first" ] || return 1
  done
  [[ " $1 " == *" $first "* ]] || return 1
  leader="$first"
}

# same_state "NODES": the nodes named have applied the same revision.
same_state() {
  local first="" rev
  for i in $1; do
    rev=$(revision_of "$i")
    [ -n "$rev" ] || return 1
    [ -z "$first" ] && first="$rev"
    [ "$rev" = "$first" ] || return 1
  done
}

within 30 agree "1 2 3" || fail "the three nodes never agreed on a leader"
ok "node $leader leads all three (cluster listener on the veth address, API on each namespace's loopback)"

acked=()
for i in 1 2 3; do
  register "$(ns $i)" api "before-$i"
  [ "$code" = 200 ] || fail "write through node $i before the partition: $code $reply"
  acked+=("before-$i")
done
ok "writes through every node are acknowledged"

echo "== netns: the leader is cut off"
old="$leader"
majority=$(for i in 1 2 3; do [ "$i" = "$old" ] || echo -n "$i "; done)
ip -n "$hub" link set "${tag}h$old" down
register "$(ns $old)" api refused-on-minority
[ "$code" = 503 ] && [ "$(field .error.code)" = no_quorum ] \
  || fail "the cut-off leader answered a write with $code $reply, not 503 no_quorum"
ok "the cut-off node $old refuses a write with 503 no_quorum"
within 30 agree "$majority" || fail "the majority ($majority) never elected a leader"
[ "$leader" != "$old" ] || fail "the majority names the cut-off node $old as leader"
new="$leader"
ok "the majority ($majority) elected node $new"
for i in $majority; do
  register "$(ns $i)" api "during-$i"
  [ "$code" = 200 ] || fail "write through majority node $i: $code $reply"
  acked+=("during-$i")
done
ok "the majority accepts writes through both its nodes"

echo "== netns: healed"
ip -n "$hub" link set "${tag}h$old" up
within 30 agree "1 2 3" || fail "after healing the nodes never agreed on a leader"
within 30 same_state "1 2 3" || fail "after healing node $old never caught up"
ok "node $old follows node $leader again and has caught up"
expected=$(printf '%s\n' "${acked[@]}" | sort)
for i in 1 2 3; do
  got=$(instances "$(ns $i)" api)
  [ "$got" = "$expected" ] || fail "node $i serves [$(echo $got)], acknowledged were [$(echo $expected)]"
done
ok "every acknowledged write (${#acked[@]}) is on every node, the refused one on none"

echo "== netns: the leader is paused (SIGSTOP) for 3 TTLs"
old="$leader"
follower=$(for i in 1 2 3; do [ "$i" = "$old" ] || echo "$i"; done | head -n 1)
others=$(for i in 1 2 3; do [ "$i" = "$old" ] || echo -n "$i "; done)
register "$(ns $follower)" kept kept-0 "{\"ttl_ms\":$ttl_ms}"
[ "$code" = 200 ] || fail "leased registration through node $follower: $code $reply"
lease=$(field .lease.id)
register "$(ns $follower)" orphan orphan-0 "{\"ttl_ms\":$ttl_ms}"
[ "$code" = 200 ] || fail "unrenewed registration: $code $reply"
# Renew the kept lease through the follower every 300 ms (a TTL holds six), bounded.
(
  for _ in $(seq 1 150); do
    ip netns exec "$(ns $follower)" curl -sS -m 1 -o /dev/null -X PUT \
      "$api_base/v1/leases/default/$lease/renew" 2>/dev/null || true
    sleep 0.3
  done
) &
renewer=$!
kill -STOP "${pid[$old]}"
paused_at=$SECONDS
within 30 agree "$others" || fail "with node $old paused the others ($others) never elected a leader"
[ "$leader" != "$old" ] || fail "the others still name the paused node $old"
ok "with node $old paused, the others elected node $leader"
gone() { [ -z "$(instances "$(ns "$1")" orphan)" ]; }
within 30 gone "$leader" || fail "the new leader never expired the unrenewed lease"
ok "the new leader expired the unrenewed lease"
# Hold the pause for 3 TTLs in all.
sleep $((3 * ttl_ms / 1000 - (SECONDS - paused_at) > 0 ? 3 * ttl_ms / 1000 - (SECONDS - paused_at) : 0))
for i in $others; do
  [ "$(instances "$(ns $i)" kept)" = kept-0 ] || fail "node $i lost the lease renewed through node $follower"
done
ok "after 3 TTLs the lease renewed through node $follower is alive on $others"

kill -CONT "${pid[$old]}"
within 30 agree "1 2 3" || fail "after SIGCONT the nodes never agreed on a leader"
[ "$leader" != "$old" ] || fail "the resumed node $old leads again before it caught up"
within 30 same_state "1 2 3" || fail "the resumed node $old never caught up"
ok "the resumed node $old stepped down (node $leader leads) and caught up"
# Give the resumed node's lease keeper time to act on its stale deadlines (it ticks well
# within a TTL), then look again: nothing it decided alone may have committed.
sleep $((ttl_ms / 1000))
within 30 same_state "1 2 3" || fail "the nodes diverged after the resume"
for i in 1 2 3; do
  [ "$(instances "$(ns $i)" kept)" = kept-0 ] || fail "node $i lost the renewed lease after node $old resumed"
  [ -z "$(instances "$(ns $i)" orphan)" ] || fail "node $i serves the expired lease's endpoint again"
done
ok "the renewed lease is alive on every node, the expired one on none"
kill "$renewer" 2>/dev/null || true
renewer=""

for i in 1 2 3; do kill -TERM "${pid[$i]}"; done
for i in 1 2 3; do
  wait "${pid[$i]}" || fail "node $i exited with $? after SIGTERM"
  unset "pid[$i]"
done
ok "every node stops with exit 0 on SIGTERM"
echo "faults-netns: ok"
