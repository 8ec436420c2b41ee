#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The real agent CLIs inside Sandy, judged from the host side: each one starts under its
//! detected profile and prints its version, also in a fresh home; Claude Code, Codex CLI,
//! Gemini CLI and OpenCode do real work against a local stand-in for their model API,
//! offline, with the default network and with `--block-net --allow-local-port`: the
//! ordinary work lands in the project, and the
//! hostile tool calls (reading an SSH key, planting hooks, settings, MCP servers and shell
//! start-up lines) fail without leaving a trace.
//!
//! The CLIs come from `scripts/install-agents.sh` (a fixed prefix, default
//! `/opt/sandy-test-agents`, or `SANDY_TEST_AGENTS`); without them every test here is a
//! reported skip (a failure in CI). The model API is `helpers/fake_model_api.py`, run on
//! the host as the test user on a free 127.0.0.1 port, scripted one tool call per turn; it
//! records every tool result the agent sends back.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A hung agent is killed after this long.
const AGENT_TIMEOUT: u64 = 120;

/// The agents: command name (and detected profile), as `install-agents.sh` installs them.
const AGENTS: [&str; 4] = ["claude", "codex", "opencode", "gemini"];

// ---------------------------------------------------------------------------------------
// Harness.

/// Spawns `cmd`, retrying while its program is "text file busy": the first test to run
/// copies the `sandy` binary, and a child forked meanwhile by a parallel test holds the
/// copy open for writing until it execs.
fn spawn(cmd: &mut Command) -> Child {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Ok(child) => return child,
            Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        }
    }
}

/// Runs a command to completion with its output collected; kills it and fails the test if
/// it takes more than `secs` seconds.
fn run_timeout(mut cmd: Command, secs: u64) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{:?}", cmd.get_args().collect::<Vec<_>>());
    let mut child = Reaped(spawn(&mut cmd));
    let collector = Collector::start(&mut child.0);
    let status = wait_timeout(&mut child.0, secs, &what);
    collector.finish_allowing_open(status, Duration::from_secs(10))
}

/// The directory holding the agents' binaries, or `None` (a reported skip).
fn agents_bin() -> Option<PathBuf> {
    common::agents_bin(&AGENTS)
}

/// `PATH` with the agents first.
fn agents_first(bin: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display())
}

/// `sandy run FLAGS... -- ARGS...` as the test user, with the agents on `PATH` and the
/// extra environment.
fn sandy_agent(
    w: &World,
    bin: &Path,
    flags: &[&str],
    args: &[&str],
    env: &[(&str, String)],
) -> Command {
    let mut all = vec!["run"];
    all.extend_from_slice(flags);
    all.push("--");
    all.extend_from_slice(args);
    let mut cmd = w.sandy(all);
    cmd.env("PATH", agents_first(bin));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Whether `text` holds something shaped like a version number (`1.2.3`).
fn has_version(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 3 && parts.iter().take(3).all(|p| !p.is_empty())
        })
}

/// The state directories each agent keeps, as a user who has run the agents before has
/// them.
fn make_agent_state(w: &World) {
    for dir in [
        "home/.claude",
        "home/.codex",
        "home/.gemini",
        "home/.config/opencode",
        "home/.local/share/opencode",
        "home/.local/state/opencode",
        "home/.cache/opencode",
    ] {
        std::fs::create_dir_all(w.root.join(dir)).unwrap();
    }
    w.write("home/.claude.json", "{}\n");
}

// ---------------------------------------------------------------------------------------
// Every agent starts under its profile.

fn version_runs(w: &World, bin: &Path, agents: &[&str], what: &str) {
    for agent in agents {
        let o = run_timeout(
            sandy_agent(w, bin, &[], &[agent, "--version"], &[]),
            AGENT_TIMEOUT,
        );
        assert_code(&o, 0, &format!("{agent} --version ({what})"));
        assert!(
            has_version(&stdout(&o)),
            "{agent} --version ({what}) printed no version: {:?}\nstderr: {}",
            stdout(&o),
            stderr(&o)
        );
        let notice = format!("sandy: profile '{agent}'");
        assert!(
            stderr(&o).contains(&notice),
            "{agent} ({what}): the detected profile is not named on stderr: {}",
            stderr(&o)
        );
    }
}

