//! The pure crate stays pure in its dependencies: no async runtime, no system-call crate,
//! no enforcement crate, and `sandy-net` only as its pure part (host names, address
//! classes, patterns and rules), without the `proxy` feature that brings in tokio.
//! Feature unification in a workspace build would hide a mistake there, so this reads
//! the manifests themselves (see the crate documentation, "Domain names").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// Crates the policy crate must never depend on, directly or through `sandy-net`.
const RUNTIME: &[&str] = &[
    "tokio",
    "nix",
    "libc",
    "landlock",
    "seccompiler",
    "caps",
    "httparse",
    "tls-parser",
    "humantime",
    "sandy-linux",
    "sandy-cli",
    "sandy",
];

/// What `sandy-net` may depend on without a feature: the pure part's needs.
const NET_PURE: &[&str] = &["serde", "thiserror", "url"];

fn manifest(relative: &str) -> toml::Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).unwrap();
    toml::from_str(&text).unwrap()
}

fn table<'a>(t: &'a toml::Table, key: &str) -> Option<&'a toml::Table> {
    t.get(key).and_then(toml::Value::as_table)
}

/// The problems of the policy crate's manifest (`policy`), given the workspace's.
fn check_policy(policy: &toml::Table, workspace: &toml::Table) -> Vec<String> {
    let mut problems = Vec::new();
    let deps = table(policy, "dependencies").cloned().unwrap_or_default();
    for (name, spec) in &deps {
        if RUNTIME.contains(&name.as_str()) {
            problems.push(format!("sandy-policy depends on {name}"));
        }
        if name != "sandy-net" {
            continue;
        }
        // The entry and, when it says `workspace = true`, the workspace's entry.
        let mut specs = vec![spec.clone()];
        if spec.get("workspace").and_then(toml::Value::as_bool) == Some(true) {
            let ws = table(workspace, "workspace")
                .and_then(|w| table(w, "dependencies"))
                .and_then(|d| d.get("sandy-net"))
                .cloned();
            match ws {
                Some(ws) => specs.push(ws),
                None => problems.push("the workspace has no sandy-net dependency".into()),
            }
        }
        let default_off = specs
            .iter()
            .any(|s| s.get("default-features").and_then(toml::Value::as_bool) == Some(false));
        if !default_off {
            problems.push("sandy-net is used with its default features (the proxy)".into());
        }
        for s in &specs {
            let features = s.get("features").and_then(toml::Value::as_array);
            if let Some(features) = features.filter(|f| !f.is_empty()) {
                let names: Vec<String> = features
                    .iter()
                    .map(|v| format!("\"{}\"", v.as_str().unwrap_or("?")))
                    .collect();
                problems.push(format!(
                    "sandy-net is used with features {}",
                    names.join(", ")
                ));
            }
        }
    }
    problems
}

/// The problems of `sandy-net`'s manifest: a dependency outside [`NET_PURE`] that is not
/// optional, or an optional one that a feature other than `proxy` turns on.
fn check_net(net: &toml::Table) -> Vec<String> {
    let mut problems = Vec::new();
    let deps = table(net, "dependencies").cloned().unwrap_or_default();
    for (name, spec) in &deps {
        let optional = spec.get("optional").and_then(toml::Value::as_bool) == Some(true);
        if !optional && !NET_PURE.contains(&name.as_str()) {
            problems.push(format!("sandy-net depends on {name} without a feature"));
        }
    }
    let features = table(net, "features").cloned().unwrap_or_default();
    for (feature, list) in &features {
        if feature == "proxy" || feature == "default" {
            continue;
        }
        for item in list.as_array().into_iter().flatten() {
            let item = item.as_str().unwrap_or_default();
            let dep = item.trim_start_matches("dep:");
            if deps.contains_key(dep) && !NET_PURE.contains(&dep) {
                problems.push(format!("sandy-net's feature {feature} turns on {dep}"));
            }
        }
    }
    problems
}

#[test]
fn the_policy_crate_has_no_runtime_dependency() {
    let problems = check_policy(&manifest("Cargo.toml"), &manifest("../../Cargo.toml"));
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_network_crate_keeps_its_runtime_behind_the_proxy_feature() {
    let problems = check_net(&manifest("../sandy-net/Cargo.toml"));
    assert!(problems.is_empty(), "{problems:?}");
}

fn parse(text: &str) -> toml::Table {
    toml::from_str(text).unwrap()
}

const WORKSPACE: &str = r#"
[workspace.dependencies]
sandy-net = { path = "crates/sandy-net", default-features = false }
"#;

#[test]
fn a_runtime_dependency_of_the_policy_crate_is_refused() {
    let ok = parse("[dependencies]\nserde = \"1\"\nsandy-net.workspace = true\n");
    assert_eq!(check_policy(&ok, &parse(WORKSPACE)), Vec::<String>::new());

    let tokio = parse("[dependencies]\ntokio = \"1\"\n");
    assert_eq!(
        check_policy(&tokio, &parse(WORKSPACE)),
        ["sandy-policy depends on tokio"]
    );

    let proxy = parse("[dependencies]\nsandy-net = { workspace = true, features = [\"proxy\"] }\n");
    let problems = check_policy(&proxy, &parse(WORKSPACE));
    assert!(
        problems.iter().any(|p| p.contains("features \"proxy\"")),
        "{problems:?}"
    );

    let defaults = parse("[workspace.dependencies]\nsandy-net = { path = \"crates/sandy-net\" }\n");
    let problems = check_policy(&ok, &defaults);
    assert!(
        problems.iter().any(|p| p.contains("default features")),
        "{problems:?}"
    );
}

#[test]
fn a_runtime_dependency_of_the_network_crate_outside_the_proxy_feature_is_refused() {
    let ok = parse(
        "[features]\ndefault = [\"proxy\"]\nproxy = [\"dep:tokio\"]\n\
         [dependencies]\nurl = \"2\"\ntokio = { version = \"1\", optional = true }\n",
    );
    assert_eq!(check_net(&ok), Vec::<String>::new());

    let always = parse("[dependencies]\ntokio = \"1\"\n");
    assert_eq!(
        check_net(&always),
        ["sandy-net depends on tokio without a feature"]
    );

    let other = parse(
        "[features]\nnames = [\"dep:tokio\"]\n\
         [dependencies]\ntokio = { version = \"1\", optional = true }\n",
    );
    assert_eq!(
        check_net(&other),
        ["sandy-net's feature names turns on tokio"]
    );
}
