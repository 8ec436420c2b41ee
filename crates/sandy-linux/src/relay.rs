//! The channel from the bootstrap to the supervisor. Local-port grants and the egress
//! proxy (design 3.5, 3.6): the bootstrap creates the listening sockets on
//! `127.0.0.1:PORT` inside the sandbox's private network namespace and hands them over;
//! the supervisor serves them from outside (`sandy_net::relay`, `sandy_net::proxy`).
//! The same channel then carries the pids of the target and the init the bootstrap started, and the
//! refusal observer's listener.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
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

/// In the bootstrap, inside the new network namespace (its loopback up, each resolver's
/// address on it): binds UDP port 53 of each name server and sends the sockets to the
/// supervisor in one message (each address as a family byte, 4 or 6, and 16 bytes, in
/// the order of the sockets). A link-local name server (which needs its interface, absent
/// inside) is left out.
pub fn hand_over_resolvers(
    channel: &OwnedFd,
    resolvers: &[std::net::IpAddr],
) -> Result<(), LinuxError> {
    use std::net::{IpAddr, SocketAddr, UdpSocket};
    let mut sockets = Vec::with_capacity(resolvers.len());
    let mut data = Vec::with_capacity(resolvers.len() * 17);
    for &ip in resolvers {
        if let IpAddr::V6(v6) = ip {
            if v6.segments()[0] & 0xffc0 == 0xfe80 {
                continue;
            }
        }
        let socket =
            UdpSocket::bind(SocketAddr::new(ip, 53)).map_err(|source| LinuxError::Relay {
                step: "cannot listen on a name server's address inside the sandbox",
                source,
            })?;
        match ip {
            IpAddr::V4(v4) => {
                data.push(4);
                data.extend_from_slice(&v4.to_ipv6_mapped().octets());
            }
            IpAddr::V6(v6) => {
                data.push(6);
                data.extend_from_slice(&v6.octets());
            }
        }
        sockets.push(OwnedFd::from(socket));
    }
    let fds: Vec<i32> = sockets.iter().map(AsRawFd::as_raw_fd).collect();
    data.insert(0, RESOLVERS_TAG);
    let iov = [IoSlice::new(&data)];
    let rights = [ControlMessage::ScmRights(&fds)];
    let cmsg: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<()>(channel.as_raw_fd(), &iov, cmsg, MsgFlags::empty(), None).map_err(|e| {
        LinuxError::Relay {
            step: "cannot hand the name servers' sockets to the supervisor",
            source: e.into(),
        }
    })?;
    Ok(())
}

/// The first byte of the message of [`hand_over_resolvers`].
const RESOLVERS_TAG: u8 = b'R';

/// One message of data into `data` with the descriptors it carries (at most 64): how
/// many bytes came, and the descriptors, owned.
fn receive_with_fds(
    channel: &OwnedFd,
    data: &mut [u8],
) -> Result<(usize, Vec<OwnedFd>), std::io::Error> {
    let mut iov = [IoSliceMut::new(data)];
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
    Ok((msg.bytes, sys::adopt_received_fds(&fds)))
}

/// In the supervisor: receives the name servers' sockets (at most `most`) with their
/// addresses. `Ok(None)` when the bootstrap ended without sending them (it failed, and
/// reports why itself).
pub fn receive_resolvers(
    channel: &OwnedFd,
    most: usize,
) -> Result<Option<Vec<(std::net::IpAddr, std::net::UdpSocket)>>, std::io::Error> {
    use std::net::{IpAddr, Ipv6Addr};
    let mut data = vec![0u8; 1 + most * 17];
    let (bytes, owned) = receive_with_fds(channel, &mut data)?;
    if bytes == 0 && owned.is_empty() {
        return Ok(None);
    }
    let malformed = || std::io::Error::other("malformed name-server hand-over");
    if data.first() != Some(&RESOLVERS_TAG) || (bytes - 1) % 17 != 0 {
        return Err(malformed());
    }
    let addresses: Vec<IpAddr> = data[1..bytes]
        .chunks_exact(17)
        .map(|c| {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&c[1..]);
            let v6 = Ipv6Addr::from(octets);
            match (c[0], v6.to_ipv4_mapped()) {
                (4, Some(v4)) => Ok(IpAddr::V4(v4)),
                (6, _) => Ok(IpAddr::V6(v6)),
                _ => Err(malformed()),
            }
        })
        .collect::<Result<_, _>>()?;
    if addresses.len() != owned.len() || addresses.len() > most {
        return Err(malformed());
    }
    Ok(Some(
        addresses
            .into_iter()
            .zip(owned)
            .map(|(ip, fd)| (ip, std::net::UdpSocket::from(fd)))
            .collect(),
    ))
}

