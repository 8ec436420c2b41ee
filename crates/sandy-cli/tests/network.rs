#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The network through the real binary, judged from the host side: under `--block-net`
//! no host listener (loopback, IPv6 loopback, non-loopback addresses, TCP, UDP, HTTP) sees
//! anything and every attempt fails fast; MPTCP and raw sockets are refused; DNS fails
//! fast; only `lo` exists inside, and loopback inside works. `--allow-local-port` and
//! `--numbat-collector` relay exactly the granted host loopback port (bodies, parallel
//! bulk transfers and half-close intact) and the relay ends with the run. The dry run
//! shows the network and the grants; bad port flags are usage errors that run nothing.
//!
//! Host listeners are `helpers/net_host.py`, run outside Sandy as the test user; the
//! probes are `helpers/net_probe.py`, copied into the project so the sandboxed user can
//! read them, and run outside Sandy too as controls.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::collections::BTreeSet;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use std::time::{Duration, Instant};

use common::*;

use serde_json::{json, Value};

const CURL: &str = "/usr/bin/curl";
/// A refused or unreachable connection must fail well within this.
const FAST: Duration = Duration::from_secs(2);
/// The bulk transfer size of `net_host.py` (10 MiB).
const BULK_SIZE: u64 = 10 * 1024 * 1024;

// ---------------------------------------------------------------------------------------
// Harness.

/// Like `run_timeout`, also returning how long the command took.
fn timed(cmd: Command, secs: u64) -> (Output, Duration) {
    let started = Instant::now();
    let o = run_timeout(cmd, secs);
    (o, started.elapsed())
}

/// `sandy run FLAGS... -- ARGS...` as the test user, with a timeout.
fn sandy_cmd(w: &World, flags: &[&str], args: &[&str]) -> Command {
    let mut all = vec!["run"];
    all.extend_from_slice(flags);
    all.push("--");
    all.extend_from_slice(args);
    w.sandy(all)
}

fn sandy_run(w: &World, flags: &[&str], args: &[&str]) -> Output {
    run_timeout(sandy_cmd(w, flags, args), 30)
}

/// Copies `net_probe.py` into the project (readable inside the sandbox); returns its name
/// relative to the project, where every command runs.
fn probe(w: &World) -> &'static str {
    let name = "net_probe.py";
    if !w.project.join(name).exists() {
        w.write(format!("home/project/{name}"), &helper_text(name));
    }
    name
}

fn json_line(o: &Output, what: &str) -> Value {
    let out = stdout(o);
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{what}: bad probe output ({e}), exit {:?}\nstdout: {out}\nstderr: {}",
            o.status.code(),
            stderr(o)
        )
    })
}

/// One probe run: `net_probe.py attempts JSON`, inside Sandy (with `flags`) or, with
/// `flags` = None, outside it as the test user.
fn attempts(w: &World, flags: Option<&[&str]>, specs: &Value) -> (Vec<Value>, Duration) {
    let p = probe(w);
    let specs = specs.to_string();
    let cmd = match flags {
        Some(flags) => sandy_cmd(w, flags, &[PYTHON, p, "attempts", &specs]),
        None => {
            let mut c = w.host(PYTHON);
            c.args([p, "attempts", &specs]).stdin(Stdio::null());
            c
        }
    };
    let (o, took) = timed(cmd, 40);
    assert_code(&o, 0, &format!("probe {flags:?}"));
    let v = json_line(&o, "attempts");
    (v.as_array().unwrap().clone(), took)
}

/// The host-side servers of one test (`net_host.py`), killed when dropped.
struct HostServers {
    _child: Reaped,
    info: Value,
    log: PathBuf,
}

impl HostServers {
    /// Starts `net_host.py` as the test user with SPECs `NAME,KIND,ADDR,PORT`.
    fn start(w: &World, specs: &[&str]) -> HostServers {
        let script = w.write("helpers/net_host.py", &helper_text("net_host.py"));
        let log = w.root.join(format!("{}.log", unique("net")));
        let mut cmd = w.host(PYTHON);
        cmd.arg(&script).arg(&log).args(specs);
        let (child, info) = start_announcing(cmd, "the host servers");
        HostServers {
            _child: child,
            info,
            log,
        }
    }

    fn port(&self, name: &str) -> u16 {
        let p = self.info["ports"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no port for {name}: {}", self.info));
        u16::try_from(p).unwrap()
    }

    /// Every logged event so far.
    fn events(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The events of the server named `name`, without the kind and name.
    fn events_of(&self, name: &str) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|l| {
                let mut words = l.splitn(3, ' ');
                let _kind = words.next()?;
                (words.next()? == name).then(|| words.next().unwrap_or_default().to_owned())
            })
            .collect()
    }

    /// Waits until every one of `needles` appears somewhere in the log.
    #[track_caller]
    fn wait_for_all(&self, needles: &[String]) {
        let ok = wait_for(5, || {
            let all = self.events().join("\n");
            needles.iter().all(|n| all.contains(n.as_str()))
        });
        assert!(
            ok,
            "the host servers never logged all of {needles:?}; log:\n{}",
            self.events().join("\n")
        );
    }
}

/// Whether the host has an IPv6 loopback this process can listen on.
fn ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

