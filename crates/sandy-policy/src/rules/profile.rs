//! Built-in agent profiles: versioned TOML documents (`profiles/*.toml`), embedded in the
//! binary as JSON made from them at build time (`build.rs`: every launch reads every
//! profile, and JSON is much cheaper to parse), and parsed strictly. A profile can only
//! use Sandy's typed permissions (grants, protections, environment rules, detection
//! names, a notice); it never carries raw kernel rules.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::policy::StateFormat;
use crate::model::policy::{Access, Placeholder, ProtectionKind};

/// The only profile schema this build reads.
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

/// The embedded documents (JSON made from `profiles/NAME.toml`), by name. `generic` is
/// the fallback.
const BUILTIN: &[(&str, &str)] = &[
    (
        "claude",
        include_str!(concat!(env!("OUT_DIR"), "/claude.json")),
    ),
    (
        "codex",
        include_str!(concat!(env!("OUT_DIR"), "/codex.json")),
    ),
    (
        "gemini",
        include_str!(concat!(env!("OUT_DIR"), "/gemini.json")),
    ),
    (
        "generic",
        include_str!(concat!(env!("OUT_DIR"), "/generic.json")),
    ),
    (
        "opencode",
        include_str!(concat!(env!("OUT_DIR"), "/opencode.json")),
    ),
];

/// What every run needs of every profile (`NAME.baseline.json`, made by `build.rs` from
/// the same documents), in [`BUILTIN`]'s order.
const BASELINES: &[&str] = &[
    include_str!(concat!(env!("OUT_DIR"), "/claude.baseline.json")),
    include_str!(concat!(env!("OUT_DIR"), "/codex.baseline.json")),
    include_str!(concat!(env!("OUT_DIR"), "/gemini.baseline.json")),
    include_str!(concat!(env!("OUT_DIR"), "/generic.baseline.json")),
    include_str!(concat!(env!("OUT_DIR"), "/opencode.baseline.json")),
];

/// The name of the fallback profile.
pub const GENERIC: &str = "generic";

/// A grant a profile makes. Paths use `~/`, `{root}` (a root from `[roots]`) or
/// `{project}`. Missing paths are skipped unless `required`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileGrant {
    pub path: String,
    pub access: Access,
    #[serde(default)]
    pub required: bool,
    /// A state directory of the agent's own: when it is absent, the supervisor creates it
    /// (empty, mode 0700) before launch, as the agent would at its first start (design
    /// promise 5). Only `read_write` directory grants may say so.
    #[serde(default)]
    pub create: bool,
    /// A cache of the agent's own whose contents its next launch runs (downloaded
    /// programs, language servers, plugin packages): copy-on-write inside, with a layer of
    /// its own per project, like the tools' caches (design §3.7). Only `read_write`
    /// directory grants may say so.
    #[serde(default)]
    pub cache: bool,
    /// Why the agent needs it (documentation, shown nowhere at run time).
    pub why: String,
}

/// A protection a profile adds; it holds whether or not the path exists at launch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileProtection {
    pub path: String,
    pub kind: ProtectionKind,
    /// What Sandy creates when the path is absent at launch, so that it can carry its
    /// read-only mount. Only allowed below a state directory the profile creates.
    #[serde(default)]
    pub placeholder: Option<Placeholder>,
    pub why: String,
}

/// Commands a settings file (JSON, or TOML when its name ends in `.toml`) names (a status
/// line, hooks): every path in them is
/// protected read-only like the settings themselves, so the run cannot rewrite the script
/// the next launch runs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileNamedCommands {
    /// The settings file, or `DIR/*.json`: every `.json` file of a drop-in directory.
    pub file: String,
    /// Key paths of command strings, dot-separated; `*` is any key or array element.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Key paths of hook commands (runtime controls): besides the protection of every
    /// path they name, each hook's executable (and script) is found, granted read and
    /// execute and listed in the dry run; one Sandy cannot resolve is reported.
    #[serde(default)]
    pub hooks: Vec<String>,
    /// Key paths of hook commands given as an argument vector (Codex's `notify`): run
    /// directly, not by a shell; treated like `hooks`.
    #[serde(default)]
    pub argv: Vec<String>,
    pub why: String,
}

/// A configuration file whose `keys` name plugin packages the agent installs from npm
/// into `cache` and loads (OpenCode's `plugin` array): each one is listed as a runtime
/// control and its installed package directory protected read-only; one that is not
/// installed (or not a package name) is reported.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePluginPackages {
    pub file: String,
    pub keys: Vec<String>,
    pub cache: String,
    pub why: String,
}

