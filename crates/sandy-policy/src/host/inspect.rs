use std::cell::RefCell;
use std::ffi::OsString;
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
    /// What the name itself is, nothing followed at it: a symbolic link (its target, as
    /// [`Self::read_link`] gives it), another object (its kind), or `None` for nothing.
    /// By default two questions; the real filesystem answers with one `lstat` for
    /// everything but a link.
    fn entry(&self, path: &Path) -> Option<Entry> {
        match self.read_link(path) {
            Some(target) => Some(Entry::Link(target)),
            None => self.kind(path).map(Entry::Object),
        }
    }
    /// Whether a name exists, a dangling symbolic link included (nothing followed at the
    /// name itself).
    fn exists(&self, path: &Path) -> bool {
        self.kind(path).is_some() || self.read_link(path).is_some()
    }
    /// The subdirectories (not symlinks) among the first `max` entries of a directory, as
    /// full paths, sorted.
    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf>;
    /// The symbolic links among the first `max` entries of a directory, as full paths,
    /// sorted.
    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf>;
    /// The entries of a directory that are not directories (files and symlinks), sorted,
    /// at most `max` read. Empty by default (inspectors that need no plugin discovery).
    fn files_in(&self, _path: &Path, _max: usize) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// What a name itself is ([`PathInspector::entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A symbolic link, with its target as written.
    Link(PathBuf),
    /// Anything else.
    Object(FileKind),
}

/// The kind of an object from its metadata.
fn kind_of(meta: &std::fs::Metadata) -> FileKind {
    if meta.is_dir() {
        FileKind::Directory
    } else if meta.is_file() {
        FileKind::File {
            executable: is_executable(meta),
        }
    } else {
        FileKind::Other
    }
}

/// The real filesystem, through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl PathInspector for RealFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn kind(&self, path: &Path) -> Option<FileKind> {
        std::fs::metadata(path).ok().map(|meta| kind_of(&meta))
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

    /// One `lstat`, then a `readlink` for a link only.
    fn entry(&self, path: &Path) -> Option<Entry> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if meta.file_type().is_symlink() {
            // A link that cannot be read is answered as `read_link` would: not a link,
            // and its kind is what it leads to.
            return match std::fs::read_link(path) {
                Ok(target) => Some(Entry::Link(target)),
                Err(_) => self.kind(path).map(Entry::Object),
            };
        }
        Some(Entry::Object(kind_of(&meta)))
    }

    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
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

    fn files_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries
            .take(max)
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }
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

/// One resolution's view of the filesystem: each answer about a path (its kind, its link
/// target, its canonical form, whether it exists) is asked of `inner` once and remembered.
/// Resolution asks the same questions of the same paths from several places (the chains
/// of views and protections share their ancestors, the profiles share the home's
/// directories), and a resolution describes one moment of the host in any case.
pub struct Memo<'a> {
    inner: &'a dyn PathInspector,
    kinds: RefCell<Answers<Option<FileKind>>>,
    links: RefCell<Answers<Option<PathBuf>>>,
    canonical: RefCell<Answers<Result<PathBuf, io::ErrorKind>>>,
    exists: RefCell<Answers<bool>>,
}

/// Remembered answers by path. Keyed by the path's bytes (a path spelt two ways is asked
/// twice, with the same answer), hashed without `Path`'s parsing of components and with
/// a fast hash: a resolution asks thousands of questions, each while the caller waits.
type Answers<T> = foldhash::HashMap<OsString, T>;

impl<'a> Memo<'a> {
    pub fn new(inner: &'a dyn PathInspector) -> Memo<'a> {
        Memo {
            inner,
            kinds: RefCell::default(),
            links: RefCell::default(),
            canonical: RefCell::default(),
            exists: RefCell::default(),
        }
    }
}

/// The remembered answer for `path`, or `ask`'s (then remembered).
fn remembered<T: Clone>(map: &RefCell<Answers<T>>, path: &Path, ask: impl FnOnce() -> T) -> T {
    if let Some(known) = map.borrow().get(path.as_os_str()) {
        return known.clone();
    }
    let answer = ask();
    map.borrow_mut()
        .insert(path.as_os_str().to_owned(), answer.clone());
    answer
}

impl Memo<'_> {
    /// Whether `path` is its own canonical form: absolute and normal (no empty, `.` or
    /// `..` component, no trailing slash), and every name on it an object that is no
    /// symbolic link (a directory, but for the last). Asked name by name as entries
    /// (`lstat`), which the walks of the resolution share; any other path is named by the
    /// kernel ([`PathInspector::canonicalize`] of the inner inspector).
    fn names_itself(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let bytes = path.as_os_str().as_bytes();
        if !crate::model::paths::is_normal(bytes) {
            return false;
        }
        // Each name's end: every `/` after the root's, then the path's own end.
        let ends = bytes
            .iter()
            .enumerate()
            .skip(1)
            .filter(|&(_, &b)| b == b'/')
            .map(|(i, _)| i);
        let mut ancestors = ends.map(|end| Path::new(std::ffi::OsStr::from_bytes(&bytes[..end])));
        let directories = ancestors
            .all(|dir| matches!(self.entry(dir), Some(Entry::Object(FileKind::Directory))));
        directories && (bytes.len() == 1 || matches!(self.entry(path), Some(Entry::Object(_))))
    }
}

