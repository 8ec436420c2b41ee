//! Credential filtering for [`crate::model::policy::ViewKind::Filtered`] views: the copy of a
//! configuration file the sandbox reads instead of the host file keeps every setting but
//! those that look like a credential.
//!
//! The rule is deliberately coarse and errs towards dropping: a line goes when the name it
//! assigns looks like a credential (`TOKEN`, `SECRET`, `PASSWORD`, `_auth`, ...), or when
//! any key in it does (a TOML inline table `{ index = "...", token = "..." }`, a YAML or
//! JSON flow map), and a URL with a user name or password anywhere in a kept line loses
//! that part. Names are compared in `snake_case`, so `npmAuthToken` is `npm_auth_token`.
//! A dropped line is replaced by a comment in the file's own comment syntax, so line
//! numbers stay the same. XML (Maven's `settings.xml`) has its own rule: the content of
//! an element whose name looks like a credential (`<password>`, `<passphrase>`,
//! `<privateKey>`) is removed wherever it spans lines, and so is the `<value>` that
//! follows a `<name>` that looks like one (an HTTP header such as `Private-Token`).
//!
//! Git's configuration (`~/.gitconfig`, `~/.config/git/config`, the files they include)
//! has its own rule too: a section whose header carries a credential (`[url
//! "https://user:TOKEN@github.com/"]`) goes whole, so that its keys never fall to the
//! section before it, and a key line goes when it would go elsewhere or names a URL with
//! a password or a token for a user name; URLs are otherwise kept as written
//! (`ssh://git@host/` needs its user).
//!
//! [`filter_file`] picks the rule from the file's name.

use std::path::Path;

use crate::model::policy::FilterRule;
use crate::rules::secrets::looks_like_credential;

/// How a file marks a comment, for the line that replaces a dropped one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentStyle {
    /// `#` (shell start-up files, TOML, pip.conf, .pypirc).
    Hash,
    /// `;` (npm's `.npmrc`, which reads `#` too, but `;` is its documented form).
    Semicolon,
    /// Shell scripts (start-up files and what they source): the dropped line becomes
    /// `true # ...`, a command in sh, bash, zsh and fish alike, so that an `if` or a
    /// function whose only line was dropped still parses.
    Shell,
}

/// How many lines the filter replaced in `filtered`, the filtered copy of `original`
/// (its markers that the original did not already hold).
pub fn dropped_lines(original: &[u8], filtered: &[u8]) -> usize {
    let marks = |text: &[u8]| {
        text.windows(MARK.len())
            .filter(|w| *w == MARK.as_bytes())
            .count()
    };
    marks(filtered).saturating_sub(marks(original))
}

/// What every line the filter replaces says.
const MARK: &str = "sandy: credential line removed";

/// The filtered copy of a view's file holding `text`: git's rule for a file git reads as
/// configuration, whatever it is called; otherwise the rule `name` (the name the tool
/// opens) picks ([`filter_file`]).
pub fn filter_view(rule: FilterRule, name: &Path, text: &[u8]) -> Vec<u8> {
    match rule {
        FilterRule::Git => filter_git_config(text),
        FilterRule::ByName => filter_file(name, text),
    }
}

/// The filtered copy of the host file `target` holding `text`, by the file's format:
/// XML for `*.xml`, git's configuration format ([`is_git_config_name`]), `;` comments for npm's and pnpm's configuration, `#` for the other
/// configuration formats (TOML, YAML, INI, properties: by extension or known name), and
/// shell otherwise (start-up files and the scripts they source).
pub fn filter_file(target: &Path, text: &[u8]) -> Vec<u8> {
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".xml") {
        return filter_xml(text);
    }
    if is_git_config_name(target) {
        return filter_git_config(text);
    }
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    let style = match name {
        ".npmrc" | "npmrc" => CommentStyle::Semicolon,
        "rc" if target.parent().is_some_and(|p| p.ends_with("pnpm")) => CommentStyle::Semicolon,
        ".pypirc" | ".yarnrc" | "config" | ".condarc" | "condarc" => CommentStyle::Hash,
        _ if matches!(
            ext,
            "toml" | "yml" | "yaml" | "conf" | "cfg" | "ini" | "properties" | "json"
        ) =>
        {
            CommentStyle::Hash
        }
        _ => CommentStyle::Shell,
    };
    filter_credentials(text, style)
}

/// The filtered copy of `text`. Never fails: bytes that are not UTF-8 are kept as they
/// are in lines whose name is not a credential.
pub fn filter_credentials(text: &[u8], style: CommentStyle) -> Vec<u8> {
    let marker: &[u8] = match style {
        CommentStyle::Hash => b"# sandy: credential line removed",
        CommentStyle::Semicolon => b"; sandy: credential line removed",
        CommentStyle::Shell => b"true # sandy: credential line removed",
    };
    let mut out = Vec::with_capacity(text.len());
    let mut lines = text.split(|&b| b == b'\n').peekable();
    // The rest of a dropped value that spans lines.
    let mut rest: Option<Continuation> = None;
    while let Some(line) = lines.next() {
        let continued = rest.take().and_then(|c| c.takes(line));
        if let Some(next) = continued {
            out.extend_from_slice(marker);
            rest = next;
        } else if drops_line(line) {
            out.extend_from_slice(marker);
            rest = Continuation::after(line, style);
        } else {
            out.extend_from_slice(&strip_url_userinfo(line));
        }
        if lines.peek().is_some() {
            out.push(b'\n');
        }
    }
    out
}

/// The lines after a dropped one that still belong to its value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Continuation {
    /// A TOML multi-line string (`token = """`), up to the line closing it.
    Delimiter(&'static [u8]),
    /// A YAML block scalar (`npmAuthToken: >-`): the lines indented deeper than its key,
    /// and blank ones.
    Indented(usize),
    /// A shell line ending in `\`, or a quote left open: up to the line that ends
    /// neither.
    Shell(Option<u8>),
    /// A here-document a dropped shell line opens (`read -r DB_PASSWORD <<EOF`): its body
    /// up to the line holding only its delimiter (after tabs, for `<<-`).
    Heredoc { delimiter: Vec<u8>, tabs: bool },
}

impl Continuation {
    /// What a dropped line leaves open: a multi-line string, a YAML block, or in a shell
    /// script a line continued or a quote left open.
    fn after(line: &[u8], style: CommentStyle) -> Option<Continuation> {
        let trimmed = line.trim_ascii();
        for delim in [&b"\"\"\""[..], b"'''"] {
            if count(line, delim) % 2 == 1 {
                return Some(Continuation::Delimiter(delim));
            }
        }
        if style == CommentStyle::Shell {
            if let Some((delimiter, tabs)) = heredoc(line) {
                return Some(Continuation::Heredoc { delimiter, tabs });
            }
            let open = open_quote(line);
            return (open.is_some() || trimmed.ends_with(b"\\"))
                .then_some(Continuation::Shell(open));
        }
        if let Some(colon) = trimmed.iter().rposition(|&b| b == b':') {
            let indicator = trimmed[colon + 1..].trim_ascii();
            let block = indicator.first().is_some_and(|&b| b == b'|' || b == b'>')
                && indicator[1..]
                    .iter()
                    .all(|&b| b == b'-' || b == b'+' || b.is_ascii_digit());
            if block {
                return Some(Continuation::Indented(indent(line)));
            }
        }
        None
    }

