//! Gathers the [`HostContext`] once, at start-up. The only place the supervisor reads its
//! environment for policy purposes.

use std::path::{Path, PathBuf};

use sandy_policy::{GitFacts, HostContext, ResolveError};

use crate::error::SandyError;
use crate::gitscan;

/// The host facts for a run that may write the project and the `read_write` grants: the
/// git facts come from the user's git (`gitscan`), for the dry run as for the run.
pub fn gather(read_write: &[PathBuf]) -> Result<HostContext, SandyError> {
    gather_walked(read_write, false).map(|(host, _)| host)
}

/// [`gather`], with what the walk for repositories saw of each tree, for the check after
/// the run ([`crate::verify`]). With `remember` (a launch, not a dry run or a question),
/// git's answers may be remembered for the next launch (`gitmemo`).
pub fn gather_walked(
    read_write: &[PathBuf],
    remember: bool,
) -> Result<(HostContext, Vec<crate::walk::Record>), SandyError> {
    walk(gather_without_git()?, read_write, remember)
}

/// [`gather_walked`] for host facts already gathered ([`gather_without_git`]).
pub fn walk(
    mut host: HostContext,
    read_write: &[PathBuf],
    remember: bool,
) -> Result<(HostContext, Vec<crate::walk::Record>), SandyError> {
    // The project and the top of every writable directory grant, canonical (resolution
    // grants the same canonical paths). The current directory from getcwd(3) already is.
    // A directory resolution refuses as a project (`/`, home or one of its ancestors) is
    // not walked: the run stops there anyway.
    let refused =
        |p: &Path| p.parent().is_none() || host.home.as_deref().is_some_and(|h| h.starts_with(p));
    let roots: Vec<PathBuf> = std::iter::once(host.cwd.clone())
        .filter(|p| !refused(p))
        .chain(
            read_write
                .iter()
                .filter_map(|p| crate::hostfs::canonicalize(host.cwd.join(p)).ok())
                .filter(|p| p.is_dir() && !refused(p)),
        )
        .collect();
    let mut walked = Vec::new();
    if !roots.is_empty() {
        (host.git, walked) = gitscan::scan(&roots, host.home.as_deref(), &host.env, remember)?;
    }
    Ok((host, walked))
}

/// The host facts without git's view of any repository (for commands that resolve no
/// launch, such as `sandy cache`).
pub fn gather_without_git() -> Result<HostContext, SandyError> {
    let cwd = std::env::current_dir().map_err(|e| ResolveError::NoWorkingDirectory {
        reason: e.to_string(),
    })?;
    let env: Vec<_> = std::env::vars_os().collect();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .and_then(|h| crate::hostfs::canonicalize(h).ok())
        .filter(|h| h.is_dir());
    if let Some(home) = &home {
        sandy_policy::text::set_home(home);
    }
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
        git: GitFacts::default(),
        resolvers: resolvers(),
        cwd,
        home,
        env,
        terminals,
        supervisor_pid: std::process::id(),
        uid: nix::unistd::getuid().as_raw(),
    })
}

/// The host's name servers ([`sandy_policy::resolvers_of`]), from the first 64 KiB of
/// `/etc/resolv.conf` (a file no run can write; a missing one means the default).
#[allow(clippy::disallowed_methods)] // /etc, which no run writes
fn resolvers() -> Vec<std::net::IpAddr> {
    use std::io::Read;
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open("/etc/resolv.conf") {
        let _ = file.take(64 * 1024).read_to_string(&mut text);
    }
    sandy_policy::resolvers_of(&text)
}

fn is_terminal_device(p: &Path) -> bool {
    p.starts_with("/dev/pts/") || p.to_str().is_some_and(|s| s.starts_with("/dev/tty"))
}

/// Whether this process runs with `no_new_privs` (inside Sandy, or another sandbox that
/// sets it).
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
pub fn no_new_privs() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().any(|l| {
            l.strip_prefix("NoNewPrivs:")
                .is_some_and(|v| v.trim() == "1")
        })
    })
}

/// The launch whose resolution `doctor` and `integrations setup` ask about a provider:
/// `true` under `agent`'s profile (with `--numbat` when `numbat`); nothing is created.
pub fn status_request(
    host: &sandy_policy::HostContext,
    agent: &str,
    numbat: bool,
) -> sandy_policy::RunRequest {
    sandy_policy::RunRequest {
        command: vec!["true".into()],
        read: Vec::new(),
        read_write: Vec::new(),
        execute: Vec::new(),
        private_tmp: crate::rundir::unmade_private_tmp(host),
        block_net: false,
        allow_local_ports: Vec::new(),
        numbat_collector: None,
        numbat,
        profile: Some(agent.to_owned()),
        pass_env: Vec::new(),
        ceilings: Default::default(),
        tier: Default::default(),
        egress: sandy_policy::EgressRequest::default(),
        files: Default::default(),
    }
}
