"""py-consul drives Muster's Consul-compatible API unchanged (SPEC E1).

Run by .ci/consul.sh, which starts the servers and sets:
  MUSTER_CONSUL_HOST, MUSTER_CONSUL_PORT   the Consul listener of a server with auth off
  MUSTER_HTTP                              that server's native API (for the drain)
  MUSTER_BIN                               the muster binary (`muster drain`)
  MUSTER_CONSUL_TENANT, MUSTER_CONSUL_NAMESPACE   where Consul services live
  MUSTER_AUTH_CONSUL_PORT                  the Consul listener of a server with auth on
  MUSTER_OPERATOR_TOKEN, MUSTER_DENIED_TOKEN   a token with every right, one with none here
By hand: start the servers the same way, export those, run
`python .ci/consul/test_py_consul.py`.

Every wait is a bounded poll; a failure says what the server last answered.
"""

import json
import os
import subprocess
import threading
import time
import unittest
import urllib.request

import consul

HOST = os.environ.get("MUSTER_CONSUL_HOST", "127.0.0.1")
PORT = int(os.environ.get("MUSTER_CONSUL_PORT", "8500"))
HTTP = os.environ.get("MUSTER_HTTP", "http://127.0.0.1:7070")
TENANT = os.environ.get("MUSTER_CONSUL_TENANT", "default")
NAMESPACE = os.environ.get("MUSTER_CONSUL_NAMESPACE", "default")

# Bounds of the polls: the server commits in milliseconds, health transitions take a TTL
# (1 s here) and the deregistration its delay (2 s): every bound is several times that.
STATE_TIMEOUT = 15.0
POLL_INTERVAL = 0.1


def client(port=PORT, token=None):
    return consul.Consul(host=HOST, port=port, token=token)


def poll(probe, what, timeout=STATE_TIMEOUT):
    """Calls probe() until it returns (True, value); fails with the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        done, last = probe()
        if done:
            return last
        time.sleep(POLL_INTERVAL)
    raise AssertionError(f"{what}: not within {timeout} s; the server last answered {json.dumps(last, default=str)}")


def accepted(result, what="this write"):
    """py-consul's boolean calls answer False on a 404 (no such route) instead of raising."""
    if result is not True:
        raise AssertionError(f"{what}: the server refused it (py-consul got {result!r}: a 404, no such route or id)")
    return result


def entry(nodes, service_id):
    return next((n for n in nodes if n["Service"]["ID"] == service_id), None)


def check_status(node, check_id):
    return next((c["Status"] for c in node["Checks"] if c["CheckID"] == check_id), None)


