//! Prepares the copies the sandbox sees in place of host files ([`sandy_policy::FileView`]):
//! a credential-filtered, read-only copy, or a writable private copy.
//!
//! A filtered copy of at most 64 KiB (all of them together at most 256 KiB) travels in
//! the launch manifest, and the bootstrap writes it into the sandbox's private `/run`:
//! nothing of it is ever written to the host. The others live in a per-run directory
//! next to the private `/tmp` (mode 0700), which the sandbox cannot see. A filtered copy
//! there is removed as soon as the target has started (the sandbox's bind mount holds it
//! from then on), a private copy after the run, once it is merged back.

use std::path::{Path, PathBuf};

use sandy_policy::filter::filter_view;
use sandy_policy::{
    FileView, ManifestView, OsBytes, StateFile, StateFormat, ViewKind, MAX_INLINE_VIEWS_BYTES,
    MAX_INLINE_VIEW_BYTES,
};

use crate::agentstate::StandIn;
use crate::error::SandyError;
use crate::rundir::RunDir;

/// The largest host file Sandy copies into a view.
const MAX_VIEW_BYTES: usize = 4 * 1024 * 1024;

/// The prepared copies of one run. Dropping it removes them.
pub struct PreparedViews {
    /// The per-run directory holding the copies; removed when dropped.
    dir: Option<RunDir>,
    entries: Vec<(FileView, PathBuf)>,
    /// Filtered copies small enough to travel in the manifest: the bootstrap writes them
    /// into the sandbox's private `/run`, and no file of theirs is ever on the host.
    inline: Vec<(FileView, Vec<u8>)>,
    /// The host content each private copy started from (the base of a state merge).
    originals: Vec<(PathBuf, Vec<u8>)>,
    /// The stand-in state directories of this run (by the name the agent reads its
    /// state file at), locked until they are emptied back after the run.
    stand_ins: Vec<(PathBuf, StandIn)>,
}

impl PreparedViews {
    /// The per-run directory holding the copies, if this run has one.
    pub fn dir(&self) -> Option<&RunDir> {
        self.dir.as_ref()
    }

    /// Copies (and filters) every view's host file into a fresh per-run directory under
    /// `base`. Nothing is created when there are no views. The copy of an agent state
    /// file comes from the host file even when the agent reads it under another name
    /// inside, and starts as `{}` when the host file does not exist yet. `writable` is
    /// where this run may write: a name there is reached without following any link
    /// ([`crate::hostfs`]).
    pub fn prepare(
        views: &[FileView],
        state_files: &[StateFile],
        base: &Path,
        writable: &[&Path],
    ) -> Result<Self, SandyError> {
        let mut unbound = PreparedViews {
            dir: None,
            entries: Vec::new(),
            inline: Vec::new(),
            originals: Vec::new(),
            stand_ins: Vec::new(),
        };
        // State files the agent reads under a name of Sandy's own: a plain copy there.
        for file in state_files.iter().filter(|f| !f.bound) {
            let content = read_state(&file.path, file.format, writable).map_err(|source| {
                SandyError::File {
                    step: "cannot read the agent's state file",
                    path: file.path.clone(),
                    source,
                }
            })?;
            let content = inside_content(file, content);
            if let Some(mirror) = &file.mirror {
                // A fresh, locked stand-in directory (whatever a killed run left is
                // recovered first, by `agentstate::create_at_launch`).
                let stand_in =
                    StandIn::prepare(file, mirror, writable, &content).map_err(|source| {
                        SandyError::File {
                            step: "cannot prepare the stand-in state directory in",
                            path: mirror.clone(),
                            source,
                        }
                    })?;
                unbound.stand_ins.push((file.inside.clone(), stand_in));
            } else {
                write_private_copy(&file.inside, &content, writable).map_err(|source| {
                    SandyError::File {
                        step: "cannot write the private copy of an agent's state file",
                        path: file.inside.clone(),
                        source,
                    }
                })?;
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
                Some(f) => inside_content(
                    f,
                    read_state(&f.path, f.format, writable).map_err(|source| SandyError::File {
                        step: "cannot read the agent's state file",
                        path: f.path.clone(),
                        source,
                    })?,
                ),
                None => read_named(&view.target, writable).map_err(|source| SandyError::File {
                    step: "cannot read a file the sandbox sees as a copy,",
                    path: view.target.clone(),
                    source,
                })?,
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
                Some(dir) => dir,
                None => prepared
                    .dir
                    .insert(RunDir::create_kind(base, Some("views"))?),
            };
            let name = i.to_string();
            dir.dir()
                .write_new(&name, &content, mode)
                .map_err(|source| SandyError::File {
                    step: "cannot write the copy the sandbox sees of",
                    path: view.target.clone(),
                    source,
                })?;
            prepared.entries.push((view.clone(), dir.path.join(name)));
        }
        Ok(prepared)
    }

