//! The launch sequence: one ordered function from a validated manifest to `execve`.

use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use caps::{CapSet, Capability};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{chdir, execve, pipe2, Pid};
use sandy_policy::{Network, RestoredSignal, Tier};
use sandy_policy::{OsBytes, ValidatedManifest};

use crate::error::LinuxError;
use crate::probe::probe;
use crate::sys::process::{Forked, OneThread};
use crate::{landlock, namespaces, plan, relay, seccomp, sys};

/// Why the target did not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecFailure {
    /// Sandy could not build or apply the sandbox; the target never ran.
    #[error(transparent)]
    Setup(#[from] LinuxError),
    /// Every layer is in place but `execve` itself failed.
    #[error("cannot execute {}: {}", sandy_policy::text::Tilde(program), errno.desc())]
    Exec { program: PathBuf, errno: Errno },
}

/// Applies every layer in order and starts the target. Returns only on failure, and then
/// the target has not run.
///
/// The process tree of a run (design section 3, layer 1):
///
/// ```text
/// supervisor ─┬─ bootstrap (this process: namespaces, mounts; ends once both below run)
///             ├─ init (pid 1 of the run's PID namespace: reaps, never execs)
///             └─ target (pid 2: the last layers, then execve)
/// ```
///
/// The bootstrap creates the user, mount, IPC and PID namespaces (the PID namespace
/// after the user namespace, so that an unprivileged user owns it) and starts the init.
/// It cannot become that init itself: `unshare(CLONE_NEWPID)` moves only its future
/// children. It starts the init and then the target with `CLONE_PARENT` (which the kernel
/// refuses to an init), so that both are the supervisor's own children: the supervisor
/// sees the target's exit status and its stops exactly as a shell would (job control),
/// while the target and everything it starts stay inside the PID namespace. When the
/// init ends, the kernel kills every process left in the namespace, whatever its session
/// or depth; the init ends when the supervisor kills it after the target's exit, or when
/// the supervisor dies (parent-death signal).
///
/// `channel` is the socket on which the bootstrap sends the supervisor the listeners
/// for local-port grants, then the pids of the target and the init. Without one, the
/// init and the target are the bootstrap's own children and the bootstrap ends with the
/// target's status (the init, and the namespace, with it).
///
/// With `observe` (and a channel), the target also installs the refusal observer
/// ([`seccomp::compile_notifier`]) just before the floor and sends its listener to the
/// supervisor on the channel before `execve`. If the observer cannot be installed, the
/// target runs without it (it only ever explains); the supervisor then has no report.
pub fn launch(
    manifest: &ValidatedManifest,
    channel: Option<OwnedFd>,
    observe: bool,
) -> ExecFailure {
    // Landlock and seccomp (without TSYNC) bind only the calling thread, and the
    // bootstrap forks: it must be single-threaded.
    let one = match OneThread::check() {
        Ok(one) => one,
        Err(Some(threads)) => return LinuxError::MultiThreaded { threads }.into(),
        Err(None) => {
            return LinuxError::ThreadCount {
                source: std::io::Error::other("no thread count in /proc/self/status"),
            }
            .into()
        }
    };
    launch_forked(manifest, channel, observe, None, one)
}

/// What a bootstrap forked ahead of its manifest did while it waited for it.
#[derive(Debug)]
pub struct Ahead {
    /// [`namespaces::enter_ahead`]: a failure there is the launch's failure at the step
    /// where the namespaces are made.
    pub made: Result<(), LinuxError>,
    /// [`probe`].
    pub support: crate::KernelSupport,
    /// The cache overlays mounted ahead ([`crate::overlay::Premounted::add`]).
    pub premounted: crate::overlay::Premounted,
    /// Whether the capability bounding set is empty already (`drop_bounding_set`, in
    /// the new user namespace): the target, which inherits it, then has nothing left to
    /// drop there.
    pub bounding_dropped: bool,
    /// The tier it prepared for: the `landlock` tier makes no namespace. A manifest of
    /// another tier is refused.
    pub tier: Tier,
}

