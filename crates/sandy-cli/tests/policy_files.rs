//! Policies as files (issue 42, items 1 to 3): the user configuration, user profiles and
//! `--policy-file`, through the real binary. A file's grant shows in the dry run with its
//! origin and works in a run while its neighbour stays denied (judged inside and from the
//! host); a file the sandbox could write is refused before launch, in one line, and the
//! target never runs; `--policy-file` reads TOML and JSON alike and excludes grant flags.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

const CANARY: &str = "CANARY-policy-files-7d21";
const NEIGHBOUR: &str = "NEIGHBOUR-policy-files-5b80";

/// The dry run of `sandy run --dry-run FLAGS -- true` in the world, with extra
/// environment; checked against the published schema.
fn dry_run(w: &World, flags: &[&str], env: &[(&str, &str)]) -> Value {
    let mut args = vec!["run", "--dry-run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "true"]);
    let mut cmd = w.sandy(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    parse_dry_run(&o.stdout, "dry run")
}

/// The dry run's grant of `path`, if any.
fn grant_of<'a>(doc: &'a Value, path: &Path) -> Option<&'a Value> {
    let path = path.to_str().unwrap();
    doc["file_grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == path)
}

/// A library the files grant, and a neighbour nothing grants: each with a canary.
fn fixtures(w: &World) -> (PathBuf, PathBuf) {
    let lib = w.write("home/lib/notes.txt", CANARY);
    let neighbour = w.write("home/neighbour/notes.txt", NEIGHBOUR);
    (lib, neighbour)
}

fn config(w: &World, text: &str) -> PathBuf {
    w.write("home/.config/sandy/config.toml", text)
}

const LIB_CONFIG: &str = r#"version = 1

[[grants]]
path = "~/lib"
access = "read"
reason = "the shared notes"

[[grants]]
path = "~/out"
access = "read_write"
reason = "the build output"
"#;

#[test]
fn a_config_grant_shows_its_origin_works_and_leaves_its_neighbour_denied() {
    for_each_user(|w| {
        let (lib, neighbour) = fixtures(w);
        w.write("home/out/.keep", "");
        w.write("home/out-neighbour/.keep", "");
        let cfg = config(w, LIB_CONFIG);

        let doc = dry_run(w, &[], &[]);
        let g = grant_of(&doc, lib.parent().unwrap()).expect("the config's grant");
        assert_eq!(g["origin"], "config");
        assert_eq!(g["access"], "read");
        assert_eq!(g["reason"], "the shared notes");
        assert_eq!(
            grant_of(&doc, &w.home.join("out")).unwrap()["origin"],
            "config"
        );
        assert!(grant_of(&doc, neighbour.parent().unwrap()).is_none());
        assert_eq!(doc["policy_files"][0]["origin"], "config");
        assert_eq!(doc["policy_files"][0]["path"], cfg.to_str().unwrap());

        // Inside: the granted file reads, the neighbour does not; the writable grant
        // takes a write, its neighbour refuses one.
        let script = format!(
            "cat {lib}; cat {nb} && echo LEAKED; echo made > {out}/made.txt; \
             echo made > {outnb}/made.txt && echo WROTE; exit 0",
            lib = lib.display(),
            nb = neighbour.display(),
            out = w.home.join("out").display(),
            outnb = w.home.join("out-neighbour").display(),
        );
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "a run with the configuration");
        let out = stdout(&o);
        assert!(out.contains(CANARY), "the config's read grant works: {out}");
        assert!(!out.contains(NEIGHBOUR) && !out.contains("LEAKED"), "{out}");
        assert!(!out.contains("WROTE"), "{out}");
        // Judged from the host.
        assert_eq!(
            std::fs::read_to_string(w.home.join("out/made.txt")).unwrap(),
            "made\n"
        );
        assert!(!w.home.join("out-neighbour/made.txt").exists());

        // `sandy why` resolves with the configuration too.
        let o = w
            .sandy(["why", "--json", lib.to_str().unwrap()])
            .output()
            .unwrap();
        assert_code(&o, 0, "sandy why of the config's grant");
        let why: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(why["origin"], "config");
        let o = w
            .sandy(["why", neighbour.to_str().unwrap()])
            .output()
            .unwrap();
        assert_code(&o, 1, "sandy why of the neighbour");

        // A flag adds to the configuration.
        let doc = dry_run(w, &["--read", neighbour.to_str().unwrap()], &[]);
        assert_eq!(grant_of(&doc, &neighbour).unwrap()["origin"], "flag");
        assert_eq!(
            grant_of(&doc, lib.parent().unwrap()).unwrap()["origin"],
            "config"
        );
    });
}