/// The host's first usable non-loopback IPv4 and IPv6 addresses (`ip -o addr`), if any.
fn non_loopback_addrs() -> (Option<String>, Option<String>) {
    let Ok(o) = Command::new("ip")
        .args(["-o", "addr", "show"])
        .stdin(Stdio::null())
        .output()
    else {
        return (None, None);
    };
    let (mut v4, mut v6) = (None, None);
    for line in stdout(&o).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 4 || words[1] == "lo" || !line.contains("scope global") {
            continue;
        }
        if ["tentative", "dadfailed", "deprecated"]
            .iter()
            .any(|f| line.contains(f))
        {
            continue;
        }
        let addr = words[3].split('/').next().unwrap().to_owned();
        // Only addresses this host can really listen on.
        let bindable = |a: &str| std::net::TcpListener::bind((a, 0)).is_ok();
        match words[2] {
            "inet" if v4.is_none() && bindable(&addr) => v4 = Some(addr),
            "inet6" if v6.is_none() && bindable(&addr) => v6 = Some(addr),
            _ => {}
        }
    }
    (v4, v6)
}

/// `host` as it goes into a URL.
fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Whether a program the tests need is installed; reports a skip (a failure in CI) if not.
fn have(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip(&format!("{program} is not installed"));
    }
    found
}

fn is_fast_refusal(result: &Value) -> bool {
    matches!(
        result.as_str(),
        Some("ECONNREFUSED" | "ENETUNREACH" | "EHOSTUNREACH" | "EADDRNOTAVAIL")
    )
}

// ---------------------------------------------------------------------------------------
// --block-net: nothing on the host is reachable.

/// One connection attempt: what it is called, the probe kind, the address, the server.
struct Target {
    label: String,
    kind: &'static str,
    host: String,
    server: &'static str,
}

#[test]
fn block_net_reaches_no_host_listener_and_fails_fast() {
    for_each_user(|w| {
        let v6 = ipv6_loopback();
        let (nl4, nl6) = non_loopback_addrs();
        let mut specs = vec!["t4,tcp,0.0.0.0,0", "u4,udp,0.0.0.0,0"];
        if v6 {
            specs.extend(["t6,tcp,::,0", "u6,udp,::,0"]);
        } else {
            eprintln!("SKIP: the host has no IPv6 loopback; the [::1] checks are left out");
        }
        let host = HostServers::start(w, &specs);

        let target = |label: &str, kind, addr: &str, server| Target {
            label: label.to_owned(),
            kind,
            host: addr.to_owned(),
            server,
        };
        let mut targets = vec![
            target("tcp-lo4", "tcp", "127.0.0.1", "t4"),
            target("udp-lo4", "udp", "127.0.0.1", "u4"),
        ];
        if v6 {
            targets.push(target("tcp-lo6", "tcp", "::1", "t6"));
            targets.push(target("udp-lo6", "udp", "::1", "u6"));
        }
        match &nl4 {
            Some(a) => {
                targets.push(target("tcp-nl4", "tcp", a, "t4"));
                targets.push(target("udp-nl4", "udp", a, "u4"));
            }
            None => skip("the host has no non-loopback IPv4 address"),
        }
        match (&nl6, v6) {
            (Some(a), true) => targets.push(target("tcp-nl6", "tcp", a, "t6")),
            _ => eprintln!("SKIP: no usable non-loopback IPv6 address on the host"),
        }
        let specs_for = |phase: &str| -> Value {
            Value::Array(
                targets
                    .iter()
                    .map(|t| {
                        json!({"kind": t.kind, "host": t.host, "port": host.port(t.server),
                               "tag": format!("{phase}-{}", t.label)})
                    })
                    .collect(),
            )
        };

        // Under --block-net: every TCP attempt is refused or unreachable, at once.
        let (blocked, took) = attempts(w, Some(&["--block-net"]), &specs_for("blocked"));
        for (t, r) in targets.iter().zip(&blocked) {
            if t.kind == "tcp" {
                assert!(
                    is_fast_refusal(&r["result"]),
                    "{} to {} under --block-net: {r}",
                    t.kind,
                    t.host
                );
                assert!(
                    r["ms"].as_u64().unwrap() < FAST.as_millis() as u64,
                    "{} to {} took too long to fail: {r}",
                    t.kind,
                    t.host
                );
            }
        }
        assert!(
            took < Duration::from_secs(5),
            "the blocked run took {took:?}"
        );

        // Controls: the same probe outside Sandy reaches every listener; inside Sandy
        // without --block-net, the TCP listeners' ports granted (the host's own services
        // are closed otherwise), every TCP listener, and no UDP one (UDP stays in the
        // sandbox's own namespace).
        let (control, _) = attempts(w, None, &specs_for("control"));
        let ports: Vec<String> = ["t4", "t6"]
            .iter()
            .filter(|s| *s == &"t4" || v6)
            .map(|s| host.port(s).to_string())
            .collect();
        let mut grants: Vec<&str> = Vec::new();
        for p in &ports {
            grants.extend(["--allow-local-port", p.as_str()]);
        }
        let (open, _) = attempts(w, Some(&grants), &specs_for("open"));
        for (t, (c, o)) in targets.iter().zip(control.iter().zip(&open)) {
            assert_eq!(c["result"], "ok", "control {} to {}: {c}", t.kind, t.host);
            if t.kind == "tcp" {
                assert_eq!(
                    o["result"], "ok",
                    "without --block-net, granted, {} to {}: {o}",
                    t.kind, t.host
                );
            }
        }
        let expected: Vec<String> = targets
            .iter()
            .map(|t| format!("control-{}", t.label))
            .chain(
                targets
                    .iter()
                    .filter(|t| t.kind == "tcp")
                    .map(|t| format!("open-{}", t.label)),
            )
            .collect();
        host.wait_for_all(&expected);

        // Judged on the host: nothing from the blocked run ever arrived.
        let log = host.events();
        assert!(
            !log.iter().any(|l| l.contains("blocked-")),
            "a host listener saw traffic from under --block-net:\n{}",
            log.join("\n")
        );
        let tcp_targets = targets.iter().filter(|t| t.kind == "tcp").count();
        let accepted = log.iter().filter(|l| l.ends_with(" accepted")).count();
        assert_eq!(
            accepted,
            2 * tcp_targets,
            "unexpected connections:\n{}",
            log.join("\n")
        );
        let datagrams = log.iter().filter(|l| l.starts_with("udp ")).count();
        assert_eq!(
            datagrams,
            targets.len() - tcp_targets,
            "unexpected datagrams:\n{}",
            log.join("\n")
        );
    });
}

