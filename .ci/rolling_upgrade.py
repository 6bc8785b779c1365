#!/usr/bin/env python3
"""A rolling upgrade under load, judged by what a client saw (SPEC R7).

Three `muster serve` nodes of OLD_BIN on loopback form a cluster. A writer registers new
instances of `default/prod/upgrade` through whichever node answers (retrying a write whose
outcome it did not learn, on another node, until it is acknowledged), and a watcher streams the
service, resuming by revision on another node whenever its stream ends. Meanwhile each node in
turn is stopped (SIGTERM) and started again on NEW_BIN over the same data directory and ports,
and must catch up before the next one goes.

Checked at the end, from the client's record:
- every acknowledged registration is in the final set of every node, and nothing else is;
- the watcher saw each instance put exactly once (nothing applied twice, nothing lost), its
  revisions strictly increasing across every resume, with no snapshot after the first;
- the nodes agree on one revision; the cluster's format stays while an older node runs and is
  raised once all run NEW_BIN.

Usage: rolling_upgrade.py OLD_BIN NEW_BIN [SECONDS_PER_NODE]   (see rolling-upgrade.sh)
"""

import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SECRET = "rolling-upgrade-secret-0123456789"
SERVICE = "/default/prod/upgrade"
NODES = (1, 2, 3)


def http_port(i):
    return 17570 + i


def request(i, method, path, body=None, timeout=5.0):
    """One call to node i's API: (status, parsed JSON or None); (0, None) when nothing came."""
    conn = http.client.HTTPConnection("127.0.0.1", http_port(i), timeout=timeout)
    try:
        headers = {"content-type": "application/json"} if body is not None else {}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        try:
            return reply.status, json.loads(data) if data else None
        except ValueError:
            return reply.status, None
    except (OSError, http.client.HTTPException):
        return 0, None
    finally:
        conn.close()


class Cluster:
    def __init__(self, work):
        self.work = work
        self.procs = {}

    def start(self, i, binary):
        peers = ",".join(f"{n}=127.0.0.1:{17670 + n}" for n in NODES)
        args = [
            binary, "serve", "--data-dir", f"{self.work}/data-{i}",
            "--http", f"127.0.0.1:{http_port(i)}", "--dns", f"127.0.0.1:{17770 + i}",
            "--consul", "127.0.0.1:0", "--node-id", str(i), "--cluster-addr", f"127.0.0.1:{17670 + i}",
            "--peers", peers, "--cluster-secret", SECRET,
        ]
        log = open(f"{self.work}/node-{i}.log", "ab")
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=log)

    def stop(self, i):
        proc = self.procs.pop(i)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill_all(self):
        for proc in self.procs.values():
            proc.kill()
            proc.wait()
        self.procs.clear()

    def status(self, i):
        status, body = request(i, "GET", "/v1/status", timeout=2.0)
        return body if status == 200 and isinstance(body, dict) else None


def within(seconds, check):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


class Writer(threading.Thread):
    """Registers w-0, w-1, ... one at a time; a write is retried on the next node until acked."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.acked = {}  # instance -> revision in the reply
        self.attempted = set()
        self.retries = 0
        self.errors = {}

    def run(self):
        n = 0
        node = random.choice(NODES)
        while not self.stop_event.is_set():
            instance = f"w-{n}"
            self.attempted.add(instance)
            body = {"incarnation": 1, "endpoint": {"addresses": [{"ip": f"10.9.{n // 250 % 250}.{n % 250 + 1}"}],
                                                   "ports": [{"name": "http", "port": 8080, "protocol": "http"}]}}
            while True:
                status, reply = request(node, "PUT", f"/v1/registry{SERVICE}/{instance}", body)
                if status == 200:
                    self.acked[instance] = (reply or {}).get("revision")
                    break
                code = ((reply or {}).get("error") or {}).get("code", str(status))
                self.errors[code] = self.errors.get(code, 0) + 1
                if 400 <= status < 500 and status != 429:
                    break  # refused for good: counted, never acknowledged
                self.retries += 1
                node = NODES[(NODES.index(node) + 1) % len(NODES)]
                time.sleep(0.05)
            n += 1
            time.sleep(0.01)


class Watcher(threading.Thread):
    """Streams the service's watch; when it ends, resumes by revision on another node."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.revision = None
        self.puts = {}  # instance -> times put
        self.members = set()
        self.snapshots = 0
        self.resumes = 0
        self.faults = []

    def frames(self, node):
        query = f"?from_revision={self.revision}" if self.revision is not None else ""
        conn = http.client.HTTPConnection("127.0.0.1", http_port(node), timeout=5.0)
        try:
            conn.request("GET", f"/v1/watch{SERVICE}{query}")
            reply = conn.getresponse()
            if reply.status != 200:
                return
            while not self.stop_event.is_set():
                line = reply.readline()
                if not line:
                    return
                yield json.loads(line)
        except (OSError, http.client.HTTPException, ValueError):
            return
        finally:
            conn.close()

    def run(self):
        node = NODES[0]
        while not self.stop_event.is_set():
            for frame in self.frames(node):
                kind = frame.get("type")
                if kind == "snapshot":
                    self.snapshots += 1
                    if self.snapshots > 1:
                        self.faults.append(f"a snapshot at revision {frame['revision']} after a resume")
                    self.members = {e["instance"] for e in frame["snapshot"].get("endpoints", [])}
                    for instance in self.members:
                        self.puts[instance] = self.puts.get(instance, 0) + 1
                    self.revision = frame["revision"]
                elif kind == "update":
                    revision = frame["revision"]
                    if self.revision is not None and revision <= self.revision:
                        self.faults.append(f"update at revision {revision} after {self.revision}")
                    for event in frame.get("events", []):
                        instance = (event.get("endpoint") or {}).get("instance") or event.get("instance")
                        if event.get("type") == "put":
                            self.puts[instance] = self.puts.get(instance, 0) + 1
                            self.members.add(instance)
                        else:
                            self.members.discard(instance)
                    self.revision = revision
                elif kind == "progress":
                    self.revision = max(self.revision or 0, frame["revision"])
                elif kind in ("error", "resync"):
                    self.faults.append(f"{kind} frame: {frame}")
                    return
                # `closing`: the stream ends; resume elsewhere.
            if self.stop_event.is_set():
                return
            self.resumes += 1
            node = NODES[(NODES.index(node) + 1) % len(NODES)]
            time.sleep(0.1)


