//! Layer 1: a private user and mount namespace.
//!
//! Landlock only adds permissions. What it cannot express is carried by mounts that exist
//! only in the sandbox's mount namespace: read-only binds over protected paths inside
//! writable trees (with self-binds of their ancestors, so that renaming or replacing them
//! fails with `EBUSY`), empty read-only mounts over sensitive paths, the private
//! per-run directory at `/tmp`, and empty private `/run`, `/dev/shm` and runtime
//! directory, which also hides host sockets (session bus, ssh-agent, docker, X11) that
//! Landlock cannot keep `connect()` away from.
//!
//! [`mount_plan`] computes everything as data; [`apply`] performs it in a fixed order.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{readlinkat, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{getgid, getuid};
use sandy_policy::{
    chain, Access, ChainError, Network, PathInspector, Pin, ProtectionKind, RealFs, Scope,
    ValidatedManifest, POLICY_DOCUMENT_DIR, POLICY_DOCUMENT_PATH, PRIVATE_SHM, PRIVATE_TMP,
    PRIVATE_VAR_TMP,
};

use crate::error::LinuxError;
use crate::probe::userns_hint;
use crate::reach::NsStep;
use crate::sys;
use crate::sys::open;

/// Directories replaced inside the sandbox by something private and empty.
const RUN: &str = "/run";

/// Where a view's copy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewSource {
    /// A file the supervisor prepared.
    File(PathBuf),
    /// The copy's content, written read-only into the private `/run` first.
    Content(Vec<u8>),
}

/// Every mount the sandbox gets, as data. Applied in field order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// The host's private per-run directory, mounted at `/tmp` (with a tmpfs of
    /// `tmp_size` on it, in the sandbox's mount namespace only: the host directory stays
    /// empty).
    pub private_tmp: PathBuf,
    /// Empty private tmpfs mounts, with their mode.
    pub tmpfs: Vec<(PathBuf, u32)>,
    /// The size of each private tmpfs (the private `/tmp` and those of `tmpfs`), in
    /// bytes: the `--max-tmp` ceiling. A write past it fails with `ENOSPC`.
    pub tmp_size: u64,
    /// Directories created inside those tmpfs mounts (the runtime directory), mode 0700.
    pub make_dirs: Vec<PathBuf>,
    /// A fresh sysfs at `/sys` for the private network namespace, so that the host's
    /// interfaces (names, addresses, counters) are not listed there.
    pub fresh_sysfs: bool,
    /// A private devpts instance at `/dev/pts` (with `/dev/ptmx` leading to it), so that
    /// the sandbox can open new terminals but no host pty; the inherited terminal is
    /// bound onto `/dev/console` so that `ttyname` still finds it.
    pub private_terminals: bool,
    /// Granted paths that lie under a replaced directory, mounted back at the same place.
    pub carry: Vec<PathBuf>,
    /// Everything else is remounted read-only, so that metadata changes (chmod, chown,
    /// utimes, xattrs), which Landlock does not govern, fail outside these writable
    /// grants.
    pub writable: Vec<PathBuf>,
    /// The writable directory trees: every component of a protected name below one of
    /// them is pinned (see [`sandy_policy::chain`]).
    pub pin_roots: Vec<PathBuf>,
    /// Read-only protected names (not resolved through symlinks).
    pub read_only: Vec<PathBuf>,
    /// Read-only names taken at launch from an agent's state directory: whatever is at
    /// each when the sandbox is set up is protected; one that is gone, or leads nowhere,
    /// is skipped ([`sandy_policy::Protection::at_launch`]).
    pub at_launch: Vec<PathBuf>,
    /// Writable names of an agent's state inside a directory protected read-only as one,
    /// mounted writable again on top of it (after every read-only object).
    pub reopen: Vec<PathBuf>,
    /// Denied names, whose objects are covered by an empty read-only mount.
    pub masks: Vec<PathBuf>,
    /// Prepared copies bound over host files: (source, target). A writable one is also a
    /// read-write exact grant, so it is listed in `writable` too.
    pub views: Vec<(ViewSource, PathBuf)>,
    /// The sandbox's own dry-run document, written read-only at
    /// [`sandy_policy::POLICY_DOCUMENT_PATH`] on the private `/run`.
    pub policy_document: Option<String>,
    /// Copy-on-write tool caches ([`crate::overlay`]), mounted before the views.
    pub overlays: Vec<crate::overlay::CacheOverlay>,
    /// The project's history directory on the host, bound writable at
    /// [`sandy_policy::history::INSIDE`] ([`sandy_policy::history`]).
    pub history: Option<PathBuf>,
}

impl MountPlan {
    /// Whether `path` lies under a directory the sandbox replaces.
    pub fn hides(&self, path: &Path) -> bool {
        path.starts_with(PRIVATE_TMP) || self.tmpfs.iter().any(|(t, _)| path.starts_with(t))
    }

    /// Whether the host object at `path` is out of the sandbox's sight: under a directory
    /// the sandbox replaces, and neither carried through nor on the way to something
    /// carried.
    pub fn out_of_sight(&self, path: &Path) -> bool {
        self.hides(path)
            && !self
                .carry
                .iter()
                .any(|c| path.starts_with(c) || c.starts_with(path))
    }
}

/// One mount that carries a protection, in the order [`apply`] performs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtectionStep {
    /// A directory on the way to a protected object, bound onto itself.
    PinDirectory(PathBuf),
    /// A symbolic link on the way to (or naming) a protected object, pinned as a link;
    /// applied only if the link still reads `target`.
    PinSymlink { path: PathBuf, target: PathBuf },
    /// A protected object (no symlink left in its path), bound onto itself and made
    /// read-only with everything below it.
    ReadOnly(PathBuf),
    /// A denied object, covered by an empty read-only mount.
    Mask(PathBuf),
    /// A component on the way to a name taken at launch ([`MountPlan::at_launch`]):
    /// pinned as whatever it is when applied (a directory bound onto itself, a link pinned
    /// as a link); skipped when it is gone or neither.
    AtLaunchPin(PathBuf),
    /// A name taken at launch, or the object it leads to: whatever is there when applied
    /// is protected (a link pinned as a link, anything else read-only with everything
    /// below it); skipped when it is gone.
    AtLaunch(PathBuf),
    /// A writable directory of an agent's state inside one protected read-only as a
    /// whole, mounted writable again; skipped when it is gone or no longer a directory.
    Reopen(PathBuf),
}

