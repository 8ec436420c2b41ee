//! Tool caches, copy-on-write (design §3.7).
//!
//! Package-manager and toolchain caches in the home hold code the host later builds or
//! runs, so the sandbox must never change the host's copy, yet installs must work with
//! the tools' default settings. Each known cache that exists on the host becomes an
//! overlay inside: the host directory is the read-only lower layer, and the upper and
//! work layers live in Sandy's own per-user cache, kept between sandboxed runs **of the
//! same project** (`$XDG_CACHE_HOME/sandy/overlays/PROJECT-HASH/TOOL-HASH`): a change a
//! run makes to a cache (a crate's source edited, a `build.rs` added) is never seen by a
//! run in another project, which would build it with that project's write access.
//!
//! The names through which a cache home configures or runs programs (`bin`, `config`,
//! `config.toml`, `env`, `.env`, cargo's credentials) are read-only when the host has
//! them, and never kept in a layer when it does not: whatever a run creates at such a
//! name is removed from the layer after the run, and named ([`ToolCache::kept_out`]).
//!
//! A profile can declare a cache of the agent's own (OpenCode's `~/.cache/opencode`,
//! where it downloads `rg` and language servers that its next launch runs): it is an
//! overlay the same way, created empty at a first launch.
//!
//! A cache that does not exist on the host is not created in
//! the home: when the tool is on `PATH`, its own environment variable is pointed at a
//! directory in the run's private `/tmp` instead (discarded with it).
//!
//! Where a cache is found follows the tool's own rules (its environment variable, then
//! `XDG_CACHE_HOME`, then its default), so a moved or symlinked cache is covered where the
//! tool actually reads it.

use crate::model::paths::normalize;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::host::context::HostContext;
use crate::host::inspect::{FileKind, PathInspector};
pub use crate::model::caches::{CacheKind, ToolCache};
use crate::model::paths::{PRIVATE_SHM, PRIVATE_TMP, PRIVATE_VAR_TMP};
use crate::model::policy::{Access, Grant, Origin, Protection, ProtectionKind, Scope};

/// Where Sandy keeps the layers, below its per-user cache directory.
pub const OVERLAYS_DIR: &str = "overlays";
/// The file in a project's directory of layers that names the project (for `sandy cache`).
pub const PROJECT_FILE: &str = "project";
/// The names in every cache directory through which a tool configures itself or runs
/// programs (see [`ToolCache::kept_out`]); a `Spec` adds its own.
pub const LAUNCH_NAMES: &[&str] = &["bin", "config", "config.toml", "env", ".env"];
/// Where redirected caches go, below the private per-run `/tmp`.
pub const REDIRECT_DIR: &str = ".sandy-caches";

/// How a tool's environment variable carries a redirected cache.
#[derive(Debug, Clone, Copy)]
enum Redirect {
    /// No variable: an absent cache stays absent (and unwritable).
    None,
    /// `NAME=DIR`.
    Set(&'static str),
    /// Appended to `NAME` (Maven's `MAVEN_OPTS=... -Dmaven.repo.local=DIR`).
    Append(&'static str, &'static str),
}

/// One known cache: where the tool finds it, and what Sandy does when it is absent.
struct Spec {
    tool: &'static str,
    locate: fn(&Paths<'_>) -> Option<PathBuf>,
    redirect: Redirect,
    /// The tool's commands: an absent cache is redirected only when one of them is on
    /// `PATH`, so that runs without the tool carry no variable for it.
    commands: &'static [&'static str],
    /// Names inside the cache directory, besides [`LAUNCH_NAMES`], kept read-only in the
    /// overlay and never kept in a layer (cargo's credentials live in `CARGO_HOME` beside
    /// its caches).
    read_only: &'static [&'static str],
}

/// The base directories the tools derive their caches from.
struct Paths<'a> {
    home: &'a Path,
    host: &'a HostContext,
}

