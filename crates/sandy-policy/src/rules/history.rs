//! Shell and editor history, kept per project (issue 41, item 8).
//!
//! An interactive shell, a REPL, `less` and vim write their history to a file in the
//! home (`~/.bash_history`, `~/.python_history`, `~/.viminfo`, ...), which the sandbox may
//! neither write nor read: the host's history is the user's record of every command they
//! typed, and a run that could append to it could put a command in the user's next
//! Ctrl-R (a line that runs when recalled), or read what the user typed elsewhere.
//!
//! Each project instead gets its own history directory in Sandy's state, for the runs
//! that have a terminal (no tool keeps history without one)
//! (`$XDG_STATE_HOME/sandy/history/NAME-HASH`, named like the cache layers of
//! [`crate::rules::caches::project_layers`]), made 0700 by the supervisor and bound by the
//! bootstrap at [`INSIDE`] (in the run's private `/tmp`, the only writable place it
//! appears): a directory, so that the tools that save by writing a temporary file and
//! renaming it over the old one (vim, zsh, fish, readline) work. Each tool is pointed at
//! its file there by what the tool itself reads ([`KEPT`]); the host's files are never
//! written and never readable inside (the home stays unreadable).
//!
//! What the run writes in that directory is untrusted: it is read only by later runs of
//! the same project, inside their sandbox (where a symbolic link in it leads nowhere the
//! run could not reach anyway). Sandy itself only creates the directory and binds it; it
//! never reads, lists or follows anything in it on the host.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host::context::HostContext;
pub use crate::model::history::{History, Kept};

/// Where the project's history directory appears inside the sandbox.
pub const INSIDE: &str = "/tmp/.sandy-history";
/// The name of Sandy's directory of histories in its state directory.
pub const HISTORY_DIR: &str = "history";
/// Where the bootstrap writes [`PYTHON_STARTUP`] inside (read-only, Sandy's private
/// `/run`).
pub const PYTHON_STARTUP_PATH: &str = "/run/sandy/python-startup.py";
/// The variable that carries the user's own `PYTHONSTARTUP` to [`PYTHON_STARTUP`], which
/// runs it.
pub const USER_PYTHON_STARTUP: &str = "SANDY_USER_PYTHONSTARTUP";

/// Python before 3.13 has no `PYTHON_HISTORY`: its `site` module installs an interactive
/// hook that reads and writes `~/.python_history`. This start-up file (run before that
/// hook, as `PYTHONSTARTUP`) replaces the hook with the same one on `PYTHON_HISTORY`, then
/// runs the user's own start-up file, if any. Python 3.13+ reads `PYTHON_HISTORY` itself
/// and is left alone.
pub const PYTHON_STARTUP: &str = r#"# Sandy: Python's interactive history, kept per project in $PYTHON_HISTORY
# (Python 3.13+ reads that variable itself; older ones would write ~/.python_history).
import os as _sandy_os, sys as _sandy_sys


def _sandy_history():
    path = _sandy_os.environ.get("PYTHON_HISTORY")
    if not path or _sandy_sys.version_info >= (3, 13):
        return

    def hook():
        # As site.register_readline does, with the history file Sandy keeps.
        try:
            import atexit
            import readline
            import rlcompleter  # noqa: F401
        except ImportError:
            return
        doc = getattr(readline, "__doc__", "") or ""
        readline.parse_and_bind(
            "bind ^I rl_complete" if "libedit" in doc else "tab: complete"
        )
        try:
            readline.read_init_file()
        except OSError:
            pass
        if readline.get_current_history_length() == 0:
            try:
                readline.read_history_file(path)
            except OSError:
                pass

            def write_history():
                try:
                    readline.write_history_file(path)
                except OSError:
                    pass

            atexit.register(write_history)

    _sandy_sys.__interactivehook__ = hook


