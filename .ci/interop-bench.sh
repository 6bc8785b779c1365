#!/usr/bin/env bash
# muster bench against a real etcd 3.4 (Debian's etcd-server), short: proves every workload
# runs against both systems with zero errors. The figures themselves are not judged here (a
# shared CI machine is too noisy); the closing notes carry full runs.
set -euo pipefail
muster="$1"
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$muster" bench --quick --spawn --muster-bin "$muster" --spawn-etcd --etcd-bin "$(command -v etcd)" --report-file "$report" >/dev/null
# Every workload ran against both systems, without errors.
jq -e '[.workloads[].results[].errors] | length >= 10 and all(. == 0)' "$report" >/dev/null
jq -e '[.workloads[].results[].system] | (index("muster") != null) and (index("etcd") != null)' "$report" >/dev/null
echo "interop-bench: ok"
