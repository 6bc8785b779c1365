"""Python grpcio's own xDS client discovers and balances over Muster endpoints (SPEC D5).

No Muster code in the client: the channel is `grpc.insecure_channel("xds:///api.prod")` with
GRPC_XDS_BOOTSTRAP naming Muster's xDS listener. Real grpcio servers in this process are the
backends, registered with the `muster` CLI (port named `grpc`, region/zone localities). One
trace, in order, each step building on the last:

  1. calls spread over both zone-a backends; the zone-b backend gets none
  2. `muster drain` of one: within 2 s it gets zero new calls, the other keeps serving
     (draining -> DRAINING in EDS)
  3. a third zone-a backend registered: it receives calls
  4. zone a left with nothing eligible (one drained, one deregistered): calls go to zone b,
     which had none before (priority failover: same zone < same region)
  5. a zone-a backend back: calls leave zone b again
  6. CSDS (grpcio-csds, in this process) shows the client ACKED the EDS resource `api.prod`
     at version_info = the service's Muster revision, GET /v1/xds/clients agrees for node
     `py-client-1`, and /metrics counts it among the subscribers at the latest revision; its
     listener, route and cluster are ACKED too, with no NACK

Run by .ci/xds.sh, which starts `muster serve --xds` and sets:
  MUSTER_BIN        the muster binary (register, drain, deregister, resolve)
  MUSTER_SERVER     the server's HTTP API, http://127.0.0.1:PORT (the CLI reads it too)
  MUSTER_XDS_ADDR   its xDS listener, 127.0.0.1:PORT
By hand: start a server the same way, export those, run
`python .ci/xds/test_grpcio_xds.py` (GRPC_VERBOSITY=debug
GRPC_TRACE=xds_client,xds_resolver,cds_lb,priority_lb shows the client's side).

Every wait is a bounded poll; a failure says what was last seen. The last line is
`N passed, N failed`.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent import futures

MUSTER = os.environ.get("MUSTER_BIN", "muster")
HTTP = os.environ.get("MUSTER_SERVER", "http://127.0.0.1:7070")
XDS = os.environ["MUSTER_XDS_ADDR"]

NAMESPACE, SERVICE = "prod", "api"
TARGET = f"xds:///{SERVICE}.{NAMESPACE}"
NODE_ID = "py-client-1"
REGION = "r1"
METHOD = "/muster.ci.Echo/Who"
EDS_TYPE_URL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
# The four xDS types by the names /v1/xds/clients gives them.
KINDS = {
    "type.googleapis.com/envoy.config.listener.v3.Listener": "listener",
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration": "route",
    "type.googleapis.com/envoy.config.cluster.v3.Cluster": "cluster",
    EDS_TYPE_URL: "endpoint",
}

# grpc reads the bootstrap when the process's first xDS channel creates its xDS client; it is
# written, and GRPC_XDS_BOOTSTRAP set, before grpc is even imported.
_bootstrap_dir = tempfile.mkdtemp(prefix="muster-xds-")
BOOTSTRAP = os.path.join(_bootstrap_dir, "bootstrap.json")
with open(BOOTSTRAP, "w") as f:
    json.dump(
        {
            "xds_servers": [
                {"server_uri": XDS, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}
            ],
            "node": {"id": NODE_ID, "cluster": "ci", "locality": {"region": REGION, "zone": "a"}},
        },
        f,
    )
os.environ["GRPC_XDS_BOOTSTRAP"] = BOOTSTRAP

import grpc  # noqa: E402
import grpc_csds  # noqa: E402
from envoy.admin.v3.config_dump_shared_pb2 import ClientResourceStatus  # noqa: E402
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc  # noqa: E402

# The drain bound of the issue: a draining endpoint gets no new calls within 2 s.
DRAIN_BOUND_S = 2.0
# Polls for the client to pick up a change: the first connection also waits for LDS, RDS,
# CDS and EDS in turn and for the backends' connections; a push is milliseconds, so these
# bounds only matter when something is wrong.
FIRST_CALL_TIMEOUT_S = 20.0
CHANGE_TIMEOUT_S = 10.0
# Calls per counted window: with round robin over two or three backends, enough for each to
# get several.
WINDOW = 30
CALL_TIMEOUT_S = 2.0


class Backend:
    """A real grpcio server answering METHOD with its instance name, counting its calls."""

    def __init__(self, name, zone):
        self.name, self.zone = name, zone
        self.calls = 0
        self.last_call = None
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "muster.ci.Echo", {"Who": grpc.unary_unary_rpc_method_handler(self._who)}
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _who(self, request, context):
        with self._lock:
            self.calls += 1
            self.last_call = time.monotonic()
        return self.name.encode()

    def count(self):
        with self._lock:
            return self.calls

    def stop(self):
        self.server.stop(grace=None)


def muster(*args):
    """Runs the muster CLI against MUSTER_SERVER; fails with its output on a non-zero exit."""
    run = subprocess.run([MUSTER, *args], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        raise AssertionError(f"muster {' '.join(args)} exited {run.returncode}: {run.stderr.strip()} {run.stdout.strip()}")
    return run.stdout


def register(backend):
    muster(
        "register", f"{NAMESPACE}/{SERVICE}", backend.name, "--addr", f"127.0.0.1:{backend.port}",
        "--port-name", "grpc", "--incarnation", "1", "--ttl", "10m",
        "--region", REGION, "--zone", backend.zone,
    )


def drain(backend):
    muster("drain", f"{NAMESPACE}/{SERVICE}", backend.name, "--incarnation", "1", "--reason", "xds ci")


def deregister(backend):
    muster("deregister", f"{NAMESPACE}/{SERVICE}", backend.name, "--incarnation", "1")


def service_revision():
    return json.loads(muster("resolve", f"{NAMESPACE}/{SERVICE}", "--all", "--json"))["service_revision"]


def http_text(path):
    with urllib.request.urlopen(HTTP + path, timeout=5) as reply:
        return reply.read().decode()


def http_get(path):
    return json.loads(http_text(path))


def poll(probe, what, timeout):
    """Calls probe() until it returns (True, seen); fails with the last thing seen."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        done, seen = probe()
        if done:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s; last seen: {json.dumps(seen, default=str)}")


