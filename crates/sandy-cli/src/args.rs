//! Command-line syntax. Nothing here touches the filesystem or the kernel.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, FromArgMatches, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "sandy",
    version,
    about = "Native process sandboxing for AI coding agents",
    long_about = "Runs a command, and every process it starts, so that it can reach the \
                  current project and nothing else it was not explicitly granted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command inside a native process sandbox.
    Run(RunArgs),
    /// Say which rule decides an access to a path, and the narrowest flag that changes it.
    #[command(
        long_about = "Resolves the same policy `sandy run` would (with the same grant options \
                      and, after `--`, the same command, which selects the profile) and says \
                      whether the sandbox may read, write or execute PATH, the rule and origin \
                      that decide it, and the narrowest flag that would change a refusal, or \
                      why no flag can. Exit status: 0 allowed, 1 refused, 2 usage, 125 error."
    )]
    Why(WhyArgs),
    /// List, or put back, what runs changed in git and agent configuration.
    #[command(
        long_about = "After every run, Sandy compares every protected path and every git \
                      configuration file with its state before the run, reports each change \
                      and keeps the pre-run copy in its state directory \
                      ($XDG_STATE_HOME/sandy/restore, ~/.local/state/sandy/restore by \
                      default). Without RUN, lists the kept copies; with RUN, puts that run's \
                      copies back and, once all are back, forgets the run. Never done \
                      automatically."
    )]
    Restore(RestoreArgs),
    /// Internal: apply the sandbox described by an inherited manifest and exec the target.
    #[command(name = "__bootstrap", hide = true)]
    Bootstrap(BootstrapArgs),
    /// Check whether this machine can enforce Sandy's sandbox, layer by layer.
    #[command(
        long_about = "Probes each layer Sandy enforces (Landlock, seccomp, user, mount and \
                      network namespaces, no_new_privs), each in a fresh child process, and \
                      prints one line per layer with the kernel fact behind it, the fix for \
                      anything missing, and an overall verdict."
    )]
    Doctor(DoctorArgs),
    /// Set up a runtime control (Numbat, Kontext) on the host, outside any sandbox.
    #[command(
        long_about = "Reuses a healthy registration in the agent's configuration, or runs \
                      the provider's own setup command (numbat hook install --agent AGENT; \
                      kontext setup, for claude and codex) and verifies the result the way \
                      `sandy run --numbat` or `--kontext` would. Runs only outside any \
                      sandbox. Exit 0 when set up, 1 when not."
    )]
    Integrations(IntegrationsArgs),
    /// Show the copy-on-write layers of the tool caches (cargo, npm, pip, ...) that
    /// sandboxed runs keep, with their sizes; --clear removes them.
    #[command(
        long_about = "Inside the sandbox, each package-manager or toolchain cache of the home                       is an overlay: the host cache is its read-only lower layer, and what the                       sandbox adds lands in a layer in $XDG_CACHE_HOME/sandy/overlays (kept for                       later sandboxed runs; the host copy never changes). This lists each layer                       with its size and the cache it covers; --clear removes them (do not                       clear while a sandboxed run is using them)."
    )]
    Cache(CacheArgs),
    /// Install Sandy's AppArmor profile, which lets it create user namespaces where
    /// AppArmor restricts them (Ubuntu 23.10 and later).
    #[command(
        long_about = "Writes Sandy's AppArmor profile for this binary's real path to \
                      /etc/apparmor.d (`sandy` for /usr/bin/sandy, as the package installs \
                      it; a name of its own for any other path) and loads it with \
                      apparmor_parser where AppArmor is active. The profile grants user \
                      namespaces to the sandy binary alone, as Ubuntu's profile for bwrap \
                      does; it is narrower than turning \
                      kernel.apparmor_restrict_unprivileged_userns off. Needs root: as \
                      another user it prints the exact sudo commands and exits 1. --print \
                      only prints the profile. Exit status: 0 done, 1 not root, 125 error."
    )]
    Setup(SetupArgs),
    /// Write or check the user configuration (~/.config/sandy/config.toml).
    #[command(
        long_about = "The user configuration holds what every `sandy run` adds: grants, \
                      network rules, local ports, environment passes and ceilings, for \
                      every run or per profile ([profile.NAME]). `init` writes a commented \
                      starter ($XDG_CONFIG_HOME/sandy/config.toml when XDG_CONFIG_HOME is \
                      set); `check` parses it and every user profile strictly and resolves \
                      a run of `true` in the current directory with it. Exit status: 0 \
                      valid, 125 refused (one line naming the file and why)."
    )]
    Config(ConfigArgs),
    /// Trust the project's sandy.toml: show what it adds, confirm, record its hash.
    #[command(
        long_about = "A project's sandy.toml (at the top of the working directory) holds the \
                      grants a repository needs: paths to read, write or run programs from, \
                      domains for an allowlist, local ports. It lies in the project, which \
                      every run may write, so Sandy applies it only while its content is the \
                      one you approved here, outside the sandbox: `sandy trust` shows what it \
                      adds, in words and as dry-run rules, asks on the terminal (or takes \
                      --yes), and records its SHA-256 with the project's path under \
                      ~/.config/sandy/trusted/. Runs ignore an untrusted sandy.toml with one \
                      line, and refuse one changed since it was trusted (exit 125). Exit \
                      status: 0 trusted (or revoked), 1 declined, 2 no terminal to confirm \
                      on without --yes, 125 refused (one line)."
    )]
    Trust(TrustArgs),
    /// Print a shell completion script for bash, zsh or fish.
    #[command(
        long_about = "Prints a completion script generated from Sandy's own option \
                      definitions, so it always matches `--help`. For bash: `source <(sandy \
                      completions bash)`, or save it as \
                      ~/.local/share/bash-completion/completions/sandy; for zsh, as _sandy in \
                      a directory of $fpath; for fish, as \
                      ~/.config/fish/completions/sandy.fish."
    )]
    Completions(CompletionsArgs),
    /// Print the manual page (roff), generated from the same definitions as `--help`.
    #[command(
        long_about = "Prints sandy(1) in roff: `sandy man | man -l -` shows it, and \
                            `sandy man > ~/.local/share/man/man1/sandy.1` installs it."
    )]
    Man,
    /// Internal: exercise one enforcement layer in this (sacrificial) process and report.
    #[command(name = "__probe", hide = true)]
    Probe(ProbeArgs),
    /// Internal: the self-test's escape attempts, run inside a real sandbox.
    #[command(name = "__escape", hide = true)]
    Escape(EscapeArgs),
    /// Internal: wait until killed (an outside process for the self-test to target).
    #[command(name = "__idle", hide = true)]
    Idle,
}

