//! Git layouts beyond "the usual one", through the real binary, judged the way an
//! attacker's success would show: after the sandboxed attack, the user's own `git status`
//! or `git commit` runs OUTSIDE the sandbox (as the same user), and the marker file that
//! the planted fsmonitor or hook would create must not exist. Each judge is then checked
//! by planting the same thing on the host, which must create the marker: the file under
//! attack really is one git reads for that repository.
//!
//! Layouts: submodules at `libs/sub`, with a name unlike their path, and nested
//! (`modules/a/modules/b`); linked worktrees in both directions; `core.hooksPath` in every
//! spelling and scope (on the `[core]` line, with comments, quoted, in `~/.gitconfig`, in
//! the system file, in an included file); `include.path` and `includeIf` (matching and
//! not matching at launch); nested repositories that are not submodules, deep ones and
//! ones whose `.git` is a symlink; bare repositories and other directories git takes as a
//! git directory themselves (no `.git` at all: a `HEAD` beside `objects/` and `refs/`, or
//! beside a `commondir`), before the run and made by it; a FIFO and `/dev/zero` where
//! Sandy looks after the run; a project below a repository root; and the ordinary git
//! work that must keep working.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const GIT: &str = "/usr/bin/git";

/// Git on the host, as the test user, in `dir`, with a fixed identity and local
/// submodule URLs allowed.
fn git_env(w: &World, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = w.host(GIT);
    cmd.current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn git(w: &World, dir: &Path, args: &[&str]) -> Output {
    git_env(w, dir, args, &[])
}

#[track_caller]
fn git_ok(w: &World, dir: &Path, args: &[&str]) -> String {
    let o = git(w, dir, args);
    assert_code(&o, 0, &format!("host git {args:?} in {}", dir.display()));
    stdout(&o)
}

/// A repository with one commit of README.md at `dir`.
fn init_repo(w: &World, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("README.md"), "# readme\n").unwrap();
    w.chown_all();
    git_ok(w, dir, &["init", "-q", "-b", "main"]);
    git_ok(w, dir, &["add", "README.md"]);
    git_ok(w, dir, &["commit", "-q", "-m", "first"]);
}

/// `sandy run [FLAGS] -- sh -c SCRIPT` with extra environment.
fn sandy_sh(w: &World, flags: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    let mut args: Vec<&str> = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    let mut cmd = w.sandy(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_timeout(cmd, 120)
}

/// Config text that makes `git status` run `touch MARKER`.
fn fsmonitor(marker: &Path) -> String {
    format!(
        "[core]\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    )
}

/// A shell snippet that tries every way to put `text` into `file`: append, replace,
/// remove and recreate, rename over it, and replace a parent-less symlink.
fn plant_file(file: &Path, text: &str) -> String {
    let f = file.display();
    let quoted = text.replace('\'', "'\\''");
    format!(
        "printf '%s' '{quoted}' >> '{f}' 2>/dev/null; \
         printf '%s' '{quoted}' > '{f}.new' 2>/dev/null && mv -f '{f}.new' '{f}' 2>/dev/null; \
         rm -f '{f}' 2>/dev/null; mkdir -p \"$(dirname '{f}')\" 2>/dev/null; \
         printf '%s' '{quoted}' > '{f}' 2>/dev/null; \
         ln -sf /dev/null '{f}.l' 2>/dev/null; \
         true\n"
    )
}

/// A shell snippet that tries to make `hooks/pre-commit` and
/// `hooks/reference-transaction` (which runs on every ref update, in a bare repository
/// too) run `touch MARKER`: write the hooks, replace the directory, or swap it for a
/// symlink.
fn plant_hook(hooks: &Path, marker: &Path) -> String {
    let h = hooks.display();
    let m = marker.display();
    let write = format!(
        "for hook in pre-commit reference-transaction; do \
         printf '#!/bin/sh\\ntouch {m}\\n' > '{h}/'$hook 2>/dev/null; chmod +x '{h}/'$hook 2>/dev/null; \
         done; "
    );
    format!(
        "{write}mv '{h}' '{h}.old' 2>/dev/null; rm -rf '{h}' 2>/dev/null; mkdir -p '{h}' 2>/dev/null; \
         {write}true\n"
    )
}

/// Config text that makes `git status`, run in a bare repository, run `touch MARKER`:
/// the repository is given a working tree, whose status then asks the fsmonitor.
fn bare_fsmonitor(marker: &Path, work_tree: &Path) -> String {
    format!(
        "[core]\n\tbare = false\n\tworktree = {}\n\tfsmonitor = \"touch {}; false\"\n",
        work_tree.display(),
        marker.display()
    )
}

/// The outside judge for a planted fsmonitor: `git status` in `repo` must not create
/// `marker`. Then the control: the same text appended on the host to `file` must.
#[track_caller]
fn judge_config(
    w: &World,
    o: &Output,
    repo: &Path,
    file: &Path,
    marker: &Path,
    env: &[(&str, &str)],
) {
    judge_config_text(w, o, repo, file, marker, &fsmonitor(marker), env);
}

/// [`judge_config`] with the planted `text`.
#[track_caller]
fn judge_config_text(
    w: &World,
    o: &Output,
    repo: &Path,
    file: &Path,
    marker: &Path,
    text: &str,
    env: &[(&str, &str)],
) {
    assert_code(o, 0, "the sandboxed attempt");
    let _ = git_env(w, repo, &["status", "--short"], env);
    assert!(
        !marker.exists(),
        "planted config in {} ran in the host's git status in {}\nsandy stderr:\n{}",
        file.display(),
        repo.display(),
        stderr(o)
    );
    // Control: the file is live configuration for this repository.
    let mut live = std::fs::read_to_string(file).unwrap_or_default();
    live.push_str(text);
    std::fs::write(file, live).unwrap();
    let _ = git_env(w, repo, &["status", "--short"], env);
    assert!(
        marker.exists(),
        "control: {} is not read by git in {}",
        file.display(),
        repo.display()
    );
}

/// The outside judge for a planted hook: `git commit` in `repo` must not create `marker`.
/// Then the control: the same hook written on the host must.
#[track_caller]
fn judge_hook(
    w: &World,
    o: &Output,
    repo: &Path,
    hooks: &Path,
    marker: &Path,
    env: &[(&str, &str)],
) {
    let commit = |m: &'static str| ["commit", "-q", "--allow-empty", "-m", m];
    judge_hook_with(
        w,
        o,
        (repo, hooks, marker, env),
        "pre-commit",
        &commit("judge"),
        &commit("control"),
    );
}

/// The outside judge for a planted hook in a bare repository: `git branch` there (a ref
/// update) must not create `marker`. Then the control: the same hook written on the host
/// must.
#[track_caller]
fn judge_bare_hook(w: &World, o: &Output, repo: &Path, hooks: &Path, marker: &Path) {
    judge_hook_with(
        w,
        o,
        (repo, hooks, marker, &[]),
        "reference-transaction",
        &["branch", "judge", "main"],
        &["branch", "control", "main"],
    );
}

/// `attack` (git's arguments) in `repo` on the host must not create `marker`; after
/// `hook` is written into `hooks` on the host, `control` must.
#[track_caller]
fn judge_hook_with(
    w: &World,
    o: &Output,
    (repo, hooks, marker, env): (&Path, &Path, &Path, &[(&str, &str)]),
    hook: &str,
    attack: &[&str],
    control: &[&str],
) {
    assert_code(o, 0, "the sandboxed attempt");
    let _ = git_env(w, repo, attack, env);
    assert!(
        !marker.exists(),
        "a hook planted in {} ran in the host's git {attack:?} in {}\nsandy stderr:\n{}",
        hooks.display(),
        repo.display(),
        stderr(o)
    );
    let hook = hooks.join(hook);
    std::fs::create_dir_all(hooks).unwrap();
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.chown_all();
    let _ = git_env(w, repo, control, env);
    assert!(
        marker.exists(),
        "control: {} is not git's hooks directory for {}",
        hooks.display(),
        repo.display()
    );
}

/// A repository outside the project to add as a submodule.
fn upstream(w: &World, name: &str) -> PathBuf {
    let dir = w.root.join(name);
    init_repo(w, &dir);
    dir
}

// ---------------------------------------------------------------------------------------
// A1: submodules at any depth
// ---------------------------------------------------------------------------------------

#[test]
fn a1_a_submodule_at_libs_sub_keeps_its_config_and_hooks() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let src = upstream(w, "subsrc");
        git_ok(
            w,
            &w.project,
            &["submodule", "add", "-q", src.to_str().unwrap(), "libs/sub"],
        );
        git_ok(w, &w.project, &["commit", "-q", "-m", "sub"]);
        let gitdir = w.project.join(".git/modules/libs/sub");
        assert!(gitdir.join("config").is_file(), "git's default layout");
        let sub = w.project.join("libs/sub");
        let marker = w.root.join("pwned-config");
        let o = sandy_sh(
            w,
            &[],
            &plant_file(&gitdir.join("config"), &fsmonitor(&marker)),
            &[],
        );
        judge_config(w, &o, &sub, &gitdir.join("config"), &marker, &[]);

        let marker = w.root.join("pwned-hook");
        let o = sandy_sh(w, &[], &plant_hook(&gitdir.join("hooks"), &marker), &[]);
        judge_hook(w, &o, &sub, &gitdir.join("hooks"), &marker, &[]);
    });
}

