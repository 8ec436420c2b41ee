//! The user's terminal around a run (design promise 4, native terminal behaviour): the
//! run shares it, and leaves it as it found it.
//!
//! Before the run the supervisor records the inherited terminal's settings (termios), its
//! line discipline, whether it is in exclusive mode, and which process group has it in
//! the foreground. After the run, each that differs is put back, and input that arrived
//! meanwhile (a terminal's replies to queries the run sent just before it ended, which
//! would otherwise land in the user's next prompt) is discarded.
//!
//! The window size is recorded by nobody: it is the terminal emulator's, which sets it
//! again on every resize, and a size recorded at launch would undo a resize the user made
//! during the run.
//!
//! The seccomp floor already refuses the ioctls that would change the line discipline or
//! set exclusive mode inside; this is the second line, and it also covers what the floor
//! allows (settings, the foreground process group).

use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{
    tcflush, tcgetattr, tcsetattr, FlushArg, LocalFlags, SetArg, SpecialCharacterIndices, Termios,
};
use nix::unistd::{getpgrp, isatty, tcgetpgrp, tcsetpgrp, Pid};

/// How long input may keep arriving after the run before it is the user's: a terminal
/// answers a query within a few milliseconds on this machine, tmux and SSH within tens.
const SETTLE: Duration = Duration::from_millis(25);
/// The most rounds of discarding input that keeps arriving.
const MAX_DRAINS: usize = 8;
/// How long the terminal may take to answer Sandy's status query (a round trip over SSH
/// included).
const FENCE_WAIT: Duration = Duration::from_millis(300);

/// What the terminal was before the run.
pub struct Terminal {
    fd: RawFd,
    termios: Option<Termios>,
    line_discipline: Option<i32>,
    exclusive: Option<bool>,
    foreground: Option<Pid>,
}

/// Whether Sandy has a controlling terminal, through which a shell could continue it
/// after a stop (job control).
#[allow(clippy::disallowed_methods)] // `/dev/tty` is a device no run can replace
pub fn controlling_terminal() -> bool {
    // The fixed name of one's controlling terminal; the open fails with ENXIO when there
    // is none.
    nix::fcntl::open(
        "/dev/tty",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .is_ok()
}

impl Terminal {
    /// The state of the first of standard input, output and error that is a terminal;
    /// `None` when none is.
    pub fn record() -> Option<Terminal> {
        let fd = [0, 1, 2]
            .into_iter()
            .find(|&fd| with_fd(fd, |t| isatty(t).unwrap_or(false)))?;
        Some(with_fd(fd, |t| Terminal {
            fd,
            termios: tcgetattr(t).ok(),
            line_discipline: sandy_linux::sys::terminal::line_discipline(t).ok(),
            exclusive: sandy_linux::sys::terminal::exclusive(t).ok(),
            foreground: tcgetpgrp(t).ok(),
        }))
    }

    /// Puts back what the run changed. Only while Sandy's own process group has the
    /// terminal in the foreground (or had it at launch and the run took it): a terminal
    /// the user has since given to another job is left alone.
    pub fn restore(&self) {
        with_fd(self.fd, |t| self.restore_on(t));
    }

    fn restore_on(&self, t: BorrowedFd<'_>) {
        let own = getpgrp();
        // Changing the terminal from a background process group raises SIGTTOU; blocked,
        // the change is made.
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut old = SigSet::empty();
        if nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_BLOCK,
            Some(&ttou),
            Some(&mut old),
        )
        .is_err()
        {
            return;
        }
        let now = tcgetpgrp(t).ok();
        if self.foreground == Some(own) && now != Some(own) {
            // The run put another of its process groups in the foreground and ended.
            let alive = now.is_some_and(|pgrp| nix::sys::signal::killpg(pgrp, None).is_ok());
            if !alive {
                let _ = tcsetpgrp(t, own);
            }
        }
        if tcgetpgrp(t).ok() == Some(own) {
            if let Some(ldisc) = self.line_discipline {
                if sandy_linux::sys::terminal::line_discipline(t).is_ok_and(|now| now != ldisc) {
                    let _ = sandy_linux::sys::terminal::set_line_discipline(t, ldisc);
                }
            }
            if self.exclusive == Some(false)
                && sandy_linux::sys::terminal::exclusive(t).unwrap_or(false)
            {
                let _ = sandy_linux::sys::terminal::clear_exclusive(t);
            }
            // The settings go back at the end of the discard.
            self.discard_input(t);
        }
        if !old.contains(Signal::SIGTTOU) {
            let _ = ttou.thread_unblock();
        }
    }

    /// Discards what arrived on the terminal after the run: everything up to the answer
    /// to a status query of Sandy's own (`ESC [ 5 n`, answered `ESC [ 0 n`), which a
    /// terminal sends after its answers to every query the run sent before it. Without an
    /// answer within [`FENCE_WAIT`] (or on a terminal that takes no escape sequences,
    /// `TERM=dumb`), what arrives within [`SETTLE`] is discarded.
    fn discard_input(&self, t: BorrowedFd<'_>) {
        let _ = tcflush(t, FlushArg::TCIFLUSH);
        let dumb = std::env::var_os("TERM").is_none_or(|term| term.is_empty() || term == "dumb");
        let fenced = !dumb && self.fence(t);
        if !fenced {
            for _ in 0..MAX_DRAINS {
                let mut fds = [PollFd::new(t, PollFlags::POLLIN)];
                let timeout = PollTimeout::try_from(SETTLE).unwrap_or(PollTimeout::ZERO);
                match poll(&mut fds, timeout) {
                    Ok(n) if n > 0 => {
                        let _ = tcflush(t, FlushArg::TCIFLUSH);
                    }
                    _ => break,
                }
            }
        }
        let _ = tcflush(t, FlushArg::TCIFLUSH);
        if let Some(saved) = &self.termios {
            let _ = tcsetattr(t, SetArg::TCSANOW, saved);
        }
    }

    /// Sends the status query and reads (without echo, byte by byte as it comes) until
    /// its answer; whether the answer came.
    fn fence(&self, t: BorrowedFd<'_>) -> bool {
        let Some(mut quiet) = self.termios.clone() else {
            return false;
        };
        quiet.local_flags &= !(LocalFlags::ICANON | LocalFlags::ECHO);
        quiet.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
        quiet.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        if tcsetattr(t, SetArg::TCSANOW, &quiet).is_err()
            || nix::unistd::write(t, b"\x1b[5n").is_err()
        {
            return false;
        }
        let deadline = std::time::Instant::now() + FENCE_WAIT;
        let mut seen: Vec<u8> = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut fds = [PollFd::new(t, PollFlags::POLLIN)];
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO);
            match poll(&mut fds, timeout) {
                Ok(n) if n > 0 => {}
                _ => return false,
            }
            match nix::unistd::read(t, &mut buf) {
                Ok(n) if n > 0 => {
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\x1b[0n" || w == b"\x1b[3n") {
                        return true;
                    }
                    // Only the end matters: an answer may be split across reads.
                    if seen.len() > 64 {
                        seen.drain(..seen.len() - 8);
                    }
                }
                _ => return false,
            }
        }
    }
}

/// Runs `f` on standard input (0), output (1) or error (2), which stay open for the life
/// of the process.
fn with_fd<R>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    match fd {
        0 => f(std::io::stdin().as_fd()),
        1 => f(std::io::stdout().as_fd()),
        _ => f(std::io::stderr().as_fd()),
    }
}
