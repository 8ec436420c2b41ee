//! The helper that makes a run's user and network namespaces while the supervisor
//! resolves the policy ([`crate::namespaces::EarlyNamespaces`]), started with
//! `clone(CLONE_VM)`: it shares the supervisor's memory instead of copying it. A fork
//! copies the page tables, and afterwards every page either process writes is copied
//! once more, a fault each; on this kind of VM that is most of a fork's price. The helper
//! makes only raw system calls (through rustix, which keeps no `errno`), on memory
//! prepared before it starts, and allocates nothing, so nothing the supervisor does
//! meanwhile (allocation, locks, `errno` of its own) can race with it. Part of the `sys`
//! module: every `unsafe` block of Sandy lives under `sys`.

use std::ffi::CStr;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;
use rustix::fs::{Mode, OFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use rustix::thread::UnshareFlags;

/// The helper's stack: its calls are a few frames deep.
const STACK_BYTES: usize = 64 * 1024;

/// What the helper reads, prepared before it starts and left untouched until it is
/// reaped.
struct Work {
    /// The helper's end of the channel, by number in its own descriptor table (a copy of
    /// the supervisor's, made by `clone`).
    channel: RawFd,
    /// `"UID UID 1\n"`, `"GID GID 1\n"`.
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// The tag of the message the receiver expects before the descriptors.
    tag: u8,
}

/// A running helper: its pid, and the memory it runs on, kept until it is reaped.
#[derive(Debug)]
pub struct NamespaceHelper {
    pid: Pid,
    memory: Option<Memory>,
}

/// The helper's stack and what it reads.
type Memory = (Box<[MaybeUninit<u8>]>, Box<WorkBox>);

/// [`Work`] behind a box, so that its address stays put while the helper runs.
pub struct WorkBox(Work);

impl std::fmt::Debug for WorkBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkBox")
    }
}

impl NamespaceHelper {
    /// Starts the helper: it enters a new user namespace (mapping `uid` and `gid` to
    /// themselves, `setgroups` denied) and a new network namespace in it, sends their
    /// descriptors (`/proc/self/ns/user`, then `net`) on `channel` after one byte `tag`,
    /// and exits (status 0, or 1 at the first failed step, having sent nothing).
    ///
    /// `channel` stays open in the caller, which should close it once this returns (the
    /// helper has its own copy).
    pub fn start(channel: &OwnedFd, uid: u32, gid: u32, tag: u8) -> nix::Result<NamespaceHelper> {
        // Left uninitialised: only the pages the helper touches are ever faulted in.
        let mut stack = Box::<[u8]>::new_uninit_slice(STACK_BYTES);
        let work = Box::new(WorkBox(Work {
            channel: channel.as_raw_fd(),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            tag,
        }));
        // The stack grows down from its end, 16-byte aligned as the ABI wants.
        let top = stack.as_mut_ptr_range().end as usize & !15;
        let arg = std::ptr::from_ref::<WorkBox>(&*work)
            .cast_mut()
            .cast::<libc::c_void>();
        // SAFETY: `clone` with CLONE_VM runs `helper_main` in a new process on `stack`,
        // sharing this process's memory. Both `stack` and `work` are owned by the
        // returned value, which frees them only after the helper has been reaped (or
        // never, if it cannot be). The helper reads `work` only, which nothing writes
        // while it runs, and makes only raw system calls: no allocation, no lock, no
        // `errno`, no thread-local state, so this process (and any thread of it) may go
        // on running any code meanwhile. No CLONE_FILES, CLONE_FS or
        // CLONE_SIGHAND: its descriptors, working directory and signal handlers are
        // its own copies. SIGCHLD: it is reaped like any child.
        let ret = unsafe {
            libc::clone(
                helper_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::SIGCHLD,
                arg,
            )
        };
        let pid = Errno::result(ret)?;
        Ok(NamespaceHelper {
            pid: Pid::from_raw(pid),
            memory: Some((stack, work)),
        })
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits for the helper to end (killing it first with `kill`), then frees its memory.
    pub fn reap(mut self, kill: bool) {
        self.end(kill);
    }

    fn end(&mut self, kill: bool) {
        let Some(memory) = self.memory.take() else {
            return;
        };
        if kill {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
        }
        loop {
            match nix::sys::wait::waitpid(self.pid, None) {
                Err(Errno::EINTR) => continue,
                Ok(_) => break,
                // Not ours to reap: it may still be running on this memory, which is
                // then never freed.
                Err(_) => {
                    std::mem::forget(memory);
                    return;
                }
            }
        }
        drop(memory);
    }
}

impl Drop for NamespaceHelper {
    fn drop(&mut self) {
        self.end(true);
    }
}

/// The helper's entry (`clone`'s callback); its return is its exit status.
extern "C" fn helper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `WorkBox` that `NamespaceHelper::start` passed, alive and
    // unchanged until this process has been reaped.
    let work = unsafe { &*arg.cast::<WorkBox>() };
    // SAFETY: the number is the helper's copy of the channel, open in its own
    // descriptor table (a copy of the supervisor's taken at `clone`) until it exits.
    let channel = unsafe { BorrowedFd::borrow_raw(work.0.channel) };
    match make_and_send(&work.0, channel) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The helper's work: raw system calls only (see the module's comment). Descriptors are
