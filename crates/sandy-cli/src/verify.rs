//! After every run: compare what git and the agent read as configuration or code with
//! its state before the run, report every change on one line, and keep the pre-run copy
//! so that `sandy restore` can put it back. Nothing is restored automatically: the user
//! may have changed a file outside during the run.
//!
//! This is defence in depth behind the read-only protections, not a replacement: it
//! also names what could not be protected in advance (a repository created during the
//! run, with every setting that makes git run a command, and its hooks).
//!
//! Every read is safe against what the run may have planted: `O_NOFOLLOW|O_NONBLOCK`,
//! an `fstat` regular-file check and a size bound, so a FIFO never blocks and a link to
//! `/dev/zero` is never read. SIGTERM, SIGHUP and Ctrl-C end Sandy while it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use sandy_policy::{GitDirKind, HostContext, ProtectionKind, ResolvedPolicy};

use crate::gitscan::{self, DotGitKind};
use crate::walk;

/// Files up to this size are compared byte for byte and copied; larger ones by their
/// metadata (size, modification time, inode), and not copied.
const COPY_MAX: usize = 1024 * 1024;
/// How many bytes of pre-run content are kept in memory in all; past it, files are
/// compared by their metadata.
const COPY_BUDGET: usize = 64 * 1024 * 1024;
/// How many entries of a protected directory are compared.
const DIR_MAX_ENTRIES: usize = 4096;
/// How deep a protected directory is compared.
const DIR_MAX_DEPTH: usize = 8;
/// How many directories the post-run walk for new repositories visits.
const WALK_MAX: usize = gitscan::MAX_WALK_DIRS;

/// Reads a regular file of at most `max` bytes without following a final symlink and
/// without blocking: `Ok(None)` when `path` is not a regular file (a FIFO, a device, a
/// symlink) or is larger than `max`.
pub fn read_bounded(path: &Path, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    match read_regular(path, max, false) {
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => Ok(None),
        other => other,
    }
}

/// Reads a regular file of at most `max` bytes without blocking on a FIFO or becoming
/// the controlling terminal; `follow` decides whether a symlink at the name itself is
/// followed (the user's own dotfile links) or refused (`ELOOP`). `Ok(None)` when the
/// file is not a regular file or is larger than `max`. The one bounded read Sandy uses
/// for files it copies or compares.
pub fn read_regular(path: &Path, max: usize, follow: bool) -> std::io::Result<Option<Vec<u8>>> {
    use nix::fcntl::OFlag;
    let nofollow = if follow {
        OFlag::empty()
    } else {
        OFlag::O_NOFOLLOW
    };
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let file = std::fs::File::from(
        sandy_linux::sys::open(path, flags | nofollow, nix::sys::stat::Mode::empty())
            .map_err(std::io::Error::from)?,
    );
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Ok(None);
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    let limit = u64::try_from(max).unwrap_or(u64::MAX) + 1;
    file.take(limit).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Ok(None);
    }
    Ok(Some(buf))
}

/// The state of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    /// A regular file: its content when small enough, else only its metadata.
    File {
        content: Option<Vec<u8>>,
        size: u64,
        mtime: (i64, i64),
        ino: u64,
        mode: u32,
    },
    Symlink(PathBuf),
    Directory {
        mode: u32,
    },
    Other(&'static str),
}

impl State {
    fn of(path: &Path) -> State {
        let mut budget = COPY_MAX;
        State::within(path, &mut budget)
    }

