#!/usr/bin/env python3
"""The hostile-client matrix (SPEC S1-S4, S6, S8, W4): every listener of one `muster serve`
(auth on, a one-node cluster so the cluster listener runs) against every kind of hostile
caller, each cell judged. Run by .ci/hostile.sh, which says what is checked and why; usage:

    hostile.py MUSTER_BINARY           (needs grpcio and xds-protos: the venv of hostile.sh)

Prints one line per cell (PASS, FAIL or n/a, with its figures) and a closing
`hostile: N passed, M failed`; exits 1 if any cell failed. Everything is on 127.0.0.1, and
every loop is bounded in count and time. HOSTILE_SCALE (default 1) multiplies the flood
sizes for a full run; HOSTILE_ONLY=a,b,... runs only those cells (callers, a, b, a+, c, watch,
f, cluster, dns, slowloris, d), for debugging.

Internal mode: `hostile.py --bystander PORT TOKEN PATH STOPFILE` is the bystander, a
separate process (so the flood's client work never shows in its latencies) doing sequential
reads, each on a fresh connection, until STOPFILE exists and it has done at least
BYSTANDER_MIN reads; it prints its latencies as JSON.
"""

import asyncio
import ctypes
import json
import logging
import os
import random
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

SCALE = max(1, int(os.environ.get("HOSTILE_SCALE", "1")))

# The rules (see hostile.sh).
RSS_BUDGET_MIB = 64
P99_FACTOR = 5
P99_FLOOR_MS = 2.0
BYSTANDER_MIN = 200
BYSTANDER_MAX = 5000
BYSTANDER_MAX_S = 90
BYSTANDER_GAP_S = 0.005

# The server's settings for the run: small budgets so the floods are small (SPEC W4).
MAX_WATCHES_PER_PRINCIPAL = 200
LIVE_PER_PRINCIPAL = 64  # crates/server/src/admit.rs LIVE_PER_PRINCIPAL
MAX_NAMES_PER_PRINCIPAL = 10_000  # [xds] max_names_per_principal, the default
HEADER_TIMEOUT_S = 3.0
DNS_TCP_IDLE_S = 10.0  # crates/dns/src/listener.rs TCP_IDLE
AUDIT_RETENTION = 50
CLUSTER_SECRET = "hostile-cluster-secret-0123456789"

EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
# Each service's own address, so a leak is recognisable in any answer.
SERVICES = {
    ("acme", "prod", "x", "x-0"): "10.0.0.1",
    ("acme", "prod", "y", "y-0"): "10.0.0.2",
    ("acme", "prod", "ledger-hidden", "l-0"): "10.0.0.3",
    ("globex", "prod", "vault-hidden", "v-0"): "10.9.9.9",
}
HIDDEN = ["ledger-hidden", "vault-hidden"]


# ---------------------------------------------------------------------------------------
# The bystander (a separate process).


def bystander_main(port, token, path, stopfile):
    request = (
        f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    latencies, errors, statuses = [], 0, {}
    started = time.monotonic()
    while len(latencies) + errors < BYSTANDER_MAX and time.monotonic() - started < BYSTANDER_MAX_S:
        if len(latencies) + errors >= BYSTANDER_MIN and os.path.exists(stopfile):
            break
        t0 = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(request)
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
        except OSError:
            status = 0
        elapsed = (time.perf_counter() - t0) * 1000
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
            latencies.append(elapsed)
        else:
            errors += 1
        time.sleep(BYSTANDER_GAP_S)
    print(json.dumps({"latencies_ms": latencies, "errors": errors, "statuses": statuses}))


if len(sys.argv) == 6 and sys.argv[1] == "--bystander":
    bystander_main(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    sys.exit(0)

# The server is started (fork and exec) after grpc's threads run: its fork handlers are of no
# use to a child that execs at once, and only log.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
import grpc  # noqa: E402  (the bystander needs none of this)
from envoy.config.core.v3 import base_pb2  # noqa: E402
from envoy.config.endpoint.v3 import endpoint_pb2  # noqa: E402
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2  # noqa: E402


# ---------------------------------------------------------------------------------------
# Results.

RESULTS = {"passed": 0, "failed": 0, "na": 0}
FAILED = []


def cell(listener, caller, ok, figures):
    verdict = "PASS" if ok else "FAIL"
    RESULTS["passed" if ok else "failed"] += 1
    line = f"{verdict:4}  {listener:13} x {caller:24} {figures}"
    if not ok:
        FAILED.append(line)
    print(line, flush=True)


def not_applicable(listener, caller, why):
    RESULTS["na"] += 1
    print(f"{'n/a':4}  {listener:13} x {caller:24} {why}", flush=True)


def leaks(text):
    """Names of services the caller did not ask for, found in a refusal or answer."""
    return [name for name in HIDDEN if name in text]


# ---------------------------------------------------------------------------------------
# The server.


LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    """In the server's child process, before exec: killed when this script ends, however it
    ends (a CI timeout included), so no server outlives the run (PR_SET_PDEATHSIG)."""
    LIBC.prctl(1, signal.SIGKILL)


class Server:
    def __init__(self, muster, work):
        self.muster, self.work = muster, work
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.cluster = probe.getsockname()[1]
        probe.close()
        config = os.path.join(work, "muster.toml")
        with open(config, "w") as f:
            f.write(
                f"""max_watches_per_principal = {MAX_WATCHES_PER_PRINCIPAL}
progress_interval_ms = 1000
[auth]
enabled = true
[audit]
retention = {AUDIT_RETENTION}
denial_retention = {AUDIT_RETENTION}
[dns_zone]
tenant = "acme"
[limits.http]
header_read_timeout_ms = {int(HEADER_TIMEOUT_S * 1000)}
[limits.cluster]
header_read_timeout_ms = {int(HEADER_TIMEOUT_S * 1000)}
"""
            )
        self.log = open(os.path.join(work, "serve.log"), "w")
        self.proc = subprocess.Popen(
            [muster, "serve", "--json", "--config", config, "--data-dir", os.path.join(work, "data"),
             "--http", "127.0.0.1:0", "--dns", "127.0.0.1:0", "--consul", "127.0.0.1:0",
             "--xds", "127.0.0.1:0", "--node-id", "1", "--cluster-addr", f"127.0.0.1:{self.cluster}",
             "--peers", f"1=127.0.0.1:{self.cluster}", "--cluster-secret", CLUSTER_SECRET],
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )
        self.pid = self.proc.pid
        line = self.proc.stdout.readline()
        if not line:
            self.fail("muster serve printed no ready line")
        ready = json.loads(line)
        port = lambda key: int(ready[key].rsplit(":", 1)[1])  # noqa: E731
        self.http, self.consul, self.dns, self.xds = port("http"), port("consul"), port("dns"), port("xds")
        self.xds_addr = f"127.0.0.1:{self.xds}"

    def fail(self, why):
        print(f"hostile: {why}", file=sys.stderr)
        self.stop()
        self.log.flush()
        with open(os.path.join(self.work, "serve.log")) as f:
            tail = f.readlines()[-40:]
        print("--- muster serve log, its end\n" + "".join(line[:600] for line in tail), file=sys.stderr)
        sys.exit(1)

    def rss_mib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RssPeak:
    """Samples the server's VmRSS every 20 ms on a thread (the event loop may be busy)."""

    def __init__(self, server):
        self.server, self.peak, self.running = server, server.rss_mib(), True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            try:
                self.peak = max(self.peak, self.server.rss_mib())
            except OSError:
                return
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.server.rss_mib())
        return self.peak


# ---------------------------------------------------------------------------------------
# HTTP/1.1 over asyncio streams.


class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def code(self):
        value = self.json
        return value.get("error", {}).get("code") if isinstance(value, dict) else None

    def __repr__(self):
        return f"{self.status} {self.code or self.text[:60]!r}"


def request_bytes(method, path, headers=(), body=None, close=True):
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None:
        lines += ["content-type: application/json", f"content-length: {len(body)}"]
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_head(reader):
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def read_chunk(reader):
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    if size == 0:
        return b""
    data = await reader.readexactly(size)
    await reader.readexactly(2)
    return data


async def read_body(reader, headers):
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while chunk := await read_chunk(reader):
            out += chunk
        return out
    return await reader.read()


async def call(port, method, path, headers=(), body=None, timeout=10):
    """One request on a fresh connection; the whole reply."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(request_bytes(method, path, headers, body))
        await writer.drain()
        status, head = await asyncio.wait_for(read_head(reader), timeout)
        data = await asyncio.wait_for(read_body(reader, head), timeout)
        return Reply(status, head, data)
    finally:
        writer.close()


class Stream:
    """A streaming request held open: the reply's head and first line (a 200), or the whole
    refusal (then the connection is closed)."""

    def __init__(self, reply, writer):
        self.reply, self.writer = reply, writer

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def open_stream(port, path, headers=(), timeout=10):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(request_bytes("GET", path, headers, close=False))
        await writer.drain()
        status, head = await asyncio.wait_for(read_head(reader), timeout)
        if status == 200 and head.get("transfer-encoding", "").lower() == "chunked":
            first = b""
            while b"\n" not in first and len(first) < 1 << 20:
                chunk = await asyncio.wait_for(read_chunk(reader), timeout)
                if not chunk:
                    break
                first += chunk
            return Stream(Reply(status, head, first.split(b"\n", 1)[0]), writer)
        data = await asyncio.wait_for(read_body(reader, head), timeout)
        writer.close()
        return Stream(Reply(status, head, data), None)
    except BaseException:
        writer.close()
        raise


class Parked:
    """A blocking query sent and left waiting: `done` once its reply came."""

    def __init__(self, port, path, headers):
        self.port, self.path, self.headers = port, path, headers
        self.reply, self.writer, self.task = None, None, None

    async def send(self):
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(request_bytes("GET", self.path, self.headers, close=False))
        await self.writer.drain()
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader):
        try:
            status, head = await read_head(reader)
            self.reply = Reply(status, head, await read_body(reader, head))
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as error:
            self.reply = Reply(0, {}, repr(error).encode())

    def close(self):
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()


def bearer(token):
    return [("authorization", f"Bearer {token}")] if token else []


def consul_token(token):
    return [("x-consul-token", token)] if token else []


# ---------------------------------------------------------------------------------------
# xDS.


def xds_node(node_id, tenant):
    node = base_pb2.Node(id=node_id)
    if tenant:
        node.metadata.fields["tenant"].string_value = tenant
    return node


def xds_channel(addr):
    # A channel-local subchannel pool: one channel is one HTTP/2 connection of its own.
    return grpc.aio.insecure_channel(
        addr, options=[("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 64 << 20)]
    )


class Requests:
    """An ADS stream's requests: `request` once `go` is set, then nothing until the stream is
    cancelled (an object, not an async generator, so a cancelled stream closes it quietly)."""

    def __init__(self, request):
        self.request, self.go, self.sent = request, asyncio.Event(), False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await self.go.wait()
        if not self.sent:
            self.sent = True
            return self.request
        await asyncio.get_running_loop().create_future()  # never done: cancelled with the stream
        raise StopAsyncIteration


async def xds_stream(stub, token, request, timeout=30):
    """Opens an ADS stream, waits for the server's first word (its headers, or its refusal
    when it refuses the stream at once: UNAUTHENTICATED comes before any request is read),
    then sends `request` and waits for the first response or the status: (call, outcome,
    response or details). Sending before the server's word races its refusal, and the client
    then reports a failed write (INTERNAL) instead of the server's status."""
    metadata = [("authorization", f"Bearer {token}")] if token else []
    requests = Requests(request)
    rpc = stub.StreamAggregatedResources(requests, metadata=metadata)
    try:
        await asyncio.wait_for(rpc.initial_metadata(), timeout)
        requests.go.set()
        response = await asyncio.wait_for(rpc.read(), timeout)
        if response is grpc.aio.EOF:
            return rpc, "EOF", None
        return rpc, "response", response
    except asyncio.TimeoutError:
        return rpc, "timeout", None
    except grpc.aio.AioRpcError as error:
        return rpc, error.code().name, error.details()


