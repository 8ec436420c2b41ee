//! The only module with `unsafe` code: raw syscalls that no safe wrapper covers. Every
//! block states why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod alloc;
pub mod mount;
pub mod notify;
pub mod process;
pub mod terminal;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::signal::{self, SigHandler, Signal};

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Opens `path` (relative to the working directory) with `openat`. The C library's
/// `open` (musl's, which Sandy is built with) follows every close-on-exec open with an
/// `fcntl(F_SETFD)` for kernels before 2.6.23: one system call more for each of the
/// launch's dozens of opens (the mounts' and Landlock's handles).
pub fn open(
    path: &std::path::Path,
    flags: nix::fcntl::OFlag,
    mode: nix::sys::stat::Mode,
) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(nix::fcntl::AT_FDCWD, path, flags, mode)
}

/// The running kernel's Landlock ABI version, or the errno explaining why there is none
/// (`ENOSYS`: not built in; `EOPNOTSUPP`: disabled at boot).
pub fn landlock_abi() -> Result<u32, i32> {
    // SAFETY: landlock_create_ruleset with a NULL attribute pointer, size 0 and the
    // VERSION flag only queries the ABI version; it reads no memory and creates no fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        Err(Errno::last_raw())
    } else {
        u32::try_from(ret).map_err(|_| libc::EINVAL)
    }
}

/// Whether seccomp filter mode with `SECCOMP_RET_ERRNO` is available.
pub fn seccomp_filter_available() -> bool {
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 through the pointer, which points to
    // a live local for the duration of the call; it changes no process state.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    ret == 0
}

/// Marks every descriptor from `first` up as close-on-exec.
pub fn close_range_cloexec(first: u32) -> nix::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; no
    // descriptor is closed, so no Rust owner is invalidated.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    Errno::result(ret).map(drop)
}

/// Takes ownership of a descriptor inherited by number (the manifest descriptor).
/// Fails if the number is not an open descriptor.
pub fn adopt_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only queries the descriptor flags; it has no effect on memory.
    let ret = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was passed to this process by
    // its parent for this purpose alone; nothing else in the process owns or closes it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `sig` to be ignored and returns whether it was already ignored.
pub fn ignore_signal(sig: Signal) -> nix::Result<bool> {
    // SAFETY: SIG_IGN is not a Rust handler, so no code runs in signal context.
    let previous = unsafe { signal::signal(sig, SigHandler::SigIgn) }?;
    Ok(previous == SigHandler::SigIgn)
}

/// Sets `sig` to be ignored and returns its whole previous action (handler, mask and
/// flags), for [`restore_signal_action`] once the ignoring is over.
pub fn ignore_signal_saving(sig: Signal) -> nix::Result<signal::SigAction> {
    let ignore = signal::SigAction::new(
        SigHandler::SigIgn,
        signal::SaFlags::empty(),
        signal::SigSet::empty(),
    );
    // SAFETY: SIG_IGN is not a Rust handler, so no code runs in signal context.
    unsafe { signal::sigaction(sig, &ignore) }
}

/// Puts back an action [`ignore_signal_saving`] returned. It is the caller's own earlier
/// action (a handler it installed, or SIG_DFL/SIG_IGN), exactly as the kernel gave it.
pub fn restore_signal_action(sig: Signal, action: &signal::SigAction) -> nix::Result<()> {
    // SAFETY: the action is the one this process had installed before: its handler, if
    // any, was installed by the process itself and is as sound as it was then.
    unsafe { signal::sigaction(sig, action) }.map(drop)
}

/// Restores the default action of `sig`.
pub fn default_signal(sig: Signal) -> nix::Result<()> {
    // SAFETY: SIG_DFL is not a Rust handler, so no code runs in signal context.
    unsafe { signal::signal(sig, SigHandler::SigDfl) }.map(drop)
}

/// Test support: a raw syscall with scalar arguments; returns its errno, or 0 on success.
#[cfg(test)]
pub(crate) fn raw_syscall_errno(nr: libc::c_long, args: [libc::c_long; 3]) -> i32 {
    // SAFETY: every argument is a scalar; where the kernel reads one as a pointer it is
    // NULL or a small integer, which the kernel rejects with EFAULT rather than touching
    // this process's memory. A descriptor a successful call returns is closed at exit.
    let ret = unsafe { libc::syscall(nr, args[0], args[1], args[2]) };
    if ret < 0 {
        Errno::last_raw()
    } else {
        0
    }
}

