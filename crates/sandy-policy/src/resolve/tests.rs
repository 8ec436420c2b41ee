use std::collections::BTreeMap;
use std::io;

use super::*;
use crate::host::gitfacts::{GitDir, GitDirKind, GitFacts};
use crate::model::paths::normalize;
use crate::model::policy::{FilterRule, LaunchCreation, Placeholder, ViewKind};

/// An in-memory filesystem: paths map to kinds, symlinks to targets.
#[derive(Default)]
struct FakeFs {
    nodes: BTreeMap<PathBuf, FileKind>,
    links: BTreeMap<PathBuf, PathBuf>,
    heads: BTreeMap<PathBuf, Vec<u8>>,
}

impl FakeFs {
    fn dir(mut self, p: &str) -> Self {
        self.nodes.insert(p.into(), FileKind::Directory);
        self
    }
    fn exe(mut self, p: &str) -> Self {
        self.nodes
            .insert(p.into(), FileKind::File { executable: true });
        self
    }
    fn file(mut self, p: &str) -> Self {
        self.nodes
            .insert(p.into(), FileKind::File { executable: false });
        self
    }
    fn dev(mut self, p: &str) -> Self {
        self.nodes.insert(p.into(), FileKind::Other);
        self
    }
    fn link(mut self, p: &str, target: &str) -> Self {
        self.links.insert(p.into(), target.into());
        self
    }
    fn script(mut self, p: &str, head: &str) -> Self {
        self.heads.insert(p.into(), head.as_bytes().to_vec());
        self.exe(p)
    }
}

impl PathInspector for FakeFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        let mut out = PathBuf::from("/");
        for c in normalize(path).components().skip(1) {
            out.push(c);
            let mut hops = 0;
            while let Some(t) = self.links.get(&out) {
                out = if t.is_absolute() {
                    t.clone()
                } else {
                    out.parent().unwrap().join(t)
                };
                out = normalize(&out);
                hops += 1;
                assert!(hops < 10);
            }
        }
        if out == Path::new("/") || self.nodes.contains_key(&out) {
            Ok(out)
        } else {
            Err(io::Error::from(io::ErrorKind::NotFound))
        }
    }
    fn kind(&self, path: &Path) -> Option<FileKind> {
        let c = self.canonicalize(path).ok()?;
        if c == Path::new("/") {
            return Some(FileKind::Directory);
        }
        self.nodes.get(&c).copied()
    }
    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>> {
        let c = self.canonicalize(path).ok()?;
        Some(
            self.heads
                .get(&c)
                .map(|h| h[..h.len().min(max)].to_vec())
                .unwrap_or_default(),
        )
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.links.get(path).cloned()
    }
    fn subdirs(&self, path: &Path, _max: usize) -> Vec<PathBuf> {
        self.nodes
            .iter()
            .filter(|(p, k)| p.parent() == Some(path) && **k == FileKind::Directory)
            .map(|(p, _)| p.clone())
            .collect()
    }
    fn files_in(&self, path: &Path, _max: usize) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .nodes
            .iter()
            .filter(|(p, k)| p.parent() == Some(path) && **k != FileKind::Directory)
            .map(|(p, _)| p.clone())
            .chain(
                self.links
                    .keys()
                    .filter(|p| p.parent() == Some(path))
                    .cloned(),
            )
            .collect();
        out.sort();
        out.dedup();
        out
    }
    fn symlinks_in(&self, path: &Path, _max: usize) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .links
            .keys()
            .filter(|p| p.parent() == Some(path))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn base_fs() -> FakeFs {
    FakeFs::default()
        .dir("/usr")
        .dir("/usr/bin")
        .exe("/usr/bin/true")
        .exe("/usr/bin/env")
        .exe("/usr/bin/python3.11")
        .link("/usr/bin/python3", "python3.11")
        .link("/bin", "usr/bin")
        .dir("/etc")
        .file("/etc/resolv.conf")
        .dir("/proc")
        .dir("/dev")
        .dev("/dev/null")
        .dev("/dev/tty")
        .dir("/home")
        .dir("/home/u")
        .dir("/home/u/proj")
        .dir("/home/u/other")
        .dir("/home/u/.ssh")
        .file("/home/u/.ssh/id_ed25519")
        .dir("/tmp")
        .dir("/tmp/sandy-1")
}

