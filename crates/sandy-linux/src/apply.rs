//! The launch sequence: one ordered function from a validated manifest to `execve`.

use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use caps::{CapSet, Capability};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::{chdir, execve, getppid};
use sandy_policy::RestoredSignal;
use sandy_policy::{OsBytes, ValidatedManifest};

use crate::error::LinuxError;
use crate::probe::probe;
use crate::{landlock, namespaces, plan, relay, seccomp, sys};

/// Why the target did not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecFailure {
    /// Sandy could not build or apply the sandbox; the target never ran.
    #[error(transparent)]
    Setup(#[from] LinuxError),
    /// Every layer is in place but `execve` itself failed.
    #[error("cannot execute {}: {}", program.display(), errno.desc())]
    Exec { program: PathBuf, errno: Errno },
}

/// Applies every layer in order and replaces this process with the target. Returns only
/// on failure, and then the target has not run.
///
/// `relay` is the socket on which the listeners for local-port grants go back to the
/// supervisor (required when the manifest grants local ports).
pub fn launch(manifest: &ValidatedManifest, relay: Option<OwnedFd>) -> ExecFailure {
    match launch_inner(manifest, relay) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn cstring(b: &OsBytes) -> Result<CString, LinuxError> {
    CString::new(b.as_bytes()).map_err(|_| LinuxError::Nul)
}

fn launch_inner(
    manifest: &ValidatedManifest,
    relay: Option<OwnedFd>,
) -> Result<Infallible, ExecFailure> {
    let m = manifest.manifest();

    // Preconditions. Landlock and seccomp (without TSYNC) bind only the calling thread, so
    // the bootstrap must be single-threaded. If the supervisor dies, so do we.
    check_single_threaded()?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|source| LinuxError::ParentDeathSignal { source })?;
    if u32::try_from(getppid().as_raw()).ok() != Some(m.supervisor_pid) {
        return Err(LinuxError::SupervisorGone {
            expected: m.supervisor_pid,
        }
        .into());
    }

    // Decide everything before the first irreversible step.
    let support = probe();
    let plan = plan::plan(manifest, &support).map_err(LinuxError::from)?;
    let program = cstring(&m.program)?;
    let argv = m.argv.iter().map(cstring).collect::<Result<Vec<_>, _>>()?;
    let mut envp = Vec::with_capacity(m.environment.len());
    for entry in &m.environment {
        let mut kv =
            Vec::with_capacity(entry.name.as_bytes().len() + entry.value.as_bytes().len() + 1);
        kv.extend_from_slice(entry.name.as_bytes());
        kv.push(b'=');
        kv.extend_from_slice(entry.value.as_bytes());
        envp.push(CString::new(kv).map_err(|_| LinuxError::Nul)?);
    }

    // Signals: the supervisor ignores SIGINT and SIGQUIT while it waits; the target gets
    // the default action back, and an empty signal mask.
    for sig in &m.restore_default_signals {
        let sig = match sig {
            RestoredSignal::Interrupt => Signal::SIGINT,
            RestoredSignal::Quit => Signal::SIGQUIT,
        };
        sys::default_signal(sig).map_err(|source| LinuxError::Signals { source })?;
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(|source| LinuxError::Signals { source })?;

    // Layer 1: a private user and mount namespace with the protections, masks and
    // private directories. The working directory is entered afterwards, so that it is
    // looked up through the new mounts.
    namespaces::enter(m.network)?;
    // The egress proxy's listener travels with the local-port listeners.
    let handed: Vec<u16> = m.local_ports.iter().copied().chain(m.proxy_port).collect();
    if !handed.is_empty() {
        let channel = relay.as_ref().ok_or(LinuxError::Relay {
            step: "local ports are granted but no relay channel was passed",
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        relay::hand_over_listeners(channel, &handed)?;
    }
    drop(relay);
    namespaces::apply(&plan.mounts)?;
    chdir(m.working_directory.as_path()).map_err(|source| LinuxError::Chdir {
        path: m.working_directory.as_path().to_path_buf(),
        source,
    })?;

    // Layer 2: no_new_privs, then every capability dropped, so even root keeps none.
    nix::sys::prctl::set_no_new_privs().map_err(|source| LinuxError::NoNewPrivs { source })?;
    drop_capabilities()?;

    // Layer 3: Landlock.
    landlock::apply(&plan.landlock_rules)?;

    // Layer 4: seccomp, last, so the setup syscalls above stayed allowed.
    seccomp::apply(&plan.seccomp)?;

    // Layer 5: nothing but stdin, stdout and stderr crosses into the target.
    sys::close_range_cloexec(3).map_err(|source| LinuxError::CloseDescriptors { source })?;

    match execve(&program, &argv, &envp) {
        Ok(never) => match never {},
        Err(errno) => Err(ExecFailure::Exec {
            program: m.program.as_path().to_path_buf(),
            errno,
        }),
    }
}

fn check_single_threaded() -> Result<(), LinuxError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|source| LinuxError::ThreadCount { source })?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or_else(|| LinuxError::ThreadCount {
            source: std::io::Error::other("no Threads line in /proc/self/status"),
        })?;
    if threads != 1 {
        return Err(LinuxError::MultiThreaded { threads });
    }
    Ok(())
}

/// Clears the ambient, inheritable, effective and permitted sets, and the bounding set
/// when this process may change it (it can only hold capabilities if it may).
fn drop_capabilities() -> Result<(), LinuxError> {
    let err = |e: caps::errors::CapsError| LinuxError::Capabilities {
        reason: e.to_string(),
    };
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).map_err(err)? {
        for cap in caps::all() {
            caps::drop(None, CapSet::Bounding, cap).map_err(err)?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    // Clears the effective set with the permitted one.
    caps::clear(None, CapSet::Permitted).map_err(err)?;
    // The ambient set is not read back: the kernel keeps it within permitted and
    // inheritable, both checked empty here, so it is empty too.
    let left: Vec<_> = [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable]
        .into_iter()
        .filter(|set| {
            caps::read(None, *set)
                .map(|c| !c.is_empty())
                .unwrap_or(true)
        })
        .collect();
    if !left.is_empty() {
        return Err(LinuxError::Capabilities {
            reason: format!("capabilities remain in {left:?}"),
        });
    }
    Ok(())
}