    /// The state of `path`, its content kept only while `budget` (bytes) lasts.
    fn within(path: &Path, budget: &mut usize) -> State {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return State::Absent;
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            return State::Symlink(std::fs::read_link(path).unwrap_or_default());
        }
        if ft.is_dir() {
            return State::Directory {
                mode: meta.mode() & 0o7777,
            };
        }
        if !ft.is_file() {
            use std::os::unix::fs::FileTypeExt;
            return State::Other(if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "a device"
            });
        }
        let max = COPY_MAX.min(*budget);
        let content = if meta.len() <= max as u64 {
            read_bounded(path, max).ok().flatten()
        } else {
            None
        };
        if let Some(c) = &content {
            *budget = budget.saturating_sub(c.len());
        }
        State::File {
            content,
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ino: meta.ino(),
            mode: meta.mode() & 0o7777,
        }
    }

    fn describe(&self) -> String {
        match self {
            State::Absent => "absent".into(),
            State::File { .. } => "a file".into(),
            State::Symlink(t) => format!("a symlink to {}", t.display()),
            State::Directory { .. } => "a directory".into(),
            State::Other(what) => (*what).into(),
        }
    }

    /// Whether two states differ in content, type or link target. A file whose content
    /// is known on both sides is compared by content (and mode); otherwise by size,
    /// modification time, inode and mode.
    fn differs(&self, other: &State) -> bool {
        match (self, other) {
            (
                State::File {
                    content: ca,
                    size: sa,
                    mtime: ta,
                    ino: ia,
                    mode: ma,
                },
                State::File {
                    content: cb,
                    size: sb,
                    mtime: tb,
                    ino: ib,
                    mode: mb,
                },
            ) => match (ca, cb) {
                (Some(a), Some(b)) => a != b || ma != mb,
                _ => (sa, ta, ia, ma) != (sb, tb, ib, mb),
            },
            _ => self != other,
        }
    }
}

/// What was recorded before launch.
pub struct Snapshot {
    paths: BTreeMap<PathBuf, State>,
    roots: Vec<PathBuf>,
    dotgits: BTreeSet<PathBuf>,
    /// Common git directories, and their linked-worktree and submodule git directories.
    commons: BTreeSet<PathBuf>,
    /// Every git directory known at launch: the scan's, and those of each common one.
    git_dirs: BTreeSet<PathBuf>,
    /// What the walk before the run saw of each tree it walked: after the run, only what
    /// changed is read again ([`walk::walk_again`]).
    walked: Vec<walk::Record>,
    /// What each git directory holds of an operation in progress (a rebase, a
    /// cherry-pick, a revert), whose state `--continue` carries out.
    in_progress: BTreeMap<PathBuf, Vec<u8>>,
    env: Vec<(OsString, OsString)>,
    cache: Option<PathBuf>,
    sigint_ignored: bool,
}

/// Records, before launch, every read-only protection (directories with their entries)
/// and every git configuration file of the scanned trees; `walked` is what the scan's walk
/// saw of them.
pub fn before(policy: &ResolvedPolicy, host: &HostContext, walked: Vec<walk::Record>) -> Snapshot {
    let mut paths = BTreeMap::new();
    let mut budget = COPY_BUDGET;
    let mut add = |p: &Path| {
        if !paths.contains_key(p) {
            let state = State::within(p, &mut budget);
            let is_dir = matches!(state, State::Directory { .. });
            paths.insert(p.to_path_buf(), state);
            if is_dir {
                for child in dir_entries(p) {
                    let s = State::within(&child, &mut budget);
                    paths.entry(child).or_insert(s);
                }
            }
        }
    };
    for p in &policy.protections {
        if p.kind == ProtectionKind::ReadOnly {
            add(&p.path);
        }
    }
    let writable = |p: &Path| host.git.scanned.iter().any(|r| p.starts_with(r));
    // A file outside the writable trees is unwritable inside by its name, but not by
    // another name it has: a hard link in the project (a dotfiles repository whose
    // `gitconfig` is also `~/.gitconfig`) writes it all the same. Such files are
    // compared too.
    let linked = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.nlink() > 1);
    for f in host.git.config_files.iter() {
        if writable(f) || linked(f) {
            add(f);
        }
    }
    // So are the files views replace and every agent's home-level launch files that
    // another name may write (`~/.claude/settings.json` hard-linked into a dotfiles
    // project of a generic run).
    let named = policy.views.iter().map(|v| &v.target);
    for file in named.chain(&policy.agent_home_files) {
        if linked(file) {
            add(file);
        }
    }
    // The scan already walked the trees: every `.git` it found is a working tree's.
    let dotgits = host
        .git
        .work_trees
        .iter()
        .map(|t| t.join(".git"))
        .filter(|d| std::fs::symlink_metadata(d).is_ok())
        .collect();
    let commons: BTreeSet<PathBuf> = host
        .git
        .git_dirs
        .iter()
        .filter(|d| d.kind == GitDirKind::Common)
        .map(|d| d.path.clone())
        .collect();
    let git_dirs: BTreeSet<PathBuf> = commons
        .iter()
        .flat_map(|c| admin_dirs(c))
        .chain(host.git.git_dirs.iter().map(|d| d.path.clone()))
        .collect();
    let in_progress = git_dirs
        .iter()
        .filter(|d| writable(d))
        .map(|d| (d.clone(), in_progress_state(d)))
        .collect();
    Snapshot {
        paths,
        roots: host.git.scanned.clone(),
        dotgits,
        commons,
        git_dirs,
        walked,
        in_progress,
        env: host.env.clone(),
        cache: cache_dir(&host.env, host.home.as_deref()),
        sigint_ignored: sigint_ignored(),
    }
}

