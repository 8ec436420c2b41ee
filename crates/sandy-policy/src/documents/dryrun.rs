//! The `--dry-run` document: the fully resolved launch, each grant with its origin.
//! Environment values never appear in it, only the names Sandy removed or set.

use serde::Serialize;

use crate::model::policy::{
    Access, LocalPort, Network, Origin, Placeholder, PortOrigin, ProfileInfo, ProtectionKind,
    ResolvedPolicy, Scope, ViewKind,
};

/// Bumped whenever a key is added, removed or changes meaning.
pub const DRY_RUN_SCHEMA_VERSION: u32 = 7;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunGrant {
    pub path: String,
    pub access: Access,
    pub scope: Scope,
    pub origin: Origin,
    /// The reason a configuration, profile or policy file gives for the grant; `null`
    /// for every other origin.
    pub reason: Option<String>,
}

/// The project's `sandy.toml` and whether its rules apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunProjectPolicy {
    pub path: String,
    /// The SHA-256 of its content, lowercase hexadecimal.
    pub sha256: String,
    /// `trusted`: the user approved this content (`sandy trust`) and its rules apply,
    /// with the origin `project_file`; `untrusted`: never approved, ignored. (A trusted
    /// file changed since is refused before launch, so no dry run shows one.)
    pub trust: &'static str,
}

/// A configuration, profile or policy file the run's rules come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunPolicyFile {
    /// `config`, `profile_file` or `policy_file`: the origin its rules carry.
    pub origin: Origin,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunProtection {
    pub path: String,
    pub kind: ProtectionKind,
    pub origin: Origin,
    /// Whether the path existed at launch (only existing paths carry a mount).
    pub exists: bool,
    /// What Sandy creates before launch when the path is absent.
    pub placeholder: Option<Placeholder>,
    /// Why it exists when the origin does not say it alone: an agent profile's
    /// protection names the profile (the detected one, or another applied to every run)
    /// and its reason; `null` otherwise.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunView {
    pub target: String,
    /// The name the tool opens, when it leads to `target` through symbolic links.
    pub link: Option<String>,
    pub kind: ViewKind,
    pub origin: Origin,
    pub reason: String,
}

/// A tool cache: copy-on-write over the host cache, or redirected into Sandy's cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunCache {
    pub tool: String,
    /// Where the tool reads the cache.
    pub path: String,
    pub kind: crate::model::caches::CacheKind,
    /// Sandy's directory holding the sandbox's side of it.
    pub layer: String,
    /// The variable Sandy set to point the tool there (redirected caches).
    pub variable: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunCreation {
    pub path: String,
    pub kind: Placeholder,
}

/// An agent state file: the agent writes a private copy; after the run only `persist`
/// goes back to `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunStateFile {
    pub path: String,
    /// Where the agent finds its private copy inside.
    pub copy: String,
    pub format: crate::model::policy::StateFormat,
    /// The key paths that go back (`*` any one key, `{project}` the run's folder only).
    pub persist: Vec<String>,
    /// The real state directory the copy's directory stands in for (linked into it
    /// before launch, what the agent left there moved back after), or `null`.
    pub stand_in_for: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunEnvironment {
    /// Names removed from the caller's environment.
    pub removed: Vec<String>,
    /// Names Sandy set or replaced (the private temporary directory).
    pub set: Vec<String>,
}

