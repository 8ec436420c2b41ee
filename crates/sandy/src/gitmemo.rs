//! Git's answers, remembered between launches (design promise 7, issue 38).
//!
//! Describing a project's repositories runs `git` several times before every launch
//! (about 5 ms for a small repository here). The answer ([`GitFacts`]) depends only on
//! what git reads, so it is remembered with a fingerprint of every input and used again
//! while every input is unchanged:
//!
//! - the key: the scanned directories, the `.git` entries the walk found (the walk still
//!   runs on every launch: a repository created since is a different key), the home
//!   directory, every variable git reads (`GIT_*`, `HOME`, `XDG_CONFIG_HOME`, `PATH`) and
//!   the `git` program itself (its path and fingerprint);
//! - the fingerprints (`lstat`: device, inode, type and mode, size, modification and
//!   change times, or "absent"): every configuration file of every scope and every file
//!   an include names (present or not); in every git directory `HEAD`, `commondir`,
//!   `gitdir`, `config`, `config.worktree`, `worktrees/` and every directory below
//!   `modules/` (not the directory itself: Sandy's placeholders for absent protected
//!   names come and go there on every launch); every `.git` entry found, and the `.git`
//!   names above each scanned directory (a repository enclosing it).
//!
//! Adding, removing or renaming an entry changes its directory's change time; writing a
//! file changes its own. A change time cannot be set back by an unprivileged user. Time
//! stamps have the granularity of the kernel's clock tick, so a file changed in the same
//! tick as it was read could look unchanged: an answer is remembered only when every
//! input is older than [`SETTLED`] when the scan starts, as git does for its index. The
//! memo lives in Sandy's state directory, which no run can reach; one file per project,
//! read bounded and replaced atomically. A memo that cannot be read or does not match is
//! ignored, and git is asked again.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandy_policy::{GitDirKind, GitFacts};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::gitscan::DotGit;

/// The memo's layout.
const VERSION: u32 = 1;
/// The largest memo read.
const MAX_MEMO: usize = 8 * 1024 * 1024;
/// How long every input must have been unchanged for an answer to be remembered.
pub const SETTLED: Duration = Duration::from_secs(2);
/// How deep below `modules/` directories are fingerprinted.
const MAX_MODULE_DEPTH: usize = 32;
/// How many inputs a memo holds at most (more: not remembered).
const MAX_INPUTS: usize = 20_000;

/// One input as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Print {
    Absent,
    /// A `.git` directory, by identity only: its own times change with every entry git
    /// or Sandy's placeholders add; what matters in it has inputs of its own.
    Directory {
        dev: u64,
        ino: u64,
        mode: u32,
    },
    Present {
        dev: u64,
        ino: u64,
        mode: u32,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Memo {
    version: u32,
    key: String,
    inputs: Vec<(PathBuf, Print)>,
    facts: GitFacts,
}

/// The input's fingerprint now; `None` when it cannot be known (a directory on the way
/// that cannot be searched): such an answer is never remembered nor used. With
/// `identity`, a directory is fingerprinted by what it is, not by its times.
fn print(path: &Path, identity: bool) -> Option<Print> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if identity && m.is_dir() => Some(Print::Directory {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
        }),
        Ok(m) => Some(Print::Present {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Print::Absent),
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => Some(Print::Absent),
        Err(_) => None,
    }
}