class Client:
    """One xDS channel and the unary call on it (raw bytes: no generated code)."""

    def __init__(self):
        self.channel = grpc.insecure_channel(TARGET)
        self.who = self.channel.unary_unary(METHOD)

    def call(self, wait_for_ready=False):
        try:
            return self.who(b"", timeout=CALL_TIMEOUT_S, wait_for_ready=wait_for_ready).decode()
        except grpc.RpcError as err:
            return f"error {err.code().name}: {err.details()}"

    def window(self, n=WINDOW):
        """Which backend answered each of n calls in a row, counted."""
        return dict(collections.Counter(self.call() for _ in range(n)))


class Scenario:
    """The trace of the module's docstring, one `test_` method per step, run in order by main();
    the backends and the one client carry over from step to step."""

    def __init__(self):
        self.backends = {}
        self.client = None

    def backend(self, name, zone):
        backend = Backend(name, zone)
        self.backends[name] = backend
        register(backend)
        return backend

    def until(self, condition, what):
        """Short windows of calls until one satisfies condition (a change reached the client)."""
        return poll(lambda: (lambda seen: (condition(seen), seen))(self.client.window(10)), what, CHANGE_TIMEOUT_S)

    def counts(self):
        return {name: b.count() for name, b in self.backends.items()}

    # 1
    def test_calls_spread_over_both_zone_a_backends(self):
        a1, a2 = self.backend("a1", "a"), self.backend("a2", "a")
        b1 = self.backend("b1", "b")
        self.client = Client()
        # The first call waits for the xDS resources and a connection.
        first = poll(lambda: (lambda got: (not got.startswith("error"), got))(self.client.call(wait_for_ready=True)),
                     f"a first call through {TARGET}", FIRST_CALL_TIMEOUT_S)
        print(f"  first call answered by {first}")
        self.until(lambda w: w.get("a1", 0) > 0 and w.get("a2", 0) > 0, "calls reaching both a1 and a2")
        seen = self.client.window()
        assert set(seen) == {"a1", "a2"} and min(seen.values()) >= WINDOW // 4, (
            f"round robin over a1 and a2 only expected; a window of {WINDOW} calls went {seen}")
        assert b1.count() == 0, f"zone b (b1) got {b1.count()} calls while zone a had eligible endpoints"
        print(f"  a window of {WINDOW} calls: {seen}")
        self.a1, self.a2, self.b1 = a1, a2, b1

    # 2
    def test_a_drained_backend_gets_no_new_calls_within_2s(self):
        started = time.monotonic()
        drain(self.a1)
        # Traffic keeps flowing while the drain travels (commit -> EDS push -> client).
        during = collections.Counter()
        while time.monotonic() < started + DRAIN_BOUND_S:
            during[self.client.call()] += 1
            time.sleep(0.005)  # a steady trickle, not a busy loop on a 2-core machine
        a1_at_deadline = self.a1.count()
        seen = self.client.window()
        assert self.a1.count() == a1_at_deadline, (
            f"a1 got {self.a1.count() - a1_at_deadline} calls more than {DRAIN_BOUND_S} s after its drain; "
            f"the window after the deadline went {seen}")
        assert seen == {"a2": WINDOW}, f"a2 alone should serve after a1's drain; the window went {seen}"
        last_ms = (self.a1.last_call - started) * 1000
        last = f"{last_ms:.0f} ms after the drain began" if last_ms > 0 else "before the drain began"
        print(f"  during the {DRAIN_BOUND_S} s: {dict(during)}; a1's last call {last}; after: {seen}")

    # 3
    def test_a_third_backend_registered_receives_calls(self):
        a3 = self.backend("a3", "a")
        self.until(lambda w: w.get("a3", 0) > 0, "calls reaching the newly registered a3")
        seen = self.client.window()
        assert set(seen) == {"a2", "a3"}, f"a2 and a3 should share the calls (a1 draining, b1 a lower tier): {seen}"
        assert self.b1.count() == 0, f"zone b (b1) got {self.b1.count()} calls while zone a had eligible endpoints"
        print(f"  a window of {WINDOW} calls: {seen}")
        self.a3 = a3

    # 4
    def test_zone_b_serves_only_when_zone_a_has_nothing_eligible(self):
        assert self.b1.count() == 0, f"zone b (b1) got {self.b1.count()} calls before the failover"
        drain(self.a2)
        deregister(self.a3)
        self.until(lambda w: set(w) == {"b1"}, "every call going to b1 (zone b) once zone a has nothing eligible")
        zone_a = {n: self.backends[n].count() for n in ("a1", "a2", "a3")}
        seen = self.client.window()
        after = {n: self.backends[n].count() for n in ("a1", "a2", "a3")}
        assert seen == {"b1": WINDOW} and after == zone_a, (
            f"zone b alone should serve now; the window went {seen}, zone a's counts {zone_a} -> {after}")
        print(f"  a window of {WINDOW} calls: {seen}")

    # 5
    def test_zone_b_is_left_when_zone_a_has_an_eligible_endpoint_again(self):
        self.backend("a4", "a")
        self.until(lambda w: set(w) == {"a4"}, "every call going to the new zone-a backend a4")
        b1_before = self.b1.count()
        seen = self.client.window()
        assert seen == {"a4": WINDOW} and self.b1.count() == b1_before, (
            f"zone a's a4 alone should serve; the window went {seen}, b1 {b1_before} -> {self.b1.count()}")
        print(f"  a window of {WINDOW} calls: {seen}")

    # 6
    def test_csds_xds_clients_and_metrics_show_the_acked_revision(self):
        csds = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        grpc_csds.add_csds_servicer(csds)
        port = csds.add_insecure_port("127.0.0.1:0")
        csds.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = csds_pb2_grpc.ClientStatusDiscoveryServiceStub(channel)

                def agree():
                    revision = service_revision()
                    eds = eds_status(stub.FetchClientStatus(csds_pb2.ClientStatusRequest(), timeout=5))
                    acked = xds_clients_acked(http_get("/v1/xds/clients"))
                    gauges = xds_metrics(http_text("/metrics"))
                    seen = {"service_revision": revision, "csds_eds": eds, "v1_xds_clients": acked, "metrics": gauges}
                    done = (
                        eds is not None and eds["client_status"] == "ACKED"
                        and eds["version_info"] == str(revision)
                        and acked is not None and acked["acked_revision"] == acked["latest_revision"] == revision
                        and gauges == {"subscribers": 1, "subscribers_at_latest": 1, "endpoint_nacks": 0}
                    )
                    return done, seen

                seen = poll(agree, f"CSDS, /v1/xds/clients and /metrics agreeing on the revision of "
                            f"{SERVICE}.{NAMESPACE}", CHANGE_TIMEOUT_S)
                print(f"  {json.dumps(seen)}")
                acked = seen["v1_xds_clients"]
                assert acked["protocol"] == "sotw" and acked["cluster"] == "ci", (
                    f"grpcio speaks SotW ADS as node cluster `ci`; /v1/xds/clients says {acked}")
                # The other three resources of the target were accepted too, on both sides.
                csds_all = csds_statuses(stub.FetchClientStatus(csds_pb2.ClientStatusRequest(), timeout=5))
                ledger = xds_clients_statuses(http_get("/v1/xds/clients"))
                kinds = set(KINDS.values())
                assert csds_all == dict.fromkeys(kinds, "ACKED"), f"CSDS shows {SERVICE}.{NAMESPACE} as {csds_all}"
                assert set(ledger) == kinds and all(
                    r["acked_revision"] is not None and r["nacks"] == 0 for r in ledger.values()
                ), f"/v1/xds/clients shows {NODE_ID}'s resources as {ledger}"
                print(f"  CSDS: {csds_all}; /v1/xds/clients: {ledger}")
        finally:
            csds.stop(grace=None)


