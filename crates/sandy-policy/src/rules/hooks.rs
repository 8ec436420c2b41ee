//! Runtime controls: the hook commands an agent's configuration registers, resolved the
//! way the shell that runs them would find their executable, so that Sandy can grant it
//! (read and execute, the exact file) and protect it read-only before launch.
//!
//! A hook command is a shell string. Sandy reads its first word after any `VAR=value`
//! assignments and an `env` prefix, expands `~`, `$HOME` and `$CLAUDE_PROJECT_DIR`, and
//! looks a bare name up on the caller's `PATH`. When that executable is a known
//! interpreter (`sh`, `bash`, `python3`, `node`, ...) its first non-option argument is the
//! script it runs. Anything else (another variable, a command substitution, a script
//! that does not exist) is reported as unresolvable, never guessed.

use std::path::{Path, PathBuf};

use crate::host::inspect::{FileKind, PathInspector};

/// A hook command whose executable (and script) Sandy found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedHook {
    /// The executable, by the name the shell would use (not resolved through symlinks).
    pub(crate) executable: PathBuf,
    /// The script an interpreter runs, by name.
    pub(crate) script: Option<PathBuf>,
}

/// Where the words of a hook command lead.
pub(crate) struct HookEnv<'a> {
    pub(crate) home: Option<&'a Path>,
    pub(crate) project: &'a Path,
    pub(crate) path_dirs: &'a [PathBuf],
}

/// Interpreters whose first non-option argument is the script they run.
fn is_interpreter(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "sh", "bash", "dash", "zsh", "ksh", "fish", "node", "nodejs", "bun", "deno", "ruby",
        "perl", "php", "lua", "uv", "python", "python2", "python3",
    ];
    NAMES.contains(&name)
        || name
            .strip_prefix("python3.")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

/// Options of an interpreter that take the next word as their value.
fn option_takes_value(interpreter: &str, option: &str) -> bool {
    match interpreter {
        "python" | "python2" | "python3" => matches!(option, "-W" | "-X"),
        "node" | "nodejs" => matches!(option, "-r" | "--require" | "--import"),
        "perl" | "ruby" => matches!(option, "-I"),
        "bash" | "sh" | "dash" | "zsh" | "ksh" => matches!(option, "-o" | "-O"),
        _ => false,
    }
}

/// Options that make the interpreter run code given on the command line, not a script.
fn runs_inline_code(interpreter: &str, option: &str) -> bool {
    match interpreter {
        "python" | "python2" | "python3" => option == "-c" || option == "-m",
        "node" | "nodejs" | "bun" | "deno" => matches!(option, "-e" | "--eval" | "-p" | "--print"),
        "perl" | "ruby" => option == "-e",
        _ => {
            option == "-c"
                || option.starts_with("-c") && option[1..].chars().all(char::is_alphabetic)
        }
    }
}

/// Splits a shell command into the words of its first simple command, removing quotes.
/// `None` when a word uses something Sandy does not evaluate (a command substitution,
/// an unknown variable, a glob), so the executable cannot be known before launch.
fn first_command_words(command: &str, env: &HookEnv) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let mut quote: Option<char> = None;
    // Whether the current word started unquoted at `~` (tilde expansion applies).
    let mut word_started_unquoted_tilde = false;
    while let Some(c) = chars.next() {
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                } else {
                    word.push(c);
                }
                continue;
            }
            Some(_) => {
                match c {
                    '"' => quote = None,
                    '\\' => {
                        if let Some(n) = chars.next() {
                            word.push(n);
                        }
                    }
                    '$' => word.push_str(&expand_variable(&mut chars, env)?),
                    '`' => return Err("it uses a command substitution".to_owned()),
                    _ => word.push(c),
                }
                continue;
            }
            None => {}
        }
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(finish_word(&word, word_started_unquoted_tilde, env)?);
                    word.clear();
                    in_word = false;
                }
            }
            '\n' | ';' | '&' | '|' => break,
            '\'' | '"' => {
                in_word = true;
                quote = Some(c);
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            '$' => {
                in_word = true;
                word.push_str(&expand_variable(&mut chars, env)?);
            }
            '`' | '(' | ')' | '<' | '>' | '*' | '?' | '[' | '{' => {
                if !in_word && matches!(c, '<' | '>') {
                    // A redirection: the rest of this command is not an argument Sandy needs.
                    break;
                }
                if matches!(c, '<' | '>') {
                    words.push(finish_word(&word, word_started_unquoted_tilde, env)?);
                    word.clear();
                    in_word = false;
                    break;
                }
                return Err(format!(
                    "it uses shell syntax ('{c}') Sandy does not evaluate"
                ));
            }
            _ => {
                if !in_word {
                    word_started_unquoted_tilde = c == '~';
                }
                in_word = true;
                word.push(c);
            }
        }
    }
    if quote.is_some() {
        return Err("it has an unterminated quote".to_owned());
    }
    if in_word {
        words.push(finish_word(&word, word_started_unquoted_tilde, env)?);
    }
    Ok(words)
}

