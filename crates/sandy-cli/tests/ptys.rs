//! New terminals inside the sandbox: a private devpts instance lets `script`, Python's
//! `pty` (and so tmux, expect and node-pty) allocate ptys, with or without an inherited
//! terminal; the inherited terminal keeps working (its descriptors, `/dev/tty` and
//! `ttyname`); `TIOCSTI` and `TIOCLINUX` stay refused on the new ptys; and no host pty is
//! reachable by name, not even one of the same user.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::*;

const SCRIPT: &str = "/usr/bin/script";

/// What the sandbox runs to allocate new terminals: `script` and Python's `pty.spawn`.
fn new_terminal_commands() -> String {
    format!(
        "{SCRIPT} -qc 'echo hi-from-script' /dev/null; echo \"script=$?\"\n\
         {PYTHON} -c 'import pty; pty.spawn([\"/bin/echo\", \"hi-from-pty-spawn\"])'; echo \"spawn=$?\"\n"
    )
}

#[test]
fn new_terminals_work_without_a_terminal() {
    if !std::path::Path::new(SCRIPT).exists() {
        skip("util-linux script is not installed");
        return;
    }
    for_each_user(|w| {
        let o = w.sh(&[], &new_terminal_commands());
        assert_code(&o, 0, "new terminals");
        let out = stdout(&o);
        assert_field(&out, "script", "0");
        assert_field(&out, "spawn", "0");
        assert!(out.contains("hi-from-script"), "{out}");
        assert!(out.contains("hi-from-pty-spawn"), "{out}");
    });
}

#[test]
fn new_terminals_work_from_a_terminal_which_keeps_working() {
    if !std::path::Path::new(SCRIPT).exists() {
        skip("util-linux script is not installed");
        return;
    }
    for_each_user(|w| {
        let harness = helper(w, "pty_run.py");
        let script = format!(
            "tty; echo \"tty=$?\"\n\
             test -t 0 && test -t 1 && echo \"inherited=0\"\n\
             echo via-dev-tty > /dev/tty; echo \"devtty=$?\"\n\
             {}",
            new_terminal_commands()
        );
        let mut cmd = w.host(PYTHON);
        cmd.args([harness.as_str(), "--"])
            .arg(sandy_bin())
            .args(["run", "--", "/bin/sh", "-c", &script]);
        let o = run_timeout(cmd, 60);
        assert_code(&o, 0, "sandy under a pty");
        let out = stdout(&o).replace('\r', "");
        assert_field(&out, "tty", "0");
        assert_field(&out, "inherited", "0");
        assert_field(&out, "devtty", "0");
        assert_field(&out, "script", "0");
        assert_field(&out, "spawn", "0");
        assert!(out.contains("via-dev-tty"), "{out}");
        assert!(out.contains("hi-from-script"), "{out}");
        assert!(out.contains("hi-from-pty-spawn"), "{out}");
        // ttyname names the inherited terminal (not "not a tty").
        assert!(
            out.lines().any(|l| l.starts_with("/dev/")),
            "tty printed no name:\n{out}"
        );
    });
}

#[test]
fn terminal_injection_stays_refused_on_new_ptys() {
    for_each_user(|w| {
        // TIOCSTI = 0x5412, TIOCLINUX = 0x541C; both on the master and the pty itself.
        let probe = "import errno, fcntl, os\n\
                     m, s = os.openpty()\n\
                     print('opened=0')\n\
                     for name, req, arg in (('sti', 0x5412, b'x'), ('linux', 0x541C, bytes([6, 0]))):\n\
                     \x20   for which, fd in (('master', m), ('pty', s)):\n\
                     \x20       try:\n\
                     \x20           fcntl.ioctl(fd, req, arg)\n\
                     \x20           print(f'{name}_{which}=0')\n\
                     \x20       except OSError as e:\n\
                     \x20           print(f'{name}_{which}={errno.errorcode[e.errno]}')\n\
                     # Positive: an ordinary terminal ioctl works on the new pty.\n\
                     import termios\n\
                     termios.tcgetattr(s)\n\
                     print('tcgetattr=0')\n";
        let file = w.write("home/project/probe.py", probe);
        let o = w.sh(&[], &format!("{PYTHON} '{}'", file.display()));
        assert_code(&o, 0, "the ioctl probe");
        let out = stdout(&o);
        assert_field(&out, "opened", "0");
        assert_field(&out, "tcgetattr", "0");
        for key in ["sti_master", "sti_pty", "linux_master", "linux_pty"] {
            assert_field(&out, key, "EPERM");
        }
    });
}

