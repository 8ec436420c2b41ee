//! The seccomp floor, declared as data ([`floor`]), compiled by `seccompiler`, with a
//! hand-written prefix for what seccompiler cannot express (`clone3` answering `ENOSYS`,
//! and the x32 ABI). Every denial returns an errno; nothing kills the process, except a
//! syscall from a foreign architecture.

use std::collections::BTreeMap;

use sandy_policy::Network;
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

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
}

/// Socket families a target may create.
pub const ALLOWED_FAMILIES: [u32; 4] = [
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];

const SOCK_TYPE_MASK: u32 = 0xf;
/// `IPPROTO_MPTCP` (linux/in.h).
const IPPROTO_MPTCP: u32 = 262;
/// The obsolete `SOCK_PACKET` type of the IP families (linux/net.h), still accepted by the kernel.
const SOCK_PACKET: u32 = 10;
const TIOCSTI: u32 = libc::TIOCSTI as u32;
const TIOCLINUX: u32 = libc::TIOCLINUX as u32;

macro_rules! always {
    ($($name:ident),* $(,)?) => {
        vec![$(Deny { name: stringify!($name), nr: paste_nr!($name), when: vec![] }),*]
    };
}
macro_rules! paste_nr {
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (setns) => {
        libc::SYS_setns
    };
    (acct) => {
        libc::SYS_acct
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (reboot) => {
        libc::SYS_reboot
    };
}

/// The fixed floor, plus the network part when the network is blocked.
pub fn floor(network: Network) -> Vec<Deny> {
    let mut denies = always!(
        keyctl,
        add_key,
        request_key,
        bpf,
        perf_event_open,
        userfaultfd,
        io_uring_setup,
        io_uring_enter,
        io_uring_register,
        mount,
        umount2,
        pivot_root,
        move_mount,
        open_tree,
        fsopen,
        fsconfig,
        fsmount,
        fspick,
        mount_setattr,
        kexec_load,
        kexec_file_load,
        init_module,
        finit_module,
        delete_module,
        open_by_handle_at,
        setns,
        acct,
        swapon,
        swapoff,
        reboot,
    );
    let newuser = libc::CLONE_NEWUSER as u32;
    denies.extend([
        // Terminal injection: compare only the low 32 bits of the request, as the kernel does.
        Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: TIOCSTI,
            }],
        },
        Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: TIOCLINUX,
            }],
        },
        // No new user namespaces: they would unlock mount and other privileged surfaces.
        Deny {
            name: "clone",
            nr: libc::SYS_clone,
            when: vec![ArgCheck::Masked32 {
                index: CLONE_FLAGS_ARG,
                mask: newuser,
                value: newuser,
            }],
        },
        Deny {
            name: "unshare",
            nr: libc::SYS_unshare,
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
            when: ALLOWED_FAMILIES
                .iter()
                .map(|&f| ArgCheck::Ne32 { index: 0, value: f })
                .collect(),
        },
        Deny {
            name: "socketpair",
            nr: libc::SYS_socketpair,
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
    // With the network blocked the sandbox has its own network namespace (loopback only);
    // MPTCP is refused on top, so no multipath subflow can be set up at all.
    if network == Network::BlockAll {
        denies.push(Deny {
            name: "socket",
            nr: libc::SYS_socket,
            when: vec![ArgCheck::Eq32 {
                index: 2,
                value: IPPROTO_MPTCP,
            }],
        });
    }
    denies
}

/// `clone`'s flags are its first argument on every supported architecture.
const CLONE_FLAGS_ARG: u8 = 0;

fn target_arch() -> Result<TargetArch, PlanError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(PlanError::UnsupportedArch)
    }
}

fn condition(check: ArgCheck) -> Result<SeccompCondition, seccompiler::BackendError> {
    let (index, op, value) = match check {
        ArgCheck::Eq32 { index, value } => (index, SeccompCmpOp::Eq, value),
        ArgCheck::Ne32 { index, value } => (index, SeccompCmpOp::Ne, value),
        ArgCheck::Masked32 { index, mask, value } => {
            (index, SeccompCmpOp::MaskedEq(u64::from(mask)), value)
        }
    };
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, u64::from(value))
}

// Classic BPF opcodes (linux/bpf_common.h).
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Compiles the floor into one BPF program.
pub fn compile(network: Network) -> Result<BpfProgram, PlanError> {
    let err = |e: &dyn std::fmt::Display| PlanError::Seccomp {
        reason: e.to_string(),
    };
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for deny in floor(network) {
        let rules = map.entry(deny.nr).or_default();
        if deny.when.is_empty() {
            // seccompiler matches an empty rule list unconditionally.
            continue;
        }
        let conditions = deny
            .when
            .into_iter()
            .map(condition)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(&e))?;
        rules.push(SeccompRule::new(conditions).map_err(|e| err(&e))?);
    }
    let filter = SeccompFilter::new(
        map,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(|e| err(&e))?;
    let body: BpfProgram = filter.try_into().map_err(|e| err(&e))?;

    // Prefix: clone3 answers ENOSYS (libc falls back to clone, whose flags the body can
    // inspect); on x86_64, x32 syscall numbers are refused. The body then checks the
    // architecture and kills foreign-architecture syscalls.
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
    let clone3 = u32::try_from(libc::SYS_clone3).map_err(|e| err(&e))?;
    let mut program = vec![
        stmt(BPF_LD_W_ABS, 0),
        jump(BPF_JMP_JEQ_K, clone3, 0, 1),
        stmt(BPF_RET_K, errno(libc::ENOSYS)),
    ];
    if cfg!(target_arch = "x86_64") {
        program.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
        program.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    program.extend(body);
    Ok(program)
}

/// Installs a compiled program on the calling thread. Requires `no_new_privs`.
pub fn apply(program: &BpfProgram) -> Result<(), LinuxError> {
    seccompiler::apply_filter(program).map_err(|e| LinuxError::SeccompApply {
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_denies_tiocsti_by_low_32_bits_and_only_foreign_families() {
        let floor = floor(Network::AllowAll);
        assert!(floor.contains(&Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
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
    fn compiled_filter_denies_the_floor_and_allows_the_rest() {
        let program = compile(Network::AllowAll).unwrap();
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
                ("unix", 0),
            ]
        );
    }
}
