//! Text that came from inside a sandbox, made safe to print (design promise 6).
//!
//! A run chooses the bytes of every name it creates, every host name it asks the proxy
//! for and everything it prints. When Sandy repeats such bytes on the user's terminal, a
//! newline, a carriage return or an escape sequence in them would be the run's, not
//! Sandy's: a forged `sandy:` line, a real warning erased, the clipboard set (OSC 52), the
//! window title changed. Everything Sandy prints therefore goes through [`escape`] (its
//! output sink applies it to every line), and names of files go through [`Shown`], which
//! also keeps bytes that are not UTF-8 visible.
//!
//! Escaped are: the C0 controls and DEL (`\n`, `\r`, `\t`, `\e` as such, the rest as
//! `\xNN`), the C1 controls (`\u{9b}`: an 8-bit CSI on some terminals), the Unicode line and
//! paragraph separators, and the bidirectional formatting characters that make a name
//! read differently from what it is (`\u{202e}`). Backslashes are kept as they are: the
//! escaped text is for a person to read, and the escapes above cannot be typed into it
//! by a run (a run that writes `\e` gets a backslash and an `e`, which nothing
//! interprets).

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::path::Path;

/// Whether `c` is escaped by [`escape`].
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every control and bidirectional formatting character written as an
/// escape (see the module's documentation); borrowed when there is none.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_char(&mut out, c);
    }
    Cow::Owned(out)
}

/// [`escape`], but for every line of `text` on its own: its line breaks stay (a
/// document of several lines that Sandy itself made), every other control is escaped.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && needs_escape(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape(line));
    }
    Cow::Owned(out)
}

fn push_char(out: &mut String, c: char) {
    if !needs_escape(c) {
        out.push(c);
        return;
    }
    let _ = match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        '\u{1b}' => out.write_str("\\e"),
        c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    };
}

/// Bytes (a file name, a host name as it came off the wire) for a person to read: valid
/// UTF-8 as text with [`escape`] applied, every other byte as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => escape(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                for c in chunk.valid().chars() {
                    push_char(&mut out, c);
                }
                for b in chunk.invalid() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
            Cow::Owned(out)
        }
    }
}

/// A path shown to a person: [`escape_bytes`] of its bytes.
///
/// ```
/// use sandy_policy::text::Shown;
/// let name = std::path::Path::new("a\nsandy: all clear\x1b[2K");
/// assert_eq!(Shown(name).to_string(), "a\\nsandy: all clear\\e[2K");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a Path);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::unix::ffi::OsStrExt;
        f.write_str(&escape_bytes(self.0.as_os_str().as_bytes()))
    }
}

/// The home directory [`Tilde`] shows as `~` (as given, and its canonical form), set by
/// the program that prints (this crate never reads the environment).
static HOME: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Adds a name of the home directory [`Tilde`] shows as `~` (the `HOME` given, its
/// canonical form).
pub fn set_home(home: &Path) {
    if !home.is_absolute() || home == Path::new("/") {
        return;
    }
    if let Ok(mut homes) = HOME.lock() {
        if !homes.iter().any(|h| h == home) {
            homes.push(home.to_path_buf());
        }
    }
}

/// A path shown to a person as [`Shown`] does, with the home directory (see [`set_home`])
/// written `~`: `~/.local/share/opencode`.
///
/// ```
/// use sandy_policy::text::{set_home, Tilde};
/// use std::path::Path;
/// set_home(Path::new("/home/ana"));
/// assert_eq!(Tilde(Path::new("/home/ana/.local")).to_string(), "~/.local");
/// assert_eq!(Tilde(Path::new("/home/ana")).to_string(), "~");
/// assert_eq!(Tilde(Path::new("/home/anastasia")).to_string(), "/home/anastasia");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Tilde<'a>(pub &'a Path);

impl fmt::Display for Tilde<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rest = HOME.lock().ok().and_then(|homes| {
            homes
                .iter()
                .find_map(|h| self.0.strip_prefix(h).ok().map(Path::to_path_buf))
        });
        match rest {
            Some(rest) if rest.as_os_str().is_empty() => f.write_str("~"),
            Some(rest) => write!(f, "~/{}", Shown(&rest)),
            None => Shown(self.0).fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_and_unchanged() {
        for text in [
            "",
            "sandy: network: allowed api.example:443",
            "naïve ∑ 東京 \\e",
        ] {
            assert!(
                matches!(escape(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }

    #[test]
    fn every_control_and_reordering_character_is_escaped() {
        let cases = [
            ("a\nb", "a\\nb"),
            ("a\rb", "a\\rb"),
            ("\t", "\\t"),
            ("\x1b]52;c;aGk=\x07", "\\e]52;c;aGk=\\x07"),
            ("\x1b[2K\x1b[1A", "\\e[2K\\e[1A"),
            ("\0\x7f", "\\x00\\x7f"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("evil\u{202e}txt.exe", "evil\\u{202e}txt.exe"),
            ("a\u{2028}b\u{2029}", "a\\u{2028}b\\u{2029}"),
            ("\u{2066}x\u{2069}", "\\u{2066}x\\u{2069}"),
        ];
        for (raw, shown) in cases {
            assert_eq!(escape(raw), shown, "{raw:?}");
            assert!(!escape(raw).chars().any(needs_escape));
        }
        // Every C0, DEL and C1 code point.
        for n in (0u32..0x20).chain(0x7f..0xa0) {
            let c = char::from_u32(n).unwrap();
            let s = c.to_string();
            assert!(!escape(&s).chars().any(|c| c.is_control()), "{n:#x}");
        }
    }

    #[test]
    fn lines_keep_their_breaks_and_lose_everything_else() {
        assert_eq!(escape_lines("a\nb\x1b[2J\r\nc"), "a\nb\\e[2J\\r\nc");
        assert!(matches!(escape_lines("a\nb\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn bytes_that_are_not_utf8_stay_visible() {
        assert_eq!(escape_bytes(b"ok"), "ok");
        assert_eq!(escape_bytes(b"\xff\n\xc3\xa9\x1b"), "\\xff\\n\u{e9}\\e");
        assert_eq!(
            Shown(Path::new("/p/\x1b[31mred")).to_string(),
            "/p/\\e[31mred"
        );
    }
}
