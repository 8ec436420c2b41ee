//! Kontext, as upstream Sandy recognises it: the facts the supervisor gathered (its
//! hooks in the agent's settings, a bounded `kontext doctor --json`, the daemon's socket)
//! turned into what the sandbox needs. Pure: the supervisor runs the doctor and looks at
//! the socket; this module checks the report and adds the grants and protections.
//!
//! What a verified installation gets: its hook executable (already granted and
//! protected like every hook), its active configuration read-only, and the daemon's
//! exact socket `/tmp/kontext-managed-observe-UID/kontext.sock`. Inside, `/tmp` is the
//! private per-run directory, so the socket is carried in at the same name (a file grant
//! under `/tmp` is mounted back at its place) and protected read-only by name, so it can
//! be neither removed nor replaced from inside. Nothing else of the host's `/tmp` is
//! reachable. A pathname socket is reached through the filesystem, not the network, so
//! it stays reachable under `--block-net`.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::host::inspect::PathInspector;
use crate::model::kontext::{KontextControl, KontextMode};
use crate::model::policy::Protection;
use crate::model::policy::{
    Access, Grant, Origin, ProtectionKind, ResolvedPolicy, RuntimeHook, Scope,
};

/// The service name in messages and in the dry run's `runtime_controls`.
pub const KONTEXT: &str = "Kontext";

/// What `kontext doctor --json` reports (the fields Sandy reads; others are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KontextReport {
    pub healthy: bool,
    pub configured: bool,
    pub self_serve: bool,
    pub daemon_running: bool,
    #[serde(default)]
    pub installed_version: Option<String>,
    #[serde(default)]
    pub config_path: Option<PathBuf>,
    #[serde(default)]
    pub active_profile: Option<String>,
    #[serde(default)]
    pub legacy_install: bool,
    #[serde(default)]
    pub mode: Option<KontextMode>,
}

/// The daemon's socket for the user `uid` (the owner of the home directory).
pub fn kontext_socket(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/kontext-managed-observe-{uid}/kontext.sock"))
}

/// Kontext's configuration directory on Linux: `$XDG_CONFIG_HOME/kontext`, or
/// `~/.config/kontext` (upstream, macOS only, uses `~/Library/Application
/// Support/Kontext`).
pub fn kontext_root(home: &Path, xdg_config_home: Option<&Path>) -> PathBuf {
    xdg_config_home
        .filter(|p| p.is_absolute())
        .map_or_else(|| home.join(".config"), Path::to_path_buf)
        .join("kontext")
}

/// The Kontext executables the registered hooks name (each once).
pub fn kontext_executables(policy: &ResolvedPolicy) -> Vec<&RuntimeHook> {
    let mut found: Vec<&RuntimeHook> = Vec::new();
    for hook in policy.hooks.iter().filter(|h| h.service == KONTEXT) {
        if !found.iter().any(|f| f.path == hook.path) {
            found.push(hook);
        }
    }
    found
}

/// Checks a doctor report: healthy, configured, self-serve, daemon running, and its
/// configuration exactly where Kontext keeps the active profile's (`ROOT/managed.json`
/// for a legacy installation, `ROOT/profiles/NAME/managed.json` otherwise, spelled
/// exactly so: no alias, no `..`). Returns the files the hooks read: the configuration,
/// the `active` marker (current installations), and the cached policy (remote mode).
pub fn check_report(report: &KontextReport, root: &Path) -> Result<Vec<PathBuf>, String> {
    if !(report.healthy && report.configured && report.self_serve && report.daemon_running) {
        return Err(
            "the configured self-serve installation is unhealthy; run kontext doctor".into(),
        );
    }
    let config = report
        .config_path
        .as_deref()
        .ok_or("kontext doctor did not report the active self-serve configuration path")?;
    let expected = if report.legacy_install {
        if report.active_profile.is_some() {
            return Err("kontext doctor reported both legacy and active-profile state".into());
        }
        root.join("managed.json")
    } else {
        let profile = report
            .active_profile
            .as_deref()
            .filter(|p| valid_profile_name(p))
            .ok_or("kontext doctor did not report a valid active profile")?;
        root.join("profiles").join(profile).join("managed.json")
    };
    let lexical = config
        .components()
        .all(|c| !matches!(c, Component::ParentDir));
    if config != expected || !lexical {
        return Err(format!(
            "kontext doctor reported a configuration outside the active profile (expected {})",
            expected.display()
        ));
    }
    let mut files = vec![expected.clone()];
    if !report.legacy_install {
        files.push(root.join("active"));
    }
    if report.mode == Some(KontextMode::Remote) {
        if let Some(dir) = expected.parent() {
            files.push(dir.join("managed-observe/cedar-policy.json"));
        }
    }
    Ok(files)
}

fn valid_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || (i > 0 && matches!(c, '-' | '_'))
        })
}

