#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The host's own services with the host's network (issue 37, item 1), through the real
//! binary and judged from the host: a listener on the host's loopback (IPv4, IPv6, the
//! IPv4-mapped form, `0.0.0.0`), on the host's own interface address, and a UDP server
//! there never see the run; `--allow-local-port` opens exactly its port; the run's own
//! server, the host's name servers and the internet stay reachable; a thread swapping the
//! address or the descriptor during the connect never reaches a closed port.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Host servers: TCP on 127.0.0.1, on 0.0.0.0 (reached through the host's own address
/// and 0.0.0.0), on ::1 when the host has it, and UDP on 0.0.0.0; each logs what reaches
/// it. Prints its ports on one line.
const HOST: &str = r#"
import socket, sys, threading
log = open(sys.argv[1], "a", buffering=1)
def tcp(family, addr):
    s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 0)); s.listen(64)
    def serve():
        while True:
            c, peer = s.accept(); log.write("tcp %s %s\n" % (addr, peer[0])); c.close()
    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]
lo = tcp(socket.AF_INET, "127.0.0.1")
anyv4 = tcp(socket.AF_INET, "0.0.0.0")
try:
    v6 = tcp(socket.AF_INET6, "::1")
except OSError:
    v6 = 0
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 0))
def udp():
    while True:
        data, peer = u.recvfrom(100); log.write("udp %s\n" % peer[0])
threading.Thread(target=udp, daemon=True).start()
print(lo, anyv4, v6, u.getsockname()[1], flush=True)
threading.Event().wait(120)
"#;

/// Inside: one attempt per destination; prints the outcome of each (`ok` or the errno
/// name) as JSON.
const PROBE: &str = r#"
import errno, json, socket, sys, threading
specs = json.loads(sys.argv[1])
out = {}
def attempt(name, kind, host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        if kind.startswith("tcp"):
            s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)
            s.connect((host, port)); s.close()
        else:
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.sendto(b"x", (host, port)); s.close()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
for name, kind, host, port in specs:
    if kind == "tcp_thread":
        t = threading.Thread(target=attempt, args=(name, kind, host, port)); t.start(); t.join()
    else:
        attempt(name, kind, host, port)
print(json.dumps(out), flush=True)
"#;

struct Host {
    _child: Reaped,
    log: std::path::PathBuf,
    lo: u16,
    any: u16,
    v6: u16,
    udp: u16,
}

impl Host {
    fn start(w: &World) -> Host {
        let script = w.write("host_services_host.py", HOST);
        let log = w.root.join(format!("{}.log", unique("hs")));
        let mut cmd = w.host(PYTHON);
        cmd.arg(&script).arg(&log);
        let (child, line) = start_announcing_line(cmd, "the host servers");
        let p: Vec<u16> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        Host {
            _child: child,
            log,
            lo: p[0],
            any: p[1],
            v6: p[2],
            udp: p[3],
        }
    }

