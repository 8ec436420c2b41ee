#!/usr/bin/python3
"""Test-only network probes for the network tests, run inside Sandy (and outside it, as
controls). Each mode prints one JSON line.

    net_probe.py attempts JSON   JSON is a list of {"kind", "host", "port", "tag"}; kind is
                                 tcp (connect, send tag), udp (send tag), mptcp4/mptcp6
                                 (create an IPPROTO_MPTCP socket and, if that works and a
                                 host is given, connect), packet or raw (create only).
                                 Prints a list of {"result": "ok"|ERRNO|"timeout", "ms"}.
    net_probe.py dns NAME        getaddrinfo: {"result": "ok"|ERROR, "ms"}
    net_probe.py echo            a server and a client, both here, over 127.0.0.1
    net_probe.py bulk PORT N     N parallel transfers through 127.0.0.1:PORT (the bulk
                                 protocol of net_host.py): {ID: {"down": SHA256, "n": BYTES}}
    net_probe.py upload PORT N   N parallel uploads through 127.0.0.1:PORT (to net_host.py's
                                 sink), each closed as soon as it is sent; exits without
                                 waiting for anything: {"sent": N}
    net_probe.py fill PORT       connects to 127.0.0.1:PORT and sends until nothing has moved
                                 for a second (every buffer on the way is full), then exits
                                 at once: {"filled": BYTES}
    net_probe.py halfclose PORT DATA
                                 sends DATA, shuts down the write side, reads the answer
    net_probe.py hold PORT DIR   connects to 127.0.0.1:PORT and holds the connection; writes
                                 DIR/held, then waits for DIR/go and writes DIR/after with
                                 the result of a new connection attempt; gives up after 20 s
"""

import errno
import hashlib
import json
import os
import random
import socket
import sys
import threading
import time

IPPROTO_MPTCP = 262
BULK_SIZE = 10 * 1024 * 1024


def gen(seed):
    return random.Random(seed).randbytes(BULK_SIZE)


def err_name(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, socket.gaierror):
        return f"gaierror:{e.args[0]}"
    if e.errno is None:
        return str(e)
    return errno.errorcode.get(e.errno, str(e.errno))


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def attempt(spec):
    kind, host, port, tag = spec["kind"], spec.get("host"), spec.get("port"), spec.get("tag", "")
    t0 = time.monotonic()
    try:
        if kind == "tcp":
            with socket.socket(family_of(host), socket.SOCK_STREAM) as s:
                s.settimeout(4)
                s.connect((host, port))
                s.sendall(tag.encode())
        elif kind == "udp":
            with socket.socket(family_of(host), socket.SOCK_DGRAM) as s:
                s.sendto(tag.encode(), (host, port))
        elif kind in ("mptcp4", "mptcp6"):
            fam = socket.AF_INET if kind == "mptcp4" else socket.AF_INET6
            with socket.socket(fam, socket.SOCK_STREAM, IPPROTO_MPTCP) as s:
                if host:
                    s.settimeout(4)
                    s.connect((host, port))
                    s.sendall(tag.encode())
        elif kind == "packet":
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
        elif kind == "raw":
            socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
        else:
            raise SystemExit(f"unknown kind {kind}")
        result = "ok"
    except OSError as e:
        result = err_name(e)
    return {"result": result, "ms": int((time.monotonic() - t0) * 1000)}


def attempts(specs):
    print(json.dumps([attempt(s) for s in json.loads(specs)]), flush=True)


def dns(name):
    t0 = time.monotonic()
    try:
        socket.getaddrinfo(name, 80)
        result = "ok"
    except OSError as e:
        result = err_name(e)
    print(json.dumps({"result": result, "ms": int((time.monotonic() - t0) * 1000)}), flush=True)


def echo():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(5)
    port = srv.getsockname()[1]

    def serve():
        c, _ = srv.accept()
        c.settimeout(5)
        c.sendall(b"echo:" + c.recv(100))
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    cli = socket.create_connection(("127.0.0.1", port), timeout=5)
    cli.sendall(b"ping-inside")
    print(json.dumps({"reply": cli.recv(100).decode()}), flush=True)
    t.join(5)


def bulk(port, n):
    results = {}

    def one(ident):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            up = gen(1000 + ident)

            def send():
                try:
                    s.sendall(f"{ident}\n".encode() + up)
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            h = hashlib.sha256()
            got = 0
            while True:
                b = s.recv(65536)
                if not b:
                    break
                h.update(b)
                got += len(b)
            sender.join(30)
            s.close()
            results[ident] = {"down": h.hexdigest(), "n": got}
        except OSError as e:
            results[ident] = {"error": err_name(e)}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print(json.dumps(results), flush=True)


def upload(port, n):
    socks = []
    for ident in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        socks.append((ident, s))

    def send(ident, s):
        s.sendall(f"{ident}\n".encode() + gen(1000 + ident))
        s.close()

    threads = [threading.Thread(target=send, args=p) for p in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print(json.dumps({"sent": n}), flush=True)
    # No interpreter shutdown: whatever is still in flight stays in flight.
    os._exit(0)


def fill(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(1)
    chunk = b"x" * 65536
    sent = 0
    try:
        while True:
            sent += s.send(chunk)
    except (socket.timeout, BlockingIOError):
        pass
    print(json.dumps({"filled": sent}), flush=True)
    os._exit(0)


def halfclose(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(data.encode())
    s.shutdown(socket.SHUT_WR)
    chunks = []
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
        result = "ok"
    except OSError as e:
        result = err_name(e)
    reply = b"".join(chunks).decode(errors="replace")
    print(json.dumps({"result": result, "reply": reply}), flush=True)


def hold(port, directory):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"holding")
    with open(os.path.join(directory, "held"), "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 20
    go = os.path.join(directory, "go")
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    r = attempt({"kind": "tcp", "host": "127.0.0.1", "port": port, "tag": "after"})
    with open(os.path.join(directory, "after.tmp"), "w") as f:
        f.write(r["result"])
    os.rename(os.path.join(directory, "after.tmp"), os.path.join(directory, "after"))
    s.close()


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "attempts":
        attempts(args[0])
    elif mode == "dns":
        dns(args[0])
    elif mode == "echo":
        echo()
    elif mode == "bulk":
        bulk(int(args[0]), int(args[1]))
    elif mode == "upload":
        upload(int(args[0]), int(args[1]))
    elif mode == "fill":
        fill(int(args[0]))
    elif mode == "halfclose":
        halfclose(int(args[0]), args[1])
    elif mode == "hold":
        hold(int(args[0]), args[1])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