#[test]
fn the_configuration_follows_xdg_config_home_and_its_profile_sections() {
    for_each_user(|w| {
        let (lib, _) = fixtures(w);
        w.write(
            "xdg/sandy/config.toml",
            "version = 1\n[profile.generic]\ngrants = [{ path = \"~/lib\", access = \"read\", \
             reason = \"generic runs only\" }]\n[profile.generic.network]\nlocal_ports = [5432]\n",
        );
        let xdg = w.root.join("xdg");
        let doc = dry_run(w, &[], &[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]);
        assert_eq!(
            grant_of(&doc, lib.parent().unwrap()).unwrap()["origin"],
            "config"
        );
        assert_eq!(doc["local_port_grants"][0]["origin"], "config");
        // Another profile's run: the section does not apply.
        let doc = dry_run(
            w,
            &["--profile", "codex"],
            &[("XDG_CONFIG_HOME", xdg.to_str().unwrap())],
        );
        assert!(grant_of(&doc, lib.parent().unwrap()).is_none());
        // Without XDG_CONFIG_HOME, ~/.config/sandy, which has none.
        let doc = dry_run(w, &[], &[]);
        assert!(grant_of(&doc, lib.parent().unwrap()).is_none());
        assert_eq!(doc["policy_files"], serde_json::json!([]));
    });
}

/// Asserts a refused launch: exit 125, one line naming `what`, the target never ran.
#[track_caller]
fn assert_refused(w: &World, o: &std::process::Output, what: &str, marker: &Path) {
    assert_code(o, 125, what);
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(what), "{err}");
    assert!(!marker.exists(), "the target ran");
    let _ = w;
}

#[test]
fn a_policy_file_the_sandbox_could_write_is_refused_before_launch() {
    for_each_user(|w| {
        fixtures(w);
        // In the project, where a run that starts can write it.
        let marker = w.project.join("ran");
        let script = format!("touch {}", marker.display());
        // In the project.
        w.write("home/project/.cfg/sandy/config.toml", LIB_CONFIG);
        w.write("home/out/.keep", "");
        let xdg = w.project.join(".cfg");
        for flags in [&[][..], &["--dry-run"][..]] {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "/bin/sh", "-c", &script]);
            let o = w
                .sandy(&args)
                .env("XDG_CONFIG_HOME", &xdg)
                .output()
                .unwrap();
            assert_refused(w, &o, "refusing the configuration file", &marker);
        }
        // A link to a file in the project.
        let cfg = w.write("home/project/sandy-config.toml", LIB_CONFIG);
        std::fs::create_dir_all(w.home.join(".config/sandy")).unwrap();
        std::os::unix::fs::symlink(&cfg, w.home.join(".config/sandy/config.toml")).unwrap();
        w.chown_all();
        let o = w.sh(&[], &script);
        assert_refused(w, &o, "refusing the configuration file", &marker);
        std::fs::remove_file(w.home.join(".config/sandy/config.toml")).unwrap();
        // In a directory the run's own grant makes writable (the config's, or a flag's).
        w.write("home/out/sandy/config.toml", LIB_CONFIG);
        let o = w
            .sandy(["run", "--", "/bin/sh", "-c", &script])
            .env("XDG_CONFIG_HOME", w.home.join("out"))
            .output()
            .unwrap();
        assert_refused(w, &o, "refusing the configuration file", &marker);
        // A profile file and a policy file in the project.
        let profile = w.write(
            "home/project/team.toml",
            "version = 1\nextends = \"claude\"\n",
        );
        let o = w.sh(&["--profile-file", profile.to_str().unwrap()], &script);
        assert_refused(w, &o, "refusing the profile file", &marker);
        let policy = w.write("home/project/policy.json", "{\"version\": 1}");
        let o = w.sh(&["--policy-file", policy.to_str().unwrap()], &script);
        assert_refused(w, &o, "refusing the policy file", &marker);
        // The same file outside every writable place runs.
        let outside = w.write("home/policies/policy.json", "{\"version\": 1}");
        let o = w.sh(&["--policy-file", outside.to_str().unwrap()], &script);
        assert_code(&o, 0, "a policy file outside the project");
        assert!(marker.exists());
    });
}

