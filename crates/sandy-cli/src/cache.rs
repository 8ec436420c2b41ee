//! The layers of the copy-on-write tool caches (design §3.7): created by the supervisor
//! before a run, kept between runs, listed and cleared by `sandy cache`.
//!
//! They live in `$XDG_CACHE_HOME/sandy/overlays` (`~/.cache/sandy/overlays`), one
//! directory per cache, named after the tool and a hash of the host path it covers:
//! `upper` (the sandbox's changes), `origin` (the covered path, for the listing) and one
//! `work-PID` directory per run. Only the user's own sandboxed runs use them; the host's
//! tools never read them.
//!
//! The overlays are mounted `volatile` (no sync of the upper layer's filesystem when the
//! sandbox's mount namespace goes away, which would otherwise cost every run a `syncfs`
//! of the home's filesystem). A volatile mount marks its work directory as unusable for a
//! later mount, so each run gets a fresh work directory. It is not removed when the run
//! ends (removing a directory tree costs milliseconds on a busy disk, and Sandy would
//! make the caller wait for it): the next run removes the work directories of runs whose
//! supervisor is gone, while its own target runs, and `sandy cache --clear`
//! removes them too. A run refused before its launch removes its own (see
//! [`crate::bootstrap::Pending`]). After a system crash during a run, files the run wrote
//! to a layer may be incomplete: `sandy cache --clear` discards them.
//!
//! The work directories of the layers that exist already are made before the policy is
//! resolved ([`prepare_expected`]), so that the bootstrap mounts their overlays while the
//! supervisor resolves it; the rest once it is resolved ([`prepare_layers`]).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sandy_policy::caches::{sandy_cache_dir, CacheKind, ToolCache, OVERLAYS_DIR};
use sandy_policy::ManifestOverlay;

use crate::args::CacheArgs;
use crate::error::SandyError;

/// The work directories of the overlays a launch is expected to have
/// ([`sandy_policy::caches::expected_overlays`]), made before the policy is resolved so
/// that the bootstrap mounts them meanwhile: only in layers that earlier runs made
/// (their `upper` exists), so that nothing new appears in Sandy's cache, and nothing is
/// said, before the policy is known. One that cannot be made is left to
/// [`prepare_layers`], which reports why.
pub fn prepare_expected(caches: &[ToolCache]) -> PreparedLayers {
    let mut prepared = PreparedLayers::default();
    for cache in caches.iter().filter(|c| c.kind == CacheKind::Overlay) {
        if cache.upper().is_dir() && make_work_dir(cache).is_ok() {
            prepared.add(cache);
        }
    }
    prepared
}

/// Creates each overlay's layer directories (0700) that do not exist yet, and says so on
/// stderr when a layer is new; the work directories made `ahead` of the policy
/// ([`prepare_expected`]) are this run's for the same layers. Redirected caches live in
/// the private `/tmp`: nothing to create here.
pub fn prepare_layers(
    caches: &[ToolCache],
    ahead: &PreparedLayers,
) -> Result<PreparedLayers, SandyError> {
    let io = |step| move |source| SandyError::Io { step, source };
    let mut prepared = PreparedLayers::default();
    for cache in caches.iter().filter(|c| c.kind == CacheKind::Overlay) {
        if ahead.has(cache) {
            prepared.add(cache);
            continue;
        }
        let fresh = match std::fs::create_dir(&cache.layer) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = cache.layer.parent().unwrap_or(&cache.layer);
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(io("cannot create Sandy's cache directory"))?;
                std::fs::create_dir(&cache.layer)
                    .map_err(io("cannot create a cache layer directory"))?;
                true
            }
            Err(e) => return Err(io("cannot create a cache layer directory")(e)),
        };
        if fresh {
            std::fs::set_permissions(&cache.layer, std::fs::Permissions::from_mode(0o700))
                .map_err(io("cannot restrict a cache layer directory"))?;
            let mut origin = cache.path.as_os_str().as_encoded_bytes().to_vec();
            origin.push(b'\n');
            std::fs::write(cache.layer.join("origin"), origin)
                .map_err(io("cannot record which cache a layer covers"))?;
            eprintln!(
                "sandy: {} is copy-on-write inside; the sandbox's changes are kept in {} \
                 (sandy cache --clear removes them)",
                cache.path.display(),
                cache.layer.display()
            );
        }
        match std::fs::DirBuilder::new().mode(0o700).create(cache.upper()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("cannot create a cache layer directory")(e)),
        }
        make_work_dir(cache).map_err(io("cannot create a cache layer's work directory"))?;
        prepared.add(cache);
    }
    Ok(prepared)
}

