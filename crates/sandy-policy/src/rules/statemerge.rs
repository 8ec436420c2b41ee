//! Agent state files: remembered, never armed (design §4.2).
//!
//! Inside the sandbox an agent writes a private copy of its state file. After the run the
//! supervisor re-reads the host file and applies only the sandbox's own changes, and only
//! those at known-safe key paths (the profile's allowlist). Every other change, including
//! any key Sandy does not know, is dropped and named (never its value).
//!
//! The merge is three-way: `before` is what the sandbox started from, `after` is what it
//! left, `current` is the host file at merge time (another session outside may have
//! changed it during the run). Only the leaves that differ between `before` and `after`
//! are considered, so concurrent edits made outside to other keys survive.

use serde_json::{Map, Value};

/// A key path: one key per level (keys may themselves contain dots, e.g. project paths).
pub type KeyPath = Vec<String>;

/// Why a state file could not be merged; nothing is written then.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeError {
    #[error("the state file at launch is not a JSON object (or TOML table)")]
    Before,
    #[error("the sandbox left a state file that is not a JSON object (or TOML table)")]
    After,
    #[error("the host's state file is no longer a JSON object (or TOML table)")]
    Current,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeOutcome {
    /// The new host document, when at least one allowed change was applied.
    pub merged: Option<Value>,
    /// Changed key paths that went back to the host file.
    pub applied: Vec<KeyPath>,
    /// Changed key paths that did not (not on the allowlist, or in conflict with the
    /// host file's shape).
    pub dropped: Vec<KeyPath>,
    /// Keys not on the allowlist that the run only added with an empty value (`[]`,
    /// `{}`, `false`, `""`, `null`: the defaults an agent writes for every project):
    /// dropped too, but not worth a report.
    pub dropped_defaults: Vec<KeyPath>,
}

/// An empty default: what an agent writes for a key it has nothing for.
fn empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(_)) | Some(Value::Bool(true)) => false,
    }
}

/// Parses an allowlist entry (`projects.*.hasTrustDialogAccepted`) into segments.
pub fn pattern(entry: &str) -> Vec<String> {
    entry.split('.').map(str::to_owned).collect()
}

/// Whether `path` lies at or below a path the pattern names: `*` matches any one key,
/// `{project}` only the run's working directory (trust given inside must not reach other
/// folders).
fn allowed(path: &[String], patterns: &[Vec<String>], project: &str) -> bool {
    patterns.iter().any(|p| {
        p.len() <= path.len()
            && p.iter().zip(path).all(|(seg, key)| {
                seg == "*" || seg == key || (seg == "{project}" && key == project)
            })
    })
}

