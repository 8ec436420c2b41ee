//! The supervisor, in phases: `begin` resolves the policy and prepares the launch (or
//! renders the dry run), `Preparation::spawn` hands the manifest to the bootstrap
//! forked ahead, `Launched::wait` waits for the target and forwards signals, and
//! `Launched::finish` checks what the run changed, reports and cleans up.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use sandy_linux::relay::{receive_listeners, receive_target};
use sandy_linux::sys::ignore_signal_saving;
use sandy_net::relay::spawn_relay;
use sandy_policy::{
    resolve, DryRunDocument, LaunchManifest, RestoredSignal, RunRequest, ValidatedManifest,
};

use crate::agentstate;
use crate::error::{signal_status, SandyError};
use crate::host;
use crate::hostfs::HostFs;
use crate::policy::{Argv, DryRunFormat, ExplainMode, Policy};
use crate::rundir::{RunDir, Stale};
use crate::verify;
use crate::views::PreparedViews;

/// Signals forwarded to the target.
const FORWARDED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The caller's policy and command, resolved against the host: a launch to make, or the
/// dry run's document.
pub(crate) enum Begun {
    /// A launch, prepared ([`Preparation`]).
    Launch(Box<Preparation>),
    /// The dry run's document, rendered; nothing was created or launched.
    Document(String),
}

/// A launch prepared and not started (the inside of [`crate::Prepared`]): the policy
/// resolved, the bootstrap forked and making the namespaces, the run's cgroup made, the
/// state of everything protected recorded, placeholders and cache layers made.
///
/// Dropped without [`Preparation::spawn`], it undoes what it made: the bootstrap is
/// killed and reaped, the cgroup, private directory, placeholders and the agent's mount
/// points made for it are removed.
pub(crate) struct Preparation {
    policy: sandy_policy::ResolvedPolicy,
    request: RunRequest,
    host: sandy_policy::HostContext,
    tier: sandy_policy::Tier,
    explain: ExplainMode,
    net_log: Option<std::path::PathBuf>,
    landlock_abi: u32,
    // Dropped in this order when the launch is abandoned: the bootstrap first, then what
    // it would have used.
    pending: crate::bootstrap::Pending,
    adopting: Option<crate::ceilings::Adopting>,
    cgroup: Option<crate::ceilings::RunCgroup>,
    early: Option<crate::ceilings::Early>,
    placeholders: crate::placeholders::Placeholders,
    created: agentstate::Created,
    snapshot: verify::Snapshot,
    layers: crate::cache::PreparedLayers,
    expected: crate::cache::PreparedLayers,
    runs: std::path::PathBuf,
    private_tmp: RunDir,
}

