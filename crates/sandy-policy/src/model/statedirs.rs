//! Agent state directories and their rules, as the policy holds them (decided by
//! `rules::statedirs`).

use std::path::PathBuf;

use serde::Serialize;

/// What a rule says of the names it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateClass {
    /// Written by the agent in ordinary use: writable inside.
    Writable,
    /// Written by the agent and read into its next prompt (memory): writable, and every
    /// change named after the run, with `sandy restore` able to undo it.
    Watched,
    /// The agent's login: writable (a token refresh), every change named after the run.
    Login,
    /// Read by the agent (configuration, instructions, code): read-only inside.
    ReadOnly,
}

impl StateClass {
    /// Whether the sandbox may write what the rule covers.
    pub fn writes(self) -> bool {
        !matches!(self, StateClass::ReadOnly)
    }
}

/// One rule of a state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateRule {
    /// Relative to the state directory, `/`-separated.
    pub path: String,
    pub class: StateClass,
    pub why: String,
}

/// One agent state directory and its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStateDir {
    pub profile: String,
    pub root: PathBuf,
    pub rules: Vec<StateRule>,
    /// The read-only names found at launch (relative), protected then: a read-only name
    /// found after the run that is not among them was created by the run.
    pub read_only_at_launch: Vec<PathBuf>,
    /// The login files that name their account.
    pub accounts: Vec<Account>,
}

/// A login file (relative to its state directory, `/`-separated) and the keys in it that
/// name the account: dotted JSON key paths, a component `*` for any one key, and a
/// component `NAME#jwt` for the payload of the JSON Web Token at `NAME` (Google's
/// `id_token`, whose `sub` names the account).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    pub path: String,
    pub identity: Vec<String>,
}
