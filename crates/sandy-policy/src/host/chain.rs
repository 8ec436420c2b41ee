//! What must be pinned so that a protected *name* keeps designating the object it
//! designated at launch.
//!
//! A protection names the path a tool reads (`.git/hooks`, `~/.claude/settings.json`),
//! and that name may pass through symbolic links: `.git/hooks -> ../githooks`, a dotfile
//! manager's `settings.json -> ~/dotfiles/claude/settings.json`, `.git -> ../elsewhere`.
//! Protecting only the final target would leave the links themselves removable: the
//! sandbox could delete the link and put a directory of its own hooks in its place.
//!
//! [`chain`] walks the name the way the kernel does (component by component, splicing
//! each link's target into the rest of the walk, at most [`MAX_SYMLINKS`] links) and
//! returns, as data, every component that lies below a writable root: directories to be
//! bound onto themselves and links to be pinned as links, so that none of them can be
//! removed, renamed or replaced; and the object the name finally designates, which is
//! made read-only (or masked). Components outside every writable root need nothing: the
//! rest of the filesystem is read-only inside the sandbox.
//!
//! The walk looks at the filesystem only through [`PathInspector`], so it is pure and
//! unit-tested with a fake; the mount layer re-checks each component's type without
//! following links when it applies the chain, and fails closed if the layout changed.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::host::inspect::{Entry, FileKind, PathInspector};

/// How many symbolic links one name may pass through, as the kernel allows.
pub const MAX_SYMLINKS: usize = 40;

/// One component to pin.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pin {
    /// A directory below a writable root on the way to the protected object: bound onto
    /// itself, so that it cannot be renamed or removed.
    Directory(PathBuf),
    /// A symbolic link below a writable root: pinned as a link (a mount of the link
    /// itself), so that it cannot be removed, renamed or replaced. `target` is the link's
    /// content as read; the mount layer checks it again before pinning.
    Symlink { path: PathBuf, target: PathBuf },
}

impl Pin {
    pub fn path(&self) -> &Path {
        match self {
            Pin::Directory(p) => p,
            Pin::Symlink { path, .. } => path,
        }
    }
}

/// The result of walking one protected name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Components to pin, in the order the walk met them (outermost first).
    pub pins: Vec<Pin>,
    /// The object the name designates, with no symbolic link left in it; `None` when the
    /// walk entered a directory the sandbox replaces by a private one (the host object is
    /// out of the sandbox's reach there).
    pub object: Option<PathBuf>,
}

/// Why a name cannot be protected the way Sandy promises. Each message says why and what
/// to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error(
        "cannot protect {}: it passes through more than {MAX_SYMLINKS} symbolic links (a loop?); \
         fix or remove the links and run again",
        crate::model::text::Tilde(name)
    )]
    TooManyLinks { name: PathBuf },
    #[error(
        "cannot protect {}: {} does not exist (a dangling symbolic link leads there); \
         create it or remove the link, then run again",
        crate::model::text::Tilde(name),
        crate::model::text::Tilde(missing)
    )]
    Missing { name: PathBuf, missing: PathBuf },
    #[error(
        "cannot protect {}: {} is not a directory, so the name leads nowhere; \
         fix the path and run again",
        crate::model::text::Tilde(name),
        crate::model::text::Tilde(path)
    )]
    NotADirectory { name: PathBuf, path: PathBuf },
    #[error(
        "cannot protect {}: the name is not an absolute path",
        crate::model::text::Tilde(name)
    )]
    NotAbsolute { name: PathBuf },
}