    /// Once the bootstrap has bound every view (the target has started): the filtered
    /// copies leave the host at once, beside the run instead of after it. The sandbox keeps
    /// reading them through its mounts, which hold them. The per-run directory goes too
    /// when it holds no private copy, which is merged back after the run.
    pub fn release_bound(&mut self) {
        if let Some(dir) = &self.dir {
            for (view, source) in &self.entries {
                if let (ViewKind::Filtered, Some(name)) = (view.kind, source.file_name()) {
                    let _ = dir.dir().remove_file(name);
                }
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

    /// What the sandbox left in the private copy of `target` after the run (for a
    /// state file under a name of Sandy's own, at that name, reached without following a
    /// link); `None` when `target` has none.
    pub fn read_private_copy(
        &self,
        target: &Path,
        writable: &[&Path],
    ) -> Option<std::io::Result<Vec<u8>>> {
        let regular = |read: std::io::Result<Option<Vec<u8>>>| {
            read.and_then(|bytes| {
                bytes.ok_or_else(|| {
                    std::io::Error::other("not a regular file, or larger than 4 MiB")
                })
            })
        };
        if let Some((_, source)) = self
            .entries
            .iter()
            .find(|(v, _)| v.kind == ViewKind::PrivateCopy && v.name() == target)
        {
            let dir = self.dir.as_ref()?;
            let name = source.file_name()?;
            return Some(regular(dir.dir().read(name, MAX_VIEW_BYTES)));
        }
        if let Some((_, stand_in)) = self.stand_ins.iter().find(|(t, _)| t == target) {
            return Some(regular(stand_in.read_copy(MAX_VIEW_BYTES)));
        }
        self.originals.iter().any(|(t, _)| t == target).then(|| {
            regular(
                crate::hostfs::locate(target, writable.iter().copied(), false)
                    .and_then(|(dir, name)| dir.read(name, MAX_VIEW_BYTES)),
            )
        })
    }

    /// The stand-in state directory of the agent's state file read at `target`.
    pub fn stand_in(&self, target: &Path) -> Option<&StandIn> {
        self.stand_ins
            .iter()
            .find(|(t, _)| t == target)
            .map(|(_, s)| s)
    }

    /// The stand-in state directory of the agent's state file read at `target`, taken
    /// out (to be emptied back into the real one after the run).
    pub fn take_stand_in(&mut self, target: &Path) -> Option<StandIn> {
        let i = self.stand_ins.iter().position(|(t, _)| t == target)?;
        Some(self.stand_ins.remove(i).1)
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

/// How many lines the credential filter drops from each filtered copy of `policy` (for
/// the dry run's text form): each file read and filtered as a launch would, nothing
/// written.
pub fn dropped_counts(policy: &sandy_policy::ResolvedPolicy) -> Vec<(PathBuf, usize)> {
    let writable: Vec<&Path> = policy.writable_paths().collect();
    policy
        .views
        .iter()
        .filter(|v| v.kind == ViewKind::Filtered)
        .filter_map(|v| {
            let text = read_named(&v.target, &writable).ok()?;
            let filtered = filter_view(v.rule, v.name(), &text);
            Some((
                v.target.clone(),
                sandy_policy::filter::dropped_lines(&text, &filtered),
            ))
        })
        .collect()
}

/// Reads a file the user keeps by its name (a start-up file, an agent's state file): a
/// regular file of at most [`MAX_VIEW_BYTES`], never blocking on a FIFO; a link at the
/// name is followed only outside every place a run may write (a dotfile manager's link
/// in the home), and no link below such a place ([`crate::hostfs::locate`]).
/// The `landlock` tier: the filtered copies of git's configuration files, written into
/// the run's own directory on the host (`dir`, at `private_tmp`), where git's variables
/// name them ([`sandy_policy::git_copy`]). The run may change its copies; they go with
/// the directory.
pub fn write_tier_copies(
    views: &[FileView],
    dir: &crate::hostfs::Dir,
    private_tmp: &Path,
    writable: &[&Path],
) -> Result<(), SandyError> {
    for view in views {
        let Some((_, dest)) = sandy_policy::git_copy(private_tmp, view) else {
            continue;
        };
        let Some(name) = dest.file_name() else {
            continue;
        };
        let content = read_named(&view.target, writable).map_err(|source| SandyError::File {
            step: "cannot read a file the sandbox sees as a copy,",
            path: view.target.clone(),
            source,
        })?;
        let content = filter_view(view.rule, view.name(), &content);
        dir.write_new(name, &content, 0o400)
            .map_err(|source| SandyError::Io {
                step: "cannot write a file the sandbox sees as a copy",
                source,
            })?;
    }
    Ok(())
}

pub(crate) fn read_named(path: &Path, writable: &[&Path]) -> std::io::Result<Vec<u8>> {
    let outside = !writable.iter().any(|w| path.starts_with(w));
    let (dir, name) = crate::hostfs::locate(path, writable.iter().copied(), outside)?;
    dir.read(name, MAX_VIEW_BYTES)?
        .ok_or_else(|| std::io::Error::other("not a regular file, or larger than 4 MiB"))
}

/// An agent's state file at launch: its content, or an empty document (`{}` for JSON,
/// nothing for TOML) when it does not exist yet. A link at its name is followed (a
/// dotfile manager's): every profile protects its state file read-only, so no run can
/// have made that link.
fn read_state(path: &Path, format: StateFormat, writable: &[&Path]) -> std::io::Result<Vec<u8>> {
    let empty = || match format {
        StateFormat::Json => b"{}\n".to_vec(),
        StateFormat::Toml => Vec::new(),
    };
    let read =
        crate::hostfs::locate(path, writable.iter().copied(), true).and_then(|(dir, name)| {
            dir.read(name, MAX_VIEW_BYTES)?
                .ok_or_else(|| std::io::Error::other("not a regular file, or larger than 4 MiB"))
        });
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(empty()),
        // The empty mount point Sandy created for a state file bound in place (absent on
        // the host): the agent starts from an empty document, not from invalid JSON.
        Ok(content) if content.trim_ascii().is_empty() => Ok(empty()),
        other => other,
    }
}

/// The copy of a state file the agent starts from: the host content with the profile's
/// inside-only settings (unchanged when it does not parse: the agent reports that).
fn inside_content(file: &StateFile, content: Vec<u8>) -> Vec<u8> {
    sandy_policy::statemerge::with_inside_settings(file.format, &content, &file.inside_settings)
        .unwrap_or(content)
}

/// Writes the copy of a state file at a name of Sandy's own inside a writable state
/// directory (whatever a previous run left at that name is removed first; the directory
/// must exist).
fn write_private_copy(path: &Path, content: &[u8], writable: &[&Path]) -> std::io::Result<()> {
    let (dir, name) = crate::hostfs::locate(path, writable.iter().copied(), false)?;
    dir.remove_entry(&name)?;
    dir.write_new(&name, content, 0o600)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
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
