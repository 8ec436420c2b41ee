//! Views: host files the sandbox sees as a prepared copy (credential-filtered, read-only,
//! or a writable private copy). Each view's target gets an exact grant of its own, and a
//! view replaces a mask on the same path: the copy carries no credential, or is the
//! agent's own private state, so it is what the sandbox may see in place of the file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::host::chain::{chain, Chain, ChainError};
use crate::rules::caches::{hidden_dirs, plan_caches, ProfileCache, ToolCache};

use crate::host::context::HostContext;
use crate::host::inspect::{FileKind, PathInspector};
use crate::model::policy::{
    Access, FileView, FilterRule, Grant, Origin, Protection, ProtectionKind, Scope, ViewKind,
};

/// The shell start-up files an agent's shell (Claude Code's Bash tool, Codex's and
/// Gemini's shells) reads, relative to the home directory: bash (login and interactive),
/// the POSIX `~/.profile`, zsh (with and without `ZDOTDIR`, see below) and fish.
const SHELL_STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".profile",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
    ".zlogout",
    ".config/fish/config.fish",
];

/// How deep `source FILE` lines are followed from a start-up file.
const MAX_SOURCE_DEPTH: usize = 3;
/// How many files the `source` scan adds at most.
const MAX_SOURCED_FILES: usize = 32;
/// How much of a start-up file the `source` scan reads.
const MAX_SCAN_BYTES: usize = 256 * 1024;

/// Read-only, credential-filtered views of the user's shell start-up files
/// (`$ZDOTDIR` is honoured for zsh's files; fish's `conf.d/*.fish` too), and of the files
/// under the home they source
/// (`source FILE` or `. FILE`, with `~`, `$HOME` or `${HOME}`; read, never run; a few
/// levels deep). Every name is listed, existing or not: [`finish_views`] follows each
/// through its symbolic links and keeps those that lead to a regular file.
pub(super) fn shell_startup_views(
    home: &Path,
    host: &HostContext,
    fs: &dyn PathInspector,
) -> (Vec<FileView>, Vec<PathBuf>) {
    let zdotdir = host
        .var("ZDOTDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let mut files: Vec<PathBuf> = SHELL_STARTUP_FILES
        .iter()
        .map(|rel| match (&zdotdir, rel.starts_with(".z")) {
            (Some(z), true) => z.join(rel),
            _ => home.join(rel),
        })
        .collect();
    // fish reads every `conf.d/*.fish` at start-up, before `config.fish`, listing the
    // directory itself.
    let conf_d_dir = home.join(".config/fish/conf.d");
    let conf_d: Vec<PathBuf> = fs
        .files_in(&conf_d_dir, MAX_SOURCED_FILES)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "fish"))
        .collect();
    let mut listed: Vec<PathBuf> = Vec::new();
    if !conf_d.is_empty() {
        listed.push(conf_d_dir);
    }
    files.extend(conf_d);
    let mut frontier: Vec<PathBuf> = files.iter().filter(|p| is_file(fs, p)).cloned().collect();
    let mut sourced = 0;
    for _ in 0..MAX_SOURCE_DEPTH {
        let mut next = Vec::new();
        for file in &frontier {
            let Some(text) = fs.read_head(file, MAX_SCAN_BYTES) else {
                continue;
            };
            // Files a `for` loop or a `source` names by a pattern (`for rc in
            // ~/.bashrc.d/*`, Fedora's default `.bashrc`): the directory's matching files,
            // and the directory listable (the shell expands the pattern inside).
            let mut globbed = Vec::new();
            for (dir, pattern) in sourced_globs(&text, home) {
                let matching: Vec<PathBuf> = fs
                    .files_in(&dir, MAX_SOURCED_FILES)
                    .into_iter()
                    .filter(|f| {
                        f.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| glob_matches(&pattern, n))
                    })
                    .collect();
                if !matching.is_empty() && !listed.contains(&dir) {
                    listed.push(dir);
                }
                globbed.extend(matching);
            }
            for target in sourced_files(&text, home).into_iter().chain(globbed) {
                if sourced < MAX_SOURCED_FILES
                    && !files.contains(&target)
                    && target.starts_with(home)
                    && is_file(fs, &target)
                {
                    sourced += 1;
                    files.push(target.clone());
                    next.push(target);
                }
            }
        }
        frontier = next;
    }
    let views = files
        .into_iter()
        .map(|target| FileView {
            target,
            link: None,
            kind: ViewKind::Filtered,
            origin: Origin::Baseline,
            reason: "shell start-up file, read-only, without assignments that look like \
                     credentials"
                .to_owned(),
            rule: FilterRule::ByName,
        })
        .collect();
    (views, listed)
}

