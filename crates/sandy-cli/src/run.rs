//! `sandy run`: the supervisor. Resolves the policy, hands the manifest to a fresh
//! bootstrap on an inherited descriptor, waits, forwards signals, returns the status.

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{dup, Pid};
use sandy_linux::relay::{receive_listeners, spawn_relay};
use sandy_linux::sys::ignore_signal;
use sandy_policy::{
    gitlinks, resolve, DryRunDocument, LaunchManifest, RealFs, RestoredSignal, RunRequest,
    ValidatedManifest,
};

use crate::args::RunArgs;
use crate::error::{signal_status, SandyError};
use crate::host;
use crate::views::PreparedViews;

/// Signals forwarded to the target.
const FORWARDED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

pub fn run(args: RunArgs) -> Result<u8, SandyError> {
    let host = host::gather()?;
    let tmp_base = host
        .var("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));

    let mut request = RunRequest {
        command: args.command,
        read: args.read,
        read_write: args.read_write,
        // Replaced by the real directory below; a dry run creates nothing.
        private_tmp: tmp_base.join("sandy-XXXXXX"),
        block_net: args.block_net,
        allow_local_ports: args.allow_local_port,
        numbat_collector: args.numbat_collector,
        profile: args.profile,
    };

    if args.dry_run {
        let policy = resolve(&request, &host, &RealFs)?;
        announce(&policy);
        let manifest = ValidatedManifest::new(LaunchManifest::from_policy(
            &policy,
            host.supervisor_pid,
            vec![],
        ))?;
        let plan = sandy_linux::plan(&manifest, &sandy_linux::probe())?;
        let doc = DryRunDocument::new(&policy, plan.landlock_abi);
        drop(plan);
        let json = serde_json::to_string_pretty(&doc).map_err(|e| SandyError::Io {
            step: "cannot render the dry-run document",
            source: e.into(),
        })?;
        return print_document(&json);
    }

    let private_tmp = PrivateTmp::create(&tmp_base)?;
    request.private_tmp = private_tmp.path.clone();
    let policy = resolve(&request, &host, &RealFs)?;
    announce(&policy);

    // Block the signals we wait for or forward before anything is spawned, so none is
    // lost; ignore the terminal's SIGINT and SIGQUIT (the target gets them directly).
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    for sig in FORWARDED {
        waited.add(sig);
    }
    let sys = |step| move |source| SandyError::Sys { step, source };
    let mut old_mask = SigSet::empty();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&waited), Some(&mut old_mask))
        .map_err(sys("cannot block signals"))?;
    let mut restore = Vec::new();
    for (sig, restored) in [
        (Signal::SIGINT, RestoredSignal::Interrupt),
        (Signal::SIGQUIT, RestoredSignal::Quit),
    ] {
        let was_ignored = ignore_signal(sig).map_err(sys("cannot ignore terminal signals"))?;
        if !was_ignored {
            restore.push(restored);
        }
    }

    // Copies the sandbox sees in place of host files (filtered or private).
    let views = PreparedViews::prepare(&policy.views, &tmp_base)?;
    let layers = crate::cache::prepare_layers(&policy.caches)?;
    let mut launch = LaunchManifest::from_policy(&policy, host.supervisor_pid, restore);
    launch.views = views.manifest_views();
    launch.overlays = layers.manifest_overlays();
    let manifest = ValidatedManifest::new(launch)?;
    // Fail before spawning anything if this kernel cannot carry the policy. The rules
    // themselves are built once, by the bootstrap.
    sandy_linux::check_support(&sandy_linux::probe())?;
    let bytes = manifest.encode()?;

    let ports: Vec<u16> = policy.local_ports.iter().map(|p| p.port).collect();
    let started = std::time::SystemTime::now();
    let status = spawn_and_wait(&bytes, &ports, &waited);
    drop(private_tmp);
    drop(views);
    drop(layers);
    audit_absent_protections(&policy);
    audit_nested_repositories(&policy.working_directory, started);
    status
}

/// Prints the dry-run document. A reader that stops early (`| head`) is not an error:
/// the rest of the document is simply not wanted.
fn print_document(json: &str) -> Result<u8, SandyError> {
    match crate::print_line(json) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(source) => Err(SandyError::Io {
            step: "cannot write the dry-run document",
            source,
        }),
    }
}

