//! Sandy's per-run directories: the private `/tmp` of a run (`sandy-XXXXXX`) and the
//! directory of its file copies (`sandy-views-XXXXXX`), mode 0700, removed after the
//! run. They live in the user's own directory of runs in the temporary base
//! (`$TMPDIR/sandy-UID`, or `/tmp/sandy-UID`; 0700), which no grant may reach: a read
//! grant covering it gets it masked, any other grant of it is refused (the resolver's
//! `check_own`).
//!
//! Each is locked (`flock`, exclusive) by its supervisor for the whole run. A supervisor
//! killed with SIGKILL cannot remove its directory, but its lock goes with it: a later
//! run removes every per-run directory of the same owner whose lock nobody holds.
//!
//! A directory is never seen by that sweep before it is locked: it is made under a name
//! the sweep does not take (`.sandy-new-XXXXXX`), locked, and only then renamed to its
//! final name (`renameat2(RENAME_NOREPLACE)`). (Without this, a sweep could take the lock
//! of a directory made a moment before, in the gap before its own run locked it, and
//! remove it: concurrent runs failed with "cannot create the private temporary
//! directory".) A directory left under its first name by a supervisor killed in that
//! gap of microseconds is removed by a later sweep once it is an hour old and unlocked.
//!
//! Everything here works from a handle on the base and on each directory
//! ([`crate::hostfs`]): what a run left inside its private `/tmp` (links, FIFOs,
//! unreadable directories) is removed without following anything.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::SandyError;
use crate::hostfs::{Dir, Kind};

