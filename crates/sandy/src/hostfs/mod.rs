//! The supervisor's hands on the host's files (design promise 6, §5).
//!
//! Sandy runs unsandboxed, with the user's full rights, before, beside and after each
//! sandboxed run. Whatever a run could have written (the project and every writable
//! grant, agent state directories and their stand-ins, cache layers, Sandy's per-run
//! directories, a name a log is written to) is hostile input to that work: a run, or a
//! concurrent run of the same user, may put a symbolic link, a FIFO, a device, a hard
//! link or a directory where Sandy expects something else, and swap it back and forth
//! while Sandy looks (`renameat2(RENAME_EXCHANGE)` in a loop).
//!
//! This module is the only code that opens, creates, renames, removes, reads or writes
//! such a path, and it does so in one way:
//!
//! - From a directory handle ([`Dir`]) opened once: a *root* is a directory no run can
//!   replace (the project directory itself, a state directory, Sandy's own cache), opened
//!   by its name with the user's own symbolic links followed ([`Dir::open`]), or a path
//!   that must have no link on it at all ([`Dir::open_exact`]).
//! - Every step below a root is taken with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
//!   | RESOLVE_NO_MAGICLINKS)` (a kernel without `openat2`: `O_NOFOLLOW` at each step):
//!   a link on the way is an error, never followed.
//! - Entries are named by one component relative to their directory's handle: renames
//!   and removals are `renameat`/`unlinkat` on handles, never a path string after a
//!   check; what a name holds is checked on the descriptor opened (`fstat`), not before.
//! - Files are opened with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, checked to be regular
//!   files, and read within a bound: a FIFO never blocks Sandy, a device is never read,
//!   a link to `/dev/zero` or to `~/.ssh/id_ed25519` is never followed.
//! - A tree is removed without following a link and without crossing into another mount
//!   ([`Dir::remove_tree`]), with a bounded number of open descriptors at any depth.
//!
//! The crate's `clippy.toml` refuses path-based `std::fs` calls everywhere else; each
//! remaining exception names why the path it touches cannot be a run's.
#![allow(clippy::disallowed_methods)] // the one module that may

mod inspect;
mod tree;

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, ResolveFlags};

pub use inspect::{canonicalize, listed_type, HostFs};

/// What a directory entry is, from `lstat` (a link is a link, never what it leads to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Directory,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Unknown => Kind::Unknown,
        }
    }

    /// How a person would name it ("a FIFO").
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a file",
            Kind::Directory => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::CharDevice | Kind::BlockDevice => "a device",
            Kind::Unknown => "something unknown",
        }
    }
}

/// What `fstat`/`lstat` says of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: Kind,
    /// The permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    /// Seconds and nanoseconds.
    pub mtime: (i64, i64),
}

impl Stat {
    fn from(st: &rustix::fs::Stat) -> Stat {
        Stat {
            kind: Kind::of(FileType::from_raw_mode(st.st_mode)),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: u64::try_from(st.st_size).unwrap_or(0),
            #[allow(clippy::useless_conversion)] // u64 here, u32 on some targets
            nlink: u64::from(st.st_nlink),
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)),
        }
    }

    /// Whether both describe the same file (device and inode).
    pub fn same_file(&self, other: &Stat) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

/// An open directory: the handle every operation below it starts from. `path` is the
/// name it was opened by, for messages only (never used to reach it again).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How many entries a listing reads at most, unless the caller bounds it lower.
pub const MAX_ENTRIES: usize = 1 << 20;

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// `name` as one component of a directory: not empty, no `/`, not `.` or `..`.
fn component(name: &OsStr) -> io::Result<&OsStr> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(invalid("not a single file name"));
    }
    Ok(name)
}

/// `rel` as a path below a directory: relative, only plain names.
fn below(rel: &Path) -> io::Result<&Path> {
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain || rel.as_os_str().is_empty() {
        return Err(invalid("not a plain relative path"));
    }
    Ok(rel)
}

/// Whether `openat2` is known to exist (2), to be missing (1), or not asked yet (0).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// The flags every open here carries.
const ALWAYS: OFlags = OFlags::CLOEXEC.union(OFlags::NOCTTY);

