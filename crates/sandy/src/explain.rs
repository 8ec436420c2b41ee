//! The refusal report (`sandy run --explain`): what the sandbox refused during the run,
//! grouped and counted, each with the flag that would allow it or why no flag can.
//!
//! It explains, it never decides. The target installs a second seccomp filter that hands
//! its write-intent calls to the supervisor (`sandy_linux::seccomp::observed`); the
//! observer thread here reads each call's path from the caller's memory and whether the
//! path exists in the caller's view, then answers "continue" (the kernel then runs the
//! call exactly as without the observer: every layer decides as usual), and records the
//! path. After the run, each recorded path is
//! asked of the same decision `sandy why` uses ([`sandy_policy::why::decide`]), and the
//! flag that allows a refusal is checked by resolving the launch again with it.
//!
//! Why not Landlock's audit records (ABI 7)? They say exactly what Landlock refused, but
//! reading them takes CAP_AUDIT_READ in the initial user namespace, which an unprivileged
//! user does not have; they also say nothing of the mount layer's refusals (read-only
//! protections, masks). The notifier works for every user and sees both.
//!
//! What it costs, and what the target can do to it:
//! - A read never reaches the observer; a write-intent call waits for one round trip to
//!   the supervisor, handed over on one CPU (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`):
//!   a memory read of at most `PATH_MAX` bytes and a `readlink` for a relative path; a
//!   write where nothing can refuse it ([`Certain`]: inside a writable grant as the
//!   sandbox sees it, the project, the private `/tmp` or a cache's overlay, away from
//!   every protected, masked or copied path, below real directories) is then answered at
//!   once and not recorded; any other also gets an `lstat` for the calls that
//!   need their path to exist (or not) before the answer (about 10 microseconds per call
//!   here; see BENCHMARKS.md).
//! - The observer must never break the target. Once the filter is installed, a watched
//!   call waits until the listener answers, and fails with `ENOSYS` if the listener is
//!   closed. So the listener lives in this process until every process of the run is
//!   gone: the thread ends only when the kernel reports that no process uses the filter
//!   any more. The thread does nothing that can fail for long: a bounded memory read,
//!   a `readlink`, then the answer; any error skips the record, never the answer. If the
//!   supervisor dies, the whole run dies with it (parent-death signals), so nothing waits
//!   on a listener nobody reads.
//! - The path is read from the caller's memory, which another thread of the caller may
//!   change between the call and the read: such a call is misreported (or not reported),
//!   never misenforced, since the kernel reads the path again itself.

use sandy_policy::{is_normal, normalize};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::libc;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use sandy_linux::sys::notify::{self, Notification};
use sandy_policy::why::{decide, Question, Rule};
use sandy_policy::{resolve, HostContext, Origin, ResolvedPolicy, RunRequest, ViewKind};

use crate::host;
use crate::hostfs::HostFs;
use crate::policy::ExplainMode;

/// Where the sandbox shows the terminal it inherited.
const TERMINAL_NAME: &str = "/dev/console";
/// At most this many distinct paths are recorded; calls on further paths are counted.
const MAX_PATHS: usize = 100_000;
/// `PATH_MAX`: the kernel refuses longer paths.
const PATH_MAX: usize = 4096;
/// The bytes of a path read first ([`read_string`]).
const FIRST_READ: usize = 256;
/// Lines of the summary, at most (the header and "more" line included).
const SUMMARY_LINES: usize = 10;
/// Groups for which the `full` report checks a flag by resolving again.
const MAX_FLAG_CHECKS: usize = 40;

/// What the call needs of its path for a refusal to be possible at all: the kernel
/// answers `ENOENT` or `EEXIST` before any layer of the sandbox is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// The path must exist (unlink, rmdir, rename's source, truncate, open without
    /// `O_CREAT`).
    Existing,
    /// The path must not exist (mkdir, mknod, symlink, link, open with `O_CREAT` and
    /// `O_EXCL` or without a write flag).
    Absent,
    /// Either (open with `O_CREAT` and a write flag, rename's destination).
    Either,
}

/// One path argument of a watched call: the directory descriptor it is relative to, the
/// address of the string, and what the call needs of it.
#[derive(Debug, Clone, Copy)]
struct PathArg {
    dirfd: i32,
    address: u64,
    needs: Needs,
    /// Whether the call writes it (`link`'s existing name is only looked at).
    written: bool,
}

/// What the run's observer saw.
#[derive(Debug, Default)]
pub struct Observations {
    /// Per path (as the sandbox names it): the calls seen on it.
    writes: HashMap<PathBuf, u64>,
    /// Calls on paths beyond [`MAX_PATHS`].
    unrecorded: u64,
    /// Connects to the host's own services refused (the host's network).
    pub refused_connects: crate::connects::Refusals,
}

/// The observer thread of a run.
pub struct Observer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Observations>,
}

impl Observer {
    /// Starts the thread that serves `listener`; `certain` answers at once the calls
    /// the sandbox cannot refuse.
    pub fn start(
        listener: OwnedFd,
        certain: Certain,
        gate: Option<crate::connects::Gate>,
    ) -> std::io::Result<Observer> {
        // Round trips on one CPU (Linux 6.6); without it they still work, more slowly.
        let _ = notify::set_sync_wakeup(listener.as_fd());
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("observer".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || {
                // The sockets this thread creates for the sandbox carry its credentials:
                // none of the supervisor's capabilities (a root caller's) go with them.
                let brokering = sandy_linux::sys::drop_thread_capabilities().is_ok();
                serve(&listener, &stopping, certain, brokering, gate)
            })?;
        Ok(Observer { stop, thread })
    }

