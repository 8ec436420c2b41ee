//! Which paths must stay immutable so that the user's next `git` command, run outside the
//! sandbox, cannot execute code the sandboxed run planted.
//!
//! The supervisor asks the user's git where everything is ([`GitFacts`]); this module
//! turns each git directory into the paths of its configuration and execution surface
//! (gitrepository-layout(5)), named the way git reaches them (never resolved through
//! symlinks: the mount layer pins every component of a name).

use std::path::{Path, PathBuf};

use crate::host::gitfacts::{GitDirKind, GitFacts};
use crate::host::inspect::PathInspector;
use crate::model::paths::normalize;
use crate::model::policy::{Origin, Placeholder, Protection, ProtectionKind};

/// What git reads, in a repository's own (common) git directory, as configuration or as
/// code to run, and what Sandy may create there when it is absent.
///
/// - `config`: the repository's configuration. Never created: a repository without one
///   is not something Sandy should invent.
/// - `config.worktree`: read when `extensions.worktreeConfig` is set; git reads an empty
///   file as an empty configuration, so an empty placeholder is harmless.
/// - `hooks/`: scripts git runs; an empty directory runs nothing.
/// - `commondir`: redirects git to another repository's config and hooks. Git refuses
///   an empty one ("failed to read commondir"), so nothing is created.
/// - `gitdir`: the back-pointer `git worktree` maintains; not created.
/// - `objects/info/alternates`: object stores git reads from elsewhere; an empty file
///   names none (checked with `git status` and `git gc`).
/// - `objects/info/http-alternates`: the same for dumb-HTTP fetches; not created.
/// - `remotes/`, `branches/`: legacy remote definitions git still reads (URLs and
///   refspecs a later fetch or push follows); rarely present, so protecting them costs
///   nothing, and nothing is created.
///
/// Deliberately not protected: `info/attributes`, `info/exclude` and
/// `info/sparse-checkout`. Attributes can only *select* a filter, diff or merge driver by
/// name; the command behind a driver is defined in configuration, which is protected, and
/// the working tree's own `.gitattributes` has the same power and must stay writable.
/// Refs, `HEAD`, `index`, `packed-refs` and `logs/` are data git must write for `add`,
/// `commit`, `checkout -b`, `stash`, `fetch` and `gc`; a gitlink planted in the index is
/// caught by the post-run verification.
const COMMON_SURFACE: &[(&str, Option<Placeholder>)] = &[
    ("config", None),
    ("config.worktree", Some(Placeholder::EmptyFile)),
    ("hooks", Some(Placeholder::Directory)),
    ("commondir", None),
    ("gitdir", None),
    // Alternates make git read objects from elsewhere, never run anything: an absent one
    // is reported after the run if created, with no placeholder (and no stderr line) on
    // every run in every repository.
    ("objects/info/alternates", None),
    ("objects/info/http-alternates", None),
    ("remotes", None),
    ("branches", None),
];

/// What git reads in a linked worktree's administrative directory (`worktrees/<id>`):
/// the pointer to the common directory, the back-pointer to the working tree and the
/// per-worktree configuration. Everything else comes from the common directory.
const LINKED_SURFACE: &[(&str, Option<Placeholder>)] = &[
    ("commondir", None),
    ("gitdir", None),
    ("config.worktree", Some(Placeholder::EmptyFile)),
];

