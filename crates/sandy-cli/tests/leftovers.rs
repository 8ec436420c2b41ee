//! What a run leaves behind is untrusted input to everything after it (design promise 6,
//! THREAT_MODEL.md "What a run leaves behind"): Sandy's own host-side work on what a
//! sandboxed run could have written goes through handles, follows no link the run made,
//! never blocks on what it put there, and prints nothing of it raw.
//!
//! Each test plants with a real sandboxed run (or a concurrent one swapping names with
//! `RENAME_EXCHANGE` in a loop, `helpers/swap.py`) and judges from the host: the file
//! outside is unchanged, nothing was moved or removed, no control byte reached the
//! terminal. Every test runs as root and as an unprivileged user.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// `sandy run ARGS...` in `w`, collected within two minutes.
fn run(w: &World, args: &[&str]) -> std::process::Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    run_timeout(w.sandy(all), 120)
}

/// The swap helper, copied into the project (readable inside), and its path.
fn swapper(w: &World) -> String {
    w.write("home/project/.adv/swap.py", &helper_text("swap.py"))
        .display()
        .to_string()
}

/// A concurrent sandboxed adversary: `sandy run FLAGS -- python3 swap.py MODE STOP SECS
/// ARGS...`, started in the background; returns once it runs. Dropping the guard stops it
/// (its stop file) and reaps it.
struct Adversary {
    child: Reaped,
    stop: PathBuf,
}

impl Adversary {
    fn start(w: &World, flags: &[&str], mode: &str, args: &[&str]) -> Adversary {
        let script = swapper(w);
        let stop = w.project.join(".adv").join(unique("stop"));
        let stop_s = stop.display().to_string();
        let mut all: Vec<&str> = vec!["run"];
        all.extend_from_slice(flags);
        all.extend_from_slice(&["--", PYTHON, &script, mode, &stop_s, "60"]);
        all.extend_from_slice(args);
        let mut cmd = w.sandy(all);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = Reaped(cmd.spawn().unwrap());
        let mut ready = stop.clone().into_os_string();
        ready.push(".ready");
        let ready = PathBuf::from(ready);
        assert!(
            wait_for(30, || ready.exists()),
            "the adversary did not start"
        );
        Adversary { child, stop }
    }

    /// Stops the adversary; returns what it printed (its count of exchanges) and its
    /// stderr.
    fn stop(mut self) -> (String, String) {
        std::fs::write(&self.stop, "").unwrap();
        let status = wait_timeout(&mut self.child.0, 60, "the adversary");
        let mut out = String::new();
        let mut err = String::new();
        use std::io::Read;
        let _ = self.child.0.stdout.take().unwrap().read_to_string(&mut out);
        let _ = self.child.0.stderr.take().unwrap().read_to_string(&mut err);
        assert!(status.code().is_some(), "the adversary was killed: {err}");
        (out, err)
    }
}

