//! [`restrict`]: the layers that need no namespace, applied to the calling process, for
//! code that cannot start its work through a [`Command`](crate::Command).

use std::path::{Path, PathBuf};

use sandy_linux::landlock::{rule, PathRule};
use sandy_policy::Access;

use crate::error::SandyError;

/// What the calling process keeps once [`restrict`] confines it: the paths it may still
/// read, write or run, and whether it keeps the network.
///
/// Nothing else of the file system stays reachable, not even `/usr`:
/// [`Restrictions::system`] adds what programs need to run (the system's programs,
/// libraries and configuration, read-only, and the harmless devices).
///
/// ```
/// let r = sandy::Restrictions::new()
///     .system()
///     .read_write("/tmp/work")
///     .block_net();
/// assert!(r.blocks_net());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Restrictions {
    grants: Vec<(PathBuf, Access)>,
    block_net: bool,
}

/// The system's read-only and runnable trees that [`Restrictions::system`] adds.
const SYSTEM_TREES: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt",
];

/// The devices [`Restrictions::system`] opens for reading and writing.
const SYSTEM_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

impl Restrictions {
    /// Nothing granted: the process keeps only what it already has open.
    pub fn new() -> Restrictions {
        Restrictions::default()
    }

    /// Adds the system's programs, libraries and configuration (`/usr`, `/bin`, `/lib`,
    /// `/etc`, `/opt`, ...) read-only and runnable, and `/dev/null`, `/dev/zero`,
    /// `/dev/full`, `/dev/random`, `/dev/urandom` and `/dev/tty` readable and writable.
    pub fn system(mut self) -> Restrictions {
        for tree in SYSTEM_TREES {
            self.grants.push((PathBuf::from(tree), Access::ReadExec));
        }
        for device in SYSTEM_DEVICES {
            self.grants.push((PathBuf::from(device), Access::ReadWrite));
        }
        self
    }

    /// Grants reading `path` (a directory: its whole subtree).
    pub fn read(mut self, path: impl Into<PathBuf>) -> Restrictions {
        self.grants.push((path.into(), Access::Read));
        self
    }

    /// Grants reading and writing `path`.
    pub fn read_write(mut self, path: impl Into<PathBuf>) -> Restrictions {
        self.grants.push((path.into(), Access::ReadWrite));
        self
    }

    /// Grants running the programs under `path`, without reading it otherwise.
    pub fn execute(mut self, path: impl Into<PathBuf>) -> Restrictions {
        self.grants.push((path.into(), Access::Execute));
        self
    }

    /// Refuses every TCP connect and bind (Landlock) and every IPv4 and IPv6 socket
    /// (seccomp). Without it the process keeps the host's network: there is no network
    /// namespace to give it a private one.
    pub fn block_net(mut self) -> Restrictions {
        self.block_net = true;
        self
    }

    /// Whether [`Restrictions::block_net`] was asked for.
    pub fn blocks_net(&self) -> bool {
        self.block_net
    }

    /// The Landlock rules: each grant's path as it is now (links resolved, so that a
    /// grant is the file it names); a path that does not exist grants nothing.
    fn rules(&self) -> Result<Vec<PathRule>, SandyError> {
        let mut rules = Vec::new();
        for (path, access) in &self.grants {
            let real = match crate::hostfs::canonicalize(path) {
                Ok(real) => real,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(SandyError::File {
                        step: "cannot resolve the grant",
                        path: path.clone(),
                        source,
                    })
                }
            };
            let directory = is_dir(&real);
            rules.push(rule(real, *access, directory));
        }
        Ok(rules)
    }
}

/// Whether `path` (links resolved already) is a directory.
fn is_dir(path: &Path) -> bool {
    crate::hostfs::Dir::open(path).is_ok()
}

/// Confines the calling process, for good: `no_new_privs`, no capabilities (even as
/// root), Landlock limited to `restrictions`' grants (with signals and abstract Unix
/// sockets scoped to the process itself), the seccomp floor of a Sandy run, and with
/// [`Restrictions::block_net`] no network. Everything the process starts afterwards
/// inherits all of it.
///
/// Call it before the process starts any thread: a process with several threads is
/// refused, since the others would stay unconfined.
///
/// # What this keeps and what it cannot
///
/// These promises of a `sandy run` hold: the file-system grants (reads, writes, runs),
/// no privilege gained through `setuid` programs or file capabilities, no escape
/// through the system calls seccomp's floor refuses, no signal or `ptrace` to processes
/// outside, and a blocked network when asked for.
///
/// These need namespaces or a supervisor, and are **not** kept:
/// - paths hidden inside a grant (`~/.ssh` under a granted home, a project's `.env`)
///   and protected paths kept read-only inside a writable grant (git's hooks and
///   configuration, the agent's settings): a mount namespace does that;
/// - a private `/tmp`, `/dev/shm` and process list, and `/proc` limited to the run's
///   own processes (a mount and a PID namespace);
/// - a private network with only an allowlist through Sandy's proxy, and the host's own
///   services closed (a network namespace and the supervisor's socket broker);
/// - the checks after the run, the refusal report, the agent's state merge, the
///   environment's credentials withheld, and the ceilings' cgroup (the supervisor).
///
/// # Errors
///
/// A grant that cannot be resolved, a kernel without Landlock or seccomp, a process
/// with several threads: nothing is applied then, unless the failure comes after
/// `no_new_privs` was set (which only takes rights away).
///
/// ```no_run
/// sandy::restrict(&sandy::Restrictions::new().system().read(".").block_net())?;
/// // From here on, this process reads the working directory and the system only.
/// # Ok::<(), sandy::Error>(())
/// ```
pub fn restrict(restrictions: &Restrictions) -> Result<(), SandyError> {
    let rules = restrictions.rules()?;
    sandy_linux::restrict_current_process(&rules, restrictions.block_net)
        .map_err(|e| SandyError::Launch(sandy_linux::ExecFailure::Setup(e)))
}