/// Resolves `command` under `args` against the host: a prepared launch, or with `dry` the
/// dry run's document.
pub(crate) fn begin(
    command: Argv,
    args: Policy,
    dry: Option<DryRunFormat>,
    cwd: Option<&std::path::Path>,
) -> Result<Begun, SandyError> {
    if inside_sandy() {
        return Err(SandyError::Nested);
    }
    if args.conflicts_with_policy_file() {
        return Err(SandyError::Usage(
            "a policy file is the complete policy: no grant, network rule, profile, \
             environment pass or ceiling beside it",
        ));
    }
    let dry_run = dry.is_some();
    // The dry run has no run to fold its routine lines after: it prints them whole.
    crate::say::set_verbose(args.verbose || dry_run);
    // The bootstrap is forked at once and makes the run's namespaces while the policy is
    // resolved (a network namespace alone costs the kernel about a millisecond); it
    // gets the manifest once the policy is known. A dry run launches nothing.
    // The run's cgroup, made before the bootstrap (and so dropped after it: a refused
    // launch removes it once the bootstrap is gone). The bootstrap is moved in beside the
    // policy's resolution (a move waits for the kernel, up to tens of milliseconds on a
    // v1 hierarchy); the limits are written once the policy is known, before the
    // bootstrap starts anything.
    // The user's configuration, profile or policy file, read before anything else: a
    // CPU ceiling it sets needs its controller in the run's cgroup.
    let mut host = host::gather_without_git()?;
    // Another project than the caller's working directory: the run's working directory,
    // and what the caller's relative paths are taken from.
    let args = match cwd {
        Some(dir) => {
            host.cwd = project_dir(&host.cwd, dir)?;
            args.rebased(&host.cwd)
        }
        None => args,
    };
    let mut loaded = crate::policyfiles::load(
        &crate::policyfiles::Asked {
            profile: args.profile.as_deref(),
            profile_file: args.profile_file.as_deref(),
            policy_file: args.policy_file.as_deref(),
            argv0: command
                .first()
                .map_or(std::ffi::OsStr::new(""), |a| a.as_os_str()),
        },
        &host,
    )?;
    // The tier: the caller's, else the configuration's, else the full one.
    let tier = args
        .tier
        .or(loaded.rules.tier.map(|(tier, _)| tier))
        .unwrap_or_default();
    // The refusal report explains what the mounts refused; the `landlock` tier has none
    // (a protected path is restored after the run instead), so it has no report.
    let explain = match tier {
        sandy_policy::Tier::Full => args.explain,
        sandy_policy::Tier::Landlock => ExplainMode::Off,
    };
    let cpu = args.cpu.is_some() || loaded.rules.ceilings.cpu.is_some();
    let mut early = (!dry_run).then(|| crate::ceilings::Offer::probe().make_dirs(cpu));
    let pending = if dry_run {
        None
    } else {
        Some(crate::bootstrap::Pending::fork(
            explain != ExplainMode::Off,
            tier,
        )?)
    };
    let adopting = match (&early, &pending) {
        (Some(early), Some(pending)) => early
            .cgroup()
            .map(|cgroup| cgroup.adopt_in_background(pending.pid())),
        _ => None,
    };
    let read_write: Vec<std::path::PathBuf> = args
        .read_write
        .iter()
        .cloned()
        .chain(
            loaded
                .rules
                .read_write_paths()
                .map(std::path::Path::to_path_buf),
        )
        .collect();
    let (host, walked) = host::walk(host, &read_write, !dry_run)?;
    let tmp_base = crate::rundir::tmp_base(&host);

    let mut request = RunRequest {
        command,
        read: args.read,
        read_write: args.read_write,
        execute: args.execute,
        // Replaced by the real directory below; a dry run creates nothing.
        private_tmp: crate::rundir::unmade_private_tmp(&host),
        block_net: args.block_net,
        allow_local_ports: args.allow_local_port,
        numbat_collector: args.numbat_collector,
        numbat: args.numbat,
        egress: sandy_policy::EgressRequest {
            allow: args.allow_domain,
            deny: args.deny_domain,
            agent: args.agent_net,
            ..Default::default()
        },
        profile: loaded.profile.take(),
        pass_env: args.pass_env,
        ceilings: sandy_policy::CeilingRequest {
            max_procs: args.max_procs,
            max_memory: args.max_memory,
            max_file_size: args.max_file_size,
            max_tmp: args.max_tmp,
            cpu: args.cpu,
            memory_total: crate::ceilings::memory_total(),
        },
        files: std::mem::take(&mut loaded.rules),
        tier,
    };

    let kontext = if args.kontext {
        crate::kontext::Mode::Required
    } else {
        crate::kontext::Mode::Optional
    };
    let Some(mut pending) = pending else {
        return dry_run_document(&request, &host, kontext, dry.unwrap_or_default(), &loaded)
            .map(Begun::Document);
    };
    // The cache overlays of earlier runs' layers, mounted by the bootstrap while the
    // policy is resolved; the policy then says which are used. The resolution asks about
    // the same caches: its view of the filesystem remembers the answers.
    let fs = sandy_policy::Memo::new(&HostFs);
    // The `landlock` tier mounts no overlay: no layer is prepared for it.
    let expected = match tier {
        sandy_policy::Tier::Full => sandy_policy::caches::expected_overlays(&host, &fs),
        sandy_policy::Tier::Landlock => Vec::new(),
    };
    let expected = crate::cache::prepare_expected(&expected);
    pending.overlays_ahead(&expected.manifest_overlays());

    let runs = crate::rundir::make_runs_dir(&tmp_base)?;
    let private_tmp = RunDir::create(&runs)?;
    request.private_tmp = private_tmp.path.clone();
    let mut policy = resolve(&request, &host, &fs)?;
    drop(fs);
    // A file the policy came from that this sandbox could write: refused before
    // anything is created or started.
    loaded.refuse_writable(&policy)?;
    crate::kontext::attach(&mut policy, &host, kontext)?;
    // The run's cgroup, with its limits, and the bootstrap in it before it starts
    // anything: every process of the run is counted there (`ceilings`). A ceiling asked
    // for that nothing here holds refuses the run.
    let cgroup = match early.as_mut() {
        Some(early) => early.limit(&mut policy.ceilings, host.uid)?,
        None => None,
    };
    // Fail before anything is created on the host if this kernel cannot carry the
    // policy. The rules themselves are built once, by the bootstrap.
    let support = sandy_linux::probe();
    sandy_linux::check_support(&support, tier)?;
    announce(&policy);
    // A first launch: the agent's own absent state directories and files (placeholders
    // inside them need them).
    let created = agentstate::create_at_launch(&policy)?;
    // The project's history directory in Sandy's state (shell and editor history): made
    // when absent, never looked into. Without it the run keeps no history.
    if let Some(dir) = policy.history.as_ref().map(|h| h.directory.clone()) {
        if let Err(e) = crate::hostfs::open_or_create(&dir, 0o700) {
            let owner = match e.kind() {
                std::io::ErrorKind::PermissionDenied => crate::error::owner_problem(&dir)
                    .map(|p| format!("; {p}"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            say!(
                "note: shell and editor history is not kept in this run: cannot create \
                 {}: {e}{owner}",
                sandy_policy::text::Tilde(&dir)
            );
            policy.drop_history();
        }
    }
    // The state of everything protected, before anything runs (placeholders included
    // as absent: they are gone again after the run).
    let snapshot = verify::before(&policy, &host, walked);
    // The `landlock` tier mounts nothing on them: no placeholder is made.
    let placeholders = match tier {
        sandy_policy::Tier::Full => crate::placeholders::create(&mut policy)?,
        sandy_policy::Tier::Landlock => {
            crate::placeholders::check_links(&policy)?;
            Default::default()
        }
    };
    // Copy-on-write layers of the tool caches (kept in Sandy's own cache); those not
    // expected are mounted by the bootstrap while the rest of the launch is prepared.
    let layers =
        crate::cache::prepare_layers(&policy.caches, &expected, &policy.working_directory)?;
    pending.overlays_ahead(&layers.beyond(&expected));
    Ok(Begun::Launch(Box::new(Preparation {
        policy,
        request,
        host,
        tier,
        explain,
        net_log: args.net_log,
        landlock_abi: support.landlock_abi.unwrap_or(0),
        pending,
        adopting,
        cgroup,
        early,
        placeholders,
        created,
        snapshot,
        layers,
        expected,
        runs,
        private_tmp,
    })))
}

/// The directory `dir` (relative to `cwd`), canonical, as a run's working directory.
fn project_dir(
    cwd: &std::path::Path,
    dir: &std::path::Path,
) -> Result<std::path::PathBuf, SandyError> {
    let fail = |source| SandyError::File {
        step: "cannot use as the working directory",
        path: cwd.join(dir),
        source,
    };
    let real = crate::hostfs::canonicalize(cwd.join(dir)).map_err(fail)?;
    crate::hostfs::Dir::open(&real).map_err(fail)?;
    Ok(real)
}

impl Preparation {
    /// The resolved policy.
    pub(crate) fn policy(&self) -> &sandy_policy::ResolvedPolicy {
        &self.policy
    }

    /// The policy as the dry run's document (what the sandbox reads with `sandy why`).
    pub(crate) fn document(&self) -> DryRunDocument {
        DryRunDocument::new(&self.policy, self.landlock_abi)
    }

    /// Starts the run: the bootstrap gets its manifest, applies the sandbox and starts
    /// the target. A failure is kept for [`Launched::finish`], after the clean-up: the
    /// checks after the run and the clean-up run whatever happened.
    pub(crate) fn spawn(self) -> Launched {
        let Preparation {
            policy,
            request,
            host,
            tier,
            explain,
            net_log,
            landlock_abi,
            pending,
            adopting,
            cgroup,
            early,
            placeholders,
            created,
            snapshot,
            layers,
            expected,
            runs,
            private_tmp,
        } = self;
        let mut launched = Launched {
            policy,
            request,
            host,
            tier,
            explain,
            signals: None,
            views: None,
            proxy: None,
            dns: None,
            serving: None,
            sweeper: None,
            tmp_watch: None,
            terminal: None,
            started: None,
            ours: None,
            ports: Vec::new(),
            status: Ok(0),
            verified: false,
            changed: None,
            reached: Vec::new(),
            placeholders,
            cgroup,
            early,
            created,
            snapshot: Some(snapshot),
            layers,
            expected,
            private_tmp,
        };
        if let Err(e) = launched.start(pending, adopting, &runs, net_log.as_deref(), landlock_abi) {
            launched.status = Err(e);
        }
        launched
    }
}

/// The signals a run's supervisor takes over, and what they were before.
struct Signals {
    /// Blocked for the wait loop (and forwarded).
    waited: SigSet,
    /// The calling thread's mask before the run.
    old_mask: SigSet,
    /// SIGINT and SIGQUIT's actions before the run (ignored during it).
    old_actions: Vec<(Signal, nix::sys::signal::SigAction)>,
}

impl Signals {
    /// Blocks the signals waited for or forwarded before anything is spawned, so none is
    /// lost; ignores the terminal's SIGINT and SIGQUIT (the target gets them directly).
    /// Returns what the target restores too.
    fn take() -> Result<(Signals, Vec<RestoredSignal>), SandyError> {
        let sys = |step| move |source| SandyError::Sys { step, source };
        let mut waited = SigSet::empty();
        waited.add(Signal::SIGCHLD);
        // Blocking SIGCONT does not keep it from continuing the supervisor; it only makes
        // the continuation visible to the wait loop (job control).
        waited.add(Signal::SIGCONT);
        // SIGTSTP too: the supervisor stops when the target does, after freezing the run
        // ([`stop_with_target`]), never on its own (a Ctrl-Z the target ignores, a
        // shell's, leaves the job running).
        waited.add(Signal::SIGTSTP);
        for sig in FORWARDED {
            waited.add(sig);
        }
        let mut old_mask = SigSet::empty();
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&waited), Some(&mut old_mask))
            .map_err(sys("cannot block signals"))?;
        let mut signals = Signals {
            waited,
            old_mask,
            old_actions: Vec::new(),
        };
        let mut restore = Vec::new();
        for (sig, restored) in [
            (Signal::SIGINT, RestoredSignal::Interrupt),
            (Signal::SIGQUIT, RestoredSignal::Quit),
        ] {
            let old = ignore_signal_saving(sig).map_err(sys("cannot ignore terminal signals"))?;
            if old.handler() != nix::sys::signal::SigHandler::SigIgn {
                restore.push(restored);
            }
            signals.old_actions.push((sig, old));
        }
        Ok((signals, restore))
    }
}

/// Puts the calling thread's signal mask and the terminal signals' actions back as they
/// were before the run (a library caller goes on after it).
impl Drop for Signals {
    fn drop(&mut self) {
        for (sig, action) in &self.old_actions {
            let _ = sandy_linux::sys::restore_signal_action(*sig, action);
        }
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old_mask), None);
    }
}