def main():
    old_bin, new_bin = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
    per_node = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    work = tempfile.mkdtemp(prefix="rolling-upgrade-")
    cluster = Cluster(work)
    failures = []
    finished = False

    def check(ok, message):
        print(f"  {'ok' if ok else 'FAIL'}: {message}", flush=True)
        if not ok:
            failures.append(message)

    try:
        for i in NODES:
            cluster.start(i, old_bin)

        def leader_agreed():
            leaders = {(cluster.status(i) or {}).get("leader") for i in NODES}
            return len(leaders) == 1 and None not in leaders

        if not within(60, leader_agreed):
            raise SystemExit("the old cluster never agreed on a leader")
        print(f"3 nodes of {old_bin} agree on a leader", flush=True)
        # The format the old build writes (1 for a wave-2 build, which reports none), which a
        # fresh cluster of it raises to once every member reports it.
        old_format = ((cluster.status(1) or {}).get("format") or {}).get("node", 1)
        check(within(30, lambda: all(((cluster.status(n) or {}).get("format") or {}).get("cluster", 1) == old_format
                                     for n in NODES)),
              f"the old cluster runs its build's format ({old_format})")
        new_format = None

        writer, watcher = Writer(), Watcher()
        watcher.start()
        within(10, lambda: watcher.revision is not None)
        writer.start()
        time.sleep(per_node)
        for i in NODES:
            before = len(writer.acked)
            started = time.monotonic()
            code = cluster.stop(i)
            cluster.start(i, new_bin)

            def caught_up():
                statuses = [cluster.status(n) for n in NODES]
                if any(s is None or s.get("leader") is None for s in statuses):
                    return False
                return statuses[i - 1]["revision"] >= max(s["revision"] for s in statuses) - 50

            check(code == 0, f"node {i} stopped cleanly on SIGTERM (exit {code})")
            check(within(120, caught_up), f"node {i} restarted on the new build and caught up "
                                          f"in {time.monotonic() - started:.1f} s")
            new_format = ((cluster.status(i) or {}).get("format") or {}).get("node", new_format)
            if i != NODES[-1]:
                # An older build still runs: nothing the new format adds may be written yet.
                time.sleep(3)
                format_now = ((cluster.status(i) or {}).get("format") or {}).get("cluster")
                check(format_now == old_format,
                      f"the cluster's format stays {old_format} while an older node runs ({format_now})")
            time.sleep(per_node)
            check(len(writer.acked) > before, f"writes went on while node {i} was replaced "
                                              f"({len(writer.acked) - before} acknowledged)")

        writer.stop_event.set()
        writer.join(timeout=60)

        def agreed():
            revisions = {(cluster.status(n) or {}).get("revision") for n in NODES}
            return len(revisions) == 1 and None not in revisions and watcher.revision in revisions

        check(within(60, agreed), "the three nodes and the watcher reached one revision")
        watcher.stop_event.set()

        acked = set(writer.acked)
        for n in NODES:
            status, body = request(n, "GET", f"/v1/registry{SERVICE}?consistency=stale")
            final = {e["instance"] for e in (body or {}).get("endpoints", [])} if status == 200 else set()
            check(acked <= final, f"node {n} holds every acknowledged write ({len(acked)}; "
                                  f"missing {sorted(acked - final)[:5]})")
            check(final <= writer.attempted, f"node {n} holds nothing never written")
        twice = sorted(i for i, count in watcher.puts.items() if count > 1)
        check(not twice, f"the watcher saw each instance put once ({len(watcher.puts)} instances; twice: {twice[:5]})")
        check(watcher.members == acked, f"the watcher's set is the acknowledged set ({len(watcher.members)})")
        check(not watcher.faults, f"the watch resumed by revision every time ({watcher.resumes} resumes, "
                                  f"{watcher.snapshots} snapshot): {watcher.faults[:3]}")
        formats = [((cluster.status(n) or {}).get("format") or {}).get("cluster") for n in NODES]
        check(within(30, lambda: all(((cluster.status(n) or {}).get("format") or {}).get("cluster", 0) == new_format
                                     for n in NODES)),
              f"the cluster's format is the new build's ({new_format}, from {old_format}) once every node runs it "
              f"({formats})")
        print(f"writes: {len(writer.attempted)} attempted, {len(acked)} acknowledged, {writer.retries} retried "
              f"({writer.errors}); watch: {watcher.resumes} resumes, final revision {watcher.revision}", flush=True)
        finished = True
    finally:
        cluster.kill_all()
        if failures or not finished:
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"rolling-upgrade: {len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("rolling-upgrade: ok")


if __name__ == "__main__":
    main()
