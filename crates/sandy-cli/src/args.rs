//! Command-line syntax. Nothing here touches the filesystem or the kernel.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "sandy",
    version,
    about = "Native process sandboxing for AI coding agents",
    long_about = "Runs a command, and every process it starts, so that it can reach the \
                  current project and nothing else it was not explicitly granted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command inside a native process sandbox.
    Run(RunArgs),
    /// Internal: apply the sandbox described by an inherited manifest and exec the target.
    #[command(name = "__bootstrap", hide = true)]
    Bootstrap(BootstrapArgs),
}

#[derive(Debug, Args)]
#[command(
    after_help = "All options go before `--`; everything after it is the command, passed \
                  through byte for byte.\n\nExit status: the command's own, or 128+N when \
                  signal N killed it; 125 when Sandy itself fails, 126 when the command \
                  cannot be executed, 127 when it is not found, 2 for usage errors."
)]
pub struct RunArgs {
    /// Grant read-only access to an existing path (a directory grants its whole subtree).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Grant read/write access to an existing path.
    #[arg(long = "read-write", value_name = "PATH")]
    pub read_write: Vec<PathBuf>,
    /// Print the fully resolved launch as JSON and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The command to run and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// The inherited descriptor holding the launch manifest.
    #[arg(long, value_name = "FD")]
    pub manifest_fd: i32,
}