/// A run started (or whose start failed): the inside of [`crate::Running`] and
/// [`crate::Exited`]. Whatever happened, [`Launched::finish`] checks what the run changed
/// and cleans up.
pub(crate) struct Launched {
    policy: sandy_policy::ResolvedPolicy,
    request: RunRequest,
    host: sandy_policy::HostContext,
    tier: sandy_policy::Tier,
    explain: ExplainMode,
    signals: Option<Signals>,
    views: Option<PreparedViews>,
    proxy: Option<crate::egress::Proxy>,
    dns: Option<sandy_net::dns::DnsRelay>,
    /// The thread that serves the notifier (the observer, the socket broker), finished
    /// once the run's end is checked: it ends on its own when the run's last process
    /// does, and joining it right away would wait for its wakeup.
    serving: Option<crate::explain::Observer>,
    sweeper: Option<Sweeper>,
    /// The run's private temporary directories, held from the target's start to say
    /// after the run whether one was full.
    tmp_watch: Option<crate::ceilings::TmpWatch>,
    /// The user's terminal as it is before the run, put back after it (`tty`).
    terminal: Option<crate::tty::Terminal>,
    started: Option<Started>,
    /// The supervisor's end of the channel to the bootstrap, open until the run is over:
    /// the init looks at it to know that the supervisor is alive.
    ours: Option<std::os::fd::OwnedFd>,
    ports: Vec<u16>,
    /// The run's status so far: the target's, or the failure that ended the launch.
    status: Result<u8, SandyError>,
    /// Whether [`Launched::verify`] has run, what it found changed (the run's id for
    /// `sandy restore`), and the ceilings the run reached, for the report.
    verified: bool,
    changed: Option<String>,
    reached: Vec<String>,
    placeholders: crate::placeholders::Placeholders,
    cgroup: Option<crate::ceilings::RunCgroup>,
    early: Option<crate::ceilings::Early>,
    created: agentstate::Created,
    snapshot: Option<verify::Snapshot>,
    layers: crate::cache::PreparedLayers,
    expected: crate::cache::PreparedLayers,
    private_tmp: RunDir,
}

