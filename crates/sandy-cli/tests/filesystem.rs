//! Filesystem confinement through the real binary, judged from the host side: what the
//! target may do in the project, the private TMPDIR and its toolchains, and what it cannot
//! do to the home directory, secrets, other projects and explicitly granted paths.
#![allow(clippy::disallowed_methods)]
// the tests set up and judge worlds of their own
// Test helpers outside `#[test]` functions fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::*;

/// The value every canary secret carries; it must never reach the target's output.
const CANARY: &str = "CANARY-7f3a9c-do-not-leak";

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

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Everything under `dir` (not following symlinks, skipping `skip`): relative path to a
/// description of the entry (file contents and mode, symlink target, or directory mode).
fn snapshot(dir: &Path, skip: Option<&Path>) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, p: &Path, skip: Option<&Path>, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            let path = e.path();
            if Some(path.as_path()) == skip {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(base).unwrap().to_path_buf();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("link -> {}", target.display()));
            } else if meta.is_dir() {
                out.insert(rel, format!("dir {mode:o}"));
                walk(base, &path, skip, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                out.insert(rel, format!("file {mode:o} {text:?}"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, skip, &mut out);
    out
}

/// A snapshot of HOME without the project.
fn home_snapshot(w: &World) -> BTreeMap<PathBuf, String> {
    snapshot(&w.home, Some(&w.project))
}

/// A package in `HOME/.local/share/<pkg>/bin/<pkg>` with a data file in the package,
/// symlinked into `HOME/.local/bin`. Returns the package directory.
fn install_tool(w: &World, pkg: &str, script: &str, data: &str) -> PathBuf {
    let pkg_dir = w.home.join(".local/share").join(pkg);
    let exe = w.write(
        pkg_dir.join("bin").join(pkg).strip_prefix(&w.root).unwrap(),
        script,
    );
    set_mode(&exe, 0o755);
    w.write(
        pkg_dir.join("data.txt").strip_prefix(&w.root).unwrap(),
        data,
    );
    let bin = w.home.join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        Path::new("../share").join(pkg).join("bin").join(pkg),
        bin.join(pkg),
    )
    .unwrap();
    w.chown_all();
    pkg_dir
}

fn local_bin_path(w: &World) -> String {
    format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        w.home.join(".local/bin").display()
    )
}

const SH_TOOL: &str = "#!/bin/sh\n\
    here=$(dirname \"$(readlink -f \"$0\")\")\n\
    printf 'shtool says: '\n\
    cat \"$here/../data.txt\"\n";

const NODE_TOOL: &str = "#!/usr/bin/env node\n\
    const fs = require('fs');\n\
    const path = require('path');\n\
    const data = fs.readFileSync(path.join(__dirname, '..', 'data.txt'), 'utf8');\n\
    process.stdout.write('nodetool says: ' + data);\n";

// ---------------------------------------------------------------------------------------
// Allowed
// ---------------------------------------------------------------------------------------

#[test]
fn project_files_can_be_written_created_renamed_and_deleted() {
    for_each_user(|w| {
        let existing = w.write("home/project/existing.txt", "old contents\n");
        w.write("home/project/old-name.txt", "moved contents\n");
        w.write("home/project/doomed.txt", "delete me\n");
        w.write("home/project/dir/nested.txt", "nested\n");
        let o = w.sh(
            &[],
            "set -e
             printf 'new contents\\n' > existing.txt
             mkdir -p sub/deeper && echo created > sub/deeper/new.txt
             mv old-name.txt renamed.txt
             rm doomed.txt
             mv dir moved-dir
             mkdir gone && rmdir gone
             ln -s renamed.txt link && cat link
             echo ok",
        );
        assert_code(&o, 0, "project writes");
        assert_eq!(stdout(&o), "moved contents\nok\n");
        assert_eq!(read(&existing), "new contents\n");
        assert_eq!(read(&w.project.join("sub/deeper/new.txt")), "created\n");
        assert_eq!(read(&w.project.join("renamed.txt")), "moved contents\n");
        assert!(!w.project.join("old-name.txt").exists());
        assert!(!w.project.join("doomed.txt").exists());
        assert_eq!(read(&w.project.join("moved-dir/nested.txt")), "nested\n");
        assert!(!w.project.join("dir").exists());
        assert!(!w.project.join("gone").exists());
        assert_eq!(
            std::fs::read_link(w.project.join("link")).unwrap(),
            Path::new("renamed.txt")
        );
    });
}

