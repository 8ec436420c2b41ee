//! The target on a real terminal: it sees a tty, Ctrl-C ends it (and the supervisor)
//! promptly, job control works from an interactive shell (Ctrl-Z, a command that stops
//! itself, `fg`), it may open `/dev/tty`, and it cannot inject input with `TIOCSTI`. Each run
//! goes through `tests/helpers/pty_run.py`, which gives the command a fresh pty as its
//! controlling terminal and copies what appears on the terminal to its stdout, so the
//! judgement is made from the host side of the master.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

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
        // The host finds the target by this unique argument (its pid inside differs).
        let token = format!("300.{}", std::process::id());
        let script = format!("touch started; echo READY; exec sleep {token}");
        let started = Instant::now();
        let o = pty_run(
            w,
            &["--send-after", "READY", "\\x03"],
            &sandy_run(&["/bin/sh", "-c", &script]),
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
        assert!(w.project.join("started").exists());
        let deadline = Instant::now() + Duration::from_secs(3);
        while !host_pids_with_arg(&token).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = host_pids_with_arg(&token);
        for pid in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert!(left.is_empty(), "the target survived Ctrl-C: {left:?}");
    });
}

/// An interactive bash on a fresh pty, as the job-controlling shell: `PROMPT$ ` marks
/// each prompt; `steps` are `--send-after` pairs. Returns the output; bash's own exit
/// status is 0 when the steps ran to the final `exit`.
fn interactive_bash(w: &World, steps: &[(&str, String)]) -> Output {
    let mut args: Vec<&str> = Vec::new();
    for (marker, bytes) in steps {
        args.extend(["--send-after", marker, bytes]);
    }
    pty_run(
        w,
        &args,
        &[
            "/usr/bin/env",
            "PS1=PROMPT$ ",
            "TERM=dumb",
            "/bin/bash",
            "--norc",
            "--noprofile",
            "-i",
        ],
    )
}

/// A command that stops itself gives the prompt back at once, and `fg` resumes it: the
/// output continues and the exit status is the command's. (Without Sandy the shell would
/// see the command stop; through Sandy the supervisor stops with it.)
#[test]
fn a_command_that_stops_itself_gives_the_prompt_back_and_fg_resumes_it() {
    for_each_user(|w| {
        let bin = sandy_bin().to_str().unwrap();
        // "ba""ck" so that the echoed command line does not contain the marker itself.
        let command = format!("{bin} run -- /bin/sh -c 'kill -TSTP $$; echo ba\"\"ck; exit 3'\\n");
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", command),
                ("Stopped", String::new()),
                ("PROMPT$ ", "fg\\n".into()),
                ("back", String::new()),
                ("PROMPT$ ", "echo \"status=$?\"\\n".into()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = stdout(&o);
        assert_code(&o, 0, &format!("the shell session: {out}{}", stderr(&o)));
        assert!(
            !stderr(&o).contains("markers never seen"),
            "{out}{}",
            stderr(&o)
        );
        let stopped = out.find("Stopped").unwrap();
        let back = out.find("back\r\n").unwrap();
        assert!(stopped < back, "{out}");
        assert!(out.contains("status=3"), "{out}");
    });
}

/// Like an editor in raw mode: Ctrl-Z arrives as a byte, and the program stops its own
/// process only (not the process group), then redraws when continued.
const RAW_MODE_EDITOR: &str = r#"
import os, signal, sys, termios, tty
fd = sys.stdin.fileno()
saved = termios.tcgetattr(fd)
tty.setraw(fd)
os.write(1, b"EDITOR-READY\r\n")
while True:
    c = os.read(fd, 1)
    if c == b"\x1a":
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        os.kill(os.getpid(), signal.SIGTSTP)
        tty.setraw(fd)
        os.write(1, b"RE" b"DRAWN\r\n")
    elif c == b"q":
        break
termios.tcsetattr(fd, termios.TCSADRAIN, saved)
os.write(1, b"QU" b"IT\r\n")
"#;

#[test]
fn a_raw_mode_program_handling_ctrl_z_gives_the_prompt_back_and_fg_resumes_it() {
    for_each_user(|w| {
        w.write("home/project/editor.py", RAW_MODE_EDITOR);
        let bin = sandy_bin().to_str().unwrap();
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", format!("{bin} run -- {PYTHON} editor.py\\n")),
                ("EDITOR-READY", "\\x1a".into()),
                ("Stopped", String::new()),
                ("PROMPT$ ", "fg\\n".into()),
                ("REDRAWN", "q".into()),
                ("QUIT", String::new()),
                ("PROMPT$ ", "echo \"status=$?\"\\n".into()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = stdout(&o);
        assert_code(&o, 0, &format!("the shell session: {out}{}", stderr(&o)));
        assert!(
            !stderr(&o).contains("markers never seen"),
            "{out}{}",
            stderr(&o)
        );
        assert!(out.contains("status=0"), "{out}");
    });
}

/// Ctrl-Z from the terminal stops the whole job (supervisor and target), and `fg`
/// resumes it where it was.
#[test]
fn ctrl_z_from_the_terminal_stops_and_fg_resumes() {
    for_each_user(|w| {
        let bin = sandy_bin().to_str().unwrap();
        let command = format!("{bin} run -- /bin/sh -c 'echo RE\"\"ADY; read x; echo got-$x'\\n");
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", command),
                ("READY", "\\x1a".into()),
                ("Stopped", String::new()),
                ("PROMPT$ ", "fg\\n".into()),
                ("echo got-$x'", "hello\\n".into()),
                ("got-hello", String::new()),
                ("PROMPT$ ", "echo \"status=$?\"\\n".into()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = stdout(&o);
        assert_code(&o, 0, &format!("the shell session: {out}{}", stderr(&o)));
        assert!(
            !stderr(&o).contains("markers never seen"),
            "{out}{}",
            stderr(&o)
        );
        assert!(out.contains("status=0"), "{out}");
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
