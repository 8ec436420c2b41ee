#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runtime controls: the hooks the user registers in the agent keep working inside Sandy,
//! and the agent cannot rewrite them. Judged from the host: the hook's record file on the
//! host, the hook's files and registration byte for byte after an attack from inside, and
//! a marker that planted code would create when the hook runs outside afterwards.
//!
//! The hooks are stand-ins shaped like a monitoring hook: an executable on `PATH` (by a
//! symlink into a tool directory, as installers lay it out), a Python script run by an
//! interpreter, and a project hook under `.claude/hooks`; each appends one record line.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// An executable hook (`#!/bin/sh`): appends its name and first argument to
/// `$HOME/records/events`.
const SHELL_HOOK: &str = "#!/bin/sh\nprintf 'monitor %s\\n' \"$1\" >> \"$HOME/records/events\"\n";
/// A Python hook, run by `python3 SCRIPT`: appends the event it read on stdin (Claude
/// Code's hook input) or `python` when there is none.
const PYTHON_HOOK: &str = "import json, os, sys\n\
data = sys.stdin.read() if not sys.stdin.isatty() else ''\n\
try:\n    event = json.loads(data)\nexcept Exception:\n    event = {}\n\
line = json.dumps({'hook': 'python', 'event': event.get('hook_event_name'), 'tool': event.get('tool_name')})\n\
with open(os.path.join(os.environ['HOME'], 'records', 'events'), 'a') as f:\n    f.write(line + '\\n')\n";
/// A project hook: appends `project`.
const PROJECT_HOOK: &str = "#!/bin/sh\necho project >> \"$HOME/records/events\"\n";

/// The hook commands, as registered.
const MONITOR_COMMAND: &str = "monitor-hook pre";
const PYTHON_COMMAND: &str = "python3 ~/.config/monitor/hook.py";
const PROJECT_COMMAND: &str = "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check.sh";
/// A hook whose executable is only known from a variable Sandy cannot see.
const UNRESOLVABLE_COMMAND: &str = "$MONITOR_HOME/bin/monitor";

/// Claude Code's hook registration shape.
fn claude_hooks(commands: &[&str]) -> String {
    let hooks: Vec<Value> = commands
        .iter()
        .map(|c| json!({"type": "command", "command": c}))
        .collect();
    serde_json::to_string_pretty(&json!({
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": hooks}]}
    }))
    .unwrap()
}

