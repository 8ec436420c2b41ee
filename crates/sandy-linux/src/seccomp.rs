//! The seccomp floor, declared as data (the calls a target may make, [`allowlist`], and
//! the denials on top, [`floor`]) and compiled ([`compile`]) into one short classic-BPF
//! program, installed with `seccompiler`. A call not on the list fails with `ENOSYS`, as
//! on a kernel without it; every denial returns an errno; nothing kills the process,
//! except a syscall from a foreign architecture.
//!
//! The program is compiled here rather than by `seccompiler`'s rule compiler because its
//! size is paid on every launch: the kernel translates and JIT-compiles the filter when it
//! is installed. seccompiler's generic layout took 240 instructions and about 170 µs to
//! install on the reference machine (for a deny list), most of it in the kernel running
//! the program once per syscall number to fill its constant-action cache. This layout (a
//! binary search over ranges of numbers that share a verdict, the argument checks out of
//! line) keeps each of those runs to about ten instructions: the allowlist's program, 230
//! instructions on x86_64, installs in about 47 µs on a 2-core VM (the deny list it
//! replaced, 134 instructions, in 37 µs). Its shape also keeps that cache useful: every
//! syscall whose verdict does not depend on its arguments is decided from its number
//! alone, so the kernel runs no filter at all for the allowed ones.

use std::collections::BTreeMap;

use sandy_policy::Network;
use seccompiler::{sock_filter, BpfProgram};

use crate::error::{LinuxError, PlanError};

/// One argument comparison: `(arg[index] & mask) == value` or `!=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgCheck {
    /// The low 32 bits of the argument equal the value.
    Eq32 { index: u8, value: u32 },
    /// The low 32 bits of the argument differ from the value.
    Ne32 { index: u8, value: u32 },
    /// The masked low 32 bits equal the value.
    Masked32 { index: u8, mask: u32, value: u32 },
}

/// A denied syscall: denied when every check holds (no checks: always denied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deny {
    pub name: &'static str,
    pub nr: i64,
    pub when: Vec<ArgCheck>,
    /// The errno the call fails with.
    pub errno: i32,
}

/// Socket families a target may create.
pub const ALLOWED_FAMILIES: [u32; 4] = [
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];

/// Netlink protocols a target may open: routing (interfaces and addresses: `getifaddrs`,
/// `getaddrinfo` with `AI_ADDRCONFIG`, `ip`), generic netlink (nl80211, ethtool,
/// taskstats, limited to the sandbox's own PID namespace) and kernel uevents (udev
/// monitors). Every other protocol is refused, first of all `NETLINK_SOCK_DIAG`, which
/// lists every socket of the network namespace (the host's, unless the network is
/// blocked), Unix socket paths and abstract names included; also audit, the process
/// connector, xfrm, netfilter and the rest, which ordinary programs do not need.
pub const ALLOWED_NETLINK_PROTOCOLS: [u32; 3] = [
    libc::NETLINK_ROUTE as u32,
    libc::NETLINK_GENERIC as u32,
    libc::NETLINK_KOBJECT_UEVENT as u32,
];

const SOCK_TYPE_MASK: u32 = 0xf;
/// `IPPROTO_MPTCP` (linux/in.h).
const IPPROTO_MPTCP: u32 = 262;
/// The obsolete `SOCK_PACKET` type of the IP families (linux/net.h), still accepted by the kernel.
const SOCK_PACKET: u32 = 10;
const TIOCSTI: u32 = libc::TIOCSTI as u32;
const TIOCLINUX: u32 = libc::TIOCLINUX as u32;

/// The terminal `ioctl` requests refused on every descriptor, with `EPERM`: none of them
/// is needed to use a terminal (`TIOCGWINSZ`, `TCGETS`/`TCSETS*`, `TIOCGPGRP`/`TIOCSPGRP`,
/// `TIOCSCTTY` on a new pty, `TIOCNXCL`, `FIONREAD` stay allowed), and each lets a
/// process act on the user's own terminal behind the user's back:
///
/// - `TIOCSTI` pushes keystrokes into the terminal's input queue;
/// - `TIOCLINUX` on a virtual console selects and pastes text, among other things;
/// - `TIOCSETD` changes the line discipline (the terminal stops behaving as one);
/// - `TIOCEXCL` puts the terminal in exclusive mode: no other process can open it any
///   more, not even the user's next shell or a new tmux pane;
/// - `TIOCCONS` redirects the console's output and `TIOCVHANGUP` hangs the terminal up;
///   the kernel already requires `CAP_SYS_ADMIN` for both, which the target never holds:
///   refused here too so the floor says so by itself.
///
/// The kernel compares only the low 32 bits of the request; so does the filter.
pub const DENIED_TERMINAL_IOCTLS: [(&str, u32); 6] = [
    ("TIOCSTI", TIOCSTI),
    ("TIOCLINUX", TIOCLINUX),
    ("TIOCSETD", libc::TIOCSETD as u32),
    ("TIOCEXCL", libc::TIOCEXCL as u32),
    ("TIOCCONS", libc::TIOCCONS as u32),
    ("TIOCVHANGUP", libc::TIOCVHANGUP as u32),
];

/// The `personality` values allowed, as by Docker's default profile: `PER_LINUX`,
/// `PER_LINUX32`, `UNAME26`, `PER_LINUX32 | UNAME26`, and `0xffffffff` (the query, which
/// changes nothing). Every other value (`ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC`, the
/// foreign personalities) is refused with `EPERM`: they turn off address-space
/// randomisation or make every readable mapping executable, for this process and what it
/// runs. The kernel takes the value as an `unsigned int`: the filter compares the low 32
/// bits.
pub const ALLOWED_PERSONALITIES: [u32; 5] = [0, 0x0008, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// A system call, by name and number on this architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    pub name: &'static str,
    pub nr: i64,
}

/// `[Syscall { name: "read", nr: libc::SYS_read }, ...]` from `SYS_read, ...`.
macro_rules! calls {
    ($($id:ident),* $(,)?) => {
        [$(Syscall { name: strip_sys(stringify!($id)), nr: libc::$id }),*]
    };
}

