//! The protection tier of a run and what the weaker tier keeps of each promise (the
//! policy is made to fit a tier by `rules::tier`).

use serde::{Deserialize, Serialize};

/// Which layers a run gets.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Every layer: namespaces and mounts, `no_new_privs`, Landlock, seccomp.
    #[default]
    Full,
    /// Landlock, seccomp, `no_new_privs` and the supervisor, without namespaces; only
    /// when chosen.
    Landlock,
}

impl Tier {
    /// The name the flag and the dry run use.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Full => "full",
            Tier::Landlock => "landlock",
        }
    }
}

/// What a tier does with one promise of the design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Keeping {
    Kept,
    KeptDifferently,
    Dropped,
}

/// One promise and what the weaker tier does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TierPromise {
    /// A short name of the promise (stable: tests and documents refer to it).
    pub promise: &'static str,
    pub status: Keeping,
    /// How, in one sentence.
    pub how: &'static str,
}

/// The promises of the design (ARCHITECTURE.md sections 1 and 3) in the `landlock` tier.
pub const LANDLOCK_PROMISES: &[TierPromise] = &[
    TierPromise {
        promise: "resolved_before_launch",
        status: Keeping::Kept,
        how: "the same resolution; nothing the run writes is read as policy",
    },
    TierPromise {
        promise: "fail_closed",
        status: Keeping::Kept,
        how: "any layer of this tier that cannot be applied stops the launch; the tier runs only when chosen and says so at every launch",
    },
    TierPromise {
        promise: "whole_tree_irreversible",
        status: Keeping::Kept,
        how: "no_new_privs, every capability dropped, Landlock and seccomp, inherited by every descendant",
    },
    TierPromise {
        promise: "process_tree_ends_with_the_run",
        status: Keeping::KeptDifferently,
        how: "the supervisor is a child subreaper: orphans of the run become its children and are killed at the run's end; if the supervisor itself is killed with SIGKILL, only the target gets its parent-death signal",
    },
    TierPromise {
        promise: "own_processes_only_in_proc",
        status: Keeping::KeptDifferently,
        how: "no PID namespace: the host's processes are listed in /proc, but Landlock refuses ptrace and /proc/PID access (environ, memory, descriptors) to processes outside the run",
    },
    TierPromise {
        promise: "native_feel",
        status: Keeping::KeptDifferently,
        how: "the same terminal, signals, job control and exit status; new terminals (ptys) cannot be opened inside: the host's /dev/pts is not granted",
    },
    TierPromise {
        promise: "sensitive_paths_hidden",
        status: Keeping::KeptDifferently,
        how: "not granted by Landlock: a read grant that covers one is split into grants of its other entries (that directory is then not listable); a writable grant that covers one is refused",
    },
    TierPromise {
        promise: "other_projects_and_home_hidden",
        status: Keeping::Kept,
        how: "never granted",
    },
    TierPromise {
        promise: "protected_paths_read_only",
        status: Keeping::KeptDifferently,
        how: "no read-only mount without a namespace: every protected path inside a writable tree is compared after the run, and a change is reported and restored automatically",
    },
    TierPromise {
        promise: "private_tmp",
        status: Keeping::KeptDifferently,
        how: "/tmp, /var/tmp, /dev/shm and /run are closed (POSIX semaphores fail: Python's process pools need --read-write /dev/shm, which shares the host's); the run gets a per-run directory on the host named by TMPDIR (removed after the run)",
    },
    TierPromise {
        promise: "tmp_size_ceiling",
        status: Keeping::Dropped,
        how: "the per-run directory is not a tmpfs of its own; --max-file-size still bounds each file",
    },
    TierPromise {
        promise: "filtered_start_up_files",
        status: Keeping::KeptDifferently,
        how: "no filtered copy can be shown in place: shell start-up files and npm's configuration are not readable at all; git reads filtered copies of its global and system configuration named by GIT_CONFIG_GLOBAL and GIT_CONFIG_SYSTEM",
    },
    TierPromise {
        promise: "tool_caches_copy_on_write",
        status: Keeping::KeptDifferently,
        how: "no overlay: the host's caches are read-only inside",
    },
    TierPromise {
        promise: "agent_state_files_merged",
        status: Keeping::Dropped,
        how: "no private copy of the agent's state or settings file can be shown in place: inside its writable state directory the agent sees the original (unfiltered), and a change is put back after the run rather than merged",
    },
    TierPromise {
        promise: "shell_history_kept",
        status: Keeping::Dropped,
        how: "the project's history directory lives in Sandy's own state, which only a mount can show inside: no shell or editor history is kept",
    },
    TierPromise {
        promise: "metadata_changes_outside_grants",
        status: Keeping::Dropped,
        how: "chmod, chown, utimes and xattrs outside the writable grants are governed only by file ownership (the full tier remounts everything read-only)",
    },
    TierPromise {
        promise: "block_net",
        status: Keeping::KeptDifferently,
        how: "Landlock refuses every TCP connect and bind (no port granted) and seccomp refuses IPv4, IPv6 and MPTCP sockets, raw and packet sockets; Unix sockets stay",
    },
    TierPromise {
        promise: "host_services_closed",
        status: Keeping::KeptDifferently,
        how: "TCP connects go through the supervisor's connect broker as in the full tier; UDP is not confined (no network namespace), so the host's UDP services are reachable",
    },
    TierPromise {
        promise: "egress_allowlist",
        status: Keeping::Dropped,
        how: "--allow-domain, --net agent and --allow-local-port with --block-net need the network namespace: refused in this tier",
    },
    TierPromise {
        promise: "abstract_sockets_and_signals_scoped",
        status: Keeping::Kept,
        how: "Landlock ABI 6 scopes",
    },
    TierPromise {
        promise: "host_pathname_sockets_closed",
        status: Keeping::KeptDifferently,
        how: "Landlock governs connect() to a pathname Unix socket from ABI 9 only, so every connect() goes to the supervisor, which connects a pathname socket only at or below a grant of the policy (never in a hidden path, no link followed): the session bus, the user's systemd, ssh-agent and container daemons stay closed; a datagram sent to a named socket with sendto() is not gated",
    },
    TierPromise {
        promise: "resource_ceilings",
        status: Keeping::KeptDifferently,
        how: "the run's cgroup and rlimits as in the full tier; without a cgroup, --max-procs counts every process of the user (RLIMIT_NPROC has no user namespace to count in)",
    },
    TierPromise {
        promise: "policy_readable_inside",
        status: Keeping::Dropped,
        how: "no private /run: the policy document is not shown at /run/sandy inside",
    },
];
