//! Read-only placeholders for protected paths that are absent at launch.
//!
//! A protection is carried by a mount, and only an existing path can carry one: an absent
//! `.git/hooks` could be created from inside and its hooks would run on the user's next
//! `git commit` outside. When the producer of a protection says what may stand in for it
//! ([`Placeholder`], only inside git directories and agent state directories, design
//! promise 5), the supervisor creates it before launch (owned by the user, directories
//! 0700, files 0600, `{}` for a JSON settings file), so that the mount layer protects it
//! like any other path. The parent must be an existing directory (links on the way to
//! it are followed, and pinned by the mount layer for the run); the placeholder is
//! created relative to the opened parent without following anything (`mkdirat`,
//! `O_CREAT | O_EXCL | O_NOFOLLOW`), and no intermediate directory is ever created. After the run each placeholder that is still exactly as created is removed,
//! so the host keeps no trace; one that changed (it can only change outside the sandbox)
//! is left in place and reported.
//!
//! A protected name that is, or passes through, a dangling or looping symbolic link cannot
//! carry a mount either, and the link itself would stay replaceable: Sandy refuses to
//! start instead, naming the link.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use sandy_policy::text::Shown;
use sandy_policy::{Placeholder, ResolvedPolicy};

use crate::hostfs::Dir;

/// Why Sandy refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum PlaceholderError {
    #[error(
        "cannot protect {}: it is a symbolic link to a path that does not exist, which the \
         sandbox could create through the link; create the target or remove the link, then \
         run again",
        sandy_policy::text::Tilde(path)
    )]
    DanglingLink { path: PathBuf },
    #[error(
        "cannot protect {}: it is a symbolic link that loops (or passes through too many \
         links); fix or remove the links, then run again",
        sandy_policy::text::Tilde(path)
    )]
    LinkLoop { path: PathBuf },
    #[error("cannot create the placeholder {}: {}", sandy_policy::text::Tilde(path), source.desc())]
    Create { path: PathBuf, source: Errno },
}

/// One placeholder Sandy created, identified by its inode, with the handle on the
/// directory it was made in: it is removed through that handle, never by its path again
/// (a name on the way could lead elsewhere by then).
#[derive(Debug)]
struct Created {
    path: PathBuf,
    parent: Dir,
    name: OsString,
    kind: Placeholder,
    dev: u64,
    ino: u64,
}

/// The placeholders of one run; removed when dropped (after the run, or when Sandy fails
/// before launch).
#[derive(Debug, Default)]
pub struct Placeholders {
    created: Vec<Created>,
}

/// The content a file placeholder is created with.
fn content(kind: Placeholder) -> &'static [u8] {
    match kind {
        Placeholder::EmptyJsonObject => b"{}",
        Placeholder::Directory | Placeholder::EmptyFile => b"",
    }
}

/// The parent directory of `path` and the last component's name. The parent must be an
/// existing directory; symbolic links on the way to it are followed (a `.git` that is a
/// link to the repository's directory is where git looks for `hooks`), and the mount
/// layer pins each of them for the run. The last component itself is never followed.
fn open_parent(path: &Path) -> Result<(Dir, OsString), Errno> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Errno::EINVAL);
    };
    let dir = Dir::open(parent).map_err(errno)?;
    Ok((dir, name.to_os_string()))
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32))
}