fn host(path: &str) -> HostContext {
    HostContext {
        resolvers: Vec::new(),
        cwd: "/home/u/proj".into(),
        home: Some("/home/u".into()),
        env: vec![
            ("PATH".into(), path.into()),
            ("HOME".into(), "/home/u".into()),
            ("SSH_AUTH_SOCK".into(), "/tmp/ssh-x/agent.1".into()),
            ("LD_PRELOAD".into(), "/evil.so".into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        terminals: vec![],
        supervisor_pid: 7,
        uid: 1000,
        git: GitFacts::default(),
    }
}

fn request(cmd: &[&str]) -> RunRequest {
    RunRequest {
        command: cmd.iter().map(OsString::from).collect(),
        read: vec![],
        read_write: vec![],
        execute: vec![],
        private_tmp: "/tmp/sandy-1".into(),
        block_net: false,
        allow_local_ports: vec![],
        numbat_collector: None,
        numbat: false,
        egress: Default::default(),
        profile: None,
        pass_env: vec![],
        ceilings: Default::default(),
        tier: Default::default(),
        files: Default::default(),
    }
}

fn g(path: &str, access: Access, scope: Scope, origin: Origin) -> Grant {
    Grant {
        path: path.into(),
        access,
        scope,
        origin,
    }
}

#[test]
fn plain_run_resolves_to_the_default_policy() {
    let mut policy = resolve(
        &request(&["true", "a b"]),
        &host("/usr/bin:/bin"),
        &base_fs(),
    )
    .unwrap();
    // Every agent's project-level launch configuration, absent, read-only with its
    // profile and reason (agent_files_are_protected_in_every_run, below).
    let agent_files = policy.protections.split_off(3);
    assert_eq!(
        agent_files
            .iter()
            .map(|p| p.path.to_str().unwrap())
            .collect::<Vec<_>>(),
        PROJECT_AGENT_FILES
    );
    assert!(agent_files.iter().all(|p| p.origin == Origin::Profile
        && p.kind == ProtectionKind::ReadOnly
        && !p.exists
        && p.placeholder.is_none()));
    let expected = ResolvedPolicy {
        program: "/usr/bin/true".into(),
        argv: vec!["true".into(), "a b".into()],
        working_directory: "/home/u/proj".into(),
        environment: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/home/u".into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("SANDY".into(), "1".into()),
        ],
        removed_env: vec!["LD_PRELOAD".into(), "SSH_AUTH_SOCK".into()],
        withheld_env: vec![],
        set_env: vec!["SANDY".into(), "TMPDIR".into()],
        grants: vec![
            g("/usr", Access::ReadExec, Scope::Subtree, Origin::Baseline),
            g("/etc", Access::Read, Scope::Subtree, Origin::Baseline),
            g("/proc", Access::Read, Scope::Subtree, Origin::Baseline),
            g(
                "/dev/null",
                Access::ReadWrite,
                Scope::Exact,
                Origin::Baseline,
            ),
            g(
                "/dev/tty",
                Access::ReadWrite,
                Scope::Exact,
                Origin::Baseline,
            ),
            g(
                "/home/u/proj",
                Access::ReadWrite,
                Scope::Subtree,
                Origin::Project,
            ),
            g("/tmp", Access::ReadWrite, Scope::Subtree, Origin::Baseline),
            g(
                "/dev/shm",
                Access::ReadWrite,
                Scope::Subtree,
                Origin::Baseline,
            ),
            g("/run/sandy", Access::Read, Scope::Subtree, Origin::Baseline),
        ],
        protections: vec![
            Protection {
                at_launch: false,
                path: "/home/u/.ssh".into(),
                kind: ProtectionKind::Deny,
                origin: Origin::Baseline,
                exists: true,
                placeholder: None,
                reason: None,
            },
            Protection {
                at_launch: false,
                path: "/home/u/proj/.git".into(),
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Project,
                exists: false,
                placeholder: None,
                reason: None,
            },
            Protection {
                at_launch: false,
                path: "/home/u/proj/.gitmodules".into(),
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Project,
                exists: false,
                placeholder: None,
                reason: None,
            },
        ],
        network: Network::AllowAll,
        local_ports: vec![],
        resolvers: vec![],
        egress: None,
        profile: ProfileInfo {
            name: "generic".into(),
            detected: false,
        },
        private_tmp: "/tmp/sandy-1".into(),
        runtime_dir: None,
        ceilings: crate::model::ceilings::Ceilings::resolve(&Default::default()),
        notices: vec![],
        views: vec![],
        created_at_launch: vec![],
        state_files: vec![],
        caches: vec![],
        hooks: vec![],
        kontext: None,
        agent_home_files: vec![],
        agent_state: vec![],
        watched: vec![],
        reopened: vec![],
        tier: Default::default(),
        files: Default::default(),
        // No terminal: no history kept (crate::rules::history).
        history: None,
    };
    assert_eq!(policy, expected);
}

#[test]
fn refuses_root_home_and_ancestors_of_home_as_project() {
    for cwd in [
        "/",
        "/home/u",
        "/home",
        "/home/u/.ssh",
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        "/run",
    ] {
        let mut h = host("/usr/bin");
        h.cwd = cwd.into();
        let fs = base_fs()
            .dir("/tmp")
            .dir("/var")
            .dir("/var/tmp")
            .dir("/dev/shm")
            .dir("/run");
        let err = resolve(&request(&["true"]), &h, &fs).unwrap_err();
        assert!(
            matches!(err, ResolveError::UnsafeProject { .. }),
            "{cwd}: {err}"
        );
    }
}

#[test]
fn command_lookup_distinguishes_missing_from_not_executable() {
    let fs = base_fs().file("/usr/bin/notexec");
    let h = host("/usr/bin");
    assert!(matches!(
        resolve(&request(&["nope"]), &h, &fs).unwrap_err(),
        ResolveError::CommandNotFound { .. }
    ));
    assert!(matches!(
        resolve(&request(&["notexec"]), &h, &fs).unwrap_err(),
        ResolveError::NotExecutable { .. }
    ));
    assert!(matches!(
        resolve(&request(&["/usr/bin"]), &h, &fs).unwrap_err(),
        ResolveError::NotExecutable { .. }
    ));
    assert!(matches!(
        resolve(&request(&["./missing"]), &h, &fs).unwrap_err(),
        ResolveError::CommandNotFound { .. }
    ));
}

#[test]
fn explicit_grants_must_exist_and_never_expose_secrets() {
    let h = host("/usr/bin");
    let fs = base_fs();
    type Case = (&'static str, &'static str, fn(&ResolveError) -> bool);
    let cases: Vec<Case> = vec![
        ("--read", "/home/u/missing", |e| {
            matches!(e, ResolveError::MissingPath { .. })
        }),
        ("--read", "/home/u/.ssh", |e| {
            matches!(e, ResolveError::SensitiveGrant { .. })
        }),
        ("--read", "/home/u/.ssh/id_ed25519", |e| {
            matches!(e, ResolveError::SensitiveGrant { .. })
        }),
        ("--read-write", "/home/u", |e| {
            matches!(e, ResolveError::HomeGrant { .. })
        }),
        ("--read-write", "/home", |e| {
            matches!(e, ResolveError::HomeGrant { .. })
        }),
        ("--read", "/", |e| {
            matches!(e, ResolveError::RootGrant { .. })
        }),
        ("--read-write", "../other/../.ssh", |e| {
            matches!(e, ResolveError::SensitiveGrant { .. })
        }),
    ];
    for (flag, path, expect) in cases {
        let mut r = request(&["true"]);
        if flag == "--read" {
            r.read.push(path.into());
        } else {
            r.read_write.push(path.into());
        }
        let err = resolve(&r, &h, &fs).unwrap_err();
        assert!(expect(&err), "{flag} {path}: {err}");
    }
    // A read grant may cover home: the sensitive paths in it are masked.
    let mut home = request(&["true"]);
    home.read.push("/home/u".into());
    let policy = resolve(&home, &h, &fs).unwrap();
    assert!(policy
        .grants
        .contains(&g("/home/u", Access::Read, Scope::Subtree, Origin::Flag)));
    assert!(policy.protections.contains(&Protection {
        at_launch: false,
        path: "/home/u/.ssh".into(),
        kind: ProtectionKind::Deny,
        origin: Origin::Baseline,
        exists: true,
        placeholder: None,
        reason: None,
    }));
    let mut ok = request(&["true"]);
    ok.read.push("../other".into());
    let policy = resolve(&ok, &h, &fs).unwrap();
    assert!(policy.grants.contains(&g(
        "/home/u/other",
        Access::Read,
        Scope::Subtree,
        Origin::Flag
    )));
}

#[test]
fn a_symlink_to_a_secret_is_refused_by_its_target() {
    let fs = base_fs().link("/home/u/other/keys", "/home/u/.ssh");
    let mut r = request(&["true"]);
    r.read.push("/home/u/other/keys".into());
    let err = resolve(&r, &host("/usr/bin"), &fs).unwrap_err();
    assert!(matches!(err, ResolveError::SensitiveGrant { .. }), "{err}");
}

#[test]
fn path_toolchains_and_symlinked_packages_are_granted() {
    let fs = base_fs()
        .dir("/home/u/.local")
        .dir("/home/u/.local/bin")
        .dir("/home/u/.npm-global/lib/node_modules/tool/bin")
        .file("/home/u/.npm-global/lib/node_modules/tool/package.json")
        .script(
            "/home/u/.npm-global/lib/node_modules/tool/bin/tool.js",
            "#!/usr/bin/env node\n",
        )
        .link(
            "/home/u/.local/bin/tool",
            "../../.npm-global/lib/node_modules/tool/bin/tool.js",
        )
        .dir("/home/u/.local/share/uv/tools/ruff/bin")
        .file("/home/u/.local/share/uv/tools/ruff/pyvenv.cfg")
        .exe("/home/u/.local/share/uv/tools/ruff/bin/ruff")
        .link("/home/u/.local/bin/ruff", "../share/uv/tools/ruff/bin/ruff")
        .dir("/home/u/.nvm")
        .dir("/home/u/.nvm/versions")
        .dir("/home/u/.nvm/versions/node")
        .dir("/home/u/.nvm/versions/node/v20")
        .dir("/home/u/.nvm/versions/node/v20/bin")
        .exe("/home/u/.nvm/versions/node/v20/bin/node");
    let h = host("/home/u/.local/bin:/home/u/.nvm/versions/node/v20/bin:/usr/bin");
    let policy = resolve(&request(&["tool"]), &h, &fs).unwrap();
    let path_grants: Vec<&Grant> = policy
        .grants
        .iter()
        .filter(|g| g.origin == Origin::Path)
        .collect();
    assert_eq!(
        path_grants,
        vec![
            &g(
                "/home/u/.npm-global/lib/node_modules/tool",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
            &g(
                "/home/u/.local/bin",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
            &g(
                "/home/u/.local/share/uv/tools/ruff",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
            &g(
                "/home/u/.nvm/versions/node/v20",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
        ]
    );
    assert_eq!(policy.program, PathBuf::from("/home/u/.local/bin/tool"));
}

/// Finding D2: a link planted in a `PATH` directory that another run can write (a
/// project's `node_modules/.bin`) grants an exact executable at most, never the
/// directory it points into.
#[test]
fn links_in_path_directories_grant_only_recognised_packages() {
    let fs = base_fs()
        .dir("/home/u/a/node_modules/.bin")
        .dir("/home/u/b/.git")
        .dir("/home/u/b/bin")
        .exe("/home/u/b/bin/tool")
        .dir("/home/u/c/scripts")
        .exe("/home/u/c/scripts/run")
        .file("/home/u/c/secret.env")
        .dir("/home/u/d/node_modules/pkg/bin")
        .exe("/home/u/d/node_modules/pkg/bin/cli")
        .link("/home/u/a/node_modules/.bin/tool", "/home/u/b/bin/tool")
        .link("/home/u/a/node_modules/.bin/run", "/home/u/c/scripts/run")
        .link("/home/u/a/node_modules/.bin/env", "/home/u/c/secret.env")
        .link("/home/u/a/node_modules/.bin/dir", "/home/u/c")
        .link(
            "/home/u/a/node_modules/.bin/cli",
            "/home/u/d/node_modules/pkg/bin/cli",
        );
    let h = host("/home/u/a/node_modules/.bin:/usr/bin");
    let policy = resolve(&request(&["true"]), &h, &fs).unwrap();
    let path_grants: Vec<&Grant> = policy
        .grants
        .iter()
        .filter(|g| g.origin == Origin::Path)
        .collect();
    assert_eq!(
        path_grants,
        vec![
            &g(
                "/home/u/a/node_modules/.bin",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
            // No package.json: not a package, so the executable alone.
            &g(
                "/home/u/d/node_modules/pkg/bin/cli",
                Access::ReadExec,
                Scope::Exact,
                Origin::Path
            ),
            &g(
                "/home/u/c/scripts/run",
                Access::ReadExec,
                Scope::Exact,
                Origin::Path
            ),
            // `b` has a `bin` but is a project (it has `.git`).
            &g(
                "/home/u/b/bin/tool",
                Access::ReadExec,
                Scope::Exact,
                Origin::Path
            ),
        ]
    );
}

/// A command found in a tree the sandbox can write (a link an earlier run planted in the
/// project's `node_modules/.bin`, on `PATH`) is granted as its executable alone, even when
/// the link leads into a per-user install that would otherwise be granted whole; the same
/// link reached from outside the project still grants the package.
#[test]
fn a_command_found_in_the_project_grants_its_executable_alone() {
    let fs = base_fs()
        .dir("/home/u/proj/node_modules/.bin")
        .dir("/home/u/.mytool/bin")
        .exe("/home/u/.mytool/bin/x")
        .file("/home/u/.mytool/credentials")
        .link("/home/u/proj/node_modules/.bin/x", "/home/u/.mytool/bin/x")
        .dir("/home/u/links")
        .link("/home/u/links/x", "/home/u/.mytool/bin/x");
    let granted = |path: &str| -> Vec<(PathBuf, Scope)> {
        let policy = resolve(&request(&["x"]), &host(path), &fs).unwrap();
        policy
            .grants
            .iter()
            .filter(|g| g.path.starts_with("/home/u/.mytool"))
            .map(|g| (g.path.clone(), g.scope))
            .collect()
    };
    assert_eq!(
        granted("/home/u/proj/node_modules/.bin:/usr/bin"),
        vec![(PathBuf::from("/home/u/.mytool/bin/x"), Scope::Exact)]
    );
    assert_eq!(
        granted("/home/u/links:/usr/bin"),
        vec![(PathBuf::from("/home/u/.mytool"), Scope::Subtree)]
    );
}

/// Finding D1: what `env` options name is never granted, and an interpreter is granted
/// only as an exact executable file.
#[test]
fn shebang_lines_grant_only_executable_interpreters() {
    let fs = base_fs()
        .dir("/home/u/proj/bin")
        .script(
            "/home/u/proj/run-tests.sh",
            "#!/usr/bin/env -S -u /home/u/other/secret.env -C /home/u/other python3\n",
        )
        .script(
            "/home/u/proj/a.sh",
            "#!/usr/bin/env -S -u /home/u/other/secret.env python3\n",
        )
        .script("/home/u/proj/b.sh", "#!/home/u/other/secret.env\n")
        .script("/home/u/proj/c.sh", "#!/home/u/tools/bin/interp -x\n")
        .dir("/home/u/other")
        .file("/home/u/other/secret.env")
        .dir("/home/u/tools/bin")
        .exe("/home/u/tools/bin/interp");
    let h = host("/usr/bin");
    let beyond = |script: &str| -> Vec<Grant> {
        let policy = resolve(&request(&[script]), &h, &fs).unwrap();
        policy
            .grants
            .into_iter()
            .filter(|g| g.path.starts_with("/home/u") && !g.path.starts_with("/home/u/proj"))
            .collect()
    };
    assert_eq!(beyond("./run-tests.sh"), vec![]);
    assert_eq!(beyond("./a.sh"), vec![]);
    assert_eq!(beyond("./b.sh"), vec![]);
    assert_eq!(
        beyond("./c.sh"),
        vec![g(
            "/home/u/tools/bin/interp",
            Access::ReadExec,
            Scope::Exact,
            Origin::Path
        )]
    );
}

#[test]
fn a_path_directory_covering_home_or_secrets_is_not_granted() {
    let fs = base_fs().dir("/home/u/bin");
    let h = host("/home/u:/home/u/.ssh:/home/u/bin:/usr/bin");
    let policy = resolve(&request(&["true"]), &h, &fs).unwrap();
    let path_grants: Vec<&Grant> = policy
        .grants
        .iter()
        .filter(|g| g.origin == Origin::Path)
        .collect();
    assert_eq!(
        path_grants,
        vec![&g(
            "/home/u/bin",
            Access::ReadExec,
            Scope::Subtree,
            Origin::Path
        )]
    );
}

#[test]
fn grants_covered_by_earlier_ones_are_dropped() {
    let mut set = GrantSet::default();
    set.push(
        "/a".into(),
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Project,
    );
    set.push("/a/b".into(), Access::Read, Scope::Subtree, Origin::Flag);
    set.push("/c".into(), Access::Read, Scope::Subtree, Origin::Flag);
    set.push("/c/d".into(), Access::ReadWrite, Scope::Exact, Origin::Flag);
    assert_eq!(
        set.into_vec(),
        vec![
            g("/a", Access::ReadWrite, Scope::Subtree, Origin::Project),
            g("/c", Access::Read, Scope::Subtree, Origin::Flag),
            g("/c/d", Access::ReadWrite, Scope::Exact, Origin::Flag),
        ]
    );
}

#[test]
fn a_relative_program_path_is_made_canonical_but_keeps_its_name() {
    let fs = base_fs()
        .exe("/home/u/proj/prog")
        .link("/home/u/proj/alias", "prog");
    let h = host("/usr/bin");
    for (typed, expected) in [
        ("./prog", "/home/u/proj/prog"),
        ("../proj/./prog", "/home/u/proj/prog"),
        ("./alias", "/home/u/proj/alias"),
    ] {
        let policy = resolve(&request(&[typed]), &h, &fs).unwrap();
        assert_eq!(policy.program, PathBuf::from(expected), "{typed}");
        assert_eq!(policy.argv[0], OsString::from(typed));
    }
}

#[test]
fn a_toolchain_root_holding_credentials_is_granted_with_them_masked() {
    let fs = base_fs()
        .dir("/home/u/.cargo")
        .dir("/home/u/.cargo/bin")
        .exe("/home/u/.cargo/bin/cargo")
        .file("/home/u/.cargo/credentials.toml");
    let policy = resolve(
        &request(&["true"]),
        &host("/home/u/.cargo/bin:/usr/bin"),
        &fs,
    )
    .unwrap();
    assert!(policy.grants.contains(&g(
        "/home/u/.cargo",
        Access::ReadExec,
        Scope::Subtree,
        Origin::Path
    )));
    assert!(policy.protections.contains(&Protection {
        at_launch: false,
        path: "/home/u/.cargo/credentials.toml".into(),
        kind: ProtectionKind::Deny,
        origin: Origin::Baseline,
        exists: true,
        placeholder: None,
        reason: None,
    }));
}

#[test]
fn root_gets_system_secrets_masked() {
    let fs = base_fs().file("/etc/shadow");
    let mut h = host("/usr/bin");
    let masked = |h: &HostContext| {
        resolve(&request(&["true"]), h, &fs)
            .unwrap()
            .protections
            .iter()
            .any(|p| p.path == Path::new("/etc/shadow") && p.kind == ProtectionKind::Deny)
    };
    assert!(!masked(&h));
    h.uid = 0;
    assert!(masked(&h));
}

#[test]
fn local_ports_are_relayed_into_a_blocked_network_or_opened_on_the_hosts() {
    let mut h = host("/usr/bin");
    h.resolvers = vec!["127.0.0.53".parse().unwrap()];
    h.env.push((
        "ANTHROPIC_BASE_URL".into(),
        "http://localhost:8082/v1".into(),
    ));
    h.env
        .push(("OPENAI_BASE_URL".into(), "https://api.openai.com/v1".into()));
    h.env
        .push(("GOOGLE_GEMINI_BASE_URL".into(), "http://[::1]:8080".into()));
    let mut r = request(&["true"]);
    r.allow_local_ports = vec![8080];
    // The host's network: the flag's port, then the local endpoints' (a public one opens
    // nothing; a port named twice is the flag's); the resolvers reached for DNS.
    let policy = resolve(&r, &h, &base_fs()).unwrap();
    assert_eq!(policy.network, Network::AllowAll);
    assert_eq!(
        policy.local_ports,
        vec![
            LocalPort {
                port: 8080,
                origin: PortOrigin::Flag
            },
            LocalPort {
                port: 8082,
                origin: PortOrigin::AnthropicBaseUrl
            },
        ]
    );
    assert_eq!(policy.resolvers, h.resolvers);
    let launch = crate::documents::manifest::LaunchManifest::from_policy(&policy, 0, vec![]);
    assert!(launch.local_ports.is_empty());
    assert_eq!(launch.resolvers, h.resolvers);
    r.block_net = true;
    r.allow_local_ports = vec![8080, 4318, 8080];
    r.numbat_collector = Some(4318);
    let policy = resolve(&r, &h, &base_fs()).unwrap();
    assert_eq!(policy.network, Network::BlockAll);
    // A blocked network: only what was asked for, relayed; no resolvers (the proxy
    // resolves names).
    assert!(policy.resolvers.is_empty());
    assert_eq!(
        policy.local_ports,
        vec![
            LocalPort {
                port: 4318,
                origin: PortOrigin::NumbatCollector
            },
            LocalPort {
                port: 8080,
                origin: PortOrigin::Flag
            },
        ]
    );
    r.allow_local_ports = vec![0];
    assert!(matches!(
        resolve(&r, &h, &base_fs()).unwrap_err(),
        ResolveError::InvalidPort
    ));
}

/// Every profile's project-level names, in profile order, for the project /home/u/proj.
const PROJECT_AGENT_FILES: &[&str] = &[
    "/home/u/proj/.claude/settings.json",
    "/home/u/proj/.claude/settings.local.json",
    "/home/u/proj/.mcp.json",
    "/home/u/proj/.codex",
    "/home/u/proj/.gemini/settings.json",
    "/home/u/proj/.gemini/.env",
    "/home/u/proj/.gemini/policies",
    "/home/u/proj/opencode.json",
    "/home/u/proj/opencode.jsonc",
    "/home/u/proj/.opencode",
];

fn claude_fs() -> FakeFs {
    base_fs()
        .dir("/home/u/.claude")
        .file("/home/u/.claude/settings.json")
        .file("/home/u/.claude.json")
        .exe("/usr/bin/claude")
}

#[test]
fn the_claude_profile_grants_its_state_and_protects_its_hooks() {
    let policy = resolve(
        &request(&["claude", "-p", "hi"]),
        &host("/usr/bin"),
        &claude_fs(),
    )
    .unwrap();
    assert_eq!(
        policy.profile,
        ProfileInfo {
            name: "claude".into(),
            detected: true
        }
    );
    let profile_grants: Vec<&Grant> = policy
        .grants
        .iter()
        .filter(|g| g.origin == Origin::Profile)
        .collect();
    assert_eq!(
        profile_grants,
        vec![
            &g(
                "/home/u/.claude",
                Access::ReadWrite,
                Scope::Subtree,
                Origin::Profile
            ),
            // ~/.claude.json itself is not granted: Claude Code reads a private copy of
            // it at {config}/.claude.json (CLAUDE_CONFIG_DIR), and the host file gets the
            // allowlisted keys back after the run.
            &g(
                "/home/u/.claude/.claude.json",
                Access::ReadWrite,
                Scope::Exact,
                Origin::Profile
            ),
        ]
    );
    // A protection always beats a grant: settings.json sits inside the writable
    // ~/.claude grant and is read-only; absent hook files are listed too.
    let protected: Vec<(&Path, bool)> = policy
        .protections
        .iter()
        .filter(|p| p.origin == Origin::Profile)
        .map(|p| (p.path.as_path(), p.exists))
        .collect();
    assert_eq!(
        protected,
        vec![
            (Path::new("/home/u/.claude/settings.json"), true),
            (Path::new("/home/u/.claude/settings.local.json"), false),
            (Path::new("/home/u/.claude/hooks"), false),
            // /home/u/.claude/.claude.json is the private copy's view now.
            (Path::new("/home/u/.claude/.config.json"), false),
            (Path::new("/home/u/.claude/CLAUDE.md"), false),
            (Path::new("/home/u/.claude/skills"), false),
            (Path::new("/home/u/.claude/commands"), false),
            (Path::new("/home/u/.claude/agents"), false),
            (Path::new("/home/u/.claude/output-styles"), false),
            (Path::new("/home/u/.claude/plugins/cache"), false),
            (Path::new("/home/u/.claude/plugins/marketplaces"), false),
            (
                Path::new("/home/u/.claude/plugins/installed_plugins.json"),
                false
            ),
            (
                Path::new("/home/u/.claude/plugins/known_marketplaces.json"),
                false
            ),
            (Path::new("/home/u/proj/.claude/settings.json"), false),
            (Path::new("/home/u/proj/.claude/settings.local.json"), false),
            (Path::new("/home/u/proj/.mcp.json"), false),
            // The other agents' project-level names, as in every run.
            (Path::new("/home/u/proj/.codex"), false),
            (Path::new("/home/u/proj/.gemini/settings.json"), false),
            (Path::new("/home/u/proj/.gemini/.env"), false),
            (Path::new("/home/u/proj/.gemini/policies"), false),
            (Path::new("/home/u/proj/opencode.json"), false),
            (Path::new("/home/u/proj/opencode.jsonc"), false),
            (Path::new("/home/u/proj/.opencode"), false),
        ]
    );
    assert!(policy.notices.is_empty());
    // The state file is a private copy, merged back after the run; nothing is created.
    assert_eq!(
        policy
            .views
            .iter()
            .filter(|v| v.origin == Origin::Profile)
            .count(),
        1
    );
    assert_eq!(
        policy.views.last().map(|v| v.kind),
        Some(ViewKind::PrivateCopy)
    );
    assert_eq!(policy.state_files.len(), 1);
    assert_eq!(
        policy.state_files[0].path,
        Path::new("/home/u/.claude.json")
    );
    assert!(policy.state_files[0]
        .persist
        .contains(&"projects.{project}.hasTrustDialogAccepted".to_owned()));
    assert!(!policy.state_files[0]
        .persist
        .iter()
        .any(|k| k.contains("mcp") || k.contains("hooks") || k == "env"));
    assert_eq!(
        policy.created_at_launch,
        vec![LaunchCreation {
            path: "/home/u/.claude/.claude.json".into(),
            kind: Placeholder::EmptyFile
        }]
    );
}

#[test]
fn profile_roots_from_the_environment_are_validated() {
    let fs = claude_fs().dir("/srv/claude-state");
    let mut h = host("/usr/bin");
    h.env
        .push(("CLAUDE_CONFIG_DIR".into(), "/srv/claude-state".into()));
    let policy = resolve(&request(&["claude"]), &h, &fs).unwrap();
    assert!(policy.grants.contains(&g(
        "/srv/claude-state",
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Profile
    )));
    // An absent root is where the agent will keep its state: created at launch, and the
    // state file inside it is the one Claude Code then reads.
    let mut h = host("/usr/bin");
    h.env
        .push(("CLAUDE_CONFIG_DIR".into(), "/srv/claude-state/new".into()));
    let policy = resolve(&request(&["claude"]), &h, &fs).unwrap();
    assert_eq!(
        policy.created_at_launch,
        vec![
            LaunchCreation {
                path: "/srv/claude-state/new".into(),
                kind: Placeholder::Directory
            },
            // The mount point of the state file's private copy.
            LaunchCreation {
                path: "/srv/claude-state/new/.claude.json".into(),
                kind: Placeholder::EmptyFile
            },
        ]
    );
    assert_eq!(
        policy.state_files[0].path,
        Path::new("/srv/claude-state/new/.claude.json")
    );
    for bad in [
        "relative/dir",
        "/usr/bin/claude/state",
        "/home/u",
        "/home/u/.ssh",
        "/",
    ] {
        let mut h = host("/usr/bin");
        h.env.push(("CLAUDE_CONFIG_DIR".into(), bad.into()));
        let err = resolve(&request(&["claude"]), &h, &fs).unwrap_err();
        assert!(
            matches!(err, ResolveError::ProfileRoot { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_codex_profile_runs_codex_without_its_own_sandbox_and_explains_a_mode_asked_for() {
    let fs = base_fs().exe("/usr/bin/codex").dir("/home/u/.codex");
    let h = host("/usr/bin");
    // Plain `codex`: the copy inside says danger-full-access, nothing to explain.
    let policy = resolve(&request(&["codex"]), &h, &fs).unwrap();
    assert!(policy.notices.is_empty(), "{:?}", policy.notices);
    let file = &policy.state_files[0];
    assert_eq!(
        file.inside_settings.get("sandbox_mode").map(String::as_str),
        Some("danger-full-access")
    );
    assert!(!file.persist.iter().any(|k| k.contains("sandbox")));
    assert_eq!(
        file.private_dirs,
        ["app-server-daemon", "app-server-control"]
    );
    for args in [
        &["codex", "exec", "hi"][..],
        &["codex", "--sandbox", "danger-full-access"],
        &["codex", "-s", "danger-full-access"],
        &[
            "codex",
            "exec",
            "-c",
            "sandbox_mode=\"danger-full-access\"",
            "hi",
        ],
        &["codex", "--yolo"],
    ] {
        let p = resolve(&request(args), &h, &fs).unwrap();
        assert!(p.notices.is_empty(), "{args:?}");
    }
    // A sandbox mode asked for on the command line overrides the copy's, and fails.
    for args in [
        &["codex", "--sandbox", "workspace-write"][..],
        &["codex", "--sandbox=read-only"],
        &["codex", "-s", "read-only", "exec", "hi"],
        &["codex", "--full-auto"],
        &["codex", "exec", "-c", "sandbox_mode=workspace-write", "hi"],
    ] {
        let p = resolve(&request(args), &h, &fs).unwrap();
        assert_eq!(p.notices.len(), 1, "{args:?}");
        assert!(p.notices[0].contains("danger-full-access"), "{args:?}");
    }
    // Nor when Codex would not start its sandbox at all.
    let p = resolve(
        &request(&["codex", "--sandbox", "read-only", "--version"]),
        &h,
        &fs,
    )
    .unwrap();
    assert!(p.notices.is_empty());
}

#[test]
fn scripts_the_claude_settings_name_are_protected() {
    let fs = base_fs()
        .exe("/usr/bin/claude")
        .dir("/home/u/.claude")
        .script(
            "/home/u/.claude/settings.json",
            r#"{"statusLine": {"type": "command", "command": "bash ~/.claude/statusline.sh --short"},
                "hooks": {"Stop": [{"matcher": "", "hooks": [
                    {"type": "command", "command": "python3 \"$CLAUDE_PROJECT_DIR\"/tools/../hooks/stop.py"},
                    {"type": "command", "command": "/usr/bin/true && $HOME/bin/notify"}]}]}}"#,
        )
        .file("/home/u/.claude/statusline.sh");
    let policy = resolve(&request(&["claude"]), &host("/usr/bin"), &fs).unwrap();
    let protected: Vec<&Path> = policy
        .protections
        .iter()
        .map(|p| p.path.as_path())
        .collect();
    // Inside writable grants: protected (names, normalized); elsewhere they are not
    // writable anyway and are left out.
    for want in [
        "/home/u/.claude/statusline.sh",
        "/home/u/proj/hooks/stop.py",
    ] {
        assert!(
            protected.contains(&Path::new(want)),
            "{want}: {protected:?}"
        );
    }
    assert!(!protected.contains(&Path::new("/usr/bin/true")));
    assert!(!protected.contains(&Path::new("/home/u/bin/notify")));
}

#[test]
fn an_npm_agent_gets_its_platform_package_from_the_layout() {
    let nm = "/home/u/.local/lib/node_modules";
    let fs = base_fs()
        .dir("/home/u/.codex")
        .dir(nm)
        .dir(&format!("{nm}/@openai"))
        .dir(&format!("{nm}/@openai/codex"))
        .dir(&format!("{nm}/@openai/codex/bin"))
        .exe(&format!("{nm}/@openai/codex/bin/codex.js"))
        .script(
            &format!("{nm}/@openai/codex/package.json"),
            r#"{"name": "@openai/codex", "optionalDependencies": {
                "@openai/codex-linux-x64": "npm:@openai/codex@0.1.0-linux-x64",
                "@openai/codex-darwin-x64": "npm:@openai/codex@0.1.0-darwin-x64",
                "../../secrets": "1.0.0",
                "@openai/impostor": "1.0.0",
                "@openai/linked": "1.0.0"}}"#,
        )
        .dir(&format!("{nm}/@openai/codex-linux-x64"))
        .script(
            &format!("{nm}/@openai/codex-linux-x64/package.json"),
            r#"{"name": "@openai/codex"}"#,
        )
        // Installed there, but not the package the dependency names.
        .dir(&format!("{nm}/@openai/impostor"))
        .script(
            &format!("{nm}/@openai/impostor/package.json"),
            r#"{"name": "something-else"}"#,
        )
        // Named, but a link to a directory elsewhere that happens to carry the name.
        .dir("/home/u/other")
        .script(
            "/home/u/other/package.json",
            r#"{"name": "@openai/linked"}"#,
        )
        .link(&format!("{nm}/@openai/linked"), "/home/u/other")
        .dir("/home/u/.local/bin")
        .link(
            "/home/u/.local/bin/codex",
            "../lib/node_modules/@openai/codex/bin/codex.js",
        );
    let policy = resolve(
        &request(&["codex", "--version"]),
        &host("/home/u/.local/bin:/usr/bin"),
        &fs,
    )
    .unwrap();
    let granted: Vec<&Path> = policy
        .grants
        .iter()
        .filter(|g| g.path.starts_with(nm))
        .map(|g| g.path.as_path())
        .collect();
    assert!(
        granted.contains(&Path::new(&format!("{nm}/@openai/codex-linux-x64"))),
        "{granted:?}"
    );
    assert!(!granted
        .iter()
        .any(|p| p.ends_with("impostor") || p.ends_with("secrets")));
}

#[test]
fn an_explicit_profile_overrides_detection() {
    let fs = claude_fs();
    let mut r = request(&["claude"]);
    r.profile = Some("generic".into());
    let policy = resolve(&r, &host("/usr/bin"), &fs).unwrap();
    assert_eq!(policy.profile.name, "generic");
    assert!(!policy.grants.iter().any(|g| g.origin == Origin::Profile));
    r.profile = Some("ghost".into());
    assert!(matches!(
        resolve(&r, &host("/usr/bin"), &fs).unwrap_err(),
        ResolveError::Profile(_)
    ));
}

#[test]
fn a_missing_profile_state_directory_is_created_at_launch() {
    let fs = base_fs().exe("/usr/bin/gemini");
    let policy = resolve(&request(&["gemini"]), &host("/usr/bin"), &fs).unwrap();
    assert!(policy.grants.contains(&g(
        "/home/u/.gemini",
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Profile
    )));
    // The state directory, and the mount point of its settings' private copy (removed
    // after the run unless the merge wrote allowed preferences there).
    assert_eq!(
        policy.created_at_launch,
        vec![
            LaunchCreation {
                path: "/home/u/.gemini".into(),
                kind: Placeholder::Directory
            },
            LaunchCreation {
                path: "/home/u/.gemini/settings.json".into(),
                kind: Placeholder::EmptyFile
            }
        ]
    );
    assert!(policy.notices.is_empty());
    // Its protections hold from the first launch: placeholders below the new directory.
    let extensions = policy
        .protections
        .iter()
        .find(|p| p.path == Path::new("/home/u/.gemini/extensions"))
        .unwrap();
    assert_eq!(extensions.placeholder, Some(Placeholder::Directory));
    assert!(!extensions.exists);
    // The settings are a private copy instead (merged back through an allowlist).
    assert!(policy
        .views
        .iter()
        .any(|v| v.target == Path::new("/home/u/.gemini/settings.json")
            && v.kind == ViewKind::PrivateCopy));
}

#[test]
fn protections_are_names_even_below_a_symlinked_state_directory() {
    // A dotfile manager made ~/.claude a link; the protection keeps the name.
    let fs = base_fs()
        .exe("/usr/bin/claude")
        .dir("/home/u/dotfiles/claude")
        .file("/home/u/dotfiles/claude/settings.json")
        .link("/home/u/.claude", "/home/u/dotfiles/claude");
    let policy = resolve(&request(&["claude"]), &host("/usr/bin"), &fs).unwrap();
    let settings = policy
        .protections
        .iter()
        .find(|p| p.path == Path::new("/home/u/.claude/settings.json"))
        .unwrap();
    assert!(settings.exists);
    assert!(policy.grants.contains(&g(
        "/home/u/dotfiles/claude",
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Profile
    )));
    // The directory exists (through its link); only the mount point of the state file's
    // copy (which Claude Code reads there, told by CLAUDE_CONFIG_DIR) is created.
    assert_eq!(
        policy.created_at_launch,
        vec![LaunchCreation {
            path: "/home/u/.claude/.claude.json".into(),
            kind: Placeholder::EmptyFile
        }]
    );
}

#[test]
fn a_repository_in_another_writable_grant_is_protected_too() {
    let fs = base_fs()
        .dir("/home/u/other/.git")
        .dir("/home/u/other/.git/hooks")
        .file("/home/u/other/.git/config");
    let mut r = request(&["true"]);
    r.read_write.push("/home/u/other".into());
    // What the supervisor's scan reports for the grant; the resolver only turns it into
    // protections.
    let mut h = host("/usr/bin");
    h.git = GitFacts {
        scanned: vec!["/home/u/proj".into(), "/home/u/other".into()],
        work_trees: vec!["/home/u/other".into()],
        git_dirs: vec![GitDir {
            path: "/home/u/other/.git".into(),
            kind: GitDirKind::Common,
        }],
        config_files: vec!["/home/u/other/.git/config".into()],
        hook_dirs: vec!["/home/u/other/.git/hooks".into()],
        command_paths: vec![],
        agent_dirs: vec![],
        notes: vec!["note: a git note".into()],
    };
    let policy = resolve(&r, &h, &fs).unwrap();
    assert!(policy.notices.contains(&"note: a git note".to_owned()));
    for path in ["/home/u/other/.git/hooks", "/home/u/other/.git/config"] {
        assert!(
            policy.protections.iter().any(|p| p.path == Path::new(path)
                && p.kind == ProtectionKind::ReadOnly
                && p.exists),
            "{path} is not protected"
        );
    }
    // A read-only grant needs no protection: nothing in it is writable.
    let mut r = request(&["true"]);
    r.read.push("/home/u/other".into());
    let policy = resolve(&r, &h, &fs).unwrap();
    assert!(!policy
        .protections
        .iter()
        .any(|p| p.path.starts_with("/home/u/other")));
}

/// A rustup proxy as the command itself gets the rustup home, as it does when a shell
/// inside reaches it through `PATH` (it was skipped when the command's own grant already
/// covered `~/.cargo/bin`).
#[test]
fn a_rustup_proxy_as_the_command_gets_the_rustup_home() {
    let fs = base_fs()
        .dir("/home/u/.cargo/bin")
        .exe("/home/u/.cargo/bin/cargo")
        .dir("/home/u/.cargo/registry")
        .dir("/home/u/.rustup")
        .dir("/home/u/.rustup/toolchains/stable/bin")
        .exe("/home/u/.rustup/toolchains/stable/bin/cargo");
    for path in ["/home/u/.cargo/bin:/usr/bin", "/usr/bin"] {
        let h = host(path);
        let command = if path.starts_with("/home") {
            "cargo"
        } else {
            "/home/u/.cargo/bin/cargo"
        };
        let policy = resolve(&request(&[command]), &h, &fs).unwrap();
        for (dir, access) in [
            ("/home/u/.cargo", Access::ReadExec),
            ("/home/u/.rustup", Access::ReadExec),
        ] {
            assert!(
                policy
                    .grants
                    .iter()
                    .any(|g| g.path == Path::new(dir) && g.access == access),
                "{dir} with PATH={path}: {:?}",
                policy.grants
            );
        }
    }
}

/// Issue 12 item 8: a command under a private directory runs by its canonical path when a
/// grant carries that through, and is refused before launch otherwise.
#[test]
fn a_command_hidden_by_a_private_directory_runs_by_its_carried_path_or_is_refused() {
    let fs = base_fs()
        .dir("/tmp")
        .dir("/tmp/x/node_modules/.bin")
        .dir("/tmp/x/node_modules/@a/cli")
        .file("/tmp/x/node_modules/@a/cli/package.json")
        .exe("/tmp/x/node_modules/@a/cli/cli.js")
        .link("/tmp/x/node_modules/.bin/cli", "../@a/cli/cli.js")
        .dir("/tmp/y")
        .exe("/tmp/y/tool")
        .dir("/run/current-system/sw/bin")
        .link("/run/current-system/sw/bin/git2", "/usr/bin/true");
    let h = host("/usr/bin");
    let policy = resolve(&request(&["/tmp/x/node_modules/.bin/cli"]), &h, &fs).unwrap();
    assert_eq!(
        policy.program,
        PathBuf::from("/tmp/x/node_modules/@a/cli/cli.js")
    );
    assert_eq!(policy.argv[0], "/tmp/x/node_modules/.bin/cli");
    let policy = resolve(&request(&["/run/current-system/sw/bin/git2"]), &h, &fs).unwrap();
    assert_eq!(policy.program, PathBuf::from("/usr/bin/true"));
    // A plain file under /tmp: its exact grant is carried through, so it runs as is.
    let policy = resolve(&request(&["/tmp/y/tool"]), &h, &fs).unwrap();
    assert_eq!(policy.program, PathBuf::from("/tmp/y/tool"));
    let err = resolve(&request(&["/run/current-system/sw/bin/missing"]), &h, &fs).unwrap_err();
    assert!(matches!(err, ResolveError::CommandNotFound { .. }), "{err}");
}

/// Counts what a resolution asks of the file system, per path.
struct Counting<'a> {
    fs: &'a FakeFs,
    asked: std::cell::RefCell<BTreeMap<PathBuf, usize>>,
}

impl Counting<'_> {
    fn ask(&self, path: &Path) {
        *self.asked.borrow_mut().entry(path.into()).or_default() += 1;
    }
}

impl PathInspector for Counting<'_> {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.ask(path);
        self.fs.canonicalize(path)
    }
    fn kind(&self, path: &Path) -> Option<FileKind> {
        self.ask(path);
        self.fs.kind(path)
    }
    fn read_head(&self, path: &Path, max: usize) -> Option<Vec<u8>> {
        self.ask(path);
        self.fs.read_head(path, max)
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.ask(path);
        self.fs.read_link(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.ask(path);
        self.fs.exists(path)
    }
    fn subdirs(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        self.ask(path);
        self.fs.subdirs(path, max)
    }
    fn symlinks_in(&self, path: &Path, max: usize) -> Vec<PathBuf> {
        self.ask(path);
        self.fs.symlinks_in(path, max)
    }
}

#[test]
fn a_directory_named_twice_on_path_is_looked_in_once() {
    let fs = base_fs()
        .dir("/home/u/.cargo")
        .dir("/home/u/.cargo/bin")
        .exe("/home/u/.cargo/bin/cargo");
    let resolve_counting = |path: &str| {
        let counting = Counting {
            fs: &fs,
            asked: Default::default(),
        };
        let policy = resolve(&request(&["true"]), &host(path), &counting).unwrap();
        (policy, counting.asked.into_inner())
    };
    let (once, asked_once) = resolve_counting("/home/u/.cargo/bin:/usr/bin");
    let (twice, asked_twice) =
        resolve_counting("/home/u/.cargo/bin:/home/u/.cargo/bin:/usr/bin:/home/u/.cargo/bin");
    assert_eq!(once.grants, twice.grants);
    assert_eq!(once.protections, twice.protections);
    assert_eq!(once.caches, twice.caches);
    // Every question about the directory's contents is asked as often as with one entry
    // (an absent command, `pip`, is looked for there once per resolution).
    let inside = |asked: &BTreeMap<PathBuf, usize>| -> BTreeMap<PathBuf, usize> {
        asked
            .iter()
            .filter(|(p, _)| p.starts_with("/home/u/.cargo/bin/"))
            .map(|(p, n)| (p.clone(), *n))
            .collect()
    };
    assert!(asked_once.contains_key(Path::new("/home/u/.cargo/bin/pip")));
    assert_eq!(inside(&asked_once), inside(&asked_twice));
}

/// The filtered views of `policy`: (target, link) each.
fn filtered_views(policy: &ResolvedPolicy) -> Vec<(PathBuf, Option<PathBuf>)> {
    policy
        .views
        .iter()
        .filter(|v| v.kind == ViewKind::Filtered)
        .map(|v| (v.target.clone(), v.link.clone()))
        .collect()
}

fn pair(target: &str, link: Option<&str>) -> (PathBuf, Option<PathBuf>) {
    (target.into(), link.map(PathBuf::from))
}

/// A start-up file that is a symbolic link (GNU stow, chezmoi, Home Manager) is a view of
/// the file the shell really opens, with the exact grant on that file: relative and
/// absolute links, a chain of two, a sourced file that is a link. A dangling link is no
/// view and no refusal.
#[test]
fn startup_files_that_are_links_are_views_of_the_file_they_lead_to() {
    let mut fs = base_fs()
        .dir("/home/u/dot")
        .file("/home/u/dot/bashrc")
        .file("/home/u/dot/profile")
        .file("/home/u/dot/zshrc")
        .file("/home/u/dot/env.sh")
        .link("/home/u/.bashrc", "dot/bashrc")
        .link("/home/u/.profile", "/home/u/dot/profile")
        .link("/home/u/.zshrc", ".zshrc2")
        .link("/home/u/.zshrc2", "dot/zshrc")
        .link("/home/u/.bash_aliases", "dot/missing")
        .link("/home/u/.env.sh", "dot/env.sh")
        .file("/home/u/.npmrc");
    fs.heads
        .insert("/home/u/dot/bashrc".into(), b"source ~/.env.sh\n".to_vec());
    let policy = resolve(&request(&["true"]), &host("/usr/bin"), &fs).unwrap();
    assert_eq!(
        filtered_views(&policy),
        vec![
            pair("/home/u/dot/bashrc", Some("/home/u/.bashrc")),
            pair("/home/u/dot/profile", Some("/home/u/.profile")),
            pair("/home/u/dot/zshrc", Some("/home/u/.zshrc")),
            pair("/home/u/dot/env.sh", Some("/home/u/.env.sh")),
            pair("/home/u/.npmrc", None),
        ]
    );
    for file in ["bashrc", "profile", "zshrc", "env.sh"] {
        let path = Path::new("/home/u/dot").join(file);
        assert!(
            policy.grants.contains(&Grant {
                path: path.clone(),
                access: Access::Read,
                scope: Scope::Exact,
                origin: Origin::Baseline,
            }),
            "{}",
            path.display()
        );
    }
    // No grant names a link, and nothing in a writable tree needs protecting.
    assert!(!policy
        .grants
        .iter()
        .any(|g| fs.read_link(&g.path).is_some()));
    assert!(!policy
        .protections
        .iter()
        .any(|p| p.kind == ProtectionKind::ReadOnly && p.origin == Origin::Baseline));
}

/// The project is the user's dotfiles repository and `~/.bashrc` leads into it: the view
/// covers the file in the project, and the name and the file are read-only protections
/// (so every directory and link on the way is pinned by the mount layer). A dangling
/// link into the project is an absent protection (reported if the run creates it), and
/// a start-up file whose parent is a link into the project is protected as well.
#[test]
fn a_startup_file_in_a_writable_tree_is_protected_under_its_name_and_its_file() {
    let fs = base_fs()
        .dir("/home/u/dotfiles")
        .dir("/home/u/dotfiles/bash")
        .file("/home/u/dotfiles/bash/rc")
        .dir("/home/u/dotfiles/fish")
        .file("/home/u/dotfiles/fish/config.fish")
        .link("/home/u/dotfiles/current", "bash")
        .link("/home/u/.bashrc", "dotfiles/current/rc")
        .link("/home/u/.profile", "dotfiles/profile")
        .dir("/home/u/.config")
        .link("/home/u/.config/fish", "../dotfiles/fish");
    let mut h = host("/usr/bin");
    h.cwd = "/home/u/dotfiles".into();
    let policy = resolve(&request(&["true"]), &h, &fs).unwrap();
    assert_eq!(
        filtered_views(&policy),
        vec![
            pair("/home/u/dotfiles/bash/rc", Some("/home/u/.bashrc")),
            pair(
                "/home/u/dotfiles/fish/config.fish",
                Some("/home/u/.config/fish/config.fish")
            ),
        ]
    );
    let ro = |path: &str, exists: bool| Protection {
        at_launch: false,
        path: path.into(),
        kind: ProtectionKind::ReadOnly,
        origin: Origin::Baseline,
        exists,
        placeholder: None,
        reason: None,
    };
    let baseline: Vec<Protection> = policy
        .protections
        .iter()
        .filter(|p| p.origin == Origin::Baseline)
        .cloned()
        .collect();
    assert_eq!(
        baseline,
        vec![
            Protection {
                at_launch: false,
                kind: ProtectionKind::Deny,
                ..ro("/home/u/.ssh", true)
            },
            ro("/home/u/.bashrc", true),
            ro("/home/u/dotfiles/bash/rc", true),
            ro("/home/u/dotfiles/profile", false),
            ro("/home/u/.config/fish/config.fish", true),
            ro("/home/u/dotfiles/fish/config.fish", true),
        ]
    );
}

/// npm's global configuration in every granted toolchain prefix (an npm-global prefix,
/// an nvm version), `$NPM_CONFIG_GLOBALCONFIG`, and conda's `.condarc` files are filtered
/// views like `~/.npmrc`.
#[test]
fn global_npm_and_conda_configuration_are_filtered_views() {
    let fs = base_fs()
        .dir("/home/u/.npm-global")
        .dir("/home/u/.npm-global/bin")
        .dir("/home/u/.npm-global/etc")
        .file("/home/u/.npm-global/etc/npmrc")
        .dir("/home/u/.nvm")
        .dir("/home/u/.nvm/versions")
        .dir("/home/u/.nvm/versions/node")
        .dir("/home/u/.nvm/versions/node/v20")
        .dir("/home/u/.nvm/versions/node/v20/bin")
        .dir("/home/u/.nvm/versions/node/v20/etc")
        .file("/home/u/.nvm/versions/node/v20/etc/npmrc")
        .dir("/home/u/cfg")
        .file("/home/u/cfg/global-npmrc")
        .file("/home/u/.condarc")
        .dir("/home/u/miniconda3")
        .dir("/home/u/miniconda3/bin")
        .file("/home/u/miniconda3/.condarc");
    let mut h = host("/home/u/.npm-global/bin:/home/u/.nvm/versions/node/v20/bin:/home/u/miniconda3/bin:/usr/bin");
    h.env.push((
        "NPM_CONFIG_GLOBALCONFIG".into(),
        "/home/u/cfg/global-npmrc".into(),
    ));
    let policy = resolve(&request(&["true"]), &h, &fs).unwrap();
    let views = filtered_views(&policy);
    for file in [
        "/home/u/.npm-global/etc/npmrc",
        "/home/u/.nvm/versions/node/v20/etc/npmrc",
        "/home/u/miniconda3/.condarc",
        "/home/u/cfg/global-npmrc",
        "/home/u/.condarc",
    ] {
        assert!(
            views.contains(&pair(file, None)),
            "{file} missing from {views:?}"
        );
    }
}

/// Git's configuration is a filtered view by git's rule, as git lists the files:
/// `~/.gitconfig`, `~/.config/git/config`, every included file outside the project
/// whatever its name (`~/work.inc`), the system's `/etc/gitconfig`, and the project's
/// repository's own configuration; an included file in the project is the project's own
/// and is not. Other configuration files keep the rule their names pick.
#[test]
fn git_configuration_in_the_home_is_a_filtered_view() {
    let fs = base_fs()
        .file("/home/u/.gitconfig")
        .dir("/home/u/.config")
        .dir("/home/u/.config/git")
        .file("/home/u/.config/git/config")
        .file("/home/u/.gitconfig.local")
        .file("/home/u/work.inc")
        .file("/home/u/proj/.gitconfig-shared")
        .dir("/home/u/proj/.git")
        .file("/home/u/proj/.git/config")
        .file("/etc/gitconfig");
    let mut h = host("/usr/bin");
    h.git.git_dirs = vec![crate::host::gitfacts::GitDir {
        path: "/home/u/proj/.git".into(),
        kind: crate::host::gitfacts::GitDirKind::Common,
    }];
    h.git.config_files = [
        "/home/u/proj/.git/config",
        "/home/u/.gitconfig",
        "/home/u/.gitconfig.local",
        "/home/u/work.inc",
        "/home/u/proj/.gitconfig-shared",
        "/etc/gitconfig",
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect();
    let policy = resolve(&request(&["true"]), &h, &fs).unwrap();
    let views = filtered_views(&policy);
    for file in [
        "/home/u/.gitconfig",
        "/home/u/.config/git/config",
        "/home/u/.gitconfig.local",
        "/home/u/work.inc",
        "/etc/gitconfig",
        "/home/u/proj/.git/config",
    ] {
        assert!(
            views.contains(&pair(file, None)),
            "{file} missing from {views:?}"
        );
        let view = policy.views.iter().find(|v| v.target == Path::new(file));
        assert_eq!(view.map(|v| v.rule), Some(FilterRule::Git), "{file}");
    }
    assert!(
        !views
            .iter()
            .any(|(t, _)| t == Path::new("/home/u/proj/.gitconfig-shared")),
        "the project's own file in {views:?}"
    );
}

/// Every agent's launch configuration is protected whatever the profile: a generic run
/// (`make`) gets the project-level names of every profile, the hook scripts the project's
/// and the user's settings name (whatever the command's shape), and a home-level name
/// that leads into the project through a dotfile manager's link; a home-level name that
/// does not lead into a writable tree is left out, and nothing is created or granted.
#[test]
fn agent_files_are_protected_in_every_run() {
    let hooks = r#"{"hooks": {"PreToolUse": [{"matcher": "", "hooks": [
        {"type": "command", "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/a.sh"},
        {"type": "command", "command": "cd \"$CLAUDE_PROJECT_DIR\" && sh .claude/hooks/b.sh"},
        {"type": "command", "command": "bash -c '.claude/hooks/c.sh'"},
        {"type": "command", "command": "npx tsx .claude/hooks/d.sh"},
        {"type": "command", "command": "uv run .claude/hooks/e.py"},
        {"type": "command", "command": "test -f x; .claude/hooks/f.sh"},
        {"type": "command", "command": "python3 $GEMINI_PROJECT_DIR/tools/g.py --out=$HOME/dotfiles/h.log"}]}]}}"#;
    let fs = base_fs()
        .dir("/home/u/proj/.claude")
        .script("/home/u/proj/.claude/settings.json", hooks)
        .dir("/home/u/proj/.claude/hooks")
        .file("/home/u/proj/.claude/hooks/b.sh")
        .file("/home/u/proj/.claude/hooks/c.sh")
        .file("/home/u/proj/.claude/hooks/d.sh")
        .file("/home/u/proj/.claude/hooks/e.py")
        .file("/home/u/proj/.claude/hooks/f.sh")
        .dir("/home/u/proj/tools")
        .file("/home/u/proj/tools/g.py")
        .file("/home/u/proj/unnamed.sh")
        // The user's Claude settings live in the project (a dotfiles repository), and
        // Codex's configuration is a plain file in the home directory.
        .dir("/home/u/.claude")
        .link(
            "/home/u/.claude/settings.json",
            "/home/u/proj/claude-settings.json",
        )
        .script(
            "/home/u/proj/claude-settings.json",
            r#"{"statusLine": {"command": "~/proj/status.sh"}}"#,
        )
        .file("/home/u/proj/status.sh")
        .dir("/home/u/.codex")
        .file("/home/u/.codex/config.toml");
    let policy = resolve(&request(&["true"]), &host("/usr/bin"), &fs).unwrap();
    assert_eq!(policy.profile.name, "generic");
    let protected: Vec<&str> = policy
        .protections
        .iter()
        .filter(|p| p.origin == Origin::Profile)
        .map(|p| p.path.to_str().unwrap())
        .collect();
    for want in PROJECT_AGENT_FILES.iter().chain(&[
        "/home/u/.claude/settings.json",
        "/home/u/proj/.claude/hooks/a.sh",
        "/home/u/proj/.claude/hooks/b.sh",
        "/home/u/proj/.claude/hooks/c.sh",
        "/home/u/proj/.claude/hooks/d.sh",
        "/home/u/proj/.claude/hooks/e.py",
        "/home/u/proj/.claude/hooks/f.sh",
        "/home/u/proj/tools/g.py",
        "/home/u/proj/status.sh",
    ]) {
        assert!(protected.contains(want), "{want}: {protected:?}");
    }
    // Not the project itself (`cd "$CLAUDE_PROJECT_DIR"`), not what no command names,
    // not home-level names that stay outside every writable grant.
    for not in [
        "/home/u/proj",
        "/home/u/proj/unnamed.sh",
        "/home/u/.codex/config.toml",
        "/home/u/.claude/hooks",
        "/home/u/.claude.json",
    ] {
        assert!(!protected.contains(&not), "{not}: {protected:?}");
    }
    let settings = policy
        .protections
        .iter()
        .find(|p| p.path == Path::new("/home/u/.claude/settings.json"))
        .unwrap();
    assert!(settings.exists);
    assert!(settings
        .reason
        .as_deref()
        .unwrap()
        .starts_with("claude profile, applied to every run: User settings register hooks"));
    let script = policy
        .protections
        .iter()
        .find(|p| p.path == Path::new("/home/u/proj/.claude/hooks/b.sh"))
        .unwrap();
    assert!(script
        .reason
        .as_deref()
        .unwrap()
        .contains("named by a command in /home/u/proj/.claude/settings.json"));
    assert!(policy.created_at_launch.is_empty());
    assert!(!policy.grants.iter().any(|g| g.origin == Origin::Profile));
    assert!(policy.hooks.is_empty());
    // The home-level file left out is listed for the supervisor to compare when it has
    // another name (a hard link); the protected one and absent ones are not.
    assert_eq!(
        policy.agent_home_files,
        vec![PathBuf::from("/home/u/.codex/config.toml")]
    );
}

/// A Claude Code run protects the other agents' files too, keeps its own handling (its
/// state directory writable, its state file a private copy), and with a writable
/// ancestor of the project (`--read-write ..`) every agent's project-level names are
/// protected there as well, since agents search upward.
#[test]
fn another_agents_files_and_writable_ancestors_are_protected() {
    let fs = claude_fs()
        .dir("/home/u/.codex")
        .link("/home/u/.codex/config.toml", "/home/u/proj/codex.toml")
        .file("/home/u/proj/codex.toml")
        .dir("/home/u/.gemini");
    let mut req = request(&["claude"]);
    req.read_write = vec!["/home/u".into()];
    // `--read-write ~` is refused; a parent of the project below home is not.
    let fs = fs.dir("/home/u/work").dir("/home/u/work/proj");
    let mut h = host("/usr/bin");
    h.cwd = "/home/u/work/proj".into();
    req.read_write = vec!["/home/u/work".into()];
    let policy = resolve(&req, &h, &fs).unwrap();
    let protected: Vec<&str> = policy
        .protections
        .iter()
        .filter(|p| p.origin == Origin::Profile)
        .map(|p| p.path.to_str().unwrap())
        .collect();
    for want in [
        "/home/u/.claude/settings.json",
        "/home/u/work/proj/.codex",
        "/home/u/work/proj/opencode.jsonc",
        "/home/u/work/.mcp.json",
        "/home/u/work/.claude/settings.json",
        "/home/u/work/opencode.json",
        "/home/u/work/.opencode",
    ] {
        assert!(protected.contains(&want), "{want}: {protected:?}");
    }
    // ~/.codex/config.toml leads into /home/u/proj, which this run cannot write.
    assert!(!protected.contains(&"/home/u/.codex/config.toml"));
    assert!(policy.grants.contains(&g(
        "/home/u/.claude",
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Profile
    )));
    assert_eq!(policy.state_files.len(), 1);
    // With the linked project writable, the other agent's file is protected by name.
    let mut h = host("/usr/bin");
    h.cwd = "/home/u/proj".into();
    let policy = resolve(&request(&["claude"]), &h, &fs).unwrap();
    let codex = policy
        .protections
        .iter()
        .find(|p| p.path == Path::new("/home/u/.codex/config.toml"))
        .unwrap();
    assert!(codex.exists);
    assert!(codex
        .reason
        .as_deref()
        .unwrap()
        .starts_with("codex profile, applied to every run: "));
}

/// The words of a hook command that may name a file: every word, quotes removed, the
/// project's and home's variables expanded, relative words from the project; nothing for
/// a word Sandy cannot expand.
#[test]
fn command_words_name_paths_without_a_shell_parser() {
    let words = |c: &str| -> Vec<(String, bool)> {
        agent::command_path_words(c, Some(Path::new("/home/u")), Path::new("/home/u/proj"))
            .into_iter()
            .map(|(p, s)| (p.display().to_string(), s))
            .collect()
    };
    let has = |c: &str, want: &str| {
        let w = words(c);
        assert!(w.iter().any(|(p, s)| p == want && *s), "{c}: {w:?}");
    };
    has(
        "cd \"$CLAUDE_PROJECT_DIR\" && sh .claude/hooks/b.sh",
        "/home/u/proj/.claude/hooks/b.sh",
    );
    has(
        "bash -c '.claude/hooks/c.sh'",
        "/home/u/proj/.claude/hooks/c.sh",
    );
    has(
        "npx tsx .claude/hooks/d.sh",
        "/home/u/proj/.claude/hooks/d.sh",
    );
    has(
        "uv run .claude/hooks/e.py",
        "/home/u/proj/.claude/hooks/e.py",
    );
    has(
        "test -f x; .claude/hooks/f.sh",
        "/home/u/proj/.claude/hooks/f.sh",
    );
    has("${CLAUDE_PROJECT_DIR}/a.sh|tee", "/home/u/proj/a.sh");
    has("$GEMINI_CWD/../other/x", "/home/u/other/x");
    has("~/bin/x", "/home/u/bin/x");
    has("node --require=$HOME/r.js", "/home/u/r.js");
    has("FOO=./tools/y run", "/home/u/proj/tools/y");
    has("(cd sub; ./z.sh)>log", "/home/u/proj/z.sh");
    // A bare word is a candidate, not written as a path (protected only if it exists).
    assert!(words("test -f x").contains(&("/home/u/proj/x".to_owned(), false)));
    assert!(words("cd \"$CLAUDE_PROJECT_DIR\"").contains(&("/home/u/proj".to_owned(), true)));
    // Another variable, a glob: unknown, left out.
    for c in [
        "$OTHER/x.sh",
        "${XDG_CONFIG_HOME}/y",
        "./hooks/*.sh",
        "$HOMEX/z",
    ] {
        assert!(words(c).is_empty(), "{c}: {:?}", words(c));
    }
}

/// An agent that was never installed costs a generic run two questions for all of its
/// home-level names (is its root a link, does it exist), whatever their number.
#[test]
fn an_absent_agent_root_is_looked_at_once() {
    let fs = base_fs();
    for root in ["/home/u/.claude", "/home/u/.codex", "/home/u/.gemini"] {
        let counting = Counting {
            fs: &fs,
            asked: Default::default(),
        };
        resolve(&request(&["true"]), &host("/usr/bin"), &counting).unwrap();
        let below: usize = counting
            .asked
            .borrow()
            .iter()
            .filter(|(p, _)| p.starts_with(root))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(below, 2, "{root}");
    }
}

/// A writable grant of the cgroups (or of a directory holding them) is refused: a run
/// could raise its own resource ceilings there. Reading them is allowed.
#[test]
fn the_cgroups_are_never_writable_through_a_grant() {
    let h = host("/usr/bin");
    let fs = base_fs()
        .dir("/sys")
        .dir("/sys/fs")
        .dir("/sys/fs/cgroup")
        .dir("/sys/fs/cgroup/user.slice")
        .dir("/sys/fs/cgroup/user.slice/x");
    for path in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/user.slice/x",
        "/sys",
        "/sys/fs",
    ] {
        let mut r = request(&["true"]);
        r.read_write = vec![path.into()];
        let err = resolve(&r, &h, &fs).unwrap_err();
        assert!(
            matches!(err, ResolveError::OwnGrant { .. }),
            "{path}: {err:?}"
        );
        assert!(err.to_string().contains("resource ceilings"), "{err}");
    }
    let mut r = request(&["true"]);
    r.read = vec!["/sys/fs/cgroup".into()];
    assert!(!matches!(
        resolve(&r, &h, &fs),
        Err(ResolveError::OwnGrant { .. })
    ));
}

