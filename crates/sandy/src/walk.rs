//! The walk for `.git` entries through a tree, before the run and again after it, and
//! for the directories git could take as git directories themselves (a bare repository:
//! git's discovery looks for `.git` in each directory and then asks whether the
//! directory itself is one, which needs a `HEAD` in it).
//!
//! Before the run every directory is looked at ([`walk`]): `lstat` relative to its
//! parent's descriptor, then, if it has subdirectories, opened there (`O_NOFOLLOW`: a
//! directory swapped for a symbolic link after it was listed is not followed out of the
//! tree) and listed with `getdents64` into one buffer large enough for most directories
//! in one call. A directory without subdirectories (its link count is 2, on a file
//! system that keeps that count: ext2/3/4, XFS, tmpfs) is not listed where lookups by
//! name cost less, as find(1)'s leaf optimisation does: in installed packages
//! (`node_modules`, `site-packages`, ...) an `lstat` of its `.git` and one of its `HEAD`
//! tell all the walk needs; elsewhere an agent's launch file (`.mcp.json`) or a link
//! named like an agent's directory may be in it too, so a small one is listed and a
//! large one is asked for each of those names. What the walk saw of each directory is kept in a [`Record`]: its names of
//! subdirectories, its `.git` and whether it holds a `HEAD`, and its identity (device, inode, change and modification times, link count)
//! as the first `lstat` gave it, *before* it was read.
//!
//! After the run ([`walk_again`]) a directory whose identity is unchanged is not read
//! again: one `lstat` by path stands in for reading it. That is sound
//! because the kernel updates a directory's change time (`ctime`) whenever a name in it
//! is created, removed or renamed, and nothing a process can do sets a change time back
//! (`utimensat` sets the modification time, and that sets the change time to now). Two
//! conditions keep it sound where timestamps are coarse or not the kernel's own:
//!
//! - A directory changed within [`MARGIN_NS`] of the first walk's start is always read
//!   again: a later change could carry the same coarse timestamp.
//! - Only directories on local file systems whose times the kernel keeps itself (ext2/3/4,
//!   XFS, Btrfs, tmpfs) are taken on trust; on any other (NFS, FUSE, overlayfs, ...) every
//!   directory is read again, as is one that could not be opened or whose listing failed.
//!
//! Every directory is still looked at: an unchanged parent says nothing about its
//! children, each of which is compared on its own. A directory that is new, or whose
//! name now holds something else, is read, and so is all that is new below it. An
//! unchanged directory with subdirectories is opened without being read (`O_PATH`, and
//! only if what was opened is what was looked at), so that each child costs one lookup
//! of its own name.
//!
//! **On several threads**: past the first few levels, the subtrees below are walked by
//! one thread per processor (at most [`MAX_THREADS`]), each taking the next subtree when
//! it is done with one; what each recorded is put in its place afterwards. Every
//! directory is still looked at exactly as on one thread; only the order differs.
//!
//! **Between launches** ([`keep`], [`recall`]): the walk after a run keeps its record in
//! Sandy's state directory, which no run can reach, and the next launch's walk compares
//! each directory with it in the same way, instead of reading the whole tree. Nothing
//! changes in that argument but the time between the two walks, in which the user (or
//! another run) may change anything:
//!
//! - A repository made since, at any depth, adds a name to some directory, which changes
//!   that directory's change time: it is read, and what is new below it is walked.
//! - A directory renamed or moved changes the change times of both parents (and its
//!   own): the new name is read as new, with everything below it; a `.git` that appears
//!   through the rename of its parent is found so.
//! - Change times come from the wall clock. The record holds the boot it was made in and
//!   the wall and boot clocks when its walk started; it is used only in the same boot
//!   (the file system could have been changed elsewhere while the machine was off) and
//!   only if the wall clock has not been set back by more than [`MARGIN_NS`] since (a
//!   directory is trusted only when it changed more than that before the walk started,
//!   so a later change cannot carry its time). Setting the clock needs a privilege no run
//!   has. What is left: a clock set back and then forward again between two launches,
//!   with a change in exactly the clock tick of the directory's last one.
//! - The record is read bounded and used only whole and as a tree (every directory the
//!   subdirectory of exactly one before it); otherwise every directory is read.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::ffi::{CString, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{openat, statat, AtFlags, FileType, Mode, OFlags, RawDir, Stat, CWD};

use crate::gitscan::{DotGit, DotGitKind, GitScanError};

/// Names through which an agent started in a directory loads launch configuration from
/// it (the profiles' project-level files and directories): a directory holding one is
/// where an agent may be started later (a package of a monorepo).
pub const AGENT_MARKERS: &[&[u8]] = &[
    b".claude",
    b".codex",
    b".gemini",
    b".opencode",
    b".mcp.json",
    b"opencode.json",
    b"opencode.jsonc",
];

/// Directories of installed packages, where no agent is started: a package that ships
/// its authors' `.claude/` is not a place to protect (an install must be able to
/// replace it).
const PACKAGE_DIRS: &[&str] = &["node_modules", "site-packages", "dist-packages", ".venv"];

/// Whether a directory of this name holds installed packages ([`PACKAGE_DIRS`]).
fn is_package_dir(name: &[u8]) -> bool {
    PACKAGE_DIRS.iter().any(|p| p.as_bytes() == name)
}

/// Whether `dir` lies in a directory of installed packages ([`PACKAGE_DIRS`]).
pub fn in_package_dir(dir: &Path) -> bool {
    dir.components()
        .any(|c| PACKAGE_DIRS.iter().any(|p| c.as_os_str() == OsStr::new(p)))
}

/// The most threads a walk uses.
const MAX_THREADS: usize = 8;
/// How many subtrees a walk on several threads wants for each thread before it shares
/// them out (a thread that finishes early takes another).
const TASKS_PER_THREAD: usize = 16;
/// The listing buffer: a directory of a few hundred entries is read in one call.
const BUFFER: usize = 32 * 1024;
/// A directory without subdirectories outside installed packages is listed when its
/// size (ext4: its blocks' bytes; tmpfs: about 20 bytes an entry) is at most this: one
/// `getdents64` of its few entries costs less than nine lookups by name (BENCHMARKS.md).
const LEAF_LISTED_BYTES: i64 = 4096;
/// A directory changed this close to the first walk's start (or later) is read again
/// after the run, whatever its times say: file times come from a clock that may lag the
/// system clock by a tick, and a change in the same tick could leave them as they were.
const MARGIN_NS: i64 = 1_000_000_000;
/// File systems whose directory times the kernel keeps itself (`statfs` magic numbers):
/// ext2, ext3 and ext4; XFS; Btrfs; tmpfs.
const TRUSTED_FS: [i128; 4] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994];

/// What identifies a directory's state: any name created, removed or renamed in it
/// changes its change time (and modification time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    nlink: u64,
    ctime_ns: i64,
    mtime_ns: i64,
}

impl Identity {
    // `struct stat`'s field types vary by architecture.
    #[allow(clippy::useless_conversion)]
    fn of(st: &Stat) -> Identity {
        // Nanoseconds since the epoch; a time beyond what 64 bits hold (past 2262) reads
        // as the largest, which is never old enough to be taken on trust.
        let ns = |s: i128, n: i128| i64::try_from(s * 1_000_000_000 + n).unwrap_or(i64::MAX);
        Identity {
            dev: device(st),
            ino: u64::from(st.st_ino),
            nlink: u64::from(st.st_nlink),
            ctime_ns: ns(i128::from(st.st_ctime), i128::from(st.st_ctime_nsec)),
            mtime_ns: ns(i128::from(st.st_mtime), i128::from(st.st_mtime_nsec)),
        }
    }
}