    /// After every process of the run is gone: what was seen.
    pub fn finish(self) -> Observations {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Answers every notification until no process uses the filter (the listener hangs
/// up), or the supervisor says the run is over and nothing is pending.
fn serve(
    listener: &OwnedFd,
    stop: &AtomicBool,
    mut certain: Certain,
    brokering: bool,
    mut gate: Option<crate::connects::Gate>,
) -> Observations {
    let mut seen = Observations::default();
    // Where the kernel ends a blocked receive once no process uses the filter, the
    // thread waits in the receive itself: one system call per notification instead of
    // two, on the path every watched call waits for.
    let blocking = sandy_linux::notify_receive_ends_with_filter();
    loop {
        if !blocking && !ready(listener, stop) {
            break;
        }
        let notif = match notify::receive(listener.as_fd()) {
            Ok(n) => n,
            // The caller died or its call was interrupted (nothing to answer), or, for a
            // blocking receive, no process uses the filter any more.
            Err(_) => {
                if blocking && !ready(listener, stop) {
                    break;
                }
                continue;
            }
        };
        if i64::from(notif.data.nr) == libc::SYS_socket {
            broker_socket(listener, &notif, brokering, gate.as_mut());
            continue;
        }
        if i64::from(notif.data.nr) == libc::SYS_connect {
            match &gate {
                Some(gate) => gate.serve(listener, &notif, &mut seen.refused_connects),
                // Connects are handed over only with the broker, which has a gate; without
                // one, refuse rather than let a brokered socket connect unchecked.
                None => {
                    let _ = notify::answer_with_error(
                        listener.as_fd(),
                        notif.id,
                        nix::errno::Errno::EACCES,
                    );
                }
            }
            continue;
        }
        // Read while the caller waits: its memory, its directories and its view of the
        // file system (its mounts) are gone as soon as it exits, which a refused call
        // often makes it do at once.
        let (mut paths, complete) = read_paths(&notif);
        // Most writes land where nothing can refuse them (the project's build output), or
        // name nothing a path rule judges (a pipe reopened through `/dev/fd`): answered at
        // once, with nothing more to look at or record.
        if complete && paths.iter().all(|p| certain.allows(notif.pid, &p.0)) {
            let _ = notify::continue_call(listener.as_fd(), notif.id);
            continue;
        }
        // One impossible path (rename's absent source) fails the whole call first.
        let fails_first = !paths
            .iter()
            .all(|(path, needs, _)| possible(notif.pid, path, *needs))
            || match paths.as_slice() {
                // rename and link across mounts fail with EXDEV, whatever the policy.
                [(a, ..), (b, ..)] => !same_mount(notif.pid, a, b),
                _ => false,
            };
        if fails_first {
            paths.clear();
        }
        // Only now is what was read known to be the caller's: its pid was not reused.
        let valid = notify::still_valid(listener.as_fd(), notif.id);
        let _ = notify::continue_call(listener.as_fd(), notif.id);
        if !valid {
            continue;
        }
        for (path, _, written) in paths {
            if !written {
                continue;
            }
            if let Some(n) = seen.writes.get_mut(&path) {
                *n += 1;
            } else if seen.writes.len() < MAX_PATHS {
                seen.writes.insert(path, 1);
            } else {
                seen.unrecorded += 1;
            }
        }
    }
    seen
}

/// Waits until a notification is pending (true), or until no process uses the filter
/// any more, or the supervisor says the run is over and nothing is pending (false).
fn ready(listener: &OwnedFd, stop: &AtomicBool) -> bool {
    loop {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        let ready = match poll(&mut fds, PollTimeout::from(200u16)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        };
        let events = fds[0].revents().unwrap_or(PollFlags::empty());
        if ready > 0 && events.contains(PollFlags::POLLIN) {
            return true;
        }
        if events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
            || stop.load(Ordering::Relaxed)
        {
            return false;
        }
    }
}

/// The socket broker: a `socket()` of IPv4, IPv6 or netlink in the sandbox (whose own
/// network namespace is empty, its loopback left down) is created here, in the host's namespace, by
/// this thread without capabilities, and installed in the caller as the call's result;
/// the kernel checks the request (type, protocol) exactly as for the caller itself, which
/// has no capabilities either. A failure is the call's error.
fn broker_socket(
    listener: &OwnedFd,
    notif: &Notification,
    brokering: bool,
    gate: Option<&mut crate::connects::Gate>,
) {
    let a = notif.data.args;
    let (domain, kind, protocol) = (a[0] as i32, a[1] as i32, a[2] as i32);
    if !brokering {
        let _ = notify::answer_with_error(listener.as_fd(), notif.id, nix::errno::Errno::EACCES);
        return;
    }
    let cloexec = kind & libc::SOCK_CLOEXEC != 0;
    match sandy_linux::sys::raw_socket(domain, kind & !libc::SOCK_CLOEXEC, protocol) {
        Ok(socket) => {
            if let Some(gate) = gate {
                gate.remember(socket.as_fd());
            }
            let _ = notify::answer_with_fd(listener.as_fd(), notif.id, socket.as_fd(), cloexec);
        }
        Err(errno) => {
            let _ = notify::answer_with_error(listener.as_fd(), notif.id, errno);
        }
    }
}

/// Whether the call could have been refused by the sandbox: a call that needs its path
/// to exist (or not to) fails with `ENOENT` (`EEXIST`) before any layer is asked. Looked
/// at before the answer, through the caller's own root, so that its mounts are the ones
/// seen.
/// A call that creates its path also needs the parent directory to exist.
fn possible(pid: u32, path: &Path, needs: Needs) -> bool {
    let mut inside = PathBuf::from(format!("/proc/{pid}/root"));
    inside.push(path.strip_prefix("/").unwrap_or(path));
    let exists = || inside.symlink_metadata().is_ok();
    let parent_exists = || inside.parent().is_some_and(Path::is_dir);
    match needs {
        Needs::Existing => exists(),
        Needs::Absent => parent_exists() && !exists(),
        Needs::Either => exists() || parent_exists(),
    }
}

/// The absolute paths a watched call writes, as the caller names them, and whether
/// every path argument was read and names no `..` (normalising one away lexically could
/// step over a symbolic link).
fn read_paths(notif: &Notification) -> (Vec<(PathBuf, Needs, bool)>, bool) {
    let pid = notif.pid;
    let arguments = arguments(notif);
    let mut complete = true;
    // Names of the caller's descriptors that no path rule can refuse (a pipe's).
    let mut unnamed = 0;
    let paths: Vec<_> = arguments
        .iter()
        .filter_map(|arg| {
            let raw = read_string(pid, arg.address)?;
            if raw.split(|&b| b == b'/').any(|c| c == b"..") {
                complete = false;
            }
            let path = absolute(pid, arg.dirfd, raw)?;
            let path = if is_normal(path.as_os_str().as_bytes()) {
                path
            } else {
                normalize(&path)
            };
            let path = match descriptor_target(pid, &path) {
                Named::Path => path,
                Named::File(file) => file,
                Named::Nothing => {
                    unnamed += 1;
                    return None;
                }
            };
            Some((path, arg.needs, arg.written))
        })
        .collect();
    let complete = complete && paths.len() + unnamed == arguments.len();
    (paths, complete)
}

/// The places where the sandbox cannot refuse a write-intent call, decided from the
/// policy alone: strictly inside a writable grant as the sandbox sees it, on no
/// protected, masked, copied, redirected or pinned path, not above one (whose names are
/// pinned), and below directories that are real directories, not symbolic links.
///
/// A writable grant is seen inside at its own path: the project and other grants at
/// their host paths, a private directory (`/tmp`, `/var/tmp`, `/dev/shm`) as the
/// sandbox's own fresh one, a tool cache (`~/.cargo`) as its copy-on-write overlay. A
/// write inside any of them is one the policy allows, so recording it could never
/// explain a refusal. A private directory is a hazard only for a grant above it (the
/// grant's rule then reaches a directory the supervisor cannot judge from the policy);
/// a cache's overlay only for the paths at or above its mount point.
///
/// The directories are looked at in the sandbox's own view (`/proc/PID/root` of the
/// caller: every process of the run shares one mount namespace, and none can change it)
/// once each, and remembered; a directory the target later replaces with a symbolic link
/// is not looked at again, so a write refused through it goes unexplained (the kernel
/// decides as always).
#[derive(Debug, Default)]
pub struct Certain {
    roots: Vec<PathBuf>,
    hazards: Vec<PathBuf>,
    /// Mount points whose inside is a writable grant of its own (the caches' overlays):
    /// hazards at and above them only.
    mounts: Vec<PathBuf>,
    /// The private directories (a fresh, empty directory inside in place of the host's).
    private: Vec<PathBuf>,
    plain: std::collections::HashSet<PathBuf>,
}

/// At most this many directories are remembered as real directories.
const MAX_PLAIN_DIRECTORIES: usize = 10_000;

impl Certain {
    pub fn from_policy(policy: &ResolvedPolicy) -> Certain {
        let mut private: Vec<PathBuf> = ["/tmp", "/var/tmp", "/run", "/dev/shm"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        private.extend(policy.runtime_dir.iter().cloned());
        // The private `/tmp`'s host path is not where the sandbox sees it: a grant
        // naming it is left out.
        let roots = policy
            .grants
            .iter()
            .filter(|g| {
                g.access == sandy_policy::Access::ReadWrite
                    && g.scope == sandy_policy::Scope::Subtree
                    && g.path != policy.private_tmp
            })
            .map(|g| g.path.clone())
            .collect();
        private.push(policy.private_tmp.clone());
        let mut hazards: Vec<PathBuf> = Vec::new();
        hazards.extend(policy.protections.iter().map(|p| p.path.clone()));
        hazards.extend(policy.views.iter().map(|v| v.target.clone()));
        hazards.extend(policy.views.iter().filter_map(|v| v.link.clone()));
        hazards.extend(policy.state_files.iter().map(|f| f.inside.clone()));
        let mut mounts = Vec::new();
        for cache in &policy.caches {
            match cache.kind {
                sandy_policy::caches::CacheKind::Overlay => mounts.push(cache.path.clone()),
                sandy_policy::caches::CacheKind::Redirected => hazards.push(cache.path.clone()),
            }
        }
        Certain {
            roots,
            hazards,
            mounts,
            private,
            plain: std::collections::HashSet::new(),
        }
    }

    /// Whether no layer of the sandbox can refuse a write to `path` (absolute, normal)
    /// by process `pid` of the sandbox.
    ///
    /// Asked for every write-intent call of the run while its caller waits, so it compares
    /// bytes (whole components of normal paths) rather than parsing components.
    fn allows(&mut self, pid: u32, path: &Path) -> bool {
        let p = path.as_os_str().as_bytes();
        // The innermost grant strictly above the path.
        let Some(root) = self
            .roots
            .iter()
            .map(|r| r.as_os_str().as_bytes())
            .filter(|r| r.len() < p.len() && within(p, r))
            .max_by_key(|r| r.len())
        else {
            return false;
        };
        let near = |h: &[u8]| within(h, p) || within(p, h);
        if self.hazards.iter().any(|h| near(h.as_os_str().as_bytes()))
            || self
                .mounts
                .iter()
                .any(|m| within(m.as_os_str().as_bytes(), p))
        {
            return false;
        }
        // A private directory is a hazard unless the root is it or inside it.
        if self.private.iter().any(|d| {
            let d = d.as_os_str().as_bytes();
            near(d) && !within(root, d)
        }) {
            return false;
        }
        let root_len = root.len();
        path.parent()
            .is_some_and(|dir| self.plain_below(pid, root_len, dir))
    }

    /// Whether every directory from below the root (`root_len` bytes of `dir`) down to
    /// `dir` is a real directory in the sandbox's view (through `pid`'s root).
    fn plain_below(&mut self, pid: u32, root_len: usize, dir: &Path) -> bool {
        let mut todo = Vec::new();
        let mut at = dir;
        while at.as_os_str().len() > root_len && !self.plain.contains(at) {
            todo.push(at);
            match at.parent() {
                Some(parent) => at = parent,
                None => return false,
            }
        }
        if todo.is_empty() {
            return true;
        }
        if self.plain.len() + todo.len() > MAX_PLAIN_DIRECTORIES {
            self.plain.clear();
        }
        let inside = PathBuf::from(format!("/proc/{pid}/root"));
        for dir in todo.into_iter().rev() {
            let seen = inside.join(dir.strip_prefix("/").unwrap_or(dir));
            if !std::fs::symlink_metadata(seen).is_ok_and(|m| m.is_dir()) {
                return false;
            }
            self.plain.insert(dir.to_path_buf());
        }
        true
    }
}

/// Whether `path` is `dir` or below it, both absolute and normal (as [`normalize`] leaves
/// them): `dir` is a prefix of whole components.
fn within(path: &[u8], dir: &[u8]) -> bool {
    path.starts_with(dir)
        && (path.len() == dir.len() || dir.ends_with(b"/") || path[dir.len()] == b'/')
}

/// Whether the parent directories of `a` and `b`, in the caller's view, are on the same
/// mount (the mount id the kernel shows in `/proc/self/fdinfo`).
// Opened with O_PATH only (nothing is read, made or waited on), and procfs.
#[allow(clippy::disallowed_methods)]
fn same_mount(pid: u32, a: &Path, b: &Path) -> bool {
    let mount = |p: &Path| -> Option<String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let mut inside = PathBuf::from(format!("/proc/{pid}/root"));
        inside.push(p.parent()?.strip_prefix("/").ok()?);
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(inside)
            .ok()?;
        let info =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", dir.as_raw_fd())).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))
            .map(|v| v.trim().to_owned())
    };
    match (mount(a), mount(b)) {
        (Some(x), Some(y)) => x == y,
        // Unknown: report rather than hide.
        _ => true,
    }
}

/// What an open's flags need of the path; `None` for a read.
fn open_needs(flags: u64) -> Option<Needs> {
    let flags = flags as i32;
    let writes = flags & (libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) != 0;
    if flags & libc::O_CREAT != 0 {
        Some(if flags & libc::O_EXCL != 0 || !writes {
            Needs::Absent
        } else {
            Needs::Either
        })
    } else if writes {
        Some(Needs::Existing)
    } else {
        None
    }
}

/// The path arguments of a watched call.
fn arguments(notif: &Notification) -> Vec<PathArg> {
    let a = notif.data.args;
    let nr = i64::from(notif.data.nr);
    let fd = |i: usize| a[i] as i32;
    let at = |dirfd: i32, address: u64, needs: Needs| PathArg {
        dirfd,
        address,
        needs,
        written: true,
    };
    // An existing name a call only links to.
    let linked = |dirfd: i32, address: u64| PathArg {
        dirfd,
        address,
        needs: Needs::Existing,
        written: false,
    };
    let cwd = libc::AT_FDCWD;
    #[cfg(target_arch = "x86_64")]
    {
        use Needs::*;
        let legacy = match nr {
            libc::SYS_open => open_needs(a[1]).map(|n| vec![at(cwd, a[0], n)]),
            libc::SYS_creat => Some(vec![at(cwd, a[0], Either)]),
            libc::SYS_mkdir | libc::SYS_mknod => Some(vec![at(cwd, a[0], Absent)]),
            libc::SYS_unlink | libc::SYS_rmdir | libc::SYS_truncate => {
                Some(vec![at(cwd, a[0], Existing)])
            }
            libc::SYS_rename => Some(vec![at(cwd, a[0], Existing), at(cwd, a[1], Either)]),
            libc::SYS_link => Some(vec![linked(cwd, a[0]), at(cwd, a[1], Absent)]),
            libc::SYS_symlink => Some(vec![at(cwd, a[1], Absent)]),
            _ => None,
        };
        if let Some(args) = legacy {
            return args;
        }
    }
    use Needs::*;
    match nr {
        libc::SYS_openat => open_needs(a[2])
            .map(|n| vec![at(fd(0), a[1], n)])
            .unwrap_or_default(),
        libc::SYS_openat2 => read_u64(notif.pid, a[2])
            .and_then(open_needs)
            .map(|n| vec![at(fd(0), a[1], n)])
            .unwrap_or_default(),
        libc::SYS_truncate => vec![at(cwd, a[0], Existing)],
        libc::SYS_mkdirat | libc::SYS_mknodat => vec![at(fd(0), a[1], Absent)],
        libc::SYS_unlinkat => vec![at(fd(0), a[1], Existing)],
        libc::SYS_renameat | libc::SYS_renameat2 => {
            vec![at(fd(0), a[1], Existing), at(fd(2), a[3], Either)]
        }
        libc::SYS_linkat => vec![linked(fd(0), a[1]), at(fd(2), a[3], Absent)],
        libc::SYS_symlinkat => vec![at(fd(1), a[2], Absent)],
        _ => Vec::new(),
    }
}

/// Reads `buf.len()` bytes at `address` of process `pid`; how many were read.
pub(crate) fn read_memory(pid: u32, address: u64, buf: &mut [u8]) -> Option<usize> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?);
    let len = buf.len();
    let remote = [RemoteIoVec {
        base: usize::try_from(address).ok()?,
        len,
    }];
    process_vm_readv(pid, &mut [IoSliceMut::new(buf)], &remote).ok()
}

/// `open_how.flags`, the first field of the structure `openat2` points to.
fn read_u64(pid: u32, address: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    (read_memory(pid, address, &mut word)? == 8).then(|| u64::from_ne_bytes(word))
}

/// The NUL-terminated string at `address` of process `pid`, at most `PATH_MAX` bytes,
/// read a page at a time (a read may not cross into an unmapped page), the first read
/// only [`FIRST_READ`] bytes: most paths are shorter, and the kernel copies all it is
/// asked for.
fn read_string(pid: u32, address: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    if address == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; PATH_MAX];
    let mut at = address;
    let mut first = true;
    while out.len() < PATH_MAX {
        let to_page_end = PAGE - at % PAGE;
        let mut want = usize::try_from(to_page_end).ok()?.min(PATH_MAX - out.len());
        if first {
            want = want.min(FIRST_READ);
            first = false;
        }
        let got = read_memory(pid, at, &mut chunk[..want])?;
        if got == 0 {
            return None;
        }
        if let Some(end) = chunk[..got].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(out);
        }
        out.extend_from_slice(&chunk[..got]);
        at = at.checked_add(u64::try_from(got).ok()?)?;
    }
    None
}

