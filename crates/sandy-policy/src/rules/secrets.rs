//! What looks like a credential: a variable's name ([`is_credential_name`]), or a value
//! that matches a known token format ([`find`]).
//!
//! The token formats are gitleaks' rule set (`rules/gitleaks.toml`, MIT licence,
//! `rules/gitleaks.LICENSE`), kept as data: about 220 services' token shapes (GitHub,
//! OpenAI, Anthropic, AWS, Slack, Stripe, JWTs, private-key blocks, ...), each with the
//! keywords that must occur for it to apply, the entropy its secret must have, and the
//! values it allows. The build turns the file into a table; a text is looked at only when
//! it holds a run of characters a token could be, and a rule's pattern is compiled only
//! when one of its keywords occurs in it, so that an environment or a start-up file
//! without credentials costs one pass over its bytes.
//! To follow gitleaks, replace the file with a newer `config/gitleaks.toml`.

use std::sync::OnceLock;

use regex_lite::{Regex, RegexBuilder};

/// One gitleaks rule, as the build writes it: every text a span of [`BLOB`], every list a
/// range of [`SPANS`] (numbers only: no relocation for the loader to apply at start).
pub(crate) struct RawRule {
    id: (usize, usize),
    regex: (usize, usize),
    keywords: (usize, usize),
    /// The entropy the secret must exceed (0: none asked).
    entropy: f64,
    /// The capture group that holds the secret (0: the first group there is, else the
    /// whole match, as gitleaks does).
    group: usize,
    allow_secret: (usize, usize),
    allow_match: (usize, usize),
    stopwords: (usize, usize),
}

include!(concat!(env!("OUT_DIR"), "/secret_rules.rs"));

/// The text of a span of [`BLOB`].
fn text((start, end): (usize, usize)) -> &'static str {
    BLOB.get(start..end).unwrap_or_default()
}

/// The texts of a range of [`SPANS`].
fn list((start, end): (usize, usize)) -> impl Iterator<Item = &'static str> + Clone {
    SPANS
        .get(start..end)
        .unwrap_or_default()
        .iter()
        .map(|&s| text(s))
}

impl RawRule {
    fn id(&self) -> &'static str {
        text(self.id)
    }
}

/// Whether a name looks like a credential's (`GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`,
/// `DB_PASSWORD`, `npmAuthToken`, `SLACK_WEBHOOK_URL`, ...): the same judgement the
/// start-up files' filter makes of an assignment, but for names that are not credentials
/// although their words say so: the shell's working directories (`PWD` reads as
/// "password" elsewhere), and names of places where a credential is kept
/// (`PASSWORD_STORE_DIR`, `AWS_SHARED_CREDENTIALS_FILE`), whose value is a path (its
/// value is still looked at by [`find`]).
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let place = ["_DIR", "_PATH", "_FILE", "_HOME", "_SOCK", "_SOCKET"]
        .iter()
        .any(|end| upper.ends_with(end));
    !place && !matches!(upper.as_str(), "PWD" | "OLDPWD") && looks_like_credential(name.as_bytes())
}

/// The id of the first gitleaks rule that finds a secret in `text` (a line, or
/// `NAME=value`), if any.
pub fn find(text: &str) -> Option<&'static str> {
    find_in(text, text)
}

/// [`find`] for `NAME=value`: looked at only when the value could hold a token.
pub fn find_assigned(name: &str, value: &str) -> Option<&'static str> {
    if !could_hold_a_token(value.as_bytes()) {
        return None;
    }
    find_in(&format!("{name}={value}"), "")
}

/// The rules' look at `text`, when `filter` (a part of it) could hold a token (an empty
/// `filter`: already known to).
fn find_in(text: &str, filter: &str) -> Option<&'static str> {
    if !filter.is_empty() && !could_hold_a_token(filter.as_bytes()) {
        return None;
    }
    // The rules whose keywords occur (each keyword a substring search of the text in
    // lower case: for the few texts that pass the filter above, cheaper than building
    // an automaton for ~300 keywords on every launch).
    let lower = text.to_ascii_lowercase();
    let mut candidates: Vec<usize> = RULES
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            let mut keywords = list(r.keywords);
            keywords.clone().next().is_none() || keywords.any(|k| lower.contains(k))
        })
        .map(|(i, _)| i)
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    candidates
        .into_iter()
        .find(|&i| matches(i, text))
        .map(|i| RULES[i].id())
}

/// The shortest run of token characters that makes a text worth the rules' look: every
/// token format of the rule set is at least this long (a key block has its marker).
const MIN_TOKEN_RUN: usize = 16;