def endpoints_of(response):
    """{cluster name: [addresses]} of an EDS response."""
    found = {}
    for resource in response.resources:
        cla = endpoint_pb2.ClusterLoadAssignment()
        resource.Unpack(cla)
        found[cla.cluster_name] = [
            lb.endpoint.address.socket_address.address for group in cla.endpoints for lb in group.lb_endpoints
        ]
    return found


async def xds_once(addr, token, tenant, names, timeout=10):
    channel = xds_channel(addr)
    try:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        request = discovery_pb2.DiscoveryRequest(node=xds_node("hostile-probe", tenant), type_url=EDS,
                                                 resource_names=names)
        rpc, outcome, detail = await xds_stream(stub, token, request, timeout)
        rpc.cancel()
        return outcome, detail
    finally:
        await channel.close()


# ---------------------------------------------------------------------------------------
# DNS.


def dns_query(qid, name, qtype=1):
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.strip(".").split(".")) + b"\0"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", qtype, 1)


def dns_skip_name(data, at):
    while True:
        length = data[at]
        if length & 0xC0 == 0xC0:
            return at + 2
        if length == 0:
            return at + 1
        at += 1 + length


def dns_answer(data):
    """(id, rcode, A addresses) of a reply."""
    qid, flags, qd, an = struct.unpack(">HHHH", data[:8])
    at = 12
    for _ in range(qd):
        at = dns_skip_name(data, at) + 4
    addresses = []
    for _ in range(an):
        at = dns_skip_name(data, at)
        rtype, _, _, length = struct.unpack(">HHIH", data[at:at + 10])
        at += 10
        if rtype == 1 and length == 4:
            addresses.append(socket.inet_ntoa(data[at:at + 4]))
        at += length
    return qid, flags & 0xF, addresses


