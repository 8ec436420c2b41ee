//! The host's own services closed to a run on the host's network (design 3.6).
//!
//! The sandbox's TCP sockets are made in the host's network namespace by the socket
//! broker (`explain`), and every `connect()` of the sandbox is handed to the
//! supervisor's notifier. Landlock refuses the sandbox's own TCP connects, so a TCP
//! socket of the sandbox is connected only here: the supervisor takes the caller's socket
//! (`pidfd_getfd`), copies the address out of the caller's memory once, decides on that
//! copy and connects the socket with that copy. Another thread of the caller changing the
//! address or the descriptor afterwards changes nothing: the kernel never reads them again
//! for this call. A connect of any other socket (a Unix socket, netlink, a UDP socket of
//! the sandbox's own namespace) is let through unchanged: if the descriptor is swapped
//! for a TCP socket in between, Landlock refuses that connect.
//!
//! Closed ([`sandy_net::local`]): the loopback addresses, `0.0.0.0` and `::`, the host's
//! interface addresses, the networks of its bridges, and the cloud metadata service.
//! Open among them: the local ports of the policy (`--allow-local-port`, the collector,
//! the agent's endpoint named by its base URL variable), port 53 of the host's name
//! servers, and a port on which only the run's own sockets listen (a server the run
//! started: every listener that could take the connection is a socket the broker made).
//! A refused connect fails with `EACCES`, and is named after the run.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::libc;
use sandy_linux::sys::notify::{self, Notification};
use sandy_net::local::{HostInterfaces, Local};
use sandy_policy::{Network, PortOrigin, ResolvedPolicy};

/// Connects waiting in threads of their own (blocking sockets) at most; beyond it a
/// blocking connect is refused with `EAGAIN`.
const MAX_WAITING_CONNECTS: usize = 256;
/// Sockets of the broker remembered (their inode numbers), at most.
const MAX_OWN_SOCKETS: usize = 1 << 20;
/// Distinct refused destinations remembered for the report, at most.
const MAX_REFUSALS: usize = 1000;

/// The `landlock` tier's pathname Unix sockets: connected only at or below a grant of the
/// policy, and never in a hidden path. Without a mount namespace, the host's sockets
/// (the session bus, the user's systemd, ssh-agent, a container daemon) are otherwise
/// reachable by name, and Landlock governs `connect()` to them from ABI 9 only.
#[derive(Debug, Clone)]
pub struct UnixGate {
    roots: Vec<std::path::PathBuf>,
    hidden: Vec<std::path::PathBuf>,
}

impl UnixGate {
    /// The gate of a policy in the `landlock` tier; `None` in the full tier.
    pub fn from_policy(policy: &ResolvedPolicy) -> Option<UnixGate> {
        (policy.tier == sandy_policy::Tier::Landlock).then(|| UnixGate {
            roots: policy.grants.iter().map(|g| g.path.clone()).collect(),
            hidden: policy
                .protections
                .iter()
                .filter(|p| p.kind == sandy_policy::ProtectionKind::Deny)
                .map(|p| p.path.clone())
                .collect(),
        })
    }

    /// A handle of the socket a pathname `address` names for thread `tid` (a relative
    /// name from its working directory), when the gate lets it be connected.
    fn open(&self, tid: u32, address: &[u8]) -> Result<OwnedFd, Errno> {
        let path = unix_path(address).ok_or(Errno::EINVAL)?;
        let path = if path.is_absolute() {
            path
        } else {
            // Its working directory now; the handle is opened below a root anyway.
            let cwd = std::fs::read_link(format!("/proc/{tid}/cwd")).map_err(|_| Errno::EACCES)?;
            cwd.join(path)
        };
        use std::os::unix::ffi::OsStrExt;
        // Lexically: what is opened (below a root, no link followed) is this very name.
        let path = sandy_policy::normalize(&path);
        let normal = sandy_policy::is_normal(path.as_os_str().as_bytes());
        if !normal || self.hidden.iter().any(|h| path.starts_with(h)) {
            return Err(Errno::EACCES);
        }
        crate::hostfs::open_socket_under(&self.roots, &path).map_err(|e| match e.raw_os_error() {
            Some(code) if code == libc::ENOENT || code == libc::ENOTSOCK => Errno::from_raw(code),
            _ => Errno::EACCES,
        })
    }
}

