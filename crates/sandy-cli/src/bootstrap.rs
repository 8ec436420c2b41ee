//! The bootstrap of a run: the process that applies the sandbox and starts the target
//! (see [`sandy_linux::launch`] for the process tree of a run).
//!
//! `sandy run` forks it from the supervisor ([`forked`]), which is single-threaded at
//! that moment; only the channel to the supervisor crosses over. `sandy __bootstrap
//! --manifest-fd N` is the same launch for a manifest in its wire form on an inherited
//! descriptor, bounded, parsed and validated.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;

use sandy_policy::{ValidatedManifest, MAX_MANIFEST_BYTES};

use crate::error::SandyError;

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

/// The bootstrap forked by the supervisor: launches with the validated manifest and the
/// channel (descriptor 3, the only one left besides the standard streams). Never
/// returns: on failure it prints the one-line reason and exits with Sandy's status for
/// it, without running anything of the supervisor's (its cleanup is the supervisor's).
pub fn forked(
    manifest: &ValidatedManifest,
    channel: OwnedFd,
    observe: bool,
    early: bool,
    one: sandy_linux::sys::process::OneThread,
) -> ! {
    let err = SandyError::Launch(sandy_linux::launch_forked(
        manifest,
        Some(channel),
        observe,
        early,
        one,
    ));
    eprintln!("sandy: {err}");
    // `_exit`: nothing of the supervisor's (its buffered output, exit handlers) runs
    // twice.
    sandy_linux::sys::process::exit_now(i32::from(crate::error::exit_code(&err)))
}

fn read_manifest(fd: i32) -> Result<ValidatedManifest, SandyError> {
    let io = |step| move |source| SandyError::Io { step, source };
    let owned =
        sandy_linux::sys::adopt_inherited_fd(fd).map_err(io("cannot open the launch manifest"))?;
    let mut bytes = Vec::new();
    File::from(owned)
        .take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io("cannot read the launch manifest"))?;
    Ok(ValidatedManifest::decode(&bytes)?)
}
