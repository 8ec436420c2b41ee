//! Diagnostics for `sandy doctor`.
//!
//! [`probe_layer`] exercises one enforcement layer for real: it creates and enforces a
//! Landlock ruleset, installs the seccomp floor, enters namespaces, mounts. Those steps
//! are irreversible, so it must run only in a sacrificial process (a fresh exec of Sandy
//! that exits right after). [`interpret`] turns what a probe saw, together with the
//! host's facts read by the caller ([`crate::probe::host_facts`]), into a verdict and the narrowest
//! fix; it is pure.
//!
//! The `attempt_*` functions are the self-test's escape attempts, run inside a real
//! sandbox; each reports the kernel's answer and judges nothing.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getgid, getuid, Pid};
use sandy_policy::Network;

use crate::probe::{MIN_LANDLOCK_ABI, PINNED_LANDLOCK_ABI};
use crate::reach::{self, Cause, HostFacts, NsFailure, NsStep};
use crate::{seccomp, sys};

/// One enforcement layer `sandy doctor` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Landlock,
    Seccomp,
    UserNamespace,
    MountNamespace,
    NetworkNamespace,
    NoNewPrivs,
}

impl Layer {
    /// Every layer, in the order they are reported.
    pub const ALL: [Layer; 6] = [
        Layer::Landlock,
        Layer::Seccomp,
        Layer::UserNamespace,
        Layer::MountNamespace,
        Layer::NetworkNamespace,
        Layer::NoNewPrivs,
    ];

    /// The stable machine name (JSON, the hidden probe subcommand).
    pub fn name(self) -> &'static str {
        match self {
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::UserNamespace => "user_namespace",
            Layer::MountNamespace => "mount_namespace",
            Layer::NetworkNamespace => "network_namespace",
            Layer::NoNewPrivs => "no_new_privs",
        }
    }

    /// The inverse of [`Layer::name`].
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }

    /// A short human label.
    pub fn label(self) -> &'static str {
        match self {
            Layer::Landlock => "Landlock",
            Layer::Seccomp => "seccomp",
            Layer::UserNamespace => "user namespace",
            Layer::MountNamespace => "mount namespace",
            Layer::NetworkNamespace => "network namespace",
            Layer::NoNewPrivs => "no_new_privs",
        }
    }
}

/// What a probe saw, as plain data (sent from the sacrificial child to the doctor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// Every step succeeded.
    pub ok: bool,
    /// What was done, or which step failed and how.
    pub detail: String,
    /// The errno of the failed step.
    pub errno: Option<i32>,
    /// The Landlock ABI the kernel reported (Landlock probe only).
    pub abi: Option<u32>,
    /// The failed step was creating the user namespace (namespace probes).
    pub userns_failed: bool,
    /// The namespace step that failed ([`NsStep::name`]), for the cause.
    pub step: Option<NsStep>,
}

impl ProbeReport {
    fn ok(detail: impl Into<String>) -> Self {
        ProbeReport {
            ok: true,
            detail: detail.into(),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        }
    }

    fn failed(step: &str, errno: Errno) -> Self {
        ProbeReport {
            ok: false,
            detail: format!("{step} failed: {}", errno_text(errno as i32)),
            errno: Some(errno as i32),
            abi: None,
            userns_failed: false,
            step: None,
        }
    }

    /// A failed namespace step.
    fn failed_at(what: &str, step: NsStep, errno: Errno) -> Self {
        ProbeReport {
            step: Some(step),
            userns_failed: matches!(step, NsStep::CreateUserNs | NsStep::MapIds),
            ..ProbeReport::failed(what, errno)
        }
    }
}

/// `EPERM (Operation not permitted)`.
pub fn errno_text(errno: i32) -> String {
    let e = Errno::from_raw(errno);
    format!("{e:?} ({})", e.desc())
}

