//! Why a run's namespaces cannot be made on this machine, and the narrowest fix. Pure:
//! the inputs are the text of a few kernel and container files ([`HostFacts`], read by
//! [`crate::probe::host_facts`]) and the step that failed ([`NsFailure`]); nothing here
//! touches the system, so every case is unit-tested with fixtures.
//!
//! The causes told apart: user namespaces disabled (`user.max_user_namespaces = 0`),
//! Debian's `kernel.unprivileged_userns_clone = 0`, Ubuntu's AppArmor restriction
//! (`kernel.apparmor_restrict_unprivileged_userns = 1`), a container runtime's seccomp
//! profile, AppArmor profile or masked `/proc` (Docker, Podman, containerd/Kubernetes), a
//! seccomp filter inherited from whatever started Sandy, the per-user limit, a kernel
//! without user namespaces.

use std::fmt;
use std::path::Path;

/// The facts about the host that explain a refused namespace, as read (plain text, so the
/// interpretation stays pure). `None`: the file was absent or unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// `/proc/sys/user/max_user_namespaces`.
    pub max_user_namespaces: Option<String>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later).
    pub apparmor_restrict_unprivileged_userns: Option<String>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's patch).
    pub unprivileged_userns_clone: Option<String>,
    /// `/.dockerenv` exists.
    pub dockerenv: bool,
    /// `/run/.containerenv` exists (Podman).
    pub containerenv: bool,
    /// `/proc/1/environ` (NUL-separated; readable as root, or as pid 1's owner).
    pub pid1_environ: Option<Vec<u8>>,
    /// `/proc/self/cgroup`.
    pub cgroup: Option<String>,
    /// `/proc/self/attr/apparmor/current`, else `/proc/self/attr/current`.
    pub lsm_label: Option<String>,
    /// `/proc/self/status`.
    pub status: Option<String>,
    /// Whether the caller is root (uid 0) in its own user namespace.
    pub root: bool,
}

/// A container runtime, as its markers show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Docker,
    Podman,
    /// containerd or CRI-O under Kubernetes.
    Kubernetes,
    /// Another runtime (LXC, systemd-nspawn, ...): `container=` names it.
    Other,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "Docker",
            Runtime::Podman => "Podman",
            Runtime::Kubernetes => "containerd/Kubernetes",
            Runtime::Other => "a container runtime",
        }
    }
}

/// The step of making a run's namespaces that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsStep {
    /// `unshare(CLONE_NEWUSER)`.
    CreateUserNs,
    /// Writing `uid_map`, `gid_map` or `setgroups`.
    MapIds,
    /// `unshare` of the mount, PID, IPC or network namespace inside the user namespace.
    Unshare,
    /// A fresh procfs mount, or a fresh sysfs (a `--block-net` run's).
    Proc,
    /// A fresh devpts mount.
    Devpts,
    /// A tmpfs mount.
    Tmpfs,
    /// A bind mount, or changing a mount's propagation or flags.
    Bind,
    /// Bringing loopback up in the new network namespace.
    Network,
}

impl NsStep {
    /// The stable machine name (doctor's JSON).
    pub fn name(self) -> &'static str {
        match self {
            NsStep::CreateUserNs => "create_user_namespace",
            NsStep::MapIds => "map_ids",
            NsStep::Unshare => "unshare",
            NsStep::Proc => "mount_proc",
            NsStep::Devpts => "mount_devpts",
            NsStep::Tmpfs => "mount_tmpfs",
            NsStep::Bind => "bind_mount",
            NsStep::Network => "network",
        }
    }

    /// The inverse of [`NsStep::name`].
    pub fn from_name(name: &str) -> Option<NsStep> {
        [
            NsStep::CreateUserNs,
            NsStep::MapIds,
            NsStep::Unshare,
            NsStep::Proc,
            NsStep::Devpts,
            NsStep::Tmpfs,
            NsStep::Bind,
            NsStep::Network,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    fn is_mount(self) -> bool {
        matches!(
            self,
            NsStep::Proc | NsStep::Devpts | NsStep::Tmpfs | NsStep::Bind
        )
    }
}

/// A failed step and the kernel's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsFailure {
    pub step: NsStep,
    pub errno: i32,
}