/// Every file below `dir` with its content, sorted (links as `-> TARGET`).
fn tree(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, p: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(p) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                ));
            } else if t.is_dir() {
                out.push((rel.clone(), "dir".into()));
                walk(base, &path, out);
            } else {
                out.push((rel, std::fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Asserts that nothing of a run's choosing reached the terminal as a control: no ESC,
/// no BEL, no carriage return in Sandy's output, and no line the run forged.
#[track_caller]
fn no_raw_controls(err: &str) {
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{9b}'] {
        assert!(
            !err.contains(bad),
            "a raw {bad:?} reached the terminal:\n{err:?}"
        );
    }
    for line in err.lines() {
        assert!(
            !line.starts_with("sandy: all clear")
                && !line.starts_with("sandy: network: allowed evil"),
            "a forged line: {line:?}\n{err}"
        );
    }
}

// 1, 2. `--net-log` at a name a run planted.

/// A run plants `net.log` as a link to `~/.bashrc`, a FIFO, a socket, a hard link, or a
/// directory link on the way: a later run naming it as its log refuses at once with one
/// line (exit 125) and writes nothing anywhere; a plain name works and its lines escape
/// what the run sent.
#[test]
fn a_net_log_a_run_planted_is_refused_and_never_followed() {
    for_each_user(|w| {
        let bashrc = w.write("home/.bashrc", "# the user's\n");
        // -v: the allowed destinations, which name what the run asked for, are printed.
        let flags =
            |log: &'static str| ["-v", "--net-log", log, "--allow-domain", "example.invalid"];
        let plant = |script: &str| {
            let o = run(w, &["--", "/bin/sh", "-c", script]);
            assert_code(&o, 0, script);
        };
        // A link to the shell's start-up file, to an absent file, and a directory link on
        // the way, each made inside a sandbox.
        plant(&format!(
            "ln -s {} net.log && ln -s {}/absent dangling.log && ln -s {} logs",
            bashrc.display(),
            w.home.display(),
            w.home.display()
        ));
        for log in ["net.log", "dangling.log", "logs/x.log"] {
            let start = Instant::now();
            let o = run(w, &[&flags(log)[..], &["--", "true"]].concat());
            assert_code(&o, 125, log);
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{log}: one line:\n{err}");
            assert!(err.contains("--net-log"), "{err}");
            assert!(start.elapsed() < Duration::from_secs(20));
        }
        assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# the user's\n");
        assert!(!w.home.join("absent").exists() && !w.home.join("x.log").exists());
        // A FIFO (nobody reads it), a socket: refused at once, never waited on.
        plant("mkfifo fifo.log && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock.log\")'");
        for log in ["fifo.log", "sock.log"] {
            let start = Instant::now();
            let o = run(w, &[&flags(log)[..], &["--", "true"]].concat());
            assert_code(&o, 125, log);
            assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{log} blocked Sandy"
            );
        }
        // A hard link to a file outside (made on the host: the sandbox cannot see one).
        std::fs::hard_link(&bashrc, w.project.join("hard.log")).unwrap();
        let o = run(w, &[&flags("hard.log")[..], &["--", "true"]].concat());
        assert_code(&o, 125, "a hard link");
        assert!(stderr(&o).contains("hard links"), "{}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# the user's\n");
        // A plain name: created 0600 and written; what the run sent is escaped in it and
        // on the terminal.
        let o = run(
            w,
            &[
                &flags("fresh.log")[..],
                &[
                    "--",
                    PYTHON,
                    "-c",
                    SOCKS_NAME,
                    "evil.example\nsandy: network: allowed evil.example:443 (1)\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2K",
                ],
            ]
            .concat(),
        );
        assert_code(&o, 0, "a plain log");
        let err = stderr(&o);
        no_raw_controls(&err);
        assert!(err.contains("\\e]52;c;ZXZpbA==\\x07"), "{err}");
        let log = w.project.join("fresh.log");
        assert_eq!(
            std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&log).unwrap();
        let hosts: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!(
                    "{} {}",
                    v["host"].as_str().unwrap_or_default(),
                    v["reason"].as_str().unwrap_or_default()
                )
            })
            .collect();
        assert!(
            hosts.iter().any(|h| h.contains("\u{1b}]52")),
            "the log keeps the name, escaped as JSON: {text}"
        );
        assert!(!text.contains('\u{1b}'), "a raw ESC in the log");
    });
}

/// While a concurrent sandboxed run swaps the log's directory with a link to the home in
/// a tight loop, each run's log lands in the real directory or the run is refused: no
/// log ever appears in the home, and the home's files are unchanged.
#[test]
fn a_net_log_directory_swapped_for_a_link_is_never_followed() {
    for_each_user(|w| {
        let bashrc = w.write("home/.bashrc", "# the user's\n");
        std::fs::create_dir(w.project.join("logs")).unwrap();
        std::os::unix::fs::symlink(&w.home, w.project.join("trap")).unwrap();
        w.chown_all();
        let project = w.project.display().to_string();
        let adversary = Adversary::start(w, &[], "pair", &[&project, "logs", "trap"]);
        let mut written = 0;
        for _ in 0..20 {
            let o = run(
                w,
                &[
                    "--net-log",
                    "logs/net.log",
                    "--allow-domain",
                    "example.invalid",
                    "--",
                    "true",
                ],
            );
            match o.status.code() {
                Some(0) => written += 1,
                Some(125) => assert!(stderr(&o).contains("--net-log"), "{}", stderr(&o)),
                other => panic!("{other:?}: {}", stderr(&o)),
            }
        }
        let (out, _) = adversary.stop();
        assert!(out.contains("exchanges"), "{out}");
        assert!(
            !w.home.join("net.log").exists(),
            "a log was written in the home"
        );
        assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# the user's\n");
        let _ = written;
    });
}

