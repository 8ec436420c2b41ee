//! Default-deny agent state (design §4.2, promise 6).
//!
//! An agent's state directory (`~/.claude`, `~/.codex`, ...) mixes what the agent writes
//! in ordinary use (sessions, history, logs, caches) with what its next launch reads as
//! configuration or instructions (settings, hooks, skills, rules, `.env`, downloaded
//! programs). A list of the dangerous names is always short, so the profile lists the
//! other side: the names the real agent was seen writing ([`StateClass::Writable`]),
//! its memory files whose every change is named after the run ([`StateClass::Watched`]),
//! its login ([`StateClass::Login`]), and the names it reads ([`StateClass::ReadOnly`]).
//! Everything no rule covers is *unclassified*, and read-only like configuration:
//!
//! - at launch, every existing name below a state directory that is read-only (by a rule
//!   or because no rule covers it) is protected read-only ([`walk`]);
//! - after the run the same walk runs again: a read-only name that did not exist at
//!   launch (the run created it) is moved out of the state directory and named.
//!
//! A login file may name the account it signs in to ([`Account`]): a run may refresh the
//! same account's tokens, but a login that names another account than the one at launch
//! is put back after the run and named ([`account_identity`]).
//!
//! Rules are paths relative to the state directory, `/`-separated; a component `*`
//! matches any one name, and one ending in `*` any name with that beginning. A rule
//! covers its path and everything below it; the rule with the most components wins, and
//! among those the one with fewer wildcards.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

pub use crate::model::statedirs::{Account, AgentStateDir, StateClass, StateRule};

/// The account a JSON login file names: every `key=value` its identity keys reach (a
/// string, number or boolean value; `*` in a key path stands for the key found). Empty
/// when the file is not a JSON object or names no account (a key-less login). Nothing is
/// verified: the values are only compared with the same file's at launch.
pub fn account_identity(bytes: &[u8], keys: &[String]) -> std::collections::BTreeSet<String> {
    fn reach(
        value: &serde_json::Value,
        rest: &[&str],
        at: String,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        let Some((first, rest)) = rest.split_first() else {
            let scalar = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => return,
            };
            if !scalar.is_empty() {
                out.insert(format!("{at}={scalar}"));
            }
            return;
        };
        let Some(object) = value.as_object() else {
            return;
        };
        let join = |key: &str| {
            if at.is_empty() {
                key.to_owned()
            } else {
                format!("{at}.{key}")
            }
        };
        if *first == "*" {
            for (key, child) in object {
                reach(child, rest, join(key), out);
            }
        } else if let Some(name) = first.strip_suffix("#jwt") {
            let payload = object
                .get(name)
                .and_then(|v| v.as_str())
                .and_then(|token| token.split('.').nth(1))
                .and_then(|part| crate::rules::filter::decode_base64(part.as_bytes()))
                .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok());
            if let Some(payload) = payload {
                reach(&payload, rest, join(first), out);
            }
        } else if let Some(child) = object.get(*first) {
            reach(child, rest, join(first), out);
        }
    }
    let mut out = std::collections::BTreeSet::new();
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
        for key in keys {
            let parts: Vec<&str> = key.split('.').collect();
            reach(&value, &parts, String::new(), &mut out);
        }
    }
    out
}

/// What the rules say of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// The rule that covers it.
    Covered(&'a StateRule),
    /// No rule covers it, and none below it: read-only.
    Unclassified,
    /// Names below it are treated differently from it: look inside.
    Mixed,
}

/// The most a walk looks at: names per directory, directories deep.
pub const WALK_MAX_ENTRIES: usize = 4096;
const WALK_MAX_DEPTH: usize = 6;

fn component_matches(pattern: &str, name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix.as_bytes()),
        None => name == pattern.as_bytes(),
    }
}

fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty()).collect()
}

fn wildcards(path: &[&str]) -> usize {
    path.iter().filter(|c| c.ends_with('*')).count()
}

