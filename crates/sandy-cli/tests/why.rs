//! `sandy why` agrees with what a real run does: for a table of paths and accesses, the
//! answer (allowed or refused) is compared with the outcome of the same access attempted
//! inside `sandy run` with the same grants, judged from the host where a write could land.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

/// (question flag, path relative to the world root or absolute, extra grant flags)
fn table(w: &World, carried: &std::path::Path) -> Vec<(&'static str, String, Vec<String>)> {
    let r = |p: &str| w.root.join(p).display().to_string();
    let other = r("home/other");
    let carried_s = carried.display().to_string();
    vec![
        // A grant carried into the private /tmp is a read-only mount of its own.
        (
            "write",
            format!("{carried_s}/f"),
            vec!["--read".into(), carried_s.clone()],
        ),
        (
            "read",
            format!("{carried_s}/data"),
            vec!["--read".into(), carried_s],
        ),
        ("read", r("home/project/file.txt"), vec![]),
        ("write", r("home/project/file.txt"), vec![]),
        ("read", r("home/project/.git/config"), vec![]),
        ("write", r("home/project/.git/config"), vec![]),
        ("write", r("home/project/.git/hooks/pre-commit"), vec![]),
        ("read", r("home/.ssh/id_ed25519"), vec![]),
        (
            "read",
            r("home/.ssh/id_ed25519"),
            vec!["--read".into(), r("home")],
        ),
        ("read", r("home/.bashrc"), vec![]),
        ("write", r("home/.bashrc"), vec![]),
        ("read", r("home/other/data"), vec![]),
        (
            "read",
            r("home/other/data"),
            vec!["--read".into(), other.clone()],
        ),
        (
            "write",
            r("home/other/data"),
            vec!["--read".into(), other.clone()],
        ),
        (
            "write",
            r("home/other/data"),
            vec!["--read-write".into(), other.clone()],
        ),
        (
            "exec",
            r("home/other/tool"),
            vec!["--read".into(), other.clone()],
        ),
        (
            "exec",
            r("home/other/tool"),
            vec!["--read-write".into(), other],
        ),
        ("write", "/tmp/sandy-why-new".into(), vec![]),
        ("read", "/etc/hostname".into(), vec![]),
        ("write", "/etc/hostname".into(), vec![]),
        ("exec", "/usr/bin/env".into(), vec![]),
        ("write", "/usr/bin/env".into(), vec![]),
    ]
}

fn attempt(question: &str, path: &str) -> String {
    match question {
        "read" => format!("cat '{path}' >/dev/null 2>&1"),
        "write" => format!("( : >> '{path}' ) 2>/dev/null"),
        _ => format!("'{path}' >/dev/null 2>&1 </dev/null"),
    }
}