impl Paths<'_> {
    fn var(&self, name: &str) -> Option<PathBuf> {
        self.host
            .var(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }
    fn xdg_cache(&self) -> PathBuf {
        self.var("XDG_CACHE_HOME")
            .unwrap_or_else(|| self.home.join(".cache"))
    }
    fn xdg_data(&self) -> PathBuf {
        self.var("XDG_DATA_HOME")
            .unwrap_or_else(|| self.home.join(".local/share"))
    }
    fn gopath(&self) -> PathBuf {
        // GOPATH is a list; the module cache lives in its first entry.
        self.host
            .var("GOPATH")
            .and_then(|v| std::env::split_paths(v).next())
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| self.home.join("go"))
    }
}

const SPECS: &[Spec] = &[
    Spec {
        // The whole CARGO_HOME: cargo keeps its lock files (`.package-cache`), its
        // last-use database (`.global-cache`) and `registry`/`git` side by side there.
        tool: "cargo",
        locate: |p| Some(p.var("CARGO_HOME").unwrap_or_else(|| p.home.join(".cargo"))),
        redirect: Redirect::Set("CARGO_HOME"),
        commands: &["cargo"],
        read_only: &["credentials", "credentials.toml"],
    },
    Spec {
        tool: "npm",
        locate: |p| {
            Some(
                p.var("npm_config_cache")
                    .unwrap_or_else(|| p.home.join(".npm")),
            )
        },
        redirect: Redirect::Set("npm_config_cache"),
        commands: &["npm", "npx"],
        read_only: &[],
    },
    Spec {
        tool: "pip",
        locate: |p| {
            Some(
                p.var("PIP_CACHE_DIR")
                    .unwrap_or_else(|| p.xdg_cache().join("pip")),
            )
        },
        redirect: Redirect::Set("PIP_CACHE_DIR"),
        commands: &["pip", "pip3"],
        read_only: &[],
    },
    Spec {
        tool: "uv",
        locate: |p| {
            Some(
                p.var("UV_CACHE_DIR")
                    .unwrap_or_else(|| p.xdg_cache().join("uv")),
            )
        },
        redirect: Redirect::Set("UV_CACHE_DIR"),
        commands: &["uv"],
        read_only: &[],
    },
    Spec {
        tool: "go-mod",
        locate: |p| {
            Some(
                p.var("GOMODCACHE")
                    .unwrap_or_else(|| p.gopath().join("pkg/mod")),
            )
        },
        redirect: Redirect::Set("GOMODCACHE"),
        commands: &["go"],
        read_only: &[],
    },
    Spec {
        tool: "go-build",
        locate: |p| {
            Some(
                p.var("GOCACHE")
                    .unwrap_or_else(|| p.xdg_cache().join("go-build")),
            )
        },
        redirect: Redirect::Set("GOCACHE"),
        commands: &["go"],
        read_only: &[],
    },
    Spec {
        tool: "maven",
        locate: |p| Some(p.home.join(".m2/repository")),
        redirect: Redirect::Append("MAVEN_OPTS", "-Dmaven.repo.local="),
        commands: &["mvn"],
        read_only: &[],
    },
    Spec {
        tool: "yarn",
        locate: |p| {
            Some(
                p.var("YARN_CACHE_FOLDER")
                    .unwrap_or_else(|| p.xdg_cache().join("yarn")),
            )
        },
        redirect: Redirect::Set("YARN_CACHE_FOLDER"),
        commands: &["yarn", "yarnpkg"],
        read_only: &[],
    },
    Spec {
        // Yarn 2+ keeps its global cache in its own folder.
        tool: "yarn-berry",
        locate: |p| Some(p.home.join(".yarn/berry")),
        redirect: Redirect::None,
        commands: &["yarn"],
        read_only: &[],
    },
    Spec {
        tool: "pnpm-store",
        locate: |p| {
            Some(
                p.var("npm_config_store_dir")
                    .or_else(|| p.var("PNPM_HOME").map(|h| h.join("store")))
                    .unwrap_or_else(|| p.xdg_data().join("pnpm/store")),
            )
        },
        redirect: Redirect::Set("npm_config_store_dir"),
        commands: &["pnpm"],
        read_only: &[],
    },
    Spec {
        tool: "pnpm-cache",
        locate: |p| {
            Some(
                p.var("npm_config_cache_dir")
                    .unwrap_or_else(|| p.xdg_cache().join("pnpm")),
            )
        },
        redirect: Redirect::Set("npm_config_cache_dir"),
        commands: &["pnpm"],
        read_only: &[],
    },
];

