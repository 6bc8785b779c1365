#!/usr/bin/env bash
# Tokens and tenancy as an operator meets them (SPEC S1-S4): `[auth] enabled = true`, the
# one-time `muster acl bootstrap`, a tenant token from `muster acl token create`, 401 without
# a token, 403 with the wrong one and across tenants, a revoked token refused.
# Usage: bash .ci/tenancy.sh target/release/muster
set -euo pipefail
muster="$1"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
base="http://127.0.0.1:$port"
cat >"$work/muster.toml" <<TOML
[auth]
enabled = true
TOML
"$muster" serve --config "$work/muster.toml" --data-dir "$work/data" --http "127.0.0.1:$port" \
  --dns "127.0.0.1:$((port + 1))" --consul 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
server=$!
trap 'kill -9 $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$base/v1/status" >/dev/null 2>&1 && break
  sleep 0.1
done
export MUSTER_SERVER="$base"
code() { jq -r '.error.code' "$work/err.json"; }
status_of() { curl -sS -o "$work/err.json" -w '%{http_code}' "$@"; }
body='{"incarnation":1,"endpoint":{"addresses":[{"ip":"10.0.0.1"}],"ports":[{"name":"http","port":8080}]}}'

# No token on a protected route: 401 unauthenticated.
[ "$(status_of "$base/v1/registry/acme/prod/api")" = 401 ] && [ "$(code)" = unauthenticated ]

# Bootstrap works once.
"$muster" acl bootstrap --json >"$work/operator.json"
jq -e '(.accessor | length) == 32 and (.secret | length) == 64 and (keys == ["accessor","secret"])' "$work/operator.json" >/dev/null
if "$muster" acl bootstrap --json >"$work/again.json" 2>/dev/null; then
  echo "a second bootstrap succeeded" >&2; exit 1
fi
jq -e '.error.code == "already_bootstrapped"' "$work/again.json" >/dev/null
operator=$(jq -r .secret "$work/operator.json")

# A registrar token for acme's prod/api, and a reader of all of acme's prod.
MUSTER_TOKEN="$operator" "$muster" acl token create --tenant acme --allow 'prod/api=register,renew,read' --json >"$work/registrar.json"
MUSTER_TOKEN="$operator" "$muster" acl token create --tenant acme --allow 'prod/*=read,watch' --deny 'prod/secret=read' --json >"$work/reader.json"
registrar=$(jq -r .secret "$work/registrar.json")
reader=$(jq -r .secret "$work/reader.json")
MUSTER_TOKEN="$operator" "$muster" acl token list --json | jq -e '.tokens | length == 3 and all(.[]; .role != null)' >/dev/null

# The registrar publishes prod/api; it may not publish prod/db, nor anything of another tenant.
[ "$(status_of -X PUT "$base/v1/registry/acme/prod/api/a" -H "authorization: Bearer $registrar" -H 'content-type: application/json' -d "$body")" = 200 ]
[ "$(status_of -X PUT "$base/v1/registry/acme/prod/db/a" -H "authorization: Bearer $registrar" -H 'content-type: application/json' -d "$body")" = 403 ] && [ "$(code)" = permission_denied ]
[ "$(status_of -X PUT "$base/v1/registry/other/prod/api/a" -H "authorization: Bearer $registrar" -H 'content-type: application/json' -d "$body")" = 403 ] && [ "$(code)" = permission_denied ]
# The reader reads through the CLI, and is refused what the deny rule names.
MUSTER_TOKEN="$reader" "$muster" resolve prod/api --tenant acme --json | jq -e '.total == 1' >/dev/null
[ "$(status_of "$base/v1/registry/acme/prod/secret" -H "authorization: Bearer $reader")" = 403 ]

# Roles are the token's (SPEC L5): an owner token for the orchestrator; `acl self` and the list
# show each token's role; an app token's `X-Muster-Actor: owner` is refused.
MUSTER_TOKEN="$operator" "$muster" acl token create --tenant acme --role owner --allow 'prod/api=set_state,read' --json >"$work/owner.json"
owner=$(jq -r .secret "$work/owner.json")
MUSTER_TOKEN="$owner" "$muster" acl self --json | jq -e '.role == "owner" and .tenant == "acme"' >/dev/null
MUSTER_TOKEN="$registrar" "$muster" acl self | grep -q ' app '
MUSTER_TOKEN="$operator" "$muster" acl token list | grep -q ROLE
serving='{"incarnation":1,"state":"ready","reason":"up"}'
[ "$(status_of -X PUT "$base/v1/registry/acme/prod/api/a/serving" -H "authorization: Bearer $registrar" -H 'x-muster-actor: owner' -H 'content-type: application/json' -d "$serving")" = 403 ] && [ "$(code)" = permission_denied ]

# A lease belongs to its service (SPEC L4): the registrar keeps prod/api's lease; a token of
# another service cannot renew it.
lease=$(MUSTER_TOKEN="$registrar" "$muster" lease grant prod/api --ttl 30s --tenant acme --json | jq -r .lease.id)
MUSTER_TOKEN="$registrar" "$muster" lease renew "$lease" --tenant acme --json | jq -e ".id == $lease" >/dev/null
MUSTER_TOKEN="$operator" "$muster" acl token create --tenant acme --allow 'prod/payments=renew' --json >"$work/payments.json"
payments=$(jq -r .secret "$work/payments.json")
[ "$(status_of -X PUT "$base/v1/leases/acme/$lease/renew" -H "authorization: Bearer $payments")" = 403 ] && [ "$(code)" = permission_denied ]

# The metrics need the metrics right: the reader is refused, acme's metrics token sees acme.
[ "$(status_of "$base/v1/metrics" -H "authorization: Bearer $reader")" = 403 ]
MUSTER_TOKEN="$operator" "$muster" acl token create --tenant acme --allow '*/*=metrics' --json >"$work/metrics.json"
curl -fsS "$base/v1/metrics" -H "authorization: Bearer $(jq -r .secret "$work/metrics.json")" | grep -q 'tenant="acme"'

# Revoked: refused at once.
accessor=$(jq -r .accessor "$work/reader.json")
MUSTER_TOKEN="$operator" "$muster" acl token revoke "$accessor" >/dev/null
[ "$(status_of "$base/v1/registry/acme/prod/api" -H "authorization: Bearer $reader")" = 401 ] && [ "$(code)" = unauthenticated ]

kill -TERM $server
wait $server
echo "tenancy: bootstrap once, 401/403, tenant isolation, revocation: ok"
