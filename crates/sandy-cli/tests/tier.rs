//! The weaker `landlock` tier (`sandy run --tier landlock`), where namespaces are refused:
//! a simulated Ubuntu (tests/helpers/simulate_ubuntu.py: every mount in a new user
//! namespace refused with EPERM, as AppArmor's restriction does). Without the flag Sandy
//! refuses and names both paths; with it, the run works, says its tier in one line, and
//! keeps what docs/tiers.md says it keeps, judged from the host.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::process::{Output, Stdio};

use common::*;

const PYTHON: &str = "/usr/bin/python3";

fn x86_64_only() -> bool {
    if cfg!(target_arch = "x86_64") {
        true
    } else {
        skip("simulate_ubuntu.py knows only x86_64 syscall numbers");
        false
    }
}

/// `sandy ARGS...` as the world's user, in the simulated Ubuntu (no namespaces work).
fn in_ubuntu(w: &World, args: &[&str]) -> Output {
    let launcher = helper(w, "simulate_ubuntu.py");
    let mut cmd = w.host(PYTHON);
    cmd.arg(&launcher)
        .arg(sandy_bin())
        .args(args)
        .stdin(Stdio::null());
    run_timeout(cmd, 120)
}

/// `sandy run --tier landlock [FLAGS] -- sh -c SCRIPT` in the simulated Ubuntu.
fn landlock_sh(w: &World, flags: &[&str], script: &str) -> Output {
    let mut args = vec!["run", "--tier", "landlock"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    in_ubuntu(w, &args)
}

fn tier_lines(err: &str) -> usize {
    err.lines()
        .filter(|l| l.starts_with("sandy: tier landlock"))
        .count()
}

#[test]
fn without_the_flag_the_refusal_names_both_paths() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let marker = w.project.join("marker");
        let o = in_ubuntu(w, &["run", "--", "/bin/sh", "-c", "touch marker"]);
        assert_code(&o, 125, &format!("run without --tier, as {who}"));
        assert!(!marker.exists(), "as {who}: the target ran");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "as {who}: one line: {err}");
        assert!(err.contains(" setup`"), "as {who}: {err}");
        assert!(
            err.contains("`sandy run --tier landlock`"),
            "as {who}: {err}"
        );
        assert_eq!(tier_lines(&err), 0, "never a silent fallback: {err}");

        let doctor = in_ubuntu(w, &["doctor"]);
        assert_code(&doctor, 1, "doctor");
        assert!(
            stdout(&doctor).contains("`sandy run --tier landlock`"),
            "as {who}: {}",
            stdout(&doctor)
        );
        let json = in_ubuntu(w, &["doctor", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(doc["landlock_tier_available"], true, "{doc}");
    });
}

#[test]
fn the_landlock_tier_runs_a_project_command_and_says_so_once() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let o = in_ubuntu(w, &["run", "--tier", "landlock", "--", "true"]);
        assert_code(&o, 0, &format!("true in the landlock tier, as {who}"));
        assert_eq!(tier_lines(&stderr(&o)), 1, "as {who}: {}", stderr(&o));

        // A small build: a script reads a source, writes its output in the project and
        // a scratch file in its TMPDIR, which is not the host's /tmp.
        w.write("home/project/src.txt", "6 7\n");
        let o = landlock_sh(
            w,
            &[],
            "python3 -c 'a,b=open(\"src.txt\").read().split(); open(\"build.out\",\"w\").write(str(int(a)*int(b)))' \
             && echo scratch > \"$TMPDIR/scratch\" && cat \"$TMPDIR/scratch\" && echo \"tmpdir=$TMPDIR\"",
        );
        assert_code(&o, 0, &format!("the build, as {who}"));
        assert_eq!(tier_lines(&stderr(&o)), 1, "as {who}: {}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(w.project.join("build.out")).unwrap(),
            "42",
            "as {who}"
        );
        let out = stdout(&o);
        assert!(out.contains("scratch"), "as {who}: {out}");
        let tmpdir = out
            .lines()
            .find_map(|l| l.strip_prefix("tmpdir="))
            .unwrap()
            .to_owned();
        assert!(
            tmpdir.starts_with(w.runs().to_str().unwrap()),
            "as {who}: {tmpdir}"
        );
        // The per-run directory is gone after the run.
        assert!(!std::path::Path::new(&tmpdir).exists(), "as {who}");

        // The dry run names the tier and what it does with each promise.
        let o = in_ubuntu(w, &["run", "--tier", "landlock", "--dry-run", "--", "true"]);
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "landlock dry run");
        assert_eq!(doc["tier"]["name"], "landlock");
        let promises = doc["tier"]["promises"].as_array().unwrap();
        for (name, status) in [
            ("protected_paths_read_only", "kept_differently"),
            ("block_net", "kept_differently"),
            ("host_pathname_sockets_closed", "kept_differently"),
            ("metadata_changes_outside_grants", "dropped"),
            ("whole_tree_irreversible", "kept"),
        ] {
            assert!(
                promises
                    .iter()
                    .any(|p| p["promise"] == name && p["status"] == status),
                "{name}: {promises:?}"
            );
        }
        let layers = doc["enforcement"]["layers"].to_string();
        assert!(!layers.contains("namespace"), "{layers}");
    });
}