/// Whether `text` could hold a token at all: a run of [`MIN_TOKEN_RUN`] characters that
/// tokens are made of (letters, digits, `_ - . + ~`) with both a letter and a digit in
/// it, or a key block's `-----BEGIN`. Paths, colour lists, locales, names and the like
/// are not looked at further, so that an environment or a start-up file without
/// credentials costs one pass over its bytes.
fn could_hold_a_token(text: &[u8]) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+' | b'~');
    let (mut run, mut letters, mut digits) = (0usize, 0usize, 0usize);
    for &b in text {
        if token(b) {
            run += 1;
            letters += usize::from(b.is_ascii_alphabetic());
            digits += usize::from(b.is_ascii_digit());
            if run >= MIN_TOKEN_RUN && letters > 0 && digits > 0 {
                return true;
            }
        } else {
            (run, letters, digits) = (0, 0, 0);
        }
    }
    text.windows(10).any(|w| w == b"-----BEGIN")
}

/// The compiled pattern of rule `i` (`None`: it does not compile here, and never
/// matches; a unit test keeps that list empty).
fn compiled(i: usize) -> Option<&'static Regex> {
    static COMPILED: OnceLock<Vec<OnceLock<Option<Regex>>>> = OnceLock::new();
    let all = COMPILED.get_or_init(|| RULES.iter().map(|_| OnceLock::new()).collect());
    all.get(i)?
        .get_or_init(|| ascii(text(RULES[i].regex)))
        .as_ref()
}

/// `pattern` compiled as gitleaks' (Go's RE2) reads it: `\w`, `\d`, `\s` and `\b` of
/// ASCII (regex-lite's only classes).
fn ascii(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern).size_limit(64 << 20).build().ok()
}

/// A list of patterns compiled once, each (one that does not compile never matches).
fn any_match(
    cache: &'static OnceLock<Vec<Regex>>,
    patterns: impl Iterator<Item = &'static str>,
    text: &str,
) -> bool {
    cache
        .get_or_init(|| patterns.filter_map(ascii).collect())
        .iter()
        .any(|re| re.is_match(text))
}

/// Whether rule `i` finds a secret in `text`: its pattern matches, the secret has the
/// entropy the rule asks for, and no allow list of the rule's or gitleaks' own lets it
/// go.
fn matches(i: usize, text: &str) -> bool {
    let rule = &RULES[i];
    let Some(re) = compiled(i) else {
        return false;
    };
    static GLOBAL: OnceLock<Vec<Regex>> = OnceLock::new();
    re.captures_iter(text).any(|caps| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let secret = if rule.group > 0 {
            caps.get(rule.group).map(|m| m.as_str())
        } else {
            caps.iter().skip(1).flatten().next().map(|m| m.as_str())
        }
        .unwrap_or(whole);
        if rule.entropy > 0.0 && entropy(secret) <= rule.entropy {
            return false;
        }
        let lower = secret.to_ascii_lowercase();
        let stopped = list(rule.stopwords).chain(list(ALLOW_WORDS)).any(|w| {
            let w = w.to_ascii_lowercase();
            lower.contains(&w)
        });
        if stopped || any_match(&GLOBAL, list(ALLOW_SECRET), secret) {
            return false;
        }
        let own = |patterns: (usize, usize), text: &str| {
            list(patterns).any(|p| ascii(p).is_some_and(|re| re.is_match(text)))
        };
        !own(rule.allow_secret, secret) && !own(rule.allow_match, whole)
    })
}

/// Shannon entropy of `text`, in bits per character (gitleaks' measure).
fn entropy(text: &str) -> f64 {
    if text.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for b in text.bytes() {
        counts[usize::from(b)] += 1;
    }
    let len = text.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / len;
            -p * p.log2()
        })
        .sum()
}

/// Words that mark an assigned name as a credential, compared case-insensitively against
/// the name with `-` and `.` read as `_`.
pub(crate) const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "pass",
    "pwd",
    "apikey",
    "api_key",
    "_auth",
    "auth",
    "credential",
    "credentials",
    "private_key",
    "access_key",
    "session_key",
    "cookie",
    "bearer",
];

