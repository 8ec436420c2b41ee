//! The user's policy files on the host: the configuration (`$XDG_CONFIG_HOME/sandy/
//! config.toml`, `~/.config/sandy/config.toml` by default), user profiles (`--profile
//! NAME` for `profiles/NAME.toml` there, or `--profile-file PATH`) and `--policy-file`.
//! Read bounded through `hostfs`, parsed by `sandy_policy::files`, and refused once the
//! launch is resolved if its sandbox could write any of them ([`Loaded::refuse_writable`]).
//!
//! Merge order (each adds to the one before; a ceiling replaces the one before): the
//! configuration's top level, its `[profile.BASE]` section for the built-in profile that
//! applies, its `[profile.NAME]` section for a user profile, the user profile, then the
//! flags. A policy file is the complete caller-controlled policy: with it, neither the
//! configuration nor any grant flag applies, nor the project policy. The project policy
//! (`sandy.toml`, [`crate::trust`]) comes after the user profile, before the flags.

use std::path::{Path, PathBuf};

use sandy_policy::files::{self, FileError, FileRole, FileRules, MAX_POLICY_FILE_BYTES};
use sandy_policy::{HostContext, ResolvedPolicy};

use crate::error::SandyError;
use crate::hostfs::{self, UserFile};

/// What the files of one launch add, and which files they are.
#[derive(Debug, Default)]
pub struct Loaded {
    pub rules: FileRules,
    /// The built-in profile to resolve with (`None`: as the command line says).
    pub profile: Option<String>,
    /// Each file read, by the absolute name it was read by.
    pub read: Vec<(FileRole, PathBuf)>,
}

/// What the command line asks of the files.
pub struct Asked<'a> {
    pub profile: Option<&'a str>,
    pub profile_file: Option<&'a Path>,
    pub policy_file: Option<&'a Path>,
    /// The command, whose name selects the built-in profile when none is named.
    pub argv0: &'a std::ffi::OsStr,
}

/// The most user profiles `sandy config check` looks at.
const MAX_PROFILES: usize = 1024;

/// Sandy's directory in the user's configuration: `$XDG_CONFIG_HOME/sandy` when that is
/// absolute, else `~/.config/sandy`.
pub fn config_dir(host: &HostContext) -> Option<PathBuf> {
    let base = host
        .var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| host.home.as_ref().map(|h| h.join(".config")))?;
    Some(base.join("sandy"))
}

/// The configuration file's name.
pub fn config_path(host: &HostContext) -> Option<PathBuf> {
    config_dir(host).map(|d| d.join("config.toml"))
}

/// A user profile's file.
fn profile_path(host: &HostContext, name: &str) -> Option<PathBuf> {
    config_dir(host).map(|d| d.join("profiles").join(format!("{name}.toml")))
}

/// Reads one file: `None` when it is absent and `optional`.
fn read(
    role: FileRole,
    path: &Path,
    host: &HostContext,
    optional: bool,
) -> Result<Option<(PathBuf, String)>, SandyError> {
    let absolute = sandy_policy::normalize(&host.cwd.join(path));
    let found = hostfs::read_user_file(&absolute, MAX_POLICY_FILE_BYTES).map_err(|source| {
        SandyError::File {
            step: "cannot read",
            path: absolute.clone(),
            source,
        }
    })?;
    let bytes = match found {
        UserFile::Absent if optional => return Ok(None),
        UserFile::Absent => {
            return Err(SandyError::File {
                step: "cannot read",
                path: absolute,
                source: std::io::ErrorKind::NotFound.into(),
            })
        }
        UserFile::NotRegular => {
            return Err(FileError::NotRegular {
                path: absolute,
                what: role.what(),
            }
            .into())
        }
        UserFile::TooLarge => {
            return Err(FileError::TooLarge {
                path: absolute,
                what: role.what(),
            }
            .into())
        }
        UserFile::Read(bytes) => bytes,
    };
    let text = String::from_utf8(bytes).map_err(|_| FileError::NotText {
        path: absolute.clone(),
    })?;
    Ok(Some((absolute, text)))
}