/// Largest index file the post-run check reads.
const AUDIT_MAX_INDEX: u64 = 256 * 1024 * 1024;

/// A repository planted (or changed) inside the project and registered as a submodule
/// would be entered by `git status` outside the sandbox and could run code from its
/// config. Such paths cannot be protected in advance; after a run that changed the
/// project's index or `.gitmodules`, check every submodule (gitlink) the index lists and
/// report those whose git directory changed during the run.
fn audit_nested_repositories(project: &std::path::Path, started: std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let Ok(since) = started.duration_since(std::time::UNIX_EPOCH) else {
        return;
    };
    let changed_since = |meta: &std::fs::Metadata| {
        let ctime = std::time::Duration::new(
            u64::try_from(meta.ctime()).unwrap_or(0),
            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
        );
        ctime >= since
    };
    let changed =
        |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| changed_since(&m));
    let index_path = project.join(".git/index");
    if !changed(&index_path) && !changed(&project.join(".gitmodules")) {
        return;
    }
    let too_large = std::fs::metadata(&index_path).is_ok_and(|m| m.len() > AUDIT_MAX_INDEX);
    let index = if too_large {
        None
    } else {
        std::fs::read(&index_path).ok()
    };
    let sha256 = std::fs::read_to_string(project.join(".git/config"))
        .is_ok_and(|c| c.to_ascii_lowercase().contains("objectformat = sha256"));
    let links = index.and_then(|i| gitlinks(&i, if sha256 { 32 } else { 20 }).ok());
    let Some(links) = links else {
        eprintln!(
            "sandy: warning: the run changed the git index, which Sandy could not read to \
             check for planted submodules; review them before running git outside the sandbox"
        );
        return;
    };
    for link in links {
        let dotgit = project
            .join(std::ffi::OsStr::from_bytes(&link))
            .join(".git");
        if [dotgit.clone(), dotgit.join("config"), dotgit.join("hooks")]
            .iter()
            .any(|p| changed(p))
        {
            eprintln!(
                "sandy: warning: {} was created or changed inside the sandbox; a git \
                 command outside may run code from it, review it first",
                dotgit.display()
            );
        }
    }
}

/// One stderr line for a detected profile, and the profile's notices.
fn announce(policy: &sandy_policy::ResolvedPolicy) {
    if policy.profile.detected {
        eprintln!(
            "sandy: using profile '{}' (override with --profile)",
            policy.profile.name
        );
    }
    for notice in &policy.notices {
        eprintln!("sandy: {notice}");
    }
}

/// A protected path that did not exist at launch could not carry a mount. If the run
/// created it, say so, before the user's next command outside the sandbox trusts it.
fn audit_absent_protections(policy: &sandy_policy::ResolvedPolicy) {
    for p in policy.protections.iter().filter(|p| !p.exists) {
        if std::fs::symlink_metadata(&p.path).is_ok() {
            eprintln!(
                "sandy: warning: {} did not exist at launch and was created inside the sandbox; \
                 review it before anything outside the sandbox uses it",
                p.path.display()
            );
        }
    }
}