fn finish_word(word: &str, tilde: bool, env: &HookEnv) -> Result<String, String> {
    if tilde && (word == "~" || word.starts_with("~/")) {
        let home = env
            .home
            .ok_or_else(|| "it names ~ and HOME is not set".to_owned())?;
        return Ok(format!("{}{}", home.display(), &word[1..]));
    }
    if tilde {
        return Err("it names another user's home directory (~user)".to_owned());
    }
    Ok(word.to_owned())
}

/// Expands `$NAME` or `${NAME}` after the `$`: only the variables whose value Sandy knows
/// for the hook (the home directory and the project directory).
fn expand_variable(
    chars: &mut std::iter::Peekable<std::str::Chars>,
    env: &HookEnv,
) -> Result<String, String> {
    let mut name = String::new();
    if chars.peek() == Some(&'{') {
        chars.next();
        for c in chars.by_ref() {
            if c == '}' {
                break;
            }
            name.push(c);
        }
    } else {
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                name.push(c);
                chars.next();
            } else {
                break;
            }
        }
    }
    match name.as_str() {
        "HOME" => env
            .home
            .map(|h| h.display().to_string())
            .ok_or_else(|| "it names $HOME and HOME is not set".to_owned()),
        "CLAUDE_PROJECT_DIR" | "GEMINI_PROJECT_DIR" | "PWD" => {
            Ok(env.project.display().to_string())
        }
        "" => Err("it uses a '$' Sandy does not evaluate".to_owned()),
        other => Err(format!(
            "it uses the variable ${other}, unknown before launch"
        )),
    }
}

/// Resolves a word in the place of a command: a path (absolute, or relative to the
/// project, where the agent runs its hooks) or a name looked up on `PATH`.
fn find_executable(word: &str, env: &HookEnv, fs: &dyn PathInspector) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        fs.canonicalize(p)
            .ok()
            .is_some_and(|c| matches!(fs.kind(&c), Some(FileKind::File { executable: true })))
    };
    if word.contains('/') {
        let path = crate::model::paths::normalize(&env.project.join(word));
        if executable(&path) {
            return Ok(path);
        }
        return Err(format!("{} is not an executable file", path.display()));
    }
    env.path_dirs
        .iter()
        .map(|d| d.join(word))
        .find(|p| executable(p))
        .ok_or_else(|| format!("'{word}' is not found on PATH"))
}