/// The egress policy: the proxy's mode and address inside, and every rule with its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunEgress {
    /// `allowlist` (only what the rules allow) or `blocked` (`--block-net`: every request
    /// refused at once).
    pub mode: sandy_net::Mode,
    /// Where the proxy listens inside the sandbox.
    pub proxy: String,
    /// Deny rules first (they win), then allow rules.
    pub rules: Vec<sandy_net::Rule>,
    /// Destinations the agent is known to contact that `--net agent` leaves out.
    pub left_out: Vec<sandy_net::LeftOut>,
    /// Address classes refused unless a rule names the address (`host`: the addresses of
    /// the host's own interfaces).
    pub refused_address_classes: Vec<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeControl {
    /// `Kontext`, `Numbat`, `Numbat collector`, or `hook` (a Kontext or Numbat hook is
    /// listed under its provider's name).
    pub service: String,
    pub enabled: bool,
    pub version: Option<String>,
    /// A hook's executable, by name (granted and protected read-only).
    pub path: Option<String>,
    /// The script a hook's interpreter runs.
    pub script: Option<String>,
    /// The configuration file that registers the hook.
    pub configuration: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforcement {
    pub backend: &'static str,
    /// The kernel's Landlock ABI, which Sandy's pinned ruleset runs on.
    pub landlock_abi: u32,
    /// The layers the bootstrap applies, in order.
    pub layers: Vec<&'static str>,
}

/// The versioned dry-run document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunDocument {
    pub dry_run_schema_version: u32,
    pub command: String,
    pub arguments: Vec<String>,
    pub working_directory: String,
    pub profile: ProfileInfo,
    pub network: Network,
    /// Host TCP ports reachable: open on the host's own addresses (the host's network),
    /// or relayed into a blocked network.
    pub local_port_grants: Vec<LocalPort>,
    /// With the host's network: what of the host itself is closed, and what is open
    /// there anyway; `null` with a blocked network.
    pub host_services: Option<DryRunHostServices>,
    /// The egress proxy; `null` when the network is open.
    pub egress: Option<DryRunEgress>,
    pub file_grants: Vec<DryRunGrant>,
    /// The configuration, profile and policy files read, in the order they apply.
    pub policy_files: Vec<DryRunPolicyFile>,
    /// The project's `sandy.toml`; `null` when there is none.
    pub project_policy: Option<DryRunProjectPolicy>,
    pub protections: Vec<DryRunProtection>,
    /// Host files the sandbox sees as a prepared copy.
    pub views: Vec<DryRunView>,
    /// The agent's absent state directories and files, created before launch.
    pub created_at_launch: Vec<DryRunCreation>,
    /// Agent state files merged back after the run through an allowlist.
    pub state_files: Vec<DryRunStateFile>,
    /// Tool caches the sandbox sees copy-on-write; the host copy never changes.
    pub caches: Vec<DryRunCache>,
    /// Shell and editor history, kept per project in Sandy's state: the host's own
    /// history files are never written, nor read inside; `null` without a home.
    pub history: Option<crate::rules::history::DryRunHistory>,
    /// The agent's state directories, default-deny: which names the sandbox may write
    /// (`writable`, `watched` memory, the `login`) and which it reads (`read_only`);
    /// a name no rule covers is read-only too.
    pub agent_state: Vec<DryRunStateDir>,
    pub environment: DryRunEnvironment,
    pub runtime_controls: Vec<RuntimeControl>,
    pub enforcement: Enforcement,
    /// The run's resource ceilings, each with what holds it on this machine.
    pub ceilings: DryRunCeilings,
    /// The protection tier, and what the weaker one does with each promise.
    pub tier: DryRunTier,
}

/// The dry run's `tier` section: the tier's name and, for the weaker `landlock` tier,
/// each promise of the design it keeps, keeps differently or drops (empty for the full
/// tier, which keeps them all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunTier {
    pub name: crate::model::tier::Tier,
    pub promises: Vec<crate::model::tier::TierPromise>,
}

impl DryRunTier {
    fn new(tier: crate::model::tier::Tier) -> Self {
        DryRunTier {
            name: tier,
            promises: match tier {
                crate::model::tier::Tier::Full => Vec::new(),
                crate::model::tier::Tier::Landlock => {
                    crate::model::tier::LANDLOCK_PROMISES.to_vec()
                }
            },
        }
    }
}

/// One resource ceiling in the dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunCeiling {
    pub value: u64,
    /// `processes` (processes and threads), `bytes`, or `millicpus`.
    pub unit: &'static str,
    pub origin: crate::model::ceilings::CeilingOrigin,
    pub mechanism: crate::model::ceilings::Mechanism,
    /// The kernel's control behind the mechanism (`pids.max`, `RLIMIT_FSIZE`, ...), or
    /// `null` when nothing holds the ceiling.
    pub control: Option<&'static str>,
    /// The flag that changes it.
    pub flag: &'static str,
}

/// The run's resource ceilings (design section 3.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunCeilings {
    pub max_procs: DryRunCeiling,
    pub max_memory: DryRunCeiling,
    pub max_file_size: DryRunCeiling,
    /// The size of each private temporary directory (`/tmp`, `/var/tmp`, `/dev/shm`).
    pub max_tmp: DryRunCeiling,
    /// `null`: no CPU ceiling.
    pub cpu: Option<DryRunCeiling>,
    /// Added to the OOM killer's score of every process of the run.
    pub oom_score_adj: i32,
    /// The run's cgroup (where it would be made, in a dry run), or `null`.
    pub cgroup: Option<String>,
}

