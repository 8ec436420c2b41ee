use super::*;

const BUILTIN: &[&str] = &["claude", "codex", "generic"];

fn config(text: &str) -> Result<Config, FileError> {
    parse_config(
        text,
        Path::new("/home/u/.config/sandy/config.toml"),
        Some(Path::new("/home/u")),
    )
}

fn syntax(err: FileError) -> (usize, usize, String) {
    match err {
        FileError::Syntax {
            line,
            column,
            message,
            ..
        } => (line, column, message),
        other => panic!("not a syntax error: {other}"),
    }
}

#[test]
fn a_configuration_adds_grants_network_rules_ports_passes_and_ceilings() {
    let c = config(
        r#"version = 1

[[grants]]
path = "~/src/lib"
access = "read"
reason = "the shared library"

[[grants]]
path = "/srv/cache"
access = "read_write"
reason = "the build cache"

[network]
mode = "agent"
allow = ["api.example.com", "*.example.org:8443"]
deny = ["telemetry.example.com"]
local_ports = [5432]

[environment]
pass = ["GITHUB_TOKEN"]

[ceilings]
max_procs = 2048
max_memory = "8G"
cpu = "1.5"

[profile.claude]
grants = [{ path = "~/notes", access = "read", reason = "the notes" }]

[profile.claude.network]
allow = ["claude.example.com"]
"#,
    )
    .unwrap();
    let r = &c.rules;
    assert_eq!(r.grants.len(), 2);
    assert_eq!(r.grants[0].path, Path::new("/home/u/src/lib"));
    assert_eq!(r.grants[0].access, Access::Read);
    assert_eq!(r.grants[0].origin, Origin::Config);
    assert_eq!(r.grants[1].access, Access::ReadWrite);
    assert_eq!(r.agent_net, Some(Origin::Config));
    assert_eq!(r.block_net, None);
    assert_eq!(r.allow.len(), 2);
    assert_eq!(r.deny.len(), 1);
    assert_eq!(r.local_ports, vec![(5432, Origin::Config)]);
    assert_eq!(r.pass_env, vec!["GITHUB_TOKEN".to_owned()]);
    assert_eq!(r.ceilings.max_procs, Some((2048, Origin::Config)));
    assert_eq!(r.ceilings.max_memory, Some((8 << 30, Origin::Config)));
    assert_eq!(r.ceilings.cpu, Some((1500, Origin::Config)));
    assert_eq!(
        r.sources,
        vec![(
            Origin::Config,
            PathBuf::from("/home/u/.config/sandy/config.toml")
        )]
    );
    // The section applies to its profile only, after the top level.
    let claude = c.for_profiles(&["claude"]);
    assert_eq!(claude.grants.len(), 3);
    assert_eq!(claude.grants[2].path, Path::new("/home/u/notes"));
    assert_eq!(claude.allow.len(), 3);
    assert_eq!(claude.sources.len(), 1);
    assert_eq!(c.for_profiles(&["codex"]), c.rules);
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let (line, column, message) = syntax(
        config("version = 1\n[[grants]]\npath = \"/a\"\naccess = \"read\"\nreason = \"r\"\nexec = true\n")
            .unwrap_err(),
    );
    assert_eq!((line, column), (6, 1));
    assert!(message.contains("unknown field `exec`"), "{message}");
    let (line, _, message) = syntax(config("version = 1\ncolour = \"blue\"\n").unwrap_err());
    assert_eq!(line, 2);
    assert!(message.contains("`colour`"), "{message}");
    let (line, _, message) =
        syntax(config("version = 1\n\n[network]\nallowed = [\"a.example\"]\n").unwrap_err());
    assert_eq!(line, 4);
    assert!(message.contains("`allowed`"), "{message}");
    let err = config("version = 1\nseccomp = []\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/home/u/.config/sandy/config.toml:2:1: unknown field `seccomp`"),
        "{err}"
    );
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn the_version_is_required_and_checked_first() {
    assert!(matches!(
        config("[[grants]]\n").unwrap_err(),
        FileError::NoVersion { .. }
    ));
    // A newer file is reported as such, not by its new keys.
    assert!(matches!(
        config("version = 2\nnew_key = 1\n").unwrap_err(),
        FileError::Version { found: 2, .. }
    ));
    assert!(matches!(
        config("version = 0\n").unwrap_err(),
        FileError::Version { found: 0, .. }
    ));
    assert!(matches!(
        config("version = \"1\"\n").unwrap_err(),
        FileError::Syntax { .. }
    ));
}

