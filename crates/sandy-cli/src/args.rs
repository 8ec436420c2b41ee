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
    /// Block the network: a private network namespace with only loopback, so nothing
    /// outside the sandbox (not even the host's own loopback services) is reachable.
    #[arg(long)]
    pub block_net: bool,
    /// With --block-net, relay connections to 127.0.0.1:PORT inside the sandbox to the
    /// host's 127.0.0.1:PORT (repeatable).
    #[arg(
        long = "allow-local-port",
        value_name = "PORT",
        requires = "block_net",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub allow_local_port: Vec<u16>,
    /// With --block-net, allow one local port for an operator-started Numbat OTLP/HTTP
    /// collector. PORT defaults to 4318.
    #[arg(
        long = "numbat-collector",
        value_name = "PORT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "4318",
        requires = "block_net",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub numbat_collector: Option<u16>,
    /// Use this agent profile (claude, codex, gemini, generic, opencode) instead of the
    /// one detected from the command name.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = clap::builder::PossibleValuesParser::new(sandy_policy::builtin_names())
    )]
    pub profile: Option<String>,
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
    /// The inherited socket on which listening sockets for local-port grants are handed
    /// back to the supervisor.
    #[arg(long, value_name = "FD")]
    pub relay_fd: Option<i32>,
}
