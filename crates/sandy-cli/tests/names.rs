//! Protections hold on the *name* a tool reads and on what it points to: a protected path
//! that is a symbolic link, or that passes through one, cannot be removed, renamed,
//! replaced or written through from inside, whatever the layout (a shared hooks
//! directory, a symlinked git config or `.git`, a dotfile manager's agent settings, a
//! symlinked ancestor, a chain of links, a link out of the writable root). Absent
//! protected paths get a read-only placeholder that leaves no trace. Every verdict is
//! taken on the host: link targets, file contents, and whether a planted hook ran on a
//! `git commit` outside.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::*;

const GIT: &str = "/usr/bin/git";

fn git(w: &World, dir: &Path, args: &[&str]) -> Output {
    w.host(GIT)
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@e"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[track_caller]
fn git_ok(w: &World, dir: &Path, args: &[&str]) {
    let o = git(w, dir, args);
    assert_code(&o, 0, &format!("host git {args:?} in {}", dir.display()));
}

/// `git init` and one commit, on the host, in the project.
fn init_repo(w: &World) {
    w.write("home/project/README.md", "# readme\n");
    git_ok(w, &w.project, &["init", "-q", "-b", "main"]);
    git_ok(w, &w.project, &["add", "README.md"]);
    git_ok(w, &w.project, &["commit", "-q", "-m", "first"]);
}

/// Everything under `dir` (not following symlinks): file bytes and mode, link targets,
/// directory modes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, p: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let meta = std::fs::symlink_metadata(p).unwrap();
        let rel = p.strip_prefix(base).unwrap().to_path_buf();
        let mode = meta.permissions().mode();
        if meta.file_type().is_symlink() {
            out.insert(rel, format!("link {:?}", std::fs::read_link(p).unwrap()));
        } else if meta.is_dir() {
            out.insert(rel, format!("dir {mode:o}"));
            for e in std::fs::read_dir(p).unwrap().flatten() {
                walk(base, &e.path(), out);
            }
        } else {
            let bytes = std::fs::read(p).unwrap();
            out.insert(rel, format!("file {mode:o} {bytes:?}"));
        }
    }
    let mut out = BTreeMap::new();
    if std::fs::symlink_metadata(dir).is_ok() {
        walk(dir, dir, &mut out);
    }
    out
}

fn link(target: &str, name: &Path) {
    std::os::unix::fs::symlink(target, name).unwrap();
}

/// A hook that creates `marker` when git runs it outside the sandbox.
fn hook_script(marker: &Path) -> String {
    format!("#!/bin/sh\ntouch '{}'\n", marker.display())
}

/// Runs `script` inside, where each `try NAME CMD...` prints `NAME=STATUS`; asserts the
/// run itself succeeded and every named attempt failed.
#[track_caller]
fn attempts_fail(w: &World, flags: &[&str], script: &str, names: &[&str]) -> String {
    let prelude = "try() { n=$1; shift; \"$@\" >/dev/null 2>&1; echo \"$n=$?\"; }\n";
    let o = w.sh(flags, &format!("{prelude}{script}"));
    assert_code(&o, 0, "the attack script");
    let out = stdout(&o);
    for name in names {
        assert_failed(&out, name);
    }
    out
}

/// The attacks on one protected name that is (or passes through) a link, and on the
/// object behind it. `$1`-style placeholders: NAME is the protected name, OBJ the object.
fn attack_script(name: &str, obj: &str, hook: &str) -> String {
    format!(
        r#"try "rm name" rm -rf '{name}'
try "mv name" mv '{name}' '{name}.moved'
try "ln over name" ln -sfn /tmp '{name}'
mkdir -p evil-dir && printf '%s' '{hook}' > evil-dir/pre-commit && chmod +x evil-dir/pre-commit
try "rename dir over name" /usr/bin/python3 -c 'import os,sys; os.rename("evil-dir", sys.argv[1])' '{name}'
try "write through" sh -c 'printf x >> "$1"' sh '{obj}'
try "mv object" mv '{obj}' '{obj}.moved'
try "rm object" rm -rf '{obj}'
"#
    )
}

const ATTACKS: &[&str] = &[
    "rm name",
    "mv name",
    "ln over name",
    "rename dir over name",
    "write through",
    "mv object",
    "rm object",
];

/// The object of a directory protection: write-through means planting a file in it.
fn dir_attack_script(name: &str, obj: &str, hook: &str) -> String {
    attack_script(name, obj, hook).replace(
        &format!("try \"write through\" sh -c 'printf x >> \"$1\"' sh '{obj}'"),
        &format!(
            "try \"write through\" sh -c 'printf \"%s\" \"$2\" > \"$1/pre-commit\"' sh '{obj}' '{hook}'"
        ),
    )
}

