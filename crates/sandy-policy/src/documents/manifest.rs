//! The launch manifest: the typed, versioned, size-bounded document the bootstrap applies.
//! `sandy run` validates it and hands it to the bootstrap it forks; `sandy __bootstrap`
//! reads its wire form from an inherited descriptor and validates it there.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::osbytes::OsBytes;
use crate::model::policy::{Access, Network, ProtectionKind, ResolvedPolicy, Scope};

/// Why a launch manifest was rejected. Raised by the supervisor before it hands the
/// manifest over, and again by the bootstrap, which trusts nothing it did not check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    #[error("launch manifest is {size} bytes, over the {max}-byte limit")]
    TooLarge { size: usize, max: usize },
    #[error("launch manifest is malformed: {reason}")]
    Malformed { reason: String },
    #[error("launch manifest schema version {found} is not supported (expected {expected})")]
    UnsupportedSchema { found: u32, expected: u32 },
    #[error("launch manifest is invalid: {reason}")]
    Invalid { reason: String },
}

/// The only manifest schema this build reads or writes.
pub const MANIFEST_SCHEMA_VERSION: u32 = 4;
/// Checked before parsing: a larger manifest is rejected unread.
pub const MAX_MANIFEST_BYTES: usize = 1024 * 1024;
/// The bound of the sandbox's policy document, in the manifest or beside it.
pub const MAX_POLICY_DOCUMENT_BYTES: usize = MAX_MANIFEST_BYTES / 2;
const MAX_ARGS: usize = 65_536;
const MAX_ENV: usize = 16_384;
const MAX_GRANTS: usize = 4096;

/// One environment entry, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvEntry {
    pub name: OsBytes,
    pub value: OsBytes,
}

/// One filesystem grant as the bootstrap applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestGrant {
    pub path: OsBytes,
    pub access: Access,
    pub scope: Scope,
}

/// One protection the bootstrap mounts (only paths that existed at launch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestProtection {
    pub path: OsBytes,
    pub kind: ProtectionKind,
    /// A name taken at launch from an agent's state directory: whatever is there when
    /// the sandbox is set up is protected, and a name gone by then is skipped
    /// ([`crate::model::policy::Protection::at_launch`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_launch: bool,
}

/// A file the bootstrap binds over `target`: a copy the supervisor prepared at `source`
/// (a filtered, read-only view or a writable private copy), or, for a read-only view,
/// the copy's `content` itself, which the bootstrap writes into the sandbox's private
/// `/run` (no file on the host at all; `source` is then empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestView {
    pub source: OsBytes,
    pub target: OsBytes,
    pub writable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<OsBytes>,
}

/// The largest view whose content travels in the manifest; larger ones are files the
/// supervisor prepares (the manifest's own bound is [`MAX_MANIFEST_BYTES`]).
pub const MAX_INLINE_VIEW_BYTES: usize = 64 * 1024;
/// The most content all inline views together may carry.
pub const MAX_INLINE_VIEWS_BYTES: usize = 256 * 1024;

/// A copy-on-write tool cache the bootstrap mounts: an overlay at `lower` (the host
/// cache, read-only) whose changes go to `upper` (with `work`) in Sandy's own cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestOverlay {
    pub lower: OsBytes,
    pub upper: OsBytes,
    pub work: OsBytes,
}

/// Signals the supervisor ignores while it waits, which the bootstrap must restore to
/// their default action before the target starts (unless the caller had ignored them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoredSignal {
    Interrupt,
    Quit,
}