/// What the answer for `roots` depends on besides the files: see the module's text.
pub fn key(
    roots: &[PathBuf],
    dotgits: &[DotGit],
    home: Option<&Path>,
    env: &[(OsString, OsString)],
    git: Option<&Path>,
) -> String {
    let mut h = Sha256::new();
    let mut put = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    put(&VERSION.to_le_bytes());
    for r in roots {
        put(b"root");
        put(r.as_os_str().as_bytes());
    }
    for d in dotgits {
        put(b"dotgit");
        put(d.top.as_os_str().as_bytes());
        put(format!("{:?}", d.kind).as_bytes());
    }
    put(b"home");
    put(home.map(|h| h.as_os_str().as_bytes()).unwrap_or_default());
    let mut vars: Vec<&(OsString, OsString)> = env.iter().filter(|(k, _)| read_by_git(k)).collect();
    vars.sort();
    for (k, v) in vars {
        put(b"var");
        put(k.as_bytes());
        put(v.as_bytes());
    }
    put(b"git");
    if let Some(git) = git {
        put(git.as_os_str().as_bytes());
        put(format!("{:?}", print(git, false)).as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The variables git's answers depend on.
fn read_by_git(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n.starts_with(b"GIT_") || [&b"HOME"[..], b"XDG_CONFIG_HOME", b"PATH"].contains(&n)
}

/// Every file and directory whose change could change `facts`, and whether it is
/// fingerprinted by identity only (a `.git` directory).
fn inputs(roots: &[PathBuf], dotgits: &[DotGit], facts: &GitFacts) -> Vec<(PathBuf, bool)> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut identity: Vec<PathBuf> = Vec::new();
    out.extend(facts.config_files.iter().cloned());
    // Not the directories themselves: Sandy's own placeholders for absent protected
    // names come and go in them on every launch. What a new entry there could change has
    // a name of its own below.
    for d in &facts.git_dirs {
        for name in [
            "HEAD",
            "commondir",
            "gitdir",
            "config",
            "config.worktree",
            "worktrees",
        ] {
            out.push(d.path.join(name));
        }
        if d.kind == GitDirKind::Common {
            let modules = d.path.join("modules");
            out.push(modules.clone());
            below(&modules, 0, &mut out);
        }
    }
    for d in dotgits {
        identity.push(d.top.join(".git"));
        out.push(d.top.join("HEAD"));
    }
    for root in roots {
        for a in root.ancestors().skip(1) {
            identity.push(a.join(".git"));
        }
    }
    identity.sort();
    identity.dedup();
    out.sort();
    out.dedup();
    out.retain(|p| identity.binary_search(p).is_err());
    let mut all: Vec<(PathBuf, bool)> = out.into_iter().map(|p| (p, false)).collect();
    all.extend(identity.into_iter().map(|p| (p, true)));
    all
}

/// The directories below `dir` (not through links), to `MAX_MODULE_DEPTH`.
fn below(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth >= MAX_MODULE_DEPTH || out.len() > MAX_INPUTS {
        return;
    }
    for name in crate::hostfs::subdirectories(dir) {
        let sub = dir.join(name);
        out.push(sub.clone());
        below(&sub, depth + 1, out);
    }
}

/// Sandy's state directory (`$XDG_STATE_HOME/sandy`, `~/.local/state/sandy` by default),
/// which no run can reach: the memo, and the walk's record ([`crate::walk::keep`]).
pub fn state_dir(home: Option<&Path>, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let state = env
        .iter()
        .rev()
        .find(|(k, _)| k == "XDG_STATE_HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".local/state")))?;
    Some(state.join("sandy"))
}

/// Where the memo of `roots` lives: Sandy's state directory, one file per project.
fn place(
    home: Option<&Path>,
    env: &[(OsString, OsString)],
    roots: &[PathBuf],
) -> Option<(PathBuf, String)> {
    let state = state_dir(home, env)?;
    let mut h = Sha256::new();
    for r in roots {
        h.update(r.as_os_str().as_bytes());
        h.update([0]);
    }
    let name: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    Some((state.join("git"), format!("{name}.json")))
}

/// The remembered answer for `roots` under `key`, when every input is as it was.
pub fn recall(
    home: Option<&Path>,
    env: &[(OsString, OsString)],
    roots: &[PathBuf],
    key: &str,
) -> Option<GitFacts> {
    let (dir, name) = place(home, env, roots)?;
    let dir = crate::hostfs::Dir::open(&dir).ok()?;
    let bytes = dir.read(&name, MAX_MEMO).ok()??;
    let memo: Memo = serde_json::from_slice(&bytes).ok()?;
    if memo.version != VERSION || memo.key != key {
        return None;
    }
    memo.inputs
        .iter()
        .all(|(path, was)| {
            // A `.git` directory is compared by identity; anything else in full (a
            // `.git` that was absent or a file and is now a directory differs).
            let identity = matches!(was, Print::Directory { .. });
            print(path, identity).as_ref() == Some(was)
        })
        .then_some(memo.facts)
}

/// Remembers `facts` for `roots` under `key`, unless an input changed within
/// [`SETTLED`] of `started` (the scan's start) or cannot be looked at.
pub fn remember(
    home: Option<&Path>,
    env: &[(OsString, OsString)],
    roots: &[PathBuf],
    dotgits: &[DotGit],
    key: &str,
    facts: &GitFacts,
    started: SystemTime,
) {
    let Some((dir, name)) = place(home, env, roots) else {
        return;
    };
    let paths = inputs(roots, dotgits, facts);
    if paths.len() > MAX_INPUTS {
        return;
    }
    let settled = started
        .checked_sub(SETTLED)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| (d.as_secs() as i64, i64::from(d.subsec_nanos())))
        .unwrap_or((0, 0));
    let mut inputs = Vec::with_capacity(paths.len());
    for (path, identity) in paths {
        let Some(p) = print(&path, identity) else {
            return;
        };
        if let Print::Present { mtime, ctime, .. } = &p {
            if *mtime >= settled || *ctime >= settled {
                return;
            }
        }
        inputs.push((path, p));
    }
    let memo = Memo {
        version: VERSION,
        key: key.to_owned(),
        inputs,
        facts: facts.clone(),
    };
    let Ok(bytes) = serde_json::to_vec(&memo) else {
        return;
    };
    if let Ok(dir) = crate::hostfs::open_or_create(&dir, 0o700) {
        let _ = dir.replace(&name, &bytes, 0o600, None);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests make worlds of their own
mod tests {
    use super::*;
    use crate::gitscan::DotGitKind;

    fn env(home: &Path) -> Vec<(OsString, OsString)> {
        vec![
            ("HOME".into(), home.into()),
            ("XDG_STATE_HOME".into(), home.join("state").into()),
        ]
    }

    fn set_old(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(60);
        let f = std::fs::File::options().write(true).open(path).ok();
        if let Some(f) = f {
            f.set_modified(old).unwrap();
        }
    }

    /// Remembered, then used while nothing changed; any input changed, added or removed
    /// makes it unusable; an input changed just before the scan is never remembered.
    #[test]
    fn an_answer_is_used_only_while_every_input_is_unchanged() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let project = home.join("p");
        std::fs::create_dir_all(project.join(".git")).unwrap();
        let config = home.join(".gitconfig");
        std::fs::write(&config, "[user]\n").unwrap();
        let roots = vec![project.clone()];
        let dotgits = vec![DotGit {
            top: project,
            kind: DotGitKind::Directory,
        }];
        let env = env(&home);
        let facts = GitFacts {
            scanned: roots.clone(),
            config_files: vec![config.clone(), home.join(".config/git/config")],
            ..GitFacts::default()
        };
        let key = key(&roots, &dotgits, Some(&home), &env, None);
        // Too fresh: the directories were just made (their change times are now).
        remember(
            Some(&home),
            &env,
            &roots,
            &dotgits,
            &key,
            &facts,
            SystemTime::now(),
        );
        assert_eq!(recall(Some(&home), &env, &roots, &key), None);
        // Settled (the scan "started" later than every input plus the margin).
        let later = SystemTime::now() + SETTLED + Duration::from_secs(1);
        remember(Some(&home), &env, &roots, &dotgits, &key, &facts, later);
        assert_eq!(recall(Some(&home), &env, &roots, &key), Some(facts.clone()));
        // Another key (a new repository found, another variable): not used.
        let other = super::key(&roots, &[], Some(&home), &env, None);
        assert_eq!(recall(Some(&home), &env, &roots, &other), None);
        // A changed file, and an absent one that appears: not used.
        std::fs::write(&config, "[user]\nname = x\n").unwrap();
        set_old(&config);
        assert_eq!(recall(Some(&home), &env, &roots, &key), None);
        remember(Some(&home), &env, &roots, &dotgits, &key, &facts, later);
        assert!(recall(Some(&home), &env, &roots, &key).is_some());
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::write(home.join(".config/git/config"), "").unwrap();
        assert_eq!(recall(Some(&home), &env, &roots, &key), None);
        // A `.git` appearing above the project (an enclosing repository): not used.
        std::fs::remove_file(home.join(".config/git/config")).unwrap();
        remember(Some(&home), &env, &roots, &dotgits, &key, &facts, later);
        assert!(recall(Some(&home), &env, &roots, &key).is_some());
        std::fs::create_dir(home.join(".git")).unwrap();
        assert_eq!(recall(Some(&home), &env, &roots, &key), None);
    }

    #[test]
    fn the_key_holds_what_git_reads_from_the_environment() {
        let roots = vec![PathBuf::from("/p")];
        let base: Vec<(OsString, OsString)> = vec![("HOME".into(), "/h".into())];
        let k = key(&roots, &[], None, &base, None);
        let mut with = base.clone();
        with.push(("TERM".into(), "xterm".into()));
        assert_eq!(key(&roots, &[], None, &with, None), k);
        with.push(("GIT_CONFIG_GLOBAL".into(), "/x".into()));
        assert_ne!(key(&roots, &[], None, &with, None), k);
        let mut xdg = base;
        xdg.push(("XDG_CONFIG_HOME".into(), "/c".into()));
        assert_ne!(key(&roots, &[], None, &xdg, None), k);
    }
}
