//! The egress proxy's rows: one large download, connection latency (median and p99),
//! 200 concurrent connections, and the supervisor's peak RSS under that load, each side by
//! side with a direct connection in the same run. The download is measured twice more
//! from a server that paces its writes to a 1, a 5 and a 10 Gbit/s link (the kernel here has
//! no `tc`/netem to shape a real one): the unpaced row is the CPU-bound worst case, the
//! paced rows what a user sees when a link sets the pace.
//!
//! It needs its own network: as root, the benchmark re-runs itself under
//! `unshare -n -m` (`__net-rows`). The server is another process (`__net-serve`) in a
//! network namespace of its own, a stand-in for a remote host: it holds a public-looking
//! address (198.51.100.7) on its loopback, reached from the benchmark's namespace over a
//! veth pair and a route, and named in a hosts file bind-mounted over `/etc/hosts`. (The
//! proxy refuses the host's own addresses, so the server cannot sit in the proxy's
//! namespace.) Direct means the same client bare in the benchmark's namespace; proxied
//! means the client inside `sandy run --allow-domain bench.stand-in.test`. The client is
//! this executable (`__net-client`), copied into the project.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{vm_hwm_kib, Res, Stats};

pub const ADDRESS: &str = "198.51.100.7";
pub const NAME: &str = "bench.stand-in.test";
/// The large download.
const BIG: usize = 256 * 1024 * 1024;
const LATENCY_REQUESTS: usize = 1000;
const CONCURRENT: usize = 200;

/// One row as the parent renders it: workload, then the six cells.
pub type RawRow = (String, [String; 6]);

/// In the parent: runs the rows in a network namespace of their own. `None` with the
/// reason when that cannot be done (not root, no `unshare`).
pub fn rows(sandy: &Path, scratch: &Path) -> Result<Vec<RawRow>, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("unshare")
        .args(["-n", "-m", "--propagation", "private"])
        .arg(&me)
        .arg("__net-rows")
        .arg(sandy)
        .arg(scratch)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("unshare: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the network rows need root (a network namespace of their own): {}",
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('\t');
            let workload = parts.next()?.to_owned();
            let cells: Vec<String> = parts.map(str::to_owned).collect();
            Some((workload, cells.try_into().ok()?))
        })
        .collect())
}

fn sh(cmd: &mut Command) -> Res<()> {
    let status = cmd.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {status}").into())
    }
}

/// The paced downloads' rates (Mbit/s): a 1, a 5 and a 10 Gbit/s link, as `tc`/netem (not
/// available in this kernel) would shape them.
const PACED_MBIT: [u64; 3] = [1_000, 5_000, 10_000];

/// Answers `GET /big` with `BIG` bytes as fast as it can, `GET /paced/MBIT` with `BIG`
/// bytes at that rate (writes of 64 KiB, each sent when the schedule reaches it), and
/// anything else with a short body.
fn serve(listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut stream = stream;
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let path = text.split_whitespace().nth(1).unwrap_or("/");
            let path = path.rsplit_once(NAME).map_or(path, |(_, p)| p);
            let paced: Option<u64> = path.strip_prefix("/paced/").and_then(|r| r.parse().ok());
            let big = path == "/big" || paced.is_some();
            let len = if big { BIG } else { 3 };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
            );
            if !big {
                let _ = stream.write_all(b"ok\n");
                return;
            }
            let chunk = vec![
                0u8;
                if paced.is_some() {
                    64 * 1024
                } else {
                    256 * 1024
                }
            ];
            let start = Instant::now();
            let mut sent = 0usize;
            while sent < BIG {
                if let Some(mbit) = paced {
                    // Bytes per second = mbit * 125_000; wait until `sent` is due.
                    let due = Duration::from_secs_f64(sent as f64 / (mbit as f64 * 125_000.0));
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                let k = (BIG - sent).min(chunk.len());
                if stream.write_all(&chunk[..k]).is_err() {
                    return;
                }
                sent += k;
            }
        });
    }
}

/// The server process, in a network namespace of its own; it ends when its standard
/// input closes (when this value is dropped, or the benchmark dies).
struct Server(std::process::Child);