/// `--tier landlock`: the full tier's private directories are closed, the per-run
/// directory on the host is granted and named by TMPDIR, and the tier is recorded.
#[test]
fn the_landlock_tier_grants_the_run_directory_instead_of_the_private_ones() {
    let mut req = request(&["true"]);
    req.tier = crate::model::tier::Tier::Landlock;
    let policy = resolve(&req, &host("/usr/bin:/bin"), &base_fs()).unwrap();
    assert_eq!(policy.tier, crate::model::tier::Tier::Landlock);
    for private in ["/tmp", "/var/tmp", "/dev/shm", "/run", "/run/sandy"] {
        assert!(
            !policy.grants.iter().any(|g| g.path == Path::new(private)),
            "{private} is granted"
        );
    }
    assert!(policy
        .grants
        .iter()
        .any(|g| g.path == Path::new("/tmp/sandy-1")
            && g.access == Access::ReadWrite
            && g.scope == Scope::Subtree));
    let tmpdir = policy
        .environment
        .iter()
        .find(|(k, _)| k == "TMPDIR")
        .map(|(_, v)| v.clone());
    assert_eq!(tmpdir, Some("/tmp/sandy-1".into()));
    assert!(policy.protections.iter().all(|p| p.placeholder.is_none()));
    let full = resolve(&request(&["true"]), &host("/usr/bin:/bin"), &base_fs()).unwrap();
    assert_eq!(full.tier, crate::model::tier::Tier::Full);
}