const fn strip_sys(name: &'static str) -> &'static str {
    match name.as_bytes() {
        [b'S', b'Y', b'S', b'_', rest @ ..] => match std::str::from_utf8(rest) {
            Ok(s) => s,
            Err(_) => name,
        },
        _ => name,
    }
}

/// The system calls a target may make: every other number fails with `ENOSYS`, the
/// answer of a kernel that does not have the call, which C libraries and language
/// runtimes handle by falling back to an older call (as for `clone3`, below).
///
/// The list follows Docker's default seccomp profile (moby's `profiles/seccomp`), which
/// decades of container workloads have been run under: what it allows without a
/// capability, for this architecture, less what Sandy refuses on purpose. Sandy refuses,
/// though Docker allows them:
///
/// - what the floor denies with `EPERM` ([`floor`]: the keyring, `bpf`, `userfaultfd`,
///   `io_uring`, the mount family, `setns`, ...; none of them is on this list);
/// - `modify_ldt` (16-bit segments for Wine and DOS emulators; a long line of kernel
///   bugs), `memfd_secret` (memory hidden from the kernel's own direct map: nothing an
///   agent's tools need), `listmount` and `statmount` (programs fall back to
///   `/proc/self/mountinfo`, as on kernels before 6.8).
///
/// Sandy allows, though Docker refuses it without `CAP_SYS_ADMIN`:
///
/// - `unshare`, except with `CLONE_NEWUSER` (a denial of [`floor`]), and `clone` with
///   namespace flags other than `CLONE_NEWUSER`: unsharing the descriptor table, the
///   filesystem context or System V semaphores needs no privilege, and every other
///   namespace needs `CAP_SYS_ADMIN`, which the target never holds. The user namespace,
///   the one that needs no capability, is refused.
///
/// Docker's calls that the kernel does not implement on this architecture
/// (`epoll_ctl_old`, `epoll_wait_old`) are left out: `ENOSYS` either way. The NUMA calls
/// (`mbind`, `set_mempolicy`, `get_mempolicy`, `set_mempolicy_home_node`, which Docker
/// allows only with `CAP_SYS_NICE`, and `migrate_pages`, `move_pages`) are refused as on a
/// kernel without NUMA, which libnuma and the runtimes that use it handle. So are
/// `kcmp`, `pidfd_getfd` and `process_madvise` (`CAP_SYS_PTRACE` in Docker), the LSM
/// attribute calls, `fanotify_init`, `chroot`, `quotactl`, `syslog`, `vhangup`, the
/// clock and host name setters, `iopl` and `ioperm`, `uselib`, `ustat`, `sysfs`, and
/// `personality` beyond [`ALLOWED_PERSONALITIES`] (a denial of [`floor`]).
///
/// Calls the `libc` crate does not name yet are given by number (the same on x86_64
/// and aarch64: every call since 424 is numbered alike on all architectures).
pub fn allowlist() -> Vec<Syscall> {
    let mut list = calls![
        SYS_accept,
        SYS_accept4,
        // Reads the clock's state (glibc's `ntp_gettime`); setting it needs CAP_SYS_TIME.
        SYS_adjtimex,
        SYS_bind,
        SYS_brk,
        SYS_capget,
        SYS_capset,
        SYS_chdir,
        SYS_clock_adjtime,
        SYS_clock_getres,
        SYS_clock_gettime,
        SYS_clock_nanosleep,
        // With the floor's denial of CLONE_NEWUSER (see above).
        SYS_clone,
        SYS_close,
        SYS_close_range,
        SYS_connect,
        SYS_copy_file_range,
        SYS_dup,
        SYS_dup3,
        SYS_epoll_create1,
        SYS_epoll_ctl,
        SYS_epoll_pwait,
        SYS_epoll_pwait2,
        SYS_eventfd2,
        SYS_execve,
        SYS_execveat,
        SYS_exit,
        SYS_exit_group,
        SYS_faccessat,
        SYS_faccessat2,
        SYS_fadvise64,
        SYS_fallocate,
        SYS_fanotify_mark,
        SYS_fchdir,
        SYS_fchmod,
        SYS_fchmodat,
        SYS_fchown,
        SYS_fchownat,
        SYS_fcntl,
        SYS_fdatasync,
        SYS_fgetxattr,
        SYS_flistxattr,
        SYS_flock,
        SYS_fremovexattr,
        SYS_fsetxattr,
        SYS_fstat,
        SYS_fstatfs,
        SYS_fsync,
        SYS_ftruncate,
        SYS_futex,
        SYS_futex_waitv,
        SYS_getcpu,
        SYS_getcwd,
        SYS_getdents64,
        SYS_getegid,
        SYS_geteuid,
        SYS_getgid,
        SYS_getgroups,
        SYS_getitimer,
        SYS_getpeername,
        SYS_getpgid,
        SYS_getpid,
        SYS_getppid,
        SYS_getpriority,
        SYS_getrandom,
        SYS_getresgid,
        SYS_getresuid,
        SYS_getrusage,
        SYS_get_robust_list,
        SYS_getsid,
        SYS_getsockname,
        SYS_getsockopt,
        SYS_gettid,
        SYS_gettimeofday,
        SYS_getuid,
        SYS_getxattr,
        SYS_inotify_add_watch,
        SYS_inotify_init1,
        SYS_inotify_rm_watch,
        SYS_io_cancel,
        // With the floor's terminal denials.
        SYS_ioctl,
        SYS_io_destroy,
        SYS_io_getevents,
        SYS_ioprio_get,
        SYS_ioprio_set,
        SYS_io_setup,
        SYS_io_submit,
        SYS_kill,
        SYS_landlock_add_rule,
        SYS_landlock_create_ruleset,
        SYS_landlock_restrict_self,
        SYS_lgetxattr,
        SYS_linkat,
        SYS_listen,
        SYS_listxattr,
        SYS_llistxattr,
        SYS_lremovexattr,
        SYS_lseek,
        SYS_lsetxattr,
        SYS_madvise,
        SYS_membarrier,
        SYS_memfd_create,
        SYS_mincore,
        SYS_mkdirat,
        SYS_mknodat,
        SYS_mlock,
        SYS_mlock2,
        SYS_mlockall,
        SYS_mmap,
        SYS_mprotect,
        SYS_mq_getsetattr,
        SYS_mq_notify,
        SYS_mq_open,
        SYS_mq_timedreceive,
        SYS_mq_timedsend,
        SYS_mq_unlink,
        SYS_mremap,
        SYS_mseal,
        SYS_msgctl,
        SYS_msgget,
        SYS_msgrcv,
        SYS_msgsnd,
        SYS_msync,
        SYS_munlock,
        SYS_munlockall,
        SYS_munmap,
        SYS_name_to_handle_at,
        SYS_nanosleep,
        SYS_newfstatat,
        SYS_openat,
        SYS_openat2,
        // With the floor's denial of every value but the allowed ones.
        SYS_personality,
        SYS_pidfd_open,
        SYS_pidfd_send_signal,
        SYS_pipe2,
        SYS_pkey_alloc,
        SYS_pkey_free,
        SYS_pkey_mprotect,
        SYS_ppoll,
        SYS_prctl,
        SYS_pread64,
        SYS_preadv,
        SYS_preadv2,
        SYS_prlimit64,
        SYS_process_mrelease,
        SYS_process_vm_readv,
        SYS_process_vm_writev,
        SYS_pselect6,
        // Processes of the sandbox only (the PID namespace, then Landlock's domain check).
        SYS_ptrace,
        SYS_pwrite64,
        SYS_pwritev,
        SYS_pwritev2,
        SYS_read,
        SYS_readahead,
        SYS_readlinkat,
        SYS_readv,
        SYS_recvfrom,
        SYS_recvmmsg,
        SYS_recvmsg,
        SYS_remap_file_pages,
        SYS_removexattr,
        SYS_renameat2,
        SYS_restart_syscall,
        SYS_rseq,
        SYS_rt_sigaction,
        SYS_rt_sigpending,
        SYS_rt_sigprocmask,
        SYS_rt_sigqueueinfo,
        SYS_rt_sigreturn,
        SYS_rt_sigsuspend,
        SYS_rt_sigtimedwait,
        SYS_rt_tgsigqueueinfo,
        SYS_sched_getaffinity,
        SYS_sched_getattr,
        SYS_sched_getparam,
        SYS_sched_get_priority_max,
        SYS_sched_get_priority_min,
        SYS_sched_getscheduler,
        SYS_sched_rr_get_interval,
        SYS_sched_setaffinity,
        SYS_sched_setattr,
        SYS_sched_setparam,
        SYS_sched_setscheduler,
        SYS_sched_yield,
        // A program's own, stricter filters (browsers, nested sandboxes); never looser.
        SYS_seccomp,
        SYS_semctl,
        SYS_semget,
        SYS_semop,
        SYS_semtimedop,
        SYS_sendfile,
        SYS_sendmmsg,
        SYS_sendmsg,
        SYS_sendto,
        SYS_setfsgid,
        SYS_setfsuid,
        SYS_setgid,
        SYS_setgroups,
        SYS_setitimer,
        SYS_setpgid,
        SYS_setpriority,
        SYS_setregid,
        SYS_setresgid,
        SYS_setresuid,
        SYS_setreuid,
        SYS_set_robust_list,
        SYS_setsid,
        SYS_setsockopt,
        SYS_set_tid_address,
        SYS_setuid,
        SYS_setxattr,
        SYS_shmat,
        SYS_shmctl,
        SYS_shmdt,
        SYS_shmget,
        SYS_shutdown,
        SYS_sigaltstack,
        SYS_signalfd4,
        // With the floor's family, type and protocol denials.
        SYS_socket,
        SYS_socketpair,
        SYS_splice,
        SYS_statfs,
        SYS_statx,
        SYS_symlinkat,
        SYS_sync,
        SYS_syncfs,
        SYS_sysinfo,
        SYS_tee,
        SYS_tgkill,
        SYS_timer_create,
        SYS_timer_delete,
        SYS_timer_getoverrun,
        SYS_timer_gettime,
        SYS_timer_settime,
        SYS_timerfd_create,
        SYS_timerfd_gettime,
        SYS_timerfd_settime,
        SYS_times,
        SYS_tkill,
        SYS_truncate,
        SYS_umask,
        SYS_uname,
        SYS_unlinkat,
        // With the floor's denial of CLONE_NEWUSER (see above).
        SYS_unshare,
        SYS_utimensat,
        SYS_vmsplice,
        SYS_wait4,
        SYS_waitid,
        SYS_write,
        SYS_writev,
    ]
    .to_vec();
    // The calls the `libc` crate does not name yet (linux/include/uapi/asm-generic/unistd.h).
    list.extend([
        Syscall {
            name: "cachestat",
            nr: 451,
        },
        Syscall {
            name: "map_shadow_stack",
            nr: 453,
        },
        Syscall {
            name: "futex_wake",
            nr: 454,
        },
        Syscall {
            name: "futex_wait",
            nr: 455,
        },
        Syscall {
            name: "futex_requeue",
            nr: 456,
        },
        Syscall {
            name: "setxattrat",
            nr: 463,
        },
        Syscall {
            name: "getxattrat",
            nr: 464,
        },
        Syscall {
            name: "listxattrat",
            nr: 465,
        },
        Syscall {
            name: "removexattrat",
            nr: 466,
        },
    ]);
    #[cfg(target_arch = "x86_64")]
    list.extend(calls![
        SYS_access,
        SYS_alarm,
        SYS_arch_prctl,
        SYS_chmod,
        SYS_chown,
        SYS_creat,
        SYS_dup2,
        SYS_epoll_create,
        SYS_epoll_wait,
        SYS_eventfd,
        SYS_fchmodat2,
        SYS_fork,
        SYS_futimesat,
        SYS_getdents,
        SYS_getpgrp,
        SYS_getrlimit,
        SYS_get_thread_area,
        SYS_inotify_init,
        SYS_lchown,
        SYS_link,
        SYS_lstat,
        SYS_mkdir,
        SYS_mknod,
        SYS_open,
        SYS_pause,
        SYS_pipe,
        SYS_poll,
        SYS_readlink,
        SYS_rename,
        SYS_renameat,
        SYS_rmdir,
        SYS_select,
        SYS_set_thread_area,
        SYS_setrlimit,
        SYS_signalfd,
        SYS_stat,
        SYS_symlink,
        SYS_sync_file_range,
        SYS_time,
        SYS_unlink,
        SYS_utime,
        SYS_utimes,
        SYS_vfork,
    ]);
    // x86_64's numbers the `libc` crate does not name yet (arch/x86/entry/syscalls).
    #[cfg(target_arch = "x86_64")]
    list.extend([
        Syscall {
            name: "io_pgetevents",
            nr: 333,
        },
        Syscall {
            // The kernel's return-probe trampoline calls it in the probed process (Linux
            // 6.11; later kernels let it past seccomp by themselves).
            name: "uretprobe",
            nr: 335,
        },
    ]);
    // aarch64's numbers (include/uapi/asm-generic/unistd.h) for the calls the `libc`
    // crate does not name for every C library.
    #[cfg(target_arch = "aarch64")]
    list.extend([
        Syscall {
            name: "renameat",
            nr: 38,
        },
        Syscall {
            name: "sync_file_range",
            nr: 84,
        },
        Syscall {
            name: "getrlimit",
            nr: 163,
        },
        Syscall {
            name: "setrlimit",
            nr: 164,
        },
        Syscall {
            name: "io_pgetevents",
            nr: 292,
        },
        Syscall {
            name: "fchmodat2",
            nr: 452,
        },
    ]);
    list
}

/// `kexec_file_load`, which the `libc` crate does not name for aarch64 with musl.
#[cfg(target_arch = "aarch64")]
const SYS_KEXEC_FILE_LOAD: i64 = 294;
#[cfg(not(target_arch = "aarch64"))]
const SYS_KEXEC_FILE_LOAD: i64 = libc::SYS_kexec_file_load;

/// `[Deny { name: "keyctl", nr: libc::SYS_keyctl, when: [], errno: EPERM }, ...]`.
macro_rules! always {
    ($($id:ident),* $(,)?) => {
        vec![$(Deny {
            name: strip_sys(stringify!($id)),
            nr: libc::$id,
            when: vec![],
            errno: libc::EPERM,
        }),*]
    };
}

/// The floor's denials, plus the network part when the network is blocked. Every call
/// not on the [`allowlist`] fails with `ENOSYS` besides; the calls here that are always
/// denied are not on it, and fail with their own errno (`EPERM`: a program that tries
/// them learns they are refused, not missing).
pub fn floor(network: Network) -> Vec<Deny> {
    let mut denies = always!(
        SYS_keyctl,
        SYS_add_key,
        SYS_request_key,
        SYS_bpf,
        SYS_perf_event_open,
        SYS_userfaultfd,
        SYS_io_uring_setup,
        SYS_io_uring_enter,
        SYS_io_uring_register,
        SYS_mount,
        SYS_umount2,
        SYS_pivot_root,
        SYS_move_mount,
        SYS_open_tree,
        SYS_fsopen,
        SYS_fsconfig,
        SYS_fsmount,
        SYS_fspick,
        SYS_mount_setattr,
        SYS_kexec_load,
        SYS_init_module,
        SYS_finit_module,
        SYS_delete_module,
        SYS_open_by_handle_at,
        SYS_setns,
        SYS_acct,
        SYS_swapon,
        SYS_swapoff,
        SYS_reboot,
    );
    denies.push(Deny {
        name: "kexec_file_load",
        nr: SYS_KEXEC_FILE_LOAD,
        when: vec![],
        errno: libc::EPERM,
    });
    // `clone3` passes its flags in a structure the filter cannot read: it answers ENOSYS,
    // and the C library falls back to `clone`, whose flags the filter checks.
    denies.push(Deny {
        name: "clone3",
        nr: libc::SYS_clone3,
        when: vec![],
        errno: libc::ENOSYS,
    });
    // Terminal injection and takeover: compare only the low 32 bits of the request, as
    // the kernel does.
    for (_, request) in DENIED_TERMINAL_IOCTLS {
        denies.push(Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: request,
            }],
        });
    }
    denies.push(Deny {
        name: "personality",
        nr: libc::SYS_personality,
        errno: libc::EPERM,
        when: ALLOWED_PERSONALITIES
            .iter()
            .map(|&value| ArgCheck::Ne32 { index: 0, value })
            .collect(),
    });
    let newuser = libc::CLONE_NEWUSER as u32;
    denies.extend([
        // No new user namespaces: they would unlock mount and other privileged surfaces.
        Deny {
            name: "clone",
            nr: libc::SYS_clone,
            errno: libc::EPERM,
            when: vec![ArgCheck::Masked32 {
                index: CLONE_FLAGS_ARG,
                mask: newuser,
                value: newuser,
            }],
        },
        Deny {
            name: "unshare",
            nr: libc::SYS_unshare,
            errno: libc::EPERM,
            when: vec![ArgCheck::Masked32 {
                index: 0,
                mask: newuser,
                value: newuser,
            }],
        },
        // Only Unix, IPv4, IPv6 and netlink sockets.
        Deny {
            name: "socket",
            nr: libc::SYS_socket,
            errno: libc::EPERM,
            when: ALLOWED_FAMILIES
                .iter()
                .map(|&f| ArgCheck::Ne32 { index: 0, value: f })
                .collect(),
        },
        // Only the netlink protocols programs need. The others fail as on a kernel built
        // without them, which programs handle (libaudit's users carry on without audit).
        Deny {
            name: "socket",
            nr: libc::SYS_socket,
            errno: libc::EPROTONOSUPPORT,
            when: std::iter::once(ArgCheck::Eq32 {
                index: 0,
                value: libc::AF_NETLINK as u32,
            })
            .chain(
                ALLOWED_NETLINK_PROTOCOLS
                    .iter()
                    .map(|&p| ArgCheck::Ne32 { index: 2, value: p }),
            )
            .collect(),
        },
        Deny {
            name: "socketpair",
            nr: libc::SYS_socketpair,
            errno: libc::EPERM,
            when: vec![ArgCheck::Ne32 {
                index: 0,
                value: libc::AF_UNIX as u32,
            }],
        },
    ]);
    // No raw or packet sockets in the IP families.
    for family in [libc::AF_INET as u32, libc::AF_INET6 as u32] {
        for ty in [libc::SOCK_RAW as u32, SOCK_PACKET] {
            denies.push(Deny {
                name: "socket",
                nr: libc::SYS_socket,
                errno: libc::EPERM,
                when: vec![
                    ArgCheck::Eq32 {
                        index: 0,
                        value: family,
                    },
                    ArgCheck::Masked32 {
                        index: 1,
                        mask: SOCK_TYPE_MASK,
                        value: ty,
                    },
                ],
            });
        }
    }
    // With the host's network, the supervisor connects the sandbox's TCP sockets itself,
    // after checking the destination (Landlock refuses the sandbox's own connects). TCP
    // Fast Open would connect inside a send: refused, as on a kernel without it, and
    // programs fall back to connect.
    if network == Network::AllowAll {
        for (name, nr, index) in [
            ("sendto", libc::SYS_sendto, 3),
            ("sendmsg", libc::SYS_sendmsg, 2),
            ("sendmmsg", libc::SYS_sendmmsg, 3),
        ] {
            denies.push(Deny {
                name,
                nr,
                errno: libc::EOPNOTSUPP,
                when: vec![ArgCheck::Masked32 {
                    index,
                    mask: MSG_FASTOPEN,
                    value: MSG_FASTOPEN,
                }],
            });
        }
    }
    // With the network blocked the sandbox has its own network namespace (loopback only);
    // MPTCP is refused on top, so no multipath subflow can be set up at all.
    if network == Network::BlockAll {
        denies.push(Deny {
            name: "socket",
            nr: libc::SYS_socket,
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 2,
                value: IPPROTO_MPTCP,
            }],
        });
    }
    denies
}

