//! Process isolation through the real binary, judged from the host side: processes outside
//! the sandbox cannot be signalled, traced or read; abstract sockets outside cannot be
//! reached; inherited descriptors do not cross; the target holds no privileges; the
//! supervisor's death, the command's exit or crash end every process of the run, however
//! detached, and the next run removes a killed run's private /tmp; the sandbox has its own
//! /proc; a nested `sandy run` says so; SIGINT reaches the target as the caller left it;
//! forwarded signals arrive; the seccomp floor is in place (host sockets cannot be listed
//! over sock_diag; calls off its allowlist answer ENOSYS; the terminal cannot be taken
//! over) and everyday workloads run under it; and Sandy fails closed when a layer cannot
//! be applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Output, Stdio};

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Writes a file into the project (where the target can read it).
fn in_project(w: &World, name: &str, contents: &str) {
    w.write(format!("home/project/{name}"), contents);
}

/// `sandy run -- ARGS...` as the test user, with a timeout.
fn sandy_run(w: &World, args: &[&str]) -> Output {
    let mut all = vec!["run", "--"];
    all.extend_from_slice(args);
    run_timeout(w.sandy(all), 30)
}

/// `sandy run -- sh -c SCRIPT` as the test user, with a timeout.
fn sandy_sh(w: &World, script: &str) -> Output {
    sandy_run(w, &["/bin/sh", "-c", script])
}

fn pid_of(child: &Child) -> i32 {
    i32::try_from(child.id()).unwrap()
}

// ---------------------------------------------------------------------------------------
// Processes outside the sandbox.

/// Probes a process by pid. With "all": signals it, tries to ptrace-attach, reads its
/// environ and opens its mem. With "control": only the non-destructive reads and signal 0.
const OUTSIDE_PROBE: &str = r#"
import ctypes, errno, json, os, signal, sys
pid, mode = int(sys.argv[1]), sys.argv[2]
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
res = {"signal0": attempt(lambda: os.kill(pid, 0))}
if mode == "all":
    res["stop"] = attempt(lambda: os.kill(pid, signal.SIGSTOP))
    res["term"] = attempt(lambda: os.kill(pid, signal.SIGTERM))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    res["ptrace"] = "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def read_environ():
    with open(f"/proc/{pid}/environ", "rb") as f:
        f.read()
def open_mem():
    with open(f"/proc/{pid}/mem", "rb"):
        pass
res["environ"] = attempt(read_environ)
res["mem"] = attempt(open_mem)
print(json.dumps(res), flush=True)
"#;

fn probe_results(o: &Output) -> serde_json::Value {
    let line = stdout(o);
    serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("bad probe output ({e}): {line}\nstderr: {}", stderr(o)))
}

#[test]
fn processes_outside_cannot_be_signalled_traced_or_read() {
    for_each_user(|w| {
        in_project(w, "outside_probe.py", OUTSIDE_PROBE);
        let mut victim = w.host("/bin/sleep");
        victim.arg("300").stdin(Stdio::null());
        let victim = Reaped(victim.spawn().unwrap());
        let pid = pid_of(&victim.0);
        let pid_s = pid.to_string();
        assert!(
            wait_for(5, || proc_state(pid) == Some('S')),
            "sleep did not start"
        );

        // Control: outside Sandy, the same user reaches the process.
        let mut control = w.host(PYTHON);
        control.args(["outside_probe.py", &pid_s, "control"]);
        let control = probe_results(&run_timeout(control, 20));
        for key in ["signal0", "environ", "mem"] {
            assert_eq!(control[key], "ok", "control {key}: {control}");
        }

        let o = sandy_run(w, &[PYTHON, "outside_probe.py", &pid_s, "all"]);
        assert_code(&o, 0, "probe inside");
        let inside = probe_results(&o);
        // The sandbox's PID namespace does not even contain the host's pids (ESRCH);
        // where a number happens to exist inside, the layers refuse (EPERM).
        for key in ["stop", "term", "ptrace"] {
            assert!(
                inside[key] == "ESRCH" || inside[key] == "EPERM",
                "{key}: {inside}"
            );
        }
        assert_ne!(inside["environ"], "ok", "environ: {inside}");
        assert_ne!(inside["mem"], "ok", "mem: {inside}");

        // The shell's kill builtin fails too.
        let o = sandy_sh(
            w,
            &format!("kill -STOP {pid_s}; echo stop=$?; kill -TERM {pid_s}; echo term=$?"),
        );
        assert_code(&o, 0, "kill inside");
        assert!(stdout(&o).contains("stop=1"), "{}", stdout(&o));
        assert!(stdout(&o).contains("term=1"), "{}", stdout(&o));

        // Host side: still alive, still sleeping, never stopped or traced.
        std::thread::sleep(Duration::from_millis(100));
        let state = proc_state(pid);
        assert_eq!(
            state,
            Some('S'),
            "the outside process is in state {state:?}"
        );
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.lines().any(|l| l == "TracerPid:\t0"),
            "the outside process is traced: {status}"
        );
    });
}