/// `struct mount_attr` (linux/mount.h).
#[repr(C)]
pub(super) struct MountAttr {
    pub(super) attr_set: u64,
    pub(super) attr_clr: u64,
    pub(super) propagation: u64,
    pub(super) userns_fd: u64,
}

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(super) const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Sets or clears the read-only attribute of the mount at `path`, and with `recursive` of
/// every mount below it too (`mount_setattr(2)`).
pub fn set_mount_read_only(
    path: &std::path::Path,
    read_only: bool,
    recursive: bool,
) -> nix::Result<()> {
    let path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| Errno::EINVAL)?;
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a NUL-terminated string and `attr` a live, correctly laid out
    // `struct mount_attr` whose size is passed; the kernel only reads both during the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            if recursive { AT_RECURSIVE } else { 0 },
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Brings the loopback interface of the current network namespace up (`SIOCSIFFLAGS`).
pub fn loopback_up() -> nix::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface name from and writes the flags into `req`,
    // a live, correctly sized ifreq, on a valid socket.
    let ret = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS as libc::Ioctl,
            &mut req,
        )
    };
    Errno::result(ret)?;
    // SAFETY: after SIOCGIFFLAGS the flags member of the union is the initialised one.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads `req`, which names "lo" and carries the flags to set.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as libc::Ioctl, &req) };
    Errno::result(ret).map(drop)
}

/// Puts `ip` (a host route: /32, /128) on the loopback interface of the current network
/// namespace (`RTM_NEWADDR` over rtnetlink), so that datagrams to it stay on this host.
pub fn add_loopback_address(ip: std::net::IpAddr) -> nix::Result<()> {
    use nix::sys::socket::{recv, MsgFlags, SockProtocol};
    const RTM_NEWADDR: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_ACK: u16 = 0x4;
    const NLM_F_EXCL: u16 = 0x200;
    const NLM_F_CREATE: u16 = 0x400;
    const IFA_ADDRESS: u16 = 1;
    const IFA_LOCAL: u16 = 2;
    const IFA_F_NODAD: u8 = 0x02;
    const RT_SCOPE_HOST: u8 = 254;
    let index = nix::net::if_::if_nametoindex("lo")?;
    let (family, prefix, octets): (u8, u8, Vec<u8>) = match ip {
        std::net::IpAddr::V4(v4) => (libc::AF_INET as u8, 32, v4.octets().to_vec()),
        std::net::IpAddr::V6(v6) => (libc::AF_INET6 as u8, 128, v6.octets().to_vec()),
    };
    let attribute = |kind: u16, out: &mut Vec<u8>| {
        let len = 4 + octets.len();
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&octets);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    };
    // struct ifaddrmsg, then the two addresses.
    let mut body = vec![family, prefix, IFA_F_NODAD, RT_SCOPE_HOST];
    body.extend_from_slice(&index.to_ne_bytes());
    attribute(IFA_LOCAL, &mut body);
    attribute(IFA_ADDRESS, &mut body);
    let sock = netlink_request(
        SockProtocol::NetlinkRoute,
        RTM_NEWADDR,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE,
        &body,
    )?;
    let mut answer = [0u8; 1024];
    let n = recv(sock.as_raw_fd(), &mut answer, MsgFlags::empty())?;
    // The acknowledgement: an NLMSG_ERROR message whose error is 0, or -errno.
    if n < 20 || u16::from_ne_bytes([answer[4], answer[5]]) != NLMSG_ERROR {
        return Err(Errno::EPROTO);
    }
    let error = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
    match error {
        0 => Ok(()),
        e if e == -libc::EEXIST => Ok(()),
        e => Err(Errno::from_raw(-e)),
    }
}

