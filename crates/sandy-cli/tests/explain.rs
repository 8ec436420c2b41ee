//! The refusal report after a run (`sandy run --explain`): each example of the issue
//! through the real binary, as root and as an unprivileged user, judged from the host
//! (the refused write really did not land; the flag the report names really allows it),
//! and the observer never changes what the target sees or its exit status.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

const GIT: &str = "/usr/bin/git";

/// The report's lines (everything after its header), or nothing.
fn report(o: &Output) -> Vec<String> {
    let err = stderr(o);
    let mut lines = err
        .lines()
        .skip_while(|l| !l.starts_with("sandy: the sandbox refused"));
    match lines.next() {
        Some(header) => std::iter::once(header.to_owned())
            .chain(lines.map(str::to_owned))
            .collect(),
        None => Vec::new(),
    }
}

#[track_caller]
fn assert_reports(o: &Output, line: &str) {
    assert!(
        report(o).iter().any(|l| l.contains(line)),
        "the report lacks {line:?}\nstderr: {}",
        stderr(o)
    );
}

fn host_git(w: &World, dir: &Path, args: &[&str]) {
    let mut cmd = w.host(GIT);
    cmd.current_dir(dir).args(args);
    let o = cmd.output().unwrap();
    assert_code(&o, 0, &format!("host git {args:?}"));
}

/// One empty commit in the project's repository, made on the host.
fn empty_commit(w: &World) {
    host_git(
        w,
        &w.project,
        &[
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "one",
        ],
    );
}

/// `echo >> ~/.bashrc` and `git config user.name x`: both refused with their reason and
/// no flag; the host files are unchanged; the target's own status passes through.
#[test]
fn a_shell_start_up_file_and_git_config_are_explained_as_protected() {
    for_each_user(|w| {
        let bashrc = w.write("home/.bashrc", "alias ll='ls -l'\n");
        host_git(w, &w.project, &["init", "-q"]);
        let config = w.project.join(".git/config");
        let before = std::fs::read(&config).unwrap();
        let o = w.sh(&[], "echo x >> ~/.bashrc; git config user.name x; exit 7");
        assert_code(&o, 7, "the target's own status");
        assert_reports(
            &o,
            "write ~/.bashrc: refused; protected: no flag (shell start-up file",
        );
        assert_reports(
            &o,
            "write ~/project/.git/config: refused; protected: no flag (git configuration, \
             read-only inside, without lines that look like credentials; run the `git config` \
             command outside the sandbox; the sandbox reads a filtered, read-only copy)",
        );
        assert!(report(&o).len() <= 10, "{:?}", report(&o));
        assert_eq!(
            std::fs::read_to_string(&bashrc).unwrap(),
            "alias ll='ls -l'\n"
        );
        assert_eq!(std::fs::read(&config).unwrap(), before);
    });
}

/// A write to a cache's protected part (cargo's installed programs, beside its cache in
/// `CARGO_HOME`) is explained by what it is, in the report and by `sandy why`, not as
/// git machinery; the cache itself stays writable (its copy-on-write layer), and the
/// host's copy is unchanged.
#[test]
fn a_write_to_a_caches_programs_is_explained_as_such() {
    for_each_user(|w| {
        let cargo = w.write("home/.cargo/bin/cargo", "#!/bin/sh\n");
        w.write("home/.cargo/registry/index/marker", "host\n");
        let o = w.sh(
            &[],
            "echo planted > ~/.cargo/bin/cargo; echo new > ~/.cargo/registry/index/new && \
             cat ~/.cargo/registry/index/new",
        );
        assert_code(&o, 0, "the cache's layer is writable");
        assert_eq!(stdout(&o), "new\n");
        assert_reports(
            &o,
            "write ~/.cargo/bin/cargo: refused; protected: no flag (cargo's installed \
             programs and settings beside its cache, which your shell and builds run outside \
             the sandbox; read-only inside, change it outside the sandbox)",
        );
        assert!(
            !report(&o).iter().any(|l| l.contains("git machinery")),
            "{:?}",
            report(&o)
        );
        assert_eq!(std::fs::read_to_string(&cargo).unwrap(), "#!/bin/sh\n");
        assert!(!w.home.join(".cargo/registry/index/new").exists());
        let o = w
            .sandy(["why", "--write", &cargo.display().to_string()])
            .output()
            .unwrap();
        assert_code(&o, 1, "why of a cache's program");
        let out = stdout(&o);
        assert!(out.contains("cargo's installed programs"), "{out}");
        assert!(!out.contains("git machinery"), "{out}");
    });
}