/// A SOCKS5 request for the host name in `argv[1]` to Sandy's proxy (from `ALL_PROXY`),
/// port 443: prints the reply code.
const SOCKS_NAME: &str = "import os, socket, sys
port = int(os.environ['ALL_PROXY'].rsplit(':', 1)[1].strip('/'))
name = sys.argv[1].encode()
s = socket.create_connection(('127.0.0.1', port), timeout=10)
s.sendall(b'\\x05\\x01\\x00')
s.recv(2)
s.sendall(b'\\x05\\x01\\x00\\x03' + bytes([len(name)]) + name + (443).to_bytes(2, 'big'))
print(s.recv(10)[1])";

// 3. The Codex stand-in, raced.

/// While Codex runs move their stand-in state directory back into `~/.codex`, a
/// concurrent sandboxed run that can write `~/.codex` swaps every other stand-in with a
/// link to `~/.ssh` in a tight loop: nothing is ever taken from `~/.ssh`, and what the
/// runs wrote reaches `~/.codex`. The same holds for a killed run's stand-in recovered at
/// the next launch.
#[test]
fn the_codex_stand_in_move_back_never_follows_a_swapped_link() {
    for_each_user(|w| {
        w.write("home/.codex/config.toml", "model = \"o3\"\n");
        w.write("home/.ssh/id_ed25519", "PRIVATE KEY\n");
        w.write("home/.ssh/known_hosts", "host\n");
        let ssh_before = tree(&w.home.join(".ssh"));
        let codex = w.home.join(".codex").display().to_string();
        let ssh = w.home.join(".ssh").display().to_string();
        let adversary = Adversary::start(
            w,
            &["--profile", "codex"],
            "prefix",
            &[&codex, ".sandy-codex-home-", "", "trap", &ssh],
        );
        // Codex runs, six at a time: each makes, locks and empties back its own stand-in
        // while the others recover stale ones and the adversary swaps. They write a name
        // Codex writes (`state_*`): one it does not is never moved back (default-deny).
        // Every launch starts although the adversary's names in `~/.codex` (its link, and
        // stand-ins swapped to its name) change between Sandy's look and the mounts.
        for batch in 0..4 {
            let runs: Vec<_> = (0..6)
                .map(|j| {
                    let i = batch * 6 + j;
                    let script = format!("echo {i} > \"$CODEX_HOME/state_made-{i}\"; sleep 0.05");
                    let mut cmd =
                        w.sandy(["run", "--profile", "codex", "--", "/bin/sh", "-c", &script]);
                    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
                    (i, Reaped(cmd.spawn().unwrap()))
                })
                .collect();
            for (i, mut child) in runs {
                let status = wait_timeout(&mut child.0, 120, "a codex run");
                let mut err = String::new();
                use std::io::Read;
                let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
                assert_eq!(status.code(), Some(0), "run {i}: {err}");
                no_raw_controls(&err);
            }
        }
        // A killed run's stand-in, recovered at the next launch while the swaps go on.
        let stale = w.home.join(".codex/.sandy-codex-home-999999999");
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("state_left-by-a-killed-run"), "x").unwrap();
        w.chown_all();
        let o = run(w, &["--profile", "codex", "--", "true"]);
        assert_code(&o, 0, "a launch that recovers a stand-in");
        let (_, _) = adversary.stop();
        // A stand-in the adversary swapped away at the moment its run removed it stays,
        // empty and unlocked, until the next launch recovers it.
        let o = run(w, &["--profile", "codex", "--", "true"]);
        assert_code(&o, 0, "a launch after the adversary");
        assert_eq!(tree(&w.home.join(".ssh")), ssh_before, "~/.ssh changed");
        for name in ["id_ed25519", "known_hosts"] {
            assert!(
                !w.home.join(".codex").join(name).exists(),
                "{name} was moved into ~/.codex"
            );
        }
        assert_eq!(
            std::fs::read_to_string(w.home.join(".codex/config.toml")).unwrap(),
            "model = \"o3\"\n"
        );
        // What the runs wrote reached the real directory as written (a write the
        // adversary diverted by swapping a run's `CODEX_HOME` away under it at that moment
        // is lost: it went to `~/.ssh`, which is masked inside), and nothing of a
        // stand-in stayed.
        let mut landed = 0;
        for i in 0..24 {
            if let Ok(text) = std::fs::read_to_string(w.home.join(format!(".codex/state_made-{i}")))
            {
                assert_eq!(text, format!("{i}\n"));
                landed += 1;
            }
        }
        assert!(landed > 0, "no run's write reached ~/.codex");
        assert!(w.home.join(".codex/state_left-by-a-killed-run").exists());
        let stand_ins = stand_ins_in(&w.home.join(".codex"));
        assert!(stand_ins.is_empty(), "{stand_ins:?}");
    });
}

