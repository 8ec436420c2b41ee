#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every host a real agent CLI tries must be one its profile classifies: allowed by
//! `--net agent` (model API, login, service) or explicitly left out (telemetry, update
//! checks, plugin marketplaces, notices, a default host a base URL replaced). The agent
//! runs through the real `sandy` binary under `--net agent --net-log` against the
//! offline stand-in model API, through the paths that make it talk: a first launch in a
//! fresh home, a prompt with a tool call, the terminal UI, a login start and `--version`.
//! A CLI update that starts contacting a new host fails here with the host named.
//!
//! Judged from outside: the proxy's own log (every request, refused ones included, by
//! name), the file the tool call made in the project, and the summary on stderr.
//!
//! Each world gets its own network and mount namespace (`unshare -n -m`, so root is
//! needed): the stand-in listens on 198.51.100.7 inside it, named `api.stand-in.test` by
//! a hosts file bind-mounted over `/etc/hosts`. No other name resolves and no address
//! outside is reachable, so every other host the CLI tries ends as a refusal or a failed
//! lookup in the log. Sandy runs as root and as the unprivileged user.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use common::*;
use serde_json::Value;

const API_HOST: &str = "api.stand-in.test";
const MADE: &str = "made-by-the-agent.txt";

/// Down arrow, Up arrow, Enter, Ctrl-C as a terminal sends them.
const DOWN: &str = "\\033[B";
const UP: &str = "\\033[A";
const ENTER: &str = "\\r";
const CTRL_C: &str = "\\003";

/// One run of the agent inside Sandy.
struct Scenario<'a> {
    what: &'a str,
    /// Home-relative files written before this run.
    files: &'a [(&'a str, &'a str)],
    env: &'a [(&'a str, &'a str)],
    /// The shell command inside the sandbox (the base URL variable is set).
    command: &'a str,
    /// `None`: no terminal, stdin from /dev/null. `Some`: in a terminal (`script(1)`),
    /// with these keys typed after the given number of seconds, in order.
    keys: Option<&'a [(u32, &'a str)]>,
    /// The run is ended after this many seconds.
    limit: u32,
}

struct Agent<'a> {
    name: &'a str,
    base_var: &'a str,
    /// What follows host:port in the base URL.
    base_path: &'a str,
    /// The one tool call the stand-in asks for: its name and input.
    tool: Value,
    scenarios: &'a [Scenario<'a>],
    /// Hosts the CLI is known to try with these scenarios and `--net agent` leaves out:
    /// at least one of them must show up refused, so that the check cannot pass empty.
    some_refused: &'a [&'a str],
}

fn ready() -> bool {
    own_network_ready("agent endpoint")
}

/// Whether a dry-run pattern (`host`, `*.domain`, with an optional `:PORT`; without one,
/// 80 and 443) names this destination.
fn pattern_names(pattern: &str, host: &str, port: u64) -> bool {
    let (name, ports) = match pattern.rsplit_once(':') {
        Some((h, p)) if p.parse::<u64>().is_ok() => (h, vec![p.parse::<u64>().unwrap()]),
        _ => (pattern, vec![80, 443]),
    };
    ports.contains(&port)
        && (name == host
            || name
                .strip_prefix("*.")
                .is_some_and(|d| host.ends_with(&format!(".{d}"))))
}

/// The profile's left-out destinations and allow rules, from the dry run with the same
/// base URL variable set.
fn classification(w: &World, agent: &Agent<'_>) -> (Vec<(String, String)>, Vec<String>) {
    let mut cmd = w.sandy([
        "run",
        "--dry-run",
        "--profile",
        agent.name,
        "--net",
        "agent",
        "--",
        "true",
    ]);
    cmd.env(
        agent.base_var,
        format!("http://{API_HOST}:1{}", agent.base_path),
    );
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    let doc = parse_dry_run(&o.stdout, "dry run");
    let left_out = dry_run_left_out(&doc);
    let allowed = doc["egress"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "allow")
        .map(|r| r["pattern"].as_str().unwrap().to_owned())
        .collect();
    (left_out, allowed)
}

