#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Agent state is default-deny: inside Sandy only the names a profile classifies as
//! writable, watched or login stay writable in an agent's state directories, and every
//! other name there is read-only. This suite derives the classification's input from the
//! real agent CLI. It runs each CLI outside Sandy, as root, in a fresh home, under strace.
//! The scenarios are the ones agent_endpoints.rs runs: `--version`, the first launch
//! (onboarding), a prompt with one tool call, the terminal UI, a login start and a second
//! launch in the same home. `helpers/trace_paths.py` reduces the traces to the paths each
//! scenario wrote, read or only probed below the state directories. Then the real `sandy`
//! binary's dry run (`agent_state`) is asked for the classification. A path the agent
//! writes must be covered by a writable, watched or login rule, or it would break inside
//! Sandy. A path it reads or probes must be covered by some rule, or a CLI update reads
//! something new at launch. The failure names every such path at once, with the profile
//! to edit.
//!
//! Each agent gets its own network, mount and PID namespace (`unshare`, so root is
//! needed). The stand-in model API listens on 198.51.100.7 there, named
//! `api.stand-in.test` by a hosts file bound over `/etc/hosts`. Interactive scenarios run
//! in tmux, which answers the terminal queries the TUIs wait for. Needs strace, tmux and
//! the agent CLIs (`scripts/install-agents.sh`); without them a reported skip (a failure
//! in CI). `SANDY_OBSERVED_STATE_DIR=DIR` also writes each agent's observed paths to
//! `DIR/AGENT.txt`.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

const API_HOST: &str = "api.stand-in.test";
const MADE: &str = "made-by-the-agent.txt";

/// The system calls traced: every call that names a file (the reducer's input), plus
/// chdir, fchdir and the clone family (a process's working directory, for relative
/// names) and io_uring_setup (file operations strace would not see).
const TRACED: &str = "open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,\
unlink,unlinkat,rmdir,symlink,symlinkat,link,linkat,truncate,chmod,fchmod,fchmodat,\
utimensat,newfstatat,statx,lstat,stat,access,faccessat,faccessat2,readlink,readlinkat,\
getdents64,inotify_add_watch,chdir,fchdir,clone,clone3,fork,vfork,io_uring_setup";

/// One key press in a terminal scenario: a tmux key name (`Enter`, `Down`, `C-c`), or
/// `-l TEXT` for literal text.
type Key<'a> = &'a str;

/// A step of a terminal scenario: wait until the screen shows `wait` (or, when it is
/// empty, `secs` seconds), then type `keys`. A text that does not show within `secs`
/// fails the test, since the scenario did not do what it is for.
struct Step<'a> {
    wait: &'a str,
    secs: u32,
    keys: &'a [Key<'a>],
}

/// One run of the agent (outside Sandy, under strace).
struct Scenario<'a> {
    what: &'a str,
    /// JSON objects merged into home-relative files before this run (what a user sets).
    merge: &'a [(&'a str, &'a str)],
    env: &'a [(&'a str, &'a str)],
    /// The shell command, in the project (the base URL variable is set).
    command: &'a str,
    /// `None`: no terminal, stdin from /dev/null. `Some`: in tmux, these steps.
    steps: Option<&'a [Step<'a>]>,
    /// The run is ended after this many seconds.
    limit: u32,
}

/// A directory (or file) whose paths are reported: a label (`~/.claude`), its path
/// relative to the home, and whether the dry run's `agent_state` must classify it.
/// A single-file state root and a cache the profile handles otherwise are reported only.
struct Root<'a> {
    label: &'a str,
    home_relative: &'a str,
    checked: bool,
}

struct Agent<'a> {
    name: &'a str,
    base_var: &'a str,
    /// What follows host:port in the base URL.
    base_path: &'a str,
    /// The one tool call the stand-in asks for: its name and input.
    tool: Value,
    roots: &'a [Root<'a>],
    /// Writes Sandy refuses on purpose (a path relative to the home, covering everything
    /// below it, and why): the agent goes on without them, which agents.rs checks.
    refused: &'a [(&'a str, &'a str)],
    scenarios: &'a [Scenario<'a>],
}

/// One path the reducer reported.
#[derive(Debug)]
struct Observed {
    root: String,
    path: String,
    kind: String,
    /// The scenarios where it had its kind.
    scenarios: Vec<String>,
    /// The paths it stands for, as they were (before per-session names were collapsed),
    /// each with its kind: what the rules are matched against.
    raw: Vec<(String, String)>,
}

/// Whether this run can observe: root (own namespaces), strace and tmux, the CLI.
fn ready(agent: &str) -> bool {
    if !own_network_ready("agent state observation") || !agent_installed(agent) {
        return false;
    }
    for (tool, arg) in [("strace", "-V"), ("tmux", "-V")] {
        if Command::new(tool).arg(arg).output().is_err() {
            skip(&format!("{tool} is not installed"));
            return false;
        }
    }
    true
}

/// Deep-merges a JSON object (argument 2) into the JSON file (argument 1).
const MERGE_PY: &str = "import json, os, sys
p = sys.argv[1]
os.makedirs(os.path.dirname(p), exist_ok=True)
try:
    a = json.load(open(p))