#[test]
fn invalid_or_oversized_files_are_refused_in_one_line() {
    for_each_user(|w| {
        let marker = w.root.join("ran");
        let script = format!("touch {}", marker.display());
        let cfg = config(
            w,
            "version = 1\n[[grants]]\npath = \"~/lib\"\nacces = \"read\"\n",
        );
        let o = w.sh(&[], &script);
        assert_refused(
            w,
            &o,
            &format!("{}:4:1: unknown field `acces`", cfg.display()),
            &marker,
        );
        config(
            w,
            "version = 1\n[[grants]]\npath = \"~/.ssh\"\naccess = \"read\"\nreason = \"keys\"\n",
        );
        w.write("home/.ssh/id_ed25519", "key");
        let o = w.sh(&[], &script);
        assert_refused(w, &o, "would expose sensitive path", &marker);
        let big = format!("version = 1\n#{}\n", "x".repeat(70_000));
        config(w, &big);
        let o = w.sh(&[], &script);
        assert_refused(w, &o, "larger than 65536 bytes", &marker);
        // `sandy config check` says the same, with the same status.
        let o = w.sandy(["config", "check"]).output().unwrap();
        assert_code(&o, 125, "config check of an oversized file");
        assert!(stderr(&o).contains("larger than"), "{}", stderr(&o));
    });
}

#[test]
fn config_init_writes_a_starter_that_check_accepts() {
    for_each_user(|w| {
        let o = w.sandy(["config", "init"]).output().unwrap();
        assert_code(&o, 0, "config init");
        let path = w.home.join(".config/sandy/config.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Sandy's user configuration"), "{text}");
        let o = w.sandy(["config", "check"]).output().unwrap();
        assert_code(&o, 0, "config check");
        assert!(stdout(&o).contains("ok: "), "{}", stdout(&o));
        // Never over an existing file.
        let o = w.sandy(["config", "init"]).output().unwrap();
        assert_code(&o, 125, "config init again");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    });
}

const TEAM_PROFILE: &str = r#"version = 1
extends = "claude"
description = "claude with the shared notes"

[[grants]]
path = "~/lib"
access = "read"
reason = "the team's notes"

[[protections]]
path = "~/out/keep.txt"
kind = "read_only"
reason = "the release notes"
"#;

