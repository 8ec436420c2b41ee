//! Layer 4, resolution: `(RunRequest, HostContext, PathInspector) -> ResolvedPolicy` (see
//! the crate documentation, "Layers").

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::host::context::HostContext;
use crate::host::inspect::{FileKind, PathInspector};
use crate::model::paths::{
    private_dirs, POLICY_DOCUMENT_DIR, PRIVATE_SHM, PRIVATE_TMP, PRIVATE_VAR_TMP,
};
use crate::model::policy::{
    Access, FileView, Grant, LocalPort, Network, Origin, PortOrigin, ProfileInfo, Protection,
    ProtectionKind, ResolvedPolicy, Scope,
};
use crate::rules::error::ResolveError;
use crate::rules::profile::select as select_profile;
use crate::rules::protect::git_protections;
use crate::rules::sensitive::sensitive_paths;
use ctx::{carrying, find_program, search_path, visible_program, Ctx, GrantSet};

/// What the user asked for, after argument parsing (syntax only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    /// The command and its arguments, byte for byte.
    pub command: Vec<OsString>,
    /// `--read` paths, as typed.
    pub read: Vec<PathBuf>,
    /// `--read-write` paths, as typed.
    pub read_write: Vec<PathBuf>,
    /// `--execute` paths, as typed: programs run from there, nothing else read
    /// ([`Access::Execute`]).
    pub execute: Vec<PathBuf>,
    /// The private per-run temporary directory the supervisor created (or will create).
    pub private_tmp: PathBuf,
    /// `--block-net`.
    pub block_net: bool,
    /// `--allow-local-port` ports.
    pub allow_local_ports: Vec<u16>,
    /// `--numbat-collector` port.
    pub numbat_collector: Option<u16>,
    /// `--numbat`: a healthy Numbat hook registration is required (exit 125 without).
    pub numbat: bool,
    /// `--allow-domain`, `--deny-domain`, `--net agent`.
    pub egress: crate::rules::egress::EgressRequest,
    /// `--profile NAME`; detected from the command name when absent.
    pub profile: Option<String>,
    /// `--pass-env NAME`: variables that look like credentials, kept on purpose.
    pub pass_env: Vec<String>,
    /// `--max-procs`, `--max-memory`, `--max-file-size`, `--max-tmp`, `--cpu`.
    pub ceilings: crate::model::ceilings::CeilingRequest,
    /// The protection tier (`--tier`): the weaker `landlock` tier only when chosen.
    pub tier: crate::model::tier::Tier,
    /// What the user's configuration, profile or policy file adds ([`crate::rules::files`]),
    /// each rule with its origin. The flags add to it.
    pub files: crate::rules::files::FileRules,
}

/// Environment variables removed from the target's environment: agent and bus sockets
/// that lead out of the sandbox, and askpass helpers that would run outside it.
pub const REMOVED_ENV_EXACT: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "GIT_ASKPASS",
    "DBUS_SESSION_BUS_ADDRESS",
    "GPG_AGENT_INFO",
];

/// Prefixes of removed variables: the dynamic loader's (`LD_PRELOAD`, `LD_LIBRARY_PATH`,
/// `LD_AUDIT`, ...), which would inject code into every process the target starts.
pub const REMOVED_ENV_PREFIXES: &[&str] = &["LD_"];

/// Files only root may read, masked when Sandy runs as root.
const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
];

/// Variables pointed at the private temporary directory.
const TMP_VARS: &[&str] = &["TMPDIR", "TMP", "TEMP", "TEMPDIR"];

/// System directories every target may read, and execute where marked.
const SYSTEM_GRANTS: &[(&str, Access)] = &[
    ("/usr", Access::ReadExec),
    ("/bin", Access::ReadExec),
    ("/sbin", Access::ReadExec),
    ("/lib", Access::ReadExec),
    ("/lib64", Access::ReadExec),
    ("/lib32", Access::ReadExec),
    ("/libx32", Access::ReadExec),
    ("/opt", Access::ReadExec),
    ("/etc", Access::Read),
    ("/proc", Access::Read),
    ("/sys", Access::Read),
];

/// Character devices any program may read and write.
const DEVICE_GRANTS: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Why Sandy's own directories are masked (the dry run, `sandy why`).
pub const OWN_MASK_REASON: &str =
    "Sandy's own cache, state or per-run directories: no sandboxed run may reach them";