#[test]
fn git_init_add_and_commit_in_the_project() {
    for_each_user(|w| {
        w.write("home/project/README.md", "# hello\n");
        let o = w.sh(
            &[],
            "set -e
             git=/usr/bin/git
             $git init -q
             $git add README.md
             $git -c user.name=t -c user.email=t@e commit -q -m 'first commit from the sandbox'
             $git log --format=%s",
        );
        assert_code(&o, 0, "git in the sandbox");
        assert_eq!(stdout(&o), "first commit from the sandbox\n");

        let log = w
            .host("/usr/bin/git")
            .args(["log", "--format=%s%x00%an%x00%ae"])
            .output()
            .unwrap();
        assert_code(&log, 0, "git log on the host");
        assert_eq!(stdout(&log), "first commit from the sandbox\0t\0t@e\n");
        let files = w.host("/usr/bin/git").args(["ls-files"]).output().unwrap();
        assert_eq!(stdout(&files), "README.md\n");
    });
}

#[test]
fn python3_and_git_from_usr_run() {
    for_each_user(|w| {
        w.write("home/project/input.txt", "21\n");
        let o = w.sh(
            &[],
            "/usr/bin/python3 -c 'print(int(open(\"input.txt\").read()) * 2)' &&
             /usr/bin/git --version &&
             git --version",
        );
        assert_code(&o, 0, "python3 and git");
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0], "42");
        assert!(lines[1].starts_with("git version "), "{out}");
        assert!(lines[2].starts_with("git version "), "{out}");
    });
}

#[test]
fn tools_reached_through_a_path_directory_in_home_run_and_read_their_package() {
    let have_node = Path::new("/usr/bin/node").exists();
    if !have_node {
        eprintln!("SKIP: /usr/bin/node is missing; the node half of this test did not run");
    }
    for_each_user(|w| {
        install_tool(w, "shtool", SH_TOOL, "shell data\n");
        if have_node {
            install_tool(w, "nodetool", NODE_TOOL, "node data\n");
        }
        // A package nobody linked onto PATH stays unreadable.
        w.write("home/.local/share/unlinked/data.txt", CANARY);
        let path = local_bin_path(w);
        let env = [("PATH", path.as_str())];

        let o = sh_env(w, &[], "shtool", &env);
        assert_code(&o, 0, "shell tool via PATH");
        assert_eq!(stdout(&o), "shtool says: shell data\n");

        // Run directly as the command, too (resolution through PATH, not via sh).
        let mut cmd = w.sandy(["run", "--", "shtool"]);
        cmd.env("PATH", &path);
        let o = cmd.output().unwrap();
        assert_code(&o, 0, "shell tool as the command");
        assert_eq!(stdout(&o), "shtool says: shell data\n");

        if have_node {
            let mut cmd = w.sandy(["run", "--", "nodetool"]);
            cmd.env("PATH", &path);
            let o = cmd.output().unwrap();
            assert_code(&o, 0, "node tool as the command");
            assert_eq!(stdout(&o), "nodetool says: node data\n");
        }

        let o = sh_env(
            w,
            &[],
            "cat \"$HOME/.local/share/unlinked/data.txt\"; echo rc=$?",
            &env,
        );
        assert_code(&o, 0, "unlinked package");
        assert!(!stdout(&o).contains(CANARY), "{}", stdout(&o));
        assert!(!stderr(&o).contains(CANARY), "{}", stderr(&o));
        assert_failed(&stdout(&o), "rc");
    });
}