/// Walks `name` and returns what to pin and the object it designates.
///
/// `writable_roots` are the directories the sandbox may write below (a root itself is
/// never pinned: it is a mount already, inside a read-only parent); `hidden` says whether
/// a path lies in a directory the sandbox replaces by a private one (the walk stops when
/// it enters one).
pub fn chain(
    name: &Path,
    writable_roots: &[PathBuf],
    hidden: &dyn Fn(&Path) -> bool,
    fs: &dyn PathInspector,
) -> Result<Chain, ChainError> {
    if !name.is_absolute() {
        return Err(ChainError::NotAbsolute {
            name: name.to_path_buf(),
        });
    }
    let mut pending: VecDeque<OsString> = components(name);
    let mut current = PathBuf::from("/");
    let mut links = 0usize;
    let mut pins: Vec<Pin> = Vec::new();
    let push = |pin: Pin, pins: &mut Vec<Pin>| {
        if !pins.contains(&pin) {
            pins.push(pin);
        }
    };
    while let Some(component) = pending.pop_front() {
        if component == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&component);
        if hidden(&next) {
            return Ok(Chain { pins, object: None });
        }
        let inside =
            !writable_roots.contains(&next) && writable_roots.iter().any(|r| next.starts_with(r));
        let entry = fs.entry(&next);
        if let Some(Entry::Link(target)) = entry {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(ChainError::TooManyLinks {
                    name: name.to_path_buf(),
                });
            }
            if inside {
                push(
                    Pin::Symlink {
                        path: next.clone(),
                        target: target.clone(),
                    },
                    &mut pins,
                );
            }
            if target.is_absolute() {
                current = PathBuf::from("/");
            }
            for c in components(&target).into_iter().rev() {
                pending.push_front(c);
            }
            continue;
        }
        let kind = match entry {
            Some(Entry::Object(kind)) => Some(kind),
            _ => None,
        };
        match kind {
            None => {
                return Err(ChainError::Missing {
                    name: name.to_path_buf(),
                    missing: next,
                })
            }
            Some(FileKind::Directory) => {
                if inside && !pending.is_empty() {
                    push(Pin::Directory(next.clone()), &mut pins);
                }
            }
            Some(_) if !pending.is_empty() => {
                return Err(ChainError::NotADirectory {
                    name: name.to_path_buf(),
                    path: next,
                })
            }
            Some(_) => {}
        }
        current = next;
    }
    Ok(Chain {
        pins,
        object: Some(current),
    })
}

