//! Turns the built-in agent profiles (TOML, the form people read and edit) into JSON in
//! `OUT_DIR`, which the binary embeds: every launch reads all of them, and parsing JSON
//! costs a fraction of parsing TOML. The conversion is value for value (a TOML document
//! that does not parse fails the build); the strict schema (unknown fields, versions,
//! roots) is still applied when the embedded JSON is read, and a unit test checks that
//! each profile reads the same from either form.

use std::error::Error;
use std::path::PathBuf;

const PROFILES: [&str; 5] = ["claude", "codex", "gemini", "generic", "opencode"];

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
    }
    Ok(())
}
