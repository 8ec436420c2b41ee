//! The egress proxy: one listener (inside the sandbox's network namespace, served from the
//! supervisor outside it) that speaks HTTP CONNECT, plain HTTP forwarding (absolute-form
//! requests) and SOCKS5 (names resolved by Sandy, or literal addresses under the same
//! rules). Every destination is decided before any lookup; a refusal is answered at once
//! with the reason and the flag that would allow it. Names are resolved on the host and
//! each address is checked again, so an allowed name that resolves to a refused address
//! reaches nothing.
//!
//! Plain HTTP requests are forwarded with `Connection: close`; what the client sends after
//! the request head is passed to the same upstream unparsed, so a connection can never
//! reach a second host.
//!
//! The host's own addresses (every address of its interfaces, read at start and again
//! when older than [`crate::local::LOCAL_TTL`]) are refused like loopback unless a rule names
//! them. A tunnel (CONNECT, SOCKS5) whose client starts with a TLS handshake must name
//! the tunnel's own host in its ClientHello before anything is forwarded; on port 443 it
//! must start with one (`first_bytes`). The proxy bounds what a run can hold: tunnels
//! ([`Limits`]), and connections that have not sent their request yet, of which the
//! oldest is closed when a new one would exceed the bound.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::addr::canonical;
use crate::host::{parse_host, Host, NameError};
use crate::rules::{Decision, Denial, EgressPolicy, RuleOrigin, TlsRefusal};

/// Largest request head accepted (request line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one connection attempt upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Copy buffer per direction.
const COPY_BUFFER: usize = 64 * 1024;
/// Most header lines parsed in a request head.
const MAX_HEADERS: usize = 128;
/// How long a tunnel's client may take to send its TLS ClientHello once the client has
/// started sending (and, on port 443, from the tunnel's opening).
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes read for a ClientHello: one TLS record (header and its longest body). A
/// ClientHello split over several records is refused.
const MAX_HELLO: usize = 5 + 16_384;
/// The port on which a tunnel must start with TLS.
const TLS_PORT: u16 = 443;

/// Most tunnels (and forwarded plain HTTP requests) open at once in one run. Each holds
/// up to `TUNNEL_DESCRIPTORS` descriptors and two pipes of up to 1 MiB; 1024 is far
/// beyond what an agent and its tools keep open (a browser keeps a few per host), and it
/// keeps a run from taking the supervisor's descriptors and memory for itself.
pub const MAX_TUNNELS: usize = 1024;
/// Tunnels beyond [`MAX_TUNNELS`] kept for the destinations the agent profile names (its
/// model API, login and service endpoints, or a base URL), so that a flood of tunnels
/// elsewhere does not cut the agent off from its model.
pub const AGENT_RESERVE: usize = 32;
/// Most connections waiting for their request at once; over it, the oldest is closed.
pub const MAX_WAITING: usize = 4096;
/// Descriptors one tunnel holds: the client, the upstream, two pipes.
const TUNNEL_DESCRIPTORS: u64 = 6;
/// Descriptors kept for the rest of the supervisor (the log, the relay, name lookups).
const RESERVED_DESCRIPTORS: u64 = 128;

/// How much a run may hold open through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Tunnels open at once, for any destination.
    pub tunnels: usize,
    /// Further tunnels, only for destinations a profile or base URL rule allows.
    pub agent_reserve: usize,
    /// Connections that have not sent their whole request yet.
    pub waiting: usize,
}

impl Limits {
    /// The limits that fit `descriptors` (the process's open-file limit): the constants,
    /// lowered so that every tunnel and waiting connection together leave
    /// `RESERVED_DESCRIPTORS` free, and the proxy can always accept and answer.
    pub fn for_descriptors(descriptors: u64) -> Limits {
        let budget = descriptors.saturating_sub(RESERVED_DESCRIPTORS);
        let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        // At most half of the budget for tunnels.
        let tunnels = MAX_TUNNELS
            .min(as_usize(budget / 2 / TUNNEL_DESCRIPTORS))
            .max(1);
        let agent_reserve = AGENT_RESERVE.min(tunnels / 4);
        let held = (tunnels + agent_reserve) as u64 * TUNNEL_DESCRIPTORS;
        let waiting = MAX_WAITING
            .min(as_usize(budget.saturating_sub(held)))
            .max(1);
        Limits {
            tunnels,
            agent_reserve,
            waiting,
        }
    }

    /// [`Limits::for_descriptors`] of this process's current soft open-file limit.
    pub fn for_this_process() -> Limits {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024);
        Limits::for_descriptors(soft)
    }
}

/// What the proxy enforces, and where it logs.
pub struct ProxyConfig {
    pub policy: EgressPolicy,
    /// `--net-log`: one JSON line per decision.
    pub log: Option<std::fs::File>,
    pub limits: Limits,
}

#[derive(Debug, Default, Clone)]
struct Tally {
    allowed: u64,
    denied: u64,
    failed: u64,
    hint: Option<String>,
    reason: Option<String>,
    /// What a refused destination is, when the policy knows it (`--net agent`'s left out).
    known: Option<String>,
}

struct Shared {
    policy: EgressPolicy,
    log: Option<Mutex<std::fs::File>>,
    tally: Mutex<BTreeMap<String, Tally>>,
    active: Mutex<usize>,
    idle: Condvar,
    limits: Limits,
    /// Tunnels open now.
    tunnels: Mutex<usize>,
    /// Connections waiting for their request, oldest first, each with what closes it.
    waiting: Mutex<Waiting>,
    host_addresses: crate::local::HostInterfaces,
}

#[derive(Default)]
struct Waiting {
    next: u64,
    open: BTreeMap<u64, Arc<tokio::sync::Notify>>,
}

/// A connection's place among those waiting for their request; leaving it (drop) ends
/// the wait's bound.
struct WaitSlot {
    shared: Arc<Shared>,
    id: u64,
    closed: Arc<tokio::sync::Notify>,
}

impl WaitSlot {
    /// Takes a place; if the bound is reached, the oldest waiting connection is told to
    /// close.
    fn take(shared: &Arc<Shared>) -> WaitSlot {
        let mut w = lock(&shared.waiting);
        while w.open.len() >= shared.limits.waiting {
            match w.open.pop_first() {
                Some((_, oldest)) => oldest.notify_one(),
                None => break,
            }
        }
        let id = w.next;
        w.next += 1;
        let closed = Arc::new(tokio::sync::Notify::new());
        w.open.insert(id, Arc::clone(&closed));
        WaitSlot {
            shared: Arc::clone(shared),
            id,
            closed,
        }
    }

    /// Runs `work` (reading the request) unless the connection is closed to make room
    /// first; `None` then.
    async fn bounded<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            out = work => Some(out),
            () = self.closed.notified() => None,
        }
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        lock(&self.shared.waiting).open.remove(&self.id);
    }
}