#[test]
fn the_landlock_tier_blocks_the_network_without_a_proxy_and_refuses_an_allowlist() {
    let mut req = request(&["true"]);
    req.tier = crate::model::tier::Tier::Landlock;
    req.block_net = true;
    let policy = resolve(&req, &host("/usr/bin:/bin"), &base_fs()).unwrap();
    assert_eq!(policy.network, Network::BlockAll);
    assert!(policy.egress.is_none());
    assert!(!policy.environment.iter().any(|(k, _)| k == "HTTPS_PROXY"));

    let mut req = request(&["true"]);
    req.tier = crate::model::tier::Tier::Landlock;
    req.block_net = true;
    req.allow_local_ports = vec![8080];
    let err = resolve(&req, &host("/usr/bin:/bin"), &base_fs()).unwrap_err();
    assert!(err.to_string().contains("no network namespace"), "{err}");
}

#[test]
fn the_landlock_tier_refuses_a_writable_grant_around_a_hidden_path_and_keeps_a_read_one() {
    let mut req = request(&["true"]);
    req.tier = crate::model::tier::Tier::Landlock;
    req.read_write = vec!["/home/u/.config".into()];
    let fs = base_fs()
        .dir("/home/u/.config")
        .dir("/home/u/.config/gh")
        .file("/home/u/.config/gh/hosts.yml");
    // Refused in either tier (the full tier refuses it first).
    let err = resolve(&req, &host("/usr/bin:/bin"), &fs).unwrap_err();
    assert!(err.to_string().contains("/home/u/.config"), "{err}");
    // A read grant around it is fine: the launch splits it.
    let mut req = request(&["true"]);
    req.tier = crate::model::tier::Tier::Landlock;
    req.read = vec!["/home/u/.config".into()];
    resolve(&req, &host("/usr/bin:/bin"), &fs).unwrap();
}