def dns_udp(port, name, timeout=1.0, tries=2):
    """A resolver's query: `tries` attempts of `timeout` each; the addresses or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        for _ in range(tries):
            qid = random.randrange(65536)
            s.sendto(dns_query(qid, name), ("127.0.0.1", port))
            try:
                while True:
                    data, _ = s.recvfrom(4096)
                    got, rcode, addresses = dns_answer(data)
                    if got == qid:
                        return addresses if rcode == 0 else None
            except socket.timeout:
                continue
    return None


def dns_tcp(port, name, timeout=3.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            query = dns_query(7, name)
            s.sendall(struct.pack(">H", len(query)) + query)
            length = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
            return dns_answer(s.recv(length, socket.MSG_WAITALL))[2]
    except (OSError, struct.error):
        return None


# ---------------------------------------------------------------------------------------
# The judged flood: bystander idle, then during the flood with its connections open.


def p99(values):
    if not values:
        return float("inf")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Bystander:
    def __init__(self, ctx):
        self.ctx = ctx
        self.stopfile = tempfile.mktemp(dir=ctx.work, prefix="stop-")
        self.proc = None

    async def start(self, stopped=False):
        if stopped:
            open(self.stopfile, "w").close()
        # At a higher priority than the flood's client where it may (root, as in CI): on a
        # shared 2-core machine it measures the server's service, not its own wait for a core
        # that the load generator holds.
        nice = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
        self.proc = await asyncio.create_subprocess_exec(
            *nice, sys.executable, __file__, "--bystander", str(self.ctx.server.http), self.ctx.operator,
            "/v1/registry/acme/prod/x", self.stopfile, stdout=asyncio.subprocess.PIPE,
        )

    async def finish(self):
        open(self.stopfile, "w").close()
        out, _ = await asyncio.wait_for(self.proc.communicate(), BYSTANDER_MAX_S + 30)
        return json.loads(out)


async def idle_p99(ctx):
    idle = Bystander(ctx)
    await idle.start(stopped=True)
    result = await idle.finish()
    return p99(result["latencies_ms"]), result


async def judged_flood(ctx, listener, caller, flood, release=None, extra_lines=None):
    """Runs `flood()` (which returns (ok, figures) with its connections still open), judges
    RSS growth and the bystander, prints the cell, then `release()`."""
    idle, idle_result = await idle_p99(ctx)
    before = ctx.server.rss_mib()
    sampler = RssPeak(ctx.server)
    during = Bystander(ctx)
    await during.start()
    started = time.monotonic()
    try:
        ok, figures = await flood()
    except Exception as error:  # noqa: BLE001 - a broken flood is a failed cell, not a crash
        ok, figures = False, f"flood raised {error!r}"
    elapsed = time.monotonic() - started
    result = await during.finish()
    peak = sampler.stop()
    growth = peak - before
    flood_p99 = p99(result["latencies_ms"])
    limit = P99_FACTOR * max(idle, P99_FLOOR_MS)
    rss_ok = growth <= RSS_BUDGET_MIB
    p99_ok = flood_p99 <= limit and result["errors"] == 0 and idle_result["errors"] == 0
    summary = (
        f"RSS {before:.0f}->{peak:.0f} MiB (+{growth:.1f}, max {RSS_BUDGET_MIB}); bystander p99 idle {idle:.2f} ms, "
        f"flood {flood_p99:.2f} ms over {len(result['latencies_ms'])} reads (max {limit:.1f}), "
        f"errors {result['errors']}; {elapsed:.1f} s"
    )
    if not rss_ok:
        summary += " [RSS OVER BUDGET]"
    if not p99_ok:
        summary += f" [BYSTANDER NOT SERVED: statuses {result['statuses']}]"
    if extra_lines:
        # One flood, several listeners (the slowloris): a line for each, the shared figures on each.
        for sub_listener, sub_caller, sub_ok, sub_figures in extra_lines(ok):
            if not ok:
                sub_figures += f"; {figures}"
            cell(sub_listener, sub_caller, sub_ok and ok and rss_ok and p99_ok, f"{sub_figures}; {summary}")
    else:
        cell(listener, caller, ok and rss_ok and p99_ok, f"{figures}; {summary}")
    if release is not None:
        await release()


async def admission(ctx):
    reply = await call(ctx.server.http, "GET", "/v1/status", bearer(ctx.operator))
    return (reply.json or {}).get("admission", {})


async def settle(ctx, kind, bound_s=20):
    """Waits (bounded) until the node holds no `kind` slots, after a flood's connections are
    closed; returns what it still holds."""
    deadline = time.monotonic() + bound_s
    while True:
        held = (await admission(ctx)).get("held", {}).get(kind, 0)
        if held == 0 or time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.2)


async def bounded_gather(limit, coros):
    semaphore = asyncio.Semaphore(limit)

    async def run(coro):
        async with semaphore:
            return await coro

    return await asyncio.gather(*(run(c) for c in coros), return_exceptions=True)


# ---------------------------------------------------------------------------------------
# Setup.


class Ctx:
    pass


async def setup(muster, work):
    ctx = Ctx()
    ctx.work = work
    ctx.server = Server(muster, work)
    for _ in range(100):
        try:
            status = (await call(ctx.server.http, "GET", "/v1/status")).json
            # Ready, leading, and at its build's registry format (leases bound to a service).
            format_ = (status or {}).get("format") or {}
            if status and status.get("ready") and status.get("leader") == 1 \
                    and format_.get("cluster") == format_.get("node"):
                break
        except OSError:
            pass
        await asyncio.sleep(0.1)
    else:
        ctx.server.fail("the one-node cluster did not elect itself and raise its format within 10 s")
    env = dict(os.environ, MUSTER_SERVER=f"http://127.0.0.1:{ctx.server.http}")
    env.pop("MUSTER_TOKEN", None)
    bootstrap = subprocess.run([muster, "acl", "bootstrap", "--json"], env=env, capture_output=True, text=True,
                               timeout=30)
    if bootstrap.returncode != 0:
        ctx.server.fail(f"muster acl bootstrap failed: {bootstrap.stdout} {bootstrap.stderr}")
    ctx.operator = json.loads(bootstrap.stdout)["secret"]

    async def token(tenant, rule):
        body = json.dumps({"tenant": tenant, "allow": [rule]}).encode()
        reply = await call(ctx.server.http, "POST", "/v1/acl/tokens", bearer(ctx.operator), body)
        if reply.status not in (200, 201):
            ctx.server.fail(f"token create: {reply}")
        return reply.json["secret"]

    # One principal per flood, so no flood spends another's budget.
    ctx.one = await token("acme", "prod/x=read,watch")  # the one-service token
    ctx.all = await token("acme", "prod/*=read,watch")
    ctx.globex = await token("globex", "prod/*=read,watch")  # another tenant's
    ctx.live = await token("acme", "prod/x=read,watch")
    ctx.watcher = await token("acme", "prod/x=read,watch")
    ctx.parker = await token("acme", "prod/x=read,watch")
    # Who may do what (SPEC L4, L5): an app's token, and a renew-only token of another service.
    ctx.app_x = await token("acme", "prod/x=read,set_state")
    ctx.renew_y = await token("acme", "prod/y=renew,deregister")
    for (tenant, namespace, service, instance), ip in SERVICES.items():
        body = json.dumps({"incarnation": 1, "endpoint": {"addresses": [{"ip": ip}],
                                                          "ports": [{"name": "http", "port": 8080}]}}).encode()
        reply = await call(ctx.server.http, "PUT", f"/v1/registry/{tenant}/{namespace}/{service}/{instance}",
                           bearer(ctx.operator), body)
        if reply.status not in (200, 201):
            ctx.server.fail(f"register {service}: {reply}")
    # A lease of prod/x, long enough to outlive the run.
    body = json.dumps({"ttl_ms": 3_600_000, "service": "prod/x"}).encode()
    reply = await call(ctx.server.http, "POST", "/v1/leases/acme", bearer(ctx.operator), body)
    if reply.status != 200:
        ctx.server.fail(f"lease grant: {reply}")
    ctx.lease_x = reply.json["lease"]["id"]
    return ctx


async def restart(ctx, muster, work):
    """A fresh server in a new data directory, set up as the first."""
    ctx.server.stop()
    fresh = tempfile.mkdtemp(dir=work)
    return await setup(muster, fresh)


async def revision(ctx):
    return (await call(ctx.server.http, "GET", "/v1/status")).json["revision"]


# ---------------------------------------------------------------------------------------
# The callers without a flood: refusals, isolation, the one-service token.


async def callers(ctx):
    s = ctx.server
    x, y, ns = "/v1/registry/acme/prod/x", "/v1/registry/acme/prod/y", "/v1/registry/acme/prod"
    body = json.dumps({"incarnation": 2, "endpoint": {"addresses": [{"ip": "10.0.0.66"}],
                                                      "ports": [{"name": "http", "port": 1}]}}).encode()
    rev0 = await revision(ctx)

    # HTTP API (native reads and writes).
    got = [await call(s.http, "GET", x), await call(s.http, "PUT", x + "/x-0", body=body),
           await call(s.http, "GET", ns)]
    cell("http-api", "no token", all((r.status, r.code) == (401, "unauthenticated") for r in got),
         f"GET x, PUT x/x-0, GET prod -> {got} (expect 401 unauthenticated)")
    got = [await call(s.http, "GET", x, bearer(ctx.globex)), await call(s.http, "GET", ns, bearer(ctx.globex)),
           await call(s.http, "PUT", x + "/x-0", bearer(ctx.globex), body)]
    text = " ".join(r.text for r in got)
    cell("http-api", "other tenant's token",
         all((r.status, r.code) == (403, "permission_denied") for r in got) and not leaks(text),
         f"GET x, GET prod, PUT x/x-0 -> {got} (expect 403 permission_denied, naming nothing unasked: "
         f"leaks {leaks(text)})")
    rx, ry = await call(s.http, "GET", x, bearer(ctx.one)), await call(s.http, "GET", y, bearer(ctx.one))
    rnope = await call(s.http, "GET", "/v1/registry/acme/prod/nope", bearer(ctx.one))
    rns = await call(s.http, "GET", ns, bearer(ctx.one))
    rput = await call(s.http, "PUT", x + "/x-0", bearer(ctx.one), body)
    listed = sorted(svc["service"] for svc in (rns.json or {}).get("services", []))
    same = ry.text.replace("prod/y", "prod/?") == rnope.text.replace("prod/nope", "prod/?")
    ok = (rx.status == 200 and (rx.json or {}).get("total") == 1 and (ry.status, ry.code) == (403, "permission_denied")
          and same and listed == ["x"] and (rput.status, rput.code) == (403, "permission_denied"))
    cell("http-api", "one-service token", ok,
         f"GET x -> {rx.status} total {(rx.json or {}).get('total')}; GET y -> {ry}; y refused as a missing "
         f"service is: {same}; GET prod lists {listed}; PUT x/x-0 -> {rput} (read,watch only)")

    # Watch.
    got = [(await open_stream(s.http, "/v1/watch/acme/prod/x")).reply]
    cell("watch", "no token", all((r.status, r.code) == (401, "unauthenticated") for r in got),
         f"GET /v1/watch/acme/prod/x -> {got} (expect 401 unauthenticated)")
    got = [(await open_stream(s.http, "/v1/watch/acme/prod/x", bearer(ctx.globex))).reply,
           (await open_stream(s.http, "/v1/watch/acme/prod", bearer(ctx.globex))).reply]
    text = " ".join(r.text for r in got)
    cell("watch", "other tenant's token",
         all((r.status, r.code) == (403, "permission_denied") for r in got) and not leaks(text),
         f"watch x, watch prod -> {got} (expect 403 permission_denied; leaks {leaks(text)})")
    wx = await open_stream(s.http, "/v1/watch/acme/prod/x", bearer(ctx.one))
    wns = await open_stream(s.http, "/v1/watch/acme/prod", bearer(ctx.one))
    wy = await open_stream(s.http, "/v1/watch/acme/prod/y", bearer(ctx.one))
    first_x, first_ns = wx.reply.json or {}, wns.reply.json or {}
    ns_text = wns.reply.text
    wx.close(), wns.close()
    ok = (wx.reply.status == 200 and first_x.get("type") == "snapshot" and "10.0.0.1" in wx.reply.text
          and wns.reply.status == 200 and "10.0.0.2" not in ns_text and not leaks(ns_text)
          and (wy.reply.status, wy.reply.code) == (403, "permission_denied"))
    cell("watch", "one-service token", ok,
         f"watch x -> {wx.reply.status} first frame {first_x.get('type')} with x's address: "
         f"{'10.0.0.1' in wx.reply.text}; watch prod -> {wns.reply.status} {first_ns.get('type')} without y: "
         f"{'10.0.0.2' not in ns_text}; watch y -> {wy.reply}")

    # Dashboard live views.
    live = "/v1/overview?stream=true"
    got = [(await open_stream(s.http, live)).reply]
    cell("dashboard-live", "no token", all((r.status, r.code) == (401, "unauthenticated") for r in got),
         f"GET {live} -> {got} (expect 401 unauthenticated)")
    g = await open_stream(s.http, live, bearer(ctx.globex))
    tenants = sorted({n["tenant"] for n in (g.reply.json or {}).get("namespaces", [])})
    g.close()
    cell("dashboard-live", "other tenant's token",
         g.reply.status == 200 and tenants == ["globex"] and "acme" not in g.reply.text,
         f"-> {g.reply.status}, first line shows tenants {tenants} (expect only globex: acme invisible)")
    o = await open_stream(s.http, live, bearer(ctx.one))
    services = sorted(svc["service"] for n in (o.reply.json or {}).get("namespaces", []) for svc in n["services"])
    o.close()
    cell("dashboard-live", "one-service token", o.reply.status == 200 and services == ["x"],
         f"-> {o.reply.status}, first line lists {services} (expect x only: y invisible)")

    # Consul.
    c = s.consul
    hx = "/v1/health/service/x?partition=acme&ns=prod"
    hy = "/v1/health/service/y?partition=acme&ns=prod"
    filtered = lambda r: r.headers.get("x-consul-results-filtered-by-acl") == "true"  # noqa: E731
    r1 = await call(c, "GET", hx)
    r2 = await call(c, "GET", hx, consul_token("made-up-" + "0" * 56))
    r3 = await call(c, "PUT", "/v1/agent/service/register?partition=acme&ns=prod",
                    body=json.dumps({"Name": "x", "ID": "evil", "Port": 1}).encode())
    ok = (r1.status == 200 and r1.json == [] and filtered(r1) and (r2.status, r2.text) == (403, "ACL not found")
          and (r3.status, r3.text) == (403, "Permission denied"))
    cell("consul", "no token", ok,
         f"health x -> {r1.status} {r1.text} filtered-by-acl {filtered(r1)}; a made-up token -> {r2.status} "
         f"{r2.text!r}; agent register -> {r3.status} {r3.text!r}")
    r1 = await call(c, "GET", hx, consul_token(ctx.globex))
    r2 = await call(c, "PUT", "/v1/agent/service/deregister/x-0?partition=acme&ns=prod", consul_token(ctx.globex))
    r3 = await call(c, "GET", "/v1/catalog/services?partition=acme&ns=prod", consul_token(ctx.globex))
    text = r1.text + r2.text + r3.text
    ok = (r1.status == 200 and r1.json == [] and filtered(r1) and (r2.status, r2.text) == (403, "Permission denied")
          and r3.status == 200 and not leaks(text) and '"y"' not in r3.text)
    cell("consul", "other tenant's token", ok,
         f"health x -> {r1.status} {r1.text} filtered {filtered(r1)}; deregister x-0 -> {r2.status} {r2.text!r}; "
         f"catalog services -> {r3.status} {r3.text[:60]} (leaks {leaks(text)})")
    r1, r2 = await call(c, "GET", hx, consul_token(ctx.one)), await call(c, "GET", hy, consul_token(ctx.one))
    r3 = await call(c, "PUT", "/v1/agent/service/deregister/x-0?partition=acme&ns=prod", consul_token(ctx.one))
    ok = (r1.status == 200 and isinstance(r1.json, list) and len(r1.json) == 1 and r2.status == 200
          and r2.json == [] and filtered(r2) and (r3.status, r3.text) == (403, "Permission denied"))
    cell("consul", "one-service token", ok,
         f"health x -> {r1.status} {len(r1.json or [])} entries; health y -> {r2.status} {r2.text} filtered "
         f"{filtered(r2)}; deregister x-0 -> {r3.status} {r3.text!r} (read,watch only)")

    # (e) An unauthenticated Consul agent deregister: 403, naming no service, changing nothing.
    r1 = await call(c, "PUT", "/v1/agent/service/deregister/db-0?partition=acme&ns=prod")
    r2 = await call(c, "PUT", "/v1/agent/service/deregister/x-0?partition=acme&ns=prod")
    ok = all((r.status, r.text) == (403, "Permission denied") for r in (r1, r2))
    cell("consul", "no token: deregister (e)", ok and "db-0" not in r1.text and "x" not in r2.text.lower().split(),
         f"PUT /v1/agent/service/deregister/db-0 -> {r1.status} {r1.text!r}; .../x-0 (exists) -> {r2.status} "
         f"{r2.text!r}: the same answer, no name")

    # xDS.
    a = s.xds_addr
    o1 = await xds_once(a, None, "acme", ["x.prod"])
    o2 = await xds_once(a, "made-up-" + "0" * 56, "acme", ["x.prod"])
    cell("xds", "no token", o1[0] == "UNAUTHENTICATED" and o2[0] == "UNAUTHENTICATED",
         f"ADS stream -> {o1[0]} {o1[1]!r}; a made-up token -> {o2[0]} {o2[1]!r}")
    o1 = await xds_once(a, ctx.globex, "acme", ["x.prod", "y.prod"])
    o2 = await xds_once(a, ctx.globex, None, ["x.prod", "y.prod"])
    seen = endpoints_of(o2[1]) if o2[0] == "response" else None
    ok = (o1[0] == "PERMISSION_DENIED" and not leaks(str(o1[1])) and o2[0] == "response" and seen == {})
    cell("xds", "other tenant's token", ok,
         f"node tenant acme -> {o1[0]} {o1[1]!r}; no node tenant (its own) -> {o2[0]} with {seen} "
         "(expect none of acme's)")
    o1 = await xds_once(a, ctx.one, None, ["x.prod", "y.prod", "ledger-hidden.prod"])
    seen = endpoints_of(o1[1]) if o1[0] == "response" else None
    cell("xds", "one-service token", seen == {"x.prod": ["10.0.0.1"]},
         f"EDS x.prod, y.prod, ledger-hidden.prod -> {o1[0]} {seen} (expect x only: the others neither "
         "watched nor answered)")

    # Cluster listener: the cluster secret, never a token.
    k = ctx.server.cluster
    append = json.dumps({}).encode()
    r1 = await call(k, "POST", "/raft/append", body=append)
    r2 = await call(k, "POST", "/raft/append", [("x-muster-cluster-secret", "not-the-secret-xxxxxxxx")], append)
    r3 = await call(k, "POST", "/raft/append", bearer(ctx.operator), append)
    ok = all((r.status, r.code) == (401, "unauthenticated") for r in (r1, r2, r3))
    cell("cluster", "no/wrong secret, a token", ok,
         f"POST /raft/append: no secret -> {r1}; wrong secret -> {r2}; the operator's token -> {r3}")
    not_applicable("cluster", "other tenant's token", "tokens carry no authority here (the operator's is refused above)")
    not_applicable("cluster", "one-service token", "tokens carry no authority here (the operator's is refused above)")

    # DNS: open by design, one tenant's view.
    answer = dns_udp(s.dns, "x.prod.muster")
    hidden = dns_udp(s.dns, "vault-hidden.prod.muster")
    cell("dns", "any caller (open)", answer == ["10.0.0.1"] and not hidden,
         f"x.prod.muster A -> {answer}; another tenant's vault-hidden.prod.muster -> {hidden} (the view is acme's)")
    for caller in ("no token", "other tenant's token", "one-service token"):
        not_applicable("dns", caller, "DNS takes no token: open by design, one tenant's view (SPEC D2, S3)")

    # Who may do what (SPEC L4, L5, S2): a role is the token's, a lease its service's, the
    # metrics a right of their own.
    ready = json.dumps({"incarnation": 1, "state": "ready", "reason": "up"}).encode()
    widened = await call(s.http, "PUT", x + "/x-0/serving", bearer(ctx.app_x) + [("X-Muster-Actor", "owner")], ready)
    cell("http-api", "app token speaking as the owner", (widened.status, widened.code) == (403, "permission_denied"),
         f"PUT x/x-0/serving with X-Muster-Actor: owner -> {widened} (expect 403 permission_denied)")
    lease = f"/v1/leases/acme/{ctx.lease_x}"
    got = [await call(s.http, "PUT", lease + "/renew", bearer(ctx.renew_y)),
           await call(s.http, "DELETE", lease, bearer(ctx.renew_y))]
    cell("http-api", "another service's token on a service's lease",
         all((r.status, r.code) == (403, "permission_denied") for r in got),
         f"renew, revoke prod/x's lease with a prod/y token -> {got} (expect 403 permission_denied)")
    got = [await call(s.http, "GET", "/v1/metrics", bearer(t)) for t in (ctx.one, ctx.all)]
    cell("http-api", "metrics without the metrics right",
         all((r.status, r.code) == (403, "permission_denied") for r in got),
         f"GET /v1/metrics with read tokens -> {got} (expect 403 permission_denied)")

    rev1 = await revision(ctx)
    cell("all", "every refusal above", rev1 == rev0, f"registry revision {rev0} -> {rev1}: nothing changed")


# ---------------------------------------------------------------------------------------
# The floods.


async def flood_xds(ctx, label, token, expect_exhausted, per_stream=10_000):
    """(a), (b): 100 ADS streams on one connection (per HOSTILE_SCALE), each subscribing to
    10,000 EDS names (crates/xds/src/server/state.rs MAX_NAMES, the most one stream may);
    (a+) the same with 10,001, one past it: every stream is refused, and refusing must not
    cost memory either."""
    names = [f"svc-{j}.prod" for j in range(per_stream)]
    request = discovery_pb2.DiscoveryRequest(node=xds_node(f"hostile-{label}", "acme"), type_url=EDS,
                                             resource_names=names)
    channels = [xds_channel(ctx.server.xds_addr) for _ in range(SCALE)]
    rpcs = []

    async def one(stub):
        rpc, outcome, detail = await xds_stream(stub, token, request, timeout=60)
        rpcs.append(rpc)
        return outcome, detail

    async def flood():
        stubs = [ads_pb2_grpc.AggregatedDiscoveryServiceStub(ch) for ch in channels]
        outcomes = await asyncio.gather(*(one(stub) for stub in stubs for _ in range(100)))
        counts = {}
        for outcome, _ in outcomes:
            counts[outcome] = counts.get(outcome, 0) + 1
        exhausted = [d for o, d in outcomes if o == "RESOURCE_EXHAUSTED"]
        # A full run (HOSTILE_SCALE > 2) also meets max_watches_per_principal (streams).
        budget = "max_names_per_principal" if per_stream <= 10_000 else "more than 10000"
        named = all(budget in d or "max_watches_per_principal" in d for d in exhausted)
        named = named and (not exhausted or any(budget in d for d in exhausted))
        answered = [d for o, d in outcomes if o == "response"]
        leaked = sum(len(r.resources) for r in answered)
        held = (await admission(ctx)).get("xds_names", "?")
        # The node keeps answering: the operator's own ADS stream on another connection.
        by = await xds_once(ctx.server.xds_addr, ctx.operator, "acme", ["x.prod"])
        by_seen = endpoints_of(by[1]) if by[0] == "response" else by
        ok = (set(counts) <= {"response", "RESOURCE_EXHAUSTED"} and named and leaked == 0
              and by_seen == {"x.prod": ["10.0.0.1"]})
        if expect_exhausted:
            ok = ok and len(exhausted) > 0
        if per_stream > 10_000:
            ok = ok and len(exhausted) == len(outcomes)
        sample = exhausted[0][:110] + "..." if exhausted else "none"
        return ok, (f"{100 * SCALE} streams x {per_stream:,} names on {SCALE} connection(s): {counts}, names held {held}, "
                    f"resources sent {leaked}; RESOURCE_EXHAUSTED names the budget: {named} ({sample!r}); "
                    f"operator's ADS stream meanwhile -> {by_seen}")

    async def release():
        for rpc in rpcs:
            rpc.cancel()
        for ch in channels:
            await ch.close()
        await settle(ctx, "xds")

    return flood, release


async def flood_live(ctx):
    """(c) 1,100 live views from one tenant token: 64 open, the rest 429 too_many_watches;
    the operator's own still opens."""
    held = []
    attempts = 1100 * SCALE

    async def one():
        stream = await open_stream(ctx.server.http, "/v1/overview?stream=true", bearer(ctx.live), timeout=30)
        if stream.writer is not None:
            held.append(stream)
        return stream.reply

    async def flood():
        replies = await bounded_gather(100, [one() for _ in range(attempts)])
        opened = sum(1 for r in replies if isinstance(r, Reply) and r.status == 200)
        refused = [r for r in replies if isinstance(r, Reply) and (r.status, r.code) == (429, "too_many_watches")]
        named = all("live views" in r.text and f"({LIVE_PER_PRINCIPAL})" in r.text for r in refused)
        other = attempts - opened - len(refused)
        operator = await open_stream(ctx.server.http, "/v1/overview?stream=true", bearer(ctx.operator))
        operator.close()
        ok = (opened == LIVE_PER_PRINCIPAL and len(refused) == attempts - LIVE_PER_PRINCIPAL and named
              and operator.reply.status == 200 and "acme" in operator.reply.text)
        return ok, (f"{attempts} streams: {opened} open (max {LIVE_PER_PRINCIPAL}), {len(refused)} x 429 "
                    f"too_many_watches naming the live-view limit: {named}, {other} other; "
                    f"the operator's live view -> {operator.reply.status}")

    async def release():
        for stream in held:
            stream.close()
        await settle(ctx, "live")

    return flood, release