/// Sandy's per-user cache directory: `$XDG_CACHE_HOME/sandy`, or `~/.cache/sandy`.
pub fn sandy_cache_dir(home: &Path, host: &HostContext) -> PathBuf {
    Paths { home, host }.xdg_cache().join("sandy")
}

/// Sandy's per-user state directory (the pre-run copies `sandy restore` puts back):
/// `$XDG_STATE_HOME/sandy`, or `~/.local/state/sandy`.
pub fn sandy_state_dir(home: &Path, host: &HostContext) -> PathBuf {
    let paths = Paths { home, host };
    paths
        .var("XDG_STATE_HOME")
        .unwrap_or_else(|| home.join(".local/state"))
        .join("sandy")
}

/// The directories the sandbox replaces with private ones: a cache below one is left
/// as it is (the tool sees the private directory).
pub(crate) fn hidden_dirs(host: &HostContext) -> Vec<&Path> {
    [PRIVATE_TMP, PRIVATE_SHM, PRIVATE_VAR_TMP]
        .iter()
        .map(Path::new)
        .chain(host.var("XDG_RUNTIME_DIR").map(Path::new))
        .collect()
}

/// The overlays a launch is expected to have, known before its policy is resolved: the
/// existing caches that `plan_caches` makes overlays when no writable grant covers
/// them. The supervisor has the bootstrap mount those whose layers exist already while
/// it resolves the policy, which then decides which are used (a cache inside the project
/// or a `--read-write` grant is not). No command is looked up on `PATH`: only a
/// redirected cache needs that.
pub fn expected_overlays(host: &HostContext, fs: &dyn PathInspector) -> Vec<ToolCache> {
    let Some(home) = host.home.as_deref() else {
        return Vec::new();
    };
    let Ok(project) = fs.canonicalize(&host.cwd) else {
        return Vec::new();
    };
    plan_caches(home, host, fs, &project, &[], &hidden_dirs(host), &[], &[])
        .caches
        .into_iter()
        .filter(|c| c.kind == CacheKind::Overlay)
        .collect()
}

/// A cache an agent profile declares as its own (OpenCode's downloads): an overlay like
/// the tools' caches. `created`: absent now, made empty before launch (its first start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileCache {
    pub tool: String,
    pub path: PathBuf,
    pub created: bool,
}

/// The directory holding one project's layers: `OVERLAYS/NAME-HASH`, after the project
/// directory's name (letters, digits, `.`, `_`, `-` only, at most 32) and a hash of its
/// canonical path.
pub fn project_layers(overlays: &Path, project: &Path) -> PathBuf {
    let name: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(32)
        .collect();
    let name = name.trim_start_matches('.');
    let name = if name.is_empty() { "project" } else { name };
    overlays.join(format!("{name}-{:016x}", fnv1a(project.as_os_str())))
}

/// What the caches add to a run.
#[derive(Debug, Default)]
pub(crate) struct CachePlan {
    pub caches: Vec<ToolCache>,
    pub grants: Vec<Grant>,
    pub protections: Vec<Protection>,
    /// Variables set for redirected caches (name, value).
    pub environment: Vec<(OsString, OsString)>,
}

