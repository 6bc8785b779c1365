#!/usr/bin/env bash
# Fuzzes the HTTP API against its own contract (SPEC S5): schemathesis reads
# GET /v1/openapi.json from a release `muster serve` on a temporary data dir and sends
# generated requests, valid and invalid, to every operation. The run fails on any 5xx, any
# reply whose status, content type, headers or body the document does not allow, any valid
# request refused for a reason outside .ci/schemathesis.toml, any invalid one accepted, or
# the server dying. With a token (auth on, SPEC S1) it also fails unless the token is proved
# to work before the run (a route that refuses a request without it answers 200 with it)
# and still after it, and when most answers to requests sent with the token are 401 or 403:
# a run refused at the door fuzzes nothing behind it (the hooks count every answer's status;
# the count is always printed).
#
#   .ci/schemathesis.sh [--full] [MUSTER_BINARY]      (default target/release/muster)
#
# About 2.5 minutes of testing by default (CI); `--full` spends 20 minutes, for a run by hand.
# Environment:
#   MUSTER_TOKEN               a bearer token sent on every request (`Authorization: Bearer`)
#   MUSTER_SERVE_ARGS          more arguments for `muster serve` (e.g. `--config auth.toml`)
#   MUSTER_SCHEMATHESIS_SETUP  a command run once the server answers, with MUSTER_SERVER set;
#                              the last line it prints, if any, becomes MUSTER_TOKEN (e.g.
#                              `muster acl bootstrap --json | jq -r .secret`)
#   MUSTER_SCHEMATHESIS_SEED   the generator's seed (default 1, so CI runs repeat)
#   MUSTER_SCHEMATHESIS_VENV   where schemathesis is installed (default under ~/.cache)
#
# Needs: python3 (3.12 or later preferred: see below) with venv and pip (Debian:
# python3-venv; a venv, because Debian's own python3 is externally managed and refuses a
# bare `pip install`), curl, and root with
# util-linux `unshare` and iproute2 `ip`: the server and schemathesis run in a network
# namespace of their own with only loopback, so a fuzzed health-check URL or member address
# can never send a packet off this machine.
#
# Not fuzzed, with the reason:
#   /v1/watch/...            streams that end only when the server stops; a fuzzer would
#                            wait out its timeout on every one (tests/it/openapi.rs checks
#                            their frames against the document)
#   /v1/cluster/members...   adding or removing Raft members reconfigures the one-node group
#                            under test (tests/it/cluster.rs covers them)
#   /v1/lab/run, /ui...      a lab run is seconds of simulation, one at a time (a second
#                            worker gets lab_busy); /ui serves the dashboard's static files,
#                            not the API (tests/it/dashboard.rs covers both)
#   /v1/acl/bootstrap, DELETE /v1/acl/tokens/...
#                            bootstrapping would leave the run without the token it uses
#                            (or take the cluster's first token), revoking could revoke it:
#                            schemathesis reuses accessors it read from GET /v1/acl/self,
#                            /v1/acl/tokens and /v1/audit, so a fuzzed DELETE does revoke the
#                            run's token
#                            (then every later request is 401 `unknown or revoked token`).
#                            Excluded by name: `--exclude-by` takes a JSON pointer into the
#                            operation (`/operationId == ...`), not `method == ... and path
#                            == ...`, which matches nothing and excluded nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
full=0
muster=target/release/muster
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    -*) echo "schemathesis.sh: unknown option $arg" >&2; exit 2 ;;
    *) muster="$arg" ;;
  esac
done
muster=$(realpath "$muster")
[ -x "$muster" ] || { echo "schemathesis.sh: no muster binary at $muster (cargo build --release -p muster)" >&2; exit 2; }

venv=${MUSTER_SCHEMATHESIS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/muster/schemathesis-$SCHEMATHESIS_VERSION}
if [ "${MUSTER_SCHEMATHESIS_INNER:-}" != 1 ]; then
  if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; then
    echo "schemathesis.sh: installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    # The newest Python on the machine: CPython 3.11's `ast` fails inside hypothesis
    # ("AST constructor recursion depth mismatch") on this document's deeper schemas.
    python=python3
    pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
    for candidate in python3.13 python3.12 "$pyenv_root"/versions/3.13*/bin/python3 "$pyenv_root"/versions/3.12*/bin/python3; do
      if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        python=$candidate
        break
      fi
    done
    [ "$python" = python3 ] && echo "schemathesis.sh: no Python 3.12 or later; trying $(python3 --version)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
  # The rest runs in a fresh network namespace (loopback only).
  exec unshare --net env MUSTER_SCHEMATHESIS_INNER=1 bash "$0" "$@"
fi