#[test]
fn mktemp_uses_a_private_tmpdir_that_is_removed_after_the_run() {
    for_each_user(|w| {
        let home_before = home_snapshot(w);
        let tmp = w.tmp.display().to_string();
        let mut cmd = w.sandy([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "set -e
             t=$(mktemp)
             echo hello > \"$t\"
             echo \"file=$t\"
             echo \"dir=$(dirname \"$t\")\"
             echo \"TMPDIR=$TMPDIR\"
             echo \"TMP=$TMP\"
             echo \"TEMP=$TEMP\"
             echo \"mode=$(stat -c %a \"$TMPDIR\")\"
             # Leave behind something hard to delete.
             mkdir -p \"$TMPDIR/locked/inner\"
             touch \"$TMPDIR/locked/inner/f\"
             chmod 500 \"$TMPDIR/locked/inner\" \"$TMPDIR/locked\"
             echo ready
             # Wait (at most 10 s) for the host to look.
             i=0
             while [ ! -e go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
        ]);
        cmd.env("TMP", &tmp)
            .env("TEMP", &tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut out = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "ready\n" {
                break;
            }
            out.push_str(&line);
        }

        // During the run, judged from the host: the one per-run directory Sandy made in the
        // caller's TMPDIR, private to the user, under the run's /tmp.
        let during: Vec<PathBuf> = std::fs::read_dir(w.runs())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let name = field(&out, "file")
            .and_then(|f| f.strip_prefix("/tmp/"))
            .map(str::to_owned);
        let seen = match (&during[..], &name) {
            ([private], Some(name)) => std::fs::read_to_string(private.join(name)).ok(),
            _ => None,
        };
        let owner_and_mode = during.first().map(|p| {
            let meta = std::fs::metadata(p).unwrap();
            (meta.uid(), meta.permissions().mode() & 0o7777)
        });
        let go = w.project.join("go");
        std::fs::write(&go, "").unwrap();
        let status = child.wait().unwrap();
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(
            status.success(),
            "mktemp: {status}\nstdout: {out}\nstderr: {err}"
        );

        assert_field(&out, "TMPDIR", "/tmp");
        assert_field(&out, "dir", "/tmp");
        assert_field(&out, "TMP", "/tmp");
        assert_field(&out, "TEMP", "/tmp");
        let name = name.unwrap_or_else(|| panic!("mktemp made no file in /tmp:\n{out}"));
        assert_eq!(
            during.len(),
            1,
            "in the caller's TMPDIR during the run: {during:?}"
        );
        let private = &during[0];
        // /tmp inside is a tmpfs of the --max-tmp size mounted on that directory in the
        // sandbox only: on the host the directory stays empty, nothing reaches the disk.
        assert_eq!(
            seen.as_deref(),
            None,
            "/tmp/{name} inside reached {private:?}/{name} on the host"
        );
        assert!(!name.is_empty());
        assert!(
            private
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("sandy-"),
            "{private:?}"
        );
        assert_eq!(
            owner_and_mode,
            Some((w.user.uid, 0o700)),
            "owner and mode of {private:?}"
        );
        // Nothing of it reached the host's own /tmp.
        assert!(
            !Path::new("/tmp").join(&name).exists(),
            "/tmp/{name} is in the host's /tmp"
        );

        assert!(!private.exists(), "{private:?} outlived the run");
        w.tidy_tmp();
        let left: Vec<_> = std::fs::read_dir(&w.tmp).unwrap().flatten().collect();
        assert!(left.is_empty(), "left in the caller's TMPDIR: {left:?}");
        assert_eq!(home_snapshot(w), home_before, "HOME changed");
        // Last, so that everything above is judged even when this fails.
        assert_field(&out, "mode", "700");
    });
}

// ---------------------------------------------------------------------------------------
// Denied
// ---------------------------------------------------------------------------------------

const SECRETS: &[&str] = &[
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".netrc",
    ".config/gh/hosts.yml",
    ".docker/config.json",
    ".kube/config",
    ".git-credentials",
    "other/secret.txt",
];

#[test]
fn secrets_in_home_and_other_projects_cannot_be_read() {
    for_each_user(|w| {
        for rel in SECRETS {
            w.write(format!("home/{rel}"), &format!("{CANARY} {rel}\n"));
        }
        w.write("home/project/ordinary.txt", "ordinary project file\n");
        let mut script = String::from("cat ordinary.txt\n");
        for rel in SECRETS {
            let abs = w.home.join(rel);
            let abs = abs.display();
            script.push_str(&format!(
                "cat '{abs}'; echo 'cat {rel}='$?\n\
                 cat '../{rel}'; echo 'relative {rel}='$?\n\
                 /usr/bin/python3 -c 'import sys; print(open(sys.argv[1]).read())' '{abs}'; \
                 echo 'python {rel}='$?\n\
                 cp '{abs}' ./copied 2>/dev/null; echo 'cp {rel}='$?\n"
            ));
        }
        script.push_str(
            "ls \"$HOME/.ssh\"; echo \"ls ssh=$?\"\n\
             grep -r CANARY \"$HOME\" 2>/dev/null; echo \"grep home=$?\"\n",
        );
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "secrets");
        let out = stdout(&o);
        let err = stderr(&o);
        assert!(!out.contains(CANARY), "a secret leaked to stdout:\n{out}");
        assert!(!err.contains(CANARY), "a secret leaked to stderr:\n{err}");
        assert!(out.starts_with("ordinary project file\n"), "{out}");
        for rel in SECRETS {
            for how in ["cat", "relative", "python", "cp"] {
                let key = format!("{how} {rel}");
                let rc = field(&out, &key).unwrap_or_else(|| panic!("no {key} in\n{out}"));
                assert_ne!(rc, "0", "{key} succeeded:\n{out}");
            }
        }
        assert_failed(&out, "ls ssh");
        // grep exits 1 when it found nothing: it must not have matched (0).
        assert_failed(&out, "grep home");
        for (path, what) in snapshot(&w.project, None) {
            assert!(!what.contains(CANARY), "{path:?}: {what}");
        }
    });
}

