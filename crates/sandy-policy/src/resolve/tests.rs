use std::collections::BTreeMap;
use std::io;

use super::*;

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
    }
}

fn request(cmd: &[&str]) -> RunRequest {
    RunRequest {
        command: cmd.iter().map(OsString::from).collect(),
        read: vec![],
        read_write: vec![],
        private_tmp: "/tmp/sandy-1".into(),
        block_net: false,
        allow_local_ports: vec![],
        numbat_collector: None,
        profile: None,
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
    let policy = resolve(
        &request(&["true", "a b"]),
        &host("/usr/bin:/bin"),
        &base_fs(),
    )
    .unwrap();
    let expected = ResolvedPolicy {
        program: "/usr/bin/true".into(),
        argv: vec!["true".into(), "a b".into()],
        working_directory: "/home/u/proj".into(),
        environment: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/home/u".into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        removed_env: vec!["LD_PRELOAD".into(), "SSH_AUTH_SOCK".into()],
        set_env: vec!["TMPDIR".into()],
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
        ],
        protections: vec![
            Protection {
                path: "/home/u/.ssh".into(),
                kind: ProtectionKind::Deny,
                origin: Origin::Baseline,
                exists: true,
                placeholder: None,
            },
            Protection {
                path: "/home/u/proj/.git".into(),
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Project,
                exists: false,
                placeholder: None,
            },
            Protection {
                path: "/home/u/proj/.gitmodules".into(),
                kind: ProtectionKind::ReadOnly,
                origin: Origin::Project,
                exists: false,
                placeholder: None,
            },
        ],
        network: Network::AllowAll,
        local_ports: vec![],
        profile: ProfileInfo {
            name: "generic".into(),
            detected: false,
        },
        private_tmp: "/tmp/sandy-1".into(),
        runtime_dir: None,
        notices: vec![],
        views: vec![],
        caches: vec![],
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
        path: "/home/u/.ssh".into(),
        kind: ProtectionKind::Deny,
        origin: Origin::Baseline,
        exists: true,
        placeholder: None,
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
        .dir("/home/u/.local/share")
        .dir("/home/u/.local/share/tool")
        .dir("/home/u/.local/share/tool/bin")
        .script(
            "/home/u/.local/share/tool/bin/tool.js",
            "#!/usr/bin/env node\n",
        )
        .link("/home/u/.local/bin/tool", "../share/tool/bin/tool.js")
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
                "/home/u/.local/share/tool",
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
            &g(
                "/home/u/.local/bin",
                Access::ReadExec,
                Scope::Subtree,
                Origin::Path
            ),
        ]
    );
    assert_eq!(policy.program, PathBuf::from("/home/u/.local/bin/tool"));
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
fn shebang_lines_are_parsed() {
    assert_eq!(
        parse_shebang(b"#!/bin/sh\necho"),
        Some((PathBuf::from("/bin/sh"), None))
    );
    assert_eq!(
        parse_shebang(b"#! /usr/bin/env -S node --x\n"),
        Some((PathBuf::from("/usr/bin/env"), Some(b"-S node --x".to_vec())))
    );
    assert_eq!(parse_shebang(b"#!relative\n"), None);
    assert_eq!(parse_shebang(b"\x7fELF"), None);
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
        path: "/home/u/.cargo/credentials.toml".into(),
        kind: ProtectionKind::Deny,
        origin: Origin::Baseline,
        exists: true,
        placeholder: None,
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
fn local_ports_need_a_blocked_network() {
    let h = host("/usr/bin");
    let mut r = request(&["true"]);
    r.allow_local_ports = vec![8080];
    assert!(matches!(
        resolve(&r, &h, &base_fs()).unwrap_err(),
        ResolveError::PortWithoutBlockNet { port: 8080 }
    ));
    r.block_net = true;
    r.allow_local_ports = vec![8080, 4318, 8080];
    r.numbat_collector = Some(4318);
    let policy = resolve(&r, &h, &base_fs()).unwrap();
    assert_eq!(policy.network, Network::BlockAll);
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
            // Read-only: it registers MCP servers, and Claude Code writes it through a
            // temporary file in the read-only home anyway.
            &g(
                "/home/u/.claude.json",
                Access::Read,
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
            (Path::new("/home/u/.claude/.claude.json"), false),
            (Path::new("/home/u/.claude/.config.json"), false),
            (Path::new("/home/u/.claude/CLAUDE.md"), false),
            (Path::new("/home/u/.claude/skills"), false),
            (Path::new("/home/u/.claude/commands"), false),
            (Path::new("/home/u/.claude/agents"), false),
            (Path::new("/home/u/proj/.claude/settings.json"), false),
            (Path::new("/home/u/proj/.claude/settings.local.json"), false),
            (Path::new("/home/u/proj/.mcp.json"), false),
        ]
    );
    assert!(policy.notices.is_empty());
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
    for bad in [
        "relative/dir",
        "/srv/missing",
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
fn the_codex_profile_explains_its_nested_sandbox_unless_disabled() {
    let fs = base_fs().exe("/usr/bin/codex").dir("/home/u/.codex");
    let h = host("/usr/bin");
    let policy = resolve(&request(&["codex"]), &h, &fs).unwrap();
    assert_eq!(policy.notices.len(), 1);
    assert!(policy.notices[0].contains("--sandbox danger-full-access"));
    let quiet = resolve(
        &request(&["codex", "--sandbox", "danger-full-access"]),
        &h,
        &fs,
    )
    .unwrap();
    assert!(quiet.notices.is_empty());
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
fn a_missing_profile_state_directory_is_explained_not_created() {
    let fs = base_fs().exe("/usr/bin/gemini");
    let policy = resolve(&request(&["gemini"]), &host("/usr/bin"), &fs).unwrap();
    assert!(!policy.grants.iter().any(|g| g.origin == Origin::Profile));
    assert_eq!(
        policy.notices,
        vec![
            "note: /home/u/.gemini does not exist, so Gemini CLI cannot keep its state there \
             inside the sandbox; create it first (mkdir -p /home/u/.gemini) to let it"
                .to_owned()
        ]
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
    let policy = resolve(&r, &host("/usr/bin"), &fs).unwrap();
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
    let policy = resolve(&r, &host("/usr/bin"), &fs).unwrap();
    assert!(!policy
        .protections
        .iter()
        .any(|p| p.path.starts_with("/home/u/other")));
}