impl Launched {
    /// The target's pid, once it has started (in the caller's PID namespace).
    pub(crate) fn target(&self) -> Option<u32> {
        self.started
            .as_ref()
            .and_then(|s| u32::try_from(s.target.as_raw()).ok())
    }

    /// Kills the target; [`Launched::wait`] then reaps it and ends every other process
    /// of the run. (The init is killed only after the target is reaped: the init's exit
    /// waits until every process of its PID namespace is reaped, and the target is the
    /// supervisor's child.)
    pub(crate) fn kill(&mut self) {
        if let Some(run) = self.started.as_ref() {
            let _ = kill(run.target, Signal::SIGKILL);
        }
    }

    /// The run's id for `sandy restore`, once [`Launched::verify`] found a change.
    pub(crate) fn changed_run(&self) -> Option<&str> {
        self.changed.as_deref()
    }

    /// Whether the launch failed before or while starting the target.
    pub(crate) fn failed(&self) -> bool {
        self.status.is_err() || self.started.is_none()
    }

    fn start(
        &mut self,
        pending: crate::bootstrap::Pending,
        adopting: Option<crate::ceilings::Adopting>,
        runs: &std::path::Path,
        net_log: Option<&std::path::Path>,
        landlock_abi: u32,
    ) -> Result<(), SandyError> {
        let sys = |step| move |source| SandyError::Sys { step, source };
        let io = |step| move |source| SandyError::Io { step, source };
        let (signals, restore) = Signals::take()?;
        self.signals = Some(signals);
        let policy = &self.policy;
        let tier = self.tier;
        // Copies the sandbox sees in place of host files (filtered or private).
        let writable: Vec<&std::path::Path> = policy.writable_paths().collect();
        // The `landlock` tier binds nothing: its only copies (git's configuration,
        // filtered) are files in the run's own directory.
        let views = match tier {
            sandy_policy::Tier::Full => {
                PreparedViews::prepare(&policy.views, &policy.state_files, runs, &writable)?
            }
            sandy_policy::Tier::Landlock => {
                crate::views::write_tier_copies(
                    &policy.views,
                    self.private_tmp.dir(),
                    &policy.private_tmp,
                    &writable,
                )?;
                PreparedViews::prepare(&[], &[], runs, &writable)?
            }
        };
        drop(writable);
        let views = self.views.insert(views);
        let mut launch = LaunchManifest::from_policy(policy, self.host.supervisor_pid, restore);
        launch.views = views.manifest_views();
        launch.overlays = self.layers.manifest_overlays();
        // The `landlock` tier has no PID namespace: the supervisor holds the run's tree as
        // a child subreaper (every orphan of the run becomes its child) and ends it.
        if tier == sandy_policy::Tier::Landlock {
            nix::sys::prctl::set_child_subreaper(true)
                .map_err(sys("cannot become a child subreaper"))?;
        }
        // The sandbox can read its own policy (`sandy why` inside uses it): rendered once
        // the manifest is sent, while the bootstrap decodes it, and sent after it.
        let document = || -> Result<Option<Vec<u8>>, SandyError> {
            let document = DryRunDocument::new(policy, landlock_abi);
            let document = serde_json::to_vec_pretty(&document).ok();
            if let Some(document) = &document {
                sandy_policy::check_policy_document_size(document.len())?;
            }
            Ok(document)
        };
        let manifest = ValidatedManifest::new(launch)?;
        // The wire form, which the bootstrap reads (within its bound).
        let encoded = manifest.encode()?;
        // Every launch in the weaker tier says so, once everything that could refuse it
        // has passed.
        if tier == sandy_policy::Tier::Landlock {
            crate::tier::announce();
        }

        // Relayed into a blocked network; with the host's network they are connect grants
        // (`connects`), nothing to relay.
        self.ports = match policy.network {
            sandy_policy::Network::BlockAll => policy.local_ports.iter().map(|p| p.port).collect(),
            sandy_policy::Network::AllowAll => Vec::new(),
        };
        // With the host's network: the host's own services closed, decided by the
        // notifier.
        let gate = crate::connects::Gate::from_policy(policy).map_err(io(
            "cannot read the host's interfaces (to close its own services)",
        ))?;
        let proxy = self.proxy.insert(crate::egress::Proxy::prepare(
            policy.egress.as_ref(),
            net_log,
            policy.writable_paths(),
        )?);
        // The refusal observer (`--explain`): explains after the run, never decides.
        let observe = self.explain != ExplainMode::Off;
        let certain = crate::explain::Certain::from_policy(policy);
        let own_run_dirs: Vec<std::ffi::OsString> = [Some(&self.private_tmp), views.dir()]
            .into_iter()
            .flatten()
            .map(|d| d.name().to_os_string())
            .collect();
        self.terminal = crate::tty::Terminal::record();
        if let Some(adopting) = adopting {
            adopting.wait()?;
        }
        // With the host's network, the sandbox's sockets are made by the supervisor (the
        // socket broker, served by the notifier's thread).
        let broker = manifest.manifest().network == sandy_policy::Network::AllowAll;
        // The listeners for local-port grants and the egress proxy (created inside the
        // sandbox's network namespace) come back on the bootstrap's channel, then the
        // target's pid.
        let handed: Vec<u16> = self.ports.iter().copied().chain(proxy.port()).collect();
        // The target and the sandbox's init are started as the supervisor's own children
        // (in the sandbox's PID namespace); the supervisor reaps the init, then kills the
        // bootstrap, whose exit tears the namespaces down while the run's end is checked.
        // The bootstrap was forked at the start (no exec of a second copy of Sandy, and
        // only the channel crossed over) and has made the namespaces meanwhile.
        let (bootstrap, ours) = pending.launch(&encoded, document)?;
        let ours = &*self.ours.insert(ours);
        if !handed.is_empty() {
            if let Some(listeners) = receive_listeners(ours, handed.len())
                .map_err(io("cannot receive the local-port listeners"))?
            {
                for (port, listener) in listeners {
                    if Some(port) == proxy.port() {
                        proxy.start(listener)?;
                        continue;
                    }
                    spawn_relay(port, listener).map_err(io("cannot start the local-port relay"))?;
                }
            }
        }
        // With the host's network, the sockets on the name servers' addresses inside (the
        // run's only way out for UDP), served by the name-resolution relay.
        let resolvers = &manifest.manifest().resolvers;
        if broker && !resolvers.is_empty() {
            if let Some(sockets) = sandy_linux::relay::receive_resolvers(ours, resolvers.len())
                .map_err(io("cannot receive the name servers' sockets"))?
            {
                self.dns = Some(
                    sandy_net::dns::DnsRelay::start(sockets)
                        .map_err(io("cannot start the name-resolution relay"))?,
                );
            }
        }
        // What runs that ended left behind (per-run directories of supervisors that died,
        // the cache overlays' work directories), looked for while the bootstrap builds the
        // sandbox and removed by a thread of its own until the run is over.
        self.sweeper = Sweeper::start(Leftovers {
            run_dirs: Stale::find(runs, &own_run_dirs),
            work_layers: self.layers.layers_with_leftovers(),
        });
        // The notifier's listener comes with the target's pid when the target watches its
        // writes (`--explain`) or its sockets are brokered (the host's network).
        // The `landlock` tier hands every connect over (its gate on Unix sockets).
        let gated = manifest.manifest().tier == sandy_policy::Tier::Landlock;
        let (launched, listener) = match receive_target(ours, observe || broker || gated) {
            Ok(Some((launched, listener))) => (launched, listener),
            // The bootstrap failed before starting the target, and said why: its status
            // is the run's.
            Ok(None) | Err(_) => {
                self.status = Ok(wait_bootstrap(bootstrap));
                return Ok(());
            }
        };
        // No init in the `landlock` tier (pid 0): the supervisor, a child subreaper,
        // holds the run's tree itself.
        let run = self.started.insert(Started {
            target: Pid::from_raw(launched.target),
            init: (launched.init > 0).then(|| Pid::from_raw(launched.init)),
            bootstrap: Some(bootstrap),
            bootstrap_pid: bootstrap,
            subreaper: tier == sandy_policy::Tier::Landlock,
            ended: false,
            target_reaped: false,
        });
        // The listener is dropped with an error: watched calls then fail (ENOSYS), so the
        // run would not be the same; Sandy fails instead (and ends the run).
        self.serving = listener
            .map(|l| crate::explain::Observer::start(l, certain, gate))
            .transpose()
            .map_err(io("cannot start the refusal observer"))?;
        // This run's filtered copies, which the sandbox's mounts now hold.
        views.release_bound();
        self.tmp_watch = Some(crate::ceilings::TmpWatch::open(run.target));
        Ok(())
    }

