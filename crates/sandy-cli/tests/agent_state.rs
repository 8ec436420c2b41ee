#![allow(clippy::unwrap_used, clippy::expect_used)]
//! An agent's own state through the real `sandy` binary, judged from the host: the state
//! directories a first launch creates (and nothing else), the dry run that lists them,
//! Claude Code's state file remembered for its allowlisted keys and never armed, every
//! file a profile protects unchanged after a run that tried to change it, Codex's
//! `config.toml` remembered for project trust only, and Codex
//! installed from npm in the home directory (its platform package beside it).
//!
//! Most tests play the agent with a script under `--profile NAME`, so they need no agent
//! CLI; the ones that run the real CLIs need `scripts/install-agents.sh` (otherwise a
//! reported skip, a failure in CI).
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::{json, Value};

const AGENTS_PREFIX: &str = "/opt/sandy-test-agents";

/// `sandy run ARGS...` as the test user, with extra environment.
fn run(w: &World, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let mut cmd = w.sandy(all);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_timeout(cmd, 120)
}

/// Every path below `dir` (relative), except the project, sorted.
fn listing(dir: &Path, skip: &Path) -> Vec<String> {
    fn walk(base: &Path, p: &Path, skip: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(p) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path == skip {
                continue;
            }
            out.push(path.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &path, skip, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, skip, &mut out);
    out.sort();
    out
}

fn first_launch_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.contains("first launch"))
        .map(str::to_owned)
        .collect()
}

#[track_caller]
fn assert_private_dir(w: &World, path: &Path) {
    let meta = std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{} was not created: {e}", path.display()));
    assert!(meta.is_dir(), "{}", path.display());
    assert_eq!(meta.mode() & 0o7777, 0o700, "{}", path.display());
    assert_eq!(meta.uid(), w.user.uid, "{}", path.display());
}

// ---------------------------------------------------------------------------------------
// First launch.

/// Each profile's state directories are created before launch: mode 0700, the user's,
/// one stderr line for all of them, and nothing else appears in the home directory.
#[test]
fn a_first_launch_creates_the_state_directories_and_nothing_else() {
    let cases: [(&str, &[&str]); 4] = [
        ("claude", &[".claude"]),
        ("codex", &[".codex"]),
        ("gemini", &[".gemini"]),
        (
            "opencode",
            &[
                ".cache",
                ".cache/opencode",
                ".config",
                ".config/opencode",
                ".local",
                ".local/share",
                ".local/share/opencode",
                ".local/state",
                ".local/state/opencode",
            ],
        ),
    ];
    for_each_user(|w| {
        for (profile, expected) in cases {
            let before = listing(&w.home, &w.project);
            assert!(before.is_empty(), "{before:?}");
            // The agent itself writes nothing here: what is left is what Sandy made
            // (besides Sandy's own cache, which holds OpenCode's cache layer).
            let o = run(w, &["--profile", profile, "--", "/bin/true"], &[]);
            assert_code(&o, 0, profile);
            let _ = std::fs::remove_dir_all(w.home.join(".cache/sandy"));
            let after = listing(&w.home, &w.project);
            assert_eq!(after, expected.to_vec(), "{profile}: {}", stderr(&o));
            for dir in expected {
                assert_private_dir(w, &w.home.join(dir));
            }
            let lines = first_launch_lines(&o);
            assert_eq!(lines.len(), 1, "{profile}: {}", stderr(&o));
            for dir in expected {
                assert!(
                    lines[0].contains(&w.home.join(dir).display().to_string()),
                    "{profile}: {}",
                    lines[0]
                );
            }
            // The second launch creates nothing and says nothing about it.
            let again = run(w, &["--profile", profile, "--", "/bin/true"], &[]);
            assert_code(&again, 0, profile);
            assert!(first_launch_lines(&again).is_empty(), "{}", stderr(&again));
            let _ = std::fs::remove_dir_all(w.home.join(".cache/sandy"));
            assert_eq!(listing(&w.home, &w.project), expected.to_vec());
            for dir in expected.iter().rev() {
                std::fs::remove_dir(w.home.join(dir)).unwrap();
            }
        }
    });
}

/// The environment overrides decide where the state goes, and that is where it is
/// created (absent directories below a directory the user named).
#[test]
fn a_first_launch_honours_the_environment_overrides() {
    for_each_user(|w| {
        let xdg = w.home.join("xdg");
        std::fs::create_dir(&xdg).unwrap();
        w.chown_all();
        let env = vec![
            ("XDG_DATA_HOME", xdg.join("data").display().to_string()),
            ("XDG_STATE_HOME", xdg.join("state").display().to_string()),
            ("XDG_CACHE_HOME", xdg.join("cache").display().to_string()),
            (
                "OPENCODE_CONFIG_DIR",
                xdg.join("oc-config").display().to_string(),
            ),
            ("CODEX_HOME", xdg.join("codex-home").display().to_string()),
            (
                "CLAUDE_CONFIG_DIR",
                xdg.join("claude-config").display().to_string(),
            ),
        ];
        for profile in ["opencode", "codex", "claude"] {
            let o = run(w, &["--profile", profile, "--", "/bin/true"], &env);
            assert_code(&o, 0, profile);
        }
        for dir in [
            "data/opencode",
            "state/opencode",
            "cache/opencode",
            "oc-config",
            "codex-home",
            "claude-config",
        ] {
            assert_private_dir(w, &xdg.join(dir));
        }
        // Nothing in the default places.
        for absent in [
            ".config",
            ".local",
            ".cache",
            ".codex",
            ".claude",
            ".claude.json",
        ] {
            assert!(!w.home.join(absent).exists(), "{absent}");
        }
        // The agent's state is writable there inside.
        let o = run(
            w,
            &[
                "--profile",
                "opencode",
                "--",
                "/bin/sh",
                "-c",
                "mkdir \"$XDG_DATA_HOME/opencode/storage\" && \
                 echo s > \"$XDG_DATA_HOME/opencode/storage/session\"",
            ],
            &env,
        );
        assert_code(&o, 0, "opencode writes its data");
        assert_eq!(
            std::fs::read_to_string(xdg.join("data/opencode/storage/session")).unwrap(),
            "s\n"
        );
    });
}

/// The agents' own working state, written inside from a first launch on, is on the host
/// afterwards: Claude Code's login, Codex's PATH aliases, Gemini CLI's temporary files and
/// checkpoints, OpenCode's data and cache.
#[test]
fn the_agents_working_state_persists_from_the_first_launch() {
    let cases = [
        ("claude", ".claude/.credentials.json"),
        ("codex", ".codex/tmp/arg0/apply_patch"),
        ("gemini", ".gemini/tmp/project/checkpoint-1.json"),
        ("opencode", ".local/share/opencode/storage/session.json"),
        // OpenCode's cache persists in the project's copy-on-write layer, not on the host
        // (opencode_downloads_are_copy_on_write_and_each_projects_own).
    ];
    for_each_user(|w| {
        for (profile, rel) in cases {
            let path = w.home.join(rel);
            let script = format!(
                "mkdir -p '{}' && echo state > '{}'",
                path.parent().unwrap().display(),
                path.display()
            );
            let o = run(
                w,
                &["--profile", profile, "--", "/bin/sh", "-c", &script],
                &[],
            );
            assert_code(&o, 0, rel);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "state\n", "{rel}");
        }
    });
}

#[test]
fn the_dry_run_lists_what_a_first_launch_creates_and_creates_nothing() {
    for_each_user(|w| {
        let o = run(
            w,
            &["--dry-run", "--profile", "claude", "--", "/bin/true"],
            &[],
        );
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "claude dry run");
        let home = w.home.display().to_string();
        assert_eq!(
            doc["created_at_launch"],
            json!([
                {"path": format!("{home}/.claude"), "kind": "directory"},
                {"path": format!("{home}/.claude/.claude.json"), "kind": "empty_file"},
            ])
        );
        assert!(listing(&w.home, &w.project).is_empty());
        assert!(first_launch_lines(&o).is_empty());
    });
}

// ---------------------------------------------------------------------------------------
// Claude Code's ~/.claude.json: remembered, never armed.