    fn heard(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The host's first global IPv4 address (not loopback), if any.
fn host_address() -> Option<String> {
    let o = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let word = text.lines().next()?.split_whitespace().nth(3)?.to_owned();
    Some(word.split('/').next()?.to_owned())
}

fn probe(w: &World, flags: &[&str], specs: &Value) -> (Value, Output) {
    w.write("home/project/hs_probe.py", PROBE);
    let specs = specs.to_string();
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend(["--", PYTHON, "hs_probe.py", &specs]);
    let o = run_timeout(w.sandy(args), 60);
    assert_code(&o, 0, &format!("probe {flags:?}"));
    let out = stdout(&o);
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bad probe output {e}: {out}\n{}", stderr(&o)));
    (v, o)
}

#[test]
fn the_hosts_own_services_are_closed_and_a_granted_port_opens_only_itself() {
    for_each_user(|w| {
        let host = Host::start(w);
        let mut specs = vec![
            serde_json::json!(["lo", "tcp", "127.0.0.1", host.lo]),
            serde_json::json!(["lo2", "tcp", "127.0.0.2", host.any]),
            serde_json::json!(["mapped", "tcp", "::ffff:127.0.0.1", host.lo]),
            serde_json::json!(["unspecified", "tcp", "0.0.0.0", host.any]),
            serde_json::json!(["udp_lo", "udp", "127.0.0.1", host.udp]),
        ];
        if host.v6 != 0 {
            specs.push(serde_json::json!(["v6", "tcp", "::1", host.v6]));
        }
        let address = host_address();
        match &address {
            Some(a) => {
                specs.push(serde_json::json!(["own_address", "tcp", a, host.any]));
                specs.push(serde_json::json!(["udp_own", "udp", a, host.udp]));
            }
            None => skip("the host has no global IPv4 address"),
        }
        let specs = Value::Array(specs);
        let (closed, o) = probe(w, &[], &specs);
        for (name, outcome) in closed.as_object().unwrap() {
            let want = if name.starts_with("udp") {
                // No route out of the sandbox's own namespace but to the name servers
                // (127.0.0.1 is the sandbox's own loopback: the datagram goes nowhere).
                ["ok", "ENETUNREACH"].contains(&outcome.as_str().unwrap())
            } else {
                outcome == "EACCES"
            };
            assert!(want, "{name}: {outcome} ({closed})\n{}", stderr(&o));
        }
        let err = stderr(&o);
        assert!(
            err.contains("refused: a connection to 127.0.0.1:")
                && err.contains("the host's own services are closed by default"),
            "{err}"
        );
        // Judged from the host: nothing reached any of its servers.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(host.heard(), "", "the host's services heard the run");

        // One port granted: only it opens, on every local address; the rest stays closed.
        let lo = host.lo.to_string();
        let specs = serde_json::json!([
            ["lo", "tcp", "127.0.0.1", host.lo],
            ["mapped", "tcp", "::ffff:127.0.0.1", host.lo],
            ["thread", "tcp_thread", "127.0.0.1", host.lo],
            ["other", "tcp", "127.0.0.1", host.any],
            ["other_thread", "tcp_thread", "127.0.0.1", host.any],
        ]);
        let (granted, o) = probe(w, &["--allow-local-port", &lo], &specs);
        assert_eq!(granted["lo"], "ok", "{granted}\n{}", stderr(&o));
        assert_eq!(granted["mapped"], "ok", "{granted}");
        assert_eq!(granted["thread"], "ok", "{granted}");
        assert_eq!(granted["other"], "EACCES", "{granted}");
        assert_eq!(granted["other_thread"], "EACCES", "{granted}");
        assert!(wait_for(5, || host
            .heard()
            .matches("tcp 127.0.0.1")
            .count()
            == 3));
        assert!(!host.heard().contains("tcp 0.0.0.0"), "{}", host.heard());
    });
}

/// The agent's endpoint on the local host, named by its base URL variable, is open
/// without a flag, and the dry run says so with the variable as the origin.
#[test]
fn the_agents_local_endpoint_is_open_and_named_in_the_dry_run() {
    for_each_user(|w| {
        let host = Host::start(w);
        let url = format!("http://127.0.0.1:{}/v1", host.lo);
        w.write("home/project/hs_probe.py", PROBE);
        let specs = serde_json::json!([["endpoint", "tcp", "127.0.0.1", host.lo]]).to_string();
        let mut cmd = w.sandy(["run", "--", PYTHON, "hs_probe.py", &specs]);
        cmd.env("ANTHROPIC_BASE_URL", &url);
        let o = run_timeout(cmd, 60);
        assert_code(&o, 0, "endpoint probe");
        assert!(stdout(&o).contains(r#""endpoint": "ok""#), "{}", stdout(&o));
        assert!(wait_for(5, || host.heard().contains("tcp 127.0.0.1")));
        let mut dry = w.sandy(["run", "--dry-run", "--", "true"]);
        dry.env("ANTHROPIC_BASE_URL", &url);
        let o = run_timeout(dry, 30);
        assert_code(&o, 0, "dry run");
        let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(
            doc["local_port_grants"],
            serde_json::json!([{"port": host.lo, "origin": "anthropic_base_url"}])
        );
        assert_eq!(
            doc["host_services"]["open_ports"],
            serde_json::json!([host.lo])
        );
        assert_eq!(doc["host_services"]["udp"], "name_resolution_only");
    });
}

/// A server the run starts itself on loopback is reachable from the run; the host's
/// name servers answer (UDP through the relay, TCP on port 53), and a name resolves.
#[test]
fn the_runs_own_server_and_the_hosts_name_servers_stay_reachable() {
    const INSIDE: &str = r#"
import json, socket, struct, threading
out = {}
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
threading.Thread(target=lambda: srv.accept(), daemon=True).start()
c = socket.create_connection(srv.getsockname(), timeout=5); c.close(); out["own"] = "ok"
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00" + struct.pack(">HH", 1, 1)
u = socket.socket(socket.AF_INET6 if ":" in ns else socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5); u.sendto(query, (ns, 53))
answer, peer = u.recvfrom(4096)
out["udp_dns"] = "ok" if answer[:2] == b"\x12\x34" and answer[2] & 0x80 else "bad"
t = socket.create_connection((ns, 53), timeout=5)
t.sendall(struct.pack(">H", len(query)) + query)
out["tcp_dns"] = "ok" if len(t.recv(2)) == 2 else "bad"
print(json.dumps(out), flush=True)
"#;
    for_each_user(|w| {
        w.write("home/project/hs_inside.py", INSIDE);
        let o = run_timeout(w.sandy(["run", "--", PYTHON, "hs_inside.py"]), 60);
        assert_code(&o, 0, "inside");
        let v: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"own": "ok", "udp_dns": "ok", "tcp_dns": "ok"}),
            "{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("refused:"), "{}", stderr(&o));
    });
}

/// The adversary of the check: threads of the run swap the address in memory (a
/// public address and the host's loopback port) and swap the descriptor (a Unix socket
/// and a TCP socket) while the main thread connects, thousands of times. The host's
/// listener never sees a connection.
#[test]
fn swapping_the_address_or_the_descriptor_during_a_connect_never_reaches_a_closed_port() {
    const RACE: &str = r#"
import ctypes, os, socket, struct, sys, threading, time
port = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def sin(ip, p):
    return struct.pack("=H", socket.AF_INET) + struct.pack(">H", p) + socket.inet_aton(ip) + b"\0" * 8
closed, elsewhere = sin("127.0.0.1", port), sin("192.0.2.254", port)
buf = ctypes.create_string_buffer(elsewhere, 16)
stop = False
def flip():
    a, b = ctypes.create_string_buffer(closed, 16), ctypes.create_string_buffer(elsewhere, 16)
    while not stop:
        ctypes.memmove(buf, a, 16); ctypes.memmove(buf, b, 16)
threading.Thread(target=flip, daemon=True).start()
done = 0
deadline = time.time() + 4
while time.time() < deadline:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    libc.connect(s.fileno(), buf, 16); s.close(); done += 1
# The descriptor swapped: fd N is a Unix socket or a TCP socket while the main thread
# connects N to the closed port.
unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
target = os.dup(unix.fileno())
def swap():
    while not stop:
        os.dup2(tcp.fileno(), target); os.dup2(unix.fileno(), target)
threading.Thread(target=swap, daemon=True).start()
c = ctypes.create_string_buffer(closed, 16)
deadline = time.time() + 4
while time.time() < deadline:
    libc.connect(target, c, 16); done += 1
stop = True
print("attempts", done, flush=True)
"#;
    for_each_user(|w| {
        let host = Host::start(w);
        w.write("home/project/hs_race.py", RACE);
        let port = host.lo.to_string();
        let o = run_timeout(w.sandy(["run", "--", PYTHON, "hs_race.py", &port]), 60);
        assert_code(&o, 0, "race");
        let attempts: u64 = stdout(&o)
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(attempts > 200, "too few attempts: {}", stdout(&o));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            host.heard(),
            "",
            "a swapped connect reached the host's loopback"
        );
    });
}

/// A name server on the host's loopback (as systemd-resolved's 127.0.0.53): reached for
/// DNS only, over UDP through the relay and over TCP, and nothing else at its address.
/// The stand-in answers every query with 192.0.2.77; Sandy runs in a mount namespace of
/// the test's own where `/etc/resolv.conf` names it (root: the unprivileged pass would
/// need a user namespace of its own around Sandy's, and is left out).
#[test]
fn a_name_server_on_the_hosts_loopback_answers_and_nothing_else_there_does() {
    const STUB: &str = r#"
import socket, struct, sys, threading
addr = sys.argv[1]
def answer(q):
    head = q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00"
    qend = 12
    while q[qend] != 0:
        qend += q[qend] + 1
    question = q[12:qend + 5]
    return head + question + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes([192, 0, 2, 77])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 53))
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind((addr, 53)); t.listen()
o = socket.socket(); o.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); o.bind((addr, 80)); o.listen()
def udp():
    while True:
        q, peer = u.recvfrom(4096); u.sendto(answer(q), peer)
