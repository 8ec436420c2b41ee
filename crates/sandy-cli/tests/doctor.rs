//! `sandy doctor`: the layer report, its JSON document, and the self-test of canary
//! escapes inside a real `sandy run`, which must block every escape on this machine and
//! must be able to fail (the unprotected-canary control).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The layer lines, by label, as the text report prints them.
const LAYER_LABELS: [&str; 6] = [
    "Landlock",
    "seccomp",
    "user namespace",
    "mount namespace",
    "network namespace",
    "no_new_privs",
];

const LAYER_NAMES: [&str; 6] = [
    "landlock",
    "seccomp",
    "user_namespace",
    "mount_namespace",
    "network_namespace",
    "no_new_privs",
];

const CHECKS: [&str; 12] = [
    "read_secret",
    "write_outside",
    "plant_git_hook",
    "truncate_git_config",
    "tiocsti",
    "signal_outside",
    "ptrace_outside",
    "abstract_unix_socket",
    "pathname_unix_socket",
    "tcp_loopback",
    "udp_loopback",
    "mptcp_socket",
];

/// The self-tests run one at a time, so that the leftovers they look for in /tmp and the
/// process table are their own.
static SELFTEST: Mutex<()> = Mutex::new(());

fn json(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", stdout(o), stderr(o)))
}

/// Self-test directories in the host's /tmp owned by `uid`.
fn tmp_leftovers(uid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sandy-selftest-")
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| e.path().display().to_string())
        .collect()
}

/// Live `sandy __idle` helpers owned by `uid`.
fn idle_helpers(uid: u32) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let dir = format!("/proc/{pid}");
            let mine = std::fs::metadata(&dir).is_ok_and(|m| m.uid() == uid);
            let cmdline = std::fs::read(format!("{dir}/cmdline")).unwrap_or_default();
            mine && cmdline.split(|b| *b == 0).any(|a| a == b"__idle")
        })
        .collect()
}

fn assert_cleaned_up(w: &World) {
    w.tidy_tmp();
    let left: Vec<_> = std::fs::read_dir(&w.tmp).unwrap().flatten().collect();
    assert!(
        left.is_empty(),
        "the self-test world was left behind: {left:?}"
    );
    assert!(
        tmp_leftovers(w.user.uid).is_empty(),
        "socket directories left in /tmp: {:?}",
        tmp_leftovers(w.user.uid)
    );
    assert!(
        idle_helpers(w.user.uid).is_empty(),
        "helper processes left running: {:?}",
        idle_helpers(w.user.uid)
    );
}

#[test]
fn doctor_passes_here_with_one_line_per_layer() {
    for_each_user(|w| {
        let o = w.sandy(["doctor"]).output().unwrap();
        assert_code(&o, 0, "sandy doctor");
        let out = stdout(&o);
        for label in LAYER_LABELS {
            let line = out
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no line for {label}:\n{out}"));
            assert!(line.contains("available"), "{line}");
        }
        // The kernel facts behind the verdicts.
        assert!(out.contains("Landlock ABI"), "{out}");
        assert!(out.contains("EPERM"), "{out}");
        assert!(out.contains("user.max_user_namespaces = "), "{out}");
        let verdict = out.lines().find(|l| l.starts_with("verdict:")).unwrap();
        assert!(verdict.contains("enforceable"), "{verdict}");
        assert!(!verdict.contains("NOT"), "{verdict}");
        assert!(verdict.contains("--block-net"), "{verdict}");
        assert!(!out.contains("fix:"), "{out}");
    });
}

#[test]
fn doctor_json_has_the_documented_keys() {
    for_each_user(|w| {
        let o = w.sandy(["doctor", "--json"]).output().unwrap();
        assert_code(&o, 0, "sandy doctor --json");
        let doc = json(&o);
        assert_eq!(doc["doctor_schema_version"], 1, "{doc}");
        assert_eq!(doc["enforceable"], true, "{doc}");
        assert_eq!(doc["block_net_available"], true, "{doc}");
        assert!(doc["verdict"].is_string(), "{doc}");
        assert!(doc.get("selftest").is_none(), "{doc}");
        let layers = doc["layers"].as_array().unwrap();
        let names: Vec<&str> = layers.iter().map(|l| l["name"].as_str().unwrap()).collect();
        assert_eq!(names, LAYER_NAMES);
        for layer in layers {
            assert_eq!(layer["available"], true, "{layer}");
            assert!(
                layer["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{layer}"
            );
            assert!(layer.get("fix").is_some_and(Value::is_null), "{layer}");
            assert!(layer["required"].is_boolean(), "{layer}");
        }
        let landlock = &layers[0]["detail"].as_str().unwrap();
        assert!(landlock.contains("Landlock ABI"), "{landlock}");
    });
}

#[test]
fn selftest_blocks_every_escape_and_cleans_up() {
    let _serial = SELFTEST.lock().unwrap_or_else(|e| e.into_inner());
    for_each_user(|w| {
        let start = Instant::now();
        let o = w.sandy(["doctor", "--selftest"]).output().unwrap();
        let took = start.elapsed();
        eprintln!("selftest took {took:?}");
        assert_code(&o, 0, "sandy doctor --selftest");
        let out = stdout(&o);
        assert!(!out.contains("ESCAPED"), "{out}");
        assert!(!out.contains("untestable"), "{out}");
        let blocked = out
            .lines()
            .filter(|l| l.trim_start().starts_with("blocked "))
            .count();
        assert_eq!(blocked, CHECKS.len(), "{out}");
        assert!(out.contains("all 12 escapes blocked"), "{out}");
        assert!(
            took < Duration::from_secs(10),
            "the self-test took {took:?}"
        );
        assert_cleaned_up(w);

        let o = w
            .sandy(["doctor", "--selftest", "--json"])
            .output()
            .unwrap();
        assert_code(&o, 0, "sandy doctor --selftest --json");
        let doc = json(&o);
        assert_eq!(doc["doctor_schema_version"], 1);
        assert_eq!(doc["enforceable"], true);
        assert_eq!(doc["passed"], true);
        assert_eq!(doc["selftest"]["passed"], true, "{doc}");
        let checks = doc["selftest"]["checks"].as_array().unwrap();
        let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, CHECKS);
        for c in checks {
            assert_eq!(c["status"], "blocked", "{c}");
            for key in ["description", "run", "detail"] {
                assert!(c[key].is_string(), "{key} in {c}");
            }
        }
        // The network checks ran under --block-net, the rest in the default sandbox.
        for c in checks {
            let net = ["tcp_loopback", "udp_loopback", "mptcp_socket"]
                .contains(&c["name"].as_str().unwrap());
            assert_eq!(c["run"], if net { "block-net" } else { "default" }, "{c}");
        }
        // The seccomp floor, not the driver, answered TIOCSTI.
        let tiocsti = checks.iter().find(|c| c["name"] == "tiocsti").unwrap();
        assert!(
            tiocsti["detail"].as_str().unwrap().contains("EPERM"),
            "{tiocsti}"
        );
        assert_cleaned_up(w);
    });
}