#[test]
fn target_can_signal_and_wait_its_own_child() {
    for_each_user(|w| {
        let started = Instant::now();
        let o = sandy_sh(w, "sleep 5 & kill $!; wait $!; echo status=$?");
        assert_code(&o, 0, "own child");
        assert!(stdout(&o).contains("status=143"), "{}", stdout(&o));
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the child was not killed"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Abstract Unix sockets.

/// Listens on an abstract name; appends "conn DATA" to a log file for each connection.
const ABSTRACT_LISTENER: &str = r#"
import socket, sys
name, log = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(b"\0" + name.encode())
s.listen(16)
print("LISTENING", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        data = c.recv(100)
    except OSError:
        data = b"?"
    with open(log, "ab") as f:
        f.write(b"conn " + data + b"\n")
    c.close()
"#;

/// Connects to an abstract name and sends a tag.
const ABSTRACT_CLIENT: &str = r#"
import errno, socket, sys
name, tag = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(b"\0" + name.encode())
    s.sendall(tag.encode())
    print("connected", flush=True)
except OSError as e:
    print("connect", errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"#;

/// A server and a client, both inside: the server in a forked child.
const ABSTRACT_BOTH_INSIDE: &str = r#"
import os, socket, sys
name = b"\0" + sys.argv[1].encode()
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(name)
srv.listen(1)
pid = os.fork()
if pid == 0:
    c, _ = srv.accept()
    c.sendall(b"pong:" + c.recv(10))
    os._exit(0)
srv.close()
cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
cli.connect(name)
cli.sendall(b"ping")
print(cli.recv(20).decode(), flush=True)
os.waitpid(pid, 0)
"#;

#[test]
fn abstract_sockets_outside_are_unreachable() {
    for_each_user(|w| {
        in_project(w, "client.py", ABSTRACT_CLIENT);
        let listener_py = w.write("listener.py", ABSTRACT_LISTENER);
        let log = w.root.join("connections.log");
        let name = unique("abstract");

        let mut cmd = w.host(PYTHON);
        cmd.arg(&listener_py).arg(&name).arg(&log);
        let (_listener, line) = start_announcing_line(cmd, "the host listener");
        assert_eq!(line, "LISTENING", "the host listener did not start");

        let o = sandy_run(w, &[PYTHON, "client.py", &name, "sandboxed"]);
        assert_code(&o, 0, "client inside");
        // Refused by Landlock's abstract-socket scope (EPERM), or not found at all: the
        // sandbox's own network namespace has its own abstract names (ECONNREFUSED).
        let refused = stdout(&o);
        assert!(
            ["connect EPERM", "connect ECONNREFUSED"].contains(&refused.trim()),
            "{refused}{}",
            stderr(&o)
        );

        // Control: a client outside gets through, so the log would show a connection.
        let mut control = w.host(PYTHON);
        control.args(["client.py", &name, "control"]);
        let control = run_timeout(control, 20);
        assert_eq!(stdout(&control).trim(), "connected", "{}", stderr(&control));
        assert!(
            wait_for(5, || std::fs::read_to_string(&log)
                .is_ok_and(|s| s.contains("conn control"))),
            "the listener never logged the control connection"
        );
        let seen = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            seen, "conn control\n",
            "the host listener saw other connections"
        );
    });
}

#[test]
fn abstract_sockets_inside_the_sandbox_work() {
    for_each_user(|w| {
        in_project(w, "both.py", ABSTRACT_BOTH_INSIDE);
        let o = sandy_run(w, &[PYTHON, "both.py", &unique("inside")]);
        assert_code(&o, 0, "server and client inside");
        assert_eq!(stdout(&o).trim(), "pong:ping", "{}", stderr(&o));
    });
}

// ---------------------------------------------------------------------------------------
// Descriptors.

#[test]
fn descriptor_opened_without_cloexec_does_not_reach_the_target() {
    for_each_user(|w| {
        let canary = "canary-7c1e-secret-contents";
        let secret = w.write("secret.txt", &format!("{canary}\n"));
        let target = "cat <&7; echo fds:; ls /proc/self/fd";
        let fds_after = |o: &Output| -> Vec<String> {
            stdout(o)
                .split("fds:")
                .nth(1)
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };

        // Control: without Sandy the descriptor is inherited.
        let mut control = w.host("/bin/sh");
        control.args([
            "-c",
            &format!("exec 7<'{}'; exec /bin/sh -c '{target}'", secret.display()),
        ]);
        let control = run_timeout(control, 20);
        assert!(stdout(&control).contains(canary), "{}", stdout(&control));
        assert!(fds_after(&control).contains(&"7".to_owned()));

        let mut cmd = w.host("/bin/sh");
        cmd.args([
            "-c",
            &format!(
                "exec 7<'{}'; exec '{}' run -- /bin/sh -c '{target}'",
                secret.display(),
                sandy_bin().display()
            ),
        ])
        .stdin(Stdio::null());
        let o = run_timeout(cmd, 30);
        assert_code(&o, 0, "sandy with fd 7 open");
        assert!(
            !stdout(&o).contains(canary),
            "the target read the caller's descriptor: {}",
            stdout(&o)
        );
        let fds = fds_after(&o);
        assert!(!fds.is_empty(), "no fd listing: {}", stdout(&o));
        assert!(
            !fds.contains(&"7".to_owned()),
            "fd 7 reached the target: {fds:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Privileges.

fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status:\n{status}"))
}

#[test]
fn target_has_no_new_privs_and_no_capabilities() {
    for_each_user(|w| {
        let o = sandy_run(w, &["/bin/cat", "/proc/self/status"]);
        assert_code(&o, 0, "cat status");
        let status = stdout(&o);
        assert_eq!(status_field(&status, "NoNewPrivs"), "1");
        for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert_eq!(
                status_field(&status, set),
                "0000000000000000",
                "{set} as {}",
                w.user.label
            );
        }
        if w.user.uid == 0 {
            assert_eq!(status_field(&status, "CapBnd"), "0000000000000000");
            // Control: root's programs outside Sandy do hold capabilities.
            let mut control = w.host("/bin/cat");
            control.arg("/proc/self/status");
            let control = stdout(&run_timeout(control, 20));
            assert_ne!(status_field(&control, "CapEff"), "0000000000000000");
        }
    });
}

/// The bootstrap is started on another CPU than the supervisor's, to make the run's
/// namespaces beside it while the policy is resolved; the target may still use every CPU
/// the caller may, as without Sandy, and no other: the same list as a bare command, also
/// for a caller limited to one CPU (`taskset`). On a machine with a single CPU both lists
/// are trivially the same.
#[test]
fn the_target_may_use_the_cpus_the_caller_may() {
    for_each_user(|w| {
        let allowed = |o: &Output| status_field(&stdout(o), "Cpus_allowed_list").to_owned();
        let inside = sandy_run(w, &["/bin/cat", "/proc/self/status"]);
        assert_code(&inside, 0, "cat status");
        let mut bare = w.host("/bin/cat");
        bare.arg("/proc/self/status");
        assert_eq!(allowed(&inside), allowed(&run_timeout(bare, 20)));

        let mut limited = w.host("/usr/bin/taskset");
        limited.args(["-c", "0"]).arg(sandy_bin()).args([
            "run",
            "--",
            "/bin/cat",
            "/proc/self/status",
        ]);
        let limited = run_timeout(limited, 30);
        assert_code(&limited, 0, "cat status under taskset -c 0");
        assert_eq!(allowed(&limited), "0");
    });
}

#[test]
fn setuid_root_binary_gains_nothing() {
    for_each_user(|w| {
        if !is_root() {
            skip("creating a setuid-root binary needs root");
            return;
        }
        if w.user.uid != 0 {
            // A setuid-root copy of id(1), executable only by the test user's group:
            // outside Sandy it reports euid=0, inside no_new_privs leaves it unprivileged.
            let suid = w.project.join("suid-id");
            std::fs::copy("/usr/bin/id", &suid).unwrap();
            std::os::unix::fs::chown(&suid, Some(0), Some(w.user.gid)).unwrap();
            std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4750)).unwrap();
            let mut control = w.host(suid.to_str().unwrap());
            control.stdin(Stdio::null());
            let control = run_timeout(control, 20);
            let inside = sandy_run(w, &[suid.to_str().unwrap()]);
            std::fs::remove_file(&suid).unwrap();
            if !stdout(&control).contains("euid=0") {
                skip(&format!(
                    "setuid is not honoured under {} here: {}",
                    w.project.display(),
                    stdout(&control)
                ));
                return;
            }
            assert_code(&inside, 0, "setuid id inside");
            assert!(
                stdout(&inside).contains(&format!("uid={}", w.user.uid))
                    && !stdout(&inside).contains("euid="),
                "a setuid-root binary gained privileges inside: {}",
                stdout(&inside)
            );
        } else {
            // Root's own setuid-root newgrp calls setgroups(2), which needs CAP_SETGID:
            // fine outside, refused inside (newgrp reports it and carries on).
            let newgrp = Path::new("/usr/bin/newgrp");
            if !newgrp.exists() {
                skip("no /usr/bin/newgrp");
                return;
            }
            let mut control = w.host("/usr/bin/newgrp");
            control.arg("root").stdin(Stdio::null());
            let control = run_timeout(control, 20);
            if !control.status.success() || stderr(&control).contains("not permitted") {
                skip(&format!(
                    "newgrp fails outside Sandy too: {}",
                    stderr(&control)
                ));
                return;
            }
            let inside = sandy_run(w, &["/usr/bin/newgrp", "root"]);
            assert!(
                stderr(&inside).contains("setgroups: Operation not permitted"),
                "newgrp kept its privileges inside: {}{}",
                stdout(&inside),
                stderr(&inside)
            );
        }
    });
}

// ---------------------------------------------------------------------------------------
// The supervisor and its target.

/// A unique duration for `sleep` (whole seconds, a unique fraction): the host finds the
/// process by it with [`host_pids_with_arg`], whatever its pid inside the sandbox.
fn sleep_token(secs: u32) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!(
        "{secs}.{:06}{n:03}",
        nanos / 1000 + std::process::id() % 1000
    )
}

/// Whether a survivor keeps touching `marker`: removed, then watched for a while.
fn marker_comes_back(marker: &Path) -> bool {
    let _ = std::fs::remove_file(marker);
    std::thread::sleep(Duration::from_millis(600));
    marker.exists()
}

/// The private per-run directories in the world's TMPDIR.
fn run_dirs(w: &World) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(w.runs())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sandy-"))
        .map(|e| e.path())
        .collect()
}

/// Nests itself N deep, each level in a new session (`setsid`), each level staying as a
/// `sleep TOKEN`; the deepest also starts a loop that keeps touching `chain.marker`.
const CHAIN: &str = r#"n=$1; t=$2
if [ "$n" -gt 0 ]; then
  setsid sh ./chain.sh $((n - 1)) "$t" </dev/null >/dev/null 2>&1 &
  exec sleep "$t"
fi
(while :; do touch chain.marker; sleep 0.05; done) &
touch chain.deep
exec sleep "$t"
"#;

#[test]
fn no_process_of_the_run_outlives_it() {
    for_each_user(|w| {
        in_project(w, "chain.sh", CHAIN);
        // A normal exit, and a crash of the command.
        for (ending, code) in [("exit 0", 0), ("kill -SEGV $$", 139)] {
            let _ = std::fs::remove_file(w.project.join("chain.deep"));
            let token = sleep_token(300);
            let script = format!(
                "setsid sh ./chain.sh 80 {token} </dev/null >/dev/null 2>&1 & \
                 (sh -c 'sleep {token} </dev/null >/dev/null 2>&1 &' &); \
                 sleep {token} </dev/null >/dev/null 2>&1 & \
                 while [ ! -e chain.deep ]; do sleep 0.05; done; \
                 while [ ! -e release ]; do sleep 0.05; done; rm release; {ending}"
            );
            let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", &script]);
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
            let mut sandy = Reaped(cmd.spawn().unwrap());
            assert!(
                wait_for(30, || w.project.join("chain.deep").exists()),
                "the chain never reached its end"
            );
            // From the host: every level of the chain, the daemon and the background job.
            let running = host_pids_with_arg(&token);
            let _cleanup: Vec<KillOnDrop> = running.iter().map(|p| KillOnDrop(*p)).collect();
            assert!(
                running.len() >= 83,
                "{ending}: only {} processes seen from the host",
                running.len()
            );
            w.write("home/project/release", "");
            let status = wait_timeout(&mut sandy.0, 20, "sandy");
            assert_eq!(status.code(), Some(code), "{ending}");
            let left = host_pids_with_arg(&token);
            assert!(left.is_empty(), "{ending}: survivors {left:?}");
            assert!(
                !marker_comes_back(&w.project.join("chain.marker")),
                "{ending}: a survivor still writes in the project"
            );
        }
    });
}

#[test]
fn killing_the_supervisor_ends_every_process_and_the_next_run_removes_its_tmp() {
    for_each_user(|w| {
        let token = sleep_token(300);
        let script = format!(
            "echo secret > \"$TMPDIR/left-behind\"; \
             setsid sh -c 'while :; do touch survivor.marker; sleep 0.05; done' \
               </dev/null >/dev/null 2>&1 & \
             (sh -c 'sleep {token} </dev/null >/dev/null 2>&1 &' &); \
             sleep {token} </dev/null >/dev/null 2>&1 & \
             touch ready; exec sleep {token}"
        );
        let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", &script]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let mut sandy = Reaped(cmd.spawn().unwrap());
        let ready = w.project.join("ready");
        assert!(wait_for(10, || ready.exists()), "the target never started");
        assert!(
            wait_for(5, || host_pids_with_arg(&token).len() >= 3),
            "the host does not see the run's processes: {:?}",
            host_pids_with_arg(&token)
        );
        let running = host_pids_with_arg(&token);
        let _cleanup: Vec<KillOnDrop> = running.iter().map(|p| KillOnDrop(*p)).collect();
        let dirs = run_dirs(w);
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        // The private /tmp is a tmpfs of the run's namespace, mounted on the per-run
        // directory: the host never sees what the run writes there.
        assert!(!dirs[0].join("left-behind").exists());
        // The bootstrap, which holds the run's namespaces, goes with its supervisor too.
        let supervisor = pid_of(&sandy.0);
        assert!(
            wait_for(5, || holder_of(supervisor).is_some()),
            "no namespaces holder among {:?}",
            children_of(supervisor)
        );
        let holder = holder_of(supervisor).unwrap();

        kill(Pid::from_raw(supervisor), Signal::SIGKILL).unwrap();
        let status = wait_timeout(&mut sandy.0, 5, "the killed supervisor");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(
            wait_for(5, || host_pids_with_arg(&token).is_empty()),
            "processes outlived their supervisor: {:?}",
            host_pids_with_arg(&token)
        );
        assert!(
            !marker_comes_back(&w.project.join("survivor.marker")),
            "a detached process outlived its supervisor"
        );
        assert!(
            wait_for(5, || process_gone(holder)),
            "the namespaces holder {holder} outlived its supervisor"
        );
        // The killed supervisor could not remove its private /tmp; the next runs do. Each
        // removes what it can while it runs and stops after the entry in progress when
        // its target ends (a short run on a loaded machine may leave the rest to the
        // next one): a few `true` runs are enough. What the run wrote went with its
        // namespace.
        assert!(dirs[0].exists());
        assert!(!dirs[0].join("left-behind").exists());
        for _ in 0..5 {
            let o = sandy_run(w, &["/bin/true"]);
            assert_code(&o, 0, "the next run");
            if !dirs[0].exists() {
                break;
            }
        }
        assert!(!dirs[0].exists(), "the stale private /tmp stayed");
        assert!(run_dirs(w).is_empty(), "{:?}", run_dirs(w));
    });
}

/// The children of process `pid` (all its threads'), as the host lists them.
fn children_of(pid: i32) -> Vec<i32> {
    let mut all = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let list =
            std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        all.extend(list.split_whitespace().map(|p| p.parse::<i32>().unwrap()));
    }
    all.sort_unstable();
    all
}

/// The bootstrap holding a run's namespaces: the supervisor's child named `sandy-ns`.
fn holder_of(supervisor: i32) -> Option<i32> {
    children_of(supervisor)
        .into_iter()
        .find(|&p| comm_of(p) == "sandy-ns")
}

fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn while_the_target_runs_the_supervisors_children_are_the_init_the_target_and_the_namespaces_holder(
) {
    for_each_user(|w| {
        let token = sleep_token(300);
        let script = format!("touch ready; exec sleep {token}");
        let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", &script]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let mut sandy = Reaped(cmd.spawn().unwrap());
        let supervisor = pid_of(&sandy.0);
        assert!(
            wait_for(10, || w.project.join("ready").exists()),
            "the target never started"
        );
        assert!(
            wait_for(5, || host_pids_with_arg(&token).len() == 1),
            "the host does not see the target: {:?}",
            host_pids_with_arg(&token)
        );
        let target = host_pids_with_arg(&token)[0];
        let _cleanup = KillOnDrop(target);
        // Once it has started both, the bootstrap only holds the namespaces (so that
        // their teardown comes after the run's answer), with no child of its own.
        let names = || {
            let mut n: Vec<String> = children_of(supervisor).into_iter().map(comm_of).collect();
            n.sort();
            n
        };
        assert!(
            wait_for(5, || names().iter().any(|n| n == "sandy-ns")),
            "the supervisor's children: {:?}",
            names()
        );
        let children = children_of(supervisor);
        assert_eq!(children.len(), 3, "the supervisor's children: {children:?}");
        assert!(
            children.contains(&target),
            "{children:?} lacks the target {target}"
        );
        let named = |name: &str| {
            *children
                .iter()
                .find(|&&p| p != target && comm_of(p) == name)
                .unwrap_or_else(|| panic!("no {name} among {children:?}"))
        };
        let init = named("sandy-init");
        let holder = named("sandy-ns");
        for (pid, what) in [(init, "the init"), (holder, "the bootstrap")] {
            assert!(
                children_of(pid).is_empty(),
                "{what} has children: {:?}",
                children_of(pid)
            );
        }

        // The init killed from outside takes the whole run with it, and the run's status
        // is the target's (killed by the kernel with its namespace).
        kill(Pid::from_raw(init), Signal::SIGKILL).unwrap();
        let status = wait_timeout(&mut sandy.0, 10, "sandy after its init was killed");
        assert_eq!(status.code(), Some(137), "{status:?}");
        assert!(
            wait_for(5, || process_gone(holder)),
            "the namespaces holder {holder} outlived the run"
        );
        assert!(
            wait_for(5, || host_pids_with_arg(&token).is_empty()),
            "the target outlived its init"
        );
    });
}

#[test]
fn a_live_runs_private_tmp_is_not_swept_by_another_run() {
    for_each_user(|w| {
        let mut cmd = w.sandy([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "echo kept > \"$TMPDIR/data\"; touch ready; while [ ! -e release ]; do sleep 0.05; done; cat \"$TMPDIR/data\"",
        ]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut sandy = Reaped(cmd.spawn().unwrap());
        let collector = Collector::start(&mut sandy.0);
        assert!(wait_for(10, || w.project.join("ready").exists()));
        let o = sandy_run(w, &["/bin/true"]);
        assert_code(&o, 0, "a second run");
        w.write("home/project/release", "");
        let status = wait_timeout(&mut sandy.0, 10, "the first run");
        let o = collector.finish(status);
        assert_code(&o, 0, "the first run");
        assert_eq!(stdout(&o), "kept\n");
    });
}

/// Lists which processes a /proc shows: how many, whether a `sleep TOKEN` is among them,
/// and whether /proc/self is the caller.
const PROC_PROBE: &str = r#"
import json, os, sys
token = sys.argv[1].encode()
pids = [p for p in os.listdir("/proc") if p.isdigit()]
found = False
for p in pids:
    try:
        with open(f"/proc/{p}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
            found = found or (args[0].endswith(b"sleep") and token in args)
    except OSError:
        pass
print(json.dumps({"count": len(pids), "found": found,
                  "self": os.readlink("/proc/self") == str(os.getpid())}), flush=True)
"#;

#[test]
fn the_sandbox_has_its_own_proc() {
    for_each_user(|w| {
        in_project(w, "proc_probe.py", PROC_PROBE);
        let token = sleep_token(300);
        let mut victim = w.host("/bin/sleep");
        victim.arg(&token).stdin(Stdio::null());
        let _victim = Reaped(victim.spawn().unwrap());
        assert!(wait_for(5, || !host_pids_with_arg(&token).is_empty()));

        let o = sandy_run(w, &[PYTHON, "proc_probe.py", &token]);
        assert_code(&o, 0, "probe inside");
        let inside = probe_results(&o);
        assert_eq!(
            inside["found"], false,
            "a host process is visible: {inside}"
        );
        assert_eq!(inside["self"], true, "/proc/self: {inside}");
        // The shell, the init, the probe; nothing of the host.
        assert!(inside["count"].as_u64().unwrap() <= 4, "{inside}");

        // Control: outside, the same probe finds the process.
        let mut control = w.host(PYTHON);
        control.args(["proc_probe.py", &token]);
        let control = probe_results(&run_timeout(control, 20));
        assert_eq!(control["found"], true, "control: {control}");
    });
}

/// Reads every other process of the sandbox through /proc (environ, cmdline and, where
/// the maps can be read, the memory itself) and reports where `argv[1]-argv[2]` appears
/// (given in two parts, so that only the probe's own memory holds it whole) and what
/// reading pid 1's environment gave. Further arguments limit the scan to those pids.
const MEMORY_PROBE: &str = r#"
import json, os, sys
canary = (sys.argv[1] + "-" + sys.argv[2]).encode()
found, denied = [], {}
me = str(os.getpid())
pids = sys.argv[3:] or [p for p in os.listdir("/proc") if p.isdigit() and p != me]
for pid in pids:
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                if canary in f.read():
                    found.append(f"{pid}/{part}")
        except OSError as e:
            denied[f"{pid}/{part}"] = e.errno
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(lo)
                    if canary in mem.read(hi - lo):
                        found.append(f"{pid}/mem")
                        break
                except (OSError, OverflowError, ValueError):
                    pass
    except OSError as e:
        denied[f"{pid}/mem"] = e.errno
print(json.dumps({"found": found, "init_environ": denied.get("1/environ", 0)}), flush=True)
"#;

/// The bootstrap is a fork of the supervisor, and the sandbox's init a fork of the
/// bootstrap: both hold a copy of the supervisor's memory, with the caller's whole
/// environment (including what the target does not get). Nothing inside can read it.
#[test]
fn the_supervisors_memory_cannot_be_read_from_inside() {
    for_each_user(|w| {
        let (head, tail) = ("canary-3f9a", "agent-socket");
        let canary = format!("{head}-{tail}");
        in_project(w, "memory_probe.py", MEMORY_PROBE);
        let mut cmd = w.sandy(["run", "--", PYTHON, "memory_probe.py", head, tail]);
        // Removed from the target's environment, so only the supervisor's copies hold it.
        cmd.env("SSH_AUTH_SOCK", format!("/nonexistent/{canary}"));
        let o = run_timeout(cmd, 30);
        assert_code(&o, 0, "memory probe inside");
        let inside = probe_results(&o);
        assert_eq!(inside["found"], serde_json::json!([]), "{inside}");
        assert_eq!(
            inside["init_environ"], 13,
            "reading the init's environment was not refused (EACCES): {inside}"
        );

        // Control: outside, the same probe finds the canary in the environment of a
        // process that holds it (a shell that waits for the probe).
        let mut control = w.host("/bin/sh");
        control
            .args([
                "-c",
                &format!("{PYTHON} memory_probe.py {head} {tail} $$; true"),
            ])
            .env("SSH_AUTH_SOCK", format!("/nonexistent/{canary}"));
        let control = probe_results(&run_timeout(control, 20));
        let found = control["found"].as_array().unwrap();
        assert!(!found.is_empty(), "control: {control}");
    });
}

#[test]
fn sandy_inside_sandy_says_so() {
    for_each_user(|w| {
        let nested = w.project.join("sandy-nested");
        std::fs::copy(sandy_bin(), &nested).unwrap();
        w.chown_all();
        // Unsetting SANDY does not hide the sandbox.
        let o = sandy_sh(
            w,
            "echo SANDY=$SANDY; env -u SANDY ./sandy-nested run -- /bin/true; echo status=$?",
        );
        assert_code(&o, 0, "the outer run");
        assert!(stdout(&o).contains("SANDY=1\n"), "{}", stdout(&o));
        assert!(stdout(&o).contains("status=125\n"), "{}", stdout(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("sandy: already inside a Sandy sandbox"),
            "{err}"
        );
        // The dry run lists SANDY among the variables Sandy sets.
        let o = run_timeout(w.sandy(["run", "--dry-run", "--", "/bin/true"]), 20);
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run");
        assert!(
            doc["environment"]["set"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("SANDY")),
            "{}",
            doc["environment"]
        );
        // Outside, SANDY=1 in the environment is not taken for a sandbox.
        let mut cmd = w.sandy(["run", "--", "/bin/true"]);
        cmd.env("SANDY", "1");
        assert_code(&run_timeout(cmd, 20), 0, "sandy with SANDY=1 outside");
    });
}

/// `env SIGNAL_FLAG [sandy run --] sh -c 'kill -INT $$; echo survived'`.
fn sigint_run(w: &World, flag: &str, through_sandy: bool) -> Output {
    let mut cmd = w.host("/usr/bin/env");
    cmd.arg(flag);
    if through_sandy {
        cmd.arg(sandy_bin()).args(["run", "--"]);
    }
    cmd.args(["/bin/sh", "-c", "kill -INT $$; echo survived"])
        .stdin(Stdio::null());
    run_timeout(cmd, 20)
}

/// Sandy runs the command as a shell would: SIGINT is the caller's. A caller that ignores
/// it (a script started in the background, `nohup`, `trap '' INT`) passes it on ignored,
/// exactly as without Sandy; otherwise the target gets the default action back (the
/// supervisor ignores it while it waits).
#[test]
fn the_target_gets_sigint_as_the_caller_left_it() {
    for_each_user(|w| {
        for (flag, code, out) in [
            ("--default-signal=INT", 130, ""),
            ("--ignore-signal=INT", 0, "survived\n"),
        ] {
            let bare = sigint_run(w, flag, false);
            let sandy = sigint_run(w, flag, true);
            assert_code(&sandy, code, flag);
            assert_eq!(stdout(&sandy), out, "{flag}");
            let bare_status = bare.status.code().or_else(|| {
                std::os::unix::process::ExitStatusExt::signal(&bare.status).map(|n| 128 + n)
            });
            assert_eq!(sandy.status.code(), bare_status, "{flag}: bare differs");
            assert_eq!(stdout(&sandy), stdout(&bare), "{flag}: bare differs");
        }
    });
}

/// Asks the kernel for every Unix socket over NETLINK_SOCK_DIAG (what `ss -x` does) and
/// reports whether one is named TOKEN; also opens a NETLINK_ROUTE socket.
const SOCK_DIAG_PROBE: &str = r#"
import errno, json, socket, struct, sys
token = sys.argv[1].encode()
res = {}
try:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
except OSError as e:
    res["sock_diag"] = errno.errorcode.get(e.errno, str(e.errno))
else:
    # unix_diag_req: AF_UNIX, every state, UDIAG_SHOW_NAME.
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xffffffff, 0, 1, 0xffffffff, 0xffffffff)
    hdr = struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY, REQUEST|DUMP
    s.sendto(hdr + req, (0, 0))
    found, count, done = False, 0, False
    while not done:
        data = s.recv(1 << 16)
        off = 0
        while off + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind in (2, 3) or length < 16:  # NLMSG_ERROR, NLMSG_DONE
                done = True
                break
            count += 1
            found = found or token in data[off:off + length]
            off += (length + 3) & ~3
    res["sock_diag"] = "ok"
    res["count"] = count
    res["found"] = found
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # NETLINK_ROUTE
    res["route"] = "ok"
except OSError as e:
    res["route"] = errno.errorcode.get(e.errno, str(e.errno))
# The kernel's other listing: /proc/net/unix (really /proc/self/net/unix).
for name in ("/proc/net/unix", "/proc/self/net/unix"):
    try:
        with open(name, "rb") as f:
            res[name] = token in f.read()
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(res), flush=True)
"#;

/// Listens on an abstract and a path Unix socket named after TOKEN until killed.
const HOST_LISTENER: &str = r#"
import socket, sys, time
token = sys.argv[1]
a = socket.socket(socket.AF_UNIX); a.bind("\0" + token); a.listen()
p = socket.socket(socket.AF_UNIX); p.bind(sys.argv[2]); p.listen()
print("listening", flush=True)
time.sleep(60)
"#;

#[test]
fn host_unix_sockets_cannot_be_listed_over_sock_diag_or_in_proc() {
    for_each_user(|w| {
        in_project(w, "sock_diag.py", SOCK_DIAG_PROBE);
        in_project(w, "listener.py", HOST_LISTENER);
        let token = unique("sockdiag");
        let path = w.root.join(format!("{token}.sock"));
        let mut listener = w.host(PYTHON);
        listener
            .args(["listener.py", &token, path.to_str().unwrap()])
            .stdout(Stdio::piped());
        let (_listener, line) = start_announcing_line(listener, "the host listener");
        assert_eq!(line.trim(), "listening");

        let o = sandy_run(w, &[PYTHON, "sock_diag.py", &token]);
        assert_code(&o, 0, "probe inside");
        let inside = probe_results(&o);
        assert_eq!(inside["sock_diag"], "EPROTONOSUPPORT", "{inside}");
        assert_eq!(inside["route"], "ok", "NETLINK_ROUTE: {inside}");
        // The sandbox has its own network namespace (its sockets are made in the
        // host's by the supervisor): /proc/net/unix lists none of the host's.
        assert_eq!(inside["/proc/net/unix"], false, "{inside}");
        assert_eq!(inside["/proc/self/net/unix"], false, "{inside}");

        // Control: outside, the query lists the listener (so the check above can tell).
        let mut control = w.host(PYTHON);
        control.args(["sock_diag.py", &token]);
        let control = probe_results(&run_timeout(control, 20));
        assert_eq!(control["sock_diag"], "ok", "control: {control}");
        assert_eq!(control["found"], true, "control: {control}");
        assert_eq!(control["/proc/net/unix"], true, "control: {control}");
    });
}

/// Exits with a status naming the signal it received; "ready" marks its handlers in place.
const SIGNAL_TARGET: &str = r#"
import signal, sys, time
codes = {signal.SIGTERM: 7, signal.SIGUSR1: 8, signal.SIGHUP: 9, signal.SIGUSR2: 10}
def handler(sig, frame):
    sys.exit(codes[sig])
for sig in codes:
    signal.signal(sig, handler)
open("ready", "w").close()
time.sleep(30)
sys.exit(99)
"#;

#[test]
fn signals_sent_to_the_supervisor_reach_the_target() {
    for_each_user(|w| {
        in_project(w, "signal_target.py", SIGNAL_TARGET);
        for (sig, code) in [
            (Signal::SIGTERM, 7),
            (Signal::SIGUSR1, 8),
            (Signal::SIGHUP, 9),
            (Signal::SIGUSR2, 10),
        ] {
            let ready = w.project.join("ready");
            let _ = std::fs::remove_file(&ready);
            let mut cmd = w.sandy(["run", "--", PYTHON, "signal_target.py"]);
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut sandy = Reaped(cmd.spawn().unwrap());
            let collector = Collector::start(&mut sandy.0);
            assert!(
                wait_for(10, || ready.exists()),
                "the target never got ready ({sig})"
            );
            kill(Pid::from_raw(pid_of(&sandy.0)), sig).unwrap();
            let status = wait_timeout(&mut sandy.0, 10, "sandy after a forwarded signal");
            let o = collector.finish(status);
            assert_code(&o, code, &format!("{sig} forwarded"));
        }
    });
}

// ---------------------------------------------------------------------------------------
// Failing closed.

/// Runs `sandy run -- sh -c 'touch marker'` under deny_syscalls.py with `numbers` failing
/// with ENOSYS; returns the output and whether the marker exists afterwards.
fn run_denied(w: &World, numbers: &str) -> (Output, bool) {
    let deny = helper(w, "deny_syscalls.py");
    let marker = w.project.join("marker");
    let _ = std::fs::remove_file(&marker);
    let mut cmd = w.host(PYTHON);
    cmd.arg(&deny)
        .arg(numbers)
        .arg("--")
        .arg(sandy_bin())
        .args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "touch marker; echo target-ran",
        ])
        .stdin(Stdio::null());
    let o = run_timeout(cmd, 30);
    (o, marker.exists())
}

