use crate::reach::{self, HostFacts, NsFailure, NsStep};
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

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads the facts that explain a refused namespace ([`crate::reach`]): the user-namespace
/// sysctls, the container markers, this process's AppArmor label and seccomp mode. Each
/// file is small; an absent or unreadable one is `None`.
pub fn host_facts() -> HostFacts {
    let text = |path: &str| read_small(path).map(|b| String::from_utf8_lossy(&b).into_owned());
    HostFacts {
        max_user_namespaces: text("/proc/sys/user/max_user_namespaces"),
        apparmor_restrict_unprivileged_userns: text(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
        unprivileged_userns_clone: text("/proc/sys/kernel/unprivileged_userns_clone"),
        dockerenv: std::fs::symlink_metadata("/.dockerenv").is_ok(),
        containerenv: std::fs::symlink_metadata("/run/.containerenv").is_ok(),
        pid1_environ: read_small("/proc/1/environ"),
        cgroup: text("/proc/self/cgroup"),
        lsm_label: text("/proc/self/attr/apparmor/current")
            .or_else(|| text("/proc/self/attr/current")),
        status: text("/proc/self/status"),
        root: nix::unistd::geteuid().is_root(),
    }
}

/// At most 64 KiB of a file (procfs and marker files only).
fn read_small(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// Why creating a run's namespaces failed at `step`, and the narrowest fix, from the
/// host's facts: one line for the refusal message.
pub fn userns_hint(step: NsStep, errno: nix::errno::Errno) -> String {
    let exe = std::env::current_exe().unwrap_or_else(|_| "sandy".into());
    reach::cause(
        &host_facts(),
        NsFailure {
            step,
            errno: errno as i32,
        },
    )
    .explain(&exe)
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