/// The linked-worktree and submodule git directories of a common git directory.
fn admin_dirs(common: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(common.join("worktrees"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.extend(gitscan::module_dirs(common));
    out
}

/// Every entry under `dir`, bounded, not following symlinks (`dir` itself included: a
/// link there lists nothing).
fn dir_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return out;
    }
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if out.len() >= DIR_MAX_ENTRIES {
                return out;
            }
            let p = e.path();
            if depth < DIR_MAX_DEPTH && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((p.clone(), depth + 1));
            }
            out.push(p);
        }
    }
    out
}

/// Whether SIGINT was ignored when Sandy started (a background job), asked before the
/// supervisor changes it (which it does right after).
fn sigint_ignored() -> bool {
    match sandy_linux::sys::ignore_signal(Signal::SIGINT) {
        Ok(true) => true,
        Ok(false) => {
            let _ = sandy_linux::sys::default_signal(Signal::SIGINT);
            false
        }
        Err(_) => false,
    }
}

/// Sandy's per-user cache: `$XDG_CACHE_HOME/sandy`, or `~/.cache/sandy`.
pub fn cache_dir(env: &[(OsString, OsString)], home: Option<&Path>) -> Option<PathBuf> {
    let xdg = env
        .iter()
        .rev()
        .find(|(k, _)| k == "XDG_CACHE_HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute());
    xdg.or_else(|| home.map(|h| h.join(".cache")))
        .map(|c| c.join("sandy"))
}

/// One reported change.
struct Change {
    path: PathBuf,
    was: State,
    now: State,
}

/// Compares after the run, prints one line per change, and saves the pre-run copies.
pub fn after(snapshot: Snapshot) {
    // The run is over: termination requests end Sandy again, even mid-check.
    if !snapshot.sigint_ignored {
        let _ = sandy_linux::sys::default_signal(Signal::SIGINT);
    }
    let mut unblock = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        unblock.add(sig);
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&unblock), None);

    let mut changes = Vec::new();
    let mut reported: BTreeSet<PathBuf> = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (path, was) in &snapshot.paths {
        seen.insert(path.clone());
        let now = State::of(path);
        if was.differs(&now) {
            changes.push(Change {
                path: path.clone(),
                was: was.clone(),
                now,
            });
        }
    }
    // Entries added inside a protected directory, or inside one the run created (a new
    // `.git` is described below, by what in it can run code).
    let dirs: Vec<PathBuf> = snapshot
        .paths
        .iter()
        .filter(|(p, s)| {
            matches!(s, State::Directory { .. })
                || (matches!(s, State::Absent) && p.file_name() != Some(OsStr::new(".git")))
        })
        .map(|(p, _)| p.clone())
        .collect();
    for dir in dirs {
        if matches!(State::of(&dir), State::Directory { .. }) {
            for child in dir_entries(&dir) {
                if !seen.contains(&child) {
                    seen.insert(child.clone());
                    changes.push(Change {
                        now: State::of(&child),
                        path: child,
                        was: State::Absent,
                    });
                }
            }
        }
    }
    let run_id = run_id();
    let saved = save_copies(&snapshot, &changes, &run_id);
    for c in &changes {
        reported.insert(c.path.clone());
        if c.was == State::Absent {
            eprintln!(
                "sandy: warning: {} did not exist at launch and was created inside the \
                 sandbox ({}); review it before anything outside the sandbox uses it{}",
                c.path.display(),
                c.now.describe(),
                restore_hint(&saved, &c.path, &run_id)
            );
        } else {
            eprintln!(
                "sandy: warning: {} was changed during the run (was {}, now {}); review it \
                 before anything outside the sandbox uses it{}",
                c.path.display(),
                c.was.describe(),
                c.now.describe(),
                restore_hint(&saved, &c.path, &run_id)
            );
        }
    }
    report_new_repositories(&snapshot, &mut reported);
    report_operations_in_progress(&snapshot);
}

