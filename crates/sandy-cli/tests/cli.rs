//! The command line through the real binary: exit codes, byte-exact arguments and streams,
//! refusals, the hidden bootstrap's manifest checks, usage errors, and the dry run.
#![allow(clippy::disallowed_methods)]
// the tests set up and judge worlds of their own
// Test helpers outside `#[test]` functions fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::{json, Value};

/// `sandy ARGS...`, collected.
fn sandy<I, S>(w: &World, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    w.sandy(args).output().unwrap()
}

/// Asserts Sandy refused: exit 125 and exactly one stderr line, starting `sandy: `.
#[track_caller]
fn assert_refused(o: &Output, what: &str) -> String {
    assert_code(o, 125, what);
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one stderr line, got:\n{err}"
    );
    assert!(lines[0].starts_with("sandy: "), "{what}: {err}");
    lines[0].to_owned()
}

/// Asserts a usage error: exit 2 and something on stderr, nothing on stdout.
#[track_caller]
fn assert_usage_error(o: &Output, what: &str) {
    assert_code(o, 2, what);
    assert!(!stderr(o).is_empty(), "{what}: no message");
    assert!(o.stdout.is_empty(), "{what}: stdout {}", stdout(o));
}

/// A shell command that would create `marker` if it ever ran.
fn marker_script(marker: &Path) -> String {
    format!("echo ran > '{}'", marker.display())
}

// ---------------------------------------------------------------------------------------
// Exit status and streams
// ---------------------------------------------------------------------------------------

#[test]
fn exit_status_passes_through() {
    for_each_user(|w| {
        assert_code(&sandy(w, ["run", "--", "true"]), 0, "true");
        assert_code(&sandy(w, ["run", "--", "false"]), 1, "false");
        assert_code(&w.sh(&[], "exit 42"), 42, "exit 42");
        assert_code(&w.sh(&[], "exit 127"), 127, "exit 127 from the target");
        assert_code(&w.sh(&[], "exit 126"), 126, "exit 126 from the target");
        assert_code(&w.sh(&[], "exit 125"), 125, "exit 125 from the target");
        assert_code(&w.sh(&[], "exit 255"), 255, "exit 255");
    });
}

#[test]
fn a_missing_command_exits_127() {
    for_each_user(|w| {
        for cmd in [
            "no-such-command-sandy-test",
            "/no/such/command",
            "./missing-here",
        ] {
            let o = sandy(w, ["run", "--", cmd]);
            assert_code(&o, 127, cmd);
            assert!(stderr(&o).starts_with("sandy: "), "{cmd}: {}", stderr(&o));
        }
    });
}

/// Runs the rest of its command line as a child subreaper, so that whatever the command
/// leaves running or unreaped becomes this process's child, then prints the command's
/// exit status, its stderr lines, and what was left ("none", or the pids and "running").
const LEFT_BEHIND: &str = r#"
import ctypes, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
p = subprocess.run(sys.argv[1:], capture_output=True)
time.sleep(0.3)
left = []
try:
    while True:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            left.append("running")
            break
        left.append(str(pid))
except ChildProcessError:
    pass
print(p.returncode, len(p.stderr.splitlines()), ",".join(left) or "none")
sys.stderr.write(p.stderr.decode())
"#;

/// A run refused before launch, and a run that launched, leave no process of Sandy's
/// behind (no bootstrap or init still running or unreaped), and a refusal prints one
/// line: run under a subreaper that would inherit anything left behind, nothing is.
#[test]
fn a_run_refused_before_launch_leaves_no_process_behind() {
    for_each_user(|w| {
        let missing = w.home.join("no-such-path").display().to_string();
        let cases: [(&str, Vec<&str>, &str); 3] = [
            (
                "missing command",
                vec!["run", "--", "/no/such/command"],
                "127 1 none",
            ),
            (
                "missing grant",
                vec!["run", "--read", &missing, "--", "true"],
                "125 1 none",
            ),
            ("launched", vec!["run", "--", "true"], "0 0 none"),
        ];
        for (what, args, expected) in cases {
            let o = w
                .host("/usr/bin/python3")
                .arg("-c")
                .arg(LEFT_BEHIND)
                .arg(sandy_bin())
                .args(&args)
                .output()
                .unwrap();
            assert_eq!(stdout(&o).trim(), expected, "{what}: {}", stderr(&o));
        }
    });
}

#[test]
fn a_non_executable_file_exits_126_and_does_not_run() {
    for_each_user(|w| {
        let marker = w.project.join("marker");
        w.write(
            "home/project/script.sh",
            &format!("#!/bin/sh\n{}\n", marker_script(&marker)),
        );
        std::fs::create_dir(w.project.join("a-dir")).unwrap();
        w.chown_all();
        for cmd in ["./script.sh", "./a-dir"] {
            let o = sandy(w, ["run", "--", cmd]);
            assert_code(&o, 126, cmd);
            assert!(stderr(&o).starts_with("sandy: "), "{cmd}: {}", stderr(&o));
        }
        assert!(!marker.exists());
        // The positive neighbour: executable, it runs.
        let script = w.project.join("script.sh");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let o = sandy(w, [OsStr::new("run"), OsStr::new("--"), script.as_os_str()]);
        assert_code(&o, 0, "executable, by absolute path");
        assert!(marker.exists());
    });
}

#[test]
fn a_program_given_by_a_relative_path_runs() {
    for_each_user(|w| {
        let script = w.write(
            "home/project/tool.sh",
            "#!/bin/sh\necho \"tool ran in $PWD\"\n",
        );
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::create_dir(w.project.join("sub")).unwrap();
        w.chown_all();
        // Not a path: looked up on PATH only, like execvp.
        assert_code(&sandy(w, ["run", "--", "tool.sh"]), 127, "tool.sh");
        let want = format!(
            "tool ran in {}\n",
            std::fs::canonicalize(&w.project).unwrap().display()
        );
        for cmd in ["./tool.sh", "sub/../tool.sh"] {
            let o = sandy(w, ["run", "--", cmd]);
            assert_code(&o, 0, cmd);
            assert_eq!(stdout(&o), want, "{cmd}");
        }
    });
}

