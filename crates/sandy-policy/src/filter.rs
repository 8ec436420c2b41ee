//! Credential filtering for [`crate::ViewKind::Filtered`] views: the copy of a
//! configuration file the sandbox reads instead of the host file keeps every setting but
//! those that look like a credential.
//!
//! The rule is deliberately coarse and errs towards dropping: a line goes when the name it
//! assigns looks like a credential (`TOKEN`, `SECRET`, `PASSWORD`, `_auth`, ...), and a URL
//! with a user name or password anywhere in a kept line loses that part. A dropped line is
//! replaced by a comment in the file's own comment syntax, so line numbers stay the same.

/// Words that mark an assigned name as a credential, compared case-insensitively against
/// the name with `-` and `.` read as `_`.
const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
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

/// How a file marks a comment, for the line that replaces a dropped one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentStyle {
    /// `#` (shell start-up files, TOML, pip.conf, .pypirc).
    Hash,
    /// `;` (npm's `.npmrc`, which reads `#` too, but `;` is its documented form).
    Semicolon,
}

/// The filtered copy of `text`. Never fails: bytes that are not UTF-8 are kept as they
/// are in lines whose name is not a credential.
pub fn filter_credentials(text: &[u8], style: CommentStyle) -> Vec<u8> {
    let marker: &[u8] = match style {
        CommentStyle::Hash => b"# sandy: credential line removed",
        CommentStyle::Semicolon => b"; sandy: credential line removed",
    };
    let mut out = Vec::with_capacity(text.len());
    let mut lines = text.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        if assigns_credential(line) {
            out.extend_from_slice(marker);
        } else {
            out.extend_from_slice(&strip_url_userinfo(line));
        }
        if lines.peek().is_some() {
            out.push(b'\n');
        }
    }
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

fn looks_like_credential(name: &[u8]) -> bool {
    let normalized: String = name
        .iter()
        .map(|&b| match b {
            b'-' | b'.' => '_',
            other => char::from(other.to_ascii_lowercase()),
        })
        .collect();
    let padded = format!("_{normalized}_");
    CREDENTIAL_WORDS.iter().any(|word| {
        let word = word.trim_start_matches('_');
        // A whole word of the name, or its end (`npmAuthToken`, `GITHUB_TOKEN`).
        padded.contains(&format!("_{word}_"))
            || normalized.ends_with(word)
            || normalized.starts_with(&format!("{word}_"))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f(text: &str) -> String {
        String::from_utf8(filter_credentials(text.as_bytes(), CommentStyle::Hash)).unwrap()
    }

    #[test]
    fn drops_credential_assignments_and_keeps_the_rest() {
        let rc = "alias ll='ls -l'\nexport OPENAI_API_KEY=sk-123\nexport PATH=$HOME/bin:$PATH\n\
                  GITHUB_TOKEN=ghp_x\nexport AWS_SECRET_ACCESS_KEY=abc\nset -gx ANTHROPIC_API_KEY k\n\
                  export DB_PASSWORD='p'\n# export MY_TOKEN=commented\nexport EDITOR=vim\n";
        assert_eq!(
            f(rc),
            "alias ll='ls -l'\n# sandy: credential line removed\nexport PATH=$HOME/bin:$PATH\n\
             # sandy: credential line removed\n# sandy: credential line removed\n\
             # sandy: credential line removed\n# sandy: credential line removed\n\
             # export MY_TOKEN=commented\nexport EDITOR=vim\n"
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
}