/// One open tunnel, counted until dropped.
struct TunnelPermit(Arc<Shared>);

impl TunnelPermit {
    /// A place for one more tunnel allowed by the rule at `rule`, or `None` at the limit
    /// (with the count then open).
    fn take(shared: &Arc<Shared>, rule: usize) -> Result<TunnelPermit, usize> {
        let agent = shared
            .policy
            .rules
            .get(rule)
            .is_some_and(|r| matches!(r.origin, RuleOrigin::Profile | RuleOrigin::BaseUrl));
        let limit = shared.limits.tunnels
            + if agent {
                shared.limits.agent_reserve
            } else {
                0
            };
        let mut n = lock(&shared.tunnels);
        if *n >= limit {
            return Err(*n);
        }
        *n += 1;
        Ok(TunnelPermit(Arc::clone(shared)))
    }
}

impl Drop for TunnelPermit {
    fn drop(&mut self) {
        let mut n = lock(&self.0.tunnels);
        *n = n.saturating_sub(1);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running proxy, owned by the supervisor; [`ProxyHandle::stop`] ends its thread.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts serving `listener` (the listener the bootstrap created inside the sandbox and
/// handed over) on a thread of its own.
pub fn spawn(listener: std::net::TcpListener, config: ProxyConfig) -> std::io::Result<ProxyHandle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(16)
        .thread_stack_size(256 * 1024)
        .thread_name("sandy-resolve")
        .build()?;
    listener.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        policy: config.policy,
        log: config.log.map(Mutex::new),
        tally: Mutex::new(BTreeMap::new()),
        active: Mutex::new(0),
        idle: Condvar::new(),
        limits: config.limits,
        tunnels: Mutex::new(0),
        waiting: Mutex::new(Waiting::default()),
        host_addresses: crate::local::HostInterfaces::new()?,
    });
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    let serving = Arc::clone(&shared);
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("sandy-proxy".into())
        .stack_size(512 * 1024)
        .spawn(move || {
            runtime.block_on(async move {
                loop {
                    let accepted = tokio::select! {
                        accepted = listener.accept() => accepted,
                        () = stopped.notified() => break,
                    };
                    let Ok((stream, _)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let shared = Arc::clone(&serving);
                    let guard = Active::start(&shared);
                    let slot = WaitSlot::take(&shared);
                    tokio::spawn(async move {
                        serve(stream, &shared, slot).await;
                        drop(guard);
                    });
                }
            });
        })?;
    Ok(ProxyHandle {
        shared,
        stop,
        thread: Some(thread),
    })
}

/// Counts a connection from accept until its log line is written.
struct Active(Arc<Shared>);

impl Active {
    fn start(shared: &Arc<Shared>) -> Active {
        *lock(&shared.active) += 1;
        Active(Arc::clone(shared))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let mut n = lock(&self.0.active);
        *n = n.saturating_sub(1);
        self.0.idle.notify_all();
    }
}

impl ProxyHandle {
    /// Ends the proxy once the run is over: its thread stops accepting, drops what is
    /// left of its connections (the run's processes are gone) and is joined.
    pub fn stop(mut self) {
        self.stop.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// After the target's exit (its sockets closed): waits, at most `limit`, until every
    /// connection has ended and been logged.
    pub fn finish(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut n = lock(&self.shared.active);
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = self
                .shared
                .idle
                .wait_timeout(n, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }

    /// The run's summary: the allowed destinations with counts, and one line for each
    /// that needs the user's attention (allowed but failed; refused, with the flag that
    /// would allow it). Empty when nothing was requested.
    pub fn summary(&self) -> Summary {
        let tally = lock(&self.shared.tally);
        let allowed: Vec<String> = tally
            .iter()
            .filter(|(_, t)| t.allowed > 0)
            .map(|(target, t)| format!("{target} ({})", t.allowed))
            .collect();
        let mut summary = Summary {
            allowed: None,
            hosts: allowed.len(),
            requests: tally.values().map(|t| t.allowed).sum(),
            attention: Vec::new(),
        };
        if !allowed.is_empty() {
            summary.allowed = Some(format!("network: allowed {}", allowed.join(", ")));
        }
        let lines = &mut summary.attention;
        for (target, t) in tally.iter().filter(|(_, t)| t.failed > 0 && t.denied == 0) {
            if let Some(r) = &t.reason {
                lines.push(format!(
                    "network: allowed {target} but it failed ({}x): {r}",
                    t.failed
                ));
            }
        }
        for (target, t) in tally.iter().filter(|(_, t)| t.denied > 0) {
            let times = if t.denied == 1 {
                "once".to_owned()
            } else {
                format!("{} times", t.denied)
            };
            let how = match (&t.hint, &t.reason) {
                (Some(h), _) => format!("; allow with {h}"),
                (None, Some(r)) => format!(": {r}"),
                (None, None) => String::new(),
            };
            let what = t
                .known
                .as_ref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default();
            lines.push(format!("network: refused {target}{what} {times}{how}"));
        }
        summary
    }
}

/// A run's network summary ([`ProxyHandle::summary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// `network: allowed HOST:PORT (N), ...`, when anything was allowed.
    pub allowed: Option<String>,
    /// How many destinations were allowed, and how many requests to them.
    pub hosts: usize,
    pub requests: u64,
    /// Allowed destinations that failed, and refused ones: one line each.
    pub attention: Vec<String>,
}

/// The decision about one request as logged.
enum Verdict<'a> {
    /// Allowed by the rule at this index, and connected.
    Allow(usize),
    /// Refused by the policy, with the reason.
    Deny(&'a Denial, String),
    /// Allowed by the rule at this index, but it could not be resolved or connected.
    Failed(usize, String),
}

/// What happened to one request, for the log and the summary.
struct Outcome<'a> {
    protocol: &'static str,
    target: String,
    host: String,
    port: u16,
    decision: Verdict<'a>,
    address: Option<IpAddr>,
    up: u64,
    down: u64,
}

impl Shared {
    fn record(&self, o: Outcome<'_>) {
        {
            let mut tally = lock(&self.tally);
            let t = tally.entry(o.target.clone()).or_default();
            match &o.decision {
                Verdict::Allow(_) => t.allowed += 1,
                Verdict::Deny(denial, reason) => {
                    t.denied += 1;
                    t.hint = hint(self, denial, &o.host, o.port);
                    if matches!(denial, Denial::NotAllowed) {
                        t.known = self
                            .policy
                            .left_out(&o.host, o.port)
                            .map(|l| l.note.clone());
                    }
                    t.reason = Some(reason.clone());
                }
                Verdict::Failed(_, reason) => {
                    t.failed += 1;
                    t.reason = Some(reason.clone());
                }
            }
        }
        let Some(log) = &self.log else { return };
        let rule = match &o.decision {
            Verdict::Allow(i)
            | Verdict::Failed(i, _)
            | Verdict::Deny(Denial::DeniedByRule(i), _)
            | Verdict::Deny(Denial::RefusedAddress { rule: Some(i), .. }, _) => {
                self.policy.rules.get(*i).map(ToString::to_string)
            }
            Verdict::Deny(Denial::Blocked, _) => Some("--block-net".to_owned()),
            Verdict::Deny(..) => None,
        };
        let (decision, reason) = match &o.decision {
            Verdict::Allow(_) => ("allow", None),
            Verdict::Deny(_, r) => ("deny", Some(r.clone())),
            Verdict::Failed(_, r) => ("error", Some(r.clone())),
        };
        let line = serde_json::json!({
            "time": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            "protocol": o.protocol,
            "host": o.host,
            "port": o.port,
            "decision": decision,
            "rule": rule,
            "reason": reason,
            "address": o.address.map(|a| a.to_string()),
            "bytes_up": o.up,
            "bytes_down": o.down,
        });
        let mut file = lock(log);
        let _ = writeln!(file, "{line}");
    }
}

/// Why a request was not connected: refused by the policy, or allowed by a rule (its
/// index) but unreachable.
enum Failure {
    Denied(Denial),
    Resolve(usize, std::io::Error),
    Connect(usize, std::io::Error),
}

async fn serve(client: TcpStream, shared: &Arc<Shared>, slot: WaitSlot) {
    let _ = client.set_nodelay(true);
    let mut first = [0u8; 1];
    let peek = tokio::time::timeout(HEAD_TIMEOUT, client.peek(&mut first));
    match slot.bounded(peek).await {
        Some(Ok(Ok(1))) => {}
        _ => return,
    }
    if first[0] == 5 {
        socks5(client, shared, slot).await;
    } else {
        http(client, shared, slot).await;
    }
}

/// The flag that would allow a refused destination, if it is safe to suggest (never for
/// one of the host's own addresses, which the policy alone does not know).
fn hint(shared: &Shared, denial: &Denial, host: &str, port: u16) -> Option<String> {
    if let Ok(Host::Ip(ip)) = parse_host(host) {
        if shared
            .host_addresses
            .current()
            .addresses
            .contains(&canonical(ip))
        {
            return None;
        }
    }
    shared.policy.hint(denial, host, port)
}

/// An open upstream connection and what it holds.
struct Opened {
    rule: usize,
    stream: TcpStream,
    ip: IpAddr,
    _permit: TunnelPermit,
}

/// Decides, takes a tunnel's place, resolves on the host, checks each address (refused
/// classes, the host's own addresses), connects to the first admitted one that answers.
async fn open(shared: &Arc<Shared>, host: &Host, port: u16) -> Result<Opened, Failure> {
    let policy = &shared.policy;
    let rule = match policy.decide(host, port) {
        Decision::Allow(i) => i,
        Decision::Deny(Denial::UnnamedAddress(ip, crate::AddressClass::Public))
            if shared.host_addresses.current().addresses.contains(&ip) =>
        {
            return Err(Failure::Denied(Denial::UnnamedAddress(
                ip,
                crate::AddressClass::Host,
            )))
        }
        Decision::Deny(d) => return Err(Failure::Denied(d)),
    };
    let permit = TunnelPermit::take(shared, rule).map_err(|n| Failure::Denied(Denial::Busy(n)))?;
    let addresses: Vec<IpAddr> = match host {
        Host::Ip(a) => vec![canonical(*a)],
        Host::Name(n) => tokio::net::lookup_host((n.as_str(), port))
            .await
            .map_err(|e| Failure::Resolve(rule, e))?
            .map(|s| canonical(s.ip()))
            .collect(),
    };
    let mut refusal = None;
    let mut last_error = None;
    let interfaces = shared.host_addresses.current();
    let host_addresses = &interfaces.addresses;
    for ip in addresses {
        if let Err(d) = policy.admit_address(ip, port, Some(rule), host_addresses) {
            refusal.get_or_insert(d);
            continue;
        }
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(Opened {
                    rule,
                    stream,
                    ip,
                    _permit: permit,
                });
            }
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => last_error = Some(std::io::ErrorKind::TimedOut.into()),
        }
    }
    match (last_error, refusal) {
        (Some(e), _) => Err(Failure::Connect(rule, e)),
        (None, Some(d)) => Err(Failure::Denied(d)),
        (None, None) => Err(Failure::Resolve(rule, std::io::Error::other("no address"))),
    }
}