#[track_caller]
fn assert_failed_closed(o: &Output, marker: bool, names: &str) {
    assert_code(o, 125, "sandy without a layer");
    assert!(!marker, "the target ran: the marker exists");
    assert!(!stdout(o).contains("target-ran"), "{}", stdout(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one error line: {err}");
    assert!(lines[0].starts_with("sandy: "), "{err}");
    assert!(
        lines[0].contains(names),
        "the error should name {names}: {err}"
    );
}

fn x86_64_only() -> bool {
    if cfg!(target_arch = "x86_64") {
        true
    } else {
        skip("deny_syscalls.py knows only x86_64 syscall numbers");
        false
    }
}

#[test]
fn fails_closed_without_landlock() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        // Control: the launcher itself (denying an unused syscall, uselib) lets Sandy work.
        let (o, marker) = run_denied(w, "134");
        assert_code(&o, 0, "sandy under an inert filter");
        assert!(marker, "the control run did not create the marker");

        // landlock_create_ruleset, landlock_add_rule, landlock_restrict_self.
        let (o, marker) = run_denied(w, "444,445,446");
        assert_failed_closed(&o, marker, "Landlock");

        // Only landlock_restrict_self: the supervisor's probe passes, the bootstrap fails.
        let (o, marker) = run_denied(w, "446");
        assert_failed_closed(&o, marker, "Landlock");
    });
}