/// What a session inside writes into its copy: ordinary state Claude Code keeps, and
/// every kind of entry that would make a later launch run code.
const CLAUDE_WRITER: &str = r#"
import json, os, sys, time
path = os.path.join(os.environ["CLAUDE_CONFIG_DIR"], ".claude.json")
d = json.load(open(path))
project = sys.argv[1]
d["numStartups"] = d.get("numStartups", 0) + 1
d["theme"] = "light"
d["hasCompletedOnboarding"] = True
d["customApiKeyResponses"] = {"approved": ["abc123"], "rejected": []}
d.setdefault("projects", {}).setdefault(project, {})["hasTrustDialogAccepted"] = True
d["projects"]["/"] = {"hasTrustDialogAccepted": True}
d["projects"][project]["mcpServers"] = {"p": {"command": "/bin/sh", "args": ["-c", "POISON-P"]}}
d["projects"][project]["allowedTools"] = ["Bash(POISON-T)"]
d["projects"][project]["enabledMcpjsonServers"] = ["POISON-E"]
d["mcpServers"] = {"evil": {"command": "/bin/sh", "args": ["-c", "POISON-M"]}}
d["enabledMcpjsonServers"] = ["POISON-E"]
d["disabledMcpjsonServers"] = ["mine"]
d["hooks"] = {"Stop": [{"hooks": [{"type": "command", "command": "POISON-H"}]}]}
d["env"] = {"NODE_OPTIONS": "--require POISON-N"}
d["apiKeyHelper"] = "POISON-K"
d["someFutureKey"] = "POISON-U"
open(path, "w").write(json.dumps(d))
# Outside, another session edits the host file meanwhile.
go = sys.argv[2]
for _ in range(200):
    if os.path.exists(go):
        break
    time.sleep(0.05)
"#;

fn claude_merge_case(w: &World, state: &Path) {
    let project = w.project.display().to_string();
    let script = w.write("home/project/writer.py", CLAUDE_WRITER);
    let go = w.project.join("go");
    let mut cmd = w.sandy([
        "run",
        "--profile",
        "claude",
        "--",
        PYTHON,
        script.to_str().unwrap(),
        &project,
        go.to_str().unwrap(),
    ]);
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let collector = Collector::start(&mut child);
    // While it runs: the user's own edit outside (another Claude Code session).
    assert!(
        wait_for(30, || std::fs::read_to_string(state)
            .map(|t| !t.is_empty())
            .unwrap_or(false)
            && std::fs::read_dir(w.home.join(".claude"))
                .map(|mut d| d.any(|e| e.unwrap().file_name() == ".claude.json"))
                .unwrap_or(false)),
        "the run did not start"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut outside: Value =
        serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    outside["mcpServers"]["mine"] = json!({"command": "/usr/bin/true"});
    outside["verbose"] = json!(true);
    std::fs::write(state, serde_json::to_string_pretty(&outside).unwrap()).unwrap();
    std::fs::write(&go, "").unwrap();
    let status = wait_timeout(&mut child, 60, "the state writer");
    let o = collector.finish(status);
    assert_code(&o, 0, "the state writer");

    let after: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    // Remembered: the allowlisted keys.
    assert_eq!(after["numStartups"], json!(4), "{after}");
    assert_eq!(after["theme"], json!("light"));
    assert_eq!(after["hasCompletedOnboarding"], json!(true));
    assert_eq!(
        after["customApiKeyResponses"]["approved"],
        json!(["abc123"])
    );
    assert_eq!(
        after["projects"][&project]["hasTrustDialogAccepted"],
        json!(true)
    );
    // The edit made outside during the run survives.
    assert_eq!(after["verbose"], json!(true));
    assert_eq!(
        after["mcpServers"],
        json!({"mine": {"command": "/usr/bin/true"}})
    );
    // Never armed: nothing that runs code, nothing unknown.
    let text = after.to_string();
    assert!(!text.contains("POISON"), "{text}");
    for key in [
        "enabledMcpjsonServers",
        "disabledMcpjsonServers",
        "hooks",
        "env",
        "apiKeyHelper",
        "someFutureKey",
    ] {
        assert!(after.get(key).is_none(), "{key} reached the host: {text}");
    }
    for key in ["mcpServers", "allowedTools", "enabledMcpjsonServers"] {
        assert!(
            after["projects"][&project].get(key).is_none(),
            "{key}: {text}"
        );
    }
    // Reported by name, never by value.
    let err = stderr(&o);
    let report: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not kept: the run's changes"))
        .collect();
    assert_eq!(report.len(), 1, "{err}");
    for name in [
        "mcpServers.evil",
        "hooks.Stop",
        "env.NODE_OPTIONS",
        "apiKeyHelper",
        "someFutureKey",
        "enabledMcpjsonServers",
        "disabledMcpjsonServers",
        "allowedTools",
        "projects.\"/\".hasTrustDialogAccepted",
    ] {
        assert!(report[0].contains(name), "{name} not named: {}", report[0]);
    }
    assert!(!err.contains("POISON") && !err.contains("abc123"), "{err}");
    // The mount point of the copy is gone; the file keeps its mode and owner.
    assert!(!w.home.join(".claude/.claude.json").exists());
    let meta = std::fs::metadata(state).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o640);
    assert_eq!(meta.uid(), w.user.uid);
}

#[test]
fn claude_state_keeps_allowed_keys_and_drops_what_could_run_code() {
    for_each_user(|w| {
        let state = w.write(
            "home/.claude.json",
            "{\"numStartups\": 3, \"mcpServers\": {}, \"projects\": {}}\n",
        );
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::create_dir(w.home.join(".claude")).unwrap();
        w.chown_all();
        claude_merge_case(w, &state);
        assert!(!state.is_symlink());
    });
}

/// A dotfile manager made ~/.claude.json a link: the link stays, its target is merged.
#[test]
fn claude_state_behind_a_symlink_is_merged_into_its_target() {
    for_each_user(|w| {
        let target = w.write(
            "home/dotfiles/claude.json",
            "{\"numStartups\": 3, \"mcpServers\": {}, \"projects\": {}}\n",
        );
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::create_dir(w.home.join(".claude")).unwrap();
        let link = w.home.join(".claude.json");
        std::os::unix::fs::symlink("dotfiles/claude.json", &link).unwrap();
        w.chown_all();
        claude_merge_case(w, &link);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            PathBuf::from("dotfiles/claude.json")
        );
    });
}

/// A run that changes nothing allowed writes nothing: the host file keeps its bytes.
#[test]
fn claude_state_is_not_rewritten_when_only_forbidden_keys_changed() {
    for_each_user(|w| {
        let original = "{\n  \"mcpServers\": {},\n  \"numStartups\": 3\n}\n";
        let state = w.write("home/.claude.json", original);
        std::fs::create_dir(w.home.join(".claude")).unwrap();
        w.chown_all();
        let o = run(
            w,
            &[
                "--profile",
                "claude",
                "--",
                PYTHON,
                "-c",
                "import json,os; p=os.environ['CLAUDE_CONFIG_DIR']+'/.claude.json'; \
                 d=json.load(open(p)); d['mcpServers']['x']={'command':'sh'}; \
                 open(p,'w').write(json.dumps(d))",
            ],
            &[],
        );
        assert_code(&o, 0, "writer");
        assert_eq!(std::fs::read_to_string(&state).unwrap(), original);
        assert!(stderr(&o).contains("mcpServers.x"), "{}", stderr(&o));
        // And the host file itself was never visible for writing inside.
        let direct = run(
            w,
            &[
                "--profile",
                "claude",
                "--",
                "/bin/sh",
                "-c",
                &format!("echo '{{}}' > {}", state.display()),
            ],
            &[],
        );
        assert_ne!(direct.status.code(), Some(0));
        assert_eq!(std::fs::read_to_string(&state).unwrap(), original);
    });
}

// ---------------------------------------------------------------------------------------
// Codex's config.toml: project trust remembered, nothing that runs code.

/// Plays Codex inside: rewrites `$CODEX_HOME/config.toml` by renaming a new file over it
/// (as Codex does) with trust for the project and for `/`, a `notify` command, a model
/// provider, an MCP server, a profile and a shell environment setting; writes a session and replaces its
/// login through the stand-in directory; then waits for `go` (the test edits the host file
/// meanwhile).
const CODEX_WRITER: &str = r#"set -e
c="$CODEX_HOME/config.toml"
{ echo 'notify = ["/bin/sh", "-c", "touch POISON-MARKER"]'
  echo 'model_provider = "POISON"'
  cat "$c"
  printf '[mcp_servers.evil]\ncommand = "/bin/sh"\n'
  printf '[projects."%s"]\ntrust_level = "trusted"\n' "$1"
  printf '[projects."/"]\ntrust_level = "trusted"\n'
  printf '[profiles.p]\nmodel_provider = "POISON"\n'
  printf '[shell_environment_policy]\ninherit = "all"\n'
} > "$c.tmp"
mv "$c.tmp" "$c"
mkdir -p "$CODEX_HOME/sessions/2026"
echo session > "$CODEX_HOME/sessions/2026/rollout.jsonl"
echo '{"new": "login"}' > "$CODEX_HOME/auth.json.tmp"
mv "$CODEX_HOME/auth.json.tmp" "$CODEX_HOME/auth.json"
echo started > "$2.started"
while [ ! -e "$2" ]; do sleep 0.05; done
"#;

