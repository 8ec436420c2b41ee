#!/usr/bin/python3
"""Test-only servers for the egress tests, run inside a network namespace the test made
(never on an outside address); never runs longer than two minutes.

    egress_server.py LOG READY ADDR:PORT[/udp] ...

Each TCP ADDR:PORT is an HTTP server: GET /big/N answers N bytes, anything else answers
"egress-ok ADDR:PORT PATH". Every request is appended to LOG ("ADDR:PORT METHOD PATH HOST"),
every UDP datagram too ("ADDR:PORT UDP PAYLOAD"), so the test judges from outside what
reached a server. An ADDR:PORT/raw server logs each connection and the first bytes it
sent ("ADDR:PORT RAW LENGTH FIRST-BYTE-HEX WORDS", WORDS the runs of name characters in
them, such as a ClientHello's server name; "RAW 0 -" when it sent nothing in 3 s),
then closes it. READY is created once everything listens.
"""

import http.server
import re
import signal
import socket
import sys
import threading

LOCK = threading.Lock()


def log(line):
    with LOCK, open(sys.argv[1], "a") as f:
        f.write(line + "\n")


def make_handler(where):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self):
            log(f"{where} {self.command} {self.path} {self.headers.get('Host', '')}")
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path.startswith("/big/"):
                n = int(self.path[5:])
                self.send_response(200)
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"\0" * 65536
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
                return
            body = f"egress-ok {where} {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = answer
        do_POST = answer
        do_HEAD = answer

    return Handler


def udp(addr, port, where):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))

    def serve():
        while True:
            data, _ = s.recvfrom(4096)
            log(f"{where} UDP {data.decode(errors='replace')}")

    threading.Thread(target=serve, daemon=True).start()


def raw(addr, port, where):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)

    def one(c):
        c.settimeout(3)
        data = b""
        try:
            while len(data) < 65536:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        words = ",".join(w.decode() for w in re.findall(rb"[a-z0-9.-]{6,}", data.lower()))
        log(f"{where} RAW {len(data)} {data[:1].hex() or '-'} {words}")
        c.close()

    def serve():
        while True:
            c, _ = s.accept()
            threading.Thread(target=one, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def main():
    signal.alarm(120)
    for spec in sys.argv[3:]:
        spec, _, proto = spec.partition("/")
        addr, port = spec.rsplit(":", 1)
        if proto == "udp":
            udp(addr, int(port), spec)
            continue
        if proto == "raw":
            raw(addr, int(port), spec)
            continue
        server = http.server.ThreadingHTTPServer((addr, int(port)), make_handler(spec))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    open(sys.argv[2], "w").close()
    signal.pause()


if __name__ == "__main__":
    main()
