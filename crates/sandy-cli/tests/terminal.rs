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

/// What an interactive session printed, once it is known to have run every step to
/// its final `exit`.
#[track_caller]
fn session_output(o: &Output) -> String {
    let out = stdout(o);
    assert_code(o, 0, &format!("the shell session: {out}{}", stderr(o)));
    assert!(
        !stderr(o).contains("markers never seen"),
        "{out}{}",
        stderr(o)
    );
    out
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
        let out = session_output(&o);
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
        let out = session_output(&o);
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
        let out = session_output(&o);
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

/// Leaves the terminal in a state no shell expects: raw mode without echo, exclusive mode
/// (a new open of the terminal then fails with EBUSY for everyone but root), and the
/// N_NULL line discipline (all input discarded, nothing echoed). Each attempt reports
/// whether it was refused; the run ends without putting anything back.
const TERMINAL_BREAKER: &str = r#"
import errno, fcntl, os, struct, termios, tty
tty.setraw(0)
for name, req, arg in (("excl", termios.TIOCEXCL, b""), ("setd", termios.TIOCSETD, struct.pack("i", 27))):
    try:
        fcntl.ioctl(0, req, arg) if arg else fcntl.ioctl(0, req)
        os.write(1, f"{name}=done\r\n".encode())
    except OSError as e:
        os.write(1, f"{name}={errno.errorcode.get(e.errno, e.errno)}\r\n".encode())
"#;

/// What the shell sees of its terminal: its settings, its line discipline and exclusive
/// mode, and whether it can open `/dev/tty` again.
const TERMINAL_STATE: &str = r#"
import fcntl, os, struct, termios
ldisc = struct.unpack("i", fcntl.ioctl(0, termios.TIOCGETD, b"\0" * 4))[0]
excl = struct.unpack("i", fcntl.ioctl(0, 0x80045440, b"\0" * 4))[0]  # TIOCGEXCL
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    reopen = "ok"
except OSError as e:
    reopen = str(e.errno)
print(f"state ldisc={ldisc} excl={excl} reopen={reopen} attrs={termios.tcgetattr(0)[:4]}")
"#;

/// The user's terminal after the run is the terminal before it: a run that sets raw mode,
/// exclusive mode and another line discipline and ends leaves the shell with its own
/// settings, N_TTY, no exclusive mode, and `/dev/tty` opening again; what the user types
/// next reaches the shell.
#[test]
fn the_terminal_after_the_run_is_the_terminal_before_it() {
    for_each_user(|w| {
        w.write("home/project/breaker.py", TERMINAL_BREAKER);
        w.write("home/project/state.py", TERMINAL_STATE);
        let bin = sandy_bin().to_str().unwrap();
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", format!("{PYTHON} state.py\\n")),
                ("state ", String::new()),
                ("PROMPT$ ", format!("{bin} run -- {PYTHON} breaker.py\\n")),
                // Under N_NULL nothing after this shows.
                ("excl=", String::new()),
                ("PROMPT$ ", format!("{PYTHON} state.py\\n")),
                ("state ", String::new()),
                ("PROMPT$ ", "echo typed-after-the-run\\n".into()),
                ("typed-after-the-run\r\n", String::new()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = session_output(&o);
        let states: Vec<&str> = out
            .lines()
            .filter_map(|l| l.trim_end().strip_prefix("state "))
            .collect();
        assert_eq!(states.len(), 2, "{out}");
        assert_eq!(states[0], states[1], "the terminal changed: {out}");
        assert!(states[1].starts_with("ldisc=0 excl=0 reopen=ok"), "{out}");
    });
}

/// A terminal's replies to queries the run sent just before it ended arrive after the
/// target's exit: they never reach the user's next prompt as typed input. The stand-in
/// terminal answers the run's "query" 50 ms later with a command line, which bash would
/// run, and Sandy's own status query after it (terminals answer in order). On a terminal
/// that takes no escape sequences (`TERM=dumb`) Sandy sends none.
#[test]
fn replies_to_the_runs_last_queries_never_reach_the_next_prompt() {
    for_each_user(|w| {
        let bin = sandy_bin().to_str().unwrap();
        let run = |term: &str| {
            format!("TERM={term} {bin} run -- /bin/sh -c 'printf \"QUE\"\"RY\\\\n\"'\\n")
        };
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", run("xterm-256color")),
                ("QUERY", "echo IN\"\"JECTED-RAN\\n".into()),
                ("\x1b[5n", "\\x1b[0n".into()),
                ("PROMPT$ ", "echo after-the-run\\n".into()),
                ("after-the-run\r\n", String::new()),
                ("PROMPT$ ", run("dumb")),
                ("QUERY", String::new()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = session_output(&o);
        assert!(!out.contains("INJECTED-RAN"), "the reply ran: {out}");
        let dumb = &out[out.rfind("after-the-run\r\n").unwrap()..];
        assert!(
            !dumb.contains('\x1b'),
            "an escape sequence for TERM=dumb: {dumb:?}"
        );
    });
}

/// While the target is stopped and the shell has the terminal back, no process of the
/// run reads or writes it: daemons of the run in sessions of their own, holding the
/// terminal, are frozen with the target, so nothing of theirs appears at the user's
/// prompt and what the user types goes to the shell. `fg` resumes the whole run.
#[test]
fn a_stopped_run_cannot_read_what_the_user_types_at_the_prompt() {
    for_each_user(|w| {
        w.write(
            "home/project/stopper.sh",
            "setsid sh -c 'while IFS= read -r x; do echo \"daemon-got:$x\" >> daemon.log; done' <&0 &\n\
             setsid sh -c 'while :; do echo daemon-tick; sleep 0.05; done' &\n\
             sleep 0.5\n\
             echo STOP\"\"PING\n\
             kill -STOP $$\n\
             echo RES\"\"UMED\n",
        );
        w.chown_all();
        let bin = sandy_bin().to_str().unwrap();
        let o = interactive_bash(
            w,
            &[
                ("PROMPT$ ", format!("{bin} run -- /bin/sh stopper.sh\\n")),
                ("STOPPING", String::new()),
                ("Stopped", String::new()),
                ("PROMPT$ ", "echo typed-by-the-user\\n".into()),
                ("typed-by-the-user\r\n", String::new()),
                ("PROMPT$ ", "echo second-line\\n".into()),
                ("second-line\r\n", String::new()),
                ("PROMPT$ ", "fg\\n".into()),
                ("RESUMED", String::new()),
                ("PROMPT$ ", "exit\\n".into()),
            ],
        );
        let out = session_output(&o);
        // Nothing of the run wrote to the terminal between the stop and `fg`.
        let stopped = &out[out.find("Stopped").unwrap()..out.rfind("fg\r\n").unwrap()];
        assert!(
            !stopped.contains("daemon-tick"),
            "the stopped run wrote: {stopped}"
        );
        let log = std::fs::read_to_string(w.project.join("daemon.log")).unwrap_or_default();
        assert!(
            !log.contains("typed-by-the-user") && !log.contains("second-line"),
            "the run read the user's typing: {log}"
        );
    });
}

/// Without a terminal (a run under `setsid`, as in CI) Sandy never stops itself when
/// the target does: nothing could continue it. The run goes on and ends with the
/// target's status.
#[test]
fn without_a_terminal_sandy_never_stays_stopped() {
    for_each_user(|w| {
        let bin = sandy_bin().to_str().unwrap();
        let mut cmd = w.host("/usr/bin/setsid");
        cmd.args([
            "-w",
            bin,
            "run",
            "--",
            "/bin/sh",
            "-c",
            "kill -STOP $$; echo resumed; exit 4",
        ])
        .stdin(std::process::Stdio::null());
        let o = run_timeout(cmd, 30);
        assert_code(&o, 4, "a detached run whose target stops itself");
        assert_eq!(stdout(&o), "resumed\n");
    });
}

/// The same findings in tmux, a terminal that answers queries for real: a run that asks
/// the terminal for its attributes and the cursor position just before it ends, and sets
/// raw mode without echo, leaves the user's bash prompt clean: the answers reach neither
/// the prompt nor the next command line, and what the user types next runs.
#[test]
fn in_tmux_a_runs_last_queries_and_raw_mode_leave_the_prompt_clean() {
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        skip("tmux is not installed");
        return;
    }
    for_each_user(|w| {
        let bin = sandy_bin().to_str().unwrap();
        let server = unique("sandy-term");
        let tmux = |args: &[&str]| {
            let o = std::process::Command::new("tmux")
                .args(["-L", &server])
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let script = w.write(
            "home/project/session.sh",
            &format!(
                "#!/bin/sh\ncd '{}' && exec {}env -i TERM=xterm-256color PATH=/usr/bin:/bin \
                 HOME='{}' PS1='PROMPT$ ' /bin/bash --norc --noprofile -i\n",
                w.project.display(),
                w.setpriv_prefix(),
                w.home.display()
            ),
        );
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        w.chown_all();
        tmux(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "30",
            script.to_str().unwrap(),
        ]);
        let screen = || tmux(&["capture-pane", "-p", "-J", "-t", "t"]);
        let wait = |text: &str| {
            let seen = wait_for(20, || screen().contains(text));
            assert!(seen, "waited for {text:?}:\n{}", screen());
        };
        let line = |text: &str| {
            tmux(&["send-keys", "-t", "t", "-l", text]);
            tmux(&["send-keys", "-t", "t", "Enter"]);
        };
        wait("PROMPT$ ");
        line(&format!(
            "{bin} run -- /bin/sh -c 'stty raw -echo; printf \"\\033[c\\033[6n\\033[>c\"; echo AS''KED'"
        ));
        wait("ASKED");
        wait_for(5, || screen().trim_end().ends_with("PROMPT$"));
        line("echo clean-$((40+2))");
        wait("clean-42");
        let after = screen();
        let tail = &after[after.find("ASKED").unwrap()..];
        let _ = tmux(&["kill-server"]);
        // No answer reached the prompt: a DA answer ends in `c`, a cursor report in `R`.
        for garbage in ["1;2c", ";1R", "[?", "^["] {
            assert!(
                !tail.contains(garbage),
                "an answer reached the prompt: {tail}"
            );
        }
        assert!(tail.contains("PROMPT$ echo clean-$((40+2))"), "{tail}");
    });
}
