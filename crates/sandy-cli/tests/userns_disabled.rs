//! With user namespaces disabled (`user.max_user_namespaces = 0`), Sandy refuses with one
//! line naming the cause and the setting, exits 125, and the target never runs.
//!
//! A test binary of its own: when it can (as root, with the setting writable) it changes
//! the machine-wide setting, which must not overlap other tests, and always puts it back.
//! Where the machine-wide setting cannot be written (a container without
//! CAP_SYS_RESOURCE, or not root), the same setting is set to 0 in a fresh user namespace
//! that Sandy is then started in: the limit applies to every namespace below it, and
//! `/proc/sys/user/max_user_namespaces` reads 0 there, so Sandy sees what it would see on
//! a host with the setting at 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

const SYSCTL: &str = "/proc/sys/user/max_user_namespaces";

/// Enters a new user namespace (own uid and gid mapped to themselves), sets that
/// namespace's `user.max_user_namespaces` to 0, and execs the rest of the command line.
const LIMITED_NAMESPACE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000) != 0:
    print("launcher: unshare failed: errno", ctypes.get_errno(), file=sys.stderr)
    sys.exit(3)
with open("/proc/self/setgroups", "w") as f:
    f.write("deny")
with open("/proc/self/uid_map", "w") as f:
    f.write(f"{uid} {uid} 1\n")
with open("/proc/self/gid_map", "w") as f:
    f.write(f"{gid} {gid} 1\n")
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
os.execv(sys.argv[1], sys.argv[1:])
"#;

/// Restores the saved value of the machine-wide setting when dropped, even if the test
/// panics.
struct Restore {
    old: String,
    restored: bool,
}

impl Restore {
    /// Saves the current value and writes `value`; fails (changing nothing) if the
    /// setting cannot be written.
    fn set(value: &str) -> std::io::Result<Restore> {
        let old = std::fs::read_to_string(SYSCTL)?.trim().to_owned();
        std::fs::write(SYSCTL, value)?;
        Ok(Restore {
            old,
            restored: false,
        })
    }

    fn restore(&mut self) {
        if !self.restored {
            std::fs::write(SYSCTL, &self.old)
                .unwrap_or_else(|e| panic!("cannot restore {SYSCTL} to {}: {e}", self.old));
            self.restored = true;
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if !self.restored {
            if let Err(e) = std::fs::write(SYSCTL, &self.old) {
                eprintln!("cannot restore {SYSCTL} to {}: {e}", self.old);
            }
        }
    }
}

const SCRIPT: &str = "touch marker; echo target-ran";

/// `sandy ARGS...` as the test user, directly or through the limited-namespace launcher.
fn sandy_via(w: &World, launcher: Option<&Path>, args: &[&str]) -> Output {
    match launcher {
        None => w.sandy(args).output().unwrap(),
        Some(launcher) => {
            let mut cmd: Command = w.host("/usr/bin/python3");
            cmd.arg(launcher)
                .arg(sandy_bin())
                .args(args)
                .stdin(Stdio::null());
            cmd.output().unwrap()
        }
    }
}

/// `sandy run -- sh -c SCRIPT`; also whether the target ran (left its marker).
fn run(w: &World, launcher: Option<&Path>) -> (Output, bool) {
    let marker = w.project.join("marker");
    let _ = std::fs::remove_file(&marker);
    let o = sandy_via(w, launcher, &["run", "--", "/bin/sh", "-c", SCRIPT]);
    (o, marker.exists())
}

/// `sandy doctor --json`.
fn doctor(w: &World, launcher: Option<&Path>) -> Output {
    sandy_via(w, launcher, &["doctor", "--json"])
}

/// The doctor says the sandbox cannot be enforced, names the missing user namespace and
/// the sysctl to fix, and still reports what does work.
#[track_caller]
fn assert_doctor_names_the_cause(who: &str, o: &Output) {
    assert_code(o, 1, &format!("doctor without user namespaces, as {who}"));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("as {who}: doctor --json is not JSON ({e}): {}", stdout(o)));
    assert_eq!(doc["enforceable"], false, "as {who}: {doc}");
    let layer = |name: &str| {
        doc["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("as {who}: no {name} layer: {doc}"))
            .clone()
    };
    let userns = layer("user_namespace");
    assert_eq!(userns["available"], false, "as {who}: {userns}");
    let fix = userns["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("max_user_namespaces"), "as {who}: fix {fix:?}");
    for working in ["landlock", "seccomp", "no_new_privs"] {
        assert_eq!(layer(working)["available"], true, "as {who}: {working}");
    }
}

#[track_caller]
fn assert_refused_for_userns(who: &str, o: &Output, marker: bool) {
    assert_code(o, 125, &format!("sandy without user namespaces, as {who}"));
    assert!(!marker, "as {who}: the target ran (the marker exists)");
    assert!(!stdout(o).contains("target-ran"), "as {who}: {}", stdout(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "as {who}: expected one stderr line: {err}");
    let line = lines[0];
    assert!(line.starts_with("sandy: "), "as {who}: {line}");
    assert!(line.contains("user namespace"), "as {who}: {line}");
    assert!(line.contains("max_user_namespaces"), "as {who}: {line}");
}

#[test]
fn without_user_namespaces_sandy_refuses_and_runs_nothing() {
    if !Path::new(SYSCTL).exists() {
        skip(&format!("{SYSCTL} does not exist on this kernel"));
        return;
    }

    // The machine-wide setting, when this process may change it.
    let guard = if is_root() {
        match Restore::set("0") {
            Ok(guard) => Some(guard),
            Err(e) => {
                eprintln!(
                    "note: cannot write {SYSCTL} ({e}); setting it in a nested user \
                     namespace instead"
                );
                None
            }
        }
    } else {
        eprintln!("note: not root; setting {SYSCTL} in a nested user namespace instead");
        None
    };
    if let Some(mut guard) = guard {
        let mut results: Vec<(&'static str, Output, bool, Output)> = Vec::new();
        for_each_user(|w| {
            let (o, marker) = run(w, None);
            results.push((w.user.label, o, marker, doctor(w, None)));
        });
        // Put the setting back before judging, so a failed assertion leaves it restored.
        guard.restore();
        drop(guard);
        assert_ne!(
            std::fs::read_to_string(SYSCTL).unwrap().trim(),
            "0",
            "{SYSCTL} was not restored"
        );
        for (who, o, marker, doctor_output) in &results {
            assert_refused_for_userns(who, o, *marker);
            assert_doctor_names_the_cause(who, doctor_output);
        }
    }

    // The same setting in a user namespace Sandy is started in.
    for_each_user(|w| {
        let launcher = w.write("limited_namespace.py", LIMITED_NAMESPACE);
        let (o, marker) = run(w, Some(&launcher));
        let who = format!("{} in a limited namespace", w.user.label);
        assert_refused_for_userns(&who, &o, marker);
        assert_doctor_names_the_cause(&who, &doctor(w, Some(&launcher)));
        // A dry run stops for the same reason a launch would.
        let dry = sandy_via(w, Some(&launcher), &["run", "--dry-run", "--", "true"]);
        assert_code(&dry, 125, &format!("dry run, {who}"));
        assert!(
            stderr(&dry).contains("max_user_namespaces"),
            "{who}: {}",
            stderr(&dry)
        );
    });

    // Control: with user namespaces available, the same command runs.
    for_each_user(|w| {
        let (o, marker) = run(w, None);
        assert_code(&o, 0, "the control run");
        assert!(marker, "the control run did not create the marker");
        assert_code(&doctor(w, None), 0, "the control doctor");
    });
}