except Exception:
    a = {}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v
merge(a, json.load(open(sys.argv[2])))
json.dump(a, open(p, 'w'), indent=2)
";

/// Shell functions for the terminal scenarios, on the tmux server at socket S: `dead S`
/// (the pane's command ended) and `wait_for S TEXT SECS` (prints `== saw: TEXT`, or `== missed: TEXT` and the screen).
const TMUX_SH: &str = r#"dead() { [ "$(tmux -S "$1" display -p '#{pane_dead}' 2>/dev/null)" != 0 ]; }
wait_for() {
  n=0
  while [ $n -lt $(( $3 * 4 )) ]; do
    if [ -n "$2" ] && tmux -S "$1" capture-pane -p -J -S -1000 | grep -qF -- "$2"; then
      sleep 1; echo "== saw: $2"; return 0
    fi
    dead "$1" && break
    sleep 0.25; n=$((n+1))
  done
  if [ -n "$2" ]; then echo "== missed: $2"; tmux -S "$1" capture-pane -p -J; fi
}
"#;

/// Runs every scenario in one network, one home, and returns the reducer's paths.
fn observe(w: &World, agent: &Agent<'_>) -> Vec<Observed> {
    let dir = w.root.join("observe");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    std::fs::write(
        dir.join("hosts"),
        format!("127.0.0.1 localhost\n::1 localhost\n198.51.100.7 {API_HOST}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("fake.py"), helper_text("fake_model_api.py")).unwrap();
    std::fs::write(dir.join("merge.py"), MERGE_PY).unwrap();
    std::fs::write(
        dir.join("script.json"),
        serde_json::json!({"steps": [agent.tool], "final": "The agent is done."}).to_string(),
    )
    .unwrap();
    let path = agent_path(agent.name);
    let mut runs = String::new();
    for (i, s) in agent.scenarios.iter().enumerate() {
        for (j, (file, json)) in s.merge.iter().enumerate() {
            let payload = dir.join(format!("merge-{i}-{j}.json"));
            std::fs::write(&payload, json).unwrap();
            runs.push_str(&format!(
                "{PYTHON} {d}/merge.py {} {}\n",
                shell_quote(&w.home.join(file).display().to_string()),
                payload.display()
            ));
        }
        std::fs::write(dir.join(format!("scenario-{i}.sh")), s.command).unwrap();
        let mut env: Vec<String> = w
            .base_env()
            .into_iter()
            .filter(|(k, _)| k != "PATH")
            .map(|(k, v)| format!("{k}={}", shell_quote(&v)))
            .collect();
        env.push(format!("PATH={}", shell_quote(&path)));
        env.push("TERM=xterm-256color".to_owned());
        // libuv's io_uring would do file operations strace does not see.
        env.push("UV_USE_IO_URING=0".to_owned());
        env.extend(s.env.iter().map(|(k, v)| format!("{k}={}", shell_quote(v))));
        let runner = format!(
            "#!/bin/sh\ncd {project}\nexec strace -f -y -qq -o {d}/trace-{i}.log -e trace={TRACED} env -i {env} {var}=\"http://{API_HOST}:$(cat {d}/port){base}\" /bin/sh {d}/scenario-{i}.sh\n",
            project = shell_quote(&w.project.display().to_string()),
            env = env.join(" "),
            var = agent.base_var,
            base = agent.base_path,
        );
        let runner_path = dir.join(format!("run-{i}.sh"));
        std::fs::write(&runner_path, runner).unwrap();
        std::fs::set_permissions(
            &runner_path,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let r = runner_path.display();
        let limit = s.limit;
        runs.push_str(&format!(
            "echo \"== {} $(date +%s)\" >> {d}/times\n",
            s.what
        ));
        match s.steps {
            None => runs.push_str(&format!(
                "timeout -k 5 {limit} {r} > {d}/out-{i} 2>&1 < /dev/null\necho \"exit=$?\" >> {d}/out-{i}\n"
            )),
            Some(steps) => {
                // A tmux server of its own (its socket in the world, removed with it);
                // the pane stays after its command ends, so that its screen and status
                // can be read.
                let t = format!("{d}/tmux-{i}");
                runs.push_str(&format!(
                    "tmux -S {t} start-server \\; set-option -g remain-on-exit on \\; new-session -d -x 160 -y 50 {r}\nT0=$(date +%s)\n"
                ));
                for step in steps {
                    runs.push_str(&format!(
                        "wait_for {t} {} {} >> {d}/out-{i}\n",
                        shell_quote(step.wait),
                        step.secs
                    ));
                    for key in step.keys {
                        let args = match key.strip_prefix("-l ") {
                            Some(text) => format!("-l {}", shell_quote(text)),
                            None => (*key).to_owned(),
                        };
                        runs.push_str(&format!(
                            "dead {t} || tmux -S {t} send-keys {args}; sleep 0.3\n"
                        ));
                    }
                }
                runs.push_str(&format!(
                    "while ! dead {t} && [ $(( $(date +%s) - T0 )) -lt {limit} ]; do sleep 0.25; done\n\
                     tmux -S {t} capture-pane -p -J -S -1000 >> {d}/out-{i}\n\
                     tmux -S {t} display -p 'exit=#{{pane_dead_status}}#{{pane_dead_signal}}' >> {d}/out-{i}\n\
                     tmux -S {t} kill-server\n"
                ));
            }
        }
    }
    let script = format!(
        "set -u
ip link set lo up
ip addr add 198.51.100.7/32 dev lo
mount --bind {d}/hosts /etc/hosts
FAKE_MODEL_API_BIND=198.51.100.7 {PYTHON} {d}/fake.py {d} {d}/script.json > {d}/port.json 2>/dev/null &
i=0; while [ ! -s {d}/port.json ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
{PYTHON} -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"port\"])' {d}/port.json > {d}/port
{TMUX_SH}
{runs}
kill $(jobs -p) 2>/dev/null
true
"
    );
    // In a PID namespace of its own too: whatever a scenario leaves running ends with it.
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-n",
        "-m",
        "-p",
        "-f",
        "--mount-proc",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        &script,
    ]);
    let total: u32 = agent.scenarios.iter().map(|s| s.limit + 15).sum();
    let o = run_timeout(cmd, u64::from(total) + 60);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));

    // The scenarios did what they are for.
    let outputs: Vec<String> = (0..agent.scenarios.len())
        .map(|i| std::fs::read_to_string(dir.join(format!("out-{i}"))).unwrap_or_default())
        .collect();
    let context = || {
        agent
            .scenarios
            .iter()
            .zip(&outputs)
            .map(|(s, out)| format!("---- {}:\n{out}", s.what))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (i, (s, out)) in agent.scenarios.iter().zip(&outputs).enumerate() {
        let trace = dir.join(format!("trace-{i}.log"));
        assert!(
            std::fs::metadata(&trace).is_ok_and(|m| m.len() > 0),
            "[{} {}] no trace\n{}",
            agent.name,
            s.what,
            context()
        );
        if let Some(missed) = out.lines().find(|l| l.starts_with("== missed: ")) {
            panic!(
                "[{} {}] the terminal never showed {:?}: the scenario did not run as written\n{}",
                agent.name,
                s.what,
                missed.trim_start_matches("== missed: "),
                context()
            );
        }
    }
    assert!(
        w.project.join(MADE).exists(),
        "[{}] no tool call ran\n{}",
        agent.name,
        context()
    );
    let requests = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap_or_default();
    assert!(
        requests
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|r| r["main"] == true),
        "[{}] the stand-in got no main-loop request\n{requests}\n{}",
        agent.name,
        context()
    );

    // The traces reduced to paths below the roots (HOME and the project too, for the
    // report).
    let reducer = helper(w, "trace_paths.py");
    let mut cmd = Command::new(PYTHON);
    cmd.arg(&reducer);
    for root in agent.roots {
        cmd.arg("--root").arg(format!(
            "{}={}",
            root.label,
            w.home.join(root.home_relative).display()
        ));
    }
    cmd.arg("--root")
        .arg(format!("~={}", w.home.display()))
        .arg("--root")
        .arg(format!("project={}", w.project.display()))
        .arg("--project")
        .arg(&w.project);
    for (i, s) in agent.scenarios.iter().enumerate() {
        cmd.arg(format!("{}={d}/trace-{i}.log", s.what));
    }
    let o = run_timeout(cmd, 120);
    assert_code(&o, 0, "trace_paths.py");
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings = doc["warnings"].as_array().unwrap();
    assert!(
        warnings.is_empty(),
        "[{}] the traces are incomplete: {warnings:?}",
        agent.name
    );
    doc["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let kind = p["kind"].as_str().unwrap().to_owned();
            // In the order they ran.
            let scenarios = agent
                .scenarios
                .iter()
                .filter(|s| {
                    p["scenarios"][&kind]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|n| n == s.what)
                })
                .map(|s| s.what.to_owned())
                .collect();
            let raw = p["raw"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(path, kind)| (path.clone(), kind.as_str().unwrap().to_owned()))
                .collect();
            Observed {
                root: p["root"].as_str().unwrap().to_owned(),
                path: p["path"].as_str().unwrap().to_owned(),
                kind,
                scenarios,
                raw,
            }
        })
        .collect()
}