/// An `std::io::Error` as an errno (`EIO` when it carries none).
pub fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Exercises one layer for real. Irreversible (namespaces, Landlock, seccomp,
/// `no_new_privs` stay in force): call it only in a process that exits right after.
pub fn probe_layer(layer: Layer) -> ProbeReport {
    match layer {
        Layer::Landlock => probe_landlock(),
        Layer::Seccomp => probe_seccomp(),
        Layer::UserNamespace => match enter_user_namespace() {
            Ok(ids) => ProbeReport::ok(format!(
                "unshare(CLONE_NEWUSER) succeeded and {ids} were mapped"
            )),
            Err(report) => report,
        },
        Layer::MountNamespace => probe_mount_namespace(),
        Layer::NetworkNamespace => probe_network_namespace(),
        Layer::NoNewPrivs => probe_no_new_privs(),
    }
}

fn probe_landlock() -> ProbeReport {
    use landlock::{
        Access as _, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetStatus, Scope,
    };
    let abi = match sys::landlock_abi() {
        Ok(abi) => abi,
        Err(errno) => {
            let mut r = ProbeReport::failed(
                "landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION)",
                Errno::from_raw(errno),
            );
            r.detail = format!("Landlock is unavailable: {}", r.detail);
            return r;
        }
    };
    // The ABI Sandy needs is enforced as a hard requirement, as `sandy run` does; an
    // older one is still exercised, best effort, to show what works.
    let level = if abi >= MIN_LANDLOCK_ABI {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let status = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(PINNED_LANDLOCK_ABI))
        .and_then(|r| r.scope(Scope::from_all(PINNED_LANDLOCK_ABI)))
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
    let mut report = match status {
        Ok(s) if s.ruleset == RulesetStatus::FullyEnforced && abi >= MIN_LANDLOCK_ABI => {
            ProbeReport::ok(format!(
                "Landlock ABI {abi} (Sandy needs {MIN_LANDLOCK_ABI}); a ruleset handling every \
                 access right and scope was created and enforced"
            ))
        }
        Ok(s) => ProbeReport {
            ok: false,
            detail: format!(
                "Landlock ABI {abi} is below the ABI {MIN_LANDLOCK_ABI} Sandy needs for truncate \
                 control, device ioctls and the signal and abstract-socket scopes (a ruleset was \
                 {:?})",
                s.ruleset
            ),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        },
        Err(e) => ProbeReport {
            ok: false,
            detail: format!("Landlock ABI {abi}, but the ruleset could not be enforced: {e}"),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        },
    };
    report.abi = Some(abi);
    report
}

fn probe_seccomp() -> ProbeReport {
    if !sys::seccomp_filter_available() {
        let mut r = ProbeReport::failed(
            "seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO)",
            Errno::last(),
        );
        r.detail = format!("seccomp filter mode is unavailable: {}", r.detail);
        return r;
    }
    let program = match seccomp::compile(Network::AllowAll) {
        Ok(p) => p,
        Err(e) => {
            return ProbeReport {
                ok: false,
                detail: format!("Sandy's seccomp floor cannot be built here: {e}"),
                errno: None,
                abi: None,
                userns_failed: false,
                step: None,
            }
        }
    };
    if let Err(errno) = nix::sys::prctl::set_no_new_privs() {
        return ProbeReport::failed("prctl(PR_SET_NO_NEW_PRIVS)", errno);
    }
    if let Err(e) = seccomp::apply(&program) {
        return ProbeReport {
            ok: false,
            detail: format!("installing Sandy's seccomp floor failed: {e}"),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        };
    }
    // The filter must answer for itself: TIOCSTI on /dev/null reaches the driver (ENOTTY)
    // unless the floor refuses it first (EPERM).
    let answer = std::fs::File::open("/dev/null")
        .map_err(|e| io_errno(&e))
        .and_then(|null| sys::tiocsti(null.as_fd(), b' '));
    match answer {
        Err(Errno::EPERM) => ProbeReport::ok(format!(
            "Sandy's seccomp floor ({} instructions) was installed and refuses TIOCSTI with EPERM",
            program.len()
        )),
        other => ProbeReport {
            ok: false,
            detail: format!(
                "Sandy's seccomp floor was installed but did not refuse TIOCSTI (got {})",
                match other {
                    Ok(()) => "success".to_owned(),
                    Err(e) => errno_text(e as i32),
                }
            ),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        },
    }
}

/// Enters a new user namespace mapping the caller's own ids, as the bootstrap does.
fn enter_user_namespace() -> Result<String, ProbeReport> {
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|errno| {
        ProbeReport::failed_at("unshare(CLONE_NEWUSER)", NsStep::CreateUserNs, errno)
    })?;
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1\n")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1\n")),
    ] {
        std::fs::write(file, text).map_err(|e| {
            ProbeReport::failed_at(&format!("writing {file}"), NsStep::MapIds, io_errno(&e))
        })?;
    }
    Ok(format!("uid {uid} and gid {gid}"))
}