#[test]
fn fails_closed_without_seccomp() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let (o, marker) = run_denied(w, "317");
        assert_failed_closed(&o, marker, "seccomp");
    });
}

// ---------------------------------------------------------------------------------------
// The seccomp floor, seen from inside.

const FLOOR_PROBE: &str = r#"
import ctypes, errno, json, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def sock(family, kind, proto=0):
    def f():
        socket.socket(family, kind, proto).close()
    return f
def raw_syscall(nr, *args):
    def f():
        if libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args]) < 0:
            e = ctypes.get_errno()
            raise OSError(e, "syscall")
    return f
def unshare_user():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        e = ctypes.get_errno()
        raise OSError(e, "unshare")
res = {
    "packet": attempt(sock(socket.AF_PACKET, socket.SOCK_RAW)),
    "inet_raw": attempt(sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
    "unshare_user": attempt(unshare_user),
    "clone3": attempt(raw_syscall(435, 0, 0)),
    "inet_tcp": attempt(sock(socket.AF_INET, socket.SOCK_STREAM)),
    "unix": attempt(sock(socket.AF_UNIX, socket.SOCK_STREAM)),
}
print(json.dumps(res), flush=True)
"#;

#[test]
fn seccomp_floor_denies_from_inside() {
    for_each_user(|w| {
        in_project(w, "floor.py", FLOOR_PROBE);
        let o = sandy_run(w, &[PYTHON, "floor.py"]);
        assert_code(&o, 0, "floor probe");
        let inside = probe_results(&o);
        for key in ["packet", "inet_raw", "unshare_user"] {
            assert_eq!(inside[key], "EPERM", "{key}: {inside}");
        }
        assert_eq!(inside["clone3"], "ENOSYS", "clone3: {inside}");
        assert_eq!(inside["inet_tcp"], "ok", "TCP socket: {inside}");
        assert_eq!(inside["unix"], "ok", "Unix socket: {inside}");

        // Control: outside Sandy the denials come from the filter, not from the host.
        // (As root everything is allowed; unprivileged, the raw sockets need CAP_NET_RAW,
        // so only the user namespace and clone3 tell there.)
        let mut control = w.host(PYTHON);
        control.arg("floor.py");
        let control = probe_results(&run_timeout(control, 20));
        if w.user.uid == 0 {
            for key in ["packet", "inet_raw"] {
                assert_eq!(control[key], "ok", "control {key}: {control}");
            }
        }
        if control["unshare_user"] != "ok" {
            eprintln!("note: user namespaces are refused outside Sandy too: {control}");
        }
        assert_ne!(control["clone3"], "ENOSYS", "control clone3: {control}");
    });
}

// ---------------------------------------------------------------------------------------
// The seccomp allowlist, seen from inside.

/// Calls off the allowlist and the terminal requests that take a terminal over: a number
/// no kernel has (499), calls this kernel has that the list leaves out (`listmount`;
/// `modify_ldt` on x86_64), and `TIOCSETD` / `TIOCEXCL` on a new pty, with the ordinary
/// requests on the same pty beside them.
const ALLOWLIST_PROBE: &str = r#"
import ctypes, errno, fcntl, json, platform, pty, struct, termios
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def name(e):
    return errno.errorcode.get(e, str(e))
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    return "ok" if r >= 0 else name(ctypes.get_errno())
res = {
    "unknown": sc(499),
    # listmount(NULL, NULL, 0, 0): EFAULT from the kernel (6.8 and later).
    "listmount": sc(458, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)),
}
if platform.machine() == "x86_64":
    # modify_ldt(0, buf, 16) reads the (empty) LDT.
    buf = ctypes.create_string_buffer(16)
    res["modify_ldt"] = sc(154, ctypes.c_long(0), buf, ctypes.c_long(16))