impl ProtectionStep {
    fn path(&self) -> &Path {
        match self {
            ProtectionStep::PinDirectory(p)
            | ProtectionStep::PinSymlink { path: p, .. }
            | ProtectionStep::ReadOnly(p)
            | ProtectionStep::Mask(p)
            | ProtectionStep::AtLaunchPin(p)
            | ProtectionStep::AtLaunch(p)
            | ProtectionStep::Reopen(p) => p,
        }
    }
}

/// Walks every protected name of the plan (see [`sandy_policy::chain`]) and orders what
/// must be mounted: every pin first, outermost first, so that a later mount never hides
/// an earlier one; then the read-only objects, then the masks. Pure: the filesystem is
/// looked at only through `fs`. A name that cannot be protected (a loop, a dangling link)
/// is an error: nothing is silently protected less. The exception are names taken at
/// launch from an agent's state directory ([`MountPlan::at_launch`]), which only a
/// concurrent run can have changed since: one that leads nowhere now is pinned itself.
pub fn protection_steps(
    plan: &MountPlan,
    fs: &dyn PathInspector,
) -> Result<Vec<ProtectionStep>, ChainError> {
    let mut pins: Vec<ProtectionStep> = Vec::new();
    let mut objects: Vec<ProtectionStep> = Vec::new();
    let mut masks: Vec<PathBuf> = Vec::new();
    let named = plan
        .read_only
        .iter()
        .map(|p| (p, Kind::ReadOnly))
        .chain(plan.masks.iter().map(|p| (p, Kind::Mask)))
        .chain(plan.at_launch.iter().map(|p| (p, Kind::AtLaunch)));
    let add = |step: ProtectionStep, list: &mut Vec<ProtectionStep>| {
        // A strict step comes first and wins over an at-launch one for the same path.
        if !list.iter().any(|s| s.path() == step.path()) {
            list.push(step);
        }
    };
    for (name, kind) in named {
        // A sensitive path under a replaced directory (a home in /tmp) is out of sight
        // already.
        if plan.out_of_sight(name) {
            continue;
        }
        let walked = match chain(name, &plan.pin_roots, &|p| plan.out_of_sight(p), fs) {
            Ok(walked) => walked,
            Err(_) if kind == Kind::AtLaunch => {
                add(ProtectionStep::AtLaunch(name.clone()), &mut objects);
                continue;
            }
            Err(e) => return Err(e),
        };
        for pin in walked.pins {
            let step = match (kind, pin) {
                (Kind::AtLaunch, pin) => ProtectionStep::AtLaunchPin(pin.path().to_path_buf()),
                (_, Pin::Directory(p)) => ProtectionStep::PinDirectory(p),
                (_, Pin::Symlink { path, target }) => ProtectionStep::PinSymlink { path, target },
            };
            add(step, &mut pins);
        }
        if let Some(object) = walked.object {
            match kind {
                Kind::Mask => {
                    if !masks.contains(&object) {
                        masks.push(object);
                    }
                }
                Kind::ReadOnly => add(ProtectionStep::ReadOnly(object), &mut objects),
                Kind::AtLaunch => add(ProtectionStep::AtLaunch(object), &mut objects),
            }
        }
    }
    // Outermost first; a stable sort keeps the walk's order among equals.
    let depth = |p: &Path| p.components().count();
    pins.sort_by_key(|p| depth(p.path()));
    objects.sort_by_key(|p| depth(p.path()));
    // Opened again once every read-only object is in place, outermost first.
    let mut reopen: Vec<PathBuf> = plan
        .reopen
        .iter()
        .filter(|p| !plan.out_of_sight(p))
        .cloned()
        .collect();
    reopen.sort_by_key(|p| depth(p));
    Ok(pins
        .into_iter()
        .chain(objects)
        .chain(reopen.into_iter().map(ProtectionStep::Reopen))
        .chain(masks.into_iter().map(ProtectionStep::Mask))
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReadOnly,
    Mask,
    AtLaunch,
}

/// Computes the mounts for a manifest. Pure.
pub fn mount_plan(manifest: &ValidatedManifest) -> MountPlan {
    let m = manifest.manifest();
    let runtime_dir = m.runtime_dir.as_ref().map(|d| d.as_path().to_path_buf());
    let mut tmpfs = vec![
        // /var/tmp is a second world-writable temporary directory, where host sockets and
        // other users' files may live; the sandbox gets an empty private one.
        (PathBuf::from(PRIVATE_VAR_TMP), 0o1777),
        (PathBuf::from(RUN), 0o755),
        (PathBuf::from(PRIVATE_SHM), 0o1777),
    ];
    let mut make_dirs = Vec::new();
    if let Some(dir) = &runtime_dir {
        if dir.starts_with(RUN) {
            make_dirs.push(dir.clone());
        } else {
            tmpfs.push((dir.clone(), 0o700));
        }
    }
    let hidden: Vec<PathBuf> = std::iter::once(PathBuf::from(PRIVATE_TMP))
        .chain(tmpfs.iter().map(|(p, _)| p.clone()))
        .collect();
    // The private directories themselves are never carried: that would bring the host's
    // sockets back.
    let private: Vec<PathBuf> = hidden
        .iter()
        .chain(make_dirs.iter())
        .cloned()
        .chain(std::iter::once(PathBuf::from(POLICY_DOCUMENT_DIR)))
        .collect();

    // Granted paths under a replaced directory are carried through, outermost only.
    let mut carry: Vec<PathBuf> = m
        .file_grants
        .iter()
        .map(|g| g.path.as_path().to_path_buf())
        .filter(|p| !private.contains(p) && hidden.iter().any(|h| p.starts_with(h)))
        .collect();
    carry.sort();
    carry.dedup();
    let outermost: Vec<PathBuf> = carry
        .iter()
        .filter(|p| !carry.iter().any(|q| q != *p && p.starts_with(q)))
        .cloned()
        .collect();

    // Writable roots: a protected path's ancestors up to the nearest writable root are
    // made mount points.
    let writable_all: Vec<PathBuf> = m
        .file_grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite)
        .map(|g| g.path.as_path().to_path_buf())
        .collect();
    let writable: Vec<&Path> = m
        .file_grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite && g.scope == Scope::Subtree)
        .map(|g| g.path.as_path())
        .collect();
    let mut read_only = Vec::new();
    let mut at_launch = Vec::new();
    let mut masks = Vec::new();
    for protection in &m.protections {
        let path = protection.path.as_path().to_path_buf();
        let list = match protection.kind {
            ProtectionKind::Deny => &mut masks,
            ProtectionKind::ReadOnly if protection.at_launch => &mut at_launch,
            ProtectionKind::ReadOnly => &mut read_only,
        };
        if !list.contains(&path) {
            list.push(path);
        }
    }
    let views = m
        .views
        .iter()
        .map(|v| {
            let source = match &v.content {
                Some(content) => ViewSource::Content(content.as_bytes().to_vec()),
                None => ViewSource::File(v.source.as_path().to_path_buf()),
            };
            (source, v.target.as_path().to_path_buf())
        })
        .collect();
    MountPlan {
        private_tmp: m.private_tmp.as_path().to_path_buf(),
        tmpfs,
        tmp_size: m.ceilings.tmp_size,
        make_dirs,
        fresh_sysfs: m.network == Network::BlockAll,
        private_terminals: true,
        carry: outermost,
        writable: writable_all,
        pin_roots: writable.iter().map(|p| p.to_path_buf()).collect(),
        read_only,
        at_launch,
        reopen: m
            .reopened
            .iter()
            .map(|p| p.as_path().to_path_buf())
            .collect(),
        masks,
        views,
        policy_document: m.policy_document.clone(),
        overlays: crate::overlay::overlays(manifest),
        history: m.history.as_ref().map(|h| h.as_path().to_path_buf()),
    }
}

