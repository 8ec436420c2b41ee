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
    /// `user.max_user_namespaces`, when readable: 0 means no user namespace can be made.
    pub max_user_namespaces: Option<i64>,
}

/// Asks the kernel what it supports. The only probing code.
pub fn probe() -> KernelSupport {
    KernelSupport {
        landlock_abi: sys::landlock_abi(),
        seccomp_filter: sys::seccomp_filter_available(),
        max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
    }
}

/// Whether a blocked seccomp notification receive ([`crate::sys::notify::receive`])
/// returns by itself once no process uses the filter any more: from Linux 6.11 the kernel
/// wakes a waiting receiver when the filter's last user is gone (the receive then fails
/// with `ENOENT`, and the listener polls as hung up). Before, the receiver waits forever,
/// and a listener is served by `poll` first.
pub fn notify_receive_ends_with_filter() -> bool {
    let release = nix::sys::utsname::uname()
        .ok()
        .and_then(|u| u.release().to_str().map(str::to_owned));
    release.as_deref().and_then(kernel_version) >= Some((6, 11))
}

/// `MAJOR.MINOR` at the start of a kernel release string (`6.18.44-fc-v1045`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The AppArmor profile shipped in the repository, for the scoped fix on Ubuntu.
pub const APPARMOR_PROFILE: &str = "packaging/apparmor/sandy";

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The cause and fix when `user.max_user_namespaces` is 0.
pub const USERNS_DISABLED: &str = "user namespaces are disabled (user.max_user_namespaces = 0); \
     set it to a positive value, e.g. `sysctl -w user.max_user_namespaces=15000`";

/// Why creating a user namespace failed, and the narrowest fix, from the kernel's knobs.
pub fn userns_hint(errno: nix::errno::Errno) -> String {
    if read_sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return USERNS_DISABLED.to_owned();
    }
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return format!(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1); install the AppArmor profile \
             shipped with Sandy ({APPARMOR_PROFILE}, see its header) rather than changing the \
             global setting"
        );
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return "unprivileged user namespaces are disabled \
                (kernel.unprivileged_userns_clone = 0)"
            .to_owned();
    }
    match errno {
        nix::errno::Errno::ENOSPC => "the per-user limit of user namespaces is reached".to_owned(),
        _ => "a container or security policy forbids unshare(CLONE_NEWUSER); run Sandy where \
              unprivileged user namespaces are allowed"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_are_read_from_the_release() {
        assert_eq!(kernel_version("6.18.44-fc-v1045"), Some((6, 18)));
        assert_eq!(kernel_version("6.11.0"), Some((6, 11)));
        assert_eq!(kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(kernel_version("6"), None);
        assert_eq!(kernel_version("x"), None);
        assert!(Some((6, 9)) < Some((6, 11)) && None < Some((6, 11)));
    }
}