m, s = pty.openpty()
def ioctl(fd, request, arg):
    try:
        fcntl.ioctl(fd, request, arg)
        return "ok"
    except OSError as e:
        return name(e.errno)
# TIOCSETD to N_TTY (the discipline it has), TIOCEXCL, TIOCNXCL: asm-generic numbers.
res["tiocsetd"] = ioctl(s, 0x5423, struct.pack("i", 0))
res["tiocexcl"] = ioctl(s, 0x540C, 0)
res["tiocnxcl"] = ioctl(s, 0x540D, 0)
res["tiocgwinsz"] = ioctl(s, termios.TIOCGWINSZ, bytes(8))
attrs = termios.tcgetattr(s)
termios.tcsetattr(s, termios.TCSANOW, attrs)
res["tcsetattr"] = "ok"
print(json.dumps(res), flush=True)
"#;

#[test]
fn calls_off_the_allowlist_answer_enosys_and_terminal_takeover_is_refused() {
    for_each_user(|w| {
        in_project(w, "allowlist.py", ALLOWLIST_PROBE);
        let o = sandy_run(w, &[PYTHON, "allowlist.py"]);
        assert_code(&o, 0, "allowlist probe");
        let inside = probe_results(&o);
        assert_eq!(inside["unknown"], "ENOSYS", "{inside}");
        assert_eq!(inside["listmount"], "ENOSYS", "{inside}");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(inside["modify_ldt"], "ENOSYS", "{inside}");
        }
        assert_eq!(inside["tiocsetd"], "EPERM", "{inside}");
        assert_eq!(inside["tiocexcl"], "EPERM", "{inside}");
        for key in ["tiocnxcl", "tiocgwinsz", "tcsetattr"] {
            assert_eq!(inside[key], "ok", "{key}: {inside}");
        }

        // Control: outside Sandy the kernel answers these itself.
        let mut control = w.host(PYTHON);
        control.arg("allowlist.py");
        let control = probe_results(&run_timeout(control, 20));
        assert_eq!(control["unknown"], "ENOSYS", "control: {control}");
        for key in [
            "tiocsetd",
            "tiocexcl",
            "tiocnxcl",
            "tiocgwinsz",
            "tcsetattr",
        ] {
            assert_eq!(control[key], "ok", "control {key}: {control}");
        }
        // An older kernel, or one built without the call, says ENOSYS by itself.
        for key in ["listmount", "modify_ldt"] {
            if control[key] == "ENOSYS" {
                eprintln!("note: {key} is missing outside Sandy too: {control}");
            } else if !control[key].is_null() {
                assert_ne!(control[key], "EPERM", "control {key}: {control}");
            }
        }
    });
}