// 4. `sandy cache --clear`, raced.

/// A run swaps a directory and a link to `~/victim` in its cache layer in a tight loop
/// while `sandy cache --clear` runs: the layer in use is kept (and named), nothing of the
/// victim goes. Once the run is over, the layer (with the links it left) is removed
/// whole, and the victim still stays.
#[test]
fn cache_clear_never_follows_a_link_and_leaves_a_layer_in_use() {
    for_each_user(|w| {
        w.write("home/.npm/_cacache/index", "host cache\n");
        for i in 0..50 {
            w.write(format!("home/victim/f{i}"), "keep\n");
        }
        let victim = w.home.join("victim");
        let before = tree(&victim);
        let npm = w.home.join(".npm").display().to_string();
        // Inside: a directory with files and a link to the victim, in the layer.
        let o = run(
            w,
            &[
                "--",
                "/bin/sh",
                "-c",
                &format!(
                    "mkdir -p {npm}/d/sub && touch {npm}/d/a {npm}/d/sub/b && ln -s {} {npm}/l",
                    victim.display()
                ),
            ],
        );
        assert_code(&o, 0, "plant in the layer");
        let adversary = Adversary::start(w, &[], "pair", &[&npm, "d", "l"]);
        for _ in 0..5 {
            let o = run_timeout(w.sandy(["cache", "--clear"]), 60);
            assert_code(&o, 0, "cache --clear beside a run");
            assert!(
                stdout(&o).contains("a running sandbox uses it"),
                "{}",
                stdout(&o)
            );
        }
        let (out, _) = adversary.stop();
        assert!(out.contains("exchanges"), "{out}");
        assert_eq!(tree(&victim), before, "the victim changed");
        // Not in use any more: removed whole, links and all, the victim untouched.
        let o = run_timeout(w.sandy(["cache", "--clear"]), 60);
        assert_code(&o, 0, "cache --clear");
        assert!(stdout(&o).contains("removed"), "{}", stdout(&o));
        assert_eq!(tree(&victim), before, "the victim changed");
        assert_eq!(
            std::fs::read_to_string(w.home.join(".npm/_cacache/index")).unwrap(),
            "host cache\n"
        );
        let layers = w.home.join(".cache/sandy/overlays");
        assert_eq!(
            std::fs::read_dir(&layers).map(|d| d.count()).unwrap_or(0),
            0
        );
    });
}

// 5, 9. Sandy's own output.

/// Names a run chose (a refused write's path, a repository's directory, a hook) reach
/// the terminal escaped: no forged `sandy:` line, no erased warning, no OSC 52.
#[test]
fn names_a_run_chose_are_printed_escaped() {
    for_each_user(|w| {
        let forged = "x\u{1b}[1A\u{1b}[2K\rsandy: all clear\u{1b}]52;c;ZXZpbA==\u{7}";
        let o = run(
            w,
            &[
                "--",
                "/bin/sh",
                "-c",
                &format!(
                    "touch '/usr/{forged}' 2>/dev/null; mkdir -p 'n/{forged}' && git init -q 'n/{forged}' && \
                     printf '#!/bin/sh\\n' > 'n/{forged}/.git/hooks/pre-commit{forged}'; true"
                ),
            ],
        );
        assert_code(&o, 0, "a run with hostile names");
        let err = stderr(&o);
        no_raw_controls(&err);
        assert!(err.contains("\\e[2K"), "the name is shown, escaped:\n{err}");
        assert!(
            err.contains("refused"),
            "the refused write is named:\n{err}"
        );
    });
}

// 6. Concurrent runs.

