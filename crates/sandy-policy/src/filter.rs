//! Credential filtering for [`crate::ViewKind::Filtered`] views: the copy of a
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
//! [`filter_file`] picks the rule from the file's name.

use std::path::Path;

/// Words that mark an assigned name as a credential, compared case-insensitively against
/// the name with `-` and `.` read as `_`.
const CREDENTIAL_WORDS: &[&str] = &[
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

/// The filtered copy of the host file `target` holding `text`, by the file's format:
/// XML for `*.xml`, `;` comments for npm's and pnpm's configuration, `#` for the other
/// configuration formats (TOML, YAML, INI, properties: by extension or known name), and
/// shell otherwise (start-up files and the scripts they source).
pub fn filter_file(target: &Path, text: &[u8]) -> Vec<u8> {
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".xml") {
        return filter_xml(text);
    }
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    let style = match name {
        ".npmrc" | "npmrc" => CommentStyle::Semicolon,
        "rc" if target.parent().is_some_and(|p| p.ends_with("pnpm")) => CommentStyle::Semicolon,
        ".pypirc" | ".yarnrc" | "config" => CommentStyle::Hash,
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
    while let Some(line) = lines.next() {
        if assigns_credential(line) || has_credential_key(line) {
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

fn looks_like_credential(name: &[u8]) -> bool {
    // camelCase words become snake_case words: `npmAuthToken` is `npm_auth_token`.
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
        let mut close = b"</".to_vec();
        close.extend_from_slice(name);
        close.push(b'>');
        let Some(end) = find(&text[i..], &close).map(|p| i + p) else {
            continue;
        };
        let content = &text[i..end];
        if content.contains(&b'<') {
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                looks_like_credential(name),
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
}
