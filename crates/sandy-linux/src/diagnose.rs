//! Diagnostics for `sandy doctor`.
//!
//! [`probe_layer`] exercises one enforcement layer for real: it creates and enforces a
//! Landlock ruleset, installs the seccomp floor, enters namespaces, mounts. Those steps
//! are irreversible, so it must run only in a sacrificial process (a fresh exec of Sandy
//! that exits right after). [`interpret`] turns what a probe saw, together with the
//! kernel's knobs read by the caller ([`Knobs::read`]), into a verdict and the narrowest
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

use crate::probe::{APPARMOR_PROFILE, MIN_LANDLOCK_ABI, PINNED_LANDLOCK_ABI, USERNS_DISABLED};
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
}

impl ProbeReport {
    fn ok(detail: impl Into<String>) -> Self {
        ProbeReport {
            ok: true,
            detail: detail.into(),
            errno: None,
            abi: None,
            userns_failed: false,
        }
    }

    fn failed(step: &str, errno: Errno) -> Self {
        ProbeReport {
            ok: false,
            detail: format!("{step} failed: {}", errno_text(errno as i32)),
            errno: Some(errno as i32),
            abi: None,
            userns_failed: false,
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
        },
        Err(e) => ProbeReport {
            ok: false,
            detail: format!("Landlock ABI {abi}, but the ruleset could not be enforced: {e}"),
            errno: None,
            abi: None,
            userns_failed: false,
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
        },
    }
}

/// Enters a new user namespace mapping the caller's own ids, as the bootstrap does.
fn enter_user_namespace() -> Result<String, ProbeReport> {
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|errno| {
        let mut r = ProbeReport::failed("unshare(CLONE_NEWUSER)", errno);
        r.userns_failed = true;
        r
    })?;
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1\n")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1\n")),
    ] {
        std::fs::write(file, text).map_err(|e| {
            let mut r = ProbeReport::failed(&format!("writing {file}"), io_errno(&e));
            r.userns_failed = true;
            r
        })?;
    }
    Ok(format!("uid {uid} and gid {gid}"))
}

fn probe_mount_namespace() -> ProbeReport {
    if let Err(mut r) = enter_user_namespace() {
        r.detail = format!("needs a user namespace: {}", r.detail);
        return r;
    }
    if let Err(errno) = unshare(CloneFlags::CLONE_NEWNS) {
        return ProbeReport::failed("unshare(CLONE_NEWNS) in a user namespace", errno);
    }
    let root = Path::new("/");
    let tmp = Path::new("/tmp");
    if let Err(errno) = mount(
        None::<&str>,
        root,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    ) {
        return ProbeReport::failed("making / private", errno);
    }
    if let Err(errno) = mount(
        Some("tmpfs"),
        tmp,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=700"),
    ) {
        return ProbeReport::failed("mounting a tmpfs on /tmp", errno);
    }
    if let Err(errno) = sys::set_mount_read_only(tmp, true, false) {
        return ProbeReport::failed("mount_setattr(MOUNT_ATTR_RDONLY) on /tmp", errno);
    }
    ProbeReport::ok(
        "in a user namespace: unshare(CLONE_NEWNS), / made private, a tmpfs mounted on /tmp \
         and made read-only with mount_setattr",
    )
}

fn probe_network_namespace() -> ProbeReport {
    if let Err(mut r) = enter_user_namespace() {
        r.detail = format!("needs a user namespace: {}", r.detail);
        return r;
    }
    if let Err(errno) = unshare(CloneFlags::CLONE_NEWNET) {
        return ProbeReport::failed("unshare(CLONE_NEWNET) in a user namespace", errno);
    }
    if let Err(errno) = sys::loopback_up() {
        return ProbeReport::failed("bringing loopback up in the new namespace", errno);
    }
    ProbeReport::ok("in a user namespace: unshare(CLONE_NEWNET) and loopback brought up")
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
        },
        Err(errno) => ProbeReport::failed("prctl(PR_GET_NO_NEW_PRIVS)", errno),
    }
}