/// This run's work directory in a cache's layer: `work-PID`, named after the supervisor.
fn work_dir(cache: &ToolCache) -> PathBuf {
    cache.layer.join(format!("work-{}", std::process::id()))
}

/// Creates this run's work directory (0700) in a cache's layer.
fn make_work_dir(cache: &ToolCache) -> std::io::Result<()> {
    let work = work_dir(cache);
    let create = || std::fs::DirBuilder::new().mode(0o700).create(&work);
    match create() {
        // Left by an earlier supervisor that had this pid: never reused.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            remove_tree(&work).and_then(|()| create())
        }
        other => other,
    }
}

/// This run's overlays, with their per-run work directories (left in place after the
/// run; later runs remove them: [`PreparedLayers::stale_work_dirs`]).
#[derive(Debug, Default)]
pub struct PreparedLayers {
    overlays: Vec<ManifestOverlay>,
    /// The layer directories of this run's overlays.
    layers: Vec<PathBuf>,
}

impl PreparedLayers {
    fn add(&mut self, cache: &ToolCache) {
        self.layers.push(cache.layer.clone());
        self.overlays.push(overlay_of(cache));
    }

    /// Whether `cache`'s overlay, with this run's work directory, is among these.
    fn has(&self, cache: &ToolCache) -> bool {
        self.overlays.contains(&overlay_of(cache))
    }

    /// What the bootstrap mounts.
    pub fn manifest_overlays(&self) -> Vec<ManifestOverlay> {
        self.overlays.clone()
    }

    /// Those of these overlays that `ahead` does not hold: the ones still to be mounted
    /// ahead once the policy is known.
    pub fn beyond(&self, ahead: &PreparedLayers) -> Vec<ManifestOverlay> {
        self.overlays
            .iter()
            .filter(|o| !ahead.overlays.contains(o))
            .cloned()
            .collect()
    }

    /// The work directories, in this run's layers, of runs whose supervisor is gone (this
    /// run's own and those of concurrent runs are not among them): each run leaves its
    /// own behind, and later runs remove them ([`remove_stale_work_dirs`]).
    pub fn stale_work_dirs(&self) -> Vec<PathBuf> {
        self.layers
            .iter()
            .flat_map(|layer| left_by_gone_processes(layer, "work-"))
            .collect()
    }
}

/// The entries of `dir` named `PREFIX` and a process id whose process is gone: what
/// runs that ended left behind, named after their supervisor.
pub fn left_by_gone_processes(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut gone = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        // Gone only when the kernel says there is no such process (EPERM: one of
        // another user's, alive).
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            .map_or_else(|e| e != nix::errno::Errno::ESRCH, |()| true);
        if !alive {
            gone.push(entry.path());
        }
    }
    gone
}