/// Where git keeps an operation in progress, in a git directory (per worktree):
/// `git rebase --continue`, `git cherry-pick --continue` and `git revert --continue`
/// carry out what these hold (a todo list's `exec` lines, a merge strategy named by
/// path, options).
const IN_PROGRESS: [&str; 3] = ["rebase-merge", "rebase-apply", "sequencer"];

/// The state of every operation in progress in `git_dir`: each entry's name and, for a
/// small regular file, its content (empty when none is in progress).
fn in_progress_state(git_dir: &Path) -> Vec<u8> {
    let mut state = Vec::new();
    for name in IN_PROGRESS {
        let mut entries = dir_entries(&git_dir.join(name));
        if entries.is_empty() && !git_dir.join(name).exists() {
            continue;
        }
        entries.sort();
        state.extend_from_slice(name.as_bytes());
        state.push(0);
        for e in entries {
            state.extend_from_slice(e.as_os_str().as_bytes());
            state.push(0);
            if let Ok(Some(content)) = read_bounded(&e, 64 * 1024) {
                state.extend_from_slice(&content);
            }
            state.push(0);
        }
    }
    state
}

/// An operation in progress that the run started or changed: named, with what in it
/// runs a command on `--continue`.
fn report_operations_in_progress(snapshot: &Snapshot) {
    for (git_dir, was) in &snapshot.in_progress {
        report_in_progress(git_dir, was);
    }
}

/// Names the operation in progress in `git_dir` when its state is not `was` (empty: none
/// was in progress, or the git directory is new).
fn report_in_progress(git_dir: &Path, was: &[u8]) {
    let now = in_progress_state(git_dir);
    if now.is_empty() || now == was {
        return;
    }
    let (what, abort) = if git_dir.join("sequencer").exists() {
        (
            "a cherry-pick or revert",
            "git cherry-pick --abort` or `git revert --abort",
        )
    } else {
        ("a rebase", "git rebase --abort")
    };
    let mut runs = Vec::new();
    for name in IN_PROGRESS {
        let dir = git_dir.join(name);
        for todo in ["git-rebase-todo", "todo"] {
            let text = read_bounded(&dir.join(todo), 1024 * 1024).ok().flatten();
            for line in text.unwrap_or_default().split(|&b| b == b'\n') {
                let line = line.trim_ascii();
                if line.starts_with(b"exec ") || line.starts_with(b"x ") {
                    runs.push(String::from_utf8_lossy(line).into_owned());
                }
            }
        }
        for opts in ["strategy", "opts"] {
            if let Ok(Some(text)) = read_bounded(&dir.join(opts), 64 * 1024) {
                let text = String::from_utf8_lossy(&text);
                if opts == "strategy" || text.contains("strategy") {
                    runs.push(format!("a merge strategy in {}", dir.join(opts).display()));
                }
            }
        }
    }
    let detail = if runs.is_empty() {
        String::new()
    } else {
        format!(" (it runs: {})", runs.join("; "))
    };
    eprintln!(
        "sandy: warning: {} holds {what} in progress that was started or changed inside \
         the sandbox; `--continue` outside would carry out what it holds{detail}: review \
         it, or end it with `{abort}`",
        git_dir.display()
    );
}

