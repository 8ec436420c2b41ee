//! The mount layer through the real binary, judged from the host side: the project's git
//! hooks and configuration stay as they were whatever the target does (and git itself
//! keeps working), worktree pointers and `core.hooksPath` are read-only, a repository
//! created inside is reported, secrets under a `--read` of HOME are masked, `/tmp`,
//! `/run`, the runtime directory and `/dev/shm` are private (host files and sockets there
//! are out of sight), a project under `/tmp` is carried through, metadata outside the
//! writable grants cannot change, and none of it can be unmounted.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::collections::BTreeMap;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

const GIT: &str = "/usr/bin/git";

/// The value every canary secret carries; it must never reach the target's output.
const CANARY: &str = "CANARY-mounts-91d4-do-not-leak";

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("sandy-e2e-{tag}-{}-{nanos}", std::process::id())
}

/// `sandy run [FLAGS...] -- /bin/sh -c SCRIPT` with extra environment variables.
fn sh_env(w: &World, flags: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    let mut args: Vec<&str> = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    let mut cmd = w.sandy(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Git on the host, as the test user, in `dir`, with a fixed identity.
fn git(w: &World, dir: &Path, args: &[&str]) -> Output {
    w.host(GIT)
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@e"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Git on the host that must succeed; returns its stdout.
#[track_caller]
fn git_ok(w: &World, dir: &Path, args: &[&str]) -> String {
    let o = git(w, dir, args);
    assert_code(&o, 0, &format!("host git {args:?} in {}", dir.display()));
    stdout(&o)
}

/// `git init` (branch main) and one commit of README.md, on the host.
fn init_repo(w: &World, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let readme = dir.join("README.md");
    std::fs::write(&readme, "# readme\n").unwrap();
    w.chown_all();
    std::os::unix::fs::chown(&readme, Some(w.user.uid), Some(w.user.gid)).unwrap();
    git_ok(w, dir, &["init", "-q", "-b", "main"]);
    git_ok(w, dir, &["add", "README.md"]);
    git_ok(w, dir, &["commit", "-q", "-m", "first"]);
}

/// Everything under `dir` (not following symlinks): relative path to a description of
/// the entry (file bytes and mode, symlink target, or directory mode).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, p: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(base).unwrap().to_path_buf();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("link -> {}", target.display()));
            } else if meta.is_dir() {
                out.insert(rel, format!("dir {mode:o}"));
                walk(base, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(rel, format!("file {mode:o} {bytes:?}"));
            }
        }
    }
    let mut out = BTreeMap::new();
    let meta = std::fs::symlink_metadata(dir).unwrap();
    out.insert(
        PathBuf::from("."),
        format!("dir {:o}", meta.permissions().mode() & 0o7777),
    );
    walk(dir, dir, &mut out);
    out
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Stderr lines of Sandy's post-run warnings.
fn warnings(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("sandy: warning: "))
        .map(str::to_owned)
        .collect()
}

/// A host directory under `base` (e.g. `/tmp`), owned by the test user with `mode`,
/// removed on drop.
fn host_dir(w: &World, base: &str, prefix: &str, mode: u32) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(w.user.uid), Some(w.user.gid)).unwrap();
    dir
}

/// A host file removed on drop.
struct HostFile(PathBuf);

impl HostFile {
    fn new(w: &World, path: PathBuf, contents: &str) -> HostFile {
        std::fs::write(&path, contents).unwrap();
        std::os::unix::fs::chown(&path, Some(w.user.uid), Some(w.user.gid)).unwrap();
        HostFile(path)
    }
}

impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------
// Git hooks and configuration
// ---------------------------------------------------------------------------------------

/// Attacks on `.git/hooks` and `.git/config` that leave the rest of `.git` alone. Each
/// prints `name=status`.
const GIT_ATTACKS: &str = r#"
echo evil > .git/hooks/pre-commit; echo "write hook=$?"
echo evil >> .git/hooks/pre-push.sample; echo "append sample=$?"
chmod +x .git/hooks/pre-push.sample; echo "chmod sample=$?"
rm -f .git/hooks/pre-push.sample; echo "rm sample=$?"
ln -s /bin/true .git/hooks/post-checkout; echo "symlink hook=$?"
printf '[core]\n\thooksPath = /tmp\n' >> .git/config; echo "append config=$?"
git config core.fsmonitor 'echo planted'; echo "git config=$?"
mv .git .git.old; echo "mv git=$?"
mv .git/hooks .git/h2; echo "mv hooks=$?"
rm -rf .git/hooks; echo "rm hooks=$?"
mv .git/config .git/config.old; echo "mv config=$?"
rm -f .git/config; echo "rm config=$?"
printf '[core]\n\thooksPath = evil-hooks\n' > new-config
/usr/bin/python3 -c 'import os; os.rename("new-config", ".git/config")'; echo "rename over config=$?"
mkdir -p evil-hooks && echo evil > evil-hooks/pre-commit
/usr/bin/python3 -c 'import os; os.rename("evil-hooks", ".git/hooks")'; echo "rename over hooks=$?"
echo described > .git/description; echo "description=$?"
echo written > project-file.txt; echo "project=$?"
"#;

const ATTACK_KEYS: &[&str] = &[
    "write hook",
    "append sample",
    "chmod sample",
    "rm sample",
    "symlink hook",
    "append config",
    "git config",
    "mv git",
    "mv hooks",
    "rm hooks",
    "mv config",
    "rm config",
    "rename over config",
    "rename over hooks",
];