#[test]
fn block_net_curl_to_a_host_http_server_fails_fast() {
    if !have(CURL) {
        return;
    }
    for_each_user(|w| {
        let host = HostServers::start(w, &["h,http,0.0.0.0,0"]);
        let port = host.port("h");
        let (nl4, _) = non_loopback_addrs();
        let mut addrs = vec!["127.0.0.1".to_owned()];
        match nl4 {
            Some(a) => addrs.push(a),
            None => skip("the host has no non-loopback IPv4 address"),
        }
        let url = |addr: &str, path: &str| format!("http://{}:{port}/{path}", url_host(addr));
        // Direct connections: past the proxy variables, which lead to Sandy's proxy and
        // its "blocked by --block-net" answer (tests/egress.rs).
        let curl = ["-sS", "--max-time", "4", "--noproxy", "*"];

        for (i, addr) in addrs.iter().enumerate() {
            let u = url(addr, &format!("blocked-{i}"));
            let mut args = vec![CURL];
            args.extend(curl);
            args.push(&u);
            let (o, took) = timed(sandy_cmd(w, &["--block-net"], &args), 30);
            assert_code(&o, 7, &format!("curl {u} under --block-net"));
            assert!(took < FAST, "curl {u} took {took:?} to fail");

            // Controls: outside Sandy, and inside without --block-net, curl gets the page.
            let u = url(addr, &format!("control-{i}"));
            let mut c = w.host(CURL);
            c.args(curl).arg(&u).stdin(Stdio::null());
            let c = run_timeout(c, 20);
            assert_code(&c, 0, &format!("control curl {u}"));
            assert_eq!(stdout(&c), format!("hello from host h /control-{i}\n"));
            let u = url(addr, &format!("open-{i}"));
            let mut args = vec![CURL];
            args.extend(curl);
            args.push(&u);
            let port = host.port("h").to_string();
            let o = sandy_run(w, &["--allow-local-port", &port], &args);
            assert_code(&o, 0, &format!("curl {u} without --block-net"));
            assert_eq!(stdout(&o), format!("hello from host h /open-{i}\n"));
        }

        let seen: BTreeSet<String> = host
            .events_of("h")
            .iter()
            .map(|e| e.split(' ').nth(1).unwrap_or_default().to_owned())
            .collect();
        let expected: BTreeSet<String> = (0..addrs.len())
            .flat_map(|i| [format!("/control-{i}"), format!("/open-{i}")])
            .collect();
        assert_eq!(seen, expected, "the host server saw: {:?}", host.events());
    });
}

#[test]
fn block_net_denies_mptcp_raw_and_packet_sockets() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["t,tcp,127.0.0.1,0"]);
        let port = host.port("t");
        let specs = |phase: &str| {
            json!([
                {"kind": "mptcp4", "host": "127.0.0.1", "port": port, "tag": format!("{phase}-mptcp")},
                {"kind": "mptcp6"},
                {"kind": "packet"},
                {"kind": "raw"},
            ])
        };
        let (inside, _) = attempts(w, Some(&["--block-net"]), &specs("blocked"));
        for (what, r) in ["MPTCP/IPv4", "MPTCP/IPv6", "AF_PACKET", "SOCK_RAW"]
            .iter()
            .zip(&inside)
        {
            assert_eq!(r["result"], "EPERM", "{what} under --block-net: {r}");
        }

        // Control: outside Sandy MPTCP works or the kernel lacks it; either way the
        // answer is not the filter's EPERM. Without --block-net an MPTCP socket stays in
        // the sandbox's own namespace (only TCP is made in the host's): it reaches
        // nothing of the host.
        let (control, _) = attempts(w, None, &specs("control"));
        let (open, _) = attempts(w, Some(&[]), &specs("open"));
        let c = control[0]["result"].as_str().unwrap().to_owned();
        assert!(
            matches!(
                c.as_str(),
                "ok" | "EPROTONOSUPPORT" | "ENOPROTOOPT" | "EINVAL" | "EAFNOSUPPORT"
            ),
            "control MPTCP: {}",
            control[0]
        );
        assert_ne!(
            open[0]["result"], "ok",
            "MPTCP without --block-net reached the host: {}",
            open[0]
        );
        if c == "ok" {
            host.wait_for_all(&["data=control-mptcp".into()]);
        } else {
            eprintln!("note: this kernel has no MPTCP ({c}); EPERM inside still differs");
        }
        if w.user.uid == 0 {
            for (i, what) in [(2, "AF_PACKET"), (3, "SOCK_RAW")] {
                assert_eq!(control[i]["result"], "ok", "control {what}: {}", control[i]);
            }
        }
        let log = host.events();
        assert!(
            !log.iter().any(|l| l.contains("blocked-")),
            "the host listener saw an MPTCP connection from under --block-net:\n{}",
            log.join("\n")
        );
    });
}