/// `raw` made absolute against the caller's directory descriptor or working directory,
/// as the caller's mount namespace names them. `None` for an empty path (a call on the
/// descriptor itself) or a base that is not a path.
fn absolute(pid: u32, dirfd: i32, raw: Vec<u8>) -> Option<PathBuf> {
    if raw.is_empty() {
        return None;
    }
    let path = PathBuf::from(OsString::from_vec(raw));
    if path.is_absolute() {
        return Some(path);
    }
    let base = if dirfd == libc::AT_FDCWD {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?
    } else {
        std::fs::read_link(format!("/proc/{pid}/fd/{dirfd}")).ok()?
    };
    base.is_absolute().then(|| base.join(path))
}

/// What a path names when it may name one of the caller's open descriptors.
#[derive(Debug, PartialEq, Eq)]
enum Named {
    /// An ordinary path.
    Path,
    /// A descriptor's name (`/dev/fd/3`, `/dev/stdout`, `/proc/self/fd/3`, or below one
    /// that is a directory): opening it reopens the file the descriptor refers to, which
    /// the sandbox judges by that file's own path, given here as the sandbox names it.
    File(PathBuf),
    /// A descriptor's name for what no path rule judges (a pipe, a socket, an anonymous
    /// or deleted file), or one the supervisor cannot look at: nothing to explain.
    Nothing,
}