/// After the run, on the host: the commit hook did not run.
#[track_caller]
fn commit_runs_no_planted_hook(w: &World, marker: &Path) {
    w.write("home/project/after.txt", "after\n");
    let _ = git(w, &w.project, &["add", "after.txt"]);
    let _ = git(w, &w.project, &["commit", "-q", "-m", "after"]);
    assert!(
        !marker.exists(),
        "a hook planted inside ran on git commit outside"
    );
}

#[test]
fn a_hooks_directory_that_is_a_symlink_keeps_its_link_and_its_content() {
    for_each_user(|w| {
        init_repo(w);
        let hooks = w.project.join(".git/hooks");
        let shared = w.project.join("githooks");
        std::fs::rename(&hooks, &shared).unwrap();
        link("../githooks", &hooks);
        w.chown_all();
        let before = snapshot(&shared);
        let marker = w.root.join("hook-ran");
        let hook = hook_script(&marker);
        let script = dir_attack_script(".git/hooks", "githooks", &hook);
        attempts_fail(w, &[], &script, ATTACKS);
        assert_eq!(
            std::fs::read_link(&hooks).unwrap(),
            PathBuf::from("../githooks")
        );
        assert_eq!(snapshot(&shared), before, "the shared hooks changed");
        commit_runs_no_planted_hook(w, &marker);
        // Positive: git works inside, and the project stays writable.
        let o = w.sh(
            &[],
            "echo more > more.txt && git add more.txt && \
             git -c user.name=t -c user.email=t@e commit -q -m more && echo committed",
        );
        assert_code(&o, 0, "git commit inside");
        assert!(stdout(&o).contains("committed"));
    });
}

#[test]
fn a_symlinked_git_config_keeps_its_link_and_its_content() {
    for_each_user(|w| {
        init_repo(w);
        let config = w.project.join(".git/config");
        let shared = w.project.join("shared-config");
        std::fs::rename(&config, &shared).unwrap();
        link("../shared-config", &config);
        w.chown_all();
        let before = std::fs::read(&shared).unwrap();
        let marker = w.root.join("fsmonitor-ran");
        let evil = format!(
            "[core]\n\tfsmonitor = touch {} #\n\thooksPath = /tmp\n",
            marker.display()
        );
        let mut script = attack_script(".git/config", "shared-config", &evil);
        script.push_str(&format!(
            "try \"replace name by file\" /usr/bin/python3 -c 'import os,sys; open(\"c.new\",\"w\").write(sys.argv[2]); os.rename(\"c.new\", sys.argv[1])' .git/config '{evil}'\n"
        ));
        let mut names = ATTACKS.to_vec();
        names.push("replace name by file");
        attempts_fail(w, &[], &script, &names);
        assert_eq!(
            std::fs::read_link(&config).unwrap(),
            PathBuf::from("../shared-config")
        );
        assert_eq!(std::fs::read(&shared).unwrap(), before);
        let _ = git(w, &w.project, &["status"]);
        assert!(
            !marker.exists(),
            "planted fsmonitor ran on git status outside"
        );
    });
}

#[test]
fn a_dot_git_symlink_out_of_the_project_cannot_be_replaced() {
    for_each_user(|w| {
        init_repo(w);
        let dotgit = w.project.join(".git");
        let elsewhere = w.home.join("elsewhere");
        std::fs::rename(&dotgit, &elsewhere).unwrap();
        link("../elsewhere", &dotgit);
        w.chown_all();
        let hooks_before = snapshot(&elsewhere.join("hooks"));
        let config_before = std::fs::read(elsewhere.join("config")).unwrap();
        let marker = w.root.join("hook-ran");
        let hook = hook_script(&marker);
        let script = format!(
            r#"try "rm .git" rm -rf .git
try "mv .git" mv .git moved-git
mkdir -p /tmp/r && git init -q /tmp/r && printf '%s' '{hook}' > /tmp/r/.git/hooks/pre-commit && chmod +x /tmp/r/.git/hooks/pre-commit
try "rename repo over .git" /usr/bin/python3 -c 'import os; os.rename("/tmp/r/.git", ".git")'
try "ln over .git" ln -sfn /tmp/r/.git .git
try "plant hook" sh -c 'printf "%s" "$1" > .git/hooks/pre-commit' sh '{hook}'
"#
        );
        attempts_fail(
            w,
            &[],
            &script,
            &[
                "rm .git",
                "mv .git",
                "rename repo over .git",
                "ln over .git",
                "plant hook",
            ],
        );
        assert_eq!(
            std::fs::read_link(&dotgit).unwrap(),
            PathBuf::from("../elsewhere")
        );
        assert_eq!(snapshot(&elsewhere.join("hooks")), hooks_before);
        assert_eq!(
            std::fs::read(elsewhere.join("config")).unwrap(),
            config_before
        );
        commit_runs_no_planted_hook(w, &marker);
    });
}