/// Whether a name looks like a credential's: one of [`CREDENTIAL_WORDS`] (see
/// [`has_credential_word`]), a `PAT` or `OTP` word (`GH_PAT`, `AZURE_DEVOPS_EXT_PAT`,
/// npm's `otp`), `KEY` or `LOGIN` as its last word after another (`OPENAI_KEY`,
/// `signingInMemoryKey`, `gpr.key`, `sonar.login`; not `KEYMAP`, `KEYTIMEOUT`,
/// `SSH_KEY_PATH` or `SIGNING_KEY_FILE`, which name a file), or `WEBHOOK` anywhere in it
/// (`SLACK_WEBHOOK_URL`).
pub(crate) fn looks_like_credential(name: &[u8]) -> bool {
    if has_credential_word(name) {
        return true;
    }
    let normalized = snake_case(name);
    let n = normalized.as_slice();
    is_whole_word_of(n, b"pat")
        || is_whole_word_of(n, b"otp")
        || is_whole_word_of(n, b"creds")
        || is_whole_word_of(n, b"cred")
        || is_whole_word_of(n, b"pw")
        || (n.ends_with(b"_sk") && n.len() > 3)
        || n.windows(7).any(|w| w == b"webhook")
        || [&b"_key"[..], b"_login"]
            .iter()
            .any(|end| n.ends_with(end) && n.len() > end.len())
}

/// `name` in `snake_case`: `-` and `.` read as `_`, a capital after a lower-case letter
/// starts a word, all lower case.
fn snake_case(name: &[u8]) -> Vec<u8> {
    let mut normalized: Vec<u8> = Vec::with_capacity(name.len() + 8);
    for (i, &b) in name.iter().enumerate() {
        match b {
            b'-' | b'.' => normalized.push(b'_'),
            b'A'..=b'Z' => {
                if i > 0 && name[i - 1].is_ascii_lowercase() {
                    normalized.push(b'_');
                }
                normalized.push(b.to_ascii_lowercase());
            }
            other => normalized.push(other),
        }
    }
    normalized
}

/// Whether the name holds one of [`CREDENTIAL_WORDS`].
pub(crate) fn has_credential_word(name: &[u8]) -> bool {
    // camelCase words become snake_case words: `npmAuthToken` is `npm_auth_token`.
    let normalized = snake_case(name);
    let n = normalized.as_slice();
    CREDENTIAL_WORDS.iter().any(|word| {
        let word = word.trim_start_matches('_').as_bytes();
        // A whole word of the name, or its end (`npmAuthToken`, `GITHUB_TOKEN`), or its
        // first word.
        is_whole_word_of(n, word)
            || n.ends_with(word)
            || (n.starts_with(word) && n.get(word.len()) == Some(&b'_'))
    })
}

/// Whether `word` occurs in `name` between `_` separators (or the name's ends).
fn is_whole_word_of(name: &[u8], word: &[u8]) -> bool {
    if word.is_empty() || word.len() > name.len() {
        return false;
    }
    (0..=name.len() - word.len()).any(|at| {
        name[at..].starts_with(word)
            && (at == 0 || name[at - 1] == b'_')
            && name.get(at + word.len()).is_none_or(|&b| b == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        let broken: Vec<&str> = (0..RULES.len())
            .filter(|&i| compiled(i).is_none())
            .map(|i| RULES[i].id())
            .collect();
        assert!(broken.is_empty(), "rules that do not compile: {broken:?}");
        assert!(RULES.len() > 200, "{}", RULES.len());
    }

    /// Token formats found by value, whatever the name (made up, shaped like the real
    /// ones), and ordinary values left alone.
    #[test]
    fn known_token_formats_are_found_by_value() {
        let found = [
            ("X", "ghp_7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX"),
            ("X", "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wE5rT7yU9iO1pA3sD5fG7h"),
            ("X", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
            ("X", "AKIAZ7QW3ERT5YU6IOPL"),
            ("X", "sk_live_51Hq9zK2eZvKYlo2C8f3kQz9xYb7W"),
            ("X", "sk-ant-api03-Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp3rSt6vWx9zAb2dEf5hIj8lMn1pQr4tUv7xYz0bCd3fGh6jKl9nOAA"),
            ("X", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
            ("X", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQAAACD\n-----END OPENSSH PRIVATE KEY-----"),
        ];
        for (name, value) in found {
            assert!(find(&format!("{name}={value}")).is_some(), "{value}");
        }
        for value in [
            "/usr/local/bin:/usr/bin:/bin",
            "en_US.UTF-8",
            "xterm-256color",
            "/home/user",
            "1",
            "di=01;34:ln=01;36",
        ] {
            assert_eq!(find(&format!("X={value}")), None, "{value}");
        }
    }

    #[test]
    fn credential_names_are_recognised() {
        for name in [
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "npmAuthToken",
            "SLACK_WEBHOOK_URL",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "EDITOR",
            "KEYMAP",
            "SSH_KEY_PATH",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
    }

    #[test]
    fn entropy_is_shannons() {
        assert_eq!(entropy(""), 0.0);
        assert_eq!(entropy("aaaa"), 0.0);
        assert!((entropy("ab") - 1.0).abs() < 1e-9);
    }
}