/// Whether `path` (absolute, normal) names a descriptor of the caller `pid`, and what.
///
/// Read from the caller's descriptor table while it waits: `/dev/fd`, `/dev/stdin`,
/// `/dev/stdout` and `/dev/stderr` are links to `/proc/self/fd` inside, and `/proc/self`
/// there is the caller, never the supervisor. The kernel names the file as the caller's
/// mount namespace sees it.
fn descriptor_target(pid: u32, path: &Path) -> Named {
    let bytes = path.as_os_str().as_bytes();
    let split = |rest: &[u8]| -> Option<(u32, Vec<u8>)> {
        let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let fd = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
        Some((fd, rest[end..].to_vec()))
    };
    // `/dev/stdout` and `/dev/stdout/...`, not `/dev/stdoutx`.
    let standard = [
        (&b"/dev/stdin"[..], 0),
        (&b"/dev/stdout"[..], 1),
        (&b"/dev/stderr"[..], 2),
    ]
    .into_iter()
    .find_map(|(name, fd)| {
        let rest = bytes.strip_prefix(name)?;
        (rest.is_empty() || rest[0] == b'/').then(|| (fd, rest.to_vec()))
    });
    let found = if let Some(rest) = bytes.strip_prefix(b"/dev/fd/") {
        split(rest)
    } else if standard.is_some() {
        standard
    } else if let Some(rest) = bytes.strip_prefix(b"/proc/") {
        let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let (process, after) = rest.split_at(end);
        let Some(fd_part) = after.strip_prefix(b"/fd/") else {
            return Named::Path;
        };
        let own = process == b"self"
            || process == b"thread-self"
            || sandbox_pid(pid).is_some_and(|inside| process == inside.as_bytes());
        if !own {
            // Another process's descriptor (or a name this supervisor reads as a
            // different process): not the caller's to look at.
            return if process.iter().all(u8::is_ascii_digit) {
                Named::Nothing
            } else {
                Named::Path
            };
        }
        split(fd_part)
    } else {
        return Named::Path;
    };
    let Some((fd, rest)) = found else {
        return Named::Nothing;
    };
    let Ok(file) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
        return Named::Nothing;
    };
    let file_bytes = file.as_os_str().as_bytes();
    if !file_bytes.starts_with(b"/") || file_bytes.ends_with(b" (deleted)") {
        return Named::Nothing;
    }
    if rest.is_empty() {
        return Named::File(file);
    }
    let mut joined = file.into_os_string().into_vec();
    joined.extend_from_slice(&rest);
    Named::File(normalize(&PathBuf::from(OsString::from_vec(joined))))
}

