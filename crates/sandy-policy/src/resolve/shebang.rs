//! `#!` lines, read the way the kernel and `env` read them, to find the interpreters a
//! command needs. A `#!` line is content the sandbox may have written (a script in the
//! project), so it can only ever name executables: what `env` options mention (`-u NAME`,
//! `-C DIR`, a `PATH=` assignment) is never taken for an interpreter.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::host::inspect::{FileKind, PathInspector};

/// The kernel reads this many bytes for a `#!` line (`BINPRM_BUF_SIZE`).
const KERNEL_LINE_MAX: usize = 256;
/// The kernel follows this many nested interpreters (`BINPRM_MAX_RECURSION`).
const MAX_NESTING: usize = 4;

/// The interpreters `program` needs, outermost first: the `#!` interpreter, and for
/// `env`, the command `env` would run (found on the caller's `PATH`), then theirs in
/// turn. Each one is an existing executable regular file.
pub(super) fn interpreters(
    program: &Path,
    path_dirs: &[PathBuf],
    fs: &dyn PathInspector,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut current = program.to_path_buf();
    for _ in 0..MAX_NESTING {
        let Some(head) = fs.read_head(&current, KERNEL_LINE_MAX) else {
            break;
        };
        let Some(line) = parse(&head) else {
            break;
        };
        let mut next = None;
        if is_executable(&line.interpreter, fs) {
            out.push(line.interpreter.clone());
            next = Some(line.interpreter.clone());
        }
        if line.interpreter.file_name() == Some(OsStr::new("env")) {
            if let Some(command) = env_command(line.argument.as_deref(), path_dirs, fs) {
                out.push(command.clone());
                next = Some(command);
            }
        }
        match next {
            Some(n) if !out[..out.len() - 1].contains(&n) => current = n,
            _ => break,
        }
    }
    out
}

/// A `#!` line as the kernel splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Line {
    pub interpreter: PathBuf,
    /// Everything after the interpreter, one argument, trimmed of blanks.
    pub argument: Option<Vec<u8>>,
}

/// Splits the first line of `head` like `fs/binfmt_script.c`: blanks (space, tab) after
/// `#!` are skipped, the interpreter runs to the next blank, and the rest of the line,
/// trimmed, is a single argument. An interpreter the 256-byte buffer cuts off is refused
/// (the kernel answers ENOEXEC); a relative one is not resolved (it would be looked up in
/// the working directory, which is the project).
pub(super) fn parse(head: &[u8]) -> Option<Line> {
    let head = &head[..head.len().min(KERNEL_LINE_MAX)];
    let rest = head.strip_prefix(b"#!")?;
    let end = rest
        .iter()
        .position(|&b| b == b'\n' || b == 0)
        .unwrap_or(rest.len());
    let truncated = end == rest.len() && head.len() == KERNEL_LINE_MAX;
    let line = &rest[..end];
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = line.iter().position(|b| !blank(b))?;
    let line = &line[start..];
    let interp_end = line.iter().position(blank).unwrap_or(line.len());
    if truncated && interp_end == line.len() {
        return None;
    }
    let interpreter = &line[..interp_end];
    if !interpreter.starts_with(b"/") {
        return None;
    }
    let argument = &line[interp_end..];
    let a_start = argument
        .iter()
        .position(|b| !blank(b))
        .unwrap_or(argument.len());
    let a_end = argument
        .iter()
        .rposition(|b| !blank(b))
        .map_or(a_start, |i| i + 1);
    let argument = &argument[a_start..a_end.max(a_start)];
    Some(Line {
        interpreter: PathBuf::from(OsStr::from_bytes(interpreter)),
        argument: (!argument.is_empty()).then(|| argument.to_vec()),
    })
}