/// Resolves one hook command.
pub(crate) fn resolve_hook(
    command: &str,
    env: &HookEnv,
    fs: &dyn PathInspector,
) -> Result<ResolvedHook, String> {
    let words = first_command_words(command, env)?;
    let mut words = words
        .into_iter()
        .skip_while(|w| is_assignment(w))
        .peekable();
    let Some(first) = words.next() else {
        return Err("it is empty".to_owned());
    };
    let mut executable = find_executable(&first, env, fs)?;
    let mut name = base_name(&executable);
    // `env [VAR=value]... program`: the program is what runs.
    if name == "env" {
        let Some(program) = words.find(|w| !is_assignment(w)) else {
            return Err("env runs no program".to_owned());
        };
        if program.starts_with('-') {
            return Err("it passes options to env".to_owned());
        }
        executable = find_executable(&program, env, fs)?;
        name = base_name(&executable);
    }
    if !is_interpreter(&name) {
        return Ok(ResolvedHook {
            executable,
            script: None,
        });
    }
    let interpreter = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let interpreter = if interpreter.starts_with("python") {
        "python3"
    } else {
        interpreter
    };
    // `uv run script.py`: the script follows `run`.
    if interpreter == "uv" && words.next_if(|w| w == "run").is_none() {
        return Ok(ResolvedHook {
            executable,
            script: None,
        });
    }
    let mut script = None;
    while let Some(word) = words.next() {
        if word == "--" {
            script = words.next();
            break;
        }
        if word.starts_with('-') && word.len() > 1 {
            if runs_inline_code(interpreter, &word) {
                // The code is on the command line: nothing but the interpreter to grant.
                return Ok(ResolvedHook {
                    executable,
                    script: None,
                });
            }
            if option_takes_value(interpreter, &word) {
                words.next();
            }
            continue;
        }
        script = Some(word);
        break;
    }
    let Some(script) = script else {
        return Err(format!("{name} is given no script"));
    };
    let path = crate::model::paths::normalize(&env.project.join(&script));
    let readable = fs
        .canonicalize(&path)
        .ok()
        .is_some_and(|c| matches!(fs.kind(&c), Some(FileKind::File { .. })));
    if !readable {
        return Err(format!("its script {} does not exist", path.display()));
    }
    Ok(ResolvedHook {
        executable,
        script: Some(path),
    })
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The argument Numbat's installer puts in every hook it registers.
pub(crate) const NUMBAT_MARKER: &str = "--installed-by=numbat";

/// What a Numbat hook registration needs inside: its executable, its rule directories
/// (read-only), its record output and its sequence-state database (writable files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NumbatHook {
    pub(crate) executable: PathBuf,
    pub(crate) rule_directories: Vec<PathBuf>,
    pub(crate) output_file: Option<PathBuf>,
    pub(crate) state_database: PathBuf,
}

/// Whether a hook's words carry Numbat's ownership marker.
pub(crate) fn is_numbat(words: &[String]) -> bool {
    words.iter().any(|w| w == NUMBAT_MARKER)
}

/// The words of a hook command without evaluating anything: `None` when it needs a shell
/// (Numbat's installer writes plain, quoted words).
pub(crate) fn plain_words(command: &str, env: &HookEnv) -> Option<Vec<String>> {
    let words = first_command_words(command, env).ok()?;
    // The whole command must be one simple command.
    let rest = command
        .chars()
        .any(|c| matches!(c, ';' | '&' | '|' | '\n' | '<' | '>'));
    (!rest).then_some(words)
}

