//! Copy-on-write tool caches (design §3.7): each cache is an overlay mounted over the
//! host directory, which becomes its read-only lower layer; the sandbox's writes go to an
//! upper layer in Sandy's own per-user cache. Mounted in the sandbox's user namespace
//! (`userxattr`: overlayfs keeps its bookkeeping in `user.overlay.*` attributes, which an
//! unprivileged mount may set), so nothing here needs privileges on the host.
//!
//! Overlayfs takes a private clone of the upper layer's mount when it is mounted, so the
//! overlays are mounted before the rest of the tree is made read-only, and stay writable.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use sandy_policy::ValidatedManifest;

use crate::error::LinuxError;

/// One overlay: the host cache (mount point and lower layer), the upper layer, the work
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOverlay {
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// The overlays a manifest asks for. Pure.
pub fn overlays(manifest: &ValidatedManifest) -> Vec<CacheOverlay> {
    manifest
        .manifest()
        .overlays
        .iter()
        .map(|o| CacheOverlay {
            lower: o.lower.as_path().to_path_buf(),
            upper: o.upper.as_path().to_path_buf(),
            work: o.work.as_path().to_path_buf(),
        })
        .collect()
}

/// Mounts every overlay over its host cache.
pub fn mount_all(overlays: &[CacheOverlay]) -> Result<(), LinuxError> {
    for overlay in overlays {
        let options = options(overlay)?;
        mount(
            Some("overlay"),
            &overlay.lower,
            Some("overlay"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options.as_c_str()),
        )
        .map_err(|source| LinuxError::Mount {
            step: "cannot mount the copy-on-write cache overlay on",
            path: overlay.lower.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The option string. The manifest's validation refuses paths holding `,`, `:` or `\`,
/// which overlayfs would read as separators.
fn options(overlay: &CacheOverlay) -> Result<CString, LinuxError> {
    let mut bytes = Vec::with_capacity(256);
    for (key, path) in [
        ("lowerdir=", &overlay.lower),
        (",upperdir=", &overlay.upper),
        (",workdir=", &overlay.work),
    ] {
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(Path::new(path).as_os_str().as_bytes());
    }
    // `volatile`: no sync of the upper layer's filesystem when the namespace goes away
    // (the supervisor gives each run a fresh work directory, which volatile requires).
    bytes.extend_from_slice(b",userxattr,volatile");
    CString::new(bytes).map_err(|_| LinuxError::Nul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_three_layers_userxattr_and_volatile() {
        let o = CacheOverlay {
            lower: "/h/.npm".into(),
            upper: "/h/.cache/sandy/overlays/npm-1/upper".into(),
            work: "/h/.cache/sandy/overlays/npm-1/work".into(),
        };
        assert_eq!(
            options(&o).unwrap().to_str().unwrap(),
            "lowerdir=/h/.npm,upperdir=/h/.cache/sandy/overlays/npm-1/upper,\
             workdir=/h/.cache/sandy/overlays/npm-1/work,userxattr,volatile"
        );
    }
}
