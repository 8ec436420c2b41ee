//! The supervisor's side of the resource ceilings (design section 3.8): the run's own
//! cgroup, made before the launch and removed after it, and the one line after the run
//! that names a ceiling the run reached.
//!
//! Where the run's cgroup is made, in order:
//!
//! 1. cgroup v2, under the supervisor's own cgroup, or else its parent, when it may
//!    write there and the `pids` and `memory` controllers can be enabled for its
//!    children: a subtree the user's service manager delegated (systemd's
//!    `Delegate=yes`; Sandy in a leaf of it), or any cgroup of root's;
//! 2. as root, under the root of the v2 hierarchy;
//! 3. for each controller v2 does not offer (a hybrid host, where `pids`, `memory` and
//!    `cpu` are v1 hierarchies): the v1 hierarchy of that controller, under the
//!    supervisor's own cgroup there when it may write it, else (as root) its root.
//!
//! The cgroup is Sandy's own: made by the supervisor, outside the sandbox, under a
//! cgroup the run cannot write (Landlock grants no write under `/sys`, and with a
//! private network the sandbox's `/sys` is a fresh sysfs without the cgroup mounts).
//! Only the bootstrap is moved into it, before it starts the init and the target:
//! every process of the run is counted, the supervisor is not.

use std::io;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;
use sandy_policy::ceilings::{human_size, Available, Ceilings};
use sandy_policy::Mechanism;

use crate::error::SandyError;

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The prefix of every run's cgroup: `sandy-run-PID-XXXXXX`.
const PREFIX: &str = "sandy-run-";
/// CFS period for the CPU ceiling, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// A place the run's cgroup can be made for some controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    kind: Mechanism,
    /// The parent directory of the run's cgroup.
    base: PathBuf,
    /// The controllers (`pids`, `memory`, `cpu`) this place holds.
    controllers: Vec<&'static str>,
    /// v2: the controllers still to be enabled in the base's `cgroup.subtree_control`.
    enable: Vec<&'static str>,
}

/// What this host offers for the run's cgroup.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    places: Vec<Place>,
}

const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

#[allow(clippy::disallowed_methods)] // procfs and cgroupfs, which no run writes
fn read(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
}

fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