/// Renders a key path for a report: keys joined by dots, a key holding a dot or a slash
/// quoted.
pub fn display(path: &[String]) -> String {
    path.iter()
        .map(|k| {
            if k.contains(['.', '/', '"']) || k.is_empty() {
                format!("{k:?}")
            } else {
                k.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Three-way merge of JSON state documents; see the module documentation.
pub fn merge_json(
    before: &str,
    after: &str,
    current: Option<&str>,
    persist: &[String],
    project: &str,
) -> Result<MergeOutcome, MergeError> {
    let object = |text: &str, err: MergeError| -> Result<Value, MergeError> {
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(err),
        }
    };
    let before = object(before, MergeError::Before)?;
    let after = object(after, MergeError::After)?;
    // An empty host file is the mount point Sandy created for a state file bound in
    // place (absent before the run): it holds no state yet.
    let mut current = match current.filter(|t| !t.trim().is_empty()) {
        Some(text) => object(text, MergeError::Current)?,
        None => Value::Object(Map::new()),
    };
    let mut outcome = classify(&before, &after, persist, project, |path, new| {
        set(&mut current, path, new)
    });
    if !outcome.applied.is_empty() {
        outcome.merged = Some(current);
    }
    Ok(outcome)
}

/// What a TOML merge did: like [`MergeOutcome`], with the new host document as text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TomlMergeOutcome {
    /// The new host document (the host file at merge time with only the allowed changes
    /// applied; its comments, order and formatting kept), when at least one applied.
    pub merged: Option<String>,
    pub applied: Vec<KeyPath>,
    pub dropped: Vec<KeyPath>,
    pub dropped_defaults: Vec<KeyPath>,
}

/// Three-way merge of TOML state documents (Codex's `config.toml`), with the same rules
/// as [`merge_json`]. The host file is edited in place, so the user's comments and layout
/// survive; a value that goes back is written as a plain value (tables of the sandbox's
/// making are never copied whole: only leaves are, and only allowed ones).
pub fn merge_toml(
    before: &str,
    after: &str,
    current: Option<&str>,
    persist: &[String],
    project: &str,
) -> Result<TomlMergeOutcome, MergeError> {
    let value = |text: &str, err: MergeError| -> Result<Value, MergeError> {
        let table: toml::Table = toml::from_str(text).map_err(|_| err.clone())?;
        serde_json::to_value(table).map_err(|_| err)
    };
    let before = value(before, MergeError::Before)?;
    let after = value(after, MergeError::After)?;
    let mut doc: toml_edit::DocumentMut = match current {
        Some(text) => text.parse().map_err(|_| MergeError::Current)?,
        None => toml_edit::DocumentMut::new(),
    };
    let outcome = classify(&before, &after, persist, project, |path, new| {
        set_toml(doc.as_table_mut(), path, new)
    });
    Ok(TomlMergeOutcome {
        merged: (!outcome.applied.is_empty()).then(|| doc.to_string()),
        applied: outcome.applied,
        dropped: outcome.dropped,
        dropped_defaults: outcome.dropped_defaults,
    })
}

/// The copy the agent sees inside: `content` with each top-level key of `settings` set to
/// its string value (a profile's `inside_settings`, Codex's `sandbox_mode`), the rest as
/// it is (TOML edited in place, comments kept). `None` when `content` does not parse:
/// the copy is then the host file unchanged.
pub fn with_inside_settings(
    format: crate::model::policy::StateFormat,
    content: &[u8],
    settings: &std::collections::BTreeMap<String, String>,
) -> Option<Vec<u8>> {
    if settings.is_empty() {
        return Some(content.to_vec());
    }
    let text = std::str::from_utf8(content).ok()?;
    match format {
        crate::model::policy::StateFormat::Toml => {
            let mut doc: toml_edit::DocumentMut = text.parse().ok()?;
            for (key, value) in settings {
                doc[key.as_str()] = toml_edit::value(value.as_str());
            }
            Some(doc.to_string().into_bytes())
        }
        crate::model::policy::StateFormat::Json => {
            let mut value: Value = serde_json::from_str(text).ok()?;
            let object = value.as_object_mut()?;
            for (key, v) in settings {
                object.insert(key.clone(), Value::String(v.clone()));
            }
            let mut out = serde_json::to_string_pretty(&value).ok()?;
            out.push('\n');
            Some(out.into_bytes())
        }
    }
}

/// Sorts the run's changes (leaves differing between `before` and `after`) into applied
/// (allowed, and `apply` fitted them into the host document), quiet empty defaults and
/// reported drops.
fn classify(
    before: &Value,
    after: &Value,
    persist: &[String],
    project: &str,
    mut apply: impl FnMut(&[String], Option<&Value>) -> bool,
) -> MergeOutcome {
    let patterns: Vec<Vec<String>> = persist.iter().map(|p| pattern(p)).collect();
    let mut changed = Vec::new();
    diff(&mut Vec::new(), Some(before), Some(after), &mut changed);
    let mut outcome = MergeOutcome::default();
    for path in changed {
        let new = lookup(after, &path);
        if allowed(&path, &patterns, project) && apply(&path, new) {
            outcome.applied.push(path);
        } else if lookup(before, &path).is_none() && empty(new) {
            outcome.dropped_defaults.push(path);
        } else {
            outcome.dropped.push(path);
        }
    }
    outcome
}

/// [`set`] for a TOML document: missing tables are created (implicit, so only the
/// innermost gets a header); only scalars and arrays of scalars are written.
fn set_toml(root: &mut toml_edit::Table, path: &[String], value: Option<&Value>) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut table = root;
    for key in parents {
        if value.is_none() && !table.contains_key(key) {
            return true;
        }
        let item = table.entry(key).or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        });
        // Only a real table is walked on: a change below an inline table or a value does
        // not fit and is dropped.
        let Some(next) = item.as_table_mut() else {
            return false;
        };
        table = next;
    }
    match value {
        None => {
            table.remove(last);
            true
        }
        Some(v) => match toml_value(v) {
            Some(v) => {
                table.insert(last, toml_edit::Item::Value(v));
                true
            }
            None => false,
        },
    }
}

fn toml_value(v: &Value) -> Option<toml_edit::Value> {
    Some(match v {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        Value::Array(items) => {
            let mut array = toml_edit::Array::new();
            for item in items {
                array.push(toml_value(item)?);
            }
            toml_edit::Value::Array(array)
        }
        Value::Null | Value::Object(_) => return None,
    })
}

