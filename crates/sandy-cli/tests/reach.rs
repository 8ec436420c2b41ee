//! Where user namespaces are restricted: `sandy setup` (the AppArmor profile that allows
//! them for Sandy alone), and a simulated Ubuntu (tests/helpers/simulate_ubuntu.py: the
//! AppArmor restriction's setting, and every mount in a new user namespace refused with
//! EPERM) in which `sandy run` refuses with the cause and the fix, and `sandy doctor`
//! names them.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::process::{Output, Stdio};

use common::*;

const PYTHON: &str = "/usr/bin/python3";

#[test]
fn setup_print_is_the_profile_for_the_binary_and_changes_nothing() {
    let o = std::process::Command::new(sandy_bin())
        .args(["setup", "--print", "--binary", "/usr/bin/sandy"])
        .output()
        .unwrap();
    assert_code(&o, 0, "setup --print --binary /usr/bin/sandy");
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/apparmor/sandy"
    ))
    .unwrap();
    assert_eq!(
        stdout(&o),
        shipped,
        "the package's profile is what setup prints"
    );

    // Without --binary: this binary's real path, under a name of its own.
    let o = std::process::Command::new(sandy_bin())
        .args(["setup", "--print"])
        .output()
        .unwrap();
    assert_code(&o, 0, "setup --print");
    let real = sandy_bin().canonicalize().unwrap();
    let out = stdout(&o);
    assert!(out.contains("abi <abi/4.0>,"), "{out}");
    assert!(
        out.contains(&format!(
            " {} flags=(unconfined) {{\n  userns,",
            real.display()
        )),
        "{out}"
    );
    assert!(out.contains("profile sandy."), "{out}");
}

#[test]
fn setup_refuses_a_relative_binary_in_one_line() {
    let o = std::process::Command::new(sandy_bin())
        .args(["setup", "--print", "--binary", "bin/sandy"])
        .output()
        .unwrap();
    assert_code(&o, 125, "setup --binary bin/sandy");
    assert_eq!(
        stderr(&o).trim_end(),
        "sandy: setup: the path of the sandy binary is not absolute"
    );
}

#[test]
fn setup_as_a_user_prints_the_sudo_commands_and_exits_1() {
    let Some(user) = users().into_iter().find(|u| u.uid != 0) else {
        skip("needs a user other than root");
        return;
    };
    let w = World::new(user);
    let o = w.sandy(["setup"]).output().unwrap();
    assert_code(&o, 1, "setup as a user");
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let err = stderr(&o);
    let real = sandy_bin().canonicalize().unwrap();
    assert!(
        err.contains(&format!("run: sudo {} setup", real.display())),
        "{err}"
    );
    assert!(
        err.contains("setup --print | sudo tee /etc/apparmor.d/sandy."),
        "{err}"
    );
    assert!(
        err.contains("sudo apparmor_parser -r /etc/apparmor.d/sandy."),
        "{err}"
    );
}

fn x86_64_only() -> bool {
    if cfg!(target_arch = "x86_64") {
        true
    } else {
        skip("simulate_ubuntu.py knows only x86_64 syscall numbers");
        false
    }
}

/// `sandy ARGS...` as the world's user, in the simulated Ubuntu.
fn in_ubuntu(w: &World, args: &[&str]) -> Output {
    let launcher = helper(w, "simulate_ubuntu.py");
    let mut cmd = w.host(PYTHON);
    cmd.arg(&launcher)
        .arg(sandy_bin())
        .args(args)
        .stdin(Stdio::null());
    run_timeout(cmd, 60)
}

