use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How much a grant allows on its path. Write implies create, remove, rename, truncate
/// and execute of what the sandbox itself wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// List a directory's names, nothing else (not read its files): a directory whose
    /// files a start-up file sources by a pattern (`~/.bashrc.d/*`), each of them a view.
    List,
    /// Run programs, nothing else (`--execute`): the kernel's execute right, which
    /// alone lets no file be opened. A program's own file also needs reading (the kernel
    /// opens it for reading to run it, a script's interpreter reads it, the dynamic
    /// loader maps a library): those files get an exact [`Access::ReadExec`] grant each.
    Execute,
    Read,
    ReadExec,
    ReadWrite,
}

impl Access {
    /// The rights, as bits: listing, executing, reading files, writing.
    fn bits(self) -> u8 {
        const LIST: u8 = 1;
        const EXECUTE: u8 = 2;
        const READ: u8 = 4;
        const WRITE: u8 = 8;
        match self {
            Access::List => LIST,
            Access::Execute => EXECUTE,
            Access::Read => LIST | READ,
            Access::ReadExec => LIST | READ | EXECUTE,
            Access::ReadWrite => LIST | READ | EXECUTE | WRITE,
        }
    }

    /// Whether `self` allows at least everything `other` allows (reading does not allow
    /// executing, nor executing reading).
    pub fn covers(self, other: Access) -> bool {
        self.bits() & other.bits() == other.bits()
    }
}

/// Whether a grant covers a directory and everything below it, or one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Exact,
    Subtree,
}

/// Why a grant exists, for the dry-run's explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The system, devices, the private temporary directory, the terminal.
    Baseline,
    /// The current directory.
    Project,
    /// The command, its interpreter, and the toolchains the caller's `PATH` reaches.
    Path,
    /// The agent profile (its state directories and hook registrations).
    Profile,
    /// An explicit `--read` or `--read-write` flag.
    Flag,
    /// The user configuration (`~/.config/sandy/config.toml`).
    Config,
    /// A user profile (`--profile-file`, or `~/.config/sandy/profiles/NAME.toml`).
    ProfileFile,
    /// `--policy-file`.
    PolicyFile,
    /// The project policy: `sandy.toml` at the top of the project, honoured once the
    /// user trusted it (`sandy trust`). Not `Project`, which is the current directory's
    /// own grant.
    ProjectFile,
}

impl Origin {
    /// Whether the user asked for the rule: a flag, or a file of the user's. Such grants
    /// are checked strictly (they must exist and may not expose a sensitive path), and a
    /// writable one gets the protections the project gets.
    pub fn is_explicit(self) -> bool {
        matches!(
            self,
            Origin::Flag
                | Origin::Config
                | Origin::ProfileFile
                | Origin::PolicyFile
                | Origin::ProjectFile
        )
    }
}

/// One filesystem permission.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub path: PathBuf,
    pub access: Access,
    pub scope: Scope,
    pub origin: Origin,
}

/// What a protection does. Protections override every grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtectionKind {
    /// Unreadable: replaced by an empty, read-only mount (a sensitive path).
    Deny,
    /// Readable but immutable, and so are the names leading to it inside a writable tree
    /// (a git hook directory, a git config, an agent's hook settings).
    ReadOnly,
}

/// What Sandy creates on the host before launch when a protected path is absent, so
/// that the path can carry its read-only mount (design promise 5: only inside git
/// directories and agent state directories).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placeholder {
    /// An empty directory (a hooks directory, an agent's `commands/`).
    Directory,
    /// An empty regular file (a config file git reads as empty).
    EmptyFile,
    /// A file holding `{}` (a JSON settings file an agent would fail to parse empty).
    EmptyJsonObject,
}

/// A path the sandbox may not read (`Deny`) or change (`ReadOnly`), whatever the grants.
///
/// `path` is the *name* the protected tool reads (absolute and lexically normalized, never
/// resolved through symlinks): the mount layer pins every component of it below the
/// writable root, symlinks included, and protects what they point to as well.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Protection {
    pub path: PathBuf,
    pub kind: ProtectionKind,
    pub origin: Origin,
    /// Whether the path existed at launch. Only existing paths can carry a mount.
    pub exists: bool,
    /// What to create when the path is absent at launch; `None`: nothing is created, and
    /// a path the run creates is reported afterwards.
    pub placeholder: Option<Placeholder>,
    /// Why it exists, for the dry run, when its origin alone does not say (an agent
    /// profile's protection names the profile and the reason the profile gives).
    #[serde(default)]
    pub reason: Option<String>,
    /// Read-only because the name existed at launch in an agent's state directory and no
    /// rule lets the agent write it ([`crate::rules::statedirs`]): what is protected is whatever
    /// is at the name when the sandbox is set up. A concurrent run may create, swap or
    /// remove such a name (it can write only names that are new in its own run); that
    /// never stops a launch, and a name gone by then is left unprotected (the sweep after
    /// the run and the comparison with the launch state name what appears there).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_launch: bool,
}