/// One directory the first walk reached (no allocation of its own: a record of 20,000
/// directories takes about 1.5 MiB).
#[derive(Debug)]
struct Seen {
    /// Its name in its parent, as a range of [`Record::names`] (empty for the root).
    name: (u32, u32),
    /// Its identity, when it may be taken on trust after the run (see the module's
    /// documentation); `None`: read it again.
    identity: Option<Identity>,
    /// Its subdirectories: `count` entries of [`Record::dirs`] from `first` on (the
    /// walk records a directory's subdirectories together).
    first: u32,
    count: u32,
    /// Its `.git` entry.
    dotgit: Option<DotGitKind>,
    /// Whether it holds a `HEAD` that is not a directory.
    head: bool,
    /// Whether it holds one of [`AGENT_MARKERS`].
    agent: bool,
}

/// What the walk before the run saw of one tree, for [`walk_again`].
#[derive(Debug)]
pub struct Record {
    root: PathBuf,
    /// `dirs[0]` is the root.
    dirs: Vec<Seen>,
    /// The directories' names, one after the other.
    names: Vec<u8>,
    /// Directories git could enter but the walk could not list (see [`Walked`]).
    unlisted: Vec<PathBuf>,
    /// Directories nothing could look into (see [`Walked`]).
    unsearchable: Vec<PathBuf>,
    /// Directories holding an agent's project-level launch files (see [`Walked`]).
    agent_dirs: Vec<PathBuf>,
    /// The clocks when the walk started (see [`Clock`]).
    clock: Clock,
    /// Whether this is what Sandy's state directory keeps already ([`keep`]).
    kept: bool,
}

/// What a walk found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Walked {
    /// Every `.git` entry and every directory holding a `HEAD`.
    pub found: Vec<DotGit>,
    /// Directories that can be searched but not read (mode `--x` for the caller): git
    /// passes through them, the walk cannot list them. Their own `.git` and `HEAD` are
    /// looked up by name, but what lies deeper is unknown.
    pub unlisted: Vec<PathBuf>,
    /// Directories that cannot be looked into at all (mode `000`, or below a directory
    /// of mode `r--`): git cannot use what they hold now, but could once their mode is
    /// changed back.
    pub unsearchable: Vec<PathBuf>,
    /// Directories holding one of an agent's project-level launch names (`.claude/`,
    /// `.mcp.json`, ...; [`AGENT_MARKERS`]), as their listing shows them: a directory
    /// without subdirectories is not listed, so only the directories among them are
    /// sure to be seen there.
    pub agent_dirs: Vec<PathBuf>,
}

impl Record {
    /// The tree this record is of.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directories the walk could not list (see [`Walked::unlisted`]).
    pub fn unlisted(&self) -> &[PathBuf] {
        &self.unlisted
    }

    /// The directories nothing could look into (see [`Walked::unsearchable`]).
    pub fn unsearchable(&self) -> &[PathBuf] {
        &self.unsearchable
    }

    /// The directories holding an agent's launch names (see [`Walked::agent_dirs`]).
    pub fn agent_dirs(&self) -> &[PathBuf] {
        &self.agent_dirs
    }

    fn name(&self, seen: &Seen) -> &[u8] {
        let (at, len) = (seen.name.0 as usize, seen.name.1 as usize);
        self.names.get(at..at + len).unwrap_or_default()
    }

    /// The subdirectories of `seen`, with their indices.
    fn subdirs<'a>(&'a self, seen: &Seen) -> impl Iterator<Item = (u32, &'a Seen)> + 'a {
        let first = seen.first;
        let end = first.saturating_add(seen.count);
        (first..end).filter_map(move |i| Some((i, self.dirs.get(i as usize)?)))
    }
}

/// A directory still to look at.
struct Pending {
    /// Its parent, when the parent was opened (kept open while any child is pending, so
    /// that the open descriptors stay as many as the tree is deep).
    parent: Option<Arc<OwnedFd>>,
    name: CString,
    path: PathBuf,
    /// Its index in the record being made (`None`: left out of it, see [`traverse`]).
    index: Option<u32>,
    /// Its index in the earlier record ([`walk_again`]; `None` when the earlier walk did
    /// not see it).
    earlier: Option<u32>,
    /// The parent's device and whether its file system is trusted (the root's are found).
    parent_fs: Option<(u64, bool)>,
    /// Whether it lies in a directory of installed packages ([`PACKAGE_DIRS`]).
    packages: bool,
}

/// What one directory holds, as far as the walk cares.
struct Listing {
    dotgit: Option<DotGitKind>,
    /// A `HEAD` that is not a directory: git may take the directory as a git directory.
    head: bool,
    /// One of [`AGENT_MARKERS`].
    agent: bool,
    subdirs: Vec<CString>,
    /// Whether the whole directory was read.
    complete: bool,
}

/// Every `.git` entry at or below `root`, and every directory there holding a `HEAD` (see
/// [`crate::gitscan::find_dotgits`]), with the record of what was seen, for
/// [`walk_again`] after the run.
pub fn walk(root: &Path, limit: usize) -> Result<(Vec<DotGit>, Record), GitScanError> {
    let (walked, record) = traverse(root, limit, None)?;
    Ok((walked.found, record))
}

/// Every `.git` entry and `HEAD` at or below `before`'s root now, exactly as [`walk`]
/// would find them, reading only the directories that changed since `before` was made;
/// with the record of the tree as it is now (for the next walk).
pub fn walk_again(before: &Record, limit: usize) -> Result<(Walked, Record), GitScanError> {
    traverse(&before.root, limit, Some(before))
}

/// The walk: every directory is looked at and recorded; with `before`, one unchanged
/// since `before` was made is taken from it rather than read.
fn traverse(
    root: &Path,
    limit: usize,
    before: Option<&Record>,
) -> Result<(Walked, Record), GitScanError> {
    let threads = threads();
    traverse_with(root, limit, before, threads, threads * TASKS_PER_THREAD)
}

/// How many threads a walk uses: one per processor it may run on, at most
/// [`MAX_THREADS`] (a CPU quota is not looked for: it costs more than it would decide).
fn threads() -> usize {
    sandy_linux::namespaces::usable_cpus().min(MAX_THREADS)
}

/// [`traverse`] on `threads` threads. The walk goes breadth first from the root until
/// `split` directories are pending ([`TASKS_PER_THREAD`] for each thread; a small tree
/// is done by then); then each pending directory's subtree is one task, taken by whichever
/// thread is free, walked depth first, and its part of the record is put in its place
/// afterwards. The record's only rule of order (a directory's subdirectories together,
/// after it) holds either way.
fn traverse_with(
    root: &Path,
    limit: usize,
    before: Option<&Record>,
    threads: usize,
    split: usize,
) -> Result<(Walked, Record), GitScanError> {
    let clock = Clock::now();
    let visited = AtomicUsize::new(0);
    let shared = Shared {
        root,
        limit,
        before,
        started: now_ns(),
        visited: &visited,
    };
    let mut main = Walker::new(&shared);
    let mut queue = VecDeque::from([Pending {
        parent: None,
        name: CString::default(),
        path: root.to_path_buf(),
        index: Some(0),
        earlier: Some(0),
        parent_fs: None,
        packages: in_package_dir(root),
    }]);
    let mut next = Vec::new();
    loop {
        // One thread: depth first throughout (as few directories open as the tree is
        // deep). More: breadth first until there is work to share.
        let pending = if threads > 1 {
            if queue.len() >= split {
                break;
            }
            queue.pop_front()
        } else {
            queue.pop_back()
        };
        let Some(pending) = pending else {
            break;
        };
        main.step(pending, &mut next)?;
        queue.extend(next.drain(..));
    }
    if !queue.is_empty() {
        let tasks = Mutex::new(queue);
        let done = Mutex::new(Vec::new());
        let failed = Mutex::new(None);
        // Each thread takes the next subtree until none is left. The calling thread is
        // one of them: if no other thread can be started (a process limit), it walks
        // every subtree itself.
        let work = || {
            let mut worker = Walker::new(&shared);
            let mut stack = Vec::new();
            loop {
                let task = tasks.lock().ok().and_then(|mut t| t.pop_front());
                let Some(task) = task else {
                    break;
                };
                let at = task.index;
                let mut local = task;
                local.index = Some(0);
                worker.begin();
                stack.push(local);
                while let Some(pending) = stack.pop() {
                    if let Err(e) = worker.step(pending, &mut stack) {
                        if let Ok(mut f) = failed.lock() {
                            f.get_or_insert(e);
                        }
                        // Every other thread stops at its next directory.
                        shared.visited.store(shared.limit, Ordering::Relaxed);
                        return;
                    }
                }
                let part = worker.part();
                if let Ok(mut d) = done.lock() {
                    d.push((at, part));
                }
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads {
                let _ = std::thread::Builder::new()
                    .name("walk".to_owned())
                    .spawn_scoped(scope, work);
            }
            work();
        });
        if let Some(e) = failed.into_inner().ok().flatten() {
            return Err(e);
        }
        for (at, part) in done.into_inner().unwrap_or_default() {
            main.graft(at, part);
        }
    }
    Ok(main.finish(clock))
}

