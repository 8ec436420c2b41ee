//! A consumer of the library's public API: runs its arguments as a command in a sandbox
//! with the network blocked, shows the profile the policy resolved to, and exits with the
//! command's status.
//!
//! ```sh
//! cargo run -p sandy --example sandboxed -- sh -c 'echo hello > note.txt'
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut command = match sandy::Command::from_argv(argv) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("usage: sandboxed COMMAND [ARG...] ({e})");
            return ExitCode::from(2);
        }
    };
    command.policy(sandy::Policy::new().block_net());
    // The phases one by one: the resolved policy can be looked at before anything runs.
    let prepared = match command.prepare() {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("sandboxed: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    eprintln!("sandboxed: profile '{}'", prepared.profile());
    match prepared.spawn().wait().finish() {
        Ok(status) => ExitCode::from(status.code()),
        Err(e) => {
            eprintln!("sandboxed: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