/// `connect(fd, addr)` with the socket address as raw bytes (as the caller of the
/// intercepted call passed them, copied): the kernel reads the family and checks the
/// length itself.
pub fn connect_raw(fd: std::os::fd::BorrowedFd<'_>, addr: &[u8]) -> nix::Result<()> {
    // The kernel refuses longer addresses (sizeof(struct sockaddr_storage)).
    if addr.len() > 128 {
        return Err(Errno::EINVAL);
    }
    let len = libc::socklen_t::try_from(addr.len()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: connect reads `len` bytes at `addr`, a live slice of exactly that length;
    // the descriptor is borrowed for the call.
    let ret = unsafe { libc::connect(fd.as_raw_fd(), addr.as_ptr().cast(), len) };
    Errno::result(ret).map(drop)
}

/// The family (`SO_DOMAIN`) and protocol (`SO_PROTOCOL`) of a socket; `ENOTSOCK` for
/// anything else.
pub fn socket_family_and_protocol(
    fd: std::os::fd::BorrowedFd<'_>,
) -> nix::Result<(libc::c_int, libc::c_int)> {
    let get = |option: libc::c_int| -> nix::Result<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes (one int) into the live local and
        // the length back into `len`.
        let ret = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        Errno::result(ret).map(|_| value)
    };
    Ok((get(libc::SO_DOMAIN)?, get(libc::SO_PROTOCOL)?))
}