/// A project in `/var/tmp`, which is private inside (the project is carried through it,
/// at its own path): its ordinary writes land and are not reported, and a refused write
/// to its git hooks is still explained.
#[test]
fn a_project_in_a_private_directory_is_explained_like_any_other() {
    for_each_user(|w| {
        let dir = tempfile::Builder::new()
            .prefix("sandy-e2e-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        chown_tree(dir.path(), w.user.uid, w.user.gid);
        host_git(w, &project, &["init", "-q"]);
        let o = w
            .sandy([
                "run",
                "--",
                "/bin/sh",
                "-c",
                "mkdir -p target/debug && echo built > target/debug/out; \
                 echo planted > .git/hooks/pre-commit; exit 3",
            ])
            .current_dir(&project)
            .output()
            .unwrap();
        assert_code(&o, 3, "the target's own status");
        assert_eq!(
            std::fs::read_to_string(project.join("target/debug/out")).unwrap(),
            "built\n"
        );
        assert!(!project.join(".git/hooks/pre-commit").exists());
        assert_reports(&o, ".git/hooks/pre-commit: refused; protected: no flag");
        assert!(
            !report(&o).iter().any(|l| l.contains("target")),
            "{:?}",
            report(&o)
        );
    });
}

/// A write under a directory no grant covers names `--read-write DIR`; with that flag
/// the same write lands on the host and nothing is reported.
#[test]
fn a_write_outside_the_grants_names_the_flag_that_allows_it() {
    for_each_user(|w| {
        let other = w.root.join("other");
        std::fs::create_dir_all(&other).unwrap();
        w.chown_all();
        let target = other.join("new.txt");
        let script = format!("echo data > '{}'; echo status $?", target.display());
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "refused write");
        assert!(stdout(&o).contains("status 2"), "{}", stdout(&o));
        assert!(!target.exists(), "the refused write landed");
        assert_reports(
            &o,
            &format!(
                "write {}: refused; --read-write {} allows it",
                target.display(),
                other.display()
            ),
        );

        let flag = other.display().to_string();
        let o = w.sh(&["--read-write", &flag], &script);
        assert_code(&o, 0, "granted write");
        assert!(stdout(&o).contains("status 0"), "{}", stdout(&o));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "data\n");
        assert!(report(&o).is_empty(), "{:?}", report(&o));
    });
}

/// Writes inside the project are answered at once without a record (nothing there can
/// refuse them), except through a name that leads elsewhere: a symbolic link in the
/// project to a directory outside the grants. That write is refused and explained.
#[test]
fn a_write_through_a_symlink_in_the_project_is_explained() {
    for_each_user(|w| {
        let other = w.root.join("elsewhere");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&other, w.project.join("out")).unwrap();
        w.chown_all();
        let script = "mkdir -p build/deep && echo ok > build/deep/file && \
                      echo data > out/new.txt; echo status $?";
        let o = w.sh(&[], script);
        assert_code(&o, 0, "refused write");
        assert!(stdout(&o).contains("status 2"), "{}", stdout(&o));
        assert!(!other.join("new.txt").exists(), "the refused write landed");
        assert_eq!(
            std::fs::read_to_string(w.project.join("build/deep/file")).unwrap(),
            "ok\n"
        );
        let lines = report(&o);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("new.txt") && l.contains("refused")),
            "{lines:?}\nstderr: {}",
            stderr(&o)
        );
        assert!(!lines.iter().any(|l| l.contains("build/deep")), "{lines:?}");
    });
}