#[test]
fn host_ptys_of_the_same_user_stay_unreachable() {
    for_each_user(|w| {
        // A host pty owned by the test user, held open by a host process.
        let holder = "import os, sys, time\n\
                      m, s = os.openpty()\n\
                      print(os.ttyname(s), flush=True)\n\
                      time.sleep(60)\n";
        let file = w.write("holder.py", holder);
        let mut cmd = w.host(PYTHON);
        cmd.arg(&file).stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = Reaped(cmd.spawn().unwrap());
        let mut name = String::new();
        BufReader::new(child.0.stdout.take().unwrap())
            .read_line(&mut name)
            .unwrap();
        let name = name.trim().to_owned();
        assert!(name.starts_with("/dev/pts/"), "holder printed {name:?}");
        // Reachable from the host side by the same user (the positive control).
        let o = w
            .host("/bin/sh")
            .args(["-c", &format!("echo x > '{name}'; echo host=$?")])
            .output()
            .unwrap();
        assert_field(&stdout(&o), "host", "0");
        let o = w.sh(
            &[],
            &format!(
                "echo x > '{name}' 2>/dev/null; echo \"write=$?\"\n\
                 ls /dev/pts | grep -vx ptmx | wc -l | sed 's/^/listed=/'\n"
            ),
        );
        assert_code(&o, 0, "the reach attempt");
        let out = stdout(&o);
        assert_failed(&out, "write");
        assert_field(&out, "listed", "0");
        drop(child);
    });
}

#[test]
fn tmux_runs_inside() {
    const TMUX: &str = "/usr/bin/tmux";
    if !std::path::Path::new(TMUX).exists() {
        skip("tmux is not installed");
        return;
    }
    for_each_user(|w| {
        // A private server (its socket in the private /tmp) runs a command in a new pty.
        // SHELL is set because the unprivileged account's login shell is nologin.
        let o = w.sh(
            &[],
            &format!(
                "export SHELL=/bin/sh\n{TMUX} -S /tmp/t.sock new-session -d -x 80 -y 24 \
                   'echo tmux-pane-ran > /tmp/pane.out; sleep 5' ; echo \"new=$?\"\n\
                 for i in $(seq 50); do test -s /tmp/pane.out && break; sleep 0.1; done\n\
                 cat /tmp/pane.out\n\
                 {TMUX} -S /tmp/t.sock kill-server; echo \"kill=$?\"\n"
            ),
        );
        assert_code(&o, 0, "tmux inside");
        let out = stdout(&o);
        assert_field(&out, "new", "0");
        assert!(out.contains("tmux-pane-ran"), "{out}\n{}", stderr(&o));
    });
}

/// The inherited terminal can be reopened by the name `tty` gives it (issue 41, item 7):
/// `echo > $(tty)` works, as `GPG_TTY=$(tty)` and tools that reopen their terminal need,
/// and no write is reported refused after the run; terminal injection through that name
/// stays refused.
#[test]
fn the_inherited_terminal_is_reopened_by_its_name() {
    for_each_user(|w| {
        let harness = helper(w, "pty_run.py");
        let script = format!(
            "name=$(tty); echo \"name=$name\"\n\
             echo via-its-name > \"$name\"; echo \"reopened=$?\"\n\
             {PYTHON} -c 'import fcntl,os,sys,termios\n\
fd=os.open(sys.argv[1], os.O_RDWR)\n\
try:\n    fcntl.ioctl(fd, termios.TIOCSTI, b\"x\"); print(\"sti=allowed\")\n\
except OSError as e:\n    print(\"sti=%d\" % e.errno)' \"$name\"\n"
        );
        let mut cmd = w.host(PYTHON);
        cmd.args([harness.as_str(), "--"])
            .arg(sandy_bin())
            .args(["run", "--", "/bin/sh", "-c", &script]);
        let o = run_timeout(cmd, 60);
        assert_code(&o, 0, "sandy under a pty");
        let out = stdout(&o).replace('\r', "");
        assert!(out.contains("name=/dev/"), "{out}");
        assert_field(&out, "reopened", "0");
        assert!(out.contains("via-its-name"), "{out}");
        // EPERM: the floor refuses the request whatever the terminal's name.
        assert_field(&out, "sti", "1");
        assert!(!out.contains("refused"), "{out}");
    });
}

/// Without an inherited terminal nothing is bound at /dev/console, and the host's own
/// console stays out of reach (no write, as root too).
#[test]
fn without_a_terminal_the_hosts_console_stays_unwritable() {
    for_each_user(|w| {
        let o = w.sh(
            &[],
            "echo x > /dev/console 2>/dev/null; echo \"console=$?\"\n",
        );
        assert_code(&o, 0, "console write without a terminal");
        assert_field(&stdout(&o), "console", "2");
    });
}