    /// Whether `line` belongs to the value, and what stays open after it.
    #[allow(clippy::option_option)]
    fn takes(self, line: &[u8]) -> Option<Option<Continuation>> {
        match self {
            Continuation::Heredoc {
                ref delimiter,
                tabs,
            } => {
                let body = if tabs {
                    let start = line.iter().take_while(|&&b| b == b'\t').count();
                    &line[start..]
                } else {
                    line
                };
                Some((body != delimiter.as_slice()).then_some(self))
            }
            Continuation::Delimiter(delim) => Some((!contains(line, delim)).then_some(self)),
            Continuation::Indented(key) => {
                (line.trim_ascii().is_empty() || indent(line) > key).then_some(Some(self))
            }
            Continuation::Shell(Some(quote)) => Some((!line.contains(&quote)).then_some(self)),
            Continuation::Shell(None) => {
                Some(line.trim_ascii_end().ends_with(b"\\").then_some(self))
            }
        }
    }
}

/// The delimiter of the first here-document a shell line opens (`<<EOF`, `<<-'EOF'`,
/// `<< "END"`; not a here-string `<<<`), and whether it is `<<-` (leading tabs of the
/// body and of the closing line are ignored).
fn heredoc(line: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut at = 0;
    while let Some(found) = find(&line[at..], b"<<") {
        let start = at + found + 2;
        at = start;
        if line.get(start) == Some(&b'<') || (start >= 3 && line[start - 3] == b'<') {
            at = start + 1;
            continue;
        }
        let mut rest = &line[start..];
        let tabs = rest.first() == Some(&b'-');
        if tabs {
            rest = &rest[1..];
        }
        let rest = rest.trim_ascii_start();
        let word: Vec<u8> = rest
            .iter()
            .copied()
            .take_while(|&b| {
                !b.is_ascii_whitespace() && !matches!(b, b';' | b'&' | b'|' | b')' | b'<' | b'>')
            })
            .filter(|&b| b != b'\'' && b != b'"' && b != b'\\')
            .collect();
        if !word.is_empty() {
            return Some((word, tabs));
        }
    }
    None
}

fn indent(line: &[u8]) -> usize {
    line.iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count()
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while let Some(at) = find(&haystack[i..], needle) {
        n += 1;
        i += at + needle.len();
    }
    n
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// The quote a shell line leaves open at its end, if any.
fn open_quote(line: &[u8]) -> Option<u8> {
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        match quote {
            None if b == b'#' && (i == 0 || line[i - 1].is_ascii_whitespace()) => break,
            None if b == b'\\' => i += 1,
            None if b == b'"' || b == b'\'' => quote = Some(b),
            Some(b'"') if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            _ => {}
        }
        i += 1;
    }
    quote
}

/// Whether a line goes: it carries a well-known token or a credential in a URL or DSN
/// (comments included), or it is not a comment and assigns a name that looks like a
/// credential anywhere in it (every command of a shell line, every word of `export`,
/// `declare`, ..., an alias's or a function's body, a fish `set` with any flags, a key in
/// an inline table), or sends an `Authorization` header.
fn drops_line(line: &[u8]) -> bool {
    if carries_a_value(line) {
        return true;
    }
    let trimmed = line.trim_ascii_start();
    if let Some(comment) = trimmed
        .strip_prefix(b"#")
        .or_else(|| trimmed.strip_prefix(b";"))
    {
        // A commented-out assignment is still the secret (`# export DB_PASSWORD=...`).
        let comment = comment.trim_ascii_start();
        let comment = comment.strip_prefix(b"#").unwrap_or(comment);
        return !comment.is_empty() && !comment.starts_with(b"#") && assigns(comment);
    }
    assigns(line)
}

/// Whether the line carries a credential by its value, whatever names it: a well-known
/// token (gitleaks' formats, [`crate::rules::secrets::find`], and the prefixes here), a password
/// in a URL or DSN, a webhook's URL, or base64 that decodes to any of these or to an
/// assignment of one (`eval "$(echo ZXhwb3J0IC4uLg== | base64 -d)"`).
fn carries_a_value(line: &[u8]) -> bool {
    if has_known_token(line) || has_credential_userinfo(line) {
        return true;
    }
    let lower = line.to_ascii_lowercase();
    if SECRET_URLS.iter().any(|u| contains(&lower, u.as_bytes())) {
        return true;
    }
    if crate::rules::secrets::find(&String::from_utf8_lossy(line)).is_some() {
        return true;
    }
    base64_runs(line).iter().any(|decoded| {
        decoded
            .split(|&b| b == b'\n')
            .any(|l| has_known_token(l) || has_credential_userinfo(l) || assigns(l))
    })
}

/// Whether the line assigns or sends a credential by a name: `NAME=value` anywhere,
/// `export`, fish `set`, `read`/`printf -v` into such a name, a key of an inline table, a
/// header (`Authorization:`, `X-Api-Key:`), or a command's option (`--password=...`,
/// `--token VALUE`, `mysql -pPASS`, `sshpass -p PASS`).
fn assigns(line: &[u8]) -> bool {
    assigns_credential(line)
        || has_credential_key(line)
        || has_credential_assignment(line)
        || sets_credential(line)
        || reads_into_credential(line)
        || has_auth_header(line)
        || passes_credential_option(line)
}

/// The shortest base64 run worth decoding.
const MIN_BASE64: usize = 16;

/// What every run of base64 in the line (at least [`MIN_BASE64`] characters, standard or
/// URL alphabet, padded or not) decodes to, when that is text.
fn base64_runs(line: &[u8]) -> Vec<Vec<u8>> {
    let b64 = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=');
    line.split(|&b| !b64(b))
        .filter(|run| run.len() >= MIN_BASE64)
        .filter_map(|run| decode_base64(run.trim_ascii_end()))
        .filter(|decoded| {
            decoded
                .iter()
                .all(|&b| b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b))
        })
        .collect()
}