/// A state directory of the agent's, default-deny ([`crate::rules::statedirs`]): names below
/// `root` (`{root}` of `[roots]`) by class; everything no list covers is read-only. In
/// the lists, `{project_key}` is the run's folder as Claude Code names it in
/// `~/.claude/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileStateDir {
    pub root: String,
    /// What the agent writes in ordinary use.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Memory: written by the agent, read into its next prompt; every change named.
    #[serde(default)]
    pub watched: Vec<String>,
    /// The login: refreshed by the agent; every change named.
    #[serde(default)]
    pub login: Vec<String>,
    /// What the agent reads at launch (configuration, instructions, code): read-only.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Login files that name their account: a login for another account is put back.
    #[serde(default)]
    pub accounts: Vec<ProfileAccount>,
    pub why: String,
}

/// A login file of a state directory and the JSON keys that name its account.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileAccount {
    pub path: String,
    pub identity: Vec<String>,
}

/// A directory whose JavaScript/TypeScript files the agent loads as plugins: each one is
/// listed as a runtime control, and Numbat's generated plugin is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePluginDirectory {
    pub path: String,
    pub why: String,
}

/// The path of an agent's state file and why it exists, as the baseline reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileStateFileName {
    pub path: String,
    pub why: String,
}

/// What every run needs of a profile, whatever profile is detected: the names through
/// which that agent would run code at its next launch (its protections and state files,
/// with their roots) and the settings whose commands name more of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileBaseline {
    pub name: String,
    #[serde(default)]
    pub roots: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub protections: Vec<ProfileProtection>,
    #[serde(default)]
    pub state_files: Vec<ProfileStateFileName>,
    #[serde(default)]
    pub named_commands: Vec<ProfileNamedCommands>,
}

/// An agent state file that mixes ordinary state with launch configuration
/// (`~/.claude.json`). Inside, the agent writes a private copy; after the run only the
/// values at `persist` paths go back to the host file (design §4.2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileStateFile {
    /// The host file.
    pub path: String,
    /// Where the agent finds the copy inside, when not at `path`: a name in a writable
    /// state directory, so that the agent's write-to-a-temporary-file-then-rename can
    /// create its temporary file (the rename onto the bound copy then fails with EBUSY and
    /// the agent rewrites the copy in place). Needs `environment` to point the agent there.
    #[serde(default)]
    pub inside: Option<String>,
    /// Variables set inside so that the agent reads `inside` (values may use `{root}`;
    /// here and in `inside`, `{run}` is replaced by a name unique to the run).
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    /// `inside` is a name of Sandy's own that nothing reads outside Sandy (the agent
    /// reads it only because `environment` says so): the supervisor writes the copy there
    /// as a plain file, so the agent's write-then-rename works on it, and removes it after
    /// the merge. Without it, the copy is bound over `inside`.
    #[serde(default)]
    pub inside_is_private: bool,
    /// For a private copy whose directory the agent takes as its whole state directory
    /// (Codex's `CODEX_HOME`): the real state directory that directory stands in for.
    /// Before launch the supervisor links every entry of `mirror` into it (so sessions,
    /// logs, `tmp` and the login stay the real ones); after the run, what the agent
    /// created or replaced there moves to `mirror`, except the state file itself and the
    /// profile's protected names.
    #[serde(default)]
    pub mirror: Option<String>,
    /// Names in the stand-in (with `mirror`) that are an empty directory of the run's
    /// own (0700) instead of a link to the real entry: directories the agent insists on
    /// creating itself, as a real directory it owns (Codex's socket directories,
    /// `app-server-daemon` and `app-server-control`, which it refuses as a link). What
    /// the run leaves there is removed with the stand-in, never moved back.
    #[serde(default)]
    pub private_dirs: Vec<String>,
    /// Top-level keys set to these values in the copy the agent sees inside, and only
    /// there (Codex's `sandbox_mode`): the merge starts from the copy so changed, so they
    /// never reach the host file.
    #[serde(default)]
    pub inside_settings: BTreeMap<String, String>,
    pub format: StateFormat,
    /// The known-safe key paths, dot-separated; `*` stands for any one key (a project
    /// path), `{project}` for the run's working directory only. Everything else in the
    /// file never changes on the host.
    pub persist: Vec<String>,
    pub why: String,
}

