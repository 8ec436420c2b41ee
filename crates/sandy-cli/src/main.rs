//! `sandy`: run an AI coding agent, and everything it starts, in a Linux process sandbox.
//!
//! This crate is glue: argument parsing ([`args`]), the supervisor ([`run`]), the hidden
//! bootstrap ([`bootstrap`]), and the one place errors become exit codes ([`error`]).
#![forbid(unsafe_code)]

mod args;
mod bootstrap;
mod error;
mod host;
mod run;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Run(run_args) => run::run(run_args),
        args::Command::Bootstrap(b) => Err(bootstrap::bootstrap(b.manifest_fd, b.relay_fd)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("sandy: {err}");
            ExitCode::from(error::exit_code(&err))
        }
    }
}
