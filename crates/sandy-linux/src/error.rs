use std::path::PathBuf;

/// Why the kernel cannot enforce what the manifest asks for. Decided before any
/// irreversible step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    #[error(
        "Landlock is not available on this kernel ({reason}); Sandy needs Landlock ABI {required} (Linux 6.12 or newer) with the 'landlock' LSM enabled"
    )]
    LandlockUnavailable { reason: String, required: u32 },
    #[error(
        "Landlock ABI {found} is too old: {needed_for} needs ABI {required} (Linux 6.12 or newer)"
    )]
    LandlockTooOld {
        found: u32,
        required: u32,
        needed_for: &'static str,
    },
    #[error("seccomp filters are not available on this kernel")]
    SeccompUnavailable,
    #[error(
        "cannot create a user namespace: {}; fix: {}",
        crate::reach::Cause::UsernsDisabled.line(),
        crate::reach::Cause::UsernsDisabled.fix(std::path::Path::new("sandy"))
    )]
    UserNamespacesDisabled,
    #[error("unsupported architecture for the seccomp floor")]
    UnsupportedArch,
    #[error("cannot compile the seccomp filter: {reason}")]
    Seccomp { reason: String },
}

/// A failed step of the launch sequence. Each variant names the step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinuxError {
    #[error(
        "the bootstrap was prepared for the {prepared} tier but the manifest asks for the \
         {manifest} tier"
    )]
    TierMismatch {
        prepared: &'static str,
        manifest: &'static str,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("the bootstrap is not single-threaded ({threads} threads); refusing to sandbox")]
    MultiThreaded { threads: usize },
    #[error("cannot read the thread count: {source}")]
    ThreadCount { source: std::io::Error },
    #[error("cannot set the parent-death signal: {source}")]
    ParentDeathSignal { source: nix::Error },
    #[error("the supervisor (pid {expected}) is gone; not starting the target")]
    SupervisorGone { expected: u32 },
    #[error("cannot reset signal handling: {source}")]
    Signals { source: nix::Error },
    #[error(
        "cannot enter the working directory {}: {source}",
        sandy_policy::text::Tilde(path)
    )]
    Chdir { path: PathBuf, source: nix::Error },
    /// A resource ceiling the target carries could not be set.
    #[error("{step}: {source}")]
    Ceiling {
        step: &'static str,
        source: nix::Error,
    },
    #[error("cannot set no_new_privs: {source}")]
    NoNewPrivs { source: nix::Error },
    #[error("cannot drop capabilities: {reason}")]
    Capabilities { reason: String },
    #[error("cannot open grant path {}: {source}", sandy_policy::text::Tilde(path))]
    GrantPath { path: PathBuf, source: nix::Error },
    #[error(
        "grant path {} is a directory but the grant is for one file",
        sandy_policy::text::Tilde(path)
    )]
    GrantKind { path: PathBuf },
    #[error(
        "grant path {} is a symbolic link, not the file or directory it leads to (Sandy \
         grants what a link leads to, so the path changed after the policy was resolved); \
         run again",
        sandy_policy::text::Tilde(path)
    )]
    GrantSymlink { path: PathBuf },
    #[error("cannot build the Landlock ruleset: {reason}")]
    Landlock { reason: String },
    #[error("Landlock was not fully enforced ({status}); refusing to run with a weaker sandbox")]
    LandlockPartial { status: String },
    #[error("cannot install the seccomp filter: {reason}")]
    SeccompApply { reason: String },
    #[error("cannot close inherited descriptors: {source}")]
    CloseDescriptors { source: nix::Error },
    #[error("an argument, path or environment entry contains a NUL byte")]
    Nul,
    #[error("cannot create a user namespace ({}): {hint}", errno.desc())]
    UserNamespace {
        errno: nix::errno::Errno,
        hint: String,
    },
    #[error("cannot write {file}: {source}")]
    IdMap {
        file: String,
        source: std::io::Error,
    },
    #[error("{step} {}: {}", sandy_policy::text::Tilde(path), source.desc())]
    Mount {
        step: &'static str,
        path: PathBuf,
        source: nix::errno::Errno,
    },
    /// A namespace step refused by a policy on namespaces, with its cause and fix.
    #[error("{step}: {}: {hint}", source.desc())]
    NamespaceRefused {
        step: &'static str,
        source: nix::errno::Errno,
        hint: String,
    },
    /// A mount refused by a policy on namespaces, with its cause and fix.
    #[error("{step} {}: {}: {hint}", sandy_policy::text::Tilde(path), source.desc())]
    MountRefused {
        step: &'static str,
        path: PathBuf,
        source: nix::errno::Errno,
        hint: String,
    },
    #[error("{step}: {source}")]
    Relay {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("cannot create the sandbox's PID namespace: {}", source.desc())]
    PidNamespace { source: nix::errno::Errno },
    #[error("{step}: {}", source.desc())]
    Init {
        step: &'static str,
        source: nix::errno::Errno,
    },
    #[error("cannot create the sandbox's network namespace: {}", source.desc())]
    NetworkNamespace { source: nix::errno::Errno },
    #[error("cannot bring up loopback in the private network namespace: {}", source.desc())]
    Loopback { source: nix::errno::Errno },
    #[error(
        "cannot put a name server's address on the sandbox's loopback (name resolution): {}",
        source.desc()
    )]
    ResolverAddress { source: nix::errno::Errno },
    #[error(transparent)]
    Unprotectable(sandy_policy::ChainError),
    #[error(
        "{} {found} since Sandy looked at it; refusing to start with a protection that may \
         not hold (run again)",
        sandy_policy::text::Tilde(path)
    )]
    LayoutChanged { path: PathBuf, found: String },
    #[error(
        "cannot create the mount point {}: {source}",
        sandy_policy::text::Tilde(path)
    )]
    MountPoint {
        path: PathBuf,
        source: std::io::Error,
    },
}