/// One rule of the dry run's `agent_state`.
#[derive(Debug, Clone)]
struct Rule {
    path: String,
    class: String,
}

fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty()).collect()
}

/// A rule's component against a path's: `*` is any one name, `abc*` any name that
/// begins with `abc`. (An observed name may itself contain `*`: a per-session part.)
fn component_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

fn rule_matches(rule: &[&str], path: &[&str]) -> bool {
    rule.len() <= path.len() && rule.iter().zip(path).all(|(p, c)| component_matches(p, c))
}

/// The rule that covers `path` (relative to the root): a rule covers its own path and
/// everything below it; the one with the most components wins, then the one with fewer
/// wildcards.
fn covering<'r>(rules: &'r [Rule], path: &str) -> Option<&'r Rule> {
    let path = components(path);
    let rank = |r: &Rule| {
        let c = components(&r.path);
        let wild = c.iter().filter(|x| x.ends_with('*')).count();
        (c.len(), std::cmp::Reverse(wild))
    };
    rules
        .iter()
        .filter(|r| rule_matches(&components(&r.path), &path))
        .max_by_key(|r| rank(r))
}

/// The rules below `path` (longer than it, matching it so far): when there are any,
/// `path` is a directory the profile looks inside.
fn rules_below<'r>(rules: &'r [Rule], path: &str) -> impl Iterator<Item = &'r Rule> {
    let path: Vec<String> = components(path).into_iter().map(str::to_owned).collect();
    rules.iter().filter(move |r| {
        let c = components(&r.path);
        c.len() > path.len()
            && c.iter()
                .zip(&path)
                .all(|(p, name)| component_matches(p, name))
    })
}