/// `MSG_FASTOPEN` (linux/socket.h): a send that connects first (TCP Fast Open).
pub const MSG_FASTOPEN: u32 = 0x2000_0000;

/// `clone`'s flags are its first argument on every supported architecture.
const CLONE_FLAGS_ARG: u8 = 0;

/// The audit architecture of this build (linux/audit.h).
fn native_arch() -> Result<u32, PlanError> {
    if cfg!(target_arch = "x86_64") {
        Ok(0xC000_003E)
    } else if cfg!(target_arch = "aarch64") {
        Ok(0xC000_00B7)
    } else {
        Err(PlanError::UnsupportedArch)
    }
}

// Classic BPF opcodes (linux/bpf_common.h) and seccomp's data layout (linux/seccomp.h).
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_DATA_ARGS: u32 = 16;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Where a conditional jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The next instruction.
    Next,
    /// A label, resolved when the program is assembled.
    Label(usize),
}

#[derive(Debug, Clone, Copy)]
enum Insn {
    Stmt { code: u16, k: u32 },
    Jump { code: u16, k: u32, yes: To, no: To },
    Goto(usize),
    Label(usize),
}

/// A program with symbolic jumps; [`Asm::finish`] resolves them.
#[derive(Default)]
struct Asm {
    code: Vec<Insn>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }
    fn place(&mut self, label: usize) {
        self.code.push(Insn::Label(label));
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push(Insn::Stmt { code, k });
    }
    fn jump(&mut self, code: u16, k: u32, yes: To, no: To) {
        self.code.push(Insn::Jump { code, k, yes, no });
    }
    fn ret(&mut self, action: u32) {
        self.stmt(BPF_RET_K, action);
    }
    fn goto(&mut self, label: usize) {
        self.code.push(Insn::Goto(label));
    }

    fn finish(self) -> Result<BpfProgram, PlanError> {
        let too_far = || PlanError::Seccomp {
            reason: "a jump in the seccomp program is too long".to_owned(),
        };
        let mut at = vec![usize::MAX; self.labels];
        let mut pc = 0;
        for insn in &self.code {
            match insn {
                Insn::Label(l) => at[*l] = pc,
                _ => pc += 1,
            }
        }
        let mut out = Vec::with_capacity(pc);
        for insn in self.code {
            // Instructions to skip from the one being emitted to `label`.
            let here = out.len();
            let skip = |label: usize| {
                at.get(label)
                    .and_then(|&target| target.checked_sub(here + 1))
                    .ok_or_else(too_far)
            };
            let short = |to: To| match to {
                To::Next => Ok(0),
                To::Label(l) => skip(l).and_then(|d| u8::try_from(d).map_err(|_| too_far())),
            };
            let (code, jt, jf, k) = match insn {
                Insn::Label(_) => continue,
                Insn::Stmt { code, k } => (code, 0, 0, k),
                Insn::Jump { code, k, yes, no } => (code, short(yes)?, short(no)?, k),
                Insn::Goto(l) => {
                    let k = u32::try_from(skip(l)?).map_err(|_| too_far())?;
                    (BPF_JMP_JA, 0, 0, k)
                }
            };
            out.push(sock_filter { code, jt, jf, k });
        }
        Ok(out)
    }
}

/// The offset in `seccomp_data` of an argument's low 32 bits.
fn low_word(index: u8) -> u32 {
    let base = SECCOMP_DATA_ARGS + 8 * u32::from(index);
    if cfg!(target_endian = "big") {
        base + 4
    } else {
        base
    }
}

/// Emits a binary search over sorted syscall numbers: each number jumps to its label,
/// any other number is allowed. The kernel decides at install time, by running the
/// program once per syscall number, which numbers are allowed whatever their arguments;
/// a search keeps those runs (and the install) short.
fn search(a: &mut Asm, targets: &[(u32, usize)]) {
    if targets.len() <= 3 {
        for &(number, label) in targets {
            a.jump(BPF_JMP_JEQ_K, number, To::Label(label), To::Next);
        }
        a.ret(libc::SECCOMP_RET_ALLOW);
        return;
    }
    let (low, high) = targets.split_at(targets.len() / 2);
    let upper = a.label();
    a.jump(BPF_JMP_JGE_K, high[0].0, To::Label(upper), To::Next);
    search(a, low);
    a.place(upper);
    search(a, high);
}