/// Opens `rel` below `dir` without following any symbolic link on the way or at the end
/// (`ELOOP`, or `ENOTDIR` for a link on the way where `openat2` is missing), nor
/// crossing into another mount with `no_xdev` (`EXDEV`).
fn open_below(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
    no_xdev: bool,
) -> io::Result<OwnedFd> {
    let rel = below(rel)?;
    let flags = flags | ALWAYS | OFlags::NOFOLLOW;
    if OPENAT2.load(Ordering::Relaxed) != 1 {
        let mut resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        if no_xdev {
            resolve |= ResolveFlags::NO_XDEV;
        }
        // EAGAIN: a rename elsewhere on the system raced the lookup; asked again.
        for _ in 0..16 {
            match rustix::fs::openat2(dir, rel, flags, mode, resolve) {
                Err(rustix::io::Errno::AGAIN) => continue,
                Err(rustix::io::Errno::NOSYS) => {
                    OPENAT2.store(1, Ordering::Relaxed);
                    break;
                }
                other => {
                    OPENAT2.store(2, Ordering::Relaxed);
                    return other.map_err(io::Error::from);
                }
            }
        }
        if OPENAT2.load(Ordering::Relaxed) != 1 {
            return Err(io::Error::from(rustix::io::Errno::AGAIN));
        }
    }
    open_below_stepwise(dir, rel, flags, mode, no_xdev)
}

/// Which mount `fd` lies on: its mount id where the kernel says (`statx`, Linux 5.8),
/// and its device (which tells another file system, not a bind mount of the same one).
fn mount_of(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    use rustix::fs::{Statx, StatxFlags};
    match rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID) {
        Ok(Statx {
            stx_mask,
            stx_mnt_id,
            stx_dev_major,
            stx_dev_minor,
            ..
        }) => {
            let id = if stx_mask & StatxFlags::MNT_ID.bits() != 0 {
                stx_mnt_id
            } else {
                0
            };
            Ok((
                id,
                (u64::from(stx_dev_major) << 32) | u64::from(stx_dev_minor),
            ))
        }
        Err(_) => Ok((0, rustix::fs::fstat(fd)?.st_dev)),
    }
}

/// [`open_below`] where `openat2` is missing: each step opened with `O_NOFOLLOW`, and a
/// step onto another mount refused with `no_xdev` (told by the mount id `statx` gives,
/// or where it gives none, by the device).
fn open_below_stepwise(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
    no_xdev: bool,
) -> io::Result<OwnedFd> {
    let names: Vec<&OsStr> = rel.iter().collect();
    let Some((last, way)) = names.split_last() else {
        return Err(invalid("not a plain relative path"));
    };
    let dev = mount_of;
    let start = dev(dir)?;
    let mut held: Option<OwnedFd> = None;
    for name in way {
        let here = held.as_ref().map_or(dir, AsFd::as_fd);
        let next = rustix::fs::openat(
            here,
            *name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | ALWAYS,
            Mode::empty(),
        )?;
        if no_xdev && dev(next.as_fd())? != start {
            return Err(io::Error::from(rustix::io::Errno::XDEV));
        }
        held = Some(next);
    }
    let here = held.as_ref().map_or(dir, AsFd::as_fd);
    let fd = rustix::fs::openat(here, *last, flags, mode)?;
    if no_xdev && dev(fd.as_fd())? != start {
        return Err(io::Error::from(rustix::io::Errno::XDEV));
    }
    Ok(fd)
}

#[cfg(test)]
pub(crate) fn force_stepwise(on: bool) {
    OPENAT2.store(if on { 1 } else { 0 }, Ordering::Relaxed);
}

