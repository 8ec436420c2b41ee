//! The target on a real terminal: it sees a tty, Ctrl-C ends it (and the supervisor)
//! promptly, it may open `/dev/tty`, and it cannot inject input with `TIOCSTI`. Each run
//! goes through `tests/helpers/pty_run.py`, which gives the command a fresh pty as its
//! controlling terminal and copies what appears on the terminal to its stdout, so the
//! judgement is made from the host side of the master.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Output, Stdio};

use std::time::{Duration, Instant};

use common::*;

/// `pty_run.py [PTY_ARGS...] -- COMMAND...` as the test user, in the project.
fn pty_run(w: &World, pty_args: &[&str], command: &[&str]) -> Output {
    let script = helper(w, "pty_run.py");
    let mut cmd = w.host(PYTHON);
    cmd.arg(&script)
        .args(["--timeout", "20"])
        .args(pty_args)
        .arg("--")
        .args(command)
        .stdin(Stdio::null());
    run_timeout(cmd, 40)
}

fn sandy_run<'a>(command: &[&'a str]) -> Vec<&'a str> {
    let bin = sandy_bin().to_str().unwrap();
    let mut v = vec![bin, "run", "--"];
    v.extend_from_slice(command);
    v
}

#[test]
fn target_sees_the_terminal_on_stdin_and_stdout() {
    for_each_user(|w| {
        let probe = "import os; print('tty', os.isatty(0), os.isatty(1))";
        let o = pty_run(w, &[], &sandy_run(&[PYTHON, "-c", probe]));
        assert_code(&o, 0, "isatty under a pty");
        assert!(
            stdout(&o).contains("tty True True"),
            "the target should see the terminal: {}{}",
            stdout(&o),
            stderr(&o)
        );
        // Without a terminal the same probe says so: the check above can fail.
        let plain = run_timeout(w.sandy(["run", "--", PYTHON, "-c", probe]), 20);
        assert_code(&plain, 0, "isatty without a pty");
        assert!(
            stdout(&plain).contains("tty False False"),
            "{}",
            stdout(&plain)
        );
    });
}

#[test]
fn ctrl_c_ends_the_target_and_the_supervisor_promptly() {
    for_each_user(|w| {
        let started = Instant::now();
        let o = pty_run(
            w,
            &["--send-after", "READY", "\\x03"],
            &sandy_run(&[
                "/bin/sh",
                "-c",
                "echo $$ > target.pid; echo READY; exec sleep 300",
            ]),
        );
        let elapsed = started.elapsed();
        assert_code(&o, 130, "sandy after Ctrl-C");
        assert!(
            !stderr(&o).contains("markers never seen"),
            "READY never appeared: {}",
            stderr(&o)
        );
        let after_send: f64 = stderr(&o)
            .lines()
            .find_map(|l| l.strip_prefix("pty_run: exit-after-send "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no timing from pty_run: {}", stderr(&o)));
        assert!(
            after_send < 3.0,
            "sandy took {after_send} s to exit after Ctrl-C"
        );
        assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
        // The target itself is gone, judged from the host.
        let pid: i32 = std::fs::read_to_string(w.project.join("target.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        while !process_gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !process_gone(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("the target (pid {pid}) survived Ctrl-C");
        }
    });
}

/// Tries to inject "ZQJ\n" into the terminal's input one byte at a time, then reports what
/// (if anything) is waiting on stdin.
const TIOCSTI_PROBE: &str = r#"
import errno, fcntl, os, select, termios
results = []
for ch in b"ZQJ\n":
    try:
        fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))
        results.append("ok")
    except OSError as e:
        results.append(errno.errorcode.get(e.errno, str(e.errno)))
print("tiocsti", " ".join(results), flush=True)
r, _, _ = select.select([0], [], [], 0.3)
print("pending", repr(os.read(0, 100)) if r else "nothing", flush=True)
"#;

#[test]
fn tiocsti_cannot_inject_terminal_input() {
    for_each_user(|w| {
        w.write("home/project/tiocsti.py", TIOCSTI_PROBE);
        let o = pty_run(w, &[], &sandy_run(&[PYTHON, "tiocsti.py"]));
        assert_code(&o, 0, "TIOCSTI probe");
        let out = stdout(&o);
        assert!(
            out.contains("tiocsti EPERM EPERM EPERM EPERM"),
            "TIOCSTI should fail with EPERM: {out}{}",
            stderr(&o)
        );
        assert!(out.contains("pending nothing"), "input appeared: {out}");
        // Host side: an injected byte would have been echoed by the terminal.
        assert!(
            !out.contains("ZQJ"),
            "injected input reached the terminal: {out}"
        );

        // The same probe outside Sandy injects (the kernel allows it here), so the
        // checks above can tell.
        let control = pty_run(w, &[], &[PYTHON, "tiocsti.py"]);
        let control_out = stdout(&control);
        if control_out.contains("tiocsti ok ok ok ok") {
            assert!(
                control_out.contains("ZQJ"),
                "the echo check cannot see injection: {control_out}"
            );
        } else {
            eprintln!("note: TIOCSTI is refused outside Sandy too here: {control_out}");
        }
    });
}

#[test]
fn target_can_open_dev_tty() {
    for_each_user(|w| {
        let o = pty_run(
            w,
            &[],
            &sandy_run(&[
                "/bin/sh",
                "-c",
                "echo hello-via-dev-tty > /dev/tty && echo status=$?",
            ]),
        );
        assert_code(&o, 0, "echo > /dev/tty");
        let out = stdout(&o);
        assert!(out.contains("hello-via-dev-tty"), "{out}{}", stderr(&o));
        assert!(out.contains("status=0"), "{out}");
    });
}