/// Capacity of the pipe each direction of a relayed connection goes through.
const PIPE_SIZE: i32 = 1024 * 1024;

/// Copies both directions until each has ended, half-closing each side at the other's
/// end of file; returns the bytes sent up (client to upstream) and down. The bytes move
/// through a pipe with `splice(2)`, never through user space; if the pipes cannot be
/// made (descriptors exhausted), through tokio's copy.
async fn relay(client: &mut TcpStream, upstream: &mut TcpStream) -> (u64, u64) {
    let (Ok(up_pipe), Ok(down_pipe)) = (Pipe::new(), Pipe::new()) else {
        return tokio::io::copy_bidirectional_with_sizes(
            client,
            upstream,
            COPY_BUFFER,
            COPY_BUFFER,
        )
        .await
        .unwrap_or((0, 0));
    };
    let up = std::sync::atomic::AtomicU64::new(0);
    let down = std::sync::atomic::AtomicU64::new(0);
    let (c, u) = (&*client, &*upstream);
    // The first error (a reset) ends both directions, as tokio's copy does.
    let _ = tokio::try_join!(
        splice_one_way(c, u, &up_pipe, &up),
        splice_one_way(u, c, &down_pipe, &down)
    );
    (
        up.load(std::sync::atomic::Ordering::Relaxed),
        down.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// A pipe for one direction of a relayed connection.
struct Pipe {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
    /// Its size in bytes, as the kernel reports it.
    capacity: usize,
}

impl Pipe {
    fn new() -> nix::Result<Pipe> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A larger pipe moves more per call; the default (64 KiB) is kept if refused.
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
        let capacity = fcntl(&write, FcntlArg::F_GETPIPE_SZ)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(65536);
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }
}

/// Moves everything `from` sends to `to` through `pipe`, counting into `count`; at the
/// end of `from`'s data, shuts down `to` for writing.
///
/// Both ends are kept moving while data flows: each round splices what `from` has into
/// the pipe and what the pipe holds into `to`, and waits only when neither moved. A
/// would-block from the reading splice is taken to mean "`from` has nothing" (and clears
/// tokio's readiness) only when the pipe is empty; with bytes in the pipe it may mean the
/// pipe is out of slots, so that splice is made outside tokio's readiness bookkeeping.
async fn splice_one_way(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    count: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    use nix::fcntl::{splice, SpliceFFlags};
    use std::io::ErrorKind::WouldBlock;
    use tokio::io::Interest;
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let capacity = pipe.capacity;
    let mut in_pipe = 0usize;
    let mut eof = false;
    loop {
        let mut moved = false;
        if !eof {
            let fill = || {
                splice(from, None, &pipe.write, None, capacity, flags).map_err(std::io::Error::from)
            };
            let r = if in_pipe == 0 {
                from.try_io(Interest::READABLE, fill)
            } else {
                fill()
            };
            match r {
                Ok(0) => {
                    eof = true;
                    moved = true;
                }
                Ok(n) => {
                    in_pipe += n;
                    moved = true;
                }
                Err(e) if e.kind() == WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if in_pipe > 0 {
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, to, None, in_pipe, flags).map_err(std::io::Error::from)
            }) {
                Ok(m) => {
                    in_pipe -= m;
                    count.fetch_add(m as u64, std::sync::atomic::Ordering::Relaxed);
                    moved = true;
                }
                Err(e) if e.kind() == WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if eof && in_pipe == 0 {
            let _ = nix::sys::socket::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(to),
                nix::sys::socket::Shutdown::Write,
            );
            return Ok(());
        }
        if !moved {
            // Nothing moved with bytes in the pipe: `to` is full, and only its draining
            // makes room. With the pipe empty: `from` has nothing (readiness consumed).
            if in_pipe == 0 {
                from.readable().await?;
            } else {
                to.writable().await?;
            }
        }
    }
}

/// Splits `host:port` or `[v6]:port` (a CONNECT authority).
fn authority(text: &str) -> Result<(Host, u16), NameError> {
    let invalid = || NameError::Invalid(printable(text));
    let (host, port) = text.rsplit_once(':').ok_or_else(invalid)?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(invalid)?;
    if host.contains(':') && !host.starts_with('[') {
        return Err(invalid());
    }
    Ok((parse_host(host)?, port))
}

/// A client-supplied string made safe for a header, a message or the log.
fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(100)
        .collect()
}

