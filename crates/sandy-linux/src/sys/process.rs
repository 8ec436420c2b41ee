//! Raw process and namespace syscalls that no safe wrapper covers (part of the `sys`
//! module: every `unsafe` block of Sandy lives under `sys`).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Which side of a fork the caller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The caller; the new process has this pid (in the caller's PID namespace).
    Parent(Pid),
}

/// Fails unless this process has exactly one thread: after a fork, the child runs Rust
/// code (allocation, formatting), which is only sound when no other thread could have
/// held a lock at the moment of the fork.
fn single_threaded() -> nix::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|_| Errno::EIO)?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    if threads == Some(1) {
        Ok(())
    } else {
        Err(Errno::EDEADLK)
    }
}

/// `fork()`. Refused (`EDEADLK`) in a multi-threaded process.
pub fn fork() -> nix::Result<Forked> {
    single_threaded()?;
    // SAFETY: the process is single-threaded (checked above), so no lock can be held by a
    // thread that does not exist in the child; the child may run any Rust code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// `clone(CLONE_PARENT | SIGCHLD)`: like `fork()`, but the new process is a child of the
/// caller's parent, which is notified of its stops and exit as of any child of its own.
/// The bootstrap uses it so that the supervisor waits for the target directly (exit
/// status, stops for job control) while the target lives in the bootstrap's new PID
/// namespace. Refused (`EDEADLK`) in a multi-threaded process; the kernel refuses it
/// (`EINVAL`) in the init of a PID namespace.
pub fn fork_as_sibling() -> nix::Result<Forked> {
    single_threaded()?;
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone with no new stack (NULL: the child continues on a copy of the
    // caller's stack, as with fork), no TLS, no tid pointers: the child is a copy of this
    // single-threaded process (checked above), so no lock is held by a missing thread and
    // it may run any Rust code. glibc's fork handlers do not run; Sandy registers none.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match Errno::result(ret)? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(
            i32::try_from(pid).map_err(|_| Errno::EOVERFLOW)?,
        ))),
    }
}

/// Closes the descriptor `fd` if it is open, without an owner (the init of the sandbox
/// closes the standard streams it inherited and never uses).
pub fn close_raw(fd: RawFd) {
    // SAFETY: F_GETFD only queries the descriptor flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return;
    }
    // SAFETY: the descriptor is open (checked above); the only callers pass the standard
    // streams 0-2 of a process in which no Rust object owns them.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}

/// Whether `sig` is pending for this process or thread (blocked and not yet taken).
pub fn signal_pending(sig: nix::sys::signal::Signal) -> bool {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending writes a full sigset_t through the pointer, which points to
    // uninitialised storage of that type owned by this frame.
    if unsafe { libc::sigpending(set.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: sigpending succeeded, so the set is initialised; sigismember only reads it.
    unsafe { libc::sigismember(set.as_ptr(), sig as libc::c_int) == 1 }
}