/// Everything the bootstrap needs, and nothing it could use to widen the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchManifest {
    pub schema_version: u32,
    /// The supervisor's pid: the bootstrap refuses to run under any other parent.
    pub supervisor_pid: u32,
    pub program: OsBytes,
    pub argv: Vec<OsBytes>,
    pub working_directory: OsBytes,
    pub environment: Vec<EnvEntry>,
    pub file_grants: Vec<ManifestGrant>,
    pub protections: Vec<ManifestProtection>,
    /// The host directory mounted at `/tmp` inside.
    pub private_tmp: OsBytes,
    /// The runtime directory replaced by an empty private one, if any.
    pub runtime_dir: Option<OsBytes>,
    pub network: Network,
    /// Loopback ports whose listening sockets the bootstrap hands to the supervisor
    /// (a blocked network only).
    pub local_ports: Vec<u16>,
    /// With the host's network: the name servers whose addresses the bootstrap puts on
    /// the sandbox's loopback, with a UDP socket on port 53 of each handed to the
    /// supervisor (the name-resolution relay). Empty otherwise.
    #[serde(default)]
    pub resolvers: Vec<std::net::IpAddr>,
    /// The egress proxy's loopback port: the bootstrap hands its listener to the
    /// supervisor with the local-port listeners.
    pub proxy_port: Option<u16>,
    pub restore_default_signals: Vec<RestoredSignal>,
    /// Prepared copies bound over host files (filled in by the supervisor once it has
    /// prepared them; empty in a dry run). Absent means none.
    #[serde(default)]
    pub views: Vec<ManifestView>,
    /// The dry-run document of this launch, written read-only at
    /// [`crate::model::paths::POLICY_DOCUMENT_PATH`] inside (none in a dry run).
    pub policy_document: Option<String>,
    /// Tool caches mounted copy-on-write.
    #[serde(default)]
    pub overlays: Vec<ManifestOverlay>,
    /// Writable names of an agent's state inside a directory protected as one, mounted
    /// writable again on top of it.
    #[serde(default)]
    pub reopened: Vec<OsBytes>,
    /// The project's history directory on the host, bound at
    /// [`crate::rules::history::INSIDE`] (`None`: no history kept).
    #[serde(default)]
    pub history: Option<OsBytes>,
    /// The ceilings the bootstrap applies: rlimits, the OOM preference, the size of the
    /// private tmpfs mounts (required: a manifest without them is refused).
    pub ceilings: crate::model::ceilings::ManifestCeilings,
    /// The protection tier: `landlock` launches without namespaces (and so without the
    /// mounts, the views, the overlays and the name servers' relay of this manifest).
    #[serde(default)]
    pub tier: crate::model::tier::Tier,
}

impl LaunchManifest {
    /// The manifest for a resolved policy.
    pub fn from_policy(
        policy: &ResolvedPolicy,
        supervisor_pid: u32,
        restore_default_signals: Vec<RestoredSignal>,
    ) -> Self {
        LaunchManifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            supervisor_pid,
            program: policy.program.as_path().into(),
            argv: policy.argv.iter().map(|a| a.as_os_str().into()).collect(),
            working_directory: policy.working_directory.as_path().into(),
            environment: policy
                .environment
                .iter()
                .map(|(k, v)| EnvEntry {
                    name: k.as_os_str().into(),
                    value: v.as_os_str().into(),
                })
                .collect(),
            file_grants: policy
                .grants
                .iter()
                .map(|g| ManifestGrant {
                    path: g.path.as_path().into(),
                    access: g.access,
                    scope: g.scope,
                })
                .collect(),
            protections: policy
                .protections
                .iter()
                .filter(|p| p.exists)
                .map(|p| ManifestProtection {
                    path: p.path.as_path().into(),
                    kind: p.kind,
                    at_launch: p.at_launch,
                })
                .collect(),
            private_tmp: policy.private_tmp.as_path().into(),
            runtime_dir: policy.runtime_dir.as_deref().map(Into::into),
            network: policy.network,
            local_ports: match policy.network {
                Network::BlockAll => policy.local_ports.iter().map(|p| p.port).collect(),
                Network::AllowAll => Vec::new(),
            },
            // The relay's sockets live on the loopback of the run's network namespace.
            resolvers: match policy.tier {
                crate::model::tier::Tier::Full => policy.resolvers.clone(),
                crate::model::tier::Tier::Landlock => Vec::new(),
            },
            proxy_port: policy.egress.as_ref().map(|e| e.proxy_port),
            restore_default_signals,
            views: Vec::new(),
            policy_document: None,
            overlays: policy
                .caches
                .iter()
                .filter(|c| c.kind == crate::model::caches::CacheKind::Overlay)
                .map(|c| ManifestOverlay {
                    lower: c.path.as_path().into(),
                    upper: c.upper().as_path().into(),
                    work: c.work().as_path().into(),
                })
                .collect(),
            // Nothing is mounted in the `landlock` tier; the policy keeps them, so that
            // the check after the run leaves the agent's writes there alone.
            reopened: match policy.tier {
                crate::model::tier::Tier::Full => {
                    policy.reopened.iter().map(|p| p.as_path().into()).collect()
                }
                crate::model::tier::Tier::Landlock => Vec::new(),
            },
            history: policy
                .history
                .as_ref()
                .map(|h| h.directory.as_path().into()),
            ceilings: (&policy.ceilings).into(),
            tier: policy.tier,
        }
    }
}