impl Ahead {
    /// Makes the namespaces, empties the capability bounding set (about forty system
    /// calls, which the target would otherwise make after the manifest came) and probes
    /// the kernel.
    ///
    /// The bounding set limits only what later programs can gain; the capabilities this
    /// process holds in its new user namespace, which the mounts need, stay until the
    /// target drops them with the rest (`drop_capabilities`).
    pub fn prepare(tier: Tier) -> Ahead {
        let made = match tier {
            Tier::Full => namespaces::enter_ahead(),
            Tier::Landlock => Ok(()),
        };
        let bounding_dropped = made.is_ok() && drop_bounding_set().is_ok();
        Ahead {
            made,
            support: probe(),
            premounted: crate::overlay::Premounted::default(),
            bounding_dropped,
            tier,
        }
    }

    /// Mounts the supervisor's cache overlays ahead (detached), once the namespaces are
    /// made.
    pub fn premount(&mut self, overlays: &[crate::overlay::CacheOverlay]) {
        if self.made.is_ok() && self.tier == Tier::Full {
            self.premounted.add(overlays);
        }
    }
}

/// [`launch`] in the child of a fork, single-threaded by construction (`sandy run`
/// forks its bootstrap from the supervisor). `ahead`: what the process did before the
/// manifest came, if it was forked ahead ([`Ahead::prepare`]).
pub fn launch_forked(
    manifest: &ValidatedManifest,
    channel: Option<OwnedFd>,
    observe: bool,
    ahead: Option<Ahead>,
    one: OneThread,
) -> ExecFailure {
    match launch_inner(manifest, channel, observe, ahead, &one) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn cstring(b: &OsBytes) -> Result<CString, LinuxError> {
    CString::new(b.as_bytes()).map_err(|_| LinuxError::Nul)
}

/// The name the sandbox's init carries (`/proc/1/comm` inside a sandbox), by which a
/// nested `sandy run` recognises that it is already inside one.
pub const INIT_NAME: &str = "sandy-init";

fn launch_inner(
    manifest: &ValidatedManifest,
    channel: Option<OwnedFd>,
    observe: bool,
    ahead: Option<Ahead>,
    one: &OneThread,
) -> Result<Infallible, ExecFailure> {
    let m = manifest.manifest();

    // Preconditions: one thread (the token). If the supervisor dies, so do we.
    let tied = sys::process::tie_to_supervisor(m.supervisor_pid)
        .map_err(|source| LinuxError::ParentDeathSignal { source })?;
    if !tied {
        return Err(LinuxError::SupervisorGone {
            expected: m.supervisor_pid,
        }
        .into());
    }

    // Decide everything before the first irreversible step.
    let (support, made, mut premounted, bounding_dropped) = match ahead {
        Some(Ahead { tier, .. }) if tier != m.tier => {
            return Err(LinuxError::TierMismatch {
                prepared: tier.name(),
                manifest: m.tier.name(),
            }
            .into())
        }
        Some(Ahead {
            made,
            support,
            premounted,
            bounding_dropped,
            tier: _,
        }) => (support, Some(made), premounted, bounding_dropped),
        None => (probe(), None, crate::overlay::Premounted::default(), false),
    };
    let mut plan = plan::plan(manifest, &support).map_err(LinuxError::from)?;
    let program = cstring(&m.program)?;
    // With the host's network, the run still gets a private network namespace (so that
    // nothing inside lists the host's sockets in /proc/net), and the supervisor creates
    // its IPv4, IPv6 and netlink sockets in the host's namespace (the socket broker).
    // That needs the notifier and the channel; a bootstrap started by hand has neither
    // and keeps the host's namespace.
    let broker = m.network == Network::AllowAll && channel.is_some();
    // The `landlock` tier has no mount namespace to keep the host's Unix sockets out of
    // sight: every connect goes to the supervisor, which connects a pathname socket only
    // within the policy's grants.
    let unix_gate = m.tier == Tier::Landlock && channel.is_some();
    let observer = match (observe || broker || unix_gate, &channel) {
        (true, Some(_)) => match seccomp::compile_notifier(observe, broker, unix_gate) {
            Ok(program) => Some(program),
            Err(e) if broker || unix_gate => return Err(LinuxError::from(e).into()),
            Err(_) => None,
        },
        _ => None,
    };
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

    // The bootstrap and the init keep every signal blocked (the terminal's Ctrl-Z and a
    // hang-up are for the target; the init only waits for SIGCHLD). The supervisor's
    // ignored SIGINT and SIGQUIT stay ignored here; only the target gets them back.
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), None)
        .map_err(|source| LinuxError::Signals { source })?;

    // The weaker tier, chosen: no namespace, no mount; the rest of the layers as below.
    if m.tier == Tier::Landlock {
        if let Some(terminal) = crate::tier::inherited_terminal() {
            plan.landlock_rules
                .push(crate::tier::inherited_terminal_rule(terminal));
        }
        let exec = Exec {
            program: &program,
            argv: &argv,
            envp: &envp,
            bounding_dropped,
        };
        return launch_without_namespaces(m, &plan, observer, channel, exec, one);
    }

    // Layer 1: private user, mount, IPC and PID namespaces with the protections, masks
    // and private directories. The working directory is entered afterwards, so that it is
    // looked up through the new mounts. A bootstrap forked by the supervisor made the
    // namespaces while the policy was resolved (`ahead`).
    let private_network = match (m.network, broker) {
        (Network::BlockAll, _) => namespaces::PrivateNetwork::WithLoopback,
        (Network::AllowAll, true) => namespaces::PrivateNetwork::Brokered(m.resolvers.clone()),
        (Network::AllowAll, false) => namespaces::PrivateNetwork::None,
    };
    let entered = match made {
        Some(made) => made.map(|()| true)?,
        None => false,
    };
    namespaces::enter(&private_network, entered)?;
    // The bootstrap, and the init forked from it, hold a copy of the supervisor's memory
    // (the caller's whole environment) and the manifest (the views' contents among it):
    // not dumpable, so that no process of the sandbox can read it through /proc/1
    // (environ, mem) or ptrace. Set only now: the user namespace's id maps are written as
    // this process's own files (a bootstrap forked ahead has set it already).
    nix::sys::prctl::set_dumpable(false).map_err(|source| LinuxError::Init {
        step: "cannot make the bootstrap non-dumpable",
        source,
    })?;
    // The inherited terminal, bound onto /dev/console, can be reopened there (`tty`
    // names it; GPG_TTY and tools that reopen their terminal work). Its dangerous
    // requests stay refused by the seccomp floor whatever the name.
    if namespaces::apply(&plan.mounts, &mut premounted)? {
        plan.landlock_rules.push(landlock::console_rule());
    }
    // The egress proxy's listener travels with the local-port listeners (made in the
    // run's network namespace).
    let handed: Vec<u16> = m.local_ports.iter().copied().chain(m.proxy_port).collect();
    if !handed.is_empty() {
        let channel = channel.as_ref().ok_or(LinuxError::Relay {
            step: "local ports are granted but no relay channel was passed",
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        relay::hand_over_listeners(channel, &handed)?;
    }
    // With the host's network, the name servers' sockets (made in the run's namespace).
    if let namespaces::PrivateNetwork::Brokered(resolvers) = &private_network {
        if !resolvers.is_empty() {
            if let Some(channel) = channel.as_ref() {
                relay::hand_over_resolvers(channel, resolvers)?;
            }
        }
    }
    unshare(CloneFlags::CLONE_NEWPID).map_err(|source| {
        crate::namespaces::refused(
            "cannot create the sandbox's PID namespace",
            crate::reach::NsStep::Unshare,
            source,
        )
        .unwrap_or(LinuxError::PidNamespace { source })
    })?;

    let exec = Exec {
        program: &program,
        argv: &argv,
        envp: &envp,
        bounding_dropped,
    };
    match channel {
        Some(channel) => launch_beside_supervisor(m, &plan, observer, channel, exec, one),
        None => launch_here(m, &plan, exec, one),
    }
}

/// The launch of a bootstrap forked by the supervisor: the init and the target are both
/// made the supervisor's own children (`CLONE_PARENT`), which then waits for the target
/// directly (its exit status, its stops for job control) and ends the init, and with it
/// the whole namespace, when the target has exited. Once it has told the supervisor
/// both pids, the bootstrap only holds the sandbox's namespaces ([`hold_namespaces`]), so
/// that their teardown is not on the path from the target's exit to Sandy's.
fn launch_beside_supervisor(
    m: &sandy_policy::LaunchManifest,
    plan: &plan::EnforcementPlan,
    observer: Option<seccompiler::BpfProgram>,
    channel: OwnedFd,
    exec: Exec<'_>,
    one: &OneThread,
) -> Result<Infallible, ExecFailure> {
    let init = match sys::process::fork_as_sibling(one).map_err(|source| LinuxError::Init {
        step: "cannot start the sandbox's init",
        source,
    })? {
        // The channel's other end is the supervisor's, open until the run is over: it
        // tells the init whether the supervisor died before the init's parent-death
        // signal was armed.
        Forked::Child(_) => run_init(channel),
        Forked::Parent(pid) => pid,
    };
    // From here on a failure ends the init too (it would otherwise wait for the
    // supervisor's end).
    let end_init = |e: ExecFailure| {
        let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
        e
    };
    let forked = sys::process::fork_as_sibling(one).map_err(|source| {
        end_init(
            LinuxError::Init {
                step: "cannot start the target in the sandbox",
                source,
            }
            .into(),
        )
    })?;
    match forked {
        // The target (pid 2 inside) never returns here: it runs the target or fails.
        Forked::Child(_) => become_target(m, plan, observer.map(|o| (o, channel)), &exec),
        Forked::Parent(target) => {
            relay::send_launched(&channel, target.as_raw(), init.as_raw())
                .map_err(|e| end_init(e.into()))?;
            hold_namespaces(channel, m.supervisor_pid)
        }
    }
}

/// The bootstrap's end in a supervised run: it holds the sandbox's namespaces (its mount
/// namespace above all) until the supervisor kills it, once the init is reaped and every
/// process of the run is gone, or until the supervisor dies (its parent-death signal).
/// The init's exit is then quick, and the namespaces' teardown (the unmounting of every
/// mount of the sandbox, overlays included) runs in this process's exit, off the path
/// to the supervisor's answer.
///
/// It lets go of everything else: the channel (the supervisor learns from its end of
/// file that a target which failed before handing over its listener is gone), and the
/// terminal or the pipes of the run, whose readers must not wait for this process.
fn hold_namespaces(channel: OwnedFd, supervisor: u32) -> ! {
    drop(channel);
    sys::process::close_standard_streams();
    if let Ok(name) = CString::new(HOLDER_NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    // Armed again (a change of credentials on the way clears the signal), then checked.
    if !matches!(sys::process::tie_to_supervisor(supervisor), Ok(true)) {
        crate::sys::process::exit_now(0);
    }
    loop {
        nix::unistd::pause();
    }
}

/// The launch of the `landlock` tier: no namespace to make or hold. With a channel, the
/// target is started as the supervisor's own child (`CLONE_PARENT`, as in the full tier)
/// with its parent-death signal armed, the supervisor is told its pid (and that there is
/// no init), and the bootstrap ends: the supervisor, a child subreaper, holds the run's
/// process tree and ends it. Without one (a bootstrap started by hand), the target is
/// the bootstrap's child, whose status it exits with.
fn launch_without_namespaces(
    m: &sandy_policy::LaunchManifest,
    plan: &plan::EnforcementPlan,
    observer: Option<seccompiler::BpfProgram>,
    channel: Option<OwnedFd>,
    exec: Exec<'_>,
    one: &OneThread,
) -> Result<Infallible, ExecFailure> {
    // The bootstrap holds a copy of the supervisor's memory (the caller's environment).
    nix::sys::prctl::set_dumpable(false).map_err(|source| LinuxError::Init {
        step: "cannot make the bootstrap non-dumpable",
        source,
    })?;
    let start = |source| LinuxError::Init {
        step: "cannot start the target in the sandbox",
        source,
    };
    let Some(channel) = channel else {
        return match sys::process::fork(one).map_err(start)? {
            Forked::Child(_) => become_target(m, plan, None, &exec),
            Forked::Parent(target) => end_with(target),
        };
    };
    match sys::process::fork_as_sibling(one).map_err(start)? {
        Forked::Child(_) => {
            // The supervisor's child: it dies with the supervisor.
            let tied = sys::process::tie_to_supervisor(m.supervisor_pid)
                .map_err(|source| LinuxError::ParentDeathSignal { source })?;
            if !tied {
                return Err(LinuxError::SupervisorGone {
                    expected: m.supervisor_pid,
                }
                .into());
            }
            become_target(m, plan, observer.map(|o| (o, channel)), &exec)
        }
        Forked::Parent(target) => {
            relay::send_launched(&channel, target.as_raw(), 0)?;
            drop(channel);
            sys::process::close_standard_streams();
            sys::process::exit_now(0)
        }
    }
}

/// The name the bootstrap carries while it holds a run's namespaces.
pub const HOLDER_NAME: &str = "sandy-ns";

/// The launch of a bootstrap started by hand, without a supervisor: the init and the
/// target are its own children, it waits for the target and exits with its status, and
/// the init (its parent-death signal), and the namespace with it, end with it.
fn launch_here(
    m: &sandy_policy::LaunchManifest,
    plan: &plan::EnforcementPlan,
    exec: Exec<'_>,
    one: &OneThread,
) -> Result<Infallible, ExecFailure> {
    let (alive_read, alive_write) = pipe2(OFlag::O_CLOEXEC).map_err(|source| LinuxError::Init {
        step: "cannot create the init's parent-death pipe",
        source,
    })?;
    match sys::process::fork(one).map_err(|source| LinuxError::Init {
        step: "cannot start the sandbox's init",
        source,
    })? {
        Forked::Child(_) => {
            drop(alive_write);
            run_init(alive_read)
        }
        Forked::Parent(_) => {}
    }
    drop(alive_read);
    let target = match sys::process::fork(one).map_err(|source| LinuxError::Init {
        step: "cannot start the target in the sandbox",
        source,
    })? {
        Forked::Child(_) => {
            drop(alive_write);
            return become_target(m, plan, None, &exec);
        }
        Forked::Parent(pid) => pid,
    };
    end_with(target)
}

/// A bootstrap started without a supervisor: waits for its target and exits with its
/// status (`_exit` here and below: a forked bootstrap must not run the supervisor's exit
/// handlers or flush its buffers) (128+N for signal N).
fn end_with(target: Pid) -> ! {
    loop {
        match waitpid(target, None) {
            Ok(WaitStatus::Exited(_, code)) => crate::sys::process::exit_now(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => crate::sys::process::exit_now(128 + sig as i32),
            Err(Errno::EINTR) | Ok(_) => continue,
            Err(_) => crate::sys::process::exit_now(125),
        }
    }
}

/// Pid 1 of the sandbox: reaps every process orphaned inside it, and never ends on its
/// own. It dies with its parent (the supervisor, or a bootstrap started by hand): by its
/// parent-death signal, and, for the case its parent died before the signal was armed,
/// by `alive`, a descriptor whose other end only its parent holds, checked once (any
/// event on it, the other end closed, ends the init). The kernel then kills everything
/// left in the namespace.
///
/// It also freezes and thaws the whole run for the supervisor ([`FREEZE`], [`THAW`]):
/// `kill(-1, SIGSTOP)` and `kill(-1, SIGCONT)` reach every process of the namespace but
/// the init itself, whatever its session or process group, in one pass of the kernel.
/// Only the supervisor's requests count: a signal from outside the namespace carries the
/// sender's pid as 0 there, one from a process of the run its pid, which is ignored.
fn run_init(alive: OwnedFd) -> ! {
    if let Ok(name) = CString::new(INIT_NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        crate::sys::process::exit_now(1);
    }
    let mut fds = [PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(0) => {}
        _ => crate::sys::process::exit_now(1),
    }
    drop(alive);
    // The terminal or the pipes of the run are the target's; the init never writes.
    sys::process::close_standard_streams();
    let mut waited = SigSet::empty();
    for sig in [Signal::SIGCHLD, FREEZE, THAW] {
        waited.add(sig);
    }
    let _ = waited.thread_block();
    let signals = nix::sys::signalfd::SignalFd::new(&waited);
    loop {
        let request = match &signals {
            Ok(fd) => match fd.read_signal() {
                Ok(Some(info)) if info.ssi_pid == 0 => Signal::try_from(info.ssi_signo as i32).ok(),
                _ => None,
            },
            // Without a signal descriptor the init still reaps; freezing is not offered.
            Err(_) => waited.wait().ok().filter(|s| *s == Signal::SIGCHLD),
        };
        match request {
            Some(FREEZE) => {
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGSTOP);
            }
            Some(THAW) => {
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGCONT);
            }
            _ => {}
        }
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
}

/// Sent by the supervisor to the sandbox's init: stop every process of the run (the
/// target stopped, and the shell has the terminal back).
pub const FREEZE: Signal = Signal::SIGUSR1;
/// Sent by the supervisor to the sandbox's init: continue every process of the run.
pub const THAW: Signal = Signal::SIGUSR2;

/// The program the target becomes, and what its process inherited already.
#[derive(Clone, Copy)]
struct Exec<'a> {
    program: &'a CString,
    argv: &'a [CString],
    envp: &'a [CString],
    /// The bounding set was emptied by the bootstrap ([`Ahead::prepare`]).
    bounding_dropped: bool,
}

/// Pid 2 of the sandbox, a child of the supervisor: the fresh `/proc`, the remaining
/// layers, then `execve`.
fn become_target(
    m: &sandy_policy::LaunchManifest,
    plan: &plan::EnforcementPlan,
    observer: Option<(seccompiler::BpfProgram, OwnedFd)>,
    exec: &Exec<'_>,
) -> Result<Infallible, ExecFailure> {
    let Exec {
        program,
        argv,
        envp,
        bounding_dropped,
    } = *exec;
    // A /proc of this PID namespace: the host's processes and their command lines are
    // not in it, and the Landlock rule for /proc (opened below) applies to it. The
    // `landlock` tier has no PID namespace: Landlock keeps the host's processes out of
    // ptrace and /proc/PID's private files.
    if m.tier == Tier::Full {
        namespaces_proc()?;
    }
    // The ceilings every process of the run inherits (rlimits, the OOM preference).
    crate::limits::apply(&m.ceilings)?;

    // Signals: the supervisor ignores SIGINT and SIGQUIT while it waits; the target gets
    // the default action back (unless the caller itself ignored them), SIGPIPE's default
    // (the Rust runtime of the bootstrap ignores it), and an empty signal mask.
    for sig in &m.restore_default_signals {
        let sig = match sig {
            RestoredSignal::Interrupt => Signal::SIGINT,
            RestoredSignal::Quit => Signal::SIGQUIT,
        };
        sys::default_signal(sig).map_err(|source| LinuxError::Signals { source })?;
    }
    sys::default_signal(Signal::SIGPIPE).map_err(|source| LinuxError::Signals { source })?;
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(|source| LinuxError::Signals { source })?;

    chdir(m.working_directory.as_path()).map_err(|source| LinuxError::Chdir {
        path: m.working_directory.as_path().to_path_buf(),
        source,
    })?;

    // Layer 2: no_new_privs, then every capability dropped, so even root keeps none.
    nix::sys::prctl::set_no_new_privs().map_err(|source| LinuxError::NoNewPrivs { source })?;
    drop_capabilities(bounding_dropped)?;

    // Layer 3: Landlock. With the host's network (the socket broker), every TCP connect
    // of the sandbox is refused here: the supervisor connects the brokered sockets itself,
    // after checking the destination, so that no race on the call's arguments (another
    // thread swapping the descriptor or the address) can reach a closed address.
    let brokered = m.network == Network::AllowAll && observer.is_some();
    let tcp = match (m.network, m.tier) {
        (Network::AllowAll, _) if brokered => landlock::Tcp::RefuseConnect,
        // Without a network namespace, --block-net is Landlock's and seccomp's.
        (Network::BlockAll, Tier::Landlock) => landlock::Tcp::RefuseAll,
        _ => landlock::Tcp::Open,
    };
    landlock::apply(&plan.landlock_rules, tcp)?;

    // The refusal observer, just before the floor: its listener must reach the
    // supervisor before the first watched call, which would wait for an answer. A failure
    // leaves the target without the observer, never without a layer.
    if let Some((observer, channel)) = observer {
        match seccomp::apply_observer(&observer) {
            // Without the supervisor holding the listener, watched calls would fail
            // (ENOSYS); the hand-over failing means the supervisor is gone, and the
            // parent-death signal ends this process.
            Ok(listener) => relay::hand_over_observer(&channel, &listener)?,
            // Without the broker the run would have no network at all, and without the
            // gate the `landlock` tier would reach every host socket: fail closed.
            Err(e) if m.network == Network::AllowAll || m.tier == Tier::Landlock => {
                return Err(e.into())
            }
            Err(_) => {}
        }
    }

    // Layer 4: seccomp, last, so the setup syscalls above stayed allowed.
    seccomp::apply(&plan.seccomp)?;

    // Layer 5: nothing but stdin, stdout and stderr crosses into the target.
    sys::close_range_cloexec(3).map_err(|source| LinuxError::CloseDescriptors { source })?;

    match execve(program, argv, envp) {
        Ok(never) => match never {},
        Err(errno) => Err(ExecFailure::Exec {
            program: m.program.as_path().to_path_buf(),
            errno,
        }),
    }
}

/// Mounts a fresh procfs at `/proc` (from inside the new PID namespace). The flags the
/// host's /proc carries and a user namespace may not clear (nosuid, nodev, noexec) are
/// set, as the kernel requires.
fn namespaces_proc() -> Result<(), LinuxError> {
    let target = std::path::Path::new("/proc");
    nix::mount::mount(
        Some("proc"),
        target,
        Some("proc"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|source| {
        crate::namespaces::mount_error("cannot mount the sandbox's own /proc on", target, source)
    })
}

/// A failed capability call, as the launch reports it.
fn caps_error(e: caps::errors::CapsError) -> LinuxError {
    LinuxError::Capabilities {
        reason: e.to_string(),
    }
}

/// Empties the capability bounding set when this process may change it (CAP_SETPCAP;
/// without it, it holds no capability a program could gain through the set either).
fn drop_bounding_set() -> Result<(), LinuxError> {
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).map_err(caps_error)? {
        for cap in caps::all() {
            caps::drop(None, CapSet::Bounding, cap).map_err(caps_error)?;
        }
    }
    Ok(())
}

/// Clears the ambient, inheritable, effective and permitted sets, and the bounding set
/// unless the bootstrap emptied it already (`bounding_dropped`, inherited by this
/// process: a bounding set never grows back).
fn drop_capabilities(bounding_dropped: bool) -> Result<(), LinuxError> {
    if !bounding_dropped {
        drop_bounding_set()?;
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_error)?;
    caps::clear(None, CapSet::Inheritable).map_err(caps_error)?;
    // Clears the effective set with the permitted one.
    caps::clear(None, CapSet::Permitted).map_err(caps_error)?;
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

/// Confines the calling process without namespaces or a supervisor: `no_new_privs`, every
/// capability dropped, Landlock with `rules` (every right the pinned ABI knows is handled,
/// so what the rules do not grant is refused; signals and abstract Unix sockets are
/// scoped to the process's own domain), and the seccomp floor. With `block_net`, every
/// TCP connect and bind is refused by Landlock and every IPv4 and IPv6 socket by seccomp.
///
/// It applies to the calling thread and to everything it starts afterwards, and cannot be
/// undone. The process must be single-threaded (checked): other threads would stay
/// unconfined.
pub fn restrict_current_process(
    rules: &[landlock::PathRule],
    block_net: bool,
) -> Result<(), LinuxError> {
    if sys::process::OneThread::check().is_err() {
        return Err(LinuxError::Landlock {
            reason: "the process has several threads (or their number cannot be read); \
                     confine it before it starts any"
                .to_owned(),
        });
    }
    let network = if block_net {
        Network::BlockAll
    } else {
        Network::AllowAll
    };
    // Built before anything is applied: a program that cannot be built applies nothing.
    let program = seccomp::compile_for(network, block_net).map_err(|e| LinuxError::Landlock {
        reason: e.to_string(),
    })?;
    nix::sys::prctl::set_no_new_privs().map_err(|source| LinuxError::NoNewPrivs { source })?;
    drop_capabilities(false)?;
    let tcp = if block_net {
        landlock::Tcp::RefuseAll
    } else {
        landlock::Tcp::Open
    };
    landlock::apply(rules, tcp)?;
    seccomp::apply(&program)
}
