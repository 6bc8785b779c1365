#!/usr/bin/env bash
# TLS and mutual TLS as curl and the CLI see them (SPEC S1), with certificates made here by
# openssl: curl --cacert reads /v1/status over TLS, plain HTTP to the TLS port fails, a
# listener requiring client certificates refuses curl without one and serves it with one;
# and the dependency tree holds neither aws-lc-rs nor openssl-sys (rustls on ring only).
# Needs the Debian packages `openssl`, `curl` and `jq`. By hand:
#   bash .ci/tls.sh target/release/muster
set -euo pipefail
muster="$1"
cd "$(dirname "$0")/.."
work=$(mktemp -d)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "tls: no aws-lc-rs, no openssl-sys in the tree"
for crate in aws-lc-rs aws-lc-sys openssl-sys; do
  # `cargo tree -i` prints the crate's dependents, or nothing (and an error) when it is absent.
  if ! out=$(cargo tree -i "$crate" --workspace --target all --edges normal,build,dev 2>"$work/tree.err"); then
    grep -q "did not match any packages" "$work/tree.err" || { cat "$work/tree.err" >&2; exit 1; }
  fi
  if [ -n "$out" ]; then
    echo "tls: $crate is in the dependency tree:" >&2
    echo "$out" >&2
    exit 1
  fi
done

echo "tls: certificates (openssl)"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
ca() { # NAME: a CA certificate and key
  openssl req -x509 $ec -keyout "$work/$1.key" -out "$work/$1.crt" -days 2 -subj "/CN=$1" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
leaf() { # NAME CA SAN EKU: a certificate signed by CA
  openssl req $ec -keyout "$work/$1.key" -out "$work/$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n' "$3" "$4" >"$work/$1.ext"
  openssl x509 -req -in "$work/$1.csr" -CA "$work/$2.crt" -CAkey "$work/$2.key" -CAcreateserial \
    -out "$work/$1.crt" -days 2 -extfile "$work/$1.ext" 2>/dev/null
}
ca ca
ca clients-ca
leaf server ca "DNS:localhost,IP:127.0.0.1" serverAuth
leaf client clients-ca "URI:spiffe://acme.internal/ns/prod/sa/api,DNS:api.acme.internal" clientAuth

serve() { # NAME PORT FLAGS...: starts a TLS server, waits until curl --cacert reads its status
  local name="$1" port="$2"
  shift 2
  "$muster" serve --data-dir "$work/$name-data" --http "127.0.0.1:$port" --dns "127.0.0.1:$((port + 1))" --consul 127.0.0.1:0 \
    --tls-cert "$work/server.crt" --tls-key "$work/server.key" "$@" >"$work/$name.out" 2>"$work/$name.log" &
  servers+=($!)
  for _ in $(seq 1 100); do
    grep -q "muster serving https://" "$work/$name.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "tls: $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

echo "tls: the API over TLS"
port=$((20000 + RANDOM % 20000))
serve tls "$port"
base="https://127.0.0.1:$port"
curl -fsS --cacert "$work/ca.crt" "$base/v1/status" | jq -e '.ready == true' >/dev/null
curl -fsS --cacert "$work/ca.crt" "https://localhost:$port/v1/status" | jq -e '.ready == true' >/dev/null
if curl -sS --max-time 5 "http://127.0.0.1:$port/v1/status" >"$work/plain.out" 2>&1; then
  echo "tls: plain HTTP to the TLS port was answered:" >&2
  cat "$work/plain.out" >&2
  exit 1
fi
if curl -sS --max-time 5 "$base/v1/status" >/dev/null 2>&1; then
  echo "tls: curl without the CA accepted the server certificate" >&2
  exit 1
fi
"$muster" status --server "$base" --cacert "$work/ca.crt" --json | jq -e '.ready == true' >/dev/null

echo "tls: mutual TLS, client certificates required"
mport=$((port + 2))
serve mtls "$mport" --tls-client-ca "$work/clients-ca.crt"
mbase="https://127.0.0.1:$mport"
if curl -sS --max-time 5 --cacert "$work/ca.crt" "$mbase/v1/status" >/dev/null 2>&1; then
  echo "tls: a client without a certificate was served" >&2
  exit 1
fi
curl -fsS --cacert "$work/ca.crt" --cert "$work/client.crt" --key "$work/client.key" "$mbase/v1/status" \
  | jq -e '.ready == true' >/dev/null
MUSTER_CACERT="$work/ca.crt" MUSTER_CERT="$work/client.crt" MUSTER_KEY="$work/client.key" \
  "$muster" status --server "$mbase" --json | jq -e '.ready == true' >/dev/null

for pid in "${servers[@]}"; do kill -TERM "$pid"; wait "$pid"; done
servers=()
echo "tls: ok"