/// `--net MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetMode {
    /// The agent's model API, login and service hosts; not its telemetry, update,
    /// plugin or notice hosts.
    Agent,
}

fn parse_pattern(text: &str) -> Result<sandy_net::Pattern, String> {
    text.parse()
        .map_err(|e: sandy_net::PatternError| e.to_string())
}

fn parse_profile_name(text: &str) -> Result<String, String> {
    if sandy_policy::files::valid_profile_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "a built-in profile ({}) or a user profile's name (letters, digits, - and _)",
            sandy_policy::builtin_names().join(", ")
        ))
    }
}

fn parse_max_procs(text: &str) -> Result<u64, String> {
    use sandy_policy::ceilings::{count_at_least, MIN_MAX_PROCS};
    count_at_least(MIN_MAX_PROCS, text).map_err(|e| e.to_string())
}

fn parse_max_memory(text: &str) -> Result<u64, String> {
    use sandy_policy::ceilings::{size_at_least, MIN_MAX_MEMORY};
    size_at_least(MIN_MAX_MEMORY, text).map_err(|e| e.to_string())
}

fn parse_max_file_size(text: &str) -> Result<u64, String> {
    use sandy_policy::ceilings::{size_at_least, MIN_MAX_FILE_SIZE};
    size_at_least(MIN_MAX_FILE_SIZE, text).map_err(|e| e.to_string())
}

fn parse_max_tmp(text: &str) -> Result<u64, String> {
    use sandy_policy::ceilings::{size_at_least, MIN_MAX_TMP};
    size_at_least(MIN_MAX_TMP, text).map_err(|e| e.to_string())
}

fn parse_cpu(text: &str) -> Result<u64, String> {
    sandy_policy::ceilings::parse_cpus(text).map_err(|e| e.to_string())
}

/// `--tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TierArg {
    Full,
    Landlock,
}

impl From<TierArg> for sandy_policy::Tier {
    fn from(t: TierArg) -> Self {
        match t {
            TierArg::Full => sandy_policy::Tier::Full,
            TierArg::Landlock => sandy_policy::Tier::Landlock,
        }
    }
}

/// `sandy cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Remove every layer.
    #[arg(long)]
    pub clear: bool,
}