_sandy_history()
del _sandy_history
_sandy_user = _sandy_os.environ.get("SANDY_USER_PYTHONSTARTUP")
del _sandy_os
if _sandy_user:
    # As Python does with a start-up file it cannot open: a note, and on.
    try:
        with open(_sandy_user) as _sandy_file:
            _sandy_code = compile(_sandy_file.read(), _sandy_user, "exec")
        del _sandy_file
    except OSError as _sandy_error:
        _sandy_sys.stderr.write(f"Could not open PYTHONSTARTUP\n{_sandy_error!r}\n")
        _sandy_code = None
        del _sandy_error
    del _sandy_sys
    if _sandy_code is not None:
        exec(_sandy_code)
    del _sandy_code
else:
    del _sandy_sys
del _sandy_user
"#;

/// What each tool reads, and where it writes without it (checked against the real tools:
/// `crates/sandy-cli/tests/history.rs`). bash and zsh read `HISTFILE` (from the
/// environment, unless a start-up file sets it); Python 3.13+ `PYTHON_HISTORY`, older
/// ones through [`PYTHON_STARTUP`]; node's REPL `NODE_REPL_HISTORY`; less `LESSHISTFILE`;
/// vim `VIMINIT` (see `vim_init`).
pub const KEPT: &[Kept] = &[
    Kept {
        tool: "bash",
        variable: "HISTFILE",
        file: "bash_history",
        instead_of: ".bash_history",
    },
    Kept {
        tool: "zsh",
        variable: "HISTFILE",
        file: "zsh_history",
        instead_of: ".zsh_history",
    },
    Kept {
        tool: "python",
        variable: "PYTHON_HISTORY",
        file: "python_history",
        instead_of: ".python_history",
    },
    Kept {
        tool: "node",
        variable: "NODE_REPL_HISTORY",
        file: "node_repl_history",
        instead_of: ".node_repl_history",
    },
    Kept {
        tool: "less",
        variable: "LESSHISTFILE",
        file: "lesshst",
        instead_of: ".lesshst",
    },
    Kept {
        tool: "vim",
        variable: "VIMINIT",
        file: "viminfo",
        instead_of: ".viminfo",
    },
];

/// Histories Sandy cannot point elsewhere, with why: their writes stay refused.
pub const NOT_KEPT: &[(&str, &str)] = &[(
    "fish",
    "fish writes $XDG_DATA_HOME/fish/fish_history; no variable names that file, and \
     moving XDG_DATA_HOME would move every tool's data",
)];