fn restore_hint(saved: &BTreeSet<PathBuf>, path: &Path, run_id: &str) -> String {
    if saved.contains(path) {
        format!("; the pre-run state is saved: sandy restore {run_id}")
    } else {
        String::new()
    }
}

fn run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", now.as_secs(), std::process::id())
}

/// Writes the pre-run state of every changed path under the cache
/// (`restore/<run>/index.json` and one file per saved content). Returns the paths whose
/// pre-run state was saved.
fn save_copies(snapshot: &Snapshot, changes: &[Change], run_id: &str) -> BTreeSet<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut saved = BTreeSet::new();
    let Some(cache) = snapshot.cache.as_ref().filter(|_| !changes.is_empty()) else {
        return saved;
    };
    let dir = cache.join("restore").join(run_id);
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        eprintln!(
            "sandy: warning: cannot keep the pre-run copies in {}: {e}",
            dir.display()
        );
        return saved;
    }
    let mut index = Vec::new();
    for (n, c) in changes.iter().enumerate() {
        let mut entry = serde_json::Map::new();
        entry.insert(
            "path".into(),
            serde_json::Value::String(hex(c.path.as_os_str().as_bytes())),
        );
        match &c.was {
            State::Absent => {
                entry.insert("was".into(), "absent".into());
            }
            State::Directory { mode } => {
                entry.insert("was".into(), "directory".into());
                entry.insert("mode".into(), (*mode).into());
            }
            State::Symlink(t) => {
                entry.insert("was".into(), "symlink".into());
                entry.insert(
                    "target".into(),
                    serde_json::Value::String(hex(t.as_os_str().as_bytes())),
                );
            }
            State::File {
                content: Some(bytes),
                mode,
                ..
            } => {
                let name = format!("{n}.copy");
                if std::fs::write(dir.join(&name), bytes).is_err() {
                    continue;
                }
                entry.insert("was".into(), "file".into());
                entry.insert("copy".into(), name.into());
                entry.insert("mode".into(), (*mode).into());
            }
            State::File { content: None, .. } | State::Other(_) => {
                // Too large to copy, or not a file Sandy can put back.
                continue;
            }
        }
        index.push(serde_json::Value::Object(entry));
        saved.insert(c.path.clone());
    }
    let doc = serde_json::json!({ "version": 1, "entries": index });
    if let Err(e) = std::fs::write(dir.join("index.json"), doc.to_string()) {
        eprintln!(
            "sandy: warning: cannot keep the pre-run copies in {}: {e}",
            dir.display()
        );
        saved.clear();
    }
    saved
}