/// The user's configuration, with a comment and an MCP server of their own.
const CODEX_HOST_CONFIG: &str =
    "# my Codex settings\nmodel = \"gpt-5\" # pinned\n\n[mcp_servers.mine]\ncommand = \"mine\"\n";

/// Runs [`CODEX_WRITER`] under the Codex profile with `env`; while it waits, the user
/// edits `config` outside. Returns the run's output.
fn codex_merge_case(w: &World, config: &Path, env: &[(&str, String)]) -> Output {
    let project = w.project.display().to_string();
    let script = w.write("home/project/codex-writer.sh", CODEX_WRITER);
    let go = w.project.join("go");
    let mut cmd = w.sandy([
        "run",
        "--profile",
        "codex",
        "--",
        "/bin/sh",
        script.to_str().unwrap(),
        &project,
        go.to_str().unwrap(),
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let collector = Collector::start(&mut child);
    let started = w.project.join("go.started");
    assert!(wait_for(30, || started.exists()), "the run did not start");
    // Meanwhile, outside: the user changes a setting (another Codex session would too).
    let mut text = std::fs::read_to_string(config).unwrap_or_default();
    text = text.replacen("model = \"gpt-5\"", "model = \"o3\"", 1);
    std::fs::write(config, &text).unwrap();
    std::fs::write(&go, "").unwrap();
    let status = wait_timeout(&mut child, 60, "the Codex state writer");
    let o = collector.finish(status);
    assert_code(&o, 0, "the Codex state writer");
    o
}

#[track_caller]
fn assert_codex_merged(o: &Output, config: &Path, codex_home: &Path, project: &str) {
    let after = std::fs::read_to_string(config).unwrap();
    // Remembered: trust for this folder; the user's edit, comment and server survive.
    let doc: toml::Table = toml::from_str(&after).unwrap();
    assert_eq!(
        doc["projects"][project]["trust_level"].as_str(),
        Some("trusted"),
        "{after}"
    );
    assert!(
        after.starts_with("# my Codex settings\nmodel = \"o3\" # pinned\n"),
        "{after}"
    );
    assert_eq!(doc["mcp_servers"]["mine"]["command"].as_str(), Some("mine"));
    // Never armed.
    assert!(
        !after.contains("POISON") && !after.contains("evil"),
        "{after}"
    );
    for key in [
        "notify",
        "model_provider",
        "profiles",
        "shell_environment_policy",
    ] {
        assert!(doc.get(key).is_none(), "{key} reached the host: {after}");
    }
    assert!(doc["projects"].get("/").is_none(), "{after}");
    // Reported by name, never by value.
    let err = stderr(o);
    let report: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not kept: the run's changes"))
        .collect();
    assert_eq!(report.len(), 1, "{err}");
    for name in [
        "notify",
        " model_provider,",
        "mcp_servers.evil.command",
        "projects.\"/\".trust_level",
        "profiles.p.model_provider",
        "shell_environment_policy.inherit",
    ] {
        assert!(report[0].contains(name), "{name} not named: {}", report[0]);
    }
    assert!(!err.contains("POISON") && !err.contains("/bin/sh"), "{err}");
    // The session and the new login reached the real state directory; the stand-in is
    // gone.
    assert_eq!(
        std::fs::read_to_string(codex_home.join("sessions/2026/rollout.jsonl")).unwrap(),
        "session\n"
    );
    assert_eq!(
        std::fs::read_to_string(codex_home.join("auth.json")).unwrap(),
        "{\"new\": \"login\"}\n"
    );
    assert_no_stand_in(codex_home);
}

#[track_caller]
fn assert_no_stand_in(codex_home: &Path) {
    let left = stand_ins_in(codex_home);
    assert!(left.is_empty(), "{left:?}");
}

/// Codex's trust decision goes back to `~/.codex/config.toml` (for the run's folder only);
/// `notify`, MCP servers, profiles and shell environment settings written inside are
/// dropped and named; the user's concurrent edit and comments survive; sessions and login
/// written through `CODEX_HOME` land in `~/.codex`. The real file stays read-only inside.
#[test]
fn codex_remembers_project_trust_and_drops_what_could_run_code() {
    for_each_user(|w| {
        let config = w.write("home/.codex/config.toml", CODEX_HOST_CONFIG);
        w.write("home/.codex/auth.json", "{\"old\": \"login\"}\n");
        std::fs::create_dir(w.home.join(".codex/sessions")).unwrap();
        w.chown_all();
        let o = codex_merge_case(w, &config, &[]);
        let project = w.project.display().to_string();
        assert_codex_merged(&o, &config, &w.home.join(".codex"), &project);
        let meta = std::fs::metadata(&config).unwrap();
        assert_eq!(meta.uid(), w.user.uid);
        // The real file is never writable inside, by its name.
        let before = std::fs::read_to_string(&config).unwrap();
        let direct = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                &format!("echo 'notify = [\"x\"]' >> {}", config.display()),
            ],
            &[],
        );
        assert_ne!(direct.status.code(), Some(0));
        assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
    });
}

/// Another layout: `CODEX_HOME` elsewhere, its `config.toml` a dotfile manager's link.
/// The link stays and its target gets the trust; nothing lands in `~/.codex`.
#[test]
fn codex_trust_with_codex_home_elsewhere_and_a_linked_config() {
    for_each_user(|w| {
        let target = w.write("home/dotfiles/codex.toml", CODEX_HOST_CONFIG);
        let home = w.home.join("xdg/codex-home");
        std::fs::create_dir_all(&home).unwrap();
        let link = home.join("config.toml");
        std::os::unix::fs::symlink("../../dotfiles/codex.toml", &link).unwrap();
        std::fs::create_dir(home.join("sessions")).unwrap();
        w.write("home/xdg/codex-home/auth.json", "{}\n");
        w.chown_all();
        let env = [("CODEX_HOME", home.display().to_string())];
        let o = codex_merge_case(w, &target, &env);
        let project = w.project.display().to_string();
        assert_codex_merged(&o, &target, &home, &project);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            PathBuf::from("../../dotfiles/codex.toml")
        );
        assert!(!w.home.join(".codex").exists());
    });
}

/// A first launch: no `~/.codex` at all. Trust alone becomes the new config.toml; a run
/// that changes only forbidden keys leaves no config.toml behind.
#[test]
fn codex_first_launch_trust_creates_only_the_trust_entry() {
    for_each_user(|w| {
        let project = w.project.display().to_string();
        let poison_only = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                "echo 'notify = [\"/bin/sh\"]' >> \"$CODEX_HOME/config.toml\"",
            ],
            &[],
        );
        assert_code(&poison_only, 0, "poison only");
        let config = w.home.join(".codex/config.toml");
        assert!(!config.exists(), "{}", stderr(&poison_only));
        assert!(stderr(&poison_only).contains("changes to notify"));
        let trust = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                &format!(
                    "printf '[projects.\"{project}\"]\\ntrust_level = \"trusted\"\\n' > \"$CODEX_HOME/config.toml\""
                ),
            ],
            &[],
        );
        assert_code(&trust, 0, "trust");
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            format!("[projects.\"{project}\"]\ntrust_level = \"trusted\"\n")
        );
        assert!(
            !stderr(&trust).contains("not kept: the run's changes"),
            "{}",
            stderr(&trust)
        );
    });
}

