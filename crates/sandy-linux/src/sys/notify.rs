//! seccomp user notification, used only to observe (part of the `sys` module: every
//! `unsafe` block of Sandy lives under `sys`): installing a filter that hands a listener
//! back, receiving a notification, answering it with "continue" (the kernel then runs the
//! call exactly as without the filter), and checking that a notification is still live.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use seccompiler::sock_filter;

/// `SECCOMP_SET_MODE_FILTER` (linux/seccomp.h).
const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`: the call returns a listener descriptor.
const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
/// `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: let the kernel run the call as if unfiltered.
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;

/// `struct seccomp_data`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

/// `struct seccomp_notif`: one intercepted call.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Notification {
    pub id: u64,
    /// The caller's pid, in the PID namespace of the process that received it.
    pub pid: u32,
    pub flags: u32,
    pub data: SeccompData,
}

/// `struct seccomp_notif_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Response {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

/// `_IOC(dir, '!', nr, size)` as linux/ioctl.h builds it (x86_64 and aarch64 layout).
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((b'!' as u64) << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
/// `SECCOMP_IOCTL_NOTIF_RECV`: `_IOWR('!', 0, struct seccomp_notif)`.
const NOTIF_RECV: u64 = ioc(IOC_READ | IOC_WRITE, 0, std::mem::size_of::<Notification>());
/// `SECCOMP_IOCTL_NOTIF_SEND`: `_IOWR('!', 1, struct seccomp_notif_resp)`.
const NOTIF_SEND: u64 = ioc(IOC_READ | IOC_WRITE, 1, std::mem::size_of::<Response>());
/// `SECCOMP_IOCTL_NOTIF_ID_VALID`: `_IOW('!', 2, __u64)`.
const NOTIF_ID_VALID: u64 = ioc(IOC_WRITE, 2, std::mem::size_of::<u64>());

/// Installs `program` on the calling thread with `SECCOMP_FILTER_FLAG_NEW_LISTENER` and
/// returns the listener. Requires `no_new_privs`.
pub fn install_with_listener(program: &[sock_filter]) -> nix::Result<OwnedFd> {
    let len = u16::try_from(program.len()).map_err(|_| Errno::E2BIG)?;
    let mut insns: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let prog = libc::sock_fprog {
        len,
        filter: insns.as_mut_ptr(),
    };
    // SAFETY: seccomp(SET_MODE_FILTER) reads the sock_fprog and the `len` instructions it
    // points to, both alive for the call (the kernel copies the program and never writes
    // through the pointer). On success it returns a new descriptor that nothing else owns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    let fd = Errno::result(ret)?;
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just created this descriptor for this process; it is owned here
    // alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS`: `_IOW('!', 4, __u64)`.
const NOTIF_SET_FLAGS: u64 = ioc(IOC_WRITE, 4, std::mem::size_of::<u64>());
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// Asks the kernel to hand each notification over synchronously: the waiting caller and
/// the thread that answers it switch on one CPU, as in a synchronous call, instead of
/// waking each other across CPUs. Each round trip then costs a fraction of the cross-CPU
/// wake-ups. `EINVAL` on kernels before 6.6 (the listener works as before).
pub fn set_sync_wakeup(listener: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: NOTIF_SET_FLAGS takes the flags by value in the argument (the kernel's
    // handler reads the argument itself, not memory behind it); no memory is passed.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_SET_FLAGS as _,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    Errno::result(ret).map(drop)
}

/// `struct seccomp_notif_addfd`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct AddFd {
    id: u64,
    flags: u32,
    srcfd: u32,
    newfd: u32,
    newfd_flags: u32,
}
/// `SECCOMP_IOCTL_NOTIF_ADDFD`: `_IOW('!', 3, struct seccomp_notif_addfd)`.
const NOTIF_ADDFD: u64 = ioc(IOC_WRITE, 3, std::mem::size_of::<AddFd>());
/// `SECCOMP_ADDFD_FLAG_SEND`: add the descriptor and answer the call with its number.
const SECCOMP_ADDFD_FLAG_SEND: u32 = 1 << 1;

/// Answers notification `id` with a copy of `fd` installed in the caller (close-on-exec
/// when `cloexec`): the call returns its number, as if it had created it.
pub fn answer_with_fd(
    listener: BorrowedFd<'_>,
    id: u64,
    fd: BorrowedFd<'_>,
    cloexec: bool,
) -> nix::Result<i32> {
    let mut addfd = AddFd {
        id,
        flags: SECCOMP_ADDFD_FLAG_SEND,
        srcfd: u32::try_from(fd.as_raw_fd()).map_err(|_| Errno::EBADF)?,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: NOTIF_ADDFD reads one `struct seccomp_notif_addfd` (the size encoded in the
    // request, equal to `AddFd`'s repr(C) layout) from the live local.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_ADDFD as _,
            &mut addfd as *mut AddFd,
        )
    };
    Errno::result(ret)
}

/// Answers notification `id` with the error `errno`: the call fails with it.
pub fn answer_with_error(listener: BorrowedFd<'_>, id: u64, errno: Errno) -> nix::Result<()> {
    send(
        listener,
        Response {
            id,
            val: 0,
            error: -(errno as i32),
            flags: 0,
        },
    )
}

/// Answers notification `id` with success: the call returns `val` (the supervisor did
/// what the call asked, on the caller's behalf).
pub fn answer_with_value(listener: BorrowedFd<'_>, id: u64, val: i64) -> nix::Result<()> {
    send(
        listener,
        Response {
            id,
            val,
            error: 0,
            flags: 0,
        },
    )
}

/// `SECCOMP_IOCTL_NOTIF_SEND` with `resp`.
fn send(listener: BorrowedFd<'_>, mut resp: Response) -> nix::Result<()> {
    // SAFETY: NOTIF_SEND reads one `struct seccomp_notif_resp` from the live local (the
    // kernel declares it read-write but does not change it).
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_SEND as _,
            &mut resp as *mut Response,
        )
    };
    Errno::result(ret).map(drop)
}