/// Paths are stored as hex so that any byte string survives JSON.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// New `.git` entries, linked worktrees and submodule git directories, and directories
/// git now takes as git directories themselves: each is named, with every code-running
/// setting of its configuration and every hook it holds.
fn report_new_repositories(snapshot: &Snapshot, reported: &mut BTreeSet<PathBuf>) {
    // Made only when needed: finding git looks along PATH.
    let git = std::cell::OnceCell::new();
    let git = || git.get_or_init(|| gitscan::Git::new(&snapshot.env));
    let mut new_git_dirs: Vec<PathBuf> = Vec::new();
    let mut new_tops: Vec<PathBuf> = Vec::new();
    for root in &snapshot.roots {
        let record = snapshot.walked.iter().find(|w| w.root() == root.as_path());
        let again = match record {
            Some(record) => walk::walk_again(record, WALK_MAX),
            None => gitscan::find_dotgits(root, WALK_MAX).map(|found| walk::Walked {
                found,
                ..walk::Walked::default()
            }),
        };
        let Ok(again) = again else {
            eprintln!(
                "sandy: warning: {} is too large to check for git repositories created \
                 inside the sandbox; review any before running git there",
                root.display()
            );
            continue;
        };
        let before = record.map(walk::Record::unlisted).unwrap_or_default();
        for dir in again.unlisted.iter().filter(|d| !before.contains(d)) {
            eprintln!(
                "sandy: warning: {} can be passed through but not listed (its permissions \
                 were changed inside the sandbox): git repositories the run made below it \
                 cannot be checked; review it before running git there",
                dir.display()
            );
        }
        let before = record.map(walk::Record::agent_dirs).unwrap_or_default();
        for dir in again.agent_dirs.iter().filter(|d| !before.contains(d)) {
            // The project's own are protected (or named as created) by the profiles.
            if snapshot.roots.contains(dir) {
                continue;
            }
            let names: Vec<String> = walk::AGENT_MARKERS
                .iter()
                .filter(|m| std::fs::symlink_metadata(dir.join(OsStr::from_bytes(m))).is_ok())
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .collect();
            eprintln!(
                "sandy: warning: {} holds an agent's launch configuration made inside the \
                 sandbox ({}), which an agent started there would load: review it before \
                 starting one there",
                dir.display(),
                names.join(", ")
            );
        }
        let before = record.map(walk::Record::unsearchable).unwrap_or_default();
        for dir in again.unsearchable.iter().filter(|d| !before.contains(d)) {
            eprintln!(
                "sandy: warning: {} cannot be looked into (its permissions were changed \
                 inside the sandbox): git repositories the run made below it cannot be \
                 checked; review it before giving it back its permissions or running git \
                 there",
                dir.display()
            );
        }
        for d in again.found {
            if d.kind == DotGitKind::Head {
                if snapshot.git_dirs.contains(&d.top) {
                    continue;
                }
                let Some(repo) = gitscan::own_git_dir(git(), &d.top) else {
                    continue;
                };
                if reported.insert(d.top.clone()) {
                    eprintln!(
                        "sandy: warning: {} was made a git repository inside the sandbox \
                         (git run in it or below it takes the directory itself as its git \
                         directory, as a bare repository); review it before running git there",
                        d.top.display()
                    );
                }
                new_git_dirs.push(d.top.clone());
                if !snapshot.git_dirs.contains(&repo.common_dir) {
                    new_git_dirs.push(repo.common_dir);
                }
                continue;
            }
            let dotgit = d.top.join(".git");
            if snapshot.dotgits.contains(&dotgit) {
                continue;
            }
            if reported.insert(dotgit.clone()) {
                eprintln!(
                    "sandy: warning: {} did not exist at launch and was created inside the \
                     sandbox; review it before running git there",
                    dotgit.display()
                );
            }
            if d.kind != DotGitKind::Other {
                new_tops.push(d.top.clone());
            }
            match d.kind {
                DotGitKind::Directory => new_git_dirs.push(dotgit),
                DotGitKind::File => {
                    new_git_dirs.extend(gitscan::pointer_target(&dotgit));
                }
                DotGitKind::Symlink => new_git_dirs.push(dotgit),
                DotGitKind::Other | DotGitKind::Head => {}
            }
        }
    }
    for common in &snapshot.commons {
        for dir in admin_dirs(common) {
            if !snapshot.git_dirs.contains(&dir) {
                new_git_dirs.push(dir);
            }
        }
    }
    new_git_dirs.sort();
    new_git_dirs.dedup();
    for dir in new_git_dirs {
        report_in_progress(&dir, &[]);
        if dir.parent().and_then(Path::file_name) == Some(OsStr::new("worktrees")) {
            // A linked worktree added during the run: its pointer must lead back here.
            let common = dir.parent().and_then(Path::parent);
            let pointed = read_bounded(&dir.join("commondir"), 4096)
                .ok()
                .flatten()
                .map(|c| dir.join(OsStr::from_bytes(c.trim_ascii())));
            let same = match (common, pointed) {
                (Some(c), Some(p)) => matches!(
                    (std::fs::canonicalize(c), std::fs::canonicalize(p)),
                    (Ok(a), Ok(b)) if a == b
                ),
                _ => false,
            };
            if !same {
                eprintln!(
                    "sandy: warning: {} was created inside the sandbox and points git at \
                     another repository (commondir); review it before running git there",
                    dir.display()
                );
            }
            report_settings(git(), &dir.join("config.worktree"));
            continue;
        }
        for file in ["config", "config.worktree"] {
            report_settings(git(), &dir.join(file));
        }
        report_hooks(&dir.join("hooks"));
    }
    // Where git runs a new repository's hooks from, when not its own `hooks/` (a relative
    // `core.hooksPath` of the user's configuration names a directory of each working
    // tree): named there too when it lies in a scanned tree.
    for top in new_tops {
        let Some(hooks) = gitscan::hooks_dir(git(), &top) else {
            continue;
        };
        let own =
            hooks.ends_with("hooks") && hooks.parent().is_some_and(|g| is_git_dir_of(&top, g));
        let inside = snapshot.roots.iter().any(|r| hooks.starts_with(r));
        if !own && inside {
            report_hooks(&hooks);
        }
    }
}