#[test]
fn block_net_dns_lookup_fails_fast() {
    for_each_user(|w| {
        let p = probe(w);
        let (o, took) = timed(
            sandy_cmd(w, &["--block-net"], &["getent", "hosts", "example.com"]),
            30,
        );
        assert_ne!(
            o.status.code(),
            Some(0),
            "getent resolved example.com under --block-net: {}",
            stdout(&o)
        );
        assert!(
            took < Duration::from_secs(5),
            "getent took {took:?} to fail"
        );

        let (o, took) = timed(
            sandy_cmd(w, &["--block-net"], &[PYTHON, p, "dns", "example.com"]),
            30,
        );
        assert_code(&o, 0, "dns probe");
        let r = json_line(&o, "dns");
        assert_ne!(r["result"], "ok", "getaddrinfo resolved under --block-net");
        assert!(
            took < Duration::from_secs(5),
            "getaddrinfo took {took:?} to fail"
        );

        // Control: name lookup itself works inside (from /etc/hosts).
        let o = sandy_run(w, &["--block-net"], &["getent", "hosts", "localhost"]);
        assert_code(&o, 0, "getent hosts localhost under --block-net");
        // Control: outside, the host may or may not resolve names.
        let mut c = w.host(PYTHON);
        c.args([p, "dns", "example.com"]).stdin(Stdio::null());
        let c = json_line(&run_timeout(c, 30), "dns control");
        if c["result"] != "ok" {
            eprintln!("note: the host cannot resolve example.com either ({c}); only the failure inside is shown");
        }
    });
}

// ---------------------------------------------------------------------------------------
// --block-net: what the sandbox sees of its own network.

fn interfaces_in(listing: &str) -> BTreeSet<String> {
    listing
        .split_whitespace()
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
}

#[test]
fn block_net_leaves_only_loopback_up() {
    if !have("ip") {
        return;
    }
    for_each_user(|w| {
        let o = sandy_run(w, &["--block-net"], &["ip", "-o", "link"]);
        assert_code(&o, 0, "ip -o link");
        let links: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
        assert_eq!(links.len(), 1, "interfaces under --block-net: {links:?}");
        assert!(
            links[0].starts_with("1: lo: <") && links[0].contains(",UP"),
            "loopback is missing or down: {links:?}"
        );
        let o = sandy_run(w, &["--block-net"], &["ip", "-o", "addr"]);
        assert!(
            stdout(&o).contains("inet 127.0.0.1/8"),
            "lo has no 127.0.0.1: {}",
            stdout(&o)
        );
        let o = sandy_run(
            w,
            &["--block-net"],
            &["/bin/sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"],
        );
        assert_eq!(
            interfaces_in(&stdout(&o)),
            BTreeSet::from(["lo".to_owned()])
        );

        // Control: without --block-net the host's interfaces show.
        let o = sandy_run(w, &[], &["ip", "-o", "link"]);
        let host_links = stdout(&o).lines().count();
        if host_links > 1 {
            assert!(host_links > links.len());
        } else {
            skip("the host has only a loopback interface; nothing to contrast");
        }
    });
}

#[test]
fn block_net_sys_class_net_shows_only_loopback() {
    for_each_user(|w| {
        let o = sandy_run(w, &["--block-net"], &["ls", "/sys/class/net"]);
        assert_code(&o, 0, "ls /sys/class/net");
        let inside = interfaces_in(&stdout(&o));
        let control = sandy_run(w, &[], &["ls", "/sys/class/net"]);
        let outside = interfaces_in(&stdout(&control));
        if outside.len() <= 1 {
            skip("the host has only a loopback interface; nothing to contrast");
        }
        assert_eq!(
            inside,
            BTreeSet::from(["lo".to_owned()]),
            "/sys/class/net under --block-net lists the host's interfaces (host: {outside:?})"
        );
    });
}

#[test]
fn loopback_inside_the_sandbox_works_under_block_net() {
    for_each_user(|w| {
        let p = probe(w);
        let o = sandy_run(w, &["--block-net"], &[PYTHON, p, "echo"]);
        assert_code(&o, 0, "server and client inside");
        assert_eq!(json_line(&o, "echo")["reply"], "echo:ping-inside");
    });
}

// ---------------------------------------------------------------------------------------
// --allow-local-port and --numbat-collector.