#[test]
fn git_hooks_and_config_cannot_be_changed_or_moved_away() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let git_dir = w.project.join(".git");
        let hooks_before = snapshot(&git_dir.join("hooks"));
        let config_before = bytes(&git_dir.join("config"));

        let o = w.sh(&[], GIT_ATTACKS);
        assert_code(&o, 0, "git attacks");
        let out = stdout(&o);
        for key in ATTACK_KEYS {
            assert_failed(&out, key);
        }
        // The positive neighbours: the rest of .git and the project stay writable.
        assert_field(&out, "description", "0");
        assert_field(&out, "project", "0");
        assert_eq!(bytes(&git_dir.join("description")), b"described\n");
        assert_eq!(bytes(&w.project.join("project-file.txt")), b"written\n");

        assert_eq!(
            snapshot(&git_dir.join("hooks")),
            hooks_before,
            "hooks changed"
        );
        assert_eq!(
            bytes(&git_dir.join("config")),
            config_before,
            "config changed"
        );
        assert!(!w.project.join(".git.old").exists());
        assert!(!git_dir.join("h2").exists());
        assert!(!git_dir.join("config.old").exists());
        let fsmonitor = git(w, &w.project, &["config", "--get", "core.fsmonitor"]);
        assert_eq!(stdout(&fsmonitor), "", "core.fsmonitor is set on the host");
        git_ok(w, &w.project, &["status", "--short"]);
        assert!(warnings(&o).is_empty(), "{}", stderr(&o));

        // Destroying the whole repository and building a new one in its place fails at
        // the protected paths.
        let o = w.sh(
            &[],
            "rm -rf .git; echo \"rm git=$?\"
             mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit; echo \"recreate=$?\"
             printf '[core]\\n\\tfsmonitor = evil\\n' > .git/config; echo \"new config=$?\"",
        );
        assert_code(&o, 0, "rm -rf .git");
        let out = stdout(&o);
        for key in ["rm git", "recreate", "new config"] {
            assert_failed(&out, key);
        }
        assert_eq!(
            snapshot(&git_dir.join("hooks")),
            hooks_before,
            "hooks changed"
        );
        assert_eq!(
            bytes(&git_dir.join("config")),
            config_before,
            "config changed"
        );
        assert!(!git_dir.join("hooks/pre-commit").exists());
    });
}

#[test]
fn git_works_inside_a_protected_repository() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        // A remote outside the project, granted read-only, with a commit of its own.
        let upstream = w.root.join("upstream");
        std::fs::create_dir_all(&upstream).unwrap();
        w.chown_all();
        git_ok(w, &upstream, &["init", "-q", "-b", "main"]);
        git_ok(
            w,
            &upstream,
            &["commit", "-q", "--allow-empty", "-m", "upstream"],
        );
        let up = upstream.display().to_string();
        git_ok(w, &w.project, &["remote", "add", "origin", &up]);
        let git_dir = w.project.join(".git");
        let hooks_before = snapshot(&git_dir.join("hooks"));
        let config_before = bytes(&git_dir.join("config"));

        let o = w.sh(
            &["--read", &up],
            "set -e
             g='git -c user.name=t -c user.email=t@e'
             $g status --short
             echo two > two.txt
             $g add two.txt
             $g commit -q -m second
             $g checkout -q -b feature
             echo three > three.txt
             $g add three.txt
             $g commit -q -m third
             echo dirty >> README.md
             $g stash -q
             $g fetch -q origin
             $g gc -q
             echo done",
        );
        assert_code(&o, 0, "git inside");
        assert_eq!(stdout(&o), "done\n", "{}", stderr(&o));

        let log = |rev: &str| git_ok(w, &w.project, &["log", "--format=%s", rev]);
        assert_eq!(log("main"), "second\nfirst\n");
        assert_eq!(log("feature"), "third\nsecond\nfirst\n");
        assert_eq!(log("origin/main"), "upstream\n");
        assert_eq!(
            git_ok(w, &w.project, &["rev-parse", "--abbrev-ref", "HEAD"]),
            "feature\n"
        );
        let stashes = git_ok(w, &w.project, &["stash", "list"]);
        assert_eq!(stashes.lines().count(), 1, "{stashes}");
        assert_eq!(git_ok(w, &w.project, &["status", "--porcelain"]), "");
        // gc packed the objects.
        let counts = git_ok(w, &w.project, &["count-objects", "-v"]);
        assert!(
            counts.lines().any(|l| l == "count: 0") && !counts.contains("packs: 0"),
            "{counts}"
        );
        git_ok(w, &w.project, &["fsck", "--no-progress"]);
        assert_eq!(
            snapshot(&git_dir.join("hooks")),
            hooks_before,
            "hooks changed"
        );
        assert_eq!(
            bytes(&git_dir.join("config")),
            config_before,
            "config changed"
        );
        assert!(warnings(&o).is_empty(), "{}", stderr(&o));
    });
}

/// A main repository at `HOME/main-repo` with a worktree at the project (branch `wt`).
fn worktree_world(w: &World) -> PathBuf {
    let main = w.home.join("main-repo");
    init_repo(w, &main);
    git_ok(
        w,
        &main,
        &["worktree", "add", "-q", "-b", "wt", "../project"],
    );
    main
}

