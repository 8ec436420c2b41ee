//! The supervisor's view of the host's files for resolution ([`HostFs`]): the same
//! answers as [`sandy_policy::RealFs`], fewer system calls and no C library allocation.
//!
//! Sandy is linked with musl. Its `realpath` walks the path in user space (one `readlink`
//! per component) and returns a `malloc`ed string, and its `opendir` allocates the
//! directory's buffer the same way: musl's allocator maps a fresh page for each and unmaps
//! it when freed, because nothing else in Sandy uses it. A launch canonicalises about
//! thirty paths and lists a few directories, so this came to some sixty `mmap`/`munmap`
//! calls and over a hundred `readlink`s per launch.
//!
//! Here a path is canonicalised by the kernel itself: opened with `O_PATH` (nothing is
//! read, no device or FIFO is opened, the caller needs only search permission, as for
//! `realpath`) and named back through `/proc/self/fd`. When that cannot answer (no
//! `/proc`, a path outside the process's root, a name removed in between), the C
//! library's `realpath` decides, as before. Directories are read with `getdents64`
//! (rustix).

use std::ffi::{CStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use sandy_policy::{FileKind, PathInspector, RealFs};

/// The host's files, as resolution sees them (see the module's documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct HostFs;

/// The canonical absolute path of `path`: symbolic links, `.` and `..` resolved by the
/// kernel; an error when it does not exist.
pub fn canonicalize(path: impl AsRef<Path>) -> io::Result<PathBuf> {
    let path = path.as_ref();
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(io::Error::from)?;
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let name = match rustix::fs::readlink(link, Vec::new()) {
        Ok(name) => name.into_bytes(),
        Err(_) => return std::fs::canonicalize(path),
    };
    // Outside the process's root the kernel names it "(unreachable)/..."; an object
    // removed since it was opened gets " (deleted)" appended. Either way, ask again.
    if name.first() != Some(&b'/') || name.ends_with(b" (deleted)") {
        return std::fs::canonicalize(path);
    }
    Ok(PathBuf::from(OsString::from_vec(name)))
}

/// The entries of a directory (not `.` and `..`) among the first `max`, with their type
/// ([`listed_type`]), as full paths, sorted, keeping those `keep` accepts.
fn entries(path: &Path, max: usize, keep: impl Fn(FileType) -> bool) -> Vec<PathBuf> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(mut dir) = rustix::fs::open(path, flags, Mode::empty()).and_then(Dir::new) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = 0usize;
    while let Some(Ok(entry)) = dir.read() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        seen += 1;
        if seen > max {
            break;
        }
        let Ok(fd) = dir.fd() else {
            break;
        };
        let Some(kind) = listed_type(fd, entry.file_name(), entry.file_type()) else {
            continue;
        };
        if keep(kind) {
            out.push(path.join(std::ffi::OsStr::from_bytes(name)));
        }
    }
    out.sort();
    out
}

/// The type of a directory entry: `listed`, the type the listing gave for `name` in the
/// directory `dir`, or, when the file system does not say, an `lstat` relative to the
/// directory; `None` when the entry is gone.
pub fn listed_type(dir: impl AsFd, name: &CStr, listed: FileType) -> Option<FileType> {
    match listed {
        FileType::Unknown => {
            let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
            Some(FileType::from_raw_mode(st.st_mode))
        }
        kind => Some(kind),
    }
}

impl PathInspector for HostFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        canonicalize(path)
    }

    fn kind(&self, path: &Path) -> Option<FileKind> {
        RealFs.kind(path)
    }

    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>> {
        RealFs.read_head(path, max)
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        RealFs.read_link(path)
    }

    fn entry(&self, path: &Path) -> Option<sandy_policy::Entry> {
        RealFs.entry(path)
    }

    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }

    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        entries(path, max, |t| t == FileType::Directory)
    }

    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        entries(path, max, |t| t == FileType::Symlink)
    }

    fn files_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        entries(path, max, |t| t != FileType::Directory)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Every kind of path gets the same answer as the C library's `realpath` (and the
    /// same error kind when there is none).
    #[test]
    fn canonical_paths_are_the_c_librarys() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        std::fs::create_dir_all(base.join("a/b/c")).unwrap();
        std::fs::write(base.join("a/file"), "x").unwrap();
        symlink("a/b", base.join("rel")).unwrap();
        symlink(base.join("a/b/c"), base.join("abs")).unwrap();
        symlink("rel/../file", base.join("dotdot")).unwrap();
        symlink("loop", base.join("loop")).unwrap();
        symlink("absent", base.join("dangling")).unwrap();
        let cases = [
            base.to_path_buf(),
            base.join("a/b/c"),
            base.join("a/./b/../b/c/"),
            base.join("rel"),
            base.join("rel/c"),
            base.join("rel/../file"),
            base.join("abs/.."),
            base.join("dotdot"),
            base.join("a/file"),
            base.join("a/file/"),
            base.join("a/missing"),
            base.join("loop"),
            base.join("dangling"),
            PathBuf::from("/"),
            PathBuf::from("/proc/self"),
            PathBuf::from(""),
        ];
        for case in cases {
            let ours = canonicalize(&case);
            let libc = std::fs::canonicalize(&case);
            match (&ours, &libc) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{case:?}"),
                (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "{case:?}"),
                _ => panic!("{case:?}: {ours:?} against {libc:?}"),
            }
        }
        // A relative path is resolved from the working directory.
        assert_eq!(
            canonicalize(Path::new(".")).unwrap(),
            std::env::current_dir().unwrap().canonicalize().unwrap()
        );
    }

    #[test]
    fn listings_are_realfs_listings() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        for d in ["d1", "d2"] {
            std::fs::create_dir(base.join(d)).unwrap();
        }
        std::fs::write(base.join("f"), "").unwrap();
        symlink("d1", base.join("l1")).unwrap();
        symlink("absent", base.join("l2")).unwrap();
        for max in [0, 2, 100] {
            assert_eq!(HostFs.subdirs(base, max), RealFs.subdirs(base, max));
            assert_eq!(HostFs.symlinks_in(base, max), RealFs.symlinks_in(base, max));
            assert_eq!(HostFs.files_in(base, max), RealFs.files_in(base, max));
        }
        assert!(HostFs.subdirs(&base.join("absent"), 10).is_empty());
    }
}
