//! Policies as files: the user configuration (`~/.config/sandy/config.toml`), user
//! profiles (`--profile-file`, `~/.config/sandy/profiles/NAME.toml`) and the complete
//! caller-controlled policy (`--policy-file`).
//!
//! Every document is strict and versioned: `version = 1`, no key this version does not
//! define (the error names the key and its `file:line:column`), every grant with a reason.
//! A file can only add what a flag could add: the same grants as `--read` and
//! `--read-write` (checked by the same code, so the sensitive set stays denied), extra
//! protections, network rules, local ports, environment passes and ceilings. Nothing in a
//! file names a kernel rule, and nothing in one removes a protection or a mask.
//!
//! This module only parses and decides: the supervisor reads the files (bounded, through
//! its host-file code) and refuses any the sandbox could write ([`check_not_writable`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::host::inspect::PathInspector;
pub use crate::model::policy::ProjectPolicyState;
use crate::model::policy::{Access, Origin, ProtectionKind, ResolvedPolicy};
use crate::model::text::Shown;

/// The one version of the file formats this Sandy reads.
pub const POLICY_FILE_VERSION: u32 = 1;
/// The largest configuration, profile or policy file Sandy reads.
pub const MAX_POLICY_FILE_BYTES: usize = 64 * 1024;
/// The most entries of one list (grants, protections, patterns, ports, names).
pub const MAX_ENTRIES: usize = 512;
/// The longest reason a grant or protection may give.
const MAX_REASON_CHARS: usize = 500;

/// Which kind of file a document is: it decides the keys allowed and the rules' origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileRole {
    /// The user configuration.
    Config,
    /// A user profile (named, or `--profile-file`).
    ProfileFile,
    /// `--policy-file`.
    PolicyFile,
    /// The project policy, `sandy.toml` at the top of the project ([`parse_project_file`]).
    Project,
    /// The record of the user's approval of a project policy (`sandy trust`), under
    /// `~/.config/sandy/trusted/`.
    TrustRecord,
}

impl FileRole {
    /// The origin the rules of such a file carry in the dry run.
    pub fn origin(self) -> Origin {
        match self {
            FileRole::Config => Origin::Config,
            FileRole::ProfileFile => Origin::ProfileFile,
            FileRole::PolicyFile => Origin::PolicyFile,
            FileRole::Project | FileRole::TrustRecord => Origin::ProjectFile,
        }
    }

    /// What the file is called in messages.
    pub fn what(self) -> &'static str {
        match self {
            FileRole::Config => "configuration file",
            FileRole::ProfileFile => "profile file",
            FileRole::PolicyFile => "policy file",
            FileRole::Project => "project policy",
            FileRole::TrustRecord => "trust record",
        }
    }

    /// The name a grant of such a file goes by in a refusal (in place of `--read`).
    pub fn grant_label(self) -> &'static str {
        match self {
            FileRole::Config => "a grant of the configuration file",
            FileRole::ProfileFile => "a grant of the profile file",
            FileRole::PolicyFile => "a grant of the policy file",
            FileRole::Project | FileRole::TrustRecord => "a grant of the project policy",
        }
    }
}

