use std::path::PathBuf;

/// Why a requested run could not be resolved into a policy. Messages name paths but never
/// environment values, which may hold secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    #[error(transparent)]
    Tier(#[from] crate::rules::tier::TierError),
    #[error("no command given")]
    EmptyCommand,
    #[error("command not found: {name}")]
    CommandNotFound { name: String },
    #[error("command is not executable: {}", crate::model::text::Tilde(path))]
    NotExecutable { path: PathBuf },
    #[error("cannot determine the current directory: {reason}")]
    NoWorkingDirectory { reason: String },
    #[error(
        "refusing to use {} as the project: {reason}",
        crate::model::text::Tilde(path)
    )]
    UnsafeProject { path: PathBuf, reason: &'static str },
    #[error("{flag} path does not exist: {}", crate::model::text::Tilde(path))]
    MissingPath { flag: &'static str, path: PathBuf },
    #[error(
        "{flag} {} is not a directory or regular file",
        crate::model::text::Tilde(path)
    )]
    UnsupportedPathKind { flag: &'static str, path: PathBuf },
    #[error(
        "{flag} {} would expose sensitive path {}; grant a narrower path",
        crate::model::text::Tilde(path),
        crate::model::text::Tilde(sensitive)
    )]
    SensitiveGrant {
        flag: &'static str,
        path: PathBuf,
        sensitive: PathBuf,
    },
    #[error(
        "{flag} {} would expose Sandy's own {what} ({}), which no sandboxed run may reach; \
         grant a narrower path",
        crate::model::text::Tilde(path),
        crate::model::text::Tilde(own)
    )]
    OwnGrant {
        flag: &'static str,
        path: PathBuf,
        own: PathBuf,
        what: &'static str,
    },
    #[error(
        "{flag} {} would expose the whole home directory; grant a narrower path",
        crate::model::text::Tilde(path)
    )]
    HomeGrant { flag: &'static str, path: PathBuf },
    #[error(
        "{flag} {}: more than {max} {what} below it; name the directory of the programs \
         themselves",
        crate::model::text::Shown(path)
    )]
    ExecuteTooLarge {
        flag: &'static str,
        path: PathBuf,
        what: &'static str,
        max: usize,
    },
    #[error("{flag} / would expose the whole filesystem; grant a narrower path")]
    RootGrant { flag: &'static str },
    #[error("path contains a NUL byte: {}", crate::model::text::Tilde(path))]
    NulInPath { path: PathBuf },
    #[error(transparent)]
    Profile(#[from] crate::rules::profile::ProfileError),
    #[error("profile '{profile}': ${var} must name an existing absolute directory that is not home and holds no sensitive path ({reason})")]
    ProfileRoot {
        profile: String,
        var: String,
        reason: &'static str,
    },
    #[error(
        "profile '{profile}': refusing to grant {}: {reason}",
        crate::model::text::Tilde(path)
    )]
    ProfileGrant {
        profile: String,
        path: PathBuf,
        reason: &'static str,
    },
    #[error("{flag} requires a healthy {service} installation: {reason}; set it up outside Sandy with `{setup}`")]
    RuntimeControlRequired {
        flag: &'static str,
        service: &'static str,
        reason: String,
        setup: String,
    },
    #[error(
        "profile '{profile}': required path {} does not exist",
        crate::model::text::Tilde(path)
    )]
    ProfileMissing { profile: String, path: PathBuf },
    #[error(
        "cannot run {}: {} is private inside the sandbox, so the command would not be found \
         there; run it from its project directory, or grant its directory with --read {}",
        crate::model::text::Tilde(program),
        crate::model::text::Tilde(private),
        crate::model::text::Tilde(dir)
    )]
    ProgramHidden {
        program: PathBuf,
        private: PathBuf,
        dir: PathBuf,
    },
    #[error("port must be between 1 and 65535")]
    InvalidPort,
    #[error(
        "--block-net (or a file's network.mode = \"block\") cannot be combined with \
         --allow-domain, --deny-domain or --net (or a file's network rules)"
    )]
    NetworkConflict,
    #[error(
        "{what} {}: a protection may not cover the project ({})",
        crate::model::text::Shown(path),
        crate::model::text::Shown(project)
    )]
    ProtectionCoversProject {
        what: &'static str,
        path: PathBuf,
        project: PathBuf,
    },
    #[error(
        "--deny-domain needs --allow-domain or --net agent (everything else is already denied)"
    )]
    DenyWithoutAllow,
    #[error(
        "--net agent: profile '{profile}' names no network endpoints; name the hosts with \
         --allow-domain"
    )]
    NoAgentEndpoints { profile: String },
    #[error(
        "{variable} is not an http(s) URL with a host; --net agent cannot tell which host it names"
    )]
    BaseUrl { variable: String },
}
