//! [`Policy`]: what a caller asks of a sandbox, before anything is resolved. The library's
//! form of `sandy run`'s options: grants, the network, environment passes, ceilings, the
//! tier, and where a profile or policy file comes from.

use std::ffi::OsString;
use std::path::PathBuf;

pub use sandy_net::Pattern;
pub use sandy_policy::Tier;

/// After a run, the report of the writes the sandbox refused (`sandy run --explain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExplainMode {
    /// No refusal observer at all.
    Off,
    /// About ten lines, nothing when nothing was refused.
    #[default]
    Summary,
    /// Every refused path.
    Full,
}

/// The form of a dry run's document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DryRunFormat {
    /// The versioned JSON document (`schemas/dry-run.v*.json`).
    #[default]
    Json,
    /// A short summary for people.
    Text,
}

/// The caller's policy for a sandbox: everything `sandy run`'s options can ask for, built
/// with chained calls. Nothing is checked or resolved here: that happens when a
/// [`Command`](crate::Command) is prepared, against the host as it is then.
///
/// The default is Sandy's default policy: the project (the working directory) writable,
/// the agent profile detected from the command's name, the host's network with the
/// host's own services closed, the default ceilings, the full tier.
///
/// ```
/// use sandy::Policy;
///
/// let policy = Policy::new()
///     .read("/usr/share/dict")
///     .block_net()
///     .allow_local_port(5432)
///     .max_procs(256);
/// assert!(policy.is_block_net());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub(crate) read: Vec<PathBuf>,
    pub(crate) read_write: Vec<PathBuf>,
    pub(crate) execute: Vec<PathBuf>,
    pub(crate) block_net: bool,
    pub(crate) allow_domain: Vec<Pattern>,
    pub(crate) deny_domain: Vec<Pattern>,
    pub(crate) agent_net: bool,
    pub(crate) net_log: Option<PathBuf>,
    pub(crate) allow_local_port: Vec<u16>,
    pub(crate) numbat_collector: Option<u16>,
    pub(crate) numbat: bool,
    pub(crate) kontext: bool,
    pub(crate) profile: Option<String>,
    pub(crate) profile_file: Option<PathBuf>,
    pub(crate) policy_file: Option<PathBuf>,
    pub(crate) pass_env: Vec<String>,
    pub(crate) max_procs: Option<u64>,
    pub(crate) max_memory: Option<u64>,
    pub(crate) max_file_size: Option<u64>,
    pub(crate) max_tmp: Option<u64>,
    pub(crate) cpu: Option<u64>,
    pub(crate) tier: Option<Tier>,
    pub(crate) explain: ExplainMode,
    pub(crate) verbose: bool,
}

impl Policy {
    /// Sandy's default policy (see [`Policy`]).
    pub fn new() -> Policy {
        Policy::default()
    }

    /// Grants read-only access to an existing path (a directory grants its subtree).
    pub fn read(mut self, path: impl Into<PathBuf>) -> Policy {
        self.read.push(path.into());
        self
    }

    /// Grants read and write access to an existing path.
    pub fn read_write(mut self, path: impl Into<PathBuf>) -> Policy {
        self.read_write.push(path.into());
        self
    }

    /// Lets programs under an existing path run, without reading or writing it otherwise
    /// (`--execute`).
    pub fn execute(mut self, path: impl Into<PathBuf>) -> Policy {
        self.execute.push(path.into());
        self
    }

    /// Blocks the network: a private network namespace with only loopback.
    pub fn block_net(mut self) -> Policy {
        self.block_net = true;
        self
    }

    /// Whether [`Policy::block_net`] was asked for.
    pub fn is_block_net(&self) -> bool {
        self.block_net
    }

    /// Allows a destination through Sandy's egress proxy; everything else is refused
    /// (`--allow-domain`). Parse the pattern with `"api.example.com".parse()`.
    pub fn allow_domain(mut self, pattern: Pattern) -> Policy {
        self.allow_domain.push(pattern);
        self
    }

    /// Refuses a destination even when an allow rule names it (`--deny-domain`).
    pub fn deny_domain(mut self, pattern: Pattern) -> Policy {
        self.deny_domain.push(pattern);
        self
    }

    /// Allows the agent profile's own service endpoints through the proxy (`--net agent`).
    pub fn agent_net(mut self) -> Policy {
        self.agent_net = true;
        self
    }

    /// Appends one JSON line per network decision to `file` (`--net-log`).
    pub fn net_log(mut self, file: impl Into<PathBuf>) -> Policy {
        self.net_log = Some(file.into());
        self
    }