impl AgentStateDir {
    /// What the rules say of `rel` (components relative to the root; not the root).
    pub fn decide(&self, rel: &[&OsStr]) -> Decision<'_> {
        let n = rel.len();
        let covering = self.covering(rel);
        let writes = covering.is_some_and(|r| r.class.writes());
        let mixed = self.rules.iter().any(|rule| {
            let comps = components(&rule.path);
            comps.len() > n
                && comps.iter().zip(rel).all(|(p, c)| component_matches(p, c))
                && rule.class.writes() != writes
        });
        match covering {
            _ if mixed => Decision::Mixed,
            Some(rule) => Decision::Covered(rule),
            None => Decision::Unclassified,
        }
    }

    /// The rule that covers `rel` itself (its own path or an ancestor's): the one with the
    /// most components, then the fewest wildcards.
    fn covering(&self, rel: &[&OsStr]) -> Option<&StateRule> {
        let mut covering: Option<(&StateRule, usize, usize)> = None;
        for rule in &self.rules {
            let comps = components(&rule.path);
            if comps.len() > rel.len()
                || !comps.iter().zip(rel).all(|(p, c)| component_matches(p, c))
            {
                continue;
            }
            let rank = (comps.len(), wildcards(&comps));
            let better = match covering {
                None => true,
                Some((_, len, wild)) => rank.0 > len || (rank.0 == len && rank.1 < wild),
            };
            if better {
                covering = Some((rule, rank.0, rank.1));
            }
        }
        covering.map(|(rule, _, _)| rule)
    }

    /// For a directory that is read-only itself but has writable names below it: the
    /// names directly below it that every such rule is about, when each is an exact name
    /// whose rule writes it as a whole. The directory can then be protected as one and
    /// those names opened again on top, whatever else it holds ([`walk_at_launch`]).
    fn reopenable(&self, rel: &[&OsStr]) -> Option<Vec<String>> {
        let n = rel.len();
        if self.covering(rel).is_some_and(|r| r.class.writes()) {
            return None;
        }
        let below: Vec<(Vec<&str>, &StateRule)> = self
            .rules
            .iter()
            .map(|r| (components(&r.path), r))
            .filter(|(c, _)| c.len() > n && c.iter().zip(rel).all(|(p, c)| component_matches(p, c)))
            .collect();
        if below.is_empty() || below.iter().any(|(_, r)| !r.class.writes()) {
            return None;
        }
        let mut names: Vec<String> = below.iter().map(|(c, _)| c[n].to_owned()).collect();
        names.sort();
        names.dedup();
        let whole = |name: &str| below.iter().any(|(c, _)| c.len() == n + 1 && c[n] == name);
        if names.iter().any(|name| name.contains('*') || !whole(name)) {
            return None;
        }
        Some(names)
    }

    /// The next components of the rules below `rel` (for a directory whose own names are
    /// writable: only those names need a look).
    fn names_below(&self, rel: &[&OsStr]) -> Vec<String> {
        let n = rel.len();
        let mut out: Vec<String> = self
            .rules
            .iter()
            .map(|r| components(&r.path))
            .filter(|c| c.len() > n && c.iter().zip(rel).all(|(p, c)| component_matches(p, c)))
            .map(|c| c[n].to_owned())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// How a walk sees a state directory: at launch the policy's view of the filesystem,
/// after the run handles that follow no link.
pub trait StateLister {
    /// The names in the directory `rel` (relative to the root) and whether each is a
    /// directory (not a link to one); `None` when it cannot be read.
    fn list(&self, rel: &Path, max: usize) -> Option<Vec<(OsString, bool)>>;
    /// Whether `name` exists in `rel`, and is a directory.
    fn lookup(&self, rel: &Path, name: &OsStr) -> Option<bool>;
}

/// One read-only name found by [`walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Relative to the root.
    pub rel: PathBuf,
    /// The rule's reason, or `None` when no rule covers it.
    pub why: Option<String>,
}

/// Every existing name below the root that is read-only, by a rule or because no rule
/// covers it: the outermost such name (its contents are covered by it).
pub fn walk(dir: &AgentStateDir, lister: &dyn StateLister) -> Vec<Found> {
    let mut out = Vec::new();
    visit(dir, lister, Path::new(""), 0, &mut out, None);
    out
}

/// [`walk`] for the launch's protections, with fewer of them: a directory that is
/// read-only itself and whose writable names below are exact names written as a whole
/// (Claude Code's `projects`, with only the run's own folder writable) is found as one
/// when each of those names is an existing directory, and they are returned to be opened
/// again on top of it. One protection then stands for however many names it holds.
pub fn walk_at_launch(dir: &AgentStateDir, lister: &dyn StateLister) -> (Vec<Found>, Vec<PathBuf>) {
    let mut out = Vec::new();
    let mut reopen = Vec::new();
    visit(dir, lister, Path::new(""), 0, &mut out, Some(&mut reopen));
    (out, reopen)
}