#[test]
fn home_cannot_be_written() {
    for_each_user(|w| {
        let bashrc = w.write("home/.bashrc", "# original bashrc\n");
        let home_before = home_snapshot(w);
        let tmp_before = snapshot(&w.tmp, None);
        let h = w.home.display();
        let t = w.tmp.display();
        let o = w.sh(
            &[],
            &format!(
                "echo inside > inside.txt; echo \"project=$?\"
                 touch '{h}/new-file'; echo \"touch=$?\"
                 echo 'evil' >> '{h}/.bashrc'; echo \"append=$?\"
                 echo 'evil' > '{h}/.bash_profile'; echo \"profile=$?\"
                 mkdir '{h}/new-dir'; echo \"mkdir=$?\"
                 ln -s /etc/passwd '{h}/new-link'; echo \"symlink=$?\"
                 rm -f '{h}/.bashrc'; echo \"rm=$?\"
                 mv '{h}/.bashrc' '{h}/.bashrc.bak'; echo \"rename=$?\"
                 touch '{t}/escape'; echo \"caller tmp=$?\""
            ),
        );
        assert_code(&o, 0, "home writes");
        let out = stdout(&o);
        assert_field(&out, "project", "0");
        for key in [
            "touch",
            "append",
            "profile",
            "mkdir",
            "symlink",
            "rm",
            "rename",
            "caller tmp",
        ] {
            assert_failed(&out, key);
        }
        assert_eq!(read(&w.project.join("inside.txt")), "inside\n");
        assert_eq!(read(&bashrc), "# original bashrc\n");
        assert!(!w.home.join(".bash_profile").exists());
        assert!(!w.home.join("new-file").exists());
        assert_eq!(home_snapshot(w), home_before, "HOME changed");
        w.tidy_tmp();
        assert_eq!(
            snapshot(&w.tmp, None),
            tmp_before,
            "caller's TMPDIR changed"
        );
    });
}

#[test]
fn a_file_granted_with_read_can_be_read_but_not_truncated() {
    for_each_user(|w| {
        let notes = w.write("home/notes.txt", "keep me\n");
        let n = notes.display().to_string();
        let o = w.sh(
            &["--read", &n],
            &format!(
                "cat '{n}'; echo \"cat=$?\"
                 truncate -s0 '{n}'; echo \"truncate=$?\"
                 ( : > '{n}' ); echo \"redirect=$?\"
                 echo more >> '{n}'; echo \"append=$?\"
                 /usr/bin/python3 -c 'import sys; open(sys.argv[1], \"w\")' '{n}'; \
                 echo \"python w=$?\"
                 /usr/bin/python3 -c 'import os, sys; os.open(sys.argv[1], os.O_RDONLY | os.O_TRUNC)' '{n}'; \
                 echo \"python rdonly trunc=$?\"
                 /usr/bin/python3 -c 'import os, sys; os.truncate(sys.argv[1], 0)' '{n}'; \
                 echo \"python truncate=$?\"
                 rm -f '{n}'; echo \"rm=$?\""
            ),
        );
        assert_code(&o, 0, "read-only file");
        let out = stdout(&o);
        assert!(out.starts_with("keep me\ncat=0\n"), "{out}");
        for key in [
            "truncate",
            "redirect",
            "append",
            "python w",
            "python rdonly trunc",
            "python truncate",
            "rm",
        ] {
            assert_failed(&out, key);
        }
        assert_eq!(read(&notes), "keep me\n");
    });
}

