//! Shell and editor history, kept per project (issue 41, item 8): an interactive shell, a
//! REPL, `less` and vim inside the sandbox keep their history in the project's own
//! directory in Sandy's state, across runs of that project and never across projects;
//! the host's own history files are never written and never readable inside. Each run
//! is on a real terminal (`tests/helpers/pty_run.py`), as the tools only keep history
//! there, and judged from the host as well as from inside.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::*;

/// `pty_run.py --send-after MARKER BYTES... -- sandy run -- COMMAND...` as the test user
/// in `dir`, with `env` added to the caller's environment (`COMMAND` may start with
/// `sandy run`'s flags, up to its own `--`).
fn on_terminal(
    w: &World,
    dir: &Path,
    env: &[(&str, &str)],
    sends: &[(&str, &str)],
    command: &[&str],
) -> Output {
    let script = helper(w, "pty_run.py");
    let mut cmd = w.host(PYTHON);
    cmd.current_dir(dir)
        .env("TERM", "xterm")
        .envs(env.iter().copied())
        .arg(&script)
        .args(["--timeout", "20"]);
    for (marker, bytes) in sends {
        cmd.args(["--send-after", marker, bytes]);
    }
    cmd.arg("--").arg(sandy_bin()).arg("run");
    // `sandy run`'s own flags before the command, when it starts with them.
    if !command.contains(&"--") {
        cmd.arg("--");
    }
    cmd.args(command).stdin(Stdio::null());
    run_timeout(cmd, 40)
}

/// The project's history directory in the world's Sandy state (`NAME-HASH`).
fn history_dir(w: &World, project: &str) -> Option<PathBuf> {
    let base = w.home.join(".local/state/sandy/history");
    std::fs::read_dir(base)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{project}-")))
        })
}

fn make_project(w: &World, name: &str) -> PathBuf {
    let dir = w.home.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    w.chown_all();
    dir
}

/// bash (with a `HISTFILE` of the caller's naming the host's file) and Python keep their
/// history across two runs of one project, not across projects; the host's files stay
/// as they were and cannot be read inside; nothing is refused.
#[test]
fn bash_and_python_keep_history_per_project_and_never_touch_the_hosts() {
    for_each_user(|w| {
        let bash_host = w.write("home/.bash_history", "host-only-command\n");
        let python_host = w.write("home/.python_history", "host_only_python = 1\n");
        let host_histfile = bash_host.display().to_string();
        let env = [("HISTFILE", host_histfile.as_str())];
        let project = w.project.clone();

        // First run: a command typed into an interactive bash.
        let o = on_terminal(
            w,
            &project,
            &env,
            &[
                ("", "echo first-run-marker\n"),
                ("first-run-marker", "exit\n"),
            ],
            &["bash", "--norc", "-i"],
        );
        assert_code(&o, 0, "first bash");
        assert!(!stdout(&o).contains("refused"), "{}", stdout(&o));
        // Second run: it is in the history, the host's file is not readable, and HISTFILE
        // names the project's file.
        let o = on_terminal(
            w,
            &project,
            &env,
            &[(
                "",
                "history; cat ~/.bash_history || echo host-file-unreadable; \
                 echo \"histfile=$HISTFILE\"; exit\n",
            )],
            &["bash", "--norc", "-i"],
        );
        assert_code(&o, 0, "second bash");
        let out = stdout(&o);
        assert!(out.contains("echo first-run-marker"), "{out}");
        assert!(out.contains("host-file-unreadable"), "{out}");
        assert!(
            !out.contains("host-only-command"),
            "the host's history leaked: {out}"
        );
        assert!(
            out.contains("histfile=/tmp/.sandy-history/bash_history"),
            "{out}"
        );
        assert!(!out.contains("refused"), "{out}");

        // Python: a line typed in one run is the first history item of the next.
        let startup = w
            .write("home/project/startup.py", "user_startup = 7\n")
            .display()
            .to_string();
        let o = on_terminal(
            w,
            &project,
            &[],
            &[(">>> ", "x = 4242\n"), (">>> ", "exit()\n")],
            &[PYTHON],
        );
        assert_code(&o, 0, "first python");
        let o = on_terminal(
            w,
            &project,
            // The user's own start-up file still runs (Sandy's runs it).
            &[("PYTHONSTARTUP", startup.as_str())],
            &[
                (
                    ">>> ",
                    "import readline; print('item', readline.get_history_item(1), user_startup)\n",
                ),
                (
                    ">>> ",
                    "open(__import__('os').path.expanduser('~/.python_history')).read()\n",
                ),
                (">>> ", "exit()\n"),
            ],
            &[PYTHON],
        );
        assert_code(&o, 0, "second python");
        let out = stdout(&o);
        assert!(out.contains("item x = 4242 7"), "{out}");
        assert!(
            out.contains("PermissionError"),
            "the host's file was read: {out}"
        );
        assert!(
            !out.contains("host_only_python"),
            "the host's history leaked: {out}"
        );
        assert!(!out.contains("refused"), "{out}");

        // Judged from outside: the host's files are unchanged; the project's are in
        // Sandy's state, 0700.
        assert_eq!(
            std::fs::read_to_string(&bash_host).unwrap(),
            "host-only-command\n"
        );
        assert_eq!(
            std::fs::read_to_string(&python_host).unwrap(),
            "host_only_python = 1\n"
        );
        let dir = history_dir(w, "project").expect("no history directory");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert!(std::fs::read_to_string(dir.join("bash_history"))
            .unwrap()
            .contains("first-run-marker"));
        assert!(std::fs::read_to_string(dir.join("python_history"))
            .unwrap()
            .contains("x = 4242"));

        // Another project: its own history, without the first one's.
        let other = make_project(w, "other");
        let o = on_terminal(
            w,
            &other,
            &[],
            &[("", "history; echo done-other; exit\n")],
            &["bash", "--norc", "-i"],
        );
        assert_code(&o, 0, "bash in another project");
        let out = stdout(&o);
        assert!(out.contains("done-other"), "{out}");
        assert!(
            !out.contains("echo first-run-marker"),
            "shared history: {out}"
        );
        let theirs = history_dir(w, "other").expect("no history for the other project");
        assert_ne!(theirs, dir);
    });
}

