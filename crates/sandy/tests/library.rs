//! The library, used as a consumer uses it: only the public API, from a single-threaded
//! `main` (this test has no libtest harness: a launch forks, which a multi-threaded test
//! runner would refuse). Each case is judged from outside the sandbox: files unchanged,
//! a listener never reached, no process left. As root, every case runs again as an
//! unprivileged user (uid 65534, or `SANDY_TEST_UID`/`SANDY_TEST_GID`).
//!
//! Prints libtest's lines, so that `scripts/test.sh` counts the cases.

#![allow(clippy::disallowed_methods)] // the test makes and judges its own fixtures

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sandy::{Command, DryRunFormat, ExplainMode, Policy, Restrictions};

type Case = (&'static str, fn(&World) -> Result<(), String>);

const CASES: &[Case] = &[
    (
        "a_command_writes_its_project_and_nothing_outside",
        project_only,
    ),
    ("the_exit_status_is_the_commands", exit_status),
    ("a_read_write_grant_opens_one_more_place", read_write_grant),
    (
        "a_blocked_network_never_reaches_a_host_listener",
        blocked_network,
    ),
    (
        "the_phases_hand_on_and_a_prepared_launch_leaves_nothing",
        phases,
    ),
    ("a_dropped_run_is_killed_and_finished", dropped_run),
    (
        "current_dir_names_the_project_and_its_relative_grants",
        current_dir,
    ),
    (
        "verify_names_the_run_that_changed_a_protected_path",
        verified_change,
    ),
    ("the_dry_run_is_the_versioned_document", dry_run),
    (
        "signals_and_limits_are_the_callers_again_after_a_run",
        signals_restored,
    ),
    ("a_caller_with_threads_is_refused", threads_refused),
    ("misuse_is_a_usage_error_and_runs_nothing", misuse),
    ("restrict_confines_the_calling_process", restrict_self),
];

/// The places a case works in: a project (the working directory), a home, and a place
/// outside both.
struct World {
    project: PathBuf,
    outside: PathBuf,
}

fn main() -> ExitCode {
    // A hung case ends the whole test (SIGALRM's default action) rather than CI's job.
    nix::unistd::alarm::set(900);
    let args: Vec<String> = std::env::args().collect();
    // Modes of this binary that a case starts as a child of its own.
    match args.get(1).map(String::as_str) {
        Some("--confine-child") => return confine_child(&args[2..]),
        Some("--threads-child") => return threads_child(),
        _ => {}
    }
    // `--base DIR`: where worlds are made (the unprivileged pass's, made by root).
    let base = args
        .iter()
        .position(|a| a == "--base")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let filter: Option<&String> = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-') && Some(Path::new(a.as_str())) != base.as_deref());
    let base = match base {
        Some(base) => base,
        None => match world_base("library", None) {
            Ok(base) => base,
            Err(e) => {
                println!("test result: FAILED. 0 passed; 1 failed ({e})");
                return ExitCode::FAILURE;
            }
        },
    };
    let mut failed = 0;
    let mut passed = 0;
    let root = nix::unistd::geteuid().is_root();
    for pass in [false, true] {
        if pass && !root {
            break;
        }
        if pass {
            // The same cases as an unprivileged user: this binary again, under setpriv.
            let (uid, gid) = test_ids();
            let theirs = match world_base("library-unprivileged", Some((uid, gid))) {
                Ok(b) => b,
                Err(e) => {
                    println!("test unprivileged_pass ... FAILED ({e})");
                    failed += 1;
                    continue;
                }
            };
            let status = std::process::Command::new("setpriv")
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--reset-env")
                .arg(std::env::current_exe().unwrap_or_default())
                .arg("--base")
                .arg(&theirs)
                .args(filter)
                .env_remove("HOME")
                .status();
            match status {
                Ok(s) if s.success() => {}
                other => {
                    println!("test unprivileged_pass ... FAILED ({other:?})");
                    failed += 1;
                }
            }
            continue;
        }
        for (name, case) in CASES {
            if filter.is_some_and(|f| !name.contains(f.as_str())) {
                continue;
            }
            let world = match World::make(&base) {
                Ok(w) => w,
                Err(e) => {
                    println!("test {name} ... FAILED (cannot make the world: {e})");
                    failed += 1;
                    continue;
                }
            };
            let who = if root { "root" } else { "unprivileged" };
            match case(&world) {
                Ok(()) => {
                    println!("test {name} ({who}) ... ok");
                    passed += 1;
                }
                Err(e) => {
                    println!("test {name} ({who}) ... FAILED: {e}");
                    failed += 1;
                }
            }
            world.remove();
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Where worlds are made: not under /tmp or /var/tmp, which are private inside the
/// sandbox. As root `/var/lib/sandy-e2e/NAME` (given to `owner` when named); otherwise
/// `$HOME/.cache/sandy-e2e/NAME`.
fn world_base(name: &str, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let base = if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/sandy-e2e").join(name)
    } else {
        PathBuf::from(std::env::var_os("HOME").ok_or("no HOME")?)
            .join(".cache/sandy-e2e")
            .join(name)
    };
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&base, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
    }
    Ok(base)
}

fn test_ids() -> (u32, u32) {
    let id = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    (
        id("SANDY_TEST_UID").unwrap_or(65534),
        id("SANDY_TEST_GID").unwrap_or(65534),
    )
}

impl World {
    fn make(base: &Path) -> Result<World, String> {
        let base = tempfile::Builder::new()
            .prefix("w-")
            .tempdir_in(base)
            .map_err(|e| e.to_string())?
            .keep();
        let project = base.join("project");
        let home = base.join("home");
        let outside = base.join("outside");
        for dir in [&project, &home, &outside] {
            std::fs::create_dir(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(outside.join("kept.txt"), "before").map_err(|e| e.to_string())?;
        std::env::set_current_dir(&project).map_err(|e| e.to_string())?;
        // SAFETY-free in this edition; one thread: nothing reads the environment meanwhile.
        std::env::set_var("HOME", &home);
        std::env::remove_var("XDG_CONFIG_HOME");
        std::env::remove_var("XDG_STATE_HOME");
        std::env::remove_var("XDG_CACHE_HOME");
        Ok(World { project, outside })
    }

    fn remove(self) {
        let _ = std::env::set_current_dir("/");
        if let Some(base) = self.project.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

fn quiet() -> Policy {
    Policy::new().explain(ExplainMode::Off)
}

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{e}>"))
}

fn project_only(w: &World) -> Result<(), String> {
    let kept = w.outside.join("kept.txt");
    let script = format!(
        "echo made > made.txt && echo changed > {0}; echo new > {1}/new.txt; true",
        kept.display(),
        w.outside.display()
    );
    let status = sh(&script)
        .policy(quiet())
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("the command failed: {status}"));
    }
    if read(&w.project.join("made.txt")) != "made\n" {
        return Err("the project was not writable".into());
    }
    if read(&kept) != "before" {
        return Err("a file outside the project changed".into());
    }
    if w.outside.join("new.txt").exists() {
        return Err("a file was created outside the project".into());
    }
    Ok(())
}

fn exit_status(_: &World) -> Result<(), String> {
    let status = sh("exit 7")
        .policy(quiet())
        .status()
        .map_err(|e| e.to_string())?;
    if status.code() != 7 || status.success() {
        return Err(format!("expected status 7, got {status}"));
    }
    let killed = sh("kill -TERM $$")
        .policy(quiet())
        .status()
        .map_err(|e| e.to_string())?;
    if killed.code() != 128 + 15 {
        return Err(format!("expected status 143 after SIGTERM, got {killed}"));
    }
    Ok(())
}

fn read_write_grant(w: &World) -> Result<(), String> {
    let status = sh(&format!(
        "echo granted > {}/granted.txt",
        w.outside.display()
    ))
    .policy(quiet().read_write(&w.outside))
    .status()
    .map_err(|e| e.to_string())?;
    if !status.success() || read(&w.outside.join("granted.txt")) != "granted\n" {
        return Err(format!("the granted place was not writable ({status})"));
    }
    // The neighbour of the grant stays closed.
    let neighbour = w
        .outside
        .parent()
        .map(|p| p.join("home"))
        .unwrap_or_default();
    let status = sh(&format!("echo x > {}/planted.txt", neighbour.display()))
        .policy(quiet().read_write(&w.outside))
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() || neighbour.join("planted.txt").exists() {
        return Err("a place beside the grant was writable".into());
    }
    Ok(())
}

fn blocked_network(_: &World) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let probe = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached >&3 && echo reached > reached.txt"
    );
    let mut bash = Command::new("bash");
    bash.arg("-c").arg(&probe);
    let status = bash
        .policy(quiet().block_net())
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() || Path::new("reached.txt").exists() {
        return Err("the sandbox reached the host's listener".into());
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok(_) => return Err("the listener was reached".into()),
        Err(e) => return Err(e.to_string()),
    }
    // Positive: the same policy without the block reaches it (the host's loopback is
    // the host's own service, opened with a local-port grant).
    let status = bash
        .policy(quiet().allow_local_port(port))
        .status()
        .map_err(|e| e.to_string())?;
    let mut got = String::new();
    if let Ok((mut conn, _)) = listener.accept() {
        let _ = conn.set_nonblocking(false);
        let _ = conn.read_to_string(&mut got);
    }
    if !status.success() || got != "reached\n" {
        return Err(format!(
            "the granted port was not reached ({status}, {got:?})"
        ));
    }
    Ok(())
}

fn no_children_left() -> Result<(), String> {
    match nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(-1),
        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
    ) {
        Err(nix::errno::Errno::ECHILD) => Ok(()),
        other => Err(format!("a process of the run was left: {other:?}")),
    }
}

