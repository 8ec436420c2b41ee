//! Sandy's output: the one place a line reaches the user's terminal (design promise 6).
//!
//! Much of what Sandy reports names something a sandboxed run chose: a file it created,
//! a host it asked for, a key it wrote, a program it ran. Every line goes through here and
//! is escaped whole ([`sandy_policy::text::escape`]), so that no byte of a run's choosing
//! reaches the terminal as a control: a newline in a file name cannot start a forged
//! `sandy:` line, an escape sequence cannot erase a real warning or set the clipboard.
//! The crate denies `eprintln!`, `println!` and their kin everywhere else.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use sandy_policy::text::{escape, escape_lines};

/// `sandy: ` and the formatted line, escaped, on standard error.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::stderr(::std::format_args!($($arg)*))
    };
}

/// A routine line of a run's report, one that needs nothing of the user (the detected
/// profile, what the network was allowed, ...): printed whole with `sandy run -v`;
/// otherwise only its short form (the first argument) is kept, for the one line
/// [`fold`] prints after the run. A line that asks for a decision or reports a
/// refusal or a protection goes through [`say!`] instead, always.
#[macro_export]
macro_rules! tell {
    ($short:expr, $($arg:tt)*) => {
        $crate::say::routine($short, ::std::format_args!($($arg)*))
    };
}

/// `sandy run -v`: every routine line printed whole.
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// The short forms of the routine lines not printed yet.
static FOLDED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Prints routine lines whole from now on (`-v`, and the dry run, which has no run to
/// fold them after). A new launch: what an earlier one that failed kept for its fold is
/// dropped (a library caller may launch again in the same process).
pub fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
    FOLDED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

/// Prints a routine line, or keeps its short form for [`fold`] (use [`tell!`]).
pub fn routine(short: impl Into<String>, line: std::fmt::Arguments<'_>) {
    if VERBOSE.load(Ordering::Relaxed) {
        stderr(line);
    } else {
        let short = short.into();
        let mut folded = FOLDED.lock().unwrap_or_else(PoisonError::into_inner);
        if !folded.contains(&short) {
            folded.push(short);
        }
    }
}

/// After a run: the short forms of its routine lines, in one line (nothing when there
/// were none).
pub fn fold() {
    let folded = std::mem::take(&mut *FOLDED.lock().unwrap_or_else(PoisonError::into_inner));
    if !folded.is_empty() {
        stderr(format_args!("{}. Details: sandy run -v", folded.join("; ")));
    }
}

/// Writes `sandy: LINE` to standard error in one write, every control in it escaped
/// (use [`say!`]).
#[allow(clippy::disallowed_methods)] // the one writer of standard error
pub fn stderr(line: std::fmt::Arguments<'_>) {
    let text = line.to_string();
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("sandy: ");
    out.push_str(&escape(&text));
    out.push('\n');
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// Writes `text` and a newline to standard output, flushed, every control in it escaped:
/// one line of a report.
pub fn print_line(text: &str) -> std::io::Result<()> {
    write_out(&escape(text))
}

/// Writes a document of several lines that Sandy made (a report, the dry run's text
/// form): its line breaks stay, every other control is escaped.
pub fn print_document(text: &str) -> std::io::Result<()> {
    write_out(&escape_lines(text))
}

/// Writes a document made entirely from Sandy's own definitions, with nothing of a run's
/// choosing in it (a shell completion script, the manual page), byte for byte: its tabs
/// and escapes are its content.
#[allow(clippy::disallowed_methods)] // the one writer of standard output
pub fn print_generated(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

#[allow(clippy::disallowed_methods)] // the one writer of standard output
fn write_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}