// Policies as files (`crate::rules::files`): their grants go through the flags' checks, keep
// their origin, and a file the run could write is refused.

fn file_rules(text: &str) -> crate::rules::files::FileRules {
    crate::rules::files::parse_config(
        text,
        Path::new("/home/u/.config/sandy/config.toml"),
        Some(Path::new("/home/u")),
    )
    .unwrap()
    .rules
}

#[test]
fn a_file_grant_carries_its_origin_and_reason_and_the_flags_add_to_it() {
    let fs = base_fs().dir("/home/u/lib").dir("/home/u/data");
    let mut req = request(&["/usr/bin/true"]);
    req.files = file_rules(
        "version = 1\n[[grants]]\npath = \"~/lib\"\naccess = \"read\"\nreason = \"the library\"\n",
    );
    req.read_write = vec!["/home/u/data".into()];
    let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    assert!(policy.grants.contains(&g(
        "/home/u/lib",
        Access::Read,
        Scope::Subtree,
        Origin::Config
    )));
    assert!(policy.grants.contains(&g(
        "/home/u/data",
        Access::ReadWrite,
        Scope::Subtree,
        Origin::Flag
    )));
    assert_eq!(
        policy.files.grant_reasons,
        vec![(
            PathBuf::from("/home/u/lib"),
            Origin::Config,
            "the library".to_owned()
        )]
    );
    let doc = crate::documents::dryrun::DryRunDocument::new(&policy, 4);
    let lib = doc
        .file_grants
        .iter()
        .find(|g| g.path == "/home/u/lib")
        .unwrap();
    assert_eq!(lib.reason.as_deref(), Some("the library"));
    assert_eq!(doc.policy_files.len(), 1);
}