/// The dry run's account of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunHistory {
    /// The project's history directory on the host, kept between its runs.
    pub directory: String,
    /// Where it appears inside (the only place it does).
    pub inside: String,
    pub kept: Vec<DryRunKept>,
    /// Tools whose history is not kept, with why (their writes to the home are refused).
    pub not_kept: Vec<DryRunNotKept>,
    /// Always `false`: the host's own history files are never written or read inside.
    pub host_files_used: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunKept {
    pub tool: String,
    pub variable: String,
    /// The file inside.
    pub file: String,
    /// The host's file it stands in for, which the run neither reads nor writes.
    pub instead_of: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunNotKept {
    pub tool: String,
    pub reason: String,
}

impl History {
    pub fn dry_run(&self) -> DryRunHistory {
        let home = &self.home;
        DryRunHistory {
            directory: self.directory.display().to_string(),
            inside: INSIDE.to_owned(),
            kept: self
                .kept
                .iter()
                .map(|k| DryRunKept {
                    tool: k.tool.to_owned(),
                    variable: k.variable.to_owned(),
                    file: Path::new(INSIDE).join(k.file).display().to_string(),
                    instead_of: home.join(k.instead_of).display().to_string(),
                })
                .collect(),
            not_kept: NOT_KEPT
                .iter()
                .map(|(tool, reason)| DryRunNotKept {
                    tool: (*tool).to_owned(),
                    reason: (*reason).to_owned(),
                })
                .collect(),
            host_files_used: false,
        }
    }

    /// Whether `path` is the home's history file of a tool whose history this run keeps
    /// elsewhere.
    pub fn stands_in_for(&self, path: &Path) -> Option<&Kept> {
        self.kept
            .iter()
            .find(|k| self.home.join(k.instead_of) == path)
    }
}

/// The project's history directory: `STATE/history/NAME-HASH`.
pub fn directory(state: &Path, project: &Path) -> PathBuf {
    crate::rules::caches::project_layers(&state.join(HISTORY_DIR), project)
}

/// vim reads `VIMINIT` instead of searching for the user's vimrc: Sandy's does that
/// search as vim does (`~/.vimrc`, then `~/.vim/vimrc`, else vim's `defaults.vim`), then
/// sets `viminfofile` after it, so a vimrc that names `~/.viminfo` is overridden too.
/// Neovim reads `VIMINIT` too, instead of its `init.lua` or `init.vim`: Sandy's loads
/// those as Neovim does, then sets its `shadafile` (Neovim's history) beside. A `VIMINIT`
/// of the user's own is kept, with the settings appended.
fn vim_init(user: Option<&OsStr>, viminfo: &Path) -> OsString {
    let shada = viminfo.with_file_name("nvim.shada");
    let set = format!(
        "if has('nvim') | set shadafile={} | else | set viminfofile={} | endif",
        shada.display(),
        viminfo.display()
    );
    match user.filter(|u| !u.is_empty()) {
        Some(user) => {
            let mut v = user.to_os_string();
            v.push(" | ");
            v.push(set);
            v
        }
        None => OsString::from(format!(
            "if has('nvim') \
             | if filereadable(stdpath('config') . '/init.lua') \
             | exe 'luafile' stdpath('config') . '/init.lua' \
             | elseif filereadable(stdpath('config') . '/init.vim') \
             | exe 'source' stdpath('config') . '/init.vim' | endif \
             | elseif filereadable(expand('~/.vimrc')) | source ~/.vimrc \
             | elseif filereadable(expand('~/.vim/vimrc')) | source ~/.vim/vimrc \
             | else | source $VIMRUNTIME/defaults.vim | endif | {set}"
        )),
    }
}

/// The history of a run of `command` in `project`: `None` without a terminal (the tools
/// keep history only when they are used on one, so a scripted run leaves nothing in
/// Sandy's state) or without a home (no state directory to keep it in).
pub fn plan(host: &HostContext, project: &Path, command: &OsStr) -> Option<History> {
    if host.terminals.is_empty() {
        return None;
    }
    let home = host.home.as_deref()?;
    let state = crate::rules::caches::sandy_state_dir(home, host);
    let directory = directory(&state, project);
    let inside = Path::new(INSIDE);
    // One `HISTFILE` for both shells: the one the run starts, by its name.
    let shell = match Path::new(command).file_name().and_then(OsStr::to_str) {
        Some("zsh") => "zsh",
        _ => "bash",
    };
    let kept: Vec<Kept> = KEPT
        .iter()
        .filter(|k| k.variable != "HISTFILE" || k.tool == shell)
        .copied()
        .collect();
    let mut environment: Vec<(OsString, OsString)> = kept
        .iter()
        .map(|k| {
            let file = inside.join(k.file);
            let value = if k.tool == "vim" {
                vim_init(host.var("VIMINIT"), &file)
            } else {
                file.into_os_string()
            };
            (OsString::from(k.variable), value)
        })
        .collect();
    // Python before 3.13, through Sandy's start-up file, which runs the user's own.
    environment.push(("PYTHONSTARTUP".into(), PYTHON_STARTUP_PATH.into()));
    if let Some(user) = host.var("PYTHONSTARTUP").filter(|v| !v.is_empty()) {
        environment.push((USER_PYTHON_STARTUP.into(), user.to_os_string()));
    }
    Some(History {
        directory,
        home: home.to_path_buf(),
        kept,
        environment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(env: &[(&str, &str)]) -> HostContext {
        HostContext {
            home: Some(PathBuf::from("/home/u")),
            env: env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            resolvers: Vec::new(),
            cwd: "/p/a".into(),
            terminals: vec!["/dev/pts/0".into()],
            supervisor_pid: 7,
            uid: 1000,
            git: crate::host::gitfacts::GitFacts::default(),
        }
    }

    fn var<'a>(h: &'a History, name: &str) -> Option<&'a OsStr> {
        h.environment
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    #[test]
    fn each_project_has_its_own_directory_in_sandys_state() {
        let h = host(&[]);
        let a = plan(&h, Path::new("/p/a"), OsStr::new("bash")).unwrap();
        let b = plan(&h, Path::new("/q/a"), OsStr::new("bash")).unwrap();
        assert!(a
            .directory
            .starts_with("/home/u/.local/state/sandy/history"));
        assert!(a
            .directory
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("a-"));
        assert_ne!(a.directory, b.directory);
        let moved = host(&[("XDG_STATE_HOME", "/s")]);
        let c = plan(&moved, Path::new("/p/a"), OsStr::new("bash")).unwrap();
        assert!(c.directory.starts_with("/s/sandy/history"));
        let homeless = HostContext {
            home: None,
            ..host(&[])
        };
        assert!(plan(&homeless, Path::new("/p"), OsStr::new("x")).is_none());
        // Without a terminal nothing keeps history: nothing is made.
        let scripted = HostContext {
            terminals: Vec::new(),
            ..host(&[])
        };
        assert!(plan(&scripted, Path::new("/p"), OsStr::new("bash")).is_none());
    }

    /// A `HISTFILE` (or `PYTHONSTARTUP`) of the user's names a host file: replaced; the
    /// user's own start-up file still runs; zsh gets its own file.
    #[test]
    fn the_users_variables_are_replaced_or_chained() {
        let h = host(&[
            ("HISTFILE", "/home/u/.bash_history"),
            ("PYTHONSTARTUP", "/home/u/.pythonrc"),
            ("VIMINIT", "set ts=3"),
        ]);
        let p = plan(&h, Path::new("/p/a"), OsStr::new("/bin/bash")).unwrap();
        assert_eq!(
            var(&p, "HISTFILE"),
            Some(OsStr::new("/tmp/.sandy-history/bash_history"))
        );
        assert_eq!(
            var(&p, "PYTHONSTARTUP"),
            Some(OsStr::new(PYTHON_STARTUP_PATH))
        );
        assert_eq!(
            var(&p, USER_PYTHON_STARTUP),
            Some(OsStr::new("/home/u/.pythonrc"))
        );
        assert_eq!(
            var(&p, "VIMINIT"),
            Some(OsStr::new(
                "set ts=3 | if has('nvim') | set shadafile=/tmp/.sandy-history/nvim.shada \
                 | else | set viminfofile=/tmp/.sandy-history/viminfo | endif"
            ))
        );
        let z = plan(&h, Path::new("/p/a"), OsStr::new("zsh")).unwrap();
        assert_eq!(
            var(&z, "HISTFILE"),
            Some(OsStr::new("/tmp/.sandy-history/zsh_history"))
        );
        assert_eq!(
            z.kept.iter().filter(|k| k.variable == "HISTFILE").count(),
            1
        );
        let plain = plan(&host(&[]), Path::new("/p/a"), OsStr::new("vim")).unwrap();
        let vim = var(&plain, "VIMINIT").unwrap().to_str().unwrap();
        assert!(
            vim.starts_with("if has('nvim') | if filereadable("),
            "{vim}"
        );
        assert!(vim.contains("| elseif filereadable(expand('~/.vimrc')) | source ~/.vimrc"));
        assert!(vim.ends_with("| else | set viminfofile=/tmp/.sandy-history/viminfo | endif"));
        assert_eq!(var(&plain, USER_PYTHON_STARTUP), None);
        assert!(plain
            .stands_in_for(Path::new("/home/u/.bash_history"))
            .is_some());
        assert!(plain.stands_in_for(Path::new("/home/u/.bashrc")).is_none());
    }
}