/// not closed one by one: the helper's exit closes them.
fn make_and_send(work: &Work, channel: BorrowedFd<'_>) -> rustix::io::Result<()> {
    // SAFETY: new user and network namespaces only; the descriptor table, file system
    // information and memory, which the function's contract is about, stay as they are.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }?;
    let files: [(&CStr, &[u8]); 3] = [
        (c"/proc/self/setgroups", b"deny"),
        (c"/proc/self/uid_map", &work.uid_map),
        (c"/proc/self/gid_map", &work.gid_map),
    ];
    for (path, text) in files {
        let file = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        let written = rustix::io::write(&file, text);
        std::mem::forget(file);
        if written? != text.len() {
            return Err(rustix::io::Errno::IO);
        }
    }
    // SAFETY: as above, a new network namespace only.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?;
    let user = rustix::fs::open(
        c"/proc/self/ns/user",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let net = rustix::fs::open(
        c"/proc/self/ns/net",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fds = [user.as_fd(), net.as_fd()];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    let tag = [work.tag];
    let sent = rustix::net::sendmsg(
        channel,
        &[IoSlice::new(&tag)],
        &mut control,
        SendFlags::empty(),
    );
    std::mem::forget(user);
    std::mem::forget(net);
    sent.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The helper hands over a user namespace and a network namespace that are new
    /// (not this process's), and ends with status 0; a helper dropped before it is
    /// waited for is killed and reaped.
    #[test]
    fn the_helper_hands_over_new_namespaces_and_is_reaped() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let helper = NamespaceHelper::start(
            &theirs,
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
            crate::relay::FDS_TAG,
        )
        .unwrap();
        drop(theirs);
        let pid = helper.pid();
        let fds = crate::relay::receive_fds(&ours).unwrap();
        assert_eq!(fds.len(), 2);
        let id = |fd: &OwnedFd| {
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                .unwrap()
                .display()
                .to_string()
        };
        let mine = |kind: &str| {
            std::fs::read_link(format!("/proc/self/ns/{kind}"))
                .unwrap()
                .display()
                .to_string()
        };
        assert!(id(&fds[0]).starts_with("user:["), "{}", id(&fds[0]));
        assert!(id(&fds[1]).starts_with("net:["), "{}", id(&fds[1]));
        assert_ne!(id(&fds[0]), mine("user"));
        assert_ne!(id(&fds[1]), mine("net"));
        helper.reap(false);
        assert_eq!(
            nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
            Err(Errno::ECHILD),
            "the helper was not reaped"
        );

        // Dropped at once: killed (or finished) and reaped either way.
        let (_ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let helper = NamespaceHelper::start(&theirs, 0, 0, b'F').unwrap();
        let pid = helper.pid();
        drop(helper);
        assert_eq!(
            nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
            Err(Errno::ECHILD)
        );
    }
}
