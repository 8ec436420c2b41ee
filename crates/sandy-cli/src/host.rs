//! Gathers the [`HostContext`] once, at start-up. The only place the supervisor reads its
//! environment for policy purposes.

use std::path::{Path, PathBuf};

use sandy_policy::{HostContext, ResolveError};

pub fn gather() -> Result<HostContext, ResolveError> {
    let cwd = std::env::current_dir().map_err(|e| ResolveError::NoWorkingDirectory {
        reason: e.to_string(),
    })?;
    let env: Vec<_> = std::env::vars_os().collect();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .and_then(|h| std::fs::canonicalize(h).ok())
        .filter(|h| h.is_dir());
    let terminals = (0..=2)
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .filter(|p| is_terminal_device(p))
        .fold(Vec::new(), |mut acc, p| {
            if !acc.contains(&p) {
                acc.push(p);
            }
            acc
        });
    Ok(HostContext {
        cwd,
        home,
        env,
        terminals,
        supervisor_pid: std::process::id(),
        uid: nix::unistd::getuid().as_raw(),
    })
}

fn is_terminal_device(p: &Path) -> bool {
    p.starts_with("/dev/pts/") || p.to_str().is_some_and(|s| s.starts_with("/dev/tty"))
}