#[test]
fn a_profile_file_extends_claude_and_adds_to_it() {
    for_each_user(|w| {
        let (lib, neighbour) = fixtures(w);
        w.write("home/out/keep.txt", "keep\n");
        let profile = w.write("home/profiles/team.toml", TEAM_PROFILE);
        let p = profile.to_str().unwrap();
        let doc = dry_run(
            w,
            &[
                "--profile-file",
                p,
                "--read-write",
                w.home.join("out").to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(doc["profile"]["name"], "claude");
        let g = grant_of(&doc, lib.parent().unwrap()).unwrap();
        assert_eq!(g["origin"], "profile_file");
        assert_eq!(g["reason"], "the team's notes");
        let keep = w.home.join("out/keep.txt");
        let protection = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == keep.to_str().unwrap())
            .expect("the profile's protection");
        assert_eq!(protection["kind"], "read_only");
        assert_eq!(protection["origin"], "profile_file");
        // Claude's own protections stay: the profile only adds.
        assert!(doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["origin"] == "profile"));
        assert_eq!(doc["policy_files"][0]["origin"], "profile_file");

        // A run: the grant reads, the neighbour does not, the protected file stays.
        let script = format!(
            "cat {lib}; cat {nb} && echo LEAKED; echo evil > {keep} && echo CHANGED; \
             echo new > {out}/new.txt; exit 0",
            lib = lib.display(),
            nb = neighbour.display(),
            keep = keep.display(),
            out = w.home.join("out").display(),
        );
        let o = w.sh(
            &[
                "--profile-file",
                p,
                "--read-write",
                w.home.join("out").to_str().unwrap(),
            ],
            &script,
        );
        assert_code(&o, 0, "a run with the profile file");
        let out = stdout(&o);
        assert!(out.contains(CANARY), "{out}");
        assert!(!out.contains(NEIGHBOUR) && !out.contains("LEAKED"), "{out}");
        assert!(!out.contains("CHANGED"), "{out}");
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "keep\n");
        assert!(w.home.join("out/new.txt").exists());

        // The same profile by name, from ~/.config/sandy/profiles.
        w.write("home/.config/sandy/profiles/team.toml", TEAM_PROFILE);
        let doc = dry_run(w, &["--profile", "team"], &[]);
        assert_eq!(doc["profile"]["name"], "claude");
        assert_eq!(
            grant_of(&doc, lib.parent().unwrap()).unwrap()["origin"],
            "profile_file"
        );
        let o = w
            .sandy(["why", "--json", "--profile", "team", lib.to_str().unwrap()])
            .output()
            .unwrap();
        assert_code(&o, 0, "sandy why with the user profile");
        let why: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(why["origin"], "profile_file");
        // A name that is neither built in nor a file: one line, 125.
        let o = w
            .sandy(["run", "--profile", "nobody", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 125, "an unknown profile");
        assert!(
            stderr(&o).contains("unknown profile \"nobody\""),
            "{}",
            stderr(&o)
        );
    });
}

const POLICY_TOML: &str = r#"version = 1
profile = "generic"

[[grants]]
path = "~/lib"
access = "read"
reason = "the shared notes"

[network]
mode = "block"
"#;

#[test]
fn a_policy_file_reads_as_toml_and_json_and_excludes_grant_flags() {
    for_each_user(|w| {
        let (lib, neighbour) = fixtures(w);
        // Ignored with a policy file: it is the complete policy.
        w.write(
            "home/.config/sandy/config.toml",
            "version = 1\n[network]\nlocal_ports = [5432]\n",
        );
        let toml = w.write("home/policies/policy.toml", POLICY_TOML);
        let json = w.write(
            "home/policies/policy.json",
            r#"{
  "version": 1,
  "profile": "generic",
  "grants": [{ "path": "~/lib", "access": "read", "reason": "the shared notes" }],
  "network": { "mode": "block" }
}"#,
        );
        // The published schema accepts the JSON one, and refuses an unknown key.
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../schemas/policy-file.v1.schema.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(validator.is_valid(&doc));
        let mut bad = doc;
        bad["landlock_rules"] = serde_json::json!([]);
        assert!(!validator.is_valid(&bad));

        let mut docs = Vec::new();
        for file in [&toml, &json] {
            let doc = dry_run(w, &["--policy-file", file.to_str().unwrap()], &[]);
            let g = grant_of(&doc, lib.parent().unwrap()).unwrap();
            assert_eq!(g["origin"], "policy_file");
            assert_eq!(doc["network"], "block_all");
            assert_eq!(doc["local_port_grants"], serde_json::json!([]));
            assert_eq!(doc["policy_files"][0]["path"], file.to_str().unwrap());
            docs.push(doc["file_grants"].clone());
        }
        assert_eq!(docs[0], docs[1], "TOML and JSON give the same grants");

        let script = format!(
            "cat {lib}; cat {nb} && echo LEAKED; exit 0",
            lib = lib.display(),
            nb = neighbour.display()
        );
        let o = w.sh(&["--policy-file", json.to_str().unwrap()], &script);
        assert_code(&o, 0, "a run with the JSON policy file");
        let out = stdout(&o);
        assert!(out.contains(CANARY), "{out}");
        assert!(!out.contains(NEIGHBOUR) && !out.contains("LEAKED"), "{out}");

        // Mutually exclusive with the flags it replaces: a usage error.
        let o = w
            .sandy([
                "run",
                "--policy-file",
                json.to_str().unwrap(),
                "--read",
                neighbour.to_str().unwrap(),
                "--",
                "true",
            ])
            .output()
            .unwrap();
        assert_code(&o, 2, "--policy-file with --read");
        assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    });
}