/// Prefix of every per-run directory's final name: `sandy-XXXXXX`, or `sandy-KIND-XXXXXX`.
const PREFIX: &str = "sandy-";
/// Prefix of a per-run directory not yet locked (never swept while younger than
/// [`UNLOCKED_AGE`]).
const NEW_PREFIX: &str = ".sandy-new-";
/// Length of the random suffix of a per-run directory's name.
const RANDOM: usize = 6;
/// The kinds of per-run directory besides the private `/tmp` (`sandy-KIND-XXXXXX`).
const KINDS: &[&str] = &["views"];
/// How old a directory still under its first name must be before a sweep removes it.
const UNLOCKED_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The temporary base: `$TMPDIR` when it names an existing absolute directory, else
/// `/tmp`.
pub fn tmp_base(host: &sandy_policy::HostContext) -> PathBuf {
    host.var("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// A name for the private `/tmp` of a launch that is only resolved (a dry run, `sandy
/// why`): in the user's directory of runs, like a real one, so that the resolution's
/// refusals are the same.
pub fn unmade_private_tmp(host: &sandy_policy::HostContext) -> PathBuf {
    runs_dir(&tmp_base(host)).join("sandy-XXXXXX")
}

/// The user's directory of runs in the temporary base `base` (`sandy-UID`).
pub fn runs_dir(base: &Path) -> PathBuf {
    base.join(format!("sandy-{}", rustix::process::geteuid().as_raw()))
}

/// Makes (0700) or opens the user's directory of runs in `base` ([`runs_dir`]): an
/// existing one must be a real directory of this user's, and is made 0700 again.
pub fn make_runs_dir(base: &Path) -> Result<PathBuf, SandyError> {
    let path = runs_dir(base);
    let err = |source| SandyError::File {
        step: "cannot make Sandy's directory of runs",
        path: path.clone(),
        source,
    };
    let (Some(name), Ok(base_dir)) = (path.file_name(), Dir::open(base)) else {
        return Err(err(io::ErrorKind::NotFound.into()));
    };
    let dir = base_dir.ensure_dir(name, 0o700).map_err(err)?;
    if dir.stat().map_err(err)?.mode != 0o700 {
        dir.set_mode(0o700).map_err(err)?;
    }
    Ok(path)
}

/// A locked per-run directory, removed (with everything in it) when dropped.
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    base: Dir,
    name: OsString,
    /// The open directory, which carries the lock (close-on-exec: no child holds it).
    dir: Dir,
}

impl RunDir {
    /// The run's private `/tmp`: `sandy-XXXXXX` under `base`.
    pub fn create(base: &Path) -> Result<RunDir, SandyError> {
        RunDir::create_kind(base, None)
    }

    /// A locked per-run directory `sandy-XXXXXX` (or `sandy-KIND-XXXXXX`) under `base`,
    /// mode 0700. `kind` is one of [`KINDS`].
    pub fn create_kind(base: &Path, kind: Option<&str>) -> Result<RunDir, SandyError> {
        let err = |source| SandyError::File {
            step: "cannot create a private temporary directory in",
            path: base.to_path_buf(),
            source,
        };
        let base_dir = Dir::open(base).map_err(err)?;
        let prefix = match kind {
            Some(k) => format!("{PREFIX}{k}-"),
            None => PREFIX.to_owned(),
        };
        let (new_name, dir) = fresh(&base_dir, NEW_PREFIX).map_err(err)?;
        if !dir.try_lock(true).map_err(err)? {
            return Err(err(io::Error::other(
                "its new directory was locked by another",
            )));
        }
        for _ in 0..64 {
            let name = OsString::from(format!("{prefix}{}", random_suffix()));
            match base_dir.rename_noreplace(&new_name, &base_dir, &name) {
                Ok(()) => {
                    return Ok(RunDir {
                        path: base.join(&name),
                        base: base_dir,
                        name,
                        dir,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    let _ = base_dir.remove_dir(&new_name);
                    return Err(err(e));
                }
            }
        }
        let _ = base_dir.remove_dir(&new_name);
        Err(err(io::Error::other("no free name")))
    }

    /// Its name in the temporary base.
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// The open directory (its lock is this value's).
    pub fn dir(&self) -> &Dir {
        &self.dir
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = remove_locked(&self.base, &self.name, &self.dir, &|| false) {
            say!(
                "cannot remove the private temporary directory {}: {e}",
                sandy_policy::text::Shown(&self.path)
            );
        }
    }
}

/// Makes a new directory `PREFIXXXXXXX` (0700) in `base` and opens it.
fn fresh(base: &Dir, prefix: &str) -> io::Result<(OsString, Dir)> {
    for _ in 0..64 {
        let name = OsString::from(format!("{prefix}{}", random_suffix()));
        match base.create_dir(&name, 0o700) {
            Ok(dir) => return Ok((name, dir)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free name"))
}

/// Six random letters and digits (from the kernel's random pool, through the standard
/// library's hasher keys; a name only has to be unguessable enough not to collide).
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut bits = hasher.finish();
    (0..RANDOM)
        .map(|_| {
            let c = CHARS[(bits % CHARS.len() as u64) as usize];
            bits /= CHARS.len() as u64;
            char::from(c)
        })
        .collect()
}

/// Removes the directory `name` in `base` whose open, locked handle is `dir`: its
/// content through the handle (whatever is at the name meanwhile), then the name, which
/// only goes if it is an empty directory.
fn remove_locked(base: &Dir, name: &OsStr, dir: &Dir, stop: &dyn Fn() -> bool) -> io::Result<()> {
    dir.remove_contents(stop)?;
    match base.remove_dir(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Whether `name` has the shape of a per-run directory's final name.
fn is_run_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PREFIX) else {
        return false;
    };
    let (kind, random) = match rest.rsplit_once('-') {
        Some((kind, random)) => (Some(kind), random),
        None => (None, rest),
    };
    // Only the kinds a run creates: other directories of Sandy's with the same shape
    // (`sandy-selftest-XXXXXX`, a self-test world in use) are never swept.
    random.len() == RANDOM
        && random.bytes().all(|b| b.is_ascii_alphanumeric())
        && kind.is_none_or(|k| KINDS.contains(&k))
}

/// Whether `name` has the shape of a per-run directory not yet renamed.
fn is_new_name(name: &str) -> bool {
    name.strip_prefix(NEW_PREFIX)
        .is_some_and(|r| r.len() == RANDOM && r.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The per-run directories in the temporary base that are not this run's (`own`): each
/// is removed by [`Stale::remove`] only when its lock is free.
#[derive(Debug, Default)]
pub struct Stale {
    base: Option<Dir>,
    names: Vec<OsString>,
}

impl Stale {
    /// Looks for them in `base`.
    pub fn find(base: &Path, own: &[OsString]) -> Stale {
        let Ok(dir) = Dir::open(base) else {
            return Stale::default();
        };
        let Ok(entries) = dir.entries_prefix(crate::hostfs::MAX_ENTRIES) else {
            return Stale::default();
        };
        let names = entries
            .into_iter()
            .filter(|e| e.kind == Kind::Directory)
            .filter(|e| {
                e.name
                    .to_str()
                    .is_some_and(|n| is_run_dir_name(n) || is_new_name(n))
            })
            .filter(|e| !own.contains(&e.name))
            .map(|e| e.name)
            .collect();
        Stale {
            base: Some(dir),
            names,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Removes each whose lock it can take, until `stop` says so.
    pub fn remove(&self, stop: &dyn Fn() -> bool) {
        let Some(base) = &self.base else { return };
        for name in &self.names {
            if stop() {
                return;
            }
            remove_if_stale(base, name, stop);
        }
    }
}

/// Removes the per-run directory `name` in `base` that a run whose supervisor died left
/// behind, only when everything proves it stale: a real directory (not a link) of this
/// user's with mode 0700 whose lock this process can take, which a live supervisor would
/// hold (and, still under its first name, an hour old). The lock is held while it is
/// removed.
fn remove_if_stale(base: &Dir, name: &OsStr, stop: &dyn Fn() -> bool) {
    let Ok(dir) = base.open_dir(name) else {
        return;
    };
    let Ok(st) = dir.stat() else { return };
    if st.uid != rustix::process::geteuid().as_raw() || st.mode != 0o700 {
        return;
    }
    if name.to_str().is_some_and(is_new_name) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let age = now.saturating_sub(u64::try_from(st.mtime.0).unwrap_or(u64::MAX));
        if age < UNLOCKED_AGE.as_secs() {
            return;
        }
    }
    if !dir.try_lock(true).unwrap_or(false) {
        return;
    }
    let _ = remove_locked(base, name, &dir, stop);
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn run_dir_names_are_recognised_strictly() {
        for ok in ["sandy-a1B2c3", "sandy-views-Zz09aa"] {
            assert!(is_run_dir_name(ok), "{ok}");
        }
        for not in [
            "sandy-",
            "sandy-abc",
            "sandy-abcdefg",
            "sandy-ab.def",
            "sandy--abcdef",
            "sandy-Views-abcdef",
            "sandy-vi3ws-abcdef",
            "sandybox-abcdef",
            "other-abcdef",
            "sandy-build",
            "sandy-x-000000",
            "sandy-selftest-a1b2c3",
            ".sandy-new-abcdef",
        ] {
            assert!(!is_run_dir_name(not), "{not}");
        }
        assert!(is_new_name(".sandy-new-abc123"));
        assert!(!is_new_name(".sandy-new-abc12"));
    }

    #[test]
    fn a_locked_run_dir_is_kept_and_an_unlocked_one_is_swept() {
        let base = tempfile::tempdir().unwrap();
        let live = RunDir::create(base.path()).unwrap();
        let kind = RunDir::create_kind(base.path(), Some("views")).unwrap();
        assert!(is_run_dir_name(live.name.to_str().unwrap()));
        assert!(kind.name.to_str().unwrap().starts_with("sandy-views-"));
        let meta = std::fs::metadata(&live.path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
        std::fs::write(live.path.join("data"), "x").unwrap();
        // A supervisor that died: its directory stays, unlocked, with what a run left.
        let stale = base.path().join("sandy-Dead01");
        std::fs::create_dir(&stale).unwrap();
        std::fs::create_dir(stale.join("sub")).unwrap();
        std::fs::write(stale.join("sub/secret"), "s").unwrap();
        std::fs::set_permissions(stale.join("sub"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A link with the shape, to a directory that must stay.
        let victim = base.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("keep"), "k").unwrap();
        std::os::unix::fs::symlink(&victim, base.path().join("sandy-Link01")).unwrap();
        // Not provably Sandy's: another shape, or another mode.
        let other = base.path().join("sandy-build");
        std::fs::create_dir(&other).unwrap();
        let open_mode = base.path().join("sandy-Open01");
        std::fs::create_dir(&open_mode).unwrap();
        std::fs::set_permissions(&open_mode, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A directory still under its first name, young: a run about to lock it.
        let young = base.path().join(".sandy-new-Young1");
        std::fs::create_dir(&young).unwrap();
        std::fs::set_permissions(&young, std::fs::Permissions::from_mode(0o700)).unwrap();

        Stale::find(base.path(), &[]).remove(&|| false);
        assert!(
            live.path.join("data").exists(),
            "a live run's directory was swept"
        );
        assert!(kind.path.exists());
        assert!(!stale.exists(), "the stale directory stayed");
        assert!(other.exists() && open_mode.exists() && young.exists());
        assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"k");
        let path = live.path.clone();
        drop(live);
        assert!(!path.exists());
    }

    #[test]
    fn this_runs_own_are_not_candidates() {
        let base = tempfile::tempdir().unwrap();
        let own = RunDir::create(base.path()).unwrap();
        let views = RunDir::create_kind(base.path(), Some("views")).unwrap();
        let mine = [own.name.clone(), views.name.clone()];
        assert!(Stale::find(base.path(), &mine).is_empty());
        let other = RunDir::create(base.path()).unwrap();
        let found = Stale::find(base.path(), &mine);
        assert_eq!(found.names, vec![other.name.clone()]);
        found.remove(&|| false);
        assert!(other.path.exists(), "a locked directory was removed");
    }

    /// Runs creating their directories while others sweep never lose one.
    #[test]
    fn creation_and_sweeps_never_meet() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().to_path_buf();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let dir = RunDir::create(&path).unwrap();
                        Stale::find(&path, std::slice::from_ref(&dir.name)).remove(&|| false);
                        assert!(dir.path.is_dir(), "a new directory was swept");
                        dir.dir().write_new("f", b"x", 0o600).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
    }
}