/// What the floor answers for a range of syscall numbers, decided from the number alone
/// or by a block of argument checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    Allow,
    Errno(i32),
    /// The argument checks at this label.
    Checks(usize),
}

/// Emits a binary search over ranges of syscall numbers, sorted by their first number
/// (the first range starts at 0): each range ends in its leaf, one instruction (a return,
/// or a jump to a block of argument checks). The kernel decides at install time, by
/// running the program once per syscall number, which numbers are allowed whatever their
/// arguments; a search keeps those runs (and the install) short, and never looks at an
/// argument on the way to a leaf.
fn search_ranges(a: &mut Asm, ranges: &[(u32, Leaf)]) {
    match ranges {
        [] => {}
        [(_, leaf)] => match *leaf {
            Leaf::Allow => a.ret(libc::SECCOMP_RET_ALLOW),
            Leaf::Errno(e) => a.ret(errno_action(e)),
            Leaf::Checks(label) => a.goto(label),
        },
        _ => {
            let (low, high) = ranges.split_at(ranges.len() / 2);
            let upper = a.label();
            a.jump(BPF_JMP_JGE_K, high[0].0, To::Label(upper), To::Next);
            search_ranges(a, low);
            a.place(upper);
            search_ranges(a, high);
        }
    }
}

/// `SECCOMP_RET_ERRNO` with an errno.
fn errno_action(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// Compiles the floor into one BPF program:
///
/// 1. a foreign architecture kills the process;
/// 2. a binary search over ranges of syscall numbers, each with one verdict: allowed (the
///    [`allowlist`]), refused with its errno (the floor's unconditional denials, `EPERM`;
///    `clone3`, `ENOSYS`, so that libc falls back to `clone`, whose flags the program can
///    inspect; on x86_64, every x32 number, `EPERM`), refused with `ENOSYS` (every number
///    not on the list, including those the kernel will add), or, for the calls with
///    argument-conditional denials, a block of checks out of line: each denial with its
///    own errno (`EPROTONOSUPPORT` for the refused netlink protocols), the call allowed
///    when none holds.
pub fn compile(network: Network) -> Result<BpfProgram, PlanError> {
    compile_for(network, false)
}

/// The refusals of IPv4 and IPv6 sockets of every type, for `--block-net` without a
/// network namespace (the `landlock` tier): with Landlock's TCP rules, nothing but Unix
/// sockets (and netlink, which carries no traffic out) is left.
pub fn inet_refused() -> Vec<Deny> {
    [libc::AF_INET as u32, libc::AF_INET6 as u32]
        .into_iter()
        .flat_map(|family| {
            [
                Deny {
                    name: "socket",
                    nr: libc::SYS_socket,
                    errno: libc::EPERM,
                    when: vec![ArgCheck::Eq32 {
                        index: 0,
                        value: family,
                    }],
                },
                Deny {
                    name: "socketpair",
                    nr: libc::SYS_socketpair,
                    errno: libc::EPERM,
                    when: vec![ArgCheck::Eq32 {
                        index: 0,
                        value: family,
                    }],
                },
            ]
        })
        .collect()
}

/// [`compile`], with every IPv4 and IPv6 socket refused too when `refuse_inet`
/// ([`inet_refused`]).
pub fn compile_for(network: Network, refuse_inet: bool) -> Result<BpfProgram, PlanError> {
    let nr = |n: i64| {
        u32::try_from(n).map_err(|e| PlanError::Seccomp {
            reason: e.to_string(),
        })
    };
    let mut a = Asm::default();

    // Per syscall number, its verdict when it does not depend on the arguments, or its
    // conditional denials in the floor's order (the first that holds decides).
    let mut fixed: BTreeMap<u32, Leaf> = BTreeMap::new();
    for call in allowlist() {
        fixed.insert(nr(call.nr)?, Leaf::Allow);
    }
    let mut conditional: BTreeMap<u32, Vec<(Vec<ArgCheck>, i32)>> = BTreeMap::new();
    let extra = if refuse_inet {
        inet_refused()
    } else {
        Vec::new()
    };
    for deny in floor(network).into_iter().chain(extra) {
        let number = nr(deny.nr)?;
        if deny.when.is_empty() {
            fixed.insert(number, Leaf::Errno(deny.errno));
        } else {
            conditional
                .entry(number)
                .or_default()
                .push((deny.when, deny.errno));
        }
    }
    let mut checked = Vec::new();
    for (number, denials) in conditional {
        match fixed.get(&number) {
            Some(Leaf::Allow) => {
                let block = a.label();
                fixed.insert(number, Leaf::Checks(block));
                checked.push((block, denials));
            }
            // Denied whatever the arguments: the checks would change nothing.
            Some(Leaf::Errno(_)) => {}
            _ => {
                return Err(PlanError::Seccomp {
                    reason: format!(
                        "syscall {number} has argument checks but is not on the allowlist"
                    ),
                })
            }
        }
    }

    // The ranges: every number from 0 up answers ENOSYS unless listed; on x86_64 the x32
    // numbers (the x32 bit set) are refused with EPERM as a whole.
    let highest = fixed.keys().next_back().copied().unwrap_or(0);
    if cfg!(target_arch = "x86_64") && highest >= X32_SYSCALL_BIT {
        return Err(PlanError::Seccomp {
            reason: format!("syscall {highest} has the x32 bit"),
        });
    }
    let mut ranges: Vec<(u32, Leaf)> = Vec::new();
    let mut push = |start: u32, leaf: Leaf| {
        if ranges.last().map(|&(_, l)| l) != Some(leaf) {
            ranges.push((start, leaf));
        }
    };
    let mut next_unlisted = 0;
    for (&number, &leaf) in &fixed {
        if number > next_unlisted {
            push(next_unlisted, Leaf::Errno(libc::ENOSYS));
        }
        push(number, leaf);
        next_unlisted = number.saturating_add(1);
    }
    push(next_unlisted, Leaf::Errno(libc::ENOSYS));
    if cfg!(target_arch = "x86_64") {
        push(X32_SYSCALL_BIT, Leaf::Errno(libc::EPERM));
    }

    let native = a.label();
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jump(BPF_JMP_JEQ_K, native_arch()?, To::Label(native), To::Next);
    a.ret(libc::SECCOMP_RET_KILL_PROCESS);
    a.place(native);
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    search_ranges(&mut a, &ranges);

    // One return per errno the checks use.
    let mut replies: Vec<(i32, usize)> = Vec::new();
    let mut reply = |a: &mut Asm, e: i32| match replies.iter().find(|(r, _)| *r == e) {
        Some(&(_, label)) => label,
        None => {
            let label = a.label();
            replies.push((e, label));
            label
        }
    };
    // Argument checks: each denial is a conjunction; a failed check moves on to the next
    // denial of the same syscall, the last check of a denial jumps straight to its errno,
    // and when no denial held the call is allowed.
    for (block, denials) in checked {
        a.place(block);
        // The argument word the accumulator holds (a block starts with the number in it).
        let mut held: Option<u8> = None;
        for (checks, e) in denials {
            let next = a.label();
            let refuse = reply(&mut a, e);
            let load = |a: &mut Asm, held: &mut Option<u8>, index: u8| {
                if *held != Some(index) {
                    a.stmt(BPF_LD_W_ABS, low_word(index));
                    *held = Some(index);
                }
            };
            for (i, check) in checks.iter().enumerate() {
                // Where the check goes when it holds, and when it does not.
                let (holds, fails) = if i + 1 == checks.len() {
                    (To::Label(refuse), To::Next)
                } else {
                    (To::Next, To::Label(next))
                };
                match *check {
                    ArgCheck::Eq32 { index, value } => {
                        load(&mut a, &mut held, index);
                        a.jump(BPF_JMP_JEQ_K, value, holds, fails);
                    }
                    ArgCheck::Ne32 { index, value } => {
                        load(&mut a, &mut held, index);
                        a.jump(BPF_JMP_JEQ_K, value, fails, holds);
                    }
                    ArgCheck::Masked32 { index, mask, value } => {
                        load(&mut a, &mut held, index);
                        a.stmt(BPF_ALU_AND_K, mask);
                        // The accumulator no longer holds the plain word.
                        held = None;
                        a.jump(BPF_JMP_JEQ_K, value, holds, fails);
                    }
                }
            }
            a.place(next);
            // The accumulator holds the same word on every way to `next` only when each
            // check compared that word, unmasked.
            let same_word = checks.iter().all(|c| match *c {
                ArgCheck::Eq32 { index, .. } | ArgCheck::Ne32 { index, .. } => held == Some(index),
                ArgCheck::Masked32 { .. } => false,
            });
            if !same_word {
                held = None;
            }
        }
        a.ret(libc::SECCOMP_RET_ALLOW);
    }

    for (e, label) in replies {
        a.place(label);
        a.ret(errno_action(e));
    }
    a.finish()
}

/// Installs a compiled program on the calling thread. Requires `no_new_privs`.
pub fn apply(program: &BpfProgram) -> Result<(), LinuxError> {
    seccompiler::apply_filter(program).map_err(|e| LinuxError::SeccompApply {
        reason: e.to_string(),
    })
}

// The refusal observer (`sandy run --explain`): a second filter, installed just before
// the floor, that hands write-intent calls to the supervisor with
// `SECCOMP_RET_USER_NOTIF`. The supervisor answers each one at once with "continue", so
// the kernel decides exactly as without it; it only learns which paths were written, to
// explain refusals after the run. Landlock's own audit records (ABI 7) would say exactly
// what Landlock refused, but reading them needs CAP_AUDIT_READ (and a netlink audit
// socket owned by the init user namespace), which an unprivileged user does not have and
// Sandy will not ask for; the notifier works for every user, and covers the refusals of
// the mount layer (read-only protections, masks) too, which audit would not attribute.

/// When a watched call is handed to the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Every call.
    Always,
    /// When any bit of `mask` is set in the low 32 bits of argument `index` (open flags).
    AnyFlag { index: u8, mask: u32 },
}

/// A call the observer sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observe {
    pub name: &'static str,
    pub nr: i64,
    pub when: Watch,
}

