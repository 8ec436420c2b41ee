#!/usr/bin/python3
"""Test-only raw proxy client, run inside the sandbox by the egress tests, for requests
curl cannot make (IDNA and user information sent as typed, SOCKS5 with a literal
address). Prints one line: the HTTP status line (and the X-Sandy-Denied header), or the
SOCKS5 reply code.

    egress_client.py PROXY_PORT http URL
    egress_client.py PROXY_PORT connect AUTHORITY
    egress_client.py PROXY_PORT socks4a|socks6|socksname HOST PORT
    egress_client.py PROXY_PORT tls AUTHORITY SNI|-        (CONNECT, then a TLS ClientHello)
    egress_client.py PROXY_PORT sockstls HOST PORT SNI|-   (SOCKS5 by name, then the same)
    egress_client.py PROXY_PORT bytes AUTHORITY TEXT       (CONNECT, then TEXT)
    egress_client.py PROXY_PORT silent AUTHORITY           (CONNECT, then nothing: prints
                                                            the seconds until closed)
    egress_client.py PROXY_PORT flood N SECONDS FILE       (N connections held SECONDS,
                                                            fewer if one is not accepted
                                                            in 3 s; "opened=K" in FILE)

After a tunnel's first bytes, prints what came back: "closed" (nothing) or "data N".
"""

import ipaddress
import resource
import socket
import ssl
import struct
import sys
import time


def http_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head = data.split(b"\r\n\r\n")[0].decode("utf-8", "replace").split("\r\n")
    denied = [h for h in head[1:] if h.lower().startswith("x-sandy-denied:")]
    return head[0] + (" | " + denied[0] if denied else "")


def after(sock):
    """What the far end sends back before closing (at most 5 s)."""
    sock.settimeout(5)
    got = 0
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += len(chunk)
    except OSError:
        pass
    return f"data {got}" if got else "closed"


def hello(sock, sni):
    """Sends a TLS ClientHello naming SNI (none for '-'); reports how it ended."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    sock.settimeout(5)
    try:
        t = ctx.wrap_socket(sock, server_hostname=None if sni == "-" else sni)
        t.close()
        return "handshake"
    except (OSError, ssl.SSLError):
        return "closed"


def flood(port, n, seconds, out):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for _ in range(n):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=3))
        except OSError:
            break  # the proxy no longer accepts: hold what is open
    with open(out, "w") as f:
        f.write(f"opened={len(held)}\n")
    time.sleep(seconds)
    alive = 0
    for s in held:
        s.setblocking(False)
        try:
            alive += 1 if s.recv(1) else 0
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    with open(out, "a") as f:
        f.write(f"alive={alive}\n")


def main():
    port = int(sys.argv[1])
    kind = sys.argv[2]
    if kind == "flood":
        flood(port, int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        return
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "http":
        url = sys.argv[3]
        host = url.split("/")[2]
        s.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        print(http_head(s))
    elif kind == "connect":
        s.sendall(f"CONNECT {sys.argv[3]} HTTP/1.1\r\nHost: {sys.argv[3]}\r\n\r\n".encode())
        print(http_head(s))
    elif kind in ("tls", "bytes", "silent"):
        s.sendall(f"CONNECT {sys.argv[3]} HTTP/1.1\r\nHost: {sys.argv[3]}\r\n\r\n".encode())
        head = http_head(s)
        if not head.startswith("HTTP/1.1 200"):
            print(head)
        elif kind == "tls":
            print(f"{head.split(' ')[1]} {hello(s, sys.argv[4])}")
        elif kind == "bytes":
            s.sendall(sys.argv[4].encode())
            print(f"{head.split(' ')[1]} {after(s)}")
        else:
            t = time.time()
            s.settimeout(30)
            try:
                s.recv(1)
            except OSError:
                pass
            print(f"{head.split(' ')[1]} {time.time() - t:.1f}")
    elif kind == "sockstls":
        name = sys.argv[3].encode()
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", int(sys.argv[4])))
        reply = s.recv(10)
        if len(reply) < 2 or reply[1] != 0:
            print(f"socks-reply {reply[1] if len(reply) > 1 else 'none'}")
        else:
            print(f"socks-0 {hello(s, sys.argv[5])}")
    else:
        host, dport = sys.argv[3], int(sys.argv[4])
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        if kind == "socks4a":
            addr = b"\x01" + ipaddress.IPv4Address(host).packed
        elif kind == "socks6":
            addr = b"\x04" + ipaddress.IPv6Address(host).packed
        else:
            name = host.encode()
            addr = b"\x03" + bytes([len(name)]) + name
        s.sendall(b"\x05\x01\x00" + addr + struct.pack(">H", dport))
        reply = s.recv(10)
        print(f"socks-reply {reply[1] if len(reply) > 1 else 'none'}")


if __name__ == "__main__":
    main()