fn phases(w: &World) -> Result<(), String> {
    let mut command = sh("echo phased > phased.txt");
    command.policy(quiet());
    let prepared = command.prepare().map_err(|e| e.to_string())?;
    let document = prepared.document().map_err(|e| e.to_string())?;
    if document["dry_run_schema_version"].as_u64().is_none() {
        return Err("the prepared policy has no versioned document".into());
    }
    if prepared.profile() != "generic" {
        return Err(format!("profile {}", prepared.profile()));
    }
    // Abandoned: the bootstrap forked ahead is gone, and nothing ran.
    drop(prepared);
    no_children_left()?;
    if w.project.join("phased.txt").exists() {
        return Err("an abandoned launch ran the command".into());
    }
    let running = command.prepare().map_err(|e| e.to_string())?.spawn();
    if running.failed() || running.id().is_none() {
        return Err("the command did not start".into());
    }
    let status = running.wait().finish().map_err(|e| e.to_string())?;
    if !status.success() || read(&w.project.join("phased.txt")) != "phased\n" {
        return Err(format!("the phased run did not write ({status})"));
    }
    no_children_left()
}

fn dropped_run(w: &World) -> Result<(), String> {
    let mut command = sh("echo started > started.txt; sleep 30; echo late > late.txt");
    command.policy(quiet());
    let running = command.prepare().map_err(|e| e.to_string())?.spawn();
    let pid = running.id().ok_or("the command did not start")?;
    // Started: its first write is there.
    for _ in 0..200 {
        if w.project.join("started.txt").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    drop(running);
    // Judged from outside: the process is gone, nothing of the run is left, and the
    // command never got to its last line.
    if Path::new(&format!("/proc/{pid}")).exists() {
        return Err(format!("the command (pid {pid}) still runs"));
    }
    no_children_left()?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    if w.project.join("late.txt").exists() {
        return Err("the dropped run went on".into());
    }
    Ok(())
}

fn verified_change(w: &World) -> Result<(), String> {
    // Nothing protected changed: no run to restore.
    let verified = sh("echo plain > plain.txt")
        .policy(quiet())
        .prepare()
        .map_err(|e| e.to_string())?
        .spawn()
        .wait()
        .verify();
    if let Some(id) = verified.changed_run() {
        return Err(format!("a plain run was named as changing something: {id}"));
    }
    verified.report().map_err(|e| e.to_string())?;
    // A repository made by the run (`.git` is protected, absent at launch): named, with
    // the id `sandy restore` takes.
    let verified = sh("git init -q . && echo made > in-repo.txt")
        .policy(quiet())
        .prepare()
        .map_err(|e| e.to_string())?
        .spawn()
        .wait()
        .verify();
    let id = verified.changed_run().map(str::to_owned);
    let status = verified.report().map_err(|e| e.to_string())?;
    if !status.success() || !w.project.join(".git").exists() {
        return Err(format!("the run could not make its repository ({status})"));
    }
    match id {
        Some(id) if !id.is_empty() => Ok(()),
        _ => Err("the run that made a repository was not named".into()),
    }
}

fn current_dir(w: &World) -> Result<(), String> {
    // The caller stays in the world's base; the run's project is `project`.
    let base = w.project.parent().ok_or("no base")?.to_path_buf();
    std::env::set_current_dir(&base).map_err(|e| e.to_string())?;
    let script = format!(
        "pwd > here.txt && cat ../outside/kept.txt > copied.txt; echo x > {}/caller.txt",
        base.display()
    );
    let mut command = sh(&script);
    command
        .current_dir("project")
        .policy(quiet().read("../outside"));
    let status = command.status().map_err(|e| e.to_string())?;
    let _ = std::env::set_current_dir(&w.project);
    let here = read(&w.project.join("here.txt"));
    if here.trim_end() != w.project.to_str().unwrap_or("?") {
        return Err(format!("the run's working directory was {here:?}"));
    }
    if read(&w.project.join("copied.txt")) != "before" {
        return Err("the relative read grant was not taken from the project".into());
    }
    // The caller's own directory is not the project: not writable.
    if status.success() || base.join("caller.txt").exists() {
        return Err("the caller's directory was writable".into());
    }
    let missing = sh("true")
        .current_dir(w.project.join("absent"))
        .policy(quiet())
        .status();
    match missing {
        Err(e) if e.exit_code() == 125 && e.to_string().contains("absent") => Ok(()),
        other => Err(format!(
            "a missing working directory was not refused: {other:?}"
        )),
    }
}

fn dry_run(w: &World) -> Result<(), String> {
    let text = sh("echo dry > dry.txt")
        .policy(quiet().read(&w.outside))
        .dry_run(DryRunFormat::Json)
        .map_err(|e| e.to_string())?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if doc["dry_run_schema_version"].as_u64().is_none() {
        return Err("no schema version".into());
    }
    if !text.contains(w.outside.to_str().unwrap_or("?")) {
        return Err("the grant is not in the document".into());
    }
    if w.project.join("dry.txt").exists() {
        return Err("the dry run ran the command".into());
    }
    no_children_left()
}

fn signals_restored(_: &World) -> Result<(), String> {
    use nix::sys::resource::{getrlimit, Resource};
    // The signals this process ignores, blocks and catches, as the kernel shows them: the
    // same after a run as before it, whatever they were (a test started in the background
    // of a shell ignores SIGINT already).
    let signals = || -> Result<Vec<String>, String> {
        let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
        Ok(status
            .lines()
            .filter(|l| {
                l.starts_with("SigIgn:") || l.starts_with("SigBlk:") || l.starts_with("SigCgt:")
            })
            .map(str::to_owned)
            .collect())
    };
    let before = signals()?;
    let limit = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| e.to_string())?;
    sh("true")
        .policy(quiet())
        .status()
        .map_err(|e| e.to_string())?;
    // A run with the egress proxy, which raises the open-file limit while it serves.
    sh("true")
        .policy(quiet().block_net())
        .status()
        .map_err(|e| e.to_string())?;
    if getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| e.to_string())? != limit {
        return Err("the open-file limit was left changed".into());
    }
    let after = signals()?;
    if after != before {
        return Err(format!(
            "the signals were left changed: {before:?} before, {after:?} after"
        ));
    }
    Ok(())
}