#[test]
fn symlinks_out_of_the_project_do_not_lead_anywhere() {
    for_each_user(|w| {
        let outside = w.write("home/outside.txt", "outside original\n");
        w.write("home/.ssh/id_ed25519", CANARY);
        w.write("home/project/inside.txt", "inside\n");
        let o = w.sh(
            &[],
            &format!(
                "ln -s '{}' out-link; echo \"ln=$?\"
                 ln -s ../.ssh ssh-link; echo \"ln ssh=$?\"
                 ln -s inside.txt in-link; echo \"ln in=$?\"
                 cat in-link
                 cat out-link; echo \"read=$?\"
                 cat ssh-link/id_ed25519; echo \"read ssh=$?\"
                 echo changed > out-link; echo \"write=$?\"
                 echo changed >> out-link; echo \"append=$?\"",
                outside.display()
            ),
        );
        assert_code(&o, 0, "symlinks");
        let out = stdout(&o);
        assert!(
            !out.contains(CANARY) && !stderr(&o).contains(CANARY),
            "{out}"
        );
        assert_field(&out, "ln", "0");
        assert_field(&out, "ln ssh", "0");
        assert_field(&out, "ln in", "0");
        assert!(out.contains("inside\n"), "{out}");
        for key in ["read", "read ssh", "write", "append"] {
            assert_failed(&out, key);
        }
        assert!(!out.contains("outside original"), "{out}");
        assert_eq!(read(&outside), "outside original\n");
        assert_eq!(
            std::fs::read_link(w.project.join("out-link")).unwrap(),
            outside
        );
    });
}

#[test]
fn hard_links_cannot_bring_outside_files_into_the_project() {
    for_each_user(|w| {
        let outside = w.write("home/outside.txt", "outside original\n");
        let secret = w.write("home/.aws/credentials", CANARY);
        w.write("home/project/inside.txt", "inside\n");
        let o = w.sh(
            &[],
            &format!(
                "ln inside.txt inside-link; echo \"ln in=$?\"
                 ln '{}' hard; echo \"ln out=$?\"
                 ln '{}' hard-secret; echo \"ln secret=$?\"
                 cat hard hard-secret",
                outside.display(),
                secret.display()
            ),
        );
        assert_code(&o, 1, "hard links");
        let out = stdout(&o);
        assert!(
            !out.contains(CANARY) && !stderr(&o).contains(CANARY),
            "{out}"
        );
        assert_field(&out, "ln in", "0");
        assert_failed(&out, "ln out");
        assert_failed(&out, "ln secret");
        assert!(!w.project.join("hard").exists());
        assert!(!w.project.join("hard-secret").exists());
        assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 1);
        assert_eq!(std::fs::metadata(&secret).unwrap().nlink(), 1);
        assert_eq!(
            std::fs::metadata(w.project.join("inside.txt"))
                .unwrap()
                .nlink(),
            2
        );
        assert_eq!(read(&outside), "outside original\n");
    });
}

#[test]
fn renames_across_the_project_boundary_fail() {
    for_each_user(|w| {
        let leaving = w.write("home/project/leaving.txt", "project data\n");
        let arriving = w.write("home/arriving.txt", "outside data\n");
        w.write("home/project/stays.txt", "stays\n");
        let h = w.home.display();
        let o = w.sh(
            &[],
            &format!(
                "mv stays.txt stayed.txt; echo \"mv inside=$?\"
                 mv leaving.txt '{h}/left.txt'; echo \"mv out=$?\"
                 mv '{h}/arriving.txt' arrived.txt; echo \"mv in=$?\"
                 /usr/bin/python3 -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' \
                     leaving.txt '{h}/left.txt'; echo \"rename out=$?\"
                 /usr/bin/python3 -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' \
                     '{h}/arriving.txt' arrived.txt; echo \"rename in=$?\""
            ),
        );
        assert_code(&o, 0, "renames");
        let out = stdout(&o);
        assert_field(&out, "mv inside", "0");
        for key in ["mv out", "mv in", "rename out", "rename in"] {
            assert_failed(&out, key);
        }
        assert_eq!(read(&w.project.join("stayed.txt")), "stays\n");
        assert_eq!(read(&leaving), "project data\n");
        assert_eq!(read(&arriving), "outside data\n");
        assert!(!w.home.join("left.txt").exists());
        assert!(!w.project.join("arrived.txt").exists());
    });
}