impl Server {
    /// Starts `__net-serve` under `unshare -n` and connects its namespace to this one: a
    /// veth pair (192.0.2.1 here, 192.0.2.2 there), `ADDRESS` on its loopback, a route to
    /// it. Returns once the server answers.
    fn start() -> Res<Server> {
        let child = Command::new("unshare")
            .arg("-n")
            .arg(std::env::current_exe()?)
            .arg("__net-serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let server = Server(child);
        let pid = server.0.id().to_string();
        let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ns(&pid) == ns("self") {
            if Instant::now() > deadline {
                return Err("the server's network namespace did not appear".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        sh(Command::new("ip").args([
            "link", "add", "bench-h", "type", "veth", "peer", "name", "bench-i", "netns", &pid,
        ]))?;
        sh(Command::new("ip").args(["addr", "add", "192.0.2.1/24", "dev", "bench-h"]))?;
        sh(Command::new("ip").args(["link", "set", "bench-h", "up"]))?;
        sh(Command::new("nsenter")
            .args(["-t", &pid, "-n", "sh", "-c"])
            .arg(format!(
                "ip link set lo up && ip addr add {ADDRESS}/32 dev lo && \
             ip addr add 192.0.2.2/24 dev bench-i && ip link set bench-i up && \
             ip route add default via 192.0.2.1"
            )))?;
        sh(Command::new("ip").args([
            "route",
            "add",
            &format!("{ADDRESS}/32"),
            "via",
            "192.0.2.2",
        ]))?;
        while TcpStream::connect((ADDRESS, 80)).is_err() {
            if Instant::now() > deadline {
                return Err("the server does not answer".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// The server process (`__net-serve`, in its own network namespace): binds `ADDRESS:80`
/// once the address is there, serves until its standard input closes.
pub fn serve_child() -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let listener = loop {
        match TcpListener::bind((ADDRESS, 80)) {
            Ok(l) => break l,
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    std::thread::spawn(move || serve(listener));
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    Ok(())
}

/// Where the reference relay listens, in the benchmark's namespace (the proxy's side).
const RELAY: &str = "127.0.0.1:3129";

/// The reference relay: every connection accepted on `RELAY` passed on to the server, each
/// direction on a thread of its own with blocking `splice(2)` through a 1 MiB pipe. No
/// policy, no parsing, no runtime: the least any relay between the client and the server
/// costs on this machine, the ceiling for the proxy's throughput.
fn reference_relay(listener: TcpListener) {
    for client in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let Ok(upstream) = TcpStream::connect((ADDRESS, 80)) else {
                return;
            };
            let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) else {
                return;
            };
            let up = std::thread::spawn(move || splice_through(&c, &u));
            splice_through(&upstream, &client);
            let _ = up.join();
        });
    }
}

/// Moves everything `from` sends to `to`, then half-closes `to`.
fn splice_through(from: &TcpStream, to: &TcpStream) {
    use nix::fcntl::{fcntl, splice, FcntlArg, SpliceFFlags};
    let Ok((r, w)) = nix::unistd::pipe() else {
        return;
    };
    let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(1 << 20));
    'outer: loop {
        let mut n = match splice(from, None, &w, None, 1 << 20, SpliceFFlags::SPLICE_F_MOVE) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while n > 0 {
            match splice(&r, None, to, None, n, SpliceFFlags::SPLICE_F_MOVE) {
                Ok(0) | Err(_) => break 'outer,
                Ok(m) => n -= m,
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The cells of a throughput row: direct and proxied MiB/s, the difference, the ratio and
/// the goal (proxied ≥ 90% of direct).
fn throughput_cells(direct: f64, proxied: f64) -> [String; 6] {
    [
        format!("{direct:.0} MiB/s"),
        format!("{proxied:.0} MiB/s"),
        format!("{:+.1}%", 100.0 * (proxied - direct) / direct),
        format!("{:.3}", proxied / direct),
        "throughput ≥ 90% of direct".to_owned(),
        yes_no(proxied >= 0.9 * direct),
    ]
}

/// In the namespace: sets it up, measures, prints the rows (tab-separated).
pub fn rows_child(sandy: &Path, scratch: &Path) -> Res<()> {
    sh(Command::new("ip").args(["link", "set", "lo", "up"]))?;
    let _server = Server::start()?;
    let hosts = scratch.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{ADDRESS} {NAME}\n"))?;
    sh(Command::new("mount")
        .arg("--bind")
        .arg(&hosts)
        .arg("/etc/hosts"))?;
    let relay = TcpListener::bind(RELAY)?;
    std::thread::spawn(move || reference_relay(relay));

    let project = scratch.join("net");
    std::fs::create_dir_all(&project)?;
    let client = project.join("client");
    std::fs::copy(std::env::current_exe()?, &client)?;
    let sandboxed = |args: &[&str]| -> Command {
        let mut cmd = Command::new(sandy);
        cmd.args([
            "run",
            "--allow-domain",
            NAME,
            "--",
            "./client",
            "__net-client",
        ])
        .args(args)
        .current_dir(&project)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
        cmd
    };
    let bare = |args: &[&str]| -> Command {
        let mut cmd = Command::new(&client);
        cmd.arg("__net-client")
            .args(args)
            .current_dir(&project)
            .stdin(Stdio::null());
        cmd
    };
    let samples = |mut cmd: Command| -> Res<Vec<f64>> {
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(format!("{cmd:?}: {}", out.status).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect())
    };

    // 1. One large download, three times each, alternating.
    // The reference relay's download alternates with them (its client bare, in this
    // namespace).
    let mut direct = Vec::new();
    let mut proxied = Vec::new();
    let mut relayed = Vec::new();
    for _ in 0..5 {
        direct.extend(samples(bare(&["download", "direct"]))?);
        proxied.extend(samples(sandboxed(&["download", "proxy"]))?);
        relayed.extend(samples(bare(&["download", "relay"]))?);
    }
    let (d, p, r) = (Stats::of(direct), Stats::of(proxied), Stats::of(relayed));
    let mib = BIG as f64 / (1024.0 * 1024.0);
    let rate = |s: &Stats| mib / (s.median / 1000.0);
    row(
        &format!(
            "egress: one {} MiB download through the proxy vs direct",
            BIG >> 20
        ),
        throughput_cells(rate(&d), rate(&p)),
    );
    let mut cells = throughput_cells(rate(&d), rate(&r));
    cells[4] = "— (reference: a bare splice relay)".to_owned();
    cells[5] = "—".to_owned();
    row(
        &format!(
            "egress: one {} MiB download through a bare splice relay vs direct (a relay's ceiling)",
            BIG >> 20
        ),
        cells,
    );

    // 1b. The same download from a server paced to a link's rate: what a user sees
    // when the link, not the CPU, sets the pace.
    for mbit in PACED_MBIT {
        let path = format!("/paced/{mbit}");
        let mut direct = Vec::new();
        let mut proxied = Vec::new();
        for _ in 0..3 {
            direct.extend(samples(bare(&["download", "direct", &path]))?);
            proxied.extend(samples(sandboxed(&["download", "proxy", &path]))?);
        }
        let (d, p) = (Stats::of(direct), Stats::of(proxied));
        let (dr, pr) = (mib / (d.median / 1000.0), mib / (p.median / 1000.0));
        row(
            &format!(
                "egress: one {} MiB download from a server paced to {} Gbit/s ({:.0} MiB/s)",
                BIG >> 20,
                mbit / 1000,
                mbit as f64 * 125_000.0 / (1024.0 * 1024.0)
            ),
            throughput_cells(dr, pr),
        );
    }

    // 2. Connection latency: sequential requests, time to the whole (tiny) response.
    let d = Stats::of(samples(bare(&["latency", "direct"]))?);
    let p = Stats::of(samples(sandboxed(&["latency", "proxy"]))?);
    let (d99, p99) = (d.p99, p.p99);
    latency_row(
        &format!("egress: connect + request latency, median of {LATENCY_REQUESTS}"),
        &d,
        &p,
        0.3,
    );
    row(
        &format!("egress: connect + request latency, p99 of {LATENCY_REQUESTS}"),
        [
            format!("{d99:.3} ms"),
            format!("{p99:.3} ms"),
            format!("{:+.3} ms", p99 - d99),
            format!("{:.3}", p99 / d99),
            "— (reference)".to_owned(),
            "—".to_owned(),
        ],
    );

    // 2b. The host's network (no flag): every connect is made by the supervisor after
    // checking the destination. To a remote server (198.51.100.7, not the host's), and to
    // a granted port of the host's loopback (the reference relay, `--allow-local-port`).
    let host_network = |extra: &[&str], args: &[&str]| -> Command {
        let mut cmd = Command::new(sandy);
        cmd.arg("run")
            .args(extra)
            .args(["--", "./client", "__net-client"])
            .args(args)
            .current_dir(&project)
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let relay_port = RELAY.rsplit(':').next().unwrap_or("3129");
    for (what, extra, mode) in [
        ("a remote server", &[][..], "direct"),
        (
            "a granted port of the host's loopback",
            &["--allow-local-port", relay_port][..],
            "relay",
        ),
    ] {
        let d = Stats::of(samples(bare(&["latency", mode]))?);
        let h = Stats::of(samples(host_network(extra, &["latency", mode]))?);
        latency_row(
            &format!(
                "host network: connect + request latency to {what}, median of {LATENCY_REQUESTS}"
            ),
            &d,
            &h,
            0.1,
        );
    }

    // 3. and 4. Concurrent connections, and the supervisor's peak RSS meanwhile.
    let direct_errors = samples(bare(&["concurrent", "direct"]))?;
    let mut cmd = sandboxed(&["concurrent", "proxy"]);
    cmd.stdout(Stdio::piped());
    let child = cmd.spawn()?;
    let pid = child.id();
    let mut peak = 0;
    let watcher = std::thread::spawn(move || child.wait_with_output());
    while !watcher.is_finished() {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = watcher.join().map_err(|_| "the watcher panicked")??;
    let proxied_errors: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let errors = |v: &[f64]| v.first().copied().unwrap_or(f64::NAN);
    row(
        &format!("egress: {CONCURRENT} concurrent connections, errors"),
        [
            format!("{}", errors(&direct_errors)),
            format!("{}", errors(&proxied_errors)),
            "—".to_owned(),
            "—".to_owned(),
            "no error".to_owned(),
            yes_no(errors(&proxied_errors) == 0.0 && out.status.success()),
        ],
    );
    row(
        &format!("egress: supervisor peak RSS under {CONCURRENT} concurrent connections"),
        [
            "—".to_owned(),
            format!("{:.2} MiB", peak as f64 / 1024.0),
            "—".to_owned(),
            "—".to_owned(),
            "≤ 16 MiB".to_owned(),
            yes_no(peak > 0 && peak <= 16 * 1024),
        ],
    );
    Ok(())
}

/// A latency row: the medians side by side, and whether the sandboxed one adds at most
/// `budget_ms`.
fn latency_row(workload: &str, direct: &Stats, sandboxed: &Stats, budget_ms: f64) {
    let added = sandboxed.median - direct.median;
    row(
        workload,
        [
            format!("{:.3} ms", direct.median),
            format!("{:.3} ms", sandboxed.median),
            format!("{added:+.3} ms"),
            format!("{:.3}", sandboxed.median / direct.median),
            format!("added ≤ {budget_ms} ms"),
            yes_no(added <= budget_ms),
        ],
    );
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn row(workload: &str, cells: [String; 6]) {
    println!("{workload}\t{}", cells.join("\t"));
}

/// Where a client connects, and the request line it sends.
fn target(mode: &str, path: &str) -> Res<(String, String)> {
    match mode {
        "direct" => Ok((format!("{ADDRESS}:80"), format!("GET {path} HTTP/1.1"))),
        "relay" => Ok((RELAY.to_owned(), format!("GET {path} HTTP/1.1"))),
        "proxy" => {
            let proxy = std::env::var("HTTP_PROXY")?;
            let addr = proxy.trim_start_matches("http://").trim_end_matches('/');
            Ok((addr.to_owned(), format!("GET http://{NAME}{path} HTTP/1.1")))
        }
        _ => Err(format!("unknown mode {mode}").into()),
    }
}

/// One request; returns the number of body bytes read.
fn request(addr: &str, line: &str) -> Res<usize> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    write!(s, "{line}\r\nHost: {NAME}\r\n\r\n")?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match s.read(&mut buf)? {
            0 => break,
            n => total += n,
        }
    }
    Ok(total)
}

/// The client, inside or outside the sandbox: prints its samples (ms) or error count.
pub fn client(args: &[String]) -> Res<()> {
    let (what, mode, path) = match args {
        [w, m] => (w.as_str(), m.as_str(), "/big"),
        [w, m, p] => (w.as_str(), m.as_str(), p.as_str()),
        _ => {
            return Err(
                "usage: __net-client download|latency|concurrent direct|proxy|relay [PATH]".into(),
            )
        }
    };
    match what {
        "download" => {
            let (addr, line) = target(mode, path)?;
            let t = Instant::now();
            let n = request(&addr, &line)?;
            if n < BIG {
                return Err(format!("short download: {n} bytes").into());
            }
            println!("{}", t.elapsed().as_secs_f64() * 1000.0);
        }
        "latency" => {
            let (addr, line) = target(mode, "/small")?;
            for _ in 0..LATENCY_REQUESTS {
                let t = Instant::now();
                request(&addr, &line)?;
                println!("{}", t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        "concurrent" => {
            let (addr, line) = target(mode, "/small")?;
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(CONCURRENT));
            let handles: Vec<_> = (0..CONCURRENT)
                .map(|_| {
                    let (addr, line, barrier) = (addr.clone(), line.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        request(&addr, &line).map(|n| n > 0).unwrap_or(false)
                    })
                })
                .collect();
            let failed = handles
                .into_iter()
                .map(|h| h.join().unwrap_or(false))
                .filter(|ok| !ok)
                .count();
            println!("{failed}");
        }
        _ => return Err(format!("unknown client action {what}").into()),
    }
    Ok(())
}