#[test]
fn a_file_cannot_grant_what_a_flag_cannot() {
    let fs = base_fs();
    for (path, access) in [
        ("~/.ssh", "read"),
        ("~/.ssh/id_ed25519", "read"),
        ("~", "read_write"),
        ("/", "read"),
        ("~/missing", "read"),
    ] {
        let mut req = request(&["/usr/bin/true"]);
        let text = if path == "~" {
            "version = 1\n[[grants]]\npath = \"/home/u\"\naccess = \"read_write\"\nreason = \"r\"\n"
                .to_owned()
        } else {
            format!(
                "version = 1\n[[grants]]\npath = \"{path}\"\naccess = \"{access}\"\nreason = \"r\"\n"
            )
        };
        req.files = file_rules(&text);
        let err = resolve(&req, &host("/usr/bin"), &fs).unwrap_err();
        assert!(
            err.to_string()
                .contains("a grant of the configuration file"),
            "{path}: {err}"
        );
    }
}

#[test]
fn a_file_protection_masks_or_keeps_read_only_and_never_covers_the_project() {
    let fs = base_fs()
        .dir("/home/u/proj/secrets")
        .file("/home/u/proj/Makefile")
        .dir("/home/u/lib");
    let mut req = request(&["/usr/bin/true"]);
    req.files = file_rules(
        "version = 1\n\
         [[protections]]\npath = \"/home/u/proj/secrets\"\nkind = \"deny\"\nreason = \"keys\"\n\
         [[protections]]\npath = \"/home/u/proj/Makefile\"\nkind = \"read_only\"\nreason = \"build\"\n\
         [[protections]]\npath = \"/home/u/proj/absent\"\nkind = \"deny\"\nreason = \"nothing\"\n",
    );
    let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    let find = |p: &str| policy.protections.iter().find(|q| q.path == Path::new(p));
    let mask = find("/home/u/proj/secrets").unwrap();
    assert_eq!(
        (mask.kind, mask.origin, mask.reason.as_deref()),
        (ProtectionKind::Deny, Origin::Config, Some("keys"))
    );
    let ro = find("/home/u/proj/Makefile").unwrap();
    assert_eq!(
        (ro.kind, ro.origin),
        (ProtectionKind::ReadOnly, Origin::Config)
    );
    assert!(find("/home/u/proj/absent").is_none());

    for covering in ["/home/u/proj", "/home/u"] {
        let mut req = request(&["/usr/bin/true"]);
        req.files = file_rules(&format!(
            "version = 1\n[[protections]]\npath = \"{covering}\"\nkind = \"read_only\"\nreason = \"r\"\n"
        ));
        let err = resolve(&req, &host("/usr/bin"), &fs).unwrap_err();
        assert!(
            err.to_string().contains("may not cover the project"),
            "{err}"
        );
    }
}