/// The read-only protections for every repository in `facts`, and for the `.git` and
/// `.gitmodules` names of every directory in `roots` (so that a repository created by
/// the run is reported afterwards).
pub fn git_protections(
    facts: &GitFacts,
    roots: &[PathBuf],
    fs: &dyn PathInspector,
) -> Vec<Protection> {
    let mut out: Vec<Protection> = Vec::new();
    let git_dirs: Vec<&Path> = facts.git_dirs.iter().map(|d| d.path.as_path()).collect();
    let mut protect = |path: PathBuf, placeholder: Option<Placeholder>| {
        let path = normalize(&path);
        if out.iter().any(|p| p.path == path) {
            return;
        }
        let exists = fs.kind(&path).is_some() || fs.read_link(&path).is_some();
        out.push(Protection {
            at_launch: false,
            path,
            kind: ProtectionKind::ReadOnly,
            origin: Origin::Project,
            exists,
            placeholder,
            reason: None,
        });
    };

    for dir in &facts.git_dirs {
        let surface = match dir.kind {
            GitDirKind::Common => COMMON_SURFACE,
            GitDirKind::Linked => LINKED_SURFACE,
        };
        for (name, placeholder) in surface {
            protect(dir.path.join(name), *placeholder);
        }
    }
    // The `.git` entry (a directory, a pointer file or a symlink: replacing it replaces
    // the whole repository) and `.gitmodules` (which registers submodules `git status`
    // enters). A working tree's `.gitmodules` is the user's file: nothing is created.
    //
    // A `.git` *directory* is not protected as a whole (git must write its index, objects
    // and refs): its surface is, and the mount layer pins its name as a component of
    // those paths.
    for top in facts.work_trees.iter().chain(roots) {
        let dotgit = top.join(".git");
        let real_directory = fs.read_link(&dotgit).is_none()
            && fs.kind(&dotgit) == Some(crate::host::inspect::FileKind::Directory);
        if !real_directory {
            protect(dotgit, None);
        }
        protect(top.join(".gitmodules"), None);
    }
    for file in &facts.config_files {
        protect(file.clone(), None);
    }
    // Programs and templates the configuration names inside a writable tree: never
    // created (an absent one is reported after the run if the run makes it).
    for path in &facts.command_paths {
        protect(path.clone(), None);
    }
    // An empty hooks directory runs nothing, but Sandy creates one only inside a git
    // directory (design promise 5); elsewhere an absent one is reported if created.
    for hooks in &facts.hook_dirs {
        let inside_git_dir = git_dirs.iter().any(|g| hooks.starts_with(g));
        protect(
            hooks.clone(),
            inside_git_dir.then_some(Placeholder::Directory),
        );
    }
    // What the hooks run by a fixed path in the working tree (husky's hook bodies, a
    // script a hook names): a hook runs it as surely as it runs itself.
    for hooks in &facts.hook_dirs {
        for body in hook_bodies(hooks, &facts.work_trees, fs) {
            protect(body, None);
        }
    }
    out
}

/// The names of the hooks git runs (githooks(5)).
pub const GIT_HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// How many hook files, and how much of each, are read for the paths they run.
const HOOK_FILES_MAX: usize = 64;
const HOOK_READ_MAX: usize = 64 * 1024;