/// Parses a Numbat hook registration the way Numbat's installer writes it:
/// `BIN hook LIFECYCLE --agent AGENT --installed-by=numbat [runtime options]`, `BIN`
/// absolute. Runtime options that name files: `--rules-dir`, `--output-file`,
/// `--state-db` (default `~/.numbat/state.db`); `--output` takes `file` and `stdout`
/// (direct HTTP delivery would need the network and credentials, so it is refused).
pub(crate) fn parse_numbat(
    words: &[String],
    agent: &str,
    home: &Path,
) -> Result<NumbatHook, String> {
    let shaped = words.len() >= 6
        && words[1] == "hook"
        && words[3] == "--agent"
        && words[4] == agent
        && words[5] == NUMBAT_MARKER;
    if !shaped {
        return Err(format!(
            "the command is not Numbat's hook command for {agent} (BIN hook EVENT --agent {agent} {NUMBAT_MARKER} ...)"
        ));
    }
    let executable = PathBuf::from(&words[0]);
    if !executable.is_absolute() {
        return Err("Numbat's executable path is not absolute".to_owned());
    }
    let expand = |value: &str| -> Result<PathBuf, String> {
        let path = if let Some(rest) = value
            .strip_prefix("~/")
            .or_else(|| value.strip_prefix("$HOME/"))
            .or_else(|| value.strip_prefix("${HOME}/"))
        {
            home.join(rest)
        } else if value.contains('$') || value.starts_with('~') {
            return Err(format!(
                "the path {value} expands more than the home directory"
            ));
        } else {
            PathBuf::from(value)
        };
        if !path.is_absolute() || path.parent().is_none() {
            return Err(format!("the path {value} is not absolute, or is /"));
        }
        Ok(crate::model::paths::normalize(&path))
    };
    let mut rule_directories = Vec::new();
    let mut output_file = None;
    let mut state_database = None;
    let mut outputs: Vec<String> = Vec::new();
    let mut rest = words[6..].iter();
    while let Some(word) = rest.next() {
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (word.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| rest.next().cloned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("{name} has no value"))
        };
        match name {
            "--enforce"
            | "--include-reasoning"
            | "--no-builtin-rules"
            | "--http-gzip"
            | "--http-allow-insecure" => {
                if inline
                    .as_deref()
                    .is_some_and(|v| v != "true" && v != "false")
                {
                    return Err(format!("{name} takes true or false"));
                }
            }
            "--rules-dir" => rule_directories.push(expand(&value()?)?),
            "--output-file" => output_file = Some(expand(&value()?)?),
            "--state-db" => state_database = Some(expand(&value()?)?),
            "--output" => outputs.extend(value()?.split(',').map(str::to_owned)),
            "--emit"
            | "--content"
            | "--case-id"
            | "--http-url"
            | "--http-auth"
            | "--http-batch-size"
            | "--http-timeout"
            | "--http-sig-header"
            | "--http-timestamp-header" => {
                value()?;
            }
            other => {
                return Err(format!(
                    "Numbat's hook argument {other} is not one Sandy knows"
                ))
            }
        }
    }
    if let Some(bad) = outputs
        .iter()
        .find(|o| !matches!(o.as_str(), "file" | "stdout"))
    {
        return Err(format!(
            "Numbat output {bad} is not supported inside Sandy (use file output or a collector)"
        ));
    }
    if outputs.iter().any(|o| o == "file") != output_file.is_some() {
        return Err("Numbat's file output and --output-file go together".to_owned());
    }
    let state_database = state_database.unwrap_or_else(|| home.join(".numbat/state.db"));
    if output_file.as_ref() == Some(&state_database) {
        return Err("Numbat's output and state database are the same file".to_owned());
    }
    for writable in output_file.iter().chain(std::iter::once(&state_database)) {
        if rule_directories.iter().any(|r| writable.starts_with(r)) {
            return Err(format!(
                "the writable {} lies inside a read-only rules directory",
                writable.display()
            ));
        }
    }
    Ok(NumbatHook {
        executable,
        rule_directories,
        output_file,
        state_database,
    })
}

/// The first line of the plugin Numbat's installer generates for OpenCode.
const OPENCODE_PLUGIN_MARKER: &str = "// numbat-managed plugin - do not edit";

/// The words of the hook command Numbat's generated OpenCode plugin runs:
/// `NUMBAT_BIN hook opencode-pre-tool --agent opencode EXTRA_ARGS...`, from its
/// `const NUMBAT_BIN = "...";` and `const EXTRA_ARGS = [...];` lines. `None` when the
/// file is not Numbat's plugin; an error when it is but does not have that shape.
pub(crate) fn numbat_opencode_plugin(body: &str) -> Option<Result<Vec<String>, String>> {
    if !body.lines().any(|l| l.trim() == OPENCODE_PLUGIN_MARKER) {
        return None;
    }
    let constant = |name: &str| -> Result<serde_json::Value, String> {
        let prefix = format!("const {name} = ");
        let line = body
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
            .ok_or_else(|| format!("Numbat's plugin has no {name}"))?;
        serde_json::from_str(line.trim_end().trim_end_matches(';'))
            .map_err(|_| format!("Numbat's plugin's {name} is not a plain literal"))
    };
    let parse = || -> Result<Vec<String>, String> {
        let bin = constant("NUMBAT_BIN")?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "NUMBAT_BIN is not a string".to_owned())?;
        let extra: Vec<String> = constant("EXTRA_ARGS")?
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| "EXTRA_ARGS is not a list of strings".to_owned())?;
        if !body.contains(
            "spawn(NUMBAT_BIN, [\"hook\", lifecycle, \"--agent\", \"opencode\", ...EXTRA_ARGS]",
        ) {
            return Err(
                "Numbat's plugin does not run NUMBAT_BIN the way Numbat generates it".to_owned(),
            );
        }
        let mut words = vec![
            bin,
            "hook".to_owned(),
            "opencode-pre-tool".to_owned(),
            "--agent".to_owned(),
            "opencode".to_owned(),
        ];
        words.extend(extra);
        Ok(words)
    };
    Some(parse())
}

