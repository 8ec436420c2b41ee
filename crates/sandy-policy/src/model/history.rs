//! The shell and tool history of a run, as the policy holds it (planned by
//! `rules::history`).

use std::ffi::OsString;
use std::path::PathBuf;

/// One tool's history, kept in the project's directory: what the tool reads to find its
/// file, and the file in the home it would otherwise write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub tool: &'static str,
    /// The variable Sandy sets.
    pub variable: &'static str,
    /// The file's name in the project's history directory.
    pub file: &'static str,
    /// The file in the home (relative) the tool writes without the variable.
    pub instead_of: &'static str,
}

/// The history of one run: the project's directory and the variables set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// The project's history directory on the host (in Sandy's state directory).
    pub directory: PathBuf,
    /// The home, whose history files the run neither reads nor writes.
    pub home: PathBuf,
    /// The tools whose history is kept there, one per file.
    pub kept: Vec<Kept>,
    /// Variables Sandy sets (name, value).
    pub environment: Vec<(OsString, OsString)>,
}
