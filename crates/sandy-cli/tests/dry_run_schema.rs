#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The dry-run document against its published JSON Schema
//! (`schemas/dry-run.v7.schema.json`): the real binary's `--dry-run` output for a
//! representative set of invocations must validate, and documents that break the schema
//! (an extra key, a missing key, a wrong enum value) must not.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use serde_json::{json, Value};

/// The published schema, from the repository root.
pub const SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../schemas/dry-run.v7.schema.json"
);

/// The schema document itself.
pub fn dry_run_schema() -> Value {
    let text = std::fs::read_to_string(SCHEMA_PATH)
        .unwrap_or_else(|e| panic!("cannot read {SCHEMA_PATH}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{SCHEMA_PATH} is not JSON: {e}"))
}

/// A validator for the dry-run schema (draft 2020-12).
pub fn dry_run_validator() -> jsonschema::Validator {
    jsonschema::draft202012::new(&dry_run_schema())
        .unwrap_or_else(|e| panic!("{SCHEMA_PATH} is not a usable schema: {e}"))
}

/// Every way `doc` breaks the schema, one line each (empty when it is valid).
pub fn schema_errors(validator: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Panics, naming every error and the document, unless `doc` matches the schema.
#[track_caller]
pub fn assert_matches_schema(validator: &jsonschema::Validator, doc: &Value, what: &str) {
    let errors = schema_errors(validator, doc);
    assert!(
        errors.is_empty(),
        "{what}: the dry-run document does not match {SCHEMA_PATH}:\n{}\n\ndocument:\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(doc).unwrap()
    );
}

/// `sandy run --dry-run FLAGS... -- COMMAND...` in the world's project with extra
/// environment variables; the parsed document.
fn dry_run<F, C>(w: &World, flags: &[F], command: &[C], env: &[(&str, &str)]) -> Value
where
    F: AsRef<OsStr>,
    C: AsRef<OsStr>,
{
    let mut args: Vec<OsString> = vec!["run".into(), "--dry-run".into()];
    args.extend(flags.iter().map(|f| f.as_ref().to_os_string()));
    args.push("--".into());
    args.extend(command.iter().map(|c| c.as_ref().to_os_string()));
    let mut cmd = w.sandy(&args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert_code(&o, 0, &format!("dry run {args:?}"));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("dry run {args:?} is not JSON ({e}):\n{}", stdout(&o)))
}

/// Runs a host command as the test user in the project and asserts it succeeded.
fn host_ok(w: &World, program: &str, args: &[&str]) {
    let o = w.host(program).args(args).output().unwrap();
    assert_code(&o, 0, &format!("{program} {args:?} on the host"));
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// A valid document for a blocked network with both kinds of local port, written out in
/// full so that the negative cases start from something the schema accepts.
fn reference_document() -> Value {
    json!({
        "dry_run_schema_version": 7,
        "command": "/usr/bin/python3",
        "arguments": ["-c", "print(1)", "\u{fffd}"],
        "working_directory": "/home/u/project",
        "profile": { "name": "generic", "detected": false },
        "network": "block_all",
        "local_port_grants": [
            { "port": 4318, "origin": "numbat_collector" },
            { "port": 8080, "origin": "flag" }
        ],
        "host_services": null,
        "egress": {
            "mode": "allowlist",
            "proxy": "127.0.0.1:3128",
            "rules": [
                { "action": "deny", "pattern": "*.evil.example", "origin": "flag", "note": null },
                { "action": "allow", "pattern": "registry.npmjs.org", "origin": "flag", "note": null },
                {
                    "action": "allow",
                    "pattern": "gateway.example.com:8443",
                    "origin": "base_url",
                    "note": "ANTHROPIC_BASE_URL, in place of api.anthropic.com"
                },
                { "action": "allow", "pattern": "claude.ai", "origin": "profile", "note": "login" }
            ],
            "left_out": [
                {
                    "pattern": "api.anthropic.com",
                    "note": "claude model API, replaced by ANTHROPIC_BASE_URL"
                }
            ],
            "refused_address_classes": ["loopback", "private", "cloud_metadata"]
        },
        "file_grants": [
            { "path": "/usr", "access": "read_exec", "scope": "subtree", "origin": "baseline", "reason": null },
            { "path": "/etc", "access": "read", "scope": "subtree", "origin": "baseline", "reason": null },
            { "path": "/dev/null", "access": "read_write", "scope": "exact", "origin": "baseline", "reason": null },
            {
                "path": "/home/u/project",
                "access": "read_write",
                "scope": "subtree",
                "origin": "project",
                "reason": null
            },
            { "path": "/home/u/.cargo", "access": "read_exec", "scope": "subtree", "origin": "path", "reason": null },
            { "path": "/home/u/docs", "access": "read", "scope": "subtree", "origin": "flag", "reason": null },
            { "path": "/tmp", "access": "read_write", "scope": "subtree", "origin": "baseline", "reason": null }
        ],
        "policy_files": [],
        "project_policy": null,
        "protections": [
            { "path": "/home/u/.ssh", "kind": "deny", "origin": "baseline", "exists": true, "placeholder": null, "reason": null },
            {
                "path": "/home/u/project/.git/hooks",
                "kind": "read_only",
                "origin": "project",
                "exists": true,
                "placeholder": "directory",
                "reason": null
            },
            {
                "path": "/home/u/project/.githooks",
                "kind": "read_only",
                "origin": "project",
                "exists": false,
                "placeholder": null,
                "reason": null
            },
            {
                "path": "/home/u/project/.mcp.json",
                "kind": "read_only",
                "origin": "profile",
                "exists": false,
                "placeholder": null,
                "reason": "claude profile, applied to every run: Project MCP servers are commands Claude Code starts."
            }
        ],
        "views": [
            {
                "target": "/home/u/.bashrc",
                "link": null,
                "kind": "filtered",
                "origin": "baseline",
                "reason": "shell start-up file, without credential assignments"
            },
            {
                "target": "/home/u/dotfiles/profile",
                "link": "/home/u/.profile",
                "kind": "filtered",
                "origin": "baseline",
                "reason": "shell start-up file, without credential assignments"
            }
        ],
        "agent_state": [
            {
                "profile": "codex",
                "root": "/home/u/.codex",
                "rules": [
                    { "path": "sessions", "class": "writable", "why": "what Codex writes" },
                    { "path": "memories_1.sqlite", "class": "watched", "why": "memory" },
                    { "path": "auth.json", "class": "login", "why": "the login" },
                    { "path": ".env", "class": "read_only", "why": "read at launch" }
                ],
                "accounts": [
                    { "path": "auth.json", "identity": ["tokens.account_id", "OPENAI_API_KEY"] }
                ]
            }
        ],
        "created_at_launch": [
            { "path": "/home/u/.claude", "kind": "directory" },
            { "path": "/home/u/.claude/.claude.json", "kind": "empty_file" }
        ],
        "state_files": [
            {
                "path": "/home/u/.claude.json",
                "copy": "/home/u/.claude/.claude.json",
                "format": "json",
                "persist": ["numStartups", "projects.{project}.hasTrustDialogAccepted"],
                "stand_in_for": null
            },
            {
                "path": "/home/u/.codex/config.toml",
                "copy": "/home/u/.codex/.sandy-codex-home-7/config.toml",
                "format": "toml",
                "persist": ["projects.{project}.trust_level"],
                "stand_in_for": "/home/u/.codex"
            }
        ],
        "caches": [
            {
                "tool": "npm",
                "path": "/home/u/.npm",
                "kind": "overlay",
                "layer": "/home/u/.cache/sandy/overlays/npm-0123456789abcdef",
                "variable": null
            }
        ],
        "history": {
            "directory": "/home/u/.local/state/sandy/history/project-0123456789abcdef",
            "inside": "/tmp/.sandy-history",
            "kept": [
                { "tool": "bash", "variable": "HISTFILE",
                  "file": "/tmp/.sandy-history/bash_history", "instead_of": "/home/u/.bash_history" }
            ],
            "not_kept": [ { "tool": "fish", "reason": "no variable names its file" } ],
            "host_files_used": false
        },
        "environment": { "removed": ["LD_PRELOAD", "SSH_AUTH_SOCK"], "set": ["TMP", "TMPDIR"] },
        "runtime_controls": [
            { "service": "Kontext", "enabled": false, "version": null,
              "path": null, "script": null, "configuration": null },
            { "service": "Numbat", "enabled": false, "version": null,
              "path": null, "script": null, "configuration": null },
            { "service": "Numbat collector", "enabled": true, "version": null,
              "path": null, "script": null, "configuration": null },
            { "service": "hook", "enabled": true, "version": null,
              "path": "/usr/bin/python3", "script": "/home/u/.config/monitor/hook.py",
              "configuration": "/home/u/.claude/settings.json" }
        ],
        "enforcement": {
            "backend": "linux",
            "landlock_abi": 7,
            "layers": [
                "user_and_mount_namespaces",
                "network_namespace",
                "no_new_privs",
                "capabilities",
                "landlock",
                "seccomp",
                "close_descriptors"
            ]
        },
        "ceilings": {
            "max_procs": {"value": 4096, "unit": "processes", "origin": "default",
                          "mechanism": "cgroup_v2", "control": "pids.max", "flag": "--max-procs"},
            "max_memory": {"value": 6_442_450_944u64, "unit": "bytes", "origin": "flag",
                           "mechanism": "cgroup_v2", "control": "memory.max", "flag": "--max-memory"},
            "max_file_size": {"value": 17_179_869_184u64, "unit": "bytes", "origin": "default",
                              "mechanism": "rlimit", "control": "RLIMIT_FSIZE", "flag": "--max-file-size"},
            "max_tmp": {"value": 4_294_967_296u64, "unit": "bytes", "origin": "default",
                        "mechanism": "tmpfs", "control": "size", "flag": "--max-tmp"},
            "cpu": {"value": 1500, "unit": "millicpus", "origin": "flag",
                    "mechanism": "cgroup_v2", "control": "cpu.max", "flag": "--cpu"},
            "oom_score_adj": 500,
            "cgroup": "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/sandy-run-PID-XXXXXX"
        },
        "tier": { "name": "full", "promises": [] }
    })
}

#[test]
fn the_schema_is_a_valid_draft_2020_12_schema() {
    let schema = dry_run_schema();
    assert_eq!(
        schema["$schema"],
        json!("https://json-schema.org/draft/2020-12/schema")
    );
    if let Err(e) = jsonschema::meta::validate(&schema) {
        panic!("{SCHEMA_PATH} violates the draft 2020-12 meta-schema: {e}");
    }
    // Every object the schema describes is closed and requires all of its keys.
    fn walk(v: &Value, at: &str) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Object(props)) = map.get("properties") {
                    // Conditional fragments (`if`/`then`/`else`, `prefixItems`) narrow an
                    // object described elsewhere; the objects themselves carry a type.
                    if map.get("type") == Some(&json!("object")) {
                        assert_eq!(
                            map.get("additionalProperties"),
                            Some(&json!(false)),
                            "{at} is not closed"
                        );
                        let mut required: Vec<&str> = map["required"]
                            .as_array()
                            .unwrap_or_else(|| panic!("{at} has no required list"))
                            .iter()
                            .map(|k| k.as_str().unwrap())
                            .collect();
                        let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
                        required.sort_unstable();
                        keys.sort_unstable();
                        assert_eq!(required, keys, "{at}: not every key is required");
                    }
                }
                for (k, child) in map {
                    walk(child, &format!("{at}/{k}"));
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{at}/{i}"));
                }
            }
            _ => {}
        }
    }
    walk(&schema, "#");
}