/// How a container refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// Its seccomp profile refuses `CLONE_NEWUSER` (Docker's default does).
    Seccomp,
    /// Its AppArmor profile (`docker-default`, ...) refuses mounts.
    AppArmor,
    /// Its masked `/proc` or `/sys` entries forbid a fresh procfs or sysfs.
    MaskedProc,
    /// Something else in its security settings.
    Unknown,
}

/// Why the namespaces cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// `user.max_user_namespaces = 0`.
    UsernsDisabled,
    /// `kernel.unprivileged_userns_clone = 0`.
    DebianUsernsClone,
    /// `kernel.apparmor_restrict_unprivileged_userns = 1`.
    AppArmorRestriction,
    /// Inside a container whose security settings refuse what a run needs.
    Container {
        runtime: Runtime,
        barrier: Barrier,
        /// The AppArmor label, when it is confined.
        label: Option<String>,
    },
    /// A seccomp filter Sandy inherited (not from a recognized container).
    InheritedSeccomp,
    /// The per-user (or namespace) limit is reached (`ENOSPC`).
    UsernsLimit,
    /// The kernel has no user namespaces (`EINVAL`, `ENOSYS`).
    NoUsernsKernel,
    /// Nothing known explains it.
    Unknown { step: NsStep, errno: i32 },
}

impl Cause {
    /// The stable machine name (doctor's JSON).
    pub fn id(&self) -> &'static str {
        match self {
            Cause::UsernsDisabled => "userns_disabled",
            Cause::DebianUsernsClone => "unprivileged_userns_clone",
            Cause::AppArmorRestriction => "apparmor_userns_restriction",
            Cause::Container {
                barrier: Barrier::Seccomp,
                ..
            } => "container_seccomp",
            Cause::Container {
                barrier: Barrier::AppArmor,
                ..
            } => "container_apparmor",
            Cause::Container {
                barrier: Barrier::MaskedProc,
                ..
            } => "container_masked_proc",
            Cause::Container {
                barrier: Barrier::Unknown,
                ..
            } => "container",
            Cause::InheritedSeccomp => "inherited_seccomp",
            Cause::UsernsLimit => "userns_limit",
            Cause::NoUsernsKernel => "no_userns_kernel",
            Cause::Unknown { .. } => "unknown",
        }
    }

    /// One line: what refuses.
    pub fn line(&self) -> String {
        match self {
            Cause::UsernsDisabled => {
                "user namespaces are disabled (user.max_user_namespaces = 0)".to_owned()
            }
            Cause::DebianUsernsClone => "unprivileged user namespaces are disabled \
                                         (kernel.unprivileged_userns_clone = 0)"
                .to_owned(),
            Cause::AppArmorRestriction => "AppArmor restricts unprivileged user namespaces \
                                           (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .to_owned(),
            Cause::Container {
                runtime,
                barrier,
                label,
            } => {
                let who = runtime.name();
                match barrier {
                    Barrier::Seccomp => format!(
                        "this is a {who} container whose seccomp profile refuses new user \
                         namespaces"
                    ),
                    Barrier::AppArmor => format!(
                        "this is a {who} container whose AppArmor profile ({}) refuses mounts",
                        label.as_deref().unwrap_or("confined")
                    ),
                    Barrier::MaskedProc => format!(
                        "this is a {who} container whose masked /proc and /sys entries forbid \
                         a fresh /proc or /sys in a new user namespace"
                    ),
                    Barrier::Unknown => format!(
                        "this is a {who} container whose security settings refuse new user \
                         namespaces or mounts in them"
                    ),
                }
            }
            Cause::InheritedSeccomp => "a seccomp filter installed by the program that started \
                                        Sandy refuses namespaces or mounts"
                .to_owned(),
            Cause::UsernsLimit => "the limit of user namespaces is reached".to_owned(),
            Cause::NoUsernsKernel => "this kernel has no user namespaces".to_owned(),
            Cause::Unknown { step, errno } => format!(
                "a security policy refuses {} (errno {errno})",
                match step {
                    NsStep::CreateUserNs | NsStep::MapIds => "unprivileged user namespaces",
                    NsStep::Unshare => "new namespaces inside a user namespace",
                    NsStep::Network => "a network namespace inside a user namespace",
                    _ => "mounts inside a user namespace",
                }
            ),
        }
    }

    /// The narrowest fix that works, for the Sandy binary at `exe`.
    pub fn fix(&self, exe: &Path) -> String {
        match self {
            Cause::UsernsDisabled => "set it to a positive value: `sudo sysctl -w \
                                      user.max_user_namespaces=15000` (and in /etc/sysctl.d/ \
                                      to keep it)"
                .to_owned(),
            Cause::DebianUsernsClone => "`sudo sysctl -w kernel.unprivileged_userns_clone=1` \
                                         (and in /etc/sysctl.d/ to keep it)"
                .to_owned(),
            Cause::AppArmorRestriction => format!(
                "allow them for Sandy alone with its AppArmor profile: `sudo {} setup` (the \
                 .deb package installs it too); as a last resort, for every program: `sudo \
                 sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
                shell_word(exe)
            ),
            Cause::Container {
                runtime, barrier, ..
            } => container_fix(*runtime, *barrier),
            Cause::InheritedSeccomp => "start Sandy without that filter (Sandy installs its \
                                        own seccomp floor inside the sandbox)"
                .to_owned(),
            Cause::UsernsLimit => "raise user.max_user_namespaces, or end processes that hold \
                                   user namespaces"
                .to_owned(),
            Cause::NoUsernsKernel => "use a kernel built with CONFIG_USER_NS=y".to_owned(),
            Cause::Unknown { .. } => "run Sandy where unprivileged user namespaces, and mounts \
                                      in them, are allowed"
                .to_owned(),
        }
    }

    /// `CAUSE; fix: FIX`, then the other path, for a refusal message: the weaker tier,
    /// chosen by name ([`WEAKER_TIER`]).
    pub fn explain(&self, exe: &Path) -> String {
        format!("{}; fix: {}; {WEAKER_TIER}", self.line(), self.fix(exe))
    }
}

