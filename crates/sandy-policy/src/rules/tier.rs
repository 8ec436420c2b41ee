//! The protection tier of a run: the full tier (every layer, namespaces included) or the
//! named weaker tier, `landlock` (Landlock, seccomp, `no_new_privs` and the supervisor,
//! without user, mount, network or PID namespaces), which runs only when the user chose
//! it (`sandy run --tier landlock`). A typed field of the request, the resolved policy and
//! the launch manifest, so that a persistent setting can choose it the same way later.
//!
//! [`weaken`] turns a policy resolved for the full tier into what the weaker tier can
//! enforce, and refuses what it cannot (one line each). [`LANDLOCK_PROMISES`] says, for
//! each promise of the design, whether the weaker tier keeps it, keeps it differently or
//! drops it: the dry run's `tier` section and `docs/tiers.md` list the same table.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::model::paths::{POLICY_DOCUMENT_DIR, PRIVATE_SHM, PRIVATE_TMP, PRIVATE_VAR_TMP};
use crate::model::policy::{Access, Origin, Protection, ProtectionKind, ResolvedPolicy, Scope};
pub use crate::model::tier::{Keeping, Tier, TierPromise, LANDLOCK_PROMISES};

/// Why the weaker tier cannot run this policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierError {
    #[error(
        "--tier landlock cannot hide {} inside the writable grant {}: Landlock cannot take \
         a path out of a writable tree; grant a narrower path, or use the full tier",
        hidden.display(),
        grant.display()
    )]
    WritableCoversHidden { grant: PathBuf, hidden: PathBuf },
    #[error(
        "--tier landlock has no network namespace for {what}: use the full tier (sandy \
         doctor says how to get it here)"
    )]
    NeedsNetworkNamespace { what: &'static str },
}

/// Where the `landlock` tier puts the filtered copy of a git configuration file, and the
/// variable that names it to git (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`): git refuses
/// to run when a configuration file it looks for is unreadable, and the original, with
/// what the filter takes out, is hidden. `None` for every other view.
pub fn git_copy(
    private_tmp: &Path,
    view: &crate::model::policy::FileView,
) -> Option<(&'static str, PathBuf)> {
    if view.rule != crate::model::policy::FilterRule::Git
        || view.kind != crate::model::policy::ViewKind::Filtered
    {
        return None;
    }
    let (var, name) = if view.target.starts_with("/etc") {
        ("GIT_CONFIG_SYSTEM", ".sandy-gitconfig-system")
    } else {
        ("GIT_CONFIG_GLOBAL", ".sandy-gitconfig-global")
    };
    Some((var, private_tmp.join(name)))
}

/// Names of the variables that point into the private `/tmp`.
const TMP_VARS: &[&str] = &["TMPDIR", "TMP", "TEMP", "TEMPDIR"];

/// The directories the full tier replaces with private ones.
fn private_dirs(runtime_dir: Option<&Path>) -> Vec<PathBuf> {
    [PRIVATE_TMP, PRIVATE_VAR_TMP, PRIVATE_SHM, "/run"]
        .iter()
        .map(PathBuf::from)
        .chain(runtime_dir.map(Path::to_path_buf))
        .collect()
}