fn writes(class: &str) -> bool {
    matches!(class, "writable" | "watched" | "login")
}

/// What is wrong with an observed path under these rules, if anything. A written path
/// needs a rule that lets the sandbox write it. A directory made on the way to a writable
/// name below it passes too. A read or probed path needs a rule: its own, or rules below
/// it when it is a directory the profile looks inside.
fn problem(rules: &[Rule], path: &str, kind: &str) -> Option<String> {
    let rule = covering(rules, path);
    if kind == "written" {
        match rule {
            Some(r) if writes(&r.class) => None,
            _ if rules_below(rules, path).any(|r| writes(&r.class)) => None,
            Some(r) => Some(format!(
                "read_only by rule {:?}: the agent could not write it inside Sandy",
                r.path
            )),
            None => Some("unclassified: the agent could not write it inside Sandy".to_owned()),
        }
    } else if rule.is_some() || rules_below(rules, path).next().is_some() {
        None
    } else {
        Some("unclassified: no rule says whether the agent may change it".to_owned())
    }
}

/// The profile's `agent_state` (each root and its rules) and its state files' host
/// paths, from the dry run with the same home and environment.
fn classification(w: &World, agent: &Agent<'_>) -> (Vec<(String, Vec<Rule>)>, Vec<PathBuf>) {
    let mut cmd = w.sandy(["run", "--dry-run", "--profile", agent.name, "--", "true"]);
    cmd.env(
        agent.base_var,
        format!("http://{API_HOST}:1{}", agent.base_path),
    );
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    let doc = parse_dry_run(&o.stdout, "dry run");
    let dirs: Vec<(String, Vec<Rule>)> = doc["agent_state"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|d| d["profile"] == agent.name)
        .map(|d| {
            let rules = d["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| Rule {
                    path: r["path"].as_str().unwrap().to_owned(),
                    class: r["class"].as_str().unwrap().to_owned(),
                })
                .collect();
            (d["root"].as_str().unwrap().to_owned(), rules)
        })
        .collect();
    assert!(
        !dirs.is_empty(),
        "the dry run has no agent_state for {}: add [[state_dirs]] to \
         crates/sandy-policy/profiles/{}.toml\n{}",
        agent.name,
        agent.name,
        stdout(&o)
    );
    let state_files = doc["state_files"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f["path"].as_str().map(PathBuf::from))
        .collect();
    (dirs, state_files)
}

fn where_(o: &Observed) -> String {
    if o.path == "." {
        o.root.clone()
    } else {
        format!("{}/{}", o.root, o.path)
    }
}

/// The report: `KIND  ROOT/PATH  (scenarios)`, written first, then read, then probed.
fn report(observed: &[&Observed]) -> String {
    let mut lines = Vec::new();
    for kind in ["written", "read", "probed"] {
        for o in observed.iter().filter(|o| o.kind == kind) {
            lines.push(format!(
                "{kind:<8} {}  ({})",
                where_(o),
                o.scenarios.join(", ")
            ));
        }
    }
    lines.join("\n")
}