fn is_file(fs: &dyn PathInspector, path: &Path) -> bool {
    matches!(fs.kind(path), Some(FileKind::File { .. }))
}

/// The commands of a shell script, each as its words after the keywords that open it
/// (`then`, `do`, `else`, `{`, `(`): the lines split at `;`, `&&` and `||`, comments
/// left out. Read, never run; no shell parser: enough to find `source` and `for`.
fn shell_commands(text: &[u8]) -> Vec<Vec<String>> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let line = line.replace("&&", ";").replace("||", ";");
        for command in line.split(';') {
            let words: Vec<String> = command
                .split_whitespace()
                .skip_while(|w| matches!(*w, "then" | "do" | "else" | "{" | "("))
                .map(str::to_owned)
                .collect();
            if !words.is_empty() {
                out.push(words);
            }
        }
    }
    out
}

/// The part of a word after `~/`, `$HOME/` or `${HOME}/`.
fn below_home(word: &str) -> Option<&str> {
    ["~/", "$HOME/", "${HOME}/"]
        .iter()
        .find_map(|prefix| word.strip_prefix(prefix))
}

/// The home files a shell script sources: each command that is `source WORD` or
/// `. WORD`, where WORD is a plain path starting with `~/`, `$HOME/` or `${HOME}/`
/// (quotes allowed). Anything else (other variables, command substitution, globs: see
/// [`sourced_globs`]) is not guessed at.
fn sourced_files(text: &[u8], home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for words in shell_commands(text) {
        let [verb, arg, ..] = words.as_slice() else {
            continue;
        };
        if verb != "source" && verb != "." {
            continue;
        }
        let arg = arg.trim_matches(|c| c == '"' || c == '\'');
        let Some(rest) = below_home(arg) else {
            continue;
        };
        if rest.is_empty() || rest.contains(['$', '`', '*', '?', '[', '(']) {
            continue;
        }
        let candidate = home.join(rest);
        if candidate
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            continue;
        }
        out.push(candidate);
    }
    out
}

/// The files a start-up file names by a pattern under the home, as a directory and a
/// pattern for its last component: the words of a `for NAME in ...` list and the
/// argument of `source`/`.` that start with `~/`, `$HOME/` or `${HOME}/` and hold `*` or
/// `?` in their last component only (`for rc in ~/.bashrc.d/*; do . "$rc"; done`). Read,
/// never run: a loop that skips some of them still gets a view of each.
fn sourced_globs(text: &[u8], home: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for words in shell_commands(text) {
        let candidates: &[String] = match words.as_slice() {
            [verb, arg, ..] if verb == "source" || verb == "." => std::slice::from_ref(arg),
            [verb, _name, kw, list @ ..] if verb == "for" && kw == "in" => list,
            _ => continue,
        };
        for word in candidates {
            // Quotes only group (`"$HOME/dir/"*.sh`): the pattern is the same without.
            let word = word.replace(['"', '\''], "");
            let Some(rest) = below_home(&word) else {
                continue;
            };
            let (dir, pattern) = rest.rsplit_once('/').unwrap_or(("", rest));
            let plain = |part: &str| !part.contains(['$', '`', '*', '?', '[', '(', '{']);
            if !pattern.contains(['*', '?'])
                || pattern.contains(['[', '$', '`', '(', '{'])
                || !plain(dir)
                || dir.split('/').any(|c| c == "..")
            {
                continue;
            }
            out.push((home.join(dir), pattern.to_owned()));
        }
    }
    out
}