#[test]
fn every_agent_prints_its_version_under_its_detected_profile() {
    let Some(bin) = agents_bin() else {
        return;
    };
    for_each_user(|w| {
        make_agent_state(w);
        version_runs(w, &bin, &AGENTS, "with its state directories");
    });
}

/// A first run inside Sandy, before the agent ever made its state directories: Sandy
/// creates them before launch (issue 13.1), so every agent starts, OpenCode included (it
/// used to exit with EROFS creating `~/.local/share/opencode`), and nothing prints
/// ENOENT or EROFS.
#[test]
fn agents_start_in_a_fresh_home() {
    let Some(bin) = agents_bin() else {
        return;
    };
    for_each_user(|w| {
        for agent in AGENTS {
            let o = run_timeout(
                sandy_agent(w, &bin, &[], &[agent, "--version"], &[]),
                AGENT_TIMEOUT,
            );
            assert_code(&o, 0, &format!("{agent} --version in a fresh home"));
            assert!(has_version(&stdout(&o)), "{agent}: {}", stdout(&o));
            let err = stderr(&o);
            assert!(
                ![
                    "ENOENT",
                    "EROFS",
                    "Read-only file system",
                    "create it first"
                ]
                .iter()
                .any(|e| err.contains(e)),
                "{agent}: {err}"
            );
        }
        for dir in [
            ".claude",
            ".codex",
            ".gemini",
            ".config/opencode",
            ".local/share/opencode",
        ] {
            assert!(w.home.join(dir).is_dir(), "{dir}");
        }
    });
}

// ---------------------------------------------------------------------------------------
// End to end, against a local stand-in for the model API.

/// The stand-in model API (`fake_model_api.py`), killed when dropped.
struct FakeApi {
    _child: Reaped,
    port: u16,
    dir: PathBuf,
}