async def flood_watch(ctx):
    """Watch streams from one principal past max_watches_per_principal."""
    held = []
    attempts = (MAX_WATCHES_PER_PRINCIPAL + 100) * SCALE

    async def one():
        stream = await open_stream(ctx.server.http, "/v1/watch/acme/prod/x", bearer(ctx.watcher), timeout=30)
        if stream.writer is not None:
            held.append(stream)
        return stream.reply

    async def flood():
        replies = await bounded_gather(100, [one() for _ in range(attempts)])
        opened = sum(1 for r in replies if isinstance(r, Reply) and r.status == 200)
        refused = [r for r in replies if isinstance(r, Reply) and (r.status, r.code) == (429, "too_many_watches")]
        named = all("max_watches_per_principal" in r.text for r in refused)
        other = await open_stream(ctx.server.http, "/v1/watch/acme/prod/x", bearer(ctx.all))
        other.close()
        ok = (opened == MAX_WATCHES_PER_PRINCIPAL and len(refused) == attempts - opened and named
              and other.reply.status == 200)
        return ok, (f"{attempts} watches: {opened} open (max {MAX_WATCHES_PER_PRINCIPAL}), {len(refused)} x 429 "
                    f"too_many_watches naming the budget: {named}; another principal's watch -> {other.reply.status}")

    async def release():
        for stream in held:
            stream.close()
        await settle(ctx, "watch")

    return flood, release