/// The kernel knobs behind a missing user namespace, read in the initial namespaces (a
/// new user namespace sees its own, different limits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Knobs {
    /// `user.max_user_namespaces`.
    pub max_user_namespaces: Option<i64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later).
    pub apparmor_restrict_unprivileged_userns: Option<i64>,
    /// `kernel.unprivileged_userns_clone` (Debian's patch).
    pub unprivileged_userns_clone: Option<i64>,
}

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Knobs {
    /// Reads the knobs from `/proc/sys`.
    pub fn read() -> Knobs {
        Knobs {
            max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
            apparmor_restrict_unprivileged_userns: read_sysctl(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            unprivileged_userns_clone: read_sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
        }
    }

    fn facts(&self) -> String {
        let mut facts = Vec::new();
        if let Some(v) = self.max_user_namespaces {
            facts.push(format!("user.max_user_namespaces = {v}"));
        }
        if let Some(v) = self.apparmor_restrict_unprivileged_userns {
            facts.push(format!(
                "kernel.apparmor_restrict_unprivileged_userns = {v}"
            ));
        }
        if let Some(v) = self.unprivileged_userns_clone {
            facts.push(format!("kernel.unprivileged_userns_clone = {v}"));
        }
        facts.join(", ")
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
}

/// The verdict for one layer from its probe's report and the kernel's knobs. `exe` is
/// the Sandy binary, named in the AppArmor fix. Pure.
pub fn interpret(layer: Layer, report: &ProbeReport, knobs: &Knobs, exe: &Path) -> Finding {
    let mut detail = report.detail.clone();
    let facts = knobs.facts();
    if layer == Layer::UserNamespace && !facts.is_empty() {
        detail = format!("{detail} ({facts})");
    }
    // Ubuntu's restriction may let unshare(CLONE_NEWUSER) succeed and deny the
    // capabilities inside instead: a mount or network step then fails with EPERM.
    let apparmor_denied = knobs.apparmor_restrict_unprivileged_userns == Some(1)
        && matches!(layer, Layer::MountNamespace | Layer::NetworkNamespace)
        && matches!(report.errno, Some(libc::EPERM | libc::EACCES));
    let fix = if report.ok {
        None
    } else if report.userns_failed || apparmor_denied {
        Some(userns_fix(report.errno, knobs, exe))
    } else {
        Some(match layer {
            Layer::Landlock => landlock_fix(report),
            Layer::Seccomp => "use a kernel built with CONFIG_SECCOMP_FILTER=y, outside any \
                               container or policy that forbids installing seccomp filters"
                .to_owned(),
            Layer::UserNamespace => userns_fix(report.errno, knobs, exe),
            Layer::MountNamespace => "a security policy (an LSM, a container runtime) forbids \
                                      mounts in unprivileged user namespaces; allow them for \
                                      the sandy binary"
                .to_owned(),
            Layer::NetworkNamespace => "a security policy (an LSM, a container runtime) forbids \
                                        network namespaces in unprivileged user namespaces; \
                                        --block-net needs them"
                .to_owned(),
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

/// The narrowest fix for a missing user namespace: the AppArmor profile on Ubuntu, the
/// sysctl by name elsewhere.
fn userns_fix(errno: Option<i32>, knobs: &Knobs, exe: &Path) -> String {
    if knobs.max_user_namespaces == Some(0) {
        return format!("{USERNS_DISABLED} (and in /etc/sysctl.d/ to keep it)");
    }
    if knobs.apparmor_restrict_unprivileged_userns == Some(1) {
        return format!(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1). Allow them for Sandy alone \
             with the AppArmor profile shipped in its repository ({APPARMOR_PROFILE}), rather \
             than changing the global setting: set the binary path in it to {} (it names \
             /usr/local/bin/sandy), then `sudo install -m 0644 {APPARMOR_PROFILE} \
             /etc/apparmor.d/sandy && sudo apparmor_parser -r /etc/apparmor.d/sandy`",
            exe.display()
        );
    }
    if knobs.unprivileged_userns_clone == Some(0) {
        return "unprivileged user namespaces are disabled by \
                kernel.unprivileged_userns_clone = 0; set it to 1"
            .to_owned();
    }
    match errno {
        Some(libc::ENOSPC) => format!(
            "the limit of user namespaces is reached (user.max_user_namespaces = {}); raise it",
            knobs
                .max_user_namespaces
                .map_or_else(|| "?".to_owned(), |v| v.to_string())
        ),
        Some(libc::EINVAL) => "use a kernel built with CONFIG_USER_NS=y".to_owned(),
        _ => "a container runtime or security policy forbids unshare(CLONE_NEWUSER); run \
              Sandy where unprivileged user namespaces are allowed"
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
        }
    }

    #[test]
    fn layer_names_round_trip() {
        for layer in Layer::ALL {
            assert_eq!(Layer::from_name(layer.name()), Some(layer));
        }
        assert_eq!(Layer::from_name("nope"), None);
    }

    #[test]
    fn apparmor_restriction_points_at_the_shipped_profile_not_the_sysctl() {
        let knobs = Knobs {
            max_user_namespaces: Some(15000),
            apparmor_restrict_unprivileged_userns: Some(1),
            unprivileged_userns_clone: None,
        };
        let exe = Path::new("/opt/sandy/bin/sandy");
        for layer in [
            Layer::UserNamespace,
            Layer::MountNamespace,
            Layer::NetworkNamespace,
        ] {
            let f = interpret(layer, &failed_userns(libc::EPERM), &knobs, exe);
            assert!(!f.available);
            let fix = f.fix.unwrap();
            assert!(fix.contains(APPARMOR_PROFILE), "{fix}");
            assert!(fix.contains("/opt/sandy/bin/sandy"), "{fix}");
            assert!(fix.contains("apparmor_parser -r"), "{fix}");
            assert!(!fix.contains("sysctl -w"), "{fix}");
        }
        let mount_denied = ProbeReport {
            ok: false,
            detail: "mounting a tmpfs on /tmp failed: EPERM".to_owned(),
            errno: Some(libc::EPERM),
            abi: None,
            userns_failed: false,
        };
        let f = interpret(Layer::MountNamespace, &mount_denied, &knobs, exe);
        assert!(f.fix.unwrap().contains(APPARMOR_PROFILE));
        let f = interpret(
            Layer::UserNamespace,
            &failed_userns(libc::EPERM),
            &knobs,
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
    fn disabled_user_namespaces_name_the_sysctl() {
        let knobs = Knobs {
            max_user_namespaces: Some(0),
            ..Knobs::default()
        };
        let f = interpret(
            Layer::UserNamespace,
            &failed_userns(libc::ENOSPC),
            &knobs,
            Path::new("/x"),
        );
        assert!(
            f.detail.contains("user.max_user_namespaces = 0"),
            "{}",
            f.detail
        );
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
        };
        let f = interpret(Layer::Landlock, &old, &Knobs::default(), Path::new("/x"));
        assert!(f.fix.unwrap().contains("ABI 4"));
        let off = ProbeReport {
            errno: Some(libc::EOPNOTSUPP),
            abi: None,
            ..old
        };
        let f = interpret(Layer::Landlock, &off, &Knobs::default(), Path::new("/x"));
        assert!(f.fix.unwrap().contains("lsm="));
        let fine = ProbeReport::ok("Landlock ABI 7");
        let f = interpret(Layer::Landlock, &fine, &Knobs::default(), Path::new("/x"));
        assert!(f.available && f.fix.is_none());
    }
}