#[derive(Debug, Args)]
#[command(
    group = clap::ArgGroup::new("allowlist").args(["allow_domain", "net"]).multiple(true),
    group = clap::ArgGroup::new("private_network")
        .args(["block_net", "allow_domain", "net", "policy_file"])
        .multiple(true),
    after_help = "All options go before `--`; everything after it is the command, passed \
                  through byte for byte.\n\nExit status: the command's own, or 128+N when \
                  signal N killed it; 125 when Sandy itself fails, 126 when the command \
                  cannot be executed, 127 when it is not found, 2 for usage errors."
)]
pub struct RunArgs {
    /// Grant read-only access to an existing path (a directory grants its whole subtree).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Grant read/write access to an existing path.
    #[arg(long = "read-write", value_name = "PATH")]
    pub read_write: Vec<PathBuf>,
    /// Run programs from an existing path without reading or writing it otherwise: its
    /// programs, scripts and shared libraries run; its other files stay unreadable.
    #[arg(long = "execute", value_name = "PATH")]
    pub execute: Vec<PathBuf>,
    /// Block the network: a private network namespace with only loopback, so nothing
    /// outside the sandbox (not even the host's own loopback services) is reachable.
    #[arg(long)]
    pub block_net: bool,
    /// Allow this destination through Sandy's egress proxy (repeatable): a host
    /// (`api.example.com`), its subdomains (`*.example.com`), an IP address or CIDR
    /// network, with an optional `:PORT` (default: 80 and 443). Everything else is
    /// refused; the sandbox gets a private network with only loopback.
    #[arg(
        long = "allow-domain",
        value_name = "PATTERN",
        conflicts_with = "block_net",
        value_parser = parse_pattern
    )]
    pub allow_domain: Vec<sandy_net::Pattern>,
    /// Refuse this destination even when an allow rule names it (repeatable; same
    /// patterns as --allow-domain, but without :PORT every port is refused; deny wins).
    #[arg(
        long = "deny-domain",
        value_name = "PATTERN",
        conflicts_with = "block_net",
        requires = "allowlist",
        value_parser = parse_pattern
    )]
    pub deny_domain: Vec<sandy_net::Pattern>,
    /// `agent`: allow the agent profile's model API (or the host of a configured base URL
    /// such as ANTHROPIC_BASE_URL), login and service endpoints; its telemetry, update,
    /// plugin and notice hosts stay refused, like everything else --allow-domain does not
    /// name (the dry run lists both).
    #[arg(
        long = "net",
        value_name = "MODE",
        value_enum,
        conflicts_with = "block_net"
    )]
    pub net: Option<NetMode>,
    /// Write one JSON line per network decision (time, host, port, decision, rule, bytes
    /// up and down) to FILE (appended). With a network flag or a policy file (ignored
    /// when its network is the host's).
    #[arg(long = "net-log", value_name = "FILE", requires = "private_network")]
    pub net_log: Option<PathBuf>,
    /// Open one of the host's own services: with the host's network, connections to
    /// PORT on the host's loopback, its own addresses and its bridges (closed by
    /// default); with a private network (--block-net, --allow-domain, --net agent),
    /// 127.0.0.1:PORT inside is relayed to the host's 127.0.0.1:PORT (repeatable).
    #[arg(
        long = "allow-local-port",
        value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub allow_local_port: Vec<u16>,
    /// Allow one local port for an operator-started Numbat OTLP/HTTP collector (opened
    /// on the host's own addresses, or relayed into a private network). PORT defaults
    /// to 4318.
    #[arg(
        long = "numbat-collector",
        value_name = "PORT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "4318",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub numbat_collector: Option<u16>,
    /// Require the Numbat hooks registered in the agent's configuration to be recognised
    /// and kept working (exit 125 with the reason and the setup command otherwise).
    /// Without it, a recognised Numbat registration is kept working anyway.
    #[arg(long)]
    pub numbat: bool,
    /// Require a healthy Kontext installation: its hooks registered in the agent's
    /// settings, `kontext doctor --json` healthy, and its daemon's same-user socket,
    /// which stays reachable inside (also under --block-net). Exit 125 with the reason
    /// otherwise. Without it, a verified installation is kept working anyway.
    #[arg(long)]
    pub kontext: bool,
    /// Use this agent profile (claude, codex, gemini, generic, opencode) instead of the
    /// one detected from the command name, or the user profile NAME
    /// (~/.config/sandy/profiles/NAME.toml, which extends a built-in one).
    #[arg(long, value_name = "NAME", value_parser = parse_profile_name)]
    pub profile: Option<String>,
    /// Use the user profile in this file (strict TOML, `extends = "claude"`; see
    /// docs/profile-format.md). Refused where the sandbox could write it.
    #[arg(long = "profile-file", value_name = "PATH", conflicts_with = "profile")]
    pub profile_file: Option<PathBuf>,
    /// Take the complete policy from this file (TOML, or JSON for tools; see
    /// docs/policy-files.md) instead of grant and network flags and the user
    /// configuration. Refused where the sandbox could write it.
    #[arg(
        long = "policy-file",
        value_name = "PATH",
        conflicts_with_all = [
            "read", "read_write", "execute", "block_net", "allow_domain", "deny_domain", "net",
            "allow_local_port", "numbat_collector", "profile", "profile_file", "pass_env",
            "max_procs", "max_memory", "max_file_size", "max_tmp", "cpu",
        ]
    )]
    pub policy_file: Option<PathBuf>,
    /// Keep the variable NAME in the command's environment although its name or value
    /// looks like a credential (repeatable). Without it, such variables are removed
    /// (the agent profile's own model key passes).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Most processes and threads the run may have at once (default 4096). A fork past
    /// it fails with EAGAIN; Sandy names the ceiling after the run.
    #[arg(long = "max-procs", value_name = "N", value_parser = parse_max_procs)]
    pub max_procs: Option<u64>,
    /// Most memory (with swap) the run may use, e.g. 4G (default: three quarters of the
    /// machine's memory). Past it the kernel's OOM killer ends a process of the run.
    #[arg(long = "max-memory", value_name = "SIZE", value_parser = parse_max_memory)]
    pub max_memory: Option<u64>,
    /// Largest file a process of the run may write, e.g. 1G (default 16G). A write past
    /// it fails (EFBIG) and the process gets SIGXFSZ.
    #[arg(long = "max-file-size", value_name = "SIZE", value_parser = parse_max_file_size)]
    pub max_file_size: Option<u64>,
    /// Size of each private temporary directory (/tmp, /var/tmp, /dev/shm), e.g. 2G
    /// (default: half of the machine's memory; they are memory, counted in --max-memory).
    /// A write past it fails with ENOSPC.
    #[arg(long = "max-tmp", value_name = "SIZE", value_parser = parse_max_tmp)]
    pub max_tmp: Option<u64>,
    /// CPU share of the run, in CPUs, e.g. 1.5 (default: no ceiling).
    #[arg(long = "cpu", value_name = "CPUS", value_parser = parse_cpu)]
    pub cpu: Option<u64>,
    /// Protection tier: `full` (namespaces, mounts, Landlock, seccomp) or
    /// `landlock`, the weaker tier for where namespaces are unavailable (containers, CI,
    /// Ubuntu without Sandy's AppArmor profile): Landlock, seccomp and the supervisor
    /// only. Every launch in it says so; docs/tiers.md lists what it keeps and drops.
    /// (default: the configuration's `tier`, else `full`).
    #[arg(long, value_enum, value_name = "TIER")]
    pub tier: Option<TierArg>,
    /// Print the fully resolved launch and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// After the run, report the writes the sandbox refused, each with the flag that
    /// would allow it: `summary` (about ten lines, nothing when nothing was refused),
    /// `full` (every path), or `off` (no observer at all).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = ExplainMode::Summary)]
    pub explain: ExplainMode,
    /// Print the run's full report on stderr: the detected profile, every destination
    /// the network allowed, each cache layer made, each agent setting not kept. Without
    /// it, those fold into one line; refusals, warnings and questions print either way.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// The dry run's form: the versioned JSON document, or a short summary for people.
    #[arg(long, value_enum, default_value_t = DryRunFormat::Json, requires = "dry_run")]
    pub format: DryRunFormat,
    /// The command to run and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `sandy why`: the question (an access to PATH, or a connection) and the launch it is