#[test]
fn a_writable_grant_from_a_file_keeps_the_protections_a_flag_gets() {
    for_each_user(|w| {
        // Another repository of the user's, made writable by the configuration.
        let repo = w.home.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        w.chown_all();
        let git = w
            .host("/usr/bin/git")
            .args(["init", "-q"])
            .arg(&repo)
            .output()
            .unwrap();
        assert_code(&git, 0, "git init on the host");
        config(
            w,
            "version = 1\n[[grants]]\npath = \"~/repo\"\naccess = \"read_write\"\n\
             reason = \"the sibling checkout\"\n",
        );
        let hook = repo.join(".git/hooks/pre-commit");
        let doc = dry_run(w, &[], &[]);
        assert_eq!(grant_of(&doc, &repo).unwrap()["origin"], "config");
        assert!(
            doc["protections"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["path"] == repo.join(".git/hooks").to_str().unwrap()
                    && p["kind"] == "read_only"),
            "the repository's hooks are protected"
        );
        let script = format!(
            "echo made > {repo}/file.txt; printf '#!/bin/sh\\necho PWNED\\n' > {hook} \
             && echo PLANTED; exit 0",
            repo = repo.display(),
            hook = hook.display()
        );
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "a run writing the configured repository");
        assert!(!stdout(&o).contains("PLANTED"), "{}", stdout(&o));
        // From the host: the grant wrote, the hook was not planted.
        assert!(repo.join("file.txt").exists());
        assert!(!hook.exists());
    });
}

/// The tier as a persistent choice (issue 39, item 3; issue 42, item 1): the
/// configuration's `tier`, for every run or one profile's, and `--tier` over it. A run in
/// the tier it names says so, as one chosen by flag does.
#[test]
fn the_configuration_chooses_the_tier_and_the_flag_overrides_it() {
    for_each_user(|w| {
        config(
            w,
            "version = 1\ntier = \"landlock\"\n[profile.codex]\ntier = \"full\"\n",
        );
        let doc = dry_run(w, &[], &[]);
        assert_eq!(doc["tier"]["name"], "landlock");
        assert_eq!(dry_run(w, &["--tier", "full"], &[])["tier"]["name"], "full");
        assert_eq!(
            dry_run(w, &["--profile", "codex"], &[])["tier"]["name"],
            "full"
        );
        // A run: the tier's line, and the run works.
        let o = w.sandy(["run", "--", "true"]).output().unwrap();
        assert_code(&o, 0, "a run in the configuration's tier");
        assert!(stderr(&o).contains("landlock"), "{}", stderr(&o));
        // An unknown tier is refused with its place.
        config(w, "version = 1\ntier = \"none\"\n");
        let o = w
            .sandy(["run", "--dry-run", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 125, "an unknown tier");
        assert!(stderr(&o).contains("config.toml:2"), "{}", stderr(&o));
    });
}