impl DryRunCeilings {
    pub fn new(c: &crate::model::ceilings::Ceilings) -> Self {
        use crate::model::ceilings::{Ceiling, Mechanism};
        let one = |c: &Ceiling, unit, flag, control: fn(Mechanism) -> Option<&'static str>| {
            DryRunCeiling {
                value: c.value,
                unit,
                origin: c.origin,
                mechanism: c.mechanism,
                control: control(c.mechanism),
                flag,
            }
        };
        DryRunCeilings {
            max_procs: one(&c.max_procs, "processes", "--max-procs", |m| match m {
                Mechanism::CgroupV2 | Mechanism::CgroupV1 => Some("pids.max"),
                Mechanism::Rlimit => Some("RLIMIT_NPROC"),
                _ => None,
            }),
            max_memory: one(&c.max_memory, "bytes", "--max-memory", |m| match m {
                Mechanism::CgroupV2 => Some("memory.max"),
                Mechanism::CgroupV1 => Some("memory.limit_in_bytes"),
                Mechanism::OomScoreOnly => Some("oom_score_adj"),
                _ => None,
            }),
            max_file_size: one(&c.max_file_size, "bytes", "--max-file-size", |m| {
                (m == Mechanism::Rlimit).then_some("RLIMIT_FSIZE")
            }),
            max_tmp: one(&c.max_tmp, "bytes", "--max-tmp", |m| {
                (m == Mechanism::Tmpfs).then_some("size")
            }),
            cpu: c.cpu.as_ref().map(|cpu| {
                one(cpu, "millicpus", "--cpu", |m| match m {
                    Mechanism::CgroupV2 => Some("cpu.max"),
                    Mechanism::CgroupV1 => Some("cpu.cfs_quota_us"),
                    _ => None,
                })
            }),
            oom_score_adj: c.oom_score_adj,
            cgroup: c.cgroup.clone(),
        }
    }
}

/// The host's own services with the host's network (`sandy_net::local`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunHostServices {
    /// Closed destinations, by kind.
    pub closed: Vec<&'static str>,
    /// Ports open on them anyway (all but the metadata service).
    pub open_ports: Vec<u16>,
    /// The host's name servers, reachable on port 53.
    pub resolvers: Vec<String>,
    /// A port where only the run's own sockets listen is reachable: `open`.
    pub own_listeners: &'static str,
    /// `name_resolution_only`.
    pub udp: &'static str,
}

/// The kinds of closed destination, as the dry run names them.
pub const CLOSED_LOCAL: [&str; 5] = [
    "loopback",
    "unspecified",
    "host_address",
    "bridge",
    "cloud_metadata",
];

/// One agent state directory and its rules ([`crate::rules::statedirs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunStateDir {
    pub profile: String,
    pub root: String,
    pub rules: Vec<crate::model::statedirs::StateRule>,
    pub accounts: Vec<crate::model::statedirs::Account>,
}

/// Kontext (enabled when the supervisor verified an installation), Numbat (its hooks are
/// listed below, service `Numbat`), the Numbat collector when it is a local port grant;
/// then every registered hook Sandy resolved.
fn runtime_controls(policy: &ResolvedPolicy) -> Vec<RuntimeControl> {
    let lossy = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let control = |service: &str, enabled| RuntimeControl {
        service: service.to_owned(),
        enabled,
        version: None,
        path: None,
        script: None,
        configuration: None,
    };
    let kontext = match &policy.kontext {
        Some(k) => RuntimeControl {
            service: "Kontext".to_owned(),
            enabled: true,
            version: k.version.clone(),
            path: Some(lossy(&k.executable)),
            script: None,
            configuration: Some(lossy(&k.configuration)),
        },
        None => control("Kontext", false),
    };
    let mut controls = vec![kontext, control("Numbat", false)];
    if policy
        .local_ports
        .iter()
        .any(|p| p.origin == PortOrigin::NumbatCollector)
    {
        controls.push(control("Numbat collector", true));
    }
    controls.extend(policy.hooks.iter().map(|h| RuntimeControl {
        service: h.service.clone(),
        enabled: true,
        version: None,
        path: Some(lossy(&h.path)),
        script: h.script.as_deref().map(lossy),
        configuration: Some(lossy(&h.configuration)),
    }));
    controls
}