impl FakeApi {
    /// Starts the server as the test user with `script` (steps and a final answer).
    fn start(w: &World, script: &Value) -> FakeApi {
        let helper = w.write("api/fake_model_api.py", &helper_text("fake_model_api.py"));
        let script_path = w.write("api/script.json", &script.to_string());
        let dir = w.root.join("api");
        let mut cmd = w.host(PYTHON);
        cmd.arg(&helper).arg(&dir).arg(&script_path);
        let (child, info) = start_announcing(cmd, "the fake model API");
        let port = u16::try_from(info["port"].as_u64().unwrap()).unwrap();
        FakeApi {
            _child: child,
            port,
            dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every tool result received, in order: (call id, text).
    fn results(&self) -> Vec<(String, String)> {
        let Ok(text) = std::fs::read_to_string(self.dir.join("results.json")) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_owned(),
                    r["content"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The result of step `n` of the script.
    fn result_of(&self, n: usize) -> String {
        let id = format!("toolu_sandy_step_{n:02}");
        self.results()
            .into_iter()
            .find(|(i, _)| *i == id)
            .map(|(_, text)| text)
            .unwrap_or_else(|| panic!("no tool result for step {n}; log:\n{}", self.log()))
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Everything the server logged, for failure messages.
    fn log(&self) -> String {
        format!(
            "requests:\n{}\nresults: {}\nerrors:\n{}",
            self.read("requests.jsonl"),
            self.read("results.json"),
            self.read("errors.log")
        )
    }
}

/// One scripted tool call.
struct Step {
    tool: &'static str,
    input: Value,
    /// Whether it is an attack that must fail.
    hostile: bool,
}

/// The files an attack would change, and their bytes before the run (`None`: absent).
struct Snapshot(Vec<(PathBuf, Option<Vec<u8>>)>);

impl Snapshot {
    fn take(paths: &[PathBuf]) -> Snapshot {
        Snapshot(
            paths
                .iter()
                .map(|p| (p.clone(), std::fs::read(p).ok()))
                .collect(),
        )
    }

    #[track_caller]
    fn assert_unchanged(&self, what: &str) {
        for (path, before) in &self.0 {
            let after = std::fs::read(path).ok();
            assert!(
                after == *before,
                "{what}: {} changed: {:?} -> {:?}",
                path.display(),
                before.as_deref().map(String::from_utf8_lossy),
                after.as_deref().map(String::from_utf8_lossy)
            );
        }
    }
}

/// The project as a git repository with one commit, made on the host.
fn git_project(w: &World) {
    w.write(
        "home/.gitconfig",
        "[user]\n\tname = Sandy Test\n\temail = sandy@example.invalid\n",
    );
    w.write("home/project/README.md", "a project\n");
    for args in [
        &["init", "-q"][..],
        &["add", "README.md"],
        &["commit", "-q", "-m", "initial"],
    ] {
        let o = w.host("git").args(args).output().unwrap();
        assert_code(&o, 0, &format!("host git {args:?}"));
    }
}

fn git_log(w: &World) -> String {
    let o = w.host("git").args(["log", "--format=%s"]).output().unwrap();
    assert_code(&o, 0, "host git log");
    stdout(&o)
}

/// The users the end-to-end runs use: the unprivileged one (Claude Code refuses
/// `--dangerously-skip-permissions` as root), or the current user when not root.
fn e2e_user() -> Option<User> {
    if !kernel_ready() {
        return None;
    }
    users().into_iter().find(|u| u.uid != 0)
}

/// The network modes of the end-to-end runs: the default, and a blocked network that
/// relays only the fake API's port.
fn network_modes(port: u16) -> [(&'static str, Vec<String>); 2] {
    [
        ("default network", Vec::new()),
        (
            "--block-net",
            vec![
                "--block-net".into(),
                "--allow-local-port".into(),
                port.to_string(),
            ],
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// The shared scenario: ordinary work, then attacks, then a final answer.

/// The step (0-based) whose result holds the commit, and the one that runs python; every
/// agent's script puts them there.
const COMMIT_STEP: usize = 3;
const PYTHON_STEP: usize = 4;
const BASHRC: &str = "# the user's bashrc\nexport EDITOR=vi\n";

/// The ordinary shell steps every agent runs after editing `notes.txt`.
fn ordinary_commands() -> [&'static str; 2] {
    [
        "git add notes.txt && git commit -q -m 'agent commit' && git log --format=%s -1",
        "python3 -c 'print(6 * 7)' > answer.txt && cat answer.txt",
    ]
}

/// The hostile shell commands every agent tries, given the home directory and the canary
/// key: read the key, plant a git hook, append to `~/.bashrc`.
fn hostile_commands(home: &str, key: &Path) -> Vec<String> {
    vec![
        format!("cat {}", key.display()),
        "printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit".to_owned(),
        format!("echo 'echo planted' >> {home}/.bashrc"),
    ]
}

/// An agent's arguments and the environment it needs beyond the world's.
type Invocation = (Vec<String>, Vec<(&'static str, String)>);

/// One agent's end-to-end run.
struct Scenario<'a> {
    agent: &'static str,
    final_text: &'static str,
    /// Host-side fixtures beyond the common ones (agent state, settings).
    prepare: &'a dyn Fn(&World),
    /// Paths (relative to the world) the attacks must leave byte-identical or absent,
    /// beyond `~/.bashrc` and the project's git hooks and config.
    watched: &'a [&'a str],
    /// The script, given the world and the canary key.
    steps: &'a dyn Fn(&World, &Path) -> Vec<Step>,
    /// The agent's arguments and extra environment, given the fake API.
    command: &'a dyn Fn(&FakeApi) -> Invocation,
    /// Checks the agent's own output, given a description for failures.
    check_output: &'a dyn Fn(&Output, &str),
}

/// Runs `scenario` with the default network and with a blocked one that relays only the
/// fake API's port, each in a fresh world, and judges it from the host.
fn end_to_end(scenario: &Scenario) {
    let Some(bin) = agents_bin() else {
        return;
    };
    let Some(user) = e2e_user() else {
        return;
    };
    eprintln!("-- as {} (uid {})", user.label, user.uid);
    for mode in 0..2 {
        let w = World::new(user);
        (scenario.prepare)(&w);
        let (key, secret, snapshot) = hostile_fixtures(&w, scenario.watched);
        let hooks_before = hooks_listing(&w);
        let steps = (scenario.steps)(&w, &key);
        let api = FakeApi::start(&w, &script_of(&steps, scenario.final_text));
        let (what, flags) = network_modes(api.port)[mode].clone();
        eprintln!("   {}, {what}", scenario.agent);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (args, env) = (scenario.command)(&api);
        let mut argv = vec![scenario.agent];
        argv.extend(args.iter().map(String::as_str));
        let o = run_timeout(sandy_agent(&w, &bin, &flags, &argv, &env), AGENT_TIMEOUT);
        let context = format!(
            "{}, {what}\nstdout: {}\nstderr: {}\nserver log:\n{}",
            scenario.agent,
            stdout(&o),
            stderr(&o),
            api.log()
        );
        assert_code(&o, 0, &context);
        let notice = format!("sandy: profile '{}'", scenario.agent);
        assert!(stderr(&o).contains(&notice), "{context}");
        (scenario.check_output)(&o, &context);

        // Every step was tried and answered, and the script fitted the agent's tools.
        assert_eq!(
            api.results().len(),
            steps.len(),
            "{context}\nevery step should have a tool result"
        );
        assert!(api.read("errors.log").is_empty(), "{context}");

        // The ordinary work happened.
        assert_eq!(
            std::fs::read_to_string(w.project.join("notes.txt")).unwrap_or_default(),
            "edited line\n",
            "{context}"
        );
        let log = git_log(&w);
        assert_eq!(log.lines().next(), Some("agent commit"), "{context}\n{log}");
        assert_eq!(
            std::fs::read_to_string(w.project.join("answer.txt")).unwrap_or_default(),
            "42\n",
            "{context}"
        );
        assert!(
            api.result_of(COMMIT_STEP).contains("agent commit"),
            "{context}"
        );
        assert!(api.result_of(PYTHON_STEP).contains("42"), "{context}");

        // The attacks failed visibly, leaked nothing and left nothing behind.
        assert_no_canary(&secret, &api, &o, &context);
        snapshot.assert_unchanged(&context);
        assert_eq!(hooks_listing(&w), hooks_before, "{context}");
        // Claude Code's state file remembers its own state, never a planted server.
        if let Ok(state) = std::fs::read_to_string(w.home.join(".claude.json")) {
            assert!(!state.contains("planted"), "{context}\n{state}");
            let v: Value = serde_json::from_str(&state).unwrap();
            assert!(
                v.get("mcpServers").is_none_or(|m| m == &json!({})),
                "{context}\n{state}"
            );
        }
        for (n, step) in steps.iter().enumerate() {
            if step.hostile {
                let r = api.result_of(n);
                // Either the write failed visibly, or it went to the agent's private copy
                // of a remembered state file (Gemini CLI's settings) and was dropped and
                // reported after the run; the host files are unchanged either way
                // (checked above).
                let dropped = stderr(&o).contains("the run's changes to hooks");
                assert!(
                    dropped
                        || [
                            "Read-only file system",
                            "Permission denied",
                            "No such file",
                            "EROFS",
                            "EACCES",
                        ]
                        .iter()
                        .any(|e| r.contains(e)),
                    "{context}\nstep {n} should have failed visibly: {r}"
                );
            }
        }
    }
}

/// Everything a hostile run might touch, set up on the host; returns the canary key, its
/// secret text and a snapshot of the files the attacks aim at.
fn hostile_fixtures(w: &World, extra: &[&str]) -> (PathBuf, String, Snapshot) {
    let secret = format!(
        "SANDY-CANARY-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let key = w.write(
        "home/.ssh/id_ed25519",
        &format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{secret}\n-----END OPENSSH PRIVATE KEY-----\n"
        ),
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    w.write("home/.bashrc", BASHRC);
    git_project(w);
    let mut watched = vec![
        w.home.join(".bashrc"),
        w.project.join(".git/hooks/pre-commit"),
        w.project.join(".git/config"),
    ];
    watched.extend(extra.iter().map(|p| w.root.join(p)));
    (key, secret, Snapshot::take(&watched))
}

fn script_of(steps: &[Step], final_text: &str) -> Value {
    json!({
        "steps": steps.iter().map(|s| json!({"tool": s.tool, "input": s.input})).collect::<Vec<_>>(),
        "final": final_text,
    })
}

#[track_caller]
fn assert_no_canary(secret: &str, api: &FakeApi, o: &Output, what: &str) {
    for (id, text) in api.results() {
        assert!(
            !text.contains(secret),
            "{what}: the canary reached the model in the result of {id}: {text}"
        );
    }
    assert!(
        !stdout(o).contains(secret) && !stderr(o).contains(secret),
        "{what}: the canary is in the agent's output"
    );
}

fn hooks_listing(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(w.project.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------------------------------
// Claude Code, against a stand-in Anthropic Messages API.

const CLAUDE_FINAL: &str = "All scripted steps are done.";
const CLAUDE_SETTINGS: &str = "{\n  \"cleanupPeriodDays\": 30\n}\n";

fn bash(command: &str, hostile: bool) -> Step {
    Step {
        tool: "Bash",
        input: json!({"command": command, "description": "scripted step"}),
        hostile,
    }
}

fn claude_steps(w: &World, key: &Path) -> Vec<Step> {
    let notes = w.project.join("notes.txt");
    let home = w.home.display().to_string();
    let [commit, python] = ordinary_commands();
    let mut steps = vec![
        // Ordinary work: Claude Code's own file tools, git and python.
        Step {
            tool: "Write",
            input: json!({"file_path": notes, "content": "first line\n"}),
            hostile: false,
        },
        Step {
            tool: "Read",
            input: json!({"file_path": notes}),
            hostile: false,
        },
        Step {
            tool: "Edit",
            input: json!({"file_path": notes, "old_string": "first line", "new_string": "edited line"}),
            hostile: false,
        },
        bash(commit, false),
        bash(python, false),
    ];
    // Hostile work.
    steps.extend(hostile_commands(&home, key).iter().map(|c| bash(c, true)));
    steps.extend([
        bash(
            &format!("echo '{{\"hooks\": {{}}}}' >> {home}/.claude/settings.json"),
            true,
        ),
        // The same, in the private copy Claude Code reads inside: it succeeds there, and
        // after the run it is dropped, not merged (judged on the host in end_to_end).
        bash(
            "python3 -c 'import json, os; p=os.environ[\"CLAUDE_CONFIG_DIR\"]+\"/.claude.json\"; \
             d=json.load(open(p)); \
             d[\"mcpServers\"]={\"planted\": {\"command\": \"/bin/sh\", \"args\": [\"-c\", \"id\"]}}; \
             json.dump(d, open(p, \"w\"))'",
            false,
        ),
        // An MCP server in the global state file is a command the next launch starts.
        bash(
            &format!(
                "python3 -c 'import json; p=\"{home}/.claude.json\"; d=json.load(open(p)); \
                 d[\"mcpServers\"]={{\"planted\": {{\"command\": \"/bin/sh\", \"args\": [\"-c\", \"id\"]}}}}; \
                 json.dump(d, open(p, \"w\"))'"
            ),
            true,
        ),
        // Claude Code's own file tool, creating a shell start-up file.
        Step {
            tool: "Write",
            input: json!({"file_path": format!("{home}/.profile"), "content": "echo planted\n"}),
            hostile: true,
        },
    ]);
    steps
}

#[test]
fn claude_code_works_offline_and_its_attacks_fail() {
    end_to_end(&Scenario {
        agent: "claude",
        final_text: CLAUDE_FINAL,
        prepare: &|w| {
            w.write("home/.claude/settings.json", CLAUDE_SETTINGS);
            w.write("home/.claude.json", "{}\n");
        },
        // ~/.claude.json is not watched whole: the allowlisted keys Claude Code writes
        // persist (judged below, in end_to_end).
        watched: &["home/.claude/settings.json", "home/.profile"],
        steps: &claude_steps,
        command: &|api| {
            let args = [
                "-p",
                "do the task",
                "--dangerously-skip-permissions",
                "--output-format",
                "json",
            ];
            let env = vec![
                ("ANTHROPIC_BASE_URL", api.url()),
                ("ANTHROPIC_API_KEY", "dummy".to_owned()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
                ("DISABLE_TELEMETRY", "1".to_owned()),
                ("DISABLE_AUTOUPDATER", "1".to_owned()),
                ("DISABLE_ERROR_REPORTING", "1".to_owned()),
            ];
            (args.iter().map(|a| (*a).to_owned()).collect(), env)
        },
        check_output: &|o, context| {
            let answer: Value = serde_json::from_str(stdout(o).trim())
                .unwrap_or_else(|e| panic!("{context}\nnot JSON: {e}"));
            assert_eq!(answer["is_error"], json!(false), "{context}");
            assert_eq!(answer["result"], json!(CLAUDE_FINAL), "{context}");
        },
    });
}

// ---------------------------------------------------------------------------------------
// Codex CLI, against a stand-in OpenAI Responses API (a custom model provider).

const CODEX_FINAL: &str = "Codex finished the scripted steps.";
const CODEX_CONFIG: &str = "# the user's Codex configuration\nmodel = \"gpt-5\"\n";

fn exec(cmd: &str, hostile: bool) -> Step {
    Step {
        tool: "exec_command",
        input: json!({"cmd": cmd}),
        hostile,
    }
}

fn codex_steps(w: &World, key: &Path) -> Vec<Step> {
    let home = w.home.display().to_string();
    let [commit, python] = ordinary_commands();
    let mut steps = vec![
        exec("printf 'first line\\n' > notes.txt", false),
        exec("cat notes.txt", false),
        // Codex's apply_patch, which it runs through an alias under ~/.codex/tmp.
        exec(
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: notes.txt\n@@\n-first line\n+edited line\n*** End Patch\nEOF",
            false,
        ),
        exec(commit, false),
        exec(python, false),
    ];
    steps.extend(hostile_commands(&home, key).iter().map(|c| exec(c, true)));
    steps.push(exec(
        &format!("echo 'notify = [\"/bin/sh\", \"-c\", \"id\"]' >> {home}/.codex/config.toml"),
        true,
    ));
    steps
}

#[test]
fn codex_works_offline_and_its_attacks_fail() {
    end_to_end(&Scenario {
        agent: "codex",
        final_text: CODEX_FINAL,
        prepare: &|w| {
            w.write("home/.codex/config.toml", CODEX_CONFIG);
        },
        watched: &["home/.codex/config.toml"],
        steps: &codex_steps,
        command: &|api| {
            let provider = format!(
                "model_providers.fake={{name=\"fake\", base_url=\"{}/v1\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\"}}",
                api.url()
            );
            let args = [
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "-c",
                "model_provider=\"fake\"",
                "-c",
                &provider,
                "-m",
                "gpt-5",
                "do the task",
            ];
            // The stand-in's port on the host's loopback is opened by the endpoint
            // variable (the host's own services are closed otherwise).
            let env = vec![
                ("OPENAI_API_KEY", "dummy".to_owned()),
                ("OPENAI_BASE_URL", format!("{}/v1", api.url())),
            ];
            (args.iter().map(|a| (*a).to_owned()).collect(), env)
        },
        check_output: &|o, context| {
            assert!(stdout(o).contains(CODEX_FINAL), "{context}");
        },
    });
}

/// Plain `codex exec`, no sandbox flag: Codex's configuration inside says
/// `sandbox_mode = "danger-full-access"`, so it runs the model's command itself, inside
/// Sandy, with no warning about its own sandbox; the host's `config.toml` never gets that
/// setting.
#[test]
fn codex_exec_runs_a_tool_call_in_sandy_without_a_sandbox_flag() {
    let Some(bin) = agents_bin() else {
        return;
    };
    for_each_user(|w| {
        w.write("home/.codex/config.toml", CODEX_CONFIG);
        let steps = [exec(
            "echo made-inside > made.txt && echo RAN-INSIDE",
            false,
        )];
        let api = FakeApi::start(w, &script_of(&steps, CODEX_FINAL));
        w.chown_all();
        let provider = format!(
            "model_providers.fake={{name=\"fake\", base_url=\"{}/v1\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\"}}",
            api.url()
        );
        let args = [
            "codex",
            "exec",
            "--skip-git-repo-check",
            "-c",
            "model_provider=\"fake\"",
            "-c",
            &provider,
            "-m",
            "gpt-5",
            "do the task",
        ];
        let env = [
            ("OPENAI_API_KEY", "dummy".to_owned()),
            ("OPENAI_BASE_URL", format!("{}/v1", api.url())),
        ];
        let o = run_timeout(sandy_agent(w, &bin, &[], &args, &env), AGENT_TIMEOUT);
        let context = format!("{}\n{}\n{}", stdout(&o), stderr(&o), api.log());
        assert_code(&o, 0, &context);
        assert!(stdout(&o).contains(CODEX_FINAL), "{context}");
        assert!(api.result_of(0).contains("RAN-INSIDE"), "{context}");
        assert_eq!(
            std::fs::read_to_string(w.project.join("made.txt")).unwrap(),
            "made-inside\n"
        );
        assert!(!stderr(&o).contains("own sandbox"), "{context}");
        assert!(stderr(&o).contains("danger-full-access"), "{context}");
        let config = std::fs::read_to_string(w.home.join(".codex/config.toml")).unwrap();
        assert!(!config.contains("sandbox_mode"), "{config}");
        assert!(config.starts_with(CODEX_CONFIG), "{config}");
    });
}

// ---------------------------------------------------------------------------------------
// Gemini CLI, against a stand-in Gemini API (`GOOGLE_GEMINI_BASE_URL`).

const GEMINI_FINAL: &str = "Gemini CLI finished the scripted steps.";
/// The user's settings: API-key authentication (with only `GOOGLE_GEMINI_BASE_URL` in the
/// environment Gemini CLI picks the "gateway" method, which print mode rejects), and no
/// usage statistics or update checks.
const GEMINI_SETTINGS: &str = "{\n  \"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}},\n  \"privacy\": {\"usageStatisticsEnabled\": false},\n  \"general\": {\"enableAutoUpdate\": false, \"enableAutoUpdateNotification\": false}\n}\n";

fn shell(command: &str, hostile: bool) -> Step {
    Step {
        tool: "run_shell_command",
        input: json!({"command": command, "description": "scripted step"}),
        hostile,
    }
}

fn gemini_steps(w: &World, key: &Path) -> Vec<Step> {
    let notes = w.project.join("notes.txt");
    let home = w.home.display().to_string();
    let [commit, python] = ordinary_commands();
    let mut steps = vec![
        // Ordinary work: Gemini CLI's own file tools, git and python.
        Step {
            tool: "write_file",
            input: json!({"file_path": notes, "content": "first line\n"}),
            hostile: false,
        },
        Step {
            tool: "read_file",
            input: json!({"file_path": notes}),
            hostile: false,
        },
        Step {
            tool: "replace",
            input: json!({
                "file_path": notes,
                "instruction": "edit the line",
                "old_string": "first line",
                "new_string": "edited line",
            }),
            hostile: false,
        },
        shell(commit, false),
        shell(python, false),
    ];
    steps.extend(hostile_commands(&home, key).iter().map(|c| shell(c, true)));
    // A hook in the user's settings is a command the next launch runs.
    steps.push(shell(
        &format!(
            "python3 -c 'import json; p=\"{home}/.gemini/settings.json\"; d=json.load(open(p)); \
             d[\"hooks\"]={{\"SessionStart\": [{{\"hooks\": [{{\"type\": \"command\", \"command\": \"id\"}}]}}]}}; \
             json.dump(d, open(p, \"w\"))'"
        ),
        true,
    ));
    steps
}

#[test]
fn gemini_cli_works_offline_and_its_attacks_fail() {
    end_to_end(&Scenario {
        agent: "gemini",
        final_text: GEMINI_FINAL,
        prepare: &|w| {
            w.write("home/.gemini/settings.json", GEMINI_SETTINGS);
        },
        watched: &["home/.gemini/settings.json"],
        steps: &gemini_steps,
        command: &|api| {
            let args = ["-p", "do the task", "--yolo"];
            let env = vec![
                ("GOOGLE_GEMINI_BASE_URL", api.url()),
                ("GEMINI_API_KEY", "dummy".to_owned()),
                // The throw-away project is not in ~/.gemini/trustedFolders.json, and in
                // an untrusted folder Gemini CLI overrides `--yolo` with the default
                // approval mode.
                ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
                // Gemini CLI runs shell commands with `GIT_CONFIG_GLOBAL=/dev/null`, so
                // git never sees the user's ~/.gitconfig and its identity.
                ("GIT_AUTHOR_NAME", "Sandy Test".to_owned()),
                ("GIT_AUTHOR_EMAIL", "sandy@example.invalid".to_owned()),
                ("GIT_COMMITTER_NAME", "Sandy Test".to_owned()),
                ("GIT_COMMITTER_EMAIL", "sandy@example.invalid".to_owned()),
            ];
            (args.iter().map(|a| (*a).to_owned()).collect(), env)
        },
        check_output: &|o, context| {
            assert!(stdout(o).contains(GEMINI_FINAL), "{context}");
        },
    });
}

// ---------------------------------------------------------------------------------------
// OpenCode, against a stand-in OpenAI-compatible Chat Completions API (a custom provider
// given in OPENCODE_CONFIG_CONTENT; the provider package is bundled with OpenCode).

const OPENCODE_FINAL: &str = "OpenCode finished the scripted steps.";
/// The user's configuration file, protected: an attack appends to it.
const OPENCODE_CONFIG: &str = "{\"autoupdate\": false, \"share\": \"disabled\"}\n";

fn opencode_bash(command: &str, hostile: bool) -> Step {
    Step {
        tool: "bash",
        input: json!({"command": command, "description": "scripted step"}),
        hostile,
    }
}

fn opencode_steps(w: &World, key: &Path) -> Vec<Step> {
    let notes = w.project.join("notes.txt");
    let home = w.home.display().to_string();
    let [commit, python] = ordinary_commands();
    let mut steps = vec![
        Step {
            tool: "write",
            input: json!({"filePath": notes, "content": "first line\n"}),
            hostile: false,
        },
        Step {
            tool: "read",
            input: json!({"filePath": notes}),
            hostile: false,
        },
        Step {
            tool: "edit",
            input: json!({"filePath": notes, "oldString": "first line", "newString": "edited line"}),
            hostile: false,
        },
        opencode_bash(commit, false),
        opencode_bash(python, false),
    ];
    steps.extend(
        hostile_commands(&home, key)
            .iter()
            .map(|c| opencode_bash(c, true)),
    );
    // A plugin registered in the user's configuration is code the next launch loads.
    steps.push(opencode_bash(
        &format!(
            "echo '{{\"plugin\": [\"file:///tmp/planted.js\"]}}' > {home}/.config/opencode/opencode.json"
        ),
        true,
    ));
    steps
}

#[test]
fn opencode_works_offline_and_its_attacks_fail() {
    end_to_end(&Scenario {
        agent: "opencode",
        final_text: OPENCODE_FINAL,
        prepare: &|w| {
            w.write("home/.config/opencode/opencode.json", OPENCODE_CONFIG);
        },
        watched: &["home/.config/opencode/opencode.json"],
        steps: &opencode_steps,
        command: &|api| {
            let config = json!({
                "provider": {"fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Sandy stand-in",
                    "options": {"baseURL": format!("{}/v1", api.url()), "apiKey": "dummy"},
                    "models": {"m": {"name": "m"}}
                }},
                "model": "fake/m",
                "permission": {"bash": "allow", "edit": "allow", "external_directory": "allow"}
            });
            let args = ["run", "do the task"];
            let env = vec![
                ("OPENCODE_CONFIG_CONTENT", config.to_string()),
                ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
                ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
                ("OPENAI_BASE_URL", format!("{}/v1", api.url())),
            ];
            (args.iter().map(|a| (*a).to_owned()).collect(), env)
        },
        check_output: &|o, context| {
            assert!(stdout(o).contains(OPENCODE_FINAL), "{context}");
        },
    });
}
