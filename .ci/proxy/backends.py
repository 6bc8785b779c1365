"""The backends behind `muster proxy` in .ci/proxy.sh, all in one process until killed.

  web-a, web-b   HTTP/1.1 keep-alive servers (http.server, threaded) answering every GET with
                 their own name; each request is one line `NAME METHOD PATH` in LOGDIR/NAME.log
  grpc-a, grpc-b real grpcio servers: the unary method /muster.ci.Echo/Who answers its name
                 (raw bytes, no generated code); each call is one line in LOGDIR/NAME.log
  echo           a TCP echo server (a thread per connection)

When all listen, LOGDIR/ports.json maps each name to its port (written last, atomically), so
the caller polls for that file.

  python backends.py LOGDIR
"""

import json
import os
import socket
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

LOGDIR = sys.argv[1]
_log_lock = threading.Lock()


def log(name, line):
    with _log_lock, open(os.path.join(LOGDIR, f"{name}.log"), "a") as f:
        f.write(line + "\n")


def web(name):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the proxy pools its upstream connections

        def do_GET(self):
            log(name, f"{name} {self.command} {self.path}")
            body = f"{name}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", name)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def grpc_backend(name):
    def who(request, context):
        log(name, f"{name} /muster.ci.Echo/Who")
        return name.encode()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "muster.ci.Echo", {"Who": grpc.unary_unary_rpc_method_handler(who)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def echo():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)

    def serve(conn):
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1]


def main():
    ports = {"web-a": web("web-a"), "web-b": web("web-b")}
    servers = []
    for name in ("grpc-a", "grpc-b"):
        server, ports[name] = grpc_backend(name)
        servers.append(server)
    ports["echo"] = echo()
    for name in ports:
        open(os.path.join(LOGDIR, f"{name}.log"), "a").close()
    tmp = os.path.join(LOGDIR, "ports.json.tmp")
    with open(tmp, "w") as f:
        json.dump(ports, f)
    os.rename(tmp, os.path.join(LOGDIR, "ports.json"))
    threading.Event().wait()


main()