/// Reads the request head; returns it and whatever followed it.
async fn read_head(client: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let n = client.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            let from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                let end = from + end + 4;
                let rest = buf.split_off(end);
                return Some((buf, rest));
            }
            if buf.len() > MAX_HEAD {
                return None;
            }
        }
    };
    tokio::time::timeout(HEAD_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}

fn response(status: &str, denied: Option<&str>, body: &str) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(d) = denied {
        head.push_str(&format!("X-Sandy-Denied: {d}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

async fn http(mut client: TcpStream, shared: &Arc<Shared>, slot: WaitSlot) {
    let Some(Some((head, rest))) = slot.bounded(read_head(&mut client)).await else {
        return;
    };
    drop(slot);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = matches!(req.parse(&head), Ok(httparse::Status::Complete(_)));
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        let _ = client
            .write_all(&response(
                "400 Bad Request",
                None,
                "sandy: malformed proxy request\n",
            ))
            .await;
        return;
    };
    if !parsed {
        return;
    }
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let target: Result<(Host, u16, Option<String>), NameError> = if connect {
        authority(path).map(|(h, p)| (h, p, None))
    } else {
        absolute_target(path)
    };
    let protocol = if connect { "connect" } else { "http" };
    let (host, port, origin_form) = match target {
        Ok(t) => t,
        Err(e) => {
            let body = match e {
                NameError::Invalid(_) if !connect && !path.contains("://") => {
                    "sandy: this is Sandy's egress proxy; send requests through it as a proxy \
                     (an absolute http:// URL, CONNECT or SOCKS5)\n"
                        .to_owned()
                }
                e => format!("sandy: refused: {e}\n"),
            };
            let _ = client
                .write_all(&response("400 Bad Request", Some(&printable(path)), &body))
                .await;
            return;
        }
    };
    let host_text = host.to_string();
    let target_text = format!("{host_text}:{port}");
    let outcome = |decision, address, up, down| Outcome {
        protocol,
        target: target_text.clone(),
        host: host_text.clone(),
        port,
        decision,
        address,
        up,
        down,
    };
    match open(shared, &host, port).await {
        Err(failure) => {
            let (status, reason, denial) = describe(shared, &failure, &host_text, port);
            let header = match denial
                .as_ref()
                .and_then(|d| hint(shared, d, &host_text, port))
            {
                Some(h) => format!("{target_text}; allow with {h}"),
                None => format!("{target_text}; {reason}"),
            };
            let _ = client
                .write_all(&response(
                    status,
                    Some(&header),
                    &format!("sandy: {reason}\n"),
                ))
                .await;
            let refused = denial.unwrap_or(Denial::NotAllowed);
            shared.record(outcome(verdict(&failure, &refused, reason), None, 0, 0));
        }
        Ok(opened) => {
            let Opened {
                rule,
                stream: mut upstream,
                ip,
                _permit,
            } = opened;
            let mut up = 0u64;
            let first = if connect {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let address_rule = shared.policy.is_address_rule(rule);
                match first_bytes(&mut client, &upstream, &host, port, address_rule, rest).await {
                    Ok(first) => first,
                    Err(refusal) => {
                        let denial = Denial::Tls(refusal);
                        let reason = shared.policy.explain(&denial, &host_text, port);
                        shared.record(outcome(Verdict::Deny(&denial, reason), Some(ip), 0, 0));
                        return;
                    }
                }
            } else {
                let head = forwarded_head(
                    &req,
                    method,
                    origin_form.as_deref().unwrap_or("/"),
                    version,
                    &host_text,
                    port,
                );
                if upstream.write_all(&head).await.is_err() {
                    return;
                }
                up += head.len() as u64;
                rest
            };
            if !first.is_empty() {
                if upstream.write_all(&first).await.is_err() {
                    return;
                }
                up += first.len() as u64;
            }
            let (u, d) = relay(&mut client, &mut upstream).await;
            shared.record(outcome(Verdict::Allow(rule), Some(ip), up + u, d));
        }
    }
}

/// What a tunnel's first client bytes are.
enum Hello<'a> {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// Not TLS, on a port where that is allowed: nothing to check.
    Pass,
    /// A ClientHello, with every server name it carries.
    Names(Vec<&'a [u8]>),
    Refuse(TlsRefusal),
}

/// Reads what `buf` (the client's first bytes) holds, with a maintained TLS parser.
fn read_hello(buf: &[u8], tls_port: bool) -> Hello<'_> {
    use tls_parser::{SNIType, TlsExtension, TlsMessage, TlsMessageHandshake};
    let not_tls = || {
        if tls_port {
            Hello::Refuse(TlsRefusal::NotTls)
        } else {
            Hello::Pass
        }
    };
    // A handshake record (22) of a TLS version (3.x).
    match buf {
        [] | [_] => {
            return match buf.first() {
                Some(b) if *b != 22 => not_tls(),
                _ => Hello::NeedMore,
            }
        }
        [t, major, ..] if *t != 22 || *major != 3 => return not_tls(),
        _ if buf.len() < 5 => return Hello::NeedMore,
        _ => {}
    }
    let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    if 5 + len > MAX_HELLO {
        return Hello::Refuse(TlsRefusal::Malformed);
    }
    let Some(record) = buf.get(..5 + len) else {
        return Hello::NeedMore;
    };
    let malformed = Hello::Refuse(TlsRefusal::Malformed);
    let hello = match tls_parser::parse_tls_plaintext(record) {
        Ok((_, plain)) => match plain.msg.as_slice() {
            [TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello))] => hello.ext,
            _ => return malformed,
        },
        Err(_) => return malformed,
    };
    let Some(ext) = hello else {
        return Hello::Names(Vec::new());
    };
    let extensions = match tls_parser::parse_tls_client_hello_extensions(ext) {
        Ok(([], extensions)) => extensions,
        _ => return malformed,
    };
    let mut names = Vec::new();
    for e in &extensions {
        if let TlsExtension::SNI(list) = e {
            for (kind, name) in list {
                if *kind == SNIType::HostName {
                    names.push(*name);
                }
            }
        }
    }
    Hello::Names(names)
}

