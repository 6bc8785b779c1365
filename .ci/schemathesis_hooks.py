"""Schemathesis hooks for .ci/schemathesis.sh.

A blocking query (`?index=N`) above the current revision waits up to `wait` (default 60 s,
at most 5 min) by design; fuzzed values would spend the whole time budget on a few such
reads. Every generated blocking read is given a one-second wait instead: still a value the
document allows, so nothing outside the contract is sent.
"""

import schemathesis


@schemathesis.hook
def map_query(context, query):
    if isinstance(query, dict) and "index" in query:
        query["wait"] = "1s"
    return query
