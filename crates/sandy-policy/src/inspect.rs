use std::io;
use std::path::{Path, PathBuf};

/// What a path is, following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    File { executable: bool },
    Other,
}

/// The only way resolution looks at the filesystem. Tests provide a fake.
pub trait PathInspector {
    /// Resolves symlinks, `.` and `..` into an absolute canonical path.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// The kind of the object at `path` (symlinks followed); `None` when it does not exist.
    fn kind(&self, path: &Path) -> Option<FileKind>;
    /// Up to `max` leading bytes of a file, for `#!` lines.
    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>>;
    /// The target of a symbolic link, as written.
    fn read_link(&self, path: &Path) -> Option<PathBuf>;
    /// The subdirectories (not symlinks) among the first `max` entries of a directory, as
    /// full paths, sorted.
    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf>;
    /// The symbolic links among the first `max` entries of a directory, as full paths,
    /// sorted.
    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf>;
}

/// The real filesystem, through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl PathInspector for RealFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        canonicalize(path)
    }

    fn kind(&self, path: &Path) -> Option<FileKind> {
        let meta = std::fs::metadata(path).ok()?;
        Some(if meta.is_dir() {
            FileKind::Directory
        } else if meta.is_file() {
            FileKind::File {
                executable: is_executable(&meta),
            }
        } else {
            FileKind::Other
        })
    }

    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>> {
        use std::io::Read;
        let file = std::fs::File::open(path).ok()?;
        let mut buf = Vec::with_capacity(max);
        file.take(max as u64).read_to_end(&mut buf).ok()?;
        Some(buf)
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }

    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries
            .take(max)
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }

    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        // The entry type comes from the directory listing itself: no stat per entry.
        let mut out: Vec<PathBuf> = entries
            .take(max)
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }
}

/// `O_PATH` (asm-generic/fcntl.h; the same value on x86_64 and aarch64).
#[cfg(target_os = "linux")]
const O_PATH: i32 = 0o10_000_000;

/// The kernel resolves the whole path in one lookup (`open` with `O_PATH`, which needs no
/// permission on the object itself) and names what it found (`/proc/self/fd/N`): three
/// system calls, where `realpath(3)` makes one `readlink` per component of the path, each
/// walking the path again from the root. Falls back to `realpath` without `/proc`.
#[cfg(target_os = "linux")]
fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_PATH)
        .open(path)?;
    match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(found) if found.is_absolute() => Ok(found),
        _ => std::fs::canonicalize(path),
    }
}

#[cfg(not(target_os = "linux"))]
fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-lookup canonicalisation agrees with `realpath(3)` on links, relative
    /// links, `..` and missing paths.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn canonicalize_agrees_with_realpath() {
        let dir = std::env::temp_dir().join(format!("sandy-canon-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
        std::os::unix::fs::symlink("a/b", dir.join("ab")).unwrap();
        std::os::unix::fs::symlink(dir.join("a/b/c"), dir.join("abs")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        std::fs::write(dir.join("a/b/c/file"), "x").unwrap();
        for p in [
            "a",
            "ab",
            "ab/c",
            "ab/../b/c/file",
            "abs/file",
            "a/./b/../b/c",
            ".",
        ] {
            let path = dir.join(p);
            assert_eq!(
                canonicalize(&path).unwrap(),
                std::fs::canonicalize(&path).unwrap(),
                "{p}"
            );
        }
        for p in ["dangling", "missing", "a/b/c/file/below"] {
            let path = dir.join(p);
            assert_eq!(
                canonicalize(&path).unwrap_err().kind(),
                std::fs::canonicalize(&path).unwrap_err().kind(),
                "{p}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