/// The pid the caller `pid` (as the supervisor sees it) has in the sandbox's own PID
/// namespace: the last field of `NSpid` in its status.
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
fn sandbox_pid(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last().map(str::to_owned)
}

/// Why a refusal cannot be lifted by a flag, or which flag lifts it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Remedy {
    /// No flag: the reason.
    Protected(String),
    /// The directory to grant with `--read-write` (checked later by resolving again).
    Grant(PathBuf),
}

/// The refusals of one rule and place.
#[derive(Debug)]
struct Group {
    remedy: Remedy,
    /// Refused paths and how often each was refused.
    paths: BTreeMap<PathBuf, u64>,
    /// The grant checked: `Ok(flag)`, or why no flag allows it.
    flag: Option<Result<String, String>>,
}

impl Group {
    fn calls(&self) -> u64 {
        self.paths.values().sum()
    }
}

/// Prints the report on stderr (nothing when nothing was refused, or with `off`).
pub fn report(
    mode: ExplainMode,
    observations: &Observations,
    policy: &ResolvedPolicy,
    request: &RunRequest,
    host: &HostContext,
) {
    if mode == ExplainMode::Off {
        return;
    }
    let mut groups = classify(observations, policy, host);
    if groups.is_empty() {
        return;
    }
    // Largest first; the flag of each shown group is checked by resolving again.
    groups.sort_by(|a, b| b.calls().cmp(&a.calls()).then(a.remedy.cmp(&b.remedy)));
    let shown = match mode {
        ExplainMode::Full => groups.len(),
        _ => groups.len().min(SUMMARY_LINES - 2),
    };
    for group in groups.iter_mut().take(shown.min(MAX_FLAG_CHECKS)) {
        if let Remedy::Grant(dir) = &group.remedy {
            let paths: Vec<&Path> = group.paths.keys().map(PathBuf::as_path).collect();
            group.flag = Some(check_grant(request, dir, &paths));
        }
    }
    let home = host.home.as_deref();
    let total: u64 = groups.iter().map(Group::calls).sum();
    let mut lines = vec![format!(
        "the sandbox refused {} during the run:",
        plural(total, "write")
    )];
    for group in groups.iter().take(shown) {
        lines.push(format!("  {}", describe(group, home)));
        if mode == ExplainMode::Full && group.paths.len() > 1 {
            for (path, n) in &group.paths {
                let times = if *n > 1 {
                    format!(" ({n} times)")
                } else {
                    String::new()
                };
                lines.push(format!("    {}{times}", tilde(path, home)));
            }
        }
    }
    if shown < groups.len() {
        lines.push(format!(
            "  ... and {} more (--explain=full lists every path)",
            plural((groups.len() - shown) as u64, "place")
        ));
    }
    if observations.unrecorded > 0 {
        lines.push(format!(
            "  ({} on further paths were not examined)",
            plural(observations.unrecorded, "write")
        ));
    }
    for line in lines {
        say!("{line}");
    }
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// One line for a group.
fn describe(group: &Group, home: Option<&Path>) -> String {
    let place = match group.paths.keys().next() {
        Some(only) if group.paths.len() == 1 => tilde(only, home),
        _ => match &group.remedy {
            Remedy::Grant(dir) => format!("{}/...", tilde(dir, home)),
            Remedy::Protected(_) => {
                let first: Vec<&Path> = group.paths.keys().map(PathBuf::as_path).collect();
                format!("{}/...", tilde(&common_ancestor(&first), home))
            }
        },
    };
    let calls = group.calls();
    let refused = if calls == 1 {
        "refused".to_owned()
    } else {
        format!("refused {calls} times")
    };
    match (&group.remedy, &group.flag) {
        (Remedy::Protected(reason), _) => {
            format!("write {place}: {refused}; protected: no flag ({reason})")
        }
        (Remedy::Grant(_), Some(Ok(flag))) => format!("write {place}: {refused}; {flag} allows it"),
        (Remedy::Grant(_), Some(Err(reason))) => {
            format!("write {place}: {refused}; no flag: {reason}")
        }
        (Remedy::Grant(dir), None) => format!(
            "write {place}: {refused} (`sandy why --write {}` names the flag)",
            dir.display()
        ),
    }
}

/// `~/...` for a path under the home directory.
fn tilde(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "~".to_owned(),
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// The refused paths, grouped by the rule that refuses them and, for the paths no grant
/// covers, by the directory a grant would name.
fn classify(
    observations: &Observations,
    policy: &ResolvedPolicy,
    host: &HostContext,
) -> Vec<Group> {
    let mut protected: BTreeMap<String, BTreeMap<PathBuf, u64>> = BTreeMap::new();
    let mut ungranted: BTreeMap<PathBuf, BTreeMap<PathBuf, u64>> = BTreeMap::new();
    for (path, &n) in &observations.writes {
        // The inherited terminal, shown at /dev/console, is writable there (the mount
        // layer binds it, and the bootstrap grants it).
        if !host.terminals.is_empty() && path == Path::new(TERMINAL_NAME) {
            continue;
        }
        let d = decide(policy, Question::Write, path, &HostFs);
        if d.allowed || unenforced(&d.rule, policy) {
            continue;
        }
        // The home's own history file of a tool whose history this run keeps elsewhere:
        // something set the tool's variable back to it (a start-up file). No flag opens
        // it; the line says where the history goes instead.
        let history = policy
            .history
            .as_ref()
            .and_then(|h| h.stands_in_for(path))
            .map(|k| {
                format!(
                    "your own {} history, never written by a run; this run keeps it per \
                     project in Sandy's state through {}, which something set back to \
                     this file, such as a start-up file",
                    k.tool, k.variable
                )
            });
        match history.or_else(|| reason(&d.rule, path, policy)) {
            Some(reason) => {
                *protected
                    .entry(reason)
                    .or_default()
                    .entry(path.clone())
                    .or_default() += n;
            }
            None => {
                let dir = d
                    .resolved
                    .ancestors()
                    .skip(1)
                    .find(|p| p.is_dir())
                    .unwrap_or(Path::new("/"));
                // Inside a repository, the repository: git writes objects, refs and
                // logs together, and a grant of one of them only moves the failure.
                let dir = repository_of(dir, host).unwrap_or(dir).to_path_buf();
                *ungranted
                    .entry(dir)
                    .or_default()
                    .entry(path.clone())
                    .or_default() += n;
            }
        }
    }
    let mut groups: Vec<Group> = protected
        .into_iter()
        .map(|(reason, paths)| Group {
            remedy: Remedy::Protected(reason),
            paths,
            flag: None,
        })
        .collect();
    for (dir, paths) in merge_places(ungranted, host.home.as_deref(), &host.cwd) {
        groups.push(Group {
            remedy: Remedy::Grant(dir),
            paths,
            flag: None,
        });
    }
    groups
}

/// Groups of ungranted places merged into their common directory when that directory is
/// specific enough to grant: at least two levels deep, and neither the home directory,
/// the project, nor one of their ancestors (a remote repository's `objects/ab` and
/// `refs/heads` become the repository).
fn merge_places(
    mut places: BTreeMap<PathBuf, BTreeMap<PathBuf, u64>>,
    home: Option<&Path>,
    cwd: &Path,
) -> BTreeMap<PathBuf, BTreeMap<PathBuf, u64>> {
    let too_wide = |dir: &Path| {
        dir.components().count() < 3
            || home.is_some_and(|h| h.starts_with(dir))
            || cwd.starts_with(dir)
    };
    loop {
        let dirs: Vec<PathBuf> = places.keys().cloned().collect();
        let mut merged = None;
        'pairs: for (i, a) in dirs.iter().enumerate() {
            for b in dirs.iter().skip(i + 1) {
                let common = common_ancestor(&[a, b]);
                if !too_wide(&common) {
                    merged = Some((a.clone(), b.clone(), common));
                    break 'pairs;
                }
            }
        }
        let Some((a, b, common)) = merged else {
            return places;
        };
        let mut paths = places.remove(&a).unwrap_or_default();
        for (p, n) in places.remove(&b).unwrap_or_default() {
            *paths.entry(p).or_default() += n;
        }
        let entry = places.entry(common).or_default();
        for (p, n) in paths {
            *entry.entry(p).or_default() += n;
        }
    }
}

/// The repository `dir` belongs to, as git recognises one: a git directory (`HEAD` with
/// `objects/` and `refs/` beside it, bare repositories included) or a working tree (with
/// a `.git` entry). Never the project or the home directory, nor one of their ancestors.
fn repository_of<'a>(dir: &'a Path, host: &HostContext) -> Option<&'a Path> {
    let repo = dir.ancestors().find(|a| {
        (a.join("HEAD").is_file() && a.join("objects").is_dir() && a.join("refs").is_dir())
            || a.join(".git").symlink_metadata().is_ok()
    })?;
    let wide = host.home.as_deref().is_some_and(|h| h.starts_with(repo))
        || host.cwd.starts_with(repo)
        || repo.starts_with(&host.cwd);
    (!wide).then_some(repo)
}