impl Offer {
    /// Looks at this host's cgroups: cheap (a few small reads), creates nothing.
    pub fn probe() -> Offer {
        let Ok(own) = read(Path::new("/proc/self/cgroup")) else {
            return Offer::default();
        };
        let root = nix::unistd::geteuid().is_root();
        let mut places = Vec::new();
        let mut left: Vec<&'static str> = CONTROLLERS.to_vec();
        // cgroup v2: the unified hierarchy, alone or beside v1 ones (`unified`).
        let v2_path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(|p| p.trim_start_matches('/').to_owned());
        let v2_mount = [CGROUP_ROOT, "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(PathBuf::from)
            .find(|m| m.join("cgroup.controllers").exists());
        if let (Some(path), Some(mount)) = (v2_path, v2_mount) {
            // Its own cgroup; its parent (a delegated subtree whose leaf holds Sandy:
            // cgroup v2 lets no cgroup with processes give controllers to children);
            // as root, the hierarchy's root.
            let own = mount.join(&path);
            let mut candidates = vec![own.clone()];
            if let Some(parent) = own.parent().filter(|_| !path.is_empty()) {
                candidates.push(parent.to_path_buf());
            }
            if root && !path.is_empty() {
                candidates.push(mount.clone());
            }
            for base in candidates {
                if let Some(place) = v2_place(&base, &mount) {
                    left.retain(|c| !place.controllers.contains(c));
                    places.push(place);
                    break;
                }
            }
        }
        // cgroup v1: one hierarchy per controller v2 does not offer.
        for controller in left {
            let Some((mounted, path)) = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',')
                    .any(|c| c == controller)
                    .then(|| (list.to_owned(), path.trim_start_matches('/').to_owned()))
            }) else {
                continue;
            };
            let Some(mount) = [mounted.as_str(), controller]
                .into_iter()
                .map(|m| Path::new(CGROUP_ROOT).join(m))
                .find(|m| m.join("cgroup.procs").exists())
            else {
                continue;
            };
            let mut candidates = vec![mount.join(&path)];
            if root && !path.is_empty() {
                candidates.push(mount.clone());
            }
            if let Some(base) = candidates.into_iter().find(|b| writable(b)) {
                match places
                    .iter_mut()
                    .find(|p| p.kind == Mechanism::CgroupV1 && p.base == base)
                {
                    // `cpu,cpuacct` and the like: one hierarchy, several controllers.
                    Some(place) => place.controllers.push(controller),
                    None => places.push(Place {
                        kind: Mechanism::CgroupV1,
                        base,
                        controllers: vec![controller],
                        enable: Vec::new(),
                    }),
                }
            }
        }
        Offer { places }
    }

    fn place_of(&self, controller: &str) -> Option<&Place> {
        self.places
            .iter()
            .find(|p| p.controllers.contains(&controller))
    }

    /// What holds the process, memory and CPU ceilings with this offer. `uid`: the
    /// caller's (root is exempt from `RLIMIT_NPROC`).
    pub fn available(&self, uid: u32) -> Available {
        let kind = |c| self.place_of(c).map(|p| p.kind);
        Available {
            pids: kind("pids"),
            memory: kind("memory"),
            cpu: kind("cpu"),
            nproc_rlimit: uid != 0,
        }
    }

    /// One line for `sandy doctor`.
    pub fn describe(&self, uid: u32) -> String {
        if self.places.is_empty() {
            return if uid == 0 {
                "no cgroup can be made: memory and process ceilings are not held (root is \
                 exempt from RLIMIT_NPROC); file-size and /tmp ceilings are"
                    .to_owned()
            } else {
                "no cgroup can be made: processes held by RLIMIT_NPROC, memory only by the \
                 OOM killer's preference; run Sandy in a delegated cgroup (systemd-run \
                 --user -p Delegate=yes) for the kernel's own accounting"
                    .to_owned()
            };
        }
        self.places
            .iter()
            .map(|p| {
                format!(
                    "{} ({}) under {}",
                    match p.kind {
                        Mechanism::CgroupV2 => "cgroup v2",
                        _ => "cgroup v1",
                    },
                    p.controllers.join(", "),
                    p.base.display()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Where the run's cgroup would be made (the dry run).
    pub fn where_made(&self) -> Option<String> {
        self.places.first().map(|p| {
            p.base
                .join(format!("{PREFIX}PID-XXXXXX"))
                .display()
                .to_string()
        })
    }

    /// The run's cgroup made in every place that holds a ceiling, before the policy is
    /// known: its directories, with the cpu controller only when `cpu` (a CPU ceiling
    /// was asked for), and no limit yet. The launch moves the bootstrap in at once,
    /// beside the policy's resolution, and [`Early::limit`] writes the limits before the
    /// bootstrap starts anything.
    pub fn make_dirs(mut self, cpu: bool) -> Early {
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            crate::rundir::random_suffix()
        );
        let mut made = Vec::new();
        let mut kept = Vec::new();
        // The cpu controller only for a CPU ceiling.
        for place in &mut self.places {
            if !cpu {
                place.controllers.retain(|c| *c != "cpu");
                place.enable.retain(|c| *c != "cpu");
            }
        }
        self.places.retain(|p| !p.controllers.is_empty());
        for place in std::mem::take(&mut self.places) {
            match make_one(&place, &name) {
                Ok(dir) => {
                    made.push(Made {
                        kind: place.kind,
                        dir,
                        controllers: place.controllers.clone(),
                    });
                    kept.push(place);
                }
                Err(_) => continue,
            }
        }
        self.places = kept;
        Early {
            offer: self,
            run: RunCgroup { made },
        }
    }
}

/// The run's cgroup made before the policy is known ([`Offer::make_dirs`]).
pub struct Early {
    offer: Offer,
    run: RunCgroup,
}

impl Early {
    /// The directories made, to move the bootstrap in ([`RunCgroup::adopt_in_background`]).
    pub fn cgroup(&self) -> Option<&RunCgroup> {
        (!self.run.made.is_empty()).then_some(&self.run)
    }

    /// Once the policy is known: records what holds each ceiling of
    /// `ceilings` and writes the limits. A ceiling asked for that nothing here holds
    /// refuses the run; so does a limit that cannot be written (the cgroup is then left
    /// to be removed once its processes are gone: by this run's end, or a later run's
    /// sweep when this one was killed).
    pub fn limit(
        &mut self,
        ceilings: &mut Ceilings,
        uid: u32,
    ) -> Result<Option<RunCgroup>, SandyError> {
        ceilings
            .enforce_with(&self.offer.available(uid))
            .map_err(SandyError::Ceiling)?;
        if self.run.made.is_empty() {
            return Ok(None);
        }
        ceilings.cgroup = self.run.made.first().map(|m| m.dir.display().to_string());
        self.run.write_limits(ceilings)?;
        // From here on the run's own end removes it ([`RunCgroup::finish`]).
        Ok(Some(RunCgroup {
            made: std::mem::take(&mut self.run.made),
        }))
    }
}

/// A launch refused before its cgroup was handed on: the directories are removed, once
/// the bootstrap is gone (the launch drops the bootstrap first). One that still holds a
/// process is left to a later run's sweep.
impl Drop for Early {
    fn drop(&mut self) {
        self.run.remove_if_empty();
    }
}

/// A v2 place at `base` (in the hierarchy mounted at `mount`), if the run's cgroup can
/// be made there with at least the `pids` and `memory` controllers.
fn v2_place(base: &Path, mount: &Path) -> Option<Place> {
    if !writable(base) {
        return None;
    }
    let offered = read(&base.join("cgroup.controllers")).ok()?;
    let enabled = read(&base.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |text: &str, c: &str| text.split_whitespace().any(|w| w == c);
    let controllers: Vec<&'static str> = CONTROLLERS
        .into_iter()
        .filter(|c| has(&offered, c))
        .collect();
    if !controllers.contains(&"pids") || !controllers.contains(&"memory") {
        return None;
    }
    let enable: Vec<&'static str> = controllers
        .iter()
        .copied()
        .filter(|c| !has(&enabled, c))
        .collect();
    // Enabling a controller for the children of a cgroup with processes of its own is
    // refused (EBUSY), but at the root.
    if !enable.is_empty()
        && base != mount
        && !read(&base.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
    {
        return None;
    }
    Some(Place {
        kind: Mechanism::CgroupV2,
        base: base.to_path_buf(),
        controllers,
        enable,
    })
}

#[allow(clippy::disallowed_methods)] // Sandy's own cgroup, under one the run cannot write
fn write(path: &Path, text: &str) -> Result<(), SandyError> {
    std::fs::write(path, text).map_err(|source| SandyError::File {
        step: "cannot write the run's cgroup file",
        path: path.to_path_buf(),
        source,
    })
}

/// Removes the cgroups of earlier runs whose supervisor is gone (killed before it could
/// remove its own); one still holding a process stays (rmdir refuses).
#[allow(clippy::disallowed_methods)] // Sandy's own cgroups, under one no run can write
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let gone =
            nix::sys::signal::kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[allow(clippy::disallowed_methods)] // Sandy's own cgroup, under one the run cannot write
fn make_one(place: &Place, name: &str) -> Result<PathBuf, SandyError> {
    sweep(&place.base);
    if !place.enable.is_empty() {
        let text: Vec<String> = place.enable.iter().map(|c| format!("+{c}")).collect();
        write(&place.base.join("cgroup.subtree_control"), &text.join(" "))?;
    }
    let dir = place.base.join(name);
    std::fs::create_dir(&dir).map_err(|source| SandyError::File {
        step: "cannot make the run's cgroup",
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// One directory of the run's cgroup.
#[derive(Debug)]
struct Made {
    kind: Mechanism,
    dir: PathBuf,
    controllers: Vec<&'static str>,
}

/// The run's cgroup (one directory, or one per v1 hierarchy): removed by
/// [`RunCgroup::finish`] once the run is over, or on drop.
#[derive(Debug)]
pub struct RunCgroup {
    made: Vec<Made>,
}

impl RunCgroup {
    fn write_limits(&self, c: &Ceilings) -> Result<(), SandyError> {
        for m in &self.made {
            let v2 = m.kind == Mechanism::CgroupV2;
            let file = |name: &str| m.dir.join(name);
            if m.controllers.contains(&"pids") {
                write(&file("pids.max"), &c.max_procs.value.to_string())?;
            }
            if m.controllers.contains(&"memory") {
                let bytes = c.max_memory.value.to_string();
                if v2 {
                    write(&file("memory.max"), &bytes)?;
                    // The ceiling holds memory and swap together: none of it in swap.
                    if file("memory.swap.max").exists() {
                        write(&file("memory.swap.max"), "0")?;
                    }
                } else {
                    write(&file("memory.limit_in_bytes"), &bytes)?;
                    // With swap accounting, memory and swap together.
                    if file("memory.memsw.limit_in_bytes").exists() {
                        write(&file("memory.memsw.limit_in_bytes"), &bytes)?;
                    }
                }
            }
            if let (Some(cpu), true) = (c.cpu, m.controllers.contains(&"cpu")) {
                let quota = (cpu.value * CPU_PERIOD_US / 1000).max(1000);
                if v2 {
                    write(&file("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
                } else {
                    write(&file("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                    write(&file("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Moves `pid` (the bootstrap, before it starts the init and the target) into the
    /// run's cgroup: everything it starts is counted there.
    pub fn adopt(&self, pid: Pid) -> Result<(), SandyError> {
        for m in &self.made {
            write(&m.dir.join("cgroup.procs"), &pid.as_raw().to_string())?;
        }
        Ok(())
    }

    /// [`Cgroup::adopt`] in a thread of its own, joined by [`Adopting::wait`] before the
    /// bootstrap is given its manifest (it starts nothing before). A move into a v1
    /// hierarchy waits for an RCU grace period in the kernel (10 to 35 ms here): the
    /// rest of the launch is prepared meanwhile.
    pub fn adopt_in_background(&self, pid: Pid) -> Adopting {
        let files: Vec<PathBuf> = self
            .made
            .iter()
            .map(|m| m.dir.join("cgroup.procs"))
            .collect();
        let text = pid.as_raw().to_string();
        let thread = std::thread::Builder::new()
            .name("cgroup".to_owned())
            .spawn(move || {
                for file in &files {
                    write(file, &text)?;
                }
                Ok(())
            });
        match thread {
            Ok(t) => Adopting::Running(t),
            // No thread: moved here, before the launch goes on.
            Err(_) => Adopting::Done(self.adopt(pid)),
        }
    }

    /// After the run, once every process of it is reaped: the ceilings the run
    /// reached, one line each, then the cgroup removed.
    pub fn finish(self, c: &Ceilings) -> Vec<String> {
        let mut lines = Vec::new();
        for m in &self.made {
            let file = |name: &str| read(&m.dir.join(name)).unwrap_or_default();
            if m.controllers.contains(&"pids") {
                let refused = counter(&file("pids.events"), "max");
                if refused > 0 {
                    lines.push(format!(
                        "the run reached its process ceiling ({} processes and threads): \
                         the kernel refused {refused} fork{}; raise it with --max-procs N",
                        c.max_procs.value,
                        if refused == 1 { "" } else { "s" },
                    ));
                }
            }
            if m.controllers.contains(&"memory") {
                let killed = if m.kind == Mechanism::CgroupV2 {
                    counter(&file("memory.events"), "oom_kill")
                } else {
                    counter(&file("memory.oom_control"), "oom_kill")
                };
                if killed > 0 {
                    lines.push(format!(
                        "the run reached its memory ceiling ({}): the kernel's OOM killer \
                         ended {killed} of its processes; raise it with --max-memory SIZE",
                        human_size(c.max_memory.value),
                    ));
                }
            }
        }
        self.remove();
        lines
    }

    /// Removes the directories that hold no process (one that still does is left for
    /// the sweep of a later run).
    #[allow(clippy::disallowed_methods)] // Sandy's own cgroup, under one the run cannot write
    fn remove_if_empty(&self) {
        for m in &self.made {
            let _ = std::fs::remove_dir(&m.dir);
        }
    }

    /// Removes the run's cgroup (empty once the run's processes are reaped; a process
    /// that is still exiting is waited for, briefly).
    #[allow(clippy::disallowed_methods)] // Sandy's own cgroup, under one the run cannot write
    fn remove(&self) {
        for m in &self.made {
            for _ in 0..100 {
                match std::fs::remove_dir(&m.dir) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    _ => break,
                }
            }
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`max 3`, `oom_kill 1`).
fn counter(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The file-size ceiling, when the command's status says a process was stopped by it
/// (`SIGXFSZ`: killed by it, or a shell's status for a child it killed).
pub fn file_size_line(status: u8, c: &Ceilings) -> Option<String> {
    (i32::from(status) == 128 + nix::libc::SIGXFSZ).then(|| {
        format!(
            "the run's command ended with SIGXFSZ: a process wrote past the file-size \
             ceiling ({}); raise it with --max-file-size SIZE",
            human_size(c.max_file_size.value)
        )
    })
}

/// The run's private temporary directories, held open (`O_PATH`) from the moment the
/// target runs, so that after the run Sandy can say one was full.
pub struct TmpWatch {
    dirs: Vec<(&'static str, std::os::fd::OwnedFd)>,
}

impl TmpWatch {
    /// Opens the private temporary directories through the target's `/proc` entry (its
    /// root is the sandbox's). The target's entry opens once it has executed its
    /// program (before, it is not dumpable to an unprivileged supervisor); tried for a
    /// few milliseconds, then given up (no line after the run).
    #[allow(clippy::disallowed_methods)] // procfs: the run's mount points, only statfs'd
    pub fn open(target: Pid) -> TmpWatch {
        let mut dirs = Vec::new();
        for (shown, inside) in [
            ("/tmp", "tmp"),
            ("/var/tmp", "var/tmp"),
            ("/dev/shm", "dev/shm"),
        ] {
            let path = PathBuf::from(format!("/proc/{}/root/{inside}", target.as_raw()));
            for _ in 0..50 {
                match nix::fcntl::open(
                    &path,
                    nix::fcntl::OFlag::O_PATH
                        | nix::fcntl::OFlag::O_DIRECTORY
                        | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                ) {
                    Ok(fd) => {
                        dirs.push((shown, fd));
                        break;
                    }
                    Err(nix::errno::Errno::EACCES | nix::errno::Errno::EPERM) => {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err(_) => break,
                }
            }
        }
        TmpWatch { dirs }
    }

    /// A line for each private temporary directory that is full.
    pub fn lines(&self, c: &Ceilings) -> Vec<String> {
        self.dirs
            .iter()
            .filter(|(_, fd)| {
                nix::sys::statfs::fstatfs(fd)
                    .is_ok_and(|s| s.blocks() > 0 && s.blocks_available() == 0)
            })
            .map(|(shown, _)| {
                format!(
                    "the run filled its private {shown} ({}): writes there failed with \
                     ENOSPC; raise it with --max-tmp SIZE",
                    human_size(c.max_tmp.value)
                )
            })
            .collect()
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The machine's memory (`MemTotal`), for the default ceilings.
pub fn memory_total() -> Option<u64> {
    let info = read(Path::new("/proc/meminfo")).ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The bootstrap's move into the run's cgroup, under way ([`RunCgroup::adopt_in_background`]).
pub enum Adopting {
    Running(std::thread::JoinHandle<Result<(), SandyError>>),
    Done(Result<(), SandyError>),
}

impl Adopting {
    /// Waits for the move; its failure is the launch's.
    pub fn wait(self) -> Result<(), SandyError> {
        match self {
            Adopting::Running(t) => t.join().unwrap_or_else(|_| {
                Err(SandyError::Io {
                    step: "cannot move the run into its cgroup",
                    source: std::io::Error::other("the thread that moved it failed"),
                })
            }),
            Adopting::Done(r) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_key() {
        assert_eq!(counter("max 3\n", "max"), 3);
        assert_eq!(
            counter("low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\n", "oom_kill"),
            2
        );
        assert_eq!(
            counter("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "oom_kill"),
            1
        );
        assert_eq!(counter("", "max"), 0);
    }

    #[test]
    fn sigxfsz_names_the_file_size_ceiling() {
        let c = Ceilings::resolve(&Default::default());
        assert!(file_size_line(153, &c).is_some_and(|l| l.contains("--max-file-size")));
        assert!(file_size_line(1, &c).is_none());
    }
}