    /// Waits for the target to end (forwarding signals, following its stops), then ends
    /// everything the run left running. Nothing happens when the launch failed.
    pub(crate) fn wait(&mut self) {
        let (Some(run), Some(signals)) = (self.started.as_mut(), self.signals.as_ref()) else {
            return;
        };
        if self.status.is_ok() {
            self.status = wait_target(run, &signals.waited);
        }
        run.end(&self.ports);
        self.ours = None;
    }

    /// After the run: the checks of what it changed, the agent's state merged, the
    /// report, the clean-up. Returns the run's status (or the failure that ended it).
    pub(crate) fn finish(mut self) -> Result<u8, SandyError> {
        self.verify();
        self.report()
    }

    /// After the run, the checks: what it changed of what is protected (reported, and in
    /// the `landlock` tier put back), the agent's state merged, its mount points and
    /// stray state swept. Returns the id `sandy restore` takes when the run changed
    /// something protected. Once only (later calls return the first answer).
    pub(crate) fn verify(&mut self) -> Option<&str> {
        if self.verified {
            return self.changed.as_deref();
        }
        self.verified = true;
        // A run dropped without a wait (a failed launch): its processes ended first.
        if let Some(run) = self.started.as_mut() {
            run.end(&self.ports);
        }
        self.ours = None;
        if let Some(terminal) = &self.terminal {
            terminal.restore();
        }
        let policy = &self.policy;
        // The ceilings the run reached: a full private directory, a file past its size.
        let mut reached: Vec<String> = self
            .tmp_watch
            .take()
            .map(|w| w.lines(&policy.ceilings))
            .unwrap_or_default();
        if let Ok(code) = self.status {
            reached.extend(crate::ceilings::file_size_line(code, &policy.ceilings));
        }
        if let Some(proxy) = self.proxy.take() {
            proxy.report();
            proxy.stop();
        }
        // The local-port relays' threads, once what the run sent was delivered.
        sandy_net::relay::stop_relays();
        // What the run put where a cache home keeps its configuration and programs.
        self.layers.keep_out_after_run();
        drop(std::mem::take(&mut self.placeholders));
        // Protected paths are verified before the state merge, which may legitimately
        // write one of them (Codex's config.toml, with the trust decision only).
        let changed = self.snapshot.take().and_then(verify::after);
        // Without a read-only mount, what the run changed of a protected path is put back.
        if self.tier == sandy_policy::Tier::Landlock {
            if let Some(run_id) = &changed {
                verify::restore_after_run(run_id, &crate::tier::kept_read_only(policy));
            }
        }
        if let Some(mut views) = self.views.take() {
            agentstate::merge_after_run(policy, &mut views);
        }
        self.created.remove();
        // What the run created in the agent's state that its rules keep read-only.
        let moved = self.host.home.as_deref().map(|home| {
            sandy_policy::caches::sandy_state_dir(home, &self.host)
                .join("moved")
                .join(crate::rundir::random_suffix())
        });
        agentstate::sweep_state_dirs(policy, moved.as_deref());
        self.reached = reached;
        self.changed = changed;
        self.changed.as_deref()
    }

