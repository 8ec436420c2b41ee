//! Whole trees below a handle: removed, or measured, without following a link or
//! entering another mount, and with a bounded number of descriptors open at any depth.

use std::ffi::{OsStr, OsString};
use std::io;

use rustix::fs::{Mode, OFlags};

use super::{open_below, unique, Dir, Kind};

/// How many directories deep a removal holds descriptors; a directory deeper than this
/// is moved up to the top of the tree being removed (a rename within it) and removed
/// from there, so that any depth costs at most this many descriptors.
const MAX_OPEN_DEPTH: usize = 32;
/// How many entries of a directory are looked at in one listing.
const BATCH: usize = 4096;

/// Opens the directory `name` below `dir` for a removal: no link followed, no other
/// mount entered (`EXDEV`), made accessible to its owner first when it is not (mode
/// 000: overlayfs's work directories; 0500: a run's read-only directory).
fn open_to_empty(dir: &Dir, name: &OsStr) -> io::Result<Dir> {
    let open = || {
        open_below(
            std::os::fd::AsFd::as_fd(dir),
            name.as_ref(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            true,
        )
    };
    let fd = match open() {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            dir.set_dir_mode(name, 0o700)?;
            open()?
        }
        other => other?,
    };
    let sub = Dir {
        fd,
        path: dir.path.join(name),
    };
    let st = sub.stat()?;
    if st.mode & 0o700 != 0o700 {
        sub.set_mode(st.mode | 0o700)?;
    }
    Ok(sub)
}

/// Up to [`BATCH`] entries of `dir` (the rest once these are gone).
fn batch(dir: &Dir) -> io::Result<Vec<super::Entry>> {
    dir.entries_prefix(BATCH)
}

pub(super) fn remove(parent: &Dir, name: &OsStr, stop: &dyn Fn() -> bool) -> io::Result<()> {
    let interrupted = || io::Error::from(io::ErrorKind::Interrupted);
    if stop() {
        return Err(interrupted());
    }
    let Some(st) = parent.entry(name)? else {
        return Ok(());
    };
    if st.kind != Kind::Directory {
        return ignore_absent(parent.remove_file(name));
    }
    let top = open_to_empty(parent, name)?;
    empty(&top, &top, 0, stop)?;
    drop(top);
    if stop() {
        return Err(interrupted());
    }
    ignore_absent(parent.remove_dir(name))
}

fn ignore_absent(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes everything in `dir`, which lies `depth` directories below `top`.
pub(super) fn empty(dir: &Dir, top: &Dir, depth: usize, stop: &dyn Fn() -> bool) -> io::Result<()> {
    loop {
        let entries = batch(dir)?;
        if entries.is_empty() {
            return Ok(());
        }
        for entry in entries {
            if stop() {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            let name = entry.name.as_os_str();
            if entry.kind != Kind::Directory {
                match dir.remove_file(name) {
                    // Made a directory since it was listed: listed again.
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) => {
                    }
                    other => ignore_absent(other)?,
                }
                continue;
            }
            if depth + 1 >= MAX_OPEN_DEPTH {
                let flat = OsString::from(format!(
                    ".sandy-removing-{}-{}",
                    std::process::id(),
                    unique()
                ));
                ignore_absent(dir.rename_noreplace(name, top, &flat))?;
                continue;
            }
            let sub = match open_to_empty(dir, name) {
                Ok(sub) => sub,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // A file (or link) now: listed again.
                Err(e)
                    if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error())
                        || e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            empty(&sub, top, depth + 1, stop)?;
            drop(sub);
            match dir.remove_dir(name) {
                // Something was added meanwhile, or it was replaced: listed again.
                Err(e)
                    if e.raw_os_error() == Some(rustix::io::Errno::NOTEMPTY.raw_os_error())
                        || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {}
                other => ignore_absent(other)?,
            }
        }
    }
}

/// The blocks of the tree at `name` below `dir`, in bytes: nothing followed, no other
/// mount entered, at most `max` entries and [`MAX_OPEN_DEPTH`] levels counted.
pub(super) fn usage(dir: &Dir, name: &OsStr, max: usize) -> u64 {
    let Ok(Some(st)) = dir.entry(name) else {
        return 0;
    };
    let blocks = |d: &Dir, n: &OsStr| {
        rustix::fs::statat(d, n, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_or(0, |s| u64::try_from(s.st_blocks).unwrap_or(0) * 512)
    };
    let mut total = blocks(dir, name);
    if st.kind != Kind::Directory {
        return total;
    }
    let open = |d: &Dir, n: &OsStr| {
        open_below(
            std::os::fd::AsFd::as_fd(d),
            n.as_ref(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            true,
        )
        .map(|fd| Dir {
            fd,
            path: d.path.join(n),
        })
    };
    /// Depth first, so that at most one directory per level is open.
    fn count(
        d: &Dir,
        depth: usize,
        budget: &mut usize,
        total: &mut u64,
        blocks: &dyn Fn(&Dir, &OsStr) -> u64,
        open: &dyn Fn(&Dir, &OsStr) -> io::Result<Dir>,
    ) {
        let Ok(entries) = d.entries_prefix(*budget) else {
            return;
        };
        *budget = budget.saturating_sub(entries.len());
        for e in &entries {
            *total += blocks(d, &e.name);
            if e.kind == Kind::Directory && depth + 1 < MAX_OPEN_DEPTH && *budget > 0 {
                if let Ok(sub) = open(d, &e.name) {
                    count(&sub, depth + 1, budget, total, blocks, open);
                }
            }
        }
    }
    if let Ok(top) = open(dir, name) {
        let mut budget = max;
        count(&top, 0, &mut budget, &mut total, &blocks, &open);
    }
    total
}
