//! The terminal ioctls no safe wrapper covers (part of the `sys` module: every `unsafe`
//! block of Sandy lives under `sys`): the line discipline and exclusive mode of the
//! user's terminal, which the supervisor records before a run and puts back after it.

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

/// `ioctl(fd, TIOCGETD)`: the terminal's line discipline (`N_TTY` is 0).
pub fn line_discipline(fd: BorrowedFd<'_>) -> nix::Result<i32> {
    let mut ldisc: libc::c_int = 0;
    // SAFETY: TIOCGETD writes one int through the pointer, which points to a live local
    // for the duration of the call; the descriptor is borrowed, so it is open.
    let ret = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCGETD,
            &mut ldisc as *mut libc::c_int,
        )
    };
    Errno::result(ret).map(|_| ldisc)
}

/// `ioctl(fd, TIOCSETD, &ldisc)`: sets the terminal's line discipline.
pub fn set_line_discipline(fd: BorrowedFd<'_>, ldisc: i32) -> nix::Result<()> {
    let value: libc::c_int = ldisc;
    // SAFETY: TIOCSETD reads one int through the pointer, which points to a live local
    // for the duration of the call; the descriptor is borrowed, so it is open.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSETD, &value as *const libc::c_int) };
    Errno::result(ret).map(drop)
}

/// `ioctl(fd, TIOCGEXCL)`: whether the terminal is in exclusive mode (a new open of it
/// fails with `EBUSY` for everyone but root).
pub fn exclusive(fd: BorrowedFd<'_>) -> nix::Result<bool> {
    let mut set: libc::c_int = 0;
    // SAFETY: TIOCGEXCL writes one int through the pointer, which points to a live local
    // for the duration of the call; the descriptor is borrowed, so it is open.
    let ret = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCGEXCL,
            &mut set as *mut libc::c_int,
        )
    };
    Errno::result(ret).map(|_| set != 0)
}

/// `ioctl(fd, TIOCNXCL)`: ends exclusive mode.
pub fn clear_exclusive(fd: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: TIOCNXCL takes no argument; the descriptor is borrowed, so it is open.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCNXCL) };
    Errno::result(ret).map(drop)
}