#[test]
fn file_network_rules_ports_and_ceilings_carry_their_origin() {
    let fs = base_fs();
    let mut req = request(&["/usr/bin/true"]);
    req.files = file_rules(
        "version = 1\n[network]\nallow = [\"api.example.com\"]\ndeny = [\"bad.example.com\"]\n\
         local_ports = [5432]\n[ceilings]\nmax_procs = 100\nmax_memory = \"1G\"\n",
    );
    req.ceilings.max_memory = Some(2 << 30);
    let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    let egress = policy.egress.as_ref().unwrap();
    assert!(egress
        .policy
        .rules
        .iter()
        .all(|r| r.origin == sandy_net::RuleOrigin::Config));
    assert_eq!(egress.policy.rules.len(), 2);
    assert_eq!(policy.local_ports[0].origin, PortOrigin::Config);
    assert_eq!(policy.ceilings.max_procs.value, 100);
    assert_eq!(
        policy.ceilings.max_procs.origin,
        crate::model::ceilings::CeilingOrigin::Config
    );
    // The flag's value replaces the file's.
    assert_eq!(policy.ceilings.max_memory.value, 2 << 30);
    assert_eq!(
        policy.ceilings.max_memory.origin,
        crate::model::ceilings::CeilingOrigin::Flag
    );

    // A file's `mode = "block"` conflicts with a flag's allowlist, in one line.
    let mut req = request(&["/usr/bin/true"]);
    req.files = file_rules("version = 1\n[network]\nmode = \"block\"\n");
    let blocked = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    assert_eq!(blocked.network, Network::BlockAll);
    req.egress.allow = vec!["example.com".parse().unwrap()];
    assert!(matches!(
        resolve(&req, &host("/usr/bin"), &fs),
        Err(ResolveError::NetworkConflict)
    ));
}