#[test]
fn where_namespaces_work_the_landlock_tier_still_runs_and_says_so() {
    for_each_user(|w| {
        let o = w.sh(&["--tier", "landlock"], "echo ran");
        assert_code(&o, 0, "the landlock tier where namespaces work");
        let err = stderr(&o);
        assert_eq!(tier_lines(&err), 1, "{err}");
        assert!(err.contains("namespaces work here"), "{err}");
        assert_eq!(stdout(&o), "ran\n");
    });
}

#[test]
fn hidden_paths_stay_unreadable_inside_a_read_grant() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        w.write(
            "home/.config/gh/hosts.yml",
            "oauth_token: SECRET-TIER-TOKEN\n",
        );
        w.write("home/.config/tool/settings", "visible-setting\n");
        let config = w.home.join(".config");
        let o = landlock_sh(
            w,
            &["--read", config.to_str().unwrap()],
            &format!(
                "cat {c}/tool/settings; cat {c}/gh/hosts.yml; ls {c}/gh; cat /etc/shadow | head -c 20; true",
                c = config.display()
            ),
        );
        assert_code(&o, 0, &format!("as {who}"));
        let out = stdout(&o);
        let err = stderr(&o);
        assert!(out.contains("visible-setting"), "as {who}: {out} {err}");
        assert!(!out.contains("SECRET-TIER-TOKEN"), "as {who}: {out}");
        assert!(!out.contains("hosts.yml"), "as {who}: {out}");
        assert!(err.contains("Permission denied"), "as {who}: {err}");
        // Judged from the host: the file is there and readable to its owner.
        let host = w
            .host("/bin/cat")
            .arg(config.join("gh/hosts.yml"))
            .output()
            .unwrap();
        assert!(stdout(&host).contains("SECRET-TIER-TOKEN"));
        // /etc is granted by its other entries.
        let o = landlock_sh(w, &[], "cat /etc/hostname >/dev/null && echo etc-ok");
        assert!(stdout(&o).contains("etc-ok"), "as {who}: {}", stderr(&o));
    });
}

#[test]
fn writes_outside_the_project_and_the_run_directory_are_refused() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let name = unique("tier-outside");
        let host_tmp = std::path::Path::new("/tmp").join(&name);
        let in_home = w.home.join(&name);
        let o = landlock_sh(
            w,
            &[],
            &format!(
                "echo x > {}; echo x > {}; echo x > /var/tmp/{name}; echo x > inside; true",
                host_tmp.display(),
                in_home.display()
            ),
        );
        assert_code(&o, 0, &format!("as {who}"));
        assert!(!host_tmp.exists(), "as {who}: wrote the host's /tmp");
        assert!(!in_home.exists(), "as {who}: wrote the home");
        assert!(!std::path::Path::new("/var/tmp").join(&name).exists());
        assert!(
            w.project.join("inside").exists(),
            "as {who}: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    });
}

