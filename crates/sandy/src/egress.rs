//! The supervisor's side of the egress policy: the `--net-log` file opened before launch,
//! the proxy started on the listener the bootstrap hands over, and the summary after the
//! run.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use sandy_net::proxy::{ProxyConfig, ProxyHandle};
use sandy_policy::Egress;

use crate::error::SandyError;

/// How long the proxy may take after the target's exit to end and log its connections.
const LOG_GRACE: Duration = Duration::from_secs(2);

/// Opens the log at `path` to append to (see [`Proxy::prepare`]).
fn open_log<'a>(
    path: &Path,
    writable: impl IntoIterator<Item = &'a Path> + Clone,
) -> std::io::Result<std::fs::File> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    crate::hostfs::open_named_dir(dir, writable)?.append_log(name)
}

/// Raises the supervisor's soft open-file limit to its hard limit, so that the connections
/// a run opens through the proxy (each tunnel holds several descriptors) do not exhaust
/// the usual 1024. Only the supervisor's: the bootstrap, from which the sandboxed command
/// descends, was forked at the start of the run, before the proxy starts, so the command
/// keeps the caller's own soft limit (programs that use `select()` rely on 1024). If the
/// limit cannot be raised, the proxy's limits fit the one there is.
/// Returns the soft limit to put back once the proxy has stopped (a library caller goes
/// on after the run).
fn raise_descriptor_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok()).then_some(soft)
}

/// The egress proxy of one run: prepared before launch, started once its listener
/// arrives, reported after the run.
pub struct Proxy {
    pending: Option<(u16, ProxyConfig)>,
    running: Option<ProxyHandle>,
    /// The open-file soft limit before the proxy raised it.
    old_soft_limit: Option<u64>,
}

impl Proxy {
    /// Opens the log (appending) before anything starts, so a bad path fails the launch.
    /// A run may have put the log's name there (in the project, or any other place in
    /// `writable`): the log must be a regular file of the user's with no other name, no
    /// link is followed to it, and a FIFO or a device is refused at once
    /// ([`crate::hostfs::Dir::append_log`], [`crate::hostfs::open_named_dir`]).
    pub fn prepare<'a>(
        egress: Option<&Egress>,
        log: Option<&Path>,
        writable: impl IntoIterator<Item = &'a Path> + Clone,
    ) -> Result<Proxy, SandyError> {
        let Some(egress) = egress else {
            return Ok(Proxy {
                pending: None,
                running: None,
                old_soft_limit: None,
            });
        };
        let log = log
            .map(|path| {
                open_log(path, writable).map_err(|source| SandyError::File {
                    step: "cannot use the --net-log file",
                    // Named in full (from the current directory), as every path Sandy names.
                    path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
                    source,
                })
            })
            .transpose()?;
        Ok(Proxy {
            pending: Some((
                egress.proxy_port,
                ProxyConfig {
                    policy: egress.policy.clone(),
                    log,
                    // Set when the proxy starts, after the descriptor limit is raised.
                    limits: sandy_net::proxy::Limits::for_descriptors(0),
                },
            )),
            running: None,
            old_soft_limit: None,
        })
    }

    /// The port whose listener is the proxy's.
    pub fn port(&self) -> Option<u16> {
        self.pending.as_ref().map(|(port, _)| *port)
    }

    /// Serves the listener the bootstrap created inside the sandbox, with this process's
    /// open-file limit raised first ([`raise_descriptor_limit`]) and the proxy's limits
    /// fitted to it.
    pub fn start(&mut self, listener: TcpListener) -> Result<(), SandyError> {
        if let Some((_, mut config)) = self.pending.take() {
            self.old_soft_limit = raise_descriptor_limit();
            config.limits = sandy_net::proxy::Limits::for_this_process();
            let handle =
                sandy_net::proxy::spawn(listener, config).map_err(|source| SandyError::Io {
                    step: "cannot start the egress proxy",
                    source,
                })?;
            self.running = Some(handle);
        }
        Ok(())
    }

    /// Ends the proxy's thread (after [`Proxy::report`]), and puts the open-file limit
    /// back as it was.
    pub fn stop(self) {
        if let Some(handle) = self.running {
            handle.stop();
        }
        if let Some(soft) = self.old_soft_limit {
            use nix::sys::resource::{getrlimit, setrlimit, Resource};
            if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
            }
        }
    }

    /// After the run: waits briefly for the last connections to be logged, then prints
    /// the summary: the allowed destinations with counts (routine: folded without -v),
    /// and every refused or failed one (the refused with the flag that would allow each).
    pub fn report(&self) {
        let Some(handle) = &self.running else { return };
        handle.finish(LOG_GRACE);
        let summary = handle.summary();
        if let Some(allowed) = &summary.allowed {
            tell!(
                format!(
                    "network: {} request{} to {} allowed destination{}",
                    summary.requests,
                    if summary.requests == 1 { "" } else { "s" },
                    summary.hosts,
                    if summary.hosts == 1 { "" } else { "s" }
                ),
                "{allowed}"
            );
        }
        for line in &summary.attention {
            say!("{line}");
        }
    }
}