impl Dir {
    /// Opens a root: a directory by the name the user or Sandy gave it, following the
    /// user's own symbolic links on the way. Only for a name no sandboxed run can
    /// replace (its parent is not writable to any run); below it, [`Dir::open_dir`].
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | ALWAYS,
            Mode::empty(),
        )?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens an absolute path none of whose components may be a symbolic link (a
    /// canonical path recorded before a run, looked at again after it).
    pub fn open_exact(path: &Path) -> io::Result<Dir> {
        let rel = path
            .strip_prefix("/")
            .map_err(|_| invalid("not an absolute path"))?;
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(invalid("not a plain absolute path"));
        }
        if OPENAT2.load(Ordering::Relaxed) == 2 {
            // One call: from the root, no link anywhere.
            let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            for _ in 0..16 {
                match rustix::fs::openat2(
                    rustix::fs::CWD,
                    path,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | ALWAYS,
                    Mode::empty(),
                    resolve,
                ) {
                    Err(rustix::io::Errno::AGAIN) => continue,
                    Ok(fd) => {
                        return Ok(Dir {
                            fd,
                            path: path.to_path_buf(),
                        })
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let root = Dir::open(Path::new("/"))?;
        if rel.as_os_str().is_empty() {
            return Ok(root);
        }
        root.open_dir(rel)
    }

    /// The name this directory was opened by (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory below this one at `rel` (plain names only), no link followed.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> io::Result<Dir> {
        let rel = rel.as_ref();
        let fd = open_below(
            self.fd.as_fd(),
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            false,
        )?;
        Ok(Dir {
            fd,
            path: self.path.join(rel),
        })
    }

    /// A second handle on the same directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// What this directory is (`fstat`).
    pub fn stat(&self) -> io::Result<Stat> {
        Ok(Stat::from(&rustix::fs::fstat(&self.fd)?))
    }

    /// What the entry `name` is, without following it; `None` when there is none.
    pub fn entry(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Stat>> {
        let name = component(name.as_ref())?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Stat::from(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The entries (not `.` and `..`), at most `max` of them (`Err` past that: a
    /// listing cut short is never taken for the whole), in the order the directory
    /// gives them.
    pub fn entries(&self, max: usize) -> io::Result<Vec<Entry>> {
        self.list(max, false)
    }

    /// The first `max` entries (not `.` and `..`), however many there are.
    pub fn entries_prefix(&self, max: usize) -> io::Result<Vec<Entry>> {
        self.list(max, true)
    }

    fn list(&self, max: usize, cut: bool) -> io::Result<Vec<Entry>> {
        let mut dir = rustix::fs::Dir::read_from(&self.fd)?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if out.len() >= max {
                if cut {
                    break;
                }
                return Err(io::Error::other("too many entries"));
            }
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(&self.fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                    {
                        Ok(st) => Kind::of(FileType::from_raw_mode(st.st_mode)),
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                t => Kind::of(t),
            };
            out.push(Entry {
                name: OsStr::from_bytes(name).to_os_string(),
                kind,
            });
        }
        Ok(out)
    }

    /// Where the symbolic link `name` leads (its text, never followed).
    pub fn read_link(&self, name: impl AsRef<OsStr>) -> io::Result<PathBuf> {
        let name = component(name.as_ref())?;
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new())?;
        Ok(PathBuf::from(OsString::from_vec(target.into_bytes())))
    }

    /// Opens the regular file `name` for reading: never a link, never blocking on a FIFO
    /// or a device (`Ok(None)` for anything that is not a regular file).
    pub fn open_regular(
        &self,
        name: impl AsRef<OsStr>,
    ) -> io::Result<Option<(std::fs::File, Stat)>> {
        let name = component(name.as_ref())?;
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | ALWAYS,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // A link (ELOOP), or a FIFO/device that refused a non-blocking open.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NXIO) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let st = Stat::from(&rustix::fs::fstat(&fd)?);
        if st.kind != Kind::File {
            return Ok(None);
        }
        Ok(Some((std::fs::File::from(fd), st)))
    }

    /// The content of the regular file `name`, at most `max` bytes: `Ok(None)` when it
    /// is not a regular file (a link, a FIFO, a device) or is larger.
    pub fn read(&self, name: impl AsRef<OsStr>, max: usize) -> io::Result<Option<Vec<u8>>> {
        let Some((file, st)) = self.open_regular(name)? else {
            return Ok(None);
        };
        read_within(file, st, max)
    }

    /// Creates the file `name` (it must not exist, not even as a dangling link) with
    /// exactly `mode`, and returns it open for writing.
    pub fn create_file(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<std::fs::File> {
        let name = component(name.as_ref())?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | ALWAYS,
            Mode::from_bits_truncate(mode),
        )?;
        rustix::fs::fchmod(&fd, Mode::from_bits_truncate(mode))?;
        Ok(std::fs::File::from(fd))
    }

    /// Creates the file `name` with `content` and exactly `mode` (see
    /// [`Dir::create_file`]).
    pub fn write_new(&self, name: impl AsRef<OsStr>, content: &[u8], mode: u32) -> io::Result<()> {
        self.create_file(name, mode)?.write_all(content)
    }

    /// Replaces `name` with `content` atomically: a new file beside it (exactly `mode`,
    /// owned by `owner` when given and not the caller), synced, renamed over it. A
    /// link at `name` is replaced, never followed; a directory there is an error.
    pub fn replace(
        &self,
        name: impl AsRef<OsStr>,
        content: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        self.replace_with(name.as_ref(), content, mode, owner, true)
    }

    /// [`Dir::replace`], without waiting for the disk: for what is used only in the boot
    /// it was written in (a crash before the data reached the disk also ends that boot).
    pub fn replace_for_this_boot(
        &self,
        name: impl AsRef<OsStr>,
        content: &[u8],
        mode: u32,
    ) -> io::Result<()> {
        self.replace_with(name.as_ref(), content, mode, None, false)
    }

    fn replace_with(
        &self,
        name: &OsStr,
        content: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        sync: bool,
    ) -> io::Result<()> {
        let name = component(name)?;
        if self
            .entry(name)?
            .is_some_and(|st| st.kind == Kind::Directory)
        {
            return Err(io::Error::from(rustix::io::Errno::ISDIR));
        }
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".sandy-{}-{}", std::process::id(), unique()));
        let result = (|| {
            let mut file = self.create_file(&temp, 0o600)?;
            file.write_all(content)?;
            if let Some((uid, gid)) = owner {
                if (uid, gid)
                    != (
                        rustix::process::getuid().as_raw(),
                        rustix::process::getgid().as_raw(),
                    )
                {
                    rustix::fs::fchown(
                        &file,
                        Some(rustix::fs::Uid::from_raw(uid)),
                        Some(rustix::fs::Gid::from_raw(gid)),
                    )?;
                }
            }
            rustix::fs::fchmod(&file, Mode::from_bits_truncate(mode))?;
            if sync {
                file.sync_all()?;
            }
            self.rename(&temp, self, name)
        })();
        if result.is_err() {
            let _ = self.remove_file(&temp);
        }
        result
    }

    /// Opens the log `name` to append to, creating it (0600) when absent. What is there
    /// must be a regular file of this user's with no other name (a hard link would
    /// append to a file the user never named); a link, a FIFO, a socket or a device is
    /// refused at once, never waited on.
    pub fn append_log(&self, name: impl AsRef<OsStr>) -> io::Result<std::fs::File> {
        let name = component(name.as_ref())?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::NONBLOCK
                | OFlags::NOFOLLOW
                | ALWAYS,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => not_regular("a symbolic link"),
            // A FIFO nobody reads, or a device that refuses.
            rustix::io::Errno::NXIO => not_regular("a FIFO or a device"),
            e => e.into(),
        })?;
        let st = Stat::from(&rustix::fs::fstat(&fd)?);
        if st.kind != Kind::File {
            return Err(not_regular(st.kind.describe()));
        }
        if st.uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "it belongs to another user",
            ));
        }
        if st.nlink != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it has other names (hard links)",
            ));
        }
        // Writes wait for the disk again.
        rustix::fs::fcntl_setfl(&fd, OFlags::APPEND)?;
        Ok(std::fs::File::from(fd))
    }

    /// Creates the directory `name` with exactly `mode` and opens it. What is opened is
    /// checked to be an empty directory of this user's: one swapped in between the two
    /// steps (by a run that can write here) is refused.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        let name = component(name.as_ref())?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode))?;
        let dir = self.open_dir(name)?;
        let st = dir.stat()?;
        if st.uid != rustix::process::geteuid().as_raw() || !dir.entries_prefix(1)?.is_empty() {
            return Err(io::Error::other(
                "the new directory was replaced while it was made",
            ));
        }
        if st.mode != mode & 0o7777 {
            rustix::fs::fchmod(&dir.fd, Mode::from_bits_truncate(mode))?;
        }
        Ok(dir)
    }

    /// Opens the directory `name`, creating it with `mode` when absent. Whether made here
    /// or found, it must be a real directory (not a link) of this user's; what is in it
    /// is not asked (a concurrent Sandy that made or found it too may already have put
    /// its own entries there: `/tmp/sandy-UID` at the first runs on a machine).
    pub fn ensure_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        let name = component(name.as_ref())?;
        let made = match rustix::fs::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(e.into()),
        };
        let dir = self.open_dir(name)?;
        let st = dir.stat()?;
        if st.uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "it belongs to another user",
            ));
        }
        if made && st.mode != mode & 0o7777 {
            rustix::fs::fchmod(&dir.fd, Mode::from_bits_truncate(mode))?;
        }
        Ok(dir)
    }

    /// Removes the entry `name` if it is not a directory (a link itself, never what it
    /// leads to).
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = component(name.as_ref())?;
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// Removes the empty directory `name`.
    pub fn remove_dir(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = component(name.as_ref())?;
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)?)
    }

    /// Removes `name`, a file, a link or an empty directory; nothing when absent.
    pub fn remove_entry(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name.as_ref();
        let result = match self.entry(name)? {
            None => return Ok(()),
            Some(st) if st.kind == Kind::Directory => self.remove_dir(name),
            Some(_) => self.remove_file(name),
        };
        match result {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Renames `from` here to `to` in `dest` (`renameat`: whatever `from` is, it is
    /// moved itself; a link is moved as a link).
    pub fn rename(
        &self,
        from: impl AsRef<OsStr>,
        dest: &Dir,
        to: impl AsRef<OsStr>,
    ) -> io::Result<()> {
        let (from, to) = (component(from.as_ref())?, component(to.as_ref())?);
        Ok(rustix::fs::renameat(&self.fd, from, &dest.fd, to)?)
    }

    /// [`Dir::rename`], but never over an existing entry (`AlreadyExists`).
    pub fn rename_noreplace(
        &self,
        from: impl AsRef<OsStr>,
        dest: &Dir,
        to: impl AsRef<OsStr>,
    ) -> io::Result<()> {
        let (from, to) = (component(from.as_ref())?, component(to.as_ref())?);
        Ok(rustix::fs::renameat_with(
            &self.fd,
            from,
            &dest.fd,
            to,
            RenameFlags::NOREPLACE,
        )?)
    }

    /// Creates the symbolic link `name` leading to `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = component(name.as_ref())?;
        Ok(rustix::fs::symlinkat(target.as_ref(), &self.fd, name)?)
    }

    /// Sets the permission bits of this directory.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        Ok(rustix::fs::fchmod(
            &self.fd,
            Mode::from_bits_truncate(mode),
        )?)
    }

    /// Sets the permission bits of the entry `name` when it is a directory, without
    /// following a link and without needing to read it (a directory left with mode 000
    /// by overlayfs). `Ok(false)` when it is not a directory.
    pub fn set_dir_mode(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<bool> {
        let name = component(name.as_ref())?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | ALWAYS,
            Mode::empty(),
        )?;
        if Kind::of(FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode)) != Kind::Directory {
            return Ok(false);
        }
        // A descriptor opened with O_PATH cannot be changed directly; its name in
        // /proc/self/fd leads to exactly the object it holds (not through any link).
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        rustix::fs::chmod(proc.as_str(), Mode::from_bits_truncate(mode))?;
        Ok(true)
    }

    /// Takes this directory's `flock`: exclusive or shared, without waiting (`Ok(false)`
    /// when another holds it). It is held until every handle on it is closed.
    pub fn try_lock(&self, exclusive: bool) -> io::Result<bool> {
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        match rustix::fs::flock(&self.fd, op) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes this directory's shared `flock`, waiting while another holds it
    /// exclusively.
    pub fn lock_shared(&self) -> io::Result<()> {
        Ok(rustix::fs::flock(&self.fd, FlockOperation::LockShared)?)
    }

    /// Whether this directory still has a name (a directory removed while open has
    /// none).
    pub fn is_linked(&self) -> io::Result<bool> {
        Ok(self.stat()?.nlink > 0)
    }

    /// Removes the tree at `name` (a file or link is simply removed): never following a
    /// link, never entering another mount (what lies on one is left, and the removal
    /// fails), and making its directories writable to their owner first (overlayfs
    /// leaves mode 000). `stop` is asked before each removal; once it says so, the rest
    /// is left (`Interrupted`).
    pub fn remove_tree(&self, name: impl AsRef<OsStr>, stop: &dyn Fn() -> bool) -> io::Result<()> {
        tree::remove(self, component(name.as_ref())?, stop)
    }

    /// Removes everything in this directory (see [`Dir::remove_tree`]), through this
    /// handle: whatever has its name meanwhile is not touched.
    pub fn remove_contents(&self, stop: &dyn Fn() -> bool) -> io::Result<()> {
        let st = self.stat()?;
        if st.mode & 0o700 != 0o700 {
            self.set_mode(st.mode | 0o700)?;
        }
        tree::empty(self, self, 0, stop)
    }

    /// The disk space a tree below `name` takes (blocks), no link followed, no other
    /// mount entered, at most `max` entries counted.
    pub fn disk_usage(&self, name: impl AsRef<OsStr>, max: usize) -> u64 {
        component(name.as_ref()).map_or(0, |name| tree::usage(self, name, max))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn not_regular(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    )
}

/// Reads an open regular file of `st`'s size, at most `max` bytes (`None` past it).
fn read_within(file: std::fs::File, st: Stat, max: usize) -> io::Result<Option<Vec<u8>>> {
    let max64 = u64::try_from(max).unwrap_or(u64::MAX);
    if st.size > max64 {
        return Ok(None);
    }
    let mut buf = Vec::with_capacity(usize::try_from(st.size).unwrap_or(0));
    file.take(max64.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Ok(None);
    }
    Ok(Some(buf))
}

/// What [`read_user_file`] found.
#[derive(Debug)]
pub enum UserFile {
    /// Nothing at the name.
    Absent,
    /// Something other than a regular file (a directory, a FIFO, a device).
    NotRegular,
    /// Larger than the bound.
    TooLarge,
    /// The content, read from the canonical path (no link followed once it is known).
    Read(Vec<u8>),
}

/// Reads a file of the user's (a configuration or policy file) within `max` bytes: its
/// name resolved once by the kernel, then opened from its canonical directory with no
/// link followed on the way or at the file, never blocking on a FIFO or reading a device.
/// Whether a run could have written it is the caller's question, asked of every name on
/// the way ([`sandy_policy::files::check_not_writable`]).
pub fn read_user_file(path: &Path, max: usize) -> io::Result<UserFile> {
    let canonical = match canonicalize(path) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(UserFile::Absent),
        Err(e) => return Err(e),
    };
    let (Some(parent), Some(name)) = (canonical.parent(), canonical.file_name()) else {
        return Ok(UserFile::NotRegular);
    };
    let Some((file, st)) = Dir::open_exact(parent)?.open_regular(name)? else {
        return Ok(UserFile::NotRegular);
    };
    match read_within(file, st, max)? {
        Some(bytes) => Ok(UserFile::Read(bytes)),
        None => Ok(UserFile::TooLarge),
    }
}

