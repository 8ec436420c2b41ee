//! `sandy __bootstrap --manifest-fd N`: a fresh exec of Sandy that reads the manifest from
//! an inherited descriptor, re-validates it, applies the sandbox and starts the target
//! (see [`sandy_linux::launch`] for the process tree of a run).

use std::fs::File;
use std::io::Read;

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