/// Writes the manifest into a sealed memfd, spawns the bootstrap with it as an inherited
/// descriptor, and waits for the target.
fn spawn_and_wait(manifest: &[u8], ports: &[u16], waited: &SigSet) -> Result<u8, SandyError> {
    let sys = |step| move |source| SandyError::Sys { step, source };
    let io = |step| move |source| SandyError::Io { step, source };

    let memfd = memfd_create(
        "sandy-manifest",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(sys("cannot create the manifest descriptor"))?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(manifest)
        .map_err(io("cannot write the launch manifest"))?;
    file.seek(SeekFrom::Start(0))
        .map_err(io("cannot rewind the launch manifest"))?;
    fcntl(
        &file,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SEAL
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE,
        ),
    )
    .map_err(sys("cannot seal the launch manifest"))?;
    // A duplicate without close-on-exec is what the bootstrap inherits. The supervisor is
    // single-threaded, so no other child can inherit it in between.
    let inherited = dup(&file).map_err(sys("cannot pass the launch manifest"))?;

    let mut child = Command::new("/proc/self/exe");
    child
        .arg0("sandy")
        .arg("__bootstrap")
        .arg("--manifest-fd")
        .arg(inherited.as_raw_fd().to_string())
        // The bootstrap runs Sandy's own code before the sandbox exists: nothing from the
        // caller's environment (LD_PRELOAD and friends) may reach it. The target's
        // environment travels in the manifest.
        .env_clear();
    // Local-port grants: a socket pair over which the bootstrap hands back the listeners
    // it creates inside the sandbox's network namespace.
    let relay = if ports.is_empty() {
        None
    } else {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(sys("cannot create the local-port relay channel"))?;
        let theirs = dup(&theirs).map_err(sys("cannot pass the local-port relay channel"))?;
        child.arg("--relay-fd").arg(theirs.as_raw_fd().to_string());
        Some((ours, theirs))
    };
    // Orphans of the sandbox are reparented to the supervisor, which ends them when the
    // target exits.
    nix::sys::prctl::set_child_subreaper(true).map_err(sys("cannot become a subreaper"))?;
    let child = child
        .spawn()
        .map_err(io("cannot start the sandbox bootstrap"))?;
    drop(inherited);
    drop(file);
    if let Some((ours, theirs)) = relay {
        drop(theirs);
        if let Some(listeners) = receive_listeners(&ours, ports.len())
            .map_err(io("cannot receive the local-port listeners"))?
        {
            for (port, listener) in listeners {
                spawn_relay(port, listener).map_err(io("cannot start the local-port relay"))?;
            }
        }
    }

    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    loop {
        let sig = waited.wait().map_err(sys("cannot wait for signals"))?;
        if sig != Signal::SIGCHLD {
            // The target may already be gone; its exit arrives as SIGCHLD.
            let _ = kill(pid, sig);
            continue;
        }
        // Reap everything that ended: the target, or orphans of the sandbox reparented to
        // us (the supervisor is their subreaper).
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == pid => {
                    end_sandbox(ports);
                    return Ok(u8::try_from(code).unwrap_or(1));
                }
                Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                    end_sandbox(ports);
                    return Ok(signal_status(sig as i32));
                }
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => break,
                Ok(_) => continue,
                Err(source) => {
                    return Err(SandyError::Sys {
                        step: "cannot wait for the target",
                        source,
                    })
                }
            }
        }
    }
}

/// How long, at most, the relay may take after the target's exit to pass on what the
/// sandbox sent through local-port connections.
const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// After the target's exit: ends what it left running, then lets the local-port relay
/// deliver what the sandbox already sent (the relay threads end with this process).
fn end_sandbox(ports: &[u16]) {
    end_leftovers();
    if !ports.is_empty() && !sandy_linux::relay::finish_uploads(UPLOAD_GRACE) {
        eprintln!(
            "sandy: data the sandbox sent through a local-port relay was still being \
             delivered after {} s; the rest is dropped",
            UPLOAD_GRACE.as_secs()
        );
    }
}

/// How many rounds of killing left-over processes are attempted.
const LEFTOVER_ROUNDS: usize = 64;

/// When the target has exited, ends every process the sandbox left running (background
/// jobs, daemons): they were reparented to the supervisor, their subreaper, and would
/// otherwise keep running with the sandbox's access, or take over the terminal.
fn end_leftovers() {
    for _ in 0..LEFTOVER_ROUNDS {
        let children = child_pids();
        if children.is_empty() {
            break;
        }
        for child in &children {
            let _ = kill(*child, Signal::SIGKILL);
        }
        for child in &children {
            let _ = waitpid(*child, None);
        }
    }
}

/// The supervisor's children, from `/proc/self/task/*/children`.
fn child_pids() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .map(Pid::from_raw)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The private per-run temporary directory (mode 0700), removed when dropped even if the
/// target left unwritable directories behind.
struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    fn create(base: &Path) -> Result<Self, SandyError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sandy-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .map_err(|source| SandyError::Io {
                step: "cannot create the private temporary directory",
                source,
            })?;
        Ok(PrivateTmp { path: dir.keep() })
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.path).is_err() {
            make_writable(&self.path);
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                eprintln!(
                    "sandy: cannot remove the private temporary directory {}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&entry.path());
            }
        }
    }
}