/// Why a file is refused. Each is one line naming the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Not valid TOML or JSON, an unknown key, a value of the wrong type.
    #[error("{}:{line}:{column}: {message}", Shown(path))]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{}: no `version`; this Sandy reads version {POLICY_FILE_VERSION} (add `version = \
         {POLICY_FILE_VERSION}`)",
        Shown(path)
    )]
    NoVersion { path: PathBuf },
    #[error(
        "{}: version {found} is not one this Sandy reads (it reads version \
         {POLICY_FILE_VERSION})",
        Shown(path)
    )]
    Version { path: PathBuf, found: i64 },
    /// A value that parses but means nothing (a relative path, a bad pattern).
    #[error("{}: {key}: {message}", Shown(path))]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error(
        "{}: larger than {MAX_POLICY_FILE_BYTES} bytes, the most Sandy reads for a {what}",
        Shown(path)
    )]
    TooLarge { path: PathBuf, what: &'static str },
    #[error("{}: not a regular file (a {what} must be one)", Shown(path))]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: not UTF-8 text", Shown(path))]
    NotText { path: PathBuf },
    #[error(
        "refusing the {what} {}: the sandbox could write it ({} is writable inside); \
         keep it outside the project and every writable grant",
        Shown(path),
        Shown(writable)
    )]
    Writable {
        what: &'static str,
        path: PathBuf,
        writable: PathBuf,
    },
    #[error(
        "refusing the {what} {}: cannot follow its name ({reason})",
        Shown(path)
    )]
    Unfollowable {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "unknown profile {name:?}: not a built-in one ({available}) and no user profile {}",
        Shown(path)
    )]
    UnknownProfile {
        name: String,
        available: String,
        path: PathBuf,
    },
    #[error(
        "invalid profile name {name:?}: letters, digits, `-` and `_` only, at most 64 \
         characters"
    )]
    ProfileName { name: String },
}

/// A grant a file adds: what `--read` or `--read-write` would add, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileGrant {
    /// Absolute (a leading `~/` already replaced by the home directory).
    pub path: PathBuf,
    /// `Read`, `ReadWrite` or `Execute`: nothing a flag could not grant.
    pub access: Access,
    pub reason: String,
    pub origin: Origin,
}

/// A protection a file adds: masked (`deny`) or read-only, whatever the grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProtection {
    pub path: PathBuf,
    pub kind: ProtectionKind,
    pub reason: String,
    pub origin: Origin,
}

/// A ceiling's value and the file it comes from.
pub type FileCeiling = Option<(u64, Origin)>;

/// The ceilings files set (a later file's value replaces an earlier one's; a flag's
/// replaces both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileCeilings {
    pub max_procs: FileCeiling,
    pub max_memory: FileCeiling,
    pub max_file_size: FileCeiling,
    pub max_tmp: FileCeiling,
    pub cpu: FileCeiling,
}

/// Everything the files of one launch add, each rule with its origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileRules {
    pub grants: Vec<FileGrant>,
    pub protections: Vec<FileProtection>,
    /// `mode = "block"`: as `--block-net`.
    pub block_net: Option<Origin>,
    /// `mode = "agent"`: as `--net agent`.
    pub agent_net: Option<Origin>,
    pub allow: Vec<(sandy_net::Pattern, Origin)>,
    pub deny: Vec<(sandy_net::Pattern, Origin)>,
    pub local_ports: Vec<(u16, Origin)>,
    pub pass_env: Vec<String>,
    pub ceilings: FileCeilings,
    /// `tier = "full"` or `"landlock"` (the configuration only): the tier a run takes
    /// when `--tier` is not given.
    pub tier: Option<(crate::model::tier::Tier, Origin)>,
    /// The files read, in the order they apply.
    pub sources: Vec<(Origin, PathBuf)>,
    /// The project's `sandy.toml`, when there is one, and whether it applies.
    pub project: Option<ProjectPolicyState>,
}

impl FileRules {
    /// Adds `later`'s rules after these (its ceilings replace these ones).
    pub fn extend(&mut self, later: FileRules) {
        self.grants.extend(later.grants);
        self.protections.extend(later.protections);
        self.block_net = self.block_net.or(later.block_net);
        self.agent_net = self.agent_net.or(later.agent_net);
        self.allow.extend(later.allow);
        self.deny.extend(later.deny);
        self.local_ports.extend(later.local_ports);
        self.pass_env.extend(later.pass_env);
        let c = later.ceilings;
        let mine = &mut self.ceilings;
        for (into, from) in [
            (&mut mine.max_procs, c.max_procs),
            (&mut mine.max_memory, c.max_memory),
            (&mut mine.max_file_size, c.max_file_size),
            (&mut mine.max_tmp, c.max_tmp),
            (&mut mine.cpu, c.cpu),
        ] {
            if from.is_some() {
                *into = from;
            }
        }
        if later.tier.is_some() {
            self.tier = later.tier;
        }
        self.sources.extend(later.sources);
        if later.project.is_some() {
            self.project = later.project;
        }
    }

    /// The `--read-write` paths of the files (for the host's scan of writable trees).
    pub fn read_write_paths(&self) -> impl Iterator<Item = &Path> {
        self.grants
            .iter()
            .filter(|g| g.access == Access::ReadWrite)
            .map(|g| g.path.as_path())
    }
}

/// The user configuration: rules for every run, and rules per profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub rules: FileRules,
    /// `[profile.NAME]` sections, by name.
    pub profiles: BTreeMap<String, FileRules>,
}

impl Config {
    /// The rules for a run under the profiles `names` (the built-in one first, then a
    /// user profile extending it): every run's, then each named section's.
    pub fn for_profiles(&self, names: &[&str]) -> FileRules {
        let mut rules = self.rules.clone();
        for name in names {
            if let Some(section) = self.profiles.get(*name) {
                let mut section = section.clone();
                section.sources.clear();
                rules.extend(section);
            }
        }
        rules
    }
}

/// A user profile: the built-in profile it extends, and what it adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserProfile {
    pub extends: String,
    pub description: Option<String>,
    pub rules: FileRules,
}

/// A `--policy-file` document: the complete caller-controlled policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFile {
    /// The built-in profile; detected from the command when absent.
    pub profile: Option<String>,
    pub rules: FileRules,
}

/// The syntax of a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// By the name's extension (`.json`, `.toml`), else by the first character (`{`).
    pub fn of(path: &Path, text: &str) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Format::Json,
            Some("toml") => Format::Toml,
            _ if text.trim_start().starts_with('{') => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// Refuses a file larger than [`MAX_POLICY_FILE_BYTES`].
pub fn check_size(role: FileRole, path: &Path, len: u64) -> Result<(), FileError> {
    if len > MAX_POLICY_FILE_BYTES as u64 {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            what: role.what(),
        });
    }
    Ok(())
}

/// Whether `name` may name a user profile (it becomes a file name).
pub fn valid_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

// The documents as written. Each refuses unknown keys.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    path: String,
    access: RawAccess,
    reason: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawAccess {
    Read,
    ReadWrite,
    Execute,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProtection {
    path: String,
    kind: RawProtectionKind,
    reason: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawProtectionKind {
    Deny,
    ReadOnly,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawNetMode {
    Host,
    Block,
    Agent,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    mode: Option<RawNetMode>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    local_ports: Vec<u16>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvironment {
    #[serde(default)]
    pass: Vec<String>,
}

/// A size or a count, as a number or as text (`"4G"`, `"1.5"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawAmount {
    Number(u64),
    Text(String),
}

impl RawAmount {
    fn text(&self) -> String {
        match self {
            RawAmount::Number(n) => n.to_string(),
            RawAmount::Text(t) => t.clone(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCeilings {
    max_procs: Option<RawAmount>,
    max_memory: Option<RawAmount>,
    max_file_size: Option<RawAmount>,
    max_tmp: Option<RawAmount>,
    cpu: Option<RawAmount>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfigSection {
    #[serde(default)]
    grants: Vec<RawGrant>,
    #[serde(default)]
    protections: Vec<RawProtection>,
    network: Option<RawNetwork>,
    environment: Option<RawEnvironment>,
    ceilings: Option<RawCeilings>,
    tier: Option<crate::model::tier::Tier>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[allow(dead_code)] // checked before, by `version_of`
    version: u32,
    #[serde(default)]
    grants: Vec<RawGrant>,
    #[serde(default)]
    protections: Vec<RawProtection>,
    network: Option<RawNetwork>,
    environment: Option<RawEnvironment>,
    ceilings: Option<RawCeilings>,
    /// The protection tier every run takes unless `--tier` says otherwise.
    tier: Option<crate::model::tier::Tier>,
    #[serde(default)]
    profile: BTreeMap<String, RawConfigSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfileFile {
    #[allow(dead_code)] // checked before, by `version_of`
    version: u32,
    extends: String,
    description: Option<String>,
    #[serde(default)]
    grants: Vec<RawGrant>,
    #[serde(default)]
    protections: Vec<RawProtection>,
    network: Option<RawNetwork>,
    environment: Option<RawEnvironment>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicyFile {
    #[allow(dead_code)] // checked before, by `version_of`
    version: u32,
    profile: Option<String>,
    #[serde(default)]
    grants: Vec<RawGrant>,
    #[serde(default)]
    protections: Vec<RawProtection>,
    network: Option<RawNetwork>,
    environment: Option<RawEnvironment>,
    ceilings: Option<RawCeilings>,
}

/// The project policy: only what a repository needs and a flag could add.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProjectFile {
    #[allow(dead_code)] // checked before, by `version_of`
    version: u32,
    #[serde(default)]
    grants: Vec<RawGrant>,
    network: Option<RawProjectNetwork>,
}

/// A project's network additions: domains for an allowlist the run has, local ports.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProjectNetwork {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    local_ports: Vec<u16>,
}

/// Only the version, read before the strict parse (a newer file's new keys are then
/// reported as a version it does not read, not as unknown keys).
#[derive(Debug, Deserialize)]
struct VersionOnly {
    version: Option<i64>,
}

/// Parses the user configuration at `path` (for messages); `home` replaces `~/`.
pub fn parse_config(text: &str, path: &Path, home: Option<&Path>) -> Result<Config, FileError> {
    let raw: RawConfig = document(text, path)?;
    let origin = Origin::Config;
    let cx = Cx {
        path,
        home,
        origin,
        relative_to: None,
    };
    let mut rules = cx.rules(
        "",
        raw.grants,
        raw.protections,
        raw.network,
        raw.environment,
        raw.ceilings,
    )?;
    rules.tier = raw.tier.map(|t| (t, origin));
    rules.sources.push((origin, path.to_path_buf()));
    let mut profiles = BTreeMap::new();
    for (name, section) in raw.profile {
        if !valid_profile_name(&name) {
            return Err(cx.invalid(
                &format!("profile.{name}"),
                "a profile name has letters, digits, `-` and `_` only".to_owned(),
            ));
        }
        let prefix = format!("profile.{name}.");
        let mut rules = cx.rules(
            &prefix,
            section.grants,
            section.protections,
            section.network,
            section.environment,
            section.ceilings,
        )?;
        rules.tier = section.tier.map(|t| (t, origin));
        profiles.insert(name, rules);
    }
    Ok(Config { rules, profiles })
}

/// Parses a user profile at `path`; `builtin` lists the profiles it may extend.
pub fn parse_profile_file(
    text: &str,
    path: &Path,
    home: Option<&Path>,
    builtin: &[&str],
) -> Result<UserProfile, FileError> {
    let raw: RawProfileFile = document(text, path)?;
    let origin = Origin::ProfileFile;
    let cx = Cx {
        path,
        home,
        origin,
        relative_to: None,
    };
    if !builtin.contains(&raw.extends.as_str()) {
        return Err(cx.invalid(
            "extends",
            format!(
                "{:?} is not a built-in profile ({})",
                raw.extends,
                builtin.join(", ")
            ),
        ));
    }
    let mut rules = cx.rules(
        "",
        raw.grants,
        raw.protections,
        raw.network,
        raw.environment,
        None,
    )?;
    rules.sources.push((origin, path.to_path_buf()));
    Ok(UserProfile {
        extends: raw.extends,
        description: raw.description,
        rules,
    })
}

/// Parses a `--policy-file` document (TOML or JSON, by [`Format::of`]).
pub fn parse_policy_file(
    text: &str,
    path: &Path,
    home: Option<&Path>,
    builtin: &[&str],
) -> Result<PolicyFile, FileError> {
    let raw: RawPolicyFile = document(text, path)?;
    let origin = Origin::PolicyFile;
    let cx = Cx {
        path,
        home,
        origin,
        relative_to: None,
    };
    if let Some(profile) = &raw.profile {
        if !builtin.contains(&profile.as_str()) {
            return Err(cx.invalid(
                "profile",
                format!(
                    "{profile:?} is not a built-in profile ({})",
                    builtin.join(", ")
                ),
            ));
        }
    }
    let mut rules = cx.rules(
        "",
        raw.grants,
        raw.protections,
        raw.network,
        raw.environment,
        raw.ceilings,
    )?;
    rules.sources.push((origin, path.to_path_buf()));
    Ok(PolicyFile {
        profile: raw.profile,
        rules,
    })
}

/// The project policy's name, at the top of the project.
pub const PROJECT_FILE_NAME: &str = "sandy.toml";

/// Parses a project policy (`sandy.toml`, TOML only) at `path`: `version`, `grants`
/// (`read`, `read_write`, `execute`; paths absolute, below `~/`, or relative to
/// `project`, such as `../sibling`), and `[network]` with `allow` and `local_ports`.
/// Nothing else: no protection, mask, network mode, deny rule, environment pass or
/// ceiling, each of which a repository has no business choosing for its user.
pub fn parse_project_file(
    text: &str,
    path: &Path,
    home: Option<&Path>,
    project: &Path,
) -> Result<FileRules, FileError> {
    if Format::of(path, text) != Format::Toml {
        return Err(FileError::Invalid {
            path: path.to_path_buf(),
            key: "version".to_owned(),
            message: "a project policy is TOML".to_owned(),
        });
    }
    let raw: RawProjectFile = document(text, path)?;
    let origin = Origin::ProjectFile;
    let cx = Cx {
        path,
        home,
        origin,
        relative_to: Some(project),
    };
    let network = raw.network.map(|n| RawNetwork {
        mode: None,
        allow: n.allow,
        deny: Vec::new(),
        local_ports: n.local_ports,
    });
    let mut rules = cx.rules("", raw.grants, Vec::new(), network, None, None)?;
    rules.sources.push((origin, path.to_path_buf()));
    Ok(rules)
}

/// Deserializes `text` strictly, after checking its version.
fn document<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, FileError> {
    let format = Format::of(path, text);
    let version: VersionOnly = from_text(format, text, path)?;
    match version.version {
        None => {
            return Err(FileError::NoVersion {
                path: path.to_path_buf(),
            })
        }
        Some(v) if v != i64::from(POLICY_FILE_VERSION) => {
            return Err(FileError::Version {
                path: path.to_path_buf(),
                found: v,
            })
        }
        Some(_) => {}
    }
    from_text(format, text, path)
}

fn from_text<T: serde::de::DeserializeOwned>(
    format: Format,
    text: &str,
    path: &Path,
) -> Result<T, FileError> {
    match format {
        Format::Toml => toml::from_str(text).map_err(|e| {
            let start = e.span().map(|s| s.start).unwrap_or(0);
            let (line, column) = line_column(text, start);
            FileError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: one_line(e.message()),
            }
        }),
        Format::Json => serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            // serde_json appends " at line L column C", which the prefix says already.
            let message = match message.rsplit_once(" at line ") {
                Some((m, _)) => m.to_owned(),
                None => message,
            };
            FileError::Syntax {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: one_line(&message),
            }
        }),
    }
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, rest)| rest)
        .chars()
        .count()
        + 1;
    (line, column)
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The context of one file's checks.
struct Cx<'a> {
    path: &'a Path,
    home: Option<&'a Path>,
    origin: Origin,
    /// The directory a relative path is below (the project, for a project policy);
    /// `None`: relative paths are refused.
    relative_to: Option<&'a Path>,
}

impl Cx<'_> {
    fn invalid(&self, key: &str, message: String) -> FileError {
        FileError::Invalid {
            path: self.path.to_path_buf(),
            key: key.to_owned(),
            message,
        }
    }

    /// An absolute path, or `~/...` below the home directory.
    fn path_of(&self, key: &str, text: &str) -> Result<PathBuf, FileError> {
        if text.contains('\0') {
            return Err(self.invalid(key, "a path may not hold a NUL byte".to_owned()));
        }
        if let Some(rest) = text.strip_prefix("~/") {
            return match self.home {
                Some(home) => Ok(home.join(rest)),
                None => Err(self.invalid(
                    key,
                    "the path starts with ~/ but there is no home directory".to_owned(),
                )),
            };
        }
        let path = PathBuf::from(text);
        if !path.is_absolute() {
            return match self.relative_to {
                Some(base) if !text.is_empty() => {
                    Ok(crate::model::paths::normalize(&base.join(path)))
                }
                _ => Err(self.invalid(key, format!("{text:?} is neither absolute nor below ~/"))),
            };
        }
        Ok(path)
    }

    fn reason(&self, key: &str, reason: &str) -> Result<String, FileError> {
        let reason = one_line(reason);
        if reason.is_empty() {
            return Err(self.invalid(key, "every rule gives its reason".to_owned()));
        }
        if reason.chars().count() > MAX_REASON_CHARS {
            return Err(self.invalid(
                key,
                format!("a reason is at most {MAX_REASON_CHARS} characters"),
            ));
        }
        Ok(reason)
    }

    fn bounded<T>(&self, key: &str, list: &[T]) -> Result<(), FileError> {
        if list.len() > MAX_ENTRIES {
            return Err(self.invalid(key, format!("at most {MAX_ENTRIES} entries")));
        }
        Ok(())
    }

    fn rules(
        &self,
        prefix: &str,
        grants: Vec<RawGrant>,
        protections: Vec<RawProtection>,
        network: Option<RawNetwork>,
        environment: Option<RawEnvironment>,
        ceilings: Option<RawCeilings>,
    ) -> Result<FileRules, FileError> {
        let origin = self.origin;
        let mut rules = FileRules::default();
        self.bounded(&format!("{prefix}grants"), &grants)?;
        for (i, g) in grants.into_iter().enumerate() {
            let key = format!("{prefix}grants[{i}]");
            rules.grants.push(FileGrant {
                path: self.path_of(&format!("{key}.path"), &g.path)?,
                access: match g.access {
                    RawAccess::Read => Access::Read,
                    RawAccess::ReadWrite => Access::ReadWrite,
                    RawAccess::Execute => Access::Execute,
                },
                reason: self.reason(&format!("{key}.reason"), &g.reason)?,
                origin,
            });
        }
        self.bounded(&format!("{prefix}protections"), &protections)?;
        for (i, p) in protections.into_iter().enumerate() {
            let key = format!("{prefix}protections[{i}]");
            rules.protections.push(FileProtection {
                path: self.path_of(&format!("{key}.path"), &p.path)?,
                kind: match p.kind {
                    RawProtectionKind::Deny => ProtectionKind::Deny,
                    RawProtectionKind::ReadOnly => ProtectionKind::ReadOnly,
                },
                reason: self.reason(&format!("{key}.reason"), &p.reason)?,
                origin,
            });
        }
        let network = network.unwrap_or_default();
        match network.mode {
            Some(RawNetMode::Block) => rules.block_net = Some(origin),
            Some(RawNetMode::Agent) => rules.agent_net = Some(origin),
            Some(RawNetMode::Host) | None => {}
        }
        for (name, list, into) in [
            ("allow", network.allow, &mut rules.allow),
            ("deny", network.deny, &mut rules.deny),
        ] {
            self.bounded(&format!("{prefix}network.{name}"), &list)?;
            for (i, text) in list.iter().enumerate() {
                let pattern: sandy_net::Pattern = text.parse().map_err(|e| {
                    self.invalid(&format!("{prefix}network.{name}[{i}]"), format!("{e}"))
                })?;
                into.push((pattern, origin));
            }
        }
        self.bounded(
            &format!("{prefix}network.local_ports"),
            &network.local_ports,
        )?;
        for (i, port) in network.local_ports.iter().enumerate() {
            if *port == 0 {
                return Err(self.invalid(
                    &format!("{prefix}network.local_ports[{i}]"),
                    "a port is 1 to 65535".to_owned(),
                ));
            }
            rules.local_ports.push((*port, origin));
        }
        let environment = environment.unwrap_or_default();
        self.bounded(&format!("{prefix}environment.pass"), &environment.pass)?;
        for (i, name) in environment.pass.iter().enumerate() {
            let good = !name.is_empty()
                && !name.contains('=')
                && !name.contains('\0')
                && name.len() <= 256;
            if !good {
                return Err(self.invalid(
                    &format!("{prefix}environment.pass[{i}]"),
                    "not a variable name".to_owned(),
                ));
            }
            rules.pass_env.push(name.clone());
        }
        if let Some(c) = ceilings {
            use crate::model::ceilings as ce;
            let amount = |key: &str,
                          value: Option<RawAmount>,
                          parse: &dyn Fn(&str) -> Result<u64, ce::CeilingParseError>|
             -> Result<FileCeiling, FileError> {
                value
                    .map(|v| {
                        parse(&v.text()).map(|n| (n, origin)).map_err(|e| {
                            self.invalid(&format!("{prefix}ceilings.{key}"), e.to_string())
                        })
                    })
                    .transpose()
            };
            rules.ceilings = FileCeilings {
                max_procs: amount("max_procs", c.max_procs, &|t| {
                    ce::count_at_least(ce::MIN_MAX_PROCS, t)
                })?,
                max_memory: amount("max_memory", c.max_memory, &|t| {
                    ce::size_at_least(ce::MIN_MAX_MEMORY, t)
                })?,
                max_file_size: amount("max_file_size", c.max_file_size, &|t| {
                    ce::size_at_least(ce::MIN_MAX_FILE_SIZE, t)
                })?,
                max_tmp: amount("max_tmp", c.max_tmp, &|t| {
                    ce::size_at_least(ce::MIN_MAX_TMP, t)
                })?,
                cpu: amount("cpu", c.cpu, &ce::parse_cpus)?,
            };
        }
        Ok(rules)
    }
}

