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
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{getgid, getuid};
use sandy_policy::{
    Access, Network, ProtectionKind, Scope, ValidatedManifest, PRIVATE_SHM, PRIVATE_TMP,
    PRIVATE_VAR_TMP,
};

use crate::error::LinuxError;
use crate::probe::userns_hint;
use crate::sys;

/// Directories replaced inside the sandbox by something private and empty.
const RUN: &str = "/run";

/// Every mount the sandbox gets, as data. Applied in field order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// The host's private per-run directory, mounted at `/tmp`.
    pub private_tmp: PathBuf,
    /// Empty private tmpfs mounts, with their mode.
    pub tmpfs: Vec<(PathBuf, u32)>,
    /// Directories created inside those tmpfs mounts (the runtime directory), mode 0700.
    pub make_dirs: Vec<PathBuf>,
    /// A fresh sysfs at `/sys` for the private network namespace, so that the host's
    /// interfaces (names, addresses, counters) are not listed there.
    pub fresh_sysfs: bool,
    /// Granted paths that lie under a replaced directory, mounted back at the same place.
    pub carry: Vec<PathBuf>,
    /// Everything else is remounted read-only, so that metadata changes (chmod, chown,
    /// utimes, xattrs), which Landlock does not govern, fail outside these writable
    /// grants.
    pub writable: Vec<PathBuf>,
    /// Ancestors of protected paths inside writable trees, bound onto themselves so that
    /// they cannot be renamed or removed.
    pub self_binds: Vec<PathBuf>,
    /// Read-only protected paths.
    pub read_only: Vec<PathBuf>,
    /// Denied paths, covered by an empty read-only mount.
    pub masks: Vec<PathBuf>,
    /// Prepared copies bound over host files: (source, target). A writable one is also a
    /// read-write exact grant, so it is listed in `writable` too.
    pub views: Vec<(PathBuf, PathBuf)>,
    /// Copy-on-write tool caches ([`crate::overlay`]), mounted before the views.
    pub overlays: Vec<crate::overlay::CacheOverlay>,
}

impl MountPlan {
    /// Whether `path` lies under a directory the sandbox replaces.
    pub fn hides(&self, path: &Path) -> bool {
        path.starts_with(PRIVATE_TMP) || self.tmpfs.iter().any(|(t, _)| path.starts_with(t))
    }
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
    let private: Vec<PathBuf> = hidden.iter().chain(make_dirs.iter()).cloned().collect();

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
    let mut self_binds = Vec::new();
    let mut read_only = Vec::new();
    let mut masks = Vec::new();
    for protection in &m.protections {
        let path = protection.path.as_path().to_path_buf();
        match protection.kind {
            ProtectionKind::Deny => masks.push(path),
            ProtectionKind::ReadOnly => {
                let root = writable
                    .iter()
                    .filter(|w| path.starts_with(w) && path != **w)
                    .max_by_key(|w| w.as_os_str().len());
                if let Some(root) = root {
                    let mut ancestors: Vec<PathBuf> = path
                        .ancestors()
                        .skip(1)
                        .take_while(|a| a.starts_with(root))
                        .map(Path::to_path_buf)
                        .collect();
                    ancestors.reverse();
                    for a in ancestors {
                        if !self_binds.contains(&a) {
                            self_binds.push(a);
                        }
                    }
                }
                read_only.push(path);
            }
        }
    }
    let views = m
        .views
        .iter()
        .map(|v| {
            (
                v.source.as_path().to_path_buf(),
                v.target.as_path().to_path_buf(),
            )
        })
        .collect();
    MountPlan {
        private_tmp: m.private_tmp.as_path().to_path_buf(),
        tmpfs,
        make_dirs,
        fresh_sysfs: m.network == Network::BlockAll,
        carry: outermost,
        writable: writable_all,
        self_binds,
        read_only,
        masks,
        views,
        overlays: crate::overlay::overlays(manifest),
    }
}