/// Something the supervisor creates on the host before launch because the agent's profile
/// declares it as the agent's own state and it is absent (a first launch): a state
/// directory (empty, mode 0700), or an empty file that only carries the bound private copy
/// of a relocated state file (removed after the run while still empty). Design promise 5.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LaunchCreation {
    pub path: PathBuf,
    pub kind: Placeholder,
}

/// An agent state file the sandbox writes as a private copy; after the run only the
/// values at `persist` key paths go back to the host file ([`crate::rules::statemerge`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StateFile {
    /// The host file (absolute, not resolved through symlinks).
    pub path: PathBuf,
    /// The name the agent reads inside, where the private copy is bound (`path`, or a
    /// name in a writable state directory the profile points the agent to).
    pub inside: PathBuf,
    /// Known-safe key paths, dot-separated, `*` for any one key, `{project}` for the
    /// run's working directory.
    pub persist: Vec<String>,
    /// The copy is bound over `inside` (true), or written there as a plain file of
    /// Sandy's own name and removed after the merge (false).
    pub bound: bool,
    /// How the file is parsed and merged.
    pub format: crate::model::policy::StateFormat,
    /// The state directory that the copy's directory stands in for (see
    /// `mirror`), when the agent is pointed at the
    /// copy's directory as a whole.
    pub mirror: Option<PathBuf>,
    /// Names in the stand-in that are an empty directory of the run's own, not a link
    /// (see `private_dirs`).
    #[serde(default)]
    pub private_dirs: Vec<String>,
    /// Top-level keys set only in the copy inside (see
    /// `inside_settings`).
    #[serde(default)]
    pub inside_settings: std::collections::BTreeMap<String, String>,
}

/// How the content of a [`FileView`] is prepared on the host before launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewKind {
    /// A read-only copy of the host file without what looks like a credential (see
    /// [`crate::rules::filter`]), so that the file's other settings still apply inside.
    Filtered,
    /// A writable private copy of the host file. The host file never changes during the
    /// run; afterwards, the profile's state merge decides what, if anything, goes back.
    PrivateCopy,
}

/// A file the sandbox sees in place of a host file: the host file itself is never exposed
/// (a credential-filtered copy) or never written (a private copy).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FileView {
    /// The file the copy is bound over and the exact grant is on: an existing regular
    /// file on the host, with no symbolic link left in its path.
    pub target: PathBuf,
    /// The name the tool opens, when it leads to `target` through symbolic links
    /// (`~/.bashrc -> dotfiles/bashrc`): the copy is seen under both, and the filter
    /// picks its rule from this name.
    pub link: Option<PathBuf>,
    pub kind: ViewKind,
    pub origin: Origin,
    /// Why the view exists, for the dry run.
    pub reason: String,
    /// The rule a filtered copy is made by (not part of the dry-run document, whose
    /// reason says it).
    #[serde(skip)]
    pub rule: FilterRule,
}

/// Which rule a filtered view's copy is made by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FilterRule {
    /// Picked from the name the tool opens (`.bashrc`, `.npmrc`, `settings.xml`...).
    #[default]
    ByName,
    /// Git's configuration rule, whatever the file is called: a file git reads as
    /// configuration (one the user's configuration includes may have any name).
    Git,
}

impl FileView {
    /// The name the tool opens: [`FileView::link`] when there is one, else the target.
    pub fn name(&self) -> &Path {
        self.link.as_deref().unwrap_or(&self.target)
    }
}

/// The network the kernel gives the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The host's network, unrestricted.
    AllowAll,
    /// A private network namespace with only loopback. What leaves it goes through the
    /// supervisor: local-port grants, and Sandy's egress proxy when the run has a network
    /// policy ([`ResolvedPolicy::egress`]: an allowlist, or `--block-net`'s refusals).
    BlockAll,
}