/// The user's monitoring set-up: `~/.local/bin/monitor-hook` a symlink into
/// `~/tools/monitor/bin`, a Python hook under `~/.config`, a project hook, the records
/// directory, and the registrations in the user and project settings.
fn install_hooks(w: &World) {
    let tool = w.write("home/tools/monitor/bin/monitor-hook", SHELL_HOOK);
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(w.home.join(".local/bin")).unwrap();
    std::os::unix::fs::symlink(&tool, w.home.join(".local/bin/monitor-hook")).unwrap();
    w.write("home/.config/monitor/hook.py", PYTHON_HOOK);
    let project_hook = w.write("home/project/.claude/hooks/check.sh", PROJECT_HOOK);
    std::fs::set_permissions(&project_hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(w.home.join("records")).unwrap();
    w.write(
        "home/.claude/settings.json",
        &claude_hooks(&[MONITOR_COMMAND, PYTHON_COMMAND]),
    );
    w.write(
        "home/project/.claude/settings.json",
        &claude_hooks(&[PROJECT_COMMAND]),
    );
    w.chown_all();
}

/// `PATH` with the user's `~/.local/bin` first, as a user with monitor-hook installed has it.
fn user_path(w: &World) -> String {
    format!(
        "{}/.local/bin:/usr/local/bin:/usr/bin:/bin",
        w.home.display()
    )
}

/// `sandy run --profile claude FLAGS... -- /bin/sh -c SCRIPT` with the user's PATH.
fn run_sh(w: &World, flags: &[&str], script: &str) -> Output {
    let mut args = vec!["run", "--profile", "claude"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    let mut cmd = w.sandy(args);
    cmd.env("PATH", user_path(w));
    cmd.output().unwrap()
}

fn records(w: &World) -> String {
    std::fs::read_to_string(w.home.join("records/events")).unwrap_or_default()
}

fn dry_run(w: &World) -> (Value, String) {
    let mut cmd = w.sandy(["run", "--dry-run", "--profile", "claude", "--", "/bin/true"]);
    cmd.env("PATH", user_path(w));
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    (parse_dry_run(&o.stdout, "dry run"), stderr(&o))
}

fn hooks_in(doc: &Value) -> Vec<Value> {
    doc["runtime_controls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["service"] == "hook")
        .cloned()
        .collect()
}

/// `sandy run FLAGS [--block-net --allow-local-port PORT] -- claude -p "do the task"`
/// with the real Claude Code from `bin`, against the API stand-in on `port`, offline.
fn claude_prints(w: &World, flags: &[&str], block_net: bool, port: &str, bin: &Path) -> Output {
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    if block_net {
        args.extend_from_slice(&["--block-net", "--allow-local-port", port]);
    }
    args.extend_from_slice(&[
        "--",
        "claude",
        "-p",
        "do the task",
        "--allowedTools",
        "Bash",
        "--output-format",
        "json",
    ]);
    let mut cmd = w.sandy(args);
    cmd.env("PATH", format!("{}:{}", bin.display(), user_path(w)))
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1");
    run_collected(cmd, AGENT_TIMEOUT)
}

#[test]
fn every_registered_hook_is_listed_in_the_dry_run_and_an_unresolvable_one_is_noted() {
    for_each_user(|w| {
        install_hooks(w);
        w.write(
            "home/.claude/settings.local.json",
            &claude_hooks(&[UNRESOLVABLE_COMMAND]),
        );
        let (doc, err) = dry_run(w);
        let home = w.home.display().to_string();
        let user_settings = format!("{home}/.claude/settings.json");
        let project_settings = format!("{}/.claude/settings.json", w.project.display());
        let hooks = hooks_in(&doc);
        let want = [
            json!({"service": "hook", "enabled": true, "version": null,
                   "path": format!("{home}/.local/bin/monitor-hook"), "script": null,
                   "configuration": user_settings}),
            json!({"service": "hook", "enabled": true, "version": null,
                   "path": "/usr/bin/python3",
                   "script": format!("{home}/.config/monitor/hook.py"),
                   "configuration": user_settings}),
            json!({"service": "hook", "enabled": true, "version": null,
                   "path": format!("{}/.claude/hooks/check.sh", w.project.display()),
                   "script": null, "configuration": project_settings}),
        ];
        for hook in &want {
            assert!(hooks.contains(hook), "{hook} not in {hooks:#?}");
        }
        assert_eq!(hooks.len(), want.len(), "{hooks:#?}");
        // The executable's name, and where the symlink leads, granted exactly.
        let grants = doc["file_grants"].as_array().unwrap();
        let target = std::fs::canonicalize(w.home.join("tools/monitor/bin/monitor-hook")).unwrap();
        let script = std::fs::canonicalize(w.home.join(".config/monitor/hook.py")).unwrap();
        for path in [&target, &script] {
            assert!(
                grants
                    .iter()
                    .any(|g| g["path"] == path.display().to_string()
                        && g["access"] == "read_exec"
                        && g["scope"] == "exact"),
                "{} not granted: {grants:#?}",
                path.display()
            );
        }
        // The project hook is in a writable directory: protected read-only by name.
        let protections = doc["protections"].as_array().unwrap();
        assert!(
            protections.iter().any(|p| p["path"]
                == format!("{}/.claude/hooks/check.sh", w.project.display())
                && p["kind"] == "read_only"),
            "{protections:#?}"
        );
        // The unresolvable hook: one note, naming the configuration, before launch.
        let local = format!("{home}/.claude/settings.local.json");
        let notes: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("sandy: note: a hook registered in"))
            .collect();
        assert_eq!(notes.len(), 1, "{err}");
        assert!(
            notes[0].contains(&local) && notes[0].contains("$MONITOR_HOME"),
            "{err}"
        );
    });
}

#[test]
fn a_hook_writes_its_record_inside_the_sandbox_with_either_network() {
    for_each_user(|w| {
        install_hooks(w);
        let records_dir = w.home.join("records").display().to_string();
        for net in [&[][..], &["--block-net"][..]] {
            std::fs::write(w.home.join("records/events"), "").unwrap();
            w.chown_all();
            let mut flags = vec!["--read-write", records_dir.as_str()];
            flags.extend_from_slice(net);
            // The agent runs each hook command through a shell, as Claude Code does.
            let script = format!(
                "{MONITOR_COMMAND} && echo '{{}}' | {PYTHON_COMMAND} && \
                 CLAUDE_PROJECT_DIR=\"$PWD\" sh -c '{}'",
                PROJECT_COMMAND.replace('\'', "'\\''")
            );
            let o = run_sh(w, &flags, &script);
            assert_code(&o, 0, &format!("hooks with {net:?}"));
            let got = records(w);
            assert_eq!(
                got,
                "monitor pre\n{\"hook\": \"python\", \"event\": null, \"tool\": null}\nproject\n",
                "{net:?}: {}",
                stderr(&o)
            );
        }
        // Negative: without the registration, the script under ~/.config is out of
        // reach (an executable on PATH is reachable either way, as every PATH tool is).
        std::fs::write(w.home.join(".claude/settings.json"), "{}\n").unwrap();
        std::fs::write(w.home.join("records/events"), "").unwrap();
        let o = run_sh(w, &["--read-write", &records_dir], PYTHON_COMMAND);
        assert_ne!(o.status.code(), Some(0), "an unregistered script ran");
        assert_eq!(records(w), "");
    });
}

/// Hooks in directories the sandbox can write: a script in Claude Code's own (writable)
/// configuration directory, outside `hooks/`, and the project hook.
#[test]
fn the_agent_cannot_rewrite_or_replace_a_hook_or_its_registration() {
    for_each_user(|w| {
        install_hooks(w);
        let in_config = w.write("home/.claude/monitor/run.sh", SHELL_HOOK);
        std::fs::set_permissions(&in_config, std::fs::Permissions::from_mode(0o755)).unwrap();
        let project_settings = w.project.join(".claude/settings.json");
        std::fs::write(
            &project_settings,
            claude_hooks(&[PROJECT_COMMAND, "~/.claude/monitor/run.sh post"]),
        )
        .unwrap();
        w.chown_all();
        let watched: Vec<PathBuf> = vec![
            in_config,
            w.project.join(".claude/hooks/check.sh"),
            project_settings,
            w.home.join(".claude/settings.json"),
            w.home.join("tools/monitor/bin/monitor-hook"),
            w.home.join(".config/monitor/hook.py"),
        ];
        let before: Vec<Vec<u8>> = watched.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let marker = w.root.join("planted-marker");
        let plant = format!("#!/bin/sh\ntouch {}\n", marker.display());
        // Each attack from inside; none may succeed (each is judged on the host below).
        for target in &watched {
            let t = target.display();
            for attack in [
                format!("printf '%s' '{plant}' > {t}"),
                format!("printf '%s' '{plant}' >> {t}"),
                format!("rm -f {t} && printf '%s' '{plant}' > {t}"),
                format!("mv {t} {t}.old; printf '%s' '{plant}' > {t}"),
                format!("chmod 000 {t}"),
            ] {
                let _ = run_sh(w, &[], &attack);
            }
        }
        // Replacing the directories that hold them.
        let claude_dir = w.project.join(".claude");
        let _ = run_sh(
            w,
            &[],
            &format!(
                "mv {d}/hooks {d}/hooks.old; mkdir -p {d}/hooks; printf '%s' '{plant}' > {d}/hooks/check.sh; chmod +x {d}/hooks/check.sh",
                d = claude_dir.display()
            ),
        );
        let _ = run_sh(
            w,
            &[],
            &format!(
                "mv {d} {d}.old; mkdir -p {d}; printf '%s' '{plant}' > {d}/run.sh",
                d = w.home.join(".claude/monitor").display()
            ),
        );
        for (path, bytes) in watched.iter().zip(&before) {
            assert_eq!(
                std::fs::read(path).ok().as_ref(),
                Some(bytes),
                "{} changed",
                path.display()
            );
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_ne!(mode & 0o777, 0, "{} lost its mode", path.display());
        }
        // Run outside afterwards: the hooks as registered; no planted code runs.
        std::fs::write(w.home.join("records/events"), "").unwrap();
        w.chown_all();
        let o = w
            .host("/bin/sh")
            .env("PATH", user_path(w))
            .env("CLAUDE_PROJECT_DIR", &w.project)
            .arg("-c")
            .arg(format!(
                "{MONITOR_COMMAND}; {PROJECT_COMMAND}; {}/.claude/monitor/run.sh post",
                w.home.display()
            ))
            .output()
            .unwrap();
        assert_code(&o, 0, "the hooks on the host");
        assert_eq!(records(w), "monitor pre\nproject\nmonitor post\n");
        assert!(!marker.exists(), "planted code ran on the host");
    });
}

// ---------------------------------------------------------------------------------------
// A real agent: Claude Code fires a registered PreToolUse hook inside Sandy.

const AGENT_TIMEOUT: u64 = 180;

fn claude_bin() -> Option<PathBuf> {
    agents_bin(&["claude"])
}

/// Starts the stand-in model API as the test user; returns it and its port.
fn fake_api(w: &World, script: &Value) -> (Reaped, u16) {
    let helper = w.write("api/fake_model_api.py", &helper_text("fake_model_api.py"));
    let script_path = w.write("api/script.json", &script.to_string());
    let mut cmd = w.host(PYTHON);
    cmd.arg(&helper).arg(w.root.join("api")).arg(&script_path);
    let (child, info) = start_announcing(cmd, "the fake model API");
    let port = u16::try_from(info["port"].as_u64().unwrap()).unwrap();
    (child, port)
}

fn run_collected(mut cmd: Command, secs: u64) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{:?}", cmd.get_args().collect::<Vec<_>>());
    let mut child = Reaped(cmd.spawn().unwrap());
    let collector = Collector::start(&mut child.0);
    let status = wait_timeout(&mut child.0, secs, &what);
    collector.finish_allowing_open(status, Duration::from_secs(10))
}

#[test]
fn claude_code_fires_a_registered_pre_tool_use_hook_whose_record_reaches_the_host() {
    let Some(bin) = claude_bin() else {
        return;
    };
    for_each_user(|w| {
        for block_net in [false, true] {
            let w = &World::new(w.user);
            install_hooks(w);
            w.write("home/.claude.json", "{}\n");
            let notes = w.project.join("notes.txt");
            let script = json!({
                "steps": [{"tool": "Bash", "input": {
                    "command": format!("echo hello > {}", notes.display()),
                    "description": "scripted step"}}],
                "final": "done",
            });
            let (_api, port) = fake_api(w, &script);
            let records_dir = w.home.join("records").display().to_string();
            let port_arg = port.to_string();
            let o = claude_prints(
                w,
                &["--read-write", records_dir.as_str()],
                block_net,
                &port_arg,
                &bin,
            );
            let context = format!(
                "block_net {block_net}\nstdout: {}\nstderr: {}\nrequests: {}",
                stdout(&o),
                stderr(&o),
                std::fs::read_to_string(w.root.join("api/requests.jsonl")).unwrap_or_default()
            );
            assert_code(&o, 0, &context);
            assert_eq!(
                std::fs::read_to_string(&notes).unwrap_or_default(),
                "hello\n",
                "{context}"
            );
            // Judged on the host: each registered hook left its record, the Python one
            // with the event Claude Code gave it.
            let got = records(w);
            assert!(got.contains("monitor pre\n"), "{context}\nrecords: {got}");
            assert!(got.contains("project\n"), "{context}\nrecords: {got}");
            assert!(
                got.contains(r#"{"hook": "python", "event": "PreToolUse", "tool": "Bash"}"#),
                "{context}\nrecords: {got}"
            );
        }
    });
}

// ---------------------------------------------------------------------------------------
// Numbat, as upstream Sandy recognises it: the registration Numbat's installer writes
// (`BIN hook EVENT --agent AGENT --installed-by=numbat --output=file --output-file F`).

/// A stand-in for Numbat's hook command: checks its rules directory is readable, appends
/// one record line to the output file and bumps the sequence number in its state file.
const NUMBAT_STAND_IN: &str = r#"#!/bin/sh
[ "$1" = hook ] || exit 2
event=$2; shift 2
out=; state="$HOME/.numbat/state.db"; rules=
while [ $# -gt 0 ]; do
  case "$1" in
    --output-file) out=$2; shift ;;
    --state-db) state=$2; shift ;;
    --rules-dir) rules=$2; shift ;;
  esac
  shift
