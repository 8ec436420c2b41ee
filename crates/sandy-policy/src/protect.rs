//! Which paths inside the project must stay immutable so that the user's next `git`
//! command, run outside the sandbox, cannot execute code the sandboxed agent planted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::inspect::{FileKind, PathInspector};
use crate::policy::{Origin, Placeholder, Protection, ProtectionKind};
use crate::resolve::normalize;

/// How much of a git config or pointer file is read.
const GIT_FILE_MAX: usize = 256 * 1024;
/// How many submodule directories are examined.
const MAX_MODULES: usize = 256;

/// The read-only protections for the git repository of `project`: its hooks and config,
/// the targets of a worktree or submodule `.git` file, submodules' hooks and configs, and
/// a `core.hooksPath` directory.
pub fn git_protections(
    project: &Path,
    home: Option<&Path>,
    fs: &dyn PathInspector,
) -> Vec<Protection> {
    let mut out = Vec::new();
    let mut protect = |path: PathBuf, fs: &dyn PathInspector| {
        let exists = fs.kind(&path).is_some();
        // The name, not its symlink target: the mount layer pins the name and protects
        // what it points to.
        let p = Protection {
            path,
            kind: ProtectionKind::ReadOnly,
            origin: Origin::Project,
            exists,
            placeholder: None,
        };
        if !out.contains(&p) {
            out.push(p);
        }
    };

    let dotgit = project.join(".git");
    let (gitdir, commondir) = match fs.kind(&dotgit) {
        Some(FileKind::Directory) => (dotgit.clone(), dotgit.clone()),
        Some(FileKind::File { .. }) => {
            // A worktree or submodule: `.git` is a pointer that could be redirected to a
            // directory full of hooks, so the pointer itself is protected too.
            protect(dotgit.clone(), fs);
            let Some(gitdir) = read_pointer(&dotgit, project, b"gitdir:", fs) else {
                return out;
            };
            let commondir = read_pointer(&gitdir.join("commondir"), &gitdir, b"", fs)
                .unwrap_or_else(|| gitdir.clone());
            (gitdir, commondir)
        }
        _ => {
            protect(dotgit, fs);
            protect(project.join(".gitmodules"), fs);
            return out;
        }
    };

    // Everything git reads that can make it run code: hooks, config, the per-worktree
    // config (honoured with extensions.worktreeConfig) and the `commondir` pointer (which
    // would redirect git to another repository's config and hooks). Listed whether or not
    // they exist: absent ones are reported if the run creates them.
    let mut configs = Vec::new();
    for dir in [&commondir, &gitdir] {
        protect(dir.join("hooks"), fs);
        protect(dir.join("config"), fs);
        protect(dir.join("config.worktree"), fs);
        protect(dir.join("commondir"), fs);
        configs.push(dir.join("config"));
        configs.push(dir.join("config.worktree"));
    }
    // Submodules are registered here; a planted one would be entered by `git status`.
    protect(project.join(".gitmodules"), fs);
    // Submodules checked out with their own `.git` directory (or a pointer file).
    for path in submodule_paths(&project.join(".gitmodules"), fs) {
        let dotgit = normalize(&project.join(OsStr::from_bytes(&path)));
        if !dotgit.starts_with(project) {
            continue;
        }
        let dotgit = dotgit.join(".git");
        match fs.kind(&dotgit) {
            Some(FileKind::Directory) => {
                for name in ["hooks", "config", "config.worktree", "commondir"] {
                    protect(dotgit.join(name), fs);
                }
            }
            Some(_) => protect(dotgit, fs),
            None => {}
        }
    }
    for module in fs.subdirs(&commondir.join("modules"), MAX_MODULES) {
        protect(module.join("hooks"), fs);
        protect(module.join("config"), fs);
    }
    for config in configs {
        if let Some(hooks_path) = hooks_path(&config, fs) {
            let resolved = expand(&hooks_path, project, home);
            protect(resolved, fs);
        }
    }
    // An absent hooks directory of the git directory itself gets an empty read-only
    // placeholder, so that no hook can be created there from inside.
    for p in &mut out {
        if !p.exists && (p.path == commondir.join("hooks") || p.path == gitdir.join("hooks")) {
            p.placeholder = Some(Placeholder::Directory);
        }
    }
    out
}

/// How many submodules of `.gitmodules` are examined.
const MAX_SUBMODULES: usize = 256;