#[test]
fn a_worktree_pointer_and_the_main_repository_hooks_are_read_only() {
    for_each_user(|w| {
        let main = worktree_world(w);
        let main_git = main.join(".git");
        let pointer_before = bytes(&w.project.join(".git"));
        assert!(pointer_before.starts_with(b"gitdir: "));
        let hooks_before = snapshot(&main_git.join("hooks"));
        let config_before = bytes(&main_git.join("config"));
        let m = main_git.display().to_string();
        let evil_git = w.project.join("evil-git").display().to_string();

        let o = w.sh(
            &["--read-write", &main.display().to_string()],
            &format!(
                "echo 'gitdir: {evil_git}' > .git; echo \"write pointer=$?\"
                 echo 'gitdir: {evil_git}' > new-pointer
                 /usr/bin/python3 -c 'import os; os.rename(\"new-pointer\", \".git\")'; \
                 echo \"rename over pointer=$?\"
                 rm -f .git; echo \"rm pointer=$?\"
                 mv .git dot-git; echo \"mv pointer=$?\"
                 echo evil > '{m}/hooks/pre-commit'; echo \"main hook=$?\"
                 rm -rf '{m}/hooks'; echo \"rm main hooks=$?\"
                 mv '{m}/hooks' '{m}/h2'; echo \"mv main hooks=$?\"
                 echo '[core]' >> '{m}/config'; echo \"main config=$?\"
                 mv '{m}' '{m}.old'; echo \"mv main git=$?\"
                 echo b > b.txt && git add b.txt &&
                 git -c user.name=t -c user.email=t@e commit -q -m 'in the worktree'
                 echo \"commit=$?\""
            ),
        );
        assert_code(&o, 0, "worktree attacks");
        let out = stdout(&o);
        for key in [
            "write pointer",
            "rename over pointer",
            "rm pointer",
            "mv pointer",
            "main hook",
            "rm main hooks",
            "mv main hooks",
            "main config",
            "mv main git",
        ] {
            assert_failed(&out, key);
        }
        assert_field(&out, "commit", "0");

        assert_eq!(bytes(&w.project.join(".git")), pointer_before);
        assert!(!w.project.join("dot-git").exists());
        assert_eq!(
            snapshot(&main_git.join("hooks")),
            hooks_before,
            "hooks changed"
        );
        assert_eq!(
            bytes(&main_git.join("config")),
            config_before,
            "config changed"
        );
        assert!(main_git.is_dir());
        assert_eq!(
            git_ok(w, &main, &["log", "--format=%s", "wt"]),
            "in the worktree\nfirst\n"
        );
    });
}

#[test]
fn a_worktree_commondir_pointer_cannot_be_redirected() {
    for_each_user(|w| {
        let main = worktree_world(w);
        let gitdir = main.join(".git/worktrees/project");
        let commondir = gitdir.join("commondir");
        let commondir_before = bytes(&commondir);
        let pwned = w.root.join("pwned");
        let c = commondir.display().to_string();
        let m = main.join(".git").display().to_string();
        // A copy of the common directory with a config that runs a command on the host's
        // next `git status`, and the worktree's commondir pointer redirected to it.
        let o = w.sh(
            &["--read-write", &main.display().to_string()],
            &format!(
                "mkdir evil && cp -r '{m}/objects' '{m}/refs' '{m}/HEAD' evil/
                 printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {p}; false\"\\n' > evil/config
                 echo \"$PWD/evil\" > '{c}'; echo \"redirect=$?\"
                 echo \"$PWD/evil\" > new-commondir
                 /usr/bin/python3 -c 'import os, sys; os.rename(\"new-commondir\", sys.argv[1])' '{c}'
                 echo \"rename=$?\"",
                p = pwned.display(),
            ),
        );
        assert_code(&o, 0, "commondir redirect");
        let out = stdout(&o);
        // Judged from the host: the pointer is unchanged and host git runs nothing planted.
        let _ = git(w, &w.project, &["status", "--short"]);
        assert!(
            !pwned.exists(),
            "the host's `git status` ran a command planted through {c}:\n{out}"
        );
        assert_eq!(
            bytes(&commondir),
            commondir_before,
            "the worktree's commondir pointer was rewritten:\n{out}"
        );
        assert_failed(&out, "redirect");
        assert_failed(&out, "rename");
    });
}

#[test]
fn a_hooks_path_inside_the_project_is_read_only() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let hook = w.write(
            "home/project/hooks-dir/pre-commit",
            "#!/bin/sh\necho hook-ran >> hook.log\n",
        );
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        git_ok(w, &w.project, &["config", "core.hooksPath", "hooks-dir"]);
        let hooks_dir = w.project.join("hooks-dir");
        let before = snapshot(&hooks_dir);

        let o = w.sh(
            &[],
            "echo evil > hooks-dir/pre-commit; echo \"overwrite=$?\"
             echo evil > hooks-dir/post-checkout; echo \"create=$?\"
             chmod -x hooks-dir/pre-commit; echo \"chmod=$?\"
             rm -f hooks-dir/pre-commit; echo \"rm=$?\"
             mv hooks-dir hooks-moved; echo \"mv=$?\"
             rm -rf hooks-dir; echo \"rm -rf=$?\"
             echo other > other.txt; echo \"project=$?\"
             git add other.txt &&
             git -c user.name=t -c user.email=t@e commit -q -m 'with the hook'
             echo \"commit=$?\"",
        );
        assert_code(&o, 0, "hooksPath attacks");
        let out = stdout(&o);
        for key in ["overwrite", "create", "chmod", "rm", "mv", "rm -rf"] {
            assert_failed(&out, key);
        }
        assert_field(&out, "project", "0");
        assert_field(&out, "commit", "0");
        assert_eq!(snapshot(&hooks_dir), before, "the hooks directory changed");
        assert!(!w.project.join("hooks-moved").exists());
        // The unchanged hook ran for the commit inside.
        assert_eq!(bytes(&w.project.join("hook.log")), b"hook-ran\n");
        assert_eq!(
            git_ok(w, &w.project, &["log", "-1", "--format=%s"]),
            "with the hook\n"
        );
    });
}