/// The command GNU `env` would execute when its only argument (before the script's own
/// path) is `argument`, resolved on the caller's `PATH`; `None` when `env` would run
/// nothing, when the name could only be resolved with what the line itself sets up
/// (`-C DIR`, `-i`, a `PATH=` assignment, a `${VAR}` expansion), or when it is not an
/// executable regular file.
pub(super) fn env_command(
    argument: Option<&[u8]>,
    path_dirs: &[PathBuf],
    fs: &dyn PathInspector,
) -> Option<PathBuf> {
    let argument = argument?;
    // Without -S, the kernel's single argument reaches env as one word: either an option
    // cluster (env then runs nothing from the line) or the command name itself, spaces
    // and all.
    let words: Vec<Vec<u8>> = if let Some(split) = split_string_option(argument) {
        split_words(split)?
    } else if argument.starts_with(b"-") {
        return None;
    } else {
        vec![argument.to_vec()]
    };
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        match w.as_slice() {
            b"--" => {
                i += 1;
                break;
            }
            // Options whose value is the next word.
            b"-u" | b"--unset" | b"-a" | b"--argv0" => i += 2,
            // Options that change where or how the command is found: nothing is granted.
            b"--chdir" | b"--ignore-environment" | b"-" => return None,
            _ if w.starts_with(b"--chdir=") => return None,
            _ if w.starts_with(b"--") => i += 1,
            _ if w.starts_with(b"-") => {
                // A cluster of short options, read like getopt: flags (-v, -0), an
                // option taking a value (-u, -a) with the value attached or as the next
                // word, and -i or -C, which change how the command is found.
                let mut consumed = 1;
                for (k, c) in w.iter().enumerate().skip(1) {
                    match c {
                        b'i' | b'C' => return None,
                        b'u' | b'a' => {
                            if k + 1 == w.len() {
                                consumed = 2;
                            }
                            break;
                        }
                        _ => {}
                    }
                }
                i += consumed;
            }
            _ if w.contains(&b'=') => {
                if w.starts_with(b"PATH=") {
                    return None;
                }
                i += 1;
            }
            _ => break,
        }
    }
    let name = words.get(i)?;
    if name.is_empty() || name.windows(2).any(|p| p == b"${") {
        return None;
    }
    let name = Path::new(OsStr::from_bytes(name));
    if name.is_absolute() {
        return is_executable(name, fs).then(|| name.to_path_buf());
    }
    if name.as_os_str().as_bytes().contains(&b'/') {
        return None;
    }
    path_dirs
        .iter()
        .map(|d| d.join(name))
        .find(|c| is_executable(c, fs))
}

/// The string of an `-S`/`--split-string` option at the start of env's argument (GNU
/// env accepts flags before it in the same cluster, such as `-vS`).
fn split_string_option(argument: &[u8]) -> Option<&[u8]> {
    if let Some(rest) = argument.strip_prefix(b"--split-string") {
        return Some(rest.strip_prefix(b"=").unwrap_or(rest));
    }
    let cluster = argument.strip_prefix(b"-")?;
    if cluster.starts_with(b"-") {
        return None;
    }
    let s = cluster.iter().position(|&b| b == b'S')?;
    // Only value-less flags may come before S in the cluster.
    if cluster[..s].iter().all(|b| matches!(b, b'v' | b'0')) {
        Some(&cluster[s + 1..])
    } else {
        None
    }
}

/// Splits an `env -S` string: blanks separate words, single quotes are literal, double
/// quotes allow backslash escapes, `#` at the start of a word ends the string, `\c` ends
/// it too. `None` for an unterminated quote (env refuses to run).
fn split_words(s: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut words = Vec::new();
    let mut word: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            b'#' if word.is_none() => break,
            b'\'' => {
                let close = s[i + 1..].iter().position(|&c| c == b'\'')? + i + 1;
                word.get_or_insert_with(Vec::new)
                    .extend_from_slice(&s[i + 1..close]);
                i = close;
            }
            b'"' => {
                let w = word.get_or_insert_with(Vec::new);
                i += 1;
                loop {
                    match s.get(i)? {
                        b'"' => break,
                        b'\\' => {
                            i += 1;
                            w.push(*s.get(i)?);
                        }
                        c => w.push(*c),
                    }
                    i += 1;
                }
            }
            b'\\' => {
                i += 1;
                match s.get(i) {
                    Some(b'c') => break,
                    Some(b'_') => word.get_or_insert_with(Vec::new).push(b' '),
                    Some(b'n') => word.get_or_insert_with(Vec::new).push(b'\n'),
                    Some(b't') => word.get_or_insert_with(Vec::new).push(b'\t'),
                    Some(c) => word.get_or_insert_with(Vec::new).push(*c),
                    None => return None,
                }
            }
            c => word.get_or_insert_with(Vec::new).push(c),
        }
        i += 1;
    }
    if let Some(w) = word {
        words.push(w);
    }
    Some(words)
}