/// What every thread of one walk shares.
struct Shared<'a> {
    root: &'a Path,
    limit: usize,
    before: Option<&'a Record>,
    /// When the walk started (see [`MARGIN_NS`]).
    started: i64,
    /// Directories looked at so far, by every thread ([`usize::MAX`]: a thread failed).
    visited: &'a AtomicUsize,
}

/// One thread's walk, and what it found and recorded.
struct Walker<'a> {
    shared: &'a Shared<'a>,
    buf: Vec<MaybeUninit<u8>>,
    /// The record being made: `dirs[0]` is the directory the walk (or the task) started
    /// at.
    dirs: Vec<Seen>,
    names: Vec<u8>,
    read: usize,
    out: Vec<DotGit>,
    unlisted: Vec<PathBuf>,
    unsearchable: Vec<PathBuf>,
    agent_dirs: Vec<PathBuf>,
}

/// What one task (a subtree) found and recorded, with the subtree's top as `dirs[0]`.
struct Part {
    dirs: Vec<Seen>,
    names: Vec<u8>,
    read: usize,
    out: Vec<DotGit>,
    unlisted: Vec<PathBuf>,
    unsearchable: Vec<PathBuf>,
    agent_dirs: Vec<PathBuf>,
}

impl<'a> Walker<'a> {
    fn new(shared: &'a Shared<'a>) -> Walker<'a> {
        Walker {
            shared,
            buf: vec![MaybeUninit::<u8>::uninit(); BUFFER],
            dirs: vec![Seen::named((0, 0))],
            names: Vec::new(),
            read: 0,
            out: Vec::new(),
            unlisted: Vec::new(),
            unsearchable: Vec::new(),
            agent_dirs: Vec::new(),
        }
    }

    /// Starts a task: a record of its own, whose `dirs[0]` is the task's directory.
    fn begin(&mut self) {
        self.dirs = vec![Seen::named((0, 0))];
        self.names = Vec::new();
    }

    /// What the task just walked found and recorded.
    fn part(&mut self) -> Part {
        Part {
            dirs: std::mem::take(&mut self.dirs),
            names: std::mem::take(&mut self.names),
            read: std::mem::take(&mut self.read),
            out: std::mem::take(&mut self.out),
            unlisted: std::mem::take(&mut self.unlisted),
            unsearchable: std::mem::take(&mut self.unsearchable),
            agent_dirs: std::mem::take(&mut self.agent_dirs),
        }
    }

    /// Puts a task's part in its place: its top at `at` (where the breadth-first walk
    /// recorded its name; `None`: it has no place, and neither has anything below it),
    /// the rest after everything so far.
    fn graft(&mut self, at: Option<u32>, part: Part) {
        self.read += part.read;
        self.out.extend(part.out);
        self.unlisted.extend(part.unlisted);
        self.unsearchable.extend(part.unsearchable);
        self.agent_dirs.extend(part.agent_dirs);
        let Some(at) = at.map(|i| i as usize).filter(|i| *i < self.dirs.len()) else {
            return;
        };
        let (Ok(offset), Ok(names_at)) = (
            u32::try_from(self.dirs.len()),
            u32::try_from(self.names.len()),
        ) else {
            // Beyond what a record holds: the directory is read again next time.
            self.dirs[at].identity = None;
            return;
        };
        // Indices in the part move by `offset - 1` (its `dirs[0]` is not appended).
        let moved = |mut seen: Seen, name: Option<(u32, u32)>| {
            seen.name = name.unwrap_or((seen.name.0.saturating_add(names_at), seen.name.1));
            if seen.count > 0 {
                seen.first = seen.first.saturating_add(offset - 1);
            }
            seen
        };
        let mut dirs = part.dirs.into_iter();
        if let Some(top) = dirs.next() {
            let name = self.dirs[at].name;
            self.dirs[at] = moved(top, Some(name));
        }
        self.dirs.extend(dirs.map(|seen| moved(seen, None)));
        self.names.extend_from_slice(&part.names);
    }

    fn finish(mut self, clock: Clock) -> (Walked, Record) {
        self.out.sort();
        self.unlisted.sort();
        self.unsearchable.sort();
        self.agent_dirs.sort();
        let record = Record {
            root: self.shared.root.to_path_buf(),
            dirs: self.dirs,
            names: self.names,
            unlisted: self.unlisted.clone(),
            unsearchable: self.unsearchable.clone(),
            agent_dirs: self.agent_dirs.clone(),
            clock,
            kept: self.read == 0 && self.shared.before.is_some_and(|b| b.kept),
        };
        let walked = Walked {
            found: self.out,
            unlisted: self.unlisted,
            unsearchable: self.unsearchable,
            agent_dirs: self.agent_dirs,
        };
        (walked, record)
    }

    /// Looks at one directory, records it, and adds its subdirectories to `next`.
    fn step(&mut self, pending: Pending, next: &mut Vec<Pending>) -> Result<(), GitScanError> {
        let shared = self.shared;
        let visited = shared.visited.fetch_add(1, Ordering::Relaxed);
        if visited >= shared.limit {
            return Err(GitScanError::TooLarge {
                root: shared.root.to_path_buf(),
                limit: shared.limit,
            });
        }
        let at = pending.index.map(|i| i as usize);
        // Looked at before it is read: a change in between shows after the run. A
        // directory that is gone, or that the caller cannot look at, is one the sandbox
        // cannot list either; it stays without an identity, so that the walk after the
        // run tries it again.
        let st = match stat(&pending) {
            Ok(st) => st,
            // Its parent lists it but cannot be searched (mode `r--`): what it is stays
            // unknown, to git as to the walk.
            Err(rustix::io::Errno::ACCESS) => {
                self.unsearchable.push(pending.path.clone());
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Ok(());
        }
        let identity = Identity::of(&st);
        let earlier = shared
            .before
            .and_then(|b| Some((b, b.dirs.get(pending.earlier? as usize)?)));
        if let Some((b, seen)) = earlier.filter(|(_, seen)| seen.identity == Some(identity)) {
            // Its subdirectories are looked at relative to it (one name each to look up,
            // not their whole path): it is opened without reading (`O_PATH`), and only
            // if what was opened is what was looked at.
            let handle = match seen.count {
                0 => Some(None),
                _ => handle(&pending)
                    .ok()
                    .filter(|fd| rustix::fs::fstat(fd).is_ok_and(|s| Identity::of(&s) == identity))
                    .map(|fd| Some(Arc::new(fd))),
            };
            // Else it changed in between, and is read below.
            if let Some(handle) = handle {
                // Unchanged since the earlier walk: it holds what it held then.
                found(&mut self.out, &pending.path, seen.dotgit, seen.head);
                if seen.agent {
                    self.agent_dirs.push(pending.path.clone());
                }
                let first = self.dirs.len();
                let mut count = 0u32;
                for (child, c) in b.subdirs(seen) {
                    let name = b.name(c);
                    let Ok(cname) = CString::new(name) else {
                        continue;
                    };
                    let index = record_name(&mut self.dirs, &mut self.names, at, name);
                    count += u32::from(index.is_some());
                    next.push(Pending {
                        parent: handle.clone(),
                        path: pending.path.join(OsStr::from_bytes(name)),
                        packages: pending.packages || is_package_dir(name),
                        name: cname,
                        index,
                        earlier: Some(child),
                        parent_fs: Some((identity.dev, true)),
                    });
                }
                if let Some(at) = at {
                    self.dirs[at] = Seen {
                        name: self.dirs[at].name,
                        identity: Some(identity).filter(|_| count == seen.count),
                        first: u32::try_from(first).unwrap_or(0),
                        count,
                        dotgit: seen.dotgit,
                        head: seen.head,
                        agent: seen.agent,
                    };
                }
                return Ok(());
            }
        }
        self.read += 1;
        // On its parent's file system, trusted as its parent's is; else asked.
        let inherited = pending
            .parent_fs
            .filter(|(dev, _)| *dev == identity.dev)
            .map(|(_, trusted)| trusted);
        // A directory without subdirectories is not listed where a few lookups by name
        // cost less: only its `.git`, its `HEAD` and (outside installed packages) the
        // agents' launch names matter, a link among them included (`.claude` linked to a
        // dotfiles directory). Where the file system keeps that count (ext2/3/4, XFS,
        // tmpfs: a directory's link count is 2 plus its subdirectories; Btrfs says 1), 2
        // means none. In installed packages two lookups always beat a listing; elsewhere
        // nine do only for a large directory (its entries fill more than a block), and
        // a small one is listed.
        let leaf = match inherited {
            Some(true)
                if identity.nlink == 2 && (pending.packages || st.st_size > LEAF_LISTED_BYTES) =>
            {
                leaf_entries(&pending)
            }
            _ => None,
        };
        let (listing, trusted, fd) = match leaf {
            Some((dotgit, head, agent)) => {
                let listing = Listing {
                    dotgit,
                    head,
                    agent,
                    subdirs: Vec::new(),
                    complete: true,
                };
                (listing, true, None)
            }
            None => match open(&pending) {
                Ok(fd) => {
                    let trusted = inherited.unwrap_or_else(|| fs_trusted(&fd));
                    (list(&fd, &mut self.buf), trusted, Some(Arc::new(fd)))
                }
                // Not readable, but perhaps searchable: git can pass through such a
                // directory, so what it holds by name is looked up, and the directory
                // is named as one whose depths are unknown (it has no identity, so the
                // walk after the run tries it again).
                Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => {
                    let Some((dotgit, head, agent)) = leaf_entries(&pending) else {
                        // Not even searchable (mode `000`): git cannot enter it now either.
                        self.unsearchable.push(pending.path.clone());
                        return Ok(());
                    };
                    self.unlisted.push(pending.path.clone());
                    let listing = Listing {
                        dotgit,
                        head,
                        agent,
                        subdirs: Vec::new(),
                        complete: false,
                    };
                    (listing, inherited.unwrap_or(false), None)
                }
                Err(_) => return Ok(()),
            },
        };
        found(&mut self.out, &pending.path, listing.dotgit, listing.head);
        if listing.agent && !pending.packages {
            self.agent_dirs.push(pending.path.clone());
        }
        let fs = Some((identity.dev, trusted));
        // Each subdirectory is matched by name with what the earlier walk saw here, and
        // then compared on its own.
        let known: HashMap<&[u8], u32> = earlier
            .map(|(b, seen)| b.subdirs(seen).map(|(i, c)| (b.name(c), i)).collect())
            .unwrap_or_default();
        // Its subdirectories are recorded together, after everything so far (every
        // directory has its place in the record, bounded well below `u32::MAX` by the
        // walk's limit).
        let first = self.dirs.len();
        let (wanted, mut count) = (listing.subdirs.len(), 0u32);
        for name in listing.subdirs {
            let bytes = name.as_bytes();
            let index = record_name(&mut self.dirs, &mut self.names, at, bytes);
            count += u32::from(index.is_some());
            next.push(Pending {
                parent: fd.clone(),
                path: pending.path.join(OsStr::from_bytes(bytes)),
                packages: pending.packages || is_package_dir(bytes),
                earlier: known.get(bytes).copied(),
                name,
                index,
                parent_fs: fs,
            });
        }
        if let Some(at) = at {
            let old_enough = identity.ctime_ns < shared.started.saturating_sub(MARGIN_NS);
            // A subdirectory left out of the record: read this one again next time.
            let whole = listing.complete && count as usize == wanted;
            let seen = &mut self.dirs[at];
            seen.identity = Some(identity).filter(|_| trusted && whole && old_enough);
            seen.dotgit = listing.dotgit;
            seen.head = listing.head;
            seen.agent = listing.agent;
            seen.first = u32::try_from(first).unwrap_or(0);
            seen.count = count;
        }
        Ok(())
    }
}