/// Finds the known caches and decides how each is seen. `writable` are the grants already
/// writable (the project, `--read-write`): a cache inside one is the user's to write and
/// is left alone, as is one under a directory the sandbox replaces (`hidden`). Layers are
/// `project`'s own. `profile` are the caches the agent's profile declares.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_caches(
    home: &Path,
    host: &HostContext,
    fs: &dyn PathInspector,
    project: &Path,
    writable: &[PathBuf],
    hidden: &[&Path],
    path_dirs: &[PathBuf],
    profile: &[ProfileCache],
) -> CachePlan {
    let paths = Paths { home, host };
    let overlays = sandy_cache_dir(home, host).join(OVERLAYS_DIR);
    let root = project_layers(&overlays, project);
    let mut plan = CachePlan::default();
    let mut on_path: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    // Layers under a directory the sandbox replaces (an XDG_CACHE_HOME in /tmp) would be
    // looked up in the private one: no caches then, as before.
    if !usable_in_mount_options(&root) || hidden.iter().any(|h| root.starts_with(h)) {
        return plan;
    }
    let tools = SPECS
        .iter()
        .map(|spec| {
            let name = (spec.locate)(&paths).map(|p| normalize(&p));
            (spec.tool, name, Some(spec), false)
        })
        .chain(
            profile
                .iter()
                .map(|c| (c.tool.as_str(), Some(c.path.clone()), None, c.created)),
        );
    for (tool, name, spec, created) in tools {
        let Some(name) = name else {
            continue;
        };
        // One stat first: most caches are absent, and resolving a path costs a system
        // call per component.
        let existing = if created {
            Some(name.clone())
        } else {
            (fs.kind(&name) == Some(FileKind::Directory))
                .then(|| fs.canonicalize(&name).ok())
                .flatten()
                .filter(|c| fs.kind(c) == Some(FileKind::Directory))
        };
        let place = existing.clone().unwrap_or_else(|| name.clone());
        let overlaps_sandy = place.starts_with(&overlays) || overlays.starts_with(&place);
        let left_alone = writable.iter().any(|w| place.starts_with(w))
            || hidden.iter().any(|h| place.starts_with(h))
            || overlaps_sandy;
        if left_alone || plan.caches.iter().any(|c| c.path == place) {
            continue;
        }
        let layer = root.join(format!("{tool}-{:016x}", fnv1a(place.as_os_str())));
        match existing {
            Some(dir) if usable_in_mount_options(&dir) => {
                plan.grants.push(Grant {
                    path: dir.clone(),
                    access: Access::ReadWrite,
                    scope: Scope::Subtree,
                    origin: Origin::Baseline,
                });
                let own = spec.map_or(&[][..], |s| s.read_only);
                let kept_out: Vec<String> = LAUNCH_NAMES
                    .iter()
                    .chain(own)
                    .map(|n| (*n).to_owned())
                    .collect();
                for rel in &kept_out {
                    let inner = dir.join(rel);
                    if !created && fs.kind(&inner).is_some() {
                        plan.protections.push(Protection {
                            at_launch: false,
                            path: inner,
                            kind: ProtectionKind::ReadOnly,
                            origin: Origin::Baseline,
                            exists: true,
                            placeholder: None,
                            reason: Some(format!(
                                "{tool}'s installed programs and settings beside its cache, \
                                 which your shell and builds run outside the sandbox"
                            )),
                        });
                    }
                }
                plan.caches.push(ToolCache {
                    tool: tool.to_owned(),
                    path: dir,
                    kind: CacheKind::Overlay,
                    layer,
                    variable: None,
                    kept_out,
                });
            }
            Some(_) => {}
            None => {
                let Some(spec) = spec else {
                    continue;
                };
                // Nothing to redirect, or no command of the tool on PATH (each name
                // looked up once: several tools share a command).
                if matches!(spec.redirect, Redirect::None)
                    || !spec.commands.iter().any(|c| {
                        *on_path.entry(*c).or_insert_with(|| {
                            path_dirs
                                .iter()
                                .any(|d| matches!(fs.kind(&d.join(c)), Some(FileKind::File { .. })))
                        })
                    })
                {
                    continue;
                }
                // Nothing is created in the home, not even in Sandy's cache: the run gets
                // a directory in its private /tmp, gone afterwards.
                let layer = Path::new(PRIVATE_TMP).join(REDIRECT_DIR).join(spec.tool);
                let (variable, value) = match spec.redirect {
                    Redirect::None => continue,
                    Redirect::Set(var) => (var, layer.clone().into_os_string()),
                    Redirect::Append(var, prefix) => {
                        let mut value = host.var(var).map(OsStr::to_os_string).unwrap_or_default();
                        if !value.is_empty() {
                            value.push(" ");
                        }
                        value.push(prefix);
                        value.push(&layer);
                        (var, value)
                    }
                };
                let cache = ToolCache {
                    tool: spec.tool.to_owned(),
                    path: name,
                    kind: CacheKind::Redirected,
                    layer,
                    variable: Some(variable.to_owned()),
                    kept_out: Vec::new(),
                };
                plan.environment.push((variable.into(), value));
                plan.caches.push(cache);
            }
        }
    }
    plan
}

