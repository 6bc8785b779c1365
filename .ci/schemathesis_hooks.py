"""Schemathesis hooks for .ci/schemathesis.sh.

A blocking query (`?index=N`) above the service's revision waits up to `wait` (60 s when
absent, at most 5 min) by design; generated values would spend the time budget, and the
request timeout, on a few such reads. Before every call, in every phase, a blocking read
whose `wait` is absent or valid gets a one-second wait instead: still a value the document
allows, so a valid case stays valid, and an invalid `wait` is left to be refused.

Every answer's status is appended to MUSTER_SCHEMATHESIS_STATUSES (one per line), so
schemathesis.sh can fail a run most of whose answers were 401/403 (SPEC S1: a token that
does not work fuzzes nothing). With MUSTER_TOKEN, only requests that carried it count:
schemathesis's own auth probes (without it, or with a made-up one) are refused by design.
"""

import os
import re
import threading

import schemathesis

# `wait` as the document states it (crates/api/src/reads.rs, `SnapshotQuery::wait`).
VALID_WAIT = re.compile(r"^[0-9]{1,19}(ms|s|m)?$")


@schemathesis.hook
def before_call(context, case, kwargs):
    query = case.query
    if not isinstance(query, dict):
        return
    # A change stream (`stream=true`: the dashboard's views, crates/gate/src/live.rs) ends only when the
    # server stops, as a watch does; it is fuzzed as its one-shot reply, the same object as
    # the stream's lines (tests/it/dashboard.rs reads a stream's first line).
    if query.get("stream") is True or query.get("stream") == "true":
        query["stream"] = False
    if "index" not in query:
        return
    wait = query.get("wait")
    if wait is None or (isinstance(wait, str) and VALID_WAIT.match(wait)):
        query["wait"] = "1s"


_STATUSES = os.environ.get("MUSTER_SCHEMATHESIS_STATUSES")
_STATUSES_LOCK = threading.Lock()


@schemathesis.hook
def after_call(context, case, response):
    if not _STATUSES:
        return
    token = os.environ.get("MUSTER_TOKEN")
    if token and response.request.headers.get("Authorization") != f"Bearer {token}":
        return
    with _STATUSES_LOCK, open(_STATUSES, "a", encoding="ascii") as out:
        out.write(f"{response.status_code}\n")


@schemathesis.hook
def before_load_schema(context, raw_schema):
    """Without MUSTER_TOKEN the server runs with authentication off, where no operation
    needs a token: the document's `security` (written for auth on) is dropped, so a request
    without `Authorization` is not taken for an invalid one."""
    if os.environ.get("MUSTER_TOKEN"):
        return
    for item in raw_schema.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict):
                operation.pop("security", None)
