#!/usr/bin/python3
"""Test-only host-side servers for the network tests. Runs outside Sandy, records every
connection or datagram that arrives, and never runs longer than two minutes.

    net_host.py LOG SPEC [SPEC...]

SPEC is NAME,KIND,ADDR,PORT. PORT is a number (0: any free port) or +OTHER (the port of
the server named OTHER plus one; the whole set-up is retried until both are free). KIND:

    tcp        logs "tcp NAME PEER accepted", then "tcp NAME PEER data=DATA" (first bytes)
    udp        logs "udp NAME PEER data=DATA" for each datagram
    http       HTTP/1.0 GET: logs "http NAME PEER PATH", answers "hello from host NAME PATH"
    bulk       reads "ID\\n", sends BULK_SIZE bytes of gen(ID) while reading the upload to
               EOF, then logs "bulk NAME PEER id=ID up=SHA256 n=BYTES"
    sink       reads "ID\\n" and the upload to EOF, slowly (64 KiB per millisecond at
               most, so that data stays in flight), sends nothing, then logs
               "sink NAME PEER id=ID up=SHA256 n=BYTES"
    halfclose  reads to EOF (5 s at most), logs "halfclose NAME PEER got=DATA" (or
               "timeout"), then answers "reply:" + DATA
    hold       logs "hold NAME PEER open", reads to EOF, logs "hold NAME PEER closed"
    stall      logs "stall NAME PEER open" and reads nothing, ever (until the process ends)

Prints one JSON line once everything listens: {"ports": {NAME: PORT}, "bulk_down":
{ID: SHA256}, "bulk_up": {ID: SHA256}} (the bulk hashes for IDs 0..9, when a bulk or
sink server is asked for).
"""

import errno
import hashlib
import http.server
import json
import random
import signal
import socket
import sys
import threading
import time

BULK_SIZE = 10 * 1024 * 1024
BULK_IDS = range(10)
LOCK = threading.Lock()


def gen(seed):
    """Deterministic pseudo-random bytes; the same generator runs inside the sandbox."""
    return random.Random(seed).randbytes(BULK_SIZE)


def upload_seed(ident):
    return 1000 + ident


def log(path, *words):
    line = " ".join(str(w) for w in words) + "\n"
    with LOCK:
        with open(path, "a") as f:
            f.write(line)
            f.flush()


def peer_of(addr):
    return addr[0]


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def make_socket(kind, addr, port):
    fam = family_of(addr)
    stype = socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM
    s = socket.socket(fam, stype)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if stype == socket.SOCK_STREAM:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    if stype == socket.SOCK_STREAM:
        s.listen(64)
    return s


def bind_all(specs):
    """Binds every server; returns {name: socket}. Retries when a +OTHER port is taken."""
    for _ in range(50):
        socks = {}
        try:
            for name, kind, addr, port in specs:
                if port.startswith("+"):
                    wanted = socks[port[1:]].getsockname()[1] + 1
                    if wanted > 65535:
                        raise OSError(errno.EADDRINUSE, "no room above")
                else:
                    wanted = int(port)
                socks[name] = make_socket(kind, addr, wanted)
            return socks
        except OSError as e:
            for s in socks.values():
                s.close()
            if e.errno != errno.EADDRINUSE:
                raise
    raise SystemExit("could not find free ports")


def accept_loop(sock, handler):
    while True:
        conn, addr = sock.accept()
        threading.Thread(target=handler, args=(conn, addr), daemon=True).start()


def read_to_eof(conn, limit=None):
    chunks = []
    while True:
        b = conn.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        if limit is not None and sum(len(c) for c in chunks) >= limit:
            return b"".join(chunks)


def serve_tcp(path, name, sock):
    def handle(conn, addr):
        log(path, "tcp", name, peer_of(addr), "accepted")
        conn.settimeout(1)
        try:
            data = conn.recv(200)
        except OSError:
            data = b""
        log(path, "tcp", name, peer_of(addr), "data=" + data.decode(errors="replace"))
        conn.close()

    accept_loop(sock, handle)


def serve_udp(path, name, sock):
    while True:
        data, addr = sock.recvfrom(2000)
        log(path, "udp", name, peer_of(addr), "data=" + data.decode(errors="replace"))