    /// After the checks, the report (on standard error: refused connections, the refusal
    /// report, the ceilings the run reached) and the clean-up (the sweep of earlier runs'
    /// leftovers ended, the bootstrap reaped, the cgroup and private directory removed,
    /// the caller's signals put back). Returns the run's status.
    pub(crate) fn report(mut self) -> Result<u8, SandyError> {
        self.verify();
        let policy = &self.policy;
        let mut reached = std::mem::take(&mut self.reached);
        let observed = self.serving.take().map(crate::explain::Observer::finish);
        if let Some(dns) = self.dns.take() {
            dns.stop();
        }
        if let Some(seen) = &observed {
            for line in crate::connects::report(&seen.refused_connects, 5) {
                say!("{line}");
            }
        }
        if let (true, Some(seen)) = (self.explain != ExplainMode::Off, &observed) {
            crate::explain::report(self.explain, seen, policy, &self.request, &self.host);
        }
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.finish();
        }
        // The bootstrap, killed at the run's end, whose exit tears the namespaces down
        // meanwhile: Sandy leaves no process of its own behind, not even one being reaped.
        if let Some(run) = &self.started {
            run.reap_rest();
        }
        // Once every process of the run is gone: what its cgroup counted, then the cgroup
        // removed. One line per ceiling the run reached.
        if let Some(cgroup) = self.cgroup.take() {
            reached.splice(0..0, cgroup.finish(&policy.ceilings));
        }
        drop(self.early.take());
        for line in &reached {
            say!("{line}");
        }
        // The routine lines not printed (without -v), in one.
        crate::say::fold();
        // The signals as they were before the run, and no longer the run's subreaper.
        drop(self.signals.take());
        if self.tier == sandy_policy::Tier::Landlock {
            let _ = nix::sys::prctl::set_child_subreaper(false);
        }
        drop(self.expected);
        // Removed once no mount of the sandbox holds it: removing a directory that is
        // still a mount point in another namespace waits for the kernel to detach those
        // mounts.
        drop(self.private_tmp);
        self.status
    }
}

/// What earlier runs left behind: per-run directories of other runs, by name (stale
/// unless their lock is held: [`Stale`]), and the cache layers that may hold work
/// directories of overlays whose supervisor is gone (listed by the removing thread).
struct Leftovers {
    run_dirs: Stale,
    work_layers: Vec<crate::hostfs::Dir>,
}

impl Leftovers {
    /// Removes them in turn until `stop` is set (checked between run directories and
    /// before each entry of a work directory); the rest is left to a later run.
    fn remove(&self, stop: &AtomicBool) {
        self.run_dirs.remove(&|| stop.load(Ordering::Relaxed));
        crate::cache::remove_stale_work_dirs(&self.work_layers, stop);
    }
}

/// The removal of what earlier runs left behind ([`Leftovers`]), beside the run, by a
/// thread of its own. Looking is done before, in turn (a listing of the temporary base,
/// and the link count of each of the run's cache layers, whose listing the thread makes):
/// a run that finds nothing to remove starts no thread.
/// The thread starts while the bootstrap builds the sandbox and stops when the run is
/// over: the supervisor waits for the removal in progress only, never for the rest, so
/// that a short command's end is not kept waiting for earlier runs' leftovers.
struct Sweeper {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sweeper {
    fn start(leftovers: Leftovers) -> Option<Sweeper> {
        if leftovers.run_dirs.is_empty() && leftovers.work_layers.is_empty() {
            return None;
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("sweep".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || {
                // Only on CPU time the command leaves idle: a build running beside it
                // keeps both CPUs of a small machine.
                let _ = sandy_linux::sys::idle_priority_for_this_thread();
                leftovers.remove(&stopped)
            });
        match spawned {
            Ok(thread) => Some(Sweeper {
                stop,
                thread: Some(thread),
            }),
            // No thread to spare: left for a later run.
            Err(_) => None,
        }
    }

    /// Stops the removal after the entry in progress, and waits for that one.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread {
            let _ = thread.join();
        }
    }
}