/// A number no other call of this process has had (for temporary names).
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Opens the directory at `path` starting from `root`: `root` by its name (a root, see
/// [`Dir::open`]), the rest of the way with no link followed. `path` must lie below
/// `root` (or be it).
pub fn open_under(root: &Path, path: &Path) -> io::Result<Dir> {
    let rest = path
        .strip_prefix(root)
        .map_err(|_| invalid("the path is not below its root"))?;
    let root = Dir::open(root)?;
    if rest.as_os_str().is_empty() {
        Ok(root)
    } else {
        root.open_dir(rest)
    }
}

/// The `landlock` tier's gate on pathname Unix sockets: an `O_PATH` handle of the socket
/// at `path` (absolute), which must lie at or below one of `roots` (the policy's grants;
/// the most specific one is taken), with no link followed below that root. The
/// supervisor connects the run's socket through `/proc/self/fd/N` of this handle, so
/// that what is connected is what was checked. `PermissionDenied` when no root holds
/// `path`; `ENOTSOCK` when it is not a socket.
pub fn open_socket_under(roots: &[PathBuf], path: &Path) -> io::Result<OwnedFd> {
    let root = roots
        .iter()
        .filter(|r| path.starts_with(r))
        .max_by_key(|r| r.as_os_str().len())
        .ok_or_else(|| io::Error::from(io::ErrorKind::PermissionDenied))?;
    let fd = match path.strip_prefix(root) {
        Ok(rest) if !rest.as_os_str().is_empty() => {
            let dir = Dir::open(root)?;
            // openat2 refuses with O_PATH any flag but these (Landlock ABI 6 needs a
            // kernel that has openat2).
            rustix::fs::openat2(
                dir.fd.as_fd(),
                below(rest)?,
                OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )?
        }
        // The root itself (an exact grant of the socket): by its name, not followed.
        _ => rustix::fs::open(
            root,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?,
    };
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(io::Error::from(rustix::io::Errno::NOTSOCK));
    }
    Ok(fd)
}

/// Opens a directory the user named (a log's directory), where a run may have put a
/// name on the way: the user's own links are followed up to the first directory that
/// lies in `writable` (what a sandboxed run may write), and from there on no link is
/// followed at all (`ELOOP`). A relative `path` is taken from the working directory.
pub fn open_named_dir<'a>(
    path: &Path,
    writable: impl IntoIterator<Item = &'a Path> + Clone,
) -> io::Result<Dir> {
    let within = |p: &Path| {
        writable
            .clone()
            .into_iter()
            .filter(|w| p.starts_with(w))
            .max_by_key(|w| w.as_os_str().len())
            .map(Path::to_path_buf)
    };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let plain = absolute
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain {
        // The usual cases, in one or two opens: a name below a writable place is opened
        // from that place (its name is a grant's, canonical) with no link; a name
        // outside every writable place with no link on it at all is opened as it is.
        if let Some(root) = within(&absolute) {
            return open_under(&root, &absolute).map_err(|e| moved_error(&root, e));
        }
        if let Ok(dir) = Dir::open_exact(&absolute) {
            return Ok(dir);
        }
    }
    let mut current = PathBuf::from("/");
    let mut root = within(&current);
    for part in absolute.components() {
        match part {
            Component::RootDir | Component::CurDir => continue,
            Component::Prefix(_) => return Err(invalid("not a Unix path")),
            // `..` after a writable directory could lead back out through a link the
            // run made; before one, it is the user's own way.
            Component::ParentDir if root.is_some() => {
                return Err(invalid("`..` inside a directory the sandbox may write"))
            }
            Component::ParentDir => {
                current = canonicalize(current.join(".."))?;
            }
            Component::Normal(name) if root.is_some() => current.push(name),
            Component::Normal(name) => {
                // Outside everything a run may write, the entry cannot have changed
                // since: its directory is not writable to any run.
                current = canonicalize(current.join(name))?;
                root = within(&current);
            }
        }
    }
    match root {
        Some(root) => open_under(&root, &current).map_err(|e| moved_error(&root, e)),
        None => Dir::open(&current),
    }
}

