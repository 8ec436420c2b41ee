//! The local-port relay (design 3.5): the supervisor's side of `--allow-local-port` and
//! `--numbat-collector`. The bootstrap creates each listener on `127.0.0.1:PORT` inside
//! the sandbox's private network namespace and hands it over (`sandy_linux::relay`);
//! here each accepted connection is passed on to the host's `127.0.0.1:PORT`, and after
//! the target's exit what the sandbox already sent is delivered before Sandy exits.
//! Nothing else on the host, and no remote host on that port, becomes reachable.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Stack size of relay threads: they only shuttle bytes through a small buffer.
const RELAY_STACK: usize = 128 * 1024;

/// Connections whose sandbox-to-host direction is still being forwarded.
static UPLOADS: Mutex<usize> = Mutex::new(0);
static UPLOAD_ENDED: Condvar = Condvar::new();
/// Duplicates of the listeners, to see connections not yet accepted.
static LISTENERS: Mutex<Vec<TcpListener>> = Mutex::new(Vec::new());

/// Locks one of the relay's shared states; a thread that panicked while holding it left
/// it usable (a count, a list of descriptors).
fn lock<T>(state: &'static Mutex<T>) -> MutexGuard<'static, T> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn uploads() -> MutexGuard<'static, usize> {
    lock(&UPLOADS)
}

/// Counts one connection's upload from accept until everything the sandbox sent has been
/// passed on to the host.
struct Upload;

impl Upload {
    fn start() -> Upload {
        *uploads() += 1;
        Upload
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        let mut n = uploads();
        *n = n.saturating_sub(1);
        UPLOAD_ENDED.notify_all();
    }
}

/// Relays every connection accepted on `listener` to the host's `127.0.0.1:port`, in
/// background threads; [`finish_uploads`] lets what the sandbox already sent arrive, and
/// [`stop_relays`] then ends the listeners' threads.
pub fn spawn_relay(port: u16, listener: TcpListener) -> io::Result<()> {
    lock(&LISTENERS).push(listener.try_clone()?);
    std::thread::Builder::new()
        .name(format!("relay-{port}"))
        .stack_size(RELAY_STACK)
        .spawn(move || loop {
            let client = match listener.accept() {
                Ok((client, _)) => client,
                // Shut down ([`stop_relays`]): accept fails with EINVAL from then on.
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => break,
                Err(_) => continue,
            };
            {
                let upload = Upload::start();
                let _ = std::thread::Builder::new()
                    .stack_size(RELAY_STACK)
                    .spawn(move || relay_connection(client, port, upload));
            }
        })
        .map(drop)
}

/// Ends every relay's listener thread (once the run is over and its uploads delivered):
/// its listener is shut down, which ends the thread's wait for the next connection.
pub fn stop_relays() {
    for listener in lock(&LISTENERS).drain(..) {
        let _ = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    }
}

/// Whether a connection waits on a listener, not yet accepted.
fn connection_pending() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let listeners = lock(&LISTENERS);
    let mut fds: Vec<PollFd<'_>> = listeners
        .iter()
        .map(|l| PollFd::new(l.as_fd(), PollFlags::POLLIN))
        .collect();
    if fds.is_empty() {
        return false;
    }
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// After the target has exited: waits, at most `limit`, until every byte the sandbox
/// sent through a relayed connection has been passed on to the host (the sandbox's ends
/// are closed, so each upload ends at its last byte). Returns whether all arrived in time.
pub fn finish_uploads(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut n = uploads();
    loop {
        if *n == 0 {
            drop(n);
            if !connection_pending() {
                return true;
            }
            n = uploads();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        // A pending connection is accepted by the relay thread, not here: look again soon.
        n = UPLOAD_ENDED
            .wait_timeout(n, left.min(Duration::from_millis(5)))
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}

fn relay_connection(client: TcpStream, port: u16, upload: Upload) {
    let Ok(upstream) = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) else {
        return; // Dropping the client refuses it, as the host would.
    };
    let (Ok(client_read), Ok(upstream_write)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    // One direction on a helper thread, the other here; each half-closes its peer at EOF.
    let forward = std::thread::Builder::new()
        .stack_size(RELAY_STACK)
        .spawn(move || {
            pipe(client_read, upstream_write);
            drop(upload);
        });
    pipe(upstream, client);
    if let Ok(handle) = forward {
        let _ = handle.join();
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}
