//! `sandy integrations setup numbat|kontext --agent AGENT`: the trusted, host-side way to install
//! a runtime control (RUNTIME_CONTROLS.md). It runs outside any sandbox only. A healthy
//! registration is reused; otherwise the provider's own setup command runs (found on the
//! caller's `PATH`, with the terminal), and the result is verified the way `sandy run
//! --numbat` would verify it. `sandy run` and `sandy doctor` never install anything.

use std::process::Command;

use crate::args::{IntegrationsArgs, IntegrationsCommand};
use crate::error::{SandyError, EXIT_NOT_ENFORCEABLE};

/// Whether a Numbat installation is kept working for `agent`: `Ok` with one line per
/// recognised registration, or `Err` with the reason and the setup command. The same
/// resolution as a launch with `--numbat`; nothing is run or changed.
pub fn numbat_status(agent: &str) -> Result<Result<Vec<String>, String>, SandyError> {
    let host = sandy::host::gather(&[])?;
    let request = sandy::host::status_request(&host, agent, true);
    match sandy_policy::resolve(&request, &host, &sandy::hostfs::HostFs) {
        Ok(policy) => Ok(Ok(policy
            .hooks
            .iter()
            .filter(|h| h.service == "Numbat")
            .map(|h| {
                format!(
                    "{} registered in {}",
                    h.path.display(),
                    h.configuration.display()
                )
            })
            .collect())),
        Err(e @ sandy_policy::ResolveError::RuntimeControlRequired { .. }) => {
            Ok(Err(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// `sandy integrations ...`.
pub fn command(args: IntegrationsArgs) -> Result<u8, SandyError> {
    let IntegrationsCommand::Setup { provider, agent } = args.command;
    if sandy::host::no_new_privs() {
        return Err(SandyError::Usage(
            "sandy integrations setup runs only outside any sandbox (this process has \
             no_new_privs set): run it in your own terminal",
        ));
    }
    if provider == "kontext" {
        return setup_kontext(&agent);
    }
    let say = |line: String| {
        sandy::say::print_line(&line).map_err(|source| SandyError::Io {
            step: "cannot write the setup report",
            source,
        })
    };
    if let Ok(lines) = numbat_status(&agent)? {
        for line in lines {
            say(format!("Numbat ({agent}): already set up: {line}"))?;
        }
        return Ok(0);
    }
    // The provider's own setup command, as the user, with the terminal.
    say(format!(
        "Numbat ({agent}): running numbat hook install --agent {agent}"
    ))?;
    let status = Command::new("numbat")
        .args(["hook", "install", "--agent", &agent])
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            say(format!(
                "Numbat ({agent}): numbat hook install failed ({})",
                crate::doctor::describe_status(s)
            ))?;
            return Ok(EXIT_NOT_ENFORCEABLE);
        }
        Err(e) => {
            say(format!(
                "Numbat ({agent}): cannot run numbat ({e}); install Numbat and put it on PATH"
            ))?;
            return Ok(EXIT_NOT_ENFORCEABLE);
        }
    }
    match numbat_status(&agent)? {
        Ok(lines) => {
            for line in lines {
                say(format!("Numbat ({agent}): set up: {line}"))?;
            }
            Ok(0)
        }
        Err(reason) => {
            say(format!(
                "Numbat ({agent}): the installation is still not usable: {reason}"
            ))?;
            Ok(EXIT_NOT_ENFORCEABLE)
        }
    }
}

/// `sandy integrations setup kontext --agent claude|codex`: reuses a healthy installation;
/// otherwise runs Kontext's official `kontext setup` (found on `PATH`, with the terminal:
/// it owns authentication, the daemon and the hook registration) and verifies the result
/// as `sandy run --kontext` would. Kontext itself is not installed here: there is no
/// Linux package Sandy could verify, so a missing `kontext` is one line saying so.
fn setup_kontext(agent: &str) -> Result<u8, SandyError> {
    let say = |line: String| {
        sandy::say::print_line(&line).map_err(|source| SandyError::Io {
            step: "cannot write the setup report",
            source,
        })
    };
    if agent == "opencode" {
        say("Kontext: setup is supported for claude and codex".to_owned())?;
        return Ok(EXIT_NOT_ENFORCEABLE);
    }
    if let Ok(version) = sandy::kontext::status(agent)? {
        say(format!(
            "Kontext ({agent}): was already installed and configured ({}); Sandy verified \
             the {agent} registration's runtime capabilities",
            version.as_deref().unwrap_or("unknown version")
        ))?;
        return Ok(0);
    }
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join("kontext"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    if !on_path {
        say(format!(
            "Kontext ({agent}): kontext is not on PATH; install Kontext by its vendor's \
             instructions (upstream documents Homebrew: brew install \
             kontext-security/tap/kontext), then run this command again"
        ))?;
        return Ok(EXIT_NOT_ENFORCEABLE);
    }
    say(format!("Kontext ({agent}): running kontext setup"))?;
    match Command::new("kontext").arg("setup").status() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            say(format!(
                "Kontext ({agent}): kontext setup failed ({})",
                crate::doctor::describe_status(s)
            ))?;
            return Ok(EXIT_NOT_ENFORCEABLE);
        }
        Err(e) => {
            say(format!("Kontext ({agent}): cannot run kontext setup ({e})"))?;
            return Ok(EXIT_NOT_ENFORCEABLE);
        }
    }
    match sandy::kontext::status(agent)? {
        Ok(version) => {
            say(format!(
                "Kontext ({agent}): is now configured ({}); Sandy verified the {agent} \
                 registration's runtime capabilities",
                version.as_deref().unwrap_or("unknown version")
            ))?;
            Ok(0)
        }
        Err(reason) => {
            say(format!(
                "Kontext ({agent}): the installation is still not usable: {reason}"
            ))?;
            Ok(EXIT_NOT_ENFORCEABLE)
        }
    }
}