#[test]
fn allowed_local_port_is_relayed_and_nothing_else() {
    if !have(CURL) {
        return;
    }
    for_each_user(|w| {
        // h: the granted port on every IPv4 address; n: the port above it; g: a second
        // granted port (the flag repeats).
        let host = HostServers::start(
            w,
            &["h,http,0.0.0.0,0", "n,tcp,0.0.0.0,+h", "g,http,127.0.0.1,0"],
        );
        let (p, next, g) = (host.port("h"), host.port("n"), host.port("g"));
        assert_eq!(next, p + 1);
        let (nl4, _) = non_loopback_addrs();
        let curl = |url: String, tag: &str| {
            // Direct, past the proxy variables (the proxy is tested in tests/egress.rs).
            format!("{CURL} -sS --max-time 4 --noproxy '*' '{url}'; echo \"rc-{tag}=$?\"; ")
        };
        let mut script = curl(format!("http://127.0.0.1:{p}/relayed-1"), "r1");
        script += &curl(format!("http://127.0.0.1:{p}/relayed-2"), "r2");
        script += &curl(format!("http://127.0.0.1:{g}/relayed-g"), "g");
        script += &curl(format!("http://127.0.0.1:{next}/blocked-next"), "next");
        script += &curl(format!("http://[::1]:{p}/blocked-v6"), "v6");
        match &nl4 {
            Some(a) => script += &curl(format!("http://{a}:{p}/blocked-direct"), "direct"),
            None => skip("the host has no non-loopback IPv4 address"),
        }
        let (o, took) = timed(
            sandy_cmd(
                w,
                &[
                    "--block-net",
                    "--allow-local-port",
                    &p.to_string(),
                    "--allow-local-port",
                    &g.to_string(),
                ],
                &["/bin/sh", "-c", &script],
            ),
            30,
        );
        assert_code(&o, 0, "curls under --allow-local-port");
        let out = stdout(&o);
        for (body, rc) in [
            ("hello from host h /relayed-1\n", "rc-r1=0"),
            ("hello from host h /relayed-2\n", "rc-r2=0"),
            ("hello from host g /relayed-g\n", "rc-g=0"),
        ] {
            assert!(
                out.contains(body) && out.contains(rc),
                "the relayed request failed ({rc}):\n{out}\n{}",
                stderr(&o)
            );
        }
        for rc in ["rc-next=7", "rc-v6=7"] {
            assert!(out.contains(rc), "expected {rc}:\n{out}");
        }
        if nl4.is_some() {
            assert!(out.contains("rc-direct=7"), "expected rc-direct=7:\n{out}");
        }
        assert!(took < Duration::from_secs(10), "the run took {took:?}");

        // Controls: outside Sandy the non-loopback address and the port above are open.
        if let Some(a) = &nl4 {
            let mut c = w.host(CURL);
            c.args(["-sS", "--max-time", "4"])
                .arg(format!("http://{a}:{p}/control-direct"))
                .stdin(Stdio::null());
            assert_code(&run_timeout(c, 20), 0, "control curl to the host address");
        }
        let (c, _) = attempts(
            w,
            None,
            &json!([{"kind": "tcp", "host": "127.0.0.1", "port": next, "tag": "control-next"}]),
        );
        assert_eq!(c[0]["result"], "ok", "control to the port above: {}", c[0]);
        host.wait_for_all(&["data=control-next".into()]);

        // Judged on the host: exactly the relayed requests (from 127.0.0.1) and the
        // control reached the granted port; only the control reached the one above.
        let mut h: Vec<String> = host.events_of("h");
        h.sort();
        let mut expected = vec![
            "127.0.0.1 /relayed-1".to_owned(),
            "127.0.0.1 /relayed-2".to_owned(),
        ];
        if let Some(a) = &nl4 {
            expected.push(format!("{a} /control-direct"));
        }
        expected.sort();
        assert_eq!(h, expected, "requests at the granted port");
        assert_eq!(host.events_of("g"), vec!["127.0.0.1 /relayed-g".to_owned()]);
        assert_eq!(
            host.events_of("n"),
            vec![
                "127.0.0.1 accepted".to_owned(),
                "127.0.0.1 data=control-next".to_owned()
            ],
            "the port above the granted one"
        );
    });
}

/// Judged on the host: the server `name` logged `count` uploads (ids 0..count), each whole
/// and uncorrupted.
#[track_caller]
fn assert_uploads_arrived(host: &HostServers, name: &str, count: usize) {
    let mut expected: Vec<String> = (0..count)
        .map(|id| {
            format!(
                "127.0.0.1 id={id} up={} n={BULK_SIZE}",
                host.info["bulk_up"][id.to_string()].as_str().unwrap()
            )
        })
        .collect();
    expected.sort();
    assert!(
        wait_for(10, || host.events_of(name).len() >= count),
        "{:?}",
        host.events()
    );
    let mut seen = host.events_of(name);
    seen.sort();
    assert_eq!(seen, expected, "uploads as the host server saw them");
}

