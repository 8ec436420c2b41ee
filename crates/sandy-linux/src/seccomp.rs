//! The seccomp floor, declared as data ([`floor`]) and compiled ([`compile`]) into one
//! short classic-BPF program, installed with `seccompiler`. Every denial returns an errno;
//! nothing kills the process, except a syscall from a foreign architecture.
//!
//! The program is compiled here rather than by `seccompiler`'s rule compiler because its
//! size is paid on every launch: the kernel translates and JIT-compiles the filter when it
//! is installed. seccompiler's generic layout took 240 instructions and about 170 µs to
//! install on the reference machine, most of it in the kernel running the program once
//! per syscall number to fill its constant-action cache. This layout (a binary search over
//! the denied numbers, the argument checks out of line) keeps each of those runs to about
//! a dozen instructions and installs in about 90 µs. Its shape also keeps that cache
//! useful: every syscall whose verdict does not depend on its arguments is decided from
//! its number alone.

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

macro_rules! always {
    ($($name:ident),* $(,)?) => {
        vec![$(Deny { name: stringify!($name), nr: paste_nr!($name), when: vec![], errno: libc::EPERM }),*]
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
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: TIOCSTI,
            }],
        },
        Deny {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            errno: libc::EPERM,
            when: vec![ArgCheck::Eq32 {
                index: 1,
                value: TIOCLINUX,
            }],
        },
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

/// Compiles the floor into one BPF program:
///
/// 1. a foreign architecture kills the process; x32 numbers are denied;
/// 2. a binary search over the syscall numbers the floor names: `clone3` answers `ENOSYS`
///    (libc then falls back to `clone`, whose flags the program can inspect), the others
///    go straight to their errno (`EPERM`) or, when only some arguments are denied, to
///    their checks, each denial with its own errno (`EPROTONOSUPPORT` for the refused
///    netlink protocols);
/// 3. everything else is allowed.
pub fn compile(network: Network) -> Result<BpfProgram, PlanError> {
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
    let nr = |n: i64| {
        u32::try_from(n).map_err(|e| PlanError::Seccomp {
            reason: e.to_string(),
        })
    };
    // Per syscall number, its denials in the floor's order (the first that holds
    // decides); an empty check list is an unconditional denial.
    let mut by_nr: BTreeMap<u32, Vec<(Vec<ArgCheck>, i32)>> = BTreeMap::new();
    for deny in floor(network) {
        by_nr
            .entry(nr(deny.nr)?)
            .or_default()
            .push((deny.when, deny.errno));
    }

    let mut a = Asm::default();
    // One return per errno the floor uses; EPERM first (x32 numbers go there).
    let mut replies: Vec<(i32, usize)> = vec![(libc::EPERM, a.label())];
    let mut reply = |a: &mut Asm, e: i32| match replies.iter().find(|(r, _)| *r == e) {
        Some(&(_, label)) => label,
        None => {
            let label = a.label();
            replies.push((e, label));
            label
        }
    };
    let deny = reply(&mut a, libc::EPERM);
    let enosys = a.label();
    let foreign = a.label();
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jump(BPF_JMP_JEQ_K, native_arch()?, To::Next, To::Label(foreign));
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    if cfg!(target_arch = "x86_64") {
        a.jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, To::Label(deny), To::Next);
    }
    let mut targets = vec![(nr(libc::SYS_clone3)?, enosys)];
    let mut checked = Vec::new();
    for (&number, denials) in &by_nr {
        if let Some((_, e)) = denials.iter().find(|(when, _)| when.is_empty()) {
            targets.push((number, reply(&mut a, *e)));
        } else {
            let block = a.label();
            targets.push((number, block));
            checked.push((block, denials));
        }
    }
    targets.sort_unstable();
    search(&mut a, &targets);

    // Argument checks: each denial is a conjunction; a failed check moves on to the next
    // denial of the same syscall, and when none matched the call is allowed.
    for (block, denials) in checked {
        a.place(block);
        for (checks, e) in denials {
            let next = a.label();
            // The argument word the accumulator holds unchanged, within this denial's
            // straight line of checks (a label may be reached with anything in it).
            let mut held = None;
            let load = |a: &mut Asm, held: &mut Option<u8>, index: u8| {
                if *held != Some(index) {
                    a.stmt(BPF_LD_W_ABS, low_word(index));
                    *held = Some(index);
                }
            };
            for check in checks {
                match *check {
                    ArgCheck::Eq32 { index, value } => {
                        load(&mut a, &mut held, index);
                        a.jump(BPF_JMP_JEQ_K, value, To::Next, To::Label(next));
                    }
                    ArgCheck::Ne32 { index, value } => {
                        load(&mut a, &mut held, index);
                        a.jump(BPF_JMP_JEQ_K, value, To::Label(next), To::Next);
                    }
                    ArgCheck::Masked32 { index, mask, value } => {
                        load(&mut a, &mut held, index);
                        a.stmt(BPF_ALU_AND_K, mask);
                        // The accumulator no longer holds the plain word.
                        held = None;
                        a.jump(BPF_JMP_JEQ_K, value, To::Next, To::Label(next));
                    }
                }
            }
            let label = reply(&mut a, *e);
            a.goto(label);
            a.place(next);
        }
        a.ret(libc::SECCOMP_RET_ALLOW);
    }

    for (e, label) in replies {
        a.place(label);
        a.ret(errno(e));
    }
    a.place(enosys);
    a.ret(errno(libc::ENOSYS));
    a.place(foreign);
    a.ret(libc::SECCOMP_RET_KILL_PROCESS);
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
/// namespace when the sandbox shares the host network (the socket broker): IPv4, IPv6
/// and netlink (interfaces and addresses, which name resolution asks for).
pub const BROKERED_FAMILIES: [u32; 3] = [
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];