done
[ -z "$rules" ] || cat "$rules"/*.rules > /dev/null || exit 3
cat > /dev/null
n=$(cat "$state" 2>/dev/null); n=$(( ${n:-0} + 1 ))
printf '%s\n' "$n" > "$state" || exit 4
printf '{"event":"%s","seq":%s}\n' "$event" "$n" >> "$out" || exit 5
"#;

/// Installs the stand-in Numbat, its rules, output and state, and registers it in
/// Claude Code's user settings in upstream's shape (a program with `args`).
fn install_numbat(w: &World, extra_args: &[&str]) -> PathBuf {
    let bin = w.write("home/.local/share/numbat/bin/numbat", NUMBAT_STAND_IN);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.write("home/.numbat/rules/default.rules", "deny rm -rf /\n");
    w.write("home/.numbat/events.jsonl", "");
    w.write("home/.numbat/state.db", "0\n");
    let output = w.home.join(".numbat/events.jsonl");
    let mut args = vec![
        "hook".to_owned(),
        "pre-tool".to_owned(),
        "--agent".to_owned(),
        "claude".to_owned(),
        "--installed-by=numbat".to_owned(),
        "--output=file".to_owned(),
        "--output-file".to_owned(),
        output.display().to_string(),
        "--rules-dir".to_owned(),
        "~/.numbat/rules".to_owned(),
    ];
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    let settings = json!({"hooks": {"PreToolUse": [{"hooks": [{
        "type": "command", "command": bin.display().to_string(), "args": args, "timeout": 10
    }]}]}});
    w.write(
        "home/.claude/settings.json",
        &serde_json::to_string_pretty(&settings).unwrap(),
    );
    bin
}

/// The hook as Claude Code runs it (the registered program and arguments).
fn numbat_invocation(w: &World) -> String {
    format!(
        "echo '{{}}' | {}/.local/share/numbat/bin/numbat hook pre-tool --agent claude \
         --installed-by=numbat --output=file --output-file {}/.numbat/events.jsonl \
         --rules-dir {}/.numbat/rules",
        w.home.display(),
        w.home.display(),
        w.home.display()
    )
}

#[test]
fn numbat_records_inside_with_either_network_and_its_registration_stays_immutable() {
    for_each_user(|w| {
        let bin = install_numbat(w, &[]);
        let (doc, _) = dry_run(w);
        let numbat: Vec<&Value> = doc["runtime_controls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["service"] == "Numbat" && c["enabled"] == true)
            .collect();
        assert_eq!(numbat.len(), 1, "{:#?}", doc["runtime_controls"]);
        assert_eq!(numbat[0]["path"], bin.display().to_string());
        for (i, net) in [&[][..], &["--block-net"][..]].iter().enumerate() {
            let mut flags = vec!["--numbat"];
            flags.extend_from_slice(net);
            let o = run_sh(w, &flags, &numbat_invocation(w));
            assert_code(&o, 0, &format!("numbat with {net:?}"));
            let events = std::fs::read_to_string(w.home.join(".numbat/events.jsonl")).unwrap();
            assert_eq!(
                events.lines().count(),
                i + 1,
                "{net:?}: {events}\n{}",
                stderr(&o)
            );
            assert!(events.ends_with(&format!("{{\"event\":\"pre-tool\",\"seq\":{}}}\n", i + 1)));
        }
        // Registration, executable and rules are immutable from inside.
        let watched = [
            bin,
            w.home.join(".numbat/rules/default.rules"),
            w.home.join(".claude/settings.json"),
        ];
        let before: Vec<Vec<u8>> = watched.iter().map(|p| std::fs::read(p).unwrap()).collect();
        for target in &watched {
            let t = target.display();
            let _ = run_sh(w, &[], &format!("echo planted > {t}"));
            let _ = run_sh(w, &[], &format!("rm -f {t}; echo planted > {t}"));
        }
        let rules = w.home.join(".numbat/rules");
        let _ = run_sh(
            w,
            &[],
            &format!("echo allow > {}/planted.rules", rules.display()),
        );
        for (path, bytes) in watched.iter().zip(&before) {
            assert_eq!(
                std::fs::read(path).ok().as_ref(),
                Some(bytes),
                "{}",
                path.display()
            );
        }
        assert!(!rules.join("planted.rules").exists());
    });
}

#[test]
fn numbat_flag_requires_a_healthy_registration() {
    for_each_user(|w| {
        // No registration at all.
        let o = run_sh(w, &["--numbat"], "true");
        assert_code(&o, 125, "--numbat without Numbat");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--numbat") && err.contains("numbat hook install --agent claude"),
            "{err}"
        );
        // A registration Sandy cannot keep working (direct HTTP delivery).
        install_numbat(
            w,
            &["--output=http", "--http-url", "https://numbat.invalid"],
        );
        let o = run_sh(w, &["--numbat"], "true");
        assert_code(&o, 125, "--numbat with HTTP output");
        assert!(stderr(&o).contains("http"), "{}", stderr(&o));
        // Without the flag, the run goes ahead and says why Numbat will not work.
        let o = run_sh(w, &[], "true");
        assert_code(&o, 0, "without --numbat");
        assert!(
            stderr(&o).contains("sandy: note: Numbat's hooks will likely fail"),
            "{}",
            stderr(&o)
        );
        // A missing state file: not created by Sandy, reported.
        install_numbat(w, &[]);
        std::fs::remove_file(w.home.join(".numbat/state.db")).unwrap();
        let o = run_sh(w, &["--numbat"], "true");
        assert_code(&o, 125, "--numbat with no state file");
        assert!(!w.home.join(".numbat/state.db").exists());
    });
}

// ---------------------------------------------------------------------------------------
// Codex (`hooks.json`, `notify` in config.toml) and Gemini CLI (settings hooks).

fn dry_run_as(w: &World, profile: &str) -> (Value, String) {
    let mut cmd = w.sandy(["run", "--dry-run", "--profile", profile, "--", "/bin/true"]);
    cmd.env("PATH", user_path(w));
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    (parse_dry_run(&o.stdout, "dry run"), stderr(&o))
}

#[test]
fn codex_and_gemini_hooks_are_discovered_granted_and_run() {
    for_each_user(|w| {
        install_hooks(w);
        let home = w.home.display().to_string();
        let script = format!("{home}/.config/monitor/hook.py");
        // Codex: notify is an argument vector run without a shell; hooks.json as Claude's.
        w.write(
            "home/.codex/config.toml",
            &format!("model = \"gpt-5\"\nnotify = [\"python3\", \"{script}\"]\n"),
        );
        w.write("home/.codex/hooks.json", &claude_hooks(&[MONITOR_COMMAND]));
        // Gemini CLI: its own events, the same shape.
        let gemini = json!({"hooks": {"BeforeTool": [{"matcher": "*", "hooks": [
            {"type": "command", "command": PYTHON_COMMAND},
            {"type": "command", "command": "missing-gemini-hook --x"}
        ]}]}});
        w.write("home/.gemini/settings.json", &gemini.to_string());
        let (codex, _) = dry_run_as(w, "codex");
        let hooks = hooks_in(&codex);
        let notify = json!({"service": "hook", "enabled": true, "version": null,
            "path": "/usr/bin/python3", "script": script,
            "configuration": format!("{home}/.codex/config.toml")});
        let registered = json!({"service": "hook", "enabled": true, "version": null,
            "path": format!("{home}/.local/bin/monitor-hook"), "script": null,
            "configuration": format!("{home}/.codex/hooks.json")});
        assert!(hooks.contains(&notify), "{hooks:#?}");
        assert!(hooks.contains(&registered), "{hooks:#?}");
        let (gem, err) = dry_run_as(w, "gemini");
        let hooks = hooks_in(&gem);
        assert_eq!(hooks.len(), 1, "{hooks:#?}");
        assert_eq!(hooks[0]["script"], json!(script));
        assert_eq!(
            hooks[0]["configuration"],
            json!(format!("{home}/.gemini/settings.json"))
        );
        assert!(
            err.contains("sandy: note: a hook registered in")
                && err.contains("missing-gemini-hook"),
            "{err}"
        );
        // The notify command runs inside under the codex profile and its record reaches
        // the host; the same script without the registration is out of reach.
        let records_dir = w.home.join("records").display().to_string();
        let run = |profile: &str| {
            let mut cmd = w.sandy([
                "run",
                "--profile",
                profile,
                "--read-write",
                &records_dir,
                "--",
                "python3",
                &script,
                "{}",
            ]);
            cmd.env("PATH", user_path(w));
            cmd.output().unwrap()
        };
        std::fs::write(w.home.join("records/events"), "").unwrap();
        w.chown_all();
        let o = run("codex");
        assert_code(&o, 0, "notify under codex");
        assert_eq!(
            records(w),
            "{\"hook\": \"python\", \"event\": null, \"tool\": null}\n"
        );
        let o = run("generic");
        assert_ne!(
            o.status.code(),
            Some(0),
            "the script ran without a registration"
        );
    });
}

// ---------------------------------------------------------------------------------------
// OpenCode plugins, and Numbat's generated OpenCode plugin.

/// A plugin in the shape Numbat's installer generates for OpenCode (upstream's fixture
/// shape): it runs NUMBAT_BIN with EXTRA_ARGS on each tool call.
fn numbat_plugin(bin: &Path, output: &Path) -> String {
    format!(
        "// numbat-managed plugin - do not edit\n\
         import {{ spawn }} from \"node:child_process\";\n\n\
         const NUMBAT_BIN = \"{}\";\n\
         const EXTRA_ARGS = [\"--installed-by=numbat\", \"--output=file\", \"--output-file\", \"{}\"];\n\n\
         function forward(lifecycle, payload) {{\n\
         \x20 const child = spawn(NUMBAT_BIN, [\"hook\", lifecycle, \"--agent\", \"opencode\", ...EXTRA_ARGS], {{\n\
         \x20   stdio: [\"pipe\", \"ignore\", \"ignore\"],\n\
         \x20 }});\n\
         \x20 child.stdin.write(JSON.stringify(payload));\n\
         \x20 child.stdin.end();\n\
         }}\n\n\
         export const NumbatPlugin = async ({{ directory }}) => {{\n\
         \x20 return {{\n\
         \x20   \"tool.execute.before\": async (input, output) => {{\n\
         \x20     forward(\"opencode-pre-tool\", {{ directory, input, output }});\n\
         \x20   }},\n\
         \x20 }};\n\
         }};\n\n\
         export default NumbatPlugin;\n",
        bin.display(),
        output.display()
    )
}

#[test]
fn opencode_plugins_are_listed_and_numbats_plugin_keeps_recording() {
    for_each_user(|w| {
        let bin = install_numbat(w, &[]);
        // Not registered for Claude Code here: only OpenCode's plugin.
        std::fs::remove_file(w.home.join(".claude/settings.json")).unwrap();
        let output = w.home.join(".numbat/events.jsonl");
        let plugin = w.write(
            "home/.config/opencode/plugin/numbat.ts",
            &numbat_plugin(&bin, &output),
        );
        let audit = w.write(
            "home/project/.opencode/plugins/audit.js",
            "export default async () => ({});\n",
        );
        let (doc, _) = dry_run_as(w, "opencode");
        let hooks: Vec<&Value> = doc["runtime_controls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["path"].is_string())
            .collect();
        let numbat = json!({"service": "Numbat", "enabled": true, "version": null,
            "path": bin.display().to_string(), "script": null,
            "configuration": plugin.display().to_string()});
        let listed = json!({"service": "hook", "enabled": true, "version": null,
            "path": audit.display().to_string(), "script": null,
            "configuration": w.project.join(".opencode/plugins").display().to_string()});
        assert!(hooks.contains(&&numbat), "{hooks:#?}");
        assert!(hooks.contains(&&listed), "{hooks:#?}");
        // What the plugin runs, run inside under the opencode profile with --numbat.
        let invocation = format!(
            "echo '{{}}' | {} hook opencode-pre-tool --agent opencode --installed-by=numbat \
             --output=file --output-file {}",
            bin.display(),
            output.display()
        );
        let mut cmd = w.sandy([
            "run",
            "--numbat",
            "--block-net",
            "--profile",
            "opencode",
            "--",
            "/bin/sh",
            "-c",
            &invocation,
        ]);
        cmd.env("PATH", user_path(w));
        let o = cmd.output().unwrap();
        assert_code(&o, 0, "numbat's opencode plugin command");
        assert_eq!(
            std::fs::read_to_string(&output).unwrap(),
            "{\"event\":\"opencode-pre-tool\",\"seq\":1}\n"
        );
        // The plugin itself cannot be rewritten from inside.
        let before = std::fs::read(&plugin).unwrap();
        let mut cmd = w.sandy([
            "run",
            "--profile",
            "opencode",
            "--",
            "/bin/sh",
            "-c",
            &format!("echo planted > {}", plugin.display()),
        ]);
        cmd.env("PATH", user_path(w));
        let _ = cmd.output().unwrap();
        assert_eq!(std::fs::read(&plugin).unwrap(), before);
    });
}

#[test]
fn doctor_numbat_checks_an_installation_without_changing_it() {
    for_each_user(|w| {
        // Nothing registered: not usable, with the setup command; exit 1.
        let o = w.sandy(["doctor", "--numbat"]).output().unwrap();
        assert_code(&o, 1, "doctor --numbat without Numbat");
        assert!(
            stdout(&o).contains("numbat hook install --agent claude"),
            "{}",
            stdout(&o)
        );
        // A healthy registration: ok, naming the executable and the configuration.
        let bin = install_numbat(w, &[]);
        let settings = w.home.join(".claude/settings.json");
        let before = std::fs::read(&settings).unwrap();
        let o = w.sandy(["doctor", "--numbat"]).output().unwrap();
        assert_code(&o, 0, "doctor --numbat with Numbat");
        let out = stdout(&o);
        assert!(
            out.contains(&format!(
                "{} registered in {}",
                bin.display(),
                settings.display()
            )),
            "{out}"
        );
        // Another agent's configuration has none.
        let o = w
            .sandy(["doctor", "--numbat", "--agent", "codex"])
            .output()
            .unwrap();
        assert_code(&o, 1, "doctor --numbat --agent codex");
        assert!(stdout(&o).contains("--agent codex"), "{}", stdout(&o));
        // A broken one (its state file gone): not usable, and nothing was created.
        std::fs::remove_file(w.home.join(".numbat/state.db")).unwrap();
        let o = w.sandy(["doctor", "--numbat"]).output().unwrap();
        assert_code(&o, 1, "doctor --numbat with no state file");
        assert!(stdout(&o).contains("state.db"), "{}", stdout(&o));
        assert!(!w.home.join(".numbat/state.db").exists());
        assert_eq!(std::fs::read(&settings).unwrap(), before);
    });
}

// ---------------------------------------------------------------------------------------
// `sandy integrations setup numbat`: the host-side path.

/// A stand-in Numbat whose `hook install --agent claude` does what Numbat's installer
/// does (creates its output, state and rules, registers its hook in Claude Code's user
/// settings, shell form) and counts its installs; `hook ...` records like the stand-in
/// above. With `broken`, the installer reports success and registers nothing.
fn numbat_with_installer(w: &World, broken: bool) -> PathBuf {
    let bin = w.home.join("numbat-dist/bin/numbat");
    let install = if broken {
        "echo x >> \"$HOME/installs\"; exit 0".to_owned()
    } else {
        format!(
            "echo x >> \"$HOME/installs\"\n\
             mkdir -p \"$HOME/.numbat/rules\" \"$HOME/.claude\"\n\
             : > \"$HOME/.numbat/events.jsonl\"; echo 0 > \"$HOME/.numbat/state.db\"\n\
             cat > \"$HOME/.claude/settings.json\" <<JSON\n\
             {{\"hooks\": {{\"PreToolUse\": [{{\"hooks\": [{{\"type\": \"command\", \"command\": \"'{bin}' hook pre-tool --agent claude --installed-by=numbat --output=file --output-file '$HOME/.numbat/events.jsonl'\"}}]}}]}}}}\n\
             JSON\n\
             exit 0",
            bin = bin.display()
        )
    };
    let script = NUMBAT_STAND_IN.replacen(
        "[ \"$1\" = hook ] || exit 2\n",
        &format!("[ \"$1\" = hook ] || exit 2\nif [ \"$2\" = install ]; then\n{install}\nfi\n"),
        1,
    );
    w.write("home/numbat-dist/bin/numbat", &script);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.chown_all();
    bin
}

fn setup(w: &World) -> Output {
    let mut cmd = w.sandy(["integrations", "setup", "numbat", "--agent", "claude"]);
    cmd.env(
        "PATH",
        format!("{}/numbat-dist/bin:/usr/bin:/bin", w.home.display()),
    );
    cmd.output().unwrap()
}

#[test]
fn integrations_setup_installs_through_the_provider_then_reuses_it() {
    for_each_user(|w| {
        let bin = numbat_with_installer(w, false);
        let o = setup(w);
        assert_code(&o, 0, "first setup");
        let settings = w.home.join(".claude/settings.json");
        assert!(
            stdout(&o).contains(&format!(
                "set up: {} registered in {}",
                bin.display(),
                settings.display()
            )),
            "{}",
            stdout(&o)
        );
        assert_eq!(
            std::fs::read_to_string(w.home.join("installs")).unwrap(),
            "x\n"
        );
        // Healthy now: reused, the installer not run again.
        let o = setup(w);
        assert_code(&o, 0, "second setup");
        assert!(stdout(&o).contains("already set up"), "{}", stdout(&o));
        assert_eq!(
            std::fs::read_to_string(w.home.join("installs")).unwrap(),
            "x\n"
        );
        // And the run keeps it working.
        let invocation = format!(
            "echo '{{}}' | {} hook pre-tool --agent claude --installed-by=numbat \
             --output=file --output-file {}/.numbat/events.jsonl",
            bin.display(),
            w.home.display()
        );
        let o = run_sh(w, &["--numbat"], &invocation);
        assert_code(&o, 0, "run --numbat after setup");
        assert_eq!(
            std::fs::read_to_string(w.home.join(".numbat/events.jsonl")).unwrap(),
            "{\"event\":\"pre-tool\",\"seq\":1}\n"
        );
    });
}

#[test]
fn integrations_setup_reports_an_installer_that_does_not_deliver() {
    for_each_user(|w| {
        numbat_with_installer(w, true);
        let o = setup(w);
        assert_code(&o, 1, "setup with a broken installer");
        assert!(stdout(&o).contains("still not usable"), "{}", stdout(&o));
        // No provider at all on PATH.
        std::fs::remove_file(w.home.join("numbat-dist/bin/numbat")).unwrap();
        let o = setup(w);
        assert_code(&o, 1, "setup without numbat");
        assert!(stdout(&o).contains("cannot run numbat"), "{}", stdout(&o));
    });
}

/// A registration in a file a sandboxed run could have written (the project's settings,
/// or a local settings file a run could have created) does not widen the sandbox: the
/// next launch must not read policy from the sandbox's own writes.
#[test]
fn a_registration_the_sandbox_could_write_does_not_widen_the_sandbox() {
    for_each_user(|w| {
        install_hooks(w);
        // A file outside every grant that such a registration would expose.
        w.write("home/notes/private.txt", "private\n");
        let private = w.home.join("notes/private.txt");
        w.write(
            "home/project/.claude/settings.json",
            &claude_hooks(&[&format!("python3 {}", private.display())]),
        );
        w.write(
            "home/.claude/settings.local.json",
            &claude_hooks(&["python3 ~/notes/private.txt"]),
        );
        let (doc, err) = dry_run(w);
        let grants = doc["file_grants"].as_array().unwrap();
        assert!(
            !grants
                .iter()
                .any(|g| g["path"] == private.display().to_string()),
            "{grants:#?}"
        );
        let refused: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("could") && l.contains("private.txt"))
            .collect();
        assert_eq!(refused.len(), 2, "{err}");
        // Inside, the file stays out of reach.
        let o = run_sh(w, &[], &format!("cat {}", private.display()));
        assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
        assert!(!stdout(&o).contains("private"));
        // The same registration in the user settings (a placeholder keeps it read-only
        // inside, so no run can have written it) does widen.
        std::fs::write(
            w.home.join(".claude/settings.json"),
            claude_hooks(&[&format!("python3 {}", private.display())]),
        )
        .unwrap();
        let (doc, _) = dry_run(w);
        assert!(doc["file_grants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["path"] == private.display().to_string()));
    });
}

// ---------------------------------------------------------------------------------------
// Kontext, as upstream Sandy recognises it: its hooks in the agent's settings in the shape
// `kontext setup` writes (`'BIN' hook 'ALIAS'`), a healthy `kontext doctor --json`, and
// its daemon's socket `/tmp/kontext-managed-observe-UID/kontext.sock` on the host, which
// the hook reaches from inside the private /tmp, also under --block-net.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A stand-in for the `kontext` command, following its documented contract:
/// `kontext doctor --json` prints the health report (kept in `~/.kontext-doctor.json`, so a
/// test can make it unhealthy), `kontext hook [--agent codex] ALIAS` reads the agent's hook
/// input on stdin and sends one JSON record to the daemon's socket, and `kontext setup`
/// (the official setup) registers the hooks and makes the installation healthy.
const KONTEXT_STAND_IN: &str = r#"#!/bin/sh
case "$1" in
doctor)
  [ "$2" = --json ] || exit 2
  exec cat "$HOME/.kontext-doctor.json" ;;
hook)
  alias=$2; [ "$alias" = --agent ] && alias=$4
  input=$(cat)
  exec /usr/bin/python3 -c '
import json, os, socket, sys
try:
    tool = json.loads(sys.argv[2]).get("tool_name")
except Exception:
    tool = None
s = socket.socket(socket.AF_UNIX)
s.connect("/tmp/kontext-managed-observe-%d/kontext.sock" % os.getuid())
s.sendall((json.dumps({"alias": sys.argv[1], "tool": tool}) + "\n").encode())
s.close()
' "$alias" "$input" ;;
setup)
  echo x >> "$HOME/kontext-setups"
  self=$(readlink -f "$0")
  printf '{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"'"'"'%s'"'"' hook '"'"'pre-tool-use'"'"'"}]}]}}\n' "$self" > "$HOME/.claude/settings.json"
  cp "$HOME/.kontext-healthy.json" "$HOME/.kontext-doctor.json" ;;
*) exit 2 ;;
esac
"#;

const KONTEXT_VERSION: &str = "1.4.2";

/// The health report `kontext doctor --json` gives for the world's home.
/// Where [`install_kontext`] puts the stand-in.
fn kontext_bin_of(w: &World) -> PathBuf {
    w.home.join("opt/kontext/bin/kontext")
}

fn kontext_report(w: &World, healthy: bool) -> String {
    json!({
        "healthy": healthy, "configured": true, "self_serve": true, "daemon_running": true,
        "installed_version": KONTEXT_VERSION,
        "config_path": w.home.join(".config/kontext/profiles/test/managed.json"),
        "active_profile": "test", "legacy_install": false, "mode": "observe",
    })
    .to_string()
}

/// Installs the stand-in and its configuration; `registered`: the hooks in the user's
/// Claude Code settings, upstream-shaped (quoted words, one per event).
fn install_kontext(w: &World, registered: bool) -> PathBuf {
    let bin = kontext_bin_of(w);
    w.write("home/opt/kontext/bin/kontext", KONTEXT_STAND_IN);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.write(
        "home/.config/kontext/profiles/test/managed.json",
        "{\"mode\":\"observe\"}\n",
    );
    w.write("home/.config/kontext/active", "test\n");
    w.write("home/.kontext-healthy.json", &kontext_report(w, true));
    w.write("home/.kontext-doctor.json", &kontext_report(w, registered));
    if registered {
        let command = |alias: &str| format!("'{}' hook '{alias}'", bin.display());
        let settings = json!({"hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": [
                {"type": "command", "command": command("pre-tool-use")}]}],
            "SessionStart": [{"hooks": [
                {"type": "command", "command": command("session-start")}]}],
        }});
        w.write("home/.claude/settings.json", &settings.to_string());
    } else {
        w.write("home/.claude/settings.json", "{}\n");
    }
    w.chown_all();
    bin
}

/// One socket path per uid: tests that listen there take turns.
static KONTEXT_SOCKET: Mutex<()> = Mutex::new(());

/// A listening Unix socket on the host, owned by `uid`, that collects one line per
/// connection.
struct Listener {
    path: PathBuf,
    records: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start(path: &Path, uid: u32) -> Listener {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let records = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (records.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            use std::io::Read;
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut line = String::new();
                        let _ = conn.read_to_string(&mut line);
                        r.lock().unwrap().push_str(&line);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Listener {
            path: path.to_path_buf(),
            records,
            stop,
            thread: Some(thread),
        }
    }

    fn records(&self) -> String {
        self.records.lock().unwrap().clone()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The stand-in daemon on the host at `/tmp/kontext-managed-observe-UID/kontext.sock`,
/// its directory 0700, both owned by the test user (as Kontext's daemon lays it out).
struct KontextDaemon {
    listener: Option<Listener>,
    dir: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

fn socket_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/kontext-managed-observe-{uid}"))
}

/// Takes this uid's socket path for the test (no daemon yet), with a fresh directory owned
/// by `owner`.
fn take_socket_dir(uid: u32, owner: u32) -> KontextDaemon {
    let turn = KONTEXT_SOCKET.lock().unwrap_or_else(|e| e.into_inner());
    let dir = socket_dir(uid);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::lchown(&dir, Some(owner), Some(owner)).unwrap();
    KontextDaemon {
        listener: None,
        dir,
        _turn: turn,
    }
}

fn kontext_daemon(uid: u32) -> KontextDaemon {
    let mut d = take_socket_dir(uid, uid);
    d.listener = Some(Listener::start(&d.dir.join("kontext.sock"), uid));
    d
}

impl KontextDaemon {
    fn records(&self) -> String {
        self.listener
            .as_ref()
            .map(Listener::records)
            .unwrap_or_default()
    }

    /// Waits briefly for `want` to arrive (the hook's connection is handled in a thread).
    fn expect(&self, want: &str, context: &str) {
        let arrived = wait_for(5, || self.records().contains(want));
        assert!(arrived, "{context}: the daemon got {:?}", self.records());
    }
}

impl Drop for KontextDaemon {
    fn drop(&mut self) {
        drop(self.listener.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Python one-liner that tries to connect to a Unix socket and prints the outcome.
fn try_connect(path: &Path, tag: &str) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX)\n\
         try:\n    s.connect(\"{}\"); s.sendall(b\"{tag}\\n\"); print(\"{tag} reached\")\n\
         except OSError as e:\n    print(\"{tag} refused\", e.errno)'",
        path.display()
    )
}

#[test]
fn kontext_hook_reaches_its_socket_inside_with_either_network_and_nothing_adjacent() {
    for_each_user(|w| {
        let bin = install_kontext(w, true);
        let daemon = kontext_daemon(w.user.uid);
        // Adjacent host sockets: one beside Kontext's in its directory, one in /tmp.
        let beside = Listener::start(&daemon.dir.join("other.sock"), w.user.uid);
        let elsewhere = Listener::start(
            &PathBuf::from(format!("/tmp/{}.sock", unique("kontext-adjacent"))),
            w.user.uid,
        );
        for net in [&[][..], &["--block-net"][..]] {
            let mut flags = vec!["--kontext"];
            flags.extend_from_slice(net);
            let script = format!(
                "echo '{{\"tool_name\":\"Bash\",\"net\":\"{net:?}\"}}' | '{}' hook 'pre-tool-use' \
                 && echo hook-ok; {}; {}",
                bin.display(),
                try_connect(&beside.path, "beside"),
                try_connect(&elsewhere.path, "elsewhere"),
            );
            let o = run_sh(w, &flags, &script);
            let context = format!("{net:?}: {}\n{}", stdout(&o), stderr(&o));
            assert_code(&o, 0, &context);
            assert!(stdout(&o).contains("hook-ok"), "{context}");
            daemon.expect(r#"{"alias": "pre-tool-use", "tool": "Bash"}"#, &context);
            // Negative: the neighbouring host sockets stay out of reach.
            assert!(stdout(&o).contains("beside refused"), "{context}");
            assert!(stdout(&o).contains("elsewhere refused"), "{context}");
        }
        assert_eq!(beside.records(), "");
        assert_eq!(elsewhere.records(), "");
        assert_eq!(
            daemon.records().lines().count(),
            2,
            "one record per run: {}",
            daemon.records()
        );
        // The dry run lists it: enabled, its version, executable, registration and socket;
        // the socket is a read grant of its own and protected read-only.
        let (doc, _) = dry_run(w);
        let socket = daemon.dir.join("kontext.sock").display().to_string();
        assert_eq!(
            doc["runtime_controls"][0],
            json!({"service": "Kontext", "enabled": true, "version": KONTEXT_VERSION,
                   "path": bin.display().to_string(), "script": null,
                   "configuration": w.home.join(".claude/settings.json").display().to_string()})
        );
        let grants = doc["file_grants"].as_array().unwrap();
        assert!(grants
            .iter()
            .any(|g| g["path"] == socket && g["access"] == "read" && g["scope"] == "exact"));
        assert!(!grants
            .iter()
            .any(|g| g["path"] == daemon.dir.display().to_string()));
        assert!(doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == socket && p["kind"] == "read_only"));
    });
}

#[test]
fn kontext_socket_hook_and_registration_cannot_be_replaced_from_inside() {
    for_each_user(|w| {
        let bin = install_kontext(w, true);
        let daemon = kontext_daemon(w.user.uid);
        let socket = daemon.dir.join("kontext.sock");
        let settings = w.home.join(".claude/settings.json");
        let config = w.home.join(".config/kontext/profiles/test/managed.json");
        let before = |p: &Path| std::fs::read(p).unwrap();
        let (bin_bytes, settings_bytes, config_bytes) =
            (before(&bin), before(&settings), before(&config));
        let socket_ino = std::fs::symlink_metadata(&socket).unwrap().ino();
        let marker = w.root.join("planted-marker");
        // Every way the agent could swap the hook, its registration, its configuration
        // or the socket (so that the next hook talks to the agent instead).
        let attack = format!(
            "rm -f {s}; mv {d} {d}.moved; mv {s} /tmp/stolen.sock; \
             /usr/bin/python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"{s}\")'; \
             printf '#!/bin/sh\\ntouch {m}\\n' > {b}; rm -f {b}; \
             echo '{{}}' > {set}; rm -f {set}; echo '{{}}' > {cfg}; \
             echo '{{\"tool_name\":\"after\"}}' | '{b}' hook 'pre-tool-use' && echo still-reaches",
            s = socket.display(),
            d = daemon.dir.display(),
            m = marker.display(),
            b = bin.display(),
            set = settings.display(),
            cfg = config.display(),
        );
        let o = run_sh(w, &["--kontext", "--block-net"], &attack);
        let context = format!("{}\n{}", stdout(&o), stderr(&o));
        // Inside, after every attempt, the hook still reaches the real daemon.
        assert!(stdout(&o).contains("still-reaches"), "{context}");
        daemon.expect(r#"{"alias": "pre-tool-use", "tool": "after"}"#, &context);
        // The refusal report names the protection, and no flag (none lifts it).
        assert!(
            !stderr(&o).contains(&format!("--read-write {}", daemon.dir.display())),
            "{context}"
        );
        // Judged from the host: nothing changed.
        assert_eq!(std::fs::read(&bin).unwrap(), bin_bytes, "{context}");
        assert_eq!(
            std::fs::read(&settings).unwrap(),
            settings_bytes,
            "{context}"
        );
        assert_eq!(std::fs::read(&config).unwrap(), config_bytes, "{context}");
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        assert_eq!(meta.ino(), socket_ino, "the host socket was replaced");
        assert!(!PathBuf::from(format!("{}.moved", daemon.dir.display())).exists());
        // The hook runs outside afterwards as installed: its record arrives, and no
        // planted code ran.
        let mut outside = w.host("/bin/sh");
        outside.args([
            "-c",
            &format!(
                "echo '{{\"tool_name\":\"outside\"}}' | '{}' hook 'pre-tool-use'",
                bin.display()
            ),
        ]);
        assert!(outside.status().unwrap().success());
        daemon.expect(r#"{"alias": "pre-tool-use", "tool": "outside"}"#, "outside");
        assert!(!marker.exists(), "planted code ran outside");
    });
}

#[test]
fn kontext_flag_requires_a_healthy_installation_and_optional_failure_warns() {
    for_each_user(|w| {
        let marker = w.project.join("target-ran");
        let script = format!("touch {}", marker.display());
        let refused = |o: &Output, want: &str, what: &str| {
            assert_code(o, 125, what);
            let err = stderr(o);
            assert!(err.contains(want), "{what}: {err}");
            assert_eq!(
                err.lines().filter(|l| l.contains("Kontext")).count(),
                1,
                "{what}: one line: {err}"
            );
            assert!(!marker.exists(), "{what}: the target ran");
        };
        // No registration at all.
        install_kontext(w, false);
        let daemon = kontext_daemon(w.user.uid);
        let o = run_sh(w, &["--kontext"], &script);
        refused(
            &o,
            "sandy: --kontext requires installed hooks; install Kontext and run kontext setup, or omit --kontext",
            "no registration",
        );
        // Registered, but the doctor reports it unhealthy.
        install_kontext(w, true);
        w.write("home/.kontext-doctor.json", &kontext_report(w, false));
        let o = run_sh(w, &["--kontext"], &script);
        refused(&o, "sandy: Kontext runtime control failed: the configured self-serve installation is unhealthy", "unhealthy");
        assert!(
            stderr(&o).contains("sandy integrations setup kontext"),
            "{}",
            stderr(&o)
        );
        // Optional: one warning line, and the run goes on without the socket.
        let o = run_sh(
            w,
            &[],
            &format!(
                "{script}; {}",
                try_connect(&daemon.dir.join("kontext.sock"), "sock")
            ),
        );
        assert_code(&o, 0, "optional, unhealthy");
        assert!(
            stderr(&o).contains(
                "sandy: optional Kontext runtime control unavailable; continuing without it: \
                 the configured self-serve installation is unhealthy"
            ),
            "{}",
            stderr(&o)
        );
        assert!(marker.exists());
        assert!(stdout(&o).contains("sock refused"), "{}", stdout(&o));
        std::fs::remove_file(&marker).unwrap();
        let (doc, _) = dry_run(w);
        assert_eq!(doc["runtime_controls"][0]["enabled"], false);
        // Healthy, but the daemon is not running (no socket).
        w.write("home/.kontext-doctor.json", &kontext_report(w, true));
        drop(daemon);
        let turn = take_socket_dir(w.user.uid, w.user.uid);
        let o = run_sh(w, &["--kontext"], &script);
        refused(
            &o,
            "Kontext runtime control failed: cannot inspect the Kontext daemon socket",
            "no socket",
        );
        drop(turn);
        // A same-named socket planted by another user.
        let other = if w.user.uid == 0 { 12345 } else { 0 };
        let mut planted = take_socket_dir(w.user.uid, other);
        planted.listener = Some(Listener::start(&planted.dir.join("kontext.sock"), other));
        let o = run_sh(w, &["--kontext"], &script);
        refused(
            &o,
            "the Kontext daemon endpoint is not a same-user Unix socket",
            "planted",
        );
        assert_eq!(planted.records(), "");
        // An executable a sandboxed run could have written is never run on the host.
        drop(planted);
        let _daemon = kontext_daemon(w.user.uid);
        let planted_bin = w.project.join("tools/kontext");
        std::fs::create_dir_all(planted_bin.parent().unwrap()).unwrap();
        let host_marker = w.root.join("doctor-ran");
        std::fs::write(
            &planted_bin,
            format!(
                "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
                host_marker.display(),
                kontext_bin_of(w).display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&planted_bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let settings = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": format!("'{}' hook 'pre-tool-use'", planted_bin.display())}]}]}});
        w.write("home/.claude/settings.json", &settings.to_string());
        let o = run_sh(w, &["--kontext"], &script);
        refused(
            &o,
            "lies where a sandboxed run can write",
            "executable in the project",
        );
        assert!(
            !host_marker.exists(),
            "the planted executable ran on the host"
        );
        drop(_daemon);
        // And a plain file in the user's own directory is no socket either.
        install_kontext(w, true);
        let turn = take_socket_dir(w.user.uid, w.user.uid);
        std::fs::write(turn.dir.join("kontext.sock"), "").unwrap();
        std::os::unix::fs::lchown(turn.dir.join("kontext.sock"), Some(w.user.uid), None).unwrap();
        let o = run_sh(w, &["--kontext"], &script);
        refused(
            &o,
            "the Kontext daemon endpoint is not a same-user Unix socket",
            "file",
        );
    });
}

#[test]
fn doctor_kontext_and_integrations_setup_kontext() {
    for_each_user(|w| {
        let bin = install_kontext(w, false);
        let _daemon = kontext_daemon(w.user.uid);
        let path = format!("{}:/usr/bin:/bin", bin.parent().unwrap().display());
        let sandy = |args: &[&str]| {
            let mut cmd = w.sandy(args);
            cmd.env("PATH", &path);
            cmd.output().unwrap()
        };
        // Not registered: the doctor says so and changes nothing.
        let o = sandy(&["doctor", "--kontext"]);
        assert_code(&o, 1, "doctor before setup");
        assert!(
            stdout(&o).contains("--kontext requires installed hooks"),
            "{}",
            stdout(&o)
        );
        assert_eq!(
            std::fs::read_to_string(w.home.join(".claude/settings.json")).unwrap(),
            "{}\n"
        );
        // OpenCode is not a Kontext agent.
        let o = sandy(&["integrations", "setup", "kontext", "--agent", "opencode"]);
        assert_code(&o, 1, "opencode");
        assert!(stdout(&o).contains("claude and codex"), "{}", stdout(&o));
        // Setup runs `kontext setup` once, then verifies.
        let o = sandy(&["integrations", "setup", "kontext", "--agent", "claude"]);
        assert_code(&o, 0, &format!("setup: {}{}", stdout(&o), stderr(&o)));
        assert!(
            stdout(&o).contains("is now configured (1.4.2)"),
            "{}",
            stdout(&o)
        );
        assert_eq!(
            std::fs::read_to_string(w.home.join("kontext-setups")).unwrap(),
            "x\n"
        );
        let o = sandy(&["integrations", "setup", "kontext", "--agent", "claude"]);
        assert_code(&o, 0, "second setup");
        assert!(
            stdout(&o).contains("was already installed and configured"),
            "{}",
            stdout(&o)
        );
        assert_eq!(
            std::fs::read_to_string(w.home.join("kontext-setups")).unwrap(),
            "x\n"
        );
        let o = sandy(&["doctor", "--kontext"]);
        assert_code(&o, 0, "doctor after setup");
        assert_eq!(stdout(&o).trim(), "Kontext integration: available (1.4.2)");
        // Without kontext on PATH, setup says how to get it and installs nothing.
        w.write("home/.claude/settings.json", "{}\n");
        let mut cmd = w.sandy(["integrations", "setup", "kontext", "--agent", "codex"]);
        cmd.env("PATH", "/usr/bin:/bin");
        let o = cmd.output().unwrap();
        assert_code(&o, 1, "no kontext");
        assert!(
            stdout(&o).contains("kontext is not on PATH"),
            "{}",
            stdout(&o)
        );
    });
}

#[test]
fn claude_code_fires_a_kontext_pre_tool_use_hook_that_reaches_the_host_daemon() {
    let Some(agents) = claude_bin() else {
        return;
    };
    for_each_user(|w| {
        for block_net in [false, true] {
            let w = &World::new(w.user);
            install_kontext(w, true);
            let daemon = kontext_daemon(w.user.uid);
            w.write("home/.claude.json", "{}\n");
            let notes = w.project.join("notes.txt");
            let script = json!({
                "steps": [{"tool": "Bash", "input": {
                    "command": format!("echo hello > {}", notes.display()),
                    "description": "scripted step"}}],
                "final": "done",
            });
            let (_api, port) = fake_api(w, &script);
            let port_arg = port.to_string();
            let o = claude_prints(w, &["--kontext"], block_net, &port_arg, &agents);
            let context = format!(
                "block_net {block_net}\nstdout: {}\nstderr: {}",
                stdout(&o),
                stderr(&o)
            );
            assert_code(&o, 0, &context);
            assert_eq!(
                std::fs::read_to_string(&notes).unwrap_or_default(),
                "hello\n",
                "{context}"
            );
            // Judged on the host daemon: the PreToolUse record, with the tool Claude Code
            // named in the hook input.
            daemon.expect(r#"{"alias": "pre-tool-use", "tool": "Bash"}"#, &context);
        }
    });
}

// ---------------------------------------------------------------------------------------
// Codex's managed requirements (`/etc/codex/requirements.toml`): Numbat's managed block is
// recognised there. The test gives Sandy its own `/etc/codex` in a private mount namespace
// (the host's `/etc/codex` is only created empty as a mount point when absent).

/// Numbat's managed block, in the shape Numbat writes it into Codex's requirements.
fn numbat_requirements(bin: &Path, output: &Path) -> String {
    format!(
        "[features]\nhooks = true # numbat-managed\n\n\
         # BEGIN numbat managed codex hooks\n\
         [[hooks.PreToolUse]]\nmatcher = \".*\"\n\n\
         [[hooks.PreToolUse.hooks]]\ntype = \"command\"\n\
         command = \"'{}' hook codex-pre-tool --agent codex --installed-by=numbat --output=file --output-file '{}'\"\n\
         timeout = 10\n# END numbat managed codex hooks\n",
        bin.display(),
        output.display()
    )
}

/// `sandy ARGS` as the test user, with `etc_codex` mounted at `/etc/codex` for it only.
fn sandy_with_etc_codex(w: &World, etc_codex: &Path, args: &[&str]) -> Output {
    sandy_with_etc(w, "/etc/codex", etc_codex, args)
}

/// `sandy run --dry-run --kontext --profile claude -- /bin/true` with `etc` as
/// `/etc/claude-code`.
fn claude_managed_dry_run(w: &World, etc: &Path) -> Output {
    sandy_with_etc(
        w,
        "/etc/claude-code",
        etc,
        &[
            "run",
            "--dry-run",
            "--kontext",
            "--profile",
            "claude",
            "--",
            "/bin/true",
        ],
    )
}

/// `sandy ARGS` as the test user, in a private mount namespace where `dir` is mounted at
/// `target` (a system configuration directory; created empty on the host when absent).
fn sandy_with_etc(w: &World, target: &str, dir: &Path, args: &[&str]) -> Output {
    let _ = std::fs::create_dir(target);
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(format!(
            "mount --bind \"$0\" {target} && exec setpriv --reuid={} --regid={} --clear-groups -- \"$@\"",
            w.user.uid, w.user.gid
        ))
        .arg(dir)
        .arg(sandy_bin())
        .args(args)
        .current_dir(&w.project)
        .env_clear()
        .envs(w.base_env())
        .env("PATH", user_path(w))
        .stdin(Stdio::null());
    cmd.output().unwrap()
}

#[test]
fn numbats_managed_block_in_codex_requirements_is_recognised_and_records() {
    if !is_root() {
        skip("a private /etc/codex needs root (unshare, mount)");
        return;
    }
    for_each_user(|w| {
        let bin = install_numbat(w, &[]);
        // Only the managed block registers Numbat for Codex.
        w.write("home/.claude/settings.json", "{}\n");
        let output = w.home.join(".numbat/events.jsonl");
        let etc = w.root.join("etc-codex");
        std::fs::create_dir_all(&etc).unwrap();
        let requirements = etc.join("requirements.toml");
        std::fs::write(&requirements, numbat_requirements(&bin, &output)).unwrap();
        let o = sandy_with_etc_codex(
            w,
            &etc,
            &[
                "run",
                "--dry-run",
                "--numbat",
                "--profile",
                "codex",
                "--",
                "/bin/true",
            ],
        );
        assert_code(&o, 0, &format!("dry run: {}", stderr(&o)));
        let doc = parse_dry_run(&o.stdout, "dry run");
        let numbat: Vec<&Value> = doc["runtime_controls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["service"] == "Numbat" && c["enabled"] == true)
            .collect();
        assert_eq!(numbat.len(), 1, "{:#}", doc["runtime_controls"]);
        assert_eq!(numbat[0]["path"], bin.display().to_string());
        assert_eq!(numbat[0]["configuration"], "/etc/codex/requirements.toml");
        // It keeps recording inside with a blocked network, as Codex would run it.
        let hook = format!(
            "echo '{{}}' | '{}' hook codex-pre-tool --agent codex --installed-by=numbat \
             --output=file --output-file '{}'",
            bin.display(),
            output.display()
        );
        let o = sandy_with_etc_codex(
            w,
            &etc,
            &[
                "run",
                "--numbat",
                "--block-net",
                "--profile",
                "codex",
                "--",
                "/bin/sh",
                "-c",
                &hook,
            ],
        );
        assert_code(&o, 0, &format!("hook: {}", stderr(&o)));
        assert_eq!(
            std::fs::read_to_string(&output).unwrap(),
            "{\"event\":\"codex-pre-tool\",\"seq\":1}\n"
        );
        // Negative: without the managed block, --numbat has nothing to keep working.
        std::fs::write(&requirements, "[features]\nhooks = true\n").unwrap();
        let o = sandy_with_etc_codex(
            w,
            &etc,
            &["run", "--numbat", "--profile", "codex", "--", "/bin/true"],
        );
        assert_code(&o, 125, "no managed block");
        assert!(
            stderr(&o).contains("no Numbat hook is registered"),
            "{}",
            stderr(&o)
        );
    });
}

// ---------------------------------------------------------------------------------------
// OpenCode plugins installed from npm: named in `opencode.json`'s `plugin` array, loaded
// from OpenCode's cache (`packages/SPEC/node_modules/NAME`, or `node_modules/NAME` as
// older releases laid it out).

#[test]
fn opencode_npm_plugins_are_listed_and_their_packages_protected() {
    for_each_user(|w| {
        let cache = w.home.join(".cache/opencode");
        let current = cache.join("packages/opencode-acme-plugin@1.2.0");
        let current_pkg = current.join("node_modules/opencode-acme-plugin");
        let legacy_pkg = cache.join("node_modules/@acme/watch");
        let unrelated = cache.join("packages/unrelated/node_modules/unrelated");
        for dir in [&current_pkg, &legacy_pkg, &unrelated] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("index.js"), "export const P = async () => ({})\n").unwrap();
        }
        std::fs::create_dir_all(w.home.join(".config/opencode/local-plugin")).unwrap();
        // A commented configuration, as OpenCode accepts it.
        w.write(
            "home/.config/opencode/opencode.jsonc",
            "{\n  // monitoring\n  \"plugin\": [\n    \"opencode-acme-plugin@1.2.0\",\n    \
             {\"package\": \"@acme/watch\", \"options\": {}},\n    \"not-installed-plugin\",\n    \
             \"./local-plugin\",\n  ],\n}\n",
        );
        w.chown_all();
        let (doc, err) = dry_run_as(w, "opencode");
        let config = w
            .home
            .join(".config/opencode/opencode.jsonc")
            .display()
            .to_string();
        let listed: Vec<String> = hooks_in(&doc)
            .iter()
            .filter(|h| h["configuration"] == config)
            .map(|h| h["path"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            listed,
            vec![
                current_pkg.display().to_string(),
                legacy_pkg.display().to_string(),
                w.home
                    .join(".config/opencode/local-plugin")
                    .display()
                    .to_string(),
            ],
            "{:#}",
            doc["runtime_controls"]
        );
        assert!(
            err.contains(&format!(
                "sandy: note: a plugin registered in {config} cannot be resolved before launch: \
                 the npm plugin 'not-installed-plugin' is not installed in {}",
                cache.display()
            )),
            "{err}"
        );
        let protected = |p: &Path| {
            doc["protections"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["path"] == p.display().to_string() && x["kind"] == "read_only")
        };
        assert!(protected(&current), "{:#}", doc["protections"]);
        assert!(protected(&legacy_pkg), "{:#}", doc["protections"]);
        assert!(!protected(&unrelated));
        // Inside: the plugins load (readable) but cannot be rewritten or replaced; a
        // package the configuration does not name stays as writable as the rest of the
        // cache.
        let script = format!(
            "cat {a}/index.js >/dev/null && echo loads; \
             echo 'evil()' > {a}/index.js; echo 'evil()' > {b}/index.js; \
             mv {c} {c}.x; rm -rf {c}; echo ok > {u}/index.js && echo unrelated-writable",
            a = current_pkg.display(),
            b = legacy_pkg.display(),
            c = current.display(),
            u = unrelated.display(),
        );
        let mut cmd = w.sandy([
            "run",
            "--profile",
            "opencode",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ]);
        cmd.env("PATH", user_path(w));
        let o = cmd.output().unwrap();
        let context = format!("{}\n{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("loads"), "{context}");
        assert!(stdout(&o).contains("unrelated-writable"), "{context}");
        // Judged from the host.
        let original = "export const P = async () => ({})\n";
        assert_eq!(
            std::fs::read_to_string(current_pkg.join("index.js")).unwrap(),
            original,
            "{context}"
        );
        assert_eq!(
            std::fs::read_to_string(legacy_pkg.join("index.js")).unwrap(),
            original,
            "{context}"
        );
        assert!(current.is_dir() && !PathBuf::from(format!("{}.x", current.display())).exists());
    });
}

#[test]
fn kontext_registered_in_claude_managed_settings_is_recognised() {
    if !is_root() {
        skip("a private /etc/claude-code needs root (unshare, mount)");
        return;
    }
    for_each_user(|w| {
        let bin = install_kontext(w, true);
        // Only the managed settings register it.
        let user_settings = w.home.join(".claude/settings.json");
        let registration = std::fs::read_to_string(&user_settings).unwrap();
        std::fs::write(&user_settings, "{}\n").unwrap();
        let etc = w.root.join("etc-claude-code");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("managed-settings.json"), &registration).unwrap();
        let daemon = kontext_daemon(w.user.uid);
        let o = claude_managed_dry_run(w, &etc);
        assert_code(&o, 0, &format!("dry run: {}", stderr(&o)));
        let doc = parse_dry_run(&o.stdout, "dry run");
        assert_eq!(doc["runtime_controls"][0]["enabled"], true);
        assert_eq!(
            doc["runtime_controls"][0]["path"],
            bin.display().to_string()
        );
        assert_eq!(
            doc["runtime_controls"][0]["configuration"],
            "/etc/claude-code/managed-settings.json"
        );
        let hook = format!(
            "echo '{{\"tool_name\":\"managed\"}}' | '{}' hook 'pre-tool-use'",
            bin.display()
        );
        let o = sandy_with_etc(
            w,
            "/etc/claude-code",
            &etc,
            &[
                "run",
                "--kontext",
                "--block-net",
                "--profile",
                "claude",
                "--",
                "/bin/sh",
                "-c",
                &hook,
            ],
        );
        assert_code(&o, 0, &format!("hook: {}", stderr(&o)));
        daemon.expect(r#"{"alias": "pre-tool-use", "tool": "managed"}"#, "managed");
        // Negative: without the managed registration, --kontext has no evidence.
        std::fs::write(etc.join("managed-settings.json"), "{}\n").unwrap();
        let o = sandy_with_etc(
            w,
            "/etc/claude-code",
            &etc,
            &["run", "--kontext", "--profile", "claude", "--", "/bin/true"],
        );
        assert_code(&o, 125, "no managed registration");
        // The drop-in directory, read after it in name order (a file not named .json is
        // not read).
        std::fs::create_dir_all(etc.join("managed-settings.d")).unwrap();
        std::fs::write(etc.join("managed-settings.d/README"), "not settings\n").unwrap();
        std::fs::write(
            etc.join("managed-settings.d/20-kontext.json"),
            &registration,
        )
        .unwrap();
        let o = claude_managed_dry_run(w, &etc);
        assert_code(&o, 0, &format!("drop-in dry run: {}", stderr(&o)));
        let doc = parse_dry_run(&o.stdout, "drop-in dry run");
        assert_eq!(
            doc["runtime_controls"][0]["configuration"],
            "/etc/claude-code/managed-settings.d/20-kontext.json"
        );
    });
}

#[test]
fn kontext_in_codex_hooks_is_recognised_in_codex_shape_only() {
    for_each_user(|w| {
        let bin = install_kontext(w, false);
        w.write("home/.kontext-doctor.json", &kontext_report(w, true));
        let _daemon = kontext_daemon(w.user.uid);
        let codex_hooks = |alias_words: &str| {
            json!({"hooks": {"PreToolUse": [{"hooks": [{"type": "command",
                "command": format!("'{}' hook {alias_words}", bin.display())}]}]}})
            .to_string()
        };
        let hooks = w.home.join(".codex/hooks.json");
        let dry = |w: &World| {
            let mut cmd = w.sandy([
                "run",
                "--dry-run",
                "--kontext",
                "--profile",
                "codex",
                "--",
                "/bin/true",
            ]);
            cmd.env("PATH", user_path(w));
            cmd.output().unwrap()
        };
        // Codex's shape: `--agent codex` before the alias.
        w.write(
            "home/.codex/hooks.json",
            &codex_hooks("--agent codex pre-tool-use"),
        );
        let o = dry(w);
        assert_code(&o, 0, &stderr(&o));
        let doc = parse_dry_run(&o.stdout, "codex dry run");
        assert_eq!(doc["runtime_controls"][0]["enabled"], true);
        assert_eq!(
            doc["runtime_controls"][0]["configuration"],
            hooks.display().to_string()
        );
        // Claude's shape in Codex's file is not Kontext's registration for Codex.
        w.write("home/.codex/hooks.json", &codex_hooks("pre-tool-use"));
        let o = dry(w);
        assert_code(&o, 125, "claude shape in codex hooks");
        assert!(
            stderr(&o).contains("--kontext requires installed hooks"),
            "{}",
            stderr(&o)
        );
        // doctor --agent without --numbat or --kontext is a usage error.
        let o = w.sandy(["doctor", "--agent", "codex"]).output().unwrap();
        assert_code(&o, 2, "doctor --agent alone");
    });
}