#[test]
fn a1_nested_submodules_and_a_submodule_named_unlike_its_path_are_protected() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let b = upstream(w, "bsrc");
        let a = upstream(w, "asrc");
        git_ok(w, &a, &["submodule", "add", "-q", b.to_str().unwrap(), "b"]);
        git_ok(w, &a, &["commit", "-q", "-m", "b"]);
        git_ok(
            w,
            &w.project,
            &["submodule", "add", "-q", a.to_str().unwrap(), "a"],
        );
        git_ok(
            w,
            &w.project,
            &["submodule", "update", "-q", "--init", "--recursive"],
        );
        // Not in the issue: a submodule whose name is not its path.
        let c = upstream(w, "csrc");
        git_ok(
            w,
            &w.project,
            &[
                "submodule",
                "add",
                "-q",
                "--name",
                "deep/name",
                c.to_str().unwrap(),
                "third/c",
            ],
        );
        git_ok(w, &w.project, &["commit", "-q", "-m", "subs"]);
        let nested = w.project.join(".git/modules/a/modules/b");
        let named = w.project.join(".git/modules/deep/name");
        assert!(nested.join("config").is_file() && named.join("config").is_file());

        let marker = w.root.join("pwned-nested");
        let o = sandy_sh(
            w,
            &[],
            &plant_file(&nested.join("config"), &fsmonitor(&marker)),
            &[],
        );
        judge_config(
            w,
            &o,
            &w.project.join("a/b"),
            &nested.join("config"),
            &marker,
            &[],
        );

        let marker = w.root.join("pwned-named");
        let o = sandy_sh(w, &[], &plant_hook(&named.join("hooks"), &marker), &[]);
        judge_hook(
            w,
            &o,
            &w.project.join("third/c"),
            &named.join("hooks"),
            &marker,
            &[],
        );

        // The submodule's `.git` pointer cannot be redirected either.
        let pointer = w.project.join("a/b/.git");
        let before = std::fs::read(&pointer).unwrap();
        let o = sandy_sh(w, &[], &plant_file(&pointer, "gitdir: ../../evil\n"), &[]);
        assert_code(&o, 0, "pointer attempt");
        assert_eq!(std::fs::read(&pointer).unwrap(), before);
    });
}

// ---------------------------------------------------------------------------------------
// A3: linked worktrees, both directions
// ---------------------------------------------------------------------------------------

#[test]
fn a3_a_worktree_commondir_cannot_be_redirected() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        git_ok(
            w,
            &w.project,
            &["worktree", "add", "-q", "wt", "-b", "side"],
        );
        let admin = w.project.join(".git/worktrees/wt");
        let marker = w.root.join("pwned-commondir");
        // An evil common directory: a copy of the repository with a config of its own.
        let script = format!(
            "mkdir -p evil && cp -r .git/objects .git/refs .git/HEAD evil/ 2>/dev/null
             printf '[core]\\n\\trepositoryformatversion = 0\\n' > evil/config
             printf '%s' '{}' >> evil/config
             {}
             {}",
            fsmonitor(&marker),
            plant_file(
                &admin.join("commondir"),
                &format!("{}\n", w.project.join("evil").display())
            ),
            plant_file(&admin.join("config.worktree"), &fsmonitor(&marker)),
        );
        let o = sandy_sh(w, &[], &script, &[]);
        assert_code(&o, 0, "attempt");
        let _ = git(w, &w.project.join("wt"), &["status", "--short"]);
        assert!(
            !marker.exists(),
            "a redirected commondir ran code:\n{}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read_to_string(admin.join("commondir"))
                .unwrap()
                .trim(),
            "../.."
        );
    });
}

#[test]
fn a3_a_project_that_is_a_linked_worktree_keeps_the_main_repository_safe() {
    for_each_user(|w| {
        // The main repository beside the project; the project is its linked worktree and
        // the main repository is granted read-write.
        let main = w.home.join("main");
        init_repo(w, &main);
        std::fs::remove_dir_all(&w.project).unwrap();
        git_ok(
            w,
            &main,
            &[
                "worktree",
                "add",
                "-q",
                w.project.to_str().unwrap(),
                "-b",
                "wt",
            ],
        );
        let grant = main.display().to_string();
        let marker = w.root.join("pwned-main");
        let admin = main.join(".git/worktrees/project");
        let script = format!(
            "{}{}{}",
            plant_file(&main.join(".git/config"), &fsmonitor(&marker)),
            plant_file(&admin.join("commondir"), "../../../evil\n"),
            plant_file(&w.project.join(".git"), "gitdir: ../evil\n"),
        );
        let o = sandy_sh(w, &["--read-write", &grant], &script, &[]);
        judge_config(w, &o, &w.project, &main.join(".git/config"), &marker, &[]);
        assert!(git_ok(w, &w.project, &["rev-parse", "--git-common-dir"]).contains("main/.git"));
    });
}

// ---------------------------------------------------------------------------------------
// A4: core.hooksPath as git reads it
// ---------------------------------------------------------------------------------------

/// Sets up a hooks directory `rel` (existing) named by `config_text` written through
/// `place`, attacks it from inside and judges with a commit outside.
fn hooks_path_case(w: &World, rel: &str, place: impl Fn(&World), env: &[(&str, &str)]) {
    init_repo(w, &w.project);
    let hooks = w.project.join(rel);
    std::fs::create_dir_all(&hooks).unwrap();
    w.chown_all();
    place(w);
    w.chown_all();
    let marker = w
        .root
        .join(format!("pwned-{}", rel.replace(['/', ' ', '.'], "-")));
    let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), env);
    judge_hook(w, &o, &w.project, &hooks, &marker, env);
}

fn append(path: &Path, text: &str) {
    let mut s = std::fs::read_to_string(path).unwrap_or_default();
    s.push_str(text);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, s).unwrap();
}

#[test]
fn a4_hooks_path_on_the_core_line_with_a_comment() {
    for_each_user(|w| {
        hooks_path_case(
            w,
            ".githooks",
            |w| {
                append(
                    &w.project.join(".git/config"),
                    "[core] hooksPath = .githooks # shared\n",
                )
            },
            &[],
        );
    });
}

#[test]
fn a4_hooks_path_quoted_with_a_semicolon_comment_and_odd_case() {
    for_each_user(|w| {
        hooks_path_case(
            w,
            "tools/git hooks",
            |w| {
                append(
                    &w.project.join(".git/config"),
                    "[CORE]\n\tHooksPath = \"tools/git hooks\" ; team hooks\n",
                )
            },
            &[],
        );
    });
}

#[test]
fn a4_hooks_path_in_the_global_config() {
    for_each_user(|w| {
        hooks_path_case(
            w,
            ".hooks-global",
            |w| {
                append(
                    &w.home.join(".gitconfig"),
                    "[core]\n\thooksPath = .hooks-global\n",
                )
            },
            &[],
        );
    });
}

#[test]
fn a4_hooks_path_in_the_xdg_global_config_with_a_home_path() {
    // Not in the issue: the XDG location, and a `~/` value.
    for_each_user(|w| {
        hooks_path_case(
            w,
            "xdg-hooks",
            |w| {
                append(
                    &w.home.join(".config/git/config"),
                    "[core]\n\thooksPath = ~/project/xdg-hooks\n",
                )
            },
            &[],
        );
    });
}

#[test]
fn a4_hooks_path_in_the_system_config() {
    for_each_user(|w| {
        let system = w.root.join("etc-gitconfig");
        let system_s = system.display().to_string();
        let env = [("GIT_CONFIG_SYSTEM", system_s.as_str())];
        hooks_path_case(
            w,
            "sys-hooks",
            |_| append(&system, "[core]\n\thooksPath = sys-hooks\n"),
            &env,
        );
    });
}

#[test]
fn a4_hooks_path_in_an_included_file() {
    for_each_user(|w| {
        hooks_path_case(
            w,
            "inc-hooks",
            |w| {
                append(
                    &w.project.join(".git/config"),
                    "[include]\n\tpath = ../hooks.inc\n",
                );
                append(
                    &w.project.join("hooks.inc"),
                    "[core]\n\thooksPath = inc-hooks\n",
                );
            },
            &[],
        );
    });
}