/// Adds a verified installation to the policy: the socket (read, exact: carried into the
/// private `/tmp` at its name) and the configuration files that exist (read, exact,
/// resolved through symlinks, and only inside `root`), each protected read-only by name.
/// `Err` when a configuration file leads outside `root`.
pub fn attach_kontext(
    policy: &mut ResolvedPolicy,
    control: KontextControl,
    files: &[PathBuf],
    root: &Path,
    fs: &dyn PathInspector,
) -> Result<(), String> {
    let canonical_root = fs
        .canonicalize(root)
        .map_err(|_| format!("{} cannot be resolved", root.display()))?;
    let mut names = Vec::new();
    for file in files {
        // Optional files (the marker, the cached policy) may be absent.
        let Ok(canonical) = fs.canonicalize(file) else {
            if fs.read_link(file).is_some() {
                return Err(format!("{} is a dangling symlink", file.display()));
            }
            continue;
        };
        if !canonical.starts_with(&canonical_root) {
            return Err(format!(
                "Kontext resource resolves outside its expected root: {}",
                file.display()
            ));
        }
        push_grant(policy, canonical, Access::Read, Scope::Exact);
        names.push(file.clone());
    }
    push_grant(policy, control.socket.clone(), Access::Read, Scope::Exact);
    names.push(control.socket.clone());
    for name in names {
        let writable = policy.grants.iter().any(|g| {
            g.access == Access::ReadWrite && g.scope == Scope::Subtree && name.starts_with(&g.path)
        });
        if writable && !policy.protections.iter().any(|p| p.path == name) {
            policy.protections.push(Protection {
                at_launch: false,
                exists: true,
                path: name,
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Profile,
                placeholder: None,
                reason: None,
            });
        }
    }
    policy.kontext = Some(control);
    Ok(())
}

fn push_grant(policy: &mut ResolvedPolicy, path: PathBuf, access: Access, scope: Scope) {
    let grant = Grant {
        path,
        access,
        scope,
        origin: Origin::Profile,
    };
    if !policy.grants.contains(&grant) {
        policy.grants.push(grant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(json: &str) -> KontextReport {
        serde_json::from_str(json).unwrap()
    }

    const ROOT: &str = "/home/u/.config/kontext";

    #[test]
    fn a_healthy_report_names_the_active_profile_files() {
        let r = report(
            r#"{"healthy":true,"configured":true,"self_serve":true,"daemon_running":true,
                "installed_version":"1.2.3","active_profile":"prod_1","legacy_install":false,
                "config_path":"/home/u/.config/kontext/profiles/prod_1/managed.json","mode":"remote"}"#,
        );
        let files = check_report(&r, Path::new(ROOT)).unwrap();
        assert_eq!(
            files,
            vec![
                PathBuf::from("/home/u/.config/kontext/profiles/prod_1/managed.json"),
                PathBuf::from("/home/u/.config/kontext/active"),
                PathBuf::from(
                    "/home/u/.config/kontext/profiles/prod_1/managed-observe/cedar-policy.json"
                ),
            ]
        );
    }

    #[test]
    fn unhealthy_or_misplaced_reports_are_refused() {
        let base = |healthy: bool, config: &str, profile: &str, legacy: bool| {
            report(&format!(
                r#"{{"healthy":{healthy},"configured":true,"self_serve":true,"daemon_running":true,
                    "active_profile":{profile},"legacy_install":{legacy},"config_path":"{config}"}}"#
            ))
        };
        let root = Path::new(ROOT);
        let good = "/home/u/.config/kontext/profiles/p/managed.json";
        assert!(check_report(&base(true, good, "\"p\"", false), root).is_ok());
        assert!(check_report(&base(false, good, "\"p\"", false), root).is_err());
        let dotted = "/home/u/.config/kontext/profiles/p/../p/managed.json";
        assert!(check_report(&base(true, dotted, "\"p\"", false), root).is_err());
        assert!(check_report(&base(true, "/home/u/.ssh/id", "\"p\"", false), root).is_err());
        assert!(check_report(&base(true, good, "\"P.x\"", false), root).is_err());
        let legacy = "/home/u/.config/kontext/managed.json";
        assert!(check_report(&base(true, legacy, "null", true), root).is_ok());
        assert!(check_report(&base(true, legacy, "\"p\"", true), root).is_err());
    }

    #[test]
    fn the_socket_is_named_by_the_uid() {
        assert_eq!(
            kontext_socket(1000),
            PathBuf::from("/tmp/kontext-managed-observe-1000/kontext.sock")
        );
        assert_eq!(
            kontext_root(Path::new("/h"), None),
            PathBuf::from("/h/.config/kontext")
        );
        assert_eq!(
            kontext_root(Path::new("/h"), Some(Path::new("/x"))),
            PathBuf::from("/x/kontext")
        );
    }
}
