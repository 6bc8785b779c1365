#!/usr/bin/env bash
# The SPEC R figures: durable registrations against a 3-node Muster cluster and a 3-node
# etcd 3.4 cluster in the same run, then leader kill → first successful write on Muster.
# Usage: .ci/cluster-bench.sh [MUSTER_BIN] [RUNS] [MODE]   (needs /usr/bin/etcd; CI runs one run)
#   MODE register (default): the above.
#   MODE reads: the read scale-out (SPEC R3) instead, Muster only: the bench's `read`
#     workload (a 5-endpoint snapshot, 64 connections, 10 s) with consistency=stale and
#     with the default, each against the leader alone and spread round-robin over all three
#     nodes (`muster bench --servers A,B,C`), interleaved, RUNS times; the load average with
#     each. E.g. `.ci/cluster-bench.sh target/release/muster 3 reads`.
set -euo pipefail
BIN=${1:-target/release/muster}
RUNS=${2:-3}
MODE=${3:-register}
BIN=$(realpath "$BIN")
DIR=$(mktemp -d)
cd "$DIR"
trap 'kill $(cat pid* epid* 2>/dev/null) 2>/dev/null || true; rm -rf "$DIR"' EXIT
SECRET=cluster-bench-secret-0123456789
PEERS="1=127.0.0.1:17301,2=127.0.0.1:17302,3=127.0.0.1:17303"
for i in 1 2 3; do
  "$BIN" serve --data-dir "d$i" --http "127.0.0.1:1720$i" --dns 127.0.0.1:0 --consul 127.0.0.1:0 --node-id "$i" \
    --cluster-addr "127.0.0.1:1730$i" --peers "$PEERS" --cluster-secret "$SECRET" >"out$i" 2>"log$i" &
  echo $! >"pid$i"
done
if [ "$MODE" = reads ]; then
  for _ in $(seq 100); do
    "$BIN" status --server http://127.0.0.1:17201 --json 2>/dev/null | jq -e .leader >/dev/null && break
    sleep 0.2
  done
  LEADER=$("$BIN" status --server http://127.0.0.1:17201 --json | jq .leader)
  ALL=http://127.0.0.1:17201,http://127.0.0.1:17202,http://127.0.0.1:17203
  echo "muster leader: node $LEADER"
  for run in $(seq "$RUNS"); do
    for consistency in stale default; do
      for target in leader all; do
        if [ "$target" = leader ]; then where=(--server "http://127.0.0.1:1720$LEADER"); else where=(--servers "$ALL"); fi
        echo "run $run, consistency=$consistency, $target: load average $(cut -d' ' -f1-3 /proc/loadavg)"
        "$BIN" bench "${where[@]}" --workloads read --consistency "$consistency" 2>/dev/null \
          | grep -E '^read |^read \(muster\)' || true
      done
    done
  done
  exit 0
fi
IC="e1=http://127.0.0.1:17381,e2=http://127.0.0.1:17382,e3=http://127.0.0.1:17383"
for i in 1 2 3; do
  /usr/bin/etcd --name "e$i" --data-dir "ed$i" --listen-client-urls "http://127.0.0.1:1737$i" \
    --advertise-client-urls "http://127.0.0.1:1737$i" --listen-peer-urls "http://127.0.0.1:1738$i" \
    --initial-advertise-peer-urls "http://127.0.0.1:1738$i" --initial-cluster "$IC" \
    --initial-cluster-state new >"elog$i" 2>&1 &
  echo $! >"epid$i"
done
# Wait until both clusters answer.
for _ in $(seq 100); do
  curl -sf -X POST http://127.0.0.1:17371/v3/maintenance/status -d {} >/dev/null && \
    "$BIN" status --server http://127.0.0.1:17201 --json | jq -e .leader >/dev/null && break
  sleep 0.2
done
LEADER=$("$BIN" status --server http://127.0.0.1:17201 --json | jq .leader)
echo "muster leader: node $LEADER"
for run in $(seq "$RUNS"); do
  "$BIN" bench --server "http://127.0.0.1:1720$LEADER" --server-pid "$(cat "pid$LEADER")" \
    --etcd http://127.0.0.1:17371 --etcd-pid "$(cat epid1)" --workloads register 2>/dev/null \
    | grep -E '^(register|          etcd) ' || true
done
# Leader kill → first successful write through another node.
kill -9 "$(cat "pid$LEADER")"
OTHER=$((LEADER % 3 + 1))
START=$(date +%s%N)
# Bounded: 30 s of retries at most (an election takes well under one).
for _ in $(seq 3000); do
  "$BIN" register prod/kill k-0 --addr 10.0.0.1:80 --incarnation 1 --ttl 5m \
    --server "http://127.0.0.1:1720$OTHER" >/dev/null 2>&1 && break
  sleep 0.01
done
END=$(date +%s%N)
echo "leader kill → first successful write: $(( (END - START) / 1000000 )) ms"
