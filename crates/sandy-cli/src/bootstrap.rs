//! The bootstrap of a run: the process that applies the sandbox and starts the target
//! (see [`sandy_linux::launch`] for the process tree of a run).
//!
//! `sandy run` forks it from the supervisor ([`early`]) before it resolves the policy
//! (the supervisor is single-threaded at that moment); only the channel to the supervisor
//! and the pipe that brings the manifest cross over. `sandy __bootstrap
//! --manifest-fd N` is the same launch for a manifest in its wire form on an inherited
//! descriptor, bounded, parsed and validated.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;

use sandy_policy::{ValidatedManifest, MAX_MANIFEST_BYTES};

use crate::error::SandyError;

/// Never returns on success: the process holds the sandbox open until the supervisor
/// ends it, and its child the target execs.
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

/// The bootstrap forked by the supervisor at the start of `sandy run`, before the policy
/// is resolved: enters the run's namespaces at once ([`sandy_linux::Early`]), then reads
/// the manifest in its wire form from `manifest` (descriptor 4), bounded and validated,
/// and launches, with `channel` (descriptor 3) to the supervisor. Never returns: when the
/// supervisor closes `manifest` without sending anything (it refused the run, or failed
/// before the launch), it exits silently; on failure it prints the one-line reason and
/// exits with Sandy's status for it. Nothing of the supervisor's runs here (its output
/// buffers, exit handlers and cleanup are the supervisor's).
pub fn early(
    supervisor: u32,
    channel: OwnedFd,
    manifest: OwnedFd,
    observe: bool,
    one: sandy_linux::sys::process::OneThread,
) -> ! {
    let early = sandy_linux::Early::start(supervisor, true);
    let err = match read_manifest_from(manifest) {
        Ok(None) => sandy_linux::sys::process::exit_now(0),
        Ok(Some(manifest)) => SandyError::Launch(early.launch(&manifest, channel, observe, one)),
        Err(e) => e,
    };
    eprintln!("sandy: {err}");
    // `_exit`: nothing of the supervisor's (its buffered output, exit handlers) runs
    // twice.
    sandy_linux::sys::process::exit_now(i32::from(crate::error::exit_code(&err)))
}

/// The manifest on `fd`, up to end of file, or `None` if nothing was sent.
fn read_manifest_from(fd: OwnedFd) -> Result<Option<ValidatedManifest>, SandyError> {
    let io = |step| move |source| SandyError::Io { step, source };
    let mut bytes = Vec::new();
    File::from(fd)
        .take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io("cannot read the launch manifest"))?;
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some(ValidatedManifest::decode(&bytes)?))
}

fn read_manifest(fd: i32) -> Result<ValidatedManifest, SandyError> {
    let owned = sandy_linux::sys::adopt_inherited_fd(fd).map_err(|source| SandyError::Io {
        step: "cannot open the launch manifest",
        source,
    })?;
    read_manifest_from(owned)?.ok_or_else(|| {
        SandyError::Manifest(sandy_policy::ManifestError::Malformed {
            reason: "the manifest is empty".to_owned(),
        })
    })
}
