//! Finds, before launch and outside the sandbox, every git directory, configuration file
//! and hooks directory that a run could change to make the user's next `git` command run
//! code, and hands them to resolution as [`GitFacts`].
//!
//! Git decides everything git decides: where a working tree's git directory and common
//! directory are (`git rev-parse`), which configuration files it reads in every scope
//! (`git config --list --show-origin --show-scope`), what each file includes
//! (`git config --file F --list --no-includes -z`, so that an `includeIf` that does not
//! match now is found too) and where hooks run from (`git rev-parse --git-path hooks`,
//! and every `core.hooksPath` value of every file). The scope listing is asked once, with
//! includes (git's default); a listing without includes would add nothing, since every
//! file it names is then read on its own with `--no-includes` and its includes followed
//! from there, conditional or not. Sandy only walks the tree to find the
//! `.git` entries git itself would stop at, and lists git's own layout directories
//! (`worktrees/`, `modules/`).
//!
//! Git is run so that it can run nothing: no hooks or fsmonitor are involved in the
//! commands used, no pager, no prompts, no optional locks, stdin closed, bounded time
//! and output, and `safe.directory=*` so that a repository owned by another user is
//! still described (describing it runs nothing from it). When a repository exists but
//! git cannot be run or gives an answer Sandy cannot use, the run is refused.

use sandy_policy::normalize;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sandy_policy::{GitDir, GitDirKind, GitFacts};

use crate::verify::read_bounded;
use crate::walk;

/// How many directories the walk for `.git` entries visits at most, per scan.
pub const MAX_WALK_DIRS: usize = 200_000;
/// How deep below a git directory's `modules/` submodule git directories are looked for.
const MAX_MODULE_DEPTH: usize = 32;
/// How deep includes are followed (git's own limit is 10).
const MAX_INCLUDE_DEPTH: usize = 10;
/// How long one git command may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much output one git command may produce.
const GIT_MAX_OUTPUT: usize = 8 * 1024 * 1024;
/// How many git commands run at once.
const GIT_BATCH: usize = 16;
/// How much of a `.git` pointer file is read.
const POINTER_MAX: usize = 64 * 1024;

/// Why the repositories of the project could not be described.
#[derive(Debug, thiserror::Error)]
pub enum GitScanError {
    #[error(
        "cannot run git to find the configuration of the repository at {}: {reason}; \
         Sandy protects a repository only with git's own answers (install git, or put it \
         on PATH)",
        sandy_policy::text::Tilde(repo)
    )]
    CannotRun { repo: PathBuf, reason: String },
    #[error(
        "git gave an answer Sandy cannot use for {} ({what}); refusing to run without \
         protecting that repository",
        sandy_policy::text::Tilde(repo)
    )]
    Nonsense { repo: PathBuf, what: String },
    #[error(
        "{} holds more than {limit} directories: Sandy cannot look through all of them \
         for git repositories to protect; run Sandy in a smaller directory",
        sandy_policy::text::Tilde(root)
    )]
    TooLarge { root: PathBuf, limit: usize },
    #[error(
        "{} can be passed through but not listed (no read permission): Sandy cannot look \
         below it for git repositories to protect, while git can reach them; make it \
         readable (chmod u+r {}) or run Sandy elsewhere",
        sandy_policy::text::Tilde(dir),
        sandy_policy::text::Tilde(dir)
    )]
    Unlisted { dir: PathBuf },
}

/// One `.git` entry found in a tree, or one directory there holding a `HEAD`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DotGit {
    /// The directory holding the entry: for a `.git`, the top of its working tree.
    pub top: PathBuf,
    /// What `.git` is.
    pub kind: DotGitKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DotGitKind {
    Directory,
    /// A pointer file (`gitdir: ...`), as in submodules and linked worktrees.
    File,
    Symlink,
    /// Anything else (git does not use it, but a run could replace it).
    Other,
    /// Not a `.git`: the directory itself holds a `HEAD` (not a directory), so git run in
    /// it, or below it, may take the directory as its git directory, as it takes a bare
    /// repository. Git is asked whether it does.
    Head,
}

/// Every `.git` entry at or below `root`, found by reading directories (the entry type
/// comes from the directory listing; no `stat` per entry unless the file system does not
/// say), not following symlinks and not descending into `.git` directories; see
/// [`crate::walk`] for how.
pub fn find_dotgits(root: &Path, limit: usize) -> Result<Vec<DotGit>, GitScanError> {
    crate::walk::walk(root, limit).map(|(found, _)| found)
}