/// The other path where namespaces are unavailable, named in every refusal and by
/// `sandy doctor`: the weaker tier, only when chosen.
pub const WEAKER_TIER: &str = "or run the weaker tier knowingly: `sandy run --tier landlock` \
                               (Landlock, seccomp and the supervisor, without namespaces; \
                               docs/tiers.md lists what it keeps and drops)";

fn container_fix(runtime: Runtime, barrier: Barrier) -> String {
    match (runtime, barrier) {
        (Runtime::Docker | Runtime::Podman, Barrier::Seccomp) => format!(
            "start the container with Sandy's seccomp profile, the default one plus the \
             namespaces and mounts Sandy needs: `{} run --security-opt \
             seccomp=sandy-seccomp.json ...` (packaging/containers/ in Sandy's source, \
             docs/containers.md)",
            runtime_cli(runtime)
        ),
        (Runtime::Docker | Runtime::Podman, Barrier::AppArmor) => format!(
            "start the container with `{} run --security-opt apparmor=unconfined ...`",
            runtime_cli(runtime)
        ),
        (Runtime::Docker, Barrier::MaskedProc) => {
            "start the container with `docker run --security-opt systempaths=unconfined ...`"
                .to_owned()
        }
        (Runtime::Podman, Barrier::MaskedProc) => {
            "start the container with `podman run --security-opt unmask=ALL ...`".to_owned()
        }
        (Runtime::Kubernetes, Barrier::Seccomp) => {
            "give the pod `securityContext.seccompProfile.type: Unconfined` (or a Localhost \
             profile that allows unshare and mount)"
                .to_owned()
        }
        (Runtime::Kubernetes, Barrier::AppArmor) => {
            "give the container `securityContext.appArmorProfile.type: Unconfined`".to_owned()
        }
        (Runtime::Kubernetes, Barrier::MaskedProc) => {
            "give the container `securityContext.procMount: Unmasked` (with hostUsers: false)"
                .to_owned()
        }
        _ => "start the container with user namespaces and mounts in them allowed (for \
              Docker or Podman: `--security-opt seccomp=sandy-seccomp.json --security-opt \
              apparmor=unconfined --security-opt systempaths=unconfined`, docs/containers.md)"
            .to_owned(),
    }
}