/// Gives a subdirectory of the directory at `parent` in the record its place there
/// (`None`: its parent has none, or the record is full).
fn record_name(
    dirs: &mut Vec<Seen>,
    names: &mut Vec<u8>,
    parent: Option<usize>,
    name: &[u8],
) -> Option<u32> {
    parent?;
    let index = u32::try_from(dirs.len()).ok()?;
    let start = u32::try_from(names.len()).ok()?;
    let len = u32::try_from(name.len()).ok()?;
    names.extend_from_slice(name);
    dirs.push(Seen::named((start, len)));
    Some(index)
}

impl Seen {
    fn named(name: (u32, u32)) -> Seen {
        Seen {
            name,
            identity: None,
            first: 0,
            count: 0,
            dotgit: None,
            head: false,
            agent: false,
        }
    }
}

/// What one directory at `dir` holds for the scan: its `.git` entry, and the directory
/// itself when it holds a `HEAD`.
fn found(out: &mut Vec<DotGit>, dir: &Path, dotgit: Option<DotGitKind>, head: bool) {
    let head = head.then_some(DotGitKind::Head);
    for kind in dotgit.into_iter().chain(head) {
        out.push(DotGit {
            top: dir.to_path_buf(),
            kind,
        });
    }
}

/// The directory's state: relative to its open parent, not following a symbolic link;
/// the root by its path (the caller's canonical directory); a directory whose parent was
/// not opened (it was unchanged) by its path, not following a final symbolic link.
fn stat(pending: &Pending) -> rustix::io::Result<Stat> {
    match (&pending.parent, pending.name.is_empty()) {
        (Some(parent), _) => statat(parent, &pending.name, AtFlags::SYMLINK_NOFOLLOW),
        (None, true) => statat(CWD, &pending.path, AtFlags::empty()),
        (None, false) => statat(CWD, &pending.path, AtFlags::SYMLINK_NOFOLLOW),
    }
}

/// The `.git` entry of a directory that is not listed (one without subdirectories that
/// lookups cost less for, or one the caller cannot read), whether it holds a `HEAD`
/// that is not a directory, and (outside installed packages) whether it holds one of the
/// [`AGENT_MARKERS`], each looked up by name; `None` when that cannot be told without
/// listing the directory (it cannot be searched, say).
fn leaf_entries(pending: &Pending) -> Option<(Option<DotGitKind>, bool, bool)> {
    let lookup = |entry: &[u8]| {
        let found = match &pending.parent {
            Some(parent) => {
                let mut name = pending.name.as_bytes().to_vec();
                name.push(b'/');
                name.extend_from_slice(entry);
                let name = CString::new(name).ok()?;
                statat(parent, &name, AtFlags::SYMLINK_NOFOLLOW)
            }
            None => statat(
                CWD,
                pending.path.join(OsStr::from_bytes(entry)),
                AtFlags::SYMLINK_NOFOLLOW,
            ),
        };
        match found {
            Ok(st) => Some(Some(FileType::from_raw_mode(st.st_mode))),
            Err(rustix::io::Errno::NOENT) => Some(None),
            Err(_) => None,
        }
    };
    let dotgit = lookup(b".git")?.map(dotgit_kind);
    let head = lookup(b"HEAD")?.is_some_and(|kind| kind != FileType::Directory);
    let mut agent = false;
    if !pending.packages {
        for marker in AGENT_MARKERS {
            if lookup(marker)?.is_some() {
                agent = true;
                break;
            }
        }
    }
    Some((dotgit, head, agent))
}