fn make(path: &Path, kind: Placeholder) -> Result<Created, Errno> {
    let (parent, name) = open_parent(path)?;
    let fd = match kind {
        Placeholder::Directory => {
            mkdirat(&parent, name.as_os_str(), Mode::from_bits_truncate(0o700))?;
            openat(
                &parent,
                name.as_os_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?
        }
        Placeholder::EmptyFile | Placeholder::EmptyJsonObject => {
            let fd = openat(
                &parent,
                name.as_os_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )?;
            let mut file = std::fs::File::from(fd);
            file.write_all(content(kind))
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32)))?;
            OwnedFd::from(file)
        }
    };
    // Exactly 0700 or 0600, whatever the umask.
    let mode = if kind == Placeholder::Directory {
        0o700
    } else {
        0o600
    };
    fchmod(&fd, Mode::from_bits_truncate(mode))?;
    let st = fstat(&fd)?;
    Ok(Created {
        path: path.to_path_buf(),
        parent,
        name,
        kind,
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// The first symbolic link on the way to `path` (the path itself or an ancestor) that
/// leads nowhere or loops: such a name cannot carry a mount, and the link itself would
/// not be pinned, so the sandbox could replace it. `checked` holds the names an earlier
/// call looked at, with all their ancestors: the protections share most of their way
/// (the project, the home directory), which is looked at once.
fn broken_link(path: &Path, checked: &mut BTreeSet<PathBuf>) -> Option<PlaceholderError> {
    for p in path.ancestors() {
        if checked.contains(p) {
            return None;
        }
        if let Ok(meta) = std::fs::symlink_metadata(p) {
            if meta.file_type().is_symlink() {
                if let Err(err) = std::fs::metadata(p) {
                    let path = p.to_path_buf();
                    if err.raw_os_error() == Some(Errno::ELOOP as i32) {
                        return Some(PlaceholderError::LinkLoop { path });
                    }
                    if err.kind() == std::io::ErrorKind::NotFound {
                        return Some(PlaceholderError::DanglingLink { path });
                    }
                }
            }
        }
        checked.insert(p.to_path_buf());
    }
    None
}

/// Refuses a protected name that is, or passes through, a dangling or looping symbolic
/// link (the `landlock` tier, which makes no placeholder, refuses them too: what such a
/// link leads to once the run creates it could not be compared after the run).
pub fn check_links(policy: &ResolvedPolicy) -> Result<(), PlaceholderError> {
    let mut checked = BTreeSet::new();
    for protection in &policy.protections {
        if let Some(err) = broken_link(&protection.path, &mut checked) {
            return Err(err);
        }
    }
    Ok(())
}

/// Creates the placeholders the policy's protections ask for, marks them existing (so the
/// mount layer protects them), and says so in one stderr line. Refuses a protected name
/// that is, or passes through, a dangling or looping symbolic link.
pub fn create(policy: &mut ResolvedPolicy) -> Result<Placeholders, PlaceholderError> {
    let mut out = Placeholders::default();
    // Every refusal before anything is created.
    check_links(policy)?;
    for protection in policy.protections.iter_mut().filter(|p| !p.exists) {
        let Some(kind) = protection.placeholder else {
            continue;
        };
        match make(&protection.path, kind) {
            Ok(created) => {
                protection.exists = true;
                out.created.push(created);
            }
            // Already created in this pass under another name of the same place (a
            // `.git` symlink and the directory it points to).
            Err(Errno::EEXIST) if out.is_one_of_ours(&protection.path) => {
                protection.exists = true;
            }
            // The parent is absent, or a symlink: nothing is created there (no
            // intermediate directory, nothing through a link); the path stays absent
            // and the post-run check reports it if the run creates it.
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => {}
            Err(source) => {
                return Err(PlaceholderError::Create {
                    path: protection.path.clone(),
                    source,
                })
            }
        }
    }
    // Not announced on every run (in a git repository without `config.worktree`, that
    // would be every run): the dry run lists each placeholder under `protections`.
    Ok(out)
}

impl Placeholders {
    /// Whether `path` (followed to its parent, not at its own name) is a placeholder
    /// created in this run.
    fn is_one_of_ours(&self, path: &Path) -> bool {
        let Ok((parent, name)) = open_parent(path) else {
            return false;
        };
        fstatat(&parent, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
            self.created
                .iter()
                .any(|c| c.dev == st.st_dev && c.ino == st.st_ino)
        })
    }
}

/// Whether the placeholder at `c` is still exactly as created: the same inode, the same
/// type, and empty (or still `{}`).
fn unchanged(parent: &Dir, name: &std::ffi::OsStr, c: &Created) -> Result<bool, Errno> {
    let st = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if st.st_dev != c.dev || st.st_ino != c.ino {
        return Ok(false);
    }
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    match c.kind {
        Placeholder::Directory => {
            if kind != SFlag::S_IFDIR {
                return Ok(false);
            }
            let dir = parent.open_dir(name).map_err(errno)?;
            Ok(dir.entries_prefix(1).map_err(errno)?.is_empty())
        }
        Placeholder::EmptyFile | Placeholder::EmptyJsonObject => {
            let want = content(c.kind);
            if kind != SFlag::S_IFREG || usize::try_from(st.st_size).ok() != Some(want.len()) {
                return Ok(false);
            }
            let fd = openat(
                parent,
                name,
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            let mut buf = vec![0u8; want.len() + 1];
            let n = nix::unistd::read(&fd, &mut buf)?;
            Ok(&buf[..n] == want)
        }
    }
}

impl Placeholders {
    fn remove_one(c: &Created) {
        let result = (|| {
            if !unchanged(&c.parent, &c.name, c)? {
                return Ok(false);
            }
            let flag = if c.kind == Placeholder::Directory {
                UnlinkatFlags::RemoveDir
            } else {
                UnlinkatFlags::NoRemoveDir
            };
            unlinkat(&c.parent, c.name.as_os_str(), flag)?;
            Ok(true)
        })();
        match result {
            Ok(true) => {}
            Ok(false) => say!(
                "warning: the placeholder {} was changed during the run (it is read-only \
                 inside, so from outside the sandbox); left in place, review it",
                Shown(&c.path)
            ),
            Err(Errno::ENOENT) => say!(
                "warning: the placeholder {} was removed during the run",
                Shown(&c.path)
            ),
            Err(e) => say!(
                "warning: cannot remove the placeholder {}: {}",
                Shown(&c.path),
                e.desc()
            ),
        }
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for c in self.created.iter().rev() {
            Self::remove_one(c);
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_created_exactly_and_removed_when_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("hooks");
        let f = dir.path().join("settings.json");
        let created_d = make(&d, Placeholder::Directory).unwrap();
        let created_f = make(&f, Placeholder::EmptyJsonObject).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"{}");
        // Never in something that is not a directory, never an intermediate directory,
        // never over something (not even a link to nowhere).
        assert_eq!(
            make(&f.join("x"), Placeholder::Directory).unwrap_err(),
            Errno::ENOTDIR
        );
        std::os::unix::fs::symlink("nowhere", dir.path().join("dangling")).unwrap();
        assert_eq!(
            make(&dir.path().join("dangling"), Placeholder::EmptyFile).unwrap_err(),
            Errno::EEXIST
        );
        assert!(!dir.path().join("nowhere").exists());
        // A linked parent leads to the directory it names.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("link")).unwrap();
        let via_link = make(&dir.path().join("link/x"), Placeholder::Directory).unwrap();
        assert!(dir.path().join("x").is_dir());
        drop(Placeholders {
            created: vec![via_link],
        });
        assert!(!dir.path().join("x").exists());
        assert_eq!(
            make(&dir.path().join("a/b"), Placeholder::Directory).unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(make(&f, Placeholder::EmptyFile).unwrap_err(), Errno::EEXIST);
        // A changed placeholder stays; an unchanged one goes.
        std::fs::write(d.join("pre-commit"), b"x").unwrap();
        let set = Placeholders {
            created: vec![created_d, created_f],
        };
        drop(set);
        assert!(d.join("pre-commit").exists());
        assert!(!f.exists());
    }
}
