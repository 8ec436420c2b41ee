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
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use sandy_policy::caches::sandy_state_dir;
use sandy_policy::text::{Shown, Tilde};
use sandy_policy::{GitDirKind, HostContext, ProtectionKind, ResolvedPolicy};

use crate::gitscan::{self, DotGitKind};
use crate::hostfs::{Dir, Kind, Way};
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

/// Reads a regular file of at most `max` bytes for a report (what a git directory holds
/// of an operation in progress, a pointer file): never blocking on a FIFO, never a link
/// at the name itself; `Ok(None)` when it is not a regular file or is larger.
pub fn read_bounded(path: &Path, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let (dir, name) = crate::hostfs::locate(path, std::iter::empty(), false)?;
    dir.read(name, max)
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
    /// A directory, by its mode and inode: another directory put in its place (by a
    /// concurrent run that could remove the name) is a change.
    Directory {
        mode: u32,
        ino: u64,
    },
    Other(&'static str),
    /// Its name no longer leads where it did at launch (a link on the way, made or
    /// changed since): not looked at through it.
    Moved(String),
}

impl State {
    /// The state of the entry `name` of `dir`, its content kept only while `budget`
    /// (bytes) lasts.
    fn in_dir(dir: &Dir, name: &OsStr, budget: &mut usize) -> State {
        let Ok(Some(st)) = dir.entry(name) else {
            return State::Absent;
        };
        match st.kind {
            Kind::Symlink => State::Symlink(dir.read_link(name).unwrap_or_default()),
            Kind::Directory => State::Directory {
                mode: st.mode,
                ino: st.ino,
            },
            Kind::File => {
                let max = COPY_MAX.min(*budget);
                let content = if st.size <= max as u64 {
                    dir.read(name, max).ok().flatten()
                } else {
                    None
                };
                if let Some(c) = &content {
                    *budget = budget.saturating_sub(c.len());
                }
                State::File {
                    content,
                    size: st.size,
                    mtime: st.mtime,
                    ino: st.ino,
                    mode: st.mode,
                }
            }
            other => State::Other(other.describe()),
        }
    }

    fn describe(&self) -> String {
        match self {
            State::Absent => "absent".into(),
            State::File { .. } => "a file".into(),
            State::Symlink(t) => format!("a symlink to {}", Shown(t)),
            State::Directory { .. } => "a directory".into(),
            State::Other(what) => (*what).into(),
            State::Moved(why) => format!("reached another way: {why}"),
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

/// What a directory's name leads to, for [`Looker`].
#[derive(Clone)]
enum Place {
    Dir(Rc<Dir>),
    Absent,
    Moved(String),
}

/// Looks at the paths verification records, each from the place its directory's name
/// led to at launch ([`Way`]), never through a link a run could have put on the way:
/// before the run it records each directory's way; after it, a directory whose way
/// changed is not looked into ([`State::Moved`]), and one that is new since launch is
/// reached from the nearest one recorded, with no link followed.
struct Looker<'a> {
    /// The ways recorded at launch (`None` while recording them).
    launch: Option<&'a BTreeMap<PathBuf, Way>>,
    ways: BTreeMap<PathBuf, Way>,
    places: BTreeMap<PathBuf, Place>,
}

impl<'a> Looker<'a> {
    fn recording() -> Looker<'static> {
        Looker {
            launch: None,
            ways: BTreeMap::new(),
            places: BTreeMap::new(),
        }
    }

    fn after(launch: &'a BTreeMap<PathBuf, Way>) -> Looker<'a> {
        Looker {
            launch: Some(launch),
            ways: BTreeMap::new(),
            places: BTreeMap::new(),
        }
    }

    fn opened(way: &Way) -> Place {
        match way.open() {
            Ok(dir) => Place::Dir(Rc::new(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Place::Absent,
            Err(_) => Place::Moved(format!(
                "a symbolic link or a file is now on the way to {}",
                Shown(&way.at)
            )),
        }
    }

    /// What the directory `dir` (its name) leads to.
    fn place(&mut self, dir: &Path) -> Place {
        if let Some(place) = self.places.get(dir) {
            return place.clone();
        }
        let place = match self.launch {
            None => {
                let way = Way::of(dir);
                let place = Looker::opened(&way);
                self.ways.insert(dir.to_path_buf(), way);
                place
            }
            Some(launch) => match launch.get(dir) {
                Some(was) => {
                    let now = Way::of(dir);
                    if now == *was {
                        Looker::opened(was)
                    } else {
                        Place::Moved(was.change(&now))
                    }
                }
                None => match (dir.parent(), dir.file_name()) {
                    (Some(parent), Some(name)) => match self.place(parent) {
                        Place::Dir(d) => match d.open_dir(name) {
                            Ok(sub) => Place::Dir(Rc::new(sub)),
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Place::Absent,
                            Err(_) => Place::Moved(format!(
                                "{} is not a directory now (a symbolic link or a file)",
                                Shown(dir)
                            )),
                        },
                        other => other,
                    },
                    _ => Looker::opened(&Way::of(dir)),
                },
            },
        };
        self.places.insert(dir.to_path_buf(), place.clone());
        place
    }

    fn state(&mut self, path: &Path, budget: &mut usize) -> State {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return State::Other("the root");
        };
        match self.place(parent) {
            Place::Dir(dir) => State::in_dir(&dir, name, budget),
            Place::Absent => State::Absent,
            Place::Moved(why) => State::Moved(why),
        }
    }

    fn state_of(&mut self, path: &Path) -> State {
        let mut budget = COPY_MAX;
        self.state(path, &mut budget)
    }

    /// Every entry under the directory `dir`, bounded, through handles (a link is listed,
    /// never entered).
    fn entries(&mut self, dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Place::Dir(top) = self.place(dir) else {
            return out;
        };
        fn walk(d: &Dir, name: &Path, depth: usize, out: &mut Vec<PathBuf>) {
            let Ok(entries) = d.entries_prefix(DIR_MAX_ENTRIES) else {
                return;
            };
            for e in entries {
                if out.len() >= DIR_MAX_ENTRIES {
                    return;
                }
                let path = name.join(&e.name);
                out.push(path.clone());
                if depth < DIR_MAX_DEPTH && e.kind == Kind::Directory {
                    if let Ok(sub) = d.open_dir(&e.name) {
                        walk(&sub, &path, depth + 1, out);
                    }
                }
            }
        }
        walk(&top, dir, 0, &mut out);
        out
    }

    /// Where `path` was at launch: its directory's place then, and its name (for a
    /// path below a directory new since launch, the nearest recorded one's place and
    /// the rest of the name).
    fn location(&self, path: &Path) -> Option<PathBuf> {
        let launch = self.launch?;
        let (parent, name) = (path.parent()?, path.file_name()?);
        match launch.get(parent) {
            Some(way) => Some(way.at.join(name)),
            None => Some(self.location(parent)?.join(name)),
        }
    }
}

/// What was recorded before launch.
pub struct Snapshot {
    paths: BTreeMap<PathBuf, State>,
    roots: Vec<PathBuf>,
    /// The run's project (its working directory), which names the run.
    project: PathBuf,
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
    /// The way each recorded path's directory led at launch ([`Looker`]).
    ways: BTreeMap<PathBuf, Way>,
    /// The files a tool runs or loads on the user's next action, among `paths`
    /// ([`sandy_policy::later`]).
    later: BTreeMap<PathBuf, sandy_policy::later::LaterFile>,
    /// Files and directories the agent may write that its next launch reads (memory, the
    /// login), with the reason: every change in them is named.
    watched: BTreeMap<PathBuf, String>,
    /// Login files that name their account, with the keys that do
    /// ([`sandy_policy::statedirs::Account`]).
    accounts: BTreeMap<PathBuf, Vec<String>>,
    /// Writable directories of an agent's state inside a protected one: what the agent
    /// writes in them is its ordinary work, not a change to a protected name.
    reopened: Vec<PathBuf>,
    /// Directories recorded without their entries ([`before`]).
    shallow: BTreeSet<PathBuf>,
    env: Vec<(OsString, OsString)>,
    /// Where the pre-run copies of this run go (`sandy restore`).
    state: Option<PathBuf>,
    /// Sandy's state directory, where the walk's record is kept for the next launch.
    sandy_state: Option<PathBuf>,
    sigint_ignored: bool,
}

/// Records, before launch, every read-only protection (directories with their entries)
/// and every git configuration file of the scanned trees; `walked` is what the scan's walk
/// saw of them.
pub fn before(policy: &ResolvedPolicy, host: &HostContext, walked: Vec<walk::Record>) -> Snapshot {
    let mut paths = BTreeMap::new();
    let mut budget = COPY_BUDGET;
    let mut looker = Looker::recording();
    let reopened = &policy.reopened;
    let mut shallow = BTreeSet::new();
    let mut add = |p: &Path, deep: bool| {
        if !paths.contains_key(p) {
            let state = looker.state(p, &mut budget);
            let is_dir = matches!(state, State::Directory { .. });
            paths.insert(p.to_path_buf(), state);
            if is_dir && !deep {
                shallow.insert(p.to_path_buf());
            } else if is_dir {
                // What lies in a writable directory of the agent's state inside this one
                // is the agent's work, not part of what is protected (its memory, watched,
                // is recorded by its own name).
                let inside_reopened = |c: &Path| {
                    reopened
                        .iter()
                        .any(|r| c.starts_with(r) && c != r.as_path() && !p.starts_with(r))
                };
                for child in looker
                    .entries(p)
                    .into_iter()
                    .filter(|c| !inside_reopened(c))
                {
                    let s = looker.state(&child, &mut budget);
                    paths.entry(child).or_insert(s);
                }
            }
        }
    };
    // A directory of an agent's state protected because it existed at launch is
    // recorded by itself: its subtree (Claude Code's `projects`, hundreds of sessions) is
    // read-only by its mount, and reading it at every launch would make the launch's cost
    // grow with it.
    for p in &policy.protections {
        if p.kind == ProtectionKind::ReadOnly {
            add(&p.path, !p.at_launch);
        }
    }
    let writable = |p: &Path| host.git.scanned.iter().any(|r| p.starts_with(r));
    // A file outside the writable trees is unwritable inside by its name, but not by
    // another name it has: a hard link in the project (a dotfiles repository whose
    // `gitconfig` is also `~/.gitconfig`) writes it all the same. Such files are
    // compared too.
    let linked = |p: &Path| {
        crate::hostfs::locate(p, std::iter::empty(), true)
            .ok()
            .and_then(|(dir, name)| dir.entry(name).ok().flatten())
            .is_some_and(|st| st.kind == Kind::File && st.nlink > 1)
    };
    for f in host.git.config_files.iter() {
        if writable(f) || linked(f) {
            add(f, true);
        }
    }
    // So are the files views replace and every agent's home-level launch files that
    // another name may write (`~/.claude/settings.json` hard-linked into a dotfiles
    // project of a generic run).
    let named = policy.views.iter().map(|v| &v.target);
    for file in named.chain(&policy.agent_home_files) {
        if linked(file) {
            add(file, true);
        }
    }
    // The files a tool runs or loads on the user's next action, at the top of every
    // scanned tree and working tree (present or not: one the run creates is named too).
    let mut later = BTreeMap::new();
    let tops: BTreeSet<&PathBuf> = host
        .git
        .scanned
        .iter()
        .chain(&host.git.work_trees)
        .collect();
    for top in tops {
        for file in sandy_policy::later::LATER_FILES {
            let path = top.join(file.name);
            add(&path, true);
            later.insert(path, *file);
        }
    }
    // The agent's memory and login: writable, every change named.
    let mut watched = BTreeMap::new();
    for (path, reason) in &policy.watched {
        add(path, true);
        watched.insert(path.clone(), reason.clone());
    }
    let mut accounts = BTreeMap::new();
    for dir in &policy.agent_state {
        for account in &dir.accounts {
            let path = dir.root.join(&account.path);
            add(&path, true);
            accounts.insert(path, account.identity.clone());
        }
    }
    // The scanned trees' own ways, from which anything new in them is reached after the
    // run.
    for root in &host.git.scanned {
        let _ = looker.place(root);
    }
    // The scan already walked the trees: every `.git` it found is a working tree's.
    let dotgits = host
        .git
        .work_trees
        .iter()
        .map(|t| t.join(".git"))
        .filter(|d| !matches!(looker.state_of(d), State::Absent))
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
        .map(|d| (d.clone(), in_progress_state(&mut looker, d)))
        .collect();
    Snapshot {
        paths,
        roots: host.git.scanned.clone(),
        project: policy.working_directory.clone(),
        dotgits,
        commons,
        git_dirs,
        walked,
        in_progress,
        ways: looker.ways,
        later,
        watched,
        accounts,
        reopened: policy.reopened.clone(),
        shallow,
        env: host.env.clone(),
        state: host
            .home
            .as_deref()
            .map(|home| sandy_state_dir(home, host).join(RESTORE_DIR)),
        sandy_state: host.home.as_deref().map(|home| sandy_state_dir(home, host)),
        sigint_ignored: sigint_ignored(),
    }
}

/// The linked-worktree and submodule git directories of a common git directory.
fn admin_dirs(common: &Path) -> Vec<PathBuf> {
    let worktrees = common.join("worktrees");
    let mut out: Vec<PathBuf> = crate::hostfs::subdirectories(&worktrees)
        .into_iter()
        .map(|name| worktrees.join(name))
        .collect();
    out.extend(gitscan::module_dirs(common));
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

/// One reported change.
struct Change {
    path: PathBuf,
    was: State,
    now: State,
}

/// Compares after the run, prints one line per change, and saves the pre-run copies.
/// The run's name for `sandy restore` when a pre-run copy was saved.
pub fn after(snapshot: Snapshot) -> Option<String> {
    // The run is over: termination requests end Sandy again, even mid-check.
    if !snapshot.sigint_ignored {
        let _ = sandy_linux::sys::default_signal(Signal::SIGINT);
    }
    let mut unblock = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        unblock.add(sig);
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&unblock), None);

    let mut looker = Looker::after(&snapshot.ways);
    let mut changes = Vec::new();
    let mut reported: BTreeSet<PathBuf> = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (path, was) in &snapshot.paths {
        seen.insert(path.clone());
        let now = looker.state_of(path);
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
        .filter(|(p, _)| !snapshot.shallow.contains(*p))
        .map(|(p, _)| p.clone())
        .collect();
    // What the agent writes in a writable directory inside a protected one is its work
    // (looked at only from a directory outside it).
    let inside_reopened = |dir: &Path, p: &Path| {
        snapshot
            .reopened
            .iter()
            .any(|r| p.starts_with(r) && p != r.as_path() && !dir.starts_with(r))
    };
    for dir in dirs {
        if matches!(looker.state_of(&dir), State::Directory { .. }) {
            for child in looker.entries(&dir) {
                if !seen.contains(&child) && !inside_reopened(&dir, &child) {
                    seen.insert(child.clone());
                    changes.push(Change {
                        now: looker.state_of(&child),
                        path: child,
                        was: State::Absent,
                    });
                }
            }
        }
    }
    let mut run_id = run_id(&snapshot.project);
    reported.extend(changes.iter().map(|c| c.path.clone()));
    // A repository the run created is named below, by what in it can run code; its
    // `.git` is saved as absent, so that `sandy restore` takes it out of git's way.
    let new_repos = find_new_repositories(&snapshot, &mut reported);
    let mut named_below = BTreeSet::new();
    for path in &new_repos.removable {
        if !changes.iter().any(|c| &c.path == path) {
            named_below.insert(path.clone());
            changes.push(Change {
                now: looker.state_of(path),
                path: path.clone(),
                was: State::Absent,
            });
        }
    }
    let saved = save_copies(&snapshot, &looker, &changes, &mut run_id);
    for c in changes.iter().filter(|c| !named_below.contains(&c.path)) {
        if let Some(keys) = snapshot.accounts.get(&c.path) {
            if account_replaced(&looker, c, keys) {
                continue;
            }
        }
        if let Some((_, reason)) = snapshot.watched.iter().find(|(w, _)| c.path.starts_with(w)) {
            say!(
                "note: {} was {} inside the sandbox: {reason}; review it{}",
                Shown(&c.path),
                match (&c.was, &c.now) {
                    (State::Absent, _) => "created",
                    (_, State::Absent) => "removed",
                    _ => "changed",
                },
                restore_hint(&saved, &c.path, &run_id)
            );
            continue;
        }
        if let Some(file) = snapshot.later.get(&c.path) {
            let names_a_path = match &c.now {
                State::File {
                    content: Some(text),
                    ..
                } => text.contains(&b'/'),
                _ => true,
            };
            if !file.only_a_path || names_a_path {
                say!(
                    "warning: {} was {} inside the sandbox: {}; review it before that{}",
                    Shown(&c.path),
                    if c.was == State::Absent {
                        "created"
                    } else {
                        "changed"
                    },
                    file.reason,
                    restore_hint(&saved, &c.path, &run_id)
                );
            }
            continue;
        }
        if c.was == State::Absent {
            say!(
                "warning: {} did not exist at launch and was created inside the \
                 sandbox ({}); review it before anything outside the sandbox uses it{}",
                c.path.display(),
                c.now.describe(),
                restore_hint(&saved, &c.path, &run_id)
            );
        } else {
            say!(
                "warning: {} was changed during the run (was {}, now {}); review it \
                 before anything outside the sandbox uses it{}",
                c.path.display(),
                c.was.describe(),
                match (&c.was, &c.now) {
                    (State::Directory { ino: a, .. }, State::Directory { ino: b, .. })
                        if a != b =>
                    {
                        "another directory in its place".to_owned()
                    }
                    _ => c.now.describe(),
                },
                restore_hint(&saved, &c.path, &run_id)
            );
        }
    }
    let hint = |path: &Path| restore_hint(&saved, path, &run_id);
    report_new_repositories(&snapshot, &mut looker, new_repos, &hint);
    report_operations_in_progress(&snapshot, &mut looker);
    (!saved.is_empty()).then_some(run_id)
}

/// The `landlock` tier, which has no read-only mount: every path the run changed at or
/// below `only` (what the full tier keeps read-only) is put back at once from its
/// pre-run copy ([`after`]), one line each; the rest stays for `sandy restore`.
pub fn restore_after_run(run_id: &str, only: &[PathBuf]) {
    let mut each = |restored: Restored| match restored {
        Restored::Put { path, at, what } => say!(
            "restored {} ({what}): --tier landlock cannot keep it read-only",
            shown_at(&path, &at)
        ),
        Restored::Failed { path, error } => say!("cannot restore {}: {error}", Tilde(&path)),
        Restored::Damaged => say!(
            "a saved entry of run {} is damaged; skipped",
            Shown(Path::new(run_id))
        ),
        Restored::NotRemoved => say!(
            "the copies of run {} could not be removed; it stays listed",
            Shown(Path::new(run_id))
        ),
    };
    if let Err(err) = restore_only(run_id, Some(only), &mut each) {
        say!("cannot restore what the run changed: {err}; run `sandy restore {run_id}`");
    }
}

/// A restored path as people read it: `~/x`, or `~/x (at ~/y)` when a link on its way at
/// launch led elsewhere.
pub fn shown_at(path: &Path, at: &Path) -> String {
    if at == path {
        Tilde(path).to_string()
    } else {
        format!("{} (at {})", Tilde(path), Tilde(at))
    }
}

/// A login file that named an account at launch and names another one now (or none):
/// the run signed in to another account. The launch's file is put back where its name
/// led at launch, through a handle, and the line says so; `true` when the change was
/// handled here. A first login, a refresh of the same account, a logout, and a login that
/// never named its account are left to the ordinary note.
fn account_replaced(looker: &Looker<'_>, c: &Change, keys: &[String]) -> bool {
    use sandy_policy::statedirs::account_identity;
    let State::File {
        content: Some(before),
        mode,
        ..
    } = &c.was
    else {
        return false;
    };
    let was = account_identity(before, keys);
    if was.is_empty() {
        return false;
    }
    let now = match &c.now {
        State::Absent => return false,
        State::File {
            content: Some(after),
            ..
        } => account_identity(after, keys),
        _ => Default::default(),
    };
    if now == was {
        return false;
    }
    let put_back = looker
        .location(&c.path)
        .and_then(|at| Some((at.parent()?.to_path_buf(), at.file_name()?.to_os_string())))
        .ok_or_else(|| std::io::Error::other("its place at launch is unknown"))
        .and_then(|(parent, name)| Dir::open_exact(&parent)?.replace(&name, before, *mode, None));
    match put_back {
        Ok(()) => say!(
            "refused: the run signed {} in to another account; the login from before the \
             run is back (a refresh of the same account is kept; sign in to another account \
             outside Sandy)",
            Shown(&c.path)
        ),
        Err(e) => say!(
            "warning: the run signed {} in to another account, and the login from before the \
             run could not be put back ({e}); review it before the next launch",
            Shown(&c.path)
        ),
    }
    true
}

/// Where git keeps an operation in progress, in a git directory (per worktree):
/// `git rebase --continue`, `git cherry-pick --continue` and `git revert --continue`
/// carry out what these hold (a todo list's `exec` lines, a merge strategy named by
/// path, options).
const IN_PROGRESS: [&str; 3] = ["rebase-merge", "rebase-apply", "sequencer"];

/// The state of every operation in progress in `git_dir`: each entry's name and, for a
/// small regular file, its content (empty when none is in progress).
fn in_progress_state(looker: &mut Looker<'_>, git_dir: &Path) -> Vec<u8> {
    let mut state = Vec::new();
    for name in IN_PROGRESS {
        let mut entries = looker.entries(&git_dir.join(name));
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
fn report_operations_in_progress(snapshot: &Snapshot, looker: &mut Looker<'_>) {
    for (git_dir, was) in &snapshot.in_progress {
        report_in_progress(looker, git_dir, was);
    }
}

/// Names the operation in progress in `git_dir` when its state is not `was` (empty: none
/// was in progress, or the git directory is new).
fn report_in_progress(looker: &mut Looker<'_>, git_dir: &Path, was: &[u8]) {
    let now = in_progress_state(looker, git_dir);
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
    say!(
        "warning: {} holds {what} in progress that was started or changed inside \
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

/// A run's name for `sandy restore`: when it ended (UTC) and its project folder's name
/// (`20261205-043512-myproject`; [`save_copies`] adds `-2`, `-3`, ... to tell apart runs
/// of the same project that ended in the same second). Only letters, digits, `.`, `_`
/// and `-`. Older builds named runs `EPOCH-PID`; `sandy restore` takes those as well.
fn run_id(project: &Path) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let name: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = if name.is_empty() || name.starts_with('.') {
        format!("run{name}")
    } else {
        name
    };
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{name}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The records of one run's pre-run copies (`restore/<run>/record.json`, beside one file
/// per saved content), in Sandy's state directory, which no grant reaches.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    version: u32,
    entries: Vec<RecordEntry>,
}

/// The version of [`Record`] this build writes and reads.
const RECORD_VERSION: u32 = 2;
/// The name of a run's record in its directory.
const RECORD_FILE: &str = "record.json";
/// The largest record Sandy reads back.
const MAX_RECORD: usize = 16 * 1024 * 1024;
/// The name of Sandy's directory of pre-run copies in its state directory.
const RESTORE_DIR: &str = "restore";

/// One saved path.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordEntry {
    /// The name Sandy reported (hex: any bytes survive JSON).
    path: String,
    /// Where that name led at launch (its directory's canonical place then, and the
    /// name): the exact path `sandy restore` writes, reached with no link on it.
    at: String,
    was: Was,
}

/// What a saved path was before the run.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Was {
    Absent,
    Directory {
        mode: u32,
    },
    Symlink {
        target: String,
    },
    File {
        copy: String,
        mode: u32,
        sha256: String,
    },
}

impl Was {
    /// What `sandy restore` does to the path, in words.
    fn undo(&self) -> &'static str {
        match self {
            Was::Absent => {
                "did not exist before the run; restore removes it (a directory holding \
                 more is moved aside)"
            }
            Was::Directory { .. } => "a directory before the run; restore puts it back",
            Was::Symlink { .. } => "a symbolic link before the run; restore puts it back",
            Was::File { .. } => "changed by the run; restore puts the file back",
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Writes the pre-run state of every changed path to Sandy's state directory
/// (`restore/<run>/`: the record and one file per saved content, through handles).
/// Returns the paths whose pre-run state was saved.
fn save_copies(
    snapshot: &Snapshot,
    looker: &Looker<'_>,
    changes: &[Change],
    run_id: &mut String,
) -> BTreeSet<PathBuf> {
    let mut saved = BTreeSet::new();
    let Some(base) = snapshot.state.as_ref().filter(|_| !changes.is_empty()) else {
        return saved;
    };
    // The run's name, or, when a run of the same project ended in the same second, the
    // first of `NAME-2`, `NAME-3`, ... that is free.
    let dir = crate::hostfs::open_or_create(base, 0o700).and_then(|b| {
        let first = run_id.clone();
        for n in 1..=100 {
            let name = if n == 1 {
                first.clone()
            } else {
                format!("{first}-{n}")
            };
            match b.create_dir(&name, 0o700) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                other => {
                    *run_id = name;
                    return other;
                }
            }
        }
        Err(std::io::ErrorKind::AlreadyExists.into())
    });
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => {
            say!(
                "warning: cannot keep the pre-run copies in {}: {e}",
                Tilde(base)
            );
            return saved;
        }
    };
    let mut entries = Vec::new();
    for (n, c) in changes.iter().enumerate() {
        let Some(at) = looker.location(&c.path) else {
            continue;
        };
        let was = match &c.was {
            State::Absent => Was::Absent,
            State::Directory { mode, .. } => Was::Directory { mode: *mode },
            State::Symlink(t) => Was::Symlink {
                target: hex(t.as_os_str().as_bytes()),
            },
            State::File {
                content: Some(bytes),
                mode,
                ..
            } => {
                let copy = format!("{n}.copy");
                if dir.write_new(&copy, bytes, 0o600).is_err() {
                    continue;
                }
                Was::File {
                    copy,
                    mode: *mode,
                    sha256: sha256(bytes),
                }
            }
            // Too large to copy, or not something Sandy can put back.
            State::File { content: None, .. } | State::Other(_) | State::Moved(_) => continue,
        };
        entries.push(RecordEntry {
            path: hex(c.path.as_os_str().as_bytes()),
            at: hex(at.as_os_str().as_bytes()),
            was,
        });
        saved.insert(c.path.clone());
    }
    let record = Record {
        version: RECORD_VERSION,
        entries,
    };
    let written = serde_json::to_vec(&record)
        .map_err(std::io::Error::other)
        .and_then(|bytes| dir.write_new(RECORD_FILE, &bytes, 0o600));
    if let Err(e) = written {
        say!(
            "warning: cannot keep the pre-run copies in {}: {e}",
            Shown(&base.join(run_id))
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

/// What the run made of git repositories, found after it ([`find_new_repositories`]) and
/// named once its pre-run copies are saved ([`report_new_repositories`]).
struct NewRepositories {
    /// Lines to print, each with the path whose restore hint it ends with, if any.
    lines: Vec<(String, Option<PathBuf>)>,
    /// New `.git` entries: each saved as absent, which `sandy restore` takes away.
    removable: Vec<PathBuf>,
    new_git_dirs: Vec<PathBuf>,
    new_tops: Vec<PathBuf>,
}

/// New `.git` entries, linked worktrees and submodule git directories, and directories
/// git now takes as git directories themselves. `reported` holds the paths already
/// named.
fn find_new_repositories(snapshot: &Snapshot, reported: &mut BTreeSet<PathBuf>) -> NewRepositories {
    // Made only when needed: finding git looks along PATH.
    let git = std::cell::OnceCell::new();
    let git = || git.get_or_init(|| gitscan::Git::new(&snapshot.env));
    let mut new_git_dirs: Vec<PathBuf> = Vec::new();
    let mut new_tops: Vec<PathBuf> = Vec::new();
    let mut lines: Vec<(String, Option<PathBuf>)> = Vec::new();
    let mut removable = Vec::new();
    // Every line of this search is printed after the run's changes, in its order.
    macro_rules! line {
        ($($arg:tt)*) => { lines.push((format!($($arg)*), None)) };
    }
    for root in &snapshot.roots {
        let record = snapshot.walked.iter().find(|w| w.root() == root.as_path());
        let again = match record {
            Some(record) => walk::walk_again(record, WALK_MAX).map(|(again, now)| {
                // Kept for the next launch, whose walk then reads only what changes
                // until then.
                if let Some(state) = &snapshot.sandy_state {
                    walk::keep(state, &now);
                }
                again
            }),
            None => gitscan::find_dotgits(root, WALK_MAX).map(|found| walk::Walked {
                found,
                ..walk::Walked::default()
            }),
        };
        let Ok(again) = again else {
            line!(
                "warning: {} is too large to check for git repositories created \
                 inside the sandbox; review any before running git there",
                root.display()
            );
            continue;
        };
        let before = record.map(walk::Record::unlisted).unwrap_or_default();
        for dir in again.unlisted.iter().filter(|d| !before.contains(d)) {
            line!(
                "warning: {} can be passed through but not listed (its permissions \
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
            line!(
                "warning: {} holds an agent's launch configuration made inside the \
                 sandbox ({}), which an agent started there would load: review it before \
                 starting one there",
                dir.display(),
                names.join(", ")
            );
        }
        let before = record.map(walk::Record::unsearchable).unwrap_or_default();
        for dir in again.unsearchable.iter().filter(|d| !before.contains(d)) {
            line!(
                "warning: {} cannot be looked into (its permissions were changed \
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
                    line!(
                        "warning: {} was made a git repository inside the sandbox \
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
                lines.push((
                    format!(
                        "warning: {} did not exist at launch and was created inside the \
                         sandbox; review it before running git there",
                        dotgit.display()
                    ),
                    Some(dotgit.clone()),
                ));
            }
            removable.push(dotgit.clone());
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
    NewRepositories {
        lines,
        removable,
        new_git_dirs,
        new_tops,
    }
}

/// Names what [`find_new_repositories`] found, each line naming the run to restore when
/// `hint` does, then every code-running setting of each new git directory's
/// configuration and every hook it holds.
fn report_new_repositories(
    snapshot: &Snapshot,
    looker: &mut Looker<'_>,
    new: NewRepositories,
    hint: &dyn Fn(&Path) -> String,
) {
    let git = std::cell::OnceCell::new();
    let git = || git.get_or_init(|| gitscan::Git::new(&snapshot.env));
    for (line, path) in &new.lines {
        let hint = path.as_deref().map(hint).unwrap_or_default();
        say!("{line}{hint}");
    }
    let NewRepositories {
        mut new_git_dirs,
        new_tops,
        ..
    } = new;

    new_git_dirs.sort();
    new_git_dirs.dedup();
    for dir in new_git_dirs {
        report_in_progress(looker, &dir, &[]);
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
                say!(
                    "warning: {} was created inside the sandbox and points git at \
                     another repository (commondir); review it before running git there",
                    dir.display()
                );
            }
            report_settings(looker, git(), &dir.join("config.worktree"));
            continue;
        }
        for file in ["config", "config.worktree"] {
            report_settings(looker, git(), &dir.join(file));
        }
        report_hooks(looker, &dir.join("hooks"));
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
            report_hooks(looker, &hooks);
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
fn report_hooks(looker: &mut Looker<'_>, hooks: &Path) {
    if let State::Symlink(target) = looker.state_of(hooks) {
        say!(
            "warning: {} is a symbolic link to {}, made inside the sandbox; git \
             outside would run the hooks it finds there: review it first",
            hooks.display(),
            target.display()
        );
    }
    for hook in looker.entries(hooks) {
        let sample = hook.extension() == Some(OsStr::new("sample"));
        if !sample && !matches!(looker.state_of(&hook), State::Directory { .. }) {
            say!(
                "warning: {} is a git hook created inside the sandbox; git \
                 outside would run it: review it first",
                hook.display()
            );
        }
    }
}

/// Names every code-running setting of one configuration file (read by git, includes
/// not followed).
fn report_settings(looker: &mut Looker<'_>, git: &gitscan::Git, file: &Path) {
    if !matches!(looker.state_of(file), State::File { .. }) {
        return;
    }
    for (key, value) in git.config_entries(file) {
        if gitscan::runs_code(&key, &value) {
            say!(
                "warning: {} sets {key} = {}, which makes git run a command; it was \
                 created inside the sandbox: review it before running git there",
                file.display(),
                String::from_utf8_lossy(&value)
            );
        }
    }
}

/// A run whose pre-run copies are kept ([`saved_runs`]).
#[derive(Debug)]
pub struct SavedRun {
    /// The run's id, which [`restore`] takes.
    pub id: OsString,
    /// Each path the run changed, and what restoring it does.
    pub paths: Vec<(PathBuf, &'static str)>,
}

/// What [`restore`] did with one saved path.
#[derive(Debug)]
pub enum Restored {
    /// Put back: the path, where its name led at launch when that differs, and what was
    /// done.
    Put {
        /// The path as the run saw it.
        path: PathBuf,
        /// Where its name led at launch (the same path when no link was on the way).
        at: PathBuf,
        /// What was done (`file put back`, `removed`, ...).
        what: &'static str,
    },
    /// Not put back, and why.
    Failed {
        /// The path.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A saved entry is damaged and was skipped.
    Damaged,
    /// Every path is back, but the run's copies could not be removed: it stays listed.
    NotRemoved,
}

/// Where Sandy keeps the pre-run copies (`~/.local/state/sandy/restore`).
fn restore_base() -> Result<(PathBuf, Option<Dir>), crate::error::SandyError> {
    use crate::error::SandyError;
    let host = crate::host::gather_without_git()?;
    let Some(home) = host.home.as_deref() else {
        return Err(SandyError::Io {
            step: "cannot find Sandy's state directory (set HOME or XDG_STATE_HOME)",
            source: std::io::ErrorKind::NotFound.into(),
        });
    };
    let base_path = sandy_state_dir(home, &host).join(RESTORE_DIR);
    match Dir::open(&base_path) {
        Ok(base) => Ok((base_path, Some(base))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((base_path, None)),
        Err(source) => Err(SandyError::File {
            step: "cannot open the pre-run copies in",
            path: base_path,
            source,
        }),
    }
}

/// `sandy restore` without a run: the runs whose pre-run copies are kept, by id, each
/// with the paths it changed.
pub fn saved_runs() -> Result<Vec<SavedRun>, crate::error::SandyError> {
    let (_, base) = restore_base()?;
    let mut runs: Vec<OsString> = base
        .as_ref()
        .and_then(|b| b.entries(crate::hostfs::MAX_ENTRIES).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind == Kind::Directory)
        .map(|e| e.name)
        .collect();
    runs.sort();
    let mut saved = Vec::new();
    for id in runs {
        let Some(record) = base.as_ref().and_then(|b| read_record(b, &id).ok()) else {
            continue;
        };
        let mut paths: Vec<(Vec<u8>, &'static str)> = record
            .entries
            .iter()
            .filter_map(|e| Some((unhex(&e.path)?, e.was.undo())))
            .collect();
        if paths.is_empty() {
            continue;
        }
        paths.sort_by(|a, b| a.0.cmp(&b.0));
        saved.push(SavedRun {
            id,
            paths: paths
                .into_iter()
                .map(|(p, undo)| (PathBuf::from(OsString::from_vec(p)), undo))
                .collect(),
        });
    }
    Ok(saved)
}

/// `sandy restore RUN`: puts every saved path of that run back, each at the exact place
/// its name led to at launch, reached with no link on the way, and only from a copy
/// whose digest matches; `each` hears of every path. When every path is back, the run's
/// copies are removed: it is no longer pending. Returns 0, or 1 when a path could not be
/// put back.
pub fn restore(run: &str, each: &mut dyn FnMut(Restored)) -> Result<u8, crate::error::SandyError> {
    restore_only(run, None, each)
}

/// [`restore`]; `only`: right after the run, only what lies at or below one of these
/// paths.
fn restore_only(
    run: &str,
    only: Option<&[PathBuf]>,
    each: &mut dyn FnMut(Restored),
) -> Result<u8, crate::error::SandyError> {
    use crate::error::SandyError;
    let (base_path, base) = restore_base()?;
    let not_a_run = |source: std::io::Error| SandyError::File {
        step: "cannot restore run",
        path: PathBuf::from(run),
        source: if source.kind() == std::io::ErrorKind::NotFound {
            std::io::Error::other("no such run is kept (`sandy restore` lists the runs kept)")
        } else {
            source
        },
    };
    let base = base.ok_or_else(|| not_a_run(std::io::ErrorKind::NotFound.into()))?;
    let record = read_record(&base, OsStr::new(run)).map_err(not_a_run)?;
    let copies = base.open_dir(run).map_err(not_a_run)?;
    let mut failed = 0u8;
    let mut left = false;
    // The deepest first: what a directory the run created holds is put back (removed)
    // before the directory, which is then removed too when nothing else is in it.
    let mut entries: Vec<&RecordEntry> = record.entries.iter().collect();
    entries.sort_by(|a, b| {
        let place = |e: &RecordEntry| unhex(&e.at).map(|at| PathBuf::from(OsString::from_vec(at)));
        place(b).cmp(&place(a))
    });
    for entry in entries {
        let (Some(path), Some(at)) = (unhex(&entry.path), unhex(&entry.at)) else {
            failed = 1;
            each(Restored::Damaged);
            continue;
        };
        let path = PathBuf::from(OsStr::from_bytes(&path));
        let at = PathBuf::from(OsStr::from_bytes(&at));
        if let Some(only) = only {
            if !only.iter().any(|p| path.starts_with(p)) {
                left = true;
                continue;
            }
        }
        match put_back(&copies, &at, &entry.was) {
            Ok(what) => each(Restored::Put { path, at, what }),
            Err(error) => {
                failed = 1;
                each(Restored::Failed { path, error });
            }
        }
    }
    // Every path is back: the run is no longer pending, and its copies go.
    if failed == 0 && !left {
        drop(copies);
        if base.remove_tree(run, &|| false).is_err() {
            each(Restored::NotRemoved);
        }
        // The last run restored: Sandy's directory of copies goes too, and its state
        // directory when nothing else is kept there (each only if empty).
        drop(base);
        let state = base_path.parent();
        for path in [Some(base_path.as_path()), state].into_iter().flatten() {
            if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
                if let Ok(parent) = Dir::open_exact(parent) {
                    let _ = parent.remove_dir(name);
                }
            }
        }
    }
    Ok(failed)
}

/// The record of run `id` in the directory of pre-run copies.
fn read_record(base: &Dir, id: &OsStr) -> std::io::Result<Record> {
    let dir = base.open_dir(id)?;
    let bytes = dir
        .read(RECORD_FILE, MAX_RECORD)?
        .ok_or_else(|| std::io::Error::other("its record is not a regular file, or too large"))?;
    let record: Record = serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if record.version != RECORD_VERSION {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "its record has version {}, not {RECORD_VERSION}",
                record.version
            ),
        ));
    }
    Ok(record)
}

/// Puts one saved path back at `at`: its directory opened with no link on the way, the
/// entry changed through that handle.
fn put_back(copies: &Dir, at: &Path, was: &Was) -> std::io::Result<&'static str> {
    let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
        return Err(std::io::Error::other("not a path Sandy saved"));
    };
    let dir = match Dir::open_exact(parent) {
        // Gone with its directory (one moved aside before it): nothing to remove.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && matches!(was, Was::Absent) => {
            return Ok("gone: it did not exist before the run");
        }
        other => other,
    };
    let dir = dir.map_err(|e| {
        let moved = [nix::libc::ELOOP, nix::libc::ENOTDIR].contains(&e.raw_os_error().unwrap_or(0));
        if moved {
            std::io::Error::other(format!(
                "a symbolic link or a file is on the way to {} now (made during the run?); \
                 remove it, then run `sandy restore` again",
                Shown(parent)
            ))
        } else {
            e
        }
    })?;
    let now = dir.entry(name)?;
    let is_dir = now.is_some_and(|st| st.kind == Kind::Directory);
    match was {
        Was::Absent => {
            if is_dir {
                // A directory the run created is removed when empty; one that holds more
                // than Sandy recorded is moved aside, never deleted.
                match dir.remove_dir(name) {
                    Ok(()) => return Ok("removed: it did not exist before the run"),
                    Err(e) if e.raw_os_error() != Some(nix::libc::ENOTEMPTY) => return Err(e),
                    Err(_) => {}
                }
                let mut aside = name.to_os_string();
                aside.push(".sandy-removed");
                dir.rename_noreplace(name, &dir, &aside)?;
                return Ok(if name == ".git" {
                    "moved aside to .git.sandy-removed: it did not exist before the run, \
                     and git no longer takes it as this tree's repository"
                } else {
                    "moved aside to *.sandy-removed: it did not exist before the run"
                });
            }
            dir.remove_entry(name)?;
            Ok("removed: it did not exist before the run")
        }
        Was::Directory { mode } => {
            if !is_dir {
                dir.remove_entry(name)?;
                dir.create_dir(name, *mode)?;
            } else {
                dir.set_dir_mode(name, *mode)?;
            }
            Ok("directory")
        }
        Was::Symlink { target } => {
            let target = unhex(target).ok_or(std::io::ErrorKind::InvalidData)?;
            dir.remove_entry(name)?;
            dir.symlink(Path::new(OsStr::from_bytes(&target)), name)?;
            Ok("symlink")
        }
        Was::File {
            copy,
            mode,
            sha256: digest,
        } => {
            let bytes = copies.read(copy, COPY_MAX)?.ok_or_else(|| {
                std::io::Error::other("the saved copy is not a regular file, or too large")
            })?;
            if sha256(&bytes) != *digest {
                return Err(std::io::Error::other(
                    "the saved copy does not match its digest; not used",
                ));
            }
            if is_dir {
                dir.remove_dir(name)?;
            }
            dir.replace(name, &bytes, *mode, None)?;
            Ok("file")
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    #[test]
    fn a_directory_put_in_the_place_of_another_is_a_change() {
        let a = State::Directory {
            mode: 0o755,
            ino: 1,
        };
        assert!(!a.differs(&State::Directory {
            mode: 0o755,
            ino: 1
        }));
        assert!(a.differs(&State::Directory {
            mode: 0o755,
            ino: 2
        }));
        assert!(a.differs(&State::Directory {
            mode: 0o700,
            ino: 1
        }));
    }

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
        assert!(matches!(
            Looker::recording().state_of(&fifo),
            State::Other("a FIFO")
        ));
    }

    /// A path whose directory's name leads elsewhere after the run (a link a run made on
    /// the way) is reported as such, never looked at through the link; one whose way is
    /// unchanged is looked at where it was.
    #[test]
    fn a_link_put_on_the_way_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let project = t.path().join("project");
        let home = t.path().join("home");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(home.join(".claude/settings.json"), "{}").unwrap();
        let planted = project.join(".claude/settings.json");
        let mut looker = Looker::recording();
        assert_eq!(looker.state_of(&planted), State::Absent);
        let ways = looker.ways;
        std::os::unix::fs::symlink(home.join(".claude"), project.join(".claude")).unwrap();
        let mut after = Looker::after(&ways);
        let now = after.state_of(&planted);
        assert!(
            matches!(&now, State::Moved(why) if why.contains("symbolic link")),
            "{now:?}"
        );
        // Where the name led at launch: the project, never the home.
        assert_eq!(after.location(&planted), Some(planted.clone()));
        // And restoring "absent" there refuses, leaving the home's file.
        let copies = Dir::open(t.path()).unwrap();
        assert!(put_back(&copies, &planted, &Was::Absent).is_err());
        assert!(home.join(".claude/settings.json").exists());
    }

    #[test]
    fn a_saved_copy_that_does_not_match_its_digest_is_not_used() {
        let t = tempfile::tempdir().unwrap();
        let copies = Dir::open(t.path()).unwrap();
        copies.write_new("0.copy", b"planted", 0o600).unwrap();
        let target = t.path().join("target");
        std::fs::write(&target, "now").unwrap();
        let was = Was::File {
            copy: "0.copy".into(),
            mode: 0o600,
            sha256: sha256(b"original"),
        };
        assert!(put_back(&copies, &target, &was).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"now");
        let was = Was::File {
            copy: "0.copy".into(),
            mode: 0o644,
            sha256: sha256(b"planted"),
        };
        put_back(&copies, &target, &was).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"planted");
    }

    #[test]
    fn a_run_is_named_by_its_time_and_project() {
        for (project, tail) in [
            ("/home/u/my project", "-my_project"),
            ("/home/u/.hidden", "-run.hidden"),
            ("/", "-run"),
        ] {
            let id = run_id(Path::new(project));
            let (date, rest) = id.split_at(15);
            assert!(
                date.bytes().enumerate().all(|(i, b)| if i == 8 {
                    b == b'-'
                } else {
                    b.is_ascii_digit()
                }),
                "{id}"
            );
            assert_eq!(rest, tail, "{id}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_792), (2026, 12, 5));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(b"/a b\n")), Some(b"/a b\n".to_vec()));
    }
}
