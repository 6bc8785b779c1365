"""Clients through `muster proxy` for .ci/proxy.sh; each prints one JSON line and exits
non-zero on any failure.

  python client.py grpc ADDR N   N unary calls of /muster.ci.Echo/Who over h2c (grpcio,
                                 insecure channel): {"calls": N, "by": {"grpc-a": n, ...}}
  python client.py tcp ADDR      several payloads (one byte to 256 KiB) through one TCP
                                 connection, each echoed back byte for byte, then a half
                                 close answered by the peer's close: {"bytes": total}
"""

import collections
import json
import os
import socket
import sys

CALL_TIMEOUT_S = 5.0


def grpc_calls(addr, n):
    import grpc

    channel = grpc.insecure_channel(addr)
    grpc.channel_ready_future(channel).result(timeout=10)
    who = channel.unary_unary("/muster.ci.Echo/Who")
    seen = collections.Counter()
    errors = []
    for _ in range(n):
        try:
            seen[who(b"", timeout=CALL_TIMEOUT_S).decode()] += 1
        except grpc.RpcError as err:
            errors.append(f"{err.code().name}: {err.details()}")
    channel.close()
    print(json.dumps({"calls": n, "by": dict(seen), "errors": errors[:5], "failed": len(errors)}))
    return 0 if not errors else 1


def recv_exactly(conn, n):
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(65536, n - got))
        if not chunk:
            raise AssertionError(f"the stream ended after {got} of {n} echoed bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def tcp(addr):
    host, port = addr.rsplit(":", 1)
    total = 0
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        for size in (1, 1000, 65536, 256 * 1024):
            payload = os.urandom(size)
            conn.sendall(payload)
            back = recv_exactly(conn, size)
            if back != payload:
                raise AssertionError(f"{size} bytes sent, different bytes echoed back")
            total += size
        conn.shutdown(socket.SHUT_WR)
        rest = conn.recv(1)
        if rest != b"":
            raise AssertionError(f"after the half close, more bytes came: {rest!r}")
    print(json.dumps({"bytes": total}))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "grpc":
        sys.exit(grpc_calls(sys.argv[2], int(sys.argv[3])))
    sys.exit(tcp(sys.argv[2]))
