//! The bootstrap of a run: the process that applies the sandbox and starts the target
//! (see [`sandy_linux::launch`] for the process tree of a run).
//!
//! `sandy run` forks it from the supervisor as soon as it knows that it will launch
//! ([`Pending::fork`]), before it resolves the policy: the supervisor is single-threaded
//! and small then, and only the channel to the supervisor crosses over. While the
//! supervisor resolves, the bootstrap makes the run's namespaces
//! ([`sandy_linux::namespaces::enter_ahead`]), then waits for the launch manifest, which
//! the supervisor sends in its wire form ([`Pending::launch`]); the bootstrap bounds,
//! parses and validates it like any other. Before the manifest, the supervisor may say
//! which cache overlays' layers it has prepared ([`Pending::overlays_ahead`]), which the
//! bootstrap then mounts ahead, detached, for the launch to attach if the manifest asks
//! for exactly those. `sandy __bootstrap --manifest-fd N` is the same launch for a
//! manifest on an inherited descriptor.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use nix::sys::signal::Signal;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use sandy_linux::sys::process::{fork_bootstrap, BootstrapFork, OneThread};
use sandy_policy::{
    ManifestOverlay, ValidatedManifest, MAX_MANIFEST_BYTES, MAX_POLICY_DOCUMENT_BYTES,
};

use crate::error::SandyError;

/// A bootstrap forked ahead of its launch: it makes the run's namespaces and waits for
/// the manifest. Dropped before [`Pending::launch`] (the run ends before its launch: a
/// refusal, an error), it is killed and reaped, so that no process of Sandy's is left.
#[derive(Debug)]
pub struct Pending {
    pid: Pid,
    channel: Option<OwnedFd>,
    /// The work directories of the overlays it was told to mount ahead: removed, once it
    /// is gone, when the run ends before its launch.
    work_dirs: Vec<PathBuf>,
}

impl Pending {
    /// Forks the bootstrap. `observe`: the target installs the refusal observer
    /// (`--explain`); `tier`: the tier it prepares for (the `landlock` tier makes no
    /// namespace). The caller must be single-threaded (checked).
    pub fn fork(observe: bool, tier: sandy_policy::Tier) -> Result<Pending, SandyError> {
        let sys = |step| move |source| SandyError::Sys { step, source };
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(sys("cannot create the channel to the bootstrap"))?;
        let one = OneThread::check().map_err(|_| SandyError::Sys {
            step: "cannot fork the bootstrap from a multi-threaded supervisor",
            source: nix::errno::Errno::EDEADLK,
        })?;
        let supervisor = std::process::id();
        let cpus = sandy_linux::namespaces::allowed_cpus();
        match fork_bootstrap(&one, theirs).map_err(sys("cannot start the sandbox bootstrap"))? {
            BootstrapFork::Child(channel, one) => {
                ahead(channel, observe, tier, supervisor, cpus, one)
            }
            BootstrapFork::Parent(pid) => {
                // It runs beside the supervisor, which goes on resolving, until the
                // manifest comes.
                sandy_linux::namespaces::move_elsewhere(pid);
                Ok(Pending {
                    pid,
                    channel: Some(ours),
                    work_dirs: Vec::new(),
                })
            }
        }
    }

    /// The bootstrap's pid (the supervisor moves it into the run's cgroup before the
    /// launch).
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Sends the bootstrap the manifest in its wire form (`encoded`, within its bound),
    /// then the sandbox's policy document that `document` renders meanwhile (the
    /// bootstrap decodes the manifest while it is rendered), each on a memory file: it
    /// then builds the sandbox and starts the target. The bootstrap's pid and the
    /// supervisor's end of the channel. If `document` fails, the bootstrap, which waits
    /// for it before it changes anything, is killed and reaped.
    pub fn launch(
        mut self,
        encoded: &[u8],
        document: impl FnOnce() -> Result<Option<Vec<u8>>, SandyError>,
    ) -> Result<(Pid, OwnedFd), SandyError> {
        let step = "cannot hand the manifest to the bootstrap";
        let channel = self.channel.take().ok_or_else(|| SandyError::Io {
            step,
            source: std::io::Error::from(std::io::ErrorKind::NotConnected),
        })?;
        // On any failure below, `self` is dropped: the bootstrap is killed and reaped.
        send_file(&channel, encoded).map_err(|source| SandyError::Io { step, source })?;
        let document = document()?;
        let sent = match &document {
            Some(document) => send_file(&channel, document),
            None => sandy_linux::relay::send_fds(&channel, &[]),
        };
        sent.map_err(|source| SandyError::Io {
            step: "cannot hand the policy document to the bootstrap",
            source,
        })?;
        let pid = self.pid;
        // Disarmed: the run now owns the bootstrap and the work directories (later runs
        // remove them).
        drop(std::mem::take(&mut self.work_dirs));
        std::mem::forget(self);
        Ok((pid, channel))
    }

