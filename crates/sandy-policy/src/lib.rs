//! Sandy's pure policy model.
//!
//! This crate turns what the user asked for (parsed command-line arguments) and what the
//! host looks like (a [`HostContext`] gathered once by the supervisor) into a
//! [`ResolvedPolicy`], and from it a [`LaunchManifest`], the typed, versioned document that
//! is validated before the bootstrap applies any kernel layer.
//!
//! Resolution is a pure function: it never reads the process environment and only looks
//! at the filesystem through the narrow [`PathInspector`] trait, which tests replace with
//! a fake. No `unsafe`, no libc, no syscalls of its own.
//!
//! # Precedence
//!
//! Grants are additive: the access a path gets is the union of every grant covering it
//! (explicit flags, profile grants, baseline). Protections (masks and read-only paths,
//! carried by the mount layer) override every grant; until that layer lands, a grant that
//! would cover a sensitive path is refused instead of silently exposing it.
//!
//! # Layers
//!
//! The modules sit in five layers, one directory each, and a module refers only to its
//! own layer or a lower one:
//!
//! 1. `model/`: the policy as data, and nothing that decides it. Access, grants,
//!    protections, views, the [`ResolvedPolicy`] and every type it holds (tier, ceilings,
//!    caches, egress, state directories, history), lexical paths ([`normalize`], the
//!    fixed places inside the sandbox), [`OsBytes`] and the text shown to people.
//! 2. `host/`: facts about the host, gathered once by the supervisor or asked through
//!    [`PathInspector`]: [`HostContext`], [`GitFacts`], the inspector and its memo, and
//!    [`chain`], the symlink walk.
//! 3. `rules/`: what decides each part of a policy from the request and the host facts:
//!    profiles, the user's files (`files`), protections, sensitive paths, caches, egress,
//!    ceilings, hooks, Kontext, secrets and credential filtering, state directories and
//!    their merge, history, the weaker tier ([`weaken`]), and [`ResolveError`].
//! 4. `resolve/`: [`resolve`], which brings the rules together into a [`ResolvedPolicy`]
//!    (`ctx`, the resolution's working state, below `agent` and `views`, its parts).
//! 5. `documents/`: what is made from a resolved policy: the [`LaunchManifest`], the
//!    [`DryRunDocument`], the summary and `sandy why`'s explanation.
//!
//! Inside the crate a path names its layer (`crate::rules::caches::plan_caches`, not
//! `crate::caches::..`): the paths this file re-exports (`sandy_policy::caches`,
//! `sandy_policy::Tier`, ...) are for the crate's users. There is no import circle,
//! within a layer either: a type that a lower module needs moves down to `model/` (its
//! behaviour may stay above it as an inherent `impl`), and a part shared by two modules
//! of a layer moves to a module both use. `tests/layers.rs` reads every module's `use`
//! declarations and its `crate::`, `super::`, `self::` and child-module paths (tests,
//! comments and strings left out) and fails on an upward reference or a circle.
//!
//! # Domain names
//!
//! Host-name patterns, address classes and egress rules (parsed, explained and shown in
//! the dry run here, enforced by the proxy) live in `sandy-net`'s pure part (`host`,
//! `addr`, `rules`), which this crate uses without default features. The proxy's runtime
//! (tokio and the rest) is behind `sandy-net`'s `proxy` feature, which only the supervisor
//! turns on. They stay in `sandy-net`, rather than in a crate of their own or in this
//! one, because the proxy decides every connection with the same types and functions
//! (`EgressPolicy::decide`, the rebinding check) and the pure part already depends only
//! on `serde`, `thiserror` and `url`: a separate crate would add a boundary without
//! removing a dependency. `tests/dependencies.rs` keeps it so (this crate depends on no
//! runtime crate, and on `sandy-net` without the feature; `sandy-net` turns on nothing
//! but its pure dependencies without `proxy`), and `sandy-net`'s `tests/pure.rs` keeps
//! its pure modules free of the proxy's.
//!
//! # What this crate does not do
//!
//! It enforces nothing. Enforcement lives in `sandy-linux`; this crate only decides.
#![forbid(unsafe_code)]

mod documents;
mod host;
mod model;
mod resolve;
mod rules;

// The public modules' paths from before the layers, kept for the crate's users.
pub use documents::summary;
pub use documents::why;
pub use model::ceilings;
pub use model::text;
pub use rules::caches;
pub use rules::files;
pub use rules::filter;
pub use rules::history;
pub use rules::later;
pub use rules::secrets;
pub use rules::statedirs;
pub use rules::statemerge;

pub use documents::dryrun::{DryRunDocument, DRY_RUN_SCHEMA_VERSION};
pub use documents::manifest::{
    check_policy_document_size, EnvEntry, LaunchManifest, ManifestError, ManifestGrant,
    ManifestOverlay, ManifestProtection, ManifestView, RestoredSignal, ValidatedManifest,
    MANIFEST_SCHEMA_VERSION, MAX_INLINE_VIEWS_BYTES, MAX_INLINE_VIEW_BYTES, MAX_MANIFEST_BYTES,
    MAX_POLICY_DOCUMENT_BYTES,
};
pub use host::chain::{chain, Chain, ChainError, Pin, MAX_SYMLINKS};
pub use host::context::{resolvers_of, HostContext, MAX_RESOLVERS};
pub use host::gitfacts::{GitDir, GitDirKind, GitFacts};
pub use host::inspect::{Entry, FileKind, Memo, PathInspector, RealFs};
pub use model::ceilings::{
    Ceiling, CeilingOrigin, CeilingRequest, Ceilings, ManifestCeilings, Mechanism,
};
pub use model::egress::Egress;
pub use model::kontext::{KontextControl, KontextMode};
pub use model::osbytes::OsBytes;
pub use model::paths::{
    is_normal, normalize, POLICY_DOCUMENT_DIR, POLICY_DOCUMENT_PATH, PRIVATE_SHM, PRIVATE_TMP,
    PRIVATE_VAR_TMP,
};
pub use model::policy::{
    Access, FileSources, FileView, FilterRule, Grant, LaunchCreation, LocalPort, Network, Origin,
    Placeholder, PortOrigin, ProfileInfo, Protection, ProtectionKind, ResolvedPolicy, RuntimeHook,
    Scope, StateFile, StateFormat, ViewKind, WithheldVar,
};
pub use resolve::{resolve, RunRequest, OWN_MASK_REASON, REMOVED_ENV_EXACT, REMOVED_ENV_PREFIXES};
pub use rules::egress::{base_url_pattern, EgressRequest, DEFAULT_PROXY_PORT};
pub use rules::error::ResolveError;
pub use rules::kontext::{
    attach_kontext, check_report as check_kontext_report, kontext_executables, kontext_root,
    kontext_socket, KontextReport, KONTEXT,
};
pub use rules::profile::{
    builtin_names, builtin_profiles, parse as parse_profile, select as select_profile, Profile,
    ProfileEndpoint, ProfileError, ProfileNetwork, GENERIC, PROFILE_SCHEMA_VERSION,
};
pub use rules::sensitive::{sensitive_paths, SENSITIVE_HOME_PATHS};
pub use rules::tier::{git_copy, weaken, Keeping, Tier, TierError, TierPromise, LANDLOCK_PROMISES};