/// The `path = ...` values of a `.gitmodules` file.
fn submodule_paths(file: &Path, fs: &dyn PathInspector) -> Vec<Vec<u8>> {
    let Some(text) = fs.read_head(file, GIT_FILE_MAX) else {
        return Vec::new();
    };
    text.split(|&b| b == b'\n')
        .filter_map(|raw| {
            let line = raw.trim_ascii();
            let eq = line.iter().position(|&b| b == b'=')?;
            let (key, value) = (line[..eq].trim_ascii(), line[eq + 1..].trim_ascii());
            let value = value.strip_prefix(b"\"").unwrap_or(value);
            let value = value.strip_suffix(b"\"").unwrap_or(value);
            (key.eq_ignore_ascii_case(b"path") && !value.is_empty()).then(|| value.to_vec())
        })
        .take(MAX_SUBMODULES)
        .collect()
}

/// Reads a `prefix VALUE` pointer file and resolves VALUE against `base`.
fn read_pointer(
    file: &Path,
    base: &Path,
    prefix: &[u8],
    fs: &dyn PathInspector,
) -> Option<PathBuf> {
    let text = fs.read_head(file, GIT_FILE_MAX)?;
    let line = text.split(|&b| b == b'\n').next()?;
    let value = line.strip_prefix(prefix)?.trim_ascii();
    if value.is_empty() {
        return None;
    }
    let path = Path::new(OsStr::from_bytes(value));
    Some(normalize(&base.join(path)))
}

/// The last `core.hooksPath` value in a git config file (a small, tolerant reader: enough
/// to find where hooks would run from).
fn hooks_path(config: &Path, fs: &dyn PathInspector) -> Option<Vec<u8>> {
    let text = fs.read_head(config, GIT_FILE_MAX)?;
    let mut in_core = false;
    let mut found = None;
    for raw in text.split(|&b| b == b'\n') {
        let line = raw.trim_ascii();
        if line.starts_with(b"[") {
            let section: Vec<u8> = line
                .iter()
                .skip(1)
                .take_while(|&&b| b != b']' && b != b' ' && b != b'"')
                .map(u8::to_ascii_lowercase)
                .collect();
            in_core = section == b"core";
            continue;
        }
        if !in_core {
            continue;
        }
        let Some(eq) = line.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (key, value) = (line[..eq].trim_ascii(), line[eq + 1..].trim_ascii());
        if key.eq_ignore_ascii_case(b"hookspath") {
            let value = value.strip_prefix(b"\"").unwrap_or(value);
            let value = value.strip_suffix(b"\"").unwrap_or(value);
            found = Some(value.to_vec());
        }
    }
    found.filter(|v| !v.is_empty())
}

/// Resolves a `core.hooksPath` value the way git does: `~/` from home, relative paths
/// from the top of the working tree.
fn expand(value: &[u8], project: &Path, home: Option<&Path>) -> PathBuf {
    if let (Some(rest), Some(home)) = (value.strip_prefix(b"~/"), home) {
        return normalize(&home.join(OsStr::from_bytes(rest)));
    }
    normalize(&project.join(OsStr::from_bytes(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hooks_path_from_the_core_section_only() {
        struct One(Vec<u8>);
        impl PathInspector for One {
            fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
                Ok(p.to_path_buf())
            }
            fn kind(&self, _: &Path) -> Option<FileKind> {
                None
            }
            fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
                Some(self.0.clone())
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
        let fs = One(
            b"[user]\n\thooksPath = nope\n[core]\n\tbare = false\n\thooksPath = \"tools/hooks\"\n"
                .to_vec(),
        );
        assert_eq!(
            hooks_path(Path::new("/c"), &fs),
            Some(b"tools/hooks".to_vec())
        );
        let modules = One(
            b"[submodule \"a\"]\n\tpath = libs/a\n\turl = ../a\n[submodule \"b\"]\n\tpath = \"b c\"\n"
                .to_vec(),
        );
        assert_eq!(
            submodule_paths(Path::new("/p/.gitmodules"), &modules),
            vec![b"libs/a".to_vec(), b"b c".to_vec()]
        );
        assert_eq!(
            expand(b"tools/../hooks", Path::new("/p"), None),
            PathBuf::from("/p/hooks")
        );
        assert_eq!(
            expand(b"~/h", Path::new("/p"), Some(Path::new("/home/u"))),
            PathBuf::from("/home/u/h")
        );
    }
}