    /// Tells the bootstrap the cache overlays whose layers are prepared, so that it
    /// mounts them while the launch is prepared ([`sandy_linux::overlay::Premounted::add`]),
    /// beside those it was told before; the manifest still decides which are used.
    /// Nothing is sent when there are none, or too many to say in one message.
    pub fn overlays_ahead(&mut self, overlays: &[ManifestOverlay]) {
        self.work_dirs
            .extend(overlays.iter().map(|o| o.work.as_path().to_path_buf()));
        let (Some(channel), false) = (&self.channel, overlays.is_empty()) else {
            return;
        };
        if let Ok(data) = serde_json::to_vec(overlays) {
            if data.len() <= MAX_OVERLAYS_MESSAGE {
                let _ = sandy_linux::relay::send_data(channel, OVERLAYS_TAG, &data);
            }
        }
    }
}

/// The tag of the message of [`Pending::overlays_ahead`], and its bound.
const OVERLAYS_TAG: u8 = b'O';
const MAX_OVERLAYS_MESSAGE: usize = 64 * 1024;

impl Drop for Pending {
    fn drop(&mut self) {
        crate::run::kill_and_reap(self.pid);
        // Its mount namespace, with any overlay it mounted ahead, went with it.
        for dir in &self.work_dirs {
            crate::cache::remove_work_dir(dir);
        }
    }
}

/// Sends `bytes` to the bootstrap on a memory file of their own.
fn send_file(channel: &OwnedFd, bytes: &[u8]) -> std::io::Result<()> {
    let fd =
        nix::sys::memfd::memfd_create(c"sandy-manifest", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    sandy_linux::relay::send_fds(channel, &[&OwnedFd::from(file)])
}

/// The bootstrap forked ahead, until its manifest comes: it never returns.
fn ahead(
    channel: OwnedFd,
    observe: bool,
    tier: sandy_policy::Tier,
    supervisor: u32,
    cpus: Option<nix::sched::CpuSet>,
    one: OneThread,
) -> ! {
    use sandy_linux::sys::process::exit_now;
    // If the supervisor dies, so does this process; if it already has, nothing waits.
    if !matches!(
        sandy_linux::sys::process::tie_to_supervisor(supervisor),
        Ok(true)
    ) {
        exit_now(125);
    }
    // The signals as the supervisor has them at the launch: the terminal's Ctrl-C and
    // Ctrl-\ ignored (the target gets them back), every other one blocked.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::all()),
        None,
    );
    for sig in [Signal::SIGINT, Signal::SIGQUIT] {
        let _ = sandy_linux::sys::ignore_signal(sig);
    }
    let mut prepared = sandy_linux::Ahead::prepare(tier);
    // This process holds a copy of the supervisor's memory (the caller's environment):
    // not dumpable, once the user namespace's id maps (its own files) are written.
    let _ = nix::sys::prctl::set_dumpable(false);
    // The cache overlays the supervisor prepared, if it says which before the manifest
    // comes: mounted ahead, detached. The supervisor closes the channel without a
    // manifest when the run ends before its launch (or kills this process).
    let fds = loop {
        match sandy_linux::relay::receive_any(&channel, MAX_OVERLAYS_MESSAGE) {
            Ok(m) if m.tag == sandy_linux::relay::FDS_TAG => break m.fds,
            Ok(m) if m.tag == OVERLAYS_TAG => {
                let overlays = m
                    .data
                    .and_then(|d| serde_json::from_slice::<Vec<ManifestOverlay>>(&d).ok())
                    .unwrap_or_default();
                let overlays: Vec<_> = overlays
                    .iter()
                    .map(sandy_linux::overlay::CacheOverlay::from)
                    .collect();
                prepared.premount(&overlays);
            }
            Ok(_) => {}
            Err(_) => exit_now(0),
        }
    };
    if let Some(cpus) = &cpus {
        let _ = sandy_linux::namespaces::run_anywhere(cpus);
    }
    let err = match received(fds, &channel) {
        Ok(manifest) => SandyError::Launch(sandy_linux::launch_forked(
            &manifest,
            Some(channel),
            observe,
            Some(prepared),
            one,
        )),
        Err(e) => e,
    };
    fail(&err)
}

