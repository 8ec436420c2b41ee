//! Copy-on-write tool caches (design §3.7): each cache is an overlay mounted over the
//! host directory, which becomes its read-only lower layer; the sandbox's writes go to an
//! upper layer in Sandy's own per-user cache. Mounted in the sandbox's user namespace
//! (`userxattr`: overlayfs keeps its bookkeeping in `user.overlay.*` attributes, which an
//! unprivileged mount may set), so nothing here needs privileges on the host.
//!
//! Overlayfs takes a private clone of the upper layer's mount when it is mounted, so the
//! overlays are mounted before the rest of the tree is made read-only, and stay writable.
//!
//! A mount of overlayfs does real work on the upper layer's filesystem (it makes and
//! tests its work directory: a temporary file, a whiteout, the attributes), a quarter
//! of a millisecond each on the ext4 of BENCHMARKS.md. The bootstrap forked ahead of its
//! manifest makes them while the supervisor still resolves the policy, when the
//! supervisor sends it the layers it prepared ([`Premounted::add`]: detached mounts,
//! attached to nothing); the launch then only attaches those that are exactly the
//! manifest's and whose paths no earlier mount of the plan changes, and mounts the
//! others as before.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use rustix::mount::{
    fsconfig_create, fsconfig_set_flag, fsconfig_set_string, fsmount, fsopen, move_mount,
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags,
};
use sandy_policy::{ManifestOverlay, ValidatedManifest};

use crate::error::LinuxError;

/// One overlay: the host cache (mount point and lower layer), the upper layer, the work
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOverlay {
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
}

impl From<&ManifestOverlay> for CacheOverlay {
    fn from(o: &ManifestOverlay) -> CacheOverlay {
        CacheOverlay {
            lower: o.lower.as_path().to_path_buf(),
            upper: o.upper.as_path().to_path_buf(),
            work: o.work.as_path().to_path_buf(),
        }
    }
}

/// The overlays a manifest asks for. Pure.
pub fn overlays(manifest: &ValidatedManifest) -> Vec<CacheOverlay> {
    manifest
        .manifest()
        .overlays
        .iter()
        .map(CacheOverlay::from)
        .collect()
}

/// Overlays mounted ahead, attached to nothing yet ([`Premounted::add`]).
#[derive(Debug, Default)]
pub struct Premounted(Vec<(CacheOverlay, OwnedFd)>);

impl Premounted {
    /// Mounts each overlay not mounted ahead yet with the mount API (`fsopen`,
    /// `fsconfig`, `fsmount`) as a detached mount, with the options of [`mount_all`]'s:
    /// the layers, `userxattr`, `volatile`, `nosuid` and `nodev`. One that fails is left
    /// out (its mount at the launch then reports why). In the bootstrap's own user and
    /// mount namespaces, before any mount of the plan.
    pub fn add(&mut self, overlays: &[CacheOverlay]) {
        for overlay in overlays {
            if self.0.iter().any(|(o, _)| o == overlay) {
                continue;
            }
            if let Ok(fd) = detached(overlay) {
                self.0.push((overlay.clone(), fd));
            }
        }
    }
}

fn detached(overlay: &CacheOverlay) -> rustix::io::Result<OwnedFd> {
    let fs = fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
    // Named as mount(2) names it (the source "overlay" in /proc/self/mountinfo).
    fsconfig_set_string(&fs, "source", "overlay")?;
    for (key, path) in layers(overlay) {
        fsconfig_set_string(&fs, key, path)?;
    }
    for flag in FLAGS {
        fsconfig_set_flag(&fs, flag)?;
    }
    fsconfig_create(&fs)?;
    fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
}

/// Mounts every overlay over its host cache: the one mounted ahead for exactly these
/// layers is attached, unless one of its paths is at or below `earlier` (a mount of the
/// plan made since, which could change what the path names); any other is mounted here.
pub fn mount_all(
    overlays: &[CacheOverlay],
    premounted: &mut Premounted,
    earlier: &[&Path],
) -> Result<(), LinuxError> {
    for overlay in overlays {
        let ahead = premounted
            .0
            .iter()
            .position(|(o, _)| o == overlay)
            .map(|i| premounted.0.swap_remove(i).1);
        if let Some(mount) = ahead.filter(|_| !named_anew(overlay, earlier)) {
            let attached = move_mount(
                &mount,
                "",
                rustix::fs::CWD,
                overlay.lower.as_path(),
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            );
            // Not attached: dropped (unmounted, its work directory free again) before
            // the overlay is mounted here.
            drop(mount);
            if attached.is_ok() {
                continue;
            }
        }
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

/// Whether a path of the overlay's is at or below one of `earlier` (mounts made since it
/// was mounted ahead): the path may then name something else now.
fn named_anew(overlay: &CacheOverlay, earlier: &[&Path]) -> bool {
    [&overlay.lower, &overlay.upper, &overlay.work]
        .iter()
        .any(|p| earlier.iter().any(|e| p.starts_with(e)))
}

/// The option string. The manifest's validation refuses paths holding `,`, `:` or `\`,
/// which overlayfs would read as separators.
fn options(overlay: &CacheOverlay) -> Result<CString, LinuxError> {
    let mut bytes = Vec::with_capacity(256);
    for (i, (key, path)) in layers(overlay).into_iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(b'=');
        bytes.extend_from_slice(path.as_os_str().as_bytes());
    }
    for flag in FLAGS {
        bytes.push(b',');
        bytes.extend_from_slice(flag.as_bytes());
    }
    CString::new(bytes).map_err(|_| LinuxError::Nul)
}

/// The three layers' options, for `mount(2)`'s string and the mount API alike.
fn layers(overlay: &CacheOverlay) -> [(&'static str, &Path); 3] {
    [
        ("lowerdir", &overlay.lower),
        ("upperdir", &overlay.upper),
        ("workdir", &overlay.work),
    ]
}

/// The flags of every overlay: `userxattr` (the bookkeeping in `user.overlay.*`
/// attributes, which a mount in a user namespace may set) and `volatile` (no sync of
/// the upper layer's filesystem when the namespace goes away; the supervisor gives each
/// run a fresh work directory, which volatile requires).
const FLAGS: [&str; 2] = ["userxattr", "volatile"];

#[cfg(test)]
mod tests {
    use super::*;

    /// An overlay mounted ahead is used only if no mount made since covers one of its
    /// paths: a private `/tmp` or `/var/tmp`, a carried grant.
    #[test]
    fn an_overlay_mounted_ahead_is_used_only_where_no_later_mount_names_its_paths() {
        let overlay = CacheOverlay {
            lower: PathBuf::from("/h/.npm"),
            upper: PathBuf::from("/h/.cache/sandy/overlays/npm-1/upper"),
            work: PathBuf::from("/h/.cache/sandy/overlays/npm-1/work-7"),
        };
        let since = [
            Path::new("/tmp"),
            Path::new("/var/tmp"),
            Path::new("/h/project"),
        ];
        assert!(!named_anew(&overlay, &since));
        assert!(named_anew(&overlay, &[Path::new("/h/.npm")]));
        assert!(named_anew(&overlay, &[Path::new("/h")]));
        assert!(named_anew(&overlay, &[Path::new("/h/.cache/sandy")]));
        // A sibling whose name starts alike is not below.
        assert!(!named_anew(&overlay, &[Path::new("/h/.np")]));
    }

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