/// The name in a pathname Unix socket address (`sockaddr_un`), up to its first NUL;
/// `None` for an abstract or unnamed address.
fn unix_path(address: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let family = u16::from_ne_bytes([*address.first()?, *address.get(1)?]);
    if i32::from(family) != libc::AF_UNIX {
        return None;
    }
    let name = address.get(2..)?;
    if name.first().is_none_or(|b| *b == 0) {
        return None;
    }
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        &name[..end],
    )))
}

/// `sockaddr_un` for `/proc/self/fd/FD`: the socket `fd` is a handle of.
fn proc_fd_address(fd: &OwnedFd) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let mut address = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    address.extend_from_slice(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes());
    address.push(0);
    address
}

/// The decisions of one run.
pub struct Gate {
    /// The `landlock` tier's pathname Unix sockets.
    unix: Option<UnixGate>,
    ports: Vec<(u16, PortOrigin)>,
    resolvers: Vec<IpAddr>,
    interfaces: HostInterfaces,
    /// Inode numbers of the sockets the broker made for the run.
    own: HashSet<u64>,
    waiting: Arc<AtomicUsize>,
}

/// The refused destinations of a run: per address and port, why it is closed and how
/// many times it was refused.
#[derive(Debug, Default)]
pub struct Refusals {
    pub seen: BTreeMap<(IpAddr, u16), (Local, u64)>,
    pub unrecorded: u64,
}

impl Gate {
    /// The gate of a run on the host's network; `None` for a blocked network, whose
    /// sockets live in its own namespace.
    pub fn from_policy(policy: &ResolvedPolicy) -> std::io::Result<Option<Gate>> {
        let unix = UnixGate::from_policy(policy);
        if policy.network != Network::AllowAll && unix.is_none() {
            return Ok(None);
        }
        Ok(Some(Gate {
            unix,
            ports: policy
                .local_ports
                .iter()
                .map(|p| (p.port, p.origin))
                .collect(),
            resolvers: policy
                .resolvers
                .iter()
                .map(|ip| sandy_net::addr::canonical(*ip))
                .collect(),
            interfaces: HostInterfaces::new()?,
            own: HashSet::new(),
            waiting: Arc::new(AtomicUsize::new(0)),
        }))
    }

    /// Remembers a socket the broker made for the run.
    pub fn remember(&mut self, socket: BorrowedFd<'_>) {
        if self.own.len() >= MAX_OWN_SOCKETS {
            return;
        }
        if let Ok(st) = nix::sys::stat::fstat(socket) {
            self.own.insert(st.st_ino);
        }
    }

    /// Whether a connect to `ip:port` is allowed; the reason it is closed if not.
    pub fn decide(&self, ip: IpAddr, port: u16) -> Result<(), Local> {
        let ip = sandy_net::addr::canonical(ip);
        let Some(local) = self.interfaces.current().local(ip) else {
            return Ok(());
        };
        if local == Local::CloudMetadata {
            return Err(local);
        }
        if self.ports.iter().any(|(p, _)| *p == port) {
            return Ok(());
        }
        if port == sandy_net::dns::DNS_PORT && self.resolvers.contains(&ip) {
            return Ok(());
        }
        if only_own_listeners(ip, port, &self.own) {
            return Ok(());
        }
        Err(local)
    }