fn threads_refused(_: &World) -> Result<(), String> {
    let out = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .arg("--threads-child")
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.code() != Some(0) || !text.contains("refused:") {
        return Err(format!("a caller with threads was not refused: {text}"));
    }
    if Path::new("threaded.txt").exists() {
        return Err("the command ran".into());
    }
    Ok(())
}

fn misuse(w: &World) -> Result<(), String> {
    match Command::from_argv(Vec::new()) {
        Err(e) if e.exit_code() == 2 => {}
        other => return Err(format!("an empty command was not a usage error: {other:?}")),
    }
    // A policy file is the whole policy: a grant beside it is refused before anything.
    let file = w.outside.join("policy.toml");
    std::fs::write(&file, "version = 1\n").map_err(|e| e.to_string())?;
    let refused = sh("echo x > misused.txt")
        .policy(quiet().policy_file(&file).read(&w.outside))
        .status();
    match refused {
        Err(e) if e.exit_code() == 2 => {}
        other => return Err(format!("a grant beside a policy file ran: {other:?}")),
    }
    // A grant that does not exist fails closed (125), and the command never runs.
    let missing = sh("echo x > misused.txt")
        .policy(quiet().read(w.outside.join("absent")))
        .status();
    match missing {
        Err(e) if e.exit_code() == 125 => {}
        other => return Err(format!("a missing grant did not fail closed: {other:?}")),
    }
    if w.project.join("misused.txt").exists() {
        return Err("a refused launch ran its command".into());
    }
    // The policy file alone runs.
    let status = sh("echo ok > by-file.txt")
        .policy(quiet().policy_file(&file))
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() || read(&w.project.join("by-file.txt")) != "ok\n" {
        return Err(format!("the policy file alone did not run ({status})"));
    }
    no_children_left()
}