/// Compiles the notifier into its own program: the observer's write-intent calls when
/// `writes`, and, when `sockets`, `socket()` of the [`BROKERED_FAMILIES`] (the socket
/// broker). A foreign architecture is left to the floor (allowed here; the floor kills
/// it), then a binary search over the watched numbers like the floor's; a watched call
/// returns `SECCOMP_RET_USER_NOTIF`, after a flag test for the opens and a family test
/// for `socket()`; everything else is allowed (the floor decides).
pub fn compile_notifier(writes: bool, sockets: bool) -> Result<BpfProgram, PlanError> {
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
        a.stmt(BPF_LD_W_ABS, low_word(0));
        for family in BROKERED_FAMILIES {
            a.jump(BPF_JMP_JEQ_K, family, To::Label(notify), To::Next);
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
    #[test]
    fn the_program_is_short_and_every_jump_lands_inside_it() {
        for network in [Network::AllowAll, Network::BlockAll] {
            let program = compile(network).unwrap();
            assert!(program.len() <= 140, "{} instructions", program.len());
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
                BPF_RET_K => return insn.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// What the floor, read as data, says about one call.
    fn expected(network: Network, nr: u32, args: [u64; 6]) -> u32 {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        if i64::from(nr) == libc::SYS_clone3 {
            return libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        }
        if cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT {
            return eperm;
        }
        let holds = |check: &ArgCheck| {
            let low = |index: u8| args[usize::from(index)] as u32;
            match *check {
                ArgCheck::Eq32 { index, value } => low(index) == value,
                ArgCheck::Ne32 { index, value } => low(index) != value,
                ArgCheck::Masked32 { index, mask, value } => low(index) & mask == value,
            }
        };
        let floor = floor(network);
        let same: Vec<&Deny> = floor.iter().filter(|d| d.nr == i64::from(nr)).collect();
        let decided = same
            .iter()
            .find(|d| d.when.is_empty())
            .or_else(|| same.iter().find(|d| d.when.iter().all(holds)));
        match decided {
            Some(d) => libc::SECCOMP_RET_ERRNO | d.errno as u32,
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
            u64::from(libc::CLONE_NEWUSER as u32),
            u64::from(libc::CLONE_NEWUSER as u32) | 0x11,
            u64::from(libc::SOCK_RAW as u32) | u64::from(libc::SOCK_CLOEXEC as u32),
            u64::MAX,
        ];
        for network in [Network::AllowAll, Network::BlockAll] {
            let program = compile(network).unwrap();
            let numbers = (0..600).chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT + 39, u32::MAX]);
            for nr in numbers {
                for &a0 in &interesting {
                    for &a1 in &interesting {
                        let args = [a0, a1, a1, 0, 0, 0];
                        assert_eq!(
                            run(&program, nr, args),
                            expected(network, nr, args),
                            "{network:?}: nr {nr}, args {args:x?}"
                        );
                    }
                }
            }
        }
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
        let program = compile_notifier(true, false).unwrap();
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
            (false, compile_notifier(false, true).unwrap()),
            (true, compile_notifier(true, true).unwrap()),
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
            let expected = if writes {
                SECCOMP_RET_USER_NOTIF
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(run(&program, openat, write), expected, "writes {writes}");
        }
        // Without the broker, sockets are never handed over.
        let observer = compile_notifier(true, false).unwrap();
        let inet = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        assert_eq!(run(&observer, socket, inet), libc::SECCOMP_RET_ALLOW);
    }

    /// Installed for real on one thread: a write-intent open waits for the listener,
    /// which answers "continue" (the file is created as without the observer); a read
    /// never reaches it.
    #[test]
    fn an_observed_call_continues_and_a_read_is_not_seen() {
        let dir = std::env::temp_dir().join(format!("sandy-observe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("created");
        let program = compile_notifier(true, false).unwrap();
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
