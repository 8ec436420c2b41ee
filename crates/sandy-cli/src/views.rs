//! Prepares the copies the sandbox sees in place of host files ([`sandy_policy::FileView`]):
//! a credential-filtered, read-only copy, or a writable private copy. They live in a
//! per-run directory next to the private `/tmp` (mode 0700, removed after the run), which
//! the sandbox cannot see.

use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandy_policy::filter::filter_file;
use sandy_policy::{FileView, ManifestView, ViewKind};

use crate::error::SandyError;

/// The largest host file Sandy copies into a view.
const MAX_VIEW_BYTES: u64 = 4 * 1024 * 1024;

/// The prepared copies of one run. Dropping it removes them.
pub struct PreparedViews {
    dir: Option<PathBuf>,
    entries: Vec<(FileView, PathBuf)>,
}

impl PreparedViews {
    /// Copies (and filters) every view's host file into a fresh per-run directory under
    /// `base`. Nothing is created when there are no views.
    pub fn prepare(views: &[FileView], base: &Path) -> Result<Self, SandyError> {
        let io = |step| move |source| SandyError::Io { step, source };
        if views.is_empty() {
            return Ok(PreparedViews {
                dir: None,
                entries: Vec::new(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix("sandy-views-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .map_err(io("cannot create the directory for prepared files"))?
            .keep();
        let mut prepared = PreparedViews {
            dir: Some(dir.clone()),
            entries: Vec::with_capacity(views.len()),
        };
        for (i, view) in views.iter().enumerate() {
            let content = read_bounded(&view.target)
                .map_err(io("cannot read a file the sandbox sees as a copy"))?;
            let (content, mode) = match view.kind {
                ViewKind::Filtered => (filter_file(&view.target, &content), 0o400),
                ViewKind::PrivateCopy => (content, 0o600),
            };
            let source = dir.join(format!("{i}"));
            write_new(&source, &content, mode)
                .map_err(io("cannot write a file the sandbox sees as a copy"))?;
            prepared.entries.push((view.clone(), source));
        }
        Ok(prepared)
    }

    /// What the bootstrap binds, in the manifest's form.
    pub fn manifest_views(&self) -> Vec<ManifestView> {
        self.entries
            .iter()
            .map(|(view, source)| ManifestView {
                source: source.as_path().into(),
                target: view.target.as_path().into(),
                writable: view.kind == ViewKind::PrivateCopy,
            })
            .collect()
    }

    /// The private copy the sandbox wrote in place of `target`, after the run.
    #[allow(dead_code)] // the agent state merge (issue 13) is its first user
    pub fn private_copy(&self, target: &Path) -> Option<&Path> {
        self.entries
            .iter()
            .find(|(v, _)| v.kind == ViewKind::PrivateCopy && v.target == target)
            .map(|(_, source)| source.as_path())
    }
}

impl Drop for PreparedViews {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                eprintln!(
                    "sandy: cannot remove the prepared files in {}: {e}",
                    dir.display()
                );
            }
        }
    }
}

/// Reads a regular file (following the user's own symlinks), without blocking on a FIFO
/// and refusing anything larger than [`MAX_VIEW_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_nonblock())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_VIEW_BYTES {
        return Err(std::io::Error::other("larger than 4 MiB"));
    }
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_VIEW_BYTES + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_VIEW_BYTES {
        return Err(std::io::Error::other("larger than 4 MiB"));
    }
    Ok(out)
}

fn libc_nonblock() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}

fn write_new(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    file.write_all(content)?;
    file.sync_all()
}
