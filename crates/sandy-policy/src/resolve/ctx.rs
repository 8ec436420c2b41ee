//! The resolution's working state: the context of one resolution ([`Ctx`]) and the grants
//! gathered so far ([`GrantSet`]), shared by the resolution and its parts (`agent`,
//! `views`).

use crate::host::context::HostContext;
use crate::host::inspect::{FileKind, PathInspector};
use crate::model::paths::{normalize, private_dirs, PRIVATE_SHM, PRIVATE_TMP, PRIVATE_VAR_TMP};
use crate::model::policy::{Access, Grant, Origin, Protection, ProtectionKind, Scope};
use crate::rules::error::ResolveError;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(super) struct Ctx<'a> {
    pub(super) home: Option<&'a Path>,
    pub(super) sensitive: &'a [PathBuf],
    /// Sandy's own places, and what each is (for messages).
    pub(super) own: &'a [(PathBuf, &'static str)],
    pub(super) fs: &'a dyn PathInspector,
}

impl Ctx<'_> {
    pub(super) fn check_project(&self, project: &Path) -> Result<(), ResolveError> {
        let refuse = |reason| {
            Err(ResolveError::UnsafeProject {
                path: project.to_path_buf(),
                reason,
            })
        };
        if project == Path::new("/") {
            return refuse("it is the filesystem root");
        }
        if [PRIVATE_TMP, PRIVATE_SHM, PRIVATE_VAR_TMP, "/run"]
            .iter()
            .any(|p| project == Path::new(p))
        {
            return refuse("it is replaced by a private directory inside the sandbox");
        }
        if let Some(home) = self.home {
            if project == home {
                return refuse("it is the home directory; run Sandy from a project directory");
            }
            if home.starts_with(project) {
                return refuse("it contains the home directory");
            }
        }
        if self
            .check_own("the project", Access::ReadWrite, project)
            .is_err()
        {
            return refuse(
                "it holds, or lies in, a place of Sandy's own (its cache, its state or its \
                 temporary base: set XDG_CACHE_HOME, XDG_STATE_HOME or TMPDIR elsewhere)",
            );
        }
        if self.sensitive_overlap(project).is_some() {
            return refuse("it overlaps a sensitive path");
        }
        Ok(())
    }

    /// The protections of the user's files: masks (each existing path, canonical) and
    /// read-only names (lexical, as a tool names them; the caller keeps those a writable
    /// grant reaches). A path that does not exist has nothing to mask. None may cover the
    /// project.
    pub(super) fn file_protections(
        &self,
        files: &crate::rules::files::FileRules,
        project: &Path,
    ) -> Result<(Vec<Protection>, Vec<Protection>), ResolveError> {
        let mut masks = Vec::new();
        let mut read_only = Vec::new();
        for p in &files.protections {
            let what = match p.origin {
                Origin::Config => "a protection of the configuration file",
                Origin::PolicyFile => "a protection of the policy file",
                Origin::ProjectFile => "a protection of the project policy",
                _ => "a protection of the profile file",
            };
            let lexical = normalize(&p.path);
            let canonical = self.fs.canonicalize(&lexical).ok();
            for candidate in std::iter::once(&lexical).chain(canonical.as_ref()) {
                if project.starts_with(candidate) {
                    return Err(ResolveError::ProtectionCoversProject {
                        what,
                        path: p.path.clone(),
                        project: project.to_path_buf(),
                    });
                }
            }
            let protection = |path: PathBuf, exists: bool| Protection {
                path,
                kind: p.kind,
                origin: p.origin,
                exists,
                placeholder: None,
                reason: Some(p.reason.clone()),
                at_launch: false,
            };
            match p.kind {
                ProtectionKind::Deny => {
                    if let Some(canonical) = canonical {
                        masks.push(protection(canonical, true));
                    }
                }
                ProtectionKind::ReadOnly => {
                    let exists = self.fs.kind(&lexical).is_some();
                    read_only.push(protection(lexical, exists));
                }
            }
        }
        Ok((masks, read_only))
    }

    /// Refuses a grant of `path` that reaches a place of Sandy's own: one inside Sandy's
    /// cache, state directory or directory of runs, and a write grant covering one. A
    /// read grant covering one is let through: the mount layer masks them, as the
    /// sensitive set.
    pub(super) fn check_own(
        &self,
        flag: &'static str,
        access: Access,
        path: &Path,
    ) -> Result<(), ResolveError> {
        // The cgroups that hold the run's resource ceilings: writable, a run could raise
        // its own ceilings (a delegated cgroup belongs to the user). Reading them stays
        // possible (runtimes read their memory limit there).
        let cgroups = Path::new(CGROUP_ROOT);
        if access == Access::ReadWrite && (path.starts_with(cgroups) || cgroups.starts_with(path)) {
            return Err(ResolveError::OwnGrant {
                flag,
                path: path.to_path_buf(),
                own: cgroups.to_path_buf(),
                what: "cgroups, which hold the run's resource ceilings,",
            });
        }
        for (own, what) in self.own {
            let inside = path.starts_with(own);
            let covering = own.starts_with(path) && access == Access::ReadWrite;
            if inside || covering {
                return Err(ResolveError::OwnGrant {
                    flag,
                    path: path.to_path_buf(),
                    own: own.clone(),
                    what,
                });
            }
        }
        Ok(())
    }

    /// The first sensitive path that `path` contains or lies inside.
    pub(super) fn sensitive_overlap(&self, path: &Path) -> Option<&Path> {
        self.sensitive
            .iter()
            .find(|s| s.starts_with(path) || path.starts_with(s))
            .map(PathBuf::as_path)
    }

    /// Whether an automatically derived grant of `path` is narrow enough.
    /// Automatic grants are read-only, so they may cover sensitive paths (which are
    /// masked) but never lie inside one.
    pub(super) fn safe_auto_root(&self, path: &Path) -> bool {
        if path.parent().is_none() || self.sensitive.iter().any(|s| path.starts_with(s)) {
            return false;
        }
        match self.home {
            Some(home) => {
                !home.starts_with(path) && !BROAD_HOME_DIRS.iter().any(|rel| path == home.join(rel))
            }
            None => true,
        }
    }

    /// The tree to grant for a directory of executables on the caller's `PATH` (the
    /// user's own configuration): its parent when it is named like a toolchain's `bin`
    /// (and that is narrow enough), else the directory itself; `None` when both would be
    /// too broad. Toolchains installed as git clones (pyenv, nvm, rbenv) keep working.
    pub(super) fn toolchain_root(&self, dir: &Path) -> Option<PathBuf> {
        let is_bin = dir
            .file_name()
            .is_some_and(|n| BIN_NAMES.iter().any(|b| n == OsStr::new(b)));
        match dir.parent().filter(|_| is_bin) {
            Some(root) if self.safe_auto_root(root) => Some(root.to_path_buf()),
            _ if self.safe_auto_root(dir) => Some(dir.to_path_buf()),
            _ => None,
        }
    }

    /// Whether `dir` is a project (a git work tree) rather than a toolchain.
    pub(super) fn holds_project(&self, dir: &Path) -> bool {
        self.fs.kind(&dir.join(".git")).is_some()
    }

    /// The package an executable belongs to, recognised by its structure alone: a Node
    /// package (`node_modules/[@scope/]NAME` with a `package.json`), a Python virtual
    /// environment (`ROOT/bin/EXE` with `ROOT/pyvenv.cfg`: venvs, pipx, uv tools), a
    /// toolchain version directory (`ROOT/bin/EXE` below a `versions`, `toolchains`,
    /// `installs` or `Cellar` directory, or `ROOT` itself being `.cargo`, `.rustup` or
    /// `.pyenv`: nvm, pyenv, rustup, asdf, Homebrew, cargo), or a per-user prefix install
    /// (`~/.TOOL/bin/EXE`, `~/.local/share/TOOL/bin/EXE`). `None` for anything else,
    /// which then gets an exact grant of the executable alone: a link planted in a
    /// writable `PATH` directory can never make a whole directory readable unless that
    /// directory really is such a package, narrow enough, and not a project.
    pub(super) fn package_root(&self, executable: &Path) -> Option<PathBuf> {
        const TOOL_HOMES: &[&str] = &[".cargo", ".rustup", ".pyenv", ".nvm", ".rbenv", ".asdf"];
        let root = self
            .node_package_root(executable)
            .or_else(|| self.bin_layout_root(executable))?;
        // A tool home may be a git clone of the tool itself (pyenv, nvm); anything else
        // with a `.git` is a project, never granted through a link.
        let tool_home = root
            .file_name()
            .is_some_and(|n| TOOL_HOMES.iter().any(|t| n == OsStr::new(t)));
        (self.safe_auto_root(&root) && (tool_home || !self.holds_project(&root))).then_some(root)
    }

    pub(super) fn node_package_root(&self, executable: &Path) -> Option<PathBuf> {
        let node_modules = OsStr::new("node_modules");
        for dir in executable.ancestors().skip(1) {
            let parent = dir.parent()?;
            let in_scope = parent
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"@"))
                && parent.parent().and_then(Path::file_name) == Some(node_modules);
            if parent.file_name() == Some(node_modules) || in_scope {
                return matches!(
                    self.fs.kind(&dir.join("package.json")),
                    Some(FileKind::File { .. })
                )
                .then(|| dir.to_path_buf());
            }
        }
        None
    }

    pub(super) fn bin_layout_root(&self, executable: &Path) -> Option<PathBuf> {
        const VERSION_DIRS: &[&str] = &["versions", "toolchains", "installs", "Cellar"];
        const TOOL_HOMES: &[&str] = &[".cargo", ".rustup", ".pyenv", ".rbenv"];
        let bin = executable.parent()?;
        let is_bin = bin
            .file_name()
            .is_some_and(|n| BIN_NAMES.iter().any(|b| n == OsStr::new(b)));
        let root = bin.parent().filter(|_| is_bin)?;
        let venv = matches!(
            self.fs.kind(&root.join("pyvenv.cfg")),
            Some(FileKind::File { .. })
        );
        let named = |p: &Path, names: &[&str]| {
            p.file_name()
                .is_some_and(|n| names.iter().any(|v| n == OsStr::new(v)))
        };
        let versioned = root
            .ancestors()
            .skip(1)
            .take(3)
            .any(|a| named(a, VERSION_DIRS));
        // A prefix-style package where per-user installers put them: a hidden tool home
        // directly in the home directory (`~/.bun`, `~/.deno`, `~/.volta`), or a directory
        // of `~/.local/share`, `~/.local/lib`, `~/.local/opt` or `~/opt`. The sandbox cannot
        // create these (home is read-only inside), so only an installed package qualifies.
        let installed = self.home.is_some_and(|home| {
            let parent = root.parent();
            let hidden_in_home = parent == Some(home)
                && root
                    .file_name()
                    .is_some_and(|n| n.as_bytes().starts_with(b"."));
            let install_area = [".local/share", ".local/lib", ".local/opt", "opt"]
                .iter()
                .any(|a| parent == Some(home.join(a).as_path()));
            hidden_in_home || install_area
        });
        (venv || versioned || installed || named(root, TOOL_HOMES)).then(|| root.to_path_buf())
    }

    /// Grants an executable (the command, or a `PATH` entry's link target) read and
    /// execute, with its package (see [`Ctx::package_root`]) when that is not already
    /// reachable. Only an executable regular file is granted.
    pub(super) fn grant_executable(&self, path: &Path, grants: &mut GrantSet) {
        let Some(canonical) = self.executable_file(path) else {
            return;
        };
        if grants.covers(&canonical, Access::ReadExec)
            || self.sensitive_overlap(&canonical).is_some()
        {
            return;
        }
        match self.package_root(&canonical) {
            Some(root) => grants.push(root, Access::ReadExec, Scope::Subtree, Origin::Path),
            None => grants.push(canonical, Access::ReadExec, Scope::Exact, Origin::Path),
        }
    }

    /// Grants an executable named by something the sandbox may have written (an
    /// interpreter a `#!` line names, a command found in a writable tree): the executable
    /// file alone, never a directory.
    pub(super) fn grant_exact_executable(&self, path: &Path, grants: &mut GrantSet) {
        let Some(canonical) = self.executable_file(path) else {
            return;
        };
        if !grants.covers(&canonical, Access::ReadExec)
            && self.sensitive_overlap(&canonical).is_none()
        {
            grants.push(canonical, Access::ReadExec, Scope::Exact, Origin::Path);
        }
    }

    /// An `--execute` grant (a flag's, or a file's `access = "execute"`), checked as
    /// `--read` is (it must exist, may not lie inside a sensitive path or one of Sandy's
    /// own; one covering such a path leaves it masked). A directory gets the execute
    /// right over its subtree, and each program and library below it an exact grant to
    /// read and execute it: regular files with an execute bit (programs, scripts) and
    /// files named as shared libraries (`*.so`, `*.so.*`), which the dynamic loader reads
    /// without an execute bit. Every other file stays unreadable, the directories
    /// unlistable, and nothing there writable. Symbolic links are not followed (a link's
    /// target inside the tree is granted there; one outside is not). A file is granted
    /// alone. Returns the canonical path.
    pub(super) fn grant_execute(
        &self,
        flag: &'static str,
        path: &Path,
        origin: Origin,
        project: &Path,
        grants: &mut GrantSet,
    ) -> Result<PathBuf, ResolveError> {
        let (canonical, scope) = self.check_explicit(flag, Access::Execute, path, project)?;
        if scope == Scope::Exact {
            grants.push(canonical.clone(), Access::ReadExec, Scope::Exact, origin);
            return Ok(canonical);
        }
        grants.push(canonical.clone(), Access::Execute, Scope::Subtree, origin);
        let too_large = |what, max| ResolveError::ExecuteTooLarge {
            flag,
            path: path.to_path_buf(),
            what,
            max,
        };
        // What the mount layer masks is not walked.
        let masked = |p: &Path| {
            self.sensitive.iter().any(|s| p.starts_with(s))
                || self.own.iter().any(|(own, _)| p.starts_with(own))
        };
        let mut pending = vec![canonical.clone()];
        let mut dirs = 0usize;
        let mut files = 0usize;
        while let Some(dir) = pending.pop() {
            dirs += 1;
            if dirs > MAX_EXECUTE_DIRS {
                return Err(too_large("directories", MAX_EXECUTE_DIRS));
            }
            for file in self.fs.files_in(&dir, MAX_EXECUTE_ENTRIES) {
                if masked(&file) || !runnable(&file, self.fs) {
                    continue;
                }
                files += 1;
                if files > MAX_EXECUTE_FILES {
                    return Err(too_large("programs and libraries", MAX_EXECUTE_FILES));
                }
                grants.push(file, Access::ReadExec, Scope::Exact, origin);
            }
            pending.extend(
                self.fs
                    .subdirs(&dir, MAX_EXECUTE_ENTRIES)
                    .into_iter()
                    .filter(|d| !masked(d))
                    .rev(),
            );
        }
        Ok(canonical)
    }

    /// The canonical path of `path` when it is an executable regular file.
    pub(super) fn executable_file(&self, path: &Path) -> Option<PathBuf> {
        let canonical = self.fs.canonicalize(path).ok()?;
        matches!(
            self.fs.kind(&canonical),
            Some(FileKind::File { executable: true })
        )
        .then_some(canonical)
    }

    pub(super) fn grant_path_dir(&self, dir: &Path, host: &HostContext, grants: &mut GrantSet) {
        let Ok(dir) = self.fs.canonicalize(dir) else {
            return;
        };
        if self.fs.kind(&dir) != Some(FileKind::Directory) {
            return;
        }
        // Directories the baseline already reaches (/usr/bin, /usr/local/bin) are not
        // scanned: their links point within the system, and scanning them would cost
        // thousands of syscalls on every launch.
        match grants.covering_origin(&dir, Access::ReadExec) {
            Some(Origin::Path) => {}
            Some(_) => return,
            None => {
                let Some(granted) = self.toolchain_root(&dir) else {
                    return;
                };
                grants.push(granted, Access::ReadExec, Scope::Subtree, Origin::Path);
            }
        }
        // Also when the command itself already granted this directory's toolchain.
        self.grant_rust_toolchain(&dir, host, grants);
        // Entries that are symlinks into a package elsewhere (npm-global, uv tools, the
        // native Claude installer) need that package too.
        for entry in self.fs.symlinks_in(&dir, MAX_PATH_DIR_ENTRIES) {
            // Most links point next door (rustup's proxies, pyenv's shims): when the
            // link's own text already lands inside a granted tree, skip resolving it.
            let lexical = self.fs.read_link(&entry).map(|t| normalize(&dir.join(t)));
            if lexical.is_some_and(|t| grants.covers(&t, Access::ReadExec)) {
                continue;
            }
            self.grant_executable(&entry, grants);
        }
    }

    /// `~/.cargo/bin` holds rustup proxies: they need the rustup home, and cargo reads its
    /// registry cache. Granted read-only so the sandbox cannot poison the host's cache.
    pub(super) fn grant_rust_toolchain(
        &self,
        dir: &Path,
        host: &HostContext,
        grants: &mut GrantSet,
    ) {
        let Some(cargo_home) = dir.parent() else {
            return;
        };
        let is_cargo_home = cargo_home.file_name() == Some(OsStr::new(".cargo"))
            || host
                .var("CARGO_HOME")
                .is_some_and(|c| Path::new(c) == cargo_home);
        if dir.file_name() != Some(OsStr::new("bin")) || !is_cargo_home {
            return;
        }
        let rustup_home = host
            .var("RUSTUP_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| self.home.map(|h| h.join(".rustup")));
        let candidates = [
            (rustup_home, Access::ReadExec),
            (Some(cargo_home.join("registry")), Access::Read),
            (Some(cargo_home.join("git")), Access::Read),
        ];
        for (path, access) in candidates {
            let Some(path) = path else { continue };
            let Ok(canonical) = self.fs.canonicalize(&path) else {
                continue;
            };
            if self.fs.kind(&canonical) == Some(FileKind::Directory)
                && self.safe_auto_root(&canonical)
            {
                grants.push(canonical, access, Scope::Subtree, Origin::Path);
            }
        }
    }

    pub(super) fn check_explicit(
        &self,
        flag: &'static str,
        access: Access,
        path: &Path,
        project: &Path,
    ) -> Result<(PathBuf, Scope), ResolveError> {
        if path.as_os_str().as_bytes().contains(&0) {
            return Err(ResolveError::NulInPath {
                path: path.to_path_buf(),
            });
        }
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            project.join(path)
        };
        let lexical = normalize(&absolute);
        let canonical = self
            .fs
            .canonicalize(&absolute)
            .map_err(|_| ResolveError::MissingPath {
                flag,
                path: path.to_path_buf(),
            })?;
        let scope = match self.fs.kind(&canonical) {
            Some(FileKind::Directory) => Scope::Subtree,
            Some(FileKind::File { .. }) | Some(FileKind::Other) => Scope::Exact,
            None => {
                return Err(ResolveError::MissingPath {
                    flag,
                    path: path.to_path_buf(),
                })
            }
        };
        for candidate in [&lexical, &canonical] {
            if candidate.parent().is_none() {
                return Err(ResolveError::RootGrant { flag });
            }
            // A read grant may cover home and sensitive paths: the mount layer masks them.
            // A write grant may not, since a masked path that does not exist yet could be
            // created through it, and it may never reach inside one.
            if let Some(home) = self.home {
                if access == Access::ReadWrite && home.starts_with(candidate) {
                    return Err(ResolveError::HomeGrant {
                        flag,
                        path: candidate.clone(),
                    });
                }
            }
            let inside = self.sensitive.iter().find(|s| candidate.starts_with(s));
            let covering = self.sensitive.iter().find(|s| s.starts_with(candidate));
            if let Some(sensitive) = inside.or(covering.filter(|_| access == Access::ReadWrite)) {
                return Err(ResolveError::SensitiveGrant {
                    flag,
                    path: candidate.clone(),
                    sensitive: sensitive.clone(),
                });
            }
            self.check_own(flag, access, candidate)?;
        }
        Ok((canonical, scope))
    }
}