#[test]
fn every_grant_gives_a_reason_and_a_usable_path_and_access() {
    let grant = |body: &str| config(&format!("version = 1\n[[grants]]\n{body}\n"));
    let (_, _, m) = syntax(grant("path = \"/a\"\naccess = \"read\"").unwrap_err());
    assert!(m.contains("missing field `reason`"), "{m}");
    let err = grant("path = \"/a\"\naccess = \"read\"\nreason = \"  \"").unwrap_err();
    assert!(err.to_string().contains("grants[0].reason"), "{err}");
    let err = grant("path = \"src\"\naccess = \"read\"\nreason = \"r\"").unwrap_err();
    assert!(err.to_string().contains("grants[0].path"), "{err}");
    // No access beyond what a flag grants: no read-and-execute, no raw kernel rule.
    for access in ["read_exec", "list", "landlock", "exec"] {
        let text = format!("path = \"/a\"\naccess = \"{access}\"\nreason = \"r\"");
        assert!(
            matches!(grant(&text).unwrap_err(), FileError::Syntax { .. }),
            "{access}"
        );
    }
    // `execute` is what `--execute` grants.
    let rules = grant("path = \"/a\"\naccess = \"execute\"\nreason = \"r\"")
        .unwrap()
        .rules;
    assert_eq!(rules.grants[0].access, Access::Execute);
    let long = "x".repeat(MAX_REASON_CHARS + 1);
    assert!(grant(&format!(
        "path = \"/a\"\naccess = \"read\"\nreason = \"{long}\""
    ))
    .is_err());
    // `~/` without a home directory.
    let err = parse_config(
        "version = 1\n[[grants]]\npath = \"~/a\"\naccess = \"read\"\nreason = \"r\"\n",
        Path::new("/c.toml"),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("no home directory"), "{err}");
}

#[test]
fn bad_values_are_named_by_key() {
    let err = config("version = 1\n[network]\nallow = [\"a b\"]\n").unwrap_err();
    assert!(err.to_string().contains("network.allow[0]"), "{err}");
    let err = config("version = 1\n[network]\nlocal_ports = [0]\n").unwrap_err();
    assert!(err.to_string().contains("network.local_ports[0]"), "{err}");
    assert!(config("version = 1\n[network]\nlocal_ports = [70000]\n").is_err());
    let err = config("version = 1\n[ceilings]\nmax_procs = 1\n").unwrap_err();
    assert!(err.to_string().contains("ceilings.max_procs"), "{err}");
    let err = config("version = 1\n[environment]\npass = [\"A=B\"]\n").unwrap_err();
    assert!(err.to_string().contains("environment.pass[0]"), "{err}");
    let err = config("version = 1\n[profile.\"../x\"]\n").unwrap_err();
    assert!(err.to_string().contains("profile.../x"), "{err}");
    let err = config("version = 1\n[network]\nmode = \"open\"\n").unwrap_err();
    assert!(matches!(err, FileError::Syntax { line: 3, .. }), "{err}");
    let many = format!(
        "version = 1\n[network]\nlocal_ports = [{}]\n",
        "1,".repeat(MAX_ENTRIES + 1)
    );
    assert!(config(&many).unwrap_err().to_string().contains("at most"));
}

#[test]
fn a_profile_file_extends_one_built_in_profile() {
    let path = Path::new("/home/u/.config/sandy/profiles/work.toml");
    let text = r#"version = 1
extends = "claude"
description = "claude with the team's checkout"

[[grants]]
path = "~/team"
access = "read_write"
reason = "the team's checkout"

[[protections]]
path = "~/team/.env"
kind = "deny"
reason = "the team's credentials"

[network]
allow = ["registry.example.com"]

[environment]
pass = ["TEAM_TOKEN"]
"#;
    let p = parse_profile_file(text, path, Some(Path::new("/home/u")), BUILTIN).unwrap();
    assert_eq!(p.extends, "claude");
    assert_eq!(p.rules.grants[0].origin, Origin::ProfileFile);
    assert_eq!(p.rules.protections[0].kind, ProtectionKind::Deny);
    assert_eq!(p.rules.protections[0].path, Path::new("/home/u/team/.env"));
    assert_eq!(p.rules.allow[0].1, Origin::ProfileFile);
    assert_eq!(
        p.rules.sources,
        vec![(Origin::ProfileFile, path.to_path_buf())]
    );
    // A built-in to extend, and nothing a profile file does not hold.
    let err = parse_profile_file("version = 1\nextends = \"root\"\n", path, None, BUILTIN);
    assert!(err.unwrap_err().to_string().contains("extends"));
    let err = parse_profile_file("version = 1\n", path, None, BUILTIN).unwrap_err();
    assert!(err.to_string().contains("missing field `extends`"), "{err}");
    let err = parse_profile_file(
        "version = 1\nextends = \"claude\"\n[ceilings]\nmax_procs = 10\n",
        path,
        None,
        BUILTIN,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown field `ceilings`"),
        "{err}"
    );
}

