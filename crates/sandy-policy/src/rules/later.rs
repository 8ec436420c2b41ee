//! Files in a project that a well-known tool runs or loads, without asking, on the user's
//! next ordinary action outside the sandbox (opening the folder, `cd`, a commit, a
//! build): a run may change them, but never silently. The supervisor names every change
//! to one of them after the run, with its reason (design promise 6).
//!
//! The list is data: each name, relative to the top of the project and of every working
//! tree in it, with what makes it run, and whether only a value that names a path (a
//! version file that points outside the toolchain manager) is worth naming.

/// One file a tool runs or loads on the user's next action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaterFile {
    /// The name, relative to a project or working-tree top.
    pub name: &'static str,
    /// What runs or loads it, and when.
    pub reason: &'static str,
    /// Named only when its new content names a path (contains a `/`).
    pub only_a_path: bool,
}

/// The files, with their reasons.
pub const LATER_FILES: &[LaterFile] = &[
    LaterFile {
        name: ".pre-commit-config.yaml",
        reason: "pre-commit installs and runs the hooks it names at the next commit",
        only_a_path: false,
    },
    LaterFile {
        name: ".envrc",
        reason: "direnv runs it when a shell enters the directory (once allowed)",
        only_a_path: false,
    },
    LaterFile {
        name: ".vscode/tasks.json",
        reason: "VS Code runs its tasks, those with runOn folderOpen when the folder opens",
        only_a_path: false,
    },
    LaterFile {
        name: ".vscode/settings.json",
        reason: "VS Code and its extensions read it when the folder opens (terminal environment, interpreter and tool paths)",
        only_a_path: false,
    },
    LaterFile {
        name: ".cargo/config.toml",
        reason: "cargo runs the programs it names (a runner, a rustc wrapper, build scripts' environment) at the next build",
        only_a_path: false,
    },
    LaterFile {
        name: ".cargo/config",
        reason: "cargo runs the programs it names (a runner, a rustc wrapper) at the next build",
        only_a_path: false,
    },
    LaterFile {
        name: "rust-toolchain.toml",
        reason: "rustup installs and runs the toolchain it names (a path runs any program) at the next cargo or rustc",
        only_a_path: false,
    },
    LaterFile {
        name: "rust-toolchain",
        reason: "rustup installs and runs the toolchain it names at the next cargo or rustc",
        only_a_path: false,
    },
    LaterFile {
        name: ".tool-versions",
        reason: "asdf and mise install and run the tool versions it names when a shell enters the directory",
        only_a_path: false,
    },
    LaterFile {
        name: "mise.toml",
        reason: "mise loads its environment and tasks when a shell enters the directory",
        only_a_path: false,
    },
    LaterFile {
        name: ".mise.toml",
        reason: "mise loads its environment and tasks when a shell enters the directory",
        only_a_path: false,
    },
    LaterFile {
        name: ".nvmrc",
        reason: "nvm and fnm use the Node.js it names, here a path",
        only_a_path: true,
    },
    LaterFile {
        name: ".python-version",
        reason: "pyenv and uv use the Python it names, here a path",
        only_a_path: true,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_relative_and_reasons_given() {
        for f in LATER_FILES {
            assert!(
                !f.name.starts_with('/') && !f.name.contains(".."),
                "{}",
                f.name
            );
            assert!(!f.reason.is_empty());
        }
    }
}