/// Each run has its own stand-in `CODEX_HOME`: a run that starts and ends while another
/// is running leaves the other's alone. What a killed run left in its stand-in (a
/// session) is moved to `~/.codex` at the next launch; its config.toml is not applied.
#[test]
fn codex_concurrent_runs_keep_their_own_stand_in_and_a_killed_runs_state_is_recovered() {
    for_each_user(|w| {
        let config = w.write("home/.codex/config.toml", CODEX_HOST_CONFIG);
        // A killed run's leftovers (no such process).
        let stale = w.home.join(".codex/.sandy-codex-home-2147483647");
        w.write(
            "home/.codex/.sandy-codex-home-2147483647/config.toml",
            "notify = [\"x\"]\n",
        );
        w.write(
            "home/.codex/.sandy-codex-home-2147483647/history.jsonl",
            "old run\n",
        );
        let go = w.project.join("go");
        let mut first = w.sandy([
            "run",
            "--profile",
            "codex",
            "--",
            "/bin/sh",
            "-c",
            &format!(
                "touch {go}.started; while [ ! -e {go} ]; do sleep 0.05; done; \
                 cat \"$CODEX_HOME/config.toml\" >/dev/null && echo mine > \"$CODEX_HOME/state_first\"",
                go = go.display()
            ),
        ]);
        let mut child = first
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let collector = Collector::start(&mut child);
        let started = w.project.join("go.started");
        assert!(wait_for(30, || started.exists()), "the run did not start");
        assert!(!stale.exists(), "the killed run's stand-in is still there");
        assert_eq!(
            std::fs::read_to_string(w.home.join(".codex/history.jsonl")).unwrap(),
            "old run\n"
        );
        let second = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                "echo second > \"$CODEX_HOME/state_second\"",
            ],
            &[],
        );
        assert_code(&second, 0, "the second run");
        std::fs::write(&go, "").unwrap();
        let status = wait_timeout(&mut child, 60, "the first run");
        let o = collector.finish(status);
        assert_code(&o, 0, "the first run");
        for (name, text) in [("state_first", "mine\n"), ("state_second", "second\n")] {
            assert_eq!(
                std::fs::read_to_string(w.home.join(".codex").join(name)).unwrap(),
                text,
                "{name}"
            );
        }
        assert_eq!(std::fs::read_to_string(&config).unwrap(), CODEX_HOST_CONFIG);
        assert_no_stand_in(&w.home.join(".codex"));
    });
}

/// The sandbox replaces its stand-in `CODEX_HOME` with a link to a host directory it
/// cannot see (holding a config.toml that trusts the folder and a file): after the run
/// nothing is taken from there (what the stand-in itself held is, from the directory
/// wherever the run moved it), nothing there is removed, and the host config.toml keeps
/// its bytes.
#[test]
fn codex_a_stand_in_replaced_by_a_link_yields_nothing() {
    for_each_user(|w| {
        let config = w.write("home/.codex/config.toml", CODEX_HOST_CONFIG);
        let project = w.project.display().to_string();
        let outside = w.root.join("outside");
        w.write(
            "outside/config.toml",
            &format!("[projects.\"{project}\"]\ntrust_level = \"trusted\"\n"),
        );
        w.write("outside/victim", "victim\n");
        let o = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                &format!(
                    "mv \"$CODEX_HOME\" \"$CODEX_HOME.x\" && ln -s {} \"$CODEX_HOME\"",
                    outside.display()
                ),
            ],
            &[],
        );
        assert_code(&o, 0, "the replacing run");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), CODEX_HOST_CONFIG);
        assert!(!w.home.join(".codex/victim").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("victim")).unwrap(),
            "victim\n"
        );
        assert!(outside.join("config.toml").exists());
        assert!(
            stderr(&o).contains("moved its stand-in state directory away"),
            "{}",
            stderr(&o)
        );
        // Nothing of the run's is left: not the directory it moved, not its link.
        assert_no_stand_in(&w.home.join(".codex"));
    });
}

/// The dry run shows where Codex's private copy lives, what goes back and the directory
/// its stand-in mirrors, and creates nothing (no stand-in, no state directory).
#[test]
fn codex_dry_run_lists_its_state_file_and_creates_nothing() {
    for_each_user(|w| {
        let o = run(w, &["--dry-run", "--profile", "codex", "--", "true"], &[]);
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "codex dry run");
        let home = w.home.join(".codex").display().to_string();
        let files = doc["state_files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{doc}");
        let file = &files[0];
        assert_eq!(file["path"], json!(format!("{home}/config.toml")));
        assert_eq!(file["format"], json!("toml"));
        assert_eq!(file["stand_in_for"], json!(home));
        let copy = file["copy"].as_str().unwrap();
        assert!(
            copy.starts_with(&format!("{home}/.sandy-codex-home-"))
                && copy.ends_with("/config.toml"),
            "{copy}"
        );
        assert!(file["persist"]
            .as_array()
            .unwrap()
            .contains(&json!("projects.{project}.trust_level")));
        assert!(!file["persist"].to_string().contains("notify"));
        assert!(doc["environment"]["set"]
            .as_array()
            .unwrap()
            .contains(&json!("CODEX_HOME")));
        assert!(!w.home.join(".codex").exists());
    });
}

// ---------------------------------------------------------------------------------------
// Protected agent files: one row per item, judged from the host.

/// (profile, path below home, is a directory). Each exists at launch.
const PROTECTED: &[(&str, &str, bool)] = &[
    ("claude", ".claude/settings.json", false),
    ("claude", ".claude/settings.local.json", false),
    ("claude", ".claude/hooks", true),
    ("claude", ".claude/CLAUDE.md", false),
    ("claude", ".claude/skills", true),
    ("claude", ".claude/commands", true),
    ("claude", ".claude/agents", true),
    ("claude", ".claude/output-styles", true),
    ("claude", ".claude/plugins/cache", true),
    ("claude", ".claude/plugins/marketplaces", true),
    ("claude", ".claude/plugins/installed_plugins.json", false),
    ("claude", ".claude/plugins/known_marketplaces.json", false),
    ("claude", ".claude/.config.json", false),
    ("claude", "project/.claude/settings.json", false),
    ("claude", "project/.mcp.json", false),
    ("codex", ".codex/config.toml", false),
    ("codex", ".codex/hooks.json", false),
    ("codex", ".codex/AGENTS.md", false),
    ("codex", ".codex/AGENTS.override.md", false),
    ("codex", ".codex/prompts", true),
    ("codex", ".codex/rules", true),
    ("codex", ".codex/skills", true),
    ("codex", "project/.codex", true),
    ("gemini", ".gemini/settings.json", false),
    ("gemini", ".gemini/extensions", true),
    ("gemini", ".gemini/GEMINI.md", false),
    ("gemini", ".gemini/commands", true),
    ("gemini", ".gemini/policies", true),
    ("gemini", ".gemini/trustedFolders.json", false),
    ("gemini", ".gemini/.env", false),
    ("gemini", "project/.gemini/settings.json", false),
    ("opencode", ".config/opencode/opencode.json", false),
    ("opencode", ".config/opencode/opencode.jsonc", false),
    ("opencode", ".config/opencode/plugins", true),
    ("opencode", ".config/opencode/plugin", true),
    ("opencode", ".config/opencode/tool", true),
    ("opencode", ".config/opencode/tools", true),
    ("opencode", ".config/opencode/agent", true),
    ("opencode", ".config/opencode/agents", true),
    ("opencode", ".config/opencode/command", true),
    ("opencode", ".config/opencode/commands", true),
    ("opencode", ".config/opencode/mode", true),
    ("opencode", ".config/opencode/AGENTS.md", false),
    ("opencode", "project/opencode.json", false),
    ("opencode", "project/.opencode", true),
];

/// Every way the sandbox might try to change `path`, each allowed to fail.
fn attacks(path: &Path, dir: bool) -> String {
    let p = path.display();
    if dir {
        format!(
            "touch '{p}/planted'; mkdir '{p}/sub'; rm -rf '{p}'; mv '{p}' '{p}.moved'; \
             mkdir -p '{p}' && echo planted > '{p}/planted'; true"
        )
    } else {
        format!(
            "echo planted >> '{p}'; rm -f '{p}'; mv '{p}' '{p}.moved'; \
             echo planted > '{p}'; ln -sf /etc/hostname '{p}'; true"
        )
    }
}

fn protected_case(profile: &str, rel: &str, dir: bool) {
    for_each_user(|w| {
        let path = w.home.join(rel);
        let original = "{\"original\": true}\n";
        if dir {
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("kept.md"), original).unwrap();
        } else {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, original).unwrap();
        }
        w.chown_all();
        let o = run(
            w,
            &[
                "--profile",
                profile,
                "--",
                "/bin/sh",
                "-c",
                &attacks(&path, dir),
            ],
            &[],
        );
        assert_code(&o, 0, rel);
        let what = format!("{profile}: {rel}\nstderr: {}", stderr(&o));
        let meta = std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
        if dir {
            assert!(meta.is_dir(), "{what}");
            assert_eq!(
                listing(&path, Path::new("/nonexistent")),
                vec!["kept.md".to_owned()],
                "{what}"
            );
            assert_eq!(
                std::fs::read_to_string(path.join("kept.md")).unwrap(),
                original,
                "{what}"
            );
        } else {
            assert!(meta.is_file(), "{what}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), original, "{what}");
        }
        assert!(!w.home.join(format!("{rel}.moved")).exists(), "{what}");
    });
}

#[test]
fn every_protected_agent_file_is_unchanged_after_a_run_that_tried() {
    for (profile, rel, dir) in PROTECTED {
        eprintln!("== {profile}: {rel}");
        protected_case(profile, rel, *dir);
    }
}