/// Kontext's hook aliases in a Claude Code settings file (`BIN hook ALIAS`).
const KONTEXT_CLAUDE_ALIASES: &[&str] = &[
    "session-start",
    "pre-tool-use",
    "post-tool-use",
    "post-tool-use-failure",
    "session-end",
];
/// Kontext's hook aliases in Codex's `hooks.json` (`BIN hook --agent codex ALIAS`).
const KONTEXT_CODEX_ALIASES: &[&str] = &[
    "session-start",
    "pre-tool-use",
    "post-tool-use",
    "user-prompt-submit",
    "stop",
];

/// The Kontext executable of a hook registration in the exact shape `kontext setup`
/// writes for `agent`: an absolute path whose file name is `kontext`, then `hook`, then
/// (Codex only) `--agent codex`, then one of Kontext's event aliases, and nothing else.
/// Any other shape is an ordinary hook, never evidence of a Kontext installation.
pub(crate) fn kontext_binary(words: &[String], agent: &str) -> Option<PathBuf> {
    let (first, rest) = words.split_first()?;
    let shape = match (agent, rest) {
        ("claude", [hook, alias]) => hook == "hook" && KONTEXT_CLAUDE_ALIASES.contains(&&**alias),
        ("codex", [hook, flag, name, alias]) => {
            hook == "hook"
                && flag == "--agent"
                && name == "codex"
                && KONTEXT_CODEX_ALIASES.contains(&&**alias)
        }
        _ => false,
    };
    let binary = PathBuf::from(first);
    (shape && binary.is_absolute() && binary.file_name().is_some_and(|n| n == "kontext"))
        .then_some(binary)
}