/// Removes the work directories of [`PreparedLayers::stale_work_dirs`], one entry at a
/// time, until `stop` is set: what is left then stays for a later run (a directory goes
/// last, after its entries, so a part-removed one is still found by its name).
///
/// Removing a directory is what costs here: freeing its block waits for the disk (about
/// 0.1 to 0.3 ms per directory on the ext4 of BENCHMARKS.md, against 20 µs to make one),
/// and each work directory holds four.
pub fn remove_stale_work_dirs(stale: &[PathBuf], stop: &AtomicBool) {
    for dir in stale {
        if remove_tree_unless(dir, stop).is_err() && stop.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// [`remove_tree`], checking `stop` before each removal (`Interrupted` once it is set).
fn remove_tree_unless(path: &Path, stop: &AtomicBool) -> std::io::Result<()> {
    if stop.load(Ordering::Relaxed) {
        return Err(std::io::ErrorKind::Interrupted.into());
    }
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    for entry in std::fs::read_dir(path)? {
        remove_tree_unless(&entry?.path(), stop)?;
    }
    if stop.load(Ordering::Relaxed) {
        return Err(std::io::ErrorKind::Interrupted.into());
    }
    std::fs::remove_dir(path)
}

/// `sandy cache [--clear]`.
pub fn command(args: CacheArgs) -> Result<u8, SandyError> {
    let host = crate::host::gather_without_git()?;
    let Some(home) = host.home.as_deref() else {
        crate::print_line("no home directory: Sandy keeps no cache layers").map_err(out)?;
        return Ok(0);
    };
    let root = sandy_cache_dir(home, &host).join(OVERLAYS_DIR);
    let mut layers: Vec<PathBuf> = match std::fs::read_dir(&root) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(SandyError::Io {
                step: "cannot list Sandy's cache layers",
                source,
            })
        }
    };
    layers.sort();
    if layers.is_empty() {
        crate::print_line(&format!("no cache layers in {}", root.display())).map_err(out)?;
        return Ok(0);
    }
    let mut total = 0u64;
    for layer in &layers {
        let size = du(layer);
        total += size;
        let origin = std::fs::read_to_string(layer.join("origin")).unwrap_or_default();
        let name = layer.file_name().unwrap_or_default().to_string_lossy();
        let line = if args.clear {
            remove_tree(layer).map_err(|source| SandyError::Io {
                step: "cannot remove a cache layer",
                source,
            })?;
            format!(
                "removed {name}  {}  (over {})",
                human(size),
                origin.trim_end()
            )
        } else {
            format!("{name}  {}  (over {})", human(size), origin.trim_end())
        };
        crate::print_line(&line).map_err(out)?;
    }
    let summary = if args.clear {
        format!("cleared {} in {}", human(total), root.display())
    } else {
        format!(
            "{} in {} (sandy cache --clear removes them)",
            human(total),
            root.display()
        )
    };
    crate::print_line(&summary).map_err(out)?;
    Ok(0)
}

fn out(source: std::io::Error) -> SandyError {
    SandyError::Io {
        step: "cannot write the cache listing",
        source,
    }
}

/// Disk usage of a tree, without following symlinks. Unreadable parts count as zero.
fn du(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut size = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            size += entries.flatten().map(|e| du(&e.path())).sum::<u64>();
        }
    }
    size
}

/// A cache's overlay with this run's work directory.
fn overlay_of(cache: &ToolCache) -> ManifestOverlay {
    ManifestOverlay {
        lower: cache.path.as_path().into(),
        upper: cache.upper().as_path().into(),
        work: work_dir(cache).as_path().into(),
    }
}

/// Removes a tree. Overlayfs leaves its work directory with mode 000; directories are
/// made accessible to their owner before they are entered. Symlinks are removed, never
/// followed.
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    remove_tree_unless(path, &AtomicBool::new(false))
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A work directory as overlayfs leaves it after a volatile mount: `work/`, its
    /// `incompat/volatile/dirty` marker, the directories unreadable (mode 000).
    fn kernel_work_dir(layer: &Path, pid: u32) -> PathBuf {
        let top = layer.join(format!("work-{pid}"));
        let volatile = top.join("work/incompat/volatile");
        std::fs::create_dir_all(&volatile).unwrap();
        std::fs::write(volatile.join("dirty"), b"").unwrap();
        for dir in [volatile, top.join("work/incompat"), top.join("work")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
        }
        top
    }

    #[test]
    fn stale_work_dirs_are_removed_whole_unless_stopped_first() {
        let layer = tempfile::tempdir().unwrap();
        let a = kernel_work_dir(layer.path(), 1);
        let b = kernel_work_dir(layer.path(), 2);
        let stopped = AtomicBool::new(true);
        remove_stale_work_dirs(&[a.clone(), b.clone()], &stopped);
        assert!(
            a.join("work").exists() && b.exists(),
            "removed after the stop"
        );
        remove_stale_work_dirs(&[a.clone(), b.clone()], &AtomicBool::new(false));
        assert!(!a.exists() && !b.exists());
    }
}