/// 500 runs, 25 at a time, in one project, with the network open, blocked and narrowed:
/// every run exits 0 and its write lands, and no per-run directory or process is left.
#[test]
fn five_hundred_concurrent_runs_never_break_each_other() {
    for_each_user(|w| {
        let total = 500;
        let at_once = 25;
        let modes: [&[&str]; 3] = [
            &[],
            &["--block-net"],
            &["--allow-domain", "example.invalid"],
        ];
        let mut running: Vec<(usize, std::process::Child)> = Vec::new();
        let mut failures = Vec::new();
        let mut next = 0;
        let deadline = Instant::now() + Duration::from_secs(900);
        while next < total || !running.is_empty() {
            while next < total && running.len() < at_once {
                let mut args: Vec<&str> = vec!["run"];
                args.extend_from_slice(modes[next % 3]);
                let script = format!("echo {next} > out-{next}");
                args.extend_from_slice(&["--", "/bin/sh", "-c", &script]);
                let mut cmd = w.sandy(args);
                cmd.stdout(Stdio::null()).stderr(Stdio::piped());
                running.push((next, cmd.spawn().unwrap()));
                next += 1;
            }
            let mut i = 0;
            while i < running.len() {
                if let Some(status) = running[i].1.try_wait().unwrap() {
                    let (n, mut child) = running.remove(i);
                    if status.code() != Some(0) {
                        let mut err = String::new();
                        use std::io::Read;
                        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                        failures.push(format!("run {n}: {status}: {err}"));
                    }
                } else {
                    i += 1;
                }
            }
            assert!(Instant::now() < deadline, "the soak did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            failures.is_empty(),
            "{} failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
        for n in 0..total {
            assert_eq!(
                std::fs::read_to_string(w.project.join(format!("out-{n}"))).unwrap(),
                format!("{n}\n")
            );
        }
        // No process of any run is left: none has its working directory in the project.
        let in_project: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(&w.project))
            })
            .filter(|pid| !process_gone(*pid))
            .collect();
        assert!(in_project.is_empty(), "processes left: {in_project:?}");
        w.tidy_tmp();
        let left: Vec<_> = std::fs::read_dir(&w.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    });
}

// 7. `sandy restore` and a link a run made.

/// A run makes only `.claude -> ~/.claude` (and `.gemini -> DIR`) in the project: Sandy
/// names the link, and `sandy restore` never removes the real files behind it.
#[test]
fn restore_never_follows_a_link_the_run_made() {
    for_each_user(|w| {
        let settings = w.write("home/.claude/settings.json", "{\"theme\": \"dark\"}\n");
        let gemini = w.write("home/elsewhere/settings.json", "{}\n");
        let o = run(
            w,
            &[
                "--",
                "/bin/sh",
                "-c",
                &format!(
                    "ln -s {} .claude && ln -s {} .gemini",
                    w.home.join(".claude").display(),
                    gemini.parent().unwrap().display()
                ),
            ],
        );
        assert_code(&o, 0, "plant the links");
        let err = stderr(&o);
        assert!(err.contains("symbolic link"), "the link is named:\n{err}");
        if let Some(id) = restore_hint(&err) {
            let o = run_timeout(w.sandy(["restore", &id]), 30);
            assert!(o.status.code().is_some(), "restore ended");
        }
        assert_eq!(
            std::fs::read_to_string(&settings).unwrap(),
            "{\"theme\": \"dark\"}\n"
        );
        assert_eq!(std::fs::read_to_string(&gemini).unwrap(), "{}\n");
    });
}