fn common_ancestor(paths: &[&Path]) -> PathBuf {
    let mut common = match paths.first() {
        Some(p) => p.to_path_buf(),
        None => return PathBuf::from("/"),
    };
    for p in paths.iter().skip(1) {
        while !p.starts_with(&common) {
            if !common.pop() {
                return PathBuf::from("/");
            }
        }
    }
    common
}

/// Why no flag lifts a refusal by this rule, in a few words; `None` when a grant could.
fn reason(rule: &Rule, path: &Path, policy: &ResolvedPolicy) -> Option<String> {
    Some(match rule {
        Rule::Mask { .. } => "a sensitive path, masked inside".to_owned(),
        Rule::View { target, view } => match view {
            ViewKind::Filtered => {
                let why = policy
                    .views
                    .iter()
                    .find(|v| &v.target == target)
                    .map(|v| v.reason.as_str())
                    .unwrap_or("a filtered copy");
                format!("{why}; the sandbox reads a filtered, read-only copy")
            }
            ViewKind::PrivateCopy => "a private copy of an agent's state file".to_owned(),
        },
        Rule::Protection {
            origin,
            path: protected,
        } => {
            // A protection that says why it exists (a directory a start-up file sources).
            let own = policy
                .protections
                .iter()
                .filter(|p| &p.path == protected)
                .find_map(|p| p.reason.as_deref());
            match (origin, own) {
                (Origin::Baseline, Some(why)) => {
                    format!("{why}; read-only inside, change it outside the sandbox")
                }
                (
                    Origin::Config | Origin::ProfileFile | Origin::PolicyFile | Origin::ProjectFile,
                    why,
                ) => format!(
                    "your {} keeps it read-only ({}); change it outside the sandbox",
                    match origin {
                        Origin::Config => "configuration",
                        Origin::PolicyFile => "policy file",
                        Origin::ProjectFile => "project policy",
                        _ => "profile file",
                    },
                    why.unwrap_or("no reason given")
                ),
                (Origin::Profile, _) => "the agent's launch configuration, read-only inside; \
                                         change it outside the sandbox"
                    .to_owned(),
                _ if path.file_name().is_some_and(|n| n == "config") => {
                    "git configuration, read-only inside; run the `git config` command outside \
                     the sandbox"
                        .to_owned()
                }
                _ => "git machinery (config, hooks, pointers), read-only inside; change it \
                      outside the sandbox"
                    .to_owned(),
            }
        }
        Rule::Private { directory } => format!(
            "{} is the sandbox's own private directory inside",
            directory.display()
        ),
        Rule::Grant { .. } | Rule::NoGrant => return None,
    })
}