/// Resolves a run request against the host into the complete policy.
///
/// Grants are collected in order (baseline, project, command, `PATH` toolchains, flags);
/// a grant already covered by an earlier one with at least the same access is dropped.
pub fn resolve(
    request: &RunRequest,
    host: &HostContext,
    fs: &dyn PathInspector,
) -> Result<ResolvedPolicy, ResolveError> {
    let memo = crate::host::inspect::Memo::new(fs);
    let fs: &dyn PathInspector = &memo;
    let argv0 = request.command.first().ok_or(ResolveError::EmptyCommand)?;
    let home = host.home.clone();
    let mut sensitive = home.as_deref().map(sensitive_paths).unwrap_or_default();
    // Sandy's own places (design promise 6): its cache (copy-on-write layers), its state
    // (the pre-run copies `sandy restore` puts back) and the user's directory of runs
    // (the per-run directories of every live run) are never a run's. They are masked like
    // the sensitive set inside a read grant that covers them; any other grant of them is
    // refused (`Ctx::check_own`).
    let mut own: Vec<(PathBuf, &'static str)> = Vec::new();
    if let Some(home) = home.as_deref() {
        own.push((crate::rules::caches::sandy_cache_dir(home, host), "cache"));
        own.push((
            crate::rules::caches::sandy_state_dir(home, host),
            "state directory",
        ));
    }
    if let Some(runs) = request.private_tmp.parent() {
        own.push((runs.to_path_buf(), "per-run directories"));
    }
    let canonical_own: Vec<(PathBuf, &'static str)> = own
        .iter()
        .filter_map(|(p, what)| fs.canonicalize(p).ok().map(|c| (c, *what)))
        .collect();
    own.extend(canonical_own);
    // Existing sensitive paths are masked, under their canonical name too.
    let canonical_sensitive: Vec<PathBuf> = sensitive
        .iter()
        .filter(|p| fs.kind(p).is_some())
        .filter_map(|p| fs.canonicalize(p).ok())
        .collect();
    // Run as root, the target keeps uid 0 (without capabilities): the files only root may
    // read are masked too.
    let system_secrets: Vec<PathBuf> = if host.uid == 0 {
        SYSTEM_SECRETS
            .iter()
            .map(PathBuf::from)
            .filter(|p| fs.kind(p).is_some())
            .collect()
    } else {
        Vec::new()
    };
    // Sandy's cache and state directories, masked like the sensitive set (a read grant
    // may cover them; `Ctx::check_own` refuses every other grant of them).
    let own_masks: Vec<PathBuf> = home
        .as_deref()
        .map(|home| {
            [
                crate::rules::caches::sandy_cache_dir(home, host),
                crate::rules::caches::sandy_state_dir(home, host),
            ]
        })
        .into_iter()
        .flatten()
        .filter(|p| fs.kind(p).is_some())
        .filter_map(|p| fs.canonicalize(&p).ok())
        .collect();
    let masks: Vec<Protection> = canonical_sensitive
        .iter()
        .chain(system_secrets.iter())
        .map(|p| (p, None))
        .chain(
            own_masks
                .iter()
                .map(|p| (p, Some(OWN_MASK_REASON.to_owned()))),
        )
        .map(|(p, reason)| Protection {
            at_launch: false,
            path: p.clone(),
            kind: ProtectionKind::Deny,
            origin: Origin::Baseline,
            exists: true,
            placeholder: None,
            reason,
        })
        .collect();
    sensitive.extend(canonical_sensitive);
    sensitive.sort();
    sensitive.dedup();

    let ctx = Ctx {
        home: home.as_deref(),
        sensitive: &sensitive,
        own: &own,
        fs,
    };

    let project = fs
        .canonicalize(&host.cwd)
        .map_err(|e| ResolveError::NoWorkingDirectory {
            reason: e.to_string(),
        })?;
    ctx.check_project(&project)?;

    let path_var = host
        .var("PATH")
        .map(OsStr::to_os_string)
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let path_dirs = search_path(&path_var);

    let program = find_program(argv0, &project, &path_dirs, fs)?;

    let mut grants = GrantSet::default();

    // Baseline: the system, devices, terminal, private temporary directory, git identity.
    for (path, access) in SYSTEM_GRANTS {
        if let Ok(canonical) = fs.canonicalize(Path::new(path)) {
            if fs.kind(&canonical) == Some(FileKind::Directory) {
                grants.push(canonical, *access, Scope::Subtree, Origin::Baseline);
            }
        }
    }
    for dev in DEVICE_GRANTS
        .iter()
        .map(PathBuf::from)
        .chain(host.terminals.iter().cloned())
    {
        if fs.kind(&dev).is_some() {
            grants.push(dev, Access::ReadWrite, Scope::Exact, Origin::Baseline);
        }
    }
    if let Ok(resolv) = fs.canonicalize(Path::new("/etc/resolv.conf")) {
        grants.push(resolv, Access::Read, Scope::Exact, Origin::Baseline);
    }
    if let Some(home) = ctx.home {
        let xdg_config = host
            .var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".config"));
        let git_files = [
            home.join(".gitconfig"),
            xdg_config.join("git/config"),
            xdg_config.join("git/ignore"),
            xdg_config.join("git/attributes"),
        ];
        // And every configuration file git reads that the scan found (the files the
        // user's configuration includes, `~/.gitconfig.local`): without them git inside
        // fails on its first command.
        let included = host.git.config_files.iter().cloned();
        for file in git_files.into_iter().chain(included) {
            if let Ok(canonical) = fs.canonicalize(&file) {
                // One in the project, or already readable (`/etc/gitconfig`), needs no
                // rule of its own.
                let covered =
                    canonical.starts_with(&project) || grants.covers(&canonical, Access::Read);
                if !covered
                    && matches!(fs.kind(&canonical), Some(FileKind::File { .. }))
                    && ctx.sensitive_overlap(&canonical).is_none()
                {
                    grants.push(canonical, Access::Read, Scope::Exact, Origin::Baseline);
                }
            }
        }
    }

    // The project.
    grants.push(
        project.clone(),
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Project,
    );

    // The command, with what a rustup proxy needs when it is one. A command found in a
    // tree the sandbox can write (a link in the project's `node_modules/.bin` on `PATH`)
    // is what an earlier run may have planted: it gets its executable alone, never the
    // package a link of its leads into.
    let planted = std::iter::once(project.as_path())
        .chain(request.read_write.iter().map(PathBuf::as_path))
        .chain(request.files.read_write_paths())
        .any(|root| program.starts_with(root));
    if planted {
        ctx.grant_exact_executable(&program, &mut grants);
    } else {
        ctx.grant_executable(&program, &mut grants);
    }
    if let Some(dir) = program.parent() {
        ctx.grant_rust_toolchain(dir, host, &mut grants);
    }

    // Toolchains the caller's PATH reaches (each directory once).
    let mut seen_dirs: Vec<&Path> = Vec::with_capacity(path_dirs.len());
    for dir in &path_dirs {
        if !seen_dirs.contains(&dir.as_path()) {
            seen_dirs.push(dir);
            ctx.grant_path_dir(dir, host, &mut grants);
        }
    }

    // The interpreters the command's `#!` line names (usually inside a toolchain granted
    // just above), each an exact executable.
    for interpreter in shebang::interpreters(&program, &path_dirs, fs) {
        ctx.grant_exact_executable(&interpreter, &mut grants);
    }

    // The agent profile: its state directories, and its hook registrations protected.
    let (profile, detected) = select_profile(request.profile.as_deref(), argv0)?;
    let applied = ctx.apply_profile(
        &profile,
        host,
        &project,
        &path_dirs,
        request.numbat,
        &mut grants,
    )?;
    if profile.optional_dependencies {
        ctx.grant_optional_dependencies(&program, &mut grants);
    }

    // Explicit flags, checked strictly: they must exist and must not expose secrets.
    for (flag, paths, access) in [
        ("--read", &request.read, Access::Read),
        ("--read-write", &request.read_write, Access::ReadWrite),
    ] {
        for path in paths {
            let (canonical, scope) = ctx.check_explicit(flag, access, path, &project)?;
            grants.push(canonical, access, scope, Origin::Flag);
        }
    }
    for path in &request.execute {
        ctx.grant_execute("--execute", path, Origin::Flag, &project, &mut grants)?;
    }
    // The files' grants, checked as strictly as the flags' (the same code).
    let mut grant_reasons = Vec::new();
    for g in &request.files.grants {
        let label = match g.origin {
            Origin::Config => crate::rules::files::FileRole::Config.grant_label(),
            Origin::PolicyFile => crate::rules::files::FileRole::PolicyFile.grant_label(),
            Origin::ProjectFile => crate::rules::files::FileRole::Project.grant_label(),
            _ => crate::rules::files::FileRole::ProfileFile.grant_label(),
        };
        if g.access == Access::Execute {
            let canonical = ctx.grant_execute(label, &g.path, g.origin, &project, &mut grants)?;
            grant_reasons.push((canonical, g.origin, g.reason.clone()));
            continue;
        }
        let (canonical, scope) = ctx.check_explicit(label, g.access, &g.path, &project)?;
        grant_reasons.push((canonical.clone(), g.origin, g.reason.clone()));
        grants.push(canonical, g.access, scope, g.origin);
    }

    // Every agent's launch configuration, whatever the profile: a generic run (`make`,
    // `npm test`) or another agent's must not plant what an agent runs at its next launch.
    let (every_profile, agent_home_files) =
        ctx.every_profiles_protections(&profile.name, host, &project, &grants)?;

    // The private per-run directory is mounted at /tmp inside; /dev/shm, /var/tmp and the
    // runtime directory are fresh, empty and private. They name different directories than the
    // host paths granted above, so they are added last and never cover those.
    let runtime_dir = host
        .var("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && fs.kind(p) == Some(FileKind::Directory));
    // /var/tmp is replaced only where the host has one.
    let var_tmp =
        Some(PathBuf::from(PRIVATE_VAR_TMP)).filter(|p| fs.kind(p) == Some(FileKind::Directory));
    for private in [
        Some(PathBuf::from(PRIVATE_TMP)),
        Some(PathBuf::from(PRIVATE_SHM)),
        var_tmp,
        runtime_dir.clone(),
    ]
    .into_iter()
    .flatten()
    {
        grants.push_private(private);
    }

    // The sandbox's own policy, readable inside (it exists only there).
    grants.push_private_read(PathBuf::from(POLICY_DOCUMENT_DIR));

    let program = visible_program(program, runtime_dir.as_deref(), &grants, fs)?;

    let passed: Vec<&str> = profile
        .environment
        .pass
        .iter()
        .chain(&applied.pass_env)
        .chain(&request.pass_env)
        .chain(&request.files.pass_env)
        .map(String::as_str)
        .collect();
    let Environment {
        vars: mut environment,
        removed: mut removed_env,
        set: mut set_env,
        withheld: withheld_env,
    } = environment(host, Path::new(PRIVATE_TMP), &passed);
    for name in &profile.environment.unset {
        let before = environment.len();
        environment.retain(|(k, _)| k != name.as_str());
        if environment.len() != before {
            removed_env.push(name.clone());
        }
    }
    let state_env = applied.environment.iter().map(|(k, v)| (k, v));
    for (name, value) in profile.environment.set.iter().chain(state_env) {
        environment.retain(|(k, _)| k != name.as_str());
        environment.push((name.into(), value.into()));
        set_env.push(name.clone());
    }
    let block_net = request.block_net || request.files.block_net.is_some();
    let egress_request = egress_request(request);
    let open_network = !block_net && !egress_request.any();
    let local_ports = local_ports(request, host, open_network)?;
    let ports: Vec<u16> = local_ports.iter().map(|p| p.port).collect();
    // The weaker tier blocks the network with Landlock and seccomp: no proxy answers
    // inside (there is no namespace to put its listener in).
    let egress = if request.tier == crate::model::tier::Tier::Landlock && block_net {
        None
    } else {
        crate::rules::egress::resolve_egress(&egress_request, block_net, &profile, host, &ports)?
    };
    if let Some(e) = &egress {
        // Every client that honours the usual variables goes through the proxy; the
        // caller's own proxy settings would lead nowhere inside.
        for (name, value) in sandy_net::proxy_environment(e.proxy_port) {
            environment.retain(|(k, _)| k != name.as_str());
            environment.push((name.clone().into(), value.into()));
            set_env.push(name);
        }
    }
    // Shell and editor history: each tool pointed at the project's own file.
    let history = crate::rules::history::plan(host, &project, argv0);
    for (name, value) in history.iter().flat_map(|h| &h.environment) {
        environment.retain(|(k, _)| k != name);
        environment.push((name.clone(), value.clone()));
        set_env.push(name.to_string_lossy().into_owned());
    }
    removed_env.sort();
    removed_env.dedup();
    set_env.sort();
    set_env.dedup();
    let mut notices: Vec<String> = profile
        .notice
        .iter()
        .filter(|n| {
            let first = request.command.get(1).map(|a| a.to_string_lossy());
            let asked = n.if_args.is_empty()
                || request.command.iter().skip(1).any(|arg| {
                    let arg = arg.to_string_lossy();
                    n.if_args.iter().any(|i| {
                        arg.strip_prefix(i.as_str())
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
                    })
                });
            asked
                && !first.is_some_and(|f| n.unless_first_arg.iter().any(|u| *u == f))
                && !request.command.iter().skip(1).any(|arg| {
                    let arg = arg.to_string_lossy();
                    n.unless_args.iter().any(|u| *u == arg)
                })
        })
        .map(|n| n.message.clone())
        .collect();
    notices.extend(applied.notices.iter().cloned());

    // Protections: masks for every existing sensitive path, and the project's git hooks
    // and configuration, read-only wherever a writable grant would reach them.
    // The directory of runs, masked where it is seen inside: outside the directories the
    // sandbox replaces with private ones (`/tmp`), or below one but brought back in by a
    // grant that covers it.
    let runs_mask = request
        .private_tmp
        .parent()
        .filter(|runs| {
            let hidden = crate::rules::caches::hidden_dirs(host);
            let below_hidden = hidden.iter().any(|h| runs.starts_with(h));
            // A grant below a private directory (the project in `/tmp/x`) is carried into
            // it; the private directory's own grant (`/tmp`) is not the host's.
            let carried = grants.0.iter().any(|g| {
                g.scope == Scope::Subtree
                    && runs.starts_with(&g.path)
                    && hidden.iter().any(|h| g.path.starts_with(h) && g.path != *h)
            });
            !below_hidden || carried
        })
        .filter(|runs| fs.kind(runs).is_some())
        .and_then(|runs| fs.canonicalize(runs).ok());
    let grants = grants.into_vec();
    let mut protections = masks;
    protections.extend(runs_mask.map(|path| Protection {
        at_launch: false,
        path,
        kind: ProtectionKind::Deny,
        origin: Origin::Baseline,
        exists: true,
        placeholder: None,
        reason: Some(OWN_MASK_REASON.to_owned()),
    }));
    // The project's repository, and one at the top of any other writable directory grant.
    let repositories = std::iter::once(project.clone()).chain(
        grants
            .iter()
            .filter(|g| {
                g.origin.is_explicit() && g.access == Access::ReadWrite && g.scope == Scope::Subtree
            })
            .map(|g| g.path.clone()),
    );
    let repositories: Vec<PathBuf> = repositories.collect();
    let git = git_protections(&host.git, &repositories, fs);
    notices.extend(host.git.notes.iter().cloned());
    let writable = |path: &Path| {
        grants.iter().any(|g| {
            g.access == Access::ReadWrite && g.scope == Scope::Subtree && path.starts_with(&g.path)
        })
    };
    let mut named: Vec<Protection> = Vec::new();
    // The files' protections: a mask over an existing path (wherever it is), a
    // read-only path wherever a writable grant reaches it.
    let (file_masks, file_read_only) = ctx.file_protections(&request.files, &project)?;
    for mask in file_masks {
        if !protections.iter().any(|p| p.path == mask.path) {
            protections.push(mask);
        }
    }
    for p in git
        .into_iter()
        .chain(applied.protections.iter().cloned())
        .chain(every_profile)
        .chain(file_read_only)
    {
        // Each name once: the first producer's (git's, then the detected profile's).
        if named.iter().any(|q| q.path == p.path) {
            continue;
        }
        // A name below a symlink is protected when the name or where it leads is
        // writable (resolved only when the name itself is not).
        if writable(&p.path) || ctx.location(&p.path).is_some_and(|l| writable(&l)) {
            named.push(p);
        }
    }
    protections.extend(named);

    // Views: files the sandbox sees as a prepared copy instead of the host file.
    let mut views: Vec<FileView> = Vec::new();
    // Directories whose files a start-up file sources by a pattern: listable, so that
    // the shell inside expands it (their files are views).
    let mut listed: Vec<PathBuf> = Vec::new();
    if let Some(home) = ctx.home {
        let (startup, dirs) = views::shell_startup_views(home, host, fs);
        views.extend(startup);
        listed = dirs;
        views.extend(views::package_config_views(home, &project, host));
        views.extend(views::global_config_views(home, host, &grants, fs));
    }
    // The agent's state files: a private copy, merged back after the run.
    views.extend(applied.views.iter().cloned());
    let mut grants = grants;
    for dir in listed {
        let Ok(canonical) = fs.canonicalize(&dir) else {
            continue;
        };
        if fs.kind(&canonical) != Some(FileKind::Directory)
            || ctx.sensitive_overlap(&canonical).is_some()
        {
            continue;
        }
        // In a writable tree (a dotfiles project), a file added there would run in the
        // user's next shell: the directory is read-only, like the files in it.
        let writable = grants.iter().any(|g| {
            g.access == Access::ReadWrite
                && g.scope == Scope::Subtree
                && canonical.starts_with(&g.path)
        });
        if writable && !protections.iter().any(|p| p.path == canonical) {
            protections.push(Protection {
                at_launch: false,
                path: canonical.clone(),
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Baseline,
                exists: true,
                placeholder: None,
                reason: Some(
                    "a directory whose files a shell start-up file sources by a pattern \
                     (fish's conf.d, a loop over ~/.bashrc.d/*): a file added there runs in \
                     your next shell"
                        .to_owned(),
                ),
            });
        }
        if !grants.iter().any(|g| g.path == canonical) {
            grants.push(Grant {
                path: canonical,
                access: Access::List,
                scope: Scope::Subtree,
                origin: Origin::Baseline,
            });
        }
    }
    let privates = private_dirs(runtime_dir.as_deref());
    // Only the grants inside a private directory can carry a path through it: the rest
    // are left out of every question (asked for each component of each view's name).
    let carried: Vec<Grant> = grants
        .iter()
        .filter(|g| {
            privates
                .iter()
                .any(|p| g.path.starts_with(p) && g.path.as_path() != *p)
        })
        .cloned()
        .collect();
    let hidden = |p: &Path| matches!(carrying(p, &privates, &carried), Some((_, None)));
    let views = views::finish_views(views, &mut grants, &mut protections, &hidden, fs);
    let caches = views::add_caches(
        ctx.home,
        host,
        fs,
        &project,
        &applied.caches,
        &mut grants,
        &mut protections,
        &mut environment,
        &mut set_env,
    );

    let mut policy = ResolvedPolicy {
        program,
        argv: request.command.clone(),
        working_directory: project,
        environment,
        removed_env,
        withheld_env,
        set_env,
        grants,
        protections,
        network: if block_net || egress.is_some() {
            Network::BlockAll
        } else {
            Network::AllowAll
        },
        local_ports,
        resolvers: if open_network {
            host.resolvers.clone()
        } else {
            Vec::new()
        },
        egress,
        profile: ProfileInfo {
            name: profile.name.clone(),
            detected,
        },
        private_tmp: request.private_tmp.clone(),
        ceilings: ceilings(request),
        runtime_dir,
        notices,
        views,
        created_at_launch: applied.created,
        state_files: applied.state_files,
        caches,
        hooks: applied.hooks,
        kontext: None,
        agent_home_files,
        agent_state: applied.agent_state,
        watched: applied.watched,
        reopened: applied.reopened,
        files: crate::model::policy::FileSources {
            sources: request.files.sources.clone(),
            grant_reasons,
            project: request.files.project.clone(),
        },
        history,
        tier: crate::model::tier::Tier::Full,
    };
    if request.tier == crate::model::tier::Tier::Landlock {
        crate::rules::tier::weaken(&mut policy)?;
    }
    Ok(policy)
}

/// The network request: the flags' rules, then the files'.
fn egress_request(request: &RunRequest) -> crate::rules::egress::EgressRequest {
    let rule_origin = |origin: Origin| match origin {
        Origin::Config => sandy_net::RuleOrigin::Config,
        Origin::PolicyFile => sandy_net::RuleOrigin::PolicyFile,
        Origin::ProjectFile => sandy_net::RuleOrigin::ProjectFile,
        _ => sandy_net::RuleOrigin::ProfileFile,
    };
    let files = &request.files;
    let mut egress = request.egress.clone();
    egress.agent |= files.agent_net.is_some();
    // The project policy's domains join an allowlist the run has already (a flag's, a
    // user file's, `--net agent`); they never turn the host's network into one, nor
    // meet `--block-net`: a project adds, it does not choose the network.
    let blocked = request.block_net || files.block_net.is_some();
    let listed = egress.any()
        || files
            .allow
            .iter()
            .chain(&files.deny)
            .any(|(_, o)| *o != Origin::ProjectFile);
    let applies = |o: &Origin| *o != Origin::ProjectFile || (listed && !blocked);
    egress.from_files.extend(
        files
            .deny
            .iter()
            .filter(|(_, o)| applies(o))
            .map(|(p, o)| (sandy_net::Action::Deny, p.clone(), rule_origin(*o)))
            .chain(
                files
                    .allow
                    .iter()
                    .filter(|(_, o)| applies(o))
                    .map(|(p, o)| (sandy_net::Action::Allow, p.clone(), rule_origin(*o))),
            ),
    );
    egress
}

/// The ceilings: a flag's value, else a file's, else the default; each with its origin.
fn ceilings(request: &RunRequest) -> crate::model::ceilings::Ceilings {
    use crate::model::ceilings::{Ceiling, CeilingOrigin};
    let files = &request.files.ceilings;
    let mut asked = request.ceilings;
    let pick = |flag: &mut Option<u64>, file: crate::rules::files::FileCeiling| match (*flag, file)
    {
        (None, Some((value, origin))) => {
            *flag = Some(value);
            Some(match origin {
                Origin::PolicyFile => CeilingOrigin::PolicyFile,
                _ => CeilingOrigin::Config,
            })
        }
        _ => None,
    };
    let procs = pick(&mut asked.max_procs, files.max_procs);
    let memory = pick(&mut asked.max_memory, files.max_memory);
    let file_size = pick(&mut asked.max_file_size, files.max_file_size);
    let tmp = pick(&mut asked.max_tmp, files.max_tmp);
    let cpu = pick(&mut asked.cpu, files.cpu);
    let mut c = crate::model::ceilings::Ceilings::resolve(&asked);
    let set = |ceiling: &mut Ceiling, origin: Option<CeilingOrigin>| {
        if let Some(origin) = origin {
            ceiling.origin = origin;
        }
    };
    set(&mut c.max_procs, procs);
    set(&mut c.max_memory, memory);
    set(&mut c.max_file_size, file_size);
    set(&mut c.max_tmp, tmp);
    if let Some(ceiling) = c.cpu.as_mut() {
        set(ceiling, cpu);
    }
    c
}

/// The local ports, each once: with a blocked network, the ports relayed in; with the
/// host's network, the ports open on the host's own addresses, which are otherwise
/// closed. There, the agent's endpoint on the local host (a base URL variable naming
/// `localhost` or an address that may be the host's) opens its port too.
fn local_ports(
    request: &RunRequest,
    host: &HostContext,
    open_network: bool,
) -> Result<Vec<LocalPort>, ResolveError> {
    // The collector first, so that a port named twice is reported as the collector's.
    let requested = request
        .numbat_collector
        .map(|port| LocalPort {
            port,
            origin: PortOrigin::NumbatCollector,
        })
        .into_iter()
        .chain(request.allow_local_ports.iter().map(|&port| LocalPort {
            port,
            origin: PortOrigin::Flag,
        }))
        .chain(
            request
                .files
                .local_ports
                .iter()
                .map(|&(port, origin)| LocalPort {
                    port,
                    origin: match origin {
                        Origin::Config => PortOrigin::Config,
                        Origin::PolicyFile => PortOrigin::PolicyFile,
                        Origin::ProjectFile => PortOrigin::ProjectFile,
                        _ => PortOrigin::ProfileFile,
                    },
                }),
        );
    let mut ports: Vec<LocalPort> = Vec::new();
    for p in requested {
        if p.port == 0 {
            return Err(ResolveError::InvalidPort);
        }
        if !ports.iter().any(|q| q.port == p.port) {
            ports.push(p);
        }
    }
    if open_network {
        for (name, origin) in ENDPOINT_VARIABLES {
            let Some(port) = host
                .var(name)
                .and_then(|v| v.to_str())
                .and_then(local_endpoint_port)
            else {
                continue;
            };
            if !ports.iter().any(|q| q.port == port) {
                ports.push(LocalPort { port, origin });
            }
        }
    }
    Ok(ports)
}

/// The variables naming an agent's model endpoint, and the origin of the port they open.
pub const ENDPOINT_VARIABLES: [(&str, PortOrigin); 3] = [
    ("ANTHROPIC_BASE_URL", PortOrigin::AnthropicBaseUrl),
    ("OPENAI_BASE_URL", PortOrigin::OpenaiBaseUrl),
    ("GOOGLE_GEMINI_BASE_URL", PortOrigin::GoogleGeminiBaseUrl),
];

/// The port of a base URL on the local host: its host is `localhost` (or a name below
/// it) or an address that is not public (loopback, unspecified, or a private, link-local
/// or unique-local one, which may be the host's own). `None` for anything else.
pub fn local_endpoint_port(url: &str) -> Option<u16> {
    let pattern = crate::rules::egress::base_url_pattern(url)?;
    let port = match pattern.port {
        sandy_net::PortSpec::One(p) => p,
        _ => return None,
    };
    let local = match &pattern.host {
        sandy_net::HostPattern::Exact(name) => name == "localhost" || name.ends_with(".localhost"),
        sandy_net::HostPattern::Address(ip) => {
            sandy_net::classify(*ip) != sandy_net::AddressClass::Public
        }
        _ => false,
    };
    local.then_some(port)
}

/// Set to `1` in every target's environment.
const SANDY_VAR: &str = "SANDY";

/// Why a variable of the caller's looks like a credential: its name
/// ([`crate::rules::secrets::is_credential_name`]), or its value, which matches a known token
/// format ([`crate::rules::secrets::find`], looked at as `NAME=value`).
fn credential(name: &str, value: &OsStr) -> Option<String> {
    if crate::rules::secrets::is_credential_name(name) {
        return Some("its name".to_owned());
    }
    crate::rules::secrets::find_assigned(name, &value.to_string_lossy())
        .map(|rule| format!("its value (gitleaks rule {rule})"))
}

/// The target's environment: the caller's, minus escape hatches and what looks like a
/// credential (but for `pass`), with a private TMPDIR and `SANDY=1`.
fn environment(host: &HostContext, private_tmp: &Path, pass: &[&str]) -> Environment {
    let mut env = Vec::with_capacity(host.env.len() + 1);
    let mut removed = Vec::new();
    let mut set = Vec::new();
    let mut withheld = Vec::new();
    for (key, value) in &host.env {
        let name = key.to_string_lossy();
        let drop = REMOVED_ENV_EXACT.iter().any(|r| name == *r)
            || REMOVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p));
        let special = name == SANDY_VAR || TMP_VARS.iter().any(|t| name == *t);
        let secret = (!drop && !special && !pass.contains(&name.as_ref()))
            .then(|| credential(&name, value))
            .flatten();
        if drop {
            removed.push(name.into_owned());
        } else if let Some(why) = secret {
            removed.push(name.to_string());
            withheld.push(crate::model::policy::WithheldVar {
                name: name.into_owned(),
                why,
            });
        } else if name == SANDY_VAR {
            // Set below, whatever the caller's value.
        } else if TMP_VARS.iter().any(|t| name == *t) {
            set.push(name.into_owned());
            env.push((key.clone(), private_tmp.as_os_str().to_os_string()));
        } else {
            env.push((key.clone(), value.clone()));
        }
    }
    if !set.iter().any(|n| n == "TMPDIR") {
        set.push("TMPDIR".to_owned());
        env.push((
            OsString::from("TMPDIR"),
            private_tmp.as_os_str().to_os_string(),
        ));
    }
    // Tells programs (and people) that they run inside Sandy. Only a hint: Sandy itself
    // recognises a sandbox by its init, which nothing inside can change.
    set.push(SANDY_VAR.to_owned());
    env.push((OsString::from(SANDY_VAR), OsString::from("1")));
    removed.sort();
    removed.dedup();
    set.sort();
    set.dedup();
    withheld.sort();
    withheld.dedup();
    Environment {
        vars: env,
        removed,
        set,
        withheld,
    }
}

/// The target's environment as [`environment`] makes it, and what it says of it (names,
/// never values).
struct Environment {
    vars: Vec<(OsString, OsString)>,
    removed: Vec<String>,
    set: Vec<String>,
    withheld: Vec<crate::model::policy::WithheldVar>,
}

mod agent;
pub(crate) mod ctx;
mod shebang;
#[cfg(test)]
mod tests;
mod views;