fn runtime_cli(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Podman => "podman",
        _ => "docker",
    }
}

/// A path as one shell word (quoted when it needs to be).
pub fn shell_word(path: &Path) -> String {
    let s = path.to_string_lossy();
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%".contains(&b))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn number(text: &Option<String>) -> Option<i64> {
    text.as_deref()?.trim().parse().ok()
}

impl HostFacts {
    /// The container runtime Sandy runs in, from its markers.
    pub fn container(&self) -> Option<Runtime> {
        let env_var = self.pid1_environ.as_deref().and_then(|environ| {
            environ
                .split(|&b| b == 0)
                .find_map(|kv| kv.strip_prefix(b"container="))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        });
        let cgroup = self.cgroup.as_deref().unwrap_or("");
        if self.containerenv || env_var.as_deref() == Some("podman") || cgroup.contains("libpod") {
            return Some(Runtime::Podman);
        }
        if self.dockerenv || env_var.as_deref() == Some("docker") || cgroup.contains("docker") {
            return Some(Runtime::Docker);
        }
        if cgroup.contains("kubepods") || cgroup.contains("cri-containerd") {
            return Some(Runtime::Kubernetes);
        }
        if self.lsm_label().as_deref() == Some("docker-default") {
            return Some(Runtime::Docker);
        }
        env_var.filter(|v| !v.is_empty()).map(|_| Runtime::Other)
    }

    /// The AppArmor label when confined (`docker-default`), without the mode.
    pub fn lsm_label(&self) -> Option<String> {
        let label = self.lsm_label.as_deref()?.trim().trim_end_matches('\0');
        let name = label.split(" (").next().unwrap_or(label).trim();
        (!name.is_empty() && name != "unconfined").then(|| name.to_owned())
    }

    /// The `Seccomp:` mode of `/proc/self/status` (0 none, 1 strict, 2 filter).
    pub fn seccomp_mode(&self) -> Option<u32> {
        self.status
            .as_deref()?
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp:"))
            .and_then(|v| v.trim().parse().ok())
    }

    /// `name = value` of each sysctl that bears on user namespaces and could be read.
    pub fn sysctls(&self) -> String {
        let mut out = Vec::new();
        for (name, value) in [
            ("user.max_user_namespaces", &self.max_user_namespaces),
            (
                "kernel.apparmor_restrict_unprivileged_userns",
                &self.apparmor_restrict_unprivileged_userns,
            ),
            (
                "kernel.unprivileged_userns_clone",
                &self.unprivileged_userns_clone,
            ),
        ] {
            if let Some(v) = number(value) {
                out.push(format!("{name} = {v}"));
            }
        }
        out.join(", ")
    }
}

