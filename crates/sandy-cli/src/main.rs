//! `sandy`: run an AI coding agent, and everything it starts, in a Linux process sandbox.
//!
//! This crate is thin: argument parsing ([`args`]), the diagnostics ([`doctor`],
//! [`selftest`]), the other subcommands' text, and exit statuses ([`error`]). A launch,
//! and the hidden bootstrap, is the `sandy` library's one launch path
//! ([`sandy::Command`]).
#![forbid(unsafe_code)]
// Every line Sandy prints goes through `say` (escaped): no other printing.
#![cfg_attr(
    not(test),
    deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)
)]

#[macro_use]
extern crate sandy;

mod args;
mod cache;
mod config;
mod doctor;
mod error;
mod integrations;
mod reference;
mod restore;
mod selftest;
mod setup;
mod trust;
mod why;

use std::process::ExitCode;

use clap::Parser;

/// The allocator of every Sandy process. musl's own (Sandy is built for musl, see
/// `.cargo/config.toml`) gives whole groups of memory back to the kernel as soon as
/// they are free and maps new ones for the next allocation: over a hundred `mmap` and
/// `munmap` pairs, each with its page faults, in one launch from a home with tool caches
/// (about 0.6 ms). dlmalloc keeps what it got, behind a spin lock rather than its own
/// `pthread` mutex ([`sandy_linux::sys::alloc`]). The lock is never held across a fork:
/// Sandy forks only single-threaded processes.
#[global_allocator]
static ALLOCATOR: sandy_linux::sys::alloc::SpinDlmalloc = sandy_linux::sys::alloc::SpinDlmalloc;

fn main() -> ExitCode {
    // Paths under the home are shown as `~/...` in what Sandy prints (its canonical form
    // is added once the host is gathered).
    if let Some(home) = std::env::var_os("HOME") {
        sandy_policy::text::set_home(std::path::Path::new(&home));
    }
    // The weaker tier's line compares with the full tier by this binary's own probe.
    sandy::tier::set_namespace_probe(doctor::namespaces_work);
    // The bootstrap runs on every launch: its fixed argument list is read directly rather
    // than through clap, which would build the whole command tree first.
    let result = match args::BootstrapArgs::from_argv(std::env::args_os()) {
        Some(Ok(b)) => Err(sandy::bootstrap::bootstrap(
            b.manifest_fd,
            b.relay_fd,
            b.observe,
        )),
        // `sandy run`, the command that runs on every launch, is parsed with its own
        // arguments only when it can be (see `RunArgs::from_argv`).
        Some(Err(())) | None => match args::RunArgs::from_argv(std::env::args_os()) {
            Some(run_args) => run_args.run(),
            None => dispatch(args::Cli::parse()),
        },
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            say!("{err}");
            ExitCode::from(error::exit_code(&err))
        }
    }
}

fn dispatch(cli: args::Cli) -> Result<u8, error::SandyError> {
    match cli.command {
        args::Command::Run(run_args) => run_args.run(),
        args::Command::Why(why_args) => why::why(why_args),
        args::Command::Bootstrap(b) => Err(sandy::bootstrap::bootstrap(
            b.manifest_fd,
            b.relay_fd,
            b.observe,
        )),
        args::Command::Doctor(d) => doctor::doctor(d),
        args::Command::Cache(c) => cache::command(c.clear),
        args::Command::Integrations(i) => integrations::command(i),
        args::Command::Probe(p) => doctor::probe(p.layer),
        args::Command::Escape(e) => selftest::escape(e),
        args::Command::Idle => selftest::idle(),
        args::Command::Restore(r) => restore::command(r.run.as_deref()),
        args::Command::Completions(c) => reference::completions(c.shell),
        args::Command::Man => reference::man(),
        args::Command::Setup(s) => setup::setup(s),
        args::Command::Trust(t) => trust::command(t.yes, t.revoke),
        args::Command::Config(c) => match c.command {
            args::ConfigCommand::Init => config::init(),
            args::ConfigCommand::Check => config::check(),
        },
    }
}