#[test]
fn relay_carries_parallel_bulk_transfers_intact() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["b,bulk,127.0.0.1,0"]);
        let port = host.port("b").to_string();
        let p = probe(w);
        let (o, took) = timed(
            sandy_cmd(
                w,
                &["--block-net", "--allow-local-port", &port],
                &[PYTHON, p, "bulk", &port, "10"],
            ),
            60,
        );
        assert_code(&o, 0, "bulk transfers");
        eprintln!("ten parallel 10 MiB transfers each way took {took:?}");
        let got = json_line(&o, "bulk");
        for id in 0..10 {
            let r = &got[id.to_string()];
            assert_eq!(r["n"], BULK_SIZE, "download {id}: {r}");
            assert_eq!(
                r["down"],
                host.info["bulk_down"][id.to_string()],
                "download {id} arrived corrupted"
            );
        }
        // Judged on the host: every upload arrived whole, through the relay.
        assert_uploads_arrived(&host, "b", 10);
    });
}

/// The sandbox sends and exits at once: what it sent is still in flight inside the relay
/// when the target is gone, and must reach the host before Sandy exits.
#[test]
fn data_sent_just_before_the_target_exits_reaches_the_host() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["s,sink,127.0.0.1,0"]);
        let port = host.port("s").to_string();
        let p = probe(w);
        let (o, _) = timed(
            sandy_cmd(
                w,
                &["--block-net", "--allow-local-port", &port],
                &[PYTHON, p, "upload", &port, "10"],
            ),
            60,
        );
        assert_code(&o, 0, "uploads");
        assert_eq!(json_line(&o, "upload")["sent"], 10);
        // Judged on the host once Sandy has exited: every upload arrived whole.
        assert_uploads_arrived(&host, "s", 10);
    });
}

/// The failure path of the wait above: a host service that never reads keeps the
/// sandbox's last bytes inside the relay. Sandy gives up after its grace period, says so
/// in one line, and still exits with the target's status.
#[test]
fn undeliverable_relay_data_is_reported_and_sandy_still_exits() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["s,stall,127.0.0.1,0"]);
        let port = host.port("s").to_string();
        let p = probe(w);
        let (o, _) = timed(
            sandy_cmd(
                w,
                &["--block-net", "--allow-local-port", &port],
                &[PYTHON, p, "fill", &port],
            ),
            60,
        );
        assert_code(&o, 0, "the target's own status");
        assert!(json_line(&o, "fill")["filled"].as_u64().unwrap() > 0);
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines,
            [
                "sandy: data the sandbox sent through a local-port relay was still being \
              delivered after 5 s; the rest is dropped"
            ],
            "{err}"
        );
        assert_eq!(host.events_of("s"), ["127.0.0.1 open"]);
    });
}

#[test]
fn relay_supports_half_close() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["c,halfclose,127.0.0.1,0"]);
        let port = host.port("c").to_string();
        let p = probe(w);

        // Control: outside Sandy the server answers after the client's EOF.
        let mut c = w.host(PYTHON);
        c.args([p, "halfclose", &port, "half-control"])
            .stdin(Stdio::null());
        let c = json_line(&run_timeout(c, 20), "half-close control");
        assert_eq!(c["reply"], "reply:half-control", "control: {c}");

        let (o, took) = timed(
            sandy_cmd(
                w,
                &["--block-net", "--allow-local-port", &port],
                &[PYTHON, p, "halfclose", &port, "half-inside"],
            ),
            30,
        );
        assert_code(&o, 0, "half-close inside");
        let r = json_line(&o, "half-close");
        assert_eq!(r["result"], "ok", "{r}");
        assert_eq!(
            r["reply"], "reply:half-inside",
            "no reply after a half-close: {r}"
        );
        assert!(took < Duration::from_secs(4), "half-close took {took:?}");
        assert_eq!(
            host.events_of("c"),
            vec![
                "127.0.0.1 got=half-control".to_owned(),
                "127.0.0.1 got=half-inside".to_owned()
            ]
        );
    });
}

