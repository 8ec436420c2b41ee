//! The pure part of the crate (`addr`, `host`, `rules`: what `sandy-policy` uses, without
//! the `proxy` feature) names neither the proxy's modules nor a runtime crate, and every
//! other module is behind the `proxy` feature (see the crate documentation).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

const PURE: &[&str] = &["addr", "host", "rules"];

/// What a pure module must not name: the feature-gated modules and the runtime crates.
const RUNTIME: &[&str] = &[
    "crate::proxy",
    "crate::relay",
    "crate::local",
    "crate::dns",
    "tokio",
    "nix::",
    "httparse",
    "humantime",
    "tls_parser",
    "serde_json",
];

fn source(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The runtime names `src` uses outside comments.
fn runtime_names(src: &str) -> Vec<&'static str> {
    let code: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    RUNTIME
        .iter()
        .copied()
        .filter(|name| code.contains(name))
        .collect()
}

/// The modules `lib` declares without `#[cfg(feature = "proxy")]` on the line before.
fn ungated_modules(lib: &str) -> Vec<String> {
    let lines: Vec<&str> = lib.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line
            .trim()
            .strip_prefix("pub mod ")
            .or(line.trim().strip_prefix("mod "))
        else {
            continue;
        };
        let name = rest.trim_end_matches(';').trim().to_owned();
        let gated = i > 0 && lines[i - 1].trim() == "#[cfg(feature = \"proxy\")]";
        if !gated {
            out.push(name);
        }
    }
    out
}

#[test]
fn the_pure_modules_name_no_runtime() {
    for module in PURE {
        let names = runtime_names(&source(&format!("{module}.rs")));
        assert!(names.is_empty(), "{module}.rs names {names:?}");
    }
}

#[test]
fn only_the_pure_modules_are_built_without_the_proxy_feature() {
    let mut ungated = ungated_modules(&source("lib.rs"));
    ungated.sort();
    assert_eq!(ungated, PURE);
}

#[test]
fn the_checks_see_a_runtime_name_and_an_ungated_module() {
    assert_eq!(
        runtime_names("use tokio::net::TcpStream; // crate::proxy"),
        ["tokio"]
    );
    assert_eq!(
        runtime_names("fn f() { crate::relay::start() }"),
        ["crate::relay"]
    );
    assert!(runtime_names("// tokio in a comment\nuse std::fmt;").is_empty());
    let lib = "pub mod addr;\n#[cfg(feature = \"proxy\")]\npub mod proxy;\npub mod relay;\n";
    assert_eq!(ungated_modules(lib), ["addr", "relay"]);
}