/// A masked path: refused, no flag, the reason; the host file is unchanged.
/// A protected name absent at launch has nothing to be mounted over: the run's write
/// there succeeds, so the report does not call it refused (the run's creation of it is
/// named after the run instead), while a refused write beside it still is.
#[test]
fn a_write_to_an_absent_protected_name_is_not_called_refused() {
    for_each_user(|w| {
        host_git(w, &w.project, &["init", "-q"]);
        std::fs::create_dir_all(w.project.join("sub/.git")).unwrap();
        w.chown_all();
        let o = w.sh(
            &[],
            "printf '[core]\\n' > sub/.git/config; echo x >> .git/config 2>/dev/null; true",
        );
        assert_code(&o, 0, "the run");
        let project = std::fs::canonicalize(&w.project).unwrap();
        assert!(
            !report(&o).iter().any(|l| l.contains("sub/.git/config")),
            "{}",
            stderr(&o)
        );
        assert_reports(&o, ".git/config");
        let created = format!(
            "{} did not exist at launch",
            project.join("sub/.git/config").display()
        );
        assert!(stderr(&o).contains(&created), "{}", stderr(&o));
    });
}

/// A descriptor reopened by name (`/dev/fd/N`, `/dev/stdout`, `/proc/self/fd/N`, the
/// caller's own `/proc/PID/fd/N`) is judged by what it refers to, as the kernel judges
/// it: a pipe or `/dev/null` reopened for writing is no refusal and is not reported
/// (the observer once resolved these names in the supervisor's own descriptor table,
/// and reported such writes as refused with `--read-write /dev` as the remedy), while a
/// protected file opened for reading and reopened for appending is refused and explained
/// under its own name. The host file is unchanged.
#[test]
fn a_descriptor_reopened_by_name_is_explained_by_what_it_refers_to() {
    for_each_user(|w| {
        let bashrc = w.write("home/.bashrc", "alias ll='ls -l'\n");
        let o = w.sh(
            &[],
            // The pipe is the sandbox's own (one the test made would be the harness
            // user's, which the kernel refuses to reopen for another user).
            "exec 9>/dev/null; echo e > /dev/fd/9; \
             sh -c 'echo a > /dev/fd/1; echo b > /dev/stdout; echo c > /proc/self/fd/1; \
             echo d > /proc/$$/fd/1; echo f > /dev/stderr' 2>&1 | cat",
        );
        assert_code(&o, 0, "writes through descriptor names");
        assert_eq!(stdout(&o), "a\nb\nc\nd\nf\n");
        assert!(report(&o).is_empty(), "{}", stderr(&o));

        let o = w.sh(&[], "exec 3< ~/.bashrc; echo x >> /dev/fd/3");
        assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_reports(
            &o,
            "write ~/.bashrc: refused; protected: no flag (shell start-up file",
        );
        assert!(
            !report(&o)
                .iter()
                .any(|l| l.contains("/dev") || l.contains("/proc")),
            "{}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read_to_string(&bashrc).unwrap(),
            "alias ll='ls -l'\n"
        );
    });
}

#[test]
fn a_write_to_a_masked_path_is_explained() {
    for_each_user(|w| {
        let key = w.write("home/.ssh/id_ed25519", "key\n");
        let o = w.sh(&[], "echo planted > ~/.ssh/id_ed25519; exit 0");
        assert_code(&o, 0, "masked write");
        assert_reports(
            &o,
            "write ~/.ssh/id_ed25519: refused; protected: no flag (a sensitive path, masked inside)",
        );
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "key\n");
    });
}

