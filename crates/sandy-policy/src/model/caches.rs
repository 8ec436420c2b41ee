//! The tool caches of a run, as the policy holds them (planned by `rules::caches`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the sandbox sees one tool cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// The host directory is the read-only lower layer of an overlay mounted at the same
    /// place; writes land in `layer/upper` (with a per-run work directory beside it).
    Overlay,
    /// The host has no such cache: the tool's environment variable names `layer`, a
    /// directory in the run's private `/tmp` (nothing is created in the home).
    Redirected,
}

/// One tool cache and the layer Sandy keeps for it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ToolCache {
    /// The tool and the cache (`cargo`, `npm`, `pip`, ...).
    pub tool: String,
    /// Where the tool reads the cache: canonical for an overlay (the mount point), the
    /// absent default for a redirected one.
    pub path: PathBuf,
    pub kind: CacheKind,
    /// Sandy's directory for this cache: `$XDG_CACHE_HOME/sandy/overlays/TOOL-HASH` for an
    /// overlay, `/tmp/.sandy-caches/TOOL` (the private per-run `/tmp`) when redirected.
    pub layer: PathBuf,
    /// The environment variable Sandy set (redirected caches only).
    pub variable: Option<String>,
    /// Names in the cache directory through which the tool configures itself or runs
    /// programs: protected read-only when the host has them; when it does not, whatever
    /// a run creates there is removed from the layer after the run (overlays only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_out: Vec<String>,
}

impl ToolCache {
    /// The overlay's upper layer (the sandbox's changes).
    pub fn upper(&self) -> PathBuf {
        self.layer.join("upper")
    }
    /// The overlay's work directory (the supervisor gives each run its own instead, see
    /// `sandy cache`; this one stands in for it in a dry run's manifest).
    pub fn work(&self) -> PathBuf {
        self.layer.join("work")
    }
}
