#!/usr/bin/python3
"""Test-only raw proxy client, run inside the sandbox by the egress tests, for requests
curl cannot make (IDNA and user information sent as typed, SOCKS5 with a literal
address). Prints one line: the HTTP status line (and the X-Sandy-Denied header), or the
SOCKS5 reply code.

    egress_client.py PROXY_PORT http URL
    egress_client.py PROXY_PORT connect AUTHORITY
    egress_client.py PROXY_PORT socks4a|socks6|socksname HOST PORT
"""

import ipaddress
import socket
import struct
import sys


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


def main():
    port = int(sys.argv[1])
    kind = sys.argv[2]
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "http":
        url = sys.argv[3]
        host = url.split("/")[2]
        s.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        print(http_head(s))
    elif kind == "connect":
        s.sendall(f"CONNECT {sys.argv[3]} HTTP/1.1\r\nHost: {sys.argv[3]}\r\n\r\n".encode())
        print(http_head(s))
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