#[test]
fn a_planted_git_hook_and_config_are_restored_after_the_run() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let git = w
            .host("/usr/bin/git")
            .args(["init", "-q", "."])
            .output()
            .unwrap();
        assert_code(&git, 0, "git init");
        let config = w.project.join(".git/config");
        let before = std::fs::read(&config).unwrap();
        let hook = w.project.join(".git/hooks/pre-commit");
        let o = landlock_sh(
            w,
            &[],
            "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit \
             && printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config && echo planted",
        );
        assert_code(&o, 0, &format!("as {who}"));
        assert!(stdout(&o).contains("planted"), "as {who}: {}", stderr(&o));
        let err = stderr(&o);
        // Judged from the host: both are back as they were, and the report says so.
        assert!(!hook.exists(), "as {who}: the hook stayed: {err}");
        assert_eq!(std::fs::read(&config).unwrap(), before, "as {who}: {err}");
        assert!(
            err.lines()
                .any(|l| l.starts_with("sandy: restored") && l.contains("pre-commit")),
            "as {who}: {err}"
        );
        assert!(
            err.lines()
                .any(|l| l.starts_with("sandy: restored") && l.contains(".git/config")),
            "as {who}: {err}"
        );
    });
}

#[test]
fn a_background_process_ends_with_the_run() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let tag = unique("tier-bg");
        let o = landlock_sh(
            w,
            &[],
            &format!(
                "setsid python3 -c 'import time; time.sleep(600)' {tag} </dev/null >/dev/null 2>&1 & \
                 (python3 -c 'import time; time.sleep(600)' {tag} </dev/null >/dev/null 2>&1 &); \
                 sleep 1; echo started"
            ),
        );
        assert_code(&o, 0, &format!("as {who}"));
        assert!(stdout(&o).contains("started"), "{}", stderr(&o));
        assert!(
            wait_for(30, || host_pids_with_arg(&tag).is_empty()),
            "as {who}: left running: {:?}",
            host_pids_with_arg(&tag)
        );
    });
}

#[test]
fn block_net_refuses_tcp_to_a_loopback_listener() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "python3 -c '
import socket
for fam, host in ((socket.AF_INET, \"127.0.0.1\"), (socket.AF_INET6, \"::1\")):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3); s.connect((host, {port})); print(\"connected\")
    except OSError as e: print(\"refused\", e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print(\"udp made\")
except OSError as e: print(\"udp refused\", e.errno)
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print(\"unix made\")
'"
        );
        let o = landlock_sh(w, &["--block-net"], &script);
        assert_code(&o, 0, &format!("as {who}"));
        let out = stdout(&o);
        assert!(!out.contains("connected"), "as {who}: {out}");
        assert!(out.contains("refused 1"), "as {who}: {out}");
        assert!(out.contains("udp refused 1"), "as {who}: {out}");
        assert!(out.contains("unix made"), "as {who}: {out}");
        // Judged from the host: nothing reached the listener.
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("as {who}: the listener was reached: {other:?}"),
        }
        // The same connection from the host works (the listener is real).
        let probe = w
            .host(PYTHON)
            .args([
                "-c",
                &format!("import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('ok')"),
            ])
            .output()
            .unwrap();
        assert_eq!(stdout(&probe), "ok\n", "{}", stderr(&probe));
        assert!(listener.accept().is_ok());
    });
}

#[test]
fn what_needs_a_network_namespace_is_refused_in_one_line() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let o = in_ubuntu(
            w,
            &[
                "run",
                "--tier",
                "landlock",
                "--allow-domain",
                "example.com",
                "--",
                "true",
            ],
        );
        assert_code(&o, 125, "--allow-domain in the landlock tier");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no network namespace"), "{err}");
    });
}

#[test]
fn the_self_test_runs_its_canaries_in_the_landlock_tier() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let o = in_ubuntu(w, &["doctor", "--json", "--selftest", "--tier", "landlock"]);
        assert_code(
            &o,
            0,
            &format!("doctor --selftest --tier landlock, as {who}"),
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("as {who}: not JSON ({e}): {}", stdout(&o)));
        assert_eq!(doc["selftest"]["tier"], "landlock", "{doc}");
        let status = |name: &str| {
            doc["selftest"]["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("no check {name}: {doc}"))["status"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        for name in [
            "read_secret",
            "write_outside",
            "plant_git_hook",
            "truncate_git_config",
            "tiocsti",
            "signal_outside",
            "ptrace_outside",
            "abstract_unix_socket",
            "tcp_loopback",
            "udp_loopback",
            "mptcp_socket",
            "pathname_unix_socket",
        ] {
            assert_eq!(status(name), "blocked", "as {who}: {name}: {doc}");
        }
    });
}