impl PathInspector for Memo<'_> {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        remembered(&self.canonical, path, || {
            if self.names_itself(path) {
                return Ok(path.to_path_buf());
            }
            self.inner.canonicalize(path).map_err(|e| e.kind())
        })
        .map_err(io::Error::from)
    }

    fn kind(&self, path: &Path) -> Option<FileKind> {
        remembered(&self.kinds, path, || self.inner.kind(path))
    }

    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>> {
        self.inner.read_head(path, max)
    }

    /// Asked as an [`Self::entry`]: the `lstat` that says a name is no link also tells
    /// its kind, remembered for a later [`Self::kind`].
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        if let Some(known) = self.links.borrow().get(path.as_os_str()) {
            return known.clone();
        }
        match self.entry(path) {
            Some(Entry::Link(target)) => Some(target),
            _ => None,
        }
    }

    /// Remembered as the answers of [`PathInspector::read_link`] and, for an object that
    /// is no link, of [`PathInspector::kind`] (the same object, nothing to follow).
    fn entry(&self, path: &Path) -> Option<Entry> {
        let link = self.links.borrow().get(path.as_os_str()).cloned();
        match link {
            Some(Some(target)) => return Some(Entry::Link(target)),
            Some(None) => return self.kind(path).map(Entry::Object),
            None => {}
        }
        let entry = self.inner.entry(path);
        let key = path.as_os_str().to_owned();
        match &entry {
            Some(Entry::Link(target)) => {
                self.links.borrow_mut().insert(key, Some(target.clone()));
            }
            Some(Entry::Object(kind)) => {
                self.links.borrow_mut().insert(key.clone(), None);
                self.kinds.borrow_mut().insert(key, Some(*kind));
            }
            None => {
                self.links.borrow_mut().insert(key.clone(), None);
                self.kinds.borrow_mut().insert(key, None);
            }
        }
        entry
    }

    fn exists(&self, path: &Path) -> bool {
        let key = path.as_os_str();
        // A link or an object seen already exists (nothing followed at the name).
        if matches!(self.links.borrow().get(key), Some(Some(_)))
            || matches!(self.kinds.borrow().get(key), Some(Some(_)))
        {
            return true;
        }
        remembered(&self.exists, path, || self.inner.exists(path))
    }

    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        self.inner.subdirs(path, max)
    }

    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        self.inner.symlinks_in(path, max)
    }

    fn files_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        self.inner.files_in(path, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory of this test process, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// One `lstat` answers what `read_link` and `kind` answer together, for every kind of
    /// name, and the memo gives the same answers as the filesystem.
    #[test]
    fn an_entry_is_what_read_link_and_kind_say() {
        let dir = std::env::temp_dir().join(format!("sandy-entry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let scratch = Scratch(dir.clone());
        std::fs::write(dir.join("file"), b"x").unwrap();
        std::fs::create_dir(dir.join("dir")).unwrap();
        std::os::unix::fs::symlink("file", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        let names = ["file", "dir", "link", "dangling", "absent", "file/below"];
        let memo_fs = RealFs;
        let memo = Memo::new(&memo_fs);
        for name in names {
            let path = scratch.0.join(name);
            let expected = match RealFs.read_link(&path) {
                Some(target) => Some(Entry::Link(target)),
                None => RealFs.kind(&path).map(Entry::Object),
            };
            assert_eq!(RealFs.entry(&path), expected, "{name}");
            // Twice through the memo: asked, then remembered.
            assert_eq!(memo.entry(&path), expected, "{name}");
            assert_eq!(memo.entry(&path), expected, "{name}");
            assert_eq!(memo.read_link(&path), RealFs.read_link(&path), "{name}");
            assert_eq!(memo.kind(&path), RealFs.kind(&path), "{name}");
        }
    }

    #[test]
    fn a_remembered_canonical_name_is_the_kernels() {
        let dir = std::env::temp_dir().join(format!("sandy-canonical-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("dir/sub")).unwrap();
        let scratch = Scratch(dir.clone());
        std::fs::write(dir.join("file"), b"x").unwrap();
        std::os::unix::fs::symlink("file", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("dir", dir.join("dirlink")).unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("dir/up")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        let root = scratch.0.display().to_string();
        let mut paths: Vec<String> = [
            "",
            "/file",
            "/dir",
            "/dir/sub",
            "/link",
            "/dirlink/sub",
            "/dir/up/dir/sub",
            "/dangling",
            "/absent",
            "/file/below",
            "/dir/../file",
            "/dir/./sub",
            "/dir/",
            "//dir",
        ]
        .iter()
        .map(|p| format!("{root}{p}"))
        .collect();
        paths.extend(["/".to_owned(), "relative".to_owned()]);
        let inner = RealFs;
        let memo = Memo::new(&inner);
        for path in &paths {
            let path = Path::new(path);
            let kernel = RealFs.canonicalize(path).map_err(|e| e.kind());
            // Twice: named, then remembered.
            for _ in 0..2 {
                let ours = memo.canonicalize(path).map_err(|e| e.kind());
                assert_eq!(ours, kernel, "{}", path.display());
            }
        }
    }
}