/// Waits for the next notification on `listener`. `ENOENT`: the caller was gone (killed)
/// before it could be received; `EINTR`: interrupted.
pub fn receive(listener: BorrowedFd<'_>) -> nix::Result<Notification> {
    // The kernel refuses a structure that is not zeroed.
    let mut notif = Notification::default();
    // SAFETY: NOTIF_RECV writes one `struct seccomp_notif` (the size encoded in the
    // request, equal to `Notification`'s repr(C) layout) into the live local.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_RECV as _,
            &mut notif as *mut Notification,
        )
    };
    Errno::result(ret)?;
    Ok(notif)
}

/// Answers a notification with "continue": the kernel carries out the call itself, with
/// every other layer deciding exactly as if it had not been intercepted. `ENOENT`: the
/// caller is gone, or its call was interrupted by a signal.
pub fn continue_call(listener: BorrowedFd<'_>, id: u64) -> nix::Result<()> {
    send(
        listener,
        Response {
            id,
            val: 0,
            error: 0,
            flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE,
        },
    )
}

/// Whether notification `id` is still pending: its caller has not died and no other
/// process has taken its pid. What was read from the caller's memory before a `true`
/// answer belonged to that caller.
pub fn still_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    let mut id = id;
    // SAFETY: NOTIF_ID_VALID reads one u64 from the live local.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_ID_VALID as _,
            &mut id as *mut u64,
        )
    };
    ret == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ioctl_numbers_are_the_kernels() {
        // Values of the kernel headers (linux/seccomp.h) on x86_64 and aarch64.
        assert_eq!(std::mem::size_of::<Notification>(), 80);
        assert_eq!(std::mem::size_of::<Response>(), 24);
        assert_eq!(NOTIF_RECV, 0xc050_2100);
        assert_eq!(NOTIF_SEND, 0xc018_2101);
        assert_eq!(NOTIF_ID_VALID, 0x4008_2102);
    }
}