/// A manifest that passed validation. The only way to get one is [`ValidatedManifest::decode`]
/// or [`ValidatedManifest::new`], so enforcement never sees an unchecked document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedManifest(LaunchManifest);

impl ValidatedManifest {
    /// Validates a manifest built in memory.
    pub fn new(manifest: LaunchManifest) -> Result<Self, ManifestError> {
        validate(&manifest)?;
        Ok(ValidatedManifest(manifest))
    }

    /// Bounds, parses and validates the wire form.
    pub fn decode(bytes: &[u8]) -> Result<Self, ManifestError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge {
                size: bytes.len(),
                max: MAX_MANIFEST_BYTES,
            });
        }
        let manifest: LaunchManifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed {
                reason: e.to_string(),
            })?;
        Self::new(manifest)
    }

    /// The manifest with the sandbox's policy document (which a forked bootstrap gets
    /// beside the wire form, as it is, rather than as a string escaped inside it); the
    /// document's bound is checked as in [`ValidatedManifest::new`].
    pub fn with_policy_document(self, document: String) -> Result<Self, ManifestError> {
        let mut manifest = self.0;
        manifest.policy_document = Some(document);
        check_policy_document(&manifest)?;
        Ok(ValidatedManifest(manifest))
    }

    /// The wire form. Fails only if the manifest exceeds the size bound.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestError> {
        let bytes = serde_json::to_vec(&self.0).map_err(|e| ManifestError::Malformed {
            reason: e.to_string(),
        })?;
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge {
                size: bytes.len(),
                max: MAX_MANIFEST_BYTES,
            });
        }
        Ok(bytes)
    }

    pub fn manifest(&self) -> &LaunchManifest {
        &self.0
    }
}

fn check_policy_document(m: &LaunchManifest) -> Result<(), ManifestError> {
    match &m.policy_document {
        Some(document) => check_policy_document_size(document.len()),
        None => Ok(()),
    }
}

/// The policy document's bound, for a document of `len` bytes sent beside the manifest
/// (checked by the supervisor before the launch, and by the bootstrap again).
pub fn check_policy_document_size(len: usize) -> Result<(), ManifestError> {
    if len > MAX_POLICY_DOCUMENT_BYTES {
        return Err(invalid("the policy document is too large"));
    }
    Ok(())
}

fn invalid(reason: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        reason: reason.into(),
    }
}

/// A clean absolute path: no NUL, no `.` or `..` components.
fn check_path(what: &str, p: &OsBytes) -> Result<(), ManifestError> {
    if p.contains_nul() {
        return Err(invalid(format!("{what} contains a NUL byte")));
    }
    let path = p.as_path();
    if !path.is_absolute() {
        return Err(invalid(format!("{what} is not an absolute path")));
    }
    if p.as_bytes()
        .split(|&b| b == b'/')
        .any(|seg| seg == b"." || seg == b"..")
    {
        return Err(invalid(format!("{what} is not normalized")));
    }
    Ok(())
}

