#!/usr/bin/env python3
"""Instructions per request on one hot path of `muster serve`, counted by callgrind (all
threads): the instructions of a run with N requests minus those of a run with N/4, over the
difference in requests, so that start-up and stop cancel out. Counts, unlike wall-clock
rates, hold on a shared machine; compare two binaries with it (the base first), and trust a
difference of a few percent.

    python3 .ci/ir.py target/release/muster renew 2000
    python3 .ci/ir.py OLD_BINARY read 2000

Paths: `register` (a new instance per request: one log write each), `renew` (one lease),
`read` (a whole-set read of a 5-endpoint service). Needs valgrind (Debian: valgrind).
"""
import glob
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

PORT = 17171


def endpoint(i):
    return {"incarnation": 1, "endpoint": {"addresses": [{"ip": f"10.1.{i // 250}.{i % 250}"}],
                                           "ports": [{"name": "http", "port": 8080, "protocol": "http"}]}}


def run(binary, path, n):
    """Total instructions of one server run serving `n` requests on `path`."""
    work = tempfile.mkdtemp()
    out = os.path.join(work, "cg.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "serve",
         "--consul", "off", "--xds", "off", "--data-dir", os.path.join(work, "data"),
         "--http", f"127.0.0.1:{PORT}", "--dns", f"127.0.0.1:{PORT + 1}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            probe = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
            probe.request("GET", "/v1/status")
            if probe.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        sys.exit("the server did not start")
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)

    def call(method, url, body=None):
        headers = {"content-type": "application/json"} if body is not None else {}
        conn.request(method, url, body=json.dumps(body) if body is not None else None, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        if reply.status >= 300:
            sys.exit(f"{method} {url}: {reply.status} {data!r}")
        return data

    if path == "renew":
        lease = json.loads(call("POST", "/v1/leases/default", {"ttl_ms": 600000}))["lease"]["id"]
    if path == "read":
        for i in range(5):
            call("PUT", f"/v1/registry/default/read/svc/i-{i}", endpoint(i))
    for i in range(n):
        if path == "register":
            call("PUT", f"/v1/registry/default/bench/svc/i-{i}", endpoint(i))
        elif path == "renew":
            call("PUT", f"/v1/leases/default/{lease}/renew")
        else:
            call("GET", "/v1/registry/default/read/svc")
    conn.close()
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=300)
    total = 0
    for name in glob.glob(out + "*"):
        with open(name) as f:
            for line in f:
                if line.startswith("totals:"):
                    total += int(line.split()[1])
    return total


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("register", "renew", "read"):
        sys.exit(__doc__)
    binary, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    low = run(binary, path, n // 4)
    high = run(binary, path, n)
    print(f"{path} {binary} {(high - low) / (n - n // 4):,.0f} Ir/request")


if __name__ == "__main__":
    main()