    /// Answers one intercepted `connect()`.
    pub fn serve(&self, listener: &OwnedFd, notif: &Notification, refusals: &mut Refusals) {
        let a = notif.data.args;
        let answer_error = |errno: Errno| {
            let _ = notify::answer_with_error(listener.as_fd(), notif.id, errno);
        };
        let let_through = || {
            let _ = notify::continue_call(listener.as_fd(), notif.id);
        };
        // The caller's socket, through a descriptor of the calling thread opened while
        // the call is known to be its own (the id was not reused).
        let Some(pidfd) = caller_pidfd(notif.pid) else {
            return let_through();
        };
        if !notify::still_valid(listener.as_fd(), notif.id) {
            return;
        }
        let Ok(fd) = i32::try_from(a[0]) else {
            return answer_error(Errno::EBADF);
        };
        let socket = match rustix::process::pidfd_getfd(
            &pidfd,
            fd,
            rustix::process::PidfdGetfdFlags::empty(),
        ) {
            Ok(s) => s,
            Err(e) if e == rustix::io::Errno::BADF => return answer_error(Errno::EBADF),
            // Not taken (the caller is gone, or not ours to look into): the kernel
            // decides, and refuses a TCP connect (Landlock).
            Err(_) => return let_through(),
        };
        let family = sandy_linux::sys::socket_family_and_protocol(socket.as_fd());
        if let (Ok((libc::AF_UNIX, _)), Some(unix)) = (family, &self.unix) {
            return self.serve_unix(unix, listener, notif, socket);
        }
        let tcp = matches!(
            family,
            Ok((libc::AF_INET | libc::AF_INET6, libc::IPPROTO_TCP))
        );
        if !tcp {
            return let_through();
        }
        // The address, copied once: what is decided is what is connected.
        let len = usize::try_from(a[2]).unwrap_or(usize::MAX);
        if len > 128 {
            return answer_error(Errno::EINVAL);
        }
        let mut address = vec![0u8; len];
        if len > 0 && crate::explain::read_memory(notif.pid, a[1], &mut address) != Some(len) {
            return answer_error(Errno::EFAULT);
        }
        if let Some((ip, port)) = destination(&address) {
            if let Err(local) = self.decide(ip, port) {
                record(refusals, ip, port, local);
                return answer_error(Errno::EACCES);
            }
        }
        self.connect_and_answer(listener, notif.id, socket, address, None);
    }

