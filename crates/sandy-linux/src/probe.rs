use crate::sys;

/// The Landlock ABI whose access rights Sandy handles, and which its tests run against.
/// Bump it on purpose, with tests. ABI 7 adds no access rights over 6, only audit flags.
pub const PINNED_LANDLOCK_ABI: landlock::ABI = landlock::ABI::V7;

/// The oldest ABI that carries every promise of the default policy: truncate control (3),
/// device ioctls (5), and the signal and abstract-socket scopes (6).
pub const MIN_LANDLOCK_ABI: u32 = 6;

/// What this kernel can enforce, as plain data so planning stays pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSupport {
    /// The Landlock ABI version, or the errno explaining its absence.
    pub landlock_abi: Result<u32, i32>,
    /// Whether seccomp filter mode is available.
    pub seccomp_filter: bool,
}

/// Asks the kernel what it supports. The only probing code.
pub fn probe() -> KernelSupport {
    KernelSupport {
        landlock_abi: sys::landlock_abi(),
        seccomp_filter: sys::seccomp_filter_available(),
    }
}