/// Whether `--read-write DIR` allows every path of a group: the launch resolved again
/// with it (host facts gathered again, as `sandy run` with the flag would), and each path
/// asked again. The host's own permissions are checked too.
fn check_grant(request: &RunRequest, dir: &Path, paths: &[&Path]) -> Result<String, String> {
    let flag = format!("--read-write {}", dir.display());
    if nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(format!(
            "{} is not writable to you, inside the sandbox or outside it",
            dir.display()
        ));
    }
    let mut with = request.clone();
    with.read_write.push(dir.to_path_buf());
    let wider = host::gather(&with.read_write).map_err(|e| format!("{flag} is refused: {e}"))?;
    let policy = resolve(&with, &wider, &HostFs).map_err(|e| format!("{flag} is refused: {e}"))?;
    if paths
        .iter()
        .all(|p| decide(&policy, Question::Write, p, &HostFs).allowed)
    {
        Ok(flag)
    } else {
        Err(format!("even {flag} would not allow it"))
    }
}

/// Whether the rule is a protection with nothing to hold at launch: a name that did not
/// exist and gets no placeholder is not mounted over, so a write there was not refused
/// (the run's creation of it is reported after the run instead).
fn unenforced(rule: &Rule, policy: &ResolvedPolicy) -> bool {
    let Rule::Protection { path, .. } = rule else {
        return false;
    };
    policy
        .protections
        .iter()
        .any(|p| &p.path == path && !p.exists && p.placeholder.is_none())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    #[test]
    fn open_flags_say_what_a_refusal_needs() {
        assert_eq!(open_needs(libc::O_RDONLY as u64), None);
        assert_eq!(open_needs(libc::O_APPEND as u64), None);
        assert_eq!(open_needs(libc::O_WRONLY as u64), Some(Needs::Existing));
        assert_eq!(
            open_needs((libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64),
            Some(Needs::Either)
        );
        assert_eq!(
            open_needs((libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u64),
            Some(Needs::Absent)
        );
        assert_eq!(open_needs(libc::O_CREAT as u64), Some(Needs::Absent));
    }

    #[test]
    fn places_merge_into_a_specific_common_directory_only() {
        let one = |p: &str| BTreeMap::from([(PathBuf::from(p), 1u64)]);
        let places = BTreeMap::from([
            (
                PathBuf::from("/srv/remote.git/objects"),
                one("/srv/remote.git/objects/ab"),
            ),
            (
                PathBuf::from("/srv/remote.git/refs/heads"),
                one("/srv/remote.git/refs/heads/main.lock"),
            ),
            (PathBuf::from("/srv/other"), one("/srv/other/x")),
            (PathBuf::from("/home/u/a"), one("/home/u/a/x")),
            (PathBuf::from("/home/u/b"), one("/home/u/b/y")),
        ]);
        let merged = merge_places(
            places,
            Some(Path::new("/home/u")),
            Path::new("/home/u/project"),
        );
        let dirs: Vec<&Path> = merged.keys().map(PathBuf::as_path).collect();
        assert_eq!(
            dirs,
            [
                Path::new("/home/u/a"),
                Path::new("/home/u/b"),
                Path::new("/srv/other"),
                Path::new("/srv/remote.git"),
            ]
        );
        assert_eq!(merged[Path::new("/srv/remote.git")].len(), 2);
    }

    #[test]
    fn writes_inside_a_writable_grant_as_the_sandbox_sees_it_are_certain() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        // `base/private` stands for /var/tmp (a private directory with a writable grant
        // of its own); `base/private/project` for a project in it, carried through;
        // `base/home/run` for a private directory without a grant of its own under a
        // grant (`base/home`); `base/home/.cargo` for `~/.cargo`.
        let private = base.join("private");
        let project = private.join("project");
        let run = base.join("home/run");
        let cache = base.join("home/.cargo");
        std::fs::create_dir_all(project.join("target/debug")).unwrap();
        std::fs::create_dir_all(project.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(base.join("home/work")).unwrap();
        std::fs::create_dir_all(run.join("user")).unwrap();
        std::fs::create_dir_all(cache.join("registry")).unwrap();
        // The innermost grant decides, whatever the order.
        let mut certain = Certain {
            roots: vec![
                private.clone(),
                project.clone(),
                base.join("home/work"),
                base.join("home"),
                cache.clone(),
            ],
            hazards: vec![project.join(".git/hooks"), cache.join("env")],
            mounts: vec![cache.clone()],
            private: vec![private.clone(), run.clone()],
            plain: Default::default(),
        };
        let pid = std::process::id();
        // Inside the carried grant: certain, but never on or above a protection.
        assert!(certain.allows(pid, &project.join("target/debug/out")));
        assert!(!certain.allows(pid, &project.join(".git/hooks/pre-commit")));
        assert!(!certain.allows(pid, &project.join(".git")));
        // The private directory's own grant covers what is in it beside the project;
        // the private directory itself is no grant's inside.
        assert!(certain.allows(pid, &private.join("other")));
        assert!(!certain.allows(pid, &private));
        // A private directory without a grant of its own, under a grant above it: not
        // certain (nothing here says what the sandbox's fresh directory allows).
        assert!(!certain.allows(pid, &run.join("user/x")));
        // Inside a cache's overlay: certain, except on a copied file in it; at or above
        // its mount point: not certain.
        assert!(certain.allows(pid, &cache.join("registry/x")));
        assert!(certain.allows(pid, &cache.join(".package-cache")));
        assert!(!certain.allows(pid, &cache.join("env")));
        assert!(!certain.allows(pid, &cache));
        // A grant that is no private directory's stays certain.
        assert!(certain.allows(pid, &base.join("home/work/file")));
        // Under a symbolic link, or in a directory that does not exist: not certain.
        std::os::unix::fs::symlink(&base, project.join("link")).unwrap();
        assert!(!certain.allows(pid, &project.join("link/x")));
        assert!(!certain.allows(pid, &project.join("absent/x")));
        // Judged through the caller's root: a process that is gone proves nothing.
        assert!(!certain.allows(u32::MAX, &base.join("home/work/new/x")));
    }

    #[test]
    fn byte_comparisons_agree_with_the_components_of_normal_paths() {
        let paths = [
            "/", "/a", "/a/b", "/ab", "/a/bc", "/a/b/c", "/a/b/", "//a", "/a//b", "/a/./b",
            "/a/../b", "/.", "/a/.", "/a/..", "/...", "/a/.b", "a/b", "",
        ];
        for p in paths {
            // `is_normal` says exactly when `normalize` would change nothing.
            let normal = p.starts_with('/') && normalize(Path::new(p)).as_os_str() == p;
            assert_eq!(is_normal(p.as_bytes()), normal, "{p:?}");
        }
        let normal: Vec<&str> = paths
            .into_iter()
            .filter(|p| is_normal(p.as_bytes()))
            .collect();
        for p in &normal {
            for d in &normal {
                assert_eq!(
                    within(p.as_bytes(), d.as_bytes()),
                    Path::new(p).starts_with(d),
                    "{p:?} within {d:?}"
                );
            }
        }
    }

    #[test]
    fn descriptor_names_are_read_in_the_callers_descriptor_table() {
        use std::os::fd::AsRawFd;
        let pid = std::process::id();
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::fs::canonicalize(dir.path()).unwrap();
        let file = std::fs::File::create(dir_path.join("f")).unwrap();
        let opened = std::fs::File::open(&dir_path).unwrap();
        let (read, _write) = nix::unistd::pipe().unwrap();
        let name = |s: String| descriptor_target(pid, Path::new(&s));
        let fd = file.as_raw_fd();
        assert_eq!(
            name(format!("/dev/fd/{fd}")),
            Named::File(dir_path.join("f"))
        );
        assert_eq!(
            name(format!("/proc/self/fd/{fd}")),
            Named::File(dir_path.join("f"))
        );
        assert_eq!(
            name(format!("/proc/{pid}/fd/{fd}")),
            Named::File(dir_path.join("f"))
        );
        assert_eq!(
            name(format!("/dev/fd/{}/sub/x", opened.as_raw_fd())),
            Named::File(dir_path.join("sub/x"))
        );
        assert_eq!(
            name(format!("/dev/fd/{}", read.as_raw_fd())),
            Named::Nothing
        );
        assert_eq!(name("/dev/fd/999999".into()), Named::Nothing);
        assert_eq!(name("/dev/fd/x".into()), Named::Nothing);
        assert_eq!(name(format!("/proc/{}/fd/0", pid + 1)), Named::Nothing);
        for ordinary in ["/dev/fdx", "/dev/stdoutx", "/proc/self/status", "/home/u/f"] {
            assert_eq!(name(ordinary.into()), Named::Path, "{ordinary}");
        }
        drop(file);
        std::fs::remove_file(dir_path.join("f")).unwrap();
        let gone = std::fs::File::create(dir_path.join("g")).unwrap();
        std::fs::remove_file(dir_path.join("g")).unwrap();
        assert_eq!(
            name(format!("/dev/fd/{}", gone.as_raw_fd())),
            Named::Nothing
        );
    }

    #[test]
    fn strings_longer_than_the_first_read_are_read_whole() {
        let pid = std::process::id();
        for len in [
            0,
            1,
            FIRST_READ - 1,
            FIRST_READ,
            FIRST_READ + 1,
            3000,
            PATH_MAX - 1,
        ] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut c = text.clone();
            c.push(0);
            assert_eq!(
                read_string(pid, c.as_ptr() as u64),
                Some(text),
                "{len} bytes"
            );
        }
        // No NUL within PATH_MAX bytes: no path.
        let long = vec![b'x'; PATH_MAX + 10];
        assert_eq!(read_string(pid, long.as_ptr() as u64), None);
    }

    #[test]
    fn paths_are_normalized_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
    }
}