fn dotgit_kind(kind: FileType) -> DotGitKind {
    match kind {
        FileType::Directory => DotGitKind::Directory,
        FileType::RegularFile => DotGitKind::File,
        FileType::Symlink => DotGitKind::Symlink,
        _ => DotGitKind::Other,
    }
}

/// Opens a directory only to look up names in it (`O_PATH`: nothing is read), named as
/// [`stat`] names it.
fn handle(pending: &Pending) -> rustix::io::Result<OwnedFd> {
    open_with(pending, OFlags::PATH)
}

/// Opens a directory to list it, named as [`stat`] names it.
fn open(pending: &Pending) -> rustix::io::Result<OwnedFd> {
    open_with(pending, OFlags::RDONLY)
}

/// Opens the directory `pending` names, as [`stat`] names it, with `how`.
fn open_with(pending: &Pending, how: OFlags) -> rustix::io::Result<OwnedFd> {
    let flags = how | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match (&pending.parent, pending.name.is_empty()) {
        (Some(parent), _) => openat(
            parent,
            &pending.name,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        ),
        (None, true) => openat(CWD, &pending.path, flags, Mode::empty()),
        (None, false) => openat(CWD, &pending.path, flags | OFlags::NOFOLLOW, Mode::empty()),
    }
}

// `st_dev`'s type varies by architecture.
#[allow(clippy::useless_conversion)]
fn device(st: &Stat) -> u64 {
    u64::from(st.st_dev)
}

/// Whether the directory's file system keeps its times (and its link count) itself.
fn fs_trusted(fd: &OwnedFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|fs| TRUSTED_FS.contains(&i128::from(fs.f_type)))
}

/// Lists a directory: its `.git` entry, whether it holds a `HEAD` that is not a
/// directory, and its subdirectories (not `.` and `..`), with
/// the entry type from the listing, or an `lstat` relative to the directory when the file
/// system does not say.
fn list(fd: &OwnedFd, buf: &mut [MaybeUninit<u8>]) -> Listing {
    let mut listing = Listing {
        dotgit: None,
        head: false,
        agent: false,
        subdirs: Vec::new(),
        complete: true,
    };
    let mut dir = RawDir::new(fd.as_fd(), buf);
    while let Some(entry) = dir.next() {
        let Ok(entry) = entry else {
            listing.complete = false;
            break;
        };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        // `None`: gone since it was listed.
        let Some(kind) = crate::hostfs::listed_type(fd, name, entry.file_type()) else {
            continue;
        };
        if AGENT_MARKERS.contains(&bytes) {
            listing.agent = true;
        }
        if bytes == b".git" {
            listing.dotgit = Some(dotgit_kind(kind));
        } else if bytes == b"HEAD" && kind != FileType::Directory {
            listing.head = true;
        } else if kind == FileType::Directory {
            listing.subdirs.push(name.to_owned());
        }
    }
    listing
}

/// The system clock, in nanoseconds since the epoch (0 if it is before it: then nothing
/// is taken on trust).
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(0))
        .unwrap_or(0)
}

// The record kept between launches (issue 38): the walk after a run leaves its record in
// Sandy's state directory, and the next launch's walk compares each directory with it,
// reading only what changed since, exactly as the walk after a run compares with the
// walk before it. Why that cannot miss a repository is in the module's text; what it
// adds is time between the two walks, so the record also says when it was made.

/// The fewest directories a tree has for its record to be kept between launches.
const KEEP_FROM_DIRS: usize = 64;
/// The record's layout.
const KEPT_MAGIC: &[u8; 8] = b"SANDYWK1";
/// The bytes of one directory in a kept record.
const KEPT_DIR: usize = 60;
/// The length of the kernel's boot id (`/proc/sys/kernel/random/boot_id`).
const BOOT_ID: usize = 36;

/// The clocks a kept record's trust depends on: the boot it was made in, and the wall
/// clock and the boot clock when its walk started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clock {
    /// The kernel's boot id; all zeros when it could not be read (never trusted then).
    boot: [u8; BOOT_ID],
    real_ns: i64,
    boot_ns: i64,
}

/// The kernel's boot id, read once per process (it cannot change within one): the walk
/// before a launch and the one after the run both stamp their record with it.
fn boot_id() -> [u8; BOOT_ID] {
    static BOOT: std::sync::OnceLock<[u8; BOOT_ID]> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        let mut boot = [0u8; BOOT_ID];
        let id = crate::hostfs::Dir::open(Path::new("/proc/sys/kernel/random"))
            .and_then(|dir| dir.read("boot_id", 64));
        if let Some(id) = id
            .ok()
            .flatten()
            .as_deref()
            .and_then(|id| id.get(..BOOT_ID))
        {
            boot.copy_from_slice(id);
        }
        boot
    })
}

impl Clock {
    fn now() -> Clock {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Clock {
            boot: boot_id(),
            real_ns: now_ns(),
            boot_ns: t
                .tv_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec),
        }
    }

    /// Whether a record made at `self` may be taken on trust `now`. A change time comes
    /// from the wall clock: a directory changed after the record was made has a later
    /// one, unless the wall clock was set back since. So: the same boot (a file system
    /// can be changed elsewhere while the machine is off, and the boot clock restarts),
    /// and the wall clock moved on at least as far as the boot clock, less
    /// [`MARGIN_NS`] (the record trusts only directories changed more than that before
    /// its walk started).
    fn trusts_from(&self, now: &Clock) -> bool {
        let elapsed = now.boot_ns.saturating_sub(self.boot_ns);
        let moved = now.real_ns.saturating_sub(self.real_ns);
        self.boot != [0; BOOT_ID]
            && self.boot == now.boot
            && elapsed >= 0
            && moved >= elapsed.saturating_sub(MARGIN_NS)
    }
}

/// The file that keeps the record of `root` in Sandy's state directory `state`.
fn kept_name(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(root.as_os_str().as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}.walk")
}

/// The record of `root` an earlier launch kept in `state` (Sandy's state directory),
/// when it is whole and may be taken on trust now ([`Clock::trusts_from`]).
pub fn recall(state: &Path, root: &Path, limit: usize) -> Option<Record> {
    let dir = crate::hostfs::Dir::open(&state.join("walk")).ok()?;
    let most = 64 + root.as_os_str().len() + limit * (KEPT_DIR + 256);
    let bytes = dir.read(kept_name(root), most).ok()??;
    let record = decode(&bytes, root, limit)?;
    record.clock.trusts_from(&Clock::now()).then_some(record)
}

/// Keeps `record` in `state` for the next launch, unless it is what is kept already or
/// of fewer than [`KEEP_FROM_DIRS`] directories. A
/// record that cannot be written is simply not kept: the next launch reads every
/// directory.
pub fn keep(state: &Path, record: &Record) {
    // A small tree is walked in less time than a record takes to write and read.
    if record.kept || record.dirs.len() < KEEP_FROM_DIRS {
        return;
    }
    let Ok(dir) = crate::hostfs::open_or_create(&state.join("walk"), 0o700) else {
        return;
    };
    // Not synced to the disk: a record is used only in the boot it was made in.
    let _ = dir.replace_for_this_boot(kept_name(&record.root), &encode(record), 0o600);
}