/// Whether the server names of a ClientHello fit the tunnel: each must be the tunnel's
/// host (normalised like the rules' names); none at all only for a tunnel an address
/// rule allowed.
fn check_names(names: &[&[u8]], host: &Host, address_rule: bool) -> Result<(), TlsRefusal> {
    if names.is_empty() {
        return if address_rule {
            Ok(())
        } else {
            Err(TlsRefusal::NoName)
        };
    }
    for name in names {
        let text = String::from_utf8_lossy(name);
        match parse_host(&text) {
            Ok(h) if &h == host => {}
            _ => return Err(TlsRefusal::OtherName(printable(&text))),
        }
    }
    Ok(())
}

/// Before a tunnel forwards anything upstream: the client's first bytes (`buf`, what it
/// sent with its request, then what it sends next), read up to one TLS record. A TLS
/// ClientHello must name the tunnel's host ([`check_names`]); on port 443 the client must
/// start with one within [`HELLO_TIMEOUT`]. On another port, bytes that are not TLS pass,
/// and so does a tunnel whose server speaks first (nothing is inspected then). Returns
/// the bytes read, to be forwarded first.
async fn first_bytes(
    client: &mut TcpStream,
    upstream: &TcpStream,
    host: &Host,
    port: u16,
    address_rule: bool,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, TlsRefusal> {
    let tls_port = port == TLS_PORT;
    if buf.is_empty() && !tls_port {
        tokio::select! {
            biased;
            _ = client.readable() => {}
            _ = upstream.readable() => return Ok(buf),
        }
    }
    let deadline = tokio::time::Instant::now() + HELLO_TIMEOUT;
    let mut chunk = vec![0u8; 4096];
    loop {
        match read_hello(&buf, tls_port) {
            Hello::NeedMore => {}
            Hello::Pass => return Ok(buf),
            Hello::Names(names) => return check_names(&names, host, address_rule).map(|()| buf),
            Hello::Refuse(r) => return Err(r),
        }
        let room = MAX_HELLO.saturating_sub(buf.len()).min(chunk.len());
        let Some(into) = chunk.get_mut(..room).filter(|c| !c.is_empty()) else {
            return Err(TlsRefusal::Malformed);
        };
        match tokio::time::timeout_at(deadline, client.read(into)).await {
            Err(_) if buf.is_empty() => return Err(TlsRefusal::Silent),
            Err(_) => return Err(TlsRefusal::Malformed),
            // The client ended before its first byte: nothing to check or forward.
            Ok(Ok(0)) if buf.is_empty() => return Ok(buf),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(TlsRefusal::Malformed),
            Ok(Ok(n)) => buf.extend_from_slice(into.get(..n).unwrap_or_default()),
        }
    }
}

fn verdict<'a>(failure: &Failure, refused: &'a Denial, reason: String) -> Verdict<'a> {
    match failure {
        Failure::Denied(_) => Verdict::Deny(refused, reason),
        Failure::Resolve(rule, _) | Failure::Connect(rule, _) => Verdict::Failed(*rule, reason),
    }
}

/// The status, the reason, and the policy's refusal (if it was one) of a failure.
fn describe(
    shared: &Shared,
    failure: &Failure,
    host: &str,
    port: u16,
) -> (&'static str, String, Option<Denial>) {
    match failure {
        Failure::Denied(d @ Denial::Busy(_)) => (
            "503 Service Unavailable",
            shared.policy.explain(d, host, port),
            Some(d.clone()),
        ),
        Failure::Denied(d) => (
            "403 Forbidden",
            shared.policy.explain(d, host, port),
            Some(d.clone()),
        ),
        Failure::Resolve(_, e) => (
            "502 Bad Gateway",
            format!("cannot resolve {host}: {e}"),
            None,
        ),
        Failure::Connect(_, e) => (
            "502 Bad Gateway",
            format!("cannot connect to {host}:{port}: {e}"),
            None,
        ),
    }
}

/// The destination of an absolute-form request (`http://host[:port]/path`) and its
/// origin-form path.
fn absolute_target(path: &str) -> Result<(Host, u16, Option<String>), NameError> {
    let invalid = || NameError::Invalid(printable(path));
    if !path
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    {
        return Err(invalid());
    }
    let url = url::Url::parse(path).map_err(|_| invalid())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(NameError::UserInfo);
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => parse_host(d)?,
        Some(url::Host::Ipv4(a)) => Host::Ip(IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => Host::Ip(IpAddr::V6(a)),
        None => return Err(invalid()),
    };
    let port = url.port_or_known_default().ok_or_else(invalid)?;
    let mut origin = url.path().to_owned();
    if let Some(q) = url.query() {
        origin.push('?');
        origin.push_str(q);
    }
    Ok((host, port, Some(origin)))
}