/// Turns a policy resolved for the full tier into the `landlock` tier's: what the mount
/// layer would have shown (the private directories, filtered copies, copy-on-write
/// caches, the policy document) is closed or read-only, the per-run directory on the host
/// is granted and named by `TMPDIR`, and what needs a namespace is refused. Pure.
pub fn weaken(policy: &mut ResolvedPolicy) -> Result<(), TierError> {
    policy.tier = Tier::Landlock;
    if policy.egress.is_some() {
        return Err(TierError::NeedsNetworkNamespace {
            what: "the egress allowlist (--allow-domain, --net agent)",
        });
    }
    if policy.network == crate::model::policy::Network::BlockAll && !policy.local_ports.is_empty() {
        return Err(TierError::NeedsNetworkNamespace {
            what: "--allow-local-port under --block-net",
        });
    }
    let privates = private_dirs(policy.runtime_dir.as_deref());
    let private_tmp = policy.private_tmp.clone();

    // The sandbox-side places of the full tier (its private directories and what Sandy
    // puts there) are not the host's: never granted here. A host path there that the
    // project, a profile or a flag names (a project in /tmp/x, `--read-write /dev/shm`
    // to share the host's on purpose) stays granted.
    policy.grants.retain(|g| {
        let sandbox_side = g.path.starts_with(POLICY_DOCUMENT_DIR)
            || (g.origin == Origin::Baseline && privates.iter().any(|p| g.path.starts_with(p)));
        !sandbox_side
    });
    // The filtered and private copies cannot be shown in place. An original outside
    // every writable tree is hidden (it holds what the filter takes out); one inside a
    // writable tree (an agent's state or settings file in its state directory) cannot be
    // taken out of it: the agent sees its original, and a change is put back after the
    // run like any protected path.
    let views: Vec<PathBuf> = policy.views.iter().map(|v| v.target.clone()).collect();
    let writable_tree = |p: &Path, grants: &[crate::model::policy::Grant]| {
        grants.iter().any(|g| {
            g.access == Access::ReadWrite && g.scope == Scope::Subtree && p.starts_with(&g.path)
        })
    };
    for target in views {
        let in_writable = writable_tree(&target, &policy.grants);
        if !in_writable {
            policy.grants.retain(|g| g.path != target);
        }
        if policy.protections.iter().any(|p| p.path == target) {
            continue;
        }
        let (kind, reason) = if in_writable {
            (
                ProtectionKind::ReadOnly,
                "--tier landlock shows the original in its writable directory; a change is \
                 put back after the run",
            )
        } else {
            (
                ProtectionKind::Deny,
                "--tier landlock shows no filtered copy: the original is not readable",
            )
        };
        policy.protections.push(Protection {
            path: target,
            kind,
            origin: Origin::Baseline,
            exists: true,
            placeholder: None,
            reason: Some(reason.to_owned()),
            at_launch: false,
        });
    }
    // Git's configuration files: a filtered copy in the run's directory, named by git's
    // own variables (the supervisor writes it), one per variable.
    let mut copies: Vec<crate::model::policy::FileView> = Vec::new();
    for view in &policy.views {
        let Some((var, dest)) = git_copy(&private_tmp, view) else {
            continue;
        };
        if writable_tree(&view.target, &policy.grants)
            || copies
                .iter()
                .any(|c| git_copy(&private_tmp, c).is_some_and(|(v, _)| v == var))
        {
            continue;
        }
        policy.environment.retain(|(k, _)| k.as_os_str() != var);
        policy
            .environment
            .push((OsString::from(var), dest.into_os_string()));
        policy.set_env.push(var.to_owned());
        copies.push(view.clone());
    }
    policy.set_env.sort();
    policy.set_env.dedup();
    policy.views = copies;
    // An agent's state file has no private copy either: the agent reads the file itself.
    // The empty file the copy would have been bound over is not made (an empty file is
    // no JSON document: Gemini CLI refused to start). A directory of Sandy's that stands in for the
    // agent's whole state directory (Codex's `CODEX_HOME`) is not made: the variable that
    // named it goes, and the agent uses its real directory.
    for file in &policy.state_files {
        if let Some(stand_in) = file.mirror.as_ref().and(file.inside.parent()) {
            let stand_in = stand_in.as_os_str();
            let named: Vec<OsString> = policy
                .environment
                .iter()
                .filter(|(_, v)| v.as_os_str() == stand_in)
                .map(|(k, _)| k.clone())
                .collect();
            policy
                .environment
                .retain(|(_, v)| v.as_os_str() != stand_in);
            policy
                .set_env
                .retain(|k| !named.iter().any(|n| n.as_os_str() == OsStr::new(k)));
            policy
                .created_at_launch
                .retain(|c| !c.path.starts_with(stand_in));
            continue;
        }
        policy.created_at_launch.retain(|c| {
            !(c.path == file.inside && c.kind == crate::model::policy::Placeholder::EmptyFile)
        });
    }
    policy.state_files.clear();
    // Copy-on-write caches have no overlay: the host's cache is read-only inside.
    let overlays: Vec<PathBuf> = policy
        .caches
        .iter()
        .filter(|c| c.kind == crate::model::caches::CacheKind::Overlay)
        .map(|c| c.path.clone())
        .collect();
    for g in &mut policy.grants {
        if g.access == Access::ReadWrite && overlays.contains(&g.path) {
            g.access = Access::ReadExec;
        }
    }
    policy
        .caches
        .retain(|c| c.kind != crate::model::caches::CacheKind::Overlay);
    // Redirected caches and TMPDIR point into the per-run directory on the host.
    let tmp = Path::new(PRIVATE_TMP);
    for cache in &mut policy.caches {
        let Ok(rest) = cache.layer.strip_prefix(tmp) else {
            continue;
        };
        let now = private_tmp.join(rest);
        if let (Some(var), Some(old), Some(new)) =
            (&cache.variable, cache.layer.to_str(), now.to_str())
        {
            for (name, value) in &mut policy.environment {
                if name.as_os_str() == var.as_str() {
                    if let Some(v) = value.to_str() {
                        *value = OsString::from(v.replace(old, new));
                    }
                }
            }
        }
        cache.layer = now;
    }
    for (name, value) in &mut policy.environment {
        if TMP_VARS.iter().any(|t| name.as_os_str() == *t) && value.as_os_str() == tmp {
            *value = private_tmp.clone().into_os_string();
        }
    }
    if !policy
        .grants
        .iter()
        .any(|g| g.path == private_tmp && g.access == Access::ReadWrite)
    {
        policy.grants.push(crate::model::policy::Grant {
            path: private_tmp,
            access: Access::ReadWrite,
            scope: Scope::Subtree,
            origin: Origin::Baseline,
        });
    }
    // A hidden path inside a writable tree cannot be taken out of it by Landlock.
    for p in policy
        .protections
        .iter()
        .filter(|p| p.kind == ProtectionKind::Deny)
    {
        if let Some(g) = policy.grants.iter().find(|g| {
            g.access == Access::ReadWrite
                && g.scope == Scope::Subtree
                && p.path.starts_with(&g.path)
                && p.path != g.path
        }) {
            return Err(TierError::WritableCoversHidden {
                grant: g.path.clone(),
                hidden: p.path.clone(),
            });
        }
    }
    // Nothing is mounted: the supervisor makes no placeholder for an absent protected
    // name (one the run creates there is removed after the run); the policy keeps them
    // to say which absent names the full tier would keep read-only.
    policy.runtime_dir = None;
    // The history directory lies in Sandy's own state, which no run may reach, and is
    // bound inside by a mount.
    policy.drop_history();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_promise_is_named_once() {
        let mut names: Vec<&str> = LANDLOCK_PROMISES.iter().map(|p| p.promise).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(LANDLOCK_PROMISES
            .iter()
            .any(|p| p.status == Keeping::Dropped));
    }

    #[test]
    fn tiers_have_names() {
        assert_eq!(Tier::default(), Tier::Full);
        assert_eq!(Tier::Landlock.name(), "landlock");
        assert_eq!(
            serde_json::to_string(&Tier::Landlock).unwrap(),
            "\"landlock\""
        );
    }

    /// docs/tiers.md lists the same table as the dry run.
    #[test]
    fn the_documented_table_is_this_one() {
        let doc = include_str!("../../../../docs/tiers.md");
        for p in LANDLOCK_PROMISES {
            let status = match p.status {
                Keeping::Kept => "kept",
                Keeping::KeptDifferently => "kept differently",
                Keeping::Dropped => "dropped",
            };
            let row = format!("| `{}` | {status} | {} |", p.promise, p.how);
            assert!(doc.contains(&row), "docs/tiers.md lacks: {row}");
        }
    }
}
