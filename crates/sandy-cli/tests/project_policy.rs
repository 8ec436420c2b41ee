//! The project policy (issue 42, item 5), through the real binary: a `sandy.toml` at the
//! top of the project applies only while its content is the one the user trusted with
//! `sandy trust`, outside the sandbox. Untrusted: ignored with one line, the launch goes
//! on; trusted: its grants work, with the origin `project_file` in the dry run; changed
//! since (the run itself rewrote it): refused before launch, so the grant it added never
//! reaches a run (judged from the host); revoked: ignored again. A symbolic link is never
//! followed, and a project policy can neither grant the sensitive set nor drop a
//! protection.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SIBLING: &str = "SIBLING-project-policy-4c2a";
const SECRET: &str = "SECRET-project-policy-90d7";

const SIBLING_POLICY: &str = "version = 1\n\n[[grants]]\npath = \"../sibling\"\n\
                              access = \"read\"\nreason = \"the sibling checkout\"\n";

fn sibling(w: &World) -> PathBuf {
    w.write("home/sibling/notes.txt", SIBLING)
}

fn project_file(w: &World, text: &str) -> PathBuf {
    w.write("home/project/sandy.toml", text)
}

fn records(w: &World) -> PathBuf {
    w.home.join(".config/sandy/trusted")
}

/// The trust records on the host: (name, content) each.
fn record_files(w: &World) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(records(w)) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = dir
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn trust(w: &World, args: &[&str]) -> std::process::Output {
    let mut all = vec!["trust"];
    all.extend_from_slice(args);
    w.sandy(all).output().unwrap()
}

fn dry_run(w: &World) -> Value {
    let o = w
        .sandy(["run", "--dry-run", "--", "true"])
        .output()
        .unwrap();
    assert_code(&o, 0, "dry run");
    parse_dry_run(&o.stdout, "dry run")
}