/// A run creates `.claude/settings.json` in the project (named after the run, with a
/// restore that removes it); then, while a concurrent sandboxed run swaps `.claude` with
/// a link to `~/.claude` in a tight loop, `sandy restore` runs again and again: it
/// removes the project's file or refuses (or, once it succeeded, says the run is no
/// longer kept), and never touches the home's.
#[test]
fn restore_raced_by_link_swaps_never_reaches_outside() {
    for_each_user(|w| {
        let settings = w.write("home/.claude/settings.json", "{\"theme\": \"dark\"}\n");
        let o = run(
            w,
            &[
                "--",
                "/bin/sh",
                "-c",
                "mkdir -p .claude && echo '{}' > .claude/settings.json",
            ],
        );
        assert_code(&o, 0, "plant a project setting");
        let err = stderr(&o);
        let id = restore_run(&err);
        std::os::unix::fs::symlink(w.home.join(".claude"), w.project.join("trap")).unwrap();
        w.chown_all();
        let project = w.project.display().to_string();
        let adversary = Adversary::start(w, &[], "pair", &[&project, ".claude", "trap"]);
        for _ in 0..20 {
            let o = run_timeout(w.sandy(["restore", &id]), 30);
            // Once every path is back, the run is no longer kept: a later restore of it
            // says so.
            let gone = stderr(&o).contains("no such run is kept");
            assert!(
                matches!(o.status.code(), Some(0 | 1)) || gone,
                "{}",
                stderr(&o)
            );
            no_raw_controls(&stderr(&o));
            assert_eq!(
                std::fs::read_to_string(&settings).unwrap(),
                "{\"theme\": \"dark\"}\n",
                "the home's setting changed"
            );
        }
        let (out, _) = adversary.stop();
        assert!(out.contains("exchanges"), "{out}");
        assert!(w.home.join(".claude/settings.json").exists());
    });
}

// 8. Sandy's own records.

/// No grant reaches Sandy's cache, state or per-run directories: a write grant of a
/// directory holding one is refused with one line; a read grant of one holding the cache
/// masks it. A pre-run copy changed on disk is never put back.
#[test]
fn sandys_own_records_are_never_the_runs() {
    for_each_user(|w| {
        w.write("home/.cache/sandy/restore-canary", "mine\n");
        w.write("home/.local/state/sandy/canary", "mine\n");
        for (grant, own) in [
            ("home/.cache", "cache"),
            ("home/.local/state", "state directory"),
            ("tmp", "per-run directories"),
        ] {
            let path = w.root.join(grant).display().to_string();
            let o = run(w, &["--read-write", &path, "--", "true"]);
            assert_code(&o, 125, grant);
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{grant}: {err}");
            assert!(
                err.contains(&format!("Sandy's own {own}")),
                "{grant}: {err}"
            );
        }
        let cache = w.home.join(".cache").display().to_string();
        let o = run(
            w,
            &[
                "--read",
                &cache,
                "--",
                "/bin/sh",
                "-c",
                "cat ~/.cache/sandy/restore-canary",
            ],
        );
        assert_ne!(o.status.code(), Some(0), "Sandy's cache was readable");
        assert!(!stdout(&o).contains("mine"));
        let cache_sandy = w.home.join(".cache/sandy").display().to_string();
        let o = run_timeout(w.sandy(["why", "--read", &cache, &cache_sandy]), 30);
        assert!(
            stdout(&o).contains("one of Sandy's own directories"),
            "{}",
            stdout(&o)
        );
        // A run changes a protected file; its saved copy is then altered on disk: the
        // restore refuses it and leaves the file as it is.
        let o = w.host("git").args(["init", "-q"]).output().unwrap();
        assert_code(&o, 0, "git init");
        let config = w.project.join(".git/config");
        w.chown_all();
        // The configuration changes during a run (outside it): the run's end names the
        // change and saves the pre-run copy.
        // The run says it has started (after its state was recorded) with a file of its
        // own; the change comes after that, whatever the launch took.
        let started = w.project.join("started");
        let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", "touch started && sleep 1"]);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = Reaped(cmd.spawn().unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !started.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(started.exists(), "the run did not start");
        std::fs::write(&config, "[core]\n\tfsmonitor = touch /tmp/x\n").unwrap();
        let status = wait_timeout(&mut child.0, 60, "the run");
        let mut err = String::new();
        use std::io::Read;
        let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
        assert_eq!(status.code(), Some(0), "{err}");
        let id = restore_run(&err);
        let record = w.home.join(".local/state/sandy/restore").join(&id);
        let copy = std::fs::read_dir(&record)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "copy"))
            .unwrap();
        std::fs::write(&copy, "[core]\n\thooksPath = /tmp/planted\n").unwrap();
        let o = run_timeout(w.sandy(["restore", &id]), 30);
        assert_code(&o, 1, "restore with an altered copy");
        assert!(stderr(&o).contains("digest"), "{}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "[core]\n\tfsmonitor = touch /tmp/x\n"
        );
    });
}
