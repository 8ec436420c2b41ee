//! Policy comes from the user, never from what a sandboxed run wrote: `#!` lines and links
//! in `PATH` directories are read the way the kernel and `env` read them and grant exact
//! executables or recognised packages only (issue 11, findings D1 and D2). A command the
//! dry run grants is one the run can execute (issue 12 item 8), and a rustup proxy works
//! as the command itself (issue 12 item 1). Judged through the real binary, from the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

const CANARY: &str = "CANARY-policy-inputs-3c9e";

fn make_executable(p: &Path) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The dry run's grants outside the project, as (path, access) pairs.
fn grants_beyond_project(w: &World, env_path: &str, cmd: &[&str]) -> Vec<(String, String)> {
    let mut args = vec!["run", "--dry-run", "--"];
    args.extend_from_slice(cmd);
    let o = w.sandy(args).env("PATH", env_path).output().unwrap();
    assert_code(&o, 0, "dry run");
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let project = w.project.display().to_string();
    doc["file_grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["path"].as_str().unwrap().to_owned(),
                g["access"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(p, _)| !p.starts_with(&project))
        .collect()
}

#[test]
fn nothing_a_run_writes_widens_a_later_run() {
    for_each_user(|w| {
        let other = w.home.join("other");
        let secret = w.write("home/other/secret.env", &format!("KEY={CANARY}\n"));
        w.write("home/other/.git/HEAD", "ref: refs/heads/main\n");
        w.write("home/other/bin/tool", "#!/bin/sh\necho tool\n");
        make_executable(&other.join("bin/tool"));
        // Another project of the user's, whose node_modules/.bin is on PATH (as direnv or
        // a habit puts it): a run in that project can write it.
        let b = w.home.join("b");
        w.write("home/b/node_modules/.bin/.keep", "");
        w.write("home/project/run-tests.sh", "#!/bin/sh\necho tests\n");
        make_executable(&w.project.join("run-tests.sh"));
        let path = format!(
            "{}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
            b.display()
        );
        let before = grants_beyond_project(w, &path, &["./run-tests.sh"]);

        // Run 1, in project b, plants links in that PATH directory naming the other
        // project (or a file in it) some way; run 2, in the project, rewrites the
        // script's `#!` line and adds one naming a secret as the interpreter.
        let other_s = other.display().to_string();
        let links = format!(
            "set -e; cd node_modules/.bin; \
             ln -s {o} dir; ln -s {o}/secret.env env; ln -s {o}/bin/tool tool; \
             ln -s {o}/bin tools",
            o = other_s
        );
        let o = w
            .sandy(["run", "--", "sh", "-c", &links])
            .current_dir(&b)
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_code(&o, 0, "planting links");
        let script = format!(
            "set -e; \
             printf '#!/usr/bin/env -S -u {o}/secret.env -C {o} sh\\ncat {o}/secret.env\\n' \
               > run-tests.sh; \
             printf '#!{o}/secret.env\\n' > b.sh; chmod +x b.sh run-tests.sh",
            o = other_s
        );
        let o = w
            .sandy(["run", "--", "sh", "-c", &script])
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_code(&o, 0, "planting scripts");

        // The next run's policy is the same as before, except the exact executable the
        // link names (never its directory, never the project, never the secret).
        let after = grants_beyond_project(w, &path, &["./run-tests.sh"]);
        let added: Vec<_> = after.iter().filter(|g| !before.contains(g)).collect();
        let tool = other.join("bin/tool").display().to_string();
        assert_eq!(added, vec![&(tool, "read_exec".to_owned())], "{after:?}");
        for cmd in ["./run-tests.sh", "./b.sh"] {
            let o = w
                .sandy(["run", "--", cmd])
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(!stdout(&o).contains(CANARY), "{cmd}: {}", stdout(&o));
            assert!(!stderr(&o).contains(CANARY), "{cmd}: {}", stderr(&o));
        }
        let o = w
            .sandy([
                "run",
                "--",
                "sh",
                "-c",
                &format!("cat {}", secret.display()),
            ])
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(!stdout(&o).contains(CANARY));
        assert_ne!(o.status.code(), Some(0));
    });
}

#[test]
fn a_command_under_a_private_directory_runs_as_the_dry_run_says() {
    for_each_user(|w| {
        // A package under the host's /tmp, reached through a node_modules/.bin link.
        let base = tempfile::Builder::new()
            .prefix("sandy-e2e-hidden-")
            .tempdir_in("/tmp")
            .unwrap();
        let pkg = base.path().join("node_modules/pkg");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(base.path().join("node_modules/.bin")).unwrap();
        std::fs::write(pkg.join("package.json"), "{}").unwrap();
        std::fs::write(pkg.join("cli.sh"), "#!/bin/sh\necho \"tool ran as $0\"\n").unwrap();
        make_executable(&pkg.join("cli.sh"));
        let link = base.path().join("node_modules/.bin/tool");
        std::os::unix::fs::symlink("../pkg/cli.sh", &link).unwrap();
        for p in [base.path(), &base.path().join("node_modules"), &pkg] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bin = base.path().join("node_modules/.bin");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link_s = link.display().to_string();

        let o = w
            .sandy(["run", "--dry-run", "--", &link_s])
            .output()
            .unwrap();
        assert_code(&o, 0, "dry run");
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let program = doc["command"].as_str().unwrap().to_owned();
        assert_eq!(program, pkg.join("cli.sh").display().to_string());

        let o = w.sandy(["run", "--", &link_s]).output().unwrap();
        assert_code(&o, 0, "the hidden command");
        assert!(stdout(&o).starts_with("tool ran as "), "{}", stdout(&o));
    });
}

#[test]
fn a_rustup_proxy_as_the_command_reads_its_settings() {
    for_each_user(|w| {
        let cargo = w.write(
            "home/.cargo/bin/cargo",
            "#!/bin/sh\ncat \"$HOME/.rustup/settings.toml\"\n\
             echo x >> \"$HOME/.rustup/settings.toml\" 2>/dev/null && echo WROTE; true\n",
        );
        make_executable(&cargo);
        let settings = w.write(
            "home/.rustup/settings.toml",
            "default_toolchain = \"stable\"\n",
        );
        w.write("home/.rustup/toolchains/stable/bin/.keep", "");
        let path = format!("{}/.cargo/bin:/usr/bin:/bin", w.home.display());
        for cmd in ["cargo", &cargo.display().to_string()] {
            let o = w
                .sandy(["run", "--", cmd])
                .env("PATH", &path)
                .output()
                .unwrap();
            assert_code(&o, 0, cmd);
            assert_eq!(stdout(&o), "default_toolchain = \"stable\"\n", "{cmd}");
        }
        assert_eq!(
            std::fs::read_to_string(&settings).unwrap(),
            "default_toolchain = \"stable\"\n"
        );
    });
}
