//! Sandy as a library: run a command, and everything it starts, in a Linux process
//! sandbox (Landlock, seccomp, and user, mount, PID and network namespaces), the way
//! `sandy run` does. The `sandy` binary is a thin layer over this crate.
//!
//! A launch goes through typed phases, each handing its result to the next:
//!
//! 1. [`Policy`]: what the caller asks for (grants, network, ceilings, tier).
//! 2. [`Command::prepare`] resolves it against the host into a [`Prepared`] launch: the
//!    resolved policy, which can be inspected ([`Prepared::document`]) before anything
//!    runs.
//! 3. [`Prepared::spawn`] starts the sandbox and the command: a [`Running`] run.
//! 4. [`Running::wait`] waits for it to end: an [`Exited`] run.
//! 5. [`Exited::verify`] checks what the run changed of what is protected and merges the
//!    agent's state: a [`Verified`] run ([`Verified::changed_run`]).
//! 6. [`Verified::report`] reports (on standard error, escaped) and cleans up: the run's
//!    [`ExitStatus`]. [`Exited::finish`] is both.
//!
//! [`Command::status`] does all of it, like [`std::process::Command::status`]:
//!
//! ```no_run
//! let status = sandy::Command::new("cargo")
//!     .arg("build")
//!     .policy(sandy::Policy::new().block_net())
//!     .status()?;
//! assert!(status.success());
//! # Ok::<(), sandy::Error>(())
//! ```
//!
//! # What the caller's process must be
//!
//! Linux only. A launch forks the sandbox's bootstrap from the calling process, so the
//! caller must be **single-threaded** when it prepares and spawns (a program's `main`
//! before it starts threads; checked: [`Error`] otherwise). While a run lasts, the
//! library blocks `SIGCHLD`, `SIGTERM`, `SIGHUP`, `SIGUSR1`, `SIGUSR2`, `SIGCONT` and
//! `SIGTSTP` in the calling thread (it forwards them to the run) and ignores `SIGINT` and
//! `SIGQUIT` (the terminal sends them to the run directly); both are put back when the
//! run is over. Only one run at a time per process.
//!
//! For code that cannot fork a helper or must confine itself, [`restrict`] applies the
//! layers that need no namespace to the calling process, and says which promises that
//! leaves out.
//!
//! # Output
//!
//! Sandy's lines (refusals, warnings, the post-run report) go to standard error, every
//! control character escaped; [`Policy::verbose`] prints the routine ones whole. The
//! library writes nothing to standard output: that is the command's.
//!
//! The modules hidden from this documentation serve the `sandy` binary's other
//! subcommands (`doctor`, `why`, `cache`, `trust`, `restore`, `config`); they are not part
//! of the library's API.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Every line Sandy prints goes through `say` (escaped): no other printing.
#![cfg_attr(
    not(test),
    deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)
)]

#[macro_use]
#[doc(hidden)]
pub mod say;
mod tty;

mod agentstate;
#[doc(hidden)]
pub mod bootstrap;
#[doc(hidden)]
pub mod cache;
#[doc(hidden)]
pub mod ceilings;
mod command;
#[doc(hidden)]
pub mod connects;
mod egress;
#[doc(hidden)]
pub mod error;
mod explain;
mod gitmemo;
mod gitscan;
#[doc(hidden)]
pub mod host;
#[doc(hidden)]
pub mod hostfs;
#[doc(hidden)]
pub mod kontext;
mod placeholders;
mod policy;
#[doc(hidden)]
pub mod policyfiles;
mod restrict;
#[doc(hidden)]
pub mod run;
#[doc(hidden)]
pub mod rundir;
#[doc(hidden)]
pub mod tier;
#[doc(hidden)]
pub mod trust;
#[doc(hidden)]
pub mod verify;
mod views;
mod walk;

pub use command::{Command, ExitStatus, Exited, Prepared, Running, Verified};
pub use error::SandyError as Error;
#[doc(hidden)]
pub use error::{owner_problem, signal_status, SandyError};
pub use policy::{DryRunFormat, ExplainMode, Pattern, Policy, Tier};
pub use restrict::{restrict, Restrictions};
