//! The host side of an agent's own state (design promise 5 and §4.2): before launch, the
//! state directories and files the profile declares are created when absent (a first
//! launch); after the run, the agent's private copy of its state file is merged back,
//! keeping only the allowlisted keys ([`sandy_policy::statemerge`]).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandy_policy::statedirs::{walk, Decision, StateClass, StateLister};
use sandy_policy::statemerge::{display, merge_json, merge_toml, KeyPath};
use sandy_policy::text::Shown;
use sandy_policy::{Placeholder, ResolvedPolicy, StateFile, StateFormat};

use crate::error::SandyError;
use crate::hostfs::{open_named_dir, Dir, Kind};
use crate::views::PreparedViews;

/// The largest state file Sandy merges.
const MAX_STATE_BYTES: usize = 4 * 1024 * 1024;
/// The most of a login file read to compare its account.
const LOGIN_MAX: usize = 1024 * 1024;

/// What [`create_at_launch`] created.
pub struct Created {
    /// Empty files that only carry a bound private copy, removed after the run.
    mount_points: Vec<PathBuf>,
    /// The run's writable places, which a mount point is located through (no link
    /// followed below them).
    writable: Vec<PathBuf>,
}

/// A launch abandoned before its run (a library caller dropping a prepared launch) or a
/// run over: the mount points are removed either way.
impl Drop for Created {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Creates the agent's absent state directories (empty, 0700, with any missing parents,
/// also 0700) and the empty mount point of a relocated state file's copy (0600), and
/// says so in one stderr line. Something that appeared meanwhile is left as it is. First,
/// what killed runs left in stand-in state directories is recovered.
///
/// Each is made from a handle on its deepest existing ancestor, one name at a time
/// (`mkdirat`, `O_CREAT | O_EXCL | O_NOFOLLOW`): a link a run put on the way is never
/// followed below a place it may write.
pub fn create_at_launch(policy: &ResolvedPolicy) -> Result<Created, SandyError> {
    let writable: Vec<&Path> = policy.writable_paths().collect();
    recover_stale_stand_ins(policy, &writable);
    let mut created: Vec<PathBuf> = Vec::new();
    let mut mount_points = Vec::new();
    // Made one by one; when one cannot be, those made before it are removed again
    // (only while still empty): a launch that fails leaves nothing half-done.
    let made = (|| -> Result<(), SandyError> {
        for creation in &policy.created_at_launch {
            let fail = |step| {
                let path = creation.path.clone();
                move |source| SandyError::File { step, path, source }
            };
            let (Some(parent), Some(name)) = (creation.path.parent(), creation.path.file_name())
            else {
                continue;
            };
            // The missing ancestors, nearest the root first, from the deepest one that exists.
            let mut missing: Vec<&OsStr> = Vec::new();
            let mut existing = parent;
            while !existing_dir(existing) {
                let (Some(up), Some(n)) = (existing.parent(), existing.file_name()) else {
                    break;
                };
                missing.push(n);
                existing = up;
            }
            missing.reverse();
            let mut dir = open_named_dir(existing, writable.iter().copied())
                .map_err(fail("cannot create the agent's state directory"))?;
            for name in missing {
                let here = dir.path().join(name);
                dir = match dir.create_dir(name, 0o700) {
                    Ok(new) => {
                        created.push(here);
                        new
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        dir.open_dir(name)
                            .map_err(fail("cannot create the agent's state directory"))?
                    }
                    Err(e) => {
                        return Err(fail("cannot create the agent's state directory")(
                            refused_by(&dir, e),
                        ))
                    }
                };
            }
            match creation.kind {
                Placeholder::Directory => match dir.create_dir(name, 0o700) {
                    Ok(_) => created.push(creation.path.clone()),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(fail("cannot create the agent's state directory")(
                            refused_by(&dir, e),
                        ))
                    }
                },
                Placeholder::EmptyJsonObject | Placeholder::EmptyFile => {
                    let content: &[u8] = if creation.kind == Placeholder::EmptyJsonObject {
                        b"{}\n"
                    } else {
                        b""
                    };
                    match dir.create_file(name, 0o600) {
                        Ok(mut f) => {
                            f.write_all(content)
                                .map_err(fail("cannot write the agent's state file"))?;
                            if creation.kind == Placeholder::EmptyFile {
                                mount_points.push(creation.path.clone());
                            }
                            created.push(creation.path.clone());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(fail("cannot create the agent's state file")(e)),
                    }
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = made {
        for path in created.iter().chain(&mount_points).rev() {
            if let Ok((dir, name)) = crate::hostfs::locate(path, writable.iter().copied(), false) {
                match dir.entry(&name) {
                    Ok(Some(st)) if st.kind == Kind::Directory => {
                        let _ = dir.remove_dir(&name);
                    }
                    Ok(Some(st)) if st.kind == Kind::File && st.size == 0 => {
                        let _ = dir.remove_file(&name);
                    }
                    _ => {}
                }
            }
        }
        return Err(e);
    }
    // The mount points are not the agent's state (they exist only while it runs, and the
    // dry run lists them): the line names what stays.
    let names: Vec<String> = created
        .iter()
        .filter(|p| !mount_points.contains(p))
        .map(|p| Shown(p).to_string())
        .collect();
    if !names.is_empty() {
        tell!(
            format!(
                "first launch: created {} (empty, yours only)",
                names.join(", ")
            ),
            "first launch of the '{}' profile: created {} (empty, yours only)",
            policy.profile.name,
            names.join(", ")
        );
    }
    Ok(Created {
        mount_points,
        writable: writable.iter().map(|p| p.to_path_buf()).collect(),
    })
}

/// A refusal to create something in `dir`, saying whose the directory is and its mode
/// (`~/.local` owned by root, after a `sudo` install): what the user needs to fix it.
fn refused_by(dir: &Dir, e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return e;
    }
    let Ok(st) = dir.stat() else {
        return e;
    };
    let owner = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(st.uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {}", st.uid), |u| u.name);
    std::io::Error::new(
        e.kind(),
        format!(
            "{} is not writable to you (owned by {owner}, mode {:04o})",
            sandy_policy::text::Tilde(dir.path()),
            st.mode
        ),
    )
}

/// Whether `path` names an existing directory (links followed: asked only on the way to
/// a state directory, where the user's own links lead).
fn existing_dir(path: &Path) -> bool {
    crate::hostfs::canonicalize(path).is_ok_and(|p| Dir::open(&p).is_ok())
}

impl Created {
    /// Removes the mount points [`create_at_launch`] made, unless something wrote them
    /// (once: later calls do nothing).
    pub fn remove(&mut self) {
        let writable: Vec<&Path> = self.writable.iter().map(PathBuf::as_path).collect();
        for path in std::mem::take(&mut self.mount_points) {
            let Ok((dir, name)) = crate::hostfs::locate(&path, writable.iter().copied(), false)
            else {
                continue;
            };
            if dir
                .entry(&name)
                .ok()
                .flatten()
                .is_some_and(|st| st.kind == Kind::File && st.size == 0)
            {
                let _ = dir.remove_file(&name);
            }
        }
    }
}

/// After the run: merges every state file's private copy back into the host file and
/// reports what was kept and what was dropped (key names, never values); then empties
/// each stand-in state directory into the real one. Problems are reported, never fatal:
/// the target's own status stands.
pub fn merge_after_run(policy: &ResolvedPolicy, views: &mut PreparedViews) {
    let writable: Vec<&Path> = policy.writable_paths().collect();
    for file in &policy.state_files {
        if let Err(reason) = merge_one(policy, file, views, &writable) {
            say!(
                "warning: none of the run's changes to {} were kept: {reason}",
                Shown(&file.path)
            );
        }
        if let Some(stand_in) = views.take_stand_in(&file.inside) {
            stand_in.move_back(policy);
        } else if !file.bound {
            // A copy under a name of Sandy's own is gone once merged.
            if let Ok((dir, name)) =
                crate::hostfs::locate(&file.inside, writable.iter().copied(), false)
            {
                let _ = dir.remove_entry(&name);
            }
        }
    }
}

fn merge_one(
    policy: &ResolvedPolicy,
    file: &StateFile,
    views: &PreparedViews,
    writable: &[&Path],
) -> Result<(), String> {
    if views.stand_in(&file.inside).is_some_and(|s| !s.in_place()) {
        say!(
            "{}: the run moved its stand-in state directory away (something else is at its \
             name now); what it held is taken from the directory itself, nothing from what \
             is at its name",
            Shown(file.inside.parent().unwrap_or(&file.inside))
        );
    }
    let (Some(after), Some(before)) = (
        views.read_private_copy(&file.inside, writable),
        views.original(&file.inside),
    ) else {
        return Ok(());
    };
    let after = after.map_err(|e| format!("cannot read the sandbox's copy: {e}"))?;
    // The inside-only settings are Sandy's, never the run's changes: whatever the run did
    // to them (even removing them) is not one.
    let after =
        sandy_policy::statemerge::with_inside_settings(file.format, &after, &file.inside_settings)
            .unwrap_or(after);
    if after == before {
        return Ok(());
    }
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    };
    let before = text(before, "the state file at launch")?;
    let after = text(&after, "the sandbox's copy")?;
    // The name may be a symlink (a dotfile manager): the file it leads to is rewritten.
    // Every profile protects its state file read-only, so no run made that link.
    let (dir, name) = crate::hostfs::locate(&file.path, writable.iter().copied(), true)
        .map_err(|e| format!("cannot open the host's state file's directory: {e}"))?;
    let _lock = Lock::take(&dir, &name);
    let existing = dir
        .entry(&name)
        .map_err(|e| format!("cannot look at the host's state file: {e}"))?;
    let current = match existing {
        None => None,
        Some(_) => match dir.read(&name, MAX_STATE_BYTES) {
            Ok(Some(bytes)) => Some(text(&bytes, "the host's state file")?),
            Ok(None) => return Err("the host's state file is not a regular file".to_owned()),
            Err(e) => return Err(format!("cannot read the host's state file: {e}")),
        },
    };
    let project = policy.working_directory.to_string_lossy();
    let current = current.as_deref();
    let (merged, applied, dropped) = match file.format {
        StateFormat::Json => {
            let outcome = merge_json(&before, &after, current, &file.persist, &project)
                .map_err(|e| e.to_string())?;
            let merged = match &outcome.merged {
                Some(value) => {
                    let mut json = serde_json::to_string_pretty(value)
                        .map_err(|e| format!("cannot render the merged state: {e}"))?;
                    json.push('\n');
                    Some(json)
                }
                None => None,
            };
            (merged, outcome.applied, outcome.dropped)
        }
        StateFormat::Toml => {
            let outcome = merge_toml(&before, &after, current, &file.persist, &project)
                .map_err(|e| e.to_string())?;
            (outcome.merged, outcome.applied, outcome.dropped)
        }
    };
    if let Some(merged) = &merged {
        // The host file's mode and owner stay.
        let (mode, owner) = existing.map_or((0o600, None), |st| (st.mode, Some((st.uid, st.gid))));
        dir.replace(&name, merged.as_bytes(), mode, owner)
            .map_err(|e| format!("cannot write the merged state: {e}"))?;
    }
    report(&file.path, &applied, &dropped);
    Ok(())
}

fn report(path: &Path, applied: &[KeyPath], dropped: &[KeyPath]) {
    if dropped.is_empty() {
        return;
    }
    let names: Vec<String> = dropped.iter().map(|k| display(k)).collect();
    // Without -v, every name still: a planted hook or server is named either way.
    tell!(
        format!(
            "not kept: the run's changes to {} in {} (agent settings Sandy does not keep)",
            names.join(", "),
            Shown(path)
        ),
        "{}: not kept: the run's changes to {}: settings the agent changed in its state \
         that Sandy does not carry over to later launches (Sandy does not know them, or \
         they could make a later launch run code); kept {} known setting(s)",
        Shown(path),
        names.join(", "),
        applied.len()
    );
}

/// A stand-in state directory (Codex's `CODEX_HOME` inside: `~/.codex/.sandy-codex-home-PID`):
/// a private copy of the state file, and a link to every other entry of the real
/// directory. It is made, locked and emptied back through handles: the real directory
/// (`mirror`, opened once) and the stand-in itself. A concurrent run that can write the
/// real directory may swap the stand-in's name for a link (to `~/.ssh`) at any moment;
/// what is moved back is what the stand-in handle holds, moved by `renameat` from it
/// into the real directory's handle, never by a name looked up again.
#[derive(Debug)]
pub struct StandIn {
    mirror: Dir,
    /// The stand-in's name in the real directory.
    name: OsString,
    /// The state file's copy's name in the stand-in.
    own: OsString,
    /// The stand-in, locked (exclusive) until it is emptied back: a later launch's
    /// recovery never touches it meanwhile.
    dir: Dir,
    /// Names that are an empty directory of the run's own instead of a link (the
    /// profile's `private_dirs`): removed with the stand-in, never moved back.
    private: Vec<OsString>,
}

impl StandIn {
    /// Makes this run's stand-in for `file` in the real directory `mirror`: whatever a
    /// killed run left under the same name is removed first (unless a live run holds
    /// it), then a fresh directory (0700) with the copy `content` and the links.
    pub fn prepare(
        file: &StateFile,
        mirror: &Path,
        writable: &[&Path],
        content: &[u8],
    ) -> std::io::Result<StandIn> {
        let (Some(dir_path), Some(own)) = (file.inside.parent(), file.inside.file_name()) else {
            return Err(std::io::Error::other("the stand-in has no name"));
        };
        if dir_path.parent() != Some(mirror) {
            return Err(std::io::Error::other(
                "the stand-in is not directly in the real state directory",
            ));
        }
        let Some(name) = dir_path.file_name() else {
            return Err(std::io::Error::other("the stand-in has no name"));
        };
        let mirror = open_named_dir(mirror, writable.iter().copied())?;
        // A concurrent run that can write the real directory may swap names there at any
        // moment (a denial, never a way out: every step below is on a handle); each step
        // is tried again a few times before the launch gives up.
        let mut last = std::io::Error::other("no attempt");
        for _ in 0..32 {
            match Self::fresh(&mirror, name) {
                Ok(dir) => {
                    dir.write_new(own, content, 0o600)?;
                    let stand_in = StandIn {
                        mirror,
                        name: name.to_os_string(),
                        own: own.to_os_string(),
                        dir,
                        private: private_dirs(file),
                    };
                    stand_in.link_mirror()?;
                    return Ok(stand_in);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Clears `name` in the real directory (what a killed run, or anyone, left there,
    /// unless a live run holds it), then makes a new, locked, empty directory under a
    /// first name no recovery takes (`.sandy-new-stand-in-XXXXXX`) and gives it `name`
    /// (`RENAME_NOREPLACE`): another launch's recovery never meets it unlocked.
    fn fresh(mirror: &Dir, name: &OsStr) -> std::io::Result<Dir> {
        if let Some(st) = mirror.entry(name)? {
            if st.kind == Kind::Directory {
                let old = mirror.open_dir(name)?;
                if !old.try_lock(true)? {
                    return Err(std::io::Error::other("a live run uses the same stand-in"));
                }
                old.remove_contents(&|| false)?;
                drop(old);
            }
            mirror.remove_entry(name)?;
        }
        let first = OsString::from(format!(
            ".sandy-new-stand-in-{}",
            crate::rundir::random_suffix()
        ));
        let dir = mirror.create_dir(&first, 0o700)?;
        let placed = dir.try_lock(true).and_then(|locked| {
            if !locked {
                return Err(std::io::Error::other(
                    "the new stand-in was locked by another",
                ));
            }
            mirror.rename_noreplace(&first, mirror, name)
        });
        if let Err(e) = placed {
            let _ = mirror.remove_dir(&first);
            return Err(e);
        }
        Ok(dir)
    }

    /// The prefix every stand-in of this kind has (its name without the pid).
    fn prefix(name: &OsStr) -> Option<&str> {
        let name = name.to_str()?;
        let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
        (prefix != name).then_some(prefix)
    }

    /// Whether `entry` of the real directory is a stand-in (this run's or another's).
    fn is_stand_in(&self, entry: &OsStr) -> bool {
        Self::prefix(&self.name).is_some_and(|p| entry.to_str().is_some_and(|n| n.starts_with(p)))
    }

    /// Links every entry of the real directory into the stand-in (by its name, so that
    /// what the sandbox protects there stays protected), except the state file itself
    /// (the private copy is there) and the stand-in directories; the private directories
    /// are made empty (0700) instead, whether or not the real directory has them.
    fn link_mirror(&self) -> std::io::Result<()> {
        for name in &self.private {
            self.dir.create_dir(name, 0o700)?;
        }
        for entry in self.mirror.entries(crate::hostfs::MAX_ENTRIES)? {
            if entry.name == self.own
                || self.is_stand_in(&entry.name)
                || self.private.contains(&entry.name)
            {
                continue;
            }
            self.dir
                .symlink(self.mirror.path().join(&entry.name), &entry.name)?;
        }
        Ok(())
    }

    /// Whether the stand-in's name still leads to this directory (the run may have
    /// renamed it and put something else, a link, in its place).
    pub fn in_place(&self) -> bool {
        match (self.mirror.entry(&self.name), self.dir.stat()) {
            (Ok(Some(at_name)), Ok(own)) => at_name.same_file(&own),
            _ => false,
        }
    }

    /// What the sandbox left in the state file's copy.
    pub fn read_copy(&self, max: usize) -> std::io::Result<Option<Vec<u8>>> {
        self.dir.read(&self.own, max)
    }

    /// After the run: what the agent created or replaced in the stand-in (a first
    /// session's `sessions`, `log` and `tmp`, a login's `auth.json`, a file it rewrote by
    /// renaming over the link) moves to the real state directory, as if the agent had
    /// written it there (it may write there anyway). Never the state file (it is
    /// merged), nor a name the profile protects (reported). The stand-in is then removed.
    pub fn move_back(self, policy: &ResolvedPolicy) {
        let mirror_path = self.mirror.path().to_path_buf();
        let protected = |name: &OsStr| {
            let real = mirror_path.join(name);
            // A name the state directory's rules do not let the agent write (default-deny).
            let denied = policy
                .agent_state
                .iter()
                .find(|d| d.root == mirror_path)
                .is_some_and(|d| match d.decide(&[name]) {
                    Decision::Covered(rule) => !rule.class.writes(),
                    Decision::Unclassified => true,
                    Decision::Mixed => false,
                });
            denied
                || policy
                    .protections
                    .iter()
                    .any(|p| p.path == real || p.path.starts_with(&real))
        };
        let state_dir = policy.agent_state.iter().find(|d| d.root == mirror_path);
        // A login that names another account than the real one at launch (the run
        // replaced Sandy's link to it): never moved back.
        let other_account = |name: &OsStr| {
            let Some(account) =
                state_dir.and_then(|d| d.accounts.iter().find(|a| OsStr::new(&a.path) == name))
            else {
                return false;
            };
            let read = |dir: &Dir| dir.read(name, LOGIN_MAX).ok().flatten();
            let was = read(&self.mirror)
                .map(|b| sandy_policy::statedirs::account_identity(&b, &account.identity))
                .unwrap_or_default();
            let now = read(&self.dir)
                .map(|b| sandy_policy::statedirs::account_identity(&b, &account.identity))
                .unwrap_or_default();
            !was.is_empty() && now != was
        };
        // Memory and the login the run replaced: named.
        let watched = |name: &OsStr| {
            state_dir.is_some_and(|d| {
                matches!(
                    d.decide(&[name]),
                    Decision::Covered(rule)
                        if matches!(rule.class, StateClass::Watched | StateClass::Login)
                )
            })
        };
        let mut not_kept = Vec::new();
        let mut failed = Vec::new();
        let entries = self
            .dir
            .entries(crate::hostfs::MAX_ENTRIES)
            .unwrap_or_default();
        for entry in entries {
            let name = entry.name.as_os_str();
            let real = mirror_path.join(name);
            if name == self.own || self.is_stand_in(name) || self.private.iter().any(|p| p == name)
            {
                continue;
            }
            // Still the link Sandy made: the agent wrote through it.
            if entry.kind == Kind::Symlink && self.dir.read_link(name).is_ok_and(|t| t == real) {
                continue;
            }
            if protected(name) {
                not_kept.push(Shown(&real).to_string());
                continue;
            }
            if other_account(name) {
                say!(
                    "refused: the run signed {} in to another account; the login from before \
                     the run stays (a refresh of the same account is kept; sign in to another \
                     account outside Sandy)",
                    Shown(&real)
                );
                continue;
            }
            let replaced = watched(name) && self.mirror.entry(name).ok().flatten().is_some();
            if self.dir.rename(name, &self.mirror, name).is_err() {
                failed.push(Shown(&real).to_string());
            } else if replaced {
                say!(
                    "note: {} was replaced inside the sandbox ({}'s memory or login, which \
                     its next launch reads); review it",
                    Shown(&real),
                    policy.profile.name
                );
            }
        }
        let here = mirror_path.join(&self.name);
        if !not_kept.is_empty() {
            say!(
                "{}: not kept: what the run wrote at {} (protected: it could change a \
                 later launch)",
                Shown(&here),
                not_kept.join(", ")
            );
        }
        if !failed.is_empty() {
            say!(
                "warning: could not move {} back from the run's stand-in directory {} \
                 (left there)",
                failed.join(", "),
                Shown(&here)
            );
            let _ = self.dir.remove_entry(&self.own);
            return;
        }
        // What is left is Sandy's links and what was not kept: removed through the
        // handle. Then the directory itself, under whatever name it has now (the run, or
        // a concurrent one, may have renamed it), found by its inode; and, when the run
        // put a link at its name, that link (never followed).
        if self.dir.remove_contents(&|| false).is_ok() {
            let own = self.dir.stat().ok();
            let entries = self
                .mirror
                .entries(crate::hostfs::MAX_ENTRIES)
                .unwrap_or_default();
            for entry in entries.iter().filter(|e| e.kind == Kind::Directory) {
                let here = self.mirror.entry(&entry.name).ok().flatten();
                if let (Some(own), Some(here)) = (own, here) {
                    if own.same_file(&here) {
                        let _ = self.mirror.remove_dir(&entry.name);
                        break;
                    }
                }
            }
            if let Ok(Some(st)) = self.mirror.entry(&self.name) {
                if st.kind == Kind::Symlink {
                    let _ = self.mirror.remove_file(&self.name);
                }
            }
        }
    }
}

/// The profile's private directories of a stand-in, as names.
fn private_dirs(file: &StateFile) -> Vec<OsString> {
    file.private_dirs.iter().map(OsString::from).collect()
}

/// Before launch: the stand-in directories of runs that were killed before their merge
/// (`NAME-PID` beside this run's `NAME-OWNPID`, whose lock nobody holds) are emptied into
/// the real state directory the same way, and removed. Their state file's changes are
/// lost (nothing says what they started from), never applied. A live run's stand-in is
/// locked, and left alone.
fn recover_stale_stand_ins(policy: &ResolvedPolicy, writable: &[&Path]) {
    for file in &policy.state_files {
        let (Some(mirror), Some(dir), Some(own)) = (
            file.mirror.as_deref(),
            file.inside.parent(),
            file.inside.file_name(),
        ) else {
            continue;
        };
        let Some(this) = dir.file_name() else {
            continue;
        };
        let Some(prefix) = StandIn::prefix(this) else {
            continue;
        };
        let Ok(mirror) = open_named_dir(mirror, writable.iter().copied()) else {
            continue;
        };
        let Ok(entries) = mirror.entries(crate::hostfs::MAX_ENTRIES) else {
            continue;
        };
        for entry in entries {
            let stale = entry.name.to_str().is_some_and(|n| {
                n.strip_prefix(prefix)
                    .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            });
            if !stale || entry.name == this || entry.kind != Kind::Directory {
                continue;
            }
            let Ok(stale_dir) = mirror.open_dir(&entry.name) else {
                continue;
            };
            if !stale_dir.try_lock(true).unwrap_or(false) {
                continue;
            }
            let _ = stale_dir.remove_entry(own);
            let Ok(mirror_again) = mirror.try_clone() else {
                continue;
            };
            StandIn {
                mirror: mirror_again,
                name: entry.name,
                own: own.to_os_string(),
                dir: stale_dir,
                private: private_dirs(file),
            }
            .move_back(policy);
        }
    }
}

/// The lock directory Claude Code itself takes beside its state file (`NAME.lock`), so a
/// session outside does not write between Sandy's read and rename. Given up after two
/// seconds (a stale lock from a crashed session): the merge then goes ahead.
struct Lock<'a> {
    dir: &'a Dir,
    name: Option<OsString>,
}

impl<'a> Lock<'a> {
    fn take(dir: &'a Dir, file: &OsStr) -> Lock<'a> {
        let mut name = file.to_os_string();
        name.push(".lock");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match dir.create_dir(&name, 0o700) {
                Ok(_) => {
                    return Lock {
                        dir,
                        name: Some(name),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if Instant::now() >= deadline {
                        return Lock { dir, name: None };
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return Lock { dir, name: None },
            }
        }
    }
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        if let Some(name) = &self.name {
            let _ = self.dir.remove_dir(name);
        }
    }
}

/// A state directory seen after the run through handles: nothing followed below its root
/// (a run may have put links there).
struct HandleLister<'a>(&'a Dir);

impl HandleLister<'_> {
    fn at(&self, rel: &Path) -> Option<Dir> {
        if rel.as_os_str().is_empty() {
            self.0.try_clone().ok()
        } else {
            self.0.open_dir(rel).ok()
        }
    }
}

impl StateLister for HandleLister<'_> {
    fn list(&self, rel: &Path, max: usize) -> Option<Vec<(OsString, bool)>> {
        let dir = self.at(rel)?;
        let entries = dir.entries(max).ok()?;
        Some(
            entries
                .into_iter()
                .map(|e| (e.name, e.kind == Kind::Directory))
                .collect(),
        )
    }

    fn lookup(&self, rel: &Path, name: &OsStr) -> Option<bool> {
        let st = self.at(rel)?.entry(name).ok()??;
        Some(st.kind == Kind::Directory)
    }
}

/// After the run (default-deny agent state, [`sandy_policy::statedirs`]): every name in
/// an agent's state directory that its rules keep read-only and that did not exist at
/// launch was created by the run. It is moved out, into `moved` (Sandy's state, which no
/// grant reaches), and named; where it cannot be moved (another filesystem) it is
/// removed, and named. Through handles: nothing the run put there is followed.
pub fn sweep_state_dirs(policy: &ResolvedPolicy, moved: Option<&Path>) {
    let writable: Vec<&Path> = policy.writable_paths().collect();
    let mut dest: Option<Dir> = None;
    for state in &policy.agent_state {
        let Ok(root) = crate::hostfs::open_named_dir(&state.root, writable.iter().copied()) else {
            continue;
        };
        // A state file the merge wrote (Codex's first `config.toml`) is Sandy's doing.
        let merged = |rel: &Path| {
            let path = state.root.join(rel);
            policy.state_files.iter().any(|f| f.path == path)
        };
        let created: Vec<_> = walk(state, &HandleLister(&root))
            .into_iter()
            // A name below one protected at launch existed then: the run could not create
            // it (a directory protected as one, Claude Code's `projects`).
            .filter(|f| {
                !state
                    .read_only_at_launch
                    .iter()
                    .any(|r| f.rel.starts_with(r))
                    && !merged(&f.rel)
            })
            .collect();
        for found in created {
            let (Some(parent), Some(name)) = (found.rel.parent(), found.rel.file_name()) else {
                continue;
            };
            let Some(dir) = HandleLister(&root).at(parent) else {
                continue;
            };
            let shown = state.root.join(&found.rel);
            if dest.is_none() {
                dest = moved.and_then(|m| crate::hostfs::open_or_create(m, 0o700).ok());
            }
            let flat: String = found
                .rel
                .to_string_lossy()
                .chars()
                .map(|c| if c == '/' { '%' } else { c })
                .collect();
            let moved_to = dest.as_ref().and_then(|d| {
                dir.rename_noreplace(name, d, &flat)
                    .ok()
                    .map(|()| d.path().join(&flat))
            });
            match moved_to {
                Some(to) => say!(
                    "moved {} out of {}'s state to {}: the run created it, and it is not \
                     among what {} writes in ordinary use (its next launch could read it)",
                    Shown(&shown),
                    state.profile,
                    Shown(&to),
                    state.profile
                ),
                None => {
                    let removed = match dir.entry(name) {
                        Ok(Some(st)) if st.kind == Kind::Directory => {
                            dir.remove_tree(name, &|| false)
                        }
                        Ok(Some(_)) => dir.remove_file(name),
                        _ => Ok(()),
                    };
                    if removed.is_ok() {
                        say!(
                            "removed {}: the run created it in {}'s state, and it is not \
                             among what {} writes in ordinary use (its next launch could \
                             read it)",
                            Shown(&shown),
                            state.profile,
                            state.profile
                        );
                    } else {
                        say!(
                            "warning: {} was created by the run in {}'s state and could \
                             not be moved out; remove it before the next launch",
                            Shown(&shown),
                            state.profile
                        );
                    }
                }
            }
        }
    }
}
