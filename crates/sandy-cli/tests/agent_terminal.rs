#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Interactive agent sessions in a real terminal (tmux), against the local model API
//! stand-in, judged from the host: the first launch (Sandy creates the state directory,
//! the agent asks its first-run questions), a second launch that remembers the answers
//! (no trust prompt), and a poisoned write that is dropped and reported after the run.
//!
//! Codex saves trust in `config.toml`, which it rewrites by renaming a temporary file
//! over it: inside, `CODEX_HOME` is a stand-in directory holding a private copy, and only
//! the trust decision goes back to the host file.
//!
//! Needs tmux and the agent CLIs (`scripts/install-agents.sh`); without them, a reported
//! skip (a failure in CI).
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn ready() -> Option<PathBuf> {
    let bin = agents_bin(&["claude", "codex"])?;
    if Command::new("tmux").arg("-V").output().is_err() {
        skip("tmux is not installed");
        return None;
    }
    Some(bin)
}

/// One tmux session running a script, on a tmux server of its own (`-L`): tests run
/// side by side, and a `new-session` that reaches a shared server while another test's
/// last session ends it fails ("server exited unexpectedly"). Killed when dropped.
struct Tmux {
    name: String,
}

impl Tmux {
    /// `tmux` on this session's own server.
    fn tmux(name: &str) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", name]);
        c
    }

    fn start(script: &Path) -> Tmux {
        let name = unique("sandy-tmux");
        let st = Self::tmux(&name)
            .args(["new-session", "-d", "-s", &name, "-x", "160", "-y", "50"])
            .arg(format!(
                "{}; echo SESSION-EXIT=$?; sleep 600",
                script.display()
            ))
            .status()
            .unwrap();
        assert!(st.success());
        Tmux { name }
    }

    /// The whole scroll-back, wrapped lines joined.
    fn screen(&self) -> String {
        let o = Self::tmux(&self.name)
            .args(["capture-pane", "-p", "-J", "-S", "-1000", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let st = Self::tmux(&self.name)
                .args(["send-keys", "-t", &self.name, k])
                .status()
                .unwrap();
            assert!(st.success());
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn type_line(&self, text: &str) {
        let st = Self::tmux(&self.name)
            .args(["send-keys", "-t", &self.name, "-l", text])
            .status()
            .unwrap();
        assert!(st.success());
        std::thread::sleep(Duration::from_millis(400));
        self.keys(&["Enter"]);
    }

    /// Waits until the screen shows `text`; panics with the screen after `secs`.
    #[track_caller]
    fn expect(&self, text: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                // Let the screen that shows it start reading keys.
                std::thread::sleep(Duration::from_millis(1000));
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited {secs}s for {text:?}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Self::tmux(&self.name).arg("kill-server").status();
    }
}

/// A script that runs `sandy run -- ARGS` in the project as the test user, with a clean
/// environment plus `env`.
fn launcher(w: &World, bin: &Path, args: &str, env: &[(&str, String)]) -> PathBuf {
    let mut vars: Vec<String> = vec![
        "TERM=xterm-256color".into(),
        format!("PATH={}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        format!("HOME={}", w.home.display()),
        format!("TMPDIR={}", w.tmp.display()),
        "LANG=C.UTF-8".into(),
    ];
    vars.extend(env.iter().map(|(k, v)| format!("{k}='{v}'")));
    let drop_privileges = w.setpriv_prefix();
    let script = format!(
        "#!/bin/sh\ncd '{}' || exit 99\nexec {drop_privileges}env -i {} '{}' run -- {args}\n",
        w.project.display(),
        vars.join(" "),
        sandy_bin().display()
    );
    let path = w.root.join(format!("{}.sh", unique("launch")));
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// The stand-in model API, run on the host as the test user; killed when dropped.
struct Api {
    _child: Reaped,
    port: u16,
}

fn api(w: &World, final_text: &str) -> Api {
    let dir = w.root.join(unique("api"));
    std::fs::create_dir(&dir).unwrap();
    let helper = dir.join("fake_model_api.py");
    std::fs::write(&helper, helper_text("fake_model_api.py")).unwrap();
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!({"steps": [], "final": final_text}).to_string(),
    )
    .unwrap();
    w.chown_all();
    let mut cmd = w.host(PYTHON);
    cmd.arg(&helper).arg(&dir).arg(&script);
    let (child, info) = start_announcing(cmd, "the fake model API");
    Api {
        _child: child,
        port: u16::try_from(info["port"].as_u64().unwrap()).unwrap(),
    }
}

fn host_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

// ---------------------------------------------------------------------------------------
// Claude Code.

const CLAUDE_ANSWER: &str = "hello from the stand-in";
const CLAUDE_TRUST: &str = "Yes, I trust this folder";
const CLAUDE_KEY: &str = "Do you want to use this API key?";
const CLAUDE_API_KEY: &str = "sk-ant-sandy-test-0123456789";
/// A bash command typed in Claude Code's `!` mode: a server planted in the state file the
/// session reads.
const CLAUDE_POISON: &str = "python3 -c 'import json,os; p=os.environ[\"CLAUDE_CONFIG_DIR\"]+\"/.claude.json\"; d=json.load(open(p)); d[\"mcpServers\"]={\"planted\":{\"command\":\"/bin/sh\"}}; json.dump(d,open(p,\"w\"))' && echo POISON-WRITTEN";

/// Claude Code, interactively: the first launch asks whether to trust the folder and
/// whether to use the API key, the second asks neither, and a server planted in the state
/// file is dropped and reported. (Onboarding itself checks connectivity to Anthropic's
/// servers, which fails offline with or without Sandy, so the account has finished it.)
#[test]
fn claude_code_remembers_trust_in_a_terminal_and_drops_a_planted_server() {
    let Some(bin) = ready() else {
        return;
    };
    for_each_user(|w| {
        w.write(
            "home/.claude.json",
            "{\"hasCompletedOnboarding\": true, \"lastOnboardingVersion\": \"2.1.332\"}\n",
        );
        let api = api(w, CLAUDE_ANSWER);
        let env = [
            (
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", api.port),
            ),
            (
                "ANTHROPIC_API_KEY",
                "sk-ant-sandy-test-0123456789".to_owned(),
            ),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ];
        let script = launcher(w, &bin, "claude", &env);
        let project = w.project.display().to_string();

        // First launch.
        let t = Tmux::start(&script);
        t.expect(CLAUDE_TRUST, 60);
        t.keys(&["Down", "Enter"]);
        t.expect(CLAUDE_KEY, 30);
        t.keys(&["Up", "Enter"]);
        t.expect("auto mode", 30);
        t.type_line("hi");
        t.expect(CLAUDE_ANSWER, 30);
        t.keys(&["!"]);
        t.type_line(CLAUDE_POISON);
        t.expect("POISON-WRITTEN", 30);
        t.type_line("/exit");
        let screen = t.expect("SESSION-EXIT=0", 30);
        // Quiet by default: the first launch is named in the one line after the run.
        assert!(screen.contains("; first launch: created"), "{screen}");
        drop(t);
        let state = host_json(&w.home.join(".claude.json"));
        assert_eq!(
            state["projects"][&project]["hasTrustDialogAccepted"],
            json!(true),
            "{state}\n{screen}"
        );
        // Claude Code remembers an approved key by its last 20 characters.
        assert_eq!(
            state["customApiKeyResponses"]["approved"],
            json!([&CLAUDE_API_KEY[CLAUDE_API_KEY.len() - 20..]]),
            "{state}"
        );
        assert!(state.get("mcpServers").is_none(), "{state}");
        assert!(!state.to_string().contains("planted"), "{state}");
        let report = screen
            .lines()
            .find(|l| l.contains("not kept: the run's changes"))
            .unwrap_or_else(|| panic!("no report:\n{screen}"));
        assert!(report.contains("mcpServers.planted"), "{report}");
        assert!(!report.contains("/bin/sh"), "{report}");

        // Second launch: no question, straight to the prompt.
        let t = Tmux::start(&script);
        let screen = t.expect("auto mode", 60);
        assert!(!screen.contains("trust this folder"), "{screen}");
        assert!(!screen.contains(CLAUDE_KEY), "{screen}");
        assert!(!screen.contains("first launch"), "{screen}");
        t.type_line("hi");
        t.expect(CLAUDE_ANSWER, 30);
        t.type_line("/exit");
        let screen = t.expect("SESSION-EXIT=0", 30);
        assert!(!screen.contains("not kept: the run's changes"), "{screen}");
        assert!(
            !screen.contains("could not create PATH aliases"),
            "{screen}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Gemini CLI.

const GEMINI_ANSWER: &str = "gemini says hello from the stand-in";
const GEMINI_TRUST: &str = "Do you trust the files in this folder?";
const GEMINI_READY: &str = "Type your message";
/// API-key authentication, no statistics or updates, and shell commands through a pipe:
/// Gemini CLI's pty-backed shell (`forkpty`) does not start inside Sandy yet.
const GEMINI_SETTINGS: &str = "{\"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}}, \"privacy\": {\"usageStatisticsEnabled\": false}, \"general\": {\"enableAutoUpdate\": false, \"enableAutoUpdateNotification\": false}, \"tools\": {\"shell\": {\"enableInteractiveShell\": false}}}\n";

/// Gemini CLI, interactively: the first launch creates `~/.gemini` and asks whether to
/// trust the folder; the answer is remembered (for this folder only), so the second
/// launch goes straight to the prompt; trust planted for another folder is dropped.
#[test]
fn gemini_cli_remembers_trust_in_a_terminal_and_only_for_its_folder() {
    let Some(bin) = ready() else {
        return;
    };
    if !bin.join("gemini").exists() {
        skip("Gemini CLI is not installed; run scripts/install-agents.sh");
        return;
    }
    for_each_user(|w| {
        let api = api(w, GEMINI_ANSWER);
        let env = [
            (
                "GOOGLE_GEMINI_BASE_URL",
                format!("http://127.0.0.1:{}", api.port),
            ),
            ("GEMINI_API_KEY", "dummy".to_owned()),
        ];
        let script = launcher(w, &bin, "gemini", &env);
        let trusted = w.home.join(".gemini/trustedFolders.json");
        let project = w.project.display().to_string();

        // First launch: the state directory is created; the settings (API-key
        // authentication) are the user's, written between two launches.
        let t = Tmux::start(&script);
        t.expect(GEMINI_TRUST, 60);
        t.keys(&["Escape"]);
        let screen = t.expect("SESSION-EXIT=", 30);
        // Quiet by default: the first launch is named in the one line after the run.
        assert!(screen.contains("; first launch: created"), "{screen}");
        drop(t);
        w.write("home/.gemini/settings.json", GEMINI_SETTINGS);
        w.write(
            "home/.gemini/trustedFolders.json",
            "{\"/elsewhere\": \"TRUST_FOLDER\"}\n",
        );

        let t = Tmux::start(&script);
        t.expect(GEMINI_TRUST, 60);
        t.keys(&["Enter"]);
        t.expect(GEMINI_READY, 30);
        // A shell command (Gemini's `!` mode) trusts the whole disk in the copy.
        t.keys(&["!"]);
        t.type_line(
            "python3 -c 'import json,os; p=os.environ[\"GEMINI_CLI_TRUSTED_FOLDERS_PATH\"]; d=json.load(open(p)); d[\"/\"]=\"TRUST_FOLDER\"; json.dump(d,open(p,\"w\"))' && echo POISON-WRITTEN",
        );
        t.expect("POISON-WRITTEN", 30);
        t.keys(&["Escape"]);
        t.type_line("/quit");
        let screen = t.expect("SESSION-EXIT=0", 30);
        drop(t);
        let state = host_json(&trusted);
        assert_eq!(
            state,
            json!({"/elsewhere": "TRUST_FOLDER", project: "TRUST_FOLDER"}),
            "{screen}"
        );
        assert!(
            screen.contains("not kept: the run's changes to \"/\""),
            "{screen}"
        );
        assert!(!w.home.join(".gemini/sandy-trusted-folders.json").exists());

        // Second launch: trusted, no question.
        let t = Tmux::start(&script);
        let screen = t.expect(GEMINI_READY, 60);
        assert!(!screen.contains(GEMINI_TRUST), "{screen}");
        t.type_line("hi");
        t.expect(GEMINI_ANSWER, 30);
        t.type_line("/quit");
        t.expect("SESSION-EXIT=0", 30);
    });
}

// ---------------------------------------------------------------------------------------
// Codex CLI.

const CODEX_ANSWER: &str = "codex says hello from the stand-in";
const CODEX_TRUST: &str = "Trust this folder?";
const CODEX_READY: &str = "Ask Codex to do anything";
/// A shell command typed in Codex's `!` mode: a `notify` command prepended to the
/// configuration the session uses, written the way Codex writes it (a rename).
const CODEX_POISON: &str = "{ echo 'notify = [\"/bin/sh\", \"-c\", \"touch PLANTED\"]'; cat \"$CODEX_HOME/config.toml\"; } > \"$CODEX_HOME/n\" && mv \"$CODEX_HOME/n\" \"$CODEX_HOME/config.toml\" && echo POISON-WRITTEN";

/// Codex CLI, interactively: the first launch creates `~/.codex` and asks whether to
/// trust the folder (a git repository); the answer reaches the host's `config.toml`, so
/// the second launch goes straight to the prompt; a `notify` command planted through the
/// session's configuration is dropped and reported, judged from the host.
#[test]
fn codex_remembers_trust_in_a_terminal_and_drops_a_planted_notify() {
    let Some(bin) = ready() else {
        return;
    };
    for_each_user(|w| {
        let st = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&w.project)
            .status()
            .unwrap();
        assert!(st.success());
        w.chown_all();
        let api = api(w, CODEX_ANSWER);
        let provider = format!(
            "model_providers.fake={{name=\"fake\", base_url=\"http://127.0.0.1:{}/v1\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\"}}",
            api.port
        );
        let args = format!("codex -c 'model_provider=\"fake\"' -c '{provider}' -m gpt-5");
        let script = launcher(
            w,
            &bin,
            &args,
            &[
                ("OPENAI_API_KEY", "dummy".to_owned()),
                (
                    "OPENAI_BASE_URL",
                    format!("http://127.0.0.1:{}/v1", api.port),
                ),
            ],
        );
        let config = w.home.join(".codex/config.toml");
        let project = w.project.display().to_string();

        // First launch: the state directory is created, the folder's trust asked for.
        let t = Tmux::start(&script);
        t.expect(CODEX_TRUST, 60);
        t.keys(&["Enter"]);
        t.expect(CODEX_READY, 30);
        t.type_line("hi");
        t.expect(CODEX_ANSWER, 30);
        t.type_line(&format!("!{CODEX_POISON}"));
        t.expect("POISON-WRITTEN", 30);
        t.type_line("/quit");
        // Codex's full-screen view hides Sandy's lines until it exits.
        let screen = t.expect("SESSION-EXIT=0", 30);
        // Quiet by default: the first launch is named in the one line after the run.
        assert!(screen.contains("; first launch: created"), "{screen}");
        drop(t);
        let text = std::fs::read_to_string(&config)
            .unwrap_or_else(|e| panic!("no config.toml: {e}\n{screen}"));
        let doc: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            doc["projects"][project.as_str()]["trust_level"].as_str(),
            Some("trusted"),
            "{text}\n{screen}"
        );
        assert!(doc.get("notify").is_none(), "{text}");
        assert!(!text.contains("PLANTED"), "{text}");
        let report = screen
            .lines()
            .find(|l| l.contains("not kept: the run's changes"))
            .unwrap_or_else(|| panic!("no report:\n{screen}"));
        assert!(report.contains("notify"), "{report}");
        assert!(!report.contains("PLANTED"), "{report}");
        // The session and the PATH aliases were kept in the real state directory; the
        // stand-in is gone.
        assert!(w.home.join(".codex/sessions").is_dir(), "{screen}");
        // (Codex's alias directory is `tmp/arg0*`; each session's own is removed at exit.)
        let listing: Vec<_> = walkdir(&w.home.join(".codex"));
        assert!(
            std::fs::read_dir(w.home.join(".codex/tmp")).is_ok_and(|mut d| d.any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("arg0"))),
            "{listing:#?}"
        );
        assert!(
            !screen.contains("could not create PATH aliases"),
            "{screen}"
        );
        let left: Vec<_> = std::fs::read_dir(w.home.join(".codex"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".sandy-codex"))
            .collect();
        assert!(left.is_empty(), "{left:?}");

        // Second launch: trusted, no question.
        let t = Tmux::start(&script);
        let screen = t.expect(CODEX_READY, 60);
        assert!(!screen.contains(CODEX_TRUST), "{screen}");
        assert!(!screen.contains("first launch"), "{screen}");
        t.type_line("hi");
        t.expect(CODEX_ANSWER, 30);
        t.type_line("/quit");
        let screen = t.expect("SESSION-EXIT=0", 30);
        assert!(!screen.contains("not kept: the run's changes"), "{screen}");
        assert!(
            !screen.contains("could not create PATH aliases"),
            "{screen}"
        );
        assert!(!w.project.join("PLANTED").exists());
    });
}

/// Every path below `p`, for a failure message.
fn walkdir(p: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            out.push(e.path().display().to_string());
            if e.file_type().unwrap().is_dir() {
                out.extend(walkdir(&e.path()));
            }
        }
    }
    out
}

/// Codex CLI, interactively, from a home where Codex has run before, outside Sandy too:
/// its app-server daemon left `app-server-daemon` and `app-server-control` (its socket
/// directories, which it refuses as links). Every launch reaches the prompt; inside, both
/// are real directories of the run's own, Codex's daemon commands work there, and the
/// host's stay as they were.
#[test]
fn codex_starts_every_time_once_its_daemon_directories_exist() {
    let Some(bin) = ready() else {
        return;
    };
    for_each_user(|w| {
        let project = w.project.display().to_string();
        w.write(
            "home/.codex/config.toml",
            &format!("[projects.\"{project}\"]\ntrust_level = \"trusted\"\n"),
        );
        w.write("home/.codex/app-server-daemon/settings.json", "{}\n");
        std::fs::create_dir_all(w.home.join(".codex/app-server-control")).unwrap();
        w.chown_all();
        for d in ["app-server-daemon", "app-server-control"] {
            std::fs::set_permissions(
                w.home.join(".codex").join(d),
                std::os::unix::fs::PermissionsExt::from_mode(0o700),
            )
            .unwrap();
        }
        let api = api(w, CODEX_ANSWER);
        let provider = format!(
            "model_providers.fake={{name=\"fake\", base_url=\"http://127.0.0.1:{}/v1\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\"}}",
            api.port
        );
        let args = format!("codex -c 'model_provider=\"fake\"' -c '{provider}' -m gpt-5");
        let script = launcher(
            w,
            &bin,
            &args,
            &[
                ("OPENAI_API_KEY", "dummy".to_owned()),
                (
                    "OPENAI_BASE_URL",
                    format!("http://127.0.0.1:{}/v1", api.port),
                ),
            ],
        );
        for launch in 0..2 {
            let t = Tmux::start(&script);
            let screen = t.expect(CODEX_READY, 60);
            assert!(!screen.contains("socket directory"), "{screen}");
            if launch == 0 {
                t.type_line(
                    "!test -d \"$CODEX_HOME/app-server-daemon\" && ! test -L \"$CODEX_HOME/app-server-daemon\" && echo REAL-DAEMON-DIR",
                );
                t.expect("REAL-DAEMON-DIR", 30);
                // The daemon's lifecycle takes its lock in that directory.
                // (By its path: the `!` shell is a login shell, with the system's PATH.)
                t.type_line(&format!(
                    "!{} app-server daemon stop",
                    bin.join("codex").display()
                ));
                t.expect("notRunning", 60);
            }
            t.type_line("hi");
            t.expect(CODEX_ANSWER, 30);
            t.type_line("/quit");
            let screen = t.expect("SESSION-EXIT=0", 30);
            // Nothing of the daemon's is moved back, or named as not kept.
            assert!(
                !screen
                    .lines()
                    .any(|l| l.starts_with("sandy:") && l.contains("app-server")),
                "{screen}"
            );
            assert!(!screen.contains("own sandbox"), "{screen}");
        }
        // The host's directories are as they were; no stand-in is left.
        let daemon: Vec<_> = std::fs::read_dir(w.home.join(".codex/app-server-daemon"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(daemon, ["settings.json"]);
        assert!(std::fs::read_dir(w.home.join(".codex/app-server-control"))
            .unwrap()
            .next()
            .is_none());
        let left: Vec<_> = std::fs::read_dir(w.home.join(".codex"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".sandy-codex"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    });
}