/// `sandy run --dry-run`: the policy resolved, checked against this kernel and printed;
/// nothing is launched.
fn dry_run_document(
    request: &RunRequest,
    host: &sandy_policy::HostContext,
    kontext: crate::kontext::Mode,
    format: DryRunFormat,
    loaded: &crate::policyfiles::Loaded,
) -> Result<String, SandyError> {
    let mut policy = resolve(request, host, &HostFs)?;
    loaded.refuse_writable(&policy)?;
    crate::kontext::attach(&mut policy, host, kontext)?;
    // What would hold each ceiling; nothing is made.
    let offer = crate::ceilings::Offer::probe();
    policy
        .ceilings
        .enforce_with(&offer.available(host.uid))
        .map_err(SandyError::Ceiling)?;
    policy.ceilings.cgroup = offer.where_made();
    announce(&policy);
    let manifest = ValidatedManifest::new(LaunchManifest::from_policy(
        &policy,
        host.supervisor_pid,
        vec![],
    ))?;
    let plan = sandy_linux::plan(&manifest, &sandy_linux::probe())?;
    let doc = DryRunDocument::new(&policy, plan.landlock_abi);
    drop(plan);
    if format == DryRunFormat::Text {
        return Ok(sandy_policy::summary::render_with(
            &policy,
            host.home.as_deref(),
            &crate::views::dropped_counts(&policy),
        ));
    }
    serde_json::to_string_pretty(&doc).map_err(|e| SandyError::Io {
        step: "cannot render the dry-run document",
        source: e.into(),
    })
}

/// One stderr line for a detected profile (routine: folded without -v), the profile's
/// notices, and the variables kept out of the command's environment.
fn announce(policy: &sandy_policy::ResolvedPolicy) {
    if policy.profile.detected {
        tell!(
            format!("profile '{}'", policy.profile.name),
            "using profile '{}' (override with --profile)",
            policy.profile.name
        );
    }
    for notice in &policy.notices {
        say!("{notice}");
    }
    if !policy.withheld_env.is_empty() {
        let names: Vec<&str> = policy
            .withheld_env
            .iter()
            .map(|w| w.name.as_str())
            .collect();
        let count = names.len();
        say!(
            "kept {count} variable{} that look{} like credentials out of the command's \
             environment: {} (--pass-env NAME passes one on purpose)",
            if count == 1 { "" } else { "s" },
            if count == 1 { "s" } else { "" },
            names.join(", ")
        );
    }
}

/// The status of a bootstrap that ended without starting the target.
fn wait_bootstrap(bootstrap: Pid) -> u8 {
    loop {
        match waitpid(bootstrap, None) {
            Ok(WaitStatus::Exited(_, code)) => return u8::try_from(code).unwrap_or(1),
            Ok(WaitStatus::Signaled(_, sig, _)) => return signal_status(sig as i32),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return crate::error::EXIT_SANDY_FAILED,
        }
    }
}

/// The processes of a started run, all children of the supervisor: the target, the
/// sandbox's init (pid 1 of its PID namespace) and the bootstrap that started them (which
/// then holds the sandbox's namespaces until the run's end). `None`: reaped already, so
/// that its pid, free again, is never signalled.
struct Started {
    target: Pid,
    init: Option<Pid>,
    bootstrap: Option<Pid>,
    /// The bootstrap's pid, to reap it once the run is over.
    bootstrap_pid: Pid,
    /// The `landlock` tier: the run's orphans are the supervisor's children, ended with
    /// the run ([`crate::tier::end_descendants`]).
    subreaper: bool,
    /// Whether [`Started::end`] has run.
    ended: bool,
    /// Whether the target's exit has been reaped.
    target_reaped: bool,
}

impl Started {
    /// Reaps what is left of the run's processes once it is over: the bootstrap (killed
    /// by [`Started::end`]), and in the `landlock` tier every orphan of the run that
    /// became the supervisor's child.
    fn reap_rest(&self) {
        while let Err(nix::errno::Errno::EINTR) = waitpid(self.bootstrap_pid, None) {}
        if self.subreaper {
            reap_children();
        }
    }

    /// Takes note that `pid` was reaped.
    fn reaped(&mut self, pid: Pid) {
        if self.init == Some(pid) {
            self.init = None;
        }
        if self.bootstrap == Some(pid) {
            self.bootstrap = None;
        }
    }

    /// After the target's exit: ends everything the run left running, then lets the
    /// local-port relay deliver what the sandbox already sent (the relay threads end
    /// with this process).
    ///
    /// Killing the init makes the kernel kill every process of the run's PID namespace,
    /// however deep or detached (sessions, double forks), and the init is reaped only
    /// once they all are: once it is reaped, nothing of the run runs any more.
    ///
    /// The bootstrap, which holds the sandbox's namespaces, is then killed but not yet
    /// reaped: the namespaces' teardown (every mount of the sandbox unmounted, the caches'
    /// overlays among them) runs in its exit, beside the supervisor's checks after the
    /// run, and [`reap_children`] waits for it at the very end.
    fn end(&mut self, ports: &[u16]) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(init) = self.init.take() {
            let _ = kill(init, Signal::SIGKILL);
            // The init's exit waits until every process of its PID namespace is reaped,
            // and the target is this process's child: a target not reaped yet (the run
            // ended before its exit) is reaped first, or the wait for the init would
            // never end.
            if !self.target_reaped {
                let _ = kill(self.target, Signal::SIGKILL);
                while let Err(nix::errno::Errno::EINTR) = waitpid(self.target, None) {}
                self.target_reaped = true;
            }
            while let Err(nix::errno::Errno::EINTR) = waitpid(init, None) {}
        }
        if let Some(bootstrap) = self.bootstrap.take() {
            let _ = kill(bootstrap, Signal::SIGKILL);
        }
        if self.subreaper {
            crate::tier::end_descendants();
        }
        finish_uploads(ports);
    }
}