/// A netlink socket of `protocol` with one request sent on it to the kernel: a
/// `struct nlmsghdr` of `kind` and `flags` (sequence 1), then `body`.
fn netlink_request(
    protocol: nix::sys::socket::SockProtocol,
    kind: u16,
    flags: u16,
    body: &[u8],
) -> nix::Result<OwnedFd> {
    use nix::sys::socket::{
        sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockType,
    };
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        protocol,
    )?;
    let len = u32::try_from(16 + body.len()).map_err(|_| Errno::E2BIG)?;
    let mut message = Vec::with_capacity(16 + body.len());
    message.extend_from_slice(&len.to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(body);
    sendto(
        sock.as_raw_fd(),
        &message,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    Ok(sock)
}

/// Every listening TCP socket of `family` in this thread's network namespace, asked of
/// the kernel's socket diagnostics (`NETLINK_SOCK_DIAG`, `inet_diag`, a dump of the
/// listening sockets only, which walks the listening table, not every connection): its
/// address, port and inode number.
pub fn listening_tcp(family: libc::c_int) -> nix::Result<Vec<((std::net::IpAddr, u16), u64)>> {
    use nix::sys::socket::{recv, MsgFlags, SockProtocol};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_DUMP: u16 = 0x300;
    const NLMSG_DONE: u16 = 3;
    const NLMSG_ERROR: u16 = 2;
    const TCP_LISTEN: u32 = 10;
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, and an all-zero
    // struct inet_diag_sockid but for the "no cookie" value.
    let mut body = Vec::with_capacity(56);
    body.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    body.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    body.extend_from_slice(&[0u8; 40]);
    body.extend_from_slice(&u32::MAX.to_ne_bytes());
    body.extend_from_slice(&u32::MAX.to_ne_bytes());
    let sock = netlink_request(
        SockProtocol::NetlinkSockDiag,
        SOCK_DIAG_BY_FAMILY,
        NLM_F_REQUEST | NLM_F_DUMP,
        &body,
    )?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    // Bounded: a listening table of a million sockets is beyond any host.
    for _ in 0..10_000 {
        let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        let mut at = 0;
        while at + 16 <= n {
            let word = |i: usize| [buf[i], buf[i + 1], buf[i + 2], buf[i + 3]];
            let len = u32::from_ne_bytes(word(at)) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < 16 || at + len > n {
                return Err(Errno::EPROTO);
            }
            match kind {
                NLMSG_DONE => return Ok(out),
                NLMSG_ERROR => return Err(Errno::EPROTO),
                _ => {}
            }
            // struct inet_diag_msg: family, state, timer, retrans, the socket id (source
            // port, destination port, source and destination addresses, interface,
            // cookie), expires, queues, uid, inode.
            let msg = &buf[at + 16..at + len];
            if msg.len() >= 72 {
                let port = u16::from_be_bytes([msg[4], msg[5]]);
                let ip = match i32::from(msg[0]) {
                    libc::AF_INET => IpAddr::V4(Ipv4Addr::new(msg[8], msg[9], msg[10], msg[11])),
                    _ => {
                        let mut o = [0u8; 16];
                        o.copy_from_slice(&msg[8..24]);
                        IpAddr::V6(Ipv6Addr::from(o))
                    }
                };
                let inode = u32::from_ne_bytes([msg[68], msg[69], msg[70], msg[71]]);
                out.push(((ip, port), u64::from(inode)));
            }
            at += (len + 3) & !3;
        }
    }
    Err(Errno::EPROTO)
}

/// Whether tasks `a` and `b` share one descriptor table (`kcmp(KCMP_FILES)`); false when
/// the kernel cannot say.
pub fn same_descriptor_table(a: libc::pid_t, b: libc::pid_t) -> bool {
    const KCMP_FILES: libc::c_long = 2;
    // SAFETY: kcmp takes scalars only (two pids, a type, two unused indexes) and touches
    // no memory of this process.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::c_long::from(a),
            libc::c_long::from(b),
            KCMP_FILES,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    ret == 0
}

/// Takes ownership of descriptors received in an `SCM_RIGHTS` message.
pub fn adopt_received_fds(fds: &[RawFd]) -> Vec<OwnedFd> {
    fds.iter()
        // SAFETY: the kernel installed each descriptor in this process when it delivered
        // the SCM_RIGHTS message; nothing else knows or owns them.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect()
}

// Diagnostics (`sandy doctor`): the self-test's escape attempts and the seccomp probe.

/// `ioctl(fd, TIOCSTI, &byte)`: pushes one byte into a terminal's input queue. The seccomp
/// floor refuses it with `EPERM`; on a descriptor that is not a terminal the kernel
/// answers `ENOTTY` when nothing filtered the call.
pub fn tiocsti(fd: std::os::fd::BorrowedFd<'_>, byte: u8) -> nix::Result<()> {
    let c = byte as libc::c_char;
    // SAFETY: TIOCSTI reads one byte through the pointer, which points to a live local for
    // the duration of the call; the descriptor is borrowed, so it is open.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSTI, &c as *const libc::c_char) };
    Errno::result(ret).map(drop)
}

/// `ptrace(PTRACE_ATTACH, pid, 0, 0)`.
pub fn ptrace_attach(pid: libc::pid_t) -> nix::Result<()> {
    // SAFETY: PTRACE_ATTACH ignores addr and data (NULL here) and reads or writes no memory
    // of this process; it only changes the tracing state of the target.
    let ret = unsafe {
        libc::ptrace(
            libc::PTRACE_ATTACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// `socket(domain, ty | SOCK_CLOEXEC, protocol)` with a raw protocol number (nix has no
/// name for some, such as `IPPROTO_MPTCP`).
pub fn raw_socket(
    domain: libc::c_int,
    ty: libc::c_int,
    protocol: libc::c_int,
) -> nix::Result<OwnedFd> {
    // SAFETY: socket takes scalars only and touches no memory of this process.
    let fd = Errno::result(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: the kernel just returned this descriptor; nothing else knows or owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Drops every capability of the calling thread only (capabilities are per thread): the
/// socket broker's thread creates sockets for the sandbox with no more privilege than
/// the sandbox itself has. Nothing to do for a caller without capabilities.
pub fn drop_thread_capabilities() -> Result<(), String> {
    use caps::CapSet;
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Gives the calling thread only the idle scheduling class (`SCHED_IDLE`): it runs when a
/// CPU has nothing else to do. For housekeeping that must not take CPU time from the
/// sandboxed command (the removal of earlier runs' leftovers).
pub fn idle_priority_for_this_thread() -> nix::Result<()> {
    /// The kernel's `struct sched_param` (one `int`; C libraries may declare more).
    #[repr(C)]
    struct SchedParam {
        sched_priority: libc::c_int,
    }
    let param = SchedParam { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads one kernel `struct sched_param` (a single int)
    // from the live local; pid 0 is the calling thread (Linux applies scheduling
    // policies per thread).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_IDLE,
            &param as *const SchedParam,
        )
    };
    Errno::result(ret).map(drop)
}
