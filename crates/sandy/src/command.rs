//! [`Command`]: a command to run in a sandbox, built like [`std::process::Command`].

use std::ffi::{OsStr, OsString};

use crate::error::SandyError;
use crate::policy::{DryRunFormat, Policy};

/// A command to run in a sandbox under a [`Policy`], built like
/// [`std::process::Command`]: the program, its arguments, then [`Command::status`] (or the
/// phases one by one, from [`Command::prepare`]).
///
/// The command runs in the calling process's working directory (the project), with its
/// environment less what the policy withholds, and with its standard input, output and
/// error (a terminal stays the command's terminal).
///
/// ```no_run
/// use sandy::{Command, Policy};
///
/// let status = Command::new("sh")
///     .args(["-c", "echo hello > note.txt"])
///     .policy(Policy::new().block_net())
///     .status()?;
/// println!("exited with {}", status.code());
/// # Ok::<(), sandy::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Command {
    argv: Vec<OsString>,
    policy: Policy,
}

impl Command {
    /// A command running `program` (found on `PATH` when it has no slash), under the
    /// default [`Policy`].
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            argv: vec![program.as_ref().to_os_string()],
            policy: Policy::default(),
        }
    }

    /// A command from a whole argument vector, the program first.
    ///
    /// # Errors
    ///
    /// An empty vector (a usage error).
    pub fn from_argv(argv: Vec<OsString>) -> Result<Command, SandyError> {
        if argv.is_empty() {
            return Err(SandyError::Usage("no command to run"));
        }
        Ok(Command {
            argv,
            policy: Policy::default(),
        })
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Command {
        self.argv.push(arg.as_ref().to_os_string());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.argv
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets the policy the command runs under.
    pub fn policy(&mut self, policy: Policy) -> &mut Command {
        self.policy = policy;
        self
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }

    /// Runs the command in its sandbox and waits for it: every phase, from
    /// [`Command::prepare`] to [`Exited::finish`](crate::Exited::finish).
    ///
    /// # Errors
    ///
    /// Anything that keeps the sandbox from being made exactly as the policy says: the
    /// command never runs then (fail closed). [`Error::exit_code`](crate::Error::exit_code)
    /// gives the status `sandy run` would exit with.
    pub fn status(&mut self) -> Result<ExitStatus, SandyError> {
        crate::run::run(self.argv.clone(), self.policy.clone(), None).map(ExitStatus)
    }

    /// The dry run: the policy resolved and checked against this kernel, as the document
    /// `sandy run --dry-run` prints; nothing is created or launched.
    ///
    /// # Errors
    ///
    /// As [`Command::status`] before its launch.
    pub fn dry_run(&mut self, format: DryRunFormat) -> Result<u8, SandyError> {
        crate::run::run(self.argv.clone(), self.policy.clone(), Some(format))
    }
}

/// How a sandboxed command ended, as a shell reports it: its exit status, or 128 + N when
/// signal N ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus(pub(crate) u8);

impl ExitStatus {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.0 == 0
    }

    /// The status: the command's own, or 128 + N when signal N ended it.
    pub fn code(&self) -> u8 {
        self.0
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {}", self.0)
    }
}
