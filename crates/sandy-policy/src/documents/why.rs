//! `sandy why`: which rule of a resolved policy decides one access to one path.
//!
//! The answer is read off the same [`ResolvedPolicy`] a launch is built from, in the
//! order the layers enforce it: a mask (an empty mount over a sensitive path) first, then
//! the private directories that replace host paths inside, the prepared copies (views),
//! read-only protections (only writes are refused by them), and last the Landlock grants.
//! What flag would change a refusal is decided by the caller, by resolving again with that
//! flag (the same code as `sandy run`) and asking again.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host::inspect::PathInspector;
use crate::model::paths::{normalize, private_dirs};
use crate::model::policy::{
    Access, FileView, Grant, Origin, ProtectionKind, ResolvedPolicy, Scope, ViewKind,
};

/// The access asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Question {
    Read,
    Write,
    Exec,
}

impl Question {
    /// The least grant that allows this access.
    pub fn needs(self) -> Access {
        match self {
            Question::Read => Access::Read,
            Question::Exec => Access::ReadExec,
            Question::Write => Access::ReadWrite,
        }
    }
}

/// The rule that decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Rule {
    /// An empty read-only mount over a sensitive path.
    Mask { path: PathBuf, origin: Origin },
    /// The path lies under a directory the sandbox replaces with its own private one (the
    /// grants decide on that one).
    Private { directory: PathBuf },
    /// The sandbox sees a prepared copy instead of the host file.
    View { target: PathBuf, view: ViewKind },
    /// A read-only protection (git machinery, an agent's launch configuration).
    Protection { path: PathBuf, origin: Origin },
    /// A Landlock grant.
    Grant {
        path: PathBuf,
        access: Access,
        scope: Scope,
        origin: Origin,
    },
    /// Nothing grants it: Landlock refuses.
    NoGrant,
}

/// The decision and the rule behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allowed: bool,
    /// The path the kernel decides on: the question's path, made absolute and resolved
    /// through the symlinks that exist.
    pub resolved: PathBuf,
    #[serde(flatten)]
    pub rule: Rule,
    /// Why no flag can change a refusal (a mask, a protection, a filtered copy), or `None`.
    pub unchangeable: Option<String>,
}

impl Rule {
    /// The rule that is `grant`.
    fn of_grant(grant: &Grant) -> Rule {
        Rule::Grant {
            path: grant.path.clone(),
            access: grant.access,
            scope: grant.scope,
            origin: grant.origin,
        }
    }
}

/// Decides `question` on `path` (absolute) under `policy`.
pub fn decide(
    policy: &ResolvedPolicy,
    question: Question,
    path: &Path,
    fs: &dyn PathInspector,
) -> Decision {
    let lexical = normalize(path);
    let resolved = resolve_existing(&lexical, fs);
    let names = [lexical.as_path(), resolved.as_path()];
    let under = |p: &Path| names.iter().any(|n| n.starts_with(p));
    let decision = |allowed, rule, unchangeable: Option<&str>| Decision {
        allowed,
        resolved: resolved.clone(),
        rule,
        unchangeable: unchangeable.map(str::to_owned),
    };

    if let Some(mask) = policy
        .protections
        .iter()
        .find(|p| p.kind == ProtectionKind::Deny && under(&p.path))
    {
        return decision(
            false,
            Rule::Mask {
                path: mask.path.clone(),
                origin: mask.origin,
            },
            Some(mask.reason.as_deref().unwrap_or(
                "a sensitive path (credentials, keys, tokens): Sandy masks it whatever the grants",
            )),
        );
    }
    if let Some(directory) = private_directory(policy, &resolved) {
        // Inside, the path names the sandbox's own private directory: the grants decide
        // on that one, and the host's copy is never reached.
        let allowed = granting(policy, &resolved, question.needs()).is_some();
        return decision(
            allowed,
            Rule::Private { directory },
            (!allowed).then_some(
                "inside the sandbox this directory is its own private one; the host's \
                 copy is out of reach",
            ),
        );
    }
    // A protection is the reason a write is refused, whatever grant is around it (a
    // protected socket carried into the private /tmp, for instance): no flag changes it.
    // A writable name of an agent's state opened again inside a directory protected as
    // one is writable like the rest of the agent's state.
    let reopened = policy.reopened.iter().any(|r| under(r));
    if question == Question::Write && !reopened {
        if let Some(p) = policy
            .protections
            .iter()
            .find(|p| p.kind == ProtectionKind::ReadOnly && under(&p.path))
        {
            // A filtered view in a writable tree is protected too: the view says why.
            if let Some(view) = policy
                .views
                .iter()
                .find(|v| v.target == p.path || v.name() == p.path)
            {
                return decide_view(view, question, resolved.clone());
            }
            let own;
            let why = match (p.origin, p.reason.as_deref()) {
                (Origin::Profile, _) => {
                    "the agent's launch configuration (hooks, settings, MCP servers, \
                     instructions): protected so nothing planted runs at its next launch; \
                     change it outside the sandbox"
                }
                // A protection that says why it exists (a cache's programs, a directory a
                // start-up file sources).
                (_, Some(reason)) => {
                    own = format!("{reason}: protected; change it outside the sandbox");
                    own.as_str()
                }
                _ => {
                    "git machinery (config, hooks, pointers): protected so nothing planted \
                     runs in your next git command outside; change it outside the sandbox"
                }
            };
            return decision(
                false,
                Rule::Protection {
                    path: p.path.clone(),
                    origin: p.origin,
                },
                Some(why),
            );
        }
    }
    // A grant carried into a private directory is a mount of its own, read-only unless
    // the grant is read-write: the /tmp grant around it lets Landlock allow a write, but
    // the mount refuses it (EROFS).
    if question == Question::Write {
        if let Some(g) = carried_grant(policy, &resolved).filter(|g| g.access != Access::ReadWrite)
        {
            return decision(false, Rule::of_grant(g), None);
        }
    }
    if let Some(view) = policy
        .views
        .iter()
        .find(|v| names.contains(&v.target.as_path()) || names.contains(&v.name()))
    {
        return decide_view(view, question, resolved.clone());
    }
    match granting(policy, &resolved, question.needs()) {
        Some(g) => decision(true, Rule::of_grant(g), None),
        None => decision(false, Rule::NoGrant, None),
    }
}