#[test]
fn git_init_inside_a_project_without_git_is_reported() {
    for_each_user(|w| {
        w.write("home/project/README.md", "# readme\n");
        let project = std::fs::canonicalize(&w.project).unwrap();

        // Control: a run that creates no repository warns about nothing.
        let o = w.sh(&[], "echo hi > hi.txt");
        assert_code(&o, 0, "no git");
        assert_eq!(stderr(&o), "");

        let o = w.sh(
            &[],
            "set -e
             git init -q
             git add README.md
             git -c user.name=t -c user.email=t@e commit -q -m 'made inside'",
        );
        assert_code(&o, 0, "git init inside");
        assert_eq!(
            git_ok(w, &w.project, &["log", "--format=%s"]),
            "made inside\n"
        );
        let warned = warnings(&o);
        let want = format!(
            "sandy: warning: {} did not exist at launch and was created inside the sandbox",
            project.join(".git").display()
        );
        assert!(
            warned.iter().any(|l| l.starts_with(&want)),
            "expected a line starting {want:?}, stderr:\n{}",
            stderr(&o)
        );
        assert_eq!(warned.len(), 1, "{}", stderr(&o));
    });
}

/// Judged on the host: runs `git status` in the project, as the user's next command
/// outside the sandbox would. If the command planted by the run `o` ran (it touches
/// `pwned`), Sandy must have warned, with a line naming `named` (any warning when
/// `None`).
#[track_caller]
fn assert_prevented_or_reported(
    w: &World,
    o: &Output,
    pwned: &Path,
    named: Option<&str>,
    what: &str,
) {
    let _ = git(w, &w.project, &["status", "--short"]);
    let ran = pwned.exists();
    let reported = warnings(o)
        .iter()
        .any(|l| named.is_none_or(|n| l.contains(n)));
    assert!(
        !ran || reported,
        "{what} runs code in the host's git, and Sandy did not warn:\nstdout: {}\n\
         stderr: {}",
        stdout(o),
        stderr(o)
    );
}

#[test]
fn a_planted_commondir_is_prevented_or_reported() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let pwned = w.root.join("pwned");
        // Git reads `$GIT_DIR/commondir` in any repository: pointed at a copy of the
        // repository with a config of the target's choosing, it replaces the protected
        // config and hooks.
        let o = w.sh(
            &[],
            &format!(
                "mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/
                 printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {}; false\"\\n' > evil/config
                 echo ../evil > .git/commondir; echo \"plant=$?\"",
                pwned.display()
            ),
        );
        assert_code(&o, 0, "plant commondir");
        assert_prevented_or_reported(
            w,
            &o,
            &pwned,
            Some("commondir"),
            "a .git/commondir created inside, redirecting to another config,",
        );
    });
}

#[test]
fn a_planted_worktree_config_is_prevented_or_reported() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        // With worktree configs enabled, `$GIT_DIR/config.worktree` is read after the
        // protected config; it did not exist at launch.
        git_ok(
            w,
            &w.project,
            &["config", "extensions.worktreeConfig", "true"],
        );
        let pwned = w.root.join("pwned");
        let o = w.sh(
            &[],
            &format!(
                "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > .git/config.worktree
                 echo \"plant=$?\"",
                pwned.display()
            ),
        );
        assert_code(&o, 0, "plant config.worktree");
        assert_prevented_or_reported(
            w,
            &o,
            &pwned,
            Some("config.worktree"),
            "a .git/config.worktree created inside",
        );
    });
}

#[test]
fn a_planted_submodule_repository_is_prevented_or_reported() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        let pwned = w.root.join("pwned");
        // A new repository inside the project, registered as a submodule: the host's
        // `git status` recurses into it and reads its (unprotected) config.
        let o = w.sh(
            &[],
            &format!(
                "set -e
                 g='git -c user.name=t -c user.email=t@e'
                 mkdir sub && cd sub
                 $g init -q && echo s > s && $g add s && $g commit -q -m s
                 git config core.fsmonitor 'touch {}; false'
                 cd ..
                 $g add sub 2>/dev/null
                 printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n' > .gitmodules
                 $g add .gitmodules && $g commit -q -m 'add sub'
                 echo planted",
                pwned.display()
            ),
        );
        assert_code(&o, 0, "plant a submodule");
        assert_prevented_or_reported(
            w,
            &o,
            &pwned,
            None,
            "a repository created inside the project and registered as a submodule",
        );
    });
}

// ---------------------------------------------------------------------------------------
// Masks
// ---------------------------------------------------------------------------------------

#[test]
fn a_read_grant_of_home_reads_ordinary_files_but_not_secrets() {
    for_each_user(|w| {
        w.write("home/notes.txt", "ordinary home file\n");
        w.write("home/.ssh/id_ed25519", CANARY);
        w.write("home/.ssh/config", CANARY);
        w.write("home/.aws/credentials", CANARY);
        w.write("home/.netrc", CANARY);
        w.write("home/.git-credentials", CANARY);
        let home_before = snapshot(&w.home);
        let h = w.home.display().to_string();
        let o = w.sh(
            &["--read", &h],
            &format!(
                "cat '{h}/notes.txt'; echo \"notes=$?\"
                 cat '{h}/.ssh/id_ed25519'; echo \"ssh key=$?\"
                 cat '{h}/.aws/credentials'; echo \"aws=$?\"
                 echo \"ssh listing=[$(ls -A '{h}/.ssh')]\"
                 echo \"aws listing=[$(ls -A '{h}/.aws')]\"
                 ls -A '{h}/.ssh' > /dev/null; echo \"ls ssh=$?\"
                 echo \"netrc=[$(cat '{h}/.netrc' 2>/dev/null)]\"
                 echo \"git credentials=[$(cat '{h}/.git-credentials' 2>/dev/null)]\"
                 /usr/bin/python3 -c 'import os, sys; print(\"python listing=\" + \
                     str(os.listdir(sys.argv[1])))' '{h}/.ssh'
                 touch '{h}/.ssh/new'; echo \"write ssh=$?\"
                 grep -r CANARY '{h}' 2>/dev/null; echo \"grep=$?\""
            ),
        );
        assert_code(&o, 0, "--read HOME");
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(!out.contains(CANARY), "a secret leaked:\n{out}");
        assert!(!err.contains(CANARY), "a secret leaked:\n{err}");
        assert!(out.starts_with("ordinary home file\nnotes=0\n"), "{out}");
        assert_failed(&out, "ssh key");
        assert_failed(&out, "aws");
        assert_field(&out, "ssh listing", "[]");
        assert_field(&out, "aws listing", "[]");
        assert_field(&out, "ls ssh", "0");
        assert_field(&out, "python listing", "[]");
        assert_field(&out, "netrc", "[]");
        assert_field(&out, "git credentials", "[]");
        assert_failed(&out, "write ssh");
        // grep exits 1 when it matched nothing.
        assert_failed(&out, "grep");
        assert_eq!(snapshot(&w.home), home_before, "HOME changed");
    });
}