fn every_state_path_is_classified(agent: &Agent<'_>) {
    if !ready(agent.name) {
        return;
    }
    let started = std::time::Instant::now();
    // Observation of the real CLI, outside Sandy: as root only.
    let w = World::new(User {
        uid: 0,
        gid: 0,
        label: "root",
    });
    let observed = observe(&w, agent);
    let in_roots: Vec<&Observed> = observed
        .iter()
        .filter(|o| agent.roots.iter().any(|r| r.label == o.root))
        .collect();
    let text = report(&in_roots);
    let elsewhere: Vec<String> = observed
        .iter()
        .filter(|o| o.root == "~" && o.kind == "written")
        .map(|o| format!("{}  ({})", where_(o), o.scenarios.join(", ")))
        .collect();
    eprintln!(
        "[{}] observed in {:.0?}:\n{text}\nwritten elsewhere in HOME: {elsewhere:#?}",
        agent.name,
        started.elapsed()
    );
    if let Some(out) = std::env::var_os("SANDY_OBSERVED_STATE_DIR").filter(|d| !d.is_empty()) {
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(
            Path::new(&out).join(format!("{}.txt", agent.name)),
            format!(
                "{text}\n\n# written elsewhere in HOME\n{}\n",
                elsewhere.join("\n")
            ),
        )
        .unwrap();
    }
    // The check has something to judge: the agent wrote in its first root.
    let first = agent.roots.iter().find(|r| r.checked).unwrap();
    assert!(
        in_roots
            .iter()
            .any(|o| o.root == first.label && o.path != "." && o.kind == "written"),
        "[{}] nothing was written below {}:\n{text}",
        agent.name,
        first.label
    );

    let (dirs, state_files) = classification(&w, agent);
    let mut problems = Vec::new();
    let mut refused_seen = Vec::new();
    for root in agent.roots {
        let abs = w.home.join(root.home_relative);
        let rules = dirs.iter().find(|(r, _)| {
            Path::new(r) == abs || std::fs::canonicalize(&abs).is_ok_and(|c| Path::new(r) == c)
        });
        if !root.checked {
            if rules.is_none() {
                eprintln!(
                    "[{}] {} is not a default-deny state directory; its paths are reported only",
                    agent.name, root.label
                );
            }
            continue;
        }
        let Some((_, rules)) = rules else {
            problems.push(format!(
                "  {}: the dry run's agent_state has no entry for {} (roots: {:?})",
                root.label,
                abs.display(),
                dirs.iter().map(|d| &d.0).collect::<Vec<_>>()
            ));
            continue;
        };
        for o in in_roots
            .iter()
            .filter(|o| o.root == root.label && o.path != ".")
        {
            let home_relative = Path::new(root.home_relative).join(&o.path);
            // A state file is written through its private copy inside (the merge decides
            // what goes back); a deliberate refusal is named, not a problem.
            if state_files.contains(&w.home.join(&home_relative)) {
                continue;
            }
            if let Some((_, why)) = agent
                .refused
                .iter()
                .find(|(p, _)| home_relative.starts_with(p))
            {
                refused_seen.push(format!("  {}: {why}", where_(o)));
                continue;
            }
            // The rules judge the real names (a rule may name this project's key).
            let found = o
                .raw
                .iter()
                .find_map(|(path, kind)| problem(rules, path, kind).map(|why| (path, why)));
            if let Some((path, why)) = found {
                let example = if *path == o.path {
                    String::new()
                } else {
                    format!(" [{path}]")
                };
                problems.push(format!(
                    "  {:<8} {}  ({}){example}: {why}",
                    o.kind,
                    where_(o),
                    o.scenarios.join(", ")
                ));
            }
        }
    }
    if !refused_seen.is_empty() {
        eprintln!(
            "[{}] written by the agent, refused inside Sandy on purpose:\n{}",
            agent.name,
            refused_seen.join("\n")
        );
    }
    assert!(
        problems.is_empty(),
        "{} {} observed paths are not classified the way the real CLI uses them; classify \
         them in crates/sandy-policy/profiles/{}.toml ([[state_dirs]]: writable, watched, \
         login or read_only):\n{}\n\nall observed paths:\n{text}",
        agent.name,
        problems.len(),
        agent.name,
        problems.join("\n")
    );
    eprintln!(
        "[{}] every observed path is classified ({:.0?})",
        agent.name,
        started.elapsed()
    );
}

const CLAUDE_KEY: [(&str, &str); 1] = [("ANTHROPIC_API_KEY", "sk-ant-sandy-test-0123456789")];

#[test]
fn claude_code_state_paths_are_classified() {
    every_state_path_is_classified(&Agent {
        name: "claude",
        base_var: "ANTHROPIC_BASE_URL",
        base_path: "",
        tool: serde_json::json!({"tool": "Bash", "input": {"command": format!("echo made > {MADE}")}}),
        roots: &[
            Root {
                label: "~/.claude",
                home_relative: ".claude",
                checked: true,
            },
            // Classified as a state file ([[state_files]]), not here.
            Root {
                label: "~/.claude.json",
                home_relative: ".claude.json",
                checked: false,
            },
        ],
        refused: &[(
            ".claude/plugins/marketplaces",
            "plugin marketplaces are code the next session loads; installing one is the \
             user's step outside Sandy (offline, the clone fails anyway)",
        )],
        scenarios: &[
            Scenario {
                what: "--version",
                merge: &[],
                env: &[],
                command: "claude --version",
                steps: None,
                limit: 30,
            },
            Scenario {
                // Offline, onboarding ends at its connectivity check.
                what: "first launch",
                merge: &[],
                env: &[],
                command: "claude",
                steps: Some(&[
                    Step {
                        wait: "Unable to connect to Anthropic services",
                        secs: 60,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "",
                        secs: 3,
                        keys: &["C-c", "C-c"],
                    },
                ]),
                limit: 75,
            },
            Scenario {
                what: "prompt with a tool call",
                merge: &[],
                env: &CLAUDE_KEY,
                command: "claude -p 'make the file' --allowedTools Bash",
                steps: None,
                limit: 90,
            },
            Scenario {
                what: "terminal UI and /login",
                merge: &[(
                    ".claude.json",
                    r#"{"hasCompletedOnboarding": true, "lastOnboardingVersion": "2.1.332"}"#,
                )],
                env: &CLAUDE_KEY,
                command: "claude",
                steps: Some(&[
                    Step {
                        wait: "Yes, I trust this folder",
                        secs: 60,
                        keys: &["Down", "Enter"],
                    },
                    Step {
                        wait: "Do you want to use this API key?",
                        secs: 30,
                        keys: &["Up", "Enter"],
                    },
                    Step {
                        wait: "auto mode",
                        secs: 30,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "The agent is done",
                        secs: 30,
                        keys: &["-l /login", "Enter"],
                    },
                    Step {
                        wait: "Select login method",
                        secs: 20,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Paste code here",
                        secs: 20,
                        keys: &["C-c", "C-c"],
                    },
                ]),
                limit: 150,
            },
            Scenario {
                what: "second launch",
                merge: &[],
                env: &CLAUDE_KEY,
                command: "claude",
                steps: Some(&[
                    Step {
                        wait: "auto mode",
                        secs: 60,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "The agent is done",
                        secs: 30,
                        keys: &["-l /exit", "Enter"],
                    },
                ]),
                limit: 100,
            },
        ],
    });
}