def serve_http(path, name, sock):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            log(path, "http", name, peer_of(self.client_address), self.path)
            body = f"hello from host {name} {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        address_family = sock.family

    srv = Server(sock.getsockname()[:2], Handler, bind_and_activate=False)
    srv.socket.close()
    srv.socket = sock
    srv.serve_forever()


def read_id(path, kind, name, conn, addr, f):
    """The "ID\\n" header of the bulk protocol, or None (logged, connection closed)."""
    try:
        return int(f.readline())
    except (OSError, ValueError):
        log(path, kind, name, peer_of(addr), "bad-header")
        conn.close()
        return None


def read_upload(f, pause=0.0):
    """Reads to EOF, 64 KiB at a time with `pause` seconds between reads; returns the
    SHA-256 hex digest and the byte count."""
    h = hashlib.sha256()
    n = 0
    try:
        while True:
            b = f.read(65536) if pause else f.read1(65536)
            if not b:
                break
            h.update(b)
            n += len(b)
            if pause:
                time.sleep(pause)
    except OSError:
        pass
    return h.hexdigest(), n


def serve_bulk(path, name, sock):
    def handle(conn, addr):
        conn.settimeout(30)
        f = conn.makefile("rb")
        ident = read_id(path, "bulk", name, conn, addr, f)
        if ident is None:
            return

        def send():
            try:
                conn.sendall(gen(ident))
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        up, n = read_upload(f)
        sender.join()
        log(path, "bulk", name, peer_of(addr), f"id={ident}", f"up={up}", f"n={n}")
        conn.close()

    accept_loop(sock, handle)


def serve_sink(path, name, sock):
    def handle(conn, addr):
        conn.settimeout(30)
        f = conn.makefile("rb")
        ident = read_id(path, "sink", name, conn, addr, f)
        if ident is None:
            return
        up, n = read_upload(f, pause=0.001)
        log(path, "sink", name, peer_of(addr), f"id={ident}", f"up={up}", f"n={n}")
        conn.close()

    accept_loop(sock, handle)


def serve_halfclose(path, name, sock):
    def handle(conn, addr):
        conn.settimeout(5)
        try:
            data = read_to_eof(conn, limit=1 << 20)
        except socket.timeout:
            log(path, "halfclose", name, peer_of(addr), "timeout")
            conn.close()
            return
        log(path, "halfclose", name, peer_of(addr), "got=" + data.decode(errors="replace"))
        try:
            conn.sendall(b"reply:" + data)
        except OSError:
            pass
        conn.close()

    accept_loop(sock, handle)


def serve_hold(path, name, sock):
    def handle(conn, addr):
        log(path, "hold", name, peer_of(addr), "open")
        try:
            read_to_eof(conn)
        except OSError:
            pass
        log(path, "hold", name, peer_of(addr), "closed")
        conn.close()

    accept_loop(sock, handle)


def serve_stall(path, name, sock):
    held = []

    def handle(conn, addr):
        held.append(conn)
        log(path, "stall", name, peer_of(addr), "open")

    accept_loop(sock, handle)


SERVERS = {
    "tcp": serve_tcp,
    "udp": serve_udp,
    "http": serve_http,
    "bulk": serve_bulk,
    "sink": serve_sink,
    "halfclose": serve_halfclose,
    "hold": serve_hold,
    "stall": serve_stall,
}


def main():
    signal.alarm(120)
    path = sys.argv[1]
    specs = [tuple(a.split(",")) for a in sys.argv[2:]]
    for spec in specs:
        if len(spec) != 4 or spec[1] not in SERVERS:
            raise SystemExit(f"bad spec {spec}")
    socks = bind_all(specs)
    ready = {"ports": {name: s.getsockname()[1] for name, s in socks.items()}}
    if any(kind in ("bulk", "sink") for _, kind, _, _ in specs):
        ready["bulk_down"] = {i: hashlib.sha256(gen(i)).hexdigest() for i in BULK_IDS}
        ready["bulk_up"] = {
            i: hashlib.sha256(gen(upload_seed(i))).hexdigest() for i in BULK_IDS
        }
    for name, kind, _, _ in specs:
        threading.Thread(
            target=SERVERS[kind], args=(path, name, socks[name]), daemon=True
        ).start()
    print(json.dumps(ready), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