/// An error of a walk below `root` (a place a run may write), said for a person when it
/// met a link or a file on the way.
fn moved_error(root: &Path, e: io::Error) -> io::Error {
    let loop_or_file = [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR]
        .map(|e| e.raw_os_error())
        .contains(&e.raw_os_error().unwrap_or(0));
    if loop_or_file {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a symbolic link or a file is on the way below {}, which a sandboxed run \
                 may write (no link is followed there)",
                sandy_policy::text::Shown(root)
            ),
        )
    } else {
        e
    }
}

/// The way a directory's name led, when it was looked at: where the directory was then
/// (its canonical path; below the first name that did not exist, the rest of the name
/// as it is) and every symbolic link met on the way (where it was, what it said).
///
/// A path is recorded by its way before a run and looked at again after it only if its
/// way is the same: a link a run put on the way (`project/.claude -> ~/.claude`) makes
/// another way, which is reported as such and never followed ([`Way::open`] opens the
/// recorded place with no link anywhere on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Way {
    pub at: PathBuf,
    pub links: Vec<(PathBuf, PathBuf)>,
}

impl Way {
    /// The way `dir` (absolute, lexically normal) leads now. Looking follows links (it
    /// only names where they lead); nothing is opened.
    pub fn of(dir: &Path) -> Way {
        let mut at = PathBuf::from("/");
        let mut links = Vec::new();
        let mut exists = true;
        for part in dir.components() {
            let Component::Normal(name) = part else {
                if part == Component::ParentDir {
                    at.pop();
                }
                continue;
            };
            let next = at.join(name);
            if !exists {
                at = next;
                continue;
            }
            match rustix::fs::lstat(&next) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    let text = rustix::fs::readlink(&next, Vec::new())
                        .map(|t| PathBuf::from(OsString::from_vec(t.into_bytes())))
                        .unwrap_or_default();
                    links.push((next.clone(), text));
                    match canonicalize(&next) {
                        Ok(real) => at = real,
                        Err(_) => {
                            at = next;
                            exists = false;
                        }
                    }
                }
                Ok(_) => at = next,
                Err(_) => {
                    at = next;
                    exists = false;
                }
            }
        }
        Way { at, links }
    }

    /// Opens the place this way led to, with no link on it (`NotFound` when it does not
    /// exist; `ELOOP`/`ENOTDIR` when a link or a file is on it now).
    pub fn open(&self) -> io::Result<Dir> {
        Dir::open_exact(&self.at)
    }

    /// What differs in `now` from this way, for a person: the first link that is new,
    /// gone or changed.
    pub fn change(&self, now: &Way) -> String {
        for (place, text) in &now.links {
            match self.links.iter().find(|(p, _)| p == place) {
                None => {
                    return format!(
                        "{} is now a symbolic link to {}",
                        sandy_policy::text::Shown(place),
                        sandy_policy::text::Shown(text)
                    )
                }
                Some((_, was)) if was != text => {
                    return format!(
                        "the symbolic link {} now leads to {} (was {})",
                        sandy_policy::text::Shown(place),
                        sandy_policy::text::Shown(text),
                        sandy_policy::text::Shown(was)
                    )
                }
                Some(_) => {}
            }
        }
        match self
            .links
            .iter()
            .find(|(p, _)| !now.links.iter().any(|(q, _)| q == p))
        {
            Some((place, _)) => format!(
                "{} is no longer a symbolic link",
                sandy_policy::text::Shown(place)
            ),
            None => format!("it now leads to {}", sandy_policy::text::Shown(&now.at)),
        }
    }
}

