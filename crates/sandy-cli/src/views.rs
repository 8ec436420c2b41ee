//! Prepares the copies the sandbox sees in place of host files ([`sandy_policy::FileView`]):
//! a credential-filtered, read-only copy, or a writable private copy.
//!
//! A filtered copy of at most 64 KiB (all of them together at most 256 KiB) travels in
//! the launch manifest, and the bootstrap writes it into the sandbox's private `/run`:
//! nothing of it is ever written to the host. The others live in a per-run directory
//! next to the private `/tmp` (mode 0700), which the sandbox cannot see. A filtered copy
//! there is removed as soon as the target has started (the sandbox's bind mount holds it
//! from then on), a private copy after the run, once it is merged back.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sandy_policy::filter::filter_view;
use sandy_policy::{
    FileView, ManifestView, OsBytes, StateFile, StateFormat, ViewKind, MAX_INLINE_VIEWS_BYTES,
    MAX_INLINE_VIEW_BYTES,
};

use crate::error::SandyError;
use crate::run::PrivateTmp;
use crate::verify::read_regular;

/// The largest host file Sandy copies into a view.
const MAX_VIEW_BYTES: usize = 4 * 1024 * 1024;

/// The prepared copies of one run. Dropping it removes them.
pub struct PreparedViews {
    /// The per-run directory holding the copies; removed when dropped.
    dir: Option<PrivateTmp>,
    entries: Vec<(FileView, PathBuf)>,
    /// Filtered copies small enough to travel in the manifest: the bootstrap writes them
    /// into the sandbox's private `/run`, and no file of theirs is ever on the host.
    inline: Vec<(FileView, Vec<u8>)>,
    /// The host content each private copy started from (the base of a state merge).
    originals: Vec<(PathBuf, Vec<u8>)>,
}

impl PreparedViews {
    /// The per-run directory holding the copies, if this run has one.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_ref().map(|d| d.path.as_path())
    }

    /// Copies (and filters) every view's host file into a fresh per-run directory under
    /// `base`. Nothing is created when there are no views. The copy of an agent state
    /// file comes from the host file even when the agent reads it under another name
    /// inside, and starts as `{}` when the host file does not exist yet.
    pub fn prepare(
        views: &[FileView],
        state_files: &[StateFile],
        base: &Path,
    ) -> Result<Self, SandyError> {
        let io = |step| move |source| SandyError::Io { step, source };
        let mut unbound = PreparedViews {
            dir: None,
            entries: Vec::new(),
            inline: Vec::new(),
            originals: Vec::new(),
        };
        // State files the agent reads under a name of Sandy's own: a plain copy there.
        for file in state_files.iter().filter(|f| !f.bound) {
            let content = read_state(&file.path, file.format)
                .map_err(io("cannot read an agent's state file"))?;
            if let Some(mirror) = &file.mirror {
                // A fresh stand-in directory (whatever a killed run left is replaced).
                crate::agentstate::clear_stand_in(&file.inside)
                    .map_err(io("cannot clear an agent's stand-in state directory"))?;
                write_private_copy(&file.inside, &content)
                    .map_err(io("cannot write the private copy of an agent's state file"))?;
                crate::agentstate::link_mirror(&file.inside, mirror).map_err(io(
                    "cannot link an agent's state into its stand-in directory",
                ))?;
            } else {
                write_private_copy(&file.inside, &content)
                    .map_err(io("cannot write the private copy of an agent's state file"))?;
            }
            unbound.originals.push((file.inside.clone(), content));
        }
        if views.is_empty() {
            return Ok(unbound);
        }
        let mut prepared = unbound;
        let mut inline_bytes = 0usize;
        for (i, view) in views.iter().enumerate() {
            let state = state_files.iter().find(|f| f.inside == view.name());
            let content = match state {
                Some(f) => read_state(&f.path, f.format)
                    .map_err(io("cannot read an agent's state file"))?,
                None => read_bounded(&view.target)
                    .map_err(io("cannot read a file the sandbox sees as a copy"))?,
            };
            let (content, mode) = match view.kind {
                // The rule follows the name the tool reads (`~/.npmrc`), not the file
                // a dotfile manager's link leads to.
                ViewKind::Filtered => (filter_view(view.rule, view.name(), &content), 0o400),
                ViewKind::PrivateCopy => {
                    prepared
                        .originals
                        .push((view.name().to_path_buf(), content.clone()));
                    (content, 0o600)
                }
            };
            // What the copy adds to the manifest's wire form counts, so that the manifest
            // stays within its bound whatever the file holds.
            let inline = (view.kind == ViewKind::Filtered)
                .then(|| wire_len(&content))
                .flatten()
                .filter(|n| {
                    *n <= MAX_INLINE_VIEW_BYTES && inline_bytes + n <= MAX_INLINE_VIEWS_BYTES
                });
            if let Some(n) = inline {
                inline_bytes += n;
                prepared.inline.push((view.clone(), content));
                continue;
            }
            // A locked per-run directory (`sandy-views-XXXXXX`), made with the first copy
            // that is a file: removed with this value, or by the next run if this
            // supervisor is killed.
            let dir = match &prepared.dir {
                Some(dir) => &dir.path,
                None => {
                    &prepared
                        .dir
                        .insert(PrivateTmp::create_kind(base, Some("views"))?)
                        .path
                }
            };
            let source = dir.join(format!("{i}"));
            write_new(&source, &content, mode)
                .map_err(io("cannot write a file the sandbox sees as a copy"))?;
            prepared.entries.push((view.clone(), source));
        }
        Ok(prepared)
    }

    /// Once the bootstrap has bound every view (the target has started): the filtered
    /// copies leave the host at once, beside the run instead of after it. The sandbox keeps
    /// reading them through its mounts, which hold them. The per-run directory goes too
    /// when it holds no private copy, which is merged back after the run.
    pub fn release_bound(&mut self) {
        for (view, source) in &self.entries {
            if view.kind == ViewKind::Filtered {
                let _ = std::fs::remove_file(source);
            }
        }
        if self
            .entries
            .iter()
            .all(|(view, _)| view.kind == ViewKind::Filtered)
        {
            self.dir = None;
        }
    }

    /// What the bootstrap binds, in the manifest's form.
    pub fn manifest_views(&self) -> Vec<ManifestView> {
        let files = self.entries.iter().map(|(view, source)| ManifestView {
            source: source.as_path().into(),
            target: view.target.as_path().into(),
            writable: view.kind == ViewKind::PrivateCopy,
            content: None,
        });
        let inline = self.inline.iter().map(|(view, content)| ManifestView {
            source: OsBytes::default(),
            target: view.target.as_path().into(),
            writable: false,
            content: Some(OsBytes(content.clone())),
        });
        files.chain(inline).collect()
    }

    /// The private copy the sandbox wrote in place of `target`, after the run (for a
    /// state file under a name of Sandy's own, that name itself).
    pub fn private_copy<'a>(&'a self, target: &'a Path) -> Option<&'a Path> {
        self.entries
            .iter()
            .find(|(v, _)| v.kind == ViewKind::PrivateCopy && v.name() == target)
            .map(|(_, source)| source.as_path())
            .or_else(|| {
                self.originals
                    .iter()
                    .any(|(t, _)| t == target)
                    .then_some(target)
            })
    }

    /// The host content the private copy of `target` started from.
    pub fn original(&self, target: &Path) -> Option<&[u8]> {
        self.originals
            .iter()
            .find(|(t, _)| t == target)
            .map(|(_, content)| content.as_slice())
    }
}