/// The first grant giving `path` at least `needed`.
fn granting<'a>(policy: &'a ResolvedPolicy, path: &Path, needed: Access) -> Option<&'a Grant> {
    policy.grants.iter().find(|g| {
        (g.path == path || (g.scope == Scope::Subtree && path.starts_with(&g.path)))
            && g.access.covers(needed)
    })
}

fn decide_view(view: &FileView, question: Question, resolved: PathBuf) -> Decision {
    let rule = Rule::View {
        target: view.target.clone(),
        view: view.kind,
    };
    let (allowed, unchangeable) = match (view.kind, question) {
        (_, Question::Read) | (ViewKind::PrivateCopy, Question::Write) => (true, None),
        (ViewKind::Filtered, _) => (
            false,
            Some(
                "the sandbox reads a copy of this file without its credentials; the host \
                 file itself is never writable or executable inside"
                    .to_owned(),
            ),
        ),
        (ViewKind::PrivateCopy, Question::Exec) => (
            false,
            Some("a private copy of an agent's state file is not executable".to_owned()),
        ),
    };
    Decision {
        allowed,
        resolved,
        rule,
        unchangeable,
    }
}

/// The private directory (`/tmp`, `/var/tmp`, `/dev/shm`, `/run`, the runtime directory)
/// that hides `path` inside, unless a grant carries it through.
fn private_directory(policy: &ResolvedPolicy, path: &Path) -> Option<PathBuf> {
    match carrying(policy, path)? {
        (private, None) => Some(private.to_path_buf()),
        (_, Some(_)) => None,
    }
}

/// The most specific grant carried into a private directory that covers `path`.
fn carried_grant<'a>(policy: &'a ResolvedPolicy, path: &Path) -> Option<&'a Grant> {
    carrying(policy, path)?.1
}

/// The private directory `path` lies in, and the grant carrying it through, if any.
fn carrying<'a>(policy: &'a ResolvedPolicy, path: &Path) -> Option<(&'a Path, Option<&'a Grant>)> {
    crate::resolve::ctx::carrying(
        path,
        &private_dirs(policy.runtime_dir.as_deref()),
        &policy.grants,
    )
}

/// `path` resolved through the symlinks of its longest existing prefix, the rest appended.
fn resolve_existing(path: &Path, fs: &dyn PathInspector) -> PathBuf {
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut prefix = path;
    loop {
        if let Ok(canonical) = fs.canonicalize(prefix) {
            let mut out = canonical;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (prefix.parent(), prefix.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                prefix = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}