/// The network namespace of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivateNetwork {
    /// The host's (a bootstrap started by hand with the host's network).
    None,
    /// Its own, with loopback up: `--block-net` and the egress proxy's runs.
    WithLoopback,
    /// Its own, with loopback up and the host's name servers' addresses on it: every TCP
    /// and netlink socket of the run is made in the host's namespace by the supervisor
    /// (the socket broker); the run's other IP sockets (UDP) stay here, where only the
    /// supervisor's name-resolution relay answers, on port 53 of those addresses.
    Brokered(Vec<std::net::IpAddr>),
}

/// Enters a new user namespace (mapping the caller's own uid and gid, so files keep their
/// owners), a new mount namespace, a new IPC namespace and, unless `private_network` is
/// [`PrivateNetwork::None`], a new network namespace (with loopback up for
/// [`PrivateNetwork::WithLoopback`]).
///
/// `entered`: the caller already entered them all ([`enter_ahead`], a private network
/// namespace included), so that only the network's set-up is left.
pub fn enter(private_network: &PrivateNetwork, entered: bool) -> Result<(), LinuxError> {
    if !entered {
        make(*private_network != PrivateNetwork::None)?;
    }
    match &private_network {
        PrivateNetwork::WithLoopback => {
            sys::loopback_up().map_err(loopback_error)?;
        }
        PrivateNetwork::Brokered(resolvers) => {
            sys::loopback_up().map_err(loopback_error)?;
            for &ip in resolvers {
                // The loopback network (127.0.0.0/8, ::1) is local already.
                if ip.is_loopback() {
                    continue;
                }
                sys::add_loopback_address(ip)
                    .map_err(|source| LinuxError::ResolverAddress { source })?;
            }
        }
        PrivateNetwork::None => {}
    }
    Ok(())
}

/// The namespaces of a run made before its policy is known: the user, mount and IPC
/// namespaces of [`enter`], and a private network namespace, which every run of a
/// supervisor gets ([`PrivateNetwork::WithLoopback`] or [`PrivateNetwork::Brokered`]).
/// Nothing is decided here: they stay empty until the mounts of the plan are applied.
/// A network namespace alone costs the kernel about a millisecond; the supervisor's
/// bootstrap makes them while the supervisor resolves the policy.
pub fn enter_ahead() -> Result<(), LinuxError> {
    make(true)
}

/// The user, mount and IPC namespaces, then, with `network`, a network namespace.
fn make(network: bool) -> Result<(), LinuxError> {
    new_user_namespace(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)?;
    if network {
        // Separately, so that a kernel without network namespaces is named as such.
        unshare(CloneFlags::CLONE_NEWNET).map_err(|source| {
            refused(
                "cannot create the sandbox's network namespace",
                NsStep::Unshare,
                source,
            )
            .unwrap_or(LinuxError::NetworkNamespace { source })
        })?;
    }
    Ok(())
}

/// Moves the caller into a new user namespace, mapping its own uid and gid (so files keep
/// their owners), and into the other new namespaces of `also`.
fn new_user_namespace(also: CloneFlags) -> Result<(), LinuxError> {
    let (uid, gid) = (getuid(), getgid());
    // A private IPC namespace too: System V IPC objects and POSIX message queues of the
    // host are out of reach.
    unshare(CloneFlags::CLONE_NEWUSER | also).map_err(|errno| LinuxError::UserNamespace {
        hint: userns_hint(NsStep::CreateUserNs, errno),
        errno,
    })?;
    // Ubuntu's AppArmor restriction lets unshare succeed and then denies what follows;
    // a permission error here is explained the same way as a failed unshare.
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|source| match source.raw_os_error() {
            Some(code) if code == libc::EPERM || code == libc::EACCES => {
                let errno = Errno::from_raw(code);
                LinuxError::UserNamespace {
                    hint: userns_hint(NsStep::MapIds, errno),
                    errno,
                }
            }
            _ => LinuxError::IdMap {
                file: file.to_owned(),
                source,
            },
        })
    };
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Lets process `pid` run on every CPU this process may use but the current one: a new
/// process starts on its parent's CPU, where it would wait until the parent sleeps (nothing
/// changes on a single CPU, or if the move is refused). The process gets back the CPUs
/// it may use with [`run_anywhere`] (given [`allowed_cpus`], read before it was started).
pub fn move_elsewhere(pid: nix::unistd::Pid) {
    use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
    let (Ok(allowed), Ok(here)) = (sched_getaffinity(pid), sched_getcpu()) else {
        return;
    };
    let mut elsewhere = CpuSet::new();
    let mut any = false;
    for cpu in (0..CpuSet::count()).filter(|&c| c != here) {
        if allowed.is_set(cpu).unwrap_or(false) && elsewhere.set(cpu).is_ok() {
            any = true;
        }
    }
    if any {
        let _ = sched_setaffinity(pid, &elsewhere);
    }
}