#[test]
fn the_reference_document_matches() {
    let v = dry_run_validator();
    assert_matches_schema(&v, &reference_document(), "reference document");
    // The allowed-network shape: open local ports, the host's services, no network
    // layer, two runtime controls.
    let mut allowed = reference_document();
    allowed["network"] = json!("allow_all");
    allowed["local_port_grants"] = json!([
        { "port": 5432, "origin": "flag" },
        { "port": 11434, "origin": "openai_base_url" }
    ]);
    allowed["host_services"] = json!({
        "closed": ["loopback", "unspecified", "host_address", "bridge", "cloud_metadata"],
        "open_ports": [5432, 11434],
        "resolvers": ["127.0.0.53"],
        "own_listeners": "open",
        "udp": "name_resolution_only"
    });
    allowed["egress"] = json!(null);
    allowed["runtime_controls"]
        .as_array_mut()
        .unwrap()
        .remove(2);
    allowed["enforcement"]["layers"]
        .as_array_mut()
        .unwrap()
        .retain(|l| l != "network_namespace");
    assert_matches_schema(&v, &allowed, "reference document, network allowed");
}

/// Each mutation of a valid document must be rejected: this is what makes the positive
/// tests mean something.
#[test]
fn documents_that_break_the_schema_are_rejected() {
    let v = dry_run_validator();
    type Mutation = (&'static str, fn(&mut Value));
    let mutations: &[Mutation] = &[
        ("an extra top-level key", |d| {
            d["seatbelt_profile"] = json!("(version 1)");
        }),
        ("an egress rule of unknown origin", |d| {
            d["egress"]["rules"][0]["origin"] = json!("environment");
        }),
        ("an egress proxy off loopback", |d| {
            d["egress"]["proxy"] = json!("0.0.0.0:3128");
        }),
        ("no egress key", |d| {
            d.as_object_mut().unwrap().remove("egress");
        }),
        ("an extra key in a file grant", |d| {
            d["file_grants"][0]["executable"] = json!(true);
        }),
        ("an extra key in a protection", |d| {
            d["protections"][0]["mount_options"] = json!("rw");
        }),
        ("a protection without its reason", |d| {
            d["protections"][0]
                .as_object_mut()
                .unwrap()
                .remove("reason");
        }),
        ("an extra key in the profile", |d| {
            d["profile"]["source"] = json!("embedded");
        }),
        ("an extra key in the environment", |d| {
            d["environment"]["values"] = json!({});
        }),
        ("an extra key in a local port grant", |d| {
            d["local_port_grants"][0]["operation"] = json!("connect");
        }),
        ("a hook with a relative path", |d| {
            d["runtime_controls"][3]["path"] = json!("bin/hook");
        }),
        ("a runtime control of unknown service", |d| {
            d["runtime_controls"][3]["service"] = json!("plugin");
        }),
        ("a hook without its configuration", |d| {
            d["runtime_controls"][3]
                .as_object_mut()
                .unwrap()
                .remove("configuration");
        }),
        ("an extra key in a runtime control", |d| {
            d["runtime_controls"][0]["details"] = json!("");
        }),
        ("an extra key in the enforcement", |d| {
            d["enforcement"]["details"] = json!("");
        }),
        ("the host's history files used", |d| {
            d["history"]["host_files_used"] = json!(true);
        }),
        ("an extra key in the history", |d| {
            d["history"]["kept"][0]["host"] = json!("");
        }),
        ("a missing top-level key", |d| {
            d.as_object_mut().unwrap().remove("protections");
        }),
        ("a missing schema version", |d| {
            d.as_object_mut().unwrap().remove("dry_run_schema_version");
        }),
        ("a missing grant origin", |d| {
            d["file_grants"][1]
                .as_object_mut()
                .unwrap()
                .remove("origin");
        }),
        ("a missing protection `exists`", |d| {
            d["protections"][1]
                .as_object_mut()
                .unwrap()
                .remove("exists");
        }),
        ("a missing runtime control version", |d| {
            d["runtime_controls"][1]
                .as_object_mut()
                .unwrap()
                .remove("version");
        }),
        ("another schema version", |d| {
            d["dry_run_schema_version"] = json!(1);
        }),
        ("an unknown network mode", |d| {
            d["network"] = json!("blocked")
        }),
        ("an unknown access", |d| {
            d["file_grants"][0]["access"] = json!("write");
        }),
        ("an access in camel case", |d| {
            d["file_grants"][0]["access"] = json!("readExec");
        }),
        ("an unknown scope", |d| {
            d["file_grants"][0]["scope"] = json!("recursive");
        }),
        ("an unknown grant origin", |d| {
            d["file_grants"][0]["origin"] = json!("user");
        }),
        ("an unknown protection kind", |d| {
            d["protections"][0]["kind"] = json!("mask");
        }),
        ("an unknown port origin", |d| {
            d["local_port_grants"][1]["origin"] = json!("numbat");
        }),
        ("an unknown layer", |d| {
            d["enforcement"]["layers"][0] = json!("pid_namespace");
        }),
        ("another backend", |d| {
            d["enforcement"]["backend"] = json!("seatbelt");
        }),
        ("a Landlock ABI Sandy refuses", |d| {
            d["enforcement"]["landlock_abi"] = json!(4);
        }),
        ("a relative grant path", |d| {
            d["file_grants"][0]["path"] = json!("usr");
        }),
        ("port zero", |d| {
            d["local_port_grants"][1]["port"] = json!(0)
        }),
        ("a port above 65535", |d| {
            d["local_port_grants"][1]["port"] = json!(65536);
        }),
        ("a string where a boolean belongs", |d| {
            d["protections"][0]["exists"] = json!("true");
        }),
        ("a masked sensitive path that did not exist", |d| {
            d["protections"][0]["exists"] = json!(false);
        }),
        ("a blocked network without its layer", |d| {
            d["enforcement"]["layers"]
                .as_array_mut()
                .unwrap()
                .retain(|l| l != "network_namespace");
        }),
        ("layers out of order", |d| {
            d["enforcement"]["layers"]
                .as_array_mut()
                .unwrap()
                .swap(4, 5);
        }),
        ("local ports under an allowed network", |d| {
            d["network"] = json!("allow_all");
            d["enforcement"]["layers"]
                .as_array_mut()
                .unwrap()
                .retain(|l| l != "network_namespace");
        }),
        ("a collector port without its runtime control", |d| {
            d["runtime_controls"].as_array_mut().unwrap().remove(2);
        }),
        ("runtime controls out of order", |d| {
            d["runtime_controls"].as_array_mut().unwrap().swap(0, 1);
        }),
        ("TMPDIR not among the set variables", |d| {
            d["environment"]["set"] = json!(["TMP"]);
        }),
        ("an environment value instead of a name list", |d| {
            d["environment"]["removed"] = json!({ "SSH_AUTH_SOCK": "/run/agent" });
        }),
    ];
    for (what, mutate) in mutations {
        let mut doc = reference_document();
        mutate(&mut doc);
        assert!(
            !schema_errors(&v, &doc).is_empty(),
            "the schema accepts a document with {what}:\n{}",
            serde_json::to_string_pretty(&doc).unwrap()
        );
    }
}

/// The real binary's documents, across the shapes a launch can take, all validate.
#[test]
fn real_dry_runs_match_the_schema() {
    let v = dry_run_validator();
    for_each_user(|w| {
        let check = |doc: &Value, what: &str| assert_matches_schema(&v, doc, what);
        let no_flags: &[&str] = &[];

        // A plain run in a project without `.git`.
        let doc = dry_run(w, no_flags, &["true"], &[]);
        check(&doc, "plain");
        assert_eq!(doc["network"], json!("allow_all"));

        // A home with sensitive directories and files present: they are listed as masks.
        for dir in [".ssh", ".aws", ".gnupg", ".config/gh", ".docker"] {
            w.write(format!("home/{dir}/secret"), "canary");
        }
        w.write("home/.netrc", "machine example.com");
        w.write("home/.git-credentials", "https://u:x@example.com");
        let doc = dry_run(w, no_flags, &["true"], &[]);
        check(&doc, "home with sensitive paths");
        let denied = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == json!("deny"))
            .count();
        assert!(denied >= 7, "{doc}");

        // --read of a file and of a directory, --read-write of another directory, and a
        // --read of the home that covers the masked paths.
        w.write("home/notes.txt", "notes");
        w.write("home/docs/readme.txt", "docs");
        w.write("shared/data.txt", "data");
        let home = std::fs::canonicalize(&w.home).unwrap();
        let shared = std::fs::canonicalize(w.root.join("shared")).unwrap();
        let flags = [
            "--read".to_owned(),
            s(&home.join("notes.txt")),
            "--read".to_owned(),
            s(&home.join("docs")),
            "--read-write".to_owned(),
            s(&shared),
        ];
        let doc = dry_run(w, &flags, &["sh", "-c", "echo hi", ""], &[]);
        check(&doc, "--read file and directory, --read-write directory");
        let flagged: Vec<(&str, &str)> = doc["file_grants"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["origin"] == json!("flag"))
            .map(|g| (g["scope"].as_str().unwrap(), g["access"].as_str().unwrap()))
            .collect();
        assert_eq!(
            flagged,
            [
                ("exact", "read"),
                ("subtree", "read"),
                ("subtree", "read_write")
            ],
            "{doc}"
        );
        let doc = dry_run(w, &["--read", &s(&home)], &["true"], &[]);
        check(&doc, "--read of the home");

        // A blocked network with relayed ports and the Numbat collector, in both spellings.
        let doc = dry_run(
            w,
            &[
                "--block-net",
                "--allow-local-port",
                "8080",
                "--allow-local-port",
                "9000",
                "--numbat-collector",
            ],
            &["true"],
            &[],
        );
        check(&doc, "--block-net with ports and the collector");
        assert_eq!(doc["network"], json!("block_all"));
        assert_eq!(doc["local_port_grants"].as_array().unwrap().len(), 3);
        let doc = dry_run(
            w,
            &["--block-net", "--numbat-collector=4319"],
            &["true"],
            &[],
        );
        check(&doc, "--block-net with the collector on its own port");
        let doc = dry_run(w, &["--block-net"], &["true"], &[]);
        check(&doc, "--block-net alone");
        let doc = dry_run(
            w,
            &["--block-net", "--allow-local-port", "5432"],
            &["true"],
            &[],
        );
        check(&doc, "--block-net with one port, no collector");

        // A toolchain reached through PATH, and a command found there.
        let node = w.write(
            "home/.nvm/versions/node/v20/bin/node",
            "#!/bin/sh\necho node\n",
        );
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", s(node.parent().unwrap()));
        let doc = dry_run(w, no_flags, &["node"], &[("PATH", path.as_str())]);
        check(&doc, "a PATH toolchain");
        assert!(
            doc["file_grants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["origin"] == json!("path")),
            "{doc}"
        );

        // An agent profile, chosen explicitly and detected from the command name, with
        // its state directory present.
        w.write("home/.claude/settings.json", "{}");
        w.write("home/.claude.json", "{}");
        let doc = dry_run(w, &["--profile", "claude"], &["true"], &[]);
        check(&doc, "--profile claude");
        let claude = w.write(
            "home/.nvm/versions/node/v20/bin/claude",
            "#!/bin/sh\necho claude\n",
        );
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        let doc = dry_run(w, no_flags, &["claude"], &[("PATH", path.as_str())]);
        check(&doc, "a detected profile");
        assert_eq!(doc["profile"]["detected"], json!(true), "{doc}");

        // Removed and replaced environment variables, and a runtime directory.
        let runtime = w.root.join("run-user");
        std::fs::create_dir_all(&runtime).unwrap();
        w.chown_all();
        let runtime = s(&runtime);
        let env = [
            ("SSH_AUTH_SOCK", "/nonexistent/agent.sock"),
            ("LD_PRELOAD", ""),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus"),
            ("TMP", "/var/tmp"),
            ("TEMP", "/var/tmp"),
            ("XDG_RUNTIME_DIR", runtime.as_str()),
        ];
        let doc = dry_run(w, no_flags, &["env"], &env);
        check(&doc, "removed and replaced environment variables");
        assert!(!doc["environment"]["removed"].as_array().unwrap().is_empty());

        // A non-UTF-8 argument, command name and grant path.
        let odd = OsStr::from_bytes(b"caf\xe9-\xff");
        let doc = dry_run(w, no_flags, &[OsStr::new("echo"), odd], &[]);
        check(&doc, "a non-UTF-8 argument");
        assert_eq!(doc["arguments"], json!(["caf\u{fffd}-\u{fffd}"]));
        let script = w.write(
            Path::new("home/project").join(OsStr::from_bytes(b"run\xff.sh")),
            "#!/bin/sh\necho ok\n",
        );
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let odd_dir = w.home.join(OsStr::from_bytes(b"d\xff"));
        std::fs::create_dir_all(&odd_dir).unwrap();
        w.chown_all();
        let flags = [OsStr::new("--read"), odd_dir.as_os_str()];
        let command = [OsStr::from_bytes(b"./run\xff.sh")];
        let doc = dry_run(w, &flags, &command, &[]);
        check(&doc, "a non-UTF-8 command name and grant path");
        assert!(
            doc["command"]
                .as_str()
                .unwrap()
                .ends_with("/run\u{fffd}.sh"),
            "{doc}"
        );

        // A real repository, with a core.hooksPath inside the project and a submodule's
        // git directory.
        host_ok(w, "/usr/bin/git", &["init", "-q"]);
        host_ok(
            w,
            "/usr/bin/git",
            &["config", "core.hooksPath", ".githooks"],
        );
        w.write("home/project/.git/modules/lib/config", "[core]\n");
        std::fs::create_dir_all(w.project.join(".git/modules/lib/hooks")).unwrap();
        w.chown_all();
        let doc = dry_run(w, no_flags, &["true"], &[]);
        check(&doc, "a git repository");
        let read_only = doc["protections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == json!("read_only"))
            .count();
        assert!(read_only >= 5, "{doc}");

        // A worktree: `.git` is a file pointing at a git directory (here inside the
        // project, as in a bare-repository layout).
        std::fs::remove_dir_all(w.project.join(".git")).unwrap();
        w.write(
            "home/project/.bare/config",
            "[core]\n\thooksPath = hooks-dir\n",
        );
        w.write("home/project/.bare/config.worktree", "[core]\n");
        std::fs::create_dir_all(w.project.join(".bare/hooks")).unwrap();
        w.write("home/project/.git", "gitdir: ./.bare\n");
        let doc = dry_run(w, no_flags, &["true"], &[]);
        check(&doc, "a worktree `.git` file");

        // A worktree whose git directory is outside the project.
        w.write("repo/.git/config", "[core]\n");
        std::fs::create_dir_all(w.root.join("repo/.git/hooks")).unwrap();
        w.write("repo/.git/worktrees/wt/commondir", "../..\n");
        let gitdir = w.root.join("repo/.git/worktrees/wt");
        w.write("home/project/.git", &format!("gitdir: {}\n", s(&gitdir)));
        let doc = dry_run(w, no_flags, &["true"], &[]);
        check(&doc, "a worktree of a repository outside the project");
    });
}
