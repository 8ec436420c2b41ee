//! What the supervisor learned from the user's own `git` before launch, carried into
//! resolution as data (see [`crate::host::context::HostContext::git`]).
//!
//! The host side (`sandy-cli`'s `gitscan`) asks git itself where each repository's git
//! directories, configuration files and hooks directories are; this crate only turns
//! those facts into protections, without looking at git's formats.

use std::path::PathBuf;

/// Which kind of git directory a [`GitDir`] is (gitrepository-layout(5)).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum GitDirKind {
    /// A repository's own (common) git directory: `.git`, a submodule's
    /// `.git/modules/<name>`, a bare repository. It holds `config`, `hooks/`, `objects/`.
    Common,
    /// A linked worktree's administrative directory (`<common>/worktrees/<id>`): git reads
    /// its `commondir`, `gitdir` and `config.worktree`, and the rest from the common one.
    Linked,
}

/// One git directory, named the way git reaches it.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct GitDir {
    /// Absolute and lexically normalized; a name, not necessarily a canonical path.
    pub path: PathBuf,
    pub kind: GitDirKind,
}

/// Everything the supervisor found about git for the directories a run can write.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GitFacts {
    /// The directories that were scanned (the project and the top of each writable
    /// directory grant).
    pub scanned: Vec<PathBuf>,
    /// The top of every working tree found at or below a scanned directory, or whose
    /// repository a scanned directory belongs to: its `.git` and `.gitmodules` are
    /// protected.
    pub work_trees: Vec<PathBuf>,
    /// Every git directory of those repositories: their own, submodules' (recursively),
    /// linked worktrees' in both directions, and nested repositories'.
    pub git_dirs: Vec<GitDir>,
    /// Every configuration file git reads for them, from every scope, with every file
    /// an `include.path` or `includeIf.*.path` names (matching now or not), recursively.
    pub config_files: Vec<PathBuf>,
    /// Every hooks directory: git's answer for each repository and every
    /// `core.hooksPath` value of every configuration file, resolved as git does.
    pub hook_dirs: Vec<PathBuf>,
    /// What configuration of any scope names as code git runs or copies into new
    /// repositories, where that lies in a scanned directory: the `init.templateDir`
    /// directory (its hooks and config go into every `git init` and `git clone`), and
    /// each file a code-running setting names by path (a `core.fsmonitor` or
    /// `core.pager` script, a filter driver, a credential helper, ...).
    pub command_paths: Vec<PathBuf>,
    /// Directories below the scanned ones that hold an agent's project-level launch
    /// names (`.claude/`, `.mcp.json`, ...): an agent may be started there later, and
    /// would load them. Found by the same walk as the repositories.
    pub agent_dirs: Vec<PathBuf>,
    /// `note:` lines for the user before launch.
    pub notes: Vec<String>,
}
