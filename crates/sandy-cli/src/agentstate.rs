//! The host side of an agent's own state (design promise 5 and §4.2): before launch, the
//! state directories and files the profile declares are created when absent (a first
//! launch); after the run, the agent's private copy of its state file is merged back,
//! keeping only the allowlisted keys ([`sandy_policy::statemerge`]).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandy_policy::statemerge::{display, merge_json, merge_toml, KeyPath};
use sandy_policy::{Placeholder, ResolvedPolicy, StateFile, StateFormat};

use crate::error::SandyError;
use crate::views::{read_bounded, read_bounded_nofollow, PreparedViews};

/// What [`create_at_launch`] created.
pub struct Created {
    /// Empty files that only carry a bound private copy, removed after the run.
    mount_points: Vec<PathBuf>,
}

/// Creates the agent's absent state directories (empty, 0700, with any missing parents,
/// also 0700) and the empty mount point of a relocated state file's copy (0600), and
/// says so in one stderr line. Something that appeared meanwhile is left as it is. First,
/// what killed runs left in stand-in state directories is recovered.
pub fn create_at_launch(policy: &ResolvedPolicy) -> Result<Created, SandyError> {
    recover_stale_stand_ins(policy);
    let io = |step| move |source| SandyError::Io { step, source };
    let mut created: Vec<PathBuf> = Vec::new();
    let mut mount_points = Vec::new();
    for creation in &policy.created_at_launch {
        if std::fs::symlink_metadata(&creation.path).is_ok() {
            continue;
        }
        match creation.kind {
            Placeholder::Directory => {
                let mut missing: Vec<&Path> = creation
                    .path
                    .ancestors()
                    .take_while(|a| std::fs::symlink_metadata(a).is_err())
                    .collect();
                missing.reverse();
                for dir in missing {
                    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                        Ok(()) => {
                            // Exactly 0700, whatever the umask.
                            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                                .map_err(io("cannot set the mode of an agent state directory"))?;
                            created.push(dir.to_path_buf());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(io("cannot create the agent's state directory")(e));
                        }
                    }
                }
            }
            Placeholder::EmptyJsonObject | Placeholder::EmptyFile => {
                let content: &[u8] = if creation.kind == Placeholder::EmptyJsonObject {
                    b"{}\n"
                } else {
                    b""
                };
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                    .open(&creation.path);
                match file {
                    Ok(mut f) => {
                        f.write_all(content)
                            .map_err(io("cannot write the agent's state file"))?;
                        if creation.kind == Placeholder::EmptyFile {
                            mount_points.push(creation.path.clone());
                        }
                        created.push(creation.path.clone());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io("cannot create the agent's state file")(e)),
                }
            }
        }
    }
    // The mount points are not the agent's state (they exist only while it runs, and the
    // dry run lists them): the line names what stays.
    let names: Vec<String> = created
        .iter()
        .filter(|p| !mount_points.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    if !names.is_empty() {
        eprintln!(
            "sandy: first launch of the '{}' profile: created {} (empty, yours only)",
            policy.profile.name,
            names.join(", ")
        );
    }
    Ok(Created { mount_points })
}

