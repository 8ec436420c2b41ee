use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::gitfacts::GitFacts;

/// Everything resolution needs to know about the host, gathered once by the supervisor.
///
/// Resolution reads the environment only through this value, so tests can describe any
/// host they like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostContext {
    /// The canonical current directory: the project.
    pub cwd: PathBuf,
    /// The caller's canonical home directory, when `HOME` names an existing directory.
    pub home: Option<PathBuf>,
    /// The caller's environment, in order, byte for byte.
    pub env: Vec<(OsString, OsString)>,
    /// Terminal devices the target inherits on its standard descriptors (`/dev/pts/N`).
    pub terminals: Vec<PathBuf>,
    /// The supervisor's process id; the bootstrap checks its parent against it.
    pub supervisor_pid: u32,
    /// The caller's real user id.
    pub uid: u32,
    /// What the caller's own `git` says about the repositories the run can write.
    pub git: GitFacts,
}

impl HostContext {
    /// The value of an environment variable, if set.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }
}