fn validate(m: &LaunchManifest) -> Result<(), ManifestError> {
    if m.schema_version != MANIFEST_SCHEMA_VERSION {
        return Err(ManifestError::UnsupportedSchema {
            found: m.schema_version,
            expected: MANIFEST_SCHEMA_VERSION,
        });
    }
    if m.supervisor_pid == 0 {
        return Err(invalid("supervisor pid is zero"));
    }
    check_path("program", &m.program)?;
    if m.argv.is_empty() {
        return Err(invalid("argv is empty"));
    }
    if m.argv.len() > MAX_ARGS {
        return Err(invalid(format!("more than {MAX_ARGS} arguments")));
    }
    if m.argv.iter().any(OsBytes::contains_nul) {
        return Err(invalid("an argument contains a NUL byte"));
    }
    // The `landlock` tier mounts nothing and has no network namespace: a manifest that
    // asks it for what only those carry is refused rather than half applied.
    if m.tier == crate::model::tier::Tier::Landlock {
        let needs_namespaces = [
            (!m.views.is_empty(), "views"),
            (!m.overlays.is_empty(), "cache overlays"),
            (!m.reopened.is_empty(), "reopened names"),
            (!m.local_ports.is_empty(), "relayed local ports"),
            (m.proxy_port.is_some(), "an egress proxy"),
            (!m.resolvers.is_empty(), "a name servers' relay"),
            (m.history.is_some(), "a history directory"),
        ];
        if let Some((_, what)) = needs_namespaces.iter().find(|(asked, _)| *asked) {
            return Err(invalid(format!(
                "the landlock tier cannot carry {what} (they need namespaces)"
            )));
        }
    }
    check_path("working directory", &m.working_directory)?;
    if m.working_directory.as_path() == Path::new("/") {
        return Err(invalid("working directory is the filesystem root"));
    }
    if m.environment.len() > MAX_ENV {
        return Err(invalid(format!("more than {MAX_ENV} environment entries")));
    }
    for entry in &m.environment {
        let name = entry.name.as_bytes();
        if name.is_empty() || name.contains(&b'=') || name.contains(&0) {
            return Err(invalid(
                "an environment name is empty or contains '=' or NUL",
            ));
        }
        if entry.value.contains_nul() {
            return Err(invalid("an environment value contains a NUL byte"));
        }
    }
    if m.file_grants.len() > MAX_GRANTS {
        return Err(invalid(format!("more than {MAX_GRANTS} file grants")));
    }
    for grant in &m.file_grants {
        check_path("a grant path", &grant.path)?;
        if grant.path.as_path() == Path::new("/") {
            return Err(invalid("a grant covers the filesystem root"));
        }
    }
    if m.protections.len() > MAX_GRANTS {
        return Err(invalid(format!("more than {MAX_GRANTS} protections")));
    }
    for protection in &m.protections {
        check_path("a protected path", &protection.path)?;
        if protection.path.as_path() == Path::new("/") {
            return Err(invalid("a protection covers the filesystem root"));
        }
    }
    if m.reopened.len() > MAX_GRANTS {
        return Err(invalid(format!("more than {MAX_GRANTS} reopened names")));
    }
    for name in &m.reopened {
        check_path("a reopened name", name)?;
        let inside_protection = m.protections.iter().any(|p| {
            p.kind == ProtectionKind::ReadOnly
                && name.as_path() != p.path.as_path()
                && name.as_path().starts_with(p.path.as_path())
        });
        if !inside_protection {
            return Err(invalid("a reopened name lies in no read-only protection"));
        }
    }
    check_path("the private temporary directory", &m.private_tmp)?;
    if let Some(history) = &m.history {
        check_path("the history directory", history)?;
    }
    if !m.resolvers.is_empty() && m.network != Network::AllowAll {
        return Err(invalid(
            "name servers are relayed without the host's network",
        ));
    }
    if m.resolvers.len() > crate::host::context::MAX_RESOLVERS
        || m.resolvers
            .iter()
            .any(|ip| ip.is_unspecified() || ip.is_multicast())
    {
        return Err(invalid("a relayed name server is not a unicast address"));
    }
    let c = &m.ceilings;
    if c.nproc == Some(0) || c.file_size == 0 || c.tmp_size == 0 {
        return Err(invalid("a resource ceiling of zero"));
    }
    if !(-1000..=1000).contains(&c.oom_score_adj) {
        return Err(invalid("an oom_score_adj outside -1000..=1000"));
    }
    if !m.local_ports.is_empty() && m.network != Network::BlockAll {
        return Err(invalid("local ports are granted without a blocked network"));
    }
    if let Some(port) = m.proxy_port {
        if m.network != Network::BlockAll {
            return Err(invalid("an egress proxy without a private network"));
        }
        if port == 0 || m.local_ports.contains(&port) {
            return Err(invalid(
                "the egress proxy's port is 0 or a granted local port",
            ));
        }
        // Its listener travels with the local-port listeners, at most 64 in one message.
        if m.local_ports.len() >= 64 {
            return Err(invalid(
                "too many local ports granted beside the egress proxy",
            ));
        }
    }
    if m.local_ports.contains(&0) || m.local_ports.len() > 64 {
        return Err(invalid("local ports must be 1-65535, at most 64"));
    }
    if let Some(dir) = &m.runtime_dir {
        check_path("the runtime directory", dir)?;
    }
    if m.views.len() > MAX_GRANTS {
        return Err(invalid(format!("more than {MAX_GRANTS} views")));
    }
    let mut inline = 0usize;
    for view in &m.views {
        match &view.content {
            Some(content) => {
                if view.writable || !view.source.as_bytes().is_empty() {
                    return Err(invalid(
                        "a view with its content is read-only and has no source",
                    ));
                }
                if content.as_bytes().len() > MAX_INLINE_VIEW_BYTES {
                    return Err(invalid("a view's content is too large"));
                }
                inline += content.as_bytes().len();
            }
            None => check_path("a view's source", &view.source)?,
        }
        check_path("a view's target", &view.target)?;
    }
    if inline > MAX_INLINE_VIEWS_BYTES {
        return Err(invalid("the views' content is too large"));
    }
    check_policy_document(m)?;
    if m.overlays.len() > MAX_GRANTS {
        return Err(invalid(format!("more than {MAX_GRANTS} cache overlays")));
    }
    for overlay in &m.overlays {
        for (what, path) in [
            ("a cache overlay's lower layer", &overlay.lower),
            ("a cache overlay's upper layer", &overlay.upper),
            ("a cache overlay's work directory", &overlay.work),
        ] {
            check_path(what, path)?;
            if path.0.iter().any(|b| matches!(b, b',' | b':' | b'\\')) {
                return Err(invalid(format!(
                    "{what} holds a character overlayfs cannot take"
                )));
            }
        }
        if overlay.lower.as_path() == Path::new("/") {
            return Err(invalid("a cache overlay covers the filesystem root"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LaunchManifest {
        LaunchManifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            supervisor_pid: 42,
            program: "/usr/bin/true".into(),
            argv: vec!["true".into(), OsBytes(vec![0xff, b'x'])],
            working_directory: "/work/p".into(),
            environment: vec![EnvEntry {
                name: "PATH".into(),
                value: "/usr/bin".into(),
            }],
            file_grants: vec![ManifestGrant {
                path: "/work/p".into(),
                access: Access::ReadWrite,
                scope: Scope::Subtree,
            }],
            protections: vec![ManifestProtection {
                path: "/work/p/.git/hooks".into(),
                kind: ProtectionKind::ReadOnly,
                at_launch: false,
            }],
            private_tmp: "/tmp/sandy-1".into(),
            runtime_dir: None,
            network: Network::AllowAll,
            local_ports: vec![],
            resolvers: Vec::new(),
            proxy_port: None,
            restore_default_signals: vec![RestoredSignal::Interrupt, RestoredSignal::Quit],
            views: vec![],
            policy_document: None,
            overlays: vec![],
            reopened: vec![],
            history: None,
            ceilings: crate::model::ceilings::ManifestCeilings {
                nproc: None,
                file_size: 1 << 30,
                tmp_size: 1 << 30,
                oom_score_adj: 500,
            },
            tier: Default::default(),
        }
    }

    fn inline_view(content: &[u8]) -> ManifestView {
        ManifestView {
            source: OsBytes::default(),
            target: "/home/u/.bashrc".into(),
            writable: false,
            content: Some(OsBytes(content.to_vec())),
        }
    }

    #[test]
    fn round_trips_exactly() {
        let v = ValidatedManifest::new(sample()).unwrap();
        let bytes = v.encode().unwrap();
        assert_eq!(ValidatedManifest::decode(&bytes).unwrap(), v);
        // With views of both kinds, one of them bytes that are not UTF-8.
        let mut m = sample();
        m.views.push(inline_view(b"alias ll='ls -l'\n\xff\n"));
        m.views.push(ManifestView {
            source: "/tmp/sandy-views-a/1".into(),
            target: "/home/u/.profile".into(),
            writable: false,
            content: None,
        });
        let v = ValidatedManifest::new(m).unwrap();
        let bytes = v.encode().unwrap();
        assert_eq!(ValidatedManifest::decode(&bytes).unwrap(), v);
    }

    #[test]
    fn rejects_unknown_fields_versions_and_garbage() {
        let mut json: serde_json::Value = serde_json::to_value(sample()).unwrap();
        json["extra"] = serde_json::json!(true);
        let err = ValidatedManifest::decode(json.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, ManifestError::Malformed { .. }), "{err}");

        let mut m = sample();
        m.schema_version = MANIFEST_SCHEMA_VERSION + 1;
        let bytes = serde_json::to_vec(&m).unwrap();
        assert!(matches!(
            ValidatedManifest::decode(&bytes).unwrap_err(),
            ManifestError::UnsupportedSchema {
                found: 5,
                expected: MANIFEST_SCHEMA_VERSION
            }
        ));
        assert!(matches!(
            ValidatedManifest::decode(b"not json").unwrap_err(),
            ManifestError::Malformed { .. }
        ));
    }

    /// A manifest without ceilings, or with a ceiling of zero, is refused: the bootstrap
    /// never starts a run without them.
    #[test]
    fn ceilings_are_required_and_checked() {
        let mut json: serde_json::Value = serde_json::to_value(sample()).unwrap();
        json.as_object_mut().unwrap().remove("ceilings");
        let err = ValidatedManifest::decode(json.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, ManifestError::Malformed { .. }), "{err}");
        let mut m = sample();
        m.ceilings.tmp_size = 0;
        assert!(ValidatedManifest::new(m).is_err());
        let mut m = sample();
        m.ceilings.oom_score_adj = 1001;
        assert!(ValidatedManifest::new(m).is_err());
    }

    /// The policy document sent beside the wire form is held to the bound it has inside
    /// it, and kept as it is.
    #[test]
    fn a_policy_document_beside_the_manifest_is_bounded_and_kept() {
        let manifest = ValidatedManifest::new(sample()).unwrap();
        let kept = manifest
            .clone()
            .with_policy_document("{\"a\": \"b\"}\n".to_owned())
            .unwrap();
        assert_eq!(
            kept.manifest().policy_document.as_deref(),
            Some("{\"a\": \"b\"}\n")
        );
        assert!(check_policy_document_size(MAX_POLICY_DOCUMENT_BYTES).is_ok());
        assert!(check_policy_document_size(MAX_POLICY_DOCUMENT_BYTES + 1).is_err());
        let big = " ".repeat(MAX_POLICY_DOCUMENT_BYTES + 1);
        assert!(matches!(
            manifest.with_policy_document(big).unwrap_err(),
            ManifestError::Invalid { .. }
        ));
    }

    #[test]
    fn rejects_oversized_before_parsing() {
        let big = vec![b' '; MAX_MANIFEST_BYTES + 1];
        assert!(matches!(
            ValidatedManifest::decode(&big).unwrap_err(),
            ManifestError::TooLarge { .. }
        ));
    }

    #[test]
    fn rejects_invalid_content() {
        type Mutation = Box<dyn Fn(&mut LaunchManifest)>;
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "relative program",
                Box::new(|m| m.program = "bin/true".into()),
            ),
            ("empty argv", Box::new(|m| m.argv.clear())),
            ("nul arg", Box::new(|m| m.argv.push(OsBytes(vec![b'a', 0])))),
            ("root cwd", Box::new(|m| m.working_directory = "/".into())),
            (
                "dotdot grant",
                Box::new(|m| m.file_grants[0].path = "/work/../etc".into()),
            ),
            (
                "root grant",
                Box::new(|m| m.file_grants[0].path = "/".into()),
            ),
            (
                "bad env name",
                Box::new(|m| m.environment[0].name = "A=B".into()),
            ),
            ("zero pid", Box::new(|m| m.supervisor_pid = 0)),
            (
                "a writable view with its content",
                Box::new(|m| {
                    m.views.push(inline_view(b"x"));
                    m.views[0].writable = true;
                }),
            ),
            (
                "a view with both a source and its content",
                Box::new(|m| {
                    m.views.push(inline_view(b"x"));
                    m.views[0].source = "/tmp/sandy-views-a/0".into();
                }),
            ),
            (
                "an oversized inline view",
                Box::new(|m| {
                    m.views
                        .push(inline_view(&vec![b'x'; MAX_INLINE_VIEW_BYTES + 1]))
                }),
            ),
            (
                "too much inline content in all",
                Box::new(|m| {
                    for _ in 0..=MAX_INLINE_VIEWS_BYTES / MAX_INLINE_VIEW_BYTES {
                        m.views
                            .push(inline_view(&vec![b'x'; MAX_INLINE_VIEW_BYTES]));
                    }
                }),
            ),
            (
                "a relative view source",
                Box::new(|m| {
                    m.views.push(inline_view(b"x"));
                    m.views[0].content = None;
                    m.views[0].source = "views/0".into();
                }),
            ),
        ];
        for (what, mutate) in cases {
            let mut m = sample();
            mutate(&mut m);
            assert!(
                matches!(
                    ValidatedManifest::new(m),
                    Err(ManifestError::Invalid { .. })
                ),
                "{what} was accepted"
            );
        }
    }

    #[test]
    fn the_landlock_tier_refuses_what_needs_namespaces() {
        let mut m = sample();
        m.tier = crate::model::tier::Tier::Landlock;
        m.views.clear();
        m.overlays.clear();
        m.reopened.clear();
        m.local_ports.clear();
        m.proxy_port = None;
        m.resolvers.clear();
        ValidatedManifest::new(m.clone()).unwrap();
        let mut with_proxy = m.clone();
        with_proxy.proxy_port = Some(3128);
        let err = ValidatedManifest::new(with_proxy).unwrap_err();
        assert!(err.to_string().contains("an egress proxy"), "{err}");
        let mut with_ports = m;
        with_ports.local_ports = vec![8080];
        assert!(ValidatedManifest::new(with_ports).is_err());
    }
}