/// Standard or URL-safe base64, with or without padding; `None` for anything else.
pub(crate) fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    let value = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => u32::from(b - b'A'),
            b'a'..=b'z' => u32::from(b - b'a') + 26,
            b'0'..=b'9' => u32::from(b - b'0') + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        })
    };
    let body: Vec<u8> = text.iter().copied().filter(|&b| b != b'=').collect();
    if body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut acc = 0u32;
        for (i, &b) in chunk.iter().enumerate() {
            acc |= value(b)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

/// Whether a command of the line passes a credential as an option: `--NAME=VALUE` or
/// `--NAME VALUE` with a name that looks like a credential (`--password`, `--api-key`,
/// `--token`), MySQL's `-pPASSWORD` (mysql, mysqldump, mysqladmin, mariadb and the
/// like), or `sshpass -p PASSWORD`.
fn passes_credential_option(line: &[u8]) -> bool {
    commands(line).iter().any(|words| {
        // An alias's (or an assignment's) quoted body is a command line of its own.
        let nested = words.iter().any(|w| {
            w.iter().position(|&b| b == b'=').is_some_and(|eq| {
                let body = &w[eq + 1..];
                body.iter().any(u8::is_ascii_whitespace) && passes_credential_option(body)
            })
        });
        if nested {
            return true;
        }
        let program = words
            .iter()
            .find(|w| !w.contains(&b'='))
            .map(|w| w.rsplit(|&b| b == b'/').next().unwrap_or(w).to_vec())
            .unwrap_or_default();
        let mysql = program.starts_with(b"mysql") || program.starts_with(b"mariadb");
        words.iter().enumerate().any(|(i, word)| {
            if let Some(option) = word.strip_prefix(b"--") {
                let (name, value) = match option.iter().position(|&b| b == b'=') {
                    Some(eq) => (&option[..eq], Some(&option[eq + 1..])),
                    None => (option, words.get(i + 1).map(Vec::as_slice)),
                };
                // `--password-file PATH`, `--token-command CMD`: where the secret is, not it.
                let elsewhere = [
                    &b"-file"[..],
                    b"-path",
                    b"-dir",
                    b"-cmd",
                    b"-command",
                    b"-env",
                    b"-stdin",
                ]
                .iter()
                .any(|end| name.ends_with(end));
                return !elsewhere
                    && looks_like_credential(name)
                    && value.is_some_and(|v| !v.is_empty() && !v.starts_with(b"-"));
            }
            if mysql && word.len() > 2 && word.starts_with(b"-p") {
                return true;
            }
            program == b"sshpass" && word == b"-p" && words.get(i + 1).is_some()
        })
    })
}

/// Whether a command of the line stores a value into a name that looks like a
/// credential without `NAME=`: bash's `printf -v NAME ...` and `read [-opts] NAME ...`
/// (the value comes from a here-string or a file on the same line).
fn reads_into_credential(line: &[u8]) -> bool {
    commands(line).iter().any(|words| {
        let mut words = words.iter();
        match words.next().map(Vec::as_slice) {
            Some(b"printf") => {
                let mut rest = words.skip_while(|w| w.as_slice() != b"-v");
                rest.next().is_some() && rest.next().is_some_and(|n| looks_like_credential(n))
            }
            Some(b"read") => words
                .filter(|w| !w.starts_with(b"-") && !w.starts_with(b"<"))
                .any(|n| looks_like_credential(n)),
            _ => false,
        }
    })
}

/// `Authorization:` or `Bearer TOKEN` anywhere in the line (an alias's `curl -H`, git's
/// `http.extraHeader`).
fn has_auth_header(line: &[u8]) -> bool {
    let lower = line.to_ascii_lowercase();
    // A header named like a credential (`X-Api-Key:`, `Private-Token:`, `X-Auth-Token:`).
    let header_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'-';
    let named = lower.windows(2).enumerate().any(|(at, w)| {
        if w != b": " {
            return false;
        }
        let start = lower[..at]
            .iter()
            .rposition(|&b| !header_byte(b))
            .map_or(0, |p| p + 1);
        let name = &lower[start..at];
        name.contains(&b'-') && looks_like_credential(name)
    });
    named
        || contains(&lower, b"authorization:")
        || find(&lower, b"bearer ").is_some_and(|at| {
            lower[at + 7..]
                .first()
                .is_some_and(|b| !b.is_ascii_whitespace() && *b != b'"' && *b != b'\'')
        })
}

/// Token prefixes of well-known services, with the shortest run of token characters
/// that must follow and whether `_` and `-` are token characters there.
const TOKEN_PREFIXES: &[(&str, usize, bool)] = &[
    ("github_pat_", 20, true),
    ("ghp_", 20, false),
    ("gho_", 20, false),
    ("ghu_", 20, false),
    ("ghs_", 20, false),
    ("ghr_", 20, false),
    ("glpat-", 20, true),
    ("xoxa-", 10, true),
    ("xoxb-", 10, true),
    ("xoxp-", 10, true),
    ("xoxr-", 10, true),
    ("xoxs-", 10, true),
    ("sk-", 16, true),
    ("AKIA", 16, false),
    ("ASIA", 16, false),
    ("hf_", 20, false),
    ("npm_", 20, false),
    ("pypi-", 20, true),
    ("sk_live_", 10, false),
    ("sk_test_", 10, false),
    ("rk_live_", 10, false),
    ("whsec_", 10, false),
];

/// URLs that are a credential whole (a webhook's address is its secret).
const SECRET_URLS: &[&str] = &[
    "hooks.slack.com/services/",
    "discord.com/api/webhooks/",
    "discordapp.com/api/webhooks/",
    "outlook.office.com/webhook/",
    "webhook.office.com/",
];

/// Whether a word of the line starts with a well-known token prefix followed by enough
/// token characters (`ghp_...`, `sk-ant-...`, `AKIA...`): a token whatever the name it is
/// assigned to, or none.
fn has_known_token(line: &[u8]) -> bool {
    let token_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    (0..line.len()).any(|at| {
        if at > 0 && token_byte(line[at - 1]) {
            return false;
        }
        TOKEN_PREFIXES.iter().any(|(prefix, min, dashes)| {
            let Some(after) = line[at..].strip_prefix(prefix.as_bytes()) else {
                return false;
            };
            let run = after
                .iter()
                .take_while(|&&b| {
                    b.is_ascii_alphanumeric() || (*dashes && (b == b'_' || b == b'-'))
                })
                .count();
            run >= *min
        })
    })
}

/// A password in a URL or DSN that removing `user:password@` from the URL's authority
/// would not remove: a DSN without a scheme (`user:pw@tcp(host)/db`,
/// `x-access-token:T@github.com`), or a URL whose password holds a `/`.
fn has_credential_userinfo(line: &[u8]) -> bool {
    if contains(&line.to_ascii_lowercase(), b"x-access-token:") {
        return true;
    }
    let separator = |b: u8| {
        b.is_ascii_whitespace()
            || matches!(b, b'"' | b'\'' | b'=' | b'(' | b',' | b';' | b'<' | b'>')
    };
    line.iter().enumerate().any(|(at, &b)| {
        if b != b'@' || at + 1 >= line.len() || separator(line[at + 1]) {
            return false;
        }
        let start = line[..at]
            .iter()
            .rposition(|&c| separator(c))
            .map_or(0, |p| p + 1);
        let word = &line[start..at];
        match find(word, b"://") {
            Some(scheme) => {
                let info = &word[scheme + 3..];
                info.contains(&b':') && info.contains(&b'/')
            }
            None => word.iter().position(|&c| c == b':').is_some_and(|colon| {
                colon > 0
                    && colon + 1 < word.len()
                    && !word[..colon].eq_ignore_ascii_case(b"mailto")
                    && !word.starts_with(b"@")
            }),
        }
    })
}

/// Whether any `NAME=value` in the line, wherever it stands (each command of a shell
/// line, each word of `export`/`declare`/`typeset`/`readonly`/`local`, an alias's or a
/// function's body, `--token=...`, a URL's query), assigns a non-empty value to a name
/// that looks like a credential.
fn has_credential_assignment(line: &[u8]) -> bool {
    let name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    line.iter().enumerate().any(|(eq, &b)| {
        if b != b'=' || line.get(eq + 1) == Some(&b'=') || (eq > 0 && line[eq - 1] == b'=') {
            return false;
        }
        // `NAME+=value` too.
        let end = if eq > 0 && line[eq - 1] == b'+' {
            eq - 1
        } else {
            eq
        };
        let start = line[..end]
            .iter()
            .rposition(|&c| !name_byte(c))
            .map_or(0, |p| p + 1);
        let name = line[start..end].trim_ascii_start();
        let name = name.strip_prefix(b"--").unwrap_or(name);
        let value = &line[eq + 1..];
        let empty = match value.first() {
            None => true,
            Some(&q @ (b'"' | b'\'')) => value.get(1) == Some(&q),
            Some(&c) => c.is_ascii_whitespace() || matches!(c, b';' | b'&' | b'|' | b')'),
        };
        !name.is_empty() && !empty && looks_like_credential(name)
    })
}

/// Whether a command of the line is a fish `set` (with any flags: `-xg`, `-x -g`,
/// `--global --export`, `-Ux`) or a csh `setenv` of a name that looks like a credential,
/// with a value.
fn sets_credential(line: &[u8]) -> bool {
    commands(line).iter().any(|words| {
        let mut words = words
            .iter()
            .skip_while(|w| {
                matches!(
                    w.as_slice(),
                    b"then"
                        | b"do"
                        | b"else"
                        | b"{"
                        | b"("
                        | b"begin"
                        | b"and"
                        | b"or"
                        | b"not"
                        | b"if"
                        | b"command"
                        | b"builtin"
                )
            })
            .peekable();
        if !matches!(words.next().map(Vec::as_slice), Some(b"set" | b"setenv")) {
            return false;
        }
        let mut rest = words.skip_while(|w| w.starts_with(b"-"));
        match (rest.next(), rest.next()) {
            (Some(name), Some(_)) => looks_like_credential(name),
            _ => false,
        }
    })
}

/// The commands of a shell line (split at `;`, `&&`, `||`, `|` and `&` outside quotes;
/// a `#` after a blank ends the line), each as its words with quotes removed.
fn commands(line: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
    let mut word: Option<Vec<u8>> = None;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    let finish = |word: &mut Option<Vec<u8>>, out: &mut Vec<Vec<Vec<u8>>>| {
        if let (Some(w), Some(cmd)) = (word.take(), out.last_mut()) {
            cmd.push(w);
        }
    };
    while i < line.len() {
        let b = line[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => word.get_or_insert_with(Vec::new).push(b),
            None => match b {
                b'"' | b'\'' => {
                    quote = Some(b);
                    word.get_or_insert_with(Vec::new);
                }
                b'#' if word.is_none() => break,
                b';' | b'&' | b'|' => {
                    finish(&mut word, &mut out);
                    out.push(Vec::new());
                }
                _ if b.is_ascii_whitespace() => finish(&mut word, &mut out),
                _ => word.get_or_insert_with(Vec::new).push(b),
            },
        }
        i += 1;
    }
    finish(&mut word, &mut out);
    out
}

/// Whether `line` assigns a value to a name that looks like a credential: `NAME=...`,
/// `export NAME=...`, `set -gx NAME ...` (fish), `name = ...`, `//host/:_authToken=...`.
fn assigns_credential(line: &[u8]) -> bool {
    let trimmed = line.trim_ascii_start();
    if trimmed.starts_with(b"#") || trimmed.starts_with(b";") {
        return false;
    }
    let mut rest = trimmed;
    for prefix in [
        &b"export "[..],
        b"declare -x ",
        b"typeset -x ",
        b"setenv ",
        b"set -gx ",
        b"set -x ",
        b"set -Ux ",
        b"set -U ",
        b"set ",
    ] {
        if let Some(r) = rest.strip_prefix(prefix) {
            rest = r.trim_ascii_start();
            break;
        }
    }
    // A quoted TOML key, dotted (`"registries".x.token = ...`): the name is its last part.
    if rest.starts_with(b"\"") {
        if let Some(eq) = rest.iter().position(|&b| b == b'=') {
            let key: Vec<u8> = rest[..eq]
                .iter()
                .copied()
                .filter(|&b| b != b'"' && b != b'\'')
                .collect();
            let last = key
                .rsplit(|&b| b == b'.' || b == b':' || b == b'/')
                .next()
                .unwrap_or(&key);
            if !rest[eq + 1..].trim_ascii().is_empty() && looks_like_credential(last.trim_ascii()) {
                return true;
            }
        }
    }
    // A quoted key (`.yarnrc`: `"//registry/:_authToken" value`): the name is inside.
    if let Some(quoted) = rest.strip_prefix(b"\"") {
        if let Some(close) = quoted.iter().position(|&b| b == b'"') {
            let key = &quoted[..close];
            let name = key
                .rsplit(|&b| b == b':' || b == b'/')
                .next()
                .unwrap_or(key);
            let value = quoted[close + 1..].trim_ascii();
            return !value.is_empty() && looks_like_credential(name.trim_ascii());
        }
    }
    let end = rest
        .iter()
        .position(|&b| b == b'=' || b == b' ' || b == b'\t' || b == b':')
        .unwrap_or(rest.len());
    // `//registry/:_authToken=...`: the name is the part after the last ':' before '='.
    let name_region = match rest.iter().position(|&b| b == b'=') {
        Some(eq) => &rest[..eq],
        None => &rest[..end],
    };
    let name = name_region
        .rsplit(|&b| b == b':' || b == b'/')
        .next()
        .unwrap_or(name_region)
        .trim_ascii();
    if name.is_empty() {
        return false;
    }
    let has_value = rest.contains(&b'=') || end < rest.len();
    has_value && looks_like_credential(name)
}

/// Whether any key inside the line (after `{`, `,`, or at its start) that is followed by
/// `=` or `:` looks like a credential: inline tables and flow maps carry several.
fn has_credential_key(line: &[u8]) -> bool {
    let trimmed = line.trim_ascii_start();
    if trimmed.starts_with(b"#") || trimmed.starts_with(b";") {
        return false;
    }
    let mut i = 0;
    while i < line.len() {
        let is_key_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if !is_key_byte(line[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && is_key_byte(line[i]) {
            i += 1;
        }
        let key = &line[start..i];
        // The key may be quoted (JSON, YAML, TOML).
        let mut j = i;
        if j < line.len() && (line[j] == b'"' || line[j] == b'\'') {
            j += 1;
        }
        while j < line.len() && (line[j] == b' ' || line[j] == b'\t') {
            j += 1;
        }
        let before = line[..start]
            .iter()
            .rev()
            .find(|b| !matches!(b, b' ' | b'\t' | b'"' | b'\''));
        let opens = matches!(before, None | Some(b'{' | b',' | b'['));
        let assigned = j < line.len()
            && (line[j] == b'=' || (line[j] == b':' && !line[j + 1..].starts_with(b"//")));
        if opens && assigned && looks_like_credential(key) {
            return true;
        }
    }
    false
}

/// Removes `user:password@` from every `scheme://user:password@host` in a line.
fn strip_url_userinfo(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i..].starts_with(b"://") {
            out.extend_from_slice(b"://");
            i += 3;
            let host_end = line[i..]
                .iter()
                .position(|&b| b == b'/' || b.is_ascii_whitespace() || b == b'"' || b == b'\'')
                .map_or(line.len(), |p| i + p);
            if let Some(at) = line[i..host_end].iter().rposition(|&b| b == b'@') {
                i += at + 1;
            }
            continue;
        }
        out.push(line[i]);
        i += 1;
    }
    out
}

/// Whether a file's name says it is git configuration, which [`filter_file`] filters
/// by git's own rule: `.gitconfig` and names that start so (`.gitconfig.local`,
/// `.gitconfig-work`), any file in a directory named `git` (`~/.config/git/config` and
/// files kept beside it), and a repository's own `config` or `config.worktree` below a
/// directory named `.git` or `NAME.git` (`.git/config`, `.git/modules/lib/config`,
/// `.git/worktrees/w/config.worktree`, a bare `lib.git/config`).
pub fn is_git_config_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let in_git_dir = || {
        path.ancestors().skip(1).any(|a| {
            a.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".git"))
        })
    };
    name.starts_with(".gitconfig")
        || path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|dir| dir == "git")
        || (matches!(name, "config" | "config.worktree") && in_git_dir())
}