/// Whether `git_dir` is the git directory of the working tree at `top` (its `.git`, or
/// where a pointer file there leads).
fn is_git_dir_of(top: &Path, git_dir: &Path) -> bool {
    let dotgit = top.join(".git");
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    same(&dotgit, git_dir) || gitscan::pointer_target(&dotgit).is_some_and(|p| same(&p, git_dir))
}

/// Names every hook in `hooks` (a directory made or changed inside), or the link `hooks`
/// is, without following it.
fn report_hooks(hooks: &Path) {
    if let State::Symlink(target) = State::of(hooks) {
        eprintln!(
            "sandy: warning: {} is a symbolic link to {}, made inside the sandbox; git \
             outside would run the hooks it finds there: review it first",
            hooks.display(),
            target.display()
        );
    }
    for hook in dir_entries(hooks) {
        let sample = hook.extension() == Some(OsStr::new("sample"));
        if !sample && !matches!(State::of(&hook), State::Directory { .. }) {
            eprintln!(
                "sandy: warning: {} is a git hook created inside the sandbox; git \
                 outside would run it: review it first",
                hook.display()
            );
        }
    }
}

/// Names every code-running setting of one configuration file (read by git, includes
/// not followed).
fn report_settings(git: &gitscan::Git, file: &Path) {
    if !matches!(State::of(file), State::File { .. }) {
        return;
    }
    for (key, value) in git.config_entries(file) {
        if gitscan::runs_code(&key, &value) {
            eprintln!(
                "sandy: warning: {} sets {key} = {}, which makes git run a command; it was \
                 created inside the sandbox: review it before running git there",
                file.display(),
                String::from_utf8_lossy(&value)
            );
        }
    }
}