class PyConsulAgainstMuster(unittest.TestCase):
    def test_a_ttl_check_passed_is_listed_as_passing(self):
        c = client()
        accepted(c.agent.service.register(
                "py-web", service_id="py-web-1", address="127.0.0.1", port=8080, tags=["v1"],
                meta={"team": "edge"}, check=consul.Check.ttl("30s"),
            )
        )
        self.assertIn("py-web-1", c.agent.services())
        # A TTL check starts critical (Consul's default): not passing before its first pass.
        _, before = c.health.service("py-web", passing=True)
        self.assertIsNone(entry(before, "py-web-1"), f"listed as passing before any pass: {before}")
        accepted(c.agent.check.ttl_pass("service:py-web-1", notes="warmed up"))

        def listed():
            _, nodes = c.health.service("py-web", passing=True)
            return entry(nodes, "py-web-1") is not None, nodes

        nodes = poll(listed, "py-web-1 in health.service(passing=True)")
        node = entry(nodes, "py-web-1")
        self.assertEqual(node["Service"]["Service"], "py-web")
        self.assertEqual(node["Service"]["Port"], 8080)
        self.assertEqual(node["Service"]["Address"], "127.0.0.1")
        self.assertEqual(node["Service"]["Tags"], ["v1"])
        self.assertEqual(node["Service"]["Meta"].get("team"), "edge")
        self.assertEqual(check_status(node, "service:py-web-1"), "passing", node["Checks"])
        self.assertEqual(check_status(node, "serfHealth"), "passing", node["Checks"])
        # The pass's note is the check's Output, in health and in the agent's own view.
        output = next(ch["Output"] for ch in node["Checks"] if ch["CheckID"] == "service:py-web-1")
        self.assertEqual(output, "warmed up", node["Checks"])
        self.assertEqual(c.agent.checks()["service:py-web-1"]["Output"], "warmed up")
        accepted(c.agent.service.deregister("py-web-1"))
        poll(lambda: (entry(c.health.service("py-web")[1], "py-web-1") is None, None), "py-web-1 deregistered")

    def test_a_blocking_query_waits_out_its_wait_when_nothing_changes_and_wakes_on_a_register(self):
        c = client()
        accepted(c.agent.service.register("py-block", service_id="py-block-1", port=9000))
        poll(lambda: (entry(c.health.service("py-block")[1], "py-block-1") is not None, None), "py-block-1 listed")
        index, _ = c.health.service("py-block")
        self.assertGreaterEqual(int(index), 1)

        # Nothing changes in this service, though another one is written meanwhile: the query
        # returns after its wait, at the same index.
        other = threading.Timer(0.3, lambda: client().agent.service.register("py-elsewhere", service_id="py-elsewhere-1"))
        other.start()
        started = time.monotonic()
        same, nodes = c.health.service("py-block", index=index, wait="2s")
        waited = time.monotonic() - started
        other.join()
        self.assertEqual(same, index, f"the index moved with nothing changed in py-block: {nodes}")
        self.assertGreaterEqual(waited, 1.0, "the blocking query did not block")

        # Another client registers an instance: the query (waiting up to 60 s) returns early
        # with a higher index and the new instance.
        result = {}

        def blocked():
            result["reply"] = client().health.service("py-block", index=index, wait="60s")

        waiter = threading.Thread(target=blocked, daemon=True)
        waiter.start()
        time.sleep(0.3)
        accepted(client().agent.service.register("py-block", service_id="py-block-2", port=9001))
        # The register has returned (committed): the query is answered within 1 s of it.
        waiter.join(timeout=1)
        self.assertFalse(waiter.is_alive(), "the blocking query did not wake within 1 s of a register (wait 60 s)")
        new_index, nodes = result["reply"]
        self.assertGreater(int(new_index), int(index))
        self.assertIsNotNone(entry(nodes, "py-block-2"), nodes)

    def test_ttl_silence_turns_critical_and_deregister_critical_service_after_removes_it(self):
        c = client()
        check = consul.Check.ttl("1s")
        check["DeregisterCriticalServiceAfter"] = "2s"
        accepted(c.agent.service.register("py-ttl", service_id="py-ttl-1", port=9100, check=check))
        accepted(c.agent.check.ttl_pass("service:py-ttl-1"))
        poll(lambda: (entry(c.health.service("py-ttl", passing=True)[1], "py-ttl-1") is not None, None), "py-ttl-1 passing")

        def critical():
            _, nodes = c.health.service("py-ttl")
            node = entry(nodes, "py-ttl-1")
            # Gone already counts too: the deregistration can come before this poll sees critical.
            return node is None or check_status(node, "service:py-ttl-1") == "critical", nodes

        nodes = poll(critical, "py-ttl-1 critical after TTL silence")
        if entry(nodes, "py-ttl-1") is not None:
            _, passing = c.health.service("py-ttl", passing=True)
            self.assertIsNone(entry(passing, "py-ttl-1"), "a critical instance is listed as passing")
        poll(lambda: (entry(c.health.service("py-ttl")[1], "py-ttl-1") is None, c.health.service("py-ttl")[1]),
             "py-ttl-1 removed by DeregisterCriticalServiceAfter")
        self.assertNotIn("py-ttl-1", c.agent.services())

    def test_a_muster_drain_shows_as_maintenance(self):
        c = client()
        accepted(c.agent.service.register("py-drain", service_id="py-drain-1", port=9200, check=consul.Check.ttl("30s")))
        accepted(c.agent.check.ttl_pass("service:py-drain-1"))
        poll(lambda: (entry(c.health.service("py-drain", passing=True)[1], "py-drain-1") is not None, None), "py-drain-1 passing")
        with urllib.request.urlopen(f"{HTTP}/v1/registry/{TENANT}/{NAMESPACE}/py-drain", timeout=10) as reply:
            snapshot = json.load(reply)
        native = next(e for e in snapshot["endpoints"] if e["instance"] == "py-drain-1")
        subprocess.run(
            [os.environ.get("MUSTER_BIN", "muster"), "drain", f"{NAMESPACE}/py-drain", "py-drain-1",
             "--incarnation", str(native["incarnation"]), "--reason", "deploy", "--server", HTTP, "--tenant", TENANT],
            check=True, capture_output=True, timeout=30,
        )

        def maintenance():
            _, nodes = c.health.service("py-drain")
            node = entry(nodes, "py-drain-1")
            return node is not None and check_status(node, "_service_maintenance:py-drain-1") == "critical", nodes

        poll(maintenance, "py-drain-1 in maintenance after muster drain")
        _, passing = c.health.service("py-drain", passing=True)
        self.assertIsNone(entry(passing, "py-drain-1"), "a draining instance is listed as passing")

    def test_consul_maintenance_mode_toggles(self):
        c = client()
        accepted(c.agent.service.register("py-maint", service_id="py-maint-1", port=9300))
        poll(lambda: (entry(c.health.service("py-maint", passing=True)[1], "py-maint-1") is not None, None), "py-maint-1 passing")
        accepted(c.agent.service.maintenance("py-maint-1", True, reason="upgrade"))

        def in_maintenance(wanted):
            def probe():
                _, nodes = c.health.service("py-maint")
                node = entry(nodes, "py-maint-1")
                found = node is not None and check_status(node, "_service_maintenance:py-maint-1") is not None
                return found == wanted, nodes
            return probe

        poll(in_maintenance(True), "py-maint-1 in maintenance")
        accepted(c.agent.service.maintenance("py-maint-1", False))
        poll(in_maintenance(False), "py-maint-1 out of maintenance")
        poll(lambda: (entry(c.health.service("py-maint", passing=True)[1], "py-maint-1") is not None, None), "py-maint-1 passing again")

    def test_a_token_without_rights_is_an_acl_error(self):
        port = int(os.environ["MUSTER_AUTH_CONSUL_PORT"])
        denied = client(port, os.environ["MUSTER_DENIED_TOKEN"])
        with self.assertRaises(consul.ACLPermissionDenied):
            denied.agent.service.register("py-secret", service_id="py-secret-1", port=9400)
        operator = client(port, os.environ["MUSTER_OPERATOR_TOKEN"])
        _, nodes = operator.health.service("py-secret")
        self.assertEqual(nodes, [], "a refused registration left an instance behind")
        # The same registration with rights succeeds: the 403 was about the token.
        accepted(operator.agent.service.register("py-secret", service_id="py-secret-1", port=9400))
        poll(lambda: (entry(operator.health.service("py-secret")[1], "py-secret-1") is not None, None), "py-secret-1 listed")


if __name__ == "__main__":
    unittest.main(verbosity=2)