fn encode(record: &Record) -> Vec<u8> {
    let root = record.root.as_os_str().as_bytes();
    let mut out =
        Vec::with_capacity(80 + root.len() + record.dirs.len() * KEPT_DIR + record.names.len());
    out.extend_from_slice(KEPT_MAGIC);
    out.extend_from_slice(&record.clock.boot);
    out.extend_from_slice(&record.clock.real_ns.to_le_bytes());
    out.extend_from_slice(&record.clock.boot_ns.to_le_bytes());
    for n in [root.len(), record.dirs.len(), record.names.len()] {
        out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
    }
    out.extend_from_slice(root);
    for d in &record.dirs {
        for n in [d.name.0, d.name.1, d.first, d.count] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let flags = u8::from(d.identity.is_some()) | u8::from(d.head) << 1 | u8::from(d.agent) << 2;
        let dotgit = match d.dotgit {
            None => 0u8,
            Some(DotGitKind::Directory) => 1,
            Some(DotGitKind::File) => 2,
            Some(DotGitKind::Symlink) => 3,
            Some(DotGitKind::Other) => 4,
            Some(DotGitKind::Head) => 5,
        };
        out.extend_from_slice(&[flags, dotgit, 0, 0]);
        let id = d.identity.unwrap_or(Identity {
            dev: 0,
            ino: 0,
            nlink: 0,
            ctime_ns: 0,
            mtime_ns: 0,
        });
        out.extend_from_slice(&id.dev.to_le_bytes());
        out.extend_from_slice(&id.ino.to_le_bytes());
        out.extend_from_slice(&id.nlink.to_le_bytes());
        out.extend_from_slice(&id.ctime_ns.to_le_bytes());
        out.extend_from_slice(&id.mtime_ns.to_le_bytes());
    }
    out.extend_from_slice(&record.names);
    out
}

/// Reads a kept record of `root`; `None` unless it is exactly what [`encode`] writes and
/// a tree (every directory but the root is the subdirectory of exactly one directory
/// before it, every name lies in the names), so that a walk along it ends.
fn decode(bytes: &[u8], root: &Path, limit: usize) -> Option<Record> {
    let mut r = Reader(bytes);
    if r.take(8)? != KEPT_MAGIC {
        return None;
    }
    let mut boot = [0u8; BOOT_ID];
    boot.copy_from_slice(r.take(BOOT_ID)?);
    let real_ns = r.i64()?;
    let boot_ns = r.i64()?;
    let (root_len, count, names_len) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
    if r.take(root_len)? != root.as_os_str().as_bytes() || count == 0 || count > limit {
        return None;
    }
    if r.0.len() != count.checked_mul(KEPT_DIR)?.checked_add(names_len)? {
        return None;
    }
    let mut dirs = Vec::with_capacity(count);
    let mut owned = vec![false; count];
    for i in 0..count {
        let (start, len, first, n) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let [flags, dotgit, _, _] = <[u8; 4]>::try_from(r.take(4)?).ok()?;
        let id = Identity {
            dev: r.u64()?,
            ino: r.u64()?,
            nlink: r.u64()?,
            ctime_ns: r.i64()?,
            mtime_ns: r.i64()?,
        };
        if (start as usize).checked_add(len as usize)? > names_len || (i == 0) != (len == 0) {
            return None;
        }
        if n > 0 {
            let (first, end) = (first as usize, (first as usize).checked_add(n as usize)?);
            if first <= i || end > count {
                return None;
            }
            for o in owned.get_mut(first..end)? {
                if std::mem::replace(o, true) {
                    return None;
                }
            }
        }
        dirs.push(Seen {
            name: (start, len),
            identity: (flags & 1 != 0).then_some(id),
            first,
            count: n,
            dotgit: match dotgit {
                0 => None,
                1 => Some(DotGitKind::Directory),
                2 => Some(DotGitKind::File),
                3 => Some(DotGitKind::Symlink),
                4 => Some(DotGitKind::Other),
                5 => Some(DotGitKind::Head),
                _ => return None,
            },
            head: flags & 2 != 0,
            agent: flags & 4 != 0,
        });
    }
    Some(Record {
        root: root.to_path_buf(),
        dirs,
        names: r.take(names_len)?.to_vec(),
        unlisted: Vec::new(),
        unsearchable: Vec::new(),
        agent_dirs: Vec::new(),
        clock: Clock {
            boot,
            real_ns,
            boot_ns,
        },
        kept: true,
    })
}