/// Refuses a file the sandbox of `policy` could write: the file, or any name on the way
/// to it (a directory, a symbolic link, where a link leads), inside the project or any
/// other writable place of the run. `path` is absolute, as the user or Sandy named it.
pub fn check_not_writable(
    role: FileRole,
    path: &Path,
    policy: &ResolvedPolicy,
    fs: &dyn PathInspector,
) -> Result<(), FileError> {
    // The directories the sandbox sees as private, empty ones (`/tmp`) are not the
    // host's: a grant of exactly one is the private one's. A grant below one (a project
    // in `/tmp/x`) is the host's, carried through.
    let privates = crate::model::paths::private_dirs(policy.runtime_dir.as_deref());
    let mut writable: Vec<PathBuf> = policy
        .writable_paths()
        .filter(|p| !privates.contains(p))
        .map(Path::to_path_buf)
        .collect();
    writable.push(policy.working_directory.clone());
    let writable_at = |p: &Path| writable.iter().find(|w| p.starts_with(w)).cloned();
    let refuse = |w: PathBuf| FileError::Writable {
        what: role.what(),
        path: path.to_path_buf(),
        writable: w,
    };
    // The name itself, and each directory on the way (a parent the run could write
    // could have the name replaced).
    let lexical = crate::model::paths::normalize(path);
    if let Some(w) = writable_at(&lexical) {
        return Err(refuse(w));
    }
    // Every name the kernel passes on the way, links spliced in: each below a writable
    // root is one the run could replace; and what the name finally designates.
    let walked = crate::host::chain::chain(&lexical, &writable, &|_| false, fs).map_err(|e| {
        FileError::Unfollowable {
            what: role.what(),
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    })?;
    if let Some(pin) = walked.pins.first() {
        let w = writable_at(pin.path()).unwrap_or_else(|| pin.path().to_path_buf());
        return Err(refuse(w));
    }
    if let Some(object) = walked.object {
        if let Some(w) = writable_at(&object) {
            return Err(refuse(w));
        }
    }
    Ok(())
}

/// What `sandy config init` writes: every key, commented out, with what it does.
pub const CONFIG_STARTER: &str = r#"# Sandy's user configuration: applied to every `sandy run` (and `sandy why`).
# Flags on the command line add to it. Reference: docs/policy-files.md.
# Keep this file where no sandboxed run can write it: Sandy refuses it otherwise.
version = 1

# Where user namespaces are unavailable (a container, a CI image), the weaker tier for
# every run, as --tier landlock (see docs/tiers.md); --tier full overrides it.
# tier = "landlock"

# Grants, as --read and --read-write would add them. Every grant gives its reason.
# Paths are absolute or start with ~/ and must exist.
# [[grants]]
# path = "~/src/shared-lib"
# access = "read"            # "read" or "read_write"
# reason = "the library the projects build against"

# Extra protections, whatever the grants: "deny" masks a path, "read_only" keeps it
# unchanged.
# [[protections]]
# path = "~/src/project/.env.production"
# kind = "deny"
# reason = "production credentials"

# [network]
# mode = "host"              # "host", "block" (--block-net) or "agent" (--net agent)
# allow = ["api.example.com", "*.example.org:8443"]    # --allow-domain
# deny = ["telemetry.example.com"]                     # --deny-domain
# local_ports = [5432]                                 # --allow-local-port

# [environment]
# pass = ["GITHUB_TOKEN"]    # --pass-env

# [ceilings]
# max_procs = 2048           # --max-procs
# max_memory = "8G"          # --max-memory
# max_file_size = "4G"       # --max-file-size
# max_tmp = "2G"             # --max-tmp
# cpu = "2"                  # --cpu

# The same keys for one profile only (a built-in one, or a user profile's name):
# [profile.claude.network]
# mode = "agent"
"#;

#[cfg(test)]
mod tests;