def eds_status(response):
    """The EDS resource `api.prod` as the client's CSDS dump shows it, or None."""
    for config in response.config:
        for resource in config.generic_xds_configs:
            if resource.type_url == EDS_TYPE_URL and resource.name == f"{SERVICE}.{NAMESPACE}":
                return {
                    "client_scope": config.client_scope,
                    "node": config.node.id,
                    "version_info": resource.version_info,
                    "client_status": ClientResourceStatus.Name(resource.client_status),
                }
    return None


def csds_statuses(response):
    """Each resource named `api.prod` in the CSDS dump: its kind -> its client status."""
    return {
        KINDS.get(resource.type_url, resource.type_url): ClientResourceStatus.Name(resource.client_status)
        for config in response.config
        for resource in config.generic_xds_configs
        if resource.name == f"{SERVICE}.{NAMESPACE}"
    }


def xds_clients_statuses(reply):
    """Node NODE_ID's resources named `api.prod` in GET /v1/xds/clients, by type."""
    return {
        resource["type"]: {"acked_revision": resource.get("acked_revision"), "nacks": resource.get("nacks")}
        for client in reply.get("clients", []) if client.get("node_id") == NODE_ID
        for resource in client.get("resources", []) if resource.get("resource") == f"{SERVICE}.{NAMESPACE}"
    }


