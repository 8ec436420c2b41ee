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

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use sandy_policy::caches::{sandy_cache_dir, CacheKind, ToolCache, OVERLAYS_DIR};
use sandy_policy::text::Shown;
use sandy_policy::ManifestOverlay;

use crate::args::CacheArgs;
use crate::error::SandyError;
use crate::hostfs::{Dir, Kind};

/// The longest `origin` file Sandy reads back.
const MAX_ORIGIN: usize = 16 * 1024;

/// A cache's layer directory, opened from Sandy's cache (which no grant reaches; the
/// user's own links on the way to it are followed): created with `create` (0700, with
/// Sandy's cache and `overlays` when absent), and held with a shared lock for the run,
/// so that `sandy cache --clear` leaves it alone meanwhile. A layer `--clear` removed
/// while this run waited for its lock is made again. `Ok(None)`: it does not exist (and
/// `create` is false). The bool: whether it was made now.
fn open_layer(cache: &ToolCache, create: bool) -> std::io::Result<Option<(Dir, bool)>> {
    let (Some(overlays), Some(name)) = (cache.layer.parent(), cache.layer.file_name()) else {
        return Err(std::io::Error::other("a cache layer has no name"));
    };
    let root = if create {
        crate::hostfs::open_or_create(overlays, 0o700)?
    } else {
        match Dir::open(overlays) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    };
    for _ in 0..8 {
        let (layer, fresh) = match root.open_dir(name) {
            Ok(layer) => (layer, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                match root.create_dir(name, 0o700) {
                    Ok(layer) => (layer, true),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // Shared with the other runs; waits for a `--clear` that holds it.
        layer.lock_shared()?;
        if layer.is_linked()? {
            return Ok(Some((layer, fresh)));
        }
    }
    Err(std::io::Error::other("the layer kept being removed"))
}

/// The work directories of the overlays a launch is expected to have
/// ([`sandy_policy::caches::expected_overlays`]), made before the policy is resolved so
/// that the bootstrap mounts them meanwhile: only in layers that earlier runs made
/// (their `upper` exists), so that nothing new appears in Sandy's cache, and nothing is
/// said, before the policy is known. One that cannot be made is left to
/// [`prepare_layers`], which reports why.
pub fn prepare_expected(caches: &[ToolCache]) -> PreparedLayers {
    let mut prepared = PreparedLayers::default();
    for cache in caches.iter().filter(|c| c.kind == CacheKind::Overlay) {
        let Ok(Some((layer, _))) = open_layer(cache, false) else {
            continue;
        };
        let has_upper = layer
            .entry("upper")
            .ok()
            .flatten()
            .is_some_and(|st| st.kind == Kind::Directory);
        if has_upper && make_work_dir(&layer).is_ok() {
            prepared.add(cache, layer);
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
    let mut prepared = PreparedLayers::default();
    for cache in caches.iter().filter(|c| c.kind == CacheKind::Overlay) {
        let fail = |step| {
            let path = cache.layer.clone();
            move |source| SandyError::File { step, path, source }
        };
        if let Some(layer) = ahead.layer_of(cache) {
            prepared.add(
                cache,
                layer
                    .try_clone()
                    .map_err(fail("cannot open the cache layer"))?,
            );
            continue;
        }
        let (layer, fresh) = open_layer(cache, true)
            .map_err(fail("cannot create the cache layer"))?
            .ok_or_else(|| {
                fail("cannot create the cache layer")(std::io::ErrorKind::NotFound.into())
            })?;
        if fresh {
            let mut origin = cache.path.as_os_str().as_encoded_bytes().to_vec();
            origin.push(b'\n');
            layer
                .replace("origin", &origin, 0o600, None)
                .map_err(fail("cannot record which cache this layer covers:"))?;
            say!(
                "{} is copy-on-write inside; the sandbox's changes are kept in {} \
                 (sandy cache --clear removes them)",
                Shown(&cache.path),
                Shown(&cache.layer)
            );
        }
        layer
            .ensure_dir("upper", 0o700)
            .map_err(fail("cannot create the upper directory of the cache layer"))?;
        make_work_dir(&layer).map_err(fail("cannot create a work directory in the cache layer"))?;
        prepared.add(cache, layer);
    }
    Ok(prepared)
}

/// This run's work directory's name in a cache's layer: `work-PID`, after the supervisor.
fn work_name() -> String {
    format!("work-{}", std::process::id())
}

/// Creates this run's work directory (0700) in a cache's layer.
fn make_work_dir(layer: &Dir) -> std::io::Result<()> {
    let name = work_name();
    match layer.create_dir(&name, 0o700) {
        // Left by an earlier supervisor that had this pid: never reused.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            layer.remove_tree(&name, &|| false)?;
            layer.create_dir(&name, 0o700).map(drop)
        }
        other => other.map(drop),
    }
}

/// Removes a work directory made for an overlay that is no longer used (a run refused
/// before its launch), by its path in Sandy's cache.
pub fn remove_work_dir(work: &Path) {
    let (Some(layer), Some(name)) = (work.parent(), work.file_name()) else {
        return;
    };
    if let Ok(layer) = Dir::open(layer) {
        let _ = layer.remove_tree(name, &|| false);
    }
}

/// This run's overlays, with their per-run work directories (left in place after the
/// run; later runs remove them: [`PreparedLayers::stale_work_dirs`]), and the layers'
/// handles, which hold their shared locks until the run is over.
#[derive(Debug, Default)]
pub struct PreparedLayers {
    overlays: Vec<ManifestOverlay>,
    layers: Vec<Dir>,
}

impl PreparedLayers {
    fn add(&mut self, cache: &ToolCache, layer: Dir) {
        self.layers.push(layer);
        self.overlays.push(overlay_of(cache));
    }

    /// The handle on `cache`'s layer, if its overlay (with this run's work directory)
    /// is among these.
    fn layer_of(&self, cache: &ToolCache) -> Option<&Dir> {
        let overlay = overlay_of(cache);
        self.overlays
            .iter()
            .position(|o| *o == overlay)
            .map(|i| &self.layers[i])
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
    pub fn stale_work_dirs(&self) -> Vec<(Dir, OsString)> {
        let mut stale = Vec::new();
        for layer in &self.layers {
            for name in left_by_gone_processes(layer, "work-") {
                if let Ok(layer) = layer.try_clone() {
                    stale.push((layer, name));
                }
            }
        }
        stale
    }
}

/// The entries of `dir` named `PREFIX` and a process id whose process is gone: what
/// runs that ended left behind, named after their supervisor.
pub fn left_by_gone_processes(dir: &Dir, prefix: &str) -> Vec<OsString> {
    let Ok(entries) = dir.entries_prefix(crate::hostfs::MAX_ENTRIES) else {
        return Vec::new();
    };
    let mut gone = Vec::new();
    for entry in entries {
        let Some(pid) = entry
            .name
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
            gone.push(entry.name);
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
pub fn remove_stale_work_dirs(stale: &[(Dir, OsString)], stop: &AtomicBool) {
    for (layer, name) in stale {
        let stopped = || stop.load(Ordering::Relaxed);
        if layer.remove_tree(name, &stopped).is_err() && stopped() {
            return;
        }
    }
}

/// `sandy cache [--clear]`: lists the layers (their size and the cache each covers) or
/// removes them. A layer a running sandbox uses (its shared lock is held) is left, and
/// named.
pub fn command(args: CacheArgs) -> Result<u8, SandyError> {
    let host = crate::host::gather_without_git()?;
    let Some(home) = host.home.as_deref() else {
        crate::print_line("no home directory: Sandy keeps no cache layers").map_err(out)?;
        return Ok(0);
    };
    let root_path = sandy_cache_dir(home, &host).join(OVERLAYS_DIR);
    let root = match Dir::open(&root_path) {
        Ok(root) => Some(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(SandyError::File {
                step: "cannot open Sandy's cache layers in",
                path: root_path,
                source,
            })
        }
    };
    let mut names: Vec<OsString> = match &root {
        Some(root) => root
            .entries(crate::hostfs::MAX_ENTRIES)
            .map_err(|source| SandyError::File {
                step: "cannot list Sandy's cache layers in",
                path: root_path.clone(),
                source,
            })?
            .into_iter()
            .filter(|e| e.kind == Kind::Directory)
            .map(|e| e.name)
            .collect(),
        None => Vec::new(),
    };
    names.sort();
    let Some(root) = root.filter(|_| !names.is_empty()) else {
        crate::print_line(&format!("no cache layers in {}", Shown(&root_path))).map_err(out)?;
        return Ok(0);
    };
    let mut total = 0u64;
    let mut in_use = 0usize;
    for name in &names {
        let size = root.disk_usage(name, crate::hostfs::MAX_ENTRIES);
        let Ok(layer) = root.open_dir(name) else {
            continue;
        };
        let origin = layer
            .read("origin", MAX_ORIGIN)
            .ok()
            .flatten()
            .map(|o| String::from_utf8_lossy(o.trim_ascii_end()).into_owned())
            .unwrap_or_default();
        let shown = Shown(Path::new(name));
        let line = if args.clear {
            if !layer.try_lock(true).map_err(|source| SandyError::File {
                step: "cannot lock the cache layer",
                path: root_path.join(name),
                source,
            })? {
                in_use += 1;
                crate::print_line(&format!(
                    "kept {shown}  {}  (over {origin}): a running sandbox uses it",
                    human(size)
                ))
                .map_err(out)?;
                continue;
            }
            remove_layer(&root, name, &layer).map_err(|source| SandyError::File {
                step: "cannot remove the cache layer",
                path: root_path.join(name),
                source,
            })?;
            total += size;
            format!("removed {shown}  {}  (over {origin})", human(size))
        } else {
            total += size;
            format!("{shown}  {}  (over {origin})", human(size))
        };
        crate::print_line(&line).map_err(out)?;
    }
    let summary = if args.clear {
        let kept = if in_use > 0 {
            format!("; {in_use} in use kept (run it again once they end)")
        } else {
            String::new()
        };
        format!("cleared {} in {}{kept}", human(total), Shown(&root_path))
    } else {
        format!(
            "{} in {} (sandy cache --clear removes them)",
            human(total),
            Shown(&root_path)
        )
    };
    crate::print_line(&summary).map_err(out)?;
    Ok(0)
}

/// Removes the layer `name` of `root`, whose handle `layer` holds its exclusive lock:
/// everything in it through that handle, then its name.
fn remove_layer(root: &Dir, name: &OsStr, layer: &Dir) -> std::io::Result<()> {
    layer.remove_contents(&|| false)?;
    match root.remove_dir(name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn out(source: std::io::Error) -> SandyError {
    SandyError::Io {
        step: "cannot write the cache listing",
        source,
    }
}

/// A cache's overlay with this run's work directory.
fn overlay_of(cache: &ToolCache) -> ManifestOverlay {
    ManifestOverlay {
        lower: cache.path.as_path().into(),
        upper: cache.upper().as_path().into(),
        work: cache.layer.join(work_name()).as_path().into(),
    }
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
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

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
        let dir = Dir::open(layer.path()).unwrap();
        let stale = [
            (dir.try_clone().unwrap(), OsString::from("work-1")),
            (dir.try_clone().unwrap(), OsString::from("work-2")),
        ];
        remove_stale_work_dirs(&stale, &AtomicBool::new(true));
        assert!(
            a.join("work").exists() && b.exists(),
            "removed after the stop"
        );
        remove_stale_work_dirs(&stale, &AtomicBool::new(false));
        assert!(!a.exists() && !b.exists());
    }
}