/// Git configuration without its credentials (see the module documentation). A value
/// continued over lines (a trailing `\`) is judged whole and goes whole. Every dropped
/// line becomes a `#` comment, so line numbers stay the same.
pub fn filter_git_config(text: &[u8]) -> Vec<u8> {
    const REMOVED: &[u8] = b"# sandy: credential line removed";
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let comment = |line: &[u8]| {
        let t = line.trim_ascii_start();
        t.starts_with(b"#") || t.starts_with(b";")
    };
    let mut out = Vec::with_capacity(text.len());
    let mut dropping_section = false;
    let mut i = 0;
    while i < lines.len() {
        // The logical line: this one and those its trailing `\` continue into.
        let mut j = i;
        while j + 1 < lines.len() && !comment(lines[j]) && ends_continued(lines[j]) {
            j += 1;
        }
        let group = &lines[i..=j];
        let whole = group.join(&b' ');
        let drop = if group[0].trim_ascii_start().starts_with(b"[") {
            dropping_section = git_line_has_credential(&whole);
            dropping_section
        } else {
            dropping_section || git_line_has_credential(&whole)
        };
        for (k, line) in group.iter().enumerate() {
            out.extend_from_slice(if drop { REMOVED } else { line });
            if i + k + 1 < lines.len() {
                out.push(b'\n');
            }
        }
        i = j + 1;
    }
    out
}