// ---------------------------------------------------------------------------------------
// A6: includes
// ---------------------------------------------------------------------------------------

#[test]
fn a6_an_included_file_of_the_project_config_is_read_only() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        append(
            &w.project.join(".git/config"),
            "[include]\n\tpath = ../.gitconfig.shared\n",
        );
        // An include of the include (not in the issue).
        append(
            &w.project.join(".gitconfig.shared"),
            "[include]\n\tpath = conf/deeper.inc\n",
        );
        append(&w.project.join("conf/deeper.inc"), "[user]\n\tname = x\n");
        w.chown_all();
        let marker = w.root.join("pwned-include");
        let shared = w.project.join(".gitconfig.shared");
        let o = sandy_sh(w, &[], &plant_file(&shared, &fsmonitor(&marker)), &[]);
        judge_config(w, &o, &w.project, &shared, &marker, &[]);

        // The control above planted into the shared file; back to its launch state.
        std::fs::write(&shared, "[include]\n\tpath = conf/deeper.inc\n").unwrap();
        let marker = w.root.join("pwned-deeper");
        let deeper = w.project.join("conf/deeper.inc");
        let o = sandy_sh(w, &[], &plant_file(&deeper, &fsmonitor(&marker)), &[]);
        judge_config(w, &o, &w.project, &deeper, &marker, &[]);
    });
}

#[test]
fn a6_include_if_in_the_global_config_matching_now_or_only_later() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let project = std::fs::canonicalize(&w.project).unwrap();
        append(
            &w.home.join(".gitconfig"),
            &format!(
                "[includeIf \"gitdir:{}/\"]\n\tpath = ~/project/now.inc\n\
                 [includeIf \"onbranch:later\"]\n\tpath = {}/later.inc\n",
                project.display(),
                project.display()
            ),
        );
        append(&w.project.join("now.inc"), "[user]\n\tname = now\n");
        append(&w.project.join("later.inc"), "[user]\n\tname = later\n");
        w.chown_all();
        let marker = w.root.join("pwned-now");
        let now = w.project.join("now.inc");
        let o = sandy_sh(w, &[], &plant_file(&now, &fsmonitor(&marker)), &[]);
        judge_config(w, &o, &w.project, &now, &marker, &[]);

        // The include that does not match at launch: the run also switches to the branch
        // that makes it match.
        let marker = w.root.join("pwned-later");
        let later = w.project.join("later.inc");
        let script = format!(
            "git checkout -q -b later && {}",
            plant_file(&later, &fsmonitor(&marker))
        );
        let o = sandy_sh(w, &[], &script, &[]);
        assert_eq!(
            git_ok(w, &w.project, &["branch", "--show-current"]).trim(),
            "later",
            "the branch switch inside worked: {}",
            stderr(&o)
        );
        judge_config(w, &o, &w.project, &later, &marker, &[]);
    });
}

// ---------------------------------------------------------------------------------------
// Nested repositories (12.6), `.git` symlinks
// ---------------------------------------------------------------------------------------

#[test]
fn a_nested_repository_that_is_not_a_submodule_is_protected() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let nested = w.project.join("vendor/x");
        init_repo(w, &nested);
        // Not in the issue: one deep below a directory git ignores.
        let deep = w.project.join("build/a/b/c/d");
        init_repo(w, &deep);
        let marker = w.root.join("pwned-vendor");
        let o = sandy_sh(
            w,
            &[],
            &plant_file(&nested.join(".git/config"), &fsmonitor(&marker)),
            &[],
        );
        judge_config(w, &o, &nested, &nested.join(".git/config"), &marker, &[]);

        let marker = w.root.join("pwned-deep");
        let hooks = deep.join(".git/hooks");
        let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), &[]);
        judge_hook(w, &o, &deep, &hooks, &marker, &[]);
    });
}

/// The walk before a launch reads only what changed since the last launch kept its
/// record (issue 38): a repository made between two launches, outside Sandy, deep in a
/// directory the record took on trust, and one moved there with its parent, are found
/// and protected all the same.
#[test]
fn repositories_made_or_moved_between_launches_are_protected_by_the_next() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        for d in ["lib/a/b", "old/x/y", "pkgs/p"] {
            std::fs::create_dir_all(w.project.join(d)).unwrap();
        }
        // Large enough for the record to be kept (a small tree is simply walked).
        for i in 0..100 {
            std::fs::create_dir_all(w.project.join(format!("vendor/p{}/m{i}", i / 10))).unwrap();
        }
        init_repo(w, &w.project.join("old/x/y/repo"));
        // Old enough for the record to take every directory on trust.
        std::thread::sleep(Duration::from_millis(1300));
        let o = sandy_sh(w, &[], "true", &[]);
        assert_code(&o, 0, "the first launch");
        let kept = w.home.join(".local/state/sandy/walk");
        let records = std::fs::read_dir(&kept).map(|d| d.count()).unwrap_or(0);
        assert_eq!(
            records,
            1,
            "the walk's record is kept in {}",
            kept.display()
        );
        // Between the launches, outside Sandy.
        let made = w.project.join("lib/a/b/made");
        init_repo(w, &made);
        std::fs::rename(w.project.join("old/x"), w.project.join("pkgs/p/x")).unwrap();
        let moved = w.project.join("pkgs/p/x/y/repo");
        for (repo, name) in [(&made, "made"), (&moved, "moved")] {
            let marker = w.root.join(format!("pwned-{name}"));
            let hooks = repo.join(".git/hooks");
            let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), &[]);
            judge_hook(w, &o, repo, &hooks, &marker, &[]);
        }
    });
}

#[test]
fn a_bare_repository_inside_the_project_keeps_its_config_and_hooks() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        // A test fixture kept as a bare repository, and one that has no `.git` in its name.
        let fixture = w.project.join("tests/fixtures/lib.git");
        let plain = w.project.join("mirror");
        for bare in [&fixture, &plain] {
            std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
            w.chown_all();
            git_ok(
                w,
                &w.project,
                &["clone", "-q", "--bare", ".", bare.to_str().unwrap()],
            );
        }
        // Git's own work in them still works inside.
        let o = sandy_sh(
            w,
            &[],
            "git -C tests/fixtures/lib.git log --oneline && git -C mirror branch inside main",
            &[],
        );
        assert_code(&o, 0, "git in a bare repository inside");
        assert!(stdout(&o).contains("first"), "{}", stdout(&o));

        let marker = w.root.join("pwned-bare-config");
        let text = bare_fsmonitor(&marker, &w.tmp);
        let o = sandy_sh(w, &[], &plant_file(&fixture.join("config"), &text), &[]);
        judge_config_text(
            w,
            &o,
            &fixture,
            &fixture.join("config"),
            &marker,
            &text,
            &[],
        );

        let marker = w.root.join("pwned-bare-hook");
        let hooks = plain.join("hooks");
        let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), &[]);
        judge_bare_hook(w, &o, &plain, &hooks, &marker);
    });
}