const CODEX_KEY: [(&str, &str); 1] = [("OPENAI_API_KEY", "sk-sandy-test")];
const CODEX_TUI: &str = "codex --dangerously-bypass-approvals-and-sandbox -c openai_base_url=\"\\\"$OPENAI_BASE_URL\\\"\"";

#[test]
fn codex_state_paths_are_classified() {
    every_state_path_is_classified(&Agent {
        name: "codex",
        base_var: "OPENAI_BASE_URL",
        base_path: "/v1",
        tool: serde_json::json!({"tool": "exec_command", "input": {"cmd": format!("echo made > {MADE}")}}),
        roots: &[Root {
            label: "~/.codex",
            home_relative: ".codex",
            checked: true,
        }],
        refused: &[],
        scenarios: &[
            Scenario {
                what: "--version",
                merge: &[],
                env: &[],
                command: "codex --version",
                steps: None,
                limit: 30,
            },
            Scenario {
                // The ChatGPT sign-in started and cancelled, then the API key's.
                what: "first launch",
                merge: &[],
                env: &CODEX_KEY,
                command: CODEX_TUI,
                steps: Some(&[
                    Step {
                        wait: "Choose how you want to use Codex",
                        secs: 60,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Finish signing in via your browser",
                        secs: 20,
                        keys: &["Escape"],
                    },
                    Step {
                        wait: "Sign in another way",
                        secs: 10,
                        keys: &["Down", "Down", "Enter"],
                    },
                    Step {
                        wait: "Use an OpenAI API key",
                        secs: 10,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Press enter to save",
                        secs: 10,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Ask Codex to do anything",
                        secs: 30,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "Worked for",
                        secs: 30,
                        keys: &["-l /quit", "Enter"],
                    },
                ]),
                limit: 150,
            },
            Scenario {
                what: "exec with a tool call",
                merge: &[],
                env: &CODEX_KEY,
                command: "codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -c model='\"gpt-5\"' -c openai_base_url=\"\\\"$OPENAI_BASE_URL\\\"\" 'make the file'",
                steps: None,
                limit: 90,
            },
            Scenario {
                // `codex login` replaces the API-key login; the last command restores it.
                what: "login start (browser / device code / API key)",
                merge: &[],
                env: &CODEX_KEY,
                command: "timeout 5 codex login; timeout 5 codex login --device-auth; printenv OPENAI_API_KEY | codex login --with-api-key; true",
                steps: None,
                limit: 40,
            },
            Scenario {
                what: "second launch",
                merge: &[],
                env: &CODEX_KEY,
                command: CODEX_TUI,
                steps: Some(&[
                    Step {
                        wait: "Ask Codex to do anything",
                        secs: 60,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "Worked for",
                        secs: 30,
                        keys: &["-l /quit", "Enter"],
                    },
                ]),
                limit: 100,
            },
        ],
    });
}

#[test]
fn gemini_cli_state_paths_are_classified() {
    every_state_path_is_classified(&Agent {
        name: "gemini",
        base_var: "GOOGLE_GEMINI_BASE_URL",
        base_path: "",
        tool: serde_json::json!({"tool": "run_shell_command", "input": {"command": format!("echo made > {MADE}"), "description": "make the file"}}),
        roots: &[Root {
            label: "~/.gemini",
            home_relative: ".gemini",
            checked: true,
        }],
        refused: &[],
        scenarios: &[
            Scenario {
                what: "--version",
                merge: &[],
                env: &[],
                command: "gemini --version",
                steps: None,
                limit: 30,
            },
            Scenario {
                // Folder trust, then "Sign in with Google" up to its code prompt.
                what: "first launch: trust and sign-in",
                merge: &[],
                env: &[],
                command: "gemini",
                steps: Some(&[
                    Step {
                        wait: "Do you trust the files in this folder?",
                        secs: 60,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "How would you like to authenticate",
                        secs: 30,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Enter the authorization code",
                        secs: 20,
                        keys: &["C-c", "C-c"],
                    },
                ]),
                limit: 120,
            },
            Scenario {
                what: "-p with a tool call",
                merge: &[(
                    ".gemini/settings.json",
                    r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
                )],
                env: &[
                    ("GEMINI_API_KEY", "sandy-test"),
                    ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
                ],
                command: "gemini --yolo -p 'make the file'",
                steps: None,
                limit: 90,
            },
            Scenario {
                what: "second launch",
                merge: &[],
                env: &[("GEMINI_API_KEY", "sandy-test")],
                command: "gemini",
                steps: Some(&[
                    Step {
                        wait: "Type your message",
                        secs: 60,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "Allow execution",
                        secs: 30,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "The agent is done",
                        secs: 30,
                        keys: &["-l /quit", "Enter"],
                    },
                ]),
                limit: 120,
            },
        ],
    });
}