/// asked about.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("access").args(["write", "exec", "connect"])))]
pub struct WhyArgs {
    /// Ask about a network connection: the target is HOST[:PORT] (port 443 by default).
    #[arg(long)]
    pub connect: bool,
    /// The launch asked about blocks the network (as for `sandy run`).
    #[arg(long)]
    pub block_net: bool,
    /// An `--allow-domain` rule of the launch asked about (as for `sandy run`).
    #[arg(long = "allow-domain", value_name = "PATTERN", value_parser = parse_pattern)]
    pub allow_domain: Vec<sandy_net::Pattern>,
    /// A `--deny-domain` rule of the launch asked about (as for `sandy run`).
    #[arg(long = "deny-domain", value_name = "PATTERN", value_parser = parse_pattern)]
    pub deny_domain: Vec<sandy_net::Pattern>,
    /// `--net agent` of the launch asked about (as for `sandy run`).
    #[arg(long = "net", value_name = "MODE", value_enum)]
    pub net: Option<NetMode>,
    /// An `--allow-local-port` of the launch asked about (as for `sandy run`).
    #[arg(
        long = "allow-local-port",
        value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub allow_local_port: Vec<u16>,
    /// Ask about writing (create, change, remove) instead of reading.
    #[arg(long)]
    pub write: bool,
    /// Ask about executing instead of reading.
    #[arg(long)]
    pub exec: bool,
    /// Print a versioned JSON document.
    #[arg(long)]
    pub json: bool,
    /// A `--read` grant of the launch asked about (as for `sandy run`).
    #[arg(long = "read", value_name = "GRANTED")]
    pub read: Vec<PathBuf>,
    /// A `--read-write` grant of the launch asked about (as for `sandy run`).
    #[arg(long = "read-write", value_name = "GRANTED")]
    pub read_write: Vec<PathBuf>,
    /// An `--execute` grant of the launch asked about (as for `sandy run`).
    #[arg(long = "execute", value_name = "GRANTED")]
    pub execute: Vec<PathBuf>,
    /// The launch asked about uses this profile (built-in, or a user profile's name).
    #[arg(long, value_name = "NAME", value_parser = parse_profile_name)]
    pub profile: Option<String>,
    /// The launch asked about uses the user profile in this file (as for `sandy run`).
    #[arg(long = "profile-file", value_name = "PATH", conflicts_with = "profile")]
    pub profile_file: Option<PathBuf>,
    /// The launch asked about takes its whole policy from this file (as for `sandy run`).
    #[arg(
        long = "policy-file",
        value_name = "PATH",
        conflicts_with_all = [
            "read", "read_write", "execute", "block_net", "allow_domain", "deny_domain", "net",
            "allow_local_port", "profile", "profile_file",
        ]
    )]
    pub policy_file: Option<PathBuf>,
    /// The path asked about (relative to the current directory), or with --connect the
    /// HOST[:PORT].
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// The command of the launch asked about (it selects the profile); `true` by default.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `--explain` of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainMode {
    Off,
    Summary,
    Full,
}