/// Takes little-endian fields off the front of a kept record.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn full(root: &Path) -> Vec<DotGit> {
        walk(root, 1000).unwrap().0
    }

    /// A tree old enough for its directories to be taken on trust.
    fn old_tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in [
            "a/b/c",
            "a/d",
            "vendor/x/.git/hooks",
            "e/f/g/h",
            "gone/deep",
            "swap/in",
        ] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        for i in 0..300 {
            fs::write(r.join(format!("a/file-with-a-long-name-{i}")), "x").unwrap();
        }
        fs::write(r.join("e/.git"), "gitdir: ../vendor/x/.git\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        t
    }

    #[test]
    fn an_unchanged_tree_is_looked_at_not_read_and_gives_the_same_answer() {
        let t = old_tree();
        let (first, record) = walk(t.path(), 1000).unwrap();
        assert_eq!(first.len(), 2);
        assert!(
            record.dirs.iter().all(|d| d.identity.is_some()),
            "{record:?}"
        );
        assert_eq!(walk_again(&record, 1000).unwrap().0.found, first);
    }

    #[test]
    fn every_change_below_an_old_tree_is_found_again() {
        let t = old_tree();
        let r = t.path();
        let (_, record) = walk(r, 1000).unwrap();
        // A pointer to a repository deep in an old directory, whose modification time is
        // then set back to what it was (its change time cannot be; its link count is the
        // same, since no subdirectory was added).
        let old = filetime(r.join("a/b/c"));
        fs::write(r.join("a/b/c/.git"), "gitdir: /elsewhere\n").unwrap();
        set_times(&r.join("a/b/c"), old);
        assert_eq!(filetime(r.join("a/b/c")), old);
        // A repository, a symbolic link, a directory moved in with a repository inside.
        fs::create_dir_all(r.join("a/d/.git/hooks")).unwrap();
        symlink("/nowhere", r.join("e/f/g/h/.git")).unwrap();
        let outside = tempfile::tempdir_in(r.parent().unwrap()).unwrap();
        fs::create_dir_all(outside.path().join("moved/inner/.git")).unwrap();
        fs::rename(outside.path().join("moved"), r.join("a/moved")).unwrap();
        // A repository removed, and a directory swapped for a link to one outside.
        fs::remove_dir_all(r.join("vendor/x/.git")).unwrap();
        fs::remove_dir_all(r.join("swap")).unwrap();
        fs::create_dir_all(outside.path().join("repo/.git")).unwrap();
        symlink(outside.path(), r.join("swap")).unwrap();
        // A new directory where an old one was removed, with a repository.
        fs::remove_dir_all(r.join("gone")).unwrap();
        fs::create_dir_all(r.join("gone/deep/.git")).unwrap();
        let again = walk_again(&record, 1000).unwrap().0.found;
        assert_eq!(again, full(r));
        let tops: Vec<_> = again
            .iter()
            .map(|d| d.top.strip_prefix(r).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            tops,
            ["a/b/c", "a/d", "a/moved/inner", "e", "e/f/g/h", "gone/deep"]
                .map(PathBuf::from)
                .to_vec()
        );
    }

    /// The walk as it is specified, the slow way: every directory read, symbolic links
    /// not followed, `.git` directories not entered, a `HEAD` that is not a directory
    /// found.
    fn reference(dir: &Path, out: &mut Vec<DotGit>) {
        let mut entries: Vec<_> = fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let kind = e.file_type().unwrap();
            if e.file_name() == "HEAD" && !kind.is_dir() {
                out.push(DotGit {
                    top: dir.to_path_buf(),
                    kind: DotGitKind::Head,
                });
            } else if e.file_name() == ".git" {
                let kind = if kind.is_dir() {
                    DotGitKind::Directory
                } else if kind.is_file() {
                    DotGitKind::File
                } else if kind.is_symlink() {
                    DotGitKind::Symlink
                } else {
                    DotGitKind::Other
                };
                out.push(DotGit {
                    top: dir.to_path_buf(),
                    kind,
                });
            } else if kind.is_dir() {
                reference(&e.path(), out);
            }
        }
    }

    fn by_reference(root: &Path) -> Vec<DotGit> {
        let mut out = Vec::new();
        reference(root, &mut out);
        out.sort();
        out
    }

    #[test]
    fn both_walks_agree_with_reading_every_directory_on_a_varied_tree() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        // Leaves and inner directories, each with each kind of `.git` or none.
        let mut n = 0u32;
        for a in 0..6 {
            for b in 0..5 {
                let d = r.join(format!("a{a}/b{b}"));
                fs::create_dir_all(&d).unwrap();
                n += 1;
                match n % 5 {
                    0 => fs::create_dir_all(d.join(".git/hooks")).unwrap(),
                    1 => fs::write(d.join(".git"), "gitdir: x\n").unwrap(),
                    2 => symlink("/nowhere", d.join(".git")).unwrap(),
                    3 => fs::create_dir_all(d.join("c/d")).unwrap(),
                    _ => fs::write(d.join("file"), "x").unwrap(),
                }
                // A `HEAD` of each kind, in leaves and inner directories alike.
                match n % 7 {
                    0 => fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap(),
                    1 => symlink("refs/heads/main", d.join("HEAD")).unwrap(),
                    2 => fs::create_dir(d.join("HEAD")).unwrap(),
                    3 => fs::create_dir_all(d.join("objects/refs/HEAD")).unwrap(),
                    _ => {}
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let (first, record) = walk(r, 10_000).unwrap();
        assert_eq!(first, by_reference(r));
        assert_eq!(
            first.iter().filter(|d| d.kind == DotGitKind::Head).count(),
            9,
            "{first:?}"
        );
        // Leaves gain and lose entries of every kind; inner directories gain leaves.
        fs::remove_file(r.join("a0/b1/.git")).unwrap();
        fs::create_dir(r.join("a0/b1/.git")).unwrap();
        fs::remove_dir_all(r.join("a0/b4/.git")).unwrap();
        fs::write(r.join("a1/b0/.git"), "gitdir: y\n").unwrap();
        fs::create_dir_all(r.join("a2/b3/c/d/e/.git")).unwrap();
        symlink("/nowhere", r.join("a3/b2/c/.git")).unwrap();
        fs::remove_dir_all(r.join("a5")).unwrap();
        // Leaves and inner directories gain a `HEAD`, lose one, or see it become a file.
        fs::write(r.join("a2/b0/HEAD"), "0123\n").unwrap();
        fs::write(r.join("a4/b3/HEAD"), "0123\n").unwrap();
        fs::remove_file(r.join("a0/b0/HEAD")).unwrap();
        fs::remove_dir(r.join("a1/b3/HEAD")).unwrap();
        fs::write(r.join("a1/b3/HEAD"), "ref: refs/heads/x\n").unwrap();
        fs::write(r.join("a0/b2/objects/HEAD"), "0123\n").unwrap();
        assert_eq!(
            walk_again(&record, 10_000).unwrap().0.found,
            by_reference(r)
        );
    }

    #[test]
    fn directories_with_agent_files_are_noted_outside_installed_packages() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in [
            "a/.claude",
            "b/c",
            "node_modules/x/.claude",
            "d/.venv/e/.codex",
        ] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        fs::write(r.join("b/.mcp.json"), "{}").unwrap();
        // Directories without subdirectories: a lone launch file, and a link in place of
        // an agent's directory (a dotfiles layout), are seen like any other; in installed
        // packages they are not looked for.
        fs::write(r.join("b/c/opencode.jsonc"), "{}").unwrap();
        fs::create_dir_all(r.join("g/h")).unwrap();
        symlink(r.join("a/.claude"), r.join("g/h/.claude")).unwrap();
        fs::create_dir_all(r.join("node_modules/y")).unwrap();
        fs::write(r.join("node_modules/y/.mcp.json"), "{}").unwrap();
        // A large one (looked up by name rather than listed) alike.
        fs::create_dir_all(r.join("j")).unwrap();
        for i in 0..300 {
            fs::write(r.join(format!("j/a-file-with-a-long-name-{i:04}.txt")), "").unwrap();
        }
        fs::write(r.join("j/opencode.json"), "{}").unwrap();
        assert!(fs::metadata(r.join("j")).unwrap().len() > LEAF_LISTED_BYTES as u64);
        let (_, record) = walk(r, 1000).unwrap();
        assert_eq!(
            record.agent_dirs(),
            [
                r.join("a"),
                r.join("b"),
                r.join("b/c"),
                r.join("g/h"),
                r.join("j")
            ]
        );
        fs::create_dir_all(r.join("f/.gemini")).unwrap();
        fs::create_dir_all(r.join("i")).unwrap();
        fs::write(r.join("i/.mcp.json"), "{}").unwrap();
        let again = walk_again(&record, 1000).unwrap().0;
        assert_eq!(
            again.agent_dirs,
            [
                r.join("a"),
                r.join("b"),
                r.join("b/c"),
                r.join("f"),
                r.join("g/h"),
                r.join("i"),
                r.join("j")
            ]
        );
    }

    #[test]
    fn a_recent_directory_or_one_that_could_not_be_read_is_read_again() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("new/x")).unwrap();
        let (_, record) = walk(r, 1000).unwrap();
        // Changed within the margin: nothing is taken on trust.
        assert!(record.dirs.iter().all(|d| d.identity.is_none()));
        fs::create_dir_all(r.join("new/x/.git")).unwrap();
        assert_eq!(walk_again(&record, 1000).unwrap().0.found, full(r));
    }

    /// The record kept between launches: written, read back, taken as the earlier
    /// walk, and every change made between the two (outside Sandy: a repository made,
    /// a directory renamed, a `.git` that appears through a rename of its parent) found.
    /// [`keep`], whatever the tree's size.
    fn keep_any_size(state: &Path, record: &Record) {
        let dir = crate::hostfs::open_or_create(&state.join("walk"), 0o700).unwrap();
        dir.replace_for_this_boot(kept_name(&record.root), &encode(record), 0o600)
            .unwrap();
    }

    #[test]
    fn a_kept_record_finds_every_change_made_between_launches() {
        let t = old_tree();
        let r = t.path();
        let state = tempfile::tempdir().unwrap();
        let (_, first) = walk(r, 1000).unwrap();
        // A small tree's record is not kept.
        keep(state.path(), &first);
        assert!(recall(state.path(), r, 1000).is_none());
        keep_any_size(state.path(), &first);
        let kept = recall(state.path(), r, 1000).expect("kept");
        assert_eq!(kept.dirs.len(), first.dirs.len());
        // Nothing changed: nothing read, the same answer, nothing to write again.
        let (same, now) = walk_again(&kept, 1000).unwrap();
        assert_eq!(same.found, full(r));
        assert!(now.kept);
        // Changes made while no launch looks.
        fs::create_dir_all(r.join("a/b/c/d/new/.git/hooks")).unwrap();
        fs::rename(r.join("e/f"), r.join("e/f2")).unwrap();
        let outside = tempfile::tempdir_in(r.parent().unwrap()).unwrap();
        fs::create_dir_all(outside.path().join("p/.git")).unwrap();
        fs::rename(outside.path().join("p"), r.join("a/d/p")).unwrap();
        fs::remove_dir_all(r.join("vendor/x/.git")).unwrap();
        let (again, now) = walk_again(&kept, 1000).unwrap();
        assert_eq!(again.found, full(r));
        assert!(!now.kept);
        // The next record is kept, and answers alike.
        keep_any_size(state.path(), &now);
        let kept = recall(state.path(), r, 1000).expect("kept again");
        assert_eq!(walk_again(&kept, 1000).unwrap().0.found, full(r));
        // Another tree's record is not this one's.
        let other = tempfile::tempdir().unwrap();
        assert!(recall(state.path(), other.path(), 1000).is_none());
    }

    /// A record made while a concurrent run swaps two directories back and forth
    /// (`RENAME_EXCHANGE` in a loop) never hides a repository afterwards: every swap moves
    /// the change times of both directories and their parent, so what the record says of
    /// a directory it saw mid-swap is read again.
    #[test]
    fn a_record_made_while_directories_are_swapped_hides_nothing() {
        use rustix::fs::{renameat_with, RenameFlags};
        use std::sync::atomic::AtomicBool;
        let t = tempfile::tempdir().unwrap();
        let r = t.path().to_path_buf();
        for d in ["p/a/x/deep", "p/b/y/.git/hooks", "p/b/y/z", "q/c"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for round in 0..20 {
            let stop = Arc::new(AtomicBool::new(false));
            let swapper = {
                let (stop, r) = (Arc::clone(&stop), r.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = renameat_with(
                            CWD,
                            r.join("p/a"),
                            CWD,
                            r.join("p/b"),
                            RenameFlags::EXCHANGE,
                        );
                    }
                })
            };
            let made = traverse_with(&r, 1000, None, 1 + round % 3, 1 + round % 4);
            stop.store(true, Ordering::Relaxed);
            swapper.join().unwrap();
            let Ok((_, record)) = made else { continue };
            let kept = decode(&encode(&record), &r, 1000).unwrap();
            assert_eq!(walk_again(&kept, 1000).unwrap().0.found, by_reference(&r));
            // Afterwards, outside: a repository deep in whichever directory is now `a`.
            fs::create_dir_all(r.join(format!("p/a/x/deep/new{round}/.git"))).unwrap();
            let (again, _) = walk_again(&kept, 1000).unwrap();
            assert_eq!(again.found, by_reference(&r), "round {round}");
            fs::remove_dir_all(r.join(format!("p/a/x/deep/new{round}"))).unwrap();
        }
    }

    /// A kept record is used only whole, as a tree, within its bound, in the boot it
    /// was made in and while the wall clock was not set back.
    #[test]
    fn a_kept_record_that_is_not_whole_or_not_of_now_is_not_used() {
        let t = old_tree();
        let r = t.path();
        let (_, record) = walk(r, 1000).unwrap();
        let bytes = encode(&record);
        assert!(decode(&bytes, r, 1000).is_some());
        assert!(decode(&bytes[..bytes.len() - 1], r, 1000).is_none());
        assert!(decode(&[bytes.as_slice(), b"x"].concat(), r, 1000).is_none());
        assert!(decode(&bytes, &r.join("a"), 1000).is_none());
        assert!(decode(&bytes, r, 3).is_none());
        // The root's subdirectories made to start at the root itself (a cycle), and two
        // directories claiming the same subdirectories.
        let at = |i: usize| 8 + BOOT_ID + 16 + 12 + r.as_os_str().len() + i * KEPT_DIR;
        let mut cycle = bytes.clone();
        cycle[at(0) + 8..at(0) + 12].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&cycle, r, 1000).is_none());
        let parent = record
            .dirs
            .iter()
            .position(|d| d.count > 0 && d.first > 1)
            .unwrap();
        let mut shared = bytes;
        let (first, count) = (record.dirs[0].first, record.dirs[0].count);
        shared[at(parent) + 8..at(parent) + 12].copy_from_slice(&first.to_le_bytes());
        shared[at(parent) + 12..at(parent) + 16].copy_from_slice(&count.to_le_bytes());
        assert!(decode(&shared, r, 1000).is_none());
        // The clocks.
        let now = Clock::now();
        assert!(record.clock.trusts_from(&now));
        let other_boot = Clock {
            boot: [b'0'; BOOT_ID],
            ..now
        };
        assert!(!record.clock.trusts_from(&other_boot));
        let set_back = Clock {
            real_ns: now.real_ns - 5 * MARGIN_NS,
            ..now
        };
        assert!(!record.clock.trusts_from(&set_back));
        let set_forward = Clock {
            real_ns: now.real_ns + 3_600 * 1_000_000_000,
            ..now
        };
        assert!(record.clock.trusts_from(&set_forward));
        let unknown = Clock {
            boot: [0; BOOT_ID],
            ..record.clock
        };
        assert!(!unknown.trusts_from(&Clock {
            boot: [0; BOOT_ID],
            ..now
        }));
    }

    /// The walk on several threads finds and records exactly what one thread does, on
    /// a tree with every kind of entry, unchanged and changed, split at every size.
    #[test]
    fn walks_on_several_threads_agree_with_one() {
        let t = old_tree();
        let r = t.path();
        for i in 0..40 {
            fs::create_dir_all(r.join(format!("node_modules/p{i}/lib/x"))).unwrap();
            if i % 7 == 0 {
                fs::create_dir_all(r.join(format!("node_modules/p{i}/lib/x/.git"))).unwrap();
            }
            if i % 5 == 0 {
                fs::create_dir_all(r.join(format!("w{i}/.claude"))).unwrap();
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let (one, one_record) = traverse_with(r, 1000, None, 1, 0).unwrap();
        assert_eq!(one.found, by_reference(r));
        for (threads, split) in [(2, 1), (3, 2), (4, 7), (2, 30), (8, 100)] {
            let (many, record) = traverse_with(r, 1000, None, threads, split).unwrap();
            assert_eq!(many, one, "{threads} threads, split at {split}");
            assert_eq!(record.dirs.len(), one_record.dirs.len());
            // The record, read again on one thread or several, gives the same answer
            // and reads nothing.
            let bytes = encode(&record);
            let kept = decode(&bytes, r, 1000).expect("a tree");
            let (again, now) = traverse_with(r, 1000, Some(&kept), threads, split).unwrap();
            assert_eq!(again, one);
            assert!(
                now.kept,
                "{threads} threads, split at {split}: nothing read"
            );
            let (again, _) = traverse_with(r, 1000, Some(&record), 1, 0).unwrap();
            assert_eq!(again, one);
        }
        // Changes, found alike whatever the split.
        fs::create_dir_all(r.join("node_modules/p3/lib/x/.git")).unwrap();
        fs::remove_dir_all(r.join("node_modules/p7/lib/x/.git")).unwrap();
        fs::create_dir_all(r.join("w10/new/.git")).unwrap();
        fs::write(r.join("node_modules/p9/lib/HEAD"), "ref: x\n").unwrap();
        let want = by_reference(r);
        for (threads, split) in [(1, 0), (2, 1), (3, 5), (8, 64)] {
            let (again, _) = traverse_with(r, 1000, Some(&one_record), threads, split).unwrap();
            assert_eq!(again.found, want, "{threads} threads, split at {split}");
        }
        // The bound holds on several threads too.
        assert!(matches!(
            traverse_with(r, 20, None, 3, 2),
            Err(GitScanError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_walk_after_the_run_keeps_the_bound() {
        let t = old_tree();
        let (_, record) = walk(t.path(), 1000).unwrap();
        assert!(matches!(
            walk_again(&record, 3),
            Err(GitScanError::TooLarge { .. })
        ));
    }

    fn filetime(p: PathBuf) -> std::time::SystemTime {
        fs::metadata(p).unwrap().modified().unwrap()
    }

    fn set_times(p: &Path, when: std::time::SystemTime) {
        let f = fs::File::open(p).unwrap();
        f.set_times(fs::FileTimes::new().set_modified(when).set_accessed(when))
            .unwrap();
    }
}