/// The status line script and a hook script the settings name (by `~/` and by
/// `$CLAUDE_PROJECT_DIR`) cannot be rewritten; a script the settings do not name, in the
/// same directory, can (the positive side).
#[test]
fn scripts_the_claude_settings_name_are_protected() {
    for_each_user(|w| {
        let original = "#!/bin/sh\necho status\n";
        w.write(
            "home/.claude/settings.json",
            "{\"statusLine\": {\"type\": \"command\", \"command\": \"sh ~/.claude/statusline.sh\"}, \
             \"hooks\": {\"Stop\": [{\"hooks\": [{\"type\": \"command\", \
             \"command\": \"\\\"$CLAUDE_PROJECT_DIR\\\"/tools/stop.sh\"}]}]}}\n",
        );
        let status = w.write("home/.claude/statusline.sh", original);
        let hook = w.write("home/project/tools/stop.sh", original);
        // A script no setting names, where the run may write (the project); one in
        // ~/.claude is read-only anyway (default-deny agent state).
        let other = w.write("home/project/tools/other.sh", original);
        for (path, protected) in [(&status, true), (&hook, true), (&other, false)] {
            let o = run(
                w,
                &[
                    "--profile",
                    "claude",
                    "--",
                    "/bin/sh",
                    "-c",
                    &format!("echo 'echo planted' > '{}'", path.display()),
                ],
                &[],
            );
            let after = std::fs::read_to_string(path).unwrap();
            if protected {
                assert_ne!(o.status.code(), Some(0), "{}", path.display());
                assert_eq!(after, original, "{}", path.display());
            } else {
                assert_code(&o, 0, "an unnamed script");
                assert_eq!(after, "echo planted\n");
            }
        }
    });
}