/// Whether a file name matches a pattern of `*` (any run) and `?` (one character), as
/// the shell matches it: a leading `.` only by a pattern that starts with one.
fn glob_matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it has taken so far.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// An absolute path a variable holds (`None` when it is unset, empty or relative, as the
/// tools themselves then fall back to their default).
fn path_var(host: &HostContext, name: &str) -> Option<PathBuf> {
    host.var(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Package managers' configuration files that may hold a registry token or password
/// beside settings that matter inside (a registry mirror, an index URL, `update-notifier`):
/// each is a read-only view without its credentials. Found where the tool looks
/// (`NPM_CONFIG_USERCONFIG`, `PIP_CONFIG_FILE`, `XDG_CONFIG_HOME`, `CARGO_HOME`).
pub(super) fn package_config_views(
    home: &Path,
    project: &Path,
    host: &HostContext,
) -> Vec<FileView> {
    let var = |name: &str| path_var(host, name);
    let xdg_config = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let cargo_home = var("CARGO_HOME").unwrap_or_else(|| home.join(".cargo"));
    let npmrc = var("NPM_CONFIG_USERCONFIG")
        .or_else(|| var("npm_config_userconfig"))
        .unwrap_or_else(|| home.join(".npmrc"));
    let candidates: Vec<(PathBuf, &str)> = vec![
        (npmrc, "npm"),
        (xdg_config.join("pnpm/rc"), "pnpm"),
        (home.join(".yarnrc"), "yarn"),
        (home.join(".yarnrc.yml"), "yarn"),
        (home.join(".bunfig.toml"), "bun"),
        (home.join(".pypirc"), "twine/setuptools"),
        (xdg_config.join("pip/pip.conf"), "pip"),
        (home.join(".pip/pip.conf"), "pip"),
        (var("PIP_CONFIG_FILE").unwrap_or_default(), "pip"),
        (xdg_config.join("uv/uv.toml"), "uv"),
        (cargo_home.join("config.toml"), "cargo"),
        (cargo_home.join("config"), "cargo"),
        (home.join(".m2/settings.xml"), "maven"),
        (home.join(".gradle/gradle.properties"), "gradle"),
        (home.join(".gitconfig"), "git"),
        (xdg_config.join("git/config"), "git"),
        // The system's, where distributions' git reads it (git's own listing names it
        // wherever it is, when git is asked).
        (
            var("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")),
            "git",
        ),
    ];
    // Every other file git reads as configuration, as git itself lists them (the system's
    // `/etc/gitconfig`; the files the user's configuration includes, whatever their
    // names: `~/.gitconfig.local`, where a token kept out of a shared dotfiles repository
    // often lives, or `~/work.inc`), and each repository's own configuration (a remote's
    // URL with a token in it), filtered by git's rule. A file in the project that is not
    // a repository's configuration is the project's own, which the sandbox reads anyway.
    // Git's protections keep them read-only; the view takes the credentials out.
    let repositories: Vec<&Path> = host.git.git_dirs.iter().map(|d| d.path.as_path()).collect();
    let included = host
        .git
        .config_files
        .iter()
        .filter(|f| {
            let of_repository = f.parent().is_some_and(|d| repositories.contains(&d));
            of_repository || !f.starts_with(project)
        })
        .map(|f| (f.clone(), "git"));
    config_views(
        candidates
            .into_iter()
            .chain(included)
            .filter(|(p, _)| p.is_absolute()),
    )
}

/// A filtered view of each tool's configuration file.
fn config_views<'a>(candidates: impl IntoIterator<Item = (PathBuf, &'a str)>) -> Vec<FileView> {
    candidates
        .into_iter()
        .map(|(target, tool)| {
            let (reason, rule) = if tool == "git" {
                // What a refused write to it should say: the remedy is outside.
                (
                    "git configuration, read-only inside, without lines that look like \
                     credentials; run the `git config` command outside the sandbox"
                        .to_owned(),
                    FilterRule::Git,
                )
            } else {
                (
                    format!(
                        "{tool} configuration, read-only, without lines that look like credentials"
                    ),
                    FilterRule::ByName,
                )
            };
            FileView {
                target,
                link: None,
                kind: ViewKind::Filtered,
                origin: Origin::Baseline,
                reason,
                rule,
            }
        })
        .collect()
}