/// The open flags that mean an intent to write: `O_WRONLY`, `O_RDWR`, `O_CREAT`,
/// `O_TRUNC` (`O_TMPFILE` requires one of the first two).
pub const WRITE_INTENT_FLAGS: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// The write-intent calls the observer sees. Reads never reach it: an `open` without a
/// write flag costs a few BPF instructions and nothing else.
///
/// `openat2` carries its flags in a structure the filter cannot read, so every `openat2`
/// is handed over and the supervisor reads the flags itself (and ignores reads). Programs
/// rarely use it (the C library's `open` and `fopen` use `openat`), so the round trips
/// stay rare; not watching it would miss writes of the programs that do.
///
/// Metadata calls (`chmod`, `chown`, `utimensat`, `setxattr`) are not watched: Landlock
/// does not restrict them, so the write rules would misreport them.
pub fn observed() -> Vec<Observe> {
    let flags = |index| Watch::AnyFlag {
        index,
        mask: WRITE_INTENT_FLAGS,
    };
    let mut list = vec![
        ("openat", libc::SYS_openat, flags(2)),
        ("openat2", libc::SYS_openat2, Watch::Always),
        ("mkdirat", libc::SYS_mkdirat, Watch::Always),
        ("unlinkat", libc::SYS_unlinkat, Watch::Always),
        ("renameat", libc::SYS_renameat, Watch::Always),
        ("renameat2", libc::SYS_renameat2, Watch::Always),
        ("linkat", libc::SYS_linkat, Watch::Always),
        ("symlinkat", libc::SYS_symlinkat, Watch::Always),
        ("truncate", libc::SYS_truncate, Watch::Always),
        ("mknodat", libc::SYS_mknodat, Watch::Always),
    ];
    #[cfg(target_arch = "x86_64")]
    list.extend([
        ("open", libc::SYS_open, flags(1)),
        ("creat", libc::SYS_creat, Watch::Always),
        ("mkdir", libc::SYS_mkdir, Watch::Always),
        ("unlink", libc::SYS_unlink, Watch::Always),
        ("rmdir", libc::SYS_rmdir, Watch::Always),
        ("rename", libc::SYS_rename, Watch::Always),
        ("link", libc::SYS_link, Watch::Always),
        ("symlink", libc::SYS_symlink, Watch::Always),
        ("mknod", libc::SYS_mknod, Watch::Always),
    ]);
    list.into_iter()
        .map(|(name, nr, when)| Observe { name, nr, when })
        .collect()
}

/// `BPF_JMP | BPF_JSET | BPF_K`.
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;

/// The socket families whose sockets the supervisor creates in the host's network
/// namespace when the sandbox shares the host network (the socket broker): IPv4 and IPv6
/// TCP ([`BROKERED_IP_TYPE`], [`BROKERED_IP_PROTOCOLS`]) and every netlink socket
/// (interfaces and addresses, which name resolution asks for). Every other IP socket
/// (UDP, ICMP, SCTP) stays in the sandbox's own network namespace, which routes nowhere
/// but to the name-resolution relay.
pub const BROKERED_FAMILIES: [u32; 3] = [
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];

/// The socket type of a brokered IP socket (the type argument without its flags).
pub const BROKERED_IP_TYPE: u32 = libc::SOCK_STREAM as u32;
/// The protocols of a brokered IP socket: the default (TCP) and TCP named.
pub const BROKERED_IP_PROTOCOLS: [u32; 2] = [0, libc::IPPROTO_TCP as u32];

/// Compiles the notifier into its own program: the observer's write-intent calls when
/// `writes`, and, when `sockets`, `socket()` of the [`BROKERED_FAMILIES`] (the socket
/// broker; IP sockets only of TCP) and every `connect()` (the supervisor connects the
/// brokered sockets itself, after checking the destination). A foreign architecture is
/// left to the floor (allowed here; the floor kills it), then a binary search over the
/// watched numbers like the floor's; a watched call returns `SECCOMP_RET_USER_NOTIF`,
/// after a flag test for the opens and a family, type and protocol test for `socket()`;
/// everything else is allowed (the floor decides).
///
/// With `connects` (the `landlock` tier, which has no mount namespace to keep the host's
/// Unix sockets out of sight), every `connect()` is handed over too, brokered or not.
pub fn compile_notifier(
    writes: bool,
    sockets: bool,
    connects: bool,
) -> Result<BpfProgram, PlanError> {
    let nr = |n: i64| {
        u32::try_from(n).map_err(|e| PlanError::Seccomp {
            reason: e.to_string(),
        })
    };
    let mut a = Asm::default();
    let notify = a.label();
    let allow = a.label();
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jump(BPF_JMP_JEQ_K, native_arch()?, To::Next, To::Label(allow));
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    let mut targets = Vec::new();
    let mut checked = Vec::new();
    let watched = if writes { observed() } else { Vec::new() };
    let socket_block = a.label();
    if sockets {
        targets.push((nr(libc::SYS_socket)?, socket_block));
    }
    if sockets || connects {
        targets.push((nr(libc::SYS_connect)?, notify));
    }
    for watch in watched {
        match watch.when {
            Watch::Always => targets.push((nr(watch.nr)?, notify)),
            Watch::AnyFlag { index, mask } => {
                let block = a.label();
                targets.push((nr(watch.nr)?, block));
                checked.push((block, index, mask));
            }
        }
    }
    targets.sort_unstable();
    search(&mut a, &targets);
    for (block, index, mask) in checked {
        a.place(block);
        a.stmt(BPF_LD_W_ABS, low_word(index));
        a.jump(BPF_JMP_JSET_K, mask, To::Label(notify), To::Label(allow));
    }
    if sockets {
        a.place(socket_block);
        let ip_socket = a.label();
        a.stmt(BPF_LD_W_ABS, low_word(0));
        a.jump(
            BPF_JMP_JEQ_K,
            libc::AF_NETLINK as u32,
            To::Label(notify),
            To::Next,
        );
        for family in [libc::AF_INET as u32, libc::AF_INET6 as u32] {
            a.jump(BPF_JMP_JEQ_K, family, To::Label(ip_socket), To::Next);
        }
        a.goto(allow);
        // An IP socket: brokered when it is TCP (stream, default or TCP protocol).
        a.place(ip_socket);
        a.stmt(BPF_LD_W_ABS, low_word(1));
        a.stmt(BPF_ALU_AND_K, SOCK_TYPE_MASK);
        a.jump(BPF_JMP_JEQ_K, BROKERED_IP_TYPE, To::Next, To::Label(allow));
        a.stmt(BPF_LD_W_ABS, low_word(2));
        for protocol in BROKERED_IP_PROTOCOLS {
            a.jump(BPF_JMP_JEQ_K, protocol, To::Label(notify), To::Next);
        }
        a.goto(allow);
    }
    a.place(notify);
    a.ret(SECCOMP_RET_USER_NOTIF);
    a.place(allow);
    a.ret(libc::SECCOMP_RET_ALLOW);
    a.finish()
}

/// `SECCOMP_RET_USER_NOTIF` (linux/seccomp.h).
pub const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;