/// The CPUs this process may use.
pub fn allowed_cpus() -> Option<nix::sched::CpuSet> {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()
}

/// How many CPUs this process may run on (its affinity mask; at least 1): one system
/// call. `std::thread::available_parallelism` also looks for a CPU quota in the
/// process's cgroup, which on a cgroup v1 host means reading `/proc/self/cgroup`,
/// `/proc/self/mountinfo` and the quota files: 30 to 55 µs a call on the VM of
/// BENCHMARKS.md, where a launch asked twice (the walks before and after the run).
pub fn usable_cpus() -> usize {
    allowed_cpus()
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .count()
        })
        .unwrap_or(0)
        .max(1)
}

/// In the process [`move_elsewhere`] moved: lets it (and what it starts) use `allowed`
/// again.
pub fn run_anywhere(allowed: &nix::sched::CpuSet) -> nix::Result<()> {
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), allowed)
}

/// A namespace step refused (`EPERM`, `EACCES`) by a policy on namespaces, explained with
/// its cause and fix; `None` for any other failure.
pub(crate) fn refused(step: &'static str, kind: NsStep, source: Errno) -> Option<LinuxError> {
    matches!(source, Errno::EPERM | Errno::EACCES).then(|| LinuxError::NamespaceRefused {
        step,
        source,
        hint: userns_hint(kind, source),
    })
}

fn loopback_error(source: Errno) -> LinuxError {
    refused(
        "cannot bring up loopback in the private network namespace",
        NsStep::Network,
        source,
    )
    .unwrap_or(LinuxError::Loopback { source })
}

fn mount_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> LinuxError + 'a {
    move |source| mount_error(step, path, source)
}

/// A failed mount step. A refusal (`EPERM`, `EACCES`) of a mount itself is a policy on
/// namespaces (an LSM, a container runtime), explained with its cause and fix; a path
/// that cannot be opened or read is not.
pub(crate) fn mount_error(step: &'static str, path: &Path, source: Errno) -> LinuxError {
    let mounting = ["cannot mount", "cannot bind", "cannot make", "cannot pin"]
        .iter()
        .any(|p| step.starts_with(p));
    if mounting && matches!(source, Errno::EPERM | Errno::EACCES) {
        let kind = if step.contains("devpts") {
            NsStep::Devpts
        } else if step.contains("tmpfs") {
            NsStep::Tmpfs
        } else if step.contains("/proc") || step.contains("sysfs") {
            NsStep::Proc
        } else {
            NsStep::Bind
        };
        return LinuxError::MountRefused {
            step,
            path: path.to_path_buf(),
            source,
            hint: userns_hint(kind, source),
        };
    }
    LinuxError::Mount {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn open_path(path: &Path) -> Result<OwnedFd, LinuxError> {
    open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(mount_err("cannot open", path))
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn bind(source: &Path, target: &Path) -> Result<(), LinuxError> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(mount_err("cannot bind", target))
}

/// Makes one mount read-only. `mount_setattr` changes that attribute alone, so the flags
/// a user namespace may not clear (nosuid, nodev, noexec, atime) stay as they were.
fn make_read_only(target: &Path) -> Result<(), LinuxError> {
    sys::set_mount_read_only(target, true, false)
        .map_err(mount_err("cannot make read-only", target))
}

/// Mounts a tmpfs at `target`; `size`: its size in bytes (the kernel rounds it up to
/// whole pages), `None` for the kernel's default (read-only masks, which hold nothing).
fn tmpfs(target: &Path, mode: u32, read_only: bool, size: Option<u64>) -> Result<(), LinuxError> {
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if read_only {
        flags |= MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC;
    }
    let options = match size {
        Some(size) => format!("mode={mode:o},size={size}"),
        None => format!("mode={mode:o}"),
    };
    let options = CString::new(options).map_err(|_| LinuxError::Nul)?;
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags,
        Some(options.as_c_str()),
    )
    .map_err(mount_err("cannot mount tmpfs on", target))
}

fn is_dir(fd: &OwnedFd, path: &Path) -> Result<bool, LinuxError> {
    let st = fstat(fd).map_err(mount_err("cannot inspect", path))?;
    Ok(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
}

/// Creates an empty mount point for `target` (a directory or a file), with its parents.
fn make_mount_point(target: &Path, dir: bool) -> Result<(), LinuxError> {
    let io = |source: std::io::Error| LinuxError::MountPoint {
        path: target.to_path_buf(),
        source,
    };
    if let Some(parent) = target.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(io)?;
    }
    if dir {
        match std::fs::DirBuilder::new().mode(0o755).create(target) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(e)),
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)
            .map_err(io)?;
    }
    Ok(())
}

/// An empty file in the private /run that masked files are bound to. No Landlock rule
/// names it, so it is unreadable unless a grant covers the place it is mounted at (then it
/// reads as empty).
fn masked_file() -> PathBuf {
    PathBuf::from(RUN).join(".sandy-masked")
}

fn create_masked_file() -> Result<(), LinuxError> {
    write_read_only(&masked_file(), b"")
}