/// `git push` to a local remote outside the project: a note before launch names
/// `--read-write REMOTE`; with the remote only readable the report names the same flag;
/// with it, the push lands in the remote (checked by git outside).
#[test]
fn git_push_to_a_local_remote_gets_a_note_before_launch_and_the_flag_works() {
    for_each_user(|w| {
        let remote = w.root.join("remote.git");
        host_git(w, &w.root, &["init", "-q", "--bare", "remote.git"]);
        host_git(w, &w.project, &["init", "-q"]);
        let url = remote.display().to_string();
        host_git(w, &w.project, &["remote", "add", "origin", &url]);
        empty_commit(w);
        let note = format!(
            "sandy: note: the git remote 'origin' is the local path {url}, outside the \
             writable grants: git push and fetch to it fail inside the sandbox; add \
             --read-write {url} to reach it"
        );
        let push = |flags: &[&str]| {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", GIT, "push", "-q", "origin", "HEAD:main"]);
            w.sandy(args).output().unwrap()
        };

        let o = push(&[]);
        assert_code(&o, 128, "push without a grant");
        let err = stderr(&o);
        let at_note = err.find(&note).unwrap_or_else(|| panic!("no note: {err}"));
        let at_git = err.find("fatal:").unwrap();
        assert!(at_note < at_git, "the note comes after git's error: {err}");

        let o = push(&["--read", &url]);
        assert_ne!(o.status.code(), Some(0), "push into a read-only remote");
        assert_reports(&o, &format!("--read-write {url} allows it"));

        let o = push(&["--read-write", &url]);
        assert_code(&o, 0, "push with the flag");
        assert!(!stderr(&o).contains(&note), "{}", stderr(&o));
        let mut check = w.host(GIT);
        check.args(["--git-dir", &url, "rev-parse", "--verify", "-q", "main"]);
        assert_code(&check.output().unwrap(), 0, "the pushed branch on the host");
    });
}

/// Nothing refused: nothing printed. `--explain=off`: nothing printed even with
/// refusals. `--explain=full`: every path; the summary groups them.
#[test]
fn the_report_is_silent_when_nothing_is_refused_or_off_and_full_lists_every_path() {
    for_each_user(|w| {
        // Allowed writes, and calls that fail before the sandbox is asked (EEXIST,
        // ENOENT) even where a write would be refused: nothing to report.
        let o = w.sh(
            &[],
            "echo a > inside.txt; mkdir -p sub/dir; rm inside.txt; echo > /dev/null; \
             mkdir /etc 2>/dev/null; rm -f /etc/sandy-absent; \
             mkdir /etc/no/such 2>/dev/null; \
             python3 -c \"import os\ntry: os.rename('absent', '/etc/sandy-x')\nexcept OSError: pass\"; \
             exit 0",
        );
        assert_code(&o, 0, "allowed writes");
        assert!(report(&o).is_empty(), "{}", stderr(&o));

        let other = w.root.join("other");
        std::fs::create_dir_all(&other).unwrap();
        w.chown_all();
        let script = format!(
            "for i in 1 2 3; do echo x > '{0}/f'$i; done; echo x > '{0}/f1'; exit 0",
            other.display()
        );
        let o = w.sh(&["--explain=off"], &script);
        assert_code(&o, 0, "off");
        assert!(report(&o).is_empty(), "{}", stderr(&o));

        let o = w.sh(&[], &script);
        let summary = report(&o);
        assert_reports(
            &o,
            &format!(
                "write {}/...: refused 4 times; --read-write {} allows it",
                other.display(),
                other.display()
            ),
        );
        assert!(
            !summary.iter().any(|l| l.ends_with("/f2")),
            "the summary lists paths: {summary:?}"
        );

        let o = w.sh(&["--explain=full"], &script);
        for (name, times) in [("f1", " (2 times)"), ("f2", ""), ("f3", "")] {
            let line = format!("sandy:     {}/{name}{times}", other.display());
            assert!(
                report(&o).contains(&line),
                "no {line:?} in {:?}",
                report(&o)
            );
        }
    });
}

