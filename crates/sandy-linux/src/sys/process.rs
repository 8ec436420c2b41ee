//! Raw process and namespace syscalls that no safe wrapper covers (part of the `sys`
//! module: every `unsafe` block of Sandy lives under `sys`).

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

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
    /// The bootstrap, with the kept descriptor (now number 3).
    Child(OwnedFd, OneThread),
    /// The supervisor; the bootstrap has this pid.
    Parent(Pid),
}

/// Forks the bootstrap of a run from the supervisor. In the child, `keep` becomes
/// descriptor 3 and every other descriptor above the standard streams is closed, so that
/// nothing the supervisor holds crosses into the sandbox but the channel.
///
/// The child must never return to the supervisor's code, and never drop the copies of
/// the supervisor's objects that owned the descriptors closed here (it execs or exits).
pub fn fork_bootstrap(one: &OneThread, keep: OwnedFd) -> nix::Result<BootstrapFork> {
    let child = match fork(one)? {
        Forked::Parent(pid) => return Ok(BootstrapFork::Parent(pid)),
        Forked::Child(child) => child,
    };
    let raw = keep.into_raw_fd();
    // SAFETY: dup3 and close_range act on descriptors only. `raw` was just released by
    // its owner; after dup3 it is closed by close_range with every other descriptor from
    // 4 up, whose owners in this forked copy are never dropped (the contract above).
    // Descriptor 3 gets exactly one owner below. A failed dup3 (descriptors exhausted)
    // ends the child before anything runs.
    unsafe {
        if raw != 3 && libc::dup3(raw, 3, libc::O_CLOEXEC) < 0 {
            libc::_exit(125);
        }
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
        Ok(BootstrapFork::Child(OwnedFd::from_raw_fd(3), child))
    }
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

/// Ties this process to its supervisor: arms the parent-death signal (`SIGKILL`), then
/// checks that the parent is still `supervisor` (had it died before the `prctl`, the
/// signal would never come). `Ok(false)`: the parent is another process. Armed first,
/// then checked, so that no change of credentials on the way (which clears the signal)
/// can leave this process behind a supervisor that dies.
pub fn tie_to_supervisor(supervisor: u32) -> nix::Result<bool> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    Ok(u32::try_from(nix::unistd::getppid().as_raw()).ok() == Some(supervisor))
}

/// Closes the standard streams (descriptors 0 to 2) that are open, which no Rust object
/// owns here: the sandbox's init and the bootstrap holding the namespaces let go of the
/// terminal or the pipes of the run, which are the target's and the supervisor's.
pub fn close_standard_streams() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            continue;
        }
        // SAFETY: the descriptor is open (checked above) and is one of the standard
        // streams, which no Rust object owns in the processes that call this.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Waits at most `timeout` for one of the signals of `set` (blocked in the calling
/// thread): `Some(signal)`, or `None` when the time passed without one.
pub fn wait_signal_timeout(
    set: &nix::sys::signal::SigSet,
    timeout: std::time::Duration,
) -> nix::Result<Option<nix::sys::signal::Signal>> {
    let ts = nix::sys::time::TimeSpec::from_duration(timeout);
    loop {
        // SAFETY: the set is a valid, initialised sigset_t borrowed for the call; the
        // siginfo pointer may be null (not wanted); `ts` is a valid timespec on this
        // frame. sigtimedwait keeps neither pointer.
        let r = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), ts.as_ref()) };
        if r >= 0 {
            return nix::sys::signal::Signal::try_from(r).map(Some);
        }
        match nix::errno::Errno::last() {
            nix::errno::Errno::EAGAIN => return Ok(None),
            nix::errno::Errno::EINTR => continue,
            e => return Err(e),
        }
    }
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
