#!/usr/bin/env bash
# The HTTP API as curl and jq see it: writes answer with the committed revision, errors are
# {"error":{"code",...}} with a 4xx status, a watch streams NDJSON frames, SIGTERM exits 0.
set -euo pipefail
muster="$1"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
base="http://127.0.0.1:$port"
"$muster" serve --data-dir "$work/data" --http "127.0.0.1:$port" --dns "127.0.0.1:$((port + 1))" --consul 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
server=$!
trap 'kill -9 $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/v1/status" | jq -e '.revision == 0 and .leader == 1' >/dev/null

register() {
  curl -fsS -X PUT "$base/v1/registry/default/prod/api/$1" -H 'content-type: application/json' \
    -d "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"$2\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}]},\"lease\":{\"ttl_ms\":60000}}"
}
register api-0 10.0.0.1 | jq -e '.revision == 1 and .lease.ttl_ms == 60000' >/dev/null
register api-1 10.0.0.2 | jq -e '.revision == 2' >/dev/null

curl -fsS "$base/v1/registry/default/prod/api" | jq -e '.total == 2 and (.endpoints | map(.instance) == ["api-0","api-1"])' >/dev/null

# A watch from revision 0 replays the history as NDJSON; jq reads every line.
curl -sS -N --max-time 2 "$base/v1/watch/default/prod/api?from_revision=0" >"$work/watch.ndjson" 2>/dev/null || true
jq -e -s 'map(select(.type == "update")) | length >= 2' "$work/watch.ndjson" >/dev/null

# A stale incarnation is refused with its code, a 409, and changes nothing.
status=$(curl -sS -o "$work/err.json" -w '%{http_code}' -X PUT "$base/v1/registry/default/prod/api/api-0" \
  -H 'content-type: application/json' -d '{"incarnation":0,"endpoint":{"addresses":[{"ip":"10.0.0.9"}]}}')
[ "$status" = 409 ]
jq -e '.error.code == "stale_incarnation"' "$work/err.json" >/dev/null
# Malformed JSON is a 400 with a code, never a crash.
status=$(curl -sS -o "$work/err.json" -w '%{http_code}' -X PUT "$base/v1/registry/default/prod/api/api-0" \
  -H 'content-type: application/json' -d '{"incarnation":')
[ "$status" = 400 ]
jq -e '.error.code == "bad_request"' "$work/err.json" >/dev/null

# The CLI speaks the same API.
MUSTER_SERVER="$base" "$muster" resolve prod/api --json | jq -e '.endpoints | length == 2' >/dev/null

kill -TERM $server
wait $server
echo "interop-http: ok"
