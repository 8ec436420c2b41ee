//! `sandy completions SHELL` and `sandy man`: generated from the clap definitions
//! (`clap_complete`, `clap_mangen`), so they never drift from `--help`.

use clap::CommandFactory;

use crate::args::{Cli, CompletionShell};
use crate::error::SandyError;

/// Prints the completion script for `shell`.
pub fn completions(shell: CompletionShell) -> Result<u8, SandyError> {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "sandy", &mut script);
    write(&script, "cannot write the completion script")
}

/// Prints sandy(1): the page clap_mangen makes of the top-level command, then the options
/// of each subcommand a user runs, in a section of its own (`SANDY RUN OPTIONS`, ...).
pub fn man() -> Result<u8, SandyError> {
    let command = Cli::command();
    let mut page = Vec::new();
    let render = |page: &mut Vec<u8>| -> std::io::Result<()> {
        clap_mangen::Man::new(command.clone()).render(page)?;
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut options = Vec::new();
            clap_mangen::Man::new(sub.clone()).render_options_section(&mut options)?;
            let header = format!(".SH \"SANDY {} OPTIONS\"", sub.get_name().to_uppercase());
            let text = String::from_utf8_lossy(&options).replacen(".SH OPTIONS", &header, 1);
            page.extend_from_slice(text.as_bytes());
        }
        Ok(())
    };
    render(&mut page).map_err(|source| SandyError::Io {
        step: "cannot render the manual page",
        source,
    })?;
    write(&page, "cannot write the manual page")
}

fn write(bytes: &[u8], step: &'static str) -> Result<u8, SandyError> {
    sandy::say::print_generated(bytes)
        .map(|()| 0)
        .map_err(|source| SandyError::Io { step, source })
}
