//! The supervisor's side of the weaker `landlock` tier (`sandy run --tier landlock`): the
//! line every launch in it prints, and the end of the run's process tree, which no PID
//! namespace holds (the supervisor is a child subreaper instead).

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// The one line every launch in the `landlock` tier prints, quiet or not: the tier by
/// name, what it is, and, where the full tier would work here, that it would.
pub fn announce() {
    let here = if namespaces_work() {
        "; namespaces work here, so without --tier the full tier would protect more"
    } else {
        ""
    };
    say!(
        "tier landlock (chosen with --tier landlock): Landlock, seccomp and the supervisor, \
         without namespaces; protected paths are restored after the run instead of \
         read-only, and what else it keeps and drops is in docs/tiers.md{here}"
    );
}

/// How the `sandy` binary asks whether this machine can make a run's user and mount
/// namespaces (its own hidden probe, in a child: [`set_namespace_probe`]). A library
/// caller has no such program, so the line then omits the comparison.
static NAMESPACE_PROBE: std::sync::OnceLock<fn() -> bool> = std::sync::OnceLock::new();

/// Sets the probe [`announce`] uses (the `sandy` binary sets its own at start).
pub fn set_namespace_probe(probe: fn() -> bool) {
    let _ = NAMESPACE_PROBE.set(probe);
}

/// Whether this machine can make a run's user and mount namespaces, when a probe is set.
fn namespaces_work() -> bool {
    NAMESPACE_PROBE.get().is_some_and(|probe| probe())
}

/// What the full tier keeps read-only, which the `landlock` tier restores after the run:
/// every read-only protection that existed at launch or would have had a placeholder
/// (everything below each, for a directory). The rest of what the check after the run
/// reports (a repository created in the run, the agent's memory) is only reported, as in
/// the full tier.
pub fn kept_read_only(policy: &sandy_policy::ResolvedPolicy) -> Vec<std::path::PathBuf> {
    policy
        .protections
        .iter()
        .filter(|p| {
            p.kind == sandy_policy::ProtectionKind::ReadOnly
                && (p.exists || p.placeholder.is_some())
        })
        .map(|p| p.path.clone())
        .collect()
}

/// Kills every process left of the run and reaps it: with the supervisor a child
/// subreaper, every orphan of the run (a daemon, a double fork, a process in a session of
/// its own) has become its child. Repeated until none is left, since the children of a
/// killed process become the supervisor's in turn.
pub fn end_descendants() {
    let me = std::process::id();
    // Bounded: each pass kills every child there is; a run that forks faster than that
    // is held by its process ceiling.
    for _ in 0..1000 {
        let children = children_of(me);
        if children.is_empty() {
            return;
        }
        for pid in &children {
            let _ = kill(*pid, Signal::SIGKILL);
        }
        for pid in children {
            while let Err(nix::errno::Errno::EINTR) = waitpid(pid, None) {}
        }
    }
}

/// The pids whose parent is `parent`, from `/proc/PID/stat`.
#[allow(clippy::disallowed_methods)] // procfs, which no run writes
fn children_of(parent: u32) -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if parent_in_stat(&stat) == Some(parent) {
            out.push(Pid::from_raw(pid));
        }
    }
    out
}

/// The parent pid of a `/proc/PID/stat` line: the fourth field, counted after the
/// command name, which ends at the last `)` (a name may hold spaces and parentheses).
fn parent_in_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_command_name() {
        assert_eq!(parent_in_stat("42 (sh) S 7 42 42 0"), Some(7));
        assert_eq!(parent_in_stat("42 (a) b) c) R 9 1"), Some(9));
        assert_eq!(parent_in_stat("42 (x"), None);
    }
}