/// A directory (mode 0755) of Sandy's own on the private `/run`.
fn make_run_dir(dir: &Path) -> Result<(), LinuxError> {
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .map_err(|source| LinuxError::MountPoint {
            path: dir.to_path_buf(),
            source,
        })
}

/// Writes a file of Sandy's own on the private `/run`, mode 0444 (the root's read-only
/// remount below makes it read-only for everyone, with everything else).
fn write_read_only(path: &Path, content: &[u8]) -> Result<(), LinuxError> {
    let err = |source| LinuxError::MountPoint {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, content).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).map_err(err)
}

/// Where the copies of views that came with their content live: the private `/run`,
/// read-only inside like the rest of it.
const VIEW_COPIES: &str = "/run/.sandy-views";

/// Writes the sandbox's own policy on the private `/run`.
fn write_policy_document(document: &str) -> Result<(), LinuxError> {
    make_run_dir(Path::new(POLICY_DOCUMENT_DIR))?;
    write_read_only(Path::new(POLICY_DOCUMENT_PATH), document.as_bytes())
}

/// Performs the mount plan inside the new namespaces, with the cache overlays mounted
/// ahead where they can be used ([`crate::overlay::mount_all`]). Nothing here is visible
/// outside.
/// Whether the inherited terminal was bound onto `/dev/console` (then reopenable there,
/// with the rule [`crate::landlock::console_rule`]).
pub fn apply(
    plan: &MountPlan,
    premounted: &mut crate::overlay::Premounted,
) -> Result<bool, LinuxError> {
    let root = Path::new("/");
    mount(
        None::<&str>,
        root,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(mount_err("cannot make private", root))?;

    // The private /tmp is a tmpfs of the run's size (`--max-tmp`), mounted on the host's
    // per-run directory in this namespace only: /tmp and the directory's own name
    // (TMPDIR, a carried grant) both lead to it, and a run that fills it fills neither
    // the host's disk nor more than its ceiling.
    tmpfs(&plan.private_tmp, 0o700, false, Some(plan.tmp_size))?;
    // Hold what will be hidden before hiding it.
    let private_tmp = open_path(&plan.private_tmp)?;
    let mut carried = Vec::with_capacity(plan.carry.len());
    for path in &plan.carry {
        match open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => carried.push((fd, path)),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(mount_err("cannot open", path)(e)),
        }
    }

    // The project's history directory, held before anything hides Sandy's state (a
    // real directory, reached without a link at its own name).
    let history = match &plan.history {
        Some(dir) => Some(
            open(
                dir,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(mount_err("cannot open the history directory", dir))?,
        ),
        None => None,
    };
    // View sources may live under the host's /tmp, which is about to be hidden.
    let mut view_sources = Vec::with_capacity(plan.views.len());
    for (source, target) in &plan.views {
        if let ViewSource::File(source) = source {
            view_sources.push((open_path(source)?, target));
        }
    }

    // Paths that are already mounts of their own once the private directories are in
    // place: their write access can be restored without binding them onto themselves.
    let mut own_mounts: Vec<&Path> = Vec::with_capacity(plan.tmpfs.len() + plan.carry.len() + 1);
    for (target, mode) in &plan.tmpfs {
        if target.is_dir() {
            tmpfs(target, *mode, false, Some(plan.tmp_size))?;
            own_mounts.push(target);
        }
    }
    if plan.fresh_sysfs {
        let sys_dir = Path::new("/sys");
        mount(
            Some("sysfs"),
            sys_dir,
            Some("sysfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(mount_err("cannot mount a private sysfs on", sys_dir))?;
    }
    if !plan.masks.is_empty() {
        create_masked_file()?;
    }
    // Views whose content came in the manifest: files of the private `/run`, never of
    // the host.
    let mut copies_dir = false;
    for (i, (source, target)) in plan.views.iter().enumerate() {
        if let ViewSource::Content(content) = source {
            if !copies_dir {
                if !own_mounts.contains(&Path::new(RUN)) {
                    return Err(LinuxError::MountPoint {
                        path: PathBuf::from(RUN),
                        source: std::io::Error::other("no private /run to hold a view's copy"),
                    });
                }
                make_run_dir(Path::new(VIEW_COPIES))?;
                copies_dir = true;
            }
            let copy = Path::new(VIEW_COPIES).join(i.to_string());
            write_read_only(&copy, content)?;
            view_sources.push((open_path(&copy)?, target));
        }
    }
    for dir in &plan.make_dirs {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| LinuxError::MountPoint {
                path: dir.clone(),
                source,
            })?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    if let Some(document) = &plan.policy_document {
        write_policy_document(document)?;
    }
    // Python's start-up file for its history, on the private /run (never the host's).
    if history.is_some() && own_mounts.contains(&Path::new(RUN)) {
        if plan.policy_document.is_none() {
            make_run_dir(Path::new(POLICY_DOCUMENT_DIR))?;
        }
        write_read_only(
            Path::new(sandy_policy::history::PYTHON_STARTUP_PATH),
            sandy_policy::history::PYTHON_STARTUP.as_bytes(),
        )?;
    }
    bind(&fd_path(&private_tmp), Path::new(PRIVATE_TMP))?;
    own_mounts.push(Path::new(PRIVATE_TMP));
    for (fd, path) in &carried {
        make_mount_point(path, is_dir(fd, path)?)?;
        bind(&fd_path(fd), path)?;
        own_mounts.push(path);
    }
    // The history directory, in the private /tmp: a directory of its own, so that tools
    // that save by renaming a new file over the old one work.
    let history_inside = Path::new(sandy_policy::history::INSIDE);
    if let Some(fd) = &history {
        make_mount_point(history_inside, true)?;
        bind(&fd_path(fd), history_inside)?;
        own_mounts.push(history_inside);
    }
    let mut earlier = own_mounts.clone();
    if plan.fresh_sysfs {
        earlier.push(Path::new("/sys"));
    }
    crate::overlay::mount_all(&plan.overlays, premounted, &earlier)?;
    // Each overlay is a mount of its own at its cache's place (a writable grant).
    own_mounts.extend(plan.overlays.iter().map(|o| o.lower.as_path()));
    // Prepared copies over host files (each its own mount; a writable one is restored
    // below with the other writable grants).
    for (fd, target) in &view_sources {
        bind(&fd_path(fd), target)?;
        own_mounts.push(target);
    }

    // Read-only everywhere but the writable grants. Each writable directory or regular
    // file becomes its own mount first, so its write access can be restored; devices need
    // none (a read-only mount does not stop writes to a device).
    let mut writable = Vec::with_capacity(plan.writable.len());
    for path in &plan.writable {
        let fd = match open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(mount_err("cannot open", path)(e)),
        };
        let st = fstat(&fd).map_err(mount_err("cannot inspect", path))?;
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFDIR && kind != SFlag::S_IFREG {
            continue;
        }
        // A grant on a filesystem that is read-only on the host stays read-only: its
        // mount is locked that way in a user namespace, and nothing is lost.
        let host_read_only = statvfs(path)
            .map_err(mount_err("cannot inspect", path))?
            .flags()
            .contains(FsFlags::ST_RDONLY);
        if !host_read_only {
            if !own_mounts.contains(&path.as_path()) {
                bind(path, path)?;
            }
            writable.push(path);
        }
    }
    sys::set_mount_read_only(root, true, true).map_err(mount_err("cannot make read-only", root))?;
    // Only the writable mounts themselves, not what is mounted below them (a read-only
    // grant carried under /tmp stays read-only).
    for path in writable {
        sys::set_mount_read_only(path, false, false)
            .map_err(mount_err("cannot make writable", path))?;
    }
    if history.is_some() {
        sys::set_mount_read_only(history_inside, false, false)
            .map_err(mount_err("cannot make writable", history_inside))?;
    }

    let console = if plan.private_terminals {
        private_terminals()?
    } else {
        false
    };

    // Protections: computed now, in this namespace's view (the private directories are
    // in place), and applied with every component checked again without following links.
    let steps = protection_steps(plan, &RealFs).map_err(LinuxError::Unprotectable)?;
    for step in &steps {
        apply_protection(step)?;
    }
    Ok(console)
}

/// Where new terminals are made, and the inherited one is shown.
const DEV_PTS: &str = "/dev/pts";
const DEV_PTMX: &str = "/dev/ptmx";
const DEV_CONSOLE: &str = "/dev/console";

/// The inherited terminal (the first of stdin, stdout, stderr that is a host pty),
/// opened by its name in this mount namespace, before `/dev/pts` is replaced.
fn hold_inherited_terminal() -> Option<OwnedFd> {
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let held = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()]
        .into_iter()
        .find_map(|borrowed| {
            if !nix::unistd::isatty(borrowed).unwrap_or(false) {
                return None;
            }
            let name =
                std::fs::read_link(format!("/proc/self/fd/{}", borrowed.as_raw_fd())).ok()?;
            if !name.starts_with(DEV_PTS) {
                return None;
            }
            let held = open(
                &name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            let (a, b) = (fstat(borrowed).ok()?, fstat(&held).ok()?);
            (a.st_rdev == b.st_rdev && a.st_ino == b.st_ino && a.st_dev == b.st_dev).then_some(held)
        });
    held
}

/// A private devpts instance at `/dev/pts` (`newinstance`, `ptmxmode=0666`) and
/// `/dev/ptmx` leading to it: the sandbox can allocate new terminals (`script`, Python's
/// `pty`, tmux, node-pty), and no host pty is reachable by name. The inherited terminal
/// keeps working through its open descriptors and `/dev/tty`; it is bound onto
/// `/dev/console` so that glibc's `ttyname`, which scans `/dev` when the name it read is
/// not the same terminal, still names it.
fn private_terminals() -> Result<bool, LinuxError> {
    let pts = Path::new(DEV_PTS);
    if !pts.is_dir() {
        return Ok(false);
    }
    let held = hold_inherited_terminal();
    mount(
        Some("devpts"),
        pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(mount_err("cannot mount a private devpts on", pts))?;
    let ptmx = Path::new(DEV_PTMX);
    // A /dev/ptmx that is a symlink (to pts/ptmx) leads to the new instance already.
    if std::fs::symlink_metadata(ptmx).is_ok_and(|m| !m.file_type().is_symlink()) {
        bind(&pts.join("ptmx"), ptmx)?;
    }
    let console = Path::new(DEV_CONSOLE);
    if let Some(held) = held {
        if std::fs::symlink_metadata(console).is_ok_and(|m| !m.file_type().is_symlink()) {
            bind(&fd_path(&held), console)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// The type of the object at `path` itself (a final symlink not followed), with a
/// descriptor that keeps designating it.
fn open_nofollow(path: &Path) -> Result<(OwnedFd, SFlag), LinuxError> {
    let fd = open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| LinuxError::LayoutChanged {
        path: path.to_path_buf(),
        found: format!("cannot be opened ({})", source.desc()),
    })?;
    let st = fstat(&fd).map_err(mount_err("cannot inspect", path))?;
    Ok((fd, SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT))
}

fn changed(path: &Path, found: &str) -> LinuxError {
    LinuxError::LayoutChanged {
        path: path.to_path_buf(),
        found: found.to_owned(),
    }
}

/// Performs one protection mount. The component's type is checked on a descriptor
/// opened without following a final link, and the mount is made through that descriptor,
/// so what is mounted is what was checked; a layout that changed since the walk fails
/// closed.
fn apply_protection(step: &ProtectionStep) -> Result<(), LinuxError> {
    match step {
        ProtectionStep::PinDirectory(path) => {
            let (fd, kind) = open_nofollow(path)?;
            if kind != SFlag::S_IFDIR {
                return Err(changed(path, "is no longer a directory"));
            }
            bind(&fd_path(&fd), &fd_path(&fd))
        }
        ProtectionStep::PinSymlink { path, target } => {
            let (fd, kind) = open_nofollow(path)?;
            if kind != SFlag::S_IFLNK {
                return Err(changed(path, "is no longer a symbolic link"));
            }
            let now = readlinkat(&fd, Path::new("")).map_err(mount_err("cannot read", path))?;
            if Path::new(&now) != target {
                return Err(changed(path, "now points elsewhere"));
            }
            sys::mount::pin_symlink(fd.as_fd())
                .map_err(mount_err("cannot pin the symbolic link", path))
        }
        ProtectionStep::ReadOnly(path) => {
            let (fd, kind) = open_nofollow(path)?;
            if kind == SFlag::S_IFLNK {
                return Err(changed(path, "is now a symbolic link"));
            }
            // Everything below a read-only object is read-only too, pins of other names
            // included.
            sys::mount::bind_read_only(fd.as_fd()).map_err(mount_err("cannot make read-only", path))
        }
        ProtectionStep::AtLaunchPin(path) => {
            let Ok((fd, kind)) = open_nofollow(path) else {
                return Ok(());
            };
            match kind {
                SFlag::S_IFDIR => bind(&fd_path(&fd), &fd_path(&fd)),
                SFlag::S_IFLNK => sys::mount::pin_symlink(fd.as_fd())
                    .map_err(mount_err("cannot pin the symbolic link", path)),
                _ => Ok(()),
            }
        }
        ProtectionStep::Reopen(path) => match open_nofollow(path) {
            Ok((fd, SFlag::S_IFDIR)) => sys::mount::bind_writable(fd.as_fd())
                .map_err(mount_err("cannot make writable again", path)),
            _ => Ok(()),
        },
        ProtectionStep::AtLaunch(path) => {
            let Ok((fd, kind)) = open_nofollow(path) else {
                return Ok(());
            };
            if kind == SFlag::S_IFLNK {
                sys::mount::pin_symlink(fd.as_fd())
                    .map_err(mount_err("cannot pin the symbolic link", path))
            } else {
                sys::mount::bind_read_only(fd.as_fd())
                    .map_err(mount_err("cannot make read-only", path))
            }
        }
        ProtectionStep::Mask(path) => {
            let (fd, kind) = open_nofollow(path)?;
            match kind {
                SFlag::S_IFLNK => Err(changed(path, "is now a symbolic link")),
                SFlag::S_IFDIR => tmpfs(&fd_path(&fd), 0o555, true, None),
                _ => {
                    bind(&masked_file(), &fd_path(&fd))?;
                    make_read_only(path)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_cpus_counts_the_affinity_mask() {
        let n = usable_cpus();
        assert!(n >= 1);
        // The standard library's answer is the mask's count, lowered by a CPU quota.
        let std_n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(n >= std_n, "{n} < {std_n}");
        let mask = allowed_cpus().unwrap();
        assert!(mask.is_set(nix::sched::sched_getcpu().unwrap()).unwrap());
    }

    #[test]
    fn only_a_refusal_is_explained_as_a_policy_on_namespaces() {
        assert!(refused("step", NsStep::Unshare, Errno::ENOMEM).is_none());
        let e = refused(
            "cannot create the sandbox's PID namespace",
            NsStep::Unshare,
            Errno::EPERM,
        )
        .unwrap();
        let text = e.to_string();
        assert!(
            text.starts_with(
                "cannot create the sandbox's PID namespace: Operation not permitted: "
            ),
            "{text}"
        );
        assert!(text.contains("; fix: "), "{text}");
        let m = mount_error("cannot inspect", Path::new("/x"), Errno::EACCES);
        assert!(matches!(m, LinuxError::Mount { .. }), "{m}");
        let m = mount_error(
            "cannot mount a private devpts on",
            Path::new("/dev/pts"),
            Errno::EPERM,
        );
        assert!(matches!(m, LinuxError::MountRefused { .. }), "{m}");
    }
    use sandy_policy::{
        LaunchManifest, ManifestGrant, ManifestProtection, MANIFEST_SCHEMA_VERSION,
    };

    fn grant(path: &str, access: Access) -> ManifestGrant {
        ManifestGrant {
            path: path.into(),
            access,
            scope: Scope::Subtree,
        }
    }

    #[test]
    fn plan_carries_hidden_grants_and_binds_ancestors_of_protections() {
        let manifest = ValidatedManifest::new(LaunchManifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            supervisor_pid: 1,
            program: "/usr/bin/git".into(),
            argv: vec!["git".into()],
            working_directory: "/tmp/w/proj".into(),
            environment: vec![],
            file_grants: vec![
                grant("/usr", Access::ReadExec),
                grant("/tmp", Access::ReadWrite),
                grant("/dev/shm", Access::ReadWrite),
                grant("/tmp/w/proj", Access::ReadWrite),
                grant("/tmp/w/proj/sub", Access::Read),
                grant("/run/systemd/resolve/stub-resolv.conf", Access::Read),
                grant("/run/user/1000", Access::ReadWrite),
            ],
            protections: vec![
                ManifestProtection {
                    path: "/home/u/.ssh".into(),
                    kind: ProtectionKind::Deny,
                    at_launch: false,
                },
                ManifestProtection {
                    path: "/tmp/w/proj/.git/hooks".into(),
                    kind: ProtectionKind::ReadOnly,
                    at_launch: false,
                },
                ManifestProtection {
                    path: "/tmp/w/proj/.git/config".into(),
                    kind: ProtectionKind::ReadOnly,
                    at_launch: false,
                },
                ManifestProtection {
                    path: "/home/u/.codex/.env".into(),
                    kind: ProtectionKind::ReadOnly,
                    at_launch: true,
                },
            ],
            private_tmp: "/tmp/sandy-1".into(),
            runtime_dir: Some("/run/user/1000".into()),
            network: Network::AllowAll,
            local_ports: vec![],
            resolvers: vec![],
            proxy_port: None,
            restore_default_signals: vec![],
            views: vec![],
            policy_document: None,
            overlays: vec![],
            reopened: vec![],
            history: Some("/home/u/.local/state/sandy/history/proj-0123".into()),
            ceilings: sandy_policy::ManifestCeilings {
                nproc: None,
                file_size: 1 << 30,
                tmp_size: 1 << 30,
                oom_score_adj: 500,
            },
            tier: Default::default(),
        })
        .unwrap();
        assert_eq!(
            mount_plan(&manifest),
            MountPlan {
                private_tmp: "/tmp/sandy-1".into(),
                tmp_size: 1 << 30,
                tmpfs: vec![
                    ("/var/tmp".into(), 0o1777),
                    ("/run".into(), 0o755),
                    ("/dev/shm".into(), 0o1777)
                ],
                make_dirs: vec!["/run/user/1000".into()],
                fresh_sysfs: false,
                private_terminals: true,
                carry: vec![
                    "/run/systemd/resolve/stub-resolv.conf".into(),
                    "/tmp/w/proj".into(),
                ],
                writable: vec![
                    "/tmp".into(),
                    "/dev/shm".into(),
                    "/tmp/w/proj".into(),
                    "/run/user/1000".into(),
                ],
                pin_roots: vec![
                    "/tmp".into(),
                    "/dev/shm".into(),
                    "/tmp/w/proj".into(),
                    "/run/user/1000".into(),
                ],
                read_only: vec![
                    "/tmp/w/proj/.git/hooks".into(),
                    "/tmp/w/proj/.git/config".into(),
                ],
                at_launch: vec!["/home/u/.codex/.env".into()],
                reopen: vec![],
                masks: vec!["/home/u/.ssh".into()],
                views: vec![],
                policy_document: None,
                overlays: vec![],
                // The project's history directory, bound at /tmp/.sandy-history by apply.
                history: Some("/home/u/.local/state/sandy/history/proj-0123".into()),
            }
        );
    }

    /// A fake filesystem for the protection walk: directories and links by path.
    struct Fake(Vec<(&'static str, Option<&'static str>)>);

    impl PathInspector for Fake {
        fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
            Ok(p.to_path_buf())
        }
        fn kind(&self, p: &Path) -> Option<sandy_policy::FileKind> {
            self.0
                .iter()
                .find(|(q, l)| Path::new(q) == p && l.is_none())
                .map(|_| sandy_policy::FileKind::Directory)
        }
        fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
            None
        }
        fn read_link(&self, p: &Path) -> Option<PathBuf> {
            self.0
                .iter()
                .find(|(q, _)| Path::new(q) == p)
                .and_then(|(_, l)| l.map(PathBuf::from))
        }
        fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
        fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
    }

    #[test]
    fn protection_steps_pin_names_outermost_first_then_protect_objects() {
        let plan = MountPlan {
            private_tmp: "/tmp/sandy-1".into(),
            tmpfs: vec![("/run".into(), 0o755)],
            tmp_size: 1 << 30,
            make_dirs: vec![],
            fresh_sysfs: false,
            private_terminals: true,
            carry: vec![],
            writable: vec!["/p".into(), "/h/.claude".into()],
            pin_roots: vec!["/p".into(), "/h/.claude".into()],
            read_only: vec![
                "/p/.git/hooks".into(),
                "/p/.git/config".into(),
                "/h/.claude/settings.json".into(),
            ],
            // Taken at launch from the state directory: one also protected strictly, one
            // that leads through a link, one whose link leads nowhere now, one in a loop.
            at_launch: vec![
                "/h/.claude/settings.json".into(),
                "/h/.claude/rules".into(),
                "/h/.claude/agents/x".into(),
                "/h/.claude/gone".into(),
                "/h/.claude/loop".into(),
            ],
            reopen: vec!["/h/.claude/projects/-p".into()],
            masks: vec!["/h/.ssh".into(), "/tmp/home/.ssh".into()],
            views: vec![],
            policy_document: None,
            overlays: vec![],
            history: None,
        };
        let fs = Fake(vec![
            ("/p", None),
            ("/p/.git", None),
            ("/p/.git/hooks", Some("../githooks")),
            ("/p/githooks", None),
            ("/p/.git/config", None),
            ("/h", None),
            ("/h/.claude", None),
            (
                "/h/.claude/settings.json",
                Some("/h/dotfiles/claude/settings.json"),
            ),
            ("/h/dotfiles", None),
            ("/h/dotfiles/claude", None),
            ("/h/dotfiles/claude/settings.json", None),
            ("/h/.ssh", Some("/h/vault/ssh")),
            ("/h/vault", None),
            ("/h/vault/ssh", None),
            ("/h/.claude/rules", None),
            ("/h/.claude/agents", Some("/p/agents")),
            ("/p/agents", None),
            ("/p/agents/x", None),
            ("/h/.claude/gone", Some("/h/nowhere")),
            ("/h/.claude/loop", Some("/h/.claude/loop")),
        ]);
        assert_eq!(
            protection_steps(&plan, &fs).unwrap(),
            vec![
                ProtectionStep::PinDirectory("/p/.git".into()),
                ProtectionStep::AtLaunchPin("/p/agents".into()),
                ProtectionStep::PinSymlink {
                    path: "/p/.git/hooks".into(),
                    target: "../githooks".into()
                },
                ProtectionStep::PinSymlink {
                    path: "/h/.claude/settings.json".into(),
                    target: "/h/dotfiles/claude/settings.json".into()
                },
                ProtectionStep::AtLaunchPin("/h/.claude/agents".into()),
                ProtectionStep::ReadOnly("/p/githooks".into()),
                ProtectionStep::ReadOnly("/p/.git/config".into()),
                ProtectionStep::AtLaunch("/h/.claude/rules".into()),
                ProtectionStep::AtLaunch("/p/agents/x".into()),
                ProtectionStep::AtLaunch("/h/.claude/gone".into()),
                ProtectionStep::AtLaunch("/h/.claude/loop".into()),
                ProtectionStep::ReadOnly("/h/dotfiles/claude/settings.json".into()),
                ProtectionStep::Reopen("/h/.claude/projects/-p".into()),
                ProtectionStep::Mask("/h/vault/ssh".into()),
            ]
        );
        // A strictly protected name in a loop stops the launch.
        let looped = Fake(vec![("/p", None), ("/p/.git", Some("/p/.git"))]);
        let err = protection_steps(&plan, &looped).unwrap_err();
        assert!(err.to_string().contains("symbolic links"), "{err}");
    }
}
