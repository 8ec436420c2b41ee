//! Secrets stay out of the sandbox's environment (issue 35, design §3.3): a variable whose
//! name or value looks like a credential is removed from the command's environment, but
//! for the agent profile's own key and `--pass-env NAME`; the start-up files' filter finds
//! credentials by value too, in here-documents, headers, options, base64 and comments.
//! Judged from inside (the value is nowhere the command can see) and from the host (the
//! line Sandy prints names, never values).
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Made-up values shaped like the real formats.
const GITHUB: &str = "ghp_7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX";
const AWS_ID: &str = "AKIAZ7QW3ERT5YU6IOPL";
const OPENAI: &str = "sk-proj-Zx8YwV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8cB7aZ6yX5wV4u";
const STRIPE: &str = "sk_live_51Hq9zK2eZvKYlo2C8f3kQz9xYb7W";
const ANTHROPIC: &str = "sk-ant-api03-not-a-real-key-0123456789";

/// `sandy run ARGS... -- env` with `extra` in the caller's environment.
fn env_inside(w: &World, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "env"]);
    let mut cmd = w.sandy(all);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    run_timeout(cmd, 60)
}

const CALLER: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", GITHUB),
    (
        "AWS_SECRET_ACCESS_KEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("OPENAI_API_KEY", OPENAI),
    ("DB_PASSWORD", "hunter2"),
    // Names that say nothing: found by their values.
    ("DEPLOY", AWS_ID),
    ("BILLING", STRIPE),
    // Not credentials.
    ("EDITOR", "vim"),
    ("PASSWORD_STORE_DIR", "/nowhere/.password-store"),
];

#[test]
fn credentials_in_the_callers_environment_stay_outside() {
    for_each_user(|w| {
        let o = env_inside(w, &[], CALLER);
        assert_code(&o, 0, "a plain run");
        let (out, err) = (stdout(&o), stderr(&o));
        for secret in [GITHUB, OPENAI, AWS_ID, STRIPE, "hunter2", "wJalrXUtnFEMI"] {
            assert!(
                !out.contains(secret),
                "{secret} reached the command:\n{out}"
            );
            assert!(!err.contains(secret), "Sandy printed a value:\n{err}");
        }
        assert!(out.contains("EDITOR=vim"), "{out}");
        assert!(out.contains("PASSWORD_STORE_DIR="), "{out}");
        // One line, with the count and the names.
        let line: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("look like credentials"))
            .collect();
        assert_eq!(line.len(), 1, "{err}");
        for name in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "OPENAI_API_KEY",
            "DB_PASSWORD",
            "DEPLOY",
            "BILLING",
        ] {
            assert!(line[0].contains(name), "{name} not named: {}", line[0]);
        }
        assert!(line[0].contains("kept 6 variables"), "{}", line[0]);
        assert!(!line[0].contains("EDITOR"));
    });
}

#[test]
fn the_profiles_own_key_and_pass_env_names_pass() {
    for_each_user(|w| {
        let mut caller = CALLER.to_vec();
        caller.push(("ANTHROPIC_API_KEY", ANTHROPIC));
        // Claude's profile passes its own key, not the others.
        let o = env_inside(w, &["--profile", "claude"], &caller);
        assert_code(&o, 0, "claude's profile");
        let out = stdout(&o);
        assert!(
            out.contains(&format!("ANTHROPIC_API_KEY={ANTHROPIC}")),
            "{out}"
        );
        assert!(!out.contains(GITHUB) && !out.contains(OPENAI), "{out}");
        // The generic profile does not pass Anthropic's key; --pass-env keeps one on purpose.
        let o = env_inside(w, &["--pass-env", "GITHUB_TOKEN"], &caller);
        assert_code(&o, 0, "--pass-env");
        let out = stdout(&o);
        assert!(out.contains(&format!("GITHUB_TOKEN={GITHUB}")), "{out}");
        assert!(!out.contains(ANTHROPIC) && !out.contains(OPENAI), "{out}");
        assert!(!stderr(&o).contains("GITHUB_TOKEN,"), "{}", stderr(&o));
    });
}