fn threads_child() -> ExitCode {
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _t = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    match sh("echo x > threaded.txt").policy(quiet()).status() {
        Err(e) => {
            println!("refused: {e}");
            ExitCode::SUCCESS
        }
        Ok(s) => {
            println!("ran: {s}");
            ExitCode::FAILURE
        }
    }
}

fn restrict_self(w: &World) -> Result<(), String> {
    let allowed = w.project.join("allowed");
    std::fs::create_dir(&allowed).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&allowed, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| e.to_string())?;
    let kept = w.outside.join("kept.txt");
    let out = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .arg("--confine-child")
        .arg(&allowed)
        .arg(&kept)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("the confined child failed: {text}"));
    }
    // Judged from outside: the grant was written, the rest was not.
    if read(&allowed.join("ok.txt")) != "ok" {
        return Err("the granted directory was not written".into());
    }
    if read(&kept) != "before" {
        return Err("a file outside the grant changed".into());
    }
    Ok(())
}

/// A child that confines itself, then tries a granted write, a refused write and a
/// refused read, and a program from the system.
fn confine_child(args: &[String]) -> ExitCode {
    let (Some(allowed), Some(kept)) = (args.first(), args.get(1)) else {
        return ExitCode::FAILURE;
    };
    let restrictions = Restrictions::new().system().read_write(allowed).block_net();
    if let Err(e) = sandy::restrict(&restrictions) {
        println!("restrict failed: {e}");
        return ExitCode::FAILURE;
    }
    let mut bad = Vec::new();
    if std::fs::write(Path::new(allowed).join("ok.txt"), "ok").is_err() {
        bad.push("the granted write failed");
    }
    if std::fs::write(kept, "changed").is_ok() {
        bad.push("a write outside the grant succeeded");
    }
    if std::fs::read(kept).is_ok() {
        bad.push("a read outside the grant succeeded");
    }
    if std::net::TcpListener::bind("127.0.0.1:0").is_ok() {
        bad.push("a socket was bound with the network blocked");
    }
    match std::process::Command::new("true").status() {
        Ok(s) if s.success() => {}
        _ => bad.push("a system program did not run"),
    }
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("{}", bad.join("; "));
        ExitCode::FAILURE
    }
}