/// The names of the subdirectories (real directories, not links to one) of the
/// directory `path` (a git directory's `worktrees/` or `modules/`, as git names them),
/// at most [`MAX_ENTRIES`]; none when it cannot be listed.
pub fn subdirectories(path: &Path) -> Vec<OsString> {
    Dir::open(path)
        .and_then(|d| d.entries_prefix(MAX_ENTRIES))
        .map(|entries| {
            entries
                .into_iter()
                .filter(|e| e.kind == Kind::Directory)
                .map(|e| e.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Opens the directory at `path` (a place of Sandy's own that no run may write, such as
/// its state directory), creating it and any missing ancestor with `mode` when absent.
pub fn open_or_create(path: &Path, mode: u32) -> io::Result<Dir> {
    match Dir::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(e);
            };
            open_or_create(parent, mode)?.ensure_dir(name, mode)
        }
        other => other,
    }
}

/// The directory holding the file a user keeps at `path` (an agent's state file, a
/// start-up file), opened by [`open_named_dir`], and the file's name in it. With
/// `follow_link`, a symbolic link at the name itself (a dotfile manager's) is followed
/// once, to where it leads: only for a name no run can replace (outside every writable
/// place, or protected read-only in each run that can write its directory).
pub fn locate<'a>(
    path: &Path,
    writable: impl IntoIterator<Item = &'a Path> + Clone,
    follow_link: bool,
) -> io::Result<(Dir, OsString)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(invalid("no parent directory or no file name"));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let dir = open_named_dir(parent, writable.clone())?;
    if follow_link && dir.entry(name)?.is_some_and(|st| st.kind == Kind::Symlink) {
        let target = canonicalize(path)?;
        return locate(&target, writable, false);
    }
    Ok((dir, name.to_os_string()))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests;