/// OpenCode reads a custom provider's base URL from its configuration: the provider
/// points at the stand-in (OPENAI_BASE_URL, set by the runner).
const OPENCODE_CONFIG: &str = r#"OPENCODE_CONFIG_CONTENT="{\"provider\":{\"fake\":{\"npm\":\"@ai-sdk/openai-compatible\",\"name\":\"stand-in\",\"options\":{\"baseURL\":\"$OPENAI_BASE_URL\",\"apiKey\":\"dummy\"},\"models\":{\"m\":{\"name\":\"m\"}}}},\"model\":\"fake/m\",\"permission\":{\"bash\":\"allow\",\"edit\":\"allow\"}}""#;

#[test]
fn opencode_state_paths_are_classified() {
    let run = format!("{OPENCODE_CONFIG} opencode run 'make the file'");
    let tui = format!("{OPENCODE_CONFIG} opencode");
    every_state_path_is_classified(&Agent {
        name: "opencode",
        base_var: "OPENAI_BASE_URL",
        base_path: "/v1",
        tool: serde_json::json!({"tool": "bash", "input": {"command": format!("echo made > {MADE}"), "description": "make the file"}}),
        roots: &[
            Root {
                label: "~/.config/opencode",
                home_relative: ".config/opencode",
                checked: true,
            },
            Root {
                label: "~/.local/share/opencode",
                home_relative: ".local/share/opencode",
                checked: true,
            },
            Root {
                label: "~/.local/state/opencode",
                home_relative: ".local/state/opencode",
                checked: true,
            },
            // Copy-on-write per project in the profile, not default-deny state.
            Root {
                label: "~/.cache/opencode",
                home_relative: ".cache/opencode",
                checked: false,
            },
        ],
        refused: &[(
            ".config/opencode/opencode.jsonc",
            "the configuration names MCP servers and plugins the next launch runs; at its \
             first launch OpenCode writes a default one there and goes on without it",
        )],
        scenarios: &[
            Scenario {
                what: "--version",
                merge: &[],
                env: &[],
                command: "opencode --version",
                steps: None,
                limit: 30,
            },
            Scenario {
                what: "first launch (terminal UI)",
                merge: &[],
                env: &[],
                command: "opencode",
                steps: Some(&[Step {
                    wait: "Ask anything",
                    secs: 60,
                    keys: &["C-c", "C-c"],
                }]),
                limit: 70,
            },
            Scenario {
                what: "run with a tool call",
                merge: &[],
                env: &[],
                command: &run,
                steps: None,
                limit: 90,
            },
            Scenario {
                what: "auth login (a key saved)",
                merge: &[],
                env: &[],
                command: "opencode auth login",
                steps: Some(&[
                    Step {
                        wait: "Select provider",
                        secs: 30,
                        keys: &["Enter"],
                    },
                    Step {
                        wait: "Enter your API key",
                        secs: 15,
                        keys: &["-l sk-sandy-test", "Enter"],
                    },
                    Step {
                        wait: "",
                        secs: 5,
                        keys: &["C-c"],
                    },
                ]),
                limit: 45,
            },
            Scenario {
                what: "second launch",
                merge: &[],
                env: &[],
                command: &tui,
                steps: Some(&[
                    Step {
                        wait: "Ask anything",
                        secs: 60,
                        keys: &["-l hello", "Enter"],
                    },
                    Step {
                        wait: "The agent is done",
                        secs: 30,
                        keys: &["C-c", "C-c"],
                    },
                ]),
                limit: 100,
            },
        ],
    });
}

