//! The project policy: `sandy.toml` at the top of the project (the working directory;
//! a parent's does not count), for the grants a repository needs. It lies inside the
//! project, which every run may write, so it is honoured only for a content the user
//! approved outside the sandbox: `sandy trust` shows what it adds, asks, and records the
//! content's SHA-256 with the project's canonical path in `~/.config/sandy/trusted/`
//! (one file per project, written through `hostfs`). At launch:
//!
//! - no `sandy.toml`: nothing;
//! - one never trusted (or not a regular file, or unreadable, with no record): ignored,
//!   with one line saying how to trust it; the launch goes on;
//! - one whose content is the trusted one: its rules apply (origin `project_file`);
//! - one trusted but changed since (or no longer a regular file): the launch is refused
//!   (exit 125), since the run itself may have rewritten it. Ignoring it instead would
//!   start the agent without grants the user relies on, and hide the change in a line
//!   among others; refusing makes the user look (`sandy trust`) before anything runs.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandy_policy::files::{self, FileRole, FileRules, ProjectPolicyState, PROJECT_FILE_NAME};
use sandy_policy::text::Shown;
use sandy_policy::HostContext;
use sha2::{Digest, Sha256};

use crate::error::SandyError;
use crate::hostfs::{self, UserFile};

/// The largest trust record read.
const MAX_RECORD_BYTES: usize = 4096;

/// Why a project policy stops a launch or an approval. Each is one line.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(
        "{}: changed since you trusted it: review with `sandy trust`",
        Shown(path)
    )]
    Changed { path: PathBuf },
    #[error(
        "{}: {what}, not a regular file: a project policy is a regular file at the top of \
         the project (a link is never followed)",
        Shown(path)
    )]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: larger than {} bytes", Shown(path), files::MAX_POLICY_FILE_BYTES)]
    TooLarge { path: PathBuf },
    #[error("no {PROJECT_FILE_NAME} in {}: nothing to trust", Shown(project))]
    Absent { project: PathBuf },
    #[error(
        "the trust records' directory {} is inside the project {}: set XDG_CONFIG_HOME \
         outside it",
        Shown(dir),
        Shown(project)
    )]
    RecordInProject { dir: PathBuf, project: PathBuf },
    #[error("no configuration directory for the trust record: set HOME or XDG_CONFIG_HOME")]
    NoConfigDir,
}