async def flood_parked(ctx):
    """(f) Native and Consul blocking queries from one principal past
    max_watches_per_principal: 429 too_many_watches; another principal still served."""
    native = "/v1/registry/acme/prod/x?index=18446744073709551000&wait=60s"
    consul = "/v1/health/service/x?partition=acme&ns=prod&index=18446744073709551000&wait=60s"
    parked = []
    figures = {}

    async def park(port, path, headers, n):
        batch = [Parked(port, path, headers) for _ in range(n)]
        parked.extend(batch)
        await bounded_gather(100, [p.send() for p in batch])
        return batch

    async def flood():
        first = MAX_WATCHES_PER_PRINCIPAL // 2
        batch1 = await park(ctx.server.http, native, bearer(ctx.parker), first)
        await asyncio.sleep(1.0)
        early = sum(1 for p in batch1 if p.reply is not None)
        # The rest of the budget and more, through the Consul listener.
        more = first + 50 * SCALE
        batch2 = await park(ctx.server.consul, consul, consul_token(ctx.parker), more)
        batch3 = await park(ctx.server.http, native, bearer(ctx.parker), 50 * SCALE)
        await asyncio.sleep(1.5)
        c_refused = [p.reply for p in batch2 if p.reply is not None]
        n_refused = [p.reply for p in batch3 if p.reply is not None]
        c_ok = all(r.status == 429 and r.text.startswith("too_many_watches") for r in c_refused)
        n_ok = all((r.status, r.code) == (429, "too_many_watches") for r in n_refused)
        still = sum(1 for p in parked if p.reply is None)
        # Another principal: its own blocking queries park, its plain read answers.
        other = await park(ctx.server.http, native, bearer(ctx.all), 2)
        other_c = await park(ctx.server.consul, consul, consul_token(ctx.all), 2)
        await asyncio.sleep(1.0)
        other_parked = sum(1 for p in other + other_c if p.reply is None)
        read = await call(ctx.server.http, "GET", "/v1/registry/acme/prod/x", bearer(ctx.all))
        held = (await admission(ctx)).get("held", {}).get("parked")
        expected_refused = more + 50 * SCALE - (MAX_WATCHES_PER_PRINCIPAL - first)
        ok = (early == 0 and c_ok and n_ok and len(c_refused) + len(n_refused) == expected_refused
              and len(n_refused) == 50 * SCALE and still == MAX_WATCHES_PER_PRINCIPAL and other_parked == 4
              and read.status == 200)
        sample = (c_refused or n_refused or [Reply(0, {}, b"none")])[0].text[:90]
        figures["held"] = held
        return ok, (f"{first} native parked, then {more} Consul and {50 * SCALE} native: {still} parked "
                    f"(max {MAX_WATCHES_PER_PRINCIPAL}), refused 429 too_many_watches: Consul {len(c_refused)} "
                    f"({c_ok}), native {len(n_refused)} ({n_ok}) e.g. {sample!r}; another principal: "
                    f"{other_parked}/4 queries parked, plain read -> {read.status}; node holds {held} parked")

    async def release():
        for p in parked:
            p.close()
        await settle(ctx, "parked")

    return flood, release