/// Reads and parses the files a launch uses.
pub fn load(asked: &Asked, host: &HostContext) -> Result<Loaded, SandyError> {
    let builtin = sandy_policy::builtin_names();
    let home = host.home.as_deref();
    let mut loaded = Loaded::default();
    if let Some(path) = asked.policy_file {
        let role = FileRole::PolicyFile;
        if let Some((path, text)) = read(role, path, host, false)? {
            let policy = files::parse_policy_file(&text, &path, home, &builtin)?;
            loaded.profile = policy.profile;
            loaded.rules = policy.rules;
            loaded.read.push((role, path));
        }
        return Ok(loaded);
    }
    // The user profile, named or given by path.
    let mut user: Option<(String, files::UserProfile)> = None;
    let mut user_file: Option<(PathBuf, String)> = None;
    match (asked.profile, asked.profile_file) {
        (Some(name), _) if !builtin.contains(&name) => {
            if !files::valid_profile_name(name) {
                return Err(FileError::ProfileName {
                    name: name.to_owned(),
                }
                .into());
            }
            let path = profile_path(host, name).unwrap_or_else(|| PathBuf::from(name));
            match read(FileRole::ProfileFile, &path, host, true)? {
                Some(found) => user_file = Some(found),
                None => {
                    return Err(FileError::UnknownProfile {
                        name: name.to_owned(),
                        available: builtin.join(", "),
                        path,
                    }
                    .into())
                }
            }
        }
        (_, Some(path)) => user_file = read(FileRole::ProfileFile, path, host, false)?,
        _ => {}
    }
    if let Some((path, text)) = user_file {
        let profile = files::parse_profile_file(&text, &path, home, &builtin)?;
        let name = match asked.profile {
            Some(name) => name.to_owned(),
            None => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        loaded.read.push((FileRole::ProfileFile, path));
        user = Some((name, profile));
    }
    // The configuration, if there is one.
    if let Some(path) = config_path(host) {
        if let Some((path, text)) = read(FileRole::Config, &path, host, true)? {
            let config = files::parse_config(&text, &path, home)?;
            let base = match (&user, asked.profile) {
                (Some((_, u)), _) => Some(u.extends.clone()),
                (None, Some(name)) => Some(name.to_owned()),
                // Detected from the command, only when a section could apply.
                (None, None) if !config.profiles.is_empty() => {
                    sandy_policy::select_profile(None, asked.argv0)
                        .ok()
                        .map(|(p, _)| p.name)
                }
                (None, None) => None,
            };
            let mut names: Vec<&str> = base.iter().map(String::as_str).collect();
            if let Some((name, _)) = &user {
                names.push(name);
            }
            loaded.rules = config.for_profiles(&names);
            loaded.read.insert(0, (FileRole::Config, path));
        }
    }
    if let Some((_, profile)) = user {
        loaded.profile = Some(profile.extends);
        loaded.rules.extend(profile.rules);
    } else if let Some(name) = asked.profile {
        loaded.profile = Some(name.to_owned());
    }
    // The project's `sandy.toml`, last of the files: applied only while trusted.
    crate::trust::add_to(&mut loaded, host)?;
    Ok(loaded)
}

impl Loaded {
    /// Refuses the launch if its sandbox could write any file its policy came from.
    pub fn refuse_writable(&self, policy: &ResolvedPolicy) -> Result<(), SandyError> {
        let fs = hostfs::HostFs;
        for (role, path) in &self.read {
            files::check_not_writable(*role, path, policy, &fs)?;
        }
        Ok(())
    }
}

/// `sandy config init`: writes the commented starter, never over an existing file, and
/// returns its path.
pub fn init() -> Result<std::path::PathBuf, SandyError> {
    let host = crate::host::gather_without_git()?;
    let (Some(dir), Some(path)) = (config_dir(&host), config_path(&host)) else {
        return Err(SandyError::Usage(
            "no configuration directory: set HOME or XDG_CONFIG_HOME",
        ));
    };
    let file = |source| SandyError::File {
        step: "cannot create",
        path: path.clone(),
        source,
    };
    let handle = hostfs::open_or_create(&dir, 0o700).map_err(file)?;
    handle
        .write_new("config.toml", files::CONFIG_STARTER.as_bytes(), 0o600)
        .map_err(file)?;
    Ok(path)
}

/// `sandy config check`: parses the configuration and every user profile, then resolves
/// a launch of `true` in the current directory with the configuration, as `sandy run`
/// would, and refuses what `sandy run` would refuse.
/// What [`check`] found, one item per file and one for the resolution.
#[derive(Debug)]
pub enum Checked {
    /// The configuration file parsed.
    Config(std::path::PathBuf),
    /// There is no configuration file at this path.
    NoConfig(std::path::PathBuf),
    /// A user profile parsed; `shadowed`: a built-in profile has its name.
    Profile {
        /// The profile's file.
        path: std::path::PathBuf,
        /// Whether a built-in profile has the same name (and `--profile` uses that one).
        shadowed: bool,
    },
    /// A run in this directory resolves with the files.
    Resolves(std::path::PathBuf),
    /// Not resolved here (not a directory a run may start in), and why.
    NotResolvedHere(String),
}

pub fn check() -> Result<Vec<Checked>, SandyError> {
    let host = crate::host::gather_without_git()?;
    let builtin = sandy_policy::builtin_names();
    let Some(path) = config_path(&host) else {
        return Err(SandyError::Usage(
            "no configuration directory: set HOME or XDG_CONFIG_HOME",
        ));
    };
    let mut lines = Vec::new();
    match read(FileRole::Config, &path, &host, true)? {
        Some((path, text)) => {
            files::parse_config(&text, &path, host.home.as_deref())?;
            lines.push(Checked::Config(path));
        }
        None => lines.push(Checked::NoConfig(path)),
    }
    if let Some(dir) = config_dir(&host).map(|d| d.join("profiles")) {
        let mut names: Vec<std::ffi::OsString> = match hostfs::Dir::open(&dir) {
            Ok(d) => d
                .entries(MAX_PROFILES)
                .map_err(|source| SandyError::File {
                    step: "cannot list",
                    path: dir.clone(),
                    source,
                })?
                .into_iter()
                .map(|e| e.name)
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        for name in names {
            let entry = dir.join(&name);
            let Some(name) = name.to_str() else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".toml") else {
                continue;
            };
            if !files::valid_profile_name(stem) {
                continue;
            }
            if let Some((path, text)) = read(FileRole::ProfileFile, &entry, &host, true)? {
                files::parse_profile_file(&text, &path, host.home.as_deref(), &builtin)?;
                lines.push(Checked::Profile {
                    path,
                    shadowed: builtin.contains(&stem),
                });
            }
        }
    }
    // The same resolution and refusals as `sandy run -- true` here.
    let asked = Asked {
        profile: None,
        profile_file: None,
        policy_file: None,
        argv0: std::ffi::OsStr::new("true"),
    };
    let loaded = load(&asked, &host)?;
    let mut request = crate::host::status_request(&host, "generic", false);
    request.profile = loaded.profile.clone();
    request.files = loaded.rules.clone();
    match sandy_policy::resolve(&request, &host, &hostfs::HostFs) {
        Ok(policy) => {
            loaded.refuse_writable(&policy)?;
            lines.push(Checked::Resolves(host.cwd.clone()));
        }
        // Not a directory a run may start in (the home directory): the files parsed;
        // their grants are checked where a run can be.
        Err(sandy_policy::ResolveError::UnsafeProject { reason, .. }) => {
            lines.push(Checked::NotResolvedHere(reason.to_owned()))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(lines)
}
