//! Landlock: grants become path-beneath rules over every access right of the pinned ABI,
//! plus the signal and abstract-Unix-socket scopes, and, for the host's network, TCP
//! connects refused (the supervisor makes them).

use std::path::PathBuf;

use landlock::{
    Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope as LandlockScope,
};
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, Mode, SFlag};
use sandy_policy::{Access, ManifestGrant, Scope};

use crate::error::LinuxError;
use crate::probe::PINNED_LANDLOCK_ABI;
use crate::sys::open;

/// One rule as data: a path and the rights beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    pub path: PathBuf,
    pub access: BitFlags<AccessFs>,
    pub scope: Scope,
}

/// The rights a grant gives, before narrowing to what applies to a single file.
pub fn rights(access: Access) -> BitFlags<AccessFs> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match access {
        Access::List => AccessFs::ReadDir.into(),
        Access::Execute => AccessFs::Execute.into(),
        Access::Read => read,
        Access::ReadExec => read | AccessFs::Execute,
        Access::ReadWrite => AccessFs::from_all(PINNED_LANDLOCK_ABI),
    }
}

/// Every right the ruleset handles: all that the pinned ABI knows, so nothing is allowed
/// merely because Sandy forgot to mention it.
pub fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_all(PINNED_LANDLOCK_ABI)
}

/// One rule for `access` at `path`: the subtree of a directory, or a file (whose rights
/// are narrowed to those that apply to a file).
pub fn rule(path: PathBuf, access: Access, directory: bool) -> PathRule {
    if directory {
        PathRule {
            path,
            access: rights(access),
            scope: Scope::Subtree,
        }
    } else {
        PathRule {
            path,
            access: rights(access) & AccessFs::from_file(PINNED_LANDLOCK_ABI),
            scope: Scope::Exact,
        }
    }
}

/// The rules for a manifest's grants.
pub fn rules(grants: &[ManifestGrant]) -> Vec<PathRule> {
    grants
        .iter()
        .map(|g| PathRule {
            path: g.path.as_path().to_path_buf(),
            access: match g.scope {
                Scope::Subtree => rights(g.access),
                Scope::Exact => rights(g.access) & AccessFs::from_file(PINNED_LANDLOCK_ABI),
            },
            scope: g.scope,
        })
        .collect()
}

/// The rules for new terminals: the private devpts instance the mount layer puts at
/// `/dev/pts` (its `ptmx`, which `/dev/ptmx` leads to, and the ptys the sandbox
/// allocates there: read, write and terminal ioctls), and listing `/dev`, which glibc's
/// `ttyname` scans to name the inherited terminal. No host pty is reachable there.
pub fn terminal_rules() -> Vec<PathRule> {
    vec![
        PathRule {
            path: PathBuf::from("/dev/pts"),
            access: AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::ReadDir
                | AccessFs::IoctlDev,
            scope: Scope::Subtree,
        },
        // `/dev/ptmx` is a bind mount of this node: Landlock walks up from the mount at
        // /dev/ptmx, never through /dev/pts, so the node carries its own rule.
        PathRule {
            path: PathBuf::from("/dev/pts/ptmx"),
            access: AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
            scope: Scope::Exact,
        },
        PathRule {
            path: PathBuf::from("/dev"),
            access: AccessFs::ReadDir.into(),
            scope: Scope::Subtree,
        },
    ]
}

/// The rule for the inherited terminal where the mount layer shows it, `/dev/console`
/// (a bind of the user's own pty, made only when the run inherited one): read, write and
/// terminal ioctls, as on `/dev/pts`.
pub fn console_rule() -> PathRule {
    PathRule {
        path: PathBuf::from("/dev/console"),
        access: AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        scope: Scope::Exact,
    }
}

/// What the ruleset does with TCP (no port is ever granted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tcp {
    /// Not handled (the network namespace decides).
    Open,
    /// Every connect refused: the supervisor connects the sandbox's sockets (the host's
    /// network, through the socket broker).
    RefuseConnect,
    /// Every connect and bind refused: `--block-net` without a network namespace (the
    /// `landlock` tier).
    RefuseAll,
}