async def flood_audit(ctx):
    """(d) 120 requests with made-up tokens at every listener: every mutation made before is
    still in GET /v1/audit, every refusal as expected, nothing changed."""
    s = ctx.server

    async def audit_records():
        reply = await call(s.http, "GET", "/v1/audit?limit=1000", bearer(ctx.operator))
        return reply.json

    async def flood():
        before = await audit_records()
        mutations = {r["seq"] for r in before["records"] if r["kind"] == "mutation"}
        rev0 = await revision(ctx)
        n = 120 * SCALE
        channel = xds_channel(s.xds_addr)
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        xreq = discovery_pb2.DiscoveryRequest(node=xds_node("hostile-d", "acme"), type_url=EDS,
                                              resource_names=["x.prod"])
        body = json.dumps({"incarnation": 1, "endpoint": {"addresses": [{"ip": "10.6.6.6"}],
                                                          "ports": [{"name": "http", "port": 1}]}}).encode()

        async def one(i):
            fake = "%064x" % random.getrandbits(256)
            kind = i % 6
            if kind == 0:
                r = await call(s.http, "PUT", f"/v1/registry/acme/prod/evil-{i}/e-0", bearer(fake), body)
                return "native PUT", (r.status, r.code) == (401, "unauthenticated")
            if kind == 1:
                r = await call(s.http, "DELETE", "/v1/registry/acme/prod/x/x-0", bearer(fake))
                return "native DELETE", (r.status, r.code) == (401, "unauthenticated")
            if kind == 2:
                r = (await open_stream(s.http, "/v1/watch/acme/prod/x", bearer(fake))).reply
                return "watch", (r.status, r.code) == (401, "unauthenticated")
            if kind == 3:
                r = await call(s.consul, "PUT", "/v1/agent/service/register?partition=acme&ns=prod",
                               consul_token(fake), json.dumps({"Name": f"evil-{i}", "Port": 1}).encode())
                return "Consul register", (r.status, r.text) == (403, "ACL not found")
            if kind == 4:
                r = await call(s.consul, "PUT", "/v1/agent/service/deregister/x-0?partition=acme&ns=prod",
                               consul_token(fake))
                return "Consul deregister", (r.status, r.text) == (403, "ACL not found")
            rpc, outcome, _ = await xds_stream(stub, fake, xreq, timeout=10)
            rpc.cancel()
            return f"xDS {outcome}", outcome == "UNAUTHENTICATED"

        results = await bounded_gather(20, [one(i) for i in range(n)])
        await channel.close()
        wrong = {}
        for result in results:
            if isinstance(result, BaseException):
                wrong[repr(result)[:60]] = wrong.get(repr(result)[:60], 0) + 1
            elif not result[1]:
                wrong[result[0]] = wrong.get(result[0], 0) + 1
        after = await audit_records()
        kept = {r["seq"] for r in after["records"] if r["kind"] == "mutation"}
        denials = sum(r.get("count", 1) for r in after["records"]
                      if r["kind"] == "denial" and r["outcome"] == "denied:unauthenticated")
        rev1 = await revision(ctx)
        ok = mutations <= kept and not wrong and rev1 == rev0 and after.get("evicted", 0) == 0 and denials > 0
        return ok, (f"{n} made-up tokens (native PUT/DELETE, watch, Consul register/deregister, xDS): refused as "
                    f"expected but {wrong or 'none'}; mutations before {len(mutations)}, still listed "
                    f"{len(mutations & kept)} (retention {after.get('retention')}, evicted {after.get('evicted')}); "
                    f"denials kept apart ({after.get('denial_retention')}, evicted {after.get('denials_evicted')}), "
                    f"unauthenticated counted {denials}; revision {rev0} -> {rev1}")

    return flood, None


