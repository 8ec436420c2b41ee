//! Raw mount syscalls that no safe wrapper covers (part of the `sys` module: every
//! `unsafe` block of Sandy lives under `sys`).
//!
//! Every function here acts on an object designated by a descriptor, never by a path:
//! what is mounted on is exactly what the caller checked, whatever a concurrent rename
//! has put at its name since.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::{MountAttr, AT_RECURSIVE, MOUNT_ATTR_RDONLY};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;

/// A detached copy of the mount tree at the object `fd` designates (`open_tree` with
/// `OPEN_TREE_CLONE`, and `AT_RECURSIVE` for the mounts below it too).
fn clone_tree(fd: BorrowedFd<'_>, recursive: bool) -> nix::Result<OwnedFd> {
    let empty = c"";
    let flags = OPEN_TREE_CLONE
        | OPEN_TREE_CLOEXEC
        | libc::AT_EMPTY_PATH as libc::c_uint
        | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: open_tree reads the NUL-terminated empty string for the duration of the call
    // and takes scalars otherwise; with AT_EMPTY_PATH it acts on the borrowed, open
    // descriptor itself. It returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), empty.as_ptr(), flags) };
    let raw = Errno::result(ret)?;
    let raw = i32::try_from(raw).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor; nothing else knows or owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Attaches the detached tree on top of the object `onto` designates.
fn attach(tree: &OwnedFd, onto: BorrowedFd<'_>) -> nix::Result<()> {
    let empty = c"";
    // SAFETY: the empty string is NUL-terminated and lives for the call; the source is
    // the owned tree descriptor (MOVE_MOUNT_F_EMPTY_PATH), the destination the borrowed
    // descriptor itself (MOVE_MOUNT_T_EMPTY_PATH). Only scalars otherwise.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            onto.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    Errno::result(ret).map(drop)
}

/// Pins a symbolic link as a link: a detached copy of the link itself (never its
/// target) is attached on top of the link itself. The name is then a mount point:
/// unlinking, renaming or replacing it fails with `EBUSY`.
///
/// `link` must be an `O_PATH | O_NOFOLLOW` descriptor of a link; the caller checks it is
/// one.
pub fn pin_symlink(link: BorrowedFd<'_>) -> nix::Result<()> {
    let tree = clone_tree(link, false)?;
    attach(&tree, link)
}

/// Makes the object `object` designates read-only with everything mounted below it: a
/// recursive detached copy of it is made read-only (`mount_setattr` with `AT_RECURSIVE`
/// on the copy) and attached on top of the object itself. Like a bind of the object onto
/// itself, its name is then a mount point.
pub fn bind_read_only(object: BorrowedFd<'_>) -> nix::Result<()> {
    let tree = clone_tree(object, true)?;
    set_read_only(&tree, true, true)?;
    attach(&tree, object)
}

/// Makes the directory `object` designates writable again inside a read-only mount: a
/// recursive detached copy of it whose top mount (only: what is mounted below keeps its
/// own attributes) is made writable, attached on top of the directory itself.
pub fn bind_writable(object: BorrowedFd<'_>) -> nix::Result<()> {
    let tree = clone_tree(object, true)?;
    set_read_only(&tree, false, false)?;
    attach(&tree, object)
}

/// Sets or clears the read-only attribute of a detached tree's mounts (`mount_setattr`).
fn set_read_only(tree: &OwnedFd, read_only: bool, recursive: bool) -> nix::Result<()> {
    let empty = c"";
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: the empty string is NUL-terminated and `attr` a live, correctly laid out
    // `struct mount_attr` whose size is passed; the kernel only reads both during the
    // call, which acts on the owned tree descriptor (AT_EMPTY_PATH).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}