/// The most directories one `--execute` grant walks.
pub(super) const MAX_EXECUTE_DIRS: usize = 10_000;

/// The most programs and libraries one `--execute` grant makes readable.
pub(super) const MAX_EXECUTE_FILES: usize = 4_096;

/// The most entries read of one directory below an `--execute` grant.
pub(super) const MAX_EXECUTE_ENTRIES: usize = 65_536;

/// Whether the name is, itself (no link followed), a file a program run from an
/// `--execute` directory needs to read: a regular file with an execute bit, or one named
/// as a shared library.
pub(super) fn runnable(path: &Path, fs: &dyn PathInspector) -> bool {
    match fs.entry(path) {
        Some(crate::host::inspect::Entry::Object(FileKind::File { executable })) => {
            executable
                || path.file_name().is_some_and(|n| {
                    let n = n.as_bytes();
                    n.ends_with(b".so") || n.windows(4).any(|w| w == b".so.")
                })
        }
        _ => false,
    }
}

/// The directories a `PATH` value names, absolute ones only, each once: a directory
/// named twice (shell start-up files that add theirs each time they are read) is looked
/// in once, since the first time it is named decides every lookup in it.
pub(crate) fn search_path(path: &OsStr) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(path).filter(|p| p.is_absolute()) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Finds the program the way `execvp` would, but decides before launch.
pub(super) fn find_program(
    argv0: &OsStr,
    project: &Path,
    path_dirs: &[PathBuf],
    fs: &dyn PathInspector,
) -> Result<PathBuf, ResolveError> {
    let name = Path::new(argv0);
    let not_found = || ResolveError::CommandNotFound {
        name: argv0.to_string_lossy().into_owned(),
    };
    if argv0.is_empty() {
        return Err(not_found());
    }
    if argv0.as_bytes().contains(&b'/') {
        let path = if name.is_absolute() {
            name.to_path_buf()
        } else {
            project.join(name)
        };
        return match fs.kind(&path) {
            None => Err(not_found()),
            // The directory part is made canonical (no `.` or `..`); the name is kept, so a
            // program that looks at its own name still sees the link it was called by.
            Some(FileKind::File { executable: true }) => match (path.parent(), path.file_name()) {
                (Some(dir), Some(name)) => {
                    Ok(fs.canonicalize(dir).map_or(path.clone(), |d| d.join(name)))
                }
                _ => Ok(path),
            },
            Some(_) => Err(ResolveError::NotExecutable { path }),
        };
    }
    let mut not_executable = None;
    for dir in path_dirs {
        let candidate = dir.join(name);
        match fs.kind(&candidate) {
            Some(FileKind::File { executable: true }) => return Ok(candidate),
            Some(_) if not_executable.is_none() => not_executable = Some(candidate),
            _ => {}
        }
    }
    match not_executable {
        Some(path) => Err(ResolveError::NotExecutable { path }),
        None => Err(not_found()),
    }
}