#[test]
fn a_file_the_run_could_write_is_refused() {
    use crate::rules::files::{check_not_writable, FileRole};
    let fs = base_fs()
        .dir("/home/u/.config")
        .dir("/home/u/.config/sandy")
        .file("/home/u/.config/sandy/config.toml")
        .file("/home/u/proj/cfg.toml")
        .dir("/home/u/proj/cfgdir")
        .file("/home/u/proj/cfgdir/config.toml")
        .dir("/home/u/dotfiles")
        .file("/home/u/dotfiles/config.toml")
        .dir("/home/u/data")
        .file("/home/u/data/config.toml");
    let mut req = request(&["/usr/bin/true"]);
    req.read_write = vec!["/home/u/data".into()];
    let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    let role = FileRole::Config;
    let ok = |fs: &FakeFs, p: &str| check_not_writable(role, Path::new(p), &policy, fs);
    // Outside every writable place: fine.
    assert!(ok(&fs, "/home/u/.config/sandy/config.toml").is_ok());
    assert!(ok(&fs, "/home/u/dotfiles/config.toml").is_ok());
    // In the project, in a --read-write grant.
    for p in ["/home/u/proj/cfg.toml", "/home/u/data/config.toml"] {
        let err = ok(&fs, p).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("refusing the configuration file"),
            "{err}"
        );
    }
    // A link into the project.
    let linked = base_fs()
        .dir("/home/u/.config")
        .dir("/home/u/.config/sandy")
        .file("/home/u/proj/cfg.toml")
        .link("/home/u/.config/sandy/config.toml", "/home/u/proj/cfg.toml");
    assert!(ok(&linked, "/home/u/.config/sandy/config.toml").is_err());
    // A directory on the way that is a link into the project.
    let dir_link = base_fs()
        .dir("/home/u/.config")
        .dir("/home/u/proj/cfgdir")
        .file("/home/u/proj/cfgdir/config.toml")
        .link("/home/u/.config/sandy", "/home/u/proj/cfgdir");
    assert!(ok(&dir_link, "/home/u/.config/sandy/config.toml").is_err());
    // A link the run could replace, although it leads outside today.
    let hop = base_fs()
        .dir("/home/u/.config")
        .dir("/home/u/dotfiles")
        .file("/home/u/dotfiles/config.toml")
        .link("/home/u/proj/hop", "/home/u/dotfiles")
        .link("/home/u/.config/sandy", "/home/u/proj/hop");
    assert!(ok(&hop, "/home/u/.config/sandy/config.toml").is_err());
    // The private /tmp is not the host's: a file in the host's /tmp is not refused.
    let tmp = base_fs().file("/tmp/policy.toml");
    assert!(ok(&tmp, "/tmp/policy.toml").is_ok());
}

/// With a terminal, the run keeps its history in the project's own directory: every
/// variable of `crate::rules::history` is set, and named among those Sandy sets.
#[test]
fn a_run_on_a_terminal_keeps_its_history_in_the_projects_directory() {
    let mut h = host("/usr/bin:/bin");
    h.terminals = vec!["/dev/pts/3".into()];
    h.env
        .push(("HISTFILE".into(), "/home/u/.bash_history".into()));
    let policy = resolve(&request(&["true"]), &h, &base_fs()).unwrap();
    let history = policy.history.clone().unwrap();
    assert_eq!(
        history.directory,
        crate::rules::history::directory(
            Path::new("/home/u/.local/state/sandy"),
            Path::new("/home/u/proj")
        )
    );
    for (name, value) in &history.environment {
        assert!(
            policy
                .environment
                .iter()
                .any(|(k, v)| k == name && v == value),
            "{name:?}"
        );
        assert!(policy
            .set_env
            .contains(&name.to_string_lossy().into_owned()));
    }
    let histfile: Vec<_> = policy
        .environment
        .iter()
        .filter(|(k, _)| k == "HISTFILE")
        .collect();
    assert_eq!(
        histfile,
        [&("HISTFILE".into(), "/tmp/.sandy-history/bash_history".into())]
    );
}

/// A tools directory outside the project: programs, a script, a library without an
/// execute bit, data, a link, and a sensitive directory inside.
fn tools_fs() -> FakeFs {
    base_fs()
        .dir("/srv")
        .dir("/srv/tools")
        .dir("/srv/tools/bin")
        .exe("/srv/tools/bin/tool")
        .script("/srv/tools/bin/run.sh", "#!/bin/sh\n")
        .dir("/srv/tools/lib")
        .file("/srv/tools/lib/libtool.so.1")
        .file("/srv/tools/lib/libplain.so")
        .file("/srv/tools/data.txt")
        .link("/srv/tools/bin/alias", "tool")
}

fn grants_below<'a>(policy: &'a ResolvedPolicy, root: &str) -> Vec<&'a Grant> {
    policy
        .grants
        .iter()
        .filter(|g| g.path.starts_with(root))
        .collect()
}

#[test]
fn execute_grants_running_and_the_reads_running_needs_and_nothing_else() {
    let mut req = request(&["true"]);
    req.execute = vec!["/srv/tools".into()];
    let policy = resolve(&req, &host("/usr/bin"), &tools_fs()).unwrap();
    let got: Vec<Grant> = grants_below(&policy, "/srv/tools")
        .into_iter()
        .cloned()
        .collect();
    let flag = Origin::Flag;
    assert_eq!(
        got,
        vec![
            g("/srv/tools", Access::Execute, Scope::Subtree, flag),
            g(
                "/srv/tools/bin/run.sh",
                Access::ReadExec,
                Scope::Exact,
                flag
            ),
            g("/srv/tools/bin/tool", Access::ReadExec, Scope::Exact, flag),
            g(
                "/srv/tools/lib/libplain.so",
                Access::ReadExec,
                Scope::Exact,
                flag
            ),
            g(
                "/srv/tools/lib/libtool.so.1",
                Access::ReadExec,
                Scope::Exact,
                flag
            ),
        ]
    );
    // Reading does not give executing, nor executing reading.
    assert!(!Access::Read.covers(Access::Execute));
    assert!(!Access::Execute.covers(Access::Read));
    assert!(!Access::Execute.covers(Access::List));
    assert!(Access::ReadExec.covers(Access::Execute));
    assert!(Access::ReadWrite.covers(Access::Execute));
    assert!(Access::Read.covers(Access::List));
}

#[test]
fn execute_of_one_file_grants_it_alone() {
    let mut req = request(&["true"]);
    req.execute = vec!["/srv/tools/bin/tool".into()];
    let policy = resolve(&req, &host("/usr/bin"), &tools_fs()).unwrap();
    assert_eq!(
        grants_below(&policy, "/srv/tools"),
        vec![&g(
            "/srv/tools/bin/tool",
            Access::ReadExec,
            Scope::Exact,
            Origin::Flag
        )]
    );
}

#[test]
fn execute_is_refused_where_read_is_and_skips_what_is_masked() {
    let fs = tools_fs().exe("/home/u/.ssh/helper");
    for path in ["/home/u/.ssh", "/home/u/.ssh/helper", "/srv/none"] {
        let mut req = request(&["true"]);
        req.execute = vec![path.into()];
        let err = resolve(&req, &host("/usr/bin"), &fs).unwrap_err();
        assert!(
            matches!(
                err,
                ResolveError::SensitiveGrant {
                    flag: "--execute",
                    ..
                } | ResolveError::MissingPath {
                    flag: "--execute",
                    ..
                }
            ),
            "{path}: {err:?}"
        );
    }
    // Covering a sensitive directory (as --read may): nothing in it is granted.
    let mut req = request(&["true"]);
    req.execute = vec!["/home/u".into()];
    let fs = fs.exe("/home/u/other/tool");
    let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
    assert!(grants_below(&policy, "/home/u/.ssh").is_empty());
    assert!(policy.grants.contains(&g(
        "/home/u/other/tool",
        Access::ReadExec,
        Scope::Exact,
        Origin::Flag
    )));
}

#[test]
fn a_files_execute_grant_carries_its_origin_and_reason() {
    let mut req = request(&["true"]);
    req.files.grants.push(crate::rules::files::FileGrant {
        path: "/srv/tools".into(),
        access: Access::Execute,
        reason: "the team's linters".into(),
        origin: Origin::Config,
    });
    let policy = resolve(&req, &host("/usr/bin"), &tools_fs()).unwrap();
    assert!(policy.grants.contains(&g(
        "/srv/tools",
        Access::Execute,
        Scope::Subtree,
        Origin::Config
    )));
    assert!(policy.grants.contains(&g(
        "/srv/tools/bin/tool",
        Access::ReadExec,
        Scope::Exact,
        Origin::Config
    )));
    assert_eq!(
        policy.files.grant_reasons,
        vec![(
            PathBuf::from("/srv/tools"),
            Origin::Config,
            "the team's linters".to_owned()
        )]
    );
}

#[test]
fn a_project_policys_domains_only_join_an_allowlist_the_run_has() {
    let project_allow = |req: &mut RunRequest| {
        req.files
            .allow
            .push(("registry.example.com".parse().unwrap(), Origin::ProjectFile));
    };
    // The host's network stays the host's: the project does not make it an allowlist.
    let mut req = request(&["true"]);
    project_allow(&mut req);
    let policy = resolve(&req, &host("/usr/bin"), &base_fs()).unwrap();
    assert_eq!(policy.network, Network::AllowAll);
    assert!(policy.egress.is_none());
    // --block-net stays blocked, without a conflict.
    let mut req = request(&["true"]);
    req.block_net = true;
    project_allow(&mut req);
    let policy = resolve(&req, &host("/usr/bin"), &base_fs()).unwrap();
    let egress = policy.egress.unwrap();
    assert_eq!(egress.policy.mode, sandy_net::Mode::Blocked);
    assert!(egress.policy.rules.is_empty());
    // With an allowlist (--allow-domain), the project's domain joins it.
    let mut req = request(&["true"]);
    req.egress.allow.push("api.example.com".parse().unwrap());
    project_allow(&mut req);
    let policy = resolve(&req, &host("/usr/bin"), &base_fs()).unwrap();
    let rules = policy.egress.unwrap().policy.rules;
    assert!(rules
        .iter()
        .any(|r| r.origin == sandy_net::RuleOrigin::ProjectFile
            && r.pattern.to_string() == "registry.example.com"));
}

/// The `landlock` tier binds no private copy of an agent's state file: no empty file is
/// made for one to be bound over (an empty `settings.json` is no JSON document, and
/// Gemini CLI refused to start), and no directory of Sandy's stands in for Codex's
/// state directory (`CODEX_HOME` is not set to one that is never made).
#[test]
fn the_landlock_tier_makes_no_mount_point_for_a_state_file_and_no_stand_in() {
    for (agent, dir) in [("gemini", "/home/u/.gemini"), ("codex", "/home/u/.codex")] {
        let fs = base_fs().exe(&format!("/usr/bin/{agent}")).dir(dir);
        let full = resolve(&request(&[agent]), &host("/usr/bin"), &fs).unwrap();
        assert!(
            !full.state_files.is_empty(),
            "{agent}: a copy in the full tier"
        );
        let mut req = request(&[agent]);
        req.tier = crate::model::tier::Tier::Landlock;
        let policy = resolve(&req, &host("/usr/bin"), &fs).unwrap();
        assert!(policy.state_files.is_empty());
        for file in &full.state_files {
            assert!(
                !policy
                    .created_at_launch
                    .iter()
                    .any(|c| c.path == file.inside
                        || file.mirror.is_some()
                            && file.inside.parent().is_some_and(|s| c.path.starts_with(s))),
                "{agent}: {:?}",
                policy.created_at_launch
            );
        }
        assert!(
            !policy
                .environment
                .iter()
                .any(|(_, v)| v.to_string_lossy().contains(".sandy-codex-home")),
            "{agent}: {:?}",
            policy.environment
        );
    }
}
