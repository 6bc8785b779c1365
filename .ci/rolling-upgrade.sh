#!/usr/bin/env bash
# A rolling upgrade of a 3-node cluster from OLD_BIN to NEW_BIN while a client writes and
# watches, checked against the client's own history (SPEC R7): see rolling_upgrade.py.
# Run by hand (it needs a build of the older commit), e.g. from the wave-2 commit:
#   git worktree add /tmp/old 0907433 && (cd /tmp/old && cargo build --release -p muster)
#   .ci/rolling-upgrade.sh /tmp/old/target/release/muster target/release/muster
# Usage: rolling-upgrade.sh OLD_BIN NEW_BIN [SECONDS_PER_NODE]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [SECONDS_PER_NODE]" >&2; exit 2; }
exec python3 "$(dirname "$0")/rolling_upgrade.py" "$@"