/// npm's global configuration (`npm config set -g`, `npm login --location=global` write
/// it) and conda's: `PREFIX/etc/npmrc` and `PREFIX/.condarc` in every toolchain prefix a
/// grant makes readable (`~/.npm-global`, nvm's `~/.nvm/versions/node/vX`, a conda
/// install), the system prefixes' npmrc, `$NPM_CONFIG_GLOBALCONFIG`, the npmrc of
/// `$NPM_CONFIG_PREFIX`, `$CONDARC` and the user's `.condarc` files: read-only views
/// without their credentials, like `~/.npmrc`. The system prefixes' npmrc (root's to
/// write, present on most machines with a packaged npm) is a view only when it holds
/// something the filter removes: otherwise the sandbox reads the system's own file, as
/// it reads the rest of `/usr`, and no launch pays a mount for it.
pub(super) fn global_config_views(
    home: &Path,
    host: &HostContext,
    grants: &[Grant],
    fs: &dyn PathInspector,
) -> Vec<FileView> {
    let var = |name: &str| path_var(host, name);
    let xdg_config = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let prefixes = grants
        .iter()
        .filter(|g| g.origin == Origin::Path && g.scope == Scope::Subtree)
        .map(|g| g.path.clone());
    let mut candidates: Vec<(PathBuf, &str)> = Vec::new();
    for prefix in prefixes {
        candidates.push((prefix.join("etc/npmrc"), "npm (global)"));
        candidates.push((prefix.join(".condarc"), "conda"));
    }
    let npm_global = var("NPM_CONFIG_GLOBALCONFIG").or_else(|| var("npm_config_globalconfig"));
    let npm_prefix = var("NPM_CONFIG_PREFIX").or_else(|| var("npm_config_prefix"));
    candidates.extend(
        [
            (npm_global, "npm (global)"),
            (npm_prefix.map(|p| p.join("etc/npmrc")), "npm (global)"),
            (var("CONDARC"), "conda"),
            (Some(home.join(".condarc")), "conda"),
            (Some(home.join(".conda/.condarc")), "conda"),
            (Some(home.join(".conda/condarc")), "conda"),
            (Some(xdg_config.join("conda/.condarc")), "conda"),
            (Some(xdg_config.join("conda/condarc")), "conda"),
        ]
        .into_iter()
        .filter_map(|(p, tool)| p.map(|p| (p, tool))),
    );
    for system in ["/usr/etc/npmrc", "/usr/local/etc/npmrc"].map(PathBuf::from) {
        let secret = match fs.read_head(&system, MAX_SCAN_BYTES + 1) {
            Some(text) if text.len() <= MAX_SCAN_BYTES => {
                crate::rules::filter::filter_file(&system, &text) != text
            }
            Some(_) => true,
            None => false,
        };
        if secret {
            candidates.push((system, "npm (global)"));
        }
    }
    config_views(candidates)
}

/// Tool caches (see [`crate::rules::caches`]): an overlay's mount point becomes a writable
/// grant (the writes land in Sandy's upper layer, never in the host cache), a redirected
/// cache's directory in Sandy's cache too, and the tool's variable is set for it. Caches
/// inside a writable grant of the project or a flag, or under a private directory, are
/// left as they are.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_caches(
    home: Option<&Path>,
    host: &HostContext,
    fs: &dyn PathInspector,
    project: &Path,
    profile: &[ProfileCache],
    grants: &mut Vec<Grant>,
    protections: &mut Vec<Protection>,
    environment: &mut Vec<(OsString, OsString)>,
    set_env: &mut Vec<String>,
) -> Vec<ToolCache> {
    let Some(home) = home else {
        return Vec::new();
    };
    let writable: Vec<PathBuf> = grants
        .iter()
        .filter(|g| {
            g.access == Access::ReadWrite
                && g.scope == Scope::Subtree
                && matches!(g.origin, Origin::Project | Origin::Flag)
        })
        .map(|g| g.path.clone())
        .collect();
    let path_dirs = host
        .var("PATH")
        .map(super::ctx::search_path)
        .unwrap_or_default();
    let plan = plan_caches(
        home,
        host,
        fs,
        project,
        &writable,
        &hidden_dirs(host),
        &path_dirs,
        profile,
    );
    grants.extend(plan.grants);
    protections.extend(plan.protections);
    for (name, value) in plan.environment {
        environment.retain(|(k, _)| *k != name);
        set_env.push(name.to_string_lossy().into_owned());
        environment.push((name, value));
    }
    set_env.sort();
    set_env.dedup();
    plan.caches
}

