//! A verified Kontext installation, as the policy holds it (found by `rules::kontext`).

use std::path::PathBuf;

use serde::Deserialize;

/// Kontext's managed mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KontextMode {
    Observe,
    Enforce,
    Remote,
}

/// A verified Kontext installation, as the dry run lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KontextControl {
    pub version: Option<String>,
    /// The hook executable, by name.
    pub executable: PathBuf,
    /// The settings file that registers its hooks (the first one found).
    pub configuration: PathBuf,
    /// The daemon's socket, granted and carried into the private `/tmp`.
    pub socket: PathBuf,
}