/// The files the hooks in `hooks` run by a fixed path in their working tree (the longest
/// of `tops` that holds the hooks directory):
///
/// - husky (9 and later: `core.hooksPath = .husky/_`, whose wrappers run `.husky/NAME`
///   through `.husky/_/h`; 5 to 8: `.husky/_/husky.sh`): `.husky/NAME` for every hook
///   name, present or not (a body the run creates is reported after it);
/// - any other hook script: every word of it that names, relative to the working tree
///   (`scripts/check.sh`, `./tools/lint`, `"$(git rev-parse --show-toplevel)/x"`,
///   `"$ROOT/x"`), an existing file there, outside `node_modules` (a package tree npm
///   rewrites; its programs are not a hook's own).
fn hook_bodies(hooks: &Path, tops: &[PathBuf], fs: &dyn PathInspector) -> Vec<PathBuf> {
    let Some(top) = tops
        .iter()
        .filter(|t| hooks.starts_with(t))
        .max_by_key(|t| t.as_os_str().len())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let husky = hooks.file_name().is_some_and(|n| n == "_")
        && ["h", "husky.sh"].iter().any(|f| {
            matches!(
                fs.kind(&hooks.join(f)),
                Some(crate::host::inspect::FileKind::File { .. })
            )
        });
    if let (true, Some(dir)) = (husky, hooks.parent()) {
        out.extend(GIT_HOOK_NAMES.iter().map(|name| dir.join(name)));
    }
    for script in fs.files_in(hooks, HOOK_FILES_MAX) {
        let Some(text) = fs.read_head(&script, HOOK_READ_MAX) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        let words = text.split(|c: char| {
            c.is_whitespace() || matches!(c, '"' | '\'' | ';' | '|' | '&' | '(' | '<' | '>' | '`')
        });
        for word in words {
            // After a command substitution or a variable: the rest is relative to the
            // working tree (`$(git rev-parse --show-toplevel)/x`, `$ROOT/x`, `${D}/x`).
            let rel = match word.rfind(")/").or_else(|| word.rfind("}/")) {
                Some(at) => &word[at + 2..],
                None => match word.strip_prefix('$') {
                    Some(var) => var.split_once('/').map_or("", |(_, rest)| rest),
                    None => word,
                },
            };
            let rel = rel.trim_start_matches("./").trim_end_matches([',', ')']);
            let plain = !rel.is_empty()
                && rel.contains('/')
                && !rel.starts_with('/')
                && !rel.starts_with('-')
                && !rel.contains("://")
                && !rel.contains('$')
                && Path::new(rel)
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(n) if n != "node_modules"));
            if !plain {
                continue;
            }
            let path = top.join(rel);
            if matches!(
                fs.kind(&path),
                Some(crate::host::inspect::FileKind::File { .. })
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::gitfacts::GitDir;
    use crate::host::inspect::FileKind;

    /// Only `present` exists.
    struct Present(Vec<PathBuf>);
    impl PathInspector for Present {
        fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
            Ok(p.to_path_buf())
        }
        fn kind(&self, p: &Path) -> Option<FileKind> {
            self.0.iter().any(|x| x == p).then_some(FileKind::Directory)
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

    fn find<'a>(ps: &'a [Protection], path: &str) -> &'a Protection {
        ps.iter()
            .find(|p| p.path == Path::new(path))
            .unwrap_or_else(|| panic!("{path} is not protected: {ps:#?}"))
    }

    #[test]
    fn every_git_dir_gets_its_whole_surface() {
        let facts = GitFacts {
            scanned: vec!["/p".into()],
            work_trees: vec!["/p".into(), "/p/libs/sub".into()],
            git_dirs: vec![
                GitDir {
                    path: "/p/.git".into(),
                    kind: GitDirKind::Common,
                },
                GitDir {
                    path: "/p/.git/modules/libs/sub".into(),
                    kind: GitDirKind::Common,
                },
                GitDir {
                    path: "/p/.git/worktrees/w".into(),
                    kind: GitDirKind::Linked,
                },
            ],
            config_files: vec!["/p/.git/config".into(), "/p/shared.inc".into()],
            hook_dirs: vec!["/p/.git/hooks".into(), "/p/tools/hooks".into()],
            command_paths: vec!["/p/tools/fsmonitor".into(), "/p/templates".into()],
            agent_dirs: vec![],
            notes: vec![],
        };
        let fs = Present(vec![
            "/p/.git".into(),
            "/p/.git/config".into(),
            "/p/.git/hooks".into(),
        ]);
        let ps = git_protections(&facts, &["/p".into()], &fs);
        assert!(ps.iter().all(|p| p.kind == ProtectionKind::ReadOnly));
        let hooks = find(&ps, "/p/.git/hooks");
        assert!(hooks.exists);
        let sub_hooks = find(&ps, "/p/.git/modules/libs/sub/hooks");
        assert!(!sub_hooks.exists);
        assert_eq!(sub_hooks.placeholder, Some(Placeholder::Directory));
        assert_eq!(
            find(&ps, "/p/.git/modules/libs/sub/config").placeholder,
            None
        );
        assert_eq!(
            find(&ps, "/p/.git/modules/libs/sub/objects/info/alternates").placeholder,
            None
        );
        assert_eq!(find(&ps, "/p/.git/commondir").placeholder, None);
        find(&ps, "/p/.git/worktrees/w/commondir");
        find(&ps, "/p/.git/worktrees/w/gitdir");
        find(&ps, "/p/.git/worktrees/w/config.worktree");
        // A linked worktree's admin directory has no hooks or config of its own.
        assert!(!ps
            .iter()
            .any(|p| p.path == Path::new("/p/.git/worktrees/w/hooks")));
        find(&ps, "/p/libs/sub/.git");
        // The project's `.git` directory stays writable: only its surface is protected.
        assert!(!ps.iter().any(|p| p.path == Path::new("/p/.git")));
        find(&ps, "/p/libs/sub/.gitmodules");
        assert_eq!(find(&ps, "/p/shared.inc").placeholder, None);
        // A hooks directory outside every git directory is never created.
        assert_eq!(find(&ps, "/p/tools/hooks").placeholder, None);
        // Nor is a program or a template directory the configuration names.
        assert_eq!(find(&ps, "/p/tools/fsmonitor").placeholder, None);
        assert_eq!(find(&ps, "/p/templates").placeholder, None);
        // One protection per path.
        let mut paths: Vec<_> = ps.iter().map(|p| p.path.clone()).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), ps.len());
    }

    #[test]
    fn a_root_without_a_repository_still_protects_the_names_git_would_use() {
        let ps = git_protections(&GitFacts::default(), &["/p".into()], &Present(vec![]));
        let paths: Vec<_> = ps.iter().map(|p| p.path.clone()).collect();
        assert_eq!(
            paths,
            vec![PathBuf::from("/p/.git"), PathBuf::from("/p/.gitmodules")]
        );
        assert!(ps.iter().all(|p| !p.exists && p.placeholder.is_none()));
    }
}
