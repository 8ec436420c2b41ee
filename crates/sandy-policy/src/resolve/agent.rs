//! The agent profile's part of resolution: its roots, state-directory grants (and what
//! to create at a first launch), protections (as names, with placeholders) and state
//! files.

use std::path::{Path, PathBuf};

use super::ctx::{Ctx, GrantSet};
use crate::host::context::HostContext;
use crate::host::inspect::{Entry, FileKind};
use crate::model::policy::{
    Access, FileView, FilterRule, LaunchCreation, Origin, Placeholder, Protection, RuntimeHook,
    Scope, StateFile, ViewKind,
};
use crate::rules::caches::ProfileCache;
use crate::rules::error::ResolveError;
use crate::rules::hooks::{
    is_numbat, kontext_binary, numbat_opencode_plugin, parse_numbat, plain_words, plugin_spec,
    resolve_hook, strip_jsonc, HookEnv, NumbatHook, PluginSpec, NUMBAT_MARKER,
};
use crate::rules::profile::Profile;
use crate::rules::statedirs::{
    claude_project_key, walk_at_launch, AgentStateDir, StateClass, StateLister, StateRule,
};

/// What a profile contributes besides grants.
pub(super) struct AppliedProfile {
    pub(super) protections: Vec<Protection>,
    pub(super) notices: Vec<String>,
    /// Absent state directories and files the supervisor creates before launch.
    pub(super) created: Vec<LaunchCreation>,
    /// State files: a private copy inside, merged back after the run.
    pub(super) state_files: Vec<StateFile>,
    /// The private copies of the state files.
    pub(super) views: Vec<FileView>,
    /// Variables set inside (a relocated state file's directory).
    pub(super) environment: Vec<(String, String)>,
    /// Variables the agent's configuration names as its credentials (they pass).
    pub(super) pass_env: Vec<String>,
    /// Registered hooks, resolved (runtime controls).
    pub(super) hooks: Vec<RuntimeHook>,
    /// The agent's own caches (copy-on-write, per project).
    pub(super) caches: Vec<ProfileCache>,
    /// Its state directories, default-deny.
    pub(super) agent_state: Vec<AgentStateDir>,
    /// Memory and login files: every change named after the run.
    pub(super) watched: Vec<(PathBuf, String)>,
    /// Writable names inside a protected state directory, mounted writable again.
    pub(super) reopened: Vec<PathBuf>,
}

/// The policy's view of a state directory, for [`crate::rules::statedirs::walk`] at launch.
struct InspectedState<'a> {
    root: &'a Path,
    fs: &'a dyn crate::host::inspect::PathInspector,
}

impl StateLister for InspectedState<'_> {
    fn list(&self, rel: &Path, max: usize) -> Option<Vec<(std::ffi::OsString, bool)>> {
        let dir = self.root.join(rel);
        if self.fs.kind(&dir) != Some(FileKind::Directory) {
            return None;
        }
        let name = |p: &PathBuf| p.file_name().map(std::ffi::OsStr::to_os_string);
        let mut out: Vec<(std::ffi::OsString, bool)> = self
            .fs
            .subdirs(&dir, max)
            .iter()
            .filter_map(|p| name(p).map(|n| (n, true)))
            .collect();
        out.extend(
            self.fs
                .files_in(&dir, max)
                .iter()
                .filter_map(|p| name(p).map(|n| (n, false))),
        );
        Some(out)
    }

    fn lookup(&self, rel: &Path, name: &std::ffi::OsStr) -> Option<bool> {
        match self.fs.entry(&self.root.join(rel).join(name))? {
            Entry::Link(_) => Some(false),
            Entry::Object(kind) => Some(kind == FileKind::Directory),
        }
    }
}