#[test]
fn relay_ends_with_the_run() {
    for_each_user(|w| {
        let host = HostServers::start(w, &["k,hold,127.0.0.1,0"]);
        let port = host.port("k").to_string();
        let p = probe(w);
        let dir = w.project.join("hold");
        std::fs::create_dir(&dir).unwrap();
        w.chown_all();
        let held = dir.join("held");
        // A background process inside holds a relayed connection after the target exits.
        let script = format!(
            "{PYTHON} {p} hold {port} hold </dev/null >/dev/null 2>&1 &\n\
             i=0; while [ ! -e hold/held ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\n\
             test -e hold/held"
        );
        let mut cmd = sandy_cmd(
            w,
            &["--block-net", "--allow-local-port", &port],
            &["/bin/sh", "-c", &script],
        );
        // The background process keeps no pipe of ours open.
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let started = Instant::now();
        let mut sandy = Reaped(cmd.spawn().unwrap());
        let status = loop {
            if let Some(s) = sandy.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "sandy did not exit while a relayed connection was open"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // (The pid the holder wrote is its pid inside the sandbox's PID namespace: not a
        // host pid.)
        assert!(held.exists());
        assert_eq!(status.code(), Some(0), "the holder never connected");
        assert_eq!(
            host.events_of("k").first().map(String::as_str),
            Some("127.0.0.1 open"),
            "the relayed connection never reached the host"
        );

        // Judged on the host: the relayed connection closes with the run.
        assert!(
            wait_for(5, || host.events_of("k").len() >= 2),
            "the host still has a relayed connection open after sandy exited: {:?}",
            host.events()
        );
        assert_eq!(host.events_of("k")[1], "127.0.0.1 closed");

        // And nothing inside is left to use the port: the holder ended with the run (it
        // would answer `go` by connecting again and writing `after`).
        std::fs::write(dir.join("go"), "").unwrap();
        let after = dir.join("after");
        assert!(
            !wait_for(2, || after.exists()),
            "the holder outlived the run: {:?}",
            std::fs::read_to_string(&after)
        );
        assert_eq!(host.events_of("k").len(), 2, "{:?}", host.events());
    });
}

#[test]
fn numbat_collector_port_is_relayed() {
    if !have(CURL) {
        return;
    }
    for_each_user(|w| {
        let host = HostServers::start(w, &["m,http,127.0.0.1,0"]);
        let port = host.port("m");
        let flag = format!("--numbat-collector={port}");
        let url = format!("http://127.0.0.1:{port}/v1/traces");
        let o = sandy_run(
            w,
            &["--block-net", &flag],
            &[CURL, "-sS", "--max-time", "4", &url],
        );
        assert_code(&o, 0, "curl to the collector");
        assert_eq!(stdout(&o), "hello from host m /v1/traces\n");
        assert_eq!(host.events_of("m"), vec!["127.0.0.1 /v1/traces".to_owned()]);
    });
}

// ---------------------------------------------------------------------------------------
// Dry run and usage errors.

fn dry_run(w: &World, flags: &[&str]) -> Value {
    let marker = w.project.join("marker");
    let script = format!("echo ran > '{}'", marker.display());
    let mut all = vec!["--dry-run"];
    all.extend_from_slice(flags);
    let o = sandy_run(w, &all, &["/bin/sh", "-c", &script]);
    assert_code(&o, 0, &format!("dry run {flags:?}"));
    assert!(!marker.exists(), "the dry run ran the command");
    parse_dry_run(&o.stdout, &format!("dry run {flags:?}"))
}

fn collector_enabled(doc: &Value) -> bool {
    let controls = doc["runtime_controls"].as_array().unwrap();
    let mine: Vec<&Value> = controls
        .iter()
        .filter(|c| c["service"] == "Numbat collector")
        .collect();
    match mine.as_slice() {
        [] => false,
        [c] => {
            assert_eq!(c["version"], Value::Null, "{c}");
            c["enabled"].as_bool().unwrap()
        }
        _ => panic!("the collector is listed twice: {controls:?}"),
    }
}

fn has_netns_layer(doc: &Value) -> bool {
    doc["enforcement"]["layers"]
        .as_array()
        .unwrap()
        .contains(&json!("network_namespace"))
}

#[test]
fn dry_run_shows_the_network_and_the_port_grants() {
    for_each_user(|w| {
        let doc = dry_run(w, &[]);
        assert_eq!(doc["network"], "allow_all");
        assert_eq!(doc["local_port_grants"], json!([]));
        assert!(!collector_enabled(&doc));
        assert!(!has_netns_layer(&doc));

        let doc = dry_run(w, &["--block-net"]);
        assert_eq!(doc["network"], "block_all");
        assert_eq!(doc["local_port_grants"], json!([]));
        assert!(!collector_enabled(&doc));
        assert!(has_netns_layer(&doc));

        let doc = dry_run(w, &["--block-net", "--numbat-collector"]);
        assert_eq!(
            doc["local_port_grants"],
            json!([{"port": 4318, "origin": "numbat_collector"}])
        );
        assert!(collector_enabled(&doc), "{}", doc["runtime_controls"]);
        assert!(doc["runtime_controls"].as_array().unwrap().contains(
            &json!({"service": "Numbat collector", "enabled": true, "version": null,
                "path": null, "script": null, "configuration": null})
        ));

        let doc = dry_run(w, &["--block-net", "--numbat-collector=4319"]);
        assert_eq!(
            doc["local_port_grants"],
            json!([{"port": 4319, "origin": "numbat_collector"}])
        );
        assert!(collector_enabled(&doc));

        let doc = dry_run(
            w,
            &[
                "--block-net",
                "--allow-local-port",
                "8080",
                "--allow-local-port",
                "65535",
            ],
        );
        assert_eq!(
            doc["local_port_grants"],
            json!([{"port": 8080, "origin": "flag"}, {"port": 65535, "origin": "flag"}])
        );
        assert!(!collector_enabled(&doc));

        // A port named twice is granted once.
        let doc = dry_run(
            w,
            &[
                "--block-net",
                "--numbat-collector=8080",
                "--allow-local-port",
                "8080",
                "--allow-local-port",
                "1",
            ],
        );
        assert_eq!(
            doc["local_port_grants"],
            json!([{"port": 8080, "origin": "numbat_collector"}, {"port": 1, "origin": "flag"}])
        );
    });
}

#[test]
fn bad_port_flags_are_usage_errors_and_run_nothing() {
    for_each_user(|w| {
        let marker = w.project.join("marker");
        let script = format!("echo ran > '{}'", marker.display());
        let cases: [(&[&str], &str); 5] = [
            (&["--allow-local-port", "0"], "1..=65535"),
            (&["--block-net", "--allow-local-port", "0"], "1..=65535"),
            (&["--block-net", "--allow-local-port", "65536"], "1..=65535"),
            (&["--block-net", "--allow-local-port", "http"], "http"),
            // The collector's port needs `=`: a separate word is a stray argument.
            (&["--block-net", "--numbat-collector", "4319"], "4319"),
        ];
        for (flags, needle) in cases {
            let o = sandy_run(w, flags, &["/bin/sh", "-c", &script]);
            assert_code(&o, 2, &format!("{flags:?}"));
            let err = stderr(&o);
            assert!(err.starts_with("error: "), "{flags:?}: {err}");
            assert!(
                err.contains(needle),
                "{flags:?}: message lacks {needle}: {err}"
            );
            assert!(o.stdout.is_empty(), "{flags:?}: stdout {}", stdout(&o));
            assert!(!marker.exists(), "{flags:?}: the target ran");
        }
        // Control: the same command with valid flags runs.
        let o = sandy_run(
            w,
            &["--block-net", "--allow-local-port", "8080"],
            &["/bin/sh", "-c", &script],
        );
        assert_code(&o, 0, "valid flags");
        assert!(marker.exists(), "the control run did not create the marker");
    });
}

/// Inside with the host's network: the sandbox's TCP sockets are made in the host's
/// network namespace by the supervisor (the socket broker), so TCP reaches a granted port
/// of the host (`--allow-local-port`; the host's own services are closed otherwise), names
/// resolve with `AI_ADDRCONFIG`, the interfaces are the host's, and the socket's flags
/// are the ones asked for; a raw socket stays refused (no capability goes with the
/// broker), UDP stays in the sandbox's own namespace (the datagram never reaches the
/// host), and the host's Unix sockets are not listed. With the observer off too.
const BROKER_PROBE: &str = r#"
import errno, fcntl, json, os, socket, sys
tcp_port, udp_port = int(sys.argv[1]), int(sys.argv[2])
res = {}
c = socket.create_connection(("127.0.0.1", tcp_port), timeout=5)
c.sendall(b"hello-tcp\n"); c.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"hello-udp\n", ("127.0.0.1", udp_port)); u.close()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
res["nonblock"] = bool(fcntl.fcntl(s, fcntl.F_GETFL) & os.O_NONBLOCK)
res["cloexec"] = bool(fcntl.fcntl(s, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
import ctypes  # Python always asks for SOCK_CLOEXEC; the C library does not
fd = ctypes.CDLL(None, use_errno=True).socket(socket.AF_INET, socket.SOCK_STREAM, 0)
res["plain_cloexec"] = bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
res["addrconfig"] = len(socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG)) > 0
res["interfaces"] = sorted(n for _, n in socket.if_nameindex())
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    res["raw"] = "allowed"
except OSError as e:
    res["raw"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res), flush=True)