fn is_executable(path: &Path, fs: &dyn PathInspector) -> bool {
    matches!(fs.kind(path), Some(FileKind::File { executable: true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(interp: &str, arg: Option<&str>) -> Option<Line> {
        Some(Line {
            interpreter: interp.into(),
            argument: arg.map(|a| a.as_bytes().to_vec()),
        })
    }

    #[test]
    fn lines_split_like_the_kernel() {
        assert_eq!(parse(b"#!/bin/sh\necho"), line("/bin/sh", None));
        assert_eq!(
            parse(b"#! \t/usr/bin/env -S node --x \t\n"),
            line("/usr/bin/env", Some("-S node --x"))
        );
        assert_eq!(
            parse(b"#!/usr/bin/python3 -u -O\n"),
            line("/usr/bin/python3", Some("-u -O"))
        );
        assert_eq!(parse(b"#!relative\n"), None);
        assert_eq!(parse(b"#!\n"), None);
        assert_eq!(parse(b"\x7fELF"), None);
        // An interpreter cut off by the kernel's buffer is refused; a cut argument is not.
        let mut long = b"#!/".to_vec();
        long.extend(std::iter::repeat_n(b'a', 300));
        assert_eq!(parse(&long), None);
        let mut long_arg = b"#!/bin/sh ".to_vec();
        long_arg.extend(std::iter::repeat_n(b'a', 300));
        assert_eq!(
            parse(&long_arg).map(|l| l.argument.map(|a| a.len())),
            Some(Some(256 - 10))
        );
    }

    #[test]
    fn env_splits_and_skips_its_options() {
        let split = |s: &str| {
            split_words(s.as_bytes()).map(|v| {
                v.into_iter()
                    .map(|w| String::from_utf8(w).unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            split("-u /p/secret.env bash 'a b' \"c\\\"d\" e\\_f # comment"),
            Some(
                ["-u", "/p/secret.env", "bash", "a b", "c\"d", "e f"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(split("'open"), None);
        assert_eq!(split_string_option(b"-S node"), Some(&b" node"[..]));
        assert_eq!(split_string_option(b"-vS node"), Some(&b" node"[..]));
        assert_eq!(
            split_string_option(b"--split-string=node"),
            Some(&b"node"[..])
        );
        assert_eq!(split_string_option(b"-uS node"), None);
        assert_eq!(split_string_option(b"node"), None);
    }

    #[test]
    fn env_never_takes_an_option_value_for_the_command() {
        struct Fs;
        impl PathInspector for Fs {
            fn canonicalize(&self, p: &Path) -> std::io::Result<PathBuf> {
                Ok(p.to_path_buf())
            }
            fn kind(&self, p: &Path) -> Option<FileKind> {
                match p.to_str()? {
                    "/usr/bin/bash" | "/other/tool" => Some(FileKind::File { executable: true }),
                    "/other/secret.env" => Some(FileKind::File { executable: false }),
                    "/other" => Some(FileKind::Directory),
                    _ => None,
                }
            }
            fn read_head(&self, _: &Path, _: usize) -> Option<Vec<u8>> {
                None
            }
            fn read_link(&self, _: &Path) -> Option<PathBuf> {
                None
            }
            fn subdirs(&self, _: &Path, _: usize) -> Vec<PathBuf> {
                vec![]
            }
            fn symlinks_in(&self, _: &Path, _: usize) -> Vec<PathBuf> {
                vec![]
            }
        }
        let path = [PathBuf::from("/usr/bin")];
        let cmd = |arg: &str| env_command(Some(arg.as_bytes()), &path, &Fs);
        let bash = Some(PathBuf::from("/usr/bin/bash"));
        assert_eq!(cmd("bash"), bash);
        assert_eq!(cmd("-S -u /other/secret.env bash"), bash);
        assert_eq!(cmd("-S -u/other/secret.env bash"), bash);
        assert_eq!(cmd("-S --unset=X -v FOO=1 bash -x"), bash);
        assert_eq!(cmd("-S -vu /other/tool bash"), bash);
        // What options set up is never used to find (or grant) anything.
        assert_eq!(cmd("-S -C /other tool"), None);
        assert_eq!(cmd("-S -vC /other tool"), None);
        assert_eq!(cmd("-S -i bash"), None);
        assert_eq!(cmd("-S PATH=/other tool"), None);
        assert_eq!(cmd("-S ${DIR}/tool"), None);
        // Only an executable regular file.
        assert_eq!(cmd("/other/secret.env"), None);
        assert_eq!(cmd("/other"), None);
        assert_eq!(cmd("/other/tool"), Some(PathBuf::from("/other/tool")));
        // Without -S the argument is one word: an option cluster runs nothing.
        assert_eq!(cmd("-u /other/secret.env bash"), None);
        assert_eq!(cmd("bash -x"), None);
    }
}