fn visit(
    dir: &AgentStateDir,
    lister: &dyn StateLister,
    rel: &Path,
    depth: usize,
    out: &mut Vec<Found>,
    mut reopen: Option<&mut Vec<PathBuf>>,
) {
    let here: Vec<&OsStr> = rel.iter().collect();
    // What covers this directory decides for the names no rule below it names.
    let writes = dir.covering(&here).is_some_and(|r| r.class.writes());
    let below = dir.names_below(&here);
    let names: Vec<(OsString, bool)> = if !writes || below.iter().any(|n| n.ends_with('*')) {
        lister.list(rel, WALK_MAX_ENTRIES).unwrap_or_default()
    } else {
        below
            .iter()
            .filter_map(|n| {
                lister
                    .lookup(rel, OsStr::new(n))
                    .map(|d| (OsString::from(n), d))
            })
            .collect()
    };
    for (name, is_dir) in names {
        let path = rel.join(&name);
        let comps: Vec<&OsStr> = path.iter().collect();
        match dir.decide(&comps) {
            Decision::Covered(rule) if rule.class.writes() => {}
            Decision::Covered(rule) => out.push(Found {
                rel: path,
                why: Some(rule.why.clone()),
            }),
            Decision::Unclassified => out.push(Found {
                rel: path,
                why: None,
            }),
            Decision::Mixed if is_dir => {
                // Only when each of those names is an existing directory: one absent (the
                // first run in a project) could not be created inside a read-only one.
                let names = reopen
                    .as_ref()
                    .and_then(|_| dir.reopenable(&comps))
                    .filter(|names| {
                        names
                            .iter()
                            .all(|n| lister.lookup(&path, OsStr::new(n)) == Some(true))
                    });
                match (names, reopen.as_deref_mut()) {
                    (Some(names), Some(reopen)) => {
                        out.push(Found {
                            rel: path.clone(),
                            why: dir.covering(&comps).map(|r| r.why.clone()),
                        });
                        reopen.extend(names.iter().map(|n| path.join(n)));
                    }
                    _ if depth < WALK_MAX_DEPTH => {
                        visit(dir, lister, &path, depth + 1, out, reopen.as_deref_mut());
                    }
                    _ => out.push(Found {
                        rel: path,
                        why: None,
                    }),
                }
            }
            Decision::Mixed => out.push(Found {
                rel: path,
                why: None,
            }),
        }
    }
}