def tcp():
    while True:
        c, _ = t.accept(); n = struct.unpack(">H", c.recv(2))[0]; q = c.recv(n)
        a = answer(q); c.sendall(struct.pack(">H", len(a)) + a); c.close()
def other():
    while True:
        c, _ = o.accept(); print("other port reached", flush=True); c.close()
for f in (udp, tcp, other):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
threading.Event().wait(120)
"#;
    const INSIDE: &str = r#"
import json, socket, struct
out = {"name": socket.gethostbyname("stub.test")}
q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x04stub\x04test\x00" + struct.pack(">HH", 1, 1)
t = socket.create_connection(("127.0.0.54", 53), timeout=5)
t.sendall(struct.pack(">H", len(q)) + q)
out["tcp"] = socket.inet_ntoa(t.recv(512)[-4:])
try:
    socket.create_connection(("127.0.0.54", 80), timeout=3); out["other"] = "ok"
except OSError as e:
    out["other"] = e.errno
print(json.dumps(out), flush=True)
"#;
    if !is_root() {
        eprintln!("the loopback name server test needs root (a mount namespace for resolv.conf)");
        return;
    }
    if !kernel_ready() {
        return;
    }
    let w = World::new(User {
        uid: 0,
        gid: 0,
        label: "root",
    });
    let stub = w.write("stub.py", STUB);
    let mut cmd = Command::new(PYTHON);
    cmd.arg(&stub).arg("127.0.0.54");
    let (_stub, line) = start_announcing_line(cmd, "the name server stand-in");
    assert_eq!(line.trim(), "ready");
    w.write("home/project/inside.py", INSIDE);
    let resolv = w.write("resolv.conf", "nameserver 127.0.0.54\noptions timeout:2\n");
    let script = format!(
        "mount --bind '{}' /etc/resolv.conf && exec '{}' run -- {PYTHON} inside.py",
        resolv.display(),
        sandy_bin().display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script])
        .current_dir(&w.project)
        .env_clear()
        .envs(w.base_env())
        .stdin(std::process::Stdio::null());
    let o = run_timeout(cmd, 60);
    assert_code(&o, 0, "a run with a loopback name server");
    let v: Value = serde_json::from_str(stdout(&o).lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
    eprintln!("inside: {v}");
    assert_eq!(v["name"], "192.0.2.77", "{v}");
    assert_eq!(v["tcp"], "192.0.2.77", "{v}");
    assert_eq!(v["other"], 13, "{v}");
    assert!(
        stderr(&o).contains("refused: a connection to 127.0.0.54:80"),
        "{}",
        stderr(&o)
    );
}