/// Removes the mount points [`create_at_launch`] made, unless something wrote them.
pub fn remove_mount_points(created: &Created) {
    for path in &created.mount_points {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// After the run: merges every state file's private copy back into the host file and
/// reports what was kept and what was dropped (key names, never values). Problems are
/// reported, never fatal: the target's own status stands.
pub fn merge_after_run(policy: &ResolvedPolicy, views: &PreparedViews) {
    for file in &policy.state_files {
        if let Err(reason) = merge_one(policy, file, views) {
            eprintln!(
                "sandy: warning: none of the run's changes to {} were kept: {reason}",
                file.path.display()
            );
        }
        if let Some(mirror) = &file.mirror {
            move_back(policy, file, mirror);
        }
        // A copy under a name of Sandy's own is gone once merged.
        if !file.bound {
            let _ = std::fs::remove_file(&file.inside);
        }
    }
}

fn merge_one(
    policy: &ResolvedPolicy,
    file: &StateFile,
    views: &PreparedViews,
) -> Result<(), String> {
    let (Some(copy), Some(before)) = (
        views.private_copy(&file.inside),
        views.original(&file.inside),
    ) else {
        return Ok(());
    };
    // The sandbox could have replaced a stand-in directory with a link.
    if file.mirror.is_some()
        && !file
            .inside
            .parent()
            .and_then(|d| std::fs::symlink_metadata(d).ok())
            .is_some_and(|m| m.is_dir())
    {
        return Err("the run replaced its stand-in directory".to_owned());
    }
    // The sandbox could have replaced a copy in its own directory with a link.
    let after = if file.bound {
        read_bounded(copy)
    } else {
        read_bounded_nofollow(copy)
    }
    .map_err(|e| format!("cannot read the sandbox's copy: {e}"))?;
    if after == before {
        return Ok(());
    }
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    };
    let before = text(before, "the state file at launch")?;
    let after = text(&after, "the sandbox's copy")?;
    // The name may be a symlink (a dotfile manager): the file it leads to is rewritten.
    let target = std::fs::canonicalize(&file.path).unwrap_or_else(|_| file.path.clone());
    let _lock = Lock::take(&target);
    let current = match read_bounded(&target) {
        Ok(bytes) => Some(text(&bytes, "the host's state file")?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read the host's state file: {e}")),
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
        write_atomically(&target, merged.as_bytes())
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
    eprintln!(
        "sandy: {}: dropped the run's changes to {} (they could make a later launch run code, \
         or Sandy does not know them); kept {} allowed change(s)",
        path.display(),
        names.join(", "),
        applied.len()
    );
}

/// Removes a stand-in state directory (the parent of `inside`) left by a run that was
/// killed before its merge, without following links in it.
pub(crate) fn clear_stand_in(inside: &Path) -> std::io::Result<()> {
    let Some(dir) = inside.parent() else {
        return Ok(());
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Links every entry of the real state directory `mirror` into the stand-in directory
/// holding `inside` (by its name, so what the sandbox protects there stays protected),
/// except the state file itself (the private copy is there) and the stand-in directory.
pub(crate) fn link_mirror(inside: &Path, mirror: &Path) -> std::io::Result<()> {
    let (Some(dir), Some(own)) = (inside.parent(), inside.file_name()) else {
        return Ok(());
    };
    let entries = match std::fs::read_dir(mirror) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let prefix = dir
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.trim_end_matches(|c: char| c.is_ascii_digit()));
    for entry in entries {
        let name = entry?.file_name();
        // Not the copy, nor this or another run's stand-in directory.
        let stand_in = prefix.is_some_and(|p| name.to_str().is_some_and(|n| n.starts_with(p)));
        if name == own || stand_in {
            continue;
        }
        std::os::unix::fs::symlink(mirror.join(&name), dir.join(&name))?;
    }
    Ok(())
}

/// After the run: what the agent created or replaced in its stand-in directory (a first
/// session's `sessions`, `log` and `tmp`, a login's `auth.json`, a file it rewrote by
/// renaming over the link) moves to the real state directory, as if the agent had written
/// it there (it may write there anyway). Never the state file (it is merged), nor a name
/// the profile protects (reported). The stand-in directory is then removed. The sandbox
/// is gone by now (its PID namespace ended with the run), so nothing changes meanwhile.
fn move_back(policy: &ResolvedPolicy, file: &StateFile, mirror: &Path) {
    let (Some(dir), Some(own)) = (file.inside.parent(), file.inside.file_name()) else {
        return;
    };
    move_back_dir(policy, dir, own, mirror);
}

/// Before launch: the stand-in directories of runs that were killed before their merge
/// (`NAME-PID` beside this run's `NAME-OWNPID`, that process gone) are emptied into the
/// real state directory the same way, and removed. Their state file's changes are lost
/// (nothing says what they started from), never applied.
fn recover_stale_stand_ins(policy: &ResolvedPolicy) {
    for file in &policy.state_files {
        let (Some(mirror), Some(dir), Some(own)) = (
            file.mirror.as_deref(),
            file.inside.parent(),
            file.inside.file_name(),
        ) else {
            continue;
        };
        let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
        if prefix == name {
            continue;
        }
        for stale in crate::cache::left_by_gone_processes(mirror, prefix) {
            if stale == dir {
                continue;
            }
            if std::fs::symlink_metadata(&stale).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::remove_file(stale.join(own));
                move_back_dir(policy, &stale, own, mirror);
            }
        }
    }
}

fn move_back_dir(policy: &ResolvedPolicy, dir: &Path, own: &std::ffi::OsStr, mirror: &Path) {
    // The sandbox may have replaced the directory itself with a link: nothing is taken
    // from a link.
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_file(dir);
        return;
    }
    let protected = |name: &std::ffi::OsStr| {
        let real = mirror.join(name);
        policy
            .protections
            .iter()
            .any(|p| p.path == real || p.path.starts_with(&real))
    };
    let mut not_kept = Vec::new();
    let mut failed = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let path = entry.path();
            let real = mirror.join(&name);
            if name == own || Some(name.as_os_str()) == dir.file_name() {
                continue;
            }
            // Still the link Sandy made: the agent wrote through it.
            if std::fs::read_link(&path).is_ok_and(|t| t == real) {
                continue;
            }
            if protected(&name) {
                not_kept.push(real.display().to_string());
                continue;
            }
            if std::fs::rename(&path, &real).is_err() {
                failed.push(real.display().to_string());
            }
        }
    }
    if !not_kept.is_empty() {
        eprintln!(
            "sandy: {}: not kept: what the run wrote at {} (protected: it could change a \
             later launch)",
            dir.display(),
            not_kept.join(", ")
        );
    }
    if !failed.is_empty() {
        eprintln!(
            "sandy: warning: could not move {} back from the run's stand-in directory {} \
             (left there)",
            failed.join(", "),
            dir.display()
        );
        let _ = std::fs::remove_file(dir.join(own));
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Writes `content` to a temporary file beside `target` with the target's mode and owner,
/// then renames it over the target.
fn write_atomically(target: &Path, content: &[u8]) -> std::io::Result<()> {
    let dir = target
        .parent()
        .ok_or_else(|| std::io::Error::other("the state file has no directory"))?;
    let name = target
        .file_name()
        .ok_or_else(|| std::io::Error::other("the state file has no name"))?;
    let meta = std::fs::metadata(target).ok();
    let mode = meta.as_ref().map_or(0o600, |m| m.mode() & 0o7777);
    let temp = dir.join(format!(
        ".{}.sandy-merge-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&temp)?;
        f.write_all(content)?;
        if let Some(m) = &meta {
            if (m.uid(), m.gid())
                != (
                    nix::unistd::getuid().as_raw(),
                    nix::unistd::getgid().as_raw(),
                )
            {
                std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))?;
            }
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&temp, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// The lock directory Claude Code itself takes beside its state file (`NAME.lock`), so a
/// session outside does not write between Sandy's read and rename. Given up after two
/// seconds (a stale lock from a crashed session): the merge then goes ahead.
struct Lock(Option<PathBuf>);

impl Lock {
    fn take(target: &Path) -> Lock {
        let mut name = target.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match std::fs::create_dir(&path) {
                Ok(()) => return Lock(Some(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if Instant::now() >= deadline {
                        return Lock(None);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return Lock(None),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_dir(path);
        }
    }
}