// ---------------------------------------------------------------------------------------
// Private /tmp, /run, runtime directory and /dev/shm
// ---------------------------------------------------------------------------------------

/// Listens on every Unix socket path given; appends "conn PATH DATA" to the log for each
/// connection. Prints LISTENING once all are bound.
const UNIX_LISTENER: &str = r#"
import selectors, socket, sys
log, paths = sys.argv[1], sys.argv[2:]
sel = selectors.DefaultSelector()
for p in paths:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(p)
    s.listen(16)
    sel.register(s, selectors.EVENT_READ, p)
print("LISTENING", flush=True)
while True:
    for key, _ in sel.select():
        c, _ = key.fileobj.accept()
        c.settimeout(2)
        try:
            data = c.recv(100)
        except OSError:
            data = b"?"
        with open(log, "ab") as f:
            f.write(b"conn " + key.data.encode() + b" " + data + b"\n")
        c.close()
"#;

/// Connects to each path and sends a tag; prints "connect PATH=ok" or the errno name.
const UNIX_CLIENT: &str = r#"
import errno, socket, sys
tag, paths = sys.argv[1], sys.argv[2:]
for p in paths:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        s.sendall(tag.encode())
        r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
    print(f"connect {p}={r}", flush=True)
"#;

fn start_listener(w: &World, log: &Path, paths: &[&str]) -> Reaped {
    let listener = w.write("unix_listener.py", UNIX_LISTENER);
    let mut cmd = w.host(PYTHON);
    cmd.arg(&listener).arg(log).args(paths);
    let (child, line) = start_announcing_line(cmd, "the host listener");
    assert_eq!(line, "LISTENING", "the host listener did not start");
    child
}

#[test]
fn host_tmp_files_and_sockets_are_out_of_sight() {
    for_each_user(|w| {
        w.write("home/project/client.py", UNIX_CLIENT);
        let log = w.root.join("connections.log");
        // A file and a socket in the host's /tmp, an ssh-agent socket, a session bus in
        // the runtime directory.
        let tmp_dir = host_dir(w, "/tmp", "sandy-e2e-host-", 0o755);
        let tmp_file = tmp_dir.path().join("visible-to-the-host");
        std::fs::write(&tmp_file, CANARY).unwrap();
        let tmp_sock = tmp_dir.path().join("app.sock");
        let agent_dir = host_dir(w, "/tmp", "ssh-", 0o700);
        let agent_sock = agent_dir.path().join("agent.4242");
        let xdg = w.root.join("xdg");
        std::fs::create_dir(&xdg).unwrap();
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
        w.chown_all();
        let bus = xdg.join("bus");
        let lone_name = unique("lone");
        let lone = HostFile::new(w, Path::new("/tmp").join(&lone_name), CANARY);
        let paths: Vec<String> = [&tmp_sock, &agent_sock, &bus]
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let path_refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let _listener = start_listener(w, &log, &path_refs);

        let inside_name = unique("inside");
        let script = format!(
            "cat '{file}'; echo \"host file=$?\"
             cat '{lone}'; echo \"lone file=$?\"
             echo \"tmp listing=[$(ls -A /tmp)]\"
             echo \"SSH_AUTH_SOCK=${{SSH_AUTH_SOCK-unset}}\"
             echo \"DBUS_SESSION_BUS_ADDRESS=${{DBUS_SESSION_BUS_ADDRESS-unset}}\"
             echo \"XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR\"
             echo \"runtime listing=[$(ls -A \"$XDG_RUNTIME_DIR\")]\"
             echo \"runtime mode=$(stat -c %a \"$XDG_RUNTIME_DIR\")\"
             echo mine > \"$XDG_RUNTIME_DIR/mine\"; echo \"runtime write=$?\"
             echo inside > '/tmp/{inside_name}'; echo \"tmp write=$?\"
             /usr/bin/python3 client.py sandboxed {socks}",
            file = tmp_file.display(),
            lone = lone.0.display(),
            socks = path_refs.join(" "),
        );
        let xdg_s = xdg.display().to_string();
        let agent_s = agent_sock.display().to_string();
        let dbus = format!("unix:path={}", bus.display());
        let o = sh_env(
            w,
            &[],
            &script,
            &[
                ("XDG_RUNTIME_DIR", &xdg_s),
                ("SSH_AUTH_SOCK", &agent_s),
                ("DBUS_SESSION_BUS_ADDRESS", &dbus),
            ],
        );
        assert_code(&o, 0, "probe inside");
        let out = stdout(&o);
        assert!(!out.contains(CANARY), "{out}");
        assert!(!stderr(&o).contains(CANARY), "{}", stderr(&o));
        assert_failed(&out, "host file");
        assert_failed(&out, "lone file");
        assert_field(&out, "tmp listing", "[]");
        assert_field(&out, "SSH_AUTH_SOCK", "unset");
        assert_field(&out, "DBUS_SESSION_BUS_ADDRESS", "unset");
        assert_field(&out, "XDG_RUNTIME_DIR", &xdg_s);
        assert_field(&out, "runtime listing", "[]");
        assert_field(&out, "runtime mode", "700");
        assert_field(&out, "runtime write", "0");
        assert_field(&out, "tmp write", "0");
        for p in &path_refs {
            let key = format!("connect {p}");
            let got = field(&out, &key).unwrap_or_else(|| panic!("no {key}:\n{out}"));
            assert_ne!(got, "ok", "{key}: the target reached a host socket");
        }

        // Judged from the host: nothing written inside reached the host's /tmp or the
        // runtime directory, and the host's files are as they were.
        assert!(!Path::new("/tmp").join(&inside_name).exists());
        assert!(!xdg.join("mine").exists());
        assert_eq!(bytes(&tmp_file), CANARY.as_bytes());
        assert_eq!(bytes(&lone.0), CANARY.as_bytes());
        w.tidy_tmp();
        assert!(std::fs::read_dir(&w.tmp).unwrap().next().is_none());

        // Control: outside Sandy the same client reaches every listener, so the log would
        // show a connection from inside.
        let mut control = w.host(PYTHON);
        control
            .arg(w.project.join("client.py"))
            .arg("control")
            .args(&path_refs);
        let control = control.output().unwrap();
        for p in &path_refs {
            assert_field(&stdout(&control), &format!("connect {p}"), "ok");
        }
        assert!(
            wait_for(5, || std::fs::read_to_string(&log)
                .is_ok_and(|s| s.lines().count() >= path_refs.len())),
            "the listener never logged the control connections"
        );
        let seen = std::fs::read_to_string(&log).unwrap();
        for line in seen.lines() {
            assert!(
                line.ends_with(" control"),
                "a host listener saw a connection from inside: {seen}"
            );
        }
        assert_eq!(seen.lines().count(), path_refs.len(), "{seen}");
    });
}

