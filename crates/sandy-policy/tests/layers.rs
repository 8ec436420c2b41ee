//! Keeps the crate's layers (see the crate documentation, `src/lib.rs`): every module under
//! `src/LAYER/` may refer only to modules of its own layer or of a lower one, and the
//! modules' references have no circle, within a layer either.
//!
//! The references are read from the source: `use` declarations (groups expanded) and the
//! `crate::`, `super::`, `self::` and child-module paths in bodies. Comments, string
//! literals and `#[cfg(test)]` modules are left out (a module's tests may build their
//! fixtures with higher layers). Inside the crate a path names the layer
//! (`crate::rules::caches::X`): the old paths that `lib.rs` re-exports for the crate's
//! users (`crate::caches::X`, `crate::Tier`) are refused here, since they would hide the
//! layer a reference goes to. `lib.rs` itself, which only declares the layers and
//! re-exports, is not checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first.
const LAYERS: [&str; 5] = ["model", "host", "rules", "resolve", "documents"];

type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of `src` that matter for paths: identifiers, `::` and punctuation. Comments,
/// string, character and byte literals, and lifetimes are dropped.
fn tokens(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '\'' {
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                // A lifetime: its name is read as an identifier, which no path follows.
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw strings: r"..", r#".."#, br#".."#.
            if (word == "r" || word == "br") && matches!(c.get(i), Some('"') | Some('#')) {
                let mut hashes = 0;
                while c.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if c.get(i) == Some(&'"') {
                    i += 1;
                    loop {
                        if i >= c.len() {
                            break;
                        }
                        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                    continue;
                }
            }
            out.push(Token::Ident(word));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            if !ch.is_whitespace() {
                out.push(Token::Punct(ch));
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: Option<&Token>, word: &str) -> bool {
    matches!(t, Some(Token::Ident(w)) if w == word)
}

/// What one file refers to, and the test modules it declares as separate files.
struct Refs {
    paths: Vec<Vec<String>>,
    test_children: Vec<String>,
}

/// The paths of one `use` tree starting at `t[*i]`, each prefixed with `prefix`.
fn use_tree(t: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        match t.get(*i) {
            Some(Token::Ident(w)) if w == "as" => {
                *i += 2;
                break;
            }
            Some(Token::Ident(w)) => {
                if w != "self" || path.is_empty() {
                    path.push(w.clone());
                }
                *i += 1;
            }
            Some(Token::PathSep) => *i += 1,
            Some(Token::Punct('*')) => {
                *i += 1;
                break;
            }
            Some(Token::Punct('{')) => {
                *i += 1;
                while !matches!(t.get(*i), Some(Token::Punct('}')) | None) {
                    use_tree(t, i, &path, out);
                    if matches!(t.get(*i), Some(Token::Punct(','))) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => break,
        }
    }
    out.push(path);
}

fn references(src: &str) -> Refs {
    let t = tokens(src);
    let mut paths = Vec::new();
    let mut test_children = Vec::new();
    let mut i = 0;
    while i < t.len() {
        // `#[cfg(test)] mod NAME { .. }` or `#[cfg(test)] mod NAME;`
        if t[i] == Token::Punct('#')
            && t.get(i + 1) == Some(&Token::Punct('['))
            && is_ident(t.get(i + 2), "cfg")
            && t.get(i + 3) == Some(&Token::Punct('('))
            && is_ident(t.get(i + 4), "test")
            && t.get(i + 5) == Some(&Token::Punct(')'))
            && t.get(i + 6) == Some(&Token::Punct(']'))
        {
            let mut j = i + 7;
            if is_ident(t.get(j), "pub") {
                j += 1;
            }
            if is_ident(t.get(j), "mod") {
                if let Some(Token::Ident(name)) = t.get(j + 1) {
                    if t.get(j + 2) == Some(&Token::Punct(';')) {
                        test_children.push(name.clone());
                        i = j + 3;
                        continue;
                    }
                    if t.get(j + 2) == Some(&Token::Punct('{')) {
                        let mut depth = 0;
                        i = j + 2;
                        while i < t.len() {
                            match t[i] {
                                Token::Punct('{') => depth += 1,
                                Token::Punct('}') => depth -= 1,
                                _ => {}
                            }
                            i += 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        continue;
                    }
                }
            }
        }
        if is_ident(t.get(i), "use") {
            i += 1;
            if t.get(i) == Some(&Token::PathSep) {
                i += 1;
            }
            use_tree(&t, &mut i, &[], &mut paths);
            continue;
        }
        if let Token::Ident(first) = &t[i] {
            let after_sep = i > 0 && t[i - 1] == Token::PathSep;
            let mut path = vec![first.clone()];
            let mut j = i + 1;
            while t.get(j) == Some(&Token::PathSep) {
                match t.get(j + 1) {
                    Some(Token::Ident(w)) => path.push(w.clone()),
                    _ => break,
                }
                j += 2;
            }
            if !after_sep && path.len() > 1 {
                paths.push(path);
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    Refs {
        paths,
        test_children,
    }
}

/// The module a file is (`model/policy.rs`: `model::policy`, `resolve/mod.rs`: `resolve`).
fn module_of(file: &str) -> Module {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: Module = stem.split('/').map(str::to_owned).collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    parts
}

/// The layer rule over a set of files (path relative to `src/`, text). Returns one line per
/// violation, empty when the set keeps the rule.
fn check(files: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut refs = BTreeMap::new();
    let mut test_files = BTreeSet::new();
    for (file, src) in files {
        if file == "lib.rs" {
            continue;
        }
        let module = module_of(file);
        let r = references(src);
        for child in &r.test_children {
            let mut m = module.clone();
            m.push(child.clone());
            test_files.insert(m);
        }
        refs.insert(module, (file.clone(), r.paths));
    }
    // Tests declared as files (`#[cfg(test)] mod tests;`) and what lies below them.
    refs.retain(|m, _| !test_files.iter().any(|t| m.starts_with(t)));
    let modules: BTreeSet<Module> = refs.keys().cloned().collect();
    let layer = |m: &Module| {
        LAYERS
            .iter()
            .position(|l| m.first().map(String::as_str) == Some(*l))
    };

    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, (file, paths)) in &refs {
        let Some(own) = layer(module) else {
            problems.push(format!(
                "{file}: outside the layers ({})",
                LAYERS.join(", ")
            ));
            continue;
        };
        edges.entry(module.clone()).or_default();
        for path in paths {
            let mut at: Module = match path[0].as_str() {
                "crate" => Vec::new(),
                "self" => module.clone(),
                "super" => module.clone(),
                first => {
                    let mut child = module.clone();
                    child.push(first.to_owned());
                    if !modules.contains(&child) {
                        continue;
                    }
                    module.clone()
                }
            };
            let mut rest = &path[..];
            if matches!(path[0].as_str(), "crate" | "self") {
                rest = &path[1..];
            }
            while rest.first().map(String::as_str) == Some("super") {
                at.pop();
                rest = &rest[1..];
            }
            for seg in rest {
                let mut next = at.clone();
                next.push(seg.clone());
                if !modules.contains(&next) {
                    break;
                }
                at = next;
            }
            let shown = path.join("::");
            let Some(to) = layer(&at) else {
                problems.push(format!(
                    "{file}: `{shown}` does not name a layer (write `crate::LAYER::module::..`)"
                ));
                continue;
            };
            if to > own {
                problems.push(format!(
                    "{file}: `{shown}` reaches up from {} to {}",
                    LAYERS[own], LAYERS[to]
                ));
            }
            if &at != module {
                edges.entry(module.clone()).or_default().insert(at);
            }
        }
    }
    if let Some(circle) = find_circle(&edges) {
        let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
        problems.push(format!("import circle: {}", names.join(" -> ")));
    }
    problems
}

/// A circle in the graph, first module repeated at the end, if any.
fn find_circle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        m: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for next in edges.get(m).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == next).unwrap_or(0);
                    let mut circle = stack[from..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                0 => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if state.get(m).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(m, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn read_dir(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_dir(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn the_crate_keeps_its_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_dir(&root, &root, &mut files);
    assert!(files.len() > 20, "read only {} files", files.len());
    let problems = check(&files);
    assert!(
        problems.is_empty(),
        "layer rule broken:\n{}",
        problems.join("\n")
    );
}

fn set(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
        .collect()
}

/// A made-up crate that keeps the rule: the base every other case breaks in one place.
fn clean() -> Vec<(&'static str, &'static str)> {
    vec![
        ("lib.rs", "mod model; mod rules; pub use rules::grants;"),
        ("model/mod.rs", "pub mod access; pub mod text;"),
        (
            "model/access.rs",
            "use crate::model::text::Shown; pub enum Access { Read }",
        ),
        ("model/text.rs", "pub struct Shown;"),
        ("host/mod.rs", "pub mod inspect;"),
        ("host/inspect.rs", "pub trait PathInspector {}"),
        ("rules/mod.rs", "pub mod grants;"),
        (
            "rules/grants.rs",
            "use crate::{host::inspect::PathInspector, model::{access::Access, text}};\n\
             fn f() { crate::model::text::Shown; } // crate::documents::x in a comment\n\
             const S: &str = \"crate::documents::dryrun\";\n\
             #[cfg(test)]\nmod tests { use crate::documents::dryrun::X; }",
        ),
        (
            "resolve/mod.rs",
            "mod run; mod ctx; pub(crate) struct Shared;",
        ),
        (
            "resolve/ctx.rs",
            "pub struct Ctx<'a>(&'a u8); fn c() -> char { '{' }",
        ),
        (
            "resolve/run.rs",
            "use super::{ctx::Ctx, Shared}; use crate::rules::grants;",
        ),
        ("documents/mod.rs", "pub mod dryrun;"),
        (
            "documents/dryrun.rs",
            "use crate::resolve::run; use crate::model::access::Access;",
        ),
    ]
}

fn with(change: (&'static str, &'static str)) -> Vec<(String, String)> {
    let mut files = clean();
    match files.iter_mut().find(|(p, _)| *p == change.0) {
        Some(file) => file.1 = change.1,
        None => files.push(change),
    }
    set(&files)
}

#[test]
fn a_clean_made_up_crate_passes() {
    assert_eq!(check(&set(&clean())), Vec::<String>::new());
}

#[test]
fn an_import_from_a_higher_layer_fails() {
    let problems = check(&with((
        "model/text.rs",
        "use crate::rules::grants::f; pub struct Shown;",
    )));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("model/text.rs") && p.contains("from model to rules")),
        "{problems:?}"
    );
}

#[test]
fn a_higher_layer_named_in_a_body_or_a_group_fails() {
    let body = check(&with((
        "host/inspect.rs",
        "fn f() { crate::resolve::run::go() }",
    )));
    assert!(
        body.iter().any(|p| p.contains("from host to resolve")),
        "{body:?}"
    );
    let group = check(&with((
        "rules/grants.rs",
        "use crate::{model::text, documents::{dryrun}};",
    )));
    assert!(
        group.iter().any(|p| p.contains("from rules to documents")),
        "{group:?}"
    );
}

#[test]
fn a_circle_within_a_layer_fails() {
    let problems = check(&with((
        "model/text.rs",
        "use crate::model::access::Access; pub struct Shown;",
    )));
    assert!(
        problems.iter().any(|p| p.starts_with("import circle:")
            && p.contains("model::access")
            && p.contains("model::text")),
        "{problems:?}"
    );
}

#[test]
fn a_circle_through_super_and_a_child_module_fails() {
    let problems = check(&with((
        "resolve/mod.rs",
        "mod run; mod ctx; struct Shared; fn g() { run::go() }",
    )));
    assert!(
        problems.iter().any(|p| p.starts_with("import circle:")),
        "{problems:?}"
    );
    let problems = check(&with(("resolve/ctx.rs", "use super::run::go;")));
    assert!(
        problems.iter().any(|p| p.starts_with("import circle:")),
        "{problems:?}"
    );
}

#[test]
fn a_path_around_the_layers_fails() {
    let problems = check(&with(("rules/grants.rs", "use crate::grants::Access;")));
    assert!(
        problems.iter().any(|p| p.contains("does not name a layer")),
        "{problems:?}"
    );
    let problems = check(&with(("util.rs", "pub fn f() {}")));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("util.rs: outside the layers")),
        "{problems:?}"
    );
}

#[test]
fn tests_comments_and_strings_are_not_references() {
    // `clean()` holds a higher layer in a test module, a comment and a string; a test
    // module in a file of its own is left out too.
    let problems = check(&with((
        "model/text.rs",
        "pub struct Shown; #[cfg(test)]\nmod tests;",
    )));
    assert_eq!(problems, Vec::<String>::new());
    let mut files = with((
        "model/text.rs",
        "pub struct Shown; #[cfg(test)]\nmod tests;",
    ));
    files.push((
        "model/text/tests.rs".into(),
        "use crate::documents::dryrun;".into(),
    ));
    assert_eq!(check(&files), Vec::<String>::new());
}
