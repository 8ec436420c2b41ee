//! Raw mount syscalls that no safe wrapper covers (part of the `sys` module: every
//! `unsafe` block of Sandy lives under `sys`).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;

/// Pins a symbolic link as a link: a detached copy of the link itself (`open_tree` with
/// `OPEN_TREE_CLONE` on a descriptor of the link, never its target) is attached on top of
/// the same name (`move_mount` without `MOVE_MOUNT_T_SYMLINKS`, so the destination is not
/// followed either). The name is then a mount point: unlinking, renaming or replacing it
/// fails with `EBUSY`.
///
/// `link` must be an `O_PATH | O_NOFOLLOW` descriptor of the link at `path`; the caller
/// checks it is one.
pub fn pin_symlink(link: BorrowedFd<'_>, path: &Path) -> nix::Result<()> {
    let empty = c"";
    let dest = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| Errno::EINVAL)?;
    // SAFETY: open_tree reads the NUL-terminated empty string for the duration of the call
    // and takes scalars otherwise; with AT_EMPTY_PATH it acts on the borrowed, open
    // descriptor itself. It returns a new descriptor or -1.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            link.as_raw_fd(),
            empty.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    let raw = Errno::result(ret)?;
    let raw = i32::try_from(raw).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor; nothing else knows or owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: both strings are NUL-terminated and live for the call; the source is the
    // owned tree descriptor (MOVE_MOUNT_F_EMPTY_PATH), the destination a path looked up
    // from the current directory without following a final symlink.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dest.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(ret).map(drop)
}
