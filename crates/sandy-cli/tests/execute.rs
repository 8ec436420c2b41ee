//! `--execute PATH` (issue 42, item 4), through the real binary: programs under an
//! `--execute` directory outside the project run (a static binary, a dynamically linked
//! one, a script with a `#!` line), while the directory's other files stay unreadable and
//! nothing there is writable (judged inside and from the host); without the flag none of
//! them runs. The dry run shows the grant with its origin, a file's `access = "execute"`
//! grant works the same way with its reason, and the sensitive set is refused as for
//! `--read`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

const DATA: &str = "DATA-execute-3f1c";
const STATIC_RAN: &str = "sandy 0.";
const DYNAMIC_RAN: &str = "DYNAMIC-RAN-9a2e";
const SCRIPT_RAN: &str = "SCRIPT-RAN-61b7";

/// A dynamically linked program of the host to copy (`env`, which runs `echo`).
fn dynamic_program() -> Option<PathBuf> {
    ["/usr/bin/env", "/bin/env"]
        .iter()
        .map(PathBuf::from)
        .find(|p| {
            std::fs::read(p)
                .map(|b| b.windows(10).any(|w| w == b"ld-linux-x")) // its loader's name
                .unwrap_or(false)
        })
}

/// `root/tools`, outside the home and the project: a static binary (Sandy's own), a
/// dynamically linked one, a script, and a data file.
fn tools(w: &World) -> Option<PathBuf> {
    let Some(dynamic) = dynamic_program() else {
        skip("no dynamically linked env(1) to copy");
        return None;
    };
    let dir = w.root.join("tools");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy(sandy_bin(), dir.join("bin/static")).unwrap();
    std::fs::copy(dynamic, dir.join("bin/dynamic")).unwrap();
    std::fs::write(
        dir.join("bin/script.sh"),
        format!("#!/bin/sh\necho {SCRIPT_RAN}\n"),
    )
    .unwrap();
    for name in ["static", "dynamic", "script.sh"] {
        std::fs::set_permissions(
            dir.join("bin").join(name),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    std::fs::write(dir.join("data.txt"), DATA).unwrap();
    w.chown_all();
    Some(dir)
}

/// Runs each program, reads the data file, writes a new file and appends to the data.
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "{d}/bin/static --version; {d}/bin/dynamic echo {DYNAMIC_RAN}; {d}/bin/script.sh; \
         cat {d}/data.txt && echo READ-DATA; ls {d} && echo LISTED; \
         echo planted > {d}/planted && echo WROTE-NEW; \
         echo more >> {d}/data.txt && echo WROTE-DATA; exit 0"
    )
}

fn judge_from_host(dir: &Path) {
    assert!(!dir.join("planted").exists(), "a file planted in {dir:?}");
    assert_eq!(std::fs::read_to_string(dir.join("data.txt")).unwrap(), DATA);
}