#[test]
fn a_directory_git_takes_as_a_git_directory_through_commondir_is_protected() {
    for_each_user(|w| {
        // No `.git`, no `objects/`, no subdirectory at all: a `HEAD` and a `commondir`
        // make git take the directory as a git directory whose configuration and hooks
        // are the common one's; its own `config.worktree` is read too.
        init_repo(w, &w.project);
        let common = w.project.join("store.git");
        git_ok(
            w,
            &w.project,
            &["clone", "-q", "--bare", ".", common.to_str().unwrap()],
        );
        git_ok(w, &common, &["config", "extensions.worktreeConfig", "true"]);
        let leaf = w.project.join("leaf");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(leaf.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(leaf.join("commondir"), "../store.git\n").unwrap();
        std::fs::write(leaf.join("config.worktree"), "").unwrap();
        w.chown_all();
        // The user's own setting refuses implicit bare repositories today: it is still
        // protected (the setting is the user's to change, and the run's to read).
        append(
            &w.home.join(".gitconfig"),
            "[safe]\n\tbareRepository = explicit\n",
        );
        let marker = w.root.join("pwned-commondir");
        let text = bare_fsmonitor(&marker, &w.tmp);
        let script = format!(
            "{} echo ../mirror > leaf/commondir; true",
            plant_file(&leaf.join("config.worktree"), &text)
        );
        let o = sandy_sh(w, &[], &script, &[]);
        assert_eq!(
            std::fs::read_to_string(leaf.join("commondir")).unwrap(),
            "../store.git\n"
        );
        std::fs::write(w.home.join(".gitconfig"), "").unwrap();
        judge_config_text(
            w,
            &o,
            &leaf,
            &leaf.join("config.worktree"),
            &marker,
            &text,
            &[],
        );
    });
}

#[test]
fn a_directory_made_a_git_directory_inside_is_named_with_what_it_would_run() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        std::fs::create_dir_all(w.project.join("src/deep")).unwrap();
        std::fs::write(w.project.join("src/main.rs"), "fn main() {}\n").unwrap();
        w.chown_all();
        // Control: a file named HEAD that makes no git directory is not worth a line.
        let o = sandy_sh(
            w,
            &[],
            "echo 'not a ref' > src/HEAD && rm src/HEAD && echo x > src/deep/HEAD",
            &[],
        );
        assert_code(&o, 0, "control");
        assert_eq!(stderr(&o), "");

        // `src` becomes a git directory: git run in `src` (or below) would use it instead
        // of the project's repository. And a leaf that points at a common directory made
        // alongside, with no `HEAD` of its own.
        let o = sandy_sh(
            w,
            &[],
            "set -e
             mkdir -p src/objects src/refs src/hooks
             echo 'ref: refs/heads/main' > src/HEAD
             printf '[core]\\n\\tbare = false\\n\\tworktree = ..\\n\\tfsmonitor = touch /nowhere\\n' > src/config
             printf '#!/bin/sh\\n' > src/hooks/pre-commit
             mkdir -p c/objects c/refs c/hooks l
             printf '[core]\\n\\tpager = less-but-not\\n' > c/config
             printf '#!/bin/sh\\n' > c/hooks/post-checkout
             echo 'ref: refs/heads/main' > l/HEAD
             echo ../c > l/commondir",
            &[],
        );
        assert_code(&o, 0, "plant");
        let err = stderr(&o);
        let project = std::fs::canonicalize(&w.project).unwrap();
        for want in [
            format!(
                "{} was made a git repository",
                project.join("src").display()
            ),
            format!(
                "{} sets core.fsmonitor =",
                project.join("src/config").display()
            ),
            format!(
                "{} is a git hook",
                project.join("src/hooks/pre-commit").display()
            ),
            format!("{} was made a git repository", project.join("l").display()),
            format!("{} sets core.pager =", project.join("c/config").display()),
            format!(
                "{} is a git hook",
                project.join("c/hooks/post-checkout").display()
            ),
        ] {
            assert!(err.contains(&want), "{want:?} not said:\n{err}");
        }
        assert!(!err.contains("deep"), "{err}");
        // The judge of the lines: git outside really takes `src` as its git directory.
        let o = git(
            w,
            &w.project.join("src"),
            &["rev-parse", "--absolute-git-dir"],
        );
        assert_eq!(stdout(&o).trim(), project.join("src").to_str().unwrap());
    });
}

#[test]
fn a_dotgit_symlink_to_a_store_inside_the_project_is_protected_at_both_ends() {
    for_each_user(|w| {
        let store = w.project.join("store/repo.git");
        let tree = w.project.join("tree");
        init_repo(w, &tree);
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        std::fs::rename(tree.join(".git"), &store).unwrap();
        std::os::unix::fs::symlink("../store/repo.git", tree.join(".git")).unwrap();
        w.chown_all();
        let marker = w.root.join("pwned-store");
        let script = format!(
            "{}{}",
            plant_file(&store.join("config"), &fsmonitor(&marker)),
            plant_file(&tree.join(".git/config"), &fsmonitor(&marker))
        );
        let o = sandy_sh(w, &[], &script, &[]);
        judge_config(w, &o, &tree, &store.join("config"), &marker, &[]);
        assert_eq!(
            std::fs::read_link(tree.join(".git")).unwrap(),
            PathBuf::from("../store/repo.git")
        );
    });
}

#[test]
fn from_a_subdirectory_of_a_repository_sandy_says_where_the_root_is() {
    for_each_user(|w| {
        let repo = w.home.join("repo");
        init_repo(w, &repo);
        let sub = repo.join("src");
        std::fs::create_dir_all(&sub).unwrap();
        w.chown_all();
        let o = run_timeout(
            {
                let mut c = w.sandy(["run", "--", "/bin/true"]);
                c.current_dir(&sub);
                c
            },
            60,
        );
        assert_code(&o, 0, "run from a subdirectory");
        let err = stderr(&o);
        let notes: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("sandy: note: the git repository of"))
            .collect();
        assert_eq!(notes.len(), 1, "{}", stderr(&o));
        let root = std::fs::canonicalize(&repo).unwrap();
        assert!(
            notes[0].contains(&format!("root at {}", root.display()))
                && notes[0].contains("--read-write"),
            "{}",
            notes[0]
        );
        // Granting the root, as the note says: no note, and git works from the
        // subdirectory inside.
        let root_s = root.display().to_string();
        let o = run_timeout(
            {
                let mut c = w.sandy([
                    "run",
                    "--read-write",
                    &root_s,
                    "--",
                    GIT,
                    "status",
                    "--short",
                ]);
                c.current_dir(&sub);
                c
            },
            60,
        );
        assert_code(
            &o,
            0,
            "git status from the subdirectory with the root granted",
        );
        assert!(
            !stderr(&o).contains("sandy: note: the git repository"),
            "{}",
            stderr(&o)
        );
        // Control: from the root itself, no note.
        let o = run_timeout(
            {
                let mut c = w.sandy(["run", "--", "/bin/true"]);
                c.current_dir(&repo);
                c
            },
            60,
        );
        assert_code(&o, 0, "run from the root");
        assert!(
            !stderr(&o).contains("sandy: note: the git repository"),
            "{}",
            stderr(&o)
        );
    });
}

// ---------------------------------------------------------------------------------------
// Verification after the run (requirements 4 and 7, finding E)
// ---------------------------------------------------------------------------------------

#[test]
fn e_a_fifo_at_the_index_and_dev_zero_and_a_huge_file_never_stall_sandy() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let start = Instant::now();
        let o = sandy_sh(
            w,
            &[],
            "rm -f .git/index && mkfifo .git/index
             mkdir -p new && cd new && git init -q && rm -f .git/config && mkfifo .git/config
             ln -s /dev/zero .git/config.worktree
             ln -sf /dev/zero .git/hooks/pre-commit
             truncate -s 8G .git/description
             exit 7",
            &[],
        );
        assert_code(&o, 7, "the target's own status survives the checks");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "sandy took {:?}",
            start.elapsed()
        );
        let err = stderr(&o);
        assert!(
            err.contains("new/.git did not exist at launch"),
            "the created repository is named:\n{err}"
        );
        assert!(
            err.contains("new/.git/hooks/pre-commit is a git hook"),
            "{err}"
        );
    });
}

/// The walk after the run reads again only the directories that changed (their change
/// time, which nothing inside can set back): a repository made deep in an old tree, in a
/// directory whose modification time is then restored, is still named; an old nested
/// repository is not named as new, and neither is anything in a run that changes nothing.
#[test]
fn a_repository_made_deep_in_an_old_tree_is_named_even_with_its_times_set_back() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        for d in ["src/a/b/c", "vendor/old/.git/hooks", "docs/x", "locked"] {
            std::fs::create_dir_all(w.project.join(d)).unwrap();
        }
        w.chown_all();
        // A directory its owner cannot read before the run (root can).
        use std::os::unix::fs::PermissionsExt;
        let locked = w.project.join("locked");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        // Older than the walk's margin, so that the walk after the run may trust them.
        std::thread::sleep(Duration::from_millis(1200));
        let quiet = sandy_sh(w, &[], "ls src/a/b/c docs >/dev/null", &[]);
        assert_code(&quiet, 0, "a run that changes nothing");
        assert!(
            !stderr(&quiet).contains("did not exist at launch"),
            "nothing is new:\n{}",
            stderr(&quiet)
        );
        let o = sandy_sh(
            w,
            &[],
            "touch -r src/a/b/c /tmp/when
             git init -q src/a/b/c
             printf '#!/bin/sh\\n' > src/a/b/c/.git/hooks/pre-commit
             chmod +x src/a/b/c/.git/hooks/pre-commit
             touch -r /tmp/when src/a/b/c
             printf 'gitdir: ../../vendor/old/.git\\n' > docs/x/.git
             touch -r /tmp/when docs/x
             chmod 755 locked && git init -q locked",
            &[],
        );
        assert_code(&o, 0, "plant");
        let err = stderr(&o);
        let project = std::fs::canonicalize(&w.project).unwrap();
        for made in ["src/a/b/c/.git", "docs/x/.git", "locked/.git"] {
            let line = format!("{} did not exist at launch", project.join(made).display());
            assert!(err.contains(&line), "{made} is named:\n{err}");
        }
        assert!(
            err.contains("src/a/b/c/.git/hooks/pre-commit is a git hook"),
            "{err}"
        );
        assert!(!err.contains("vendor/old/.git did not exist"), "{err}");
        // Judged from outside: the directories' times are the old ones, as planted.
        let when = |p: &str| {
            std::fs::metadata(w.project.join(p))
                .unwrap()
                .modified()
                .unwrap()
        };
        assert!(when("src/a/b/c") < when("src/a/b/c/.git"));
    });
}