/// Overlayfs reads its layers from a comma- and colon-separated option string: a path
/// with those characters (or a backslash) is not offered to it.
fn usable_in_mount_options(path: &Path) -> bool {
    !path
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | b'\n'))
}

/// A stable 64-bit hash (FNV-1a) naming a cache's layer after the path it covers.
fn fnv1a(s: &OsStr) -> u64 {
    s.as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::inspect::FileKind;
    use std::collections::BTreeMap;

    struct Fake(BTreeMap<PathBuf, PathBuf>);

    impl PathInspector for Fake {
        fn kind(&self, path: &Path) -> Option<FileKind> {
            if path.starts_with("/usr/bin") {
                return Some(FileKind::File { executable: true });
            }
            // Like stat(2): a name resolves to its (directory) target.
            (self.0.contains_key(path) || self.0.values().any(|c| c == path))
                .then_some(FileKind::Directory)
        }
        fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf> {
            self.0
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            None
        }
        fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
            None
        }
        fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            Vec::new()
        }
        fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            Vec::new()
        }
    }

    fn host(env: &[(&str, &str)]) -> HostContext {
        HostContext {
            resolvers: Vec::new(),
            cwd: "/h/p".into(),
            home: Some("/h".into()),
            env: env
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            terminals: vec![],
            supervisor_pid: 1,
            uid: 1000,
            git: Default::default(),
        }
    }

    #[test]
    fn existing_caches_are_overlays_absent_ones_are_redirected() {
        let fs = Fake(BTreeMap::from([
            ("/h/.cargo".into(), "/h/.cargo".into()),
            ("/h/.cargo/bin".into(), "/h/.cargo/bin".into()),
            // A symlinked npm cache: the overlay goes where the tool really reads.
            ("/h/.npm".into(), "/data/npm".into()),
            ("/h/p/.cache/pip".into(), "/h/p/.cache/pip".into()),
        ]));
        let h = host(&[
            ("PIP_CACHE_DIR", "/h/p/.cache/pip"),
            ("MAVEN_OPTS", "-Xmx1g"),
        ]);
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &["/h/p".into()],
            &[],
            &["/usr/bin".into()],
            &[],
        );
        let by_tool = |t: &str| plan.caches.iter().find(|c| c.tool == t).cloned();
        let cargo = by_tool("cargo").unwrap();
        assert_eq!(cargo.kind, CacheKind::Overlay);
        assert!(cargo.layer.starts_with("/h/.cache/sandy/overlays"));
        assert_eq!(by_tool("npm").unwrap().path, Path::new("/data/npm"));
        // Inside the project: the user's to write, not Sandy's to overlay.
        assert!(by_tool("pip").is_none());
        let uv = by_tool("uv").unwrap();
        assert_eq!(uv.kind, CacheKind::Redirected);
        assert!(plan
            .environment
            .contains(&("UV_CACHE_DIR".into(), "/tmp/.sandy-caches/uv".into())));
        assert!(plan.grants.iter().all(|g| !g.path.starts_with("/tmp")));
        let maven = by_tool("maven").unwrap();
        let opts = plan
            .environment
            .iter()
            .find(|(k, _)| k == "MAVEN_OPTS")
            .unwrap()
            .1
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            opts,
            format!("-Xmx1g -Dmaven.repo.local={}", maven.layer.display())
        );
        assert!(by_tool("yarn-berry").is_none());
        // No tool on PATH: nothing is redirected, no variable is set.
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &[],
            &[],
            &[],
        );
        assert!(plan.environment.is_empty());
        assert!(plan.caches.iter().all(|c| c.kind == CacheKind::Overlay));
        assert!(plan
            .protections
            .iter()
            .any(|p| p.path == Path::new("/h/.cargo/bin") && p.kind == ProtectionKind::ReadOnly));
        assert!(plan
            .grants
            .iter()
            .any(|g| g.path == Path::new("/data/npm") && g.access == Access::ReadWrite));
    }

    #[test]
    fn the_expected_overlays_are_the_plans_overlays_before_any_grant() {
        let fs = Fake(BTreeMap::from([
            ("/h/.cargo".into(), "/h/.cargo".into()),
            ("/h/.npm".into(), "/data/npm".into()),
            ("/run/user/1000/pip".into(), "/run/user/1000/pip".into()),
            ("/h/p".into(), "/h/p".into()),
        ]));
        let h = host(&[
            ("PIP_CACHE_DIR", "/run/user/1000/pip"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ]);
        let expected = expected_overlays(&h, &fs);
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &hidden_dirs(&h),
            &["/usr/bin".into()],
            &[],
        );
        let overlays: Vec<_> = plan
            .caches
            .iter()
            .filter(|c| c.kind == CacheKind::Overlay)
            .cloned()
            .collect();
        assert_eq!(expected, overlays);
        let tools: Vec<&str> = expected.iter().map(|c| c.tool.as_str()).collect();
        // Under the private runtime directory: left alone, as the policy leaves it.
        assert_eq!(tools, ["cargo", "npm"]);
        // A writable grant takes one out of the policy's overlays, not out of the
        // expected ones: the policy decides which are used.
        let granted = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &["/h/.cargo".into()],
            &[],
            &[],
            &[],
        );
        assert!(granted.caches.iter().all(|c| c.tool != "cargo"));
        // No home: nothing expected.
        let mut homeless = h;
        homeless.home = None;
        assert!(expected_overlays(&homeless, &fs).is_empty());
    }

    #[test]
    fn tool_variables_and_xdg_move_the_caches_and_sandy_layers() {
        let fs = Fake(BTreeMap::from([("/c/pip".into(), "/c/pip".into())]));
        let h = host(&[("XDG_CACHE_HOME", "/c"), ("GOPATH", "/g1:/g2")]);
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &[],
            &["/usr/bin".into()],
            &[],
        );
        let pip = plan.caches.iter().find(|c| c.tool == "pip").unwrap();
        assert_eq!(pip.kind, CacheKind::Overlay);
        assert!(pip.layer.starts_with("/c/sandy/overlays"));
        let go = plan.caches.iter().find(|c| c.tool == "go-mod").unwrap();
        assert_eq!(go.path, Path::new("/g1/pkg/mod"));
        // A cache that would contain Sandy's own layers is never overlaid.
        let h = host(&[("XDG_CACHE_HOME", "/c"), ("PIP_CACHE_DIR", "/c")]);
        let fs = Fake(BTreeMap::from([("/c".into(), "/c".into())]));
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &[],
            &["/usr/bin".into()],
            &[],
        );
        assert!(plan.caches.iter().all(|c| c.tool != "pip"));
        // Sandy's cache under a private directory: nothing.
        let h = host(&[("XDG_CACHE_HOME", "/tmp/c")]);
        let fs = Fake(BTreeMap::from([("/h/.npm".into(), "/h/.npm".into())]));
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &[Path::new("/tmp")],
            &[],
            &[],
        );
        assert!(plan.caches.is_empty());
    }

    #[test]
    fn each_project_has_its_own_layers_and_launch_names_are_kept_out() {
        let fs = Fake(BTreeMap::from([
            ("/h/.cargo".into(), "/h/.cargo".into()),
            (
                "/h/.cargo/config.toml".into(),
                "/h/.cargo/config.toml".into(),
            ),
        ]));
        let h = host(&[]);
        let plan_in = |project: &str, profile: &[ProfileCache]| {
            plan_caches(
                Path::new("/h"),
                &h,
                &fs,
                Path::new(project),
                &[],
                &[],
                &[],
                profile,
            )
        };
        let a = plan_in("/h/work/a", &[]);
        let b = plan_in("/h/work/b", &[]);
        let cargo_a = a.caches.iter().find(|c| c.tool == "cargo").unwrap();
        let cargo_b = b.caches.iter().find(|c| c.tool == "cargo").unwrap();
        assert_eq!(cargo_a.path, cargo_b.path);
        assert_ne!(cargo_a.layer, cargo_b.layer);
        assert_eq!(
            cargo_a.layer.parent().unwrap(),
            project_layers(
                Path::new("/h/.cache/sandy/overlays"),
                Path::new("/h/work/a")
            )
        );
        let dir = cargo_a.layer.parent().unwrap().file_name().unwrap();
        assert!(dir.to_string_lossy().starts_with("a-"), "{dir:?}");
        // Every launch name is kept out of the layer, whether or not the host has it;
        // the one the host has is read-only too.
        for name in [
            "bin",
            "config",
            "config.toml",
            "env",
            ".env",
            "credentials.toml",
        ] {
            assert!(cargo_a.kept_out.iter().any(|n| n == name), "{name}");
        }
        let protected: Vec<_> = a.protections.iter().map(|p| p.path.clone()).collect();
        assert_eq!(protected, [PathBuf::from("/h/.cargo/config.toml")]);
        // A project name that is no file name, or one with odd characters.
        let odd = project_layers(Path::new("/o"), Path::new("/h/.x y,z"));
        assert!(odd.to_string_lossy().starts_with("/o/xyz-"), "{odd:?}");
        assert!(usable_in_mount_options(&odd));
        let root = project_layers(Path::new("/o"), Path::new("/"));
        assert!(
            root.to_string_lossy().starts_with("/o/project-"),
            "{root:?}"
        );
        // A profile's own cache, absent at launch (created then): an overlay all the same.
        let opencode = ProfileCache {
            tool: "opencode".into(),
            path: "/h/.cache/opencode".into(),
            created: true,
        };
        let plan = plan_in("/h/work/a", &[opencode]);
        let own = plan.caches.iter().find(|c| c.tool == "opencode").unwrap();
        assert_eq!(own.kind, CacheKind::Overlay);
        assert!(own.kept_out.iter().any(|n| n == "bin"));
        assert!(plan
            .grants
            .iter()
            .any(|g| g.path == Path::new("/h/.cache/opencode") && g.access == Access::ReadWrite));
    }

    #[test]
    fn paths_overlayfs_cannot_parse_are_skipped() {
        let fs = Fake(BTreeMap::from([("/h/.n,pm".into(), "/h/.n,pm".into())]));
        let h = host(&[("npm_config_cache", "/h/.n,pm")]);
        let plan = plan_caches(
            Path::new("/h"),
            &h,
            &fs,
            Path::new("/h/p"),
            &[],
            &[],
            &["/usr/bin".into()],
            &[],
        );
        assert!(plan.caches.iter().all(|c| c.tool != "npm"));
    }
}