fn project_grants(doc: &Value) -> Vec<Value> {
    doc["file_grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["origin"] == "project_file")
        .cloned()
        .collect()
}

/// `cat` of `file` inside a run: its content, or nothing.
fn read_inside(w: &World, file: &Path) -> std::process::Output {
    w.sh(&[], &format!("cat {}; exit 0", file.display()))
}

/// The lines of stderr naming the project policy.
fn policy_lines(o: &std::process::Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.contains("sandy.toml"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_untrusted_project_policy_is_ignored_and_a_trusted_one_applies_until_revoked() {
    for_each_user(|w| {
        let notes = sibling(w);
        let file = project_file(w, SIBLING_POLICY);

        // Untrusted: ignored with one line saying how to trust it; the run goes on.
        let o = read_inside(w, &notes);
        assert_code(&o, 0, "a run with an untrusted sandy.toml");
        assert!(!stdout(&o).contains(SIBLING), "{}", stdout(&o));
        let lines = policy_lines(&o);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("not trusted") && lines[0].contains("sandy trust"),
            "{lines:?}"
        );
        let doc = dry_run(w);
        assert_eq!(doc["project_policy"]["trust"], "untrusted");
        assert_eq!(doc["project_policy"]["path"], file.to_str().unwrap());
        assert!(project_grants(&doc).is_empty());

        // No terminal and no --yes: shown, not trusted.
        let o = trust(w, &[]);
        assert_code(&o, 2, "sandy trust without a terminal");
        assert!(
            stdout(&o).contains("the sibling checkout"),
            "{}",
            stdout(&o)
        );
        assert!(record_files(w).is_empty());

        // Trusted: what it adds, in words and as dry-run rules; the record on the host.
        let o = trust(w, &["--yes"]);
        assert_code(&o, 0, "sandy trust --yes");
        let out = stdout(&o);
        let sibling_dir = notes.parent().unwrap().to_str().unwrap().to_owned();
        assert!(out.contains(&format!("read {sibling_dir}")), "{out}");
        assert!(out.contains("\"origin\": \"project_file\""), "{out}");
        let recorded = record_files(w);
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        let hash = sha256_hex(&std::fs::read(&file).unwrap());
        assert!(recorded[0].1.contains(&hash), "{recorded:?}");
        assert!(
            recorded[0].1.contains(w.project.to_str().unwrap()),
            "{recorded:?}"
        );

        let o = read_inside(w, &notes);
        assert_code(&o, 0, "a run with the trusted sandy.toml");
        assert!(stdout(&o).contains(SIBLING), "{}", stderr(&o));
        assert!(policy_lines(&o).is_empty(), "{}", stderr(&o));
        let doc = dry_run(w);
        assert_eq!(doc["project_policy"]["trust"], "trusted");
        assert_eq!(doc["project_policy"]["sha256"], hash.as_str());
        let grants = project_grants(&doc);
        assert_eq!(grants.len(), 1, "{grants:?}");
        assert_eq!(grants[0]["path"], sibling_dir.as_str());
        assert_eq!(grants[0]["reason"], "the sibling checkout");
        assert!(doc["policy_files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["origin"] == "project_file" && f["path"] == file.to_str().unwrap()));

        // Revoked: the record is gone from the host, and runs ignore the file again.
        let o = trust(w, &["--revoke"]);
        assert_code(&o, 0, "sandy trust --revoke");
        assert!(record_files(w).is_empty());
        let o = read_inside(w, &notes);
        assert_code(&o, 0, "a run after the revocation");
        assert!(!stdout(&o).contains(SIBLING));
        assert_eq!(policy_lines(&o).len(), 1, "{}", stderr(&o));
    });
}

#[test]
fn a_run_that_rewrites_the_trusted_project_policy_gains_nothing_from_it() {
    for_each_user(|w| {
        let notes = sibling(w);
        let secret = w.write("home/private/secret.txt", SECRET);
        let file = project_file(w, SIBLING_POLICY);
        assert_code(&trust(w, &["--yes"]), 0, "sandy trust --yes");
        let record_before = record_files(w);

        // The run may write its project, sandy.toml included.
        let grant = format!(
            "\n[[grants]]\npath = \"{}\"\naccess = \"read\"\nreason = \"helpful\"\n",
            secret.parent().unwrap().display()
        );
        let o = w.sh(
            &[],
            &format!("printf '%s' '{grant}' >> sandy.toml && echo REWROTE"),
        );
        assert_code(&o, 0, "a run that rewrites sandy.toml");
        assert!(stdout(&o).contains("REWROTE"));
        // Judged from the host: the file changed, the record did not.
        assert!(std::fs::read_to_string(&file).unwrap().contains("helpful"));
        assert_eq!(record_files(w), record_before);

        // The next launch is refused before anything runs: the new grant never applies.
        let o = read_inside(w, &secret);
        assert_code(&o, 125, "a launch after the rewrite");
        assert!(!stdout(&o).contains(SECRET));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("changed since you trusted it: review with `sandy trust`"),
            "{err}"
        );
        let o = w
            .sandy(["run", "--dry-run", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 125, "a dry run after the rewrite");
        // Not even the grant trusted before applies.
        let o = read_inside(w, &notes);
        assert_code(&o, 125, "the sibling after the rewrite");

        // Put back as it was trusted: applies again, and the secret stays unreadable.
        std::fs::write(&file, SIBLING_POLICY).unwrap();
        let o = w.sh(
            &[],
            &format!("cat {}; cat {}; exit 0", notes.display(), secret.display()),
        );
        assert_code(&o, 0, "a launch with the trusted content back");
        assert!(stdout(&o).contains(SIBLING) && !stdout(&o).contains(SECRET));
    });
}

#[test]
fn a_symlinked_project_policy_is_never_followed() {
    for_each_user(|w| {
        let notes = sibling(w);
        let elsewhere = w.write("home/elsewhere.toml", SIBLING_POLICY);
        let link = w.project.join("sandy.toml");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        w.chown_all();

        let o = trust(w, &["--yes"]);
        assert_code(&o, 125, "sandy trust of a link");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("symbolic link"), "{err}");
        assert!(record_files(w).is_empty());

        // Never trusted: a launch ignores it with one line.
        let o = read_inside(w, &notes);
        assert_code(&o, 0, "a run with a linked sandy.toml");
        assert!(!stdout(&o).contains(SIBLING));
        assert_eq!(policy_lines(&o).len(), 1, "{}", stderr(&o));

        // Trusted as a regular file, then swapped for a link to the same content: refused.
        std::fs::remove_file(&link).unwrap();
        project_file(w, SIBLING_POLICY);
        assert_code(&trust(w, &["--yes"]), 0, "sandy trust --yes");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let o = read_inside(w, &notes);
        assert_code(&o, 125, "a run after the swap for a link");
        assert!(!stdout(&o).contains(SIBLING));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    });
}

#[test]
fn a_project_policy_cannot_grant_the_sensitive_set_or_drop_a_protection() {
    for_each_user(|w| {
        w.write("home/.ssh/id_ed25519", "KEY-project-policy");
        project_file(
            w,
            "version = 1\n[[grants]]\npath = \"~/.ssh\"\naccess = \"read\"\nreason = \"keys\"\n",
        );
        let o = trust(w, &["--yes"]);
        assert_code(&o, 125, "trusting a grant of ~/.ssh");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("sensitive"), "{err}");
        assert!(record_files(w).is_empty());

        // Keys that would remove or choose protections are not in the format.
        for body in [
            "[[protections]]\npath = \"/etc\"\nkind = \"read_only\"\nreason = \"r\"",
            "[unmask]\npaths = [\"~/.ssh\"]",
            "[network]\nmode = \"host\"",
            "[environment]\npass = [\"GITHUB_TOKEN\"]",
        ] {
            project_file(w, &format!("version = 1\n{body}\n"));
            let o = trust(w, &["--yes"]);
            assert_code(&o, 125, body);
            assert!(stderr(&o).contains("unknown field"), "{}", stderr(&o));
            assert!(record_files(w).is_empty());
        }

        // A writable grant of a sibling repository keeps its git hooks protected.
        let repo = w.home.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        w.chown_all();
        let git = w
            .host("/usr/bin/git")
            .args(["init", "-q"])
            .arg(&repo)
            .output()
            .unwrap();
        assert_code(&git, 0, "git init on the host");
        project_file(
            w,
            "version = 1\n[[grants]]\npath = \"../repo\"\naccess = \"read_write\"\n\
             reason = \"the sibling repository\"\n",
        );
        assert_code(&trust(w, &["--yes"]), 0, "sandy trust --yes");
        let hook = repo.join(".git/hooks/pre-commit");
        let o = w.sh(
            &[],
            &format!(
                "echo made > {repo}/made.txt; echo evil > {hook} && echo PLANTED; exit 0",
                repo = repo.display(),
                hook = hook.display()
            ),
        );
        assert_code(&o, 0, "a run with the trusted writable grant");
        assert!(!stdout(&o).contains("PLANTED"), "{}", stdout(&o));
        assert_eq!(
            std::fs::read_to_string(repo.join("made.txt")).unwrap(),
            "made\n"
        );
        assert!(!hook.exists(), "a hook planted through the project policy");
    });
}

#[test]
fn a_trust_record_the_run_could_write_is_refused() {
    for_each_user(|w| {
        let notes = sibling(w);
        project_file(w, SIBLING_POLICY);
        let config_home = w.root.join("config");
        std::fs::create_dir_all(&config_home).unwrap();
        w.chown_all();
        let xdg = ("XDG_CONFIG_HOME", config_home.to_str().unwrap());
        let o = w
            .sandy(["trust", "--yes"])
            .env(xdg.0, xdg.1)
            .output()
            .unwrap();
        assert_code(&o, 0, "sandy trust --yes with XDG_CONFIG_HOME");
        assert!(config_home.join("sandy/trusted").is_dir());

        let script = format!("cat {}; exit 0", notes.display());
        let o = w
            .sandy(["run", "--", "/bin/sh", "-c", &script])
            .env(xdg.0, xdg.1)
            .output()
            .unwrap();
        assert_code(&o, 0, "a run with the record out of reach");
        assert!(stdout(&o).contains(SIBLING));

        // A run that could write the record could trust anything for the next one.
        let grant = format!("--read-write={}", config_home.display());
        let o = w
            .sandy(["run", &grant, "--", "/bin/sh", "-c", &script])
            .env(xdg.0, xdg.1)
            .output()
            .unwrap();
        assert_code(&o, 125, "a run that could write the trust record");
        assert!(!stdout(&o).contains(SIBLING));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("trust record"), "{err}");
    });
}

#[test]
fn sandy_trust_asks_on_the_terminal() {
    for_each_user(|w| {
        let notes = sibling(w);
        project_file(w, SIBLING_POLICY);
        let script = helper(w, "pty_run.py");
        let ask = |answer: &str| {
            let mut cmd = w.host("/usr/bin/python3");
            cmd.arg(&script)
                .args(["--timeout", "20", "--send-after", "[y/N]", answer, "--"])
                .arg(sandy_bin())
                .arg("trust")
                .stdin(std::process::Stdio::null());
            run_timeout(cmd, 40)
        };
        // Declined: exit 1, nothing recorded, the grant does not apply.
        let o = ask("n\\r");
        assert_code(&o, 1, "sandy trust, declined");
        assert!(stdout(&o).contains("not trusted"), "{}", stdout(&o));
        assert!(record_files(w).is_empty());
        assert!(!stdout(&read_inside(w, &notes)).contains(SIBLING));
        // Confirmed: recorded, and the grant applies.
        let o = ask("y\\r");
        assert_code(&o, 0, "sandy trust, confirmed");
        assert_eq!(record_files(w).len(), 1);
        assert!(stdout(&read_inside(w, &notes)).contains(SIBLING));
    });
}
