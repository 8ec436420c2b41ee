//! The weaker `landlock` tier (`sandy run --tier landlock`): no namespaces, so what the
//! mount layer hides cannot be hidden by a mount. A hidden path is simply not granted:
//! a grant whose tree holds one is split into grants of its other entries
//! ([`split_around`]), down to the hidden path. Built as data from a listing of the
//! directories on the way, so that it is tested as data.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use landlock::{AccessFs, BitFlags};
use sandy_policy::Scope;

use crate::landlock::PathRule;

/// One entry of a directory, as [`split_around`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    /// A symbolic link grants nothing itself (Landlock checks where it leads), so it is
    /// left out of the split.
    pub symlink: bool,
}

/// Most entries a split directory may have; past it the grant is left out, with what it
/// covers (fail closed: nothing hidden is granted).
pub const MAX_SPLIT_ENTRIES: usize = 65_536;

/// The rules with every hidden path taken out of them: a subtree rule whose tree holds a
/// hidden path (and is not itself hidden below nothing) is replaced by rules for each of
/// its entries (`list`), but the hidden one; an entry on the way to a deeper hidden path
/// is split in turn. The split directory itself keeps no right, not even listing: its
/// hidden entry would be listed too. A rule for a hidden path itself, or inside one, is
/// dropped. A directory that cannot be listed grants nothing.
pub fn split_around(
    rules: Vec<PathRule>,
    hidden: &[PathBuf],
    list: &dyn Fn(&Path) -> Option<Vec<Entry>>,
) -> Vec<PathRule> {
    let mut out = Vec::with_capacity(rules.len());
    for rule in rules {
        split_one(rule, hidden, list, &mut out);
    }
    out
}

fn split_one(
    rule: PathRule,
    hidden: &[PathBuf],
    list: &dyn Fn(&Path) -> Option<Vec<Entry>>,
    out: &mut Vec<PathRule>,
) {
    if hidden.iter().any(|h| rule.path.starts_with(h)) {
        return;
    }
    let covers = rule.scope == Scope::Subtree && hidden.iter().any(|h| h.starts_with(&rule.path));
    if !covers {
        out.push(rule);
        return;
    }
    let Some(entries) = list(&rule.path) else {
        return;
    };
    if entries.len() > MAX_SPLIT_ENTRIES {
        return;
    }
    for entry in entries.into_iter().filter(|e| !e.symlink) {
        split_one(
            PathRule {
                path: rule.path.join(&entry.name),
                access: rule.access,
                scope: Scope::Subtree,
            },
            hidden,
            list,
            out,
        );
    }
}

/// The rule for the inherited terminal, named by its path (`/dev/pts/N`), so that a tool
/// that reopens its terminal by name (`tty`, GPG) still can: read, write and terminal
/// ioctls, exactly that device. The host's other ptys stay closed.
pub fn inherited_terminal_rule(path: PathBuf) -> PathRule {
    let access: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    PathRule {
        path,
        access,
        scope: Scope::Exact,
    }
}

/// The inherited terminal's name (`/dev/pts/N`, `/dev/ttyN`), from the standard streams,
/// when one of them is a terminal.
pub fn inherited_terminal() -> Option<PathBuf> {
    (0..3).find_map(|fd| {
        let name = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        let text = name.to_str()?;
        // A terminal device by its name; Landlock checks the node the name leads to, so a
        // name that is not one grants nothing useful.
        let terminal = text.starts_with("/dev/pts/") || text.starts_with("/dev/tty");
        (terminal && text != "/dev/tty").then_some(name)
    })
}

/// Lists a directory for [`split_around`]: names and whether each is a symbolic link;
/// `None` when it cannot be read.
pub fn list_dir(dir: &Path) -> Option<Vec<Entry>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let symlink = entry.file_type().ok()?.is_symlink();
        entries.push(Entry {
            name: entry.file_name(),
            symlink,
        });
        if entries.len() > MAX_SPLIT_ENTRIES {
            break;
        }
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str) -> PathRule {
        PathRule {
            path: path.into(),
            access: AccessFs::ReadFile | AccessFs::ReadDir,
            scope: Scope::Subtree,
        }
    }

    fn fake(dir: &Path) -> Option<Vec<Entry>> {
        let names: &[(&str, bool)] = match dir.to_str()? {
            "/etc" => &[
                ("passwd", false),
                ("shadow", false),
                ("ssl", false),
                ("mtab", true),
            ],
            "/home/u" => &[(".ssh", false), (".config", false), ("notes", false)],
            "/home/u/.config" => &[("gh", false), ("git", false)],
            _ => return None,
        };
        Some(
            names
                .iter()
                .map(|(n, l)| Entry {
                    name: (*n).into(),
                    symlink: *l,
                })
                .collect(),
        )
    }

    fn paths(rules: &[PathRule]) -> Vec<String> {
        rules.iter().map(|r| r.path.display().to_string()).collect()
    }

    #[test]
    fn a_grant_that_covers_a_hidden_path_becomes_its_other_entries() {
        let hidden = vec![PathBuf::from("/etc/shadow")];
        let out = split_around(vec![rule("/usr"), rule("/etc")], &hidden, &fake);
        assert_eq!(paths(&out), ["/usr", "/etc/passwd", "/etc/ssl"]);
        assert!(out.iter().all(|r| r.scope == Scope::Subtree));
    }

    #[test]
    fn deeper_hidden_paths_split_each_directory_on_the_way() {
        let hidden = vec![
            PathBuf::from("/home/u/.ssh"),
            PathBuf::from("/home/u/.config/gh"),
        ];
        let out = split_around(vec![rule("/home/u")], &hidden, &fake);
        assert_eq!(paths(&out), ["/home/u/.config/git", "/home/u/notes"]);
    }

    #[test]
    fn rules_inside_a_hidden_path_and_unlistable_directories_grant_nothing() {
        let hidden = vec![PathBuf::from("/home/u/.ssh"), PathBuf::from("/srv/x")];
        let out = split_around(
            vec![rule("/home/u/.ssh/config"), rule("/srv"), rule("/opt")],
            &hidden,
            &fake,
        );
        assert_eq!(paths(&out), ["/opt"]);
    }

    #[test]
    fn exact_rules_are_kept() {
        let hidden = vec![PathBuf::from("/etc/shadow")];
        let exact = PathRule {
            scope: Scope::Exact,
            ..rule("/etc/hosts")
        };
        let out = split_around(vec![exact.clone()], &hidden, &fake);
        assert_eq!(out, vec![exact]);
    }
}
