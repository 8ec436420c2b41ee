//! Views: host files the sandbox sees as a prepared copy (credential-filtered, read-only,
//! or a writable private copy). Each view's target gets an exact grant of its own, and a
//! view replaces a mask on the same path: the copy carries no credential, or is the
//! agent's own private state, so it is what the sandbox may see in place of the file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::caches::{plan_caches, ToolCache};
use crate::resolve::{PRIVATE_SHM, PRIVATE_TMP, PRIVATE_VAR_TMP};

use crate::host::HostContext;
use crate::inspect::{FileKind, PathInspector};
use crate::policy::{Access, FileView, Grant, Origin, Protection, Scope, ViewKind};

/// The shell start-up files an agent's shell (Claude Code's Bash tool, Codex's and
/// Gemini's shells) reads, relative to the home directory: bash (login and interactive),
/// the POSIX `~/.profile`, zsh (with and without `ZDOTDIR`, see below) and fish.
const SHELL_STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".profile",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
    ".zlogout",
    ".config/fish/config.fish",
];

/// Read-only, credential-filtered views of the user's shell start-up files that exist as
/// regular files (`$ZDOTDIR` is honoured for zsh's files).
pub(super) fn shell_startup_views(
    home: &Path,
    host: &HostContext,
    fs: &dyn PathInspector,
) -> Vec<FileView> {
    let zdotdir = host
        .var("ZDOTDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    SHELL_STARTUP_FILES
        .iter()
        .map(|rel| match (&zdotdir, rel.starts_with(".z")) {
            (Some(z), true) => z.join(rel),
            _ => home.join(rel),
        })
        .filter(|p| matches!(fs.kind(p), Some(FileKind::File { .. })))
        .map(|target| FileView {
            target,
            kind: ViewKind::Filtered,
            origin: Origin::Baseline,
            reason: "shell start-up file, read-only, without assignments that look like \
                     credentials"
                .to_owned(),
        })
        .collect()
}

/// Tool caches (see [`crate::caches`]): an overlay's mount point becomes a writable
/// grant (the writes land in Sandy's upper layer, never in the host cache), a redirected
/// cache's directory in Sandy's cache too, and the tool's variable is set for it. Caches
/// inside a writable grant of the project or a flag, or under a private directory, are
/// left as they are.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_caches(
    home: Option<&Path>,
    host: &HostContext,
    fs: &dyn PathInspector,
    grants: &mut Vec<Grant>,
    protections: &mut Vec<Protection>,
    environment: &mut Vec<(OsString, OsString)>,
    set_env: &mut Vec<String>,
) -> Vec<ToolCache> {
    let Some(home) = home else {
        return Vec::new();
    };
    let writable: Vec<PathBuf> = grants
        .iter()
        .filter(|g| {
            g.access == Access::ReadWrite
                && g.scope == Scope::Subtree
                && matches!(g.origin, Origin::Project | Origin::Flag)
        })
        .map(|g| g.path.clone())
        .collect();
    let runtime = host.var("XDG_RUNTIME_DIR").map(Path::new);
    let hidden: Vec<&Path> = [PRIVATE_TMP, PRIVATE_SHM, PRIVATE_VAR_TMP]
        .iter()
        .map(Path::new)
        .chain(runtime)
        .collect();
    let plan = plan_caches(home, host, fs, &writable, &hidden);
    grants.extend(plan.grants);
    protections.extend(plan.protections);
    for (name, value) in plan.environment {
        environment.retain(|(k, _)| *k != name);
        set_env.push(name.to_string_lossy().into_owned());
        environment.push((name, value));
    }
    set_env.sort();
    set_env.dedup();
    plan.caches
}

/// Adds the grants the views need and drops masks that a view replaces. Views whose target
/// lies inside a directory that stays masked are dropped: the mask wins.
pub(super) fn finish_views(
    views: Vec<FileView>,
    grants: &mut Vec<Grant>,
    protections: &mut Vec<Protection>,
) -> Vec<FileView> {
    let mut kept: Vec<FileView> = Vec::with_capacity(views.len());
    for view in views {
        if kept.iter().any(|k| k.target == view.target) {
            continue;
        }
        let masked_above = protections.iter().any(|p| {
            p.kind == crate::policy::ProtectionKind::Deny
                && p.path != view.target
                && view.target.starts_with(&p.path)
        });
        if masked_above {
            continue;
        }
        protections.retain(|p| p.path != view.target);
        let access = match view.kind {
            ViewKind::Filtered => Access::Read,
            ViewKind::PrivateCopy => Access::ReadWrite,
        };
        grants.push(Grant {
            path: view.target.clone(),
            access,
            scope: Scope::Exact,
            origin: view.origin,
        });
        kept.push(view);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ProtectionKind;

    fn view(target: &str, kind: ViewKind) -> FileView {
        FileView {
            target: target.into(),
            kind,
            origin: Origin::Baseline,
            reason: "test".into(),
        }
    }

    fn mask(path: &str) -> Protection {
        Protection {
            path: path.into(),
            kind: ProtectionKind::Deny,
            origin: Origin::Baseline,
            exists: true,
            placeholder: None,
        }
    }

    #[test]
    fn a_view_replaces_its_own_mask_but_not_a_masked_directory() {
        let mut grants = Vec::new();
        let mut protections = vec![mask("/h/.npmrc"), mask("/h/.ssh")];
        let kept = finish_views(
            vec![
                view("/h/.npmrc", ViewKind::Filtered),
                view("/h/.ssh/config", ViewKind::Filtered),
                view("/h/.claude.json", ViewKind::PrivateCopy),
                view("/h/.npmrc", ViewKind::PrivateCopy),
            ],
            &mut grants,
            &mut protections,
        );
        assert_eq!(
            kept,
            vec![
                view("/h/.npmrc", ViewKind::Filtered),
                view("/h/.claude.json", ViewKind::PrivateCopy)
            ]
        );
        assert_eq!(protections, vec![mask("/h/.ssh")]);
        assert_eq!(
            grants,
            vec![
                Grant {
                    path: "/h/.npmrc".into(),
                    access: Access::Read,
                    scope: Scope::Exact,
                    origin: Origin::Baseline
                },
                Grant {
                    path: "/h/.claude.json".into(),
                    access: Access::ReadWrite,
                    scope: Scope::Exact,
                    origin: Origin::Baseline
                }
            ]
        );
    }
}
