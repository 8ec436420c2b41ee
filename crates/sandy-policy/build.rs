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

/// The strings of the rule table, in one text: every rule field is a span of it, so that
/// the table holds numbers only. (A table of `&str` needs a relocation per string, which
/// a static binary applies at every start: some thousands of writes to pages that would
/// otherwise not be touched.)
#[derive(Default)]
struct Blob {
    text: String,
    /// Spans of lists (keywords, allow lists): each list is a range of this.
    spans: Vec<(usize, usize)>,
}

impl Blob {
    fn span(&mut self, s: &str) -> (usize, usize) {
        let start = self.text.len();
        self.text.push_str(s);
        (start, self.text.len())
    }

    /// A list of strings as a range of `spans`.
    fn list<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) -> (usize, usize) {
        let items: Vec<(usize, usize)> = items.into_iter().map(|i| self.span(i)).collect();
        let start = self.spans.len();
        self.spans.extend(items);
        (start, self.spans.len())
    }
}

fn strings(value: Option<&toml::Value>) -> Vec<&str> {
    value
        .and_then(toml::Value::as_array)
        .map(|a| a.iter().filter_map(toml::Value::as_str).collect())
        .unwrap_or_default()
}

/// gitleaks' rule set (`rules/gitleaks.toml`, vendored as data) as a Rust table
/// (`secret_rules.rs`): each rule's id, pattern, keywords, entropy and allow lists, and the
/// global allow list, all as spans of one text ([`Blob`]). Rules that name only a file
/// path are left out (Sandy looks at values, not files).
fn secret_rules(out: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let source = "rules/gitleaks.toml";
    println!("cargo:rerun-if-changed={source}");
    let text = std::fs::read_to_string(source)?;
    let doc: toml::Value =
        toml::from_str(&text).map_err(|e| format!("{source} does not parse: {e}"))?;
    let mut blob = Blob::default();
    let mut rules = String::from("pub(crate) static RULES: &[RawRule] = &[\n");
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
            Some(toml::Value::Float(f)) => *f,
            Some(toml::Value::Integer(i)) => *i as f64,
            _ => 0.0,
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
            let regexes = strings(allow.get("regexes"));
            match allow.get("regexTarget").and_then(toml::Value::as_str) {
                Some("match" | "line") => allow_match.extend(regexes),
                _ => allow_secret.extend(regexes),
            }
            stopwords.extend(strings(allow.get("stopwords")));
        }
        let id = blob.span(id);
        let regex = blob.span(regex);
        let keywords = blob.list(strings(rule.get("keywords")));
        let allow_secret = blob.list(allow_secret);
        let allow_match = blob.list(allow_match);
        let stopwords = blob.list(stopwords);
        rules.push_str(&format!(
            "    RawRule {{ id: {id:?}, regex: {regex:?}, keywords: {keywords:?}, \
             entropy: {entropy:?}, group: {group}, allow_secret: {allow_secret:?}, \
             allow_match: {allow_match:?}, stopwords: {stopwords:?} }},\n",
        ));
    }
    rules.push_str("];\n");
    let global = doc.get("allowlist");
    let allow_secret = blob.list(strings(global.and_then(|g| g.get("regexes"))));
    let allow_words = blob.list(strings(global.and_then(|g| g.get("stopwords"))));
    rules.push_str(&format!(
        "pub(crate) static ALLOW_SECRET: (usize, usize) = {allow_secret:?};\n\
         pub(crate) static ALLOW_WORDS: (usize, usize) = {allow_words:?};\n\
         pub(crate) static SPANS: &[(usize, usize)] = &{:?};\n\
         pub(crate) static BLOB: &str = {};\n",
        blob.spans,
        raw(&blob.text),
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