impl From<ExplainMode> for sandy::ExplainMode {
    fn from(mode: ExplainMode) -> Self {
        match mode {
            ExplainMode::Off => sandy::ExplainMode::Off,
            ExplainMode::Summary => sandy::ExplainMode::Summary,
            ExplainMode::Full => sandy::ExplainMode::Full,
        }
    }
}

/// `--format` of a dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRunFormat {
    Json,
    Text,
}

/// Prints the dry-run document. A reader that stops early (`| head`) is not an error:
/// the rest of the document is simply not wanted.
fn print_document(document: &str) -> Result<u8, crate::error::SandyError> {
    match sandy::say::print_document(document) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(source) => Err(crate::error::SandyError::Io {
            step: "cannot write the dry-run document",
            source,
        }),
    }
}

impl From<DryRunFormat> for sandy::DryRunFormat {
    fn from(format: DryRunFormat) -> Self {
        match format {
            DryRunFormat::Json => sandy::DryRunFormat::Json,
            DryRunFormat::Text => sandy::DryRunFormat::Text,
        }
    }
}

impl RunArgs {
    /// `sandy run`: these options as the library's [`sandy::Policy`], and the launch (or
    /// the dry run) through the library's one launch path.
    pub fn run(self) -> Result<u8, crate::error::SandyError> {
        use sandy::Policy;
        /// Sets `value` when the flag was given.
        fn given<T>(policy: Policy, value: Option<T>, set: fn(Policy, T) -> Policy) -> Policy {
            match value {
                Some(value) => set(policy, value),
                None => policy,
            }
        }
        let mut policy = Policy::new()
            .explain(self.explain.into())
            .verbose(self.verbose);
        policy = self.read.into_iter().fold(policy, Policy::read);
        policy = self.read_write.into_iter().fold(policy, Policy::read_write);
        policy = self.execute.into_iter().fold(policy, Policy::execute);
        policy = self
            .allow_domain
            .into_iter()
            .fold(policy, Policy::allow_domain);
        policy = self
            .deny_domain
            .into_iter()
            .fold(policy, Policy::deny_domain);
        policy = self
            .allow_local_port
            .into_iter()
            .fold(policy, Policy::allow_local_port);
        policy = self.pass_env.into_iter().fold(policy, Policy::pass_env);
        policy = given(policy, self.block_net.then_some(()), |p, ()| p.block_net());
        policy = given(
            policy,
            (self.net == Some(NetMode::Agent)).then_some(()),
            |p, ()| p.agent_net(),
        );
        policy = given(policy, self.numbat.then_some(()), |p, ()| p.numbat());
        policy = given(policy, self.kontext.then_some(()), |p, ()| p.kontext());
        policy = given(policy, self.net_log, Policy::net_log);
        policy = given(policy, self.numbat_collector, Policy::numbat_collector);
        policy = given(policy, self.profile, Policy::profile);
        policy = given(policy, self.profile_file, Policy::profile_file);
        policy = given(policy, self.policy_file, Policy::policy_file);
        policy = given(policy, self.max_procs, Policy::max_procs);
        policy = given(policy, self.max_memory, Policy::max_memory);
        policy = given(policy, self.max_file_size, Policy::max_file_size);
        policy = given(policy, self.max_tmp, Policy::max_tmp);
        policy = given(policy, self.cpu, Policy::cpu_millis);
        policy = given(policy, self.tier.map(sandy::Tier::from), Policy::tier);
        let mut command = sandy::Command::from_argv(self.command)?;
        command.policy(policy);
        if self.dry_run {
            return print_document(&command.dry_run(self.format.into())?);
        }
        command.status().map(|status| status.code())
    }