/// What a run's bootstrap does before its mounts: new user, mount, PID and IPC
/// namespaces, then, in a forked child (the new PID namespace's init), the kinds of mount
/// a run makes: `/` made private, a tmpfs, a fresh procfs, a fresh devpts, a bind mount
/// made read-only. Names the step that failed.
fn probe_mount_namespace() -> ProbeReport {
    if let Err(mut r) = enter_user_namespace() {
        r.detail = format!("needs a user namespace: {}", r.detail);
        return r;
    }
    let flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC;
    if let Err(errno) = unshare(flags) {
        return ProbeReport::failed_at(
            "unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) in a user namespace",
            NsStep::Unshare,
            errno,
        );
    }
    let one = match sys::process::OneThread::check() {
        Ok(one) => one,
        Err(_) => {
            return ProbeReport {
                detail: "the probe is not single-threaded; cannot fork".to_owned(),
                ..ProbeReport::failed("fork", Errno::EAGAIN)
            }
        }
    };
    let (read, write) = match nix::unistd::pipe() {
        Ok(p) => p,
        Err(errno) => return ProbeReport::failed("pipe", errno),
    };
    match sys::process::fork(&one) {
        Err(errno) => ProbeReport::failed("fork into the new PID namespace", errno),
        Ok(sys::process::Forked::Child(_)) => {
            drop(read);
            let line = match run_mounts() {
                Ok(()) => "ok".to_owned(),
                Err((what, step, errno)) => format!("{} {} {what}", step.name(), errno as i32),
            };
            let mut out = std::fs::File::from(write);
            let code = i32::from(out.write_all(line.as_bytes()).is_err());
            sys::process::exit_now(code)
        }
        Ok(sys::process::Forked::Parent(pid)) => {
            drop(write);
            let mut line = String::new();
            let _ = std::fs::File::from(read).read_to_string(&mut line);
            let _ = nix::sys::wait::waitpid(pid, None);
            parse_mounts_report(&line)
        }
    }
}

/// The child's one line: `ok`, or `STEP ERRNO WHAT`.
fn parse_mounts_report(line: &str) -> ProbeReport {
    if line == "ok" {
        return ProbeReport::ok(
            "in new user, mount, PID and IPC namespaces: / made private, a tmpfs, a fresh \
             /proc, a fresh devpts and a read-only bind mount were mounted",
        );
    }
    let mut parts = line.splitn(3, ' ');
    let step = parts.next().and_then(NsStep::from_name);
    let errno = parts.next().and_then(|e| e.parse::<i32>().ok());
    match (step, errno, parts.next()) {
        (Some(step), Some(errno), Some(what)) => {
            let mut r = ProbeReport::failed_at(what, step, Errno::from_raw(errno));
            r.detail = format!("in new user, mount and PID namespaces: {}", r.detail);
            r
        }
        _ => ProbeReport {
            detail: "the mount probe's child ended without a report".to_owned(),
            ..ProbeReport::failed("the mount probe", Errno::EIO)
        },
    }
}