async def flood_cluster(ctx):
    """Wrong-secret peers announcing 32 MiB appends: refused at once, bodies never read
    (crates/server/tests/it/hostile.rs does one). First paced within the listener's
    connection budget (64, crates/http/src/descriptors.rs CLUSTER_CONNECTIONS): each is
    answered 401; then a burst past it: each is answered 401, or 503 too_many_connections, or
    closed at once (past the refusals in flight), and none is held; the budget comes back."""
    head = ("POST /raft/append HTTP/1.1\r\nhost: 127.0.0.1\r\nx-muster-cluster-secret: not-the-secret-xxxxx\r\n"
            "content-type: application/json\r\ncontent-length: 33554432\r\n\r\n{").encode()
    n = 200 * SCALE

    async def one():
        reader, writer = await asyncio.open_connection("127.0.0.1", ctx.server.cluster)
        t0 = time.monotonic()
        try:
            writer.write(head)
            await writer.drain()
            data = b""
            while True:  # to the server's close: it must not wait for the body
                chunk = await asyncio.wait_for(reader.read(4096), 10)
                if not chunk:
                    break
                data += chunk
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
        if data.startswith(b"HTTP/1.1 401") and b'"unauthenticated"' in data:
            what = "401"
        elif data.startswith(b"HTTP/1.1 503") and b'"too_many_connections"' in data:
            what = "503"
        else:
            what = "closed" if not data else data[:20].decode("latin1")
        return what, time.monotonic() - t0

    def tally(results):
        counts, slowest = {}, 0.0
        for result in results:
            what, took = result if isinstance(result, tuple) else (repr(result)[:40], 0.0)
            counts[what] = counts.get(what, 0) + 1
            slowest = max(slowest, took)
        return counts, slowest

    async def flood():
        paced, paced_slowest = tally(await bounded_gather(16, [one() for _ in range(n)]))
        burst, burst_slowest = tally(await bounded_gather(n, [one() for _ in range(n)]))
        await asyncio.sleep(0.5)
        after = (await one())[0]
        ok = (paced == {"401": n} and set(burst) <= {"401", "503", "closed"} and burst.get("401", 0) > 0
              and max(paced_slowest, burst_slowest) < 2 and after == "401")
        return ok, (f"{n} wrong-secret appends announcing 32 MiB, 16 at a time: {paced} (slowest "
                    f"{paced_slowest * 1000:.0f} ms); {n} at once: {burst} (slowest {burst_slowest * 1000:.0f} ms); "
                    f"afterwards -> {after}")

    return flood, None


async def flood_dns(ctx):
    """A UDP query flood: the bystanders (HTTP reads, a resolver's queries) stay served."""
    n = 20_000 * SCALE
    window = 200
    port = ctx.server.dns

    class Flood(asyncio.DatagramProtocol):
        def __init__(self):
            self.outstanding, self.answered, self.wake = 0, 0, asyncio.Event()

        def datagram_received(self, data, addr):
            self.outstanding -= 1
            self.answered += 1
            self.wake.set()

    async def flood():
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_datagram_endpoint(Flood, remote_addr=("127.0.0.1", port))
        sent, started = 0, time.monotonic()
        deadline = started + 20
        resolver = {"answered": 0, "asked": 0}

        def resolve():  # a resolver beside the flood, on a thread
            for _ in range(50):
                resolver["asked"] += 1
                if dns_udp(port, "x.prod.muster", timeout=1.0, tries=2) == ["10.0.0.1"]:
                    resolver["answered"] += 1
                time.sleep(0.02)

        thread = threading.Thread(target=resolve)
        thread.start()
        while sent < n and time.monotonic() < deadline:
            if proto.outstanding >= window:
                proto.wake.clear()
                try:
                    await asyncio.wait_for(proto.wake.wait(), 0.5)
                except asyncio.TimeoutError:
                    proto.outstanding = 0  # lost datagrams: go on
                continue
            transport.sendto(dns_query(sent & 0xFFFF, "x.prod.muster"))
            proto.outstanding += 1
            sent += 1
        await asyncio.sleep(0.5)
        elapsed = time.monotonic() - started
        transport.close()
        await asyncio.to_thread(thread.join)
        ok = resolver["answered"] == resolver["asked"]
        return ok, (f"{sent} queries in {elapsed:.1f} s ({sent / elapsed:.0f}/s), {proto.answered} answered; "
                    f"a resolver beside it: {resolver['answered']}/{resolver['asked']} answered")

    return flood, None