    /// `sandy run ...` parsed by clap with the `run` subcommand's own arguments only,
    /// rather than the whole command tree (every subcommand's arguments and help), which
    /// takes clap about 0.2 ms to build and walk on every launch. `None` when argv is not
    /// `sandy run ...`, or when clap does not parse it this way (a usage error, `--help`):
    /// the caller then parses with the whole tree, which prints exactly what it always
    /// did. The unit tests check that both give the same result wherever this one parses.
    pub fn from_argv(argv: impl Iterator<Item = OsString>) -> Option<Self> {
        let argv: Vec<OsString> = argv.skip(1).collect();
        if argv.first()? != "run" {
            return None;
        }
        let command = RunArgs::augment_args(clap::Command::new("run"));
        let matches = command.try_get_matches_from(argv).ok()?;
        RunArgs::from_arg_matches(&matches).ok()
    }
}

impl BootstrapArgs {
    /// `sandy __bootstrap --manifest-fd N [--relay-fd M]`, exactly as the supervisor
    /// writes it. `None` when argv is not a bootstrap invocation; `Some(Err)` when it is
    /// one in another form, which clap then parses (and explains).
    pub fn from_argv(argv: impl Iterator<Item = OsString>) -> Option<Result<Self, ()>> {
        let mut argv = argv.skip(1);
        if argv.next()? != "__bootstrap" {
            return None;
        }
        let rest: Vec<OsString> = argv.collect();
        let number = |s: &OsString| s.to_str().and_then(|s| s.parse::<i32>().ok()).ok_or(());
        Some(match rest.as_slice() {
            [flag, fd] if flag == "--manifest-fd" => number(fd).map(|manifest_fd| BootstrapArgs {
                manifest_fd,
                relay_fd: None,
                observe: false,
            }),
            [flag, fd, relay_flag, relay, observe @ ..]
                if flag == "--manifest-fd"
                    && relay_flag == "--relay-fd"
                    && (observe.is_empty() || observe == ["--observe"]) =>
            {
                number(fd).and_then(|manifest_fd| {
                    number(relay).map(|relay_fd| BootstrapArgs {
                        manifest_fd,
                        relay_fd: Some(relay_fd),
                        observe: !observe.is_empty(),
                    })
                })
            }
            _ => Err(()),
        })
    }
}

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Trust without asking (after reading what it adds).
    #[arg(long, conflicts_with = "revoke")]
    pub yes: bool,
    /// Stop trusting this project's sandy.toml: runs here ignore it again.
    #[arg(long)]
    pub revoke: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write a commented starter configuration (never over an existing one).
    Init,
    /// Validate the configuration and the user profiles.
    Check,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The run whose pre-run copies to put back, as `sandy restore` lists it.
    pub run: Option<String>,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// The inherited descriptor holding the launch manifest.
    #[arg(long, value_name = "FD")]
    pub manifest_fd: i32,
    /// The inherited socket on which listening sockets for local-port grants are handed
    /// back to the supervisor.
    #[arg(long, value_name = "FD")]
    pub relay_fd: Option<i32>,
    /// Install the refusal observer and hand its listener over on the relay socket.
    #[arg(long, requires = "relay_fd")]
    pub observe: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when `sandy run` can enforce its default sandbox (and, with \
                  --selftest, every escape was blocked); 1 when it cannot (or, with \
                  --selftest, an escape succeeded or could not be tested); 125 when the \
                  doctor itself failed; 2 for usage errors. A missing network namespace \
                  only makes --block-net unavailable and does not fail the verdict."
)]
pub struct DoctorArgs {
    /// Print a versioned JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also run canary escapes (reading a secret, planting a git hook, signalling an
    /// outside process, ...) inside a real `sandy run` and report each as blocked or
    /// ESCAPED.
    #[arg(long)]
    pub selftest: bool,
    /// Testing the self-test: put the secret canary inside the project, where the sandbox
    /// allows reading it, so that the check must report ESCAPED.
    #[arg(long, hide = true, requires = "selftest")]
    pub selftest_unprotected_canary: bool,
    /// With --selftest: run the canaries in this tier (`landlock`: the weaker tier of
    /// `sandy run --tier landlock`, reporting which escapes it stops).
    #[arg(long, value_enum, value_name = "TIER", requires = "selftest")]
    pub tier: Option<TierArg>,
    /// Check the Numbat installation registered in the agent's configuration instead
    /// (exit 0 when `sandy run --numbat` would keep it working, 1 with the reason and the
    /// setup command when not). Never installs or repairs anything.
    #[arg(long, group = "integration", conflicts_with = "selftest")]
    pub numbat: bool,
    /// Check the Kontext installation registered in the agent's configuration instead
    /// (exit 0 and `Kontext integration: available (VERSION)` when `sandy run --kontext`
    /// would keep it working, 1 with the reason and the setup command when not). Runs
    /// only the bounded `kontext doctor --json`; never installs or repairs anything.
    #[arg(long, group = "integration", conflicts_with = "selftest")]
    pub kontext: bool,
    /// The agent whose configuration --numbat or --kontext checks.
    #[arg(long, value_name = "AGENT", default_value = "claude", requires = "integration",
          value_parser = ["claude", "codex", "opencode"])]
    pub agent: String,
}

