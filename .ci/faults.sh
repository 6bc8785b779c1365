#!/usr/bin/env bash
# Real faults against a release binary, as root (network namespaces, a loop-mounted
# filesystem, prlimit): partitions and pauses between three processes, a follower throttled
# to a tenth of a core (SIGSTOP/SIGCONT) while 20,000 endpoints are written, a disk that
# fills up, file-descriptor exhaustion. Each script prints its checks and fails on the first one
# that does not hold; this prints how long each took.
# Usage: faults.sh path/to/muster
set -euo pipefail
here=$(dirname "$0")
for fault in netns slow disk fd; do
  started=$SECONDS
  bash "$here/faults-$fault.sh" "$1"
  echo "faults-$fault: $((SECONDS - started)) s"
done