/// Collects the leaf paths where `a` and `b` differ. Objects are compared key by key (a
/// missing side counts as an empty object when the other side is an object); anything
/// else is a leaf.
fn diff(path: &mut Vec<String>, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<KeyPath>) {
    let empty = Map::new();
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => diff_objects(path, x, y, out),
        (Some(Value::Object(x)), None) => diff_objects(path, x, &empty, out),
        (None, Some(Value::Object(y))) => diff_objects(path, &empty, y, out),
        (x, y) if x == y => {}
        _ => out.push(path.clone()),
    }
}

fn diff_objects(
    path: &mut Vec<String>,
    x: &Map<String, Value>,
    y: &Map<String, Value>,
    out: &mut Vec<KeyPath>,
) {
    let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        path.push(key.clone());
        diff(path, x.get(key), y.get(key), out);
        path.pop();
    }
}

fn lookup<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(root, |v, k| v.as_object()?.get(k))
}

/// Sets (or, for `None`, removes) the value at `path`, creating missing objects on the
/// way. Returns false when the host document has a non-object where the path needs an
/// object (the change then does not fit and is dropped).
fn set(root: &mut Value, path: &[String], value: Option<&Value>) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = root;
    for key in parents {
        let Some(map) = node.as_object_mut() else {
            return false;
        };
        if value.is_none() && !map.contains_key(key) {
            return true;
        }
        node = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let Some(map) = node.as_object_mut() else {
        return false;
    };
    match value {
        Some(v) => {
            map.insert(last.clone(), v.clone());
        }
        None => {
            map.remove(last);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(paths: &[KeyPath]) -> Vec<String> {
        paths.iter().map(|p| display(p)).collect()
    }

    #[test]
    fn inside_settings_replace_a_top_level_key_and_keep_the_rest() {
        use crate::model::policy::StateFormat;
        let settings = [("sandbox_mode".to_owned(), "danger-full-access".to_owned())]
            .into_iter()
            .collect();
        let host = "# mine\nsandbox_mode = \"workspace-write\"\nmodel = \"o3\"\n[projects.\"/p\"]\ntrust_level = \"trusted\"\n";
        let inside = with_inside_settings(StateFormat::Toml, host.as_bytes(), &settings).unwrap();
        let inside = String::from_utf8(inside).unwrap();
        let doc: toml::Table = toml::from_str(&inside).unwrap();
        assert_eq!(doc["sandbox_mode"].as_str(), Some("danger-full-access"));
        assert_eq!(doc["model"].as_str(), Some("o3"));
        assert_eq!(
            doc["projects"]["/p"]["trust_level"].as_str(),
            Some("trusted")
        );
        assert!(inside.contains("# mine"), "{inside}");
        let empty = with_inside_settings(StateFormat::Toml, b"", &settings).unwrap();
        assert_eq!(empty, b"sandbox_mode = \"danger-full-access\"\n");
        assert!(with_inside_settings(StateFormat::Toml, b"= broken", &settings).is_none());
        // Merged back, the setting is no change of the run's.
        let outcome =
            merge_toml(&inside, &inside, Some(host), &["model".to_owned()], "/p").unwrap();
        assert!(outcome.merged.is_none() && outcome.dropped.is_empty());
    }

    const PERSIST: &[&str] = &[
        "numStartups",
        "theme",
        "projects.{project}.hasTrustDialogAccepted",
        "projects.*.lastCost",
        "customApiKeyResponses",
    ];

    fn persist() -> Vec<String> {
        PERSIST.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn allowed_changes_go_back_and_everything_else_is_dropped() {
        let before =
            json!({"numStartups": 1, "mcpServers": {}, "projects": {"/p": {"allowedTools": []}}});
        let after = json!({
            "numStartups": 2,
            "theme": "dark",
            "mcpServers": {"evil": {"command": "/tmp/x"}},
            "hooks": {"Stop": [{"command": "x"}]},
            "projects": {
                "/p": {"allowedTools": ["Bash"], "hasTrustDialogAccepted": true},
                "/q.v2": {"lastCost": 1, "mcpServers": {"e": {"command": "sh"}}}
            },
            "unknownKey": 1
        });
        let out = merge_json(
            &before.to_string(),
            &after.to_string(),
            Some(&before.to_string()),
            &persist(),
            "/p",
        )
        .unwrap();
        let merged = out.merged.unwrap();
        assert_eq!(
            merged,
            json!({
                "numStartups": 2,
                "theme": "dark",
                "mcpServers": {},
                "projects": {
                    "/p": {"allowedTools": [], "hasTrustDialogAccepted": true},
                    "/q.v2": {"lastCost": 1}
                }
            })
        );
        assert_eq!(
            keys(&out.dropped),
            vec![
                "hooks.Stop",
                "mcpServers.evil.command",
                "projects.\"/p\".allowedTools",
                "projects.\"/q.v2\".mcpServers.e.command",
                "unknownKey"
            ]
        );
    }

    #[test]
    fn concurrent_edits_outside_survive_and_only_the_sandboxs_changes_apply() {
        let before = json!({"numStartups": 1, "theme": "light", "mcpServers": {}});
        let after = json!({"numStartups": 2, "theme": "light", "mcpServers": {}});
        // Outside, during the run, another session added a server and changed the theme.
        let current =
            json!({"numStartups": 1, "theme": "dark", "mcpServers": {"mine": {"command": "x"}}});
        let out = merge_json(
            &before.to_string(),
            &after.to_string(),
            Some(&current.to_string()),
            &persist(),
            "/p",
        )
        .unwrap();
        assert_eq!(
            out.merged.unwrap(),
            json!({"numStartups": 2, "theme": "dark", "mcpServers": {"mine": {"command": "x"}}})
        );
        assert!(out.dropped.is_empty());
    }

    #[test]
    fn removals_of_allowed_keys_apply_and_nothing_changed_writes_nothing() {
        let before = json!({"theme": "dark", "customApiKeyResponses": {"approved": ["k"]}});
        let after = json!({"customApiKeyResponses": {"approved": ["k"]}});
        let out = merge_json(
            &before.to_string(),
            &after.to_string(),
            None,
            &persist(),
            "/p",
        )
        .unwrap();
        assert_eq!(out.merged.unwrap(), json!({}));
        let same = merge_json(
            &before.to_string(),
            &before.to_string(),
            None,
            &persist(),
            "/p",
        )
        .unwrap();
        assert_eq!(same, MergeOutcome::default());
    }

    #[test]
    fn a_change_that_does_not_fit_the_host_file_is_dropped() {
        let before = json!({});
        let after = json!({"projects": {"/p": {"hasTrustDialogAccepted": true}}});
        let current = json!({"projects": "garbage"});
        let out = merge_json(
            &before.to_string(),
            &after.to_string(),
            Some(&current.to_string()),
            &persist(),
            "/p",
        )
        .unwrap();
        assert_eq!(out.merged, None);
        assert_eq!(
            keys(&out.dropped),
            vec!["projects.\"/p\".hasTrustDialogAccepted"]
        );
    }

    #[test]
    fn trust_reaches_only_the_runs_own_folder() {
        let after = json!({"projects": {
            "/p": {"hasTrustDialogAccepted": true},
            "/": {"hasTrustDialogAccepted": true},
            "/other": {"hasTrustDialogAccepted": true}
        }});
        let out = merge_json("{}", &after.to_string(), None, &persist(), "/p").unwrap();
        assert_eq!(
            out.merged.unwrap(),
            json!({"projects": {"/p": {"hasTrustDialogAccepted": true}}})
        );
        assert_eq!(
            keys(&out.dropped),
            vec![
                "projects.\"/\".hasTrustDialogAccepted",
                "projects.\"/other\".hasTrustDialogAccepted"
            ]
        );
    }

    #[test]
    fn a_key_that_only_looks_like_an_allowed_one_is_dropped() {
        // `projects.*.hasTrustDialogAccepted` does not allow a top-level key of that name,
        // nor a sibling whose name starts the same way.
        let after = json!({"hasTrustDialogAccepted": true, "themeCommand": "sh", "projects": {"/p": {"hasTrustDialogAcceptedX": 1}}});
        let out = merge_json("{}", &after.to_string(), Some("{}"), &persist(), "/p").unwrap();
        assert_eq!(out.merged, None);
        assert_eq!(out.dropped.len(), 3);
    }

    #[test]
    fn empty_defaults_are_dropped_quietly_but_clearing_a_value_is_reported() {
        let before = json!({"projects": {"/p": {"allowedTools": ["Read"]}}});
        let after = json!({"projects": {
            "/p": {"allowedTools": [], "mcpContextUris": [], "hasClaudeMdExternalIncludesApproved": false},
            "/q": {"enabledMcpjsonServers": [], "mcpServers": {}}
        }});
        let out = merge_json(
            &before.to_string(),
            &after.to_string(),
            None,
            &persist(),
            "/p",
        )
        .unwrap();
        assert_eq!(out.merged, None);
        assert_eq!(keys(&out.dropped), vec!["projects.\"/p\".allowedTools"]);
        assert_eq!(
            keys(&out.dropped_defaults),
            vec![
                "projects.\"/p\".hasClaudeMdExternalIncludesApproved",
                "projects.\"/p\".mcpContextUris",
                "projects.\"/q\".enabledMcpjsonServers",
            ]
        );
    }

    #[test]
    fn documents_that_are_not_objects_are_refused() {
        assert_eq!(
            merge_json("[]", "{}", None, &[], "/p"),
            Err(MergeError::Before)
        );
        assert_eq!(
            merge_json("{}", "{", None, &[], "/p"),
            Err(MergeError::After)
        );
        assert_eq!(
            merge_json("{}", "{}", Some("1"), &[], "/p"),
            Err(MergeError::Current)
        );
    }

    const CODEX: &[&str] = &["projects.{project}.trust_level"];

    fn codex() -> Vec<String> {
        CODEX.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn toml_trust_for_the_project_goes_back_and_comments_survive() {
        let host =
            "# my settings\nmodel = \"o3\" # pinned\n\n[mcp_servers.mine]\ncommand = \"mine\"\n";
        let after = "model = \"o3\"\nnotify = [\"sh\", \"-c\", \"evil\"]\n\
            [mcp_servers.mine]\ncommand = \"mine\"\n[mcp_servers.evil]\ncommand = \"/tmp/x\"\n\
            [projects.\"/p\"]\ntrust_level = \"trusted\"\n\
            [projects.\"/other\"]\ntrust_level = \"trusted\"\n\
            [profiles.x]\nmodel = \"y\"\n[shell_environment_policy]\ninherit = \"all\"\n";
        let out = merge_toml(host, after, Some(host), &codex(), "/p").unwrap();
        assert_eq!(
            out.merged.as_deref(),
            Some(
                "# my settings\nmodel = \"o3\" # pinned\n\n[mcp_servers.mine]\ncommand = \"mine\"\n\n\
                 [projects.\"/p\"]\ntrust_level = \"trusted\"\n"
            )
        );
        assert_eq!(keys(&out.applied), vec!["projects.\"/p\".trust_level"]);
        assert_eq!(
            keys(&out.dropped),
            vec![
                "mcp_servers.evil.command",
                "notify",
                "profiles.x.model",
                "projects.\"/other\".trust_level",
                "shell_environment_policy.inherit"
            ]
        );
    }

    #[test]
    fn toml_concurrent_edits_outside_survive() {
        let before = "[projects.\"/p\"]\ntrust_level = \"untrusted\"\n";
        let after = "[projects.\"/p\"]\ntrust_level = \"trusted\"\n";
        // Meanwhile, outside: another folder trusted and a notify command configured.
        let current = "notify = [\"mine\"]\n[projects.\"/p\"]\ntrust_level = \"untrusted\"\n\
                       [projects.\"/q\"]\ntrust_level = \"trusted\"\n";
        let out = merge_toml(before, after, Some(current), &codex(), "/p").unwrap();
        assert_eq!(
            out.merged.as_deref(),
            Some(
                "notify = [\"mine\"]\n[projects.\"/p\"]\ntrust_level = \"trusted\"\n\
                 [projects.\"/q\"]\ntrust_level = \"trusted\"\n"
            )
        );
        assert!(out.dropped.is_empty());
        // Nothing changed by the run: nothing written.
        let same = merge_toml(before, before, Some(current), &codex(), "/p").unwrap();
        assert_eq!(same, TomlMergeOutcome::default());
    }

    #[test]
    fn toml_a_change_that_does_not_fit_or_a_broken_file_is_refused() {
        let after = "[projects.\"/p\"]\ntrust_level = \"trusted\"\n";
        let out = merge_toml("", after, Some("projects = 1\n"), &codex(), "/p").unwrap();
        assert_eq!(out.merged, None);
        assert_eq!(keys(&out.dropped), vec!["projects.\"/p\".trust_level"]);
        assert_eq!(
            merge_toml("", "[x", None, &codex(), "/p"),
            Err(MergeError::After)
        );
        assert_eq!(
            merge_toml("", after, Some("= ="), &codex(), "/p"),
            Err(MergeError::Current)
        );
        // No host file yet: it gets only the trust entry.
        let out = merge_toml("", after, None, &codex(), "/p").unwrap();
        assert_eq!(
            out.merged.as_deref(),
            Some("[projects.\"/p\"]\ntrust_level = \"trusted\"\n")
        );
    }
}
