//! The agent profile's part of resolution: its roots, state-directory grants and
//! protections.

use std::path::{Path, PathBuf};

use super::{Ctx, GrantSet};
use crate::error::ResolveError;
use crate::host::HostContext;
use crate::inspect::FileKind;
use crate::policy::{Access, Origin, Protection, Scope};
use crate::profile::Profile;

/// What a profile contributes besides grants.
pub(super) struct AppliedProfile {
    pub(super) protections: Vec<Protection>,
    pub(super) notices: Vec<String>,
}

impl Ctx<'_> {
    /// Resolves a profile's roots, grants its paths and returns its protections.
    pub(super) fn apply_profile(
        &self,
        profile: &Profile,
        host: &HostContext,
        project: &Path,
        grants: &mut GrantSet,
    ) -> Result<AppliedProfile, ResolveError> {
        let mut roots: Vec<(String, PathBuf)> = vec![("project".to_owned(), project.to_path_buf())];
        for (name, candidates) in &profile.roots {
            if let Some(root) = self.profile_root(profile, candidates, host)? {
                roots.push((name.clone(), root));
            }
        }
        let expand = |path: &str| -> Option<PathBuf> {
            if let Some(rest) = path.strip_prefix("~/") {
                return self.home.map(|h| h.join(rest));
            }
            if let Some(inner) = path.strip_prefix('{') {
                let (root, rest) = inner.split_once('}')?;
                let base = &roots.iter().find(|(n, _)| n == root)?.1;
                let rest = rest.trim_start_matches('/');
                return Some(if rest.is_empty() {
                    base.clone()
                } else {
                    base.join(rest)
                });
            }
            Some(PathBuf::from(path))
        };
        let mut missing = Vec::new();
        for grant in &profile.grants {
            let Some(path) = expand(&grant.path) else {
                continue;
            };
            let Ok(canonical) = self.fs.canonicalize(&path) else {
                if grant.required {
                    return Err(ResolveError::ProfileMissing {
                        profile: profile.name.clone(),
                        path,
                    });
                }
                if grant.access == Access::ReadWrite {
                    missing.push(path);
                }
                continue;
            };
            let refuse = |reason| ResolveError::ProfileGrant {
                profile: profile.name.clone(),
                path: canonical.clone(),
                reason,
            };
            if canonical.parent().is_none() || self.home.is_some_and(|h| h.starts_with(&canonical))
            {
                return Err(refuse("it would expose the whole home directory"));
            }
            if self.sensitive.iter().any(|s| canonical.starts_with(s)) {
                return Err(refuse("it lies inside a sensitive path"));
            }
            if grant.access == Access::ReadWrite
                && self.sensitive.iter().any(|s| s.starts_with(&canonical))
            {
                return Err(refuse("it would make a sensitive path writable"));
            }
            let scope = if self.fs.kind(&canonical) == Some(FileKind::Directory) {
                Scope::Subtree
            } else {
                Scope::Exact
            };
            grants.push(canonical, grant.access, scope, Origin::Profile);
        }
        let protections = profile
            .protections
            .iter()
            .filter_map(|p| {
                let path = expand(&p.path)?;
                // The name, not its symlink target: the mount layer pins the name and
                // protects what it points to.
                let exists = self.fs.kind(&path).is_some();
                Some(Protection {
                    path,
                    kind: p.kind,
                    origin: Origin::Profile,
                    exists,
                    placeholder: None,
                })
            })
            .collect();
        // Sandy creates nothing in the home directory; a state directory that does not
        // exist yet cannot be created from inside (home is read-only there), so say so.
        let notices = missing
            .iter()
            .map(|p| {
                format!(
                    "note: {} does not exist, so {} cannot keep its state there inside the \
                     sandbox; create it first (mkdir -p {}) to let it",
                    p.display(),
                    profile.summary,
                    p.display()
                )
            })
            .collect();
        Ok(AppliedProfile {
            protections,
            notices,
        })
    }

    /// The first applicable candidate of a profile root. A root taken from an environment
    /// variable must be an absolute, existing directory, not home, and hold no sensitive
    /// path.
    fn profile_root(
        &self,
        profile: &Profile,
        candidates: &[String],
        host: &HostContext,
    ) -> Result<Option<PathBuf>, ResolveError> {
        for candidate in candidates {
            if let Some(var_expr) = candidate.strip_prefix('$') {
                let (var, suffix) = var_expr.split_once('/').unwrap_or((var_expr, ""));
                let Some(value) = host.var(var).filter(|v| !v.is_empty()) else {
                    continue;
                };
                let refuse = |reason| ResolveError::ProfileRoot {
                    profile: profile.name.clone(),
                    var: var.to_owned(),
                    reason,
                };
                let value = Path::new(value);
                if !value.is_absolute() {
                    return Err(refuse("it is not absolute"));
                }
                let canonical = self
                    .fs
                    .canonicalize(value)
                    .map_err(|_| refuse("it does not exist"))?;
                if self.fs.kind(&canonical) != Some(FileKind::Directory) {
                    return Err(refuse("it is not a directory"));
                }
                if canonical.parent().is_none()
                    || self.home.is_some_and(|h| h.starts_with(&canonical))
                {
                    return Err(refuse("it is the home directory or contains it"));
                }
                if self.sensitive_overlap(&canonical).is_some() {
                    return Err(refuse("it overlaps a sensitive path"));
                }
                return Ok(Some(if suffix.is_empty() {
                    canonical
                } else {
                    canonical.join(suffix)
                }));
            }
            if let Some(rest) = candidate.strip_prefix("~/") {
                if let Some(home) = self.home {
                    return Ok(Some(home.join(rest)));
                }
                continue;
            }
            return Ok(Some(PathBuf::from(candidate)));
        }
        Ok(None)
    }
}