/// `sandy restore`: without a run, lists the runs whose pre-run copies are kept; with one,
/// puts every saved path of that run back.
pub fn restore(run: Option<&str>) -> Result<u8, crate::error::SandyError> {
    let io = |step| move |source| crate::error::SandyError::Io { step, source };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let Some(cache) = cache_dir(&env, home.as_deref()) else {
        return Err(crate::error::SandyError::Io {
            step: "cannot find Sandy's cache (set HOME or XDG_CACHE_HOME)",
            source: std::io::ErrorKind::NotFound.into(),
        });
    };
    let base = cache.join("restore");
    let Some(run) = run else {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&base)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        runs.sort();
        if runs.is_empty() {
            let _ = crate::print_line("no saved pre-run copies");
        }
        for dir in runs {
            let id = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            for (path, was) in read_index(&dir).unwrap_or_default() {
                let _ = crate::print_line(&format!(
                    "{id}\t{}\t(was {was})",
                    Path::new(OsStr::from_bytes(&path)).display()
                ));
            }
        }
        return Ok(0);
    };
    if run.contains('/') || run.starts_with('.') {
        return Err(crate::error::SandyError::Io {
            step: "not a run name (see `sandy restore`)",
            source: std::io::ErrorKind::InvalidInput.into(),
        });
    }
    let dir = base.join(run);
    let text =
        std::fs::read(dir.join("index.json")).map_err(io("cannot read the run's saved copies"))?;
    let doc: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| crate::error::SandyError::Io {
            step: "cannot read the run's saved copies",
            source: e.into(),
        })?;
    let entries = doc["entries"].as_array().cloned().unwrap_or_default();
    let mut failed = 0u8;
    for e in entries {
        let Some(path) = e["path"].as_str().and_then(unhex) else {
            continue;
        };
        let path = PathBuf::from(OsStr::from_bytes(&path));
        let result = put_back(&dir, &path, &e);
        match result {
            Ok(what) => {
                let _ = crate::print_line(&format!("restored {} ({what})", path.display()));
            }
            Err(err) => {
                failed = 1;
                eprintln!("sandy: cannot restore {}: {err}", path.display());
            }
        }
    }
    Ok(failed)
}

fn read_index(dir: &Path) -> Option<Vec<(Vec<u8>, String)>> {
    let text = std::fs::read(dir.join("index.json")).ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&text).ok()?;
    Some(
        doc["entries"]
            .as_array()?
            .iter()
            .filter_map(|e| Some((unhex(e["path"].as_str()?)?, e["was"].as_str()?.to_owned())))
            .collect(),
    )
}

/// Removes what is at `path` now, if it is not a directory holding anything.
fn clear(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

fn put_back(dir: &Path, path: &Path, e: &serde_json::Value) -> std::io::Result<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    let mode = e["mode"].as_u64().and_then(|m| u32::try_from(m).ok());
    match e["was"].as_str() {
        Some("absent") => {
            // A directory the run created may hold more than Sandy recorded: it is moved
            // aside, never deleted.
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                let mut aside = path.as_os_str().to_os_string();
                aside.push(".sandy-removed");
                std::fs::rename(path, &aside)?;
                return Ok("moved aside to *.sandy-removed: it did not exist before the run");
            }
            clear(path)?;
            Ok("removed: it did not exist before the run")
        }
        Some("directory") => {
            if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                clear(path)?;
                std::fs::create_dir(path)?;
            }
            if let Some(mode) = mode {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok("directory")
        }
        Some("symlink") => {
            let target = e["target"]
                .as_str()
                .and_then(unhex)
                .ok_or(std::io::ErrorKind::InvalidData)?;
            clear(path)?;
            std::os::unix::fs::symlink(OsStr::from_bytes(&target), path)?;
            Ok("symlink")
        }
        Some("file") => {
            let name = e["copy"].as_str().ok_or(std::io::ErrorKind::InvalidData)?;
            let bytes = std::fs::read(dir.join(name))?;
            let parent = path.parent().ok_or(std::io::ErrorKind::InvalidInput)?;
            let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
            std::io::Write::write_all(&mut tmp, &bytes)?;
            if let Some(mode) = mode {
                tmp.as_file()
                    .set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir(path)?;
            }
            tmp.persist(path).map_err(|e| e.error)?;
            Ok("file")
        }
        _ => Err(std::io::ErrorKind::InvalidData.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_never_block_or_follow() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(read_bounded(&fifo, 10).unwrap(), None);
        let zero = t.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(read_bounded(&zero, 10).unwrap(), None);
        let big = t.path().join("big");
        std::fs::write(&big, [0u8; 11]).unwrap();
        assert_eq!(read_bounded(&big, 10).unwrap(), None);
        std::fs::write(&big, b"ok").unwrap();
        assert_eq!(read_bounded(&big, 10).unwrap(), Some(b"ok".to_vec()));
        assert!(matches!(State::of(&fifo), State::Other("a FIFO")));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(b"/a b\n")), Some(b"/a b\n".to_vec()));
    }
}