impl DryRunDocument {
    pub fn new(policy: &ResolvedPolicy, landlock_abi: u32) -> Self {
        let lossy = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
        DryRunDocument {
            dry_run_schema_version: DRY_RUN_SCHEMA_VERSION,
            command: lossy(policy.program.as_os_str()),
            arguments: policy.argv.iter().skip(1).map(|a| lossy(a)).collect(),
            working_directory: lossy(policy.working_directory.as_os_str()),
            profile: policy.profile.clone(),
            network: policy.network,
            local_port_grants: policy.local_ports.clone(),
            host_services: (policy.network == Network::AllowAll).then(|| DryRunHostServices {
                closed: CLOSED_LOCAL.to_vec(),
                open_ports: policy.local_ports.iter().map(|p| p.port).collect(),
                resolvers: policy.resolvers.iter().map(|ip| ip.to_string()).collect(),
                own_listeners: "open",
                udp: "name_resolution_only",
            }),
            egress: policy.egress.as_ref().map(|e| DryRunEgress {
                mode: e.policy.mode,
                proxy: format!("127.0.0.1:{}", e.proxy_port),
                rules: e.policy.rules.clone(),
                left_out: e.policy.left_out.clone(),
                refused_address_classes: vec![
                    "loopback",
                    "private",
                    "link_local",
                    "shared_cgnat",
                    "unique_local",
                    "multicast",
                    "unspecified",
                    "reserved",
                    "cloud_metadata",
                    "host",
                ],
            }),
            file_grants: policy
                .grants
                .iter()
                .map(|g| DryRunGrant {
                    path: lossy(g.path.as_os_str()),
                    access: g.access,
                    scope: g.scope,
                    origin: g.origin,
                    reason: policy
                        .files
                        .grant_reasons
                        .iter()
                        .find(|(path, origin, _)| *path == g.path && *origin == g.origin)
                        .map(|(_, _, reason)| reason.clone()),
                })
                .collect(),
            policy_files: policy
                .files
                .sources
                .iter()
                .map(|(origin, path)| DryRunPolicyFile {
                    origin: *origin,
                    path: lossy(path.as_os_str()),
                })
                .collect(),
            project_policy: policy.files.project.as_ref().map(|p| DryRunProjectPolicy {
                path: lossy(p.path.as_os_str()),
                sha256: p.sha256.clone(),
                trust: if p.trusted { "trusted" } else { "untrusted" },
            }),
            protections: policy
                .protections
                .iter()
                .map(|p| DryRunProtection {
                    path: lossy(p.path.as_os_str()),
                    kind: p.kind,
                    origin: p.origin,
                    exists: p.exists,
                    placeholder: p.placeholder,
                    reason: p.reason.clone(),
                })
                .collect(),
            views: policy
                .views
                .iter()
                .map(|v| DryRunView {
                    target: lossy(v.target.as_os_str()),
                    link: v.link.as_ref().map(|l| lossy(l.as_os_str())),
                    kind: v.kind,
                    origin: v.origin,
                    reason: v.reason.clone(),
                })
                .collect(),
            created_at_launch: policy
                .created_at_launch
                .iter()
                .map(|c| DryRunCreation {
                    path: lossy(c.path.as_os_str()),
                    kind: c.kind,
                })
                .collect(),
            state_files: policy
                .state_files
                .iter()
                .map(|f| DryRunStateFile {
                    path: lossy(f.path.as_os_str()),
                    copy: lossy(f.inside.as_os_str()),
                    format: f.format,
                    persist: f.persist.clone(),
                    stand_in_for: f.mirror.as_ref().map(|m| lossy(m.as_os_str())),
                })
                .collect(),
            caches: policy
                .caches
                .iter()
                .map(|c| DryRunCache {
                    tool: c.tool.clone(),
                    path: lossy(c.path.as_os_str()),
                    kind: c.kind,
                    layer: lossy(c.layer.as_os_str()),
                    variable: c.variable.clone(),
                })
                .collect(),
            history: policy.history.as_ref().map(|h| h.dry_run()),
            agent_state: policy
                .agent_state
                .iter()
                .map(|d| DryRunStateDir {
                    profile: d.profile.clone(),
                    root: lossy(d.root.as_os_str()),
                    rules: d.rules.clone(),
                    accounts: d.accounts.clone(),
                })
                .collect(),
            environment: DryRunEnvironment {
                removed: policy.removed_env.clone(),
                set: policy.set_env.clone(),
            },
            runtime_controls: runtime_controls(policy),
            enforcement: Enforcement {
                backend: "linux",
                landlock_abi,
                layers: [
                    (policy.tier == crate::model::tier::Tier::Full)
                        .then_some("user_and_mount_namespaces"),
                    (policy.network == Network::BlockAll
                        && policy.tier == crate::model::tier::Tier::Full)
                        .then_some("network_namespace"),
                    (policy.tier == crate::model::tier::Tier::Landlock)
                        .then_some("child_subreaper"),
                    Some("no_new_privs"),
                    Some("capabilities"),
                    Some("landlock"),
                    Some("seccomp"),
                    Some("close_descriptors"),
                ]
                .into_iter()
                .flatten()
                .collect(),
            },
            ceilings: DryRunCeilings::new(&policy.ceilings),
            tier: DryRunTier::new(policy.tier),
        }
    }
}