/// Why `failure` happened, from the host's facts.
pub fn cause(facts: &HostFacts, failure: NsFailure) -> Cause {
    let NsFailure { step, errno } = failure;
    let denied = errno == libc::EPERM || errno == libc::EACCES;
    let at_creation = matches!(step, NsStep::CreateUserNs | NsStep::MapIds);
    if number(&facts.max_user_namespaces) == Some(0) {
        return Cause::UsernsDisabled;
    }
    if at_creation && errno == libc::ENOSPC {
        return Cause::UsernsLimit;
    }
    if step == NsStep::CreateUserNs && (errno == libc::EINVAL || errno == libc::ENOSYS) {
        return Cause::NoUsernsKernel;
    }
    // Debian's knob refuses unprivileged callers only.
    if at_creation && !facts.root && number(&facts.unprivileged_userns_clone) == Some(0) {
        return Cause::DebianUsernsClone;
    }
    let container = facts.container();
    let label = facts.lsm_label();
    let filtered = facts.seccomp_mode() == Some(2);
    // A container whose own settings account for the refusal: its seccomp profile at the
    // creation, its masked /proc at a fresh procfs, its AppArmor profile at a mount.
    if let (Some(runtime), true) = (container, denied) {
        let barrier = if at_creation && filtered {
            Some(Barrier::Seccomp)
        } else if step == NsStep::Proc {
            Some(Barrier::MaskedProc)
        } else if step.is_mount() && label.is_some() {
            Some(Barrier::AppArmor)
        } else {
            None
        };
        if let Some(barrier) = barrier {
            return Cause::Container {
                runtime,
                barrier,
                label,
            };
        }
    }
    // Ubuntu's restriction lets unshare succeed and denies the capabilities inside: a
    // mapping or a mount then fails with EPERM (or unshare itself, under a stricter mode).
    if denied && number(&facts.apparmor_restrict_unprivileged_userns) == Some(1) {
        return Cause::AppArmorRestriction;
    }
    if let Some(runtime) = container {
        return Cause::Container {
            runtime,
            barrier: if denied && filtered {
                Barrier::Seccomp
            } else {
                Barrier::Unknown
            },
            label,
        };
    }
    if denied && filtered {
        return Cause::InheritedSeccomp;
    }
    Cause::Unknown { step, errno }
}

impl fmt::Display for NsStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NsStep::CreateUserNs => "creating a user namespace",
            NsStep::MapIds => "mapping ids in the user namespace",
            NsStep::Unshare => "creating the mount, PID, IPC or network namespace",
            NsStep::Proc => "mounting a fresh /proc",
            NsStep::Devpts => "mounting a fresh devpts",
            NsStep::Tmpfs => "mounting a tmpfs",
            NsStep::Bind => "a bind mount",
            NsStep::Network => "bringing loopback up",
        })
    }
}

/// The name of Sandy's AppArmor profile (and of its file in `/etc/apparmor.d`) for the
/// binary at `exe`: `sandy` for the packaged `/usr/bin/sandy`, and for any other path a
/// name of its own (`sandy.usr.local.bin.sandy`), so that a binary installed another way
/// never replaces the package's profile.
pub fn apparmor_profile_name(exe: &Path) -> String {
    if exe == Path::new(PACKAGED_BINARY) {
        return "sandy".to_owned();
    }
    let tail: String = exe
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| match c {
            '/' => '.',
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' => c,
            _ => '_',
        })
        .collect();
    format!("sandy.{tail}")
}

/// Where the package installs Sandy.
pub const PACKAGED_BINARY: &str = "/usr/bin/sandy";

/// The AppArmor profile that lets the Sandy binary at `exe` create user namespaces,
/// the way Ubuntu's profile for bwrap does: unconfined apart from the `userns` grant
/// (Sandy confines what it runs itself). `Err` names why the path cannot be put in a
/// profile.
pub fn apparmor_profile(exe: &Path) -> Result<String, ProfilePathError> {
    let path = exe.to_str().ok_or(ProfilePathError::NotUtf8)?;
    if !path.starts_with('/') {
        return Err(ProfilePathError::Relative);
    }
    if path
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return Err(ProfilePathError::Unquotable);
    }
    let name = apparmor_profile_name(exe);
    // AppArmor globbing characters in a path would widen the profile to other files.
    let path = path
        .chars()
        .map(|c| match c {
            '*' | '?' | '[' | ']' | '{' | '}' | '^' | ',' => format!("\\{c}"),
            c => c.to_string(),
        })
        .collect::<String>();
    let attach = if path.contains(' ') {
        format!("\"{path}\"")
    } else {
        path
    };
    Ok(format!(
        "# AppArmor profile for Sandy, installed by `sandy setup` or the sandy package.\n\
         #\n\
         # Lets the sandy binary create user namespaces where AppArmor restricts them\n\
         # (kernel.apparmor_restrict_unprivileged_userns = 1), as Ubuntu's profile for bwrap\n\
         # does. Sandy itself stays unconfined: it confines the command it runs (namespaces,\n\
         # Landlock, seccomp).\n\
         \n\
         abi <abi/4.0>,\n\
         \n\
         include <tunables/global>\n\
         \n\
         profile {name} {attach} flags=(unconfined) {{\n\
         \x20 userns,\n\
         \n\
         \x20 # Site-specific additions and overrides.\n\
         \x20 include if exists <local/{name}>\n\
         }}\n"
    ))
}