/// Claude Code's name for a project directory in `~/.claude/projects`: every character
/// that is not an ASCII letter or digit becomes `-`.
pub fn claude_project_key(project: &Path) -> String {
    project
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rule(path: &str, class: StateClass) -> StateRule {
        StateRule {
            path: path.into(),
            class,
            why: format!("{path} {class:?}"),
        }
    }

    fn dir() -> AgentStateDir {
        AgentStateDir {
            profile: "claude".into(),
            root: "/h/.claude".into(),
            rules: vec![
                rule("projects", StateClass::Writable),
                rule("projects/*/memory", StateClass::ReadOnly),
                rule("projects/-p/memory", StateClass::Watched),
                rule("history.jsonl", StateClass::Writable),
                rule(".claude.json.tmp.*", StateClass::Writable),
                rule("plugins", StateClass::ReadOnly),
                rule("plugins/store", StateClass::Writable),
                rule("settings.json", StateClass::ReadOnly),
                rule(".credentials.json", StateClass::Login),
            ],
            read_only_at_launch: vec![],
            accounts: vec![],
        }
    }

    struct Tree(BTreeMap<PathBuf, Vec<(&'static str, bool)>>);

    impl StateLister for Tree {
        fn list(&self, rel: &Path, _: usize) -> Option<Vec<(OsString, bool)>> {
            self.0
                .get(rel)
                .map(|v| v.iter().map(|(n, d)| (OsString::from(n), *d)).collect())
        }
        fn lookup(&self, rel: &Path, name: &OsStr) -> Option<bool> {
            self.0
                .get(rel)?
                .iter()
                .find(|(n, _)| OsStr::new(n) == name)
                .map(|(_, d)| *d)
        }
    }

    fn d(s: &str) -> Vec<&OsStr> {
        s.split('/').map(OsStr::new).collect()
    }

    #[test]
    fn the_most_specific_rule_decides_and_mixed_directories_are_entered() {
        let dir = dir();
        let class = |p: &str| match dir.decide(&d(p)) {
            Decision::Covered(r) => Some(r.class),
            _ => None,
        };
        assert_eq!(class("projects/-q/x.jsonl"), Some(StateClass::Writable));
        assert_eq!(class("projects/-q/memory"), Some(StateClass::ReadOnly));
        assert_eq!(
            class("projects/-p/memory/MEMORY.md"),
            Some(StateClass::Watched)
        );
        assert_eq!(class(".claude.json.tmp.123"), Some(StateClass::Writable));
        assert_eq!(class("plugins/cache"), Some(StateClass::ReadOnly));
        assert_eq!(class("plugins/store/x"), Some(StateClass::Writable));
        assert_eq!(dir.decide(&d("rules")), Decision::Unclassified);
        assert_eq!(dir.decide(&d("plugins")), Decision::Mixed);
        assert_eq!(dir.decide(&d("projects")), Decision::Mixed);
        assert_eq!(dir.decide(&d("projects/-q")), Decision::Mixed);
    }

    #[test]
    fn the_walk_finds_every_read_only_name_and_looks_only_where_it_must() {
        let tree = Tree(BTreeMap::from([
            (
                PathBuf::from(""),
                vec![
                    ("projects", true),
                    ("history.jsonl", false),
                    ("settings.json", false),
                    ("rules", true),
                    ("odd", false),
                    ("plugins", true),
                    (".credentials.json", false),
                ],
            ),
            (
                PathBuf::from("projects"),
                vec![("-p", true), ("-q", true), ("-r", true)],
            ),
            (PathBuf::from("projects/-p"), vec![("memory", true)]),
            (
                PathBuf::from("projects/-q"),
                vec![("memory", true), ("s.jsonl", false)],
            ),
            (PathBuf::from("projects/-r"), vec![("s.jsonl", false)]),
            (
                PathBuf::from("plugins"),
                vec![("store", true), ("cache", true), ("installed.json", false)],
            ),
        ]));
        let mut found: Vec<String> = walk(&dir(), &tree)
            .into_iter()
            .map(|f| f.rel.display().to_string())
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                "odd",
                "plugins/cache",
                "plugins/installed.json",
                "projects/-q/memory",
                "rules",
                "settings.json",
            ]
        );
        assert_eq!(
            claude_project_key(Path::new("/work/my.app")),
            "-work-my-app"
        );
    }

    #[test]
    fn an_account_is_what_its_identity_keys_reach() {
        let keys = vec!["tokens.account_id".to_owned(), "OPENAI_API_KEY".to_owned()];
        let codex =
            br#"{"OPENAI_API_KEY":null,"tokens":{"account_id":"acc-1","access_token":"a"}}"#;
        assert_eq!(
            account_identity(codex, &keys),
            ["tokens.account_id=acc-1".to_owned()].into()
        );
        // A refresh keeps the account; another account, or a key, is another identity.
        let refreshed = br#"{"tokens":{"account_id":"acc-1","access_token":"b"}}"#;
        assert_eq!(
            account_identity(refreshed, &keys),
            account_identity(codex, &keys)
        );
        let other = br#"{"tokens":{"account_id":"acc-2","access_token":"b"}}"#;
        assert_ne!(
            account_identity(other, &keys),
            account_identity(codex, &keys)
        );
        let key = br#"{"OPENAI_API_KEY":"sk-x"}"#;
        assert_eq!(
            account_identity(key, &keys),
            ["OPENAI_API_KEY=sk-x".to_owned()].into()
        );
        // `*` for any provider; a file that is not JSON names none.
        let any = vec!["*.key".to_owned()];
        let opencode = br#"{"anthropic":{"type":"api","key":"k1"},"zen":{"type":"oauth"}}"#;
        assert_eq!(
            account_identity(opencode, &any),
            ["anthropic.key=k1".to_owned()].into()
        );
        assert!(account_identity(b"not json", &any).is_empty());
        // Google's id_token names the account in its payload (base64url JSON).
        let jwt = |sub: &str| {
            let payload: String = format!("{{\"sub\":\"{sub}\",\"iat\":1}}")
                .bytes()
                .collect::<Vec<u8>>()
                .chunks(3)
                .flat_map(|c| {
                    const A: &[u8] =
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                    let n = c.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b))
                        << (8 * (3 - c.len()));
                    (0..=c.len()).map(move |i| A[(n >> (18 - 6 * i) & 63) as usize] as char)
                })
                .collect();
            format!(r#"{{"access_token":"t","id_token":"eyJhbGciOiJSUzI1NiJ9.{payload}.sig"}}"#)
        };
        let google = vec!["id_token#jwt.sub".to_owned()];
        assert_eq!(
            account_identity(jwt("1234").as_bytes(), &google),
            ["id_token#jwt.sub=1234".to_owned()].into()
        );
        assert_ne!(
            account_identity(jwt("1234").as_bytes(), &google),
            account_identity(jwt("5678").as_bytes(), &google)
        );
    }
}
