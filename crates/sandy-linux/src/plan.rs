use sandy_policy::{Network, ProtectionKind, Tier, ValidatedManifest};
use seccompiler::BpfProgram;

use crate::error::PlanError;
use crate::landlock::{self, PathRule};
use crate::namespaces::{mount_plan, MountPlan};
use crate::probe::{KernelSupport, MIN_LANDLOCK_ABI};
use crate::seccomp;

/// Everything the appliers install, computed before any irreversible step.
#[derive(Debug, Clone, PartialEq)]
pub struct EnforcementPlan {
    pub landlock_abi: u32,
    pub mounts: MountPlan,
    pub landlock_rules: Vec<PathRule>,
    pub seccomp: BpfProgram,
    pub network: Network,
}

/// Checks that this kernel can carry every promise a launch needs and returns the Landlock
/// ABI in use, without building anything (the supervisor's early check; the bootstrap
/// builds the rules once, in [`plan`]).
/// The weaker `landlock` tier needs no user namespace.
pub fn check_support(support: &KernelSupport, tier: Tier) -> Result<u32, PlanError> {
    let abi = match support.landlock_abi {
        Ok(abi) => abi,
        Err(errno) => {
            return Err(PlanError::LandlockUnavailable {
                reason: match errno {
                    libc::ENOSYS => "the kernel was built without it".to_owned(),
                    libc::EOPNOTSUPP => "it is disabled at boot (add landlock to lsm=)".to_owned(),
                    other => nix::errno::Errno::from_raw(other).desc().to_owned(),
                },
                required: MIN_LANDLOCK_ABI,
            })
        }
    };
    if abi < MIN_LANDLOCK_ABI {
        return Err(PlanError::LandlockTooOld {
            found: abi,
            required: MIN_LANDLOCK_ABI,
            needed_for: "scoping signals and abstract Unix sockets to the sandbox",
        });
    }
    if !support.seccomp_filter {
        return Err(PlanError::SeccompUnavailable);
    }
    // The other user-namespace restrictions only show when one is attempted (the
    // bootstrap names them); this one is certain from here.
    if tier == Tier::Full && support.max_user_namespaces == Some(0) {
        return Err(PlanError::UserNamespacesDisabled);
    }
    Ok(abi)
}

/// Checks that this kernel can carry every promise the manifest needs, and builds the
/// rules. Pure: the kernel's support comes in as data.
pub fn plan(
    manifest: &ValidatedManifest,
    support: &KernelSupport,
) -> Result<EnforcementPlan, PlanError> {
    plan_listing(manifest, support, &crate::tier::list_dir)
}