async def flood_slowloris(ctx):
    """Slow heads at every TCP listener: each connection is cut by its listener's timeout."""
    s = ctx.server
    http_head = b"GET /v1/registry/acme/prod/x HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"a" * 100
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + b"\x00" * 100
    query = dns_query(9, "x.prod.muster")
    dns_head = struct.pack(">H", len(query)) + query + b"\x00" * 100
    n = 100 * SCALE
    # The cluster listener holds 64 connections (descriptors.rs CLUSTER_CONNECTIONS): 48 slow
    # ones leave room for the probe, so the cell judges the timeout, not that budget.
    listeners = [
        ("http-api", s.http, http_head, n, HEADER_TIMEOUT_S, "[limits.http] header_read_timeout_ms"),
        ("consul", s.consul, http_head, n, HEADER_TIMEOUT_S, "[limits.http] header_read_timeout_ms"),
        ("cluster", s.cluster, http_head, 48, HEADER_TIMEOUT_S, "[limits.cluster] header_read_timeout_ms"),
        ("xds", s.xds, preface, n, HEADER_TIMEOUT_S, "[limits.http] header_read_timeout_ms"),
        ("dns", s.dns, dns_head, n, DNS_TCP_IDLE_S, "DNS TCP_IDLE"),
    ]
    bound_s = max(timeout for *_, timeout, _ in listeners) + 5
    outcomes = {}
    probes = {}
    writers = []

    async def slow(name, port, payload, started):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as error:
            return None, f"connect {error!r}"
        writers.append(writer)
        t0 = time.monotonic()
        answered = b""
        for byte in payload:
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except (ConnectionError, OSError):
                return time.monotonic() - t0, answered[:12].decode("latin1") or "reset"
            try:
                data = await asyncio.wait_for(reader.read(4096), 1.0)
                if not data:
                    return time.monotonic() - t0, answered[:12].decode("latin1") or "closed"
                answered += data
            except asyncio.TimeoutError:
                pass
            except (ConnectionError, OSError):
                return time.monotonic() - t0, answered[:12].decode("latin1") or "reset"
            if time.monotonic() - started > bound_s:
                return None, "still open"
        return None, "payload sent"

    async def probe_all():
        # Mid-flood, while every slow connection is open: each listener still serves.
        await asyncio.sleep(2.0)
        r = await call(s.consul, "GET", "/v1/health/service/x?partition=acme&ns=prod", consul_token(ctx.operator))
        probes["consul"] = r.status == 200 and len(r.json or []) == 1
        probes["dns"] = await asyncio.to_thread(dns_tcp, s.dns, "x.prod.muster") == ["10.0.0.1"]
        by = await xds_once(s.xds_addr, ctx.operator, "acme", ["x.prod"])
        probes["xds"] = by[0] == "response" and endpoints_of(by[1]) == {"x.prod": ["10.0.0.1"]}
        r = await call(s.cluster, "POST", "/raft/append", [("x-muster-cluster-secret", "wrong-wrong-wrong")], b"{}")
        probes["cluster"] = r.status == 401
        probes["http-api"] = True  # the bystander's reads

    async def flood():
        started = time.monotonic()
        tasks = {name: [asyncio.ensure_future(slow(name, port, payload, started)) for _ in range(count)]
                 for name, port, payload, count, _, _ in listeners}
        await probe_all()
        for name, futures in tasks.items():
            outcomes[name] = await asyncio.gather(*futures)
        return True, ""

    def lines(_):
        for name, _, _, count, timeout, setting in listeners:
            results = outcomes.get(name, [])
            closed = [t for t, _ in results if t is not None]
            how = {}
            for t, what in results:
                key = what.split("\r")[0] if t is not None else what
                how[key] = how.get(key, 0) + 1
            bound = timeout + 2.5
            ok = len(closed) == count and max(closed, default=0) <= bound and probes.get(name, False)
            span = f"{min(closed):.1f}-{max(closed):.1f} s" if closed else "-"
            yield (name, "slowloris", ok,
                   f"{count} heads at 1 byte/s: {len(closed)} cut in {span} (bound {bound:.1f} s: {setting} "
                   f"{timeout:.0f} s), ends {how}; served meanwhile: {probes.get(name)}")

    async def release():
        for writer in writers:
            writer.close()

    return flood, release, lines


# ---------------------------------------------------------------------------------------


async def main(muster):
    # A stream the server refuses at once leaves grpc's request-consuming task pending until
    # the loop closes, and asyncio says so at collection: noise, not a finding.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hostile-") as work:
        ctx = await setup(muster, work)
        try:
            print(f"hostile: muster serve pid {ctx.server.pid} (http {ctx.server.http}, consul {ctx.server.consul}, "
                  f"xds {ctx.server.xds}, cluster {ctx.server.cluster}, dns {ctx.server.dns}), "
                  f"HOSTILE_SCALE={SCALE}, RSS {ctx.server.rss_mib():.0f} MiB", flush=True)
            only = set(filter(None, os.environ.get("HOSTILE_ONLY", "").split(",")))  # for debugging
            if not only or "callers" in only:
                await callers(ctx)
            # The xDS floods each start on a fresh server: their growth is measured from the same
            # baseline, not from memory an earlier flood left to the allocator.
            floods = [
                ("a", True, "xds", "flood (a) one-service",
                 lambda c: flood_xds(c, "a", c.one, expect_exhausted=False)),
                ("b", True, "xds", "flood (b) prod/* token",
                 lambda c: flood_xds(c, "b", c.all, expect_exhausted=True)),
                ("a+", True, "xds", "flood (a+) 10,001 names",
                 lambda c: flood_xds(c, "a+", c.one, expect_exhausted=True, per_stream=10_001)),
                ("c", True, "dashboard-live", "flood (c) 1,100 streams", flood_live),
                ("watch", False, "watch", "flood of watch streams", flood_watch),
                ("f", False, "http+consul", "flood (f) parked queries", flood_parked),
                ("cluster", False, "cluster", "flood of wrong secrets", flood_cluster),
                ("dns", False, "dns", "flood of UDP queries", flood_dns),
                ("slowloris", False, "all", "slowloris", flood_slowloris),
                # Last, so every denial of the floods above pressed on the trail too.
                ("d", False, "all", "flood (d) made-up tokens", flood_audit),
            ]
            ran_callers = not only or "callers" in only
            for key, fresh, listener, caller, make in floods:
                if only and key not in only:
                    continue
                if fresh and ran_callers:
                    ctx = await restart(ctx, muster, work)
                ran_callers = True
                made = await make(ctx)
                lines = made[2] if len(made) == 3 else None
                await judged_flood(ctx, listener, caller, made[0], made[1], extra_lines=lines)
            cell("all", "the server afterwards", ctx.server.alive(),
                 f"still running: {ctx.server.alive()}, RSS {ctx.server.rss_mib():.0f} MiB")
        finally:
            ctx.server.stop()
    elapsed = time.monotonic() - started
    print(f"hostile: {elapsed:.0f} s, {RESULTS['na']} cells n/a", flush=True)
    if FAILED:
        print("hostile: failed cells:\n" + "\n".join(FAILED), flush=True)
    print(f"hostile: {RESULTS['passed']} passed, {RESULTS['failed']} failed", flush=True)
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(os.path.realpath(sys.argv[1]))))