#[test]
fn sigterm_ends_sandy_promptly_with_a_fifo_in_place() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let mut child = w
            .sandy([
                "run",
                "--",
                "/bin/sh",
                "-c",
                "rm -f .git/index && mkfifo .git/index
                 mkdir n && git -C n init -q && truncate -s 8G n/.git/config
                 exec sleep 60",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fifo = w.project.join(".git/index");
        assert!(wait_for(20, || {
            use std::os::unix::fs::FileTypeExt;
            std::fs::symlink_metadata(&fifo).is_ok_and(|m| m.file_type().is_fifo())
        }));
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = wait_timeout(&mut child, 15, "sandy after SIGTERM");
        assert!(!status.success());
    });
}

#[test]
fn an_operation_in_progress_left_by_the_run_is_named_with_what_continue_would_run() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        git_ok(
            w,
            &w.project,
            &["commit", "-q", "--allow-empty", "-m", "second"],
        );
        // Control: a rebase carried out to its end inside leaves nothing to say.
        let o = sandy_sh(
            w,
            &[],
            "GIT_SEQUENCE_EDITOR=true git -c user.name=t -c user.email=t@e rebase -q -i HEAD~1",
            &[],
        );
        assert_code(&o, 0, "a whole rebase inside");
        assert_eq!(stderr(&o), "");

        // A rebase left in progress whose todo list runs a command on `--continue`.
        let marker = w.root.join("pwned-rebase");
        let o = sandy_sh(
            w,
            &[],
            &format!(
                "set -e; h=$(git rev-parse HEAD); mkdir .git/rebase-merge; cd .git/rebase-merge
                 echo refs/heads/main > head-name; echo $h > onto; echo $h > orig-head
                 : > interactive; : > done; echo 'exec touch {}' > git-rebase-todo",
                marker.display()
            ),
            &[],
        );
        assert_code(&o, 0, "plant a rebase");
        let err = stderr(&o);
        let project = std::fs::canonicalize(&w.project).unwrap();
        let want = format!(
            "{} holds a rebase in progress",
            project.join(".git").display()
        );
        assert!(err.contains(&want), "{want} not said:\n{err}");
        assert!(
            err.contains(&format!("exec touch {}", marker.display())),
            "{err}"
        );
        assert!(err.contains("git rebase --abort"), "{err}");
        // The judge of the line: git outside really runs it.
        let _ = git(w, &w.project, &["rebase", "--continue"]);
        assert!(marker.exists(), "control: the planted rebase is not live");
        let _ = git(w, &w.project, &["rebase", "--abort"]);

        // A cherry-pick whose options name a merge strategy by path (run on
        // `--continue`); the same state unchanged by a later run is not named again.
        let plant = "set -e; h=$(git rev-parse HEAD); mkdir -p .git/sequencer
             echo $h > .git/sequencer/head; echo \"pick $h x\" > .git/sequencer/todo
             printf '[options]\\n\\tstrategy = x/../.git/evil\\n' > .git/sequencer/opts";
        let o = sandy_sh(w, &[], plant, &[]);
        assert_code(&o, 0, "plant a cherry-pick");
        let err = stderr(&o);
        assert!(
            err.contains("holds a cherry-pick or revert in progress"),
            "{err}"
        );
        assert!(err.contains("a merge strategy in"), "{err}");
        let o = sandy_sh(w, &[], "true", &[]);
        assert_eq!(stderr(&o), "", "an unchanged operation is named once");
        let _ = git(w, &w.project, &["cherry-pick", "--quit"]);

        // In a worktree the run adds, whose git directory did not exist at launch.
        let o = sandy_sh(
            w,
            &[],
            "git worktree add -q wt -b wt && cd wt && \
             GIT_SEQUENCE_EDITOR='sed -i \"1s/^pick/edit/; 1a exec touch /nowhere\"' \
             git -c user.name=t -c user.email=t@e rebase -q -i HEAD~1 >/dev/null 2>&1; true",
            &[],
        );
        assert_code(&o, 0, "a rebase left in a new worktree");
        let want = format!(
            "{} holds a rebase in progress",
            project.join(".git/worktrees/wt").display()
        );
        assert!(
            stderr(&o).contains(&want),
            "{want} not said:\n{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("exec touch /nowhere"), "{}", stderr(&o));
    });
}

#[test]
fn a_hard_link_to_the_global_config_or_a_startup_file_is_compared_after_the_run() {
    for_each_user(|w| {
        // The project is a dotfiles repository whose files are also the home's, by
        // hard link: writable through the project's names.
        init_repo(w, &w.project);
        // An agent's home-level settings file too (no name of it is protected in a
        // generic run: none leads into a writable tree).
        let pairs = [
            ("gitconfig", ".gitconfig"),
            ("bashrc", ".bashrc"),
            ("claude-settings.json", ".claude/settings.json"),
        ];
        let texts = ["[user]\n\tname = t\n", "alias ll='ls -l'\n", "{}\n"];
        std::fs::create_dir_all(w.home.join(".claude")).unwrap();
        for ((ours, home), text) in pairs.iter().zip(texts) {
            std::fs::write(w.project.join(ours), text).unwrap();
            std::fs::hard_link(w.project.join(ours), w.home.join(home)).unwrap();
        }
        w.chown_all();
        let o = sandy_sh(
            w,
            &[],
            "printf '[core]\\n\\tfsmonitor = touch /nowhere\\n' >> gitconfig; echo 'touch /nowhere' >> bashrc; \
             echo '{\"hooks\": {}}' > claude-settings.json",
            &[],
        );
        assert_code(&o, 0, "write through the links");
        let err = stderr(&o);
        for (_, home) in pairs {
            let want = format!("{} was changed during the run", w.home.join(home).display());
            assert!(err.contains(&want), "{want} not said:\n{err}");
        }
        let run = restore_run(&err);
        let restored = run_timeout(w.sandy(["restore", &run]), 30);
        assert_code(&restored, 0, "sandy restore RUN");
        for ((_, home), text) in pairs.iter().zip(texts) {
            assert_eq!(std::fs::read_to_string(w.home.join(home)).unwrap(), text);
        }
    });
}

/// A repository's own configuration in the project is seen inside without its
/// credentials (a token in a remote's URL, an extra header): git inside still works
/// (status, log, the remote's fetch refspec), the token is nowhere inside, and the host
/// file is unchanged.
#[test]
fn a_repository_configuration_is_seen_without_its_credentials() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let token = "ghp_0123456789abcdefghijklmnopqrstuv";
        let url = format!("https://x-access-token:{token}@github.com/o/r.git");
        git_ok(w, &w.project, &["remote", "add", "origin", &url]);
        let header = format!("AUTHORIZATION: basic {token}");
        git_ok(
            w,
            &w.project,
            &["config", "http.https://github.com/.extraheader", &header],
        );
        let config = w.project.join(".git/config");
        let before = std::fs::read(&config).unwrap();
        let o = sandy_sh(
            w,
            &[],
            "cat .git/config; git status --short && echo status-ok; \
             echo commits=$(git log --oneline | wc -l); git config --get remote.origin.fetch; \
             git remote -v",
            &[],
        );
        let (out, err) = (stdout(&o), stderr(&o));
        assert_code(&o, 0, &format!("git inside\n{out}\n{err}"));
        assert!(
            !out.contains(token) && !err.contains(token),
            "leaked: {out}{err}"
        );
        for said in [
            "status-ok",
            "commits=1",
            "+refs/heads/*:refs/remotes/origin/*",
        ] {
            assert!(out.contains(said), "{said:?} not said:\n{out}\n{err}");
        }
        assert_eq!(std::fs::read(&config).unwrap(), before);
    });
}

#[test]
fn programs_and_templates_the_global_config_names_in_the_project_are_read_only() {
    for_each_user(|w| programs_and_templates_case(w, true));
}

/// The same in a project that holds no repository (a dotfiles directory not yet under
/// git): the user's configuration still runs its script in every other repository and
/// copies its template into every new one.
#[test]
fn programs_and_templates_in_a_project_without_a_repository_are_read_only() {
    for_each_user(|w| programs_and_templates_case(w, false));
}