#[test]
fn selftest_can_fail_the_unprotected_canary_escapes() {
    let _serial = SELFTEST.lock().unwrap_or_else(|e| e.into_inner());
    for_each_user(|w| {
        let o = w
            .sandy(["doctor", "--selftest", "--selftest-unprotected-canary"])
            .output()
            .unwrap();
        assert_code(&o, 1, "the unprotected canary must fail the self-test");
        let out = stdout(&o);
        let line = out
            .lines()
            .find(|l| l.contains("ESCAPED"))
            .unwrap_or_else(|| panic!("nothing escaped:\n{out}"));
        assert!(line.contains("canary"), "{line}");
        assert_eq!(out.matches("ESCAPED").count(), 1, "{out}");
        assert!(out.contains("FAILED"), "{out}");
        // The layers themselves are fine: only the self-test failed.
        assert!(out.contains("verdict: enforceable"), "{out}");
        assert_cleaned_up(w);

        let o = w
            .sandy([
                "doctor",
                "--json",
                "--selftest",
                "--selftest-unprotected-canary",
            ])
            .output()
            .unwrap();
        assert_code(
            &o,
            1,
            "the unprotected canary must fail the self-test (JSON)",
        );
        let doc = json(&o);
        assert_eq!(doc["enforceable"], true);
        assert_eq!(doc["passed"], false);
        assert_eq!(doc["selftest"]["passed"], false);
        for c in doc["selftest"]["checks"].as_array().unwrap() {
            let expected = if c["name"] == "read_secret" {
                "ESCAPED"
            } else {
                "blocked"
            };
            assert_eq!(c["status"], expected, "{c}");
        }
        assert_cleaned_up(w);
    });
}

#[test]
fn the_unprotected_canary_flag_is_hidden_and_needs_selftest() {
    if !kernel_ready() {
        return;
    }
    let w = World::new(users()[0]);
    let o = w.sandy(["doctor", "--help"]).output().unwrap();
    assert_code(&o, 0, "sandy doctor --help");
    let help = stdout(&o);
    assert!(!help.contains("unprotected"), "{help}");
    assert!(help.contains("Exit status"), "{help}");
    assert!(help.contains("1 when"), "{help}");
    let o = w
        .sandy(["doctor", "--selftest-unprotected-canary"])
        .output()
        .unwrap();
    assert_code(&o, 2, "the control flag without --selftest");
}

/// Issue 12 item 9: a user with no `~/.cache` and no `TMPDIR` can run the self-test (Sandy
/// makes its own cache directory, 0700), and when nothing works the error names every
/// place tried.
#[test]
fn selftest_works_without_a_cache_directory_or_tmpdir() {
    use std::os::unix::fs::PermissionsExt;
    let _serial = SELFTEST.lock().unwrap_or_else(|e| e.into_inner());
    for_each_user(|w| {
        assert!(!w.home.join(".cache").exists());
        let o = w
            .sandy(["doctor", "--selftest"])
            .env_remove("TMPDIR")
            .output()
            .unwrap();
        assert_code(&o, 0, "sandy doctor --selftest without TMPDIR or ~/.cache");
        assert!(
            stdout(&o).contains("all 12 escapes blocked"),
            "{}",
            stdout(&o)
        );
        let cache = w.home.join(".cache/sandy");
        let meta = std::fs::metadata(&cache).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert!(left.is_empty(), "left in {}: {left:?}", cache.display());

        if w.user.uid != 0 {
            // Nowhere to go: HOME and TMPDIR unset, /var/lib not writable.
            let o = w
                .sandy(["doctor", "--selftest"])
                .env_remove("TMPDIR")
                .env_remove("HOME")
                .output()
                .unwrap();
            assert_code(&o, 125, "no place for the self-test world");
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with("sandy: cannot create the self-test world; tried: "),
                "{err}"
            );
            assert!(
                err.contains("TMPDIR (not set)") && err.contains("/var/lib ("),
                "{err}"
            );
        }
    });
}