#[test]
fn a_policy_file_reads_the_same_in_toml_and_json() {
    let toml_text = r#"version = 1
profile = "codex"

[[grants]]
path = "/srv/data"
access = "read"
reason = "the data set"

[network]
mode = "block"
local_ports = [8080]

[ceilings]
max_memory = "2G"
"#;
    let json_text = r#"{
  "version": 1,
  "profile": "codex",
  "grants": [{ "path": "/srv/data", "access": "read", "reason": "the data set" }],
  "network": { "mode": "block", "local_ports": [8080] },
  "ceilings": { "max_memory": "2G" }
}"#;
    let t = parse_policy_file(toml_text, Path::new("/p/policy.toml"), None, BUILTIN).unwrap();
    let j = parse_policy_file(json_text, Path::new("/p/policy.json"), None, BUILTIN).unwrap();
    assert_eq!(t.profile.as_deref(), Some("codex"));
    assert_eq!(t.profile, j.profile);
    let mut tr = t.rules.clone();
    tr.sources.clear();
    let mut jr = j.rules;
    jr.sources.clear();
    assert_eq!(tr, jr);
    assert_eq!(t.rules.block_net, Some(Origin::PolicyFile));
    assert_eq!(t.rules.grants[0].origin, Origin::PolicyFile);
    // JSON without the extension, by its first character.
    assert!(parse_policy_file(json_text, Path::new("/p/policy"), None, BUILTIN).is_ok());
    // Unknown keys in JSON: named, with the line.
    let err = parse_policy_file(
        "{\n  \"version\": 1,\n  \"raw_landlock\": []\n}",
        Path::new("/p/policy.json"),
        None,
        BUILTIN,
    )
    .unwrap_err();
    let s = err.to_string();
    assert!(s.starts_with("/p/policy.json:3:"), "{s}");
    assert!(s.contains("unknown field `raw_landlock`"), "{s}");
    assert!(!s.contains(" at line "), "{s}");
    let err = parse_policy_file(
        "version = 1\nprofile = \"nobody\"\n",
        Path::new("/p/policy.toml"),
        None,
        BUILTIN,
    );
    assert!(err.unwrap_err().to_string().contains("profile"));
}

#[test]
fn sizes_formats_and_names() {
    assert!(check_size(
        FileRole::Config,
        Path::new("/c"),
        MAX_POLICY_FILE_BYTES as u64
    )
    .is_ok());
    let err = check_size(
        FileRole::PolicyFile,
        Path::new("/c"),
        MAX_POLICY_FILE_BYTES as u64 + 1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("policy file"), "{err}");
    assert_eq!(Format::of(Path::new("a.json"), "version = 1"), Format::Json);
    assert_eq!(Format::of(Path::new("a.toml"), "{"), Format::Toml);
    assert_eq!(Format::of(Path::new("a"), "  {"), Format::Json);
    assert_eq!(Format::of(Path::new("a"), "version = 1"), Format::Toml);
    for good in ["work", "claude-team", "a_b", "X1"] {
        assert!(valid_profile_name(good), "{good}");
    }
    for bad in ["", "../x", "a/b", "a.toml", ".", &"x".repeat(65)] {
        assert!(!valid_profile_name(bad), "{bad}");
    }
    assert_eq!(line_column("ab\ncd\né f", 9), (3, 3));
}

#[test]
fn the_starter_configuration_parses() {
    let c = config(CONFIG_STARTER).unwrap();
    assert_eq!(
        c.rules,
        FileRules {
            sources: c.rules.sources.clone(),
            ..Default::default()
        }
    );
    // Every commented key, uncommented, is one this version reads.
    let uncommented: String = CONFIG_STARTER
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest.contains('=') || rest.starts_with('[') => rest,
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let c = config(&uncommented).unwrap();
    assert_eq!(c.rules.grants.len(), 1);
    assert_eq!(c.rules.protections.len(), 1);
    assert!(c.profiles.contains_key("claude"));
}

