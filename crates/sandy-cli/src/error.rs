//! Sandy's errors ([`sandy::Error`], which also holds the one mapping to exit statuses),
//! and the statuses of the binary's own subcommands.

pub use sandy::error::{exit_code, SandyError};

/// `sandy doctor`: this machine cannot enforce the default sandbox, or a self-test escape
/// succeeded or could not be tested. (A failure of the doctor itself is 125, as for every
/// Sandy failure.)
pub const EXIT_NOT_ENFORCEABLE: u8 = 1;
/// `sandy setup` as a user other than root: it printed the commands to run with sudo.
pub const EXIT_NEEDS_ROOT: u8 = 1;