/// The matching on a hand-written rules array, as the dry run gives it.
#[test]
fn observed_paths_are_matched_against_rules_like_the_dry_run() {
    let rules: Vec<Rule> = [
        ("projects", "writable"),
        ("projects/*/memory", "watched"),
        ("projects/-elsewhere/memory", "read_only"),
        ("settings.json", "read_only"),
        ("plugins", "read_only"),
        ("plugins/store", "writable"),
        (".claude.json.tmp.*", "writable"),
        (".credentials.json", "login"),
        ("sessions/*.json", "read_only"),
        ("sessions/*", "writable"),
    ]
    .into_iter()
    .map(|(path, class)| Rule {
        path: path.to_owned(),
        class: class.to_owned(),
    })
    .collect();
    let class = |p: &str| covering(&rules, p).map(|r| r.class.as_str());
    // A rule covers its own path and everything below; the most components win.
    assert_eq!(class("projects"), Some("writable"));
    assert_eq!(class("projects/*/x.jsonl"), Some("writable"));
    assert_eq!(class("projects/*/memory"), Some("watched"));
    assert_eq!(class("projects/*/memory/MEMORY.md"), Some("watched"));
    assert_eq!(class("projects/-elsewhere/memory/x"), Some("read_only"));
    assert_eq!(class("plugins/store/x.json"), Some("writable"));
    assert_eq!(class("plugins/cache"), Some("read_only"));
    // `abc*` matches a name that begins with `abc`, an observed `*` included; with as
    // many components, the rule with fewer wildcards wins.
    assert_eq!(class(".claude.json.tmp.*"), Some("writable"));
    assert_eq!(class("sessions/1.json"), Some("writable"));
    assert_eq!(class("sessions/*"), Some("writable"));
    assert_eq!(class("unknown"), None);
    assert_eq!(class("projectsX"), None);

    // Written: needs a rule that writes, or one below it (a directory on the way).
    assert_eq!(problem(&rules, "projects/*/memory", "written"), None);
    assert_eq!(problem(&rules, ".credentials.json", "written"), None);
    assert_eq!(problem(&rules, "plugins", "written"), None);
    assert!(problem(&rules, "settings.json", "written")
        .unwrap()
        .contains("read_only by rule \"settings.json\""));
    assert!(problem(&rules, "plugins/cache/x", "written")
        .unwrap()
        .contains("read_only by rule \"plugins\""));
    assert!(problem(&rules, "workflows", "written")
        .unwrap()
        .starts_with("unclassified"));
    // Read or probed: needs any rule.
    assert_eq!(problem(&rules, "settings.json", "probed"), None);
    assert_eq!(problem(&rules, "projects/x", "read"), None);
    assert!(problem(&rules, "CLAUDE.md", "probed")
        .unwrap()
        .starts_with("unclassified"));
    // A directory the profile looks inside is classified by the rules below it.
    let only_below = vec![Rule {
        path: "a/b".to_owned(),
        class: "writable".to_owned(),
    }];
    assert_eq!(problem(&only_below, "a", "read"), None);
    assert_eq!(problem(&only_below, "a", "written"), None);
    assert!(problem(&only_below, "a/c", "read").is_some());
}

/// The reducer on a hand-written trace: kinds, `*at` calls resolved through their
/// descriptors, relative names through the working directory, per-session names
/// collapsed, roots and the project.
#[test]
fn the_reducer_classifies_a_hand_written_trace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("t.log");
    std::fs::write(
        &log,
        r#"10 openat(AT_FDCWD</h/project>, "/h/.a/settings.json", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
10 openat(AT_FDCWD</h/project>, "/h/.a/history.jsonl", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0600) = 3</h/.a/history.jsonl>
10 mkdirat(AT_FDCWD</h/project>, "/h/.a/projects/-h-project", 0777) = 0
10 mkdir("/h/.a", 0700) = -1 EEXIST (File exists)
10 openat(AT_FDCWD</h/project>, "/h/.a/sessions", O_RDONLY|O_DIRECTORY) = 4</h/.a/sessions>
10 getdents64(4</h/.a/sessions>, 0x1234 /* 3 entries */, 32768) = 80
10 openat(4</h/.a/sessions>, "8f14e45f-ceea-467f-a0e6-8c2b1d2c3a4b.jsonl", O_RDONLY <unfinished ...>
11 chdir("/h/.a/tmp") = 0
10 <... openat resumed>) = 5</h/.a/sessions/8f14e45f-ceea-467f-a0e6-8c2b1d2c3a4b.jsonl>
11 rename("x.tmp.1234.1712345678901", "../state.json") = 0
11 statx(AT_FDCWD</h/.a/tmp>, "../CLAUDE.md", AT_STATX_SYNC_AS_STAT, STATX_ALL, 0x7ff) = -1 ENOENT (No such file or directory)
11 newfstatat(5</h/.a/x>, "", {st_mode=S_IFREG|0644, st_size=1, ...}, AT_EMPTY_PATH) = 0
11 openat(AT_FDCWD</h/.a/tmp>, "/h/project/made", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 6</h/project/made>
11 openat(AT_FDCWD</h/.a/tmp>, "/etc/hosts", O_RDONLY) = 7</etc/hosts>
"#,
    )
    .unwrap();
    let helper = d.join("trace_paths.py");
    std::fs::write(&helper, helper_text("trace_paths.py")).unwrap();
    let o = Command::new(PYTHON)
        .arg(&helper)
        .args(["--root", "~/.a=/h/.a", "--root", "project=/h/project"])
        .args(["--project", "/h/project"])
        .arg(format!("one={}", log.display()))
        .output()
        .unwrap();
    assert_code(&o, 0, "trace_paths.py");
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let got: Vec<String> = doc["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {}/{}", p["kind"], p["root"], p["path"]).replace('"', ""))
        .collect();
    let projects = doc["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "projects/*")
        .unwrap();
    assert_eq!(
        projects["raw"],
        serde_json::json!({"projects/-h-project": "written"})
    );
    assert_eq!(
        got,
        [
            "written project/made",
            "probed ~/.a/.",
            "probed ~/.a/CLAUDE.md",
            "written ~/.a/history.jsonl",
            "written ~/.a/projects/*",
            "read ~/.a/sessions",
            "read ~/.a/sessions/*.jsonl",
            "probed ~/.a/settings.json",
            "written ~/.a/state.json",
            "written ~/.a/tmp/x.tmp.*",
        ],
        "{}",
        stdout(&o)
    );
}