#[test]
fn a_symlinked_ancestor_inside_the_project_is_pinned_too() {
    for_each_user(|w| {
        init_repo(w);
        // .git -> repo.git, a real directory inside the project.
        let dotgit = w.project.join(".git");
        let real = w.project.join("repo.git");
        std::fs::rename(&dotgit, &real).unwrap();
        link("repo.git", &dotgit);
        w.chown_all();
        let hooks_before = snapshot(&real.join("hooks"));
        let marker = w.root.join("hook-ran");
        let hook = hook_script(&marker);
        let script = format!(
            r#"try "rm link" rm -f .git
try "mv real" mv repo.git moved.git
try "mv link" mv .git moved-link
try "plant hook" sh -c 'printf "%s" "$1" > repo.git/hooks/pre-commit' sh '{hook}'
try "rm hooks" rm -rf repo.git/hooks
try "mv hooks" mv repo.git/hooks repo.git/h2
"#
        );
        attempts_fail(
            w,
            &[],
            &script,
            &[
                "rm link",
                "mv real",
                "mv link",
                "plant hook",
                "rm hooks",
                "mv hooks",
            ],
        );
        assert_eq!(
            std::fs::read_link(&dotgit).unwrap(),
            PathBuf::from("repo.git")
        );
        assert_eq!(snapshot(&real.join("hooks")), hooks_before);
        commit_runs_no_planted_hook(w, &marker);

        // The same layout without a hooks directory: the placeholder goes where the link
        // leads, holds for the run and leaves no trace.
        std::fs::remove_dir_all(real.join("hooks")).unwrap();
        let script = format!(
            r#"try "plant hook" sh -c 'mkdir -p .git/hooks && printf "%s" "$1" > .git/hooks/pre-commit' sh '{hook}'
try "rm link" rm -f .git
"#
        );
        attempts_fail(w, &[], &script, &["plant hook", "rm link"]);
        assert!(std::fs::symlink_metadata(real.join("hooks")).is_err());
        commit_runs_no_planted_hook(w, &marker);
    });
}

#[test]
fn a_chain_of_two_links_keeps_both_links_and_the_target() {
    for_each_user(|w| {
        init_repo(w);
        // .git/config -> ../cfg-link -> configs/real-config
        let config = w.project.join(".git/config");
        let configs = w.project.join("configs");
        std::fs::create_dir_all(&configs).unwrap();
        std::fs::rename(&config, configs.join("real-config")).unwrap();
        link("configs/real-config", &w.project.join("cfg-link"));
        link("../cfg-link", &config);
        w.chown_all();
        let before = std::fs::read(configs.join("real-config")).unwrap();
        let marker = w.root.join("fsmonitor-ran");
        let evil = format!("[core]\n\tfsmonitor = touch {} #\n", marker.display());
        let script = format!(
            r#"try "rm first" rm -f .git/config
try "rm second" rm -f cfg-link
try "retarget second" ln -sfn /tmp/evil cfg-link
try "mv second" mv cfg-link cfg2
try "mv configs" mv configs configs2
try "write through" sh -c 'printf "%s" "$1" >> .git/config' sh '{evil}'
"#
        );
        attempts_fail(
            w,
            &[],
            &script,
            &[
                "rm first",
                "rm second",
                "retarget second",
                "mv second",
                "mv configs",
                "write through",
            ],
        );
        assert_eq!(
            std::fs::read_link(&config).unwrap(),
            PathBuf::from("../cfg-link")
        );
        assert_eq!(
            std::fs::read_link(w.project.join("cfg-link")).unwrap(),
            PathBuf::from("configs/real-config")
        );
        assert_eq!(std::fs::read(configs.join("real-config")).unwrap(), before);
        let _ = git(w, &w.project, &["status"]);
        assert!(
            !marker.exists(),
            "planted fsmonitor ran on git status outside"
        );
    });
}