/// The normal and `..` components of a path (`.` and the root dropped).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake filesystem: directories, files and links by absolute path.
    #[derive(Default)]
    struct Fake(BTreeMap<PathBuf, Node>);

    enum Node {
        Dir,
        File,
        Link(PathBuf),
    }

    impl Fake {
        fn dir(mut self, p: &str) -> Self {
            self.0.insert(p.into(), Node::Dir);
            self
        }
        fn file(mut self, p: &str) -> Self {
            self.0.insert(p.into(), Node::File);
            self
        }
        fn link(mut self, p: &str, t: &str) -> Self {
            self.0.insert(p.into(), Node::Link(t.into()));
            self
        }
        /// Follows links in every component (only for `kind` of a non-link path).
        fn lookup(&self, p: &Path) -> Option<&Node> {
            self.0.get(p)
        }
    }

    impl PathInspector for Fake {
        fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
            Ok(p.to_path_buf())
        }
        fn kind(&self, p: &Path) -> Option<FileKind> {
            match self.lookup(p)? {
                Node::Dir => Some(FileKind::Directory),
                Node::File => Some(FileKind::File { executable: false }),
                Node::Link(_) => None,
            }
        }
        fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
            None
        }
        fn read_link(&self, p: &Path) -> Option<PathBuf> {
            match self.lookup(p)? {
                Node::Link(t) => Some(t.clone()),
                _ => None,
            }
        }
        fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
        fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
    }

    fn base() -> Fake {
        Fake::default()
            .dir("/w")
            .dir("/w/p")
            .dir("/w/p/.git")
            .dir("/w/other")
    }

    fn none(_: &Path) -> bool {
        false
    }

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/w/p")]
    }

    fn dir(p: &str) -> Pin {
        Pin::Directory(p.into())
    }

    fn link(p: &str, t: &str) -> Pin {
        Pin::Symlink {
            path: p.into(),
            target: t.into(),
        }
    }

    #[test]
    fn plain_names_pin_their_directories_below_the_root() {
        let fs = base().dir("/w/p/.git/hooks");
        assert_eq!(
            chain(Path::new("/w/p/.git/hooks"), &roots(), &none, &fs),
            Ok(Chain {
                pins: vec![dir("/w/p/.git")],
                object: Some("/w/p/.git/hooks".into()),
            })
        );
    }

    #[test]
    fn a_relative_link_is_pinned_and_its_target_protected() {
        let fs = base()
            .link("/w/p/.git/hooks", "../githooks")
            .dir("/w/p/githooks");
        assert_eq!(
            chain(Path::new("/w/p/.git/hooks"), &roots(), &none, &fs),
            Ok(Chain {
                pins: vec![dir("/w/p/.git"), link("/w/p/.git/hooks", "../githooks"),],
                object: Some("/w/p/githooks".into()),
            })
        );
    }

    #[test]
    fn a_linked_ancestor_and_a_chain_of_two_links() {
        // .git -> ../other/repo (outside the root: followed, nothing pinned there), whose
        // config -> cfg -> /w/p/real-config (back inside the root).
        let fs = base()
            .link("/w/p/.git", "../other/repo")
            .dir("/w/other/repo")
            .link("/w/other/repo/config", "cfg")
            .link("/w/other/repo/cfg", "/w/p/sub/real-config")
            .dir("/w/p/sub")
            .file("/w/p/sub/real-config");
        assert_eq!(
            chain(Path::new("/w/p/.git/config"), &roots(), &none, &fs),
            Ok(Chain {
                pins: vec![link("/w/p/.git", "../other/repo"), dir("/w/p/sub")],
                object: Some("/w/p/sub/real-config".into()),
            })
        );
    }

    #[test]
    fn loops_and_long_chains_are_refused() {
        let fs = base().link("/w/p/a", "b").link("/w/p/b", "a");
        assert!(matches!(
            chain(Path::new("/w/p/a"), &roots(), &none, &fs),
            Err(ChainError::TooManyLinks { .. })
        ));
        let mut fs = base().dir("/w/p/end");
        for i in 0..=MAX_SYMLINKS {
            fs = fs.link(&format!("/w/p/l{i}"), &format!("l{}", i + 1));
        }
        fs = fs.link(&format!("/w/p/l{}", MAX_SYMLINKS + 1), "end");
        assert!(matches!(
            chain(Path::new("/w/p/l0"), &roots(), &none, &fs),
            Err(ChainError::TooManyLinks { .. })
        ));
        // Exactly the limit is allowed.
        let mut fs = base().dir("/w/p/end");
        for i in 0..MAX_SYMLINKS - 1 {
            fs = fs.link(&format!("/w/p/l{i}"), &format!("l{}", i + 1));
        }
        fs = fs.link(&format!("/w/p/l{}", MAX_SYMLINKS - 1), "end");
        assert_eq!(
            chain(Path::new("/w/p/l0"), &roots(), &none, &fs)
                .unwrap()
                .object,
            Some(PathBuf::from("/w/p/end"))
        );
    }

    #[test]
    fn dangling_links_and_files_used_as_directories_are_refused() {
        let fs = base().link("/w/p/.git/hooks", "../nowhere");
        assert_eq!(
            chain(Path::new("/w/p/.git/hooks"), &roots(), &none, &fs),
            Err(ChainError::Missing {
                name: "/w/p/.git/hooks".into(),
                missing: "/w/p/nowhere".into(),
            })
        );
        let fs = base().file("/w/p/f");
        assert!(matches!(
            chain(Path::new("/w/p/f/x"), &roots(), &none, &fs),
            Err(ChainError::NotADirectory { .. })
        ));
    }

    #[test]
    fn the_walk_stops_in_a_hidden_directory_and_dot_dot_is_physical() {
        let fs = base().link("/w/p/.git/hooks", "/tmp/hooks");
        assert_eq!(
            chain(
                Path::new("/w/p/.git/hooks"),
                &roots(),
                &|p: &Path| p.starts_with("/tmp"),
                &fs
            ),
            Ok(Chain {
                pins: vec![dir("/w/p/.git"), link("/w/p/.git/hooks", "/tmp/hooks")],
                object: None,
            })
        );
        // `l/..` is the parent of the link's target, not of the link.
        let fs = base()
            .link("/w/p/l", "/w/other/deep")
            .dir("/w/other/deep")
            .file("/w/other/x");
        assert_eq!(
            chain(Path::new("/w/p/l/../x"), &roots(), &none, &fs)
                .unwrap()
                .object,
            Some(PathBuf::from("/w/other/x"))
        );
    }
}