/// Builds the ruleset and restricts the calling thread (and all its future children).
/// `tcp`: the TCP rights the ruleset handles, none of which is granted. Anything short
/// of full enforcement is an error.
pub fn apply(rules: &[PathRule], tcp: Tcp) -> Result<(), LinuxError> {
    let ll = |e: landlock::RulesetError| LinuxError::Landlock {
        reason: e.to_string(),
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled())
        .map_err(ll)?;
    match tcp {
        Tcp::Open => {}
        Tcp::RefuseConnect => ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(ll)?,
        Tcp::RefuseAll => {
            ruleset = ruleset
                .handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)
                .map_err(ll)?
        }
    }
    let mut ruleset = ruleset
        .scope(LandlockScope::from_all(PINNED_LANDLOCK_ABI))
        .map_err(ll)?
        .create()
        .map_err(ll)?;
    for rule in rules {
        let fd = match open(
            &rule.path,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // A grant that vanished since resolution grants nothing: fail closed.
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(source) => {
                return Err(LinuxError::GrantPath {
                    path: rule.path.clone(),
                    source,
                })
            }
        };
        let st = fstat(&fd).map_err(|source| LinuxError::GrantPath {
            path: rule.path.clone(),
            source,
        })?;
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            return Err(LinuxError::GrantSymlink {
                path: rule.path.clone(),
            });
        }
        if rule.scope == Scope::Exact && kind == SFlag::S_IFDIR {
            return Err(LinuxError::GrantKind {
                path: rule.path.clone(),
            });
        }
        let access = if kind == SFlag::S_IFDIR {
            rule.access
        } else {
            rule.access & AccessFs::from_file(PINNED_LANDLOCK_ABI)
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access).set_compatibility(CompatLevel::HardRequirement))
            .map_err(ll)?;
    }
    let status = ruleset.restrict_self().map_err(ll)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LinuxError::LandlockPartial {
            status: format!("{:?}", status.ruleset),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandy_policy::OsBytes;

    #[test]
    fn grants_map_to_rights_and_files_lose_directory_rights() {
        let grants = vec![
            ManifestGrant {
                path: OsBytes::from("/usr"),
                access: Access::ReadExec,
                scope: Scope::Subtree,
            },
            ManifestGrant {
                path: OsBytes::from("/dev/null"),
                access: Access::ReadWrite,
                scope: Scope::Exact,
            },
            ManifestGrant {
                path: OsBytes::from("/p"),
                access: Access::ReadWrite,
                scope: Scope::Subtree,
            },
        ];
        let file_rw = AccessFs::ReadFile
            | AccessFs::WriteFile
            | AccessFs::Execute
            | AccessFs::Truncate
            | AccessFs::IoctlDev;
        assert_eq!(
            rules(&grants),
            vec![
                PathRule {
                    path: "/usr".into(),
                    access: AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute,
                    scope: Scope::Subtree,
                },
                PathRule {
                    path: "/dev/null".into(),
                    access: file_rw,
                    scope: Scope::Exact,
                },
                PathRule {
                    path: "/p".into(),
                    access: AccessFs::from_all(landlock::ABI::V5),
                    scope: Scope::Subtree,
                },
            ]
        );
    }

    #[test]
    fn execute_alone_is_the_execute_right_and_nothing_else() {
        assert_eq!(rights(Access::Execute), AccessFs::Execute);
        assert!(!rights(Access::Execute).contains(AccessFs::ReadFile));
        assert!(!rights(Access::Execute).contains(AccessFs::ReadDir));
        assert!(!rights(Access::Read).contains(AccessFs::Execute));
    }

    #[test]
    fn every_right_of_the_pinned_abi_is_handled() {
        let all = handled();
        for right in [
            AccessFs::Refer,
            AccessFs::Truncate,
            AccessFs::IoctlDev,
            AccessFs::MakeSym,
            AccessFs::RemoveDir,
        ] {
            assert!(all.contains(right), "{right:?} not handled");
        }
    }
}