#[test]
fn the_default_network_keeps_the_hosts_tcp_services_closed_through_the_broker() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "python3 -c '
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect((\"127.0.0.1\", {port})); print(\"connected\")
except OSError as e: print(\"refused\", e.errno)
'"
        );
        let o = landlock_sh(w, &[], &script);
        assert_code(&o, 0, &format!("as {who}"));
        assert!(
            stdout(&o).contains("refused 13"),
            "as {who}: {}",
            stderr(&o)
        );
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("as {who}: the listener was reached: {other:?}"),
        }
        // Granted, the same port is reached (the supervisor connects it).
        let o = landlock_sh(w, &["--allow-local-port", &port.to_string()], &script);
        assert_code(&o, 0, &format!("as {who}"));
        assert!(stdout(&o).contains("connected"), "as {who}: {}", stderr(&o));
        assert!(
            listener.accept().is_ok(),
            "as {who}: nothing reached the host"
        );
    });
}

#[test]
fn git_reads_a_filtered_copy_of_the_users_configuration() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        w.write(
            "home/.gitconfig",
            "[user]\n\tname = Tier Tester\n\temail = tier@example.com\n\
             [http]\n\textraHeader = Authorization: Bearer SECRET-TIER-GIT\n",
        );
        let o = landlock_sh(
            w,
            &[],
            "git init -q && echo a > a && git add a && git commit -qm first && \
             git log -1 --format=%an && cat \"$GIT_CONFIG_GLOBAL\"; cat ~/.gitconfig; true",
        );
        assert_code(&o, 0, &format!("as {who}"));
        let out = stdout(&o);
        assert!(
            out.contains("Tier Tester"),
            "as {who}: {out} {}",
            stderr(&o)
        );
        assert!(!out.contains("SECRET-TIER-GIT"), "as {who}: {out}");
        // Judged from the host: the commit is there, by that author.
        let log = w
            .host("/usr/bin/git")
            .args(["log", "-1", "--format=%an"])
            .output()
            .unwrap();
        assert_eq!(stdout(&log), "Tier Tester\n", "as {who}: {}", stderr(&log));
    });
}

#[test]
fn host_unix_sockets_are_closed_and_the_runs_own_work() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        // A host socket outside every grant (as the session bus or a container daemon
        // is), listening in the world's directory.
        let dir = w.root.join("run");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bus.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        // A link to it from the project leads nowhere either.
        std::os::unix::fs::symlink(&path, w.project.join("bus-link")).unwrap();
        w.chown_all();
        let script = format!(
            "python3 -c '
import socket
def t(p):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(p); print(p, \"connected\")
    except OSError as e: print(p, \"refused\", e.errno)
t(\"{host}\")
t(\"bus-link\")
own = socket.socket(socket.AF_UNIX); own.bind(\"own.sock\"); own.listen(4)
t(\"own.sock\")
'",
            host = path.display()
        );
        for flags in [&[][..], &["--block-net"][..]] {
            let o = landlock_sh(w, flags, &script);
            assert_code(&o, 0, &format!("as {who} {flags:?}"));
            let out = stdout(&o);
            assert!(
                out.contains(&format!("{} refused 13", path.display())),
                "as {who} {flags:?}: {out} {}",
                stderr(&o)
            );
            assert!(!out.contains("bus-link connected"), "as {who}: {out}");
            assert!(out.contains("own.sock connected"), "as {who}: {out}");
            // Judged from the host: nothing reached the listener.
            match listener.accept() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => panic!("as {who}: the host socket was reached: {other:?}"),
            }
            let _ = std::fs::remove_file(w.project.join("own.sock"));
        }
    });
}
