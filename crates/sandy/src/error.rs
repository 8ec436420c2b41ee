//! The library's errors: every failure names the step that failed (and the path, shown
//! from `~`), never a secret; and the one function that maps them to exit statuses (a
//! run's status when Sandy fails: the bootstrap's and the `sandy` binary's).

use sandy_linux::{ExecFailure, LinuxError, PlanError};
use sandy_policy::{ManifestError, ResolveError};

/// Exit status for a usage error (as clap's own).
pub const EXIT_USAGE: u8 = 2;
/// Exit status when Sandy itself fails (resolution, validation, enforcement).
pub const EXIT_SANDY_FAILED: u8 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit status when the command is not found.
pub const EXIT_NOT_FOUND: u8 = 127;
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant says what it is by its message
pub enum SandyError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Launch(#[from] ExecFailure),
    #[error(transparent)]
    Placeholder(#[from] crate::placeholders::PlaceholderError),
    #[error(transparent)]
    Git(#[from] crate::gitscan::GitScanError),
    /// A configuration, profile or policy file refused (unreadable, invalid, or where
    /// the sandbox could write it): exit 125, as any policy error.
    #[error(transparent)]
    PolicyFile(#[from] sandy_policy::files::FileError),
    /// The project policy refused: changed since it was trusted, not a regular file
    /// (exit 125, the target never runs).
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    #[error(
        "already inside a Sandy sandbox: run the command directly here, or start Sandy \
         outside with the access the command needs"
    )]
    Nested,
    #[error("{step}: {source}")]
    Io {
        step: &'static str,
        source: std::io::Error,
    },
    /// A step on one file or directory failed: named, with why (and, when permission was
    /// refused, whose the nearest existing directory on its way is).
    #[error(
        "{step} {}: {}",
        sandy_policy::text::Tilde(path),
        Refusal(path, source)
    )]
    File {
        step: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A combination of arguments clap cannot express (exit 2).
    #[error("{0}")]
    Usage(&'static str),
    /// Nowhere to create something Sandy needs; `tried` names each place and why not.
    #[error("cannot create {what}; tried: {tried}")]
    NoPlace { what: &'static str, tried: String },
    /// A required runtime control (`--kontext`) cannot be kept working: one line with
    /// the reason and the setup command (exit 125, the target never runs).
    #[error("{0}")]
    RuntimeControl(String),
    /// A resource ceiling asked for explicitly that nothing on this machine holds.
    #[error(transparent)]
    Ceiling(#[from] sandy_policy::ceilings::Unenforceable),
    /// `sandy setup` could not install or load the AppArmor profile.
    #[error("setup: {0}")]
    Setup(String),
    #[error("{step}: {source}")]
    Sys {
        step: &'static str,
        source: nix::Error,
    },
}

/// An error on `path`, shown with what the user needs to fix a refused permission: the
/// nearest existing entry on the way to `path` (itself, or the first ancestor that
/// exists), when it is not the user's own or not writable to them. Looked at without
/// following a link (`lstat`), and only on this error's way out.
struct Refusal<'a>(&'a std::path::Path, &'a std::io::Error);

impl std::fmt::Display for Refusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Refusal(path, source) = *self;
        write!(f, "{source}")?;
        // A message of Sandy's own already says it (`agentstate`).
        if source.kind() != std::io::ErrorKind::PermissionDenied || source.get_ref().is_some() {
            return Ok(());
        }
        match owner_problem(path) {
            Some(problem) => write!(f, "; {problem}"),
            None => Ok(()),
        }
    }
}

/// Whose the nearest existing entry at or above `path` is, when the user cannot write it:
/// `~/.local is owned by root, mode 0755`, `~/x is not writable to you, mode 0555`.
pub fn owner_problem(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let (at, meta) = path
        .ancestors()
        .find_map(|p| std::fs::symlink_metadata(p).ok().map(|m| (p, m)))?;
    let uid = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let shown = sandy_policy::text::Tilde(at);
    if meta.uid() != uid {
        let owner = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(meta.uid()))
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {}", meta.uid()), |u| u.name);
        Some(format!("{shown} is owned by {owner}, mode {mode:04o}"))
    } else if mode & 0o200 == 0 {
        Some(format!("{shown} is not writable to you, mode {mode:04o}"))
    } else {
        None
    }
}

impl From<LinuxError> for SandyError {
    fn from(e: LinuxError) -> Self {
        SandyError::Launch(ExecFailure::Setup(e))
    }
}

impl SandyError {
    /// The exit status for this error: 127 and 126 for a command not found or not
    /// executable, 2 for a usage error, 125 for every failure of Sandy's own.
    pub fn exit_code(&self) -> u8 {
        exit_code(self)
    }
}

/// The exit status for an error. The only place this decision is made.
pub fn exit_code(err: &SandyError) -> u8 {
    match err {
        SandyError::Resolve(ResolveError::CommandNotFound { .. }) => EXIT_NOT_FOUND,
        SandyError::Resolve(ResolveError::NotExecutable { .. }) => EXIT_NOT_EXECUTABLE,
        SandyError::Launch(ExecFailure::Exec { errno, .. }) => match errno {
            nix::errno::Errno::ENOENT => EXIT_NOT_FOUND,
            _ => EXIT_NOT_EXECUTABLE,
        },
        SandyError::Usage(_) => EXIT_USAGE,
        _ => EXIT_SANDY_FAILED,
    }
}

/// The status a supervisor reports for a target that was killed by signal `n`.
pub fn signal_status(n: i32) -> u8 {
    u8::try_from(128 + n).unwrap_or(u8::MAX)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_env_convention() {
        let not_found = SandyError::Resolve(ResolveError::CommandNotFound { name: "x".into() });
        assert_eq!(exit_code(&not_found), 127);
        let not_exec = SandyError::Resolve(ResolveError::NotExecutable { path: "/x".into() });
        assert_eq!(exit_code(&not_exec), 126);
        let exec = SandyError::Launch(ExecFailure::Exec {
            program: "/x".into(),
            errno: nix::errno::Errno::EACCES,
        });
        assert_eq!(exit_code(&exec), 126);
        let plan = SandyError::Plan(PlanError::SeccompUnavailable);
        assert_eq!(exit_code(&plan), 125);
        assert_eq!(exit_code(&SandyError::Nested), 125);
        assert_eq!(signal_status(2), 130);
        assert_eq!(signal_status(9), 137);
    }
}