#[test]
fn a_hooks_link_out_of_the_writable_root_is_pinned() {
    for_each_user(|w| {
        init_repo(w);
        let hooks = w.project.join(".git/hooks");
        let outside = w.root.join("team-hooks");
        std::fs::rename(&hooks, &outside).unwrap();
        let target = outside.display().to_string();
        link(&target, &hooks);
        w.chown_all();
        let before = snapshot(&outside);
        let marker = w.root.join("hook-ran");
        let hook = hook_script(&marker);
        let script = dir_attack_script(".git/hooks", &target, &hook);
        // The object outside the project is not writable inside in the first place.
        attempts_fail(w, &[], &script, ATTACKS);
        assert_eq!(std::fs::read_link(&hooks).unwrap(), outside);
        assert_eq!(snapshot(&outside), before);
        commit_runs_no_planted_hook(w, &marker);
    });
}

#[test]
fn agent_settings_behind_a_dotfile_manager_link_keep_link_and_content() {
    for_each_user(|w| {
        // stow-style: ~/.claude/settings.json -> ../dotfiles/claude/settings.json, and
        // CLAUDE.md -> an absolute link.
        let dot = w.write(
            "home/dotfiles/claude/settings.json",
            "{\"theme\": \"dark\"}\n",
        );
        let md = w.write("home/dotfiles/claude/CLAUDE.md", "be nice\n");
        let claude = w.home.join(".claude");
        std::fs::create_dir_all(&claude).unwrap();
        link(
            "../dotfiles/claude/settings.json",
            &claude.join("settings.json"),
        );
        link(&md.display().to_string(), &claude.join("CLAUDE.md"));
        w.chown_all();
        let settings = claude.join("settings.json").display().to_string();
        let claude_md = claude.join("CLAUDE.md").display().to_string();
        let marker = w.root.join("agent-hook-ran");
        let evil = format!(
            "{{\"hooks\":{{\"SessionStart\":[{{\"hooks\":[{{\"type\":\"command\",\"command\":\"touch {}\"}}]}}]}}}}",
            marker.display()
        );
        let script = format!(
            r#"try "rm settings" rm -f '{settings}'
try "mv settings" mv '{settings}' '{settings}.old'
try "replace settings" /usr/bin/python3 -c 'import os,sys; open(sys.argv[1]+".new","w").write(sys.argv[2]); os.rename(sys.argv[1]+".new", sys.argv[1])' '{settings}' '{evil}'
try "write through" sh -c 'printf "%s" "$1" > "$2"' sh '{evil}' '{settings}'
try "rm md" rm -f '{claude_md}'
try "ln over md" ln -sfn /tmp/x '{claude_md}'
echo ok > '{claude}/state-file' && echo "state=0"
"#,
            claude = claude.display()
        );
        let out = attempts_fail(
            w,
            &["--profile", "claude"],
            &script,
            &[
                "rm settings",
                "mv settings",
                "replace settings",
                "write through",
                "rm md",
                "ln over md",
            ],
        );
        // Positive: the agent's state directory stays writable.
        assert_field(&out, "state", "0");
        assert_eq!(
            std::fs::read_link(claude.join("settings.json")).unwrap(),
            PathBuf::from("../dotfiles/claude/settings.json")
        );
        assert_eq!(std::fs::read_link(claude.join("CLAUDE.md")).unwrap(), md);
        assert_eq!(
            std::fs::read_to_string(&dot).unwrap(),
            "{\"theme\": \"dark\"}\n"
        );
        assert_eq!(std::fs::read_to_string(&md).unwrap(), "be nice\n");
    });
}

#[test]
fn an_absent_hooks_directory_gets_a_placeholder_that_leaves_no_trace() {
    for_each_user(|w| {
        init_repo(w);
        let hooks = w.project.join(".git/hooks");
        std::fs::remove_dir_all(&hooks).unwrap();
        let marker = w.root.join("hook-ran");
        let hook = hook_script(&marker);
        let script = format!(
            r#"test -d .git/hooks && echo "present=0"
try "plant hook" sh -c 'printf "%s" "$1" > .git/hooks/pre-commit' sh '{hook}'
try "rmdir placeholder" rmdir .git/hooks
try "mv placeholder" mv .git/hooks .git/h2
try "mkdir inside" mkdir .git/hooks/d
"#
        );
        let o = w.sh(
            &[],
            &format!("try() {{ n=$1; shift; \"$@\" >/dev/null 2>&1; echo \"$n=$?\"; }}\n{script}"),
        );
        assert_code(&o, 0, "the attack script");
        let out = stdout(&o);
        assert_field(&out, "present", "0");
        for name in [
            "plant hook",
            "rmdir placeholder",
            "mv placeholder",
            "mkdir inside",
        ] {
            assert_failed(&out, name);
        }
        // Not announced on stderr at every run: the dry run lists it.
        let err = stderr(&o);
        assert!(!err.contains("placeholder"), "{err}");
        let dry = w
            .sandy(["run", "--dry-run", "--", "/bin/true"])
            .output()
            .unwrap();
        assert_code(&dry, 0, "dry run");
        let doc: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
        let listed = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == hooks.display().to_string() && !p["placeholder"].is_null());
        assert!(listed, "{}", doc["protections"]);
        assert!(
            std::fs::symlink_metadata(&hooks).is_err(),
            "the placeholder stayed on the host"
        );
        assert!(!w.project.join(".git/h2").exists());
        commit_runs_no_planted_hook(w, &marker);
    });
}