#[test]
fn a_target_killed_by_a_signal_exits_128_plus_n() {
    for_each_user(|w| {
        assert_code(&w.sh(&[], "kill -TERM $$"), 143, "SIGTERM");
        assert_code(&w.sh(&[], "kill -KILL $$"), 137, "SIGKILL");
        // SIGINT reaches the command as the caller left it, as without Sandy (a test run
        // started in the background ignores it): default here, whoever runs the suite.
        // process.rs compares both dispositions with the bare command.
        let mut int = w.host("/usr/bin/env");
        int.arg("--default-signal=INT")
            .arg(sandy_bin())
            .args(["run", "--", "/bin/sh", "-c", "kill -INT $$"])
            .stdin(Stdio::null());
        assert_code(&run_timeout(int, 20), 130, "SIGINT");
    });
}

#[test]
fn stdin_stdout_and_stderr_pass_through_separately() {
    for_each_user(|w| {
        // Binary, and larger than a pipe buffer.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut child = w
            .sandy(["run", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = data.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
        let o = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert_code(&o, 0, "cat");
        assert!(o.stdout == data, "stdin did not arrive byte for byte");
        assert!(o.stderr.is_empty(), "{}", stderr(&o));

        let o = w.sh(&[], "echo to-stdout; echo to-stderr >&2; exit 3");
        assert_code(&o, 3, "streams");
        assert_eq!(stdout(&o), "to-stdout\n");
        assert_eq!(stderr(&o), "to-stderr\n");
    });
}

fn awkward_arguments() -> Vec<OsString> {
    vec![
        OsString::from("with spaces  and  tabs\t"),
        OsString::new(),
        OsString::from_vec(vec![0xff, 0xfe, b'x', 0x80]),
        OsString::from("line\nbreak"),
        OsString::from("--"),
        OsString::from("-n"),
        OsString::from("--read=/etc"),
        OsString::from("*"),
        OsString::from("$HOME"),
        OsString::from("'\"\\"),
        OsString::from("héllo ☃"),
        OsString::new(),
    ]
}

#[test]
fn arguments_arrive_byte_for_byte() {
    for_each_user(|w| {
        let args = awkward_arguments();
        let mut expected = Vec::new();
        for a in &args {
            expected.extend_from_slice(a.as_bytes());
            expected.push(0);
        }

        let mut argv: Vec<OsString> = ["run", "--", "/usr/bin/printf", "%s\\0"]
            .iter()
            .map(OsString::from)
            .collect();
        argv.extend(args.iter().cloned());
        let o = sandy(w, &argv);
        assert_code(&o, 0, "printf");
        assert_eq!(o.stdout, expected, "printf saw different arguments");

        let py = "import os, sys; sys.stdout.buffer.write(b''.join(os.fsencode(a) + b'\\0' for a in sys.argv[1:]))";
        let mut argv: Vec<OsString> = ["run", "--", "/usr/bin/python3", "-c", py]
            .iter()
            .map(OsString::from)
            .collect();
        argv.extend(args.iter().cloned());
        let o = sandy(w, &argv);
        assert_code(&o, 0, "python");
        assert_eq!(o.stdout, expected, "python saw different arguments");
    });
}

// ---------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------

#[test]
fn refuses_to_run_from_the_root_home_above_home_or_a_private_directory() {
    for_each_user(|w| {
        let link = w.root.join("home-link");
        std::os::unix::fs::symlink(&w.home, &link).unwrap();
        w.chown_all();
        // (what, current directory, HOME override)
        let cases: [(&str, &Path, Option<&Path>); 8] = [
            ("cwd /", Path::new("/"), None),
            ("cwd HOME", &w.home, None),
            ("cwd HOME's parent", &w.root, None),
            ("cwd HOME through a symlink", &link, None),
            ("cwd HOME, HOME given as a symlink", &w.home, Some(&link)),
            // Replaced by private directories inside: the project would not be there.
            ("cwd /tmp", Path::new("/tmp"), None),
            ("cwd /var/tmp", Path::new("/var/tmp"), None),
            ("cwd /dev/shm", Path::new("/dev/shm"), None),
        ];
        for (what, cwd, home) in cases {
            let marker = w.home.join("marker");
            let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", &marker_script(&marker)]);
            cmd.current_dir(cwd);
            if let Some(home) = home {
                cmd.env("HOME", home);
            }
            let o = cmd.output().unwrap();
            assert_refused(&o, what);
            assert!(!marker.exists(), "{what}: the target ran");
            assert!(o.stdout.is_empty(), "{what}: {}", stdout(&o));
        }
        // The positive neighbour: from the project, the same command runs.
        let marker = w.home.join("project/marker");
        let o = sandy(w, ["run", "--", "/bin/sh", "-c", &marker_script(&marker)]);
        assert_code(&o, 0, "from the project");
        assert!(marker.exists());
    });
}

#[test]
fn refuses_missing_and_unsafe_grants() {
    for_each_user(|w| {
        w.write("home/.ssh/id_ed25519", "key");
        w.write("home/.aws/sub/config", "aws");
        w.write("home/.aws/credentials", "aws");
        w.write("home/.config/gh/hosts.yml", "gh");
        w.write("home/.config/other/settings", "ok");
        w.write("home/docs/readme.txt", "docs");
        std::os::unix::fs::symlink(w.home.join(".ssh"), w.project.join("ssh-link")).unwrap();
        w.chown_all();
        let h = |rel: &str| w.home.join(rel).display().to_string();
        let cases: Vec<(&str, &str, String)> = vec![
            ("missing --read", "--read", h("no-such-path")),
            ("missing --read-write", "--read-write", h("no-such-path")),
            ("--read ~/.ssh", "--read", h(".ssh")),
            ("--read a key", "--read", h(".ssh/id_ed25519")),
            ("--read /", "--read", "/".to_owned()),
            ("--read-write /", "--read-write", "/".to_owned()),
            ("--read ~/.config/gh", "--read", h(".config/gh")),
            ("--read inside ~/.aws", "--read", h(".aws/sub")),
            ("--read-write inside ~/.aws", "--read-write", h(".aws/sub")),
            (
                "--read-write ~/.aws/credentials",
                "--read-write",
                h(".aws/credentials"),
            ),
            ("--read relative ../.ssh", "--read", "../.ssh".to_owned()),
            ("--read symlink to ~/.ssh", "--read", "ssh-link".to_owned()),
            // Writing may never cover HOME or a sensitive path: a masked path that does
            // not exist yet could be created through it.
            ("--read-write HOME", "--read-write", h("")),
            (
                "--read-write HOME's parent",
                "--read-write",
                w.root.display().to_string(),
            ),
            ("--read-write relative ..", "--read-write", "..".to_owned()),
            (
                "--read-write ~/.config (contains gh)",
                "--read-write",
                h(".config"),
            ),
            ("--read-write ~/.ssh", "--read-write", h(".ssh")),
        ];
        let marker = w.project.join("marker");
        for (what, flag, path) in cases {
            let o = sandy(
                w,
                [
                    "run",
                    flag,
                    &path,
                    "--",
                    "/bin/sh",
                    "-c",
                    &marker_script(&marker),
                ],
            );
            assert_refused(&o, what);
            assert!(!marker.exists(), "{what}: the target ran");
        }
        // The positive neighbours: narrow, existing paths are granted.
        for (flag, path, file, contents) in [
            ("--read", h("docs"), h("docs/readme.txt"), "docs"),
            (
                "--read",
                h(".config/other"),
                h(".config/other/settings"),
                "ok",
            ),
            (
                "--read-write",
                h("docs/readme.txt"),
                h("docs/readme.txt"),
                "docs",
            ),
        ] {
            let o = sandy(w, ["run", flag, &path, "--", "cat", &file]);
            assert_code(&o, 0, &format!("{flag} {path}"));
            assert_eq!(stdout(&o), contents);
        }
    });
}

#[test]
fn a_read_grant_covering_home_or_secrets_runs_with_the_secrets_masked() {
    const CANARY: &str = "CANARY-cli-5e2b-do-not-leak";
    for_each_user(|w| {
        w.write("home/.ssh/id_ed25519", CANARY);
        w.write("home/.aws/credentials", CANARY);
        w.write("home/.config/gh/hosts.yml", CANARY);
        w.write("home/.netrc", CANARY);
        w.write("home/.config/other/settings", "settings\n");
        w.write("home/docs/readme.txt", "docs\n");
        let h = |rel: &str| w.home.join(rel).display().to_string();
        let script = format!(
            "cat '{docs}' '{settings}'
             cat '{key}'; echo \"key=$?\"
             cat '{aws}'; echo \"aws=$?\"
             cat '{gh}'; echo \"gh=$?\"
             cat '{netrc}'; echo \"netrc=$?\"
             echo \"ssh=[$(ls -A '{ssh}' | tr '\\n' ' ')]\"
             ls '{ssh}' > /dev/null; echo \"ls=$?\"
             grep -r CANARY '{home}' 2>/dev/null; echo \"grep=$?\"",
            docs = h("docs/readme.txt"),
            settings = h(".config/other/settings"),
            key = h(".ssh/id_ed25519"),
            aws = h(".aws/credentials"),
            gh = h(".config/gh/hosts.yml"),
            netrc = h(".netrc"),
            ssh = h(".ssh"),
            home = h(""),
        );
        let cases: Vec<(&str, String)> = vec![
            ("--read HOME", h("")),
            ("--read HOME's parent", w.root.display().to_string()),
            ("--read relative ..", "..".to_owned()),
            ("--read ~/.config (contains gh)", h(".config")),
        ];
        for (what, path) in cases {
            let o = w.sh(&["--read", &path], &script);
            assert_code(&o, 0, what);
            let (out, err) = (stdout(&o), stderr(&o));
            assert!(!out.contains(CANARY), "{what}: a secret leaked:\n{out}");
            assert!(!err.contains(CANARY), "{what}: a secret leaked:\n{err}");
            let lines: Vec<&str> = out.lines().collect();
            if path.ends_with(".config") {
                // Only ~/.config is granted: the rest of HOME stays out of reach.
                assert_eq!(lines[0], "settings", "{what}:\n{out}");
            } else {
                assert_eq!(lines[..2], ["docs", "settings"], "{what}:\n{out}");
            }
            let field = |key: &str| {
                out.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                    .unwrap_or_else(|| panic!("{what}: no {key}= line:\n{out}"))
            };
            for key in ["key", "aws", "gh"] {
                assert_ne!(field(key), "0", "{what}: {key} was readable:\n{out}");
            }
            // The masked directory lists empty, never the key (with only ~/.config
            // granted it is out of reach altogether).
            assert_eq!(field("ssh"), "[]", "{what}: ~/.ssh inside:\n{out}");
            if !path.ends_with(".config") {
                assert_eq!(field("ls"), "0", "{what}: ~/.ssh is not listable:\n{out}");
            }
            // grep exits 1 when it matched nothing.
            assert!(!out.contains("grep=0"), "{what}:\n{out}");
        }
        // The host's secrets are untouched.
        assert_eq!(
            std::fs::read_to_string(w.home.join(".ssh/id_ed25519")).unwrap(),
            CANARY
        );
    });
}

/// A launch manifest the bootstrap would accept: `/bin/sh -c SCRIPT` in the project, with
/// the system, the project and `/tmp` granted, `protected.txt` in the project read-only,
/// `WORLD/private-tmp` as the private `/tmp`, supervised by this test process.
fn manifest(w: &World, script: &str) -> Value {
    let mut system: Vec<PathBuf> = ["/usr", "/bin", "/lib", "/lib64"]
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    system.sort();
    system.dedup();
    let roots: Vec<PathBuf> = system
        .iter()
        .filter(|p| !system.iter().any(|q| q != *p && p.starts_with(q)))
        .cloned()
        .collect();
    let mut grants: Vec<Value> = roots
        .iter()
        .map(|p| json!({"path": p.to_str().unwrap(), "access": "read_exec", "scope": "subtree"}))
        .collect();
    let project = std::fs::canonicalize(&w.project).unwrap();
    grants.push(json!({
        "path": project.to_str().unwrap(),
        "access": "read_write",
        "scope": "subtree",
    }));
    grants.push(json!({"path": "/tmp", "access": "read_write", "scope": "subtree"}));
    let private_tmp = w.root.join("private-tmp");
    std::fs::create_dir_all(&private_tmp).unwrap();
    let protected = project.join("protected.txt");
    if !protected.exists() {
        std::fs::write(&protected, "protected\n").unwrap();
    }
    w.chown_all();
    json!({
        "schema_version": 4,
        "supervisor_pid": std::process::id(),
        "program": "/bin/sh",
        "argv": ["sh", "-c", script],
        "working_directory": project.to_str().unwrap(),
        "environment": [{"name": "PATH", "value": "/usr/bin:/bin"}],
        "file_grants": grants,
        "protections": [{"path": protected.to_str().unwrap(), "kind": "read_only"}],
        "private_tmp": private_tmp.to_str().unwrap(),
        "runtime_dir": null,
        "network": "allow_all",
        "local_ports": [],
        "restore_default_signals": [],
        "views": [],
        "policy_document": null,
        "ceilings": {"nproc": null, "file_size": 1u64 << 30, "tmp_size": 1u64 << 30, "oom_score_adj": 500},
    })
}

/// Runs the hidden bootstrap with `contents` on descriptor `fd` (opened by a shell that
/// then execs Sandy, so this test process is the bootstrap's parent).
fn bootstrap_with(w: &World, name: &str, contents: &[u8], fd: u32) -> Output {
    let file = w.root.join("manifests").join(name);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, contents).unwrap();
    w.chown_all();
    w.host("/bin/sh")
        .args([
            "-c",
            &format!("exec {fd}<\"$1\"; exec \"$0\" __bootstrap --manifest-fd {fd}"),
        ])
        .arg(sandy_bin())
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_bootstrap_rejects_bad_manifests_and_runs_nothing() {
    for_each_user(|w| {
        let marker = w.project.join("marker");
        let script = format!(
            "echo evil >> protected.txt; echo inside > /tmp/from-inside; {}",
            marker_script(&marker)
        );
        let good = manifest(w, &script);
        let good_bytes = serde_json::to_vec(&good).unwrap();

        let mut unsupported = good.clone();
        unsupported["schema_version"] = json!(5);
        let mut unknown_field = good.clone();
        unknown_field["extra_grants"] = json!([{"path": "/", "access": "read_write"}]);
        let without = |key: &str| {
            let mut m = good.clone();
            m.as_object_mut().unwrap().remove(key).unwrap();
            serde_json::to_vec(&m).unwrap()
        };
        let mut relative_tmp = good.clone();
        relative_tmp["private_tmp"] = json!("private-tmp");
        let mut root_protection = good.clone();
        root_protection["protections"] = json!([{"path": "/", "kind": "read_only"}]);
        let mut bad_kind = good.clone();
        bad_kind["protections"] = json!([{"path": "/etc", "kind": "writable"}]);
        // Valid JSON, accepted if parsed: only the size check before parsing stops it.
        let mut oversized = good_bytes.clone();
        oversized.resize(1024 * 1024 + 1, b' ');
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", b"this is not a manifest {".to_vec()),
            ("empty", Vec::new()),
            ("oversized", oversized),
            (
                "unsupported schema",
                serde_json::to_vec(&unsupported).unwrap(),
            ),
            ("unknown field", serde_json::to_vec(&unknown_field).unwrap()),
            ("no protections", without("protections")),
            ("no private_tmp", without("private_tmp")),
            (
                "relative private_tmp",
                serde_json::to_vec(&relative_tmp).unwrap(),
            ),
            (
                "protection of the root",
                serde_json::to_vec(&root_protection).unwrap(),
            ),
            (
                "unknown protection kind",
                serde_json::to_vec(&bad_kind).unwrap(),
            ),
        ];
        for (what, bytes) in cases {
            let o = bootstrap_with(w, what, &bytes, 3);
            let line = assert_refused(&o, what);
            assert!(line.contains("manifest"), "{what}: {line}");
            assert!(!marker.exists(), "{what}: the target ran");
        }

        // Descriptors below 3 are never taken as the manifest, even a good one on stdin.
        let file = w.root.join("manifests/good-on-stdin");
        std::fs::write(&file, &good_bytes).unwrap();
        w.chown_all();
        let o = w
            .host(sandy_bin().to_str().unwrap())
            .args(["__bootstrap", "--manifest-fd", "0"])
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .unwrap();
        let line = assert_refused(&o, "fd 0");
        assert!(line.contains("manifest"), "fd 0: {line}");
        assert!(!marker.exists(), "fd 0: the target ran");

        // A descriptor that is not open.
        let o = w
            .host(sandy_bin().to_str().unwrap())
            .args(["__bootstrap", "--manifest-fd", "9"])
            .output()
            .unwrap();
        let line = assert_refused(&o, "fd 9 not open");
        assert!(line.contains("manifest"), "fd 9: {line}");

        let private_tmp = w.root.join("private-tmp");
        assert!(!private_tmp.join("from-inside").exists());

        // The positive neighbour: the same manifest, well-formed, runs its target, with
        // its protection and its private /tmp (a tmpfs) in place.
        let o = bootstrap_with(w, "good", &good_bytes, 3);
        assert_code(&o, 0, "good manifest");
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
        assert_eq!(
            std::fs::read_to_string(w.project.join("protected.txt")).unwrap(),
            "protected\n",
            "the protection was not applied: {}",
            stderr(&o)
        );
        // /tmp inside is a tmpfs of the manifest's size mounted on its private_tmp, in
        // the sandbox only: what the target wrote there never reaches the host's disk.
        assert!(
            !private_tmp.join("from-inside").exists(),
            "/tmp inside was the host directory itself"
        );
    });
}

/// A bootstrap started by hand has mounted no overlay ahead (only `sandy run`'s
/// bootstrap gets the supervisor's layers before its manifest): it mounts the manifest's
/// cache overlay itself, with the same result. Inside, the cache's files are there and a
/// write lands in the upper layer; outside, the host's cache is unchanged.
#[test]
fn a_bootstrap_started_by_hand_mounts_its_cache_overlays_itself() {
    for_each_user(|w| {
        let cache = w.home.join(".cache-tool");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(cache.join("kept.txt"), "from the host\n").unwrap();
        let layer = w.root.join("layer");
        std::fs::create_dir_all(layer.join("upper")).unwrap();
        std::fs::create_dir_all(layer.join("work-1")).unwrap();
        let cache = std::fs::canonicalize(&cache).unwrap();
        let layer = std::fs::canonicalize(&layer).unwrap();
        // The cache is granted writable: without the overlay, the write would reach it.
        let script = format!(
            "cat {c}/kept.txt > seen.txt && echo planted > {c}/build.rs",
            c = cache.display()
        );
        let mut m = manifest(w, &script);
        m["file_grants"].as_array_mut().unwrap().push(json!({
            "path": cache.to_str().unwrap(),
            "access": "read_write",
            "scope": "subtree",
        }));
        m["overlays"] = json!([{
            "lower": cache.to_str().unwrap(),
            "upper": layer.join("upper").to_str().unwrap(),
            "work": layer.join("work-1").to_str().unwrap(),
        }]);
        w.chown_all();
        let o = bootstrap_with(w, "overlay", &serde_json::to_vec(&m).unwrap(), 3);
        assert_code(&o, 0, "a manifest with a cache overlay");
        assert_eq!(
            std::fs::read_to_string(w.project.join("seen.txt")).unwrap(),
            "from the host\n"
        );
        assert!(
            !cache.join("build.rs").exists(),
            "the host cache was written"
        );
        assert_eq!(
            std::fs::read_to_string(layer.join("upper/build.rs")).unwrap(),
            "planted\n"
        );
    });
}

#[test]
fn usage_errors_exit_2() {
    for_each_user(|w| {
        assert_usage_error(&sandy(w, ["run"]), "run without a command");
        assert_usage_error(&sandy(w, ["run", "--"]), "run -- without a command");
        assert_usage_error(&sandy(w, ["run", "--bogus", "--", "true"]), "--bogus");
        assert_usage_error(&sandy(w, ["run", "--read"]), "--read without a path");
        assert_usage_error(&sandy(w, ["frobnicate"]), "unknown subcommand");
        assert_usage_error(&sandy(w, Vec::<&str>::new()), "no arguments");
        assert_usage_error(
            &sandy(w, ["__bootstrap", "--manifest-fd", "three"]),
            "non-numeric fd",
        );
    });
}

#[test]
fn version_and_help_exit_0() {
    for_each_user(|w| {
        let o = sandy(w, ["--version"]);
        assert_code(&o, 0, "--version");
        assert!(stdout(&o).starts_with("sandy "), "{}", stdout(&o));
        let o = sandy(w, ["run", "--help"]);
        assert_code(&o, 0, "run --help");
        let out = stdout(&o);
        for word in ["--read ", "--read-write", "--dry-run"] {
            assert!(out.contains(word), "run --help lacks {word}:\n{out}");
        }
        assert!(!out.contains("__bootstrap"), "{out}");
        let o = sandy(w, ["--help"]);
        assert_code(&o, 0, "--help");
        assert!(!stdout(&o).contains("__bootstrap"), "{}", stdout(&o));
    });
}

// ---------------------------------------------------------------------------------------
// Dry run
// ---------------------------------------------------------------------------------------

fn dry_run(w: &World, flags: &[&str], command: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["run", "--dry-run"];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(command);
    let mut cmd = w.sandy(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn parse(o: &Output) -> Value {
    assert_code(o, 0, "dry run");
    parse_dry_run(&o.stdout, "dry run")
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

fn sorted<'a>(k: &[&'a str]) -> Vec<&'a str> {
    let mut k = k.to_vec();
    k.sort_unstable();
    k
}

#[test]
fn a_dry_run_read_only_in_part_ends_quietly() {
    for_each_user(|w| {
        // `sandy run --dry-run | head -n 1`: the reader goes away after one line.
        let mut child = w
            .sandy(["run", "--dry-run", "--", "true"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_code(&o, 0, "dry run into a closed pipe");
        assert_eq!(stderr(&o), "", "nothing on stderr, no panic");
    });
}

#[test]
fn dry_run_prints_the_documented_document() {
    for_each_user(|w| {
        w.write("home/docs/readme.txt", "docs");
        w.write("home/.ssh/id_ed25519", "key");
        w.write("home/.netrc", "machine example.com");
        let docs = w.home.join("docs").display().to_string();
        let o = dry_run(w, &["--read", &docs], &["sh", "-c", "echo hi", ""], &[]);
        let doc = parse(&o);
        assert_eq!(
            keys(&doc),
            sorted(&[
                "dry_run_schema_version",
                "command",
                "arguments",
                "working_directory",
                "profile",
                "network",
                "host_services",
                "local_port_grants",
                "egress",
                "file_grants",
                "policy_files",
                "project_policy",
                "protections",
                "views",
                "created_at_launch",
                "state_files",
                "caches",
                "history",
                "agent_state",
                "environment",
                "runtime_controls",
                "enforcement",
                "ceilings",
                "tier",
            ])
        );
        assert_eq!(doc["dry_run_schema_version"], json!(7));
        let command = doc["command"].as_str().unwrap();
        assert!(
            Path::new(command).is_absolute() && command.ends_with("/sh"),
            "{command}"
        );
        assert_eq!(doc["arguments"], json!(["-c", "echo hi", ""]));
        let project = std::fs::canonicalize(&w.project).unwrap();
        assert_eq!(doc["working_directory"], json!(project.to_str().unwrap()));
        assert_eq!(keys(&doc["profile"]), sorted(&["name", "detected"]));
        assert!(doc["profile"]["name"].is_string());
        assert!(doc["profile"]["detected"].is_boolean());
        assert_eq!(doc["network"], json!("allow_all"));
        assert_eq!(doc["local_port_grants"], json!([]));
        assert_eq!(doc["host_services"]["open_ports"], json!([]));
        assert_eq!(doc["host_services"]["udp"], "name_resolution_only");

        let grants = doc["file_grants"].as_array().unwrap();
        for g in grants {
            assert_eq!(
                keys(g),
                sorted(&["path", "access", "scope", "origin", "reason"]),
                "{g}"
            );
            let path = g["path"].as_str().unwrap();
            assert!(Path::new(path).is_absolute(), "{g}");
            let access = g["access"].as_str().unwrap();
            assert!(["read", "read_exec", "read_write"].contains(&access), "{g}");
            let scope = g["scope"].as_str().unwrap();
            assert!(["exact", "subtree"].contains(&scope), "{g}");
            let origin = g["origin"].as_str().unwrap();
            assert!(
                ["baseline", "project", "path", "flag"].contains(&origin),
                "{g}"
            );
            // Nothing covers HOME, or the root.
            assert!(!w.home.starts_with(path) && path != "/", "{g}");
        }
        let grant_for = |p: &str| {
            grants
                .iter()
                .find(|g| g["path"] == json!(p))
                .unwrap_or_else(|| panic!("no grant for {p} in {grants:?}"))
        };
        let pg = grant_for(project.to_str().unwrap());
        assert_eq!(pg["origin"], json!("project"));
        assert_eq!(pg["access"], json!("read_write"));
        assert_eq!(pg["scope"], json!("subtree"));
        let fg = grant_for(&docs);
        assert_eq!(fg["origin"], json!("flag"));
        assert_eq!(fg["access"], json!("read"));
        assert_eq!(fg["scope"], json!("subtree"));
        let usr = grant_for("/usr");
        assert_eq!(usr["origin"], json!("baseline"));
        assert_eq!(usr["access"], json!("read_exec"));
        // The private directories appear under the names the target sees; the host's
        // per-run directory (which a dry run never creates) appears nowhere.
        for private in ["/tmp", "/dev/shm", "/var/tmp"] {
            let g = grant_for(private);
            assert_eq!(g["origin"], json!("baseline"), "{g}");
            assert_eq!(g["access"], json!("read_write"), "{g}");
            assert_eq!(g["scope"], json!("subtree"), "{g}");
        }
        for g in grants {
            let path = g["path"].as_str().unwrap();
            assert!(!Path::new(path).starts_with(&w.tmp), "{g}");
        }

        // Protections: the existing secrets are denied; the project's `.git`, which does
        // not exist yet, is read-only but carries no mount.
        let protections = doc["protections"].as_array().unwrap();
        for p in protections {
            assert_eq!(
                keys(p),
                sorted(&["path", "kind", "origin", "exists", "placeholder", "reason"]),
                "{p}"
            );
            // A profile's protection says which profile and why; the others need not.
            if p["origin"] == json!("profile") {
                assert!(
                    p["reason"].as_str().is_some_and(|r| r.contains("profile")),
                    "{p}"
                );
            } else {
                assert!(p["reason"].is_null() || p["reason"].is_string(), "{p}");
            }
            assert!(Path::new(p["path"].as_str().unwrap()).is_absolute(), "{p}");
            assert!(["deny", "read_only"].contains(&p["kind"].as_str().unwrap()));
            assert!(p["exists"].is_boolean(), "{p}");
        }
        let protection_for = |path: &Path| {
            protections
                .iter()
                .find(|p| p["path"] == json!(path.to_str().unwrap()))
                .unwrap_or_else(|| panic!("no protection for {path:?} in {protections:?}"))
                .clone()
        };
        let home = std::fs::canonicalize(&w.home).unwrap();
        for secret in [".ssh", ".netrc"] {
            let p = protection_for(&home.join(secret));
            assert_eq!(p["kind"], json!("deny"), "{p}");
            assert_eq!(p["origin"], json!("baseline"), "{p}");
            assert_eq!(p["exists"], json!(true), "{p}");
        }
        // Secrets that do not exist are not listed.
        assert!(
            !protections
                .iter()
                .any(|p| p["path"] == json!(home.join(".aws").to_str().unwrap())),
            "{protections:?}"
        );
        let dotgit = protection_for(&project.join(".git"));
        assert_eq!(dotgit["kind"], json!("read_only"), "{dotgit}");
        assert_eq!(dotgit["origin"], json!("project"), "{dotgit}");
        assert_eq!(dotgit["exists"], json!(false), "{dotgit}");

        assert_eq!(keys(&doc["environment"]), sorted(&["removed", "set"]));
        assert!(doc["environment"]["removed"].is_array());
        assert!(doc["environment"]["set"]
            .as_array()
            .unwrap()
            .contains(&json!("TMPDIR")));

        let controls = doc["runtime_controls"].as_array().unwrap();
        let services: Vec<&str> = controls
            .iter()
            .map(|c| c["service"].as_str().unwrap())
            .collect();
        assert_eq!(services, ["Kontext", "Numbat"]);
        for c in controls {
            assert_eq!(
                keys(c),
                sorted(&[
                    "service",
                    "enabled",
                    "version",
                    "path",
                    "script",
                    "configuration"
                ]),
                "{c}"
            );
            assert_eq!(c["enabled"], json!(false));
            assert_eq!(c["version"], json!(null));
        }

        let enforcement = &doc["enforcement"];
        assert_eq!(
            keys(enforcement),
            sorted(&["backend", "landlock_abi", "layers"])
        );
        assert_eq!(enforcement["backend"], json!("linux"));
        assert!(enforcement["landlock_abi"].as_u64().unwrap() >= 6);
        let layers = enforcement["layers"].as_array().unwrap();
        assert_eq!(
            layers.first(),
            Some(&json!("user_and_mount_namespaces")),
            "{layers:?}"
        );
        assert!(layers.contains(&json!("landlock")), "{layers:?}");
        assert!(layers.contains(&json!("seccomp")), "{layers:?}");

        // With a repository on the host, its hooks and config are listed as existing.
        let git = w
            .host("/usr/bin/git")
            .args(["init", "-q"])
            .output()
            .unwrap();
        assert_code(&git, 0, "git init on the host");
        let doc = parse(&dry_run(w, &[], &["true"], &[]));
        let protections = doc["protections"].as_array().unwrap();
        for name in ["hooks", "config"] {
            let path = project.join(".git").join(name);
            let p = protections
                .iter()
                .find(|p| p["path"] == json!(path.to_str().unwrap()))
                .unwrap_or_else(|| panic!("no protection for {path:?} in {protections:?}"));
            assert_eq!(p["kind"], json!("read_only"), "{p}");
            assert_eq!(p["origin"], json!("project"), "{p}");
            assert_eq!(p["exists"], json!(true), "{p}");
        }
    });
}

#[test]
fn dry_run_runs_nothing_and_creates_nothing() {
    for_each_user(|w| {
        let marker = w.project.join("marker");
        let o = dry_run(w, &[], &["/bin/sh", "-c", &marker_script(&marker)], &[]);
        parse(&o);
        assert!(!marker.exists(), "the dry run ran the command");
        let in_tmp: Vec<_> = std::fs::read_dir(&w.tmp).unwrap().flatten().collect();
        assert!(in_tmp.is_empty(), "the dry run created {in_tmp:?}");
        let in_project: Vec<_> = std::fs::read_dir(&w.project).unwrap().flatten().collect();
        assert!(in_project.is_empty(), "the dry run created {in_project:?}");
        // Refusals still apply to a dry run.
        let o = dry_run(w, &["--read", "/no/such/path"], &["true"], &[]);
        assert_refused(&o, "dry run with a missing --read");
        assert!(o.stdout.is_empty());
    });
}

const SECRET_ENV: &[(&str, &str)] = &[
    ("SSH_AUTH_SOCK", "/secret-canary-xyz/agent.sock"),
    ("SSH_AGENT_PID", "4242"),
    ("SUDO_ASKPASS", "/secret-canary-xyz/sudo-askpass"),
    ("GPG_AGENT_INFO", "/secret-canary-xyz/S.gpg-agent:0:1"),
    ("MY_TOKEN", "canary-xyz-token"),
    ("MY_SETTING", "canary-xyz-setting"),
    ("GIT_ASKPASS", "/secret-canary-xyz/askpass"),
    ("SSH_ASKPASS", "/secret-canary-xyz/ssh-askpass"),
    (
        "DBUS_SESSION_BUS_ADDRESS",
        "unix:path=/secret-canary-xyz/bus",
    ),
    ("LD_LIBRARY_PATH", "/secret-canary-xyz/lib"),
    ("LD_PRELOAD", ""),
];

/// The names in `SECRET_ENV` that Sandy removes.
const REMOVED_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SUDO_ASKPASS",
    "GPG_AGENT_INFO",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "DBUS_SESSION_BUS_ADDRESS",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    // A credential by its name (issue 35).
    "MY_TOKEN",
];

#[test]
fn dry_run_names_removed_variables_but_never_shows_values() {
    for_each_user(|w| {
        let o = dry_run(w, &[], &["env"], SECRET_ENV);
        let doc = parse(&o);
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(!all.contains("canary-xyz"), "a value leaked:\n{all}");
        let removed = doc["environment"]["removed"].as_array().unwrap();
        for name in REMOVED_NAMES {
            assert!(removed.contains(&json!(name)), "{name} not in {removed:?}");
        }
        assert!(!removed.contains(&json!("MY_SETTING")), "{removed:?}");
    });
}

#[test]
fn the_target_does_not_see_removed_variables() {
    for_each_user(|w| {
        let mut cmd = w.sandy(["run", "--", "env"]);
        for (k, v) in SECRET_ENV {
            cmd.env(k, v);
        }
        let tmp = w.tmp.display().to_string();
        cmd.env("TMP", &tmp).env("TEMPDIR", &tmp);
        let o = cmd.output().unwrap();
        assert_code(&o, 0, "env");
        let out = stdout(&o);
        let names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
        for name in REMOVED_NAMES {
            assert!(!names.contains(name), "the target saw {name}:\n{out}");
        }
        // The positive neighbours: ordinary variables pass through unchanged.
        assert!(
            out.lines().any(|l| l == "MY_SETTING=canary-xyz-setting"),
            "{out}"
        );
        let home = format!("HOME={}", w.home.display());
        assert!(out.lines().any(|l| l == home), "{out}");
        // The temporary-directory variables the caller had name the private /tmp; TEMP,
        // which the caller did not have, is not invented.
        for var in ["TMPDIR", "TMP", "TEMPDIR"] {
            let want = format!("{var}=/tmp");
            assert!(out.lines().any(|l| l == want), "no {want}:\n{out}");
        }
        assert!(!names.contains(&"TEMP"), "{out}");
    });
}

/// `sandy completions bash|zsh|fish` prints a script the shell takes (bash registers it
/// with `complete`, and completing `sandy r` offers `run` and `restore`), and `sandy man`
/// a page `man -l` renders with every option of `sandy run --help`.
#[test]
fn completions_and_the_manual_page_come_from_the_option_definitions() {
    let bash = Command::new(sandy_bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_code(&bash, 0, "sandy completions bash");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sandy.bash");
    std::fs::write(&script, &bash.stdout).unwrap();
    let check = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p sandy && COMP_WORDS=(sandy r) COMP_CWORD=1 \
             && _sandy sandy r sandy && echo \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let out = stdout(&check);
    assert!(out.contains("-F _sandy sandy"), "{out}{}", stderr(&check));
    assert!(out.contains("run") && out.contains("restore"), "{out}");
    for shell in ["zsh", "fish"] {
        let o = Command::new(sandy_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_code(&o, 0, shell);
        assert!(stdout(&o).contains("sandy"), "{shell}");
    }
    let bad = Command::new(sandy_bin())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_code(&bad, 2, "an unknown shell is a usage error");

    let man = Command::new(sandy_bin()).arg("man").output().unwrap();
    assert_code(&man, 0, "sandy man");
    let page = dir.path().join("sandy.1");
    std::fs::write(&page, &man.stdout).unwrap();
    let rendered = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&page)
        .env("MANWIDTH", "200")
        .output();
    let text = match rendered {
        Ok(o) if o.status.success() => stdout(&o),
        // Without man-db, groff renders it the same way.
        _ => {
            let o = Command::new("groff")
                .args(["-man", "-Tutf8"])
                .arg(&page)
                .output()
                .unwrap();
            assert_code(&o, 0, "groff -man");
            stdout(&o)
        }
    };
    assert!(text.contains("SANDY RUN OPTIONS"), "{text}");
    let help = Command::new(sandy_bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    for option in stdout(&help)
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches([',', '.'])
                .split(['=', '[', '<'])
                .next()
                .unwrap()
        })
    {
        assert!(text.contains(option), "{option} is not in the manual page");
    }
}

// ---------------------------------------------------------------------------------------
// The README's option table, and the report after a run
// ---------------------------------------------------------------------------------------

/// The long options (`--name`) a text names.
fn long_options(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        rest = &rest[at + 2..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            found.push(format!("--{name}"));
        }
        rest = &rest[name.len()..];
    }
    found
}

/// Every long option of `sandy run --help` is in the README's option table, and every
/// option the table names exists.
#[test]
fn the_readme_option_table_is_sandy_runs_options() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let table: std::collections::BTreeSet<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `-"))
        .flat_map(|l| long_options(l.split('|').nth(1).unwrap_or_default()))
        .collect();
    let o = Command::new(sandy_bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert_code(&o, 0, "run --help");
    let help: std::collections::BTreeSet<String> = stdout(&o)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            // `-v, --verbose`
            let l = match l.as_bytes() {
                [b'-', c, b',', b' ', ..] if c.is_ascii_alphabetic() => &l[4..],
                _ => l,
            };
            l.starts_with("--")
                .then(|| long_options(l).into_iter().next())
                .flatten()
        })
        .collect();
    assert!(help.len() > 20, "{help:?}");
    let missing: Vec<_> = help.difference(&table).collect();
    assert!(missing.is_empty(), "not in the README's table: {missing:?}");
    let unknown: Vec<_> = table.difference(&help).collect();
    assert!(
        unknown.is_empty(),
        "in the README's table, not in --help: {unknown:?}"
    );
}

/// A run that needs nothing of the user ends with at most one line of Sandy's; `-v`
/// prints the full report: the detected profile, the state directories made at first
/// launch, the new cache layer, the agent setting not kept.
#[test]
fn a_clean_run_prints_one_line_and_verbose_the_whole_report() {
    for_each_user(|w| {
        // `claude` on PATH, detected by its name: it writes a setting Sandy does not keep
        // into its state file. A package cache gets its layer at the first run.
        let bin = w.home.join(".local/bin");
        w.write(
            "home/.local/bin/claude",
            "#!/usr/bin/python3\nimport json, os\n\
             p = os.environ['CLAUDE_CONFIG_DIR'] + '/.claude.json'\n\
             t = open(p).read()\nd = json.loads(t) if t.strip() else {}\n\
             d['someNewFlag'] = True\nopen(p, 'w').write(json.dumps(d))\n",
        );
        std::fs::set_permissions(
            bin.join("claude"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::create_dir_all(w.home.join(".npm")).unwrap();
        w.chown_all();
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
        let run = |flags: &[&str]| {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "claude"]);
            w.sandy(args).env("PATH", &path).output().unwrap()
        };

        let o = run(&[]);
        assert_code(&o, 0, "a clean run");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        for part in [
            "sandy: profile 'claude'; ",
            "created ",
            "new copy-on-write layer",
            "someNewFlag",
            "Details: sandy run -v",
        ] {
            assert!(err.contains(part), "{part:?} missing:\n{err}");
        }

        // The same first run again, with -v.
        for made in [".claude", ".claude.json"] {
            let p = w.home.join(made);
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
        assert_code(&sandy(w, ["cache", "--clear"]), 0, "cache --clear");
        let o = run(&["-v"]);
        assert_code(&o, 0, "a clean run with -v");
        let err = stderr(&o);
        for line in [
            "sandy: using profile 'claude' (override with --profile)",
            "sandy: first launch of the 'claude' profile: created ",
            " is copy-on-write inside; the sandbox's changes are kept in ",
            "not kept: the run's changes to someNewFlag: settings the agent changed",
        ] {
            assert!(err.contains(line), "{line:?} missing:\n{err}");
        }
        assert!(err.lines().count() >= 4, "{err}");
        assert!(!err.contains("Details: sandy run -v"), "{err}");
    });
}