/// In the supervisor: receives the listeners. `Ok(None)` when the bootstrap ended without
/// sending them (it failed, and reports why itself).
pub fn receive_listeners(
    channel: &OwnedFd,
    count: usize,
) -> Result<Option<Vec<(u16, TcpListener)>>, std::io::Error> {
    let mut data = vec![0u8; count * 2];
    let (bytes, owned) = receive_with_fds(channel, &mut data)?;
    if bytes == 0 && owned.is_empty() {
        return Ok(None);
    }
    if bytes != count * 2 || owned.len() != count {
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

/// Sends `fds` in one message (a tag byte and the descriptors, at most four; none is
/// allowed), received with [`receive_any`].
pub fn send_fds(channel: &OwnedFd, fds: &[&OwnedFd]) -> std::io::Result<()> {
    let data = [FDS_TAG];
    let iov = [IoSlice::new(&data)];
    let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsg: &[ControlMessage] = if raw.is_empty() { &[] } else { &rights };
    sendmsg::<()>(channel.as_raw_fd(), &iov, cmsg, MsgFlags::empty(), None)?;
    Ok(())
}

/// Sends a message of data: a tag byte (not [`FDS_TAG`]), then `data`.
pub fn send_data(channel: &OwnedFd, tag: u8, data: &[u8]) -> std::io::Result<()> {
    let head = [tag];
    let iov = [IoSlice::new(&head), IoSlice::new(data)];
    sendmsg::<()>(channel.as_raw_fd(), &iov, &[], MsgFlags::empty(), None)?;
    Ok(())
}

/// One message on the channel: its tag, its data (at most the buffer's length; `None` if
/// the message was longer), and the descriptors of a message of [`send_fds`].
#[derive(Debug)]
pub struct Received {
    pub tag: u8,
    pub data: Option<Vec<u8>>,
    pub fds: Vec<OwnedFd>,
}

/// Receives the next message, of [`send_data`] (data of at most `max` bytes) or of
/// [`send_fds`]; an error when the sender is gone without one.
pub fn receive_any(channel: &OwnedFd, max: usize) -> std::io::Result<Received> {
    let mut tag = [0u8; 1];
    let mut data = vec![0u8; max];
    let (bytes, truncated, fds) = {
        let mut iov = [IoSliceMut::new(&mut tag), IoSliceMut::new(&mut data)];
        let mut space = nix::cmsg_space!([i32; 4]);
        let msg = loop {
            match recvmsg::<()>(
                channel.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other?,
            }
        };
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                fds.extend(received);
            }
        }
        (
            msg.bytes,
            msg.flags.contains(MsgFlags::MSG_TRUNC),
            sys::adopt_received_fds(&fds),
        )
    };
    if bytes == 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    data.truncate(bytes - 1);
    Ok(Received {
        tag: tag[0],
        data: (!truncated).then_some(data),
        fds,
    })
}

/// The tag of a message of [`send_fds`].
pub const FDS_TAG: u8 = b'F';

/// In the bootstrap: tells the supervisor the pids (in the supervisor's PID namespace) of
/// the target and of the sandbox's init it has started, both the supervisor's own
/// children.
pub fn send_launched(channel: &OwnedFd, target: i32, init: i32) -> Result<(), LinuxError> {
    let mut data = [0u8; LAUNCHED_LEN];
    data[..4].copy_from_slice(&target.to_le_bytes());
    data[4..].copy_from_slice(&init.to_le_bytes());
    nix::sys::socket::send(channel.as_raw_fd(), &data, MsgFlags::empty()).map_err(|e| {
        LinuxError::Relay {
            step: "cannot tell the supervisor the pids of the target and the init",
            source: e.into(),
        }
    })?;
    Ok(())
}

/// The length of [`send_launched`]'s message: two little-endian pids.
const LAUNCHED_LEN: usize = 8;

/// What the bootstrap started: the target's pid and the init's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    pub target: i32,
    pub init: i32,
}