/// Why a local port is reachable: relayed into a blocked network, or open on the host's
/// own addresses with the host's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortOrigin {
    /// `--allow-local-port`.
    Flag,
    /// `--numbat-collector`.
    NumbatCollector,
    /// `ANTHROPIC_BASE_URL` names an endpoint on the local host (host's network only).
    AnthropicBaseUrl,
    /// `OPENAI_BASE_URL` names an endpoint on the local host (host's network only).
    OpenaiBaseUrl,
    /// `GOOGLE_GEMINI_BASE_URL` names an endpoint on the local host (host's network only).
    GoogleGeminiBaseUrl,
    /// The user configuration's `network.local_ports`.
    Config,
    /// A user profile's `network.local_ports`.
    ProfileFile,
    /// The policy file's `network.local_ports`.
    PolicyFile,
    /// The project policy's `network.local_ports`.
    ProjectFile,
}

impl PortOrigin {
    /// What opened the port, for messages: the flag or the variable.
    pub fn describe(self) -> &'static str {
        match self {
            PortOrigin::Flag => "--allow-local-port",
            PortOrigin::NumbatCollector => "--numbat-collector",
            PortOrigin::AnthropicBaseUrl => "ANTHROPIC_BASE_URL",
            PortOrigin::OpenaiBaseUrl => "OPENAI_BASE_URL",
            PortOrigin::GoogleGeminiBaseUrl => "GOOGLE_GEMINI_BASE_URL",
            PortOrigin::Config => "the configuration file",
            PortOrigin::ProfileFile => "the profile file",
            PortOrigin::PolicyFile => "the policy file",
            PortOrigin::ProjectFile => "the project policy",
        }
    }
}

/// A host TCP port the sandbox may connect to: through the supervisor's relay with a
/// blocked network, or on the host's own addresses (otherwise closed) with the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalPort {
    pub port: u16,
    pub origin: PortOrigin,
}

/// Which profile applies, and whether it was detected from the command name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub name: String,
    pub detected: bool,
}

/// A variable kept out of the command's environment because it looks like a credential.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WithheldVar {
    pub name: String,
    /// "its name", or the gitleaks rule its value matches.
    pub why: String,
}

/// The complete, resolved decision for one run. Nothing is decided after this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    /// Absolute path of the program to execute (as found, not canonicalized, so that
    /// tools that look at their own path keep working).
    pub program: PathBuf,
    /// The target's argv, `argv[0]` as typed.
    pub argv: Vec<OsString>,
    pub working_directory: PathBuf,
    /// The target's complete environment.
    pub environment: Vec<(OsString, OsString)>,
    /// Names of variables removed from the caller's environment (never values).
    pub removed_env: Vec<String>,
    /// The variables among them removed because they look like credentials, and why
    /// (never their values).
    pub withheld_env: Vec<WithheldVar>,
    /// Names of variables Sandy set or replaced.
    pub set_env: Vec<String>,
    /// Filesystem grants, deduplicated, in resolution order.
    pub grants: Vec<Grant>,
    pub network: Network,
    /// Host loopback ports relayed into a blocked network.
    pub local_ports: Vec<LocalPort>,
    /// With the host's network: the host's name servers, reached for DNS only (UDP
    /// through the supervisor's relay, TCP on port 53). Empty otherwise.
    pub resolvers: Vec<std::net::IpAddr>,
    /// The egress proxy's policy (`--allow-domain`, `--net agent`, or `--block-net`'s
    /// immediate refusals); `None` when the network is open.
    pub egress: Option<crate::model::egress::Egress>,
    pub profile: ProfileInfo,
    /// Paths that override the grants (masks and read-only paths).
    pub protections: Vec<Protection>,
    /// The private per-run directory on the host, mounted at `/tmp` inside the sandbox.
    pub private_tmp: PathBuf,
    /// The caller's `XDG_RUNTIME_DIR`, replaced by an empty private directory inside.
    pub runtime_dir: Option<PathBuf>,
    /// The run's resource ceilings; what holds each is recorded by the supervisor
    /// ([`crate::model::ceilings::Ceilings::enforce_with`]) before launch.
    pub ceilings: crate::model::ceilings::Ceilings,
    /// Messages for the user before launch (a profile's notice).
    pub notices: Vec<String>,
    /// Files replaced inside by a filtered or private copy prepared before launch.
    pub views: Vec<FileView>,
    /// The agent's absent state directories and files, created before launch.
    pub created_at_launch: Vec<LaunchCreation>,
    /// The agent's state files, merged back after the run.
    pub state_files: Vec<StateFile>,
    /// Tool caches seen copy-on-write (an overlay) or redirected into Sandy's cache.
    pub caches: Vec<crate::model::caches::ToolCache>,
    /// Hooks the agent's configuration registers (runtime controls), each resolved to
    /// its executable (and script) before launch, granted and protected read-only.
    pub hooks: Vec<RuntimeHook>,
    /// A verified Kontext installation (its socket granted); `None` when there is none
    /// or it could not be verified. Set by the supervisor after its preflight.
    pub kontext: Option<crate::model::kontext::KontextControl>,
    /// Every agent's home-level launch files that exist and are left unprotected because
    /// no name of theirs leads into a writable tree (`~/.claude/settings.json` in a
    /// generic run): unwritable inside by these names, but not by another name a file
    /// may have (a hard link in the project), so the supervisor compares those that have
    /// one after the run.
    pub agent_home_files: Vec<PathBuf>,
    /// The agent's state directories and their rules (default-deny, [`crate::rules::statedirs`]).
    pub agent_state: Vec<crate::model::statedirs::AgentStateDir>,
    /// Files the agent writes that its next launch reads (memory, the login): every
    /// change is named after the run, with the reason.
    pub watched: Vec<(PathBuf, String)>,
    /// Writable names of an agent's state inside a directory protected read-only as one
    /// ([`crate::rules::statedirs::walk_at_launch`]): mounted writable again on top of it.
    pub reopened: Vec<PathBuf>,
    /// The protection tier ([`crate::model::tier::Tier`]): the full tier, or the weaker `landlock`
    /// tier the user chose ([`crate::rules::tier::weaken`] made the rest of the policy fit it).
    pub tier: crate::model::tier::Tier,
    /// Shell and editor history, kept in the project's own directory in Sandy's state
    /// ([`crate::rules::history`]); `None` without a home.
    pub history: Option<crate::model::history::History>,
    /// The configuration, profile and policy files the rules come from, in the order
    /// they apply, and the reasons their grants give.
    pub files: FileSources,
}