/// The user's `git`: the first executable `git` on the caller's `PATH`.
fn find_git(path_var: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("git"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs the user's git, unable to run anything else.
pub struct Git {
    program: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
}

/// Variables that would point git at another repository than the one asked about, or
/// make it write trace files: removed for the scan.
fn scrubbed(name: &OsStr) -> bool {
    let name = name.as_bytes();
    [
        &b"GIT_DIR"[..],
        b"GIT_WORK_TREE",
        b"GIT_COMMON_DIR",
        b"GIT_INDEX_FILE",
        b"GIT_OBJECT_DIRECTORY",
        b"GIT_ALTERNATE_OBJECT_DIRECTORIES",
        b"GIT_NAMESPACE",
        b"GIT_PREFIX",
        b"GIT_EXTERNAL_DIFF",
        b"GIT_CONFIG",
    ]
    .contains(&name)
        || name.starts_with(b"GIT_TRACE")
}

impl Git {
    pub fn new(env: &[(OsString, OsString)]) -> Git {
        let path_var = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v);
        let mut env: Vec<(OsString, OsString)> =
            env.iter().filter(|(k, _)| !scrubbed(k)).cloned().collect();
        for (k, v) in [
            ("GIT_OPTIONAL_LOCKS", "0"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_PAGER", "cat"),
            ("PAGER", "cat"),
            ("GIT_EDITOR", "false"),
            ("GIT_ASKPASS", "false"),
            ("SSH_ASKPASS", "false"),
            ("GIT_NO_LAZY_FETCH", "1"),
        ] {
            env.push((k.into(), v.into()));
        }
        Git {
            program: find_git(path_var.map(OsString::as_os_str)),
            env,
        }
    }

    /// The `key`, `value` entries of one configuration file, as git reads it (includes
    /// not followed); empty when git cannot read it.
    pub fn config_entries(&self, file: &Path) -> Vec<(String, Vec<u8>)> {
        // Run from `/`: `--file` needs no repository, and a broken one around the file
        // would make git refuse.
        let args = [
            OsStr::new("config"),
            OsStr::new("--file"),
            file.as_os_str(),
            OsStr::new("--list"),
            OsStr::new("--no-includes"),
            OsStr::new("-z"),
        ];
        match self.run(Path::new("/"), &args, file) {
            Ok(Ok(out)) => entries(&out),
            _ => Vec::new(),
        }
    }

    /// `git ARGS` in `dir`; its stdout on success, `Ok(Err(first stderr line))` when git
    /// answered with a failure, `Err` when git could not be run at all.
    fn run(
        &self,
        dir: &Path,
        args: &[&OsStr],
        repo: &Path,
    ) -> Result<Result<Vec<u8>, String>, GitScanError> {
        self.start(dir, args, repo)?.finish()
    }

    /// Starts `git ARGS` in `dir`, so that several can run at once; [`Running::finish`]
    /// collects the answer.
    fn start(&self, dir: &Path, args: &[&OsStr], repo: &Path) -> Result<Running, GitScanError> {
        let cannot = |reason: String| GitScanError::CannotRun {
            repo: repo.to_path_buf(),
            reason,
        };
        let program = self
            .program
            .as_ref()
            .ok_or_else(|| cannot("no git on PATH".into()))?;
        let mut cmd = Command::new(program);
        cmd.current_dir(dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args([
                "--no-pager",
                "-c",
                "safe.directory=*",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| cannot(e.to_string()))?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(cannot("no pipe to git".into()));
        };
        Ok(Running {
            child,
            out,
            err,
            deadline: std::time::Instant::now() + GIT_TIMEOUT,
            repo: repo.to_path_buf(),
        })
    }
}

/// A git command started by [`Git::start`]. Its output is collected by the caller's own
/// thread ([`Running::finish`]): the supervisor starts no thread before it forks the
/// bootstrap, which it may only do with a single thread.
struct Running {
    child: std::process::Child,
    out: std::process::ChildStdout,
    err: std::process::ChildStderr,
    deadline: std::time::Instant,
    repo: PathBuf,
}

/// At most this much of git's stderr is kept (the reason of a failure is in its first
/// lines).
const GIT_MAX_STDERR: usize = 64 * 1024;

impl Running {
    /// Waits (until the command's deadline) for its answer; a command past its deadline
    /// or its output bound is killed.
    fn finish(mut self) -> Result<Result<Vec<u8>, String>, GitScanError> {
        let repo = self.repo.clone();
        let cannot = |reason: String| GitScanError::CannotRun {
            repo: repo.clone(),
            reason,
        };
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let collected = self.collect(&mut stdout, &mut stderr);
        if collected.is_err() {
            let _ = self.child.kill();
        }
        let status = self.child.wait().map_err(|e| cannot(e.to_string()))?;
        collected.map_err(&cannot)?;
        if status.success() {
            return Ok(Ok(stdout));
        }
        if status.code().is_none() {
            return Err(cannot(format!("git ended with {status}")));
        }
        // The reason, not a warning that came first.
        let text = String::from_utf8_lossy(&stderr);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let line = lines
            .iter()
            .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
            .or(lines.first())
            .copied()
            .unwrap_or("no message")
            .to_owned();
        Ok(Err(line))
    }

    /// Reads both pipes until git closes them, its deadline passes or its output
    /// exceeds the bound.
    fn collect(&mut self, stdout: &mut Vec<u8>, stderr: &mut Vec<u8>) -> Result<(), String> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut open = [true, true];
        let mut buf = vec![0u8; 64 * 1024];
        while open[0] || open[1] {
            let left = self
                .deadline
                .saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(format!("no answer within {} s", GIT_TIMEOUT.as_secs()));
            }
            let mut fds = Vec::with_capacity(2);
            if open[0] {
                fds.push(PollFd::new(self.out.as_fd(), PollFlags::POLLIN));
            }
            if open[1] {
                fds.push(PollFd::new(self.err.as_fd(), PollFlags::POLLIN));
            }
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.to_string()),
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            let mut ready = ready.into_iter();
            for (which, is_open) in open.iter_mut().enumerate() {
                if !*is_open || !ready.next().unwrap_or(false) {
                    continue;
                }
                let n = if which == 0 {
                    self.out.read(&mut buf)
                } else {
                    self.err.read(&mut buf)
                };
                match n {
                    Ok(0) => *is_open = false,
                    Ok(n) if which == 0 => {
                        stdout.extend_from_slice(&buf[..n]);
                        if stdout.len() > GIT_MAX_OUTPUT {
                            return Err(format!("more than {GIT_MAX_OUTPUT} bytes of output"));
                        }
                    }
                    Ok(n) => {
                        let room = GIT_MAX_STDERR.saturating_sub(stderr.len());
                        stderr.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(())
    }
}

/// What the scan accumulates.
#[derive(Default)]
struct Found {
    work_trees: BTreeSet<PathBuf>,
    git_dirs: BTreeSet<GitDir>,
    configs: BTreeSet<PathBuf>,
    hooks: BTreeSet<PathBuf>,
    hooks_path_values: BTreeSet<(PathBuf, Vec<u8>)>,
    /// Directories git takes as git directories themselves (bare repositories): hooks
    /// run there, so a relative `core.hooksPath` is relative to them.
    bare: BTreeSet<PathBuf>,
    /// Every `init.templateDir` value of every file.
    template_values: BTreeSet<Vec<u8>>,
    /// Every value of every code-running setting (not aliases: the user runs those by
    /// name, as any command of the project) of every file.
    command_values: BTreeSet<Vec<u8>>,
    notes: Vec<String>,
}

impl Found {
    fn git_dir(&mut self, path: PathBuf, kind: GitDirKind) {
        if let Ok(real) = crate::hostfs::canonicalize(&path) {
            self.git_dirs.insert(GitDir { path: real, kind });
        }
        self.git_dirs.insert(GitDir {
            path: normalize(&path),
            kind,
        });
    }

    fn path_both(set: &mut BTreeSet<PathBuf>, path: &Path) {
        set.insert(normalize(path));
        // The name as git opens it may differ from the lexical one when a component is
        // a symlink followed by `..`; protect what the kernel resolves too.
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            if let Ok(real) = crate::hostfs::canonicalize(parent) {
                set.insert(real.join(name));
            }
        }
    }
}

/// Describes every repository `roots` hold or belong to. `roots[0]` is the project.
/// With it, what the walk saw of each tree walked, for the walk after the run.
/// With `remember`, an answer git gave is remembered for the next launch (never by a
/// dry run or a question, which change nothing on the host).
pub fn scan(
    roots: &[PathBuf],
    home: Option<&Path>,
    env: &[(OsString, OsString)],
    remember: bool,
) -> Result<(GitFacts, Vec<walk::Record>), GitScanError> {
    let mut dotgits = Vec::new();
    let mut records: Vec<walk::Record> = Vec::new();
    let state = crate::gitmemo::state_dir(home, env);
    for root in roots {
        if records.iter().any(|w| root.starts_with(w.root())) {
            continue;
        }
        // Compared with the record the last launch kept, when there is one to trust:
        // only what changed since is read.
        let kept = state
            .as_deref()
            .and_then(|s| walk::recall(s, root, MAX_WALK_DIRS));
        let (found, record) = match kept {
            Some(before) => walk::walk_again(&before, MAX_WALK_DIRS)
                .map(|(walked, record)| (walked.found, record))?,
            None => walk::walk(root, MAX_WALK_DIRS)?,
        };
        dotgits.extend(found);
        records.push(record);
    }
    // Refused rather than protected in part, as a tree too large to walk is.
    if let Some(dir) = records.iter().flat_map(|r| r.unlisted()).next() {
        return Err(GitScanError::Unlisted { dir: dir.clone() });
    }
    // Git's answer, remembered while nothing it depends on changed (`gitmemo`).
    let path_var = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = find_git(path_var);
    let key = crate::gitmemo::key(roots, &dotgits, home, env, program.as_deref());
    let mut facts = match crate::gitmemo::recall(home, env, roots, &key) {
        Some(facts) => facts,
        None => {
            let started = std::time::SystemTime::now();
            let (facts, asked) = describe(roots, dotgits.clone(), home, env)?;
            // Only what git answered is worth remembering (a tree without a repository,
            // where git is not asked, costs nothing to describe again).
            if remember && asked {
                crate::gitmemo::remember(home, env, roots, &dotgits, &key, &facts, started);
            }
            facts
        }
    };
    facts.agent_dirs = records
        .iter()
        .flat_map(|r| r.agent_dirs())
        .filter(|d| !roots.contains(d))
        .cloned()
        .collect();
    Ok((facts, records))
}

/// The git facts of `roots`, whose walks found `dotgits`, and whether git was asked.
fn describe(
    roots: &[PathBuf],
    dotgits: Vec<DotGit>,
    home: Option<&Path>,
    env: &[(OsString, OsString)],
) -> Result<(GitFacts, bool), GitScanError> {
    let mut found = Found::default();
    // A root inside a repository whose top is above it: git run there finds that one.
    let mut enclosing = Vec::new();
    for root in roots {
        if dotgits
            .iter()
            .any(|d| &d.top == root && d.kind != DotGitKind::Head)
        {
            continue;
        }
        if root
            .ancestors()
            .skip(1)
            .any(|a| std::fs::symlink_metadata(a.join(".git")).is_ok())
        {
            enclosing.push(root.clone());
        }
    }
    // Without a repository git is not asked, unless the user's configuration could
    // matter here ([`worth_asking`]): it includes other files (git inside, a `git init`
    // or a `git clone`, must be able to read them, and only git says which they are), or
    // names a template directory or a root (a program there that git runs elsewhere).
    if dotgits.is_empty() && enclosing.is_empty() && !worth_asking(home, env, roots) {
        return Ok((
            GitFacts {
                scanned: roots.to_vec(),
                ..GitFacts::default()
            },
            false,
        ));
    }

    let git = Git::new(env);
    // Every file git reads in any scope, asked while the repositories are described.
    let here = roots.first().cloned().unwrap_or_else(|| PathBuf::from("/"));
    let listing = git.start(
        &here,
        &[
            OsStr::new("config"),
            OsStr::new("--list"),
            OsStr::new("--show-origin"),
            OsStr::new("--show-scope"),
            OsStr::new("-z"),
        ],
        &here,
    )?;
    // The project's remotes, for the note on a local remote outside the writable grants.
    let remotes = git.start(
        &here,
        &[
            OsStr::new("config"),
            OsStr::new("-z"),
            OsStr::new("--get-regexp"),
            OsStr::new(r"^remote\..*\.(url|pushurl)$"),
        ],
        &here,
    )?;
    let mut commons: BTreeSet<PathBuf> = BTreeSet::new();
    // Git describes the repositories a batch at a time, concurrently.
    let mut described = Vec::new();
    for batch in dotgits.chunks(GIT_BATCH) {
        let mut running = Vec::new();
        for d in batch {
            match d.kind {
                DotGitKind::Head => running.push((d, own_git_dir_start(&git, &d.top)?)),
                DotGitKind::Other => {
                    found.work_trees.insert(d.top.clone());
                }
                _ => {
                    found.work_trees.insert(d.top.clone());
                    running.push((d, describe_start(&git, &d.top)?));
                }
            }
        }
        for (d, r) in running {
            let repo = match d.kind {
                DotGitKind::Head => own_git_dir_finish(r, &d.top)?,
                _ => describe_finish(r, &d.top)?,
            };
            described.push((d, repo));
        }
    }
    for (d, repo) in described {
        if d.kind == DotGitKind::Head {
            // Only what git itself takes as a git directory; any other `HEAD` is a file.
            let Some(repo) = repo else {
                continue;
            };
            let kind = if same_dir(&repo.git_dir, &repo.common_dir) {
                GitDirKind::Common
            } else {
                GitDirKind::Linked
            };
            found.git_dir(d.top.clone(), kind);
            found.git_dir(repo.common_dir.clone(), GitDirKind::Common);
            Found::path_both(&mut found.hooks, &repo.hooks);
            found.bare.insert(d.top.clone());
            commons.insert(repo.common_dir.clone());
            continue;
        }
        let dotgit = d.top.join(".git");
        // Git stops at the first `.git` it can use. One it cannot use yet (an empty or
        // incomplete directory, a pointer to one) is a repository a run could complete:
        // its surface is protected by name all the same, as a common directory's (the
        // larger surface).
        let repo = repo.filter(|r| same_dir(&r.top, &d.top));
        let kind = match &repo {
            Some(r) if !same_dir(&r.git_dir, &r.common_dir) => GitDirKind::Linked,
            _ => GitDirKind::Common,
        };
        match d.kind {
            DotGitKind::Directory | DotGitKind::Symlink => found.git_dir(dotgit.clone(), kind),
            DotGitKind::File => {
                if let Some(name) = pointer_target(&dotgit) {
                    found.git_dir(name, kind);
                }
            }
            DotGitKind::Other | DotGitKind::Head => {}
        }
        let Some(repo) = repo else {
            continue;
        };
        found.git_dir(repo.git_dir.clone(), kind);
        found.git_dir(repo.common_dir.clone(), GitDirKind::Common);
        Found::path_both(&mut found.hooks, &repo.hooks);
        commons.insert(repo.common_dir.clone());
    }
    for root in &enclosing {
        let Some(repo) = describe_finish(describe_start(&git, root)?, root)? else {
            continue;
        };
        found.work_trees.insert(repo.top.clone());
        let kind = if same_dir(&repo.git_dir, &repo.common_dir) {
            GitDirKind::Common
        } else {
            GitDirKind::Linked
        };
        found.git_dir(repo.git_dir.clone(), kind);
        found.git_dir(repo.common_dir.clone(), GitDirKind::Common);
        Found::path_both(&mut found.hooks, &repo.hooks);
        commons.insert(repo.common_dir.clone());
        // Said once, for the project, unless a writable grant already covers the root.
        let granted = roots.iter().any(|r| repo.top.starts_with(r));
        if Some(root) == roots.first() && !granted {
            found.notes.push(format!(
                "note: the git repository of {} has its root at {}, outside the project: \
                 git inside the sandbox cannot use it; run Sandy from {} or grant it \
                 (--read-write {})",
                root.display(),
                repo.top.display(),
                repo.top.display(),
                repo.top.display()
            ));
        }
    }

    // Each common directory's linked worktrees (both directions: the project may be one
    // of them, or the main repository of others) and submodule git directories.
    let mut queue: Vec<PathBuf> = commons.into_iter().collect();
    let mut seen_commons = BTreeSet::new();
    while let Some(common) = queue.pop() {
        if !seen_commons.insert(common.clone()) {
            continue;
        }
        let admin = common.join("worktrees");
        let linked = crate::hostfs::subdirectories(&admin);
        if !linked.is_empty() || admin.is_dir() {
            for name in linked {
                found.git_dir(admin.join(name), GitDirKind::Linked);
            }
            if let Ok(list) = git.run(
                &common,
                &[
                    OsStr::new("--git-dir"),
                    common.as_os_str(),
                    OsStr::new("worktree"),
                    OsStr::new("list"),
                    OsStr::new("--porcelain"),
                    OsStr::new("-z"),
                ],
                &common,
            )? {
                for rec in list.split(|&b| b == 0) {
                    if let Some(p) = rec.strip_prefix(b"worktree ") {
                        let p = PathBuf::from(OsString::from_vec(p.to_vec()));
                        if p.is_absolute() {
                            found.work_trees.insert(p);
                        }
                    }
                }
            }
        }
        for module in module_git_dirs(&common.join("modules")) {
            found.git_dir(module.clone(), GitDirKind::Common);
            found.hooks.insert(module.join("hooks"));
            queue.push(module);
        }
    }

    // Configuration: every file git reads in any scope, plus each git directory's own.
    // Where git refuses the project's repository (a pointer to an incomplete one), the
    // system and global files are asked for from the root directory instead.
    let listing = match listing.finish()? {
        Err(line) if line.contains("not a git repository") => git
            .start(
                Path::new("/"),
                &[
                    OsStr::new("config"),
                    OsStr::new("--list"),
                    OsStr::new("--show-origin"),
                    OsStr::new("--show-scope"),
                    OsStr::new("-z"),
                ],
                &here,
            )?
            .finish()?,
        other => other,
    };
    match listing {
        Ok(out) => {
            for origin in origins(&out) {
                let path = here.join(OsStr::from_bytes(origin));
                Found::path_both(&mut found.configs, &path);
            }
        }
        Err(line) => {
            return Err(GitScanError::Nonsense {
                repo: here,
                what: format!("git config --list failed: {line}"),
            })
        }
    }
    for file in documented_config_files(home, env) {
        found.configs.insert(file);
    }
    let dirs: Vec<GitDir> = found.git_dirs.iter().cloned().collect();
    for d in &dirs {
        if d.kind == GitDirKind::Common {
            found.configs.insert(d.path.join("config"));
        }
        found.configs.insert(d.path.join("config.worktree"));
    }
    follow_includes(&git, home, &mut found)?;

    // Every `core.hooksPath` value of every file: relative ones are relative to where
    // hooks run, the top of the working tree.
    let values: Vec<(PathBuf, Vec<u8>)> = found.hooks_path_values.iter().cloned().collect();
    for (_file, value) in values {
        if value.is_empty() {
            continue;
        }
        if let Some(expanded) = expand_home(&value, home) {
            Found::path_both(&mut found.hooks, &expanded);
            continue;
        }
        let value = Path::new(OsStr::from_bytes(&value));
        if value.is_absolute() {
            Found::path_both(&mut found.hooks, value);
        } else {
            let tops: Vec<PathBuf> = found.work_trees.union(&found.bare).cloned().collect();
            for top in tops {
                Found::path_both(&mut found.hooks, &top.join(value));
            }
        }
    }

    let command_paths = command_paths(&found, roots, home);

    // No remote (git exits 1) or no repository: nothing to say.
    if let Ok(out) = remotes.finish()? {
        found.notes.extend(remote_notes(&out, &here, roots, home));
    }

    Ok((
        GitFacts {
            scanned: roots.to_vec(),
            work_trees: found.work_trees.into_iter().collect(),
            git_dirs: found.git_dirs.into_iter().collect(),
            config_files: found.configs.into_iter().collect(),
            hook_dirs: found.hooks.into_iter().collect(),
            command_paths,
            // Filled by [`scan`] from its walk.
            agent_dirs: Vec::new(),
            notes: found.notes,
        },
        true,
    ))
}

/// What the configuration names as code git runs or copies, inside `roots`: each
/// `init.templateDir` (`~/` or absolute; present or not), and each word of a
/// code-running setting's value that names a path: by `~/`, `$HOME/` or an absolute path,
/// by `$PWD/` or relative to a working tree's top (where git runs it), present or, when
/// it is written as a path (with a `/`), absent (a run could create it). Words are the
/// value split at blanks, `=` and the shell's operators, and each quoted string whole:
/// an over-approximation, which only ever protects more. A name is kept as written and
/// as the kernel resolves its directory (a link on the way into the project).
fn command_paths(found: &Found, roots: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    let tops: Vec<&PathBuf> = found.work_trees.union(&found.bare).collect();
    // (path, kept when absent, a directory may be protected)
    let mut candidates: Vec<(PathBuf, bool, bool)> = Vec::new();
    for value in &found.template_values {
        if let Some(path) = expand_word(value, home, None) {
            candidates.push((path, true, true));
        }
    }
    for value in &found.command_values {
        for word in command_words(value) {
            let written_as_path = word.contains(&b'/');
            match expand_word(&word, home, None) {
                Some(path) => candidates.push((path, written_as_path, false)),
                None => {
                    for top in &tops {
                        if let Some(path) = expand_word(&word, home, Some(top)) {
                            candidates.push((path, written_as_path, false));
                        }
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for (path, keep_absent, directory) in candidates {
        let path = normalize(&path);
        match std::fs::metadata(&path) {
            // A command names a program: a directory among its words (`cd src`) is not
            // one, and protecting it would take the project's own files away.
            Ok(meta) if meta.is_dir() && !directory => continue,
            Err(_) if !keep_absent && std::fs::symlink_metadata(&path).is_err() => continue,
            _ => {}
        }
        let mut names = BTreeSet::new();
        Found::path_both(&mut names, &path);
        for name in names {
            // Strictly inside a writable root: never a root itself (a word `.`).
            if roots.iter().any(|r| name.starts_with(r) && &name != r) {
                out.insert(name);
            }
        }
    }
    out.into_iter().collect()
}

/// The words of a setting's value (see [`command_paths`]): split at blanks, `=` and the
/// shell's operators, and each quoted string whole too.
fn command_words(value: &[u8]) -> Vec<Vec<u8>> {
    let mut words: Vec<Vec<u8>> = value
        .split(|b| b" \t\n'\"`;&|()<>=".contains(b))
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    for quote in [b'\'', b'"'] {
        let parts: Vec<&[u8]> = value.split(|&b| b == quote).collect();
        // The odd parts are inside quotes.
        words.extend(
            parts
                .iter()
                .skip(1)
                .step_by(2)
                .filter(|w| !w.is_empty())
                .map(|w| w.to_vec()),
        );
    }
    words
}

/// A word as a path: `~/`, `$HOME/` and `${HOME}/` from home, `$PWD/` and `${PWD}/` from
/// `top`, an absolute path as it is; with `top`, any other word relative to it. `None`
/// when it names no path that way (another variable, a relative word without `top`).
fn expand_word(word: &[u8], home: Option<&Path>, top: Option<&Path>) -> Option<PathBuf> {
    let under = |base: Option<&Path>, rest: &[u8]| base.map(|b| b.join(OsStr::from_bytes(rest)));
    for prefix in [&b"~/"[..], b"$HOME/", b"${HOME}/"] {
        if let Some(rest) = word.strip_prefix(prefix) {
            return under(home, rest);
        }
    }
    for prefix in [&b"$PWD/"[..], b"${PWD}/"] {
        if let Some(rest) = word.strip_prefix(prefix) {
            return under(top, rest);
        }
    }
    if word.starts_with(b"/") {
        return Some(PathBuf::from(OsStr::from_bytes(word)));
    }
    if word.starts_with(b"$") || word.starts_with(b"-") || word.starts_with(b"~") {
        return None;
    }
    under(top, word)
}

/// One `note:` per remote of the project whose URL is a local path outside every
/// writable root: git push and fetch to it fail inside the sandbox (it is not even
/// readable), and `--read-write PATH` is the flag that makes it work. `out` is
/// `git config -z --get-regexp` output: `key\nvalue\0` records.
fn remote_notes(out: &[u8], here: &Path, roots: &[PathBuf], home: Option<&Path>) -> Vec<String> {
    let mut notes = Vec::new();
    let mut said = BTreeSet::new();
    for (key, value) in entries(out) {
        let Some(path) = local_remote_path(&value, here, home) else {
            continue;
        };
        let real = crate::hostfs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let inside = roots
            .iter()
            .any(|r| path.starts_with(r) || real.starts_with(r));
        if inside || !said.insert(real.clone()) {
            continue;
        }
        let name = key
            .strip_prefix("remote.")
            .and_then(|k| k.rsplit_once('.'))
            .map_or(key.as_str(), |(name, _)| name);
        notes.push(format!(
            "note: the git remote '{name}' is the local path {}, outside the writable \
             grants: git push and fetch to it fail inside the sandbox; add --read-write {} \
             to reach it",
            path.display(),
            real.display()
        ));
    }
    notes
}

/// The local path a remote URL names, as git reads it: `file://` URLs, absolute paths,
/// `~/` paths and paths relative to the working tree; `None` for network URLs
/// (`scheme://`, or `host:path` with the colon before any slash).
fn local_remote_path(url: &[u8], here: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix(b"file://") {
        let path = Path::new(OsStr::from_bytes(rest));
        return path.is_absolute().then(|| normalize(path));
    }
    if url.windows(3).any(|w| w == b"://") {
        return None;
    }
    let colon = url.iter().position(|&b| b == b':');
    let slash = url.iter().position(|&b| b == b'/');
    if let Some(c) = colon {
        if slash.is_none_or(|s| c < s) {
            return None;
        }
    }
    if let Some(expanded) = expand_home(url, home) {
        return Some(normalize(&expanded));
    }
    Some(normalize(&here.join(OsStr::from_bytes(url))))
}

/// Git's answer for one working tree (for a git directory taken as one itself, `top` is
/// that directory: hooks run there).
pub struct Repo {
    pub top: PathBuf,
    pub git_dir: PathBuf,
    pub common_dir: PathBuf,
    pub hooks: PathBuf,
}

/// Starts `git rev-parse` in `dir`, which holds a `HEAD` (see [`own_git_dir_finish`]).
/// Implicit bare repositories are allowed for the question, as they are by default: one
/// the user's configuration refuses now is still protected, should that change.
fn own_git_dir_start(git: &Git, dir: &Path) -> Result<Running, GitScanError> {
    rev_parse_start(git, dir, &["-c", "safe.bareRepository=all"], &[])
}

/// Starts `git [BEFORE] rev-parse --path-format=absolute [PATHS] --git-dir
/// --git-common-dir --git-path hooks` in `dir`.
fn rev_parse_start(
    git: &Git,
    dir: &Path,
    before: &[&str],
    paths: &[&str],
) -> Result<Running, GitScanError> {
    let args: Vec<&OsStr> = before
        .iter()
        .chain(&["rev-parse", "--path-format=absolute"])
        .chain(paths)
        .chain(&["--git-dir", "--git-common-dir", "--git-path", "hooks"])
        .map(OsStr::new)
        .collect();
    git.start(dir, &args, dir)
}

/// What `git rev-parse` printed; `None` when git says `repo` is in no repository.
fn rev_parse_finish(running: Running, repo: &Path) -> Result<Option<Vec<u8>>, GitScanError> {
    match running.finish()? {
        Ok(out) => Ok(Some(out)),
        Err(line) if line.contains("not a git repository") => Ok(None),
        Err(line) => Err(GitScanError::Nonsense {
            repo: repo.to_path_buf(),
            what: line,
        }),
    }
}

/// Git's answer for `dir` when git takes `dir` itself as its git directory (as it takes a
/// bare repository, whatever `core.bare` says); `None` when git finds another repository
/// from there, or none.
fn own_git_dir_finish(running: Running, dir: &Path) -> Result<Option<Repo>, GitScanError> {
    let Some(out) = rev_parse_finish(running, dir)? else {
        return Ok(None);
    };
    let [git_dir, common_dir, hooks] = absolute_lines(&out, dir)?;
    Ok(same_dir(&git_dir, dir).then(|| Repo {
        top: dir.to_path_buf(),
        git_dir,
        common_dir,
        hooks,
    }))
}

/// Whether git, run in `dir` now, takes `dir` itself as its git directory: its answer if
/// so. Failures count as no.
pub fn own_git_dir(git: &Git, dir: &Path) -> Option<Repo> {
    own_git_dir_finish(own_git_dir_start(git, dir).ok()?, dir)
        .ok()
        .flatten()
}

/// Where git runs the hooks of the working tree at `top` from (its answer, which honours
/// `core.hooksPath` of every scope); `None` when git cannot say.
pub fn hooks_dir(git: &Git, top: &Path) -> Option<PathBuf> {
    let repo = describe_finish(describe_start(git, top).ok()?, top).ok()??;
    Some(repo.hooks)
}

/// `N` absolute paths, one a line, as `git rev-parse --path-format=absolute` prints them.
fn absolute_lines<const N: usize>(out: &[u8], repo: &Path) -> Result<[PathBuf; N], GitScanError> {
    let lines: Vec<PathBuf> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(OsString::from_vec(l.to_vec())))
        .collect();
    let nonsense = || GitScanError::Nonsense {
        repo: repo.to_path_buf(),
        what: format!(
            "rev-parse printed {:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        ),
    };
    if !lines.iter().all(|p| p.is_absolute()) {
        return Err(nonsense());
    }
    lines.try_into().map_err(|_| nonsense())
}

/// Starts `git rev-parse` in `dir` (see [`describe_finish`]).
fn describe_start(git: &Git, dir: &Path) -> Result<Running, GitScanError> {
    rev_parse_start(git, dir, &[], &["--show-toplevel"])
}

/// Git's answer for the working tree at `repo`: `None` when git says it is not a
/// repository.
fn describe_finish(running: Running, repo: &Path) -> Result<Option<Repo>, GitScanError> {
    let Some(out) = rev_parse_finish(running, repo)? else {
        return Ok(None);
    };
    let [top, git_dir, common_dir, hooks] = absolute_lines(&out, repo)?;
    Ok(Some(Repo {
        top,
        git_dir,
        common_dir,
        hooks,
    }))
}

/// The `gitdir:` path of a `.git` pointer file, as named there (relative to the file's
/// directory), lexically normalized. Git's own answer (canonical) is kept beside it; this
/// is the name, whose symlinked components a run could otherwise swap.
pub fn pointer_target(dotgit: &Path) -> Option<PathBuf> {
    let text = read_bounded(dotgit, POINTER_MAX).ok()??;
    let line = text.split(|&b| b == b'\n').next()?;
    let value = line.strip_prefix(b"gitdir:")?.trim_ascii();
    if value.is_empty() {
        return None;
    }
    let base = dotgit.parent()?;
    Some(normalize(&base.join(OsStr::from_bytes(value))))
}

/// Every submodule git directory of a common git directory, recursively (a submodule's
/// own submodules included).
pub fn module_dirs(common: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut queue = vec![common.to_path_buf()];
    while let Some(dir) = queue.pop() {
        if out.len() > MAX_WALK_DIRS {
            break;
        }
        for m in module_git_dirs(&dir.join("modules")) {
            queue.push(m.clone());
            out.push(m);
        }
    }
    out
}

/// The submodule git directories under a `modules/` directory, at any depth: a submodule
/// named `libs/sub` lives at `modules/libs/sub`, and a submodule's own submodules under
/// its `modules/`. A git directory is recognised as git does (`HEAD` with `objects/` or
/// `refs/` beside it); only its own `modules/` is searched further.
fn module_git_dirs(modules: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(modules.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if depth > MAX_MODULE_DEPTH {
            continue;
        }
        for name in crate::hostfs::subdirectories(&dir) {
            let p = dir.join(name);
            let is_git_dir = std::fs::symlink_metadata(p.join("HEAD")).is_ok()
                && (p.join("objects").is_dir() || p.join("refs").is_dir());
            if is_git_dir {
                out.push(p);
            } else {
                stack.push((p, depth + 1));
            }
        }
    }
    out.sort();
    out
}

/// The `file:` origins of `git config --list --show-origin --show-scope -z` output
/// (records `scope NUL origin NUL key LF value NUL`), without command-line entries.
fn origins(out: &[u8]) -> Vec<&[u8]> {
    let fields: Vec<&[u8]> = out.split(|&b| b == 0).collect();
    fields
        .chunks(3)
        .filter(|c| c.len() == 3 && c[0] != b"command")
        .filter_map(|c| c[1].strip_prefix(b"file:"))
        .filter(|p| !p.is_empty())
        .collect()
}

/// `key LF value` records of `git config --list -z` output.
fn entries(out: &[u8]) -> Vec<(String, Vec<u8>)> {
    out.split(|&b| b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| match r.iter().position(|&b| b == b'\n') {
            Some(nl) => (
                String::from_utf8_lossy(&r[..nl]).to_ascii_lowercase(),
                r[nl + 1..].to_vec(),
            ),
            None => (String::from_utf8_lossy(r).to_ascii_lowercase(), Vec::new()),
        })
        .collect()
}

/// The documented places of the global and system configuration (git-config(1), FILES),
/// listed whether or not they exist now: a run that may write there must not create one.
fn documented_config_files(home: Option<&Path>, env: &[(OsString, OsString)]) -> Vec<PathBuf> {
    let var = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute())
    };
    let mut out = Vec::new();
    out.extend(var("GIT_CONFIG_GLOBAL"));
    out.extend(var("GIT_CONFIG_SYSTEM"));
    if let Some(home) = home {
        out.push(home.join(".gitconfig"));
    }
    match var("XDG_CONFIG_HOME") {
        Some(xdg) => out.push(xdg.join("git/config")),
        None => out.extend(home.map(|h| h.join(".config/git/config"))),
    }
    out
}

/// Whether a configuration file of the user's (or the system's) could matter where no
/// root holds a repository: it mentions an include, a template directory (`git init`
/// inside copies it), or a root by its path (absolute, or relative to the home as in
/// `~/project/bin/x` and `$HOME/project/x`), which a code-running setting may name. A
/// cheap look at the text (case aside), which decides only whether git is asked; what
/// the settings mean is git's to say.
fn worth_asking(home: Option<&Path>, env: &[(OsString, OsString)], roots: &[PathBuf]) -> bool {
    let mut needles: Vec<Vec<u8>> = vec![b"include".to_vec(), b"templatedir".to_vec()];
    for root in roots {
        needles.push(root.as_os_str().as_bytes().to_ascii_lowercase());
        if let Some(rel) = home.and_then(|h| root.strip_prefix(h).ok()) {
            if !rel.as_os_str().is_empty() {
                needles.push(rel.as_os_str().as_bytes().to_ascii_lowercase());
            }
        }
    }
    documented_config_files(home, env)
        .into_iter()
        .chain([PathBuf::from("/etc/gitconfig")])
        .any(|file| {
            // The user's own dotfile links are followed.
            crate::hostfs::locate(&file, std::iter::empty(), true)
                .and_then(|(dir, name)| dir.read(name, 256 * 1024))
                .ok()
                .flatten()
                .is_some_and(|text| {
                    let text = text.to_ascii_lowercase();
                    needles
                        .iter()
                        .any(|n| text.windows(n.len()).any(|w| w == n.as_slice()))
                })
        })
}

/// Reads every known configuration file with `git config --file F --list --no-includes`,
/// adds each file an `include.path` or `includeIf.*.path` names (relative to the
/// including file, `~/` from home), recursively, and keeps every `core.hooksPath` value.
fn follow_includes(git: &Git, home: Option<&Path>, found: &mut Found) -> Result<(), GitScanError> {
    let mut pending: Vec<(PathBuf, usize)> = found.configs.iter().map(|p| (p.clone(), 0)).collect();
    let mut read = BTreeSet::new();
    while !pending.is_empty() {
        // One round: every file not read yet, asked a batch at a time.
        let mut todo = Vec::new();
        for (file, depth) in std::mem::take(&mut pending) {
            if !read.insert(file.clone()) {
                continue;
            }
            // Git ignores an include that does not exist; it stays protected (by name)
            // so a run cannot create it. Only regular files are read (a FIFO never is).
            if std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
                todo.push((file, depth));
            }
        }
        for batch in todo.chunks(GIT_BATCH) {
            let mut round = Vec::new();
            for (file, depth) in batch.iter().cloned() {
                let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
                // From `/`: `--file` needs no repository, and a broken one around the
                // file would make git refuse.
                let running = git.start(
                    Path::new("/"),
                    &[
                        OsStr::new("config"),
                        OsStr::new("--file"),
                        file.as_os_str(),
                        OsStr::new("--list"),
                        OsStr::new("--no-includes"),
                        OsStr::new("-z"),
                    ],
                    &file,
                )?;
                round.push((file, dir, depth, running));
            }
            for (file, dir, depth, running) in round {
                let out = match running.finish()? {
                    Ok(out) => out,
                    Err(line) => {
                        return Err(GitScanError::Nonsense {
                            repo: file,
                            what: format!("git cannot read this configuration file: {line}"),
                        })
                    }
                };
                for (key, value) in entries(&out) {
                    let is_include = key == "include.path"
                        || (key.starts_with("includeif.") && key.ends_with(".path"));
                    if is_include && !value.is_empty() && depth < MAX_INCLUDE_DEPTH {
                        let target = match expand_home(&value, home) {
                            Some(p) => p,
                            None => dir.join(OsStr::from_bytes(&value)),
                        };
                        Found::path_both(&mut found.configs, &target);
                        pending.push((normalize(&target), depth + 1));
                        if let (Some(parent), Some(name)) = (target.parent(), target.file_name()) {
                            if let Ok(real) = crate::hostfs::canonicalize(parent) {
                                pending.push((real.join(name), depth + 1));
                            }
                        }
                    } else if key == "core.hookspath" {
                        found.hooks_path_values.insert((file.clone(), value));
                    } else if key == "init.templatedir" {
                        found.template_values.insert(value);
                    } else if !is_include && !key.starts_with("alias.") && runs_code(&key, &value) {
                        found.command_values.insert(value);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Git's documented settings that make it run a command (git-config(1)). This is the one
/// place where a list is right: it is not a guess at where files live, it is git's own
/// catalogue of code-running keys. It chooses what to *name* in a report about a
/// repository that was created during the run (which Sandy reports in any case), and
/// which values may name a program in a writable tree (protected: see
/// [`command_paths`]).
pub const CODE_KEYS: &[&str] = &[
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.pager",
    "core.editor",
    "core.askpass",
    "core.gitproxy",
    "core.alternaterefscommand",
    "sequence.editor",
    "diff.external",
    "diff.tool",
    "merge.tool",
    "gpg.program",
    "gpg.ssh.program",
    "gpg.x509.program",
    "gpg.ssh.defaultkeycommand",
    "credential.helper",
    "uploadpack.packobjectshook",
    "receive.procreceiverefs",
    "include.path",
    "web.browser",
    "sendemail.tocmd",
    "sendemail.cccmd",
    "sendemail.sendmailcmd",
    "sendemail.smtpserver",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
    "remote.*.proxy",
    "credential.*.helper",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "diff.*.textconv",
    "diff.*.command",
    "merge.*.driver",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "pager.*",
    "alias.*",
    "includeif.*.path",
    "submodule.*.update",
    "man.*.cmd",
    "hook.*.command",
];

/// Whether `key` (lower-case, as `git config --list` prints it) makes git run a command.
/// An alias does so only when it starts with `!`.
pub fn runs_code(key: &str, value: &[u8]) -> bool {
    if key.starts_with("alias.") {
        return value.starts_with(b"!");
    }
    if key.starts_with("submodule.") && key.ends_with(".update") {
        return value.starts_with(b"!");
    }
    CODE_KEYS.iter().any(|pattern| matches_key(pattern, key))
}

/// `*` in a pattern stands for any subsection (which may contain dots).
fn matches_key(pattern: &str, key: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == key,
        Some((head, tail)) => {
            key.len() > head.len() + tail.len() && key.starts_with(head) && key.ends_with(tail)
        }
    }
}

/// `~/rest` from home (the only form git expands for paths Sandy needs here).
fn expand_home(value: &[u8], home: Option<&Path>) -> Option<PathBuf> {
    let rest = value.strip_prefix(b"~/")?;
    Some(home?.join(OsStr::from_bytes(rest)))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (crate::hostfs::canonicalize(a), crate::hostfs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    #[test]
    fn local_remote_urls_are_told_from_network_ones() {
        let here = Path::new("/w/project");
        let home = Some(Path::new("/home/u"));
        let local = |url: &str| local_remote_path(url.as_bytes(), here, home);
        assert_eq!(local("/srv/r.git"), Some(PathBuf::from("/srv/r.git")));
        assert_eq!(
            local("file:///srv/r.git/"),
            Some(PathBuf::from("/srv/r.git"))
        );
        assert_eq!(local("../r.git"), Some(PathBuf::from("/w/r.git")));
        assert_eq!(local("~/r.git"), Some(PathBuf::from("/home/u/r.git")));
        assert_eq!(
            local("./a:b/r.git"),
            Some(PathBuf::from("/w/project/a:b/r.git"))
        );
        for network in [
            "git@github.com:o/r.git",
            "host:r.git",
            "https://example.com/r.git",
            "ssh://host/r.git",
        ] {
            assert_eq!(local(network), None, "{network}");
        }
        let out = b"remote.origin.url\n/srv/r.git\0remote.up.url\n/w/project/sub.git\0\
                    remote.origin.pushurl\n/srv/r.git\0remote.gh.url\nhost:r\0";
        let notes = remote_notes(out, here, &[PathBuf::from("/w/project")], home);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("'origin' is the local path /srv/r.git"));
    }

    #[test]
    fn reads_git_listings() {
        let out = b"global\0file:/h/.gitconfig\0user.name\nT\0command\0command line:\0core.fsmonitor\nfalse\0local\0file:.git/config\0core.bare\nfalse\0";
        assert_eq!(origins(out), vec![&b"/h/.gitconfig"[..], b".git/config"]);
        let out = b"core.hooksPath\n.githooks\0include.path\n../x\0core.bare\0";
        assert_eq!(
            entries(out),
            vec![
                ("core.hookspath".to_owned(), b".githooks".to_vec()),
                ("include.path".to_owned(), b"../x".to_vec()),
                ("core.bare".to_owned(), vec![]),
            ]
        );
        assert_eq!(
            expand_home(b"~/h", Some(Path::new("/home/u"))),
            Some(PathBuf::from("/home/u/h"))
        );
        assert_eq!(expand_home(b"h", Some(Path::new("/home/u"))), None);
    }

    #[test]
    fn a_setting_s_words_name_paths_as_the_shell_would() {
        let words = command_words(b"sh -c \"./my tools/x.sh\" --opt=/abs/y 'q z'");
        for w in [
            &b"sh"[..],
            b"./my",
            b"tools/x.sh",
            b"/abs/y",
            b"./my tools/x.sh",
            b"q z",
        ] {
            assert!(
                words.iter().any(|x| x == w),
                "{:?}",
                String::from_utf8_lossy(w)
            );
        }
        let home = Some(Path::new("/h"));
        let top = Some(Path::new("/p"));
        assert_eq!(expand_word(b"~/a", home, None), Some("/h/a".into()));
        assert_eq!(expand_word(b"${HOME}/a", home, None), Some("/h/a".into()));
        assert_eq!(expand_word(b"$PWD/a", home, top), Some("/p/a".into()));
        assert_eq!(expand_word(b"a/b", home, top), Some("/p/a/b".into()));
        assert_eq!(expand_word(b"a/b", home, None), None);
        assert_eq!(expand_word(b"$OTHER/a", home, top), None);
        assert_eq!(expand_word(b"--flag", home, top), None);
    }

    #[test]
    fn names_code_running_keys() {
        assert!(runs_code("core.fsmonitor", b"x"));
        assert!(runs_code("filter.lfs.smudge", b"x"));
        assert!(runs_code("diff.a.b.textconv", b"x"));
        assert!(runs_code("alias.x", b"!sh"));
        assert!(!runs_code("alias.st", b"status"));
        assert!(!runs_code("core.bare", b"false"));
        assert!(matches_key("filter.*.clean", "filter.a.clean"));
        assert!(!matches_key("filter.*.clean", "filter.clean"));
    }

    #[test]
    fn the_walk_finds_every_kind_of_dotgit_and_stops_at_its_bound() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join(".git/modules/x")).unwrap();
        std::fs::create_dir_all(root.join("vendor/x/.git")).unwrap();
        std::fs::create_dir_all(root.join("libs/sub")).unwrap();
        std::fs::write(root.join("libs/sub/.git"), "gitdir: ../../.git/modules/x\n").unwrap();
        std::fs::create_dir_all(root.join("linked")).unwrap();
        std::os::unix::fs::symlink("../elsewhere", root.join("linked/.git")).unwrap();
        // Directories git may take as git directories themselves (a `HEAD` in them).
        std::fs::create_dir_all(root.join("fixtures/b.git/objects")).unwrap();
        std::fs::write(root.join("fixtures/b.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(root.join("leaf")).unwrap();
        std::os::unix::fs::symlink("refs/heads/main", root.join("leaf/HEAD")).unwrap();
        std::fs::create_dir_all(root.join("not/HEAD")).unwrap();
        // A symlink to a directory holding a repository is not followed.
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("repo/.git")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).unwrap();
        let found = find_dotgits(root, 100).unwrap();
        let kinds: Vec<_> = found
            .iter()
            .map(|d| (d.top.strip_prefix(root).unwrap().to_path_buf(), d.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (PathBuf::from(""), DotGitKind::Directory),
                (PathBuf::from("fixtures/b.git"), DotGitKind::Head),
                (PathBuf::from("leaf"), DotGitKind::Head),
                (PathBuf::from("libs/sub"), DotGitKind::File),
                (PathBuf::from("linked"), DotGitKind::Symlink),
                (PathBuf::from("vendor/x"), DotGitKind::Directory),
            ]
        );
        assert!(matches!(
            find_dotgits(root, 2),
            Err(GitScanError::TooLarge { .. })
        ));
        assert_eq!(
            pointer_target(&root.join("libs/sub/.git")),
            Some(root.join(".git/modules/x"))
        );
    }
}