/// What real programs do every day, under the allowlist: Python threads, a process pool
/// and subprocesses; Node worker threads, child processes and a file watcher; git.
const WORKLOAD_PY: &str = r#"
import concurrent.futures, subprocess, threading
squares = []
threads = [threading.Thread(target=lambda i=i: squares.append(i * i)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
child = subprocess.run(["/bin/sh", "-c", "echo from-child"], capture_output=True, text=True)
with concurrent.futures.ProcessPoolExecutor(2) as pool:
    pooled = sum(pool.map(abs, [-1, -2, -3]))
print(f"python={sum(squares)}-{child.stdout.strip()}-{pooled}", flush=True)
"#;

const WORKLOAD_JS: &str = r#"
const { Worker } = require('worker_threads');
const cp = require('child_process');
const fs = require('fs');
const path = require('path');
const worker = new Worker(
  'require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
worker.on('message', (answer) => {
  const child = cp.execFileSync('/bin/sh', ['-c', 'echo from-child']).toString().trim();
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'watch-'));
  const watcher = fs.watch(dir, () => {
    watcher.close();
    worker.terminate();
    console.log(`node=${answer}-${child}-watched`);
  });
  setTimeout(() => fs.writeFileSync(path.join(dir, 'touched'), 'x'), 20);
});
"#;

#[test]
fn everyday_workloads_run_under_the_allowlist() {
    let have_node = Path::new("/usr/bin/node").exists();
    if !have_node {
        skip("/usr/bin/node is missing; the node part of this test did not run");
    }
    for_each_user(|w| {
        in_project(w, "workload.py", WORKLOAD_PY);
        in_project(w, "workload.js", WORKLOAD_JS);
        let node = if have_node {
            "/usr/bin/node workload.js; echo \"node_rc=$?\""
        } else {
            "echo node=skipped node_rc=0"
        };
        let o = sandy_sh(
            w,
            &format!(
                "{PYTHON} workload.py; echo \"python_rc=$?\"\n\
                 {node}\n\
                 git=/usr/bin/git\n\
                 mkdir repo && cd repo && $git init -q && echo hi > f && $git add f &&\n\
                 $git -c user.name=t -c user.email=t@e commit -q -m one &&\n\
                 $git log --format=git=%s; echo \"git_rc=$?\"\n"
            ),
        );
        assert_code(&o, 0, "workloads");
        let out = stdout(&o);
        assert_field(&out, "python_rc", "0");
        assert_field(&out, "python", "140-from-child-6");
        assert_field(&out, "node_rc", "0");
        if have_node {
            assert_field(&out, "node", "42-from-child-watched");
        }
        assert_field(&out, "git_rc", "0");
        assert_field(&out, "git", "one");
    });
}