type MountFailure = (&'static str, NsStep, Errno);

/// The mounts of [`probe_mount_namespace`], in the forked child.
fn run_mounts() -> Result<(), MountFailure> {
    let fail = |what: &'static str, step: NsStep| move |errno: Errno| (what, step, errno);
    let nothing = None::<&str>;
    mount(
        nothing,
        Path::new("/"),
        nothing,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        nothing,
    )
    .map_err(fail("making / private", NsStep::Bind))?;
    let base = Path::new("/tmp");
    mount(
        Some("tmpfs"),
        base,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=64k,mode=0700"),
    )
    .map_err(fail("mounting a tmpfs on /tmp", NsStep::Tmpfs))?;
    for dir in ["proc", "pts", "bind"] {
        std::fs::create_dir(base.join(dir))
            .map_err(|e| ("a directory in the tmpfs", NsStep::Tmpfs, io_errno(&e)))?;
    }
    mount(
        Some("proc"),
        &base.join("proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        nothing,
    )
    .map_err(fail("mounting a fresh /proc", NsStep::Proc))?;
    mount(
        Some("devpts"),
        &base.join("pts"),
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(fail("mounting a fresh devpts", NsStep::Devpts))?;
    let bound = base.join("bind");
    mount(
        Some("/usr"),
        &bound,
        nothing,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        nothing,
    )
    .map_err(fail("bind-mounting /usr", NsStep::Bind))?;
    sys::set_mount_read_only(&bound, true, true)
        .map_err(fail("making a bind mount read-only", NsStep::Bind))?;
    Ok(())
}

/// What a `--block-net` run's bootstrap does for its network: a network namespace in the
/// user namespace, loopback up, and in a mount namespace of its own a private sysfs on
/// `/sys` (which a container's masked `/sys` entries refuse, like a fresh `/proc`).
fn probe_network_namespace() -> ProbeReport {
    if let Err(mut r) = enter_user_namespace() {
        r.detail = format!("needs a user namespace: {}", r.detail);
        return r;
    }
    if let Err(errno) = unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS) {
        return ProbeReport::failed_at(
            "unshare(CLONE_NEWNET | CLONE_NEWNS) in a user namespace",
            NsStep::Unshare,
            errno,
        );
    }
    if let Err(errno) = sys::loopback_up() {
        return ProbeReport::failed_at(
            "bringing loopback up in the new namespace",
            NsStep::Network,
            errno,
        );
    }
    let nothing = None::<&str>;
    let sys_dir = Path::new("/sys");
    let mounted = mount(
        nothing,
        Path::new("/"),
        nothing,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        nothing,
    )
    .map_err(|errno| ("making / private", NsStep::Bind, errno))
    .and_then(|()| {
        mount(
            Some("sysfs"),
            sys_dir,
            Some("sysfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            nothing,
        )
        .map_err(|errno| ("mounting a private sysfs on /sys", NsStep::Proc, errno))
    });
    if let Err((what, step, errno)) = mounted {
        let mut r = ProbeReport::failed_at(what, step, errno);
        r.detail = format!("in new user, network and mount namespaces: {}", r.detail);
        return r;
    }
    ProbeReport::ok(
        "in a user namespace: unshare(CLONE_NEWNET), loopback brought up and a private \
         sysfs mounted",
    )
}

fn probe_no_new_privs() -> ProbeReport {
    if let Err(errno) = nix::sys::prctl::set_no_new_privs() {
        return ProbeReport::failed("prctl(PR_SET_NO_NEW_PRIVS)", errno);
    }
    match nix::sys::prctl::get_no_new_privs() {
        Ok(true) => ProbeReport::ok("prctl(PR_SET_NO_NEW_PRIVS) set and read back as 1"),
        Ok(false) => ProbeReport {
            ok: false,
            detail: "prctl(PR_SET_NO_NEW_PRIVS) succeeded but reads back as 0".to_owned(),
            errno: None,
            abi: None,
            userns_failed: false,
            step: None,
        },
        Err(errno) => ProbeReport::failed("prctl(PR_GET_NO_NEW_PRIVS)", errno),
    }
}

/// A layer's verdict for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub layer: Layer,
    pub available: bool,
    /// The kernel fact behind the verdict.
    pub detail: String,
    /// The narrowest fix, when the layer is missing.
    pub fix: Option<String>,
    /// Why a namespace layer is missing ([`crate::reach`]).
    pub cause: Option<Cause>,
    /// The namespace step that failed.
    pub step: Option<NsStep>,
}

/// The verdict for one layer from its probe's report and the host's facts (read by the
/// caller in the initial namespaces: a new user namespace sees its own limits). `exe` is
/// the Sandy binary, named in the AppArmor fix. Pure.
pub fn interpret(layer: Layer, report: &ProbeReport, facts: &HostFacts, exe: &Path) -> Finding {
    let mut detail = report.detail.clone();
    let sysctls = facts.sysctls();
    if layer == Layer::UserNamespace && !sysctls.is_empty() {
        detail = format!("{detail} ({sysctls})");
    }
    let namespace = matches!(
        layer,
        Layer::UserNamespace | Layer::MountNamespace | Layer::NetworkNamespace
    );
    let step = report.step.or_else(|| {
        (report.userns_failed || (namespace && layer == Layer::UserNamespace))
            .then_some(NsStep::CreateUserNs)
    });
    let cause = match (report.ok, namespace, step) {
        (false, true, Some(step)) => Some(reach::cause(
            facts,
            NsFailure {
                step,
                errno: report.errno.unwrap_or(libc::EPERM),
            },
        )),
        _ => None,
    };
    if let Some(c) = &cause {
        detail = format!("{detail}: {}", c.line());
    }
    let fix = if report.ok {
        None
    } else if let Some(c) = &cause {
        Some(c.fix(exe))
    } else {
        Some(match layer {
            Layer::Landlock => landlock_fix(report),
            Layer::Seccomp => "use a kernel built with CONFIG_SECCOMP_FILTER=y, outside any \
                               container or policy that forbids installing seccomp filters"
                .to_owned(),
            Layer::UserNamespace | Layer::MountNamespace | Layer::NetworkNamespace => {
                "run Sandy where unprivileged user namespaces, and mounts in them, are allowed"
                    .to_owned()
            }
            Layer::NoNewPrivs => {
                "use a kernel with PR_SET_NO_NEW_PRIVS (Linux 3.5 or newer)".to_owned()
            }
        })
    };
    Finding {
        layer,
        available: report.ok,
        detail,
        fix,
        cause,
        step: if report.ok { None } else { report.step },
    }
}

fn landlock_fix(report: &ProbeReport) -> String {
    match (report.abi, report.errno) {
        (Some(abi), _) if abi < MIN_LANDLOCK_ABI => format!(
            "upgrade to Linux 6.12 or newer (Landlock ABI {MIN_LANDLOCK_ABI}); this kernel has \
             ABI {abi}"
        ),
        (_, Some(libc::ENOSYS)) => "use a kernel built with CONFIG_SECURITY_LANDLOCK=y (Linux \
                                    6.12 or newer)"
            .to_owned(),
        (_, Some(libc::EOPNOTSUPP)) => "Landlock is built in but disabled at boot: add \
                                        `landlock` to the lsm= kernel parameter (see \
                                        /sys/kernel/security/lsm for the current list)"
            .to_owned(),
        _ => "check that the landlock LSM is enabled (/sys/kernel/security/lsm) and that no \
              container or policy blocks the Landlock syscalls"
            .to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Escape attempts for the self-test. Each returns the kernel's answer; the doctor judges.

/// Reads a file.
pub fn attempt_read(path: &Path) -> Result<Vec<u8>, Errno> {
    std::fs::read(path).map_err(|e| io_errno(&e))
}

/// Creates a new file and writes to it.
pub fn attempt_create(path: &Path, contents: &[u8]) -> Result<(), Errno> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(path)
        .and_then(|mut f| f.write_all(contents))
        .map_err(|e| io_errno(&e))
}

/// Opens an existing file with `O_TRUNC`.
pub fn attempt_truncate(path: &Path) -> Result<(), Errno> {
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map(drop)
        .map_err(|e| io_errno(&e))
}

/// `ioctl(fd, TIOCSTI)` on standard input.
pub fn attempt_tiocsti() -> Result<(), Errno> {
    sys::tiocsti(std::io::stdin().as_fd(), b'#')
}

/// `kill(pid, SIGSTOP)`.
pub fn attempt_stop(pid: i32) -> Result<(), Errno> {
    kill(Pid::from_raw(pid), Signal::SIGSTOP)
}

/// `ptrace(PTRACE_ATTACH, pid)`.
pub fn attempt_ptrace(pid: i32) -> Result<(), Errno> {
    sys::ptrace_attach(pid)
}

/// Opens and reads `/proc/PID/mem` at the start of its text (any readable mapping would
/// do; the open itself is the access check).
pub fn attempt_proc_mem(pid: i32) -> Result<(), Errno> {
    let mut f = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| io_errno(&e))?;
    let mut byte = [0u8; 1];
    // Offset 0 is never mapped: EIO after a successful open still means access.
    match f.read(&mut byte) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(()),
        Err(e) => Err(io_errno(&e)),
    }
}

/// Connects to an abstract Unix socket.
pub fn attempt_connect_abstract(name: &[u8]) -> Result<(), Errno> {
    use std::os::linux::net::SocketAddrExt;
    let addr = SocketAddr::from_abstract_name(name).map_err(|e| io_errno(&e))?;
    UnixStream::connect_addr(&addr)
        .map(drop)
        .map_err(|e| io_errno(&e))
}

/// Connects to a pathname Unix socket.
pub fn attempt_connect_path(path: &Path) -> Result<(), Errno> {
    UnixStream::connect(path)
        .map(drop)
        .map_err(|e| io_errno(&e))
}

/// Connects to 127.0.0.1:PORT over TCP.
pub fn attempt_tcp(port: u16) -> Result<(), Errno> {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        std::time::Duration::from_secs(1),
    )
    .map(drop)
    .map_err(|e| io_errno(&e))
}