/// The project file as found, read without following a link.
enum Found {
    Absent,
    /// Something else than a regular file at the name (a link, a directory, ...).
    NotRegular(&'static str),
    TooLarge,
    Read(Vec<u8>),
}

/// What a launch does with the project file.
pub enum ForLaunch {
    /// No `sandy.toml`.
    None,
    /// Ignored: never trusted. The state is for the dry run; the line for the user.
    Ignored(ProjectPolicyState, String),
    /// Ignored: not a regular file, or too large, and never trusted (the line says so).
    Unusable(String),
    /// Trusted: its rules, and the trust record they rest on (refused if the run could
    /// write it).
    Applied(Box<FileRules>, PathBuf),
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn file_path(project: &Path) -> PathBuf {
    project.join(PROJECT_FILE_NAME)
}

/// Reads `sandy.toml` from the project's directory, opened by its canonical path with no
/// link followed, and the name itself opened without following it.
fn read(project: &Path) -> Result<Found, SandyError> {
    let path = file_path(project);
    let io = |source| SandyError::File {
        step: "cannot read",
        path: path.clone(),
        source,
    };
    let dir = hostfs::Dir::open_exact(project).map_err(io)?;
    let Some(st) = dir.entry(PROJECT_FILE_NAME).map_err(io)? else {
        return Ok(Found::Absent);
    };
    if st.kind != hostfs::Kind::File {
        return Ok(Found::NotRegular(st.kind.describe()));
    }
    match dir
        .read(PROJECT_FILE_NAME, files::MAX_POLICY_FILE_BYTES)
        .map_err(io)?
    {
        Some(bytes) => Ok(Found::Read(bytes)),
        // Replaced by something else between the look and the read, or too large.
        None => match dir.entry(PROJECT_FILE_NAME).map_err(io)? {
            Some(st) if st.kind == hostfs::Kind::File => Ok(Found::TooLarge),
            Some(st) => Ok(Found::NotRegular(st.kind.describe())),
            None => Ok(Found::Absent),
        },
    }
}

/// The directory of trust records.
fn records_dir(host: &HostContext) -> Option<PathBuf> {
    crate::policyfiles::config_dir(host).map(|d| d.join("trusted"))
}

/// The record's file name: the SHA-256 of the project's canonical path.
fn record_name(project: &Path) -> String {
    format!("{}.toml", sha256_hex(project.as_os_str().as_bytes()))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    version: u32,
    project: String,
    sha256: String,
}

fn record_text(project: &Path, sha256: &str) -> String {
    let project = toml_string(&project.to_string_lossy());
    format!(
        "# Written by `sandy trust`: the content of {PROJECT_FILE_NAME} in this project that \
         you approved.\n# `sandy trust --revoke` in the project removes it.\nversion = 1\n\
         project = {project}\nsha256 = \"{sha256}\"\n"
    )
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The SHA-256 the user trusted for `project`, and the record's path; `None` without a
/// (valid) record for exactly this project.
fn trusted_hash(
    host: &HostContext,
    project: &Path,
) -> Result<Option<(String, PathBuf)>, SandyError> {
    let Some(dir) = records_dir(host) else {
        return Ok(None);
    };
    let path = dir.join(record_name(project));
    let found =
        hostfs::read_user_file(&path, MAX_RECORD_BYTES).map_err(|source| SandyError::File {
            step: "cannot read",
            path: path.clone(),
            source,
        })?;
    let UserFile::Read(bytes) = found else {
        return Ok(None);
    };
    let record: Option<Record> = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| toml::from_str(t).ok());
    Ok(record
        .filter(|r| r.version == 1 && r.project == project.to_string_lossy())
        .map(|r| (r.sha256, path)))
}

/// The project policy of a launch in `host.cwd`.
pub fn for_launch(host: &HostContext) -> Result<ForLaunch, SandyError> {
    let project = host.cwd.as_path();
    let path = file_path(project);
    let found = read(project)?;
    if matches!(found, Found::Absent) {
        return Ok(ForLaunch::None);
    }
    let trusted = trusted_hash(host, project)?;
    let how = "review and trust it with `sandy trust`";
    let bytes = match (found, trusted.is_some()) {
        (Found::Absent, _) => return Ok(ForLaunch::None),
        (Found::Read(bytes), _) => bytes,
        (Found::NotRegular(what), true) => return Err(TrustError::NotRegular { path, what }.into()),
        (Found::TooLarge, true) => return Err(TrustError::TooLarge { path }.into()),
        (Found::NotRegular(what), false) => {
            let line = format!(
                "ignoring {}: {what}, not a regular file (and never trusted)",
                Shown(&path)
            );
            return Ok(ForLaunch::Unusable(line));
        }
        (Found::TooLarge, false) => {
            let line = format!(
                "ignoring {}: larger than {} bytes (and never trusted)",
                Shown(&path),
                files::MAX_POLICY_FILE_BYTES
            );
            return Ok(ForLaunch::Unusable(line));
        }
    };
    let sha256 = sha256_hex(&bytes);
    match trusted {
        Some((hash, record)) if hash == sha256 => {
            let text = String::from_utf8(bytes)
                .map_err(|_| files::FileError::NotText { path: path.clone() })?;
            let mut rules = files::parse_project_file(&text, &path, host.home.as_deref(), project)?;
            rules.project = Some(ProjectPolicyState {
                path,
                sha256,
                trusted: true,
            });
            Ok(ForLaunch::Applied(Box::new(rules), record))
        }
        Some(_) => Err(TrustError::Changed { path }.into()),
        None => {
            let line = format!(
                "ignoring {}: not trusted, its grants do not apply; {how}",
                Shown(&path)
            );
            Ok(ForLaunch::Ignored(
                ProjectPolicyState {
                    path,
                    sha256,
                    trusted: false,
                },
                line,
            ))
        }
    }
}

/// Adds the project policy of a launch to what the user's files add: its rules when
/// trusted (and its record among the files the run may not write), its state either way.
pub fn add_to(
    loaded: &mut crate::policyfiles::Loaded,
    host: &HostContext,
) -> Result<(), SandyError> {
    match for_launch(host)? {
        ForLaunch::None => {}
        ForLaunch::Ignored(state, line) => {
            say!("{line}");
            loaded.rules.project = Some(state);
        }
        ForLaunch::Unusable(line) => say!("{line}"),
        ForLaunch::Applied(rules, record) => {
            loaded.rules.extend(*rules);
            loaded.read.push((FileRole::TrustRecord, record));
        }
    }
    Ok(())
}

/// What `sandy trust --revoke` did.
#[derive(Debug)]
pub struct Revoked {
    /// Whether a record was removed (`false`: the project had none).
    pub removed: bool,
    /// The project.
    pub project: PathBuf,
    /// Its `sandy.toml`.
    pub file: PathBuf,
}

/// `sandy trust --revoke` in the project: its record removed, so that launches ignore
/// its `sandy.toml` again.
pub fn revoke() -> Result<Revoked, SandyError> {
    if crate::run::inside_sandy() {
        return Err(SandyError::Nested);
    }
    let host = crate::host::gather_without_git()?;
    let project = host.cwd.clone();
    let dir = records_dir(&host).ok_or(TrustError::NoConfigDir)?;
    let name = record_name(&project);
    let removed = match hostfs::Dir::open(&dir) {
        Ok(d) => match d.remove_file(&name) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => {
                return Err(SandyError::File {
                    step: "cannot remove",
                    path: dir.join(&name),
                    source,
                })
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(source) => {
            return Err(SandyError::File {
                step: "cannot open",
                path: dir,
                source,
            })
        }
    };
    Ok(Revoked {
        removed,
        file: file_path(&project),
        project,
    })
}

/// A project's `sandy.toml`, read once and checked as a run would resolve it, for the
/// user to approve ([`approve`] records exactly this content's digest).
#[derive(Debug)]
pub struct Review {
    /// The project.
    pub project: PathBuf,
    /// Its `sandy.toml`.
    pub file: PathBuf,
    /// The SHA-256 of the content reviewed.
    pub sha256: String,
    /// Its grants: the access, the path and the reason given.
    pub grants: Vec<(sandy_policy::Access, PathBuf, String)>,
    /// The destinations it allows (when a run's network is an allowlist).
    pub allow: Vec<String>,
    /// The host's local ports it opens.
    pub local_ports: Vec<u16>,
    /// Its rules as the dry run shows them (origin `project_file`).
    pub rules: serde_json::Value,
    records: PathBuf,
    record: String,
}

/// `sandy trust` in the project: reads its `sandy.toml` (bounded, a regular file, no
/// link followed), parses it, and resolves it as `sandy run -- true` here would; a grant
/// a flag could not give is refused now.
pub fn review() -> Result<Review, SandyError> {
    if crate::run::inside_sandy() {
        return Err(SandyError::Nested);
    }
    let host = crate::host::gather_without_git()?;
    let project = host.cwd.clone();
    let dir = records_dir(&host).ok_or(TrustError::NoConfigDir)?;
    let name = record_name(&project);
    if dir.starts_with(&project) {
        return Err(TrustError::RecordInProject { dir, project }.into());
    }
    let path = file_path(&project);
    let bytes = match read(&project)? {
        Found::Absent => return Err(TrustError::Absent { project }.into()),
        Found::NotRegular(what) => return Err(TrustError::NotRegular { path, what }.into()),
        Found::TooLarge => return Err(TrustError::TooLarge { path }.into()),
        Found::Read(bytes) => bytes,
    };
    let sha256 = sha256_hex(&bytes);
    let text =
        String::from_utf8(bytes).map_err(|_| files::FileError::NotText { path: path.clone() })?;
    let rules = files::parse_project_file(&text, &path, host.home.as_deref(), &project)?;
    // Resolved as a run of `true` here would resolve it: a grant `--read` would refuse
    // (the sensitive set, Sandy's own places, a path that does not exist) is refused now.
    let mut request = crate::host::status_request(&host, "generic", false);
    request.files = rules.clone();
    let policy = sandy_policy::resolve(&request, &host, &hostfs::HostFs)?;
    let doc = sandy_policy::DryRunDocument::new(&policy, 0);
    let doc = serde_json::to_value(&doc).map_err(|e| SandyError::Io {
        step: "cannot render the dry-run rules",
        source: e.into(),
    })?;
    let ours = |key: &str| -> Vec<serde_json::Value> {
        doc[key]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter(|r| r["origin"] == "project_file")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    let allow: Vec<String> = rules.allow.iter().map(|(p, _)| p.to_string()).collect();
    let rules_doc = serde_json::json!({
        "file_grants": ours("file_grants"),
        "local_port_grants": ours("local_port_grants"),
        "allow_domains": allow,
    });
    Ok(Review {
        grants: rules
            .grants
            .iter()
            .map(|g| (g.access, g.path.clone(), g.reason.clone()))
            .collect(),
        local_ports: rules.local_ports.iter().map(|(port, _)| *port).collect(),
        allow,
        rules: rules_doc,
        project,
        file: path,
        sha256,
        records: dir,
        record: name,
    })
}

/// Records the reviewed content's digest: launches in the project apply its
/// `sandy.toml` while its content stays the same. Returns the record's path.
pub fn approve(review: &Review) -> Result<PathBuf, SandyError> {
    let dir = &review.records;
    let name = &review.record;
    let handle = hostfs::open_or_create(dir, 0o700).map_err(|source| SandyError::File {
        step: "cannot create",
        path: dir.clone(),
        source,
    })?;
    handle
        .replace(
            name,
            record_text(&review.project, &review.sha256).as_bytes(),
            0o600,
            None,
        )
        .map_err(|source| SandyError::File {
            step: "cannot write",
            path: dir.join(name),
            source,
        })?;
    Ok(dir.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_its_project_and_parses_back() {
        let project = Path::new("/home/u/a \"quoted\"\\proj");
        let text = record_text(project, &sha256_hex(b"x"));
        let record: Record = toml::from_str(&text).unwrap();
        assert_eq!(record.version, 1);
        assert_eq!(record.project, project.to_string_lossy());
        assert_eq!(record.sha256, sha256_hex(b"x"));
        assert_eq!(sha256_hex(b"").len(), 64);
        assert_ne!(record_name(project), record_name(Path::new("/home/u/b")));
    }
}