#[test]
fn an_o_path_descriptor_cannot_be_reopened_through_proc() {
    for_each_user(|w| {
        let secret = w.write("home/.ssh/id_ed25519", CANARY);
        w.write("home/project/ordinary.txt", "ordinary\n");
        let script = r#"
import os, sys
def attempt(label, fn):
    try:
        print(f"{label}=read:{fn()}")
    except OSError as e:
        print(f"{label}=denied:{e.errno}")
def via_proc(path):
    fd = os.open(path, os.O_PATH)
    return open(f"/proc/self/fd/{fd}").read().strip()
def via_dirfd(path):
    d = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    fd = os.open(os.path.basename(path), os.O_RDONLY, dir_fd=d)
    return os.read(fd, 100).decode().strip()
attempt("project", lambda: via_proc("ordinary.txt"))
attempt("secret", lambda: via_proc(sys.argv[1]))
attempt("secret dirfd", lambda: via_dirfd(sys.argv[1]))
"#;
        let sec = secret.display().to_string();
        let o = w
            .sandy(["run", "--", "/usr/bin/python3", "-c", script, &sec])
            .output()
            .unwrap();
        assert_code(&o, 0, "O_PATH");
        let out = stdout(&o);
        assert!(
            !out.contains(CANARY) && !stderr(&o).contains(CANARY),
            "{out}"
        );
        assert_field(&out, "project", "read:ordinary");
        assert!(
            field(&out, "secret").is_some_and(|v| v.starts_with("denied:")),
            "{out}"
        );
        assert!(
            field(&out, "secret dirfd").is_some_and(|v| v.starts_with("denied:")),
            "{out}"
        );
    });
}

#[test]
fn files_outside_the_project_cannot_be_chmodded() {
    for_each_user(|w| {
        let outside = w.write("home/outside.sh", "#!/bin/sh\n");
        set_mode(&outside, 0o644);
        let key = w.write("home/.ssh/id_ed25519", CANARY);
        set_mode(&key, 0o600);
        let inside = w.write("home/project/inside.sh", "#!/bin/sh\n");
        set_mode(&inside, 0o644);
        let o = w.sh(
            &[],
            &format!(
                "chmod 755 inside.sh; echo \"inside=$?\"
                 chmod 777 '{}'; echo \"outside=$?\"
                 chmod 644 '{}'; echo \"secret=$?\"",
                outside.display(),
                key.display()
            ),
        );
        assert_code(&o, 0, "chmod");
        let out = stdout(&o);
        assert_field(&out, "inside", "0");
        assert_eq!(mode(&inside), 0o755);
        assert_eq!(
            mode(&outside),
            0o644,
            "chmod outside the project changed the mode on the host\n{out}"
        );
        assert_eq!(
            mode(&key),
            0o600,
            "chmod of a secret changed its mode on the host\n{out}"
        );
        assert_failed(&out, "outside");
        assert_failed(&out, "secret");
    });
}

#[test]
fn a_path_directory_in_home_cannot_be_hijacked() {
    for_each_user(|w| {
        let pkg = install_tool(w, "shtool", SH_TOOL, "shell data\n");
        let bin = w.home.join(".local/bin");
        let tool_before = read(&pkg.join("bin/shtool"));
        let bin_before = snapshot(&bin, None);
        let path = local_bin_path(w);
        let b = bin.display();
        let o = sh_env(
            w,
            &[],
            &format!(
                "shtool
                 printf '#!/bin/sh\\necho hijacked\\n' > '{b}/git'; echo \"write=$?\"
                 cp /usr/bin/true '{b}/git'; echo \"cp=$?\"
                 ln -s /usr/bin/true '{b}/git'; echo \"symlink=$?\"
                 mkdir '{b}/git'; echo \"mkdir=$?\"
                 rm -f '{b}/shtool'; echo \"rm=$?\"
                 mv '{b}/shtool' '{b}/git'; echo \"rename=$?\"
                 echo 'echo hijacked' >> '{}'; echo \"package=$?\"
                 git --version",
                pkg.join("bin/shtool").display()
            ),
            &[("PATH", path.as_str())],
        );
        assert_code(&o, 0, "PATH hijack");
        let out = stdout(&o);
        assert!(out.starts_with("shtool says: shell data\n"), "{out}");
        for key in ["write", "cp", "symlink", "mkdir", "rm", "rename", "package"] {
            assert_failed(&out, key);
        }
        assert!(
            out.lines().last().unwrap().starts_with("git version "),
            "{out}"
        );
        assert!(!out.contains("hijacked"), "{out}");
        assert!(std::fs::symlink_metadata(bin.join("git")).is_err());
        assert_eq!(snapshot(&bin, None), bin_before);
        assert_eq!(read(&pkg.join("bin/shtool")), tool_before);
    });
}