/// Codex's configuration names the variable its model provider's key is in
/// (`model_providers.NAME.env_key`): that variable passes under Codex's profile, and only
/// there.
#[test]
fn a_key_the_agents_configuration_names_passes() {
    for_each_user(|w| {
        w.write(
            "home/.codex/config.toml",
            "model_provider = \"corp\"\n[model_providers.corp]\nname = \"corp\"\n\
             base_url = \"https://llm.example/v1\"\nenv_key = \"CORP_LLM_TOKEN\"\n",
        );
        let caller = [("CORP_LLM_TOKEN", GITHUB), ("OTHER_TOKEN", STRIPE)];
        let o = env_inside(w, &["--profile", "codex"], &caller);
        assert_code(&o, 0, "codex's profile");
        let out = stdout(&o);
        assert!(out.contains(&format!("CORP_LLM_TOKEN={GITHUB}")), "{out}");
        assert!(!out.contains(STRIPE), "{out}");
        let o = env_inside(w, &[], &caller);
        assert!(!stdout(&o).contains(GITHUB), "{}", stdout(&o));
    });
}

#[test]
fn the_dry_run_lists_withheld_names_and_never_values() {
    for_each_user(|w| {
        let mut cmd = w.sandy(["run", "--dry-run", "--", "true"]);
        for (k, v) in CALLER {
            cmd.env(k, v);
        }
        let o = run_timeout(cmd, 60);
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run with secrets");
        let removed: Vec<&str> = doc["environment"]["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for name in ["GITHUB_TOKEN", "DEPLOY", "BILLING", "DB_PASSWORD"] {
            assert!(removed.contains(&name), "{name}: {removed:?}");
        }
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            !text.contains(GITHUB) && !text.contains(STRIPE),
            "a value in the dry run"
        );
        let mut cmd = w.sandy(["run", "--dry-run", "--format", "text", "--", "true"]);
        for (k, v) in CALLER {
            cmd.env(k, v);
        }
        let o = run_timeout(cmd, 60);
        let text = stdout(&o);
        assert!(
            text.contains("withheld:") && text.contains("DEPLOY [its value"),
            "{text}"
        );
        assert!(!text.contains(GITHUB), "{text}");
    });
}

/// The start-up files' filter: each form a review found it missing, read inside through
/// the filtered copy, and the dry run's count of dropped lines.
#[test]
fn start_up_files_lose_credentials_in_every_form() {
    for_each_user(|w| {
        let bashrc = format!(
            "alias ll='ls -l'\n\
             read -r DB_PASSWORD <<EOF\nheredoc-secret-1\nEOF\n\
             alias api='curl -H \"X-Api-Key: header-secret-2\" https://api.example.com'\n\
             alias db='mysql -uroot -poption-secret-3 app'\n\
             eval \"$(echo ZXhwb3J0IEdJVEhVQl9UT0tFTj1iYXNlNjQtc2VjcmV0LTQ= | base64 -d)\"\n\
             # export OLD_TOKEN=comment-secret-5\n\
             export DEPLOY={AWS_ID}\n\
             export EDITOR=vim\n"
        );
        w.write("home/.bashrc", &bashrc);
        let o = w.sh(
            &[],
            "cat ~/.bashrc; bash -c 'source ~/.bashrc; echo sourced'",
        );
        assert_code(&o, 0, "reading the filtered copy");
        let out = stdout(&o);
        for secret in [
            "heredoc-secret-1",
            "header-secret-2",
            "option-secret-3",
            "ZXhwb3J0IEdJVEhVQl9UT0tFTj1iYXNlNjQtc2VjcmV0LTQ",
            "comment-secret-5",
            AWS_ID,
        ] {
            assert!(!out.contains(secret), "{secret} is in the copy:\n{out}");
        }
        assert!(
            out.contains("alias ll='ls -l'") && out.contains("export EDITOR=vim"),
            "{out}"
        );
        assert!(
            out.contains("sourced"),
            "the filtered copy does not source:\n{out}\n{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("syntax error"), "{}", stderr(&o));
        let o = w
            .sandy(["run", "--dry-run", "--format", "text", "--", "bash"])
            .output()
            .unwrap();
        let text = stdout(&o);
        assert!(
            text.contains(".bashrc [filtered copy, 8 lines dropped]"),
            "{text}"
        );
    });
}
