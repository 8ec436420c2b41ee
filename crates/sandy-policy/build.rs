//! Turns the built-in agent profiles (TOML, the form people read and edit) into JSON in
//! `OUT_DIR`, which the binary embeds: every launch reads all of them, and parsing JSON
//! costs a fraction of parsing TOML. The conversion is value for value (a TOML document
//! that does not parse fails the build); the strict schema (unknown fields, versions,
//! roots) is still applied when the embedded JSON is read, and a unit test checks that
//! each profile reads the same from either form.
//!
//! A second, smaller form (`NAME.baseline.json`) keeps only what every run needs of every
//! profile (its name, roots, protections, the paths and reasons of its state files, and
//! the settings whose commands it names), so that the profiles that are not the
//! detected one cost half as much to read.

use std::error::Error;
use std::path::PathBuf;

const PROFILES: [&str; 5] = ["claude", "codex", "gemini", "generic", "opencode"];

/// The baseline form of one profile document (see the module's documentation).
fn baseline(profile: &toml::Value) -> toml::Value {
    let mut out = toml::Table::new();
    let Some(table) = profile.as_table() else {
        return toml::Value::Table(out);
    };
    for key in ["name", "roots", "protections", "named_commands"] {
        if let Some(value) = table.get(key) {
            out.insert(key.to_owned(), value.clone());
        }
    }
    let files: Vec<toml::Value> = table
        .get("state_files")
        .and_then(toml::Value::as_array)
        .map(|files| {
            files
                .iter()
                .filter_map(toml::Value::as_table)
                .map(|f| {
                    let mut kept = toml::Table::new();
                    for key in ["path", "why"] {
                        if let Some(v) = f.get(key) {
                            kept.insert(key.to_owned(), v.clone());
                        }
                    }
                    toml::Value::Table(kept)
                })
                .collect()
        })
        .unwrap_or_default();
    out.insert("state_files".to_owned(), toml::Value::Array(files));
    toml::Value::Table(out)
}

/// A Rust string literal holding `text` exactly (a raw string with enough `#`).
fn raw(text: &str) -> String {
    let mut hashes = String::from("#");
    while text.contains(&format!("\"{hashes}")) {
        hashes.push('#');
    }
    format!("r{hashes}\"{text}\"{hashes}")
}

fn raw_list(values: Option<&toml::Value>) -> String {
    let items: Vec<String> = values
        .and_then(toml::Value::as_array)
        .map(|a| a.iter().filter_map(toml::Value::as_str).map(raw).collect())
        .unwrap_or_default();
    format!("&[{}]", items.join(", "))
}

/// gitleaks' rule set (`rules/gitleaks.toml`, vendored as data) as a Rust table
/// (`secret_rules.rs`): each rule's id, pattern, keywords, entropy and allow lists, and the
/// global allow list. Rules that name only a file path are left out (Sandy looks at
/// values, not files).
fn secret_rules(out: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let source = "rules/gitleaks.toml";
    println!("cargo:rerun-if-changed={source}");
    let text = std::fs::read_to_string(source)?;
    let doc: toml::Value =
        toml::from_str(&text).map_err(|e| format!("{source} does not parse: {e}"))?;
    let mut rules = String::from("pub(crate) static RULES: &[SecretRule] = &[\n");
    for rule in doc
        .get("rules")
        .and_then(toml::Value::as_array)
        .ok_or("no rules")?
    {
        let (Some(id), Some(regex)) = (
            rule.get("id").and_then(toml::Value::as_str),
            rule.get("regex").and_then(toml::Value::as_str),
        ) else {
            continue;
        };
        let entropy = match rule.get("entropy") {
            Some(toml::Value::Float(f)) => format!("Some({f:?})"),
            Some(toml::Value::Integer(i)) => format!("Some({i}.0)"),
            _ => "None".to_owned(),
        };
        let group = rule
            .get("secretGroup")
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        let mut allow_secret = Vec::new();
        let mut allow_match = Vec::new();
        let mut stopwords = Vec::new();
        for allow in rule
            .get("allowlists")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
        {
            // Path conditions are about files, which Sandy does not look at.
            if allow.get("paths").is_some() {
                continue;
            }
            let target = allow.get("regexTarget").and_then(toml::Value::as_str);
            let regexes = raw_list(allow.get("regexes"));
            let regexes = regexes.trim_start_matches("&[").trim_end_matches(']');
            if !regexes.is_empty() {
                match target {
                    Some("match" | "line") => allow_match.push(regexes.to_owned()),
                    _ => allow_secret.push(regexes.to_owned()),
                }
            }
            let words = raw_list(allow.get("stopwords"));
            let words = words.trim_start_matches("&[").trim_end_matches(']');
            if !words.is_empty() {
                stopwords.push(words.to_owned());
            }
        }
        rules.push_str(&format!(
            "    SecretRule {{ id: {}, regex: {}, keywords: {}, entropy: {entropy}, group: {group}, \
             allow_secret: &[{}], allow_match: &[{}], stopwords: &[{}] }},\n",
            raw(id),
            raw(regex),
            raw_list(rule.get("keywords")),
            allow_secret.join(", "),
            allow_match.join(", "),
            stopwords.join(", "),
        ));
    }
    rules.push_str("];\n");
    let global = doc.get("allowlist");
    rules.push_str(&format!(
        "pub(crate) static ALLOW_SECRET: &[&str] = {};\npub(crate) static ALLOW_WORDS: &[&str] = {};\n",
        raw_list(global.and_then(|g| g.get("regexes"))),
        raw_list(global.and_then(|g| g.get("stopwords"))),
    ));
    std::fs::write(out.join("secret_rules.rs"), rules)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    secret_rules(&out)?;
    for name in PROFILES {
        let source = format!("profiles/{name}.toml");
        println!("cargo:rerun-if-changed={source}");
        let text = std::fs::read_to_string(&source)?;
        let value: toml::Value =
            toml::from_str(&text).map_err(|e| format!("{source} does not parse: {e}"))?;
        std::fs::write(
            out.join(format!("{name}.json")),
            serde_json::to_string(&value)?,
        )?;
        std::fs::write(
            out.join(format!("{name}.baseline.json")),
            serde_json::to_string(&baseline(&value))?,
        )?;
    }
    Ok(())
}