    /// Opens one of the host's own services on `port` (`--allow-local-port`).
    pub fn allow_local_port(mut self, port: u16) -> Policy {
        self.allow_local_port.push(port);
        self
    }

    /// Allows the local port of an operator-started Numbat collector
    /// (`--numbat-collector`).
    pub fn numbat_collector(mut self, port: u16) -> Policy {
        self.numbat_collector = Some(port);
        self
    }

    /// Requires the agent's Numbat hooks to be kept working (`--numbat`).
    pub fn numbat(mut self) -> Policy {
        self.numbat = true;
        self
    }

    /// Requires a healthy Kontext installation (`--kontext`).
    pub fn kontext(mut self) -> Policy {
        self.kontext = true;
        self
    }

    /// Uses this agent profile or user profile instead of the detected one (`--profile`).
    pub fn profile(mut self, name: impl Into<String>) -> Policy {
        self.profile = Some(name.into());
        self
    }

    /// Uses the user profile in this file (`--profile-file`).
    pub fn profile_file(mut self, path: impl Into<PathBuf>) -> Policy {
        self.profile_file = Some(path.into());
        self
    }

    /// Takes the complete policy from this file (`--policy-file`); refused at preparation
    /// together with any grant, network rule, profile or ceiling set here.
    pub fn policy_file(mut self, path: impl Into<PathBuf>) -> Policy {
        self.policy_file = Some(path.into());
        self
    }

    /// Keeps the variable `name` in the command's environment although it looks like a
    /// credential (`--pass-env`).
    pub fn pass_env(mut self, name: impl Into<String>) -> Policy {
        self.pass_env.push(name.into());
        self
    }

    /// Most processes and threads at once (`--max-procs`).
    pub fn max_procs(mut self, n: u64) -> Policy {
        self.max_procs = Some(n);
        self
    }

    /// Most memory, with swap, in bytes (`--max-memory`).
    pub fn max_memory(mut self, bytes: u64) -> Policy {
        self.max_memory = Some(bytes);
        self
    }

    /// Largest file a process may write, in bytes (`--max-file-size`).
    pub fn max_file_size(mut self, bytes: u64) -> Policy {
        self.max_file_size = Some(bytes);
        self
    }

    /// Size of each private temporary directory, in bytes (`--max-tmp`).
    pub fn max_tmp(mut self, bytes: u64) -> Policy {
        self.max_tmp = Some(bytes);
        self
    }

    /// CPU share, in thousandths of a CPU (`--cpu 1.5` is 1500).
    pub fn cpu_millis(mut self, millis: u64) -> Policy {
        self.cpu = Some(millis);
        self
    }

    /// The protection tier; without it, the configuration's, else [`Tier::Full`].
    pub fn tier(mut self, tier: Tier) -> Policy {
        self.tier = Some(tier);
        self
    }

    /// The report of refused writes after the run (default [`ExplainMode::Summary`]).
    pub fn explain(mut self, mode: ExplainMode) -> Policy {
        self.explain = mode;
        self
    }

    /// Prints the run's routine lines whole on standard error (`-v`).
    pub fn verbose(mut self, on: bool) -> Policy {
        self.verbose = on;
        self
    }

    /// The policy with every relative path taken from `base`.
    pub(crate) fn rebased(mut self, base: &std::path::Path) -> Policy {
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        self.read
            .iter_mut()
            .chain(&mut self.read_write)
            .chain(&mut self.execute)
            .chain(&mut self.net_log)
            .chain(&mut self.profile_file)
            .chain(&mut self.policy_file)
            .for_each(rebase);
        self
    }

    /// Whether the policy carries what `--policy-file` excludes (a grant, a network rule,
    /// a profile, an environment pass or a ceiling) beside a policy file.
    pub(crate) fn conflicts_with_policy_file(&self) -> bool {
        self.policy_file.is_some()
            && (!self.read.is_empty()
                || !self.read_write.is_empty()
                || !self.execute.is_empty()
                || self.block_net
                || !self.allow_domain.is_empty()
                || !self.deny_domain.is_empty()
                || self.agent_net
                || !self.allow_local_port.is_empty()
                || self.numbat_collector.is_some()
                || self.profile.is_some()
                || self.profile_file.is_some()
                || !self.pass_env.is_empty()
                || self.max_procs.is_some()
                || self.max_memory.is_some()
                || self.max_file_size.is_some()
                || self.max_tmp.is_some()
                || self.cpu.is_some())
    }
}

/// A command and its arguments, passed through byte for byte.
pub(crate) type Argv = Vec<OsString>;