#[test]
fn a_runtime_directory_under_run_is_replaced_by_a_private_one() {
    if !is_root() {
        skip("creating a runtime directory under /run/user needs root");
        return;
    }
    for_each_user(|w| {
        w.write("home/project/client.py", UNIX_CLIENT);
        let log = w.root.join("connections.log");
        let base = if Path::new("/run/user").is_dir() {
            "/run/user"
        } else {
            "/run"
        };
        let xdg = host_dir(w, base, "sandy-e2e-", 0o700);
        let bus = xdg.path().join("bus");
        let host_only = HostFile::new(w, xdg.path().join("host-only"), CANARY);
        let bus_s = bus.display().to_string();
        let _listener = start_listener(w, &log, &[&bus_s]);
        let xdg_s = xdg.path().display().to_string();
        let o = sh_env(
            w,
            &[],
            &format!(
                "echo \"runtime listing=[$(ls -A \"$XDG_RUNTIME_DIR\")]\"
                 echo \"runtime mode=$(stat -c %a \"$XDG_RUNTIME_DIR\")\"
                 cat '{}'; echo \"host file=$?\"
                 echo mine > \"$XDG_RUNTIME_DIR/mine\"; echo \"runtime write=$?\"
                 /usr/bin/python3 client.py sandboxed '{bus_s}'",
                host_only.0.display()
            ),
            &[("XDG_RUNTIME_DIR", &xdg_s)],
        );
        assert_code(&o, 0, "runtime directory");
        let out = stdout(&o);
        assert!(!out.contains(CANARY), "{out}");
        assert_field(&out, "runtime listing", "[]");
        assert_field(&out, "runtime mode", "700");
        assert_failed(&out, "host file");
        assert_field(&out, "runtime write", "0");
        let got = field(&out, &format!("connect {bus_s}"))
            .unwrap_or_else(|| panic!("no connect line:\n{out}"));
        assert_ne!(got, "ok", "the target reached the host's bus socket");
        assert!(!xdg.path().join("mine").exists());
        assert_eq!(bytes(&host_only.0), CANARY.as_bytes());
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            std::fs::read_to_string(&log).unwrap_or_default().is_empty(),
            "the host listener saw a connection from inside"
        );
    });
}

/// Checks, for each user, that `dir` inside the sandbox is an empty private directory
/// (mode 1777) hiding the host's, that a file can be written and chmod-ed there, and, judged
/// on the host, that nothing appeared there and the host's file is unchanged. `extra` runs
/// afterwards inside; its output is returned for further checks.
fn assert_private_writable_dir(dir: &str, extra: &str) -> Vec<String> {
    let mut outputs = Vec::new();
    for_each_user(|w| {
        let host_name = unique("host");
        let host_file = HostFile::new(w, Path::new(dir).join(&host_name), CANARY);
        let inside_name = unique("inside");
        let o = w.sh(
            &[],
            &format!(
                "echo \"listing=[$(ls -A {dir})]\"
                 echo \"mode=$(stat -c %a {dir})\"
                 cat '{dir}/{host_name}'; echo \"host file=$?\"
                 echo mine > '{dir}/{inside_name}' && chmod 600 '{dir}/{inside_name}' \
                   && cat '{dir}/{inside_name}'
                 echo \"write=$?\"
                 {extra}"
            ),
        );
        assert_code(&o, 0, dir);
        let out = stdout(&o);
        assert!(!out.contains(CANARY), "{out}");
        assert_field(&out, "listing", "[]");
        assert_field(&out, "mode", "1777");
        assert_failed(&out, "host file");
        assert!(out.contains("mine\nwrite=0\n"), "{out}");
        assert!(!Path::new(dir).join(&inside_name).exists());
        assert_eq!(bytes(&host_file.0), CANARY.as_bytes());
        outputs.push(out);
    });
    outputs
}

#[test]
fn var_tmp_is_private_empty_and_writable() {
    assert_private_writable_dir("/var/tmp", "");
}