#[test]
fn why_agrees_with_a_real_run() {
    for_each_user(|w| {
        w.write("home/project/file.txt", "data\n");
        w.write("home/.ssh/id_ed25519", "key\n");
        w.write("home/.bashrc", "alias ll='ls -l'\n");
        w.write("home/other/data", "data\n");
        let tool = w.write("home/other/tool", "#!/bin/sh\nexit 0\n");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let o = w.host("git").args(["init", "-q"]).output().unwrap();
        assert_code(&o, 0, "git init");
        w.chown_all();
        let carried = tempfile::Builder::new()
            .prefix("sandy-e2e-why-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::write(carried.path().join("data"), "d\n").unwrap();
        for p in [carried.path().to_path_buf(), carried.path().join("data")] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        for (question, path, grants) in table(w, carried.path()) {
            let mut why: Vec<String> = vec!["why".into(), "--json".into()];
            why.extend(grants.iter().cloned());
            if question != "read" {
                why.push(format!("--{question}"));
            }
            why.push(path.clone());
            let o = w.sandy(&why).output().unwrap();
            let code = o.status.code();
            assert!(matches!(code, Some(0 | 1)), "{why:?}: {}", stderr(&o));
            let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(doc["why_schema_version"], 1);
            let said = doc["allowed"].as_bool().unwrap();
            assert_eq!(said, code == Some(0), "{why:?}");
            if !said {
                assert!(
                    doc["flag"].is_string() || doc["unchangeable"].is_string(),
                    "a refusal names a flag or why none can: {doc}"
                );
            }

            let mut run: Vec<String> = vec!["run".into()];
            run.extend(grants.iter().cloned());
            run.extend([
                "--".into(),
                "sh".into(),
                "-c".into(),
                attempt(question, &path),
            ]);
            let o = w.sandy(&run).output().unwrap();
            let did = o.status.code() == Some(0);
            assert_eq!(
                said,
                did,
                "why said {said} but the run {} for {question} {path} with {grants:?}\n{doc}",
                if did { "succeeded" } else { "failed" }
            );
            // A flag named by why really allows it.
            if let Some(flag) = doc["flag"].as_str() {
                let (name, value) = flag.split_once(' ').unwrap();
                let mut run: Vec<String> = vec!["run".into(), name.into(), value.into()];
                run.extend(grants.iter().cloned());
                run.extend([
                    "--".into(),
                    "sh".into(),
                    "-c".into(),
                    attempt(question, &path),
                ]);
                let o = w.sandy(&run).output().unwrap();
                assert_code(
                    &o,
                    0,
                    &format!("{question} {path} with the suggested {flag}"),
                );
            }
        }
    });
}

/// The rule line keeps a path's case, and names access, scope and origin as the dry run
/// does.
#[test]
fn why_keeps_the_case_of_the_path_in_its_rule() {
    for_each_user(|w| {
        let file = w.write("home/Shared/Lib/Notes.txt", "x\n");
        let dir = w.home.join("Shared/Lib");
        let o = w
            .sandy([
                "why",
                "--read",
                dir.to_str().unwrap(),
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "why of a granted file");
        let out = stdout(&o);
        let rule = format!(
            "rule: granted read on {} (subtree, origin flag)",
            dir.display()
        );
        assert!(out.contains(&rule), "{out}");
    });
}

/// `sandy why` takes the launch's `--execute` grants and its profile or policy file, as
/// `sandy run` does: the answer changes with each, and a refused neighbour stays refused.
#[test]
fn why_follows_execute_grants_and_policy_files() {
    for_each_user(|w| {
        let tool = w.write("home/tools/bin/tool", "#!/bin/sh\n");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let notes = w.write("home/notes/todo.txt", "x\n");
        let neighbour = w.write("home/private/diary.txt", "x\n");
        let tools = w.home.join("tools");
        let why = |args: &[&str]| w.sandy(["why"].iter().chain(args)).output().unwrap();
        let t = tool.to_str().unwrap();
        let data = w.write("home/tools/share/data.txt", "x\n");
        // Without the grant, running it is refused; with it, running it is allowed (a
        // script is read by its interpreter, so it is readable too) and the tree's other
        // files stay unreadable.
        assert_code(&why(&["--exec", t]), 1, "exec without --execute");
        let o = why(&["--execute", tools.to_str().unwrap(), "--exec", t]);
        assert_code(&o, 0, "exec under --execute");
        assert!(stdout(&o).contains("execute"), "{}", stdout(&o));
        assert_code(
            &why(&["--execute", tools.to_str().unwrap(), data.to_str().unwrap()]),
            1,
            "a data file under --execute",
        );
        // A policy file's grant answers as the flag's would, with its origin.
        let policy = w.write(
            "home/policies/notes.toml",
            "version = 1\n[[grants]]\npath = \"~/notes\"\naccess = \"read\"\nreason = \"the notes\"\n",
        );
        let n = notes.to_str().unwrap();
        assert_code(&why(&[n]), 1, "read without the policy file");
        let o = why(&["--policy-file", policy.to_str().unwrap(), n]);
        assert_code(&o, 0, "read under the policy file");
        assert_code(
            &why(&[
                "--policy-file",
                policy.to_str().unwrap(),
                neighbour.to_str().unwrap(),
            ]),
            1,
            "the neighbour under the policy file",
        );
        // A policy file excludes grant flags, as for `sandy run`.
        assert_code(
            &why(&["--policy-file", policy.to_str().unwrap(), "--read", n, n]),
            2,
            "a policy file with a grant flag",
        );
        // A user profile in a file, extending a built-in one, adds its grant.
        let profile = w.write(
            "home/profiles/notes.toml",
            "version = 1\nextends = \"generic\"\n[[grants]]\npath = \"~/notes\"\naccess = \"read\"\nreason = \"the notes\"\n",
        );
        let o = why(&["--profile-file", profile.to_str().unwrap(), n]);
        assert_code(&o, 0, "read under the profile file");
    });
}

#[test]
fn why_explains_in_one_readable_answer() {
    for_each_user(|w| {
        w.write("home/.ssh/id_ed25519", "key\n");
        let o = w
            .sandy(["why", &w.home.join(".ssh/id_ed25519").display().to_string()])
            .output()
            .unwrap();
        assert_code(&o, 1, "why of a masked secret");
        let out = stdout(&o);
        assert!(
            out.starts_with(&format!(
                "read {}: refused",
                w.home.join(".ssh/id_ed25519").display()
            )),
            "{out}"
        );
        assert!(out.contains("rule: masked"), "{out}");
        assert!(out.contains("no flag changes this"), "{out}");
        let o = w.sandy(["why", "--write", "--exec", "x"]).output().unwrap();
        assert_code(&o, 2, "two questions at once");
    });
}

/// Issue 15 item 5: the dry run for people is a short summary of the same policy.
#[test]
fn the_text_dry_run_summarises_the_policy() {
    for_each_user(|w| {
        w.write("home/.ssh/id_ed25519", "key\n");
        w.write("home/.bashrc", "export A_TOKEN=x\n");
        let docs = w.write("home/docs/readme", "r\n");
        let docs = docs.parent().unwrap().display().to_string();
        let o = w
            .sandy([
                "run",
                "--dry-run",
                "--format",
                "text",
                "--read",
                &docs,
                "--",
                "true",
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "text dry run");
        let out = stdout(&o);
        // Continuation lines (indented) belong to the label above them.
        let labels: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with(' '))
            .map(|l| l.split(':').next().unwrap())
            .collect();
        assert_eq!(
            labels,
            [
                "command",
                "project",
                "writable",
                "readable",
                "masked",
                "protected",
                "copies",
                "network"
            ],
            "{out}"
        );
        assert!(out.contains("~/docs [read] (flag)"), "{out}");
        assert!(out.contains("masked:     ~/.ssh"), "{out}");
        assert!(
            out.contains("~/.bashrc [filtered copy, 1 line dropped]"),
            "{out}"
        );
        assert!(!out.contains("A_TOKEN"), "{out}");
        assert!(
            out.contains("the host's own services closed")
                && out.contains("(port 53 only); other UDP has no route"),
            "{out}"
        );
        let o = w
            .sandy(["run", "--format", "text", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 2, "--format without --dry-run");
    });
}

/// Issue 15 item 3: inside, the sandbox can read its own policy, and `sandy why` answers
/// for that sandbox (judged against what the same sandbox then does).
#[test]
fn why_inside_answers_for_the_sandbox_itself() {
    for_each_user(|w| {
        w.write("home/.bashrc", "alias ll='ls -l'\n");
        w.write("home/other/data", "data\n");
        let sandy = w.project.join("sandy");
        std::fs::copy(sandy_bin(), &sandy).unwrap();
        w.chown_all();
        let other = w.home.join("other");
        let script = format!(
            "test -r /run/sandy/policy.json && echo readable; \
             ( : > /run/sandy/policy.json ) 2>/dev/null || echo read-only; \
             ./sandy why --json --write {h}/.bashrc; echo \"exit=$?\"; \
             ./sandy why {o}/data; echo \"exit=$?\"; \
             ./sandy why --json {o}/data; \
             ./sandy why --write file.txt; echo \"exit=$?\"",
            h = w.home.display(),
            o = other.display()
        );
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "why inside");
        let out = stdout(&o);
        assert!(out.starts_with("readable\nread-only\n"), "{out}");
        assert!(out.contains("\"inside\": true"), "{out}");
        assert!(out.contains("\"rule\": \"view\""), "{out}");
        assert!(
            out.contains(&format!("read {}/data: refused", other.display())),
            "{out}"
        );
        assert!(
            out.contains(&format!("\"flag\": \"--read {}/data\"", other.display())),
            "{out}"
        );
        assert!(out.contains("the user can add that flag"), "{out}");
        assert!(
            out.contains("write file.txt: allowed") || out.contains("/file.txt: allowed"),
            "{out}"
        );
        let exits: Vec<&str> = out.lines().filter(|l| l.starts_with("exit=")).collect();
        assert_eq!(exits, ["exit=1", "exit=1", "exit=0"], "{out}");
    });
}

/// `sandy why --connect` agrees with the egress proxy of a real run with the same rules:
/// a refusal there is the proxy's immediate 403 (decided before any DNS lookup), an
/// allowance is never one.
#[test]
fn why_connect_agrees_with_the_proxy() {
    for_each_user(|w| {
        let rules = [
            "--allow-domain",
            "*.example.com",
            "--deny-domain",
            "bad.example.com",
        ];
        let table = [
            ("www.example.com:80", true),
            ("WWW.Example.COM.:80", true),
            ("bad.example.com:80", false),
            ("example.org:80", false),
            ("www.example.com:8080", false),
            ("169.254.169.254:80", false),
            ("10.0.0.5:80", false),
        ];
        for (target, expected) in table {
            let mut why: Vec<&str> = vec!["why", "--connect", "--json"];
            why.extend(rules);
            why.push(target);
            let o = w.sandy(&why).output().unwrap();
            let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(doc["allowed"], expected, "{target}: {doc}");
            assert_eq!(o.status.code(), Some(if expected { 0 } else { 1 }));
            // A refused name suggests the flag that would allow it; a metadata or private
            // address never does (the section of docs/network.md that explains them is
            // named).
            let dangerous = target.starts_with("169.254.") || target.starts_with("10.");
            if !expected && dangerous {
                assert!(doc["flag"].is_null(), "{doc}");
                assert!(
                    doc["rule"].as_str().unwrap().contains("docs/network.md"),
                    "{doc}"
                );
            } else if !expected {
                assert!(
                    doc["flag"].is_string() || target.starts_with("bad."),
                    "{doc}"
                );
            }

            let mut run: Vec<&str> = vec!["run"];
            run.extend(rules);
            let script = format!(
                "curl -s -m 5 -o /dev/null -w '%{{http_code}}' -x \"$HTTP_PROXY\" \
                 http://{target}/ || true"
            );
            run.extend(["--", "sh", "-c", &script]);
            let o = w.sandy(&run).output().unwrap();
            // 403: refused by a rule before any lookup (an allowed name that cannot be
            // resolved here is a 502).
            let denied_by_proxy = stdout(&o).trim() == "403";
            assert_eq!(
                denied_by_proxy, !expected,
                "{target}: why said {expected}, the proxy said denied={denied_by_proxy}"
            );
        }
    });
}