#[test]
fn simulated_ubuntu_run_refuses_naming_apparmor_and_the_fix() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let marker = w.project.join("marker");
        let o = in_ubuntu(
            w,
            &[
                "run",
                "--",
                "/bin/sh",
                "-c",
                "touch marker; echo target-ran",
            ],
        );
        assert_code(&o, 125, &format!("run in the simulated Ubuntu, as {who}"));
        assert!(!marker.exists(), "as {who}: the target ran");
        assert!(!stdout(&o).contains("target-ran"), "as {who}");
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "as {who}: one line: {err}");
        let line = lines[0];
        assert!(line.starts_with("sandy: "), "as {who}: {line}");
        assert!(line.contains("Operation not permitted"), "as {who}: {line}");
        assert!(
            line.contains(
                "AppArmor restricts unprivileged user namespaces \
                 (kernel.apparmor_restrict_unprivileged_userns = 1)"
            ),
            "as {who}: {line}"
        );
        let real = sandy_bin().canonicalize().unwrap();
        assert!(
            line.contains(&format!("`sudo {} setup`", real.display())),
            "as {who}: {line}"
        );
        assert!(line.contains("last resort"), "as {who}: {line}");
    });
}

#[test]
fn simulated_ubuntu_doctor_names_the_failed_mount_and_the_cause() {
    if !x86_64_only() {
        return;
    }
    for_each_user(|w| {
        let who = w.user.label;
        let o = in_ubuntu(w, &["doctor", "--json"]);
        assert_code(&o, 1, &format!("doctor in the simulated Ubuntu, as {who}"));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("as {who}: not JSON ({e}): {}", stdout(&o)));
        assert_eq!(doc["enforceable"], false, "as {who}: {doc}");
        assert_eq!(doc["cause"]["id"], "apparmor_userns_restriction", "{doc}");
        let fix = doc["cause"]["fix"].as_str().unwrap();
        assert!(fix.contains(" setup`"), "as {who}: {fix}");
        let mount = doc["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "mount_namespace")
            .unwrap()
            .clone();
        assert_eq!(mount["available"], false, "as {who}: {mount}");
        assert_eq!(mount["failed_step"], "bind_mount", "as {who}: {mount}");
        assert_eq!(mount["cause"], "apparmor_userns_restriction", "{mount}");
        let detail = mount["detail"].as_str().unwrap();
        assert!(
            detail.contains("making / private failed: EPERM"),
            "{detail}"
        );
        // The layers a restriction leaves alone are still reported as working.
        for name in ["landlock", "seccomp", "user_namespace", "no_new_privs"] {
            let layer = doc["layers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == name)
                .unwrap();
            assert_eq!(layer["available"], true, "as {who}: {layer}");
        }

        let text = in_ubuntu(w, &["doctor"]);
        assert_code(&text, 1, "doctor (text) in the simulated Ubuntu");
        let out = stdout(&text);
        assert!(
            out.contains("cause: AppArmor restricts unprivileged user namespaces"),
            "as {who}: {out}"
        );
        assert!(
            out.contains("fix: allow them for Sandy alone"),
            "as {who}: {out}"
        );
    });
}

/// As root where AppArmor cannot load the profile (no abi 4.0, or no AppArmor at all),
/// `sandy setup` says so and changes nothing. Where it could load it, installing it
/// would change this machine, so the test stops there.
#[test]
fn setup_as_root_changes_nothing_where_apparmor_cannot_use_the_profile() {
    if !is_root() {
        skip("sandy setup as root needs root");
        return;
    }
    let dir = std::path::Path::new("/etc/apparmor.d");
    if dir.join("abi/4.0").exists() {
        skip("this AppArmor knows abi 4.0: setup would install the profile for real");
        return;
    }
    let before: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    let o = std::process::Command::new(sandy_bin())
        .arg("setup")
        .output()
        .unwrap();
    assert_code(&o, 0, "setup as root");
    let out = stdout(&o);
    if dir.is_dir() {
        assert!(out.contains("predates user-namespace rules"), "{out}");
    } else {
        assert!(out.contains("AppArmor is not installed here"), "{out}");
    }
    assert!(out.contains("nothing was changed"), "{out}");
    let after: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert_eq!(before, after, "setup changed {}", dir.display());
}