/// Environment changes: variables set to fixed values, and variables removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEnvironment {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub unset: Vec<String>,
    /// The agent's own credentials (its model API key, its login token), which pass
    /// into its environment although they look like credentials.
    #[serde(default)]
    pub pass: Vec<String>,
    /// Variables the agent's own configuration names as its credentials (a model
    /// provider's `env_key`), which pass too.
    #[serde(default)]
    pub pass_named: Vec<ProfilePassNamed>,
}

/// Where the agent's configuration names the variables that hold its credentials.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePassNamed {
    /// The settings file (JSON, or TOML by its extension); `{ROOT}` expanded.
    pub file: String,
    /// Key paths of variable names, dot-separated; `*` is any key or array element.
    pub keys: Vec<String>,
}

/// A message printed at launch (only with one of `if_args`, when given) unless one of the
/// arguments is present, or the first
/// argument is one of `unless_first_arg` (a subcommand that does not do what the notice is
/// about).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileNotice {
    /// When not empty, the notice is printed only when an argument is one of these, or
    /// one of these followed by `=` (`--sandbox=read-only`, `-c sandbox_mode=...`).
    #[serde(default)]
    pub if_args: Vec<String>,
    pub unless_args: Vec<String>,
    #[serde(default)]
    pub unless_first_arg: Vec<String>,
    pub message: String,
}

/// One network endpoint of an agent (its model API, login, telemetry host).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEndpoint {
    /// A pattern as `--allow-domain` takes it (`api.example.com`, `*.example.com:8443`).
    pub host: String,
    /// What the agent uses it for.
    pub role: String,
    /// The kind of traffic; decides whether `--net agent` allows it (see
    /// `EndpointKind`). Absent: `service`, allowed.
    #[serde(default)]
    pub kind: crate::model::egress::EndpointKind,
    /// Variables holding a base URL that replaces this host when set (first set wins).
    #[serde(default)]
    pub base_url_env: Vec<String>,
}

/// The agent's network endpoints, allowed by `--net agent`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileNetwork {
    #[serde(default)]
    pub endpoints: Vec<ProfileEndpoint>,
}

/// One profile document.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub schema_version: u32,
    pub name: String,
    pub summary: String,
    /// Command basenames that select this profile.
    pub detect: Vec<String>,
    /// Named roots: candidates in order; `$VAR` or `$VAR/suffix` use an environment
    /// variable when it is set (and must then be an absolute path: a directory, or an absent
    /// path the agent will create),
    /// `~/...` is relative to home.
    #[serde(default)]
    pub roots: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub grants: Vec<ProfileGrant>,
    #[serde(default)]
    pub protections: Vec<ProfileProtection>,
    #[serde(default)]
    pub state_files: Vec<ProfileStateFile>,
    #[serde(default)]
    pub named_commands: Vec<ProfileNamedCommands>,
    /// The agent's state directories, default-deny ([`crate::rules::statedirs`]).
    #[serde(default)]
    pub state_dirs: Vec<ProfileStateDir>,
    /// Directories of plugins the agent loads (runtime controls).
    #[serde(default)]
    pub plugin_directories: Vec<ProfilePluginDirectory>,
    /// Plugin packages named in configuration files (runtime controls).
    #[serde(default)]
    pub plugin_packages: Vec<ProfilePluginPackages>,
    /// The agent is an npm package that starts a platform package, one of its
    /// `optionalDependencies` installed beside it (`@openai/codex` starts
    /// `@openai/codex-linux-x64`): those found beside the program's package are granted
    /// read and execute.
    #[serde(default)]
    pub optional_dependencies: bool,
    #[serde(default)]
    pub environment: ProfileEnvironment,
    #[serde(default)]
    pub notice: Option<ProfileNotice>,
    #[serde(default)]
    pub network: ProfileNetwork,
}

/// Why a profile could not be loaded or chosen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    #[error("built-in profile '{name}' is invalid: {reason}")]
    Invalid { name: String, reason: String },
    #[error("unknown profile '{name}'; available profiles: {available}")]
    Unknown { name: String, available: String },
}

/// Parses one TOML document strictly: unknown fields and other schema versions are
/// rejected, and every `{root}` a path names must be declared.
pub fn parse(name: &str, text: &str) -> Result<Profile, ProfileError> {
    let profile: Profile = toml::from_str(text).map_err(|e| ProfileError::Invalid {
        name: name.to_owned(),
        reason: e.to_string(),
    })?;
    validate(name, profile)
}