/// Finding B: a dotfile manager's link. The name stays a link to the same file, and the
/// file it points to is unchanged. The profile emits the name; pinning a symlinked name is
/// the mount layer's part (issue 11, A2), not yet on this branch.
#[test]
fn a_protected_agent_file_behind_a_symlink_keeps_its_name_and_its_content() {
    for_each_user(|w| {
        let original = "{\"hooks\": {}}\n";
        let target = w.write("home/dotfiles/claude-settings.json", original);
        std::fs::create_dir(w.home.join(".claude")).unwrap();
        let link = w.home.join(".claude/settings.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        w.chown_all();
        let o = run(
            w,
            &[
                "--profile",
                "claude",
                "--",
                "/bin/sh",
                "-c",
                &attacks(&link, false),
            ],
            &[],
        );
        assert_code(&o, 0, "attacks");
        assert_eq!(std::fs::read_link(&link).unwrap(), target, "{}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), original);
    });
}

// ---------------------------------------------------------------------------------------
// Codex installed from npm in the home directory.

/// `npm install -g --prefix ~/.local @openai/codex`'s layout: `~/.local/bin/codex` links
/// into `~/.local/lib/node_modules/@openai/codex`, whose platform package
/// `@openai/codex-linux-x64` is a sibling. (Hard links of the installed copy: the layout
/// is what matters.)
#[test]
fn codex_from_an_npm_prefix_in_home_finds_its_platform_package() {
    let modules = Path::new(AGENTS_PREFIX).join("node_modules/@openai");
    if !modules.join("codex-linux-x64").is_dir() {
        skip("Codex is not installed; run scripts/install-agents.sh");
        return;
    }
    for_each_user(|w| {
        let prefix = w.home.join(".local");
        let scope = prefix.join("lib/node_modules/@openai");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        w.chown_all();
        for pkg in ["codex", "codex-linux-x64"] {
            let st = Command::new("cp")
                .arg("-al")
                .arg(modules.join(pkg))
                .arg(&scope)
                .status()
                .unwrap();
            assert!(st.success());
        }
        std::os::unix::fs::symlink(
            "../lib/node_modules/@openai/codex/bin/codex.js",
            prefix.join("bin/codex"),
        )
        .unwrap();
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            prefix.join("bin").display()
        );
        let o = run(w, &["--", "codex", "--version"], &[("PATH", path.clone())]);
        assert_code(&o, 0, "codex --version");
        assert!(stdout(&o).contains("codex-cli"), "{}", stdout(&o));
        // No notice about Codex's own sandbox: --version starts none.
        assert!(!stderr(&o).contains("own sandbox"), "{}", stderr(&o));
        // Nor for `exec`: inside, Codex's configuration says danger-full-access; only a
        // sandbox mode asked for on the command line is explained.
        let asked = run(
            w,
            &[
                "--dry-run",
                "--",
                "codex",
                "exec",
                "-s",
                "workspace-write",
                "hi",
            ],
            &[("PATH", path.clone())],
        );
        assert!(stderr(&asked).contains("own sandbox"), "{}", stderr(&asked));
        let exec = run(
            w,
            &["--dry-run", "--", "codex", "exec", "hi"],
            &[("PATH", path)],
        );
        assert!(!stderr(&exec).contains("own sandbox"), "{}", stderr(&exec));
        let doc = parse_dry_run(&exec.stdout, "codex dry run");
        let platform = scope.join("codex-linux-x64").display().to_string();
        assert!(
            doc["file_grants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["path"] == json!(platform) && g["access"] == json!("read_exec")),
            "{}",
            doc["file_grants"]
        );
        // The copies are hard links of the installed files: removed before the world is,
        // never handed to the test user.
        std::fs::remove_dir_all(prefix.join("lib")).unwrap();
    });
}

/// Gemini CLI's settings are remembered for the preferences the user changes, and never
/// for what could make a later launch run code or take instructions.
#[test]
fn gemini_settings_keep_preferences_and_drop_what_could_run_code() {
    for_each_user(|w| {
        let settings = w.write(
            "home/.gemini/settings.json",
            "{\"ui\": {\"theme\": \"Default\"}, \"general\": {\"preferredEditor\": \"vim\"}}\n",
        );
        let writer = w.write(
            "home/project/gemini_writer.py",
            "import json, os\n\
             p = os.path.expanduser('~/.gemini/settings.json')\n\
             d = json.load(open(p))\n\
             d['ui']['theme'] = 'Dracula'\n\
             d['model'] = {'name': 'gemini-2.5-pro'}\n\
             d['general'] = {'preferredEditor': 'POISON-editor', 'vimMode': True}\n\
             d['mcpServers'] = {'evil': {'command': 'POISON'}}\n\
             d['tools'] = {'discoveryCommand': 'POISON'}\n\
             d['hooks'] = {'BeforeTool': []}\n\
             open(p, 'w').write(json.dumps(d))\n",
        );
        let o = w
            .sandy([
                "run",
                "--profile",
                "gemini",
                "--",
                PYTHON,
                writer.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "the settings writer");
        let after: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        assert_eq!(after["ui"]["theme"], json!("Dracula"), "{after}");
        assert_eq!(after["model"]["name"], json!("gemini-2.5-pro"), "{after}");
        assert_eq!(after["general"]["vimMode"], json!(true), "{after}");
        assert_eq!(after["general"]["preferredEditor"], json!("vim"), "{after}");
        for key in ["mcpServers", "tools", "hooks"] {
            assert!(after.get(key).is_none(), "{key} reached the host: {after}");
        }
        let err = stderr(&o);
        assert!(err.contains("not kept: the run's changes"), "{err}");
        for name in [
            "mcpServers.evil",
            "general.preferredEditor",
            "tools.discoveryCommand",
        ] {
            assert!(err.contains(name), "{name} not named: {err}");
        }
        assert!(!err.contains("POISON"), "{err}");
    });
}

// ---------------------------------------------------------------------------------------
// Every agent's launch configuration, in every run.

/// Every profile's project-level names (`dir`: a directory), which no run may change,
/// whatever its profile.
const PROJECT_AGENT_FILES: &[(&str, bool)] = &[
    (".claude/settings.json", false),
    (".claude/settings.local.json", false),
    (".mcp.json", false),
    (".codex", true),
    (".gemini/settings.json", false),
    (".gemini/.env", false),
    (".gemini/policies", true),
    ("opencode.json", false),
    ("opencode.jsonc", false),
    (".opencode", true),
];

/// Creates each of `files` under `base` with its original content.
fn plant_originals(base: &Path, files: &[(&str, bool)]) {
    for (rel, dir) in files {
        let path = base.join(rel);
        if *dir {
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("kept.md"), "{\"original\": true}\n").unwrap();
        } else {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "{\"original\": true}\n").unwrap();
        }
    }
}

#[track_caller]
fn assert_originals(base: &Path, files: &[(&str, bool)], what: &str) {
    for (rel, dir) in files {
        let path = base.join(rel);
        let file = if *dir {
            path.join("kept.md")
        } else {
            path.clone()
        };
        let meta =
            std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{what}: {rel}: {e}"));
        assert_eq!(meta.is_dir(), *dir, "{what}: {rel}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "{\"original\": true}\n",
            "{what}: {rel}"
        );
        if *dir {
            assert_eq!(
                listing(&path, Path::new("/nonexistent")),
                vec!["kept.md".to_owned()],
                "{what}: {rel}"
            );
        }
        assert!(!base.join(format!("{rel}.moved")).exists(), "{what}: {rel}");
    }
}

/// A generic run (`make`, here `sh`) and a Claude Code run cannot change any agent's
/// project-level launch configuration (Codex's, Gemini CLI's, OpenCode's included), judged
/// on the host; the project's other files stay writable (the positive side).
#[test]
fn no_run_changes_any_agents_project_files_whatever_its_profile() {
    for_each_user(|w| {
        plant_originals(&w.project, PROJECT_AGENT_FILES);
        w.chown_all();
        let script: String = PROJECT_AGENT_FILES
            .iter()
            .map(|(rel, dir)| attacks(&w.project.join(rel), *dir))
            .chain(std::iter::once("echo ok > ordinary.txt".to_owned()))
            .collect::<Vec<_>>()
            .join("; ");
        for profile in [None, Some("claude")] {
            let _ = std::fs::remove_file(w.project.join("ordinary.txt"));
            let mut args = Vec::new();
            if let Some(p) = profile {
                args.extend(["--profile", p]);
            }
            args.extend(["--", "/bin/sh", "-c", &script]);
            let o = run(w, &args, &[]);
            let what = format!("{profile:?}\nstderr: {}", stderr(&o));
            assert_code(&o, 0, &what);
            assert_originals(&w.project, PROJECT_AGENT_FILES, &what);
            assert_eq!(
                std::fs::read_to_string(w.project.join("ordinary.txt")).unwrap(),
                "ok\n",
                "{what}"
            );
        }
    });
}

/// The top of a `--read-write` grant is a directory an agent may later be started in: its
/// agent files are as read-only as the project's, whatever the profile, while the rest of
/// the grant stays writable.
#[test]
fn agent_files_at_the_top_of_a_read_write_grant_are_read_only() {
    for_each_user(|w| {
        let other = w.home.join("other");
        plant_originals(&other, PROJECT_AGENT_FILES);
        w.chown_all();
        let script: String = PROJECT_AGENT_FILES
            .iter()
            .map(|(rel, dir)| attacks(&other.join(rel), *dir))
            .chain(std::iter::once(format!(
                "echo ok > '{}'",
                other.join("ordinary.txt").display()
            )))
            .collect::<Vec<_>>()
            .join("; ");
        let grant = other.display().to_string();
        for profile in [None, Some("claude")] {
            let mut args = vec!["--read-write", grant.as_str()];
            if let Some(p) = profile {
                args.extend(["--profile", p]);
            }
            args.extend(["--", "/bin/sh", "-c", &script]);
            let o = run(w, &args, &[]);
            let what = format!("{profile:?}\nstderr: {}", stderr(&o));
            assert_code(&o, 0, &what);
            assert_originals(&other, PROJECT_AGENT_FILES, &what);
            assert_eq!(
                std::fs::read_to_string(other.join("ordinary.txt")).unwrap(),
                "ok\n",
                "{what}"
            );
        }
    });
}

/// A package of a monorepo where an agent may be started later: its agent files are as
/// read-only as the project's when they exist at launch, and a run that makes them in
/// another package is named; a package installed in `node_modules` that ships its own
/// `.claude/` stays the install's to replace.
#[test]
fn agent_files_of_a_package_in_the_project_are_protected_or_named() {
    for_each_user(|w| {
        let app = w.project.join("packages/app");
        let installed = w.project.join("node_modules/x/.claude/settings.json");
        let original = "{}\n";
        w.write("home/project/packages/app/.claude/settings.json", original);
        w.write(
            "home/project/node_modules/x/.claude/settings.json",
            original,
        );
        std::fs::create_dir_all(w.project.join("packages/lib")).unwrap();
        w.chown_all();
        let script = format!(
            "{}; mkdir -p packages/lib/.claude; echo '{{}}' > packages/lib/.claude/settings.json; \
             echo changed > '{}'",
            attacks(&app.join(".claude/settings.json"), false),
            installed.display()
        );
        let o = run(w, &["--", "/bin/sh", "-c", &script], &[]);
        let what = stderr(&o);
        assert_code(&o, 0, &what);
        assert_eq!(
            std::fs::read_to_string(app.join(".claude/settings.json")).unwrap(),
            original,
            "{what}"
        );
        assert_eq!(std::fs::read_to_string(&installed).unwrap(), "changed\n");
        let lib = std::fs::canonicalize(w.project.join("packages/lib")).unwrap();
        let want = format!(
            "{} holds an agent's launch configuration made inside",
            lib.display()
        );
        assert!(what.contains(&want), "{want} not said:\n{what}");
        assert!(!what.contains("node_modules"), "{what}");
    });
}

/// A package directory without subdirectories holding a lone launch file (`.mcp.json`,
/// `opencode.json`): the walk lists it like any other, so the file is as read-only as
/// the project's own; a file of the same package that no agent reads stays writable.
#[test]
fn a_lone_launch_file_in_a_package_without_subdirectories_is_protected() {
    for_each_user(|w| {
        let original = "{\"mcpServers\": {}}\n";
        let mcp = w.write("home/project/packages/tool/.mcp.json", original);
        let opencode = w.write("home/project/packages/cli/opencode.json", original);
        let other = w.write("home/project/packages/tool/index.js", original);
        w.chown_all();
        let script = format!(
            "{}; {}; echo changed > '{}'",
            attacks(&mcp, false),
            attacks(&opencode, false),
            other.display()
        );
        let o = run(w, &["--", "/bin/sh", "-c", &script], &[]);
        let what = stderr(&o);
        assert_code(&o, 0, &what);
        for file in [&mcp, &opencode] {
            assert_eq!(
                std::fs::read_to_string(file).unwrap(),
                original,
                "{}: {what}",
                file.display()
            );
        }
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "changed\n");
    });
}

/// A dotfile manager's link: `~/.claude/settings.json` points into a dotfiles repository,
/// and the repository is the project of a generic run. Neither through the link nor by
/// its target's own name can the run rewrite the user's global Claude Code settings;
/// a file of the repository that no agent reads stays writable.
#[test]
fn a_generic_run_in_a_dotfiles_project_cannot_rewrite_a_linked_agent_setting() {
    for_each_user(|w| {
        let original = "{\"hooks\": {}}\n";
        let target = w.write("home/project/claude/settings.json", original);
        std::fs::create_dir(w.home.join(".claude")).unwrap();
        let link = w.home.join(".claude/settings.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let other = w.write("home/project/claude/notes.md", original);
        w.chown_all();
        let script = format!(
            "{}; {}; echo changed > '{}'",
            attacks(&link, false),
            attacks(&target, false),
            other.display()
        );
        let o = run(w, &["--", "/bin/sh", "-c", &script], &[]);
        let what = stderr(&o);
        assert_code(&o, 0, &what);
        assert_eq!(std::fs::read_link(&link).unwrap(), target, "{what}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            original,
            "{what}"
        );
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "changed\n");
        // The dry run names it, with the profile it comes from.
        let o = run(w, &["--dry-run", "--", "/bin/true"], &[]);
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run");
        let entry = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == json!(link.display().to_string()))
            .unwrap_or_else(|| panic!("{doc}"));
        assert_eq!(entry["origin"], json!("profile"));
        assert_eq!(entry["exists"], json!(true));
        assert!(entry["reason"]
            .as_str()
            .unwrap()
            .starts_with("claude profile, applied to every run: "));
    });
}