/// Sends a datagram to 127.0.0.1:PORT.
pub fn attempt_udp(port: u16, payload: &[u8]) -> Result<(), Errno> {
    let sock = std::net::UdpSocket::bind(("127.0.0.1", 0)).map_err(|e| io_errno(&e))?;
    sock.send_to(payload, ("127.0.0.1", port))
        .map(drop)
        .map_err(|e| io_errno(&e))
}

/// `socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`.
pub fn attempt_mptcp() -> Result<(), Errno> {
    const IPPROTO_MPTCP: i32 = 262;
    sys::raw_socket(libc::AF_INET, libc::SOCK_STREAM, IPPROTO_MPTCP).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_userns(errno: i32) -> ProbeReport {
        ProbeReport {
            ok: false,
            detail: "unshare(CLONE_NEWUSER) failed: EPERM".to_owned(),
            errno: Some(errno),
            abi: None,
            userns_failed: true,
            step: Some(NsStep::CreateUserNs),
        }
    }

    #[test]
    fn layer_names_round_trip() {
        for layer in Layer::ALL {
            assert_eq!(Layer::from_name(layer.name()), Some(layer));
        }
        assert_eq!(Layer::from_name("nope"), None);
    }

    fn ubuntu() -> HostFacts {
        HostFacts {
            max_user_namespaces: Some("15000".to_owned()),
            apparmor_restrict_unprivileged_userns: Some("1".to_owned()),
            status: Some("Seccomp:\t0\n".to_owned()),
            ..HostFacts::default()
        }
    }

    #[test]
    fn apparmor_restriction_points_at_sandy_setup_not_the_sysctl_first() {
        let exe = Path::new("/opt/sandy/bin/sandy");
        for layer in [
            Layer::UserNamespace,
            Layer::MountNamespace,
            Layer::NetworkNamespace,
        ] {
            let f = interpret(layer, &failed_userns(libc::EPERM), &ubuntu(), exe);
            assert!(!f.available);
            assert_eq!(f.cause, Some(Cause::AppArmorRestriction));
            let fix = f.fix.unwrap();
            assert!(fix.contains("`sudo /opt/sandy/bin/sandy setup`"), "{fix}");
            assert!(fix.find("setup") < fix.find("sysctl -w"), "{fix}");
        }
        // The restriction lets unshare succeed and refuses the mount: the probe names
        // the mount, and the cause is the same.
        let mount_denied = parse_mounts_report("mount_proc 1 mounting a fresh /proc");
        assert_eq!(mount_denied.step, Some(NsStep::Proc));
        assert!(!mount_denied.userns_failed);
        let f = interpret(Layer::MountNamespace, &mount_denied, &ubuntu(), exe);
        assert_eq!(f.step, Some(NsStep::Proc));
        assert!(
            f.detail.contains("mounting a fresh /proc failed: EPERM"),
            "{}",
            f.detail
        );
        assert!(f.detail.contains("AppArmor restricts"), "{}", f.detail);
        let f = interpret(
            Layer::UserNamespace,
            &failed_userns(libc::EPERM),
            &ubuntu(),
            exe,
        );
        assert!(
            f.detail
                .contains("kernel.apparmor_restrict_unprivileged_userns = 1"),
            "{}",
            f.detail
        );
    }

    #[test]
    fn the_mount_probe_report_is_parsed_or_named_as_missing() {
        assert!(parse_mounts_report("ok").ok);
        let r = parse_mounts_report("mount_devpts 13 mounting a fresh devpts");
        assert_eq!(
            (r.step, r.errno),
            (Some(NsStep::Devpts), Some(libc::EACCES))
        );
        let r = parse_mounts_report("");
        assert!(
            !r.ok && r.detail.contains("without a report"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn disabled_user_namespaces_name_the_sysctl() {
        let facts = HostFacts {
            max_user_namespaces: Some("0".to_owned()),
            ..HostFacts::default()
        };
        let f = interpret(
            Layer::UserNamespace,
            &failed_userns(libc::ENOSPC),
            &facts,
            Path::new("/x"),
        );
        assert!(
            f.detail.contains("user.max_user_namespaces = 0"),
            "{}",
            f.detail
        );
        assert_eq!(f.cause, Some(Cause::UsernsDisabled));
        assert!(
            f.fix.unwrap().contains("user.max_user_namespaces"),
            "names the sysctl"
        );
    }

    #[test]
    fn landlock_fixes_follow_the_kernel_fact() {
        let old = ProbeReport {
            ok: false,
            detail: String::new(),
            errno: None,
            abi: Some(4),
            userns_failed: false,
            step: None,
        };
        let f = interpret(
            Layer::Landlock,
            &old,
            &HostFacts::default(),
            Path::new("/x"),
        );
        assert!(f.fix.unwrap().contains("ABI 4"));
        let off = ProbeReport {
            errno: Some(libc::EOPNOTSUPP),
            abi: None,
            ..old
        };
        let f = interpret(
            Layer::Landlock,
            &off,
            &HostFacts::default(),
            Path::new("/x"),
        );
        assert!(f.fix.unwrap().contains("lsm="));
        let fine = ProbeReport::ok("Landlock ABI 7");
        let f = interpret(
            Layer::Landlock,
            &fine,
            &HostFacts::default(),
            Path::new("/x"),
        );
        assert!(f.available && f.fix.is_none());
    }
}