/// The directory private inside the sandbox that hides `path`, unless a grant carries
/// `path` (or a directory above it) through; `privates` are the directories the mount
/// layer replaces.
pub(super) fn hidden_by<'a>(
    path: &Path,
    privates: &[&'a Path],
    grants: &GrantSet,
) -> Option<&'a Path> {
    match carrying(path, privates, &grants.0)? {
        (private, None) => Some(private),
        (_, Some(_)) => None,
    }
}

/// The private directory `path` lies in, and the most specific grant that carries
/// `path` through it into the sandbox (`None` when nothing does); `None` when `path` is
/// under no private directory. The one answer the launch (a hidden command) and `sandy
/// why` (a write on a read-only carried mount) both use.
pub(crate) fn carrying<'a, 'g>(
    path: &Path,
    privates: &[&'a Path],
    grants: &'g [Grant],
) -> Option<(&'a Path, Option<&'g Grant>)> {
    let private = *privates.iter().find(|p| path.starts_with(p))?;
    let carrier = grants
        .iter()
        .filter(|g| {
            !privates.contains(&g.path.as_path())
                && g.path.starts_with(private)
                && (g.path == path || (g.scope == Scope::Subtree && path.starts_with(&g.path)))
        })
        .max_by_key(|g| g.path.as_os_str().len());
    Some((private, carrier))
}

/// What the dry run grants, the run must honour: the command's path must exist inside.
/// A command under a directory that is private inside (a link in
/// `/tmp/x/node_modules/.bin`, NixOS's `/run/current-system/sw/bin`) is executed by its
/// canonical path when that one is carried through (`argv[0]` stays as typed), and
/// refused before launch otherwise.
pub(super) fn visible_program(
    program: PathBuf,
    runtime_dir: Option<&Path>,
    grants: &GrantSet,
    fs: &dyn PathInspector,
) -> Result<PathBuf, ResolveError> {
    let privates = private_dirs(runtime_dir);
    let Some(private) = hidden_by(&program, &privates, grants) else {
        return Ok(program);
    };
    if let Ok(canonical) = fs.canonicalize(&program) {
        if hidden_by(&canonical, &privates, grants).is_none()
            && grants.covers(&canonical, Access::ReadExec)
        {
            return Ok(canonical);
        }
    }
    Err(ResolveError::ProgramHidden {
        dir: program.parent().unwrap_or(&program).to_path_buf(),
        program,
        private: private.to_path_buf(),
    })
}

/// Grants in resolution order, skipping any already covered.
#[derive(Default)]
pub(super) struct GrantSet(pub(super) Vec<Grant>);

impl GrantSet {
    pub(super) fn covers(&self, path: &Path, access: Access) -> bool {
        self.covering_origin(path, access).is_some()
    }

    /// The origin of the first grant giving `path` at least `access`.
    pub(super) fn covering_origin(&self, path: &Path, access: Access) -> Option<Origin> {
        self.0
            .iter()
            .find(|g| {
                g.access.covers(access)
                    && (g.path == path || (g.scope == Scope::Subtree && path.starts_with(&g.path)))
            })
            .map(|g| g.origin)
    }

    pub(super) fn push(&mut self, path: PathBuf, access: Access, scope: Scope, origin: Origin) {
        let covered = self.0.iter().any(|g| {
            g.access.covers(access)
                && match g.scope {
                    Scope::Subtree => path.starts_with(&g.path),
                    Scope::Exact => g.path == path && scope == Scope::Exact,
                }
        });
        if !covered {
            self.0.push(Grant {
                path,
                access,
                scope,
                origin,
            });
        }
    }

    /// A private directory of the sandbox (read/write), added whatever host grants say.
    pub(super) fn push_private(&mut self, path: PathBuf) {
        self.0.push(Grant {
            path,
            access: Access::ReadWrite,
            scope: Scope::Subtree,
            origin: Origin::Baseline,
        });
    }

    /// A read-only directory that exists only inside the sandbox.
    pub(super) fn push_private_read(&mut self, path: PathBuf) {
        self.0.push(Grant {
            path,
            access: Access::Read,
            scope: Scope::Subtree,
            origin: Origin::Baseline,
        });
    }

    pub(super) fn into_vec(self) -> Vec<Grant> {
        self.0
    }
}

/// Where the cgroups live: never writable through a grant.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Home subdirectories too broad to grant as a toolchain root: they hold many unrelated
/// applications' data.
pub(super) const BROAD_HOME_DIRS: &[&str] =
    &[".local", ".local/share", ".local/lib", ".config", ".cache"];

/// Directories on `PATH` named like this are a toolchain's `bin`; their parent is the
/// toolchain root (nvm's version directory, `~/.pyenv`, an npm prefix).
pub(super) const BIN_NAMES: &[&str] = &["bin", "sbin", "shims"];

/// How many entries of one `PATH` directory are examined for symlinks into packages.
pub(super) const MAX_PATH_DIR_ENTRIES: usize = 4096;
