//! The host side of an agent's own state (design promise 5 and §4.2): before launch, the
//! state directories and files the profile declares are created when absent (a first
//! launch); after the run, the agent's private copy of its state file is merged back,
//! keeping only the allowlisted keys ([`sandy_policy::statemerge`]).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandy_policy::statemerge::{display, merge_json, MergeOutcome};
use sandy_policy::{Placeholder, ResolvedPolicy, StateFile};

use crate::error::SandyError;
use crate::views::{read_bounded, read_bounded_nofollow, PreparedViews};

/// What [`create_at_launch`] created.
pub struct Created {
    /// Empty files that only carry a bound private copy, removed after the run.
    mount_points: Vec<PathBuf>,
}

/// Creates the agent's absent state directories (empty, 0700, with any missing parents,
/// also 0700) and the empty mount point of a relocated state file's copy (0600), and
/// says so in one stderr line. Something that appeared meanwhile is left as it is.
pub fn create_at_launch(policy: &ResolvedPolicy) -> Result<Created, SandyError> {
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
    let outcome = merge_json(&before, &after, current.as_deref(), &file.persist, &project)
        .map_err(|e| e.to_string())?;
    if let Some(merged) = &outcome.merged {
        let mut json = serde_json::to_string_pretty(merged)
            .map_err(|e| format!("cannot render the merged state: {e}"))?;
        json.push('\n');
        write_atomically(&target, json.as_bytes())
            .map_err(|e| format!("cannot write the merged state: {e}"))?;
    }
    report(&file.path, &outcome);
    Ok(())
}

fn report(path: &Path, outcome: &MergeOutcome) {
    if outcome.dropped.is_empty() {
        return;
    }
    let names: Vec<String> = outcome.dropped.iter().map(|k| display(k)).collect();
    eprintln!(
        "sandy: {}: dropped the run's changes to {} (they could make a later launch run code, \
         or Sandy does not know them); kept {} allowed change(s)",
        path.display(),
        names.join(", "),
        outcome.applied.len()
    );
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