/// The scripts a project's Claude Code hooks name, whatever the command's shape (`cd ...
/// && sh`, `bash -c '...'`, `npx tsx`, `uv run`, after `;`), cannot be rewritten by any
/// run; a script no hook names can (the positive side). A protected name the run creates
/// is named after it.
#[test]
fn every_script_a_project_hook_names_is_protected_in_any_run() {
    for_each_user(|w| {
        let original = "#!/bin/sh\necho hook\n";
        let commands = [
            "$CLAUDE_PROJECT_DIR/.claude/hooks/a.sh",
            "cd \"$CLAUDE_PROJECT_DIR\" && sh .claude/hooks/b.sh",
            "bash -c '.claude/hooks/c.sh'",
            "npx tsx .claude/hooks/d.sh",
            "uv run .claude/hooks/e.py",
            "test -f x; .claude/hooks/f.sh",
        ];
        let hooks: Vec<Value> = commands
            .iter()
            .map(|c| json!({"type": "command", "command": c}))
            .collect();
        w.write(
            "home/project/.claude/settings.json",
            &json!({"hooks": {"PreToolUse": [{"matcher": "", "hooks": hooks}]}}).to_string(),
        );
        let scripts: Vec<PathBuf> = ["a.sh", "b.sh", "c.sh", "d.sh", "e.py", "f.sh"]
            .iter()
            .map(|s| w.write(format!("home/project/.claude/hooks/{s}"), original))
            .collect();
        let unnamed = w.write("home/project/.claude/hooks/unnamed.sh", original);
        for profile in [None, Some("claude"), Some("codex")] {
            let script: String = scripts
                .iter()
                .chain([&unnamed])
                .map(|p| format!("echo 'echo planted' > '{}'", p.display()))
                .collect::<Vec<_>>()
                .join("; ");
            let mut args = Vec::new();
            if let Some(p) = profile {
                args.extend(["--profile", p]);
            }
            args.extend(["--", "/bin/sh", "-c", &script]);
            let o = run(w, &args, &[]);
            let what = format!("{profile:?}\nstderr: {}", stderr(&o));
            for s in &scripts {
                assert_eq!(
                    std::fs::read_to_string(s).unwrap(),
                    original,
                    "{what}: {s:?}"
                );
            }
            assert_eq!(
                std::fs::read_to_string(&unnamed).unwrap(),
                "echo planted\n",
                "{what}"
            );
            std::fs::write(&unnamed, original).unwrap();
        }
        // Absent at launch: not mounted, and named after the run that created it.
        let o = run(
            w,
            &["--", "/bin/sh", "-c", "echo '{}' > opencode.jsonc"],
            &[],
        );
        assert_code(&o, 0, "create opencode.jsonc");
        let created = w.project.join("opencode.jsonc");
        assert!(
            stderr(&o).contains(&format!(
                "sandy: warning: {} did not exist at launch",
                created.display()
            )),
            "{}",
            stderr(&o)
        );
    });
}

/// OpenCode's cache (where it downloads `rg` and language servers, and installs its npm
/// plugins, all of which its next launch runs) is copy-on-write, with a layer per project:
/// from its first launch, a run's downloads stay in Sandy's layer for this project, the
/// host directory never changes, another project's run never sees them, and a program
/// put in its `bin` does not even stay in the layer. Judged from the host.
#[test]
fn opencode_downloads_are_copy_on_write_and_each_projects_own() {
    for_each_user(|w| {
        let cache = w.home.join(".cache/opencode");
        let plant = "mkdir -p ~/.cache/opencode/bin ~/.cache/opencode/node_modules/p && \
                     printf '#!/bin/sh\\ntouch /tmp/x\\n' > ~/.cache/opencode/bin/rg && \
                     echo 'module.exports = 1' > ~/.cache/opencode/node_modules/p/index.js";
        // The first launch: the cache is created (empty) on the host, and overlaid.
        let o = run(
            w,
            &["--profile", "opencode", "--", "/bin/sh", "-c", plant],
            &[],
        );
        assert_code(&o, 0, "the planting run");
        assert!(cache.is_dir());
        assert_eq!(listing(&cache, &w.project), Vec::<String>::new());
        let err = stderr(&o);
        assert!(
            err.contains(&format!("removed {}", cache.join("bin").display())),
            "{err}"
        );
        // This project's next run keeps the download, not the program.
        let o = run(
            w,
            &[
                "--profile",
                "opencode",
                "--",
                "/bin/sh",
                "-c",
                "cat ~/.cache/opencode/node_modules/p/index.js; ls ~/.cache/opencode",
            ],
            &[],
        );
        assert_code(&o, 0, "the next run");
        assert_eq!(stdout(&o), "module.exports = 1\nnode_modules\n");
        // Another project's run sees the host's (empty) cache.
        let other = w.home.join("other");
        std::fs::create_dir_all(&other).unwrap();
        w.chown_all();
        let mut cmd = w.sandy([
            "run",
            "--profile",
            "opencode",
            "--",
            "/bin/sh",
            "-c",
            "ls -A ~/.cache/opencode; echo end",
        ]);
        cmd.current_dir(&other);
        let o = run_timeout(cmd, 120);
        assert_code(&o, 0, "another project's run");
        assert_eq!(stdout(&o), "end\n");
        assert_eq!(listing(&cache, &w.project), Vec::<String>::new());
    });
}

/// Agent state is default-deny (issue 35): inside each profile's state directories only
/// what the real agent writes in ordinary use is writable. A name Sandy does not know is
/// read-only when it exists, and moved out (and named) when a run creates it; the
/// memory of the run's own folder stays writable and every change is named with its
/// restore; another folder's memory is read-only. Judged from the host.
#[test]
fn agent_state_is_default_deny() {
    for_each_user(|w| {
        let key = std::fs::canonicalize(&w.project)
            .unwrap()
            .display()
            .to_string()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        w.write("home/.claude/rules/house.md", "be nice\n");
        w.write("home/.claude/unknown-name", "original\n");
        w.write(
            "home/.claude/projects/-elsewhere/memory/MEMORY.md",
            "theirs\n",
        );
        w.write(
            format!("home/.claude/projects/{key}/memory/MEMORY.md"),
            "mine\n",
        );
        w.write("home/.codex/sessions/.keep", "");
        w.write("home/.gemini/tmp/.keep", "");
        let script = format!(
            "echo evil >> ~/.claude/rules/house.md; echo rules=$?; \
             echo evil > ~/.claude/unknown-name; echo unknown=$?; \
             echo evil > ~/.claude/projects/-elsewhere/memory/MEMORY.md; echo elsewhere=$?; \
             echo more >> ~/.claude/projects/{key}/memory/MEMORY.md; echo memory=$?; \
             echo line >> ~/.claude/history.jsonl; echo history=$?; \
             mkdir -p ~/.claude/workflows && echo evil > ~/.claude/workflows/w.md; echo new=$?"
        );
        let o = run(
            w,
            &["--profile", "claude", "--", "/bin/sh", "-c", &script],
            &[],
        );
        assert_code(&o, 0, "the claude run");
        let out = stdout(&o);
        let err = stderr(&o);
        for key in ["rules", "unknown", "elsewhere"] {
            assert_failed(&out, key);
        }
        for key in ["memory", "history", "new"] {
            assert_field(&out, key, "0");
        }
        let claude = w.home.join(".claude");
        let read = |p: &str| std::fs::read_to_string(claude.join(p)).unwrap();
        assert_eq!(read("rules/house.md"), "be nice\n");
        assert_eq!(read("unknown-name"), "original\n");
        assert_eq!(read("projects/-elsewhere/memory/MEMORY.md"), "theirs\n");
        assert_eq!(read("history.jsonl"), "line\n");
        assert!(!claude.join("workflows").exists(), "{err}");
        assert!(
            err.contains(&format!("moved {}", claude.join("workflows").display())),
            "{err}"
        );
        let memory = claude.join(format!("projects/{key}/memory/MEMORY.md"));
        assert_eq!(std::fs::read_to_string(&memory).unwrap(), "mine\nmore\n");
        assert!(
            err.contains(&format!("{} was changed", memory.display()))
                && err.contains("sandy restore"),
            "{err}"
        );
        // `sandy restore` undoes the memory change.
        let o = w.sandy(["restore", &restore_run(&err)]).output().unwrap();
        assert_code(&o, 0, "sandy restore");
        assert_eq!(std::fs::read_to_string(&memory).unwrap(), "mine\n");

        // Codex: a `.env` it would load at its next start is never kept.
        let o = run(
            w,
            &[
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                "echo 'BASH_ENV=/tmp/x' > \"$CODEX_HOME/.env\"; echo s > \"$CODEX_HOME/sessions/s\"",
            ],
            &[],
        );
        assert_code(&o, 0, "the codex run");
        assert!(!w.home.join(".codex/.env").exists(), "{}", stderr(&o));
        assert!(w.home.join(".codex/sessions/s").exists(), "{}", stderr(&o));
        // Gemini: skills and agents it would load are moved out.
        let o = run(
            w,
            &[
                "--profile",
                "gemini",
                "--",
                "/bin/sh",
                "-c",
                "mkdir -p ~/.gemini/skills/x ~/.gemini/agents && echo a > ~/.gemini/agents/a.md && echo t > ~/.gemini/tmp/t",
            ],
            &[],
        );
        assert_code(&o, 0, "the gemini run");
        let gemini = w.home.join(".gemini");
        assert!(!gemini.join("skills").exists() && !gemini.join("agents").exists());
        assert!(gemini.join("tmp/t").exists());
    });
}