/// The manifest of [`Pending::launch`] (on the descriptor of its first message, `fds`),
/// decoded, with the policy document of the next message on `channel` (none when that
/// message carries no descriptor).
fn received(fds: Vec<OwnedFd>, channel: &OwnedFd) -> Result<ValidatedManifest, SandyError> {
    let step = "cannot read the launch manifest";
    let io = |source| SandyError::Io { step, source };
    let mut manifest = fds
        .into_iter()
        .map(File::from)
        .next()
        .ok_or_else(|| io(std::io::Error::other("no manifest was sent")))?;
    manifest.seek(SeekFrom::Start(0)).map_err(io)?;
    let manifest = decode(manifest)?;
    let next = sandy_linux::relay::receive_any(channel, 0).map_err(|source| SandyError::Io {
        step: "cannot read the policy document",
        source,
    })?;
    if next.tag != sandy_linux::relay::FDS_TAG {
        return Err(io(std::io::Error::other(
            "the policy document was not sent after the manifest",
        )));
    }
    let Some(document) = next.fds.into_iter().next() else {
        return Ok(manifest);
    };
    let mut document = File::from(document);
    document.seek(SeekFrom::Start(0)).map_err(io)?;
    let bytes = read_bounded(document, MAX_POLICY_DOCUMENT_BYTES)?;
    let document = String::from_utf8(bytes)
        .map_err(|_| io(std::io::Error::other("the policy document is not UTF-8")))?;
    Ok(manifest.with_policy_document(document)?)
}

/// Never returns on success: the target execs, and the process ends once it has started
/// the target and the init (or, without a channel, with the target's status).
pub fn bootstrap(manifest_fd: i32, relay_fd: Option<i32>, observe: bool) -> SandyError {
    let manifest = match read_manifest(manifest_fd) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let relay = match relay_fd
        .map(sandy_linux::sys::adopt_inherited_fd)
        .transpose()
    {
        Ok(relay) => relay,
        Err(source) => {
            return SandyError::Io {
                step: "cannot open the channel to the supervisor",
                source,
            }
        }
    };
    SandyError::Launch(sandy_linux::launch(&manifest, relay, observe))
}

/// The end of a forked bootstrap that could not start the target: it prints the one-line
/// reason and exits with Sandy's status for it, without running anything of the
/// supervisor's (its cleanup is the supervisor's).
fn fail(err: &SandyError) -> ! {
    say!("{err}");
    // `_exit`: nothing of the supervisor's (its buffered output, exit handlers) runs
    // twice.
    sandy_linux::sys::process::exit_now(i32::from(crate::error::exit_code(err)))
}

fn read_manifest(fd: i32) -> Result<ValidatedManifest, SandyError> {
    let io = |step| move |source| SandyError::Io { step, source };
    let owned =
        sandy_linux::sys::adopt_inherited_fd(fd).map_err(io("cannot open the launch manifest"))?;
    decode(File::from(owned))
}

/// A manifest in its wire form, read up to one byte past its bound, parsed and validated.
fn decode(file: File) -> Result<ValidatedManifest, SandyError> {
    let bytes = read_bounded(file, MAX_MANIFEST_BYTES)?;
    Ok(ValidatedManifest::decode(&bytes)?)
}

/// What `file` holds from where it stands, up to one byte past `max` (so that the
/// receiver's own bound check sees a file that is too large as such).
fn read_bounded(file: File, max: usize) -> Result<Vec<u8>, SandyError> {
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| SandyError::Io {
            step: "cannot read the launch manifest",
            source,
        })?;
    Ok(bytes)
}