#[derive(Debug, Args)]
pub struct IntegrationsArgs {
    #[command(subcommand)]
    pub command: IntegrationsCommand,
}

#[derive(Debug, Subcommand)]
pub enum IntegrationsCommand {
    /// Set up PROVIDER's hooks for AGENT (reused when already healthy).
    Setup {
        /// The provider: numbat or kontext (Kontext: claude and codex only).
        #[arg(value_parser = ["numbat", "kontext"])]
        provider: String,
        /// The agent to register the hooks in.
        #[arg(long, value_parser = ["claude", "codex", "opencode"])]
        agent: String,
    },
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The layer to probe.
    #[arg(value_parser = parse_layer)]
    pub layer: sandy_linux::diagnose::Layer,
}

fn parse_layer(name: &str) -> Result<sandy_linux::diagnose::Layer, String> {
    sandy_linux::diagnose::Layer::from_name(name).ok_or_else(|| format!("unknown layer {name}"))
}

/// Each option given is one escape attempt.
#[derive(Debug, Args)]
pub struct EscapeArgs {
    /// Read this file (a secret outside the project).
    #[arg(long, value_name = "PATH")]
    pub read_secret: Option<PathBuf>,
    /// Create this file (outside the project).
    #[arg(long, value_name = "PATH")]
    pub write_outside: Option<PathBuf>,
    /// Create this git hook.
    #[arg(long, value_name = "PATH")]
    pub plant_hook: Option<PathBuf>,
    /// Truncate this protected file.
    #[arg(long, value_name = "PATH")]
    pub truncate: Option<PathBuf>,
    /// ioctl(TIOCSTI) on standard input.
    #[arg(long)]
    pub tiocsti: bool,
    /// Send SIGSTOP to this outside process.
    #[arg(long, value_name = "PID")]
    pub signal_pid: Option<i32>,
    /// PTRACE_ATTACH to, and open /proc/PID/mem of, this outside process.
    #[arg(long, value_name = "PID")]
    pub ptrace_pid: Option<i32>,
    /// Connect to this abstract Unix socket name.
    #[arg(long, value_name = "NAME")]
    pub abstract_socket: Option<String>,
    /// Connect to this pathname Unix socket.
    #[arg(long, value_name = "PATH")]
    pub path_socket: Option<PathBuf>,
    /// Connect to 127.0.0.1:PORT over TCP.
    #[arg(long, value_name = "PORT")]
    pub tcp_port: Option<u16>,
    /// Send a datagram to 127.0.0.1:PORT.
    #[arg(long, value_name = "PORT")]
    pub udp_port: Option<u16>,
    /// The payload of the datagram.
    #[arg(long, value_name = "TEXT", default_value = "sandy-selftest")]
    pub udp_payload: String,
    /// Create an MPTCP socket.
    #[arg(long)]
    pub mptcp: bool,
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> impl Iterator<Item = OsString> {
        a.iter().map(OsString::from).collect::<Vec<_>>().into_iter()
    }

    #[test]
    fn the_bootstrap_fast_path_reads_exactly_what_the_supervisor_writes() {
        let b = BootstrapArgs::from_argv(argv(&["sandy", "__bootstrap", "--manifest-fd", "4"]));
        assert!(matches!(
            b,
            Some(Ok(BootstrapArgs {
                manifest_fd: 4,
                relay_fd: None,
                observe: false
            }))
        ));
        let b = BootstrapArgs::from_argv(argv(&[
            "sandy",
            "__bootstrap",
            "--manifest-fd",
            "4",
            "--relay-fd",
            "5",
        ]));
        assert!(matches!(
            b,
            Some(Ok(BootstrapArgs {
                manifest_fd: 4,
                relay_fd: Some(5),
                observe: false
            }))
        ));
        let b = BootstrapArgs::from_argv(argv(&[
            "sandy",
            "__bootstrap",
            "--manifest-fd",
            "4",
            "--relay-fd",
            "5",
            "--observe",
        ]));
        assert!(matches!(
            b,
            Some(Ok(BootstrapArgs {
                manifest_fd: 4,
                relay_fd: Some(5),
                observe: true
            }))
        ));
        assert!(BootstrapArgs::from_argv(argv(&["sandy", "run", "--", "x"])).is_none());
        assert!(BootstrapArgs::from_argv(argv(&["sandy"])).is_none());
        for bad in [
            &["sandy", "__bootstrap"][..],
            &["sandy", "__bootstrap", "--manifest-fd", "x"],
            &["sandy", "__bootstrap", "--manifest-fd=4"],
            &["sandy", "__bootstrap", "--manifest-fd", "4", "--observe"],
            &[
                "sandy",
                "__bootstrap",
                "--manifest-fd",
                "4",
                "--relay-fd",
                "5",
                "--observe",
                "--observe",
            ],
            &[
                "sandy",
                "__bootstrap",
                "--relay-fd",
                "5",
                "--manifest-fd",
                "4",
            ],
        ] {
            assert!(
                matches!(BootstrapArgs::from_argv(argv(bad)), Some(Err(()))),
                "{bad:?}"
            );
        }
    }

