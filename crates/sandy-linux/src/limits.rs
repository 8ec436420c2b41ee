//! The resource ceilings the sandbox's own processes carry (design section 3.8): the
//! file-size limit, the process limit when no cgroup holds it, and the OOM killer's
//! preference for the run. Applied by the target before it drops its capabilities and
//! inherited by everything it starts. (The cgroup, when there is one, is the
//! supervisor's; the size of the private tmpfs mounts is the mount layer's.)

use nix::sys::resource::{setrlimit, Resource};
use sandy_policy::ManifestCeilings;

use crate::error::LinuxError;

/// Applies `ceilings` to the calling process (the target, before `execve`).
///
/// `RLIMIT_FSIZE`: a write past it fails (`EFBIG`) and the process gets `SIGXFSZ`.
/// `RLIMIT_NPROC` (only when no cgroup holds the process ceiling): the kernel counts it
/// per user in each user namespace, so it bounds the run's processes and threads, not
/// the user's others outside; it exempts uid 0 (which is why, as root, a cgroup's
/// `pids.max` is what holds the ceiling). Both the soft and the hard limit are set, so
/// nothing inside can raise them.
pub fn apply(ceilings: &ManifestCeilings) -> Result<(), LinuxError> {
    let err = |step| move |source| LinuxError::Ceiling { step, source };
    setrlimit(
        Resource::RLIMIT_FSIZE,
        ceilings.file_size,
        ceilings.file_size,
    )
    .map_err(err("cannot set the file-size ceiling (RLIMIT_FSIZE)"))?;
    if let Some(nproc) = ceilings.nproc {
        setrlimit(Resource::RLIMIT_NPROC, nproc, nproc)
            .map_err(err("cannot set the process ceiling (RLIMIT_NPROC)"))?;
    }
    prefer_for_oom(ceilings.oom_score_adj)
}

/// Raises this process's `oom_score_adj` to `adj` (never lowers it: a value the user
/// set higher stays), so that the OOM killer picks the run's processes before the
/// host's. `/proc` is the sandbox's own here (mounted by the target).
///
/// The target is not dumpable yet (it inherited that from the bootstrap), so its
/// `/proc/self` files belong to root, out of reach of an unprivileged user: it is made
/// dumpable for the write. Nothing else of the run exists yet but the init, and
/// `execve` makes the target dumpable anyway.
fn prefer_for_oom(adj: i32) -> Result<(), LinuxError> {
    let made = nix::sys::prctl::set_dumpable(true);
    let written = write_oom_score_adj(adj);
    if made.is_ok() {
        let _ = nix::sys::prctl::set_dumpable(false);
    }
    written
}

#[allow(clippy::disallowed_methods)] // procfs of this process
fn write_oom_score_adj(adj: i32) -> Result<(), LinuxError> {
    let file = "/proc/self/oom_score_adj";
    let err = |source: std::io::Error| LinuxError::Ceiling {
        step: "cannot raise the OOM killer's preference for the run (oom_score_adj)",
        source: nix::errno::Errno::from_raw(source.raw_os_error().unwrap_or(libc::EIO)),
    };
    let current: i32 = std::fs::read_to_string(file)
        .map_err(err)?
        .trim()
        .parse()
        .unwrap_or(i32::MIN);
    if current >= adj {
        return Ok(());
    }
    std::fs::write(file, adj.to_string()).map_err(err)
}
