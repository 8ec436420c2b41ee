//! [`Command`]: a command to run in a sandbox, built like [`std::process::Command`].

use std::ffi::{OsStr, OsString};

use crate::error::SandyError;
use crate::policy::{DryRunFormat, Policy};

/// A command to run in a sandbox under a [`Policy`], built like
/// [`std::process::Command`]: the program, its arguments, then [`Command::status`] (or the
/// phases one by one: [`Command::prepare`], [`Prepared::spawn`], [`Running::wait`],
/// [`Exited::verify`], [`Verified::report`]).
///
/// The command runs in the calling process's working directory (the project; another
/// with [`Command::current_dir`]), with its environment less what the policy withholds,
/// and with its standard input, output and error (a terminal stays the command's
/// terminal).
///
/// ```
/// use sandy::{Command, ExplainMode, Policy};
///
/// // `false` exits with 1, and so does its sandboxed run. The network is blocked.
/// let status = Command::new("false")
///     .policy(Policy::new().block_net().explain(ExplainMode::Off))
///     .status()?;
/// assert_eq!(status.code(), 1);
/// # Ok::<(), sandy::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Command {
    argv: Vec<OsString>,
    policy: Policy,
    cwd: Option<std::path::PathBuf>,
}

impl Command {
    /// A command running `program` (found on `PATH` when it has no slash), under the
    /// default [`Policy`].
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            argv: vec![program.as_ref().to_os_string()],
            policy: Policy::default(),
            cwd: None,
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
            cwd: None,
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

    /// Runs the command in `dir` instead of the caller's working directory: `dir` is then
    /// the project (writable under the default policy), and the policy's relative paths
    /// are taken from it.
    pub fn current_dir(&mut self, dir: impl Into<std::path::PathBuf>) -> &mut Command {
        self.cwd = Some(dir.into());
        self
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }

    /// Resolves the policy against the host and prepares the launch: the first phase.
    /// The bootstrap is forked and makes the sandbox's namespaces; the state of what is
    /// protected is recorded; nothing of the command runs yet.
    ///
    /// # Errors
    ///
    /// Anything that keeps the sandbox from being made exactly as the policy says (a
    /// missing grant, a refused policy file, a ceiling nothing here holds, a kernel
    /// without Landlock, a caller with several threads): nothing is left behind.
    pub fn prepare(&self) -> Result<Prepared, SandyError> {
        show_home();
        match crate::run::begin(
            self.argv.clone(),
            self.policy.clone(),
            None,
            self.cwd.as_deref(),
        )? {
            crate::run::Begun::Launch(inner) => Ok(Prepared { inner }),
            crate::run::Begun::Document(_) => {
                Err(SandyError::Usage("a launch was prepared as a dry run"))
            }
        }
    }

    /// Runs the command in its sandbox and waits for it: every phase, from
    /// [`Command::prepare`] to [`Exited::finish`].
    ///
    /// # Errors
    ///
    /// Anything that keeps the sandbox from being made exactly as the policy says: the
    /// command never runs then (fail closed). [`Error::exit_code`](crate::Error::exit_code)
    /// gives the status `sandy run` would exit with.
    pub fn status(&mut self) -> Result<ExitStatus, SandyError> {
        self.prepare()?.spawn().wait().finish()
    }

    /// The dry run: the policy resolved and checked against this kernel, as the document
    /// `sandy run --dry-run` prints (JSON, `schemas/dry-run.v*.json`, or the text
    /// summary); nothing is created or launched.
    ///
    /// # Errors
    ///
    /// As [`Command::prepare`].
    pub fn dry_run(&self, format: DryRunFormat) -> Result<String, SandyError> {
        show_home();
        match crate::run::begin(
            self.argv.clone(),
            self.policy.clone(),
            Some(format),
            self.cwd.as_deref(),
        )? {
            crate::run::Begun::Document(document) => Ok(document),
            crate::run::Begun::Launch(_) => {
                Err(SandyError::Usage("a dry run was prepared as a launch"))
            }
        }
    }
}

/// Paths under the home are shown as `~/...` in what Sandy prints.
fn show_home() {
    if let Some(home) = std::env::var_os("HOME") {
        sandy_policy::text::set_home(std::path::Path::new(&home));
    }
}