    /// Wherever the `run` fast path parses, it gives what the whole command tree gives;
    /// everything else (usage errors, help, other subcommands) is left to the whole tree.
    #[test]
    fn the_run_fast_path_parses_exactly_as_the_whole_command_tree() {
        // Each command line, and whether the fast path parses it.
        let cases = [
            ("sandy run -- true", true),
            ("sandy run --read /a --read=/b --read-write /c -- x", true),
            ("sandy run --execute /t --execute=/u --read /a -- x", true),
            ("sandy run --policy-file p.toml --execute /t -- x", false),
            ("sandy run --block-net --dry-run -- sh -c --read", true),
            ("sandy run --dry-run --format text -- claude", true),
            (
                "sandy run --allow-domain example.com --net-log l -- x",
                true,
            ),
            ("sandy run --net agent --deny-domain *.evil.test -- x", true),
            (
                "sandy run --block-net --allow-local-port 8080 --numbat -- x",
                true,
            ),
            (
                "sandy run --block-net --numbat-collector=4318 --kontext -- x",
                true,
            ),
            ("sandy run --block-net --numbat-collector -- x", true),
            ("sandy run --profile codex --explain=off -- codex -x", true),
            ("sandy run --profile team -- claude", true),
            ("sandy run --profile-file p.toml --read /a -- x", true),
            ("sandy run --policy-file p.json --net-log l -- x", true),
            (
                "sandy run --policy-file p.json --explain off --kontext -- x",
                true,
            ),
            ("sandy run --policy-file p.json --read /a -- x", false),
            ("sandy run --policy-file p.json --block-net -- x", false),
            (
                "sandy run --policy-file p.json --profile claude -- x",
                false,
            ),
            (
                "sandy run --profile-file p.toml --profile claude -- x",
                false,
            ),
            ("sandy run --profile ../x -- x", false),
            ("sandy run --explain full -- x -- --help", true),
            ("sandy run -- --help", true),
            ("sandy run -- --version -V", true),
            ("sandy", false),
            ("sandy run", false),
            ("sandy run --", false),
            ("sandy run true", false),
            ("sandy run --help", false),
            ("sandy run -h", false),
            ("sandy run --bogus -- x", false),
            ("sandy run --read", false),
            ("sandy run --net-log l -- x", false),
            ("sandy run --net nope -- x", false),
            ("sandy run --allow-local-port http -- x", false),
            ("sandy run --allow-local-port 8080 -- x", true),
            ("sandy run --numbat-collector -- x", true),
            ("sandy run --block-net --numbat-collector 4318 -- x", false),
            ("sandy run --block-net --net agent -- x", false),
            ("sandy run --format text -- x", false),
            ("sandy --version", false),
            ("sandy why /etc -- x", false),
            ("sandy doctor", false),
            ("sandy Run -- x", false),
        ];
        for (line, parses) in cases {
            let a: Vec<OsString> = line.split_whitespace().map(OsString::from).collect();
            let fast = RunArgs::from_argv(a.clone().into_iter());
            let full = Cli::try_parse_from(a);
            match (fast, full) {
                (
                    Some(fast),
                    Ok(Cli {
                        command: Command::Run(full),
                    }),
                ) if parses => {
                    assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{line}");
                }
                // The whole tree refuses these too, or reads them as another subcommand.
                (None, full) if !parses => assert!(
                    !matches!(
                        full,
                        Ok(Cli {
                            command: Command::Run(_)
                        })
                    ),
                    "{line}: only the whole tree parses it as a run"
                ),
                (fast, full) => panic!("{line}: fast {fast:?}, whole tree {full:?}"),
            }
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Only print the profile (to stdout); change nothing.
    #[arg(long)]
    pub print: bool,
    /// The sandy binary the profile is for (default: this one, links resolved).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

/// The shells Sandy writes completions for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}