/// The request head sent upstream: origin-form, hop-by-hop and proxy headers removed,
/// `Host` taken from the decided URL (never the client's own `Host` header, which could
/// name another site on a shared server), `Connection: close`.
fn forwarded_head(
    req: &httparse::Request<'_, '_>,
    method: &str,
    origin_form: &str,
    version: u8,
    host: &str,
    port: u16,
) -> Vec<u8> {
    let mut out = format!("{method} {origin_form} HTTP/1.{version}\r\n").into_bytes();
    let host = if port == 80 {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    };
    out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// SOCKS5 reply codes (RFC 1928).
mod reply {
    pub const SUCCEEDED: u8 = 0;
    pub const GENERAL_FAILURE: u8 = 1;
    pub const NOT_ALLOWED: u8 = 2;
    pub const HOST_UNREACHABLE: u8 = 4;
    pub const CONNECTION_REFUSED: u8 = 5;
    pub const COMMAND_NOT_SUPPORTED: u8 = 7;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 8;
}

async fn socks_reply(client: &mut TcpStream, code: u8) -> std::io::Result<()> {
    client.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await
}

async fn socks5(mut client: TcpStream, shared: &Arc<Shared>, slot: WaitSlot) {
    let request = async {
        let mut greeting = [0u8; 2];
        client.read_exact(&mut greeting).await.ok()?;
        let mut methods = vec![0u8; usize::from(greeting[1])];
        client.read_exact(&mut methods).await.ok()?;
        if !methods.contains(&0) {
            let _ = client.write_all(&[5, 0xff]).await;
            return None;
        }
        client.write_all(&[5, 0]).await.ok()?;
        let mut fixed = [0u8; 4];
        client.read_exact(&mut fixed).await.ok()?;
        let host: Result<Host, NameError> = match fixed[3] {
            1 => {
                let mut a = [0u8; 4];
                client.read_exact(&mut a).await.ok()?;
                Ok(Host::Ip(IpAddr::from(a)))
            }
            4 => {
                let mut a = [0u8; 16];
                client.read_exact(&mut a).await.ok()?;
                Ok(Host::Ip(IpAddr::from(a)))
            }
            3 => {
                let mut len = [0u8; 1];
                client.read_exact(&mut len).await.ok()?;
                let mut name = vec![0u8; usize::from(len[0])];
                client.read_exact(&mut name).await.ok()?;
                match std::str::from_utf8(&name) {
                    Ok(n) => parse_host(n),
                    Err(_) => Err(NameError::Invalid(
                        String::from_utf8_lossy(&name).into_owned(),
                    )),
                }
            }
            _ => {
                let _ = socks_reply(&mut client, reply::ADDRESS_TYPE_NOT_SUPPORTED).await;
                return None;
            }
        };
        let mut port = [0u8; 2];
        client.read_exact(&mut port).await.ok()?;
        Some((fixed[1], host, u16::from_be_bytes(port)))
    };
    let Some(Ok(Some((command, host, port)))) = slot
        .bounded(tokio::time::timeout(HEAD_TIMEOUT, request))
        .await
    else {
        return;
    };
    drop(slot);
    if command != 1 {
        let _ = socks_reply(&mut client, reply::COMMAND_NOT_SUPPORTED).await;
        return;
    }
    let host = match host {
        Ok(h) => h,
        Err(e) => {
            let _ = socks_reply(&mut client, reply::NOT_ALLOWED).await;
            let denial = Denial::Invalid(e);
            let reason = shared.policy.explain(&denial, "", port);
            shared.record(Outcome {
                protocol: "socks5",
                target: format!("(invalid):{port}"),
                host: String::new(),
                port,
                decision: Verdict::Deny(&denial, reason),
                address: None,
                up: 0,
                down: 0,
            });
            return;
        }
    };
    let host_text = host.to_string();
    let target_text = format!("{host_text}:{port}");
    match open(shared, &host, port).await {
        Err(failure) => {
            let code = match &failure {
                Failure::Denied(Denial::Busy(_)) => reply::GENERAL_FAILURE,
                Failure::Denied(_) => reply::NOT_ALLOWED,
                Failure::Resolve(..) => reply::HOST_UNREACHABLE,
                Failure::Connect(_, e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    reply::CONNECTION_REFUSED
                }
                Failure::Connect(..) => reply::GENERAL_FAILURE,
            };
            let _ = socks_reply(&mut client, code).await;
            let (_, reason, denial) = describe(shared, &failure, &host_text, port);
            let refused = denial.unwrap_or(Denial::NotAllowed);
            shared.record(Outcome {
                protocol: "socks5",
                target: target_text,
                host: host_text,
                port,
                decision: verdict(&failure, &refused, reason),
                address: None,
                up: 0,
                down: 0,
            });
        }
        Ok(opened) => {
            let Opened {
                rule,
                stream: mut upstream,
                ip,
                _permit,
            } = opened;
            if socks_reply(&mut client, reply::SUCCEEDED).await.is_err() {
                return;
            }
            let address_rule = shared.policy.is_address_rule(rule);
            let outcome = |decision, up, down| Outcome {
                protocol: "socks5",
                target: target_text.clone(),
                host: host_text.clone(),
                port,
                decision,
                address: Some(ip),
                up,
                down,
            };
            let first = match first_bytes(
                &mut client,
                &upstream,
                &host,
                port,
                address_rule,
                Vec::new(),
            )
            .await
            {
                Ok(first) => first,
                Err(refusal) => {
                    let denial = Denial::Tls(refusal);
                    let reason = shared.policy.explain(&denial, &host_text, port);
                    shared.record(outcome(Verdict::Deny(&denial, reason), 0, 0));
                    return;
                }
            };
            if !first.is_empty() && upstream.write_all(&first).await.is_err() {
                return;
            }
            let (up, down) = relay(&mut client, &mut upstream).await;
            shared.record(outcome(Verdict::Allow(rule), first.len() as u64 + up, down));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Action, Mode, Rule, RuleOrigin};
    use std::io::Read;

    /// A loopback listener that handles each connection on a thread of its own; its port.
    fn serve(handle: fn(std::net::TcpStream)) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || handle(s));
            }
        });
        port
    }

    /// An upstream on loopback that answers each connection with what it received (the
    /// request head), then closes.
    fn upstream() -> u16 {
        serve(|mut s| {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let _ = s.write_all(&head);
        })
    }

    fn proxy(mode: Mode, rules: &[(Action, &str)]) -> u16 {
        proxy_with(mode, rules, Limits::for_descriptors(4096))
    }

    fn proxy_with(mode: Mode, rules: &[(Action, &str)], limits: Limits) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let policy = EgressPolicy {
            mode,
            rules: rules
                .iter()
                .map(|(a, p)| {
                    // "profile:PATTERN": a rule of the agent profile.
                    let (origin, p) = match p.strip_prefix("profile:") {
                        Some(rest) => (RuleOrigin::Profile, rest),
                        None => (RuleOrigin::Flag, *p),
                    };
                    Rule {
                        action: *a,
                        pattern: p.parse().unwrap(),
                        origin,
                        note: None,
                    }
                })
                .collect(),
            left_out: vec![],
        };
        let handle = spawn(
            l,
            ProxyConfig {
                policy,
                log: None,
                limits,
            },
        )
        .unwrap();
        std::mem::forget(handle);
        port
    }

    fn exchange(port: u16, request: &[u8]) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A loopback server that sends back every byte it receives, and half-closes at the
    /// end of its input.
    fn echo() -> u16 {
        serve(|mut s| {
            let mut buf = vec![0u8; 100_000];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
        })
    }

    #[test]
    fn a_tunnel_carries_every_byte_both_ways_in_order_with_a_slow_reader() {
        let upstream = echo();
        let port = proxy(
            Mode::Allowlist,
            &[(Action::Allow, &format!("127.0.0.1:{upstream}"))],
        );
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
        // 24 MiB of a pattern that shows any lost, repeated or reordered block, written
        // in uneven pieces; the reader waits first, so every buffer on the way fills up
        // and the relay has to wait for room.
        let data: Vec<u8> = (0..24u32 * 1024 * 1024)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut writer = s.try_clone().unwrap();
        let sent = data.clone();
        let w = std::thread::spawn(move || {
            let mut at = 0;
            let mut piece = 1;
            while at < sent.len() {
                let end = (at + piece).min(sent.len());
                writer.write_all(&sent[at..end]).unwrap();
                at = end;
                piece = (piece * 7 + 13) % 300_000 + 1;
            }
            writer.shutdown(std::net::Shutdown::Write).unwrap();
        });
        std::thread::sleep(Duration::from_millis(500));
        let mut got = Vec::with_capacity(data.len());
        s.read_to_end(&mut got).unwrap();
        w.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes differ");
    }

    #[test]
    fn plain_http_is_forwarded_in_origin_form_with_the_decided_host() {
        let up = upstream();
        let p = proxy(
            Mode::Allowlist,
            &[(Action::Allow, &format!("127.0.0.1:{up}"))],
        );
        let out = exchange(
            p,
            format!(
                "GET http://127.0.0.1:{up}/x?y=1 HTTP/1.1\r\nHost: other.example\r\n\
                 Proxy-Authorization: secret\r\nProxy-Connection: keep-alive\r\n\r\n"
            )
            .as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.contains("GET /x?y=1 HTTP/1.1\r\n"), "{out}");
        assert!(out.contains(&format!("Host: 127.0.0.1:{up}\r\n")), "{out}");
        assert!(!out.contains("other.example"), "{out}");
        assert!(!out.to_ascii_lowercase().contains("proxy-"), "{out}");
        assert!(out.contains("Connection: close\r\n"), "{out}");
    }

    #[test]
    fn connect_and_socks_tunnel_to_an_allowed_address_and_nothing_else() {
        let up = upstream();
        let p = proxy(
            Mode::Allowlist,
            &[(Action::Allow, &format!("127.0.0.1:{up}"))],
        );
        let out = exchange(
            p,
            format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\nGET /t HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(
            out.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"),
            "{out}"
        );
        assert!(out.contains("GET /t HTTP/1.1"), "{out}");
        // The neighbouring port is refused at once, with the flag that would allow it.
        let other = up.wrapping_add(1).max(1);
        let out = exchange(
            p,
            format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        // A loopback address: the reason, never the flag that would open it.
        assert!(
            out.contains(&format!(
                "X-Sandy-Denied: 127.0.0.1:{other}; 127.0.0.1:{other} is a loopback address, \
                 refused unless a rule names it (see \"Local, private and metadata \
                 addresses\" in Sandy's docs/network.md)"
            )),
            "{out}"
        );
        assert!(!out.contains("--allow-domain"), "{out}");
        // SOCKS5 with a literal address: the same rules.
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        let mut r = [0u8; 2];
        s.read_exact(&mut r).unwrap();
        assert_eq!(r, [5, 0]);
        let mut req = vec![5, 1, 0, 1, 127, 0, 0, 1];
        req.extend_from_slice(&up.to_be_bytes());
        s.write_all(&req).unwrap();
        let mut reply = [0u8; 10];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply[1], 0, "{reply:?}");
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        s.read_exact(&mut r).unwrap();
        let mut req = vec![5, 1, 0, 1, 127, 0, 0, 1];
        req.extend_from_slice(&other.to_be_bytes());
        s.write_all(&req).unwrap();
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply[1], 2, "not allowed by ruleset: {reply:?}");
    }

    #[test]
    fn blocked_mode_and_malformed_requests_are_answered_at_once() {
        let p = proxy(Mode::Blocked, &[]);
        let out = exchange(p, b"GET http://example.com/ HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        assert!(
            out.ends_with("sandy: network blocked by --block-net\n"),
            "{out}"
        );
        let p = proxy(Mode::Allowlist, &[(Action::Allow, "example.com")]);
        let out = exchange(p, b"GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        let out = exchange(p, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            out.starts_with("HTTP/1.1 400") && out.contains("egress proxy"),
            "{out}"
        );
        // A name resolving to loopback (localhost, from /etc/hosts) is refused even though
        // the name is allowed.
        let p = proxy(Mode::Allowlist, &[(Action::Allow, "localhost:8080")]);
        let out = exchange(p, b"CONNECT localhost:8080 HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        assert!(out.contains("loopback"), "{out}");
    }

    /// A ClientHello record naming `name` (no extensions at all with `None`).
    fn client_hello(name: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        if let Some(name) = name {
            let n = name.as_bytes();
            let mut sni = vec![0u8];
            sni.extend_from_slice(&(n.len() as u16).to_be_bytes());
            sni.extend_from_slice(n);
            let mut list = (sni.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&sni);
            let mut ext = vec![0, 0];
            ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
            ext.extend_from_slice(&list);
            body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
            body.extend_from_slice(&ext);
        }
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut record = vec![22, 3, 1];
        record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        record.extend_from_slice(&hs);
        record
    }

    #[test]
    fn a_client_hello_is_read_with_its_server_names_and_anything_else_is_told_apart() {
        let hello = client_hello(Some("API.example.com."));
        match read_hello(&hello, true) {
            Hello::Names(n) => assert_eq!(n, vec![&b"API.example.com."[..]]),
            _ => panic!("no names"),
        }
        assert!(matches!(read_hello(&client_hello(None), true), Hello::Names(n) if n.is_empty()));
        // Every prefix needs more bytes; nothing is decided on a part.
        for end in 0..hello.len() {
            assert!(
                matches!(read_hello(&hello[..end], true), Hello::NeedMore),
                "{end}"
            );
        }
        // Not TLS: refused on 443, passed elsewhere.
        for other in [&b"GET / HTTP/1.1\r\n"[..], b"SSH-2.0-x", &[22, 9, 9, 9, 9]] {
            assert!(matches!(
                read_hello(other, true),
                Hello::Refuse(TlsRefusal::NotTls)
            ));
            assert!(matches!(read_hello(other, false), Hello::Pass));
        }
        // A record longer than one TLS record can be, and a record that is not a
        // ClientHello, are refused.
        assert!(matches!(
            read_hello(&[22, 3, 1, 0xff, 0xff], false),
            Hello::Refuse(TlsRefusal::Malformed)
        ));
        let mut garbled = hello;
        garbled[5] = 2; // a ServerHello
        assert!(matches!(
            read_hello(&garbled, false),
            Hello::Refuse(TlsRefusal::Malformed)
        ));
        // Names are compared normalised; none at all only under an address rule.
        let host = Host::Name("api.example.com".into());
        assert_eq!(check_names(&[b"API.example.com."], &host, false), Ok(()));
        assert_eq!(
            check_names(&[b"evil.example"], &host, false),
            Err(TlsRefusal::OtherName("evil.example".into()))
        );
        assert_eq!(check_names(&[], &host, false), Err(TlsRefusal::NoName));
        let ip = Host::Ip("10.0.0.5".parse().unwrap());
        assert_eq!(check_names(&[], &ip, true), Ok(()));
        assert!(check_names(&[b"internal.example"], &ip, true).is_err());
    }

    /// Opens a CONNECT tunnel to `target` and sends `first`; returns what came back after
    /// the proxy's answer (the echo of what was forwarded), or the answer if refused.
    fn tunnel(proxy: u16, target: &str, first: &[u8]) -> (String, Vec<u8>) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let _ = s.write_all(first);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (String::from_utf8_lossy(&head).into_owned(), rest)
    }

    #[test]
    fn a_tunnel_forwards_a_client_hello_only_when_it_names_the_tunnels_host() {
        let up = echo();
        let p = proxy(
            Mode::Allowlist,
            &[
                (Action::Allow, &format!("localhost:{up}")),
                (Action::Allow, &format!("127.0.0.1:{up}")),
            ],
        );
        let good = client_hello(Some("LocalHost."));
        let (head, echoed) = tunnel(p, &format!("localhost:{up}"), &good);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(echoed, good);
        // Another name, or none, through a name rule: closed, nothing forwarded.
        for bad in [client_hello(Some("evil.example")), client_hello(None)] {
            let (head, echoed) = tunnel(p, &format!("localhost:{up}"), &bad);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(echoed.is_empty(), "{echoed:?}");
        }
        // Through an address rule a ClientHello without a name passes; one with a name
        // does not (a name is decided by the rules, not by the hello).
        let (_, echoed) = tunnel(p, &format!("127.0.0.1:{up}"), &client_hello(None));
        assert_eq!(echoed, client_hello(None));
        let (_, echoed) = tunnel(p, &format!("127.0.0.1:{up}"), &good);
        assert!(echoed.is_empty());
        // Not TLS on another port than 443: passed as it is.
        let (_, echoed) = tunnel(p, &format!("localhost:{up}"), b"plain bytes");
        assert_eq!(echoed, b"plain bytes");
    }

    #[test]
    fn the_tunnel_limit_answers_503_and_silent_connections_make_room_for_new_ones() {
        let up = echo();
        let limits = Limits {
            tunnels: 2,
            agent_reserve: 0,
            waiting: 3,
        };
        let p = proxy_with(
            Mode::Allowlist,
            &[(Action::Allow, &format!("127.0.0.1:{up}"))],
            limits,
        );
        let open_tunnel = || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(s, "CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").unwrap();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).unwrap();
            (s, String::from_utf8_lossy(&head).into_owned())
        };
        let (a, ha) = open_tunnel();
        let (b, hb) = open_tunnel();
        assert_eq!((ha.as_str(), hb.as_str()), ("HTTP/1.1 200", "HTTP/1.1 200"));
        let out = exchange(
            p,
            format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
        assert!(out.contains("X-Sandy-Denied: 127.0.0.1:"), "{out}");
        assert!(out.contains("2 connections open"), "{out}");
        drop((a, b));
        // Silent connections beyond the bound: the oldest is closed, and a request on a
        // new connection still gets through.
        let silent: Vec<std::net::TcpStream> = (0..6)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", p)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut first = &silent[0];
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(
            first.read(&mut buf).unwrap_or(0),
            0,
            "the oldest stays open"
        );
        let (mut c, head) = open_tunnel();
        assert_eq!(head, "HTTP/1.1 200", "{head}");
        let mut rest = [0u8; 4];
        c.read_exact(&mut rest).unwrap(); // " Connection established" begins
        drop(silent);
    }

    #[test]
    fn limits_follow_the_descriptors_and_keep_a_reserve() {
        let big = Limits::for_descriptors(1 << 20);
        assert_eq!(
            big,
            Limits {
                tunnels: MAX_TUNNELS,
                agent_reserve: AGENT_RESERVE,
                waiting: MAX_WAITING
            }
        );
        for n in [256u64, 1024, 4096, 20_000] {
            let l = Limits::for_descriptors(n);
            let held = (l.tunnels + l.agent_reserve) as u64 * TUNNEL_DESCRIPTORS + l.waiting as u64;
            assert!(held + RESERVED_DESCRIPTORS <= n, "{n}: {l:?}");
            assert!(l.tunnels >= 1 && l.waiting >= 1, "{n}: {l:?}");
        }
    }

    #[test]
    fn past_the_tunnel_limit_socks_gets_reply_1_and_the_profiles_endpoints_have_a_reserve() {
        let up = echo();
        let p = proxy_with(
            Mode::Allowlist,
            &[
                (Action::Allow, &format!("127.0.0.1:{up}")),
                (Action::Allow, &format!("profile:localhost:{up}")),
            ],
            Limits {
                tunnels: 1,
                agent_reserve: 1,
                waiting: 16,
            },
        );
        let open = |target: &str| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(s, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).unwrap();
            (s, String::from_utf8_lossy(&head).into_owned())
        };
        let flag = format!("127.0.0.1:{up}");
        let agent = format!("localhost:{up}");
        let (_a, head) = open(&flag);
        assert_eq!(head, "HTTP/1.1 200");
        assert_eq!(open(&flag).1, "HTTP/1.1 503");
        // SOCKS5 at the limit: general failure (1).
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        let mut r = [0u8; 2];
        s.read_exact(&mut r).unwrap();
        let mut req = vec![5, 1, 0, 1, 127, 0, 0, 1];
        req.extend_from_slice(&up.to_be_bytes());
        s.write_all(&req).unwrap();
        let mut reply = [0u8; 10];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply[1], 1, "{reply:?}");
        // The profile's endpoint still gets its reserved tunnel, and only that one.
        let (_b, head) = open(&agent);
        assert_eq!(head, "HTTP/1.1 200");
        assert_eq!(open(&agent).1, "HTTP/1.1 503");
    }
}