fn project(text: &str) -> Result<FileRules, FileError> {
    parse_project_file(
        text,
        Path::new("/home/u/proj/sandy.toml"),
        Some(Path::new("/home/u")),
        Path::new("/home/u/proj"),
    )
}

#[test]
fn a_project_policy_adds_grants_domains_and_ports_relative_to_the_project() {
    let rules = project(
        r#"version = 1

[[grants]]
path = "../sibling"
access = "read"
reason = "the sibling checkout"

[[grants]]
path = "~/.cache/tool"
access = "read_write"
reason = "the tool's cache"

[[grants]]
path = "/opt/sdk/bin"
access = "execute"
reason = "the SDK's compilers"

[network]
allow = ["registry.example.com"]
local_ports = [5432]
"#,
    )
    .unwrap();
    let grants: Vec<(&Path, Access, Origin)> = rules
        .grants
        .iter()
        .map(|g| (g.path.as_path(), g.access, g.origin))
        .collect();
    assert_eq!(
        grants,
        vec![
            (
                Path::new("/home/u/sibling"),
                Access::Read,
                Origin::ProjectFile
            ),
            (
                Path::new("/home/u/.cache/tool"),
                Access::ReadWrite,
                Origin::ProjectFile
            ),
            (
                Path::new("/opt/sdk/bin"),
                Access::Execute,
                Origin::ProjectFile
            ),
        ]
    );
    assert_eq!(rules.allow.len(), 1);
    assert_eq!(rules.allow[0].1, Origin::ProjectFile);
    assert_eq!(rules.local_ports, vec![(5432, Origin::ProjectFile)]);
    assert_eq!(
        rules.sources,
        vec![(
            Origin::ProjectFile,
            PathBuf::from("/home/u/proj/sandy.toml")
        )]
    );
    assert!(
        rules.project.is_none(),
        "the caller records the trust state"
    );
}

#[test]
fn a_project_policy_cannot_remove_protect_choose_the_network_pass_or_set_ceilings() {
    // Each key a repository has no business choosing for its user is unknown.
    for body in [
        "[[protections]]\npath = \"/x\"\nkind = \"deny\"\nreason = \"r\"",
        "[network]\nmode = \"host\"",
        "[network]\ndeny = [\"example.com\"]",
        "[environment]\npass = [\"GITHUB_TOKEN\"]",
        "[ceilings]\nmax_procs = 100",
        "profile = \"claude\"",
        "[unmask]\npath = \"~/.ssh\"",
        "[[grants]]\npath = \"/a\"\naccess = \"read_exec\"\nreason = \"r\"",
    ] {
        let err = project(&format!("version = 1\n{body}\n")).unwrap_err();
        assert!(matches!(err, FileError::Syntax { .. }), "{body}: {err}");
    }
    // Strict and versioned like every other file; JSON is not a project policy.
    assert!(matches!(
        project("[[grants]]\n").unwrap_err(),
        FileError::NoVersion { .. }
    ));
    assert!(matches!(
        project("version = 2\n").unwrap_err(),
        FileError::Version { found: 2, .. }
    ));
    assert!(project("{\"version\": 1}").is_err());
    // Every grant gives its reason.
    let err =
        project("version = 1\n[[grants]]\npath = \"../x\"\naccess = \"read\"\nreason = \"\"\n")
            .unwrap_err();
    assert!(err.to_string().contains("grants[0].reason"), "{err}");
}

#[test]
fn the_configuration_names_a_tier_for_every_run_or_one_profile() {
    let c = config("version = 1\ntier = \"landlock\"\n[profile.codex]\ntier = \"full\"\n").unwrap();
    assert_eq!(
        c.rules.tier,
        Some((crate::model::tier::Tier::Landlock, Origin::Config))
    );
    assert_eq!(
        c.profiles["codex"].tier,
        Some((crate::model::tier::Tier::Full, Origin::Config))
    );
    // A profile's section replaces the configuration's choice.
    let mut rules = c.rules.clone();
    rules.extend(c.profiles["codex"].clone());
    assert_eq!(
        rules.tier,
        Some((crate::model::tier::Tier::Full, Origin::Config))
    );
    let (line, _, text) = syntax(config("version = 1\ntier = \"none\"\n").unwrap_err());
    assert_eq!(line, 2, "{text}");
}