/// A login may be refreshed inside, but a run that signs the agent in to another account
/// has the login from before the run put back, and says so: Codex's ChatGPT account and
/// its API key (also when the run replaces the link Codex's stand-in directory holds),
/// Gemini's Google account, OpenCode's provider key. A first login made inside stays
/// (the ordinary first launch).
#[test]
fn a_login_for_another_account_is_put_back_and_a_refresh_is_kept() {
    for_each_user(|w| {
        let codex_auth = |account: &str, token: &str| {
            format!(
                r#"{{"OPENAI_API_KEY":null,"tokens":{{"account_id":"{account}","access_token":"{token}"}}}}"#
            )
        };
        w.write("home/.codex/auth.json", &codex_auth("acc-1", "old"));
        w.write(
            "home/.gemini/google_accounts.json",
            r#"{"active":"me@example.com","old":[]}"#,
        );
        w.write(
            "home/.local/share/opencode/auth.json",
            r#"{"anthropic":{"type":"api","key":"k-mine"}}"#,
        );
        let auth = w.home.join(".codex/auth.json");
        // A Codex run that writes `json` as its login, after `first` (a shell command).
        let codex_login = |first: &str, json: &str| {
            let script = format!("{first}printf '%s' '{json}' > \"$CODEX_HOME/auth.json\"");
            run(
                w,
                &["--profile", "codex", "--", "/bin/sh", "-c", &script],
                &[],
            )
        };
        // A refresh of the same account is kept, and named.
        let o = codex_login("", &codex_auth("acc-1", "new"));
        assert_code(&o, 0, "a refresh");
        assert_eq!(
            std::fs::read_to_string(&auth).unwrap(),
            codex_auth("acc-1", "new")
        );
        let err = stderr(&o);
        assert!(
            err.contains(&format!("note: {} was changed", auth.display())),
            "{err}"
        );
        // Another ChatGPT account written through the stand-in's link to the real file,
        // the same in place of that link, then an API key in place of the account: the
        // login from before the run is what stays.
        for (replace, other) in [
            ("", codex_auth("acc-evil", "t")),
            (
                "rm \"$CODEX_HOME/auth.json\"; ",
                codex_auth("acc-evil", "t"),
            ),
            ("", r#"{"OPENAI_API_KEY":"sk-evil"}"#.to_owned()),
        ] {
            let o = codex_login(replace, &other);
            assert_code(&o, 0, "another account");
            assert_eq!(
                std::fs::read_to_string(&auth).unwrap(),
                codex_auth("acc-1", "new"),
                "{}",
                stderr(&o)
            );
            let err = stderr(&o);
            assert!(
                err.contains(&format!(
                    "refused: the run signed {} in to another account",
                    auth.display()
                )),
                "{err}"
            );
            assert!(!err.contains("\x1b"), "{err}");
        }
        // Gemini's active Google account, and OpenCode's provider key: another one
        // written by the run is put back, and said so.
        for (profile, file, mine, theirs) in [
            (
                "gemini",
                ".gemini/google_accounts.json",
                r#"{"active":"me@example.com","old":[]}"#,
                r#"{"active":"evil@example.com","old":[]}"#,
            ),
            (
                "opencode",
                ".local/share/opencode/auth.json",
                r#"{"anthropic":{"type":"api","key":"k-mine"}}"#,
                r#"{"anthropic":{"type":"api","key":"k-evil"}}"#,
            ),
        ] {
            let script = format!("printf '%s' '{theirs}' > ~/{file}");
            let o = run(
                w,
                &["--profile", profile, "--", "/bin/sh", "-c", &script],
                &[],
            );
            assert_code(&o, 0, profile);
            assert_eq!(
                std::fs::read_to_string(w.home.join(file)).unwrap(),
                mine,
                "{}",
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("refused: the run signed"),
                "{}",
                stderr(&o)
            );
        }
        // A first login inside (no login at launch) stays.
        std::fs::remove_file(&auth).unwrap();
        let o = codex_login("", &codex_auth("acc-2", "t"));
        assert_code(&o, 0, "a first login");
        assert_eq!(
            std::fs::read_to_string(&auth).unwrap(),
            codex_auth("acc-2", "t")
        );
        assert!(!stderr(&o).contains("refused"), "{}", stderr(&o));
    });
}

/// Claude Code's `projects` holds a folder per project ever opened. Only the run's own
/// folder is writable (its sessions, and its memory, whose changes are named); every other
/// folder's sessions and memory are read-only, with one mount for all of them once the
/// run's folder exists. At the first run in a folder (none yet) Claude Code can create
/// it, and nothing else there. Nothing that existed is moved out.
#[test]
fn claude_projects_only_the_runs_own_folder_is_writable() {
    for_each_user(|w| {
        let key = std::fs::canonicalize(&w.project)
            .unwrap()
            .display()
            .to_string()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        for i in 0..30 {
            w.write(
                format!("home/.claude/projects/-other-{i}/memory/MEMORY.md"),
                "theirs\n",
            );
            w.write(format!("home/.claude/projects/-other-{i}/s.jsonl"), "old\n");
        }
        let script = format!(
            "mkdir -p ~/.claude/projects/{key}/memory; echo first=$?; \
             echo s > ~/.claude/projects/{key}/s.jsonl; echo own=$?; \
             echo x >> ~/.claude/projects/-other-3/s.jsonl; echo other=$?; \
             echo x > ~/.claude/projects/-other-3/memory/MEMORY.md; echo other_memory=$?; \
             mkdir ~/.claude/projects/-planted; echo planted=$?"
        );
        // The first run here: the folder is made by the agent.
        let o = run(
            w,
            &["--profile", "claude", "--", "/bin/sh", "-c", &script],
            &[],
        );
        assert_code(&o, 0, "the first run");
        let out = stdout(&o);
        for field in ["first", "own"] {
            assert_field(&out, field, "0");
        }
        for field in ["other", "other_memory"] {
            assert_failed(&out, field);
        }
        let projects = w.home.join(".claude/projects");
        // A planted folder is moved out after the run (one is made only at the first run).
        assert!(!projects.join("-planted").exists(), "{}", stderr(&o));
        // Later runs: one mount for `projects`, the run's folder writable on top.
        let o = w
            .sandy(["run", "--dry-run", "--profile", "claude", "--", "true"])
            .output()
            .unwrap();
        let doc = parse_dry_run(&o.stdout, "dry run");
        let protected: Vec<&str> = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["path"].as_str())
            .filter(|p| p.contains("/.claude/projects"))
            .collect();
        assert_eq!(protected, [projects.display().to_string()], "{protected:?}");
        let o = run(
            w,
            &["--profile", "claude", "--", "/bin/sh", "-c", &script],
            &[],
        );
        assert_code(&o, 0, "a later run");
        let out = stdout(&o);
        assert_field(&out, "own", "0");
        for field in ["other", "other_memory", "planted"] {
            assert_failed(&out, field);
        }
        for i in 0..30 {
            let other = projects.join(format!("-other-{i}"));
            assert_eq!(
                std::fs::read_to_string(other.join("s.jsonl")).unwrap(),
                "old\n"
            );
            assert_eq!(
                std::fs::read_to_string(other.join("memory/MEMORY.md")).unwrap(),
                "theirs\n"
            );
        }
        assert_eq!(
            std::fs::read_to_string(projects.join(&key).join("s.jsonl")).unwrap(),
            "s\n"
        );
        assert!(!stderr(&o).contains("moved"), "{}", stderr(&o));
    });
}

/// A state directory Sandy cannot create (its parent owned by root after a `sudo`
/// install) stops the launch with one line that names the directory, the parent that
/// refused, whose it is and its mode: what the user needs to fix it. The directories made
/// before it are removed again: nothing is left half-done.
#[test]
fn an_uncreatable_state_directory_names_the_parent_and_its_owner() {
    for_each_user(|w| {
        let local = w.home.join(".local");
        std::fs::create_dir_all(&local).unwrap();
        w.chown_all();
        std::os::unix::fs::chown(&local, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&local, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let o = run(w, &["--profile", "opencode", "--", "/bin/true"], &[]);
        if w.user.uid == 0 {
            assert_code(&o, 0, "root may create it");
            return;
        }
        assert_code(&o, 125, "an uncreatable state directory");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        // The home is shown as `~` (issue 41, item 11).
        assert!(
            err.contains(
                "cannot create the agent's state directory ~/.local/share/opencode: \
                 ~/.local is not writable to you (owned by root, mode 0755)"
            ),
            "{err}"
        );
        assert!(!w.home.join(".config/opencode").exists(), "left half-done");
        assert!(!w.home.join(".local/share").exists(), "left half-done");
    });
}