/// Why a binary's path cannot be written into an AppArmor profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProfilePathError {
    #[error("the path of the sandy binary is not UTF-8")]
    NotUtf8,
    #[error("the path of the sandy binary is not absolute")]
    Relative,
    #[error("the path of the sandy binary contains a quote, a backslash or a control character")]
    Unquotable,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/usr/bin/sandy";

    fn status(seccomp: u32) -> Option<String> {
        Some(format!(
            "Name:\tsandy\nUid:\t1000\t1000\t1000\t1000\nSeccomp:\t{seccomp}\n\
             Seccomp_filters:\t{seccomp}\n"
        ))
    }

    /// A plain host: every knob permissive, no container, no filter.
    fn host() -> HostFacts {
        HostFacts {
            max_user_namespaces: Some("63219\n".to_owned()),
            cgroup: Some("0::/user.slice/user-1000.slice/session-2.scope\n".to_owned()),
            lsm_label: Some("unconfined\n".to_owned()),
            status: status(0),
            ..HostFacts::default()
        }
    }

    fn ubuntu() -> HostFacts {
        HostFacts {
            apparmor_restrict_unprivileged_userns: Some("1\n".to_owned()),
            ..host()
        }
    }

    fn docker() -> HostFacts {
        HostFacts {
            dockerenv: true,
            cgroup: Some("0::/\n".to_owned()),
            lsm_label: Some("docker-default (enforce)\n".to_owned()),
            status: status(2),
            root: true,
            ..host()
        }
    }

    fn podman() -> HostFacts {
        HostFacts {
            containerenv: true,
            pid1_environ: Some(b"PATH=/usr/bin\0container=podman\0HOME=/root\0".to_vec()),
            lsm_label: Some("containers-default-0.57.4 (enforce)".to_owned()),
            status: status(2),
            ..host()
        }
    }

    fn kubernetes() -> HostFacts {
        HostFacts {
            cgroup: Some(
                "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-3f2a.scope\n"
                    .to_owned(),
            ),
            lsm_label: Some("cri-containerd.apparmor.d (enforce)\n".to_owned()),
            status: status(2),
            ..host()
        }
    }

    fn fail(step: NsStep, errno: i32) -> NsFailure {
        NsFailure { step, errno }
    }

    #[test]
    fn ubuntu_restriction_is_named_with_the_profile_and_the_sysctl_as_last_resort() {
        for step in [NsStep::MapIds, NsStep::Tmpfs, NsStep::Proc, NsStep::Bind] {
            let c = cause(&ubuntu(), fail(step, libc::EPERM));
            assert_eq!(c, Cause::AppArmorRestriction, "{step:?}");
        }
        let c = cause(&ubuntu(), fail(NsStep::CreateUserNs, libc::EACCES));
        assert_eq!(c, Cause::AppArmorRestriction);
        assert_eq!(c.id(), "apparmor_userns_restriction");
        assert!(c
            .line()
            .contains("apparmor_restrict_unprivileged_userns = 1"));
        let fix = c.fix(Path::new(EXE));
        assert!(fix.starts_with("allow them for Sandy alone"), "{fix}");
        assert!(fix.contains("`sudo /usr/bin/sandy setup`"), "{fix}");
        assert!(fix.contains("last resort"), "{fix}");
        let fix = c.fix(Path::new("/home/a b/sandy"));
        assert!(fix.contains("`sudo '/home/a b/sandy' setup`"), "{fix}");
    }

    #[test]
    fn docker_seccomp_apparmor_and_masked_proc_are_told_apart() {
        let c = cause(&docker(), fail(NsStep::CreateUserNs, libc::EPERM));
        assert_eq!(c.id(), "container_seccomp");
        assert!(c.line().contains("Docker container"), "{}", c.line());
        assert!(c
            .fix(Path::new(EXE))
            .contains("docker run --security-opt seccomp=sandy-seccomp.json ..."));
        let c = cause(&docker(), fail(NsStep::Tmpfs, libc::EPERM));
        assert_eq!(c.id(), "container_apparmor");
        assert!(c.line().contains("(docker-default)"), "{}", c.line());
        assert!(c.fix(Path::new(EXE)).contains("apparmor=unconfined"));
        let c = cause(&docker(), fail(NsStep::Proc, libc::EPERM));
        assert_eq!(c.id(), "container_masked_proc");
        assert!(c.fix(Path::new(EXE)).contains("systempaths=unconfined"));
        // The label alone is a Docker marker.
        let label_only = HostFacts {
            dockerenv: false,
            ..docker()
        };
        assert_eq!(label_only.container(), Some(Runtime::Docker));
    }

    #[test]
    fn podman_and_kubernetes_get_their_own_fixes() {
        assert_eq!(podman().container(), Some(Runtime::Podman));
        let marker_only = HostFacts {
            containerenv: false,
            ..podman()
        };
        assert_eq!(marker_only.container(), Some(Runtime::Podman));
        let c = cause(&podman(), fail(NsStep::Proc, libc::EPERM));
        assert_eq!(c.id(), "container_masked_proc");
        assert!(c
            .fix(Path::new(EXE))
            .contains("podman run --security-opt unmask=ALL"));
        let c = cause(&podman(), fail(NsStep::CreateUserNs, libc::EPERM));
        assert!(c.fix(Path::new(EXE)).contains("podman run"));

        assert_eq!(kubernetes().container(), Some(Runtime::Kubernetes));
        let c = cause(&kubernetes(), fail(NsStep::CreateUserNs, libc::EPERM));
        assert_eq!(c.id(), "container_seccomp");
        assert!(c.fix(Path::new(EXE)).contains("seccompProfile"));
        let c = cause(&kubernetes(), fail(NsStep::Proc, libc::EPERM));
        assert!(c.fix(Path::new(EXE)).contains("procMount: Unmasked"));
        let c = cause(&kubernetes(), fail(NsStep::Bind, libc::EPERM));
        assert!(c.fix(Path::new(EXE)).contains("appArmorProfile"));
    }

    #[test]
    fn sysctls_are_named_before_anything_else() {
        let off = HostFacts {
            max_user_namespaces: Some("0\n".to_owned()),
            ..ubuntu()
        };
        let c = cause(&off, fail(NsStep::CreateUserNs, libc::ENOSPC));
        assert_eq!(c, Cause::UsernsDisabled);
        assert!(c
            .fix(Path::new(EXE))
            .contains("user.max_user_namespaces=15000"));
        assert!(off.sysctls().contains("user.max_user_namespaces = 0"));

        let debian = HostFacts {
            unprivileged_userns_clone: Some("0".to_owned()),
            ..host()
        };
        let c = cause(&debian, fail(NsStep::CreateUserNs, libc::EPERM));
        assert_eq!(c, Cause::DebianUsernsClone);
        assert!(c
            .fix(Path::new(EXE))
            .contains("unprivileged_userns_clone=1"));
        // Root is not refused by Debian's knob: something else is the cause.
        let root = HostFacts {
            root: true,
            ..debian
        };
        assert_eq!(
            cause(&root, fail(NsStep::CreateUserNs, libc::EPERM)).id(),
            "unknown"
        );
    }

    #[test]
    fn kernel_limits_and_inherited_filters() {
        let c = cause(&host(), fail(NsStep::CreateUserNs, libc::ENOSPC));
        assert_eq!(c, Cause::UsernsLimit);
        let c = cause(&host(), fail(NsStep::CreateUserNs, libc::EINVAL));
        assert_eq!(c, Cause::NoUsernsKernel);
        let filtered = HostFacts {
            status: status(2),
            ..host()
        };
        let c = cause(&filtered, fail(NsStep::Tmpfs, libc::EPERM));
        assert_eq!(c, Cause::InheritedSeccomp);
        let c = cause(&host(), fail(NsStep::Devpts, libc::EPERM));
        assert_eq!(c.id(), "unknown");
        assert!(
            c.line().contains("mounts inside a user namespace"),
            "{}",
            c.line()
        );
        // A failure that is not a refusal is not blamed on a container's policy.
        let c = cause(&docker(), fail(NsStep::Tmpfs, libc::ENOMEM));
        assert_eq!(c.id(), "container");
    }

    #[test]
    fn a_container_marker_alone_does_not_hide_the_host_restriction() {
        // A VM image made from a container keeps /.dockerenv; with no container profile
        // in force, Ubuntu's restriction is the cause.
        let image = HostFacts {
            dockerenv: true,
            status: status(2),
            ..ubuntu()
        };
        assert_eq!(image.container(), Some(Runtime::Docker));
        let c = cause(&image, fail(NsStep::Bind, libc::EPERM));
        assert_eq!(c, Cause::AppArmorRestriction);
        // Without the restriction, the container (its seccomp filter) is the cause.
        let plain = HostFacts {
            apparmor_restrict_unprivileged_userns: None,
            ..image
        };
        assert_eq!(
            cause(&plain, fail(NsStep::Bind, libc::EPERM)).id(),
            "container_seccomp"
        );
    }

    #[test]
    fn steps_round_trip() {
        for s in [
            NsStep::CreateUserNs,
            NsStep::MapIds,
            NsStep::Unshare,
            NsStep::Proc,
            NsStep::Devpts,
            NsStep::Tmpfs,
            NsStep::Bind,
            NsStep::Network,
        ] {
            assert_eq!(NsStep::from_name(s.name()), Some(s));
        }
    }

    #[test]
    fn the_shipped_profile_is_the_one_for_usr_bin_sandy() {
        let shipped = include_str!("../../../packaging/apparmor/sandy");
        assert_eq!(
            shipped,
            apparmor_profile(Path::new(PACKAGED_BINARY)).unwrap()
        );
        assert_eq!(
            apparmor_profile_name(Path::new("/usr/local/bin/sandy")),
            "sandy.usr.local.bin.sandy"
        );
    }

    #[test]
    fn the_apparmor_profile_for_a_path() {
        let p = apparmor_profile(Path::new("/usr/bin/sandy")).unwrap();
        assert!(p.contains("abi <abi/4.0>,\n"), "{p}");
        assert!(p.contains("include <tunables/global>\n"), "{p}");
        assert!(
            p.contains(
                "profile sandy /usr/bin/sandy flags=(unconfined) {\n  userns,\n\n  \
                 # Site-specific additions and overrides.\n  include if exists <local/sandy>\n}\n"
            ),
            "{p}"
        );
        let p = apparmor_profile(Path::new("/opt/my tools/sandy")).unwrap();
        assert!(
            p.contains("profile sandy.opt.my_tools.sandy \"/opt/my tools/sandy\" flags"),
            "{p}"
        );
        let p = apparmor_profile(Path::new("/opt/v[1]/sandy*")).unwrap();
        assert!(
            p.contains("profile sandy.opt.v_1_.sandy_ /opt/v\\[1\\]/sandy\\* flags"),
            "{p}"
        );
        assert_eq!(
            apparmor_profile(Path::new("sandy")),
            Err(ProfilePathError::Relative)
        );
        assert_eq!(
            apparmor_profile(Path::new("/a\"b")),
            Err(ProfilePathError::Unquotable)
        );
        assert_eq!(
            apparmor_profile(Path::new("/a\nb")),
            Err(ProfilePathError::Unquotable)
        );
    }
}