/// Whether a git configuration line ends with a `\` that continues its value (an odd
/// number of them, before a comment would start).
fn ends_continued(line: &[u8]) -> bool {
    let end = line.trim_ascii_end();
    end.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// Whether a git configuration line (a section header or a `key = value`) carries a
/// credential: the rules of every other format ([`drops_line`]), and a URL whose user
/// information has a password (`https://user:pw@host`) or is itself a token (`https://
/// TOKEN@host`: 20 or more token characters).
fn git_line_has_credential(line: &[u8]) -> bool {
    let trimmed = line.trim_ascii_start();
    if trimmed.starts_with(b"#") || trimmed.starts_with(b";") {
        // A comment: only what would be a credential anywhere.
        return drops_line(line);
    }
    drops_line(line) || url_userinfo_is_secret(line)
}

/// Whether a URL in the line carries a password, or a token as its user name.
fn url_userinfo_is_secret(line: &[u8]) -> bool {
    let mut i = 0;
    while let Some(at) = find(&line[i..], b"://") {
        let start = i + at + 3;
        let end = line[start..]
            .iter()
            .position(|&b| {
                matches!(b, b'/' | b'"' | b'\'' | b']' | b'?' | b'#') || b.is_ascii_whitespace()
            })
            .map_or(line.len(), |p| start + p);
        let authority = &line[start..end];
        if let Some(at) = authority.iter().rposition(|&b| b == b'@') {
            let info = &authority[..at];
            let secret = match info.iter().position(|&b| b == b':') {
                Some(colon) => colon + 1 < info.len(),
                None => {
                    info.len() >= 20
                        && info
                            .iter()
                            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                }
            };
            if secret {
                return true;
            }
        }
        i = end.max(start);
    }
    false
}

/// XML: the content of credential elements removed (see the module documentation).
pub fn filter_xml(text: &[u8]) -> Vec<u8> {
    const REMOVED: &[u8] = b"<!-- sandy: credential removed -->";
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    // Set after a `<name>` element whose text looks like a credential name.
    let mut secret_value_next = false;
    while i < text.len() {
        if text[i] != b'<' || text[i..].starts_with(b"</") || text[i..].starts_with(b"<!") {
            out.push(text[i]);
            i += 1;
            continue;
        }
        let Some(gt) = text[i..].iter().position(|&b| b == b'>').map(|p| i + p) else {
            out.extend_from_slice(&text[i..]);
            break;
        };
        let tag = &text[i + 1..gt];
        let name_len = tag
            .iter()
            .position(|b| b.is_ascii_whitespace() || *b == b'/')
            .unwrap_or(tag.len());
        let name = &tag[..name_len];
        out.extend_from_slice(&text[i..=gt]);
        i = gt + 1;
        if tag.ends_with(b"/") {
            continue;
        }
        let Some((end, close)) = find_close(&text[i..], name).map(|(p, l)| (i + p, l)) else {
            continue;
        };
        let close = text[end..end + close].to_vec();
        let content = &text[i..end];
        let cdata = content.trim_ascii().starts_with(b"<![CDATA[");
        if content.contains(&b'<') && !cdata {
            // A container: its children are judged one by one.
            continue;
        }
        let secret = looks_like_credential(name)
            || (secret_value_next && name.eq_ignore_ascii_case(b"value"));
        secret_value_next =
            name.eq_ignore_ascii_case(b"name") && looks_like_credential(content.trim_ascii());
        if secret {
            out.extend_from_slice(REMOVED);
            // Keep the line count.
            out.extend(content.iter().filter(|&&b| b == b'\n'));
        } else {
            out.extend_from_slice(&strip_url_userinfo(content));
        }
        out.extend_from_slice(&close);
        i = end + close.len();
    }
    out
}

/// The first closing tag of `name` in `text` (`</name>`, blanks allowed before the `>`):
/// its offset and length.
fn find_close(text: &[u8], name: &[u8]) -> Option<(usize, usize)> {
    let mut open = b"</".to_vec();
    open.extend_from_slice(name);
    let mut from = 0;
    while let Some(at) = find(&text[from..], &open).map(|p| from + p) {
        let after = at + open.len();
        let blanks = text[after..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        if text.get(after + blanks) == Some(&b'>') {
            return Some((at, open.len() + blanks + 1));
        }
        from = after;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::secrets::{has_credential_word, CREDENTIAL_WORDS};

    #[test]
    fn git_configuration_loses_its_credentials_and_keeps_every_other_setting() {
        let text = "\
[user]
\tname = A User
\temail = a@example.com
\tsigningkey = 0123ABCD
[core]
\thooksPath = ~/hooks
\tsshCommand = ssh -i ~/.ssh/id_work
[url \"https://x-user:s3cr3tpass@github.com/\"]
\tinsteadOf = https://github.com/
\tpushInsteadOf = git@github.com:
[url \"https://0123456789abcdef0123456789abcdef01234567@gitlab.example.com/\"]
\tinsteadOf = https://gitlab.example.com/
[url \"ssh://git@github.com/\"]
\tinsteadOf = gh:
[http \"https://github.com/\"]
\textraHeader = AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hwX3h4eA==
\tsslVerify = true
[github]
\tuser = auser
\ttoken = ghp_abcdefghijklmnopqrstuvwxyz0123456789
[sendemail]
\tsmtpServer = smtp.example.com
\tsmtpPass = hunter2hunter2
[credential]
\thelper = \"!f() { echo username=me; \\
\t  echo password=hunter2; }; f\"
\tuseHttpPath = true
[remote \"origin\"]
\turl = https://me:pw@example.com/repo.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[include]
\tpath = ~/.gitconfig.local
";
        let out = String::from_utf8(filter_git_config(text.as_bytes())).unwrap();
        // Line numbers stay the same.
        assert_eq!(out.lines().count(), text.lines().count(), "{out}");
        for kept in [
            "\tname = A User",
            "\temail = a@example.com",
            "\tsigningkey = 0123ABCD",
            "\thooksPath = ~/hooks",
            "\tsshCommand = ssh -i ~/.ssh/id_work",
            "[url \"ssh://git@github.com/\"]",
            "\tinsteadOf = gh:",
            "[http \"https://github.com/\"]",
            "\tsslVerify = true",
            "\tuser = auser",
            "\tsmtpServer = smtp.example.com",
            "\tuseHttpPath = true",
            "\tfetch = +refs/heads/*:refs/remotes/origin/*",
            "\tpath = ~/.gitconfig.local",
        ] {
            assert!(out.lines().any(|l| l == kept), "{kept:?} lost:\n{out}");
        }
        for gone in [
            "s3cr3tpass",
            "0123456789abcdef0123456789abcdef01234567",
            "eC1hY2Nlc3M",
            "ghp_",
            "hunter2",
            "me:pw",
            // The whole continued value, its first line too.
            "username=me",
            // The keys of a dropped section go with it: none falls to the section
            // before it.
            "pushInsteadOf",
            "insteadOf = https://github.com/",
            "insteadOf = https://gitlab.example.com/",
        ] {
            assert!(!out.contains(gone), "{gone:?} kept:\n{out}");
        }
        // That git still reads the result is the end-to-end tests' to show.
    }

    #[test]
    fn git_configuration_files_are_known_by_name() {
        for git in [
            "/h/.gitconfig",
            "/h/.gitconfig.local",
            "/h/.gitconfig-work",
            "/h/.config/git/config",
            "/h/.config/git/work.inc",
            "/p/.git/config",
            "/p/.git/modules/lib/config",
            "/p/.git/worktrees/w/config.worktree",
            "/p/lib.git/config",
        ] {
            assert!(is_git_config_name(Path::new(git)), "{git}");
        }
        for other in [
            "/h/.npmrc",
            "/h/.config/pip/pip.conf",
            "/h/.bashrc",
            "/h/gitconfig",
        ] {
            assert!(!is_git_config_name(Path::new(other)), "{other}");
        }
        // A shell-style marker would break git: the name picks the git rule.
        let out = filter_file(Path::new("/h/.gitconfig"), b"[github]\n\ttoken = abc123\n");
        assert_eq!(out, b"[github]\n# sandy: credential line removed\n");
    }

    /// The first implementation, kept to check the allocation-free one against.
    fn looks_like_credential_reference(name: &[u8]) -> bool {
        let mut normalized = String::with_capacity(name.len() + 4);
        for (i, &b) in name.iter().enumerate() {
            match b {
                b'-' | b'.' => normalized.push('_'),
                b'A'..=b'Z' => {
                    if i > 0 && name[i - 1].is_ascii_lowercase() {
                        normalized.push('_');
                    }
                    normalized.push(char::from(b.to_ascii_lowercase()));
                }
                other => normalized.push(char::from(other)),
            }
        }
        let padded = format!("_{normalized}_");
        CREDENTIAL_WORDS.iter().any(|word| {
            let word = word.trim_start_matches('_');
            padded.contains(&format!("_{word}_"))
                || normalized.ends_with(word)
                || normalized.starts_with(&format!("{word}_"))
        })
    }

    #[test]
    fn credential_names_are_recognised_as_before() {
        let mut names: Vec<Vec<u8>> = [
            "TOKEN",
            "GITHUB_TOKEN",
            "npmAuthToken",
            "_authToken",
            "tokenizer",
            "MY_TOKENS",
            "token_file",
            "pass",
            "PASSWORD",
            "passenger",
            "bypass",
            "by_pass_x",
            "api-key",
            "apiKey",
            "x.api.key",
            "aws_access_key_id",
            "AUTH",
            "author",
            "OAUTH",
            "o_auth_x",
            "cookie_jar",
            "CookieJar",
            "EDITOR",
            "PATH",
            "",
            "_",
            "__",
            "pwd",
            "PWD_DIR",
            "credentials.toml",
            "sessionKey",
            "privateKey",
            "bearer",
            "Bearer-Token",
            "secrets",
            "x",
            "pAsS",
            "ÄPI_KEY",
            "api_keyÄ",
            "tok\u{e9}n",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        // Every word of the list, alone and joined to others in every way.
        for w in CREDENTIAL_WORDS {
            for shape in ["{}", "x_{}", "{}_x", "x{}", "{}x", "X-{}-Y", "a.{}.b"] {
                names.push(shape.replace("{}", w).into_bytes());
                names.push(shape.replace("{}", &w.to_uppercase()).into_bytes());
            }
        }
        names.push(vec![0xff, b'_', b't', b'o', b'k', b'e', b'n']);
        for name in &names {
            assert_eq!(
                has_credential_word(name),
                looks_like_credential_reference(name),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }

    fn f(text: &str) -> String {
        String::from_utf8(filter_credentials(text.as_bytes(), CommentStyle::Hash)).unwrap()
    }

    #[test]
    /// A commented-out assignment goes too: the secret is in the file all the same.
    fn drops_credential_assignments_and_keeps_the_rest() {
        let rc = "alias ll='ls -l'\nexport OPENAI_API_KEY=sk-123\nexport PATH=$HOME/bin:$PATH\n\
                  GITHUB_TOKEN=ghp_x\nexport AWS_SECRET_ACCESS_KEY=abc\nset -gx ANTHROPIC_API_KEY k\n\
                  export DB_PASSWORD='p'\n# export MY_TOKEN=commented\nexport EDITOR=vim\n";
        assert_eq!(
            f(rc),
            "alias ll='ls -l'\n# sandy: credential line removed\nexport PATH=$HOME/bin:$PATH\n\
             # sandy: credential line removed\n# sandy: credential line removed\n\
             # sandy: credential line removed\n# sandy: credential line removed\n\
             # sandy: credential line removed\nexport EDITOR=vim\n"
        );
    }

    #[test]
    fn npmrc_and_ini_secrets_go_but_settings_stay() {
        let npmrc = "registry=https://registry.example/\n//registry.example/:_authToken=abc\n\
                     _auth=dXNlcjpwYXNz\nupdate-notifier=false\nemail=u@example.com\n";
        assert_eq!(
            String::from_utf8(filter_credentials(
                npmrc.as_bytes(),
                CommentStyle::Semicolon
            ))
            .unwrap(),
            "registry=https://registry.example/\n; sandy: credential line removed\n\
             ; sandy: credential line removed\nupdate-notifier=false\nemail=u@example.com\n"
        );
        let pip = "[global]\nindex-url = https://user:s3cret@pypi.example/simple\ntimeout = 60\n\
                   [pypi]\nusername = __token__\npassword = pypi-AgEI\n";
        assert_eq!(
            f(pip),
            "[global]\nindex-url = https://pypi.example/simple\ntimeout = 60\n[pypi]\n\
             username = __token__\n# sandy: credential line removed\n"
        );
    }

    #[test]
    fn names_that_merely_contain_a_word_are_kept() {
        assert_eq!(f("export COMPASS_HOME=/x\n"), "export COMPASS_HOME=/x\n");
        assert_eq!(f("export AUTHOR=me\n"), "export AUTHOR=me\n");
        assert_eq!(f("tokenizer_threads = 4\n"), "tokenizer_threads = 4\n");
    }

    #[test]
    fn toml_tables_inline_tables_and_yaml_keys() {
        let cargo = "[registry]\ndefault = \"mine\"\ntoken = \"cio-secret\"\n\
                     [registries.mine]\nindex = \"sparse+https://r.example/\"\n\
                     [registries]\nother = { index = \"https://o.example/\", token = \"o-secret\" }\n\
                     [net]\ngit-fetch-with-cli = true\n";
        let out = f(cargo);
        assert!(!out.contains("secret"), "{out}");
        assert!(out.contains("default = \"mine\""), "{out}");
        assert!(
            out.contains("index = \"sparse+https://r.example/\""),
            "{out}"
        );
        assert!(out.contains("git-fetch-with-cli = true"), "{out}");
        let yarn = "npmRegistryServer: \"https://r.example\"\nnpmAuthToken: y-secret\n\
                    npmAuthIdent: \"u:p-secret\"\nnpmScopes:\n  co:\n    npmAuthToken: s-secret\n\
                    enableTelemetry: false\n";
        let out = f(yarn);
        assert!(!out.contains("secret"), "{out}");
        assert!(
            out.contains("npmRegistryServer: \"https://r.example\""),
            "{out}"
        );
        assert!(out.contains("enableTelemetry: false"), "{out}");
        let yarn1 = "registry \"https://r.example/\"\n\"//r.example/:_authToken\" v1-secret\n";
        let out = f(yarn1);
        assert!(!out.contains("secret"), "{out}");
        assert!(out.contains("registry \"https://r.example/\""), "{out}");
    }

    #[test]
    fn maven_settings_lose_passwords_but_keep_mirrors() {
        let xml = "<settings>\n  <mirrors><mirror><id>m</id><url>https://u:url-secret@m.example/</url>\
                   </mirror></mirrors>\n  <servers>\n    <server>\n      <id>s</id>\n\
                   <username>me</username>\n      <password>\n        pw-secret\n      </password>\n\
                   <privateKey>/k</privateKey><passphrase>pp-secret</passphrase>\n\
                   <configuration><httpHeaders><property><name>Private-Token</name>\
                   <value>hdr-secret</value></property></httpHeaders></configuration>\n\
                   </server>\n  </servers>\n</settings>\n";
        let out = String::from_utf8(filter_file(
            Path::new("/h/.m2/settings.xml"),
            xml.as_bytes(),
        ))
        .unwrap();
        assert!(!out.contains("secret"), "{out}");
        assert!(out.contains("<url>https://m.example/</url>"), "{out}");
        assert!(out.contains("<username>me</username>"), "{out}");
        assert_eq!(out.lines().count(), xml.lines().count(), "{out}");
        assert!(
            out.contains("<password><!-- sandy: credential removed -->"),
            "{out}"
        );
    }

    #[test]
    fn plain_settings_in_assignments_are_kept() {
        assert_eq!(
            f("export PATH=$HOME/bin:$PATH\n"),
            "export PATH=$HOME/bin:$PATH\n"
        );
        assert_eq!(f("alias gp='git push'\n"), "alias gp='git push'\n");
        assert_eq!(
            f("x = { version = \"1\", path = \"a\" }\n"),
            "x = { version = \"1\", path = \"a\" }\n"
        );
        assert_eq!(
            f("url: https://h.example/x\n"),
            "url: https://h.example/x\n"
        );
    }

    #[test]
    fn shell_files_keep_parsing_when_a_line_goes() {
        let rc = "if true; then\n  export GH_TOKEN=x\nfi\n";
        let out = String::from_utf8(filter_file(Path::new("/h/.bashrc"), rc.as_bytes())).unwrap();
        assert_eq!(
            out,
            "if true; then\ntrue # sandy: credential line removed\nfi\n"
        );
        let toml = String::from_utf8(filter_file(
            Path::new("/h/.cargo/config.toml"),
            b"token = 1\n",
        ))
        .unwrap();
        assert_eq!(toml, "# sandy: credential line removed\n");
    }

    fn shell(text: &str) -> String {
        String::from_utf8(filter_file(Path::new("/h/.bashrc"), text.as_bytes())).unwrap()
    }

    const GONE: &str = "true # sandy: credential line removed";

    /// The forms a review found the filter missing (issue 35), each with the lines that
    /// must stay beside it.
    #[test]
    fn heredocs_headers_options_base64_and_comments_lose_their_secrets() {
        // The body of a here-document read into a credential, up to its delimiter.
        let text = "read -r DB_PASSWORD <<EOF\nhunter2-secret\nEOF\nalias ll='ls -l'\n";
        assert_eq!(
            shell(text),
            format!("{GONE}\n{GONE}\n{GONE}\nalias ll='ls -l'\n")
        );
        let text = "cat <<-'END' > /dev/null\n\tplain\nEND\nread PW <<-\"END\"\n\tsecret\n\tEND\necho ok\n";
        assert_eq!(
            shell(text),
            format!("cat <<-'END' > /dev/null\n\tplain\nEND\n{GONE}\n{GONE}\n{GONE}\necho ok\n")
        );
        // A header named like a credential, in an alias.
        let text = "alias api='curl -H \"X-Api-Key: 0c1d2e3f4a5b\" https://api.example.com'\nalias gs='git status'\n";
        assert_eq!(shell(text), format!("{GONE}\nalias gs='git status'\n"));
        // A password passed as an option.
        for line in [
            "alias db='mysql -uroot -phunter2 app'",
            "mysqldump -pS3cret app > dump.sql",
            "sshpass -p hunter2 ssh host",
            "alias deploy='tool --api-key=abc123 push'",
            "tool --password hunter2",
        ] {
            assert_eq!(shell(line), GONE, "{line}");
        }
        for line in [
            "alias p='ping -p 80 host'",
            "tool --password-file ~/.pw",
            "tool --token",
        ] {
            assert_eq!(shell(line), line, "{line}");
        }
        // Base64 that decodes to a credential's assignment.
        let encoded = "ZXhwb3J0IEdJVEhVQl9UT0tFTj1zM2NyM3Q="; // export GITHUB_TOKEN=s3cr3t
        let line = format!("eval \"$(echo {encoded} | base64 -d)\"");
        assert_eq!(shell(&line), GONE);
        // Secrets in comments: a commented-out assignment, a token in prose.
        for line in [
            "# export DB_PASSWORD=hunter2",
            "#OPENAI_API_KEY=abc123",
            "# old token: ghp_7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX",
        ] {
            assert_eq!(shell(line), GONE, "{line}");
        }
        for line in [
            "# set your password with `passwd`",
            "## Aliases",
            "#!/bin/bash",
        ] {
            assert_eq!(shell(line), line, "{line}");
        }
        // Token formats of gitleaks' rule set, assigned to any name.
        let stripe = "export BILLING=sk_live_51Hq9zK2eZvKYlo2C8f3kQz9xYb7W";
        assert_eq!(shell(stripe), GONE);
    }

    /// Every assignment of every command of a line is judged, not only the first.
    #[test]
    fn every_assignment_of_a_line_is_judged() {
        for line in [
            "export EDITOR=vim; export OPENAI_API_KEY=x",
            "export PATH=\"$HOME/bin:$PATH\" ANTHROPIC_API_KEY=x",
            "export FOO=1 && export GITHUB_TOKEN=x",
            "export FOO=1 || GITHUB_TOKEN=x gh auth status",
            "echo hi | GITHUB_TOKEN=x gh api",
            "declare -x A=1 B=2 HF_TOKEN=x",
            "typeset -gx A=1 NPM_TOKEN=x",
            "readonly A=1 DB_PASSWORD=x",
            "f() { local A=1 API_SECRET=x; }",
            "A=1 TOKEN=x",
            "PATH+=:/x; GH_TOKEN+=x",
            "alias gh2='GH_TOKEN=x gh'",
            "alias deploy=\"curl -H 'Authorization: token x' https://api.example\"",
            "alias api='curl -H \"authorization: Bearer abc\" https://h'",
            "alias pub='npm publish --otp=123456'",
            "alias login='docker login --password=hunter2 r.example'",
            "alias vlt='vault login --token=s.abc'",
            "function deploy; env SENTRY_AUTH_TOKEN=x sentry-cli releases; end",
        ] {
            assert_eq!(shell(line), GONE, "{line}");
        }
    }

    /// fish: any `set` with any flags whose first non-flag word is a credential name,
    /// several on a line too.
    #[test]
    fn fish_set_with_any_flags_is_judged() {
        for line in [
            "set -xg OPENAI_API_KEY v",
            "set -x -g OPENAI_API_KEY v",
            "set --global --export OPENAI_API_KEY v",
            "set -Ux GITHUB_TOKEN v",
            "set -U GITHUB_TOKEN v",
            "set GITHUB_TOKEN v",
            "set -gx EDITOR vim; set -gx ANTHROPIC_API_KEY v",
            "if status is-interactive; set -gx HF_TOKEN v; end",
            "setenv GITHUB_TOKEN v",
        ] {
            assert_eq!(
                String::from_utf8(filter_file(
                    Path::new("/h/.config/fish/config.fish"),
                    line.as_bytes()
                ))
                .unwrap(),
                GONE,
                "{line}"
            );
        }
        for line in [
            "set -gx EDITOR vim",
            "set -gx PATH $HOME/bin $PATH",
            "set -e GITHUB_TOKEN",
            "set -q GITHUB_TOKEN",
            "set fish_greeting",
        ] {
            assert_eq!(shell(line), line, "{line}");
        }
    }

    /// Names missed before: `*_PAT`, a last word `KEY` or `LOGIN` after another,
    /// `*WEBHOOK*`, npm's `otp`.
    #[test]
    fn values_stored_without_an_assignment_and_more_shapes_go() {
        for line in [
            "printf -v GITHUB_TOKEN %s SECRET",
            "read -r NPM_TOKEN <<< \"SECRET\"",
            "export SERVICE_CREDS=x",
            "export MY_PW=x",
            "export STRIPE_SK=x",
            "export STRIPE=sk_live_0123456789abcdef",
            "export SLACK_URL=https://hooks.slack.com/services/T0/B0/abc",
        ] {
            assert_eq!(shell(line), GONE, "{line}");
        }
        for line in [
            "printf -v DATE '%(%F)T' -1",
            "read -r LINE < file",
            "export DISK=/dev/sda",
            "export TERM=xterm-256color",
        ] {
            assert_eq!(shell(line), line, "{line}");
        }
    }

    #[test]
    fn pat_key_login_webhook_and_otp_names() {
        for name in [
            "GH_PAT",
            "GITHUB_PAT",
            "AZURE_DEVOPS_EXT_PAT",
            "OPENAI_KEY",
            "OPENROUTER_KEY",
            "MISTRAL_KEY",
            "SENDGRID_KEY",
            "SIGNING_KEY",
            "signingInMemoryKey",
            "gpr.key",
            "sonar.login",
            "SLACK_WEBHOOK_URL",
            "DISCORD_WEBHOOK",
            "otp",
        ] {
            assert!(looks_like_credential(name.as_bytes()), "{name}");
            assert_eq!(shell(&format!("export {name}=v")), GONE, "{name}");
        }
        // Not credentials: settings, and names that point at a key's file.
        for name in [
            "PATH",
            "EDITOR",
            "KEYMAP",
            "KEYTIMEOUT",
            "GPG_TTY",
            "SSH_KEY_PATH",
            "SIGNING_KEY_FILE",
            "COMPAT",
            "PATCH_LEVEL",
            "KEY",
            "LOGIN_SHELL",
            "HOTKEY",
        ] {
            assert!(!looks_like_credential(name.as_bytes()), "{name}");
            let line = format!("export {name}=v");
            assert_eq!(shell(&line), line, "{name}");
        }
    }

    /// A value that is a well-known token, or a URL or DSN with a password that
    /// stripping the URL's user information would not remove, drops the line whatever the
    /// name (comments too); a URL's user information is removed from a kept line.
    #[test]
    fn values_that_carry_credentials() {
        for line in [
            "export FOO=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "export FOO=gho_abcdefghijklmnopqrstuvwxyz0123456789",
            "export X=github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz",
            "GL=glpat-abcdefghij0123456789",
            "export SLACK=xoxb-1234567890-abcdefghij",
            "export LLM=sk-ant-api03-abcdefghijklmnop",
            "export LLM=\"sk-proj-abcdefghijklmnopqrst\"",
            "export AWS_ID=AKIAIOSFODNN7EXAMPLE",
            "export HUB=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
            "export NPMT=npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "# export OLD=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "export MYSQL_DSN='app:s3cret@tcp(db:3306)/app'",
            "export REMOTE=x-access-token:abc123@github.com/o/r.git",
            "export DB='postgres://app:pa/ss@db.example/app'",
        ] {
            assert_eq!(shell(line), GONE, "{line}");
        }
        assert_eq!(
            shell("export DATABASE_URL=postgres://app:s3cret@db.example:5432/app"),
            "export DATABASE_URL=postgres://db.example:5432/app"
        );
        for line in [
            "export npm_config_cache=$HOME/.npm",
            "alias tasks='task-runner --sk-mode'",
            "export MAILTO=mailto:me@example.com",
            "git remote add o git@github.com:o/r.git",
            "registry=https://r.example/@scope/",
            "@scope:registry=https://r.example/",
            "email = me@example.com",
            "export DISK=disk-abcdefghijklmnopqrstuvwxyz",
            "alias ask='askpass-helper'",
        ] {
            assert_eq!(shell(line), line, "{line}");
        }
    }

    /// Gradle, Maven, TOML and YAML shapes that carried a secret past the filter.
    #[test]
    fn package_configuration_shapes() {
        let gradle = "org.gradle.jvmargs=-Xmx2g\ngpr.user=me\ngpr.key=k-secret\n\
                      signingInMemoryKey=s-secret\nsigning.password=p-secret\n\
                      sonar.login=l-secret\nmavenCentralToken=t-secret\n\
                      signing.keyId=ABCD1234\n";
        let out = String::from_utf8(filter_file(
            Path::new("/h/.gradle/gradle.properties"),
            gradle.as_bytes(),
        ))
        .unwrap();
        assert!(!out.contains("-secret"), "{out}");
        assert!(out.contains("org.gradle.jvmargs=-Xmx2g"), "{out}");
        assert!(out.contains("gpr.user=me"), "{out}");
        assert!(out.contains("signing.keyId=ABCD1234"), "{out}");
        assert_eq!(out.lines().count(), gradle.lines().count());
        let xml = "<settings><servers><server><id>a</id>\n\
                   <password><![CDATA[cdata-secret]]></password>\n\
                   <password >spaced-secret</password >\n\
                   <username>me</username></server></servers></settings>\n";
        let out = String::from_utf8(filter_file(
            Path::new("/h/.m2/settings.xml"),
            xml.as_bytes(),
        ))
        .unwrap();
        assert!(!out.contains("-secret"), "{out}");
        assert!(out.contains("<username>me</username>"), "{out}");
        assert_eq!(out.lines().count(), xml.lines().count());
        let toml = "[registry]\ntoken = \"\"\"\nmulti-secret\n\"\"\"\n\
                    \"registries\".mine.token = \"quoted-secret\"\n[registries.mine]\n\
                    index = \"https://r.example\"\nother = '''\nnot a secret\n'''\n";
        let out = String::from_utf8(filter_file(
            Path::new("/h/.cargo/config.toml"),
            toml.as_bytes(),
        ))
        .unwrap();
        assert!(!out.contains("-secret"), "{out}");
        assert!(out.contains("index = \"https://r.example\""), "{out}");
        assert!(out.contains("not a secret"), "{out}");
        assert_eq!(out.lines().count(), toml.lines().count());
        let yaml =
            "npmRegistryServer: \"https://r.example\"\nnpmAuthToken: >-\n  block-\n  secret\n\n\
                    npmScopes:\n  co:\n    npmAuthToken: |\n      nested-secret\n\
                    \x20   npmRegistryServer: \"https://co.example\"\nenableTelemetry: false\n";
        let out =
            String::from_utf8(filter_file(Path::new("/h/.yarnrc.yml"), yaml.as_bytes())).unwrap();
        assert!(!out.contains("secret"), "{out}");
        assert!(out.contains("npmScopes:"), "{out}");
        assert!(
            out.contains("    npmRegistryServer: \"https://co.example\""),
            "{out}"
        );
        assert!(out.contains("enableTelemetry: false"), "{out}");
        assert_eq!(out.lines().count(), yaml.lines().count());
        let npmrc = "registry=https://r.example/\notp=123456\n";
        assert_eq!(
            String::from_utf8(filter_file(Path::new("/h/.npmrc"), npmrc.as_bytes())).unwrap(),
            "registry=https://r.example/\n; sandy: credential line removed\n"
        );
        let condarc = "channels:\n  - defaults\nchannel_alias: https://u:c-secret@conda.example\n";
        let out =
            String::from_utf8(filter_file(Path::new("/h/.condarc"), condarc.as_bytes())).unwrap();
        assert_eq!(
            out,
            "channels:\n  - defaults\nchannel_alias: https://conda.example\n"
        );
    }

    /// A shell value left open on a dropped line (a backslash, an open quote) goes with it.
    #[test]
    fn a_dropped_shell_value_spanning_lines_goes_whole() {
        let rc = "export GITHUB_TOKEN=\"abc\ndef-secret\"\nalias ll='ls -l'\n\
                  export NPM_TOKEN=\\\n  more-secret\nexport EDITOR=vim\n";
        let out = shell(rc);
        assert!(!out.contains("secret"), "{out}");
        assert!(out.contains("alias ll='ls -l'"), "{out}");
        assert!(out.contains("export EDITOR=vim"), "{out}");
        assert_eq!(out.lines().count(), rc.lines().count());
    }
}