/// Adds the grants the views need and drops masks that a view replaces.
///
/// Each view's name is followed through its symbolic links ([`chain`]) to the file the
/// tool really opens: the copy is bound over that file and the exact grant is on it (the
/// name is kept as [`FileView::link`]). A filtered view whose name, file or any
/// directory or link on the way lies in a writable tree (the project is the user's
/// dotfiles repository, `~/.bashrc -> ~/dotfiles/bashrc`) is also a read-only
/// protection, under its name and its file: every component on the way is pinned, so
/// renaming a parent inside the project cannot swap the file the name reaches. A name
/// whose link leads nowhere (dangling) is no view, and no refusal: when the missing
/// file lies in a writable tree it is an absent protection, reported after the run if
/// the run creates it. A private copy whose name leads nowhere yet keeps its name (an
/// empty mount point is made at launch). Views whose file lies inside a directory that
/// stays masked are dropped: the mask wins.
pub(super) fn finish_views(
    views: Vec<FileView>,
    grants: &mut Vec<Grant>,
    protections: &mut Vec<Protection>,
    hidden: &dyn Fn(&Path) -> bool,
    fs: &dyn PathInspector,
) -> Vec<FileView> {
    let roots: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite && g.scope == Scope::Subtree)
        .map(|g| g.path.clone())
        .collect();
    let in_root = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    let read_only = |path: PathBuf, exists: bool| Protection {
        at_launch: false,
        path,
        kind: ProtectionKind::ReadOnly,
        origin: Origin::Baseline,
        exists,
        placeholder: None,
        reason: None,
    };
    let mut kept: Vec<FileView> = Vec::with_capacity(views.len());
    for mut view in views {
        let filtered = view.kind == ViewKind::Filtered;
        let name = view.target.clone();
        let mut pinned: Vec<Protection> = Vec::new();
        match chain(&name, &roots, hidden, fs) {
            Ok(Chain {
                pins,
                object: Some(object),
            }) if is_file(fs, &object) => {
                if filtered && (!pins.is_empty() || in_root(&object) || in_root(&name)) {
                    pinned.push(read_only(name.clone(), true));
                    if object != name {
                        pinned.push(read_only(object.clone(), true));
                    }
                }
                if object != name {
                    view.target = object;
                    view.link = Some(name);
                }
            }
            Err(ChainError::Missing { missing, .. }) if filtered => {
                if in_root(&missing)
                    && !protections
                        .iter()
                        .any(|p| p.path == missing && p.kind == ProtectionKind::ReadOnly)
                {
                    protections.push(read_only(missing, false));
                }
                continue;
            }
            _ if filtered => continue,
            // A private copy bound over a name absent at launch (Sandy makes the mount
            // point), or one that is no plain file: decided where the view was made.
            _ => {}
        }
        if kept.iter().any(|k| k.target == view.target) {
            continue;
        }
        let masked_above = protections.iter().any(|p| {
            p.kind == ProtectionKind::Deny
                && p.path != view.target
                && view.target.starts_with(&p.path)
        });
        if masked_above {
            continue;
        }
        // The view replaces a mask or a protection on its path; a filtered (read-only)
        // view leaves a read-only protection there (git's, on a repository's
        // configuration) as it is, with its own origin and reason.
        protections
            .retain(|p| p.path != view.target || (filtered && p.kind == ProtectionKind::ReadOnly));
        for protection in pinned {
            if !protections
                .iter()
                .any(|p| p.path == protection.path && p.kind == ProtectionKind::ReadOnly)
            {
                protections.push(protection);
            }
        }
        let access = match view.kind {
            ViewKind::Filtered => Access::Read,
            ViewKind::PrivateCopy => Access::ReadWrite,
        };
        grants.push(Grant {
            path: view.target.clone(),
            access,
            scope: Scope::Exact,
            origin: view.origin,
        });
        kept.push(view);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::policy::ProtectionKind;

    fn view(target: &str, kind: ViewKind) -> FileView {
        FileView {
            target: target.into(),
            link: None,
            kind,
            origin: Origin::Baseline,
            reason: "test".into(),
            rule: FilterRule::ByName,
        }
    }

    /// Directories and files, no links.
    struct Files(&'static [&'static str], &'static [&'static str]);

    impl PathInspector for Files {
        fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
            Ok(p.to_path_buf())
        }
        fn kind(&self, p: &Path) -> Option<FileKind> {
            if p == Path::new("/") || self.0.iter().any(|d| Path::new(d) == p) {
                Some(FileKind::Directory)
            } else {
                self.1
                    .iter()
                    .any(|f| Path::new(f) == p)
                    .then_some(FileKind::File { executable: false })
            }
        }
        fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
            None
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            None
        }
        fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
        fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            vec![]
        }
    }

    fn mask(path: &str) -> Protection {
        Protection {
            at_launch: false,
            path: path.into(),
            kind: ProtectionKind::Deny,
            origin: Origin::Baseline,
            exists: true,
            placeholder: None,
            reason: None,
        }
    }

    #[test]
    fn a_view_replaces_its_own_mask_but_not_a_masked_directory() {
        let mut grants = Vec::new();
        let mut protections = vec![mask("/h/.npmrc"), mask("/h/.ssh")];
        let kept = finish_views(
            vec![
                view("/h/.npmrc", ViewKind::Filtered),
                view("/h/.ssh/config", ViewKind::Filtered),
                view("/h/.claude.json", ViewKind::PrivateCopy),
                view("/h/.npmrc", ViewKind::PrivateCopy),
            ],
            &mut grants,
            &mut protections,
            &|_| false,
            &Files(
                &["/h", "/h/.ssh"],
                &["/h/.npmrc", "/h/.ssh/config", "/h/.claude.json"],
            ),
        );
        assert_eq!(
            kept,
            vec![
                view("/h/.npmrc", ViewKind::Filtered),
                view("/h/.claude.json", ViewKind::PrivateCopy)
            ]
        );
        assert_eq!(protections, vec![mask("/h/.ssh")]);
        assert_eq!(
            grants,
            vec![
                Grant {
                    path: "/h/.npmrc".into(),
                    access: Access::Read,
                    scope: Scope::Exact,
                    origin: Origin::Baseline
                },
                Grant {
                    path: "/h/.claude.json".into(),
                    access: Access::ReadWrite,
                    scope: Scope::Exact,
                    origin: Origin::Baseline
                }
            ]
        );
    }

    #[test]
    fn sourced_patterns_are_found_without_running_anything() {
        let rc = "if [ -d ~/.bashrc.d ]; then\n  for rc in ~/.bashrc.d/*; do\n    . \"$rc\"\n  done\nfi\n\
                  for f in \"$HOME/.config/sh/\"*.sh ~/one.sh; do source $f; done\n\
                  source ~/.zsh.d/*.zsh\nfor x in ~/a/*/b; do :; done\nfor y in ~/../*; do :; done\n\
                  ls ~/notes/*\nfor z in $OTHER/*; do :; done\n";
        let h = Path::new("/h");
        assert_eq!(
            sourced_globs(rc.as_bytes(), h),
            vec![
                (PathBuf::from("/h/.bashrc.d"), "*".to_owned()),
                (PathBuf::from("/h/.config/sh"), "*.sh".to_owned()),
                (PathBuf::from("/h/.zsh.d"), "*.zsh".to_owned()),
            ]
        );
        for (pattern, name, matches) in [
            ("*", "env.sh", true),
            ("*", ".hidden", false),
            (".*", ".hidden", true),
            ("*.sh", "a.sh", true),
            ("*.sh", "a.sh.bak", false),
            ("a?c*", "abcdef", true),
            ("a?c*", "ac", false),
            ("*x*y", "axbxy", true),
            ("", "", true),
        ] {
            assert_eq!(glob_matches(pattern, name), matches, "{pattern} {name}");
        }
    }

    #[test]
    fn sourced_home_files_are_found_without_running_anything() {
        let rc = "source ~/.bash_aliases\n[ -f ~/.env.sh ] && . ~/.env.sh # secrets\n\
                  if true; then . \"$HOME/.config/sh/fn.sh\"; fi\n. ${HOME}/a\n\
                  source $OTHER/x\n. ~/../etc/passwd\nsource /etc/bash_completion\n\
                  . ~/$(evil)\n# source ~/.commented\n";
        let h = Path::new("/h");
        assert_eq!(
            sourced_files(rc.as_bytes(), h),
            vec![
                PathBuf::from("/h/.bash_aliases"),
                PathBuf::from("/h/.env.sh"),
                PathBuf::from("/h/.config/sh/fn.sh"),
                PathBuf::from("/h/a"),
            ]
        );
    }
}