/// Where the rules of a run's files come from ([`crate::rules::files`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSources {
    /// Each file read, with the origin its rules carry.
    pub sources: Vec<(Origin, PathBuf)>,
    /// The reason of each grant a file adds: (the granted path, as resolved; its origin;
    /// the reason).
    pub grant_reasons: Vec<(PathBuf, Origin, String)>,
    /// The project's `sandy.toml`, when there is one: applied (trusted) or ignored.
    pub project: Option<crate::model::policy::ProjectPolicyState>,
}

impl ResolvedPolicy {
    /// Keeps no history after all (its directory could not be made): the variables that
    /// pointed the tools at it are taken out again, so each tool falls back to its
    /// default in the home, where its writes are refused.
    pub fn drop_history(&mut self) {
        let Some(history) = self.history.take() else {
            return;
        };
        for (name, value) in &history.environment {
            self.environment.retain(|(k, v)| !(k == name && v == value));
            let name = name.to_string_lossy();
            self.set_env.retain(|s| *s != name);
        }
    }

    /// Every host path the sandbox may write below (the project, `--read-write` grants,
    /// state directories, the private `/tmp`): where a name may have been put by a run.
    pub fn writable_paths(&self) -> impl Iterator<Item = &Path> + Clone {
        self.grants
            .iter()
            .filter(|g| g.access == Access::ReadWrite)
            .map(|g| g.path.as_path())
            .chain(self.caches.iter().map(|c| c.path.as_path()))
    }
}

/// A hook a configuration file registers: what runs it, found before launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeHook {
    /// `hook`, or a recognised provider.
    pub service: String,
    /// The executable, by name (not resolved through symlinks).
    pub path: PathBuf,
    /// The script an interpreter runs, by name.
    pub script: Option<PathBuf>,
    /// The configuration file that registers it.
    pub configuration: PathBuf,
}

/// The project policy of a launch: its file, its content's SHA-256, and whether the user
/// trusted this content (its rules then apply; otherwise none of them does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPolicyState {
    pub path: PathBuf,
    /// Lowercase hexadecimal.
    pub sha256: String,
    pub trusted: bool,
}

/// The format of an agent's state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFormat {
    /// A JSON document whose top level is an object.
    Json,
    /// A TOML document (Codex's `config.toml`); merged format-preservingly.
    Toml,
}