/// Runs every scenario in one test network and returns (per scenario) the log lines,
/// the combined output and Sandy's stderr.
fn observe(w: &World, agent: &Agent<'_>) -> Vec<(Vec<Value>, String)> {
    use std::os::unix::fs::PermissionsExt;
    let dir = w.root.join("observe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("hosts"),
        format!("127.0.0.1 localhost\n::1 localhost\n198.51.100.7 {API_HOST}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("fake.py"), helper_text("fake_model_api.py")).unwrap();
    std::fs::write(
        dir.join("script.json"),
        serde_json::json!({"steps": [agent.tool], "final": "The agent is done."}).to_string(),
    )
    .unwrap();
    let d = dir.display();
    let user = w.setpriv_prefix();
    let path = agent_path(agent.name);
    let mut runs = String::new();
    for (i, s) in agent.scenarios.iter().enumerate() {
        for (file, text) in s.files {
            w.write(format!("home/{file}"), text);
        }
        w.write(format!("home/project/scenario-{i}.sh"), s.command);
        let mut env: Vec<String> = w
            .base_env()
            .into_iter()
            .filter(|(k, _)| k != "PATH")
            .map(|(k, v)| format!("{k}={}", shell_quote(&v)))
            .collect();
        env.push(format!("PATH={}", shell_quote(&path)));
        env.push("TERM=xterm-256color".to_owned());
        env.extend(s.env.iter().map(|(k, v)| format!("{k}={}", shell_quote(v))));
        let runner = format!(
            "#!/bin/sh\ncd {project}\nexec env -i {env} {var}=\"http://{API_HOST}:$(cat {d}/port){path}\" {sandy} run --profile {name} --net agent --net-log {d}/net-{i}.jsonl -- /bin/sh scenario-{i}.sh\n",
            project = shell_quote(&w.project.display().to_string()),
            env = env.join(" "),
            var = agent.base_var,
            path = agent.base_path,
            sandy = sandy_bin().display(),
            name = agent.name,
        );
        let runner_path = dir.join(format!("run-{i}.sh"));
        std::fs::write(&runner_path, runner).unwrap();
        std::fs::set_permissions(&runner_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = runner_path.display();
        let limit = s.limit;
        match s.keys {
            None => runs.push_str(&format!(
                "timeout -k 5 {limit} {user}{r} > {d}/out-{i} 2>&1 < /dev/null\necho \"exit=$?\" >> {d}/out-{i}\n"
            )),
            Some(keys) => {
                let typed: String = keys
                    .iter()
                    .map(|(secs, k)| format!("sleep {secs}; printf '{k}'; "))
                    .collect();
                // The terminal's input stays open until the run is ended, no longer.
                let typing: u32 = keys.iter().map(|(secs, _)| secs).sum();
                let rest = limit.saturating_sub(typing).max(1);
                runs.push_str(&format!(
                    "( {typed}sleep {rest} ) | timeout -k 5 {limit} {user}script -qfec {r} /dev/null > {d}/out-{i} 2>&1\necho \"exit=$?\" >> {d}/out-{i}\n"
                ));
            }
        }
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "set -u
ip link set lo up
{internet}mount --bind {d}/hosts /etc/hosts
FAKE_MODEL_API_BIND=198.51.100.7 nsenter -t $INET -n /usr/bin/python3 {d}/fake.py {d} {d}/script.json > {d}/port.json 2>/dev/null &
i=0; while [ ! -s {d}/port.json ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"port\"])' {d}/port.json > {d}/port
chmod 644 {d}/port
{runs}
kill $(jobs -p) $INET 2>/dev/null
true
",
        internet = internet_namespace(&["198.51.100.7"]),
    );
    let cmd = in_own_network(&script);
    let total: u32 = agent.scenarios.iter().map(|s| s.limit + 10).sum();
    let o = run_timeout(cmd, u64::from(total) + 30);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    (0..agent.scenarios.len())
        .map(|i| {
            let lines = std::fs::read_to_string(dir.join(format!("net-{i}.jsonl")))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let out = std::fs::read_to_string(dir.join(format!("out-{i}"))).unwrap_or_default();
            (lines, out)
        })
        .collect()
}

fn every_host_is_classified(agent: &Agent<'_>) {
    if !ready() {
        return;
    }
    if !agent_installed(agent.name) {
        return;
    }
    for_each_user(|w| {
        let (left_out, allowed) = classification(w, agent);
        let results = observe(w, agent);
        let mut seen = Vec::new();
        let mut refused_known = Vec::new();
        for (s, (lines, out)) in agent.scenarios.iter().zip(&results) {
            let context = format!(
                "[{} {}, {}]\noutput:\n{out}\nlog:\n{lines:#?}",
                agent.name, w.user.label, s.what
            );
            for l in lines {
                let host = l["host"].as_str().unwrap_or_default();
                let port = l["port"].as_u64().unwrap_or_default();
                seen.push(format!("{host}:{port} {}", l["decision"]));
                match l["decision"].as_str() {
                    // Allowed (connected, or allowed but unreachable offline): by a rule
                    // of --net agent, which names this destination.
                    Some("allow" | "error") => {
                        let rule = l["rule"].as_str().unwrap_or_default();
                        if rule.starts_with("base URL ") {
                            assert_eq!(host, API_HOST, "{context}");
                        } else {
                            assert!(
                                rule.starts_with("profile endpoint "),
                                "{host}:{port} allowed by {rule:?}\n{context}"
                            );
                            assert!(
                                allowed.iter().any(|p| pattern_names(p, host, port)),
                                "{host}:{port} allowed, but no dry-run rule names it\n{context}"
                            );
                        }
                    }
                    Some("deny") => {
                        let known = left_out.iter().find(|(p, _)| pattern_names(p, host, port));
                        let Some((_, note)) = known else {
                            panic!(
                                "{} contacted {host}:{port}, which its profile does not \
                                 classify: add it to [network] endpoints with its kind \
                                 (crates/sandy-policy/profiles/{}.toml)\n{context}",
                                agent.name, agent.name
                            );
                        };
                        let reason = l["reason"].as_str().unwrap_or_default();
                        assert!(reason.contains(note.as_str()), "{reason}\n{context}");
                        refused_known.push(host.to_owned());
                    }
                    other => panic!("decision {other:?}\n{context}"),
                }
            }
        }
        let context = format!(
            "[{} {}] destinations: {seen:?}\noutputs:\n{}",
            agent.name,
            w.user.label,
            results
                .iter()
                .map(|r| r.1.as_str())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        // The runs worked: the stand-in was reached through its base URL rule, and the
        // tool call made its file in the project.
        assert!(
            results
                .iter()
                .flat_map(|r| &r.0)
                .any(|l| l["host"] == API_HOST
                    && l["decision"] == "allow"
                    && l["rule"].as_str().unwrap_or("").starts_with("base URL")),
            "{context}"
        );
        assert!(w.project.join(MADE).exists(), "no tool call ran\n{context}");
        // And the check saw something to classify.
        assert!(
            agent
                .some_refused
                .iter()
                .any(|h| refused_known.iter().any(|r| r == h)),
            "none of {:?} was refused\n{context}",
            agent.some_refused
        );
        eprintln!("[{} {}] destinations: {seen:?}", agent.name, w.user.label);
    });
}

const CLAUDE_ONBOARDED: &str =
    "{\"hasCompletedOnboarding\": true, \"lastOnboardingVersion\": \"2.1.332\"}\n";

#[test]
fn claude_code_contacts_only_hosts_its_profile_classifies() {
    let key = [("ANTHROPIC_API_KEY", "sk-ant-sandy-test-0123456789")];
    every_host_is_classified(&Agent {
        name: "claude",
        base_var: "ANTHROPIC_BASE_URL",
        base_path: "",
        tool: serde_json::json!({"tool": "Bash", "input": {"command": format!("echo made > {MADE}")}}),
        scenarios: &[
            Scenario {
                what: "--version",
                files: &[],
                env: &[],
                command: "claude --version",
                keys: None,
                limit: 30,
            },
            Scenario {
                what: "first launch in a fresh home (onboarding)",
                files: &[],
                env: &[],
                command: "claude",
                keys: Some(&[(10, ENTER), (4, ENTER), (4, CTRL_C), (1, CTRL_C)]),
                limit: 25,
            },
            Scenario {
                what: "-p with a tool call",
                files: &[],
                env: &key,
                command: "claude -p 'make the file' --allowedTools Bash",
                keys: None,
                limit: 90,
            },
            Scenario {
                what: "interactive session, then /login",
                files: &[(".claude.json", CLAUDE_ONBOARDED)],
                env: &key,
                command: "claude",
                keys: Some(&[
                    (10, DOWN),
                    (0, ENTER),
                    (4, UP),
                    (0, ENTER),
                    (5, "hello"),
                    (0, ENTER),
                    (8, "/login"),
                    (1, ENTER),
                    (3, ENTER),
                    (4, CTRL_C),
                    (1, CTRL_C),
                ]),
                limit: 45,
            },
        ],
        some_refused: &["api.anthropic.com", "raw.githubusercontent.com"],
    });
}

#[test]
fn codex_contacts_only_hosts_its_profile_classifies() {
    let key = [("OPENAI_API_KEY", "sk-sandy-test")];
    every_host_is_classified(&Agent {
        name: "codex",
        base_var: "OPENAI_BASE_URL",
        base_path: "/v1",
        tool: serde_json::json!({"tool": "exec_command", "input": {"cmd": format!("echo made > {MADE}")}}),
        scenarios: &[
            Scenario {
                what: "--version",
                files: &[],
                env: &[],
                command: "codex --version",
                keys: None,
                limit: 30,
            },
            Scenario {
                what: "exec with a tool call",
                files: &[(".codex/config.toml", "model = \"gpt-5\"\n")],
                env: &key,
                command: "codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -c openai_base_url=\"\\\"$OPENAI_BASE_URL\\\"\" 'make the file'",
                keys: None,
                limit: 90,
            },
            Scenario {
                what: "login start (browser and device code)",
                files: &[],
                env: &[],
                command: "timeout 5 codex login; timeout 5 codex login --device-auth; true",
                keys: None,
                limit: 30,
            },
            Scenario {
                what: "first interactive launch, sign-in screen",
                files: &[],
                env: &key,
                command: "codex --dangerously-bypass-approvals-and-sandbox -c openai_base_url=\"\\\"$OPENAI_BASE_URL\\\"\"",
                keys: Some(&[(10, ENTER), (4, ENTER), (4, CTRL_C), (1, CTRL_C)]),
                limit: 25,
            },
        ],
        some_refused: &["ab.chatgpt.com", "api.github.com", "github.com"],
    });
}

#[test]
fn gemini_cli_contacts_only_hosts_its_profile_classifies() {
    let key = [
        ("GEMINI_API_KEY", "sandy-test"),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
    ];
    every_host_is_classified(&Agent {
        name: "gemini",
        base_var: "GOOGLE_GEMINI_BASE_URL",
        base_path: "",
        tool: serde_json::json!({"tool": "run_shell_command", "input": {"command": format!("echo made > {MADE}"), "description": "make the file"}}),
        scenarios: &[
            Scenario {
                what: "--version",
                files: &[],
                env: &[],
                command: "gemini --version",
                keys: None,
                limit: 30,
            },
            Scenario {
                what: "first launch: trust and sign-in choice",
                files: &[],
                env: &[],
                command: "gemini",
                keys: Some(&[(12, ENTER), (4, ENTER), (5, CTRL_C), (1, CTRL_C)]),
                limit: 30,
            },
            Scenario {
                what: "-p with a tool call, telemetry left at its default",
                files: &[(
                    ".gemini/settings.json",
                    r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
                )],
                env: &key,
                command: "gemini --yolo -p 'make the file'",
                keys: None,
                limit: 90,
            },
        ],
        some_refused: &["play.googleapis.com", "registry.npmjs.org"],
    });
}

#[test]
fn opencode_contacts_only_hosts_its_profile_classifies() {
    // OpenCode reads a custom provider's base URL from its configuration; the runner
    // sets OPENAI_BASE_URL to the stand-in (replacing api.openai.com in --net agent) and
    // the configuration points the provider at the same URL.
    const RUN: &str = r#"OPENCODE_CONFIG_CONTENT="{\"provider\":{\"fake\":{\"npm\":\"@ai-sdk/openai-compatible\",\"name\":\"stand-in\",\"options\":{\"baseURL\":\"$OPENAI_BASE_URL\",\"apiKey\":\"dummy\"},\"models\":{\"m\":{\"name\":\"m\"}}}},\"model\":\"fake/m\",\"permission\":{\"bash\":\"allow\",\"edit\":\"allow\"}}" opencode run 'make the file'"#;
    every_host_is_classified(&Agent {
        name: "opencode",
        base_var: "OPENAI_BASE_URL",
        base_path: "/v1",
        tool: serde_json::json!({"tool": "bash", "input": {"command": format!("echo made > {MADE}"), "description": "make the file"}}),
        scenarios: &[
            Scenario {
                what: "--version",
                files: &[],
                env: &[],
                command: "opencode --version",
                keys: None,
                limit: 30,
            },
            Scenario {
                what: "run with a tool call",
                files: &[],
                env: &[],
                command: RUN,
                keys: None,
                limit: 90,
            },
            Scenario {
                what: "terminal UI, first launch",
                files: &[],
                env: &[],
                command: "opencode",
                keys: Some(&[(12, CTRL_C), (1, CTRL_C)]),
                limit: 20,
            },
            Scenario {
                what: "auth login start",
                files: &[],
                env: &[],
                command: "opencode auth login",
                keys: Some(&[(8, ENTER), (3, CTRL_C), (1, CTRL_C)]),
                limit: 20,
            },
        ],
        some_refused: &["registry.npmjs.org", "api.github.com"],
    });
}