fn programs_and_templates_case(w: &World, repo: bool) {
    // A dotfiles project: the user's own configuration runs a script of it at every
    // `git status`, and copies its template into every new repository.
    if repo {
        init_repo(w, &w.project);
    }
    let fsmon = w.project.join("bin/fsmon");
    std::fs::create_dir_all(w.project.join("bin")).unwrap();
    std::fs::create_dir_all(w.project.join("tpl/hooks")).unwrap();
    std::fs::write(&fsmon, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fsmon, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.chown_all();
    append(
        &w.home.join(".gitconfig"),
        "[init]\n\ttemplateDir = ~/project/tpl\n[core]\n\tfsmonitor = \"~/project/bin/fsmon\"\n",
    );
    let marker = w.root.join("pwned-fsmon");
    let hook_marker = w.root.join("pwned-template");
    let script = format!(
        "{}{}",
        plant_file(
            &fsmon,
            &format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display())
        ),
        plant_hook(&w.project.join("tpl/hooks"), &hook_marker)
    );
    let o = sandy_sh(w, &[], &script, &[]);
    assert_code(&o, 0, "the sandboxed attempt");
    // Judged outside, in a repository made afterwards: it gets the template, and its
    // `git status` runs the fsmonitor script.
    let fresh = w.root.join("fresh");
    git_ok(
        w,
        &w.root,
        &["init", "-q", "-b", "main", fresh.to_str().unwrap()],
    );
    let _ = git(w, &fresh, &["status", "--short"]);
    assert!(!marker.exists(), "{}", stderr(&o));
    let _ = git(w, &fresh, &["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(!hook_marker.exists(), "{}", stderr(&o));
    // Controls: both are live.
    std::fs::write(
        &fsmon,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    let _ = git(w, &fresh, &["status", "--short"]);
    assert!(marker.exists(), "control: the fsmonitor script is not run");
    let hook = w.project.join("tpl/hooks/pre-commit");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ntouch {}\n", hook_marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.chown_all();
    let again = w.root.join("again");
    git_ok(
        w,
        &w.root,
        &["init", "-q", "-b", "main", again.to_str().unwrap()],
    );
    let _ = git(w, &again, &["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(hook_marker.exists(), "control: the template is not copied");
}

#[test]
fn a_script_a_setting_names_in_any_spelling_is_read_only() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        std::fs::create_dir_all(w.project.join("my tools")).unwrap();
        std::os::unix::fs::symlink(&w.project, w.root.join("via-link")).unwrap();
        w.chown_all();
        let via = w.root.join("via-link/linked.sh");
        // (the setting as written, the script it runs, relative to the project)
        let cases = [
            ("sh bare.sh".to_owned(), "bare.sh"),
            ("\"$HOME/project/home.sh\"".to_owned(), "home.sh"),
            ("\"./my tools/spaced.sh\"".to_owned(), "my tools/spaced.sh"),
            (via.display().to_string(), "linked.sh"),
        ];
        for (i, (setting, script)) in cases.iter().enumerate() {
            let file = w.project.join(script);
            std::fs::write(&file, "#!/bin/sh\nexit 1\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
            w.chown_all();
            git_ok(w, &w.project, &["config", "core.fsmonitor", setting]);
            let marker = w.root.join(format!("pwned-spelling-{i}"));
            let text = format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display());
            let o = sandy_sh(w, &[], &plant_file(&file, &text), &[]);
            assert_code(&o, 0, "the sandboxed attempt");
            let _ = git(w, &w.project, &["status", "--short"]);
            assert!(!marker.exists(), "{setting}: {}", stderr(&o));
            // Control: the setting really runs that file.
            std::fs::write(&file, &text).unwrap();
            let _ = git(w, &w.project, &["status", "--short"]);
            assert!(marker.exists(), "control: {setting} does not run {script}");
            std::fs::write(&file, "#!/bin/sh\nexit 1\n").unwrap();
        }
        // Absent at launch, written as a path: the run can create it, and is named.
        git_ok(w, &w.project, &["config", "core.fsmonitor", "./later.sh"]);
        let o = sandy_sh(w, &[], "printf '#!/bin/sh\\n' > later.sh", &[]);
        assert_code(&o, 0, "create an absent script");
        let project = std::fs::canonicalize(&w.project).unwrap();
        let want = format!(
            "{} did not exist at launch",
            project.join("later.sh").display()
        );
        assert!(stderr(&o).contains(&want), "{}", stderr(&o));
        git_ok(w, &w.project, &["config", "--unset", "core.fsmonitor"]);
    });
}

#[test]
fn a_directory_git_can_pass_but_sandy_cannot_list_is_named_and_refused() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let o = sandy_sh(
            w,
            &[],
            "mkdir -p x/sub && git init -q x/sub && chmod 111 x",
            &[],
        );
        assert_code(&o, 0, "hide a repository");
        let x = std::fs::canonicalize(&w.project).unwrap().join("x");
        let o2 = sandy_sh(w, &[], "echo '[core]' >> x/sub/.git/config", &[]);
        if w.user.uid == 0 {
            // Root lists any directory: the repository is simply found and protected.
            assert!(
                stderr(&o).contains("did not exist at launch"),
                "{}",
                stderr(&o)
            );
            // Refused (a filtered, read-only copy of the file is all the sandbox sees).
            let err = stderr(&o2);
            assert!(
                err.contains("Read-only") || err.contains("Permission denied"),
                "{err}"
            );
        } else {
            let want = format!("{} can be passed through but not listed", x.display());
            assert!(stderr(&o).contains(&want), "{}", stderr(&o));
            assert_code(&o2, 125, "a run in a tree Sandy cannot look through");
            // The error names it from the home (issue 41, item 11).
            let home = std::fs::canonicalize(&w.home).unwrap();
            let shown = format!("~/{}", x.strip_prefix(&home).unwrap().display());
            let want = format!("{shown} can be passed through but not listed");
            assert!(stderr(&o2).contains(&want), "{}", stderr(&o2));
            assert!(stderr(&o2).contains("chmod u+r"), "{}", stderr(&o2));
        }
        assert_eq!(
            std::fs::read_to_string(w.project.join("x/sub/.git/config"))
                .unwrap()
                .matches("[core]")
                .count(),
            1,
            "the nested repository's config was written"
        );
        let _ = std::process::Command::new("chmod")
            .args(["755", x.to_str().unwrap()])
            .status();

        // A repository the run hides in a directory nothing can look into (mode 000):
        // named as such (as root, which can look anywhere, the repository is named).
        let o = sandy_sh(
            w,
            &[],
            "mkdir -p hide/r && git init -q hide/r && chmod 000 hide",
            &[],
        );
        assert_code(&o, 0, "hide a repository deeper");
        let hide = std::fs::canonicalize(&w.project).unwrap().join("hide");
        let want = if w.user.uid == 0 {
            format!("{} did not exist at launch", hide.join("r/.git").display())
        } else {
            format!("{} cannot be looked into", hide.display())
        };
        assert!(
            stderr(&o).contains(&want),
            "{want} not said:\n{}",
            stderr(&o)
        );
        let _ = std::process::Command::new("chmod")
            .args(["755", hide.to_str().unwrap()])
            .status();
    });
}

#[test]
fn a_new_repository_s_hooks_are_named_where_a_relative_global_hooks_path_puts_them() {
    for_each_user(|w| {
        append(
            &w.home.join(".gitconfig"),
            "[core]\n\thooksPath = .githooks\n",
        );
        let o = sandy_sh(
            w,
            &[],
            "set -e; git init -q sub; mkdir sub/.githooks; printf '#!/bin/sh\\n' > sub/.githooks/pre-commit",
            &[],
        );
        assert_code(&o, 0, "plant");
        let project = std::fs::canonicalize(&w.project).unwrap();
        let want = format!(
            "{} is a git hook created inside the sandbox",
            project.join("sub/.githooks/pre-commit").display()
        );
        assert!(
            stderr(&o).contains(&want),
            "{want} not said:\n{}",
            stderr(&o)
        );
    });
}

#[test]
fn git_works_inside_when_the_user_s_configuration_includes_other_files() {
    for_each_user(|w| {
        // A very common layout: identity in an included file, a conditional include, and
        // the global file itself a dotfile manager's link.
        std::fs::create_dir_all(w.home.join("dotfiles")).unwrap();
        std::fs::write(
            w.home.join(".gitconfig.local"),
            "[user]\n\temail = local@e\n",
        )
        .unwrap();
        std::fs::write(w.home.join("work.inc"), "[user]\n\tname = Worker\n").unwrap();
        std::fs::write(
            w.home.join("dotfiles/gitconfig"),
            format!(
                "[include]\n\tpath = ~/.gitconfig.local\n[includeIf \"gitdir:{}/\"]\n\tpath = {}\n",
                w.project.display(),
                w.home.join("work.inc").display()
            ),
        )
        .unwrap();
        std::os::unix::fs::symlink("dotfiles/gitconfig", w.home.join(".gitconfig")).unwrap();
        w.chown_all();
        // No repository yet: git init and its configuration.
        let o = sandy_sh(
            w,
            &[],
            "git init -q -b main . && git config user.email && git config user.name && git status --short",
            &[],
        );
        assert_code(&o, 0, "git in a project without a repository at launch");
        assert_eq!(stdout(&o), "local@e\nWorker\n", "{}", stderr(&o));
        // A repository at launch.
        let o = sandy_sh(w, &[], "git status --short && git config user.email", &[]);
        assert_code(&o, 0, "git in a repository");
        assert!(stdout(&o).contains("local@e"), "{}", stderr(&o));
    });
}