/// A JSON-with-comments document (OpenCode's `opencode.jsonc`) as plain JSON: `//` and
/// `/* */` comments and trailing commas removed, strings left alone.
pub(crate) fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
                out.push(' ');
            }
            (']' | '}', _) => {
                // A trailing comma before the closing bracket.
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.truncate(trimmed - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// An entry of OpenCode's plugin array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PluginSpec {
    /// An npm package: the spec as written (`name`, `name@1.2.0`, `@scope/name`), and the
    /// package name.
    Npm { spec: String, name: String },
    /// A local path (`./x`, `../x`, `/x`, `file:///x`, `~/x`), as written.
    Local(String),
}

/// Reads one plugin entry: a string, or an object with `package`. `Err` names why it is
/// not a spec Sandy can follow (an npm name with `..`, a URL of another kind).
pub(crate) fn plugin_spec(entry: &serde_json::Value) -> Result<PluginSpec, String> {
    let spec = entry
        .as_str()
        .or_else(|| entry.get("package").and_then(|p| p.as_str()))
        .or_else(|| {
            entry
                .as_array()
                .and_then(|a| a.first())
                .and_then(|p| p.as_str())
        })
        .ok_or("it is not a package name")?;
    if spec.starts_with("./")
        || spec.starts_with("../")
        || spec.starts_with('/')
        || spec.starts_with("~/")
        || spec.starts_with("file://")
    {
        return Ok(PluginSpec::Local(spec.to_owned()));
    }
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(scoped) => {
            let (scope, rest) = scoped.split_once('/').ok_or("it is not a package name")?;
            (Some(scope), rest)
        }
        None => (None, spec),
    };
    let bare = rest.split_once('@').map_or(rest, |(n, _)| n);
    let valid = |part: &str| {
        !part.is_empty()
            && !part.starts_with('.')
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
    };
    if !valid(bare) || scope.is_some_and(|s| !valid(s)) {
        return Err(format!(
            "'{spec}' is not an npm package name Sandy can follow"
        ));
    }
    let version = &rest[bare.len()..];
    if version.contains('/') || version.contains("..") {
        return Err(format!(
            "'{spec}' is not an npm package name Sandy can follow"
        ));
    }
    let name = match scope {
        Some(scope) => format!("@{scope}/{bare}"),
        None => bare.to_owned(),
    };
    Ok(PluginSpec::Npm {
        spec: spec.to_owned(),
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io;

    /// A fake filesystem: executable files, plain files.
    struct Fs(HashMap<PathBuf, bool>);

    impl PathInspector for Fs {
        fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
            if self.0.contains_key(path) {
                Ok(path.to_path_buf())
            } else {
                Err(io::Error::from(io::ErrorKind::NotFound))
            }
        }
        fn kind(&self, path: &Path) -> Option<FileKind> {
            self.0
                .get(path)
                .map(|&executable| FileKind::File { executable })
        }
        fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
            None
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            None
        }
        fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            Vec::new()
        }
        fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
            Vec::new()
        }
    }

    fn fs() -> Fs {
        Fs([
            ("/usr/bin/python3", true),
            ("/usr/bin/bash", true),
            ("/usr/bin/env", true),
            ("/h/.local/bin/numbat", true),
            ("/h/.config/x/hook.py", false),
            ("/p/.claude/hooks/check.sh", true),
        ]
        .into_iter()
        .map(|(p, x)| (PathBuf::from(p), x))
        .collect())
    }

    fn resolve(command: &str) -> Result<ResolvedHook, String> {
        let dirs = [PathBuf::from("/h/.local/bin"), PathBuf::from("/usr/bin")];
        let env = HookEnv {
            home: Some(Path::new("/h")),
            project: Path::new("/p"),
            path_dirs: &dirs,
        };
        resolve_hook(command, &env, &fs())
    }

    fn ok(executable: &str, script: Option<&str>) -> Result<ResolvedHook, String> {
        Ok(ResolvedHook {
            executable: PathBuf::from(executable),
            script: script.map(PathBuf::from),
        })
    }

    #[test]
    fn path_lookup_and_expansion() {
        assert_eq!(
            resolve("numbat hook --out x"),
            ok("/h/.local/bin/numbat", None)
        );
        assert_eq!(
            resolve("~/.local/bin/numbat"),
            ok("/h/.local/bin/numbat", None)
        );
        assert_eq!(
            resolve("\"$HOME\"/.local/bin/numbat"),
            ok("/h/.local/bin/numbat", None)
        );
        assert_eq!(
            resolve("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check.sh && echo"),
            ok("/p/.claude/hooks/check.sh", None)
        );
        assert_eq!(resolve("FOO=1 numbat"), ok("/h/.local/bin/numbat", None));
    }

    #[test]
    fn interpreter_and_script() {
        assert_eq!(
            resolve("python3 -u ~/.config/x/hook.py --flag"),
            ok("/usr/bin/python3", Some("/h/.config/x/hook.py"))
        );
        assert_eq!(
            resolve("/usr/bin/env python3 ${HOME}/.config/x/hook.py"),
            ok("/usr/bin/python3", Some("/h/.config/x/hook.py"))
        );
        assert_eq!(resolve("bash -c 'echo hi'"), ok("/usr/bin/bash", None));
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn numbat_registrations() {
        let home = Path::new("/h");
        let hook = parse_numbat(
            &words("/h/.local/bin/numbat hook pre-tool --agent claude --installed-by=numbat --output=file --output-file ~/.numbat/events.jsonl --rules-dir /h/rules"),
            "claude",
            home,
        )
        .unwrap();
        assert_eq!(hook.executable, PathBuf::from("/h/.local/bin/numbat"));
        assert_eq!(
            hook.output_file,
            Some(PathBuf::from("/h/.numbat/events.jsonl"))
        );
        assert_eq!(hook.state_database, PathBuf::from("/h/.numbat/state.db"));
        assert_eq!(hook.rule_directories, vec![PathBuf::from("/h/rules")]);
        // Wrong agent, relative binary, HTTP output, output without a file, unknown option,
        // a writable file inside the rules.
        for bad in [
            "/b/numbat hook pre-tool --agent codex --installed-by=numbat",
            "numbat hook pre-tool --agent claude --installed-by=numbat",
            "/b/numbat hook pre-tool --agent claude --installed-by=numbat --output=http",
            "/b/numbat hook pre-tool --agent claude --installed-by=numbat --output=file",
            "/b/numbat hook pre-tool --agent claude --installed-by=numbat --upload x",
            "/b/numbat hook pre-tool --agent claude --installed-by=numbat --rules-dir /h/r --state-db /h/r/s.db",
        ] {
            assert!(parse_numbat(&words(bad), "claude", home).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbat_opencode_plugin_words() {
        let body = "// numbat-managed plugin - do not edit\n\
            const NUMBAT_BIN = \"/h/bin/numbat\";\n\
            const EXTRA_ARGS = [\"--installed-by=numbat\", \"--output=file\", \"--output-file\", \"/h/o\"];\n\
            const child = spawn(NUMBAT_BIN, [\"hook\", lifecycle, \"--agent\", \"opencode\", ...EXTRA_ARGS], {\n";
        let words = numbat_opencode_plugin(body).unwrap().unwrap();
        let hook = parse_numbat(&words, "opencode", Path::new("/h")).unwrap();
        assert_eq!(hook.executable, PathBuf::from("/h/bin/numbat"));
        assert_eq!(hook.output_file, Some(PathBuf::from("/h/o")));
        assert!(numbat_opencode_plugin("export default {}").is_none());
        let tampered = body.replace("spawn(NUMBAT_BIN", "spawn(OTHER");
        assert!(numbat_opencode_plugin(&tampered).unwrap().is_err());
    }

    #[test]
    fn unresolvable_forms_are_errors() {
        assert!(resolve("missing-tool").is_err());
        assert!(resolve("python3 ~/.config/x/absent.py").is_err());
        assert!(resolve("$MY_TOOL run").is_err());
        assert!(resolve("$(which numbat)").is_err());
        assert!(resolve("~other/bin/x").is_err());
        assert!(resolve("\"unterminated").is_err());
    }

    #[test]
    fn kontext_is_recognised_only_in_the_shape_its_setup_writes() {
        let w = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let bin = Some(PathBuf::from("/usr/local/bin/kontext"));
        assert_eq!(
            kontext_binary(&w("/usr/local/bin/kontext hook pre-tool-use"), "claude"),
            bin
        );
        assert_eq!(
            kontext_binary(
                &w("/usr/local/bin/kontext hook --agent codex stop"),
                "codex"
            ),
            bin
        );
        // The other agent's shape, an unknown alias, extra words, a relative name, another
        // file name, another agent: ordinary hooks.
        for (cmd, agent) in [
            ("/usr/local/bin/kontext hook --agent codex stop", "claude"),
            ("/usr/local/bin/kontext hook pre-tool-use", "codex"),
            ("/usr/local/bin/kontext hook not-an-event", "claude"),
            ("/usr/local/bin/kontext hook pre-tool-use extra", "claude"),
            ("kontext hook pre-tool-use", "claude"),
            ("/usr/local/bin/kontext-x hook pre-tool-use", "claude"),
            ("/usr/local/bin/kontext hook pre-tool-use", "opencode"),
        ] {
            assert_eq!(kontext_binary(&w(cmd), agent), None, "{cmd} ({agent})");
        }
    }

    #[test]
    fn opencode_plugin_entries_are_read_as_npm_packages_or_local_paths() {
        let npm = |spec: &str, name: &str| PluginSpec::Npm {
            spec: spec.to_owned(),
            name: name.to_owned(),
        };
        let read = |v: serde_json::Value| plugin_spec(&v);
        assert_eq!(read(serde_json::json!("acme")), Ok(npm("acme", "acme")));
        assert_eq!(
            read(serde_json::json!("acme@1.2.0")),
            Ok(npm("acme@1.2.0", "acme"))
        );
        assert_eq!(
            read(serde_json::json!("@a/b@^2")),
            Ok(npm("@a/b@^2", "@a/b"))
        );
        assert_eq!(
            read(serde_json::json!({"package": "@a/b", "options": {}})),
            Ok(npm("@a/b", "@a/b"))
        );
        assert_eq!(
            read(serde_json::json!("./plugins/x")),
            Ok(PluginSpec::Local("./plugins/x".to_owned()))
        );
        for bad in [
            "..",
            "../../x@1",
            "@a/../b",
            "a@1/../../x",
            "@/x",
            ".hidden",
        ] {
            if let Ok(PluginSpec::Npm { .. }) = read(serde_json::json!(bad)) {
                panic!("{bad} read as a package");
            }
        }
        assert!(read(serde_json::json!(3)).is_err());
    }

    #[test]
    fn jsonc_comments_and_trailing_commas_are_removed_outside_strings() {
        let text = "{\n  // a comment\n  \"plugin\": [\"a//b\", /* x */ \"c\",],\n}";
        let v: serde_json::Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(v, serde_json::json!({"plugin": ["a//b", "c"]}));
    }
}
