//! Local-port grants under a blocked network (design 3.5): the bootstrap creates the
//! listening sockets on `127.0.0.1:PORT` inside the sandbox's network namespace and hands
//! them to the supervisor, which relays each connection to the host's `127.0.0.1:PORT`.
//! Nothing else on the host, and no remote host, becomes reachable.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::error::LinuxError;
use crate::sys;

/// In the bootstrap, inside the new network namespace: listens on each port and sends the
/// listeners to the supervisor in one message (ports as little-endian u16s, same order).
pub fn hand_over_listeners(channel: &OwnedFd, ports: &[u16]) -> Result<(), LinuxError> {
    let mut listeners = Vec::with_capacity(ports.len());
    for &port in ports {
        let listener =
            TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).map_err(|source| {
                LinuxError::Relay {
                    step: "cannot listen on a granted local port inside the sandbox",
                    source,
                }
            })?;
        listeners.push(OwnedFd::from(listener));
    }
    let fds: Vec<i32> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    let data: Vec<u8> = ports.iter().flat_map(|p| p.to_le_bytes()).collect();
    let iov = [IoSlice::new(&data)];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(channel.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).map_err(|e| {
        LinuxError::Relay {
            step: "cannot hand the local-port listeners to the supervisor",
            source: e.into(),
        }
    })?;
    Ok(())
}

/// In the supervisor: receives the listeners. `Ok(None)` when the bootstrap ended without
/// sending them (it failed, and reports why itself).
pub fn receive_listeners(
    channel: &OwnedFd,
    count: usize,
) -> Result<Option<Vec<(u16, TcpListener)>>, std::io::Error> {
    let mut data = vec![0u8; count * 2];
    let mut iov = [IoSliceMut::new(&mut data)];
    let mut space = nix::cmsg_space!([i32; 64]);
    let msg = recvmsg::<()>(
        channel.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            fds.extend(received);
        }
    }
    let owned = sys::adopt_received_fds(&fds);
    if msg.bytes == 0 && owned.is_empty() {
        return Ok(None);
    }
    if msg.bytes != count * 2 || owned.len() != count {
        return Err(std::io::Error::other("malformed local-port hand-over"));
    }
    let ports = data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    Ok(Some(
        ports
            .zip(owned)
            .map(|(p, fd)| (p, TcpListener::from(fd)))
            .collect(),
    ))
}

/// Stack size of relay threads: they only shuttle bytes through a small buffer.
const RELAY_STACK: usize = 128 * 1024;

/// Relays every connection accepted on `listener` to the host's `127.0.0.1:port`, in
/// background threads that end with the process.
pub fn spawn_relay(port: u16, listener: TcpListener) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("relay-{port}"))
        .stack_size(RELAY_STACK)
        .spawn(move || {
            for client in listener.incoming().flatten() {
                let _ = std::thread::Builder::new()
                    .stack_size(RELAY_STACK)
                    .spawn(move || relay_connection(client, port));
            }
        })
        .map(drop)
}

fn relay_connection(client: TcpStream, port: u16) {
    let Ok(upstream) = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) else {
        return; // Dropping the client refuses it, as the host would.
    };
    let (Ok(client_read), Ok(upstream_write)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    // One direction on a helper thread, the other here; each half-closes its peer at EOF.
    let forward = std::thread::Builder::new()
        .stack_size(RELAY_STACK)
        .spawn(move || pipe(client_read, upstream_write));
    pipe(upstream, client);
    if let Ok(handle) = forward {
        let _ = handle.join();
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}