/// Enters a new user namespace (mapping the caller's own uid and gid, so files keep their
/// owners), a new mount namespace and, when the network is blocked, a new network
/// namespace whose only interface is loopback.
pub fn enter(network: Network) -> Result<(), LinuxError> {
    let (uid, gid) = (getuid(), getgid());
    // A private IPC namespace too: System V IPC objects and POSIX message queues of the
    // host are out of reach.
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC)
        .map_err(|errno| LinuxError::UserNamespace {
            hint: userns_hint(errno),
            errno,
        })?;
    // Ubuntu's AppArmor restriction lets unshare succeed and then denies what follows;
    // a permission error here is explained the same way as a failed unshare.
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|source| match source.raw_os_error() {
            Some(code) if code == libc::EPERM || code == libc::EACCES => {
                let errno = Errno::from_raw(code);
                LinuxError::UserNamespace {
                    hint: userns_hint(errno),
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
    if network == Network::BlockAll {
        // Separately, so that a kernel without network namespaces is named as such.
        unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|source| LinuxError::NetworkNamespace { source })?;
        sys::loopback_up().map_err(|source| LinuxError::Loopback { source })?;
    }
    Ok(())
}

fn mount_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> LinuxError + 'a {
    move |source| LinuxError::Mount {
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

fn tmpfs(target: &Path, mode: u32, read_only: bool) -> Result<(), LinuxError> {
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if read_only {
        flags |= MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC;
    }
    let options = CString::new(format!("mode={mode:o}")).map_err(|_| LinuxError::Nul)?;
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
    let path = masked_file();
    std::fs::write(&path, b"").map_err(|source| LinuxError::MountPoint {
        path: path.clone(),
        source,
    })?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).map_err(|source| {
        LinuxError::MountPoint {
            path: path.clone(),
            source,
        }
    })
}

/// Performs the mount plan inside the new namespaces. Nothing here is visible outside.
pub fn apply(plan: &MountPlan) -> Result<(), LinuxError> {
    let root = Path::new("/");
    mount(
        None::<&str>,
        root,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(mount_err("cannot make private", root))?;

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

    // View sources may live under the host's /tmp, which is about to be hidden.
    let mut view_sources = Vec::with_capacity(plan.views.len());
    for (source, target) in &plan.views {
        view_sources.push((open_path(source)?, target));
    }

    // Paths that are already mounts of their own once the private directories are in
    // place: their write access can be restored without binding them onto themselves.
    let mut own_mounts: Vec<&Path> = Vec::with_capacity(plan.tmpfs.len() + plan.carry.len() + 1);
    for (target, mode) in &plan.tmpfs {
        if target.is_dir() {
            tmpfs(target, *mode, false)?;
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
    bind(&fd_path(&private_tmp), Path::new(PRIVATE_TMP))?;
    own_mounts.push(Path::new(PRIVATE_TMP));
    for (fd, path) in &carried {
        make_mount_point(path, is_dir(fd, path)?)?;
        bind(&fd_path(fd), path)?;
        own_mounts.push(path);
    }
    crate::overlay::mount_all(&plan.overlays)?;
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

    for path in &plan.self_binds {
        bind(path, path)?;
    }
    for path in &plan.read_only {
        bind(path, path)?;
        make_read_only(path)?;
    }
    for path in &plan.masks {
        // A sensitive path under a replaced directory (a home in /tmp) is not there to
        // mask unless a grant carried it through.
        let fd = match open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if plan.hides(path) => continue,
            Err(e) => return Err(mount_err("cannot open", path)(e)),
        };
        if is_dir(&fd, path)? {
            tmpfs(path, 0o555, true)?;
        } else {
            bind(&masked_file(), path)?;
            make_read_only(path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
                },
                ManifestProtection {
                    path: "/tmp/w/proj/.git/hooks".into(),
                    kind: ProtectionKind::ReadOnly,
                },
                ManifestProtection {
                    path: "/tmp/w/proj/.git/config".into(),
                    kind: ProtectionKind::ReadOnly,
                },
            ],
            private_tmp: "/tmp/sandy-1".into(),
            runtime_dir: Some("/run/user/1000".into()),
            network: Network::AllowAll,
            local_ports: vec![],
            restore_default_signals: vec![],
            views: vec![],
            overlays: vec![],
        })
        .unwrap();
        assert_eq!(
            mount_plan(&manifest),
            MountPlan {
                private_tmp: "/tmp/sandy-1".into(),
                tmpfs: vec![
                    ("/var/tmp".into(), 0o1777),
                    ("/run".into(), 0o755),
                    ("/dev/shm".into(), 0o1777)
                ],
                make_dirs: vec!["/run/user/1000".into()],
                fresh_sysfs: false,
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
                self_binds: vec!["/tmp/w/proj".into(), "/tmp/w/proj/.git".into()],
                read_only: vec![
                    "/tmp/w/proj/.git/hooks".into(),
                    "/tmp/w/proj/.git/config".into(),
                ],
                masks: vec!["/home/u/.ssh".into()],
                views: vec![],
                overlays: vec![],
            }
        );
    }
}