    /// Connects `socket` to `address` and answers call `id` with the outcome: at once for
    /// a non-blocking socket, else in a thread of its own, so that the notifier goes on
    /// answering the run's other calls while the connect waits (a TCP handshake, a full
    /// Unix listener's backlog). `keep`: a handle the address leads through, held until
    /// the connect is made.
    fn connect_and_answer(
        &self,
        listener: &OwnedFd,
        id: u64,
        socket: OwnedFd,
        address: Vec<u8>,
        keep: Option<OwnedFd>,
    ) {
        let answer_error = |errno: Errno| {
            let _ = notify::answer_with_error(listener.as_fd(), id, errno);
        };
        let blocking = nix::fcntl::fcntl(socket.as_fd(), nix::fcntl::FcntlArg::F_GETFL)
            .map(|flags| flags & libc::O_NONBLOCK == 0)
            .unwrap_or(false);
        if !blocking {
            return answer(listener.as_fd(), id, &socket, &address);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING_CONNECTS {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return answer_error(Errno::EAGAIN);
        }
        let Ok(listener) = listener.try_clone() else {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return answer_error(Errno::EAGAIN);
        };
        let waiting = Arc::clone(&self.waiting);
        let spawned = std::thread::Builder::new()
            .name("connect".to_owned())
            .stack_size(64 * 1024)
            .spawn(move || {
                answer(listener.as_fd(), id, &socket, &address);
                drop(keep);
                waiting.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            answer_error(Errno::EAGAIN);
        }
    }
}

impl Gate {
    /// A `connect()` of a Unix socket in the `landlock` tier: an abstract or unnamed
    /// address goes to the kernel (Landlock's scope decides); a pathname is connected here
    /// through a handle of the socket the gate opened ([`UnixGate::open`]), or refused.
    fn serve_unix(
        &self,
        unix: &UnixGate,
        listener: &OwnedFd,
        notif: &Notification,
        socket: OwnedFd,
    ) {
        let a = notif.data.args;
        let len = usize::try_from(a[2]).unwrap_or(usize::MAX);
        if len > std::mem::size_of::<libc::sockaddr_un>() {
            let _ = notify::answer_with_error(listener.as_fd(), notif.id, Errno::EINVAL);
            return;
        }
        let mut address = vec![0u8; len];
        if len > 0 && crate::explain::read_memory(notif.pid, a[1], &mut address) != Some(len) {
            let _ = notify::answer_with_error(listener.as_fd(), notif.id, Errno::EFAULT);
            return;
        }
        if unix_path(&address).is_none() {
            let _ = notify::continue_call(listener.as_fd(), notif.id);
            return;
        }
        match unix.open(notif.pid, &address) {
            Ok(handle) => {
                let address = proc_fd_address(&handle);
                self.connect_and_answer(listener, notif.id, socket, address, Some(handle));
            }
            Err(errno) => {
                let _ = notify::answer_with_error(listener.as_fd(), notif.id, errno);
            }
        }
    }
}

/// `PIDFD_THREAD` (Linux 6.9): a pidfd for one thread, not only a thread group's leader.
const PIDFD_THREAD: u32 = nix::libc::O_EXCL as u32;

/// A pidfd through which the calling thread `tid`'s descriptor table is reached: the
/// thread's own (Linux 6.9), or before that its thread group leader's, when the two share
/// one descriptor table (`kcmp`). `None` otherwise: the call is then left to the kernel,
/// where Landlock refuses a TCP connect.
fn caller_pidfd(tid: u32) -> Option<OwnedFd> {
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let raw = i32::try_from(tid).ok()?;
    let pid = Pid::from_raw(raw)?;
    if let Ok(fd) = pidfd_open(pid, PidfdFlags::from_bits_retain(PIDFD_THREAD)) {
        return Some(fd);
    }
    let tgid = thread_group(raw)?;
    if tgid != raw && !sandy_linux::sys::same_descriptor_table(raw, tgid) {
        return None;
    }
    pidfd_open(Pid::from_raw(tgid)?, PidfdFlags::empty()).ok()
}

/// The thread group (process) of thread `tid`, from `/proc/TID/status`.
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
fn thread_group(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Connects `socket` to `address` and answers the call with the outcome.
fn answer(listener: BorrowedFd<'_>, id: u64, socket: &OwnedFd, address: &[u8]) {
    let _ = match sandy_linux::sys::connect_raw(socket.as_fd(), address) {
        Ok(()) => notify::answer_with_value(listener, id, 0),
        Err(errno) => notify::answer_with_error(listener, id, errno),
    };
}

fn record(refusals: &mut Refusals, ip: IpAddr, port: u16, local: Local) {
    let ip = sandy_net::addr::canonical(ip);
    if let Some(entry) = refusals.seen.get_mut(&(ip, port)) {
        entry.1 += 1;
    } else if refusals.seen.len() < MAX_REFUSALS {
        refusals.seen.insert((ip, port), (local, 1));
    } else {
        refusals.unrecorded += 1;
    }
}

/// The IP address and port of a socket address as the caller passed it: `sockaddr_in`
/// (at least 16 bytes) or `sockaddr_in6` (at least 24). `None` for anything else (the
/// kernel refuses it, or, for `AF_UNSPEC`, disconnects).
pub fn destination(address: &[u8]) -> Option<(IpAddr, u16)> {
    let family = u16::from_ne_bytes([*address.first()?, *address.get(1)?]);
    let port = u16::from_be_bytes([*address.get(2)?, *address.get(3)?]);
    match i32::from(family) {
        libc::AF_INET if address.len() >= 16 => {
            let o: [u8; 4] = address[4..8].try_into().ok()?;
            Some((IpAddr::V4(Ipv4Addr::from(o)), port))
        }
        libc::AF_INET6 if address.len() >= 24 => {
            let o: [u8; 16] = address[8..24].try_into().ok()?;
            Some((IpAddr::V6(Ipv6Addr::from(o)), port))
        }
        _ => None,
    }
}

/// Whether every socket listening on `ip:port` in the host's namespace (the address
/// itself, or a wildcard that covers it) is one of the run's own, and there is one.
fn only_own_listeners(ip: IpAddr, port: u16, own: &HashSet<u64>) -> bool {
    let listeners = listeners_on(ip, port);
    !listeners.is_empty() && listeners.iter().all(|inode| own.contains(inode))
}

/// The inode numbers of the TCP sockets listening where a connect to `ip:port` could
/// land, in the host's namespace: asked of the kernel's socket diagnostics (a dump of the
/// listening sockets only, which walks the listening table, not every connection), or,
/// where that is unavailable, read from `/proc/thread-self/net/tcp` and `tcp6`.
fn listeners_on(ip: IpAddr, port: u16) -> Vec<u64> {
    let mut listening = Vec::new();
    let mut diag = true;
    for family in [libc::AF_INET, libc::AF_INET6] {
        match sandy_linux::sys::listening_tcp(family) {
            Ok(found) => listening.extend(found),
            Err(_) => diag = false,
        }
    }
    if !diag {
        listening = proc_listeners();
    }
    listening
        .into_iter()
        .filter(|((bound, p), _)| *p == port && covers(*bound, ip))
        .map(|(_, inode)| inode)
        .collect()
}

/// Every listening TCP socket from `/proc/thread-self/net/tcp` and `tcp6`.
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
fn proc_listeners() -> Vec<((IpAddr, u16), u64)> {
    let mut out = Vec::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) else {
            continue;
        };
        out.extend(text.lines().skip(1).filter_map(|l| parse_listener(l, v6)));
    }
    out
}

/// Whether a listener bound to `bound` takes a connection to `ip`: the same address, or
/// a wildcard of its family (an IPv6 wildcard takes IPv4 too, unless it is IPv6-only,
/// which `/proc` does not say: counted as taking it, which only makes the test stricter).
fn covers(bound: IpAddr, ip: IpAddr) -> bool {
    let bound = sandy_net::addr::canonical(bound);
    let ip = sandy_net::addr::canonical(ip);
    bound == ip || bound.is_unspecified()
}

/// One line of `/proc/net/tcp{,6}`: the local address and port and the inode of a
/// listening socket (state `0A`); `None` for any other line.
fn parse_listener(line: &str, v6: bool) -> Option<((IpAddr, u16), u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(3) != Some(&"0A") {
        return None;
    }
    let (addr, port) = fields.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let inode = fields.get(9)?.parse::<u64>().ok()?;
    // Each 32-bit word is printed in the host's byte order.
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = if v6 {
        if addr.len() != 32 {
            return None;
        }
        let mut octets = [0u8; 16];
        for i in 0..4 {
            octets[i * 4..i * 4 + 4].copy_from_slice(&word(&addr[i * 8..i * 8 + 8])?);
        }
        IpAddr::V6(Ipv6Addr::from(octets))
    } else {
        if addr.len() != 8 {
            return None;
        }
        IpAddr::V4(Ipv4Addr::from(word(addr)?))
    };
    Some(((ip, port), inode))
}

/// Lines for the run's end: each refused destination (at most `most`), with why it is
/// closed and what opens it.
pub fn report(refusals: &Refusals, most: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for ((ip, port), (local, times)) in refusals.seen.iter().take(most) {
        let shown = match ip {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            IpAddr::V4(v4) => format!("{v4}:{port}"),
        };
        let times = if *times > 1 {
            format!(" ({times} times)")
        } else {
            String::new()
        };
        let remedy = match local {
            Local::CloudMetadata => "never reachable from the sandbox".to_owned(),
            _ => format!(
                "the host's own services are closed by default; --allow-local-port {port} \
                 opens that port (docs/network.md)"
            ),
        };
        lines.push(format!(
            "refused: a connection to {shown}{times}, {}: {remedy}",
            local.describe()
        ));
    }
    let more = refusals.seen.len().saturating_sub(most) as u64 + refusals.unrecorded;
    if more > 0 {
        lines.push(format!("refused: ... and {more} more closed destinations"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_are_read_as_the_kernel_reads_them() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&5432u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(destination(&v4), Some(("127.0.0.1".parse().unwrap(), 5432)));
        // Longer is fine for IPv4 (the kernel reads the first 16 bytes); shorter is not.
        v4.extend_from_slice(&[0; 12]);
        assert!(destination(&v4).is_some());
        assert_eq!(destination(&v4[..15]), None);
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[8..24].copy_from_slice(&"::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(
            destination(&v6),
            Some(("::ffff:127.0.0.1".parse().unwrap(), 80))
        );
        assert_eq!(destination(&v6[..23]), None);
        let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes();
        assert_eq!(destination(&[unspec[0], unspec[1], 0, 0]), None);
    }

    #[test]
    fn listening_sockets_are_read_from_procfs_lines() {
        let v4 = "   0: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            parse_listener(v4, false),
            Some((("127.0.0.1".parse().unwrap(), 5432), 12345))
        );
        let established = v4.replace(" 0A ", " 01 ");
        assert_eq!(parse_listener(&established, false), None);
        let v6 = "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            parse_listener(v6, true),
            Some((("::1".parse().unwrap(), 80), 999))
        );
    }

    #[test]
    fn a_wildcard_listener_covers_every_address_of_its_port() {
        let any4: IpAddr = "0.0.0.0".parse().unwrap();
        let any6: IpAddr = "::".parse().unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(covers(any4, lo));
        assert!(covers(any6, lo));
        assert!(covers(lo, "::ffff:127.0.0.1".parse().unwrap()));
        assert!(!covers(lo, "127.0.0.2".parse().unwrap()));
    }

    /// The socket diagnostics and procfs agree on the listening sockets.
    #[test]
    fn socket_diagnostics_list_what_procfs_lists() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inode = nix::sys::stat::fstat(listener.as_fd()).unwrap().st_ino;
        let diag = sandy_linux::sys::listening_tcp(libc::AF_INET).unwrap();
        let want = (("127.0.0.1".parse().unwrap(), port), inode);
        assert!(diag.contains(&want), "{diag:?}");
        assert!(proc_listeners().contains(&want));
    }