impl Launched {
    fn decode(data: &[u8; LAUNCHED_LEN]) -> Launched {
        Launched {
            target: i32::from_le_bytes([data[0], data[1], data[2], data[3]]),
            init: i32::from_le_bytes([data[4], data[5], data[6], data[7]]),
        }
    }
}

/// In the supervisor: the pids of [`send_launched`]. `Ok(None)` when the bootstrap ended
/// without starting a target (it failed, and reports why itself).
pub fn receive_launched(channel: &OwnedFd) -> Result<Option<Launched>, std::io::Error> {
    let mut data = [0u8; LAUNCHED_LEN];
    let n = loop {
        match nix::sys::socket::recv(channel.as_raw_fd(), &mut data, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    match n {
        0 => Ok(None),
        LAUNCHED_LEN => Ok(Some(Launched::decode(&data))),
        _ => Err(std::io::Error::other("malformed pids from the bootstrap")),
    }
}

/// The tag of the message that carries the refusal observer's listener.
const OBSERVER_TAG: u8 = b'O';

/// In the target, before `execve`: hands the refusal observer's listener to the
/// supervisor (one byte and the descriptor). The bootstrap sends the pids on the
/// same channel, so the two messages may arrive in either order; their lengths tell them
/// apart.
pub fn hand_over_observer(channel: &OwnedFd, listener: &OwnedFd) -> Result<(), LinuxError> {
    let data = [OBSERVER_TAG];
    let iov = [IoSlice::new(&data)];
    let fds = [listener.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(channel.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).map_err(|e| {
        LinuxError::Relay {
            step: "cannot hand the refusal observer to the supervisor",
            source: e.into(),
        }
    })?;
    Ok(())
}

/// In the supervisor: the pids of [`send_launched`] and, when `observer` is set, the refusal
/// observer's listener (`None` when the target ended or failed before handing it over).
/// `Ok(None)` when the bootstrap ended without starting a target (it failed, and reports
/// why itself).
pub fn receive_target(
    channel: &OwnedFd,
    observer: bool,
) -> Result<Option<(Launched, Option<OwnedFd>)>, std::io::Error> {
    if !observer {
        return Ok(receive_launched(channel)?.map(|launched| (launched, None)));
    }
    let (mut pid, mut listener) = (None, None);
    while pid.is_none() || listener.is_none() {
        let mut data = [0u8; LAUNCHED_LEN];
        let mut iov = [IoSliceMut::new(&mut data)];
        let mut space = nix::cmsg_space!([i32; 1]);
        let msg = match recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => other?,
        };
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                fds.extend(received);
            }
        }
        let mut owned = sys::adopt_received_fds(&fds);
        let bytes = msg.bytes;
        match (bytes, owned.len()) {
            // Every sender is gone.
            (0, 0) => break,
            (LAUNCHED_LEN, 0) => pid = Some(Launched::decode(&data)),
            (1, 1) if data[0] == OBSERVER_TAG => listener = owned.pop(),
            _ => {
                return Err(std::io::Error::other(
                    "malformed message from the bootstrap",
                ))
            }
        }
    }
    Ok(pid.map(|pid| (pid, listener)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    /// The supervisor's messages to a bootstrap forked ahead, in order: data under its
    /// tag (whole, or `None` when longer than the receiver takes), then descriptors; the
    /// end of the channel is an error.
    #[test]
    fn data_and_descriptors_arrive_in_order_and_the_end_is_an_error() {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        send_data(&ours, b'O', b"[1,2]").unwrap();
        send_data(&ours, b'O', &[7u8; 100]).unwrap();
        let file = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        send_fds(&ours, &[&file, &file]).unwrap();
        drop(ours);

        let first = receive_any(&theirs, 64).unwrap();
        assert_eq!(
            (first.tag, first.data.as_deref()),
            (b'O', Some(&b"[1,2]"[..]))
        );
        assert!(first.fds.is_empty());
        let long = receive_any(&theirs, 64).unwrap();
        assert_eq!((long.tag, long.data), (b'O', None));
        let fds = receive_any(&theirs, 64).unwrap();
        assert_eq!((fds.tag, fds.data.as_deref()), (FDS_TAG, Some(&b""[..])));
        assert_eq!(fds.fds.len(), 2);
        let end = receive_any(&theirs, 64).unwrap_err();
        assert_eq!(end.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