"#;

/// A host TCP and UDP server on loopback that logs each line it receives.
const BROKER_HOST: &str = r#"
import socket, sys, threading
log = open(sys.argv[1], "a", buffering=1)
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
def tcp():
    while True:
        c, _ = t.accept(); log.write(c.recv(100).decode())
def udp():
    while True:
        log.write(u.recv(100).decode())
threading.Thread(target=tcp, daemon=True).start()
threading.Thread(target=udp, daemon=True).start()
print(t.getsockname()[1], u.getsockname()[1], flush=True)
threading.Event().wait(60)
"#;

#[test]
fn the_hosts_network_is_reached_through_the_socket_broker() {
    for_each_user(|w| {
        w.write("home/project/broker_probe.py", BROKER_PROBE);
        let host_py = w.write("broker_host.py", BROKER_HOST);
        let log = w.root.join("broker.log");
        let mut host = w.host(PYTHON);
        host.arg(&host_py).arg(&log);
        let (_host, line) = start_announcing_line(host, "the host servers");
        let ports: Vec<&str> = line.split_whitespace().collect();
        let interfaces = |o: &Output| json_line(o, "probe")["interfaces"].clone();
        let mut control = w.host(PYTHON);
        control.args(["broker_probe.py", ports[0], ports[1]]);
        let control = run_timeout(control, 20);
        assert_code(&control, 0, "control outside");
        let grant = ["--allow-local-port", ports[0]];
        let quiet = ["--explain=off", "--allow-local-port", ports[0]];
        for flags in [&grant[..], &quiet[..]] {
            let _ = std::fs::write(&log, "");
            let o = sandy_run(w, flags, &[PYTHON, "broker_probe.py", ports[0], ports[1]]);
            assert_code(&o, 0, &format!("probe inside {flags:?}"));
            let inside = json_line(&o, "probe");
            assert_eq!(inside["nonblock"], true, "{inside}");
            assert_eq!(inside["cloexec"], true, "{inside}");
            assert_eq!(inside["plain_cloexec"], false, "{inside}");
            assert_eq!(inside["addrconfig"], true, "{inside}");
            assert_eq!(inside["raw"], "EPERM", "{inside}");
            assert_eq!(inside["interfaces"], interfaces(&control), "{inside}");
            // Judged from the host: the granted TCP port heard from the run, the UDP
            // server on the host's loopback never did.
            assert!(
                wait_for(5, || {
                    std::fs::read_to_string(&log).is_ok_and(|s| s.contains("hello-tcp"))
                }),
                "the host servers never heard from the sandbox: {:?}",
                std::fs::read_to_string(&log)
            );
            std::thread::sleep(Duration::from_millis(300));
            let heard = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(!heard.contains("hello-udp"), "{heard}");
        }
    });
}