/// [`plan`] with the listing of directories the `landlock` tier splits around hidden
/// paths ([`crate::tier::split_around`]) given as data.
pub fn plan_listing(
    manifest: &ValidatedManifest,
    support: &KernelSupport,
    list: &dyn Fn(&std::path::Path) -> Option<Vec<crate::tier::Entry>>,
) -> Result<EnforcementPlan, PlanError> {
    let m = manifest.manifest();
    let abi = check_support(support, m.tier)?;
    let landlock_rules = match m.tier {
        Tier::Full => landlock::rules(&m.file_grants)
            .into_iter()
            .chain(landlock::terminal_rules())
            .collect(),
        // No mounts: a hidden path is not granted, and the host's ptys are not the run's
        // (the inherited terminal gets its own rule at launch).
        Tier::Landlock => {
            let hidden: Vec<std::path::PathBuf> = m
                .protections
                .iter()
                .filter(|p| p.kind == ProtectionKind::Deny)
                .map(|p| p.path.as_path().to_path_buf())
                .collect();
            // The run's own directory lies in the directory of runs, which is hidden
            // (other runs' directories are there): granted after the split.
            let private_tmp = m.private_tmp.as_path();
            let (own, rest): (Vec<_>, Vec<_>) = landlock::rules(&m.file_grants)
                .into_iter()
                .partition(|r| r.path == private_tmp);
            let mut rules = crate::tier::split_around(rest, &hidden, list);
            rules.extend(own);
            rules
        }
    };
    Ok(EnforcementPlan {
        landlock_abi: abi,
        mounts: mount_plan(manifest),
        landlock_rules,
        // Without a network namespace, --block-net refuses every IP socket here too.
        seccomp: seccomp::compile_for(
            m.network,
            m.tier == Tier::Landlock && m.network == Network::BlockAll,
        )?,
        network: m.network,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandy_policy::{LaunchManifest, MANIFEST_SCHEMA_VERSION};

    fn manifest() -> ValidatedManifest {
        ValidatedManifest::new(LaunchManifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            supervisor_pid: 1,
            program: "/usr/bin/true".into(),
            argv: vec!["true".into()],
            working_directory: "/p".into(),
            environment: vec![],
            file_grants: vec![],
            protections: vec![],
            private_tmp: "/tmp/sandy-1".into(),
            runtime_dir: None,
            network: Network::AllowAll,
            local_ports: vec![],
            resolvers: vec![],
            proxy_port: None,
            restore_default_signals: vec![],
            views: vec![],
            policy_document: None,
            overlays: vec![],
            reopened: vec![],
            history: None,
            ceilings: sandy_policy::ManifestCeilings {
                nproc: None,
                file_size: 1 << 30,
                tmp_size: 1 << 30,
                oom_score_adj: 500,
            },
            tier: Tier::Full,
        })
        .unwrap()
    }

    #[test]
    fn refuses_kernels_below_the_needed_abi_and_without_landlock_or_seccomp() {
        let ok = KernelSupport {
            landlock_abi: Ok(7),
            seccomp_filter: true,
            max_user_namespaces: Some(1000),
        };
        assert_eq!(plan(&manifest(), &ok).unwrap().landlock_abi, 7);
        for abi in 1..MIN_LANDLOCK_ABI {
            let old = KernelSupport {
                landlock_abi: Ok(abi),
                ..ok
            };
            assert!(matches!(
                plan(&manifest(), &old),
                Err(PlanError::LandlockTooOld { required: 6, .. })
            ));
        }
        let missing = KernelSupport {
            landlock_abi: Err(libc::ENOSYS),
            ..ok
        };
        let err = plan(&manifest(), &missing).unwrap_err();
        assert!(err.to_string().contains("built without it"), "{err}");
        let no_seccomp = KernelSupport {
            seccomp_filter: false,
            ..ok
        };
        assert!(matches!(
            plan(&manifest(), &no_seccomp),
            Err(PlanError::SeccompUnavailable)
        ));
        let no_userns = KernelSupport {
            max_user_namespaces: Some(0),
            ..ok
        };
        let err = plan(&manifest(), &no_userns).unwrap_err();
        assert!(err.to_string().contains("max_user_namespaces"), "{err}");
    }

    #[test]
    fn the_landlock_tier_needs_no_user_namespace_and_grants_no_hidden_path() {
        let mut m = manifest().manifest().clone();
        m.tier = Tier::Landlock;
        m.network = Network::BlockAll;
        m.file_grants = vec![sandy_policy::ManifestGrant {
            path: "/etc".into(),
            access: sandy_policy::Access::Read,
            scope: sandy_policy::Scope::Subtree,
        }];
        m.protections = vec![sandy_policy::ManifestProtection {
            path: "/etc/shadow".into(),
            kind: ProtectionKind::Deny,
            at_launch: false,
        }];
        let m = ValidatedManifest::new(m).unwrap();
        let no_userns = KernelSupport {
            landlock_abi: Ok(6),
            seccomp_filter: true,
            max_user_namespaces: Some(0),
        };
        let list = |dir: &std::path::Path| {
            (dir == std::path::Path::new("/etc")).then(|| {
                ["hosts", "shadow"]
                    .iter()
                    .map(|n| crate::tier::Entry {
                        name: (*n).into(),
                        symlink: false,
                    })
                    .collect()
            })
        };
        let plan = plan_listing(&m, &no_userns, &list).unwrap();
        let paths: Vec<_> = plan.landlock_rules.iter().map(|r| r.path.clone()).collect();
        // No devpts rules either: the host's ptys are not the run's.
        assert_eq!(paths, vec![std::path::PathBuf::from("/etc/hosts")]);
        assert_ne!(
            plan.seccomp,
            crate::seccomp::compile(Network::BlockAll).unwrap()
        );
    }
}