/// How often the wait for the target looks at the children without being signalled.
const CHILD_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// Waits for the target, the supervisor's own child: forwards signals, follows its stops
/// (job control), and returns its status.
fn wait_target(run: &mut Started, waited: &SigSet) -> Result<u8, SandyError> {
    let target = run.target;
    loop {
        // The children are also looked at every so often without a signal: a SIGCHLD
        // taken by another thread of the supervisor (one that does not block it) would
        // otherwise leave the run waiting for an exit that already happened.
        let sig = sandy_linux::sys::process::wait_signal_timeout(waited, CHILD_CHECK)
            .map_err(|source| SandyError::Sys {
                step: "cannot wait for signals",
                source,
            })?
            .unwrap_or(Signal::SIGCHLD);
        if sig != Signal::SIGCHLD {
            // The target may already be gone; its exit arrives as SIGCHLD. SIGCONT: the
            // shell resumed the job; the target follows even if it left the job's
            // process group, and so does the rest of the run if it was frozen. SIGTSTP
            // from the terminal reached the target already; sent again it does nothing
            // more (a stop signal pending in a stopped process is dropped when it is
            // continued).
            if sig == Signal::SIGCONT {
                if let Some(init) = run.init {
                    let _ = kill(init, sandy_linux::THAW);
                }
            }
            let _ = kill(target, sig);
            continue;
        }
        // The run's own children only: a library caller's other children are its own
        // to wait for. In the `landlock` tier, the run's orphans are the supervisor's
        // children too (it is their subreaper), with pids of their own: any child then.
        let watched: Vec<Pid> = if run.subreaper {
            vec![Pid::from_raw(-1)]
        } else {
            [Some(target), run.init, run.bootstrap]
                .into_iter()
                .flatten()
                .collect()
        };
        for pid in watched {
            loop {
                match waitpid(pid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
                    Ok(WaitStatus::Exited(p, code)) if p == target => {
                        run.target_reaped = true;
                        return Ok(u8::try_from(code).unwrap_or(1));
                    }
                    Ok(WaitStatus::Signaled(p, sig, _)) if p == target => {
                        run.target_reaped = true;
                        return Ok(signal_status(sig as i32));
                    }
                    Ok(WaitStatus::Stopped(p, sig)) if p == target => {
                        stop_with_target(target, run.init, sig)
                    }
                    // The bootstrap or the init, ended early (killed from outside): without
                    // the init, the kernel kills the target with the namespace, and its
                    // status follows.
                    Ok(WaitStatus::Exited(p, _) | WaitStatus::Signaled(p, _, _)) => {
                        run.reaped(p);
                        if p == pid {
                            break;
                        }
                    }
                    Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => break,
                    Ok(_) => continue,
                    Err(source) => {
                        return Err(SandyError::Sys {
                            step: "cannot wait for the target",
                            source,
                        })
                    }
                }
            }
        }
    }
}

/// The target stopped (`kill -TSTP $$`, an editor's Ctrl-Z in raw mode, a read from the
/// terminal in the background, Ctrl-Z from the terminal): the supervisor stops with it,
/// so that the shell that started Sandy gets its prompt back and sees the job stopped.
/// First the whole run is frozen through the sandbox's init: a process of the run in a
/// session of its own (a daemon) that holds the terminal can then neither read what the
/// user types at their prompt nor write to it while the job is stopped. When the shell
/// continues the supervisor (`fg`, `bg`), the run is thawed and the target continued.
///
/// Sandy never stays stopped where nothing could continue it: without a controlling
/// terminal (a run under `setsid`, a CI job) it does not stop at all, and in an orphaned
/// process group the kernel discards the stop (SIGTSTP, never SIGSTOP, is what the
/// supervisor raises); the run is then continued at once.
fn stop_with_target(target: Pid, init: Option<Pid>, sig: Signal) {
    // A pending SIGCONT means the shell resumed the job after this stop was reported
    // (after a Ctrl-Z of the whole job, the supervisor may look before the target is
    // continued): the stop is over, and the wait loop passes SIGCONT on.
    if sandy_linux::sys::process::signal_pending(Signal::SIGCONT) {
        return;
    }
    if crate::tty::controlling_terminal() {
        let own = match sig {
            Signal::SIGTTIN | Signal::SIGTTOU => sig,
            _ => Signal::SIGTSTP,
        };
        if let Some(init) = init {
            let _ = kill(init, sandy_linux::FREEZE);
        }
        // Blocked for the wait loop: raised and unblocked, it stops the supervisor here
        // (or is discarded, in an orphaned process group), and is blocked again once the
        // supervisor is continued.
        let _ = nix::sys::signal::raise(own);
        if own == Signal::SIGTSTP {
            let mut one = SigSet::empty();
            one.add(own);
            let _ = one.thread_unblock();
            let _ = one.thread_block();
        }
        if let Some(init) = init {
            let _ = kill(init, sandy_linux::THAW);
        }
    }
    let _ = kill(target, Signal::SIGCONT);
}

/// How long, at most, the relay may take after the target's exit to pass on what the
/// sandbox sent through local-port connections.
const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Kills child `pid` and reaps it.
pub(crate) fn kill_and_reap(pid: Pid) {
    let _ = kill(pid, Signal::SIGKILL);
    while let Err(nix::errno::Errno::EINTR) = waitpid(pid, None) {}
}

/// Reaps every child until none is left.
fn reap_children() {
    while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(Pid::from_raw(-1), None) {}
}

/// Lets the local-port relay deliver what the sandbox already sent.
fn finish_uploads(ports: &[u16]) {
    if !ports.is_empty() && !sandy_net::relay::finish_uploads(UPLOAD_GRACE) {
        say!(
            "data the sandbox sent through a local-port relay was still being \
             delivered after {} s; the rest is dropped",
            UPLOAD_GRACE.as_secs()
        );
    }
}

/// Whether this process runs inside a Sandy sandbox: pid 1 of its PID namespace is
/// Sandy's init (a name nothing inside can change: only the init itself could) and
/// `no_new_privs` is set. Neither can be undone from inside, unlike an environment
/// variable.
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
pub(crate) fn inside_sandy() -> bool {
    let init = std::fs::read_to_string("/proc/1/comm")
        .is_ok_and(|c| c.trim_end() == sandy_linux::INIT_NAME);
    init && host::no_new_privs()
}
