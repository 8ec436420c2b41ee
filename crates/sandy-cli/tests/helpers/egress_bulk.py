"""Large transfers through a CONNECT tunnel (tests/egress.rs).

server ADDRESS READY: on ADDRESS port 9000 echoes every byte as it arrives and half-closes
at the client's end of file; on port 9001 reads everything first, then answers with the
count and SHA-256 of what it read and SIZE bytes of the shared pattern, and closes.
client PROXY_PORT HOST SIZE: sends SIZE bytes of the pattern through a tunnel to each and
prints what came back (echo=..., later=...).
"""
import hashlib
import random
import socket
import sys
import threading

CHUNK = 1 << 20


def pattern(size):
    # Not a TLS record (0x16) at the start: the proxy forwards other first bytes as they are.
    return b"bulk" + random.Random(37).randbytes(size - 4)


def serve_echo(conn):
    with conn:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)


def serve_later(conn, size):
    with conn:
        digest, n = hashlib.sha256(), 0
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            digest.update(data)
            n += len(data)
        conn.sendall(f"{n} {digest.hexdigest()}\n".encode())
        body = pattern(size)
        for i in range(0, len(body), CHUNK):
            conn.sendall(body[i : i + CHUNK])


def listen(address, port, handle):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(8)

    def loop():
        while True:
            conn, _ = s.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def tunnel(proxy_port, target):
    s = socket.create_connection(("127.0.0.1", proxy_port))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(1)
        if not data:
            raise SystemExit(f"no answer to CONNECT {target}")
        head += data
    if b" 200 " not in head.split(b"\r\n")[0]:
        raise SystemExit(f"CONNECT {target}: {head!r}")
    return s


def send_all_then_half_close(s, body):
    for i in range(0, len(body), CHUNK):
        s.sendall(body[i : i + CHUNK])
    s.shutdown(socket.SHUT_WR)


def read_to_end(s):
    parts = []
    while True:
        data = s.recv(CHUNK)
        if not data:
            return b"".join(parts)
        parts.append(data)


def client(proxy_port, host, size):
    body = pattern(size)
    want = hashlib.sha256(body).hexdigest()
    # Both directions at once: the echo comes back while the upload goes on.
    s = tunnel(proxy_port, f"{host}:9000")
    sender = threading.Thread(target=send_all_then_half_close, args=(s, body))
    sender.start()
    back = read_to_end(s)
    sender.join()
    s.close()
    ok = len(back) == size and hashlib.sha256(back).hexdigest() == want
    print(f"echo={len(back)} {'intact' if ok else 'differs'}")
    # Half-closed: the upload ends first, the whole download follows it.
    s = tunnel(proxy_port, f"{host}:9001")
    send_all_then_half_close(s, body)
    back = read_to_end(s)
    s.close()
    line, _, rest = back.partition(b"\n")
    ok = line.decode() == f"{size} {want}" and len(rest) == size and rest == body
    print(f"later={len(rest)} {'intact' if ok else 'differs: ' + line.decode()}")


def main():
    if sys.argv[1] == "server":
        address, ready, size = sys.argv[2], sys.argv[3], int(sys.argv[4])
        listen(address, 9000, serve_echo)
        listen(address, 9001, lambda c: serve_later(c, size))
        open(ready, "w").close()
        threading.Event().wait()
    else:
        client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))


main()