/// The length of `content` in the manifest's JSON, where a text that is UTF-8 is a
/// string (a quote, a backslash or a control character escaped, at most six bytes), or
/// `None` for anything else (an array of numbers, up to four bytes per byte: such a copy
/// stays a file).
fn wire_len(content: &[u8]) -> Option<usize> {
    std::str::from_utf8(content).ok()?;
    Some(
        content
            .iter()
            .map(|&b| match b {
                b'"' | b'\\' | b'\n' | b'\t' | b'\r' | 0x08 | 0x0c => 2,
                0..=0x1f => 6,
                _ => 1,
            })
            .sum(),
    )
}

/// Reads a regular file (following the user's own symlinks), without blocking on a FIFO
/// and refusing anything larger than [`MAX_VIEW_BYTES`].
pub(crate) fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    read_view_source(path, true)
}

/// [`read_bounded`] without following a symlink at the name itself.
pub(crate) fn read_bounded_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    read_view_source(path, false)
}

fn read_view_source(path: &Path, follow: bool) -> std::io::Result<Vec<u8>> {
    read_regular(path, MAX_VIEW_BYTES, follow)?
        .ok_or_else(|| std::io::Error::other("not a regular file, or larger than 4 MiB"))
}

/// An agent's state file at launch: its content, or an empty document (`{}` for JSON,
/// nothing for TOML) when it does not exist yet.
fn read_state(path: &Path, format: StateFormat) -> std::io::Result<Vec<u8>> {
    let empty = || match format {
        StateFormat::Json => b"{}\n".to_vec(),
        StateFormat::Toml => Vec::new(),
    };
    match read_bounded(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(empty()),
        // The empty mount point Sandy created for a state file bound in place (absent on
        // the host): the agent starts from an empty document, not from invalid JSON.
        Ok(content) if content.trim_ascii().is_empty() => Ok(empty()),
        other => other,
    }
}

/// Writes the copy of a state file at a name of Sandy's own inside a writable state
/// directory (whatever a previous run left there is replaced; missing parents are
/// created, mode 0700).
fn write_private_copy(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    write_new(path, content, 0o600)
}

fn write_new(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    // Not synced: a copy for one run, read through the page cache and removed after it.
    file.write_all(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The estimate is the JSON encoder's own length, and non-UTF-8 content is left out.
    #[test]
    fn wire_lengths_are_the_json_lengths() {
        for text in [
            "",
            "alias ll='ls -l'\n",
            "quote \" and back\\slash\ttab\r\u{8}\u{c}",
            "\u{1}\u{1f} control",
            "unicode é ü ∑",
        ] {
            let json = serde_json::to_string(text).unwrap();
            assert_eq!(wire_len(text.as_bytes()), Some(json.len() - 2), "{text:?}");
        }
        assert_eq!(wire_len(b"\xff\xfe"), None);
    }
}