#[test]
fn a_hooks_link_made_inside_is_named_without_listing_what_it_points_at() {
    for_each_user(|w| {
        std::fs::create_dir_all(w.home.join("secret")).unwrap();
        std::fs::write(w.home.join("secret/id_private"), "k").unwrap();
        w.chown_all();
        let o = sandy_sh(
            w,
            &[],
            &format!(
                "set -e; mkdir n; git -C n init -q; rm -rf n/.git/hooks; ln -s {} n/.git/hooks",
                w.home.join("secret").display()
            ),
            &[],
        );
        assert_code(&o, 0, "plant a hooks link");
        let err = stderr(&o);
        assert!(err.contains("is a symbolic link to"), "{err}");
        assert!(
            !err.contains("id_private"),
            "a name outside the sandbox was shown:\n{err}"
        );
    });
}

#[test]
fn a_repository_created_inside_is_named_with_its_code_running_settings() {
    for_each_user(|w| {
        std::fs::write(w.project.join("README.md"), "x\n").unwrap();
        w.chown_all();
        // Control: a run that creates nothing warns about nothing.
        let o = sandy_sh(w, &[], "echo hi > hi.txt", &[]);
        assert_code(&o, 0, "control");
        assert_eq!(stderr(&o), "");

        let o = sandy_sh(
            w,
            &[],
            "set -e
             mkdir -p lib/planted && cd lib/planted && git init -q
             git config core.fsmonitor 'touch /nowhere'
             git config alias.st '!sh -c true'
             git config alias.co checkout
             git config filter.x.smudge 'sh -c cat'
             git config diff.y.textconv 'sh -c cat'
             git config credential.helper '!sh -c true'",
            &[],
        );
        assert_code(&o, 0, "plant");
        let err = stderr(&o);
        for key in [
            "core.fsmonitor",
            "alias.st",
            "filter.x.smudge",
            "diff.y.textconv",
            "credential.helper",
        ] {
            assert!(
                err.contains(&format!("sets {key} =")),
                "{key} not named:\n{err}"
            );
        }
        assert!(
            !err.contains("alias.co"),
            "a plain alias runs nothing:\n{err}"
        );
    });
}

#[test]
fn a_created_include_target_is_reported_and_sandy_restore_puts_it_back() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        // An include that does not exist at launch, outside every git directory: Sandy
        // creates nothing there, so a run can create it; it must be reported, and
        // `sandy restore` must remove it.
        append(
            &w.project.join(".git/config"),
            "[include]\n\tpath = ../absent.inc\n",
        );
        w.chown_all();
        let marker = w.root.join("pwned-absent");
        let target = w.project.join("absent.inc");
        let o = sandy_sh(w, &[], &plant_file(&target, &fsmonitor(&marker)), &[]);
        assert_code(&o, 0, "plant");
        let err = stderr(&o);
        let canonical = std::fs::canonicalize(&w.project)
            .unwrap()
            .join("absent.inc");
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{} did not exist at launch", canonical.display())))
            .unwrap_or_else(|| panic!("not reported:\n{err}"));
        let run = line.rsplit("sandy restore ").next().unwrap().trim();
        let listed = run_timeout(w.sandy(["restore"]), 30);
        assert_code(&listed, 0, "sandy restore (list)");
        assert!(stdout(&listed).contains(run), "{}", stdout(&listed));
        // A readable name: when (UTC) and the project folder.
        let project = w
            .project
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            run.len() > 16
                && run[..8].bytes().all(|b| b.is_ascii_digit())
                && run.ends_with(&format!("-{project}")),
            "{run}"
        );
        let restored = run_timeout(w.sandy(["restore", run]), 30);
        assert_code(&restored, 0, "sandy restore RUN");
        assert!(!target.exists(), "{}", stdout(&restored));
        let _ = git(w, &w.project, &["status", "--short"]);
        assert!(!marker.exists());
        // Restored, the run is no longer pending.
        let listed = run_timeout(w.sandy(["restore"]), 30);
        assert!(!stdout(&listed).contains(run), "{}", stdout(&listed));
    });
}

// ---------------------------------------------------------------------------------------
// Git keeps working inside
// ---------------------------------------------------------------------------------------

#[test]
fn git_work_inside_keeps_working_with_submodules_and_worktrees() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let src = upstream(w, "subsrc");
        git_ok(
            w,
            &w.project,
            &["submodule", "add", "-q", src.to_str().unwrap(), "libs/sub"],
        );
        git_ok(w, &w.project, &["commit", "-q", "-m", "sub"]);
        let remote = w.project.join("remote.git");
        git_ok(w, &w.project, &["clone", "-q", "--bare", ".", "remote.git"]);
        git_ok(
            w,
            &w.project,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        append(&w.project.join(".git/info/exclude"), "remote.git\n");
        w.chown_all();
        let o = sandy_sh(
            w,
            &[],
            "set -e
             g='git -c user.name=t -c user.email=t@e'
             echo two > two.txt && $g add two.txt && $g commit -q -m second
             $g checkout -q -b feature
             echo dirty >> README.md && $g stash -q && $g stash pop -q && $g stash -q
             $g fetch -q origin
             $g worktree add -q wt-inside
             $g worktree list >/dev/null
             $g gc -q
             cd libs/sub && $g status --short && $g log --oneline -1 >/dev/null
             echo done",
            &[],
        );
        assert_code(&o, 0, "git inside");
        assert!(stdout(&o).contains("done"));
        assert_eq!(
            git_ok(w, &w.project, &["log", "--format=%s", "-1", "feature"]).trim(),
            "second"
        );
        assert!(git_ok(w, &w.project, &["stash", "list"]).contains("feature"));
    });
}

// ---------------------------------------------------------------------------------------
// Failing closed
// ---------------------------------------------------------------------------------------

#[test]
fn a_repository_without_a_usable_git_is_refused_with_one_line() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        // No git on PATH at all.
        let empty = w.root.join("emptybin");
        std::fs::create_dir_all(&empty).unwrap();
        // A `git` that answers nonsense.
        let liar = w.root.join("liarbin");
        std::fs::create_dir_all(&liar).unwrap();
        std::fs::write(liar.join("git"), "#!/bin/sh\necho hello\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(liar.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
        w.chown_all();
        for (bin, want) in [(&empty, "cannot run git"), (&liar, "git gave an answer")] {
            let mut cmd = w.sandy(["run", "--", "/bin/true"]);
            cmd.env("PATH", bin);
            let o = run_timeout(cmd, 60);
            assert_code(&o, 125, "refused");
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with("sandy: ") && err.contains(want), "{err}");
        }
        // Control: without a repository, no git is needed.
        std::fs::remove_dir_all(w.project.join(".git")).unwrap();
        let mut cmd = w.sandy(["run", "--", "/bin/true"]);
        cmd.env("PATH", &empty);
        let o = run_timeout(cmd, 60);
        assert_code(&o, 0, "no repository, no git needed");
    });
}

#[test]
fn an_incomplete_git_directory_a_run_could_complete_is_protected_by_name() {
    for_each_user(|w| {
        // `.git` points at a directory git does not accept yet (no HEAD): a run that
        // completes it must not be able to give it a config of its choosing.
        let real = w.root.join("donor");
        init_repo(w, &real);
        let bare = w.project.join(".bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(
            bare.join("config"),
            "[core]\n\trepositoryformatversion = 0\n",
        )
        .unwrap();
        std::fs::write(w.project.join(".git"), "gitdir: ./.bare\n").unwrap();
        w.chown_all();
        let marker = w.root.join("pwned-incomplete");
        let script = format!(
            "cp -r '{d}/.git/objects' '{d}/.git/refs' '{d}/.git/HEAD' .bare/ && {}",
            plant_file(&bare.join("config"), &fsmonitor(&marker)),
            d = real.display()
        );
        let o = sandy_sh(w, &["--read", real.to_str().unwrap()], &script, &[]);
        judge_config(w, &o, &w.project, &bare.join("config"), &marker, &[]);
    });
}