/// One embedded document (the JSON form of a TOML one), as strictly as [`parse`].
fn parse_embedded(name: &str, json: &str) -> Result<Profile, ProfileError> {
    let profile: Profile = serde_json::from_str(json).map_err(|e| ProfileError::Invalid {
        name: name.to_owned(),
        reason: e.to_string(),
    })?;
    validate(name, profile)
}

/// The checks beyond the schema's types.
fn validate(name: &str, profile: Profile) -> Result<Profile, ProfileError> {
    let invalid = |reason: String| ProfileError::Invalid {
        name: name.to_owned(),
        reason,
    };
    if profile.schema_version != PROFILE_SCHEMA_VERSION {
        return Err(invalid(format!(
            "schema_version {} is not supported (expected {PROFILE_SCHEMA_VERSION})",
            profile.schema_version
        )));
    }
    if profile.name != name {
        return Err(invalid(format!("it is named '{}'", profile.name)));
    }
    for grant in profile.grants.iter().filter(|g| g.cache) {
        if grant.access != Access::ReadWrite {
            return Err(invalid(format!(
                "grant {} is a cache the agent could not write",
                grant.path
            )));
        }
    }
    for grant in profile.grants.iter().filter(|g| g.create) {
        if grant.access != Access::ReadWrite {
            return Err(invalid(format!(
                "grant {} creates a directory the agent could not write",
                grant.path
            )));
        }
    }
    for p in profile
        .protections
        .iter()
        .filter(|p| p.placeholder.is_some())
    {
        let below_created = profile.grants.iter().any(|g| {
            g.create
                && p.path
                    .strip_prefix(g.path.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        if !below_created {
            return Err(invalid(format!(
                "protection {} has a placeholder outside the state directories the profile \
                 creates",
                p.path
            )));
        }
    }
    for file in &profile.state_files {
        if file.inside_is_private && (file.inside.is_none() || file.environment.is_empty()) {
            return Err(invalid(format!(
                "state file {} has a private copy the agent is not pointed to",
                file.path
            )));
        }
        if !file.private_dirs.is_empty() && file.mirror.is_none() {
            return Err(invalid(format!(
                "state file {} has private directories but no stand-in (mirror)",
                file.path
            )));
        }
        if let Some(bad) = file.private_dirs.iter().find(|n| {
            n.is_empty() || *n == "." || *n == ".." || n.contains('/') || n.contains('\0')
        }) {
            return Err(invalid(format!(
                "state file {} has the private directory '{bad}', which is not one name",
                file.path
            )));
        }
        if file.mirror.is_some() && !file.inside_is_private {
            return Err(invalid(format!(
                "state file {} mirrors a directory for a copy that is not private",
                file.path
            )));
        }
        if let Some(bad) = file.persist.iter().find(|k| {
            k.is_empty()
                || k.split('.').any(|s| s.is_empty())
                || k.split('.').next_back() == Some("*")
        }) {
            return Err(invalid(format!(
                "state file {} persists the malformed key path '{bad}'",
                file.path
            )));
        }
    }
    let paths = profile
        .grants
        .iter()
        .map(|g| &g.path)
        .chain(profile.protections.iter().map(|p| &p.path))
        .chain(profile.state_files.iter().map(|f| &f.path))
        .chain(profile.named_commands.iter().map(|c| &c.file))
        .chain(profile.plugin_directories.iter().map(|d| &d.path))
        .chain(profile.plugin_packages.iter().map(|d| &d.file))
        .chain(profile.plugin_packages.iter().map(|d| &d.cache))
        .chain(profile.state_files.iter().filter_map(|f| f.inside.as_ref()))
        .chain(profile.state_files.iter().filter_map(|f| f.mirror.as_ref()));
    for path in paths {
        if let Some(root) = path.strip_prefix('{').and_then(|r| r.split('}').next()) {
            if root != "project" && !profile.roots.contains_key(root) {
                return Err(invalid(format!("path {path} names an undeclared root")));
            }
        } else if !path.starts_with("~/") && !path.starts_with('/') {
            return Err(invalid(format!(
                "path {path} must start with ~/, / or {{root}}"
            )));
        }
    }
    for endpoint in &profile.network.endpoints {
        if let Err(e) = endpoint.host.parse::<sandy_net::Pattern>() {
            return Err(invalid(format!("endpoint {}: {e}", endpoint.host)));
        }
    }
    Ok(profile)
}

/// Every built-in profile, parsed.
pub fn builtin_profiles() -> Result<Vec<Profile>, ProfileError> {
    BUILTIN
        .iter()
        .map(|(name, text)| parse_embedded(name, text))
        .collect()
}

/// What every run needs of every built-in profile ([`ProfileBaseline`]).
pub fn builtin_baselines() -> Result<Vec<ProfileBaseline>, ProfileError> {
    BUILTIN
        .iter()
        .zip(BASELINES)
        .map(|((name, _), json)| {
            serde_json::from_str(json).map_err(|e| ProfileError::Invalid {
                name: (*name).to_owned(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The names of the built-in profiles, sorted.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

/// Chooses the profile: the one named by `--profile`, else the one whose detection names
/// include the command's basename as typed, else `generic`. Returns whether it was
/// detected.
pub fn select(
    requested: Option<&str>,
    argv0: &std::ffi::OsStr,
) -> Result<(Profile, bool), ProfileError> {
    let unknown = |name: &str| ProfileError::Unknown {
        name: name.to_owned(),
        available: builtin_names().join(", "),
    };
    let load = |name: &str| -> Result<Profile, ProfileError> {
        let (_, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| unknown(name))?;
        parse_embedded(name, text)
    };
    if let Some(name) = requested {
        return load(name).map(|p| (p, false));
    }
    let basename = std::path::Path::new(argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Only documents that mention the name at all are parsed (this runs on every launch).
    let quoted = format!("\"{basename}\"");
    for (name, text) in BUILTIN {
        if !basename.is_empty() && text.contains(&quoted) {
            let profile = parse_embedded(name, text)?;
            if profile.detect.contains(&basename) {
                return Ok((profile, true));
            }
        }
    }
    load(GENERIC).map(|p| (p, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_embedded_form_reads_as_the_toml_source() {
        let sources = [
            ("claude", include_str!("../../profiles/claude.toml")),
            ("codex", include_str!("../../profiles/codex.toml")),
            ("gemini", include_str!("../../profiles/gemini.toml")),
            ("generic", include_str!("../../profiles/generic.toml")),
            ("opencode", include_str!("../../profiles/opencode.toml")),
        ];
        assert_eq!(sources.map(|(n, _)| n).to_vec(), builtin_names());
        for ((name, toml), embedded) in sources.iter().zip(builtin_profiles().unwrap()) {
            assert_eq!(parse(name, toml).unwrap(), embedded, "{name}");
        }
        // The baseline form is the same profile's names.
        for (profile, baseline) in builtin_profiles()
            .unwrap()
            .into_iter()
            .zip(builtin_baselines().unwrap())
        {
            assert_eq!(baseline.name, profile.name);
            assert_eq!(baseline.roots, profile.roots);
            assert_eq!(baseline.protections, profile.protections);
            assert_eq!(baseline.named_commands, profile.named_commands);
            let names: Vec<(&str, &str)> = baseline
                .state_files
                .iter()
                .map(|f| (f.path.as_str(), f.why.as_str()))
                .collect();
            let files: Vec<(&str, &str)> = profile
                .state_files
                .iter()
                .map(|f| (f.path.as_str(), f.why.as_str()))
                .collect();
            assert_eq!(names, files, "{}", profile.name);
        }
        // The embedded form is as strict as the source.
        assert!(parse_embedded("generic", r#"{"schema_version": 1, "nope": 1}"#).is_err());
    }

    #[test]
    fn every_builtin_profile_parses() {
        let profiles = builtin_profiles().unwrap();
        let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            vec!["claude", "codex", "gemini", "generic", "opencode"]
        );
        for p in &profiles {
            for g in &p.grants {
                assert!(
                    !g.why.is_empty(),
                    "{}: grant {} has no reason",
                    p.name,
                    g.path
                );
            }
        }
    }

    #[test]
    fn parsing_is_strict() {
        let base = "schema_version = 1\nname = \"x\"\nsummary = \"s\"\ndetect = []\n";
        assert!(parse("x", base).is_ok());
        let unknown = format!("{base}raw_landlock = 1\n");
        assert!(matches!(
            parse("x", &unknown),
            Err(ProfileError::Invalid { .. })
        ));
        let version = base.replace("schema_version = 1", "schema_version = 2");
        assert!(parse("x", &version)
            .unwrap_err()
            .to_string()
            .contains("schema_version 2"));
        let bad_access =
            format!("{base}[[grants]]\npath = \"~/.x\"\naccess = \"everything\"\nwhy = \"w\"\n");
        assert!(parse("x", &bad_access).is_err());
        let undeclared =
            format!("{base}[[grants]]\npath = \"{{nope}}/x\"\naccess = \"read\"\nwhy = \"w\"\n");
        assert!(parse("x", &undeclared)
            .unwrap_err()
            .to_string()
            .contains("undeclared root"));
        let relative = format!("{base}[[grants]]\npath = \"x\"\naccess = \"read\"\nwhy = \"w\"\n");
        assert!(parse("x", &relative).is_err());
        assert!(parse("y", base)
            .unwrap_err()
            .to_string()
            .contains("named 'x'"));
    }

    #[test]
    fn state_declarations_are_checked() {
        let base = "schema_version = 1\nname = \"x\"\nsummary = \"s\"\ndetect = []\n\
                    [roots]\nhome = [\"~/.x\"]\n";
        let created = format!(
            "{base}[[grants]]\npath = \"{{home}}\"\naccess = \"read_write\"\ncreate = true\n\
             why = \"w\"\n"
        );
        assert!(parse("x", &created).is_ok());
        // Sandy creates only what the agent could write.
        let read_only = created.replace("read_write", "read");
        assert!(parse("x", &read_only)
            .unwrap_err()
            .to_string()
            .contains("could not write"));
        // Placeholders only below a directory the profile creates.
        let inside = format!(
            "{created}[[protections]]\npath = \"{{home}}/hooks\"\nkind = \"read_only\"\n\
             placeholder = \"directory\"\nwhy = \"w\"\n"
        );
        assert!(parse("x", &inside).is_ok());
        let outside = inside.replace("{home}/hooks", "{project}/hooks");
        assert!(parse("x", &outside)
            .unwrap_err()
            .to_string()
            .contains("placeholder outside"));
        let not_below = inside.replace("{home}/hooks", "{home}");
        assert!(parse("x", &not_below).is_err());
        // A state file's key paths are well formed and never a whole subtree by wildcard.
        let state = |key: &str| {
            format!(
                "{created}[[state_files]]\npath = \"~/.x.json\"\nformat = \"json\"\n\
                 persist = [\"{key}\"]\nwhy = \"w\"\n"
            )
        };
        assert!(parse("x", &state("projects.*.trusted")).is_ok());
        for bad in ["", "a..b", "projects.*", ".a"] {
            assert!(parse("x", &state(bad)).is_err(), "{bad}");
        }
        // A stand-in directory mirrors a real one only for a private copy the agent is
        // pointed to, and only a declared root.
        let stand_in = format!(
            "{created}[[state_files]]\npath = \"{{home}}/c.toml\"\n\
             inside = \"{{home}}/.s-{{run}}/c.toml\"\ninside_is_private = true\n\
             mirror = \"{{home}}\"\nenvironment = {{ X_HOME = \"{{home}}/.s-{{run}}\" }}\n\
             format = \"toml\"\npersist = [\"a\"]\nwhy = \"w\"\n"
        );
        assert!(parse("x", &stand_in).is_ok(), "{stand_in}");
        let not_private = stand_in.replace("inside_is_private = true\n", "");
        assert!(parse("x", &not_private)
            .unwrap_err()
            .to_string()
            .contains("mirrors a directory"));
        let undeclared = stand_in.replace("mirror = \"{home}\"", "mirror = \"{nope}\"");
        assert!(parse("x", &undeclared)
            .unwrap_err()
            .to_string()
            .contains("undeclared root"));
    }

    #[test]
    fn detection_uses_the_basename_as_typed_and_the_override_wins() {
        let pick = |o: Option<&str>, a: &str| select(o, OsStr::new(a)).map(|(p, d)| (p.name, d));
        assert_eq!(pick(None, "claude").unwrap(), ("claude".into(), true));
        assert_eq!(
            pick(None, "/opt/bin/codex").unwrap(),
            ("codex".into(), true)
        );
        assert_eq!(pick(None, "./gemini").unwrap(), ("gemini".into(), true));
        assert_eq!(pick(None, "python3").unwrap(), ("generic".into(), false));
        assert_eq!(
            pick(Some("codex"), "claude").unwrap(),
            ("codex".into(), false)
        );
        let err = pick(Some("ghost"), "claude").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown profile 'ghost'; available profiles: claude, codex, gemini, generic, opencode"
        );
    }
}