    /// A listener this process owns on loopback is "own" only when its inode is
    /// remembered; another listener on the same port makes it not only own.
    #[test]
    fn only_the_runs_own_listeners_open_a_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let inode = nix::sys::stat::fstat(listener.as_fd()).unwrap().st_ino;
        let mut own = HashSet::new();
        assert!(!only_own_listeners(lo, port, &own));
        own.insert(inode);
        assert!(only_own_listeners(lo, port, &own));
        // Nothing listens on the port: nothing to connect to, so not "own".
        drop(listener);
        assert!(!only_own_listeners(lo, port, &own));
    }

    #[test]
    fn refusals_name_the_destination_and_what_opens_it_but_never_open_metadata() {
        let mut r = Refusals::default();
        record(
            &mut r,
            "::ffff:127.0.0.1".parse().unwrap(),
            5432,
            Local::Loopback,
        );
        record(&mut r, "127.0.0.1".parse().unwrap(), 5432, Local::Loopback);
        record(
            &mut r,
            "169.254.169.254".parse().unwrap(),
            80,
            Local::CloudMetadata,
        );
        let lines = report(&r, 5);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("127.0.0.1:5432 (2 times)"), "{lines:?}");
        assert!(lines[0].contains("--allow-local-port 5432"), "{lines:?}");
        assert!(lines[1].contains("169.254.169.254:80"), "{lines:?}");
        assert!(!lines[1].contains("--allow"), "{lines:?}");
        assert_eq!(
            report(&r, 1).last().unwrap(),
            "refused: ... and 1 more closed destinations"
        );
    }

    #[test]
    fn unix_addresses_are_read_up_to_their_first_nul() {
        let af = (libc::AF_UNIX as u16).to_ne_bytes();
        let named = [&af[..], b"/run/user/0/bus\0junk"].concat();
        assert_eq!(
            unix_path(&named),
            Some(std::path::PathBuf::from("/run/user/0/bus"))
        );
        let relative = [&af[..], b"own.sock"].concat();
        assert_eq!(unix_path(&relative), Some("own.sock".into()));
        // Abstract and unnamed addresses are Landlock's scope, not the gate's.
        assert_eq!(unix_path(&[&af[..], b"\0abstract"].concat()), None);
        assert_eq!(unix_path(&af), None);
        let inet = [&(libc::AF_INET as u16).to_ne_bytes()[..], &[0u8; 14]].concat();
        assert_eq!(unix_path(&inet), None);
    }
}