#[test]
fn dev_shm_is_private_empty_and_writable() {
    let shared_memory = "/usr/bin/python3 -c '
from multiprocessing import shared_memory
m = shared_memory.SharedMemory(create=True, size=16)
m.buf[:2] = b\"ok\"
print(\"shared memory=\" + bytes(m.buf[:2]).decode())
m.close(); m.unlink()'";
    for out in assert_private_writable_dir("/dev/shm", shared_memory) {
        assert_field(&out, "shared memory", "ok");
    }
}

#[test]
fn a_project_under_tmp_is_carried_through() {
    for_each_user(|w| {
        let dir = host_dir(w, "/tmp", "sandy-e2e-project-", 0o755);
        let project = dir.path().to_path_buf();
        init_repo(w, &project);
        let config_before = bytes(&project.join(".git/config"));
        let sibling = HostFile::new(w, Path::new("/tmp").join(unique("sibling")), CANARY);
        let run = |script: &str| {
            w.sandy(["run", "--", "/bin/sh", "-c", script])
                .current_dir(&project)
                .output()
                .unwrap()
        };
        let o = run(&format!(
            "echo inside > made-inside.txt; echo \"write=$?\"
             cat README.md
             echo \"pwd=$PWD\"
             cat '{}'; echo \"sibling=$?\"
             echo evil >> .git/config; echo \"config=$?\"
             echo evil > .git/hooks/pre-commit; echo \"hook=$?\"
             git add made-inside.txt && \
             git -c user.name=t -c user.email=t@e commit -q -m 'from /tmp'
             echo \"commit=$?\"",
            sibling.0.display()
        ));
        assert_code(&o, 0, "project under /tmp");
        let out = stdout(&o);
        assert!(!out.contains(CANARY), "{out}");
        assert_field(&out, "write", "0");
        assert!(out.contains("# readme\n"), "{out}");
        assert_field(
            &out,
            "pwd",
            &std::fs::canonicalize(&project)
                .unwrap()
                .display()
                .to_string(),
        );
        assert_failed(&out, "sibling");
        assert_failed(&out, "config");
        assert_failed(&out, "hook");
        assert_field(&out, "commit", "0");
        assert_eq!(bytes(&project.join("made-inside.txt")), b"inside\n");
        assert_eq!(bytes(&project.join(".git/config")), config_before);
        assert!(!project.join(".git/hooks/pre-commit").exists());
        assert_eq!(
            git_ok(w, &project, &["log", "--format=%s"]),
            "from /tmp\nfirst\n"
        );
        w.tidy_tmp();
        assert!(std::fs::read_dir(&w.tmp).unwrap().next().is_none());
    });
}

// ---------------------------------------------------------------------------------------
// Metadata outside the writable grants
// ---------------------------------------------------------------------------------------

/// Tries chmod, utime, chown (to the owner it already has) and setxattr on each path;
/// prints "OP PATH=ok" or the errno name.
const METADATA_PROBE: &str = r#"
import errno, os, sys
def attempt(label, f):
    try:
        f()
        r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    print(f"{label}={r}", flush=True)
for p in sys.argv[1:]:
    st = os.stat(p)
    attempt(f"chmod {p}", lambda: os.chmod(p, 0o777))
    attempt(f"utime {p}", lambda: os.utime(p, (1000000000, 1000000000)))
    attempt(f"chown {p}", lambda: os.chown(p, st.st_uid, st.st_gid))
    attempt(f"setxattr {p}", lambda: os.setxattr(p, "user.sandy", b"x"))
"#;

#[test]
fn metadata_outside_the_writable_grants_cannot_change() {
    for_each_user(|w| {
        let probe = w.write("home/project/metadata.py", METADATA_PROBE);
        let doc = w.write("home/docs/doc.txt", "doc\n");
        let script = w.write("home/project/script.sh", "#!/bin/sh\necho script ran\n");
        let in_tmp = "/tmp/own-file";
        for p in [&doc, &script] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let mtime = |p: &Path| std::fs::metadata(p).unwrap().mtime();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let doc_mtime = mtime(&doc);
        let d = doc.display().to_string();
        let o = w.sh(
            &["--read", &w.home.join("docs").display().to_string()],
            &format!(
                "cat '{d}'
                 chmod 777 '{d}'; echo \"chmod=$?\"
                 touch -d @978307200 '{d}'; echo \"touch=$?\"
                 chmod +x script.sh; echo \"chmod project=$?\"
                 ./script.sh
                 touch -d @978307200 script.sh; echo \"touch project=$?\"
                 echo x > {in_tmp} && chmod 600 {in_tmp}; echo \"chmod tmp=$?\"
                 /usr/bin/python3 '{}' '{d}'",
                probe.display()
            ),
        );
        assert_code(&o, 0, "metadata");
        let out = stdout(&o);
        assert!(out.starts_with("doc\n"), "{out}");
        assert_failed(&out, "chmod");
        assert_failed(&out, "touch");
        for op in ["chmod", "utime", "chown"] {
            // The read-only mount refuses, not Landlock (which does not govern these).
            assert_field(&out, &format!("{op} {d}"), "EROFS");
        }
        assert_ne!(field(&out, &format!("setxattr {d}")), Some("ok"), "{out}");
        assert_field(&out, "chmod project", "0");
        assert!(out.contains("script ran\n"), "{out}");
        assert_field(&out, "touch project", "0");
        assert_field(&out, "chmod tmp", "0");

        assert_eq!(mode(&doc), 0o644, "the mode changed on the host");
        assert_eq!(mtime(&doc), doc_mtime, "the mtime changed on the host");
        assert!(xattr_absent(&doc), "an xattr was set on the host");
        assert_eq!(mode(&script), 0o755);
        assert_eq!(mtime(&script), 978_307_200, "touch -d inside the project");
    });
}

/// Whether `user.sandy` is absent on `path` (asked through python, as the test user).
fn xattr_absent(path: &Path) -> bool {
    let o = std::process::Command::new(PYTHON)
        .args([
            "-c",
            "import os, sys\ntry:\n    os.getxattr(sys.argv[1], 'user.sandy')\n    print('present')\nexcept OSError:\n    print('absent')",
        ])
        .arg(path)
        .output()
        .unwrap();
    stdout(&o).trim() == "absent"
}

// ---------------------------------------------------------------------------------------
// Mounts cannot be undone
// ---------------------------------------------------------------------------------------

/// Tries to unmount, remount, make new mounts and namespaces; prints "NAME=ok" or the
/// errno name for each. Afterwards tries to write the protected config.
const UNDO_PROBE: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def rc(label, r):
    e = ctypes.get_errno()
    print(f"{label}=" + ("ok" if r == 0 else errno.errorcode.get(e, str(e))), flush=True)
def attempt(label, f):
    try:
        f()
        r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    print(f"{label}={r}", flush=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 0x1, 0x20, 0x1000, 0x2
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
rc("umount2 /tmp", libc.umount2(b"/tmp", 0))
rc("umount2 detach config", libc.umount2(b".git/config", MNT_DETACH))
rc("umount2 detach hooks", libc.umount2(b".git/hooks", MNT_DETACH))
rc("remount rw config", libc.mount(None, b".git/config", None, MS_REMOUNT | MS_BIND, None))
rc("bind over hooks", libc.mount(b"/tmp", b".git/hooks", None, MS_BIND, None))
rc("tmpfs over git", libc.mount(b"tmpfs", b".git", b"tmpfs", 0, None))
# The new mount API (the same numbers on every architecture).
rc("fsopen", libc.syscall(ctypes.c_long(430), b"tmpfs", 0))
rc("open_tree", libc.syscall(ctypes.c_long(428), -100, b".git/config", 1))
rc("mount_setattr", libc.syscall(ctypes.c_long(442), -100, b".git/config", 0, None, 0))
rc("unshare user+mount", libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
rc("unshare mount", libc.unshare(CLONE_NEWNS))
rc("umount2 after unshare", libc.umount2(b".git/config", MNT_DETACH))
fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
rc("setns", libc.setns(fd, 0))
attempt("chroot", lambda: os.chroot("."))
def write_config():
    with open(".git/config", "a") as f:
        f.write("[core]\n\tfsmonitor = evil\n")
attempt("write config", write_config)
attempt("write hook", lambda: open(".git/hooks/pre-commit", "w").write("evil"))
print("tmp listing=" + str(sorted(os.listdir("/tmp"))))
"#;

#[test]
fn mounts_cannot_be_undone() {
    for_each_user(|w| {
        init_repo(w, &w.project);
        w.write("home/project/undo.py", UNDO_PROBE);
        let git_dir = w.project.join(".git");
        let hooks_before = snapshot(&git_dir.join("hooks"));
        let config_before = bytes(&git_dir.join("config"));
        let host_tmp = HostFile::new(w, Path::new("/tmp").join(unique("undo")), CANARY);
        let o = w.sh(
            &[],
            "echo mine > /tmp/mine
             umount /tmp; echo \"umount tmp=$?\"
             umount -l .git/hooks; echo \"umount -l hooks=$?\"
             umount -l .git/config; echo \"umount -l config=$?\"
             mount -o remount,rw .git/config; echo \"mount remount=$?\"
             /usr/bin/python3 undo.py",
        );
        assert_code(&o, 0, "undo attempts");
        let out = stdout(&o);
        for key in [
            "umount tmp",
            "umount -l hooks",
            "umount -l config",
            "mount remount",
        ] {
            assert_failed(&out, key);
        }
        for key in [
            "umount2 /tmp",
            "umount2 detach config",
            "umount2 detach hooks",
            "remount rw config",
            "bind over hooks",
            "tmpfs over git",
            "fsopen",
            "open_tree",
            "mount_setattr",
            "unshare user+mount",
            "unshare mount",
            "umount2 after unshare",
            "setns",
            "chroot",
        ] {
            let got = field(&out, key).unwrap_or_else(|| panic!("no {key}=:\n{out}"));
            assert_ne!(got, "ok", "{key} succeeded:\n{out}");
        }
        // The configuration is a filtered, read-only copy (mode 0400, refused before the
        // mount's read-only flag is asked); either way the write fails.
        let config = field(&out, "write config");
        assert!(
            matches!(config, Some("EROFS" | "EACCES")),
            "write config: {config:?}\n{out}"
        );
        assert_field(&out, "write hook", "EROFS");
        // /tmp is still the private one.
        assert_field(&out, "tmp listing", "['mine']");
        assert_eq!(
            snapshot(&git_dir.join("hooks")),
            hooks_before,
            "hooks changed"
        );
        assert_eq!(
            bytes(&git_dir.join("config")),
            config_before,
            "config changed"
        );
        assert_eq!(bytes(&host_tmp.0), CANARY.as_bytes());
    });
}

/// A project on a filesystem that is read-only on the host still runs (read-only):
/// Sandy does not insist on making it writable.
#[test]
fn a_project_on_a_read_only_mount_runs_read_only() {
    if !is_root() {
        skip("making a read-only bind mount needs root");
        return;
    }
    for_each_user(|w| {
        w.write("home/project/readme.txt", "read me\n");
        let project = w.project.display().to_string();
        let mount = |args: &[&str]| {
            let status = Command::new("mount").args(args).status().unwrap();
            assert!(status.success(), "mount {args:?}");
        };
        mount(&["--bind", &project, &project]);
        mount(&["-o", "remount,bind,ro", &project]);
        let o = w.sh(&[], "cat readme.txt; echo x > new.txt; echo write=$?");
        let _ = Command::new("umount").arg(&project).status();
        assert_code(&o, 0, "read-only project");
        assert!(stdout(&o).contains("read me"), "{}", stdout(&o));
        assert_failed(&stdout(&o), "write");
        assert!(!w.project.join("new.txt").exists());
    });
}