#[test]
fn a_placeholder_changed_outside_during_the_run_is_kept_and_reported() {
    for_each_user(|w| {
        init_repo(w);
        let hooks = w.project.join(".git/hooks");
        std::fs::remove_dir_all(&hooks).unwrap();
        // The host (this test) puts a file in the placeholder while the run sleeps.
        let mut child = w
            .sandy(["run", "--", "/bin/sh", "-c", "sleep 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let collector = Collector::start(&mut child);
        assert!(
            wait_for(10, || hooks.is_dir()),
            "no placeholder was created"
        );
        std::fs::write(hooks.join("user-hook"), "mine\n").unwrap();
        let status = wait_timeout(&mut child, 30, "sandy run");
        let o = collector.finish(status);
        assert_code(&o, 0, "sandy run");
        assert_eq!(
            std::fs::read_to_string(hooks.join("user-hook")).unwrap(),
            "mine\n"
        );
        assert!(
            stderr(&o).contains("was changed during the run"),
            "{}",
            stderr(&o)
        );
    });
}

#[test]
fn a_dangling_or_looping_protected_link_is_refused_before_launch() {
    for_each_user(|w| {
        init_repo(w);
        let hooks = w.project.join(".git/hooks");
        std::fs::remove_dir_all(&hooks).unwrap();
        for (target, word) in [("../nowhere", "does not exist"), ("hooks", "loops")] {
            link(target, &hooks);
            w.chown_all();
            let marker = w.root.join("ran");
            let o = w.sh(&[], &format!("touch '{}'", marker.display()));
            assert_code(&o, 125, "a dangling protected link");
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            // Git itself may be the first to refuse a looping name (it cannot read the
            // repository through it either); either way, one line, and nothing runs.
            let by_git = err.contains("nested symlinks") && err.contains("refusing to run");
            assert!(
                by_git || (err.contains(word) && err.contains("run again")),
                "{err}"
            );
            assert!(!marker.exists(), "the target ran");
            assert_eq!(std::fs::read_link(&hooks).unwrap(), PathBuf::from(target));
            assert!(!w.project.join(".git/nowhere").exists());
            std::fs::remove_file(&hooks).unwrap();
        }
        // A looping ancestor: `.git -> git2 -> .git`; every protected name under it is
        // absent, and the link would be replaceable.
        let dotgit = w.project.join(".git");
        std::fs::rename(&dotgit, w.project.join("real.git")).unwrap();
        link("git2", &dotgit);
        link(".git", &w.project.join("git2"));
        w.chown_all();
        let o = w.sh(&[], "true");
        assert_code(&o, 125, "a looping .git link");
        let err = stderr(&o);
        assert!(err.contains("loops") && err.contains(".git"), "{err}");
        assert_eq!(std::fs::read_link(&dotgit).unwrap(), PathBuf::from("git2"));
    });
}

#[test]
fn a_masked_path_that_is_a_symlink_masks_its_target() {
    for_each_user(|w| {
        // ~/.ssh -> dotfiles/ssh (a dotfile manager), read through a broad --read of home.
        let key = w.write("home/dotfiles/ssh/id_ed25519", "SECRET-KEY-CANARY\n");
        link("dotfiles/ssh", &w.home.join(".ssh"));
        w.write("home/notes.txt", "readable\n");
        w.chown_all();
        let home = w.home.display().to_string();
        let o = w.sh(
            &["--read", &home],
            &format!(
                "cat '{home}/notes.txt'; echo \"notes=$?\"\n\
                 cat '{home}/.ssh/id_ed25519'; echo \"by_name=$?\"\n\
                 cat '{}'; echo \"by_target=$?\"\n\
                 ls -A '{home}/.ssh/' | wc -l | sed 's/^/listed=/'\n",
                key.display()
            ),
        );
        assert_code(&o, 0, "reads under --read ~");
        let out = stdout(&o);
        assert_field(&out, "notes", "0");
        assert!(out.contains("readable"), "{out}");
        assert!(!out.contains("SECRET-KEY-CANARY"), "{out}");
        assert_failed(&out, "by_name");
        assert_failed(&out, "by_target");
        assert_field(&out, "listed", "0");
    });
}