/// The observer never changes a result: the same script (allowed and refused writes,
/// reads, creates of existing directories, removes of absent files, a signal death)
/// prints the same and ends the same with and without it.
#[test]
fn the_observer_never_changes_what_the_target_sees() {
    for_each_user(|w| {
        let other = w.root.join("other");
        std::fs::create_dir_all(&other).unwrap();
        w.write("home/project/keep.txt", "keep\n");
        w.chown_all();
        let script = format!(
            "for step in 'echo a > a.txt' 'cat keep.txt' 'mkdir -p d/e' 'mkdir d' \
             'rm -f absent' 'mv a.txt b.txt' 'ln -s b.txt c' 'truncate -s 0 b.txt' \
             'echo x > {0}/x' 'mkdir {0}/y' 'rm {0}' 'echo x >> ~/.profile' \
             'touch /etc/sandy-probe' 'ls d'; do sh -c \"$step\" >/dev/null 2>&1; \
             echo \"$step: $?\"; done; ls; {1}",
            other.display(),
            "kill -TERM $$"
        );
        let fresh = |w: &World| {
            let _ = std::fs::remove_dir_all(w.project.join("d"));
            for f in ["a.txt", "b.txt", "c"] {
                let _ = std::fs::remove_file(w.project.join(f));
            }
        };
        fresh(w);
        let observed = w.sh(&[], &script);
        fresh(w);
        let plain = w.sh(&["--explain=off"], &script);
        assert_eq!(stdout(&observed), stdout(&plain));
        assert_eq!(observed.status.code(), Some(143));
        assert_eq!(plain.status.code(), Some(143));
        assert!(!other.join("x").exists() && !Path::new("/etc/sandy-probe").exists());
        assert!(!report(&observed).is_empty());
    });
}

/// A target that writes thousands of files (allowed and refused) completes, and the
/// refused ones are counted.
#[test]
fn thousands_of_writes_complete() {
    for_each_user(|w| {
        let other = w.root.join("other");
        std::fs::create_dir_all(&other).unwrap();
        w.chown_all();
        let script = format!(
            "mkdir many && cd many && i=0; while [ $i -lt 3000 ]; do : > f$i; \
             printf '' > '{}'/f$i 2>/dev/null; i=$((i+1)); done; ls | wc -l",
            other.display()
        );
        let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", &script]);
        cmd.env("LANG", "C");
        let o = run_timeout(cmd, 120);
        assert_code(&o, 0, "thousands of writes");
        assert_eq!(stdout(&o).trim(), "3000");
        assert_eq!(std::fs::read_dir(&other).unwrap().count(), 0);
        assert_reports(
            &o,
            &format!(
                "write {}/...: refused 3000 times; --read-write {} allows it",
                other.display(),
                other.display()
            ),
        );
    });
}

/// Other layouts of a local remote: a relative URL through a symlink gets the note with
/// the directory the symlink leads to (the flag then works); a remote inside the project
/// gets none.
#[test]
fn a_local_remote_through_a_symlink_or_inside_the_project() {
    for_each_user(|w| {
        host_git(w, &w.root, &["init", "-q", "--bare", "remote.git"]);
        std::os::unix::fs::symlink(w.root.join("remote.git"), w.root.join("link.git")).unwrap();
        host_git(w, &w.project, &["init", "-q"]);
        host_git(w, &w.project, &["init", "-q", "--bare", "inner.git"]);
        host_git(
            w,
            &w.project,
            &["remote", "add", "origin", "../../link.git"],
        );
        host_git(w, &w.project, &["remote", "add", "inner", "inner.git"]);
        empty_commit(w);
        w.chown_all();
        let real = std::fs::canonicalize(w.root.join("remote.git")).unwrap();
        let real = real.display().to_string();
        let o = w.sh(&[], "exit 0");
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "the git remote 'origin' is the local path {}, outside",
                w.root.join("link.git").display()
            )) && err.contains(&format!("add --read-write {real} to reach it")),
            "{err}"
        );
        assert!(!err.contains("'inner'"), "{err}");
        let o = w
            .sandy([
                "run",
                "--read-write",
                &real,
                "--",
                GIT,
                "push",
                "-q",
                "origin",
                "HEAD:main",
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "push through the symlink with the flag");
        let o = w
            .sandy(["run", "--", GIT, "push", "-q", "inner", "HEAD:main"])
            .output()
            .unwrap();
        assert_code(&o, 0, "push to a remote inside the project");
        assert!(report(&o).is_empty(), "{}", stderr(&o));
    });
}