/// A run plants symbolic links in its history directory (to the host's history and to
/// a file of the home); the next run's shell and REPL write their history through them:
/// nothing outside changes and nothing is read there, and Sandy itself never follows them.
#[test]
fn links_a_run_plants_in_its_history_lead_nowhere() {
    for_each_user(|w| {
        let bash_host = w.write("home/.bash_history", "host-only-command\n");
        let victim = w.write("home/notes.txt", "keep me\n");
        let project = w.project.clone();
        let plant = format!(
            "ln -sf {} /tmp/.sandy-history/bash_history && ln -sf {} /tmp/.sandy-history/python_history",
            bash_host.display(),
            victim.display()
        );
        let o = on_terminal(w, &project, &[], &[], &["/bin/sh", "-c", &plant]);
        assert_code(&o, 0, "plant the links");
        let dir = history_dir(w, "project").unwrap();
        assert!(std::fs::symlink_metadata(dir.join("bash_history"))
            .unwrap()
            .file_type()
            .is_symlink());
        let o = on_terminal(
            w,
            &project,
            &[],
            &[("", "history; echo planted-then-typed; exit\n")],
            &["bash", "--norc", "-i"],
        );
        assert_code(&o, 0, "bash over a planted link");
        assert!(!stdout(&o).contains("host-only-command"), "{}", stdout(&o));
        let o = on_terminal(
            w,
            &project,
            &[],
            &[(">>> ", "y = 1\n"), (">>> ", "exit()\n")],
            &[PYTHON],
        );
        assert_code(&o, 0, "python over a planted link");
        assert!(!stdout(&o).contains("keep me"), "{}", stdout(&o));
        assert_eq!(
            std::fs::read_to_string(&bash_host).unwrap(),
            "host-only-command\n"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        // The directory itself cannot be swapped for a link: it is a mount inside.
        let o = on_terminal(
            w,
            &project,
            &[],
            &[],
            &[
                "/bin/sh",
                "-c",
                "rm -rf /tmp/.sandy-history || mv /tmp/.sandy-history /tmp/moved; \
                 ls -d /tmp/.sandy-history",
            ],
        );
        assert!(stdout(&o).contains("/tmp/.sandy-history"), "{}", stdout(&o));
        assert!(dir.is_dir());
    });
}

/// The dry run on a terminal names every history kept, the variable that carries it and
/// the host file it stands in for, and says that the host's files are not used; without a
/// terminal no tool keeps history, and nothing is kept or made. A state directory that
/// cannot be made keeps no history (one line) and the run goes on.
#[test]
fn the_dry_run_names_the_history_and_an_unusable_state_directory_is_survived() {
    for_each_user(|w| {
        let project = w.project.clone();
        let o = on_terminal(w, &project, &[], &[], &["--dry-run", "--", "bash"]);
        assert_code(&o, 0, "dry run");
        let text = stdout(&o).replace("\r\n", "\n");
        // As published: `schemas/dry-run.v5.schema.json`.
        let doc = parse_dry_run(text.as_bytes(), "dry run on a terminal");
        let history = &doc["history"];
        assert_eq!(history["inside"], "/tmp/.sandy-history");
        assert_eq!(history["host_files_used"], false);
        let kept = history["kept"].as_array().unwrap();
        let bash = kept.iter().find(|k| k["tool"] == "bash").unwrap();
        assert_eq!(bash["variable"], "HISTFILE");
        assert_eq!(
            bash["instead_of"],
            w.home.join(".bash_history").display().to_string()
        );
        for tool in ["python", "node", "less", "vim"] {
            assert!(kept.iter().any(|k| k["tool"] == tool), "{tool}: {history}");
        }
        assert!(history["not_kept"][0]["tool"] == "fish", "{history}");
        // The dry run for people says it in one line.
        let o = on_terminal(
            w,
            &project,
            &[],
            &[],
            &["--dry-run", "--format", "text", "--", "bash"],
        );
        assert_code(&o, 0, "dry run as text");
        assert!(
            stdout(&o).contains("history:    bash, python, node, less, vim kept in ~/.local/state/sandy/history/project-"),
            "{}",
            stdout(&o)
        );
        // A dry run makes nothing.
        assert!(!w.home.join(".local/state/sandy/history").exists());
        // Without a terminal: none, and a run makes nothing either.
        let o = run_timeout(w.sandy(["run", "--dry-run", "--", "bash"]), 30);
        assert_code(&o, 0, "dry run without a terminal");
        let doc = parse_dry_run(&o.stdout, "dry run without a terminal");
        assert_eq!(doc["history"], serde_json::Value::Null);
        let o = w.sh(&[], "echo \"histfile=${HISTFILE:-unset}\"");
        assert!(stdout(&o).contains("histfile=unset"), "{}", stdout(&o));
        assert!(!w.home.join(".local/state/sandy/history").exists());

        // `~/.local/state` is a file: no history directory can be made.
        w.write("home/.local/state", "not a directory\n");
        let o = on_terminal(
            w,
            &project,
            &[],
            &[],
            &["/bin/sh", "-c", "echo \"histfile=${HISTFILE:-unset}\""],
        );
        assert_code(&o, 0, "a run without a usable state directory");
        let out = stdout(&o);
        assert!(out.contains("histfile=unset"), "{out}");
        assert!(
            out.contains(
                "history is not kept in this run: cannot create ~/.local/state/sandy/history/"
            ),
            "{out}"
        );
    });
}

/// node's REPL, less and vim (those installed) keep theirs in the project's directory
/// too, and write nothing in the home.
#[test]
fn node_less_and_vim_keep_theirs_in_the_project_directory() {
    for_each_user(|w| {
        let project = w.project.clone();
        w.write("home/project/notes.txt", "alpha\nbeta\n");
        let mut ran = Vec::new();
        for (tool, sends, command, file) in [
            (
                "/usr/bin/node",
                vec![("> ", "1+41\n"), ("42", ".exit\n")],
                vec!["/usr/bin/node"],
                "node_repl_history",
            ),
            (
                "/usr/bin/less",
                vec![("alpha", "/beta\rq")],
                vec!["/usr/bin/less", "notes.txt"],
                "lesshst",
            ),
            (
                "/usr/bin/vim",
                vec![("", ":let g:sandy_history = 1\r:q\r")],
                vec!["/usr/bin/vim", "-N"],
                "viminfo",
            ),
        ] {
            if !Path::new(tool).exists() {
                skip(&format!("{tool} is not installed"));
                continue;
            }
            let o = on_terminal(w, &project, &[], &sends, &command);
            assert_code(&o, 0, tool);
            assert!(!stdout(&o).contains("refused"), "{tool}: {}", stdout(&o));
            ran.push(file);
        }
        if ran.is_empty() {
            return;
        }
        let dir = history_dir(w, "project").unwrap();
        for file in ran {
            assert!(dir.join(file).is_file(), "{file} not kept");
        }
        for host in [".node_repl_history", ".lesshst", ".viminfo"] {
            assert!(!w.home.join(host).exists(), "{host} written in the home");
        }
    });
}

/// A start-up file that sets `HISTFILE` back to the host's file wins inside (the shell
/// reads it after its environment): the write is refused, the host file unchanged, and
/// the line after the run says where the history goes instead, never that a flag would
/// open the home.
#[test]
fn a_start_up_file_naming_the_hosts_history_is_refused_and_explained() {
    for_each_user(|w| {
        let bash_host = w.write("home/.bash_history", "host-only-command\n");
        w.write("home/.bashrc", "HISTFILE=~/.bash_history\n");
        let project = w.project.clone();
        let o = on_terminal(
            w,
            &project,
            &[],
            &[("", "echo typed-inside; exit\n")],
            &["bash", "-i"],
        );
        assert_code(&o, 0, "bash with a HISTFILE of its start-up file");
        let out = stdout(&o);
        assert!(
            out.contains(
                "write ~/.bash_history: refused; protected: no flag (your own bash history"
            ),
            "{out}"
        );
        assert!(!out.contains("--read-write"), "{out}");
        assert_eq!(
            std::fs::read_to_string(&bash_host).unwrap(),
            "host-only-command\n"
        );
    });
}