def xds_clients_acked(reply):
    """Node NODE_ID's `endpoint` resource `api.prod` in GET /v1/xds/clients, or None."""
    for client in reply.get("clients", []):
        if client.get("node_id") != NODE_ID:
            continue
        for resource in client.get("resources", []):
            if resource.get("type") == "endpoint" and resource.get("resource") == f"{SERVICE}.{NAMESPACE}":
                return {"node_id": NODE_ID, "cluster": client.get("cluster"), "protocol": client.get("protocol"),
                        **resource}
    return None


def xds_metrics(text):
    """The xDS aggregates of /metrics for this service: its EDS subscribers, those at its
    latest revision, and the endpoint NACKs (this client is the only one)."""
    service = f'{{tenant="default",namespace="{NAMESPACE}",service="{SERVICE}"}}'
    wanted = {
        f"muster_xds_subscribers{service}": "subscribers",
        f"muster_xds_subscribers_at_latest{service}": "subscribers_at_latest",
        'muster_xds_nacks_total{type="endpoint"}': "endpoint_nacks",
    }
    found = {}
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series in wanted:
            found[wanted[series]] = int(float(value))
    return found


def main():
    scenario = Scenario()
    steps = [name for name in Scenario.__dict__ if name.startswith("test_")]
    passed = failed = 0
    try:
        for name in steps:
            print(f"xds: {name.removeprefix('test_').replace('_', ' ')}", flush=True)
            try:
                getattr(scenario, name)()
            except Exception as err:  # noqa: BLE001 (every failure is reported, then the run stops)
                failed += 1
                print(f"  FAILED: {type(err).__name__}: {err}", flush=True)
                print(f"  calls per backend so far: {scenario.counts()}", flush=True)
                # Each step builds on the one before: the rest would fail for the same reason.
                break
            passed += 1
            print("  ok", flush=True)
    finally:
        if scenario.client:
            scenario.client.channel.close()
        for backend in scenario.backends.values():
            backend.stop()
        shutil.rmtree(_bootstrap_dir, ignore_errors=True)
    not_run = len(steps) - passed - failed
    if not_run:
        print(f"xds: {not_run} later steps not run (they build on the failed one)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
