//! The layers of the copy-on-write tool caches (design §3.7): created by the supervisor
//! before a run, kept between runs, listed and cleared by `sandy cache`.
//!
//! They live in `$XDG_CACHE_HOME/sandy/overlays` (`~/.cache/sandy/overlays`): one
//! directory per project (`NAME-HASH`, with a `project` file naming it), and in it one
//! directory per cache, named after the tool and a hash of the host path it covers:
//! `upper` (the sandbox's changes), `origin` (the covered path, for the listing) and one
//! `work-PID` directory per run. Only the user's own sandboxed runs in that project use
//! them; the host's tools never read them.
//!
//! The names through which a cache home configures or runs programs
//! ([`ToolCache::kept_out`]) never stay in a layer: before a layer is mounted and after
//! the run, whatever is at such a name in its `upper` is removed (through handles), and
//! named.
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

use sandy_policy::caches::{sandy_cache_dir, CacheKind, ToolCache, OVERLAYS_DIR, PROJECT_FILE};
use sandy_policy::text::Shown;
use sandy_policy::ManifestOverlay;

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
    let (Some(project), Some(name)) = (cache.layer.parent(), cache.layer.file_name()) else {
        return Err(std::io::Error::other("a cache layer has no name"));
    };
    let root = if create {
        crate::hostfs::open_or_create(project, 0o700)?
    } else {
        match Dir::open(project) {
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
    project: &Path,
) -> Result<PreparedLayers, SandyError> {
    let mut prepared = PreparedLayers::default();
    for cache in caches.iter().filter(|c| c.kind == CacheKind::Overlay) {
        let fail = |step| {
            let path = cache.layer.clone();
            move |source| SandyError::File { step, path, source }
        };
        if let Some(layer) = ahead.layer_of(cache) {
            for name in ahead.removed_from(cache) {
                say_kept_out(cache, name, "an earlier run");
            }
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
            name_the_project(cache, project)
                .map_err(fail("cannot record which project this layer is for:"))?;
            let mut origin = cache.path.as_os_str().as_encoded_bytes().to_vec();
            origin.push(b'\n');
            layer
                .replace("origin", &origin, 0o600, None)
                .map_err(fail("cannot record which cache this layer covers:"))?;
            tell!(
                "new copy-on-write layer for your package caches (sandy cache lists them)",
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
        let at = prepared.overlays.len();
        prepared.add(cache, layer);
        for name in prepared.removed[at].clone() {
            say_kept_out(cache, &name, "an earlier run");
        }
    }
    Ok(prepared)
}

/// Writes the `project` file beside a project's layers (once): the project's path, for
/// `sandy cache`.
fn name_the_project(cache: &ToolCache, project: &Path) -> std::io::Result<()> {
    let Some(dir) = cache.layer.parent() else {
        return Ok(());
    };
    let dir = Dir::open(dir)?;
    if dir.entry(PROJECT_FILE)?.is_some() {
        return Ok(());
    }
    let mut line = project.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    dir.replace(PROJECT_FILE, &line, 0o600, None)
}

/// Removes, from a layer's `upper`, whatever is at a name of [`ToolCache::kept_out`]:
/// a configuration file or a program a run put in the cache home. Returns the names
/// removed. Nothing is followed; a directory goes whole.
fn keep_out(layer: &Dir, cache: &ToolCache) -> Vec<String> {
    let Ok(upper) = layer.open_dir("upper") else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for name in &cache.kept_out {
        let Ok(Some(st)) = upper.entry(name) else {
            continue;
        };
        let gone = if st.kind == Kind::Directory {
            upper.remove_tree(name, &|| false)
        } else {
            upper.remove_file(name)
        };
        if gone.is_ok() {
            removed.push(name.clone());
        }
    }
    removed
}

fn say_kept_out(cache: &ToolCache, name: &str, who: &str) {
    say!(
        "removed {} from this project's {} cache layer: {who} created it there, and a cache \
         home's configuration and programs never outlive a run (later builds would run them)",
        Shown(&cache.path.join(name)),
        cache.tool
    );
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
/// run; later runs remove them: [`PreparedLayers::layers_with_leftovers`]), and the layers'
/// handles, which hold their shared locks until the run is over.
#[derive(Debug, Default)]
pub struct PreparedLayers {
    overlays: Vec<ManifestOverlay>,
    layers: Vec<Dir>,
    caches: Vec<ToolCache>,
    /// Per layer: the kept-out names removed before it was mounted.
    removed: Vec<Vec<String>>,
}

impl PreparedLayers {
    /// Adds a layer, once its kept-out names are removed from it (before any mount).
    fn add(&mut self, cache: &ToolCache, layer: Dir) {
        self.removed.push(keep_out(&layer, cache));
        self.layers.push(layer);
        self.overlays.push(overlay_of(cache));
        self.caches.push(cache.clone());
    }

    /// The kept-out names removed from `cache`'s layer before it was mounted.
    fn removed_from(&self, cache: &ToolCache) -> &[String] {
        let overlay = overlay_of(cache);
        self.overlays
            .iter()
            .position(|o| *o == overlay)
            .map_or(&[][..], |i| &self.removed[i])
    }

    /// After the run: removes what the run put at a kept-out name of each layer, and
    /// says so.
    pub fn keep_out_after_run(&self) {
        for (layer, cache) in self.layers.iter().zip(&self.caches) {
            for name in keep_out(layer, cache) {
                say_kept_out(cache, &name, "the run");
            }
        }
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

    /// This run's layers that may hold work directories of runs whose supervisor is
    /// gone (this run's own and those of concurrent runs are not among them: each run
    /// leaves its own behind, and later runs remove them, [`remove_stale_work_dirs`]),
    /// each with a handle of its own. Told by the layer's link count, one `fstat`: the
    /// listing, and the question to the kernel about each name's process, are left to the
    /// thread that removes them, off the launch's path (a series of short runs leaves
    /// hundreds, and listing them took a millisecond of each launch).
    pub fn layers_with_leftovers(&self) -> Vec<Dir> {
        self.layers
            .iter()
            .filter(|layer| layer.stat().map_or(true, |st| may_hold_others(st.nlink)))
            .filter_map(|layer| layer.try_clone().ok())
            .collect()
    }
}

/// Whether a layer directory whose link count is `nlink` may hold another run's work
/// directory: it holds `upper` and this run's own, so a count above 4 (itself, `.`,
/// and those two) says there is another. A file system that does not count
/// subdirectories in a directory's links says 1 (Btrfs; ext4 past 65,000 of them): the
/// layer may hold some.
fn may_hold_others(nlink: u64) -> bool {
    !(2..=4).contains(&nlink)
}

/// The entries of `dir` named `PREFIX` and a process id whose process is gone, among its
/// first `max` entries: what runs that ended left behind, named after their supervisor.
pub fn left_by_gone_processes(dir: &Dir, prefix: &str, max: usize) -> Vec<OsString> {
    let Ok(entries) = dir.entries_prefix(max) else {
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

/// Removes the work directories that runs whose supervisor is gone left in `layers`
/// ([`PreparedLayers::layers_with_leftovers`]), one entry at a time, until `stop` is set:
/// what is left then stays for a later run (a directory goes last, after its entries, so a
/// part-removed one is still found by its name).
///
/// Removing a directory is what costs here: freeing its block waits for the disk (about
/// 0.1 to 0.3 ms per directory on the ext4 of BENCHMARKS.md, against 20 µs to make one),
/// and each work directory holds four.
///
/// A layer is looked at `LOOK_AT` entries at a time, again once those found are
/// removed: a short run removes a few, and should not list thousands to find them.
pub fn remove_stale_work_dirs(layers: &[Dir], stop: &AtomicBool) {
    let stopped = || stop.load(Ordering::Relaxed);
    for layer in layers {
        loop {
            if stopped() {
                return;
            }
            let mut removed = false;
            for name in left_by_gone_processes(layer, "work-", LOOK_AT) {
                match layer.remove_tree(&name, &stopped) {
                    Ok(()) => removed = true,
                    Err(_) if stopped() => return,
                    Err(_) => {}
                }
                if stopped() {
                    return;
                }
            }
            // Nothing more to find, or nothing that could be removed: the next layer.
            if !removed {
                break;
            }
        }
    }
}

/// How many entries of a layer [`remove_stale_work_dirs`] looks at in one listing:
/// besides `origin`, `upper` and the work directories of runs still going, room for
/// hundreds of leftovers.
const LOOK_AT: usize = 256;

/// What [`layers`] found (and with `clear` did) in Sandy's cache layers.
#[derive(Debug)]
pub struct Listing {
    /// Where the layers are (`~/.cache/sandy/overlays`); `None` without a home.
    pub root: Option<std::path::PathBuf>,
    /// Each project's layers, and the shared ones of earlier releases, in name order.
    pub groups: Vec<Group>,
    /// The bytes listed, or removed with `clear`.
    pub total: u64,
    /// Layers a running sandbox holds, which `clear` left.
    pub in_use: usize,
}

/// One directory of layers: a project's, or a layer shared by every project.
#[derive(Debug)]
pub struct Group {
    /// The project the layers are for; `None` for a shared layer of an earlier release
    /// (the group then holds that one layer).
    pub project: Option<String>,
    /// The directory's name.
    pub name: OsString,
    /// Its layers.
    pub layers: Vec<Layer>,
}

/// One cache layer.
#[derive(Debug)]
pub struct Layer {
    /// Its name.
    pub name: OsString,
    /// Its size on disk, in bytes.
    pub size: u64,
    /// The cache it lies over.
    pub origin: String,
    /// Listed, removed, or kept because a running sandbox uses it.
    pub outcome: Outcome,
}

/// What happened to a [`Layer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Listed only.
    Listed,
    /// Removed (`clear`).
    Removed,
    /// Kept: a running sandbox holds it.
    InUse,
}

/// `sandy cache [--clear]`: the layers, per project (their size and the cache each
/// covers), or with `clear` removes them. A layer a running sandbox uses (its shared lock
/// is held) is left, and named. Layers of Sandy releases before per-project layers
/// (directly in `overlays`, shared by every project) are listed as such and removed too.
pub fn layers(clear: bool) -> Result<Listing, SandyError> {
    let host = crate::host::gather_without_git()?;
    let mut listing = Listing {
        root: None,
        groups: Vec::new(),
        total: 0,
        in_use: 0,
    };
    let Some(home) = host.home.as_deref() else {
        return Ok(listing);
    };
    let root_path = sandy_cache_dir(home, &host).join(OVERLAYS_DIR);
    listing.root = Some(root_path.clone());
    let root = match Dir::open(&root_path) {
        Ok(root) => root,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
        Err(source) => {
            return Err(SandyError::File {
                step: "cannot open Sandy's cache layers in",
                path: root_path,
                source,
            })
        }
    };
    let names = directories(&root).map_err(|source| SandyError::File {
        step: "cannot list Sandy's cache layers in",
        path: root_path.clone(),
        source,
    })?;
    for name in &names {
        let Ok(dir) = root.open_dir(name) else {
            continue;
        };
        let dir_path = root_path.join(name);
        if dir.entry("origin").ok().flatten().is_some() {
            // A layer from before per-project layers.
            let layer = one_layer(&root, name, dir, &dir_path, clear, &mut listing)?;
            listing.groups.push(Group {
                project: None,
                name: name.clone(),
                layers: vec![layer],
            });
            continue;
        }
        let project = dir
            .read(PROJECT_FILE, MAX_ORIGIN)
            .ok()
            .flatten()
            .map(|o| String::from_utf8_lossy(o.trim_ascii_end()).into_owned())
            .unwrap_or_else(|| "(unknown)".to_owned());
        let layer_names = directories(&dir).map_err(|source| SandyError::File {
            step: "cannot list Sandy's cache layers in",
            path: dir_path.clone(),
            source,
        })?;
        let before = listing.in_use;
        let mut layers = Vec::new();
        for layer_name in &layer_names {
            let Ok(layer) = dir.open_dir(layer_name) else {
                continue;
            };
            layers.push(one_layer(
                &dir,
                layer_name,
                layer,
                &dir_path.join(layer_name),
                clear,
                &mut listing,
            )?);
        }
        // A project none of whose layers is left: its directory goes too.
        if clear && listing.in_use == before {
            let _ = dir.remove_entry(PROJECT_FILE);
            let _ = root.remove_dir(name);
        }
        listing.groups.push(Group {
            project: Some(project),
            name: name.clone(),
            layers,
        });
    }
    Ok(listing)
}

/// The directories in `dir`, sorted by name.
fn directories(dir: &Dir) -> std::io::Result<Vec<OsString>> {
    let mut names: Vec<OsString> = dir
        .entries(crate::hostfs::MAX_ENTRIES)?
        .into_iter()
        .filter(|e| e.kind == Kind::Directory)
        .map(|e| e.name)
        .collect();
    names.sort();
    Ok(names)
}

/// One layer (`name` in `parent`, opened as `layer`), removed with `clear` unless a
/// running sandbox holds it.
fn one_layer(
    parent: &Dir,
    name: &OsStr,
    layer: Dir,
    path: &Path,
    clear: bool,
    listing: &mut Listing,
) -> Result<Layer, SandyError> {
    let size = parent.disk_usage(name, crate::hostfs::MAX_ENTRIES);
    let origin = layer
        .read("origin", MAX_ORIGIN)
        .ok()
        .flatten()
        .map(|o| String::from_utf8_lossy(o.trim_ascii_end()).into_owned())
        .unwrap_or_default();
    let mut outcome = Outcome::Listed;
    if clear {
        if !layer.try_lock(true).map_err(|source| SandyError::File {
            step: "cannot lock the cache layer",
            path: path.to_path_buf(),
            source,
        })? {
            listing.in_use += 1;
            return Ok(Layer {
                name: name.to_os_string(),
                size,
                origin,
                outcome: Outcome::InUse,
            });
        }
        remove_layer(parent, name, &layer).map_err(|source| SandyError::File {
            step: "cannot remove the cache layer",
            path: path.to_path_buf(),
            source,
        })?;
        outcome = Outcome::Removed;
    }
    listing.total += size;
    Ok(Layer {
        name: name.to_os_string(),
        size,
        origin,
        outcome,
    })
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

/// A cache's overlay with this run's work directory.
fn overlay_of(cache: &ToolCache) -> ManifestOverlay {
    ManifestOverlay {
        lower: cache.path.as_path().into(),
        upper: cache.upper().as_path().into(),
        work: cache.layer.join(work_name()).as_path().into(),
    }
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

    /// A process id that no process has now.
    fn gone_pid(after: u32) -> u32 {
        (after..after + 100_000)
            .find(|&p| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), None)
                    == Err(nix::errno::Errno::ESRCH)
            })
            .unwrap()
    }

    #[test]
    fn stale_work_dirs_are_removed_whole_unless_stopped_first() {
        let layer = tempfile::tempdir().unwrap();
        let (one, two) = (gone_pid(3_000_000), gone_pid(3_100_000));
        let a = kernel_work_dir(layer.path(), one);
        let b = kernel_work_dir(layer.path(), two);
        // A live process's (this one's) is never removed.
        let mine = kernel_work_dir(layer.path(), std::process::id());
        let layers = [Dir::open(layer.path()).unwrap()];
        remove_stale_work_dirs(&layers, &AtomicBool::new(true));
        assert!(
            a.join("work").exists() && b.join("work").exists(),
            "removed after the stop"
        );
        remove_stale_work_dirs(&layers, &AtomicBool::new(false));
        assert!(!a.exists() && !b.exists());
        assert!(mine.exists());
    }

    #[test]
    fn more_leftovers_than_one_listing_holds_are_all_removed() {
        let layer = tempfile::tempdir().unwrap();
        let mut pid = 3_200_000;
        for _ in 0..LOOK_AT + 50 {
            pid = gone_pid(pid + 1);
            std::fs::create_dir_all(layer.path().join(format!("work-{pid}/work"))).unwrap();
        }
        std::fs::create_dir(layer.path().join("upper")).unwrap();
        remove_stale_work_dirs(&[Dir::open(layer.path()).unwrap()], &AtomicBool::new(false));
        let left: Vec<_> = std::fs::read_dir(layer.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![OsString::from("upper")]);
    }

    #[test]
    fn a_layer_is_listed_when_its_links_say_another_run_left_a_directory() {
        let layer = tempfile::tempdir().unwrap();
        std::fs::create_dir(layer.path().join("upper")).unwrap();
        std::fs::create_dir(layer.path().join("work-1")).unwrap();
        let links = |p: &Path| {
            std::os::unix::fs::MetadataExt::nlink(&std::fs::symlink_metadata(p).unwrap())
        };
        // `upper` and this run's own work directory: nothing else.
        assert!(!may_hold_others(links(layer.path())));
        std::fs::create_dir(layer.path().join("work-2")).unwrap();
        assert!(may_hold_others(links(layer.path())));
        // A file system that does not count subdirectories in links.
        assert!(may_hold_others(1));
    }
}