impl Ctx<'_> {
    /// Resolves a profile's roots, grants its paths and returns its protections.
    pub(super) fn apply_profile(
        &self,
        profile: &Profile,
        host: &HostContext,
        project: &Path,
        path_dirs: &[PathBuf],
        require_numbat: bool,
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
        let mut created = Vec::new();
        let mut caches = Vec::new();
        for grant in &profile.grants {
            let Some(path) = expand(&grant.path) else {
                continue;
            };
            let canonical = match self.fs.canonicalize(&path) {
                Ok(canonical) => canonical,
                // A state directory of the agent's own, absent: created before launch, so
                // it is granted where it will be (a dangling symlink is left alone).
                Err(_) if grant.create && self.fs.read_link(&path).is_none() => {
                    let Some(location) = self.location(&path) else {
                        missing.push(path);
                        continue;
                    };
                    created.push(LaunchCreation {
                        path: location.clone(),
                        kind: Placeholder::Directory,
                    });
                    location
                }
                Err(_) => {
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
                }
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
            if self
                .check_own("a profile grant", grant.access, &canonical)
                .is_err()
            {
                return Err(refuse(
                    "it would reach a place of Sandy's own (its cache, its state or its \
                     temporary base)",
                ));
            }
            if grant.access == Access::ReadWrite
                && self.sensitive.iter().any(|s| s.starts_with(&canonical))
            {
                return Err(refuse("it would make a sensitive path writable"));
            }
            let will_be_directory = created.last().is_some_and(|c| c.path == canonical);
            let scope =
                if will_be_directory || self.fs.kind(&canonical) == Some(FileKind::Directory) {
                    Scope::Subtree
                } else {
                    Scope::Exact
                };
            if grant.cache && scope == Scope::Subtree && grant.access == Access::ReadWrite {
                caches.push(ProfileCache {
                    tool: profile.name.clone(),
                    path: canonical.clone(),
                    created: will_be_directory,
                });
            }
            grants.push(canonical, grant.access, scope, Origin::Profile);
        }
        // Names, not targets: the mount layer pins the name and protects what it points to.
        let protections = profile
            .protections
            .iter()
            .filter_map(|p| {
                let path = expand(&p.path)?;
                // The name, not its symlink target: the mount layer pins the name and
                // protects what it points to.
                let exists = self.fs.exists(&path);
                Some(Protection {
                    at_launch: false,
                    path,
                    kind: p.kind,
                    origin: Origin::Profile,
                    exists,
                    placeholder: p.placeholder,
                    reason: Some(format!("{} profile: {}", profile.name, p.why)),
                })
            })
            .collect();
        let mut protections: Vec<Protection> = protections;
        // The scripts that settings name as commands (a status line, hooks), and the
        // hooks themselves: each one's executable (and script) granted and protected.
        let mut hooks = Vec::new();
        let mut hook_notices = Vec::new();
        let mut numbat_failure: Option<String> = None;
        let named_reason = format!(
            "{} profile: a file its configuration names (a hook, the status line, a plugin), \
             which runs at the next launch",
            profile.name
        );
        let protect = |path: PathBuf, protections: &mut Vec<Protection>| {
            if !protections.iter().any(|p| p.path == path) {
                let exists = self.fs.exists(&path);
                protections.push(Protection {
                    at_launch: false,
                    path,
                    kind: crate::model::policy::ProtectionKind::ReadOnly,
                    origin: Origin::Profile,
                    exists,
                    placeholder: None,
                    reason: Some(named_reason.clone()),
                });
            }
        };
        // A registration may widen the sandbox (grant its hook's files) only when no
        // sandboxed run can have written it: outside every writable grant, or protected
        // by a placeholder (so it always exists, read-only, inside). Otherwise (a
        // project's settings, a local settings file a run could create) its hooks are
        // listed and protected, and run only with what the grants already give.
        let placeholders: Vec<PathBuf> = profile
            .protections
            .iter()
            .filter(|p| p.placeholder.is_some())
            .filter_map(|p| expand(&p.path))
            .collect();
        let may_widen = |config: &Path, grants: &GrantSet| -> bool {
            let location = self
                .location(config)
                .unwrap_or_else(|| config.to_path_buf());
            !grants.covers(&location, Access::ReadWrite)
                || placeholders.iter().any(|p| config.starts_with(p))
        };
        // Each entry names one settings file, or a drop-in directory (`DIR/*.json`): every
        // `.json` file in it, in name order, as the agent reads them.
        let named_files: Vec<(&crate::rules::profile::ProfileNamedCommands, PathBuf)> = profile
            .named_commands
            .iter()
            .flat_map(|named| {
                let files = match named.file.strip_suffix("/*.json") {
                    Some(dir) => expand(dir)
                        .map(|dir| {
                            let mut files: Vec<PathBuf> = self
                                .fs
                                .files_in(&dir, 256)
                                .into_iter()
                                .filter(|f| f.extension().is_some_and(|e| e == "json"))
                                .collect();
                            files.sort();
                            files
                        })
                        .unwrap_or_default(),
                    None => expand(&named.file).into_iter().collect(),
                };
                files.into_iter().map(move |file| (named, file))
            })
            .collect();
        for (named, file) in named_files {
            let widen = may_widen(&file, grants);
            for path in self.commands_named_in(&file, named, project, grants) {
                protect(path, &mut protections);
            }
            let env = HookEnv {
                home: self.home,
                project,
                path_dirs,
            };
            for hook in self.hook_invocations(&file, &named.hooks, &named.argv) {
                // Numbat's own registration (its ownership marker), as Numbat writes it.
                let words = match &hook.args {
                    Some(args) => Some(
                        std::iter::once(hook.command.clone())
                            .chain(args.iter().cloned())
                            .collect(),
                    ),
                    None => plain_words(&hook.command, &env),
                };
                let is_numbat_hook =
                    words.as_deref().is_some_and(is_numbat) || hook.command.contains(NUMBAT_MARKER);
                if is_numbat_hook {
                    let applied = match (&words, self.home) {
                        _ if !widen => Err(format!(
                            "{} is a file a sandboxed run could have written, and Sandy \
                             widens the sandbox only for registrations no run can write",
                            file.display()
                        )),
                        (Some(words), Some(home)) => parse_numbat(words, &profile.name, home)
                            .and_then(|n| {
                                self.apply_numbat(&n, grants, &mut |p| protect(p, &mut protections))
                                    .map(|()| n)
                            }),
                        (None, _) => Err("its command uses shell syntax".to_owned()),
                        (_, None) => Err("the home directory is unknown".to_owned()),
                    };
                    match applied {
                        Ok(numbat) => {
                            let entry = RuntimeHook {
                                service: "Numbat".to_owned(),
                                path: numbat.executable,
                                script: None,
                                configuration: file.clone(),
                            };
                            if !hooks.contains(&entry) {
                                hooks.push(entry);
                            }
                        }
                        Err(reason) => {
                            numbat_failure.get_or_insert(format!(
                                "the registration in {} is not usable: {reason}",
                                file.display()
                            ));
                        }
                    }
                    continue;
                }
                let command = match &hook.args {
                    Some(args) => std::iter::once(&hook.command)
                        .chain(args)
                        .map(|w| shell_quote(w))
                        .collect::<Vec<_>>()
                        .join(" "),
                    None => hook.command.clone(),
                };
                match resolve_hook(&command, &env, self.fs) {
                    Ok(hook) => {
                        for path in std::iter::once(&hook.executable).chain(&hook.script) {
                            if !self.grant_hook_file(path, path_dirs, widen, grants) {
                                hook_notices.push(format!(
                                    "note: a hook registered in {} needs {}, which Sandy does \
                                     not grant ({}), so it will likely fail inside the sandbox",
                                    file.display(),
                                    path.display(),
                                    if widen {
                                        "it lies in a sensitive path"
                                    } else {
                                        "the registration is in a file a sandboxed run could \
                                         have written; register it in the user settings instead"
                                    }
                                ));
                            }
                            protect(path.clone(), &mut protections);
                        }
                        // Kontext's own registration, in the shape `kontext setup` writes:
                        // evidence of an installation the supervisor then verifies (only
                        // from a registration no sandboxed run can have written).
                        let kontext = widen
                            && words
                                .as_deref()
                                .and_then(|w| kontext_binary(w, &profile.name))
                                .is_some_and(|b| b == hook.executable);
                        let entry = RuntimeHook {
                            service: if kontext { "Kontext" } else { "hook" }.to_owned(),
                            path: hook.executable,
                            script: hook.script,
                            configuration: file.clone(),
                        };
                        if !hooks.contains(&entry) {
                            hooks.push(entry);
                        }
                    }
                    Err(reason) => hook_notices.push(format!(
                        "note: a hook registered in {} cannot be resolved before launch ({reason}), \
                         so it will likely fail inside the sandbox: {}",
                        file.display(),
                        first_words(&command),
                    )),
                }
            }
        }
        // Plugins the agent loads: each file listed; Numbat's generated plugin recognised.
        for dir in &profile.plugin_directories {
            let Some(dir) = expand(&dir.path) else {
                continue;
            };
            for file in self.fs.files_in(&dir, 256) {
                let widen = may_widen(&file, grants);
                let is_code = file
                    .extension()
                    .is_some_and(|e| ["js", "ts", "mjs", "cjs", "mts"].iter().any(|x| e == *x));
                if !is_code {
                    continue;
                }
                protect(file.clone(), &mut protections);
                let body = self
                    .fs
                    .read_head(&file, 256 * 1024)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                let (service, path) = match numbat_opencode_plugin(&body) {
                    None => ("hook", file.clone()),
                    Some(words) => {
                        let applied = match (words, self.home) {
                            _ if !widen => Err(format!(
                                "{} is a file a sandboxed run could have written, and Sandy \
                                 widens the sandbox only for registrations no run can write",
                                file.display()
                            )),
                            (Ok(words), Some(home)) => parse_numbat(&words, &profile.name, home)
                                .and_then(|n| {
                                    self.apply_numbat(&n, grants, &mut |p| {
                                        protect(p, &mut protections)
                                    })
                                    .map(|()| n)
                                }),
                            (Err(e), _) => Err(e),
                            (_, None) => Err("the home directory is unknown".to_owned()),
                        };
                        match applied {
                            Ok(numbat) => ("Numbat", numbat.executable),
                            Err(reason) => {
                                numbat_failure.get_or_insert(format!(
                                    "the plugin {} is not usable: {reason}",
                                    file.display()
                                ));
                                continue;
                            }
                        }
                    }
                };
                // A plain plugin is registered by its directory; Numbat's executable by
                // its plugin file.
                let entry = RuntimeHook {
                    service: service.to_owned(),
                    path,
                    script: None,
                    configuration: if service == "Numbat" {
                        file.clone()
                    } else {
                        dir.clone()
                    },
                };
                if !hooks.contains(&entry) {
                    hooks.push(entry);
                }
            }
        }
        // Plugins named in configuration and installed from npm into the agent's cache:
        // each listed with the package directory it loads from, protected read-only (and
        // granted read when the registration may widen the sandbox).
        for packages in &profile.plugin_packages {
            let (Some(file), Some(cache)) = (expand(&packages.file), expand(&packages.cache))
            else {
                continue;
            };
            let Some(doc) = self
                .fs
                .read_head(&file, 1024 * 1024)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&strip_jsonc(&t)).ok())
            else {
                continue;
            };
            let widen = may_widen(&file, grants);
            let entries = packages
                .keys
                .iter()
                .filter_map(|k| doc.get(k).and_then(|v| v.as_array()))
                .flatten();
            for entry in entries {
                let found = match plugin_spec(entry) {
                    Ok(PluginSpec::Npm { spec, name }) => {
                        // OpenCode's layout: `packages/SPEC/node_modules/NAME` (the install
                        // directory holds the package and its dependencies); older
                        // releases: `node_modules/NAME`.
                        let install = cache.join("packages").join(&spec);
                        let candidates = [
                            (install.join("node_modules").join(&name), install.clone()),
                            (
                                cache.join("node_modules").join(&name),
                                cache.join("node_modules").join(&name),
                            ),
                        ];
                        candidates
                            .into_iter()
                            .find(|(package, _)| self.fs.kind(package) == Some(FileKind::Directory))
                            .ok_or_else(|| {
                                format!(
                                    "the npm plugin '{spec}' is not installed in {} (OpenCode                                      would install it at launch, inside the sandbox,                                      unprotected; run OpenCode once outside Sandy)",
                                    cache.display()
                                )
                            })
                    }
                    Ok(PluginSpec::Local(written)) => {
                        let path = written.strip_prefix("file://").unwrap_or(&written);
                        let path = match path.strip_prefix("~/") {
                            Some(rest) => self.home.map(|h| h.join(rest)),
                            None => file
                                .parent()
                                .map(|d| crate::model::paths::normalize(&d.join(path))),
                        };
                        path.filter(|p| self.fs.kind(p).is_some())
                            .map(|p| (p.clone(), p))
                            .ok_or_else(|| format!("the local plugin '{written}' does not exist"))
                    }
                    Err(reason) => Err(reason),
                };
                match found {
                    Ok((package, loaded_from)) => {
                        if widen {
                            if let Ok(canonical) = self.fs.canonicalize(&loaded_from) {
                                if self.sensitive_overlap(&canonical).is_none()
                                    && !grants.covers(&canonical, Access::Read)
                                {
                                    let scope = if self.fs.kind(&canonical)
                                        == Some(FileKind::Directory)
                                    {
                                        Scope::Subtree
                                    } else {
                                        Scope::Exact
                                    };
                                    grants.push(canonical, Access::Read, scope, Origin::Profile);
                                }
                            }
                        }
                        protect(loaded_from, &mut protections);
                        let entry = RuntimeHook {
                            service: "hook".to_owned(),
                            path: package,
                            script: None,
                            configuration: file.clone(),
                        };
                        if !hooks.contains(&entry) {
                            hooks.push(entry);
                        }
                    }
                    Err(reason) => hook_notices.push(format!(
                        "note: a plugin registered in {} cannot be resolved before launch: {reason}",
                        file.display()
                    )),
                }
            }
        }
        let numbat_found = hooks.iter().any(|h| h.service == "Numbat");
        if let Some(reason) = &numbat_failure {
            if require_numbat {
                return Err(ResolveError::RuntimeControlRequired {
                    flag: "--numbat",
                    service: "Numbat",
                    reason: reason.clone(),
                    setup: format!("numbat hook install --agent {}", profile.name),
                });
            }
            hook_notices.push(format!(
                "note: Numbat's hooks will likely fail inside the sandbox: {reason}"
            ));
        } else if require_numbat && !numbat_found {
            return Err(ResolveError::RuntimeControlRequired {
                flag: "--numbat",
                service: "Numbat",
                reason: format!(
                    "no Numbat hook is registered in {}'s configuration",
                    profile.summary
                ),
                setup: format!("numbat hook install --agent {}", profile.name),
            });
        }
        let mut state_files = Vec::new();
        let mut views = Vec::new();
        let mut environment = Vec::new();
        for file in &profile.state_files {
            let Some(path) = expand(&file.path) else {
                continue;
            };
            // `{run}`: this run's own name (the supervisor's pid), for a stand-in directory
            // that concurrent runs must not share.
            let run = host.supervisor_pid.to_string();
            let per_run = |p: &str| expand(&p.replace("{run}", &run));
            let Some(inside) = file.inside.as_deref().map_or(Some(path.clone()), per_run) else {
                continue;
            };
            // The host file must be a regular file or absent (the copy then starts as
            // `{}`); a directory, a FIFO or a dangling symlink is not a state file Sandy
            // copies, and the agent does not get it.
            let usable = match self.fs.kind(&path) {
                Some(FileKind::File { .. }) => true,
                None => self.fs.read_link(&path).is_none(),
                Some(_) => false,
            };
            if !usable {
                continue;
            }
            if file.inside_is_private {
                // A plain file in a writable state directory (the supervisor creates
                // missing parents): nothing to bind.
                if self.location(&inside).is_none() {
                    continue;
                }
            } else {
                // The copy is bound over `inside`: an empty mount point when absent
                // (removed after the run unless the merge wrote the state there).
                match self.fs.kind(&inside) {
                    Some(FileKind::File { .. }) => {}
                    None if self.fs.read_link(&inside).is_none()
                        && inside.parent().is_some_and(|d| {
                            self.fs.kind(d) == Some(FileKind::Directory)
                                || created.iter().any(|c| c.path == d)
                        }) =>
                    {
                        created.push(LaunchCreation {
                            path: inside.clone(),
                            kind: Placeholder::EmptyFile,
                        });
                    }
                    _ => continue,
                }
                views.push(FileView {
                    target: inside.clone(),
                    link: None,
                    kind: ViewKind::PrivateCopy,
                    origin: Origin::Profile,
                    reason: format!(
                        "{}'s state file {}: a private copy inside; after the run only \
                         known-safe keys go back",
                        profile.summary,
                        path.display()
                    ),
                    rule: FilterRule::ByName,
                });
            }
            for (name, value) in &file.environment {
                if let Some(value) = per_run(value) {
                    environment.push((name.clone(), value.to_string_lossy().into_owned()));
                }
            }
            state_files.push(StateFile {
                path,
                inside,
                persist: file.persist.clone(),
                bound: !file.inside_is_private,
                format: file.format,
                mirror: file.mirror.as_deref().and_then(expand),
                private_dirs: file.private_dirs.clone(),
                inside_settings: file.inside_settings.clone(),
            });
        }
        // A state directory that cannot be created (its name is a dangling symlink, or
        // no ancestor exists) is not granted; say so.
        let mut notices: Vec<String> = missing
            .iter()
            .map(|p| {
                format!(
                    "note: {} does not exist and Sandy cannot create it, so {} cannot keep \
                     its state there inside the sandbox",
                    p.display(),
                    profile.summary,
                )
            })
            .collect();
        notices.extend(hook_notices);
        // The variables the agent's own configuration names for its credentials: only
        // plain variable names are taken.
        let pass_env: Vec<String> = profile
            .environment
            .pass_named
            .iter()
            .filter_map(|named| Some((expand(&named.file)?, &named.keys)))
            .flat_map(|(file, keys)| self.command_strings(&file, keys))
            .filter(|name| {
                !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.as_bytes()[0].is_ascii_digit()
            })
            .collect();
        // The state directories, default-deny: every existing name no rule lets the agent
        // write is read-only; the rules go to the dry run and the post-run sweep.
        let mut agent_state = Vec::new();
        let mut watched = Vec::new();
        let mut reopened = Vec::new();
        let key = claude_project_key(project);
        for state in &profile.state_dirs {
            let Some(root) = expand(&state.root) else {
                continue;
            };
            let classes = [
                (&state.writable, StateClass::Writable),
                (&state.watched, StateClass::Watched),
                (&state.login, StateClass::Login),
                (&state.read_only, StateClass::ReadOnly),
            ];
            let rules: Vec<StateRule> = classes
                .iter()
                .flat_map(|(paths, class)| {
                    paths.iter().map(|p| StateRule {
                        path: p.replace("{project_key}", &key),
                        class: *class,
                        why: match class {
                            StateClass::Writable => {
                                format!("{} profile: {}", profile.name, state.why)
                            }
                            StateClass::Watched => format!(
                                "{} profile: memory {} reads into its next prompt (every \
                                 change is named after the run)",
                                profile.name, profile.summary
                            ),
                            StateClass::Login => format!(
                                "{} profile: the login (a refresh is kept; every change is \
                                 named after the run)",
                                profile.name
                            ),
                            StateClass::ReadOnly => format!(
                                "{} profile: {} reads it at launch (configuration, \
                                 instructions or code), so it is read-only",
                                profile.name, profile.summary
                            ),
                        },
                    })
                })
                .collect();
            let mut dir = AgentStateDir {
                profile: profile.name.clone(),
                root: root.clone(),
                rules,
                read_only_at_launch: Vec::new(),
                accounts: state
                    .accounts
                    .iter()
                    .map(|a| crate::model::statedirs::Account {
                        path: a.path.clone(),
                        identity: a.identity.clone(),
                    })
                    .collect(),
            };
            for rule in dir.rules.iter().filter(|r| {
                matches!(r.class, StateClass::Watched | StateClass::Login) && !r.path.contains('*')
            }) {
                let reason = match rule.class {
                    StateClass::Login => format!(
                        "{}'s login: the next launch outside signs in with it",
                        profile.summary
                    ),
                    _ => format!(
                        "{} reads it into the next session's prompt",
                        profile.summary
                    ),
                };
                watched.push((root.join(&rule.path), reason));
            }
            let (found, reopen) = walk_at_launch(
                &dir,
                &InspectedState {
                    root: &root,
                    fs: self.fs,
                },
            );
            // Writable directories inside a directory protected as one (they exist: the
            // walk checked), opened again on top of it.
            reopened.extend(reopen.into_iter().map(|rel| root.join(rel)));
            for f in found {
                let path = root.join(&f.rel);
                // Whatever is at the name when the sandbox is set up is protected (a
                // link, dangling or not, is pinned as a link; see `Protection::at_launch`).
                if !protections.iter().any(|p| p.path == path) {
                    protections.push(Protection {
                        at_launch: true,
                        path,
                        kind: crate::model::policy::ProtectionKind::ReadOnly,
                        origin: Origin::Profile,
                        exists: true,
                        placeholder: None,
                        reason: Some(f.why.unwrap_or_else(|| {
                            format!(
                                "{} profile: not among what {} writes in ordinary use, so \
                                 read-only (its next launch may read it)",
                                profile.name, profile.summary
                            )
                        })),
                    });
                }
                dir.read_only_at_launch.push(f.rel);
            }
            agent_state.push(dir);
        }
        Ok(AppliedProfile {
            agent_state,
            watched,
            reopened,
            hooks,
            protections,
            notices,
            created,
            state_files,
            views,
            environment,
            pass_env,
            caches,
        })
    }

    /// Every built-in profile's launch-configuration protections, for every run whatever
    /// its profile: the files through which an agent runs code at its next launch must
    /// not be writable by a run of another agent, or of `make`. Taken from the profiles
    /// themselves: their protections, the host files of their state files (the detected
    /// profile writes those through a private copy; no other run may write them at all),
    /// and the files their settings name as commands ([`Self::commands_named_in`]).
    ///
    /// The detected profile (`detected`) applies its own (with its grants, placeholders
    /// and state handling); from it only the project-level names in the project's
    /// writable ancestors are added here. For the others:
    /// - a project-level name (`{project}/...`) is protected in the project and in each
    ///   ancestor of it that a writable grant covers (agents search upward: Claude Code's
    ///   `.mcp.json`, OpenCode's `opencode.json(c)` and `.opencode`);
    /// - any other name only when it is inside a writable grant or leads into one through
    ///   a symbolic link (a dotfile manager's `~/.claude/settings.json -> ~/dotfiles/...`
    ///   with the dotfiles as the project). Every root a profile could use is taken (a
    ///   root from the environment when it is set and absolute, without the checks a
    ///   granted root needs, and the default), so a run cannot prepare a launch with
    ///   another environment.
    ///
    /// Nothing is created and nothing granted. An absent name costs one `lstat` here (and
    /// one before and after the run, when it is reported if the run created it); a home
    /// root that does not exist costs two system calls for all the names below it.
    pub(super) fn every_profiles_protections(
        &self,
        detected: &str,
        host: &HostContext,
        project: &Path,
        grants: &GrantSet,
    ) -> Result<(Vec<Protection>, Vec<PathBuf>), ResolveError> {
        let writable: Vec<&Path> = grants
            .0
            .iter()
            .filter(|g| g.access == Access::ReadWrite && g.scope == Scope::Subtree)
            .map(|g| g.path.as_path())
            .collect();
        // The project, and each ancestor of it a writable grant covers.
        let project_dirs: Vec<&Path> = project
            .ancestors()
            .enumerate()
            .filter(|(i, a)| *i == 0 || writable.iter().any(|w| a.starts_with(w)))
            .map(|(_, a)| a)
            .collect();
        // The top of each `--read-write` grant, and each directory below the project or
        // a grant that already holds an agent's launch names (a package of a monorepo):
        // an agent started there reads them too.
        let grant_roots: Vec<&Path> = grants
            .0
            .iter()
            .filter(|g| {
                g.origin.is_explicit() && g.access == Access::ReadWrite && g.scope == Scope::Subtree
            })
            .map(|g| g.path.as_path())
            .chain(host.git.agent_dirs.iter().map(PathBuf::as_path))
            .filter(|d| !project_dirs.contains(d))
            .collect();
        let mut reach = Reach::default();
        let mut out: Vec<Protection> = Vec::new();
        // The paths in `out`, each once (a few hundred names: a linear search per name
        // was a tenth of the resolution's time).
        let mut named: foldhash::HashSet<PathBuf> = foldhash::HashSet::default();
        // The home-level names left out (they lead into no writable tree) that exist as
        // files: compared after the run when they have another name (a hard link).
        let mut left_out: Vec<PathBuf> = Vec::new();
        let mut push = |path: PathBuf, reason: &dyn Fn() -> String, out: &mut Vec<Protection>| {
            if named.insert(path.clone()) {
                let exists = self.fs.exists(&path);
                out.push(Protection {
                    at_launch: false,
                    path,
                    kind: crate::model::policy::ProtectionKind::ReadOnly,
                    origin: Origin::Profile,
                    exists,
                    placeholder: None,
                    reason: Some(reason()),
                });
            }
        };
        for profile in crate::rules::profile::builtin_baselines()? {
            let own = profile.name == detected;
            let mut roots = lenient_roots(&profile.roots, host, self.home);
            roots.push(("project".to_owned(), vec![project.to_path_buf()]));
            let names = profile
                .protections
                .iter()
                .map(|p| (p.path.as_str(), p.why.clone()))
                .chain(profile.state_files.iter().map(|f| {
                    (
                        f.path.as_str(),
                        format!(
                            "its state file, which also holds launch configuration; only \
                             its own profile writes it, through a private copy ({})",
                            f.why
                        ),
                    )
                }));
            for (template, why) in names {
                let reason = || format!("{} profile, applied to every run: {why}", profile.name);
                if let Some(rest) = template.strip_prefix("{project}") {
                    let rest = rest.trim_start_matches('/');
                    let dirs = project_dirs.iter().skip(usize::from(own));
                    for dir in dirs.chain(&grant_roots) {
                        push(dir.join(rest), &reason, &mut out);
                    }
                    continue;
                }
                if own {
                    continue;
                }
                for path in expand_all(template, &roots, self.home) {
                    if self.reaches_writable(&path, &writable, &mut reach) {
                        push(path, &reason, &mut out);
                    } else if !reach.absent_below(&path)
                        && matches!(self.fs.kind(&path), Some(FileKind::File { .. }))
                        && !left_out.contains(&path)
                    {
                        left_out.push(path);
                    }
                }
            }
            if own {
                continue;
            }
            for named in &profile.named_commands {
                let files: Vec<PathBuf> = match named.file.strip_suffix("/*.json") {
                    Some(dir) => expand_all(dir, &roots, self.home)
                        .iter()
                        .flat_map(|d| self.fs.files_in(d, 256))
                        .filter(|f| f.extension().is_some_and(|e| e == "json"))
                        .collect(),
                    None => expand_all(&named.file, &roots, self.home)
                        .into_iter()
                        .flat_map(|f| match f.strip_prefix(project) {
                            Ok(rest) => project_dirs
                                .iter()
                                .chain(&grant_roots)
                                .map(|d| d.join(rest))
                                .collect(),
                            Err(_) => vec![f],
                        })
                        .collect(),
                };
                for file in files {
                    // A settings file under a home root that does not exist: nothing to read.
                    if reach.absent_below(&file) {
                        continue;
                    }
                    for path in self.commands_named_in(&file, named, project, grants) {
                        let reason = || {
                            format!(
                                "{} profile, applied to every run: named by a command in {} \
                                 (a hook, the status line or notify), which runs at the next \
                                 launch",
                                profile.name,
                                file.display()
                            )
                        };
                        push(path, &reason, &mut out);
                    }
                }
            }
        }
        Ok((out, left_out))
    }

    /// Whether a name outside the project is inside a writable grant or leads into one:
    /// lexically, else through a symbolic link on its way down from the home directory
    /// (each directory on the way looked at once per run, [`Reach`]); a name outside the
    /// home directory is resolved ([`Self::location`]).
    fn reaches_writable(&self, path: &Path, writable: &[&Path], reach: &mut Reach) -> bool {
        let under = |p: &Path| writable.iter().any(|w| p.starts_with(w));
        if under(path) {
            return true;
        }
        let precise = |p: &Path| self.location(p).is_some_and(|l| under(&l));
        let Some((home, rest)) = self
            .home
            .and_then(|h| path.strip_prefix(h).ok().map(|r| (h, r)))
        else {
            return precise(path);
        };
        let canonical_home = reach
            .home
            .get_or_insert_with(|| self.fs.canonicalize(home).ok())
            .clone();
        let Some(canonical_home) = canonical_home else {
            return precise(path);
        };
        let mut name = home.to_path_buf();
        let mut resolved = canonical_home;
        let parts: Vec<_> = rest.components().collect();
        for (i, part) in parts.iter().enumerate() {
            name.push(part);
            resolved.push(part);
            if under(&resolved) {
                return true;
            }
            let leaf = i + 1 == parts.len();
            let step = match reach.steps.get(&name) {
                Some(step) => *step,
                None => {
                    let step = match self.fs.entry(&name) {
                        Some(Entry::Link(_)) => Step::Link,
                        _ if leaf => Step::NotLink,
                        Some(Entry::Object(FileKind::Directory)) => Step::Directory,
                        _ => Step::Absent,
                    };
                    if step == Step::Absent {
                        reach.absent.push(name.clone());
                    }
                    reach.steps.insert(name.clone(), step);
                    step
                }
            };
            match step {
                Step::Link => return precise(path),
                Step::Directory => {}
                Step::NotLink | Step::Absent => return false,
            }
        }
        false
    }

    /// Where a name leads: the path resolved through symlinks when it exists; for an
    /// absent path, its nearest existing ancestor resolved, joined with the rest of the
    /// name. `None` when that ancestor is not a directory.
    pub(super) fn location(&self, path: &Path) -> Option<PathBuf> {
        let mut rest = Vec::new();
        let mut cur = path;
        loop {
            if let Ok(canonical) = self.fs.canonicalize(cur) {
                if !rest.is_empty() && self.fs.kind(&canonical) != Some(FileKind::Directory) {
                    return None;
                }
                let mut out = canonical;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Some(out);
            }
            rest.push(cur.file_name()?.to_owned());
            cur = cur.parent()?;
        }
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
                // An absent directory is where the agent will create its state (and so,
                // at a first launch, Sandy before it).
                let canonical = match self.fs.canonicalize(value) {
                    Ok(c) => c,
                    Err(_) => self
                        .location(value)
                        .ok_or_else(|| refuse("neither it nor an ancestor is a directory"))?,
                };
                if self
                    .fs
                    .kind(&canonical)
                    .is_some_and(|k| k != FileKind::Directory)
                {
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

    /// Grants the installed `optionalDependencies` of the npm package `program` belongs
    /// to: its platform packages, installed as siblings in the same `node_modules`. Found
    /// from the layout: the nearest ancestor of the program (resolved) holding a
    /// `package.json` directly below `node_modules` (or `node_modules/@scope`); each
    /// dependency name must be a plain package name, and is granted only when it is a
    /// directory there whose own `package.json` carries that name.
    pub(super) fn grant_optional_dependencies(&self, program: &Path, grants: &mut GrantSet) {
        let Ok(resolved) = self.fs.canonicalize(program) else {
            return;
        };
        let Some((root, node_modules)) = resolved.ancestors().skip(1).find_map(|dir| {
            let parent = dir.parent()?;
            let node_modules = if parent.file_name()? == "node_modules" {
                parent
            } else if parent.file_name()?.to_string_lossy().starts_with('@')
                && parent.parent()?.file_name()? == "node_modules"
            {
                parent.parent()?
            } else {
                return None;
            };
            matches!(
                self.fs.kind(&dir.join("package.json")),
                Some(FileKind::File { .. })
            )
            .then(|| (dir.to_path_buf(), node_modules.to_path_buf()))
        }) else {
            return;
        };
        let Some(manifest) = self.package_json(&root) else {
            return;
        };
        let Some(deps) = manifest
            .get("optionalDependencies")
            .and_then(|d| d.as_object())
        else {
            return;
        };
        for (name, spec) in deps.iter().filter(|(n, _)| npm_name(n)) {
            let dir = node_modules.join(name);
            // A real directory there, not a link that could lead anywhere (the package's
            // own directory may be writable by an earlier run).
            if self.fs.kind(&dir) != Some(FileKind::Directory)
                || dir
                    .ancestors()
                    .take(2)
                    .any(|d| self.fs.read_link(d).is_some())
            {
                continue;
            }
            // An npm alias (`"npm:@openai/codex@0.1.0-linux-x64"`) installs another name.
            let expected = spec.as_str().and_then(|s| s.strip_prefix("npm:")).map_or(
                name.as_str(),
                |aliased| {
                    let at = aliased.char_indices().skip(1).find(|(_, c)| *c == '@');
                    at.map_or(aliased, |(i, _)| &aliased[..i])
                },
            );
            let named = self
                .package_json(&dir)
                .is_some_and(|m| m.get("name").and_then(|n| n.as_str()) == Some(expected));
            if !named {
                continue;
            }
            if let Ok(canonical) = self.fs.canonicalize(&dir) {
                if self.sensitive_overlap(&canonical).is_none() {
                    grants.push(canonical, Access::ReadExec, Scope::Subtree, Origin::Profile);
                }
            }
        }
    }

    /// The files and directories the commands of `named` in the settings `file` may name:
    /// every word of every command (split on blanks and shell operators, quotes removed,
    /// `~`, `$HOME` and the agents' project variables expanded, relative words taken from
    /// the project) that names an existing path, or that is written as a path (it holds a
    /// `/`) and is absent (a run that creates it is reported). No shell parser: a word
    /// that only looks like a path is protected too, and one Sandy cannot expand (another
    /// variable, a glob) is not. Never the project, a writable grant or one of their
    /// ancestors (`cd "$CLAUDE_PROJECT_DIR"`), which would take the whole tree.
    fn commands_named_in(
        &self,
        file: &Path,
        named: &crate::rules::profile::ProfileNamedCommands,
        project: &Path,
        grants: &GrantSet,
    ) -> Vec<PathBuf> {
        let mut keys: Vec<String> = named.commands.iter().chain(&named.hooks).cloned().collect();
        keys.extend(named.argv.iter().map(|k| format!("{k}.*")));
        let writable_roots: Vec<&Path> = grants
            .0
            .iter()
            .filter(|g| g.access == Access::ReadWrite && g.scope == Scope::Subtree)
            .map(|g| g.path.as_path())
            .chain(std::iter::once(project))
            .collect();
        let mut out: Vec<PathBuf> = Vec::new();
        for command in self.command_strings(file, &keys) {
            for (path, written_as_path) in command_path_words(&command, self.home, project) {
                if out.contains(&path) || writable_roots.iter().any(|r| r.starts_with(&path)) {
                    continue;
                }
                let exists = self.fs.exists(&path);
                if !exists && !written_as_path {
                    continue;
                }
                // An existing name that leads to a writable root (`./.` spelled otherwise,
                // a link to the project) is left out too.
                let leads_to_root = exists
                    && self
                        .fs
                        .canonicalize(&path)
                        .is_ok_and(|c| writable_roots.iter().any(|r| r.starts_with(&c)));
                if !leads_to_root {
                    out.push(path);
                }
            }
        }
        out
    }

    /// The command strings at `keys` of the JSON settings `file` (none when it is absent
    /// or not JSON), each once, in document order.
    fn command_strings(&self, file: &Path, keys: &[String]) -> Vec<String> {
        let Some(doc) = self.settings_document(file) else {
            return Vec::new();
        };
        let mut commands = Vec::new();
        for key in keys {
            let pattern: Vec<&str> = key.split('.').collect();
            collect_strings(&doc, &pattern, &mut commands);
        }
        let mut unique = Vec::new();
        for command in commands {
            if !unique.contains(&command) {
                unique.push(command);
            }
        }
        unique
    }

    /// A settings file as a JSON value: JSON, or TOML when its name ends in `.toml`.
    /// `None` when it is absent or does not parse.
    fn settings_document(&self, file: &Path) -> Option<serde_json::Value> {
        let bytes = self.fs.read_head(file, 1024 * 1024)?;
        if file.extension().is_some_and(|e| e == "toml") {
            let text = std::str::from_utf8(&bytes).ok()?;
            let doc: toml::Table = toml::from_str(text).ok()?;
            return serde_json::to_value(doc).ok();
        }
        serde_json::from_slice(&bytes).ok()
    }

    /// The hook registrations at `keys` (each ending in `.command`) of the JSON settings
    /// `file`: the command, and its `args` when the registration runs it directly.
    fn hook_invocations(
        &self,
        file: &Path,
        keys: &[String],
        argv_keys: &[String],
    ) -> Vec<HookInvocation> {
        let Some(doc) = self.settings_document(file) else {
            return Vec::new();
        };
        let mut out: Vec<HookInvocation> = Vec::new();
        for key in argv_keys {
            let pattern: Vec<&str> = key.split('.').collect();
            let mut arrays = Vec::new();
            collect_values(&doc, &pattern, &mut arrays);
            for array in arrays {
                let Some(words) = array.as_array().and_then(|a| {
                    a.iter()
                        .map(|w| w.as_str().map(str::to_owned))
                        .collect::<Option<Vec<String>>>()
                }) else {
                    continue;
                };
                let Some((command, args)) = words.split_first() else {
                    continue;
                };
                let hook = HookInvocation {
                    command: command.clone(),
                    args: Some(args.to_vec()),
                };
                if !out.contains(&hook) {
                    out.push(hook);
                }
            }
        }
        for key in keys {
            let Some((parent, leaf)) = key.rsplit_once('.') else {
                continue;
            };
            let pattern: Vec<&str> = parent.split('.').collect();
            let mut objects = Vec::new();
            collect_values(&doc, &pattern, &mut objects);
            for object in objects {
                let Some(command) = object.get(leaf).and_then(|c| c.as_str()) else {
                    continue;
                };
                let args = object.get("args").and_then(|a| a.as_array()).map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                });
                let hook = HookInvocation {
                    command: command.to_owned(),
                    args,
                };
                if !out.contains(&hook) {
                    out.push(hook);
                }
            }
        }
        out
    }

    /// Grants what a recognised Numbat registration needs: its executable (read and
    /// execute), its rule directories (read, protected read-only), its record output and
    /// sequence-state database (read and write, the exact existing files). Their
    /// directories must exist: Sandy does not create Numbat's state.
    fn apply_numbat(
        &self,
        numbat: &NumbatHook,
        grants: &mut GrantSet,
        protect: &mut dyn FnMut(PathBuf),
    ) -> Result<(), String> {
        let canonical = |p: &Path| -> Result<PathBuf, String> {
            let c = self
                .fs
                .canonicalize(p)
                .map_err(|_| format!("{} does not exist", p.display()))?;
            if self.sensitive_overlap(&c).is_some() {
                return Err(format!("{} overlaps a sensitive path", p.display()));
            }
            Ok(c)
        };
        let executable = canonical(&numbat.executable)?;
        if !matches!(
            self.fs.kind(&executable),
            Some(FileKind::File { executable: true })
        ) {
            return Err(format!(
                "{} is not an executable file",
                numbat.executable.display()
            ));
        }
        let mut rules = Vec::new();
        for dir in &numbat.rule_directories {
            let c = canonical(dir)?;
            if self.fs.kind(&c) != Some(FileKind::Directory)
                || self.home.is_some_and(|h| h.starts_with(&c))
            {
                return Err(format!(
                    "the rules directory {} is not a directory below home",
                    dir.display()
                ));
            }
            rules.push(c);
        }
        let mut writable = Vec::new();
        for file in numbat.output_file.iter().chain([&numbat.state_database]) {
            let c = canonical(file).map_err(|e| {
                format!("{e} (Numbat creates it on its first run outside the sandbox)")
            })?;
            if !matches!(self.fs.kind(&c), Some(FileKind::File { .. })) {
                return Err(format!("{} is not a regular file", file.display()));
            }
            writable.push(c);
        }
        grants.push(executable, Access::ReadExec, Scope::Exact, Origin::Profile);
        protect(numbat.executable.clone());
        for (dir, name) in rules.into_iter().zip(&numbat.rule_directories) {
            grants.push(dir, Access::Read, Scope::Subtree, Origin::Profile);
            protect(name.clone());
        }
        for file in writable {
            grants.push(file, Access::ReadWrite, Scope::Exact, Origin::Profile);
        }
        Ok(())
    }

    /// Grants a hook's executable or script read and execute (the exact file, resolved),
    /// and the interpreters its `#!` line names; never inside a sensitive path. With
    /// `widen` false, nothing new is granted. `true` when the grants reach the file.
    fn grant_hook_file(
        &self,
        path: &Path,
        path_dirs: &[PathBuf],
        widen: bool,
        grants: &mut GrantSet,
    ) -> bool {
        let Ok(canonical) = self.fs.canonicalize(path) else {
            return false;
        };
        if grants.covers(&canonical, Access::ReadExec) {
            return true;
        }
        if !widen || self.sensitive_overlap(&canonical).is_some() {
            return false;
        }
        grants.push(
            canonical.clone(),
            Access::ReadExec,
            Scope::Exact,
            Origin::Profile,
        );
        for interpreter in super::shebang::interpreters(&canonical, path_dirs, self.fs) {
            self.grant_exact_executable(&interpreter, grants);
        }
        true
    }

    fn package_json(&self, dir: &Path) -> Option<serde_json::Value> {
        let bytes = self.fs.read_head(&dir.join("package.json"), 256 * 1024)?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Variables an agent sets to the project directory for the commands it runs (Claude
/// Code; Gemini CLI sets its own and Claude Code's).
const PROJECT_VARIABLES: &[&str] = &["CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR", "GEMINI_CWD"];

/// The paths the words of a shell command may name, each with whether it is written as a
/// path (holds a `/`, or is `~`/`$HOME`/a project variable with a rest). Words are split
/// on blanks and the shell's operators (`;`, `&`, `|`, `(`, `)`, `<`, `>`, backquotes),
/// quotes are removed, an assignment or option `NAME=VALUE` also gives its value; `~`,
/// `$HOME` and [`PROJECT_VARIABLES`] (bare or in braces) are expanded, a relative word is
/// taken from the project, and the result is normalized. A word with another `$` or a
/// glob character is left out: Sandy cannot know what it names.
pub(super) fn command_path_words(
    command: &str,
    home: Option<&Path>,
    project: &Path,
) -> Vec<(PathBuf, bool)> {
    let is_separator =
        |c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>' | '`');
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for token in command.split(is_separator) {
        let token = token.replace(['"', '\'', '\\'], "");
        let value = token.split_once('=').map(|(_, v)| v.to_owned());
        for word in std::iter::once(token.clone()).chain(value) {
            let Some(found) = expand_word(&word, home, project) else {
                continue;
            };
            if !out.contains(&found) {
                out.push(found);
            }
        }
    }
    out
}

/// One word of [`command_path_words`], expanded.
fn expand_word(word: &str, home: Option<&Path>, project: &Path) -> Option<(PathBuf, bool)> {
    if word.is_empty() || word.contains(['*', '?', '[']) {
        return None;
    }
    // A variable or `~` that leads the word, and the rest after it.
    let mut base: Option<PathBuf> = None;
    let mut rest = word;
    if word == "~" || word.starts_with("~/") {
        base = Some(home?.to_path_buf());
        rest = &word[1..];
    } else if let Some(after) = word.strip_prefix('$') {
        let (name, tail) = match after.strip_prefix('{') {
            Some(braced) => {
                let (name, tail) = braced.split_once('}')?;
                (name, tail)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                after.split_at(end)
            }
        };
        base = Some(if name == "HOME" {
            home?.to_path_buf()
        } else if PROJECT_VARIABLES.contains(&name) {
            project.to_path_buf()
        } else {
            return None;
        });
        rest = tail;
    }
    if rest.contains('$') || (base.is_some() && !rest.is_empty() && !rest.starts_with('/')) {
        return None;
    }
    let written_as_path = base.is_some() || rest.contains('/');
    let path = match base {
        Some(base) => base.join(rest.trim_start_matches('/')),
        None if rest.starts_with('/') => PathBuf::from(rest),
        None => project.join(rest),
    };
    Some((crate::model::paths::normalize(&path), written_as_path))
}

/// What [`Ctx::reaches_writable`] learnt of the names on the way from the home directory,
/// kept for the run's other names.
#[derive(Default)]
pub(super) struct Reach {
    /// The home directory, resolved (`Some(None)`: it could not be).
    home: Option<Option<PathBuf>>,
    /// What each name looked at was (hundreds of names, each asked for every path below
    /// it: a hash, not a search).
    steps: foldhash::HashMap<PathBuf, Step>,
    /// The names of `steps` found [`Step::Absent`].
    absent: Vec<PathBuf>,
}

impl Reach {
    /// Whether a directory on the way to `path` was found absent (or not a directory).
    fn absent_below(&self, path: &Path) -> bool {
        self.absent.iter().any(|p| path.starts_with(p) && path != p)
    }
}

/// One name on the way down from the home directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A symbolic link: the name is resolved.
    Link,
    /// A directory, not a link: the way goes on.
    Directory,
    /// Absent, or not a directory: nothing below it exists, and it is not writable.
    Absent,
    /// The last name, not a link.
    NotLink,
}

/// Every root a profile could use, by name: each candidate whose variable is set to an
/// absolute path (normalized, not checked: nothing is granted from it), and the default.
fn lenient_roots(
    roots: &std::collections::BTreeMap<String, Vec<String>>,
    host: &HostContext,
    home: Option<&Path>,
) -> Vec<(String, Vec<PathBuf>)> {
    roots
        .iter()
        .map(|(name, candidates)| {
            let mut values: Vec<PathBuf> = Vec::new();
            for candidate in candidates {
                let value = if let Some(var_expr) = candidate.strip_prefix('$') {
                    let (var, suffix) = var_expr.split_once('/').unwrap_or((var_expr, ""));
                    host.var(var)
                        .map(Path::new)
                        .filter(|v| v.is_absolute())
                        .map(|v| crate::model::paths::normalize(&v.join(suffix)))
                } else if let Some(rest) = candidate.strip_prefix("~/") {
                    home.map(|h| h.join(rest))
                } else {
                    Some(PathBuf::from(candidate))
                };
                if let Some(value) = value.filter(|v| !values.contains(v)) {
                    values.push(value);
                }
            }
            (name.clone(), values)
        })
        .collect()
}

/// A profile path with every value of its root (`{root}/...`), `~/` or as written; the
/// project-level ones are not expanded here.
fn expand_all(
    template: &str,
    roots: &[(String, Vec<PathBuf>)],
    home: Option<&Path>,
) -> Vec<PathBuf> {
    if let Some(rest) = template.strip_prefix("~/") {
        return home.map(|h| h.join(rest)).into_iter().collect();
    }
    let Some((root, rest)) = template
        .strip_prefix('{')
        .and_then(|inner| inner.split_once('}'))
    else {
        return vec![PathBuf::from(template)];
    };
    let rest = rest.trim_start_matches('/');
    roots
        .iter()
        .filter(|(name, _)| name == root)
        .flat_map(|(_, values)| values.iter())
        .map(|base| {
            if rest.is_empty() {
                base.clone()
            } else {
                base.join(rest)
            }
        })
        .collect()
}

/// One hook registration: a shell command, or a program run directly with `args`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HookInvocation {
    command: String,
    args: Option<Vec<String>>,
}

/// A word quoted for the shell.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The JSON values at a key path (`*`: any key or array element).
fn collect_values<'a>(
    v: &'a serde_json::Value,
    pattern: &[&str],
    out: &mut Vec<&'a serde_json::Value>,
) {
    let Some((first, rest)) = pattern.split_first() else {
        out.push(v);
        return;
    };
    let children: Vec<&serde_json::Value> = match (v, *first) {
        (serde_json::Value::Object(m), "*") => m.values().collect(),
        (serde_json::Value::Array(a), "*") => a.iter().collect(),
        (serde_json::Value::Object(m), key) => m.get(key).into_iter().collect(),
        _ => Vec::new(),
    };
    for child in children {
        collect_values(child, rest, out);
    }
}

/// The start of a hook command for a message: its first line, at most 80 characters.
fn first_words(command: &str) -> String {
    let line = command.lines().next().unwrap_or_default();
    let short: String = line.chars().take(80).collect();
    if short.len() < command.len() {
        format!("{short}...")
    } else {
        short
    }
}

/// The strings at a key path (`*`: any key or array element).
fn collect_strings(v: &serde_json::Value, pattern: &[&str], out: &mut Vec<String>) {
    let Some((first, rest)) = pattern.split_first() else {
        if let Some(s) = v.as_str() {
            out.push(s.to_owned());
        }
        return;
    };
    let children: Vec<&serde_json::Value> = match (v, *first) {
        (serde_json::Value::Object(m), "*") => m.values().collect(),
        (serde_json::Value::Array(a), "*") => a.iter().collect(),
        (serde_json::Value::Object(m), key) => m.get(key).into_iter().collect(),
        _ => Vec::new(),
    };
    for child in children {
        collect_strings(child, rest, out);
    }
}

/// A plain npm package name: `name` or `@scope/name`, without path tricks.
fn npm_name(name: &str) -> bool {
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match name.strip_prefix('@').map(|rest| rest.split_once('/')) {
        Some(Some((scope, pkg))) => plain(scope) && plain(pkg),
        Some(None) => false,
        None => plain(name),
    }
}