#[test]
fn programs_under_an_execute_directory_run_and_nothing_else_there_is_read_or_written() {
    for_each_user(|w| {
        let Some(dir) = tools(w) else { return };
        let flag = format!("--execute={}", dir.display());
        let o = w.sh(&[&flag], &script(&dir));
        assert_code(&o, 0, "a run with --execute");
        let out = stdout(&o);
        for ran in [STATIC_RAN, DYNAMIC_RAN, SCRIPT_RAN] {
            assert!(
                out.contains(ran),
                "{ran} did not run: {out}\n{}",
                stderr(&o)
            );
        }
        for leak in [DATA, "READ-DATA", "LISTED", "WROTE-NEW", "WROTE-DATA"] {
            assert!(!out.contains(leak), "{leak}: {out}");
        }
        judge_from_host(&dir);

        // Without the flag, none of the programs runs.
        let o = w.sh(&[], &script(&dir));
        assert_code(&o, 0, "a run without --execute");
        let out = stdout(&o);
        for ran in [STATIC_RAN, DYNAMIC_RAN, SCRIPT_RAN, DATA] {
            assert!(!out.contains(ran), "{ran} without --execute: {out}");
        }
        judge_from_host(&dir);

        // The dry run: the directory with the execute right alone, each program with an
        // exact grant to read and execute it, the data file with none.
        let o = w
            .sandy(["run", "--dry-run", &flag, "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run");
        let grant = |p: &Path| -> Option<Value> {
            doc["file_grants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["path"] == p.to_str().unwrap())
                .cloned()
        };
        let top = grant(&dir).expect("the --execute grant");
        assert_eq!(top["access"], "execute");
        assert_eq!(top["scope"], "subtree");
        assert_eq!(top["origin"], "flag");
        for name in ["static", "dynamic", "script.sh"] {
            let g = grant(&dir.join("bin").join(name)).expect(name);
            assert_eq!(g["access"], "read_exec");
            assert_eq!(g["scope"], "exact");
            assert_eq!(g["origin"], "flag");
        }
        assert!(grant(&dir.join("data.txt")).is_none());
    });
}

#[test]
fn a_configuration_execute_grant_works_with_its_reason() {
    for_each_user(|w| {
        let Some(dir) = tools(w) else { return };
        w.write(
            "home/.config/sandy/config.toml",
            &format!(
                "version = 1\n\n[[grants]]\npath = \"{}\"\naccess = \"execute\"\n\
                 reason = \"the team's tools\"\n",
                dir.display()
            ),
        );
        let o = w.sh(&[], &script(&dir));
        assert_code(&o, 0, "a run with the configuration's execute grant");
        let out = stdout(&o);
        for ran in [STATIC_RAN, DYNAMIC_RAN, SCRIPT_RAN] {
            assert!(out.contains(ran), "{ran} did not run: {out}");
        }
        assert!(!out.contains(DATA) && !out.contains("WROTE"), "{out}");
        judge_from_host(&dir);
        let o = w
            .sandy(["run", "--dry-run", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run");
        let top = doc["file_grants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["path"] == dir.to_str().unwrap())
            .cloned()
            .expect("the configuration's execute grant");
        assert_eq!(top["access"], "execute");
        assert_eq!(top["origin"], "config");
        assert_eq!(top["reason"], "the team's tools");
    });
}

#[test]
fn execute_refuses_the_sensitive_set_and_sandys_own_places() {
    for_each_user(|w| {
        let ssh = w.write("home/.ssh/helper", "#!/bin/sh\necho SSH-HELPER-RAN\n");
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
        for path in [ssh.parent().unwrap().to_path_buf(), ssh.clone()] {
            let flag = format!("--execute={}", path.display());
            let o = w.sh(&[&flag], "echo TARGET-RAN");
            assert_code(&o, 125, "--execute of a sensitive path");
            assert!(!stdout(&o).contains("TARGET-RAN"));
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(err.contains("sensitive"), "{err}");
        }
        // Sandy's own directory of runs (made by the runs above).
        assert!(w.runs().is_dir());
        let flag = format!("--execute={}", w.runs().display());
        let o = w.sh(&[&flag], "echo TARGET-RAN");
        assert_code(&o, 125, "--execute of Sandy's own directory of runs");
        assert!(!stdout(&o).contains("TARGET-RAN"));
        assert!(stderr(&o).contains("Sandy's own"), "{}", stderr(&o));
        // A missing path is refused too.
        let o = w.sh(&["--execute=/nonexistent-sandy-execute"], "echo TARGET-RAN");
        assert_code(&o, 125, "--execute of a missing path");
        assert!(!stdout(&o).contains("TARGET-RAN"));
        // With --policy-file, the flag is refused as a usage error.
        let o = w
            .sandy([
                "run",
                "--policy-file=p.toml",
                "--execute=/usr",
                "--",
                "true",
            ])
            .output()
            .unwrap();
        assert_code(&o, 2, "--execute with --policy-file");
    });
}