#[test]
fn ctrl_c_ends_sandy_promptly_with_a_fifo_and_a_huge_file_in_place() {
    use std::os::unix::process::CommandExt;
    for_each_user(|w| {
        init_repo(w, &w.project);
        // As a terminal's Ctrl-C does: SIGINT to the whole foreground process group. A
        // foreground job's SIGINT is at its default, whoever runs the suite (a test run
        // started in the background ignores it, and Sandy leaves the command's SIGINT as
        // the caller left it, as a shell does).
        let mut child = w
            .host("/usr/bin/env")
            .arg("--default-signal=INT")
            .arg(sandy_bin())
            .args([
                "run",
                "--",
                "/bin/sh",
                "-c",
                "rm -f .git/index && mkfifo .git/index
                 mkdir n && git -C n init -q && truncate -s 8G n/.git/config
                 touch ready && exec sleep 60",
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ready = w.project.join("ready");
        assert!(wait_for(20, || ready.exists()));
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = wait_timeout(&mut child, 15, "sandy after Ctrl-C");
        assert_eq!(status.code(), Some(130), "the target's SIGINT status");
    });
}

#[test]
fn an_absent_hooks_path_directory_created_inside_is_named_and_restore_removes_it() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        git_ok(w, &w.project, &["config", "core.hooksPath", ".hooks"]);
        let marker = w.root.join("pwned-absent-hooks");
        let hooks = w.project.join(".hooks");
        let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), &[]);
        assert_code(&o, 0, "plant");
        let err = stderr(&o);
        let project = std::fs::canonicalize(&w.project).unwrap();
        for created in [".hooks", ".hooks/pre-commit"] {
            let want = format!(
                "{} did not exist at launch",
                project.join(created).display()
            );
            assert!(err.contains(&want), "{want} not reported:\n{err}");
        }
        let run = restore_run(&err);
        let restored = run_timeout(w.sandy(["restore", &run]), 30);
        assert_code(&restored, 0, "sandy restore RUN");
        assert!(!hooks.exists(), "{}", stdout(&restored));
        // The hook and then its directory, empty, are removed: nothing is left behind.
        assert!(
            !w.project.join(".hooks.sandy-removed").exists(),
            "{}",
            stdout(&restored)
        );
        let _ = git(
            w,
            &w.project,
            &["commit", "-q", "--allow-empty", "-m", "after"],
        );
        assert!(!marker.exists(), "the planted hook ran after restore");
    });
}

// ---------------------------------------------------------------------------------------
// Issue 38: git's answers remembered between launches
// ---------------------------------------------------------------------------------------

/// A settled repository is described once and its answer remembered (in Sandy's state);
/// the next launch uses it and still protects the repository's configuration and hooks.
/// An include added afterwards to the global configuration (a changed input) makes the
/// memo unusable: git is asked again, and the included file is protected at once.
#[test]
fn a_remembered_answer_keeps_protecting_and_a_changed_configuration_is_asked_again() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        w.chown_all();
        // Every input must be older than the memo's margin to be remembered.
        std::thread::sleep(Duration::from_millis(2600));
        let o = sandy_sh(w, &[], "true", &[]);
        assert_code(&o, 0, "first launch");
        let memos = || {
            std::fs::read_dir(w.home.join(".local/state/sandy/git"))
                .map(|d| d.count())
                .unwrap_or(0)
        };
        assert_eq!(memos(), 1, "git's answer was not remembered");

        // Launched with the memo: the configuration and the hooks stay protected.
        let marker = w.root.join("pwned-memo-config");
        let config = w.project.join(".git/config");
        let o = sandy_sh(w, &[], &plant_file(&config, &fsmonitor(&marker)), &[]);
        judge_config(w, &o, &w.project, &config, &marker, &[]);
        // The control appended to the config on the host: put it back as it was.
        git_ok(w, &w.project, &["config", "--unset", "core.fsmonitor"]);
        let marker = w.root.join("pwned-memo-hook");
        let hooks = w.project.join(".git/hooks");
        let o = sandy_sh(w, &[], &plant_hook(&hooks, &marker), &[]);
        judge_hook(w, &o, &w.project, &hooks, &marker, &[]);

        // An include added to the global configuration: asked again, protected at once.
        append(
            &w.home.join(".gitconfig"),
            "[include]\n\tpath = ~/project/late.inc\n",
        );
        append(&w.project.join("late.inc"), "[user]\n\tname = late\n");
        w.chown_all();
        let marker = w.root.join("pwned-memo-late");
        let late = w.project.join("late.inc");
        let o = sandy_sh(w, &[], &plant_file(&late, &fsmonitor(&marker)), &[]);
        judge_config(w, &o, &w.project, &late, &marker, &[]);
    });
}

// ---------------------------------------------------------------------------------------
// Issue 41, item 12: `sandy restore` is clear
// ---------------------------------------------------------------------------------------

/// A run makes a new repository with an fsmonitor below the project: the line naming it
/// says how to restore, `sandy restore` lists the run under a readable name and takes the
/// repository out of git's way (git there no longer runs its fsmonitor), the run is no
/// longer listed, and a directory the run made and Sandy emptied is not left behind.
#[test]
fn a_repository_the_run_created_is_taken_away_by_restore() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let marker = w.root.join("pwned-new-repo");
        let nested = w.project.join("sub/deep");
        let script = format!(
            "mkdir -p sub/deep && git -C sub/deep init -q && \
             git -C sub/deep config core.fsmonitor 'touch {}; false'",
            marker.display()
        );
        let o = sandy_sh(w, &[], &script, &[]);
        assert_code(&o, 0, "make a repository");
        let err = stderr(&o);
        let dotgit = std::fs::canonicalize(&nested).unwrap().join(".git");
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{} did not exist at launch", dotgit.display())))
            .unwrap_or_else(|| panic!("not named:\n{err}"));
        assert!(line.contains("sandy restore "), "no restore hint: {line}");
        let run = restore_run(line);
        // Listed by the run's readable name, one path a line under it.
        let listed = run_timeout(w.sandy(["restore"]), 30);
        assert_code(&listed, 0, "sandy restore (list)");
        let out = stdout(&listed);
        assert!(out.contains(&format!("{run}:\n")), "{out}");
        assert!(
            out.contains("sub/deep/.git: did not exist before the run"),
            "{out}"
        );
        assert!(!out.contains("\\t"), "an escaped tab: {out}");
        // Control: git there runs the planted fsmonitor before the restore.
        let _ = git(w, &nested, &["status", "--short"]);
        assert!(
            marker.exists(),
            "control: the planted fsmonitor did not run"
        );
        std::fs::remove_file(&marker).unwrap();
        let restored = run_timeout(w.sandy(["restore", &run]), 30);
        assert_code(&restored, 0, "sandy restore RUN");
        assert!(!nested.join(".git").exists(), "{}", stdout(&restored));
        let _ = git(w, &nested, &["status", "--short"]);
        assert!(
            !marker.exists(),
            "the new repository's fsmonitor ran after restore"
        );
        let listed = run_timeout(w.sandy(["restore"]), 30);
        assert!(!stdout(&listed).contains(&run), "{}", stdout(&listed));
        // Nothing of the run's copies is left in Sandy's state, nor an empty directory.
        assert!(!w.home.join(".local/state/sandy/restore").exists());
        let state = w.home.join(".local/state/sandy");
        assert!(
            !state.exists() || std::fs::read_dir(&state).unwrap().next().is_some(),
            "an empty state directory was left"
        );
        // A second restore of it says it is not kept, in one line.
        let again = run_timeout(w.sandy(["restore", &run]), 30);
        assert_code(&again, 125, "restore of a restored run");
        assert_eq!(stderr(&again).lines().count(), 1, "{}", stderr(&again));
    });
}

/// A run id of the form older builds wrote (`EPOCH-PID`) is still listed and restored.
#[test]
fn restore_accepts_the_run_ids_of_older_builds() {
    for_each_user(|w| {
        let planted = w.write("project/planted.inc", "[core]\n\tfsmonitor = x\n");
        let dir = w.home.join(".local/state/sandy/restore/1764900000-4242");
        std::fs::create_dir_all(&dir).unwrap();
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let at = hex(planted.to_str().unwrap().as_bytes());
        std::fs::write(
            dir.join("record.json"),
            format!(
                "{{\"version\":2,\"entries\":[{{\"path\":\"{at}\",\"at\":\"{at}\",\
                 \"was\":{{\"kind\":\"absent\"}}}}]}}"
            ),
        )
        .unwrap();
        w.chown_all();
        let listed = run_timeout(w.sandy(["restore"]), 30);
        assert!(
            stdout(&listed).contains("1764900000-4242:"),
            "{}",
            stdout(&listed)
        );
        let restored = run_timeout(w.sandy(["restore", "1764900000-4242"]), 30);
        assert_code(&restored, 0, "restore an old id");
        assert!(!planted.exists());
    });
}
