//! Raw process and namespace syscalls that no safe wrapper covers (part of the `sys`
//! module: every `unsafe` block of Sandy lives under `sys`).

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Proof that this process has exactly one thread: after a fork, the child runs Rust
/// code (allocation, formatting), which is only sound when no other thread could have
/// held a lock at the moment of the fork. Made by [`OneThread::check`], or handed to the
/// child of a fork (which has one thread by construction). Neither `Send` nor `Sync`, so
/// it stays with the thread that was checked; whoever holds one must not start threads.
#[derive(Debug)]
pub struct OneThread(std::marker::PhantomData<*const ()>);

impl OneThread {
    /// Counts this process's threads (`/proc/self/status`); `Err(Some(n))` with `n`
    /// threads, `Err(None)` when the count cannot be read.
    pub fn check() -> Result<OneThread, Option<usize>> {
        let status = std::fs::read_to_string("/proc/self/status").map_err(|_| None)?;
        let threads = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        match threads {
            Some(1) => Ok(OneThread(std::marker::PhantomData)),
            other => Err(other),
        }
    }
}

/// Which side of a fork the caller is on.
#[derive(Debug)]
pub enum Forked {
    /// The new process (single-threaded, as every fork child).
    Child(OneThread),
    /// The caller; the new process has this pid (in the caller's PID namespace).
    Parent(Pid),
}

/// `fork()`.
pub fn fork(_: &OneThread) -> nix::Result<Forked> {
    // SAFETY: the process is single-threaded (the token), so no lock can be held by a
    // thread that does not exist in the child; the child may run any Rust code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child(OneThread(std::marker::PhantomData))),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// Which side of [`fork_bootstrap`] the caller is on.
#[derive(Debug)]
pub enum BootstrapFork {
    /// The bootstrap, with the kept descriptors (now numbers 3, 4, ... in their order).
    Child(Vec<OwnedFd>, OneThread),
    /// The supervisor; the bootstrap has this pid.
    Parent(Pid),
}

/// Forks the bootstrap of a run from the supervisor. In the child, the descriptors in
/// `keep` become 3, 4, ... (in their order) and every other descriptor above the standard
/// streams is closed, so that nothing the supervisor holds crosses into the sandbox but
/// what it hands over on purpose.
///
/// The child must never return to the supervisor's code, and never drop the copies of
/// the supervisor's objects that owned the descriptors closed here (it execs or exits).
pub fn fork_bootstrap(one: &OneThread, keep: Vec<OwnedFd>) -> nix::Result<BootstrapFork> {
    let count = i32::try_from(keep.len()).map_err(|_| Errno::EINVAL)?;
    let child = match fork(one)? {
        Forked::Parent(pid) => return Ok(BootstrapFork::Parent(pid)),
        Forked::Child(child) => child,
    };
    let first_free = 3 + count;
    let raws: Vec<RawFd> = keep.into_iter().map(IntoRawFd::into_raw_fd).collect();
    let mut high = Vec::with_capacity(raws.len());
    for raw in raws {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) only makes a new descriptor. Every kept one is
        // first copied above all the target numbers, so that moving one onto its slot
        // below never replaces another still to be moved. A failure (descriptors
        // exhausted) ends the child before anything runs.
        let copy = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, first_free) };
        if copy < 0 {
            exit_now(125);
        }
        high.push(copy);
    }
    let mut kept = Vec::with_capacity(high.len());
    for (slot, copy) in (3..).zip(high) {
        // SAFETY: dup3 onto a slot below `first_free`: what the slot held before is
        // closed by the kernel, and its owner in this forked copy is never dropped (the
        // contract above); the copies are above `first_free` and not touched.
        if unsafe { libc::dup3(copy, slot, libc::O_CLOEXEC) } < 0 {
            exit_now(125);
        }
        kept.push(slot);
    }
    // SAFETY: close_range closes the copies and every descriptor from `first_free` up,
    // none with an owner that is used again here (the contract above); each kept slot
    // below it gets exactly one owner.
    unsafe {
        libc::syscall(libc::SYS_close_range, first_free as u32, u32::MAX, 0u32);
    }
    Ok(BootstrapFork::Child(
        kept.into_iter()
            // SAFETY: each slot is open (dup3 succeeded) and owned by nothing else.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect(),
        child,
    ))
}

/// `clone(CLONE_PARENT | SIGCHLD)`: like `fork()`, but the new process is a child of the
/// caller's parent, which is notified of its stops and exit as of any child of its own.
/// The bootstrap uses it so that the supervisor waits for the target directly (exit
/// status, stops for job control) while the target lives in the bootstrap's new PID
/// namespace. The kernel refuses it (`EINVAL`) in the init of a PID namespace.
pub fn fork_as_sibling(_: &OneThread) -> nix::Result<Forked> {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone with no new stack (NULL: the child continues on a copy of the
    // caller's stack, as with fork), no TLS, no tid pointers: the child is a copy of this
    // single-threaded process (the token), so no lock is held by a missing thread and it
    // may run any Rust code. glibc's fork handlers do not run; Sandy registers none.
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
        0 => Ok(Forked::Child(OneThread(std::marker::PhantomData))),
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

/// Ends the process at once with `code` (`_exit`): no exit handlers, no flushing of
/// buffered output. A forked bootstrap (and the init forked from it) leaves that way, so
/// that nothing of the supervisor it was copied from runs twice.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes no pointer and never returns; it ends the process without
    // running any code of this process.
    unsafe { libc::_exit(code) }
}
