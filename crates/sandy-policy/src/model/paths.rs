//! Paths as the policy reads them: the one lexical normalization, and the fixed places
//! inside the sandbox (its private directories, its own policy document).

use std::path::{Component, Path, PathBuf};

/// Where the private per-run directory appears inside the sandbox.
pub const PRIVATE_TMP: &str = "/tmp";
/// The private, empty shared-memory directory inside the sandbox.
pub const PRIVATE_SHM: &str = "/dev/shm";
/// Where, inside the sandbox, the dry-run document of the sandbox itself can be read
/// (read-only; on the private `/run`), so the agent can learn its own policy.
pub const POLICY_DOCUMENT_PATH: &str = "/run/sandy/policy.json";
/// The directory holding [`POLICY_DOCUMENT_PATH`].
pub const POLICY_DOCUMENT_DIR: &str = "/run/sandy";
/// The second temporary directory, private and empty inside the sandbox.
pub const PRIVATE_VAR_TMP: &str = "/var/tmp";

/// Removes `.` and `..` components without touching the filesystem (the one lexical
/// normalization every part of Sandy uses).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether an absolute path is already as [`normalize`] leaves it: no empty, `.` or `..`
/// component, no trailing slash.
pub fn is_normal(path: &[u8]) -> bool {
    match path.split_first() {
        Some((b'/', [])) => true,
        Some((b'/', rest)) => rest
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".."),
        _ => false,
    }
}

/// The directories the mount layer replaces with private ones inside the sandbox: the
/// host's copies are out of reach there, unless a grant carries a path through.
pub fn private_dirs(runtime_dir: Option<&Path>) -> Vec<&Path> {
    [PRIVATE_TMP, PRIVATE_SHM, PRIVATE_VAR_TMP, "/run"]
        .iter()
        .map(Path::new)
        .chain(runtime_dir)
        .collect()
}