/// Installs the observer on the calling thread and returns its listener, which must
/// reach the supervisor before the thread makes a watched call (until someone answers,
/// the call waits). Requires `no_new_privs`.
pub fn apply_observer(program: &BpfProgram) -> Result<std::os::fd::OwnedFd, LinuxError> {
    crate::sys::notify::install_with_listener(program).map_err(|e| LinuxError::SeccompApply {
        reason: format!("the refusal observer: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn floor_denies_tiocsti_by_low_32_bits_and_only_foreign_families() {
        let floor = floor(Network::AllowAll);
        assert!(floor.contains(&Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: 0x5412
            }],
        }));
        let socket_family = floor
            .iter()
            .find(|d| d.name == "socket" && d.when.len() == 4)
            .unwrap();
        assert_eq!(
            socket_family.when,
            vec![
                ArgCheck::Ne32 { index: 0, value: 1 },
                ArgCheck::Ne32 { index: 0, value: 2 },
                ArgCheck::Ne32 {
                    index: 0,
                    value: 10
                },
                ArgCheck::Ne32 {
                    index: 0,
                    value: 16
                },
            ]
        );
        let mptcp = Deny {
            name: "socket",
            nr: libc::SYS_socket,
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 2,
                value: 262,
            }],
        };
        assert!(super::floor(Network::BlockAll).contains(&mptcp));
        assert!(!floor.contains(&mptcp));
    }

    /// Installs the compiled filter on a fresh thread (seccomp without TSYNC binds only the
    /// calling thread) and checks what it denies and what it allows.
    #[test]
    fn netlink_is_limited_to_route_generic_and_uevent() {
        let denied = |protocol: i32| {
            let args = [
                libc::AF_NETLINK as u64,
                libc::SOCK_RAW as u64,
                protocol as u64,
            ];
            floor(Network::AllowAll).iter().any(|d| {
                d.nr == libc::SYS_socket
                    && d.when.iter().all(|c| match *c {
                        ArgCheck::Eq32 { index, value } => args[usize::from(index)] as u32 == value,
                        ArgCheck::Ne32 { index, value } => args[usize::from(index)] as u32 != value,
                        ArgCheck::Masked32 { index, mask, value } => {
                            args[usize::from(index)] as u32 & mask == value
                        }
                    })
            })
        };
        for allowed in [
            libc::NETLINK_ROUTE,
            libc::NETLINK_GENERIC,
            libc::NETLINK_KOBJECT_UEVENT,
        ] {
            assert!(!denied(allowed), "protocol {allowed}");
        }
        for refused in [
            libc::NETLINK_SOCK_DIAG,
            libc::NETLINK_AUDIT,
            libc::NETLINK_CONNECTOR,
            libc::NETLINK_XFRM,
            libc::NETLINK_NETFILTER,
            libc::NETLINK_SELINUX,
            21,
            255,
        ] {
            assert!(denied(refused), "protocol {refused}");
        }
        // In the compiled program too.
        let program = compile(Network::AllowAll).unwrap();
        let call = |protocol: u64| {
            run(
                &program,
                libc::SYS_socket as u32,
                [
                    libc::AF_NETLINK as u64,
                    libc::SOCK_RAW as u64,
                    protocol,
                    0,
                    0,
                    0,
                ],
            )
        };
        assert_eq!(call(libc::NETLINK_ROUTE as u64), libc::SECCOMP_RET_ALLOW);
        assert_eq!(
            call(libc::NETLINK_SOCK_DIAG as u64),
            libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32
        );
    }

    /// With the host's network a send that would connect (TCP Fast Open) is refused; any
    /// other send is the floor's to allow. A blocked network keeps Fast Open (its sockets
    /// reach only the sandbox's loopback).
    #[test]
    fn fast_open_sends_are_refused_only_on_the_hosts_network() {
        let open = compile(Network::AllowAll).unwrap();
        let blocked = compile(Network::BlockAll).unwrap();
        let refused = libc::SECCOMP_RET_ERRNO | libc::EOPNOTSUPP as u32;
        let fastopen = u64::from(MSG_FASTOPEN);
        for (nr, index) in [
            (libc::SYS_sendto, 3usize),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            let mut args = [3u64, 0x1000, 16, 0, 0, 0];
            args[index] = fastopen | libc::MSG_NOSIGNAL as u64;
            assert_eq!(run(&open, nr as u32, args), refused, "{nr}");
            assert_eq!(run(&blocked, nr as u32, args), libc::SECCOMP_RET_ALLOW);
            args[index] = libc::MSG_NOSIGNAL as u64 | libc::MSG_DONTWAIT as u64;
            assert_eq!(run(&open, nr as u32, args), libc::SECCOMP_RET_ALLOW, "{nr}");
        }
    }

    #[test]
    fn compiled_filter_denies_the_floor_and_allows_the_rest() {
        let program = compile(Network::AllowAll).unwrap();
        let mptcp_unfiltered = crate::sys::raw_syscall_errno(
            libc::SYS_socket,
            [libc::AF_INET.into(), libc::SOCK_STREAM.into(), 262],
        );
        let results = std::thread::spawn(move || {
            nix::sys::prctl::set_no_new_privs().unwrap();
            apply(&program).unwrap();
            let sys = crate::sys::raw_syscall_errno;
            vec![
                ("keyctl", sys(libc::SYS_keyctl, [0, 0, 0])),
                ("bpf", sys(libc::SYS_bpf, [0, 0, 0])),
                ("io_uring_setup", sys(libc::SYS_io_uring_setup, [1, 0, 0])),
                ("clone3", sys(libc::SYS_clone3, [0, 0, 0])),
                (
                    "unshare",
                    sys(libc::SYS_unshare, [libc::CLONE_NEWUSER.into(), 0, 0]),
                ),
                ("tiocsti", sys(libc::SYS_ioctl, [0, 0x1_0000_5412, 0])),
                (
                    "packet",
                    sys(libc::SYS_socket, [libc::AF_PACKET.into(), 3, 0]),
                ),
                (
                    "raw",
                    sys(
                        libc::SYS_socket,
                        [libc::AF_INET.into(), libc::SOCK_RAW.into(), 1],
                    ),
                ),
                ("getpid", sys(libc::SYS_getpid, [0, 0, 0])),
                ("x32 getpid", sys(libc::SYS_getpid | 0x4000_0000, [0, 0, 0])),
                ("tioclinux", sys(libc::SYS_ioctl, [0, 0x541c, 0])),
                // The filter answers before the kernel looks at the descriptor.
                (
                    "tiocsetd",
                    sys(libc::SYS_ioctl, [-1, libc::TIOCSETD as i64, 0]),
                ),
                (
                    "tiocexcl",
                    sys(libc::SYS_ioctl, [-1, libc::TIOCEXCL as i64, 0]),
                ),
                (
                    "tiocnxcl",
                    sys(libc::SYS_ioctl, [-1, libc::TIOCNXCL as i64, 0]),
                ),
                ("unknown 499", sys(499, [0, 0, 0])),
                ("listmount", sys(458, [0, 0, 0])),
                ("memfd_secret", sys(libc::SYS_memfd_secret, [0, 0, 0])),
                (
                    "personality addr_no_randomize",
                    sys(libc::SYS_personality, [0x4_0000, 0, 0]),
                ),
                (
                    "personality query",
                    sys(libc::SYS_personality, [0xffff_ffff, 0, 0]),
                ),
                // Any other ioctl passes the filter (and fails on the bad descriptor).
                (
                    "fionread",
                    sys(libc::SYS_ioctl, [-1, libc::FIONREAD as i64, 0]),
                ),
                (
                    "socketpair inet",
                    sys(libc::SYS_socketpair, [libc::AF_INET.into(), 1, 0]),
                ),
                (
                    "mptcp, network open",
                    sys(
                        libc::SYS_socket,
                        [libc::AF_INET.into(), libc::SOCK_STREAM.into(), 262],
                    ),
                ),
                (
                    "packet type in inet",
                    sys(libc::SYS_socket, [libc::AF_INET.into(), 10, 0]),
                ),
                (
                    "unix",
                    sys(
                        libc::SYS_socket,
                        [libc::AF_UNIX.into(), libc::SOCK_STREAM.into(), 0],
                    ),
                ),
            ]
        })
        .join()
        .unwrap();
        assert_eq!(
            results,
            vec![
                ("keyctl", libc::EPERM),
                ("bpf", libc::EPERM),
                ("io_uring_setup", libc::EPERM),
                ("clone3", libc::ENOSYS),
                ("unshare", libc::EPERM),
                ("tiocsti", libc::EPERM),
                ("packet", libc::EPERM),
                ("raw", libc::EPERM),
                ("getpid", 0),
                ("x32 getpid", libc::EPERM),
                ("tioclinux", libc::EPERM),
                ("tiocsetd", libc::EPERM),
                ("tiocexcl", libc::EPERM),
                ("tiocnxcl", libc::EBADF),
                ("unknown 499", libc::ENOSYS),
                ("listmount", libc::ENOSYS),
                ("memfd_secret", libc::ENOSYS),
                ("personality addr_no_randomize", libc::EPERM),
                ("personality query", 0),
                ("fionread", libc::EBADF),
                ("socketpair inet", libc::EPERM),
                // Not denied by the filter: the kernel answers (MPTCP may be disabled).
                ("mptcp, network open", mptcp_unfiltered),
                ("packet type in inet", libc::EPERM),
                ("unix", 0),
            ]
        );
    }

    /// With the network blocked, MPTCP is refused on top; the rest is as above.
    #[test]
    fn blocked_network_filter_also_denies_mptcp() {
        let program = compile(Network::BlockAll).unwrap();
        let results = std::thread::spawn(move || {
            nix::sys::prctl::set_no_new_privs().unwrap();
            apply(&program).unwrap();
            let sys = crate::sys::raw_syscall_errno;
            [
                sys(
                    libc::SYS_socket,
                    [libc::AF_INET.into(), libc::SOCK_STREAM.into(), 262],
                ),
                sys(libc::SYS_keyctl, [0, 0, 0]),
                sys(libc::SYS_getpid, [0, 0, 0]),
            ]
        })
        .join()
        .unwrap();
        assert_eq!(results, [libc::EPERM, libc::EPERM, 0]);
    }

    /// The program stays short: its length is paid at every launch (translation and JIT).
    /// On x86_64 the allowlist and its gaps make about 85 ranges of numbers (about 170
    /// instructions of search), the argument checks about 60 more: 230 in all. 270 leaves
    /// room for a few more calls, and keeps the longest conditional jump (half the search)
    /// far below its limit of 255.
    #[test]
    fn the_program_is_short_and_every_jump_lands_inside_it() {
        for network in [Network::AllowAll, Network::BlockAll] {
            let program = compile(network).unwrap();
            assert!(program.len() <= 270, "{} instructions", program.len());
            for (pc, insn) in program.iter().enumerate() {
                if insn.code & 0x07 == 0x05 {
                    let far = if insn.code == BPF_JMP_JA {
                        insn.k as usize
                    } else {
                        usize::from(insn.jt.max(insn.jf))
                    };
                    assert!(
                        pc + 1 + far < program.len(),
                        "jump at {pc} leaves the program"
                    );
                }
            }
            let last = program.last().unwrap();
            assert_eq!(last.code, BPF_RET_K);
        }
    }

    /// A classic-BPF interpreter for the instructions `compile` emits, over a
    /// `seccomp_data` of (nr, native arch, args).
    fn run(program: &[sock_filter], nr: u32, args: [u64; 6]) -> u32 {
        run_reading(program, nr, args).0
    }

    /// [`run`], and whether the program read an argument on the way (the kernel's
    /// constant-action cache allows a number for good only when it did not).
    fn run_reading(program: &[sock_filter], nr: u32, args: [u64; 6]) -> (u32, bool) {
        let mut read_args = false;
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&native_arch().unwrap().to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let insn = &program[pc];
            pc += 1;
            match insn.code {
                BPF_LD_W_ABS => {
                    let at = insn.k as usize;
                    read_args |= at >= SECCOMP_DATA_ARGS as usize;
                    acc = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                BPF_ALU_AND_K => acc &= insn.k,
                BPF_JMP_JA => pc += insn.k as usize,
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K => {
                    let yes = if insn.code == BPF_JMP_JEQ_K {
                        acc == insn.k
                    } else {
                        acc >= insn.k
                    };
                    pc += usize::from(if yes { insn.jt } else { insn.jf });
                }
                BPF_JMP_JSET_K => {
                    let yes = acc & insn.k != 0;
                    pc += usize::from(if yes { insn.jt } else { insn.jf });
                }
                BPF_RET_K => return (insn.k, read_args),
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// What the floor, read as data, says about one call.
    fn expected(floor: &[Deny], allowed: &[Syscall], nr: u32, args: [u64; 6]) -> u32 {
        if cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT {
            return errno_action(libc::EPERM);
        }
        let holds = |check: &ArgCheck| {
            let low = |index: u8| args[usize::from(index)] as u32;
            match *check {
                ArgCheck::Eq32 { index, value } => low(index) == value,
                ArgCheck::Ne32 { index, value } => low(index) != value,
                ArgCheck::Masked32 { index, mask, value } => low(index) & mask == value,
            }
        };
        let same: Vec<&Deny> = floor.iter().filter(|d| d.nr == i64::from(nr)).collect();
        if let Some(d) = same.iter().find(|d| d.when.is_empty()) {
            return errno_action(d.errno);
        }
        if !allowed.iter().any(|c| c.nr == i64::from(nr)) {
            return errno_action(libc::ENOSYS);
        }
        match same.iter().find(|d| d.when.iter().all(holds)) {
            Some(d) => errno_action(d.errno),
            None => libc::SECCOMP_RET_ALLOW,
        }
    }

    /// The compiled program agrees with the floor's data for every syscall number (and
    /// x32 and out-of-range numbers), with argument values that trip each check and some
    /// that do not.
    #[test]
    fn the_program_decides_exactly_what_the_floor_says() {
        let interesting: Vec<u64> = vec![
            0,
            1,
            2,
            3,
            4,
            9,
            10,
            15,
            16,
            262,
            u64::from(TIOCSTI),
            u64::from(TIOCLINUX),
            0x1_0000_5412,
            libc::TIOCSETD as u64,
            libc::TIOCEXCL as u64,
            libc::TIOCNXCL as u64,
            libc::TIOCSCTTY as u64,
            libc::TIOCGWINSZ as u64,
            libc::TCSETS as u64,
            0x8,
            0x2_0000,
            0x2_0008,
            0x4_0000,
            0xffff_ffff,
            0x1_ffff_ffff,
            u64::from(libc::CLONE_NEWUSER as u32),
            u64::from(libc::CLONE_NEWUSER as u32) | 0x11,
            u64::from(libc::SOCK_RAW as u32) | u64::from(libc::SOCK_CLOEXEC as u32),
            u64::MAX,
        ];
        let allowed = allowlist();
        for network in [Network::AllowAll, Network::BlockAll] {
            let program = compile(network).unwrap();
            let floor = floor(network);
            let numbers = (0..600).chain([
                1000,
                0x3fff_ffff,
                X32_SYSCALL_BIT,
                X32_SYSCALL_BIT + 39,
                u32::MAX,
            ]);
            for nr in numbers {
                for &a0 in &interesting {
                    for &a1 in &interesting {
                        let args = [a0, a1, a1, 0, 0, 0];
                        assert_eq!(
                            run(&program, nr, args),
                            expected(&floor, &allowed, nr, args),
                            "{network:?}: nr {nr}, args {args:x?}"
                        );
                    }
                }
            }
        }
    }

    /// The list and the denials agree: no number twice, nothing both allowed and always
    /// denied, every argument-conditional denial on an allowed call, and none of the calls
    /// Sandy refuses on purpose on the list.
    #[test]
    fn the_allowlist_and_the_denials_agree() {
        let allowed = allowlist();
        let mut numbers: Vec<i64> = allowed.iter().map(|c| c.nr).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), allowed.len(), "a number is listed twice");
        assert!(allowed.len() > 250, "{} calls", allowed.len());
        for network in [Network::AllowAll, Network::BlockAll] {
            for deny in floor(network) {
                let listed = allowed.iter().find(|c| c.nr == deny.nr);
                if deny.when.is_empty() {
                    assert_eq!(listed, None, "{} is both allowed and denied", deny.name);
                } else {
                    assert_eq!(
                        listed.map(|c| c.name),
                        Some(deny.name),
                        "{}: argument checks on a call that is not allowed",
                        deny.name
                    );
                }
            }
        }
        for (name, nr) in refused_on_purpose() {
            assert!(
                !allowed.iter().any(|c| c.nr == nr),
                "{name} ({nr}) is on the allowlist"
            );
        }
        // Names and numbers agree with the kernel's for the calls given by number.
        let by_name = |name: &str| allowed.iter().find(|c| c.name == name).map(|c| c.nr);
        assert_eq!(by_name("cachestat"), Some(451));
        assert_eq!(by_name("removexattrat"), Some(466));
        assert_eq!(by_name("read"), Some(libc::SYS_read));
    }

    /// Calls Sandy refuses on purpose (ENOSYS), some of which Docker's default allows.
    fn refused_on_purpose() -> Vec<(&'static str, i64)> {
        let list = vec![
            ("memfd_secret", libc::SYS_memfd_secret),
            ("statmount", 457),
            ("listmount", 458),
            ("lsm_get_self_attr", 459),
            ("lsm_set_self_attr", 460),
            ("lsm_list_modules", 461),
            ("mbind", libc::SYS_mbind),
            ("set_mempolicy", libc::SYS_set_mempolicy),
            ("get_mempolicy", libc::SYS_get_mempolicy),
            ("migrate_pages", libc::SYS_migrate_pages),
            ("move_pages", libc::SYS_move_pages),
            ("set_mempolicy_home_node", libc::SYS_set_mempolicy_home_node),
            ("kcmp", libc::SYS_kcmp),
            ("pidfd_getfd", libc::SYS_pidfd_getfd),
            ("process_madvise", libc::SYS_process_madvise),
            ("fanotify_init", libc::SYS_fanotify_init),
            ("chroot", libc::SYS_chroot),
            ("vhangup", libc::SYS_vhangup),
            ("syslog", libc::SYS_syslog),
            ("quotactl", libc::SYS_quotactl),
            ("quotactl_fd", libc::SYS_quotactl_fd),
            ("lookup_dcookie", libc::SYS_lookup_dcookie),
            ("settimeofday", libc::SYS_settimeofday),
            ("clock_settime", libc::SYS_clock_settime),
            ("sethostname", libc::SYS_sethostname),
            ("setdomainname", libc::SYS_setdomainname),
            ("open_tree_attr", 467),
        ];
        #[cfg(target_arch = "x86_64")]
        let x86_64 = [
            ("modify_ldt", libc::SYS_modify_ldt),
            ("uselib", libc::SYS_uselib),
            ("ustat", libc::SYS_ustat),
            ("sysfs", libc::SYS_sysfs),
            ("iopl", libc::SYS_iopl),
            ("ioperm", libc::SYS_ioperm),
            ("_sysctl", libc::SYS__sysctl),
            ("epoll_ctl_old", libc::SYS_epoll_ctl_old),
        ];
        #[cfg(not(target_arch = "x86_64"))]
        let x86_64 = [];
        list.into_iter().chain(x86_64).collect()
    }

    /// Every allowed call is allowed from its number alone, whatever its arguments,
    /// unless the floor has argument checks for it; every other verdict that does not
    /// depend on the arguments is reached without reading one either (the kernel's
    /// constant-action cache, and short runs of the program).
    #[test]
    fn every_allowed_call_is_allowed_from_its_number_alone() {
        let allowed = allowlist();
        let args_sets = [
            [0; 6],
            [u64::MAX; 6],
            [
                u64::from(TIOCSTI),
                u64::from(TIOCSTI),
                libc::CLONE_NEWUSER as u64,
                17,
                0,
                0,
            ],
        ];
        for network in [Network::AllowAll, Network::BlockAll] {
            let program = compile(network).unwrap();
            let floor = floor(network);
            let checked = |nr: u32| {
                floor
                    .iter()
                    .any(|d| d.nr == i64::from(nr) && !d.when.is_empty())
            };
            for call in &allowed {
                let nr = u32::try_from(call.nr).unwrap();
                if checked(nr) {
                    // Allowed with ordinary arguments.
                    let ordinary = match call.name {
                        "socket" => [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
                        "socketpair" => [libc::AF_UNIX as u64, 0, 0, 0, 0, 0],
                        "ioctl" => [0, libc::TIOCGWINSZ as u64, 0, 0, 0, 0],
                        _ => [0; 6],
                    };
                    assert_eq!(
                        run(&program, nr, ordinary),
                        libc::SECCOMP_RET_ALLOW,
                        "{}",
                        call.name
                    );
                    continue;
                }
                for args in args_sets {
                    assert_eq!(
                        run_reading(&program, nr, args),
                        (libc::SECCOMP_RET_ALLOW, false),
                        "{} ({nr})",
                        call.name
                    );
                }
            }
            for nr in (0..1100).chain([X32_SYSCALL_BIT, u32::MAX]) {
                if !checked(nr) {
                    assert!(
                        !run_reading(&program, nr, [0; 6]).1,
                        "nr {nr} reads an argument"
                    );
                }
            }
        }
    }

    /// Numbers the kernel does not have, and calls it has that are not on the list,
    /// answer ENOSYS; the floor's unconditional denials answer their own errno.
    #[test]
    fn unknown_and_unlisted_calls_answer_enosys_and_denied_ones_their_errno() {
        let program = compile(Network::AllowAll).unwrap();
        let enosys = errno_action(libc::ENOSYS);
        for nr in [460, 467, 468, 469, 470, 499, 511, 1000, 0x3fff_ffff] {
            assert_eq!(run(&program, nr, [0; 6]), enosys, "nr {nr}");
        }
        for (name, nr) in refused_on_purpose() {
            let nr = u32::try_from(nr).unwrap();
            assert_eq!(run(&program, nr, [0; 6]), enosys, "{name}");
        }
        let mut denied = 0;
        for deny in floor(Network::AllowAll) {
            if deny.when.is_empty() {
                let nr = u32::try_from(deny.nr).unwrap();
                assert_eq!(
                    run(&program, nr, [0; 6]),
                    errno_action(deny.errno),
                    "{}",
                    deny.name
                );
                denied += 1;
            }
        }
        assert!(denied >= 31, "{denied} unconditional denials");
        assert_eq!(
            run(&program, libc::SYS_keyctl as u32, [0; 6]),
            errno_action(libc::EPERM)
        );
        assert_eq!(
            run(&program, libc::SYS_clone3 as u32, [0; 6]),
            errno_action(libc::ENOSYS)
        );
    }

    /// The terminal requests that act on the user's terminal are refused on any
    /// descriptor (the low 32 bits decide); the ones programs use to drive a terminal,
    /// and any other request, pass.
    #[test]
    fn terminal_takeover_ioctls_are_refused_and_ordinary_ones_pass() {
        let program = compile(Network::AllowAll).unwrap();
        let ioctl = |request: u64| run(&program, libc::SYS_ioctl as u32, [1, request, 0, 0, 0, 0]);
        for request in [
            libc::TIOCSTI,
            libc::TIOCLINUX,
            libc::TIOCSETD,
            libc::TIOCEXCL,
            libc::TIOCCONS,
            libc::TIOCVHANGUP,
        ] {
            let request = request as u32;
            assert_eq!(
                ioctl(u64::from(request)),
                errno_action(libc::EPERM),
                "{request:#x}"
            );
            assert_eq!(
                ioctl(0xffff_0000_0000_0000 | u64::from(request)),
                errno_action(libc::EPERM),
                "{request:#x} with high bits"
            );
        }
        for request in [
            libc::TIOCGWINSZ,
            libc::TIOCSWINSZ,
            libc::TCGETS,
            libc::TCSETS,
            libc::TCSETSW,
            libc::TCSETSF,
            libc::TIOCGPGRP,
            libc::TIOCSPGRP,
            libc::TIOCSCTTY,
            libc::TIOCNOTTY,
            libc::TIOCNXCL,
            libc::TIOCGEXCL,
            libc::TIOCGETD,
            libc::TIOCGPTN,
            libc::TIOCSPTLCK,
            libc::FIONREAD,
            libc::FIONBIO,
            libc::FIOCLEX,
        ] {
            assert_eq!(
                ioctl(request as u32 as u64),
                libc::SECCOMP_RET_ALLOW,
                "{request:#x}"
            );
        }
    }

    /// `personality`: Docker's five values pass, any other is refused.
    #[test]
    fn personality_takes_only_the_harmless_values() {
        let program = compile(Network::AllowAll).unwrap();
        let call = |value: u64| {
            run(
                &program,
                libc::SYS_personality as u32,
                [value, 0, 0, 0, 0, 0],
            )
        };
        for value in ALLOWED_PERSONALITIES {
            assert_eq!(
                call(u64::from(value)),
                libc::SECCOMP_RET_ALLOW,
                "{value:#x}"
            );
        }
        // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, PER_BSD, and a query with high bits.
        for value in [0x4_0000, 0x40_0000, 0x6, 0x4_0008] {
            assert_eq!(call(value), errno_action(libc::EPERM), "{value:#x}");
        }
        assert_eq!(call(0x1_ffff_ffff), libc::SECCOMP_RET_ALLOW);
    }

    /// What the observer, read as data, says about one call.
    fn expected_observer(nr: u32, args: [u64; 6]) -> u32 {
        match observed().iter().find(|o| o.nr == i64::from(nr)) {
            Some(Observe {
                when: Watch::Always,
                ..
            }) => SECCOMP_RET_USER_NOTIF,
            Some(Observe {
                when: Watch::AnyFlag { index, mask },
                ..
            }) if args[usize::from(*index)] as u32 & mask != 0 => SECCOMP_RET_USER_NOTIF,
            _ => libc::SECCOMP_RET_ALLOW,
        }
    }

    /// The observer's program hands over exactly the calls its data names: every open
    /// with a write flag, never a read-only open, every other watched call, and nothing
    /// else (x32 and out-of-range numbers included, which the floor decides).
    #[test]
    fn the_observer_notifies_exactly_the_write_intent_calls() {
        let program = compile_notifier(true, false, false).unwrap();
        let flags: Vec<u64> = vec![
            0,
            libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64,
            libc::O_RDONLY as u64 | libc::O_DIRECTORY as u64 | libc::O_NOFOLLOW as u64,
            libc::O_WRONLY as u64,
            libc::O_RDWR as u64,
            libc::O_CREAT as u64,
            libc::O_TRUNC as u64,
            libc::O_WRONLY as u64 | libc::O_APPEND as u64 | libc::O_CREAT as u64,
            libc::O_TMPFILE as u64 | libc::O_RDWR as u64,
            libc::O_APPEND as u64,
            // Only the low 32 bits count, as for the kernel's flags.
            1 << 32,
            u64::MAX,
        ];
        let numbers = (0..600).chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT + 2, u32::MAX]);
        for nr in numbers {
            for &f in &flags {
                for args in [[f, f, f, 0, 0, 0], [0, f, 0, 0, 0, 0], [0, 0, f, 0, 0, 0]] {
                    assert_eq!(
                        run(&program, nr, args),
                        expected_observer(nr, args),
                        "nr {nr}, args {args:x?}"
                    );
                }
            }
        }
        let openat = libc::SYS_openat as u32;
        let read_only = [0, 0, (libc::O_RDONLY | libc::O_CLOEXEC) as u64, 0, 0, 0];
        assert_eq!(run(&program, openat, read_only), libc::SECCOMP_RET_ALLOW);
        let append = [0, 0, (libc::O_WRONLY | libc::O_APPEND) as u64, 0, 0, 0];
        assert_eq!(run(&program, openat, append), SECCOMP_RET_USER_NOTIF);
        let unlinkat = libc::SYS_unlinkat as u32;
        assert_eq!(run(&program, unlinkat, [0; 6]), SECCOMP_RET_USER_NOTIF);
        // Short like the floor (its length is paid at every launch, and it runs on every
        // call whose verdict depends on the flags): 19 watched numbers on x86_64 make a
        // search of about 35 instructions, plus the architecture check, two flag tests
        // and two returns, 43 in all; 56 leaves room for a few more calls.
        assert!(program.len() <= 56, "{} instructions", program.len());
    }

    /// The socket broker's part: `socket()` of IPv4, IPv6 and netlink is handed over,
    /// any other family is not, and with `writes` off no write-intent call is.
    #[test]
    fn the_notifier_hands_over_exactly_the_brokered_sockets() {
        let socket = libc::SYS_socket as u32;
        let openat = libc::SYS_openat as u32;
        let write = [0, 0, libc::O_WRONLY as u64, 0, 0, 0];
        for (writes, program) in [
            (false, compile_notifier(false, true, false).unwrap()),
            (true, compile_notifier(true, true, false).unwrap()),
        ] {
            for family in 0..64u64 {
                let expected = if BROKERED_FAMILIES.contains(&(family as u32)) {
                    SECCOMP_RET_USER_NOTIF
                } else {
                    libc::SECCOMP_RET_ALLOW
                };
                let args = [family, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
                assert_eq!(run(&program, socket, args), expected, "family {family}");
            }
            // IP sockets: TCP only (with its flags, by default or named); UDP, ICMP and
            // SCTP stay in the sandbox's namespace. Netlink of any type is brokered.
            let stream = libc::SOCK_STREAM as u64;
            let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
            for family in [libc::AF_INET as u64, libc::AF_INET6 as u64] {
                for (ty, protocol, brokered) in [
                    (stream, 0, true),
                    (stream | flags, 0, true),
                    (stream, libc::IPPROTO_TCP as u64, true),
                    (stream, 132, false),
                    (stream, 262, false),
                    (libc::SOCK_DGRAM as u64, 0, false),
                    (
                        libc::SOCK_DGRAM as u64 | flags,
                        libc::IPPROTO_UDP as u64,
                        false,
                    ),
                    (libc::SOCK_DGRAM as u64, libc::IPPROTO_ICMP as u64, false),
                    (libc::SOCK_SEQPACKET as u64, 0, false),
                ] {
                    let expected = if brokered {
                        SECCOMP_RET_USER_NOTIF
                    } else {
                        libc::SECCOMP_RET_ALLOW
                    };
                    let args = [family, ty, protocol, 0, 0, 0];
                    assert_eq!(run(&program, socket, args), expected, "{args:?}");
                }
            }
            let netlink = [libc::AF_NETLINK as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
            assert_eq!(run(&program, socket, netlink), SECCOMP_RET_USER_NOTIF);
            // Every connect is handed over, whatever its arguments.
            let connect = libc::SYS_connect as u32;
            for fd in [0u64, 3, 1 << 33] {
                let args = [fd, 0x1000, 16, 0, 0, 0];
                assert_eq!(run(&program, connect, args), SECCOMP_RET_USER_NOTIF);
            }
            let expected = if writes {
                SECCOMP_RET_USER_NOTIF
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(run(&program, openat, write), expected, "writes {writes}");
        }
        // Without the broker, sockets are never handed over.
        let observer = compile_notifier(true, false, false).unwrap();
        let inet = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        assert_eq!(run(&observer, socket, inet), libc::SECCOMP_RET_ALLOW);
        let connect = [3, 0x1000, 16, 0, 0, 0];
        assert_eq!(
            run(&observer, libc::SYS_connect as u32, connect),
            libc::SECCOMP_RET_ALLOW
        );
    }

    /// Installed for real on one thread: a write-intent open waits for the listener,
    /// which answers "continue" (the file is created as without the observer); a read
    /// never reaches it.
    #[test]
    fn an_observed_call_continues_and_a_read_is_not_seen() {
        let dir = std::env::temp_dir().join(format!("sandy-observe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("created");
        let program = compile_notifier(true, false, false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = file;
        let worker = std::thread::spawn(move || {
            nix::sys::prctl::set_no_new_privs().unwrap();
            tx.send(apply_observer(&program).unwrap()).unwrap();
            let written = std::fs::write(&path, "x").is_ok();
            let read = std::fs::read_to_string(&path).unwrap();
            (written, read)
        });
        let listener = rx.recv().unwrap();
        let notif = crate::sys::notify::receive(listener.as_fd()).unwrap();
        // The C library opens with `openat` (glibc) or, on x86_64, `open` (musl, which
        // Sandy is built with): both are watched, with the flags in a different place.
        let flags = match i64::from(notif.data.nr) {
            libc::SYS_openat => notif.data.args[2],
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => notif.data.args[1],
            other => panic!("unexpected call {other}"),
        };
        assert_ne!(flags as u32 & WRITE_INTENT_FLAGS, 0);
        assert!(crate::sys::notify::still_valid(listener.as_fd(), notif.id));
        crate::sys::notify::continue_call(listener.as_fd(), notif.id).unwrap();
        let (written, read) = worker.join().unwrap();
        assert!(written);
        assert_eq!(read, "x");
        // The thread is gone: nothing more is pending, the listener hangs up.
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16)).unwrap();
        let events = fds[0].revents().unwrap();
        assert!(events.contains(nix::poll::PollFlags::POLLHUP), "{events:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
