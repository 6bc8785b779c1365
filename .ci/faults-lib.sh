# Shared by the real-fault scripts (.ci/faults-*.sh), sourced, not run: checks that print
# what they check, bounded polls, and curl calls to a node's API, in a network namespace or
# on this host's loopback.

# ok MESSAGE: a check passed.
ok() { echo "  ok: $*"; }

# fail MESSAGE: a check failed; print the servers' last log lines and stop (the caller's
# EXIT trap cleans up).
fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    [ -f "$log" ] || continue
    echo "--- last lines of $log" >&2
    tail -n 15 "$log" >&2
  done
  exit 1
}

# call NS METHOD PATH [BODY]: one request to the API at $api_base inside namespace NS (empty:
# this host); sets $code (the HTTP status, 000 if none) and $reply (the body).
call() {
  local ns="$1" method="$2" path="$3" body="${4:-}"
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  local args=(-sS -m "${call_timeout:-10}" -o "$work/reply" -w '%{http_code}' -X "$method" "$api_base$path")
  [ -n "$body" ] && args+=(-H 'content-type: application/json' -d "$body")
  code=$("${run[@]}" curl "${args[@]}" 2>/dev/null) || true
  [ -n "$code" ] || code=000
  reply=$(cat "$work/reply" 2>/dev/null || true)
  rm -f "$work/reply"
}

# field JQ: a field of the last reply (empty when absent or not JSON).
field() { jq -r "($1) | values" <<<"$reply" 2>/dev/null || true; }

# register NS SERVICE INSTANCE [LEASE_JSON]: registers incarnation 1 of `default/prod/SERVICE/INSTANCE`.
register() {
  local lease=""
  [ -n "${4:-}" ] && lease=",\"lease\":$4"
  call "$1" PUT "/v1/registry/default/prod/$2/$3" \
    "{\"incarnation\":1,\"endpoint\":{\"addresses\":[{\"ip\":\"10.1.0.1\"}],\"ports\":[{\"name\":\"http\",\"port\":8080,\"protocol\":\"http\"}]}$lease}"
}

# instances NS SERVICE: the sorted instance ids NS serves for SERVICE (a stale read: what this
# node has applied), one per line; empty when it cannot answer.
instances() {
  call "$1" GET "/v1/registry/default/prod/$2?consistency=stale"
  [ "$code" = 200 ] && jq -r '.endpoints[].instance' <<<"$reply" | sort
  return 0
}

# within SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds, for at most SECONDS.
within() {
  local seconds="$1"
  shift
  local tries=$((seconds * 5))
  for _ in $(seq 1 "$tries"); do
    "$@" && return 0
    sleep 0.2
  done
  return 1
}