/// A launch prepared and not started ([`Command::prepare`]): the policy is resolved and
/// can be looked at. Dropped without [`Prepared::spawn`], it undoes what it made (the
/// bootstrap, the run's cgroup, private directory and placeholders).
///
/// ```
/// use sandy::{Command, ExplainMode, Policy};
///
/// let prepared = Command::new("true")
///     .policy(Policy::new().explain(ExplainMode::Off))
///     .prepare()?;
/// // The resolved policy, before anything runs: the dry run's document.
/// let document = prepared.document()?;
/// assert_eq!(document["profile"]["name"], "generic");
/// let verified = prepared.spawn().wait().verify();
/// assert_eq!(verified.changed_run(), None);
/// assert!(verified.report()?.success());
/// # Ok::<(), sandy::Error>(())
/// ```
pub struct Prepared {
    inner: Box<crate::run::Preparation>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("profile", &self.inner.policy().profile.name)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// The resolved policy, as the dry run's versioned JSON document.
    ///
    /// # Errors
    ///
    /// The document cannot be rendered (it always can for a resolved policy).
    pub fn document(&self) -> Result<serde_json::Value, SandyError> {
        serde_json::to_value(self.inner.document()).map_err(|e| SandyError::Io {
            step: "cannot render the policy document",
            source: e.into(),
        })
    }

    /// The name of the agent profile the launch uses.
    pub fn profile(&self) -> &str {
        &self.inner.policy().profile.name
    }

    /// Starts the sandbox and the command: the second phase. A failure to start is kept
    /// and returned by [`Exited::finish`], after the clean-up, so that nothing is left
    /// half-done.
    pub fn spawn(self) -> Running {
        Running {
            inner: Some(self.inner.spawn()),
        }
    }
}

/// A sandboxed command started ([`Prepared::spawn`]). Dropped without
/// [`Running::wait`], the run is killed (every process of it), waited for and finished:
/// the checks after the run and the clean-up happen either way.
pub struct Running {
    inner: Option<crate::run::Launched>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut inner) = self.inner.take() {
            inner.kill();
            inner.wait();
            let _ = inner.finish();
        }
    }
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("pid", &self.id())
            .finish_non_exhaustive()
    }
}

impl Running {
    /// The command's process id, as the caller sees it; `None` when it did not start.
    pub fn id(&self) -> Option<u32> {
        self.inner.as_ref().and_then(crate::run::Launched::target)
    }

    /// Whether starting the command failed (the reason comes from [`Exited::finish`]).
    pub fn failed(&self) -> bool {
        self.inner.as_ref().is_none_or(crate::run::Launched::failed)
    }

    /// Kills the command and every process of its run (SIGKILL); [`Running::wait`] then
    /// returns at once.
    pub fn kill(&mut self) {
        if let Some(inner) = self.inner.as_mut() {
            inner.kill();
        }
    }

    /// Waits for the command to end, forwarding the signals the caller receives
    /// (SIGTERM, SIGHUP, SIGUSR1, SIGUSR2) and following its stops; then ends every
    /// process of the run that is left: the third phase.
    pub fn wait(mut self) -> Exited {
        let inner = self.inner.take().map(|mut inner| {
            inner.wait();
            inner
        });
        Exited { inner }
    }
}

/// A sandboxed run that is over ([`Running::wait`]): every process of it has ended.
/// Dropped without [`Exited::finish`], it is finished all the same (its status is lost).
pub struct Exited {
    inner: Option<crate::run::Launched>,
}

impl Drop for Exited {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = inner.finish();
        }
    }
}

impl std::fmt::Debug for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exited").finish_non_exhaustive()
    }
}

impl Exited {
    /// Checks what the run changed of what is protected (git's hooks and configuration,
    /// the agent's settings, new repositories; each change reported on standard error,
    /// and in the `landlock` tier put back), merges the agent's state and sweeps its
    /// state directories: the fourth phase.
    pub fn verify(mut self) -> Verified {
        let inner = self.inner.take().map(|mut inner| {
            inner.verify();
            inner
        });
        Verified { inner }
    }

    /// [`Exited::verify`], then [`Verified::report`]: the rest of the run at once.
    ///
    /// # Errors
    ///
    /// The failure that kept the command from starting, or from being waited for.
    pub fn finish(self) -> Result<ExitStatus, SandyError> {
        self.verify().report()
    }
}

/// A run whose end has been checked ([`Exited::verify`]). Dropped without
/// [`Verified::report`], it is reported and cleaned up all the same.
pub struct Verified {
    inner: Option<crate::run::Launched>,
}

impl Drop for Verified {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = inner.report();
        }
    }
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("changed_run", &self.changed_run())
            .finish_non_exhaustive()
    }
}

impl Verified {
    /// When the run changed something protected: the run's id, which `sandy restore
    /// RUN` takes to put the saved copies back.
    pub fn changed_run(&self) -> Option<&str> {
        self.inner
            .as_ref()
            .and_then(crate::run::Launched::changed_run)
    }

    /// Prints the report on standard error (refused connections, the refusal report,
    /// the ceilings the run reached) and removes what the run used (its cgroup, private
    /// directory and bootstrap), putting the caller's signals back: the last phase.
    ///
    /// # Errors
    ///
    /// The failure that kept the command from starting, or from being waited for.
    pub fn report(mut self) -> Result<ExitStatus, SandyError> {
        match self.inner.take() {
            Some(inner) => inner.report().map(ExitStatus),
            None => Err(SandyError::Usage("the run was reported already")),
        }
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
