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

fn main() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
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
