#!/usr/bin/env bash
# A data directory on a small filesystem that fills up while the node writes (SPEC R2, R6):
# the node refuses the write it cannot persist with a clear code (`storage_failed`), says so
# (status: not ready, `fatal` names the error), drains and exits non-zero; it never
# acknowledges what it did not persist: once space is freed and it is restarted, every
# acknowledged write is there and it accepts writes again. Run as root.
#
# The filesystem is a loop-mounted ext4 image of 16 MiB (a tmpfs of the same size where loop
# devices are not available); a filler file takes all but ~1 MiB of it, so the registrations
# after it (each ~3 KiB of log) exhaust the rest within a few hundred writes.
# Usage: faults-disk.sh path/to/muster
set -euo pipefail
muster=$(realpath "$1")
source "$(dirname "$0")/faults-lib.sh"
work=$(mktemp -d)
mnt="$work/mnt"
mkdir -p "$mnt"
port=$((20000 + RANDOM % 20000))
api_base="http://127.0.0.1:$port"
server=""

cleanup() {
  set +e
  [ -n "$server" ] && kill -9 "$server" 2>/dev/null
  mountpoint -q "$mnt" && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT

echo "== disk: a data dir on a 16 MiB filesystem"
truncate -s 16M "$work/disk.img"
if mkfs.ext4 -q -F "$work/disk.img" >/dev/null 2>&1 && mount -o loop "$work/disk.img" "$mnt" 2>/dev/null; then
  ok "loop-mounted ext4 at $mnt"
else
  mount -t tmpfs -o size=16m tmpfs "$mnt"
  ok "no loop device here: a 16 MiB tmpfs at $mnt"
fi
# Short graces: the failed node says why for 2 s, then exits.
cat >"$work/muster.toml" <<EOF
data_dir = "$mnt/data"
http = "127.0.0.1:$port"
dns_enabled = false
shutdown_grace_ms = 2000
EOF

start() {
  "$muster" serve --config "$work/muster.toml" --consul off >>"$work/serve.out" 2>>"$work/serve.log" &
  server=$!
  up() { call "" GET /v1/status && [ "$code" = 200 ] && [ "$(field .ready)" = true ]; }
  within 20 up || fail "the server did not become ready"
}
start
ok "the node serves"

labels=$(jq -cn '[range(10)] | map({key: "label-\(.)", value: ("v" * 190)}) | from_entries')
register_big() {
  call "" PUT "/v1/registry/default/prod/api/$1" \
    "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"10.1.0.1\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}],\"labels\":$labels}}"
}
acked=()
for i in $(seq 1 20); do
  register_big "api-$i"
  [ "$code" = 200 ] || fail "write $i on an empty disk: $code $reply"
  acked+=("api-$i")
done
ok "20 writes acknowledged on a disk with room"

echo "== disk: the filesystem fills up while the node writes"
dd if=/dev/zero of="$mnt/filler" bs=1M count=64 status=none 2>/dev/null || true
# Leave ~1 MiB: shrink the filler by that much.
size=$(stat -c %s "$mnt/filler")
truncate -s $((size > 1048576 ? size - 1048576 : 0)) "$mnt/filler"
sync
refused=""
for i in $(seq 21 3000); do
  register_big "api-$i"
  if [ "$code" = 200 ]; then
    acked+=("api-$i")
    continue
  fi
  refused="$i"
  break
done
[ -n "$refused" ] || fail "3000 writes on a full disk were all acknowledged"
[ "$code" = 503 ] && [ "$(field .error.code)" = storage_failed ] \
  || fail "the write the disk refused was answered $code $reply, not 503 storage_failed"
ok "write $refused refused with 503 storage_failed after ${#acked[@]} acknowledged: $(field .error.message | head -c 160)"

call "" GET /v1/status
[ "$code" = 200 ] && [ "$(field .ready)" = false ] && [[ "$(field .fatal)" == storage:* ]] \
  || fail "status after the failure: $code $reply"
ok "status: not ready, fatal: $(field .fatal | head -c 160)"
call "" GET "/v1/registry/default/prod/api?consistency=stale"
[ "$code" = 503 ] && [ "$(field .error.code)" = storage_failed ] || fail "a read after the failure: $code $reply"
ok "reads are refused too (storage_failed), not served from frozen state"

exited=""
for _ in $(seq 1 100); do
  if ! kill -0 "$server" 2>/dev/null; then exited=yes; break; fi
  sleep 0.2
done
[ -n "$exited" ] || fail "the failed node did not exit within 20 s"
status=0
wait "$server" || status=$?
server=""
[ "$status" != 0 ] || fail "the failed node exited 0"
grep -q "storage" "$work/serve.log" || fail "the failed node's stderr does not name the storage failure"
ok "the node exited with status $status, naming the failure on stderr"

echo "== disk: space freed, node restarted"
rm -f "$mnt/filler"
sync
start
expected=$(printf '%s\n' "${acked[@]}" | sort)
call "" GET /v1/registry/default/prod/api
[ "$code" = 200 ] || fail "read after restart: $code $reply"
got=$(jq -r '.endpoints[].instance' <<<"$reply" | sort)
missing=$(comm -23 <(echo "$expected") <(echo "$got") | head -n 5)
[ -z "$missing" ] || fail "acknowledged writes missing after the restart: $(echo $missing)"
ok "all ${#acked[@]} acknowledged writes are there after the restart"
register_big "api-after"
[ "$code" = 200 ] || fail "a write after recovery: $code $reply"
ok "the node accepts writes again"

kill -TERM "$server"
wait "$server" || fail "the recovered node exited with $? on SIGTERM"
server=""
ok "the recovered node stops with exit 0 on SIGTERM"
echo "faults-disk: ok"
