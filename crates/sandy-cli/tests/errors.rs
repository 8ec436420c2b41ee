//! Errors name the path (issue 41, item 11): every error about a file or directory
//! names it, with the home shown as `~`, and a refused permission says whose the nearest
//! existing directory on the way is. Each is one `sandy:` line with exit 125, through the
//! real binary, as root and as an unprivileged user.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

/// The one line Sandy printed, after checking there is only one and the status is 125.
#[track_caller]
fn one_line(o: &std::process::Output, what: &str) -> String {
    assert_code(o, 125, what);
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("sandy: "), "{what}: {err}");
    err.trim_end().to_owned()
}

/// A path under the home is shown from `~`; one outside it in full.
#[test]
fn a_resolution_error_names_the_path_from_the_home() {
    for_each_user(|w| {
        let o = run_timeout(
            w.sandy([
                "run",
                "--read",
                &w.home.join("missing").display().to_string(),
                "--",
                "true",
            ]),
            30,
        );
        let line = one_line(&o, "a missing --read path");
        assert_eq!(line, "sandy: --read path does not exist: ~/missing");
        assert!(!line.contains(&w.home.display().to_string()), "{line}");
        let o = run_timeout(
            w.sandy([
                "run",
                "--read-write",
                &w.home.display().to_string(),
                "--",
                "true",
            ]),
            30,
        );
        let line = one_line(&o, "--read-write of the home");
        assert!(
            line.contains("--read-write ~ would expose the whole home"),
            "{line}"
        );
        // Outside the home, the path as it is.
        let outside = w.root.join("elsewhere-missing");
        let o = run_timeout(
            w.sandy([
                "run",
                "--read",
                &outside.display().to_string(),
                "--",
                "true",
            ]),
            30,
        );
        let line = one_line(&o, "a missing path outside the home");
        assert!(line.ends_with(&outside.display().to_string()), "{line}");
    });
}

/// A file Sandy cannot write names the file, and says whose the directory that refused is
/// (as an unprivileged user; root may write it, and the run goes on).
#[test]
fn a_refused_write_names_the_file_and_whose_the_directory_is() {
    for_each_user(|w| {
        let logs = w.project.join("logs");
        std::fs::create_dir(&logs).unwrap();
        w.chown_all();
        std::os::unix::fs::chown(&logs, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let o = run_timeout(
            w.sandy([
                "run",
                "--net-log",
                "logs/net.log",
                "--allow-domain",
                "example.invalid",
                "--",
                "true",
            ]),
            30,
        );
        if w.user.uid == 0 {
            assert_code(&o, 0, "root may write the log");
            return;
        }
        let line = one_line(&o, "an unwritable --net-log directory");
        assert!(line.contains("~/project/logs/net.log"), "{line}");
        assert!(
            line.ends_with("; ~/project/logs is owned by root, mode 0755"),
            "{line}"
        );
        assert!(!logs.join("net.log").exists());
    });
}

/// `sandy restore` of a run that is not kept names the run and how to list those kept;
/// the history directory Sandy cannot make is named with the directory that refused, and
/// the run goes on.
#[test]
fn restore_and_history_name_what_they_could_not_use() {
    for_each_user(|w| {
        let o = run_timeout(w.sandy(["restore", "20260101-000000-nothing-1"]), 30);
        let line = one_line(&o, "restore of an unknown run");
        assert!(
            line.contains("cannot restore run 20260101-000000-nothing-1: no such run is kept"),
            "{line}"
        );
        if w.user.uid == 0 {
            return;
        }
        // History is kept for runs on a terminal (the helper is written, and the world
        // handed to the user, before the state directory is given to root).
        let script = helper(w, "pty_run.py");
        let state = w.home.join(".local/state");
        std::fs::create_dir_all(&state).unwrap();
        w.chown_all();
        std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
        let mut cmd = w.host(PYTHON);
        cmd.arg(&script)
            .args(["--timeout", "20", "--"])
            .arg(sandy_bin())
            .args(["run", "--", "/bin/sh", "-c", "echo ran"]);
        let o = run_timeout(cmd, 40);
        assert_code(&o, 0, "a run without its history directory");
        let err = stdout(&o);
        assert!(err.contains("ran"), "{err}");
        assert!(
            err.contains("cannot create ~/.local/state/sandy/history/project-")
                && err.contains("; ~/.local/state is owned by root, mode 0755"),
            "{err}"
        );
    });
}
