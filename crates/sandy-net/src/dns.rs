//! The name-resolution relay of a sandbox on the host's network (design 3.6).
//!
//! There, the sandbox's TCP sockets are made in the host's network namespace by the
//! supervisor, which connects them itself after checking the destination; its UDP
//! sockets stay in its own, private namespace, which routes nowhere. Name resolution
//! still works wherever the host's resolver lives (a local stub such as `127.0.0.53`, a
//! network's resolver, a container runtime's): the bootstrap puts each resolver's address
//! on the private loopback and binds UDP port 53 there, and this relay forwards each
//! query to the same address in the host's namespace and each answer back to the asker.
//! Nothing else is relayed: the datagram goes only to port 53 of an address the host's
//! `resolv.conf` names.
//!
//! Queries of different askers may carry the same identifier: each forwarded query gets
//! an identifier of the relay's own, and an answer is taken only from the resolver the
//! query went to, with an identifier the relay is waiting for.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// The DNS port.
pub const DNS_PORT: u16 = 53;
/// Queries waiting for an answer, at most; the oldest is forgotten beyond it.
const MAX_PENDING: usize = 4096;
/// How long a query waits for its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest datagram.
const DATAGRAM: usize = 65_536;

/// A running relay; [`DnsRelay::stop`] ends it.
pub struct DnsRelay {
    stop: Arc<AtomicBool>,
    /// Written to on [`DnsRelay::stop`]: wakes the thread at once.
    wake: std::os::unix::net::UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl DnsRelay {
    /// Serves `inside`: each socket bound to port 53 of a resolver's address inside the
    /// sandbox, forwarded to the same address outside (from this thread's namespace).
    pub fn start(inside: Vec<(IpAddr, UdpSocket)>) -> io::Result<DnsRelay> {
        DnsRelay::start_to(inside, DNS_PORT)
    }

    /// [`DnsRelay::start`], forwarding to `port` of each resolver's address.
    fn start_to(inside: Vec<(IpAddr, UdpSocket)>, port: u16) -> io::Result<DnsRelay> {
        let v4 = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
        let v6 = UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).ok();
        for (_, s) in &inside {
            s.set_nonblocking(true)?;
        }
        v4.set_nonblocking(true)?;
        if let Some(v6) = &v6 {
            v6.set_nonblocking(true)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let (wake, woken) = std::os::unix::net::UnixStream::pair()?;
        let thread = std::thread::Builder::new()
            .name("dns-relay".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || serve(&inside, (&v4, v6.as_ref()), port, &stopping, &woken))?;
        Ok(DnsRelay {
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// Ends the relay and waits for its thread (woken at once).
    pub fn stop(mut self) {
        use std::io::Write;
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.wake.write_all(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A forwarded query.
struct Pending {
    /// Which inside socket it came in on.
    socket: usize,
    asker: SocketAddr,
    id: [u8; 2],
    resolver: SocketAddr,
    sent: Instant,
}

fn serve(
    inside: &[(IpAddr, UdpSocket)],
    (v4, v6): (&UdpSocket, Option<&UdpSocket>),
    port: u16,
    stop: &AtomicBool,
    woken: &std::os::unix::net::UnixStream,
) {
    let mut pending: HashMap<u16, Pending> = HashMap::new();
    let mut next: u16 = rand_seed();
    let mut buf = vec![0u8; DATAGRAM];
    while !stop.load(Ordering::Relaxed) {
        let mut fds: Vec<PollFd<'_>> = inside
            .iter()
            .map(|(_, s)| PollFd::new(s.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(v4.as_fd(), PollFlags::POLLIN));
        if let Some(v6) = v6 {
            fds.push(PollFd::new(v6.as_fd(), PollFlags::POLLIN));
        }
        fds.push(PollFd::new(woken.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => {}
            Err(_) => return,
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| {
                f.revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLERR))
            })
            .collect();
        drop(fds);
        pending.retain(|_, p| p.sent.elapsed() < ANSWER_TIMEOUT);
        for (index, (resolver, socket)) in inside.iter().enumerate() {
            if !ready[index] {
                continue;
            }
            while let Ok((n, asker)) = socket.recv_from(&mut buf) {
                if n < 12 {
                    continue;
                }
                let outside = match resolver {
                    IpAddr::V4(_) => v4,
                    IpAddr::V6(_) => match v6 {
                        Some(s) => s,
                        None => continue,
                    },
                };
                if pending.len() >= MAX_PENDING {
                    if let Some(oldest) =
                        pending.iter().min_by_key(|(_, p)| p.sent).map(|(k, _)| *k)
                    {
                        pending.remove(&oldest);
                    }
                }
                let mut ours = next;
                while pending.contains_key(&ours) {
                    ours = ours.wrapping_add(1);
                }
                next = ours.wrapping_add(7919);
                let id = [buf[0], buf[1]];
                buf[..2].copy_from_slice(&ours.to_be_bytes());
                let to = SocketAddr::new(*resolver, port);
                if outside.send_to(&buf[..n], to).is_ok() {
                    pending.insert(
                        ours,
                        Pending {
                            socket: index,
                            asker,
                            id,
                            resolver: to,
                            sent: Instant::now(),
                        },
                    );
                }
            }
        }
        let outsides = [Some(v4), v6];
        for (k, outside) in outsides.iter().enumerate() {
            let Some(outside) = outside else { continue };
            if !ready.get(inside.len() + k).copied().unwrap_or(false) {
                continue;
            }
            while let Ok((n, from)) = outside.recv_from(&mut buf) {
                if n < 12 {
                    continue;
                }
                let ours = u16::from_be_bytes([buf[0], buf[1]]);
                let matches = pending.get(&ours).is_some_and(|p| same(p.resolver, from));
                if !matches {
                    continue;
                }
                if let Some(p) = pending.remove(&ours) {
                    buf[..2].copy_from_slice(&p.id);
                    let _ = inside[p.socket].1.send_to(&buf[..n], p.asker);
                }
            }
        }
    }
}

/// Whether an answer came from where the query went (an IPv4 resolver answers an IPv4
/// socket; mapped forms compare as IPv4).
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && crate::addr::canonical(a.ip()) == crate::addr::canonical(b.ip())
}

/// A starting identifier that differs between runs.
fn rand_seed() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ std::process::id()) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resolver on 127.0.0.1 that answers each query with its own bytes plus a marker;
    /// the relay serves an inside socket on 127.0.0.2. Two askers using the same
    /// identifier each get their own answer, with their identifier back; a datagram from
    /// elsewhere to the relay's outside socket is not passed on.
    #[test]
    fn queries_are_relayed_and_answers_go_back_to_their_askers() {
        let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = resolver.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut b = [0u8; 512];
            while let Ok((n, from)) = resolver.recv_from(&mut b) {
                let mut answer = b[..n].to_vec();
                answer.extend_from_slice(b"+answer");
                let _ = resolver.send_to(&answer, from);
            }
        });
        let inside = UdpSocket::bind("127.0.0.2:0").unwrap();
        let inside_addr = inside.local_addr().unwrap();
        let relay = DnsRelay::start_to(vec![("127.0.0.1".parse().unwrap(), inside)], port).unwrap();
        let askers: Vec<UdpSocket> = (0..2)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s
            })
            .collect();
        for (i, asker) in askers.iter().enumerate() {
            let mut query = vec![0xab, 0xcd];
            query.extend_from_slice(format!("query-{i}-padding").as_bytes());
            asker.send_to(&query, inside_addr).unwrap();
        }
        for (i, asker) in askers.iter().enumerate() {
            let mut b = [0u8; 512];
            let (n, from) = asker.recv_from(&mut b).unwrap();
            assert_eq!(from, inside_addr);
            let mut want = vec![0xab, 0xcd];
            want.extend_from_slice(format!("query-{i}-padding+answer").as_bytes());
            assert_eq!(&b[..n], &want[..]);
        }
        // Stopping wakes the thread at once: the run's end never waits for a poll.
        let t = Instant::now();
        relay.stop();
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn answers_count_only_from_the_resolver_asked() {
        let resolver = "127.0.0.1:53".parse::<SocketAddr>().unwrap();
        assert!(same(resolver, "[::ffff:127.0.0.1]:53".parse().unwrap()));
        assert!(!same(resolver, "127.0.0.2:53".parse().unwrap()));
        assert!(!same(resolver, "127.0.0.1:5353".parse().unwrap()));
    }
}