// ---------------------------------------------------------------------------------------
// Explicit grants
// ---------------------------------------------------------------------------------------

#[test]
fn a_read_write_grant_outside_the_project_allows_writing() {
    for_each_user(|w| {
        let existing = w.write("home/shared/existing.txt", "line one\n");
        w.write("home/shared/old.txt", "rename me\n");
        let log = w.write("home/log.txt", "log start\n");
        let neighbour = w.write("home/unshared/file.txt", "untouched\n");
        let shared = w.home.join("shared");
        let s = shared.display().to_string();
        let l = log.display().to_string();
        let o = w.sh(
            &["--read-write", &s, "--read-write", &l],
            &format!(
                "set -e
                 echo 'line two' >> '{s}/existing.txt'
                 echo new > '{s}/new.txt'
                 mkdir '{s}/sub' && echo deep > '{s}/sub/deep.txt'
                 mv '{s}/old.txt' '{s}/renamed.txt'
                 echo 'log line' >> '{l}'
                 set +e
                 echo nope > '{}/new.txt'; echo \"neighbour=$?\"",
                w.home.join("unshared").display()
            ),
        );
        assert_code(&o, 0, "read-write grant");
        assert_failed(&stdout(&o), "neighbour");
        assert_eq!(read(&existing), "line one\nline two\n");
        assert_eq!(read(&shared.join("new.txt")), "new\n");
        assert_eq!(read(&shared.join("sub/deep.txt")), "deep\n");
        assert_eq!(read(&shared.join("renamed.txt")), "rename me\n");
        assert!(!shared.join("old.txt").exists());
        assert_eq!(read(&log), "log start\nlog line\n");
        assert_eq!(read(&neighbour), "untouched\n");
        assert!(!w.home.join("unshared/new.txt").exists());
    });
}

#[test]
fn a_read_grant_on_a_directory_is_read_only() {
    for_each_user(|w| {
        let doc = w.write("home/docs/guide.txt", "read me\n");
        w.write("home/docs/sub/more.txt", "more\n");
        let docs = w.home.join("docs");
        let before = snapshot(&docs, None);
        let d = docs.display().to_string();
        let o = w.sh(
            &["--read", &d],
            &format!(
                "cat '{d}/guide.txt' '{d}/sub/more.txt'; echo \"cat=$?\"
                 ls '{d}' | tr '\\n' ' '; echo \"ls=$?\"
                 cp '{d}/guide.txt' copy.txt; echo \"copy in=$?\"
                 echo x >> '{d}/guide.txt'; echo \"append=$?\"
                 echo x > '{d}/new.txt'; echo \"create=$?\"
                 mkdir '{d}/newdir'; echo \"mkdir=$?\"
                 rm -f '{d}/sub/more.txt'; echo \"rm=$?\"
                 mv '{d}/guide.txt' '{d}/renamed.txt'; echo \"rename=$?\"
                 truncate -s0 '{d}/guide.txt'; echo \"truncate=$?\""
            ),
        );
        assert_code(&o, 0, "read grant");
        let out = stdout(&o);
        assert!(out.starts_with("read me\nmore\ncat=0\n"), "{out}");
        assert!(out.contains("guide.txt sub "), "{out}");
        assert_field(&out, "copy in", "0");
        for key in ["append", "create", "mkdir", "rm", "rename", "truncate"] {
            assert_failed(&out, key);
        }
        assert_eq!(read(&w.project.join("copy.txt")), "read me\n");
        assert_eq!(read(&doc), "read me\n");
        assert_eq!(snapshot(&docs, None), before);
    });
}