ip link set lo up
work=$(mktemp -d)
port=18080
base="http://127.0.0.1:$port"
# shellcheck disable=SC2086 # MUSTER_SERVE_ARGS is a list of arguments.
"$muster" serve --data-dir "$work/data" --http "127.0.0.1:$port" --dns "127.0.0.1:$((port + 1))" --consul 127.0.0.1:0 \
  ${MUSTER_SERVE_ARGS:-} >"$work/serve.out" 2>"$work/serve.log" &
server=$!
cleanup() {
  kill -9 "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/v1/status" >/dev/null

if [ -n "${MUSTER_SCHEMATHESIS_SETUP:-}" ]; then
  token=$(MUSTER_SERVER="$base" bash -c "$MUSTER_SCHEMATHESIS_SETUP" | tail -n 1)
  [ -n "$token" ] && export MUSTER_TOKEN="$token"
fi
auth=()
if [ -n "${MUSTER_TOKEN:-}" ]; then
  auth=(-H "Authorization: Bearer $MUSTER_TOKEN")
  # The token works: GET /v1/acl/tokens (an operator's route) refuses a request without it
  # and answers 200 with it. Otherwise every request below would be refused at the door.
  without=$(curl -sS -o /dev/null -w '%{http_code}' "$base/v1/acl/tokens")
  with=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $MUSTER_TOKEN" "$base/v1/acl/tokens")
  if [ "$without" != 401 ] || [ "$with" != 200 ]; then
    echo "schemathesis.sh: the token does not work: GET /v1/acl/tokens answered $without without it, $with with it (want 401, 200)" >&2
    exit 1
  fi
  echo "schemathesis.sh: the token works (GET /v1/acl/tokens: 401 without it, 200 with it)"
else
  # Without a token the server runs with authentication off and rightly serves requests
  # that carry none; `ignored_auth` (a protected operation answering without credentials)
  # is judged only when auth is on.
  auth=(--exclude-checks ignored_auth)
fi

if [ "$full" = 1 ]; then
  budget=1200
else
  budget=150
fi

set +e
# From the temporary directory, so schemathesis's own cache (.schemathesis/) stays out of the tree.
repo=$PWD
cd "$work"
statuses="$work/statuses"
: >"$statuses"
SCHEMATHESIS_HOOKS="$repo/.ci/schemathesis_hooks.py" MUSTER_SCHEMATHESIS_STATUSES="$statuses" \
  "$venv/bin/schemathesis" --config-file "$repo/.ci/schemathesis.toml" run "$base/v1/openapi.json" \
  --checks all \
  --exclude-path-regex '^/(ui|v1/(watch/|cluster/members|acl/bootstrap|lab/run))' \
  --exclude-name 'DELETE /v1/acl/tokens/{accessor}' \
  --max-time "$budget" \
  --workers 2 \
  --request-timeout 30 \
  --seed "${MUSTER_SCHEMATHESIS_SEED:-1}" \
  --suppress-health-check too_slow,filter_too_much \
  "${auth[@]}"
status=$?
set -e
cd "$repo"

alive=1
kill -0 "$server" 2>/dev/null || alive=0
if [ "$alive" = 0 ] || ! curl -fsS "$base/v1/status" >/dev/null 2>&1; then
  echo "schemathesis.sh: the server died or stopped answering during the run; its log:" >&2
  tail -n 50 "$work/serve.log" >&2
  exit 1
fi
if grep -q "panicked" "$work/serve.log"; then
  echo "schemathesis.sh: the server panicked during the run:" >&2
  grep -A5 "panicked" "$work/serve.log" | head -n 40 >&2
  exit 1
fi
if [ -n "${MUSTER_TOKEN:-}" ]; then
  # The token still works: no fuzzed call revoked or replaced it.
  after=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $MUSTER_TOKEN" "$base/v1/acl/tokens" || true)
  if [ "$after" != 200 ]; then
    echo "schemathesis.sh: the token stopped working during the run: GET /v1/acl/tokens answered $after with it (want 200)" >&2
    exit 1
  fi
fi
if [ "$status" != 0 ]; then
  echo "schemathesis.sh: schemathesis found failures (exit $status)" >&2
  exit "$status"
fi
# The statuses the hooks counted (with a token: only requests that carried it, not
# schemathesis's own probes without it). More than half 401/403: the run was refused, not
# fuzzed, whatever schemathesis concluded.
answered=$(wc -l <"$statuses")
refused=$(grep -cE '^(401|403)$' "$statuses" || true)
echo "schemathesis: $answered answers counted, $refused of them 401/403"
if [ "$answered" -eq 0 ]; then
  echo "schemathesis.sh: no answer was counted (the hooks did not run?)" >&2
  exit 1
fi
if [ $((refused * 2)) -gt "$answered" ]; then
  echo "schemathesis.sh: most answers were 401/403 ($refused of $answered): the run was refused at the door" >&2
  exit 1
fi
echo "schemathesis: ok"
